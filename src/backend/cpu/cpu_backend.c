/* CPU backend: memory, weights (used in place from the mmap), the batch, the KV cache and the two
 * op tables (reference and fast). Backend memory is plain host memory, 64-byte aligned. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/ops_gdn.h"
#include "backend/cpu/ops_moe.h"
#include "quant/blocks.h"
#include "quant/quant.h"

static void cpu_destroy(struct backend *be) {
    if (!be) return;
    struct cpu_backend *c = cpu_be(be);
    threadpool_destroy(c->tp);
    free(c->token_ids); free(c->pos); free(c->seq_idx); free(c->logit_rows);
    free(c->seqs); free(c->block_tables); free(c->last_pos);
    vllmc_free_aligned(c->attn_scratch);
    free(c);
}

static vllmc_status cpu_alloc(struct backend *be, size_t size_bytes, void **out) {
    (void)be;
    *out = NULL;
    if (size_bytes == 0) size_bytes = 64;
    void *p = vllmc_malloc_aligned(size_bytes);
    if (!p) return vllmc_errorf(VLLMC_ERR_OOM, "cannot allocate %zu bytes", size_bytes);
    memset(p, 0, size_bytes);
    *out = p;
    return VLLMC_OK;
}

static void cpu_free(struct backend *be, void *p) {
    (void)be;
    vllmc_free_aligned(p);
}

static vllmc_status cpu_copy(struct backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    if (n) memmove(dst, src, n);
    return VLLMC_OK;
}

/* Host memory: free = available pages (MemAvailable as the kernel counts it), total = physical pages. */
static vllmc_status cpu_mem_info(struct backend *be, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)be;
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "host memory size unknown");
    *total_bytes = (uint64_t)pages * (uint64_t)psz;
    *free_bytes = avail > 0 ? (uint64_t)avail * (uint64_t)psz : *total_bytes;
    return VLLMC_OK;
}

static vllmc_status cpu_weight_upload(struct backend *be, const void *host_data, uint32_t type, int n_dims,
                                      const int64_t *ne, struct bk_tensor *out) {
    memset(out, 0, sizeof(*out));
    const struct quant_traits *tr = quant_traits(type);
    if (!tr || !tr->supported) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tensor type %u not supported", type);
    if (n_dims < 1 || n_dims > 4) return vllmc_errorf(VLLMC_ERR_INVALID, "tensor with %d dims", n_dims);
    out->type = type;
    out->n_dims = n_dims;
    for (int i = 0; i < 4; i++) out->ne[i] = i < n_dims ? ne[i] : 1;
    out->row_size_bytes = quant_row_size(type, out->ne[0]);
    if (!out->row_size_bytes)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "row of %lld elements is not a multiple of the %s block (%d)",
                            (long long)out->ne[0], tr->name, tr->block_size);
    if (n_dims == 1) {
        /* Norm weights and biases: an owned F32 copy. */
        float *f = NULL;
        vllmc_status st = cpu_alloc(be, (size_t)out->ne[0] * sizeof(float), (void **)&f);
        if (st != VLLMC_OK) return st;
        dequantize_row(type, host_data, f, out->ne[0]);
        out->data = f;
        out->type = GGML_TYPE_F32;
        out->row_size_bytes = (uint64_t)out->ne[0] * 4;
        return VLLMC_OK;
    }
    out->data = (void *)host_data; /* in place: the mmap outlives the model */
    return VLLMC_OK;
}

static void cpu_weight_free(struct backend *be, struct bk_tensor *t) {
    if (!t || !t->data) return;
    if (t->n_dims == 1) cpu_free(be, t->data);
    t->data = NULL;
}

static vllmc_status grow_i32(int32_t **p, int64_t *cap, int64_t n) {
    if (n <= *cap) return VLLMC_OK;
    int64_t nc = n < 64 ? 64 : n;
    int32_t *q = realloc(*p, (size_t)nc * sizeof(int32_t));
    if (!q) return vllmc_errorf(VLLMC_ERR_OOM, "batch arrays");
    *p = q;
    *cap = nc;
    return VLLMC_OK;
}

