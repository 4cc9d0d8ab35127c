/* Engine on real tiny models (CPU backend). usage: test_engine MODEL.gguf... (tests/py/test_engine_models.py
 * generates the models and runs this; without arguments the test has nothing to do and says so).
 * For each model:
 *   - reference: greedy tokens of each prompt from a plain single-sequence loop over model_forward
 *     (whole prompt, then one token at a time), the way `vllmc generate` runs;
 *   - alone: each prompt through the engine by itself;
 *   - together: all prompts at once (continuous batching, chunked prefill under a small token budget);
 *   - squeezed: all at once with a KV pool so small that requests are preempted and recomputed;
 *   every one must give the reference tokens exactly (batch invariance);
 *   - prefix caching: a request extending an earlier 80-token prompt by 10 tokens computes only those 10
 *     (engine stats) on a dense model and on a hybrid (through the recurrent-state snapshot at the end
 *     of the earlier prompt); a hybrid without snapshot slots reuses nothing; the tokens equal a cold run. */
#include <math.h>
#include <string.h>
#include "engine/engine.h"
#include "model/model.h"
#include "test.h"

#define NP 8
#define NGEN 10

static int32_t prompts[NP][128], n_prompt[NP];

static int ref_tokens(const char *path, int32_t out[NP][NGEN]) {
    struct backend *be = NULL;
    struct model *m = NULL;
    struct bk_kv_cache *kv = NULL;
    if (backend_cpu_create(2, false, &be) || model_load(path, be, &m) || model_reserve(m, 128, 1) ||
        model_kv_create(m, BK_KV_F16, 16, &kv)) {
        fprintf(stderr, "reference: %s\n", vllmc_last_error());
        return 1;
    }
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    int32_t table[16], pos[128], seq[128] = {0};
    for (int i = 0; i < 16; i++) table[i] = i;
    for (int p = 0; p < NP; p++) {
        int32_t toks[128];
        memcpy(toks, prompts[p], (size_t)n_prompt[p] * sizeof(int32_t));
        int32_t n = n_prompt[p], done = 0;
        for (int g = 0; g < NGEN; g++) {
            for (int32_t i = done; i < n; i++) pos[i - done] = i;
            struct bk_seq s = {.block_table = table, .n_blocks = CEIL_DIV(n, BK_KV_BLOCK), .state_slot = 0};
            int32_t lrow = n - done - 1;
            struct bk_batch b = {.n_tokens = n - done, .token_ids = toks + done, .pos = pos, .seq_idx = seq, .n_seqs = 1, .seqs = &s,
                                 .n_logits = 1, .logit_rows = &lrow};
            if (model_forward(m, &b, kv, logits, NULL)) { fprintf(stderr, "forward: %s\n", vllmc_last_error()); return 1; }
            done = n;
            int32_t best = 0;
            for (int32_t v = 1; v < m->hp.n_vocab; v++) if (logits[v] > logits[best]) best = v;
            out[p][g] = best;
            toks[n++] = best;
        }
    }
    free(logits);
    model_kv_destroy(m, kv);
    model_destroy(m);
    be->ops->destroy(be);
    return 0;
}

static void engine_opts(vllmc_engine_opts *o, int32_t seqs, int32_t budget, int32_t kv_blocks, int caching) {
    vllmc_engine_opts_default(o);
    o->max_model_len = 128;
    o->max_num_seqs = seqs;
    o->max_num_batched_tokens = budget;
    o->kv_blocks = kv_blocks;
    o->enable_prefix_caching = caching;
    o->threads = 2;
    o->print_plan = 0;
    o->device = VLLMC_DEVICE_CPU; /* the reference is the CPU backend's (a CUDA build on a GPU machine would pick the GPU) */
}

