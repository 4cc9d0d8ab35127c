/* KV-cache element types: sizes, names, the --kv-cache-dtype spellings and the FP8 E4M3FN conversions
 * (OCP FP8 E4M3FN: 1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities; the largest
 * finite value is 448 = 0x7E; 0x7F / 0xFF are NaN; codes with exponent 0 are subnormals m * 2^-9). */
#include <math.h>
#include <string.h>
#include "backend/backend.h"

size_t bk_kv_dtype_size(enum bk_kv_dtype dtype) {
    switch (dtype) {
    case BK_KV_F32: return 4;
    case BK_KV_F16: return 2;
    case BK_KV_BF16: return 2;
    case BK_KV_FP8_E4M3: return 1;
    default: return 0;
    }
}

const char *bk_kv_dtype_name(enum bk_kv_dtype dtype) {
    switch (dtype) {
    case BK_KV_F32: return "f32";
    case BK_KV_F16: return "f16";
    case BK_KV_BF16: return "bf16";
    case BK_KV_FP8_E4M3: return "fp8_e4m3";
    default: return "?";
    }
}

bool bk_kv_dtype_parse(const char *s, enum bk_kv_dtype *out) {
    static const struct { const char *name; enum bk_kv_dtype dt; } names[] = {
        {"auto", BK_KV_F16}, {"f16", BK_KV_F16}, {"fp16", BK_KV_F16}, {"half", BK_KV_F16}, {"float16", BK_KV_F16},
        {"bf16", BK_KV_BF16}, {"bfloat16", BK_KV_BF16}, {"f32", BK_KV_F32}, {"fp32", BK_KV_F32}, {"float", BK_KV_F32},
        {"float32", BK_KV_F32}, {"fp8", BK_KV_FP8_E4M3}, {"fp8_e4m3", BK_KV_FP8_E4M3},
    };
    if (!s) return false;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].dt;
            return true;
        }
    return false;
}

/* Every code's value (the exact decode; NAN for 0x7F / 0xFF). */
const float bk_fp8_e4m3_table[256] = {
    0.0f, 0.001953125f, 0.00390625f, 0.005859375f, 0.0078125f, 0.009765625f, 0.01171875f, 0.013671875f,
    0.015625f, 0.017578125f, 0.01953125f, 0.021484375f, 0.0234375f, 0.025390625f, 0.02734375f, 0.029296875f,
    0.03125f, 0.03515625f, 0.0390625f, 0.04296875f, 0.046875f, 0.05078125f, 0.0546875f, 0.05859375f,
    0.0625f, 0.0703125f, 0.078125f, 0.0859375f, 0.09375f, 0.1015625f, 0.109375f, 0.1171875f,
    0.125f, 0.140625f, 0.15625f, 0.171875f, 0.1875f, 0.203125f, 0.21875f, 0.234375f,
    0.25f, 0.28125f, 0.3125f, 0.34375f, 0.375f, 0.40625f, 0.4375f, 0.46875f,
    0.5f, 0.5625f, 0.625f, 0.6875f, 0.75f, 0.8125f, 0.875f, 0.9375f,
    1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f,
    2.0f, 2.25f, 2.5f, 2.75f, 3.0f, 3.25f, 3.5f, 3.75f,
    4.0f, 4.5f, 5.0f, 5.5f, 6.0f, 6.5f, 7.0f, 7.5f,
    8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f,
    16.0f, 18.0f, 20.0f, 22.0f, 24.0f, 26.0f, 28.0f, 30.0f,
    32.0f, 36.0f, 40.0f, 44.0f, 48.0f, 52.0f, 56.0f, 60.0f,
    64.0f, 72.0f, 80.0f, 88.0f, 96.0f, 104.0f, 112.0f, 120.0f,
    128.0f, 144.0f, 160.0f, 176.0f, 192.0f, 208.0f, 224.0f, 240.0f,
    256.0f, 288.0f, 320.0f, 352.0f, 384.0f, 416.0f, 448.0f, NAN,
    -0.0f, -0.001953125f, -0.00390625f, -0.005859375f, -0.0078125f, -0.009765625f, -0.01171875f, -0.013671875f,
    -0.015625f, -0.017578125f, -0.01953125f, -0.021484375f, -0.0234375f, -0.025390625f, -0.02734375f, -0.029296875f,
    -0.03125f, -0.03515625f, -0.0390625f, -0.04296875f, -0.046875f, -0.05078125f, -0.0546875f, -0.05859375f,
    -0.0625f, -0.0703125f, -0.078125f, -0.0859375f, -0.09375f, -0.1015625f, -0.109375f, -0.1171875f,
    -0.125f, -0.140625f, -0.15625f, -0.171875f, -0.1875f, -0.203125f, -0.21875f, -0.234375f,
    -0.25f, -0.28125f, -0.3125f, -0.34375f, -0.375f, -0.40625f, -0.4375f, -0.46875f,
    -0.5f, -0.5625f, -0.625f, -0.6875f, -0.75f, -0.8125f, -0.875f, -0.9375f,
    -1.0f, -1.125f, -1.25f, -1.375f, -1.5f, -1.625f, -1.75f, -1.875f,
    -2.0f, -2.25f, -2.5f, -2.75f, -3.0f, -3.25f, -3.5f, -3.75f,
    -4.0f, -4.5f, -5.0f, -5.5f, -6.0f, -6.5f, -7.0f, -7.5f,
    -8.0f, -9.0f, -10.0f, -11.0f, -12.0f, -13.0f, -14.0f, -15.0f,
    -16.0f, -18.0f, -20.0f, -22.0f, -24.0f, -26.0f, -28.0f, -30.0f,
    -32.0f, -36.0f, -40.0f, -44.0f, -48.0f, -52.0f, -56.0f, -60.0f,
    -64.0f, -72.0f, -80.0f, -88.0f, -96.0f, -104.0f, -112.0f, -120.0f,
    -128.0f, -144.0f, -160.0f, -176.0f, -192.0f, -208.0f, -224.0f, -240.0f,
    -256.0f, -288.0f, -320.0f, -352.0f, -384.0f, -416.0f, -448.0f, NAN,
};

