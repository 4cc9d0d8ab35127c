/* 256-bit x86 dot-product kernels, written once and compiled twice: by dot_avx2.c (AVX2 + FMA +
 * F16C; u8*s8 sums via maddubs/madd) and by dot_avx512.c (AVX-512VL VNNI; vpdpbusd / vpdpwssd).
 * The includer defines DOT_NAME(x) and, for VNNI, DOT_X86_VNNI. Every kernel follows the fixed
 * fp32 order of dot_impl.h, lane for lane, so the results are bit-identical to dot_ref.c.
 * Requirements the integer tricks rely on: activation int8 values in [-127, 127] (our
 * quantizers), so |u8 * s8| pair sums fit int16 in maddubs (max 2 * 128 * 127). */
#ifndef DOT_NAME
#error "define DOT_NAME before including dot_x86.h"
#endif

#include <immintrin.h>
#include "dot_impl.h"

/* acc + sum over each 4 bytes of u8 * s8, per int32 lane */
static inline __m256i dot_us8(__m256i acc, __m256i u, __m256i s) {
#ifdef DOT_X86_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
/* acc + pairwise int16 products, per int32 lane */
static inline __m256i dot_madd16(__m256i acc, __m256i a, __m256i b) {
#ifdef DOT_X86_VNNI
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}
/* signed x signed bytes: |w| * (a with w's sign) */
static inline __m256i dot_ss8(__m256i acc, __m256i w, __m256i a) {
    return dot_us8(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}
/* F16C conversion: exact, identical to fp16_to_fp32 for every non-NaN half (a NaN stays NaN). */
static inline float dot_f16(ggml_half h) {
    return _cvtsh_ss(h);
}
/* dot_term_kmin(da, d, dmin, I, M) with ddm = [d, dmin, ..] and q = [I, M, ..]: the same fp32 operations,
 * two lanes at a time: [da*d, da*dmin] * [I, M], then x - y. */
static inline float dot_term_kmin_v(float da, __m128 ddm, __m128i q) {
    __m128 v = _mm_mul_ps(_mm_set1_ps(da), ddm);
    __m128 xy = _mm_mul_ps(v, _mm_cvtepi32_ps(q));
    return _mm_cvtss_f32(_mm_sub_ss(xy, _mm_movehdup_ps(xy)));
}
/* [d, dmin, 0, 0] from two adjacent f16 fields */
static inline __m128 dot_f16x2(const ggml_half *p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)bits));
}
/* [I, M, I, M] from the int32 lanes of the I and M accumulators */
static inline __m128i dot_hsum_pair(__m256i iacc, __m256i macc) {
    __m256i h = _mm256_hadd_epi32(iacc, macc);
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm_hadd_epi32(q, q);
}
static inline int32_t dot_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
/* Lane j of the result = sum of the 8 lanes of v[j]. */
static inline __m256i dot_hsum8x8_i32(const __m256i *v) {
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                            _mm256_permute2x128_si256(h0123, h4567, 0x31));
}
/* 16 nibbles -> 32 bytes in element order (low nibbles = elements 0..15, high = 16..31) */
static inline __m256i dot_nibbles32(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}
/* bit j of the 32-bit LE word at p -> 0x10 in byte j, else 0 */
static inline __m256i dot_bits_to_0x10(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}
static inline __m256 dot_load8_f16(ggml_half h0, ggml_half h1, ggml_half h2, ggml_half h3, ggml_half h4,
                                   ggml_half h5, ggml_half h6, ggml_half h7) {
    return _mm256_cvtph_ps(_mm_set_epi16((short)h7, (short)h6, (short)h5, (short)h4, (short)h3, (short)h2,
                                         (short)h1, (short)h0));
}
#define DOT_F16X8(arr, field) \
    dot_load8_f16(arr[0].field, arr[1].field, arr[2].field, arr[3].field, arr[4].field, arr[5].field, arr[6].field, arr[7].field)

