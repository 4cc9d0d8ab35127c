/* Private helpers shared by the reference quantizers (quantize_ref.c, quantize_kquants.c).
 * Every float expression here and in its users keeps ggml's operation order: byte identity with
 * llama-quantize depends on it (GGUF-QUANTS.md section 5). Build without -ffast-math / FMA contraction. */
#ifndef VLLMC_QUANTIZE_PRIV_H
#define VLLMC_QUANTIZE_PRIV_H

#include <stdint.h>
#include <string.h>

/* A group whose largest |x| is below this is treated as all zeros. */
#define QUANT_GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, by adding 1.5*2^23 and reading the low mantissa bits. Exact RNE for
 * |v| <= 4194303; outside that range the result is garbage, but the same garbage ggml computes (the
 * callers clamp it), so it is kept bit-for-bit rather than replaced by lrintf. */
static inline int quant_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* Float -> small integer the way x86-64 compilers convert (truncate to int32, then keep the low bits),
 * matching ggml's (int8_t)(float) / (uint8_t)(float) casts for every in-range value. */
static inline int quant_trunc_int(float v) {
    return (int)v;
}

/* K-quant super-block quantizers (quantize_kquants.c); nb = number of 256-element blocks. */
void quant_ref_q2_K(const float *x, void *dst, int64_t nb);
void quant_ref_q3_K(const float *x, void *dst, int64_t nb);
void quant_ref_q4_K(const float *x, void *dst, int64_t nb);
void quant_ref_q5_K(const float *x, void *dst, int64_t nb);
void quant_ref_q6_K(const float *x, void *dst, int64_t nb);

#endif
