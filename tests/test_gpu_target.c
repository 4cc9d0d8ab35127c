/* GPU target logic on the CPU: the target table, the mat-vec kernel variant and launch shapes per target,
 * and the warp-width-dependent parts of the kernels emulated lane by lane for wave32 and wave64:
 *   - the lane -> unit mapping of the decode mat-vec (one-row and 4-row-tile kernels, Q4_K / Q6_K / Q8_0,
 *     and the one-block-per-lane Q4_0 / Q5_0)
 *     covers every element of every row exactly once;
 *   - the integer partials, reduced with the kernels' butterfly shuffles (HIP __shfl_xor semantics, width =
 *     the hardware wave), equal the sequential sum when the reduction stays inside the 32-lane group, and
 *     a wave-wide reduction on wave64 mixes the two groups of a wave (the hazard the group width avoids);
 *   - the Q8_K quantizer's argmax butterfly (ties to the lowest index) and its 16-element block sums.
 * Inputs are fresh random integers every run (VLLMC_TEST_SEED replays one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "backend/gpu_target.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define MAX_WAVE 64

/* HIP's __shfl_xor(v, off, width) for every lane of a wave of W lanes at once: lane l reads lane l ^ off
 * unless that leaves its width-aligned segment, then its own value. */
static void emu_shfl_xor(const int64_t *in, int64_t *out, int W, int off, int width) {
    for (int l = 0; l < W; l++) {
        int src = l ^ off;
        if (src >= ((l + width) & ~(width - 1))) src = l;
        out[l] = in[src];
    }
}

/* v[l] += shfl_xor(v, off) for the offsets max_off, max_off/2, ..., 1 (warp_reduce_sum). */
static void emu_butterfly_sum(int64_t *v, int W, int max_off, int width) {
    int64_t t[MAX_WAVE];
    for (int off = max_off; off > 0; off >>= 1) {
        emu_shfl_xor(v, t, W, off, width);
        for (int l = 0; l < W; l++) v[l] += t[l];
    }
}

static void test_table(void) {
    CHECK(gpu_target_count() >= 4);
    CHECK(gpu_target_at(-1) == NULL && gpu_target_at(gpu_target_count()) == NULL);
    CHECK(gpu_target_find(NULL) == NULL && gpu_target_find("gfx9999") == NULL && gpu_target_find("") == NULL);
    const struct gpu_target *h = gpu_target_find("sm_90"), *r3 = gpu_target_find("gfx1100"),
                            *r4 = gpu_target_find("gfx1200"), *r2 = gpu_target_find("gfx1030"),
                            *c2 = gpu_target_find("gfx90a");
    CHECK(h && r3 && r4 && r2 && c2);
    if (!h || !r3 || !r4 || !r2 || !c2) return;
    /* RDNA is wave32 as the kernels are compiled (hipcc's default for gfx10+), CDNA wave64 */
    CHECK(h->warp_size == 32 && r3->warp_size == 32 && r4->warp_size == 32 && r2->warp_size == 32);
    CHECK(c2->warp_size == 64 && gpu_groups_per_wave(c2) == 2 && gpu_groups_per_wave(r3) == 1);
    for (int i = 0; i < gpu_target_count(); i++) {
        const struct gpu_target *t = gpu_target_at(i);
        CHECK(t->warp_size % GPU_GROUP_LANES == 0);
        CHECK(gpu_group_reduce_max_offset(t) == GPU_GROUP_LANES / 2);
        if (t->vendor == GPU_VENDOR_AMD) CHECK(t->lds_bytes_per_cta == 65536);
        CHECK(t->mem_bw_gbs > 0 && t->n_cu > 0 && t->vram_gib > 0);
        CHECK(!t->debian_hipcc_links || t->debian_hipcc_compiles);
    }
    CHECK(h->lds_bytes_per_cta > 3 * r3->lds_bytes_per_cta);
    /* packed int8 dot: gfx11/gfx12 only have the iu8 (sudot4) form; RDNA2 the i8 one */
    CHECK(h->dot4 == GPU_DOT4_DP4A && r3->dot4 == GPU_DOT4_SUDOT4 && r4->dot4 == GPU_DOT4_SUDOT4);
    CHECK(r2->dot4 == GPU_DOT4_SDOT4);
    CHECK(h->matrix == GPU_MATRIX_MMA && r3->matrix == GPU_MATRIX_WMMA_GFX11 && r4->matrix == GPU_MATRIX_WMMA_GFX12);
    CHECK(r2->matrix == GPU_MATRIX_NONE && c2->matrix == GPU_MATRIX_MFMA);
    /* what Debian's ROCm 5.2 hipcc can do (scripts/hip-check.sh relies on it) */
    CHECK(r3->debian_hipcc_compiles && !r3->debian_hipcc_links);
    CHECK(!r4->debian_hipcc_compiles && r2->debian_hipcc_links);
    CHECK(h->vendor == GPU_VENDOR_NVIDIA && !h->debian_hipcc_compiles);
    CHECK(!strcmp(gpu_dot4_name(r3->dot4), "v_dot4_i32_iu8 (sudot4)"));
    CHECK(!strcmp(gpu_matrix_name(GPU_MATRIX_NONE), "none") && !strcmp(gpu_mm_kernel_name(GPU_MM_TILES), "tiles"));
}

