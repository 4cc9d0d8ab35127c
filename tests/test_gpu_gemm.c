/* The AMD dense f16 GEMM (src/backend/cuda/gpu_gemm_hip.cu) emulated on the CPU with the kernel's own index
 * functions (backend/gpu_gemm_tile.h): per work-group and K tile, every thread's global -> LDS chunk moves
 * (zero fill past m, n, k_dim; the whole-tile fast path's predicate), the fragments each lane reads from LDS,
 * the WMMA instruction as the RDNA3 (gfx11) and RDNA4 (gfx12) ISA documents define it, written independently
 * matrix -> lane, and the stores of the C fragments; and the plain body of other targets. On fresh random f16
 * inputs, including shapes with ragged edges in m, n and k:
 *   - small-integer inputs: the emulated C equals the exact GEMM bit for bit (every sum is exact in f32);
 *   - normal inputs: within f32 rounding of a double-precision GEMM;
 *   - every C cell in range is written exactly once, nothing outside it, `accumulate` adds to the old C;
 *   - every LDS slot of a tile is written exactly once per K tile; gfx11 operands are replicated across
 *     the two half-waves, as the hardware requires.
 * What this cannot check: that the ISA transcription matches the silicon, the compiler's code, timing,
 * or the barriers (the emulation runs the threads one after another). VLLMC_TEST_SEED replays a run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "backend/gpu_gemm_tile.h"
#include "quant/blocks.h"

#define NEVER_WRITTEN (-12345.0f)

/* v_wmma_f32_16x16x16_f16 (wave32) as the ISA guides state it: D = A x B + C for 16 x 16 tiles.
 *   gfx11: A[i][k] in lane i (and its copy in lane i + 16), element k; B[k][j] in lane j (+ 16), element k;
 *          C/D[i][j] in lane j + 16 (i % 2), element i / 2.
 *   gfx12: A[i][k] in lane i + 16 (k / 8), element k % 8; B[k][j] in lane j + 16 (k / 8), element k % 8;
 *          C/D[i][j] in lane j + 16 (i / 8), element i % 8.
 * Returns false if a gfx11 operand is not replicated across the half-waves. */
static bool isa_wmma(int gen, uint16_t a[32][16], uint16_t b[32][16], float c[32][8]) {
    bool repl = true;
    if (gen == 11)
        for (int l = 0; l < 16; l++)
            for (int e = 0; e < 16; e++) repl = repl && a[l][e] == a[l + 16][e] && b[l][e] == b[l + 16][e];
    float d[16][16];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = gen == 11 ? c[j + 16 * (i % 2)][i / 2] : c[j + 16 * (i / 8)][i % 8];
            for (int k = 0; k < 16; k++) {
                const uint16_t ha = gen == 11 ? a[i][k] : a[i + 16 * (k / 8)][k % 8];
                const uint16_t hb = gen == 11 ? b[j][k] : b[j + 16 * (k / 8)][k % 8];
                s += fp16_to_fp32(ha) * fp16_to_fp32(hb);
            }
            d[i][j] = s;
        }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            if (gen == 11) c[j + 16 * (i % 2)][i / 2] = d[i][j];
            else c[j + 16 * (i / 8)][i % 8] = d[i][j];
        }
    return repl;
}

struct emu_stats {
    int lds_bad;      /* LDS slots of a tile not written exactly once */
    int fast_bad;     /* fast-path tiles with a chunk that is not whole */
    int repl_bad;     /* gfx11 operands not replicated */
    int contig_bad;   /* fragment elements not contiguous in K (the kernel reads them as one vector) */
    int oob_writes;   /* stores outside m x n */
    int fast_tiles;   /* tiles that took the fast path */
};

/* A store of the kernel (gemm_store_c): its bounds test, then the write; a store the test lets through outside
 * C's storage is counted, one into C's padding columns changes the sentinel there. */
static void store_c(float *C, int64_t ldc, int64_t m, int64_t n, int64_t row, int64_t col, float v, int accumulate,
                    int *writes, struct emu_stats *st) {
    if (!gpu_gemm_c_in(row, col, m, n)) return;
    if (row < 0 || row >= m || col < 0 || col >= ldc) {
        st->oob_writes++;
        return;
    }
    float *c = C + row * ldc + col;
    *c = accumulate ? *c + v : v;
    writes[row * ldc + col]++;
}

