/* Activation quantizers for the CPU dot products, bit-exact with ggml's CPU reference
 * (quantize_row_q8_0_ref / q8_1_ref / q8_K_ref; GGUF-QUANTS.md 4.2-4.4).
 * Q8_0/Q8_1: d = amax/127, q = roundf(x * (1/d)) (half away from zero), d stored as f16;
 * Q8_1 adds s = f16(d * sum(q)). Q8_K: iscale = -127/max (max = the signed element of largest
 * magnitude), q = min(127, nearest_int(iscale*x)) (ties to even), d = 1/iscale as f32, bsums per 16.
 * Every q is in [-127, 127], which the SIMD dot products rely on. */
#include <math.h>
#include <string.h>
#include "quant.h"
#include "blocks.h"
#include "dot_impl.h"
#include "gemv.h"

/* ggml's nearest_int: round to nearest, ties to even, via the 1.5*2^23 trick (|x| <= 2^22). */
static inline int act_nearest_int(float fval) {
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static void act_quant_q8_0_ref(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    const int64_t nb = n / QK8_0;
    for (int64_t b = 0; b < nb; b++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) { float ax = fabsf(x[j]); amax = ax > amax ? ax : amax; }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void act_quant_q8_1_ref(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    const int64_t nb = n / QK8_1;
    for (int64_t b = 0; b < nb; b++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) { float ax = fabsf(x[j]); amax = ax > amax ? ax : amax; }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[b].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].s = fp32_to_fp16((float)sum * d);
    }
}

static void act_quant_q8_K_ref(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const int64_t nb = n / QK_K;
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) { /* ggml leaves bsums unwritten here; we zero them */
            y[b].d = 0.0f;
            memset(y[b].qs, 0, sizeof(y[b].qs));
            memset(y[b].bsums, 0, sizeof(y[b].bsums));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = act_nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int k = 0; k < QK_K / 16; k++) {
            int s = 0;
            for (int t = 0; t < 16; t++) s += y[b].qs[16 * k + t];
            y[b].bsums[k] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

quantize_row_fn act_quant_ref_get(uint32_t act_type) {
    switch (act_type) {
    case GGML_TYPE_Q8_0: return act_quant_q8_0_ref;
    case GGML_TYPE_Q8_1: return act_quant_q8_1_ref;
    case GGML_TYPE_Q8_K: return act_quant_q8_K_ref;
    default: return NULL;
    }
}

/* The public quantizers run the fastest implementation of this CPU (same bits as the references above). */
void quantize_row_q8_0(const float *x, void *dst, int64_t n) {
    quant_get_act_quantizer_isa(GGML_TYPE_Q8_0, quant_isa_active())(x, dst, n);
}
void quantize_row_q8_1(const float *x, void *dst, int64_t n) {
    quant_get_act_quantizer_isa(GGML_TYPE_Q8_1, quant_isa_active())(x, dst, n);
}
void quantize_row_q8_K(const float *x, void *dst, int64_t n) {
    quant_get_act_quantizer_isa(GGML_TYPE_Q8_K, quant_isa_active())(x, dst, n);
}

void quantize_row_act(uint32_t wtype, const float *x, void *dst, int64_t n) {
    const struct quant_traits *t = quant_traits(wtype);
    VLLMC_ASSERT(t && t->supported);
    switch (t->vec_dot_type) {
    case GGML_TYPE_Q8_0: quantize_row_q8_0(x, dst, n); break;
    case GGML_TYPE_Q8_1: quantize_row_q8_1(x, dst, n); break;
    case GGML_TYPE_Q8_K: quantize_row_q8_K(x, dst, n); break;
    case GGML_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    default: VLLMC_ASSERT(!"activation type without a quantizer");
    }
}
