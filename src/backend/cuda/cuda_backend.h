/* CUDA backend (built with `make CUDA=1`): the op table of backend.h on one GPU.
 * Weights are uploaded once (quantized ones repacked for coalesced loads); activations, the KV cache
 * and recurrent state live in device memory. A decode step (B sequences with one token and one logit row
 * each) is recorded op by op without launching anything; at the LM head the recorded step is looked up in
 * a small cache of captured steps and, when an equal one is there, its CUDA graph is replayed (else the
 * step is captured, evicting the least recently used). Only token ids (or the logits rows the caller
 * copies) come back to the host. enforce_eager runs every op as it is called (no graphs). */
#ifndef VLLMC_CUDA_BACKEND_H
#define VLLMC_CUDA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include "backend/backend.h"

struct backend_cuda_opts {
    int device;          /* GPU ordinal */
    bool enforce_eager;  /* no CUDA graphs */
    bool profile;        /* time every op family with events (forces eager) */
    bool batch_invariant; /* a row's results do not depend on the batch: a matmul of one activation row sums in
                             the multi-row kernel's order (no split-K over warps; tiles of several rows only where
                             their order is the same) */
};

vllmc_status backend_cuda_create(const struct backend_cuda_opts *o, struct backend **out);
/* GPUs visible to this process (0 when there is no driver or device). */
int backend_cuda_device_count(void);
/* Decode steps whose graphs are kept (least recently used evicted). */
#define BACKEND_CUDA_GRAPH_CACHE 32

struct backend_cuda_stats {
    uint64_t graph_replays, graph_captures, eager_steps;
    uint64_t graphs_cached;           /* captured steps held now (<= BACKEND_CUDA_GRAPH_CACHE) */
    uint64_t bytes_now, bytes_peak;   /* device memory allocated through the backend */
    uint64_t weight_bytes;            /* device bytes of uploaded weights */
    uint64_t fused_adds;              /* residual adds recorded into a matmul / moe epilogue */
    uint64_t fused_attn;              /* decode attentions recorded with their q / k norm + RoPE + KV store in one launch */
    uint64_t fused_attn_split;        /* ... of them, with that work inside the split launch (VLLMC_CUDA_ATTN_PRE_SPLIT=1) */
    uint64_t deferred_norms;          /* FFN RMSNorms deferred into the residual's launch and their readers (VLLMC_CUDA_DEFER_NORM=1) */
    uint64_t moe_cols;                /* MoE ops issued (or captured) with the column-split expert kernels */
    uint64_t moe_grouped;             /* MoE ops issued (or captured) with the entries grouped by expert */
    uint64_t moe_mix_down;            /* ... with the column-split kernels and the mix in the down launch (no mix kernel) */
    uint64_t moe_route_sort;          /* ... grouped, with the routing and the sort in one launch */
    uint64_t fused_conv;              /* decode GDN convs recorded into the epilogue of the matmul writing their input */
    uint64_t fused_nq;                /* norm + quantize ops recorded into the launch writing their input */
    uint64_t fused_comb;              /* decode attentions recorded with their combine in the split launch */
    uint64_t mega2_ffn;               /* dense FFNs recorded as one tiled persistent launch (VLLMC_CUDA_MEGA2) */
    uint64_t mega2_pj;                /* ... of which with the output projection before them inside (VLLMC_CUDA_MEGA2_PJ) */
    uint64_t moe2;                    /* one-row MoE ops recorded as the router and one tiled persistent launch (VLLMC_CUDA_MOE2) */
    uint64_t gdn_split;               /* GDN ops of a split chunk list: the long runs chunked, one a CTA (backend_cuda_set_gdn_runs) */
    uint64_t gdn_runs;                /* GDN ops whose recurrent kernels took one run a CTA (split lists and batches of short runs) */
    /* host time of the graph-replayed steps: from the batch to the graph's launch (recording the ops, finding the
     * cached graph, launching it), and waiting for the step's argmax after it; the GPU idles through the first */
    uint64_t host_steps, host_ns, wait_ns;
    /* the device's nominal DRAM bandwidth, bytes/s: 2 x its memory clock x its bus width (CUDA; 0 where unknown: HIP,
     * whose reported memory clock is not the same measure on every memory type) */
    double dram_peak_bps;
};
void backend_cuda_get_stats(struct backend *be, struct backend_cuda_stats *out);