/* gen: 11 or 12 (WMMA bodies), 0 (plain body). vec: the launcher's alignment flag. */
static void emu_gemm(int gen, int64_t m, int64_t n, int64_t k_dim, const uint16_t *A, int64_t lda, const uint16_t *B,
                     int64_t ldb, float *C, int64_t ldc, int accumulate, int vec, int *writes, struct emu_stats *st) {
    unsigned gx, gy;
    if (!gpu_gemm_grid(m, n, k_dim, &gx, &gy)) return;
    static uint16_t lds[2][GPU_GEMM_LDS_STAGE];
    static int lds_w[GPU_GEMM_LDS_STAGE];
    static float acc_w[GPU_GEMM_THREADS / GPU_GEMM_WAVE][GPU_GEMM_FRAG_M][GPU_GEMM_FRAG_N][32][8];
    static float acc_p[GPU_GEMM_THREADS][GPU_GEMM_PLAIN_TM][GPU_GEMM_PLAIN_TN];
    const int n_kt = gpu_gemm_k_tiles(k_dim);
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            const int64_t row0 = (int64_t)by * GPU_GEMM_BM, col0 = (int64_t)bx * GPU_GEMM_BN;
            memset(acc_w, 0, sizeof(acc_w));
            memset(acc_p, 0, sizeof(acc_p));
            for (int kt = 0; kt < (n_kt > 0 ? n_kt : 1); kt++) { /* the kernel loads tile 0 even when k_dim = 0 */
                uint16_t *s = lds[kt & 1];
                memset(s, 0xff, sizeof(lds[0])); /* NaN halves: a slot not loaded poisons the product */
                memset(lds_w, 0, sizeof(lds_w));
                const int64_t k0 = (int64_t)kt * GPU_GEMM_BK;
                const bool fast = gpu_gemm_tile_whole(vec, row0, col0, k0, m, n, k_dim);
                st->fast_tiles += fast;
                for (int tid = 0; tid < GPU_GEMM_THREADS; tid++)
                    for (int i = 0; i < GPU_GEMM_CHUNKS; i++) {
                        int r, k;
                        gpu_gemm_load_chunk(tid, i, &r, &k);
                        for (int op = 0; op < 2; op++) {
                            const uint16_t *X = op ? B : A;
                            const int64_t ld = op ? ldb : lda, rows = op ? n : m, grow = (op ? col0 : row0) + r;
                            const int valid = gpu_gemm_chunk_valid(grow, k0 + k, rows, k_dim);
                            if (fast && valid != GPU_GEMM_CHUNK) st->fast_bad++;
                            const int off = op ? gpu_gemm_lds_b(r, k) : gpu_gemm_lds_a(r, k);
                            for (int e = 0; e < GPU_GEMM_CHUNK; e++) {
                                s[off + e] = (fast || e < valid) ? X[grow * ld + k0 + k + e] : 0;
                                lds_w[off + e]++;
                            }
                        }
                    }
                for (int r = 0; r < GPU_GEMM_BM + GPU_GEMM_BN; r++)
                    for (int k = 0; k < GPU_GEMM_BK; k++)
                        if (lds_w[r * GPU_GEMM_LDS_STRIDE + k] != 1) st->lds_bad++;
                if (n_kt == 0) break;
                if (gen) {
                    for (int w = 0; w < GPU_GEMM_THREADS / GPU_GEMM_WAVE; w++) {
                        int wr0, wc0;
                        gpu_gemm_wave_origin(w, &wr0, &wc0);
                        for (int kk = 0; kk < GPU_GEMM_BK; kk += GPU_GEMM_FRAG)
                            for (int i = 0; i < GPU_GEMM_FRAG_M; i++)
                                for (int j = 0; j < GPU_GEMM_FRAG_N; j++) {
                                    uint16_t a[32][16], b[32][16];
                                    memset(a, 0, sizeof(a));
                                    memset(b, 0, sizeof(b));
                                    for (int lane = 0; lane < 32; lane++)
                                        for (int e = 0; e < gpu_gemm_frag_ab_elems(gen); e++) {
                                            int rc, kq, rc0, kq0;
                                            gpu_gemm_frag_ab(gen, lane, e, &rc, &kq);
                                            gpu_gemm_frag_ab(gen, lane, 0, &rc0, &kq0);
                                            if (rc != rc0 || kq != kq0 + e) st->contig_bad++;
                                            a[lane][e] = s[gpu_gemm_lds_a(wr0 + 16 * i + rc, kk + kq)];
                                            b[lane][e] = s[gpu_gemm_lds_b(wc0 + 16 * j + rc, kk + kq)];
                                        }
                                    if (!isa_wmma(gen, a, b, acc_w[w][i][j])) st->repl_bad++;
                                }
                    }
                } else {
                    for (int tid = 0; tid < GPU_GEMM_THREADS; tid++)
                        for (int k = 0; k < GPU_GEMM_BK; k++)
                            for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++)
                                for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) {
                                    int r, c, r0, c0;
                                    gpu_gemm_plain_cell(tid, i, j, &r, &c);
                                    gpu_gemm_plain_cell(tid, 0, 0, &r0, &c0);
                                    if (r != r0 + 16 * i || c != c0 + 16 * j) st->contig_bad++;
                                    acc_p[tid][i][j] = fmaf(fp16_to_fp32(s[gpu_gemm_lds_a(r, k)]),
                                                            fp16_to_fp32(s[gpu_gemm_lds_b(c, k)]), acc_p[tid][i][j]);
                                }
                }
            }
            if (gen) {
                for (int w = 0; w < GPU_GEMM_THREADS / GPU_GEMM_WAVE; w++) {
                    int wr0, wc0;
                    gpu_gemm_wave_origin(w, &wr0, &wc0);
                    for (int i = 0; i < GPU_GEMM_FRAG_M; i++)
                        for (int j = 0; j < GPU_GEMM_FRAG_N; j++)
                            for (int lane = 0; lane < 32; lane++)
                                for (int v = 0; v < 8; v++) {
                                    int r, c;
                                    gpu_gemm_frag_c(gen, lane, v, &r, &c);
                                    const int64_t grow = row0 + wr0 + 16 * i + r, gcol = col0 + wc0 + 16 * j + c;
                                    if (r < 0 || r >= 16 || c < 0 || c >= 16) st->oob_writes++;
                                    else store_c(C, ldc, m, n, grow, gcol, acc_w[w][i][j][lane][v], accumulate, writes, st);
                                }
                }
            } else {
                for (int tid = 0; tid < GPU_GEMM_THREADS; tid++)
                    for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++)
                        for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) {
                            int r, c;
                            gpu_gemm_plain_cell(tid, i, j, &r, &c);
                            store_c(C, ldc, m, n, row0 + r, col0 + c, acc_p[tid][i][j], accumulate, writes, st);
                        }
            }
        }
}

