/* Batched quantized matmul, one thread: quant_gemv / quant_gemm against the batched Q4_0/Q5_0/Q8_0 kernels of
 * the CPU backend (src/backend/cpu/matmul_batch.h) on one weight matrix, for 1, 2, 4, 8, 16 activation rows;
 * best of 20 calls each, the batched figure including the activation preparation.
 * usage: bench_matmul_batch [type id=6 (Q5_0)] [n_cols=896] [n_rows=4864]
 * build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_matmul_batch.c build/batch/libvllmc.a -lpcre2-8 -lcjson -lm -pthread */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/matmul_batch.h"
#include "common/common.h"
#include "quant/blocks.h"
#include "quant/gemv.h"
#include "quant/quant.h"

int main(int argc, char **argv) {
    const uint32_t t = argc > 1 ? (uint32_t)atoi(argv[1]) : GGML_TYPE_Q5_0;
    const int64_t nc = argc > 2 ? atoll(argv[2]) : 896, nr = argc > 3 ? atoll(argv[3]) : 4864;
    if (!cpu_mmb_supported(t) || nc <= 0 || nc % 32 || nr <= 0) {
        fprintf(stderr, "bench_matmul_batch: type %u / shape unsupported here (Q4_0=2, Q5_0=6, Q8_0=8; AVX-512 VNNI)\n", t);
        return 1;
    }
    const size_t rb = quant_row_size(t, nc), ab = quant_row_size(GGML_TYPE_Q8_0, nc), bsz = quant_traits(t)->type_size;
    uint8_t *w = malloc(rb * (size_t)nr), *a = malloc(ab * 16);
    float *x = malloc(sizeof(float) * (size_t)nc * 16), *out = malloc(sizeof(float) * (size_t)nr * 16);
    void *prep = aligned_alloc(64, cpu_mmb_prep_row_bytes(nc) * 16);
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < rb * (size_t)nr; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; w[i] = (uint8_t)s; }
    for (size_t b = 0; b < (size_t)nr * (size_t)(nc / 32); b++) {
        ggml_half d = fp32_to_fp16(0.01f);
        memcpy(w + b * bsz, &d, sizeof(d)); /* rows are whole blocks: block b of the matrix */
    }
    for (int64_t i = 0; i < nc * 16; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; x[i] = (float)(s % 2001) / 1000.0f - 1.0f; }
    for (int i = 0; i < 16; i++) quantize_row_act(t, x + i * nc, a + (size_t)i * ab, nc);
    printf("%s %lld x %lld, one thread, ms per call (best of 20)\n", quant_traits(t)->name, (long long)nc, (long long)nr);
    const int ns[] = {1, 2, 4, 8, 16};
    for (int k = 0; k < 5; k++) {
        const int n = ns[k];
        double best_q = 1e9, best_b = 1e9;
        for (int rep = 0; rep < 20; rep++) {
            double t0 = vllmc_time_s();
            if (n == 1) quant_gemv(t, nc, w, rb, 0, nr, a, out);
            else quant_gemm(t, nc, w, rb, 0, nr, a, ab, n, out, nr);
            double t1 = vllmc_time_s();
            cpu_mmb_prepare(nc, a, ab, n, prep);
            cpu_mmb_gemm(t, nc, w, rb, 0, nr, prep, n, out, nr);
            double t2 = vllmc_time_s();
            best_q = VLLMC_MIN(best_q, t1 - t0);
            best_b = VLLMC_MIN(best_b, t2 - t1);
        }
        printf("rows %2d: quant_%s %.3f ms, batched %.3f ms\n", n, n == 1 ? "gemv" : "gemm", best_q * 1e3, best_b * 1e3);
    }
    free(w); free(a); free(x); free(out); free(prep);
    return 0;
}