static vllmc_status cpu_batch_set(struct backend *be, const struct bk_batch *b) {
    struct cpu_backend *c = cpu_be(be);
    if (!b || b->n_tokens <= 0 || b->n_seqs <= 0 || b->n_logits < 0 || b->n_logits > b->n_tokens)
        return vllmc_errorf(VLLMC_ERR_INVALID, "batch: bad counts");
    if (!b->token_ids || !b->pos || !b->seq_idx || !b->seqs || (b->n_logits && !b->logit_rows))
        return vllmc_errorf(VLLMC_ERR_INVALID, "batch: missing array");
    int64_t n_blocks = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seqs[s].n_blocks < 0 || (b->seqs[s].n_blocks && !b->seqs[s].block_table))
            return vllmc_errorf(VLLMC_ERR_INVALID, "batch: sequence %d has a bad block table", s);
        n_blocks += b->seqs[s].n_blocks;
    }
    /* Grow the owned arrays first (allocation only when a batch is larger than any before), so that
     * the checks below can use the per-sequence scratch and a rejected batch leaves the last one intact. */
    vllmc_status st;
    if (b->n_tokens > c->cap_tokens) {
        int64_t cap = c->cap_tokens;
        if ((st = grow_i32(&c->token_ids, &cap, b->n_tokens))) return st;
        cap = c->cap_tokens;
        if ((st = grow_i32(&c->pos, &cap, b->n_tokens))) return st;
        cap = c->cap_tokens;
        if ((st = grow_i32(&c->seq_idx, &cap, b->n_tokens))) return st;
        c->cap_tokens = cap;
    }
    if ((st = grow_i32(&c->logit_rows, &c->cap_logits, b->n_logits ? b->n_logits : 1))) return st;
    if ((st = grow_i32(&c->block_tables, &c->cap_blocks, n_blocks ? n_blocks : 1))) return st;
    if (b->n_seqs > c->cap_seqs) {
        int64_t cap = c->cap_seqs;
        if ((st = grow_i32(&c->last_pos, &cap, b->n_seqs))) return st;
        struct bk_seq *q = realloc(c->seqs, (size_t)cap * sizeof(*q));
        if (!q) return vllmc_errorf(VLLMC_ERR_OOM, "batch");
        c->seqs = q;
        c->cap_seqs = cap;
    }
    int32_t *last_pos = c->last_pos;
    for (int32_t s = 0; s < b->n_seqs; s++) last_pos[s] = -1;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq_idx[t], p = b->pos[t];
        if (s < 0 || s >= b->n_seqs) return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: sequence index %d out of range", t, s);
        if (p < 0 || p / BK_KV_BLOCK >= b->seqs[s].n_blocks)
            return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: position %d not covered by the block table of sequence %d", t, p, s);
        if (p <= last_pos[s]) return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: positions of sequence %d not increasing", t, s);
        last_pos[s] = p;
        if (b->token_ids[t] < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: negative token id", t);
    }
    for (int32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens || (i && b->logit_rows[i] <= b->logit_rows[i - 1]))
            return vllmc_errorf(VLLMC_ERR_INVALID, "batch: logit row %d (%d) out of range or not ascending", i, b->logit_rows[i]);

    memcpy(c->token_ids, b->token_ids, (size_t)b->n_tokens * 4);
    memcpy(c->pos, b->pos, (size_t)b->n_tokens * 4);
    memcpy(c->seq_idx, b->seq_idx, (size_t)b->n_tokens * 4);
    if (b->n_logits) memcpy(c->logit_rows, b->logit_rows, (size_t)b->n_logits * 4);
    int64_t off = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        c->seqs[s] = b->seqs[s];
        if (b->seqs[s].n_blocks) memcpy(c->block_tables + off, b->seqs[s].block_table, (size_t)b->seqs[s].n_blocks * 4);
        c->seqs[s].block_table = c->block_tables + off;
        off += b->seqs[s].n_blocks;
    }
    c->n_tokens = b->n_tokens;
    c->n_seqs = b->n_seqs;
    c->n_logits = b->n_logits;
    return VLLMC_OK;
}

