/* The recurrent gated delta rule for one value head (see ops_gdn.h), written once for any x86 vector width:
 * per token, each state row (d_k floats) is decayed and dotted with k in one pass, then updated with the delta
 * and dotted with q in a second, both while the row sits in registers / L1. ops_gdn_avx2.c and
 * ops_gdn_avx512.c each include this file once with GDN_AVX512 0 or 1 (their build flags pick the ISA);
 * ops_gdn.c chooses between them at run time. d_k must be a multiple of GDN_W. */
#include <immintrin.h>
#include "backend/cpu/ops_gdn.h"
#include "quant/blocks.h"

#if GDN_AVX512
#define GDN_W 16
#define GDN_FN gdn_recurrent_head_avx512
typedef __m512 gdn_vec;
#define gdn_set1 _mm512_set1_ps
#define gdn_zero _mm512_setzero_ps
#define gdn_load _mm512_loadu_ps
#define gdn_store _mm512_storeu_ps
#define gdn_mul _mm512_mul_ps
#define gdn_add _mm512_add_ps
#define gdn_fmadd _mm512_fmadd_ps
#define gdn_hsum _mm512_reduce_add_ps
#else
#define GDN_W 8
#define GDN_FN gdn_recurrent_head_avx2
typedef __m256 gdn_vec;
#define gdn_set1 _mm256_set1_ps
#define gdn_zero _mm256_setzero_ps
#define gdn_load _mm256_loadu_ps
#define gdn_store _mm256_storeu_ps
#define gdn_mul _mm256_mul_ps
#define gdn_add _mm256_add_ps
#define gdn_fmadd _mm256_fmadd_ps
static inline float gdn_hsum(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#if GDN_AVX512
#define GDN_ROW gdn_row_avx512
#define GDN_FN_BF16 gdn_recurrent_head_bf16_avx512
#else
#define GDN_ROW gdn_row_avx2
#define GDN_FN_BF16 gdn_recurrent_head_bf16_avx2
#endif

/* One state row (d_k floats) for one token: decayed and dotted with k in one pass, updated with the delta and dotted
 * with q in a second; returns the output element. */
/* always inlined: a call to it returned with the upper vector state dirty (no vzeroupper in a local function), and the
 * SSE code after the rule (the gated norm, expf) then ran ~7x slower (qwen35-4b on the CPU: +7% TPOT, +27% TTFT) */
static inline __attribute__((always_inline)) float GDN_ROW(float *row, int d_k, gdn_vec dec, float b, float vj, const float *kt,
                                                           const float *qt) {
    gdn_vec a0 = gdn_zero(), a1 = gdn_zero();
    int i = 0;
    for (; i + 2 * GDN_W <= d_k; i += 2 * GDN_W) {
        gdn_vec r0 = gdn_mul(gdn_load(row + i), dec);
        gdn_vec r1 = gdn_mul(gdn_load(row + i + GDN_W), dec);
        gdn_store(row + i, r0);
        gdn_store(row + i + GDN_W, r1);
        a0 = gdn_fmadd(r0, gdn_load(kt + i), a0);
        a1 = gdn_fmadd(r1, gdn_load(kt + i + GDN_W), a1);
    }
    for (; i < d_k; i += GDN_W) {
        gdn_vec r0 = gdn_mul(gdn_load(row + i), dec);
        gdn_store(row + i, r0);
        a0 = gdn_fmadd(r0, gdn_load(kt + i), a0);
    }
    const float e = gdn_hsum(gdn_add(a0, a1));
    const gdn_vec delta = gdn_set1(b * (vj - e));
    a0 = gdn_zero();
    a1 = gdn_zero();
    for (i = 0; i + 2 * GDN_W <= d_k; i += 2 * GDN_W) {
        gdn_vec r0 = gdn_fmadd(delta, gdn_load(kt + i), gdn_load(row + i));
        gdn_vec r1 = gdn_fmadd(delta, gdn_load(kt + i + GDN_W), gdn_load(row + i + GDN_W));
        gdn_store(row + i, r0);
        gdn_store(row + i + GDN_W, r1);
        a0 = gdn_fmadd(r0, gdn_load(qt + i), a0);
        a1 = gdn_fmadd(r1, gdn_load(qt + i + GDN_W), a1);
    }
    for (; i < d_k; i += GDN_W) {
        gdn_vec r0 = gdn_fmadd(delta, gdn_load(kt + i), gdn_load(row + i));
        gdn_store(row + i, r0);
        a0 = gdn_fmadd(r0, gdn_load(qt + i), a0);
    }
    return gdn_hsum(gdn_add(a0, a1));
}

void GDN_FN(float *S, int d_k, int d_v, int n_tokens, const float *q, const float *k, int64_t qk_stride, const float *v,
            int64_t v_stride, const float *g, const float *beta, int64_t gb_stride, float *o, int64_t o_stride);

void GDN_FN(float *S, int d_k, int d_v, int n_tokens, const float *q, const float *k, int64_t qk_stride, const float *v,
            int64_t v_stride, const float *g, const float *beta, int64_t gb_stride, float *o, int64_t o_stride) {
    for (int t = 0; t < n_tokens; t++) {
        const float *qt = q + (int64_t)t * qk_stride, *kt = k + (int64_t)t * qk_stride;
        const float *vt = v + (int64_t)t * v_stride;
        float *ot = o + (int64_t)t * o_stride;
        const gdn_vec dec = gdn_set1(__builtin_expf(g[(int64_t)t * gb_stride]));
        const float b = beta[(int64_t)t * gb_stride];
        for (int j = 0; j < d_v; j++) ot[j] = GDN_ROW(S + (int64_t)j * d_k, d_k, dec, b, vt[j], kt, qt);
    }
}

/* The bf16 delta-rule state (--mamba-ssm-cache-dtype bfloat16): n elements widened to f32, and f32 rounded back to bf16
 * by fp32_to_bf16's rule (nearest even; a NaN keeps its top bits and turns quiet), GDN_W at a time; the scalar tail
 * takes the rest. The same bits as the scalar loops (tests/test_gdn.c). */
#if GDN_AVX512
#define GDN_WIDEN gdn_bf16_widen_avx512
#define GDN_NARROW gdn_bf16_narrow_avx512
#else
#define GDN_WIDEN gdn_bf16_widen_avx2
#define GDN_NARROW gdn_bf16_narrow_avx2
#endif
void GDN_WIDEN(float *dst, const uint16_t *src, int64_t n);
void GDN_NARROW(uint16_t *dst, const float *src, int64_t n);
void GDN_WIDEN(float *dst, const uint16_t *src, int64_t n) {
    int64_t i = 0;
#if GDN_AVX512
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512((void *)(dst + i), _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i))), 16));
#else
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i))), 16));
#endif
    for (; i < n; i++) dst[i] = bf16_to_fp32(src[i]);
}
void GDN_NARROW(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
#if GDN_AVX512
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), absm = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000), q = _mm512_set1_epi32(0x40);
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512((const void *)(src + i));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), inf);
        const __m512i v = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), q));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(v));
    }
