/* GGUF reader/writer tests: random files written then parsed back value by value, one hand-made
 * corrupt image per rejection rule, truncation at every byte and random byte flips (never crash).
 * Extra modes for the Python oracle test and the fuzz corpus:
 *   test_gguf write OUT.gguf SEED [--oracle]   a random file (--oracle: only types gguf-py knows)
 *   test_gguf dump IN.gguf [--no-data]         canonical JSON of kvs and tensors (crc32 of the data)
 *   test_gguf seeds DIR                        small valid and corrupt seed files for the fuzzer */
#include <string.h>
#include <unistd.h>
#include "test.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------- random files */

#define MAX_KV 64
#define MAX_T 24

struct ref_kv {
    char key[48];
    enum gguf_type type, arr_type;
    uint64_t n;
    uint8_t *bytes;     /* scalar value / packed array elements */
    char **strs;        /* string value(s), NUL-terminated (no NULs inside) */
};

struct ref_tensor {
    char name[64];
    uint32_t type, n_dims;
    int64_t ne[4];
    uint8_t *data;
    uint64_t size;
};

struct ref_file {
    struct ref_kv kv[MAX_KV];
    int n_kv;
    struct ref_tensor t[MAX_T];
    int n_t;
    uint32_t alignment;
};

static uint64_t rnd(uint64_t n) { return n ? test_rand_u64() % n : 0; }

static char *rand_string(int max_len) {
    static const char *pieces[] = {"a", "b", "z", "Q", "0", "9", " ", "_", ".", "-", "\"", "\\", "\n", "\t", "\x01",
                                   "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "<|im_start|>", "\xc4\xa0"};
    int n = (int)rnd((uint64_t)max_len + 1);
    char *s = malloc((size_t)n * 12 + 1);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *p = pieces[rnd(ARRAY_LEN(pieces))];
        size_t l = strlen(p);
        memcpy(s + k, p, l);
        k += l;
    }
    s[k] = 0;
    return s;
}

static void rand_scalar(enum gguf_type t, uint8_t *out) {
    uint64_t r = test_rand_u64();
    switch (t) {
    case GGUF_TYPE_BOOL: out[0] = (uint8_t)(r & 1); break;
    case GGUF_TYPE_FLOAT32: { float f = test_rand_normal() * powf(10.0f, (float)((int)rnd(13) - 6)); memcpy(out, &f, 4); break; }
    case GGUF_TYPE_FLOAT64: { double d = (double)test_rand_normal() * pow(10.0, (double)((int)rnd(41) - 20)) + test_rand_uniform() * 1e-9;
                              memcpy(out, &d, 8); break; }
    default:
        /* mix small values with full-range ones, so conversions meet both */
        if (rnd(3) == 0) r = rnd(300);
        memcpy(out, &r, gguf_type_size(t));
    }
}

static const uint32_t g_all_tensor_types[] = {0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                              22, 23, 24, 25, 26, 27, 28, 29, 30, 34, 35, 39, 40, 41, 42};
/* Types whose sizes gguf-py 0.19 agrees with (no Q8_1: gguf-py has a stale size). */
static const uint32_t g_oracle_tensor_types[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23, 24, 25, 26, 27, 28, 30, 39};

static void ref_free(struct ref_file *f) {
    for (int i = 0; i < f->n_kv; i++) {
        free(f->kv[i].bytes);
        if (f->kv[i].strs)
            for (uint64_t j = 0; j < f->kv[i].n; j++) free(f->kv[i].strs[j]);
        free(f->kv[i].strs);
    }
    for (int i = 0; i < f->n_t; i++) free(f->t[i].data);
    memset(f, 0, sizeof(*f));
}

/* A random file: every value type at least once (scalars and arrays), random tensors. */
static void ref_random(struct ref_file *f, bool oracle_types) {
    memset(f, 0, sizeof(*f));
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int n_kv = 26 + (int)rnd(12);
    for (int i = 0; i < n_kv; i++) {
        struct ref_kv *kv = &f->kv[f->n_kv++];
        snprintf(kv->key, sizeof(kv->key), "test%d.%c%c%c.k%llu", i, 'a' + (int)rnd(26), 'a' + (int)rnd(26),
                 'a' + (int)rnd(26), (unsigned long long)rnd(1000));
        /* first 13 kvs: each scalar type then string; next: arrays of each element type; rest random */
        int sel = i < 13 ? i : (int)rnd(26);
        if (sel < 13 && sel != GGUF_TYPE_ARRAY) {
            kv->type = (enum gguf_type)sel;
            kv->n = 1;
            if (sel == GGUF_TYPE_STRING) {
                kv->strs = malloc(sizeof(char *));
                kv->strs[0] = rand_string(20);
            } else {
                kv->bytes = calloc(1, 8);
                rand_scalar(kv->type, kv->bytes);
            }
        } else {
            kv->type = GGUF_TYPE_ARRAY;
            int at = sel < 13 ? (int)rnd(13) : sel - 13;
            if (at == GGUF_TYPE_ARRAY) at = GGUF_TYPE_STRING;
            kv->arr_type = (enum gguf_type)at;
            uint64_t r = rnd(10);
            kv->n = r == 0 ? 0 : r < 8 ? rnd(9) : 200 + rnd(800);
            if (oracle_types && kv->n == 0) kv->n = 1; /* gguf-py's writer refuses empty arrays */
            if (at == GGUF_TYPE_STRING) {
                kv->strs = malloc((kv->n ? kv->n : 1) * sizeof(char *));
                for (uint64_t j = 0; j < kv->n; j++) kv->strs[j] = rand_string(8);
            } else {
                uint64_t es = gguf_type_size(kv->arr_type);
                kv->bytes = calloc(kv->n ? kv->n : 1, es);
                for (uint64_t j = 0; j < kv->n; j++) rand_scalar(kv->arr_type, kv->bytes + j * es);
            }
        }
    }
    if (rnd(3) == 0) {
        f->alignment = 1u << (3 + rnd(6)); /* 8 .. 256 */
        struct ref_kv *kv = &f->kv[f->n_kv++];
        snprintf(kv->key, sizeof(kv->key), "general.alignment");
        kv->type = GGUF_TYPE_UINT32;
        kv->n = 1;
        kv->bytes = calloc(1, 8);
        memcpy(kv->bytes, &f->alignment, 4);
    }
    const uint32_t *types = oracle_types ? g_oracle_tensor_types : g_all_tensor_types;
    size_t n_types = oracle_types ? ARRAY_LEN(g_oracle_tensor_types) : ARRAY_LEN(g_all_tensor_types);
    f->n_t = (int)rnd(MAX_T - 3) + (rnd(8) == 0 ? 0 : 3);
    for (int i = 0; i < f->n_t; i++) {
        struct ref_tensor *t = &f->t[i];
        t->type = types[rnd(n_types)];
        const struct quant_traits *tr = quant_traits(t->type);
        snprintf(t->name, sizeof(t->name), "blk.%d.t%llu.weight", i, (unsigned long long)rnd(100000));
        t->n_dims = 1 + (uint32_t)rnd(4);
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        t->ne[0] = (int64_t)tr->block_size * (1 + (int64_t)rnd(tr->block_size == 1 ? 40 : 3));
        for (uint32_t d = 1; d < t->n_dims; d++) t->ne[d] = 1 + (int64_t)rnd(3);
        t->size = (uint64_t)(t->ne[0] / tr->block_size) * tr->type_size * t->ne[1] * t->ne[2] * t->ne[3];
        t->data = malloc(t->size);
        for (uint64_t j = 0; j < t->size; j++) t->data[j] = (uint8_t)test_rand_u64();
    }
}

