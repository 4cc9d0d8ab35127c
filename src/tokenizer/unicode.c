/* UTF-8 decode/encode as the tokenizers need it, and GPT-2's byte <-> unicode mapping.
 * Decoding is deliberately lenient in the way llama.cpp reads text, so pre-tokenization agrees with it
 * on odd input; the strict validator is for the streaming detokenizer. */
#include "tokenizer/unicode.h"

uint32_t tok_utf8_decode(const uint8_t *s, size_t n, size_t *i) {
    size_t p = *i;
    uint8_t c = s[p];
    if (c < 0x80) { *i = p + 1; return c; }
    if (!(c & 0x40)) goto bad;
    if (!(c & 0x20)) {
        if (p + 1 >= n || (s[p + 1] & 0xC0) != 0x80) goto bad;
        *i = p + 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[p + 1] & 0x3F);
    }
    if (!(c & 0x10)) {
        if (p + 2 >= n || (s[p + 1] & 0xC0) != 0x80 || (s[p + 2] & 0xC0) != 0x80) goto bad;
        *i = p + 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[p + 1] & 0x3F) << 6) | (s[p + 2] & 0x3F);
    }
    if (!(c & 0x08)) {
        if (p + 3 >= n || (s[p + 1] & 0xC0) != 0x80 || (s[p + 2] & 0xC0) != 0x80 || (s[p + 3] & 0xC0) != 0x80)
            goto bad;
        uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[p + 1] & 0x3F) << 12) |
                      ((uint32_t)(s[p + 2] & 0x3F) << 6) | (s[p + 3] & 0x3F);
        if (cp > 0x10FFFF) goto bad; /* cannot be re-encoded */
        *i = p + 4;
        return cp;
    }
bad:
    *i = p + 1;
    return 0xFFFD;
}

size_t tok_utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tok_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return i;
        if (i + k >= n) return i; /* truncated */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i;
        i += k + 1;
    }
    return i;
}

/* GPT-2: printable latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order. */
static int tok_byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 others, in byte order: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1). */
uint32_t tok_byte_to_cp(uint8_t b) {
    if (tok_byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return tok_byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + (n - 33));
    return 0xAD;
}
