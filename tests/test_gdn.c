/* Gated DeltaNet ops vs plain double-precision references on fresh random inputs: conv1d with its rolling
 * state (one call vs many), L2 norm, gates, gated RMSNorm, the recurrent delta rule vs a reference kept in
 * the other state orientation (S[k][v]), and the chunked delta rule vs the recurrence for every prompt
 * length 1..130 with chunk 64 (and other chunks), state carried in and out. */
#include <string.h>

#include "backend/cpu/ops_gdn.h"
#include "quant/blocks.h"
#include "quant/gemv.h"
#include "test.h"

static float *rand_vec(int64_t n, float scale) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = scale * test_rand_normal();
    return x;
}

static float *copy_vec(const float *x, int64_t n) {
    float *y = malloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* max |a-b| / max |b| */
static double rel_err(const float *a, const float *b, int64_t n) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > e || d != d) e = d != d ? INFINITY : d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0 ? e / m : e;
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

/* ---- conv ---- */

static void ref_conv(float *y, const float *x, int T, int n_ch, const float *w, int d_conv, float *state) {
    const int nh = d_conv - 1;
    for (int ch = 0; ch < n_ch; ch++) {
        double *hist = malloc(sizeof(double) * (size_t)(nh + T));
        for (int j = 0; j < nh; j++) hist[j] = state[ch * nh + j];
        for (int t = 0; t < T; t++) hist[nh + t] = x[(int64_t)t * n_ch + ch];
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (int j = 0; j < d_conv; j++) s += hist[t + j] * w[ch * d_conv + j];
            y[(int64_t)t * n_ch + ch] = (float)silu_d(s);
        }
        for (int j = 0; j < nh; j++) state[ch * nh + j] = (float)hist[T + j];
        free(hist);
    }
}

