/* Decode GEMV throughput of the quantized dot products, in GB/s of weight bytes, against the machine's
 * streaming-read bandwidth measured here. Two regimes: "hot" (one 4096x4096 matrix, reused, mostly in
 * L3) and "dram" (a cycle of copies totalling >= 512 MiB, as in decode where every weight is read once
 * per token). 1 and 2 threads, each ISA. Validates each ISA against the scalar reference first.
 * With $VLLMC_BENCH_GGML_CPU = path of llama.cpp's libggml-cpu.so, ggml's own vec_dot runs on the same
 * data for comparison (row "ggml"; its Q8_0/Q8_K activation layouts are the same as ours).
 * Build: see docs/BENCHMARKS.md. Usage: bench_dot [n_cols=4096] [n_rows=4096] [seconds_per_case=0.5] [type name] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "common/common.h"
#include "common/threadpool.h"
#include "quant/quant.h"
#include "quant/blocks.h"
#include "quant/gemv.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

/* ---- streaming read ---- */
struct bw_ctx { const uint64_t *buf; size_t n_words; int n_tasks; uint64_t sink[64]; };
static void bw_task(void *vctx, int i_task, int i_thread) {
    (void)i_thread;
    struct bw_ctx *c = vctx;
    size_t per = c->n_words / (size_t)c->n_tasks, i0 = per * (size_t)i_task;
    const uint64_t *p = c->buf + i0;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (size_t i = 0; i + 8 <= per; i += 8) {
        s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3];
        s4 += p[i + 4]; s5 += p[i + 5]; s6 += p[i + 6]; s7 += p[i + 7];
    }
    c->sink[i_task] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

static double bench_bw(struct threadpool *tp, int n_threads) {
    size_t bytes = (size_t)1 << 30;
    uint64_t *buf = vllmc_malloc_aligned(bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes);
    struct bw_ctx c = {buf, bytes / 8, n_threads, {0}};
    double best = 0;
    for (int it = 0; it < 5; it++) {
        double t = vllmc_time_s();
        threadpool_run(n_threads > 1 ? tp : NULL, bw_task, &c, n_threads);
        t = vllmc_time_s() - t;
        if (bytes / t > best) best = bytes / t;
    }
    vllmc_free_aligned(buf);
    return best / 1e9;
}

/* ---- llama.cpp's CPU kernels, loaded at run time for comparison ---- */
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
struct ggml_traits_cpu { void *from_float; ggml_vec_dot_fn vec_dot; int vec_dot_type; int64_t nrows; };
static const struct ggml_traits_cpu *(*g_ggml_traits)(int type);

/* ---- gemv ---- */
struct gemv_ctx {
    uint32_t type; int64_t n_cols, n_rows; size_t row_bytes;
    const uint8_t *w; const void *act; float *out; vec_dot_fn f; int n_tasks; ggml_vec_dot_fn gf;
};
static void gemv_task(void *vctx, int i_task, int i_thread) {
    (void)i_thread;
    struct gemv_ctx *c = vctx;
    int64_t per = CEIL_DIV(c->n_rows, c->n_tasks), r0 = per * i_task, r1 = VLLMC_MIN(c->n_rows, r0 + per);
    if (c->gf) {
        for (int64_t r = r0; r < r1; r++) c->gf((int)c->n_cols, &c->out[r], 0, c->w + (size_t)r * c->row_bytes, 0, c->act, 0, 1);
        return;
    }
    if (!c->f) { /* the production entry point */
        if (r1 > r0) quant_gemv(c->type, c->n_cols, c->w, c->row_bytes, r0, r1 - r0, c->act, c->out + r0);
        return;
    }
    for (int64_t r = r0; r < r1; r++) c->out[r] = c->f(c->n_cols, c->w + (size_t)r * c->row_bytes, c->act);
}

