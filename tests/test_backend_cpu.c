/* CPU backend ops: every fast (threaded) op against the plain reference backend on fresh random data,
 * bit for bit, with 1, 2 and 3 threads (the thread count must not change a bit); the reference ops
 * against independent naive formulas (double precision, dense attention, dequantized matmul);
 * and bad input (batch fields, shapes, formats) giving errors instead of crashes. */
#include <string.h>
#include "backend/backend.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"

#define N_FAST 3
static struct backend *ref_be, *fast_be[N_FAST];

static float *rand_vec(int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = scale * test_rand_normal();
    return v;
}

static bool same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

static double max_rel_err(const float *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += (a[i] - ref[i]) * (a[i] - ref[i]); den += ref[i] * ref[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A batch of n_seqs sequences, each with n_new new tokens after n_past cached ones, with shuffled
 * (non-contiguous) block tables drawn from one pool. */
struct test_batch {
    struct bk_batch b;
    int32_t *tok, *pos, *seq, *rows;
    struct bk_seq *seqs;
    int32_t *tables;
    int32_t n_blocks_pool;
};

static void make_batch(struct test_batch *tb, int n_seqs, const int *n_past, const int *n_new, int n_vocab) {
    memset(tb, 0, sizeof(*tb));
    int total = 0, blocks = 0;
    for (int s = 0; s < n_seqs; s++) { total += n_new[s]; blocks += CEIL_DIV(n_past[s] + n_new[s], BK_KV_BLOCK); }
    tb->tok = malloc(sizeof(int32_t) * (size_t)total);
    tb->pos = malloc(sizeof(int32_t) * (size_t)total);
    tb->seq = malloc(sizeof(int32_t) * (size_t)total);
    tb->rows = malloc(sizeof(int32_t) * (size_t)total);
    tb->seqs = calloc((size_t)n_seqs, sizeof(struct bk_seq));
    tb->tables = malloc(sizeof(int32_t) * (size_t)blocks);
    /* a random permutation of the pool's blocks */
    for (int i = 0; i < blocks; i++) tb->tables[i] = i;
    for (int i = blocks - 1; i > 0; i--) {
        int j = (int)(test_rand_u64() % (uint64_t)(i + 1));
        int32_t t = tb->tables[i]; tb->tables[i] = tb->tables[j]; tb->tables[j] = t;
    }
    tb->n_blocks_pool = blocks;
    int t = 0, off = 0;
    for (int s = 0; s < n_seqs; s++) {
        int nb = CEIL_DIV(n_past[s] + n_new[s], BK_KV_BLOCK);
        tb->seqs[s].block_table = tb->tables + off;
        tb->seqs[s].n_blocks = nb;
        tb->seqs[s].state_slot = -1;
        off += nb;
    }
    /* interleave the sequences' rows the way a scheduler might (round robin), positions increasing */
    int *next = calloc((size_t)n_seqs, sizeof(int));
    while (t < total)
        for (int s = 0; s < n_seqs; s++)
            if (next[s] < n_new[s]) {
                tb->tok[t] = (int32_t)(test_rand_u64() % (uint64_t)n_vocab);
                tb->pos[t] = n_past[s] + next[s]++;
                tb->seq[t] = s;
                tb->rows[t] = t;
                t++;
            }
    free(next);
    tb->b = (struct bk_batch){.n_tokens = total, .token_ids = tb->tok, .pos = tb->pos, .seq_idx = tb->seq, .n_seqs = n_seqs,
                              .seqs = tb->seqs, .n_logits = total, .logit_rows = tb->rows};
}

static void free_batch(struct test_batch *tb) {
    free(tb->tok); free(tb->pos); free(tb->seq); free(tb->rows); free(tb->seqs); free(tb->tables);
}

static void set_batch_all(const struct bk_batch *b) {
    CHECK(ref_be->ops->batch_set(ref_be, b) == VLLMC_OK);
    for (int i = 0; i < N_FAST; i++) CHECK(fast_be[i]->ops->batch_set(fast_be[i], b) == VLLMC_OK);
}

/* ---- rmsnorm / rmsnorm_quantize / quantize / swiglu ---- */

static void test_norms(void) {
    const int64_t R = 5, C = 768;
    float *x = rand_vec(R * C, 3.0f), *w = rand_vec(C, 1.0f);
    for (int64_t i = 0; i < C; i++) w[i] += 1.0f;
    float *out_ref = malloc(sizeof(float) * (size_t)(R * C)), *out = malloc(sizeof(float) * (size_t)(R * C));
    CHECK(ref_be->ops->rmsnorm(ref_be, x, 0, w, 1e-6f, R, C, out_ref, 0) == VLLMC_OK);
    /* vs the formula in double */
    double *want = malloc(sizeof(double) * (size_t)(R * C));
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t i = 0; i < C; i++) ss += (double)x[r * C + i] * x[r * C + i];
        double sc = 1.0 / sqrt(ss / C + 1e-6);
        for (int64_t i = 0; i < C; i++) want[r * C + i] = x[r * C + i] * sc * w[i];
    }
    CHECK(max_rel_err(out_ref, want, R * C) < 1e-6);
    for (int i = 0; i < N_FAST; i++) {
        CHECK(fast_be[i]->ops->rmsnorm(fast_be[i], x, 0, w, 1e-6f, R, C, out, 0) == VLLMC_OK);
        CHECK(same_bits(out, out_ref, sizeof(float) * (size_t)(R * C)));
    }
    /* strided, in place, per-head (q_norm style): rows of 64 inside rows of 768 */
    float *xs = malloc(sizeof(float) * (size_t)(R * C)), *xs2 = malloc(sizeof(float) * (size_t)(R * C));
    memcpy(xs, x, sizeof(float) * (size_t)(R * C));
    memcpy(xs2, x, sizeof(float) * (size_t)(R * C));
    CHECK(ref_be->ops->rmsnorm(ref_be, xs, 128, w, 1e-6f, R * 6, 64, xs, 128) == VLLMC_OK);
    CHECK(fast_be[1]->ops->rmsnorm(fast_be[1], xs2, 128, w, 1e-6f, R * 6, 64, xs2, 128) == VLLMC_OK);
    CHECK(same_bits(xs, xs2, sizeof(float) * (size_t)(R * C)));
    CHECK(xs[64] == x[64] && xs[R * C - 1] == x[R * C - 1]); /* the gaps are untouched */

    /* rmsnorm_quantize into Q8_0 + Q8_K + F16, and swiglu_quantize */
    const uint32_t fmts = BK_ACT_BIT(BK_ACT_Q8_0) | BK_ACT_BIT(BK_ACT_Q8_K) | BK_ACT_BIT(BK_ACT_F16) | BK_ACT_BIT(BK_ACT_Q8_1);
    struct bk_act a_ref, a_fast[N_FAST];
    CHECK(bk_act_alloc(ref_be, R, C, fmts, &a_ref) == VLLMC_OK);
    CHECK(ref_be->ops->rmsnorm_quantize(ref_be, x, w, 1e-6f, R, &a_ref) == VLLMC_OK);
    CHECK(a_ref.n_rows == R && same_bits(a_ref.x, out_ref, sizeof(float) * (size_t)(R * C)));
    /* the Q8_0 rows are quantize_row_q8_0 of the f32 rows */
    block_q8_0 *q = malloc(bk_act_row_bytes(BK_ACT_Q8_0, C));
    quantize_row_q8_0(out_ref + 2 * C, q, C);
    CHECK(same_bits(q, (char *)a_ref.q[BK_ACT_Q8_0] + 2 * bk_act_row_bytes(BK_ACT_Q8_0, C), bk_act_row_bytes(BK_ACT_Q8_0, C)));
    free(q);
    for (int i = 0; i < N_FAST; i++) {
        CHECK(bk_act_alloc(fast_be[i], R, C, fmts, &a_fast[i]) == VLLMC_OK);
        CHECK(fast_be[i]->ops->rmsnorm_quantize(fast_be[i], x, w, 1e-6f, R, &a_fast[i]) == VLLMC_OK);
        for (int f = 0; f < BK_ACT_NFMT; f++)
            if (fmts & BK_ACT_BIT(f)) CHECK_MSG(same_bits(a_fast[i].q[f], a_ref.q[f], bk_act_row_bytes(f, C) * R), "fmt %s", bk_act_fmt_name(f));
        CHECK(same_bits(a_fast[i].x, a_ref.x, sizeof(float) * (size_t)(R * C)));
    }
    float *g = rand_vec(R * C, 2.0f), *u = rand_vec(R * C, 2.0f);
    CHECK(ref_be->ops->swiglu_quantize(ref_be, g, u, 0, R, &a_ref) == VLLMC_OK);
    double worst = 0;
    for (int64_t i = 0; i < R * C; i++) {
        double want_i = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        worst = fmax(worst, fabs(a_ref.x[i] - want_i) / (fabs(want_i) + 1e-3));
    }
    CHECK(worst < 1e-5);
    for (int i = 0; i < N_FAST; i++) {
        CHECK(fast_be[i]->ops->swiglu_quantize(fast_be[i], g, u, 0, R, &a_fast[i]) == VLLMC_OK);
        for (int f = 0; f < BK_ACT_NFMT; f++)
            if (fmts & BK_ACT_BIT(f)) CHECK(same_bits(a_fast[i].q[f], a_ref.q[f], bk_act_row_bytes(f, C) * R));
        /* plain quantize of the same rows gives the same bytes */
        memset(a_fast[i].q[BK_ACT_Q8_K], 0, bk_act_row_bytes(BK_ACT_Q8_K, C) * R);
        a_fast[i].n_rows = R;
        CHECK(fast_be[i]->ops->quantize(fast_be[i], &a_fast[i]) == VLLMC_OK);
        CHECK(same_bits(a_fast[i].q[BK_ACT_Q8_K], a_ref.q[BK_ACT_Q8_K], bk_act_row_bytes(BK_ACT_Q8_K, C) * R));
        bk_act_free(fast_be[i], &a_fast[i]);
    }
    /* too many rows: an error */
    CHECK(ref_be->ops->rmsnorm_quantize(ref_be, x, w, 1e-6f, R + 1, &a_ref) == VLLMC_ERR_INVALID);
    CHECK(fast_be[0]->ops->swiglu_quantize(fast_be[0], g, u, 0, R + 1, &a_ref) == VLLMC_ERR_INVALID);
    bk_act_free(ref_be, &a_ref);
    free(x); free(w); free(out_ref); free(out); free(want); free(xs); free(xs2); free(g); free(u);
}

