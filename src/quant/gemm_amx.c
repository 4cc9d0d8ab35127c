/* Q4_K, Q5_K and Q6_K x Q8_K matrix products on AMX-INT8 tiles (Sapphire Rapids and later), for prefill: 16 weight rows x 16
 * activation rows a tile pass, the same bits as every other kernel (dot_impl.h's contract).
 *
 * The integer parts are exact whatever sums them: per super-block, isum = sum_b sc_b sum_l q_l a_l and
 * msum = sum_b m_b (bsum_2b + bsum_2b+1). AMX's TDPBSUD sums s8 x u8 products into int32, but the 6-bit scale sc_b
 * changes every 32 elements, and a tile product sums 64. So the weight operand carries the scale folded in:
 * v = sc_b q (0..945) split into two bytes, lo = v & 255 and hi = v >> 8, and isum = sum lo a + 256 sum hi a over the
 * super-block's 256 elements: 4 + 4 tile products of K = 64, no sub-block boundaries. |sum lo a| <= 256 * 255 * 127
 * fits int32. msum comes from the activation's block sums (VPDPWSSD on int16 pairs). The float part is then
 * dot_term_kmin's, element by element in vectors of 16 weight rows (mul, mul, mul, mul, sub; no FMA), added to each
 * accumulator in super-block order. Q5_K likewise (q up to 31, v up to 1,953). Q6_K the same way: v = scale_b (q - 32) in -4,064..4,096, lo unsigned and hi
 * signed (-16..16, TDPBSSD), its float part dot_term_k's.
 *
 * Operands: A = 16 activation rows x 64 bytes of Q8_K quants, loaded straight from the activation rows (stride = the
 * row's bytes); B = the weight's lo or hi bytes in the tile's VNNI layout (B[r][4n + t] = row n's byte 4r + t of the
 * 64), built once per 16 weight rows and used by every activation tile. C[m][n] = activation m, weight row n.
 *
 * The kernel needs the OS's permission for the tile data (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM)); quant_amx_ok asks
 * once. VLLMC_AMX=0 keeps it off. */
#include <immintrin.h>
#include <cpuid.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#include "dot_impl.h"
#include "gemv.h"

#define AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define AMX_XFEATURE_XTILEDATA 18

static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx_ok;
/* Each thread's buffer of weight tiles, kept between calls (a fresh block of this size is fresh pages every call) and
 * freed when the thread ends. */
static pthread_key_t g_amx_key;
static bool g_amx_key_ok;
struct amx_buf { void *p; size_t bytes; };

static void amx_buf_free(void *v) {
    struct amx_buf *b = v;
    if (b) free(b->p);
    free(b);
}

static void amx_init(void) {
    const char *e = getenv("VLLMC_AMX");
    if (e && *e && strcmp(e, "0") && strcmp(e, "1")) LOG_WARN("VLLMC_AMX=%s: not 0 or 1; the tiles run where the CPU has them", e);
    if (e && !strcmp(e, "0")) return;
    if (quant_isa_active() != QUANT_ISA_AVX512) return; /* VLLMC_SIMD below avx512 keeps the tiles off too */
    unsigned a, b, c, d; /* CPUID.7.0:EDX[24] AMX-TILE, [25] AMX-INT8; XCR0[17:18] the tile state enabled by the OS */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return;
    if ((_xgetbv(0) & (3ull << 17)) != (3ull << 17)) return;
#if defined(__linux__) && defined(SYS_arch_prctl)
    g_amx_key_ok = pthread_key_create(&g_amx_key, amx_buf_free) == 0;
    g_amx_ok = g_amx_key_ok && syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA) == 0;
#endif
}

/* This thread's tile buffer of at least bytes (64-aligned), or NULL. */
static void *amx_buf_get(size_t bytes) {
    struct amx_buf *b = pthread_getspecific(g_amx_key);
    if (!b) {
        if (!(b = calloc(1, sizeof(*b)))) return NULL;
        if (pthread_setspecific(g_amx_key, b)) { free(b); return NULL; }
    }
    if (b->bytes < bytes) {
        void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!p) return NULL;
        free(b->p);
        b->p = p;
        b->bytes = bytes;
    }
    return b->p;
}