/* ---- 32-element blocks: 8 blocks per step, block b in lane b % 8 ---- */
/* WEIGHTS(x, ...) yields the block's 32 weights as bytes; SIGNED selects dot_ss8 vs dot_us8. */
#define DOT_LEGACY_SYM(name, wblock, weights_expr, dw8_expr, isum_fn, dw1_expr)               \
    static float DOT_NAME(name)(int64_t n, const void *vw, const void *va) {                  \
        const wblock *w = vw;                                                                 \
        const block_q8_0 *a = va;                                                             \
        const int64_t nb = n / 32;                                                            \
        __m256 acc = _mm256_setzero_ps();                                                     \
        int64_t b = 0;                                                                        \
        for (; b + 8 <= nb; b += 8) {                                                         \
            const wblock *x8 = w + b;                                                         \
            DOT_PREFETCH(x8, 8 * sizeof(wblock));                                             \
            const block_q8_0 *a8 = a + b;                                                     \
            __m256i s[8];                                                                     \
            _Pragma("GCC unroll 8")                                                           \
            for (int k = 0; k < 8; k++) {                                                     \
                const wblock *x = &x8[k];                                                     \
                __m256i wq = weights_expr;                                                    \
                __m256i av = _mm256_loadu_si256((const __m256i *)a8[k].qs);                   \
                s[k] = dot_ss8(_mm256_setzero_si256(), wq, av);                               \
            }                                                                                 \
            __m256 sf = _mm256_cvtepi32_ps(dot_hsum8x8_i32(s));                               \
            __m256 dd = _mm256_mul_ps(dw8_expr, DOT_F16X8(a8, d));                            \
            acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, sf));                                  \
        }                                                                                     \
        float p[8];                                                                           \
        _mm256_storeu_ps(p, acc);                                                             \
        for (; b < nb; b++) {                                                                 \
            const wblock *x = &w[b];                                                          \
            float t = dot_term_sym(dw1_expr, dot_f16(a[b].d), isum_fn(x, a[b].qs));      \
            p[b % 8] = p[b % 8] + t;                                                          \
        }                                                                                     \
        return dot_reduce8(p);                                                                \
    }

static inline __m256i dot_w_q4_0(const block_q4_0 *x) {
    return _mm256_sub_epi8(dot_nibbles32(x->qs), _mm256_set1_epi8(8));
}
#ifdef DOT_X86_VNNI
/* AVX-512BW/VL: the 32 fifth bits straight into a mask register. */
static inline __mmask32 dot_qh_mask(const uint8_t *qh) {
    uint32_t x;
    memcpy(&x, qh, 4);
    return _cvtu32_mask32(x);
}
static inline __m256i dot_w_q5_0(const block_q5_0 *x) { /* bit set: q = nib, else nib - 16 */
    __m256i nib = dot_nibbles32(x->qs);
    return _mm256_mask_sub_epi8(nib, _knot_mask32(dot_qh_mask(x->qh)), nib, _mm256_set1_epi8(16));
}
static inline __m256i dot_w_q5_1(const block_q5_1 *x) {
    __m256i nib = dot_nibbles32(x->qs);
    return _mm256_mask_add_epi8(nib, dot_qh_mask(x->qh), nib, _mm256_set1_epi8(16)); /* bit set: nib + 16 */
}
#else
static inline __m256i dot_w_q5_0(const block_q5_0 *x) {
    return _mm256_sub_epi8(_mm256_or_si256(dot_nibbles32(x->qs), dot_bits_to_0x10(x->qh)), _mm256_set1_epi8(16));
}
static inline __m256i dot_w_q5_1(const block_q5_1 *x) {
    return _mm256_or_si256(dot_nibbles32(x->qs), dot_bits_to_0x10(x->qh));
}
#endif
static inline __m256i dot_w_q8_0(const block_q8_0 *x) {
    return _mm256_loadu_si256((const __m256i *)x->qs);
}
static inline __m256i dot_w_iq4_nl(const block_iq4_nl *x) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    return _mm256_shuffle_epi8(tab, dot_nibbles32(x->qs));
}
static inline __m256i dot_w_mxfp4(const block_mxfp4 *x) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_mxfp4));
    return _mm256_shuffle_epi8(tab, dot_nibbles32(x->qs));
}
static inline __m256 dot_mxfp4_d8(const block_mxfp4 *x) {
    return _mm256_set_ps(dot_e8m0_half(x[7].e), dot_e8m0_half(x[6].e), dot_e8m0_half(x[5].e), dot_e8m0_half(x[4].e),
                         dot_e8m0_half(x[3].e), dot_e8m0_half(x[2].e), dot_e8m0_half(x[1].e), dot_e8m0_half(x[0].e));
}

