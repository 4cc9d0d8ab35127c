/* Lane-parallel quantizer searches (template in quantize_lanes_impl.h) built for SSE2, 4 lanes (every
 * x86-64), and the entry points that pick the AVX2 build (quantize_lanes_avx2.c, 8 lanes) when the CPU
 * has it. Both builds give bit-identical results (the tests run both against the scalar reference). */
#define QL 4
#define QL_FN(name) name##_sse2
#include "quantize_lanes_impl.h"

#if defined(__x86_64__) || defined(__i386__)
static int ql_use_avx2(int isa) { return isa == QUANT_SEARCH_BEST && __builtin_cpu_supports("avx2"); }
#else
static int ql_use_avx2(int isa) { (void)isa; return 0; }
#define quant_lanes_qkx2_avx2 quant_lanes_qkx2_sse2
#define quant_lanes_qx_avx2 quant_lanes_qx_sse2
#define quant_lanes_q3_avx2 quant_lanes_q3_sse2
#define quant_lanes_iq4_scale_avx2 quant_lanes_iq4_scale_sse2
#endif

void quant_lanes_qkx2(int isa, int n, int nmax, const float *x, const float *w, uint8_t *L, float *scale_out,
                      float *the_min_out, float rmin, float rdelta, int nstep, int use_mad) {
    if (ql_use_avx2(isa)) quant_lanes_qkx2_avx2(n, nmax, x, w, L, scale_out, the_min_out, rmin, rdelta, nstep, use_mad);
    else quant_lanes_qkx2_sse2(n, nmax, x, w, L, scale_out, the_min_out, rmin, rdelta, nstep, use_mad);
}

void quant_lanes_qx(int isa, int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    if (ql_use_avx2(isa)) quant_lanes_qx_avx2(n, nmax, x, L, scale_out);
    else quant_lanes_qx_sse2(n, nmax, x, L, scale_out);
}

void quant_lanes_iq4_scale(int isa, const float *x, float *d_out) {
    if (ql_use_avx2(isa)) quant_lanes_iq4_scale_avx2(x, d_out);
    else quant_lanes_iq4_scale_sse2(x, d_out);
}

void quant_lanes_q3(int isa, int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    if (ql_use_avx2(isa)) quant_lanes_q3_avx2(n, nmax, x, L, scale_out);
    else quant_lanes_q3_sse2(n, nmax, x, L, scale_out);
}