static void test_conv(struct threadpool *tp) {
    const int n_ch = 200, d_conv = 4, T = 37;
    float *x = rand_vec((int64_t)T * n_ch, 1.0f), *w = rand_vec(n_ch * d_conv, 0.5f);
    float *st0 = rand_vec(n_ch * (d_conv - 1), 1.0f);
    float *st_ref = copy_vec(st0, n_ch * (d_conv - 1)), *st_one = copy_vec(st0, n_ch * (d_conv - 1));
    float *st_pieces = copy_vec(st0, n_ch * (d_conv - 1));
    float *y_ref = calloc((size_t)T * n_ch, 4), *y_one = calloc((size_t)T * n_ch, 4);
    float *y_pieces = calloc((size_t)T * n_ch, 4);
    ref_conv(y_ref, x, T, n_ch, w, d_conv, st_ref);
    gdn_conv1d_silu(y_one, n_ch, x, n_ch, T, n_ch, w, d_conv, st_one, tp);
    CHECK_MSG(rel_err(y_one, y_ref, (int64_t)T * n_ch) < 1e-5, "conv y err %g", rel_err(y_one, y_ref, (int64_t)T * n_ch));
    CHECK(rel_err(st_one, st_ref, n_ch * (d_conv - 1)) == 0);
    /* Pieces of 1, 2 (shorter than the history) and more, as decode after prefill does. */
    const int pieces[] = {1, 2, 1, 5, 1, 1, 26};
    int t0 = 0;
    for (size_t p = 0; p < ARRAY_LEN(pieces); p++) {
        gdn_conv1d_silu(y_pieces + (int64_t)t0 * n_ch, n_ch, x + (int64_t)t0 * n_ch, n_ch, pieces[p], n_ch, w,
                        d_conv, st_pieces, NULL);
        t0 += pieces[p];
    }
    CHECK(t0 == T);
    CHECK(rel_err(y_pieces, y_one, (int64_t)T * n_ch) == 0);
    CHECK(rel_err(st_pieces, st_ref, n_ch * (d_conv - 1)) == 0);
    /* Strided rows: input rows wider than n_ch, output into a wider buffer. */
    float *xs = rand_vec((int64_t)T * (n_ch + 7), 1.0f), *ys = calloc((size_t)T * (n_ch + 3), 4);
    float *xc = malloc((size_t)T * n_ch * 4);
    for (int t = 0; t < T; t++) memcpy(xc + (int64_t)t * n_ch, xs + (int64_t)t * (n_ch + 7), (size_t)n_ch * 4);
    float *st_a = copy_vec(st0, n_ch * (d_conv - 1)), *st_b = copy_vec(st0, n_ch * (d_conv - 1));
    ref_conv(y_ref, xc, T, n_ch, w, d_conv, st_a);
    gdn_conv1d_silu(ys, n_ch + 3, xs, n_ch + 7, T, n_ch, w, d_conv, st_b, tp);
    double e = 0;
    for (int t = 0; t < T; t++) e = fmax(e, rel_err(ys + (int64_t)t * (n_ch + 3), y_ref + (int64_t)t * n_ch, n_ch));
    CHECK_MSG(e < 1e-5, "strided conv err %g", e);
    /* Tap orientation: a single impulse at the current token must pick tap d_conv-1. */
    float wi[4] = {0, 0, 0, 1}, sti[3] = {5, 6, 7}, xi = 2.0f, yi;
    gdn_conv1d_silu(&yi, 1, &xi, 1, 1, 1, wi, 4, sti, NULL);
    CHECK_NEAR(yi, silu_d(2.0), 1e-6);
    CHECK(sti[0] == 6 && sti[1] == 7 && sti[2] == 2);
    free(x); free(w); free(st0); free(st_ref); free(st_one); free(st_pieces); free(y_ref); free(y_one);
    free(y_pieces); free(xs); free(ys); free(xc); free(st_a); free(st_b);
    /* Every kernel width: token-by-token steps (the decode path) give the bits of one run and the reference. */
    for (int dc = 2; dc <= 8; dc++) {
        const int nc = 70, TT = 11, nh = dc - 1;
        float *xx = rand_vec((int64_t)TT * nc, 1.0f), *ww = rand_vec(nc * dc, 0.5f), *s0 = rand_vec(nc * nh, 1.0f);
        float *sr = copy_vec(s0, nc * nh), *s1 = copy_vec(s0, nc * nh), *sp = copy_vec(s0, nc * nh);
        float *yr = malloc((size_t)TT * nc * 4), *y1 = malloc((size_t)TT * nc * 4), *yp = malloc((size_t)TT * nc * 4);
        ref_conv(yr, xx, TT, nc, ww, dc, sr);
        gdn_conv1d_silu(y1, nc, xx, nc, TT, nc, ww, dc, s1, tp);
        for (int t = 0; t < TT; t++)
            gdn_conv1d_silu(yp + (int64_t)t * nc, nc, xx + (int64_t)t * nc, nc, 1, nc, ww, dc, sp, t % 2 ? tp : NULL);
        CHECK_MSG(rel_err(y1, yr, (int64_t)TT * nc) < 1e-5, "conv d_conv %d err %g", dc, rel_err(y1, yr, (int64_t)TT * nc));
        CHECK_MSG(rel_err(yp, y1, (int64_t)TT * nc) == 0, "conv d_conv %d steps vs run", dc);
        CHECK(rel_err(sp, sr, nc * nh) == 0 && rel_err(s1, sr, nc * nh) == 0);
        free(xx); free(ww); free(s0); free(sr); free(s1); free(sp); free(yr); free(y1); free(yp);
    }
}

/* ---- norms and gates ---- */