/* Decode mat-vec kernel choice for launches of < 8,192 / < 65,536 / more rows (class 0 / 1 / 2): ks[c] 0
 * the one-warp-per-row (0) or 4-row-tile (1, 2) kernel, else tiles of tr[c] (1..4) rows split over ks[c]
 * (1, 2, 4) warps, one CTA per CTA-sized group of tiles (pers[c] 0) or a grid of pers[c] x the resident
 * CTAs stepping over the groups (-pers[c] CTAs when negative). Process-wide; for tests and comparisons (the
 * defaults are the measured best). */
void backend_cuda_set_matvec(const int tr[3], const int ks[3], const int pers[3]);
void backend_cuda_get_matvec(int tr[3], int ks[3], int pers[3]);
/* The column-split mat-vec (one activation row) per row class: 0 off, 2 or 4 row groups a CTA, 1 the choice by
 * type (the default). */
void backend_cuda_set_matvec_cols(const int cols[3]);
void backend_cuda_get_matvec_cols(int cols[3]);
void backend_cuda_set_matvec_rows(int rows0, int rows1); /* class limits (default 8,192 and 65,536) */
/* The register-bounded column-split instances a bit per class (cu_mm_cfg.cols_lb: 1 Q4_K at 2,560 columns, 2 the Q6_K
 * LM head at 2,560, 4 rows of 9,216 columns; 8 / 16 the LM head's / the 9,216-column rows' instances with the next
 * round's rows asked into L2 after the release, CUDA only, the same bits); returns the previous mask. Process-wide;
 * VLLMC_CUDA_COLS_LB sets it. */
int backend_cuda_set_matvec_lb(int mask);
/* Launches that took a register-bounded instance so far, process-wide; of them, those with the next round into L2. */
uint64_t backend_cuda_cols_lb_launches(void);
uint64_t backend_cuda_cols_pf_launches(void);
/* One-activation-row launches whose K-quant rows are all Q4_K, rows of up to max_sb super-blocks and launches of up to
 * max_rows rows (<= 0: unchanged): the kernel of one super-block a thread (the same bits as the column-split kernel;
 * default 0: never, and 16,384), else the column-split kernel. Process-wide; VLLMC_CUDA_SBT=max_sb[,max_rows] sets
 * it at backend creation. */
void backend_cuda_set_matvec_sbt(int max_sb, int max_rows);
void backend_cuda_get_matvec_sbt(int *max_sb, int *max_rows);
/* Launches that took the kernel of one super-block a thread so far, process-wide. */
uint64_t backend_cuda_sbt_launches(void);
/* Steps of 2 .. rows activation rows (not under batch invariance) take the tensor-core kernel for their Q4_K / Q6_K rows
 * (mm_kernel_mmrs up to 64 rows, mm_kernel_mmq from its rows; 0: never; default 64 on CUDA, 0 on HIP); returns the
 * previous value. Process-wide;
 * VLLMC_CUDA_MMR=rows[,small_sb,small_rows] sets it at backend creation. */
int backend_cuda_set_matvec_mmr(int rows);
/* mm_kernel_mmrs's 16-row tiles a CTA (1, 2 or 4: each activation load met with that many weight tiles; the same bits),
 * taken where a launch keeps at least min_ctas CTAs; returns the previous count. Process-wide;
 * VLLMC_CUDA_MMR_RT=tiles[,min_ctas] (default min_ctas 132) sets it at backend creation. Default 1. */
int backend_cuda_set_mmr_tiles(int tiles, int min_ctas);
/* Steps of rows .. the several-row limit above take mm_kernel_mmq for their Q4_K / Q6_K rows instead (tiles of 128 weight
 * rows x 32 activation rows by default, the activation staged in shared memory, the weights unpacked once a
 * super-block); 0: never; default 16 on CUDA, 0 on HIP; returns the previous value. A launch whose tiles would run in
 * fewer than 4 rounds of `ctas` CTAs (backend_cuda_set_mmq_split; default 264: 2 an SM; <= 1 never: then a row's sums
 * are the CPU reference's bits) is cut into `ctas` even runs of (tile, super-block) units (at least 2 units a run), or
 * with backend_cuda_set_mmq_stream(0), where its tiles are fewer than `ctas`, its K is split into as many splits as fit.
 * Process-wide; VLLMC_CUDA_MMQ=rows[,ctas[,fill[,stream[,groups]]]] sets them at backend creation. */
