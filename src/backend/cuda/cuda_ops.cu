/* Row-wise and sequence kernels of the CUDA backend: embedding, RMSNorm, residual add, RoPE, paged
 * attention (split-K over the context, then a combine), Gated DeltaNet (conv, then one CTA per value
 * head for norms, gates, delta rule and gated norm), sigmoid gate, row gather and argmax.
 * Float formulas follow the CPU reference statement by statement (explicit _rn intrinsics keep the
 * compiler from contracting them into FMAs), so most results match it bit for bit; transcendental
 * functions (expf, sinf, cosf) may differ from glibc's in the last place. */
#include <math.h>
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/gdn_conv.h"
#include "backend/cuda/kv_access.h"
#include "backend/cuda/act_quant.h"
#include "backend/cuda/norm_quant.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#if !defined(VLLMC_HIP)
#include <cooperative_groups.h>
#endif

static __device__ __forceinline__ int32_t seq_slot_of(const struct cu_batch_dev &b, int t) { return b.seqinfo[4 * b.seq[t] + 2]; }

/* ---- embedding ---- */

static __device__ float dequant_elem(const uint8_t *row, uint32_t type, int64_t n, int64_t e) {
    switch (type) {
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: { /* Q5_K: the 5th bit from the qh bytes after the quants, the scales after those (gemv_q.cu
                              repack_row) */
        const bool q5 = type == GGML_TYPE_Q5_K;
        const int64_t ns = n / QK_K, s = e / QK_K;
        const int i = (int)(e % QK_K), c = i / 64, l = i % 64, sub = i / 32;
        const uint8_t qb = row[128 * s + 32 * c + (l % 32)];
        const int q = (l < 32 ? (qb & 15) : (qb >> 4)) | (q5 ? ((row[128 * ns + 32 * s + (i % 32)] >> sub) & 1) << 4 : 0);
        const int64_t sc_off = (q5 ? 160 : 128) * ns;
        const uint8_t *S = row + sc_off + 12 * s;
        const uint8_t *dm = row + sc_off + ((12 * ns + 15) & ~(int64_t)15) + 4 * s;
        int sc, m;
        if (sub < 4) { sc = S[sub] & 63; m = S[sub + 4] & 63; }
        else { sc = (S[sub + 4] & 15) | ((S[sub - 4] >> 6) << 4); m = (S[sub + 4] >> 4) | ((S[sub] >> 6) << 4); }
        const float d = fp16_to_fp32((uint16_t)(dm[0] | (dm[1] << 8))), dmin = fp16_to_fp32((uint16_t)(dm[2] | (dm[3] << 8)));
        const float a = __fmul_rn(d, (float)sc), bm = __fmul_rn(dmin, (float)m);
        return __fsub_rn(__fmul_rn(a, (float)q), bm);
    }
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K: { /* element 128h + 32g + l: bits 2g of quant byte 32h + l (Q3_K: bit 4h + g of hmask byte l clear
                            * means -4); the scale of 16-element sub-block i / 16 (gemv_q.cu repack_row's layouts) */
        const int64_t ns = n / QK_K, s = e / QK_K;
        const int i = (int)(e % QK_K), h = i / 128, g = (i % 128) / 32, l = i % 32, b = i / 16;
        int q = (row[64 * s + 32 * h + l] >> (2 * g)) & 3;
        if (type == GGML_TYPE_Q2_K) {
            const int sc = row[64 * ns + 16 * s + b];
            const uint8_t *dm = row + 80 * ns + 4 * s;
            const float d = fp16_to_fp32((uint16_t)(dm[0] | (dm[1] << 8))), dmin = fp16_to_fp32((uint16_t)(dm[2] | (dm[3] << 8)));
            return __fsub_rn(__fmul_rn(__fmul_rn(d, (float)(sc & 15)), (float)q), __fmul_rn(dmin, (float)(sc >> 4)));
        }
        if (!((row[64 * ns + 32 * s + l] >> (4 * h + g)) & 1)) q -= 4;
        const uint8_t *dp = row + 96 * ns + ((12 * ns + 15) & ~(int64_t)15) + 2 * s;
        const float d = fp16_to_fp32((uint16_t)(dp[0] | (dp[1] << 8)));
        return __fmul_rn(__fmul_rn(d, (float)q3k_scale(row + 96 * ns + 12 * s, b)), (float)q);
    }
    case GGML_TYPE_IQ4_XS: { /* d * (scale - 32) * kvalues_iq4nl[q] */
        const int64_t ns = n / QK_K, s = e / QK_K;
        const int i = (int)(e % QK_K), b = i / 32, j = i % 32;
        const uint8_t qb = row[128 * s + 16 * b + (j % 16)];
        const int q = j < 16 ? (qb & 15) : (qb >> 4);
        const uint8_t *dh = row + 128 * ns + ((4 * ns + 15) & ~(int64_t)15) + 4 * s;
        const int sh = dh[2] | (dh[3] << 8);
        const int ls = (((row[128 * ns + 4 * s + b / 2] >> (4 * (b % 2))) & 15) | (((sh >> (2 * b)) & 3) << 4)) - 32;
        const float d = fp16_to_fp32((uint16_t)(dh[0] | (dh[1] << 8)));
        return __fmul_rn(__fmul_rn(d, (float)ls), (float)iq4nl_value(q));
    }
    case GGML_TYPE_Q6_K: {
        const int64_t ns = n / QK_K, s = e / QK_K;
        const int i = (int)(e % QK_K), h = i / 128, g = (i % 128) / 32, l = i % 32;
        const int lo = (row[128 * s + 64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
        const int hi = (row[128 * ns + 64 * s + 32 * h + l] >> (2 * g)) & 3;
        const int8_t sc = (int8_t)row[192 * ns + 16 * s + i / 16];
        const uint8_t *dp = row + 208 * ns + 2 * s;
        const float d = fp16_to_fp32((uint16_t)(dp[0] | (dp[1] << 8)));
        return __fmul_rn(__fmul_rn(d, (float)sc), (float)((lo | (hi << 4)) - 32));
    }
    case GGML_TYPE_Q8_0: {
        const int64_t nb = n / 32, b = e / 32;
        const uint8_t *dp = row + 32 * nb + 2 * b;
        return __fmul_rn((float)(int8_t)row[e], fp16_to_fp32((uint16_t)(dp[0] | (dp[1] << 8))));
    }
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1: { /* d * q + m (a repacked row: the quants, Q5_1's qh words from a 16-byte boundary, d / m) */
        const int64_t nb = n / 32, b = e / 32;
        const int j = (int)(e % 32);
        const uint8_t qb = row[16 * b + j % 16];
        int q = j < 16 ? (qb & 15) : (qb >> 4);
        const bool q5 = type == GGML_TYPE_Q5_1;
        if (q5) {
            const uint8_t *qh = row + 16 * nb + 4 * b;
            const uint32_t h = (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
            q |= (int)(((h >> j) & 1u) << 4);
        }
        const uint8_t *dp = row + 16 * nb + (q5 ? ((4 * nb + 15) & ~(int64_t)15) : 0) + 4 * b;
        return __fadd_rn(__fmul_rn((float)q, fp16_to_fp32((uint16_t)(dp[0] | (dp[1] << 8)))), fp16_to_fp32((uint16_t)(dp[2] | (dp[3] << 8))));
    }
    case GGML_TYPE_MXFP4: { /* kvalues_mxfp4[q] * 2^(e - 128) (quant/dequant.c dequant_mxfp4; a repacked row: the quants, then
                               the byte e of each block) */
        const int64_t nb = n / 32, b = e / 32;
        const int j = (int)(e % 32);
        const uint8_t qb = row[16 * b + j % 16];
        return __fmul_rn((float)mxfp4_value(j < 16 ? (qb & 15) : (qb >> 4)), e8m0_half(row[16 * nb + b]));
    }
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_IQ4_NL: {
        const int64_t nb = n / 32, b = e / 32;
        const int j = (int)(e % 32), l = j % 16;
        const uint8_t qb = row[16 * b + l];
        int q = j < 16 ? (qb & 15) : (qb >> 4);
        const uint8_t *dp;
        if (type == GGML_TYPE_IQ4_NL) {
            dp = row + 16 * nb + 2 * b;
            return __fmul_rn(fp16_to_fp32((uint16_t)(dp[0] | (dp[1] << 8))), (float)iq4nl_value(q));
        }
        if (type == GGML_TYPE_Q5_0) {
            const uint8_t *qh = row + 16 * nb + 4 * b;
            const uint32_t h = (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
            q = (q | (int)(((h >> j) & 1u) << 4)) - 16;
            dp = row + 16 * nb + ((4 * nb + 15) & ~(int64_t)15) + 2 * b;
        } else {
            q -= 8;
            dp = row + 16 * nb + 2 * b;
        }
        return __fmul_rn((float)q, fp16_to_fp32((uint16_t)(dp[0] | (dp[1] << 8))));
    }
    case GGML_TYPE_F32: return ((const float *)row)[e];
    case GGML_TYPE_F16: return fp16_to_fp32(((const uint16_t *)row)[e]);
    case GGML_TYPE_BF16: return bf16_to_fp32(((const uint16_t *)row)[e]);
    default: return 0.f;
    }
}

/* grid (ceil(n / 256), tokens): one element a thread, so a row's loads are all in flight at once (one CTA a row
 * walking it took ~8 us, the first kernel of every decode step) */
static __global__ void embed_kernel(struct cu_batch_dev b, const uint8_t *table, uint32_t type, uint64_t stride,
                                    int64_t n, float *out) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int t = blockIdx.y;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const uint8_t *row = table + (uint64_t)b.tok[t] * stride;
    out[(int64_t)t * n + e] = dequant_elem(row, type, n, e);
}

void cu_launch_embed(const struct cu_batch_dev *b, const uint8_t *table, uint32_t type, uint64_t stride, int64_t n_cols,
                     float *out, gpuStream_t s) {
    gpu_launch(embed_kernel, dim3((unsigned)GPU_CEIL_DIV(n_cols, 256), (unsigned)b->n_tokens), dim3(256), 0, s, *b, table,
               type, stride, n_cols, out);
}

static __global__ void get_rows_kernel(struct cu_batch_dev b, const float *x, int64_t n, float *out) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int i = blockIdx.x;
    const float *src = x + (int64_t)b.logit_rows[i] * n;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) out[(int64_t)i * n + e] = src[e];
}

void cu_launch_get_rows(const struct cu_batch_dev *b, const float *x, int64_t n_cols, float *out, gpuStream_t s) {
    if (b->n_logits > 0) gpu_launch(get_rows_kernel, dim3(b->n_logits), dim3(256), 0, s, *b, x, n_cols, out);
}

/* ---- norms, elementwise ---- */

/* One block: yr = RMSNorm(xr) * w over n floats (sums in double: strided per thread, butterfly per warp, the warps
 * in order; so the block size is part of the result). yr may alias xr. red: 32 doubles of shared memory. */
static __device__ __forceinline__ void rms_row(const float *xr, const float *w, float eps, int64_t n, float *yr, double *red) {
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += (double)__fmul_rn(xr[i], xr[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += shfl_xor(sum, off);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
    __syncthreads();
    double tot = 0.0;
    for (int g = 0; g < (int)(blockDim.x / 32); g++) tot += red[g];
    const float scale = __fdiv_rn(1.0f, sqrtf((float)(tot / (double)n + (double)eps)));
    __syncthreads(); /* every thread has read x before any writes (out may alias x) */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(v, w[i]) : v;
    }
}

/* rms_row of two rows of n at once, each with the ops of rms_row in its order (the bits of two rms_row calls by the
 * same block), so that their loads, butterflies and barriers overlap. red: 64 doubles. */
static __device__ __forceinline__ void rms_row2(const float *x0, const float *w0, float e0, float *y0, const float *x1, const float *w1,
                                                float e1, float *y1, int64_t n, double *red) {
    double s0 = 0.0, s1 = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float a = x0[i], b = x1[i];
        s0 += (double)__fmul_rn(a, a);
        s1 += (double)__fmul_rn(b, b);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        s0 += shfl_xor(s0, off);
        s1 += shfl_xor(s1, off);
    }
    if (threadIdx.x % 32 == 0) {
        red[threadIdx.x / 32] = s0;
        red[32 + threadIdx.x / 32] = s1;
    }
    __syncthreads();
    double t0 = 0.0, t1 = 0.0;
    for (int g = 0; g < (int)(blockDim.x / 32); g++) {
        t0 += red[g];
        t1 += red[32 + g];
    }
    const float c0 = __fdiv_rn(1.0f, sqrtf((float)(t0 / (double)n + (double)e0)));
    const float c1 = __fdiv_rn(1.0f, sqrtf((float)(t1 / (double)n + (double)e1)));
    __syncthreads(); /* (as rms_row: red may be used again once this returns) */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v0 = __fmul_rn(x0[i], c0), v1 = __fmul_rn(x1[i], c1);
        y0[i] = w0 ? __fmul_rn(v0, w0[i]) : v0;
        y1[i] = w1 ? __fmul_rn(v1, w1[i]) : v1;
    }
}