static void test_norms_gates(void) {
    const int n = 128;
    float *x = rand_vec(n, 3.0f), *y = copy_vec(x, n);
    gdn_l2norm(y, n, 1e-6f);
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    double e = 0;
    for (int i = 0; i < n; i++) e = fmax(e, fabs(y[i] - x[i] / sqrt(s)));
    CHECK_MSG(e < 1e-6, "l2norm err %g", e);
    /* Tiny vector: divides by eps, not by the norm. */
    float tiny[4] = {1e-9f, -2e-9f, 0, 0};
    gdn_l2norm(tiny, 4, 1e-6f);
    CHECK_NEAR(tiny[1], -2e-3, 1e-9);

    /* q/k norm on a qkv row layout with a v tail that must stay untouched. */
    struct gdn_dims d = {3, 6, 16, 8};
    const int T = 3, stride = 2 * 3 * 16 + 6 * 8 + 5;
    float *qkv = rand_vec((int64_t)T * stride, 2.0f), *qkv0 = copy_vec(qkv, (int64_t)T * stride);
    gdn_qk_norm(qkv, stride, T, &d, 1e-6f);
    e = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < 6; h++) {
            const float *a = qkv0 + t * stride + h * 16;
            double ss = 0;
            for (int i = 0; i < 16; i++) ss += (double)a[i] * a[i];
            double sc = (h < 3 ? 1.0 / 4.0 : 1.0) / sqrt(ss);
            for (int i = 0; i < 16; i++) e = fmax(e, fabs(qkv[t * stride + h * 16 + i] - a[i] * sc));
        }
    CHECK_MSG(e < 1e-6, "qk_norm err %g", e);
    CHECK(memcmp(qkv + 96, qkv0 + 96, (stride - 96) * sizeof(float)) == 0);

    /* gates */
    const int nv = 5, Tg = 4, abs_ = 9;
    float *b = rand_vec(Tg * abs_, 3.0f), *a = rand_vec(Tg * abs_, 3.0f);
    a[0] = 25.0f; /* softplus guard region */
    float *dt = rand_vec(nv, 1.0f), *A = rand_vec(nv, 1.0f);
    for (int m = 0; m < nv; m++) A[m] = -expf(A[m]);
    float beta[20], g[20];
    gdn_gates(beta, g, b, a, abs_, Tg, nv, dt, A);
    e = 0;
    for (int t = 0; t < Tg; t++)
        for (int m = 0; m < nv; m++) {
            double xx = (double)a[t * abs_ + m] + dt[m];
            double sp = xx > 20 ? xx : log1p(exp(xx));
            e = fmax(e, fabs(g[t * nv + m] - sp * A[m]) / (1 + fabs(sp * A[m])));
            e = fmax(e, fabs(beta[t * nv + m] - 1.0 / (1.0 + exp(-(double)b[t * abs_ + m]))));
        }
    CHECK_MSG(e < 1e-5, "gates err %g", e);

    /* gated rmsnorm: per head, shared weight, z with its own stride, in place */
    const int nh = 3, dv = 32, Tn = 2, st = nh * dv + 4, zst = nh * dv + 11;
    float *o = rand_vec(Tn * st, 2.0f), *z = rand_vec(Tn * zst, 2.0f), *w = rand_vec(dv, 1.0f);
    float *o0 = copy_vec(o, Tn * st);
    gdn_gated_rmsnorm(o, o, st, z, zst, Tn, nh, dv, w, 1e-6f);
    e = 0;
    for (int t = 0; t < Tn; t++)
        for (int m = 0; m < nh; m++) {
            const float *xx = o0 + t * st + m * dv;
            double ss = 0;
            for (int i = 0; i < dv; i++) ss += (double)xx[i] * xx[i];
            double sc = 1.0 / sqrt(ss / dv + 1e-6);
            for (int i = 0; i < dv; i++) {
                double r = xx[i] * sc * w[i] * silu_d(z[t * zst + m * dv + i]);
                e = fmax(e, fabs(o[t * st + m * dv + i] - r));
            }
        }
    CHECK_MSG(e < 1e-5, "gated rmsnorm err %g", e);
    free(x); free(y); free(qkv); free(qkv0); free(b); free(a); free(dt); free(A); free(o); free(z); free(w);
    free(o0);
}

/* ---- delta rule ---- */

