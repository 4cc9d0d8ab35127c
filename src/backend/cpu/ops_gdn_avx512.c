/* AVX-512 build of the recurrent gated delta rule (ops_gdn_simd.h): chosen at run time by ops_gdn.c when the
 * CPU (and $VLLMC_SIMD) allow AVX-512 and d_k is a multiple of 16. */
#define GDN_AVX512 1
#include "backend/cpu/ops_gdn_simd.h"
