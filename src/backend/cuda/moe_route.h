/* The MoE router's probabilities, shared by the route kernel (cuda_moe.cu moe_route_kernel) and the routing every expert
 * CTA does itself (gemv_q.cu moe_route_warp), so both give the same bits. Host and device (tests/test_moe.c checks the
 * quotient against the division). */
#ifndef VLLMC_CUDA_MOE_ROUTE_H
#define VLLMC_CUDA_MOE_ROUTE_H

#include <math.h>
#include "quant/blocks.h"

/* e / sum, correctly rounded, from rs = 1.0 / sum (correctly rounded, formed once a row): q0 = e rs is within an ulp of
 * e / sum, the remainder e - sum q0 is exact by the FMA, and q0 + remainder x rs rounds to the correctly rounded
 * quotient (Markstein's theorem for round to nearest; 3e9 random e in [0, 1] and sums in [1, 257), significands near
 * all ones and near powers of two among them, gave no difference from e / sum). So each expert's quotient is a multiply
 * and two FMAs that do not wait on the other experts', where a division each ran its refinement and its slow-path check
 * in turn (SASS: eight serial division sequences before the top-k of every routed expert CTA). */
static inline VLLMC_HD double moe_quot(double e, double sum, double rs) {
    const double q0 = e * rs;
    return fma(fma(-sum, q0, e), rs, q0);
}
/* An expert's probability (float)(e / sum) in double, as the CPU backend forms it (e = expf(logit - max), sum their
 * double sum). */
static inline VLLMC_HD float moe_prob(double e, double sum, double rs) { return (float)moe_quot(e, sum, rs); }

#endif
