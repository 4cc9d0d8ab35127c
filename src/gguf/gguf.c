/* GGUF v2/v3 parser over (pointer, size), key/tensor lookup and typed getters.
 * Invariant: every read goes through a cursor that checks the remaining bytes first, with 64-bit
 * overflow-checked arithmetic; nothing is allocated on a count that has not been bounded by the
 * bytes left. The ctx only indexes the caller's buffer: no payload is copied. */
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "gguf.h"
#include "quant/quant.h"

#define GGUF_MAGIC_BYTES "GGUF"
#define GGUF_HEADER_SIZE 24
#define GGUF_MIN_KV_BYTES 13     /* key len (8) + 1 key byte + value type (4) */
#define GGUF_MIN_TENSOR_BYTES 24 /* name len (8) + n_dims (4) + type (4) + offset (8) */
#define GGUF_MAX_KEY_LEN 65535
#define GGUF_MAX_NAME_LEN 63     /* ggml: GGML_MAX_NAME (64) including the NUL */

static const char *const g_type_names[GGUF_TYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
    "UINT64", "INT64", "FLOAT64",
};
static const uint8_t g_type_sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? g_type_names[t] : "UNKNOWN";
}

uint64_t gguf_type_size(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? g_type_sizes[t] : 0;
}

/* ---- bounded cursor ---- */

struct gguf_cursor {
    const uint8_t *base;
    uint64_t pos, size;
    uint64_t fail_need, fail_pos; /* the read that failed: bytes wanted at which offset */
};

static uint64_t gguf_left(const struct gguf_cursor *c) { return c->size - c->pos; }

static uint64_t gguf_rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t gguf_rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* The readers return false when the bytes are not there (and record what was wanted); the caller
 * then names the field with gguf_truncated, so the fast path never formats a message. */
static bool gguf_need(struct gguf_cursor *c, uint64_t n) {
    if (n <= gguf_left(c)) return true;
    c->fail_need = n;
    c->fail_pos = c->pos;
    return false;
}

static bool gguf_read_u32(struct gguf_cursor *c, uint32_t *out) {
    if (!gguf_need(c, 4)) return false;
    *out = gguf_rd_u32(c->base + c->pos);
    c->pos += 4;
    return true;
}

static bool gguf_read_u64(struct gguf_cursor *c, uint64_t *out) {
    if (!gguf_need(c, 8)) return false;
    *out = gguf_rd_u64(c->base + c->pos);
    c->pos += 8;
    return true;
}

static bool gguf_read_str(struct gguf_cursor *c, struct gguf_str *out) {
    uint64_t len;
    if (!gguf_read_u64(c, &len) || !gguf_need(c, len)) return false;
    out->ptr = (const char *)c->base + c->pos;
    out->len = len;
    c->pos += len;
    return true;
}

static vllmc_status gguf_truncated(const struct gguf_cursor *c, const char *fmt, ...) VLLMC_PRINTF(2, 3);
static vllmc_status gguf_truncated(const struct gguf_cursor *c, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: truncated: %s needs %llu bytes at offset %llu, file is %llu bytes",
                        what, (unsigned long long)c->fail_need, (unsigned long long)c->fail_pos, (unsigned long long)c->size);
}