static void cpu_kv_destroy(struct backend *be, struct bk_kv_cache *kv) {
    if (!kv) return;
    for (int32_t l = 0; l < kv->n_layers; l++) {
        if (kv->k) cpu_free(be, kv->k[l]);
        if (kv->v) cpu_free(be, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->k_scales);
    free(kv->v_scales);
    free(kv->k_shift);
    free(kv);
}

static vllmc_status cpu_kv_create(struct backend *be, enum bk_kv_dtype dtype, int32_t n_layers, int32_t n_blocks,
                                  int32_t n_kv_head, int32_t head_dim, struct bk_kv_cache **out) {
    *out = NULL;
    if ((int)dtype < 0 || dtype >= BK_KV_NDTYPE) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "KV dtype %d", (int)dtype);
    if (n_layers < 0 || n_blocks <= 0 || n_kv_head <= 0 || head_dim <= 0)
        return vllmc_errorf(VLLMC_ERR_INVALID, "KV cache of %d layers, %d blocks, %d heads of %d", n_layers, n_blocks, n_kv_head, head_dim);
    uint64_t bytes;
    if (!checked_mul_u64(bk_kv_block_bytes(dtype, n_kv_head, head_dim), (uint64_t)n_blocks, &bytes) || bytes > SIZE_MAX)
        return vllmc_errorf(VLLMC_ERR_OOM, "KV cache too large");
    struct bk_kv_cache *kv = calloc(1, sizeof(*kv));
    if (!kv) return vllmc_errorf(VLLMC_ERR_OOM, "KV cache");
    kv->dtype = dtype;
    kv->n_blocks = n_blocks;
    kv->n_kv_head = n_kv_head;
    kv->head_dim = head_dim;
    kv->k_scale = kv->v_scale = 1.0f;
    kv->k = calloc((size_t)(n_layers ? n_layers : 1), sizeof(void *));
    kv->v = calloc((size_t)(n_layers ? n_layers : 1), sizeof(void *));
    kv->k_scales = malloc((size_t)(n_layers ? n_layers : 1) * sizeof(float));
    kv->v_scales = malloc((size_t)(n_layers ? n_layers : 1) * sizeof(float));
    if (!kv->k || !kv->v || !kv->k_scales || !kv->v_scales) { cpu_kv_destroy(be, kv); return vllmc_errorf(VLLMC_ERR_OOM, "KV cache"); }
    for (int32_t l = 0; l < n_layers; l++) kv->k_scales[l] = kv->v_scales[l] = 1.0f;
    kv->n_layers = n_layers;
    for (int32_t l = 0; l < n_layers; l++) {
        vllmc_status st;
        if ((st = cpu_alloc(be, (size_t)bytes, &kv->k[l])) || (st = cpu_alloc(be, (size_t)bytes, &kv->v[l]))) {
            cpu_kv_destroy(be, kv);
            return st;
        }
    }
    *out = kv;
    return VLLMC_OK;
}

/* ---- shared helpers ---- */

vllmc_status cpu_check_act_for_weight(const struct bk_act *act, const struct bk_tensor *w) {
    if (!w || !w->data) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: absent weight");
    if (w->ne[0] != act->n_cols)
        return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: weight '%s' rows of %lld, activation rows of %lld",
                            w->name ? w->name : "?", (long long)w->ne[0], (long long)act->n_cols);
    int f = bk_act_fmt_for_weight(w->type);
    if (f < 0 || !(act->fmts & BK_ACT_BIT(f)) || !act->q[f])
        return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: weight '%s' needs activation format %s, not prepared",
                            w->name ? w->name : "?", bk_act_fmt_name(f));
    if (act->n_rows < 0 || act->n_rows > act->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: bad row count");
    return VLLMC_OK;
}

