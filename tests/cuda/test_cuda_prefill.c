/* The CUDA backend's prefill paths against references, on fresh random inputs (needs a GPU; built by
 * `make CUDA=1 cuda-tests`):
 *  - weight dequantization to f16 (the GEMM path's first step): bit-exact against the f16 rounding of the CPU's
 *    dequantized value, for every type the path takes;
 *  - matmuls of >= 64 activation rows through the dense f16 GEMM: against the f64 product of the same
 *    f16-rounded operands (checks the GEMM itself: within 1e-5 of max |y|), and against the CPU reference
 *    backend (its Q8_K / Q8_0 activations round otherwise: within 1e-2 of max |y|); bias, ld_y and a weight the
 *    GEMM does not take (F32) in the same call; again with the GEMM multiplying the quantized activation's
 *    values (backend_cuda_set_gemm_act), the exact product then formed from the CPU's quantized rows;
 *  - the chunked Gated DeltaNet rule against the CPU reference (the token-by-token recurrence): one sequence
 *    of every length 65 .. 128 (a prompt ending at every offset within a chunk), then a continuation from the
 *    carried state; two sequences in one batch; outputs and state within 1e-4 relative (to max(|ref|, 1% of
 *    max |ref|): the f32 recurrence itself is no closer than ~5e-5 to exact arithmetic on elements near zero),
 *    conv state exact; batches that mix decode tokens, short runs and prompt chunks of 40 sequences, with the runs
 *    side by side (backend_cuda_set_gdn_runs) and without, the same way; short runs only: side by side = one walk, bit
 *    for bit;
 *  - the prefill attention kernel against the CPU reference: two sequences of several chunks each in one batch,
 *    then a continuation over the cached context; f32 cache within 1e-4, f16 within 5e-2 (the CPU rounds each
 *    probability to f16). */
#include <math.h>
#include <string.h>
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"
#include "cuda_pair.h"

#define N_GEMM_TYPES 15
static const uint32_t gemm_types[N_GEMM_TYPES] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0,
                                                  GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_F16,
                                                  GGML_TYPE_BF16, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_1, GGML_TYPE_Q5_1,
                                                  GGML_TYPE_MXFP4};

static void test_dequant_f16(void) {
    for (int ti = 0; ti < N_GEMM_TYPES; ti++) {
        const uint32_t type = gemm_types[ti];
        const int64_t E = type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_Q5_1 ||
                          type == GGML_TYPE_MXFP4 ? 896 : 768,
                      R = 37;
        struct pair_w w;
        make_weight(&w, type, E, R);
        uint16_t *g = malloc((size_t)(E * R) * 2);
        void *d = dev_put(NULL, (size_t)(E * R) * 2);
        CHECK(backend_cuda_weight_f16(gpu, &w.g, d) == VLLMC_OK);
        dev_get(g, d, (size_t)(E * R) * 2);
        float *row = malloc((size_t)E * 4);
        size_t bad = 0;
        for (int64_t r = 0; r < R; r++) {
            dequantize_row(type, w.host + quant_row_size(type, E) * (size_t)r, row, E);
            for (int64_t e = 0; e < E; e++) bad += g[r * E + e] != fp32_to_fp16(row[e]);
        }
        CHECK_MSG(bad == 0, "dequant f16 %s: %zu of %lld elements differ", quant_traits(type)->name, bad, (long long)(E * R));
        free(g); free(row);
        gpu->ops->free(gpu, d);
        free_weight(&w);
    }
    struct pair_w f;
    make_weight(&f, GGML_TYPE_F32, 64, 4);
    CHECK(backend_cuda_weight_f16(gpu, &f.g, NULL) == VLLMC_ERR_UNSUPPORTED);
    free_weight(&f);
}

/* Element e of activation row r as the GEMM multiplies it with act_q8 (backend_cuda_set_gemm_act): the value
 * d * q of the CPU's quantized row in the weight's activation format, in f32. */
