/* GPU targets the kernels of src/backend/cuda/ are built for (nvcc for NVIDIA, hipcc for AMD), described in
 * plain C so the host code and the CPU tests can reason about them without a GPU runtime:
 *   - what each target offers: hardware wave width, LDS / shared memory per CTA, packed int8 dot form,
 *     matrix engine (tensor-core mma, WMMA, MFMA), board memory bandwidth of the reference card;
 *   - the launch shapes and kernel variants of the quantized mat-vec (gemv_q.cu cu_launch_matmul) and of the
 *     norm+quantize kernel, as functions of (target, shape): the launchers make the same choices;
 *   - the lane -> unit mapping of the mat-vec kernels, so tests can check on the CPU, for wave32 and wave64,
 *     that every quantized block of every row is read by exactly one lane;
 *   - the decode roofline (tokens/s bound = bandwidth / bytes read per token).
 *
 * The kernels are written for 32-lane groups (GPU_GROUP_LANES): a CTA of GPU_MM_GROUPS_PER_CTA groups;
 * lane = threadIdx.x % 32. On wave32 targets (NVIDIA, RDNA2/3/4) one group is one hardware wave; on wave64
 * targets (GCN/CDNA) a wave holds two groups, and every cross-lane reduction must stay inside its group
 * (offsets < 32), never span the whole wave. */
#ifndef VLLMC_GPU_TARGET_H
#define VLLMC_GPU_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#define GPU_GROUP_LANES 32       /* lanes of the logical group every kernel is written for */
#define GPU_MM_GROUPS_PER_CTA 4  /* CU_MM_WARPS: groups (rows, or 4-row tiles) per mat-vec CTA */
#define GPU_MM_TILE_ROWS 4       /* MM_TR: rows of a decode tile */
#define GPU_MM_TILE_MIN_ROWS 8192 /* decode uses row tiles from this many rows (all segments together) */
#define GPU_MM_PREFILL_ACT 8     /* activation rows sharing each weight load at prefill (gfx11: 4, mm_prefill_act) */
#define GPU_NQ_GROUPS_PER_CTA 8  /* NQ_WARPS (norm_quant.h): 256-element units per norm+quantize CTA */

enum gpu_vendor { GPU_VENDOR_NVIDIA = 0, GPU_VENDOR_AMD = 1 };

/* The packed 4 x int8 dot product with int32 accumulate the decode kernels are built on. */
enum gpu_dot4 {
    GPU_DOT4_SCALAR = 0,  /* four multiplies (exact, slow) */
    GPU_DOT4_DP4A = 1,    /* NVIDIA __dp4a (sm_61+) */
    GPU_DOT4_SDOT4 = 2,   /* AMD v_dot4_i32_i8 (gfx906/908/90a, gfx1030): __builtin_amdgcn_sdot4 */
    GPU_DOT4_SUDOT4 = 3,  /* AMD v_dot4_i32_iu8 (gfx11, gfx12): __builtin_amdgcn_sudot4, both operands signed */
};

/* Matrix engine a prefill GEMM can use (decode at batch 1 is a mat-vec and uses none). */
enum gpu_matrix {
    GPU_MATRIX_NONE = 0,       /* RDNA2 */
    GPU_MATRIX_MMA = 1,        /* NVIDIA tensor cores: mma.sync / wgmma, int8 and fp16 */
    GPU_MATRIX_WMMA_GFX11 = 2, /* RDNA3: v_wmma_*_16x16x16 (f16, bf16, iu8, iu4), wave32, A/B replicated per half-wave */
    GPU_MATRIX_WMMA_GFX12 = 3, /* RDNA4: v_wmma_*_16x16x16 (adds fp8/bf8), no replication: other operand layout */
    GPU_MATRIX_MFMA = 4,       /* CDNA: v_mfma_*, wave64 */
};

struct gpu_target {
    const char *name;          /* offload arch: "sm_90", "gfx1100", ... */
    const char *board;         /* reference board the bandwidth and CU count are of */
    enum gpu_vendor vendor;
    int warp_size;             /* hardware wave width the kernels are compiled for */
    int lds_bytes_per_cta;     /* shared memory / LDS one CTA (work-group) can allocate */
    int n_cu;                  /* SMs / CUs of the reference board */
    double mem_bw_gbs;         /* memory bandwidth of the reference board, GB/s (1e9 bytes) */
    double vram_gib;
    enum gpu_dot4 dot4;
    enum gpu_matrix matrix;
    bool debian_hipcc_compiles; /* Debian's hipcc (ROCm 5.2, LLVM 15) knows this target */
    bool debian_hipcc_links;    /* ... and ships its device library, so a full HIP link works there */
    int mm_prefill_act;         /* activation rows per group of the prefill mat-vec (gpu_compat.h
                                   VLLMC_MM_PREFILL_ACT): 4 on gfx11, where 8 spills; GPU_MM_PREFILL_ACT elsewhere */
};

