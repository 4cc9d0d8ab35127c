/* Tokenizer unit tests on in-memory vocabularies and fresh random text:
 * - hand-written pre-tokenizers (gpt2, llama3, qwen2, qwen35) == PCRE2 running the regex itself;
 * - byte-level BPE == a plain reference BPE (lowest rank, leftmost first) on random merges;
 * - SentencePiece BPE with byte fallback == a plain reference (best score, leftmost first);
 * - special tokens (parse switch, user-defined always, longest first), BOS/EOS, output bounds;
 * - decode and the streaming detokenizer (UTF-8-complete chunks that add up to decode);
 * - loading from a GGUF image written by our writer, and load errors. */
#include <pthread.h>
#include <string.h>
#include "test.h"
#include "gguf/gguf.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

static uint32_t rnd(uint32_t n) { return (uint32_t)(test_rand_u64() % n); }

/* ---------------------------------------------------------------- pre-tokenizers vs PCRE2 */

static const uint32_t test_pool[] = {
    'a', 'b', 'c', 'Z', 'e', 's', 'S', 't', 'T', 'l', 'L', 'r', 'E', 'v', 'm', 'd', 'D', 'x', '0', '1', '7', '9',
    ' ', ' ', ' ', ' ', '\t', '\n', '\n', '\r', 0x0B, 0x0C, '\'', '\'', '\'', '!', '?', '.', ',', '-', '_', '(', ')', '$', '+',
    '<', '>', '|', '^', '~', '`', '"', '#', '@', 0x7F, 0x01,
    0xA0, 0x85, 0x2028, 0x3000, 0x2009, 0x1680, 0x200B, 0x200D, 0xFEFF, 0xAD,              /* spaces and formats */
    0xE9, 0xC4, 0xDF, 0x3B1, 0x416, 0x44F, 0x5D0, 0x627, 0x915, 0xE01, 0x4E2D, 0x6587, 0x3042, 0xAC00, /* letters */
    0x300, 0x301, 0x308, 0x94D, 0x93F, 0xE31, 0x20DD, 0xFE0F,                               /* marks */
    0x660, 0x669, 0xFF11, 0xB2, 0xBD, 0x2162, 0x2460,                                       /* numbers */
    0xA7, 0xB6, 0x2014, 0x201C, 0x3002, 0xFF01, 0x20AC, 0xA9, 0x2665, 0x1F600, 0x1F999, 0x1F3FD, 0xFFFD, /* P, S */
    0xE000, 0x378, 0xFFFF,                                                                  /* private, unassigned */
};

static size_t test_rand_text(uint8_t *buf, size_t max_cp) {
    size_t n = 0, k = 1 + rnd((uint32_t)max_cp);
    for (size_t i = 0; i < k; i++) n += tok_utf8_encode(test_pool[rnd(ARRAY_LEN(test_pool))], buf + n);
    return n;
}

static void test_pretok_vs_pcre2(void) {
    static const struct { enum pretok_kind kind; const char *regex; const char *name; } cases[] = {
        {PRETOK_GPT2, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "gpt2"},
        {PRETOK_LLAMA3, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "llama3"},
        {PRETOK_QWEN2, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                       "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "qwen2"},
        {PRETOK_QWEN35, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "qwen35"},
    };
    uint8_t text[4 * 64];
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        struct pretok hand, re;
        CHECK(pretok_init(&hand, cases[c].kind, NULL, 0) == VLLMC_OK);
        const char *rx[1] = {cases[c].regex};
        CHECK(pretok_init(&re, PRETOK_REGEX, rx, 1) == VLLMC_OK);
        struct pretok_scratch sh = {0}, sr = {0};
        int bad = 0;
        for (int it = 0; it < 20000; it++) {
            size_t n = test_rand_text(text, 48);
            if (pretok_split(&hand, text, n, &sh) != VLLMC_OK || pretok_split(&re, text, n, &sr) != VLLMC_OK) { bad++; continue; }
            bool same = sh.n_words == sr.n_words && !memcmp(sh.words, sr.words, sh.n_words * sizeof(uint32_t));
            uint64_t sum = 0;
            for (size_t w = 0; w < sh.n_words; w++) sum += sh.words[w];
            if (!same || sum != n) {
                if (bad++ < 3) {
                    fprintf(stderr, "%s: hand %zu words, pcre2 %zu words for:", cases[c].name, sh.n_words, sr.n_words);
                    for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", text[i]);
                    fputc('\n', stderr);
                }
            }
        }
        CHECK_MSG(bad == 0, "%s: %d of 20000 random texts split differently", cases[c].name, bad);
        pretok_scratch_free(&sh);
        pretok_scratch_free(&sr);
        pretok_free(&hand);
        pretok_free(&re);
    }
    /* known splits */
    struct pretok q;
    struct pretok_scratch s = {0};
    CHECK(pretok_init(&q, PRETOK_QWEN35, NULL, 0) == VLLMC_OK);
    const char *txt = "Hello world's  1234\n\n e\xcc\x81!";
    CHECK(pretok_split(&q, (const uint8_t *)txt, strlen(txt), &s) == VLLMC_OK);
    /* Hello| world|'s| | |1|2|3|4|\n\n| e\u0301|! */
    static const uint32_t want[] = {5, 6, 2, 1, 1, 1, 1, 1, 1, 2, 4, 1};
    CHECK(s.n_words == ARRAY_LEN(want) && !memcmp(s.words, want, sizeof(want)));
    pretok_scratch_free(&s);
    pretok_free(&q);
}

