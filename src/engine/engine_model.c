/* vllmc_engine_create: the engine around a real model on the CPU or the CUDA backend. Loads the model
 * and its tokenizer, plans memory (weights, activations, KV pool, recurrent-state slots) against the
 * device's memory, refuses a plan that cannot fit (with the numbers), reserves every buffer a step needs,
 * and starts the engine thread. */
#include <string.h>
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"
#ifdef VLLMC_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

struct engm {
    struct backend *be;
    struct model *m;
    struct bk_kv_cache *kv;
    struct tokenizer *tok;
    float *host_tmp;            /* one layer's state of one slot, for backends without copy_within */
    bool piped;                 /* CUDA: the backend is in pipelined steps (engm_forward_queue) */
};

/* Copy recurrent-state slot src to dst in every recurrent layer (conv and delta-rule state): within the
 * backend's memory when it can (device to device on CUDA), else through the host. */
static vllmc_status engm_state_copy(void *ctx, int32_t src, int32_t dst) {
    struct engm *g = ctx;
    struct bk_rs_cache *rs = g->kv->rs;
    const struct backend_ops *op = g->be->ops;
    vllmc_status st;
    for (int32_t l = 0; l < rs->n_layers; l++) {
        const size_t cf = (size_t)rs->conv_floats, sb = bk_rs_ssm_bytes(rs);
        uint8_t *ssm = rs->ssm[l];
        if (op->copy_within) {
            if ((st = op->copy_within(g->be, rs->conv[l] + (size_t)dst * cf, rs->conv[l] + (size_t)src * cf, cf * 4)) ||
                (st = op->copy_within(g->be, ssm + (size_t)dst * sb, ssm + (size_t)src * sb, sb)))
                return st;
            continue;
        }
        if ((st = op->copy_to_host(g->be, g->host_tmp, rs->conv[l] + (size_t)src * cf, cf * 4)) ||
            (st = op->copy_to_device(g->be, rs->conv[l] + (size_t)dst * cf, g->host_tmp, cf * 4)) ||
            (st = op->copy_to_host(g->be, g->host_tmp, ssm + (size_t)src * sb, sb)) ||
            (st = op->copy_to_device(g->be, ssm + (size_t)dst * sb, g->host_tmp, sb)))
            return st;
    }
    return VLLMC_OK;
}

static vllmc_status engm_forward(void *ctx, const struct bk_batch *b, float *logits) {
    struct engm *g = ctx;
    return model_forward(g->m, b, g->kv, logits, NULL);
}

static vllmc_status engm_forward_argmax(void *ctx, const struct bk_batch *b, int32_t *ids) {
    struct engm *g = ctx;
    return model_forward(g->m, b, g->kv, NULL, ids);
}

#ifdef VLLMC_CUDA
/* Pipelined steps on CUDA (engine_runner.forward_queue; backend_cuda_set_pipelined): on at the first queued step, off
 * when the engine drains them; the token ids of a step queued from_prev are the previous step's ids on the device. */
static vllmc_status engm_forward_queue(void *ctx, const struct bk_batch *b, bool from_prev) {
    struct engm *g = ctx;
    vllmc_status st;
    if (!g->piped) {
        if ((st = backend_cuda_set_pipelined(g->be, true))) return st;
        g->piped = true;
    }
    if (from_prev) backend_cuda_tokens_from_argmax(g->be);
    int32_t unused;
    return model_forward(g->m, b, g->kv, NULL, &unused);
}

static vllmc_status engm_fetch_ids(void *ctx, int32_t *ids, int32_t n) {
    return backend_cuda_fetch_argmax(((struct engm *)ctx)->be, ids, n);
}

static vllmc_status engm_pipe_off(void *ctx) {
    struct engm *g = ctx;
    if (!g->piped) return VLLMC_OK;
    g->piped = false;
    return backend_cuda_set_pipelined(g->be, false);
}
#endif