/* The kernel variant and grid of cu_launch_matmul for the Qwen3.5-4B decode shapes, and prefill. */
static void test_mm_plan(void) {
    for (int i = 0; i < gpu_target_count(); i++) {
        const struct gpu_target *t = gpu_target_at(i);
        const int resident = t->n_cu * 8;
        struct gpu_mm_plan p;
        /* ffn_down: 2,560 rows -> one group per row */
        const int down[1] = {2560};
        CHECK(gpu_mm_plan_make(t, down, NULL, 1, 1, resident, &p));
        CHECK(p.kernel == GPU_MM_ROWS && p.rows_per_group == 1 && p.act_per_group == 1);
        CHECK(p.threads == 128 && p.waves_per_cta == 128 / t->warp_size);
        CHECK(p.n_ctas_rows == 640 && p.ctas == (640 < resident ? 640 : resident));
        /* GDN in-projections fused: qkv 8,192 + gate 4,096 + beta 32 + alpha 32 rows -> 4-row tiles */
        const int gdn[4] = {8192, 4096, 32, 32};
        CHECK(gpu_mm_plan_make(t, gdn, NULL, 4, 1, resident, &p));
        CHECK(p.kernel == GPU_MM_TILES && p.rows_per_group == GPU_MM_TILE_ROWS);
        CHECK(p.total_rows == 12352 && p.total_tiles == 2048 + 1024 + 8 + 8);
        CHECK(p.ctas == (772 < resident ? 772 : resident));
        /* LM head 248,320 rows: a resident-size grid */
        const int head[1] = {248320};
        CHECK(gpu_mm_plan_make(t, head, NULL, 1, 1, resident, &p));
        CHECK(p.kernel == GPU_MM_TILES && p.total_tiles == 62080 && p.ctas == resident);
        /* just under the tile threshold */
        const int under[2] = {4096, 4095};
        CHECK(gpu_mm_plan_make(t, under, NULL, 2, 1, resident, &p) && p.kernel == GPU_MM_ROWS);
        const int at[2] = {4096, 4096};
        CHECK(gpu_mm_plan_make(t, at, NULL, 2, 1, resident, &p) && p.kernel == GPU_MM_TILES);
        /* a Q4_0 / Q5_0 segment keeps the row kernel however many rows */
        const uint32_t t40[2] = {GGML_TYPE_Q4_K, GGML_TYPE_Q4_0}, t50[1] = {GGML_TYPE_Q5_0}, tk[2] = {GGML_TYPE_Q6_K, GGML_TYPE_Q8_0};
        CHECK(gpu_mm_plan_make(t, at, t40, 2, 1, resident, &p) && p.kernel == GPU_MM_ROWS);
        CHECK(gpu_mm_plan_make(t, head, t50, 1, 1, resident, &p) && p.kernel == GPU_MM_ROWS && p.ctas == resident);
        CHECK(gpu_mm_plan_make(t, at, tk, 2, 1, resident, &p) && p.kernel == GPU_MM_TILES);
        /* so does a Q5_K or IQ4_XS one (the row kernel's types beyond the tiles') */
        const uint32_t t5k[2] = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K}, tiq[1] = {GGML_TYPE_IQ4_XS};
        CHECK(gpu_mm_plan_make(t, at, t5k, 2, 1, resident, &p) && p.kernel == GPU_MM_ROWS);
        CHECK(gpu_mm_plan_make(t, head, tiq, 1, 1, resident, &p) && p.kernel == GPU_MM_ROWS);
        /* prefill of 20 tokens: 3 groups of 8 activation rows per CTA of rows; on gfx11 5 groups of 4 (8 spill) */
        CHECK(gpu_mm_plan_make(t, down, NULL, 1, 20, resident, &p));
        const bool gfx11 = !strncmp(t->name, "gfx11", 5);
        CHECK_MSG(p.kernel == GPU_MM_PREFILL && p.act_per_group == (gfx11 ? 4 : 8) && p.ctas == 640 * (gfx11 ? 5 : 3),
                  "%s: %d activation rows per group, %d CTAs", t->name, p.act_per_group, p.ctas);
        /* bad shapes */
        const int zero[1] = {0};
        CHECK(!gpu_mm_plan_make(t, zero, NULL, 1, 1, resident, &p));
        CHECK(!gpu_mm_plan_make(t, down, NULL, 0, 1, resident, &p) && !gpu_mm_plan_make(t, down, NULL, 5, 1, resident, &p));
        CHECK(!gpu_mm_plan_make(t, down, NULL, 1, 0, resident, &p) && !gpu_mm_plan_make(t, down, NULL, 1, 1, 0, &p));
        CHECK(!gpu_mm_plan_make(NULL, down, NULL, 1, 1, resident, &p));
        int nx, ny, th;
        gpu_nq_shape(t, 2560, 3, &nx, &ny, &th);
        CHECK(nx == 2 && ny == 3 && th == 256);
        gpu_nq_shape(t, 248320, 1, &nx, &ny, &th);
        CHECK(nx == 122 && ny == 1);
    }
}

