/* AVX-512 (BW/VL/VNNI) dot products: 512-bit kernels for every block type (the float types use the
 * 256-bit kernels of dot_x86.h), multi-activation forms
 * for quant_gemm (one weight row against up to DOT_MULTI_MAX activation rows, weights unpacked once), and
 * the activation quantizers. Bit-identical to dot_ref.c / act_quant.c: integer sums are exact and the
 * fp32 steps follow dot_impl.h lane for lane. */
#define DOT_NAME(x) dot_avx512_##x
#define DOT_X86_VNNI 1
#include "dot_x86.h"

/* pshufb masks for a zmm whose four 128-bit lanes each hold the same 8 int16: the low 256 bits
 * get int16 lane j, the high 256 bits lane j+1 (j = 2c for chunk c of Q4_K). */
#define DOT_Z_PAIR(j) {DOT_B16X8(j), DOT_B16X8(j), DOT_B16X8(j + 1), DOT_B16X8(j + 1)}
static const uint8_t k_dotz_pair16[4][64] __attribute__((aligned(64))) = {
    DOT_Z_PAIR(0), DOT_Z_PAIR(2), DOT_Z_PAIR(4), DOT_Z_PAIR(6),
};

static inline int32_t dotz_hsum(__m512i v) {
    return dot_hsum_i32(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

/* One weight row against n_act (1..DOT_MULTI_MAX) activation rows a_stride bytes apart; the weight
 * unpacking is done once per super-block. Each out[i] has exactly the bits of the one-row kernel. */
static inline __attribute__((always_inline)) void dotz_q4_K_n(int64_t n, const void *vw, const void *va,
                                                               size_t a_stride, const int n_act, float *out) {
    const block_q4_K *w = vw;
    const __m512i m4 = _mm512_set1_epi8(15);
    float acc[DOT_MULTI_MAX] = {0};
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q4_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        __m128i scm = dot_unpack_k4_scales(x->scales);
        __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scm));
        /* int16 [m0 m0 m1 m1 .. m7 m7], against bsums [b0 .. b15] */
        __m256i mdup = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
        uint32_t dd_bits;
        memcpy(&dd_bits, &x->d, 4); /* d, dmin adjacent */
        const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd_bits)); /* [d, dmin, 0, 0] */
        __m512i wz[4], sz[4];
        #pragma GCC unroll 8
        for (int k = 0; k < 2; k++) {
            /* wz[c] = chunk c as [low nibbles | high nibbles] = sub-blocks 2c, 2c+1 = activations 64c..64c+63 */
            __m512i q = _mm512_loadu_si512(x->qs + 64 * k);
            __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            wz[2 * k] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            wz[2 * k + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) sz[c] = _mm512_shuffle_epi8(sc, _mm512_load_si512(k_dotz_pair16[c]));
        #pragma GCC unroll 8
        for (int i = 0; i < n_act; i++) {
            const block_q8_K *ai = (const block_q8_K *)((const uint8_t *)va + (size_t)i * a_stride) + s;
            __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ai->bsums), mdup);
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int c = 0; c < 4; c += 2) {
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wz[c], _mm512_loadu_si512(ai->qs + 64 * c)), sz[c]);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wz[c + 1], _mm512_loadu_si512(ai->qs + 64 * c + 64)), sz[c + 1]);
            }
            /* both horizontal sums at once: [I M I M] */
            __m512i iz = _mm512_add_epi32(acc0, acc1);
            __m256i h = _mm256_hadd_epi32(_mm256_add_epi32(_mm512_castsi512_si256(iz), _mm512_extracti64x4_epi64(iz, 1)), macc);
            __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            q = _mm_hadd_epi32(q, q);
            acc[i] = acc[i] + dot_term_kmin_v(ai->d, ddm, q);
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < n_act; i++) out[i] = acc[i];
}
static float dotz_q4_K(int64_t n, const void *vw, const void *va) {
    float r;
    dotz_q4_K_n(n, vw, va, 0, 1, &r);
    return r;
}

