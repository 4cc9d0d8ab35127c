/* vllmc bench: batch-1 prefill and greedy decode speed of a GGUF model.
 * One run = prefill a prompt of -p random token ids (one batch; its argmax is the first output token),
 * then -g greedy decode steps, each feeding back the argmax. After a warm-up run, -r timed runs; reports
 * medians: output tok/s (generated tokens / (TTFT + decode time)), steady-state TPOT (median step
 * time), TTFT, decode tok/s, peak device memory; and a llama-bench style table (pp = prompt tokens / prefill
 * time, tg = generated tokens / decode time, mean +- stddev over the runs).
 * --profile (CUDA) reruns one prefill + decode pass on an eager, event-timed backend and prints per op family,
 * for the prefill step (totals) and for the decode steps (per token): calls, ms, share, GB/s of weights read,
 * and GPU-busy vs wall time.
 * --concurrency N1,N2,... runs the engine instead (continuous batching, the public API): for each N it
 * keeps N requests of -p random prompt tokens and -g output tokens in flight (a new one submitted as one
 * finishes) until -r x N requests have finished, after a warm-up round of N, and reports output tok/s
 * (all output tokens / wall time), the median TPOT of the requests ((last token - first token) / (n - 1)),
 * the median TTFT and the median inter-token latency (ITL: the gaps between a request's tokens, so prefill
 * steps of arriving requests only touch a few; N / ITL is the decode rate of a step of N sequences).
 * Prompts are distinct (no prefix-cache hits). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "cli.h"
#include "common/common.h"
#include "model/model.h"
#include "vllmc.h"
#ifdef VLLMC_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

struct bench_opts {
    const char *model;
    int n_prompt, n_gen, reps, threads;
    bool json, eager, profile, cpu, invariant, pipe;
    enum bk_kv_dtype kv;
    bool ssm_bf16; /* --mamba-ssm-cache-dtype bfloat16 */
    int conc[16], n_conc;
    float temperature, top_p; /* engine mode: the requests' sampling (0 greedy; top_p 1 off) */
    int top_k;
};

#ifdef VLLMC_CUDA
/* The profiling backend: its counters restart before each prefill and after it (the prefill's are kept in
 * bench_prefill_prof), so they hold decode steps only. */
static struct backend *bench_prof_be;
static struct backend_cuda_prof bench_prefill_prof;
#endif

struct bench_run {
    double ttft, decode, tpot_med;
    int32_t *tokens; /* [n_gen]: the prefill's argmax, then each decode step's */
};

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
static void mean_sd(const double *v, int n, double *m, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *m = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *m) * (v[i] - *m);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: vllmc bench -m MODEL.gguf [options]\n"
            "       vllmc bench serve --help   (load generator for a running server)\n"
            "  -p N            prompt tokens (default 512)\n"
            "  -g N            generated tokens per run (default 256)\n"
            "  -n N            alias of -g (llama-bench's tg)\n"
            "  -r N            timed runs after one warm-up (default 5)\n"
            "  --device D      auto (default: cuda when built with CUDA=1 and a GPU is present), cuda or cpu\n"
            "  --enforce-eager no CUDA graphs\n"
            "  --kv-cache-dtype D  auto (= f16), f16, bf16, f32, fp8 / fp8_e4m3\n"
            "  --mamba-ssm-cache-dtype D  hybrid models: the Gated DeltaNet state, auto (= float32), float32, bfloat16\n"
            "  --concurrency N,..  engine mode: keep N requests in flight (continuous batching) for each N\n"
            "  --temperature T, --top-p P, --top-k K  engine mode: the requests sample (default greedy)\n"
            "  --batch-invariant engine mode, cuda: every row computed the same way whatever the batch (the\n"
            "                  default is off: split-K decode and the fast prefill paths)\n"
            "  -t N            CPU threads (cpu device)\n"
            "  --profile       per op family table (CUDA)\n"
            "  --no-pipeline   CUDA graphs: wait for each decode step's token before queuing the next (the default\n"
            "                  queues step N+1, its token taken from step N's argmax on the device, first; the timed\n"
            "                  runs' tokens are checked against the warm-up run, which waits step by step); in engine\n"
            "                  mode the engine's steps (VLLMC_ENGINE_PIPELINE=0)\n"
            "  --json          one JSON object on stdout\n");
}

