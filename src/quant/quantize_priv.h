/* Private helpers shared by the reference quantizers (quantize_ref.c, quantize_kquants.c, quantize_lanes*).
 * Every float expression here and in its users keeps ggml's operation order: byte identity with
 * llama-quantize depends on it (GGUF-QUANTS.md section 5). Build without -ffast-math / FMA contraction. */
#ifndef VLLMC_QUANTIZE_PRIV_H
#define VLLMC_QUANTIZE_PRIV_H

#include <stdint.h>
#include <string.h>

/* No FMA contraction in the quantizers: a fused a*b + c rounds once where ggml rounds twice, which changes
 * bytes. GCC's ISO C modes (-std=c11, as the Makefile builds) never contract; Clang contracts by default
 * when the target has FMA, hence the pragma. A GNU-mode GCC build for an FMA target needs -ffp-contract=off. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

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

/* Float -> integer the way ggml's casts behave on x86-64 (cvttss2si: truncate toward zero; NaN and
 * out-of-range values give INT32_MIN), then the callers keep the low bits as ggml's (int8_t)/(uint8_t) casts
 * do. Same as a plain cast for every in-range value, without the cast's undefined behaviour otherwise. */
static inline int quant_trunc_int(float v) {
    if (!(v > -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
    return (int)v;
}

/* How the scale searches run: the scalar reference, or lane-parallel (quantize_lanes*.c) with the best
 * vector width the CPU has (AVX2: 8 lanes) or forced to SSE2 (4 lanes). All three give identical bytes;
 * quantize_row_ref uses QUANT_SEARCH_BEST and the tests compare all three. */
enum { QUANT_SEARCH_SCALAR = 0, QUANT_SEARCH_BEST = 1, QUANT_SEARCH_SSE2 = 2 };

/* K-quant super-block quantizers (quantize_kquants.c) for Q2_K..Q6_K; nb = number of 256-element
 * blocks; search = QUANT_SEARCH_*. */
void quant_ref_kquant(uint32_t type, const float *x, void *dst, int64_t nb, int search);
/* IQ4_NL / IQ4_XS (quantize_ref.c), nb blocks. */
void quant_ref_iq4(uint32_t type, const float *x, void *dst, int64_t nb, int search);

/* Lane-parallel make_qkx2_quants / make_qx_quants (rmse_type 1, weights x^2) over 8 consecutive groups of
 * n <= 32 elements (group k at x + k*n, its weights at w + k*n, its quants at L + k*n); per-group scale and
 * (qkx2) positive min go to scale_out[k], the_min_out[k]. isa = QUANT_SEARCH_BEST or _SSE2.
 * Bit-identical to the scalar searches. */
void quant_lanes_qkx2(int isa, int n, int nmax, const float *x, const float *w, uint8_t *L, float *scale_out,
                      float *the_min_out, float rmin, float rdelta, int nstep, int use_mad);
void quant_lanes_qx(int isa, int n, int nmax, const float *x, int8_t *L, float *scale_out);
/* Lane-parallel make_q3_quants (do_rmse, weights x^2), same layout as quant_lanes_qx. */
void quant_lanes_q3(int isa, int n, int nmax, const float *x, int8_t *L, float *scale_out);
/* IQ4_NL/IQ4_XS group scale (+-7 search, weights x^2) of 8 consecutive 32-element groups at x. */
void quant_lanes_iq4_scale(int isa, const float *x, float *d_out);

/* The per-ISA builds behind those (quantize_lanes_impl.h). */
void quant_lanes_qkx2_sse2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *scale_out,
                           float *the_min_out, float rmin, float rdelta, int nstep, int use_mad);
void quant_lanes_qx_sse2(int n, int nmax, const float *x, int8_t *L, float *scale_out);
void quant_lanes_q3_sse2(int n, int nmax, const float *x, int8_t *L, float *scale_out);
void quant_lanes_iq4_scale_sse2(const float *x, float *d_out);
void quant_lanes_qkx2_avx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *scale_out,
                           float *the_min_out, float rmin, float rdelta, int nstep, int use_mad);
void quant_lanes_qx_avx2(int n, int nmax, const float *x, int8_t *L, float *scale_out);
void quant_lanes_q3_avx2(int n, int nmax, const float *x, int8_t *L, float *scale_out);
void quant_lanes_iq4_scale_avx2(const float *x, float *d_out);

#endif