/* Run prompts idx[0..n) at once; tokens into out. */
static int run_engine(const char *path, const vllmc_engine_opts *o, const int *idx, int n, int32_t out[NP][NGEN],
                      vllmc_engine_stats *stats) {
    vllmc_engine *e = NULL;
    if (vllmc_engine_create(path, o, &e)) { fprintf(stderr, "engine: %s\n", vllmc_last_error()); return 1; }
    vllmc_request *h[NP];
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = NGEN;
    sp.ignore_eos = 1;
    for (int i = 0; i < n; i++)
        if (vllmc_engine_submit(e, prompts[idx[i]], n_prompt[idx[i]], &sp, NULL, NULL, &h[i])) {
            fprintf(stderr, "submit: %s\n", vllmc_last_error());
            return 1;
        }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int32_t k = 0;
        vllmc_output r;
        do {
            vllmc_request_next(h[i], -1, &r);
            for (int32_t j = 0; j < r.n_tokens; j++) if (k < NGEN) out[idx[i]][k++] = r.tokens[j];
        } while (!r.finish);
        if (k != NGEN || r.finish != VLLMC_FINISH_LENGTH) bad++;
        vllmc_request_release(h[i]);
    }
    if (stats) vllmc_engine_get_stats(e, stats);
    vllmc_engine_destroy(e);
    return bad;
}

static int same_tokens(int32_t a[NP][NGEN], int32_t b[NP][NGEN], int p) { return !memcmp(a[p], b[p], sizeof(a[p])); }

/* The same without the engine's thread (engine_model_create(..., false)): every prompt submitted, then engine_step in
 * this thread until nothing is left, so the batches do not depend on when the requests arrived (test_cuda_engine's
 * checks without batch invariance rest on this). Returns the number of steps, or -1. */
static int64_t run_engine_stepped(const char *path, const vllmc_engine_opts *o, int32_t out[NP][NGEN]) {
    vllmc_engine *e = NULL;
    if (engine_model_create(path, o, false, &e)) { fprintf(stderr, "engine: %s\n", vllmc_last_error()); return -1; }
    vllmc_request *h[NP] = {0};
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = NGEN;
    sp.ignore_eos = 1;
    int64_t steps = 0;
    for (int i = 0; i < NP; i++)
        if (vllmc_engine_submit(e, prompts[i], n_prompt[i], &sp, NULL, NULL, &h[i])) steps = -1;
    vllmc_output r;
    if (steps == 0 && h[0] && vllmc_request_next(h[0], 0, &r) == VLLMC_OK && r.n_tokens != 0) steps = -1; /* nothing before a step */
    while (steps >= 0 && engine_step(e)) steps++;
    for (int i = 0; i < NP && steps >= 0; i++) {
        if (vllmc_request_next(h[i], 0, &r) || r.finish != VLLMC_FINISH_LENGTH || r.n_tokens != NGEN) {
            fprintf(stderr, "stepped request %d: finish %d after %d tokens\n", i, (int)r.finish, r.n_tokens);
            steps = -1;
            break;
        }
        memcpy(out[i], r.tokens, sizeof(out[i]));
    }
    for (int i = 0; i < NP; i++) vllmc_request_release(h[i]);
    vllmc_engine_destroy(e);
    return steps;
}

/* Prompt 6, then prompt 7 (sharing its first 64 tokens) in one engine; prompt 7's tokens must equal the
 * cold run. Returns whether the model has recurrent state. */
static bool prefix_run(const char *path, int32_t snapshots, int32_t cold[NP][NGEN]) {
    static int32_t warm[NP][NGEN];
    vllmc_engine_opts o;
    engine_opts(&o, 4, 128, 0, 1);
    o.state_snapshots = snapshots;
    vllmc_engine *e = NULL;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_OK);
    if (!e) return false;
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = NGEN;
    sp.ignore_eos = 1;
    vllmc_engine_stats s0, s1;
    int32_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        int p = pass ? 7 : 6;
        vllmc_engine_get_stats(e, &s0);
        vllmc_request *h = NULL;
        CHECK(vllmc_engine_submit(e, prompts[p], n_prompt[p], &sp, NULL, NULL, &h) == VLLMC_OK);
        vllmc_output r;
        k = 0;
        do {
            vllmc_request_next(h, -1, &r);
            for (int32_t j = 0; j < r.n_tokens; j++) if (k < NGEN) warm[p][k++] = r.tokens[j];
        } while (!r.finish);
        if (pass) {
            vllmc_engine_get_stats(e, &s1);
            const int64_t computed = s1.prompt_tokens_computed - s0.prompt_tokens_computed;
            const bool reuse = !s1.recurrent_state || snapshots != 0;
            CHECK_MSG(s1.prefix_caching == reuse, "prefix caching %d, recurrent state %d, snapshots %d", s1.prefix_caching,
                      s1.recurrent_state, snapshots);
            if (reuse) {
                CHECK_MSG(computed == 10 && r.n_cached_tokens == 80, "second request computed %lld prompt tokens, %d cached",
                          (long long)computed, r.n_cached_tokens);
            } else {
                CHECK_MSG(computed == 90 && r.n_cached_tokens == 0, "hybrid without snapshots: second request computed %lld prompt "
                          "tokens, %d cached", (long long)computed, r.n_cached_tokens);
            }
            printf("  prefix caching %s%s: second request computed %lld of 90 prompt tokens\n", s1.prefix_caching ? "on" : "off",
                   s1.recurrent_state ? (snapshots ? " (state snapshots)" : " (no snapshots)") : "", (long long)computed);
        }
        vllmc_request_release(h);
    }
    CHECK_MSG(same_tokens(cold, warm, 7), "%s: prefix-cached request differs from a cold run", path);
    const bool hybrid = s1.recurrent_state != 0;
    vllmc_engine_destroy(e);
    return hybrid;
}