int backend_cuda_set_mmq_rows(int rows);
int backend_cuda_set_mmq_split(int ctas);
int backend_cuda_set_mmq_stream(int on);
/* mm_kernel_mmq's activation rows a CTA / 8: 4 (default; 64 rows over 2 CTAs), 8 or 2; returns the previous value */
int backend_cuda_set_mmq_groups(int nt);
/* Launches of mm_kernel_mmrs or mm_kernel_mmq so far, process-wide; those of mm_kernel_mmrs with more than one 16-row
 * tile a CTA; those of mm_kernel_mmq. */
uint64_t backend_cuda_mmr_launches(void);
uint64_t backend_cuda_mmr_tiled_launches(void);
uint64_t backend_cuda_mmq_launches(void);
uint64_t backend_cuda_mmq_split_launches(void);
uint64_t backend_cuda_mmq_stream_launches(void); /* of those, cut into even runs of (tile, super-block) units */
/* Pipelined steps: a step's argmax does not wait for it. With it on, a step whose logits op is given an argmax pointer
 * returns once its work is queued (the pointer is not written); backend_cuda_fetch_argmax(be, ids, n) waits for the
 * oldest such step and gives its n ids. backend_cuda_tokens_from_argmax(be) before a batch_set makes that batch's
 * token ids the previous step's argmax ids, copied on the device (the batch's own ids are only checked), so the host
 * can queue step N + 1 before it has step N's token, and the GPU never waits for the host between them. At most two
 * steps in flight: a third batch_set before a fetch is an error. Off: everything as before (it syncs the stream).
 * Only for steps whose continuation is certain (a fixed number of greedy tokens) or whose sequence is dropped after
 * (`generate`): a step queued past the end of a sequence has already advanced its recurrent state. Every step queued
 * with it on must end in a logits op with an argmax (its slot's parity turns there). */
vllmc_status backend_cuda_set_pipelined(struct backend *be, bool on);
void backend_cuda_tokens_from_argmax(struct backend *be);
vllmc_status backend_cuda_fetch_argmax(struct backend *be, int32_t *ids, int32_t n);
/* One-activation-row launches of Q4_K / Q6_K rows on the tensor-core kernel (mm_kernel_mma: the same bits as the
 * column-split kernel), a bit per class: 1 Q4_K rows of up to 16 super-blocks, 2 longer Q4_K rows, 4 launches with Q6_K
 * rows of up to 16 super-blocks and fewer than 65,536 rows (with 4096 of any rows: the LM head; measured slower); 8 puts class 1's 2,560-column launches on an instance bounded to 5 CTAs an SM; 16 class
 * 1's launches of fewer than 8,192 rows at 8 rows a CTA (both measured level or slower, off); 32 the activation of a
 * warp's later super-blocks asked into L1 after the dependency wait, 64 copied into shared memory then (the same bits
 * either way; measured 12% / 2% slower a qwen35-4b token, off); 128 / 256 16 / 8 more rows a CTA in shared memory
 * (mm_kernel_mmx, below; measured 9% / 7% slower, off); 512 the low nibbles' sums as the whole bytes' less the high
 * nibbles' (16 masks fewer a super-block, the same integers), 1024 the same with every super-block's activation loaded
 * before the first MMA, 2048 as 512 with the next round's rows asked into L2 right after the release; 8192 the launches
 * with Q6_K rows (class 4) at 16 rows a CTA, as class 1's; 0: none. Returns the previous mask (-1 on HIP, which
 * has no such kernel). Process-wide; VLLMC_CUDA_MMA sets it at backend creation. */