/* ---- matmul over several weights sharing one activation ---- */

static void make_weight(struct backend *be, uint32_t type, int64_t n_in, int64_t n_out, const float *f, struct bk_tensor *t,
                        void **raw) {
    uint64_t rs = quant_row_size(type, n_in);
    char *data = malloc(rs * (uint64_t)n_out);
    for (int64_t r = 0; r < n_out; r++) VLLMC_ASSERT(quantize_row_ref(type, f + r * n_in, data + rs * (uint64_t)r, n_in) == VLLMC_OK);
    int64_t ne[2] = {n_in, n_out};
    VLLMC_ASSERT(be->ops->weight_upload(be, data, type, 2, ne, t) == VLLMC_OK);
    *raw = data;
}

static void test_matmul(void) {
    const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                              GGML_TYPE_Q6_K, GGML_TYPE_Q5_K, GGML_TYPE_Q4_1};
    const int64_t C = 512;
    const int64_t rows_out[3] = {200, 48, 67}; /* odd sizes: chunk edges */
    for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
        for (int n_rows = 1; n_rows <= 13; n_rows += 6) { /* 13 rows: the batched Q4_0/Q5_0/Q8_0 kernels */
            /* three weights of types (t, t, Q8_0) so one activation carries two formats */
            const uint32_t wt[3] = {types[ti], types[ti], GGML_TYPE_Q8_0};
            struct bk_tensor w[3];
            void *raw[3];
            float *wf[3];
            for (int k = 0; k < 3; k++) {
                wf[k] = rand_vec(C * rows_out[k], 0.05f);
                make_weight(ref_be, wt[k], C, rows_out[k], wf[k], &w[k], &raw[k]);
            }
            float *bias = rand_vec(rows_out[0], 1.0f);
            uint32_t fmts = 0;
            for (int k = 0; k < 3; k++) fmts |= BK_ACT_BIT(bk_act_fmt_for_weight(wt[k]));
            float *x = rand_vec(C * n_rows, 1.0f);
            struct bk_act act;
            CHECK(bk_act_alloc(ref_be, n_rows, C, fmts, &act) == VLLMC_OK);
            memcpy(act.x, x, sizeof(float) * (size_t)(C * n_rows));
            act.n_rows = n_rows;
            CHECK(ref_be->ops->quantize(ref_be, &act) == VLLMC_OK);
            float *y_ref[3], *y[3];
            struct bk_matmul_out o[3];
            for (int k = 0; k < 3; k++) {
                y_ref[k] = calloc((size_t)(rows_out[k] * n_rows + 8), sizeof(float));
                y[k] = calloc((size_t)(rows_out[k] * n_rows + 8), sizeof(float));
                o[k] = (struct bk_matmul_out){.w = &w[k], .bias = k == 0 ? bias : NULL, .y = y_ref[k]};
            }
            CHECK(ref_be->ops->matmul(ref_be, &act, 3, o) == VLLMC_OK);
            /* the reference against dequantized weights x f32 activations (activation quantization error) */
            for (int k = 0; k < 3; k++) {
                double *want = malloc(sizeof(double) * (size_t)(rows_out[k] * n_rows));
                float *deq = malloc(sizeof(float) * (size_t)C);
                for (int64_t r = 0; r < rows_out[k]; r++) {
                    dequantize_row(wt[k], (char *)raw[k] + w[k].row_size_bytes * (uint64_t)r, deq, C);
                    for (int i = 0; i < n_rows; i++) {
                        double s = k == 0 ? bias[r] : 0;
                        for (int64_t c = 0; c < C; c++) s += (double)deq[c] * x[i * C + c];
                        want[i * rows_out[k] + r] = s;
                    }
                }
                double tol = wt[k] == GGML_TYPE_F32 ? 1e-6 : wt[k] == GGML_TYPE_F16 ? 1e-6 : 2e-2;
                CHECK_MSG(max_rel_err(y_ref[k], want, rows_out[k] * n_rows) < tol, "type %s rows %d: %g", quant_traits(wt[k])->name,
                          n_rows, max_rel_err(y_ref[k], want, rows_out[k] * n_rows));
                free(want);
                free(deq);
            }
            for (int i = 0; i < N_FAST; i++) {
                for (int k = 0; k < 3; k++) { o[k].y = y[k]; memset(y[k], 0xff, sizeof(float) * (size_t)(rows_out[k] * n_rows + 8)); }
                CHECK(fast_be[i]->ops->matmul(fast_be[i], &act, 3, o) == VLLMC_OK);
                for (int k = 0; k < 3; k++) {
                    CHECK_MSG(same_bits(y[k], y_ref[k], sizeof(float) * (size_t)(rows_out[k] * n_rows)), "type %s, %d threads, rows %d",
                              quant_traits(wt[k])->name, fast_be[i]->n_threads, n_rows);
                    uint32_t guard;
                    memcpy(&guard, &y[k][rows_out[k] * n_rows], 4);
                    CHECK(guard == 0xffffffffu); /* nothing written past the output */
                }
            }
            /* each row alone (a one-row view of the activation) gets the bits it got in the batch */
            for (int i = 0; i < n_rows; i++) {
                struct bk_act one = act;
                one.x = act.x + (int64_t)i * C;
                for (int f = 0; f < BK_ACT_NFMT; f++)
                    if (act.q[f]) one.q[f] = (char *)act.q[f] + (size_t)i * bk_act_row_bytes(f, C);
                one.n_rows = one.max_rows = 1;
                for (int k = 0; k < 3; k++) { o[k].y = y[k]; memset(y[k], 0xff, sizeof(float) * (size_t)rows_out[k]); }
                CHECK(fast_be[1]->ops->matmul(fast_be[1], &one, 3, o) == VLLMC_OK);
                for (int k = 0; k < 3; k++)
                    CHECK_MSG(same_bits(y[k], y_ref[k] + (int64_t)i * rows_out[k], sizeof(float) * (size_t)rows_out[k]),
                              "type %s, row %d of %d alone", quant_traits(wt[k])->name, i, n_rows);
            }
            /* a format that was not prepared is an error, not a crash */
            struct bk_act bad = act;
            bad.fmts = BK_ACT_BIT(BK_ACT_F32);
            if (wt[0] != GGML_TYPE_F32 && wt[0] != GGML_TYPE_F16) {
                CHECK(ref_be->ops->matmul(ref_be, &bad, 1, o) == VLLMC_ERR_INVALID);
                CHECK(fast_be[1]->ops->matmul(fast_be[1], &bad, 1, o) == VLLMC_ERR_INVALID);
            }
            for (int k = 0; k < 3; k++) { ref_be->ops->weight_free(ref_be, &w[k]); free(raw[k]); free(wf[k]); free(y[k]); free(y_ref[k]); }
            bk_act_free(ref_be, &act);
            free(x);
            free(bias);
        }
    }
}