/* One prefill + greedy decode. step_s: per-step times (n_gen - 1 decode steps). pipe (CUDA graphs): the decode steps
 * pipelined (backend_cuda_set_pipelined): step g + 1 is queued, its token the device's argmax of step g, before the host
 * takes step g's id, so the GPU does not wait for the host between steps; a step's time is then the interval between
 * two ids arriving. */
static vllmc_status bench_once(struct model *m, struct bk_kv_cache *kv, const struct bench_opts *o, const int32_t *prompt,
                               struct bench_run *r, double *step_s, bool pipe) {
    const int32_t P = o->n_prompt, G = o->n_gen;
    const int32_t n_blocks = (P + G + BK_KV_BLOCK) / BK_KV_BLOCK + 1;
    int32_t *bt = malloc((size_t)n_blocks * sizeof(int32_t)), *pos = malloc((size_t)P * sizeof(int32_t)),
            *sidx = calloc((size_t)P, sizeof(int32_t));
    if (!bt || !pos || !sidx) { free(bt); free(pos); free(sidx); return vllmc_errorf(VLLMC_ERR_OOM, "bench"); }
    for (int32_t i = 0; i < n_blocks; i++) bt[i] = i;
    for (int32_t i = 0; i < P; i++) pos[i] = i;
    struct bk_seq seq = {bt, n_blocks, 0};
    int32_t last = P - 1, tok = 0;
    struct bk_batch b = {P, prompt, pos, sidx, 1, &seq, 1, &last, NULL};
    vllmc_status st;
#ifdef VLLMC_CUDA
    if (bench_prof_be) backend_cuda_reset_prof(bench_prof_be);
#endif
    double t0 = vllmc_time_s();
    st = model_forward(m, &b, kv, NULL, &tok);
    r->ttft = vllmc_time_s() - t0;
    if (st) goto done;
    r->tokens[0] = tok;
#ifdef VLLMC_CUDA
    if (bench_prof_be) {
        backend_cuda_get_prof(bench_prof_be, &bench_prefill_prof);
        backend_cuda_reset_prof(bench_prof_be);
    }
#endif
    double td = vllmc_time_s();
#ifdef VLLMC_CUDA
    if (pipe) {
        if ((st = backend_cuda_set_pipelined(m->be, true))) goto done;
        double tprev = td;
        for (int32_t g = 1; g <= G; g++) {
            if (g < G) { /* queue step g: from the host's id for the first, from the device's argmax after */
                int32_t p = P + g - 1, zero = 0, row = 0, in = g == 1 ? tok : 0, unused;
                struct bk_batch d = {1, &in, &p, &zero, 1, &seq, 1, &row, NULL};
                if (g > 1) backend_cuda_tokens_from_argmax(m->be);
                if ((st = model_forward(m, &d, kv, NULL, &unused))) break;
            }
            if (g > 1) { /* then take step g - 1's id */
                if ((st = backend_cuda_fetch_argmax(m->be, &r->tokens[g - 1], 1))) break;
                const double t = vllmc_time_s();
                step_s[g - 2] = t - tprev;
                tprev = t;
            }
        }
        const vllmc_status st2 = backend_cuda_set_pipelined(m->be, false);
        if (!st) st = st2;
        if (st) goto done;
    } else
#endif
    {
        (void)pipe;
        for (int32_t g = 1; g < G; g++) {
            int32_t p = P + g - 1, zero = 0, row = 0, in = tok;
            struct bk_batch d = {1, &in, &p, &zero, 1, &seq, 1, &row, NULL};
            double ts = vllmc_time_s();
            if ((st = model_forward(m, &d, kv, NULL, &tok))) goto done;
            step_s[g - 1] = vllmc_time_s() - ts;
            r->tokens[g] = tok;
        }
    }
    r->decode = vllmc_time_s() - td;
    r->tpot_med = G > 1 ? median(step_s, G - 1) : 0;
done:
    free(bt); free(pos); free(sidx);
    return st;
}