/* One wave of W lanes = W / 32 groups, group gi working on its own tile of rows[gi] rows of n columns.
 * Emulates the decode mat-vec step by step: coverage of every element, the 4-lane sub-block reduction
 * (K-quants), the per-lane accumulation per row, then the final group reduction with max offset
 * reduce_off and shuffle width W. Returns how many (group, row) results differ from the sequential sum;
 * -1 if some element was not read exactly once. */
static int emu_matvec(uint32_t type, int n, const int *rows, int W, int reduce_off, int *steps_out) {
    const int G = W / GPU_GROUP_LANES;
    int8_t *wt = malloc((size_t)G * 4 * n), *act = malloc((size_t)n);
    int *seen = calloc((size_t)G * 4 * n, sizeof(int));
    int64_t ref[2][4] = {{0}}, acc[4][MAX_WAVE];
    memset(acc, 0, sizeof(acc));
    for (int e = 0; e < n; e++) act[e] = (int8_t)(test_rand_u64() % 255 - 127);
    for (int i = 0; i < G * 4 * n; i++) wt[i] = (int8_t)(test_rand_u64() % 255 - 127);
    for (int gi = 0; gi < G; gi++)
        for (int r = 0; r < rows[gi]; r++)
            for (int e = 0; e < n; e++) ref[gi][r] += (int64_t)wt[((size_t)gi * 4 + r) * n + e] * act[e];
    int max_steps = 0;
    for (int gi = 0; gi < G; gi++) {
        const int s = gpu_mm_steps(type, n, rows[gi]);
        if (s > max_steps) max_steps = s;
    }
    *steps_out = max_steps;
    for (int st = 0; st < max_steps; st++) {
        int64_t part[MAX_WAVE], t[MAX_WAVE];
        int rl[MAX_WAVE];
        bool ok[MAX_WAVE];
        for (int L = 0; L < W; L++) {
            const int gi = L / GPU_GROUP_LANES, lane = L % GPU_GROUP_LANES;
            struct gpu_mm_unit u;
            part[L] = 0; rl[L] = 0; ok[L] = false;
            if (!gpu_mm_lane_unit(type, n, rows[gi], st, lane, &u) || !u.valid) continue;
            ok[L] = true; rl[L] = u.row;
            for (int k = 0; k < u.n_runs; k++)
                for (int e = u.elem0[k]; e < u.elem0[k] + u.run; e++) {
                    const size_t at = ((size_t)gi * 4 + u.row) * n + e;
                    seen[at]++;
                    part[L] += (int64_t)wt[at] * act[e];
                }
        }
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K) { /* I += shfl_xor(I, 1); I += shfl_xor(I, 2); c == 0 adds */
            emu_shfl_xor(part, t, W, 1, W);
            for (int L = 0; L < W; L++) part[L] += t[L];
            emu_shfl_xor(part, t, W, 2, W);
            for (int L = 0; L < W; L++) part[L] += t[L];
            for (int L = 0; L < W; L++)
                if ((L & 3) == 0 && ok[L]) acc[rl[L]][L] += part[L];
        } else {
            for (int L = 0; L < W; L++)
                if (ok[L]) acc[rl[L]][L] += part[L];
        }
    }
    int bad = 0;
    for (int gi = 0; gi < G; gi++)
        for (int r = 0; r < 4; r++)
            for (int e = 0; e < n; e++)
                if (seen[((size_t)gi * 4 + r) * n + e] != (r < rows[gi] ? 1 : 0)) bad = -1;
    if (bad == 0)
        for (int r = 0; r < 4; r++) {
            emu_butterfly_sum(acc[r], W, reduce_off, W);
            for (int gi = 0; gi < G; gi++) {
                if (r >= rows[gi]) continue;
                /* every lane of the group holds the result after a full butterfly */
                for (int lane = 0; lane < GPU_GROUP_LANES; lane++)
                    if (acc[r][gi * GPU_GROUP_LANES + lane] != ref[gi][r]) { bad++; break; }
            }
        }
    free(wt); free(act); free(seen);
    return bad;
}