static void fill_weights(uint32_t type, uint8_t *w, size_t bytes, int64_t n_blocks) {
    for (size_t i = 0; i < bytes; i += 8) { uint64_t r = rnd(); memcpy(w + i, &r, VLLMC_MIN(8, bytes - i)); }
    const struct quant_traits *t = quant_traits(type);
    /* sane f16 scales where they live */
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = w + b * t->type_size;
        ggml_half d = fp32_to_fp16(0.01f * (float)(rnd() % 100 + 1) / 100.0f);
        switch (type) {
        case GGML_TYPE_Q2_K: memcpy(blk + 80, &d, 2); memcpy(blk + 82, &d, 2); break;
        case GGML_TYPE_Q3_K: memcpy(blk + 108, &d, 2); break;
        case GGML_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
            memcpy(blk, &d, 2); memcpy(blk + 2, &d, 2); break;
        case GGML_TYPE_MXFP4: blk[0] = 120; break;
        default: memcpy(blk, &d, 2); break;
        }
    }
}

/* Best of repeated passes (each pass runs every matrix once), so that other load on the machine
 * shows up as fewer good samples rather than as a lower average. */
static double time_case(struct threadpool *tp, struct gemv_ctx *ctxs, int n_mats, int n_threads, double secs) {
    double t0 = vllmc_time_s(), best = 1e30;
    int passes = 0;
    do {
        double t = vllmc_time_s();
        for (int m = 0; m < n_mats; m++) {
            ctxs[m].n_tasks = n_threads;
            threadpool_run(n_threads > 1 ? tp : NULL, gemv_task, &ctxs[m], n_threads);
        }
        t = vllmc_time_s() - t;
        if (t < best) best = t;
        passes++;
    } while (vllmc_time_s() - t0 < secs || passes < 3);
    return (double)n_mats * (double)ctxs[0].row_bytes * (double)ctxs[0].n_rows / best / 1e9;
}

