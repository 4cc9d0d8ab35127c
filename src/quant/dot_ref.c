/* Scalar reference dot products of every supported weight type with its activation type
 * (GGUF-QUANTS.md 4.5). The oracle the SIMD paths must match bit-for-bit: integer parts exact in
 * int32, fp32 combination in the fixed order described in dot_impl.h. */
#include <math.h>
#include <string.h>
#include "dot_impl.h"

/* ---- 32-element block types: term of block b goes to p[b % 8], then dot_reduce8 ---- */
#define DOT_REF_LEGACY_SYM(name, wblock, isum_fn, dw_expr)                      \
    static float dot_ref_##name(int64_t n, const void *vw, const void *va) {    \
        const wblock *w = vw;                                                   \
        const block_q8_0 *a = va;                                               \
        float p[8] = {0};                                                       \
        for (int64_t b = 0; b < n / 32; b++) {                                  \
            const wblock *x = &w[b];                                            \
            int32_t s = isum_fn(x, a[b].qs);                                    \
            float t = dot_term_sym(dw_expr, fp16_to_fp32(a[b].d), s);           \
            p[b % 8] = p[b % 8] + t;                                            \
        }                                                                       \
        return dot_reduce8(p);                                                  \
    }

DOT_REF_LEGACY_SYM(q4_0, block_q4_0, dot_isum_q4_0, fp16_to_fp32(x->d))
DOT_REF_LEGACY_SYM(q5_0, block_q5_0, dot_isum_q5_0, fp16_to_fp32(x->d))
DOT_REF_LEGACY_SYM(q8_0, block_q8_0, dot_isum_q8_0, fp16_to_fp32(x->d))
DOT_REF_LEGACY_SYM(iq4_nl, block_iq4_nl, dot_isum_iq4_nl, fp16_to_fp32(x->d))
DOT_REF_LEGACY_SYM(mxfp4, block_mxfp4, dot_isum_mxfp4, dot_e8m0_half(x->e))

#define DOT_REF_LEGACY_MIN(name, wblock, isum_fn)                                            \
    static float dot_ref_##name(int64_t n, const void *vw, const void *va) {                 \
        const wblock *w = vw;                                                                \
        const block_q8_1 *a = va;                                                            \
        float p[8] = {0};                                                                    \
        for (int64_t b = 0; b < n / 32; b++) {                                               \
            int32_t s = isum_fn(&w[b], a[b].qs);                                             \
            float t = dot_term_min(fp16_to_fp32(w[b].d), fp16_to_fp32(a[b].d), s,            \
                                   fp16_to_fp32(w[b].m), fp16_to_fp32(a[b].s));              \
            p[b % 8] = p[b % 8] + t;                                                         \
        }                                                                                    \
        return dot_reduce8(p);                                                               \
    }

DOT_REF_LEGACY_MIN(q4_1, block_q4_1, dot_isum_q4_1)
DOT_REF_LEGACY_MIN(q5_1, block_q5_1, dot_isum_q5_1)

/* ---- K-quants x Q8_K: one term per super-block, accumulated in order ---- */
static float dot_ref_q2_K(int64_t n, const void *vw, const void *va) {
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q2_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        int32_t isum = 0, msum = 0;
        for (int b = 0; b < 16; b++) { /* sub-block b = elements 16b..16b+15 = (h, g, l0) */
            int h = b / 8, g = (b % 8) / 2, l0 = 16 * (b % 2), sb = 0;
            for (int l = l0; l < l0 + 16; l++) sb += ((x->qs[32 * h + l] >> (2 * g)) & 3) * q8[128 * h + 32 * g + l];
            isum += (x->scales[b] & 15) * sb;
            msum += (x->scales[b] >> 4) * a[s].bsums[b];
        }
        acc = acc + dot_term_kmin(a[s].d, fp16_to_fp32(x->d), fp16_to_fp32(x->dmin), isum, msum);
    }
    return acc;
}

static float dot_ref_q3_K(int64_t n, const void *vw, const void *va) {
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q3_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        int32_t isum = 0;
        for (int b = 0; b < 16; b++) {
            int h = b / 8, g = (b % 8) / 2, l0 = 16 * (b % 2), sb = 0;
            for (int l = l0; l < l0 + 16; l++) {
                int lo = (x->qs[32 * h + l] >> (2 * g)) & 3;
                int hb = (x->hmask[l] >> (4 * h + g)) & 1;
                sb += (hb ? lo : lo - 4) * q8[128 * h + 32 * g + l];
            }
            isum += dot_q3k_scale(x->scales, b) * sb;
        }
        acc = acc + dot_term_k(a[s].d, fp16_to_fp32(x->d), isum);
    }
    return acc;
}

