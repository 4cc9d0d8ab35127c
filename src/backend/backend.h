/* Backend interface: the table of coarse, fused ops the model code calls (struct backend_ops).
 * Every buffer an op reads or writes was allocated by the same backend (backend memory: a host
 * pointer on CPU, a device pointer on CUDA); the model never dereferences activation pointers.
 * Only copy_to_host (final logits / token ids) brings data back to the host.
 * Invariant: an op's result never depends on the number of threads (work is split by output row). */
#ifndef VLLMC_BACKEND_H
#define VLLMC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/common.h"

/* Paged KV cache block size in tokens (vLLM's default). */
#define BK_KV_BLOCK 16

/* ---------------------------------------------------------------------------------------------
 * Tensors and activations
 * ------------------------------------------------------------------------------------------- */

/* A weight (or any read-only tensor) living in backend memory.
 * 2-D: ne[0] = n_in (row length, contiguous), ne[1] = n_out (rows); row_size_bytes = bytes of one row.
 * 1-D norm weights and biases are always F32 (the backend converts them at upload). */
struct bk_tensor {
    void *data;              /* backend memory; NULL = tensor absent */
    uint32_t type;           /* ggml type id (quant/quant.h) */
    int n_dims;
    int64_t ne[4];           /* unused dims are 1 */
    uint64_t row_size_bytes; /* bytes of one ne[0]-row */
    const char *name;        /* for messages; points into the GGUF (NUL-terminated copy owned by the model) */
};

/* Activation formats a quantized matmul can read. A weight of type t reads the format
 * bk_act_fmt_for_weight(t) (= quant_traits(t)->vec_dot_type). */
enum bk_act_fmt {
    BK_ACT_F32 = 0,  /* the f32 rows themselves (F32 weights) */
    BK_ACT_F16 = 1,  /* fp16 rows (F16 weights) */
    BK_ACT_Q8_0 = 2, /* blocks of 32 (legacy quants, Q8_0, IQ4_NL, MXFP4) */
    BK_ACT_Q8_1 = 3, /* blocks of 32 with sums (Q4_1, Q5_1) */
    BK_ACT_Q8_K = 4, /* super-blocks of 256 (k-quants, IQ types) */
    BK_ACT_BF16 = 5, /* bf16 rows (BF16 weights) */
    BK_ACT_Q8_KD = 6, /* deferred RMSNorm (CUDA decode, Q4_K readers): x * norm weight quantized with a scale every 16
                         values, the row's sums of squares every 16 beside them; the readers apply the RMS scale to
                         their sums (bk_act.kd_eps). Filled only by matmul_add_defer. */
    BK_ACT_NFMT
};
#define BK_ACT_BIT(f) (1u << (f))

/* An activation matrix [n_rows][n_cols] in f32 plus the quantized copies the matmuls that read it
 * need. The buffers (q[f] != NULL) are allocated for a set of formats by bk_act_alloc: the model
 * computes it at load time as the union over the weights that read this activation, so each
 * activation is quantized once and shared by every matmul that reads it (q/k/v; gate/up).
 * fmts says which formats the next rmsnorm_quantize / quantize / swiglu_quantize fills: a subset of
 * the allocated ones, which the model may narrow per layer (a layer whose q/k/v are all Q8_0 skips
 * the Q8_K copy). F32 weights (and F16/BF16, whose dot takes f32) read x itself.
 * x has row stride n_cols floats; q[f] holds n_rows rows of bk_act_row_bytes(f, n_cols) bytes.
 * NOTE: the formats are the CPU dot products' (quant_traits()->vec_dot_type); a GPU backend may keep
 * its own layout behind q[f] as long as its matmul reads what its quantize wrote. */
struct bk_act {
    float *x;                  /* [max_rows][n_cols] f32, backend memory */
    void *q[BK_ACT_NFMT];      /* quantized rows per format (NULL if not in fmts; q[F32] = x) */
    int64_t n_cols;
    int64_t max_rows;
    int64_t n_rows;            /* rows currently valid (set by the op that fills it) */
    uint32_t fmts;             /* formats kept up to date by rmsnorm_quantize / quantize */
    float kd_eps;              /* BK_ACT_Q8_KD: the RMSNorm's epsilon its readers apply */
};

