/* Lane-parallel quantizer searches (template in quantize_lanes_impl.h) built for AVX2: 8 lanes. Chosen at
 * run time by quantize_lanes.c; bit-identical to the SSE2 build and the scalar reference. */
#if defined(__x86_64__) || defined(__i386__)
#define QL 8
#define QL_FN(name) name##_avx2
#include "quantize_lanes_impl.h"
#else
typedef int quantize_lanes_avx2_unused;   /* not an x86 build: nothing here */
#endif