float bk_fp8_e4m3_to_f32(uint8_t code) { return bk_fp8_e4m3_table[code]; }

/* Round |x| to the nearest code on its f32 bits (round half to even: an even code has an even mantissa).
 * Saturating: anything above 448 (including inf) becomes 448 before rounding, so no value rounds
 * into the NaN code. Below 2^-6 the result is subnormal: |x| * 2^9 is exact in f32 and rounded by
 * the same integer rule on its bits. */
uint8_t bk_fp8_e4m3_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7f);       /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7e);      /* >= 448 (and inf): saturate */
    if (a < 0x3c800000u) {                                    /* < 2^-6: subnormal codes 0..8 */
        float s;
        memcpy(&s, &a, 4);
        s *= 512.0f;                                          /* exact: units of 2^-9, in [0, 8) */
        uint32_t su;
        memcpy(&su, &s, 4);
        if (su < 0x3f000000u) {                               /* < 0.5: 0, or 0.5 ties to even 0 */
            return sign;
        }
        /* s in [0.5, 8): integer part and fraction from the bits. */
        const int e = (int)(su >> 23) - 127;                  /* -1 .. 2 */
        const uint32_t mant = (su & 0x7fffffu) | 0x800000u;   /* 1.m * 2^23 */
        const int sh = 23 - e;                                /* bits below the integer point */
        uint32_t q = mant >> sh, rem = mant & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint8_t)(sign | q);                           /* q = 8 is the smallest normal, 0x08 */
    }
    /* Normal: keep 3 of the 23 mantissa bits; a carry moves into the exponent field. */
    const uint32_t e = (a >> 23) - 127 + 7;                   /* 1 .. 15 */
    const uint32_t m = a & 0x7fffffu;
    uint32_t code = (e << 3) | (m >> 20), rem = m & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (code & 1))) code++;
    if (code > 0x7e) code = 0x7e;                             /* unreachable: a < 448 rounds to at most 0x7e */
    return (uint8_t)(sign | code);
}