static __global__ void rmsnorm_kernel(const float *x, int64_t ld_x, const float *w, float eps, int64_t n, float *out,
                                      int64_t ld_out) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    __shared__ double red[32];
    rms_row(x + blockIdx.x * ld_x, w, eps, n, out + blockIdx.x * ld_out, red);
}

void cu_launch_rmsnorm(const float *x, int64_t ld_x, const float *w, float eps, int64_t n_rows, int64_t n_cols, float *out,
                       int64_t ld_out, gpuStream_t s) {
    if (n_rows <= 0) return;
    const int th = n_cols >= 1024 ? 256 : 128;
    gpu_launch(rmsnorm_kernel, dim3((unsigned)n_rows), dim3(th), 0, s, x, ld_x, w, eps, n_cols, out, ld_out);
}

static __global__ void add_kernel(float *y, const float *x, int64_t n) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

void cu_launch_add(float *y, const float *x, int64_t n, gpuStream_t s) {
    if (n <= 0) return;
    const int64_t blocks = GPU_CEIL_DIV(n, 256);
    gpu_launch(add_kernel, dim3((unsigned)(blocks < 4096 ? blocks : 4096)), dim3(256), 0, s, y, x, n);
}

static __global__ void sigmoid_mul_kernel(float *x, int64_t ld_x, const float *g, int64_t ld_g, int64_t n_cols) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    float *xr = x + blockIdx.x * ld_x;
    const float *gr = g + blockIdx.x * ld_g;
    for (int64_t c = threadIdx.x; c < n_cols; c += blockDim.x)
        xr[c] = __fmul_rn(xr[c], __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gr[c]))));
}

void cu_launch_sigmoid_mul(float *x, int64_t ld_x, const float *g, int64_t ld_g, int64_t n_rows, int64_t n_cols,
                           gpuStream_t s) {
    if (n_rows <= 0 || n_cols <= 0) return;
    gpu_launch(sigmoid_mul_kernel, dim3((unsigned)n_rows), dim3(128), 0, s, x, ld_x, g, ld_g, n_cols);
}

/* ---- RoPE ---- */

/* The rotation of pair i at position pos: its cos and sin. */
static __device__ __forceinline__ void rope_cs(int32_t pos, int i, float theta_scale, float freq_scale, const float *ff, float &c,
                                               float &s) {
    float theta = (float)pos;
    for (int k = 0; k < i; k++) theta = __fmul_rn(theta, theta_scale); /* as the sequential cache */
    const float f = ff ? ff[i] : 1.0f;
    const float th = __fmul_rn(freq_scale, __fdiv_rn(theta, f));
    c = cosf(th);
    s = sinf(th);
}
/* Pair i of head xh rotated by (c, s). */
static __device__ __forceinline__ void rope_pair(float *xh, int i, int half, int mode, float c, float s) {
    int ia, ib;
    if (mode == BK_ROPE_NEOX) { ia = i; ib = i + half; }
    else { ia = 2 * i; ib = 2 * i + 1; }
    const float x0 = xh[ia], x1 = xh[ib];
    xh[ia] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    xh[ib] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}
/* RoPE of one head xh at position pos (the block's threads over the half rotary pairs). */
static __device__ __forceinline__ void rope_head(float *xh, int32_t pos, int mode, int32_t n_rot, float theta_scale, float freq_scale,
                                                 const float *ff) {
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float c, s;
        rope_cs(pos, i, theta_scale, freq_scale, ff, c, s);
        rope_pair(xh, i, half, mode, c, s);
    }
}

static __global__ void rope_kernel(struct cu_batch_dev b, float *x, int64_t ld, int32_t head_dim, int mode, int32_t n_rot,
                                   float theta_scale, float freq_scale, const float *ff) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int t = blockIdx.x, h = blockIdx.y;
    rope_head(x + (int64_t)t * ld + (int64_t)h * head_dim, b.pos[t], mode, n_rot, theta_scale, freq_scale, ff);
}

void cu_launch_rope(const struct cu_batch_dev *b, float *x, int64_t ld, int32_t n_head, int32_t head_dim, int mode,
                    int32_t n_rot, float freq_base, float freq_scale, const float *freq_factors, gpuStream_t s) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot); /* host powf: the CPU's value */
    gpu_launch(rope_kernel, dim3(b->n_tokens, n_head), dim3(64), 0, s, *b, x, ld, head_dim, mode, n_rot, theta_scale,
               freq_scale, freq_factors);
}

/* ---- attention ---- */

#define ATT_WARPS 4
#define ATT_P 2 /* positions a warp loads a round in the decode split kernel */

static __device__ __forceinline__ size_t kv_slot_index(const struct cu_batch_dev &b, const struct cu_attn_args &a, int t, int kvh) {
    const int32_t p = b.pos[t];
    const int32_t *si = b.seqinfo + 4 * b.seq[t];
    const int32_t blk = b.bt[si[0] + p / BK_KV_BLOCK], slot = p % BK_KV_BLOCK;
    return (((size_t)blk * a.n_kv_head + kvh) * BK_KV_BLOCK + slot) * a.head_dim;
}

/* Values kx, vx of element e (of n_kv_head * head_dim) into the cache at idx. */
static __device__ __forceinline__ void kv_store_kv(const struct cu_attn_args &a, size_t idx, int e, float kx, float vx) {
    kv_store(a.kpool, a.dtype, idx, a.k_shift && !isnan(kx) ? __fsub_rn(kx, a.k_shift[e]) : kx, a.k_scale); /* a NaN key keeps its sign, as x86's subtraction does */
    kv_store(a.vpool, a.dtype, idx, vx, a.v_scale);
}
/* Element e of token t's k and v into the cache. */
static __device__ __forceinline__ void kv_store_elt(const struct cu_attn_args &a, size_t idx, int64_t t, int e) {
    kv_store_kv(a, idx, e, a.k[t * a.ld_k + e], a.v[t * a.ld_v + e]);
}

static __global__ void kv_store_kernel(struct cu_batch_dev b, struct cu_attn_args a) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int t = blockIdx.x;
    const int hd = a.head_dim, n = a.n_kv_head * hd;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int kvh = e / hd, i = e % hd;
        kv_store_elt(a, kv_slot_index(b, a, t, kvh) + i, t, e);
    }
}

/* The decode prologue's pieces, shared by attn_pre_kernel and the split launch's PRE form (attn_split_pre), so the two
 * give the same bits. Key head kvh of token t: the v values of the thread's first two columns (loaded with x). */
static __device__ __forceinline__ void attn_v_first(const struct cu_attn_args &a, int t, int kvh, float vv[2]) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int i = threadIdx.x + k * blockDim.x;
        vv[k] = i < a.head_dim ? a.v[t * a.ld_v + kvh * a.head_dim + i] : 0.f;
    }
}
/* RoPE of the head y0 (and y1, or NULL) in shared memory at position pos: the thread's first pair by (c0, s0). */
static __device__ __forceinline__ void attn_rope_rows(const struct cu_attn_args &a, int32_t pos, float c0, float s0, float *y0, float *y1) {
    const int half = a.n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float c = c0, s = s0;
        if (i != (int)threadIdx.x) rope_cs(pos, i, a.theta_scale, a.freq_scale, a.ff, c, s);
        rope_pair(y0, i, half, a.rope_mode, c, s);
        if (y1) rope_pair(y1, i, half, a.rope_mode, c, s);
    }
}
/* Key head kvh of token t, formed in ys: into the cache at kbase with its value (vv: attn_v_first), and to the row yk
 * (or NULL). */
static __device__ __forceinline__ void attn_key_out(const struct cu_attn_args &a, int t, int kvh, size_t kbase, const float *ys,
                                                    const float vv[2], float *yk) {
    const int hd = a.head_dim;
    for (int i = threadIdx.x, k = 0; i < hd; i += blockDim.x, k++) {
        const float kx = ys[i];
        if (yk) yk[i] = kx;
        kv_store_kv(a, kbase + i, kvh * hd + i, kx, k < 2 ? vv[k] : a.v[t * a.ld_v + kvh * hd + i]);
    }
}