/* Q5_K: Q4_K plus a fifth bit per element, bit b of qh[l] for sub-block b. */
static inline __attribute__((always_inline)) void dotz_q5_K_n(int64_t n, const void *vw, const void *va,
                                                               size_t a_stride, const int n_act, float *out) {
    const block_q5_K *w = vw;
    const __m512i m4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    float acc[DOT_MULTI_MAX] = {0};
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q5_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        __m128i scm = dot_unpack_k4_scales(x->scales);
        __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scm));
        /* int16 [m0 m0 m1 m1 .. m7 m7], against bsums [b0 .. b15] */
        __m256i mdup = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
        uint32_t dd_bits;
        memcpy(&dd_bits, &x->d, 4); /* d, dmin adjacent */
        const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd_bits)); /* [d, dmin, 0, 0] */
        __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
        __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        __m512i wz[4], sz[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            /* chunk c: [low nibbles | high nibbles] = sub-blocks 2c, 2c+1 = activations 64c..64c+63 */
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
            __m512i v = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))), _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
            wz[c] = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qhz, bit), v, sixteen);
            sz[c] = _mm512_shuffle_epi8(sc, _mm512_load_si512(k_dotz_pair16[c]));
        }
#pragma GCC unroll 4
        for (int i = 0; i < n_act; i++) {
            const block_q8_K *ai = (const block_q8_K *)((const uint8_t *)va + (size_t)i * a_stride) + s;
            __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ai->bsums), mdup);
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c += 2) {
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wz[c], _mm512_loadu_si512(ai->qs + 64 * c)), sz[c]);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wz[c + 1], _mm512_loadu_si512(ai->qs + 64 * c + 64)), sz[c + 1]);
            }
            __m512i iz = _mm512_add_epi32(acc0, acc1);
            __m256i h = _mm256_hadd_epi32(_mm256_add_epi32(_mm512_castsi512_si256(iz), _mm512_extracti64x4_epi64(iz, 1)), macc);
            __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            q = _mm_hadd_epi32(q, q);
            acc[i] = acc[i] + dot_term_kmin_v(ai->d, ddm, q);
        }
    }
    for (int i = 0; i < n_act; i++) out[i] = acc[i];
}
static float dotz_q5_K(int64_t n, const void *vw, const void *va) {
    float r;
    dotz_q5_K_n(n, vw, va, 0, 1, &r);
    return r;
}

/* vpermw indices: 128-bit lane i of the result = int16 element base + i, broadcast */
#define DOT_Z_IDX4(b) {b, b, b, b, b, b, b, b, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, \
                       b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3}
static const int16_t k_dotz_q6_idx[4][32] __attribute__((aligned(64))) = {
    DOT_Z_IDX4(0), DOT_Z_IDX4(4), DOT_Z_IDX4(8), DOT_Z_IDX4(12),
};

static inline __attribute__((always_inline)) void dotz_q6_K_n(int64_t n, const void *vw, const void *va,
                                                               size_t a_stride, const int n_act, float *out) {
    const block_q6_K *w = vw;
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    float acc[DOT_MULTI_MAX] = {0};
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q6_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
        __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m512i scz = _mm512_castsi256_si512(sc16);
        __m256i scm32 = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), sc16), 5); /* -32 * sc */
        const float d = dot_f16(x->d);
        __m512i wz[4], sz[4];
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            /* [g0 | g1] and [g2 | g3]: activations 128h..128h+63 and 128h+64..128h+127 */
            wz[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qhz, m2), 4));
            wz[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qhz, 4), m2), 4));
            sz[2 * h] = _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h]), scz);
            sz[2 * h + 1] = _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h + 1]), scz);
        }
        #pragma GCC unroll 8
        for (int i = 0; i < n_act; i++) {
            const block_q8_K *ai = (const block_q8_K *)((const uint8_t *)va + (size_t)i * a_stride) + s;
            /* the -32 offset: sum_b sc_b * (-32) * bsums_b */
            __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ai->bsums), scm32);
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
            #pragma GCC unroll 8
            for (int k = 0; k < 4; k += 2) {
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wz[k], _mm512_loadu_si512(ai->qs + 64 * k)), sz[k]);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wz[k + 1], _mm512_loadu_si512(ai->qs + 64 * k + 64)), sz[k + 1]);
            }
            int32_t isum = dotz_hsum(_mm512_add_epi32(acc0, acc1)) + dot_hsum_i32(off);
            acc[i] = acc[i] + dot_term_k(ai->d, d, isum);
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < n_act; i++) out[i] = acc[i];
}
static float dotz_q6_K(int64_t n, const void *vw, const void *va) {
    float r;
    dotz_q6_K_n(n, vw, va, 0, 1, &r);
    return r;
}