int backend_cuda_set_matvec_mma(int mask);
/* Launches that took the tensor-core kernel so far, process-wide; of them, those on the instances with the later
 * super-blocks' activation prefetched (ap 1: bit 32) or staged (ap 2: bit 64), or read from copies of it (ap 3:
 * cu_act_view.copies, bench_gemv only), or with the low nibbles by subtraction (ap 4: bit 512; ap 5: bit 1024; ap 6: bit 2048). */
uint64_t backend_cuda_mma_launches(void);
uint64_t backend_cuda_mma_ap_launches(int ap);
/* Of them, the launches with Q6_K rows at 16 rows a CTA (bit 8192). */
uint64_t backend_cuda_mma_q6r16_launches(void);
/* Bits 128 / 256 of the tensor-core mask: its Q4_K launches of at least backend_cuda_set_mmx_rows rows (8,192) take 16 /
 * 8 more rows a CTA, copied into shared memory by bulk copies before the dependency wait (mm_kernel_mmx: the same bits).
 * The setter returns the previous bound (a negative argument only reads it); the count is process-wide. */
int backend_cuda_set_mmx_rows(int rows);
/* The LM head's ring of tiles (mm_kernel_lmh; VLLMC_CUDA_LMH=ns[,rows]): one-row launches of a single Q6_K segment at 2,048
 * or 2,560 columns of at least `rows` rows (> 0 sets it; 65,536 at start) through a ring of ns (2-8; else off) 8-row
 * tiles in shared memory, the column-split kernel's bits. Returns the previous ns; -1 on HIP (no such kernel there). */
int backend_cuda_set_lmh(int ns, int rows);
uint64_t backend_cuda_lmh_launches(void);
/* The one-activation-row launches with Q5_K, IQ4_XS or Q4_0 rows, or Q8_0 rows without K-quant ones, on the
 * column-split kernel for those types (mm_kernel_colx), and Q5_K / IQ4_XS MoE experts on the column-split and grouped
 * expert kernels (1, the default on CUDA; 2: the same with IQ4_XS launches at 2 row passes a CTA, comparisons) or not
 * (0: the one-warp-per-row kernel, the general MoE path).
 * Returns the previous setting. Process-wide; VLLMC_CUDA_COLX sets it at backend creation. */
int backend_cuda_set_matvec_colx(int on);
/* Launches that took mm_kernel_colx so far, process-wide. */
uint64_t backend_cuda_colx_launches(void);
uint64_t backend_cuda_mmx_launches(void);
/* Decode attentions whose q / k norm + RoPE + KV store ran inside the split launch (VLLMC_CUDA_ATTN_PRE_SPLIT=1),
 * launched or captured so far, process-wide. */
uint64_t backend_cuda_attn_pre_split_launches(void);
/* Launches (or captures) of the deferred-norm form's writer (read 0) and readers (read 1). */
uint64_t backend_cuda_kd_launches(int read);
/* The Gated DeltaNet rule kernel's value rows a thread: 1, 2, or -1 (the default: 2 for a decode step of several
 * sequences with a bf16 state, where the per-CTA norms and barriers set the kernel's time; else 1); the same bits
 * either way. Returns the previous value.
 * Process-wide; VLLMC_CUDA_GDN_R sets it at backend creation. */
int backend_cuda_set_gdn_rows(int rows);
/* GDN rule kernels launched so far (process-wide) with the gated RMSNorm + quantize by clusters of CTAs
 * (BACKEND_CUDA_FUSE_GATED_CLUSTER); 0 on HIP. */
uint64_t backend_cuda_gdn_cluster_launches(void);
/* Matmuls of 2..max_rows activation rows (Q4_K / Q6_K / Q8_0 / F32 weights) through the few-row kernel (a warp per
 * (weight row, activation row), the same bits as the multi-row kernel); 0 (default): off. Process-wide;
 * VLLMC_CUDA_DEC=N sets it at backend creation. Not yet measured: for comparisons. */
void backend_cuda_set_decode_rows(int max_rows);
/* Matmul launches so far (process-wide) that ran the norm + quantize of their outputs inside them (the RMSNorm after a
 * fused residual add, the SwiGLU after gate / up: backend_cuda_set_fuse_nq). */