/* Fused decode prologue (a.pre): CTA (h, t) forms query head h (h < n_head) or key head h - n_head of token t:
 * RMSNorm as rmsnorm_kernel (same block size, same sums), RoPE as rope_kernel, and for a key head the store of
 * its k and v rows into the cache as kv_store_kernel. The head is formed in shared memory; before the dependency wait
 * the CTA takes what no kernel of the step writes: the position and the key's cache slot (the batch, uploaded before
 * the step's first kernel; three dependent loads) and the thread's first rotation's cos / sin. */
#define ATT_PRE_HD 256 /* the widest head (cu_attention allows 32 .. 256) */
static __global__ void attn_pre_kernel(struct cu_batch_dev b, struct cu_attn_args a) {
    __shared__ double red[32];
    __shared__ float ys[ATT_PRE_HD];
    const int t = blockIdx.y, h = blockIdx.x, hd = a.head_dim;
    const bool isk = h >= a.n_head;
    const int hh = isk ? h - a.n_head : h;
    const int32_t pos = b.pos[t];
    const size_t base = isk ? kv_slot_index(b, a, t, hh) : 0;
    const int half = a.n_rot / 2;
    float c0 = 1.f, s0 = 0.f;
    if ((int)threadIdx.x < half) rope_cs(pos, threadIdx.x, a.theta_scale, a.freq_scale, a.ff, c0, s0);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const float *xr = isk ? a.kx + ((int64_t)t * a.n_kv_head + hh) * a.ld_kx : a.qx + ((int64_t)t * a.n_head + hh) * a.ld_qx;
    const float *w = isk ? a.kw : a.qw;
    float *yr = isk ? (float *)a.k + (int64_t)t * a.ld_k + (int64_t)hh * hd : (float *)a.q + (int64_t)t * a.ld_q + (int64_t)hh * hd;
    float vv[2] = {0.f, 0.f};
    if (isk) attn_v_first(a, t, hh, vv);
    rms_row(xr, w, isk ? a.k_eps : a.q_eps, hd, ys, red);
    __syncthreads();
    attn_rope_rows(a, pos, c0, s0, ys, NULL);
    __syncthreads();
    if (isk) attn_key_out(a, t, hh, base, ys, vv, yr);
    else
        for (int i = threadIdx.x; i < hd; i += blockDim.x) yr[i] = ys[i];
}

/* The combine of token t = a.t0 + tg, head j, by a CTA of any size (>= 32 threads, one-dimensional): the maximum of the
 * used splits' m in parallel, each split's weight expf(m - M) once into shared memory, L = sum of l * weight in split
 * order (double), then each output the sum over the splits in order of partial * weight, its loads 8 splits at a time;
 * the same values and order per output as a sequential walk, whatever the CTA size. Then the gate and the quantize
 * (a.gate, a.qfmts). CG: the partials were written by other CTAs of the running grid (loads through L2). */
struct attn_comb_smem { float wgt[CU_ATT_MAX_SPLIT], msp[CU_ATT_MAX_SPLIT], lsp[CU_ATT_MAX_SPLIT], hv[256], red[32]; double L; };
/* The splits a head's combine reads, and the gate input of output threadIdx.x: neither is written by the split launch,
 * so attn_combine_kernel takes them before its dependency wait (the gate's q / k / v launch finished before the split
 * launch started: each launch lets the next start only after its own wait). */
static __device__ __forceinline__ int attn_comb_used(const struct cu_batch_dev &b, const struct cu_attn_args &a, int tg) {
    return min(min(a.n_split, CU_ATT_MAX_SPLIT), GPU_CEIL_DIV(b.pos[a.t0 + tg] + 1, a.chunk)); /* (the host bounds n_split) */
}
static __device__ __forceinline__ float attn_comb_gate(const struct cu_attn_args &a, int j, int tg) {
    return a.gate && (int)threadIdx.x < a.head_dim ? a.gate[((int64_t)(a.t0 + tg) * a.n_head + j) * a.ld_gate + threadIdx.x] : 0.f;
}
#define ATT_COMB_PRE 32 /* splits whose partials of its first output a thread loads with the splits' m and l */
template <bool CG>
static __device__ void attn_combine_head(const struct cu_attn_args &a, int j, int tg, attn_comb_smem &S,
                                         int used, float g0) {
    const int t = a.t0 + tg, hd = a.head_dim, lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = (int)(blockDim.x >> 5);
    const float *w = a.work + ((int64_t)tg * a.n_head + j) * a.n_split * (hd + 2);
    /* the first ATT_COMB_PRE partials of output threadIdx.x, issued with the m / l loads below (one L2 round trip where
       the output loop's groups of 8 took one each) */
    const int i0 = threadIdx.x;
    float pv[ATT_COMB_PRE];
#pragma unroll
    for (int q = 0; q < ATT_COMB_PRE; q++) {
        const float *src = w + q * (hd + 2) + i0;
        pv[q] = i0 < hd && q < used ? (CG ? gpu_ldcg(src) : *src) : 0.f;
    }
    float mx = -INFINITY;
    for (int p = threadIdx.x; p < used; p += blockDim.x) {
        const float mp = CG ? gpu_ldcg(w + p * (hd + 2) + hd) : w[p * (hd + 2) + hd];
        S.msp[p] = mp;
        S.lsp[p] = CG ? gpu_ldcg(w + p * (hd + 2) + hd + 1) : w[p * (hd + 2) + hd + 1];
        mx = fmaxf(mx, mp);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, shfl_xor(mx, off));
    if (lane == 0) S.red[wid] = mx;
    __syncthreads();
    float M = -INFINITY;
    for (int g = 0; g < W; g++) M = fmaxf(M, S.red[g]); /* fmaxf: the maximum of the non-NaN values, any order */
    for (int p = threadIdx.x; p < used; p += blockDim.x) S.wgt[p] = S.msp[p] == -INFINITY ? 0.f : expf(S.msp[p] - M);
    __syncthreads();
    if (threadIdx.x == 0) {
        double L = 0.0;
        for (int p = 0; p < used; p++)
            if (S.msp[p] != -INFINITY) L += (double)S.lsp[p] * (double)S.wgt[p];
        S.L = L;
    }
    __syncthreads();
    /* fp8: V = code * v_scale, applied with the normalisation */
    const float inv = __fmul_rn((float)(1.0 / S.L), a.v_scale);
    const int64_t row = (int64_t)t * a.n_head + j;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float o = 0.f;
        int p0 = 0;
        if (i == i0) { /* the same adds in the same order, from the partials loaded first */
#pragma unroll
            for (int pp = 0; pp < ATT_COMB_PRE; pp += 8)
                if (pp < used)
#pragma unroll
                    for (int q = 0; q < 8; q++)
                        if (pp + q < used && S.msp[pp + q] != -INFINITY) o += pv[pp + q] * S.wgt[pp + q];
            p0 = ATT_COMB_PRE;
        }
        for (; p0 < used; p0 += 8) {
            float v[8];
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const float *src = w + (p0 + q) * (hd + 2) + i;
                v[q] = p0 + q < used ? (CG ? gpu_ldcg(src) : *src) : 0.f;
            }
#pragma unroll
            for (int q = 0; q < 8; q++)
                if (p0 + q < used && S.msp[p0 + q] != -INFINITY) o += v[q] * S.wgt[p0 + q];
        }
        float y = o * inv;
        if (a.gate) y = __fmul_rn(y, __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-(i == i0 ? g0 : a.gate[row * a.ld_gate + i]))))); /* sigmoid_mul_kernel */
        a.out[row * hd + i] = y;
        if (a.qfmts) S.hv[i] = y;
    }
    if (!a.qfmts) return;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    /* the norm+quantize kernel's QUANT mode on unit j of row t (head_dim 256: one super-block a head) */
    const int64_t n = a.qo.n, e0 = (int64_t)j * 256 + lane * 8;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = S.hv[lane * 8 + k];
    if ((a.qfmts & BK_ACT_BIT(BK_ACT_Q8_K)) && a.qo.k_qs)
        quant_q8_K_sb(v, a.qo.k_qs + t * n + (int64_t)j * QK_K, a.qo.k_d + t * (n / QK_K) + j, a.qo.k_bs + t * (n / 16) + j * 16, lane);
    if ((a.qfmts & (BK_ACT_BIT(BK_ACT_Q8_0) | BK_ACT_BIT(BK_ACT_Q8_1))) && a.qo.o_qs)
        quant_q8_0_lane(v, a.qo.o_qs + t * n + e0, a.qo.o_d + t * (n / 32) + e0 / 32, lane, true,
                        (a.qfmts & BK_ACT_BIT(BK_ACT_Q8_1)) && a.qo.o_s ? a.qo.o_s + t * (n / 32) + e0 / 32 : NULL);
}

/* attn_pre_kernel's work for query head j of token t inside a split CTA (attn_split_kernel's PRE; 32 x ATT_WARPS threads,
 * the prologue kernel's block for these heads, so rms_row's sums and the bits are the same): the head, normed and
 * rotated, into qs; with newest (the split holds position n_ctx - 1) the key head kvh into ks too, stored with its
 * value into the cache at kbase, which this CTA then reads back. The q / k rows the prologue kernel writes are written
 * once: q by split 0's CTA of the head, k by the key head's first query head's CTA of the newest split. */
static __device__ void attn_split_pre(const struct cu_batch_dev &b, const struct cu_attn_args &a, int t, int j, int kvh, int split,
                                      bool newest, size_t kbase, float c0, float s0, float *qs, float *ks) {
    static_assert(32 * ATT_WARPS == 128, "the prologue kernel's block for heads of 128 / 256: rms_row's sums");
    __shared__ double red[64];
    const int hd = a.head_dim;
    const float *xq = a.qx + ((int64_t)t * a.n_head + j) * a.ld_qx;
    float vv[2] = {0.f, 0.f};
    if (newest) {
        attn_v_first(a, t, kvh, vv);
        rms_row2(xq, a.qw, a.q_eps, qs, a.kx + ((int64_t)t * a.n_kv_head + kvh) * a.ld_kx, a.kw, a.k_eps, ks, hd, red);
    } else {
        rms_row(xq, a.qw, a.q_eps, hd, qs, red);
    }
    __syncthreads();
    attn_rope_rows(a, b.pos[t], c0, s0, qs, newest ? ks : NULL);
    __syncthreads();
    if (split == 0)
        for (int i = threadIdx.x; i < hd; i += blockDim.x) ((float *)a.q)[(int64_t)t * a.ld_q + (int64_t)j * hd + i] = qs[i];
    if (newest) {
        attn_key_out(a, t, kvh, kbase, ks, vv, j % (a.n_head / a.n_kv_head) == 0 ? (float *)a.k + (int64_t)t * a.ld_k + (int64_t)kvh * hd : NULL);
        __syncthreads(); /* the newest key and value are in the cache: the CTA's loads below see its own stores */
    }
}