static vllmc_status make_backend(const struct bench_opts *o, bool profile, struct backend **be) {
    struct cli_backend_opts co = {o->cpu ? CLI_DEVICE_CPU : CLI_DEVICE_CUDA, o->threads, false, o->eager, profile};
    bool is_cuda;
    return cli_backend_create(&co, be, &is_cuda);
}

static vllmc_status load(const struct bench_opts *o, bool profile, struct backend **be, struct model **m, struct bk_kv_cache **kv) {
    vllmc_status st;
    if ((st = make_backend(o, profile, be))) return st;
    if ((st = model_load(o->model, *be, m))) return st;
    (*m)->ssm_bf16 = o->ssm_bf16;
    if ((st = model_reserve(*m, o->n_prompt, 1))) return st;
    const int32_t n_blocks = (o->n_prompt + o->n_gen + BK_KV_BLOCK) / BK_KV_BLOCK + 1;
    return model_kv_create(*m, o->kv, n_blocks, kv);
}

#ifdef VLLMC_CUDA
static void print_profile(const struct bench_opts *o, const int32_t *prompt, double wall_tpot, double wall_ttft) {
    struct backend *be = NULL;
    struct model *m = NULL;
    struct bk_kv_cache *kv = NULL;
    vllmc_status st = load(o, true, &be, &m, &kv);
    bench_prof_be = be;
    if (!st) {
        int32_t *toks = malloc((size_t)o->n_gen * sizeof(int32_t));
        struct bench_run r = {.tokens = toks};
        double *steps = calloc((size_t)o->n_gen + 1, sizeof(double));
        if (!toks || !steps) st = vllmc_errorf(VLLMC_ERR_OOM, "profile");
        if (!st) st = bench_once(m, kv, o, prompt, &r, steps, false); /* warm */
        if (!st) st = bench_once(m, kv, o, prompt, &r, steps, false);
        free(steps);
        free(toks);
    }
    if (st) { fprintf(stderr, "vllmc bench: profile: %s\n", vllmc_last_error()); goto out; }
    struct backend_cuda_prof p;
    backend_cuda_get_prof(be, &p);
    /* counters cover the n_gen - 1 decode steps of the last run */
    const double G = o->n_gen - 1;
    const double busy = cli_prof_busy_ms(&p), pbusy = cli_prof_busy_ms(&bench_prefill_prof);
    printf("\nprofile of the prefill step (%d tokens; eager, one event pair per op, totals):\n", o->n_prompt);
    cli_print_prof_table(stdout, &bench_prefill_prof, 1.0);
    printf("GPU busy %.3f ms (profiled run); wall TTFT of the timed runs %.3f ms\n", pbusy, wall_ttft * 1e3);
    printf("\nprofile of the decode steps (eager, one event pair per op, per token):\n");
    cli_print_prof_table(stdout, &p, G);
    printf("GPU busy %.3f ms/token (profiled run); wall TPOT of the timed runs %.3f ms\n", busy / G, wall_tpot * 1e3);
out:
    bench_prof_be = NULL;
    if (kv) model_kv_destroy(m, kv);
    model_destroy(m);
    if (be) be->ops->destroy(be);
}
#endif

/* ---- engine mode (--concurrency) ---- */

struct eng_req {
    vllmc_request *h;
    double t_submit, t_first, t_last;
    int32_t n_out;
};

