/* Index logic of the AMD dense f16 GEMM (src/backend/cuda/gpu_gemm_hip.cu), as inline functions that both the
 * kernel (hipcc, device code) and the CPU test (tests/test_gpu_gemm.c, C11) call, so the test exercises the
 * kernel's own data movement:
 *
 *   C[i][j] (+)= sum_k A[i][k] * B[j][k]     (A: m x k_dim, B: n x k_dim, both k-contiguous; C: m x n, f32)
 *
 * One work-group of GPU_GEMM_THREADS threads (8 wave32 waves) owns a GPU_GEMM_BM x GPU_GEMM_BN block of C
 * (block (bx, by): rows by*BM .., columns bx*BN ..). K advances in tiles of GPU_GEMM_BK: each thread moves
 * GPU_GEMM_CHUNKS chunks of 8 halves (16 bytes) of A and of B from global memory into LDS (zeros past m, n or
 * k_dim), two LDS stages alternate so one barrier per K tile suffices. LDS rows are padded to
 * GPU_GEMM_LDS_STRIDE halves (16-byte aligned rows, rows of a fragment on different banks).
 *
 * WMMA body (gfx11, gfx12): wave w owns a 64 x 32 sub-block (GPU_GEMM_FRAG_M x GPU_GEMM_FRAG_N fragments of
 * 16 x 16) and issues v_wmma_f32_16x16x16_f16 per fragment and 16-wide K step. Operand and result layouts:
 *   gfx11 (RDNA3) A, B: lane l holds row (A) / column (B) l % 16, all 16 K values (element e = K index e);
 *                       lanes 16..31 repeat lanes 0..15 (the hardware reads both halves).
 *                 C, D: lane l, element v (of 8) holds D[2v + l / 16][l % 16].
 *   gfx12 (RDNA4) A, B: lane l holds row / column l % 16, K values 8 (l / 16) + e for e < 8 (no repetition).
 *                 C, D: lane l, element v holds D[8 (l / 16) + v][l % 16].
 * Plain body (other targets): thread t computes the 8 x 8 cells (ty + 16 i, tx + 16 j), tx = t % 16,
 * ty = t / 16, with scalar f32 FMAs from LDS. Both bodies share the tiling, the loads and the launch shape, so
 * the host needs no knowledge of the device's generation. */
#ifndef VLLMC_GPU_GEMM_TILE_H
#define VLLMC_GPU_GEMM_TILE_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GPU_GEMM_HD static inline __host__ __device__
#else
#define GPU_GEMM_HD static inline
#endif

#define GPU_GEMM_BM 128          /* rows of A (and C) per work-group */
#define GPU_GEMM_BN 128          /* rows of B (columns of C) per work-group */
#define GPU_GEMM_BK 32           /* K per LDS tile */
#define GPU_GEMM_THREADS 256     /* 8 waves of 32 */
#define GPU_GEMM_WAVE 32
#define GPU_GEMM_WAVES_M 2       /* waves along M ... */
#define GPU_GEMM_WAVES_N 4       /* ... and along N */
#define GPU_GEMM_FRAG 16         /* WMMA tile edge */
#define GPU_GEMM_FRAG_M 4        /* 16 x 16 fragments per wave along M (64 rows) */
#define GPU_GEMM_FRAG_N 2        /* ... along N (32 columns) */
#define GPU_GEMM_CHUNK 8         /* halves per global -> LDS move (16 bytes) */
#define GPU_GEMM_CHUNKS ((GPU_GEMM_BM * GPU_GEMM_BK / GPU_GEMM_CHUNK) / GPU_GEMM_THREADS) /* per thread and operand */
#define GPU_GEMM_LDS_STRIDE (GPU_GEMM_BK + 8) /* halves per LDS row: 80 bytes */
#define GPU_GEMM_LDS_STAGE ((GPU_GEMM_BM + GPU_GEMM_BN) * GPU_GEMM_LDS_STRIDE) /* halves: A rows, then B rows */
#define GPU_GEMM_LDS_BYTES (2 * GPU_GEMM_LDS_STAGE * 2) /* two stages: 40 KB of the 64 KB a work-group may have */
#define GPU_GEMM_PLAIN_TM 8      /* plain body: rows per thread */
#define GPU_GEMM_PLAIN_TN 8      /* ... and columns */
#define GPU_GEMM_MAX_GRID_Y 65535

/* WMMA operand / result layouts, by RDNA generation (11: gfx11, 12: gfx12). */
GPU_GEMM_HD int gpu_gemm_frag_ab_elems(int gen) { return gen == 12 ? 8 : 16; }
/* Element e of lane `lane`'s A (or B) operand register: row of A (column of C for B) within the fragment,
 * and K within the 16-wide step. */