static void test_model(const char *path) {
    printf("model %s\n", path);
    static int32_t ref[NP][NGEN], alone[NP][NGEN], together[NP][NGEN], squeezed[NP][NGEN];
    CHECK(ref_tokens(path, ref) == 0);
    vllmc_engine_opts o;
    int all[NP];
    for (int p = 0; p < NP; p++) all[p] = p;
    engine_opts(&o, 1, 128, 0, 1); /* max_num_seqs 1: each request runs by itself */
    CHECK(run_engine(path, &o, all, NP, alone, NULL) == 0);
    engine_opts(&o, NP, 40, 0, 1);
    vllmc_engine_stats st;
    CHECK(run_engine(path, &o, all, NP, together, &st) == 0);
    engine_opts(&o, NP, 40, 8, 0); /* 8 blocks: one 128-token request fits, eight do not */
    vllmc_engine_stats sq;
    CHECK(run_engine(path, &o, all, NP, squeezed, &sq) == 0);
    CHECK_MSG(sq.preemptions > 0, "squeezed run had no preemption");
    static int32_t stepped[NP][NGEN];
    engine_opts(&o, NP, 40, 0, 1);
    const int64_t n_steps = run_engine_stepped(path, &o, stepped);
    CHECK_MSG(n_steps > 0, "stepped run failed");
    printf("  together: %lld steps; squeezed: %lld steps, %lld preemptions; stepped in this thread: %lld steps\n", (long long)st.steps,
           (long long)sq.steps, (long long)sq.preemptions, (long long)n_steps);
    for (int p = 0; p < NP; p++) {
        CHECK_MSG(same_tokens(ref, alone, p), "%s prompt %d: engine alone differs from the single-sequence loop", path, p);
        CHECK_MSG(same_tokens(ref, together, p), "%s prompt %d: batched differs from alone", path, p);
        CHECK_MSG(same_tokens(ref, squeezed, p), "%s prompt %d: with preemption differs from alone", path, p);
        CHECK_MSG(same_tokens(ref, stepped, p), "%s prompt %d: stepped in this thread differs from alone", path, p);
    }

    /* prefix caching: prompt 7 = prompt 6 (80 tokens) + 10 more, as a chat's next turn extends the last */
    memcpy(prompts[7], prompts[6], 80 * sizeof(int32_t));
    for (int i = 80; i < 90; i++) prompts[7][i] = (int32_t)(test_rand_u64() % 300);
    n_prompt[7] = 90;
    static int32_t cold[NP][NGEN];
    int seven = 7;
    engine_opts(&o, 4, 128, 0, 0);
    CHECK(run_engine(path, &o, &seven, 1, cold, NULL) == 0);
    const bool hybrid = prefix_run(path, -1, cold);
    if (hybrid) prefix_run(path, 0, cold); /* the other policy: no snapshots, no reuse */
}