bool quant_amx_ok(void) {
    pthread_once(&g_amx_once, amx_init);
    return g_amx_ok;
}

/* The weight tiles' preparation reads 16 rows side by side, each a stream the prefetchers follow poorly: each row's
 * super-block this many ahead is asked for (the bytes of DOT_PREFETCH's span, placed there). */
#ifndef AMX_PF_SB
#define AMX_PF_SB 4
#endif

struct amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* tmm0 A (activations), tmm1 B (weights), tmm2..5 C: all 16 rows x 64 bytes */
static void amx_config(void) {
    struct amx_cfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < 6; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

/* One super-block of 16 weight rows: the B tiles (chunk c = elements 64c .. 64c + 63: lo at 2c, hi at 2c + 1, 1 KB
 * each), d / dmin and the mins as int16 pairs [m_2p | m_2p+1] per row. */
struct amx_wsb {
    uint8_t b[8][16][64];
    float d[16], dmin[16];
    int32_t mpair[4][16];
};

/* The 16 x 16 dword transpose: out[r] = dword r of each of in[0..15] (unpacks, then 128-bit lane shuffles). */
static inline void amx_transpose16(const __m512i in[16], __m512i out[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);     /* a0 b0 a1 b1 | a4 b4 a5 b5 | .. */
        t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]); /* a2 b2 a3 b3 | .. */
    }
    for (int q = 0; q < 4; q++) { /* rows 4q .. 4q + 3 */
        u[4 * q] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);      /* dwords 0, 4, 8, 12 of the four rows */
        u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);  /* 1, 5, 9, 13 */
        u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]); /* 2, 6, 10, 14 */
        u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]); /* 3, 7, 11, 15 */
    }
    for (int j = 0; j < 4; j++) { /* u[4q + j]: lane L holds dword j + 4L of rows 4q .. 4q + 3 */
        const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        const __m512i w0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd), w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
        out[j] = _mm512_shuffle_i32x4(v0, v1, 0x88);
        out[j + 8] = _mm512_shuffle_i32x4(v0, v1, 0xdd);
        out[j + 4] = _mm512_shuffle_i32x4(w0, w1, 0x88);
        out[j + 12] = _mm512_shuffle_i32x4(w0, w1, 0xdd);
    }
}

/* The B tiles of one super-block from its 16 rows' folded values as lo / hi bytes (stage[h][n][e], e < 256): chunk c's
 * tile h has row r = dword 16c + r of each of the 16 rows (the VNNI layout). */
static void amx_stage_to_tiles(const uint8_t (*stage)[16][256], struct amx_wsb *o) {
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++) {
            __m512i in[16], out[16];
            for (int n = 0; n < 16; n++) in[n] = _mm512_load_si512((const __m512i *)&stage[h][n][64 * c]);
            amx_transpose16(in, out);
            for (int r = 0; r < 16; r++) _mm512_store_si512((__m512i *)o->b[2 * c + h][r], out[r]);
        }
}