struct rule_inputs {
    struct gdn_dims d;
    int T;
    int64_t qk_stride, v_stride;
    float *qk, *v, *g, *beta, *state0;
};

static void make_inputs(struct rule_inputs *in, struct gdn_dims d, int T) {
    in->d = d;
    in->T = T;
    in->qk_stride = 2 * (int64_t)d.n_k_head * d.d_k + 3;
    in->v_stride = (int64_t)d.n_v_head * d.d_v + 1;
    in->qk = rand_vec(T * in->qk_stride, 1.0f);
    in->v = rand_vec(T * in->v_stride, 1.0f);
    gdn_qk_norm(in->qk, in->qk_stride, T, &d, 1e-6f);
    in->g = malloc(sizeof(float) * (size_t)(T * d.n_v_head + 1));
    in->beta = malloc(sizeof(float) * (size_t)(T * d.n_v_head + 1));
    for (int i = 0; i < T * d.n_v_head; i++) {
        /* decays from ~0 (no decay) to strong; a few exact zeros */
        float u = test_rand_uniform();
        in->g[i] = u < 0.05f ? 0.0f : -3.0f * u * u;
        in->beta[i] = test_rand_uniform();
    }
    in->state0 = rand_vec((int64_t)d.n_v_head * d.d_v * d.d_k, 0.5f);
}

static void free_inputs(struct rule_inputs *in) {
    free(in->qk); free(in->v); free(in->g); free(in->beta); free(in->state0);
}

/* Reference in double with the state as S[m][k_i][v_j] (the other orientation). */
static void ref_rule(const struct rule_inputs *in, double *o, double *S) {
    const struct gdn_dims *d = &in->d;
    const int dk = d->d_k, dv = d->d_v;
    for (int m = 0; m < d->n_v_head; m++)
        for (int j = 0; j < dv; j++)
            for (int i = 0; i < dk; i++)
                S[((int64_t)m * dk + i) * dv + j] = in->state0[((int64_t)m * dv + j) * dk + i];
    double *e = malloc(sizeof(double) * (size_t)dv);
    for (int t = 0; t < in->T; t++)
        for (int m = 0; m < d->n_v_head; m++) {
            const int kh = m % d->n_k_head;
            const float *q = in->qk + t * in->qk_stride + kh * dk;
            const float *k = in->qk + t * in->qk_stride + d->n_k_head * dk + kh * dk;
            const float *v = in->v + t * in->v_stride + m * dv;
            double *Sm = S + (int64_t)m * dk * dv;
            double a = exp((double)in->g[t * d->n_v_head + m]), b = in->beta[t * d->n_v_head + m];
            for (int x = 0; x < dk * dv; x++) Sm[x] *= a;
            for (int j = 0; j < dv; j++) {
                e[j] = 0;
                for (int i = 0; i < dk; i++) e[j] += Sm[i * dv + j] * k[i];
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) Sm[i * dv + j] += k[i] * b * (v[j] - e[j]);
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += Sm[i * dv + j] * q[i];
                o[((int64_t)t * d->n_v_head + m) * dv + j] = s;
            }
        }
    free(e);
}

/* Runs the op (chunk 0 = recurrent) in pieces given by `split` tokens (0 = all at once). */
static void run_rule(const struct rule_inputs *in, int chunk, int split, float *o, float *state,
                     struct threadpool *tp) {
    const struct gdn_dims *d = &in->d;
    const int64_t nvd = (int64_t)d->n_v_head * d->d_v;
    memcpy(state, in->state0, sizeof(float) * (size_t)(nvd * d->d_k));
    int nt = tp ? threadpool_n_threads(tp) : 1;
    float *scratch = chunk ? malloc(sizeof(float) * (size_t)(gdn_chunked_scratch_floats(d, chunk) * nt)) : NULL;
    for (int t0 = 0; t0 < in->T;) {
        int n = split ? VLLMC_MIN(split, in->T - t0) : in->T;
        const float *q = in->qk + t0 * in->qk_stride, *k = q + (int64_t)d->n_k_head * d->d_k;
        const float *v = in->v + t0 * in->v_stride;
        const float *g = in->g + t0 * d->n_v_head, *b = in->beta + t0 * d->n_v_head;
        if (chunk)
            gdn_delta_rule_chunked(d, n, chunk, q, k, in->qk_stride, v, in->v_stride, g, b, state, o + t0 * nvd,
                                   nvd, scratch, tp);
        else
            gdn_delta_rule_recurrent(d, n, q, k, in->qk_stride, v, in->v_stride, g, b, state, o + t0 * nvd, nvd,
                                     tp);
        t0 += n;
    }
    free(scratch);
}