static void test_matvec_emulation(void) {
    const uint32_t types[5] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0};
    /* widths of the seed models (2,560, 4,096, 9,216, 2,048, 512) and odd block counts */
    const int widths[7] = {256, 512, 2048, 2560, 4096, 9216, 1792};
    const int wave[2] = {32, 64};
    int n_cases = 0;
    for (int wi = 0; wi < 2; wi++) {
        const int W = wave[wi], G = W / GPU_GROUP_LANES;
        for (int ti = 0; ti < 5; ti++)
            for (int ni = 0; ni < 7; ni++)
                for (int rows_a = 1; rows_a <= 4; rows_a++) {
                    const int rows[2] = {rows_a, 1 + (int)(test_rand_u64() % 4)};
                    int steps = 0;
                    const int bad = emu_matvec(types[ti], widths[ni], rows, W, GPU_GROUP_LANES / 2, &steps);
                    CHECK_MSG(bad == 0, "W=%d type=%u n=%d rows=%d,%d: %d results wrong (-1: coverage)", W,
                              types[ti], widths[ni], rows[0], rows[1], bad);
                    const bool kq = types[ti] == GGML_TYPE_Q4_K || types[ti] == GGML_TYPE_Q6_K;
                    const int upr = kq ? widths[ni] / QK_K : widths[ni] / 32;
                    const int ups = kq ? 8 : 32;
                    const int mr = G == 2 && rows[1] > rows[0] ? rows[1] : rows[0];
                    CHECK(steps == (mr * upr + ups - 1) / ups);
                    n_cases++;
                }
        /* a wave-wide reduction (max offset W/2) is right on wave32 and mixes the groups on wave64 */
        const int rows[2] = {4, 4};
        int steps = 0;
        const int bad = emu_matvec(GGML_TYPE_Q4_K, 2560, rows, W, W / 2, &steps);
        if (W == 32) CHECK(bad == 0);
        else CHECK_MSG(bad > 0, "wave64: a wave-wide reduction should mix the two groups' rows");
    }
    CHECK(n_cases == 2 * 5 * 7 * 4);
    /* invalid inputs */
    struct gpu_mm_unit u;
    CHECK(!gpu_mm_lane_unit(GGML_TYPE_F32, 256, 1, 0, 0, &u));
    CHECK(!gpu_mm_lane_unit(GGML_TYPE_Q4_K, 100, 1, 0, 0, &u) && !gpu_mm_lane_unit(GGML_TYPE_Q8_0, 48, 1, 0, 0, &u));
    CHECK(!gpu_mm_lane_unit(GGML_TYPE_Q4_K, 256, 1, 0, 32, &u) && !gpu_mm_lane_unit(GGML_TYPE_Q4_K, 256, 0, 0, 0, &u));
    CHECK(!gpu_mm_lane_unit(GGML_TYPE_Q4_K, 256, 1, -1, 0, &u) && !gpu_mm_lane_unit(GGML_TYPE_Q6_K, 0, 1, 0, 0, &u));
    CHECK(gpu_mm_lane_unit(GGML_TYPE_Q4_K, 256, 1, 1, 0, &u) && !u.valid); /* one super-block: step 1 idles */
    CHECK(gpu_mm_steps(GGML_TYPE_Q6_K, 2560, 4) == 5 && gpu_mm_steps(GGML_TYPE_Q8_0, 2560, 1) == 3);
    CHECK(gpu_mm_steps(GGML_TYPE_BF16, 2560, 1) == 0);
}