/* One CTA per (split, head, token of the launch's group); lane l owns dims [l*D, l*D + D) (D = head_dim / 32);
 * each warp walks every ATT_WARPS-th position of the split, P positions per round (all their rows loaded before
 * the math: one memory round trip a round), with an online softmax; the CTA then merges its warps' partials (in
 * warp order) and writes one partial (acc[head_dim], m, l) per split. The split boundaries depend only on `chunk`
 * (fixed per KV cache), so a row's result does not depend on the other rows of the batch. */
template <int D, int P, bool COMB = false, bool PRE = false> /* COMB: the combine in this launch (a.comb_cnt; instances of
                                                                  their own); PRE: the prologue too (a.pre_split) */
static __global__ void __launch_bounds__(32 * ATT_WARPS) attn_split_kernel(struct cu_batch_dev b, struct cu_attn_args a) {
    __shared__ float sm[ATT_WARPS][32 * D + 2];
    const int split = blockIdx.x, j = blockIdx.y, tg = blockIdx.z, t = a.t0 + tg;
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    const int hd = 32 * D, kvh = j / (a.n_head / a.n_kv_head);
    /* before the dependency wait: the batch (uploaded before the step's first kernel) and the block table, a chain of
     * dependent loads, then the split's K / V rows on their way to L2 (L2 is where writes land, so the newest
     * position, which the launch before stores, is read as written after the wait either way) */
    const int32_t n_ctx = b.pos[t] + 1;
    const int32_t *bt = b.bt + b.seqinfo[4 * b.seq[t]];
    const int t0 = split * a.chunk, t1 = min(n_ctx, t0 + a.chunk);
    /* PRE: attn_pre_kernel's work in this launch (a decode step, every token its sequence's only one): each CTA forms its
     * query head, and the CTAs of the split that holds the newest position (t1 == n_ctx) its key head too and store
     * that key and value into the cache (the G CTAs of a key head store the same bytes) before they read it back. Before
     * the wait, as there: the thread's first rotation and the key's cache slot. */
    float c0 = 1.f, s0 = 0.f;
    size_t kbase = 0;
    const bool newest = PRE && t0 < t1 && t1 == n_ctx;
    if (PRE) {
        if ((int)threadIdx.x < a.n_rot / 2) rope_cs(b.pos[t], threadIdx.x, a.theta_scale, a.freq_scale, a.ff, c0, s0);
        if (newest) kbase = kv_slot_index(b, a, t, kvh);
    }
    {
        const int es = kv_elem_bytes(a.dtype), lines = (hd * es + 127) / 128;
        for (int i = threadIdx.x; i < 2 * lines * (t1 - t0); i += blockDim.x) {
            const int tp = t0 + i / (2 * lines), k = i % (2 * lines);
            const size_t row = ((size_t)bt[tp / BK_KV_BLOCK] * a.n_kv_head + kvh) * BK_KV_BLOCK + tp % BK_KV_BLOCK;
            gpu_prefetch_l2((const char *)(k < lines ? a.kpool : a.vpool) + row * (size_t)(hd * es) + 128 * (size_t)(k % lines));
        }
    }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    if (t0 >= t1) return; /* past this row's context: the combine does not read this split */
    __shared__ float pre_q[PRE ? 32 * D : 1], pre_k[PRE ? 32 * D : 1];
    if constexpr (PRE) attn_split_pre(b, a, t, j, kvh, split, newest, kbase, c0, s0, pre_q, pre_k);
    const bool f16 = a.dtype == BK_KV_F16;
    const float score_mul = __fmul_rn(a.k_scale, a.scale);
    float q[D], acc[D];
    const float *qp = PRE ? pre_q + lane * D : a.q + (int64_t)t * a.ld_q + (int64_t)j * hd + lane * D;
#pragma unroll
    for (int e = 0; e < D; e++) {
        acc[e] = 0.f;
        q[e] = f16 ? gpu_h2f(fp32_to_fp16(qp[e])) : qp[e];
    }
    float m = -INFINITY, l = 0.f;
    for (int tau = t0 + wid; tau < t1; tau += P * ATT_WARPS) {
        float kk[P][D], vv[P][D], sc[P], pr[P];
        size_t base0 = 0;
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int tp = tau + p * ATT_WARPS;
            const size_t base = tp < t1 ? (((size_t)bt[tp / BK_KV_BLOCK] * a.n_kv_head + kvh) * BK_KV_BLOCK + tp % BK_KV_BLOCK) * hd + lane * D : base0;
            if (p == 0) base0 = base;
            kv_load<D>(a.kpool, a.dtype, base, kk[p]);
            kv_load<D>(a.vpool, a.dtype, base, vv[p]);
        }
        float mn = m;
#pragma unroll
        for (int p = 0; p < P; p++) {
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < D; e++) d = __fadd_rn(d, __fmul_rn(q[e], kk[p][e]));
            d = group32_sum(d);
            sc[p] = p == 0 || tau + p * ATT_WARPS < t1 ? __fmul_rn(d, score_mul) : -INFINITY;
        }
        /* the running maximum in the order m, s0, s1, ... (P = 2: fmaxf(m, fmaxf(s0, s1)), the order before) */
        float smax = sc[P - 1];
#pragma unroll
        for (int p = P - 2; p >= 0; p--) smax = fmaxf(sc[p], smax);
        mn = fmaxf(m, smax);
        const float corr = expf(m - mn);
#pragma unroll
        for (int p = 0; p < P; p++) pr[p] = p == 0 || tau + p * ATT_WARPS < t1 ? expf(sc[p] - mn) : 0.f;
        float lv = l * corr;
#pragma unroll
        for (int p = 0; p < P; p++) lv = lv + pr[p];
        l = lv;
        m = mn;
#pragma unroll
        for (int e = 0; e < D; e++) {
            float av = acc[e] * corr;
#pragma unroll
            for (int p = 0; p < P; p++) av = av + pr[p] * vv[p][e];
            acc[e] = av;
        }
    }
#pragma unroll
    for (int e = 0; e < D; e++) sm[wid][lane * D + e] = acc[e];
    if (lane == 0) { sm[wid][hd] = m; sm[wid][hd + 1] = l; }
    __syncthreads();
    /* merge the warps' partials in warp order; a warp that saw no position has m = -inf and weight 0 */
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w][hd]);
    float cw[ATT_WARPS], L = 0.f;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
        cw[w] = sm[w][hd] == -INFINITY ? 0.f : expf(sm[w][hd] - M);
        L += sm[w][hd + 1] * cw[w];
    }
    float *wo = a.work + (((int64_t)tg * a.n_head + j) * a.n_split + split) * (hd + 2);
    for (int i = threadIdx.x; i < hd; i += 32 * ATT_WARPS) {
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) o += sm[w][i] * cw[w];
        wo[i] = o;
    }
    if (threadIdx.x == 0) { wo[hd] = M; wo[hd + 1] = L; }
    if constexpr (COMB) { /* the last of the (token, head)'s used splits to finish combines them */
        __shared__ attn_comb_smem S;
        __shared__ int last;
        __syncthreads(); /* the partial is written */
        if (threadIdx.x == 0) {
            __threadfence();
            const unsigned used = (unsigned)min(a.n_split, GPU_CEIL_DIV(n_ctx, a.chunk));
            unsigned *cp = a.comb_cnt + (int64_t)tg * a.n_head + j;
            last = atomicAdd(cp, 1u) + 1 == used;
            if (last) {
                atomicExch(cp, 0u);
                __threadfence(); /* acquire: the other splits' partials */
            }
        }
        __syncthreads();
        if (last) attn_combine_head<true>(a, j, tg, S, attn_comb_used(b, a, tg), attn_comb_gate(a, j, tg));
    }
}

static __global__ void attn_combine_kernel(struct cu_batch_dev b, struct cu_attn_args a) {
    const int used = attn_comb_used(b, a, blockIdx.y);
    const float g0 = attn_comb_gate(a, blockIdx.x, blockIdx.y);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    __shared__ attn_comb_smem S;
    attn_combine_head<false>(a, blockIdx.x, blockIdx.y, S, used, g0);
}

void cu_launch_kv_store(const struct cu_batch_dev *b, const struct cu_attn_args *a, gpuStream_t s) {
    gpu_launch(kv_store_kernel, dim3(b->n_tokens), dim3(256), 0, s, *b, *a);
}

uint64_t cu_attn_pre_split_launches;
extern "C" uint64_t backend_cuda_attn_pre_split_launches(void) { return cu_attn_pre_split_launches; }

void cu_launch_attention(const struct cu_batch_dev *b, const struct cu_attn_args *args, gpuStream_t s) {
    /* the prologue inside the split launch: heads of 128 or 256 (the prologue kernel's 128 threads, the split's) */
    const bool ps = args->pre && args->pre_split && (args->head_dim == 128 || args->head_dim == 256);
    if (ps)
        cu_attn_pre_split_launches++;
    else if (args->pre) /* rmsnorm_kernel's block size for these rows, so its sums */
        gpu_launch(attn_pre_kernel, dim3(args->n_head + args->n_kv_head, b->n_tokens), dim3(args->head_dim >= 1024 ? 256 : 128), 0, s,
                   *b, *args);
    else
        gpu_launch(kv_store_kernel, dim3(b->n_tokens), dim3(256), 0, s, *b, *args);
    struct cu_attn_args a = *args;
    const int group = a.group > 0 ? a.group : b->n_tokens;
    for (int t0 = 0; t0 < b->n_tokens; t0 += group) {
        const int nt = min(group, b->n_tokens - t0);
        a.t0 = t0;
        const dim3 g(a.n_split, a.n_head, nt);
        /* 2 positions a warp a round: 4 measured the same and 8 slower (BENCHMARKS.md, "Fewer launches a step") */
        const dim3 blk(32 * ATT_WARPS);
        if (ps) {
            if (a.comb_cnt) {
                if (a.head_dim == 128) gpu_launch(attn_split_kernel<4, ATT_P, true, true>, g, blk, 0, s, *b, a);
                else gpu_launch(attn_split_kernel<8, ATT_P, true, true>, g, blk, 0, s, *b, a);
                continue; /* combined there */
            }
            if (a.head_dim == 128) gpu_launch(attn_split_kernel<4, ATT_P, false, true>, g, blk, 0, s, *b, a);
            else gpu_launch(attn_split_kernel<8, ATT_P, false, true>, g, blk, 0, s, *b, a);
            gpu_launch(attn_combine_kernel, dim3(a.n_head, nt), dim3(a.head_dim < 256 ? a.head_dim : 256), 0, s, *b, a);
            continue;
        }
        if (a.comb_cnt) {
            switch (a.head_dim) {
            case 32: gpu_launch(attn_split_kernel<1, ATT_P, true>, g, blk, 0, s, *b, a); break;
            case 64: gpu_launch(attn_split_kernel<2, ATT_P, true>, g, blk, 0, s, *b, a); break;
            case 128: gpu_launch(attn_split_kernel<4, ATT_P, true>, g, blk, 0, s, *b, a); break;
            default: gpu_launch(attn_split_kernel<8, ATT_P, true>, g, blk, 0, s, *b, a); break;
            }
            continue; /* combined there */
        }
        switch (a.head_dim) {
        case 32: gpu_launch(attn_split_kernel<1, ATT_P>, g, blk, 0, s, *b, a); break;
        case 64: gpu_launch(attn_split_kernel<2, ATT_P>, g, blk, 0, s, *b, a); break;
        case 128: gpu_launch(attn_split_kernel<4, ATT_P>, g, blk, 0, s, *b, a); break;
        default: gpu_launch(attn_split_kernel<8, ATT_P>, g, blk, 0, s, *b, a); break;
        }
        gpu_launch(attn_combine_kernel, dim3(a.n_head, nt), dim3(a.head_dim < 256 ? a.head_dim : 256), 0, s, *b, a);
    }
}

