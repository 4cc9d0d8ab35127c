/* Tests of the weight formats: dequantize_row against an element-wise decoder written from the byte
 * tables of GGUF-QUANTS.md 3 (random blocks, bit-exact), single-bit probes, quantize_row_ref round-trip
 * error bounds on fresh random rows, idempotence, degenerate inputs and thread safety.
 * Extra modes for the Python oracle and the benchmark:
 *   test_quant_formats dequant TYPE IN.bin OUT.f32    raw blocks -> f32
 *   test_quant_formats quantize TYPE IN.f32 OUT.bin   f32 -> raw blocks (n_per_row = 256*k, whole file)
 *   test_quant_formats bench [TYPE ...] [-n MB]       single-thread quantize throughput (MB/s of f32 input)
 *                                                     and dequantize throughput (MB/s of f32 output) */
#include "quant/quant.h"
#include "quant/blocks.h"
#include "quant/quantize_priv.h"
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#define N_ROW 4096

static const uint32_t k_quant_types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,
    GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    GGML_TYPE_MXFP4, GGML_TYPE_F16, GGML_TYPE_BF16,
};
#define N_QTYPES (int)(sizeof(k_quant_types) / sizeof(k_quant_types[0]))

static uint32_t type_by_name(const char *s) {
    for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *tr = quant_traits(t);
        if (tr && !strcasecmp(tr->name, s)) return t;
    }
    return UINT32_MAX;
}

/* ------------------------------------------------------------------------------------------------
 * Element-wise decoder written from the byte tables of GGUF-QUANTS.md 3 (offsets as numbers, no
 * struct fields): value of element i of one block at p.
 * ------------------------------------------------------------------------------------------------ */
static float h16(const uint8_t *p) { return fp16_to_fp32((uint16_t)(p[0] | (p[1] << 8))); }
static int bits(const uint8_t *p, int byte, int shift, int n) { return (p[byte] >> shift) & ((1 << n) - 1); }

/* 6-bit scale / min of sub-block j of a Q4_K/Q5_K block; S = the 12 scale bytes */
static void k4_scale_min(const uint8_t *S, int j, int *sc, int *m) {
    if (j < 4) { *sc = S[j] & 63; *m = S[j + 4] & 63; }
    else { *sc = (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4); *m = (S[j + 4] >> 4) | ((S[j] >> 6) << 4); }
}

static float ref_elem(uint32_t type, const uint8_t *p, int i) {
    int h = i / 128, g = (i % 128) / 32, l = i % 32;
    switch (type) {
    case GGML_TYPE_Q4_0: {
        int q = i < 16 ? bits(p, 2 + i, 0, 4) : bits(p, 2 + i - 16, 4, 4);
        return (float)(q - 8) * h16(p);
    }
    case GGML_TYPE_Q4_1: {
        int q = i < 16 ? bits(p, 4 + i, 0, 4) : bits(p, 4 + i - 16, 4, 4);
        return (float)q * h16(p) + h16(p + 2);
    }
    case GGML_TYPE_Q5_0: {
        int q = (i < 16 ? bits(p, 6 + i, 0, 4) : bits(p, 6 + i - 16, 4, 4)) | (bits(p, 2 + i / 8, i % 8, 1) << 4);
        return (float)(q - 16) * h16(p);
    }
    case GGML_TYPE_Q5_1: {
        int q = (i < 16 ? bits(p, 8 + i, 0, 4) : bits(p, 8 + i - 16, 4, 4)) | (bits(p, 4 + i / 8, i % 8, 1) << 4);
        return (float)q * h16(p) + h16(p + 2);
    }
    case GGML_TYPE_Q8_0: return (float)(int8_t)p[2 + i] * h16(p);
    case GGML_TYPE_Q2_K: {
        int q = bits(p, 16 + 32 * h + l, 2 * g, 2);
        int sc = bits(p, i / 16, 0, 4), m = bits(p, i / 16, 4, 4);
        return (h16(p + 80) * (float)sc) * (float)q - h16(p + 82) * (float)m;
    }
    case GGML_TYPE_Q3_K: {
        int q = bits(p, 32 + 32 * h + l, 2 * g, 2) - (bits(p, i % 32, i / 32, 1) ? 0 : 4);
        int j = i / 16;
        int s = (j < 8 ? bits(p, 96 + j, 0, 4) : bits(p, 96 + j - 8, 4, 4)) | (bits(p, 96 + 8 + j % 4, 2 * (j / 4), 2) << 4);
        return (h16(p + 108) * (float)(s - 32)) * (float)q;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        int c = i / 64, r = i % 64, s = i / 32, sc, m;
        int qoff = type == GGML_TYPE_Q4_K ? 16 : 48;
        int q = bits(p, qoff + 32 * c + r % 32, r < 32 ? 0 : 4, 4);
        if (type == GGML_TYPE_Q5_K) q += 16 * bits(p, 16 + i % 32, i / 32, 1);
        k4_scale_min(p + 4, s, &sc, &m);
        return (h16(p) * (float)sc) * (float)q - h16(p + 2) * (float)m;
    }
    case GGML_TYPE_Q6_K: {
        int lo = bits(p, 64 * h + 32 * (g % 2) + l, g < 2 ? 0 : 4, 4);
        int hi = bits(p, 128 + 32 * h + l, 2 * g, 2);
        return (h16(p + 208) * (float)(int8_t)p[192 + i / 16]) * (float)((lo | (hi << 4)) - 32);
    }
    case GGML_TYPE_IQ4_NL: {
        int q = i < 16 ? bits(p, 2 + i, 0, 4) : bits(p, 2 + i - 16, 4, 4);
        return h16(p) * (float)kvalues_iq4nl[q];
    }
    case GGML_TYPE_IQ4_XS: {
        int b = i / 32, j = i % 32;
        int ls = bits(p, 4 + b / 2, 4 * (b % 2), 4) | (((p[2] | (p[3] << 8)) >> (2 * b) & 3) << 4);
        int q = bits(p, 8 + 16 * b + j % 16, j < 16 ? 0 : 4, 4);
        return (h16(p) * (float)(ls - 32)) * (float)kvalues_iq4nl[q];
    }
    case GGML_TYPE_MXFP4: {
        int q = i < 16 ? bits(p, 1 + i, 0, 4) : bits(p, 1 + i - 16, 4, 4);
        /* E2M1(q) * 2^(e-127), computed without the doubled table: magnitudes {0,.5,1,1.5,2,3,4,6} */
        static const float e2m1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
        float v = e2m1[q & 7] * (float)ldexp(1.0, p[0] - 127);
        return (q & 8) && v != 0 ? -v : v;   /* ggml decodes code 8 ("-0") as +0 */
    }
    case GGML_TYPE_F16: return h16(p + 2 * i);
    case GGML_TYPE_BF16: return bf16_to_fp32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
    }
    return NAN;
}