/* A short printable copy of a slice for messages. */
static const char *gguf_show(struct gguf_str s, char *buf, size_t n) {
    size_t k = 0;
    for (uint64_t i = 0; i < s.len && k + 4 < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[k++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s.len > 0 && k + 4 >= n) { buf[k++] = '.'; buf[k++] = '.'; buf[k++] = '.'; }
    buf[k] = 0;
    return buf;
}

/* ---- hash set over slices ---- */

static uint64_t gguf_hash(const char *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

static bool gguf_slice_eq(struct gguf_str a, const char *p, uint64_t n) {
    return a.len == n && (n == 0 || memcmp(a.ptr, p, n) == 0);
}

static uint64_t gguf_slots_for(uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

/* Insert index i (name given by get(i)) into slots; returns the earlier index with the same name, or -1. */
#define GGUF_SLOT_INSERT(slots, mask, arr, field, i, dup) do {                         \
    struct gguf_str s_ = (arr)[i].field;                                               \
    uint64_t h_ = gguf_hash(s_.ptr, s_.len) & (mask);                                  \
    (dup) = -1;                                                                        \
    while ((slots)[h_]) {                                                              \
        uint64_t j_ = (slots)[h_] - 1;                                                 \
        if (gguf_slice_eq((arr)[j_].field, s_.ptr, s_.len)) { (dup) = (int64_t)j_; break; } \
        h_ = (h_ + 1) & (mask);                                                        \
    }                                                                                  \
    if ((dup) < 0) (slots)[h_] = (uint32_t)((i) + 1);                                  \
} while (0)

/* ---- parser ---- */

static vllmc_status gguf_parse_value(struct gguf_cursor *c, struct gguf_kv *kv, uint64_t i_kv, const char *key) {
    uint32_t t = kv->type;
    if (t >= GGUF_TYPE_COUNT)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu '%s': unknown value type %u", (unsigned long long)i_kv, key, t);
    kv->data = c->base + c->pos;
    kv->n = 1;
    if (t == GGUF_TYPE_STRING) {
        struct gguf_str s;
        if (!gguf_read_str(c, &s)) return gguf_truncated(c, "kv %llu '%s' string value", (unsigned long long)i_kv, key);
        return VLLMC_OK;
    }
    if (t != GGUF_TYPE_ARRAY) {
        if (!gguf_need(c, g_type_sizes[t]))
            return gguf_truncated(c, "kv %llu '%s' %s value", (unsigned long long)i_kv, key, g_type_names[t]);
        if (t == GGUF_TYPE_BOOL && c->base[c->pos] > 1)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu '%s': bool value %u is not 0 or 1",
                                (unsigned long long)i_kv, key, c->base[c->pos]);
        c->pos += g_type_sizes[t];
        return VLLMC_OK;
    }
    uint32_t at;
    uint64_t n;
    if (!gguf_read_u32(c, &at) || !gguf_read_u64(c, &n))
        return gguf_truncated(c, "kv %llu '%s' array header", (unsigned long long)i_kv, key);
    if (at == GGUF_TYPE_ARRAY)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu '%s': nested arrays are not supported", (unsigned long long)i_kv, key);
    if (at >= GGUF_TYPE_COUNT)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu '%s': unknown array element type %u", (unsigned long long)i_kv, key, at);
    kv->arr_type = (enum gguf_type)at;
    kv->n = n;
    kv->data = c->base + c->pos;
    uint64_t esize = at == GGUF_TYPE_STRING ? 8 : g_type_sizes[at], bytes;
    if (!checked_mul_u64(n, esize, &bytes) || bytes > gguf_left(c))
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu '%s': array count %llu too large: %s elements need at least %llu bytes each, %llu bytes left (truncated or corrupt)",
                            (unsigned long long)i_kv, key, (unsigned long long)n, g_type_names[at],
                            (unsigned long long)esize, (unsigned long long)gguf_left(c));
    if (at != GGUF_TYPE_STRING) {
        if (at == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->base[c->pos + i] > 1)
                    return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu '%s': bool element %llu value %u is not 0 or 1",
                                        (unsigned long long)i_kv, key, (unsigned long long)i, c->base[c->pos + i]);
        c->pos += bytes;
        return VLLMC_OK;
    }
    struct gguf_str *strs = vllmc_calloc(n ? n : 1, sizeof(*strs));
    if (!strs) return VLLMC_ERR_OOM;
    kv->strs = strs; /* owned by the ctx from here on, freed by gguf_free */
    for (uint64_t i = 0; i < n; i++) {
        if (!gguf_read_str(c, &strs[i]))
            return gguf_truncated(c, "kv %llu '%s' string element %llu", (unsigned long long)i_kv, key, (unsigned long long)i);
    }
    return VLLMC_OK;
}