static float act_q8_value(const struct bk_act *a, int fmt, int64_t r, int64_t e) {
    const uint8_t *row = (const uint8_t *)a->q[fmt] + (size_t)r * bk_act_row_bytes(fmt, a->n_cols);
    if (fmt == BK_ACT_Q8_K) {
        const block_q8_K *b = (const block_q8_K *)row + e / QK_K;
        return b->d * (float)b->qs[e % QK_K];
    }
    if (fmt == BK_ACT_Q8_1) {
        const block_q8_1 *b = (const block_q8_1 *)row + e / QK8_1;
        return fp16_to_fp32(b->d) * (float)b->qs[e % QK8_1];
    }
    const block_q8_0 *b = (const block_q8_0 *)row + e / QK8_0;
    return fp16_to_fp32(b->d) * (float)b->qs[e % QK8_0];
}

/* The matmul op at rows >= 64: every GEMM type plus an F32 weight in one call; the first output has a bias.
 * act_q8: the GEMM multiplies the quantized activation's values instead of the f32 rows. */
static void test_gemm_matmul(bool act_q8) {
    if (!backend_cuda_has_gemm(gpu)) { printf("test_cuda_prefill: no GEMM library: GEMM checks skipped\n"); return; }
    backend_cuda_set_gemm_act(gpu, act_q8);
    const int NO = N_GEMM_TYPES + 1;
    const int64_t E = 512 + 256 * (int64_t)(test_rand_u64() % 3);
    const int64_t nout[N_GEMM_TYPES + 1] = {300, 77, 129, 64, 96, 88, 53, 61, 70, 45, 58, 83, 47, 66, 74, 40};
    struct pair_w w[N_GEMM_TYPES + 1];
    for (int i = 0; i < NO; i++) make_weight(&w[i], i < N_GEMM_TYPES ? gemm_types[i] : GGML_TYPE_F32, E, nout[i]);
    const uint32_t fmts = BK_ACT_BIT(BK_ACT_Q8_K) | BK_ACT_BIT(BK_ACT_Q8_0) | BK_ACT_BIT(BK_ACT_Q8_1);
    const int64_t ld = 320;
    const int rows_list[3] = {64, 97, 5}; /* 5 rows: the quantized kernel, for the comparison of the two paths */
    for (int ri = 0; ri < 3; ri++) {
        const int rows = rows_list[ri];
        struct bk_act ra, ga;
        float *x = rand_buf((size_t)(rows * E), 1.0f);
        act_pair(rows, E, fmts, x, rows, &ra, &ga);
        float *bias = rand_buf((size_t)ld, 0.1f), *gbias = dev_put(bias, (size_t)ld * 4);
        float *ry[N_GEMM_TYPES + 1], *gy[N_GEMM_TYPES + 1];
        struct bk_matmul_out ro[N_GEMM_TYPES + 1], go[N_GEMM_TYPES + 1];
        for (int i = 0; i < NO; i++) {
            ry[i] = ref_put(NULL, (size_t)(rows * ld) * 4);
            float *poison = malloc((size_t)(rows * ld) * 4);
            for (int64_t k = 0; k < rows * ld; k++) poison[k] = NAN;
            gy[i] = dev_put(poison, (size_t)(rows * ld) * 4);
            free(poison);
            ro[i] = (struct bk_matmul_out){.w = &w[i].r, .bias = i == 0 ? bias : NULL, .y = ry[i], .ld_y = ld};
            go[i] = (struct bk_matmul_out){.w = &w[i].g, .bias = i == 0 ? gbias : NULL, .y = gy[i], .ld_y = ld};
        }
        CHECK(ref->ops->matmul(ref, &ra, NO, ro) == VLLMC_OK);
        CHECK(gpu->ops->matmul(gpu, &ga, NO, go) == VLLMC_OK);
        float *h = malloc((size_t)(rows * ld) * 4), *wr = malloc((size_t)E * 4);
        for (int i = 0; i < NO; i++) {
            const uint32_t type = w[i].r.type;
            dev_get(h, gy[i], (size_t)(rows * ld) * 4);
            double amax = 0, d_cpu = 0, d_f16 = 0, ymax = 0, cpu_over_bound = 0;
            bool nan = false;
            for (int64_t o = 0; o < nout[i]; o++) {
                dequantize_row(type, w[i].host + quant_row_size(type, E) * (size_t)o, wr, E);
                for (int r = 0; r < rows; r++) {
                    double s = 0;
                    const bool f16 = rows >= 64 && type != GGML_TYPE_F32; /* the GEMM path rounds both operands */
                    const int fmt = bk_act_fmt_for_weight(type);
                    /* bound on |GPU - CPU| for this output: the activations the two sides multiply (the CPU: its
                     * quantized values) differ by |x - xq|, the f16 operands by 2^-11 relative each, and the float
                     * sums by their order (2e-6 of sum |w x|, as test_cuda_ops bounds the mat-vec) */
                    double bnd = 0, swx = 0;
                    for (int64_t e = 0; e < E; e++) {
                        const float xq = fmt == BK_ACT_F32 ? x[r * E + e] : act_q8_value(&ra, fmt, r, e);
                        const float xa = f16 && act_q8 ? xq : x[r * E + e];
                        const float a = f16 ? fp16_to_fp32(fp32_to_fp16(xa)) : xa;
                        const float b = f16 ? fp16_to_fp32(fp32_to_fp16(wr[e])) : wr[e];
                        s += (double)a * b;
                        swx += fabs((double)wr[e] * x[r * E + e]);
                        bnd += fabs((double)wr[e]) * fabs((double)xa - xq) + (f16 ? fabs((double)a * b) * 0x1p-10 : 0.0);
                    }
                    bnd += 2e-6 * (swx + (i == 0 ? fabs(bias[o]) : 0.0));
                    if (i == 0) s += bias[o];
                    const float y = h[r * ld + o];
                    nan |= isnan(y);
                    amax = fmax(amax, fabs(s));
                    ymax = fmax(ymax, fabs(ry[i][r * ld + o]));
                    d_f16 = fmax(d_f16, fabs(y - s));
                    d_cpu = fmax(d_cpu, fabs((double)y - ry[i][r * ld + o]));
                    cpu_over_bound = fmax(cpu_over_bound, isnan(y) ? INFINITY : fabs((double)y - ry[i][r * ld + o]) / fmax(bnd, 1e-30));
                }
            }
            printf("matmul %s rows %d E %lld%s: |y - exact(f16 operands)| / max %.3g, |y - cpu ref| / max %.3g (%.3g of its bound)\n",
                   quant_traits(type)->name, rows, (long long)E, act_q8 ? " (q8 activations)" : "", d_f16 / amax, d_cpu / ymax,
                   cpu_over_bound);
            CHECK_MSG(!nan, "matmul %s rows %d: NaN", quant_traits(type)->name, rows);
            if (rows >= 64 && type != GGML_TYPE_F32)
                CHECK_MSG(d_f16 / amax < 1e-5, "GEMM %s rows %d: %.3g from the exact product", quant_traits(type)->name, rows, d_f16 / amax);
            /* (a fixed 1e-2 of the largest output failed ~1 run in 8 on the activation rounding alone) */
            CHECK_MSG(cpu_over_bound <= 1.0, "matmul %s rows %d: %.3g of the bound from the CPU reference (%.3g of the largest output)",
                      quant_traits(type)->name, rows, cpu_over_bound, d_cpu / ymax);
            ref->ops->free(ref, ry[i]);
            gpu->ops->free(gpu, gy[i]);
        }
        free(h); free(wr); free(x); free(bias);
        gpu->ops->free(gpu, gbias);
        bk_act_free(ref, &ra); bk_act_free(gpu, &ga);
    }
    for (int i = 0; i < NO; i++) free_weight(&w[i]);
    backend_cuda_set_gemm_act(gpu, false);
}