/* ---- Gated DeltaNet ---- */

/* grid (channels / 128, a.n_runs or 1): each thread walks its channel over the batch's tokens in order, or (a split
 * chunk list) over the tokens of run blockIdx.y. */
static __global__ void gdn_conv_kernel(struct cu_batch_dev b, struct cu_gdn_args a, int64_t conv_dim) {
    const int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int nh = a.d_conv - 1;
    const float *w = a.conv_w + ch * a.d_conv;
    int32_t t_lo, t_hi;
    gdn_run_tokens(b.chunks, a.run_lo, a.n_runs, b.n_tokens, (int32_t)blockIdx.y, &t_lo, &t_hi);
    /* before the dependency wait: the weights, and the first token's conv state (as in gdn_rule_kernel: no
     * earlier kernel of this step writes it) */
    float wv[8], st0[8];
    float *st_lo = NULL; /* the first token's state row (its slot read once, before the wait, as in gdn_rule_kernel) */
    if (ch < conv_dim && t_hi > t_lo) {
        st_lo = a.conv_state + (int64_t)seq_slot_of(b, t_lo) * a.conv_floats + ch * nh;
        for (int k = 0; k <= nh; k++) wv[k] = w[k];
        for (int k = 0; k < nh; k++) st0[k] = st_lo[k];
    }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    if (ch >= conv_dim) return;
    for (int t = t_lo; t < t_hi; t++) {
        float *st = t == t_lo ? st_lo : a.conv_state + (int64_t)seq_slot_of(b, t) * a.conv_floats + ch * nh;
        float win[8];
        for (int k = 0; k < nh; k++) win[k] = b.pos[t] == 0 ? 0.f : t == t_lo ? st0[k] : st[k];
        win[nh] = a.in[(int64_t)t * a.ld_in + ch];
        a.conv_out[(int64_t)t * conv_dim + ch] = gdn_conv_silu(win, wv, nh);
        for (int k = 0; k < nh; k++) st[k] = win[k + 1];
    }
}

/* Two sums over the CTA in double (each by butterflies in the warp, then the warps in order); red holds 64 doubles.
 * Every thread gets both totals. One pair of barriers for the two (the GDN's q and k norms took a pair each). */
static __device__ double2 block_sum_d2(double v0, double v1, double *red) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        v0 += shfl_xor(v0, off);
        v1 += shfl_xor(v1, off);
    }
    __syncthreads();
    if (threadIdx.x % 32 == 0) { red[threadIdx.x / 32] = v0; red[32 + threadIdx.x / 32] = v1; }
    __syncthreads();
    double t0 = 0.0, t1 = 0.0;
    for (int g = 0; g < (int)(blockDim.x / 32); g++) { t0 += red[g]; t1 += red[32 + g]; }
    return make_double2(t0, t1);
}

#define GDN_DK 128
#define GDN_ROWS 32 /* value rows per CTA */

/* Thread part's 32 state values of a row (columns 16 i + 4 part + e) at element offset o (the row's start + 4 part):
 * f32, or bf16 widened / rounded to nearest even (fp32_to_bf16, the CPU backend's conversion). */
static __device__ __forceinline__ void gdn_state_load(const void *base, bool bf, int64_t o, float (&S)[32]) {
    if (bf) {
        const uint16_t *p = (const uint16_t *)base + o;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint2 u = *(const uint2 *)(p + 16 * i);
            S[4 * i] = bf16_to_fp32((uint16_t)(u.x & 0xffff)); S[4 * i + 1] = bf16_to_fp32((uint16_t)(u.x >> 16));
            S[4 * i + 2] = bf16_to_fp32((uint16_t)(u.y & 0xffff)); S[4 * i + 3] = bf16_to_fp32((uint16_t)(u.y >> 16));
        }
        return;
    }
    const float *p = (const float *)base + o;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 f = *(const float4 *)(p + 16 * i);
        S[4 * i] = f.x; S[4 * i + 1] = f.y; S[4 * i + 2] = f.z; S[4 * i + 3] = f.w;
    }
}
static __device__ __forceinline__ void gdn_state_store(void *base, bool bf, int64_t o, const float (&S)[32]) {
    if (bf) {
        uint16_t *p = (uint16_t *)base + o;
#pragma unroll
        for (int i = 0; i < 8; i++)
            *(uint2 *)(p + 16 * i) = bf16x4_pack(S[4 * i], S[4 * i + 1], S[4 * i + 2], S[4 * i + 3]);
        return;
    }
    float *p = (float *)base + o;
#pragma unroll
    for (int i = 0; i < 8; i++) *(float4 *)(p + 16 * i) = make_float4(S[4 * i], S[4 * i + 1], S[4 * i + 2], S[4 * i + 3]);
}

/* grid (n_v_head, d_v / (R GDN_ROWS), per_token ? n_tokens : n_runs ? n_runs : 1), 4 * GDN_ROWS threads (a CTA takes a
 * token, a run of a split chunk list, or walks the whole batch): thread 4r + p holds rows j = R GDN_ROWS y + r + GDN_ROWS h
 * (h < R) of the head's state S[j][:] at columns 16 i + 4 p + e (i < 8, e < 4), so each float4 of a warp's state
 * loads is contiguous. Per token: q/k L2 norms (recomputed by each CTA of a head), gates, the delta rule;
 * writes the raw o rows (the gated RMSNorm runs in the quantize that follows, or with a.nq in this kernel's epilogue).
 * Each row's sums are the same ops in the same order for R 1 or 2; R 2 halves the CTAs, and with them the norms, gates
 * and barriers a row (the default for a bf16 state's decode step of several sequences: there those, not the state's
 * bytes, set the kernel's time). */
template <int R, bool CL = false>
static __global__ void __launch_bounds__(4 * GDN_ROWS) gdn_rule_kernel(struct cu_batch_dev b, struct cu_gdn_args a) {
    __shared__ float qs[GDN_DK], ks[GDN_DK];
    __shared__ double red[64];
    __shared__ float gate[2];
    /* CL (a.nq_cluster): the cluster's 256-column unit of raw o rows, gathered in its first CTA; that CTA's warp 0 norms
     * and quantizes it (lane l: columns 8 l .. 8 l + 7 of the unit), the norm weights before the wait, z after it */
#if !defined(VLLMC_HIP)
    __shared__ float cl_o[CL ? 256 : 1];
    float cl_w[8];
#endif
    float cl_z[8];
    bool cl_lead = false;
    int64_t cl_e0 = 0;
    const int m = blockIdx.x, tid = threadIdx.x, part = tid % 4;
    const int dk = GDN_DK, dv = a.d_v, kh = m % a.n_k_head;
    const int j0 = blockIdx.y * (R * GDN_ROWS) + tid / 4; /* row h: j0 + GDN_ROWS h */
    const int64_t key_dim = (int64_t)a.n_k_head * dk, value_dim = (int64_t)a.n_v_head * dv;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    float S[R][32];
    int cur_slot = -1;
    int64_t so = 0; /* the state's element offset for this thread's row 0 (row h: + GDN_ROWS h dk) */
    const bool bf = a.ssm_bf16 != 0;
    int32_t t_lo, t_hi;
    if (a.per_token) { t_lo = (int32_t)blockIdx.z; t_hi = t_lo + 1; }
    else gdn_run_tokens(b.chunks, a.run_lo, a.n_runs, b.n_tokens, (int32_t)blockIdx.z, &t_lo, &t_hi);
    if (t_hi > t_lo) {
        /* the first token's state before the dependency wait: no kernel of this step before this one
         * writes it (only this layer's rule kernel does, and earlier steps completed before this step's
         * batch upload), and the batch upload completed before the step's first kernel started */
        cur_slot = seq_slot_of(b, t_lo);
        so = (int64_t)cur_slot * a.ssm_floats + ((int64_t)m * dv + j0) * dk + 4 * part;
#pragma unroll
        for (int h = 0; h < R; h++) gdn_state_load(a.ssm_state, bf, so + (int64_t)GDN_ROWS * h * dk, S[h]);
    }
    float dtb = 0.f, sa = 0.f; /* the head's dt bias and A: weights, so before the wait (out of the DRAM round trip) */
    if (tid == 0) { dtb = a.dt_bias[m]; sa = a.ssm_a[m]; }
    nq_fuse_prefetch(a.nq, (int64_t)blockIdx.y * gridDim.x + blockIdx.x, (int64_t)gridDim.x * gridDim.y);
#if !defined(VLLMC_HIP)
    if constexpr (CL) {
        /* the barrier's first phase: every CTA of the cluster running before any stores into the first one's shared
         * memory (its wait follows the dependency wait, long after the cluster's CTAs started together) */
        gpu_cluster_arrive_relaxed();
        cl_lead = cooperative_groups::this_cluster().block_rank() == 0 && tid < 32;
        cl_e0 = (int64_t)m * dv + 8 * (tid & 31); /* the first CTA's head starts the unit */
        if (cl_lead)
#pragma unroll
            for (int k = 0; k < 8; k++) cl_w[k] = a.nq.w[(cl_e0 + k) % a.nq.group];
    }
#endif
    gpu_pdl_wait();
    gpu_pdl_trigger();
#if !defined(VLLMC_HIP)
    if constexpr (CL) gpu_cluster_wait();
#endif
    for (int t = t_lo; t < t_hi; t++) {
        /* the first token's slot is the one read before the wait (the batch does not change within a step): reading it
         * again here put two dependent L2 round trips (seq, then seqinfo) before the token's loads (SASS) */
        const int slot = t == t_lo ? cur_slot : seq_slot_of(b, t);
        if (slot != cur_slot) {
            if (cur_slot >= 0)
#pragma unroll
                for (int h = 0; h < R; h++) gdn_state_store(a.ssm_state, bf, so + (int64_t)GDN_ROWS * h * dk, S[h]);
            cur_slot = slot;
            so = (int64_t)slot * a.ssm_floats + ((int64_t)m * dv + j0) * dk + 4 * part;
#pragma unroll
            for (int h = 0; h < R; h++) gdn_state_load(a.ssm_state, bf, so + (int64_t)GDN_ROWS * h * dk, S[h]);
        }
        if (b.pos[t] == 0)
#pragma unroll
            for (int h = 0; h < R; h++)
#pragma unroll
                for (int i = 0; i < 32; i++) S[h][i] = 0.f;
        const float *row = a.conv_out + (int64_t)t * conv_dim;
        const float *gin = a.in + (int64_t)t * a.ld_in + conv_dim + value_dim; /* beta, dt inputs (loaded early) */
        const float g_b = gin[m], g_x = gin[a.n_v_head + m];
        if (CL && cl_lead) /* z with the token's other loads (one L2 round trip) */
#pragma unroll
            for (int k = 0; k < 8; k++) cl_z[k] = a.nq.in1[(int64_t)t * a.nq.ld + cl_e0 + k];
        /* L2 norms of q and k (sums in double), q scaled by 1/sqrt(d_k) after */
        const float qv = row[(int64_t)kh * dk + tid], kv = row[key_dim + (int64_t)kh * dk + tid];
        /* v with q and k: after the barrier below it would be a second L2 round trip */
        float vj[R];
#pragma unroll
        for (int h = 0; h < R; h++) vj[h] = row[2 * key_dim + (int64_t)m * dv + j0 + GDN_ROWS * h];
        const double2 sqk = block_sum_d2((double)qv * (double)qv, (double)kv * (double)kv, red);
        const float scq = __fdiv_rn(1.0f, fmaxf(sqrtf((float)sqk.x), a.eps));
        const float sck = __fdiv_rn(1.0f, fmaxf(sqrtf((float)sqk.y), a.eps));
        qs[tid] = __fmul_rn(__fmul_rn(qv, scq), __fdiv_rn(1.0f, sqrtf((float)dk)));
        ks[tid] = __fmul_rn(kv, sck);
        if (tid == 0) {
            const float bv = g_b;
            const float x = __fadd_rn(g_x, dtb);
            const float sp_ = x > 20.0f ? x : logf(__fadd_rn(1.0f, expf(x)));
            gate[0] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-bv)));
            gate[1] = expf(__fmul_rn(sp_, sa));
        }
        __syncthreads();
        const float beta = gate[0], decay = gate[1];
