/* Internals shared by the scalar and SIMD dot products: scale unpacking, the per-block integer sums
 * used for tails, and THE float expressions that turn integer sums into a dot product.
 *
 * Contract (every implementation, scalar or SIMD, follows it to the bit):
 *  - The integer part of every block (per 32-block S, per super-block I and M) is an exact int32.
 *  - 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4): block b's fp32 term
 *    (dot_term_sym / dot_term_min) is added to partial p[b % 8] (p starts at +0.0f), then the
 *    result is dot_reduce8(p) = ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)). Eight lanes = one __m256.
 *  - 256-element super-block types (Q2_K..Q6_K, IQ4_XS): acc = 0; for each super-block in order,
 *    acc = acc + dot_term_k / dot_term_kmin(...). Sequential.
 *  - F32 / F16 / BF16 x F32: p[i % 32] = p[i % 32] + w_i*a_i (product rounded, then added, no FMA),
 *    then dot_reduce32(p).
 * Each fp32 operation is a separate statement so that no compiler contracts a*b+c into an FMA
 * (GCC does not in -std=c11 mode; clang is told below). */
#ifndef VLLMC_DOT_IMPL_H
#define VLLMC_DOT_IMPL_H

#include "quant.h"
#include "blocks.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- fp32 combination (identical in every implementation) ---- */
static inline float dot_term_sym(float dw, float da, int32_t s) {
    float dd = dw * da;
    return dd * (float)s;
}
static inline float dot_term_min(float dw, float da, int32_t s, float mw, float sa) {
    float dd = dw * da;
    float x = dd * (float)s;
    float y = mw * sa;
    return x + y;
}
static inline float dot_term_k(float da, float d, int32_t isum) {
    float dd = da * d;
    return dd * (float)isum;
}
static inline float dot_term_kmin(float da, float d, float dmin, int32_t isum, int32_t msum) {
    float dd = da * d;
    float dm = da * dmin;
    float x = dd * (float)isum;
    float y = dm * (float)msum;
    return x - y;
}
static inline float dot_reduce8(const float *p) {
    float a = p[0] + p[4], b = p[1] + p[5], c = p[2] + p[6], d = p[3] + p[7];
    float ac = a + c, bd = b + d;
    return ac + bd;
}
/* p[32]: lanes k, k+8, k+16, k+24 first ((p_k + p_k+8) + (p_k+16 + p_k+24)), then dot_reduce8. */
static inline float dot_reduce32(const float *p) {
    float r[8];
    for (int k = 0; k < 8; k++) {
        float x = p[k] + p[k + 8], y = p[k + 16] + p[k + 24];
        r[k] = x + y;
    }
    return dot_reduce8(r);
}

/* ---- scale unpacking ---- */
/* Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12-byte packing. */
static inline void dot_scale_min_k4(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
/* Q3_K: scale j (0..15) minus its +32 bias, in -32..31. */
static inline int dot_q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}
/* IQ4_XS: scale of sub-block b (0..7) minus 32, in -32..31. */
static inline int dot_iq4xs_scale(const block_iq4_xs *x, int b) {
    int lo = (x->scales_l[b / 2] >> (4 * (b % 2))) & 15;
    int hi = (x->scales_h >> (2 * b)) & 3;
    return (lo | (hi << 4)) - 32;
}
/* MXFP4: 2^(e-128) as f32 (half the E8M0 scale; e = 0, 1 give f32 subnormals). */
static inline float dot_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline uint32_t dot_load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- exact integer sums of one 32-element block (scalar; also used by SIMD tails) ---- */
static inline int32_t dot_isum_q4_0(const block_q4_0 *w, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 16; j++) s += ((w->qs[j] & 15) - 8) * a[j] + ((w->qs[j] >> 4) - 8) * a[j + 16];
    return s;
}
static inline int32_t dot_isum_q4_1(const block_q4_1 *w, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 16; j++) s += (w->qs[j] & 15) * a[j] + (w->qs[j] >> 4) * a[j + 16];
    return s;
}
static inline int32_t dot_isum_q5_0(const block_q5_0 *w, const int8_t *a) {
    uint32_t qh = dot_load_u32(w->qh);
    int32_t s = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = (w->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int q1 = (w->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        s += (q0 - 16) * a[j] + (q1 - 16) * a[j + 16];
    }
    return s;
}
static inline int32_t dot_isum_q5_1(const block_q5_1 *w, const int8_t *a) {
    uint32_t qh = dot_load_u32(w->qh);
    int32_t s = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = (w->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int q1 = (w->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        s += q0 * a[j] + q1 * a[j + 16];
    }
    return s;
}
static inline int32_t dot_isum_q8_0(const block_q8_0 *w, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += w->qs[j] * a[j];
    return s;
}
static inline int32_t dot_isum_iq4_nl(const block_iq4_nl *w, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 16; j++) s += kvalues_iq4nl[w->qs[j] & 15] * a[j] + kvalues_iq4nl[w->qs[j] >> 4] * a[j + 16];
    return s;
}
static inline int32_t dot_isum_mxfp4(const block_mxfp4 *w, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < 16; j++) s += kvalues_mxfp4[w->qs[j] & 15] * a[j] + kvalues_mxfp4[w->qs[j] >> 4] * a[j + 16];
    return s;
}

/* ---- implementation tables ---- */
/* One weight row against n_act (1..DOT_MULTI_MAX) activation rows a_stride bytes apart:
 * out[i] = the one-row kernel's result for activation row i, bit for bit. */
#define DOT_MULTI_MAX 8

/* Software prefetch of the weight stream. Decode reads every weight row once from DRAM, and the hardware prefetchers
 * alone left the SIMD kernels at 30-45% of the read bandwidth (bench_dot "dram"); each block (group) the kernels read
 * asks for the bytes DOT_PF_BYTES ahead of it, a line a 64 bytes. A prefetch never faults, so the end of a buffer
 * needs no test. The values read, and so the bits, do not change. */
#ifndef DOT_PF_BYTES
#define DOT_PF_BYTES 1536
#endif
#define DOT_PREFETCH(p, bytes)                                                                   \
    do {                                                                                        \
        const char *pf_ = (const char *)(p) + DOT_PF_BYTES;                                     \
        _Pragma("GCC unroll 16")                                                                \
        for (size_t pf_o = 0; pf_o < (size_t)(bytes); pf_o += 64) __builtin_prefetch(pf_ + pf_o, 0, 3); \
    } while (0)
typedef void (*vec_dot_multi_fn)(int64_t n, const void *w, const void *a, size_t a_stride, int n_act, float *out);
vec_dot_multi_fn dot_avx512_get_multi(uint32_t wtype);
/* Activation quantizers: scalar reference (act_quant.c) and SIMD versions with the same bits. */
typedef void (*quantize_row_fn)(const float *x, void *dst, int64_t n);
quantize_row_fn act_quant_ref_get(uint32_t act_type);
quantize_row_fn dot_avx512_get_quantizer(uint32_t act_type);
/* The multi-row kernel of the active ISA, or NULL (then call the one-row kernel per activation). */
vec_dot_multi_fn dot_get_multi(uint32_t wtype);
/* Scalar reference of one weight type (NULL if unsupported). */
vec_dot_fn dot_ref_get(uint32_t wtype);
/* SIMD implementations (NULL where that ISA has no kernel for the type: use the scalar one). */
vec_dot_fn dot_avx2_get(uint32_t wtype);
vec_dot_fn dot_avx512_get(uint32_t wtype);

#endif