static void engm_free(void *ctx) {
    struct engm *g = ctx;
    if (!g) return;
    if (g->kv) model_kv_destroy(g->m, g->kv);
    tokenizer_destroy(g->tok);
    free(g->host_tmp);
    model_destroy(g->m);
    if (g->be) g->be->ops->destroy(g->be);
    free(g);
}

void vllmc_engine_opts_default(vllmc_engine_opts *o) {
    memset(o, 0, sizeof(*o));
    o->kv_dtype = VLLMC_KV_F16;
    o->enable_prefix_caching = 1;
    o->state_snapshots = -1;
    o->print_plan = 1;
    o->batch_invariant = 0;
}

/* The backend for o->device (AUTO: CUDA when built with it and a GPU is present). */
static vllmc_status engm_backend(const vllmc_engine_opts *o, vllmc_device *dev, struct backend **be) {
    vllmc_device d = o->device;
#ifdef VLLMC_CUDA
    if (d == VLLMC_DEVICE_AUTO) d = backend_cuda_device_count() > 0 ? VLLMC_DEVICE_CUDA : VLLMC_DEVICE_CPU;
    if (d == VLLMC_DEVICE_CUDA) {
        if (backend_cuda_device_count() <= 0) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "engine: device cuda: no GPU found");
        struct backend_cuda_opts co = {0};
        co.device = 0;
        co.enforce_eager = o->enforce_eager != 0;
        co.batch_invariant = o->batch_invariant != 0;
        *dev = d;
        return backend_cuda_create(&co, be);
    }
#else
    if (d == VLLMC_DEVICE_AUTO) d = VLLMC_DEVICE_CPU;
    if (d == VLLMC_DEVICE_CUDA)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "engine: device cuda: this build has no GPU backend (make CUDA=1 or HIP=1)");
#endif
    *dev = d;
    return backend_cpu_create(o->threads, false, be);
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

