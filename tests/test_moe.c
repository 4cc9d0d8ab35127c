/* MoE ops vs plain references on fresh random data: the router (softmax, top-k with ties, renormalization)
 * vs a double-precision sort, and the CPU MoE FFN op vs a dense reference that runs every expert on every
 * row in double and mixes them with a weight vector that is zero outside the selected experts — for F32
 * weights and quantized expert weights (Q8_0, Q4_K/Q6_K/mixed), the reference rounding each matrix's input to
 * that matrix's activation type as the op does: all outputs within 1e-2, and all but 2 + T/4 rows within 1e-5
 * (a hidden value at a rounding boundary may round the other way in float than in double; ~4% of rows).
 * Also: thread-count independence (bit-exact), shape errors returned, not aborted, and the op's reused
 * scratch under concurrent calls from two backends on two threads (sizes alternating, results bit-exact). */
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/ops_moe.h"
#include "backend/cuda/moe_route.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"

static void ref_route(const float *logits, int E, int k, bool norm, int32_t *ids, double *w) {
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) mx = fmax(mx, logits[e]);
    double p[1024];
    for (int e = 0; e < E; e++) sum += (p[e] = exp(logits[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
    char used[1024] = {0};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
        used[best] = 1;
        ids[j] = best;
        w[j] = p[best];
    }
    if (norm) {
        double s = 0;
        for (int j = 0; j < k; j++) s += w[j];
        for (int j = 0; j < k; j++) w[j] /= s;
    }
}

static void test_route(void) {
    for (int rep = 0; rep < 200; rep++) {
        const int E = 1 + (int)(test_rand_u64() % 64), k = 1 + (int)(test_rand_u64() % (uint64_t)E);
        float logits[64];
        for (int e = 0; e < E; e++) logits[e] = 3.0f * test_rand_normal();
        if (rep % 3 == 0 && E > 3) logits[E - 1] = logits[1] = logits[2]; /* ties */
        const bool norm = rep % 5 != 0;
        int32_t ids[64], rids[64];
        float w[64];
        double rw[64];
        moe_route(logits, E, k, norm, ids, w);
        ref_route(logits, E, k, norm, rids, rw);
        int ok_ids = 1;
        double e = 0, s = 0;
        for (int j = 0; j < k; j++) {
            ok_ids &= ids[j] == rids[j];
            e = fmax(e, fabs(w[j] - rw[j]));
            s += w[j];
        }
        CHECK_MSG(ok_ids, "rep %d E %d k %d: ids differ", rep, E, k);
        CHECK_MSG(e < 1e-6, "rep %d: weight err %g", rep, e);
        if (norm) CHECK_NEAR(s, 1.0, 1e-5);
    }
}

struct moe_case {
    int n_embd, n_ff, n_ffs, E, k;
    uint32_t tg, tu, td, tgs, tus, tds;
    double tol;
};

static void *quantize_mat(uint32_t type, const float *x, int64_t rows, int64_t cols) {
    const uint64_t rb = quant_row_size(type, cols);
    uint8_t *q = malloc(rb * rows);
    for (int64_t r = 0; r < rows; r++) {
        if (type == GGML_TYPE_F32) memcpy(q + r * rb, x + r * cols, cols * 4);
        else VLLMC_ASSERT(quantize_row_ref(type, x + r * cols, q + r * rb, cols) == VLLMC_OK);
    }
    return q;
}

/* Weight whose f32 values are what the quantized bytes decode to (so the reference sees the same weights). */
struct wmat { struct bk_tensor t; float *deq; };

static void make_wmat(struct wmat *m, uint32_t type, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, float scale) {
    const int64_t rows = ne1 * ne2;
    float *x = malloc(sizeof(float) * rows * ne0);
    for (int64_t i = 0; i < rows * ne0; i++) x[i] = scale * test_rand_normal();
    void *q = quantize_mat(type, x, rows, ne0);
    const uint64_t rb = quant_row_size(type, ne0);
    for (int64_t r = 0; r < rows; r++) dequantize_row(type, (uint8_t *)q + r * rb, x + r * ne0, ne0);
    memset(&m->t, 0, sizeof(m->t));
    m->t.data = q;
    m->t.type = type;
    m->t.n_dims = n_dims;
    m->t.ne[0] = ne0; m->t.ne[1] = ne1; m->t.ne[2] = n_dims == 3 ? ne2 : 1; m->t.ne[3] = 1;
    m->t.row_size_bytes = rb;
    m->t.name = "w";
    m->deq = x;
}

static void free_wmat(struct wmat *m) { free(m->t.data); free(m->deq); }

/* x rounded the way a weight of type wtype sees it: quantized to its activation type and back (F32: as is). */
static void act_round(uint32_t wtype, const float *x, float *out, int n) {
    const int vt = quant_traits(wtype)->vec_dot_type;
    if (vt == GGML_TYPE_F32) { memcpy(out, x, sizeof(float) * n); return; }
    uint8_t buf[8192];
    VLLMC_ASSERT(quant_row_size(vt, n) <= sizeof(buf));
    quantize_row_act(wtype, x, buf, n);
    if (vt == GGML_TYPE_Q8_K) {
        const block_q8_K *b = (const block_q8_K *)(void *)buf;
        for (int i = 0; i < n; i++) out[i] = b[i / QK_K].d * b[i / QK_K].qs[i % QK_K];
    } else {
        dequantize_row(vt, buf, out, n);
    }
}

/* y = W_down (silu(W_gate x) * W_up x) in double; W [rows][cols] row-major slabs. The inputs of each
 * matrix are rounded as that matrix's activation type (mirrors the op, so the bound can be tight). */
static void ref_ffn(const float *x, int n_embd, int n_ff, const float *wg, const float *wu, const float *wd,
                    uint32_t tg, uint32_t tu, uint32_t td, double *y) {
    double *h = malloc(sizeof(double) * n_ff);
    float *xg = malloc(sizeof(float) * n_embd), *xu = malloc(sizeof(float) * n_embd);
    float *hf = malloc(sizeof(float) * n_ff), *hr = malloc(sizeof(float) * n_ff);
    act_round(tg, x, xg, n_embd);
    act_round(tu, x, xu, n_embd);
    for (int i = 0; i < n_ff; i++) {
        double g = 0, u = 0;
        for (int c = 0; c < n_embd; c++) { g += (double)wg[(int64_t)i * n_embd + c] * xg[c]; u += (double)wu[(int64_t)i * n_embd + c] * xu[c]; }
        hf[i] = (float)(g / (1 + exp(-g)) * u);
    }
    act_round(td, hf, hr, n_ff);
    for (int i = 0; i < n_ff; i++) h[i] = hr[i];
    for (int o = 0; o < n_embd; o++) {
        double s = 0;
        for (int i = 0; i < n_ff; i++) s += wd[(int64_t)o * n_ff + i] * h[i];
        y[o] = s;
    }
    free(h); free(xg); free(xu); free(hf); free(hr);
}

static void run_case(const struct moe_case *mc, int T, struct backend *be_fast, struct backend *be_ref) {
    const int n = mc->n_embd, E = mc->E;
    struct wmat router, g, u, d, gs, us, ds, sg;
    make_wmat(&router, GGML_TYPE_F32, 2, n, E, 1, 1.0f / sqrtf((float)n) * 3.0f);
    make_wmat(&g, mc->tg, 3, n, mc->n_ff, E, 1.0f / sqrtf((float)n));
    make_wmat(&u, mc->tu, 3, n, mc->n_ff, E, 1.0f / sqrtf((float)n));
    make_wmat(&d, mc->td, 3, mc->n_ff, n, E, 1.0f / sqrtf((float)mc->n_ff));
    make_wmat(&gs, mc->tgs, 2, n, mc->n_ffs, 1, 1.0f / sqrtf((float)n));
    make_wmat(&us, mc->tus, 2, n, mc->n_ffs, 1, 1.0f / sqrtf((float)n));
    make_wmat(&ds, mc->tds, 2, mc->n_ffs, n, 1, 1.0f / sqrtf((float)mc->n_ffs));
    make_wmat(&sg, GGML_TYPE_F32, 1, n, 1, 1, 1.0f / sqrtf((float)n));
    struct bk_moe_weights w = {&router.t, &g.t, &u.t, &d.t, &gs.t, &us.t, &ds.t, &sg.t};
    struct bk_moe_params p = {mc->k, true};

    uint32_t fmts = 0;
    const uint32_t types[] = {mc->tg, mc->tu, mc->tgs, mc->tus};
    for (size_t i = 0; i < ARRAY_LEN(types); i++) fmts |= BK_ACT_BIT(bk_act_fmt_for_weight(types[i]));
    struct bk_act a_fast, a_ref;
    VLLMC_ASSERT(bk_act_alloc(be_fast, T, n, fmts, &a_fast) == VLLMC_OK);
    VLLMC_ASSERT(bk_act_alloc(be_ref, T, n, fmts, &a_ref) == VLLMC_OK);
    for (int64_t i = 0; i < (int64_t)T * n; i++) a_fast.x[i] = test_rand_normal();
    memcpy(a_ref.x, a_fast.x, sizeof(float) * T * n);
    a_fast.n_rows = a_ref.n_rows = T;
    VLLMC_ASSERT(be_fast->ops->quantize(be_fast, &a_fast) == VLLMC_OK);
    VLLMC_ASSERT(be_ref->ops->quantize(be_ref, &a_ref) == VLLMC_OK);

    float *out = malloc(sizeof(float) * T * n), *out_ref = malloc(sizeof(float) * T * n);
    vllmc_status st = be_fast->ops->moe(be_fast, &a_fast, &w, &p, out);
    CHECK_MSG(st == VLLMC_OK, "moe: %s", vllmc_status_str(st));
    st = be_ref->ops->moe(be_ref, &a_ref, &w, &p, out_ref);
    CHECK(st == VLLMC_OK);
    CHECK_MSG(memcmp(out, out_ref, sizeof(float) * T * n) == 0, "threaded and single-thread results differ (T %d)", T);

    /* Dense reference: every expert on every row, mixed with a dense weight vector. */
    double *y = malloc(sizeof(double) * n), *acc = malloc(sizeof(double) * n);
    double *dense_w = malloc(sizeof(double) * E);
    double err = 0, mag = 0;
    double *refs = malloc(sizeof(double) * T * n);
    for (int t = 0; t < T; t++) {
        const float *x = a_fast.x + (int64_t)t * n;
        float logits[1024];
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int c = 0; c < n; c++) s += (double)router.deq[(int64_t)e * n + c] * x[c];
            logits[e] = (float)s;
        }
        int32_t ids[64];
        double wk[64];
        ref_route(logits, E, mc->k, true, ids, wk);
        for (int e = 0; e < E; e++) dense_w[e] = 0;
        for (int j = 0; j < mc->k; j++) dense_w[ids[j]] = wk[j];
        for (int c = 0; c < n; c++) acc[c] = 0;
        for (int e = 0; e < E; e++) {
            ref_ffn(x, n, mc->n_ff, g.deq + (int64_t)e * mc->n_ff * n, u.deq + (int64_t)e * mc->n_ff * n,
                    d.deq + (int64_t)e * n * mc->n_ff, mc->tg, mc->tu, mc->td, y);
            for (int c = 0; c < n; c++) acc[c] += dense_w[e] * y[c];
        }
        double sgd = 0;
        for (int c = 0; c < n; c++) sgd += (double)sg.deq[c] * x[c];
        sgd = 1 / (1 + exp(-sgd));
        ref_ffn(x, n, mc->n_ffs, gs.deq, us.deq, ds.deq, mc->tgs, mc->tus, mc->tds, y);
        for (int c = 0; c < n; c++) {
            acc[c] += sgd * y[c];
            err = fmax(err, fabs(out[(int64_t)t * n + c] - acc[c]));
            mag = fmax(mag, fabs(acc[c]));
            refs[(int64_t)t * n + c] = acc[c];
        }
    }
    /* Quantized: a hidden value at a rounding boundary may round the other way in the op (float) than in
     * the reference (double); such a flip moves a few outputs by ~1e-3. Most outputs must agree tightly. */
    int64_t n_off = 0; /* rows with any output off by more than 1e-5 */
    for (int t = 0; t < T; t++) {
        bool off = false;
        for (int c = 0; c < n; c++) off |= fabs(out[(int64_t)t * n + c] - refs[(int64_t)t * n + c]) > 1e-5 * mag;
        n_off += off;
    }
    CHECK_MSG(err / mag < mc->tol, "types %s/%s/%s T %d: rel err %g (tol %g)", quant_traits(mc->tg)->name,
              quant_traits(mc->tu)->name, quant_traits(mc->td)->name, T, err / mag, mc->tol);
    CHECK_MSG(n_off <= 2 + T / 4, "T %d: %lld rows off by more than 1e-5", T, (long long)n_off);
    free(refs);
    printf("moe %s/%s/%s E %d k %d T %d: max rel err vs dense reference %.2e\n", quant_traits(mc->tg)->name,
           quant_traits(mc->tu)->name, quant_traits(mc->td)->name, E, mc->k, T, err / mag);

    /* Bad shapes come back as errors. */
    struct bk_tensor bad = d.t;
    bad.ne[1] = n + 1;
    struct bk_moe_weights wb = w;
    wb.down_exps = &bad;
    CHECK(be_fast->ops->moe(be_fast, &a_fast, &wb, &p, out) == VLLMC_ERR_INVALID);
    struct bk_moe_params pb = {E + 1, true};
    CHECK(be_fast->ops->moe(be_fast, &a_fast, &w, &pb, out) == VLLMC_ERR_INVALID);

    free(y); free(acc); free(dense_w); free(out); free(out_ref);
    bk_act_free(be_fast, &a_fast);
    bk_act_free(be_ref, &a_ref);
    free_wmat(&router); free_wmat(&g); free_wmat(&u); free_wmat(&d);
    free_wmat(&gs); free_wmat(&us); free_wmat(&ds); free_wmat(&sg);
}