/* Text, stop strings, logprobs, the memory plan refusal. */
/* Greedy output ids of prompts[0] (n tokens, EOS ignored) under a logit bias. */
static int32_t greedy_ids(vllmc_engine *e, const vllmc_logit_bias *b, int32_t nb, int32_t *out, int32_t n, vllmc_logit_bias *mutate) {
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = n;
    sp.ignore_eos = 1;
    sp.logit_bias = b;
    sp.n_logit_bias = nb;
    vllmc_request *h = NULL;
    if (vllmc_engine_submit(e, prompts[0], n_prompt[0], &sp, NULL, NULL, &h) != VLLMC_OK) return -1;
    if (mutate) mutate->bias = -mutate->bias; /* the engine copied the list at submit */
    vllmc_output r;
    int32_t k = 0;
    do {
        vllmc_request_next(h, -1, &r);
        for (int32_t j = 0; j < r.n_tokens && k < n; j++) out[k++] = r.tokens[j];
    } while (!r.finish);
    vllmc_request_release(h);
    return k;
}

/* logit_bias through the engine: -100 bans (greedy avoids every banned id), +100 forces, the list is
 * copied at submit, bad entries are refused. */
static void test_logit_bias(vllmc_engine *e) {
    int32_t g[8], b[8];
    CHECK(greedy_ids(e, NULL, 0, g, 8, NULL) == 8);
    vllmc_logit_bias ban[8];
    for (int i = 0; i < 8; i++) ban[i] = (vllmc_logit_bias){g[i], -100.0f};
    CHECK(greedy_ids(e, ban, 8, b, 8, NULL) == 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) CHECK_MSG(b[i] != g[j], "banned id %d drawn at %d", g[j], i);
    int32_t f = 0;
    for (bool used = true; used; f++) { used = false; for (int j = 0; j < 8; j++) used |= g[j] == f; }
    f--;
    vllmc_logit_bias force = {f, 100.0f};
    CHECK(greedy_ids(e, &force, 1, b, 8, &force) == 8);
    for (int i = 0; i < 8; i++) CHECK(b[i] == f);
    vllmc_logit_bias bad[3] = {{1000000, 1.0f}, {-1, 1.0f}, {3, 100.5f}};
    for (int i = 0; i < 3; i++) CHECK_MSG(greedy_ids(e, &bad[i], 1, b, 8, NULL) == -1 && strstr(vllmc_last_error(), "logit_bias"), "bad %d", i);
    CHECK(greedy_ids(e, NULL, 2, b, 8, NULL) == -1);
}