/* ---------------------------------------------------------------- byte-level BPE vs reference */

struct test_vocab {
    char **tok;        /* GGUF texts */
    size_t n, cap;
    char **merge;
    size_t n_merges, cap_merges;
};

static void tv_add(struct test_vocab *v, const char *s) {
    if (v->n == v->cap) { v->cap = v->cap ? v->cap * 2 : 512; v->tok = realloc(v->tok, v->cap * sizeof(char *)); }
    v->tok[v->n++] = strdup(s);
}

static int tv_find(const struct test_vocab *v, const char *s) {
    for (size_t i = v->n; i-- > 0;)
        if (!strcmp(v->tok[i], s)) return (int)i;
    return -1;
}

static void tv_free(struct test_vocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->tok[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
    free(v->tok);
    free(v->merge);
}

static struct gguf_str *tv_strs(char **a, size_t n) {
    struct gguf_str *s = calloc(n ? n : 1, sizeof(*s));
    for (size_t i = 0; i < n; i++) s[i] = (struct gguf_str){a[i], strlen(a[i])};
    return s;
}

/* GPT-2 form of one byte */
static void test_byte_char(uint8_t b, char *out) {
    size_t n = tok_utf8_encode(tok_byte_to_cp(b), (uint8_t *)out);
    out[n] = 0;
}

/* Reference BPE on a word of raw bytes: symbols as strings, merge the lowest-ranked adjacent pair (leftmost). */
static size_t ref_bpe(const struct test_vocab *v, const uint8_t *w, size_t n, int32_t *out, bool *virt) {
    char sym[256][64];
    size_t k = n;
    for (size_t i = 0; i < n; i++) test_byte_char(w[i], sym[i]);
    for (;;) {
        size_t best = SIZE_MAX, at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            char pair[130];
            snprintf(pair, sizeof(pair), "%.63s %.63s", sym[i], sym[i + 1]); /* symbols are < 64 bytes */
            for (size_t r = 0; r < v->n_merges && r < best; r++)
                if (!strcmp(v->merge[r], pair)) { best = r; at = i; break; }
        }
        if (best == SIZE_MAX) break;
        size_t la = strlen(sym[at]), lb = strlen(sym[at + 1]);
        if (la + lb >= sizeof(sym[0])) break; /* merged symbols are at most 24 bytes here */
        memcpy(sym[at] + la, sym[at + 1], lb + 1);
        memmove(sym[at + 1], sym[at + 2], (k - at - 2) * sizeof(sym[0]));
        k--;
    }
    /* a merge result without a token is spelled out as llama.cpp does: each byte of its text that is a
     * one-byte token (ASCII characters only), other bytes dropped */
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        int id = tv_find(v, sym[i]);
        if (id >= 0) { out[m++] = id; continue; }
        *virt = true;
        for (const char *c = sym[i]; *c; c++) {
            char one[2] = {*c, 0};
            int b = tv_find(v, one);
            if (b >= 0) out[m++] = b;
        }
    }
    return m;
}