/* ---- concurrent calls: the op keeps one scratch block across calls and gives a private one to a call that
 * finds it taken; two threads with their own backends and alternating sizes must get the bits of a lone call */

#define MOE_CONC_CALLS 400
struct moe_conc {
    struct backend *be;
    const struct bk_moe_weights *w;
    const struct bk_moe_params *p;
    struct bk_act act[2];   /* T = 1 and T = 9 */
    const float *want[2];
    float *out;
    int n_embd, n_bad;
};

static void *moe_conc_thread(void *vctx) {
    struct moe_conc *c = vctx;
    for (int i = 0; i < MOE_CONC_CALLS; i++) {
        const int v = i % 2;
        const int64_t T = c->act[v].n_rows;
        if (c->be->ops->moe(c->be, &c->act[v], c->w, c->p, c->out) != VLLMC_OK ||
            memcmp(c->out, c->want[v], sizeof(float) * T * c->n_embd) != 0)
            c->n_bad++;
    }
    return NULL;
}

static void test_concurrent(void) {
    const int n = 64, n_ff = 96, n_ffs = 32, E = 8;
    struct wmat router, g, u, d, gs, us, ds, sg;
    make_wmat(&router, GGML_TYPE_F32, 2, n, E, 1, 3.0f / sqrtf((float)n));
    make_wmat(&g, GGML_TYPE_Q8_0, 3, n, n_ff, E, 1.0f / sqrtf((float)n));
    make_wmat(&u, GGML_TYPE_Q8_0, 3, n, n_ff, E, 1.0f / sqrtf((float)n));
    make_wmat(&d, GGML_TYPE_Q8_0, 3, n_ff, n, E, 1.0f / sqrtf((float)n_ff));
    make_wmat(&gs, GGML_TYPE_Q8_0, 2, n, n_ffs, 1, 1.0f / sqrtf((float)n));
    make_wmat(&us, GGML_TYPE_Q8_0, 2, n, n_ffs, 1, 1.0f / sqrtf((float)n));
    make_wmat(&ds, GGML_TYPE_Q8_0, 2, n_ffs, n, 1, 1.0f / sqrtf((float)n_ffs));
    make_wmat(&sg, GGML_TYPE_F32, 1, n, 1, 1, 1.0f / sqrtf((float)n));
    const struct bk_moe_weights w = {&router.t, &g.t, &u.t, &d.t, &gs.t, &us.t, &ds.t, &sg.t};
    const struct bk_moe_params p = {3, true};
    const uint32_t fmts = BK_ACT_BIT(bk_act_fmt_for_weight(GGML_TYPE_Q8_0));
    struct moe_conc cs[2];
    float *want[2][2];
    for (int th = 0; th < 2; th++) {
        struct moe_conc *c = &cs[th];
        memset(c, 0, sizeof(*c));
        VLLMC_ASSERT(backend_cpu_create(th == 0 ? 1 : 2, false, &c->be) == VLLMC_OK);
        c->w = &w;
        c->p = &p;
        c->n_embd = n;
        c->out = malloc(sizeof(float) * 9 * n);
        for (int v = 0; v < 2; v++) {
            const int T = v ? 9 : 1;
            VLLMC_ASSERT(bk_act_alloc(c->be, T, n, fmts, &c->act[v]) == VLLMC_OK);
            for (int64_t i = 0; i < (int64_t)T * n; i++) c->act[v].x[i] = test_rand_normal();
            c->act[v].n_rows = T;
            VLLMC_ASSERT(c->be->ops->quantize(c->be, &c->act[v]) == VLLMC_OK);
            want[th][v] = malloc(sizeof(float) * T * n);
            CHECK(c->be->ops->moe(c->be, &c->act[v], &w, &p, want[th][v]) == VLLMC_OK);
            c->want[v] = want[th][v];
        }
    }
    pthread_t tid[2];
    for (int th = 0; th < 2; th++) VLLMC_ASSERT(pthread_create(&tid[th], NULL, moe_conc_thread, &cs[th]) == 0);
    for (int th = 0; th < 2; th++) pthread_join(tid[th], NULL);
    for (int th = 0; th < 2; th++) {
        CHECK_MSG(cs[th].n_bad == 0, "concurrent moe, thread %d: %d of %d calls wrong", th, cs[th].n_bad, MOE_CONC_CALLS);
        for (int v = 0; v < 2; v++) { bk_act_free(cs[th].be, &cs[th].act[v]); free(want[th][v]); }
        free(cs[th].out);
        cs[th].be->ops->destroy(cs[th].be);
    }
    free_wmat(&router); free_wmat(&g); free_wmat(&u); free_wmat(&d);
    free_wmat(&gs); free_wmat(&us); free_wmat(&ds); free_wmat(&sg);
}

