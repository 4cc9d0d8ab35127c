/* AVX-512 (BW/VL/VNNI) dot products: 512-bit kernels for the hot types (Q4_K, Q6_K, Q4_0, Q5_0,
 * Q8_0), and the 256-bit kernels of dot_x86.h with vpdpbusd / vpdpwssd for the rest.
 * Bit-identical to dot_ref.c: integer sums are exact and the fp32 steps follow dot_impl.h. */
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

static float dotz_q4_K(int64_t n, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    const __m512i m4 = _mm512_set1_epi8(15);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q4_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        __m128i scm = dot_unpack_k4_scales(x->scales);
        __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(scm));
        __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(scm, 8));
        __m256i mdup = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(mn, mn)), _mm_unpackhi_epi16(mn, mn), 1);
        __m256i macc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums), mdup);
        __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
        for (int c = 0; c < 4; c += 2) {
            /* chunk c: [low nibbles | high nibbles] = sub-blocks 2c, 2c+1 = activations 64c..64c+63 */
            __m256i q0 = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
            __m256i q1 = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c + 32));
            __m512i w0 = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q0), _mm256_srli_epi16(q0, 4), 1), m4);
            __m512i w1 = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q1), _mm256_srli_epi16(q1, 4), 1), m4);
            __m512i p0 = _mm512_maddubs_epi16(w0, _mm512_loadu_si512(q8 + 64 * c));
            __m512i p1 = _mm512_maddubs_epi16(w1, _mm512_loadu_si512(q8 + 64 * c + 64));
            acc0 = _mm512_dpwssd_epi32(acc0, p0, _mm512_shuffle_epi8(sc, _mm512_load_si512(k_dotz_pair16[c])));
            acc1 = _mm512_dpwssd_epi32(acc1, p1, _mm512_shuffle_epi8(sc, _mm512_load_si512(k_dotz_pair16[c + 1])));
        }
        int32_t isum = dotz_hsum(_mm512_add_epi32(acc0, acc1));
        acc = acc + dot_term_kmin(a[s].d, dot_f16(x->d), dot_f16(x->dmin), isum, dot_hsum_i32(macc));
    }
    return acc;
}

/* vpermw indices: 128-bit lane i of the result = int16 element base + i, broadcast */
#define DOT_Z_IDX4(b) {b, b, b, b, b, b, b, b, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, \
                       b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 2, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3, b + 3}
static const int16_t k_dotz_q6_idx[4][32] __attribute__((aligned(64))) = {
    DOT_Z_IDX4(0), DOT_Z_IDX4(4), DOT_Z_IDX4(8), DOT_Z_IDX4(12),
};

static float dotz_q6_K(int64_t n, const void *vw, const void *va) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t s = 0; s < n / QK_K; s++) {
        const block_q6_K *x = &w[s];
        const int8_t *q8 = a[s].qs;
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
        __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m512i scz = _mm512_castsi256_si512(sc16);
        /* the -32 offset: sum_b sc_b * (-32) * bsums_b */
        __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[s].bsums),
                                        _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), sc16), 5));
        __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            /* [g0 | g1] and [g2 | g3]: activations 128h..128h+63 and 128h+64..128h+127 */
            __m512i z01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qhz, m2), 4));
            __m512i z23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qhz, 4), m2), 4));
            __m512i p01 = _mm512_maddubs_epi16(z01, _mm512_loadu_si512(q8 + 128 * h));
            __m512i p23 = _mm512_maddubs_epi16(z23, _mm512_loadu_si512(q8 + 128 * h + 64));
            acc0 = _mm512_dpwssd_epi32(acc0, p01, _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h]), scz));
            acc1 = _mm512_dpwssd_epi32(acc1, p23, _mm512_permutexvar_epi16(_mm512_load_si512(k_dotz_q6_idx[2 * h + 1]), scz));
        }
        int32_t isum = dotz_hsum(_mm512_add_epi32(acc0, acc1)) + dot_hsum_i32(off);
        acc = acc + dot_term_k(a[s].d, dot_f16(x->d), isum);
    }
    return acc;
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
    static float dotz_##name(int64_t n, const void *vw, const void *va) {                           \
        const wblock *w = vw;                                                                       \
        const block_q8_0 *a = va;                                                                   \
        const int64_t nb = n / 32;                                                                  \
        __m256 acc = _mm256_setzero_ps();                                                           \
        int64_t b = 0;                                                                              \
        for (; b + 8 <= nb; b += 8) {                                                               \
            const wblock *x8 = w + b;                                                               \
            const block_q8_0 *a8 = a + b;                                                           \
            __m512i z[4];                                                                           \
            for (int k = 0; k < 4; k++) {                                                           \
                __m512i wq = wpair_fn(&x8[k], &x8[k + 4]);                                          \
                __m512i av = dotz_cat(_mm256_loadu_si256((const __m256i *)a8[k].qs),                \
                                      _mm256_loadu_si256((const __m256i *)a8[k + 4].qs));           \
                z[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(wq),             \
                                           _mm512_mask_sub_epi8(av, _mm512_movepi8_mask(wq), _mm512_setzero_si512(), av)); \
            }                                                                                       \
            __m256 sf = _mm256_cvtepi32_ps(dotz_hsum8(z));                                          \
            __m256 dd = _mm256_mul_ps(dw8_expr, DOT_F16X8(a8, d));                                  \
            acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, sf));                                        \
        }                                                                                           \
        float p[8];                                                                                 \
        _mm256_storeu_ps(p, acc);                                                                   \
        for (; b < nb; b++) {                                                                       \
            const wblock *x = &w[b];                                                                \
            float t = dot_term_sym(dw1_expr, fp16_to_fp32(a[b].d), isum_fn(x, a[b].qs));            \
            p[b % 8] = p[b % 8] + t;                                                                \
        }                                                                                           \
        return dot_reduce8(p);                                                                      \
    }

DOTZ_LEGACY_SYM(q4_0, block_q4_0, dotz_w_q4_0, DOT_F16X8(x8, d), dot_isum_q4_0, fp16_to_fp32(x->d))
DOTZ_LEGACY_SYM(q5_0, block_q5_0, dotz_w_q5_0, DOT_F16X8(x8, d), dot_isum_q5_0, fp16_to_fp32(x->d))
DOTZ_LEGACY_SYM(q8_0, block_q8_0, dotz_w_q8_0, DOT_F16X8(x8, d), dot_isum_q8_0, fp16_to_fp32(x->d))
DOTZ_LEGACY_SYM(iq4_nl, block_iq4_nl, dotz_w_iq4_nl, DOT_F16X8(x8, d), dot_isum_iq4_nl, fp16_to_fp32(x->d))
DOTZ_LEGACY_SYM(mxfp4, block_mxfp4, dotz_w_mxfp4, dot_mxfp4_d8(x8), dot_isum_mxfp4, dot_e8m0_half(x->e))

vec_dot_fn dot_avx512_get(uint32_t wtype) {
    switch (wtype) {
    case GGML_TYPE_Q4_K: return dotz_q4_K;
    case GGML_TYPE_Q6_K: return dotz_q6_K;
    case GGML_TYPE_Q4_0: return dotz_q4_0;
    case GGML_TYPE_Q5_0: return dotz_q5_0;
    case GGML_TYPE_Q8_0: return dotz_q8_0;
    case GGML_TYPE_IQ4_NL: return dotz_iq4_nl;
    case GGML_TYPE_MXFP4: return dotz_mxfp4;
    default: return dot_avx512_table(wtype);
    }
}