/* One output of a fused matmul: y[r][o] = sum_i w[o][i] * act[r][i] (+ bias[o]).
 * y: [n_rows][ld_y] f32 backend memory, ld_y >= w->ne[1] (0 means ld_y = w->ne[1]). */
struct bk_matmul_out {
    const struct bk_tensor *w;
    const float *bias;         /* [w->ne[1]] or NULL (from a bk_tensor's data) */
    float *y;
    int64_t ld_y;
};

/* ---------------------------------------------------------------------------------------------
 * Batch: n_tokens rows that may come from several sequences (as the engine's scheduler builds it)
 * ------------------------------------------------------------------------------------------- */

/* Per-sequence state the engine owns. */
struct bk_seq {
    const int32_t *block_table; /* KV block ids; block b holds positions [16b, 16b+16) */
    int32_t n_blocks;           /* entries in block_table: must cover every position used */
    int32_t state_slot;         /* recurrent-state slot (hybrid models); -1 if none */
};

/* Host-side description of one forward step. Arrays are host memory; batch_set uploads them.
 * Invariants checked by batch_set: seq_idx[t] < n_seqs; pos[t] >= 0 and pos[t] / 16 < n_blocks of
 * its sequence; within one sequence, positions are increasing in row order; logit_rows ascending. */
struct bk_batch {
    int32_t n_tokens;
    const int32_t *token_ids;  /* [n_tokens] */
    const int32_t *pos;        /* [n_tokens] absolute position in its sequence */
    const int32_t *seq_idx;    /* [n_tokens] index into seqs */
    int32_t n_seqs;
    const struct bk_seq *seqs; /* [n_seqs] */
    int32_t n_logits;
    const int32_t *logit_rows; /* [n_logits] rows of the batch whose logits are wanted */
    const struct bk_sample *sample; /* [n_logits] or NULL. Where the logits op returns ids (argmax), row i is drawn by
                                       sample[i] instead (backends that offer it: CUDA; the others ignore it) */
};
/* One logits row's draw on the device: the engine's sampler (src/engine/sampler.h) without logit bias or
 * penalties, u the request's uniform in [0, 1); temperature 0 is the argmax. */
struct bk_sample { double u; float temperature, top_p, min_p; int32_t top_k; };

/* ---------------------------------------------------------------------------------------------
 * KV cache: one pool per attention layer, blocks of 16 tokens. Layout of each layer's K and V pools:
 * [n_blocks][n_kv_head][BK_KV_BLOCK][head_dim] so one head's 16 tokens are contiguous.
 * ------------------------------------------------------------------------------------------- */
/* Element types of the KV pools. FP8_E4M3 is OCP FP8 E4M3FN (bias 7, no inf, max 448, NaN 0x7F/0xFF)
 * holding x / scale with a per-tensor scale per layer and kind (K or V): stored as e4m3(x / scale)
 * (round to nearest even, saturated to +-448), read as e4m3_to_f32(code) * scale (as vLLM's fp8 cache). */
enum bk_kv_dtype { BK_KV_F32 = 0, BK_KV_F16 = 1, BK_KV_BF16 = 2, BK_KV_FP8_E4M3 = 3, BK_KV_NDTYPE };

struct bk_kv_cache {
    enum bk_kv_dtype dtype;
    int32_t n_layers;          /* attention layers only (the model maps its layers onto these) */
    int32_t n_blocks;
    int32_t n_kv_head, head_dim;
    void **k, **v;             /* [n_layers] host array of backend pointers to each layer's pool */
    float k_scale, v_scale;    /* scale of every layer whose k_scales / v_scales entry is absent; 1.0 */
    struct bk_rs_cache *rs;    /* recurrent state of hybrid models (below), NULL otherwise */
    /* Per-layer fp8 scales (host, [n_layers], 1.0 unless the model or a calibration sets them; > 0 and
     * finite). NULL = use k_scale / v_scale. Only FP8_E4M3 reads them; set them before the first store. */
    float *k_scales, *v_scales;
    /* Longest sequence (positions) any batch will use; 0 = n_blocks * BK_KV_BLOCK. A backend may size
     * fixed per-cache work from it (the CUDA split-K chunk); the engine sets its max_model_len. */
    int32_t max_ctx;
    /* Per-channel key shift of an FP8_E4M3 cache (host, malloc'd, [n_layers][n_kv_head * head_dim], or NULL
     * = 0; set by model_kv_create, freed by model_kv_destroy; other dtypes ignore it). A key is stored as
     * e4m3((k - k_shift) / k_scale) and read back as e4m3_to_f32(code) * k_scale WITHOUT adding the shift:
     * q . (k - shift) differs from q . k by q . shift, the same for every key of a query, so the softmax
     * (hence the attention output) is unchanged in exact arithmetic. The model sets it to the constant part
     * of its keys that e4m3 would otherwise round coarsely (a key bias in slowly rotating RoPE pairs). */
    float *k_shift;
};