static float dot_ref_q4_K(int64_t n, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q4_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        int32_t isum = 0, msum = 0;
        for (int b = 0; b < 8; b++) { /* sub-block b: chunk b/2, low nibbles if b even */
            int sc, m, sb = 0;
            dot_scale_min_k4(b, x->scales, &sc, &m);
            const uint8_t *q = x->qs + 32 * (b / 2);
            for (int l = 0; l < 32; l++) sb += ((q[l] >> (4 * (b % 2))) & 15) * q8[32 * b + l];
            isum += sc * sb;
            msum += m * (a[s].bsums[2 * b] + a[s].bsums[2 * b + 1]);
        }
        acc = acc + dot_term_kmin(a[s].d, fp16_to_fp32(x->d), fp16_to_fp32(x->dmin), isum, msum);
    }
    return acc;
}

static float dot_ref_q5_K(int64_t n, const void *vw, const void *va) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q5_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        int32_t isum = 0, msum = 0;
        for (int b = 0; b < 8; b++) {
            int sc, m, sb = 0;
            dot_scale_min_k4(b, x->scales, &sc, &m);
            const uint8_t *q = x->qs + 32 * (b / 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> (4 * (b % 2))) & 15) | (((x->qh[l] >> b) & 1) << 4);
                sb += v * q8[32 * b + l];
            }
            isum += sc * sb;
            msum += m * (a[s].bsums[2 * b] + a[s].bsums[2 * b + 1]);
        }
        acc = acc + dot_term_kmin(a[s].d, fp16_to_fp32(x->d), fp16_to_fp32(x->dmin), isum, msum);
    }
    return acc;
}

static float dot_ref_q6_K(int64_t n, const void *vw, const void *va) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q6_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        int32_t isum = 0;
        for (int b = 0; b < 16; b++) {
            int h = b / 8, g = (b % 8) / 2, l0 = 16 * (b % 2), sb = 0;
            for (int l = l0; l < l0 + 16; l++) {
                int lo = (x->ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
                int hi = (x->qh[32 * h + l] >> (2 * g)) & 3;
                sb += ((lo | (hi << 4)) - 32) * q8[128 * h + 32 * g + l];
            }
            isum += x->scales[b] * sb;
        }
        acc = acc + dot_term_k(a[s].d, fp16_to_fp32(x->d), isum);
    }
    return acc;
}

static float dot_ref_iq4_xs(int64_t n, const void *vw, const void *va) {
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_iq4_xs *x = &w[s];
        const int8_t *q8 = a[s].qs;
        int32_t isum = 0;
        for (int b = 0; b < 8; b++) {
            const uint8_t *q = x->qs + 16 * b;
            int sb = 0;
            for (int j = 0; j < 16; j++)
                sb += kvalues_iq4nl[q[j] & 15] * q8[32 * b + j] + kvalues_iq4nl[q[j] >> 4] * q8[32 * b + 16 + j];
            isum += dot_iq4xs_scale(x, b) * sb;
        }
        acc = acc + dot_term_k(a[s].d, fp16_to_fp32(x->d), isum);
    }
    return acc;
}

/* ---- float weights x F32: p[i % 32] += w_i * a_i, then dot_reduce32 ---- */
#define DOT_REF_FLOAT(name, wtype_c, conv)                                   \
    static float dot_ref_##name(int64_t n, const void *vw, const void *va) { \
        const wtype_c *w = vw;                                               \
        const float *a = va;                                                 \
        float p[32] = {0};                                                   \
        for (int64_t i = 0; i < n; i++) {                                    \
            float prod = conv(w[i]) * a[i];                                  \
            p[i % 32] = p[i % 32] + prod;                                    \
        }                                                                    \
        return dot_reduce32(p);                                              \
    }
#define DOT_CONV_F32(x) (x)
DOT_REF_FLOAT(f32, float, DOT_CONV_F32)
DOT_REF_FLOAT(f16, ggml_half, fp16_to_fp32)
DOT_REF_FLOAT(bf16, uint16_t, bf16_to_fp32)

vec_dot_fn dot_ref_get(uint32_t wtype) {
    switch (wtype) {
    case GGML_TYPE_F32: return dot_ref_f32;
    case GGML_TYPE_F16: return dot_ref_f16;
    case GGML_TYPE_BF16: return dot_ref_bf16;
    case GGML_TYPE_Q4_0: return dot_ref_q4_0;
    case GGML_TYPE_Q4_1: return dot_ref_q4_1;
    case GGML_TYPE_Q5_0: return dot_ref_q5_0;
    case GGML_TYPE_Q5_1: return dot_ref_q5_1;
    case GGML_TYPE_Q8_0: return dot_ref_q8_0;
    case GGML_TYPE_IQ4_NL: return dot_ref_iq4_nl;
    case GGML_TYPE_MXFP4: return dot_ref_mxfp4;
    case GGML_TYPE_Q2_K: return dot_ref_q2_K;
    case GGML_TYPE_Q3_K: return dot_ref_q3_K;
    case GGML_TYPE_Q4_K: return dot_ref_q4_K;
    case GGML_TYPE_Q5_K: return dot_ref_q5_K;
    case GGML_TYPE_Q6_K: return dot_ref_q6_K;
    case GGML_TYPE_IQ4_XS: return dot_ref_iq4_xs;
    default: return NULL;
    }
}

