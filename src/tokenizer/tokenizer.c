/* Tokenizer from a GGUF vocabulary: vocabulary tables, special-token partition, byte-level BPE and
 * SentencePiece BPE, pieces, decode and the streaming detokenizer.
 * Invariants: the tokenizer is immutable after load (encode/decode use per-call scratch only); every
 * symbol id used by the BPE merge table is either a vocabulary id (< n_vocab) or a "virtual" id naming a
 * merge result that has no token of its own (llama.cpp still performs such merges, then spells the result
 * out byte by byte), so the merge loop works on integers and never on strings. */
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <string.h>
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"

/* ---- string -> id hash map (open addressing, linear probing) ---- */

struct tok_strmap {
    uint32_t *slot;  /* id + 1, 0 = empty */
    uint32_t *hash;
    size_t mask;
};

static inline uint64_t tok_hash_bytes(const void *p, size_t n) {
    /* FNV-1a over 8-byte words then bytes, with a final mix: fast enough and well spread for short keys */
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *s++) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

struct tok_merge_entry { uint64_t key; uint32_t rank, result; };

struct tokenizer {
    enum tokenizer_model model;
    char pre_name[64];
    uint32_t n_vocab;
    /* token texts (GGUF form), concatenated */
    char *text_blob;
    uint64_t *text_off;        /* [n_vocab + 1] */
    int32_t *type;             /* [n_vocab] tokenizer_token_type (with llama.cpp's overrides) */
    float *score;              /* [n_vocab] */
    uint8_t *is_eog;           /* [n_vocab] */
    struct tok_strmap vocab;   /* text -> id (the last id of a duplicated text wins) */
    /* pieces (decoded bytes) */
    char *piece_blob;
    uint64_t *piece_off;       /* [n_vocab + 1] */
    size_t max_piece_len;
    size_t max_text_len;       /* longest GGUF token text */
    /* special tokens, longest text first */
    int32_t *specials;
    uint32_t n_specials;
    int32_t bos, eos, eot, unk, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    /* byte-level BPE */
    struct pretok pre;
    uint32_t byte_sym[256];    /* symbol of each byte's GPT-2 character */
    struct tok_merge_entry *merges;
    size_t merge_mask;
    uint32_t n_sym;            /* vocabulary ids + virtual symbols */
    char *virt_blob;           /* texts of virtual symbols */
    uint64_t *virt_off;        /* [n_sym - n_vocab + 1] */
    int32_t single_byte_tok[256]; /* token whose text is that single byte, -1 if none */
    /* SPM */
    int32_t byte_tok[256];     /* <0xXX> tokens, -1 if none */
};

static const char *tok_text(const struct tokenizer *t, uint32_t id, size_t *len) {
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text_blob + t->text_off[id];
}

static int32_t tok_map_find(const struct tokenizer *t, const struct tok_strmap *m, const char *s, size_t n) {
    if (!m->slot) return -1;
    uint64_t h = tok_hash_bytes(s, n);
    uint32_t h32 = (uint32_t)h;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t v = m->slot[i];
        if (!v) return -1;
        if (m->hash[i] != h32) continue;
        size_t len;
        const char *txt = tok_text(t, v - 1, &len);
        if (len == n && !memcmp(txt, s, n)) return (int32_t)(v - 1);
    }
}

static vllmc_status tok_map_build(struct tokenizer *t) {
    size_t cap = 16;
    while (cap < (size_t)t->n_vocab * 2) cap *= 2;
    t->vocab.slot = calloc(cap, sizeof(uint32_t));
    t->vocab.hash = calloc(cap, sizeof(uint32_t));
    if (!t->vocab.slot || !t->vocab.hash) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (vocab map)");
    t->vocab.mask = cap - 1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        uint64_t h = tok_hash_bytes(s, n);
        size_t i = h & t->vocab.mask;
        for (;; i = (i + 1) & t->vocab.mask) {
            uint32_t v = t->vocab.slot[i];
            if (!v) break;
            if (t->vocab.hash[i] != (uint32_t)h) continue;
            size_t len;
            const char *o = tok_text(t, v - 1, &len);
            if (len == n && !memcmp(o, s, n)) break; /* duplicate text: the later id wins */
        }
        t->vocab.slot[i] = id + 1;
        t->vocab.hash[i] = (uint32_t)h;
    }
    return VLLMC_OK;
}

/* ---- merge table: (left symbol, right symbol) -> (rank, result symbol) ---- */

static inline uint64_t tok_pair_key(uint32_t l, uint32_t r) { return ((uint64_t)l << 32) | r; }
static inline size_t tok_pair_slot(uint64_t k, size_t mask) {
    /* splitmix64 finalizer: every key bit reaches the slot bits */
    k ^= k >> 30;
    k *= 0xBF58476D1CE4E5B9ull;
    k ^= k >> 27;
    k *= 0x94D049BB133111EBull;
    k ^= k >> 31;
    return (size_t)k & mask;
}

static const struct tok_merge_entry *tok_merge_find(const struct tokenizer *t, uint32_t l, uint32_t r) {
    uint64_t k = tok_pair_key(l, r);
    for (size_t i = tok_pair_slot(k, t->merge_mask);; i = (i + 1) & t->merge_mask) {
        const struct tok_merge_entry *e = &t->merges[i];
        if (e->rank == UINT32_MAX) return NULL;
        if (e->key == k) return e;
    }
}

/* Virtual symbols: merge results (and byte characters) without a token. Looked up by linear scan of a
 * small side map during load only. */
struct tok_virt_map { uint32_t *slot; size_t mask; size_t n; };

static const char *tok_sym_text(const struct tokenizer *t, uint32_t sym, size_t *len) {
    if (sym < t->n_vocab) return tok_text(t, sym, len);
    uint32_t v = sym - t->n_vocab;
    *len = (size_t)(t->virt_off[v + 1] - t->virt_off[v]);
    return t->virt_blob + t->virt_off[v];
}

struct tok_builder {
    char *blob; size_t len, cap;
    uint64_t *off; size_t n, cap_off;
    struct tok_virt_map map;
};

static int32_t tok_virt_find(const struct tokenizer *t, const struct tok_builder *b, const char *s, size_t n) {
    if (!b->map.slot) return -1;
    for (size_t i = tok_hash_bytes(s, n) & b->map.mask;; i = (i + 1) & b->map.mask) {
        uint32_t v = b->map.slot[i];
        if (!v) return -1;
        v--;
        size_t len = (size_t)(b->off[v + 1] - b->off[v]);
        if (len == n && !memcmp(b->blob + b->off[v], s, n)) return (int32_t)(t->n_vocab + v);
    }
}

static int tok_virt_grow_map(struct tok_builder *b) {
    size_t cap = b->map.slot ? (b->map.mask + 1) * 2 : 1024;
    uint32_t *slot = calloc(cap, sizeof(uint32_t));
    if (!slot) return 0;
    for (size_t v = 0; v < b->n; v++) {
        size_t len = (size_t)(b->off[v + 1] - b->off[v]);
        size_t i = tok_hash_bytes(b->blob + b->off[v], len) & (cap - 1);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = (uint32_t)v + 1;
    }
    free(b->map.slot);
    b->map.slot = slot;
    b->map.mask = cap - 1;
    return 1;
}