uint64_t backend_cuda_nq_launches(void);
/* The norm + quantize that reads a launch's outputs moves into that launch (the CTA that completes a unit of the output
 * does it; same functions, same bits), in recorded steps, per bit of mask:
 *   BACKEND_CUDA_FUSE_NORM_MATMUL  the RMSNorm of the residual a matmul added to (measured slower once: BENCHMARKS.md)
 *   BACKEND_CUDA_FUSE_SWIGLU       the SwiGLU of a matmul's gate / up
 *   BACKEND_CUDA_FUSE_GATED        the GDN's gated RMSNorm, into the rule kernel
 *   BACKEND_CUDA_FUSE_NORM_MIX     the RMSNorm of the residual a MoE op added to, into its mix
 *   BACKEND_CUDA_FUSE_MOE_MIX      (any step, CUDA only) the MoE mix into the column-split down launch
 *   BACKEND_CUDA_FUSE_ATTN_COMBINE the decode attention's combine into its split launch (the last split of a head)
 *   BACKEND_CUDA_FUSE_GATED_CLUSTER (CUDA; decode steps of up to 16 tokens, recorded or not) the GDN's gated RMSNorm
 *                                  into the rule kernel by clusters of CTAs: no counters, the bits of the separate launch
 * Default BACKEND_CUDA_FUSE_GATED_CLUSTER alone (the others measured slower: BENCHMARKS.md); VLLMC_CUDA_FUSE_NQ=mask sets
 * it at backend creation. Drops the captured graphs, so the
 * next steps are captured with the kernel choices in force then (e.g. backend_cuda_set_matvec_lb). */
enum {
    BACKEND_CUDA_FUSE_NORM_MATMUL = 1, BACKEND_CUDA_FUSE_SWIGLU = 2, BACKEND_CUDA_FUSE_GATED = 4, BACKEND_CUDA_FUSE_NORM_MIX = 8,
    BACKEND_CUDA_FUSE_MOE_MIX = 16, BACKEND_CUDA_FUSE_ATTN_COMBINE = 32, BACKEND_CUDA_FUSE_GATED_CLUSTER = 64,
    BACKEND_CUDA_FUSE_ALL = 127
};
void backend_cuda_set_fuse_nq(struct backend *be, unsigned mask);
/* MoE ops of up to max_rows rows with Q4_K / Q6_K experts on the column-split expert kernels (routing inside the
 * gate+up launch, SwiGLU + quantize inside the down launch; default 3: from 4 rows the grouped kernels below measured
 * faster); 0: off. Returns the previous value. Process-wide, like the settings above. */
int backend_cuda_set_moe_cols(int max_rows);
/* MoE ops of at least min_rows rows (default 1) that the column-split launches do not take sort their entries by
 * expert and load each expert's rows once for up to 8 of them (same types as the column-split kernels, same bits
 * per entry); 0: off (the general path). Returns the previous value. */
int backend_cuda_set_moe_group(int min_rows);
/* Grouped MoE ops of up to max_rows rows (default 32) route their tokens and sort the entries in one CTA (a launch
 * where there were two; the same ids, weights, order and groups); 0: a launch each. Returns the previous value. */
int backend_cuda_set_moe_route_sort(int max_rows);
/* The column-split MoE down launch's routed CTAs route their token again before the dependency wait (from the router's
 * logits, as the gate+up launch does after it) and ask for their expert's rows before it (on, 1) or read the gate+up
 * launch's ids after the wait (off, 0: the default; on measured 2-3% slower a qwen36-14b-a3b token); the same ids, so
 * the same bits. Not with the mix in the down launch. Returns the previous value; VLLMC_CUDA_MOE_PRE sets it at
 * backend creation. */
int backend_cuda_set_moe_pre(int on);
/* 1: one-activation-row launches of F32 rows only (the MoE router) on their own kernel (its row in registers before the
 * dependency wait; the same bits; the CUDA default), 0: on mm_kernel_rows. Returns the previous setting, or -1 where
 * the kernel is not built (HIP). backend_cuda_f32r_launches counts its launches. */