/* One (tail) block's exact integer sum with 256-bit ops; its fp32 term is the scalar dot_term_*. */
#define DOT_ISUM1_SYM(name, wblock, wfn)                                                           \
    static inline int32_t dot_isum1_##name(const wblock *x, const int8_t *a) {                     \
        return dot_hsum_i32(dot_ss8(_mm256_setzero_si256(), wfn(x), _mm256_loadu_si256((const __m256i *)a))); \
    }
#define DOT_ISUM1_MIN(name, wblock, wfn)                                                           \
    static inline int32_t dot_isum1_##name(const wblock *x, const int8_t *a) {                     \
        return dot_hsum_i32(dot_us8(_mm256_setzero_si256(), wfn(x), _mm256_loadu_si256((const __m256i *)a))); \
    }
static inline __m256i dot_w_q4_1(const block_q4_1 *x) { return dot_nibbles32(x->qs); }
DOT_ISUM1_SYM(q4_0, block_q4_0, dot_w_q4_0)
DOT_ISUM1_SYM(q5_0, block_q5_0, dot_w_q5_0)
DOT_ISUM1_SYM(q8_0, block_q8_0, dot_w_q8_0)
DOT_ISUM1_SYM(iq4_nl, block_iq4_nl, dot_w_iq4_nl)
DOT_ISUM1_SYM(mxfp4, block_mxfp4, dot_w_mxfp4)
DOT_ISUM1_MIN(q4_1, block_q4_1, dot_w_q4_1)
DOT_ISUM1_MIN(q5_1, block_q5_1, dot_w_q5_1)

DOT_LEGACY_SYM(q4_0, block_q4_0, dot_w_q4_0(x), DOT_F16X8(x8, d), dot_isum1_q4_0, dot_f16(x->d))
DOT_LEGACY_SYM(q5_0, block_q5_0, dot_w_q5_0(x), DOT_F16X8(x8, d), dot_isum1_q5_0, dot_f16(x->d))
DOT_LEGACY_SYM(q8_0, block_q8_0, dot_w_q8_0(x), DOT_F16X8(x8, d), dot_isum1_q8_0, dot_f16(x->d))
DOT_LEGACY_SYM(iq4_nl, block_iq4_nl, dot_w_iq4_nl(x), DOT_F16X8(x8, d), dot_isum1_iq4_nl, dot_f16(x->d))
DOT_LEGACY_SYM(mxfp4, block_mxfp4, dot_w_mxfp4(x), dot_mxfp4_d8(x8), dot_isum1_mxfp4, dot_e8m0_half(x->e))

