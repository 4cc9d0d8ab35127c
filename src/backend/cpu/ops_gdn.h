/* Gated DeltaNet (GDN) ops on the CPU, all in f32 (ARCH-QWEN35.md sections 4.5 and 5):
 * causal depthwise conv1d with a rolling state, per-head L2 norm, the beta/decay gates, the gated delta
 * rule (token-by-token recurrence for decode, chunked WY form for prefill; both give the same result up
 * to rounding) and the gated RMSNorm.
 * State layouts, per sequence and layer, owned by the caller:
 *   conv state      [n_ch][d_conv-1]      the last d_conv-1 raw inputs of each channel, oldest first
 *   recurrent state [n_v_head][d_v][d_k]  S transposed (v-major): element (k_i, v_j) at j*d_k + i,
 *                                         the layout llama.cpp keeps. Zero at sequence start.
 * Value head m reads query/key head m % n_k_head (GGUF tiled order). */
#ifndef VLLMC_OPS_GDN_H
#define VLLMC_OPS_GDN_H

#include <stdint.h>
#include "backend/backend.h"
#include "common/threadpool.h"

/* fn(ctx, job, i_thread) for every job in [0, n_jobs): one task per thread of tp (NULL: the caller runs
 * all), each taking the next job from a shared counter, so a descheduled thread delays no one. i_thread
 * is the worker's index (per-thread scratch stays private); results must not depend on which thread runs
 * a job. */
void gdn_parallel_for(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_jobs);

struct gdn_dims {
    int n_k_head; /* query/key heads */
    int n_v_head; /* value heads, a multiple of n_k_head */
    int d_k;      /* key (and query) head size */
    int d_v;      /* value head size */
};

/* Causal depthwise conv (no bias) followed by SiLU, over n_tokens tokens of n_ch channels.
 * x: [n_tokens][x_stride] raw inputs (first n_ch used); w: [n_ch][d_conv], tap d_conv-1 multiplies the
 * current token; state: [n_ch][d_conv-1], read as the history before token 0 and replaced by the last
 * d_conv-1 raw inputs (the tail of old state + x when n_tokens < d_conv-1); y: [n_tokens][y_stride].
 * y must not alias x. 2 <= d_conv <= 8. tp may be NULL. */
void gdn_conv1d_silu(float *y, int64_t y_stride, const float *x, int64_t x_stride, int n_tokens, int n_ch,
                     const float *w, int d_conv, float *state, struct threadpool *tp);

/* x[i] /= max(sqrt(sum x^2), eps) over n values (ggml l2_norm; the sum accumulated in double). */
void gdn_l2norm(float *x, int n, float eps);

/* After the conv, in place on each token's row [q: n_k_head*d_k | k: n_k_head*d_k | ...]:
 * L2-normalize every q and k head, then scale q by 1/sqrt(d_k). */
void gdn_qk_norm(float *qkv, int64_t stride, int n_tokens, const struct gdn_dims *d, float eps);

/* Per token t and value head m: beta = sigmoid(b), g = softplus(a + dt_bias[m]) * ssm_a[m]
 * (softplus(x) = x for x > 20). b, a: [n_tokens][ab_stride]; beta, g: [n_tokens][n_v_head]. */
void gdn_gates(float *beta, float *g, const float *b, const float *a, int64_t ab_stride, int n_tokens,
               int n_v_head, const float *dt_bias, const float *ssm_a);

/* The gated delta rule, token by token: per value head m with q, k from head m % n_k_head,
 *   S <- exp(g) S;  d = beta (v - S^T k);  S <- S + k d^T;  o = S^T q.
 * q, k: [n_tokens][qk_stride] (head h at h*d_k; q already normalized and scaled, k normalized);
 * v: [n_tokens][v_stride] (head m at m*d_v); g, beta: [n_tokens][n_v_head];
 * state: [n_v_head][d_v][d_k], updated; o: [n_tokens][o_stride] (head m at m*d_v). tp may be NULL. */
void gdn_delta_rule_recurrent(const struct gdn_dims *d, int n_tokens, const float *q, const float *k,
                              int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                              const float *beta, float *state, float *o, int64_t o_stride,
                              struct threadpool *tp);

