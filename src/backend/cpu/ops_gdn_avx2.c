/* AVX2 build of the recurrent gated delta rule (ops_gdn_simd.h): chosen at run time by ops_gdn.c when the
 * CPU (and $VLLMC_SIMD) allow AVX2 but not AVX-512, and d_k is a multiple of 8. */
#define GDN_AVX512 0
#include "backend/cpu/ops_gdn_simd.h"