#pragma unroll
        for (int h = 0; h < R; h++) {
            float kS = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    S[h][4 * i + e] = __fmul_rn(S[h][4 * i + e], decay);
                    kS = __fadd_rn(kS, __fmul_rn(S[h][4 * i + e], ks[16 * i + 4 * part + e]));
                }
            kS = __fadd_rn(kS, shfl_xor(kS, 1));
            kS = __fadd_rn(kS, shfl_xor(kS, 2));
            const float delta = __fmul_rn(beta, __fsub_rn(vj[h], kS));
            float o = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    S[h][4 * i + e] = __fadd_rn(S[h][4 * i + e], __fmul_rn(delta, ks[16 * i + 4 * part + e]));
                    o = __fadd_rn(o, __fmul_rn(S[h][4 * i + e], qs[16 * i + 4 * part + e]));
                }
            o = __fadd_rn(o, shfl_xor(o, 1));
            o = __fadd_rn(o, shfl_xor(o, 2));
#if !defined(VLLMC_HIP)
            if (CL && part == 0)
                cooperative_groups::this_cluster().map_shared_rank(cl_o, 0)[((int64_t)m * dv) % 256 + j0 + GDN_ROWS * h] = o;
            else
#endif
            if (part == 0) a.out[(int64_t)t * value_dim + (int64_t)m * dv + j0 + GDN_ROWS * h] = o;
        }
        __syncthreads(); /* qs, ks, gate are rewritten by the next token */
    }
#if !defined(VLLMC_HIP)
    /* the barrier's second phase in two halves around the state's store: the arrive's release orders only the rows
     * stored to the first CTA (a whole barrier after the store would wait for the state's 16 KB to reach L2) */
    if constexpr (CL) gpu_cluster_arrive();
#endif
    if (cur_slot >= 0)
#pragma unroll
        for (int h = 0; h < R; h++) gdn_state_store(a.ssm_state, bf, so + (int64_t)GDN_ROWS * h * dk, S[h]);
#if !defined(VLLMC_HIP)
    if constexpr (CL) { /* one token a CTA (t_lo): every CTA of the cluster has stored its rows */
        gpu_cluster_wait();
        if (cl_lead && t_hi > t_lo) {
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = cl_o[8 * (tid & 31) + k];
            nq_gated(v, cl_z, a.nq.w, cl_w, a.nq.group, a.nq.eps, cl_e0, a.nq.out.n, a.nq.out.x + (int64_t)t_lo * a.nq.out.n);
            nq_formats(v, a.nq.out, a.nq.fmts, t_lo, cl_e0 / 256, cl_e0, tid & 31);
        }
    }
#endif
    if (a.nq.on) { /* the gated RMSNorm + quantize of the output, by the CTAs that complete its 256-column units */
        const nq_cols pc = {(int64_t)m * dv + (int64_t)blockIdx.y * (R * GDN_ROWS), R * GDN_ROWS};
        nq_fuse_finish(a.nq, &pc, 1, 0, 0, b.n_tokens);
    }
}

uint64_t cu_gdn_cluster_launches; /* rule kernels launched with the gated norm by clusters (backend_cuda_gdn_cluster_launches) */
int cu_gdn_rows2 = -1; /* rows a thread of the rule kernel: -1 by the step (2 for a bf16 state's decode of several
                          sequences), 1 or 2 (comparisons) */
void cu_launch_gdn(const struct cu_batch_dev *b, const struct cu_gdn_args *a, gpuStream_t s) {
    const int64_t conv_dim = 2 * (int64_t)a->n_k_head * a->d_k + (int64_t)a->n_v_head * a->d_v;
    const unsigned runs = a->n_runs > 0 ? (unsigned)a->n_runs : 1u;
    if (!a->conv_done) gpu_launch(gdn_conv_kernel, dim3((unsigned)GPU_CEIL_DIV(conv_dim, 128), runs), dim3(128), 0, s, *b, *a, conv_dim);
#if defined(VLLMC_HIP_ARCH_GFX11) /* gfx11: R 2 takes 128 VGPRs and spills 9 (LLVM 15's cap, docs/ROCM.md); every launch takes
                                     R 1 (each row's sums the same ops in the same order), R 2 is not compiled */
    const bool r2 = false;
#else
    const bool r2 = (cu_gdn_rows2 < 0 ? a->ssm_bf16 && a->per_token : cu_gdn_rows2 == 2) && a->d_v % (2 * GDN_ROWS) == 0;
#endif
    const dim3 grid(a->n_v_head, a->d_v / (r2 ? 2 * GDN_ROWS : GDN_ROWS), a->per_token ? (unsigned)b->n_tokens : runs);
#if defined(VLLMC_HIP_ARCH_GFX11)
    gpu_launch(gdn_rule_kernel<1>, grid, dim3(4 * GDN_ROWS), 0, s, *b, *a);
#else
#if !defined(VLLMC_HIP) /* (HIP: no clusters; the backend never asks for one there) */
    if (a->nq_cluster) { /* a cluster: the heads of a 256-column unit, all of their CTAs in y */
        cu_gdn_cluster_launches++;
        const dim3 cl(256 / a->d_v, grid.y, 1);
        if (r2) gpu_launch_cluster(gdn_rule_kernel<2, true>, grid, dim3(4 * GDN_ROWS), 0, s, cl, *b, *a);
        else gpu_launch_cluster(gdn_rule_kernel<1, true>, grid, dim3(4 * GDN_ROWS), 0, s, cl, *b, *a);
        return;
    }
#endif
    if (r2) gpu_launch(gdn_rule_kernel<2>, grid, dim3(4 * GDN_ROWS), 0, s, *b, *a);
    else gpu_launch(gdn_rule_kernel<1>, grid, dim3(4 * GDN_ROWS), 0, s, *b, *a);
#endif
}

/* ---- argmax ---- */

/* (v, i) beats (bv, bi): larger, or equal at a lower index; an empty slot (index INT_MAX) never wins. */
static __device__ __forceinline__ bool am_better(float v, int i, float bv, int bi) {
    return bi == 0x7fffffff || (i != 0x7fffffff && (v > bv || (v == bv && i < bi)));
}

/* grid (CU_ARGMAX_PARTS, n_rows), 256 threads: part p scans elements p * 256 + t, stepping by all parts'
 * threads (each thread's own elements in increasing order, so its first maximum is kept), reduces the CTA
 * and writes its (value, index) to work. */
static __global__ void __launch_bounds__(256) argmax_part_kernel(const float *x, int64_t n, float2 *work) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    __shared__ float bv[8];
    __shared__ int bi[8];
    const float *r = x + blockIdx.y * n;
    float best = -INFINITY;
    int idx = 0x7fffffff;
    const int64_t step = (int64_t)CU_ARGMAX_PARTS * 256;
#pragma unroll 8 /* the loads of 8 steps in flight; the comparisons stay in element order */
    for (int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x; i < n; i += step) {
        const float v = r[i];
        if (idx == 0x7fffffff || v > best) { best = v; idx = (int)i; }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = shfl_xor(best, off);
        const int oi = shfl_xor(idx, off);
        if (am_better(ov, oi, best, idx)) { best = ov; idx = oi; }
    }
    if (threadIdx.x % 32 == 0) { bv[threadIdx.x / 32] = best; bi[threadIdx.x / 32] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        best = bv[0]; idx = bi[0];
        for (int g = 1; g < 8; g++)
            if (am_better(bv[g], bi[g], best, idx)) { best = bv[g]; idx = bi[g]; }
        work[blockIdx.y * CU_ARGMAX_PARTS + blockIdx.x] = make_float2(best, __int_as_float(idx));
    }
}