/* Symbol of a text: its token id, else an existing or new virtual symbol. */
static int64_t tok_sym_for(struct tokenizer *t, struct tok_builder *b, const char *s, size_t n, bool create) {
    int32_t id = tok_map_find(t, &t->vocab, s, n);
    if (id >= 0) return id;
    id = tok_virt_find(t, b, s, n);
    if (id >= 0 || !create) return id;
    if ((uint64_t)t->n_vocab + b->n + 1 >= UINT32_MAX) return -2;
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n) c *= 2;
        char *p = realloc(b->blob, c);
        if (!p) return -2;
        b->blob = p;
        b->cap = c;
    }
    if (b->n + 2 > b->cap_off) {
        size_t c = b->cap_off ? b->cap_off * 2 : 256;
        uint64_t *p = realloc(b->off, c * sizeof(uint64_t));
        if (!p) return -2;
        b->off = p;
        b->cap_off = c;
    }
    if (b->n == 0) b->off[0] = 0;
    memcpy(b->blob + b->len, s, n);
    b->len += n;
    b->n++;
    b->off[b->n] = b->len;
    if ((b->n + 1) * 2 > (b->map.slot ? b->map.mask + 1 : 0)) {
        if (!tok_virt_grow_map(b)) return -2;
    } else {
        size_t i = tok_hash_bytes(s, n) & b->map.mask;
        while (b->map.slot[i]) i = (i + 1) & b->map.mask;
        b->map.slot[i] = (uint32_t)b->n;
    }
    return t->n_vocab + b->n - 1;
}

static vllmc_status tok_build_merges(struct tokenizer *t, const struct gguf_str *merges, uint32_t n_merges) {
    struct tok_builder b = {0};
    vllmc_status st = VLLMC_OK;
    size_t cap = 16;
    while (cap < (size_t)n_merges * 2 + 16) cap *= 2;
    t->merges = malloc(cap * sizeof(*t->merges));
    if (!t->merges) { st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (merges)"); goto done; }
    for (size_t i = 0; i < cap; i++) t->merges[i].rank = UINT32_MAX;
    t->merge_mask = cap - 1;
    /* initial symbols: the GPT-2 character of every byte */
    for (int c = 0; c < 256; c++) {
        uint8_t u[4];
        size_t n = tok_utf8_encode(tok_byte_to_cp((uint8_t)c), u);
        int64_t s = tok_sym_for(t, &b, (const char *)u, n, true);
        if (s < 0) { st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (merges)"); goto done; }
        t->byte_sym[c] = (uint32_t)s;
    }
    for (uint32_t r = 0; r < n_merges; r++) {
        const char *m = merges[r].ptr;
        size_t n = (size_t)merges[r].len;
        if (n > 65536) { st = vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: merge %u is %zu bytes long", r, n); goto done; }
        size_t sp = 1;
        while (sp < n && m[sp] != ' ') sp++;
        if (n < 3 || sp >= n) continue; /* no "left right" form: can never match (as llama.cpp) */
        int64_t l = tok_sym_for(t, &b, m, sp, false);
        int64_t rr = tok_sym_for(t, &b, m + sp + 1, n - sp - 1, false);
        if (l < 0 || rr < 0) continue; /* a part no merge or byte ever forms: unreachable */
        uint64_t key = tok_pair_key((uint32_t)l, (uint32_t)rr);
        size_t i = tok_pair_slot(key, t->merge_mask);
        while (t->merges[i].rank != UINT32_MAX && t->merges[i].key != key) i = (i + 1) & t->merge_mask;
        if (t->merges[i].rank != UINT32_MAX) continue; /* duplicate pair: the first rank wins */
        char stackbuf[512];
        char *cat = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
        if (!cat) { st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (merges)"); goto done; }
        memcpy(cat, m, sp);
        memcpy(cat + sp, m + sp + 1, n - sp - 1);
        int64_t res = tok_sym_for(t, &b, cat, n - 1, true);
        if (cat != stackbuf) free(cat);
        if (res < 0) { st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (merges)"); goto done; }
        t->merges[i].key = key;
        t->merges[i].rank = r;
        t->merges[i].result = (uint32_t)res;
    }
    t->n_sym = t->n_vocab + (uint32_t)b.n;
    t->virt_blob = b.blob;
    t->virt_off = b.off;
    b.blob = NULL;
    b.off = NULL;
    if (!t->virt_off) {
        t->virt_off = calloc(1, sizeof(uint64_t));
        if (!t->virt_off) st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    }
done:
    free(b.blob);
    free(b.off);
    free(b.map.slot);
    return st;
}

/* ---- load ---- */

struct tok_pre_def {
    const char *names;            /* '|'-separated tokenizer.ggml.pre values */
    enum pretok_kind kind;
    const char *regex[4];
    bool ignore_merges, add_bos;
};

static const struct tok_pre_def tok_pre_defs[] = {
    {"default", PRETOK_REGEX,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", PRETOK_GPT2_REGEX, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", PRETOK_LLAMA3, {0}, true, true},
    {"dbrx|smaug-bpe|chatglm-bpe", PRETOK_LLAMA3, {0}, false, false},
    {"glm4|glm5", PRETOK_LLAMA3, {0}, true, false},
    {"gpt-2|gpt2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|mpt|olmo|jais|"
     "trillion|granite-docling|exaone4|jina-v1-en|jina-v2-code|roberta-bpe", PRETOK_GPT2, {0}, false, false},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez|stablelm2|hunyuan|solar-open", PRETOK_QWEN2, {0}, false, false},
    {"qwen35", PRETOK_QWEN35, {0}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2", PRETOK_REGEX,
     {"\\p{N}", PRETOK_GPT2_REGEX}, false, false},
    {"falcon", PRETOK_REGEX,
     {"[\\p{P}\\$\\+<=>\\^~\\|`]+", PRETOK_GPT2_REGEX, "[0-9][0-9][0-9]"}, false, false},
};

static const struct tok_pre_def *tok_find_pre(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < ARRAY_LEN(tok_pre_defs); i++) {
        const char *p = tok_pre_defs[i].names;
        while (*p) {
            const char *e = strchr(p, '|');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len == n && !memcmp(p, name, n)) return &tok_pre_defs[i];
            p += len + (e ? 1 : 0);
        }
    }
    return NULL;
}

static bool tok_text_eq(const struct tokenizer *t, uint32_t id, const char *s) {
    size_t n;
    const char *x = tok_text(t, id, &n);
    return n == strlen(s) && !memcmp(x, s, n);
}

static bool tok_text_in(const struct tokenizer *t, uint32_t id, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tok_text_eq(t, id, list[i])) return true;
    return false;
}

/* llama.cpp marks these by their text: end-of-generation tokens, and control-looking tokens forced to CONTROL. */
static const char *const tok_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234>",
};
static const char *const tok_fim_eog_texts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", "<|file_sep|>",
};
static const char *const tok_fim_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<SUF>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>",
};

static int tok_cmp_special(const void *a, const void *b, void *ctx) {
    const struct tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint64_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static vllmc_status tok_build_pieces(struct tokenizer *t) {
    size_t total = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) total += (size_t)(t->text_off[id + 1] - t->text_off[id]);
    t->piece_blob = malloc(total + 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(uint64_t));
    if (!t->piece_blob || !t->piece_off) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (pieces)");
    size_t at = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        t->piece_off[id] = at;
        size_t n;
        const uint8_t *s = (const uint8_t *)tok_text(t, id, &n);
        uint8_t *o = (uint8_t *)t->piece_blob + at;
        size_t k = 0;
        switch (t->type[id]) {
        case TOKENIZER_TOKEN_CONTROL:
        case TOKENIZER_TOKEN_UNKNOWN:
        case TOKENIZER_TOKEN_USER_DEFINED:
            memcpy(o, s, n);
            k = n;
            break;
        case TOKENIZER_TOKEN_NORMAL:
            if (t->model == TOKENIZER_MODEL_BPE) {
                size_t i = 0;
                while (i < n) {
                    size_t i0 = i;
                    uint32_t cp = tok_utf8_decode(s, n, &i);
                    int byte = tok_cp_to_byte(cp);
                    if (byte >= 0) o[k++] = (uint8_t)byte;
                    else { memcpy(o + k, s + i0, i - i0); k += i - i0; } /* not a byte character: keep as is */
                }
            } else {
                for (size_t i = 0; i < n;) {
                    if (i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) { o[k++] = ' '; i += 3; }
                    else o[k++] = s[i++];
                }
            }
            break;
        case TOKENIZER_TOKEN_BYTE: {
            unsigned v;
            if (n == 6 && sscanf((const char *)s, "<0x%2x>", &v) == 1) o[k++] = (uint8_t)v;
            else if (t->model == TOKENIZER_MODEL_BPE) {
                size_t i = 0;
                int byte = tok_cp_to_byte(tok_utf8_decode(s, n, &i));
                if (byte >= 0 && i == n) o[k++] = (uint8_t)byte;
            }
            break;
        }
        default: /* UNUSED, UNDEFINED: no text, as llama.cpp */
            break;
        }
        at += k;
        if (k > t->max_piece_len) t->max_piece_len = k;
    }
    t->piece_off[t->n_vocab] = at;
    return VLLMC_OK;
}