/* ---- 32-element blocks, 512-bit: zmm k (0..3) holds blocks k and k+4 of a group of 8, so that the
 * transposed reduction lands block j in fp32 lane j, as the contract wants ---- */
static inline __m512i dotz_hadd(__m512i x, __m512i y) { /* per 128-bit lane: x0+x1, x2+x3, y0+y1, y2+y3 */
    __m512 xf = _mm512_castsi512_ps(x), yf = _mm512_castsi512_ps(y);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(xf, yf, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(xf, yf, 0xDD)));
}
/* z[k] = 16 int32 partial sums: lanes 0-7 of block k, lanes 8-15 of block k+4. Lane j = sum of block j. */
static inline __m256i dotz_hsum8(const __m512i *z) {
    __m512i h = dotz_hadd(dotz_hadd(z[0], z[1]), dotz_hadd(z[2], z[3]));
    __m512i r = _mm512_add_epi32(h, _mm512_shuffle_i64x2(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i64x2(r, r, _MM_SHUFFLE(2, 0, 2, 0)));
}
/* nibbles of two blocks -> [block0 elements 0..31 | block1 elements 0..31] */
static inline __m512i dotz_nibbles2(const uint8_t *qs0, const uint8_t *qs1) {
    __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs0)),
                                        _mm_loadu_si128((const __m128i *)qs1), 1);
    __m512i z = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1), _mm512_set1_epi8(15));
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}
static inline __m512i dotz_cat(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
static inline __m512i dotz_w_q4_0(const block_q4_0 *x0, const block_q4_0 *x1) {
    return _mm512_sub_epi8(dotz_nibbles2(x0->qs, x1->qs), _mm512_set1_epi8(8));
}
static inline __m512i dotz_w_q5_0(const block_q5_0 *x0, const block_q5_0 *x1) {
    uint32_t h0, h1;
    memcpy(&h0, x0->qh, 4);
    memcpy(&h1, x1->qh, 4);
    __mmask64 hb = _cvtu64_mask64((uint64_t)h0 | ((uint64_t)h1 << 32));
    __m512i nib = dotz_nibbles2(x0->qs, x1->qs);
    return _mm512_mask_sub_epi8(nib, _knot_mask64(hb), nib, _mm512_set1_epi8(16)); /* bit clear: nib - 16 */
}
static inline __m512i dotz_w_q8_0(const block_q8_0 *x0, const block_q8_0 *x1) {
    return dotz_cat(_mm256_loadu_si256((const __m256i *)x0->qs), _mm256_loadu_si256((const __m256i *)x1->qs));
}
static inline __m512i dotz_w_iq4_nl(const block_iq4_nl *x0, const block_iq4_nl *x1) {
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    return _mm512_shuffle_epi8(tab, dotz_nibbles2(x0->qs, x1->qs));
}
static inline __m512i dotz_w_mxfp4(const block_mxfp4 *x0, const block_mxfp4 *x1) {
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_mxfp4));
    return _mm512_shuffle_epi8(tab, dotz_nibbles2(x0->qs, x1->qs));
}