/* ---------------------------------------------------------------------------------------------
 * Op parameters
 * ------------------------------------------------------------------------------------------- */
enum bk_rope_mode {
    BK_ROPE_NORM = 0, /* pairs (2i, 2i+1) (llama) */
    BK_ROPE_NEOX = 2, /* pairs (i, i + n_rot/2) (qwen2/qwen3/qwen35) */
};

struct bk_rope_params {
    enum bk_rope_mode mode;
    int32_t n_rot;              /* rotated dims per head (<= head_dim, even); the rest pass through */
    float freq_base;
    float freq_scale;           /* 1 = no linear scaling */
    const float *freq_factors;  /* [n_rot/2] divisors of theta_i (llama3 rope_freqs) or NULL */
};

struct bk_attn_params {
    int32_t n_head, n_kv_head, head_dim; /* query head j uses kv head j / (n_head / n_kv_head) */
    float scale;                         /* usually 1/sqrt(head_dim) */
    int32_t kv_layer;                    /* index into the KV cache's layers */
};

/* Recurrent state of a hybrid model's Gated DeltaNet layers (qwen35 / qwen35moe), owned by the caller
 * like the KV cache. Per layer and sequence slot: the conv state [conv_dim][d_conv-1] (last raw inputs,
 * oldest first, f32) and the delta-rule state [n_v_head][d_v][d_k] (v-major), f32 or, with ssm_bf16, bf16
 * (vLLM's --mamba-ssm-cache-dtype): the gdn op then loads a sequence's state to f32 at the start of its
 * run of tokens in the batch, computes in f32, and stores it rounded to bf16 (nearest even) at the run's end,
 * so the rounding happens once a step per sequence, not once a token. */
struct bk_rs_cache {
    int32_t n_layers;          /* recurrent layers only */
    int32_t n_slots;           /* bk_seq.state_slot indexes these */
    int64_t conv_floats;       /* per (layer, slot) */
    int64_t ssm_floats;        /* per (layer, slot): elements, f32 or bf16 */
    float **conv;              /* [n_layers] host array of backend pointers to [n_slots][conv_floats] */
    void **ssm;                /* [n_layers] host array of backend pointers to [n_slots][ssm_floats] */
    int32_t ssm_bf16;          /* 1: the delta-rule state is bf16 (uint16_t) */
};
/* Bytes of one (layer, slot) delta-rule state. */
static inline size_t bk_rs_ssm_bytes(const struct bk_rs_cache *rs) {
    return (size_t)rs->ssm_floats * (rs->ssm_bf16 ? 2u : 4u);
}

struct bk_gdn_params {
    int32_t n_k_head, n_v_head;  /* value head m reads query/key head m % n_k_head */
    int32_t d_k, d_v, d_conv;
    float eps;                   /* rms / L2 norm epsilon */
    int32_t rs_layer;            /* index into the bk_rs_cache layers */
};

struct bk_gdn_weights {
    const float *conv;         /* [conv_dim][d_conv], tap d_conv-1 on the current token */
    const float *dt_bias;      /* [n_v_head] */
    const float *ssm_a;        /* [n_v_head] = -exp(A_log) */
    const float *norm;         /* [d_v] gated-norm weight shared by all heads */
};
/* Floats of work memory the gdn op needs for up to max_tokens rows with n_threads threads. */
int64_t bk_gdn_work_floats(const struct bk_gdn_params *p, int64_t max_tokens, int n_threads);