/* v (int16, 32 elements) as its low bytes (unsigned) and high bytes (signed) into lo[0..31], hi[0..31] */
static inline void amx_split(__m512i v, uint8_t *lo, uint8_t *hi) {
    _mm256_storeu_si256((__m256i *)lo, _mm512_cvtepi16_epi8(v));
    _mm256_storeu_si256((__m256i *)hi, _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
}

/* Q4_K: v = sc_b q (0..945); Q5_K (q5): q's fifth bit from qh (bit b of qh[l] for sub-block b), v up to 1,953. d,
 * dmin and the mins as int16 pairs per row. (block_q5_K is block_q4_K with qh before qs.) */
static void amx_prep_q45_K(bool q5, const uint8_t *w, size_t row_bytes, int64_t n_sb, struct amx_wsb *out) {
    uint8_t stage[2][16][256] __attribute__((aligned(64)));
    const __m256i m4 = _mm256_set1_epi8(15), sixteen = _mm256_set1_epi8(16);
    const size_t blk = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    for (int64_t s = 0; s < n_sb; s++) {
        struct amx_wsb *o = &out[s];
        for (int n = 0; n < 16; n++) {
            const uint8_t *xb = w + (size_t)n * row_bytes + (size_t)s * blk;
            DOT_PREFETCH(xb + (AMX_PF_SB - 1) * blk - DOT_PF_BYTES, blk); /* this row, AMX_PF_SB super-blocks ahead */
            const block_q4_K *x = (const block_q4_K *)xb;              /* d, dmin, scales: the same offsets in both */
            const uint8_t *qs = q5 ? ((const block_q5_K *)xb)->qs : x->qs;
            const __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)((const block_q5_K *)xb)->qh) : _mm256_setzero_si256();
            int sc[8], m[8];
            for (int b = 0; b < 8; b++) dot_scale_min_k4(b, x->scales, &sc[b], &m[b]);
            o->d[n] = fp16_to_fp32(x->d);
            o->dmin[n] = fp16_to_fp32(x->dmin);
            for (int p = 0; p < 4; p++) o->mpair[p][n] = (int32_t)(uint32_t)((uint16_t)m[2 * p] | ((uint32_t)(uint16_t)m[2 * p + 1] << 16));
            for (int c = 0; c < 4; c++) { /* elements 64c..64c+31: low nibbles (sub-block 2c), +32..63: high (2c + 1) */
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                __m256i q0 = _mm256_and_si256(q, m4), q1 = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) { /* + 16 where bit 2c (2c + 1) of qh[l] is set */
                    const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * c))), b1 = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
                    q0 = _mm256_add_epi8(q0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), sixteen));
                    q1 = _mm256_add_epi8(q1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), sixteen));
                }
                const __m512i v0 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(q0), _mm512_set1_epi16((short)sc[2 * c]));
                const __m512i v1 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(q1), _mm512_set1_epi16((short)sc[2 * c + 1]));
                amx_split(v0, &stage[0][n][64 * c], &stage[1][n][64 * c]);
                amx_split(v1, &stage[0][n][64 * c + 32], &stage[1][n][64 * c + 32]);
            }
        }
        amx_stage_to_tiles((const uint8_t (*)[16][256])stage, o);
    }
}

/* Q6_K: v = scale_b (q - 32) (-4,064..4,096); d per row. Element 128h + 32g + l: the low 4 bits from ql[64h + 32(g % 2)
 * + l] (shifted by 4 (g / 2)), the high 2 from qh[32h + l] (shifted by 2g); sub-block 8h + 2g + (l >= 16). */
static void amx_prep_q6_K(const uint8_t *w, size_t row_bytes, int64_t n_sb, struct amx_wsb *out) {
    uint8_t stage[2][16][256] __attribute__((aligned(64)));
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    for (int64_t s = 0; s < n_sb; s++) {
        struct amx_wsb *o = &out[s];
        for (int n = 0; n < 16; n++) {
            const block_q6_K *x = (const block_q6_K *)(w + (size_t)n * row_bytes) + s;
            DOT_PREFETCH((const uint8_t *)(x + AMX_PF_SB - 1) - DOT_PF_BYTES, sizeof(*x));
            o->d[n] = fp16_to_fp32(x->d);
            for (int h = 0; h < 2; h++) {
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
                for (int g = 0; g < 4; g++) {
                    const __m256i ql = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (g % 2)));
                    const __m256i lo4 = _mm256_and_si256(g / 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
                    const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2);
                    const __m256i q = _mm256_or_si256(lo4, _mm256_slli_epi16(hi2, 4)); /* 0..63 (no bit crosses a byte) */
                    const int b = 8 * h + 2 * g;
                    const __m512i sc = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)x->scales[b])),
                                                          _mm256_set1_epi16((short)x->scales[b + 1]), 1);
                    const __m512i v = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(q), _mm512_set1_epi16(32)), sc);
                    amx_split(v, &stage[0][n][128 * h + 32 * g], &stage[1][n][128 * h + 32 * g]);
                }
            }
        }
        amx_stage_to_tiles((const uint8_t (*)[16][256])stage, o);
    }
}

/* The float part of one super-block for the 16 activation rows of a tile and one group of 16 weight rows: isum from
 * the lo / hi tile sums, msum from the activation's block sums, dot_term_kmin's terms added to acc. */
