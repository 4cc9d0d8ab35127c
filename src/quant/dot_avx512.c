/* AVX-512 VNNI dot products (placeholder table; filled below). */
#include "dot_impl.h"
vec_dot_fn dot_avx512_get(uint32_t wtype) { (void)wtype; return NULL; }