/* Batches of up to 256 rows over two sequences (state slots 1 and 0). */
#define MAXT 256
struct gbatch { struct bk_batch b; struct bk_seq seqs[2]; int32_t tok[MAXT], pos[MAXT], sidx[MAXT], lrows[1], bt[2][32]; };
static void gbatch_make(struct gbatch *t, int n0, int p0, int n1, int p1) {
    memset(t, 0, sizeof(*t));
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < 32; k++) t->bt[s][k] = s * 32 + (k * 7 + 3) % 32; /* scattered blocks */
        t->seqs[s].block_table = t->bt[s];
        t->seqs[s].n_blocks = 32;
        t->seqs[s].state_slot = s == 0 ? 1 : 0;
    }
    int n = 0;
    for (int i = 0; i < n0; i++, n++) { t->pos[n] = p0 + i; t->sidx[n] = 0; }
    for (int i = 0; i < n1; i++, n++) { t->pos[n] = p1 + i; t->sidx[n] = 1; }
    t->lrows[0] = n - 1;
    t->b.n_tokens = n; t->b.token_ids = t->tok; t->b.pos = t->pos; t->b.seq_idx = t->sidx;
    t->b.n_seqs = n1 ? 2 : 1; t->b.seqs = t->seqs; t->b.n_logits = 1; t->b.logit_rows = t->lrows;
}