/* ---- embed, get_rows, logits ---- */

static void test_embed_logits(void) {
    const int64_t E = 256, V = 300;
    float *table = rand_vec(E * V, 1.0f);
    struct bk_tensor tq;
    void *raw;
    make_weight(ref_be, GGML_TYPE_Q4_K, E, V, table, &tq, &raw);
    struct test_batch tb;
    make_batch(&tb, 2, (int[]){3, 0}, (int[]){4, 5}, (int)V);
    set_batch_all(&tb.b);
    float *e_ref = malloc(sizeof(float) * (size_t)(E * tb.b.n_tokens)), *e = malloc(sizeof(float) * (size_t)(E * tb.b.n_tokens));
    CHECK(ref_be->ops->embed(ref_be, &tq, e_ref) == VLLMC_OK);
    float *deq = malloc(sizeof(float) * (size_t)E);
    dequantize_row(GGML_TYPE_Q4_K, (char *)raw + tq.row_size_bytes * (uint64_t)tb.tok[3], deq, E);
    CHECK(same_bits(deq, e_ref + 3 * E, sizeof(float) * (size_t)E));
    for (int i = 0; i < N_FAST; i++) {
        CHECK(fast_be[i]->ops->embed(fast_be[i], &tq, e) == VLLMC_OK);
        CHECK(same_bits(e, e_ref, sizeof(float) * (size_t)(E * tb.b.n_tokens)));
    }
    /* logits of rows 2 and 7 with argmax */
    struct bk_batch b2 = tb.b;
    int32_t lr[2] = {2, 7};
    b2.n_logits = 2;
    b2.logit_rows = lr;
    set_batch_all(&b2);
    float *xl = malloc(sizeof(float) * (size_t)(2 * E));
    CHECK(ref_be->ops->get_rows(ref_be, e_ref, E, xl) == VLLMC_OK);
    CHECK(same_bits(xl + E, e_ref + 7 * E, sizeof(float) * (size_t)E));
    struct bk_act act;
    CHECK(bk_act_alloc(ref_be, 2, E, BK_ACT_BIT(BK_ACT_Q8_K), &act) == VLLMC_OK);
    CHECK(ref_be->ops->rmsnorm_quantize(ref_be, xl, NULL, 1e-6f, 2, &act) == VLLMC_OK);
    float *lg_ref = malloc(sizeof(float) * (size_t)(2 * V)), *lg = malloc(sizeof(float) * (size_t)(2 * V));
    int32_t am_ref[2], am[2];
    CHECK(ref_be->ops->logits(ref_be, &act, &tq, lg_ref, am_ref) == VLLMC_OK);
    for (int r = 0; r < 2; r++) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (lg_ref[r * V + i] > lg_ref[r * V + best]) best = i;
        CHECK(am_ref[r] == best);
    }
    for (int i = 0; i < N_FAST; i++) {
        CHECK(fast_be[i]->ops->logits(fast_be[i], &act, &tq, lg, am) == VLLMC_OK);
        CHECK(same_bits(lg, lg_ref, sizeof(float) * (size_t)(2 * V)) && am[0] == am_ref[0] && am[1] == am_ref[1]);
    }
    /* a token id past the table is an error */
    tb.tok[1] = (int32_t)V;
    set_batch_all(&tb.b);
    CHECK(ref_be->ops->embed(ref_be, &tq, e_ref) == VLLMC_ERR_INVALID);
    CHECK(fast_be[1]->ops->embed(fast_be[1], &tq, e) == VLLMC_ERR_INVALID);
    bk_act_free(ref_be, &act);
    ref_be->ops->weight_free(ref_be, &tq);
    free(raw); free(table); free(e_ref); free(e); free(deq); free(xl); free(lg_ref); free(lg);
    free_batch(&tb);
}

