/* AVX-512 (BW/VL/VNNI) dot products: the 256-bit kernels of dot_x86.h with vpdpbusd / vpdpwssd.
 * Bit-identical to dot_ref.c (see dot_impl.h for the fixed fp32 order). */
#define DOT_NAME(x) dot_avx512_##x
#define DOT_X86_VNNI 1
#include "dot_x86.h"

vec_dot_fn dot_avx512_get(uint32_t wtype) {
    return dot_avx512_table(wtype);
}
