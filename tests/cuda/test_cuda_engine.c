/* The engine on the CUDA backend (public API), batch invariance on the GPU. For one model:
 *   - alone: each of N random prompts (lengths 5..44) through the engine by itself, greedy;
 *   - together: all N at once (continuous batching: chunked prefill under a token budget mixed with
 *     decode steps of up to N sequences, replayed as CUDA graphs);
 *   - together, eager: the same with enforce_eager (no graphs);
 *   - together, fp8 KV and bf16 KV: runs to the end (tokens may differ from f16: another cache);
 * alone, together and eager must give every request the same tokens exactly. With --no-invariant the
 * together run uses batch_invariant = 0 and reports how many requests differ from alone (the cost side of the
 * choice, see docs/DESIGN.md); then, with every request submitted before the first step (the same batches each
 * run), graphs and eager must agree there bit for bit, and two runs of each. Then sampled requests: alone = together,
 * and the device's draws = the host sampler's. The greedy and sampled alone / together rounds run one after another
 * on one engine, as a server's rounds do. Also checks a plan that cannot fit is refused with a message.
 * usage: test_cuda_engine MODEL.gguf [n_requests (64)] [n_gen (12)] [--no-invariant]; skips without a GPU. */
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "vllmc.h"
#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "common/common.h"
#include "test.h"

#define MAXR 256
#define MAXG 64

static int32_t prompts[MAXR][48], n_prompt[MAXR];
static int NR = 64, NG = 12;

static void opts(vllmc_engine_opts *o, int seqs, int eager, int invariant, vllmc_kv_dtype kd) {
    vllmc_engine_opts_default(o);
    o->device = VLLMC_DEVICE_CUDA;
    o->max_model_len = 48 + MAXG + 16;
    o->max_num_seqs = seqs;
    o->max_num_batched_tokens = 256; /* prompts of 64 requests need several chunked steps */
    o->enable_prefix_caching = 0;
    o->enforce_eager = eager;
    o->batch_invariant = invariant;
    o->kv_dtype = kd;
    o->print_plan = 0;
}

static int g_sample; /* 1: the requests sample (temperature 0.8, top-p 0.9, top-k 40, seed its index) */

static int n_create;     /* engines created, and the seconds that took (a big model's test is mostly its loads) */
static double t_create;

static vllmc_engine *create(const char *path, const vllmc_engine_opts *o) {
    vllmc_engine *e = NULL;
    const double tc = vllmc_time_s();
    if (vllmc_engine_create(path, o, &e)) { fprintf(stderr, "engine: %s\n", vllmc_last_error()); return NULL; }
    n_create++;
    t_create += vllmc_time_s() - tc;
    return e;
}

/* Run requests [0, n) on engine e with at most `at_once` submitted together; tokens into out. Returns 0 on success.
 * An engine runs several such rounds one after another (as a server does), so what one round leaves behind must not
 * change the next one's tokens. */
static int run_on(vllmc_engine *e, int at_once, int32_t out[MAXR][MAXG], double *secs) {
    if (!e) return 1;
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = NG;
    sp.ignore_eos = 1;
    const double t0 = vllmc_time_s();
    int rc = 0;
    for (int base = 0; base < NR && !rc; base += at_once) {
        const int n = VLLMC_MIN(at_once, NR - base);
        vllmc_request *h[MAXR] = {0};
        for (int i = 0; i < n; i++) {
            if (g_sample) {
                sp.temperature = 0.8f; sp.top_p = 0.9f; sp.top_k = 40; sp.seed = base + i;
            }
            if (vllmc_engine_submit(e, prompts[base + i], n_prompt[base + i], &sp, NULL, NULL, &h[i])) {
                fprintf(stderr, "submit: %s\n", vllmc_last_error());
                rc = 1;
            }
        }
        for (int i = 0; i < n && !rc; i++) {
            int got = 0;
            for (;;) {
                vllmc_output ou;
                if (vllmc_request_next(h[i], -1, &ou)) { rc = 1; break; }
                for (int k = 0; k < ou.n_tokens && got < MAXG; k++) out[base + i][got++] = ou.tokens[k];
                if (ou.finish != VLLMC_FINISH_NONE) {
                    if (ou.finish != VLLMC_FINISH_LENGTH || got != NG) {
                        fprintf(stderr, "request %d: finish %d after %d tokens\n", base + i, (int)ou.finish, got);
                        rc = 1;
                    }
                    break;
                }
            }
        }
        for (int i = 0; i < n; i++) vllmc_request_release(h[i]);
    }
    *secs = vllmc_time_s() - t0;
    vllmc_engine_stats st;
    vllmc_engine_get_stats(e, &st);
    if (st.device != VLLMC_DEVICE_CUDA) { fprintf(stderr, "engine did not run on cuda\n"); rc = 1; }
    return rc;
}

