/* Reference weight quantizers without an importance matrix: the legacy 32-element types, IQ4_NL,
 * IQ4_XS, MXFP4 and the plain float types, plus the quantize_row_ref dispatcher (K-quants live in
 * quantize_kquants.c). Output is byte-identical to llama-quantize's (ggml_quantize_chunk with no imatrix).
 * Invariant: ggml's float operation order is kept; no state outside the call (thread-safe). */
#include "quant.h"
#include "blocks.h"
#include "quantize_priv.h"

#include <float.h>
#include <math.h>

/* ---- legacy types (GGUF-QUANTS.md 5.2) ---- */

/* The signed element of largest magnitude (first one on ties) and its magnitude. */
static float qref_signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

static void qref_q4_0(const float *x, block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        const float max = qref_signed_absmax(x, 32, &amax);
        const float d = max / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        block_q4_0 b;
        b.d = fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            /* x*id + 8.5 >= 0.5, so truncation is round-half-up of x/d + 8 */
            int q0 = VLLMC_MIN(15, (int8_t)quant_trunc_int(x[j] * id + 8.5f));
            int q1 = VLLMC_MIN(15, (int8_t)quant_trunc_int(x[j + 16] * id + 8.5f));
            b.qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void qref_min_max(const float *x, int n, float *min_out, float *max_out) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

static void qref_q4_1(const float *x, block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min, max;
        qref_min_max(x, 32, &min, &max);
        const float d = (max - min) / 15;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        block_q4_1 b;
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = VLLMC_MIN(15, (int8_t)quant_trunc_int((x[j] - min) * id + 0.5f));
            int q1 = VLLMC_MIN(15, (int8_t)quant_trunc_int((x[j + 16] - min) * id + 0.5f));
            b.qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
        memcpy(&y[i], &b, sizeof(b));
    }
}

/* Q5_x: low nibbles as Q4_x, bit 4 of element j goes to bit j of the little-endian u32 qh. */
static void qref_store_qh(uint8_t *qh_bytes, uint32_t qh) {
    for (int k = 0; k < 4; k++) qh_bytes[k] = (uint8_t)(qh >> (8 * k));
}

static void qref_q5_0(const float *x, block_q5_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        const float max = qref_signed_absmax(x, 32, &amax);
        const float d = max / -16;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        block_q5_0 b;
        b.d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            uint8_t q0 = (uint8_t)VLLMC_MIN(31, (int8_t)quant_trunc_int(x[j] * id + 16.5f));
            uint8_t q1 = (uint8_t)VLLMC_MIN(31, (int8_t)quant_trunc_int(x[j + 16] * id + 16.5f));
            b.qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 & 0x10u) >> 4) << j;
            qh |= (uint32_t)((q1 & 0x10u) >> 4) << (j + 16);
        }
        qref_store_qh(b.qh, qh);
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void qref_q5_1(const float *x, block_q5_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min, max;
        qref_min_max(x, 32, &min, &max);
        const float d = (max - min) / 31;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        block_q5_1 b;
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            /* no clamp in ggml: (x - min)/d + 0.5 < 32 for finite input */
            uint8_t q0 = (uint8_t)quant_trunc_int((x[j] - min) * id + 0.5f);
            uint8_t q1 = (uint8_t)quant_trunc_int((x[j + 16] - min) * id + 0.5f);
            b.qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 & 0x10u) >> 4) << j;
            qh |= (uint32_t)((q1 & 0x10u) >> 4) << (j + 16);
        }
        qref_store_qh(b.qh, qh);
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void qref_q8_0(const float *x, block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = VLLMC_MAX(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        block_q8_0 b;
        b.d = fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)quant_trunc_int(roundf(x[j] * id));   /* ties away */
        memcpy(&y[i], &b, sizeof(b));
    }
}

/* ---- MXFP4 (5.7) ---- */

/* Index k minimizing |K_FP4[k]*e - x| (first minimum in table order); kv[k] = K_FP4[k]*e, the same f32
 * product ggml forms inside its loop, computed once per block. */