vllmc_status engine_model_create(const char *model_path, const vllmc_engine_opts *opts, bool start_thread, vllmc_engine **out) {
    *out = NULL;
    vllmc_engine_opts o;
    if (opts) o = *opts; else vllmc_engine_opts_default(&o);
    if (o.max_model_len < 0 || o.max_num_seqs < 0 || o.max_num_batched_tokens < 0 || o.kv_blocks < 0 ||
        (o.kv_dtype != VLLMC_KV_F16 && o.kv_dtype != VLLMC_KV_F32 && o.kv_dtype != VLLMC_KV_BF16 && o.kv_dtype != VLLMC_KV_FP8_E4M3) ||
        (o.device != VLLMC_DEVICE_AUTO && o.device != VLLMC_DEVICE_CPU && o.device != VLLMC_DEVICE_CUDA) ||
        !(o.gpu_memory_utilization >= 0.0f && o.gpu_memory_utilization <= 1.0f) ||
        (o.mamba_ssm_cache_dtype != VLLMC_SSM_F32 && o.mamba_ssm_cache_dtype != VLLMC_SSM_BF16))
        return vllmc_errorf(VLLMC_ERR_INVALID, "engine options: max_model_len %d, max_num_seqs %d, max_num_batched_tokens %d, "
                            "kv_blocks %d, kv_dtype %d, device %d, gpu_memory_utilization %g, mamba_ssm_cache_dtype %d",
                            o.max_model_len, o.max_num_seqs, o.max_num_batched_tokens, o.kv_blocks, (int)o.kv_dtype, (int)o.device,
                            (double)o.gpu_memory_utilization, (int)o.mamba_ssm_cache_dtype);
    struct engm *g = calloc(1, sizeof(*g));
    if (!g) return vllmc_errorf(VLLMC_ERR_OOM, "engine");
    vllmc_status st;
    vllmc_device dev = VLLMC_DEVICE_CPU;
    if ((st = engm_backend(&o, &dev, &g->be)) || (st = model_load(model_path, g->be, &g->m))) goto fail;
    g->m->ssm_bf16 = o.mamba_ssm_cache_dtype == VLLMC_SSM_BF16;
    if (tokenizer_load_gguf(g->m->gguf, &g->tok) != VLLMC_OK) {
        LOG_WARN("engine: %s has no usable tokenizer (%s): no text output, no stop strings", model_path, vllmc_last_error());
        g->tok = NULL;
    }
    const struct model_hparams *hp = &g->m->hp;
    struct engine_config c = {0};
    c.max_model_len = o.max_model_len ? o.max_model_len : VLLMC_MIN(hp->n_ctx_train, 4096);
    c.max_num_seqs = o.max_num_seqs ? o.max_num_seqs : 16;
    /* the step's token budget: 2,048 on the GPU (vllmc serve on qwen35-4b at 64 requests: +21% output tok/s and a lower
     * TTFT than at 512; BENCHMARKS.md "Mixed steps, continued"), 512 on the CPU, where a step's time grows with its rows */
    c.max_num_batched_tokens = o.max_num_batched_tokens ? o.max_num_batched_tokens : dev == VLLMC_DEVICE_CUDA ? 2048 : 512;
    c.prefix_caching = o.enable_prefix_caching != 0;
    c.seed = o.seed;
    c.device = dev;
    if (c.max_model_len < 2) { st = vllmc_errorf(VLLMC_ERR_INVALID, "engine: max_model_len %d", c.max_model_len); goto fail; }
    if (c.max_model_len > hp->n_ctx_train)
        LOG_WARN("engine: max_model_len %d exceeds the model's training context %d", c.max_model_len, hp->n_ctx_train);
    const int32_t max_logits = VLLMC_MIN(c.max_num_seqs, c.max_num_batched_tokens);
    if (max_logits < c.max_num_seqs) c.max_num_seqs = max_logits;

    /* memory plan */
    const enum bk_kv_dtype kdt = o.kv_dtype == VLLMC_KV_F32 ? BK_KV_F32 : o.kv_dtype == VLLMC_KV_BF16 ? BK_KV_BF16
                                 : o.kv_dtype == VLLMC_KV_FP8_E4M3 ? BK_KV_FP8_E4M3 : BK_KV_F16;
    const uint64_t block_bytes = 2ull * (uint64_t)hp->n_attn_layers * bk_kv_block_bytes(kdt, hp->n_kv_head, hp->head_dim);
    const uint64_t weights = model_weight_bytes(g->m);
    uint64_t state_slot_bytes = 0;
    {
        struct bk_kv_cache *probe = NULL;
        if ((st = model_kv_create(g->m, kdt, 1, &probe))) goto fail;
        if (probe->rs)
            state_slot_bytes = (uint64_t)probe->rs->n_layers * (4ull * (uint64_t)probe->rs->conv_floats + bk_rs_ssm_bytes(probe->rs));
        model_kv_destroy(g->m, probe);
    }
    const bool has_state = state_slot_bytes > 0;
    c.n_state_snapshots = !has_state || !c.prefix_caching ? 0 : o.state_snapshots < 0 ? c.max_num_seqs : o.state_snapshots;
    const int32_t n_slots = c.max_num_seqs + c.n_state_snapshots;
    const uint64_t state_bytes = state_slot_bytes * (uint64_t)n_slots;
    /* activations: the model's per-row scratch (residual, q/k/v, attention and FFN outputs, gate/up,
     * quantized copies) for max_num_batched_tokens rows, plus the logits rows (an estimate: the families
     * size their own scratch) */
    const uint64_t qkv = (uint64_t)hp->n_head * (uint64_t)hp->head_dim * 2 + 2ull * (uint64_t)hp->n_kv_head * (uint64_t)hp->head_dim;
    const uint64_t row_floats = 4ull * (uint64_t)hp->n_embd + qkv + 3ull * (uint64_t)VLLMC_MAX(hp->n_ff, hp->n_embd);
    const uint64_t acts = (uint64_t)c.max_num_batched_tokens * row_floats * 4 * 2 + 2ull * (uint64_t)max_logits * (uint64_t)hp->n_vocab * 4;
    const int32_t per_seq = CEIL_DIV(c.max_model_len, BK_KV_BLOCK);
    /* gpu_memory_utilization: a fraction of the device's memory (the host's on cpu) for the whole plan */
    const char *dev_name = dev == VLLMC_DEVICE_CUDA ? "GPU" : "host";
    uint64_t dev_free = 0, dev_total = 0;
    char util_note[96] = "";
    if (g->be->ops->mem_info && g->be->ops->mem_info(g->be, &dev_free, &dev_total) != VLLMC_OK) dev_free = dev_total = 0;
    /* host: no free-memory check (the weights are mmap'd, pages come and go); GPU: keep a reserve for what the
     * backend allocates on its own (batch staging, attention split-K and MoE scratch, graphs, library workspaces) */
    const uint64_t dev_reserve = 512ull << 20;
    if (dev != VLLMC_DEVICE_CUDA) dev_free = 0;
    else dev_free = dev_free > dev_reserve ? dev_free - dev_reserve : 1;
    if (o.gpu_memory_utilization > 0.0f) {
        if (!dev_total) { st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "engine: gpu_memory_utilization: the %s memory size is unknown", dev_name); goto fail; }
        const uint64_t lim = (uint64_t)((double)o.gpu_memory_utilization * (double)dev_total);
        if (!o.memory_limit_bytes || lim < o.memory_limit_bytes) o.memory_limit_bytes = lim;
        snprintf(util_note, sizeof(util_note), " (%.2f of %.1f MiB of %s memory)", (double)o.gpu_memory_utilization, mib(dev_total), dev_name);
    }
    uint64_t n_blocks;
    if (o.kv_blocks) n_blocks = (uint64_t)o.kv_blocks;
    else if (o.kv_memory_bytes) n_blocks = o.kv_memory_bytes / block_bytes;
    else {
        n_blocks = (uint64_t)per_seq * (uint64_t)c.max_num_seqs;
        if (!(o.gpu_memory_utilization > 0.0f) && n_blocks * block_bytes > (4ull << 30)) n_blocks = (4ull << 30) / block_bytes;
        if (o.memory_limit_bytes) {
            uint64_t fixed = weights + acts + state_bytes;
            uint64_t room = o.memory_limit_bytes > fixed ? (o.memory_limit_bytes - fixed) / block_bytes : 0;
            if (room < n_blocks) n_blocks = room;
        }
        if (dev_free) {
            const uint64_t fixed = acts + state_bytes;
            const uint64_t room = dev_free > fixed ? (dev_free - fixed) / block_bytes : 0;
            if (room < n_blocks) n_blocks = room;
        }
    }
    const uint64_t kv_bytes = n_blocks * block_bytes, total = weights + acts + state_bytes + kv_bytes;
    if (o.memory_limit_bytes && total > o.memory_limit_bytes) {
        st = vllmc_errorf(VLLMC_ERR_OOM, "engine: the plan needs %.1f MiB (weights %.1f + activations %.1f + KV %.1f + state %.1f) "
                          "but the limit is %.1f MiB%s", mib(total), mib(weights), mib(acts), mib(kv_bytes), mib(state_bytes),
                          mib(o.memory_limit_bytes), util_note);
        goto fail;
    }
    /* what is still to be allocated must fit in what the device has free now (the weights are already there) */
    if (dev_free && total - weights > dev_free) {
        st = vllmc_errorf(VLLMC_ERR_OOM, "engine: the plan needs %.1f MiB more on the %s (activations %.1f + KV %.1f + state %.1f) "
                          "but %.1f MiB of %.1f are free (after a %.0f MiB reserve); lower the KV size, max_num_seqs or "
                          "max_num_batched_tokens", mib(total - weights), dev_name, mib(acts), mib(kv_bytes), mib(state_bytes),
                          mib(dev_free), mib(dev_total), mib(dev_reserve));
        goto fail;
    }
    if (n_blocks < (uint64_t)per_seq || n_blocks > INT32_MAX / BK_KV_BLOCK) {
        st = vllmc_errorf(VLLMC_ERR_OOM, "engine: a KV pool of %llu blocks (%llu tokens, %.1f MiB at %.1f KiB a block) cannot hold one "
                          "request of max_model_len %d (%d blocks); give the KV cache more memory or lower max_model_len",
                          (unsigned long long)n_blocks, (unsigned long long)n_blocks * BK_KV_BLOCK, mib(kv_bytes),
                          (double)block_bytes / 1024.0, c.max_model_len, per_seq);
        goto fail;
    }
    c.n_blocks = (int32_t)n_blocks;
    g->m->kv_max_len = c.max_model_len; /* the fp8 key shift's horizon */
    g->m->kv_fp8_plain = o.kv_fp8_plain != 0;
    if ((st = model_reserve(g->m, c.max_num_batched_tokens, max_logits)) || (st = model_kv_create(g->m, kdt, c.n_blocks, &g->kv)) ||
        (has_state && (st = model_kv_set_state_slots(g->m, g->kv, n_slots))))
        goto fail;
    g->kv->max_ctx = c.max_model_len;
    if (has_state && !g->be->ops->copy_within) {
        const struct bk_rs_cache *rs = g->kv->rs;
        g->host_tmp = malloc(VLLMC_MAX((size_t)rs->conv_floats * sizeof(float), bk_rs_ssm_bytes(rs)));
        if (!g->host_tmp) { st = vllmc_errorf(VLLMC_ERR_OOM, "engine: state copy buffer"); goto fail; }
    }
    if (o.print_plan)
        LOG_INFO("engine plan (%s, %d layers, %s): weights %.1f MiB, activations ~%.1f MiB (%d tokens a step), KV pool %d blocks x %.1f KiB "
                 "= %.1f MiB (%d tokens, %s), state %d slots (%d running + %d snapshots) x %.1f KiB = %.1f MiB; max_model_len %d, max_num_seqs %d, "
                 "max concurrency at max_model_len %.2f; prefix caching %s",
                 hp->arch, hp->n_layer, dev == VLLMC_DEVICE_CUDA ? "cuda" : "cpu", mib(weights), mib(acts), c.max_num_batched_tokens, c.n_blocks, (double)block_bytes / 1024.0,
                 mib(kv_bytes), c.n_blocks * BK_KV_BLOCK, bk_kv_dtype_name(kdt), has_state ? n_slots : 0,
                 has_state ? c.max_num_seqs : 0, c.n_state_snapshots,
                 (double)state_slot_bytes / 1024.0, mib(state_bytes), c.max_model_len, c.max_num_seqs, (double)c.n_blocks / per_seq,
                 !c.prefix_caching ? "off" : has_state && !c.n_state_snapshots ? "off (recurrent state, no snapshots)" : "on");
    struct engine_runner run = {.ctx = g, .n_vocab = hp->n_vocab, .has_state = has_state, .forward = engm_forward,
                                  .forward_argmax = engm_forward_argmax, .device_sample = dev == VLLMC_DEVICE_CUDA && sampler_device_draws_on(),
                                  .state_copy = has_state ? engm_state_copy : NULL, .destroy = engm_free};
#ifdef VLLMC_CUDA
    /* pipelined decode steps where graphs replay them (VLLMC_ENGINE_PIPELINE=0: step by step; docs/BENCHMARKS.md "The
     * engine's pipelined steps on the GPU") */
    const char *pe = getenv("VLLMC_ENGINE_PIPELINE");
    if (dev == VLLMC_DEVICE_CUDA && !o.enforce_eager && !(pe && !strcmp(pe, "0"))) {
        run.forward_queue = engm_forward_queue;
        run.fetch_ids = engm_fetch_ids;
        run.pipe_off = engm_pipe_off;
    }
#endif
    if ((st = engine_create(&run, &c, g->tok, start_thread, out))) goto fail;
    return VLLMC_OK;
fail:
    engm_free(g);
    return st;
}

vllmc_status vllmc_engine_create(const char *model_path, const vllmc_engine_opts *opts, vllmc_engine **out) {
    return engine_model_create(model_path, opts, true, out);
}
