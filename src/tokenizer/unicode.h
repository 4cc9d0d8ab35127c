/* Unicode helpers for the tokenizers: UTF-8 decoding the way llama.cpp reads text, category flags
 * (Unicode 15.1, generated table), and GPT-2's byte <-> unicode mapping. */
#ifndef VLLMC_TOKENIZER_UNICODE_H
#define VLLMC_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    TOK_U_LETTER = 1,   /* \p{L} */
    TOK_U_NUMBER = 2,   /* \p{N} */
    TOK_U_MARK = 4,     /* \p{M} */
    TOK_U_SPACE = 8,    /* \s (White_Space) */
    TOK_U_PUNCT = 16,   /* \p{P} */
    TOK_U_SYMBOL = 32,  /* \p{S} */
    TOK_U_CONTROL = 64, /* \p{C} except unassigned */
    TOK_U_UNDEF = 128,  /* unassigned (Cn) */
};

extern const uint16_t tok_unicode_stage1[0x110000 >> 8];
extern const uint8_t tok_unicode_stage2[][256];

static inline unsigned tok_unicode_flags(uint32_t cp) {
    if (cp >= 0x110000) return TOK_U_UNDEF;
    return tok_unicode_stage2[tok_unicode_stage1[cp >> 8]][cp & 255];
}

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes), as llama.cpp. */
static inline size_t tok_utf8_len(uint8_t c) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* Decode one codepoint at s[*i] (n bytes total). Lenient like llama.cpp: overlong forms and surrogates
 * decode to their value; a malformed or truncated sequence consumes one byte and gives U+FFFD. */
uint32_t tok_utf8_decode(const uint8_t *s, size_t n, size_t *i);
/* Encode cp (<= 0x10FFFF) into out (4 bytes room); returns the length. */
size_t tok_utf8_encode(uint32_t cp, uint8_t *out);
/* Length of the longest prefix of s that is complete, valid UTF-8 (strict: no overlongs/surrogates). */
size_t tok_utf8_valid_prefix(const uint8_t *s, size_t n);

/* GPT-2 byte-level mapping: byte b <-> one codepoint. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 if cp is not in the mapping */

#endif