static uint16_t rand_half(bool integer) {
    if (integer) return fp32_to_fp16((float)((int)(test_rand_u64() % 17) - 8));
    return fp32_to_fp16(test_rand_normal());
}

/* One shape through one body: random A, B (row strides padded by pad_k), C with a sentinel in its padding
 * columns; compares with a double-precision GEMM. */
static void run_case(int gen, int64_t m, int64_t n, int64_t k_dim, int64_t pad_k, int64_t pad_n, bool integer,
                     int accumulate) {
    const int64_t lda = k_dim + pad_k, ldb = k_dim + pad_k, ldc = n + pad_n;
    uint16_t *A = malloc(sizeof(uint16_t) * (size_t)(m * lda + 1)), *B = malloc(sizeof(uint16_t) * (size_t)(n * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(m * ldc)), *C0 = malloc(sizeof(float) * (size_t)(m * ldc));
    int *writes = calloc((size_t)(m * ldc), sizeof(int));
    if (!A || !B || !C || !C0 || !writes) { CHECK(!"out of memory"); goto out; }
    for (int64_t i = 0; i < m * lda; i++) A[i] = rand_half(integer);
    for (int64_t i = 0; i < n * ldb; i++) B[i] = rand_half(integer);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++)
            C[i * ldc + j] = j < n ? (integer ? (float)((int)(test_rand_u64() % 9) - 4) : test_rand_normal()) : NEVER_WRITTEN;
    memcpy(C0, C, sizeof(float) * (size_t)(m * ldc));
    struct emu_stats st = {0};
    const int vec = pad_k % GPU_GEMM_CHUNK == 0; /* the launcher's flag for 16-byte aligned A, B */
    emu_gemm(gen, m, n, k_dim, A, lda, B, ldb, C, ldc, accumulate, vec, writes, &st);
    int64_t bad_val = 0, bad_cover = 0, bad_pad = 0;
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            const float got = C[i * ldc + j];
            if (j >= n) {
                bad_pad += got != NEVER_WRITTEN;
                bad_cover += writes[i * ldc + j] != 0;
                continue;
            }
            bad_cover += writes[i * ldc + j] != 1;
            double ref = accumulate ? C0[i * ldc + j] : 0, mag = fabs(ref);
            for (int64_t k = 0; k < k_dim; k++) {
                const double p = (double)fp16_to_fp32(A[i * lda + k]) * fp16_to_fp32(B[j * ldb + k]);
                ref += p;
                mag += fabs(p);
            }
            if (integer) bad_val += (double)got != ref;
            else {
                const double err = fabs(got - ref), tol = 4e-7 * (double)(k_dim + 2) * mag + 1e-30;
                if (err > tol) bad_val++;
                if (mag > 0 && err / mag > worst) worst = err / mag;
            }
        }
    CHECK_MSG(bad_val == 0 && bad_cover == 0 && bad_pad == 0,
              "gen %d m %lld n %lld k %lld pad_k %lld %s%s: %lld wrong values, %lld cells not written once, %lld padding "
              "cells changed (worst rel %.3g)",
              gen, (long long)m, (long long)n, (long long)k_dim, (long long)pad_k, integer ? "integer" : "normal",
              accumulate ? " accumulate" : "", (long long)bad_val, (long long)bad_cover, (long long)bad_pad, worst);
    CHECK_MSG(st.lds_bad == 0 && st.fast_bad == 0 && st.repl_bad == 0 && st.contig_bad == 0 && st.oob_writes == 0,
              "gen %d m %lld n %lld k %lld: lds %d fast %d replication %d contiguity %d out-of-fragment %d", gen,
              (long long)m, (long long)n, (long long)k_dim, st.lds_bad, st.fast_bad, st.repl_bad, st.contig_bad,
              st.oob_writes);
    /* a shape with whole tiles and aligned rows must take the fast path */
    if (vec && m % GPU_GEMM_BM == 0 && n % GPU_GEMM_BN == 0 && k_dim % GPU_GEMM_BK == 0 && k_dim > 0)
        CHECK(st.fast_tiles == (int)((m / GPU_GEMM_BM) * (n / GPU_GEMM_BN) * gpu_gemm_k_tiles(k_dim)));