int main(int argc, char **argv) {
    int64_t n_cols = argc > 1 ? atoll(argv[1]) : 4096, n_rows = argc > 2 ? atoll(argv[2]) : 4096;
    double secs = argc > 3 ? atof(argv[3]) : 0.5;
    const char *glib = getenv("VLLMC_BENCH_GGML_CPU");
    if (glib) {
        void *h = dlopen(glib, RTLD_NOW | RTLD_GLOBAL);
        void (*init)(void) = h ? (void (*)(void))dlsym(h, "ggml_cpu_init") : NULL;
        g_ggml_traits = h ? (const struct ggml_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu") : NULL;
        if (!init || !g_ggml_traits) { fprintf(stderr, "cannot load %s: %s\n", glib, dlerror()); return 1; }
        init();
    }
    if (g_ggml_traits) { /* oracle: ggml's CPU activation quantizers (from_float) on random rows vs ours */
        const uint32_t at[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q8_K};
        for (size_t k = 0; k < 2; k++) {
            const struct ggml_traits_cpu *gt = g_ggml_traits((int)at[k]);
            typedef void (*from_float_fn)(const float *x, void *y, int64_t k);
            from_float_fn ff = gt ? (from_float_fn)gt->from_float : NULL;
            if (!ff) continue;
            enum { N = 4096, ROWS = 64 };
            static float x[N];
            static uint8_t ours[N * 2], theirs[N * 2];
            int same = 0;
            for (int r = 0; r < ROWS; r++) {
                for (int i = 0; i < N; i++) x[i] = (float)((int64_t)(rnd() % 200001) - 100000) / (r % 2 ? 7.0f : 100000.0f);
                size_t bytes = (size_t)quant_row_size(at[k], N);
                memset(theirs, 0, bytes);
                quant_get_act_quantizer_isa(at[k], quant_isa_active())(x, ours, N);
                ff(x, theirs, N);
                same += memcmp(ours, theirs, bytes) == 0;
            }
            printf("activation quantizer %s: %d of %d random rows byte-identical to ggml's CPU from_float\n",
                   quant_traits(at[k])->name, same, ROWS);
        }
    }
    struct threadpool *tp = threadpool_create(2);
    if (!tp) { fprintf(stderr, "threadpool: %s\n", vllmc_last_error()); return 1; }
    printf("bench_dot: %lld x %lld, active ISA %s\n", (long long)n_rows, (long long)n_cols, quant_simd_name());
    double bw1 = bench_bw(tp, 1), bw2 = bench_bw(tp, 2);
    printf("streaming read (1 GiB): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n", bw1, bw2);
    const uint32_t types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_0,
                              GGML_TYPE_Q5_K, GGML_TYPE_Q3_K, GGML_TYPE_Q2_K, GGML_TYPE_IQ4_XS, GGML_TYPE_F16,
                              GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_MXFP4};
    printf("%-7s %-11s %-5s %8s %8s %8s %8s\n", "type", "isa", "data", "1T GB/s", "2T GB/s", "1T %bw", "2T %bw");
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t type = types[ti];
        const struct quant_traits *t = quant_traits(type);
        if (argc > 4 && strcmp(argv[4], t->name) != 0) continue;
        size_t row_bytes = (size_t)quant_row_size(type, n_cols) ? (size_t)quant_row_size(type, n_cols)
                                                                 : (size_t)n_cols * (size_t)t->type_size;
        size_t mat_bytes = row_bytes * (size_t)n_rows;
        int n_mats = (int)CEIL_DIV((size_t)512 << 20, mat_bytes);
        uint8_t **mats = calloc((size_t)n_mats, sizeof(*mats));
        for (int m = 0; m < n_mats; m++) {
            mats[m] = vllmc_malloc_aligned(mat_bytes);
            if (!mats[m]) { fprintf(stderr, "out of memory\n"); return 1; }
            fill_weights(type, mats[m], mat_bytes, (int64_t)(mat_bytes / (size_t)t->type_size));
        }
        float *x = malloc((size_t)n_cols * sizeof(float));
        for (int64_t i = 0; i < n_cols; i++) x[i] = (float)((int64_t)(rnd() % 2001) - 1000) / 500.0f;
        void *act = malloc((size_t)n_cols * 4 + 4096);
        quantize_row_act(type, x, act, n_cols);
        float *out = malloc((size_t)n_rows * sizeof(float)), *ref = malloc((size_t)n_rows * sizeof(float));
        for (int64_t r = 0; r < n_rows; r++) ref[r] = vec_dot_ref(type, n_cols, mats[0] + (size_t)r * row_bytes, act);
        struct gemv_ctx *ctxs = calloc((size_t)n_mats, sizeof(*ctxs));
        for (int isa = QUANT_ISA_COUNT + 1; isa >= 0; isa--) { /* COUNT: quant_gemv; COUNT + 1: ggml */
            vec_dot_fn f = isa < QUANT_ISA_COUNT ? quant_get_vec_dot_isa(type, isa) : NULL;
            if (isa < QUANT_ISA_COUNT && !f) continue;
            ggml_vec_dot_fn gf = NULL;
            if (isa == QUANT_ISA_COUNT + 1) {
                const struct ggml_traits_cpu *gt = g_ggml_traits ? g_ggml_traits((int)type) : NULL;
                if (!gt || !gt->vec_dot || (uint32_t)gt->vec_dot_type != (uint32_t)t->vec_dot_type) continue;
                gf = gt->vec_dot;
            }
            for (int m = 0; m < n_mats; m++)
                ctxs[m] = (struct gemv_ctx){type, n_cols, n_rows, row_bytes, mats[m], act, out, f, 1, gf};
            threadpool_run(NULL, gemv_task, &ctxs[0], 1);
            if (gf) { /* a different summation order: close, not bit-equal */
                double md = 0, mr = 0;
                for (int64_t r = 0; r < n_rows; r++) { md = VLLMC_MAX(md, fabs(out[r] - ref[r])); mr = VLLMC_MAX(mr, fabs(ref[r])); }
                if (md > 1e-4 * mr + 1e-6) { printf("%s ggml differs from reference: max diff %g (max |ref| %g)\n", t->name, md, mr); return 1; }
            } else if (memcmp(out, ref, (size_t)n_rows * sizeof(float)) != 0) { printf("%s isa %d MISMATCH vs reference\n", t->name, isa); return 1; }
            const char *nm = gf ? "ggml" : isa == QUANT_ISA_COUNT ? "quant_gemv" : isa == 0 ? "scalar" : isa == 1 ? "avx2" : "avx512vnni";
            double s = isa == 0 ? secs / 4 : secs;
            double h1 = time_case(tp, ctxs, 1, 1, s), h2 = time_case(tp, ctxs, 1, 2, s);
            double d1 = time_case(tp, ctxs, n_mats, 1, s), d2 = time_case(tp, ctxs, n_mats, 2, s);
            for (int m = 0; m < n_mats; m++) ctxs[m].n_rows = VLLMC_MIN(n_rows, (int64_t)((1 << 20) / row_bytes));
            double c1 = time_case(tp, ctxs, 1, 1, s / 2);
            for (int m = 0; m < n_mats; m++) ctxs[m].n_rows = n_rows;
            printf("%-7s %-11s %-5s %8.1f %8.1f %7.0f%% %7.0f%%\n", t->name, nm, "hot", h1, h2, 100 * h1 / bw1, 100 * h2 / bw2);
            printf("%-7s %-11s %-5s %8.1f %8.1f %7.0f%% %7.0f%%\n", t->name, nm, "dram", d1, d2, 100 * d1 / bw1, 100 * d2 / bw2);
            printf("%-7s %-11s %-5s %8.1f %8s   (1 MiB of rows, L2-resident: compute bound)\n", t->name, nm, "l2", c1, "-");
            fflush(stdout);
        }
        { /* batched (prefill) path: quant_gemm over 8 activation rows vs 8 quant_gemv calls, 1 thread, hot */
            enum { NA = 8 };
            size_t ab = (size_t)n_cols * 4 + 4096;
            uint8_t *acts = malloc(ab * NA);
            float *o8 = malloc((size_t)n_rows * NA * sizeof(float));
            for (int i = 0; i < NA; i++) {
                for (int64_t k = 0; k < n_cols; k++) x[k] = (float)((int64_t)(rnd() % 2001) - 1000) / 500.0f;
                quantize_row_act(type, x, acts + (size_t)i * ab, n_cols);
            }
            double tg = 1e30, tv = 1e30;
            double t_end = vllmc_time_s() + 2 * secs;
            for (int rep = 0; rep < 5 || vllmc_time_s() < t_end; rep++) {
                double t = vllmc_time_s();
                quant_gemm(type, n_cols, mats[0], row_bytes, 0, n_rows, acts, ab, NA, o8, n_rows);
                t = vllmc_time_s() - t;
                tg = t < tg ? t : tg;
                t = vllmc_time_s();
                for (int i = 0; i < NA; i++) quant_gemv(type, n_cols, mats[0], row_bytes, 0, n_rows, acts + (size_t)i * ab, o8 + i * n_rows);
                t = vllmc_time_s() - t;
                tv = t < tv ? t : tv;
            }
            printf("%-7s quant_gemm  8 activation rows, 1 thread: %.2f ms (8 x quant_gemv %.2f ms, %.2fx); %.1f GMAC/s\n", t->name,
                   tg * 1e3, tv * 1e3, tv / tg, (double)NA * n_rows * n_cols / tg / 1e9);
            free(acts);
            free(o8);
        }
        for (int m = 0; m < n_mats; m++) vllmc_free_aligned(mats[m]);
        free(mats); free(x); free(act); free(out); free(ref); free(ctxs);
    }
    threadpool_destroy(tp);
    return 0;
}