/* One Gated DeltaNet layer on both backends: random weights, n_slots state slots (zero), n_v_head * d_v = 256 (the Q8_K
 * activation's block). gdn_fix_run runs a batch (already set on both) on fresh random inputs and compares: the outputs
 * and the delta-rule states within a relative error (to max(|ref|, 1% of max |ref|)), the conv states exactly. */
struct gdn_fix {
    int64_t VD, LD;
    size_t cf, sf; /* conv / delta-rule state floats of all slots */
    struct bk_rs_cache rrs, grs;
    float *rconv, *rssm, *gconv, *gssm, *cw, *dtb, *sa, *nw, *gcw, *gdtb, *gsa, *gnw, *rwork, *gwork, *h, *hs, *hc;
    struct bk_gdn_weights rw, gw;
    struct bk_gdn_params p;
    struct bk_act ra, ga;
};

static void gdn_fix_open(struct gdn_fix *f, int DV, int n_slots) {
    const int NK = 1, NV = 256 / DV, DK = 128, DC = 4;
    const int64_t KD = NK * DK, VD = NV * DV, C = 2 * KD + VD;
    memset(f, 0, sizeof(*f));
    f->VD = VD;
    f->LD = C + VD + 2 * NV;
    f->rrs = (struct bk_rs_cache){1, n_slots, C * (DC - 1), VD * DK, NULL, NULL, 0};
    f->grs = f->rrs;
    f->cf = (size_t)(n_slots * f->rrs.conv_floats);
    f->sf = (size_t)(n_slots * f->rrs.ssm_floats);
    f->rconv = ref_put(NULL, f->cf * 4); f->rssm = ref_put(NULL, f->sf * 4);
    f->gconv = dev_put(NULL, f->cf * 4); f->gssm = dev_put(NULL, f->sf * 4);
    f->rrs.conv = &f->rconv; f->rrs.ssm = (void **)&f->rssm; f->grs.conv = &f->gconv; f->grs.ssm = (void **)&f->gssm;
    f->cw = rand_buf((size_t)(C * DC), 0.5f); f->dtb = rand_buf(NV, 1.0f); f->sa = rand_buf(NV, 0.5f); f->nw = rand_buf((size_t)DV, 1.0f);
    for (int i = 0; i < NV; i++) f->sa[i] = -fabsf(f->sa[i]);
    f->gcw = dev_put(f->cw, (size_t)(C * DC) * 4); f->gdtb = dev_put(f->dtb, NV * 4);
    f->gsa = dev_put(f->sa, NV * 4); f->gnw = dev_put(f->nw, (size_t)DV * 4);
    f->rw = (struct bk_gdn_weights){f->cw, f->dtb, f->sa, f->nw};
    f->gw = (struct bk_gdn_weights){f->gcw, f->gdtb, f->gsa, f->gnw};
    f->p = (struct bk_gdn_params){NK, NV, DK, DV, DC, 1e-6f, 0};
    CHECK(bk_act_alloc(ref, MAXT, VD, BK_ACT_BIT(BK_ACT_Q8_K), &f->ra) == VLLMC_OK);
    CHECK(bk_act_alloc(gpu, MAXT, VD, BK_ACT_BIT(BK_ACT_Q8_K), &f->ga) == VLLMC_OK);
    const int64_t work = bk_gdn_work_floats(&f->p, MAXT, 1);
    f->rwork = ref_put(NULL, (size_t)work * 4);
    f->gwork = dev_put(NULL, (size_t)work * 4);
    f->h = malloc((size_t)(MAXT * VD) * 4); f->hs = malloc(f->sf * 4); f->hc = malloc(f->cf * 4);
}