#define DOT_LEGACY_MIN(name, wblock, weights_expr, isum_fn)                                   \
    static float DOT_NAME(name)(int64_t n, const void *vw, const void *va) {                  \
        const wblock *w = vw;                                                                 \
        const block_q8_1 *a = va;                                                             \
        const int64_t nb = n / 32;                                                            \
        __m256 acc = _mm256_setzero_ps();                                                     \
        int64_t b = 0;                                                                        \
        for (; b + 8 <= nb; b += 8) {                                                         \
            const wblock *x8 = w + b;                                                         \
            DOT_PREFETCH(x8, 8 * sizeof(wblock));                                             \
            const block_q8_1 *a8 = a + b;                                                     \
            __m256i s[8];                                                                     \
            _Pragma("GCC unroll 8")                                                           \
            for (int k = 0; k < 8; k++) {                                                     \
                const wblock *x = &x8[k];                                                     \
                __m256i wq = weights_expr;                                                    \
                __m256i av = _mm256_loadu_si256((const __m256i *)a8[k].qs);                   \
                s[k] = dot_us8(_mm256_setzero_si256(), wq, av);                               \
            }                                                                                 \
            __m256 sf = _mm256_cvtepi32_ps(dot_hsum8x8_i32(s));                               \
            __m256 dd = _mm256_mul_ps(DOT_F16X8(x8, d), DOT_F16X8(a8, d));                    \
            __m256 xs = _mm256_mul_ps(dd, sf);                                                \
            __m256 ys = _mm256_mul_ps(DOT_F16X8(x8, m), DOT_F16X8(a8, s));                    \
            acc = _mm256_add_ps(acc, _mm256_add_ps(xs, ys));                                  \
        }                                                                                     \
        float p[8];                                                                           \
        _mm256_storeu_ps(p, acc);                                                             \
        for (; b < nb; b++) {                                                                 \
            float t = dot_term_min(dot_f16(w[b].d), dot_f16(a[b].d), isum_fn(&w[b], a[b].qs), \
                                   dot_f16(w[b].m), dot_f16(a[b].s));               \
            p[b % 8] = p[b % 8] + t;                                                          \
        }                                                                                     \
        return dot_reduce8(p);                                                                \
    }

DOT_LEGACY_MIN(q4_1, block_q4_1, dot_nibbles32(x->qs), dot_isum1_q4_1)
DOT_LEGACY_MIN(q5_1, block_q5_1, dot_w_q5_1(x), dot_isum1_q5_1)

/* ---- K-quants: per super-block int32 lanes -> one I (and M), then acc = acc + term ---- */

/* pshufb masks: k_dot_bcast16[j] broadcasts int16 lane j (of each 128-bit half) to every lane;
 * k_dot_pair16[j] puts lane j in the low 128-bit half and lane j+1 in the high half. */
#define DOT_B16(j) (2 * (j)), (2 * (j) + 1)
#define DOT_B16X8(j) DOT_B16(j), DOT_B16(j), DOT_B16(j), DOT_B16(j), DOT_B16(j), DOT_B16(j), DOT_B16(j), DOT_B16(j)
static const uint8_t k_dot_bcast16[8][32] __attribute__((aligned(32))) = {
    {DOT_B16X8(0), DOT_B16X8(0)}, {DOT_B16X8(1), DOT_B16X8(1)}, {DOT_B16X8(2), DOT_B16X8(2)}, {DOT_B16X8(3), DOT_B16X8(3)},
    {DOT_B16X8(4), DOT_B16X8(4)}, {DOT_B16X8(5), DOT_B16X8(5)}, {DOT_B16X8(6), DOT_B16X8(6)}, {DOT_B16X8(7), DOT_B16X8(7)},
};
static const uint8_t k_dot_pair16[7][32] __attribute__((aligned(32))) = {
    {DOT_B16X8(0), DOT_B16X8(1)}, {DOT_B16X8(1), DOT_B16X8(2)}, {DOT_B16X8(2), DOT_B16X8(3)}, {DOT_B16X8(3), DOT_B16X8(4)},
    {DOT_B16X8(4), DOT_B16X8(5)}, {DOT_B16X8(5), DOT_B16X8(6)}, {DOT_B16X8(6), DOT_B16X8(7)},
};
/* Broadcast int16 lane j of a 128-bit vector (replicated in both halves of v2) to all 16 lanes. */
static inline __m256i dot_bcast16(__m256i v2, int j) {
    return _mm256_shuffle_epi8(v2, _mm256_load_si256((const __m256i *)k_dot_bcast16[j]));
}
/* int16 lanes: low half = lane j, high half = lane j+1, of the 8 int16 of v2 (both 128-bit halves equal). */
static inline __m256i dot_pair16(__m256i v2, int j) {
    return _mm256_shuffle_epi8(v2, _mm256_load_si256((const __m256i *)k_dot_pair16[j]));
}