static vllmc_status ref_write(const struct ref_file *f, const char *path) {
    struct gguf_writer *w = gguf_writer_create();
    vllmc_status st = VLLMC_OK;
    for (int i = 0; i < f->n_kv && !st; i++) {
        const struct ref_kv *kv = &f->kv[i];
        if (kv->type == GGUF_TYPE_STRING) st = gguf_writer_set_str(w, kv->key, kv->strs[0]);
        else if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING) {
            struct gguf_str *s = calloc(kv->n ? kv->n : 1, sizeof(*s));
            for (uint64_t j = 0; j < kv->n; j++) s[j] = (struct gguf_str){kv->strs[j], strlen(kv->strs[j])};
            st = gguf_writer_set_arr_str(w, kv->key, s, kv->n);
            free(s);
        } else if (kv->type == GGUF_TYPE_ARRAY) st = gguf_writer_set_arr(w, kv->key, kv->arr_type, kv->bytes, kv->n);
        else if (kv->type == GGUF_TYPE_UINT32 && rnd(2)) { uint32_t v; memcpy(&v, kv->bytes, 4); st = gguf_writer_set_u32(w, kv->key, v); }
        else if (kv->type == GGUF_TYPE_INT32 && rnd(2)) { int32_t v; memcpy(&v, kv->bytes, 4); st = gguf_writer_set_i32(w, kv->key, v); }
        else if (kv->type == GGUF_TYPE_UINT64 && rnd(2)) { uint64_t v; memcpy(&v, kv->bytes, 8); st = gguf_writer_set_u64(w, kv->key, v); }
        else if (kv->type == GGUF_TYPE_FLOAT32 && rnd(2)) { float v; memcpy(&v, kv->bytes, 4); st = gguf_writer_set_f32(w, kv->key, v); }
        else if (kv->type == GGUF_TYPE_BOOL && rnd(2)) st = gguf_writer_set_bool(w, kv->key, kv->bytes[0] != 0);
        else st = gguf_writer_set_val(w, kv->key, kv->type, kv->bytes);
    }
    for (int i = 0; i < f->n_t && !st; i++)
        st = gguf_writer_add_tensor(w, f->t[i].name, f->t[i].type, f->t[i].n_dims, f->t[i].ne, f->t[i].data);
    if (!st) st = gguf_writer_write(w, path);
    gguf_writer_destroy(w);
    return st;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Every value, type, order and tensor of the parsed file must match the reference. */