/* ---- rope ---- */

static void test_rope(void) {
    struct test_batch tb;
    make_batch(&tb, 2, (int[]){100, 5}, (int[]){3, 6}, 10);
    set_batch_all(&tb.b);
    const int32_t H = 3, D = 64, T = tb.b.n_tokens;
    float ff[16];
    for (int i = 0; i < 16; i++) ff[i] = 1.0f + (float)i * 0.5f;
    for (int mode = 0; mode < 2; mode++)
        for (int partial = 0; partial < 2; partial++) {
            struct bk_rope_params p = {.mode = mode ? BK_ROPE_NEOX : BK_ROPE_NORM, .n_rot = partial ? 32 : D, .freq_base = 10000.0f,
                                       .freq_scale = partial ? 0.5f : 1.0f, .freq_factors = partial ? ff : NULL};
            const int64_t ld = H * D + 7; /* strided rows */
            float *x = rand_vec(T * ld, 1.0f), *xr = malloc(sizeof(float) * (size_t)(T * ld)), *xf = malloc(sizeof(float) * (size_t)(T * ld));
            memcpy(xr, x, sizeof(float) * (size_t)(T * ld));
            CHECK(ref_be->ops->rope(ref_be, xr, ld, H, D, &p) == VLLMC_OK);
            /* the formula in double */
            double worst = 0;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) {
                    const float *src = x + t * ld + h * D;
                    const float *got = xr + t * ld + h * D;
                    for (int i = 0; i < p.n_rot / 2; i++) {
                        double th = p.freq_scale * tb.pos[t] * pow(p.freq_base, -2.0 * i / p.n_rot) / (p.freq_factors ? p.freq_factors[i] : 1.0);
                        int a = mode ? i : 2 * i, b = mode ? i + p.n_rot / 2 : 2 * i + 1;
                        double w0 = src[a] * cos(th) - src[b] * sin(th), w1 = src[a] * sin(th) + src[b] * cos(th);
                        worst = fmax(worst, fmax(fabs(got[a] - w0), fabs(got[b] - w1)));
                    }
                    for (int i = p.n_rot; i < D; i++) worst = fmax(worst, fabs(got[i] - src[i]));
                }
            CHECK_MSG(worst < 2e-3, "rope mode %d partial %d: %g", mode, partial, worst); /* f32 theta recurrence at pos ~100 */
            CHECK(xr[H * D + 3] == x[H * D + 3]); /* padding untouched */
            for (int i = 0; i < N_FAST; i++) {
                memcpy(xf, x, sizeof(float) * (size_t)(T * ld));
                CHECK(fast_be[i]->ops->rope(fast_be[i], xf, ld, H, D, &p) == VLLMC_OK);
                CHECK(same_bits(xf, xr, sizeof(float) * (size_t)(T * ld)));
            }
            free(x); free(xr); free(xf);
        }
    struct bk_rope_params bad = {.mode = BK_ROPE_NEOX, .n_rot = 65, .freq_base = 1e4f, .freq_scale = 1};
    float dummy[64 * 9 * 3];
    CHECK(ref_be->ops->rope(ref_be, dummy, 0, 1, 64, &bad) == VLLMC_ERR_INVALID);
    CHECK(fast_be[0]->ops->rope(fast_be[0], dummy, 0, 1, 64, &bad) == VLLMC_ERR_INVALID);
    free_batch(&tb);
}