#define DOTZ_LEGACY_SYM(name, wblock, wpair_fn, dw8_expr, isum_fn, dw1_expr)                        \
    static inline __attribute__((always_inline)) void dotz_##name##_n(                              \
        int64_t n, const void *vw, const void *va, size_t a_stride, const int n_act, float *out) {  \
        const wblock *w = vw;                                                                       \
        const int64_t nb = n / 32;                                                                  \
        __m256 acc[DOT_MULTI_MAX];                                                                  \
        _Pragma("GCC unroll 8")                                                                     \
        for (int i = 0; i < n_act; i++) acc[i] = _mm256_setzero_ps();                               \
        int64_t b = 0;                                                                              \
        for (; b + 8 <= nb; b += 8) {                                                               \
            const wblock *x8 = w + b;                                                               \
            DOT_PREFETCH(x8, 8 * sizeof(wblock));                                                   \
            __m512i wabs[4];                                                                        \
            __mmask64 wneg[4];                                                                      \
            _Pragma("GCC unroll 8")                                                                 \
            for (int k = 0; k < 4; k++) {                                                           \
                __m512i wq = wpair_fn(&x8[k], &x8[k + 4]);                                          \
                wabs[k] = _mm512_abs_epi8(wq);                                                      \
                wneg[k] = _mm512_movepi8_mask(wq);                                                  \
            }                                                                                       \
            const __m256 dw = dw8_expr;                                                             \
            _Pragma("GCC unroll 8")                                                                 \
            for (int i = 0; i < n_act; i++) {                                                       \
                const block_q8_0 *a8 = (const block_q8_0 *)((const uint8_t *)va + (size_t)i * a_stride) + b; \
                __m512i z[4];                                                                       \
                _Pragma("GCC unroll 8")                                                             \
                for (int k = 0; k < 4; k++) {                                                       \
                    __m512i av = dotz_cat(_mm256_loadu_si256((const __m256i *)a8[k].qs),            \
                                          _mm256_loadu_si256((const __m256i *)a8[k + 4].qs));       \
                    z[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wabs[k],                     \
                                               _mm512_mask_sub_epi8(av, wneg[k], _mm512_setzero_si512(), av)); \
                }                                                                                   \
                __m256 sf = _mm256_cvtepi32_ps(dotz_hsum8(z));                                      \
                __m256 dd = _mm256_mul_ps(dw, DOT_F16X8(a8, d));                                    \
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(dd, sf));                              \
            }                                                                                       \
        }                                                                                           \
        _Pragma("GCC unroll 8")                                                                     \
        for (int i = 0; i < n_act; i++) {                                                           \
            const block_q8_0 *a = (const block_q8_0 *)((const uint8_t *)va + (size_t)i * a_stride); \
            float p[8];                                                                             \
            _mm256_storeu_ps(p, acc[i]);                                                            \
            for (int64_t bt = b; bt < nb; bt++) {                                                   \
                const wblock *x = &w[bt];                                                           \
                float t = dot_term_sym(dw1_expr, dot_f16(a[bt].d), isum_fn(x, a[bt].qs));      \
                p[bt % 8] = p[bt % 8] + t;                                                          \
            }                                                                                       \
            out[i] = dot_reduce8(p);                                                                \
        }                                                                                           \
    }                                                                                               \
    static float dotz_##name(int64_t n, const void *vw, const void *va) {                           \
        float r;                                                                                    \
        dotz_##name##_n(n, vw, va, 0, 1, &r);                                                       \
        return r;                                                                                   \
    }

#define DOTZ_LEGACY_MIN(name, wblock, wpair_fn, isum_fn)                                            \
    static inline __attribute__((always_inline)) void dotz_##name##_n(                              \
        int64_t n, const void *vw, const void *va, size_t a_stride, const int n_act, float *out) {  \
        const wblock *w = vw;                                                                       \
        const int64_t nb = n / 32;                                                                  \
        __m256 acc[DOT_MULTI_MAX];                                                                  \
        for (int i = 0; i < n_act; i++) acc[i] = _mm256_setzero_ps();                               \
        int64_t b = 0;                                                                              \
        for (; b + 8 <= nb; b += 8) {                                                               \
            const wblock *x8 = w + b;                                                               \
            DOT_PREFETCH(x8, 8 * sizeof(wblock));                                                   \
            __m512i wq[4];                                                                          \
            _Pragma("GCC unroll 4")                                                                 \
            for (int k = 0; k < 4; k++) wq[k] = wpair_fn(&x8[k], &x8[k + 4]);                       \
            const __m256 dw = DOT_F16X8(x8, d), mw = DOT_F16X8(x8, m);                              \
            _Pragma("GCC unroll 4")                                                                 \
            for (int i = 0; i < n_act; i++) {                                                       \
                const block_q8_1 *a8 = (const block_q8_1 *)((const uint8_t *)va + (size_t)i * a_stride) + b; \
                __m512i z[4];                                                                       \
                _Pragma("GCC unroll 4")                                                             \
                for (int k = 0; k < 4; k++) {                                                       \
                    __m512i av = dotz_cat(_mm256_loadu_si256((const __m256i *)a8[k].qs),            \
                                          _mm256_loadu_si256((const __m256i *)a8[k + 4].qs));       \
                    z[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq[k], av);                  \
                }                                                                                   \
                __m256 sf = _mm256_cvtepi32_ps(dotz_hsum8(z));                                      \
                __m256 dd = _mm256_mul_ps(dw, DOT_F16X8(a8, d));                                    \
                __m256 xs = _mm256_mul_ps(dd, sf);                                                  \
                __m256 ys = _mm256_mul_ps(mw, DOT_F16X8(a8, s));                                    \
                acc[i] = _mm256_add_ps(acc[i], _mm256_add_ps(xs, ys));                              \
            }                                                                                       \
        }                                                                                           \
        for (int i = 0; i < n_act; i++) {                                                           \
            const block_q8_1 *a = (const block_q8_1 *)((const uint8_t *)va + (size_t)i * a_stride); \
            float p[8];                                                                             \
            _mm256_storeu_ps(p, acc[i]);                                                            \
            for (int64_t bt = b; bt < nb; bt++) {                                                   \
                float t = dot_term_min(dot_f16(w[bt].d), dot_f16(a[bt].d), isum_fn(&w[bt], a[bt].qs), \
                                       dot_f16(w[bt].m), dot_f16(a[bt].s));               \
                p[bt % 8] = p[bt % 8] + t;                                                          \
            }                                                                                       \
            out[i] = dot_reduce8(p);                                                                \
        }                                                                                           \
    }                                                                                               \
    static float dotz_##name(int64_t n, const void *vw, const void *va) {                           \
        float r;                                                                                    \
        dotz_##name##_n(n, vw, va, 0, 1, &r);                                                       \
        return r;                                                                                   \
    }