static vllmc_status gguf_parse_kvs(struct gguf_cursor *c, struct gguf_ctx *ctx) {
    vllmc_status st;
    char keybuf[80];
    ctx->kv_mask = gguf_slots_for(ctx->n_kv) - 1;
    if (!(ctx->kv_slots = vllmc_calloc(ctx->kv_mask + 1, sizeof(uint32_t)))) return VLLMC_ERR_OOM;
    for (uint64_t i = 0; i < ctx->n_kv; i++) {
        struct gguf_kv *kv = &ctx->kv[i];
        if (!gguf_read_str(c, &kv->key)) return gguf_truncated(c, "kv %llu key", (unsigned long long)i);
        if (kv->key.len == 0)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu has an empty key", (unsigned long long)i);
        if (kv->key.len > GGUF_MAX_KEY_LEN)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu key too long (%llu bytes, at most %d)",
                                (unsigned long long)i, (unsigned long long)kv->key.len, GGUF_MAX_KEY_LEN);
        gguf_show(kv->key, keybuf, sizeof(keybuf));
        if (memchr(kv->key.ptr, 0, kv->key.len))
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv %llu key '%s' contains a NUL byte", (unsigned long long)i, keybuf);
        int64_t dup;
        GGUF_SLOT_INSERT(ctx->kv_slots, ctx->kv_mask, ctx->kv, key, i, dup);
        if (dup >= 0)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: duplicate key '%s' (kv %lld and kv %llu)", keybuf,
                                (long long)dup, (unsigned long long)i);
        uint32_t t;
        if (!gguf_read_u32(c, &t)) return gguf_truncated(c, "kv %llu '%s' value type", (unsigned long long)i, keybuf);
        kv->type = (enum gguf_type)t;
        if ((st = gguf_parse_value(c, kv, i, keybuf))) return st;
    }
    return VLLMC_OK;
}

static vllmc_status gguf_parse_alignment(struct gguf_ctx *ctx) {
    ctx->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_key(ctx, "general.alignment");
    if (i < 0) return VLLMC_OK;
    const struct gguf_kv *kv = &ctx->kv[i];
    if (kv->type != GGUF_TYPE_UINT32)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: general.alignment has type %s, expected UINT32", gguf_type_name(kv->type));
    uint32_t a = gguf_rd_u32(kv->data);
    if (a == 0 || (a & (a - 1)))
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: general.alignment %u is not a power of two > 0", a);
    ctx->alignment = a;
    return VLLMC_OK;
}