static double rel_err_d(const float *a, const double *b, int64_t n) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return m > 0 ? e / m : e;
}

static void test_recurrent_vs_ref(struct threadpool *tp) {
    const struct gdn_dims dims[] = {{2, 4, 32, 32}, {2, 2, 16, 24}, {1, 3, 128, 128}};
    for (size_t c = 0; c < ARRAY_LEN(dims); c++) {
        struct rule_inputs in;
        const int T = 19;
        make_inputs(&in, dims[c], T);
        const struct gdn_dims *d = &in.d;
        const int64_t nvd = (int64_t)d->n_v_head * d->d_v, ns = nvd * d->d_k;
        double *o_ref = malloc(sizeof(double) * (size_t)(T * nvd)), *S_ref = malloc(sizeof(double) * (size_t)ns);
        ref_rule(&in, o_ref, S_ref);
        float *o = malloc(sizeof(float) * (size_t)(T * nvd)), *S = malloc(sizeof(float) * (size_t)ns);
        run_rule(&in, 0, 0, o, S, tp);
        double eo = rel_err_d(o, o_ref, T * nvd);
        /* our state is [m][j][i]; the reference [m][i][j] */
        double es = 0, ms = 0;
        for (int m = 0; m < d->n_v_head; m++)
            for (int j = 0; j < d->d_v; j++)
                for (int i = 0; i < d->d_k; i++) {
                    double r = S_ref[((int64_t)m * d->d_k + i) * d->d_v + j];
                    es = fmax(es, fabs(S[((int64_t)m * d->d_v + j) * d->d_k + i] - r));
                    ms = fmax(ms, fabs(r));
                }
        CHECK_MSG(eo < 1e-5, "dims %zu: recurrent output err %g", c, eo);
        CHECK_MSG(es / ms < 1e-5, "dims %zu: recurrent state err %g", c, es / ms);
        /* Split into single-token decode steps: same result. */
        float *o2 = malloc(sizeof(float) * (size_t)(T * nvd)), *S2 = malloc(sizeof(float) * (size_t)ns);
        run_rule(&in, 0, 1, o2, S2, NULL);
        CHECK(rel_err(o2, o, T * nvd) == 0 && rel_err(S2, S, ns) == 0);
        free(o_ref); free(S_ref); free(o); free(S); free(o2); free(S2);
        free_inputs(&in);
    }
}