static inline __m512i dotz_w_q4_1(const block_q4_1 *x0, const block_q4_1 *x1) {
    return dotz_nibbles2(x0->qs, x1->qs);
}
static inline __m512i dotz_w_q5_1(const block_q5_1 *x0, const block_q5_1 *x1) {
    uint32_t h0, h1;
    memcpy(&h0, x0->qh, 4);
    memcpy(&h1, x1->qh, 4);
    __m512i nib = dotz_nibbles2(x0->qs, x1->qs);
    return _mm512_mask_add_epi8(nib, _cvtu64_mask64((uint64_t)h0 | ((uint64_t)h1 << 32)), nib, _mm512_set1_epi8(16));
}
DOTZ_LEGACY_MIN(q4_1, block_q4_1, dotz_w_q4_1, dot_isum1_q4_1)
DOTZ_LEGACY_MIN(q5_1, block_q5_1, dotz_w_q5_1, dot_isum1_q5_1)

DOTZ_LEGACY_SYM(q4_0, block_q4_0, dotz_w_q4_0, DOT_F16X8(x8, d), dot_isum1_q4_0, dot_f16(x->d))
DOTZ_LEGACY_SYM(q5_0, block_q5_0, dotz_w_q5_0, DOT_F16X8(x8, d), dot_isum1_q5_0, dot_f16(x->d))
DOTZ_LEGACY_SYM(q8_0, block_q8_0, dotz_w_q8_0, DOT_F16X8(x8, d), dot_isum1_q8_0, dot_f16(x->d))
DOTZ_LEGACY_SYM(iq4_nl, block_iq4_nl, dotz_w_iq4_nl, DOT_F16X8(x8, d), dot_isum1_iq4_nl, dot_f16(x->d))
DOTZ_LEGACY_SYM(mxfp4, block_mxfp4, dotz_w_mxfp4, dot_mxfp4_d8(x8), dot_isum1_mxfp4, dot_e8m0_half(x->e))


static inline __attribute__((always_inline)) void dotz_q2_K_n(int64_t n, const void *vw, const void *va,
                                                               size_t a_stride, const int n_act, float *out) {
    const block_q2_K *w = vw;
    const __m512i m2 = _mm512_set1_epi8(3);
    float acc[DOT_MULTI_MAX] = {0};
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q2_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        __m128i raw = _mm_loadu_si128((const __m128i *)x->scales);
        __m512i scz = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(15))));
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
        uint32_t dd_bits;
        memcpy(&dd_bits, &x->d, 4); /* d, dmin adjacent */
        const __m128 ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd_bits)); /* [d, dmin, 0, 0] */
        __m512i wz[4], sz[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(qs), _mm256_srli_epi16(qs, 2), 1);
            /* wz[k] = [g0 | g1] / [g2 | g3] of half h = activations 64k..64k+63 */
            wz[2 * h] = _mm512_and_si512(z, m2);
            wz[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m2);
            sz[2 * h] = _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h]), scz);
            sz[2 * h + 1] = _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h + 1]), scz);
        }