/* Q4_K / Q5_K scale bytes: out[0..7] = sc_0..7, out[8..15] = m_0..7. In 32-bit words, with u0..u2 the
 * 12 packed bytes: r0 = u0 & 0x3f.., r1 = (u2 & 0x0f..) | ((u0 >> 6) & 0x03..) << 4, r2 = u1 & 0x3f..,
 * r3 = ((u2 >> 4) & 0x0f..) | ((u1 >> 6) & 0x03..) << 4. Reads 16 bytes at s (the block continues). */
static inline __m128i dot_unpack_k4_scales(const uint8_t *s) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* u0 u2 u1 u2 */
    __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* u0 u0 u1 u1 */
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_set_epi32(4, 0, 0, 0)),
                               _mm_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
    __m128i hi = _mm_and_si128(_mm_srlv_epi32(b, _mm_set_epi32(6, 0, 6, 0)), _mm_set_epi32(0x03030303, 0, 0x03030303, 0));
    return _mm_or_si128(lo, _mm_slli_epi32(hi, 4));
}

static float DOT_NAME(q4_K)(int64_t n, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(15);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q4_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        const int8_t *q8 = a[s].qs;
        __m128i scm = dot_unpack_k4_scales(x->scales);
        __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        /* int16 [m0 m0 m1 m1 .. m7 m7], against bsums [b0 .. b15] */
        __m256i mdup = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
        __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums), mdup);
        __m256i iacc = _mm256_setzero_si256(), iacc1 = _mm256_setzero_si256(); /* two chains */
        #pragma GCC unroll 8
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
            __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
            iacc = dot_madd16(iacc, plo, dot_bcast16(sc, 2 * c));
            iacc1 = dot_madd16(iacc1, phi, dot_bcast16(sc, 2 * c + 1));
        }
        acc = acc + dot_term_kmin_v(a[s].d, dot_f16x2(&x->d), dot_hsum_pair(_mm256_add_epi32(iacc, iacc1), macc));
    }
    return acc;
}

static float DOT_NAME(q5_K)(int64_t n, const void *vw, const void *va) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q5_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        const int8_t *q8 = a[s].qs;
        __m128i scm = dot_unpack_k4_scales(x->scales);
        __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        /* int16 [m0 m0 m1 m1 .. m7 m7], against bsums [b0 .. b15] */
        __m256i mdup = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
        __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums), mdup);
        __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
        __m256i iacc = _mm256_setzero_si256(), iacc1 = _mm256_setzero_si256(); /* two chains */
        #pragma GCC unroll 8
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
            __m256i hlo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4);
            __m256i hhi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), hlo);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hhi);
            __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
            __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
            iacc = dot_madd16(iacc, plo, dot_bcast16(sc, 2 * c));
            iacc1 = dot_madd16(iacc1, phi, dot_bcast16(sc, 2 * c + 1));
        }
        acc = acc + dot_term_kmin_v(a[s].d, dot_f16x2(&x->d), dot_hsum_pair(_mm256_add_epi32(iacc, iacc1), macc));
    }
    return acc;
}

static float DOT_NAME(q6_K)(int64_t n, const void *vw, const void *va) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q6_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        const int8_t *q8 = a[s].qs;
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
        /* the -32 offset: sum_b sc_b * (-32) * bsums_b */
        __m256i iacc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums),
                                         _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_cvtepi8_epi16(sc8)), 5));
        __m256i iacc1 = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            const int8_t *a0 = q8 + 128 * h;
            iacc = dot_madd16(iacc, _mm256_maddubs_epi16(q0, _mm256_loadu_si256((const __m256i *)(a0))), dot_pair16(sc, 0));
            iacc1 = dot_madd16(iacc1, _mm256_maddubs_epi16(q1, _mm256_loadu_si256((const __m256i *)(a0 + 32))), dot_pair16(sc, 2));
            iacc = dot_madd16(iacc, _mm256_maddubs_epi16(q2, _mm256_loadu_si256((const __m256i *)(a0 + 64))), dot_pair16(sc, 4));
            iacc1 = dot_madd16(iacc1, _mm256_maddubs_epi16(q3, _mm256_loadu_si256((const __m256i *)(a0 + 96))), dot_pair16(sc, 6));
        }
        acc = acc + dot_term_k(a[s].d, dot_f16(x->d), dot_hsum_i32(_mm256_add_epi32(iacc, iacc1)));
    }
    return acc;
}