/* The GPU router's quotient (backend/cuda/moe_route.h: one remainder step from the row's reciprocal) against the division
 * it replaces, bit for bit in double: e = a float in [0, 1] (expf of a non-positive number), sums in [1, 257) uniform,
 * with significands near all ones, near powers of two, and sums of floats. Without the remainder step about a quarter
 * of the quotients differ. */
static void test_route_quot(void) {
    long bad = 0, n = 0;
    for (int i = 0; i < 2000000; i++) {
        const uint32_t fb = (uint32_t)(test_rand_u64() % 0x3f800001u);
        float ef;
        memcpy(&ef, &fb, 4);
        const double e = ef;
        double sum;
        const int kind = i % 4;
        if (kind == 0) sum = 1.0 + (double)(test_rand_u64() >> 11) * 0x1.0p-53 * 256.0;
        else if (kind == 3) {
            sum = 1.0;
            for (int k = 0; k < 8; k++) sum += (double)(float)((double)(test_rand_u64() >> 40) * 0x1.0p-24);
        } else {
            const uint64_t lo = test_rand_u64() % 64, bits = ((uint64_t)(1023 + test_rand_u64() % 9) << 52) |
                                                             (kind == 1 ? 0xfffffffffffffull - lo : lo);
            memcpy(&sum, &bits, 8);
        }
        const double rs = 1.0 / sum, q = moe_quot(e, sum, rs), ref = e / sum;
        const float p = moe_prob(e, sum, rs), pref = (float)(e / sum);
        bad += memcmp(&q, &ref, 8) != 0 || memcmp(&p, &pref, 4) != 0;
        n++;
    }
    CHECK_MSG(bad == 0, "router quotient: %ld of %ld differ from the division", bad, n);
}

int main(void) {
    test_seed_auto("test_moe");
    test_route_quot();
    test_concurrent();
    test_route();
    struct backend *be_fast = NULL, *be_ref = NULL;
    VLLMC_ASSERT(backend_cpu_create(2, false, &be_fast) == VLLMC_OK);
    VLLMC_ASSERT(backend_cpu_create(1, true, &be_ref) == VLLMC_OK);
    {
        const struct moe_case cases[] = {
            {64, 96, 32, 8, 3, GGML_TYPE_F32, GGML_TYPE_F32, GGML_TYPE_F32, GGML_TYPE_F32, GGML_TYPE_F32, GGML_TYPE_F32, 1e-5},
            {256, 256, 128, 16, 4, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 1e-2},
            {256, 256, 256, 12, 2, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K, 1e-2},
        };
        const int Ts[] = {1, 5, 33};
        for (size_t c = 0; c < ARRAY_LEN(cases); c++)
            for (size_t i = 0; i < ARRAY_LEN(Ts); i++) run_case(&cases[c], Ts[i], be_fast, be_ref);
    }
    be_fast->ops->destroy(be_fast);
    be_ref->ops->destroy(be_ref);
    return test_finish("test_moe");
}