static void test_bpe_vs_reference(void) {
    struct test_vocab v = {0};
    char c[8];
    for (int b = 0; b < 256; b++) { test_byte_char((uint8_t)b, c); tv_add(&v, c); }
    /* random merges over a small alphabet, so they actually fire */
    const char *alpha = "abcde";
    char *pieces[400];
    size_t n_pieces = 0;
    for (const char *p = alpha; *p; p++) { char s[2] = {*p, 0}; pieces[n_pieces++] = strdup(s); }
    test_byte_char(' ', c);
    pieces[n_pieces++] = strdup(c);
    while (v.n_merges < 150) {
        const char *l = pieces[rnd((uint32_t)n_pieces)], *r = pieces[rnd((uint32_t)n_pieces)];
        if (strlen(l) + strlen(r) > 12) continue;
        if (!strcmp(r, c)) continue; /* Ġ only at the start of a word */
        char m[64], cat[64];
        snprintf(m, sizeof(m), "%s %s", l, r);
        snprintf(cat, sizeof(cat), "%s%s", l, r);
        bool dup = false;
        for (size_t i = 0; i < v.n_merges; i++) dup |= !strcmp(v.merge[i], m);
        if (dup) continue;
        if (v.n_merges == v.cap_merges) { v.cap_merges = v.cap_merges ? v.cap_merges * 2 : 64; v.merge = realloc(v.merge, v.cap_merges * sizeof(char *)); }
        v.merge[v.n_merges++] = strdup(m);
        if (rnd(10)) { /* most results are tokens; some are not (llama.cpp then spells them out) */
            if (tv_find(&v, cat) < 0) tv_add(&v, cat);
        }
        if (n_pieces < ARRAY_LEN(pieces)) pieces[n_pieces++] = strdup(cat);
    }
    struct gguf_str *toks = tv_strs(v.tok, v.n), *merges = tv_strs(v.merge, v.n_merges);
    struct tokenizer_spec spec = {.model = "gpt2", .pre = "qwen2", .n_tokens = (uint32_t)v.n, .tokens = toks,
                                  .n_merges = (uint32_t)v.n_merges, .merges = merges,
                                  .bos_id = -1, .eos_id = -1, .eot_id = -1, .unk_id = -1, .pad_id = -1};
    struct tokenizer *t = NULL;
    CHECK(tokenizer_create(&spec, &t) == VLLMC_OK);
    if (!t) return;
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        /* words: optional space + letters from the alphabet (one qwen2 pre-token each) */
        char text[512];
        size_t n = 0;
        int32_t want[1024], got[1024];
        size_t n_want = 0, n_got = 0;
        bool has_virtual = false;
        int n_words = 1 + (int)rnd(6);
        for (int w = 0; w < n_words; w++) {
            size_t start = n;
            if (w > 0 || rnd(2)) text[n++] = ' ';
            size_t len = 1 + rnd(w == 0 && it % 50 == 0 ? 200 : 14);
            for (size_t i = 0; i < len; i++) text[n++] = alpha[rnd(5)];
            int32_t ids[512];
            size_t k = ref_bpe(&v, (const uint8_t *)text + start, n - start, ids, &has_virtual);
            memcpy(want + n_want, ids, k * sizeof(int32_t));
            n_want += k;
        }
        CHECK(tokenizer_encode(t, text, n, 0, got, ARRAY_LEN(got), &n_got) == VLLMC_OK);
        bool same = n_got == n_want && !memcmp(got, want, n_want * sizeof(int32_t));
        if (!same && bad++ < 3) fprintf(stderr, "bpe mismatch on '%.*s': %zu vs %zu ids\n", (int)n, text, n_got, n_want);
        /* decode gives the text back unless a spelled-out merge result dropped a non-ASCII character */
        char dec[1024];
        size_t n_dec;
        CHECK(tokenizer_decode(t, got, n_got, 0, dec, sizeof(dec), &n_dec) == VLLMC_OK);
        if (!has_virtual) CHECK(n_dec == n && !memcmp(dec, text, n));
    }
    CHECK_MSG(bad == 0, "%d of 3000 random texts differ from the reference BPE", bad);
    tokenizer_destroy(t);
    free(toks);
    free(merges);
    for (size_t i = 0; i < n_pieces; i++) free(pieces[i]);
    tv_free(&v);
}

/* ---------------------------------------------------------------- SPM vs reference */

struct spm_vocab { char **tok; float *score; int32_t *type; size_t n; };

static int spm_find(const struct spm_vocab *v, const char *s, size_t n) {
    for (size_t i = v->n; i-- > 0;)
        if (strlen(v->tok[i]) == n && !memcmp(v->tok[i], s, n)) return (int)i;
    return -1;
}

static size_t ref_spm(const struct spm_vocab *v, const char *esc, size_t n, int32_t *out) {
    size_t st[512], len[512], k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = tok_utf8_len((uint8_t)esc[i]);
        if (l > n - i) l = n - i;
        st[k] = i; len[k] = l; k++;
        i += l;
    }
    for (;;) {
        int best = -1;
        float bs = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            int id = spm_find(v, esc + st[i], len[i] + len[i + 1]);
            if (id >= 0 && (best < 0 || v->score[id] > bs)) { best = (int)i; bs = v->score[id]; }
        }
        if (best < 0) break;
        len[best] += len[best + 1];
        memmove(st + best + 1, st + best + 2, (k - best - 2) * sizeof(size_t));
        memmove(len + best + 1, len + best + 2, (k - best - 2) * sizeof(size_t));
        k--;
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        int id = spm_find(v, esc + st[i], len[i]);
        if (id >= 0) { out[m++] = id; continue; }
        for (size_t j = 0; j < len[i]; j++) {
            char hex[8];
            snprintf(hex, sizeof(hex), "<0x%02X>", (uint8_t)esc[st[i] + j]);
            out[m++] = spm_find(v, hex, 6);
        }
    }
    return m;
}