/* Chunked vs recurrent for every length 1..max_T, state carried in and out. */
static void test_chunked_sweep(struct gdn_dims d, int chunk, int max_T, int step, struct threadpool *tp) {
    double worst_o = 0, worst_s = 0;
    int bad = 0;
    for (int T = 1; T <= max_T; T += step) {
        struct rule_inputs in;
        make_inputs(&in, d, T);
        const int64_t nvd = (int64_t)d.n_v_head * d.d_v, ns = nvd * d.d_k;
        float *o_r = malloc(sizeof(float) * (size_t)(T * nvd)), *S_r = malloc(sizeof(float) * (size_t)ns);
        float *o_c = malloc(sizeof(float) * (size_t)(T * nvd)), *S_c = malloc(sizeof(float) * (size_t)ns);
        run_rule(&in, 0, 0, o_r, S_r, NULL);
        run_rule(&in, chunk, 0, o_c, S_c, tp);
        double eo = rel_err(o_c, o_r, T * nvd), es = rel_err(S_c, S_r, ns);
        worst_o = fmax(worst_o, eo);
        worst_s = fmax(worst_s, es);
        if (!(eo < 1e-4 && es < 1e-4)) {
            if (bad++ < 5) fprintf(stderr, "chunk %d T %d: output err %g state err %g\n", chunk, T, eo, es);
        }
        free(o_r); free(S_r); free(o_c); free(S_c);
        free_inputs(&in);
    }
    CHECK_MSG(bad == 0, "chunk %d dims %d/%d/%d/%d: %d lengths over 1e-4", chunk, d.n_k_head, d.n_v_head, d.d_k,
              d.d_v, bad);
    printf("chunked vs recurrent, chunk %d, dims k%d v%d dk%d dv%d, T 1..%d: max rel err output %.2e state %.2e\n",
           chunk, d.n_k_head, d.n_v_head, d.d_k, d.d_v, max_T, worst_o, worst_s);
}

/* Prefill in chunked pieces of assorted sizes then decode steps = one recurrent pass. */
static void test_chunked_pieces(struct threadpool *tp) {
    struct gdn_dims d = {2, 4, 32, 32};
    const int T = 150;
    struct rule_inputs in;
    make_inputs(&in, d, T);
    const int64_t nvd = (int64_t)d.n_v_head * d.d_v, ns = nvd * d.d_k;
    float *o_r = malloc(sizeof(float) * (size_t)(T * nvd)), *S_r = malloc(sizeof(float) * (size_t)ns);
    float *o_c = malloc(sizeof(float) * (size_t)(T * nvd)), *S_c = malloc(sizeof(float) * (size_t)ns);
    run_rule(&in, 0, 0, o_r, S_r, NULL);
    for (int split = 1; split <= 70; split += 23) {
        run_rule(&in, 64, split, o_c, S_c, tp);
        double eo = rel_err(o_c, o_r, T * nvd), es = rel_err(S_c, S_r, ns);
        CHECK_MSG(eo < 1e-4 && es < 1e-4, "pieces of %d: output err %g state err %g", split, eo, es);
    }
    free(o_r); free(S_r); free(o_c); free(S_c);
    free_inputs(&in);
}

/* ---- the bf16 state's conversions: every vector form gives the scalar rule's bits ---- */