float vec_dot_ref(uint32_t wtype, int64_t n, const void *w, const void *a) {
    vec_dot_fn f = dot_ref_get(wtype);
    VLLMC_ASSERT(f != NULL);
    return f(n, w, a);
}

/* ---- the deferred-norm activation (BK_ACT_Q8_KD, backend.h): the CUDA decode's writer and reader, replayed ---- */
void quantize_row_q8_kd_ref(const float *x, const float *w, int64_t n, int8_t *qs, float *d, int16_t *bs, float *ssq) {
    for (int64_t g = 0; g < n / 16; g++) {
        float v[16], s[16], amax = 0.0f;
        for (int i = 0; i < 16; i++) {
            v[i] = x[16 * g + i] * w[16 * g + i];
            s[i] = x[16 * g + i] * x[16 * g + i];
            amax = fmaxf(amax, fabsf(v[i]));
        }
        for (int k = 8; k >= 1; k >>= 1) { /* the butterfly over 16 lanes: lane i adds lane i ^ k, both get the sum */
            float t[16];
            for (int i = 0; i < 16; i++) t[i] = s[i] + s[i ^ k];
            memcpy(s, t, sizeof(s));
        }
        const float is = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 16; i++) {
            const int q = (int)nearbyintf(v[i] * is);
            qs[16 * g + i] = (int8_t)q;
            sum += q;
        }
        d[g] = amax / 127.0f;
        bs[g] = (int16_t)sum;
        ssq[g] = s[0];
    }
}

float q8_kd_rms_ref(const float *ssq, int64_t n, float eps) {
    const int64_t G = n / 16;
    VLLMC_ASSERT(G <= 32 * 8); /* the kernel's 8 groups a lane (kd_rms_load) */
    float l[32];
    for (int i = 0; i < 32; i++) {
        l[i] = i < G ? ssq[i] : 0.0f;
        for (int k = 1; k < 8; k++) l[i] = l[i] + (i + 32 * k < G ? ssq[i + 32 * k] : 0.0f);
    }
    for (int k = 16; k >= 1; k >>= 1) {
        float t[32];
        for (int i = 0; i < 32; i++) t[i] = l[i] + l[i ^ k];
        memcpy(l, t, sizeof(l));
    }
    return 1.0f / sqrtf(l[0] / (float)n + eps);
}

float q8_kd_dot_q4_K_ref(int64_t n, const void *vw, const int8_t *qs, const float *d, const int16_t *bs) {
    const block_q4_K *w = vw;
    const int64_t n_sb = n / QK_K;
    float y = 0.0f, pair = 0.0f;
    for (int64_t sb = 0; sb < n_sb; sb++) {
        const block_q4_K *x = &w[sb];
        const int8_t *a = qs + sb * QK_K;
        const float *da = d + sb * 16;
        const int16_t *b = bs + sb * 16;
        float I[4], M[4];
        for (int c = 0; c < 4; c++) { /* the 4 lanes of a row: chunk c, sub-blocks 2c (low nibbles) and 2c + 1 (high) */
            int sc0, m0, sc1, m1, h[4] = {0, 0, 0, 0};
            dot_scale_min_k4(2 * c, x->scales, &sc0, &m0);
            dot_scale_min_k4(2 * c + 1, x->scales, &sc1, &m1);
            for (int i = 0; i < 32; i++) {
                h[i / 16] += (x->qs[32 * c + i] & 15) * a[64 * c + i];
                h[2 + i / 16] += (x->qs[32 * c + i] >> 4) * a[64 * c + 32 + i];
            }
            const float *g = da + 4 * c;
            const int16_t *s = b + 4 * c;
            I[c] = (g[0] * (float)(sc0 * h[0]) + g[1] * (float)(sc0 * h[1])) + (g[2] * (float)(sc1 * h[2]) + g[3] * (float)(sc1 * h[3]));
            M[c] = (g[0] * (float)(m0 * s[0]) + g[1] * (float)(m0 * s[1])) + (g[2] * (float)(m1 * s[2]) + g[3] * (float)(m1 * s[3]));
        }
        const float It = (I[0] + I[1]) + (I[2] + I[3]), Mt = (M[0] + M[1]) + (M[2] + M[3]);
        const float t = fp16_to_fp32(x->d) * It - fp16_to_fp32(x->dmin) * Mt;
        /* the kernel: each warp adds its two super-blocks' terms, then the warps' sums in order */
        if (sb % 2 == 0) pair = t;
        else y = sb == 1 ? pair + t : y + (pair + t);
    }
    if (n_sb % 2) y = n_sb == 1 ? pair + 0.0f : y + (pair + 0.0f); /* the last warp's second term is a zero */
    return y;
}