static void test_spm_vs_reference(void) {
    struct spm_vocab v = {0};
    size_t cap = 600;
    v.tok = calloc(cap, sizeof(char *));
    v.score = calloc(cap, sizeof(float));
    v.type = calloc(cap, sizeof(int32_t));
    const char *fixed[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) { v.tok[v.n] = strdup(fixed[i]); v.type[v.n] = i ? TOKENIZER_TOKEN_CONTROL : TOKENIZER_TOKEN_UNKNOWN; v.n++; }
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        v.tok[v.n] = strdup(hex); v.type[v.n] = TOKENIZER_TOKEN_BYTE; v.n++;
    }
    /* pieces over "ab▁é" with random scores (distinct, so ties do not depend on order) */
    const char *units[] = {"a", "b", "\xe2\x96\x81", "\xc3\xa9", "c"};
    for (size_t i = 0; i < ARRAY_LEN(units); i++) { /* every single unit is a token (as in real vocabularies) */
        v.tok[v.n] = strdup(units[i]); v.score[v.n] = -1000.0f - (float)i; v.type[v.n] = TOKENIZER_TOKEN_NORMAL; v.n++;
    }
    while (v.n < cap) {
        char s[64] = "";
        size_t parts = 1 + rnd(4);
        for (size_t i = 0; i < parts; i++) strcat(s, units[rnd(ARRAY_LEN(units) - (v.n % 7 == 0 ? 0 : 1))]);
        if (spm_find(&v, s, strlen(s)) >= 0) continue;
        v.tok[v.n] = strdup(s);
        v.score[v.n] = -(float)v.n + 0.25f * (float)rnd(3);
        v.type[v.n] = TOKENIZER_TOKEN_NORMAL;
        v.n++;
    }
    struct gguf_str *toks = tv_strs(v.tok, v.n);
    struct tokenizer_spec spec = {.model = "llama", .n_tokens = (uint32_t)v.n, .tokens = toks, .types = v.type,
                                  .scores = v.score, .bos_id = 1, .eos_id = 2, .eot_id = -1, .unk_id = 0, .pad_id = -1,
                                  .add_bos = true, .add_space_prefix = 1};
    struct tokenizer *t = NULL;
    CHECK(tokenizer_create(&spec, &t) == VLLMC_OK);
    if (!t) return;
    int bad = 0;
    const char *chars[] = {"a", "b", " ", "\xc3\xa9", "c", "d", "\xe4\xb8\xad", "\xf0\x9f\x98\x80"};
    for (int it = 0; it < 3000; it++) {
        char text[256], esc[1024];
        size_t n = 0, m = 0;
        size_t k = 1 + rnd(30);
        for (size_t i = 0; i < k; i++) { const char *c = chars[rnd(ARRAY_LEN(chars))]; memcpy(text + n, c, strlen(c)); n += strlen(c); }
        memcpy(esc, "\xe2\x96\x81", 3);
        m = 3;
        for (size_t i = 0; i < n; i++) {
            if (text[i] == ' ') { memcpy(esc + m, "\xe2\x96\x81", 3); m += 3; }
            else esc[m++] = text[i];
        }
        int32_t want[1024], got[1024];
        want[0] = 1; /* BOS */
        size_t n_want = 1 + ref_spm(&v, esc, m, want + 1), n_got = 0;
        CHECK(tokenizer_encode(t, text, n, TOKENIZER_ENCODE_ADD_SPECIAL, got, ARRAY_LEN(got), &n_got) == VLLMC_OK);
        if (!(n_got == n_want && !memcmp(got, want, n_want * sizeof(int32_t))) && bad++ < 3)
            fprintf(stderr, "spm mismatch on '%.*s': %zu vs %zu ids\n", (int)n, text, n_got, n_want);
        /* decode drops BOS (skip special) and the added space prefix */
        char dec[1024];
        size_t n_dec;
        CHECK_MSG(tokenizer_decode(t, got, n_got, TOKENIZER_DECODE_SKIP_SPECIAL, dec, sizeof(dec), &n_dec) == VLLMC_OK &&
                  n_dec == n && !memcmp(dec, text, n), "'%.*s' -> '%.*s'", (int)n, text, (int)n_dec, dec);
    }
    CHECK_MSG(bad == 0, "%d of 3000 random texts differ from the reference SPM", bad);
    /* specials: <s> in text is parsed only with the switch, and a fragment after it gets a space prefix */
    int32_t ids[64];
    size_t n_ids;
    CHECK(tokenizer_encode(t, "a</s>a", 6, TOKENIZER_ENCODE_PARSE_SPECIAL, ids, 64, &n_ids) == VLLMC_OK);
    bool has_eos = false;
    for (size_t i = 0; i < n_ids; i++) has_eos |= ids[i] == 2;
    CHECK(has_eos);
    CHECK(tokenizer_encode(t, "a</s>a", 6, 0, ids, 64, &n_ids) == VLLMC_OK);
    has_eos = false;
    for (size_t i = 0; i < n_ids; i++) has_eos |= ids[i] == 2;
    CHECK(!has_eos);
    tokenizer_destroy(t);
    free(toks);
    for (size_t i = 0; i < v.n; i++) free(v.tok[i]);
    free(v.tok);
    free(v.score);
    free(v.type);
}