#else
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000), q = _mm256_set1_epi32(0x40);
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
        /* |u| > inf as signed compares: both sides are below 2^31 */
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
        const __m256i v = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), q), nan);
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xD8); /* values <= 0xffff: no saturation */
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
    }
#endif
    for (; i < n; i++) dst[i] = fp32_to_bf16(src[i]);
}

/* One token of one value head on a bf16 state (a decode step): each row widened into a buffer on the stack, GDN_ROW's
 * ops, rounded back, so the state never passes through a scratch of the whole head; the same bits as widening the
 * head, GDN_FN over one token and rounding it back. d_k <= GDN_BF16_MAX_DK (ops_gdn.h). */
void GDN_FN_BF16(uint16_t *S, int d_k, int d_v, const float *q, const float *k, const float *v, float g, float beta, float *o);
void GDN_FN_BF16(uint16_t *S, int d_k, int d_v, const float *q, const float *k, const float *v, float g, float beta, float *o) {
    float row[GDN_BF16_MAX_DK] __attribute__((aligned(64)));
    const gdn_vec dec = gdn_set1(__builtin_expf(g));
    for (int j = 0; j < d_v; j++) {
        uint16_t *r16 = S + (int64_t)j * d_k;
        GDN_WIDEN(row, r16, d_k);
        o[j] = GDN_ROW(row, d_k, dec, beta, v[j], k, q);
        GDN_NARROW(r16, row, d_k);
    }
}