#pragma GCC unroll 4
        for (int i = 0; i < n_act; i++) {
            const block_q8_K *ai = (const block_q8_K *)((const uint8_t *)va + (size_t)i * a_stride) + s;
            __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ai->bsums), mn16);
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k += 2) {
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wz[k], _mm512_loadu_si512(ai->qs + 64 * k)), sz[k]);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wz[k + 1], _mm512_loadu_si512(ai->qs + 64 * k + 64)), sz[k + 1]);
            }
            /* both horizontal sums at once: [I M I M] */
            __m512i iz = _mm512_add_epi32(acc0, acc1);
            __m256i h = _mm256_hadd_epi32(_mm256_add_epi32(_mm512_castsi512_si256(iz), _mm512_extracti64x4_epi64(iz, 1)), macc);
            __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            acc[i] = acc[i] + dot_term_kmin_v(ai->d, ddm, _mm_hadd_epi32(q, q));
        }
    }
    for (int i = 0; i < n_act; i++) out[i] = acc[i];
}
static float dotz_q2_K(int64_t n, const void *vw, const void *va) {
    float r;
    dotz_q2_K_n(n, vw, va, 0, 1, &r);
    return r;
}

static inline __attribute__((always_inline)) void dotz_q3_K_n(int64_t n, const void *vw, const void *va,
                                                               size_t a_stride, const int n_act, float *out) {
    const block_q3_K *w = vw;
    const __m512i m2 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    float acc[DOT_MULTI_MAX] = {0};
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q3_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(dot_unpack_q3k_scales(x->scales), _mm_set1_epi8(32)));
        __m512i scz = _mm512_castsi256_si512(sc16);
        /* q = q_u - 4 with q_u = lo + 4*hbit in 0..7: the -4 is sum_b sc_b * (-4) * bsums_b */
        __m256i scm4 = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), sc16), 2);
        const float d = dot_f16(x->d);
        __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        __m512i hmz = _mm512_inserti64x4(_mm512_castsi256_si512(hm), hm, 1);
        __m512i wz[4], sz[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(qs), _mm256_srli_epi16(qs, 2), 1);
#pragma GCC unroll 2
            for (int j = 0; j < 2; j++) {
                /* wz[2h+j] = groups g = 2j, 2j+1 of half h = activations 128h + 64j .. +63; high bit 4h+g of hmask[l] */
                __m512i lo = _mm512_and_si512(j ? _mm512_srli_epi16(z, 4) : z, m2);
                const int g = 2 * j;
                const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (4 * h + g))),
                                                       _mm256_set1_epi8((char)(1 << (4 * h + g + 1))), 1);
                wz[2 * h + j] = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hmz, bit), lo, four);
                sz[2 * h + j] = _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h + j]), scz);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < n_act; i++) {
            const block_q8_K *ai = (const block_q8_K *)((const uint8_t *)va + (size_t)i * a_stride) + s;
            __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ai->bsums), scm4);
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k += 2) {
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wz[k], _mm512_loadu_si512(ai->qs + 64 * k)), sz[k]);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wz[k + 1], _mm512_loadu_si512(ai->qs + 64 * k + 64)), sz[k + 1]);
            }
            int32_t isum = dotz_hsum(_mm512_add_epi32(acc0, acc1)) + dot_hsum_i32(off);
            acc[i] = acc[i] + dot_term_k(ai->d, d, isum);
        }
    }
    for (int i = 0; i < n_act; i++) out[i] = acc[i];
}
static float dotz_q3_K(int64_t n, const void *vw, const void *va) {
    float r;
    dotz_q3_K_n(n, vw, va, 0, 1, &r);
    return r;
}

