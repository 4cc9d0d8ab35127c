/* CPU backend internals: the backend struct, the current batch, and the op implementations
 * (cpu_ops_ref.c: plain scalar reference, single thread; cpu_ops.c: threaded fast paths).
 * Backend memory is host memory, so every pointer an op gets is directly usable. */
#ifndef VLLMC_CPU_INTERNAL_H
#define VLLMC_CPU_INTERNAL_H

#include "backend/backend.h"
#include "common/threadpool.h"

struct cpu_backend {
    struct backend base;
    struct threadpool *tp;      /* NULL for the reference backend */
    bool reference;
    /* The batch of the last batch_set (owned copies). */
    int32_t n_tokens, n_seqs, n_logits;
    int32_t *token_ids, *pos, *seq_idx, *logit_rows;
    struct bk_seq *seqs;
    int32_t *block_tables;      /* concatenated; seqs[i].block_table points in here */
    int32_t *last_pos;          /* [cap_seqs] scratch of the batch checks */
    int64_t cap_tokens, cap_seqs, cap_blocks, cap_logits;
    /* Scratch for attention (per thread: scores over the context + a rounded query). */
    float *attn_scratch;
    int64_t attn_scratch_per_thread;
};

static inline struct cpu_backend *cpu_be(struct backend *be) { return (struct cpu_backend *)be; }

/* Pointer to the KV slot of (layer pool base, block, kv head, slot) for an element size. */
static inline void *cpu_kv_slot(void *pool, int32_t block, int32_t kvh, int32_t slot, int32_t n_kv_head,
                                int32_t head_dim, size_t elt) {
    size_t idx = (((size_t)block * (size_t)n_kv_head + (size_t)kvh) * BK_KV_BLOCK + (size_t)slot) * (size_t)head_dim;
    return (char *)pool + idx * elt;
}

/* Build the lookup tables the kernels use (idempotent, thread-safe; backend_cpu_create calls it). */
void cpu_init_tables(void);

/* Shared checks (cpu_backend.c). */
vllmc_status cpu_check_act_for_weight(const struct bk_act *act, const struct bk_tensor *w);
vllmc_status cpu_ensure_attn_scratch(struct cpu_backend *c, int64_t max_ctx, int64_t head_dim);
/* Quantize rows [r0, r1) of act->x into the formats of act->fmts (all but F32). */
void cpu_quantize_rows(struct bk_act *act, int64_t r0, int64_t r1);
/* One row of RMSNorm (the exact formula all CPU paths share). */
void cpu_rmsnorm_row(const float *x, const float *w, float eps, int64_t n, float *out);
/* RoPE of one head vector in place at position pos. */
void cpu_rope_head(float *x, int32_t pos, const struct bk_rope_params *p);
/* Inner loops of attention over one cached position: q.k in the canonical order (16 lane partial sums
 * folded 8/4/2/1, see cpu_ops_ref.c) and out += w * v (element-wise: any vector width gives the same
 * bits). The scalar set is the reference; attn_avx2.c has the same results with AVX2 + F16C. */
struct cpu_attn_kernels {
    float (*dot_f32)(const float *q, const void *k, int32_t hd);
    float (*dot_f16)(const float *q, const void *k, int32_t hd);
    void (*axpy_f32)(float *out, float w, const void *v, int32_t hd);
    void (*axpy_f16)(float *out, float w, const void *v, int32_t hd);
    /* bf16 and fp8 e4m3 (the raw code values, bk_fp8_e4m3_table; the caller applies the scales). */
    float (*dot_bf16)(const float *q, const void *k, int32_t hd);
    float (*dot_fp8)(const float *q, const void *k, int32_t hd);
    void (*axpy_bf16)(float *out, float w, const void *v, int32_t hd);
    void (*axpy_fp8)(float *out, float w, const void *v, int32_t hd);
};
/* The fp8 scales of KV layer l (the per-layer ones if the cache has them, else k_scale / v_scale). */
static inline void cpu_kv_scales(const struct bk_kv_cache *kv, int32_t l, float *ks, float *vs) {
    *ks = kv->k_scales ? kv->k_scales[l] : kv->k_scale;
    *vs = kv->v_scales ? kv->v_scales[l] : kv->v_scale;
}
extern const struct cpu_attn_kernels cpu_attn_kernels_scalar;
/* The AVX2+F16C set if this CPU has it and head_dim is a multiple of 16, else NULL (attn_avx2.c). */
const struct cpu_attn_kernels *cpu_attn_kernels_avx2(int32_t head_dim);
/* Attention of one (row, query head) with the given inner kernels. scores: >= round16(n_ctx) + head_dim floats. */
void cpu_attn_row_head(const struct cpu_backend *c, const struct bk_kv_cache *kv, const struct bk_attn_params *p,
                       int32_t t, int32_t j, const float *q, float *out, float *scores, const struct cpu_attn_kernels *kn);
