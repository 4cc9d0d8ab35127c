/* AVX2 + FMA + F16C dot products (placeholder table; filled below). */
#include "dot_impl.h"
vec_dot_fn dot_avx2_get(uint32_t wtype) { (void)wtype; return NULL; }