static inline __attribute__((always_inline)) void amx_q4k_terms(const struct amx_wsb *o, const uint8_t *act, size_t act_row_bytes,
                                                                int64_t s, const int32_t (*clo)[16], const int32_t (*chi)[16], __m512 *acc) {
    const __m512 d = _mm512_load_ps(o->d), dmin = _mm512_load_ps(o->dmin);
    const __m512i mp0 = _mm512_load_si512(o->mpair[0]), mp1 = _mm512_load_si512(o->mpair[1]);
    const __m512i mp2 = _mm512_load_si512(o->mpair[2]), mp3 = _mm512_load_si512(o->mpair[3]);
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        const block_q8_K *am = (const block_q8_K *)(act + (size_t)m * act_row_bytes) + s;
        const __m512i isum = _mm512_add_epi32(_mm512_load_si512(clo[m]), _mm512_slli_epi32(_mm512_load_si512(chi[m]), 8));
        /* the activation's sub-block sums bsum_2b + bsum_2b+1 as int16 pairs [P_2p | P_2p+1]: the 16 bsums summed in
         * pairs by one madd against ones */
        const __m128i ps = _mm256_castsi256_si128(_mm256_permute4x64_epi64(
            _mm256_packs_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)am->bsums), _mm256_set1_epi16(1)), _mm256_setzero_si256()),
            _MM_SHUFFLE(3, 1, 2, 0)));
        __m512i msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp0, _mm512_set1_epi32(_mm_extract_epi32(ps, 0)));
        msum = _mm512_dpwssd_epi32(msum, mp1, _mm512_set1_epi32(_mm_extract_epi32(ps, 1)));
        msum = _mm512_dpwssd_epi32(msum, mp2, _mm512_set1_epi32(_mm_extract_epi32(ps, 2)));
        msum = _mm512_dpwssd_epi32(msum, mp3, _mm512_set1_epi32(_mm_extract_epi32(ps, 3)));
        const __m512 da = _mm512_set1_ps(am->d);
        const __m512 dd = _mm512_mul_ps(da, d), dm = _mm512_mul_ps(da, dmin);
        const __m512 x = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum)), y = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(msum));
        acc[m] = _mm512_add_ps(acc[m], _mm512_sub_ps(x, y));
    }
}

/* Q6_K's float part: dot_term_k's terms (da d) isum added to acc. */
static inline __attribute__((always_inline)) void amx_q6k_terms(const struct amx_wsb *o, const uint8_t *act, size_t act_row_bytes,
                                                                int64_t s, const int32_t (*clo)[16], const int32_t (*chi)[16], __m512 *acc) {
    const __m512 d = _mm512_load_ps(o->d);
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        const block_q8_K *am = (const block_q8_K *)(act + (size_t)m * act_row_bytes) + s;
        const __m512i isum = _mm512_add_epi32(_mm512_load_si512(clo[m]), _mm512_slli_epi32(_mm512_load_si512(chi[m]), 8));
        const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(am->d), d);
        acc[m] = _mm512_add_ps(acc[m], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum)));
    }
}

/* Activation tile act (16 rows) against ng (1 or 2) groups of 16 weight rows (ws[g * n_sb ..]): out[m * out_stride +
 * 16 g + n] = the dot product of activation m and row n of group g, summed over the super-blocks in order. Tiles: tmm0
 * A, tmm1 B, tmm2..5 C (group g lo / hi at 2 + 2g, 3 + 2g). */
