/* AVX-512 VNNI kernels of the batched Q4_0 / Q5_0 / Q8_0 matmul (contract in matmul_batch.h).
 *
 * Weights are unpacked to unsigned bytes u = w + off (off = 8, 16, 128), so one vpdpbusd per 64
 * bytes gives sum(u * a) and the exact block sum is sum(u * a) - off * sum(a), with sum(a) from the
 * prepared activation. Prepared activation row: qs int8 [nbp * 32], d fp32 [nbp], sum int32 [nbp],
 * nbp = blocks rounded up to 8, padding zero. */
#include <immintrin.h>
#include <string.h>
#include "backend/cpu/matmul_batch.h"
#include "common/common.h"
#include "quant/dot_impl.h"

#define MMB_SEG_BLOCKS 32 /* weight blocks unpacked at a time (1,024 columns) */
#define MMB_ACT_TILE 16   /* activation rows per pass over a weight row */

struct mmb_act {
    const int8_t *qs;
    const float *d;
    const int32_t *sum;
};

static struct mmb_act mmb_act_row(const void *prep, int64_t n_cols, int64_t i) {
    const int64_t nbp = ((n_cols / 32) + 7) & ~(int64_t)7;
    const uint8_t *p = (const uint8_t *)prep + (size_t)i * cpu_mmb_prep_row_bytes(n_cols);
    struct mmb_act a = {(const int8_t *)p, (const float *)(p + nbp * 32), (const int32_t *)(p + nbp * 36)};
    return a;
}

void cpu_mmb_prepare(int64_t n_cols, const void *act, size_t act_row_bytes, int64_t n_act, void *prep) {
    const int64_t nb = n_cols / 32, nbp = (nb + 7) & ~(int64_t)7;
    for (int64_t i = 0; i < n_act; i++) {
        const block_q8_0 *a = (const block_q8_0 *)((const uint8_t *)act + (size_t)i * act_row_bytes);
        struct mmb_act r = mmb_act_row(prep, n_cols, i);
        int8_t *qs = (int8_t *)r.qs;
        float *d = (float *)r.d;
        int32_t *sum = (int32_t *)r.sum;
        for (int64_t b = 0; b < nb; b++) {
            memcpy(qs + b * 32, a[b].qs, 32);
            d[b] = fp16_to_fp32(a[b].d);
            int32_t s = 0;
            for (int j = 0; j < 32; j++) s += a[b].qs[j];
            sum[b] = s;
        }
        for (int64_t b = nb; b < nbp; b++) {
            memset(qs + b * 32, 0, 32);
            d[b] = 0.0f;
            sum[b] = 0;
        }
    }
}

/* Unpack blocks [b0, b0 + n) of one weight row into u (32 bytes a block) and d; blocks up to the
 * next multiple of 8 are zero. Returns log2(off). wtype is a constant after inlining. */
static inline __attribute__((always_inline)) int mmb_unpack_t(const uint32_t wtype, const uint8_t *wrow, int64_t b0,
                                                              int64_t n, uint8_t *u, float *d) {
    const size_t bsz = wtype == GGML_TYPE_Q8_0 ? sizeof(block_q8_0) : wtype == GGML_TYPE_Q5_0 ? sizeof(block_q5_0)
                                                                                                : sizeof(block_q4_0);
    const uint8_t *x0 = wrow + (size_t)b0 * bsz;
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t k = 0; k < n; k++) {
        const uint8_t *x = x0 + (size_t)k * bsz;
        __m256i v;
        if (wtype == GGML_TYPE_Q8_0) {
            v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x)->qs), _mm256_set1_epi8((char)0x80));
        } else {
            const uint8_t *qs = wtype == GGML_TYPE_Q5_0 ? ((const block_q5_0 *)x)->qs : ((const block_q4_0 *)x)->qs;
            __m128i q = _mm_loadu_si128((const __m128i *)qs);
            v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
            if (wtype == GGML_TYPE_Q5_0) {
                uint32_t qh;
                memcpy(&qh, ((const block_q5_0 *)x)->qh, 4);
                v = _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16));
            }
        }
        _mm256_storeu_si256((__m256i *)(u + k * 32), v);
    }
    /* scales, 8 at a time through F16C (exact, as fp16_to_fp32); zero past n */
    const int64_t np = (n + 7) & ~(int64_t)7;
#define MMB_D(j) (*(const uint16_t *)(x0 + (size_t)(k0 + (j)) * bsz)) /* d is the first field */
    int64_t k0 = 0;
    for (; k0 + 8 <= n; k0 += 8) /* built in a register: no store-forwarding stall */
        _mm256_storeu_ps(d + k0, _mm256_cvtph_ps(_mm_setr_epi16((short)MMB_D(0), (short)MMB_D(1), (short)MMB_D(2), (short)MMB_D(3),
                                                                (short)MMB_D(4), (short)MMB_D(5), (short)MMB_D(6), (short)MMB_D(7))));
