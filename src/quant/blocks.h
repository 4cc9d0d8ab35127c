/* Block layouts of the ggml quant formats, shared by the C and the CUDA/HIP code.
 * Byte-for-byte the GGUF on-disk layout (docs: GGUF-QUANTS.md section 3); sizes are asserted.
 * Half-precision fields are stored as raw uint16_t bits (ggml_half); convert with fp16_to_fp32. */
#ifndef VLLMC_BLOCKS_H
#define VLLMC_BLOCKS_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#define VLLMC_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#include <assert.h>
#define VLLMC_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VLLMC_HD __host__ __device__
#else
#define VLLMC_HD
#endif

typedef uint16_t ggml_half;

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { ggml_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { ggml_half d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { ggml_half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { ggml_half d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { ggml_half d; int8_t qs[QK8_0]; } block_q8_0;
/* s = d * sum(qs) (the CPU reference; see GGUF-QUANTS.md 4.3) */
typedef struct { ggml_half d, s; int8_t qs[QK8_1]; } block_q8_1;

typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; ggml_half d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; ggml_half d; } block_q3_K;
typedef struct { ggml_half d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { ggml_half d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; ggml_half d; } block_q6_K;
/* Activation-side: d is float32; bsums[k] = sum of qs[16k .. 16k+15]. */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

typedef struct { ggml_half d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
typedef struct { ggml_half d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;

VLLMC_STATIC_ASSERT(sizeof(block_q4_0) == 18, "q4_0 size");
VLLMC_STATIC_ASSERT(sizeof(block_q4_1) == 20, "q4_1 size");
VLLMC_STATIC_ASSERT(sizeof(block_q5_0) == 22, "q5_0 size");
VLLMC_STATIC_ASSERT(sizeof(block_q5_1) == 24, "q5_1 size");
VLLMC_STATIC_ASSERT(sizeof(block_q8_0) == 34, "q8_0 size");
VLLMC_STATIC_ASSERT(sizeof(block_q8_1) == 36, "q8_1 size");
VLLMC_STATIC_ASSERT(sizeof(block_q2_K) == 84, "q2_K size");
VLLMC_STATIC_ASSERT(sizeof(block_q3_K) == 110, "q3_K size");
VLLMC_STATIC_ASSERT(sizeof(block_q4_K) == 144, "q4_K size");
VLLMC_STATIC_ASSERT(sizeof(block_q5_K) == 176, "q5_K size");
VLLMC_STATIC_ASSERT(sizeof(block_q6_K) == 210, "q6_K size");
VLLMC_STATIC_ASSERT(sizeof(block_q8_K) == 292, "q8_K size");
VLLMC_STATIC_ASSERT(sizeof(block_iq4_nl) == 18, "iq4_nl size");
VLLMC_STATIC_ASSERT(sizeof(block_iq4_xs) == 136, "iq4_xs size");
VLLMC_STATIC_ASSERT(sizeof(block_mxfp4) == 17, "mxfp4 size");

/* Lookup tables (GGUF-QUANTS.md 3.0). */
static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* E2M1 magnitudes doubled; the scale is halved to compensate. */
static const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* IEEE binary16 <-> binary32, bit-exact with ggml (RNE; NaN -> 0x7E00 keeping the sign). */
static inline VLLMC_HD float fp16_to_fp32(ggml_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: normalize */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline VLLMC_HD ggml_half fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (ggml_half)(sign | 0x7e00);          /* NaN */
    if (ax >= 0x477ff000u) return (ggml_half)(sign | 0x7c00);         /* overflow (after rounding) -> inf */
    if (ax < 0x38800000u) {                                           /* subnormal or zero in half */
        if (ax < 0x33000000u) return (ggml_half)sign;                 /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;                                     /* 14 + (113 - e) - 1 */
        uint32_t half_m = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half_m & 1))) half_m++;
        return (ggml_half)(sign | half_m);
    }
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1);                      /* RNE on the 13 dropped bits */
    return (ggml_half)(sign | ((r - 0x38000000u) >> 13));
}

static inline VLLMC_HD float bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline VLLMC_HD uint16_t fp32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