out:
    free(A); free(B); free(C); free(C0); free(writes);
}

static void test_layouts(void) {
    /* each of the 256 cells of a 16 x 16 fragment is held by exactly one (lane, element) of C; each (row, k) of
     * an operand by one lane of each half-wave on gfx11, by exactly one lane on gfx12 */
    for (int gen = 11; gen <= 12; gen++) {
        int seen_c[16][16] = {{0}}, seen_ab[16][16] = {{0}};
        for (int lane = 0; lane < 32; lane++) {
            for (int v = 0; v < 8; v++) {
                int r, c;
                gpu_gemm_frag_c(gen, lane, v, &r, &c);
                if (r >= 0 && r < 16 && c >= 0 && c < 16) seen_c[r][c]++;
            }
            for (int e = 0; e < gpu_gemm_frag_ab_elems(gen); e++) {
                int rc, k;
                gpu_gemm_frag_ab(gen, lane, e, &rc, &k);
                if (rc >= 0 && rc < 16 && k >= 0 && k < 16) seen_ab[rc][k]++;
            }
        }
        int bad = 0;
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) bad += seen_c[r][c] != 1 || seen_ab[r][c] != (gen == 11 ? 2 : 1);
        CHECK_MSG(bad == 0, "gfx%d fragment layout: %d cells not covered as required", gen, bad);
    }
    /* the waves tile the block, the plain cells too */
    int cover[GPU_GEMM_BM][GPU_GEMM_BN];
    memset(cover, 0, sizeof(cover));
    for (int w = 0; w < GPU_GEMM_THREADS / GPU_GEMM_WAVE; w++) {
        int r0, c0;
        gpu_gemm_wave_origin(w, &r0, &c0);
        for (int r = 0; r < GPU_GEMM_FRAG_M * 16; r++)
            for (int c = 0; c < GPU_GEMM_FRAG_N * 16; c++)
                if (r0 + r < GPU_GEMM_BM && c0 + c < GPU_GEMM_BN) cover[r0 + r][c0 + c]++;
    }
    int bad = 0;
    for (int r = 0; r < GPU_GEMM_BM; r++)
        for (int c = 0; c < GPU_GEMM_BN; c++) bad += cover[r][c] != 1, cover[r][c] = 0;
    CHECK_MSG(bad == 0, "wave sub-blocks: %d cells not covered once", bad);
    for (int t = 0; t < GPU_GEMM_THREADS; t++)
        for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++)
            for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) {
                int r, c;
                gpu_gemm_plain_cell(t, i, j, &r, &c);
                if (r >= 0 && r < GPU_GEMM_BM && c >= 0 && c < GPU_GEMM_BN) cover[r][c]++;
            }
    bad = 0;
    for (int r = 0; r < GPU_GEMM_BM; r++)
        for (int c = 0; c < GPU_GEMM_BN; c++) bad += cover[r][c] != 1;
    CHECK_MSG(bad == 0, "plain cells: %d cells not covered once", bad);
    /* LDS: two stages within the 64 KB a work-group may allocate on RDNA; rows 16-byte aligned */
    CHECK(GPU_GEMM_LDS_BYTES <= 65536 && (GPU_GEMM_LDS_STRIDE * 2) % 16 == 0);
    CHECK(gpu_gemm_lds_b(0, 0) == gpu_gemm_lds_a(GPU_GEMM_BM - 1, GPU_GEMM_LDS_STRIDE - 1) + 1);
    CHECK(gpu_gemm_lds_b(GPU_GEMM_BN - 1, GPU_GEMM_LDS_STRIDE - 1) == GPU_GEMM_LDS_STAGE - 1);
}