static void ref_check(const struct ref_file *f, const struct gguf_ctx *ctx, uint64_t file_size) {
    CHECK(ctx->version == 3);
    CHECK(ctx->n_kv == (uint64_t)f->n_kv);
    CHECK(ctx->n_tensors == (uint64_t)f->n_t);
    CHECK(ctx->alignment == f->alignment);
    CHECK(ctx->data_offset % f->alignment == 0);
    for (int i = 0; i < f->n_kv && (uint64_t)i < ctx->n_kv; i++) {
        const struct ref_kv *r = &f->kv[i];
        const struct gguf_kv *kv = &ctx->kv[i];
        CHECK_MSG(gguf_str_eq(kv->key, r->key), "kv %d key", i);
        CHECK(gguf_find_key(ctx, r->key) == i);
        CHECK(kv->type == r->type);
        if (kv->type != r->type) continue;
        if (r->type == GGUF_TYPE_STRING) {
            struct gguf_str s;
            CHECK(gguf_get_str(ctx, r->key, &s) == VLLMC_OK && gguf_str_eq(s, r->strs[0]));
        } else if (r->type == GGUF_TYPE_ARRAY) {
            const struct gguf_kv *a = NULL;
            CHECK(gguf_get_arr(ctx, r->key, &a) == VLLMC_OK && a == kv);
            CHECK(kv->arr_type == r->arr_type && kv->n == r->n);
            if (kv->arr_type != r->arr_type || kv->n != r->n) continue;
            if (r->arr_type == GGUF_TYPE_STRING) {
                bool ok = kv->strs != NULL;
                for (uint64_t j = 0; ok && j < r->n; j++) ok = gguf_str_eq(kv->strs[j], r->strs[j]);
                CHECK_MSG(ok, "kv '%s' string array", r->key);
            } else {
                uint64_t es = gguf_type_size(r->arr_type);
                CHECK_MSG(r->n == 0 || memcmp(kv->data, r->bytes, r->n * es) == 0, "kv '%s' array bytes", r->key);
                /* element accessors agree with a direct decode */
                bool ok = true;
                for (uint64_t j = 0; j < r->n && ok; j++) {
                    const uint8_t *p = r->bytes + j * es;
                    double want;
                    int64_t want_i;
                    switch (r->arr_type) {
                    case GGUF_TYPE_UINT8: want_i = p[0]; want = p[0]; break;
                    case GGUF_TYPE_INT8: want_i = (int8_t)p[0]; want = (int8_t)p[0]; break;
                    case GGUF_TYPE_BOOL: want_i = p[0]; want = p[0]; break;
                    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); want_i = v; want = v; break; }
                    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); want_i = v; want = v; break; }
                    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); want_i = v; want = v; break; }
                    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); want_i = v; want = v; break; }
                    case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p, 8); want_i = (int64_t)v; want = (double)v; break; }
                    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); want_i = v; want = (double)v; break; }
                    case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p, 4); want = v; want_i = gguf_arr_i64(kv, j); break; }
                    default: { double v; memcpy(&v, p, 8); want = v; want_i = gguf_arr_i64(kv, j); break; }
                    }
                    ok = gguf_arr_i64(kv, j) == want_i && gguf_arr_f64(kv, j) == want;
                }
                CHECK_MSG(ok, "kv '%s' gguf_arr_i64/f64", r->key);
            }
        } else {
            CHECK_MSG(memcmp(kv->data, r->bytes, gguf_type_size(r->type)) == 0, "kv '%s' value", r->key);
            /* typed getters: integers convert when the value fits */
            bool neg = false;
            uint64_t mag = 0;
            bool is_int = true;
            switch (r->type) {
            case GGUF_TYPE_UINT8: mag = r->bytes[0]; break;
            case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, r->bytes, 2); mag = v; break; }
            case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, r->bytes, 4); mag = v; break; }
            case GGUF_TYPE_UINT64: memcpy(&mag, r->bytes, 8); break;
            case GGUF_TYPE_INT8: { int8_t v = (int8_t)r->bytes[0]; neg = v < 0; mag = (uint64_t)(int64_t)v; break; }
            case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, r->bytes, 2); neg = v < 0; mag = (uint64_t)(int64_t)v; break; }
            case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, r->bytes, 4); neg = v < 0; mag = (uint64_t)(int64_t)v; break; }
            case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, r->bytes, 8); neg = v < 0; mag = (uint64_t)v; break; }
            default: is_int = false;
            }
            uint32_t u32 = 0; uint64_t u64 = 0; int64_t i64 = 0; float f32 = 0; bool b = false;
            vllmc_status s32 = gguf_get_u32(ctx, r->key, &u32), s64 = gguf_get_u64(ctx, r->key, &u64),
                         si64 = gguf_get_i64(ctx, r->key, &i64), sf = gguf_get_f32(ctx, r->key, &f32),
                         sb = gguf_get_bool(ctx, r->key, &b);
            if (is_int) {
                CHECK_MSG(s32 == ((!neg && mag <= UINT32_MAX) ? VLLMC_OK : VLLMC_ERR_CORRUPT), "u32 getter on '%s'", r->key);
                if (s32 == VLLMC_OK) CHECK(u32 == mag);
                CHECK_MSG(s64 == (!neg ? VLLMC_OK : VLLMC_ERR_CORRUPT), "u64 getter on '%s'", r->key);
                if (s64 == VLLMC_OK) CHECK(u64 == mag);
                CHECK_MSG(si64 == ((neg || mag <= (uint64_t)INT64_MAX) ? VLLMC_OK : VLLMC_ERR_CORRUPT), "i64 getter on '%s'", r->key);
                if (si64 == VLLMC_OK) CHECK(i64 == (int64_t)mag);
                CHECK(sf == VLLMC_ERR_CORRUPT && sb == VLLMC_ERR_CORRUPT);
            } else if (r->type == GGUF_TYPE_BOOL) {
                CHECK(sb == VLLMC_OK && b == (r->bytes[0] != 0));
                CHECK(s32 == VLLMC_ERR_CORRUPT && sf == VLLMC_ERR_CORRUPT);
            } else {
                float want;
                if (r->type == GGUF_TYPE_FLOAT32) memcpy(&want, r->bytes, 4);
                else { double d; memcpy(&d, r->bytes, 8); want = (float)d; }
                CHECK(sf == VLLMC_OK && memcmp(&f32, &want, 4) == 0);
                CHECK(s32 == VLLMC_ERR_CORRUPT && sb == VLLMC_ERR_CORRUPT);
            }
            struct gguf_str s;
            CHECK(gguf_get_str(ctx, r->key, &s) == VLLMC_ERR_CORRUPT && strstr(vllmc_last_error(), r->key));
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < f->n_t && (uint64_t)i < ctx->n_tensors; i++) {
        const struct ref_tensor *r = &f->t[i];
        const struct gguf_tensor *t = &ctx->tensors[i];
        CHECK(gguf_str_eq(t->name, r->name));
        CHECK(gguf_find_tensor(ctx, r->name) == t);
        CHECK(t->type == r->type && t->n_dims == r->n_dims);
        CHECK(t->ne[0] == r->ne[0] && t->ne[1] == r->ne[1] && t->ne[2] == r->ne[2] && t->ne[3] == r->ne[3]);
        CHECK(t->size_bytes == r->size);
        CHECK_MSG(t->offset == off, "tensor %d offset %llu, canonical %llu", i, (unsigned long long)t->offset,
                  (unsigned long long)off);
        CHECK(t->data == ctx->base + ctx->data_offset + t->offset);
        CHECK(memcmp(t->data, r->data, r->size) == 0);
        off += pad_to(r->size, f->alignment);
    }
    /* gguf-py pads after the last tensor too */
    if (f->n_t) CHECK_MSG(file_size == ctx->data_offset + off, "file size %llu", (unsigned long long)file_size);
    CHECK(gguf_find_key(ctx, "no.such.key") == -1);
    CHECK(gguf_find_tensor(ctx, "no.such.tensor") == NULL);
    uint32_t u;
    CHECK(gguf_get_u32(ctx, "no.such.key", &u) == VLLMC_ERR_INVALID && strstr(vllmc_last_error(), "no.such.key"));
}

static uint8_t *read_all(const char *path, uint64_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); fclose(fp); return NULL; }
    fclose(fp);
    *size = (uint64_t)n;
    return b;
}

static char g_tmp[256];

static void test_roundtrip(int iters) {
    for (int it = 0; it < iters; it++) {
        struct ref_file f;
        ref_random(&f, it & 1);
        CHECK(ref_write(&f, g_tmp) == VLLMC_OK);
        struct gguf_file *gf = NULL;
        vllmc_status st = gguf_file_open(g_tmp, &gf);
        CHECK_MSG(st == VLLMC_OK, "open: %s", vllmc_last_error());
        if (st == VLLMC_OK) {
            ref_check(&f, gf->ctx, gf->map_size);
            gguf_file_prefetch(gf);
            /* copy every kv and tensor through the writer: the bytes must be identical */
            struct gguf_writer *w = gguf_writer_create();
            for (uint64_t i = 0; i < gf->ctx->n_kv; i++) CHECK(gguf_writer_copy_kv(w, &gf->ctx->kv[i]) == VLLMC_OK);
            for (uint64_t i = 0; i < gf->ctx->n_tensors; i++) {
                const struct gguf_tensor *t = &gf->ctx->tensors[i];
                char nm[64];
                CHECK(gguf_writer_add_tensor(w, gguf_str_copy(t->name, nm, sizeof(nm)), t->type, t->n_dims, t->ne, t->data) == VLLMC_OK);
            }
            char tmp2[300];
            snprintf(tmp2, sizeof(tmp2), "%s.copy", g_tmp);
            CHECK(gguf_writer_write(w, tmp2) == VLLMC_OK);
            gguf_writer_destroy(w);
            uint64_t n1 = 0, n2 = 0;
            uint8_t *b1 = read_all(g_tmp, &n1), *b2 = read_all(tmp2, &n2);
            CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0);
            free(b1);
            free(b2);
            unlink(tmp2);
        }
        gguf_file_close(gf);
        ref_free(&f);
    }
}