static vllmc_status gguf_parse_tensor_info(struct gguf_cursor *c, struct gguf_ctx *ctx, uint64_t i) {
    char nm[80];
    struct gguf_tensor *t = &ctx->tensors[i];
    if (!gguf_read_str(c, &t->name)) return gguf_truncated(c, "tensor info %llu name", (unsigned long long)i);
    if (t->name.len == 0)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor %llu has an empty name", (unsigned long long)i);
    gguf_show(t->name, nm, sizeof(nm));
    if (memchr(t->name.ptr, 0, t->name.len))
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor %llu name '%s' contains a NUL byte", (unsigned long long)i, nm);
    if (t->name.len > GGUF_MAX_NAME_LEN)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor %llu name '%s' too long (%llu bytes, at most %d)",
                            (unsigned long long)i, nm, (unsigned long long)t->name.len, GGUF_MAX_NAME_LEN);
    int64_t dup;
    GGUF_SLOT_INSERT(ctx->tensor_slots, ctx->tensor_mask, ctx->tensors, name, i, dup);
    if (dup >= 0)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: duplicate tensor name '%s' (tensors %lld and %llu)", nm,
                            (long long)dup, (unsigned long long)i);
    if (!gguf_read_u32(c, &t->n_dims)) return gguf_truncated(c, "tensor '%s' n_dims", nm);
    if (t->n_dims > GGUF_MAX_DIMS)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' has n_dims %u > %d", nm, t->n_dims, GGUF_MAX_DIMS);
    uint64_t n_elem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims) continue;
        uint64_t v;
        if (!gguf_read_u64(c, &v)) return gguf_truncated(c, "tensor '%s' dimension %d", nm, d);
        if ((int64_t)v < 0)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' has a negative dimension ne[%d] = %lld", nm, d, (long long)v);
        if (v == 0)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' has a zero dimension ne[%d]", nm, d);
        if (!checked_mul_u64(n_elem, v, &n_elem) || n_elem > (uint64_t)INT64_MAX)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' element count overflows (dimension overflow at ne[%d] = %llu)",
                                nm, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
    }
    if (!gguf_read_u32(c, &t->type)) return gguf_truncated(c, "tensor '%s' type", nm);
    const struct quant_traits *tr = quant_traits(t->type);
    if (!tr || tr->block_size <= 0 || tr->type_size <= 0)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' has unknown type id %u", nm, t->type);
    if (t->ne[0] % tr->block_size)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' row %lld not a multiple of block %d (type %s)",
                            nm, (long long)t->ne[0], tr->block_size, tr->name);
    uint64_t bytes = (uint64_t)(t->ne[0] / tr->block_size);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t f = d == 0 ? (uint64_t)tr->type_size : (uint64_t)t->ne[d];
        if (!checked_mul_u64(bytes, f, &bytes) || bytes > (uint64_t)INT64_MAX || bytes > (uint64_t)SIZE_MAX)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' byte size overflows (dimension overflow)", nm);
    }
    t->size_bytes = bytes;
    if (!gguf_read_u64(c, &t->offset)) return gguf_truncated(c, "tensor '%s' offset", nm);
    if (t->offset % ctx->alignment)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' offset %llu is misaligned (not a multiple of alignment %llu)",
                            nm, (unsigned long long)t->offset, (unsigned long long)ctx->alignment);
    return VLLMC_OK;
}

/* Sort tensor indices by offset (heap sort: no recursion, no allocation beyond idx). */
static void gguf_sort_by_offset(const struct gguf_tensor *t, uint32_t *idx, uint64_t n) {
    if (n < 2) return;
    for (uint64_t start = n / 2; start-- > 0;) {
        for (uint64_t r = start;;) {
            uint64_t ch = 2 * r + 1;
            if (ch >= n) break;
            if (ch + 1 < n && t[idx[ch + 1]].offset > t[idx[ch]].offset) ch++;
            if (t[idx[r]].offset >= t[idx[ch]].offset) break;
            uint32_t tmp = idx[r]; idx[r] = idx[ch]; idx[ch] = tmp; r = ch;
        }
    }
    for (uint64_t end = n - 1; end > 0; end--) {
        uint32_t tmp = idx[0]; idx[0] = idx[end]; idx[end] = tmp;
        for (uint64_t r = 0;;) {
            uint64_t ch = 2 * r + 1;
            if (ch >= end) break;
            if (ch + 1 < end && t[idx[ch + 1]].offset > t[idx[ch]].offset) ch++;
            if (t[idx[r]].offset >= t[idx[ch]].offset) break;
            tmp = idx[r]; idx[r] = idx[ch]; idx[ch] = tmp; r = ch;
        }
    }
}

