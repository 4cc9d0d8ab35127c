/* `vllmc generate` and `vllmc chat`: load a GGUF on the CPU or CUDA backend (--device), prefill the prompt
 * in chunks, then decode one token per step with the sampler, streaming text to stdout (speeds on stderr).
 * On CUDA, plain greedy decoding brings back only the argmax id of each step and plain sampling the id the device drew; --profile prints the
 * per-op-family tables of the prefill and of the decode steps.
 * Debug/oracle modes: --prompt-ids (skip the tokenizer), --ids (print ids as JSON), --dump-logits
 * (every computed logits row as raw float32 to a file), --perplexity (score a text file). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "common/common.h"
#include "engine/sampler.h"
#include "model/model.h"
#ifdef VLLMC_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "template/template.h"
#include "tokenizer/tokenizer.h"
#ifdef VLLMC_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

struct gen_opts {
    const char *model_path, *prompt, *prompt_ids, *dump_logits, *system, *perplexity;
    int32_t n_predict, n_threads, batch, ctx;
    bool ids, ignore_eos, reference, verbose, kv_fp8_plain, eager, profile, no_pipeline, ssm_bf16;
    enum bk_kv_dtype kv_dtype;
    enum cli_device device;
    struct sampler_params sp;
};

static void gen_usage(const char *cmd) {
    fprintf(stderr,
            "usage: vllmc %s -m MODEL.gguf %s[options]\n"
            "  -m, --model FILE          GGUF model\n"
            "%s"
            "  -n, --n-predict N         tokens to generate (default 128%s)\n"
            "  -t, --threads N           CPU threads (default: all)\n"
            "  --device D                auto (default: cuda when built with CUDA=1 and a GPU is present), cpu, cuda\n"
            "  --enforce-eager           cuda: no CUDA graphs\n"
            "%s"
            "  --temperature T           0 = greedy (default 0)\n"
            "  --top-k K  --top-p P  --min-p M  --seed S\n"
            "  --repeat-penalty R  --presence-penalty P  --frequency-penalty F\n"
            "  --ignore-eos              do not stop at an end-of-generation token\n"
            "  --no-pipeline             (cuda, greedy or plain sampling) wait for each token before queuing the next step\n"
            "  --batch N                 prefill chunk size (default 256)\n"
            "  --ctx N                   context length to reserve (default prompt + n)\n"
            "  --kv-cache-dtype T        KV cache type: auto (= f16) | f16 | bf16 | fp8 (e4m3, scaled) | f32\n"
            "  --kv-f32                  same as --kv-cache-dtype f32\n"
            "  --kv-fp8-plain            fp8 cache without the key shift (vLLM's fp8 cache as is)\n"
            "  --mamba-ssm-cache-dtype T hybrid models: the Gated DeltaNet state, auto (= float32) | float32 | bfloat16\n"
            "  --reference               plain scalar reference ops (slow; for testing)\n"
            "%s",
            cmd, strcmp(cmd, "chat") ? "-p TEXT " : "",
            strcmp(cmd, "chat") ? "  -p, --prompt TEXT         prompt text (special tokens parsed)\n"
                                  "  --prompt-ids JSON         prompt as a JSON array of token ids instead of text\n"
                                  "  --ids                     print the generated ids as one JSON array instead of text\n"
                                  "  --dump-logits FILE        write every computed logits row (float32) to FILE\n"
                                  "  --perplexity FILE         score the text of FILE (specials added as the model asks;\n"
                                  "                            --batch rows per step): print JSON {n_tokens, n_scored,\n"
                                  "                            kv_cache_dtype, nll, ppl} and generate nothing\n"
                                : "  --system TEXT             system message\n",
            strcmp(cmd, "chat") ? "" : " per reply; -1 = until the end of the context",
            strcmp(cmd, "chat") ? "  --profile                 cuda: per op family tables of the prefill and the decode steps (eager)\n" : "",
            "");
}

static bool parse_i32(const char *s, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < INT32_MIN || v > INT32_MAX) return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_f32(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static int parse_opts(int argc, char **argv, bool chat, struct gen_opts *o) {
    memset(o, 0, sizeof(*o));
    o->n_predict = chat ? -1 : 128;
    o->batch = 256;
    o->kv_dtype = BK_KV_F16;
    sampler_params_default(&o->sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_ARG() do { if (!v) { fprintf(stderr, "vllmc: %s needs a value\n", a); return 2; } i++; } while (0)
#define BAD(what) do { fprintf(stderr, "vllmc: bad value for %s: '%s'\n", a, what); return 2; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { gen_usage(chat ? "chat" : "generate"); return 1; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_ARG(); o->model_path = v; }
        else if (!chat && (!strcmp(a, "-p") || !strcmp(a, "--prompt"))) { NEED_ARG(); o->prompt = v; }
        else if (!chat && !strcmp(a, "--prompt-ids")) { NEED_ARG(); o->prompt_ids = v; }
        else if (!chat && !strcmp(a, "--dump-logits")) { NEED_ARG(); o->dump_logits = v; }
        else if (!chat && !strcmp(a, "--ids")) o->ids = true;
        else if (chat && !strcmp(a, "--system")) { NEED_ARG(); o->system = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { NEED_ARG(); if (!parse_i32(v, &o->n_predict) || o->n_predict < -1) BAD(v); }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED_ARG(); if (!parse_i32(v, &o->n_threads) || o->n_threads < 0 || o->n_threads > 1024) BAD(v); }
        else if (!strcmp(a, "--batch")) { NEED_ARG(); if (!parse_i32(v, &o->batch) || o->batch < 1 || o->batch > 65536) BAD(v); }
        else if (!strcmp(a, "--ctx")) { NEED_ARG(); if (!parse_i32(v, &o->ctx) || o->ctx < 1) BAD(v); }
        else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp")) { NEED_ARG(); if (!parse_f32(v, &o->sp.temperature)) BAD(v); }
        else if (!strcmp(a, "--top-k")) { NEED_ARG(); if (!parse_i32(v, &o->sp.top_k)) BAD(v); }
        else if (!strcmp(a, "--top-p")) { NEED_ARG(); if (!parse_f32(v, &o->sp.top_p)) BAD(v); }
        else if (!strcmp(a, "--min-p")) { NEED_ARG(); if (!parse_f32(v, &o->sp.min_p)) BAD(v); }
        else if (!strcmp(a, "--repeat-penalty")) { NEED_ARG(); if (!parse_f32(v, &o->sp.repetition_penalty)) BAD(v); }
        else if (!strcmp(a, "--presence-penalty")) { NEED_ARG(); if (!parse_f32(v, &o->sp.presence_penalty)) BAD(v); }
        else if (!strcmp(a, "--frequency-penalty")) { NEED_ARG(); if (!parse_f32(v, &o->sp.frequency_penalty)) BAD(v); }
        else if (!strcmp(a, "--seed")) {
            NEED_ARG();
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 0);
            if (errno || end == v || *end || v[0] == '-') BAD(v);
            o->sp.seed = s;
        }
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--no-pipeline")) o->no_pipeline = true;
        else if (!strcmp(a, "--device")) { NEED_ARG(); if (!cli_device_parse(v, &o->device)) BAD(v); }
        else if (!strcmp(a, "--enforce-eager")) o->eager = true;
        else if (!chat && !strcmp(a, "--profile")) o->profile = true;
        else if (!strcmp(a, "--reference")) o->reference = true;
        else if (!strcmp(a, "--kv-f32")) o->kv_dtype = BK_KV_F32;
        else if (!strcmp(a, "--kv-fp8-plain")) o->kv_fp8_plain = true;
        else if (!strcmp(a, "--kv-cache-dtype")) { NEED_ARG(); if (!bk_kv_dtype_parse(v, &o->kv_dtype)) BAD(v); }
        else if (!strcmp(a, "--mamba-ssm-cache-dtype")) { NEED_ARG(); if (!cli_ssm_dtype_parse(v, &o->ssm_bf16)) BAD(v); }
        else if (!chat && !strcmp(a, "--perplexity")) { NEED_ARG(); o->perplexity = v; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = true;
        else { fprintf(stderr, "vllmc: unknown option '%s' (see vllmc %s --help)\n", a, chat ? "chat" : "generate"); return 2; }
#undef NEED_ARG
#undef BAD
    }
    if (!o->model_path) { fprintf(stderr, "vllmc: -m MODEL.gguf is required\n"); return 2; }
    if (!chat && !o->prompt && !o->prompt_ids && !o->perplexity) {
        fprintf(stderr, "vllmc: -p TEXT, --prompt-ids JSON or --perplexity FILE is required\n");
        return 2;
    }
    if (o->perplexity && (o->prompt || o->prompt_ids || o->dump_logits)) {
        fprintf(stderr, "vllmc: --perplexity takes no -p, --prompt-ids or --dump-logits\n");
        return 2;
    }
    if (!chat && o->prompt && o->prompt_ids) { fprintf(stderr, "vllmc: give -p or --prompt-ids, not both\n"); return 2; }
    if (sampler_params_check(&o->sp) != VLLMC_OK) { fprintf(stderr, "vllmc: %s\n", vllmc_last_error()); return 2; }
    return 0;
}

/* Parse "[1, 2, 3]" into ids (malloc'd). */
static vllmc_status parse_ids_json(const char *text, int32_t n_vocab, int32_t **ids, int32_t *n) {
    *ids = NULL;
    *n = 0;
    cJSON *j = cJSON_Parse(text);
    if (!j || !cJSON_IsArray(j)) { cJSON_Delete(j); return vllmc_errorf(VLLMC_ERR_INVALID, "--prompt-ids: not a JSON array"); }
    int cnt = cJSON_GetArraySize(j);
    if (cnt <= 0) { cJSON_Delete(j); return vllmc_errorf(VLLMC_ERR_INVALID, "--prompt-ids: empty array"); }
    int32_t *out = malloc((size_t)cnt * sizeof(int32_t));
    if (!out) { cJSON_Delete(j); return vllmc_errorf(VLLMC_ERR_OOM, "ids"); }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (d < 0 || d >= n_vocab || d != floor(d)) {
            free(out);
            cJSON_Delete(j);
            return vllmc_errorf(VLLMC_ERR_INVALID, "--prompt-ids: element %d is not a token id in [0, %d)", i, n_vocab);
        }
        out[i++] = (int32_t)d;
    }
    cJSON_Delete(j);
    *ids = out;
    *n = cnt;
    return VLLMC_OK;
}