/* the same on an engine of its own */
static int run(const char *path, const vllmc_engine_opts *o, int at_once, int32_t out[MAXR][MAXG], double *secs) {
    vllmc_engine *e = create(path, o);
    const int rc = run_on(e, at_once, out, secs);
    vllmc_engine_destroy(e);
    return rc;
}

/* All requests submitted, then stepped in this thread (engine_model_create without its thread): the same batches
 * every run, so without batch invariance two runs must still agree bit for bit. Returns 0 on success. */
static int run_stepped(const char *path, const vllmc_engine_opts *o, int32_t out[MAXR][MAXG]) {
    vllmc_engine *e = NULL;
    const double tc = vllmc_time_s();
    if (engine_model_create(path, o, false, &e)) { fprintf(stderr, "engine: %s\n", vllmc_last_error()); return 1; }
    n_create++;
    t_create += vllmc_time_s() - tc;
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = NG;
    sp.ignore_eos = 1;
    vllmc_request *h[MAXR] = {0};
    int rc = 0;
    for (int i = 0; i < NR && !rc; i++)
        if (vllmc_engine_submit(e, prompts[i], n_prompt[i], &sp, NULL, NULL, &h[i])) {
            fprintf(stderr, "submit: %s\n", vllmc_last_error());
            rc = 1;
        }
    while (!rc && engine_step(e)) { }
    for (int i = 0; i < NR && !rc; i++) {
        vllmc_output ou;
        if (vllmc_request_next(h[i], 0, &ou) || ou.finish != VLLMC_FINISH_LENGTH || ou.n_tokens != NG) {
            fprintf(stderr, "request %d: finish %d after %d tokens\n", i, (int)ou.finish, ou.n_tokens);
            rc = 1;
            break;
        }
        memcpy(out[i], ou.tokens, (size_t)NG * sizeof(int32_t));
    }
    for (int i = 0; i < NR; i++) vllmc_request_release(h[i]);
    vllmc_engine_destroy(e);
    return rc;
}

static int n_differ(int32_t a[MAXR][MAXG], int32_t b[MAXR][MAXG]) {
    int d = 0;
    for (int i = 0; i < NR; i++) d += memcmp(a[i], b[i], (size_t)NG * sizeof(int32_t)) != 0;
    return d;
}

static int32_t alone[MAXR][MAXG], together[MAXR][MAXG], eager[MAXR][MAXG], other[MAXR][MAXG];