vllmc_status cpu_ensure_attn_scratch(struct cpu_backend *c, int64_t max_ctx, int64_t head_dim) {
    int64_t need = ((max_ctx + 15) & ~(int64_t)15) + head_dim + 16;
    need = (need + 15) & ~(int64_t)15;
    if (need <= c->attn_scratch_per_thread) return VLLMC_OK;
    int nt = c->tp ? threadpool_n_threads(c->tp) : 1;
    float *p = vllmc_malloc_aligned((size_t)need * (size_t)nt * sizeof(float));
    if (!p) return vllmc_errorf(VLLMC_ERR_OOM, "attention scratch");
    vllmc_free_aligned(c->attn_scratch);
    c->attn_scratch = p;
    c->attn_scratch_per_thread = need;
    return VLLMC_OK;
}

vllmc_status cpu_attn_check(const struct cpu_backend *c, const struct bk_kv_cache *kv, const struct bk_attn_params *p) {
    if (!c->n_tokens) return vllmc_errorf(VLLMC_ERR_INVALID, "attention: no batch set");
    if (!kv || p->kv_layer < 0 || p->kv_layer >= kv->n_layers)
        return vllmc_errorf(VLLMC_ERR_INVALID, "attention: KV layer %d out of range", p->kv_layer);
    if (p->n_kv_head != kv->n_kv_head || p->head_dim != kv->head_dim || p->n_head <= 0 || p->n_kv_head <= 0 ||
        p->n_head % p->n_kv_head)
        return vllmc_errorf(VLLMC_ERR_INVALID, "attention: %d heads / %d kv heads of %d do not match the cache (%d of %d)",
                            p->n_head, p->n_kv_head, p->head_dim, kv->n_kv_head, kv->head_dim);
    for (int32_t s = 0; s < c->n_seqs; s++)
        for (int32_t i = 0; i < c->seqs[s].n_blocks; i++)
            if (c->seqs[s].block_table[i] < 0 || c->seqs[s].block_table[i] >= kv->n_blocks)
                return vllmc_errorf(VLLMC_ERR_INVALID, "attention: sequence %d block %d = %d outside the pool of %d", s, i,
                                    c->seqs[s].block_table[i], kv->n_blocks);
    if (bk_kv_dtype_size(kv->dtype) == 0) return vllmc_errorf(VLLMC_ERR_INVALID, "attention: KV dtype %d", (int)kv->dtype);
    if (kv->dtype == BK_KV_FP8_E4M3) {
        float ks, vs;
        cpu_kv_scales(kv, p->kv_layer, &ks, &vs);
        if (!(ks > 0.0f) || !(vs > 0.0f) || isinf(ks) || isinf(vs))
            return vllmc_errorf(VLLMC_ERR_INVALID, "attention: KV layer %d fp8 scales %g / %g (must be finite and > 0)", p->kv_layer,
                                (double)ks, (double)vs);
    }
    return VLLMC_OK;
}

void cpu_kv_store(const struct cpu_backend *c, struct bk_kv_cache *kv, const struct bk_attn_params *p, int64_t t0,
                  int64_t t1, const float *k, int64_t ld_k, const float *v, int64_t ld_v) {
    const int32_t hd = p->head_dim, nkv = p->n_kv_head;
    void *kp = kv->k[p->kv_layer], *vp = kv->v[p->kv_layer];
    const size_t elt = bk_kv_dtype_size(kv->dtype);
    float k_scale, v_scale;
    cpu_kv_scales(kv, p->kv_layer, &k_scale, &v_scale);
    const float *k_shift = kv->dtype == BK_KV_FP8_E4M3 && kv->k_shift ? kv->k_shift + (int64_t)p->kv_layer * nkv * hd : NULL;
    for (int64_t t = t0; t < t1; t++) {
        const struct bk_seq *s = &c->seqs[c->seq_idx[t]];
        int32_t pos = c->pos[t];
        int32_t blk = s->block_table[pos / BK_KV_BLOCK], slot = pos % BK_KV_BLOCK;
        for (int32_t h = 0; h < nkv; h++) {
            const float *ks = k + t * ld_k + (int64_t)h * hd, *vs = v + t * ld_v + (int64_t)h * hd;
            void *kd = cpu_kv_slot(kp, blk, h, slot, nkv, hd, elt), *vd = cpu_kv_slot(vp, blk, h, slot, nkv, hd, elt);
            switch (kv->dtype) {
            case BK_KV_F16:
                for (int32_t i = 0; i < hd; i++) {
                    ((uint16_t *)kd)[i] = fp32_to_fp16(ks[i]);
                    ((uint16_t *)vd)[i] = fp32_to_fp16(vs[i]);
                }
                break;
            case BK_KV_BF16:
                for (int32_t i = 0; i < hd; i++) {
                    ((uint16_t *)kd)[i] = fp32_to_bf16(ks[i]);
                    ((uint16_t *)vd)[i] = fp32_to_bf16(vs[i]);
                }
                break;
            case BK_KV_FP8_E4M3: /* as vLLM's fp8 cache store: e4m3(x / scale), saturated; keys less k_shift */
                for (int32_t i = 0; i < hd; i++) {
                    const float kx = k_shift ? ks[i] - k_shift[(int64_t)h * hd + i] : ks[i];
                    ((uint8_t *)kd)[i] = bk_fp8_e4m3_from_f32(kx / k_scale);
                    ((uint8_t *)vd)[i] = bk_fp8_e4m3_from_f32(vs[i] / v_scale);
                }
                break;
            default:
                memcpy(kd, ks, (size_t)hd * 4);
                memcpy(vd, vs, (size_t)hd * 4);
                break;
            }
        }
    }
}