/* Random block bytes with sane scales: every f16 scale field is a random finite half of magnitude
 * 2^-14..2^2; quant bytes are fully random. */
static uint16_t rand_half(void) {
    float v = (0.5f + test_rand_uniform()) * ldexpf(1.0f, (int)(test_rand_u64() % 16) - 14);
    if (test_rand_u64() & 1) v = -v;
    return fp32_to_fp16(v);
}
static void put_half(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }

static void rand_block(uint32_t type, uint8_t *p) {
    const struct quant_traits *t = quant_traits(type);
    for (int k = 0; k < t->type_size; k++) p[k] = (uint8_t)test_rand_u64();
    switch (type) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL:
        put_half(p, rand_half()); break;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        put_half(p, rand_half()); put_half(p + 2, rand_half()); break;
    case GGML_TYPE_IQ4_XS: put_half(p, rand_half()); break;
    case GGML_TYPE_Q2_K: put_half(p + 80, rand_half()); put_half(p + 82, rand_half()); break;
    case GGML_TYPE_Q3_K: put_half(p + 108, rand_half()); break;
    case GGML_TYPE_Q6_K: put_half(p + 208, rand_half()); break;
    case GGML_TYPE_MXFP4: p[0] = (uint8_t)(test_rand_u64() % 255); break;   /* 0xFF (NaN in OCP) excluded */
    case GGML_TYPE_F16: for (int k = 0; k < 2; k += 2) put_half(p + k, rand_half()); break;
    default: break;
    }
}

static int same_bits(float a, float b) { return !memcmp(&a, &b, 4); }

static void test_dequant_vs_table_decoder(void) {
    uint8_t blk[512];
    float y[256];
    for (int it = 0; it < N_QTYPES; it++) {
        uint32_t type = k_quant_types[it];
        const struct quant_traits *t = quant_traits(type);
        int n_bad = 0;
        for (int rep = 0; rep < 300; rep++) {
            rand_block(type, blk);
            dequantize_row(type, blk, y, t->block_size);
            for (int i = 0; i < t->block_size; i++)
                if (!same_bits(y[i], ref_elem(type, blk, i))) {
                    if (n_bad++ < 3)
                        fprintf(stderr, "%s elem %d: dequant %.9g table %.9g\n", t->name, i, y[i], ref_elem(type, blk, i));
                }
        }
        CHECK_MSG(n_bad == 0, "%s: %d elements differ from the table decoder", t->name, n_bad);
    }
}

/* Flip every bit of a random block in turn; the elements that change must be exactly those whose
 * table-decoded value changes, and a quant bit must move exactly one element. Also checks the worked
 * examples of GGUF-QUANTS.md 3.5 (element -> byte/bit of its quant). */