static void gdn_fix_run(struct gdn_fix *f, int T, double *mo, double *ms, size_t *cbad) {
    float *in = rand_buf((size_t)(T * f->LD), 1.0f), *gin = dev_put(in, (size_t)(T * f->LD) * 4);
    CHECK(ref->ops->gdn(ref, &f->rrs, &f->p, &f->rw, in, f->LD, f->rwork, &f->ra) == VLLMC_OK);
    CHECK(gpu->ops->gdn(gpu, &f->grs, &f->p, &f->gw, gin, f->LD, f->gwork, &f->ga) == VLLMC_OK);
    dev_get(f->h, f->ga.x, (size_t)(T * f->VD) * 4);
    *mo = max_rel(f->h, f->ra.x, (size_t)(T * f->VD), -1e-2);
    dev_get(f->hs, f->gssm, f->sf * 4);
    *ms = max_rel(f->hs, f->rssm, f->sf, -1e-2);
    dev_get(f->hc, f->gconv, f->cf * 4);
    *cbad = n_diff(f->hc, f->rconv, f->cf);
    free(in);
    gpu->ops->free(gpu, gin);
}

static void gdn_fix_close(struct gdn_fix *f) {
    free(f->h); free(f->hs); free(f->hc);
    bk_act_free(ref, &f->ra); bk_act_free(gpu, &f->ga);
    free(f->cw); free(f->dtb); free(f->sa); free(f->nw);
    gpu->ops->free(gpu, f->gcw); gpu->ops->free(gpu, f->gdtb); gpu->ops->free(gpu, f->gsa); gpu->ops->free(gpu, f->gnw);
    gpu->ops->free(gpu, f->gconv); gpu->ops->free(gpu, f->gssm); gpu->ops->free(gpu, f->gwork);
    ref->ops->free(ref, f->rconv); ref->ops->free(ref, f->rssm); ref->ops->free(ref, f->rwork);
}

static void test_gdn_chunked(int DV) {
    struct gdn_fix f;
    gdn_fix_open(&f, DV, 2);
    double worst_o = 0, worst_s = 0;
    /* cases: (n0, p0, n1, p1); L = 65..128 fresh, each followed by a 100-row continuation (every 8th L), then two
     * sequences in one batch (the second continuing its slot) */
    int last_len = 0;
    for (int cs = 0; cs < 64 + 8 + 2; cs++) {
        /* the batches of this case: one prefill, a prefill and its continuation, or two sequences in one batch:
         * 70 fresh rows (slot 1) and 30 rows continuing slot 0 / 90 fresh and 20 continuing */
        struct gbatch tb[2];
        int nb = 1;
        if (cs < 64 + 8) {
            const int k = cs < 64 ? cs : 8 * (cs - 64) + 3;
            gbatch_make(&tb[0], 65 + k, 0, 0, 0);
            last_len = 65 + k;
            if (cs >= 64) { gbatch_make(&tb[1], 100, last_len, 0, 0); nb = 2; } /* 100 rows from its state */
        } else if (cs == 64 + 8) gbatch_make(&tb[0], 70, 0, 30, last_len + 100);
        else gbatch_make(&tb[0], 20, 70, 90, 0);
        for (int b = 0; b < nb; b++) {
            CHECK(ref->ops->batch_set(ref, &tb[b].b) == VLLMC_OK);
            CHECK(gpu->ops->batch_set(gpu, &tb[b].b) == VLLMC_OK);
            const int T = tb[b].b.n_tokens;
            double mo, ms;
            size_t cbad;
            gdn_fix_run(&f, T, &mo, &ms, &cbad);
            CHECK_MSG(mo < 1e-4, "gdn chunked d_v %d, case %d, %d rows at %d: out max rel %.3g", DV, cs, T, tb[b].pos[0], mo);
            CHECK_MSG(ms < 1e-4, "gdn chunked d_v %d, case %d, %d rows at %d: state max rel %.3g", DV, cs, T, tb[b].pos[0], ms);
            CHECK_MSG(cbad == 0, "gdn chunked d_v %d, case %d, %d rows at %d: %zu conv state values differ", DV, cs, T, tb[b].pos[0], cbad);
            worst_o = fmax(worst_o, mo);
            worst_s = fmax(worst_s, ms);
        }
    }
    printf("gdn chunked d_v %d: lengths 65..128 (+ continuations, two-sequence batches): worst out rel %.3g, state rel %.3g\n", DV,
           worst_o, worst_s);
    gdn_fix_close(&f);
}

