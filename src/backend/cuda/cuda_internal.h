/* CUDA backend internals shared by its kernel files (C++; compiled by nvcc or hipcc).
 *
 * Weights of type Q4_K, Q6_K and Q8_0 are repacked at upload into a row layout whose pieces are all
 * 16-byte aligned, so consecutive lanes of a warp read consecutive 16-byte words (the integer values
 * and the scale bytes are the GGUF ones, only moved):
 *   Q4_K row: qs [n_sb][128] | scales [n_sb][12] (padded to 16) | d,dmin [n_sb][2 x fp16] (padded to 16)
 *   Q6_K row: ql [n_sb][128] | qh [n_sb][64] | scales [n_sb][16] | d [n_sb] fp16 (padded to 16)
 *   Q8_0 row: qs [n_b][32] | d [n_b] fp16 (padded to 16)
 * F32, F16 and BF16 weights are copied as they are.
 *
 * Quantized activations (struct bk_act formats) are stored split, per format buffer of an act with
 * max_rows rows of n columns (same byte count as the GGUF block arrays):
 *   Q8_K: qs int8 [max_rows][n] | d f32 [max_rows][n/256] | (to 16 bytes) bsums int16 [max_rows][n/16]
 *   Q8_0: qs int8 [max_rows][n] | d fp16 [max_rows][n/32]
 * (dev_alloc leaves 256 bytes of slack past every buffer, which the alignment pad uses.)
 * The quantized values equal the CPU's byte for byte; every integer partial of a dot product equals
 * the CPU's, and so does each super-block's float term; only the order in which the terms are summed
 * differs (F32 weights keep the reference's p[i % 32] order and are bit-exact). */
#ifndef VLLMC_CUDA_INTERNAL_H
#define VLLMC_CUDA_INTERNAL_H

#include <stdint.h>
#include "backend/cuda/gpu_compat.h"
#include "backend/cuda/gdn_runs.h"
#include "quant/blocks.h"
extern "C" {
#include "backend/backend.h"
}

