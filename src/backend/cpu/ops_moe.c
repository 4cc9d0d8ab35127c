/* Mixture-of-experts FFN on the CPU (see ops_moe.h). Rows are grouped by selected expert; each group's
 * activation rows are gathered once (already quantized: the input act carries every format the experts
 * read), then gate/up, SwiGLU + quantize, and down run as jobs over (group, block of output rows) on the
 * thread pool. Every output element is computed by exactly one job and the final mix runs in a fixed
 * order, so results do not depend on the number of threads. */
#include "backend/cpu/ops_moe.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/ops_gdn.h"
#include "quant/gemv.h"
#include "quant/quant.h"

#define MOE_ROWS_PER_JOB 64

/* Scratch kept from call to call: one block that grows to the largest request and is reused, so steady
 * decode and prefill allocate (and page-fault) nothing. One op at a time holds it; a concurrent call (a
 * second backend on another thread) takes a private block instead. The block stays reachable until exit. */
static pthread_mutex_t g_moe_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *g_moe_mem;
static size_t g_moe_mem_cap;
static bool g_moe_mem_busy;

static uint8_t *moe_scratch_get(size_t bytes) {
    uint8_t *p = NULL;
    pthread_mutex_lock(&g_moe_mem_lock);
    if (!g_moe_mem_busy) {
        if (g_moe_mem_cap < bytes) {
            vllmc_free_aligned(g_moe_mem);
            g_moe_mem_cap = 0;
            g_moe_mem = vllmc_malloc_aligned(bytes);
            if (g_moe_mem) g_moe_mem_cap = bytes;
        }
        if (g_moe_mem) {
            g_moe_mem_busy = true;
            p = g_moe_mem;
        }
    }
    pthread_mutex_unlock(&g_moe_mem_lock);
    return p ? p : vllmc_malloc_aligned(bytes);
}

static void moe_scratch_put(uint8_t *p) {
    pthread_mutex_lock(&g_moe_mem_lock);
    const bool shared = p == g_moe_mem && g_moe_mem_busy;
    if (shared) g_moe_mem_busy = false;
    pthread_mutex_unlock(&g_moe_mem_lock);
    if (!shared) vllmc_free_aligned(p);
}

void moe_route(const float *logits, int n_expert, int k, bool norm, int32_t *ids, float *weights) {
    float mx = -INFINITY;
    for (int e = 0; e < n_expert; e++) mx = fmaxf(mx, logits[e]);
    double sum = 0.0;
    /* selection on the unnormalized exps is the same as on the probabilities */
    for (int j = 0; j < k; j++) { ids[j] = -1; weights[j] = -INFINITY; }
    for (int e = 0; e < n_expert; e++) sum += expf(logits[e] - mx);
    for (int e = 0; e < n_expert; e++) {
        const float pe = (float)(expf(logits[e] - mx) / sum);
        /* insert into the descending top-k list; equal values keep the earlier (lower) id first */
        if (pe <= weights[k - 1] && ids[k - 1] >= 0) continue;
        int j = k - 1;
        while (j > 0 && (ids[j - 1] < 0 || pe > weights[j - 1])) {
            ids[j] = ids[j - 1];
            weights[j] = weights[j - 1];
            j--;
        }
        ids[j] = e;
        weights[j] = pe;
    }
    if (norm) {
        float s = 0.0f;
        for (int j = 0; j < k; j++) s += weights[j];
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int j = 0; j < k; j++) weights[j] /= s;
    }
}

/* One group of rows that go through the same FFN (one routed expert, or the shared expert). */
struct moe_group {
    const uint8_t *wg, *wu, *wd;     /* matrices of this expert */
    uint32_t tg, tu, td;             /* their types */
    uint64_t rbg, rbu, rbd;          /* weight row bytes */
    int64_t n_ff;
    int64_t n_act;                   /* rows in the group */
    const uint8_t *act_g, *act_u;    /* activation rows for gate / up */
    uint64_t arb_g, arb_u;           /* their row bytes */
    float *G, *U;                    /* [n_act][n_ff]; G becomes silu(G)*U */
    uint8_t *hq;                     /* [n_act][arb_d] quantized hidden rows */
    uint64_t arb_d;
    float *Y;                        /* [n_act][n_embd] */
};