/* Store the k/v rows of the batch into the cache (shared by both paths). */
void cpu_kv_store(const struct cpu_backend *c, struct bk_kv_cache *kv, const struct bk_attn_params *p, int64_t t0,
                  int64_t t1, const float *k, int64_t ld_k, const float *v, int64_t ld_v);
vllmc_status cpu_attn_check(const struct cpu_backend *c, const struct bk_kv_cache *kv, const struct bk_attn_params *p);

/* Reference ops (cpu_ops_ref.c). */
vllmc_status cpu_ref_embed(struct backend *be, const struct bk_tensor *table, float *out);
vllmc_status cpu_ref_rmsnorm(struct backend *be, const float *x, int64_t ld_x, const float *w, float eps,
                             int64_t n_rows, int64_t n_cols, float *out, int64_t ld_out);
vllmc_status cpu_ref_rmsnorm_quantize(struct backend *be, const float *x, const float *w, float eps, int64_t n_rows,
                                      struct bk_act *out);
vllmc_status cpu_ref_quantize(struct backend *be, struct bk_act *act);
vllmc_status cpu_ref_matmul(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs);
vllmc_status cpu_ref_add(struct backend *be, float *y, const float *x, int64_t n_rows, int64_t n_cols);
vllmc_status cpu_ref_rope(struct backend *be, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                          const struct bk_rope_params *p);
vllmc_status cpu_ref_attention(struct backend *be, struct bk_kv_cache *kv, const struct bk_attn_params *p,
                               const float *q, int64_t ld_q, const float *k, int64_t ld_k, const float *v,
                               int64_t ld_v, float *out);
vllmc_status cpu_ref_swiglu_quantize(struct backend *be, const float *gate, const float *up, int64_t ld,
                                     int64_t n_rows, struct bk_act *out);
vllmc_status cpu_ref_get_rows(struct backend *be, const float *x, int64_t n_cols, float *out);
vllmc_status cpu_ref_logits(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *logits,
                            int32_t *argmax);

/* Fast ops (cpu_ops.c). */
vllmc_status cpu_fast_embed(struct backend *be, const struct bk_tensor *table, float *out);
vllmc_status cpu_fast_rmsnorm(struct backend *be, const float *x, int64_t ld_x, const float *w, float eps,
                              int64_t n_rows, int64_t n_cols, float *out, int64_t ld_out);
vllmc_status cpu_fast_rmsnorm_quantize(struct backend *be, const float *x, const float *w, float eps, int64_t n_rows,
                                       struct bk_act *out);
vllmc_status cpu_fast_quantize(struct backend *be, struct bk_act *act);
vllmc_status cpu_fast_matmul(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs);
vllmc_status cpu_fast_add(struct backend *be, float *y, const float *x, int64_t n_rows, int64_t n_cols);
vllmc_status cpu_fast_rope(struct backend *be, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                           const struct bk_rope_params *p);
vllmc_status cpu_fast_attention(struct backend *be, struct bk_kv_cache *kv, const struct bk_attn_params *p,
                                const float *q, int64_t ld_q, const float *k, int64_t ld_k, const float *v,
                                int64_t ld_v, float *out);
vllmc_status cpu_fast_swiglu_quantize(struct backend *be, const float *gate, const float *up, int64_t ld,
                                      int64_t n_rows, struct bk_act *out);
vllmc_status cpu_fast_logits(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *logits,
                             int32_t *argmax);

#endif
