/* Pre-tokenizers (see pretok.h). The hand-written matchers walk codepoints with their category flags and
 * take the first alternative of the regex that matches at each position, exactly as the regex would
 * (and as llama.cpp's matchers do); tests check them against PCRE2 running the regex itself. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretok.h"

#include <pcre2.h>
#include <string.h>
#include "tokenizer/unicode.h"

static int pretok_reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int pretok_push(struct pretok_scratch *s, uint32_t len) {
    if (!pretok_reserve((void **)&s->words, &s->cap_words, s->n_words + 1, sizeof(uint32_t))) return 0;
    s->words[s->n_words++] = len;
    return 1;
}

/* Decode text into s->cp / s->fl / s->bo. */
static vllmc_status pretok_decode(const uint8_t *text, size_t n, struct pretok_scratch *s, size_t *n_cp) {
    if (n > UINT32_MAX - 1) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: text of %zu bytes is too long", n);
    if (n + 1 > s->cap_cp) {
        size_t c = s->cap_cp ? s->cap_cp : 256;
        while (c < n + 1) c *= 2;
        uint32_t *cp = realloc(s->cp, c * sizeof(uint32_t));
        if (cp) s->cp = cp;
        uint32_t *bo = realloc(s->bo, c * sizeof(uint32_t));
        if (bo) s->bo = bo;
        uint8_t *fl = realloc(s->fl, c);
        if (fl) s->fl = fl;
        if (!cp || !bo || !fl) goto oom;
        s->cap_cp = c;
    }
    size_t i = 0, k = 0;
    while (i < n) {
        s->bo[k] = (uint32_t)i;
        uint32_t c = tok_utf8_decode(text, n, &i);
        s->cp[k] = c;
        s->fl[k] = (uint8_t)tok_unicode_flags(c);
        k++;
    }
    s->bo[k] = (uint32_t)n;
    *n_cp = k;
    return VLLMC_OK;
oom:
    return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory for %zu bytes of text", n);
}