/* ---- paged attention ---- */

static void test_attention(enum bk_kv_dtype dtype) {
    const int32_t H = 6, KVH = 2, D = 64, n_seqs = 3;
    const int n_past[3] = {0, 21, 40}, n_new[3] = {19, 1, 9};
    /* dense per-sequence K/V history in f32 (rounded to the cache type), for the naive check */
    int max_len = 64;
    float *Kh = malloc(sizeof(float) * (size_t)(n_seqs * max_len * KVH * D)), *Vh = malloc(sizeof(float) * (size_t)(n_seqs * max_len * KVH * D));
    struct test_batch tb;
    make_batch(&tb, n_seqs, n_past, n_new, 10);
    struct bk_kv_cache *kv_ref = NULL, *kv_fast[N_FAST];
    CHECK(ref_be->ops->kv_create(ref_be, dtype, 2, tb.n_blocks_pool, KVH, D, &kv_ref) == VLLMC_OK);
    for (int i = 0; i < N_FAST; i++) CHECK(fast_be[i]->ops->kv_create(fast_be[i], dtype, 2, tb.n_blocks_pool, KVH, D, &kv_fast[i]) == VLLMC_OK);
    const struct bk_attn_params p = {.n_head = H, .n_kv_head = KVH, .head_dim = D, .scale = 0.125f, .kv_layer = 1};
    /* Step 1: fill the past of each sequence with a prefill batch. */
    for (int step = 0; step < 2; step++) {
        int np[3], nn[3];
        for (int s = 0; s < n_seqs; s++) { np[s] = step ? n_past[s] : 0; nn[s] = step ? n_new[s] : n_past[s]; }
        struct test_batch sb;
        if (step == 0) {
            /* the same block tables as the final batch, with only the past rows */
            make_batch(&sb, n_seqs, np, (int[]){n_past[0] ? n_past[0] : 1, n_past[1], n_past[2]}, 10);
            free(sb.tables);
            sb.tables = NULL;
            for (int s = 0; s < n_seqs; s++) sb.seqs[s] = tb.seqs[s];
        } else {
            sb = tb;
        }
        (void)nn;
        set_batch_all(&sb.b);
        const int T = sb.b.n_tokens;
        float *q = rand_vec(T * H * D, 1.0f), *k = rand_vec(T * KVH * D, 1.0f), *v = rand_vec(T * KVH * D, 1.0f);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < KVH * D; i++) {
                float kk = k[t * KVH * D + i], vv = v[t * KVH * D + i];
                if (dtype == BK_KV_F16) { kk = fp16_to_fp32(fp32_to_fp16(kk)); vv = fp16_to_fp32(fp32_to_fp16(vv)); }
                Kh[((size_t)sb.seq[t] * max_len + (size_t)sb.pos[t]) * KVH * D + i] = kk;
                Vh[((size_t)sb.seq[t] * max_len + (size_t)sb.pos[t]) * KVH * D + i] = vv;
            }
        float *o_ref = malloc(sizeof(float) * (size_t)(T * H * D)), *o = malloc(sizeof(float) * (size_t)(T * H * D));
        CHECK(ref_be->ops->attention(ref_be, kv_ref, &p, q, 0, k, 0, v, 0, o_ref) == VLLMC_OK);
        /* naive dense causal attention per sequence */
        double *want = malloc(sizeof(double) * (size_t)(T * H * D));
        for (int t = 0; t < T; t++)
            for (int j = 0; j < H; j++) {
                const int kvh = j / (H / KVH), s = sb.seq[t], n = sb.pos[t] + 1;
                double sc[64], mx = -1e300, sum = 0;
                for (int tau = 0; tau < n; tau++) {
                    double d = 0;
                    for (int i = 0; i < D; i++) {
                        float qi = q[(t * H + j) * D + i];
                        if (dtype == BK_KV_F16) qi = fp16_to_fp32(fp32_to_fp16(qi));
                        d += (double)qi * Kh[((size_t)s * max_len + (size_t)tau) * KVH * D + (size_t)kvh * D + i];
                    }
                    sc[tau] = d * p.scale;
                    mx = fmax(mx, sc[tau]);
                }
                for (int tau = 0; tau < n; tau++) sum += (sc[tau] = exp(sc[tau] - mx));
                for (int i = 0; i < D; i++) {
                    double acc = 0;
                    for (int tau = 0; tau < n; tau++) acc += sc[tau] / sum * Vh[((size_t)s * max_len + (size_t)tau) * KVH * D + (size_t)kvh * D + i];
                    want[(t * H + j) * D + i] = acc;
                }
            }
        double err = max_rel_err(o_ref, want, T * H * D);
        CHECK_MSG(err < (dtype == BK_KV_F16 ? 2e-3 : 1e-5), "attention dtype %d step %d: rel err %g", (int)dtype, step, err);
        for (int i = 0; i < N_FAST; i++) {
            CHECK(fast_be[i]->ops->attention(fast_be[i], kv_fast[i], &p, q, 0, k, 0, v, 0, o) == VLLMC_OK);
            CHECK_MSG(same_bits(o, o_ref, sizeof(float) * (size_t)(T * H * D)), "attention fast %d threads step %d", fast_be[i]->n_threads, step);
        }
        free(q); free(k); free(v); free(o_ref); free(o); free(want);
        if (step == 0) { free(sb.tok); free(sb.pos); free(sb.seq); free(sb.rows); free(sb.seqs); }
    }
    /* the caches hold identical bytes */
    for (int i = 0; i < N_FAST; i++)
        CHECK(same_bits(kv_fast[i]->k[1], kv_ref->k[1], bk_kv_block_bytes(dtype, KVH, D) * (uint64_t)tb.n_blocks_pool) &&
              same_bits(kv_fast[i]->v[1], kv_ref->v[1], bk_kv_block_bytes(dtype, KVH, D) * (uint64_t)tb.n_blocks_pool));
    /* bad parameters */
    struct bk_attn_params bp = p;
    bp.kv_layer = 2;
    float z[1] = {0};
    CHECK(ref_be->ops->attention(ref_be, kv_ref, &bp, z, 0, z, 0, z, 0, z) == VLLMC_ERR_INVALID);
    bp = p;
    bp.n_kv_head = 3;
    CHECK(fast_be[0]->ops->attention(fast_be[0], kv_fast[0], &bp, z, 0, z, 0, z, 0, z) == VLLMC_ERR_INVALID);
    ref_be->ops->kv_destroy(ref_be, kv_ref);
    for (int i = 0; i < N_FAST; i++) fast_be[i]->ops->kv_destroy(fast_be[i], kv_fast[i]);
    free(Kh); free(Vh);
    free_batch(&tb);
}