/* quant_q8_K_sb: per-lane (amax, value, index) of 8 values, butterfly over offsets 16 .. 1 keeping the larger
 * magnitude and on ties the lower index; then bsums from lanes 2j, 2j+1. Two super-blocks per wave64. */
static void test_q8k_butterfly(void) {
    const int wave[2] = {32, 64};
    for (int wi = 0; wi < 2; wi++) {
        const int W = wave[wi];
        for (int rep = 0; rep < 200; rep++) {
            int v[MAX_WAVE][8];
            /* small integers so ties in magnitude (and sign) are frequent */
            const int span = 1 + (int)(test_rand_u64() % 20);
            for (int L = 0; L < W; L++)
                for (int k = 0; k < 8; k++) v[L][k] = (int)(test_rand_u64() % (2 * span + 1)) - span;
            int64_t amax[MAX_WAVE], vmax[MAX_WAVE], imax[MAX_WAVE];
            for (int L = 0; L < W; L++) {
                const int lane = L % 32;
                amax[L] = 0; vmax[L] = 0; imax[L] = 1 << 30;
                for (int k = 0; k < 8; k++) {
                    const int ax = abs(v[L][k]);
                    if (ax > amax[L]) { amax[L] = ax; vmax[L] = v[L][k]; imax[L] = lane * 8 + k; }
                }
            }
            for (int off = 16; off > 0; off >>= 1) {
                int64_t oa[MAX_WAVE], ov[MAX_WAVE], oi[MAX_WAVE];
                emu_shfl_xor(amax, oa, W, off, W);
                emu_shfl_xor(vmax, ov, W, off, W);
                emu_shfl_xor(imax, oi, W, off, W);
                for (int L = 0; L < W; L++)
                    if (oa[L] > amax[L] || (oa[L] == amax[L] && oi[L] < imax[L])) {
                        amax[L] = oa[L]; vmax[L] = ov[L]; imax[L] = oi[L];
                    }
            }
            int64_t sum[MAX_WAVE], t[MAX_WAVE];
            for (int L = 0; L < W; L++) {
                sum[L] = 0;
                for (int k = 0; k < 8; k++) sum[L] += v[L][k];
            }
            emu_shfl_xor(sum, t, W, 1, W);
            for (int L = 0; L < W; L++) sum[L] += t[L];
            for (int gi = 0; gi < W / 32; gi++) {
                /* sequential: first element of largest magnitude */
                int ra = 0, rv = 0, ri = 1 << 30;
                for (int e = 0; e < 256; e++) {
                    const int x = v[gi * 32 + e / 8][e % 8];
                    if (abs(x) > ra) { ra = abs(x); rv = x; ri = e; }
                }
                bool same = true;
                for (int lane = 0; lane < 32; lane++) {
                    const int L = gi * 32 + lane;
                    if (ra > 0 && (amax[L] != ra || vmax[L] != rv || imax[L] != ri)) same = false;
                    if (ra == 0 && amax[L] != 0) same = false;
                }
                CHECK_MSG(same, "W=%d group %d: argmax butterfly differs from the sequential scan", W, gi);
                for (int j = 0; j < 16; j++) {
                    int ref = 0;
                    for (int e = 16 * j; e < 16 * j + 16; e++) ref += v[gi * 32 + e / 8][e % 8];
                    CHECK(sum[gi * 32 + 2 * j] == ref);
                }
            }
        }
    }
}