/* A batch of MS sequences (state slot = sequence index), runs in the order given. */
#define MS 40
struct mbatch { struct bk_batch b; struct bk_seq seqs[MS]; int32_t tok[MAXT], pos[MAXT], sidx[MAXT], lrows[1], bt[MS][32]; };
static void mbatch_make(struct mbatch *t, int n_runs, const int *seq, const int *len, const int *pos0) {
    memset(t, 0, sizeof(*t));
    for (int s = 0; s < MS; s++) { /* (positions < 512: the test's sequences stay below 500) */
        for (int k = 0; k < 32; k++) t->bt[s][k] = s * 32 + k;
        t->seqs[s].block_table = t->bt[s];
        t->seqs[s].n_blocks = 32;
        t->seqs[s].state_slot = s;
    }
    int n = 0;
    for (int r = 0; r < n_runs; r++)
        for (int i = 0; i < len[r]; i++, n++) { t->pos[n] = pos0[r] + i; t->sidx[n] = seq[r]; }
    t->lrows[0] = n - 1;
    t->b.n_tokens = n; t->b.token_ids = t->tok; t->b.pos = t->pos; t->b.seq_idx = t->sidx;
    t->b.n_seqs = MS; t->b.seqs = t->seqs; t->b.n_logits = 1; t->b.logit_rows = t->lrows;
}

/* Batches that mix decode tokens, short runs and prompt chunks (the engine's steps under load), with the runs side by
 * side (backend_cuda_set_gdn_runs) and without: against the CPU reference as the chunked test above; and a batch of
 * short runs only, whose runs on and off take the same recurrent arithmetic, bit for bit. */