/* One warp per row: the best of the row's CU_ARGMAX_PARTS partials. */
static __global__ void __launch_bounds__(32) argmax_final_kernel(const float2 *work, int32_t *out) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const float2 *w = work + blockIdx.x * CU_ARGMAX_PARTS;
    float best = -INFINITY;
    int idx = 0x7fffffff;
    for (int p = threadIdx.x; p < CU_ARGMAX_PARTS; p += 32) {
        const float2 e = w[p];
        if (am_better(e.x, __float_as_int(e.y), best, idx)) { best = e.x; idx = __float_as_int(e.y); }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = shfl_xor(best, off);
        const int oi = shfl_xor(idx, off);
        if (am_better(ov, oi, best, idx)) { best = ov; idx = oi; }
    }
    if (threadIdx.x == 0) out[blockIdx.x] = idx;
}

void cu_launch_argmax(const float *x, int64_t n_rows, int64_t n, int32_t *out, void *work, gpuStream_t s) {
    if (n_rows <= 0) return;
    gpu_launch(argmax_part_kernel, dim3(CU_ARGMAX_PARTS, (unsigned)n_rows), dim3(256), 0, s, x, n, (float2 *)work);
    gpu_launch(argmax_final_kernel, dim3((unsigned)n_rows), dim3(32), 0, s, (const float2 *)work, out);
}

/* ---- sampling (bk_batch.sample): the engine's sampler (src/engine/sampler.h) on the device ----
 * A row of logits is drawn by a cluster of SMP_CL CTAs of SMP_T threads (one CTA on HIP, which has no clusters).
 * l = x * (1 / T) (NaN and -inf logits dropped), min-p keeps l >= max + log(min_p), top-k the k best in the order
 * (l desc, id asc), top-p the shortest prefix of that order whose mass (expf(l - max) summed in double) reaches top_p x
 * the mass top-k kept, then u x the survivors' mass picks the first survivor in id order whose running mass exceeds
 * it. The cuts are found by radix selection on the order's key (a byte a pass, counts for top-k, masses for top-p;
 * per-warp histograms in shared memory, the cluster's CTAs' added in rank order through distributed shared memory),
 * each cut an exact key and the number of its ties taken from the lowest id. Sums run in another order than the
 * CPU's (chunks of ids, then the chunks in order), so a draw can differ from the CPU's only where a running mass meets
 * u or a target within rounding. A CTA alone is bound by its SM's issue (~30 instructions an element a pass; a pass over
 * 248,320 logits ~75 us): the cluster splits every pass over its SMs. */
#if defined(VLLMC_HIP)
#define SMP_T 512 /* the per-warp histograms in 64 KB of LDS */
#define SMP_CL 1
#else
#define SMP_T 512 /* (1,024 spilled 340 bytes at 64 registers) */
#define SMP_CL 8  /* CTAs a row (the portable cluster size) */
#include <cooperative_groups.h>
#endif
#define SMP_W (SMP_T / 32)
struct cu_sample_smem {
    unsigned cnt[SMP_W][256];
    double mass[SMP_W][256];
    double red[SMP_W];
    int ired[SMP_W];
    unsigned bins[256];  /* this CTA's histogram of a pass, then (gbins) the cluster's */
    double bmass[256];
    int lone[256];
    unsigned gbins[256];
    double gbmass[256];
    int glone[256];
    /* what a CTA publishes to the others of its cluster */
    double pub_d[2];
    int pub_i[4];
    float pub_f[2];
    unsigned s_key;
    int s_take, s_id, s_flag;
    double s_d;
};
/* the cluster's CTAs: rank, barrier, a peer's shared memory (one CTA: itself) */
struct smp_cl {
    int rank, nct;
    __device__ __forceinline__ smp_cl() {
#if SMP_CL > 1
        rank = (int)cooperative_groups::this_cluster().block_rank();
        nct = SMP_CL;
#else
        rank = 0;
        nct = 1;
#endif
    }
    __device__ __forceinline__ void sync() const {
#if SMP_CL > 1
        cooperative_groups::this_cluster().sync();
#else
        __syncthreads();
#endif
    }
    template <typename T> __device__ __forceinline__ T *peer(T *p, int r) const {
#if SMP_CL > 1
        return cooperative_groups::this_cluster().map_shared_rank(p, (unsigned)r);
#else
        (void)r;
        return p;
#endif
    }
};
/* the order's key: larger l, larger key (for finite l); -0 is +0 (they compare equal, so they tie) */
static __device__ __forceinline__ uint32_t smp_key(float l) {
    const uint32_t b = l == 0.0f ? 0u : __float_as_uint(l);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
template <typename T> static __device__ T smp_block_sum(T v, T *red) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += shfl_xor(v, off);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = 0;
    for (int w = 0; w < SMP_W; w++) t += red[w];
    return t;
}
/* the sum over the cluster of each CTA's value (the CTAs in rank order): every thread of every CTA gets it */
template <typename T> static __device__ T smp_cl_sum(const smp_cl &C, T v, T *pub) {
    if (threadIdx.x == 0) *pub = v;
    C.sync();
    T t = 0;
    for (int r = 0; r < C.nct; r++) t += *C.peer(pub, r);
    C.sync(); /* (pub is written again later) */
    return t;
}
static __device__ int smp_cl_max(const smp_cl &C, int v, int *pub) {
    if (threadIdx.x == 0) *pub = v;
    C.sync();
    int t = v;
    for (int r = 0; r < C.nct; r++) t = max(t, *C.peer(pub, r));
    C.sync();
    return t;
}
/* exclusive prefix over the cluster's threads in order (the CTAs in rank order, then threads); *tot the total */
template <typename T> static __device__ T smp_scan(const smp_cl &C, T v, T *red, T *pub, T *tot) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    T inc = v;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const T o = shfl_up32(inc, off);
        if (lane >= off) inc += o;
    }
    T ex = shfl_up32(inc, 1); /* the lane before's inclusive sum: this lane's exclusive one */
    if (lane == 0) ex = 0;
    __syncthreads();
    if (lane == 31) red[w] = inc;
    __syncthreads();
    T base = 0, all = 0;
    for (int k = 0; k < SMP_W; k++) {
        if (k < w) base += red[k];
        all += red[k];
    }
    if (threadIdx.x == 0) *pub = all;
    C.sync();
    T cbase = 0, call = 0;
    for (int r = 0; r < C.nct; r++) {
        const T pr = *C.peer(pub, r);
        if (r < C.rank) cbase += pr;
        call += pr;
    }
    C.sync();
    if (tot) *tot = call;
    return cbase + base + ex;
}

struct smp_row {
    const float *x;
    int n;
    int g, gt;   /* this thread's index in the cluster, the cluster's threads */
    float inv_t, mx, thr;
    /* the cuts so far: a candidate passes a cut (key, id) when its key is larger, or equal with id <= id */
    bool k_on, p_on;
    uint32_t k_key, p_key;
    int k_id, p_id;
};
/* whether element i (logit v) survives min-p and the cuts made so far; its l and key */
static __device__ __forceinline__ bool smp_alive(const smp_row &R, int i, float v, float &l, uint32_t &key) {
    if (v != v || v == -INFINITY) return false;
    l = v * R.inv_t;
    if (!(l >= R.thr)) return false;
    key = smp_key(l);
    if (R.k_on && (key < R.k_key || (key == R.k_key && i > R.k_id))) return false;
    if (R.p_on && (key < R.p_key || (key == R.p_key && i > R.p_id))) return false;
    return true;
}
/* The row's elements, f(i, v) each: a thread's i = g + k gt in order (smp_each), or its chunk of ids [i0, i1) in
 * order (smp_chunk: f returns true to stop). SMP_U loads in flight a thread. */
#define SMP_U 8
template <typename F> static __device__ __forceinline__ void smp_each(const smp_row &R, F f) {
    for (int base = R.g; base < R.n; base += SMP_U * R.gt) {
        float v[SMP_U];
#pragma unroll
        for (int u = 0; u < SMP_U; u++) v[u] = base + u * R.gt < R.n ? R.x[base + u * R.gt] : 0.0f;
#pragma unroll
        for (int u = 0; u < SMP_U; u++)
            if (base + u * R.gt < R.n) f(base + u * R.gt, v[u]);
    }
}
template <typename F> static __device__ __forceinline__ void smp_chunk(const smp_row &R, int i0, int i1, F f) {
    for (int base = i0; base < i1; base += SMP_U) {
        float v[SMP_U];
#pragma unroll
        for (int u = 0; u < SMP_U; u++) v[u] = base + u < i1 ? R.x[base + u] : 0.0f;
#pragma unroll
        for (int u = 0; u < SMP_U; u++)
            if (base + u < i1 && f(base + u, v[u])) return;
    }
}
/* The id of the take-th (1-based) alive element of key `key` in id order (chunks of ids a thread, in order). */
static __device__ int smp_tie_id(const smp_cl &C, const smp_row &R, uint32_t key, int take, cu_sample_smem &S) {
    const int ch = (R.n + R.gt - 1) / R.gt, i0 = min(R.n, R.g * ch), i1 = min(R.n, i0 + ch);
    int mine = 0;
    smp_chunk(R, i0, i1, [&](int i, float v) {
        float l; uint32_t k;
        if (smp_alive(R, i, v, l, k) && k == key) mine++;
        return false;
    });
    const int before = smp_scan<int>(C, mine, S.ired, &S.pub_i[0], NULL);
    if (threadIdx.x == 0) S.s_id = -1;
    __syncthreads();
    if (take > before && take <= before + mine) {
        int c = before;
        smp_chunk(R, i0, i1, [&](int i, float v) {
            float l; uint32_t k;
            if (smp_alive(R, i, v, l, k) && k == key && ++c == take) { S.s_id = i; return true; }
            return false;
        });
    }
    __syncthreads();
    return smp_cl_max(C, S.s_id, &S.pub_i[1]); /* the one thread of the cluster that found it */
}
/* Radix selection over the alive elements, best first: by counts (target an integer rank, mass false) or by masses
 * (mass true: expf(l - mx), the first key whose running mass from the top reaches target; frac > 0: the target is frac x
 * the mass of every alive element, taken from the first pass's bins, returned in *target). Returns the cut's key;
 * *above the count or mass of the alive elements with larger keys, *ties the count at the key and *lone_id the id of
 * one of them (the only one where *ties is 1). found false: the target is past everything (rounding). Every CTA of
 * the cluster takes the same decisions from the same added histograms. */