struct moe_job { int32_t group, r0, r1; };

struct moe_ctx {
    struct moe_group *groups;
    struct moe_job *jobs;
    int64_t n_embd;
};

static void moe_gate_up_task(void *vctx, int i, int i_thread) {
    (void)i_thread;
    const struct moe_ctx *c = vctx;
    const struct moe_job *j = &c->jobs[i];
    const struct moe_group *g = &c->groups[j->group];
    quant_gemm(g->tg, c->n_embd, g->wg, g->rbg, j->r0, j->r1 - j->r0, g->act_g, g->arb_g, g->n_act, g->G + j->r0, g->n_ff);
    quant_gemm(g->tu, c->n_embd, g->wu, g->rbu, j->r0, j->r1 - j->r0, g->act_u, g->arb_u, g->n_act, g->U + j->r0, g->n_ff);
}

static void moe_swiglu_task(void *vctx, int i, int i_thread) {
    (void)i_thread;
    const struct moe_ctx *c = vctx;
    const struct moe_group *g = &c->groups[c->jobs[i].group];
    for (int64_t r = c->jobs[i].r0; r < c->jobs[i].r1; r++) {
        float *gr = g->G + r * g->n_ff;
        const float *ur = g->U + r * g->n_ff;
        for (int64_t x = 0; x < g->n_ff; x++) gr[x] = gr[x] / (1.0f + expf(-gr[x])) * ur[x];
        if (g->td == GGML_TYPE_F32) memcpy(g->hq + r * g->arb_d, gr, (size_t)g->n_ff * sizeof(float));
        else quantize_row_act(g->td, gr, g->hq + r * g->arb_d, g->n_ff);
    }
}

static void moe_down_task(void *vctx, int i, int i_thread) {
    (void)i_thread;
    const struct moe_ctx *c = vctx;
    const struct moe_job *j = &c->jobs[i];
    const struct moe_group *g = &c->groups[j->group];
    quant_gemm(g->td, g->n_ff, g->wd, g->rbd, j->r0, j->r1 - j->r0, g->hq, g->arb_d, g->n_act, g->Y + j->r0, c->n_embd);
}

static vllmc_status moe_check_mat(const struct bk_tensor *t, const char *what, int n_dims, int64_t ne0, int64_t ne1,
                                  int64_t ne2) {
    if (!t || !t->data) return vllmc_errorf(VLLMC_ERR_INVALID, "moe: %s missing", what);
    if (t->n_dims != n_dims || t->ne[0] != ne0 || (ne1 >= 0 && t->ne[1] != ne1) || (n_dims == 3 && t->ne[2] != ne2))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: %s has shape {%lld, %lld, %lld}", what, (long long)t->ne[0],
                            (long long)t->ne[1], (long long)t->ne[2]);
    return VLLMC_OK;
}

static vllmc_status moe_act_fmt(const struct bk_act *in, const struct bk_tensor *w, const char *what, int *fmt) {
    *fmt = bk_act_fmt_for_weight(w->type);
    if (*fmt < 0 || !(in->fmts & BK_ACT_BIT(*fmt)))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: input lacks the activation format %s reads", what);
    return VLLMC_OK;
}

static const uint8_t *moe_act_rows(const struct bk_act *in, int fmt) {
    return fmt == BK_ACT_F32 ? (const uint8_t *)in->x : (const uint8_t *)in->q[fmt];
}

