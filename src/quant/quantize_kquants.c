/* Reference K-quant quantizers (Q2_K..Q6_K) without an importance matrix, byte-identical to what
 * llama-quantize writes (its quantize_qN_K take the *_ref path when no imatrix is given).
 * Invariant: every float expression keeps ggml's association and operation order (GGUF-QUANTS.md
 * section 5); no state outside the call, so rows may be quantized concurrently. */
#include "quant.h"
#include "blocks.h"
#include "quantize_priv.h"

#include <math.h>

/* make_qx_quants with weights x^2 (rmse_type 1) and no imatrix: symmetric scale search over
 * iscale = -(nmax + 0.1*t)/max, t in -9..9. L receives l + nmax. Returns the scale (sign opposite
 * to the largest-magnitude element). */
static float kq_make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = VLLMC_MAX(-nmax, VLLMC_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale * x[i]);
            l = VLLMC_MAX(-nmax, VLLMC_MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = quant_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + VLLMC_MAX(-nmax, VLLMC_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with do_rmse: initial RNE quantization at -nmax/max, then up to 5 coordinate-descent
 * passes that move one element at a time while (sum w l x)^2 / (sum w l^2) improves. L gets l + nmax. */
static float kq_make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = VLLMC_MAX(-nmax, VLLMC_MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = quant_nearest_int(x[i] * sl2 / slx);
                new_l = VLLMC_MAX(-nmax, VLLMC_MIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* make_qkx2_quants: asymmetric x ~ scale*L + min (min <= 0), L in 0..nmax. Tries nstep+1 inverse scales
 * (rmin + rdelta*k + nmax)/(max - min) and a weighted 2-parameter least-squares refit for each; keeps the
 * lowest weighted error (absolute if use_mad, else squared). *the_min receives -min >= 0.
 * Note: as in ggml, `min` is updated when a fit is accepted, and later steps quantize (and form their
 * inverse scale) against that updated min, not the row minimum. */
static float kq_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L,
                                 float *the_min, float rmin, float rdelta, int nstep, int use_mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)VLLMC_MAX(0, VLLMC_MIN(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale * (x[i] - min));
            l = VLLMC_MAX(0, VLLMC_MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float wl = w[i] * (float)l;
            sum_l += wl;
            sum_l2 += wl * (float)l;
            sum_xl += wl * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 2-bit values L[0..255] (each < 4): qs[32h + l] holds L[128h + 32g + l] in bits 2g..2g+1. */
static void kq_pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *q = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
        }
}

static void kq_q2_K(const float *x, void *dst, int64_t nb, int lanes) {
    block_q2_K *y = (block_q2_K *)dst;
    uint8_t L[QK_K];
    float weights[QK_K], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        block_q2_K b;
        float max_scale = 0, max_min = 0;
        for (int l = 0; l < QK_K; l++) weights[l] = fabsf(x[l]);
        if (lanes) {
            quant_lanes_qkx2(lanes, 16, 3, x, weights, L, scales, mins, -0.5f, 0.1f, 15, 1);
            quant_lanes_qkx2(lanes, 16, 3, x + 128, weights + 128, L + 128, scales + 8, mins + 8, -0.5f, 0.1f, 15, 1);
        } else {
            for (int j = 0; j < QK_K / 16; j++)
                scales[j] = kq_make_qkx2_quants(16, 3, x + 16 * j, weights + 16 * j, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; j++) b.scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            b.d = fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; j++) b.scales[j] = 0;
            b.d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; j++)
                b.scales[j] = (uint8_t)(b.scales[j] | ((unsigned)quant_nearest_int(iscale * mins[j]) << 4));
            b.dmin = fp32_to_fp16(max_min / q4scale);
        } else {
            b.dmin = fp32_to_fp16(0.f);
        }
        /* Re-quantize against the stored (rounded) scales. */
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = fp16_to_fp32(b.d) * (float)(b.scales[j] & 0xF);
            if (d == 0) continue;
            const float dm = fp16_to_fp32(b.dmin) * (float)(b.scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                int l = quant_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)VLLMC_MAX(0, VLLMC_MIN(3, l));
            }
        }
        kq_pack_2bit(L, b.qs);
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void kq_q3_K(const float *x, void *dst, int64_t nb, int lanes) {
    block_q3_K *y = (block_q3_K *)dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        block_q3_K b;
        float max_scale = 0, amax = 0;
        if (lanes) {
            quant_lanes_q3(lanes, 16, 4, x, L, scales);
            quant_lanes_q3(lanes, 16, 4, x + 128, L + 128, scales + 8);
        } else {
            for (int j = 0; j < QK_K / 16; j++) scales[j] = kq_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(b.scales, 0, sizeof(b.scales));
        if (max_scale != 0) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int8_t l8 = (int8_t)quant_nearest_int(iscale * scales[j]);
                int l = VLLMC_MAX(-32, VLLMC_MIN(31, (int)l8)) + 32;   /* 6-bit biased scale 0..63 */
                if (j < 8) b.scales[j] = (uint8_t)(l & 0xF);
                else b.scales[j - 8] = (uint8_t)(b.scales[j - 8] | ((l & 0xF) << 4));
                b.scales[j % 4 + 8] = (uint8_t)(b.scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
            }
            b.d = fp32_to_fp16(1 / iscale);
        } else {
            b.d = fp32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int lo = j < 8 ? (b.scales[j] & 0xF) : (b.scales[j - 8] >> 4);
            int sc = (lo | (((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            float d = fp16_to_fp32(b.d) * (float)sc;
            if (d == 0) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = quant_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(VLLMC_MAX(-4, VLLMC_MIN(3, l)) + 4);
            }
        }
        /* hmask bit (i/32) of byte i%32 set iff L >= 4 (no -4 on dequant); qs keeps L mod 4. */
        uint8_t L2[QK_K];
        memset(b.hmask, 0, sizeof(b.hmask));
        for (int j = 0; j < QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                b.hmask[j % 32] = (uint8_t)(b.hmask[j % 32] | (1u << (j / 32)));
                l -= 4;
            }
            L2[j] = (uint8_t)l;
        }
        kq_pack_2bit(L2, b.qs);
        memcpy(&y[i], &b, sizeof(b));
    }
}

/* Q4_K / Q5_K share everything but nmax, the search grid and the packing of the 5th bit. */
static void kq_quant_q45_K(const float *x, int nmax, float rmin, int nstep, int lanes, uint8_t *L /* [QK_K] */,
                           ggml_half *d_out, ggml_half *dmin_out, uint8_t *sc_out /* [12] */) {
    float weights[QK_K], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[32 * j + l] = av_x + fabsf(x[32 * j + l]);
    }
    if (lanes) {
        quant_lanes_qkx2(lanes, 32, nmax, x, weights, L, scales, mins, rmin, 0.1f, nstep, 0);
    } else {
        for (int j = 0; j < QK_K / 32; j++)
            scales[j] = kq_make_qkx2_quants(32, nmax, x + 32 * j, weights + 32 * j, L + 32 * j, &mins[j], rmin, 0.1f,
                                            nstep, 0);
    }
    for (int j = 0; j < QK_K / 32; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls = VLLMC_MIN(63, ls);
        lm = VLLMC_MIN(63, lm);
        if (j < 4) {
            sc_out[j] = ls;
            sc_out[j + 4] = lm;
        } else {
            sc_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            sc_out[j - 4] = (uint8_t)(sc_out[j - 4] | ((ls >> 4) << 6));
            sc_out[j] = (uint8_t)(sc_out[j] | ((lm >> 4) << 6));
        }
    }
    *d_out = fp32_to_fp16(max_scale / 63.f);
    *dmin_out = fp32_to_fp16(max_min / 63.f);
    /* Re-quantize against the stored (rounded) scales and mins. */
    for (int j = 0; j < QK_K / 32; j++) {
        int sc, m;
        if (j < 4) {
            sc = sc_out[j] & 63;
            m = sc_out[j + 4] & 63;
        } else {
            sc = (sc_out[j + 4] & 0xF) | ((sc_out[j - 4] >> 6) << 4);
            m = (sc_out[j + 4] >> 4) | ((sc_out[j] >> 6) << 4);
        }
        const float d = fp16_to_fp32(*d_out) * (float)sc;
        if (d == 0) continue;
        const float dm = fp16_to_fp32(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            int l = quant_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)VLLMC_MAX(0, VLLMC_MIN(nmax, l));
        }
    }
}