vllmc_status tokenizer_create(const struct tokenizer_spec *spec, struct tokenizer **out) {
    *out = NULL;
    vllmc_status st;
    if (!spec || !spec->model || !spec->tokens || spec->n_tokens == 0)
        return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: no vocabulary");
    if (spec->n_tokens >= (uint32_t)INT32_MAX)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: %u tokens is too many", spec->n_tokens);
    struct tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    const struct tok_pre_def *pre = NULL;
    if (!strcmp(spec->model, "gpt2")) {
        t->model = TOKENIZER_MODEL_BPE;
        const char *pname = spec->pre && spec->pre[0] ? spec->pre : "default";
        pre = tok_find_pre(pname);
        if (!pre) { st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer '%s'", pname); goto fail; }
        snprintf(t->pre_name, sizeof(t->pre_name), "%s", pname);
        if (!spec->merges && spec->n_merges) { st = vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: merges missing"); goto fail; }
    } else if (!strcmp(spec->model, "llama")) {
        t->model = TOKENIZER_MODEL_SPM;
        snprintf(t->pre_name, sizeof(t->pre_name), "default");
    } else {
        st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tokenizer: unsupported tokenizer model '%s' (have gpt2, llama)", spec->model);
        goto fail;
    }
    t->n_vocab = spec->n_tokens;
    /* texts */
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (spec->tokens[i].len > (1u << 20)) {
            st = vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: token %u is %llu bytes long", i, (unsigned long long)spec->tokens[i].len);
            goto fail;
        }
        total += spec->tokens[i].len ? spec->tokens[i].len : 24;
    }
    t->text_blob = malloc(total + 1);
    t->text_off = malloc(((size_t)t->n_vocab + 1) * sizeof(uint64_t));
    t->type = malloc((size_t)t->n_vocab * sizeof(int32_t));
    t->score = malloc((size_t)t->n_vocab * sizeof(float));
    t->is_eog = calloc(t->n_vocab, 1);
    if (!t->text_blob || !t->text_off || !t->type || !t->score || !t->is_eog) {
        st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory (%u tokens)", t->n_vocab);
        goto fail;
    }
    uint64_t at = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        t->text_off[i] = at;
        if (spec->tokens[i].len == 0) { /* llama.cpp renames empty tokens */
            at += (uint64_t)sprintf(t->text_blob + at, "[EMPTY_%u]", i);
        } else {
            memcpy(t->text_blob + at, spec->tokens[i].ptr, spec->tokens[i].len);
            at += spec->tokens[i].len;
        }
        int32_t ty = spec->types ? spec->types[i] : TOKENIZER_TOKEN_NORMAL;
        if (ty < TOKENIZER_TOKEN_UNDEFINED || ty > TOKENIZER_TOKEN_BYTE) ty = TOKENIZER_TOKEN_UNDEFINED;
        t->type[i] = ty;
        t->score[i] = spec->scores ? spec->scores[i] : 0.0f;
    }
    t->text_off[t->n_vocab] = at;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        t->max_text_len = VLLMC_MAX(t->max_text_len, (size_t)(t->text_off[i + 1] - t->text_off[i]));
    if ((st = tok_map_build(t)) != VLLMC_OK) goto fail;

    /* special ids */
    t->bos = spec->bos_id; t->eos = spec->eos_id; t->eot = spec->eot_id; t->unk = spec->unk_id; t->pad = spec->pad_id;
    int32_t *ids[] = {&t->bos, &t->eos, &t->eot, &t->unk, &t->pad};
    for (size_t i = 0; i < ARRAY_LEN(ids); i++)
        if (*ids[i] < -1 || *ids[i] >= (int32_t)t->n_vocab) *ids[i] = -1;
    t->add_bos = spec->add_bos;
    t->add_eos = spec->add_eos;
    if (t->model == TOKENIZER_MODEL_SPM) t->add_space_prefix = spec->add_space_prefix != 0;
    t->ignore_merges = pre && pre->ignore_merges;

    /* llama.cpp's text-based special-token detection: EOT/EOG/FIM markers become CONTROL, EOG set */
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        char c0 = t->text_blob[t->text_off[id]];
        if (c0 != '<' && c0 != '[' && c0 != '_') continue; /* every listed text starts with one of these */
        bool eog = tok_text_in(t, id, tok_eog_texts, ARRAY_LEN(tok_eog_texts));
        bool fim_eog = tok_text_in(t, id, tok_fim_eog_texts, ARRAY_LEN(tok_fim_eog_texts));
        bool fim = tok_text_in(t, id, tok_fim_texts, ARRAY_LEN(tok_fim_texts));
        if (eog || fim_eog || fim) {
            if (t->type[id] != TOKENIZER_TOKEN_CONTROL && t->vocab.slot && tok_map_find(t, &t->vocab, t->text_blob + t->text_off[id],
                    (size_t)(t->text_off[id + 1] - t->text_off[id])) == (int32_t)id)
                t->type[id] = TOKENIZER_TOKEN_CONTROL;
        }
        if (eog || fim_eog) t->is_eog[id] = 1;
    }
    if (t->eos >= 0) t->is_eog[t->eos] = 1;
    if (t->eot >= 0) t->is_eog[t->eot] = 1;

    /* special-token partition order: longest text first */
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->type[id];
        if (ty == TOKENIZER_TOKEN_CONTROL || ty == TOKENIZER_TOKEN_USER_DEFINED || ty == TOKENIZER_TOKEN_UNKNOWN) t->n_specials++;
    }
    t->specials = malloc((t->n_specials ? t->n_specials : 1) * sizeof(int32_t));
    if (!t->specials) { st = vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory"); goto fail; }
    t->n_specials = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->type[id];
        if (ty == TOKENIZER_TOKEN_CONTROL || ty == TOKENIZER_TOKEN_USER_DEFINED || ty == TOKENIZER_TOKEN_UNKNOWN)
            t->specials[t->n_specials++] = (int32_t)id;
    }
    qsort_r(t->specials, t->n_specials, sizeof(int32_t), tok_cmp_special, t);

    for (int c = 0; c < 256; c++) {
        char hex[8];
        snprintf(hex, sizeof(hex), "<0x%02X>", c);
        t->byte_tok[c] = tok_map_find(t, &t->vocab, hex, 6);
        char one = (char)c;
        t->single_byte_tok[c] = tok_map_find(t, &t->vocab, &one, 1);
    }
    if (t->model == TOKENIZER_MODEL_BPE) {
        if ((st = tok_build_merges(t, spec->merges, spec->merges ? spec->n_merges : 0)) != VLLMC_OK) goto fail;
        int n_re = 0;
        while (n_re < 4 && pre->regex[n_re]) n_re++;
        if ((st = pretok_init(&t->pre, pre->kind, pre->regex, n_re)) != VLLMC_OK) goto fail;
    }
    if ((st = tok_build_pieces(t)) != VLLMC_OK) goto fail;
    *out = t;
    return VLLMC_OK;
fail:
    tokenizer_destroy(t);
    return st;
}

void tokenizer_destroy(struct tokenizer *t) {
    if (!t) return;
    free(t->text_blob);
    free(t->text_off);
    free(t->type);
    free(t->score);
    free(t->is_eog);
    free(t->vocab.slot);
    free(t->vocab.hash);
    free(t->piece_blob);
    free(t->piece_off);
    free(t->specials);
    pretok_free(&t->pre);
    free(t->merges);
    free(t->virt_blob);
    free(t->virt_off);
    free(t);
}