#undef MMB_D
    for (; k0 < np; k0 += 8) {
        uint16_t h[8];
        for (int j = 0; j < 8; j++) {
            if (k0 + j < n) memcpy(&h[j], x0 + (size_t)(k0 + j) * bsz, sizeof(uint16_t)); /* d is the first field */
            else h[j] = 0;
        }
        _mm256_storeu_ps(d + k0, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
    }
    if (np > n) memset(u + n * 32, 0, (size_t)(np - n) * 32);
    return wtype == GGML_TYPE_Q8_0 ? 7 : wtype == GGML_TYPE_Q5_0 ? 4 : 3;
}

static int mmb_unpack(uint32_t wtype, const uint8_t *wrow, int64_t b0, int64_t n, uint8_t *u, float *d) {
    switch (wtype) {
    case GGML_TYPE_Q8_0: return mmb_unpack_t(GGML_TYPE_Q8_0, wrow, b0, n, u, d);
    case GGML_TYPE_Q5_0: return mmb_unpack_t(GGML_TYPE_Q5_0, wrow, b0, n, u, d);
    default: return mmb_unpack_t(GGML_TYPE_Q4_0, wrow, b0, n, u, d);
    }
}

/* 8 int32 block sums from 4 vectors of 16 partial sums (2 blocks each, in block order). */
static inline __m256i mmb_hsum8(__m512i z0, __m512i z1, __m512i z2, __m512i z3) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512i q01 = _mm512_add_epi32(_mm512_permutex2var_epi32(z0, ev, z1), _mm512_permutex2var_epi32(z0, od, z1));
    __m512i q23 = _mm512_add_epi32(_mm512_permutex2var_epi32(z2, ev, z3), _mm512_permutex2var_epi32(z2, od, z3));
    __m512i r = _mm512_add_epi32(_mm512_permutex2var_epi32(q01, ev, q23), _mm512_permutex2var_epi32(q01, od, q23));
    __m512i s = _mm512_add_epi32(_mm512_permutexvar_epi32(ev, r), _mm512_permutexvar_epi32(od, r));
    return _mm512_castsi512_si256(s);
}

/* acc += the terms of groups of 8 blocks [0, ng) of a segment; the last group only adds lanes in last_mask. */
static inline __m256 mmb_seg_dot(__m256 acc, const uint8_t *u, const float *wd, const int8_t *aq, const float *ad,
                                 const int32_t *as, int64_t ng, __mmask8 last_mask, int shift) {
    const __m128i sh = _mm_cvtsi32_si128(shift);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *ug = u + g * 256;
        const int8_t *ag = aq + g * 256;
        __m512i z0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(ug), _mm512_loadu_si512(ag));
        __m512i z1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(ug + 64), _mm512_loadu_si512(ag + 64));
        __m512i z2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(ug + 128), _mm512_loadu_si512(ag + 128));
        __m512i z3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(ug + 192), _mm512_loadu_si512(ag + 192));
        __m256i s = _mm256_sub_epi32(mmb_hsum8(z0, z1, z2, z3),
                                     _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)(as + g * 8)), sh));
        __m256 sf = _mm256_cvtepi32_ps(s);
        __m256 dd = _mm256_mul_ps(_mm256_loadu_ps(wd + g * 8), _mm256_loadu_ps(ad + g * 8)); /* dot_term_sym */
        __m256 t = _mm256_mul_ps(dd, sf);
        acc = g + 1 < ng ? _mm256_add_ps(acc, t) : _mm256_mask_add_ps(acc, last_mask, acc, t);
    }
    return acc;
}

void cpu_mmb_gemm(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                  const void *prep, int64_t n_act, float *out, int64_t out_stride) {
    VLLMC_ASSERT(n_cols % 32 == 0);
    const int64_t nb = n_cols / 32;
    _Alignas(64) uint8_t u[MMB_SEG_BLOCKS * 32];
    _Alignas(64) float wd[MMB_SEG_BLOCKS];
    struct mmb_act a[MMB_ACT_TILE];
    for (int64_t i0 = 0; i0 < n_act; i0 += MMB_ACT_TILE) {
        const int na = (int)VLLMC_MIN(MMB_ACT_TILE, n_act - i0);
        for (int i = 0; i < na; i++) a[i] = mmb_act_row(prep, n_cols, i0 + i);
        const uint8_t *wr = (const uint8_t *)w + (size_t)row0 * w_row_bytes;
        for (int64_t r = 0; r < n_rows; r++, wr += w_row_bytes) {
            __m256 acc[MMB_ACT_TILE];
            for (int i = 0; i < na; i++) acc[i] = _mm256_setzero_ps();
            for (int64_t b0 = 0; b0 < nb; b0 += MMB_SEG_BLOCKS) {
                const int64_t n = VLLMC_MIN(MMB_SEG_BLOCKS, nb - b0), ng = (n + 7) / 8;
                const int shift = mmb_unpack(wtype, wr, b0, n, u, wd);
                const __mmask8 last = (__mmask8)(n % 8 ? (1u << (n % 8)) - 1 : 0xFF);
                for (int i = 0; i < na; i++)
                    acc[i] = mmb_seg_dot(acc[i], u, wd, a[i].qs + b0 * 32, a[i].d + b0, a[i].sum + b0, ng, last, shift);
            }
            for (int i = 0; i < na; i++) {
                float p[8];
                _mm256_storeu_ps(p, acc[i]);
                out[(i0 + i) * out_stride + r] = dot_reduce8(p);
            }
        }
    }
}