struct bk_moe_weights {
    const struct bk_tensor *router;                          /* {n_embd, n_expert} F32 */
    const struct bk_tensor *gate_exps, *up_exps;             /* {n_embd, n_ff_exp, n_expert} */
    const struct bk_tensor *down_exps;                       /* {n_ff_exp, n_embd, n_expert} */
    const struct bk_tensor *gate_shexp, *up_shexp, *down_shexp; /* shared expert; NULL or data NULL = none */
    const struct bk_tensor *shexp_gate;                      /* {n_embd} F32; NULL or data NULL = gate 1 */
};

struct bk_moe_params {
    int32_t n_expert_used;
    bool norm_weights;         /* renormalize the selected probabilities (always for qwen35moe) */
};

/* ---------------------------------------------------------------------------------------------
 * The ops table. Every op takes the backend first. Shapes: n_rows rows of n_cols (row stride
 * `ld` elements where given; 0 means ld = n_cols). In-place (out == in) is allowed where noted.
 * Ops that need the batch (embed, rope, attention, get_rows) use the one last given to batch_set.
 * Ops return VLLMC_OK or an error status (never abort on bad shapes: they are checked).
 * To add ops (GDN, MoE, ...), append members at the end; backends leave unknown ones NULL and the
 * model checks for NULL at load time.
 * ------------------------------------------------------------------------------------------- */
struct backend;

struct backend_ops {
    const char *name;
    void (*destroy)(struct backend *be);

    /* Memory. alloc returns zeroed, 64-byte aligned backend memory. */
    vllmc_status (*alloc)(struct backend *be, size_t size_bytes, void **out);
    void (*free)(struct backend *be, void *p);
    vllmc_status (*copy_to_device)(struct backend *be, void *dst, const void *host_src, size_t n);
    vllmc_status (*copy_to_host)(struct backend *be, void *host_dst, const void *src, size_t n);
    /* Make a weight from host data (e.g. a mmap'd GGUF tensor) of ggml type `type`, shape ne.
     * The CPU backend uses host_data in place (the caller keeps it alive) except 1-D tensors,
     * which it converts to an owned F32 copy (type becomes F32). Free with weight_free. */
    vllmc_status (*weight_upload)(struct backend *be, const void *host_data, uint32_t type, int n_dims,
                                  const int64_t *ne, struct bk_tensor *out);
    void (*weight_free)(struct backend *be, struct bk_tensor *t);

    /* Upload the batch description (validated; VLLMC_ERR_INVALID names a bad field). */
    vllmc_status (*batch_set)(struct backend *be, const struct bk_batch *b);

    /* out[t][:] = dequant(table row token_ids[t]) for every batch row. out: [n_tokens][table->ne[0]]. */
    vllmc_status (*embed)(struct backend *be, const struct bk_tensor *table, float *out);

    /* out[r] = x[r] * w / sqrt(mean(x[r]^2) + eps), w as stored in GGUF (F32 [n_cols]) or NULL (=1).
     * x and out have row strides ld_x / ld_out; out == x allowed. Sum of squares in double. */
    vllmc_status (*rmsnorm)(struct backend *be, const float *x, int64_t ld_x, const float *w, float eps,
                            int64_t n_rows, int64_t n_cols, float *out, int64_t ld_out);
    /* rmsnorm of x [n_rows][out->n_cols] into out->x, then quantize it into every format in out->fmts. */
    vllmc_status (*rmsnorm_quantize)(struct backend *be, const float *x, const float *w, float eps,
                                     int64_t n_rows, struct bk_act *out);
    /* Quantize act->x (act->n_rows rows, set by the caller) into every format in act->fmts. */
    vllmc_status (*quantize)(struct backend *be, struct bk_act *act);

    /* n_out matmuls sharing one activation: outs[i].y = act * outs[i].w^T (+ bias). Each weight's
     * ne[0] must equal act->n_cols and its activation format must be in act->fmts. */
    vllmc_status (*matmul)(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs);

    /* y[r][c] += x[r][c] for n_rows x n_cols (residual add), both with row stride n_cols. */
    vllmc_status (*add)(struct backend *be, float *y, const float *x, int64_t n_rows, int64_t n_cols);