/* Decode rooflines of the seed models (weight bytes per token: ARCH-QWEN35.md 2.3; 14B-A3B: BENCHMARKS.md MoE). */
static void test_roofline(void) {
    const struct gpu_target *xtx = gpu_target_find("gfx1100"), *n44 = gpu_target_find("gfx1200");
    if (!xtx || !n44) { CHECK(false); return; }
    const double b4 = 2.70e9, bmoe = 1.98e9;
    CHECK_NEAR(gpu_roofline_tok_s(xtx, b4), 355.6, 0.1);
    CHECK_NEAR(gpu_roofline_tok_s(n44, b4), 118.5, 0.1);
    CHECK_NEAR(gpu_roofline_tok_s(xtx, bmoe), 484.8, 0.1);
    CHECK_NEAR(gpu_roofline_tok_s(n44, bmoe), 161.6, 0.1);
    /* the seed's 14B-A3B (35B-A3B body, 96 experts): 1.925 GB per token at top 8 */
    CHECK_NEAR(gpu_roofline_tok_s(xtx, 1.925e9), 498.7, 0.1);
    CHECK_NEAR(gpu_roofline_tok_s(n44, 1.925e9), 166.2, 0.1);
    /* the 150 tok/s gate on the RX 7900 XTX is 42% of its weight-streaming bound */
    CHECK_NEAR(150.0 / gpu_roofline_tok_s(xtx, b4), 0.422, 0.001);
    CHECK(gpu_roofline_tok_s(xtx, 0) == 0.0 && gpu_roofline_tok_s(NULL, 1e9) == 0.0);
}

/* The prefill kernel's groups (gemv_q.cu mm_kernel<NA>, NA = the target's mm_prefill_act): the launcher starts
 * n_ctas * ceil(n_act / NA) CTAs; CTA b takes the activation rows a0 = (b % n_grp) * NA .. + min(NA, n_act - a0)
 * of the weight rows of CTA b / n_grp. For every target and token count, every (CTA of rows, activation row)
 * pair is computed exactly once and no group exceeds NA rows (the accumulators its registers hold). */
static void test_prefill_groups(void) {
    for (int i = 0; i < gpu_target_count(); i++) {
        const struct gpu_target *t = gpu_target_at(i);
        const int n_ctas = 7, NA = t->mm_prefill_act;
        CHECK(NA >= 1 && NA <= GPU_MM_PREFILL_ACT);
        for (int n_act = 2; n_act <= 41; n_act++) {
            const int down[1] = {n_ctas * GPU_MM_GROUPS_PER_CTA};
            struct gpu_mm_plan p;
            if (!gpu_mm_plan_make(t, down, NULL, 1, n_act, 1, &p)) { CHECK(false); continue; }
            static int seen[7][64];
            memset(seen, 0, sizeof(seen));
            int bad = 0;
            const int n_grp = (n_act + NA - 1) / NA;
            for (int b = 0; b < p.ctas; b++) {
                const int cta = b / n_grp, a0 = (b % n_grp) * NA;
                const int na = NA < n_act - a0 ? NA : n_act - a0;
                if (na < 1 || na > NA || cta >= n_ctas) { bad++; continue; }
                for (int r = 0; r < na; r++) seen[cta][a0 + r]++;
            }
            for (int c = 0; c < n_ctas; c++)
                for (int r = 0; r < 64; r++) bad += seen[c][r] != (r < n_act ? 1 : 0);
            CHECK_MSG(bad == 0 && p.act_per_group == NA, "%s, %d tokens: %d group errors", t->name, n_act, bad);
        }
    }
}

/* The constants gpu_target.h states about the kernels, found in the kernel sources (run from the repository
 * root, as tests/run.sh does): a launcher change that the plan functions do not follow fails here. */
static bool source_has(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    static char buf[1 << 20];
    const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, text) != NULL;
}