static int qref_best_index_mxfp4(const float *kv, float x) {
    int best = 0;
    float best_err = fabsf(kv[0] - x);
    for (int k = 1; k < 16; k++) {
        float err = fabsf(kv[k] - x);
        if (err < best_err) {
            best = k;
            best_err = err;
        }
    }
    return best;
}

static void qref_mxfp4(const float *x, block_mxfp4 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* e = floor(log2(amax)) - 2 + 127; tiny amax gives a negative value that x86 wraps mod 256 */
        const uint8_t e = amax > 0.0f ? (uint8_t)quant_trunc_int(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = quant_e8m0_to_fp32_half(e);
        float kv[16];
        for (int k = 0; k < 16; k++) kv[k] = (float)kvalues_mxfp4[k] * d;
        block_mxfp4 b;
        b.e = e;
        for (int j = 0; j < 16; j++) {
            int q0 = qref_best_index_mxfp4(kv, x[j]);
            int q1 = qref_best_index_mxfp4(kv, x[j + 16]);
            b.qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
        memcpy(&y[i], &b, sizeof(b));
    }
}

/* ---- IQ4_NL / IQ4_XS (5.8), the llama-quantize path (quantize_iq4_*: +-7 scale tries) ---- */

/* Index into the sorted table K_NL nearest to v; ties go to the upper entry. */
static int qref_best_index_iq4nl(float v) {
    const int8_t *t = kvalues_iq4nl;
    if (v <= t[0]) return 0;
    if (v >= t[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < t[mid]) hi = mid;
        else lo = mid;
    }
    return v - t[hi - 1] < t[hi] - v ? hi - 1 : hi;
}

#define QREF_IQ4_NTRY 7

/* Scale of one 32-group (weights x^2): start at max/-K_NL[0], refit by least squares, then try
 * 1/d = (t + K_NL[0])/max for t in -7..7 and keep the best (sum w q x)^2 / (sum w q^2).
 * Returns 0 for an all-zero group. quant_lanes_iq4_scale runs the same search on 8 groups at once. */
static float qref_iq4_group_scale(const float *xb) {
    const int8_t *values = kvalues_iq4nl;
    float weight[32];
    for (int j = 0; j < 32; j++) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        float ax = fabsf(xb[j]);
        if (ax > amax) { amax = ax; max = xb[j]; }
    }
    if (amax < QUANT_GROUP_MAX_EPS) return 0;
    float d = -max / (float)values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        float al = id * xb[j];
        int l = qref_best_index_iq4nl(al);
        float q = values[l];
        float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -QREF_IQ4_NTRY; itry <= QREF_IQ4_NTRY; itry++) {
        id = (float)(itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float al = id * xb[j];
            int l = qref_best_index_iq4nl(al);
            float q = values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void qref_pack_nibbles32(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[16 + j] << 4));
}

static void qref_iq4_nl(const float *x, block_iq4_nl *y, int64_t nb, int lanes) {
    uint8_t L[32];
    float dl[8];
    for (int64_t i = 0; i < nb; i++, x += 32) {
        block_iq4_nl b;
        if (lanes && i % 8 == 0 && nb - i >= 8) quant_lanes_iq4_scale(lanes, x, dl);
        const float d = lanes && nb - (i - i % 8) >= 8 ? dl[i % 8] : qref_iq4_group_scale(x);
        b.d = fp32_to_fp16(d);
        /* indices re-picked at the f32 scale; an all-zero group gets index 8 (value +1) everywhere */
        const float id = d != 0 ? 1 / d : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)qref_best_index_iq4nl(id * x[j]);
        qref_pack_nibbles32(L, b.qs);
        memcpy(&y[i], &b, sizeof(b));
    }
}