/* GGUF keys. Missing optional keys keep llama.cpp's defaults. */
static vllmc_status tok_get_id(const struct gguf_ctx *ctx, const char *key, int32_t *id) {
    if (gguf_find_key(ctx, key) < 0) return VLLMC_OK;
    uint32_t v;
    vllmc_status st = gguf_get_u32(ctx, key, &v);
    if (st != VLLMC_OK) return st;
    *id = v > (uint32_t)INT32_MAX ? -1 : (int32_t)v;
    return VLLMC_OK;
}

static vllmc_status tok_get_flag(const struct gguf_ctx *ctx, const char *key, bool *v) {
    if (gguf_find_key(ctx, key) < 0) return VLLMC_OK;
    return gguf_get_bool(ctx, key, v);
}

vllmc_status tokenizer_load_gguf(const struct gguf_ctx *ctx, struct tokenizer **out) {
    *out = NULL;
    struct gguf_str s;
    char model[64], pre[64] = "";
    vllmc_status st = gguf_get_str(ctx, "tokenizer.ggml.model", &s);
    if (st != VLLMC_OK) return vllmc_errorf(st, "tokenizer: %s", vllmc_last_error());
    gguf_str_copy(s, model, sizeof(model));
    if (gguf_find_key(ctx, "tokenizer.ggml.pre") >= 0) {
        if ((st = gguf_get_str(ctx, "tokenizer.ggml.pre", &s)) != VLLMC_OK) return st;
        gguf_str_copy(s, pre, sizeof(pre));
        if (s.len >= sizeof(pre)) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer (name of %llu bytes)",
                                                      (unsigned long long)s.len);
    }
    const struct gguf_kv *tokens = NULL, *types = NULL, *scores = NULL, *merges = NULL;
    if ((st = gguf_get_arr(ctx, "tokenizer.ggml.tokens", &tokens)) != VLLMC_OK) return st;
    if (tokens->arr_type != GGUF_TYPE_STRING || !tokens->strs || tokens->n == 0 || tokens->n >= (uint64_t)INT32_MAX)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.tokens is not a non-empty string array");
    uint32_t n = (uint32_t)tokens->n;
    float *fscores = NULL;
    int32_t *itypes = NULL;
    if (gguf_find_key(ctx, "tokenizer.ggml.token_type") >= 0) {
        if ((st = gguf_get_arr(ctx, "tokenizer.ggml.token_type", &types)) != VLLMC_OK) return st;
        if (types->arr_type != GGUF_TYPE_INT32 || types->n < n)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.token_type is not an int32 array of %u", n);
    }
    if (gguf_find_key(ctx, "tokenizer.ggml.scores") >= 0) {
        if ((st = gguf_get_arr(ctx, "tokenizer.ggml.scores", &scores)) != VLLMC_OK) return st;
        if ((scores->arr_type != GGUF_TYPE_FLOAT32 && scores->arr_type != GGUF_TYPE_INT32) || scores->n < n)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.scores is not a float32/int32 array of %u", n);
    }
    bool is_bpe = !strcmp(model, "gpt2");
    if (is_bpe) {
        if ((st = gguf_get_arr(ctx, "tokenizer.ggml.merges", &merges)) != VLLMC_OK) return st;
        if (merges->arr_type != GGUF_TYPE_STRING || !merges->strs || merges->n >= (uint64_t)UINT32_MAX)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.merges is not a string array");
    }
    struct tokenizer_spec spec = {
        .model = model, .pre = pre[0] ? pre : NULL, .n_tokens = n, .tokens = tokens->strs,
        .n_merges = merges ? (uint32_t)merges->n : 0, .merges = merges ? merges->strs : NULL,
        .bos_id = -1, .eos_id = -1, .eot_id = -1, .unk_id = -1, .pad_id = -1, .add_space_prefix = -1,
    };
    if (is_bpe) {
        spec.bos_id = spec.eos_id = 11; /* llama.cpp's defaults for gpt2 vocabularies */
        const struct tok_pre_def *pd = tok_find_pre(pre[0] ? pre : "default");
        spec.add_bos = pd && pd->add_bos;
    } else if (!strcmp(model, "llama")) {
        spec.bos_id = 1; spec.eos_id = 2; spec.unk_id = 0;
        spec.add_bos = true;
    }
    int32_t *defaults[] = {&spec.bos_id, &spec.eos_id, &spec.unk_id};
    for (size_t i = 0; i < ARRAY_LEN(defaults); i++)
        if (*defaults[i] >= (int32_t)n) *defaults[i] = -1;
    if ((st = tok_get_id(ctx, "tokenizer.ggml.bos_token_id", &spec.bos_id)) != VLLMC_OK ||
        (st = tok_get_id(ctx, "tokenizer.ggml.eos_token_id", &spec.eos_id)) != VLLMC_OK ||
        (st = tok_get_id(ctx, "tokenizer.ggml.eot_token_id", &spec.eot_id)) != VLLMC_OK ||
        (st = tok_get_id(ctx, "tokenizer.ggml.unknown_token_id", &spec.unk_id)) != VLLMC_OK ||
        (st = tok_get_id(ctx, "tokenizer.ggml.padding_token_id", &spec.pad_id)) != VLLMC_OK ||
        (st = tok_get_flag(ctx, "tokenizer.ggml.add_bos_token", &spec.add_bos)) != VLLMC_OK ||
        (st = tok_get_flag(ctx, "tokenizer.ggml.add_eos_token", &spec.add_eos)) != VLLMC_OK)
        return st;
    bool asp = !is_bpe;
    if ((st = tok_get_flag(ctx, "tokenizer.ggml.add_space_prefix", &asp)) != VLLMC_OK) return st;
    spec.add_space_prefix = asp;
    if (types) {
        itypes = malloc((size_t)n * sizeof(int32_t));
        if (!itypes) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
        memcpy(itypes, types->data, (size_t)n * sizeof(int32_t));
        spec.types = itypes;
    }
    if (scores) {
        fscores = malloc((size_t)n * sizeof(float));
        if (!fscores) { free(itypes); return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory"); }
        if (scores->arr_type == GGUF_TYPE_FLOAT32) memcpy(fscores, scores->data, (size_t)n * sizeof(float));
        else for (uint32_t i = 0; i < n; i++) fscores[i] = (float)gguf_arr_i64(scores, i);
        spec.scores = fscores;
    }
    st = tokenizer_create(&spec, out);
    free(itypes);
    free(fscores);
    return st;
}

/* ---- facts ---- */

uint32_t tokenizer_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
enum tokenizer_model tokenizer_model_type(const struct tokenizer *t) { return t->model; }
const char *tokenizer_pre_name(const struct tokenizer *t) { return t->pre_name; }
int32_t tokenizer_bos(const struct tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const struct tokenizer *t) { return t->eos; }
bool tokenizer_add_bos(const struct tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n_vocab && t->is_eog[id];
}
bool tokenizer_is_control(const struct tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n_vocab && t->type[id] == TOKENIZER_TOKEN_CONTROL;
}
enum tokenizer_token_type tokenizer_token_type(const struct tokenizer *t, int32_t id) {
    return (id >= 0 && (uint32_t)id < t->n_vocab) ? (enum tokenizer_token_type)t->type[id] : TOKENIZER_TOKEN_UNDEFINED;
}
int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len) {
    return tok_map_find(t, &t->vocab, text, len);
}
const char *tokenizer_token_text(const struct tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) { *len = 0; return NULL; }
    return tok_text(t, (uint32_t)id, len);
}
const char *tokenizer_piece(const struct tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) { *len = 0; return NULL; }
    *len = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    return t->piece_blob + t->piece_off[id];
}