int backend_cuda_set_f32r(int on);
uint64_t backend_cuda_f32r_launches(void);
/* Down launches that took the routing before the wait so far, process-wide. */
uint64_t backend_cuda_moe_pre_launches(void);

/* Per op-family profile (profile = true): calls, GPU milliseconds, bytes of weights read. */
#define BACKEND_CUDA_PROF_MAX 24
struct backend_cuda_prof {
    int n;
    const char *name[BACKEND_CUDA_PROF_MAX];
    uint64_t calls[BACKEND_CUDA_PROF_MAX];
    double ms[BACKEND_CUDA_PROF_MAX];
    double bytes[BACKEND_CUDA_PROF_MAX];
};
void backend_cuda_get_prof(struct backend *be, struct backend_cuda_prof *out);
void backend_cuda_reset_prof(struct backend *be);

/* The GEMM path's weight dequantization (tests): w (Q4_K, Q6_K, Q8_0, Q4_0, Q5_0) as f16 rows
 * [ne[1]][ne[0]] into out (device memory). */
vllmc_status backend_cuda_weight_f16(struct backend *be, const struct bk_tensor *w, void *out);
/* Whether prefill matmuls can take the dense GEMM (a GEMM library was found). */
bool backend_cuda_has_gemm(struct backend *be);
/* Whether the prefill GEMM takes weight w (its type dequantizes to f16 and it fits the GEMM's scratch) in a batch of
 * its rows (test_cuda_model's f16 oracle follows it). */
bool backend_cuda_gemm_weight(const struct bk_tensor *w);
/* Prefill path thresholds (tests, measurements): matmuls of at least gemm_min_rows activation rows dequantize
 * the weight to f16 and run the dense GEMM (<= 0: never; default 32, and 65 for decode steps, whose tokens are each
 * their own sequence; this call and env VLLMC_CUDA_GEMM_ROWS set one threshold for every batch); gdn_chunked
 * false keeps the token-by-token GDN rule for every run (env VLLMC_CUDA_GDN_CHUNKED=0). The prefill attention
 * kernel is switched off with env VLLMC_CUDA_ATTN_PREFILL=0. A batch_invariant backend uses none of the three. */
void backend_cuda_set_prefill(struct backend *be, int gemm_min_rows, bool gdn_chunked);
/* Batches of several sequences that are not decode steps (a prompt chunk beside decode tokens: the engine's steps under
 * load): on, each GDN op takes its runs side by side, the runs of >= 32 tokens through the chunked kernels (one run a
 * CTA of the scan) and the shorter ones through the recurrent kernels (one run a CTA); off, the chunked kernels take
 * every run (a 1-token run costs a 64-row chunk, and the scan walks all the batch's chunks in series) or, with no
 * run of 32, the recurrent kernels walk the whole batch in one CTA. The same arithmetic per run either way for the
 * recurrent runs; gdn_runs.h. Default on (env VLLMC_CUDA_GDN_RUNS=0 turns it off); returns the previous value. */
bool backend_cuda_set_gdn_runs(struct backend *be, bool on);
/* The GEMM's row thresholds for other batches and for decode steps: *rows and *decode_rows set, the previous values
 * returned in their place (so a second call restores them). */
void backend_cuda_swap_gemm_rows(struct backend *be, int *rows, int *decode_rows);
/* Tests: draw n_rows rows of d_logits (device, [n_rows][n]) by rows[] (bk_sample) with the device sampler, the ids into
 * ids (host). Synchronous. */
vllmc_status backend_cuda_sample_rows(struct backend *be, const float *d_logits, int32_t n_rows, int64_t n,
                                      const struct bk_sample *rows, int32_t *ids);
/* The GEMM path's activation operand: false (default) the f16 rounding of the f32 rows; true the f16 rounding
 * of the values of the quantized rows (d * q, Q8_K for k-quant weights, Q8_0 for the legacy ones): what the
 * CPU's integer dot products multiply, so prefill through the GEMM differs from the CPU by the f16 roundings
 * only. Env VLLMC_CUDA_GEMM_ACT=q8 sets it at backend creation. Not yet measured: for comparisons. */
void backend_cuda_set_gemm_act(struct backend *be, bool quantized);

#ifdef __cplusplus
}
#endif
#endif
