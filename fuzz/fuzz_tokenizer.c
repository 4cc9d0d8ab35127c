/* libFuzzer entry for the tokenizers: random bytes are encoded with small in-memory vocabularies (byte-level
 * BPE under every hand-written and regex pre-tokenizer, and SentencePiece with byte fallback), or with the
 * GGUF vocabulary named by $VLLMC_FUZZ_VOCAB. Checks: no crash, the id count within tokenizer_bound, ids in
 * range, decode succeeds, and the streaming detokenizer returns exactly the decoded bytes. Inputs starting with
 * 0xFF are GGUF images instead: loading a tokenizer from them either fails cleanly or gives a working one. */
#include <stdlib.h>
#include <string.h>
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#define FUZZ_N_TOK 7
static struct tokenizer *g_tok[FUZZ_N_TOK];
static int g_n_tok;

static struct tokenizer *fuzz_make_bpe(const char *pre) {
    static char store[256][8];
    static const char *extra[] = {"ab", "abc", "\304\240a", "\304\240ab", "\xc4\xa0\xc4\xa0", "12", "\xc3\xa4\xc2\xb8",
                                  "<|im_end|>", "<|im_start|>", "<think>", "<|im_end|>x", "\xe4\xb8\xad"};
    static const char *merges_txt[] = {"a b", "ab c", "\xc4\xa0 a", "\304\240a b", "\xc4\xa0 \xc4\xa0", "1 2",
                                       "\xc3\xa4 \xc2\xb8", "x y", "\xc4\xa0 xy"}; /* the last two: results without a token */
    struct gguf_str toks[256 + ARRAY_LEN(extra)], merges[ARRAY_LEN(merges_txt)];
    int32_t types[256 + ARRAY_LEN(extra)];
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) {
        size_t k = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), (uint8_t *)store[b]);
        toks[n] = (struct gguf_str){store[b], k};
        types[n++] = TOKENIZER_TOKEN_NORMAL;
    }
    for (size_t i = 0; i < ARRAY_LEN(extra); i++) {
        toks[n] = (struct gguf_str){extra[i], strlen(extra[i])};
        types[n++] = extra[i][0] == '<' ? (extra[i][1] == '|' ? TOKENIZER_TOKEN_CONTROL : TOKENIZER_TOKEN_USER_DEFINED)
                                        : (i == ARRAY_LEN(extra) - 1 ? TOKENIZER_TOKEN_USER_DEFINED : TOKENIZER_TOKEN_NORMAL);
    }
    for (size_t i = 0; i < ARRAY_LEN(merges_txt); i++) merges[i] = (struct gguf_str){merges_txt[i], strlen(merges_txt[i])};
    struct tokenizer_spec spec = {.model = "gpt2", .pre = pre, .n_tokens = n, .tokens = toks, .types = types,
                                  .n_merges = ARRAY_LEN(merges_txt), .merges = merges, .bos_id = 256 + 8,
                                  .eos_id = 256 + 7, .eot_id = -1, .unk_id = -1, .pad_id = -1, .add_bos = true};
    struct tokenizer *t = NULL;
    if (tokenizer_create(&spec, &t) != VLLMC_OK) __builtin_trap();
    return t;
}

static struct tokenizer *fuzz_make_spm(void) {
    static char store[300][12];
    static const char *pieces[] = {"\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a", "\xe2\x96\x81" "ab", "\xc3\xa9", "\xe4\xb8\xad"};
    struct gguf_str toks[300];
    int32_t types[300];
    float scores[300];
    uint32_t n = 0;
    const char *fixed[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        toks[n] = (struct gguf_str){fixed[i], strlen(fixed[i])};
        types[n] = i ? TOKENIZER_TOKEN_CONTROL : TOKENIZER_TOKEN_UNKNOWN;
        scores[n++] = 0;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(store[b], sizeof(store[b]), "<0x%02X>", b);
        toks[n] = (struct gguf_str){store[b], 6};
        types[n] = TOKENIZER_TOKEN_BYTE;
        scores[n++] = 0;
    }
    for (size_t i = 0; i < ARRAY_LEN(pieces); i++) {
        toks[n] = (struct gguf_str){pieces[i], strlen(pieces[i])};
        types[n] = TOKENIZER_TOKEN_NORMAL;
        scores[n++] = -(float)i;
    }
    struct tokenizer_spec spec = {.model = "llama", .n_tokens = n, .tokens = toks, .types = types, .scores = scores,
                                  .bos_id = 1, .eos_id = 2, .eot_id = -1, .unk_id = 0, .pad_id = -1, .add_bos = true,
                                  .add_space_prefix = 1};
    struct tokenizer *t = NULL;
    if (tokenizer_create(&spec, &t) != VLLMC_OK) __builtin_trap();
    return t;
}