static vllmc_status gguf_check_overlap(struct gguf_ctx *ctx) {
    uint64_t n = ctx->n_tensors;
    const struct gguf_tensor *t = ctx->tensors;
    bool sorted = true;
    for (uint64_t i = 1; i < n && sorted; i++) sorted = t[i].offset >= t[i - 1].offset;
    uint32_t *idx = NULL;
    if (!sorted) {
        if (!(idx = vllmc_malloc(n * sizeof(*idx)))) return VLLMC_ERR_OOM;
        for (uint64_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
        gguf_sort_by_offset(t, idx, n);
    }
    vllmc_status st = VLLMC_OK;
    for (uint64_t k = 1; k < n; k++) {
        const struct gguf_tensor *a = &t[idx ? idx[k - 1] : k - 1], *b = &t[idx ? idx[k] : k];
        if (a->offset + a->size_bytes > b->offset) { /* no overflow: both end inside the file */
            char na[80], nb[80];
            st = vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                              gguf_show(a->name, na, sizeof(na)), (unsigned long long)a->offset,
                              (unsigned long long)(a->offset + a->size_bytes), gguf_show(b->name, nb, sizeof(nb)),
                              (unsigned long long)b->offset, (unsigned long long)(b->offset + b->size_bytes));
            break;
        }
    }
    free(idx);
    return st;
}

vllmc_status gguf_parse(const void *data, uint64_t size, struct gguf_ctx **out) {
    *out = NULL;
    if (!data && size) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf: NULL buffer");
    struct gguf_cursor c = {(const uint8_t *)data, 0, size, 0, 0};
    if (size < 4)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: truncated: file is %llu bytes, the GGUF header needs %d",
                            (unsigned long long)size, GGUF_HEADER_SIZE);
    if (memcmp(c.base, GGUF_MAGIC_BYTES, 4)) {
        char m[5];
        for (int i = 0; i < 4; i++) m[i] = (c.base[i] >= 0x20 && c.base[i] < 0x7f) ? (char)c.base[i] : '?';
        m[4] = 0;
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: bad magic '%s' (%02x %02x %02x %02x), expected 'GGUF'", m,
                            c.base[0], c.base[1], c.base[2], c.base[3]);
    }
    if (size < GGUF_HEADER_SIZE)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: truncated: file is %llu bytes, the GGUF header needs %d",
                            (unsigned long long)size, GGUF_HEADER_SIZE);
    c.pos = 4;
    uint32_t version = gguf_rd_u32(c.base + 4);
    uint64_t n_tensors = gguf_rd_u64(c.base + 8), n_kv = gguf_rd_u64(c.base + 16);
    c.pos = GGUF_HEADER_SIZE;
    if (version != 0 && (version & 0xFFFF) == 0)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: unsupported version 0x%08x: byte-swapped/big-endian GGUF not supported", version);
    if (version != 2 && version != 3)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: unsupported version %u (only 2 and 3 are supported)", version);
    /* Bound the counts by the bytes left before allocating anything. */
    if (n_kv > gguf_left(&c) / GGUF_MIN_KV_BYTES || n_kv > UINT32_MAX - 1)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: kv count %llu too large for the %llu bytes after the header",
                            (unsigned long long)n_kv, (unsigned long long)gguf_left(&c));
    if (n_tensors > gguf_left(&c) / GGUF_MIN_TENSOR_BYTES || n_tensors > UINT32_MAX - 1)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor count %llu too large for the %llu bytes after the header",
                            (unsigned long long)n_tensors, (unsigned long long)gguf_left(&c));

    struct gguf_ctx *ctx = vllmc_calloc(1, sizeof(*ctx));
    if (!ctx) return VLLMC_ERR_OOM;
    vllmc_status st = VLLMC_ERR_OOM;
    ctx->version = version;
    ctx->base = c.base;
    ctx->size = size;
    ctx->n_kv = n_kv;
    ctx->n_tensors = n_tensors;
    if (!(ctx->kv = vllmc_calloc(n_kv ? n_kv : 1, sizeof(*ctx->kv)))) goto fail;
    if ((st = gguf_parse_kvs(&c, ctx))) goto fail;
    if ((st = gguf_parse_alignment(ctx))) goto fail;

    if (n_tensors > gguf_left(&c) / GGUF_MIN_TENSOR_BYTES) {
        st = vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor count %llu too large for the %llu bytes after the metadata",
                          (unsigned long long)n_tensors, (unsigned long long)gguf_left(&c));
        goto fail;
    }
    st = VLLMC_ERR_OOM;
    if (!(ctx->tensors = vllmc_calloc(n_tensors ? n_tensors : 1, sizeof(*ctx->tensors)))) goto fail;
    ctx->tensor_mask = gguf_slots_for(n_tensors) - 1;
    if (!(ctx->tensor_slots = vllmc_calloc(ctx->tensor_mask + 1, sizeof(uint32_t)))) goto fail;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = gguf_parse_tensor_info(&c, ctx, i))) goto fail;

    /* The data section starts at the next multiple of the alignment. A file without tensors may
     * end before that padding (llama.cpp only pads when there are tensors to place). */
    uint64_t a = ctx->alignment, end_infos = c.pos;
    ctx->data_offset = end_infos + (a - end_infos % a) % a; /* end_infos <= size < 2^64 - a: no overflow for a <= 2^31 */
    if (n_tensors == 0 && ctx->data_offset > size) ctx->data_offset = size;
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct gguf_tensor *t = &ctx->tensors[i];
        uint64_t start, end;
        if (!checked_add_u64(ctx->data_offset, t->offset, &start) || !checked_add_u64(start, t->size_bytes, &end) ||
            end > size) {
            char nm[80];
            st = vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: tensor '%s' data (offset %llu + data start %llu, %llu bytes) past end of file (%llu bytes)",
                              gguf_show(t->name, nm, sizeof(nm)), (unsigned long long)t->offset,
                              (unsigned long long)ctx->data_offset, (unsigned long long)t->size_bytes,
                              (unsigned long long)size);
            goto fail;
        }
        t->data = c.base + start;
    }
    if ((st = gguf_check_overlap(ctx))) goto fail;
    *out = ctx;
    return VLLMC_OK;