static inline __attribute__((always_inline)) void dotz_iq4_xs_n(int64_t n, const void *vw, const void *va,
                                                                 size_t a_stride, const int n_act, float *out) {
    const block_iq4_xs *w = vw;
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    float acc[DOT_MULTI_MAX] = {0};
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_iq4_xs *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        uint32_t sl;
        memcpy(&sl, x->scales_l, 4);
        /* byte b = 6-bit scale of sub-block b: low nibble from scales_l, bits 4-5 from scales_h */
        uint64_t ls = _pdep_u64(sl, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(x->scales_h, 0x3030303030303030ull);
        __m128i ls16 = _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)ls)), _mm_set1_epi16(32));
        __m512i sc = _mm512_broadcast_i32x4(ls16);
        const float d = dot_f16(x->d);
        __m512i wabs[4], sz[4];
        __mmask64 wneg[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            /* sub-blocks 2k, 2k+1: [elements 0..31 of 2k | elements 0..31 of 2k+1] = activations 64k..64k+63 */
            __m512i v = _mm512_shuffle_epi8(tab, dotz_nibbles2(x->qs + 32 * k, x->qs + 32 * k + 16));
            wabs[k] = _mm512_abs_epi8(v);
            wneg[k] = _mm512_movepi8_mask(v);
            sz[k] = _mm512_shuffle_epi8(sc, _mm512_load_si512(k_dotz_pair16[k]));
        }
#pragma GCC unroll 4
        for (int i = 0; i < n_act; i++) {
            const block_q8_K *ai = (const block_q8_K *)((const uint8_t *)va + (size_t)i * a_stride) + s;
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k += 2) {
                __m512i a0 = _mm512_loadu_si512(ai->qs + 64 * k), a1 = _mm512_loadu_si512(ai->qs + 64 * k + 64);
                a0 = _mm512_mask_sub_epi8(a0, wneg[k], _mm512_setzero_si512(), a0);
                a1 = _mm512_mask_sub_epi8(a1, wneg[k + 1], _mm512_setzero_si512(), a1);
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(wabs[k], a0), sz[k]);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(wabs[k + 1], a1), sz[k + 1]);
            }
            acc[i] = acc[i] + dot_term_k(ai->d, d, dotz_hsum(_mm512_add_epi32(acc0, acc1)));
        }
    }
    for (int i = 0; i < n_act; i++) out[i] = acc[i];
}
static float dotz_iq4_xs(int64_t n, const void *vw, const void *va) {
    float r;
    dotz_iq4_xs_n(n, vw, va, 0, 1, &r);
    return r;
}

/* ---- activation quantizers, bit-identical to act_quant.c's scalar reference ---- */
/* C roundf (half away from zero), exactly: round to nearest even, then move the exact .5 ties away from 0. */
static inline __m512 dotz_roundf(__m512 p) {
    __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_roundscale_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 tie = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(p, t)), _mm512_set1_ps(0.5f), _CMP_EQ_OQ);
    __m512 away = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(p, _mm512_set1_ps(-0.0f))); /* +-1 with p's sign */
    return _mm512_mask_add_ps(r, tie, t, away);
}

static inline void dotz_quantize_q8_32(const float *x, int8_t *qs, float *d_out, int32_t *sum) {
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    __m512i q0 = _mm512_cvtps_epi32(dotz_roundf(_mm512_mul_ps(v0, _mm512_set1_ps(id))));
    __m512i q1 = _mm512_cvtps_epi32(dotz_roundf(_mm512_mul_ps(v1, _mm512_set1_ps(id))));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtsepi32_epi8(q1));
    *d_out = d;
    if (sum) *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

static void dotz_quantize_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        float d;
        dotz_quantize_q8_32(x, y[b].qs, &d, NULL);
        y[b].d = fp32_to_fp16(d);
    }
}

static void dotz_quantize_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        float d;
        int32_t sum;
        dotz_quantize_q8_32(x, y[b].qs, &d, &sum);
        y[b].d = fp32_to_fp16(d);
        y[b].s = fp32_to_fp16((float)sum * d);
    }
}

static void dotz_quantize_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        __m512 m = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)));
        const float amax = _mm512_reduce_max_ps(m);
        if (!(amax > 0.0f)) { /* all zero (the reference: d = 0, zero quants; bsums zeroed) */
            memset(&y[b], 0, sizeof(y[b]));
            continue;
        }
        /* the reference keeps the FIRST element whose magnitude is the maximum */
        float max = 0.0f;
        for (int k = 0; k < 16; k++) {
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = x[16 * k + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) {
            __m512 p = _mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * k));
            __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_roundscale_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                                         _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[b].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
            y[b].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[b].d = 1.0f / iscale;
    }
}