static void amx_tile(bool q6, const struct amx_wsb *ws, int64_t n_sb, int ng, const uint8_t *act, size_t act_row_bytes, float *out,
                     int64_t out_stride) {
    int32_t c[4][16][16] __attribute__((aligned(64)));
    __m512 acc0[16], acc1[16];
    for (int m = 0; m < 16; m++) acc0[m] = acc1[m] = _mm512_setzero_ps();
    for (int64_t s = 0; s < n_sb; s++) {
        const uint8_t *a0 = act + (size_t)s * sizeof(block_q8_K) + offsetof(block_q8_K, qs);
        const struct amx_wsb *o0 = &ws[s], *o1 = &ws[n_sb + s];
        if (s + 1 < n_sb) /* the next super-block's activation lines (16 rows apart, which the prefetchers do not follow) */
            for (int m = 0; m < 16; m++)
                for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(a0 + sizeof(block_q8_K) + (size_t)m * act_row_bytes + 64 * l), _MM_HINT_T0);
        _tile_zero(2);
        _tile_zero(3);
        if (ng == 2) {
            _tile_zero(4);
            _tile_zero(5);
        }
        for (int k = 0; k < 4; k++) {
            _tile_loadd(0, a0 + 64 * k, (long)act_row_bytes);
            _tile_loadd(1, o0->b[2 * k], 64);
            _tile_dpbsud(2, 0, 1);
            _tile_loadd(1, o0->b[2 * k + 1], 64);
            _tile_dpbssd(3, 0, 1); /* the high bytes are signed (Q6_K's down to -16; Q4_K's 0..3 read the same) */
            if (ng == 2) {
                _tile_loadd(1, o1->b[2 * k], 64);
                _tile_dpbsud(4, 0, 1);
                _tile_loadd(1, o1->b[2 * k + 1], 64);
                _tile_dpbssd(5, 0, 1);
            }
        }
        _tile_stored(2, c[0], 64);
        _tile_stored(3, c[1], 64);
        if (q6) amx_q6k_terms(o0, act, act_row_bytes, s, c[0], c[1], acc0);
        else amx_q4k_terms(o0, act, act_row_bytes, s, c[0], c[1], acc0);
        if (ng == 2) {
            _tile_stored(4, c[2], 64);
            _tile_stored(5, c[3], 64);
            if (q6) amx_q6k_terms(o1, act, act_row_bytes, s, c[2], c[3], acc1);
            else amx_q4k_terms(o1, act, act_row_bytes, s, c[2], c[3], acc1);
        }
    }
    for (int m = 0; m < 16; m++) {
        _mm512_storeu_ps(out + (size_t)m * (size_t)out_stride, acc0[m]);
        if (ng == 2) _mm512_storeu_ps(out + (size_t)m * (size_t)out_stride + 16, acc1[m]);
    }
}

bool quant_amx_type(uint32_t wtype) {
    return (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K || wtype == GGML_TYPE_Q6_K) && quant_amx_ok();
}

/* Rows [0, n_rows) x activations [0, n_act), both multiples of 16; out[i * out_stride + r]. false: not run. */
bool quant_gemm_amx(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t n_rows, const void *act,
                    size_t act_row_bytes, int64_t n_act, float *out, int64_t out_stride) {
    if (!quant_amx_type(wtype) || n_cols % QK_K || n_rows % 16 || n_act % 16 || n_rows <= 0 || n_act <= 0) return false;
    const bool q6 = wtype == GGML_TYPE_Q6_K;
    const int64_t n_sb = n_cols / QK_K;
    struct amx_wsb *ws = amx_buf_get(2 * (size_t)n_sb * sizeof(struct amx_wsb));
    if (!ws) return false;
    amx_config();
    for (int64_t r0 = 0; r0 < n_rows; r0 += 32) { /* two groups of 16 rows a pass (one at an odd end) */
        const int ng = n_rows - r0 >= 32 ? 2 : 1;
        for (int g = 0; g < ng; g++)
        {
            const uint8_t *wg = (const uint8_t *)w + (size_t)(r0 + 16 * g) * w_row_bytes;
            if (q6) amx_prep_q6_K(wg, w_row_bytes, n_sb, ws + (size_t)g * (size_t)n_sb);
            else amx_prep_q45_K(wtype == GGML_TYPE_Q5_K, wg, w_row_bytes, n_sb, ws + (size_t)g * (size_t)n_sb);
        }
        for (int64_t i0 = 0; i0 < n_act; i0 += 16)
            amx_tile(q6, ws, n_sb, ng, (const uint8_t *)act + (size_t)i0 * act_row_bytes, act_row_bytes,
                     out + (size_t)i0 * (size_t)out_stride + r0, out_stride);
    }
    _tile_release();
    return true;
}