static void test_kernel_constants(void) {
    const char *gemv = "src/backend/cuda/gemv_q.cu", *internal = "src/backend/cuda/cuda_internal.h";
    FILE *f = fopen(gemv, "rb");
    if (!f) { printf("test_gpu_target: %s not found from here: kernel constants not compared\n", gemv); return; }
    fclose(f);
    char want[192];
    snprintf(want, sizeof(want), "#define CU_MM_WARPS %d", GPU_MM_GROUPS_PER_CTA);
    CHECK_MSG(source_has(internal, want), "%s lacks '%s'", internal, want);
    snprintf(want, sizeof(want), "#define MM_TR %d", GPU_MM_TILE_ROWS);
    CHECK_MSG(source_has(gemv, want), "%s lacks '%s'", gemv, want);
    snprintf(want, sizeof(want), "#define NQ_WARPS %d", GPU_NQ_GROUPS_PER_CTA);
    CHECK_MSG(source_has("src/backend/cuda/norm_quant.h", want), "norm_quant.h lacks '%s'", want);
    snprintf(want, sizeof(want), "struct cu_mm_cfg cu_mm_cfg = {{%d, ", GPU_MM_TILE_MIN_ROWS); /* first row class */
    CHECK_MSG(source_has(gemv, want), "%s lacks '%s'", gemv, want);
    CHECK(source_has(gemv, "const int groups = (args->n_act + VLLMC_MM_PREFILL_ACT - 1) / VLLMC_MM_PREFILL_ACT;"));
    CHECK(source_has(gemv, "mm_kernel<VLLMC_MM_PREFILL_ACT><<<(unsigned)(args->n_ctas * groups)"));
    CHECK(source_has(gemv, "const int n_grp = (P.n_act + NA - 1) / NA;\n    const int cta = blockIdx.x / n_grp;\n"
                           "    const int a0 = (blockIdx.x % n_grp) * NA;\n    const int na = min(NA, P.n_act - a0);"));
    CHECK_MSG(source_has(gemv, "if (t != GGML_TYPE_Q4_K && t != GGML_TYPE_Q6_K && t != GGML_TYPE_Q8_0 && t != GGML_TYPE_F32) q40 = true;"),
              "%s: the tile kernel's type rule changed", gemv);
    /* the prefill group size of the table is the one gpu_compat.h selects for the build's target family, and
     * the Makefile states the family for every gfx11 HIP_ARCH */
    const struct gpu_target *rdna3 = gpu_target_find("gfx1100"), *other = gpu_target_find("gfx1030"),
                            *nv = gpu_target_find("sm_90");
    if (rdna3 && other && nv) {
        CHECK(other->mm_prefill_act == nv->mm_prefill_act);
        snprintf(want, sizeof(want), "#if defined(VLLMC_HIP) && defined(VLLMC_HIP_ARCH_GFX11)\n#define VLLMC_MM_PREFILL_ACT %d\n"
                 "#else\n#define VLLMC_MM_PREFILL_ACT %d\n#endif", rdna3->mm_prefill_act, other->mm_prefill_act);
        CHECK_MSG(source_has("src/backend/cuda/gpu_compat.h", want), "gpu_compat.h lacks '%s'", want);
    }
    CHECK(source_has("Makefile", "$(if $(filter gfx11%,$(HIP_ARCH)),-DVLLMC_HIP_ARCH_GFX11)"));
    CHECK(source_has("src/backend/cuda/gpu_compat.h", "#if defined(__GFX11__) && !defined(VLLMC_HIP_ARCH_GFX11)\n#error"));
    /* the int8 dot form of each AMD target in the table is the one gpu_compat.h selects */
    const char *compat = "src/backend/cuda/gpu_compat.h";
    CHECK(source_has(compat, "defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || "
                             "defined(__gfx1200__) || defined(__gfx1201__)\n    return __builtin_amdgcn_sudot4("));
    CHECK(source_has(compat, "defined(__gfx90a__) || defined(__gfx1030__)\n    return __builtin_amdgcn_sdot4("));
}

int main(void) {
    test_seed_auto("test_gpu_target");
    test_table();
    test_mm_plan();
    test_matvec_emulation();
    test_q8k_butterfly();
    test_roofline();
    test_prefill_groups();
    test_kernel_constants();
    return test_finish("test_gpu_target");
}
