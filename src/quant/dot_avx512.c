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

vec_dot_fn dot_avx512_get(uint32_t wtype) {
    switch (wtype) {
    case GGML_TYPE_Q4_K: return dotz_q4_K;
    case GGML_TYPE_Q6_K: return dotz_q6_K;
    default: return dot_avx512_table(wtype);
    }
}