/* One sequence on the model: its KV cache, block table and token history. */
struct gen_seq {
    struct model *m;
    struct bk_kv_cache *kv;
    int32_t *block_table, n_blocks_max;
    int32_t *tokens, n_tokens, cap_tokens; /* everything fed so far (prompt + generated) */
    int32_t batch;
    float *logits;                         /* [batch][n_vocab] host */
    int32_t *rows;                         /* scratch batch arrays */
    int32_t *pos, *seq_idx;
    FILE *dump;
    bool score;                            /* perplexity: add -log p(next token) of every fed row */
    bool argmax;                           /* the step brings back its argmax id (next_id), not logits */
    const struct sampler_params *draw;     /* with argmax: the id is instead this sampler's draw, made on the device */
    struct sampler_rng rng;                /* the draws' uniforms, one a draw (on the host or the device, in turn) */
    int32_t next_id;
    double nll;
    int64_t n_scored;
    double t_prefill, t_decode;
    int64_t n_prefill, n_decode;
};

static void gen_seq_free(struct gen_seq *s) {
    if (s->kv) model_kv_destroy(s->m, s->kv);
    free(s->block_table);
    free(s->tokens);
    free(s->logits);
    free(s->rows);
    free(s->pos);
    free(s->seq_idx);
    memset(s, 0, sizeof(*s));
}