static void test_gdn_mixed(int DV) {
    struct gdn_fix f;
    gdn_fix_open(&f, DV, MS);
    const size_t sf = f.sf, cf = f.cf;
    double worst_o = 0, worst_s = 0;
    int pos[MS] = {0}; /* each sequence's next position */
    static struct mbatch tb;
    for (int on = 1; on >= 0; on--) {
        backend_cuda_set_gdn_runs(gpu, on);
        memset(pos, 0, sizeof(pos));
        /* step 0: prompts for every slot (sequences 0 and 1 first, 40-99 tokens: two long runs; the rest short: fresh
         * states); steps 1-3: decode tokens of 20-30 sequences, short runs and prompt chunks, in a shuffled order */
        for (int step = 0; step < 4; step++) {
            int seq[MS], len[MS], p0[MS], n_runs = 0, total = 0;
            int order[MS];
            for (int s = 0; s < MS; s++) order[s] = s;
            for (int s = MS - 1; s > 0 && step > 0; s--) {
                const int k = (int)(test_rand_u64() % (uint64_t)(s + 1)), x = order[s];
                order[s] = order[k];
                order[k] = x;
            }
            for (int k = 0; k < MS; k++) {
                const int s = order[k];
                int l;
                if (step == 0) l = s < 2 ? 40 + (int)(test_rand_u64() % 60) : 1 + (int)(test_rand_u64() % 20);
                else {
                    const int kind = (int)(test_rand_u64() % 8);
                    l = kind < 5 ? 1 : kind == 5 ? 2 + (int)(test_rand_u64() % 30) : kind == 6 ? 32 + (int)(test_rand_u64() % 90) : 0;
                }
                if (!l || total + l > MAXT) continue;
                seq[n_runs] = s; len[n_runs] = l; p0[n_runs] = pos[s]; n_runs++;
                pos[s] += l;
                total += l;
            }
            mbatch_make(&tb, n_runs, seq, len, p0);
            CHECK(ref->ops->batch_set(ref, &tb.b) == VLLMC_OK);
            CHECK(gpu->ops->batch_set(gpu, &tb.b) == VLLMC_OK);
            const int T = tb.b.n_tokens;
            double mo, ms;
            size_t cbad;
            gdn_fix_run(&f, T, &mo, &ms, &cbad);
            CHECK_MSG(mo < 1e-4, "gdn mixed d_v %d, runs %d, step %d (%d runs, %d rows): out max rel %.3g", DV, on, step, n_runs, T, mo);
            CHECK_MSG(ms < 1e-4, "gdn mixed d_v %d, runs %d, step %d: state max rel %.3g", DV, on, step, ms);
            CHECK_MSG(cbad == 0, "gdn mixed d_v %d, runs %d, step %d: %zu conv state values differ", DV, on, step, cbad);
            worst_o = fmax(worst_o, mo);
            worst_s = fmax(worst_s, ms);
        }
    }
    /* short runs only (every run < 32): the same states in, runs off then on: the same bits out */
    {
        int seq[MS], len[MS], p0[MS], n_runs = 0;
        for (int s = 0; s < MS; s += 2) { /* 20 runs of 1..12 tokens (<= MAXT rows) */
            seq[n_runs] = s; len[n_runs] = 1 + (int)(test_rand_u64() % 12); p0[n_runs] = pos[s]; n_runs++;
        }
        mbatch_make(&tb, n_runs, seq, len, p0);
        const int T = tb.b.n_tokens;
        float *in = rand_buf((size_t)(T * f.LD), 1.0f), *gin = dev_put(in, (size_t)(T * f.LD) * 4);
        float *s0 = malloc(sf * 4), *c0 = malloc(cf * 4), *o1 = malloc((size_t)(T * f.VD) * 4), *s1 = malloc(sf * 4), *c1 = malloc(cf * 4);
        dev_get(s0, f.gssm, sf * 4);
        dev_get(c0, f.gconv, cf * 4);
        for (int on = 0; on < 2; on++) {
            backend_cuda_set_gdn_runs(gpu, on);
            CHECK(gpu->ops->copy_to_device(gpu, f.gssm, s0, sf * 4) == VLLMC_OK);
            CHECK(gpu->ops->copy_to_device(gpu, f.gconv, c0, cf * 4) == VLLMC_OK);
            CHECK_MSG(gpu->ops->batch_set(gpu, &tb.b) == VLLMC_OK, "%s", vllmc_last_error());
            CHECK(gpu->ops->gdn(gpu, &f.grs, &f.p, &f.gw, gin, f.LD, f.gwork, &f.ga) == VLLMC_OK);
            dev_get(on ? f.h : o1, f.ga.x, (size_t)(T * f.VD) * 4);
            dev_get(on ? f.hs : s1, f.gssm, sf * 4);
            dev_get(on ? f.hc : c1, f.gconv, cf * 4);
        }
        const size_t bad = n_diff(f.h, o1, (size_t)(T * f.VD)) + n_diff(f.hs, s1, sf) + n_diff(f.hc, c1, cf);
        CHECK_MSG(bad == 0, "gdn short runs d_v %d: %zu values differ between the runs side by side and the one walk", DV, bad);
        struct backend_cuda_stats st;
        backend_cuda_get_stats(gpu, &st);
        CHECK_MSG(st.gdn_runs > 0 && st.gdn_split > 0, "gdn mixed: %llu split ops, %llu ops by runs", (unsigned long long)st.gdn_split,
                  (unsigned long long)st.gdn_runs);
        free(in); free(s0); free(c0); free(o1); free(s1); free(c1);
        gpu->ops->free(gpu, gin);
    }
    backend_cuda_set_gdn_runs(gpu, false);
    printf("gdn mixed d_v %d: decode tokens, short runs and prompt chunks of %d sequences, runs side by side and not: worst out "
           "rel %.3g, state rel %.3g; short runs bit for bit\n", DV, MS, worst_o, worst_s);
    gdn_fix_close(&f);
}