fail:
    gguf_free(ctx);
    return st;
}

void gguf_free(struct gguf_ctx *ctx) {
    if (!ctx) return;
    if (ctx->kv)
        for (uint64_t i = 0; i < ctx->n_kv; i++) free((void *)ctx->kv[i].strs);
    free(ctx->kv);
    free(ctx->tensors);
    free(ctx->kv_slots);
    free(ctx->tensor_slots);
    free(ctx);
}

/* ---- lookup ---- */

int64_t gguf_find_key(const struct gguf_ctx *ctx, const char *key) {
    if (!ctx || !key) return -1;
    uint64_t n = strlen(key);
    if (ctx->kv_slots) {
        for (uint64_t h = gguf_hash(key, n) & ctx->kv_mask; ctx->kv_slots[h]; h = (h + 1) & ctx->kv_mask) {
            uint64_t j = ctx->kv_slots[h] - 1;
            if (j < ctx->n_kv && gguf_slice_eq(ctx->kv[j].key, key, n)) return (int64_t)j;
        }
        return -1;
    }
    for (uint64_t i = 0; i < ctx->n_kv; i++)
        if (gguf_slice_eq(ctx->kv[i].key, key, n)) return (int64_t)i;
    return -1;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_ctx *ctx, const char *name) {
    if (!ctx || !name) return NULL;
    uint64_t n = strlen(name);
    if (ctx->tensor_slots) {
        for (uint64_t h = gguf_hash(name, n) & ctx->tensor_mask; ctx->tensor_slots[h]; h = (h + 1) & ctx->tensor_mask) {
            uint64_t j = ctx->tensor_slots[h] - 1;
            if (j < ctx->n_tensors && gguf_slice_eq(ctx->tensors[j].name, name, n)) return &ctx->tensors[j];
        }
        return NULL;
    }
    for (uint64_t i = 0; i < ctx->n_tensors; i++)
        if (gguf_slice_eq(ctx->tensors[i].name, name, n)) return &ctx->tensors[i];
    return NULL;
}