size_t tokenizer_bound(const struct tokenizer *t, size_t text_len) {
    /* BPE: an invalid byte is read as U+FFFD (3 bytes), and a byte of the read text gives at most one id
     * (a merge result without a token is spelled out by its one-byte ASCII characters only). SPM: an escaped space is 3 bytes, each may fall back to a byte token, and every text
     * fragment after a special token may get a space prefix (3 more). Plus BOS and EOS. */
    if (t->model == TOKENIZER_MODEL_BPE) return text_len * 3 + 3;
    return text_len * 6 + 8;
}

/* ---- encode ---- */

struct tok_out { int32_t *ids; size_t n, cap; bool count_only; };

static inline void tok_emit(struct tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

struct tok_heap_item { uint64_t prio; uint32_t left, right; };

/* Per-call cache of BPE results for short words: ordinary text repeats words a lot. Bounded size. */
#define TOK_CACHE_MAX_WORD 64
#define TOK_CACHE_MAX_ENTRIES (1u << 16)
struct tok_cache_entry { uint64_t hash; uint32_t key_off, key_len, ids_off, n_ids; };
struct tok_cache {
    uint32_t *slot; size_t mask;      /* entry index + 1, 0 = empty */
    struct tok_cache_entry *ent; size_t n_ent, cap_ent;
    uint8_t *keys; size_t n_keys, cap_keys;
    int32_t *ids; size_t n_ids, cap_ids;
};

struct tok_scratch {
    struct pretok_scratch pre;
    uint8_t *buf; size_t cap_buf;     /* sanitized / escaped text */
    uint32_t *sym; int32_t *prev, *next; size_t cap_sym;
    struct tok_heap_item *heap; size_t n_heap, cap_heap;
    int32_t *wids; size_t cap_wids;   /* ids of the current word */
    struct tok_cache cache;
};

static void tok_scratch_free(struct tok_scratch *s) {
    free(s->wids);
    free(s->cache.slot);
    free(s->cache.ent);
    free(s->cache.keys);
    free(s->cache.ids);
    pretok_scratch_free(&s->pre);
    free(s->buf);
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->heap);
}

static int tok_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int tok_reserve_syms(struct tok_scratch *s, size_t n) {
    if (n <= s->cap_sym) return 1;
    size_t c = s->cap_sym ? s->cap_sym : 64;
    while (c < n) c *= 2;
    uint32_t *a = realloc(s->sym, c * sizeof(uint32_t));
    if (a) s->sym = a;
    int32_t *b = realloc(s->prev, c * sizeof(int32_t));
    if (b) s->prev = b;
    int32_t *d = realloc(s->next, c * sizeof(int32_t));
    if (d) s->next = d;
    if (!a || !b || !d) return 0;
    s->cap_sym = c;
    return 1;
}

/* min-heap on prio (rank or inverted score, then left position) */
static int tok_heap_push(struct tok_scratch *s, uint64_t prio, uint32_t l, uint32_t r) {
    if (!tok_grow((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof(*s->heap))) return 0;
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p].prio <= prio) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = (struct tok_heap_item){prio, l, r};
    return 1;
}

static struct tok_heap_item tok_heap_pop(struct tok_scratch *s) {
    struct tok_heap_item top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && s->heap[c + 1].prio < s->heap[c].prio) c++;
        if (s->heap[c].prio >= last.prio) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void tok_emit_sym(const struct tokenizer *t, uint32_t sym, struct tok_out *o) {
    if (sym < t->n_vocab) { tok_emit(o, (int32_t)sym); return; }
    /* a merge result without a token: llama.cpp looks up each byte of its text as a one-byte token */
    size_t n;
    const uint8_t *s = (const uint8_t *)tok_sym_text(t, sym, &n);
    for (size_t i = 0; i < n; i++)
        if (t->single_byte_tok[s[i]] >= 0) tok_emit(o, t->single_byte_tok[s[i]]);
}

static inline int tok_bpe_add_pair(const struct tokenizer *t, struct tok_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 1;
    const struct tok_merge_entry *e = tok_merge_find(t, s->sym[l], s->sym[r]);
    if (!e) return 1;
    return tok_heap_push(s, ((uint64_t)e->rank << 32) | (uint32_t)l, (uint32_t)l, (uint32_t)r);
}

/* BPE of one pre-tokenized word (raw bytes): repeatedly merge the adjacent pair of lowest rank, leftmost first
 * (what llama.cpp's queue of (rank, left position) does). */