static void test_grid(void) {
    unsigned gx = 0, gy = 0;
    CHECK(gpu_gemm_grid(1, 1, 1, &gx, &gy) && gx == 1 && gy == 1);
    CHECK(gpu_gemm_grid(512, 9216, 2560, &gx, &gy) && gx == 72 && gy == 4);
    CHECK(gpu_gemm_grid(129, 257, 0, &gx, &gy) && gx == 3 && gy == 2);
    CHECK(!gpu_gemm_grid(0, 1, 1, &gx, &gy) && !gpu_gemm_grid(1, 0, 1, &gx, &gy) && !gpu_gemm_grid(1, 1, -1, &gx, &gy));
    CHECK(gpu_gemm_grid((int64_t)GPU_GEMM_MAX_GRID_Y * GPU_GEMM_BM, 1, 1, &gx, &gy) && gy == GPU_GEMM_MAX_GRID_Y);
    CHECK(!gpu_gemm_grid((int64_t)GPU_GEMM_MAX_GRID_Y * GPU_GEMM_BM + 1, 1, 1, &gx, &gy));
    CHECK(!gpu_gemm_grid(1, 1, (int64_t)1 << 31, &gx, &gy));
    CHECK(gpu_gemm_k_tiles(0) == 0 && gpu_gemm_k_tiles(1) == 1 && gpu_gemm_k_tiles(32) == 1 && gpu_gemm_k_tiles(33) == 2);
    CHECK(gpu_gemm_chunk_valid(5, 0, 5, 100) == 0 && gpu_gemm_chunk_valid(4, 96, 5, 100) == 4 &&
          gpu_gemm_chunk_valid(4, 100, 5, 100) == 0 && gpu_gemm_chunk_valid(0, 8, 1, 100) == 8);
}