static void test_single_bit_probes(void) {
    uint8_t blk[512], blk2[512];
    float y0[256], y1[256];
    for (int it = 0; it < N_QTYPES; it++) {
        uint32_t type = k_quant_types[it];
        const struct quant_traits *t = quant_traits(type);
        int n_bad = 0;
        for (int rep = 0; rep < 4; rep++) {
            rand_block(type, blk);
            dequantize_row(type, blk, y0, t->block_size);
            for (int bit = 0; bit < 8 * t->type_size; bit++) {
                memcpy(blk2, blk, (size_t)t->type_size);
                blk2[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                if (type == GGML_TYPE_MXFP4 && blk2[0] == 0xFF) continue;   /* E8M0 NaN code, not decoded */
                dequantize_row(type, blk2, y1, t->block_size);
                for (int i = 0; i < t->block_size; i++) {
                    int moved = !same_bits(y0[i], y1[i]);
                    int expect = !same_bits(ref_elem(type, blk, i), ref_elem(type, blk2, i));
                    if (moved != expect) n_bad++;
                }
            }
        }
        CHECK_MSG(n_bad == 0, "%s: %d single-bit probe mismatches", t->name, n_bad);
    }
    /* 3.5 worked examples: Q4_K element -> (byte, low/high nibble); Q6_K element -> low-bits byte/shift,
     * high-bits byte/shift, scale byte */
    static const int q4k[][3] = {{0, 16, 0}, {31, 47, 0}, {32, 16, 4}, {77, 61, 0}, {100, 52, 4}, {200, 120, 0}, {255, 143, 4}};
    static const int q6k[][6] = {{0, 0, 0, 128, 0, 192}, {45, 45, 0, 141, 2, 194}, {100, 36, 4, 132, 6, 198},
                                 {200, 72, 4, 168, 4, 204}, {255, 127, 4, 191, 6, 207}};
    memset(blk, 0, sizeof(blk));
    put_half(blk, fp32_to_fp16(1.0f));                       /* Q4_K d = 1, dmin = 0, all sc = 1 */
    for (int k = 0; k < 4; k++) { blk[4 + k] = 1; blk[12 + k] = 1; }
    for (size_t e = 0; e < sizeof(q4k) / sizeof(q4k[0]); e++) {
        memcpy(blk2, blk, 144);
        blk2[q4k[e][1]] = (uint8_t)(1u << q4k[e][2]);
        dequantize_row(GGML_TYPE_Q4_K, blk2, y1, 256);
        for (int i = 0; i < 256; i++) CHECK(y1[i] == (i == q4k[e][0] ? 1.0f : 0.0f));
    }
    memset(blk, 0, sizeof(blk));
    for (int e = 0; e < 5; e++) {
        /* Q6_K: all quants 32 (value 0) except the probed element; only its scale byte nonzero */
        for (int k = 0; k < 64; k++) blk[128 + k] = 0xAA;    /* high bits 2 everywhere -> q = 32 */
        memset(blk, 0, 128);
        memset(blk + 192, 0, 16);
        put_half(blk + 208, fp32_to_fp16(1.0f));
        blk[q6k[e][1]] |= (uint8_t)(1u << q6k[e][2]);          /* low bits +1 */
        blk[q6k[e][3]] = (uint8_t)(blk[q6k[e][3]] ^ (3u << q6k[e][4]));   /* high bits 2 -> 1: -16 */
        blk[q6k[e][5]] = 1;
        dequantize_row(GGML_TYPE_Q6_K, blk, y1, 256);
        for (int i = 0; i < 256; i++) CHECK(y1[i] == (i == q6k[e][0] ? -15.0f : 0.0f));
        memset(blk, 0, 210);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Quantizer round trips.
 * ------------------------------------------------------------------------------------------------ */
enum { DIST_NORMAL, DIST_UNIFORM, DIST_OUTLIERS, DIST_EQUAL, DIST_TINY, DIST_LARGE, DIST_COUNT };
static const char *k_dist_names[] = {"normal", "uniform", "outliers", "all-equal", "tiny", "large"};

static void fill_row(int dist, float *x, int n) {
    float c = 0.1f + test_rand_uniform();
    for (int i = 0; i < n; i++) {
        switch (dist) {
        case DIST_NORMAL: x[i] = 0.02f * test_rand_normal(); break;
        case DIST_UNIFORM: x[i] = 2.0f * test_rand_uniform() - 1.0f; break;
        case DIST_OUTLIERS:
            x[i] = test_rand_normal();
            if (test_rand_u64() % 64 == 0) x[i] *= 30.0f;
            break;
        case DIST_EQUAL: x[i] = c; break;
        case DIST_TINY: x[i] = 1e-5f * test_rand_normal(); break;
        case DIST_LARGE: x[i] = 2000.0f * test_rand_normal(); break;   /* every scale still fits in f16 */
        }
    }
}

/* Upper bounds on the relative RMS error sqrt(sum err^2 / sum x^2) of a round trip, per type, for the
 * normal / uniform / outlier rows (measured values are about 1/2..2/3 of these). */
static double rt_bound(uint32_t type, int dist) {
    int heavy = dist == DIST_OUTLIERS;
    switch (type) {
    case GGML_TYPE_Q8_0: return heavy ? 0.018 : 0.008;
    case GGML_TYPE_Q6_K: return heavy ? 0.045 : 0.025;
    case GGML_TYPE_Q5_0: return heavy ? 0.12 : 0.06;
    case GGML_TYPE_Q5_1: return heavy ? 0.08 : 0.05;
    case GGML_TYPE_Q5_K: return heavy ? 0.075 : 0.05;
    case GGML_TYPE_Q4_0: return heavy ? 0.17 : 0.11;
    case GGML_TYPE_Q4_1: return heavy ? 0.16 : 0.10;
    case GGML_TYPE_Q4_K: return heavy ? 0.13 : 0.095;
    case GGML_TYPE_IQ4_NL: return heavy ? 0.15 : 0.10;
    case GGML_TYPE_IQ4_XS: return heavy ? 0.15 : 0.10;
    case GGML_TYPE_MXFP4: return heavy ? 0.23 : 0.19;
    case GGML_TYPE_Q3_K: return 0.20;
    /* Q2_K on rows with outliers has a heavy tail (a 2-bit grid under a 4-bit sub-block scale cannot hold a few
     * large values; the bytes equal ggml's, test_quant_oracle.py): over 3,000 seeds x 3 rows the worst was
     * 0.476, the 99.9th percentile 0.426 */
    case GGML_TYPE_Q2_K: return heavy ? 0.55 : 0.38;
    case GGML_TYPE_F16: return 0.0003;
    case GGML_TYPE_BF16: return 0.0025;
    }
    return 0;
}

static int all_finite(const float *y, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(y[i])) return 0;
    return 1;
}

static void test_round_trip(void) {
    static float x[N_ROW], y[N_ROW], y2[N_ROW];
    static uint8_t q[N_ROW * 4], q2[N_ROW * 4];
    for (int it = 0; it < N_QTYPES; it++) {
        uint32_t type = k_quant_types[it];
        const char *name = quant_traits(type)->name;
        for (int dist = 0; dist < DIST_COUNT; dist++) {
            double worst = 0;
            for (int rep = 0; rep < 3; rep++) {
                fill_row(dist, x, N_ROW);
                CHECK(quantize_row_ref(type, x, q, N_ROW) == VLLMC_OK);
                dequantize_row(type, q, y, N_ROW);
                CHECK_MSG(all_finite(y, N_ROW), "%s %s: non-finite output", name, k_dist_names[dist]);
                double se = 0, sx = 0, maxerr = 0, amax = 0;
                for (int i = 0; i < N_ROW; i++) {
                    double e = (double)y[i] - x[i];
                    se += e * e;
                    sx += (double)x[i] * x[i];
                    maxerr = fmax(maxerr, fabs(e));
                    amax = fmax(amax, fabs(x[i]));
                }
                double rel = sqrt(se / sx);
                if (rel > worst) worst = rel;
                if (dist == DIST_EQUAL) {
                    /* a constant row comes back within 1% (scale or min carries it); MXFP4 can only
                     * reach {4, 6} * 2^k near it, and ggml's e = floor(log2 amax) - 2 saturates at 1.5 * 2^floor: up to
                     * 25% off */
                    double b = type == GGML_TYPE_MXFP4 ? 0.26 : 0.01;
                    CHECK_MSG(maxerr <= b * amax + 1e-7, "%s all-equal: max err %g of %g", name, maxerr, amax);
                } else if (dist == DIST_TINY) {
                    /* |x| ~ 1e-5: the f16 scales are subnormal or flush to 0 (Q6_K, IQ4_XS give all zeros,
                     * as in ggml), so only boundedness is required */
                    CHECK_MSG(maxerr <= 4 * amax, "%s tiny: max err %g of %g", name, maxerr, amax);
                } else {
                    int d = dist == DIST_LARGE ? DIST_NORMAL : dist;
                    CHECK_MSG(rel <= rt_bound(type, d), "%s %s: rel rms err %g > %g", name, k_dist_names[dist], rel,
                              rt_bound(type, d));
                }
                /* symmetric legacy types and Q8_0: the largest element is reproduced within one step */
                if (type == GGML_TYPE_Q8_0 && dist != DIST_TINY)
                    CHECK_MSG(maxerr <= 0.57 * amax / 127, "Q8_0 %s: max err %g", k_dist_names[dist], maxerr);
                /* idempotence: quantizing the dequantized row gives the same blocks (exact for these) */
                if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q5_0 ||
                    type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_MXFP4) {
                    CHECK(quantize_row_ref(type, y, q2, N_ROW) == VLLMC_OK);
                    CHECK_MSG(!memcmp(q, q2, quant_row_size(type, N_ROW)), "%s %s: re-quantization changed bytes",
                              name, k_dist_names[dist]);
                } else {
                    /* others: dequant(quant(dequant(quant(x)))) stays as close to x */
                    CHECK(quantize_row_ref(type, y, q2, N_ROW) == VLLMC_OK);
                    dequantize_row(type, q2, y2, N_ROW);
                    double se2 = 0;
                    for (int i = 0; i < N_ROW; i++) se2 += ((double)y2[i] - x[i]) * ((double)y2[i] - x[i]);
                    /* Q2_K with outliers re-fits its scales to the already-rounded values: measured up to 2.11x
                     * the first error over 3,000 seeds (every other type and distribution <= 1.36x) */
                    const double drift = type == GGML_TYPE_Q2_K && dist == DIST_OUTLIERS ? 3.0 : 1.5;
                    CHECK_MSG(sqrt(se2 / sx) <= drift * rel + 0.002, "%s %s: second round trip drifted (%g vs %g)",
                              name, k_dist_names[dist], sqrt(se2 / sx), rel);
                }
            }
            if (getenv("VLLMC_QUANT_VERBOSE")) printf("  %-7s %-9s rel rms err %.5f\n", name, k_dist_names[dist], worst);
        }
    }
}

static void test_degenerate(void) {
    static float x[N_ROW], y[N_ROW];
    static uint8_t q[N_ROW * 4];
    for (int it = 0; it < N_QTYPES; it++) {
        uint32_t type = k_quant_types[it];
        const char *name = quant_traits(type)->name;
        /* all zeros: exact zeros back, no NaN */
        memset(x, 0, sizeof(x));
        CHECK(quantize_row_ref(type, x, q, N_ROW) == VLLMC_OK);
        dequantize_row(type, q, y, N_ROW);
        int ok = 1;
        for (int i = 0; i < N_ROW; i++) ok &= y[i] == 0.0f;
        CHECK_MSG(ok, "%s: zero row does not come back as zeros", name);
        /* zeros with one spike per block, and sub-blocks of zeros next to big values */
        for (int i = 0; i < N_ROW; i++) x[i] = (i % 37 == 0) ? 5.0f : ((i / 16) % 3 == 0 ? 0.0f : 1e-3f * test_rand_normal());
        CHECK(quantize_row_ref(type, x, q, N_ROW) == VLLMC_OK);
        dequantize_row(type, q, y, N_ROW);
        CHECK_MSG(all_finite(y, N_ROW), "%s: non-finite output on sparse row", name);
        /* values at the f16 edge: |x| up to 30000 must stay finite (scales are <= max|x|) */
        for (int i = 0; i < N_ROW; i++) x[i] = 30000.0f * (2.0f * test_rand_uniform() - 1.0f);
        CHECK(quantize_row_ref(type, x, q, N_ROW) == VLLMC_OK);
        dequantize_row(type, q, y, N_ROW);
        CHECK_MSG(all_finite(y, N_ROW), "%s: non-finite output for |x| <= 3e4", name);
        /* denormal-scale rows: finite, and bounded by the input range (plus one f16 step) */
        for (int i = 0; i < N_ROW; i++) x[i] = 1e-9f * test_rand_normal();
        CHECK(quantize_row_ref(type, x, q, N_ROW) == VLLMC_OK);
        dequantize_row(type, q, y, N_ROW);
        float m = 0;
        for (int i = 0; i < N_ROW; i++) m = fmaxf(m, fabsf(y[i]));
        CHECK_MSG(all_finite(y, N_ROW) && m < 1e-4f, "%s: tiny row gave max %g", name, m);
        /* non-finite inputs: the blocks are unspecified (as in ggml) but the call must be memory-safe
         * (this runs under ASan/UBSan in `make asan`) and other blocks of the row unaffected */
        fill_row(DIST_NORMAL, x, N_ROW);
        x[3] = NAN; x[300] = INFINITY; x[1000] = -INFINITY; x[2047] = NAN;
        for (int i = 2048; i < 2048 + 256; i++) x[i] = NAN;
        CHECK(quantize_row_ref(type, x, q, N_ROW) == VLLMC_OK);
        dequantize_row(type, q, y, N_ROW);
        int bs = quant_traits(type)->block_size, ok_tail = 1;
        for (int i = 2048 + 256 + (bs > 256 ? bs : 256); i < N_ROW; i++) ok_tail &= isfinite(y[i]) && fabsf(y[i] - x[i]) < 0.05f;
        CHECK_MSG(ok_tail, "%s: blocks after non-finite inputs were disturbed", name);
    }
}

static void test_plain_conversions_and_errors(void) {
    static const struct { float f; uint16_t h, b; } cases[] = {
        {1.0f, 0x3C00, 0x3F80}, {-2.0f, 0xC000, 0xC000}, {65504.0f, 0x7BFF, 0x4780}, {65520.0f, 0x7C00, 0x4780},
        {5.9604645e-08f, 0x0001, 0x3380}, {2.9802322e-08f, 0x0000, 0x3300}, {8.940697e-08f, 0x0002, 0x33C0},
        {0.1f, 0x2E66, 0x3DCD}, {1.00048828125f, 0x3C00, 0x3F80}, {1.00146484375f, 0x3C02, 0x3F80},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint16_t h, b;
        CHECK(quantize_row_ref(GGML_TYPE_F16, &cases[k].f, &h, 1) == VLLMC_OK);
        CHECK(quantize_row_ref(GGML_TYPE_BF16, &cases[k].f, &b, 1) == VLLMC_OK);
        CHECK_MSG(h == cases[k].h, "f16(%g) = 0x%04x, want 0x%04x", cases[k].f, h, cases[k].h);
        CHECK_MSG(b == cases[k].b, "bf16(%g) = 0x%04x, want 0x%04x", cases[k].f, b, cases[k].b);
    }
    float x[512] = {0};
    uint8_t q[2048];
    CHECK(quantize_row_ref(GGML_TYPE_Q4_K, x, q, 100) == VLLMC_ERR_INVALID);
    CHECK(quantize_row_ref(GGML_TYPE_Q4_0, x, q, 48) == VLLMC_ERR_INVALID);
    CHECK(quantize_row_ref(GGML_TYPE_IQ2_XXS, x, q, 256) == VLLMC_ERR_UNSUPPORTED);
    CHECK(quantize_row_ref(GGML_TYPE_Q8_K, x, q, 256) == VLLMC_ERR_UNSUPPORTED);
    CHECK(quantize_row_ref(4, x, q, 32) == VLLMC_ERR_INVALID);
    CHECK(quantize_row_ref(1000, x, q, 32) == VLLMC_ERR_INVALID);
    CHECK(quant_can_quantize(GGML_TYPE_Q6_K) && !quant_can_quantize(GGML_TYPE_IQ1_S));
    for (int it = 0; it < N_QTYPES; it++) CHECK(quant_can_quantize(k_quant_types[it]));
    /* E8M0 half scale: 2^(e-128) */
    CHECK(quant_e8m0_to_fp32_half(127) == 0.5f && quant_e8m0_to_fp32_half(128) == 1.0f);
    CHECK(quant_e8m0_to_fp32_half(0) == ldexpf(1.0f, -128) && quant_e8m0_to_fp32_half(1) == ldexpf(1.0f, -127));
    CHECK(quant_e8m0_to_fp32_half(254) == ldexpf(1.0f, 126));
}

/* The lane-parallel scale searches (used by quantize_row_ref; AVX2 where the CPU has it, and the SSE2 build)
 * give the same bytes as the plain scalar searches, on every distribution including exact zeros, constant
 * groups and grid values (ties). */
static void test_lanes_match_scalar(void) {
    static float x[N_ROW];
    static uint8_t q1[N_ROW], q2[N_ROW];
    const uint32_t types[] = {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL,
                              GGML_TYPE_IQ4_XS};
    for (size_t it = 0; it < sizeof(types) / sizeof(types[0]); it++) {
        uint32_t type = types[it];
        int iq4 = type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_IQ4_XS;
        /* IQ4_NL rows of 4096 + 96 elements also exercise the scalar tail after the groups of 8 blocks */
        int64_t n = type == GGML_TYPE_IQ4_NL ? N_ROW - 160 : N_ROW;
        int n_bad = 0;
        for (int rep = 0; rep < 12; rep++) {
            int dist = rep % (DIST_COUNT + 1);
            if (dist == DIST_COUNT) {   /* grid values with zero and constant runs */
                for (int i = 0; i < N_ROW; i++) x[i] = (float)((int)(test_rand_u64() % 17) - 8) * 0.125f;
                for (int i = 0; i < N_ROW; i += 64) memset(x + i, 0, 16 * sizeof(float));
                for (int i = 32; i < N_ROW; i += 256) for (int k = 0; k < 32; k++) x[i + k] = 0.5f;
            } else {
                fill_row(dist, x, N_ROW);
            }
            int64_t nb = n / quant_traits(type)->block_size;
            void (*quant)(uint32_t, const float *, void *, int64_t, int) = iq4 ? quant_ref_iq4 : quant_ref_kquant;
            quant(type, x, q1, nb, QUANT_SEARCH_SCALAR);
            quant(type, x, q2, nb, QUANT_SEARCH_BEST);
            n_bad += memcmp(q1, q2, quant_row_size(type, n)) != 0;
            quant(type, x, q2, nb, QUANT_SEARCH_SSE2);
            n_bad += memcmp(q1, q2, quant_row_size(type, n)) != 0;
        }
        CHECK_MSG(n_bad == 0, "%s: lane-parallel search differs from scalar (%d row/ISA cases)", quant_traits(type)->name, n_bad);
    }
}

/* Known answers from llama.cpp: rows from an integer generator that C and numpy evaluate identically
 * (every value an exact f32: uniform 24-bit values, x16 outliers, zero groups, constant groups, rows scaled
 * by 2^-k), quantized by ggml_quantize_chunk (llama-quantize's call, no imatrix); FNV-1a 64 of the output.
 * Keeps byte identity checked in C-only runs (sanitizer builds). Regenerate: tests/tools/gen_quant_golden.py */
#define GOLDEN_ROWS 8
#define GOLDEN_PER_ROW 1024
static void golden_rows(float *x) {
    uint32_t s = 12345;
    for (int i = 0; i < GOLDEN_ROWS * GOLDEN_PER_ROW; i++) {
        s = s * 1664525u + 1013904223u;
        float v = (float)((int32_t)(s >> 8) - 0x800000) * 0x1p-23f;
        if (i % 17 == 5) v = v * 16.0f;
        if ((i / 32) % 11 == 3) v = 0.0f;
        if ((i / 16) % 13 == 7) v = 0.25f;
        x[i] = v * ldexpf(1.0f, -((i / GOLDEN_PER_ROW) % 8));
    }
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void test_golden_vs_llama_cpp(void) {
    static const struct { uint32_t type; uint64_t hash; } golden[] = {
    /* generated by tests/tools/gen_quant_golden.py (llama-cpp-python 0.3.36) */
    {GGML_TYPE_Q4_0, 0x1766adec2b8fef3bull},
    {GGML_TYPE_Q4_1, 0xa62fb33e10255720ull},
    {GGML_TYPE_Q5_0, 0x740874c051e8dc86ull},
    {GGML_TYPE_Q5_1, 0x5138dfa163201123ull},
    {GGML_TYPE_Q8_0, 0x664f3590faba80e6ull},
    {GGML_TYPE_Q2_K, 0xc9442837568e3032ull},
    {GGML_TYPE_Q3_K, 0x6d6f63e3874f65ceull},
    {GGML_TYPE_Q4_K, 0x7f54a56ee904f488ull},
    {GGML_TYPE_Q5_K, 0xca26e798d5694e49ull},
    {GGML_TYPE_Q6_K, 0x1d507a65efadb480ull},
    {GGML_TYPE_IQ4_NL, 0x0087ba9cedb5a671ull},
    {GGML_TYPE_IQ4_XS, 0xfde6c06f1661f015ull},
    {GGML_TYPE_MXFP4, 0x848f55bdc0f4997cull},
    };
    static float x[GOLDEN_ROWS * GOLDEN_PER_ROW];
    static uint8_t q[GOLDEN_ROWS * GOLDEN_PER_ROW * 2];
    golden_rows(x);
    for (size_t k = 0; k < sizeof(golden) / sizeof(golden[0]); k++) {
        uint32_t type = golden[k].type;
        size_t rs = quant_row_size(type, GOLDEN_PER_ROW);
        for (int r = 0; r < GOLDEN_ROWS; r++)
            CHECK(quantize_row_ref(type, x + r * GOLDEN_PER_ROW, q + r * rs, GOLDEN_PER_ROW) == VLLMC_OK);
        uint64_t h = fnv1a64(q, GOLDEN_ROWS * rs);
        CHECK_MSG(h == golden[k].hash, "%s: output hash %016llx, llama.cpp's %016llx", quant_traits(type)->name,
                  (unsigned long long)h, (unsigned long long)golden[k].hash);
    }
}

/* Quantizing rows concurrently gives the same bytes as one thread (no shared mutable state). */
struct mt_job { uint32_t type; const float *x; uint8_t *q; int n_rows; };
static void *mt_worker(void *arg) {
    struct mt_job *j = arg;
    size_t rs = quant_row_size(j->type, N_ROW);
    for (int r = 0; r < j->n_rows; r++) quantize_row_ref(j->type, j->x + (size_t)r * N_ROW, j->q + r * rs, N_ROW);
    return NULL;
}
static void test_threads(void) {
    enum { ROWS = 8 };
    static float x[ROWS * N_ROW];
    static uint8_t q1[ROWS * N_ROW], q2[ROWS * N_ROW];
    const uint32_t types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q3_K};
    for (size_t it = 0; it < sizeof(types) / sizeof(types[0]); it++) {
        uint32_t type = types[it];
        size_t rs = quant_row_size(type, N_ROW);
        fill_row(DIST_NORMAL, x, ROWS * N_ROW);
        struct mt_job all = {type, x, q1, ROWS};
        mt_worker(&all);
        pthread_t th[2];
        struct mt_job j[2] = {{type, x, q2, ROWS / 2}, {type, x + (ROWS / 2) * N_ROW, q2 + (ROWS / 2) * rs, ROWS / 2}};
        for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, mt_worker, &j[k]);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        CHECK_MSG(!memcmp(q1, q2, ROWS * rs), "%s: threaded quantization differs", quant_traits(type)->name);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Modes for the oracle tests and the benchmark.
 * ------------------------------------------------------------------------------------------------ */
static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static int write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(buf, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int mode_dequant(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s dequant TYPE IN.bin OUT.f32\n", argv[0]); return 2; }
    uint32_t type = type_by_name(argv[2]);
    const struct quant_traits *t = quant_traits(type);
    if (!t || !t->supported) { fprintf(stderr, "unsupported type %s\n", argv[2]); return 2; }
    size_t n_bytes;
    uint8_t *in = read_file(argv[3], &n_bytes);
    if (!in || n_bytes % (size_t)t->type_size) { fprintf(stderr, "bad input %s\n", argv[3]); return 2; }
    int64_t n = (int64_t)(n_bytes / t->type_size) * t->block_size;
    float *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    dequantize_row(type, in, out, n);
    int rc = write_file(argv[4], out, (size_t)n * sizeof(float)) ? 1 : 0;
    free(in);
    free(out);
    return rc;
}

static int mode_quantize(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s quantize TYPE IN.f32 OUT.bin\n", argv[0]); return 2; }
    uint32_t type = type_by_name(argv[2]);
    size_t n_bytes;
    float *in = read_file(argv[3], &n_bytes);
    if (!in || n_bytes % 4) { fprintf(stderr, "bad input %s\n", argv[3]); return 2; }
    int64_t n = (int64_t)(n_bytes / 4);
    uint64_t out_size = quant_row_size(type, n);
    uint8_t *out = malloc(out_size ? out_size : 1);
    vllmc_status st = quantize_row_ref(type, in, out, n);
    if (st != VLLMC_OK) { fprintf(stderr, "quantize: %s\n", vllmc_last_error()); return 1; }
    int rc = write_file(argv[4], out, out_size) ? 1 : 0;
    free(in);
    free(out);
    return rc;
}

static int mode_bench(int argc, char **argv) {
    double mb = 64;
    uint32_t types[GGML_TYPE_COUNT];
    int n_types = 0;
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "-n") && a + 1 < argc) mb = atof(argv[++a]);
        else if (type_by_name(argv[a]) != UINT32_MAX) types[n_types++] = type_by_name(argv[a]);
        else { fprintf(stderr, "unknown type %s\n", argv[a]); return 2; }
    }
    if (!n_types) { types[0] = GGML_TYPE_Q4_K; types[1] = GGML_TYPE_Q6_K; n_types = 2; }
    const int64_t n_row = 4096;
    int64_t n_rows = (int64_t)(mb * 1048576.0 / 4 / n_row);
    if (n_rows < 1) n_rows = 1;
    float *x = malloc((size_t)(n_rows * n_row) * sizeof(float));
    uint8_t *q = malloc((size_t)n_row * 4);
    test_seed(12345);
    for (int64_t i = 0; i < n_rows * n_row; i++) x[i] = 0.02f * test_rand_normal();
    for (int k = 0; k < n_types; k++) {
        double t0 = vllmc_time_s();
        for (int64_t r = 0; r < n_rows; r++) quantize_row_ref(types[k], x + r * n_row, q, n_row);
        double dt = vllmc_time_s() - t0;
        printf("quantize %-7s %8.1f MB/s of f32 input (%.0f MB in %.2f s, 1 thread)\n", quant_traits(types[k])->name,
               (double)(n_rows * n_row * 4) / 1e6 / dt, (double)(n_rows * n_row * 4) / 1e6, dt);
        /* dequantize the last quantized row over and over (stays in L1/L2): f32 output rate */
        float *y = malloc((size_t)n_row * sizeof(float));
        t0 = vllmc_time_s();
        for (int64_t r = 0; r < n_rows * 4; r++) dequantize_row(types[k], q, y, n_row);
        dt = vllmc_time_s() - t0;
        printf("dequant  %-7s %8.1f MB/s of f32 output\n", quant_traits(types[k])->name,
               (double)(n_rows * 4 * n_row * 4) / 1e6 / dt);
        free(y);
    }
    free(x);
    free(q);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "dequant")) return mode_dequant(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "quantize")) return mode_quantize(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "bench")) return mode_bench(argc, argv);
    test_seed_auto("test_quant_formats");
    test_dequant_vs_table_decoder();
    test_single_bit_probes();
    test_plain_conversions_and_errors();
    test_round_trip();
    test_degenerate();
    test_lanes_match_scalar();
    test_golden_vs_llama_cpp();
    test_threads();
    return test_finish("test_quant_formats");
}