static void fuzz_init(void) {
    const char *path = getenv("VLLMC_FUZZ_VOCAB");
    if (path && *path) {
        struct gguf_file *f = NULL;
        if (gguf_file_open(path, &f) != VLLMC_OK) { fprintf(stderr, "fuzz_tokenizer: %s\n", vllmc_last_error()); abort(); }
        if (tokenizer_load_gguf(f->ctx, &g_tok[g_n_tok++]) != VLLMC_OK) abort();
        gguf_file_close(f);
        return;
    }
    const char *pres[] = {"qwen35", "qwen2", "llama-bpe", "gpt-2", "default", "starcoder"};
    for (size_t i = 0; i < ARRAY_LEN(pres); i++) g_tok[g_n_tok++] = fuzz_make_bpe(pres[i]);
    g_tok[g_n_tok++] = fuzz_make_spm();
}

/* First byte 0xFF: the rest is a GGUF image; load a tokenizer from it (bad files must fail cleanly) and use it. */
static void fuzz_gguf_vocab(const uint8_t *data, size_t size) {
    struct gguf_ctx *ctx = NULL;
    if (gguf_parse(data, size, &ctx) != VLLMC_OK) return;
    struct tokenizer *t = NULL;
    if (tokenizer_load_gguf(ctx, &t) == VLLMC_OK) {
        static const char text[] = "Hello world, <|im_end|> 12345 \xe4\xb8\xad\xff  \n\n x";
        int32_t *ids = NULL;
        size_t n = 0;
        if (tokenizer_encode_alloc(t, text, sizeof(text) - 1, TOKENIZER_ENCODE_PARSE_SPECIAL | TOKENIZER_ENCODE_ADD_SPECIAL,
                                   &ids, &n) != VLLMC_OK)
            __builtin_trap();
        if (n > tokenizer_bound(t, sizeof(text) - 1)) __builtin_trap();
        char *dec = NULL;
        size_t nd;
        if (tokenizer_decode_alloc(t, ids, n, 0, &dec, &nd) != VLLMC_OK) __builtin_trap();
        free(dec);
        free(ids);
        tokenizer_destroy(t);
    }
    gguf_free(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_n_tok) fuzz_init();
    if (size < 1) return 0;
    if (data[0] == 0xFF) { fuzz_gguf_vocab(data + 1, size - 1); return 0; }
    const struct tokenizer *t = g_tok[data[0] % g_n_tok];
    unsigned flags = (data[0] >> 4) & 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode_alloc(t, text, len, flags, &ids, &n) != VLLMC_OK) __builtin_trap();
    if (n > tokenizer_bound(t, len)) __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= tokenizer_n_vocab(t)) __builtin_trap();
    char *dec = NULL;
    size_t n_dec = 0;
    unsigned dflags = (data[0] >> 6) & 1 ? TOKENIZER_DECODE_SKIP_SPECIAL : 0;
    if (tokenizer_decode_alloc(t, ids, n, dflags, &dec, &n_dec) != VLLMC_OK) __builtin_trap();
    /* stream, raw mode: the chunks add up to decode exactly */
    size_t cap = tokenizer_stream_bound(t);
    char *chunk = malloc(cap);
    char *all = malloc(3 * n_dec + 16);
    if (!chunk || !all) __builtin_trap();
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, t, dflags);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        if (tokenizer_stream_feed(&s, ids[i], chunk, cap, &k) != VLLMC_OK) __builtin_trap();
        if (total + k > n_dec) __builtin_trap();
        memcpy(all + total, chunk, k);
        total += k;
    }
    size_t k = tokenizer_stream_flush(&s, chunk, cap);
    if (total + k > n_dec) __builtin_trap();
    memcpy(all + total, chunk, k);
    total += k;
    if (total != n_dec || memcmp(all, dec, n_dec)) __builtin_trap();
    /* replacement mode with stop strings: always valid UTF-8, never any stop string in the output */
    static const char *const stops[] = {"ab", "\n\n", "<|im_end|>", "\xe4\xb8\xad"};
    tokenizer_stream_init(&s, t, dflags | TOKENIZER_DECODE_REPLACE_INVALID);
    if (tokenizer_stream_set_stops(&s, stops, (data[0] & 8) ? 4 : 0) != VLLMC_OK) __builtin_trap();
    total = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) { if (tokenizer_stream_feed(&s, ids[i], chunk, cap, &k) != VLLMC_OK) __builtin_trap(); }
        else k = tokenizer_stream_flush(&s, chunk, cap);
        if (tok_utf8_valid_prefix((const uint8_t *)chunk, k) != k) __builtin_trap();
        if (total + k > 3 * n_dec + 8) __builtin_trap();
        memcpy(all + total, chunk, k);
        total += k;
    }
    if ((data[0] & 8))
        for (size_t j = 0; j < 4; j++)
            if (memmem(all, total, stops[j], strlen(stops[j]))) __builtin_trap();
    free(chunk);
    free(all);
    free(dec);
    free(ids);
    return 0;
}