#define TOK_BPE_SMALL 24
static vllmc_status tok_bpe_word(const struct tokenizer *t, const uint8_t *w, size_t n, struct tok_scratch *s,
                                 struct tok_out *o) {
    if (n == 0) return VLLMC_OK;
    if (n == 1) { tok_emit_sym(t, t->byte_sym[w[0]], o); return VLLMC_OK; }
    if (t->ignore_merges && n <= t->max_text_len) { /* the GPT-2 form is >= n bytes: longer words are no token */
        char small[512];
        char *enc = 2 * n <= sizeof(small) ? small : malloc(2 * n);
        if (!enc) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += tok_utf8_encode(tok_byte_to_cp(w[i]), (uint8_t *)enc + k);
        int32_t id = tok_map_find(t, &t->vocab, enc, k);
        if (enc != small) free(enc);
        if (id >= 0) { tok_emit(o, id); return VLLMC_OK; }
    }
    if (n <= TOK_BPE_SMALL) { /* short word: rescan the few adjacent pairs instead of a heap */
        uint32_t sym[TOK_BPE_SMALL], rank[TOK_BPE_SMALL], res[TOK_BPE_SMALL];
        size_t k = n;
        for (size_t i = 0; i < n; i++) sym[i] = t->byte_sym[w[i]];
        for (size_t i = 0; i + 1 < k; i++) {
            const struct tok_merge_entry *e = tok_merge_find(t, sym[i], sym[i + 1]);
            rank[i] = e ? e->rank : UINT32_MAX;
            res[i] = e ? e->result : 0;
        }
        for (;;) {
            size_t best = SIZE_MAX;
            uint32_t br = UINT32_MAX;
            for (size_t i = 0; i + 1 < k; i++)
                if (rank[i] < br) { br = rank[i]; best = i; } /* strict <: leftmost of equal ranks */
            if (best == SIZE_MAX) break;
            sym[best] = res[best];
            for (size_t i = best + 1; i + 1 < k; i++) { sym[i] = sym[i + 1]; rank[i] = rank[i + 1]; res[i] = res[i + 1]; }
            k--;
            for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < k; i++) {
                const struct tok_merge_entry *e = tok_merge_find(t, sym[i], sym[i + 1]);
                rank[i] = e ? e->rank : UINT32_MAX;
                res[i] = e ? e->result : 0;
            }
        }
        for (size_t i = 0; i < k; i++) tok_emit_sym(t, sym[i], o);
        return VLLMC_OK;
    }
    if (!tok_reserve_syms(s, n)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_sym[w[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->n_heap = 0;
    for (size_t i = 1; i < n; i++)
        if (!tok_bpe_add_pair(t, s, (int32_t)i - 1, (int32_t)i)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    while (s->n_heap) {
        struct tok_heap_item it = tok_heap_pop(s);
        uint32_t l = it.left, r = it.right;
        if (s->next[l] != (int32_t)r || s->sym[r] == UINT32_MAX || s->sym[l] == UINT32_MAX) continue;
        const struct tok_merge_entry *e = tok_merge_find(t, s->sym[l], s->sym[r]);
        if (!e || e->rank != (uint32_t)(it.prio >> 32)) continue; /* stale: a side changed since the push */
        s->sym[l] = e->result;
        s->sym[r] = UINT32_MAX;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = (int32_t)l;
        if (!tok_bpe_add_pair(t, s, s->prev[l], (int32_t)l) || !tok_bpe_add_pair(t, s, (int32_t)l, s->next[l]))
            return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) tok_emit_sym(t, s->sym[i], o);
    return VLLMC_OK;
}

/* Text as llama.cpp's BPE sees it: decoded leniently and re-encoded (bad bytes become U+FFFD). */
static vllmc_status tok_sanitize(const uint8_t *in, size_t n, struct tok_scratch *s, size_t *out_n) {
    size_t need = n * 3 + 4;
    if (!tok_grow((void **)&s->buf, &s->cap_buf, need, 1)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    size_t i = 0, k = 0;
    while (i < n) {
        if (in[i] < 0x80) { s->buf[k++] = in[i++]; continue; }
        uint32_t cp = tok_utf8_decode(in, n, &i);
        k += tok_utf8_encode(cp, s->buf + k);
    }
    *out_n = k;
    return VLLMC_OK;
}

static const struct tok_cache_entry *tok_cache_find(const struct tok_cache *c, const uint8_t *w, size_t n, uint64_t h) {
    if (!c->slot) return NULL;
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        uint32_t v = c->slot[i];
        if (!v) return NULL;
        const struct tok_cache_entry *e = &c->ent[v - 1];
        if (e->hash == h && e->key_len == n && !memcmp(c->keys + e->key_off, w, n)) return e;
    }
}

/* Insert (best effort: a failed allocation only means no caching). */
static void tok_cache_put(struct tok_cache *c, const uint8_t *w, size_t n, uint64_t h, const int32_t *ids, size_t n_ids) {
    if (c->n_ent >= TOK_CACHE_MAX_ENTRIES) return;
    if (!c->slot || (c->n_ent + 1) * 2 > c->mask + 1) {
        size_t cap = c->slot ? (c->mask + 1) * 2 : 1024;
        uint32_t *slot = calloc(cap, sizeof(uint32_t));
        if (!slot) return;
        for (size_t k = 0; k < c->n_ent; k++) {
            size_t i = c->ent[k].hash & (cap - 1);
            while (slot[i]) i = (i + 1) & (cap - 1);
            slot[i] = (uint32_t)k + 1;
        }
        free(c->slot);
        c->slot = slot;
        c->mask = cap - 1;
    }
    if (!tok_grow((void **)&c->ent, &c->cap_ent, c->n_ent + 1, sizeof(*c->ent)) ||
        !tok_grow((void **)&c->keys, &c->cap_keys, c->n_keys + n, 1) ||
        !tok_grow((void **)&c->ids, &c->cap_ids, c->n_ids + n_ids, sizeof(int32_t)))
        return;
    struct tok_cache_entry *e = &c->ent[c->n_ent];
    *e = (struct tok_cache_entry){h, (uint32_t)c->n_keys, (uint32_t)n, (uint32_t)c->n_ids, (uint32_t)n_ids};
    if (n) memcpy(c->keys + c->n_keys, w, n); /* (an empty array may still be NULL: no offset on it) */
    c->n_keys += n;
    if (n_ids) memcpy(c->ids + c->n_ids, ids, n_ids * sizeof(int32_t));
    c->n_ids += n_ids;
    size_t i = h & c->mask;
    while (c->slot[i]) i = (i + 1) & c->mask;
    c->slot[i] = (uint32_t)++c->n_ent;
}

static vllmc_status tok_bpe_fragment(const struct tokenizer *t, const uint8_t *text, size_t n, struct tok_scratch *s,
                                     struct tok_out *o) {
    size_t m = 0;
    vllmc_status st = tok_sanitize(text, n, s, &m);
    if (st != VLLMC_OK) return st;
    if ((st = pretok_split(&t->pre, s->buf, m, &s->pre)) != VLLMC_OK) return st;
    size_t off = 0;
    for (size_t w = 0; w < s->pre.n_words; w++) {
        const uint8_t *word = s->buf + off;
        size_t len = s->pre.words[w];
        off += len;
        if (len < 2 || len > TOK_CACHE_MAX_WORD) {
            if ((st = tok_bpe_word(t, word, len, s, o)) != VLLMC_OK) return st;
            continue;
        }
        uint64_t h = tok_hash_bytes(word, len);
        const struct tok_cache_entry *e = tok_cache_find(&s->cache, word, len, h);
        if (e) {
            for (uint32_t i = 0; i < e->n_ids; i++) tok_emit(o, s->cache.ids[e->ids_off + i]);
            continue;
        }
        /* run BPE into the word buffer (a word of len bytes gives at most 2 * len ids), then copy out */
        if (!tok_grow((void **)&s->wids, &s->cap_wids, 2 * len, sizeof(int32_t)))
            return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
        struct tok_out wo = {s->wids, 0, s->cap_wids, false};
        if ((st = tok_bpe_word(t, word, len, s, &wo)) != VLLMC_OK) return st;
        for (size_t i = 0; i < wo.n; i++) tok_emit(o, s->wids[i]);
        tok_cache_put(&s->cache, word, len, h, s->wids, wo.n);
    }
    return VLLMC_OK;
}

/* SentencePiece BPE: merge the adjacent pair whose concatenation is the best-scoring token. */
static inline int tok_spm_add_pair(const struct tokenizer *t, struct tok_scratch *s, const uint8_t *txt, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 1;
    /* sym[] holds the byte length of each symbol; symbols are contiguous spans */
    size_t len = s->sym[l] + s->sym[r];
    int32_t id = tok_map_find(t, &t->vocab, (const char *)txt + (size_t)l, len);
    if (id < 0) return 1;
    /* max score first, then leftmost: map score to an ascending key */
    uint32_t bits;
    float sc = t->score[id];
    memcpy(&bits, &sc, 4);
    uint32_t key = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u); /* ascending in score */
    uint64_t prio = ((uint64_t)(~key) << 32) | (uint32_t)l;
    /* remember the expected merged size in the heap item's right field's partner via sym lengths */
    return tok_heap_push(s, prio, (uint32_t)l, (uint32_t)r) ? 1 : 0;
}

static vllmc_status tok_spm_fragment(const struct tokenizer *t, const uint8_t *text, size_t n, bool prefix_space,
                                     struct tok_scratch *s, struct tok_out *o) {
    /* escape: optional leading space, then ' ' -> U+2581 */
    size_t need = n * 3 + 3;
    if (!tok_grow((void **)&s->buf, &s->cap_buf, need, 1)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    uint8_t *b = s->buf;
    size_t m = 0;
    if (prefix_space) { b[m++] = 0xE2; b[m++] = 0x96; b[m++] = 0x81; }
    for (size_t i = 0; i < n; i++) {
        if (text[i] == ' ') { b[m++] = 0xE2; b[m++] = 0x96; b[m++] = 0x81; }
        else b[m++] = text[i];
    }
    if (m == 0) return VLLMC_OK;
    /* symbols indexed by byte offset: sym[i] = byte length of the symbol starting at i (0 if none) */
    if (!tok_reserve_syms(s, m)) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    int32_t last = -1;
    for (size_t i = 0; i < m;) {
        size_t len = tok_utf8_len(b[i]);
        if (len > m - i) len = m - i;
        s->sym[i] = (uint32_t)len;
        s->prev[i] = last;
        if (last >= 0) s->next[last] = (int32_t)i;
        last = (int32_t)i;
        i += len;
    }
    s->next[last] = -1;
    s->n_heap = 0;
    for (int32_t i = 0; s->next[i] >= 0; i = s->next[i])
        if (!tok_spm_add_pair(t, s, b, i, s->next[i])) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    while (s->n_heap) {
        struct tok_heap_item it = tok_heap_pop(s);
        int32_t l = (int32_t)it.left, r = (int32_t)it.right;
        if (s->sym[l] == 0 || s->sym[r] == 0 || s->next[l] != r) continue;
        /* stale if either side grew since the push: the concatenation must still be the token pushed */
        if ((size_t)l + s->sym[l] != (size_t)r) continue;
        size_t len = s->sym[l] + s->sym[r];
        int32_t id = tok_map_find(t, &t->vocab, (const char *)b + l, len);
        if (id < 0) continue;
        uint32_t bits;
        memcpy(&bits, &t->score[id], 4);
        uint32_t key = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
        if ((uint32_t)(it.prio >> 32) != ~key) continue;
        s->sym[l] = (uint32_t)len;
        s->sym[r] = 0;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (!tok_spm_add_pair(t, s, b, s->prev[l], l) || !tok_spm_add_pair(t, s, b, l, s->next[l]))
            return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        int32_t id = tok_map_find(t, &t->vocab, (const char *)b + i, s->sym[i]);
        if (id >= 0) { tok_emit(o, id); continue; }
        for (uint32_t j = 0; j < s->sym[i]; j++) {
            int32_t bt = t->byte_tok[b[i + j]];
            if (bt >= 0) tok_emit(o, bt);
            else if (t->unk >= 0) tok_emit(o, t->unk);
        }
    }
    return VLLMC_OK;
}

/* Fragments after the special-token partition: a token id, or a byte range of the text. */
struct tok_frag { int32_t id; uint32_t off, len; }; /* id < 0: raw text */

static vllmc_status tok_partition(const struct tokenizer *t, const char *text, size_t len, bool parse_special,
                                  struct tok_frag **frags, size_t *n_frags) {
    size_t cap = 16, n = 0;
    struct tok_frag *f = malloc(cap * sizeof(*f)), *g = NULL;
    uint64_t *pairs = NULL; /* bitmap of the byte pairs present in the text: most special tokens are ruled out
                               without a search (vocabularies can have thousands of them) */
    if (!f) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    if (len) f[n++] = (struct tok_frag){-1, 0, (uint32_t)len};
    if (len >= 64 && t->n_specials > 4 && (pairs = calloc(65536 / 64, sizeof(uint64_t)))) {
        const uint8_t *u = (const uint8_t *)text;
        for (size_t i = 0; i + 1 < len; i++) {
            unsigned k = ((unsigned)u[i] << 8) | u[i + 1];
            pairs[k >> 6] |= 1ull << (k & 63);
        }
    }
    for (uint32_t si = 0; si < t->n_specials && n; si++) {
        int32_t id = t->specials[si];
        if (!parse_special && (t->type[id] == TOKENIZER_TOKEN_CONTROL || t->type[id] == TOKENIZER_TOKEN_UNKNOWN)) continue;
        size_t sl;
        const char *st = tok_text(t, (uint32_t)id, &sl);
        if (pairs && sl >= 2) {
            const uint8_t *u = (const uint8_t *)st;
            unsigned k0 = ((unsigned)u[0] << 8) | u[1], k1 = ((unsigned)u[sl - 2] << 8) | u[sl - 1];
            if (!(pairs[k0 >> 6] >> (k0 & 63) & 1) || !(pairs[k1 >> 6] >> (k1 & 63) & 1)) continue;
        }
        /* quick reject: does the text occur anywhere in a raw fragment? */
        bool any = false;
        for (size_t i = 0; i < n && !any; i++)
            if (f[i].id < 0 && f[i].len >= sl && memmem(text + f[i].off, f[i].len, st, sl)) any = true;
        if (!any) continue;
        size_t gcap = n * 2 + 4, gn = 0;
        g = malloc(gcap * sizeof(*g));
        if (!g) goto oom;
        for (size_t i = 0; i < n; i++) {
            if (f[i].id >= 0 || f[i].len < sl) {
                if (gn == gcap) { gcap *= 2; struct tok_frag *q = realloc(g, gcap * sizeof(*g)); if (!q) goto oom; g = q; }
                g[gn++] = f[i];
                continue;
            }
            uint32_t off = f[i].off, end = f[i].off + f[i].len;
            for (;;) {
                const char *m = end - off >= sl ? memmem(text + off, end - off, st, sl) : NULL;
                if (gn + 2 >= gcap) { gcap = gcap * 2 + 4; struct tok_frag *q = realloc(g, gcap * sizeof(*g)); if (!q) goto oom; g = q; }
                if (!m) {
                    if (end > off) g[gn++] = (struct tok_frag){-1, off, end - off};
                    break;
                }
                uint32_t mo = (uint32_t)(m - text);
                if (mo > off) g[gn++] = (struct tok_frag){-1, off, mo - off};
                g[gn++] = (struct tok_frag){id, mo, (uint32_t)sl};
                off = mo + (uint32_t)sl;
            }
        }
        free(f);
        f = g;
        g = NULL;
        n = gn;
    }
    free(pairs);
    *frags = f;
    *n_frags = n;
    return VLLMC_OK;
oom:
    free(pairs);
    free(f);
    free(g);
    return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
}

static vllmc_status tok_encode_into(const struct tokenizer *t, const char *text, size_t len, unsigned flags, struct tok_out *o) {
    if (!text && len) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: NULL text");
    if (len > UINT32_MAX / 4) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: text of %zu bytes is too long", len);
    bool add_special = flags & TOKENIZER_ENCODE_ADD_SPECIAL;
    struct tok_frag *frags = NULL;
    size_t n_frags = 0;
    vllmc_status st = tok_partition(t, text, len, flags & TOKENIZER_ENCODE_PARSE_SPECIAL, &frags, &n_frags);
    if (st != VLLMC_OK) return st;
    struct tok_scratch s = {0};
    if (add_special && t->add_bos && t->bos >= 0) tok_emit(o, t->bos);
    bool prev_special = true;
    for (size_t i = 0; i < n_frags && st == VLLMC_OK; i++) {
        if (frags[i].id >= 0) { tok_emit(o, frags[i].id); prev_special = true; continue; }
        const uint8_t *p = (const uint8_t *)text + frags[i].off;
        if (t->model == TOKENIZER_MODEL_BPE) st = tok_bpe_fragment(t, p, frags[i].len, &s, o);
        else st = tok_spm_fragment(t, p, frags[i].len, t->add_space_prefix && prev_special, &s, o);
        prev_special = false;
    }
    if (st == VLLMC_OK && add_special && t->add_eos && t->eos >= 0) tok_emit(o, t->eos);
    tok_scratch_free(&s);
    free(frags);
    return st;
}

vllmc_status tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                              int32_t *ids, size_t cap, size_t *n_ids) {
    struct tok_out o = {ids, 0, ids ? cap : 0, false};
    vllmc_status st = tok_encode_into(t, text, len, flags, &o);
    *n_ids = o.n;
    if (st != VLLMC_OK) return st;
    if (o.n > o.cap) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: %zu ids do not fit in %zu", o.n, cap);
    return VLLMC_OK;
}

vllmc_status tokenizer_encode_alloc(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                                    int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    size_t cap = len / 2 + 16;
    for (;;) {
        int32_t *buf = malloc(cap * sizeof(int32_t));
        if (!buf) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
        struct tok_out o = {buf, 0, cap, false};
        vllmc_status st = tok_encode_into(t, text, len, flags, &o);
        if (st != VLLMC_OK) { free(buf); return st; }
        if (o.n <= cap) { *ids = buf; *n_ids = o.n; return VLLMC_OK; }
        free(buf);
        cap = o.n; /* exact size now known: one more pass */
    }
}

/* ---- decode ---- */

static bool tok_skip(const struct tokenizer *t, int32_t id, unsigned flags) {
    return (flags & TOKENIZER_DECODE_SKIP_SPECIAL) &&
           (t->type[id] == TOKENIZER_TOKEN_CONTROL || t->type[id] == TOKENIZER_TOKEN_UNKNOWN);
}

vllmc_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                              char *out, size_t cap, size_t *n_out) {
    size_t total = 0;
    bool first = true;
    *n_out = 0;
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || (uint32_t)id >= t->n_vocab) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: token id %d out of range", id);
        if (tok_skip(t, id, flags)) continue;
        size_t n;
        const char *p = tokenizer_piece(t, id, &n);
        if (first && n && t->model == TOKENIZER_MODEL_SPM && t->add_space_prefix && p[0] == ' ') { p++; n--; }
        first = false; /* only the first shown token carries the encoder's space prefix */
        if (n && total + n <= cap) memcpy(out + total, p, n); /* out may be NULL when cap is 0 */
        total += n;
    }
    *n_out = total;
    if (total > cap) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: %zu bytes do not fit in %zu", total, cap);
    return VLLMC_OK;
}