    /* In-place RoPE of x: batch rows t, each holding n_head heads of head_dim at row stride ld
     * (0 = n_head*head_dim); position pos[t] from the batch. */
    vllmc_status (*rope)(struct backend *be, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                         const struct bk_rope_params *p);

    /* Paged causal attention. Stores k, v ([n_tokens][n_kv_head*head_dim], row strides ld_k/ld_v,
     * 0 = packed) into the cache at each row's (sequence, position), then for every row t and query
     * head j: out[t][j] = softmax_{tau <= pos[t]}(scale * q_j . K[seq][tau]) . V[seq][tau].
     * q: [n_tokens][ld_q] (0 = n_head*head_dim); out: [n_tokens][n_head*head_dim]. */
    vllmc_status (*attention)(struct backend *be, struct bk_kv_cache *kv, const struct bk_attn_params *p,
                              const float *q, int64_t ld_q, const float *k, int64_t ld_k, const float *v,
                              int64_t ld_v, float *out);

    /* out->x[r][c] = silu(gate[r][c]) * up[r][c] with gate/up row stride ld (0 = out->n_cols),
     * then quantize out into its formats. n_rows rows. */
    vllmc_status (*swiglu_quantize)(struct backend *be, const float *gate, const float *up, int64_t ld,
                                    int64_t n_rows, struct bk_act *out);

    /* out[i] = x[batch.logit_rows[i]] (n_cols each): gathers the rows that need logits. */
    vllmc_status (*get_rows)(struct backend *be, const float *x, int64_t n_cols, float *out);

    /* LM head: logits[r] = w * act[r] for act->n_rows rows (w: [n_vocab][n_embd]); if argmax is not
     * NULL also writes argmax[r] (host memory; ties to the lowest id). logits: backend memory. */
    vllmc_status (*logits)(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *logits,
                           int32_t *argmax);

    /* KV cache (pools allocated zeroed). */
    vllmc_status (*kv_create)(struct backend *be, enum bk_kv_dtype dtype, int32_t n_layers, int32_t n_blocks,
                              int32_t n_kv_head, int32_t head_dim, struct bk_kv_cache **out);
    void (*kv_destroy)(struct backend *be, struct bk_kv_cache *kv);

    /* ---- appended by model families that need more (keep members above stable) ---- */

    /* Gated DeltaNet mixer core (qwen35 / qwen35moe; ARCH-QWEN35.md 4.5). in: [n_tokens][ld_in] rows laid
     * out [qkv: conv_dim | z: n_v_head*d_v | b: n_v_head | a: n_v_head] (the projections of the normed input,
     * conv_dim = 2*n_k_head*d_k + n_v_head*d_v). For each run of consecutive batch rows of one sequence, in
     * row order, with that sequence's state slot of layer p->rs_layer (zeroed first when the run starts at
     * position 0): causal conv + SiLU, q/k L2 norm, gates, delta rule, gated RMSNorm with z. Writes out->x
     * [n_tokens][n_v_head*d_v] and quantizes it into out->fmts. work: bk_gdn_work_floats() floats of
     * backend memory. NULL in backends without it. */
    vllmc_status (*gdn)(struct backend *be, struct bk_rs_cache *rs, const struct bk_gdn_params *p,
                        const struct bk_gdn_weights *w, const float *in, int64_t ld_in, float *work,
                        struct bk_act *out);
    /* Mixture of experts FFN (qwen35moe; ARCH-QWEN35.md 4.7) for in->n_rows rows: router softmax over all
     * experts, top n_expert_used, weights renormalized, sum of weighted expert SwiGLU outputs (expert
     * matrices used in place from the 3-D tensors), plus the shared expert scaled by sigmoid(shexp_gate . x).
     * in->fmts must hold the formats the gate/up (routed and shared) weights read. out: [n_rows][n_embd],
     * overwritten. NULL in backends without it. */
    vllmc_status (*moe)(struct backend *be, const struct bk_act *in, const struct bk_moe_weights *w,
                        const struct bk_moe_params *p, float *out);
    /* x[r][c] *= sigmoid(gate[r][c]) for n_rows x n_cols, row strides ld_x / ld_gate (0 = n_cols): the
     * output gate of gated attention (qwen35). NULL in backends without it. */
    vllmc_status (*sigmoid_mul)(struct backend *be, float *x, int64_t ld_x, const float *gate, int64_t ld_gate,
                                int64_t n_rows, int64_t n_cols);
    /* Copy n bytes between two buffers of this backend (no host round trip), ordered after every op
     * called before it. */
    vllmc_status (*copy_within)(struct backend *be, void *dst, const void *src, size_t n);
    /* Free and total bytes of the memory this backend allocates from (the GPU's; the host's on CPU). */
    vllmc_status (*mem_info)(struct backend *be, uint64_t *free_bytes, uint64_t *total_bytes);
    /* The residual add and the next RMSNorm in the launch that forms the residual, the RMS scale deferred to the
     * readers: x += act . w^T (one weight of n_embd rows), then out (fmts = BK_ACT_BIT(BK_ACT_Q8_KD)) gets x * norm_w
     * quantized with a scale every 16 values and the row's sums of squares every 16. defer_norm_ok says whether
     * this backend takes that form for producer w and the readers of out (matmul of those weights), at n_rows rows:
     * the model asks before each such step, recorded or eager alike, and otherwise runs matmul, add and
     * rmsnorm_quantize. Both NULL in backends without the form. */
    bool (*defer_norm_ok)(struct backend *be, const struct bk_tensor *w, const struct bk_tensor *const *readers, int n_readers,
                          int64_t n_rows);
    vllmc_status (*matmul_add_defer)(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *x,
                                     const float *norm_w, float eps, struct bk_act *out);
};

