/* Engine throughput: N requests of P random prompt tokens, each generating G tokens (greedy, EOS ignored),
 * submitted at once; reports prefill throughput (until every request has its first token), decode throughput
 * over all requests after that, steps and preemptions. Compare N=1 with N>1 for the gain of batching decodes (one weight pass serves N rows).
 * usage: bench_engine MODEL.gguf [N=8] [P=64] [G=32] [THREADS=0] [MAX_NUM_BATCHED_TOKENS=256]
 * build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_engine.c build/libvllmc.a -lpcre2-8 -lcjson -lm -pthread */
#include <stdio.h>
#include <stdlib.h>
#include "common/common.h"
#include "vllmc.h"

static void on_output(vllmc_request *r, void *user) {
    (void)r;
    double *t = user;
    if (*t == 0) *t = vllmc_time_s();
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_engine MODEL.gguf [N] [P] [G] [THREADS] [BUDGET]\n"); return 2; }
    const int n = argc > 2 ? atoi(argv[2]) : 8, P = argc > 3 ? atoi(argv[3]) : 64, G = argc > 4 ? atoi(argv[4]) : 32;
    vllmc_engine_opts o;
    vllmc_engine_opts_default(&o);
    o.threads = argc > 5 ? atoi(argv[5]) : 0;
    o.max_num_batched_tokens = argc > 6 ? atoi(argv[6]) : 256;
    o.max_num_seqs = n > 0 ? n : 1;
    o.max_model_len = P + G + 16;
    o.enable_prefix_caching = 0;
    vllmc_engine *e = NULL;
    if (n <= 0 || P <= 0 || G <= 0 || vllmc_engine_create(argv[1], &o, &e)) { fprintf(stderr, "bench_engine: %s\n", vllmc_last_error()); return 1; }
    int32_t *prompt = malloc((size_t)P * sizeof(int32_t));
    vllmc_request **h = calloc((size_t)n, sizeof(*h));
    double *t_first = calloc((size_t)n, sizeof(double));
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = G;
    sp.ignore_eos = 1;
    uint64_t x = 88172645463325252ull;
    const double t0 = vllmc_time_s();
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < P; j++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; prompt[j] = (int32_t)(100 + x % 20000); }
        if (vllmc_engine_submit(e, prompt, P, &sp, on_output, &t_first[i], &h[i])) { fprintf(stderr, "submit: %s\n", vllmc_last_error()); return 1; }
    }
    long out = 0;
    for (int i = 0; i < n; i++) {
        vllmc_output r;
        do {
            vllmc_request_next(h[i], -1, &r);
            out += r.n_tokens;
        } while (!r.finish);
        vllmc_request_release(h[i]);
    }
    const double t_end = vllmc_time_s(), dt = t_end - t0;
    double last_first = t0;
    for (int i = 0; i < n; i++) last_first = t_first[i] > last_first ? t_first[i] : last_first;
    vllmc_engine_stats s;
    vllmc_engine_get_stats(e, &s);
    printf("N=%d P=%d G=%d: %.2f s, %ld output tokens; prefill %.1f prompt tok/s (until every request has its first token, "
           "%.2f s); decode %.2f tok/s over all requests after that; %lld steps, %lld preemptions\n", n, P, G, dt, out,
           (double)n * P / (last_first - t0), last_first - t0, (double)(out - n) / (t_end - last_first), (long long)s.steps,
           (long long)s.preemptions);
    vllmc_engine_destroy(e);
    free(prompt);
    free(h);
    free(t_first);
    return 0;
}
