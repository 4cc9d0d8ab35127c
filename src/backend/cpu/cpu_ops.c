/* Fast CPU ops: the reference formulas, split over the thread pool by output row (so the thread
 * count never changes a bit), with the quantized matmul on quant_gemv / quant_gemm (SIMD, each
 * output bit-identical to vec_dot_ref). Several matmuls sharing one activation run as one parallel
 * job, so q/k/v (or gate/up) cost one fork-join and the activation is quantized once. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/matmul_batch.h"
#include "quant/blocks.h"
#include "quant/gemv.h"
#include "quant/quant.h"

#define CPU_MATMUL_MAX_OUT 16
/* From this many activation rows, Q4_0/Q5_0/Q8_0 weights take the batched kernels of matmul_batch.h
 * (their per-row unpack costs more than it saves for fewer rows; -D to compare). */
#ifndef CPU_MATMUL_BATCH_MIN_ROWS
#define CPU_MATMUL_BATCH_MIN_ROWS 4
#endif

static int cpu_threads(const struct cpu_backend *c) { return c->tp ? threadpool_n_threads(c->tp) : 1; }

/* ---- row-parallel helpers ---- */

struct rows_job {
    int64_t n_rows, per_task;
    void (*fn)(void *ctx, int64_t r0, int64_t r1);
    void *ctx;
};

static void rows_task(void *p, int i_task, int i_thread) {
    (void)i_thread;
    struct rows_job *j = p;
    int64_t r0 = (int64_t)i_task * j->per_task, r1 = VLLMC_MIN(j->n_rows, r0 + j->per_task);
    if (r0 < r1) j->fn(j->ctx, r0, r1);
}

/* Run fn over [0, n_rows) in contiguous ranges; rows of at most min_work_rows run inline. */
static void cpu_parallel_rows(struct cpu_backend *c, int64_t n_rows, int64_t min_rows_per_task,
                              void (*fn)(void *, int64_t, int64_t), void *ctx) {
    int nt = cpu_threads(c);
    if (n_rows <= 0) return;
    if (nt == 1 || n_rows <= min_rows_per_task) { fn(ctx, 0, n_rows); return; }
    int64_t per = CEIL_DIV(n_rows, nt);
    if (per < min_rows_per_task) per = min_rows_per_task;
    struct rows_job j = {n_rows, per, fn, ctx};
    threadpool_run(c->tp, rows_task, &j, (int)CEIL_DIV(n_rows, per));
}

/* ---- embed ---- */

struct embed_ctx { const struct cpu_backend *c; const struct bk_tensor *table; float *out; };

static void embed_rows(void *p, int64_t r0, int64_t r1) {
    struct embed_ctx *e = p;
    for (int64_t t = r0; t < r1; t++)
        dequantize_row(e->table->type, (const char *)e->table->data + (uint64_t)e->c->token_ids[t] * e->table->row_size_bytes,
                       e->out + t * e->table->ne[0], e->table->ne[0]);
}

vllmc_status cpu_fast_embed(struct backend *be, const struct bk_tensor *table, float *out) {
    struct cpu_backend *c = cpu_be(be);
    if (!c->n_tokens) return vllmc_errorf(VLLMC_ERR_INVALID, "embed: no batch set");
    for (int32_t t = 0; t < c->n_tokens; t++)
        if (c->token_ids[t] < 0 || c->token_ids[t] >= table->ne[1])
            return vllmc_errorf(VLLMC_ERR_INVALID, "token id %d outside the vocabulary of %lld", c->token_ids[t],
                                (long long)table->ne[1]);
    struct embed_ctx e = {c, table, out};
    cpu_parallel_rows(c, c->n_tokens, 8, embed_rows, &e);
    return VLLMC_OK;
}

/* ---- rmsnorm (+ quantize) ---- */

struct norm_ctx {
    const float *x; int64_t ld_x; const float *w; float eps; int64_t n_cols; float *out; int64_t ld_out;
    struct bk_act *act;
};

static void norm_rows(void *p, int64_t r0, int64_t r1) {
    struct norm_ctx *n = p;
    for (int64_t r = r0; r < r1; r++) cpu_rmsnorm_row(n->x + r * n->ld_x, n->w, n->eps, n->n_cols, n->out + r * n->ld_out);
    if (n->act) cpu_quantize_rows(n->act, r0, r1);
}