/* A crash prints the raw stack (binary + offset: resolve with addr2line -f -e test_cuda_engine) before dying. */
static void on_crash(int sig) {
    void *fr[64];
    const int n = backtrace(fr, 64);
    static const char msg[] = "test_cuda_engine: crashed, stack:\n";
    if (write(2, msg, sizeof(msg) - 1) < 0) { /* nothing to do */ }
    backtrace_symbols_fd(fr, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGSEGV, on_crash);
    signal(SIGABRT, on_crash);
    signal(SIGBUS, on_crash);
    test_seed_auto("test_cuda_engine");
    const char *path = argc > 1 ? argv[1] : NULL;
    if (argc > 2) NR = atoi(argv[2]);
    if (argc > 3) NG = atoi(argv[3]);
    const int check_variant = argc > 4 && !strcmp(argv[4], "--no-invariant");
    if (!path || NR < 1 || NR > MAXR || NG < 2 || NG > MAXG) { printf("test_cuda_engine: no model given: skipped\n"); return 0; }
    if (backend_cuda_device_count() <= 0) { printf("test_cuda_engine: no GPU: skipped\n"); return 0; }
    for (int i = 0; i < NR; i++) {
        n_prompt[i] = 5 + (int)(test_rand_u64() % 40);
        for (int k = 0; k < n_prompt[i]; k++) prompts[i][k] = (int32_t)(test_rand_u64() % 256); /* the tiny models have 384 ids */
    }
    const char *pe = getenv("VLLMC_ENGINE_PIPELINE");
    printf("test_cuda_engine: %s: decode steps %s\n", path, pe && !strcmp(pe, "0") ? "step by step (VLLMC_ENGINE_PIPELINE=0)" : "pipelined where graphs run");
    vllmc_engine_opts o;
    double t_alone, t_tog, t_eager, t;
    /* one engine for the greedy and the sampled rounds of the default options, in turn (a big model's engine takes
     * ~10 s to create) */
    opts(&o, NR, 0, 1, VLLMC_KV_F16);
    vllmc_engine *e0 = create(path, &o);
    CHECK(e0 != NULL);
    CHECK(run_on(e0, 1, alone, &t_alone) == 0);
    CHECK(run_on(e0, NR, together, &t_tog) == 0);
    int d = n_differ(alone, together);
    CHECK_MSG(d == 0, "%d of %d requests got other tokens among %d than alone", d, NR, NR);
    opts(&o, NR, 1, 1, VLLMC_KV_F16);
    CHECK(run(path, &o, NR, eager, &t_eager) == 0);
    d = n_differ(together, eager);
    CHECK_MSG(d == 0, "%d of %d requests: graphs and eager differ", d, NR);
    printf("test_cuda_engine: %d requests x %d tokens: alone %.2f s, together %.2f s (graphs), %.2f s (eager); "
           "together = alone = eager: %s\n", NR, NG, t_alone, t_tog, t_eager, test_n_fail ? "NO" : "yes");
    const vllmc_kv_dtype kds[2] = {VLLMC_KV_BF16, VLLMC_KV_FP8_E4M3};
    for (int i = 0; i < 2; i++) {
        opts(&o, NR, 0, 1, kds[i]);
        CHECK(run(path, &o, NR, other, &t) == 0);
        printf("test_cuda_engine: KV %s: %d of %d requests differ from f16 (%.2f s)\n", kds[i] == VLLMC_KV_BF16 ? "bf16" : "fp8",
               n_differ(other, together), NR, t);
    }
    if (check_variant) {
        opts(&o, NR, 0, 0, VLLMC_KV_F16);
        int32_t (*var_alone)[MAXG] = malloc(sizeof(int32_t) * MAXR * MAXG);
        CHECK(run(path, &o, NR, other, &t) == 0);
        CHECK(run(path, &o, 1, var_alone, &t_alone) == 0);
        printf("test_cuda_engine: batch_invariant = 0: %d of %d requests differ between alone and together (%.2f s together)\n",
               n_differ(var_alone, other), NR, t);
        /* with the batches fixed (stepped runs): two runs on graphs, two eager, and graphs against eager must agree
         * bit for bit (the graphs' fusions, the residual add in a several-row matmul's epilogue among them, keep the
         * eager kernels' float sums) */
        CHECK(run_stepped(path, &o, other) == 0);
        CHECK(run_stepped(path, &o, eager) == 0);
        d = n_differ(eager, other);
        CHECK_MSG(d == 0, "batch_invariant = 0: %d of %d requests differ between two stepped runs on graphs", d, NR);
        opts(&o, NR, 1, 0, VLLMC_KV_F16);
        CHECK(run_stepped(path, &o, var_alone) == 0);
        CHECK(run_stepped(path, &o, eager) == 0);
        d = n_differ(eager, var_alone);
        CHECK_MSG(d == 0, "batch_invariant = 0: %d of %d requests differ between two stepped eager runs", d, NR);
        d = n_differ(other, var_alone);
        CHECK_MSG(d == 0, "batch_invariant = 0: %d of %d requests: graphs and eager differ (stepped runs)", d, NR);
        printf("test_cuda_engine: batch_invariant = 0, stepped runs: graphs = eager: %s (several-row tensor-core launches so far: %llu)\n",
               d ? "NO" : "yes", (unsigned long long)backend_cuda_mmr_launches());
        free(var_alone);
    }
    /* sampling requests (batch invariant): drawn on the device, alone = together, and = the host sampler's draws from
     * the same logits (VLLMC_DEVICE_SAMPLE=0) */
    int32_t (*greedy)[MAXG] = malloc(sizeof(int32_t) * MAXR * MAXG);
    memcpy(greedy, together, sizeof(int32_t) * MAXR * MAXG); /* (the first greedy run's tokens, kept since) */
    g_sample = 1;
    opts(&o, NR, 0, 1, VLLMC_KV_F16);
    CHECK(run_on(e0, 1, alone, &t_alone) == 0);
    CHECK(run_on(e0, NR, together, &t_tog) == 0);
    vllmc_engine_destroy(e0);
    const int ds = n_differ(alone, together);
    CHECK_MSG(ds == 0, "sampling: %d of %d requests differ between alone and together", ds, NR);
    setenv("VLLMC_DEVICE_SAMPLE", "0", 1);
    CHECK(run(path, &o, NR, eager, &t) == 0);
    unsetenv("VLLMC_DEVICE_SAMPLE");
    const int dh = n_differ(together, eager);
    CHECK_MSG(dh == 0, "sampling: %d of %d requests differ between the device's draws and the host's", dh, NR);
    const int dg = n_differ(together, greedy);
    free(greedy);
    printf("test_cuda_engine: sampling (T 0.8, top-p 0.9, top-k 40): alone = together: %s; device = host sampler: %s "
           "(%.2f s together on the device, %.2f s on the host); %d of %d requests differ from the last greedy run\n",
           ds ? "NO" : "yes", dh ? "NO" : "yes", t_tog, t, dg, NR);
    g_sample = 0;
    /* a plan that cannot fit: refused with the numbers, no abort */
    opts(&o, NR, 0, 1, VLLMC_KV_F16);
    o.kv_blocks = 1 << 26; /* 2^30 tokens */
    vllmc_engine *e = NULL;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_OOM && !e);
    printf("test_cuda_engine: oversized plan refused: %s\n", vllmc_last_error());
    printf("test_cuda_engine: %d engines created in %.1f s\n", n_create, t_create);
    return test_finish("test_cuda_engine");
}