/* Q3_K scale bytes (biased, 0..63): out[j] = s_j for j = 0..15 */
static inline __m128i dot_unpack_q3k_scales(const uint8_t *s) {
    uint32_t u[3], r[4];
    memcpy(u, s, 12);
    r[0] = (u[0] & 0x0f0f0f0fu) | ((u[2] & 0x03030303u) << 4);
    r[1] = (u[1] & 0x0f0f0f0fu) | (((u[2] >> 2) & 0x03030303u) << 4);
    r[2] = ((u[0] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 4) & 0x03030303u) << 4);
    r[3] = ((u[1] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 6) & 0x03030303u) << 4);
    return _mm_set_epi32((int)r[3], (int)r[2], (int)r[1], (int)r[0]);
}

static float DOT_NAME(q3_K)(int64_t n, const void *vw, const void *va) {
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q3_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        const int8_t *q8 = a[s].qs;
        __m128i sc8 = _mm_sub_epi8(dot_unpack_q3k_scales(x->scales), _mm_set1_epi8(32));
        /* q = q_u - 4 with q_u = lo + 4*hbit in 0..7: the -4 is sum_b sc_b * (-4) * bsums_b */
        __m256i iacc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums),
                                         _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_cvtepi8_epi16(sc8)), 2));
        __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            #pragma GCC unroll 8
            for (int g = 0; g < 4; g++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * g), m2);
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), one);
                __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(q8 + 128 * h + 32 * g)));
                iacc = dot_madd16(iacc, p, dot_pair16(sc, 2 * g));
            }
        }
        acc = acc + dot_term_k(a[s].d, dot_f16(x->d), dot_hsum_i32(iacc));
    }
    return acc;
}

static float DOT_NAME(q2_K)(int64_t n, const void *vw, const void *va) {
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m2 = _mm256_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q2_K *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        const int8_t *q8 = a[s].qs;
        __m128i raw = _mm_loadu_si128((const __m128i *)x->scales);
        __m128i sc8 = _mm_and_si128(raw, _mm_set1_epi8(15));
        __m128i mn8 = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15));
        __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums), _mm256_cvtepu8_epi16(mn8));
        __m256i iacc = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            #pragma GCC unroll 8
            for (int g = 0; g < 4; g++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * g), m2);
                __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(q8 + 128 * h + 32 * g)));
                iacc = dot_madd16(iacc, p, dot_pair16(sc, 2 * g));
            }
        }
        acc = acc + dot_term_kmin_v(a[s].d, dot_f16x2(&x->d), dot_hsum_pair(iacc, macc));
    }
    return acc;
}