vllmc_status cpu_fast_rmsnorm(struct backend *be, const float *x, int64_t ld_x, const float *w, float eps,
                              int64_t n_rows, int64_t n_cols, float *out, int64_t ld_out) {
    if (n_cols <= 0 || n_rows < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm: bad shape");
    struct norm_ctx n = {x, ld_x ? ld_x : n_cols, w, eps, n_cols, out, ld_out ? ld_out : n_cols, NULL};
    cpu_parallel_rows(cpu_be(be), n_rows, CEIL_DIV(4096, n_cols), norm_rows, &n);
    return VLLMC_OK;
}

vllmc_status cpu_fast_rmsnorm_quantize(struct backend *be, const float *x, const float *w, float eps, int64_t n_rows,
                                       struct bk_act *out) {
    if (n_rows < 0 || n_rows > out->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm_quantize: %lld rows", (long long)n_rows);
    struct norm_ctx n = {x, out->n_cols, w, eps, out->n_cols, out->x, out->n_cols, out};
    out->n_rows = n_rows;
    cpu_parallel_rows(cpu_be(be), n_rows, 1, norm_rows, &n);
    return VLLMC_OK;
}

static void quant_rows(void *p, int64_t r0, int64_t r1) { cpu_quantize_rows(p, r0, r1); }

vllmc_status cpu_fast_quantize(struct backend *be, struct bk_act *act) {
    if (act->n_rows < 0 || act->n_rows > act->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "quantize: bad rows");
    cpu_parallel_rows(cpu_be(be), act->n_rows, 1, quant_rows, act);
    return VLLMC_OK;
}

/* ---- matmul ---- */

struct matmul_ctx {
    const struct bk_act *act;
    int n_out;
    const struct bk_matmul_out *outs;
    int64_t chunk;                               /* weight rows per chunk */
    int64_t chunk0[CPU_MATMUL_MAX_OUT + 1];      /* first chunk of each output */
    const void *a[CPU_MATMUL_MAX_OUT];
    uint64_t arb[CPU_MATMUL_MAX_OUT];
    bool batched[CPU_MATMUL_MAX_OUT];            /* output i runs on cpu_mmb_gemm with prep */
    const void *prep;                            /* the Q8_0 activation prepared by cpu_mmb_prepare */
    _Atomic int64_t next;                        /* next chunk to take */
};

static void matmul_chunk(struct matmul_ctx *m, int64_t ic) {
    int i = 0;
    while (i + 1 < m->n_out && ic >= m->chunk0[i + 1]) i++;
    const struct bk_matmul_out *o = &m->outs[i];
    const struct bk_tensor *w = o->w;
    const int64_t r0 = (ic - m->chunk0[i]) * m->chunk, r1 = VLLMC_MIN(w->ne[1], r0 + m->chunk);
    const int64_t ld = o->ld_y ? o->ld_y : w->ne[1];
    const int64_t n_act = m->act->n_rows;
    if (m->batched[i])
        cpu_mmb_gemm(w->type, w->ne[0], w->data, w->row_size_bytes, r0, r1 - r0, m->prep, n_act, o->y + r0, ld);
    else if (n_act == 1)
        quant_gemv(w->type, w->ne[0], w->data, w->row_size_bytes, r0, r1 - r0, m->a[i], o->y + r0);
    else
        quant_gemm(w->type, w->ne[0], w->data, w->row_size_bytes, r0, r1 - r0, m->a[i], m->arb[i], n_act, o->y + r0, ld);
    if (o->bias)
        for (int64_t r = 0; r < n_act; r++)
            for (int64_t k = r0; k < r1; k++) o->y[r * ld + k] += o->bias[k];
}

/* One task per thread; each takes chunks from a shared counter until none are left, so a thread
 * that the OS delays does not hold the others up. Every output row is computed whole by one
 * gemv/gemm call, so which thread takes which chunk never changes a bit. */
static void matmul_worker(void *p, int i_task, int i_thread) {
    (void)i_task;
    (void)i_thread;
    struct matmul_ctx *m = p;
    const int64_t n = m->chunk0[m->n_out];
    for (int64_t ic; (ic = atomic_fetch_add_explicit(&m->next, 1, memory_order_relaxed)) < n;) matmul_chunk(m, ic);
}

vllmc_status cpu_fast_matmul(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs) {
    struct cpu_backend *c = cpu_be(be);
    if (n_out <= 0 || n_out > CPU_MATMUL_MAX_OUT) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: %d outputs", n_out);
    struct matmul_ctx m = {.act = act, .n_out = n_out, .outs = outs};
    int64_t total_rows = 0;
    for (int i = 0; i < n_out; i++) {
        vllmc_status st = cpu_check_act_for_weight(act, outs[i].w);
        if (st) return st;
        int f = bk_act_fmt_for_weight(outs[i].w->type);
        m.a[i] = act->q[f];
        m.arb[i] = bk_act_row_bytes(f, act->n_cols);
        total_rows += outs[i].w->ne[1];
    }
    if (act->n_rows == 0) return VLLMC_OK;
    void *prep = NULL;
    if (act->n_rows >= CPU_MATMUL_BATCH_MIN_ROWS) {
        bool any = false;
        for (int i = 0; i < n_out; i++) any |= cpu_mmb_supported(outs[i].w->type);
        const size_t bytes = cpu_mmb_prep_row_bytes(act->n_cols) * (size_t)act->n_rows;
        if (any && (prep = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) { /* no memory: the plain kernels */
            cpu_mmb_prepare(act->n_cols, act->q[BK_ACT_Q8_0], bk_act_row_bytes(BK_ACT_Q8_0, act->n_cols), act->n_rows, prep);
            m.prep = prep;
            for (int i = 0; i < n_out; i++) m.batched[i] = cpu_mmb_supported(outs[i].w->type);
        }
    }
    /* Enough chunks to balance the threads, few enough that each streams a useful run of rows;
     * multiples of 16 rows. */
    const int nt = cpu_threads(c);
    int64_t chunk = CEIL_DIV(total_rows, (int64_t)nt * 16);
    chunk = VLLMC_MAX(16, (chunk + 15) & ~(int64_t)15);
    m.chunk = chunk;
    int64_t n_chunks = 0;
    for (int i = 0; i < n_out; i++) {
        m.chunk0[i] = n_chunks;
        n_chunks += CEIL_DIV(outs[i].w->ne[1], chunk);
    }
    m.chunk0[n_out] = n_chunks;
    atomic_init(&m.next, 0);
    if (nt == 1) matmul_worker(&m, 0, 0);
    else threadpool_run(c->tp, matmul_worker, &m, nt);
    free(prep);
    return VLLMC_OK;
}

/* ---- add ---- */

struct add_ctx { float *y; const float *x; int64_t n_cols; };

static void add_rows(void *p, int64_t r0, int64_t r1) {
    struct add_ctx *a = p;
    for (int64_t i = r0 * a->n_cols; i < r1 * a->n_cols; i++) a->y[i] += a->x[i];
}

vllmc_status cpu_fast_add(struct backend *be, float *y, const float *x, int64_t n_rows, int64_t n_cols) {
    struct add_ctx a = {y, x, n_cols};
    cpu_parallel_rows(cpu_be(be), n_rows, CEIL_DIV(16384, n_cols), add_rows, &a);
    return VLLMC_OK;
}

/* ---- rope ---- */

struct rope_ctx { const struct cpu_backend *c; float *x; int64_t ld; int32_t n_head, head_dim; const struct bk_rope_params *p; };

static void rope_rows(void *p, int64_t r0, int64_t r1) {
    struct rope_ctx *r = p;
    for (int64_t t = r0; t < r1; t++)
        for (int32_t h = 0; h < r->n_head; h++) cpu_rope_head(r->x + t * r->ld + (int64_t)h * r->head_dim, r->c->pos[t], r->p);
}

vllmc_status cpu_fast_rope(struct backend *be, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                           const struct bk_rope_params *p) {
    struct cpu_backend *c = cpu_be(be);
    if (!c->n_tokens) return vllmc_errorf(VLLMC_ERR_INVALID, "rope: no batch set");
    if (n_head <= 0 || head_dim <= 0 || p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 ||
        (p->mode != BK_ROPE_NORM && p->mode != BK_ROPE_NEOX))
        return vllmc_errorf(VLLMC_ERR_INVALID, "rope: n_rot %d, head_dim %d, mode %d", p->n_rot, head_dim, (int)p->mode);
    struct rope_ctx r = {c, x, ld ? ld : (int64_t)n_head * head_dim, n_head, head_dim, p};
    cpu_parallel_rows(c, c->n_tokens, 4, rope_rows, &r);
    return VLLMC_OK;
}

/* ---- attention ---- */

struct attn_ctx {
    struct cpu_backend *c; struct bk_kv_cache *kv; const struct bk_attn_params *p; const struct cpu_attn_kernels *kn;
    const float *q; int64_t ld_q; const float *k; int64_t ld_k; const float *v; int64_t ld_v; float *out;
};

static void kv_store_rows(void *p, int64_t r0, int64_t r1) {
    struct attn_ctx *a = p;
    cpu_kv_store(a->c, a->kv, a->p, r0, r1, a->k, a->ld_k, a->v, a->ld_v);
}

/* One (row, query head) per task, with the SIMD inner kernels (bit-identical to the scalar ones). */
static void attn_task(void *p, int i_task, int i_thread) {
    struct attn_ctx *a = p;
    const int32_t t = i_task / a->p->n_head, j = i_task % a->p->n_head, hd = a->p->head_dim;
    float *scratch = a->c->attn_scratch + (int64_t)i_thread * a->c->attn_scratch_per_thread;
    cpu_attn_row_head(a->c, a->kv, a->p, t, j, a->q + t * a->ld_q + (int64_t)j * hd,
                      a->out + ((int64_t)t * a->p->n_head + j) * hd, scratch, a->kn);
}

vllmc_status cpu_fast_attention(struct backend *be, struct bk_kv_cache *kv, const struct bk_attn_params *p,
                                const float *q, int64_t ld_q, const float *k, int64_t ld_k, const float *v,
                                int64_t ld_v, float *out) {
    struct cpu_backend *c = cpu_be(be);
    vllmc_status st = cpu_attn_check(c, kv, p);
    if (st) return st;
    const int32_t hd = p->head_dim;
    int32_t max_pos = 0;
    for (int32_t t = 0; t < c->n_tokens; t++) max_pos = VLLMC_MAX(max_pos, c->pos[t]);
    if ((st = cpu_ensure_attn_scratch(c, max_pos + 1, hd))) return st;
    const struct cpu_attn_kernels *kn = cpu_attn_kernels_avx2(hd);
    struct attn_ctx a = {c, kv, p, kn ? kn : &cpu_attn_kernels_scalar, q, ld_q ? ld_q : (int64_t)p->n_head * hd, k,
                         ld_k ? ld_k : (int64_t)p->n_kv_head * hd, v, ld_v ? ld_v : (int64_t)p->n_kv_head * hd, out};
    cpu_parallel_rows(c, c->n_tokens, 16, kv_store_rows, &a);
    threadpool_run(c->tp, attn_task, &a, c->n_tokens * p->n_head);
    return VLLMC_OK;
}

/* ---- swiglu ---- */

struct swiglu_ctx { const float *gate, *up; int64_t ld; struct bk_act *out; };

static void swiglu_rows(void *p, int64_t r0, int64_t r1) {
    struct swiglu_ctx *s = p;
    const int64_t n = s->out->n_cols;
    for (int64_t r = r0; r < r1; r++) {
        const float *g = s->gate + r * s->ld, *u = s->up + r * s->ld;
        float *o = s->out->x + r * n;
        for (int64_t i = 0; i < n; i++) o[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
    }
    cpu_quantize_rows(s->out, r0, r1);
}

vllmc_status cpu_fast_swiglu_quantize(struct backend *be, const float *gate, const float *up, int64_t ld,
                                      int64_t n_rows, struct bk_act *out) {
    if (n_rows < 0 || n_rows > out->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "swiglu: %lld rows", (long long)n_rows);
    struct swiglu_ctx s = {gate, up, ld ? ld : out->n_cols, out};
    out->n_rows = n_rows;
    cpu_parallel_rows(cpu_be(be), n_rows, 1, swiglu_rows, &s);
    return VLLMC_OK;
}

/* ---- logits ---- */

vllmc_status cpu_fast_logits(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *logits,
                             int32_t *argmax) {
    struct bk_matmul_out o = {.w = w, .y = logits};
    vllmc_status st = cpu_fast_matmul(be, act, 1, &o);
    if (st) return st;
    if (argmax)
        for (int64_t r = 0; r < act->n_rows; r++) {
            const float *l = logits + r * w->ne[1];
            int64_t best = 0;
            for (int64_t i = 1; i < w->ne[1]; i++)
                if (l[i] > l[best]) best = i;
            argmax[r] = (int32_t)best;
        }
    return VLLMC_OK;
}