vllmc_status cpu_moe(struct backend *be, const struct bk_act *in, const struct bk_moe_weights *w,
                     const struct bk_moe_params *p, float *out) {
    struct cpu_backend *cb = cpu_be(be);
    const int64_t n_embd = in->n_cols, T = in->n_rows;
    vllmc_status st;
    if (!w->router || !w->router->data || w->router->type != GGML_TYPE_F32 || w->router->ne[0] != n_embd)
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: router must be F32 {%lld, n_expert}", (long long)n_embd);
    const int E = (int)w->router->ne[1], k = p->n_expert_used;
    if (k < 1 || k > E) return vllmc_errorf(VLLMC_ERR_INVALID, "moe: %d experts used of %d", k, E);
    if ((st = moe_check_mat(w->gate_exps, "ffn_gate_exps", 3, n_embd, -1, E)) != VLLMC_OK) return st;
    const int64_t n_ff = w->gate_exps->ne[1];
    if ((st = moe_check_mat(w->up_exps, "ffn_up_exps", 3, n_embd, n_ff, E)) != VLLMC_OK) return st;
    if ((st = moe_check_mat(w->down_exps, "ffn_down_exps", 3, n_ff, n_embd, E)) != VLLMC_OK) return st;
    const bool shared = w->gate_shexp && w->gate_shexp->data;
    int64_t n_ffs = 0;
    if (shared) {
        if ((st = moe_check_mat(w->gate_shexp, "ffn_gate_shexp", 2, n_embd, -1, 1)) != VLLMC_OK) return st;
        n_ffs = w->gate_shexp->ne[1];
        if ((st = moe_check_mat(w->up_shexp, "ffn_up_shexp", 2, n_embd, n_ffs, 1)) != VLLMC_OK) return st;
        if ((st = moe_check_mat(w->down_shexp, "ffn_down_shexp", 2, n_ffs, n_embd, 1)) != VLLMC_OK) return st;
    }
    const bool sgate = shared && w->shexp_gate && w->shexp_gate->data;
    if (sgate && (w->shexp_gate->type != GGML_TYPE_F32 || w->shexp_gate->ne[0] != n_embd))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: shared-expert gate must be F32 {%lld}", (long long)n_embd);
    int fg, fu, fgs = 0, fus = 0;
    if ((st = moe_act_fmt(in, w->gate_exps, "ffn_gate_exps", &fg)) != VLLMC_OK) return st;
    if ((st = moe_act_fmt(in, w->up_exps, "ffn_up_exps", &fu)) != VLLMC_OK) return st;
    const int fd = bk_act_fmt_for_weight(w->down_exps->type);
    if (fd < 0 || !bk_act_row_bytes(fd, n_ff)) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: ffn_down_exps type");
    if (shared) {
        if ((st = moe_act_fmt(in, w->gate_shexp, "ffn_gate_shexp", &fgs)) != VLLMC_OK) return st;
        if ((st = moe_act_fmt(in, w->up_shexp, "ffn_up_shexp", &fus)) != VLLMC_OK) return st;
        const int fds = bk_act_fmt_for_weight(w->down_shexp->type);
        if (fds < 0 || !bk_act_row_bytes(fds, n_ffs)) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: ffn_down_shexp type");
    }
    if (T == 0) return VLLMC_OK;

    /* Sizes of the scratch (one block, reused across calls). */
    const int64_t n_ent = T * k;
    const uint64_t arb_g = bk_act_row_bytes(fg, n_embd), arb_u = bk_act_row_bytes(fu, n_embd);
    const uint64_t arb_d = bk_act_row_bytes(fd, n_ff);
    const uint64_t arb_ds = shared ? bk_act_row_bytes(bk_act_fmt_for_weight(w->down_shexp->type), n_ffs) : 0;
    const int n_groups = E + (shared ? 1 : 0);
    size_t off = 0;
#define MOE_TAKE(bytes) (off += ((size_t)(bytes) + 63) & ~(size_t)63, off - (((size_t)(bytes) + 63) & ~(size_t)63))
    const size_t o_logits = MOE_TAKE(sizeof(float) * T * E);
    const size_t o_ids = MOE_TAKE(sizeof(int32_t) * n_ent);
    const size_t o_wts = MOE_TAKE(sizeof(float) * n_ent);
    const size_t o_pos = MOE_TAKE(sizeof(int64_t) * n_ent);   /* entry (t, j) -> row in its group */
    const size_t o_cnt = MOE_TAKE(sizeof(int64_t) * (E + 1));
    const size_t o_xg = MOE_TAKE(arb_g * n_ent);
    const size_t o_xu = MOE_TAKE(fu == fg ? 0 : arb_u * n_ent);
    const size_t o_G = MOE_TAKE(sizeof(float) * (n_ent * n_ff + T * n_ffs));
    const size_t o_U = MOE_TAKE(sizeof(float) * (n_ent * n_ff + T * n_ffs));
    const size_t o_hq = MOE_TAKE(arb_d * n_ent + arb_ds * T);
    const size_t o_Y = MOE_TAKE(sizeof(float) * (n_ent + (shared ? T : 0)) * n_embd);
    const size_t o_groups = MOE_TAKE(sizeof(struct moe_group) * n_groups);
    const int64_t max_jobs = (int64_t)n_groups * (CEIL_DIV(VLLMC_MAX(n_ff, n_ffs), MOE_ROWS_PER_JOB) +
                                                  CEIL_DIV(n_embd, MOE_ROWS_PER_JOB)) + n_ent + T + 8;
    const size_t o_jobs = MOE_TAKE(sizeof(struct moe_job) * max_jobs);
#undef MOE_TAKE
    uint8_t *mem = moe_scratch_get(off);
    if (!mem) return vllmc_errorf(VLLMC_ERR_OOM, "moe scratch of %zu bytes", off);
    float *logits = (float *)(void *)(mem + o_logits), *wts = (float *)(void *)(mem + o_wts);
    int32_t *ids = (int32_t *)(void *)(mem + o_ids);
    int64_t *pos = (int64_t *)(void *)(mem + o_pos), *cnt = (int64_t *)(void *)(mem + o_cnt);
    uint8_t *xg = mem + o_xg, *xu = fu == fg ? xg : mem + o_xu;
    float *G = (float *)(void *)(mem + o_G), *U = (float *)(void *)(mem + o_U), *Y = (float *)(void *)(mem + o_Y);
    uint8_t *hq = mem + o_hq;
    struct moe_group *groups = (struct moe_group *)(void *)(mem + o_groups);
    struct moe_job *jobs = (struct moe_job *)(void *)(mem + o_jobs);

    /* Router and selection. */
    quant_gemm(GGML_TYPE_F32, n_embd, w->router->data, w->router->row_size_bytes, 0, E, in->x,
               (size_t)n_embd * sizeof(float), T, logits, E);
    for (int64_t t = 0; t < T; t++) moe_route(logits + t * E, E, k, p->norm_weights, ids + t * k, wts + t * k);

    /* Group entries by expert (stable: row order inside a group). */
    memset(cnt, 0, sizeof(int64_t) * (E + 1));
    for (int64_t x = 0; x < n_ent; x++) cnt[ids[x] + 1]++;
    for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e]; /* cnt[e] = first entry slot of expert e */
    {
        int64_t fill[1024], *fp = E <= 1024 ? fill : NULL;
        if (!fp) { moe_scratch_put(mem); return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: %d experts (max 1024)", E); }
        memcpy(fp, cnt, sizeof(int64_t) * E);
        for (int64_t x = 0; x < n_ent; x++) {
            const int e = ids[x];
            const int64_t slot = fp[e]++;
            pos[x] = slot;
            const int64_t t = x / k;
            memcpy(xg + slot * arb_g, moe_act_rows(in, fg) + t * arb_g, arb_g);
            if (fu != fg) memcpy(xu + slot * arb_u, moe_act_rows(in, fu) + t * arb_u, arb_u);
        }
    }
    int n_used_groups = 0;
    for (int e = 0; e < E; e++) {
        const int64_t n = cnt[e + 1] - cnt[e];
        if (!n) continue;
        struct moe_group *g = &groups[n_used_groups++];
        const int64_t s0 = cnt[e];
        g->wg = (const uint8_t *)w->gate_exps->data + (uint64_t)e * n_ff * w->gate_exps->row_size_bytes;
        g->wu = (const uint8_t *)w->up_exps->data + (uint64_t)e * n_ff * w->up_exps->row_size_bytes;
        g->wd = (const uint8_t *)w->down_exps->data + (uint64_t)e * n_embd * w->down_exps->row_size_bytes;
        g->tg = w->gate_exps->type; g->tu = w->up_exps->type; g->td = w->down_exps->type;
        g->rbg = w->gate_exps->row_size_bytes; g->rbu = w->up_exps->row_size_bytes; g->rbd = w->down_exps->row_size_bytes;
        g->n_ff = n_ff;
        g->n_act = n;
        g->act_g = xg + s0 * arb_g; g->arb_g = arb_g;
        g->act_u = xu + s0 * arb_u; g->arb_u = arb_u;
        g->G = G + s0 * n_ff; g->U = U + s0 * n_ff;
        g->hq = hq + s0 * arb_d; g->arb_d = arb_d;
        g->Y = Y + s0 * n_embd;
    }
    if (shared) {
        struct moe_group *g = &groups[n_used_groups++];
        g->wg = w->gate_shexp->data; g->wu = w->up_shexp->data; g->wd = w->down_shexp->data;
        g->tg = w->gate_shexp->type; g->tu = w->up_shexp->type; g->td = w->down_shexp->type;
        g->rbg = w->gate_shexp->row_size_bytes; g->rbu = w->up_shexp->row_size_bytes; g->rbd = w->down_shexp->row_size_bytes;
        g->n_ff = n_ffs;
        g->n_act = T;
        g->act_g = moe_act_rows(in, fgs); g->arb_g = bk_act_row_bytes(fgs, n_embd);
        g->act_u = moe_act_rows(in, fus); g->arb_u = bk_act_row_bytes(fus, n_embd);
        g->G = G + n_ent * n_ff; g->U = U + n_ent * n_ff;
        g->hq = hq + n_ent * arb_d; g->arb_d = arb_ds;
        g->Y = Y + n_ent * n_embd;
    }
    struct moe_ctx ctx = {groups, jobs, n_embd};
    struct threadpool *tp = cb->tp;
    int n_jobs = 0;
    for (int gi = 0; gi < n_used_groups; gi++)
        for (int64_t r = 0; r < groups[gi].n_ff; r += MOE_ROWS_PER_JOB)
            jobs[n_jobs++] = (struct moe_job){gi, (int32_t)r, (int32_t)VLLMC_MIN(r + MOE_ROWS_PER_JOB, groups[gi].n_ff)};
    gdn_parallel_for(tp, moe_gate_up_task, &ctx, n_jobs);
    n_jobs = 0;
    for (int gi = 0; gi < n_used_groups; gi++)
        for (int64_t r = 0; r < groups[gi].n_act; r += 8)
            jobs[n_jobs++] = (struct moe_job){gi, (int32_t)r, (int32_t)VLLMC_MIN(r + 8, groups[gi].n_act)};
    gdn_parallel_for(tp, moe_swiglu_task, &ctx, n_jobs);
    n_jobs = 0;
    for (int gi = 0; gi < n_used_groups; gi++)
        for (int64_t r = 0; r < n_embd; r += MOE_ROWS_PER_JOB)
            jobs[n_jobs++] = (struct moe_job){gi, (int32_t)r, (int32_t)VLLMC_MIN(r + MOE_ROWS_PER_JOB, n_embd)};
    gdn_parallel_for(tp, moe_down_task, &ctx, n_jobs);

    /* Mix: selected experts in selection order, then the shared expert. */
    const float *Ys = shared ? Y + n_ent * n_embd : NULL;
    for (int64_t t = 0; t < T; t++) {
        float *o = out + t * n_embd;
        for (int j = 0; j < k; j++) {
            const float *y = Y + pos[t * k + j] * n_embd;
            const float wj = wts[t * k + j];
            if (j == 0) for (int64_t x = 0; x < n_embd; x++) o[x] = wj * y[x];
            else for (int64_t x = 0; x < n_embd; x++) o[x] += wj * y[x];
        }
        if (shared) {
            float gsc = 1.0f;
            if (sgate) {
                float d;
                quant_gemv(GGML_TYPE_F32, n_embd, w->shexp_gate->data, (size_t)n_embd * sizeof(float), 0, 1,
                           in->x + t * n_embd, &d);
                gsc = 1.0f / (1.0f + expf(-d));
            }
            const float *y = Ys + t * n_embd;
            for (int64_t x = 0; x < n_embd; x++) o[x] += gsc * y[x];
        }
    }
    moe_scratch_put(mem);
    return VLLMC_OK;
}