/* ---------------------------------------------------------------- specials, bounds, decode, stream, GGUF */

/* A small qwen-like byte-level vocabulary: 256 byte tokens, a few merges, special tokens. */
static struct tokenizer *make_small_bpe(const char *pre, bool add_bos) {
    static char store[300][16];
    static const char *merges_txt[] = {"a b", "ab c", "\xc4\xa0 ab", "\xc3\xa4 \xc2\xb8"}; /* last: bytes of 中 */
    const char *specials[] = {"<|im_end|>", "<|im_start|>", "<think>", "<|im_end|>x", "\xe4\xb8\xad"};
    struct gguf_str toks[300], merges[4];
    int32_t types[300];
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) { test_byte_char((uint8_t)b, store[n]); toks[n] = (struct gguf_str){store[n], strlen(store[n])}; types[n++] = 1; }
    const char *extra[] = {"ab", "abc", "\304\240ab", "\xc3\xa4\xc2\xb8"}; /* \304\240 = U+0120 (GPT-2 space) */
    for (int i = 0; i < 4; i++) { toks[n] = (struct gguf_str){extra[i], strlen(extra[i])}; types[n++] = 1; }
    for (int i = 0; i < 5; i++) { toks[n] = (struct gguf_str){specials[i], strlen(specials[i])}; types[n++] = i == 2 || i == 4 ? 4 : 3; }
    for (int i = 0; i < 4; i++) merges[i] = (struct gguf_str){merges_txt[i], strlen(merges_txt[i])};
    struct tokenizer_spec spec = {.model = "gpt2", .pre = pre, .n_tokens = n, .tokens = toks, .types = types, .n_merges = 4,
                                  .merges = merges, .bos_id = 261, .eos_id = 260, .eot_id = -1, .unk_id = -1, .pad_id = -1,
                                  .add_bos = add_bos};
    struct tokenizer *t = NULL;
    vllmc_status st = tokenizer_create(&spec, &t);
    CHECK(st == VLLMC_OK);
    return st == VLLMC_OK ? t : NULL;
}

static void test_specials_and_bounds(void) {
    struct tokenizer *t = make_small_bpe("qwen2", false);
    if (!t) return;
    int32_t ids[64];
    size_t n;
    /* longest special first: "<|im_end|>x" beats "<|im_end|>" */
    const char *s = "abc<|im_end|>x<|im_end|>";
    CHECK(tokenizer_encode(t, s, strlen(s), TOKENIZER_ENCODE_PARSE_SPECIAL, ids, 64, &n) == VLLMC_OK);
    CHECK(n == 3 && ids[0] == 257 && ids[1] == 263 && ids[2] == 260);
    /* the same in a long text (the byte-pair prefilter path) */
    {
        char longt[300];
        memset(longt, 'x', 200);
        memcpy(longt + 200, "<|im_end|>x<|im_end|>ab", 23);
        int32_t lids[400];
        size_t ln;
        CHECK(tokenizer_encode(t, longt, 223, TOKENIZER_ENCODE_PARSE_SPECIAL, lids, 400, &ln) == VLLMC_OK);
        CHECK(ln == 203 && lids[200] == 263 && lids[201] == 260 && lids[202] == 256);
    }
    /* parse off: control tokens are text, user-defined (<think>) still matched */
    s = "<think>abc<|im_end|>";
    CHECK(tokenizer_encode(t, s, strlen(s), 0, ids, 64, &n) == VLLMC_OK);
    CHECK(n > 3 && ids[0] == 262 && ids[1] == 257);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != 260);
    /* BOS only when asked and the vocabulary wants it */
    CHECK(tokenizer_encode(t, "ab", 2, TOKENIZER_ENCODE_ADD_SPECIAL, ids, 64, &n) == VLLMC_OK && n == 1 && ids[0] == 256);
    struct tokenizer *tb = make_small_bpe("qwen2", true);
    if (tb) {
        CHECK(tokenizer_encode(tb, "ab", 2, TOKENIZER_ENCODE_ADD_SPECIAL, ids, 64, &n) == VLLMC_OK && n == 2 && ids[0] == 261);
        tokenizer_destroy(tb);
    }
    /* a user-defined token that is ordinary text (中) and EOG flags */
    CHECK(tokenizer_encode(t, "\xe4\xb8\xad", 3, 0, ids, 64, &n) == VLLMC_OK && n == 1 && ids[0] == 264);
    CHECK(tokenizer_is_eog(t, 260) && !tokenizer_is_eog(t, 257));
    /* cap too small: error and the needed count */
    CHECK(tokenizer_encode(t, "a b c d", 7, 0, ids, 2, &n) == VLLMC_ERR_INVALID && n == 7);
    /* random bytes: never more ids than the bound, decode never fails */
    for (int it = 0; it < 2000; it++) {
        uint8_t buf[64];
        size_t len = rnd(64);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)test_rand_u64();
        int32_t *out = NULL;
        CHECK(tokenizer_encode_alloc(t, (const char *)buf, len, TOKENIZER_ENCODE_PARSE_SPECIAL, &out, &n) == VLLMC_OK);
        CHECK(n <= tokenizer_bound(t, len));
        char *dec = NULL;
        size_t nd;
        CHECK(tokenizer_decode_alloc(t, out, n, 0, &dec, &nd) == VLLMC_OK);
        if (tok_utf8_valid_prefix(buf, len) == len) CHECK(nd == len && !memcmp(dec, buf, len)); /* lossless on valid UTF-8 */
        free(dec);
        free(out);
    }
    /* skip special in decode; bad id */
    int32_t d[3] = {257, 260, 257};
    char out[64];
    CHECK(tokenizer_decode(t, d, 3, TOKENIZER_DECODE_SKIP_SPECIAL, out, 64, &n) == VLLMC_OK && n == 6 && !memcmp(out, "abcabc", 6));
    CHECK(tokenizer_decode(t, d, 3, 0, out, 64, &n) == VLLMC_OK && n == 16);
    int32_t badid = 100000;
    CHECK(tokenizer_decode(t, &badid, 1, 0, out, 64, &n) == VLLMC_ERR_INVALID);
    tokenizer_destroy(t);
}

