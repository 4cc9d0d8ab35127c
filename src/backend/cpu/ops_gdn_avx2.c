/* AVX2 kernel of the recurrent gated delta rule for one value head (see ops_gdn.h): per token, each
 * state row (d_k floats) is decayed and dotted with k in one pass, then updated with the delta and dotted
 * with q in a second, both while the row sits in registers / L1. Chosen at run time by ops_gdn.c when the
 * CPU (and $VLLMC_SIMD) allow AVX2 but not AVX-512, and d_k is a multiple of 8. */
#include <immintrin.h>
#include "backend/cpu/ops_gdn.h"

void gdn_recurrent_head_avx2(float *S, int d_k, int d_v, int n_tokens, const float *q, const float *k,
                               int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                               const float *beta, int64_t gb_stride, float *o, int64_t o_stride);

static inline float gdn_hsum256(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void gdn_recurrent_head_avx2(float *S, int d_k, int d_v, int n_tokens, const float *q, const float *k,
                               int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                               const float *beta, int64_t gb_stride, float *o, int64_t o_stride) {
    for (int t = 0; t < n_tokens; t++) {
        const float *qt = q + (int64_t)t * qk_stride, *kt = k + (int64_t)t * qk_stride;
        const float *vt = v + (int64_t)t * v_stride;
        float *ot = o + (int64_t)t * o_stride;
        const __m256 dec = _mm256_set1_ps(__builtin_expf(g[(int64_t)t * gb_stride]));
        const float b = beta[(int64_t)t * gb_stride];
        for (int j = 0; j < d_v; j++) {
            float *row = S + (int64_t)j * d_k;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            int i = 0;
            for (; i + 16 <= d_k; i += 16) {
                __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(row + i), dec);
                __m256 r1 = _mm256_mul_ps(_mm256_loadu_ps(row + i + 8), dec);
                _mm256_storeu_ps(row + i, r0);
                _mm256_storeu_ps(row + i + 8, r1);
                a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(kt + i), a0);
                a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(kt + i + 8), a1);
            }
            for (; i < d_k; i += 8) {
                __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(row + i), dec);
                _mm256_storeu_ps(row + i, r0);
                a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(kt + i), a0);
            }
            const float e = gdn_hsum256(_mm256_add_ps(a0, a1));
            const __m256 delta = _mm256_set1_ps(b * (vt[j] - e));
            a0 = _mm256_setzero_ps();
            a1 = _mm256_setzero_ps();
            for (i = 0; i + 16 <= d_k; i += 16) {
                __m256 r0 = _mm256_fmadd_ps(delta, _mm256_loadu_ps(kt + i), _mm256_loadu_ps(row + i));
                __m256 r1 = _mm256_fmadd_ps(delta, _mm256_loadu_ps(kt + i + 8), _mm256_loadu_ps(row + i + 8));
                _mm256_storeu_ps(row + i, r0);
                _mm256_storeu_ps(row + i + 8, r1);
                a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(qt + i), a0);
                a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(qt + i + 8), a1);
            }
            for (; i < d_k; i += 8) {
                __m256 r0 = _mm256_fmadd_ps(delta, _mm256_loadu_ps(kt + i), _mm256_loadu_ps(row + i));
                _mm256_storeu_ps(row + i, r0);
                a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(qt + i), a0);
            }
            ot[j] = gdn_hsum256(_mm256_add_ps(a0, a1));
        }
    }
}