/* The kernel computes its indices with these functions (the ones emulated above), not by hand: each call is
 * found in its source (run from the repository root, as tests/run.sh does). */
static void test_kernel_source(void) {
    const char *path = "src/backend/cuda/gpu_gemm_hip.cu";
    FILE *f = fopen(path, "rb");
    if (!f) { printf("test_gpu_gemm: %s not found from here: kernel source not checked\n", path); return; }
    static char buf[1 << 18];
    const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    static const char *const calls[] = {
        "gpu_gemm_frag_ab(GEMM_WMMA_GEN, lane, 0, &rc, &k);",
        "(b ? gpu_gemm_lds_b(r0 + rc, kk + k) : gpu_gemm_lds_a(r0 + rc, kk + k))",
        "gpu_gemm_frag_c(GEMM_WMMA_GEN, lane, v, &r, &c);",
        "gemm_store_c(P, row0 + wr0 + 16 * i + r, col0 + wc0 + 16 * j + c, acc[i][j][v]);",
        "gpu_gemm_wave_origin(wave, &wr0, &wc0);",
        "gpu_gemm_load_chunk(tid, i, &r, &k);",
        "gpu_gemm_tile_whole(P.vec, row0, col0, k0, P.m, P.n, P.k_dim)",
        "gpu_gemm_chunk_valid(row, k, n_rows, k_dim)",
        "*(uint4 *)(st + gpu_gemm_lds_a(r, k)) = ra[i];",
        "*(uint4 *)(st + gpu_gemm_lds_b(r, k)) = rb[i];",
        "gpu_gemm_c_in(row, col, P.m, P.n)",
        "gpu_gemm_plain_cell(tid, 0, 0, &pr0, &pc0);",
        "(float)st[gpu_gemm_lds_a(pr0 + 16 * i, k)]",
        "(float)st[gpu_gemm_lds_b(pc0 + 16 * j, k)]",
        "gpu_gemm_grid(m, n, k_dim, &gx, &gy)",
        "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c)",
        "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c)",
    };
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        CHECK_MSG(strstr(buf, calls[i]) != NULL, "%s lacks '%s'", path, calls[i]);
}

int main(void) {
    test_seed_auto("test_gpu_gemm");
    test_layouts();
    test_grid();
    test_kernel_source();
    /* fixed shapes: whole tiles, one past a tile edge in each of m, n, k, tiny, k = 0 */
    static const int64_t shapes[][3] = {{128, 128, 32}, {128, 128, 64}, {129, 128, 32}, {128, 129, 32}, {128, 128, 33},
                                        {1, 1, 1},      {16, 16, 16},   {3, 200, 7},    {37, 130, 70},  {5, 9, 0}};
    const int gens[] = {11, 12, 0};
    for (int g = 0; g < 3; g++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            run_case(gens[g], shapes[s][0], shapes[s][1], shapes[s][2], 0, 3, true, 0);
            run_case(gens[g], shapes[s][0], shapes[s][1], shapes[s][2], 8, 0, true, 1);
        }
    /* random shapes, unaligned row strides (the per-chunk path), both input kinds */
    for (int it = 0; it < 6; it++) {
        const int64_t m = 1 + (int64_t)(test_rand_u64() % 280), n = 1 + (int64_t)(test_rand_u64() % 280);
        const int64_t k = 1 + (int64_t)(test_rand_u64() % 150), pad = (int64_t)(test_rand_u64() % 9);
        run_case(gens[it % 3], m, n, k, pad, (int64_t)(test_rand_u64() % 4), it & 1, (int)(test_rand_u64() & 1));
    }
    for (int g = 0; g < 3; g++) run_case(gens[g], 131, 140, 300, 0, 1, false, 0); /* normal values, f32 rounding */
    return test_finish("test_gpu_gemm");
}