/* ---------------------------------------------------------------- hand-made images */

struct buf { uint8_t *p; size_t n, cap; };

static void b_put(struct buf *b, const void *v, size_t n) {
    if (b->n + n > b->cap) { b->cap = (b->n + n) * 2 + 64; b->p = realloc(b->p, b->cap); }
    memcpy(b->p + b->n, v, n);
    b->n += n;
}
static void b_u8(struct buf *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(struct buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(struct buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(struct buf *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_hdr(struct buf *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    b_put(b, "GGUF", 4); b_u32(b, version); b_u64(b, n_t); b_u64(b, n_kv);
}
static void b_kv_u32(struct buf *b, const char *k, uint32_t v) { b_str(b, k); b_u32(b, GGUF_TYPE_UINT32); b_u32(b, v); }
static void b_tinfo(struct buf *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off) {
    b_str(b, name); b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) b_u64(b, (uint64_t)ne[d]);
    b_u32(b, type); b_u64(b, off);
}
static void b_pad(struct buf *b, size_t a) { while (b->n % a) b_u8(b, 0); }
static void b_zeros(struct buf *b, size_t n) { for (size_t i = 0; i < n; i++) b_u8(b, (uint8_t)(i * 7 + 1)); }

/* Parse from an exact-size heap copy so any over-read hits ASan's redzone. */
static vllmc_status parse_exact(const uint8_t *p, size_t n, struct gguf_ctx **ctx) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, p, n);
    vllmc_status st = gguf_parse(copy, n, ctx);
    if (st == VLLMC_OK) { gguf_free(*ctx); *ctx = NULL; }
    free(copy);
    return st;
}

static int g_n_corrupt;

static void expect_corrupt(struct buf *b, const char *words, const char *what) {
    struct gguf_ctx *ctx = NULL;
    vllmc_status st = parse_exact(b->p, b->n, &ctx);
    g_n_corrupt++;
    const char *msg = vllmc_last_error();
    bool ok = st == VLLMC_ERR_CORRUPT;
    /* words: '|'-separated, each must appear */
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "%s", words);
    for (char *w = strtok(tmp, "|"); w && ok; w = strtok(NULL, "|")) ok = strstr(msg, w) != NULL;
    CHECK_MSG(ok, "%s: status %d, message '%s', expected words '%s'", what, st, msg, words);
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static void expect_ok(struct buf *b, const char *what) {
    struct gguf_ctx *ctx = NULL;
    vllmc_status st = parse_exact(b->p, b->n, &ctx);
    CHECK_MSG(st == VLLMC_OK, "%s: %s", what, vllmc_last_error());
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static void test_corrupt(void) {
    struct buf b = {0};
    const int64_t ne32[1] = {32}, ne8[1] = {8};

    /* sanity: a minimal valid image of the same construction */
    b_hdr(&b, 3, 1, 1); b_kv_u32(&b, "a.b", 7); b_tinfo(&b, "t", 1, ne8, GGML_TYPE_F32, 0); b_pad(&b, 32); b_zeros(&b, 32);
    expect_ok(&b, "valid image");
    b_hdr(&b, 2, 0, 0);
    expect_ok(&b, "version 2, empty");

    expect_corrupt(&b, "truncated", "empty buffer");
    b_put(&b, "GGUF", 4); b_u32(&b, 3);
    expect_corrupt(&b, "truncated|header", "short header");
    b_hdr(&b, 3, 0, 0); memcpy(b.p, "GGML", 4);
    expect_corrupt(&b, "bad magic|GGML", "bad magic");
    b_hdr(&b, 1, 0, 0);
    expect_corrupt(&b, "unsupported version 1", "version 1");
    b_hdr(&b, 0, 0, 0);
    expect_corrupt(&b, "unsupported version 0", "version 0");
    b_hdr(&b, 4, 0, 0);
    expect_corrupt(&b, "unsupported version 4", "version 4");
    b_hdr(&b, 0x03000000u, 0, 0);
    expect_corrupt(&b, "byte-swapped", "big-endian");

    /* huge counts: rejected before allocating */
    b_hdr(&b, 3, 0, UINT64_MAX); b_zeros(&b, 40);
    expect_corrupt(&b, "kv count|too large", "huge kv count");
    b_hdr(&b, 3, 0, 1ull << 62); b_zeros(&b, 40);
    expect_corrupt(&b, "kv count|too large", "huge kv count 2^62");
    b_hdr(&b, 3, UINT64_MAX, 0); b_zeros(&b, 40);
    expect_corrupt(&b, "tensor count|too large", "huge tensor count");
    b_hdr(&b, 3, 2, 1); b_kv_u32(&b, "a", 1); b_zeros(&b, 30);
    expect_corrupt(&b, "tensor count|too large", "tensor count past metadata");

    /* kv records */
    b_hdr(&b, 3, 0, 1); b_u64(&b, 1000); b_put(&b, "abc", 3); b_zeros(&b, 10);
    expect_corrupt(&b, "truncated|kv 0 key", "key length past end");
    b_hdr(&b, 3, 0, 1); b_u64(&b, UINT64_MAX); b_zeros(&b, 10);
    expect_corrupt(&b, "truncated|kv 0 key", "huge key length");
    b_hdr(&b, 3, 0, 1); b_str(&b, ""); b_u32(&b, GGUF_TYPE_UINT8); b_u8(&b, 1);
    expect_corrupt(&b, "empty key", "empty key");
    b_hdr(&b, 3, 0, 2); b_kv_u32(&b, "a.b", 1); b_kv_u32(&b, "a.b", 2);
    expect_corrupt(&b, "duplicate key|a.b", "duplicate key");
    b_hdr(&b, 3, 0, 1); b_u64(&b, 3); b_put(&b, "a\0b", 3); b_u32(&b, GGUF_TYPE_UINT8); b_u8(&b, 1);
    expect_corrupt(&b, "NUL byte", "NUL in key");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, 13); b_u32(&b, 0);
    expect_corrupt(&b, "unknown value type 13", "value type 13");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, 0xFFFFFFFFu); b_u32(&b, 0);
    expect_corrupt(&b, "unknown value type", "value type -1");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_UINT64); b_u32(&b, 5);
    expect_corrupt(&b, "truncated|'k' UINT64 value", "truncated scalar");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_STRING); b_u64(&b, 1ull << 40); b_put(&b, "xy", 2);
    expect_corrupt(&b, "truncated|string value", "huge string length");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_BOOL); b_u8(&b, 2);
    expect_corrupt(&b, "bool|not 0 or 1", "bool 2");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_ARRAY); b_u64(&b, 1);
    b_u32(&b, GGUF_TYPE_UINT8); b_u64(&b, 1); b_u8(&b, 1);
    expect_corrupt(&b, "nested arrays", "nested array");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, 99); b_u64(&b, 0);
    expect_corrupt(&b, "unknown array element type 99", "array elem type 99");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_UINT32); b_u64(&b, 1ull << 62); b_zeros(&b, 16);
    expect_corrupt(&b, "array count|too large", "huge array count (overflow in count*4)");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_UINT32); b_u64(&b, 5); b_zeros(&b, 16);
    expect_corrupt(&b, "array count 5|too large", "array count past end");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_STRING); b_u64(&b, UINT64_MAX / 4); b_zeros(&b, 16);
    expect_corrupt(&b, "array count|too large", "huge string array count");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_STRING); b_u64(&b, 2);
    b_str(&b, "ab"); b_u64(&b, 100); b_zeros(&b, 4);
    expect_corrupt(&b, "truncated|string element 1", "string array element past end");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_BOOL); b_u64(&b, 3);
    b_u8(&b, 0); b_u8(&b, 1); b_u8(&b, 7);
    expect_corrupt(&b, "bool element 2", "bool array element 7");
    b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_UINT8);
    expect_corrupt(&b, "truncated|array header", "truncated array header");

    /* general.alignment */
    b_hdr(&b, 3, 0, 1); b_kv_u32(&b, "general.alignment", 0);
    expect_corrupt(&b, "general.alignment|power of two", "alignment 0");
    b_hdr(&b, 3, 0, 1); b_kv_u32(&b, "general.alignment", 48);
    expect_corrupt(&b, "general.alignment 48|power of two", "alignment 48");
    b_hdr(&b, 3, 0, 1); b_str(&b, "general.alignment"); b_u32(&b, GGUF_TYPE_UINT64); b_u64(&b, 32);
    expect_corrupt(&b, "general.alignment|UINT64|expected UINT32", "alignment u64");
    b_hdr(&b, 3, 0, 1); b_str(&b, "general.alignment"); b_u32(&b, GGUF_TYPE_ARRAY); b_u32(&b, GGUF_TYPE_UINT32); b_u64(&b, 1); b_u32(&b, 32);
    expect_corrupt(&b, "general.alignment|ARRAY", "alignment array");

    /* tensor infos */
    b_hdr(&b, 3, 2, 0); b_tinfo(&b, "w", 1, ne8, 0, 0); b_tinfo(&b, "w", 1, ne8, 0, 32); b_pad(&b, 32); b_zeros(&b, 64);
    expect_corrupt(&b, "duplicate tensor name 'w'", "duplicate tensor");
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "", 1, ne8, 0, 0); b_pad(&b, 32); b_zeros(&b, 32);
    expect_corrupt(&b, "empty name", "empty tensor name");
    b_hdr(&b, 3, 1, 0); b_u64(&b, 2); b_put(&b, "w\0", 2); b_u32(&b, 1); b_u64(&b, 8); b_u32(&b, 0); b_u64(&b, 0);
    b_pad(&b, 32); b_zeros(&b, 32);
    expect_corrupt(&b, "NUL byte", "NUL in tensor name");
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "0123456789012345678901234567890123456789012345678901234567890123", 1, ne8, 0, 0);
    b_pad(&b, 32); b_zeros(&b, 32);
    expect_corrupt(&b, "too long", "64-byte tensor name");
    {
        const int64_t ne5[5] = {8, 1, 1, 1, 1};
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 5, ne5, 0, 0); b_pad(&b, 32); b_zeros(&b, 32);
        expect_corrupt(&b, "n_dims 5", "n_dims 5");
        const int64_t neg[2] = {8, -2};
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 2, neg, 0, 0); b_pad(&b, 32); b_zeros(&b, 32);
        expect_corrupt(&b, "negative dimension|ne[1]", "negative dim");
        const int64_t zero[2] = {8, 0};
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 2, zero, 0, 0); b_pad(&b, 32); b_zeros(&b, 32);
        expect_corrupt(&b, "zero dimension|ne[1]", "zero dim");
        const int64_t big[3] = {1ll << 32, 1ll << 32, 4};
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 3, big, 0, 0); b_pad(&b, 32); b_zeros(&b, 32);
        expect_corrupt(&b, "overflow", "element count overflow");
        const int64_t big2[2] = {1ll << 31, 1ll << 31}; /* 2^62 elements, 2^64 bytes as F32 */
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 2, big2, GGML_TYPE_F32, 0); b_pad(&b, 32); b_zeros(&b, 32);
        expect_corrupt(&b, "byte size overflows", "byte size overflow");
        const int64_t big3[2] = {1ll << 31, 1ll << 20}; /* fits, but far past the end */
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 2, big3, GGML_TYPE_F32, 0); b_pad(&b, 32); b_zeros(&b, 32);
        expect_corrupt(&b, "past end of file", "huge tensor past end");
    }
    const uint32_t bad_types[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 1000, 0xFFFFFFFFu};
    for (size_t i = 0; i < ARRAY_LEN(bad_types); i++) {
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne32, bad_types[i], 0); b_pad(&b, 32); b_zeros(&b, 256);
        expect_corrupt(&b, "unknown type", "unknown ggml type");
    }
    {
        const int64_t ne33[1] = {33}, ne300[2] = {300, 2};
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne33, GGML_TYPE_Q4_0, 0); b_pad(&b, 32); b_zeros(&b, 64);
        expect_corrupt(&b, "row 33 not a multiple of block 32", "Q4_0 row 33");
        b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 2, ne300, GGML_TYPE_Q4_K, 0); b_pad(&b, 32); b_zeros(&b, 1024);
        expect_corrupt(&b, "row 300 not a multiple of block 256", "Q4_K row 300");
    }
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, 16); b_pad(&b, 32); b_zeros(&b, 64);
    expect_corrupt(&b, "misaligned|alignment 32", "misaligned offset");
    b_hdr(&b, 3, 1, 1); b_kv_u32(&b, "general.alignment", 64); b_tinfo(&b, "w", 1, ne8, 0, 32); b_pad(&b, 64); b_zeros(&b, 128);
    expect_corrupt(&b, "misaligned|alignment 64", "misaligned for custom alignment");
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, 0); b_pad(&b, 32); b_zeros(&b, 31);
    expect_corrupt(&b, "past end of file", "data one byte short");
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, 64); b_pad(&b, 32); b_zeros(&b, 64);
    expect_corrupt(&b, "past end of file", "offset past end");
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, UINT64_MAX - 31); b_pad(&b, 32); b_zeros(&b, 64);
    expect_corrupt(&b, "past end of file", "offset overflow");
    b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, 0);
    expect_corrupt(&b, "past end of file", "no data section");
    {
        const int64_t ne16[1] = {16};
        b_hdr(&b, 3, 2, 0); b_tinfo(&b, "a", 1, ne16, 0, 0); b_tinfo(&b, "b", 1, ne8, 0, 32); b_pad(&b, 32); b_zeros(&b, 96);
        expect_corrupt(&b, "overlap", "overlapping tensors");
        b_hdr(&b, 3, 3, 0); b_tinfo(&b, "c", 1, ne8, 0, 64); b_tinfo(&b, "a", 1, ne16, 0, 0); b_tinfo(&b, "b", 1, ne8, 0, 32);
        b_pad(&b, 32); b_zeros(&b, 128);
        expect_corrupt(&b, "overlap", "overlapping tensors out of order");
        b_hdr(&b, 3, 3, 0); b_tinfo(&b, "c", 1, ne8, 0, 64); b_tinfo(&b, "a", 1, ne8, 0, 0); b_tinfo(&b, "b", 1, ne8, 0, 32);
        b_pad(&b, 32); b_zeros(&b, 128);
        expect_ok(&b, "non-canonical order without overlap");
    }
    b_hdr(&b, 3, 1, 0); b_str(&b, "w"); b_u32(&b, 4); b_u64(&b, 8); b_u64(&b, 2);
    expect_corrupt(&b, "truncated|tensor 'w' dimension 2", "truncated tensor info");
    b_hdr(&b, 3, 1, 0); b_str(&b, "w"); b_u32(&b, 1); b_u64(&b, 8); b_u32(&b, 0); b_u32(&b, 0);
    expect_corrupt(&b, "truncated|offset", "truncated tensor offset");
}

