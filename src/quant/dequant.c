/* Scalar dequantizers of every supported weight type (GGUF-QUANTS.md section 3): the reference that
 * the SIMD and CUDA paths are checked against. Invariant: each element is A*q - B (or A*q + B) with
 * A = F16(d)*sub_scale and B = F16(dmin)*min formed in f32; A*q is exact, so the only rounding is the
 * final add, and the output is bit-identical to ggml's dequantize_row_* on any IEEE f32 machine. */
#include "quant.h"
#include "blocks.h"

/* 6-bit scale and min of sub-block j (0..7) from the 12-byte Q4_K/Q5_K packing. */
static void dequant_scale_min_k4(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* 6-bit biased scale j (0..15) of a Q3_K block: low nibble in byte j%8, high 2 bits in byte 8 + j%4. */
static int dequant_q3k_scale(const uint8_t *s, int j) {
    int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

static void dequant_q4_0(const block_q4_0 *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b->qs[j] & 15) - 8) * d;
        y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static void dequant_q4_1(const block_q4_1 *b, float *y) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b->qs[j] & 15) * d + m;
        y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static uint32_t dequant_load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void dequant_q5_0(const block_q5_0 *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    const uint32_t qh = dequant_load_u32(b->qh);
    for (int j = 0; j < 16; j++) {
        int q0 = (b->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)(q0 - 16) * d;
        y[j + 16] = (float)(q1 - 16) * d;
    }
}

static void dequant_q5_1(const block_q5_1 *b, float *y) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    const uint32_t qh = dequant_load_u32(b->qh);
    for (int j = 0; j < 16; j++) {
        int q0 = (b->qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
        int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)q0 * d + m;
        y[j + 16] = (float)q1 * d + m;
    }
}

static void dequant_q8_0(const block_q8_0 *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < 32; j++) y[j] = (float)b->qs[j] * d;
}

/* Q2_K: element i = 128h + 32g + l; q = bits 2g..2g+1 of qs[32h + l]; sub-block i/16 = 8h + 2g + l/16. */
static void dequant_q2_K(const block_q2_K *b, float *y) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int half = 0; half < 2; half++) {
                const int s = b->scales[8 * h + 2 * g + half];
                const float a = d * (float)(s & 15), m = dmin * (float)(s >> 4);
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    int q = (b->qs[32 * h + l] >> (2 * g)) & 3;
                    y[128 * h + 32 * g + l] = a * (float)q - m;
                }
            }
}

/* Q3_K: low 2 bits as Q2_K; bit 4h + g (= i/32) of hmask[l] set means "do not subtract 4". */
static void dequant_q3_K(const block_q3_K *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int half = 0; half < 2; half++) {
                const float a = d * (float)dequant_q3k_scale(b->scales, 8 * h + 2 * g + half);
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    int q = (b->qs[32 * h + l] >> (2 * g)) & 3;
                    if (!((b->hmask[l] >> (4 * h + g)) & 1)) q -= 4;
                    y[128 * h + 32 * g + l] = a * (float)q;
                }
            }
}

/* Q4_K: chunk c = i/64 of 32 bytes; low nibbles are sub-block 2c, high nibbles sub-block 2c+1. */
static void dequant_q4_K(const block_q4_K *b, float *y) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int s = 0; s < 8; s++) {
        int sc, m;
        dequant_scale_min_k4(s, b->scales, &sc, &m);
        const float a = d * (float)sc, bm = dmin * (float)m;
        const uint8_t *qs = b->qs + 32 * (s / 2);
        const int shift = 4 * (s % 2);
        for (int l = 0; l < 32; l++) y[32 * s + l] = a * (float)((qs[l] >> shift) & 15) - bm;
    }
}

/* Q5_K: as Q4_K plus bit s (the sub-block index) of qh[l] as the 5th bit. */
static void dequant_q5_K(const block_q5_K *b, float *y) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int s = 0; s < 8; s++) {
        int sc, m;
        dequant_scale_min_k4(s, b->scales, &sc, &m);
        const float a = d * (float)sc, bm = dmin * (float)m;
        const uint8_t *qs = b->qs + 32 * (s / 2);
        const int shift = 4 * (s % 2);
        for (int l = 0; l < 32; l++) {
            int q = ((qs[l] >> shift) & 15) | (((b->qh[l] >> s) & 1) << 4);
            y[32 * s + l] = a * (float)q - bm;
        }
    }
}