static int bench_engine(const struct bench_opts *o) {
    int max_n = 1;
    for (int i = 0; i < o->n_conc; i++) max_n = o->conc[i] > max_n ? o->conc[i] : max_n;
    vllmc_engine_opts eo;
    vllmc_engine_opts_default(&eo);
    eo.device = o->cpu ? VLLMC_DEVICE_CPU : VLLMC_DEVICE_CUDA;
    eo.max_model_len = o->n_prompt + o->n_gen + 1;
    eo.max_num_seqs = max_n;
    eo.max_num_batched_tokens = VLLMC_MAX(2048, o->n_prompt + max_n);
    eo.enable_prefix_caching = 0;
    eo.enforce_eager = o->eager;
    eo.batch_invariant = o->invariant;
    eo.threads = o->threads;
    eo.kv_dtype = o->kv == BK_KV_F32 ? VLLMC_KV_F32 : o->kv == BK_KV_BF16 ? VLLMC_KV_BF16 : o->kv == BK_KV_FP8_E4M3 ? VLLMC_KV_FP8_E4M3 : VLLMC_KV_F16;
    eo.mamba_ssm_cache_dtype = o->ssm_bf16 ? VLLMC_SSM_BF16 : VLLMC_SSM_F32;
    if (!o->pipe) setenv("VLLMC_ENGINE_PIPELINE", "0", 1); /* the engine's decode steps waited step by step */
    const char *pe = getenv("VLLMC_ENGINE_PIPELINE");
    const bool engine_pipe = !(pe && !strcmp(pe, "0"));
    double t_load = vllmc_time_s();
    vllmc_engine *e = NULL;
    if (vllmc_engine_create(o->model, &eo, &e)) { fprintf(stderr, "vllmc bench: %s\n", vllmc_last_error()); return 1; }
    t_load = vllmc_time_s() - t_load;
    vllmc_engine_stats es;
    vllmc_engine_get_stats(e, &es);
    int rc = 1;
    const int max_total = max_n * (o->reps + 1);
    struct eng_req *rq = calloc((size_t)max_total, sizeof(*rq));
    int32_t *prompt = malloc((size_t)o->n_prompt * sizeof(int32_t));
    double *tpot = calloc((size_t)max_total, sizeof(double)), *ttft = calloc((size_t)max_total, sizeof(double));
    double *itl = calloc((size_t)max_total * (size_t)o->n_gen, sizeof(double));
    if (!rq || !prompt || !tpot || !ttft || !itl) { fprintf(stderr, "vllmc bench: out of memory\n"); goto out; }
    uint64_t seed = 0x5eed;
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = o->n_gen;
    sp.ignore_eos = 1;
    sp.temperature = o->temperature;
    sp.top_p = o->top_p;
    sp.top_k = o->top_k;
    printf("engine bench: model %s, device %s%s, KV %s, prompt %d, output %d, %d x concurrency requests timed after a warm-up "
           "round (load %.1f s, %d KV blocks)", o->model, es.device == VLLMC_DEVICE_CUDA ? "cuda" : "cpu",
           es.device != VLLMC_DEVICE_CUDA ? "" : o->eager ? " (eager)" : engine_pipe ? " (CUDA graphs, pipelined steps)" : " (CUDA graphs)",
           bk_kv_dtype_name(o->kv), o->n_prompt, o->n_gen, o->reps, t_load, es.kv_blocks_total);
    if (o->temperature > 0) printf(", sampling at temperature %g, top-p %g, top-k %d", (double)o->temperature, (double)o->top_p, o->top_k);
    printf("\n");
    printf("| concurrency | requests | output tok/s | TPOT median ms | TTFT median ms | ITL median ms | N / ITL tok/s | wall s |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int ci = 0; ci < o->n_conc; ci++) {
        const int N = o->conc[ci], total = N * (o->reps + 1), warm = N;
        memset(rq, 0, (size_t)total * sizeof(*rq));
        int submitted = 0, finished = 0, live = 0, n_done_timed = 0, n_itl = 0;
        double t_start = 0, t_end = 0;
        int64_t out_timed = 0;
        while (finished < total) {
            /* keep N in flight; the timed part starts when the warm-up round has finished */
            while (live < N && submitted < total && (submitted < warm || finished >= warm)) {
                if (submitted == warm) t_start = vllmc_time_s();
                for (int i = 0; i < o->n_prompt; i++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    prompt[i] = (int32_t)((seed >> 33) % (uint64_t)es.n_vocab);
                }
                struct eng_req *r = &rq[submitted];
                r->t_submit = vllmc_time_s();
                if (vllmc_engine_submit(e, prompt, o->n_prompt, &sp, NULL, NULL, &r->h)) {
                    fprintf(stderr, "vllmc bench: submit: %s\n", vllmc_last_error());
                    goto out;
                }
                submitted++;
                live++;
            }
            bool progress = false;
            for (int i = 0; i < submitted; i++) {
                struct eng_req *r = &rq[i];
                if (!r->h) continue;
                vllmc_output out;
                if (vllmc_request_next(r->h, 0, &out)) { fprintf(stderr, "vllmc bench: %s\n", vllmc_last_error()); goto out; }
                if (out.n_tokens > 0) {
                    const double now = vllmc_time_s();
                    if (r->n_out && i >= warm)
                        for (int k = 0; k < out.n_tokens && n_itl < max_total * o->n_gen; k++) itl[n_itl++] = (now - r->t_last) / out.n_tokens;
                    if (!r->n_out) r->t_first = now;
                    r->t_last = now;
                    r->n_out += out.n_tokens;
                    progress = true;
                }
                if (out.finish != VLLMC_FINISH_NONE) {
                    if (out.finish != VLLMC_FINISH_LENGTH || r->n_out != o->n_gen) {
                        fprintf(stderr, "vllmc bench: request %d ended (%s) after %d tokens\n", i, vllmc_finish_reason_str(out.finish), r->n_out);
                        goto out;
                    }
                    vllmc_request_release(r->h);
                    r->h = NULL;
                    finished++;
                    live--;
                    progress = true;
                    if (i >= warm) {
                        out_timed += r->n_out;
                        tpot[n_done_timed] = r->n_out > 1 ? (r->t_last - r->t_first) / (r->n_out - 1) : 0;
                        ttft[n_done_timed] = r->t_first - r->t_submit;
                        n_done_timed++;
                        t_end = vllmc_time_s();
                    }
                }
            }
            if (!progress) usleep(50);
        }
        const double wall = t_end - t_start;
        const double itl_med = n_itl ? median(itl, n_itl) : 0;
        printf("| %d | %d | %.1f | %.3f | %.1f | %.3f | %.0f | %.2f |\n", N, n_done_timed, (double)out_timed / wall,
               median(tpot, n_done_timed) * 1e3, median(ttft, n_done_timed) * 1e3, itl_med * 1e3, itl_med > 0 ? N / itl_med : 0, wall);
        fflush(stdout);
    }
    rc = 0;
out:
    if (rq)
        for (int i = 0; i < max_total; i++) vllmc_request_release(rq[i].h);
    vllmc_engine_destroy(e);
    free(rq); free(prompt); free(tpot); free(ttft); free(itl);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    struct bench_opts o = {NULL, 512, 256, 5, 0, false, false, false, false, false, true, BK_KV_F16, false, {0}, 0, 0.0f, 1.0f, 0};
    o.cpu = cli_device_resolve(CLI_DEVICE_AUTO) == CLI_DEVICE_CPU;
    if (argc > 1 && !strcmp(argv[1], "serve")) return cmd_bench_serve(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") && has) o.model = argv[++i];
        else if (!strcmp(a, "-p") && has) o.n_prompt = atoi(argv[++i]);
        else if ((!strcmp(a, "-g") || !strcmp(a, "-n")) && has) o.n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && has) o.reps = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && has) o.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--json")) o.json = true;
        else if (!strcmp(a, "--enforce-eager")) o.eager = true;
        else if (!strcmp(a, "--no-batch-invariant")) o.invariant = false;
        else if (!strcmp(a, "--batch-invariant")) o.invariant = true;
        else if (!strcmp(a, "--profile")) o.profile = true;
        else if (!strcmp(a, "--no-pipeline")) o.pipe = false;
        else if (!strcmp(a, "--device") && has) {
            const char *d = argv[++i];
            enum cli_device dev;
            if (!cli_device_parse(d, &dev)) { fprintf(stderr, "vllmc bench: unknown device '%s' (auto, cpu, cuda)\n", d); return 2; }
            dev = cli_device_resolve(dev);
#ifndef VLLMC_CUDA
            if (dev == CLI_DEVICE_CUDA) { fprintf(stderr, "vllmc bench: this binary was built without CUDA (make CUDA=1)\n"); return 2; }
#endif
            o.cpu = dev == CLI_DEVICE_CPU;
        } else if (!strcmp(a, "--kv-cache-dtype") && has) {
            const char *d = argv[++i];
            if (!bk_kv_dtype_parse(d, &o.kv)) { fprintf(stderr, "vllmc bench: KV dtype '%s' (auto, f16, bf16, f32, fp8)\n", d); return 2; }
        } else if (!strcmp(a, "--mamba-ssm-cache-dtype") && has) {
            const char *d = argv[++i];
            if (!cli_ssm_dtype_parse(d, &o.ssm_bf16)) {
                fprintf(stderr, "vllmc bench: --mamba-ssm-cache-dtype '%s' (auto, float32, bfloat16)\n", d);
                return 2;
            }
        } else if ((!strcmp(a, "--temperature") || !strcmp(a, "--top-p")) && has) {
            char *end;
            const double v = strtod(argv[++i], &end);
            const bool t = !strcmp(a, "--temperature");
            if (*end || !(t ? v >= 0 && v <= 100 : v > 0 && v <= 1)) {
                fprintf(stderr, "vllmc bench: %s takes %s\n", a, t ? "a number in [0, 100]" : "a number in (0, 1]");
                return 2;
            }
            if (t) o.temperature = (float)v;
            else o.top_p = (float)v;
        } else if (!strcmp(a, "--top-k") && has) {
            char *end;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > 1 << 24) { fprintf(stderr, "vllmc bench: --top-k takes a count >= 0 (0 off)\n"); return 2; }
            o.top_k = (int)v;
        } else if (!strcmp(a, "--concurrency") && has) {
            const char *d = argv[++i];
            o.n_conc = 0;
            while (*d) {
                char *end;
                long n = strtol(d, &end, 10);
                if (end == d || n < 1 || n > 4096 || o.n_conc == 16 || (*end && *end != ',')) {
                    fprintf(stderr, "vllmc bench: --concurrency takes up to 16 counts 1..4096 separated by commas\n");
                    return 2;
                }
                o.conc[o.n_conc++] = (int)n;
                d = *end ? end + 1 : end;
            }
            if (!o.n_conc) { fprintf(stderr, "vllmc bench: --concurrency needs at least one count\n"); return 2; }
        } else { fprintf(stderr, "vllmc bench: unknown or incomplete option '%s'\n", a); usage(); return 2; }
    }
    if (!o.model || o.n_prompt < 1 || o.n_prompt > 1 << 20 || o.n_gen < 2 || o.n_gen > 1 << 20 || o.reps < 1 || o.reps > 1000) {
        usage();
        return 2;
    }
    if (o.n_conc) return bench_engine(&o);
    struct backend *be = NULL;
    struct model *m = NULL;
    struct bk_kv_cache *kv = NULL;
    int rc = 1;
    double *steps = calloc((size_t)o.n_gen + 1, sizeof(double));
    double *ttft = calloc((size_t)o.reps, sizeof(double)), *dec = calloc((size_t)o.reps, sizeof(double));
    double *tpot = calloc((size_t)o.reps, sizeof(double)), *otps = calloc((size_t)o.reps, sizeof(double));
    double *pp = calloc((size_t)o.reps, sizeof(double)), *tg = calloc((size_t)o.reps, sizeof(double));
    int32_t *prompt = malloc((size_t)o.n_prompt * sizeof(int32_t));
    int32_t *toks0 = malloc((size_t)o.n_gen * sizeof(int32_t)), *toks = malloc((size_t)o.n_gen * sizeof(int32_t));
    if (!steps || !ttft || !dec || !tpot || !otps || !pp || !tg || !prompt || !toks0 || !toks) {
        fprintf(stderr, "vllmc bench: out of memory\n");
        goto out;
    }
    double t_load = vllmc_time_s();
    vllmc_status st = load(&o, false, &be, &m, &kv);
    if (st) { fprintf(stderr, "vllmc bench: %s\n", vllmc_last_error()); goto out; }
    t_load = vllmc_time_s() - t_load;
    uint64_t seed = 0x5eed;
    for (int i = 0; i < o.n_prompt; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((seed >> 33) % (uint64_t)m->hp.n_vocab);
    }
    struct bench_run r = {.tokens = toks}, r0 = {.tokens = toks0};
    /* pipelined decode steps where graphs replay them; the warm-up run waits step by step, and every timed run's
     * tokens must equal its. --profile leaves the timed runs as they are: its pass runs afterwards, on a backend of
     * its own (with the runs step by step here, its wall TPOT read 3% above the same bench's without it) */
    const bool pipe = o.pipe && !o.cpu && !o.eager;
    if ((st = bench_once(m, kv, &o, prompt, &r0, steps, false))) { fprintf(stderr, "vllmc bench: %s\n", vllmc_last_error()); goto out; }
    for (int k = 0; k < o.reps; k++) {
        if ((st = bench_once(m, kv, &o, prompt, &r, steps, pipe))) { fprintf(stderr, "vllmc bench: %s\n", vllmc_last_error()); goto out; }
        if (memcmp(toks, toks0, (size_t)o.n_gen * sizeof(int32_t))) {
            int32_t g = 0;
            while (toks[g] == toks0[g]) g++;
            if (pipe) { /* a wrong token is a wrong result, not noise */
                fprintf(stderr, "vllmc bench: run %d (pipelined steps) generated token %d = %d where the step-by-step warm-up run "
                        "gave %d\n", k, g, toks[g], toks0[g]);
                goto out;
            }
            fprintf(stderr, "vllmc bench: warning: run %d generated other tokens than the warm-up run (from token %d)\n", k, g);
        }
        ttft[k] = r.ttft; dec[k] = r.decode; tpot[k] = r.tpot_med;
        otps[k] = o.n_gen / (r.ttft + r.decode);
        pp[k] = o.n_prompt / r.ttft;
        tg[k] = (o.n_gen - 1) / r.decode;
    }
    double pp_m, pp_sd, tg_m, tg_sd;
    mean_sd(pp, o.reps, &pp_m, &pp_sd);
    mean_sd(tg, o.reps, &tg_m, &tg_sd);
    const double ttft_med = median(ttft, o.reps), tpot_med = median(tpot, o.reps), otps_med = median(otps, o.reps);
    double dec_tps[1000];
    for (int k = 0; k < o.reps; k++) dec_tps[k] = (o.n_gen - 1) / dec[k];
    const double dtps_med = median(dec_tps, o.reps);
    const double wbytes = (double)model_weight_bytes(m);
    const double abytes = (double)model_active_weight_bytes(m); /* bytes a decode token reads (top-k experts) */
    uint64_t peak = 0;
    double dram_bps = 0; /* the device's nominal DRAM bandwidth (CUDA; 0: unknown, no roofline fraction) */
    uint64_t replays = 0, captures = 0, tiled_ffn = 0, tiled_pj = 0, tiled_moe = 0;
    double host_us = 0, wait_us = 0; /* a replayed step's host time before its graph runs, and its wait after */