vllmc_status tokenizer_decode_alloc(const struct tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                                    char **out, size_t *n_out) {
    *out = NULL;
    size_t n = 0;
    vllmc_status st = tokenizer_decode(t, ids, n_ids, flags, NULL, 0, &n);
    if (st != VLLMC_OK && n == 0 && n_ids) {
        /* either empty output or a bad id: tell them apart */
        for (size_t i = 0; i < n_ids; i++)
            if (ids[i] < 0 || (uint32_t)ids[i] >= t->n_vocab) return st;
    }
    char *buf = malloc(n + 1);
    if (!buf) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    if ((st = tokenizer_decode(t, ids, n_ids, flags, buf, n, &n)) != VLLMC_OK) { free(buf); return st; }
    buf[n] = 0;
    *out = buf;
    *n_out = n;
    return VLLMC_OK;
}

/* ---- streaming ---- */

void tokenizer_stream_init(struct tokenizer_stream *s, const struct tokenizer *t, unsigned flags) {
    memset(s, 0, sizeof(*s));
    s->tok = t;
    s->flags = flags;
    s->first = true;
    s->stop_index = -1;
}

vllmc_status tokenizer_stream_set_stops(struct tokenizer_stream *s, const char *const *stops, size_t n) {
    if (n > TOKENIZER_STREAM_MAX_STOPS)
        return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: %zu stop strings (at most %d)", n, TOKENIZER_STREAM_MAX_STOPS);
    s->n_stops = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0;
        if (len > TOKENIZER_STREAM_MAX_STOP)
            return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: stop string of %zu bytes (at most %d)", len, TOKENIZER_STREAM_MAX_STOP);
        if (!len) continue;
        s->stops[s->n_stops] = stops[i];
        s->stop_lens[s->n_stops++] = len;
    }
    return VLLMC_OK;
}