static void test_text_stops_logprobs(const char *path) {
    vllmc_engine_opts o;
    engine_opts(&o, 4, 64, 0, 1);
    vllmc_engine *e = NULL;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_OK);
    if (!e) return;
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.max_tokens = 24;
    sp.ignore_eos = 1;
    sp.logprobs = 3;
    sp.temperature = 1.0f; /* seeded sampling: varied text, the same draws in every run */
    sp.seed = 1234;
    vllmc_request *h = NULL;
    CHECK(vllmc_engine_submit(e, prompts[0], n_prompt[0], &sp, NULL, NULL, &h) == VLLMC_OK);
    char text[4096];
    size_t tl = 0;
    int32_t toks[64], nt = 0;
    vllmc_output r;
    do {
        vllmc_request_next(h, -1, &r);
        for (int32_t j = 0; j < r.n_tokens; j++) {
            toks[nt++] = r.tokens[j];
            /* logprobs sorted, <= 0, total mass <= 1; the sampled token's is at most the best one's */
            const vllmc_token_logprob *t = r.top_logprobs + (size_t)j * (size_t)r.n_top;
            CHECK(r.n_top == 3 && r.logprobs[j] <= t[0].logprob && (t[0].id != r.tokens[j] || t[0].logprob == r.logprobs[j]));
            CHECK(t[0].logprob >= t[1].logprob && t[1].logprob >= t[2].logprob && t[0].logprob <= 0.0f);
            CHECK(expf(t[0].logprob) + expf(t[1].logprob) + expf(t[2].logprob) <= 1.0001f);
        }
        if (tl + r.text_len < sizeof(text)) { memcpy(text + tl, r.text, r.text_len); tl += r.text_len; }
    } while (!r.finish);
    CHECK(r.finish == VLLMC_FINISH_LENGTH && nt == 24);
    vllmc_request_release(h);
    text[tl] = 0;
    printf("  text: \"%.60s\"...\n", text);
    /* stop at a 3-byte string from the middle of that text: the text ends right before its first occurrence */
    /* 3 bytes from the middle of the text (no NUL, found with memmem: the text may hold any byte) */
    size_t at_stop = tl / 2;
    while (at_stop + 3 <= tl && memchr(text + at_stop, 0, 3)) at_stop++;
    if (tl >= 12 && at_stop + 3 <= tl) {
        char stop[4];
        memcpy(stop, text + at_stop, 3);
        stop[3] = 0;
        const char *first = memmem(text, tl, stop, 3);
        const char *stops[1] = {stop};
        sp.logprobs = -1;
        sp.stop = stops;
        sp.n_stop = 1;
        CHECK(vllmc_engine_submit(e, prompts[0], n_prompt[0], &sp, NULL, NULL, &h) == VLLMC_OK);
        char t2[4096];
        size_t l2 = 0;
        int32_t n2 = 0;
        do {
            vllmc_request_next(h, -1, &r);
            for (int32_t j = 0; j < r.n_tokens; j++) { CHECK(r.tokens[j] == toks[n2]); n2++; }
            if (l2 + r.text_len < sizeof(t2)) { memcpy(t2 + l2, r.text, r.text_len); l2 += r.text_len; }
        } while (!r.finish);
        vllmc_request_release(h);
        CHECK(r.finish == VLLMC_FINISH_STOP && n2 <= 24);
        CHECK_MSG(first && l2 == (size_t)(first - text) && !memcmp(t2, text, l2), "stop string at byte %zu: %zu bytes of text, expected %td",
                  at_stop, l2, first ? first - text : -1);
    }
    /* a stop id ends the stream at that token (included in the ids) */
    sp.n_stop = 0;
    sp.stop_ids = &toks[5];
    sp.n_stop_ids = 1;
    int32_t at = 0;
    while (toks[at] != toks[5]) at++;
    CHECK(vllmc_engine_submit(e, prompts[0], n_prompt[0], &sp, NULL, NULL, &h) == VLLMC_OK);
    int32_t n3 = 0;
    do { vllmc_request_next(h, -1, &r); n3 += r.n_tokens; } while (!r.finish);
    CHECK(r.finish == VLLMC_FINISH_STOP && n3 == at + 1);
    vllmc_request_release(h);
    test_logit_bias(e);
    vllmc_engine_destroy(e);
    /* a plan that cannot fit is refused with numbers */
    engine_opts(&o, 4, 64, 0, 1);
    o.memory_limit_bytes = 1 << 20;
    e = NULL;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_OOM && e == NULL);
    CHECK(strstr(vllmc_last_error(), "MiB") != NULL);
    printf("  refused: %s\n", vllmc_last_error());
}

/* Other KV dtypes (fp8 with and without the key shift): batched with preemption equals alone (each against itself). */
static void test_kv_dtypes(const char *path) {
    static int32_t alone[NP][NGEN], squeezed[NP][NGEN];
    int all[NP];
    for (int p = 0; p < NP; p++) all[p] = p;
    const vllmc_kv_dtype dts[] = {VLLMC_KV_F32, VLLMC_KV_BF16, VLLMC_KV_FP8_E4M3, VLLMC_KV_FP8_E4M3};
    const int plain[] = {0, 0, 0, 1};
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        vllmc_engine_opts o;
        engine_opts(&o, 1, 128, 0, 1);
        o.kv_dtype = dts[d];
        o.kv_fp8_plain = plain[d];
        CHECK(run_engine(path, &o, all, NP, alone, NULL) == 0);
        engine_opts(&o, NP, 40, 8, 1);
        o.kv_dtype = dts[d];
        o.kv_fp8_plain = plain[d];
        CHECK(run_engine(path, &o, all, NP, squeezed, NULL) == 0);
        for (int p = 0; p < NP; p++) CHECK_MSG(same_tokens(alone, squeezed, p), "kv dtype %d prompt %d: batched differs from alone", (int)dts[d], p);
    }
    printf("  kv dtypes f32, bf16, fp8_e4m3 (shifted and plain): batched with preemption equals alone\n");
}