/* Known targets (index 0 .. gpu_target_count()-1) and lookup by offload-arch name (NULL if unknown). */
int gpu_target_count(void);
const struct gpu_target *gpu_target_at(int i);
const struct gpu_target *gpu_target_find(const char *name);

/* Logical groups in one hardware wave (1 on wave32, 2 on wave64). */
int gpu_groups_per_wave(const struct gpu_target *t);
/* Widest butterfly offset a group reduction may use (GPU_GROUP_LANES / 2 on every target): a reduction
 * over the whole wave would mix the two groups of a wave64. */
int gpu_group_reduce_max_offset(const struct gpu_target *t);

/* ---- quantized mat-vec: kernel variant and launch shape (mirrors cu_launch_matmul) ---- */
enum gpu_mm_kernel {
    GPU_MM_ROWS = 0,      /* decode, one group per weight row, rows strided over a resident grid */
    GPU_MM_TILES = 1,     /* decode, one group per 4-row tile, units dealt row-major over the tile */
    GPU_MM_PREFILL = 2,   /* several activation rows: one group per (row, mm_prefill_act act rows) */
};
struct gpu_mm_plan {
    enum gpu_mm_kernel kernel;
    int ctas;              /* grid size */
    int threads;           /* threads per CTA */
    int waves_per_cta;     /* hardware waves per CTA */
    int rows_per_group;    /* weight rows one group owns at a time */
    int act_per_group;     /* activation rows one group multiplies */
    int total_rows, total_tiles, n_ctas_rows; /* as cu_mm_args counts them */
};
/* seg_rows / seg_types: rows and GGML type of each fused weight (1 .. 4 segments; seg_types may be NULL:
 * all K-quants), n_act activation rows, resident: CTAs the GPU holds at once (the runtime's occupancy
 * answer). The tile kernel has Q4_K, Q6_K, Q8_0 and F32 only: a segment of any other type (Q4_0, Q5_0,
 * Q5_K, IQ4_XS, ...) keeps the row kernel.
 * Returns false on an invalid shape. */
bool gpu_mm_plan_make(const struct gpu_target *t, const int *seg_rows, const uint32_t *seg_types, int n_seg,
                      int n_act, int resident, struct gpu_mm_plan *out);

/* Lane -> unit mapping of the decode mat-vec for one step of one 32-lane group. A unit is what one lane
 * reads in one step: a Q4_K / Q6_K chunk of 64 elements of one super-block (32 bytes of quants) or one
 * Q8_0 block of 32. Elements covered: [elem0[0], elem0[0] + run) and [elem0[1], elem0[1] + run) of the
 * row (one run for Q8_0). */
struct gpu_mm_unit {
    bool valid;            /* false: the lane idles this step (past the last unit) */
    int row;               /* row within the tile (0 for one-row kernels) */
    int block;             /* super-block (Q4_K, Q6_K) or block (Q8_0) within the row */
    int n_runs, run;       /* element runs of this unit and their length */
    int elem0[2];
};
/* type: GGML type id (Q4_K, Q6_K, Q8_0; Q4_0 and Q5_0 as Q8_0: a 32-element block per lane). n_cols: row width; rows: rows of the tile (1 for GPU_MM_ROWS).
 * Returns false for an unsupported type or width. */
bool gpu_mm_lane_unit(uint32_t type, int64_t n_cols, int rows, int step, int lane, struct gpu_mm_unit *u);
/* Steps one group takes over a tile of `rows` rows (the kernels' n_steps). */
int gpu_mm_steps(uint32_t type, int64_t n_cols, int rows);

/* ---- norm + quantize (cu_launch_norm_quant): grid (ctas_x, n_rows), threads per CTA ---- */
void gpu_nq_shape(const struct gpu_target *t, int64_t n_cols, int64_t n_rows, int *ctas_x, int *ctas_y, int *threads);

/* ---- roofline ---- */
/* Upper bound on decode tokens/s when every token reads bytes_per_token from memory; 0 if undefined. */
double gpu_roofline_tok_s(const struct gpu_target *t, double bytes_per_token);

const char *gpu_dot4_name(enum gpu_dot4 d);
const char *gpu_matrix_name(enum gpu_matrix m);
const char *gpu_mm_kernel_name(enum gpu_mm_kernel k);

#endif