/* ---- op tables ---- */

static const struct backend_ops cpu_ref_ops = {
    .name = "cpu-ref",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .weight_upload = cpu_weight_upload,
    .weight_free = cpu_weight_free,
    .batch_set = cpu_batch_set,
    .embed = cpu_ref_embed,
    .rmsnorm = cpu_ref_rmsnorm,
    .rmsnorm_quantize = cpu_ref_rmsnorm_quantize,
    .quantize = cpu_ref_quantize,
    .matmul = cpu_ref_matmul,
    .add = cpu_ref_add,
    .rope = cpu_ref_rope,
    .attention = cpu_ref_attention,
    .swiglu_quantize = cpu_ref_swiglu_quantize,
    .get_rows = cpu_ref_get_rows,
    .logits = cpu_ref_logits,
    .kv_create = cpu_kv_create,
    .kv_destroy = cpu_kv_destroy,
    .gdn = cpu_gdn,
    .moe = cpu_moe,
    .sigmoid_mul = cpu_sigmoid_mul,
    .copy_within = cpu_copy,
    .mem_info = cpu_mem_info,
};

static const struct backend_ops cpu_fast_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .weight_upload = cpu_weight_upload,
    .weight_free = cpu_weight_free,
    .batch_set = cpu_batch_set,
    .embed = cpu_fast_embed,
    .rmsnorm = cpu_fast_rmsnorm,
    .rmsnorm_quantize = cpu_fast_rmsnorm_quantize,
    .quantize = cpu_fast_quantize,
    .matmul = cpu_fast_matmul,
    .add = cpu_fast_add,
    .rope = cpu_fast_rope,
    .attention = cpu_fast_attention,
    .swiglu_quantize = cpu_fast_swiglu_quantize,
    .get_rows = cpu_ref_get_rows,
    .logits = cpu_fast_logits,
    .kv_create = cpu_kv_create,
    .kv_destroy = cpu_kv_destroy,
    .gdn = cpu_gdn,
    .moe = cpu_moe,
    .sigmoid_mul = cpu_sigmoid_mul,
    .copy_within = cpu_copy,
    .mem_info = cpu_mem_info,
};

vllmc_status backend_cpu_create(int n_threads, bool reference, struct backend **out) {
    *out = NULL;
    cpu_init_tables();
    struct cpu_backend *c = calloc(1, sizeof(*c));
    if (!c) return vllmc_errorf(VLLMC_ERR_OOM, "CPU backend");
    c->reference = reference;
    c->base.ops = reference ? &cpu_ref_ops : &cpu_fast_ops;
    if (!reference) {
        c->tp = threadpool_create(n_threads);
        if (!c->tp) { free(c); return VLLMC_ERR_OOM; }
        c->base.n_threads = threadpool_n_threads(c->tp);
    } else {
        c->base.n_threads = 1;
    }
    *out = &c->base;
    return VLLMC_OK;
}
