/* Helpers shared by the GPU parity tests (one translation unit each): the CPU reference backend `ref` and the
 * CUDA backend `gpu` under test, buffers on either side, fresh random inputs, and weights uploaded to both. */
#ifndef VLLMC_TEST_CUDA_PAIR_H
#define VLLMC_TEST_CUDA_PAIR_H

#include <math.h>
#include <string.h>
#include "backend/backend.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"

static struct backend *ref, *gpu;

static inline void *dev_put(const void *h, size_t n) {
    void *d = NULL;
    if (gpu->ops->alloc(gpu, n, &d) != VLLMC_OK) { fprintf(stderr, "alloc failed\n"); exit(1); }
    if (h) CHECK(gpu->ops->copy_to_device(gpu, d, h, n) == VLLMC_OK);
    return d;
}
static inline void dev_get(void *h, const void *d, size_t n) { CHECK(gpu->ops->copy_to_host(gpu, h, d, n) == VLLMC_OK); }
static inline void *ref_put(const void *h, size_t n) {
    void *d = NULL;
    CHECK(ref->ops->alloc(ref, n, &d) == VLLMC_OK);
    if (h) memcpy(d, h, n);
    return d;
}
static inline float *nan_buf(size_t n) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}
static inline float *rand_buf(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = scale * test_rand_normal();
    return p;
}
/* Max |a-b| / max(|b|, floor); floor -f means f times the largest |b|; NaN anywhere gives inf. */
static inline double max_rel(const float *a, const float *b, size_t n, double floor_) {
    if (floor_ < 0) {
        double mx = 0;
        for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)b[i]));
        floor_ = -floor_ * mx;
    }
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), floor_);
        if (d > m) m = d;
    }
    return m;
}
/* Max |a-b| / max |b|: the error against the largest reference value; NaN in a gives inf. */
static inline double max_abs_over_max(const float *a, const float *b, size_t n) {
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, isnan(a[i]) ? INFINITY : fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return md / mx;
}
static inline size_t n_diff(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], 4) != 0;
    return k;
}

/* A reference / GPU activation pair of max_rows rows holding fmts, rows 0 .. rows - 1 set to x (host, rows x n_cols)
 * and quantized on each side. */
static inline void act_pair(int64_t max_rows, int64_t n_cols, uint32_t fmts, const float *x, int rows, struct bk_act *ra,
                            struct bk_act *ga) {
    CHECK(bk_act_alloc(ref, max_rows, n_cols, fmts, ra) == VLLMC_OK);
    CHECK(bk_act_alloc(gpu, max_rows, n_cols, fmts, ga) == VLLMC_OK);
    memcpy(ra->x, x, (size_t)((int64_t)rows * n_cols) * 4);
    CHECK(gpu->ops->copy_to_device(gpu, ga->x, x, (size_t)((int64_t)rows * n_cols) * 4) == VLLMC_OK);
    ra->n_rows = ga->n_rows = rows;
    CHECK(ref->ops->quantize(ref, ra) == VLLMC_OK);
    CHECK(gpu->ops->quantize(gpu, ga) == VLLMC_OK);
}

/* One attention call on both backends from the same host q [T][n_head * head_dim] and k, v [T][n_kv_head *
 * head_dim]; the GPU output starts as NaN. Returns the GPU output copied to the host (malloc'd) and the
 * reference output (ref memory, free with ref->ops->free) in *ro. */
static inline float *attn_pair(struct bk_kv_cache *rkv, struct bk_kv_cache *gkv, const struct bk_attn_params *p, int T,
                               const float *q, const float *k, const float *v, float **ro) {
    const size_t nq = (size_t)T * p->n_head * p->head_dim, nk = (size_t)T * p->n_kv_head * p->head_dim;
    float *gq = dev_put(q, nq * 4), *gk = dev_put(k, nk * 4), *gv = dev_put(v, nk * 4), *poison = nan_buf(nq);
    float *go = dev_put(poison, nq * 4);
    *ro = ref_put(NULL, nq * 4);
    CHECK(ref->ops->attention(ref, rkv, p, q, 0, k, 0, v, 0, *ro) == VLLMC_OK);
    CHECK(gpu->ops->attention(gpu, gkv, p, gq, 0, gk, 0, gv, 0, go) == VLLMC_OK);
    dev_get(poison, go, nq * 4);
    gpu->ops->free(gpu, gq); gpu->ops->free(gpu, gk); gpu->ops->free(gpu, gv); gpu->ops->free(gpu, go);
    return poison;
}

/* Random quant bytes with sane scales (as synth_gguf.py writes them): the block scale (and Q4_K's min scale)
 * replaced by small positive f16 values; float weights (F32, F16, BF16) N(0, 0.05); MXFP4's E8M0 byte e in 114 .. 125
 * (2^(e - 128): 2^-14 .. 2^-3), and 0 or 1 (f32 subnormal scales) in about one block of 16. */
static inline void fill_weight(uint32_t type, uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)test_rand_u64();
    const size_t bs = quant_traits(type)->type_size;
    if (type == GGML_TYPE_F32) {
        for (size_t i = 0; i < bytes / 4; i++) ((float *)p)[i] = 0.05f * test_rand_normal();
        return;
    }
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        for (size_t i = 0; i < bytes / 2; i++) {
            const float v = 0.05f * test_rand_normal();
            ((uint16_t *)p)[i] = type == GGML_TYPE_F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        }
        return;
    }
    for (size_t b = 0; b < bytes / bs; b++) {
        uint8_t *blk = p + b * bs;
        ggml_half d = fp32_to_fp16(1e-3f * (0.5f + test_rand_uniform())), dm = fp32_to_fp16(5e-4f * (0.5f + test_rand_uniform()));
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) { memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); }
        else if (type == GGML_TYPE_Q6_K) memcpy(blk + 208, &d, 2);
        else if (type == GGML_TYPE_Q2_K) { memcpy(blk + 80, &d, 2); memcpy(blk + 82, &dm, 2); }
        else if (type == GGML_TYPE_Q3_K) memcpy(blk + 108, &d, 2);
        else if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) { /* d, then the block's min m (here -d * [4, 12)) */
            const ggml_half m = fp32_to_fp16(-fp16_to_fp32(d) * (4.f + 8.f * test_rand_uniform()));
            memcpy(blk, &d, 2); memcpy(blk + 2, &m, 2);
        } else if (type == GGML_TYPE_MXFP4) {
            const uint64_t r = test_rand_u64();
            blk[0] = r % 16 == 0 ? (uint8_t)((r >> 4) & 1) : (uint8_t)(114 + (r >> 4) % 12);
        } else memcpy(blk, &d, 2);
    }
}

/* One weight uploaded to both backends from the same random bytes. */
struct pair_w { struct bk_tensor r, g; uint8_t *host; };
static inline void make_weight(struct pair_w *w, uint32_t type, int64_t n_in, int64_t n_out) {
    const size_t bytes = quant_row_size(type, n_in) * (size_t)n_out;
    w->host = malloc(bytes);
    fill_weight(type, w->host, bytes);
    const int64_t ne[2] = {n_in, n_out};
    CHECK(ref->ops->weight_upload(ref, w->host, type, 2, ne, &w->r) == VLLMC_OK);
    CHECK(gpu->ops->weight_upload(gpu, w->host, type, 2, ne, &w->g) == VLLMC_OK);
}
static inline void free_weight(struct pair_w *w) {
    ref->ops->weight_free(ref, &w->r);
    gpu->ops->weight_free(gpu, &w->g);
    free(w->host);
}

#endif