static void test_bf16_conv(void) {
    const int64_t n = 4096 + 13; /* a tail past every vector width */
    float *f = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
    uint16_t *h = malloc(2 * (size_t)n), *ref = malloc(2 * (size_t)n), *src = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)test_rand_u64();
        if (i % 7 == 1) u = (u & 0xffff0000u) | 0x8000u;        /* ties, both parities of the kept bit */
        if (i % 11 == 2) u = (u & 0x807fffffu) | 0x7f800000u;   /* NaNs (and an infinity where the mantissa is 0) */
        if (i % 13 == 3) u = (u & 0x80000000u) | 0x7f800000u;   /* infinities */
        if (i % 17 == 4) u &= 0x807fffffu;                      /* subnormals and zeros */
        if (i % 19 == 5) u = (u & 0x80000000u) | 0x7f7fffffu;   /* the largest finite: rounds to infinity */
        memcpy(f + i, &u, 4);
        ref[i] = fp32_to_bf16(f[i]);
        src[i] = (uint16_t)test_rand_u64();
    }
    size_t bad = 0;
    for (int form = 0; form < 3; form++) {
        const int isa = quant_isa_active();
        if ((form == 1 && isa < QUANT_ISA_AVX2) || (form == 2 && isa < QUANT_ISA_AVX512)) continue;
        memset(h, 0, 2 * (size_t)n);
        memset(w, 0, sizeof(float) * (size_t)n);
        if (form == 0) { gdn_bf16_narrow(h, f, n); gdn_bf16_widen(w, src, n); }
        else if (form == 1) { gdn_bf16_narrow_avx2(h, f, n); gdn_bf16_widen_avx2(w, src, n); }
        else { gdn_bf16_narrow_avx512(h, f, n); gdn_bf16_widen_avx512(w, src, n); }
        size_t bn = 0, bw = 0;
        for (int64_t i = 0; i < n; i++) {
            bn += h[i] != ref[i];
            const float e = bf16_to_fp32(src[i]);
            bw += memcmp(&w[i], &e, 4) != 0;
        }
        CHECK_MSG(bn == 0 && bw == 0, "bf16 state conversions, form %d: %zu narrowed, %zu widened differ from the scalar rule", form, bn, bw);
        bad += bn + bw;
    }
    printf("bf16 state conversions: %zu of %lld elements differ from the scalar rule\n", bad, (long long)n);
    free(f); free(w); free(h); free(ref); free(src);
    /* a decode token on a bf16 head, row by row, against the head widened, the f32 recurrence and the rounding back */
    for (int form = 1; form < 3; form++) {
        const int isa = quant_isa_active();
        if ((form == 1 && isa < QUANT_ISA_AVX2) || (form == 2 && isa < QUANT_ISA_AVX512)) continue;
        const int dk = 128, dv = 64;
        float *s32 = rand_vec((int64_t)dk * dv, 0.5f), *q = rand_vec(dk, 0.3f), *k = rand_vec(dk, 0.3f), *v = rand_vec(dv, 1.0f);
        uint16_t *a = malloc(2 * (size_t)(dk * dv)), *b = malloc(2 * (size_t)(dk * dv));
        for (int64_t i = 0; i < (int64_t)dk * dv; i++) a[i] = b[i] = fp32_to_bf16(s32[i]);
        float oa[64], ob[64];
        const float g = -0.05f, beta = 0.7f;
        for (int t = 0; t < 3; t++) { /* three tokens in turn, each rounded */
            gdn_bf16_widen(s32, b, (int64_t)dk * dv);
            if (form == 2) {
                gdn_recurrent_head_bf16_avx512(a, dk, dv, q, k, v, g, beta, oa);
                gdn_recurrent_head_avx512(s32, dk, dv, 1, q, k, dk, v, dv, &g, &beta, 1, ob, dv);
            } else {
                gdn_recurrent_head_bf16_avx2(a, dk, dv, q, k, v, g, beta, oa);
                gdn_recurrent_head_avx2(s32, dk, dv, 1, q, k, dk, v, dv, &g, &beta, 1, ob, dv);
            }
            gdn_bf16_narrow(b, s32, (int64_t)dk * dv);
        }
        size_t ds = 0, dout = 0;
        for (int64_t i = 0; i < (int64_t)dk * dv; i++) ds += a[i] != b[i];
        for (int j = 0; j < dv; j++) dout += memcmp(&oa[j], &ob[j], 4) != 0;
        CHECK_MSG(ds == 0 && dout == 0, "bf16 head by rows, form %d: %zu state words, %zu outputs differ", form, ds, dout);
        free(s32); free(q); free(k); free(v); free(a); free(b);
    }
}

int main(void) {
    test_seed_auto("test_gdn");
    test_bf16_conv();
    struct threadpool *tp = threadpool_create(2);
    test_conv(tp);
    test_norms_gates();
    test_recurrent_vs_ref(tp);
    test_recurrent_vs_ref(NULL);
    test_chunked_sweep((struct gdn_dims){2, 4, 32, 32}, 64, 130, 1, tp);
    test_chunked_sweep((struct gdn_dims){2, 2, 16, 8}, 16, 40, 1, NULL);
    test_chunked_sweep((struct gdn_dims){1, 2, 128, 128}, 64, 130, 43, tp);
    test_chunked_pieces(tp);
    threadpool_destroy(tp);
    return test_finish("test_gdn");
}