/* A backend instance. Backends embed this as their first member. */
struct backend {
    const struct backend_ops *ops;
    int n_threads;
};

/* CPU backend. n_threads <= 0: all online CPUs. reference = true selects the plain scalar,
 * single-threaded reference path of every op (the oracle the fast path is tested against). */
vllmc_status backend_cpu_create(int n_threads, bool reference, struct backend **out);

/* Helpers shared by backends and models (backend.c). */
/* The activation format a weight of ggml type t reads; -1 if unsupported. */
int bk_act_fmt_for_weight(uint32_t type);
/* Bytes of one row of n_cols elements in activation format f (0 if n_cols is not a block multiple). */
uint64_t bk_act_row_bytes(int fmt, int64_t n_cols);
/* Allocate the buffers of an activation [max_rows][n_cols] holding formats fmts (BK_ACT_F32 always). */
vllmc_status bk_act_alloc(struct backend *be, int64_t max_rows, int64_t n_cols, uint32_t fmts, struct bk_act *a);
void bk_act_free(struct backend *be, struct bk_act *a); /* accepts a zeroed/half-built act */
/* Bytes of one KV-cache block (one layer, K or V): BK_KV_BLOCK * n_kv_head * head_dim * elt. */
uint64_t bk_kv_block_bytes(enum bk_kv_dtype dtype, int32_t n_kv_head, int32_t head_dim);
/* Bytes of one KV element of dtype (4, 2, 2, 1); 0 for an unknown dtype. */
size_t bk_kv_dtype_size(enum bk_kv_dtype dtype);
/* "f32", "f16", "bf16", "fp8_e4m3" (or "?"). */
const char *bk_kv_dtype_name(enum bk_kv_dtype dtype);
/* Parse a --kv-cache-dtype value: auto (= f16) | f16 | fp16 | half | bf16 | f32 | fp32 | float | fp8 | fp8_e4m3.
 * Returns false for anything else. */
bool bk_kv_dtype_parse(const char *s, enum bk_kv_dtype *out);
/* FP8 E4M3FN conversions (kv_dtype.c). Encode: round to nearest even, |x| > 448 (and +-inf) saturates to
 * +-448, NaN gives 0x7F with the sign bit of x. Decode: exact (0x7F / 0xFF are NaN). */
uint8_t bk_fp8_e4m3_from_f32(float x);
float bk_fp8_e4m3_to_f32(uint8_t code);
extern const float bk_fp8_e4m3_table[256]; /* bk_fp8_e4m3_to_f32 of every code */
const char *bk_act_fmt_name(int fmt);

#endif