static float DOT_NAME(iq4_xs)(int64_t n, const void *vw, const void *va) {
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_iq4_xs *x = &w[s];
        DOT_PREFETCH(x, sizeof(*x));
        const int8_t *q8 = a[s].qs;
        __m256i iacc = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int k = 0; k < 4; k++) {
            const short s0 = (short)dot_iq4xs_scale(x, 2 * k), s1 = (short)dot_iq4xs_scale(x, 2 * k + 1);
            __m256i sv = _mm256_set_epi16(s1, s1, s1, s1, s1, s1, s1, s1, s0, s0, s0, s0, s0, s0, s0, s0);
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * k));
            __m256i vlo = _mm256_shuffle_epi8(tab, _mm256_and_si256(q, m4));
            __m256i vhi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            const int8_t *a0 = q8 + 64 * k;
            __m256i alo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a0)),
                                                  _mm_loadu_si128((const __m128i *)(a0 + 32)), 1);
            __m256i ahi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a0 + 16))),
                                                  _mm_loadu_si128((const __m128i *)(a0 + 48)), 1);
            __m256i plo = _mm256_maddubs_epi16(_mm256_sign_epi8(vlo, vlo), _mm256_sign_epi8(alo, vlo));
            __m256i phi = _mm256_maddubs_epi16(_mm256_sign_epi8(vhi, vhi), _mm256_sign_epi8(ahi, vhi));
            iacc = dot_madd16(iacc, plo, sv);
            iacc = dot_madd16(iacc, phi, sv);
        }
        acc = acc + dot_term_k(a[s].d, dot_f16(x->d), dot_hsum_i32(iacc));
    }
    return acc;
}

/* ---- float weights x F32: 32 lanes in four __m256 (lane k of acc j = p[8j + k]) ---- */
#define DOT_FLOAT(name, wtype_c, load8, conv)                                               \
    static float DOT_NAME(name)(int64_t n, const void *vw, const void *va) {                \
        const wtype_c *w = vw;                                                              \
        const float *a = va;                                                                \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
        int64_t i = 0;                                                                      \
        for (; i + 32 <= n; i += 32) {                                                      \
            DOT_PREFETCH(w + i, 32 * sizeof(wtype_c));                                      \
            _Pragma("GCC unroll 8")                                                         \
            for (int j = 0; j < 4; j++)                                                     \
                acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(load8(w + i + 8 * j), _mm256_loadu_ps(a + i + 8 * j))); \
        }                                                                                   \
        float p[32];                                                                        \
        _Pragma("GCC unroll 8")                                                             \
        for (int j = 0; j < 4; j++) _mm256_storeu_ps(p + 8 * j, acc[j]);                    \
        for (; i < n; i++) {                                                                \
            float prod = conv(w[i]) * a[i];                                                 \
            p[i % 32] = p[i % 32] + prod;                                                   \
        }                                                                                   \
        return dot_reduce32(p);                                                             \
    }
static inline __m256 dot_load8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 dot_load8_f16p(const ggml_half *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 dot_load8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#define DOT_X86_CONV_F32(x) (x)
DOT_FLOAT(f32, float, dot_load8_f32, DOT_X86_CONV_F32)
DOT_FLOAT(f16, ggml_half, dot_load8_f16p, dot_f16)
DOT_FLOAT(bf16, uint16_t, dot_load8_bf16, bf16_to_fp32)

static vec_dot_fn DOT_NAME(table)(uint32_t wtype) {
    switch (wtype) {
    case GGML_TYPE_F32: return DOT_NAME(f32);
    case GGML_TYPE_F16: return DOT_NAME(f16);
    case GGML_TYPE_BF16: return DOT_NAME(bf16);
    case GGML_TYPE_Q4_0: return DOT_NAME(q4_0);
    case GGML_TYPE_Q4_1: return DOT_NAME(q4_1);
    case GGML_TYPE_Q5_0: return DOT_NAME(q5_0);
    case GGML_TYPE_Q5_1: return DOT_NAME(q5_1);
    case GGML_TYPE_Q8_0: return DOT_NAME(q8_0);
    case GGML_TYPE_IQ4_NL: return DOT_NAME(iq4_nl);
    case GGML_TYPE_MXFP4: return DOT_NAME(mxfp4);
    case GGML_TYPE_Q2_K: return DOT_NAME(q2_K);
    case GGML_TYPE_Q3_K: return DOT_NAME(q3_K);
    case GGML_TYPE_Q4_K: return DOT_NAME(q4_K);
    case GGML_TYPE_Q5_K: return DOT_NAME(q5_K);
    case GGML_TYPE_Q6_K: return DOT_NAME(q6_K);
    case GGML_TYPE_IQ4_XS: return DOT_NAME(iq4_xs);
    default: return NULL;
    }
}
