/* Pre-tokenizers: split a text fragment into words before BPE. Hand-written matchers for the regexes real
 * vocabularies name (gpt2, llama3, qwen2, qwen35), written to give exactly what llama.cpp's matchers give;
 * PCRE2 (JIT, UCP) for the others (a list of regexes applied in turn, as llama.cpp does: every match and
 * every gap between matches becomes a piece). */
#ifndef VLLMC_TOKENIZER_PRETOK_H
#define VLLMC_TOKENIZER_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/common.h"

enum pretok_kind {
    PRETOK_GPT2 = 1,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRETOK_LLAMA3,     /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRETOK_QWEN2,      /* as LLAMA3 with \p{N} (one digit) */
    PRETOK_QWEN35,     /* as QWEN2 with [\p{L}\p{M}]+ letter runs */
    PRETOK_REGEX,      /* a list of regexes */
};

#define PRETOK_MAX_REGEX 6
/* The GPT-2 regex as llama.cpp spells it; in a regex list it runs on the hand-written GPT2 matcher. */
#define PRETOK_GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

struct pretok {
    enum pretok_kind kind;
    int n_regex;
    void *re[PRETOK_MAX_REGEX];   /* pcre2_code_8 *, NULL for the hand-written GPT2 step */
};

/* Growable per-call scratch (not shared between threads). */
struct pretok_scratch {
    uint32_t *cp;      /* [n_cp] codepoints */
    uint8_t *fl;       /* [n_cp] category flags */
    uint32_t *bo;      /* [n_cp + 1] byte offset of each codepoint */
    uint32_t *words;   /* word byte lengths, in order */
    uint32_t *tmp;     /* second word list for regex pipelines */
    size_t cap_cp, cap_words, cap_tmp;
    size_t n_words;
    void *md;          /* pcre2_match_data_8 * */
};

/* Compile a kind (regexes only for PRETOK_REGEX). Errors name the regex. */
vllmc_status pretok_init(struct pretok *p, enum pretok_kind kind, const char *const *regexes, int n_regex);
void pretok_free(struct pretok *p);

/* Split text[0..n) (UTF-8 after tok sanitizing, any bytes tolerated) into words: s->words[0..n_words) get
 * the byte lengths, which add up to n. */
vllmc_status pretok_split(const struct pretok *p, const uint8_t *text, size_t n, struct pretok_scratch *s);
void pretok_scratch_free(struct pretok_scratch *s);

#endif
