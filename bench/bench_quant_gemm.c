/* quant_gemv / quant_gemm of any weight type on one matrix of random weights (quantize_row_ref) and
 * activations, one thread, for 1, 4, 8 and 16 activation rows: best of 15 calls each, ms per call and per row.
 * usage: bench_quant_gemm [type id=14 (Q6_K)] [n_cols=4864] [n_rows=896]
 * build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_quant_gemm.c build/libvllmc.a -lpcre2-8 -lcjson -lm -pthread */
#include <stdio.h>
#include <stdlib.h>
#include "common/common.h"
#include "quant/gemv.h"
#include "quant/quant.h"

int main(int argc, char **argv) {
    const uint32_t t = argc > 1 ? (uint32_t)atoi(argv[1]) : GGML_TYPE_Q6_K;
    const int64_t nc = argc > 2 ? atoll(argv[2]) : 4864, nr = argc > 3 ? atoll(argv[3]) : 896;
    const struct quant_traits *tr = quant_traits(t);
    if (!tr || !tr->supported || !quant_can_quantize(t) || nc <= 0 || nr <= 0 || nc % tr->block_size) {
        fprintf(stderr, "bench_quant_gemm: type %u / shape %lld x %lld unsupported\n", t, (long long)nc, (long long)nr);
        return 1;
    }
    const size_t rb = quant_row_size(t, nc), ab = quant_row_size((uint32_t)tr->vec_dot_type, nc);
    uint8_t *w = malloc(rb * (size_t)nr), *a = malloc(ab * 16);
    float *f = malloc(sizeof(float) * (size_t)nc), *out = malloc(sizeof(float) * (size_t)nr * 16);
    uint64_t s = 88172645463325252ull;
    for (int64_t r = 0; r < nr + 16; r++) {
        for (int64_t i = 0; i < nc; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; f[i] = (float)(s % 2001) / 1000.0f - 1.0f; }
        if (r < nr) quantize_row_ref(t, f, w + (size_t)r * rb, nc);
        else quantize_row_act(t, f, a + (size_t)(r - nr) * ab, nc);
    }
    printf("%s %lld x %lld, one thread, best of 15\n", tr->name, (long long)nc, (long long)nr);
    const int ns[] = {1, 4, 8, 16};
    for (int k = 0; k < 4; k++) {
        double best = 1e9;
        for (int rep = 0; rep < 15; rep++) {
            const double t0 = vllmc_time_s();
            if (ns[k] == 1) quant_gemv(t, nc, w, rb, 0, nr, a, out);
            else quant_gemm(t, nc, w, rb, 0, nr, a, ab, ns[k], out, nr);
            best = VLLMC_MIN(best, vllmc_time_s() - t0);
        }
        printf("rows %2d: %.3f ms, %.4f ms per row\n", ns[k], best * 1e3, best * 1e3 / ns[k]);
    }
    free(w); free(a); free(f); free(out);
    return 0;
}