/* Truncate a valid file at every byte: an error before the end of the last tensor, OK after. */
static void test_truncate_every_byte(void) {
    struct ref_file f;
    struct gguf_ctx *ctx = NULL;
    int tries = 0;
    uint8_t *img = NULL;
    uint64_t n = 0;
    do { /* want a small file with tensors */
        if (img) { free(img); ref_free(&f); }
        ref_random(&f, false);
        CHECK(ref_write(&f, g_tmp) == VLLMC_OK);
        img = read_all(g_tmp, &n);
    } while ((f.n_t == 0 || n > 24000) && ++tries < 50);
    VLLMC_ASSERT(img && gguf_parse(img, n, &ctx) == VLLMC_OK);
    uint64_t end = 0;
    for (uint64_t i = 0; i < ctx->n_tensors; i++)
        end = VLLMC_MAX(end, ctx->data_offset + ctx->tensors[i].offset + ctx->tensors[i].size_bytes);
    gguf_free(ctx);
    int bad = 0;
    for (uint64_t k = 0; k < n; k++) {
        struct gguf_ctx *c2 = NULL;
        vllmc_status st = parse_exact(img, (size_t)k, &c2);
        vllmc_status want = (k >= end && f.n_t > 0) ? VLLMC_OK : VLLMC_ERR_CORRUPT;
        if (st != want) {
            if (bad++ < 5) fprintf(stderr, "truncate at %llu of %llu: status %d (%s)\n", (unsigned long long)k,
                                   (unsigned long long)n, st, vllmc_last_error());
        }
    }
    CHECK_MSG(bad == 0, "%d truncation points gave the wrong status", bad);
    printf("truncated a %llu-byte file at every byte\n", (unsigned long long)n);
    free(img);
    ref_free(&f);
}