bool gguf_str_eq(struct gguf_str s, const char *cstr) {
    return cstr && gguf_slice_eq(s, cstr, strlen(cstr));
}

char *gguf_str_copy(struct gguf_str s, char *buf, size_t buf_size) {
    if (!buf || buf_size == 0) return buf;
    size_t n = s.len < buf_size - 1 ? (size_t)s.len : buf_size - 1;
    if (n) memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return buf;
}

/* ---- typed getters ---- */

static bool gguf_is_int_type(enum gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16 ||
           t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}
static bool gguf_is_signed(enum gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* Integer value at p of type t: as a sign flag plus magnitude bits, so u64 and i64 both fit. */
static void gguf_load_int(enum gguf_type t, const uint8_t *p, bool *neg, uint64_t *u) {
    int64_t s = 0;
    *neg = false;
    switch (t) {
    case GGUF_TYPE_UINT8: *u = p[0]; return;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *u = v; return; }
    case GGUF_TYPE_UINT32: *u = gguf_rd_u32(p); return;
    case GGUF_TYPE_UINT64: *u = gguf_rd_u64(p); return;
    case GGUF_TYPE_INT8: s = (int8_t)p[0]; break;
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); s = v; break; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); s = v; break; }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); s = v; break; }
    default: *u = 0; return;
    }
    *neg = s < 0;
    *u = (uint64_t)s;
}

static vllmc_status gguf_get_kv(const struct gguf_ctx *ctx, const char *key, const struct gguf_kv **kv) {
    int64_t i = gguf_find_key(ctx, key);
    if (i < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf: key '%s' not found", key ? key : "(null)");
    *kv = &ctx->kv[i];
    return VLLMC_OK;
}

static vllmc_status gguf_wrong_type(const struct gguf_kv *kv, const char *key, const char *want) {
    return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: key '%s' has type %s%s%s, expected %s", key, gguf_type_name(kv->type),
                        kv->type == GGUF_TYPE_ARRAY ? " of " : "", kv->type == GGUF_TYPE_ARRAY ? gguf_type_name(kv->arr_type) : "",
                        want);
}

static vllmc_status gguf_get_int(const struct gguf_ctx *ctx, const char *key, bool *neg, uint64_t *u, const char *want) {
    const struct gguf_kv *kv = NULL;
    vllmc_status st = gguf_get_kv(ctx, key, &kv);
    if (st) return st;
    if (!gguf_is_int_type(kv->type)) return gguf_wrong_type(kv, key, want);
    gguf_load_int(kv->type, kv->data, neg, u);
    return VLLMC_OK;
}

vllmc_status gguf_get_u32(const struct gguf_ctx *ctx, const char *key, uint32_t *out) {
    bool neg = false; uint64_t u = 0;
    vllmc_status st = gguf_get_int(ctx, key, &neg, &u, "an integer");
    if (st) return st;
    if (neg || u > UINT32_MAX)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: key '%s' value %s%llu does not fit in u32", key, neg ? "-" : "",
                            (unsigned long long)(neg ? 0 - u : u));
    *out = (uint32_t)u;
    return VLLMC_OK;
}

vllmc_status gguf_get_u64(const struct gguf_ctx *ctx, const char *key, uint64_t *out) {
    bool neg = false; uint64_t u = 0;
    vllmc_status st = gguf_get_int(ctx, key, &neg, &u, "an integer");
    if (st) return st;
    if (neg) return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: key '%s' value -%llu does not fit in u64", key, (unsigned long long)(0 - u));
    *out = u;
    return VLLMC_OK;
}