/* ---- residual add, 1-D weight upload ---- */

static void test_add_upload(void) {
    const int64_t R = 9, C = 1000;
    float *y0 = rand_vec(R * C, 1.0f), *x = rand_vec(R * C, 1.0f);
    float *yr = malloc(sizeof(float) * (size_t)(R * C)), *yf = malloc(sizeof(float) * (size_t)(R * C));
    memcpy(yr, y0, sizeof(float) * (size_t)(R * C));
    CHECK(ref_be->ops->add(ref_be, yr, x, R, C) == VLLMC_OK);
    bool ok = true;
    for (int64_t i = 0; i < R * C; i++) ok &= yr[i] == y0[i] + x[i];
    CHECK(ok);
    for (int i = 0; i < N_FAST; i++) {
        memcpy(yf, y0, sizeof(float) * (size_t)(R * C));
        CHECK(fast_be[i]->ops->add(fast_be[i], yf, x, R, C) == VLLMC_OK);
        CHECK(same_bits(yf, yr, sizeof(float) * (size_t)(R * C)));
    }
    /* a 1-D F16 tensor (e.g. a norm weight) becomes an owned F32 copy; a 2-D one stays in place */
    uint16_t h[64];
    for (int i = 0; i < 64; i++) h[i] = fp32_to_fp16(x[i]);
    struct bk_tensor t;
    CHECK(fast_be[0]->ops->weight_upload(fast_be[0], h, GGML_TYPE_F16, 1, (int64_t[]){64}, &t) == VLLMC_OK);
    CHECK(t.type == GGML_TYPE_F32 && t.data != (void *)h && ((float *)t.data)[5] == fp16_to_fp32(h[5]));
    fast_be[0]->ops->weight_free(fast_be[0], &t);
    CHECK(fast_be[0]->ops->weight_upload(fast_be[0], h, GGML_TYPE_F16, 2, (int64_t[]){32, 2}, &t) == VLLMC_OK);
    CHECK(t.type == GGML_TYPE_F16 && t.data == (void *)h && t.row_size_bytes == 64);
    fast_be[0]->ops->weight_free(fast_be[0], &t);
    /* a row that is not a whole number of blocks is refused */
    CHECK(fast_be[0]->ops->weight_upload(fast_be[0], h, GGML_TYPE_Q8_0, 2, (int64_t[]){48, 1}, &t) == VLLMC_ERR_CORRUPT);
    free(y0); free(x); free(yr); free(yf);
}