size_t tokenizer_stream_bound(const struct tokenizer *t) {
    return TOKENIZER_STREAM_MAX_STOP + 3 * (t->max_piece_len + TOKENIZER_STREAM_MAX_PENDING) + 4;
}

/* Bytes a lead byte needs in total; 0 = not a lead byte. */
static size_t tok_seq_need(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

static bool tok_second_ok(uint8_t c, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    return b >= lo && b <= hi;
}

/* Move from buf[0..n) to out everything UTF-8-safe; keep an incomplete but still possible tail in pending. */
static size_t tok_stream_utf8(struct tokenizer_stream *s, const uint8_t *buf, size_t n, char *out, bool final) {
    size_t k = 0, i = 0;
    bool replace = s->flags & TOKENIZER_DECODE_REPLACE_INVALID;
    s->n_pending = 0;
    while (i < n) {
        uint8_t c = buf[i];
        size_t need = tok_seq_need(c);
        if (need == 1) { out[k++] = (char)c; i++; continue; }
        bool ok = need > 0;
        size_t have = 1;
        if (ok) {
            while (have < need && i + have < n) {
                uint8_t b = buf[i + have];
                if (have == 1 ? !tok_second_ok(c, b) : (b & 0xC0) != 0x80) { ok = false; break; }
                have++;
            }
        }
        if (ok && have == need) { memcpy(out + k, buf + i, need); k += need; i += need; continue; }
        if (ok && !final) { /* possible prefix of a sequence: wait for more */
            s->n_pending = (uint32_t)(n - i);
            memcpy(s->pending, buf + i, n - i);
            return k;
        }
        /* a byte that can never start valid UTF-8 here */
        if (replace) { out[k++] = (char)0xEF; out[k++] = (char)0xBF; out[k++] = (char)0xBD; }
        else out[k++] = (char)c;
        i++;
    }
    return k;
}

/* Stop-string filter over text = hold + new (in place in buf, which has room for both): emits to out what is
 * ruled out, keeps in hold the longest tail that is still a prefix of some stop string. */
static size_t tok_stream_stops(struct tokenizer_stream *s, char *buf, size_t n, char *out, bool final) {
    /* earliest complete stop string */
    size_t best = SIZE_MAX;
    for (uint32_t j = 0; j < s->n_stops; j++) {
        const char *m = n >= s->stop_lens[j] ? memmem(buf, n, s->stops[j], s->stop_lens[j]) : NULL;
        if (m && (size_t)(m - buf) < best) { best = (size_t)(m - buf); s->stop_index = (int32_t)j; }
    }
    if (best != SIZE_MAX) {
        memcpy(out, buf, best);
        s->stopped = true;
        s->n_hold = 0;
        s->n_pending = 0;
        return best;
    }
    size_t keep = 0;
    if (!final) {
        for (uint32_t j = 0; j < s->n_stops; j++) {
            size_t max = VLLMC_MIN(s->stop_lens[j] - 1, n);
            for (size_t l = max; l > keep; l--)
                if (!memcmp(buf + n - l, s->stops[j], l)) { keep = l; break; }
        }
    }
    memcpy(out, buf, n - keep);
    memcpy(s->hold, buf + n - keep, keep);
    s->n_hold = (uint32_t)keep;
    return n - keep;
}

vllmc_status tokenizer_stream_feed(struct tokenizer_stream *s, int32_t id, char *out, size_t cap, size_t *n_out) {
    const struct tokenizer *t = s->tok;
    *n_out = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: token id %d out of range", id);
    if (s->stopped || tok_skip(t, id, s->flags)) return VLLMC_OK;
    size_t n;
    const char *p = tokenizer_piece(t, id, &n);
    if (s->first && n && t->model == TOKENIZER_MODEL_SPM && t->add_space_prefix && p[0] == ' ') { p++; n--; }
    s->first = false;
    if (n == 0) return VLLMC_OK;
    size_t need = s->n_hold + 3 * (n + s->n_pending);
    if (cap < need) return vllmc_errorf(VLLMC_ERR_INVALID, "tokenizer: stream buffer of %zu bytes, need %zu", cap, need);
    uint8_t small[512];
    size_t total = s->n_pending + n;
    size_t work = s->n_hold + 3 * total;
    uint8_t *buf = total + work <= sizeof(small) ? small : malloc(total + work);
    if (!buf) return vllmc_errorf(VLLMC_ERR_OOM, "tokenizer: out of memory");
    memcpy(buf, s->pending, s->n_pending);
    memcpy(buf + s->n_pending, p, n);
    if (!s->n_stops) {
        *n_out = tok_stream_utf8(s, buf, total, out, false);
    } else {
        char *text = (char *)buf + total; /* hold + newly safe bytes */
        memcpy(text, s->hold, s->n_hold);
        size_t k = tok_stream_utf8(s, buf, total, text + s->n_hold, false);
        *n_out = tok_stream_stops(s, text, s->n_hold + k, out, false);
    }
    if (buf != small) free(buf);
    return VLLMC_OK;
}

size_t tokenizer_stream_flush(struct tokenizer_stream *s, char *out, size_t cap) {
    if (s->stopped) return 0;
    size_t need = s->n_hold + 3 * s->n_pending;
    if (!need || cap < need) return 0;
    char text[TOKENIZER_STREAM_MAX_STOP + 3 * TOKENIZER_STREAM_MAX_PENDING];
    uint8_t pend[TOKENIZER_STREAM_MAX_PENDING];
    size_t np = s->n_pending;
    memcpy(pend, s->pending, np);
    memcpy(text, s->hold, s->n_hold);
    size_t k = tok_stream_utf8(s, pend, np, text + s->n_hold, true);
    size_t n = s->n_hold + k;
    s->n_hold = 0;
    if (!s->n_stops) { memcpy(out, text, n); return n; }
    return tok_stream_stops(s, text, n, out, true);
}