/* The same rule in chunks of `chunk` tokens (WY / UT-transform form, ARCH-QWEN35.md 5.2): within a chunk
 * the sequential corrections become a triangular solve and dense products; only the state is carried
 * from chunk to chunk. Same arguments and result as gdn_delta_rule_recurrent; scratch holds
 * gdn_chunked_scratch_floats(d, chunk) floats per thread of tp (1 thread when tp is NULL). */
int64_t gdn_chunked_scratch_floats(const struct gdn_dims *d, int chunk);
void gdn_delta_rule_chunked(const struct gdn_dims *d, int n_tokens, int chunk, const float *q,
                            const float *k, int64_t qk_stride, const float *v, int64_t v_stride,
                            const float *g, const float *beta, float *state, float *o, int64_t o_stride,
                            float *scratch, struct threadpool *tp);

/* Gated RMSNorm per head: out[m] = rmsnorm(o[m]; w) * silu(z[m]) over each head's d_v values, with one
 * weight w[d_v] shared by all heads (no +1; sum of squares in double as ggml). o and out: [n_tokens][stride],
 * z: [n_tokens][z_stride], rows of n_head*d_v; out may alias o. */
void gdn_gated_rmsnorm(float *out, const float *o, int64_t stride, const float *z, int64_t z_stride,
                       int n_tokens, int n_head, int d_v, const float *w, float eps);

/* The backend op (struct backend_ops.gdn) for the CPU backends: the reference backend always runs the
 * recurrence single-threaded; the fast one runs the AVX-512 / AVX2 recurrence where the CPU has it, else
 * the chunked rule for runs of 32 tokens or more. */
vllmc_status cpu_gdn(struct backend *be, struct bk_rs_cache *rs, const struct bk_gdn_params *p,
                     const struct bk_gdn_weights *w, const float *in, int64_t ld_in, float *work,
                     struct bk_act *out);
/* The backend op (struct backend_ops.sigmoid_mul): x *= sigmoid(gate), element-wise. */
vllmc_status cpu_sigmoid_mul(struct backend *be, float *x, int64_t ld_x, const float *gate, int64_t ld_gate,
                             int64_t n_rows, int64_t n_cols);

/* bf16 state conversions (ops_gdn_simd.h): widen n bf16 to f32 / round n f32 to bf16 (fp32_to_bf16's bits), by the
 * CPU's widest vectors; gdn_bf16_* pick the ISA at run time. */
void gdn_bf16_widen(float *dst, const uint16_t *src, int64_t n);
void gdn_bf16_narrow(uint16_t *dst, const float *src, int64_t n);
void gdn_bf16_widen_avx2(float *dst, const uint16_t *src, int64_t n);
void gdn_bf16_narrow_avx2(uint16_t *dst, const float *src, int64_t n);
void gdn_bf16_widen_avx512(float *dst, const uint16_t *src, int64_t n);
void gdn_bf16_narrow_avx512(uint16_t *dst, const float *src, int64_t n);
/* The vector recurrence of one value head over n_tokens (ops_gdn_simd.h; S f32 [d_v][d_k]). */
void gdn_recurrent_head_avx2(float *S, int d_k, int d_v, int n_tokens, const float *q, const float *k, int64_t qk_stride,
                             const float *v, int64_t v_stride, const float *g, const float *beta, int64_t gb_stride, float *o,
                             int64_t o_stride);
void gdn_recurrent_head_avx512(float *S, int d_k, int d_v, int n_tokens, const float *q, const float *k, int64_t qk_stride,
                               const float *v, int64_t v_stride, const float *g, const float *beta, int64_t gb_stride,
                               float *o, int64_t o_stride);
/* One token of one value head on a bf16 state [d_v][d_k] (decode): q, k [d_k], v, o [d_v], g the log-decay, beta the
 * gate. The same bits as widening the head, the f32 recurrence over the token and rounding it back. d_k <=
 * GDN_BF16_MAX_DK (its row buffer on the stack), a multiple of 16 (AVX-512) or 8 (AVX2). */
#define GDN_BF16_MAX_DK 512
void gdn_recurrent_head_bf16_avx2(uint16_t *S, int d_k, int d_v, const float *q, const float *k, const float *v, float g,
                                  float beta, float *o);
void gdn_recurrent_head_bf16_avx512(uint16_t *S, int d_k, int d_v, const float *q, const float *k, const float *v, float g,
                                    float beta, float *o);

#endif