/* Q3_K's 6-bit scale j (0 .. 15) of a super-block's 12 scale bytes S, less 32 (quant/dequant.c dequant_q3k_scale). */
static __device__ __forceinline__ int q3k_scale(const uint8_t *S, int j) {
    const int lo = j < 8 ? (S[j] & 15) : (S[j - 8] >> 4), hi = (S[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* kvalues_iq4nl[q] (quant/blocks.h) for q in 0 .. 15: the table as 4 little-endian words, by selects (no local array). */
static __device__ __forceinline__ int iq4nl_value(int q) {
    const uint32_t w = q < 8 ? (q < 4 ? 0xBFAD9881u /* -127 -104 -83 -65 */ : 0xF6EADDCFu /* -49 -35 -22 -10 */)
                             : (q < 12 ? 0x26190D01u /* 1 13 25 38 */ : 0x71594535u /* 53 69 89 113 */);
    return (int)(int8_t)(w >> (8 * (q & 3)));
}

/* kvalues_mxfp4[q] (quant/blocks.h) for q in 0 .. 15, as iq4nl_value: the E2M1 values times 2. */
static __device__ __forceinline__ int mxfp4_value(int q) {
    const uint32_t w = q < 8 ? (q < 4 ? 0x03020100u /* 0 1 2 3 */ : 0x0C080604u /* 4 6 8 12 */)
                             : (q < 12 ? 0xFDFEFF00u /* 0 -1 -2 -3 */ : 0xF4F8FAFCu /* -4 -6 -8 -12 */);
    return (int)(int8_t)(w >> (8 * (q & 3)));
}

/* Half the MXFP4 E8M0 block scale, 2^(e - 128) as f32, bit for bit quant/dot_impl.h's dot_e8m0_half (e = 0, 1: the f32
 * subnormals 2^-128, 2^-127; the kernels are built without flush-to-zero, so the products keep them as the CPU does). */
static __device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* Four floats as bf16 (blocks.h's fp32_to_bf16: rounded to nearest even, the CPU backend's conversion), packed in element
 * order into 8 bytes: the stores of a bf16 GDN state (the rule kernel, the chunked kernel's last chunk). */
static __device__ __forceinline__ uint2 bf16x4_pack(float a, float b, float c, float d) {
    return make_uint2((uint32_t)fp32_to_bf16(a) | (uint32_t)fp32_to_bf16(b) << 16, (uint32_t)fp32_to_bf16(c) | (uint32_t)fp32_to_bf16(d) << 16);
}

/* ---- weights ---- */
/* Bytes of one repacked row (0 if the type or width is not supported on this backend). */
uint64_t cu_weight_row_stride(uint32_t type, int64_t n_cols);
/* Host-side repack of n_rows GGUF rows into dst (cu_weight_row_stride bytes each). */
void cu_repack_rows(uint32_t type, const void *src, int64_t n_cols, int64_t n_rows, uint8_t *dst);
/* Inverse (tests): GGUF rows from repacked ones. */
void cu_unpack_rows(uint32_t type, const uint8_t *src, int64_t n_cols, int64_t n_rows, void *dst);

/* ---- activations ---- */
struct cu_act_view {
    const float *x;            /* f32 rows, stride n */
    const int8_t *k_qs;        /* Q8_K */
    const float *k_d;
    const int16_t *k_bs;
    const int8_t *o_qs;        /* Q8_0 (Q8_1's quants and scales where the act has no Q8_0 part: the same values) */
    const uint16_t *o_d;
    const uint16_t *o_s;       /* Q8_1's f16 s (d * the block's quant sum) a block, or NULL; act_row leaves it at row 0
                                  (its readers, the Q4_1 / Q5_1 row kernels, take the launch's view and row index) */
    int64_t n;                 /* columns */
    int32_t copies;            /* > 1: the Q8_K part repeated that many times, copy_bytes apart (from k_qs, k_d, k_bs each),
                                  and a Q4_K launch of the tensor-core mat-vec takes its AP 3 instance, CTA b reading copy
                                  b % copies (bench_gemv's measurement of the activation's L2 lines read by every CTA at
                                  once; the backend's views have one); else one */
    int32_t kd;                /* 1: the deferred-norm form (BK_ACT_Q8_KD): k_qs / k_bs its quants and 16-value sums, kd_d
                                  its scale every 16 values (k_d NULL), kd_ssq the row's sums of squares every 16; only
                                  mm_kernel_mma's AP 7 instance reads it (cu_mm_kd_takes) */
    int64_t copy_bytes;
    const float *kd_d, *kd_ssq;
    float kd_eps;              /* the RMSNorm's epsilon, applied with the sums of squares in the reader's epilogue */
    int32_t pad_;
};
/* The deferred-norm form's writer: the tensor-core mat-vec launch that adds its outputs into the residual also writes
 * x * nw of its 16 rows as one group (cu_mm_args.kdq; BK_ACT_Q8_KD, backend.h): quants, scale, quant sum, and the sum
 * of the 16 residual values' squares. */
struct cu_mm_kdq {
    int8_t *qs;
    float *d;
    int16_t *bs;
    float *ssq;
    const float *nw;
    int32_t on, skip;          /* skip: the quantization left out (cu_kd_abl bit 1, a timing measurement: wrong results) */
};
/* VLLMC_CUDA_KD_ABL (timing measurements of the deferred-norm form, not for use: bits 1 and 4 give wrong results): bit 1
 * the writer leaves its quantization out, bit 2 the reader at 2,560 columns takes the unbounded instance (101
 * registers, 3 CTAs an SM), bit 4 the reader takes the plain AP 6 instance over the same buffers (no 16-value scales,
 * no RMS scale). */
extern int cu_kd_abl;
/* Whether a one-row launch of weight type `type` and rows of n columns takes mm_kernel_mma's 16-row Q4_K instance, the
 * only one with the deferred-norm form's writer and reader (false on HIP). */
bool cu_mm_kd_takes(int type, int64_t n, int n_act);
struct cu_act_mut {
    float *x;
    int8_t *k_qs;
    float *k_d;
    int16_t *k_bs;
    int8_t *o_qs;              /* Q8_0, else Q8_1's quants and scales (the same values) */
    uint16_t *o_d;
    uint16_t *o_s;             /* Q8_1's s a block (d * the block's quant sum), or NULL */
    uint16_t *h;               /* F16 rows */
    uint16_t *bf;              /* BF16 rows */
    int8_t *kd_qs;             /* BK_ACT_Q8_KD: quants [rows][n], then scales, quant sums, sums of squares [rows][n / 16] */
    float *kd_d;
    int16_t *kd_bs;
    float *kd_ssq;
    int64_t n;
};
/* Split pointers of an act's format buffers (NULL for formats not allocated). */
struct cu_act_mut cu_act_split(const struct bk_act *a);

/* ---- fused matmul: up to CU_MM_MAX_SEG weights sharing one activation ---- */
#define CU_MM_MAX_SEG 4
struct cu_mm_seg {
    const uint8_t *w;          /* repacked rows */
    const float *bias;
    float *y;
    float *res;                /* or NULL: also res[a][row] += y[a][row] (row stride ld_y; the residual add) */
    int64_t ld_y;
    uint64_t stride;           /* bytes per row */
    int32_t type;
    int32_t n_rows;
    int32_t cta0;              /* first CTA of this segment (prefill kernel) */
    int32_t row0;              /* first row of this segment in the concatenation */
    int32_t tile0;             /* first 4-row tile of this segment (decode kernel) */
};
/* A Gated DeltaNet layer's causal conv done where its input is written (a decode step in which every token is its
 * sequence's only one): the rows of segment `seg` are the conv channels, and for each (token t, channel ch) the
 * matmul's epilogue forms the window (the slot's d_conv - 1 states, then the new value), writes
 * out[t][ch] = silu(window . w[ch]) and shifts the state, as gdn_conv_kernel does (same ops, same bits). */
struct cu_mm_conv {
    const int32_t *pos, *seq, *seqinfo; /* the step's batch (cu_batch_dev) */
    float *out;                /* [n_act][n_ch] */
    float *state;              /* slot s, channel ch: state + s * state_floats + ch * (CU_CONV_K - 1) */
    const float *w;            /* [n_ch][CU_CONV_K] */
    int64_t state_floats;
    int32_t on, seg, n_ch, pad;
};
#define CU_CONV_K 4            /* the conv width the fused form takes (qwen35: 4) */
/* A norm + quantize of a launch's outputs done inside it (cu_launch_norm_quant's work through the same functions,
 * norm_quant.h, so the same bits): every CTA counts the output columns it wrote per unit of the output act (RMSNORM: a
 * whole row, as its scale needs the row's sum of squares; else 256 columns) and activation-row group on a device
 * counter, and the CTA whose count completes a unit runs it. The launch after it then follows directly (no norm +
 * quantize launch between), so a mat-vec there starts loading its weights while this one finishes. Taken by the
 * column-split and streaming mat-vecs (row j of a feeding segment is column j: RMSNORM of the residual a segment adds
 * to, SWIGLU of gate / up) and the GDN rule kernel (GATED: its raw outputs in out.x, z in in1); where a matmul takes
 * another kernel, cu_launch_matmul runs the norm + quantize as its own launch right after. */
struct cu_nq_fuse {
    const float *in0, *in1;    /* RMSNORM: in0 the residual rows (row stride out.n); SWIGLU: gate, up; GATED: in1 z (row
                                  stride ld) */
    const float *w;
    unsigned *cnt;             /* cu_nq_fuse_counters(...) counters, zero between launches (the last counter resets each) */
    struct cu_act_mut out;
    int64_t ld;
    float eps;
    int32_t on, mode, group;   /* cu_launch_norm_quant's mode (RMSNORM, SWIGLU, GATED) and group */
    uint32_t fmts;
    uint32_t feed;             /* matmul: bit i, segment i feeds the output */
    int32_t n_feed, pad;
};
/* Counters a fused norm + quantize of mode over n output columns and n_act activation rows needs. */
int64_t cu_nq_fuse_counters(int mode, int64_t n, int64_t n_act);
#define CU_NQ_FUSE_COUNTERS 8192 /* the backend's counter array */
struct cu_mm_args {
    struct cu_mm_seg seg[CU_MM_MAX_SEG];
    int32_t n_seg;
    int32_t n_ctas;            /* CTAs per group of act rows */
    int32_t n_act;             /* act rows */
    int32_t total_rows;        /* rows of all segments */
    int32_t total_tiles;       /* 4-row tiles of all segments */
    int32_t row_order;         /* batch invariance: one activation row must sum in the order of the multi-row
                                  kernel (mm_row), so the decode tile kernel runs only where its order is the same */
    struct cu_act_view a;
    struct cu_mm_conv conv;    /* conv.on: the GDN conv in the epilogue (or a kernel right after, where the launch
                                  does not take the column-split kernel) */
    struct cu_nq_fuse nq;      /* nq.on: the norm + quantize that reads the outputs, in the launch (or right after) */
    float *mmq_ws;             /* mm_kernel_mmq's fragments workspace (CU_MMQ_WS_FLOATS) and tile counters (CU_MMQ_TILES,
                                  zero between launches): the backend's own, so backends on other streams do not share
                                  them; NULL: that kernel's launches are not split */
    unsigned *mmq_cnt;
    int32_t pf_next;           /* mm_kernel_mma's AP 6: the CTAs resident at once (its instance's occupancy x the SMs), so
                                  CTA b + pf_next is the one that takes CTA b's place in the next round */
    struct cu_mm_kdq kdq;      /* kdq.on: the deferred-norm form of the residual written in the epilogue (one segment of
                                  Q4_K rows with a residual, one activation row) */
};
#define CU_MMQ_WS_FLOATS (4 << 20) /* 16 MB */
#define CU_MMQ_TILES 16384         /* a launch's tiles at most */
#define CU_MM_WARPS 4          /* rows per CTA (one warp per row) */
/* Decode mat-vec kernel choice by the rows of a launch (all segments): class 0 below rows[0], class 1
 * below rows[1], class 2 the rest. ks[c] 0: one warp per row (class 0) or per 4-row tile (else), a grid
 * of the resident CTAs; ks[c] 1, 2 or 4: tiles of tr[c] (1..4) rows, each taken by ks[c] warps of a CTA
 * that split its super-blocks (split-K) and add their partial sums in warp order; pers[c] > 0 bounds that
 * grid to pers[c] x the resident CTAs, which step over the tiles prefetching the next ones into L2. */
struct cu_mm_cfg {
    int32_t rows[2];
    int32_t tr[3], ks[3];
    int32_t pers[3];           /* ks >= 1: 0 one CTA per tile group, else at most pers x the resident CTAs (persistent) */
    int32_t dec_rows;          /* 2..dec_rows activation rows of Q4_K / Q6_K / Q8_0 / F32 weights: mm_kernel_dec (a warp
                                  per (weight row, activation row), the rows of one weight row side by side so its
                                  bytes come from L2; mm_row's order per row). 0: off (not yet measured) */
    int32_t cols[3];           /* the column-split kernel (mm_kernel_cols) for one activation row where its types allow,
                                  except under batch invariance (its sums are not mm_row's order): 0 off, 2 or 4 row
                                  groups a CTA, else (1) 4 for Q4_K alone and 2 with Q6_K */
    int32_t cols_rows;         /* 2 .. cols_rows activation rows: the column-split kernel's multi-row form (not under
                                  batch invariance); 0 off */
    int32_t cols_invariant;    /* 1: under batch invariance too, for every row count (their per-row order does not
                                  depend on it); 0 (default until measured): the mm_row-order kernels there */
    int32_t moe_cols_rows;     /* MoE ops of up to this many rows: the column-split expert kernels (cu_launch_moe_cols;
                                  under batch invariance only with cols_invariant); 0 off */
    int32_t moe_group_rows;    /* MoE ops of at least this many rows (that the column-split launches do not take): the
                                  entries grouped by expert (cu_launch_moe_grouped); 0 off */
    int32_t nq_early;          /* 1: the norm + quantize kernel lets the next launch start before its own wait */
    int32_t cols_sbw2;         /* the column-split kernel gives a warp 2 super-blocks for rows of up to this many (16:
                                  up to 8 warps a CTA), else 4 (VLLMC_CUDA_COLS_SBW2, comparisons) */
    int32_t cols_lb;           /* the one-activation-row column-split launches on instances bounded by registers to more CTAs
                                  an SM (fewer rounds of CTAs), a bit per class: 1 Q4_K at 2,560 columns (160 threads, 5
                                  an SM), 2 the Q6_K LM head at 2,560 (160, 5), 4 rows of 9,216 columns (288, 3); 8 / 16
                                  classes 2 / 4 with the next round's rows into L2 after the release (mma_next_l2); 0: none */
    int32_t sbt;               /* the one-activation-row launches whose K-quant rows are all Q4_K, of up to sbt super-blocks
                                  a row and sbt_rows rows, take the kernel of one super-block a thread (mm_kernel_sbt: the
                                  same bits as the column-split kernel); sbt 0: none */
    int32_t sbt_rows;
    int32_t mma;               /* the one-activation-row launches of Q4_K / Q6_K rows on the tensor-core kernel
                                  (mm_kernel_mma: the same bits as the column-split kernel), a bit per class: 1 Q4_K rows of
                                  up to cols_sbw2 super-blocks, 2 longer Q4_K rows, 4 launches with Q6_K rows of up to
                                  cols_sbw2 super-blocks and fewer than rows[1] rows (4096: of any rows, the LM head), 8 class 1's 2,560-column launches on an instance bounded to 5
                                  CTAs an SM, 16 class 1's launches of fewer than rows[0] rows at 8 rows a CTA, 32 the
                                  activation of a warp's later super-blocks prefetched into L1, 64 copied into shared
                                  memory instead (mm_kernel_mma's AP; both measured slower: off), 128 / 256 more rows a
                                  CTA in shared memory (mm_kernel_mmx), 512 the Q4_K low nibbles' sums by subtraction
                                  (AP 4), 1024 the same with the activation loaded at once (AP 5), 2048 as 512 with the next
                                  round's rows asked into L2 right after the release (AP 6); 0: none (HIP: always none) */
    int32_t mmr_rows;          /* steps of 2 .. mmr_rows activation rows (not under batch invariance): their Q4_K / Q6_K
                                  rows on the tensor-core kernel mm_kernel_mmrs; 0: none (HIP: always none) */
    int32_t mmr_small_sb;      /* ... but rows of fewer super-blocks than this only from mmr_small_rows activation rows */
    int32_t mmr_small_rows;
    int32_t moe_rs_rows;       /* grouped MoE ops of up to this many rows: the routing and the sort in one CTA
                                  (cu_launch_moe_route_sort); 0: a launch each */
    int32_t mmr_rt;            /* mm_kernel_mmrs: 16-row tiles a CTA (1, 2 or 4; the same bits), where a launch keeps at
                                  least mmr_rt_ctas CTAs (else fewer tiles a CTA); 0 / 1: one (default until measured) */
    int32_t mmr_rt_ctas;
    int32_t mmq_rows;          /* several-row steps of at least this many activation rows: their Q4_K / Q6_K rows on
                                  mm_kernel_mmq (tiles of 128 weight rows x 32 / 64 activation rows on the tensor cores); 0: none */
    int32_t mmq_ctas;          /* ... its launches split K into as many CTAs as fit this many (<= 1: never split) */
    int32_t mmq_fill;          /* 1: at most mmq_ctas CTAs (the splits a tile: mmq_ctas / tiles, rounded down; default);
                                  0: at least (rounded up: a second round of CTAs where they do not divide) */
    int32_t mmq_stream;        /* 1: such launches as mmq_ctas even runs of (tile, super-block) units instead (default) */
    int32_t mmq_nt;            /* activation rows a CTA / 8: 4 (default: 64 rows over 2 CTAs, the 4-group instance holds no
                                  spill and asks for the next super-block's words early), 8 or 2 */
    int32_t moe_pre;           /* 1: the column-split MoE down launch's routed CTAs route their token themselves before the
                                  dependency wait (moe_route_warp on the router's logits, written two launches back) and ask
                                  for their expert's rows before it, as the dense mat-vecs do; the same ids, so the same
                                  bits. 0: they read the gate+up launch's ids after the wait (default: on measured
                                  2-3% slower a qwen36-14b-a3b token) */
    int32_t colx;              /* 1: the one-activation-row launches with Q5_K, IQ4_XS or Q4_0 rows, or with Q8_0 rows and
                                  no K-quant ones, on the column-split kernel for those types (mm_kernel_colx), and MoE
                                  experts with Q5_K / IQ4_XS matrices on the column-split / grouped expert kernels (their
                                  KT 4 instances; CUDA); 2: the same with IQ4_XS launches at 2 row passes a CTA (1: 4);
                                  0: the one-warp-per-row kernel and the general MoE path (HIP default: not yet run on
                                  an AMD GPU) */
    int32_t f32r;              /* 1: one-activation-row launches of F32 rows only (the MoE router and the shared expert's
                                  gate), fewer than rows[0] rows of at most 32 * F32R_K columns, on mm_kernel_f32r (each
                                  warp's row in registers before the dependency wait, the activation in one round trip
                                  after it: mm_kernel_rows' bits; the CUDA default); 0: mm_kernel_rows (HIP) */
};
extern struct cu_mm_cfg cu_mm_cfg;
extern int cu_lmh_ns, cu_lmh_rows; /* mm_kernel_lmh (the LM head's ring of tiles): its slots (0: off) and the launches of
                                     at least cu_lmh_rows rows it takes */
#define CU_LMH_MAX_NS 8
extern int cu_lmh_co; /* mm_kernel_lmh: at most this many CTAs an SM, each letting the next launch in at its start (0: off;
                         VLLMC_CUDA_LMH_CO, bench_gemv and the backend; a measurement) */
extern int cu_mmx_rows; /* mm_kernel_mmx (cu_mm_cfg.mma bits 128 / 256) for launches of at least this many rows */
void cu_launch_matmul(const struct cu_mm_args *args, gpuStream_t s);

/* ---- row-wise kernels ---- */
enum cu_nq_mode { CU_NQ_QUANT = 0, CU_NQ_RMSNORM = 1, CU_NQ_SWIGLU = 2, CU_NQ_GATED = 3 };
/* mode RMSNORM: out.x[r] = rmsnorm(in0[r]) * w; SWIGLU: out.x[r] = silu(in0[r]) * in1[r] (row stride ld);
 * GATED: out.x[r] = rmsnorm(out.x[r]) * w * silu(in1[r]) per group of `group` (64 or 128) columns, w of
 * `group` (the GDN output gate; in1 row stride ld); QUANT: out.x as is. Then out.x[r] is quantized into the
 * formats in fmts. */
void cu_launch_norm_quant(int mode, const float *in0, const float *in1, int64_t ld, const float *w, float eps,
                          int group, int64_t n_rows, struct cu_act_mut out, uint32_t fmts, gpuStream_t s);
void cu_launch_rmsnorm(const float *x, int64_t ld_x, const float *w, float eps, int64_t n_rows, int64_t n_cols,
                       float *out, int64_t ld_out, gpuStream_t s);
void cu_launch_add(float *y, const float *x, int64_t n, gpuStream_t s);
void cu_launch_sigmoid_mul(float *x, int64_t ld_x, const float *g, int64_t ld_g, int64_t n_rows, int64_t n_cols,
                           gpuStream_t s);

/* ---- batch on the device ---- */
struct cu_batch_dev {
    const int32_t *tok, *pos, *seq, *logit_rows;
    const int32_t *seqinfo;    /* [n_seqs][4]: block-table offset, n_blocks, state slot, 0 */
    const int32_t *bt;         /* concatenated block tables */
    const int32_t *chunks;     /* [n_chunks][8] (CU_CH_*): runs of one sequence cut into CU_GDN_CHUNK rows */
    int32_t n_tokens, n_logits;
    int32_t n_chunks, pad;
};
/* Chunk list entries (CU_CH_*, built by batch_set for the chunked GDN prefill and the prefill attention): gdn_runs.h. */

void cu_launch_embed(const struct cu_batch_dev *b, const uint8_t *table, uint32_t type, uint64_t stride,
                     int64_t n_cols, float *out, gpuStream_t s);
void cu_launch_get_rows(const struct cu_batch_dev *b, const float *x, int64_t n_cols, float *out, gpuStream_t s);
void cu_launch_rope(const struct cu_batch_dev *b, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                    int mode, int32_t n_rot, float freq_base, float freq_scale, const float *freq_factors,
                    gpuStream_t s);
struct cu_attn_args {
    const float *q, *k, *v;
    int64_t ld_q, ld_k, ld_v;
    float *out;
    void *kpool, *vpool;
    int32_t dtype;             /* enum bk_kv_dtype of the pools (kv_access.h) */
    int32_t n_head, n_kv_head, head_dim;
    float scale;               /* softmax scale; the score is q.k * (k_scale * scale) as on the CPU */
    float k_scale, v_scale;    /* fp8: the layer's scales (stores divide by them, reads multiply); else 1 */
    const float *k_shift;      /* fp8: the layer's key shift [n_kv_head * head_dim] (bk_kv_cache.k_shift), subtracted
                                  before the store, or NULL */
    int32_t n_split, chunk;    /* split-K over the context: n_split parts of chunk positions */
    int32_t group, t0;         /* tokens per split/combine launch (bounds the work buffer); first token (launcher) */
    float *work;               /* [group][n_head][n_split][head_dim + 2] */
    /* Decode steps, fused at recording (cuda_backend.cu fuse_attn_pre / _gate / _quant): pre = 1 replaces the KV store by one launch
     * that forms q and k from their norm inputs (RMSNorm of row (t, h) of qx / kx, row stride ld_qx / ld_kx, weights
     * qw / kw, then RoPE), writes them to q / k and stores k and v into the cache: the ops of rmsnorm_kernel and
     * rope_kernel in their order, so the bits are those of the separate launches. pre_split (with pre; heads of 128 or
     * 256; a decode step, every token its sequence's only one): that work inside the split launch instead, no launch of
     * its own (attn_split_kernel's PRE: the same ops, so the same bits). */
    int32_t pre, rope_mode, n_rot, pre_split;
    const float *qx, *kx, *qw, *kw, *ff;
    int64_t ld_qx, ld_kx;
    float q_eps, k_eps, theta_scale, freq_scale;
    /* and after the combine: out *= sigmoid(gate) (row (t, h) at gate + (t n_head + h) ld_gate; NULL: none), then
     * with qfmts each head's head_dim (256) outputs quantized into qo as the norm+quantize kernel's QUANT mode */
    const float *gate;
    int64_t ld_gate;
    struct cu_act_mut qo;
    uint32_t qfmts, pad1;
    /* or NULL: the combine in the split launch (BACKEND_CUDA_FUSE_ATTN_COMBINE): the last split CTA of a (token, head)
     * to finish, counted here ([group][n_head], zero between launches), combines it; no combine launch */
    unsigned *comb_cnt;
};
#define CU_ATT_MAX_SPLIT 256   /* splits of a decode attention (the combine keeps one weight a split in shared memory) */
void cu_launch_attention(const struct cu_batch_dev *b, const struct cu_attn_args *a, gpuStream_t s);
/* The KV store alone (the first kernel of cu_launch_attention). */
void cu_launch_kv_store(const struct cu_batch_dev *b, const struct cu_attn_args *a, gpuStream_t s);
/* Prefill attention (attn_prefill.cu): the KV store, then one CTA per (chunk of b->chunks, query head); head_dim
 * 128 or 256, ld_q % 4 == 0, after cu_attn_prefill_ready(head_dim) (which grants its shared memory) said yes.
 * a->work, n_split and chunk are not used. */
void cu_launch_attention_prefill(const struct cu_batch_dev *b, const struct cu_attn_args *a, gpuStream_t s);
bool cu_attn_prefill_ready(int head_dim);
struct cu_gdn_args {
    const float *in;
    int64_t ld_in;
    float *conv_out;           /* [n_tokens][conv_dim] */
    float *conv_state;
    void *ssm_state;           /* f32, or bf16 (uint16_t) with ssm_bf16: loaded to f32 at a run's start, stored at its end */
    int64_t conv_floats, ssm_floats;
    int32_t ssm_bf16, pad_;
    const float *conv_w, *dt_bias, *ssm_a, *norm;
    int32_t n_k_head, n_v_head, d_k, d_v, d_conv;
    float eps;
    int32_t conv_done;         /* the matmul that wrote `in` did the conv (cu_mm_conv): conv_out is ready */
    int32_t per_token;         /* every token its own sequence (a decode step): the rule kernel's grid takes a token a
                                  CTA (blockIdx.z), else each CTA walks the tokens in order */
    int32_t run_lo, n_runs;    /* n_runs > 0 (a split chunk list, gdn_runs.h): the recurrent kernels take one run a CTA,
                                  the runs of entries run_lo .. run_lo + n_runs - 1 (one entry each) */
    int32_t ch_hi, ch_runs;    /* the chunked kernels: entries [0, ch_hi) (0: all); ch_runs > 0: the scan takes one of
                                  those ch_runs runs a CTA (blockIdx.z), else one walk over them all */
    float *out;                /* [n_tokens][n_v_head * d_v] */
    struct cu_nq_fuse nq;      /* nq.on (decode rule kernel): the gated RMSNorm + quantize of out in its epilogue */
    int32_t nq_cluster;        /* (CUDA; one token a CTA, nq.on 0) the same gated RMSNorm + quantize by clusters of CTAs:
                                  the 256 / d_v heads of a 256-column unit in one cluster, their raw rows gathered in the
                                  first CTA's shared memory, which norms and quantizes the unit as norm_quant_kernel does
                                  (nq's in1, w, out, ld, eps, group, fmts); no launch follows for it */
    int32_t pad2_;
};
void cu_launch_gdn(const struct cu_batch_dev *b, const struct cu_gdn_args *a, gpuStream_t s);
extern uint64_t cu_gdn_cluster_launches; /* rule kernels with the gated norm by clusters (a.nq_cluster), process-wide */
extern int cu_gdn_rows2; /* the rule kernel's rows a thread: -1 by the step (2 for a bf16 decode of several sequences), 1 or 2 */
/* Chunked prefill of the same op (gdn_chunked.cu): every run of the batch in chunks (b->chunks), each state slot
 * in one run only; d_k 128, d_v 64 or 128. scratch: cu_gdn_chunk_scratch_floats() floats. */
void cu_launch_gdn_chunked(const struct cu_batch_dev *b, const struct cu_gdn_args *a, float *scratch, gpuStream_t s);
int64_t cu_gdn_chunk_scratch_floats(int32_t n_v_head, int32_t d_v, int64_t n_chunks);
/* Whether the chunked kernels can run here (their shared memory, ~150 KB, is granted); first call sets it up. */
bool cu_gdn_chunked_ready(void);

/* ---- prefill matmuls through the dense f16 GEMM (prefill_gemm.cu) ---- */
bool cu_dequant_f16_type(uint32_t type); /* types cu_launch_dequant_f16 takes */
/* n_rows repacked rows (stride bytes each) of n_cols (% 32 == 0) -> f16 rows [n_rows][n_cols]. */
void cu_launch_dequant_f16(const uint8_t *w, uint32_t type, uint64_t stride, int64_t n_cols, int64_t n_rows, uint16_t *out,
                           gpuStream_t s);
/* f32 rows (stride ld) -> f16 rows [n_rows][n_cols] (n_cols % 4 == 0). */
void cu_launch_f32_to_f16(const float *x, int64_t ld, int64_t n_cols, int64_t n_rows, uint16_t *out, gpuStream_t s);
/* The quantized activation rows' values as f16: f16(d * q) per element, fmt BK_ACT_Q8_K (k_qs, k_d) or BK_ACT_Q8_0
 * (o_qs, o_d); n_cols % 32 == 0 (% 256 for Q8_K). */
void cu_launch_q8_to_f16(const struct cu_act_view *a, int fmt, int64_t n_cols, int64_t n_rows, uint16_t *out, gpuStream_t s);
/* y[r][c] += bias[c], r < n_rows (row stride ld), c < n_cols. */
void cu_launch_add_bias(float *y, int64_t ld, const float *bias, int64_t n_rows, int64_t n_cols, gpuStream_t s);
/* argmax of each of n_rows rows of n floats (ties to the lowest index) into out (device): CU_ARGMAX_PARTS
 * CTAs per row write (value, index) partials to work (16-byte aligned, n_rows * CU_ARGMAX_PARTS * 8 bytes),
 * then one warp per row picks among them. */
#define CU_ARGMAX_PARTS 64
void cu_launch_argmax(const float *x, int64_t n_rows, int64_t n, int32_t *out, void *work, gpuStream_t s);
/* Row r of x drawn by params[6 r ..] = {u (a double in two words), temperature, top_p, min_p (floats), top_k} into
 * out[r]: the engine's sampler without bias or penalties (cuda_ops.cu); temperature 0 is the argmax. */
void cu_launch_sample(const float *x, int64_t n_rows, int64_t n, const int32_t *params, int32_t *out, gpuStream_t s);

/* ---- mixture of experts ---- */
/* One group of expert mat-vec entries: entry ent multiplies activation row ent / act_div by n_mat
 * matrices (gate and up, or down) of the expert ids[ent] (ids NULL: the matrices as given), each of
 * n_rows rows of a.n columns; matrix m's row r goes to y[m][ent * ld_y + r]. */
struct cu_moe_grp {
    const uint8_t *w[2];       /* repacked 3-D (routed) or 2-D (shared) tensors */
    uint64_t stride[2];        /* bytes per row */
    uint64_t exp_bytes[2];     /* bytes per expert */
    int32_t type[2];
    float *y[2];
    int64_t ld_y;
    const int32_t *ids;        /* [n_ent] expert of each entry (device), or NULL */
    int32_t n_rows, n_mat, n_ent, act_div;
    int32_t act_off, pad;      /* activation row of entry ent: ent / act_div + act_off */
    struct cu_act_view a;
};
struct cu_moe_mm_args {
    struct cu_moe_grp g[2];
    int32_t n_grp, pad;
};
void cu_launch_moe_matmul(const struct cu_moe_mm_args *a, gpuStream_t s);

/* The tiled persistent form of a one-row MoE op's experts (cu_moe2, gemv_q.cu; set on recorded decode steps by
 * cuda_backend.cu's moe2 pass, VLLMC_CUDA_MOE2=1): tiles packed by cu_mega2_pack_gu / cu_mega2_pack_dn (mega2_tile.h),
 * the routed experts' as n_exp runs of one expert each. on 0: the launches of cu_launch_moe. */
struct cu_moe2_tiles {
    const uint8_t *gu_r, *gu_s;    /* gate / up: routed [E][F / 8] tasks of D / 256 super-blocks; shared [Fs / 8] */
    const uint8_t *dn_r, *dn_s;    /* down: routed [E][D / 16] tasks of F / 256 super-blocks; shared [D / 16] of Fs / 256 */
    float *h;                      /* scratch: (k + 1) x F hidden values (routed entries, then the shared one) */
    unsigned *cnt;                 /* 2 + D / 16 counters, zero between launches (the launch zeroes them when done) */
    int32_t on, dn_q6_r, dn_q6_s;  /* the routed / shared down rows are Q6_K (else Q4_K) */
    int32_t ns, nc, slot, ctas, pad; /* slots, consumer warps, slot bytes (cu_moe2_fit), CTAs (one an SM) */
};

/* The whole MoE FFN of T rows (cuda_moe.cu): router (+ shared-expert gate) mat-vec, softmax / top-k /
 * renormalisation, the chosen experts' gate+up (and the shared expert's) in one launch, SwiGLU + quantize,
 * all down products in one launch, then the weighted sum in a fixed order. No host synchronisation. */
struct cu_moe_args {
    struct cu_mm_args router;  /* seg 0: router -> logits [T][E]; seg 1 (if sgate): shexp gate -> glog [T] */
    const float *logits, *glog;
    int32_t *ids;
    float *wts;
    int32_t T, E, k, norm, shared, sgate;
    int32_t merged, pad;       /* shared rows follow the routed ones in gu_buf[0] / h[0] (same width and format) */
    struct cu_moe_mm_args gu;  /* gate in y[0] = GU, up in y[1] = GU + n_ff (row stride 2 n_ff) */
    const float *gu_buf[2];    /* routed, shared: [rows][2 n_ff] */
    int64_t n_ff[2];
    struct cu_act_mut h[2];    /* hidden rows (routed [T k][n_ff], shared [T][n_ffs]) */
    uint32_t hfmts[2];
    struct cu_moe_mm_args down; /* -> Y [T k][n_embd], Ys [T][n_embd] */
    int32_t *perm;             /* [T k]: the entries sorted by expert (grouped path) */
    int32_t *grp;              /* [gmax][4]: {expert, first of perm, count <= CU_MOE_GRP, 0}, count 0 past the last */
    int32_t gmax, pad2;
    const float *Y, *Ys;
    float *out;
    float *res;                /* or NULL: also res[t][c] += out[t][c] (the residual add) */
    struct cu_nq_fuse nq;      /* nq.on: the RMSNorm + quantize of res in the mix kernel's epilogue (a counter per row) */
    unsigned *mix_cnt;         /* or NULL: where the column-split expert kernels run, the mix goes into the down launch
                                  (these counters, [T][ceil(n_embd / 256)]) and no mix kernel runs */
    int64_t n_embd;
    struct cu_moe2_tiles m2;   /* m2.on: T 1, the router launch and then one cu_moe2 launch for the rest */
};
/* The path the experts took. */
enum { CU_MOE_PATH_GENERAL = 0, CU_MOE_PATH_COLS, CU_MOE_PATH_GROUPED, CU_MOE_PATH_GROUPED_RS /* routed + sorted in one CTA */,
       CU_MOE_PATH_TILED /* cu_moe2 */ };
/* The experts, the mix and the residual add of a one-row MoE op (a->m2) as one persistent launch of a->m2.ctas CTAs, after
 * the router launch (cu_launch_moe does both): the routing (moe_route_warp: the same ids and weights), then the shared and
 * the chosen experts' gate / up tiles (SwiGLU as the down launch forms it), a grid-wide counter, each CTA's Q8_K of the
 * hidden rows, the down tiles (each entry's rows in the column-split kernel's order), and each row group's last task
 * mixes its rows (moe_mix_col's ops) into out and x: the bits of cu_launch_moe_cols and the mix kernel. launch false:
 * only whether it would launch (shapes, types, resident CTAs). */
bool cu_moe2_launch(const struct cu_moe_args *a, gpuStream_t s, bool launch);
/* Its slot bytes and slots (the largest task; as many as fit in 225 KB), consumer warps (at most nc, ns a multiple). */
void cu_moe2_fit(const struct cu_moe_args *a, int nc, struct cu_moe2_tiles *t);
int cu_launch_moe(const struct cu_moe_args *a, gpuStream_t s);
/* The experts of a MoE op of few rows in two launches (gemv_q.cu): gate+up with the routing done by every CTA of a
 * routed entry (it writes ids / wts), then down with SwiGLU + Q8_K of the hidden row formed in each CTA. Only
 * with Q4_K / Q6_K experts, Q8_K hidden rows, E <= 256, k <= 32, T <= cu_mm_cfg.moe_cols_rows; false (nothing
 * launched) otherwise. */
/* The MoE mix in the down launch (cu_launch_moe_cols with cu_moe_args.mix_cnt): the CTA whose rows complete 256
 * columns of a token (all k routed entries and the shared one) mixes them (moe_mix.h, moe_mix_kernel's ops), and with
 * nq.on counts them toward the row's RMSNorm + quantize (norm_quant.h). */
struct cu_moe_mix {
    const float *Y, *Ys, *wts, *glog;
    float *out, *res;
    unsigned *cnt;             /* [T][ceil(n / 256)], zero between launches */
    int64_t n;
    int32_t on, pad;
    struct cu_nq_fuse nq;
};
struct cu_moe_cols_args {
    struct cu_moe_grp g[2];
    const float *logits;
    int32_t *ids;              /* gate+up: where the routing CTAs write each token's experts and weights */
    float *wts;
    int32_t E, k, norm, pad;
    const float *swi[2];       /* down: the gate rows of each group (up = gate + n_ff), row stride swi_ld */
    int64_t swi_ld[2];
    struct cu_moe_mix mix;     /* down: mix.on, the mix (and the norm + quantize after it) in its epilogue */
};
bool cu_launch_moe_cols(const struct cu_moe_args *a, gpuStream_t s);
/* Entries grouped by expert (steps of many rows): route, sort the entries by expert (stable) into groups of up to
 * CU_MOE_GRP, then gate+up and down with each CTA loading its expert's rows once for the whole group; each entry's
 * sums are the column-split kernels', so the bits equal cu_launch_moe_cols's. Same types and shapes as that path, any
 * T >= cu_mm_cfg.moe_group_rows; false (nothing launched) otherwise. */
#define CU_MOE_GRP 8
static inline int32_t cu_moe_gmax(int64_t n_ent, int64_t E) { return (int32_t)(n_ent / CU_MOE_GRP + (n_ent < E ? n_ent : E) + 1); }
int cu_launch_moe_grouped(const struct cu_moe_args *a, gpuStream_t s); /* 0 not taken, 1 taken, 2 with the
                                                                            routing and sort in one launch */
/* The grouped path's routing (moe_route_kernel's ops) and sort (moe_sort.h) in one CTA, a warp a token: for steps of
 * up to cu_mm_cfg.moe_rs_rows rows and E <= 256; false (nothing launched) otherwise. */
bool cu_launch_moe_route_sort(const struct cu_moe_args *a, gpuStream_t s);
/* its pieces in gemv_q.cu: whether a launch's groups have the column-split shape, and the grouped expert launch */
bool cu_moe_grp_shape_ok(const struct cu_moe_mm_args *mm);
/* The persistent dataflow FFN chain (gemv_q.cu, an experiment measured by bench/bench_mega.cu): n_layers of
 * x += down(swiglu(gate_up(rmsnorm(x) * nw))) with Q4_K weights (repacked rows), batch 1, one launch of `ctas` CTAs
 * (at most one an SM; more than can be resident at once is refused). cnt: 2 * n_layers counters, zero before the launch. xs: ctas x D floats of
 * scratch. rg: gate (and up) rows a task, rd: down rows a task; ns slots of `slot` bytes (>= 2 rg s_gu, rd s_dn).
 * False (nothing launched) where the shapes or the target do not allow it. */
struct cu_mega_ffn_args {
    const uint8_t *const *gu;  /* [n_layers] device pointers: gate rows 0 .. F-1, then up rows F .. 2F-1 */
    const uint8_t *const *dn;  /* [n_layers] down rows */
    const float *const *nw;    /* [n_layers] RMSNorm weights */
    float *x, *h, *xs;
    unsigned *cnt;
    int64_t D, F;
    uint64_t s_gu, s_dn;
    float eps;
    int32_t n_layers, rg, rd, ns;
    uint32_t slot;
    int32_t teams;             /* 1 or 2 teams of warps a CTA taking the tasks in turn */
    uint32_t flags;            /* timing ablations (the result is then wrong): 1 no dot products, 2 no dependency waits,
                                  4 no activation prologues */
};
size_t cu_mega_ffn_smem(const struct cu_mega_ffn_args *a);
bool cu_mega_ffn(const struct cu_mega_ffn_args *a, int ctas, gpuStream_t s);
/* The same chain, second form (gemv_q.cu mega2_kernel): the weights repacked into task tiles (cu_mega2_pack: 16 rows x
 * a run of super-blocks, contiguous, in the tensor-core mat-vec's lane order), one bulk copy a task; a producer warp
 * keeps ns slots filled (each slot released by the warp that read it), consumer warps take whole tasks on the tensor
 * cores (mma_rows_q4_K's ops), so no CTA barrier a task; slot s is read by consumer warp s % nc (ns a multiple of nc). Gate / up task j: gate rows 8j .. 8j + 7 and up rows 8j .. 8j + 7
 * (the MMA's rows g and g + 8), all of D; down task (r, q): rows 16r .. 16r + 15, super-blocks q ps .. q ps + ps - 1,
 * each writing its ps / 4 partials to pd; the last of a row group's tasks (gcnt) adds them in the column-split
 * kernel's order into x. Layers l0 .. l0 + n_layers - 1 of the tables. cnt: 2 per layer, gcnt: D / 16 per layer, zero
 * before the launch. */
struct cu_mega2_args {
    const uint8_t *const *gu, *const *dn; /* [layers] packed tiles; NULL: gu1 / dn1 / nw1 (one layer, l0 0) */
    const float *const *nw;
    const uint8_t *gu1, *dn1;
    const float *nw1;
    float *x, *h, *pd, *xs;                /* pd: (F / 256 / 4) x D partials; xs: ctas x D scratch */
    unsigned *cnt, *gcnt;
    int64_t D, F;
    float eps;
    int32_t l0, n_layers, ps, ns, nc;     /* ps: super-blocks a down task (4, 12 or 36); nc: consumer warps */
    int32_t dn_q6, pad;                    /* the down rows are Q6_K (mega2_tile.h's Q6_K tiles), else Q4_K */
    /* pj1 non-NULL (one layer, direct pointers only): first the launch that adds into x before the FFN (the attention's
     * or the GDN's output projection: Q4_K rows, D x pj_sb super-blocks, tiles of pj_ps super-blocks as for down, from
     * the Q8_K act pj_qs / pj_d / pj_bs), its partials in pairs of super-blocks (mm_kernel_mma's order) added into x by
     * each row group's last task; then the FFN. cnt then 3, gcnt 2 D / 16 counters. */
    const uint8_t *pj1;
    const int8_t *pj_qs;
    const float *pj_d;
    const int16_t *pj_bs;
    int32_t pj_sb, pj_ps;
    const uint8_t *pf;                     /* non-NULL: once its copies are issued, each CTA's producer sends its share of
                                              pf_bytes from pf to L2 (the next launch's weights, which cannot start
                                              streaming them while this kernel holds the SMs' shared memory) */
    uint64_t pf_bytes;
    uint32_t slot, flags;                  /* flags: 1 no dot products, 2 no dependency waits, 4 no prologues (timing
                                              ablations); 8 the launch zeroes its counters when done (the decode's) */
};
uint64_t cu_mega2_task_bytes(int n_sb);
uint64_t cu_mega2_dn_task_bytes(int ps, bool q6); /* a down task's bytes (Q6_K or Q4_K rows) */
/* 16 repacked Q4_K rows of n_sb super-blocks (rows[i], the MMA's row i), super-blocks s0 .. s0 + nsb - 1, into dst
 * (cu_mega2_task_bytes(nsb) bytes). Host memory. */
void cu_mega2_pack(const uint8_t *const rows[16], int n_sb, int s0, int nsb, uint8_t *dst);
size_t cu_mega2_smem(const struct cu_mega2_args *a);
/* Its slot size (the largest task of its ops, 128-byte multiples) and slots: as many as fit in 225 KB (at most ns_max
 * when > 0), nc consumer warps at most, ns a multiple of them (each warp owns ns / nc slots). */
void cu_mega2_fit(struct cu_mega2_args *a, int nc, int ns_max);
bool cu_mega2(const struct cu_mega2_args *a, int ctas, gpuStream_t s);
/* The same; launch false: only whether it would launch (the shapes, the target, the resident CTAs). */
bool cu_mega2_launch(const struct cu_mega2_args *a, int ctas, gpuStream_t s, bool launch);
/* Device packers (mega2_tile.h's layout): a layer's gate / up tiles (F / 8 tasks of D / 256 super-blocks, gate and up
 * repacked Q4_K rows of D columns) and its down tiles (D / 16 x (F / 256 / ps) tasks of ps super-blocks, rows of F
 * columns, Q4_K or Q6_K). False (nothing launched) for shapes or types they do not take. */
bool cu_mega2_pack_gu(const uint8_t *gate, const uint8_t *up, int64_t D, int64_t F, uint8_t *dst, gpuStream_t s);
bool cu_mega2_pack_dn(const uint8_t *dn, uint32_t type, int64_t D, int64_t F, int ps, uint8_t *dst, gpuStream_t s);
/* The same for n_exp experts at once: expert e's rows at e * exp_bytes of the source (gate, up or down), its tiles at
 * e times one expert's tile bytes of dst. */
bool cu_mega2_pack_gu_exps(const uint8_t *gate, const uint8_t *up, uint64_t exp_bytes, int n_exp, int64_t D, int64_t F, uint8_t *dst,
                           gpuStream_t s);
bool cu_mega2_pack_dn_exps(const uint8_t *dn, uint64_t exp_bytes, int n_exp, uint32_t type, int64_t D, int64_t F, int ps, uint8_t *dst,
                           gpuStream_t s);
void cu_launch_moe_grp_matmul(const struct cu_moe_mm_args *mm, const int32_t *perm, const int32_t *grp, int32_t gmax,
                              gpuStream_t s);

#endif
