/* Model: hyper-parameters read from GGUF keys, weights bound by name (shape and type checked) to
 * backend tensors, and a forward pass per architecture family, chosen from the arch table.
 * The model holds no per-sequence state: the KV cache (and, for hybrids, recurrent state slots)
 * belongs to the caller (the engine), so one model serves many sequences.
 * Weights stay in the mmap'd GGUF on CPU (never expanded to f32, except 1-D norm weights). */
#ifndef VLLMC_MODEL_H
#define VLLMC_MODEL_H

#include <stdbool.h>
#include "backend/backend.h"
#include "gguf/gguf.h"

#define MODEL_MAX_LAYERS 512

struct model_hparams {
    char arch[32];              /* general.architecture */
    int32_t n_layer;            /* {arch}.block_count */
    int32_t n_embd;             /* {arch}.embedding_length */
    int32_t n_ff;               /* {arch}.feed_forward_length (dense FFN) */
    int32_t n_head;             /* {arch}.attention.head_count */
    int32_t n_kv_head;          /* {arch}.attention.head_count_kv (default n_head) */
    int32_t head_dim;           /* {arch}.attention.key_length (default n_embd / n_head) */
    int32_t head_dim_v;         /* {arch}.attention.value_length (default head_dim) */
    int32_t n_vocab;            /* rows of token_embd */
    int32_t n_ctx_train;        /* {arch}.context_length */
    float norm_eps;             /* {arch}.attention.layer_norm_rms_epsilon */
    struct bk_rope_params rope; /* {arch}.rope.freq_base (10000), .dimension_count (head_dim),
                                   .scaling.factor; freq_factors from rope_freqs.weight */
    bool tied_embeddings;       /* output.weight absent: the LM head is token_embd */
    int32_t n_attn_layers;      /* layers with a KV cache (all, for dense families) */
};

/* Weights of one layer. Absent optional tensors have data == NULL. Families that need other
 * tensors keep them in model->arch_data. */
struct model_layer {
    struct bk_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm;
    struct bk_tensor ffn_norm, ffn_gate, ffn_up, ffn_down;
    int32_t kv_layer;           /* index into the KV cache, -1 if the layer has no attention */
    uint32_t fmts_attn_in;      /* activation formats q/k/v read (union) */
    uint32_t fmts_attn_out;     /* formats wo reads */
    uint32_t fmts_ffn_in;       /* formats gate/up read */
    uint32_t fmts_ffn_down;     /* formats down reads */
};

struct model;

/* One architecture family. To add one: define `const struct model_arch model_arch_<name>` in its
 * own file and add X(<name>) to MODEL_ARCH_LIST below; model.c builds the table from the list. */
struct model_arch {
    const char *name;                        /* matches general.architecture */
    /* Read hparams and bind weights (model_bind_* helpers); allocate model->arch_data if needed. */
    vllmc_status (*load)(struct model *m);
    /* Allocate scratch for batches of up to max_tokens rows and max_logits logit rows. */
    vllmc_status (*reserve)(struct model *m, int32_t max_tokens, int32_t max_logits);
    /* Run one step. logits (host, may be NULL): [b->n_logits][n_vocab]; argmax (host, may be NULL):
     * [b->n_logits]. The KV cache must have been made by model_kv_create (or match its shape). */
    vllmc_status (*forward)(struct model *m, const struct bk_batch *b, struct bk_kv_cache *kv, float *logits,
                            int32_t *argmax);
    void (*free)(struct model *m);           /* frees arch_data and scratch; may be NULL */
    /* Hybrid families (recurrent layers): attach n_slots zeroed recurrent-state slots to kv (kv->rs),
     * replacing any there, and free them. NULL for families without recurrent state. */
    vllmc_status (*kv_attach)(struct model *m, struct bk_kv_cache *kv, int32_t n_slots);
    void (*kv_detach)(struct model *m, struct bk_kv_cache *kv);
};

#define MODEL_ARCH_LIST(X) X(llama) X(qwen2) X(qwen3) X(qwen35) X(qwen35moe)