/* Walk a parsed ctx the way a consumer would: everything must stay inside the buffer. */
static void walk_ctx(const struct gguf_ctx *ctx) {
    for (uint64_t i = 0; i < ctx->n_kv; i++) {
        const struct gguf_kv *kv = &ctx->kv[i];
        char key[128];
        gguf_str_copy(kv->key, key, sizeof(key));
        uint32_t u32; uint64_t u64; int64_t i64; float f; bool b; struct gguf_str s; const struct gguf_kv *a;
        (void)gguf_get_u32(ctx, key, &u32); (void)gguf_get_u64(ctx, key, &u64); (void)gguf_get_i64(ctx, key, &i64);
        (void)gguf_get_f32(ctx, key, &f); (void)gguf_get_bool(ctx, key, &b); (void)gguf_get_str(ctx, key, &s);
        if (gguf_get_arr(ctx, key, &a) == VLLMC_OK) {
            for (uint64_t j = 0; j < a->n && j < 64; j++) {
                if (a->arr_type == GGUF_TYPE_STRING) CHECK((const uint8_t *)a->strs[j].ptr + a->strs[j].len <= ctx->base + ctx->size);
                else { (void)gguf_arr_i64(a, j); (void)gguf_arr_f64(a, j); }
            }
        }
    }
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        const struct gguf_tensor *t = &ctx->tensors[i];
        CHECK((const uint8_t *)t->data + t->size_bytes <= ctx->base + ctx->size);
        char nm[80];
        CHECK(gguf_find_tensor(ctx, gguf_str_copy(t->name, nm, sizeof(nm))) != NULL);
    }
}