static void qref_iq4_xs(const float *x, block_iq4_xs *y, int64_t nb, int lanes) {
    uint8_t L[32];
    float scales[8];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        block_iq4_xs b;
        memset(&b, 0, sizeof(b));
        float max_scale = 0, amax_scale = 0;
        if (lanes) quant_lanes_iq4_scale(lanes, x, scales);
        else for (int ib = 0; ib < 8; ib++) scales[ib] = qref_iq4_group_scale(x + 32 * ib);
        for (int ib = 0; ib < 8; ib++) {
            float abs_d = fabsf(scales[ib]);
            if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = scales[ib]; }
        }
        const float d = -max_scale / 32;
        b.d = fp32_to_fp16(d);
        const float id = d != 0 ? 1 / d : 0.f;
        uint16_t scales_h = 0;
        for (int ib = 0; ib < 8; ib++) {
            int l = quant_nearest_int(id * scales[ib]);
            l = VLLMC_MAX(-32, VLLMC_MIN(31, l));
            const float dl = d * (float)l;
            const float idl = dl != 0 ? 1 / dl : 0.f;
            const float *xb = x + 32 * ib;
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)qref_best_index_iq4nl(idl * xb[j]);
            qref_pack_nibbles32(L, b.qs + 16 * ib);
            l += 32;
            b.scales_l[ib / 2] = (uint8_t)(b.scales_l[ib / 2] | ((l & 0xF) << (4 * (ib % 2))));
            scales_h = (uint16_t)(scales_h | ((l >> 4) << (2 * ib)));
        }
        b.scales_h = scales_h;
        memcpy(&y[i], &b, sizeof(b));
    }
}

void quant_ref_iq4(uint32_t type, const float *x, void *dst, int64_t nb, int lanes) {
    if (type == GGML_TYPE_IQ4_NL) qref_iq4_nl(x, dst, nb, lanes);
    else if (type == GGML_TYPE_IQ4_XS) qref_iq4_xs(x, dst, nb, lanes);
    else VLLMC_ASSERT(!"quant_ref_iq4: not an IQ4 type");
}

/* ---- dispatcher ---- */

vllmc_status quantize_row_ref(uint32_t type, const float *src, void *dst, int64_t n) {
    const struct quant_traits *t = quant_traits(type);
    if (!t) return vllmc_errorf(VLLMC_ERR_INVALID, "quantize: unknown ggml type id %u", type);
    if (n < 0 || n % t->block_size)
        return vllmc_errorf(VLLMC_ERR_INVALID, "quantize: row of %lld elements is not a multiple of the %s block (%d)",
                            (long long)n, t->name, t->block_size);
    const int64_t nb = n / t->block_size;
    switch (type) {
    case GGML_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = fp32_to_fp16(src[i]);
            memcpy((uint8_t *)dst + 2 * i, &h, 2);
        }
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = fp32_to_bf16(src[i]);
            memcpy((uint8_t *)dst + 2 * i, &h, 2);
        }
        break;
    case GGML_TYPE_Q4_0: qref_q4_0(src, dst, nb); break;
    case GGML_TYPE_Q4_1: qref_q4_1(src, dst, nb); break;
    case GGML_TYPE_Q5_0: qref_q5_0(src, dst, nb); break;
    case GGML_TYPE_Q5_1: qref_q5_1(src, dst, nb); break;
    case GGML_TYPE_Q8_0: qref_q8_0(src, dst, nb); break;
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        quant_ref_kquant(type, src, dst, nb, QUANT_SEARCH_BEST);
        break;
    case GGML_TYPE_IQ4_NL: qref_iq4_nl(src, dst, nb, QUANT_SEARCH_BEST); break;
    case GGML_TYPE_IQ4_XS: qref_iq4_xs(src, dst, nb, QUANT_SEARCH_BEST); break;
    case GGML_TYPE_MXFP4: qref_mxfp4(src, dst, nb); break;
    default:
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "quantize: no quantizer for type %s", t->name);
    }
    return VLLMC_OK;
}

bool quant_can_quantize(uint32_t type) {
    switch (type) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16:
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS: case GGML_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}
