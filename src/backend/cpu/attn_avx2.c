/* AVX2 + F16C inner kernels of CPU attention (f32, f16, bf16 and fp8 e4m3 caches). Bit-identical to the scalar set in cpu_ops_ref.c: the
 * q.k dot keeps 16 lane partial sums in two 8-wide registers (lane = i % 16, mul then add, no FMA)
 * and folds them 8/4/2/1 exactly as dot16_fold; out += w * v is element-wise. */
#include <immintrin.h>
#include "backend/cpu/cpu_internal.h"
#include "quant/gemv.h"

static float fold16(__m256 a0, __m256 a1) {
    float acc[16];
    _mm256_storeu_ps(acc, a0);
    _mm256_storeu_ps(acc + 8, a1);
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] = acc[l] + acc[l + w];
    return acc[0];
}

static float dot16_f32_avx2(const float *q, const void *k, int32_t hd) {
    const float *kr = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int32_t i = 0; i < hd; i += 16) {
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kr + i)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(kr + i + 8)));
    }
    return fold16(a0, a1);
}

static float dot16_f16_avx2(const float *q, const void *k, int32_t hd) {
    const uint16_t *kr = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int32_t i = 0; i < hd; i += 16) {
        __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i)));
        __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i + 8)));
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(q + i), k0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(q + i + 8), k1));
    }
    return fold16(a0, a1);
}

static void axpy_f32_avx2(float *out, float w, const void *v, int32_t hd) {
    const float *vr = v;
    const __m256 ww = _mm256_set1_ps(w);
    for (int32_t i = 0; i < hd; i += 8)
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(ww, _mm256_loadu_ps(vr + i))));
}

static void axpy_f16_avx2(float *out, float w, const void *v, int32_t hd) {
    const uint16_t *vr = v;
    const __m256 ww = _mm256_set1_ps(w);
    for (int32_t i = 0; i < hd; i += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + i)));
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(ww, vv)));
    }
}

/* 8 bf16 -> 8 f32: the bits shifted into the high half (exact, as bf16_to_fp32). */
static inline __m256 bf16x8_to_f32(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* 8 e4m3 codes -> 8 f32, the values of bk_fp8_e4m3_table bit for bit (no gather: slow on some cores).
 * The 7 exponent+mantissa bits placed at f32 bit 20 read as 2^(e-127) * (1 + m/8) (an f32 subnormal
 * m/8 * 2^-126 when e = 0); times 2^120 that is exactly the e4m3 value, normal or subnormal. Then the
 * sign, and the table's NaN (0x7FC00000) for the codes 0x7F / 0xFF. */
static inline __m256 fp8x8_to_f32(const uint8_t *p) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i em = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    const __m256 mag = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(em, 20)), _mm256_set1_ps(0x1p120f));
    const __m256 v = _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7f)));
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
}

static float dot16_bf16_avx2(const float *q, const void *k, int32_t hd) {
    const uint16_t *kr = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int32_t i = 0; i < hd; i += 16) {
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(q + i), bf16x8_to_f32(kr + i)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(q + i + 8), bf16x8_to_f32(kr + i + 8)));
    }
    return fold16(a0, a1);
}

static float dot16_fp8_avx2(const float *q, const void *k, int32_t hd) {
    const uint8_t *kr = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int32_t i = 0; i < hd; i += 16) {
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(q + i), fp8x8_to_f32(kr + i)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(q + i + 8), fp8x8_to_f32(kr + i + 8)));
    }
    return fold16(a0, a1);
}

static void axpy_bf16_avx2(float *out, float w, const void *v, int32_t hd) {
    const uint16_t *vr = v;
    const __m256 ww = _mm256_set1_ps(w);
    for (int32_t i = 0; i < hd; i += 8)
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(ww, bf16x8_to_f32(vr + i))));
}

static void axpy_fp8_avx2(float *out, float w, const void *v, int32_t hd) {
    const uint8_t *vr = v;
    const __m256 ww = _mm256_set1_ps(w);
    for (int32_t i = 0; i < hd; i += 8)
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(ww, fp8x8_to_f32(vr + i))));
}

static const struct cpu_attn_kernels attn_avx2 = {dot16_f32_avx2,  dot16_f16_avx2, axpy_f32_avx2,  axpy_f16_avx2,
                                                  dot16_bf16_avx2, dot16_fp8_avx2, axpy_bf16_avx2, axpy_fp8_avx2};

const struct cpu_attn_kernels *cpu_attn_kernels_avx2(int32_t head_dim) {
    const bool have = quant_isa_supported(QUANT_ISA_AVX2); /* AVX2 + FMA + F16C + BMI2, via CPUID */
    return have && head_dim % 16 == 0 ? &attn_avx2 : NULL;
}
