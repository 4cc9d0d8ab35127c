/* AVX2 + FMA + F16C dot products: the 256-bit kernels of dot_x86.h with maddubs/madd integer sums.
 * Bit-identical to dot_ref.c (see dot_impl.h for the fixed fp32 order). */
#define DOT_NAME(x) dot_avx2_##x
#include "dot_x86.h"

vec_dot_fn dot_avx2_get(uint32_t wtype) {
    return dot_avx2_table(wtype);
}