static void kq_q4_K(const float *x, void *dst, int64_t nb, int lanes) {
    block_q4_K *y = (block_q4_K *)dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        block_q4_K b;
        memset(&b, 0, sizeof(b));
        kq_quant_q45_K(x, 15, -1.f, 20, lanes, L, &b.d, &b.dmin, b.scales);
        /* chunk c of 32 bytes: low nibble = element 64c + l, high nibble = element 64c + 32 + l */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void kq_q5_K(const float *x, void *dst, int64_t nb, int lanes) {
    block_q5_K *y = (block_q5_K *)dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        block_q5_K b;
        memset(&b, 0, sizeof(b));
        kq_quant_q45_K(x, 31, -0.5f, 15, lanes, L, &b.d, &b.dmin, b.scales);
        /* as Q4_K, and bit 4 of element 32s + l goes to bit s of qh[l] */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                if (l1 > 15) { l1 -= 16; b.qh[l] = (uint8_t)(b.qh[l] | (1u << (2 * c))); }
                if (l2 > 15) { l2 -= 16; b.qh[l] = (uint8_t)(b.qh[l] | (2u << (2 * c))); }
                b.qs[32 * c + l] = (uint8_t)(l1 | (l2 << 4));
            }
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void kq_q6_K(const float *x, void *dst, int64_t nb, int lanes) {
    block_q6_K *y = (block_q6_K *)dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        block_q6_K b;
        float max_scale = 0, max_abs_scale = 0;
        if (lanes) {
            quant_lanes_qx(lanes, 16, 32, x, L, scales);
            quant_lanes_qx(lanes, 16, 32, x + 128, L + 128, scales + 8);
        } else {
            for (int ib = 0; ib < QK_K / 16; ib++) scales[ib] = kq_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
        }
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float scale = scales[ib];
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        memset(&b, 0, sizeof(b));
        if (max_abs_scale < QUANT_GROUP_MAX_EPS) {   /* all-zero block: d = 0, every byte 0 */
            memcpy(&y[i], &b, sizeof(b));
            continue;
        }
        float iscale = -128.f / max_scale;
        b.d = fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++)
            b.scales[ib] = (int8_t)VLLMC_MIN(127, quant_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; j++) {
            float d = fp16_to_fp32(b.d) * (float)b.scales[j];
            if (d == 0) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = quant_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(VLLMC_MAX(-32, VLLMC_MIN(31, l)) + 32);
            }
        }
        /* element 128h + 32g + l: low nibble in ql[64h + 32(g%2) + l] (high half if g >= 2),
         * bits 4..5 in qh[32h + l] at bits 2g..2g+1 */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *q = L + 128 * h + l;
                b.ql[64 * h + l] = (uint8_t)((q[0] & 0xF) | ((q[64] & 0xF) << 4));
                b.ql[64 * h + 32 + l] = (uint8_t)((q[32] & 0xF) | ((q[96] & 0xF) << 4));
                b.qh[32 * h + l] = (uint8_t)((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
            }
        memcpy(&y[i], &b, sizeof(b));
    }
}

void quant_ref_kquant(uint32_t type, const float *x, void *dst, int64_t nb, int lanes) {
    switch (type) {
    case GGML_TYPE_Q2_K: kq_q2_K(x, dst, nb, lanes); break;
    case GGML_TYPE_Q3_K: kq_q3_K(x, dst, nb, lanes); break;
    case GGML_TYPE_Q4_K: kq_q4_K(x, dst, nb, lanes); break;
    case GGML_TYPE_Q5_K: kq_q5_K(x, dst, nb, lanes); break;
    case GGML_TYPE_Q6_K: kq_q6_K(x, dst, nb, lanes); break;
    default: VLLMC_ASSERT(!"quant_ref_kquant: not a K-quant");
    }
}
