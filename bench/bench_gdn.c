/* Times the gated delta rule on one thread: the recurrence (AVX-512 kernel where the CPU has it, else the
 * generic loop; VLLMC_SIMD=avx2 forces the generic one) and the chunked form (chunk 64), for Qwen3.5-0.8B
 * heads (16 value heads, d_k = d_v = 128), T tokens per call; median of RUNS calls, per token.
 * usage: bench_gdn [T=256] [RUNS=7]
 * build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_gdn.c build/libvllmc.a -lpcre2-8 -lcjson -lm -pthread */
#include <string.h>
#include "backend/cpu/ops_gdn.h"
#include "quant/gemv.h"

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 256, runs = argc > 2 ? atoi(argv[2]) : 7;
    if (T <= 0 || runs <= 0 || runs > 100) { fprintf(stderr, "usage: bench_gdn [T] [RUNS]\n"); return 2; }
    const struct gdn_dims d = {16, 16, 128, 128};
    const int64_t qs = 2 * 16 * 128 + 16 * 128, nvd = 16 * 128;
    float *qkv = malloc(sizeof(float) * (size_t)(T * qs)), *g = malloc(sizeof(float) * (size_t)T * 16);
    float *b = malloc(sizeof(float) * (size_t)T * 16), *st = calloc(16 * 128 * 128, sizeof(float));
    float *o = malloc(sizeof(float) * (size_t)(T * nvd));
    float *scr = malloc(sizeof(float) * (size_t)gdn_chunked_scratch_floats(&d, 64));
    unsigned s = 12345;
    for (int64_t i = 0; i < T * qs; i++) { s = s * 1103515245u + 12345u; qkv[i] = (float)(s >> 8) / 16777216.0f - 0.5f; }
    for (int i = 0; i < T * 16; i++) { g[i] = -0.05f * (float)(i % 7); b[i] = 0.5f; }
    gdn_qk_norm(qkv, qs, T, &d, 1e-6f);
    printf("gated delta rule, 16 heads of 128x128, T %d, 1 thread, ISA %s\n", T, quant_simd_name());
    for (int mode = 0; mode < 2; mode++) {
        double t[100];
        for (int r = 0; r < runs; r++) {
            double t0 = vllmc_time_s();
            if (mode) gdn_delta_rule_chunked(&d, T, 64, qkv, qkv + 2048, qs, qkv + 4096, qs, g, b, st, o, nvd, scr, NULL);
            else gdn_delta_rule_recurrent(&d, T, qkv, qkv + 2048, qs, qkv + 4096, qs, g, b, st, o, nvd, NULL);
            t[r] = vllmc_time_s() - t0;
        }
        qsort(t, (size_t)runs, sizeof(double), bench_cmp);
        printf("  %-9s median %8.1f us/token  (min %.1f, max %.1f)\n", mode ? "chunked" : "recurrent", t[runs / 2] * 1e6 / T,
               t[0] * 1e6 / T, t[runs - 1] * 1e6 / T);
    }
    free(qkv); free(g); free(b); free(st); free(o); free(scr);
    return 0;
}