static vllmc_status gen_seq_init(struct gen_seq *s, struct model *m, int32_t max_ctx, int32_t batch, bool all_logits,
                                 enum bk_kv_dtype kv_dtype) {
    memset(s, 0, sizeof(*s));
    s->m = m;
    s->batch = batch;
    s->n_blocks_max = CEIL_DIV(max_ctx, BK_KV_BLOCK);
    s->cap_tokens = max_ctx;
    vllmc_status st;
    if ((st = model_reserve(m, batch, all_logits ? batch : 1))) return st;
    /* the fp8 key shift's horizon: the engine's default max_model_len, or more when this sequence is longer */
    m->kv_max_len = VLLMC_MAX(max_ctx, VLLMC_MIN(m->hp.n_ctx_train, 4096));
    if ((st = model_kv_create(m, kv_dtype, s->n_blocks_max, &s->kv))) return st;
    s->block_table = malloc((size_t)s->n_blocks_max * sizeof(int32_t));
    s->tokens = malloc((size_t)max_ctx * sizeof(int32_t));
    s->logits = malloc((size_t)(all_logits ? batch : 1) * (size_t)m->hp.n_vocab * sizeof(float));
    s->rows = malloc((size_t)batch * sizeof(int32_t));
    s->pos = malloc((size_t)batch * sizeof(int32_t));
    s->seq_idx = calloc((size_t)batch, sizeof(int32_t));
    if (!s->block_table || !s->tokens || !s->logits || !s->rows || !s->pos || !s->seq_idx) return vllmc_errorf(VLLMC_ERR_OOM, "sequence");
    for (int32_t i = 0; i < s->n_blocks_max; i++) s->block_table[i] = i;
    return VLLMC_OK;
}

/* How s's steps give their next id: on CUDA, plain greedy decoding takes the device's argmax and plain sampling
 * (temperature, top-k, top-p, min-p: no penalties or bias) the device's draw (VLLMC_DEVICE_SAMPLE=0: on the host,
 * as the engine); everything else brings the logits back for the host sampler. The draws' RNG starts at the seed. */
static void gen_seq_mode(struct gen_seq *s, bool is_cuda, bool all_logits, const struct sampler_params *sp) {
    const bool dev_draw = is_cuda && !all_logits && sp->temperature > 0.0f && sampler_params_plain(sp) && sampler_device_draws_on();
    s->argmax = (is_cuda && !all_logits && sampler_params_argmax_only(sp)) || dev_draw;
    s->draw = dev_draw ? sp : NULL;
    sampler_rng_seed(&s->rng, sp->seed);
}

/* The device's draw for the step being queued (NULL: its argmax): the sampler's parameters and the next uniform of
 * s->rng, which the host sampler would have taken for the same draw, so the ids are the host sampler's. */
static const struct bk_sample *gen_draw(struct gen_seq *s, struct bk_sample *out) {
    if (!s->draw) return NULL;
    sampler_device_draw(s->draw, &s->rng, out);
    return out;
}

/* Feed ids[0..n) after what is already in the cache. On return s->logits holds the logits of the
 * last token (or of every token if all_logits, written to the dump file too). */