/* Q6_K: element 128h + 32g + l: low nibble from ql[64h + 32(g%2) + l] (high nibble if g >= 2), high 2 bits
 * from bits 2g..2g+1 of qh[32h + l]; signed scale scales[8h + 2g + l/16]. */
static void dequant_q6_K(const block_q6_K *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int half = 0; half < 2; half++) {
                const float a = d * (float)b->scales[8 * h + 2 * g + half];
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    int lo = (b->ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
                    int hi = (b->qh[32 * h + l] >> (2 * g)) & 3;
                    y[128 * h + 32 * g + l] = a * (float)((lo | (hi << 4)) - 32);
                }
            }
}

static void dequant_iq4_nl(const block_iq4_nl *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)kvalues_iq4nl[b->qs[j] & 15];
        y[j + 16] = d * (float)kvalues_iq4nl[b->qs[j] >> 4];
    }
}

static void dequant_iq4_xs(const block_iq4_xs *b, float *y) {
    const float d = fp16_to_fp32(b->d);
    for (int s = 0; s < 8; s++) {
        int ls = ((b->scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((b->scales_h >> (2 * s)) & 3) << 4);
        const float a = d * (float)(ls - 32);
        const uint8_t *qs = b->qs + 16 * s;
        for (int j = 0; j < 16; j++) {
            y[32 * s + j] = a * (float)kvalues_iq4nl[qs[j] & 15];
            y[32 * s + j + 16] = a * (float)kvalues_iq4nl[qs[j] >> 4];
        }
    }
}

/* 2^(e-128) as f32 (half the E8M0 scale; the doubled E2M1 table compensates). e = 0, 1 give the
 * subnormals 2^-128, 2^-127. */
float quant_e8m0_to_fp32_half(uint8_t e) {
    uint32_t bits = e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void dequant_mxfp4(const block_mxfp4 *b, float *y) {
    const float d = quant_e8m0_to_fp32_half(b->e);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)kvalues_mxfp4[b->qs[j] & 15] * d;
        y[j + 16] = (float)kvalues_mxfp4[b->qs[j] >> 4] * d;
    }
}

void dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const struct quant_traits *t = quant_traits(type);
    VLLMC_ASSERT(t && t->supported);
    VLLMC_ASSERT(n >= 0 && n % t->block_size == 0);
    const int64_t nb = n / t->block_size;
    const uint8_t *p = (const uint8_t *)src;
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = fp16_to_fp32(h);
        }
        return;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = bf16_to_fp32(h);
        }
        return;
    default:
        break;
    }
    /* Block types: blocks are packed (only 2-byte aligned for some), so copy each to an aligned local. */
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *bp = p + ib * t->type_size;
        float *y = dst + ib * t->block_size;
        switch (type) {
#define DQ(T, blk, fn) case T: { blk b; memcpy(&b, bp, sizeof(b)); fn(&b, y); } break
        DQ(GGML_TYPE_Q4_0, block_q4_0, dequant_q4_0);
        DQ(GGML_TYPE_Q4_1, block_q4_1, dequant_q4_1);
        DQ(GGML_TYPE_Q5_0, block_q5_0, dequant_q5_0);
        DQ(GGML_TYPE_Q5_1, block_q5_1, dequant_q5_1);
        DQ(GGML_TYPE_Q8_0, block_q8_0, dequant_q8_0);
        DQ(GGML_TYPE_Q2_K, block_q2_K, dequant_q2_K);
        DQ(GGML_TYPE_Q3_K, block_q3_K, dequant_q3_K);
        DQ(GGML_TYPE_Q4_K, block_q4_K, dequant_q4_K);
        DQ(GGML_TYPE_Q5_K, block_q5_K, dequant_q5_K);
        DQ(GGML_TYPE_Q6_K, block_q6_K, dequant_q6_K);
        DQ(GGML_TYPE_IQ4_NL, block_iq4_nl, dequant_iq4_nl);
        DQ(GGML_TYPE_IQ4_XS, block_iq4_xs, dequant_iq4_xs);
        DQ(GGML_TYPE_MXFP4, block_mxfp4, dequant_mxfp4);
#undef DQ
        default:
            VLLMC_ASSERT(!"dequantize_row: type marked supported but has no dequantizer");
        }
    }
}