static inline uint32_t pretok_lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* Contraction at pos ('s 't 'm 'd 're 've 'll): returns its length in codepoints, 0 if none. */
static size_t pretok_contraction(const uint32_t *cp, size_t pos, size_t e, bool icase) {
    if (cp[pos] != '\'' || pos + 1 >= e) return 0;
    uint32_t a = icase ? pretok_lower_ascii(cp[pos + 1]) : cp[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= e) return 0;
    uint32_t b = icase ? pretok_lower_ascii(cp[pos + 2]) : cp[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* Split codepoints [b, e) with a hand-written matcher; pushes word byte lengths. */
static int pretok_split_hand(enum pretok_kind kind, struct pretok_scratch *s, size_t b, size_t e) {
    const uint32_t *cp = s->cp;
    const uint8_t *fl = s->fl;
    const uint32_t *bo = s->bo;
    size_t prev = b, pos = b;
#define FL(i) ((i) < e ? fl[i] : 0u)
#define EMIT(end) do { size_t end_ = (end); if (end_ > prev) { if (!pretok_push(s, bo[end_] - bo[prev])) return 0; } \
                       prev = end_; pos = end_; } while (0)
    if (kind == PRETOK_GPT2) {
        while (pos < e) {
            uint32_t c = cp[pos];
            size_t k = pretok_contraction(cp, pos, e, false);
            if (k) { EMIT(pos + k); continue; }
            unsigned f2 = c == ' ' ? FL(pos + 1) : fl[pos];
            unsigned cls = 0;
            if (f2 & TOK_U_LETTER) cls = TOK_U_LETTER;
            else if (f2 & TOK_U_NUMBER) cls = TOK_U_NUMBER;
            if (cls) {
                size_t q = pos + (c == ' ');
                while (q < e && (fl[q] & cls)) q++;
                EMIT(q);
                continue;
            }
            if (f2 && !(f2 & (TOK_U_SPACE | TOK_U_LETTER | TOK_U_NUMBER))) {
                size_t q = pos + (c == ' ');
                while (q < e && !(fl[q] & (TOK_U_SPACE | TOK_U_LETTER | TOK_U_NUMBER))) q++;
                EMIT(q);
                continue;
            }
            size_t nws = 0;
            while (pos + nws < e && (fl[pos + nws] & TOK_U_SPACE)) nws++;
            if (nws > 1 && pos + nws < e) { EMIT(pos + nws - 1); continue; }
            if (nws > 0) { EMIT(pos + nws); continue; }
            EMIT(pos + 1);
        }
        return 1;
    }
    const unsigned letter = TOK_U_LETTER | (kind == PRETOK_QWEN35 ? TOK_U_MARK : 0);
    const unsigned excl = TOK_U_SPACE | TOK_U_LETTER | TOK_U_NUMBER | (kind == PRETOK_QWEN35 ? TOK_U_MARK : 0);
    const size_t max_digits = kind == PRETOK_LLAMA3 ? 3 : 1;
    while (pos < e) {
        uint32_t c = cp[pos];
        unsigned f = fl[pos];
        size_t k = pretok_contraction(cp, pos, e, true);
        if (k) { EMIT(pos + k); continue; }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(c == '\r' || c == '\n' || (f & TOK_U_NUMBER)) && ((f & letter) || (FL(pos + 1) & letter))) {
            size_t q = pos + 1;
            while (q < e && (fl[q] & letter)) q++;
            EMIT(q);
            continue;
        }
        /* \p{N}{1,max_digits} */
        if (f & TOK_U_NUMBER) {
            size_t q = pos;
            while (q < e && (fl[q] & TOK_U_NUMBER) && q - pos < max_digits) q++;
            EMIT(q);
            continue;
        }
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        unsigned f2 = c == ' ' ? FL(pos + 1) : f;
        if (!(f2 & excl)) {
            size_t q = pos + (c == ' ');
            while (q < e && !(fl[q] & excl)) q++;
            while (q < e && (cp[q] == '\r' || cp[q] == '\n')) q++;
            EMIT(q);
            continue;
        }
        size_t nws = 0, last_nl = 0;
        while (pos + nws < e && (fl[pos + nws] & TOK_U_SPACE)) {
            if (cp[pos + nws] == '\r' || cp[pos + nws] == '\n') last_nl = pos + nws + 1;
            nws++;
        }
        if (last_nl) { EMIT(last_nl); continue; }                  /* \s*[\r\n]+ */
        if (nws > 1 && pos + nws < e) { EMIT(pos + nws - 1); continue; } /* \s+(?!\S) */
        if (nws > 0) { EMIT(pos + nws); continue; }                 /* \s+ */
        EMIT(pos + 1);
    }
    return 1;
#undef FL
#undef EMIT
}

vllmc_status pretok_init(struct pretok *p, enum pretok_kind kind, const char *const *regexes, int n_regex) {
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    if (kind != PRETOK_REGEX) return VLLMC_OK;
    if (n_regex < 1 || n_regex > PRETOK_MAX_REGEX)
        return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: %d pre-tokenizer regexes (1..%d)", n_regex, PRETOK_MAX_REGEX);
    for (int i = 0; i < n_regex; i++) {
        p->n_regex = i + 1;
        if (!strcmp(regexes[i], PRETOK_GPT2_REGEX)) { p->re[i] = NULL; continue; }
        int err = 0;
        PCRE2_SIZE off = 0;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)regexes[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            pretok_free(p);
            return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: regex '%s' at %zu: %s", regexes[i], (size_t)off, (char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
        p->re[i] = re;
    }
    return VLLMC_OK;
}

void pretok_free(struct pretok *p) {
    if (!p) return;
    for (int i = 0; i < PRETOK_MAX_REGEX; i++) {
        if (p->re[i]) pcre2_code_free((pcre2_code *)p->re[i]);
        p->re[i] = NULL;
    }
}

void pretok_scratch_free(struct pretok_scratch *s) {
    if (!s) return;
    free(s->cp);
    free(s->fl);
    free(s->bo);
    free(s->words);
    free(s->tmp);
    if (s->md) pcre2_match_data_free((pcre2_match_data *)s->md);
    memset(s, 0, sizeof(*s));
}

/* Codepoint index of a byte offset (offsets are always codepoint boundaries). */
static size_t pretok_cp_index(const struct pretok_scratch *s, size_t n_cp, uint32_t byte_off) {
    size_t lo = 0, hi = n_cp;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->bo[mid] < byte_off) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static vllmc_status pretok_split_regex_one(const struct pretok *p, int ri, const uint8_t *text, size_t piece_off,
                                           size_t piece_len, struct pretok_scratch *s) {
    pcre2_code *re = (pcre2_code *)p->re[ri];
    pcre2_match_data *md = (pcre2_match_data *)s->md;
    const uint8_t *sub = text + piece_off;
    size_t at = 0, last = 0;
    while (at < piece_len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)sub, piece_len, at, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: regex match failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one codepoint */
            at = ms + 1;
            while (at < piece_len && (sub[at] & 0xC0) == 0x80) at++;
            continue;
        }
        if (ms > last && !pretok_push(s, (uint32_t)(ms - last))) goto oom;
        if (!pretok_push(s, (uint32_t)(me - ms))) goto oom;
        last = at = me;
    }
    if (piece_len > last && !pretok_push(s, (uint32_t)(piece_len - last))) goto oom;
    return VLLMC_OK;
oom:
    return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
}

vllmc_status pretok_split(const struct pretok *p, const uint8_t *text, size_t n, struct pretok_scratch *s) {
    s->n_words = 0;
    if (n == 0) return VLLMC_OK;
    size_t n_cp = 0;
    vllmc_status st = pretok_decode(text, n, s, &n_cp);
    if (st != VLLMC_OK) return st;
    if (p->kind != PRETOK_REGEX) {
        if (!pretok_split_hand(p->kind, s, 0, n_cp)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
        return VLLMC_OK;
    }
    if (!s->md) {
        s->md = pcre2_match_data_create(1, NULL);
        if (!s->md) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    }
    /* start with one piece (the whole text), refine with each regex in turn */
    if (!pretok_push(s, (uint32_t)n)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    for (int ri = 0; ri < p->n_regex; ri++) {
        /* move the current pieces to tmp, then split each into s->words */
        if (!pretok_reserve((void **)&s->tmp, &s->cap_tmp, s->n_words, sizeof(uint32_t)))
            return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
        size_t n_pieces = s->n_words;
        memcpy(s->tmp, s->words, n_pieces * sizeof(uint32_t));
        s->n_words = 0;
        size_t off = 0;
        for (size_t i = 0; i < n_pieces; i++) {
            size_t len = s->tmp[i];
            if (!p->re[ri]) {
                size_t b = pretok_cp_index(s, n_cp, (uint32_t)off), e = pretok_cp_index(s, n_cp, (uint32_t)(off + len));
                if (!pretok_split_hand(PRETOK_GPT2, s, b, e)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
            } else {
                st = pretok_split_regex_one(p, ri, text, off, len, s);
                if (st != VLLMC_OK) return st;
            }
            off += len;
        }
    }
    return VLLMC_OK;
}