vllmc_status gguf_get_i64(const struct gguf_ctx *ctx, const char *key, int64_t *out) {
    bool neg = false; uint64_t u = 0;
    vllmc_status st = gguf_get_int(ctx, key, &neg, &u, "an integer");
    if (st) return st;
    if (!neg && u > (uint64_t)INT64_MAX)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: key '%s' value %llu does not fit in i64", key, (unsigned long long)u);
    *out = (int64_t)u;
    return VLLMC_OK;
}

vllmc_status gguf_get_f32(const struct gguf_ctx *ctx, const char *key, float *out) {
    const struct gguf_kv *kv = NULL;
    vllmc_status st = gguf_get_kv(ctx, key, &kv);
    if (st) return st;
    if (kv->type == GGUF_TYPE_FLOAT32) { memcpy(out, kv->data, 4); return VLLMC_OK; }
    if (kv->type == GGUF_TYPE_FLOAT64) { double d; memcpy(&d, kv->data, 8); *out = (float)d; return VLLMC_OK; }
    return gguf_wrong_type(kv, key, "FLOAT32 or FLOAT64");
}

vllmc_status gguf_get_bool(const struct gguf_ctx *ctx, const char *key, bool *out) {
    const struct gguf_kv *kv = NULL;
    vllmc_status st = gguf_get_kv(ctx, key, &kv);
    if (st) return st;
    if (kv->type != GGUF_TYPE_BOOL) return gguf_wrong_type(kv, key, "BOOL");
    *out = kv->data[0] != 0;
    return VLLMC_OK;
}

vllmc_status gguf_get_str(const struct gguf_ctx *ctx, const char *key, struct gguf_str *out) {
    const struct gguf_kv *kv = NULL;
    vllmc_status st = gguf_get_kv(ctx, key, &kv);
    if (st) return st;
    if (kv->type != GGUF_TYPE_STRING) return gguf_wrong_type(kv, key, "STRING");
    out->len = gguf_rd_u64(kv->data);
    out->ptr = (const char *)kv->data + 8;
    return VLLMC_OK;
}

vllmc_status gguf_get_arr(const struct gguf_ctx *ctx, const char *key, const struct gguf_kv **out) {
    const struct gguf_kv *kv = NULL;
    vllmc_status st = gguf_get_kv(ctx, key, &kv);
    if (st) return st;
    if (kv->type != GGUF_TYPE_ARRAY) return gguf_wrong_type(kv, key, "ARRAY");
    *out = kv;
    return VLLMC_OK;
}

/* Out-of-range i is a caller bug (assert); a non-numeric array gives 0. */
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i) {
    VLLMC_ASSERT(kv && kv->type == GGUF_TYPE_ARRAY && i < kv->n);
    enum gguf_type t = kv->arr_type;
    const uint8_t *p = kv->data + i * gguf_type_size(t);
    if (gguf_is_int_type(t)) {
        bool neg; uint64_t u;
        gguf_load_int(t, p, &neg, &u);
        return (int64_t)u; /* u64 above INT64_MAX wraps, as a C cast would */
    }
    if (t == GGUF_TYPE_BOOL) return p[0];
    if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) {
        double d = gguf_arr_f64(kv, i);
        return (isfinite(d) && d > -9.2e18 && d < 9.2e18) ? (int64_t)d : 0;
    }
    return 0;
}

double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i) {
    VLLMC_ASSERT(kv && kv->type == GGUF_TYPE_ARRAY && i < kv->n);
    enum gguf_type t = kv->arr_type;
    const uint8_t *p = kv->data + i * gguf_type_size(t);
    if (t == GGUF_TYPE_FLOAT32) { float f; memcpy(&f, p, 4); return f; }
    if (t == GGUF_TYPE_FLOAT64) { double d; memcpy(&d, p, 8); return d; }
    if (t == GGUF_TYPE_BOOL) return p[0];
    if (gguf_is_int_type(t)) {
        bool neg; uint64_t u;
        gguf_load_int(t, p, &neg, &u);
        return gguf_is_signed(t) ? (double)(int64_t)u : (double)u;
    }
    return 0.0;
}