/* ---- batch validation ---- */

static void test_batch_checks(void) {
    struct test_batch tb;
    make_batch(&tb, 2, (int[]){0, 16}, (int[]){3, 2}, 10);
    struct bk_batch b = tb.b;
    CHECK(fast_be[0]->ops->batch_set(fast_be[0], &b) == VLLMC_OK);
    int32_t saved = tb.pos[0];
    tb.pos[0] = 16 * tb.seqs[tb.seq[0]].n_blocks; /* past the block table */
    CHECK(fast_be[0]->ops->batch_set(fast_be[0], &b) == VLLMC_ERR_INVALID);
    tb.pos[0] = -1;
    CHECK(ref_be->ops->batch_set(ref_be, &b) == VLLMC_ERR_INVALID);
    tb.pos[0] = saved;
    tb.seq[1] = 5;
    CHECK(fast_be[1]->ops->batch_set(fast_be[1], &b) == VLLMC_ERR_INVALID);
    tb.seq[1] = 1;
    int32_t lr[2] = {3, 1};
    b.n_logits = 2;
    b.logit_rows = lr; /* not ascending */
    CHECK(fast_be[0]->ops->batch_set(fast_be[0], &b) == VLLMC_ERR_INVALID);
    b = tb.b;
    b.n_tokens = 0;
    CHECK(fast_be[0]->ops->batch_set(fast_be[0], &b) == VLLMC_ERR_INVALID);
    /* positions of one sequence must increase */
    b = tb.b;
    int32_t p2 = tb.pos[2];
    tb.pos[2] = tb.pos[0];
    CHECK(fast_be[0]->ops->batch_set(fast_be[0], &b) == VLLMC_ERR_INVALID);
    tb.pos[2] = p2;
    struct bk_kv_cache *kv = NULL;
    CHECK(fast_be[0]->ops->kv_create(fast_be[0], (enum bk_kv_dtype)7, 1, 4, 2, 64, &kv) == VLLMC_ERR_UNSUPPORTED && !kv);
    CHECK(fast_be[0]->ops->kv_create(fast_be[0], BK_KV_F16, 1, 0, 2, 64, &kv) == VLLMC_ERR_INVALID && !kv);
    free_batch(&tb);
}

int main(void) {
    test_seed_auto("test_backend_cpu");
    CHECK(backend_cpu_create(1, true, &ref_be) == VLLMC_OK);
    for (int i = 0; i < N_FAST; i++) CHECK(backend_cpu_create(i + 1, false, &fast_be[i]) == VLLMC_OK);
    CHECK(fast_be[2]->n_threads == 3);
    test_norms();
    test_matmul();
    test_embed_logits();
    test_rope();
    test_attention(BK_KV_F32);
    test_attention(BK_KV_F16);
    test_add_upload();
    test_batch_checks();
    ref_be->ops->destroy(ref_be);
    for (int i = 0; i < N_FAST; i++) fast_be[i]->ops->destroy(fast_be[i]);
    return test_finish("test_backend_cpu");
}