static vllmc_status gen_seq_feed(struct gen_seq *s, const int32_t *ids, int32_t n, bool all_logits, bool prompt) {
    if (s->n_tokens + n > s->cap_tokens)
        return vllmc_errorf(VLLMC_ERR_INVALID, "context full: %d + %d tokens > %d", s->n_tokens, n, s->cap_tokens);
    const int32_t V = s->m->hp.n_vocab;
    for (int32_t off = 0; off < n;) {
        const int32_t c = VLLMC_MIN(s->batch, n - off);
        const int32_t p0 = s->n_tokens;
        for (int32_t i = 0; i < c; i++) { s->pos[i] = p0 + i; s->rows[i] = i; }
        struct bk_seq seq = {.block_table = s->block_table, .n_blocks = CEIL_DIV(p0 + c, BK_KV_BLOCK), .state_slot = 0};
        const bool last = off + c == n;
        struct bk_batch b = {.n_tokens = c, .token_ids = ids + off, .pos = s->pos, .seq_idx = s->seq_idx, .n_seqs = 1,
                             .seqs = &seq, .n_logits = all_logits ? c : (last ? 1 : 0),
                             .logit_rows = all_logits ? s->rows : &s->rows[c - 1]};
        double t0 = vllmc_time_s();
        const bool want_id = s->argmax && !all_logits && b.n_logits == 1;
        struct bk_sample smp;
        if (want_id) b.sample = gen_draw(s, &smp);
        vllmc_status st = model_forward(s->m, &b, s->kv, want_id ? NULL : s->logits, want_id ? &s->next_id : NULL);
        double dt = vllmc_time_s() - t0;
        if (st) return st;
        if (prompt) { s->t_prefill += dt; s->n_prefill += c; }
        else { s->t_decode += dt; s->n_decode += c; }
        memcpy(s->tokens + s->n_tokens, ids + off, (size_t)c * sizeof(int32_t));
        s->n_tokens += c;
        if (s->score && all_logits)
            for (int32_t i = 0; i < c && off + i + 1 < n; i++) {
                /* -log softmax(row i)[next token], in double with the max subtracted */
                const float *l = s->logits + (size_t)i * (size_t)V;
                float mx = l[0];
                for (int32_t j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
                double se = 0.0;
                for (int32_t j = 0; j < V; j++) se += exp((double)l[j] - (double)mx);
                s->nll += log(se) + (double)mx - (double)l[ids[off + i + 1]];
                s->n_scored++;
            }
        if (s->dump && b.n_logits && fwrite(s->logits, sizeof(float) * (size_t)V, (size_t)b.n_logits, s->dump) != (size_t)b.n_logits)
            return vllmc_errorf(VLLMC_ERR_IO, "writing logits");
        off += c;
    }
    return VLLMC_OK;
}

/* The logits row of the last token fed. */
static const float *gen_seq_last_logits(const struct gen_seq *s, bool all_logits, int32_t n_last_fed) {
    if (!all_logits) return s->logits;
    int32_t c = n_last_fed % s->batch ? n_last_fed % s->batch : s->batch;
    return s->logits + (size_t)(c - 1) * (size_t)s->m->hp.n_vocab;
}

static void print_speed(const struct gen_seq *s, const struct model *m) {
    double gb = (double)model_weight_bytes(m) / 1e9;
    if (s->n_prefill)
        fprintf(stderr, "prompt: %lld tokens in %.3f s, %.2f tok/s\n", (long long)s->n_prefill, s->t_prefill,
                (double)s->n_prefill / s->t_prefill);
    if (s->n_decode)
        fprintf(stderr, "generation: %lld tokens in %.3f s, %.2f tok/s (%.1f GB/s of weights)\n", (long long)s->n_decode, s->t_decode,
                (double)s->n_decode / s->t_decode, gb * (double)s->n_decode / s->t_decode);
}

struct gen_env {
    bool is_cuda;
    struct backend *be;
    struct model *m;
    struct tokenizer *tok;
    struct sampler *smp;
};

static void gen_env_free(struct gen_env *e) {
    sampler_destroy(e->smp);
    tokenizer_destroy(e->tok);
    model_destroy(e->m);
    if (e->be) e->be->ops->destroy(e->be);
}

static int gen_env_init(struct gen_env *e, const struct gen_opts *o, bool need_tokenizer) {
    memset(e, 0, sizeof(*e));
    vllmc_status st;
    double t0 = vllmc_time_s();
    const struct cli_backend_opts bo = {o->device, o->n_threads, o->reference, o->eager, o->profile};
    if ((st = cli_backend_create(&bo, &e->be, &e->is_cuda)) || (st = model_load(o->model_path, e->be, &e->m))) {
        fprintf(stderr, "vllmc: %s\n", vllmc_last_error());
        return 1;
    }
    e->m->kv_fp8_plain = o->kv_fp8_plain;
    e->m->ssm_bf16 = o->ssm_bf16;
    if (o->verbose)
        fprintf(stderr, "loaded %s (%s, %d layers, n_embd %d, vocab %d, %.1f MB of weights) in %.2f s on %s with %d threads\n", o->model_path,
                e->m->hp.arch, e->m->hp.n_layer, e->m->hp.n_embd, e->m->hp.n_vocab, (double)model_weight_bytes(e->m) / 1e6,
                vllmc_time_s() - t0, e->be->ops->name, e->be->n_threads);
    st = tokenizer_load_gguf(e->m->gguf, &e->tok);
    if (st) {
        if (need_tokenizer) { fprintf(stderr, "vllmc: tokenizer: %s\n", vllmc_last_error()); return 1; }
        e->tok = NULL;
    }
    if ((st = sampler_create(e->m->hp.n_vocab, &e->smp))) { fprintf(stderr, "vllmc: %s\n", vllmc_last_error()); return 1; }
    return 0;
}

/* --profile: after the prompt (prefill) the counters are kept and reset; after the decode both tables go to
 * stderr, the decode one per token. */
static void gen_profile(struct gen_env *e, const struct gen_opts *o, const struct gen_seq *s, bool after_prefill) {
#ifdef VLLMC_CUDA
    static struct backend_cuda_prof prefill;
    if (!o->profile || !e->is_cuda) return;
    if (after_prefill) {
        backend_cuda_get_prof(e->be, &prefill);
        backend_cuda_reset_prof(e->be);
        return;
    }
    struct backend_cuda_prof dec;
    backend_cuda_get_prof(e->be, &dec);
    fprintf(stderr, "\nprofile of the prefill (%lld tokens; eager, one event pair per op, totals):\n", (long long)s->n_prefill);
    cli_print_prof_table(stderr, &prefill, 1.0);
    fprintf(stderr, "GPU busy %.3f ms; wall %.3f ms\n", cli_prof_busy_ms(&prefill), s->t_prefill * 1e3);
    if (s->n_decode > 0) {
        const double n = (double)s->n_decode;
        fprintf(stderr, "\nprofile of the decode steps (%lld; eager, one event pair per op, per token):\n", (long long)s->n_decode);
        cli_print_prof_table(stderr, &dec, n);
        fprintf(stderr, "GPU busy %.3f ms/token; wall %.3f ms/token\n", cli_prof_busy_ms(&dec) / n, s->t_decode * 1e3 / n);
    }
#else
    (void)e; (void)o; (void)s; (void)after_prefill;
#endif
}

/* Stream the text of one token to stdout. */
static void emit_token(struct tokenizer_stream *ts, char *buf, size_t cap, int32_t id) {
    size_t n = 0;
    if (tokenizer_stream_feed(ts, id, buf, cap, &n) == VLLMC_OK && n) {
        fwrite(buf, 1, n, stdout);
        fflush(stdout);
    }
}

#ifdef VLLMC_CUDA
/* Queue the decode step of the token at position s->n_tokens (its id: tok, or with from_argmax the id of the step
 * queued before, taken on the device); generate_loop takes its id (argmax or draw) later (backend_cuda_fetch_argmax).
 * The one-token batch of gen_seq_feed, without its wait, timing and logits handling. */
static vllmc_status gen_pipe_queue(struct gen_seq *s, int32_t tok, bool from_argmax) {
    const int32_t p0 = s->n_tokens, zero = 0;
    s->pos[0] = p0;
    struct bk_seq seq = {.block_table = s->block_table, .n_blocks = CEIL_DIV(p0 + 1, BK_KV_BLOCK), .state_slot = 0};
    struct bk_sample smp;
    struct bk_batch b = {.n_tokens = 1, .token_ids = &tok, .pos = s->pos, .seq_idx = s->seq_idx, .n_seqs = 1, .seqs = &seq,
                         .n_logits = 1, .logit_rows = &zero, .sample = gen_draw(s, &smp)};
    if (from_argmax) backend_cuda_tokens_from_argmax(s->m->be);
    int32_t unused;
    vllmc_status st = model_forward(s->m, &b, s->kv, NULL, &unused);
    if (!st) s->n_tokens++;
    return st;
}
#endif

/* Generate up to n_predict tokens after what s holds; returns the ids in *out (malloc'd). */
static vllmc_status generate_loop(struct gen_env *e, struct gen_seq *s, const struct gen_opts *o, int32_t n_prompt, int32_t n_predict,
                                  const float *first_logits, bool stream_text, bool pipe, int32_t **out, int32_t *n_out) {
    int32_t *gen = malloc((size_t)(n_predict > 0 ? n_predict : 1) * sizeof(int32_t));
    if (!gen) return vllmc_errorf(VLLMC_ERR_OOM, "output");
    size_t cap = e->tok ? tokenizer_stream_bound(e->tok) : 0;
    char *buf = cap ? malloc(cap) : NULL;
    struct tokenizer_stream ts;
    if (e->tok) tokenizer_stream_init(&ts, e->tok, TOKENIZER_DECODE_SKIP_SPECIAL | TOKENIZER_DECODE_REPLACE_INVALID);
    const float *logits = first_logits;
    int32_t n = 0;
    vllmc_status st = VLLMC_OK;
#ifdef VLLMC_CUDA
    if (pipe && n_predict > 0) {
        /* pipelined steps (generate only: the sequence ends with this loop, so the one step queued past its end
         * changes nothing anyone reads): step k + 1 is queued, its id step k's argmax on the device, before the host
         * takes step k's id, so the GPU does not wait for the host between steps. The same ids as step by step. */
        int32_t id = s->next_id, queued = 0; /* queued: steps in flight (0..2) */
        double t0 = vllmc_time_s();
        if ((st = backend_cuda_set_pipelined(s->m->be, true))) goto out;
        for (;;) {
            gen[n++] = id;
            const bool eog = e->tok && tokenizer_is_eog(e->tok, id);
            if (stream_text && e->tok && buf && !eog) emit_token(&ts, buf, cap, id);
            const bool stop = (eog && !o->ignore_eos) || n == n_predict;
            /* feed id: queued already (the step before took it from the device), or now from the host (the first) */
            if (!stop && !queued) {
                if (s->n_tokens + 1 > s->cap_tokens) break;
                s->tokens[s->n_tokens] = id;
                if ((st = gen_pipe_queue(s, id, false))) break;
                queued++;
            }
            if (stop) break;
            /* the step after it, fed by its argmax, if there can be one */
            if (n + 1 < n_predict && s->n_tokens + 1 <= s->cap_tokens) {
                if ((st = gen_pipe_queue(s, 0, true))) break;
                queued++;
            }
            if ((st = backend_cuda_fetch_argmax(s->m->be, &id, 1))) break;
            queued--;
            s->n_decode++;
            if (queued) s->tokens[s->n_tokens - 1] = id; /* the id the queued step was fed */
        }
        const vllmc_status st2 = backend_cuda_set_pipelined(s->m->be, false); /* waits for a step still queued */
        if (!st) st = st2;
        s->t_decode += vllmc_time_s() - t0;
        goto out;
    }
#else
    (void)pipe;
#endif
    while (n < n_predict) {
        /* history = everything in the sequence; the first n_prompt tokens are the prompt */
        int32_t id = s->argmax ? s->next_id : sampler_sample(e->smp, logits, &o->sp, &s->rng, s->tokens, s->n_tokens, n_prompt);
        gen[n++] = id;
        bool eog = e->tok && tokenizer_is_eog(e->tok, id);
        if (stream_text && e->tok && buf && !eog) emit_token(&ts, buf, cap, id);
        if ((eog && !o->ignore_eos) || n == n_predict) break;
        if (s->n_tokens + 1 > s->cap_tokens) break;
        if ((st = gen_seq_feed(s, &id, 1, s->dump != NULL, false))) break;
        logits = s->logits;
    }
#ifdef VLLMC_CUDA
out:
#endif
    if (stream_text && e->tok && buf) {
        size_t k = tokenizer_stream_flush(&ts, buf, cap);
        fwrite(buf, 1, k, stdout);
        fflush(stdout);
    }
    free(buf);
    *out = gen;
    *n_out = n;
    return st;
}

/* Read a whole file (NUL-terminated copy, malloc'd). */
static vllmc_status read_text_file(const char *path, char **out, size_t *n_out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return vllmc_errorf(VLLMC_ERR_IO, "cannot open %s", path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *t = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap *= 2);
            if (!t) { free(buf); buf = NULL; break; }
            buf = t;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    const bool err = ferror(f);
    fclose(f);
    if (!buf) return vllmc_errorf(VLLMC_ERR_OOM, "reading %s", path);
    if (err) { free(buf); return vllmc_errorf(VLLMC_ERR_IO, "reading %s failed", path); }
    buf[n] = 0;
    *out = buf;
    *n_out = n;
    return VLLMC_OK;
}

/* --perplexity FILE: tokenize the text (with the model's BOS if it adds one; special tokens are text),
 * feed it in --batch chunks with every row's logits and print the mean negative log-likelihood of each
 * token given the ones before it (every token after the first) and its exp. */
static int run_perplexity(struct gen_env *e, const struct gen_opts *o) {
    char *text = NULL;
    size_t n_text = 0, n = 0;
    int32_t *ids = NULL;
    struct gen_seq s = {0};
    vllmc_status st;
    if ((st = read_text_file(o->perplexity, &text, &n_text))) goto fail;
    if ((st = tokenizer_encode_alloc(e->tok, text, n_text, TOKENIZER_ENCODE_ADD_SPECIAL, &ids, &n))) goto fail;
    if (n < 2) { st = vllmc_errorf(VLLMC_ERR_INVALID, "%s: %zu tokens; perplexity needs at least 2", o->perplexity, n); goto fail; }
    if (n > (size_t)(o->ctx ? o->ctx : e->m->hp.n_ctx_train)) {
        st = vllmc_errorf(VLLMC_ERR_INVALID, "%s: %zu tokens exceed the context (%d; --ctx to change)", o->perplexity, n,
                          o->ctx ? o->ctx : e->m->hp.n_ctx_train);
        goto fail;
    }
    if ((st = gen_seq_init(&s, e->m, (int32_t)n, o->batch, true, o->kv_dtype))) goto fail;
    s.score = true;
    if ((st = gen_seq_feed(&s, ids, (int32_t)n, true, true))) goto fail;
    const double mean = s.nll / (double)s.n_scored;
    printf("{\"n_tokens\": %zu, \"n_scored\": %lld, \"kv_cache_dtype\": \"%s\", \"nll\": %.9g, \"ppl\": %.9g}\n", n,
           (long long)s.n_scored, bk_kv_dtype_name(o->kv_dtype), mean, exp(mean));
    fflush(stdout);
    if (o->verbose) print_speed(&s, e->m);
    gen_seq_free(&s);
    free(ids);
    free(text);
    return 0;
fail:
    fprintf(stderr, "vllmc: %s\n", vllmc_last_error());
    gen_seq_free(&s);
    free(ids);
    free(text);
    return 1;
}

int cmd_generate(int argc, char **argv) {
    struct gen_opts o;
    int rc = parse_opts(argc, argv, false, &o);
    if (rc) return rc == 1 ? 0 : rc;
    struct gen_env e;
    if ((rc = gen_env_init(&e, &o, o.prompt != NULL || o.perplexity != NULL || !o.ids))) { gen_env_free(&e); return rc; }
    if (o.perplexity) {
        rc = run_perplexity(&e, &o);
        gen_env_free(&e);
        return rc;
    }
    struct gen_seq s = {0};
    int32_t *prompt = NULL, n_prompt = 0, *gen = NULL, n_gen = 0;
    vllmc_status st;
    if (o.prompt_ids) st = parse_ids_json(o.prompt_ids, e.m->hp.n_vocab, &prompt, &n_prompt);
    else {
        size_t n = 0;
        st = tokenizer_encode_alloc(e.tok, o.prompt, strlen(o.prompt), TOKENIZER_ENCODE_ADD_SPECIAL | TOKENIZER_ENCODE_PARSE_SPECIAL,
                                    &prompt, &n);
        if (!st && n == 0) st = vllmc_errorf(VLLMC_ERR_INVALID, "the prompt has no tokens");
        if (!st && n > INT32_MAX / 2) st = vllmc_errorf(VLLMC_ERR_INVALID, "prompt too long");
        n_prompt = (int32_t)n;
    }
    if (st) goto fail;
    const int32_t n_predict = o.n_predict < 0 ? INT32_MAX / 4 : o.n_predict;
    int64_t want_ctx = o.ctx ? o.ctx : (int64_t)n_prompt + (o.n_predict < 0 ? e.m->hp.n_ctx_train : n_predict) + 1;
    if (want_ctx > INT32_MAX / 2) want_ctx = INT32_MAX / 2;
    if (want_ctx < n_prompt + 1) { st = vllmc_errorf(VLLMC_ERR_INVALID, "--ctx %lld is shorter than the prompt (%d tokens)", (long long)want_ctx, n_prompt); goto fail; }
    const bool all_logits = o.dump_logits != NULL;
    if ((st = gen_seq_init(&s, e.m, (int32_t)want_ctx, o.batch, all_logits, o.kv_dtype))) goto fail;
    if (all_logits && !(s.dump = fopen(o.dump_logits, "wb"))) { st = vllmc_errorf(VLLMC_ERR_IO, "cannot write %s", o.dump_logits); goto fail; }
    gen_seq_mode(&s, e.is_cuda, all_logits, &o.sp);
    if ((st = gen_seq_feed(&s, prompt, n_prompt, all_logits, true))) goto fail;
    gen_profile(&e, &o, &s, true);
    /* pipelined decode steps where each step is a replayed graph step whose id stays on the device (DESIGN.md "The
     * engine on the GPU"): greedy, or drawn there */
    const bool pipe = s.argmax && !o.eager && !o.profile && !o.no_pipeline;
    if ((st = generate_loop(&e, &s, &o, n_prompt, n_predict, gen_seq_last_logits(&s, all_logits, n_prompt), !o.ids, pipe, &gen,
                            &n_gen)))
        goto fail;
    gen_profile(&e, &o, &s, false);
    if (o.ids) {
        putchar('[');
        for (int32_t i = 0; i < n_gen; i++) printf(i ? ", %d" : "%d", gen[i]);
        printf("]\n");
    } else {
        putchar('\n');
    }
    fflush(stdout);
    print_speed(&s, e.m);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "vllmc: %s\n", vllmc_last_error());
    rc = 1;
done:
    if (s.dump && fclose(s.dump) != 0 && rc == 0) { fprintf(stderr, "vllmc: writing %s failed\n", o.dump_logits); rc = 1; }
    s.dump = NULL;
    gen_seq_free(&s);
    free(prompt);
    free(gen);
    gen_env_free(&e);
    return rc;
}