quantize_row_fn dot_avx512_get_quantizer(uint32_t act_type) {
    switch (act_type) {
    case GGML_TYPE_Q8_0: return dotz_quantize_q8_0;
    case GGML_TYPE_Q8_1: return dotz_quantize_q8_1;
    case GGML_TYPE_Q8_K: return dotz_quantize_q8_K;
    default: return NULL;
    }
}

#define DOTZ_MULTI(name)                                                                                  \
    static void dotz_##name##_multi(int64_t n, const void *w, const void *a, size_t a_stride, int n_act, float *out) { \
        switch (n_act) {                                                                                  \
        case 1: dotz_##name##_n(n, w, a, a_stride, 1, out); break;                                        \
        case 2: dotz_##name##_n(n, w, a, a_stride, 2, out); break;                                        \
        case 3: dotz_##name##_n(n, w, a, a_stride, 3, out); break;                                        \
        case 4: dotz_##name##_n(n, w, a, a_stride, 4, out); break;                                        \
        case 5: dotz_##name##_n(n, w, a, a_stride, 5, out); break;                                        \
        case 6: dotz_##name##_n(n, w, a, a_stride, 6, out); break;                                        \
        case 7: dotz_##name##_n(n, w, a, a_stride, 7, out); break;                                        \
        default: dotz_##name##_n(n, w, a, a_stride, 8, out); break;                                       \
        }                                                                                                 \
    }
DOTZ_MULTI(q4_K)
DOTZ_MULTI(q6_K)
DOTZ_MULTI(q5_K)
DOTZ_MULTI(q2_K)
DOTZ_MULTI(q3_K)
DOTZ_MULTI(iq4_xs)
DOTZ_MULTI(q4_0)
DOTZ_MULTI(q5_0)
DOTZ_MULTI(q8_0)
DOTZ_MULTI(iq4_nl)
DOTZ_MULTI(mxfp4)
DOTZ_MULTI(q4_1)
DOTZ_MULTI(q5_1)

vec_dot_multi_fn dot_avx512_get_multi(uint32_t wtype) {
    switch (wtype) {
    case GGML_TYPE_Q4_K: return dotz_q4_K_multi;
    case GGML_TYPE_Q6_K: return dotz_q6_K_multi;
    case GGML_TYPE_Q5_K: return dotz_q5_K_multi;
    case GGML_TYPE_Q2_K: return dotz_q2_K_multi;
    case GGML_TYPE_Q3_K: return dotz_q3_K_multi;
    case GGML_TYPE_IQ4_XS: return dotz_iq4_xs_multi;
    case GGML_TYPE_Q4_0: return dotz_q4_0_multi;
    case GGML_TYPE_Q5_0: return dotz_q5_0_multi;
    case GGML_TYPE_Q8_0: return dotz_q8_0_multi;
    case GGML_TYPE_IQ4_NL: return dotz_iq4_nl_multi;
    case GGML_TYPE_MXFP4: return dotz_mxfp4_multi;
    case GGML_TYPE_Q4_1: return dotz_q4_1_multi;
    case GGML_TYPE_Q5_1: return dotz_q5_1_multi;
    default: return NULL;
    }
}

vec_dot_fn dot_avx512_get(uint32_t wtype) {
    switch (wtype) {
    case GGML_TYPE_Q4_K: return dotz_q4_K;
    case GGML_TYPE_Q6_K: return dotz_q6_K;
    case GGML_TYPE_Q5_K: return dotz_q5_K;
    case GGML_TYPE_Q2_K: return dotz_q2_K;
    case GGML_TYPE_Q3_K: return dotz_q3_K;
    case GGML_TYPE_IQ4_XS: return dotz_iq4_xs;
    case GGML_TYPE_Q4_0: return dotz_q4_0;
    case GGML_TYPE_Q5_0: return dotz_q5_0;
    case GGML_TYPE_Q8_0: return dotz_q8_0;
    case GGML_TYPE_IQ4_NL: return dotz_iq4_nl;
    case GGML_TYPE_MXFP4: return dotz_mxfp4;
    case GGML_TYPE_Q4_1: return dotz_q4_1;
    case GGML_TYPE_Q5_1: return dotz_q5_1;
    default: return dot_avx512_table(wtype);
    }
}