struct model {
    const struct model_arch *arch;
    struct model_hparams hp;
    struct gguf_file *file;     /* owned: the mmap the CPU weights point into */
    const struct gguf_ctx *gguf;
    struct backend *be;         /* not owned */
    struct model_layer *layers; /* [hp.n_layer] */
    struct bk_tensor tok_embd, output_norm, output; /* output = tok_embd (not owned twice) if tied */
    struct bk_tensor rope_freqs;
    uint32_t fmts_output;       /* activation formats of the LM head */
    void *arch_data;            /* family-specific weights / state */
    void *scratch;              /* family-specific activation buffers */
    int32_t max_tokens, max_logits;
    /* fp8 caches (model_kv_create reads these): the longest sequence the caller's caches will hold, which
     * bounds the key shift's RoPE horizon (0 = the trained context), and kv_fp8_plain = store e4m3(k / k_scale)
     * with no key shift (vLLM's fp8 cache as is). */
    int32_t kv_max_len;
    bool kv_fp8_plain;
    /* hybrid models (qwen35): the caches' delta-rule state in bf16 instead of f32 (model_kv_create and
     * model_kv_set_state_slots read it; vLLM's --mamba-ssm-cache-dtype bfloat16) */
    bool ssm_bf16;
    struct bk_tensor **bound;   /* every tensor model_bind filled (freed by model_destroy) */
    int32_t n_bound, cap_bound;
};

/* Open a GGUF file and load the model on backend be (which must outlive the model). */
vllmc_status model_load(const char *path, struct backend *be, struct model **out);
void model_destroy(struct model *m); /* accepts NULL */
/* Reserve scratch for batches of up to max_tokens rows (call before forward; may be called again). */
vllmc_status model_reserve(struct model *m, int32_t max_tokens, int32_t max_logits);
vllmc_status model_forward(struct model *m, const struct bk_batch *b, struct bk_kv_cache *kv, float *logits,
                           int32_t *argmax);
/* A KV cache with n_blocks blocks of 16 tokens for every attention layer. An fp8 cache gets the scales the
 * GGUF carries (else 1.0) and, unless m->kv_fp8_plain, the key shift derived from the key bias (k_shift in
 * backend.h; horizon m->kv_max_len). */
vllmc_status model_kv_create(struct model *m, enum bk_kv_dtype dtype, int32_t n_blocks, struct bk_kv_cache **out);
void model_kv_destroy(struct model *m, struct bk_kv_cache *kv);
/* Hybrid models: give kv n_slots recurrent-state slots (bk_seq.state_slot indexes them; model_kv_create
 * attaches 1). A slot is zeroed when a batch run of its sequence starts at position 0. No-op for
 * families without recurrent state. */
vllmc_status model_kv_set_state_slots(struct model *m, struct bk_kv_cache *kv, int32_t n_slots);
/* Total bytes of weights bound (for bandwidth figures). */
uint64_t model_weight_bytes(const struct model *m);
/* Bytes one decode token reads: as model_weight_bytes, but 3-D expert tensors count only
 * expert_used_count of their experts. */
uint64_t model_active_weight_bytes(struct model *m);

/* ---- Helpers for arch files ---- */
enum model_bind_flags { MODEL_BIND_REQUIRED = 0, MODEL_BIND_OPTIONAL = 1 };
/* Bind tensor `name` (printf format) with n_dims dims ne (ne[i] < 0 = any extent) to out.
 * Missing (unless optional), wrong dims, wrong shape or unsupported type: VLLMC_ERR_CORRUPT naming it.
 * An absent optional tensor leaves out zeroed (data == NULL). out->name is owned by the model.
 * model_destroy frees every bound tensor before calling arch->free, so arch_data may hold them. */
vllmc_status model_bind(struct model *m, struct bk_tensor *out, int flags, int n_dims, const int64_t *ne,
                        const char *fmt, ...) VLLMC_PRINTF(6, 7);
/* "{arch}.<suffix>" getters; the optional ones leave *out unchanged when the key is absent. */
vllmc_status model_get_u32(struct model *m, const char *suffix, int32_t *out, bool required);
vllmc_status model_get_f32(struct model *m, const char *suffix, float *out, bool required);
/* Read the hparams shared by every family (the keys listed in struct model_hparams). */
vllmc_status model_read_common_hparams(struct model *m);
/* True when the rows whose logits batch b wants are all its rows in order (every decode step): the head then
 * normalizes the residual rows where they are, with no gather (get_rows) before it. */
static inline bool model_logits_all_rows(const struct bk_batch *b) {
    if (b->n_logits != b->n_tokens) return false;
    for (int32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] != i) return false;
    return true;
}
/* Activation-format bit a weight reads (BK_ACT_BIT(fmt)); 0 for an absent tensor. */
uint32_t model_weight_fmt(const struct bk_tensor *w);

#define MODEL_ARCH_DECLARE(name) extern const struct model_arch model_arch_##name;
MODEL_ARCH_LIST(MODEL_ARCH_DECLARE)
#undef MODEL_ARCH_DECLARE

#endif