GPU_GEMM_HD void gpu_gemm_frag_ab(int gen, int lane, int e, int *rc, int *k) {
    *rc = lane & 15;
    *k = gen == 12 ? 8 * (lane >> 4) + e : e;
}
/* Element v (of 8) of lane `lane`'s C / D register: row and column within the 16 x 16 fragment. */
GPU_GEMM_HD void gpu_gemm_frag_c(int gen, int lane, int v, int *row, int *col) {
    *row = gen == 12 ? 8 * (lane >> 4) + v : 2 * v + (lane >> 4);
    *col = lane & 15;
}

/* Chunk i (< GPU_GEMM_CHUNKS) of thread tid: row within the block's A (or B) rows, first K within the tile. */
GPU_GEMM_HD void gpu_gemm_load_chunk(int tid, int i, int *row, int *k) {
    const int c = tid + i * GPU_GEMM_THREADS;
    *row = c / (GPU_GEMM_BK / GPU_GEMM_CHUNK);
    *k = (c % (GPU_GEMM_BK / GPU_GEMM_CHUNK)) * GPU_GEMM_CHUNK;
}
/* Halves of a chunk at global (row, k) inside an operand of n_rows x k_dim: 0 .. GPU_GEMM_CHUNK; the rest of
 * the chunk is zero in LDS. */
GPU_GEMM_HD int gpu_gemm_chunk_valid(int64_t row, int64_t k, int64_t n_rows, int64_t k_dim) {
    if (row >= n_rows || k >= k_dim) return 0;
    return k_dim - k >= GPU_GEMM_CHUNK ? GPU_GEMM_CHUNK : (int)(k_dim - k);
}
/* Whether K tile k0 .. of the block (row0, col0) lies wholly inside A and B, so that every chunk is whole and
 * loads as one 16-byte read (vec: the operands' alignment allows it). The same for every thread of the block. */
GPU_GEMM_HD bool gpu_gemm_tile_whole(int vec, int64_t row0, int64_t col0, int64_t k0, int64_t m, int64_t n, int64_t k_dim) {
    return vec && row0 + GPU_GEMM_BM <= m && col0 + GPU_GEMM_BN <= n && k0 + GPU_GEMM_BK <= k_dim;
}
/* Whether cell (row, col) of C is stored (inside m x n). */
GPU_GEMM_HD bool gpu_gemm_c_in(int64_t row, int64_t col, int64_t m, int64_t n) { return row < m && col < n; }
/* LDS offset (halves, within a stage) of A's block row r / B's block row r at K offset k of the tile. */
GPU_GEMM_HD int gpu_gemm_lds_a(int r, int k) { return r * GPU_GEMM_LDS_STRIDE + k; }
GPU_GEMM_HD int gpu_gemm_lds_b(int r, int k) { return (GPU_GEMM_BM + r) * GPU_GEMM_LDS_STRIDE + k; }

/* First row (M) and column (N) of wave w's 64 x 32 sub-block within the work-group's block. */
GPU_GEMM_HD void gpu_gemm_wave_origin(int wave, int *row0, int *col0) {
    *row0 = (wave / GPU_GEMM_WAVES_N) * GPU_GEMM_FRAG_M * GPU_GEMM_FRAG;
    *col0 = (wave % GPU_GEMM_WAVES_N) * GPU_GEMM_FRAG_N * GPU_GEMM_FRAG;
}
/* Plain body: cell (i, j) of thread tid, i < GPU_GEMM_PLAIN_TM, j < GPU_GEMM_PLAIN_TN. */
GPU_GEMM_HD void gpu_gemm_plain_cell(int tid, int i, int j, int *row, int *col) {
    *row = tid / 16 + 16 * i;
    *col = tid % 16 + 16 * j;
}

GPU_GEMM_HD int gpu_gemm_k_tiles(int64_t k_dim) { return (int)((k_dim + GPU_GEMM_BK - 1) / GPU_GEMM_BK); }
/* Grid (x over N blocks, y over M blocks); false when the shape does not fit one launch. */
GPU_GEMM_HD bool gpu_gemm_grid(int64_t m, int64_t n, int64_t k_dim, unsigned *gx, unsigned *gy) {
    if (m <= 0 || n <= 0 || k_dim < 0 || k_dim > ((int64_t)1 << 31) - GPU_GEMM_BK) return false;
    const int64_t x = (n + GPU_GEMM_BN - 1) / GPU_GEMM_BN, y = (m + GPU_GEMM_BM - 1) / GPU_GEMM_BM;
    if (x > 0x7fffffff || y > GPU_GEMM_MAX_GRID_Y) return false;
    *gx = (unsigned)x;
    *gy = (unsigned)y;
    return true;
}

#endif