static void test_byte_flips(int iters) {
    int n_ok = 0, n_err = 0;
    for (int it = 0; it < iters; it++) {
        struct ref_file f;
        ref_random(&f, false);
        CHECK(ref_write(&f, g_tmp) == VLLMC_OK);
        uint64_t n = 0;
        uint8_t *img = read_all(g_tmp, &n);
        struct gguf_ctx *ctx = NULL;
        VLLMC_ASSERT(gguf_parse(img, n, &ctx) == VLLMC_OK);
        uint64_t meta = ctx->data_offset;
        gguf_free(ctx);
        for (int k = 0; k < 40; k++) {
            uint8_t *copy = malloc(n);
            memcpy(copy, img, n);
            int flips = 1 + (int)rnd(4);
            for (int j = 0; j < flips; j++) {
                uint64_t pos = rnd(meta ? meta : n);
                switch (rnd(4)) {
                case 0: copy[pos] ^= (uint8_t)(1u << rnd(8)); break;
                case 1: copy[pos] = (uint8_t)test_rand_u64(); break;
                case 2: copy[pos] = 0xFF; break;
                default: copy[pos] = 0; break;
                }
            }
            uint64_t len = rnd(4) == 0 ? rnd(n + 1) : n;
            uint8_t *exact = malloc(len ? len : 1);
            memcpy(exact, copy, len);
            vllmc_status st = gguf_parse(exact, len, &ctx);
            if (st == VLLMC_OK) { n_ok++; walk_ctx(ctx); gguf_free(ctx); }
            else { n_err++; CHECK(st == VLLMC_ERR_CORRUPT && vllmc_last_error()[0]); }
            free(exact);
            free(copy);
        }
        free(img);
        ref_free(&f);
    }
    printf("byte flips: %d parsed, %d rejected\n", n_ok, n_err);
}

static void test_writer_errors(void) {
    struct gguf_writer *w = gguf_writer_create();
    const int64_t ne[2] = {32, 2}, ne_bad[1] = {33};
    float data[64] = {1};
    CHECK(gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, ne, data) == VLLMC_OK);
    CHECK(gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, ne, data) == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "b", GGML_TYPE_Q4_0, 1, ne_bad, data) == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "c", 4, 1, ne, data) == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_add_tensor(w, "d", GGML_TYPE_F32, 5, ne, data) == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_set_u32(w, "", 1) == VLLMC_ERR_INVALID);
    uint8_t two = 2;
    CHECK(gguf_writer_set_val(w, "x", GGUF_TYPE_BOOL, &two) == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_set_val(w, "x", GGUF_TYPE_STRING, "x") == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_set_arr(w, "x", GGUF_TYPE_STRING, data, 1) == VLLMC_ERR_INVALID);
    /* setting a key again replaces the value and keeps its position */
    CHECK(gguf_writer_set_u32(w, "first", 1) == VLLMC_OK);
    CHECK(gguf_writer_set_str(w, "second", "s") == VLLMC_OK);
    CHECK(gguf_writer_set_f32(w, "first", 2.5f) == VLLMC_OK);
    CHECK(gguf_writer_set_u32(w, "general.alignment", 24) == VLLMC_OK);
    CHECK(gguf_writer_write(w, g_tmp) == VLLMC_ERR_INVALID);
    CHECK(gguf_writer_set_u32(w, "general.alignment", 64) == VLLMC_OK);
    CHECK(gguf_writer_write(w, g_tmp) == VLLMC_OK);
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf") == VLLMC_ERR_IO);
    gguf_writer_destroy(w);
    struct gguf_file *f = NULL;
    CHECK(gguf_file_open(g_tmp, &f) == VLLMC_OK);
    if (f) {
        CHECK(f->ctx->n_kv == 3 && gguf_str_eq(f->ctx->kv[0].key, "first") && f->ctx->kv[0].type == GGUF_TYPE_FLOAT32);
        float v = 0;
        CHECK(gguf_get_f32(f->ctx, "first", &v) == VLLMC_OK && v == 2.5f);
        CHECK(f->ctx->alignment == 64 && f->ctx->data_offset % 64 == 0);
        CHECK(f->map_size == f->ctx->data_offset + 256);
    }
    gguf_file_close(f);
    gguf_file_close(NULL);
    gguf_free(NULL);
    CHECK(gguf_file_open("/nonexistent-file.gguf", &f) == VLLMC_ERR_IO && f == NULL);
    FILE *fp = fopen(g_tmp, "wb");
    fclose(fp);
    CHECK(gguf_file_open(g_tmp, &f) == VLLMC_ERR_CORRUPT && strstr(vllmc_last_error(), "truncated"));
    fp = fopen(g_tmp, "wb");
    fwrite("GGUF\3\0\0\0", 1, 8, fp);
    fclose(fp);
    CHECK(gguf_file_open(g_tmp, &f) == VLLMC_ERR_CORRUPT && strstr(vllmc_last_error(), g_tmp) &&
          strstr(vllmc_last_error(), "truncated"));
}

/* ---------------------------------------------------------------- oracle modes */

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, uint64_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    crc = ~crc;
    for (uint64_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static void json_str(FILE *o, const char *p, uint64_t n) {
    fputc('"', o);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') { fputc('\\', o); fputc(c, o); }
        else if (c < 0x20 || c == 0x7f) fprintf(o, "\\u%04x", c);
        else fputc(c, o);
    }
    fputc('"', o);
}

static void json_scalar(FILE *o, enum gguf_type t, const uint8_t *p) {
    switch (t) {
    case GGUF_TYPE_UINT8: fprintf(o, "%u", p[0]); break;
    case GGUF_TYPE_INT8: fprintf(o, "%d", (int8_t)p[0]); break;
    case GGUF_TYPE_BOOL: fprintf(o, "%s", p[0] ? "true" : "false"); break;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); fprintf(o, "%u", v); break; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); fprintf(o, "%d", v); break; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); fprintf(o, "%u", v); break; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); fprintf(o, "%d", v); break; }
    case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p, 8); fprintf(o, "%llu", (unsigned long long)v); break; }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); fprintf(o, "%lld", (long long)v); break; }
    case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p, 4); if (isfinite(v)) fprintf(o, "%.9g", v); else fprintf(o, "\"%g\"", v); break; }
    case GGUF_TYPE_FLOAT64: { double v; memcpy(&v, p, 8); if (isfinite(v)) fprintf(o, "%.17g", v); else fprintf(o, "\"%g\"", v); break; }
    default: fprintf(o, "null");
    }
}