static void test_stream(void) {
    struct tokenizer *t = make_small_bpe("qwen2", false);
    if (!t) return;
    size_t cap = tokenizer_stream_bound(t);
    char *chunk = malloc(cap);
    for (int it = 0; it < 3000; it++) {
        /* random ids, including single bytes that split multi-byte characters */
        int32_t ids[40];
        size_t n = 1 + rnd(40);
        for (size_t i = 0; i < n; i++) ids[i] = rnd(4) ? (int32_t)(0xA0 + rnd(96)) : (int32_t)rnd(265);
        unsigned flags = it % 2 ? TOKENIZER_DECODE_REPLACE_INVALID : 0;
        struct tokenizer_stream s;
        tokenizer_stream_init(&s, t, flags);
        char all[4096];
        size_t total = 0;
        bool chunks_valid = true;
        for (size_t i = 0; i < n; i++) {
            size_t k;
            CHECK(tokenizer_stream_feed(&s, ids[i], chunk, cap, &k) == VLLMC_OK);
            if (flags) chunks_valid &= tok_utf8_valid_prefix((const uint8_t *)chunk, k) == k;
            memcpy(all + total, chunk, k);
            total += k;
        }
        size_t k = tokenizer_stream_flush(&s, chunk, cap);
        if (flags) chunks_valid &= tok_utf8_valid_prefix((const uint8_t *)chunk, k) == k;
        memcpy(all + total, chunk, k);
        total += k;
        char ref[4096];
        size_t n_ref;
        CHECK(tokenizer_decode(t, ids, n, 0, ref, sizeof(ref), &n_ref) == VLLMC_OK);
        if (!flags) CHECK(total == n_ref && !memcmp(all, ref, n_ref)); /* raw mode: every byte, in order */
        else CHECK(chunks_valid);
        if (tok_utf8_valid_prefix((const uint8_t *)ref, n_ref) == n_ref) CHECK(total == n_ref && !memcmp(all, ref, n_ref));
    }
    tokenizer_destroy(t);
    free(chunk);
}

static void test_stream_split_char(void) {
    /* ids of single bytes: the vocabulary's byte tokens are in byte order of their GPT-2 characters, so find them */
    struct tokenizer *t = make_small_bpe("qwen2", false);
    if (!t) return;
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) {
        char c[8];
        test_byte_char((uint8_t)b, c);
        byte_id[b] = tokenizer_find(t, c, strlen(c));
    }
    const uint8_t euro[3] = {0xE2, 0x82, 0xAC};
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, t, 0);
    char out[256];
    size_t k;
    CHECK(tokenizer_stream_feed(&s, byte_id[euro[0]], out, sizeof(out), &k) == VLLMC_OK && k == 0);
    CHECK(tokenizer_stream_feed(&s, byte_id[euro[1]], out, sizeof(out), &k) == VLLMC_OK && k == 0);
    CHECK(tokenizer_stream_feed(&s, byte_id[euro[2]], out, sizeof(out), &k) == VLLMC_OK && k == 3 && !memcmp(out, euro, 3));
    /* a lead byte followed by ASCII: the lead can never complete, it goes out (as U+FFFD when asked) */
    tokenizer_stream_init(&s, t, TOKENIZER_DECODE_REPLACE_INVALID);
    CHECK(tokenizer_stream_feed(&s, byte_id[0xE2], out, sizeof(out), &k) == VLLMC_OK && k == 0);
    CHECK(tokenizer_stream_feed(&s, byte_id['a'], out, sizeof(out), &k) == VLLMC_OK && k == 4 && !memcmp(out, "\xef\xbf\xbd" "a", 4));
    tokenizer_destroy(t);
}