/* The Gated DeltaNet state in bf16 (vllmc_engine_opts.mamba_ssm_cache_dtype; dense models have none): a bad value is
 * refused; the engine serves with it, and greedy runs repeat exactly. (Batched with preemption need not equal alone:
 * the state is rounded at the end of each step's run, so another prefill chunking rounds it at other places.) */
static void test_ssm_bf16(const char *path) {
    static int32_t a[NP][NGEN], b[NP][NGEN];
    int all[NP];
    for (int p = 0; p < NP; p++) all[p] = p;
    vllmc_engine_opts o;
    vllmc_engine *e = NULL;
    engine_opts(&o, 2, 64, 0, 1);
    o.mamba_ssm_cache_dtype = (vllmc_ssm_dtype)7;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_INVALID && !e && strstr(vllmc_last_error(), "mamba_ssm_cache_dtype"));
    engine_opts(&o, NP, 40, 8, 1);
    o.mamba_ssm_cache_dtype = VLLMC_SSM_BF16;
    CHECK(run_engine(path, &o, all, NP, a, NULL) == 0);
    CHECK(run_engine(path, &o, all, NP, b, NULL) == 0);
    for (int p = 0; p < NP; p++) CHECK_MSG(same_tokens(a, b, p), "bf16 state prompt %d: a second run differs", p);
    printf("  bf16 state: served, greedy runs repeat\n");
}

/* Device and memory options: bad values are refused with a message, a plan over the utilization limit too;
 * the stats name the device the engine runs on. */
static void test_device_opts(const char *path) {
    vllmc_engine_opts o;
    vllmc_engine *e = NULL;
    engine_opts(&o, 2, 64, 0, 1);
    o.device = (vllmc_device)7;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_INVALID && !e && strstr(vllmc_last_error(), "device"));
    engine_opts(&o, 2, 64, 0, 1);
    o.gpu_memory_utilization = 1.5f;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_INVALID && !e && strstr(vllmc_last_error(), "gpu_memory_utilization"));
    o.gpu_memory_utilization = NAN;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_INVALID && !e);
    engine_opts(&o, 2, 64, 0, 1);
    o.device = VLLMC_DEVICE_CPU;
    o.gpu_memory_utilization = 1e-9f; /* a few bytes of host memory */
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_OOM && !e && strstr(vllmc_last_error(), "host memory"));
#ifndef VLLMC_CUDA
    engine_opts(&o, 2, 64, 0, 1);
    o.device = VLLMC_DEVICE_CUDA;
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_ERR_UNSUPPORTED && !e && strstr(vllmc_last_error(), "cuda"));
#endif
    engine_opts(&o, 2, 64, 0, 1);
    o.device = VLLMC_DEVICE_CPU;
    o.gpu_memory_utilization = 0.9f; /* of the host: fits */
    CHECK(vllmc_engine_create(path, &o, &e) == VLLMC_OK && e);
    if (e) {
        vllmc_engine_stats st;
        vllmc_engine_get_stats(e, &st);
        CHECK(st.device == VLLMC_DEVICE_CPU && st.n_vocab > 0);
        vllmc_engine_destroy(e);
    }
}

int main(int argc, char **argv) {
    test_seed_auto("test_engine");
    for (int p = 0; p < NP; p++) {
        n_prompt[p] = 20 + (int32_t)(test_rand_u64() % 53);
        for (int i = 0; i < 96; i++) prompts[p][i] = (int32_t)(test_rand_u64() % 300);
    }
    n_prompt[6] = 80;
    if (argc < 2) {
        printf("test_engine: no model given (tests/py/test_engine_models.py passes the tiny models); nothing to do\n");
        return test_finish("test_engine");
    }
    vllmc_log_set_level(VLLMC_LOG_WARN);
    test_device_opts(argv[1]);
    for (int i = 1; i < argc; i++) {
        test_kv_dtypes(argv[i]); /* every family: the fp8 key shift is derived per family at cache creation */
        test_ssm_bf16(argv[i]);
        test_model(argv[i]);
        test_text_stops_logprobs(argv[i]);
    }
    return test_finish("test_engine");
}