#ifdef VLLMC_CUDA
    if (!o.cpu) {
        struct backend_cuda_stats cs;
        backend_cuda_get_stats(be, &cs);
        peak = cs.bytes_peak;
        dram_bps = cs.dram_peak_bps;
        replays = cs.graph_replays;
        captures = cs.graph_captures;
        tiled_ffn = cs.mega2_ffn; /* (VLLMC_CUDA_MEGA2: FFNs as one tiled launch, summed over the recorded steps) */
        tiled_pj = cs.mega2_pj;
        tiled_moe = cs.moe2; /* (VLLMC_CUDA_MOE2: MoE ops as the router and one tiled launch) */
        if (cs.host_steps) {
            host_us = cs.host_ns / 1e3 / (double)cs.host_steps;
            wait_us = cs.wait_ns / 1e3 / (double)cs.host_steps;
        }
    }
#endif
    if (o.json) {
        printf("{\"model\":\"%s\",\"arch\":\"%s\",\"backend\":\"%s\",\"graphs\":%s,\"n_prompt\":%d,\"n_gen\":%d,\"reps\":%d,"
               "\"output_tok_s\":%.2f,\"decode_tok_s\":%.2f,\"tpot_ms\":%.4f,\"ttft_ms\":%.3f,\"pp_tok_s\":%.2f,\"pp_sd\":%.2f,"
               "\"tg_tok_s\":%.2f,\"tg_sd\":%.2f,\"peak_vram_bytes\":%llu,\"weight_bytes\":%.0f,\"bytes_per_token\":%.0f,\"roofline_frac\":%.4f,"
               "\"graph_replays\":%llu,\"graph_captures\":%llu,\"host_us_per_step\":%.2f,\"wait_us_per_step\":%.2f,\"pipelined\":%s,"
               "\"load_s\":%.2f}\n",
               o.model, m->hp.arch, be->ops->name, (!o.cpu && !o.eager) ? "true" : "false", o.n_prompt, o.n_gen, o.reps, otps_med,
               dtps_med, tpot_med * 1e3, ttft_med * 1e3, pp_m, pp_sd, tg_m, tg_sd, (unsigned long long)peak, wbytes,
               abytes, dram_bps > 0 ? abytes / dram_bps / tpot_med : 0.0, (unsigned long long)replays, (unsigned long long)captures, host_us, wait_us, pipe ? "true" : "false", t_load);
    } else {
        printf("model %s (%s, %.2f GB of weights), backend %s%s, prompt %d, generate %d, %d runs after a warm-up (load %.1f s)\n",
               o.model, m->hp.arch, wbytes / 1e9, be->ops->name, o.cpu ? "" : (o.eager ? " (eager)" : " (CUDA graphs)"),
               o.n_prompt, o.n_gen, o.reps, t_load);
        printf("output tok/s %.1f | decode tok/s %.1f | TPOT %.3f ms | TTFT %.1f ms | peak VRAM %.2f GB\n", otps_med, dtps_med,
               tpot_med * 1e3, ttft_med * 1e3, peak / 1e9);
        printf("bytes per token %.2f GB / TPOT = %.0f GB/s", abytes / 1e9, abytes / tpot_med / 1e9);
        if (dram_bps > 0) /* against the device's nominal DRAM bandwidth */
            printf(" = %.0f%% of this device's %.2f TB/s", 100.0 * abytes / tpot_med / dram_bps, dram_bps / 1e12);
        printf("; graph replays %llu, captures %llu\n", (unsigned long long)replays, (unsigned long long)captures);
        if (tiled_ffn && replays + captures)
            printf("dense FFNs as one tiled persistent launch (VLLMC_CUDA_MEGA2): %.1f a recorded step, %.1f of them with the output "
                   "projection before them inside (VLLMC_CUDA_MEGA2_PJ)\n",
                   (double)tiled_ffn / (double)(replays + captures), (double)tiled_pj / (double)(replays + captures));
        if (tiled_moe && replays + captures)
            printf("MoE ops as the router and one tiled persistent launch (VLLMC_CUDA_MOE2): %.1f a recorded step\n",
                   (double)tiled_moe / (double)(replays + captures));
        if (replays)
            printf("a replayed step's host time: %.1f us from the batch to its graph's launch (%s), %.1f us waiting for its "
                   "token\n", host_us, pipe ? "under the step before: pipelined steps, tokens checked against a step-by-step run"
                                              : "the GPU idle", wait_us);
        printf("| model | backend | test | t/s |\n|---|---|---|---|\n");
        printf("| %s | %s | pp%d | %.2f +- %.2f |\n", m->hp.arch, be->ops->name, o.n_prompt, pp_m, pp_sd);
        printf("| %s | %s | tg%d | %.2f +- %.2f |\n", m->hp.arch, be->ops->name, o.n_gen, tg_m, tg_sd);
    }
    rc = 0;
#ifdef VLLMC_CUDA
    if (o.profile && !o.cpu) {
        if (kv) model_kv_destroy(m, kv);
        kv = NULL;
        model_destroy(m);
        m = NULL;
        be->ops->destroy(be);
        be = NULL;
        print_profile(&o, prompt, tpot_med, ttft_med);
    }
#endif
out:
    if (kv) model_kv_destroy(m, kv);
    model_destroy(m);
    if (be) be->ops->destroy(be);
    free(steps); free(ttft); free(dec); free(tpot); free(otps); free(pp); free(tg); free(prompt); free(toks0); free(toks);
    return rc;
}