static __device__ uint32_t smp_select(const smp_cl &C, const smp_row &R, bool mass, double *target_io, float frac,
                                      double *above, int *ties, int *lone_id, bool *found, cu_sample_smem &S) {
    double target = *target_io;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    uint32_t prefix = 0, pmask = 0;
    double before = 0.0;
    bool ok = true;
    int lone = -1;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = lane; b < 256; b += 32) { S.cnt[w][b] = 0; S.mass[w][b] = 0.0; }
        if (threadIdx.x < 256) S.lone[threadIdx.x] = -1;
        __syncthreads();
        /* a thread's run of elements in one bin is added up first (the bins' sums are in no fixed order anyway) */
        int cb = -1;
        unsigned cc = 0;
        double cm = 0.0;
        smp_each(R, [&](int i, float v) {
            float l; uint32_t key;
            if (!smp_alive(R, i, v, l, key) || (key & pmask) != prefix) return;
            const int b = (int)((key >> shift) & 255u);
            if (b != cb) {
                if (cb >= 0) {
                    atomicAdd(&S.cnt[w][cb], cc);
                    if (mass) atomicAdd(&S.mass[w][cb], cm);
                }
                cb = b; cc = 0; cm = 0.0;
            }
            cc++;
            if (mass) cm += (double)expf(l - R.mx);
            if (shift == 0) atomicMax(&S.lone[b], i); /* (the bin's largest id: read only where it holds one) */
        });
        if (cb >= 0) {
            atomicAdd(&S.cnt[w][cb], cc);
            if (mass) atomicAdd(&S.mass[w][cb], cm);
        }
        __syncthreads();
        for (int b = threadIdx.x; b < 256; b += SMP_T) {
            unsigned c = 0;
            double m = 0.0;
            for (int k = 0; k < SMP_W; k++) { c += S.cnt[k][b]; m += S.mass[k][b]; }
            S.bins[b] = c; S.bmass[b] = m;
        }
        C.sync(); /* every CTA's bins written */
        for (int b = threadIdx.x; b < 256; b += SMP_T) {
            unsigned c = 0;
            double m = 0.0;
            int lo = -1;
            for (int r = 0; r < C.nct; r++) {
                c += C.peer(S.bins, r)[b];
                m += C.peer(S.bmass, r)[b];
                if (shift == 0) lo = max(lo, C.peer(S.lone, r)[b]);
            }
            S.gbins[b] = c; S.gbmass[b] = m;
            if (shift == 0) S.glone[b] = lo;
        }
        C.sync(); /* the peers' bins read (they are written again next pass) */
        if (threadIdx.x == 0) {
            if (mass && frac > 0.0f && shift == 24) { /* the target from every alive element's mass, in bin order */
                double all = 0.0;
                for (int b = 255; b >= 0; b--) all += S.gbmass[b];
                target = (double)frac * all;
                S.pub_d[1] = target;
            }
            int d = -1, last = -1;
            for (int b = 255; b >= 0; b--) {
                const double v = mass ? S.gbmass[b] : (double)S.gbins[b];
                if (S.gbins[b] > 0) last = b;
                if (before + v >= target && v > 0.0) { d = b; break; }
                before += v;
            }
            if (d < 0) { d = last < 0 ? 0 : last; S.s_flag = 0; before -= mass ? S.gbmass[d] : (double)S.gbins[d]; }
            else S.s_flag = 1;
            S.s_key = (uint32_t)d;
            S.s_d = before;
        }
        __syncthreads();
        if (mass && frac > 0.0f && shift == 24) target = S.pub_d[1];
        ok = ok && S.s_flag;
        prefix |= S.s_key << shift;
        pmask |= 255u << shift;
        before = S.s_d;
        if (shift == 0) lone = S.glone[prefix & 255u];
        if (!ok) break;
    }
    *above = before;
    *ties = (int)S.gbins[prefix & 255u];
    *lone_id = lone;
    *found = ok;
    *target_io = target;
    __syncthreads();
    return prefix;
}

#if SMP_CL > 1
static __global__ void __cluster_dims__(SMP_CL, 1, 1) __launch_bounds__(SMP_T)
#else
static __global__ void __launch_bounds__(SMP_T)
#endif
sample_kernel(const float *x, int64_t n, const int32_t *params, int32_t *out) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    extern __shared__ __align__(16) uint8_t smp_smem[];
    cu_sample_smem &S = *(cu_sample_smem *)smp_smem;
    const smp_cl C;
    const int row = (int)blockIdx.x / SMP_CL;
    const int32_t *pw = params + 6 * row; /* {u (double), T, top_p, min_p, top_k} */
    double u;
    memcpy(&u, pw, 8);
    const float T = __int_as_float(pw[2]), top_p = __int_as_float(pw[3]), min_p = __int_as_float(pw[4]);
    const int top_k = pw[5];
    smp_row R;
    R.x = x + (int64_t)row * n; R.n = (int)n;
    R.g = C.rank * SMP_T + (int)threadIdx.x; R.gt = C.nct * SMP_T;
    R.k_on = R.p_on = false; R.k_key = R.p_key = 0; R.k_id = R.p_id = 0;
    /* the maximum of l (and the argmax of the raw logits: T 0, or nothing left) */
    R.inv_t = T > 0.0f ? 1.0f / T : 1.0f;
    float mx = -INFINITY, best = -INFINITY;
    int bi = 0x7fffffff, fin = 0;
    smp_each(R, [&](int i, float v) {
        if (am_better(v, i, best, bi) && v == v) { best = v; bi = i; }
        if (v == v && v != -INFINITY) { mx = fmaxf(mx, v * R.inv_t); fin++; }
    });
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        mx = fmaxf(mx, shfl_xor(mx, off));
        const float ov = shfl_xor(best, off);
        const int oi = shfl_xor(bi, off);
        if (am_better(ov, oi, best, bi)) { best = ov; bi = oi; }
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) { S.red[threadIdx.x >> 5] = (double)mx; S.bmass[threadIdx.x >> 5] = (double)best; S.bins[threadIdx.x >> 5] = (unsigned)bi; }
    __syncthreads();
    mx = -INFINITY; best = -INFINITY; bi = 0x7fffffff;
    for (int w = 0; w < SMP_W; w++) {
        mx = fmaxf(mx, (float)S.red[w]);
        if (am_better((float)S.bmass[w], (int)S.bins[w], best, bi)) { best = (float)S.bmass[w]; bi = (int)S.bins[w]; }
    }
    /* the cluster's: each CTA's (max, best, index) published, combined in rank order */
    if (threadIdx.x == 0) { S.pub_f[0] = mx; S.pub_f[1] = best; S.pub_i[2] = bi; }
    C.sync();
    for (int r = 0; r < C.nct; r++) {
        mx = fmaxf(mx, C.peer(S.pub_f, r)[0]);
        const float ob = C.peer(S.pub_f, r)[1];
        const int oi = C.peer(S.pub_i, r)[2];
        if (am_better(ob, oi, best, bi)) { best = ob; bi = oi; }
    }
    C.sync();
    const int n_fin = smp_cl_sum<int>(C, smp_block_sum<int>(fin, S.ired), &S.pub_i[3]);
    if (!(T > 0.0f) || mx == -INFINITY) { /* greedy, or every logit dropped: the argmax (NaN never wins; all NaN: 0) */
        if (C.rank == 0 && threadIdx.x == 0) out[row] = bi == 0x7fffffff ? 0 : bi;
        return;
    }
    R.mx = mx;
    R.thr = min_p > 0.0f ? mx + logf(min_p) : -INFINITY;
    double above;
    int ties, lone;
    bool found;
    if (top_k > 0) {
        int n0 = n_fin; /* without min-p the finite logits, counted with the maximum */
        if (min_p > 0.0f) {
            int mine = 0;
            smp_each(R, [&](int i, float v) {
                float l; uint32_t key;
                mine += smp_alive(R, i, v, l, key);
            });
            n0 = smp_cl_sum<int>(C, smp_block_sum<int>(mine, S.ired), &S.pub_i[3]);
        }
        if (top_k < n0) {
            double tk = (double)top_k;
            const uint32_t key = smp_select(C, R, false, &tk, 0.0f, &above, &ties, &lone, &found, S);
            const int take = top_k - (int)above; /* ties of the k-th key taken, lowest ids first */
            const int id = ties == 1 ? lone : smp_tie_id(C, R, key, take, S);
            R.k_on = true; R.k_key = key; R.k_id = id;
        }
    }
    if (top_p < 1.0f) {
        double target = 0.0;
        const uint32_t key = smp_select(C, R, true, &target, top_p, &above, &ties, &lone, &found, S);
        if (found) {
            /* the ties at the cut, in id order, while the mass before each is short of the target */
            if (threadIdx.x == 0) {
                const float e = expf(__uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key) - mx);
                double acc = above;
                int j = 0;
                while (j < ties && acc < target) { acc += (double)e; j++; }
                S.s_take = j > 0 ? j : 1;
            }
            __syncthreads();
            const int take = S.s_take;
            const int id = ties == 1 ? lone : smp_tie_id(C, R, key, take, S);
            R.p_on = true; R.p_key = key; R.p_id = id;
        }
    }
    /* the draw: chunks of ids a thread, in order */
    const int ch = (R.n + R.gt - 1) / R.gt, i0 = min(R.n, R.g * ch), i1 = min(R.n, i0 + ch);
    double m = 0.0;
    int last = -1;
    smp_chunk(R, i0, i1, [&](int i, float v) {
        float l; uint32_t key;
        if (smp_alive(R, i, v, l, key)) { m += (double)expf(l - mx); last = i; }
        return false;
    });
    double tot;
    const double before = smp_scan<double>(C, m, S.red, &S.pub_d[0], &tot);
    /* the last survivor (u at the very end, rounding) */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) last = max(last, shfl_xor(last, off));
    if (threadIdx.x == 0) S.s_id = -1;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) atomicMax(&S.s_id, last);
    const double uu = u * tot;
    __syncthreads();
    const int fallback = smp_cl_max(C, S.s_id, &S.pub_i[1]);
    if (threadIdx.x == 0) S.s_take = -1;
    __syncthreads();
    if (m > 0.0 && uu >= before && uu < before + m) {
        double cum = before;
        smp_chunk(R, i0, i1, [&](int i, float v) {
            float l; uint32_t key;
            if (!smp_alive(R, i, v, l, key)) return false;
            cum += (double)expf(l - mx);
            if (uu < cum) { S.s_take = i; return true; }
            return false;
        });
    }
    __syncthreads();
    const int claim = smp_cl_max(C, S.s_take, &S.pub_i[0]);
    if (C.rank == 0 && threadIdx.x == 0) out[row] = claim >= 0 ? claim : fallback >= 0 ? fallback : bi;
}

void cu_launch_sample(const float *x, int64_t n_rows, int64_t n, const int32_t *params, int32_t *out, gpuStream_t s) {
    if (n_rows <= 0) return;
    static bool attr = false;
    if (!attr) { (void)gpuFuncSetMaxDynamicSmem((const void *)sample_kernel, (int)sizeof(cu_sample_smem)); attr = true; }
    gpu_launch(sample_kernel, dim3((unsigned)(n_rows * SMP_CL)), dim3(SMP_T), sizeof(cu_sample_smem), s, x, n, params, out);
}