static int mode_dump(const char *path, bool with_data) {
    struct gguf_file *f = NULL;
    if (gguf_file_open(path, &f) != VLLMC_OK) { fprintf(stderr, "%s\n", vllmc_last_error()); return 1; }
    const struct gguf_ctx *c = f->ctx;
    FILE *o = stdout;
    fprintf(o, "{\"version\": %u, \"alignment\": %llu, \"data_offset\": %llu, \"kv\": [", c->version,
            (unsigned long long)c->alignment, (unsigned long long)c->data_offset);
    for (uint64_t i = 0; i < c->n_kv; i++) {
        const struct gguf_kv *kv = &c->kv[i];
        fprintf(o, "%s\n{\"key\": ", i ? "," : "");
        json_str(o, kv->key.ptr, kv->key.len);
        fprintf(o, ", \"type\": \"%s\"", gguf_type_name(kv->type));
        if (kv->type == GGUF_TYPE_ARRAY) {
            fprintf(o, ", \"arr_type\": \"%s\", \"value\": [", gguf_type_name(kv->arr_type));
            uint64_t es = gguf_type_size(kv->arr_type);
            for (uint64_t j = 0; j < kv->n; j++) {
                if (j) fputc(',', o);
                if (kv->arr_type == GGUF_TYPE_STRING) json_str(o, kv->strs[j].ptr, kv->strs[j].len);
                else json_scalar(o, kv->arr_type, kv->data + j * es);
            }
            fputc(']', o);
        } else if (kv->type == GGUF_TYPE_STRING) {
            struct gguf_str s;
            memcpy(&s.len, kv->data, 8);
            s.ptr = (const char *)kv->data + 8;
            fprintf(o, ", \"value\": ");
            json_str(o, s.ptr, s.len);
        } else {
            fprintf(o, ", \"value\": ");
            json_scalar(o, kv->type, kv->data);
        }
        fputc('}', o);
    }
    fprintf(o, "],\n\"tensors\": [");
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        const struct gguf_tensor *t = &c->tensors[i];
        fprintf(o, "%s\n{\"name\": ", i ? "," : "");
        json_str(o, t->name.ptr, t->name.len);
        fprintf(o, ", \"type\": %u, \"n_dims\": %u, \"ne\": [%lld, %lld, %lld, %lld], \"offset\": %llu, \"size\": %llu",
                t->type, t->n_dims, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                (unsigned long long)t->offset, (unsigned long long)t->size_bytes);
        if (with_data) fprintf(o, ", \"crc32\": %u", crc32_update(0, t->data, t->size_bytes));
        fputc('}', o);
    }
    fprintf(o, "]}\n");
    gguf_file_close(f);
    return 0;
}

static int mode_seeds(const char *dir) {
    char path[512];
    struct ref_file f;
    int n = 0;
    /* valid: random small files */
    for (int i = 0; i < 4; i++) {
        ref_random(&f, i & 1);
        for (int k = 4; k < f.n_t; k++) free(f.t[k].data);
        if (f.n_t > 4) f.n_t = 4;
        for (int k = 0; k < f.n_kv; k++) if (f.kv[k].type == GGUF_TYPE_ARRAY && f.kv[k].n > 16) {
            if (f.kv[k].strs) for (uint64_t j = 16; j < f.kv[k].n; j++) free(f.kv[k].strs[j]);
            f.kv[k].n = 16;
        }
        snprintf(path, sizeof(path), "%s/valid_%d.gguf", dir, i);
        if (ref_write(&f, path) != VLLMC_OK) { fprintf(stderr, "%s\n", vllmc_last_error()); return 1; }
        ref_free(&f);
        n++;
    }
    /* hand-made corrupt ones */
    struct buf b = {0};
    const int64_t ne8[1] = {8};
    struct { const char *name; } names[] = {{"dup_key"}, {"bad_align"}, {"misaligned"}, {"nested"}, {"huge_count"}, {"past_end"}};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        b.n = 0;
        switch (i) {
        case 0: b_hdr(&b, 3, 0, 2); b_kv_u32(&b, "a.b", 1); b_kv_u32(&b, "a.b", 2); break;
        case 1: b_hdr(&b, 3, 1, 1); b_kv_u32(&b, "general.alignment", 48); b_tinfo(&b, "w", 1, ne8, 0, 0); b_pad(&b, 48); b_zeros(&b, 48); break;
        case 2: b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, 16); b_pad(&b, 32); b_zeros(&b, 64); break;
        case 3: b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, 9); b_u32(&b, 9); b_u64(&b, 1); b_u32(&b, 0); b_u64(&b, 1); b_u8(&b, 1); break;
        case 4: b_hdr(&b, 3, 0, 1); b_str(&b, "k"); b_u32(&b, 9); b_u32(&b, 8); b_u64(&b, 1ull << 60); b_str(&b, "x"); break;
        default: b_hdr(&b, 3, 1, 0); b_tinfo(&b, "w", 1, ne8, 0, 0); b_pad(&b, 32); b_zeros(&b, 20); break;
        }
        snprintf(path, sizeof(path), "%s/corrupt_%s.gguf", dir, names[i].name);
        FILE *fp = fopen(path, "wb");
        if (!fp || fwrite(b.p, 1, b.n, fp) != b.n) { perror(path); return 1; }
        fclose(fp);
        n++;
    }
    free(b.p);
    printf("wrote %d seed files to %s\n", n, dir);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "write")) {
        struct ref_file f;
        test_seed(strtoull(argv[3], NULL, 0));
        ref_random(&f, argc >= 5 && !strcmp(argv[4], "--oracle"));
        vllmc_status st = ref_write(&f, argv[2]);
        ref_free(&f);
        if (st) { fprintf(stderr, "%s\n", vllmc_last_error()); return 1; }
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "dump")) return mode_dump(argv[2], !(argc >= 4 && !strcmp(argv[3], "--no-data")));
    if (argc >= 3 && !strcmp(argv[1], "seeds")) { test_seed(12345); return mode_seeds(argv[2]); }
    if (argc > 1) {
        fprintf(stderr, "usage: test_gguf [write OUT SEED [--oracle] | dump IN [--no-data] | seeds DIR]\n");
        return 2;
    }

    test_seed_auto("test_gguf");
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/test_gguf_%d.gguf", (int)getpid());
    test_roundtrip(100);
    test_writer_errors();
    test_corrupt();
    printf("%d corrupt images checked\n", g_n_corrupt);
    test_truncate_every_byte();
    test_byte_flips(300);
    unlink(g_tmp);
    return test_finish("test_gguf");
}