/* Stop strings: the streamed text equals the reference cut (after each token, the first time any stop string
 * occurs in the text so far, cut at its earliest start), and nothing of a stop string is ever emitted. */
static void test_stream_stops(void) {
    struct tokenizer *t = make_small_bpe("qwen2", false);
    if (!t) return;
    const int32_t pool[] = {'a', 'b', 'c', 'x', ' ', 256, 257, 258}; /* byte tokens are in byte order; ab abc " ab" */
    size_t cap = tokenizer_stream_bound(t);
    char *chunk = malloc(cap);
    int n_stopped = 0;
    for (int it = 0; it < 3000; it++) {
        int32_t ids[30];
        size_t n = 1 + rnd(30);
        for (size_t i = 0; i < n; i++) ids[i] = pool[rnd(ARRAY_LEN(pool))];
        char full[512];
        size_t n_full;
        CHECK(tokenizer_decode(t, ids, n, 0, full, sizeof(full), &n_full) == VLLMC_OK);
        /* stops: random short strings over the same letters, some taken from the text */
        char stop_buf[3][8];
        const char *stops[3];
        size_t n_stops = 1 + rnd(3);
        for (size_t j = 0; j < n_stops; j++) {
            size_t len = 1 + rnd(4);
            if (rnd(2) && n_full >= len) memcpy(stop_buf[j], full + rnd((uint32_t)(n_full - len + 1)), len);
            else for (size_t q = 0; q < len; q++) stop_buf[j][q] = "abcx "[rnd(5)];
            stop_buf[j][len] = 0;
            stops[j] = stop_buf[j];
        }
        /* reference */
        size_t want_len = n_full;
        bool want_stop = false;
        for (size_t k = 1; k <= n && !want_stop; k++) {
            char pre[512];
            size_t n_pre;
            CHECK(tokenizer_decode(t, ids, k, 0, pre, sizeof(pre), &n_pre) == VLLMC_OK);
            size_t best = SIZE_MAX;
            for (size_t j = 0; j < n_stops; j++) {
                const char *m = memmem(pre, n_pre, stops[j], strlen(stops[j]));
                if (m && (size_t)(m - pre) < best) best = (size_t)(m - pre);
            }
            if (best != SIZE_MAX) { want_stop = true; want_len = best; }
        }
        struct tokenizer_stream s;
        tokenizer_stream_init(&s, t, 0);
        CHECK(tokenizer_stream_set_stops(&s, stops, n_stops) == VLLMC_OK);
        char got[1024];
        size_t n_got = 0;
        for (size_t i = 0; i < n; i++) {
            size_t k;
            CHECK(tokenizer_stream_feed(&s, ids[i], chunk, cap, &k) == VLLMC_OK);
            memcpy(got + n_got, chunk, k);
            n_got += k;
        }
        size_t k = tokenizer_stream_flush(&s, chunk, cap);
        memcpy(got + n_got, chunk, k);
        n_got += k;
        n_stopped += want_stop;
        CHECK_MSG(s.stopped == want_stop && n_got == want_len && !memcmp(got, full, want_len),
                  "'%.*s' stops '%s' '%s': got '%.*s' (%d), want %zu bytes (%d)", (int)n_full, full, stops[0],
                  n_stops > 1 ? stops[1] : "", (int)n_got, got, s.stopped, want_len, want_stop);
    }
    CHECK_MSG(n_stopped > 1000 && n_stopped < 2900, "%d of 3000 streams stopped", n_stopped); /* both paths ran */
    /* limits */
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, t, 0);
    char longstop[TOKENIZER_STREAM_MAX_STOP + 2];
    memset(longstop, 'a', sizeof(longstop) - 1);
    longstop[sizeof(longstop) - 1] = 0;
    const char *ls[1] = {longstop};
    CHECK(tokenizer_stream_set_stops(&s, ls, 1) == VLLMC_ERR_INVALID);
    free(chunk);
    tokenizer_destroy(t);
}

