/* Gated DeltaNet ops on the CPU (see ops_gdn.h). The recurrent and the chunked delta rule are two
 * evaluations of the same recurrence: value heads are independent, so both run one task per head, and the
 * state row of one value dimension (d_k contiguous floats) is the unit every inner loop walks. The
 * recurrence has AVX-512 and AVX2 kernels (ops_gdn_avx512.c, ops_gdn_avx2.c) picked at run time through
 * quant_isa_active(); the loops here are the portable fallback. */
#include "backend/cpu/ops_gdn.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "backend/cpu/cpu_internal.h"
#include "quant/blocks.h"
#include "quant/gemv.h"

/* Dot product with 8 independent partial sums so the compiler can vectorize it without reassociation. */
static inline float gdn_dot(const float *a, const float *b, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void gdn_axpy(float *restrict y, float a, const float *restrict x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static inline void gdn_scale(float *y, float a, int n) {
    for (int i = 0; i < n; i++) y[i] *= a;
}

static inline float gdn_silu(float x) { return x / (1.0f + expf(-x)); }

/* ---- dynamic parallel-for ---- */

struct gdn_dyn {
    atomic_int next;
    int n_jobs;
    threadpool_fn fn;
    void *ctx;
};

static void gdn_dyn_task(void *vctx, int i_task, int i_thread) {
    (void)i_task;
    struct gdn_dyn *d = vctx;
    for (int i; (i = atomic_fetch_add_explicit(&d->next, 1, memory_order_relaxed)) < d->n_jobs;) d->fn(d->ctx, i, i_thread);
}

void gdn_parallel_for(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_jobs) {
    const int nt = tp ? threadpool_n_threads(tp) : 1;
    if (nt <= 1 || n_jobs <= 1) {
        for (int i = 0; i < n_jobs; i++) fn(ctx, i, 0);
        return;
    }
    struct gdn_dyn d;
    atomic_init(&d.next, 0);
    d.n_jobs = n_jobs;
    d.fn = fn;
    d.ctx = ctx;
    threadpool_run(tp, gdn_dyn_task, &d, VLLMC_MIN(nt, n_jobs));
}

/* ---- conv1d ---- */

#define GDN_CONV_BLOCK 64 /* channels per task */

struct gdn_conv_ctx {
    float *y;
    int64_t y_stride;
    const float *x;
    int64_t x_stride;
    int n_tokens, n_ch, d_conv;
    const float *w;
    float *state;
};

/* One block of channels, token-major so the inner loop runs over contiguous channels: the taps and the old
 * state are transposed into [tap][channel] blocks first; window element tau < 0 reads the old state. */
static void gdn_conv_task(void *vctx, int i_task, int i_thread) {
    (void)i_thread;
    const struct gdn_conv_ctx *c = vctx;
    const int nh = c->d_conv - 1, T = c->n_tokens;
    const int ch0 = i_task * GDN_CONV_BLOCK, nc = VLLMC_MIN(GDN_CONV_BLOCK, c->n_ch - ch0);
    if (T == 1) { /* decode: one window per channel, no transposes; same sum order as below */
        const float *x = c->x + ch0;
        float *y = c->y + ch0;
        for (int ch = 0; ch < nc; ch++) {
            const float *wc = c->w + (int64_t)(ch0 + ch) * c->d_conv;
            float *st = c->state + (int64_t)(ch0 + ch) * nh;
            float acc = 0.0f;
            for (int j = 0; j < nh; j++) acc += st[j] * wc[j];
            acc += x[ch] * wc[nh];
            y[ch] = gdn_silu(acc);
            for (int j = 0; j + 1 < nh; j++) st[j] = st[j + 1];
            st[nh - 1] = x[ch];
        }
        return;
    }
    float wT[8][GDN_CONV_BLOCK], stT[8][GDN_CONV_BLOCK];
    for (int ch = 0; ch < nc; ch++)
        for (int j = 0; j <= nh; j++) {
            wT[j][ch] = c->w[(int64_t)(ch0 + ch) * c->d_conv + j];
            if (j < nh) stT[j][ch] = c->state[(int64_t)(ch0 + ch) * nh + j];
        }
#define GDN_SRC(tau) ((tau) >= 0 ? c->x + (int64_t)(tau) * c->x_stride + ch0 : stT[nh + (tau)])
    for (int t = 0; t < T; t++) {
        const float *src[8];
        for (int j = 0; j <= nh; j++) src[j] = GDN_SRC(t - nh + j);
        float *y = c->y + (int64_t)t * c->y_stride + ch0;
        float acc[GDN_CONV_BLOCK];
        if (nc == GDN_CONV_BLOCK) { /* constant trip counts: vectorized */
            for (int ch = 0; ch < GDN_CONV_BLOCK; ch++) acc[ch] = 0.0f;
            for (int j = 0; j <= nh; j++)
                for (int ch = 0; ch < GDN_CONV_BLOCK; ch++) acc[ch] += src[j][ch] * wT[j][ch];
        } else {
            for (int ch = 0; ch < nc; ch++) acc[ch] = 0.0f;
            for (int j = 0; j <= nh; j++)
                for (int ch = 0; ch < nc; ch++) acc[ch] += src[j][ch] * wT[j][ch];
        }
        for (int ch = 0; ch < nc; ch++) y[ch] = gdn_silu(acc[ch]);
    }
    for (int j = 0; j < nh; j++) {
        const float *src = GDN_SRC(T - nh + j);
        for (int ch = 0; ch < nc; ch++) c->state[(int64_t)(ch0 + ch) * nh + j] = src[ch];
    }
#undef GDN_SRC
}

void gdn_conv1d_silu(float *y, int64_t y_stride, const float *x, int64_t x_stride, int n_tokens, int n_ch,
                     const float *w, int d_conv, float *state, struct threadpool *tp) {
    VLLMC_ASSERT(d_conv >= 2 && d_conv <= 8 && n_tokens >= 0 && n_ch >= 0);
    struct gdn_conv_ctx c = {y, y_stride, x, x_stride, n_tokens, n_ch, d_conv, w, state};
    gdn_parallel_for(tp, gdn_conv_task, &c, CEIL_DIV(n_ch, GDN_CONV_BLOCK));
}

/* ---- norms and gates ---- */

void gdn_l2norm(float *x, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)x[i] * x[i];
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

void gdn_qk_norm(float *qkv, int64_t stride, int n_tokens, const struct gdn_dims *d, float eps) {
    const float q_scale = 1.0f / sqrtf((float)d->d_k);
    for (int t = 0; t < n_tokens; t++) {
        float *row = qkv + (int64_t)t * stride;
        for (int h = 0; h < 2 * d->n_k_head; h++) gdn_l2norm(row + (int64_t)h * d->d_k, d->d_k, eps);
        for (int i = 0; i < d->n_k_head * d->d_k; i++) row[i] *= q_scale;
    }
}

void gdn_gates(float *beta, float *g, const float *b, const float *a, int64_t ab_stride, int n_tokens,
               int n_v_head, const float *dt_bias, const float *ssm_a) {
    for (int t = 0; t < n_tokens; t++)
        for (int m = 0; m < n_v_head; m++) {
            const float bv = b[(int64_t)t * ab_stride + m];
            const float x = a[(int64_t)t * ab_stride + m] + dt_bias[m];
            const float sp = x > 20.0f ? x : logf(1.0f + expf(x));
            beta[(int64_t)t * n_v_head + m] = 1.0f / (1.0f + expf(-bv));
            g[(int64_t)t * n_v_head + m] = sp * ssm_a[m];
        }
}

/* One head of one token (y may alias x). */
static void gdn_gated_rmsnorm_head(float *y, const float *x, const float *zz, int d_v, const float *w, float eps) {
    double sum = 0.0;
    for (int i = 0; i < d_v; i++) sum += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(sum / d_v) + eps);
    for (int i = 0; i < d_v; i++) y[i] = x[i] * scale * w[i] * gdn_silu(zz[i]);
}

void gdn_gated_rmsnorm(float *out, const float *o, int64_t stride, const float *z, int64_t z_stride,
                       int n_tokens, int n_head, int d_v, const float *w, float eps) {
    for (int t = 0; t < n_tokens; t++)
        for (int m = 0; m < n_head; m++)
            gdn_gated_rmsnorm_head(out + (int64_t)t * stride + (int64_t)m * d_v, o + (int64_t)t * stride + (int64_t)m * d_v,
                                   z + (int64_t)t * z_stride + (int64_t)m * d_v, d_v, w, eps);
}

/* ---- delta rule ---- */

struct gdn_rule_ctx {
    const struct gdn_dims *d;
    int n_tokens, chunk;
    const float *q, *k, *v, *g, *beta;
    int64_t qk_stride, v_stride, o_stride;
    float *state, *o, *scratch;
    int64_t scratch_per_thread;
};


/* The vector recurrence a head of d_k columns takes on this CPU: QUANT_ISA_AVX512, QUANT_ISA_AVX2 or (none) SCALAR. */
static int gdn_rule_isa(int dk) {
    const int isa = quant_isa_active();
    return dk % 16 == 0 && isa == QUANT_ISA_AVX512 ? QUANT_ISA_AVX512 : dk % 8 == 0 && isa >= QUANT_ISA_AVX2 ? QUANT_ISA_AVX2
                                                                                                          : QUANT_ISA_SCALAR;
}

static void gdn_recurrent_task(void *vctx, int m, int i_thread) {
    (void)i_thread;
    const struct gdn_rule_ctx *c = vctx;
    const int dk = c->d->d_k, dv = c->d->d_v, nv = c->d->n_v_head, kh = m % c->d->n_k_head;
    float *S = c->state + (int64_t)m * dv * dk;
    const int isa = gdn_rule_isa(dk);
    if (isa == QUANT_ISA_AVX512) {
        gdn_recurrent_head_avx512(S, dk, dv, c->n_tokens, c->q + (int64_t)kh * dk, c->k + (int64_t)kh * dk,
                                  c->qk_stride, c->v + (int64_t)m * dv, c->v_stride, c->g + m, c->beta + m, nv,
                                  c->o + (int64_t)m * dv, c->o_stride);
        return;
    }
    if (isa == QUANT_ISA_AVX2) {
        gdn_recurrent_head_avx2(S, dk, dv, c->n_tokens, c->q + (int64_t)kh * dk, c->k + (int64_t)kh * dk,
                                c->qk_stride, c->v + (int64_t)m * dv, c->v_stride, c->g + m, c->beta + m, nv,
                                c->o + (int64_t)m * dv, c->o_stride);
        return;
    }
    for (int t = 0; t < c->n_tokens; t++) {
        const float *q = c->q + (int64_t)t * c->qk_stride + (int64_t)kh * dk;
        const float *k = c->k + (int64_t)t * c->qk_stride + (int64_t)kh * dk;
        const float *v = c->v + (int64_t)t * c->v_stride + (int64_t)m * dv;
        float *o = c->o + (int64_t)t * c->o_stride + (int64_t)m * dv;
        const float decay = expf(c->g[(int64_t)t * nv + m]), b = c->beta[(int64_t)t * nv + m];
        for (int j = 0; j < dv; j++) {
            float *row = S + (int64_t)j * dk;
            gdn_scale(row, decay, dk);
            const float delta = b * (v[j] - gdn_dot(row, k, dk));
            gdn_axpy(row, delta, k, dk);
            o[j] = gdn_dot(row, q, dk);
        }
    }
}

void gdn_delta_rule_recurrent(const struct gdn_dims *d, int n_tokens, const float *q, const float *k,
                              int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                              const float *beta, float *state, float *o, int64_t o_stride,
                              struct threadpool *tp) {
    VLLMC_ASSERT(d->n_k_head > 0 && d->n_v_head % d->n_k_head == 0);
    struct gdn_rule_ctx c = {d, n_tokens, 0, q, k, v, g, beta, qk_stride, v_stride, o_stride, state, o, NULL, 0};
    gdn_parallel_for(tp, gdn_recurrent_task, &c, d->n_v_head);
}

int64_t gdn_chunked_scratch_floats(const struct gdn_dims *d, int chunk) {
    const int64_t C = chunk;
    /* gamma (double, 2 floats each), exp(gamma), A, QK, U/Vt, W */
    const int64_t n = 2 * C + C + 2 * C * C + C * d->d_v + C * d->d_k;
    return (n + 15) & ~(int64_t)15; /* keeps each thread's part 64-byte aligned relative to the base */
}

/* One value head, chunk by chunk. Within a chunk of n tokens, with G the cumulative log-decay:
 *   A[t][s]  = beta_t exp(G_t - G_s) k_t.k_s        (s < t)
 *   (I + A) U = diag(beta) V,   (I + A) W = diag(beta exp(G)) K      (forward substitution)
 *   Vt_t     = U_t - S0^T W_t
 *   o_t      = exp(G_t) S0^T q_t + sum_{s<=t} exp(G_t - G_s) (q_t.k_s) Vt_s
 *   S_n      = exp(G_n) S0 + sum_s exp(G_n - G_s) k_s Vt_s^T
 * Only non-positive differences of G are exponentiated. */
static void gdn_chunked_task(void *vctx, int m, int i_thread) {
    const struct gdn_rule_ctx *c = vctx;
    const int dk = c->d->d_k, dv = c->d->d_v, nv = c->d->n_v_head, kh = m % c->d->n_k_head;
    const int C = c->chunk;
    float *sc = c->scratch + (int64_t)i_thread * c->scratch_per_thread;
    double *G = (double *)(void *)sc;       /* [C] */
    float *eG = sc + 2 * C;                 /* [C] exp(G_t) */
    float *A = eG + C;                      /* [C][C] */
    float *QK = A + (int64_t)C * C;         /* [C][C] */
    float *U = QK + (int64_t)C * C;         /* [C][dv], becomes Vt */
    float *W = U + (int64_t)C * dv;         /* [C][dk] */
    float *S = c->state + (int64_t)m * dv * dk;

    for (int c0 = 0; c0 < c->n_tokens; c0 += C) {
        const int n = VLLMC_MIN(C, c->n_tokens - c0);
#define GDN_Q(t) (c->q + (int64_t)(c0 + (t)) * c->qk_stride + (int64_t)kh * dk)
#define GDN_K(t) (c->k + (int64_t)(c0 + (t)) * c->qk_stride + (int64_t)kh * dk)
#define GDN_V(t) (c->v + (int64_t)(c0 + (t)) * c->v_stride + (int64_t)m * dv)
#define GDN_O(t) (c->o + (int64_t)(c0 + (t)) * c->o_stride + (int64_t)m * dv)
        double acc = 0.0;
        for (int t = 0; t < n; t++) {
            acc += c->g[(int64_t)(c0 + t) * nv + m];
            G[t] = acc;
            eG[t] = (float)exp(acc);
        }
        /* A and QK, lower triangle only (the mask comes before exp). */
        for (int t = 0; t < n; t++) {
            const float *kt = GDN_K(t), *qt = GDN_Q(t);
            const float bt = c->beta[(int64_t)(c0 + t) * nv + m];
            for (int s = 0; s <= t; s++) {
                const float *ks = GDN_K(s);
                const float dec = (float)exp(G[t] - G[s]);
                if (s < t) A[(int64_t)t * C + s] = bt * dec * gdn_dot(kt, ks, dk);
                QK[(int64_t)t * C + s] = dec * gdn_dot(qt, ks, dk);
            }
        }
        /* Forward substitution for U and W. */
        for (int t = 0; t < n; t++) {
            const float bt = c->beta[(int64_t)(c0 + t) * nv + m];
            float *u = U + (int64_t)t * dv, *w = W + (int64_t)t * dk;
            const float *vt = GDN_V(t), *kt = GDN_K(t);
            const float bw = bt * eG[t];
            for (int j = 0; j < dv; j++) u[j] = bt * vt[j];
            for (int i = 0; i < dk; i++) w[i] = bw * kt[i];
            for (int s = 0; s < t; s++) {
                const float a = A[(int64_t)t * C + s];
                gdn_axpy(u, -a, U + (int64_t)s * dv, dv);
                gdn_axpy(w, -a, W + (int64_t)s * dk, dk);
            }
        }
        /* Reads of the incoming state: Vt = U - S0^T W, o = exp(G) S0^T q. */
        for (int j = 0; j < dv; j++) {
            const float *row = S + (int64_t)j * dk;
            for (int t = 0; t < n; t++) {
                U[(int64_t)t * dv + j] -= gdn_dot(row, W + (int64_t)t * dk, dk);
                GDN_O(t)[j] = eG[t] * gdn_dot(row, GDN_Q(t), dk);
            }
        }
        /* Intra-chunk part of the output. */
        for (int t = 0; t < n; t++) {
            float *ot = GDN_O(t);
            for (int s = 0; s <= t; s++) gdn_axpy(ot, QK[(int64_t)t * C + s], U + (int64_t)s * dv, dv);
        }
        /* State carry. */
        const float eGn = eG[n - 1];
        for (int t = 0; t < n; t++) A[t] = (float)exp(G[n - 1] - G[t]); /* reuse row 0 of A */
        for (int j = 0; j < dv; j++) {
            float *row = S + (int64_t)j * dk;
            gdn_scale(row, eGn, dk);
            for (int t = 0; t < n; t++) gdn_axpy(row, A[t] * U[(int64_t)t * dv + j], GDN_K(t), dk);
        }
#undef GDN_Q
#undef GDN_K
#undef GDN_V
#undef GDN_O
    }
}

void gdn_delta_rule_chunked(const struct gdn_dims *d, int n_tokens, int chunk, const float *q,
                            const float *k, int64_t qk_stride, const float *v, int64_t v_stride,
                            const float *g, const float *beta, float *state, float *o, int64_t o_stride,
                            float *scratch, struct threadpool *tp) {
    VLLMC_ASSERT(d->n_k_head > 0 && d->n_v_head % d->n_k_head == 0 && chunk > 0);
    struct gdn_rule_ctx c = {d, n_tokens, chunk, q, k, v, g, beta, qk_stride, v_stride, o_stride, state, o,
                             scratch, gdn_chunked_scratch_floats(d, chunk)};
    gdn_parallel_for(tp, gdn_chunked_task, &c, d->n_v_head);
}

/* ---- the backend op (struct backend_ops.gdn) ---- */

struct gdn_fused_ctx {
    const struct gdn_rule_ctx *rule;
    threadpool_fn rule_task; /* gdn_recurrent_task or gdn_chunked_task */
    const float *z;          /* row t of the run at z + t * z_stride */
    int64_t z_stride;
    const float *norm_w;
    float eps;
    uint16_t *state_bf16;    /* or NULL: the slot's bf16 state, which rule->state (f32 scratch) holds for the run */
};

void gdn_bf16_widen(float *dst, const uint16_t *src, int64_t n) {
    const int isa = quant_isa_active();
    if (isa == QUANT_ISA_AVX512) gdn_bf16_widen_avx512(dst, src, n);
    else if (isa >= QUANT_ISA_AVX2) gdn_bf16_widen_avx2(dst, src, n);
    else for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(src[i]);
}
void gdn_bf16_narrow(uint16_t *dst, const float *src, int64_t n) {
    const int isa = quant_isa_active();
    if (isa == QUANT_ISA_AVX512) gdn_bf16_narrow_avx512(dst, src, n);
    else if (isa >= QUANT_ISA_AVX2) gdn_bf16_narrow_avx2(dst, src, n);
    else for (int64_t i = 0; i < n; i++) dst[i] = fp32_to_bf16(src[i]);
}

/* Value head m: the delta rule over the run, then the gated RMSNorm of that head's outputs. A bf16 state is
 * widened into the f32 scratch before the run and rounded back (nearest even) after it. */
static void gdn_rule_norm_task(void *vctx, int m, int i_thread) {
    const struct gdn_fused_ctx *f = vctx;
    const struct gdn_rule_ctx *c = f->rule;
    const int64_t hs = (int64_t)c->d->d_v * c->d->d_k;
    const int dk = c->d->d_k, isa = gdn_rule_isa(dk);
    /* a decode token on the vector recurrence (the ISA gdn_recurrent_task would take): each row widened and rounded on
     * the stack (the same bits) */
    if (f->state_bf16 && c->n_tokens == 1 && f->rule_task == gdn_recurrent_task && dk <= GDN_BF16_MAX_DK && isa != QUANT_ISA_SCALAR) {
        const int kh = m % c->d->n_k_head, dv = c->d->d_v;
        void (*fn)(uint16_t *, int, int, const float *, const float *, const float *, float, float, float *) =
            isa == QUANT_ISA_AVX512 ? gdn_recurrent_head_bf16_avx512 : gdn_recurrent_head_bf16_avx2;
        fn(f->state_bf16 + m * hs, dk, dv, c->q + (int64_t)kh * dk, c->k + (int64_t)kh * dk, c->v + (int64_t)m * dv, c->g[m],
           c->beta[m], c->o + (int64_t)m * dv);
    } else {
        if (f->state_bf16) gdn_bf16_widen(c->state + m * hs, f->state_bf16 + m * hs, hs);
        f->rule_task((void *)c, m, i_thread);
        if (f->state_bf16) gdn_bf16_narrow(f->state_bf16 + m * hs, c->state + m * hs, hs);
    }
    const int dv = c->d->d_v;
    for (int t = 0; t < c->n_tokens; t++) {
        float *o = c->o + (int64_t)t * c->o_stride + (int64_t)m * dv;
        gdn_gated_rmsnorm_head(o, o, f->z + (int64_t)t * f->z_stride + (int64_t)m * dv, dv, f->norm_w, f->eps);
    }
}

#define GDN_CHUNK 64          /* chunk length of the chunked rule */
#define GDN_CHUNKED_MIN 32    /* runs at least this long may use the chunked rule (fast backend only) */

int64_t bk_gdn_work_floats(const struct bk_gdn_params *p, int64_t max_tokens, int n_threads) {
    const struct gdn_dims d = {p->n_k_head, p->n_v_head, p->d_k, p->d_v};
    const int64_t conv_dim = 2 * (int64_t)p->n_k_head * p->d_k + (int64_t)p->n_v_head * p->d_v;
    /* conv outputs, beta, g; the chunked rule's scratch a thread; a run's f32 state where the cache is bf16 */
    return max_tokens * conv_dim + 2 * max_tokens * p->n_v_head +
           (int64_t)VLLMC_MAX(n_threads, 1) * gdn_chunked_scratch_floats(&d, GDN_CHUNK) +
           (int64_t)p->n_v_head * p->d_v * p->d_k + 64;
}

vllmc_status cpu_gdn(struct backend *be, struct bk_rs_cache *rs, const struct bk_gdn_params *p,
                     const struct bk_gdn_weights *w, const float *in, int64_t ld_in, float *work,
                     struct bk_act *out) {
    struct cpu_backend *c = cpu_be(be);
    const int64_t T = c->n_tokens;
    if (p->n_k_head <= 0 || p->n_v_head <= 0 || p->n_v_head % p->n_k_head || p->d_k <= 0 || p->d_v <= 0 ||
        p->d_conv < 2 || p->d_conv > 8)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: bad dims (k heads %d, v heads %d, d_k %d, d_v %d, conv %d)",
                            p->n_k_head, p->n_v_head, p->d_k, p->d_v, p->d_conv);
    const struct gdn_dims d = {p->n_k_head, p->n_v_head, p->d_k, p->d_v};
    const int64_t key_dim = (int64_t)p->n_k_head * p->d_k, value_dim = (int64_t)p->n_v_head * p->d_v;
    const int64_t conv_dim = 2 * key_dim + value_dim, nv = p->n_v_head;
    if (!rs || p->rs_layer < 0 || p->rs_layer >= rs->n_layers)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: recurrent layer %d not in the state cache", p->rs_layer);
    if (rs->conv_floats != conv_dim * (p->d_conv - 1) || rs->ssm_floats != value_dim * p->d_k)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: state cache slot sizes do not match the layer");
    if (out->n_cols != value_dim || out->max_rows < T || ld_in < conv_dim + value_dim + 2 * nv)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: output or input rows too small");
    float *conv_out = work, *beta = conv_out + T * conv_dim, *g = beta + T * nv;
    float *scratch = g + T * nv;
    scratch += (16 - ((uintptr_t)scratch / sizeof(float)) % 16) % 16; /* 64-byte aligned */
    float *state32 = scratch + (int64_t)VLLMC_MAX(be->n_threads, 1) * gdn_chunked_scratch_floats(&d, GDN_CHUNK);
    struct threadpool *tp = c->tp;
    for (int64_t t0 = 0; t0 < T;) {
        const int32_t s = c->seq_idx[t0];
        int64_t t1 = t0 + 1;
        while (t1 < T && c->seq_idx[t1] == s) t1++;
        const int32_t slot = c->seqs[s].state_slot;
        if (slot < 0 || slot >= rs->n_slots)
            return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: sequence %d has state slot %d of %d", s, slot, rs->n_slots);
        float *cst = rs->conv[p->rs_layer] + (int64_t)slot * rs->conv_floats;
        uint8_t *sslot = (uint8_t *)rs->ssm[p->rs_layer] + (size_t)slot * bk_rs_ssm_bytes(rs);
        float *sst = rs->ssm_bf16 ? state32 : (float *)sslot; /* bf16: the run's f32 state (gdn_rule_norm_task) */
        if (c->pos[t0] == 0) { /* a new sequence starts from zero state */
            memset(cst, 0, sizeof(float) * (size_t)rs->conv_floats);
            memset(sslot, 0, bk_rs_ssm_bytes(rs));
        }
        const int n = (int)(t1 - t0);
        const float *x = in + t0 * ld_in;
        float *y = conv_out + t0 * conv_dim;
        gdn_conv1d_silu(y, conv_dim, x, ld_in, n, (int)conv_dim, w->conv, p->d_conv, cst, tp);
        gdn_qk_norm(y, conv_dim, n, &d, p->eps);
        gdn_gates(beta + t0 * nv, g + t0 * nv, x + conv_dim + value_dim, x + conv_dim + value_dim + nv, ld_in, n,
                  (int)nv, w->dt_bias, w->ssm_a);
        float *o = out->x + t0 * value_dim;
        /* Long runs take the chunked rule, except where a SIMD recurrence runs: on a CPU the state of a
         * head stays in L1/L2 and the recurrence does fewer flops, so it is faster there (BENCHMARKS.md). */
        const bool simd_rule = gdn_rule_isa((int)p->d_k) != QUANT_ISA_SCALAR; /* the recurrence's own choice */
        const bool chunked = !c->reference && n >= GDN_CHUNKED_MIN && !simd_rule;
        /* The rule and then the gated norm of the same head in one task: the norm runs on every thread. */
        struct gdn_rule_ctx rc = {&d, n, GDN_CHUNK, y, y + key_dim, y + 2 * key_dim, g + t0 * nv, beta + t0 * nv,
                                  conv_dim, conv_dim, value_dim, sst, o, scratch,
                                  chunked ? gdn_chunked_scratch_floats(&d, GDN_CHUNK) : 0};
        struct gdn_fused_ctx fc = {&rc, chunked ? gdn_chunked_task : gdn_recurrent_task, x + conv_dim, ld_in, w->norm,
                                   p->eps, rs->ssm_bf16 ? (uint16_t *)sslot : NULL};
        gdn_parallel_for(tp, gdn_rule_norm_task, &fc, d.n_v_head);
        t0 = t1;
    }
    out->n_rows = T;
    return be->ops->quantize(be, out);
}

vllmc_status cpu_sigmoid_mul(struct backend *be, float *x, int64_t ld_x, const float *gate, int64_t ld_gate,
                             int64_t n_rows, int64_t n_cols) {
    (void)be;
    if (n_rows < 0 || n_cols < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "sigmoid_mul: %lld x %lld", (long long)n_rows, (long long)n_cols);
    if (!ld_x) ld_x = n_cols;
    if (!ld_gate) ld_gate = n_cols;
    for (int64_t r = 0; r < n_rows; r++) {
        float *xr = x + r * ld_x;
        const float *gr = gate + r * ld_gate;
        for (int64_t c = 0; c < n_cols; c++) xr[c] *= 1.0f / (1.0f + expf(-gr[c]));
    }
    return VLLMC_OK;
}