/* Prefill attention: 150 + 70 rows of two sequences (several chunks each), then 90 + 1 rows continuing them, then 40 + 9
 * (a chunk's rows past n are skipped by warps of 8 rows: 40 ends on a warp's edge, 9 one row into the second warp). */
static void test_attn_prefill(void) {
    for (int dt = 0; dt < 2; dt++) {
        const int NH = 8, NKV = 2, HD = 256 - 128 * dt;
        struct bk_kv_cache *rkv, *gkv;
        CHECK(ref->ops->kv_create(ref, dt ? BK_KV_F16 : BK_KV_F32, 1, 64, NKV, HD, &rkv) == VLLMC_OK);
        CHECK(gpu->ops->kv_create(gpu, dt ? BK_KV_F16 : BK_KV_F32, 1, 64, NKV, HD, &gkv) == VLLMC_OK);
        const struct bk_attn_params p = {NH, NKV, HD, 1.0f / sqrtf((float)HD), 0};
        for (int step = 0; step < 3; step++) {
            struct gbatch tb;
            if (step == 0) gbatch_make(&tb, 150, 0, 70, 0);
            else if (step == 1) gbatch_make(&tb, 90, 150, 1, 70);
            else gbatch_make(&tb, 40, 240, 9, 71);
            CHECK(ref->ops->batch_set(ref, &tb.b) == VLLMC_OK);
            CHECK(gpu->ops->batch_set(gpu, &tb.b) == VLLMC_OK);
            const int T = tb.b.n_tokens;
            float *q = rand_buf((size_t)(T * NH * HD), 1.0f), *k = rand_buf((size_t)(T * NKV * HD), 1.0f);
            float *v = rand_buf((size_t)(T * NKV * HD), 1.0f), *ro;
            float *h = attn_pair(rkv, gkv, &p, T, q, k, v, &ro);
            /* An output row is a convex combination of v rows (|v| <= 1), so the error is measured against the
             * largest output: a per-value relative error blows up where the average of many random v nears 0
             * (summation order alone gave 1.1e-4 .. 1.6e-4 at a 1e-2 floor, 1 run in 3). */
            const double mr = max_rel(h, ro, (size_t)(T * NH * HD), 1e-2);
            const double ma = max_abs_over_max(h, ro, (size_t)(T * NH * HD));
            printf("attention prefill %s head_dim %d, %d rows: max |err| / max |out| %.3g (max rel at a 1e-2 floor %.3g)\n",
                   dt ? "f16" : "f32", HD, T, ma, mr);
            CHECK_MSG(ma < (dt ? 2e-2 : 5e-5), "attention prefill %s step %d: max |err| / max |out| %.3g", dt ? "f16" : "f32", step, ma);
            free(q); free(k); free(v); free(h);
            ref->ops->free(ref, ro);
        }
        ref->ops->kv_destroy(ref, rkv);
        gpu->ops->kv_destroy(gpu, gkv);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    test_seed_auto("test_cuda_prefill");
    struct backend_cuda_opts o = {0, false, false, false};
    if (backend_cuda_create(&o, &gpu) != VLLMC_OK) {
        printf("test_cuda_prefill: no GPU (%s): skipped\n", vllmc_last_error());
        return 0;
    }
    CHECK(backend_cpu_create(1, true, &ref) == VLLMC_OK);
    backend_cuda_set_prefill(gpu, 64, true);
    test_dequant_f16();
    test_gemm_matmul(false);
    test_gemm_matmul(true);
    test_gdn_chunked(128);
    test_gdn_chunked(64);
    test_gdn_mixed(128);
    test_gdn_mixed(64);
    test_attn_prefill();
    ref->ops->destroy(ref);
    gpu->ops->destroy(gpu);
    return test_finish("test_cuda_prefill");
}