static void test_gguf_load(void) {
    /* write a vocabulary with our GGUF writer, parse it, load it */
    char store[260][8];
    struct gguf_str toks[259];
    int32_t types[259];
    for (int b = 0; b < 256; b++) { test_byte_char((uint8_t)b, store[b]); toks[b] = (struct gguf_str){store[b], strlen(store[b])}; types[b] = 1; }
    toks[256] = (struct gguf_str){"ab", 2}; types[256] = 1;
    toks[257] = (struct gguf_str){"<|im_end|>", 10}; types[257] = 3;
    toks[258] = (struct gguf_str){"", 0}; types[258] = 1; /* empty token: renamed [EMPTY_258] */
    struct gguf_str merges[1] = {{"a b", 3}};
    const char *path = "/tmp/vllmc_test_tokenizer.gguf";
    for (int variant = 0; variant < 3; variant++) {
        struct gguf_writer *w = gguf_writer_create();
        CHECK(w != NULL);
        if (!w) return;
        gguf_writer_set_str(w, "general.architecture", "qwen2");
        gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_str(w, "tokenizer.ggml.pre", variant == 1 ? "not-a-pre-tokenizer" : "qwen35");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 259);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 259);
        if (variant != 2) gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 257);
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
        CHECK(gguf_writer_write(w, path) == VLLMC_OK);
        gguf_writer_destroy(w);
        struct gguf_file *f = NULL;
        CHECK(gguf_file_open(path, &f) == VLLMC_OK);
        if (!f) return;
        struct tokenizer *t = NULL;
        vllmc_status st = tokenizer_load_gguf(f->ctx, &t);
        if (variant == 0) {
            CHECK(st == VLLMC_OK);
            if (t) {
                int32_t ids[8];
                size_t n;
                CHECK(tokenizer_encode(t, "ab<|im_end|>", 12, TOKENIZER_ENCODE_PARSE_SPECIAL | TOKENIZER_ENCODE_ADD_SPECIAL, ids, 8, &n) == VLLMC_OK);
                CHECK(n == 2 && ids[0] == 256 && ids[1] == 257);
                CHECK(tokenizer_eos(t) == 257 && tokenizer_is_eog(t, 257) && !tokenizer_add_bos(t));
                CHECK(!strcmp(tokenizer_pre_name(t), "qwen35"));
                CHECK(tokenizer_find(t, "[EMPTY_258]", 11) == 258);
            }
        } else if (variant == 1) {
            CHECK(st == VLLMC_ERR_UNSUPPORTED && strstr(vllmc_last_error(), "not-a-pre-tokenizer"));
        } else {
            CHECK(st != VLLMC_OK && strstr(vllmc_last_error(), "merges"));
        }
        tokenizer_destroy(t);
        gguf_file_close(f);
    }
    remove(path);
    /* unknown model */
    struct gguf_str one = {"a", 1};
    struct tokenizer_spec spec = {.model = "bert", .n_tokens = 1, .tokens = &one, .bos_id = -1, .eos_id = -1, .eot_id = -1,
                                  .unk_id = -1, .pad_id = -1};
    struct tokenizer *t = NULL;
    CHECK(tokenizer_create(&spec, &t) == VLLMC_ERR_UNSUPPORTED && !t);
}

/* A loaded tokenizer is shared read-only: encoding from two threads at once gives the serial results. */
struct thread_job { const struct tokenizer *t; const char *texts[64]; size_t lens[64]; int32_t *ids[64]; size_t n[64]; int ok; };

static void *thread_encode(void *arg) {
    struct thread_job *j = arg;
    j->ok = 1;
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 64; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (tokenizer_encode_alloc(j->t, j->texts[i], j->lens[i], TOKENIZER_ENCODE_PARSE_SPECIAL, &ids, &n) != VLLMC_OK ||
                n != j->n[i] || memcmp(ids, j->ids[i], n * sizeof(int32_t)))
                j->ok = 0;
            free(ids);
        }
    return NULL;
}

static void test_threads(void) {
    struct tokenizer *t = make_small_bpe("qwen35", false);
    if (!t) return;
    static char bufs[64][200];
    struct thread_job job = {.t = t};
    for (int i = 0; i < 64; i++) {
        size_t n = test_rand_text((uint8_t *)bufs[i], 40);
        job.texts[i] = bufs[i];
        job.lens[i] = n;
        CHECK(tokenizer_encode_alloc(t, bufs[i], n, TOKENIZER_ENCODE_PARSE_SPECIAL, &job.ids[i], &job.n[i]) == VLLMC_OK);
    }
    struct thread_job a = job, b = job;
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, thread_encode, &a) == 0);
    CHECK(pthread_create(&tb, NULL, thread_encode, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.ok && b.ok);
    for (int i = 0; i < 64; i++) free(job.ids[i]);
    tokenizer_destroy(t);
}

int main(void) {
    test_seed_auto("test_tokenizer");
    test_pretok_vs_pcre2();
    test_bpe_vs_reference();
    test_spm_vs_reference();
    test_specials_and_bounds();
    test_stream();
    test_stream_split_char();
    test_stream_stops();
    test_gguf_load();
    test_threads();
    return test_finish("test_tokenizer");
}