/* ---- chat ---- */

static char *read_line(FILE *f) {
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 >= cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) { free(s); return NULL; }
            s = t;
        }
        s[n++] = (char)c;
    }
    if (c == EOF && n == 0) { free(s); return NULL; }
    s[n] = 0;
    return s;
}

int cmd_chat(int argc, char **argv) {
    struct gen_opts o;
    int rc = parse_opts(argc, argv, true, &o);
    if (rc) return rc == 1 ? 0 : rc;
    struct gen_env e;
    if ((rc = gen_env_init(&e, &o, true))) { gen_env_free(&e); return rc; }
    struct gguf_str tsrc;
    struct tmpl *tp = NULL;
    cJSON *msgs = NULL;
    struct gen_seq s = {0};
    vllmc_status st;
    if (gguf_get_str(e.m->gguf, "tokenizer.chat_template", &tsrc) != VLLMC_OK) {
        st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "the model has no tokenizer.chat_template");
        goto fail;
    }
    if ((st = tmpl_parse(tsrc.ptr, (size_t)tsrc.len, &tp))) goto fail;
    int32_t ctx = o.ctx ? o.ctx : VLLMC_MIN(e.m->hp.n_ctx_train, 8192);
    if ((st = gen_seq_init(&s, e.m, ctx, o.batch, false, o.kv_dtype))) goto fail;
    gen_seq_mode(&s, e.is_cuda, false, &o.sp); /* one RNG for the whole chat: each turn draws on from the last */
    msgs = cJSON_CreateArray();
    if (!msgs) { st = vllmc_errorf(VLLMC_ERR_OOM, "chat"); goto fail; }
    if (o.system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", o.system);
        cJSON_AddItemToArray(msgs, m);
    }
    size_t bl = 0, el = 0;
    const char *bos = tokenizer_bos(e.tok) >= 0 ? tokenizer_piece(e.tok, tokenizer_bos(e.tok), &bl) : NULL;
    const char *eos = tokenizer_eos(e.tok) >= 0 ? tokenizer_piece(e.tok, tokenizer_eos(e.tok), &el) : NULL;
    char bos_s[64] = "", eos_s[64] = "";
    if (bos) snprintf(bos_s, sizeof(bos_s), "%.*s", (int)bl, bos);
    if (eos) snprintf(eos_s, sizeof(eos_s), "%.*s", (int)el, eos);
    fprintf(stderr, "chat with %s: type a message, Enter to send; an empty line or EOF quits.\n", o.model_path);
    for (;;) {
        fprintf(stderr, "> ");
        char *line = read_line(stdin);
        if (!line || !*line) { free(line); break; }
        cJSON *um = cJSON_CreateObject();
        cJSON_AddStringToObject(um, "role", "user");
        cJSON_AddStringToObject(um, "content", line);
        cJSON_AddItemToArray(msgs, um);
        free(line);
        cJSON *cx = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(cx, "messages", msgs);
        cJSON_AddBoolToObject(cx, "add_generation_prompt", 1);
        char *text = NULL;
        size_t tlen = 0;
        st = tmpl_apply_chat_defaults(cx, bos_s, eos_s);
        if (!st) st = tmpl_render(tp, cx, NULL, &text, &tlen);
        cJSON_Delete(cx);
        if (st) goto fail;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        st = tokenizer_encode_alloc(e.tok, text, tlen, TOKENIZER_ENCODE_PARSE_SPECIAL, &ids, &n_ids);
        free(text);
        if (st) goto fail;
        s.t_prefill = s.t_decode = 0; /* speeds per turn */
        s.n_prefill = s.n_decode = 0;
        /* Reuse the cached prefix: restart at the first token that differs (KV past it is overwritten). A model with
         * recurrent state (qwen35, qwen35moe) holds only the state after the last token fed, which cannot be taken back:
         * it continues only from exactly there, else it starts again at position 0 (the state zeroed there). The chat
         * template often renders an earlier reply otherwise than it was generated (the Qwen3.5 one drops its thinking),
         * so this is the common case for them. */
        int32_t common = 0;
        while (common < s.n_tokens && (size_t)common < n_ids && s.tokens[common] == ids[common]) common++;
        if ((size_t)common == n_ids) common--; /* recompute the last token for its logits */
        if (s.kv->rs && common < s.n_tokens) common = 0;
        s.n_tokens = common;
        if ((st = gen_seq_feed(&s, ids + common, (int32_t)n_ids - common, false, true))) { free(ids); goto fail; }
        free(ids);
        int32_t room = s.cap_tokens - s.n_tokens;
        int32_t n_pred = o.n_predict < 0 ? room : VLLMC_MIN(o.n_predict, room);
        int32_t *gen = NULL, n_gen = 0;
        st = generate_loop(&e, &s, &o, s.n_tokens, n_pred, s.logits, true, false, &gen, &n_gen);
        printf("\n");
        fflush(stdout);
        if (st) { free(gen); goto fail; }
        char *reply = NULL;
        size_t rl = 0;
        int32_t n_text = n_gen;
        while (n_text > 0 && tokenizer_is_eog(e.tok, gen[n_text - 1])) n_text--;
        st = tokenizer_decode_alloc(e.tok, gen, (size_t)n_text, TOKENIZER_DECODE_SKIP_SPECIAL, &reply, &rl);
        free(gen);
        if (st) goto fail;
        cJSON *am = cJSON_CreateObject();
        cJSON_AddStringToObject(am, "role", "assistant");
        cJSON_AddStringToObject(am, "content", reply);
        cJSON_AddItemToArray(msgs, am);
        free(reply);
        if (o.verbose) print_speed(&s, e.m);
        if (s.n_tokens >= s.cap_tokens - 1) { fprintf(stderr, "vllmc: context full\n"); break; }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "vllmc: %s\n", vllmc_last_error());
    rc = 1;
done:
    cJSON_Delete(msgs);
    tmpl_free(tp);
    gen_seq_free(&s);
    gen_env_free(&e);
    return rc;
}
