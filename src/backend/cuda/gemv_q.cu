/* Quantized matrix-vector products and the activation quantizers that feed them (layouts in
 * cuda_internal.h).
 *
 * matmul: one warp per weight row, up to CU_MM_MAX_SEG weights (q/k/v, gate/up, ...) in one launch; at
 * decode a grid of exactly the resident CTAs walks all rows. A warp step covers 1 KB of contiguous quants:
 * 8 Q4_K/Q6_K super-blocks (4 lanes x 32 bytes each) or 32 Q8_0 blocks (one per lane). Two steps' loads
 * are issued before their math. The integer sums of a super-block (block) are exact (dp4a, reduced with
 * integer shuffles) and its float term is formed as the CPU reference forms it (no FMA contraction); the
 * terms are then summed per lane and across the warp, an order other than the reference's sequential one,
 * so outputs match vec_dot_ref to float rounding (about 1e-7 relative). NA activation rows share each
 * weight load (prefill). */
#include <limits.h>
#include <string.h>
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/act_quant.h"
#include "backend/cuda/norm_quant.h"
#include "backend/cuda/moe_mix.h"
#include "backend/cuda/moe_sort.h"
#include "backend/cuda/moe_route.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "backend/cuda/gdn_conv.h"
#include "backend/cuda/mega2_tile.h"

/* A measurement build only (-DVLLMC_HOT_W=bytes, never the default): the decode's mat-vec and MoE expert kernels
 * read a weight's rows at offset off % VLLMC_HOT_W of its tensor (or of its first expert), so a step's weights are
 * ~64-90 KB a tensor that stay in L2 from step to step. Only a tensor of at least VLLMC_HOT_W bytes plus 32 rows
 * wraps, so a CTA's rows read from the wrapped offset stay inside it; smaller ones read as they are. The outputs are
 * wrong; the launches, their grids, their waits and every other kernel are the step's own. What the step costs then
 * is the launch chain's latency with the weight stream taken away (gpu-check stage hot, against the default). */
static __device__ __forceinline__ size_t mv_woff(size_t off, uint64_t stride, int64_t n_rows) {
#ifdef VLLMC_HOT_W
    return (uint64_t)n_rows * stride >= (uint64_t)(VLLMC_HOT_W) + 32 * stride ? off % (size_t)(VLLMC_HOT_W) : off;
#else
    (void)stride; (void)n_rows;
    return off;
#endif
}

#define MM_UNROLL 2  /* steps whose loads are issued together (Q6_K: 128 bytes a lane) */
#if defined(VLLMC_HIP_ARCH_GFX11) /* LLVM 15 caps these wave32 kernels at 128 VGPRs: with 4, moe_mm_kernel spilled 6 and
                                     mm_kernel_split<2> 2 (scripts/hip-check.sh); the sums keep their order either way */
#define MM_UNROLL4 2
#else
#define MM_UNROLL4 4 /* Q4_K, Q8_0: 32 bytes a lane a step */
#endif

static inline uint64_t pad16(uint64_t x) { return (x + 15) & ~(uint64_t)15; }

uint64_t cu_weight_row_stride(uint32_t type, int64_t n) {
    if (n <= 0) return 0;
    switch (type) {
    case GGML_TYPE_Q4_K: return n % QK_K ? 0 : 128 * (uint64_t)(n / QK_K) + pad16(12 * (uint64_t)(n / QK_K)) + pad16(4 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q5_K: return n % QK_K ? 0 : 160 * (uint64_t)(n / QK_K) + pad16(12 * (uint64_t)(n / QK_K)) + pad16(4 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q6_K: return n % QK_K ? 0 : 208 * (uint64_t)(n / QK_K) + pad16(2 * (uint64_t)(n / QK_K));
    case GGML_TYPE_IQ4_XS: return n % QK_K ? 0 : 128 * (uint64_t)(n / QK_K) + pad16(4 * (uint64_t)(n / QK_K)) + pad16(4 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q2_K: return n % QK_K ? 0 : 80 * (uint64_t)(n / QK_K) + pad16(4 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q3_K: return n % QK_K ? 0 : 96 * (uint64_t)(n / QK_K) + pad16(12 * (uint64_t)(n / QK_K)) + pad16(2 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q8_0: return n % 32 ? 0 : 32 * (uint64_t)(n / 32) + pad16(2 * (uint64_t)(n / 32));
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_IQ4_NL: return n % 32 ? 0 : 16 * (uint64_t)(n / 32) + pad16(2 * (uint64_t)(n / 32));
    case GGML_TYPE_Q5_0: return n % 32 ? 0 : 16 * (uint64_t)(n / 32) + pad16(4 * (uint64_t)(n / 32)) + pad16(2 * (uint64_t)(n / 32));
    case GGML_TYPE_Q4_1: return n % 32 ? 0 : 16 * (uint64_t)(n / 32) + pad16(4 * (uint64_t)(n / 32));
    case GGML_TYPE_Q5_1: return n % 32 ? 0 : 16 * (uint64_t)(n / 32) + pad16(4 * (uint64_t)(n / 32)) + pad16(4 * (uint64_t)(n / 32));
    case GGML_TYPE_MXFP4: return n % 32 ? 0 : 16 * (uint64_t)(n / 32) + pad16((uint64_t)(n / 32));
    case GGML_TYPE_F32: return 4 * (uint64_t)n;
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16: return 2 * (uint64_t)n;
    default: return 0;
    }
}

static void repack_row(uint32_t type, const uint8_t *src, int64_t n, uint8_t *dst, bool unpack) {
    const uint64_t stride = cu_weight_row_stride(type, n);
    if (!unpack) memset(dst, 0, stride);
    if (type == GGML_TYPE_Q4_K) {
        const int64_t ns = n / QK_K;
        uint8_t *qs = dst, *sc = dst + 128 * ns, *dm = sc + pad16(12 * ns);
        for (int64_t s = 0; s < ns; s++) {
            block_q4_K *b = (block_q4_K *)(src + s * sizeof(block_q4_K));
            if (unpack) {
                memcpy(b->qs, qs + 128 * s, 128); memcpy(b->scales, sc + 12 * s, 12);
                memcpy(&b->d, dm + 4 * s, 2); memcpy(&b->dmin, dm + 4 * s + 2, 2);
            } else {
                memcpy(qs + 128 * s, b->qs, 128); memcpy(sc + 12 * s, b->scales, 12);
                memcpy(dm + 4 * s, &b->d, 2); memcpy(dm + 4 * s + 2, &b->dmin, 2);
            }
        }
    } else if (type == GGML_TYPE_Q5_K) { /* the quants, the high bits, the 12 scale bytes, d / dmin (Q4_K's order) */
        const int64_t ns = n / QK_K;
        uint8_t *qs = dst, *qh = dst + 128 * ns, *sc = qh + 32 * ns, *dm = sc + pad16(12 * ns);
        for (int64_t s = 0; s < ns; s++) {
            block_q5_K *b = (block_q5_K *)(src + s * sizeof(block_q5_K));
            if (unpack) {
                memcpy(b->qs, qs + 128 * s, 128); memcpy(b->qh, qh + 32 * s, 32); memcpy(b->scales, sc + 12 * s, 12);
                memcpy(&b->d, dm + 4 * s, 2); memcpy(&b->dmin, dm + 4 * s + 2, 2);
            } else {
                memcpy(qs + 128 * s, b->qs, 128); memcpy(qh + 32 * s, b->qh, 32); memcpy(sc + 12 * s, b->scales, 12);
                memcpy(dm + 4 * s, &b->d, 2); memcpy(dm + 4 * s + 2, &b->dmin, 2);
            }
        }
    } else if (type == GGML_TYPE_IQ4_XS) { /* the quants, the 4 low-scale bytes, then d | scales_h << 16 a word */
        const int64_t ns = n / QK_K;
        uint8_t *qs = dst, *sl = dst + 128 * ns, *dh = sl + pad16(4 * ns);
        for (int64_t s = 0; s < ns; s++) {
            block_iq4_xs *b = (block_iq4_xs *)(src + s * sizeof(block_iq4_xs));
            if (unpack) {
                memcpy(b->qs, qs + 128 * s, 128); memcpy(b->scales_l, sl + 4 * s, 4);
                memcpy(&b->d, dh + 4 * s, 2); memcpy(&b->scales_h, dh + 4 * s + 2, 2);
            } else {
                memcpy(qs + 128 * s, b->qs, 128); memcpy(sl + 4 * s, b->scales_l, 4);
                memcpy(dh + 4 * s, &b->d, 2); memcpy(dh + 4 * s + 2, &b->scales_h, 2);
            }
        }
    } else if (type == GGML_TYPE_Q6_K) {
        const int64_t ns = n / QK_K;
        uint8_t *ql = dst, *qh = dst + 128 * ns, *sc = qh + 64 * ns, *d = sc + 16 * ns;
        for (int64_t s = 0; s < ns; s++) {
            block_q6_K *b = (block_q6_K *)(src + s * sizeof(block_q6_K));
            if (unpack) {
                memcpy(b->ql, ql + 128 * s, 128); memcpy(b->qh, qh + 64 * s, 64);
                memcpy(b->scales, sc + 16 * s, 16); memcpy(&b->d, d + 2 * s, 2);
            } else {
                memcpy(ql + 128 * s, b->ql, 128); memcpy(qh + 64 * s, b->qh, 64);
                memcpy(sc + 16 * s, b->scales, 16); memcpy(d + 2 * s, &b->d, 2);
            }
        }
    } else if (type == GGML_TYPE_Q8_0) {
        const int64_t nb = n / 32;
        uint8_t *qs = dst, *d = dst + 32 * nb;
        for (int64_t s = 0; s < nb; s++) {
            block_q8_0 *b = (block_q8_0 *)(src + s * sizeof(block_q8_0));
            if (unpack) { memcpy(b->qs, qs + 32 * s, 32); memcpy(&b->d, d + 2 * s, 2); }
            else { memcpy(qs + 32 * s, b->qs, 32); memcpy(d + 2 * s, &b->d, 2); }
        }
    } else if (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_IQ4_NL) { /* (the same block: d, then 16 quant bytes) */
        const int64_t nb = n / 32;
        uint8_t *qs = dst, *d = dst + 16 * nb;
        for (int64_t s = 0; s < nb; s++) {
            block_q4_0 *b = (block_q4_0 *)(src + s * sizeof(block_q4_0));
            if (unpack) { memcpy(b->qs, qs + 16 * s, 16); memcpy(&b->d, d + 2 * s, 2); }
            else { memcpy(qs + 16 * s, b->qs, 16); memcpy(d + 2 * s, &b->d, 2); }
        }
    } else if (type == GGML_TYPE_Q2_K) { /* the quants, the 16 scale bytes of each super-block, then d / dmin */
        const int64_t ns = n / QK_K;
        uint8_t *qs = dst, *sc = dst + 64 * ns, *dm = sc + 16 * ns;
        for (int64_t s = 0; s < ns; s++) {
            block_q2_K *b = (block_q2_K *)(src + s * sizeof(block_q2_K));
            if (unpack) { memcpy(b->qs, qs + 64 * s, 64); memcpy(b->scales, sc + 16 * s, 16); memcpy(&b->d, dm + 4 * s, 2); memcpy(&b->dmin, dm + 4 * s + 2, 2); }
            else { memcpy(qs + 64 * s, b->qs, 64); memcpy(sc + 16 * s, b->scales, 16); memcpy(dm + 4 * s, &b->d, 2); memcpy(dm + 4 * s + 2, &b->dmin, 2); }
        }
    } else if (type == GGML_TYPE_Q3_K) { /* the quants, the 32 hmask bytes of each super-block, its 12 scale bytes, then d */
        const int64_t ns = n / QK_K;
        uint8_t *qs = dst, *hm = dst + 64 * ns, *sc = hm + 32 * ns, *d = sc + pad16(12 * (uint64_t)ns);
        for (int64_t s = 0; s < ns; s++) {
            block_q3_K *b = (block_q3_K *)(src + s * sizeof(block_q3_K));
            if (unpack) { memcpy(b->qs, qs + 64 * s, 64); memcpy(b->hmask, hm + 32 * s, 32); memcpy(b->scales, sc + 12 * s, 12); memcpy(&b->d, d + 2 * s, 2); }
            else { memcpy(qs + 64 * s, b->qs, 64); memcpy(hm + 32 * s, b->hmask, 32); memcpy(sc + 12 * s, b->scales, 12); memcpy(d + 2 * s, &b->d, 2); }
        }
    } else if (type == GGML_TYPE_Q5_0) {
        const int64_t nb = n / 32;
        uint8_t *qs = dst, *qh = dst + 16 * nb, *d = qh + pad16(4 * (uint64_t)nb);
        for (int64_t s = 0; s < nb; s++) {
            block_q5_0 *b = (block_q5_0 *)(src + s * sizeof(block_q5_0));
            if (unpack) { memcpy(b->qs, qs + 16 * s, 16); memcpy(b->qh, qh + 4 * s, 4); memcpy(&b->d, d + 2 * s, 2); }
            else { memcpy(qs + 16 * s, b->qs, 16); memcpy(qh + 4 * s, b->qh, 4); memcpy(d + 2 * s, &b->d, 2); }
        }
    } else if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) { /* the quants, (Q5_1) the 4 qh bytes of each block, d / m */
        const bool q5 = type == GGML_TYPE_Q5_1;
        const int64_t nb = n / 32, bs = q5 ? (int64_t)sizeof(block_q5_1) : (int64_t)sizeof(block_q4_1);
        uint8_t *qs = dst, *qh = dst + 16 * nb, *dm = qh + (q5 ? pad16(4 * (uint64_t)nb) : 0);
        for (int64_t s = 0; s < nb; s++) {
            uint8_t *b = (uint8_t *)src + s * bs; /* d, m, [qh[4]], qs[16] */
            uint8_t *bq = b + (q5 ? 8 : 4);
            if (unpack) { memcpy(bq, qs + 16 * s, 16); if (q5) memcpy(b + 4, qh + 4 * s, 4); memcpy(b, dm + 4 * s, 4); }
            else { memcpy(qs + 16 * s, bq, 16); if (q5) memcpy(qh + 4 * s, b + 4, 4); memcpy(dm + 4 * s, b, 4); }
        }
    } else if (type == GGML_TYPE_MXFP4) { /* the quants, then the E8M0 byte e of each block */
        const int64_t nb = n / 32;
        uint8_t *qs = dst, *e = dst + 16 * nb;
        for (int64_t s = 0; s < nb; s++) {
            block_mxfp4 *b = (block_mxfp4 *)(src + s * sizeof(block_mxfp4));
            if (unpack) { memcpy(b->qs, qs + 16 * s, 16); b->e = e[s]; }
            else { memcpy(qs + 16 * s, b->qs, 16); e[s] = b->e; }
        }
    } else {
        if (unpack) memcpy((void *)src, dst, stride);
        else memcpy(dst, src, stride);
    }
}

void cu_repack_rows(uint32_t type, const void *src, int64_t n_cols, int64_t n_rows, uint8_t *dst) {
    const uint64_t rs = quant_row_size(type, n_cols), stride = cu_weight_row_stride(type, n_cols);
    for (int64_t r = 0; r < n_rows; r++)
        repack_row(type, (const uint8_t *)src + (uint64_t)r * rs, n_cols, dst + (uint64_t)r * stride, false);
}

void cu_unpack_rows(uint32_t type, const uint8_t *src, int64_t n_cols, int64_t n_rows, void *dst) {
    const uint64_t rs = quant_row_size(type, n_cols), stride = cu_weight_row_stride(type, n_cols);
    for (int64_t r = 0; r < n_rows; r++)
        repack_row(type, (uint8_t *)dst + (uint64_t)r * rs, n_cols, (uint8_t *)src + (uint64_t)r * stride, true);
}

struct cu_act_mut cu_act_split(const struct bk_act *a) {
    struct cu_act_mut m;
    memset(&m, 0, sizeof(m));
    const int64_t n = a->n_cols, R = a->max_rows;
    m.n = n;
    m.x = a->x;
    if (a->q[BK_ACT_Q8_K]) {
        m.k_qs = (int8_t *)a->q[BK_ACT_Q8_K];
        m.k_d = (float *)(m.k_qs + R * n);
        m.k_bs = (int16_t *)(((uintptr_t)(m.k_d + R * (n / QK_K)) + 15) & ~(uintptr_t)15); /* 16-aligned */
    }
    if (a->q[BK_ACT_Q8_0]) {
        m.o_qs = (int8_t *)a->q[BK_ACT_Q8_0];
        m.o_d = (uint16_t *)(m.o_qs + R * n);
    }
    if (a->q[BK_ACT_Q8_1]) { /* 36 bytes a block as block_q8_1, split: the quants, then d, then s; its quants and scales
                                are written only where the act has no Q8_0 part (the same values are there) */
        int8_t *qs = (int8_t *)a->q[BK_ACT_Q8_1];
        uint16_t *d = (uint16_t *)(qs + R * n);
        if (!m.o_qs) { m.o_qs = qs; m.o_d = d; }
        m.o_s = d + R * (n / 32);
    }
    m.h = (uint16_t *)a->q[BK_ACT_F16];
    m.bf = (uint16_t *)a->q[BK_ACT_BF16];
    if (a->q[BK_ACT_Q8_KD]) { /* each array 16-aligned (bk_act_row_bytes keeps 48 bytes a row for it) */
        const int64_t G = R * (n / 16);
        m.kd_qs = (int8_t *)a->q[BK_ACT_Q8_KD];
        m.kd_d = (float *)(((uintptr_t)(m.kd_qs + R * n) + 15) & ~(uintptr_t)15);
        m.kd_bs = (int16_t *)(((uintptr_t)(m.kd_d + G) + 15) & ~(uintptr_t)15);
        m.kd_ssq = (float *)(((uintptr_t)(m.kd_bs + G) + 15) & ~(uintptr_t)15);
    }
    return m;
}

/* grid (ceil(units / NQ_WARPS), rows); a warp owns one 256-element unit of one row: its f32 values
 * (normed / gated / as they are) go to out.x, then into every format. RMSNorm: every CTA of the row
 * sums the whole row's squares (in double, the same way), so no second launch is needed. */
static __global__ void __launch_bounds__(32 * NQ_WARPS) norm_quant_kernel(int mode, const float *in0, const float *in1,
                                                                          int64_t ld, const float *w, float eps, int group,
                                                                          struct cu_act_mut out, uint32_t fmts, int early) {
    __shared__ double red[NQ_WARPS];
    const int64_t r = blockIdx.y, n = out.n;
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    const int64_t unit = (int64_t)blockIdx.x * NQ_WARPS + wid, e0 = unit * 256 + lane * 8;
    /* the norm weights of the lane's 8 elements before the dependency wait (no kernel writes weights): their
     * load from DRAM no longer follows the row's sum of squares */
    float wv[8];
    const bool pre = w && (mode == CU_NQ_RMSNORM || mode == CU_NQ_GATED) && e0 + 8 <= n;
    if (pre)
#pragma unroll
        for (int k = 0; k < 8; k++) wv[k] = w[mode == CU_NQ_GATED ? (e0 + k) % group : e0 + k];
    if (early) gpu_pdl_trigger(); /* the next launch (a mat-vec) may start streaming its weights already */
    gpu_pdl_wait();
    if (!early) gpu_pdl_trigger();
    const float scale = mode == CU_NQ_RMSNORM ? nq_rms_scale(in0 + r * n, n, eps, red) : 1.f;
    if (unit * 256 >= n) return;
    nq_unit(mode, in0, in1, ld, w, eps, group, scale, out, fmts, r, unit, lane, pre ? wv : NULL);
}

#if defined(VLLMC_HOT_W) || defined(VLLMC_NQ_SKIP)
/* A measurement build's split of the norm + quantize launches' part of the chain (VLLMC_HOT_NQ, one-row launches only,
 * so the prefill still fills the acts), in the hot build or in one of its own with the real weights (-DVLLMC_NQ_SKIP):
 * 1 puts an empty kernel of the same grid in each one's place (the dependency wait, the release, the grid's start and
 * end), 2 launches nothing. VLLMC_HOT_NQ_MODE=m limits either to the launches of norm mode m (cu_nq_mode: 1 the
 * RMSNorms, 2 the SwiGLUs, 3 the gated norms). The acts keep the values written before, so the outputs are wrong by
 * design; the dense models only (a MoE router reading them could pick any expert). */
static __global__ void __launch_bounds__(32 * NQ_WARPS) nq_empty_kernel(int) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
}
static int hot_nq(int mode) {
    static int v = -1, m = 0;
    if (v < 0) {
        const char *e = getenv("VLLMC_HOT_NQ"), *em = getenv("VLLMC_HOT_NQ_MODE");
        v = e ? atoi(e) : 0;
        m = em ? atoi(em) : 0;
    }
    return !m || m == mode ? v : 0;
}
#endif

void cu_launch_norm_quant(int mode, const float *in0, const float *in1, int64_t ld, const float *w, float eps,
                          int group, int64_t n_rows, struct cu_act_mut out, uint32_t fmts, gpuStream_t s) {
    if (n_rows <= 0) return;
    const int64_t units = GPU_CEIL_DIV(out.n, 256);
#if defined(VLLMC_HOT_W) || defined(VLLMC_NQ_SKIP)
    if (n_rows == 1 && hot_nq(mode) == 2) return;
    if (n_rows == 1 && hot_nq(mode) == 1) {
        gpu_launch(nq_empty_kernel, dim3((unsigned)GPU_CEIL_DIV(units, NQ_WARPS), 1u), dim3(32 * NQ_WARPS), 0, s, 0);
        return;
    }
#endif
    gpu_launch(norm_quant_kernel, dim3((unsigned)GPU_CEIL_DIV(units, NQ_WARPS), (unsigned)n_rows), dim3(32 * NQ_WARPS), 0, s,
               mode, in0, in1, ld, w, eps, group, out, fmts, (int)cu_mm_cfg.nq_early);
}

/* ---------------------------------------------------------------------------------------------
 * matmul
 * ------------------------------------------------------------------------------------------- */

static __device__ __forceinline__ float term_kmin(float da, float d, float dmin, int isum, int msum) {
    const float dd = __fmul_rn(da, d), dm = __fmul_rn(da, dmin);
    return __fsub_rn(__fmul_rn(dd, (float)isum), __fmul_rn(dm, (float)msum));
}
static __device__ __forceinline__ float term_k(float da, float d, int isum) {
    return __fmul_rn(__fmul_rn(da, d), (float)isum);
}

/* Byte i of the 12 scale bytes held in three words (selects, so the words stay in registers). */
static __device__ __forceinline__ int sbyte(uint32_t w0, uint32_t w1, uint32_t w2, int i) {
    const uint32_t w = i < 4 ? w0 : (i < 8 ? w1 : w2);
    return (int)((w >> (8 * (i & 3))) & 0xff);
}

static __device__ __forceinline__ void k4_scale_min(int j, uint32_t w0, uint32_t w1, uint32_t w2, int &sc, int &m) {
    if (j < 4) { sc = sbyte(w0, w1, w2, j) & 63; m = sbyte(w0, w1, w2, j + 4) & 63; }
    else {
        sc = (sbyte(w0, w1, w2, j + 4) & 15) | ((sbyte(w0, w1, w2, j - 4) >> 6) << 4);
        m = (sbyte(w0, w1, w2, j + 4) >> 4) | ((sbyte(w0, w1, w2, j) >> 6) << 4);
    }
}

/* Q4_K x Q8_K: lane (g, c) of a step owns 64-element chunk c of super-block 8*step + g (32 bytes of quants:
 * 32 low and 32 high nibbles = sub-blocks 2c and 2c+1). The integer sums of a super-block are reduced over
 * its 4 lanes; the float term is formed as the reference forms it; terms are summed per lane, then
 * across the warp. */
/* A repacked Q4_K row of n_sb super-blocks: the quants, then the 12 scale bytes of each (from here), then d / dmin
 * (from a 16-byte boundary). */
static __device__ __forceinline__ size_t k4_sc_off(int n_sb) { return 128 * (size_t)n_sb; }
static __device__ __forceinline__ size_t k4_dm_off(int n_sb) { return k4_sc_off(n_sb) + ((12 * (size_t)n_sb + 15) & ~(size_t)15); }
/* 32 bytes of activation quants at p (16-byte aligned) as 8 words, two 16-byte loads */
static __device__ __forceinline__ void ld_w8(const int8_t *p, int (&w)[8]) {
    const int4 a = *(const int4 *)p, b = *(const int4 *)(p + 16);
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
}
/* The activation side of a row with scales and mins (Q4_K, Q5_K): lane c's quants of sub-blocks 2c (vlo) and 2c + 1
 * (vhi), 4 a word, against each activation row's Q8_K quants; the integer sums reduced over the super-block's 4
 * lanes, the term the reference's term_kmin. */
template <int NA>
static __device__ __forceinline__ void kmin_rows(const int (&vlo)[8], const int (&vhi)[8], int sc0, int m0, int sc1, int m1,
                                                 float d, float dmin, bool ok, int sb, int c, const cu_act_view &a, int a0,
                                                 int na, float *acc) {
#pragma unroll
    for (int r = 0; r < NA; r++) {
        int I = 0, M = 0;
        float da = 0.f;
        if (ok && r < na) {
            const int64_t ar = a0 + r;
            const int8_t *aq = a.k_qs + ar * a.n + (int64_t)sb * QK_K + 64 * c;
            int al[8], ah[8];
            ld_w8(aq, al);
            ld_w8(aq + 32, ah);
            int slo = 0, shi = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                slo = dot4_i8(vlo[k], al[k], slo);
                shi = dot4_i8(vhi[k], ah[k], shi);
            }
            const int2 bs = *(const int2 *)(a.k_bs + ar * (a.n / 16) + (int64_t)sb * 16 + 4 * c);
            const int b0 = (int)(int16_t)(bs.x & 0xffff), b1 = (int)(int16_t)(bs.x >> 16);
            const int b2 = (int)(int16_t)(bs.y & 0xffff), b3 = (int)(int16_t)(bs.y >> 16);
            I = sc0 * slo + sc1 * shi;
            M = m0 * (b0 + b1) + m1 * (b2 + b3);
            da = a.k_d[ar * (a.n / QK_K) + sb];
        }
        I += shfl_xor(I, 1); I += shfl_xor(I, 2);
        M += shfl_xor(M, 1); M += shfl_xor(M, 2);
        if (c == 0 && ok && r < na) acc[r] += term_kmin(da, d, dmin, I, M);
    }
}

template <int NA>
static __device__ void row_q4_K(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 2, c = lane & 3;
    const uint8_t *scb = wr + k4_sc_off(n_sb);
    const uint8_t *dmb = wr + k4_dm_off(n_sb);
    const int n_steps = (n_sb + 7) / 8;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL4) {
        uint4 q0[MM_UNROLL4], q1[MM_UNROLL4];
        uint32_t sw[MM_UNROLL4][3], dm[MM_UNROLL4];
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int sb = 8 * (st0 + u) + g;
            if (sb < n_sb) {
                const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c);
                q0[u] = gpu_ldg(qp);
                q1[u] = gpu_ldg(qp + 1);
                const uint32_t *sp = (const uint32_t *)(scb + 12 * (size_t)sb);
                sw[u][0] = gpu_ldg(sp); sw[u][1] = gpu_ldg(sp + 1); sw[u][2] = gpu_ldg(sp + 2);
                dm[u] = gpu_ldg((const uint32_t *)(dmb + 4 * (size_t)sb));
            } else {
                q0[u] = q1[u] = make_uint4(0, 0, 0, 0); sw[u][0] = sw[u][1] = sw[u][2] = 0; dm[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int st = st0 + u;
            if (st >= n_steps) break;
            const int sb = 8 * st + g;
            const bool ok = sb < n_sb;
            int sc0, m0, sc1, m1;
            k4_scale_min(2 * c, sw[u][0], sw[u][1], sw[u][2], sc0, m0);
            k4_scale_min(2 * c + 1, sw[u][0], sw[u][1], sw[u][2], sc1, m1);
            const uint32_t qw[8] = {q0[u].x, q0[u].y, q0[u].z, q0[u].w, q1[u].x, q1[u].y, q1[u].z, q1[u].w};
            int vlo[8], vhi[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                vlo[k] = (int)(qw[k] & 0x0F0F0F0Fu);
                vhi[k] = (int)((qw[k] >> 4) & 0x0F0F0F0Fu);
            }
            const float d = fp16_to_fp32((uint16_t)(dm[u] & 0xffff)), dmin = fp16_to_fp32((uint16_t)(dm[u] >> 16));
            kmin_rows<NA>(vlo, vhi, sc0, m0, sc1, m1, d, dmin, ok, sb, c, a, a0, na, acc);
        }
    }
}

/* Q2_K / Q3_K x Q8_K (the one-warp-a-row kernels only): lane (g, j) of a step owns sub-blocks 2j and 2j + 1 of
 * super-block 4*step + g, i.e. elements 128h + 32q .. + 31 (h = j / 4, q = j % 4): bits 2q of quant bytes 32h .. 32h + 31
 * (Q3_K: and bit j of hmask bytes 0 .. 31, clear meaning -4). The sub-block sums are exact: Q3_K's -4 through the
 * activation's 16-element sums (bsums), as Q2_K's mins; the integer sums reduced over the super-block's 8 lanes, the
 * term the reference's (term_kmin / term_k). Repacked rows: Q2_K the quants, the 16 scale bytes of each super-block,
 * d / dmin; Q3_K the quants, the 32 hmask bytes of each, its 12 scale bytes, then d (cu_weight_row_stride). */
template <int NA, bool Q3>
static __device__ void row_q23_K(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 3, j = lane & 7, h = j >> 2, q = j & 3;
    const uint8_t *hmb = wr + 64 * (size_t)n_sb, *scb = Q3 ? hmb + 32 * (size_t)n_sb : hmb;
    const uint8_t *db = Q3 ? scb + ((12 * (size_t)n_sb + 15) & ~(size_t)15) : scb + 16 * (size_t)n_sb;
    for (int st = 0; st < (n_sb + 3) / 4; st++) {
        const int sb = 4 * st + g;
        const bool ok = sb < n_sb;
        uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0, m0 = q0, m1 = q0;
        uint32_t sw0 = 0, sw1 = 0, sw2 = 0, dw = 0;
        if (ok) {
            const uint4 *qp = (const uint4 *)(wr + 64 * (size_t)sb + 32 * h);
            q0 = gpu_ldg(qp); q1 = gpu_ldg(qp + 1);
            if (Q3) {
                const uint4 *hp = (const uint4 *)(hmb + 32 * (size_t)sb);
                m0 = gpu_ldg(hp); m1 = gpu_ldg(hp + 1);
                const uint32_t *sp = (const uint32_t *)(scb + 12 * (size_t)sb);
                sw0 = gpu_ldg(sp); sw1 = gpu_ldg(sp + 1); sw2 = gpu_ldg(sp + 2);
                dw = gpu_ldg((const unsigned short *)(db + 2 * (size_t)sb));
            } else {
                sw0 = gpu_ldg((const uint32_t *)(scb + 16 * (size_t)sb + 4 * (j >> 1)));
                dw = gpu_ldg((const uint32_t *)(db + 4 * (size_t)sb));
            }
        }
        int sc0, sc1, mn0 = 0, mn1 = 0;
        if (Q3) { /* scale b (0 .. 15) of the 12 bytes, minus its +32 bias (dot_q3k_scale) */
            auto scale = [&](int b) {
                const int lo = b < 8 ? sbyte(sw0, sw1, sw2, b) & 15 : sbyte(sw0, sw1, sw2, b - 8) >> 4;
                return (lo | (((sbyte(sw0, sw1, sw2, 8 + b % 4) >> (2 * (b / 4))) & 3) << 4)) - 32;
            };
            sc0 = scale(2 * j);
            sc1 = scale(2 * j + 1);
        } else {
            const uint32_t s2 = sw0 >> (16 * (j & 1)); /* scale bytes 2j, 2j + 1: scale low nibble, min high */
            sc0 = (int)(s2 & 15); mn0 = (int)((s2 >> 4) & 15);
            sc1 = (int)((s2 >> 8) & 15); mn1 = (int)((s2 >> 12) & 15);
        }
        const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        const uint32_t mw[8] = {m0.x, m0.y, m0.z, m0.w, m1.x, m1.y, m1.z, m1.w};
        int v[8]; /* 0 .. 3 (Q3_K: 0 .. 7, the hmask bit as 4) a byte */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            v[k] = (int)((qw[k] >> (2 * q)) & 0x03030303u);
            if (Q3) v[k] |= (int)(((mw[k] >> j) & 0x01010101u) << 2);
        }
#pragma unroll
        for (int r = 0; r < NA; r++) {
            int I = 0, M = 0;
            float da = 0.f;
            if (ok && r < na) {
                const int64_t ar = a0 + r;
                int x[8];
                ld_w8(a.k_qs + ar * a.n + (int64_t)sb * QK_K + 32 * j, x);
                int s0 = 0, s1 = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    s0 = dot4_i8(v[k], x[k], s0);
                    s1 = dot4_i8(v[4 + k], x[4 + k], s1);
                }
                const uint32_t bs = *(const uint32_t *)(a.k_bs + ar * (a.n / 16) + (int64_t)sb * 16 + 2 * j);
                const int b0 = (int)(int16_t)(bs & 0xffff), b1 = (int)(int16_t)(bs >> 16);
                if (Q3) I = sc0 * (s0 - 4 * b0) + sc1 * (s1 - 4 * b1);
                else { I = sc0 * s0 + sc1 * s1; M = mn0 * b0 + mn1 * b1; }
                da = a.k_d[ar * (a.n / QK_K) + sb];
            }
            I += shfl_xor(I, 1); I += shfl_xor(I, 2); I += shfl_xor(I, 4);
            if (!Q3) { M += shfl_xor(M, 1); M += shfl_xor(M, 2); M += shfl_xor(M, 4); }
            if (j == 0 && ok && r < na) {
                const float d = fp16_to_fp32((uint16_t)(dw & 0xffff));
                acc[r] += Q3 ? term_k(da, d, I) : term_kmin(da, d, fp16_to_fp32((uint16_t)(dw >> 16)), I, M);
            }
        }
    }
}

/* Q5_K x Q8_K: row_q4_K's lanes and sums, the 5th bit of sub-block j's element l from bit j of qh[l] (a repacked
 * row: the quants, then the 32 qh bytes of each super-block, the 12 scale bytes, d / dmin from a 16-byte boundary). */
template <int NA>
static __device__ void row_q5_K(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 2, c = lane & 3;
    const uint8_t *qhb = wr + 128 * (size_t)n_sb, *scb = qhb + 32 * (size_t)n_sb;
    const uint8_t *dmb = scb + ((12 * (size_t)n_sb + 15) & ~(size_t)15);
    for (int st = 0; st < (n_sb + 7) / 8; st++) {
        const int sb = 8 * st + g;
        const bool ok = sb < n_sb;
        uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0, h0 = q0, h1 = q0;
        uint32_t sw0 = 0, sw1 = 0, sw2 = 0, dm = 0;
        if (ok) {
            const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c), *hp = (const uint4 *)(qhb + 32 * (size_t)sb);
            q0 = gpu_ldg(qp); q1 = gpu_ldg(qp + 1);
            h0 = gpu_ldg(hp); h1 = gpu_ldg(hp + 1);
            const uint32_t *sp = (const uint32_t *)(scb + 12 * (size_t)sb);
            sw0 = gpu_ldg(sp); sw1 = gpu_ldg(sp + 1); sw2 = gpu_ldg(sp + 2);
            dm = gpu_ldg((const uint32_t *)(dmb + 4 * (size_t)sb));
        }
        int sc0, m0, sc1, m1;
        k4_scale_min(2 * c, sw0, sw1, sw2, sc0, m0);
        k4_scale_min(2 * c + 1, sw0, sw1, sw2, sc1, m1);
        const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        int vlo[8], vhi[8]; /* 0 .. 31 a byte */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            vlo[k] = (int)((qw[k] & 0x0F0F0F0Fu) | (((hw[k] >> (2 * c)) & 0x01010101u) << 4));
            vhi[k] = (int)(((qw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> (2 * c + 1)) & 0x01010101u) << 4));
        }
        const float d = fp16_to_fp32((uint16_t)(dm & 0xffff)), dmin = fp16_to_fp32((uint16_t)(dm >> 16));
        kmin_rows<NA>(vlo, vhi, sc0, m0, sc1, m1, d, dmin, ok, sb, c, a, a0, na, acc);
    }
}

/* The IQ4_NL / IQ4_XS values of 4 nibbles (one in each byte's low 4 bits): two 8-entry byte selections from the
 * table (kvalues_iq4nl, quant/blocks.h, as 4 little-endian words), picked per byte by the nibble's bit 3. */
static __device__ __forceinline__ int iq4_values4(uint32_t nib) {
    const uint32_t t0 = 0xBFAD9881u /* -127 -104 -83 -65 */, t1 = 0xF6EADDCFu /* -49 -35 -22 -10 */;
    const uint32_t t2 = 0x26190D01u /* 1 13 25 38 */, t3 = 0x71594535u /* 53 69 89 113 */;
    const uint32_t v = nib & 0x07070707u;
    const uint32_t sel = (v & 0xFu) | ((v >> 4) & 0xF0u) | ((v >> 8) & 0xF00u) | ((v >> 12) & 0xF000u);
    const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
    const uint32_t m = ((nib >> 3) & 0x01010101u) * 0xFFu; /* 0xFF in the bytes whose nibble is 8 .. 15 */
    return (int)((lo & ~m) | (hi & m));
}
/* The MXFP4 values of 4 nibbles (kvalues_mxfp4: 0 1 2 3 4 6 8 12, then the same negated), as iq4_values4. */
static __device__ __forceinline__ int mxfp4_values4(uint32_t nib) {
    const uint32_t t0 = 0x03020100u /* 0 1 2 3 */, t1 = 0x0C080604u /* 4 6 8 12 */;
    const uint32_t t2 = 0xFDFEFF00u /* 0 -1 -2 -3 */, t3 = 0xF4F8FAFCu /* -4 -6 -8 -12 */;
    const uint32_t v = nib & 0x07070707u;
    const uint32_t sel = (v & 0xFu) | ((v >> 4) & 0xF0u) | ((v >> 8) & 0xF00u) | ((v >> 12) & 0xF000u);
    const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
    const uint32_t m = ((nib >> 3) & 0x01010101u) * 0xFFu; /* 0xFF in the bytes whose nibble is 8 .. 15 */
    return (int)((lo & ~m) | (hi & m));
}

/* IQ4_XS x Q8_K: lane (g, c) owns sub-blocks 2c and 2c + 1 of super-block 8*step + g (32 quant bytes: sub-block b is
 * bytes 16b .. 16b + 15, element j the low nibble of byte j, element 16 + j its high nibble); its two 6-bit scales
 * (- 32) as the reference's dot_iq4xs_scale; the integer sums reduced over the 4 lanes, the term the reference's
 * term_k. A repacked row: the quants, the 4 low-scale bytes of each super-block, then d | scales_h << 16 a word. */
template <int NA>
static __device__ void row_iq4_xs(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 2, c = lane & 3;
    const uint8_t *slb = wr + 128 * (size_t)n_sb, *dhb = slb + ((4 * (size_t)n_sb + 15) & ~(size_t)15);
    for (int st = 0; st < (n_sb + 7) / 8; st++) {
        const int sb = 8 * st + g;
        const bool ok = sb < n_sb;
        uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
        uint32_t slw = 0, dh = 0;
        if (ok) {
            const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c);
            q0 = gpu_ldg(qp); q1 = gpu_ldg(qp + 1);
            slw = gpu_ldg((const uint32_t *)(slb + 4 * (size_t)sb));
            dh = gpu_ldg((const uint32_t *)(dhb + 4 * (size_t)sb));
        }
        const uint32_t sh = dh >> 16;
        const int ls0 = (int)((((slw >> (8 * c)) & 15u) | (((sh >> (4 * c)) & 3u) << 4))) - 32;
        const int ls1 = (int)((((slw >> (8 * c + 4)) & 15u) | (((sh >> (4 * c + 2)) & 3u) << 4))) - 32;
        const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        int vlo[8], vhi[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            vlo[k] = iq4_values4(qw[k] & 0x0F0F0F0Fu);
            vhi[k] = iq4_values4((qw[k] >> 4) & 0x0F0F0F0Fu);
        }
        const float d = fp16_to_fp32((uint16_t)(dh & 0xffff));
#pragma unroll
        for (int r = 0; r < NA; r++) {
            int I = 0;
            float da = 0.f;
            if (ok && r < na) {
                const int64_t ar = a0 + r;
                const int4 *ap = (const int4 *)(a.k_qs + ar * a.n + (int64_t)sb * QK_K + 64 * c);
                const int4 x0 = ap[0], x1 = ap[1], x2 = ap[2], x3 = ap[3];
                /* sub-block 2c: elements 0 .. 15 (low nibbles of words 0 .. 3), 16 .. 31 (their high nibbles);
                 * sub-block 2c + 1: 32 .. 47, 48 .. 63 from words 4 .. 7 */
                const int A[16] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w, x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
                int s0 = 0, s1 = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    s0 = dot4_i8(vlo[k], A[k], s0);
                    s0 = dot4_i8(vhi[k], A[4 + k], s0);
                    s1 = dot4_i8(vlo[4 + k], A[8 + k], s1);
                    s1 = dot4_i8(vhi[4 + k], A[12 + k], s1);
                }
                I = ls0 * s0 + ls1 * s1;
                da = a.k_d[ar * (a.n / QK_K) + sb];
            }
            I += shfl_xor(I, 1); I += shfl_xor(I, 2);
            if (c == 0 && ok && r < na) acc[r] += term_k(da, d, I);
        }
    }
}

/* Q6_K x Q8_K: lane (g, h, k) owns 32 bytes of ql (64 elements: 32 low nibbles, 32 high) and the 32 qh
 * bytes they need, of super-block 8*step + g. */
template <int NA>
static __device__ void row_q6_K(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 2, h = (lane >> 1) & 1, k = lane & 1;
    const uint8_t *qhb = wr + 128 * (size_t)n_sb, *scb = qhb + 64 * (size_t)n_sb, *db = scb + 16 * (size_t)n_sb;
    const int n_steps = (n_sb + 7) / 8;
    const int sh_lo = 2 * k, sh_hi = 4 + 2 * k;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL) {
        uint4 l0[MM_UNROLL], l1[MM_UNROLL], hh0[MM_UNROLL], hh1[MM_UNROLL];
        uint32_t scw[MM_UNROLL];
        uint16_t dd[MM_UNROLL];
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int sb = 8 * (st0 + u) + g;
            if (sb < n_sb) {
                const uint4 *lp = (const uint4 *)(wr + 128 * (size_t)sb + 64 * h + 32 * k);
                const uint4 *hp = (const uint4 *)(qhb + 64 * (size_t)sb + 32 * h);
                l0[u] = gpu_ldg(lp); l1[u] = gpu_ldg(lp + 1);
                hh0[u] = gpu_ldg(hp); hh1[u] = gpu_ldg(hp + 1);
                /* scales 8h + 2k, +1 (low nibbles) and 8h + 4 + 2k, +1 (high) */
                const uint16_t *sp = (const uint16_t *)(scb + 16 * (size_t)sb + 8 * h + 2 * k);
                scw[u] = (uint32_t)gpu_ldg(sp) | ((uint32_t)gpu_ldg(sp + 2) << 16);
                dd[u] = gpu_ldg((const unsigned short *)(db + 2 * (size_t)sb));
            } else {
                l0[u] = l1[u] = hh0[u] = hh1[u] = make_uint4(0, 0, 0, 0); scw[u] = 0; dd[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int st = st0 + u;
            if (st >= n_steps) break;
            const int sb = 8 * st + g;
            const bool ok = sb < n_sb;
            const uint32_t L[8] = {l0[u].x, l0[u].y, l0[u].z, l0[u].w, l1[u].x, l1[u].y, l1[u].z, l1[u].w};
            const uint32_t H[8] = {hh0[u].x, hh0[u].y, hh0[u].z, hh0[u].w, hh1[u].x, hh1[u].y, hh1[u].z, hh1[u].w};
            int vlo[8], vhi[8];
#pragma unroll
            for (int w = 0; w < 8; w++) {
                const uint32_t lo = (L[w] & 0x0F0F0F0Fu) | (((H[w] >> sh_lo) & 0x03030303u) << 4);
                const uint32_t hi = ((L[w] >> 4) & 0x0F0F0F0Fu) | (((H[w] >> sh_hi) & 0x03030303u) << 4);
                /* q - 32 in each byte (q in 0..63): set bit 7 so no byte borrows, subtract, flip bit 7 back */
                vlo[w] = (int)(((lo | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
                vhi[w] = (int)(((hi | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
            }
            const int s_l0 = (int)(int8_t)(scw[u] & 0xff), s_l1 = (int)(int8_t)((scw[u] >> 8) & 0xff);
            const int s_h0 = (int)(int8_t)((scw[u] >> 16) & 0xff), s_h1 = (int)(int8_t)(scw[u] >> 24);
            const float d = fp16_to_fp32(dd[u]);
#pragma unroll
            for (int r = 0; r < NA; r++) {
                int I = 0;
                float da = 0.f;
                if (ok && r < na) {
                    const int64_t ar = a0 + r;
                    const int8_t *aq = a.k_qs + ar * a.n + (int64_t)sb * QK_K + 128 * h + 32 * k;
                    int al[8], ah[8];
                    ld_w8(aq, al);
                    ld_w8(aq + 64, ah);
                    int sl0 = 0, sl1 = 0, sh0 = 0, sh1 = 0;
#pragma unroll
                    for (int w = 0; w < 4; w++) {
                        sl0 = dot4_i8(vlo[w], al[w], sl0);
                        sl1 = dot4_i8(vlo[w + 4], al[w + 4], sl1);
                        sh0 = dot4_i8(vhi[w], ah[w], sh0);
                        sh1 = dot4_i8(vhi[w + 4], ah[w + 4], sh1);
                    }
                    I = s_l0 * sl0 + s_l1 * sl1 + s_h0 * sh0 + s_h1 * sh1;
                    da = a.k_d[ar * (a.n / QK_K) + sb];
                }
                I += shfl_xor(I, 1); I += shfl_xor(I, 2);
                if ((lane & 3) == 0 && ok && r < na) acc[r] += term_k(da, d, I);
            }
        }
    }
}

/* Q8_0 x Q8_0: one 32-element block per lane per step (32 blocks = 1088 bytes a step). */
template <int NA>
static __device__ void row_q8_0(const uint8_t *wr, int n_b, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const uint8_t *db = wr + 32 * (size_t)n_b;
    const int n_steps = (n_b + 31) / 32;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL4) {
        uint4 q0[MM_UNROLL4], q1[MM_UNROLL4];
        uint16_t dw[MM_UNROLL4];
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int b = 32 * (st0 + u) + lane;
            if (b < n_b) {
                const uint4 *qp = (const uint4 *)(wr + 32 * (size_t)b);
                q0[u] = gpu_ldg(qp); q1[u] = gpu_ldg(qp + 1);
                dw[u] = gpu_ldg((const unsigned short *)(db + 2 * (size_t)b));
            } else { q0[u] = q1[u] = make_uint4(0, 0, 0, 0); dw[u] = 0; }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int b = 32 * (st0 + u) + lane;
            if (b >= n_b) continue;
            const int qw[8] = {(int)q0[u].x, (int)q0[u].y, (int)q0[u].z, (int)q0[u].w,
                               (int)q1[u].x, (int)q1[u].y, (int)q1[u].z, (int)q1[u].w};
            const float d = fp16_to_fp32(dw[u]);
#pragma unroll
            for (int r = 0; r < NA; r++) {
                if (r < na) {
                const int64_t ar = a0 + r;
                const int4 x0 = *(const int4 *)(a.o_qs + ar * a.n + 32 * (int64_t)b);
                const int4 x1 = *(const int4 *)(a.o_qs + ar * a.n + 32 * (int64_t)b + 16);
                int I = 0;
                I = dot4_i8(qw[0], x0.x, I); I = dot4_i8(qw[1], x0.y, I); I = dot4_i8(qw[2], x0.z, I); I = dot4_i8(qw[3], x0.w, I);
                I = dot4_i8(qw[4], x1.x, I); I = dot4_i8(qw[5], x1.y, I); I = dot4_i8(qw[6], x1.z, I); I = dot4_i8(qw[7], x1.w, I);
                const float da = fp16_to_fp32(a.o_d[ar * (a.n / 32) + b]);
                acc[r] += __fmul_rn(__fmul_rn(d, da), (float)I);
                }
            }
        }
    }
}

/* Bit 4 of each byte from the 4 low bits of x (Q5_0 high bits). */
static __device__ __forceinline__ uint32_t spread4(uint32_t x) {
    return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

/* Q4_0 / Q5_0 x Q8_0: one 32-element block per lane per step; element j < 16 is the low nibble of qs[j],
 * element j + 16 the high nibble (Q5_0: bit j / j + 16 of qh as the 5th bit); offset 8 / 16. */
/* K: 0 Q4_0, 1 Q5_0, 2 IQ4_NL (Q4_0's layout, the nibbles through kvalues_iq4nl), 3 Q4_1, 4 Q5_1 (the quants unsigned,
 * a d / m word a block, against Q8_1 activations: the reference's dot_term_min with the activation's s), 5 MXFP4 (the
 * nibbles through kvalues_mxfp4, the scale dot_e8m0_half of the block's byte e). A repacked row: the quants, the 4 qh
 * bytes of each block from a 16-byte boundary (Q5_0, Q5_1), then the f16 d (d / m; MXFP4: the byte e) of each. */
template <int NA, int K>
static __device__ void row_q45_0(const uint8_t *wr, int n_b, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    constexpr bool Q5 = K == 1 || K == 4, MIN = K == 3 || K == 4;
    const uint8_t *qhb = wr + 16 * (size_t)n_b;
    const uint8_t *db = Q5 ? qhb + ((4 * (size_t)n_b + 15) & ~(size_t)15) : qhb;
    const int n_steps = (n_b + 31) / 32;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL4) {
        uint4 q[MM_UNROLL4];
        uint32_t qh[MM_UNROLL4], dw[MM_UNROLL4];
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int b = 32 * (st0 + u) + lane;
            if (b < n_b) {
                q[u] = gpu_ldg((const uint4 *)(wr + 16 * (size_t)b));
                qh[u] = Q5 ? gpu_ldg((const uint32_t *)(qhb + 4 * (size_t)b)) : 0u;
                dw[u] = MIN ? gpu_ldg((const uint32_t *)(db + 4 * (size_t)b))
                      : K == 5 ? (uint32_t)gpu_ldg((const unsigned char *)(db + (size_t)b))
                               : (uint32_t)gpu_ldg((const unsigned short *)(db + 2 * (size_t)b));
            } else { q[u] = make_uint4(0, 0, 0, 0); qh[u] = 0; dw[u] = 0; }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int b = 32 * (st0 + u) + lane;
            if (b >= n_b) continue;
            const uint32_t qw[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
            int lo[4], hi[4];
#pragma unroll
            for (int w = 0; w < 4; w++) {
                uint32_t l = qw[w] & 0x0F0F0F0Fu, h = (qw[w] >> 4) & 0x0F0F0F0Fu;
                if (K == 2) {
                    lo[w] = iq4_values4(l);
                    hi[w] = iq4_values4(h);
                } else if (K == 5) {
                    lo[w] = mxfp4_values4(l);
                    hi[w] = mxfp4_values4(h);
                } else if (MIN) {
                    if (Q5) {
                        l |= spread4((qh[u] >> (4 * w)) & 15u);
                        h |= spread4((qh[u] >> (16 + 4 * w)) & 15u);
                    }
                    lo[w] = (int)l;
                    hi[w] = (int)h;
                } else if (Q5) {
                    l |= spread4((qh[u] >> (4 * w)) & 15u);
                    h |= spread4((qh[u] >> (16 + 4 * w)) & 15u);
                    lo[w] = (int)(((l | 0x80808080u) - 0x10101010u) ^ 0x80808080u);
                    hi[w] = (int)(((h | 0x80808080u) - 0x10101010u) ^ 0x80808080u);
                } else {
                    lo[w] = (int)(((l | 0x80808080u) - 0x08080808u) ^ 0x80808080u);
                    hi[w] = (int)(((h | 0x80808080u) - 0x08080808u) ^ 0x80808080u);
                }
            }
            const float d = K == 5 ? e8m0_half(dw[u]) : fp16_to_fp32((uint16_t)(dw[u] & 0xffff));
#pragma unroll
            for (int r = 0; r < NA; r++) {
                if (r < na) {
                    const int64_t ar = a0 + r;
                    const int4 x0 = *(const int4 *)(a.o_qs + ar * a.n + 32 * (int64_t)b);
                    const int4 x1 = *(const int4 *)(a.o_qs + ar * a.n + 32 * (int64_t)b + 16);
                    int I = 0;
                    I = dot4_i8(lo[0], x0.x, I); I = dot4_i8(lo[1], x0.y, I); I = dot4_i8(lo[2], x0.z, I); I = dot4_i8(lo[3], x0.w, I);
                    I = dot4_i8(hi[0], x1.x, I); I = dot4_i8(hi[1], x1.y, I); I = dot4_i8(hi[2], x1.z, I); I = dot4_i8(hi[3], x1.w, I);
                    const float da = fp16_to_fp32(a.o_d[ar * (a.n / 32) + b]);
                    if (MIN) /* dot_term_min */
                        acc[r] += __fadd_rn(__fmul_rn(__fmul_rn(d, da), (float)I),
                                            __fmul_rn(fp16_to_fp32((uint16_t)(dw[u] >> 16)), fp16_to_fp32(a.o_s[ar * (a.n / 32) + b])));
                    else
                        acc[r] += __fmul_rn(__fmul_rn(d, da), (float)I);
                }
            }
        }
    }
}

/* Float weights (F32, F16, BF16) x f32 activations: p[i % 32] in lane i % 32, then dot_reduce32 as butterflies: the
 * reference's order (dot_ref.c DOT_REF_FLOAT), so the outputs are its bits. WT: the weight element (float, or the
 * 16-bit words of f16 / bf16, converted exactly to f32). */
template <typename WT> struct fw_elt;
template <> struct fw_elt<float> { static __device__ __forceinline__ float get(const float *p, int i) { return gpu_ldg(p + i); } };
struct f16w { uint16_t u; };
struct bf16w { uint16_t u; };
template <> struct fw_elt<f16w> {
    static __device__ __forceinline__ float get(const f16w *p, int i) { return gpu_h2f(gpu_ldg((const unsigned short *)p + i)); }
};
template <> struct fw_elt<bf16w> {
    static __device__ __forceinline__ float get(const bf16w *p, int i) {
        return __uint_as_float((uint32_t)gpu_ldg((const unsigned short *)p + i) << 16);
    }
};
static __host__ __device__ __forceinline__ bool fw_type(int t) { return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16; }

/* The float rows' warp sum of the lanes' in-order partials (the CPU reference's dot_reduce32 order). */
static __device__ __forceinline__ float fw_reduce32(float v) {
    v = __fadd_rn(v, shfl_xor(v, 8));
    v = __fadd_rn(v, shfl_xor(v, 16));
    v = __fadd_rn(v, shfl_xor(v, 4));
    v = __fadd_rn(v, shfl_xor(v, 2));
    return __fadd_rn(v, shfl_xor(v, 1));
}
template <int NA, int UNR, typename WT> /* UNR: steps whose loads are in flight together (32 for the router's mat-vec:
                                           its own kernel; in the column-split kernel the registers would cost every launch) */
static __device__ void row_fw(const WT *wr, int n, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    float p[NA];
#pragma unroll
    for (int r = 0; r < NA; r++) p[r] = 0.f;
#pragma unroll UNR /* each lane still sums its elements in order */
    for (int i = lane; i < n; i += 32) {
        const float wv = fw_elt<WT>::get(wr, i);
#pragma unroll
        for (int r = 0; r < NA; r++)
            if (r < na) p[r] = __fadd_rn(p[r], __fmul_rn(wv, a.x[(int64_t)(a0 + r) * a.n + i]));
    }
#pragma unroll
    for (int r = 0; r < NA; r++) acc[r] = fw_reduce32(p[r]);
}
/* A float row of weight type t (fw_type) from its bytes. F16 / BF16 rows take 2-byte loads (64 bytes a warp a step),
 * at most 16 steps in flight (32, as the router's F32 rows take, cost mm_kernel_rows 34 registers). */
template <int NA, int UNR = 8>
static __device__ __forceinline__ void row_f32(int t, const uint8_t *wr, int n, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    constexpr int U16 = UNR >= 16 ? 16 : 2 * UNR;
    if (t == GGML_TYPE_F16) row_fw<NA, U16>((const f16w *)wr, n, a, a0, na, acc, lane);
    else if (t == GGML_TYPE_BF16) row_fw<NA, U16>((const bf16w *)wr, n, a, a0, na, acc, lane);
    else row_fw<NA, UNR>((const float *)wr, n, a, a0, na, acc, lane);
}

/* The segment of launch row g (segments in order of row0). */
static __device__ __forceinline__ int mv_seg_row(const struct cu_mm_args &P, int g) {
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_MM_MAX_SEG; i++)
        if (i < P.n_seg && g >= P.seg[i].row0) si = i;
    return si;
}
/* Row `row`'s outputs for activation rows a0 .. a0 + na - 1 (lane 0): the bias, the store, the residual add. */
static __device__ __forceinline__ void mm_row_out(const cu_mm_seg &S, int row, int a0, int na, const float *acc, int lane) {
    if (lane == 0)
        for (int r = 0; r < na; r++) {
            float y = acc[r];
            if (S.bias) y = __fadd_rn(y, S.bias[row]);
            S.y[(int64_t)(a0 + r) * S.ld_y + row] = y;
            if (S.res) S.res[(int64_t)(a0 + r) * S.ld_y + row] = __fadd_rn(S.res[(int64_t)(a0 + r) * S.ld_y + row], y);
        }
}

template <int NA>
static __device__ __forceinline__ void mm_row(const struct cu_mm_args &P, const cu_mm_seg &S, int row, int a0, int na, int lane) {
    const uint8_t *wr = S.w + mv_woff((size_t)row * S.stride, S.stride, S.n_rows);
    float acc[NA];
#pragma unroll
    for (int r = 0; r < NA; r++) acc[r] = 0.f;
    const int n = (int)P.a.n;
    switch (S.type) {
    case GGML_TYPE_Q4_K: row_q4_K<NA>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q6_K: row_q6_K<NA>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q8_0: row_q8_0<NA>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q5_K: row_q5_K<NA>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_IQ4_XS: row_iq4_xs<NA>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q2_K: row_q23_K<NA, false>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q3_K: row_q23_K<NA, true>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q4_0: row_q45_0<NA, 0>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q5_0: row_q45_0<NA, 1>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_IQ4_NL: row_q45_0<NA, 2>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q4_1: row_q45_0<NA, 3>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q5_1: row_q45_0<NA, 4>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_MXFP4: row_q45_0<NA, 5>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16: row_f32<NA, NA == 1 ? 32 : 8>(S.type, wr, n, P.a, a0, na, acc, lane); break;
    default: break;
    }
    if (!fw_type(S.type))
#pragma unroll
        for (int r = 0; r < NA; r++) acc[r] = group32_sum(acc[r]);
    mm_row_out(S, row, a0, na, acc, lane);
}

/* ---- decode: tiles of MM_TR consecutive rows per warp ----
 * The (row, super-block) units of a tile are numbered row-major and dealt to the warp's lane groups, so
 * no lane idles on rows whose super-block count is not a multiple of the groups per step (2560-wide rows
 * have 10), and the loads of a step stay contiguous. Each lane keeps one float sum per row of the tile. */
#define MM_TR 4

/* Lines of [p, p + bytes) into L2, lane i of n taking every n-th 128-byte line (weights only: see gpu_pdl). */
static __device__ __forceinline__ void prefetch_rows(const uint8_t *p, uint64_t bytes, int i, int n) {
    for (uint64_t off = 128 * (uint64_t)i; off < bytes; off += 128 * (uint64_t)n) gpu_prefetch_l2(p + off);
}

static __device__ __forceinline__ void acc_add(float *acc, int rl, float v) {
    if (rl == 0) acc[0] += v;
    else if (rl == 1) acc[1] += v;
    else if (rl == 2) acc[2] += v;
    else acc[3] += v;
}

static __device__ void tile_q4_K(const uint8_t *w0, uint64_t stride, int rows, int n_sb, const cu_act_view &a, float *acc, int lane, int gb, int gs) {
    const int g = lane >> 2, c = lane & 3;
    const int U = rows * n_sb, n_steps = U > gb ? (U - gb + gs - 1) / gs : 0;
    const size_t sc_off = k4_sc_off(n_sb), dm_off = k4_dm_off(n_sb);
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL4) {
        uint4 q0[MM_UNROLL4], q1[MM_UNROLL4];
        uint32_t sw[MM_UNROLL4][3], dm[MM_UNROLL4];
        int rl[MM_UNROLL4], sbs[MM_UNROLL4];
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int f = gs * (st0 + u) + gb + g;
            rl[u] = f / n_sb;
            sbs[u] = f - rl[u] * n_sb;
            if (f < U) {
                const uint8_t *wr = w0 + (size_t)rl[u] * stride;
                const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sbs[u] + 32 * c);
                q0[u] = gpu_ldg(qp);
                q1[u] = gpu_ldg(qp + 1);
                const uint32_t *sp = (const uint32_t *)(wr + sc_off + 12 * (size_t)sbs[u]);
                sw[u][0] = gpu_ldg(sp); sw[u][1] = gpu_ldg(sp + 1); sw[u][2] = gpu_ldg(sp + 2);
                dm[u] = gpu_ldg((const uint32_t *)(wr + dm_off + 4 * (size_t)sbs[u]));
            } else {
                q0[u] = q1[u] = make_uint4(0, 0, 0, 0); sw[u][0] = sw[u][1] = sw[u][2] = 0; dm[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            if (st0 + u >= n_steps) break;
            const int f = gs * (st0 + u) + gb + g, sb = sbs[u];
            const bool ok = f < U;
            int I = 0, M = 0;
            float da = 0.f;
            if (ok) {
                int sc0, m0, sc1, m1;
                k4_scale_min(2 * c, sw[u][0], sw[u][1], sw[u][2], sc0, m0);
                k4_scale_min(2 * c + 1, sw[u][0], sw[u][1], sw[u][2], sc1, m1);
                const uint32_t qw[8] = {q0[u].x, q0[u].y, q0[u].z, q0[u].w, q1[u].x, q1[u].y, q1[u].z, q1[u].w};
                const int8_t *aq = a.k_qs + (int64_t)sb * QK_K + 64 * c;
                int al[8], ah[8];
                ld_w8(aq, al);
                ld_w8(aq + 32, ah);
                int slo = 0, shi = 0;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    slo = dot4_i8((int)(qw[k] & 0x0F0F0F0Fu), al[k], slo);
                    shi = dot4_i8((int)((qw[k] >> 4) & 0x0F0F0F0Fu), ah[k], shi);
                }
                const int2 bs = *(const int2 *)(a.k_bs + (int64_t)sb * 16 + 4 * c);
                I = sc0 * slo + sc1 * shi;
                M = m0 * ((int)(int16_t)(bs.x & 0xffff) + (int)(int16_t)(bs.x >> 16)) +
                    m1 * ((int)(int16_t)(bs.y & 0xffff) + (int)(int16_t)(bs.y >> 16));
                da = a.k_d[sb];
            }
            I += shfl_xor(I, 1); I += shfl_xor(I, 2);
            M += shfl_xor(M, 1); M += shfl_xor(M, 2);
            if (c == 0 && ok)
                acc_add(acc, rl[u], term_kmin(da, fp16_to_fp32((uint16_t)(dm[u] & 0xffff)), fp16_to_fp32((uint16_t)(dm[u] >> 16)), I, M));
        }
    }
}

static __device__ void tile_q6_K(const uint8_t *w0, uint64_t stride, int rows, int n_sb, const cu_act_view &a, float *acc, int lane, int gb, int gs) {
    const int g = lane >> 2, h = (lane >> 1) & 1, k = lane & 1;
    const int U = rows * n_sb, n_steps = U > gb ? (U - gb + gs - 1) / gs : 0;
    const size_t qh_off = 128 * (size_t)n_sb, sc_off = 192 * (size_t)n_sb, d_off = 208 * (size_t)n_sb;
    const int sh_lo = 2 * k, sh_hi = 4 + 2 * k;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL) {
        uint4 l0[MM_UNROLL], l1[MM_UNROLL], hh0[MM_UNROLL], hh1[MM_UNROLL];
        uint32_t scw[MM_UNROLL];
        uint16_t dd[MM_UNROLL];
        int rl[MM_UNROLL], sbs[MM_UNROLL];
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int f = gs * (st0 + u) + gb + g;
            rl[u] = f / n_sb;
            sbs[u] = f - rl[u] * n_sb;
            if (f < U) {
                const uint8_t *wr = w0 + (size_t)rl[u] * stride;
                const size_t sb = (size_t)sbs[u];
                const uint4 *lp = (const uint4 *)(wr + 128 * sb + 64 * h + 32 * k);
                const uint4 *hp = (const uint4 *)(wr + qh_off + 64 * sb + 32 * h);
                l0[u] = gpu_ldg(lp); l1[u] = gpu_ldg(lp + 1);
                hh0[u] = gpu_ldg(hp); hh1[u] = gpu_ldg(hp + 1);
                const uint16_t *sp = (const uint16_t *)(wr + sc_off + 16 * sb + 8 * h + 2 * k);
                scw[u] = (uint32_t)gpu_ldg(sp) | ((uint32_t)gpu_ldg(sp + 2) << 16);
                dd[u] = gpu_ldg((const unsigned short *)(wr + d_off + 2 * sb));
            } else {
                l0[u] = l1[u] = hh0[u] = hh1[u] = make_uint4(0, 0, 0, 0); scw[u] = 0; dd[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            if (st0 + u >= n_steps) break;
            const int f = gs * (st0 + u) + gb + g, sb = sbs[u];
            const bool ok = f < U;
            int I = 0;
            float da = 0.f;
            if (ok) {
                const uint32_t L[8] = {l0[u].x, l0[u].y, l0[u].z, l0[u].w, l1[u].x, l1[u].y, l1[u].z, l1[u].w};
                const uint32_t H[8] = {hh0[u].x, hh0[u].y, hh0[u].z, hh0[u].w, hh1[u].x, hh1[u].y, hh1[u].z, hh1[u].w};
                const int8_t *aq = a.k_qs + (int64_t)sb * QK_K + 128 * h + 32 * k;
                int al[8], ah[8];
                ld_w8(aq, al);
                ld_w8(aq + 64, ah);
                int sl0 = 0, sl1 = 0, sh0 = 0, sh1 = 0;
#pragma unroll
                for (int w = 0; w < 8; w++) {
                    const uint32_t lo = (L[w] & 0x0F0F0F0Fu) | (((H[w] >> sh_lo) & 0x03030303u) << 4);
                    const uint32_t hi = ((L[w] >> 4) & 0x0F0F0F0Fu) | (((H[w] >> sh_hi) & 0x03030303u) << 4);
                    const int vlo = (int)(((lo | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
                    const int vhi = (int)(((hi | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
                    if (w < 4) { sl0 = dot4_i8(vlo, al[w], sl0); sh0 = dot4_i8(vhi, ah[w], sh0); }
                    else { sl1 = dot4_i8(vlo, al[w], sl1); sh1 = dot4_i8(vhi, ah[w], sh1); }
                }
                I = (int)(int8_t)(scw[u] & 0xff) * sl0 + (int)(int8_t)((scw[u] >> 8) & 0xff) * sl1 +
                    (int)(int8_t)((scw[u] >> 16) & 0xff) * sh0 + (int)(int8_t)(scw[u] >> 24) * sh1;
                da = a.k_d[sb];
            }
            I += shfl_xor(I, 1); I += shfl_xor(I, 2);
            if ((lane & 3) == 0 && ok) acc_add(acc, rl[u], term_k(da, fp16_to_fp32(dd[u]), I));
        }
    }
}

static __device__ void tile_q8_0(const uint8_t *w0, uint64_t stride, int rows, int n_b, const cu_act_view &a, float *acc, int lane, int gb, int gs) {
    const int U = rows * n_b, n_steps = U > gb ? (U - gb + gs - 1) / gs : 0;
    const size_t d_off = 32 * (size_t)n_b;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL4) {
        uint4 q0[MM_UNROLL4], q1[MM_UNROLL4];
        uint16_t dw[MM_UNROLL4];
        int rl[MM_UNROLL4], bs[MM_UNROLL4];
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int f = gs * (st0 + u) + gb + lane;
            rl[u] = f / n_b;
            bs[u] = f - rl[u] * n_b;
            if (f < U) {
                const uint8_t *wr = w0 + (size_t)rl[u] * stride;
                const uint4 *qp = (const uint4 *)(wr + 32 * (size_t)bs[u]);
                q0[u] = gpu_ldg(qp); q1[u] = gpu_ldg(qp + 1);
                dw[u] = gpu_ldg((const unsigned short *)(wr + d_off + 2 * (size_t)bs[u]));
            } else { q0[u] = q1[u] = make_uint4(0, 0, 0, 0); dw[u] = 0; }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL4; u++) {
            const int f = gs * (st0 + u) + gb + lane, b = bs[u];
            if (f >= U) continue;
            const int4 x0 = *(const int4 *)(a.o_qs + 32 * (int64_t)b), x1 = *(const int4 *)(a.o_qs + 32 * (int64_t)b + 16);
            int I = 0;
            I = dot4_i8((int)q0[u].x, x0.x, I); I = dot4_i8((int)q0[u].y, x0.y, I);
            I = dot4_i8((int)q0[u].z, x0.z, I); I = dot4_i8((int)q0[u].w, x0.w, I);
            I = dot4_i8((int)q1[u].x, x1.x, I); I = dot4_i8((int)q1[u].y, x1.y, I);
            I = dot4_i8((int)q1[u].z, x1.z, I); I = dot4_i8((int)q1[u].w, x1.w, I);
            acc_add(acc, rl[u], __fmul_rn(__fmul_rn(fp16_to_fp32(dw[u]), fp16_to_fp32(a.o_d[b])), (float)I));
        }
    }
}

/* Decode (one activation row), few rows: one warp per row, rows walked with a stride of the warp count. */
static __global__ void __launch_bounds__(32 * CU_MM_WARPS) mm_kernel_rows(const struct cu_mm_args P) {
    const int lane = threadIdx.x % 32;
    const int n_warps = gridDim.x * CU_MM_WARPS;
    {   /* the first row's weights into L2 while the kernel before still runs */
        const int g = blockIdx.x * CU_MM_WARPS + threadIdx.x / 32;
        if (g < P.total_rows) {
            const int si = mv_seg_row(P, g);
            prefetch_rows(P.seg[si].w + mv_woff((size_t)(g - P.seg[si].row0) * P.seg[si].stride, P.seg[si].stride, P.seg[si].n_rows), P.seg[si].stride, lane, 32);
        }
    }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    for (int g = blockIdx.x * CU_MM_WARPS + threadIdx.x / 32; g < P.total_rows; g += n_warps) {
        const int si = mv_seg_row(P, g);
        mm_row<1>(P, P.seg[si], g - P.seg[si].row0, 0, 1, lane);
    }
}

/* ---- one activation row of F32 rows (the MoE router and the shared expert's gate; cu_mm_cfg.f32r) ----
 * Without it (cu_mm_cfg.f32r 0, and on HIP) mm_kernel_rows takes these launches (fewer than rows[0] rows, ks[0] 0)
 * through mm_row's row_fw with 32 loads in flight a lane: at 2,048 columns a lane's 64 weights and 64 activation values
 * are two L2 round trips in series after the dependency wait (the weights were asked into L2 before it), and the router
 * sits between the norm + quantize and the expert launches of every MoE layer. Here each warp holds its row's F32R_K
 * elements a lane in registers, loaded before the wait (weights are never written), and after the wait asks for the
 * whole activation at once: one round trip. A lane sums its elements in order and the butterfly is row_fw's, so the
 * outputs are mm_kernel_rows' bits. Rows past the grid's warps (not in the router's launches) are loaded after the
 * previous row's sum. On by default on CUDA (measured: BENCHMARKS "The MoE router's rows in registers"). */
#define F32R_K 64
uint64_t cu_f32r_launches;
extern "C" uint64_t backend_cuda_f32r_launches(void) { return cu_f32r_launches; }
#if !defined(VLLMC_HIP) /* (gfx11: a row's 64 words a lane and the activation's would pass LLVM 15's 128 VGPRs) */
/* Row r's F32R_K elements of the lane (lane + 32 k) into w (mm_kernel_f32r). */
static __device__ __forceinline__ void f32r_load(const struct cu_mm_args &P, int r, int lane, int n, float (&w)[F32R_K]) {
    const cu_mm_seg &S = P.seg[mv_seg_row(P, r)];
    const float *wr = (const float *)(S.w + mv_woff((size_t)(r - S.row0) * S.stride, S.stride, S.n_rows));
#pragma unroll
    for (int k = 0; k < F32R_K; k++) w[k] = lane + 32 * k < n ? gpu_ldg(wr + lane + 32 * k) : 0.f;
}
static __global__ void __launch_bounds__(32 * CU_MM_WARPS) mm_kernel_f32r(const struct cu_mm_args P) {
    const int lane = threadIdx.x % 32, n = (int)P.a.n, n_warps = (int)gridDim.x * CU_MM_WARPS;
    int g = (int)blockIdx.x * CU_MM_WARPS + (int)threadIdx.x / 32;
    float w[F32R_K];
    if (g < P.total_rows) f32r_load(P, g, lane, n, w);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    if (g >= P.total_rows) return;
    float x[F32R_K];
#pragma unroll
    for (int k = 0; k < F32R_K; k++) x[k] = lane + 32 * k < n ? P.a.x[lane + 32 * k] : 0.f;
    for (;;) {
        float v = 0.f;
#pragma unroll
        for (int k = 0; k < F32R_K; k++)
            if (lane + 32 * k < n) v = __fadd_rn(v, __fmul_rn(w[k], x[k]));
        v = fw_reduce32(v);
        const cu_mm_seg &S = P.seg[mv_seg_row(P, g)];
        mm_row_out(S, g - S.row0, 0, 1, &v, lane);
        g += n_warps;
        if (g >= P.total_rows) break;
        f32r_load(P, g, lane, n, w);
    }
}
/* Whether launch `a` can take mm_kernel_f32r: F32 segments only, one activation row of at most 32 * F32R_K columns
 * (f32), fewer than rows[0] rows (mm_kernel_rows' launches), nothing in the epilogue but a bias and a residual. */
static bool mm_f32r_ok(const struct cu_mm_args &a) {
    if (!cu_mm_cfg.f32r || a.n_act != 1 || !a.a.x || a.a.n < 1 || a.a.n > 32 * F32R_K || a.conv.on || a.nq.on ||
        a.total_rows >= cu_mm_cfg.rows[0])
        return false;
    for (int i = 0; i < a.n_seg; i++)
        if (a.seg[i].type != GGML_TYPE_F32) return false;
    return true;
}
#endif

/* Decode (one activation row), many rows (the LM head): a grid the size of what the GPU holds at once;
 * each warp walks the row tiles of all segments with a stride of the total warp count (no tail wave). 32-lane groups throughout. */
static __global__ void __launch_bounds__(32 * CU_MM_WARPS) mm_kernel_1(const struct cu_mm_args P) {
    const int lane = threadIdx.x % 32;
    const int n_warps = gridDim.x * CU_MM_WARPS;
    {   /* the first tile's weights into L2 while the kernel before still runs */
        const int gt = blockIdx.x * CU_MM_WARPS + threadIdx.x / 32;
        if (gt < P.total_tiles) {
            int si = 0;
#pragma unroll
            for (int i = 1; i < CU_MM_MAX_SEG; i++)
                if (i < P.n_seg && gt >= P.seg[i].tile0) si = i;
            const cu_mm_seg &S = P.seg[si];
            const int r0 = (gt - S.tile0) * MM_TR;
            prefetch_rows(S.w + (size_t)r0 * S.stride, (uint64_t)min(MM_TR, S.n_rows - r0) * S.stride, lane, 32);
        }
    }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    for (int gt = blockIdx.x * CU_MM_WARPS + threadIdx.x / 32; gt < P.total_tiles; gt += n_warps) {
        int si = 0;
#pragma unroll
        for (int i = 1; i < CU_MM_MAX_SEG; i++)
            if (i < P.n_seg && gt >= P.seg[i].tile0) si = i;
        const cu_mm_seg &S = P.seg[si];
        const int r0 = (gt - S.tile0) * MM_TR, rows = min(MM_TR, S.n_rows - r0);
        const uint8_t *w0 = S.w + (size_t)r0 * S.stride;
        const int n = (int)P.a.n;
        float acc[MM_TR] = {0.f, 0.f, 0.f, 0.f};
        if (S.type == GGML_TYPE_F32) {
            for (int r = 0; r < rows; r++) {
                float v[1] = {0.f};
                row_fw<1, 8>((const float *)(w0 + (size_t)r * S.stride), n, P.a, 0, 1, v, lane);
                acc_add(acc, r, v[0]);
            }
        } else {
            if (S.type == GGML_TYPE_Q4_K) tile_q4_K(w0, S.stride, rows, n / QK_K, P.a, acc, lane, 0, 8);
            else if (S.type == GGML_TYPE_Q6_K) tile_q6_K(w0, S.stride, rows, n / QK_K, P.a, acc, lane, 0, 8);
            else if (S.type == GGML_TYPE_Q8_0) tile_q8_0(w0, S.stride, rows, n / 32, P.a, acc, lane, 0, 32);
#pragma unroll
            for (int r = 0; r < MM_TR; r++) acc[r] = group32_sum(acc[r]);
        }
        if (lane < rows) {
            const float y = lane == 0 ? acc[0] : lane == 1 ? acc[1] : lane == 2 ? acc[2] : acc[3];
            const int row = r0 + lane;
            const float yb = S.bias ? __fadd_rn(y, S.bias[row]) : y;
            S.y[row] = yb;
            if (S.res) S.res[row] = __fadd_rn(S.res[row], yb);
        }
    }
}

/* Decode, split-K: CTA-sized groups of CU_MM_WARPS / KS tiles of tr rows (tile0 / total_tiles counted in
 * tiles of tr rows); the KS warps of a tile take its (row, super-block) units in turns of one warp step
 * (1 KB of quants) each, reduce their lanes, and the tile's first warp adds the KS partial sums in warp
 * order. Group g runs on CTA g, or (persistent grid, fewer CTAs than groups) CTAs step over the groups by
 * the grid size and prefetch the next group's weights into L2 before computing the current one. Before
 * the dependency wait every warp prefetches its share of its first tile's weights into L2. */
template <int KS>
static __device__ __forceinline__ const cu_mm_seg &split_tile(const struct cu_mm_args &P, int grp, int wid, int tr, int &gt,
                                                              int &r0, int &rows) {
    gt = grp * (CU_MM_WARPS / KS) + wid / KS;
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_MM_MAX_SEG; i++)
        if (i < P.n_seg && gt >= P.seg[i].tile0) si = i;
    const cu_mm_seg &S = P.seg[si];
    r0 = (gt - S.tile0) * tr;
    rows = gt < P.total_tiles ? min(tr, S.n_rows - r0) : 0;
    return S;
}

#if defined(VLLMC_HIP)
#define MM_SPLIT_BOUNDS __launch_bounds__(32 * CU_MM_WARPS)
#else /* 5 CTAs an SM (<= 102 registers): the persistent loop would otherwise take 128 registers for ks 2 and 4 */
#define MM_SPLIT_BOUNDS __launch_bounds__(32 * CU_MM_WARPS, 5)
#endif
template <int KS>
static __global__ void MM_SPLIT_BOUNDS mm_kernel_split(const struct cu_mm_args P, int tr) {
    __shared__ float part[CU_MM_WARPS][MM_TR];
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, wk = wid % KS;
    const int n_grp = (P.total_tiles + CU_MM_WARPS / KS - 1) / (CU_MM_WARPS / KS);
    {
        int gt, r0, rows;
        const cu_mm_seg &S = split_tile<KS>(P, blockIdx.x, wid, tr, gt, r0, rows);
        if (rows > 0) prefetch_rows(S.w + (size_t)r0 * S.stride, (uint64_t)rows * S.stride, wk * 32 + lane, KS * 32);
    }
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int n = (int)P.a.n;
    for (int grp = blockIdx.x; grp < n_grp; grp += gridDim.x) {
        if (grp + (int)gridDim.x < n_grp) { /* the next group's weights while this one computes */
            int gt, r0, rows;
            const cu_mm_seg &S = split_tile<KS>(P, grp + gridDim.x, wid, tr, gt, r0, rows);
            if (rows > 0) prefetch_rows(S.w + (size_t)r0 * S.stride, (uint64_t)rows * S.stride, wk * 32 + lane, KS * 32);
        }
        int gt, r0, rows;
        const cu_mm_seg &S = split_tile<KS>(P, grp, wid, tr, gt, r0, rows);
        const uint8_t *w0 = S.w + (size_t)r0 * S.stride;
        float acc[MM_TR] = {0.f, 0.f, 0.f, 0.f};
        if (rows > 0) {
            if (S.type == GGML_TYPE_F32) {
                if (wk == 0)
                    for (int r = 0; r < rows; r++) {
                        float v[1] = {0.f};
                        row_fw<1, 8>((const float *)(w0 + (size_t)r * S.stride), n, P.a, 0, 1, v, lane);
                        acc_add(acc, r, v[0]);
                    }
            } else {
                if (S.type == GGML_TYPE_Q4_K) tile_q4_K(w0, S.stride, rows, n / QK_K, P.a, acc, lane, 8 * wk, 8 * KS);
                else if (S.type == GGML_TYPE_Q6_K) tile_q6_K(w0, S.stride, rows, n / QK_K, P.a, acc, lane, 8 * wk, 8 * KS);
                else if (S.type == GGML_TYPE_Q8_0) tile_q8_0(w0, S.stride, rows, n / 32, P.a, acc, lane, 32 * wk, 32 * KS);
#pragma unroll
                for (int r = 0; r < MM_TR; r++) acc[r] = group32_sum(acc[r]);
            }
        }
        if (KS > 1) {
            __syncthreads(); /* the last group's partial sums have been read */
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < MM_TR; r++) part[wid][r] = acc[r];
            __syncthreads();
        }
        if (wk == 0 && lane < rows) {
            float y = lane == 0 ? acc[0] : lane == 1 ? acc[1] : lane == 2 ? acc[2] : acc[3];
            if (S.type != GGML_TYPE_F32)
#pragma unroll
                for (int k = 1; k < KS; k++) y = __fadd_rn(y, part[wid + k][lane]);
            const int row = r0 + lane;
            if (S.bias) y = __fadd_rn(y, S.bias[row]);
            S.y[row] = y;
            if (S.res) S.res[row] = __fadd_rn(S.res[row], y);
        }
    }
}

/* Decode, column split (Q4_K / Q6_K rows, Q8_0 and F32 segments beside them): the W warps of a CTA split a row's
 * super-blocks, SBW each; lane (rr, sbl, c) owns 64-element chunk c of super-block wid * SBW + sbl and takes
 * row rr of each group of RW = 8 / SBW rows. Its chunk of the activation (64 quants, their 16-element sums, the
 * scale) is loaded once and kept in registers for all U row groups of the CTA, whose weights it loads into
 * registers before the dependency wait (weights are never written by a kernel). The integer sums of a
 * super-block are reduced over its 4 lanes and form the reference's float term; the SBW terms of a warp are
 * added by shuffles, the W warp partials in warp order through shared memory. Per 32 quant bytes a lane
 * issues ~45 instructions where the tile kernels issue ~150 (ncu: those are held by issue and latency at
 * ~25% occupancy, not by DRAM). Q8_0 segments (the GDN's beta / alpha rows) go through the tile function,
 * F32 ones through row_fw, a 4-row tile per warp. U (2 or 4: cu_mm_cfg.cols) row groups a CTA. */

/* Lane c's scale and min of sub-blocks 2c and 2c+1 from the 12 packed scale bytes (w0: bytes 0-3, w1: 4-7,
 * w2: 8-11), as the bytes (sc0, sc1, m0, m1) of the result; the selectors and masks depend on c only. */
struct k4_sel {
    uint32_t selP, selQ, mP, mP2, mQ1, mQ2;
};
static __device__ __forceinline__ k4_sel k4_sel_make(int c) {
    k4_sel k;
    if (c < 2) { /* bytes 2c, 2c+1 (scales) and 2c+4, 2c+5 (mins), low 6 bits */
        k.selP = (uint32_t)((2 * c) | ((2 * c + 1) << 4) | ((2 * c + 4) << 8) | ((2 * c + 5) << 12));
        k.selQ = 0;
        k.mP = 0x3F3F3F3Fu; k.mP2 = 0; k.mQ1 = 0; k.mQ2 = 0;
    } else { /* low 4 bits from bytes 2c+4, 2c+5 (scales: low nibble, mins: high nibble), top 2 bits from the
                top of bytes 2c-4, 2c-3 (scales) and 2c, 2c+1 (mins) */
        k.selP = (uint32_t)((2 * c - 4) | ((2 * c - 3) << 4) | ((2 * c) << 8) | ((2 * c + 1) << 12));
        k.selQ = (uint32_t)((2 * c - 4) | ((2 * c - 3) << 4) | ((2 * c - 4) << 8) | ((2 * c - 3) << 12));
        k.mP = 0; k.mP2 = 0x30303030u; k.mQ1 = 0x00000F0Fu; k.mQ2 = 0x0F0F0000u;
    }
    return k;
}
static __device__ __forceinline__ uint32_t k4_scales(const k4_sel &k, uint32_t w0, uint32_t w1, uint32_t w2) {
    const uint32_t P = __byte_perm(w0, w1, k.selP), Q = __byte_perm(w2, 0, k.selQ);
    return (P & k.mP) | ((P >> 2) & k.mP2) | (Q & k.mQ1) | ((Q >> 4) & k.mQ2);
}

static __device__ __forceinline__ cu_act_view act_row(cu_act_view a, int64_t r) {
    const int64_t n = a.n;
    if (a.x) a.x += r * n;
    if (a.k_qs) { a.k_qs += r * n; a.k_d += r * (n / QK_K); a.k_bs += r * (n / 16); }
    if (a.o_qs) { a.o_qs += r * n; a.o_d += r * (n / 32); }
    return a; /* (o_s stays: its readers, the Q4_1 / Q5_1 row kernels, index it by the launch's activation row) */
}

/* One lane's share of a weight row for the column-split kernels: Q4_K chunk c (32 quant bytes, the 12 scale
 * bytes, d / dmin) or Q6_K (h, k) = (c >> 1, c & 1) (32 ql bytes, the 32 qh bytes of half h, 4 scales, d). */
struct k4_w { uint4 q0, q1; uint32_t s0, s1, s2, dm; };
struct q6_w { uint4 l0, l1, h0, h1; uint32_t sc; uint32_t d; };
/* SM: the row is in shared memory (plain loads; else read-only global loads) */
template <bool SM, typename T> static __device__ __forceinline__ T ld_w(const T *p) { return SM ? *p : gpu_ldg(p); }
template <bool SM = false>
static __device__ __forceinline__ k4_w k4_load(const uint8_t *wr, int n_sb, int sb, int c) {
    const size_t sc_off = k4_sc_off(n_sb), dm_off = k4_dm_off(n_sb);
    const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c);
    const uint32_t *sp = (const uint32_t *)(wr + sc_off + 12 * (size_t)sb);
    return k4_w{ld_w<SM>(qp), ld_w<SM>(qp + 1), ld_w<SM>(sp), ld_w<SM>(sp + 1), ld_w<SM>(sp + 2),
                ld_w<SM>((const uint32_t *)(wr + dm_off + 4 * (size_t)sb))};
}
template <bool SM = false>
static __device__ __forceinline__ q6_w q6_load(const uint8_t *wr, int n_sb, int sb, int c) {
    const int h = c >> 1, k = c & 1;
    const uint4 *lp = (const uint4 *)(wr + 128 * (size_t)sb + 64 * h + 32 * k);
    const uint4 *hp = (const uint4 *)(wr + 128 * (size_t)n_sb + 64 * (size_t)sb + 32 * h);
    const uint16_t *sp = (const uint16_t *)(wr + 192 * (size_t)n_sb + 16 * (size_t)sb + 8 * h + 2 * k);
    return q6_w{ld_w<SM>(lp), ld_w<SM>(lp + 1), ld_w<SM>(hp), ld_w<SM>(hp + 1),
                (uint32_t)ld_w<SM>(sp) | ((uint32_t)ld_w<SM>(sp + 2) << 16),
                (uint32_t)ld_w<SM>((const unsigned short *)(wr + 208 * (size_t)n_sb + 2 * (size_t)sb))};
}
/* The lane's activation chunk: 64 quants (al: the 32 the low nibbles / first ql half meet, ah: the other 32),
 * the sums the mins (Q4_K) or the -32 offset (Q6_K: 32 x the 16-element sums) need, the scale. */
struct mv_act { int al[8], ah[8], b[4]; float d; };
static __device__ __forceinline__ void mv_act_load(const cu_act_view &a, bool q6, int sb, int c, mv_act &v) {
    const int8_t *aq = a.k_qs + (int64_t)sb * QK_K + (q6 ? 128 * (c >> 1) + 32 * (c & 1) : 64 * c);
    const int off = q6 ? 64 : 32;
    const int4 l0 = *(const int4 *)aq, l1 = *(const int4 *)(aq + 16);
    const int4 h0 = *(const int4 *)(aq + off), h1 = *(const int4 *)(aq + off + 16);
    v.al[0] = l0.x; v.al[1] = l0.y; v.al[2] = l0.z; v.al[3] = l0.w; v.al[4] = l1.x; v.al[5] = l1.y; v.al[6] = l1.z; v.al[7] = l1.w;
    v.ah[0] = h0.x; v.ah[1] = h0.y; v.ah[2] = h0.z; v.ah[3] = h0.w; v.ah[4] = h1.x; v.ah[5] = h1.y; v.ah[6] = h1.z; v.ah[7] = h1.w;
    if (q6) {
        const int16_t *bs = a.k_bs + (int64_t)sb * 16 + 8 * (c >> 1) + 2 * (c & 1);
        v.b[0] = 32 * (int)bs[0]; v.b[1] = 32 * (int)bs[1]; v.b[2] = 32 * (int)bs[4]; v.b[3] = 32 * (int)bs[5];
    } else {
        const int2 bs = *(const int2 *)(a.k_bs + (int64_t)sb * 16 + 4 * c);
        v.b[0] = (int)(int16_t)(bs.x & 0xffff) + (int)(int16_t)(bs.x >> 16);
        v.b[1] = (int)(int16_t)(bs.y & 0xffff) + (int)(int16_t)(bs.y >> 16);
        v.b[2] = v.b[3] = 0;
    }
    v.d = a.k_d[sb];
}
static __device__ __forceinline__ void mv_act_zero(mv_act &v) {
#pragma unroll
    for (int i = 0; i < 8; i++) v.al[i] = v.ah[i] = 0;
    v.b[0] = v.b[1] = v.b[2] = v.b[3] = 0;
    v.d = 0.f;
}
/* The super-block's f16 scales: HW converts by the instruction (gpu_h2f, same value but NaN payloads). Measured per
 * kernel: it sped the MoE column-split kernels and slowed the dense one (94 -> 98 registers), so each call site picks. */
template <bool HW> static __device__ __forceinline__ float sb_h2f(uint16_t h) {
    if (HW) return gpu_h2f(h);
    return fp16_to_fp32(h);
}
/* The super-block's float term from lane c's integer sums of sub-blocks 2c (slo) and 2c + 1 (shi): scaled by their
 * 6-bit scales (and the mins against the activation's sums b0, b1), reduced over the 4 lanes of the super-block,
 * then as the reference forms it (the same in the 4 lanes). Shared by the column-split and tensor-core kernels. */
template <bool HW>
static __device__ __forceinline__ float k4_term_sums(const k4_sel &ks, uint32_t s0, uint32_t s1, uint32_t s2, uint32_t dm, int slo,
                                                     int shi, int b0, int b1, float da) {
    const uint32_t X = k4_scales(ks, s0, s1, s2);
    int I = (int)(X & 0xff) * slo + (int)((X >> 8) & 0xff) * shi;
    int M = (int)((X >> 16) & 0xff) * b0 + (int)(X >> 24) * b1;
    I += shfl_xor(I, 1); I += shfl_xor(I, 2);
    M += shfl_xor(M, 1); M += shfl_xor(M, 2);
    return term_kmin(da, sb_h2f<HW>((uint16_t)(dm & 0xffff)), sb_h2f<HW>((uint16_t)(dm >> 16)), I, M);
}
/* The super-block's float term (the same in its 4 lanes): integer sums over the lane's 64 elements, reduced over
 * the 4 lanes, then as the reference forms it. */
template <bool HW = false>
static __device__ __forceinline__ float k4_term(const k4_w &w, const k4_sel &ks, const mv_act &v) {
    const uint32_t qw[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    int slo = 0, shi = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        slo = dot4_i8((int)(qw[k] & 0x0F0F0F0Fu), v.al[k], slo);
#if defined(VLLMC_HIP)
        shi = dot4_i8((int)((qw[k] >> 4) & 0x0F0F0F0Fu), v.ah[k], shi);
#else /* the high nibbles where they are (16 x the quant, unsigned): one instruction a word fewer; the sum is 16 x the
         same integer, so the shift below is exact */
        shi = dot4_u8s8(qw[k] & 0xF0F0F0F0u, v.ah[k], shi);
#endif
    }
#if !defined(VLLMC_HIP)
    shi >>= 4;
#endif
    return k4_term_sums<HW>(ks, w.s0, w.s1, w.s2, w.dm, slo, shi, v.b[0], v.b[1], v.d);
}
/* The Q6_K super-block's float term from the lane's four 16-element integer sums (unsigned quants: the -32 comes from
 * the activation's sums b), scaled, reduced over the 4 lanes, as the reference forms it. Shared by the column-split
 * and tensor-core kernels. */
template <bool HW>
static __device__ __forceinline__ float q6_term_sums(uint32_t sw, uint32_t dw, int sl0, int sl1, int sh0, int sh1, const int *b, float da) {
    int I = (int)(int8_t)(sw & 0xff) * (sl0 - b[0]) + (int)(int8_t)((sw >> 8) & 0xff) * (sl1 - b[1]) +
            (int)(int8_t)((sw >> 16) & 0xff) * (sh0 - b[2]) + (int)(int8_t)(sw >> 24) * (sh1 - b[3]);
    I += shfl_xor(I, 1); I += shfl_xor(I, 2);
    return term_k(da, sb_h2f<HW>((uint16_t)dw), I);
}
template <bool HW = false>
static __device__ __forceinline__ float q6_term(const q6_w &w, int k, const mv_act &v) {
    const uint32_t L[8] = {w.l0.x, w.l0.y, w.l0.z, w.l0.w, w.l1.x, w.l1.y, w.l1.z, w.l1.w};
    const uint32_t H[8] = {w.h0.x, w.h0.y, w.h0.z, w.h0.w, w.h1.x, w.h1.y, w.h1.z, w.h1.w};
    const int shl = 4 - 2 * k, shr = 2 * k;
    int sl0 = 0, sl1 = 0, sh0 = 0, sh1 = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) { /* unsigned 6-bit quants (0..63); the -32 comes from the activation's sums */
        const int lo = (int)((L[i] & 0x0F0F0F0Fu) | ((H[i] << shl) & 0x30303030u));
        const int hi = (int)(((L[i] >> 4) & 0x0F0F0F0Fu) | ((H[i] >> shr) & 0x30303030u));
        if (i < 4) { sl0 = dot4_i8(lo, v.al[i], sl0); sh0 = dot4_i8(hi, v.ah[i], sh0); }
        else { sl1 = dot4_i8(lo, v.al[i], sl1); sh1 = dot4_i8(hi, v.ah[i], sh1); }
    }
    return q6_term_sums<HW>(w.sc, w.d, sl0, sl1, sh0, sh1, v.b, v.d);
}

/* Q4_K with the super-block's scale words shared by its 4 lanes (the column-split kernel): lane c holds word c of (the
 * 12 scale bytes, d / dmin), one 4-byte load where each lane loaded all four, and the term takes the other three by
 * shuffles. 9 registers a row and lane in place of 12, so the same registers hold more rows in flight. The same values
 * reach k4_term, so the same bits. The 4 lanes of a super-block always hold the same row (or all zeros). */
struct k4s_w { uint4 q0, q1; uint32_t sw; };
/* SH: the row is in shared memory (plain loads; mm_kernel_mmx's second tile), else global (read-only path) */
template <bool SH = false>
static __device__ __forceinline__ k4s_w k4s_load(const uint8_t *wr, int n_sb, int sb, int c) {
    const size_t sc_off = k4_sc_off(n_sb), dm_off = k4_dm_off(n_sb);
    const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c);
    const uint32_t *wp = (const uint32_t *)(wr + (c < 3 ? sc_off + 12 * (size_t)sb + 4 * (size_t)c : dm_off + 4 * (size_t)sb));
    if constexpr (SH) return k4s_w{qp[0], qp[1], *wp};
    else return k4s_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg(wp)};
}
static __device__ __forceinline__ float k4s_term(const k4s_w &w, const k4_sel &ks, const mv_act &v, int lane) {
    const int b = lane & ~3;
    const k4_w f{w.q0, w.q1, shfl_idx(w.sw, b), shfl_idx(w.sw, b + 1), shfl_idx(w.sw, b + 2), shfl_idx(w.sw, b + 3)};
    return k4_term<true>(f, ks, v);
}
/* Q8_0 / F32 segments of a column-split launch: a 4-row tile per warp (tile_q8_0, or row_fw in the
 * reference's order), activation rows a0 .. a0 + na - 1. */
static __device__ void mv_other_rows(const struct cu_mm_args &P, const cu_mm_seg &S, const uint8_t *wb, int r0, int rows, int a0, int na,
                                     int lane, int wid, int W) {
    const int n = (int)P.a.n;
    for (int t = wid; MM_TR * t < rows; t += W) {
        const int tr = min(MM_TR, rows - MM_TR * t);
        const uint8_t *w0 = wb + (size_t)(MM_TR * t) * S.stride;
        for (int r = 0; r < na; r++) {
            const cu_act_view a = act_row(P.a, a0 + r);
            float acc[MM_TR] = {0.f, 0.f, 0.f, 0.f};
            if (S.type == GGML_TYPE_F32) {
                for (int i = 0; i < tr; i++) {
                    float v[1] = {0.f};
                    row_fw<1, 8>((const float *)(w0 + (size_t)i * S.stride), n, a, 0, 1, v, lane);
                    acc_add(acc, i, v[0]);
                }
            } else {
                tile_q8_0(w0, S.stride, tr, n / 32, a, acc, lane, 0, 32);
#pragma unroll
                for (int i = 0; i < MM_TR; i++) acc[i] = group32_sum(acc[i]);
            }
            if (lane < tr) {
                float y = lane == 0 ? acc[0] : lane == 1 ? acc[1] : lane == 2 ? acc[2] : acc[3];
                const int64_t o = (int64_t)(a0 + r) * S.ld_y + r0 + MM_TR * t + lane;
                if (S.bias) y = __fadd_rn(y, S.bias[r0 + MM_TR * t + lane]);
                S.y[o] = y;
                if (S.res) S.res[o] = __fadd_rn(S.res[o], y);
            }
        }
    }
}

/* The SBW super-block terms of a warp (lanes 4 apart) added, one lane per weight row into shared memory. */
template <int SBW>
static __device__ __forceinline__ void mv_warp_part(float v, float *dst, int lane) {
#pragma unroll
    for (int o = 4; o < 4 * SBW; o <<= 1) v = __fadd_rn(v, shfl_xor(v, o));
    if ((lane & (4 * SBW - 1)) == 0) *dst = v;
}

/* The GDN conv of channel ch at token t (cu_mm_conv) in two halves: what it reads of the state and weights (pre:
 * the d_conv - 1 window values, then the d_conv weights; *slot: the state slot), which no kernel of the step
 * before the matmul writes, so the matmul loads it before its dependency wait; then, with the new value x the
 * matmul formed, the output and the shifted state. */
#define CU_CONV_PRE (2 * CU_CONV_K - 1)
static __device__ __forceinline__ void mm_conv_load(const struct cu_mm_conv &cv, int t, int ch, float *pre, int *slot) {
    constexpr int nh = CU_CONV_K - 1;
    *slot = cv.seqinfo[4 * cv.seq[t] + 2];
    const float *st = cv.state + (int64_t)*slot * cv.state_floats + (int64_t)ch * nh;
    const bool zero = cv.pos[t] == 0;
#pragma unroll
    for (int k = 0; k < nh; k++) pre[k] = zero ? 0.f : st[k];
#pragma unroll
    for (int k = 0; k < CU_CONV_K; k++) pre[nh + k] = cv.w[(int64_t)ch * CU_CONV_K + k];
}
static __device__ __forceinline__ void mm_conv_store(const struct cu_mm_conv &cv, int t, int ch, const float *pre, int slot, float x) {
    constexpr int nh = CU_CONV_K - 1;
    float win[CU_CONV_K];
#pragma unroll
    for (int k = 0; k < nh; k++) win[k] = pre[k];
    win[nh] = x;
    cv.out[(int64_t)t * cv.n_ch + ch] = gdn_conv_silu(win, pre + nh, nh);
    float *st = cv.state + (int64_t)slot * cv.state_floats + (int64_t)ch * nh;
#pragma unroll
    for (int k = 0; k < nh; k++) st[k] = win[k + 1];
}

/* The conv state and weights of a column-split CTA's outputs (rows x na), thread i taking output i. */
template <int NA>
static __device__ __forceinline__ void mv_conv_load(const struct cu_mm_conv &cv, int rows, int na, int a0, int r0, float (*pre)[CU_CONV_PRE],
                                                    int *slot) {
    for (int i = threadIdx.x; i < rows * na; i += blockDim.x) {
        const int r = NA == 1 ? 0 : i / rows, j = i - r * rows;
        mm_conv_load(cv, a0 + r, r0 + j, pre[i], &slot[i]);
    }
}

/* The conv where the launch did not take the column-split kernel: a thread per (channel, token); a decode step's tokens
 * are independent (one a sequence). */
static __global__ void mm_conv_kernel(const struct cu_mm_args P) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const cu_mm_seg &S = P.seg[P.conv.seg];
    const int ch = (int)(blockIdx.x * blockDim.x + threadIdx.x), t = (int)blockIdx.y;
    if (ch >= P.conv.n_ch) return;
    float pre[CU_CONV_PRE];
    int slot;
    mm_conv_load(P.conv, t, ch, pre, &slot);
    mm_conv_store(P.conv, t, ch, pre, slot, S.y[(int64_t)t * S.ld_y + ch]);
}

/* ---- the norm + quantize of a launch's outputs, inside it (cu_nq_fuse, norm_quant.h) ---- */
int64_t cu_nq_fuse_counters(int mode, int64_t n, int64_t n_act) {
    if (n <= 0 || n_act <= 0) return 0;
    const int64_t uw = nq_fuse_uw(mode, n);
    return (n + uw - 1) / uw * (n_act == 1 ? 1 : (n_act + 7) / 8); /* groups: mm_kernel_cols' MV_NA rows */
}

/* The residual add of the epilogue (one activation row): thread j < rows loads res[r0 + j] right after the dependency
 * wait, beside the activation's loads, so the add after the CTA's reduction does not wait another L2 round trip (each
 * wave of the launch paid it). Not where the output is the residual itself, nor with several activation rows. */
template <int NA> static __device__ __forceinline__ bool mv_res_early(const struct cu_mm_seg &S) {
    return NA == 1 && S.res && S.res != S.y;
}
template <int NA> static __device__ __forceinline__ float mv_res_load(const struct cu_mm_seg &S, int r0, int rows) {
    return mv_res_early<NA>(S) && (int)threadIdx.x < rows ? S.res[r0 + (int)threadIdx.x] : 0.f;
}

/* The segment of a mat-vec launch CTA b's rows come from (its CTAs in segment order, cu_mm_seg.cta0); mv_seg_of: this
 * CTA's. */
static __device__ __forceinline__ int mv_seg_at(const struct cu_mm_args &P, int b) {
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_MM_MAX_SEG; i++)
        if (i < P.n_seg && b >= P.seg[i].cta0) si = i;
    return si;
}
static __device__ __forceinline__ int mv_seg_of(const struct cu_mm_args &P) { return mv_seg_at(P, (int)blockIdx.x); }
/* The rows of the CTA that takes this one's place in the launch's next round (blockIdx + P.pf_next, the CTAs resident at
 * once) asked into L2 by one bulk prefetch right after the release: while the resident round sums, DRAM has nothing
 * else to read, and the next round's loads then come from L2 (a hint: nothing read changes). RT rows a CTA; the range
 * is cut to whole 16-byte units inside the CTA's rows. mm_kernel_mma's AP 6 and mm_kernel_cols' PF instances; HIP:
 * none. */
template <int RT>
static __device__ __forceinline__ void mma_next_l2(const struct cu_mm_args &P) {
    const int nb = (int)blockIdx.x + P.pf_next;
    const cu_mm_seg &S = P.seg[mv_seg_at(P, nb)];
    const int r0 = (nb - S.cta0) * RT;
    if (nb < S.cta0 || r0 >= S.n_rows || (S.type != GGML_TYPE_Q4_K && S.type != GGML_TYPE_Q6_K)) return;
    const uintptr_t a0 = (uintptr_t)(S.w + mv_woff((size_t)r0 * S.stride, S.stride, S.n_rows)), a1 = a0 + (size_t)min(RT, S.n_rows - r0) * S.stride;
    const uintptr_t b0 = (a0 + 15) & ~(uintptr_t)15, b1 = a1 & ~(uintptr_t)15;
#if !defined(VLLMC_HIP)
    if (b1 > b0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b0), "r"((uint32_t)(b1 - b0)) : "memory");
#else
    (void)b0; (void)b1;
#endif
}
/* A CTA of a Q8_0 / F32 segment: its rows to L2 before the dependency wait, then mv_other_rows. */
static __device__ __forceinline__ void mv_other_cta(const struct cu_mm_args &P, const cu_mm_seg &S, const uint8_t *wb, int r0, int rows,
                                                    int a0, int na, int lane, int wid, int W) {
    for (int i = threadIdx.x; i < rows * (int)(S.stride / 128); i += blockDim.x) gpu_prefetch_l2(wb + 128 * (size_t)i);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    mv_other_rows(P, S, wb, r0, rows, a0, na, lane, wid, W);
}
/* Output j of the CTA's rows r0 .. for activation row ar: the row's sum y, plus the bias; stored; added to the
 * residual (resv: the value mv_res_load took early, where mv_res_early); the conv's epilogue (pre, slot). */
template <int NA>
static __device__ __forceinline__ float mv_out(const struct cu_mm_args &P, const cu_mm_seg &S, int ar, int r0, int j, float y, float resv,
                                               bool conv, const float *pre, int slot) {
    const int64_t o = (int64_t)ar * S.ld_y + r0 + j;
    if (S.bias) y = __fadd_rn(y, S.bias[r0 + j]);
    S.y[o] = y;
    float r = 0.f; /* the residual as written (the deferred-norm writer's input) */
    if (S.res) S.res[o] = r = __fadd_rn(mv_res_early<NA>(S) ? resv : S.res[o], y);
    if (conv) mm_conv_store(P.conv, ar, r0 + j, pre, slot, y);
    return r;
}

/* A column-split CTA's outputs: each row's warp parts (part[warp][activation row][row]) added in warp order, then
 * mv_out (thread i loaded output i's residual and conv inputs before the release) */
template <int NA, int RPC>
static __device__ __forceinline__ void mv_cta_out(const struct cu_mm_args &P, const cu_mm_seg &S, const float (*part)[NA][RPC], int W,
                                                  int r0, int rows, int a0, int na, float resv, bool conv,
                                                  const float (*conv_pre)[CU_CONV_PRE], const int *conv_slot) {
    __syncthreads();
    for (int i = threadIdx.x; i < rows * na; i += blockDim.x) {
        const int r = NA == 1 ? 0 : i / rows, j = i - r * rows;
        float y = part[0][r][j];
        for (int k = 1; k < W; k++) y = __fadd_rn(y, part[k][r][j]);
        mv_out<NA>(P, S, a0 + r, r0, j, y, resv, conv, conv_pre[i], conv_slot[i]);
    }
}

/* NA 1: one activation row (a batch-1 step); NA = MV_NA: a decode step of several sequences, blockIdx.y the group
 * of up to MV_NA activation rows, each met in turn with the weights the lane loaded once (its chunk from L1).
 * The per-row sums are the same ops in the same order either way. U: row groups a CTA. */
#define MV_NA 8
static_assert(MV_NA == 8, "cu_nq_fuse_counters counts groups of 8 activation rows");
/* KT: the K-quant types present, 1 Q4_K, 2 Q6_K, 3 both (fewer registers for one). LBT, LBM: launch bounds of LBT
 * threads and LBM CTAs an SM (cu_mm_cfg.cols_lb), else 512 threads. PF: the next round's rows into L2 after the release
 * (mma_next_l2; cu_mm_cfg.cols_lb bits 8 / 16 on the bounded LM-head / down-row instances). */
template <int SBW, int KT, int U, int NA, int LBT = 512, int LBM = 1, bool PF = false>
static __global__ void __launch_bounds__(LBT, LBM) mm_kernel_cols(const struct cu_mm_args P) {
    constexpr int RW = 8 / SBW, RPC = RW * U;
    __shared__ float part[16][NA][RPC];
    __shared__ float conv_pre[NA * RPC][CU_CONV_PRE]; /* cu_mm_conv: each output's state and weights */
    __shared__ int conv_slot[NA * RPC];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int si = mv_seg_of(P);
    const cu_mm_seg &S = P.seg[si];
    const int r0 = ((int)blockIdx.x - S.cta0) * RPC, rows = min(RPC, S.n_rows - r0);
    const int a0 = NA == 1 ? 0 : (int)blockIdx.y * NA, na = NA == 1 ? 1 : min(NA, P.n_act - a0);
    const bool conv = P.conv.on && si == P.conv.seg;
    nq_fuse_prefetch(P.nq, (int64_t)blockIdx.y * gridDim.x + blockIdx.x, (int64_t)gridDim.x * gridDim.y);
    /* the conv's state and weights, before the wait, by the thread that finishes the conv in the epilogue (same i);
     * issued after the weights' loads (below): the slot is a chain of three dependent loads, and a thread that waits
     * on it before asking for its weights delays the whole CTA's DRAM stream by that chain in every wave */
    const int n_sb = (int)(P.a.n / QK_K);
    const uint8_t *wb = S.w + mv_woff((size_t)r0 * S.stride, S.stride, S.n_rows);
    if (S.type == GGML_TYPE_Q8_0 || S.type == GGML_TYPE_F32) {
        mv_other_cta(P, S, wb, r0, rows, a0, na, lane, wid, W);
        if (P.nq.on && (P.nq.feed >> si & 1)) { /* (the same for the whole CTA) */
            const nq_cols pc = {r0, rows};     /* row j of a feeding segment is column j of the output */
            nq_fuse_finish(P.nq, &pc, 1, NA == 1 ? 0 : (int)blockIdx.y, a0, na);
        }
        return;
    }
    const int c = lane & 3, sbl = (lane >> 2) % SBW, rr = lane / (4 * SBW);
    const int sb = wid * SBW + sbl;
    const bool on = sb < n_sb;
    mv_act v;
    float resv = 0.f;
    /* the super-block scales convert by the instruction (k4_term<true> / q6_term<true>): the software form took ~40 of a
     * Q4_K term's ~165 instructions, with branches (SASS); the hot instance (2,560 columns, 4 row groups) takes 94-96
     * registers against 90, still 4 CTAs of 160 threads an SM (qwen35-4b decode +2.4%) */
    if (KT == 1 || (KT == 3 && S.type == GGML_TYPE_Q4_K)) {
        k4s_w w[U]; /* the super-block's scale words shared by its 4 lanes */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + rr;
            if (on && row < rows) w[u] = k4s_load(wb + (size_t)row * S.stride, n_sb, sb, c);
            else w[u] = k4s_w{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0};
        }
        if (conv) mv_conv_load<NA>(P.conv, rows, na, a0, r0, conv_pre, conv_slot);
        gpu_pdl_wait();
        gpu_pdl_trigger();
        if constexpr (PF)
            if (threadIdx.x == 0) mma_next_l2<RPC>(P);
        resv = mv_res_load<NA>(S, r0, rows);
        const k4_sel ks = k4_sel_make(c);
#pragma unroll 1
        for (int r = 0; r < na; r++) {
            if (on) mv_act_load(NA == 1 ? P.a : act_row(P.a, a0 + r), false, sb, c, v);
            else mv_act_zero(v);
#pragma unroll
            for (int u = 0; u < U; u++) mv_warp_part<SBW>(k4s_term(w[u], ks, v, lane), &part[wid][r][u * RW + rr], lane);
        }
    } else {
        q6_w w[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + rr;
            if (on && row < rows) w[u] = q6_load(wb + (size_t)row * S.stride, n_sb, sb, c);
            else w[u] = q6_w{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0};
        }
        if (conv) mv_conv_load<NA>(P.conv, rows, na, a0, r0, conv_pre, conv_slot);
        gpu_pdl_wait();
        gpu_pdl_trigger();
        if constexpr (PF)
            if (threadIdx.x == 0) mma_next_l2<RPC>(P);
        resv = mv_res_load<NA>(S, r0, rows);
#pragma unroll 1
        for (int r = 0; r < na; r++) {
            if (on) mv_act_load(NA == 1 ? P.a : act_row(P.a, a0 + r), true, sb, c, v);
            else mv_act_zero(v);
#pragma unroll
            for (int u = 0; u < U; u++) mv_warp_part<SBW>(q6_term<true>(w[u], c & 1, v), &part[wid][r][u * RW + rr], lane);
        }
    }
    mv_cta_out<NA, RPC>(P, S, part, W, r0, rows, a0, na, resv, conv, conv_pre, conv_slot);
    if (P.nq.on && (P.nq.feed >> si & 1)) {
        const nq_cols pc = {r0, rows};
        nq_fuse_finish(P.nq, &pc, 1, NA == 1 ? 0 : (int)blockIdx.y, a0, na);
    }
}

/* ---- the column-split mat-vec for the other decode weight types (mm_kernel_colx) ----
 * One activation row, launches with Q5_K, IQ4_XS, Q4_0 or Q5_0 rows, or with Q8_0 rows and no K-quant ones (Q5_K_M,
 * IQ4_XS, Q4_0 and Q8_0 files; the Q5_0 / Q8_0 fallbacks of rows that are not a multiple of 256, e.g. 896). These
 * took the one-warp-per-row kernel (mm_row: a warp walks its row in dependent steps, a round trip each), which
 * streamed the LM head's shape at 28-53% of what the column-split kernel reaches on Q4_K (BENCHMARKS.md "The other
 * weight types"). Here the lanes split a row as the column-split kernel does (SBW groups of 256 columns a warp, 64
 * columns a lane, 8 / SBW rows a pass, two passes a CTA), each lane's weights in registers before the dependency
 * wait. A CTA's rows are one segment, and each type has its branch: Q4_K and Q6_K the column-split kernel's terms,
 * Q5_K Q4_K's with the 5th bit from the qh bytes, IQ4_XS its table by byte permutes, and the 32-element block types
 * (a lane's 64 columns two blocks, against the Q8_0 activation; a row's last super-block may be part-filled, its
 * lanes past the row idle) each block's term as the reference forms it; F32 rows mv_other_cta's. The terms are
 * exact; a row adds them in another order than the reference (test_cuda_ops colx holds them to test_matmul's bound). */
struct k5_w { uint4 q0, q1, h0, h1; uint32_t sw; };
struct iq4x_w { uint4 q0, q1; uint32_t sl, dh; };
struct b8_w { uint4 q0, q1, q2, q3; uint32_t d; };
struct b4_w { uint4 q0, q1; uint32_t d; };
struct b5_w { uint4 q0, q1; uint2 h; uint32_t d; };
/* Q5_K chunk c of super-block sb (a repacked row: the quants, the 32 qh bytes of each super-block, the 12 scale bytes,
 * d / dmin from a 16-byte boundary): its 32 quant bytes, the super-block's 32 qh bytes, and word c of (scales, d /
 * dmin), shared by the 4 lanes as k4s_load's */
static __device__ __forceinline__ k5_w k5_load(const uint8_t *wr, int n_sb, int sb, int c) {
    const size_t sc_off = 160 * (size_t)n_sb, dm_off = sc_off + ((12 * (size_t)n_sb + 15) & ~(size_t)15);
    const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c), *hp = (const uint4 *)(wr + 128 * (size_t)n_sb + 32 * (size_t)sb);
    const uint32_t *wp = (const uint32_t *)(wr + (c < 3 ? sc_off + 12 * (size_t)sb + 4 * (size_t)c : dm_off + 4 * (size_t)sb));
    return k5_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg(hp), gpu_ldg(hp + 1), gpu_ldg(wp)};
}
/* sub-block 2c's element l has its 5th bit at bit 2c of qh[l], sub-block 2c + 1's at bit 2c + 1 (row_q5_K) */
static __device__ __forceinline__ float k5_term(const k5_w &w, const k4_sel &ks, const mv_act &v, int lane) {
    const int b = lane & ~3, sh = 2 * (lane & 3);
    const uint32_t qw[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    const uint32_t hw[8] = {w.h0.x, w.h0.y, w.h0.z, w.h0.w, w.h1.x, w.h1.y, w.h1.z, w.h1.w};
    int slo = 0, shi = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint32_t hb = hw[k] >> sh;
        slo = dot4_i8((int)((qw[k] & 0x0F0F0F0Fu) | ((hb << 4) & 0x10101010u)), v.al[k], slo);
        shi = dot4_i8((int)(((qw[k] >> 4) & 0x0F0F0F0Fu) | ((hb << 3) & 0x10101010u)), v.ah[k], shi);
    }
    return k4_term_sums<true>(ks, shfl_idx(w.sw, b), shfl_idx(w.sw, b + 1), shfl_idx(w.sw, b + 2), shfl_idx(w.sw, b + 3), slo, shi,
                              v.b[0], v.b[1], v.d);
}
/* IQ4_XS chunk c (a repacked row: the quants, the 4 low-scale bytes of each super-block, then d | scales_h << 16) */
static __device__ __forceinline__ iq4x_w iq4x_load(const uint8_t *wr, int n_sb, int sb, int c) {
    const uint8_t *slb = wr + 128 * (size_t)n_sb, *dhb = slb + ((4 * (size_t)n_sb + 15) & ~(size_t)15);
    const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb + 32 * c);
    return iq4x_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg((const uint32_t *)(slb + 4 * (size_t)sb)), gpu_ldg((const uint32_t *)(dhb + 4 * (size_t)sb))};
}
/* The table values (kvalues_iq4nl) of q's 8 nibbles in nibble order, 4 a word: each byte picked from the table's
 * low or high half (selectors of 3 bits: no sign replication) by the nibble's bit 3. 10 instructions where
 * iq4_values4 twice takes ~26. */
static __device__ __forceinline__ void iq4_vals8(uint32_t q, uint32_t &v0, uint32_t &v1) {
    const uint32_t t0 = 0xBFAD9881u, t1 = 0xF6EADDCFu, t2 = 0x26190D01u, t3 = 0x71594535u;
    const uint32_t s = q & 0x77777777u, hs = s >> 16;
    const uint32_t pick = 0x32103210u | ((q >> 1) & 0x44444444u);
    v0 = __byte_perm(__byte_perm(t0, t1, s), __byte_perm(t2, t3, s), pick);
    v1 = __byte_perm(__byte_perm(t0, t1, hs), __byte_perm(t2, t3, hs), pick >> 16);
}
/* Word k of a sub-block's 16 bytes holds elements 4k .. 4k + 3 (low nibbles) and 16 + 4k .. (high nibbles); in nibble
 * order they are 4k, 16 + 4k, 4k + 1, 17 + 4k | 4k + 2, 18 + 4k, 4k + 3, 19 + 4k, so the activation words lo (4k ..)
 * and hi (16 + 4k ..) are interleaved to match. */
static __device__ __forceinline__ int iq4_dot16(uint32_t q, int x0, int x1, int s) {
    uint32_t v0, v1;
    iq4_vals8(q, v0, v1);
    s = dot4_i8((int)v0, x0, s);
    return dot4_i8((int)v1, x1, s);
}
/* The activation words lo (4k ..) and hi (16 + 4k ..) of a sub-block in iq4_vals8's order, in place: (lo, hi) become
 * (4k, 16 + 4k, 4k + 1, 17 + 4k | 4k + 2, 18 + 4k, 4k + 3, 19 + 4k) */
static __device__ __forceinline__ void iq4_act_perm(int &lo, int &hi) {
    const uint32_t a = (uint32_t)lo, b = (uint32_t)hi;
    lo = (int)__byte_perm(a, b, 0x5140);
    hi = (int)__byte_perm(a, b, 0x7362);
}
static __device__ __forceinline__ void iq4_act_perm(mv_act &v) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        iq4_act_perm(v.al[k], v.al[4 + k]);
        iq4_act_perm(v.ah[k], v.ah[4 + k]);
    }
}
/* PERM: v's words already in iq4_vals8's order (iq4_act_perm: once a CTA for all its rows), else permuted here */
template <bool PERM = false>
static __device__ __forceinline__ float iq4x_term(const iq4x_w &w, int c, const mv_act &v) {
    const uint32_t sh = w.dh >> 16;
    const int ls0 = (int)(((w.sl >> (8 * c)) & 15u) | (((sh >> (4 * c)) & 3u) << 4)) - 32;
    const int ls1 = (int)(((w.sl >> (8 * c + 4)) & 15u) | (((sh >> (4 * c + 2)) & 3u) << 4)) - 32;
    const uint32_t qw[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int l0 = v.al[k], l1 = v.al[4 + k], h0 = v.ah[k], h1 = v.ah[4 + k];
        if (!PERM) { iq4_act_perm(l0, l1); iq4_act_perm(h0, h1); }
        s0 = iq4_dot16(qw[k], l0, l1, s0);
        s1 = iq4_dot16(qw[4 + k], h0, h1, s1);
    }
    int I = ls0 * s0 + ls1 * s1;
    I += shfl_xor(I, 1); I += shfl_xor(I, 2);
    return term_k(v.d, gpu_h2f((uint16_t)(w.dh & 0xffff)), I);
}
/* The 32-element block types: lane c of super-block sb takes blocks 8 sb + 2c, 8 sb + 2c + 1 (a repacked row: the
 * quants, then the f16 scales). Their activation (Q8_0): the 64 quants, the two scales, each block's quant sum (Q4_0's
 * -8). */
struct mv_act0 { int al[8], ah[8]; float d0, d1; int s0, s1; };
static __device__ __forceinline__ void mv_act0_load(const cu_act_view &a, int sb, int c, mv_act0 &v) {
    const int4 *ap = (const int4 *)(a.o_qs + (int64_t)sb * QK_K + 64 * c);
    const int4 l0 = ap[0], l1 = ap[1], h0 = ap[2], h1 = ap[3];
    v.al[0] = l0.x; v.al[1] = l0.y; v.al[2] = l0.z; v.al[3] = l0.w; v.al[4] = l1.x; v.al[5] = l1.y; v.al[6] = l1.z; v.al[7] = l1.w;
    v.ah[0] = h0.x; v.ah[1] = h0.y; v.ah[2] = h0.z; v.ah[3] = h0.w; v.ah[4] = h1.x; v.ah[5] = h1.y; v.ah[6] = h1.z; v.ah[7] = h1.w;
    const uint32_t dd = *(const uint32_t *)(a.o_d + (int64_t)8 * sb + 2 * c);
    v.d0 = gpu_h2f((uint16_t)(dd & 0xffff)); v.d1 = gpu_h2f((uint16_t)(dd >> 16));
    v.s0 = v.s1 = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        v.s0 = dot4_i8(0x01010101, v.al[k], v.s0);
        v.s1 = dot4_i8(0x01010101, v.ah[k], v.s1);
    }
}
static __device__ __forceinline__ void mv_act0_zero(mv_act0 &v) {
#pragma unroll
    for (int i = 0; i < 8; i++) v.al[i] = v.ah[i] = 0;
    v.d0 = v.d1 = 0.f;
    v.s0 = v.s1 = 0;
}
static __device__ __forceinline__ b8_w b8_load(const uint8_t *wr, int n_b, int sb, int c) {
    const int b = 8 * sb + 2 * c;
    const uint4 *qp = (const uint4 *)(wr + 32 * (size_t)b);
    return b8_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg(qp + 2), gpu_ldg(qp + 3), gpu_ldg((const uint32_t *)(wr + 32 * (size_t)n_b + 2 * (size_t)b))};
}
static __device__ __forceinline__ b4_w b4_load(const uint8_t *wr, int n_b, int sb, int c) {
    const int b = 8 * sb + 2 * c;
    const uint4 *qp = (const uint4 *)(wr + 16 * (size_t)b);
    return b4_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg((const uint32_t *)(wr + 16 * (size_t)n_b + 2 * (size_t)b))};
}
/* Q5_0 (a repacked row: the quants, the 4 qh bytes of each block from a 16-byte boundary, then the f16 scales) */
static __device__ __forceinline__ b5_w b5_load(const uint8_t *wr, int n_b, int sb, int c) {
    const int b = 8 * sb + 2 * c;
    const uint4 *qp = (const uint4 *)(wr + 16 * (size_t)b);
    const uint8_t *qh = wr + 16 * (size_t)n_b, *d = qh + ((4 * (size_t)n_b + 15) & ~(size_t)15);
    return b5_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg((const uint2 *)(qh + 4 * (size_t)b)), gpu_ldg((const uint32_t *)(d + 2 * (size_t)b))};
}
/* 4 bits of x, bit i to bit 4 of byte i: x + x << 7 + x << 14 + x << 21 puts bit i at bit 8i (no two terms overlap,
 * so no carries) */
static __device__ __forceinline__ uint32_t q5_0_hi4(uint32_t x) { return ((x & 15u) * 0x00204081u & 0x01010101u) << 4; }
/* the two blocks' terms (d_w d_a I, as row_q8_0 / row_q45_0 form them) added, then over the super-block's 4 lanes */
static __device__ __forceinline__ float b32_pair(uint32_t dw, const mv_act0 &v, int I0, int I1) {
    float t = __fadd_rn(__fmul_rn(__fmul_rn(gpu_h2f((uint16_t)(dw & 0xffff)), v.d0), (float)I0),
                        __fmul_rn(__fmul_rn(gpu_h2f((uint16_t)(dw >> 16)), v.d1), (float)I1));
    t = __fadd_rn(t, shfl_xor(t, 1));
    return __fadd_rn(t, shfl_xor(t, 2));
}
static __device__ __forceinline__ float b8_term(const b8_w &w, const mv_act0 &v) {
    const uint32_t q[16] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w,
                            w.q2.x, w.q2.y, w.q2.z, w.q2.w, w.q3.x, w.q3.y, w.q3.z, w.q3.w};
    int I0 = 0, I1 = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        I0 = dot4_i8((int)q[k], v.al[k], I0);
        I1 = dot4_i8((int)q[8 + k], v.ah[k], I1);
    }
    return b32_pair(w.d, v, I0, I1);
}
/* Q4_0: element j < 16 the low nibble of byte j, j + 16 its high nibble; the -8 through the block's quant sum */
static __device__ __forceinline__ float b4_term(const b4_w &w, const mv_act0 &v) {
    const uint32_t q[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    int I0 = 0, I1 = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        I0 = dot4_i8((int)(q[k] & 0x0F0F0F0Fu), v.al[k], I0);
        I0 = dot4_i8((int)((q[k] >> 4) & 0x0F0F0F0Fu), v.al[4 + k], I0);
        I1 = dot4_i8((int)(q[4 + k] & 0x0F0F0F0Fu), v.ah[k], I1);
        I1 = dot4_i8((int)((q[4 + k] >> 4) & 0x0F0F0F0Fu), v.ah[4 + k], I1);
    }
    return b32_pair(w.d, v, I0 - 8 * v.s0, I1 - 8 * v.s1);
}
/* Q5_0: element j < 16 the low nibble of byte j with bit j of qh as its 5th bit, j + 16 the high nibble with bit
 * j + 16; the -16 through the block's quant sum */
static __device__ __forceinline__ float b5_term(const b5_w &w, const mv_act0 &v) {
    const uint32_t q[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    int I0 = 0, I1 = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        I0 = dot4_i8((int)((q[k] & 0x0F0F0F0Fu) | q5_0_hi4(w.h.x >> 4 * k)), v.al[k], I0);
        I0 = dot4_i8((int)(((q[k] >> 4) & 0x0F0F0F0Fu) | q5_0_hi4(w.h.x >> (16 + 4 * k))), v.al[4 + k], I0);
        I1 = dot4_i8((int)((q[4 + k] & 0x0F0F0F0Fu) | q5_0_hi4(w.h.y >> 4 * k)), v.ah[k], I1);
        I1 = dot4_i8((int)(((q[4 + k] >> 4) & 0x0F0F0F0Fu) | q5_0_hi4(w.h.y >> (16 + 4 * k))), v.ah[4 + k], I1);
    }
    return b32_pair(w.d, v, I0 - 16 * v.s0, I1 - 16 * v.s1);
}
/* Q2_K / Q3_K chunk c of super-block sb: elements 64c .. 64c + 63 are bits 2g, 2g + 2 (g = 2 (c % 2)) of the 32 quant
 * bytes of half h = c / 2, their 16-element scale groups j = 4c .. 4c + 3. A repacked Q2_K row: the quants, the 16
 * scale bytes of each super-block, then d / dmin; Q3_K: the quants, the 32 hmask bytes (bit 4h + g of byte l: no -4),
 * the 12 scale bytes, then d (row_q23_K). Loaded: the 32 quant bytes; Q2_K word c of its scales (scale | min << 4 a
 * byte) and d / dmin; Q3_K the 32 hmask bytes, scale words c % 2 and 2, and d. */
struct q23_w { uint4 q0, q1, h0, h1; uint32_t s0, s1, d; };
template <bool Q3>
static __device__ __forceinline__ q23_w q23_load(const uint8_t *wr, int n_sb, int sb, int c) {
    const uint4 *qp = (const uint4 *)(wr + 64 * (size_t)sb + 32 * (c >> 1));
    if (!Q3) {
        const uint8_t *sc = wr + 64 * (size_t)n_sb;
        return q23_w{gpu_ldg(qp), gpu_ldg(qp + 1), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0),
                     gpu_ldg((const uint32_t *)(sc + 16 * (size_t)sb + 4 * c)), 0u, gpu_ldg((const uint32_t *)(sc + 16 * (size_t)n_sb + 4 * (size_t)sb))};
    }
    const uint4 *hp = (const uint4 *)(wr + 64 * (size_t)n_sb + 32 * (size_t)sb);
    const uint8_t *sc = wr + 96 * (size_t)n_sb, *dp = sc + ((12 * (size_t)n_sb + 15) & ~(size_t)15);
    return q23_w{gpu_ldg(qp), gpu_ldg(qp + 1), gpu_ldg(hp), gpu_ldg(hp + 1), gpu_ldg((const uint32_t *)(sc + 12 * (size_t)sb + 4 * (c & 1))),
                 gpu_ldg((const uint32_t *)(sc + 12 * (size_t)sb + 8)), (uint32_t)gpu_ldg((const unsigned short *)(dp + 2 * (size_t)sb))};
}
/* The Q8_K activation's chunk c (mv_act_load) with its four 16-element sums in b[0 .. 3] (the K-quants with 16-element
 * scale groups) */
static __device__ __forceinline__ void mv_act16_load(const cu_act_view &a, int sb, int c, mv_act &v) {
    mv_act_load(a, false, sb, c, v);
    const int2 bs = *(const int2 *)(a.k_bs + (int64_t)sb * 16 + 4 * c);
    v.b[0] = (int)(int16_t)(bs.x & 0xffff); v.b[1] = (int)(int16_t)(bs.x >> 16);
    v.b[2] = (int)(int16_t)(bs.y & 0xffff); v.b[3] = (int)(int16_t)(bs.y >> 16);
}
/* Group m of the lane: its 16 elements are activation words 4m .. 4m + 3 of al (m < 2) or ah; the integer sums as
 * dot_ref_q2_K / dot_ref_q3_K form them (Q3_K: the 3-bit lo | hb << 2, then -4 x the group's activation sum), reduced
 * over the 4 lanes, then the reference's float term */
template <bool Q3>
static __device__ __forceinline__ float q23_term(const q23_w &w, int c, const mv_act &v) {
    const uint32_t qw[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
    const uint32_t hw[8] = {w.h0.x, w.h0.y, w.h0.z, w.h0.w, w.h1.x, w.h1.y, w.h1.z, w.h1.w};
    const int g = 2 * (c & 1), hs = 4 * (c >> 1) + g;
    int sg[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t lo = (qw[k] >> (2 * g)) & 0x03030303u, hi = (qw[k] >> (2 * g + 2)) & 0x03030303u;
        if (Q3) {
            lo |= ((hw[k] >> hs) & 0x01010101u) << 2;
            hi |= ((hw[k] >> (hs + 1)) & 0x01010101u) << 2;
        }
        sg[k / 4] = dot4_i8((int)lo, v.al[k], sg[k / 4]);
        sg[2 + k / 4] = dot4_i8((int)hi, v.ah[k], sg[2 + k / 4]);
    }
    int I = 0, M = 0;
#pragma unroll
    for (int m = 0; m < 4; m++) {
        if (Q3) { /* scale j = 4c + m: low 4 bits from byte j % 8 (high nibble for j >= 8), high 2 from byte 8 + m */
            const int sc = (int)(((w.s0 >> (8 * m + 4 * (c >> 1))) & 15u) | (((w.s1 >> (8 * m + 2 * c)) & 3u) << 4)) - 32;
            I += sc * (sg[m] - 4 * v.b[m]);
        } else {
            I += (int)((w.s0 >> (8 * m)) & 15u) * sg[m];
            M += (int)((w.s0 >> (8 * m + 4)) & 15u) * v.b[m];
        }
    }
    I += shfl_xor(I, 1); I += shfl_xor(I, 2);
    if (Q3) return term_k(v.d, gpu_h2f((uint16_t)w.d), I);
    M += shfl_xor(M, 1); M += shfl_xor(M, 2);
    return term_kmin(v.d, gpu_h2f((uint16_t)(w.d & 0xffff)), gpu_h2f((uint16_t)(w.d >> 16)), I, M);
}

/* The weight types mm_kernel_colx takes (F32 rows too, by mv_other_cta) */
static inline bool colx_type(int t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_IQ4_XS || t == GGML_TYPE_Q8_0 ||
           t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_F32;
}
/* the 32-element block types (their rows need only a multiple of 64 columns: a lane's two blocks) */
static inline bool colx_b32(int t) { return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_F32; }
/* U: row passes a CTA (2; 4 where every K-quant row of the launch is IQ4_XS, of up to 16 super-blocks: its terms are
 * issue-bound, and the activation's load and interleave, once a CTA, then serve twice the rows: the LM head's shape
 * 161.0 -> 149.8 us, gate + up 14.50 -> 13.35 on the H100). NA 1: one activation row; NA = MV_NA: a decode step of
 * several sequences, blockIdx.y the group of up to MV_NA activation rows, each met in turn with the weights the lane
 * loaded once (as mm_kernel_cols' form): a row's sum is the same ops in the same order either way. */
template <int SBW, int U, int NA, bool IQ4 = false, bool Q23 = false> /* IQ4: the launch's K-quant rows are all IQ4_XS: only
    that branch compiled (at U 4: 82 registers, where all took 127); Q23: a launch with Q2_K / Q3_K rows, the only instances
    with their branch (it takes the one-row instances from 83 to 96 registers) */
static __global__ void __launch_bounds__(512) mm_kernel_colx(const struct cu_mm_args P) {
    constexpr int RW = 8 / SBW, RPC = RW * U;
    __shared__ float part[16][NA][RPC];
    __shared__ float conv_pre[NA * RPC][CU_CONV_PRE];
    __shared__ int conv_slot[NA * RPC];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int si = mv_seg_of(P);
    const cu_mm_seg &S = P.seg[si];
    const int r0 = ((int)blockIdx.x - S.cta0) * RPC, rows = min(RPC, S.n_rows - r0);
    const int a0 = NA == 1 ? 0 : (int)blockIdx.y * NA, na = NA == 1 ? 1 : min(NA, P.n_act - a0);
    const uint8_t *wb = S.w + mv_woff((size_t)r0 * S.stride, S.stride, S.n_rows);
    if (S.type == GGML_TYPE_F32) {
        mv_other_cta(P, S, wb, r0, rows, a0, na, lane, wid, W);
        return;
    }
    const bool conv = P.conv.on && si == P.conv.seg;
    const int n_sb = (int)(P.a.n / QK_K), t = S.type, n_b = (int)(P.a.n / 32);
    const int c = lane & 3, sbl = (lane >> 2) % SBW, rr = lane / (4 * SBW);
    const int sb = wid * SBW + sbl;
    const bool on = 8 * sb + 2 * c < n_b; /* (rows of 32-element blocks: a last super-block part-filled) */
    float resv = 0.f;
    /* after a branch's loads: the conv's state and weights, the wait, the residual */
    auto released = [&]() {
        if (conv) mv_conv_load<NA>(P.conv, rows, na, a0, r0, conv_pre, conv_slot);
        gpu_pdl_wait();
        gpu_pdl_trigger();
        resv = mv_res_load<NA>(S, r0, rows);
    };
    auto put = [&](int r, int u, float y) { mv_warp_part<SBW>(y, &part[wid][r][u * RW + rr], lane); };
    auto arow = [&](int r) { return NA == 1 ? P.a : act_row(P.a, a0 + r); };
    /* one branch: the lane's rows (type of zero) loaded by ld before the release, then each activation row, formed into
     * a (act), met with them (term) */
    auto rows_of = [&](auto zero, auto ld, auto a, auto act, auto term) {
        decltype(zero) w[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + rr;
            w[u] = on && row < rows ? ld(wb + (size_t)row * S.stride) : zero;
        }
        released();
#pragma unroll 1
        for (int r = 0; r < na; r++) {
            act(arow(r), a);
#pragma unroll
            for (int u = 0; u < U; u++) put(r, u, term(w[u], a));
        }
    };
    const k4_sel ks = k4_sel_make(c);
    auto act_k = [&](bool q6) { /* the Q8_K activation's chunk (Q6_K's layout for q6) */
        return [=](const cu_act_view &av, mv_act &v) {
            if (on) mv_act_load(av, q6, sb, c, v);
            else mv_act_zero(v);
        };
    };
    auto act_0 = [=](const cu_act_view &av, mv_act0 &v) { /* the Q8_0 activation's two blocks */
        if (on) mv_act0_load(av, sb, c, v);
        else mv_act0_zero(v);
    };
    (void)t;
    if (IQ4 || t == GGML_TYPE_IQ4_XS)
        rows_of(iq4x_w{}, [&](const uint8_t *p) { return iq4x_load(p, n_sb, sb, c); }, mv_act{},
                [=](const cu_act_view &av, mv_act &v) {
                    if (on) mv_act_load(av, false, sb, c, v);
                    else mv_act_zero(v);
                    iq4_act_perm(v);
                },
                [&](const iq4x_w &w, const mv_act &v) { return iq4x_term<true>(w, c, v); });
    else if constexpr (!IQ4) {
    if (t == GGML_TYPE_Q5_K)
        rows_of(k5_w{}, [&](const uint8_t *p) { return k5_load(p, n_sb, sb, c); }, mv_act{}, act_k(false),
                [&](const k5_w &w, const mv_act &v) { return k5_term(w, ks, v, lane); });
    else if (t == GGML_TYPE_Q4_K)
        rows_of(k4s_w{}, [&](const uint8_t *p) { return k4s_load(p, n_sb, sb, c); }, mv_act{}, act_k(false),
                [&](const k4s_w &w, const mv_act &v) { return k4s_term(w, ks, v, lane); });
    else if (t == GGML_TYPE_Q6_K)
        rows_of(q6_w{}, [&](const uint8_t *p) { return q6_load(p, n_sb, sb, c); }, mv_act{}, act_k(true),
                [&](const q6_w &w, const mv_act &v) { return q6_term<true>(w, c & 1, v); });
    else if (t == GGML_TYPE_Q8_0)
        rows_of(b8_w{}, [&](const uint8_t *p) { return b8_load(p, n_b, sb, c); }, mv_act0{}, act_0,
                [&](const b8_w &w, const mv_act0 &v) { return b8_term(w, v); });
    else if (t == GGML_TYPE_Q4_0)
        rows_of(b4_w{}, [&](const uint8_t *p) { return b4_load(p, n_b, sb, c); }, mv_act0{}, act_0,
                [&](const b4_w &w, const mv_act0 &v) { return b4_term(w, v); });
    else if (Q23 && (t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K)) {
        auto act16 = [=](const cu_act_view &av, mv_act &v) {
            if (on) mv_act16_load(av, sb, c, v);
            else mv_act_zero(v);
        };
        if (t == GGML_TYPE_Q3_K)
            rows_of(q23_w{}, [&](const uint8_t *p) { return q23_load<true>(p, n_sb, sb, c); }, mv_act{}, act16,
                    [&](const q23_w &w, const mv_act &v) { return q23_term<true>(w, c, v); });
        else
            rows_of(q23_w{}, [&](const uint8_t *p) { return q23_load<false>(p, n_sb, sb, c); }, mv_act{}, act16,
                    [&](const q23_w &w, const mv_act &v) { return q23_term<false>(w, c, v); });
    }
    else
        rows_of(b5_w{}, [&](const uint8_t *p) { return b5_load(p, n_b, sb, c); }, mv_act0{}, act_0,
                [&](const b5_w &w, const mv_act0 &v) { return b5_term(w, v); });
    }
    mv_cta_out<NA, RPC>(P, S, part, W, r0, rows, a0, na, resv, conv, conv_pre, conv_slot);
}

/* ---- one super-block a thread: the one-activation-row launches whose K-quant rows are all Q4_K ----
 * A CTA is n_sb x R threads for R rows; thread t takes super-block sb = t / R of row t % R (a warp: 32 / R
 * super-blocks of R rows). The thread loads the row's 144 bytes of that super-block into registers before the
 * dependency wait (as the column-split kernel does) and, after it, the activation's super-block (from L1 / L2; the
 * R threads of a super-block read the same bytes), 64 elements at a time. The super-block's integer sums are the
 * thread's alone, so its scales are decoded once and no shuffles reduce them (the column-split kernel splits a
 * super-block over 4 lanes, each decoding its scales, reducing the sums by shuffles and forming the same float
 * term: ~100 instructions for each lane's 64 elements, two thirds of them outside the dot products). The float
 * term is the reference's (term_kmin), and a row's terms are added in the column-split kernel's order (SBW super-blocks
 * a warp), so the two kernels' outputs are the same bits (and the one-row and several-row launches agree as before).
 * Q8_0 / F32 segments take the column-split kernel's path for them (mv_other_rows), first in the grid. */
#define SBT_MAX_THREADS 512
/* at most 96 registers: 4 CTAs of 160 threads an SM (5 warps a CTA, 5 a scheduler of 16,384 registers) */
#if defined(VLLMC_HIP)
#define SBT_BOUNDS __launch_bounds__(SBT_MAX_THREADS)
#else
#define SBT_BOUNDS __maxnreg__(96)
#endif
template <int R, int SBW>
static __global__ void SBT_BOUNDS mm_kernel_sbt(const struct cu_mm_args P) {
    __shared__ float part[SBT_MAX_THREADS];
    __shared__ float conv_pre[R][CU_CONV_PRE]; /* cu_mm_conv: each output's state and weights */
    __shared__ int conv_slot[R];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int si = mv_seg_of(P);
    const cu_mm_seg &S = P.seg[si];
    const int r0 = ((int)blockIdx.x - S.cta0) * R, rows = min(R, S.n_rows - r0);
    const bool conv = P.conv.on && si == P.conv.seg;
    const int n_sb = (int)(P.a.n / QK_K);
    const uint8_t *wb = S.w + mv_woff((size_t)r0 * S.stride, S.stride, S.n_rows);
    if (S.type != GGML_TYPE_Q4_K) { /* Q8_0 / F32 rows, as the column-split kernel takes them */
        mv_other_cta(P, S, wb, r0, rows, 0, 1, lane, wid, W);
        return;
    }
    const int sb = (int)threadIdx.x / R, rr = (int)threadIdx.x - sb * R;
    const bool on = rr < rows;
    uint4 q[8];
    uint32_t sw0 = 0, sw1 = 0, sw2 = 0, dmw = 0;
    {
        const uint8_t *wr = wb + (size_t)rr * S.stride;
        const uint4 *qp = (const uint4 *)(wr + 128 * (size_t)sb);
        const uint32_t *sp = (const uint32_t *)(wr + k4_sc_off(n_sb) + 12 * (size_t)sb);
#pragma unroll
        for (int j = 0; j < 8; j++) q[j] = on ? gpu_ldg(qp + j) : make_uint4(0, 0, 0, 0);
        if (on) {
            sw0 = gpu_ldg(sp); sw1 = gpu_ldg(sp + 1); sw2 = gpu_ldg(sp + 2);
            dmw = gpu_ldg((const uint32_t *)(wr + k4_dm_off(n_sb) + 4 * (size_t)sb));
        }
    }
    if (conv) mv_conv_load<1>(P.conv, rows, 1, 0, r0, conv_pre, conv_slot);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const float resv = mv_res_load<1>(S, r0, rows);
    /* the activation's super-block: sums of 16 elements (8 words), scale; quants by 64-element chunk below */
    const int8_t *aq = P.a.k_qs + (int64_t)sb * QK_K;
    const int4 *bp = (const int4 *)(P.a.k_bs + (int64_t)sb * 16);
    const int4 b0 = bp[0], b1 = bp[1];
    const float da = P.a.k_d[sb];
    /* the 8 sub-blocks' 6-bit scales and mins, four to a word (the reference's get_scale_min_k4) */
    const uint32_t SC[2] = {sw0 & 0x3F3F3F3Fu, (sw2 & 0x0F0F0F0Fu) | ((sw0 >> 2) & 0x30303030u)};
    const uint32_t MN[2] = {sw1 & 0x3F3F3F3Fu, ((sw2 >> 4) & 0x0F0F0F0Fu) | ((sw1 >> 2) & 0x30303030u)};
    int I = 0;
#pragma unroll
    for (int c = 0; c < 4; c++) { /* chunk c: bytes 32c .. 32c+31, low nibbles sub-block 2c, high 2c+1 */
        int al[8], ah[8];
        ld_w8(aq + 64 * c, al);
        ld_w8(aq + 64 * c + 32, ah);
        const uint32_t qw[8] = {q[2 * c].x, q[2 * c].y, q[2 * c].z, q[2 * c].w, q[2 * c + 1].x, q[2 * c + 1].y, q[2 * c + 1].z, q[2 * c + 1].w};
        int slo = 0, shi = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            slo = dot4_i8((int)(qw[k] & 0x0F0F0F0Fu), al[k], slo);
#if defined(VLLMC_HIP)
            shi = dot4_i8((int)((qw[k] >> 4) & 0x0F0F0F0Fu), ah[k], shi);
#else /* the high nibbles in place (16 x the quant): the sum is 16 x the same integer, so the shift is exact */
            shi = dot4_u8s8(qw[k] & 0xF0F0F0F0u, ah[k], shi);
#endif
        }
#if !defined(VLLMC_HIP)
        shi >>= 4;
#endif
        const uint32_t sc = SC[c >> 1] >> (16 * (c & 1));
        I += (int)(sc & 0xff) * slo + (int)((sc >> 8) & 0xff) * shi;
    }
    /* the mins against the sub-blocks' sums (two 16-element sums each) */
    const int bw[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    int M = 0;
#pragma unroll
    for (int j = 0; j < 8; j++)
        M += (int)((MN[j >> 2] >> (8 * (j & 3))) & 0xff) * ((int)(int16_t)(bw[j] & 0xffff) + (int)(int16_t)((uint32_t)bw[j] >> 16));
    part[rr * n_sb + sb] = on ? term_kmin(da, sb_h2f<true>((uint16_t)(dmw & 0xffff)), sb_h2f<true>((uint16_t)(dmw >> 16)), I, M) : 0.f;
    __syncthreads();
    for (int j = threadIdx.x; j < rows; j += blockDim.x) {
        /* the column-split kernel's order (SBW super-blocks a warp: mv_warp_part's butterfly, +0.0 past the row's
         * end; then the warps in order), so both kernels give the same bits for every row */
        const float *pr = part + j * n_sb;
        float y = 0.f;
        for (int w = 0; w * SBW < n_sb; w++) {
            float t[SBW];
#pragma unroll
            for (int i = 0; i < SBW; i++) t[i] = w * SBW + i < n_sb ? pr[w * SBW + i] : 0.f;
            float p;
            if constexpr (SBW == 2) p = __fadd_rn(t[0], t[1]);
            else p = __fadd_rn(__fadd_rn(t[0], t[1]), __fadd_rn(t[2], t[3]));
            y = w == 0 ? p : __fadd_rn(y, p);
        }
        mv_out<1>(P, S, 0, r0, j, y, resv, conv, conv_pre[j], conv_slot[j]);
    }
}

/* ---- the Q4_K terms on the tensor cores: the one-activation-row launches whose K-quant rows are all Q4_K ----
 * mma.m16n8k32 (u8 weights x s8 activation quants, s32 sums) forms the 8 sub-block sums of 16 rows at once. The
 * column-split kernel's lane split is kept: lane (g, c) = (lane / 4, lane % 4) holds the 32 quant bytes of chunk c
 * (sub-blocks 2c: low nibbles, 2c + 1: high nibbles) of rows g and g + 8, and its scale word c of each (k4s_load),
 * loaded before the dependency wait. Those are exactly the A fragment's rows and k-slots of lane (g, c), so the
 * weights go into the MMAs as loaded: the low nibbles (q & 0x0F0F0F0F) of words 2t, 2t + 1 in MMA t of 4, the high
 * ones in place (q & 0xF0F0F0F0, 16 x the quant, exact) in 4 more. The activation is the B operand, and its column n
 * is sub-block n: lane (g, c) holds the 32 activation quants of sub-block g at k-slots c (the elements its A slots
 * hold in lane c of every row) when g / 2 == c, zeros elsewhere. Then column 2c of the low MMAs' sums is sub-block 2c
 * of row g in lane (g, c) (C fragment: rows g and g + 8, columns 2c and 2c + 1), and column 2c + 1 of the high ones
 * sub-block 2c + 1: the column-split lane's two integer sums (slo, shi) for each of its rows, the other two columns
 * (the low nibbles against sub-block 2c + 1's quants and the reverse) are not read. From there the same ops in the
 * same order (k4_term_sums, the warp's super-blocks, the warps), so the outputs are the column-split kernel's bits.
 * Per 16 rows of a super-block a warp issues 8 MMA and 32 masks a lane where the column-split kernel's 4 row groups
 * issue 64 IDP and 64 masks a lane. RT: rows a CTA (16; 8 for SBW 4: rows g + 8 are zeros). CUDA only. */
#if !defined(VLLMC_HIP)
static __device__ __forceinline__ void mma_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* The GDN conv's state and weights of the CTA's outputs (mv_conv_load), loaded by the row functions below after their
 * weights' loads are issued and before the dependency wait, as the column-split kernel orders them. */
struct mma_conv {
    bool on;
    int r0;
    float (*pre)[CU_CONV_PRE];
    int *slot;
    __device__ __forceinline__ void load(const struct cu_mm_args &P, int rows) const {
        if (on) mv_conv_load<1>(P.conv, rows, 1, 0, r0, pre, slot);
    }
};
/* A measurement build (-DVLLMC_MV_TIMELINE; scripts/mv_timeline.py reads its output): thread 0 of every CTA of the
 * tensor-core mat-vec stamps %globaltimer (and clock64) at its start, at the end of its dependency wait, after its terms
 * and at its exit, into a table row per CTA of the last launch of each grid size (8 sizes); the backend writes the
 * table to $VLLMC_MV_TIMELINE_OUT when it is destroyed (cu_tl_dump). */
#ifdef VLLMC_MV_TIMELINE
#define TL_SIZES 8
#define TL_CTAS 4096
__device__ unsigned long long cu_tl[TL_SIZES][TL_CTAS][10];
__device__ int cu_tl_grid[TL_SIZES];
static __device__ __forceinline__ unsigned long long tl_g() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define TL_MARK(tl, i) do { if ((tl) && threadIdx.x == 0) { (tl)[i] = tl_g(); (tl)[4 + (i)] = (unsigned long long)clock64(); } } while (0)
static __device__ void tl_store(unsigned long long *tl) {
    if (threadIdx.x != 0 || blockIdx.x >= TL_CTAS) return;
    int k = 0;
    for (; k < TL_SIZES; k++) {
        const int old = atomicCAS(&cu_tl_grid[k], 0, (int)gridDim.x);
        if (old == 0 || old == (int)gridDim.x) break;
    }
    if (k == TL_SIZES) return;
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    tl[8] = smid; tl[9] = gridDim.x;
    for (int i = 0; i < 10; i++) cu_tl[k][blockIdx.x][i] = tl[i];
}
extern "C" void cu_tl_dump(const char *path) {
    static unsigned long long h[TL_SIZES][TL_CTAS][10];
    if (cudaMemcpyFromSymbol(h, cu_tl, sizeof(h)) != cudaSuccess) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "cta,g_entry,g_wait,g_terms,g_exit,c_entry,c_wait,c_terms,c_exit,smid,grid\n");
    for (int k = 0; k < TL_SIZES; k++)
        for (int i = 0; i < TL_CTAS; i++) {
            if (!h[k][i][0]) continue;
            fprintf(f, "%d", i);
            for (int j = 0; j < 10; j++) fprintf(f, ",%llu", h[k][i][j]);
            fprintf(f, "\n");
        }
    fclose(f);
}
#else
#define TL_MARK(tl, i) do { (void)(tl); } while (0)
#endif
/* One Q4_K super-block of 16 rows (R16; else rows g only, rows g + 8 zeros) on the tensor cores: lane (g, c)'s 32 quant
 * bytes of chunk c of rows g (q0a, q0b) and g + 8 (q1a, q1b), the lane's scale word of each row (sw0, sw1: word c of
 * the 12 scale bytes and d / dmin), the activation (x0, x1: sub-block g's quants where g / 2 == c, zeros elsewhere;
 * bs: the 16-element sums of sub-blocks 2c, 2c + 1; da) -> the float terms of rows g (t0) and g + 8 (t1), the same in
 * the row's 4 lanes. Shared by mm_kernel_mma and the tiled persistent chain (mega2_kernel). */
/* SUB: the low nibbles' sums as the whole bytes' sums less the high nibbles' (column 2c of both MMAs is against sub-block
 * 2c's quants: (lo + 16 hi) . x - 16 hi . x = lo . x, exact in int32: |bytes . x| <= 255 x 128 x 32), so the first MMA
 * takes the weight words unmasked: 16 masks fewer a super-block for 2 subtractions (mm_kernel_mma's AP 4) */
template <bool R16, bool SUB = false>
static __device__ __forceinline__ void mma_q4k_sb(const uint4 &q0a, const uint4 &q0b, const uint4 &q1a, const uint4 &q1b, uint32_t sw0, uint32_t sw1, const uint4 &x0,
                                                  const uint4 &x1, const int2 &bs, float da, const k4_sel &ks, int b, float &t0, float &t1) {
    const uint32_t X[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const uint32_t Q0[8] = {q0a.x, q0a.y, q0a.z, q0a.w, q0b.x, q0b.y, q0b.z, q0b.w};
    const uint32_t Q1[8] = {q1a.x, q1a.y, q1a.z, q1a.w, q1b.x, q1b.y, q1b.z, q1b.w};
    int clo[4] = {0, 0, 0, 0}, chi[4] = {0, 0, 0, 0};
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const uint32_t m = SUB ? 0xFFFFFFFFu : 0x0F0F0F0Fu, mh = 0xF0F0F0F0u;
        mma_u8s8(clo, Q0[2 * t] & m, R16 ? Q1[2 * t] & m : 0u, Q0[2 * t + 1] & m, R16 ? Q1[2 * t + 1] & m : 0u, X[2 * t], X[2 * t + 1]);
        mma_u8s8(chi, Q0[2 * t] & mh, R16 ? Q1[2 * t] & mh : 0u, Q0[2 * t + 1] & mh, R16 ? Q1[2 * t + 1] & mh : 0u, X[2 * t],
                 X[2 * t + 1]);
    }
    if (SUB) {
        clo[0] -= chi[0];
        clo[2] -= chi[2];
    }
    /* the mins' activation sums of sub-blocks 2c, 2c + 1 (two 16-element sums each), as mv_act_load forms them */
    const int b0 = (int)(int16_t)(bs.x & 0xffff) + (int)(int16_t)(bs.x >> 16);
    const int b1 = (int)(int16_t)(bs.y & 0xffff) + (int)(int16_t)(bs.y >> 16);
    t0 = k4_term_sums<true>(ks, shfl_idx(sw0, b), shfl_idx(sw0, b + 1), shfl_idx(sw0, b + 2), shfl_idx(sw0, b + 3), clo[0], chi[1] >> 4,
                            b0, b1, da);
    if (R16)
        t1 = k4_term_sums<true>(ks, shfl_idx(sw1, b), shfl_idx(sw1, b + 1), shfl_idx(sw1, b + 2), shfl_idx(sw1, b + 3), clo[2],
                                chi[3] >> 4, b0, b1, da);
}
/* Lane (g, c)'s Q4_K activation side of super-block i of (qs, bs, d): sub-block g's 32 quants where its chunk holds them
 * (g / 2 == c; x0, x1 stay as they are in the other lanes), the 16-element sums of sub-blocks 2c, 2c + 1 (bsv), the
 * scale (da). Shared by mm_kernel_mma's activation forms and mm_kernel_mmx; the Q6_K twin is mma_q6k_act. */
static __device__ __forceinline__ void mma_q4k_quants(const int8_t *qs, const int16_t *bs, int64_t i, int g, int c, uint4 &x0, uint4 &x1,
                                                      int2 &bsv) {
    if ((g >> 1) == c) {
        const uint4 *xp = (const uint4 *)(qs + i * QK_K + 32 * g);
        x0 = xp[0]; x1 = xp[1];
    }
    bsv = *(const int2 *)(bs + i * 16 + 4 * c);
}
static __device__ __forceinline__ void mma_q4k_act(const int8_t *qs, const int16_t *bs, const float *d, int64_t i, int g, int c, uint4 &x0,
                                                   uint4 &x1, int2 &bsv, float &da) {
    mma_q4k_quants(qs, bs, i, g, c, x0, x1, bsv);
    da = d[i];
}
/* The deferred-norm form (BK_ACT_Q8_KD: a scale every 16 activation values, the RMS scale applied after the row's sum):
 * the same MMAs as mma_q4k_sb's SUB form, their sums kept apart by half sub-block (MMAs t 0, 1 take bytes 0-15 of the
 * lane's chunk, elements 0-15 of sub-blocks 2c and 2c + 1; t 2, 3 elements 16-31), so each integer sum meets its own
 * scale. A row's lane term: the four groups' (sub-block 2c's halves, then 2c + 1's) scale x sub-block scale x sum, and
 * the same for the mins against the 16-value sums, added in that order in pairs, reduced over the row's 4 lanes, then
 * d x I - dmin x M (q8_kd_dot_q4_K_ref in dot_ref.c forms it the same way). */
static __device__ __forceinline__ float k4_term_kd(const k4_sel &ks, uint32_t s0, uint32_t s1, uint32_t s2, uint32_t dm, int la, int lb,
                                                   int ha, int hb, const int2 &bs, const float4 &da) {
    const uint32_t X = k4_scales(ks, s0, s1, s2);
    const int sc0 = (int)(X & 0xff), sc1 = (int)((X >> 8) & 0xff), m0 = (int)((X >> 16) & 0xff), m1 = (int)(X >> 24);
    const int b0 = (int)(int16_t)(bs.x & 0xffff), b1 = (int)(int16_t)(bs.x >> 16), b2 = (int)(int16_t)(bs.y & 0xffff),
              b3 = (int)(int16_t)(bs.y >> 16);
    float I = __fadd_rn(__fadd_rn(__fmul_rn(da.x, (float)(sc0 * la)), __fmul_rn(da.y, (float)(sc0 * lb))),
                        __fadd_rn(__fmul_rn(da.z, (float)(sc1 * ha)), __fmul_rn(da.w, (float)(sc1 * hb))));
    float M = __fadd_rn(__fadd_rn(__fmul_rn(da.x, (float)(m0 * b0)), __fmul_rn(da.y, (float)(m0 * b1))),
                        __fadd_rn(__fmul_rn(da.z, (float)(m1 * b2)), __fmul_rn(da.w, (float)(m1 * b3))));
    I = __fadd_rn(I, shfl_xor(I, 1)); I = __fadd_rn(I, shfl_xor(I, 2));
    M = __fadd_rn(M, shfl_xor(M, 1)); M = __fadd_rn(M, shfl_xor(M, 2));
    return __fsub_rn(__fmul_rn(fp16_to_fp32((uint16_t)(dm & 0xffff)), I), __fmul_rn(fp16_to_fp32((uint16_t)(dm >> 16)), M));
}
template <bool R16>
static __device__ __forceinline__ void mma_q4k_sb_kd(const uint4 &q0a, const uint4 &q0b, const uint4 &q1a, const uint4 &q1b, uint32_t sw0,
                                                     uint32_t sw1, const uint4 &x0, const uint4 &x1, const int2 &bs, const float4 &da,
                                                     const k4_sel &ks, int b, float &t0, float &t1) {
    const uint32_t X[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const uint32_t Q0[8] = {q0a.x, q0a.y, q0a.z, q0a.w, q0b.x, q0b.y, q0b.z, q0b.w};
    const uint32_t Q1[8] = {q1a.x, q1a.y, q1a.z, q1a.w, q1b.x, q1b.y, q1b.z, q1b.w};
    int clo[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}}, chi[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const uint32_t mh = 0xF0F0F0F0u;
        mma_u8s8(clo[t >> 1], Q0[2 * t], R16 ? Q1[2 * t] : 0u, Q0[2 * t + 1], R16 ? Q1[2 * t + 1] : 0u, X[2 * t], X[2 * t + 1]);
        mma_u8s8(chi[t >> 1], Q0[2 * t] & mh, R16 ? Q1[2 * t] & mh : 0u, Q0[2 * t + 1] & mh, R16 ? Q1[2 * t + 1] & mh : 0u, X[2 * t],
                 X[2 * t + 1]);
    }
    t0 = k4_term_kd(ks, shfl_idx(sw0, b), shfl_idx(sw0, b + 1), shfl_idx(sw0, b + 2), shfl_idx(sw0, b + 3), clo[0][0] - chi[0][0],
                    clo[1][0] - chi[1][0], chi[0][1] >> 4, chi[1][1] >> 4, bs, da);
    if (R16)
        t1 = k4_term_kd(ks, shfl_idx(sw1, b), shfl_idx(sw1, b + 1), shfl_idx(sw1, b + 2), shfl_idx(sw1, b + 3), clo[0][2] - chi[0][2],
                        clo[1][2] - chi[1][2], chi[0][3] >> 4, chi[1][3] >> 4, bs, da);
}
/* The deferred-norm writer, in warp 0 after the epilogue: lane j < 16 holds residual row r0 + j as just written (xr) and
 * its norm weight (nwv); the 16 rows are one group: v = xr x nw, d = max |v| / 127, quants v x (127 / max |v|) rounded
 * to nearest even, their sum, and the sum of xr^2 by the butterfly over the 16 lanes (quantize_row_q8_kd_ref's order). */
static __device__ __forceinline__ void mma_kd_write(const struct cu_mm_kdq &K, int r0, float xr, float nwv, int lane) {
    const bool on = lane < 16;
    const float v = on ? __fmul_rn(xr, nwv) : 0.f;
    float amax = fabsf(v), s2 = on ? __fmul_rn(xr, xr) : 0.f;
#pragma unroll
    for (int k = 8; k >= 1; k >>= 1) {
        amax = fmaxf(amax, shfl_xor(amax, k));
        s2 = __fadd_rn(s2, shfl_xor(s2, k));
    }
    const float is = amax > 0.f ? __fdiv_rn(127.f, amax) : 0.f;
    const int q = __float2int_rn(__fmul_rn(v, is));
    int qsum = q;
#pragma unroll
    for (int k = 8; k >= 1; k >>= 1) qsum += shfl_xor(qsum, k);
    if (on) K.qs[r0 + lane] = (int8_t)q;
    if (lane == 0) {
        K.d[r0 / 16] = __fdiv_rn(amax, 127.f);
        K.bs[r0 / 16] = (int16_t)qsum;
        K.ssq[r0 / 16] = s2;
    }
}
/* The reader's RMS scale from the row's sums of squares every 16 (G of them, n columns): lane l adds groups l, l + 32, ..
 * in turn (8 at most: rows of up to 4,096 columns), then the butterfly over the warp; 1 / sqrt(sum / n + eps) in every
 * lane (q8_kd_rms_ref's order). The loads are issued right after the dependency wait, the sum taken in the epilogue. */
struct kd_rms_part { float v[8]; };
static __device__ __forceinline__ void kd_rms_load(const cu_act_view &a, int lane, kd_rms_part &p) {
    const int G = (int)(a.n / 16);
#pragma unroll
    for (int k = 0; k < 8; k++) p.v[k] = lane + 32 * k < G ? a.kd_ssq[lane + 32 * k] : 0.f;
}
static __device__ __forceinline__ float kd_rms(const cu_act_view &a, const kd_rms_part &p) {
    float s = p.v[0];
#pragma unroll
    for (int k = 1; k < 8; k++) s = __fadd_rn(s, p.v[k]);
#pragma unroll
    for (int k = 16; k >= 1; k >>= 1) s = __fadd_rn(s, shfl_xor(s, k));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)a.n), a.kd_eps)));
}
/* The activation lines of the warp's super-blocks after its first (sb0 + 1 .. sb0 + SBW - 1: the quants' two 128-byte
 * lines, the 16-element sums' line and the scale's), asked into L1 by lanes 0 .. 4 (SBW - 1) - 1 right after the
 * dependency wait. The loop over a warp's super-blocks loads each one's activation after the previous one's terms (the
 * compiler keeps them there: registers), so without it every super-block after the first waits one more L2 round trip
 * in turn (SASS: 1 for SBW 2, 3 for SBW 4); with it those loads find L1. A hint: nothing read changes, so the bits do
 * not. (mm_kernel_mma's AP 1, cu_mm_cfg.mma bit 32) */
template <int SBW>
static __device__ __forceinline__ void mma_act_prefetch(const cu_act_view &a, int sb0, int n_sb, int lane) {
    const int s = 1 + (lane >> 2), q = lane & 3, sb = sb0 + s;
    if (s < SBW && sb < n_sb)
        gpu_prefetch_l1(q < 2 ? (const void *)(a.k_qs + (int64_t)sb * QK_K + 128 * q)
                              : q == 2 ? (const void *)(a.k_bs + (int64_t)sb * 16) : (const void *)(a.k_d + sb));
}
/* The same super-blocks' activation copied into the warp's shared-memory stage instead (AP 2, cu_mm_cfg.mma bit 64), by
 * asynchronous copies issued right after the wait (no register held while they are in flight): where the L1 prefetch
 * is a hint, this form is sure to take the round trips out. Stage slot s - 1 (MMA_STAGE_SB bytes) holds super-block
 * sb0 + s's 256 quants (lanes 0-15), its 16 16-element sums (lanes 16, 17) and the aligned 16-byte chunk of the scales
 * that holds its scale (lane 18; a row's scales need not start 16-aligned, but the chunk lies between the quants and
 * the sums of the act's buffer). The terms of sb0 + s read their activation from there (mma_act_at) after the warp's
 * copies are waited for (mma_act_wait). The same bytes, so the same bits. */
#define MMA_STAGE_SB 304
template <int SBW>
static __device__ __forceinline__ void mma_act_stage(const cu_act_view &a, int sb0, int n_sb, int lane, uint8_t *stg) {
#pragma unroll
    for (int s = 1; s < SBW; s++) {
        const int sb = sb0 + s;
        if (sb >= n_sb || lane > 18) continue;
        uint8_t *d = stg + (s - 1) * MMA_STAGE_SB;
        if (lane < 16) gpu_cp16(d + 16 * lane, a.k_qs + (int64_t)sb * QK_K + 16 * lane);
        else if (lane < 18) gpu_cp16(d + 256 + 16 * (lane - 16), a.k_bs + (int64_t)sb * 16 + 8 * (lane - 16));
        else gpu_cp16(d + 288, (const void *)((uintptr_t)(a.k_d + sb) & ~(uintptr_t)15));
    }
    gpu_cp_commit();
}
static __device__ __forceinline__ void mma_act_wait(void) {
    gpu_cp_wait_group<0>();
    __syncwarp();
}
/* Where the staged form reads super-block sb0 + s's activation: the act itself for s 0 (index sb), its stage slot after
 * (index 0; the scale at its place in the staged 16-byte chunk). */
struct mma_act_src {
    const int8_t *qs;
    const int16_t *bs;
    const float *d;
    int64_t i;
};
static __device__ __forceinline__ mma_act_src mma_act_at(const cu_act_view &a, const uint8_t *stg, int s, int sb) {
    if (s == 0) return mma_act_src{a.k_qs, a.k_bs, a.k_d, sb};
    const uint8_t *d = stg + (s - 1) * MMA_STAGE_SB;
    return mma_act_src{(const int8_t *)d, (const int16_t *)(d + 256), (const float *)(d + 288) + (((uintptr_t)(a.k_d + sb) & 15) >> 2), 0};
}
/* A row's terms over the warp's SBW (2 or 4) super-blocks, added as mv_warp_part's butterfly adds them */
template <int SBW> static __device__ __forceinline__ float mma_sb_sum(const float (&t)[SBW]) {
    if constexpr (SBW == 2) return __fadd_rn(t[0], t[1]);
    else return __fadd_rn(__fadd_rn(t[0], t[1]), __fadd_rn(t[2], t[3]));
}
/* The warp's 16 (RT 8: 8) rows of its SBW super-blocks, Q4_K: the loads before the dependency wait, the MMAs after
 * it; y0, y1: the partial sums of rows g and g + 8 (in every lane of the row). stg: the warp's stage (AP 2), else
 * NULL. */
template <int SBW, int RT, int AP>
static __device__ __forceinline__ void mma_rows_q4_K(const struct cu_mm_args &P, const cu_mm_seg &S, const uint8_t *wb, int rows,
                                                     int n_sb, int wid, int lane, const mma_conv &cv, uint8_t *stg, float &y0,
                                                     float &y1, unsigned long long *tl = NULL, kd_rms_part *rmsp = NULL) {
    const int g = lane >> 2, c = lane & 3;
    const k4s_w zw{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0};
    k4s_w w0[SBW], w1[SBW]; /* rows g and g + 8 */
#pragma unroll
    for (int s = 0; s < SBW; s++) {
        const int sb = wid * SBW + s;
        w0[s] = sb < n_sb && g < rows ? k4s_load(wb + (size_t)g * S.stride, n_sb, sb, c) : zw;
        w1[s] = RT == 16 && sb < n_sb && g + 8 < rows ? k4s_load(wb + (size_t)(g + 8) * S.stride, n_sb, sb, c) : zw;
    }
    cv.load(P, rows);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    if constexpr (AP == 2) mma_act_stage<SBW>(P.a, wid * SBW, n_sb, lane, stg);
    if constexpr (AP == 1) mma_act_prefetch<SBW>(P.a, wid * SBW, n_sb, lane);
    if constexpr (AP == 6 || AP == 7)
        if (threadIdx.x == 0) mma_next_l2<RT>(P);
    if constexpr (AP == 7)
        if (wid == 0) kd_rms_load(P.a, lane, *rmsp);
    TL_MARK(tl, 1);
    const k4_sel ks = k4_sel_make(c);
    const int b = lane & ~3;
    float t0[SBW], t1[SBW];
    if constexpr (AP == 5) { /* every super-block's activation loaded before the first MMA: one L2 round trip */
        uint4 x0[SBW], x1[SBW];
        int2 bs[SBW];
        float da[SBW];
#pragma unroll
        for (int s = 0; s < SBW; s++) {
            const int sb = wid * SBW + s;
            x0[s] = x1[s] = make_uint4(0, 0, 0, 0);
            bs[s] = make_int2(0, 0);
            da[s] = 0.f;
            if (sb < n_sb) mma_q4k_act(P.a.k_qs, P.a.k_bs, P.a.k_d, sb, g, c, x0[s], x1[s], bs[s], da[s]);
        }
#pragma unroll
        for (int s = 0; s < SBW; s++)
            mma_q4k_sb<RT == 16, true>(w0[s].q0, w0[s].q1, w1[s].q0, w1[s].q1, w0[s].sw, w1[s].sw, x0[s], x1[s], bs[s], da[s], ks, b, t0[s], t1[s]);
    } else
#pragma unroll
    for (int s = 0; s < SBW; s++) {
        const int sb = wid * SBW + s;
        const bool on = sb < n_sb;
        /* B: sub-block g's 32 quants in the lane whose chunk holds them (g / 2 == c), zeros in the others */
        uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
        int2 bs = make_int2(0, 0);
        float da = 0.f;
        if constexpr (AP == 2) {
            if (s == 1) mma_act_wait();
            const mma_act_src A = mma_act_at(P.a, stg, s, sb);
            if (on) mma_q4k_act(A.qs, A.bs, A.d, A.i, g, c, x0, x1, bs, da);
        } else if (AP == 3 && on) { /* copy blockIdx % copies of the activation (cu_act_view.copies; bench_gemv's measurement) */
            const int64_t ao = (int64_t)(blockIdx.x % (unsigned)P.a.copies) * P.a.copy_bytes;
            mma_q4k_act((const int8_t *)((const char *)P.a.k_qs + ao), (const int16_t *)((const char *)P.a.k_bs + ao),
                        (const float *)((const char *)P.a.k_d + ao), sb, g, c, x0, x1, bs, da);
        } else if (AP == 7) { /* the deferred-norm form: a scale every 16 values */
            float4 d4 = make_float4(0.f, 0.f, 0.f, 0.f);
            if (on) {
                mma_q4k_quants(P.a.k_qs, P.a.k_bs, sb, g, c, x0, x1, bs);
                d4 = *(const float4 *)(P.a.kd_d + (int64_t)sb * 16 + 4 * c); /* groups 4c .. 4c + 3 */
            }
            mma_q4k_sb_kd<RT == 16>(w0[s].q0, w0[s].q1, w1[s].q0, w1[s].q1, w0[s].sw, w1[s].sw, x0, x1, bs, d4, ks, b, t0[s], t1[s]);
            continue;
        } else if (on) mma_q4k_act(P.a.k_qs, P.a.k_bs, P.a.k_d, sb, g, c, x0, x1, bs, da);
        mma_q4k_sb<RT == 16, AP == 4 || AP == 6>(w0[s].q0, w0[s].q1, w1[s].q0, w1[s].q1, w0[s].sw, w1[s].sw, x0, x1, bs, da, ks, b, t0[s], t1[s]);
    }
    y0 = mma_sb_sum<SBW>(t0);
    y1 = 0.f;
    if constexpr (RT == 16) y1 = mma_sb_sum<SBW>(t1);
}
/* Lane (g, c)'s Q6_K activation side of super-block sb, (h, k) = (c / 2, c % 2): the 16 quants of its half of group
 * 2h + k where it owns them (own: g / 2 == c; odd = g % 2 picks the half), the -32 offsets' sums bb, the scale da.
 * Shared by mma_rows_q6_K and the tiled chain (mg2_terms6). */
static __device__ __forceinline__ void mma_q6k_act(const int8_t *k_qs, const int16_t *k_bs, const float *k_d, int64_t sb, int h, int k,
                                                   bool odd, bool own, uint4 &xl, uint4 &xh, int (&bb)[4], float &da) {
    const int8_t *aq = k_qs + sb * QK_K + 128 * h + 32 * k + 16 * odd;
    if (own) { xl = *(const uint4 *)aq; xh = *(const uint4 *)(aq + 64); }
    const int16_t *bs = k_bs + sb * 16 + 8 * h + 2 * k;
    bb[0] = 32 * (int)bs[0]; bb[1] = 32 * (int)bs[1]; bb[2] = 32 * (int)bs[4]; bb[3] = 32 * (int)bs[5];
    da = k_d[sb];
}
/* One Q6_K super-block of rows g (w0) and, R16, g + 8 (w1, in the MMA's second half) on the tensor cores: the lane's
 * activation words (xl, xh where it owns them, odd its half), shifts (shl, shr) of its k -> q6_term's float terms t0,
 * t1 (the same in the row's 4 lanes). Shared by mma_rows_q6_K (8 rows) and the tiled chain (mg2_terms6, 16). */
template <bool R16>
static __device__ __forceinline__ float mma_q6k_sb(const q6_w &w0, const q6_w &w1, const uint4 &xl, const uint4 &xh, bool odd, int shl,
                                                   int shr, const int (&bb)[4], float da, float *t1) {
    /* words 4 (g % 2) .. + 3 of each half where this lane owns them */
    const uint32_t XL[8] = {odd ? 0u : xl.x, odd ? 0u : xl.y, odd ? 0u : xl.z, odd ? 0u : xl.w,
                            odd ? xl.x : 0u, odd ? xl.y : 0u, odd ? xl.z : 0u, odd ? xl.w : 0u};
    const uint32_t XH[8] = {odd ? 0u : xh.x, odd ? 0u : xh.y, odd ? 0u : xh.z, odd ? 0u : xh.w,
                            odd ? xh.x : 0u, odd ? xh.y : 0u, odd ? xh.z : 0u, odd ? xh.w : 0u};
    const uint32_t L0[8] = {w0.l0.x, w0.l0.y, w0.l0.z, w0.l0.w, w0.l1.x, w0.l1.y, w0.l1.z, w0.l1.w};
    const uint32_t H0[8] = {w0.h0.x, w0.h0.y, w0.h0.z, w0.h0.w, w0.h1.x, w0.h1.y, w0.h1.z, w0.h1.w};
    const uint32_t L1[8] = {w1.l0.x, w1.l0.y, w1.l0.z, w1.l0.w, w1.l1.x, w1.l1.y, w1.l1.z, w1.l1.w};
    const uint32_t H1[8] = {w1.h0.x, w1.h0.y, w1.h0.z, w1.h0.w, w1.h1.x, w1.h1.y, w1.h1.z, w1.h1.w};
    int clo[4] = {0, 0, 0, 0}, chi[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t m = 0x0F0F0F0Fu, q = 0x30303030u;
        /* 6-bit quants of words 2i, 2i + 1: the low nibbles (or ql >> 4) with the qh pair at bits 4-5 */
        const uint32_t lo0 = (L0[2 * i] & m) | ((H0[2 * i] << shl) & q), lo1 = (L0[2 * i + 1] & m) | ((H0[2 * i + 1] << shl) & q);
        const uint32_t hi0 = ((L0[2 * i] >> 4) & m) | ((H0[2 * i] >> shr) & q), hi1 = ((L0[2 * i + 1] >> 4) & m) | ((H0[2 * i + 1] >> shr) & q);
        const uint32_t lo8 = R16 ? (L1[2 * i] & m) | ((H1[2 * i] << shl) & q) : 0u;
        const uint32_t lo9 = R16 ? (L1[2 * i + 1] & m) | ((H1[2 * i + 1] << shl) & q) : 0u;
        const uint32_t hi8 = R16 ? ((L1[2 * i] >> 4) & m) | ((H1[2 * i] >> shr) & q) : 0u;
        const uint32_t hi9 = R16 ? ((L1[2 * i + 1] >> 4) & m) | ((H1[2 * i + 1] >> shr) & q) : 0u;
        mma_u8s8(clo, lo0, lo8, lo1, lo9, XL[2 * i], XL[2 * i + 1]);
        mma_u8s8(chi, hi0, hi8, hi1, hi9, XH[2 * i], XH[2 * i + 1]);
    }
    if (R16) *t1 = q6_term_sums<true>(w1.sc, w1.d, clo[2], clo[3], chi[2], chi[3], bb, da);
    return q6_term_sums<true>(w0.sc, w0.d, clo[0], clo[1], chi[0], chi[1], bb, da);
}
/* The same for Q6_K rows, 8 a warp (rows g; 18 words a row and super-block). Lane (g, c)'s chunk (h, k) = (c / 2, c % 2)
 * holds 32 quants of 4 16-element scale groups: elements e0 .. e0 + 31 (e0 = 128h + 32k; words 0-3 and 4-7 of its ql
 * bytes, low nibbles) and e0 + 64 .. e0 + 95 (high nibbles), 6-bit with the qh bits as q6_term forms them. MMA t of the
 * low quants takes words 2t, 2t + 1: for t < 2 the group e0 .. e0 + 15, whose activation lane (2c, c) holds (column 2c),
 * for t >= 2 the next group, from lane (2c + 1, c) (column 2c + 1); the high quants the same against e0 + 64. So
 * lane (g, c) with g / 2 == c holds activation words 4 (g % 2) .. + 3 of each half, zeros in the others, and the two
 * accumulators' columns 2c, 2c + 1 are the column-split lane's four sums (sl0, sl1; sh0, sh1). */
template <int SBW, int RT, int AP>
static __device__ __forceinline__ void mma_rows_q6_K(const struct cu_mm_args &P, const cu_mm_seg &S, const uint8_t *wb, int rows,
                                                     int n_sb, int wid, int lane, const mma_conv &cv, uint8_t *stg, float &y0,
                                                     float &y1) {
    const int g = lane >> 2, c = lane & 3, h = c >> 1, k = c & 1;
    const uint4 z = make_uint4(0, 0, 0, 0);
    q6_w w[SBW], w1[SBW]; /* rows g and (RT 16) g + 8, in the MMA's second half as the tiled chain's mg2_terms6 takes them */
#pragma unroll
    for (int s = 0; s < SBW; s++) {
        const int sb = wid * SBW + s;
        w[s] = sb < n_sb && g < rows ? q6_load(wb + (size_t)g * S.stride, n_sb, sb, c) : q6_w{z, z, z, z, 0, 0};
        w1[s] = RT == 16 && sb < n_sb && g + 8 < rows ? q6_load(wb + (size_t)(g + 8) * S.stride, n_sb, sb, c) : q6_w{z, z, z, z, 0, 0};
    }
    cv.load(P, rows);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    if constexpr (AP == 2) mma_act_stage<SBW>(P.a, wid * SBW, n_sb, lane, stg);
    if constexpr (AP == 1) mma_act_prefetch<SBW>(P.a, wid * SBW, n_sb, lane);
    if constexpr (AP == 6)
        if (threadIdx.x == 0) mma_next_l2<RT>(P);
    const int shl = 4 - 2 * k, shr = 2 * k;
    const bool own = (g >> 1) == c, odd = g & 1;
    float t[SBW], t1[SBW];
#pragma unroll
    for (int s = 0; s < SBW; s++) {
        const int sb = wid * SBW + s;
        const bool on = sb < n_sb;
        uint4 xl = z, xh = z;
        int bb[4] = {0, 0, 0, 0};
        float da = 0.f;
        if constexpr (AP == 2) {
            if (s == 1) mma_act_wait();
            const mma_act_src A = mma_act_at(P.a, stg, s, sb);
            if (on) mma_q6k_act(A.qs, A.bs, A.d, A.i, h, k, odd, own, xl, xh, bb, da);
        } else if (on) mma_q6k_act(P.a.k_qs, P.a.k_bs, P.a.k_d, sb, h, k, odd, own, xl, xh, bb, da);
        t[s] = mma_q6k_sb<RT == 16>(w[s], RT == 16 ? w1[s] : w[s], xl, xh, odd, shl, shr, bb, da, RT == 16 ? &t1[s] : NULL);
    }
    y0 = mma_sb_sum<SBW>(t);
    y1 = 0.f;
    if constexpr (RT == 16) y1 = mma_sb_sum<SBW>(t1);
}

/* KT: the K-quant types of the launch (1 Q4_K, 2 Q6_K, 3 both); RT: rows a CTA (16 for Q4_K alone at SBW 2 and, with
 * cu_mm_cfg.mma bit 8192, for launches with Q6_K rows; else 8); AP:
 * the activation of a warp's later super-blocks after the wait, 0 as the loop loads it, 1 prefetched into L1
 * (mma_act_prefetch), 2 staged in shared memory (mma_act_stage: W x (SBW - 1) x MMA_STAGE_SB bytes of dynamic shared
 * memory) (cu_mm_cfg.mma bits 32, 64), 3 read from copy blockIdx % copies of the Q8_K part (cu_act_view.copies > 1: a
 * measurement of the act's L2 lines read by every CTA at once; bench_gemv BENCH_GEMV_ACT_COPIES), 4 as 0 with the Q4_K
 * low nibbles' sums by subtraction (mma_q4k_sb's SUB; cu_mm_cfg.mma bit 512), 5 as 4 with every super-block's activation
 * loaded before the first MMA (bit 1024: one L2 round trip after the wait where the loop takes SBW), 6 as 4 with the
 * next round's rows asked into L2 right after the release (mma_next_l2; bit 2048). */
template <int SBW, int RT, int KT, int LBT = 512, int LBM = 1, int AP = 0>
static __global__ void __launch_bounds__(LBT, LBM) mm_kernel_mma(const struct cu_mm_args P) {
    static_assert(RT == 16 || RT == 8, "rows a CTA: 16 (rows g and g + 8) or 8");
    static_assert(KT == 1 || SBW == 2, "Q6_K: two super-blocks a warp");
    __shared__ float part[16][RT];
    __shared__ float conv_pre[RT][CU_CONV_PRE]; /* cu_mm_conv: each output's state and weights */
    __shared__ int conv_slot[RT];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int si = mv_seg_of(P);
    const cu_mm_seg &S = P.seg[si];
    const int r0 = ((int)blockIdx.x - S.cta0) * RT, rows = min(RT, S.n_rows - r0);
    const bool conv = P.conv.on && si == P.conv.seg;
    const int n_sb = (int)(P.a.n / QK_K);
    const uint8_t *wb = S.w + mv_woff((size_t)r0 * S.stride, S.stride, S.n_rows);
    if (S.type != GGML_TYPE_Q4_K && S.type != GGML_TYPE_Q6_K) { /* Q8_0 / F32 rows, as the column-split kernel takes them */
        mv_other_cta(P, S, wb, r0, rows, 0, 1, lane, wid, W);
        return;
    }
    const mma_conv cv{conv, r0, conv_pre, conv_slot};
    float y0, y1 = 0.f;
    /* the deferred-norm writer's norm weights, before the wait (weights: no launch writes them) */
    constexpr bool KDW = RT == 16 && KT == 1;
    const float nwv = KDW && P.kdq.on && (int)threadIdx.x < rows ? P.kdq.nw[r0 + (int)threadIdx.x] : 0.f;
    kd_rms_part rmsp;
    unsigned long long *tl = NULL;
#ifdef VLLMC_MV_TIMELINE
    unsigned long long tlv[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* (Q6_K rows stamp no wait: 0) */
    tl = tlv;
    TL_MARK(tl, 0);
#endif
    extern __shared__ __align__(16) uint8_t mma_stage[];
    uint8_t *stg = AP == 2 ? mma_stage + (size_t)wid * (SBW - 1) * MMA_STAGE_SB : NULL;
    if (KT == 1 || (KT == 3 && S.type == GGML_TYPE_Q4_K)) mma_rows_q4_K<SBW, RT, AP>(P, S, wb, rows, n_sb, wid, lane, cv, stg, y0, y1, tl, &rmsp);
    else mma_rows_q6_K<SBW, RT, AP>(P, S, wb, rows, n_sb, wid, lane, cv, stg, y0, y1);
    TL_MARK(tl, 2);
    const float resv = mv_res_load<1>(S, r0, rows);
    const int g = lane >> 2;
    if ((lane & 3) == 0) {
        part[wid][g] = y0;
        if (RT == 16) part[wid][g + 8] = y1;
    }
    __syncthreads();
    float rms = 1.f;
    if constexpr (AP == 7)
        if (wid == 0) rms = kd_rms(P.a, rmsp);
    float xr = 0.f; /* (RT <= 32 rows: thread j < rows is lane j of warp 0) */
    for (int j = threadIdx.x; j < rows; j += blockDim.x) {
        float y = part[0][j];
        for (int k = 1; k < W; k++) y = __fadd_rn(y, part[k][j]);
        if constexpr (AP == 7) y = __fmul_rn(y, rms);
        xr = mv_out<1>(P, S, 0, r0, j, y, resv, conv, conv_pre[j], conv_slot[j]);
    }
    if constexpr (KDW)
        if (P.kdq.on && !P.kdq.skip && wid == 0) mma_kd_write(P.kdq, r0, xr, nwv, lane);
#ifdef VLLMC_MV_TIMELINE
    TL_MARK(tl, 3);
    tl_store(tl);
#endif
}
#endif
uint64_t cu_mma_launches, cu_mma_ap_launches[7], cu_mma_q6r16_launches;
extern "C" uint64_t backend_cuda_mma_launches(void) { return cu_mma_launches; }
extern "C" uint64_t backend_cuda_mma_q6r16_launches(void) { return cu_mma_q6r16_launches; }
extern "C" uint64_t backend_cuda_mma_ap_launches(int ap) { return ap >= 1 && ap <= 6 ? cu_mma_ap_launches[ap] : 0; }
#if !defined(VLLMC_HIP)
/* The tensor-core mat-vec with a second tile a CTA in shared memory (mm_kernel_mmx, defined with the bulk-copy helpers
 * below; cu_mm_cfg.mma bits 128 / 256). */
template <int XR, int LBT = 512, int LBM = 1> static __global__ void __launch_bounds__(LBT, LBM) mm_kernel_mmx(const struct cu_mm_args P);
#endif
uint64_t cu_mmx_launches;
int cu_mmx_rows = 8192;
extern "C" uint64_t backend_cuda_mmx_launches(void) { return cu_mmx_launches; }
int cu_lmh_ns = 0, cu_lmh_rows = 65536; /* mm_kernel_lmh: its ring's tiles (0: off) and the launches it takes */
int cu_lmh_co = 0; /* mm_kernel_lmh with at most cu_lmh_co CTAs an SM that let the next launch in at their start (0: off) */
uint64_t cu_lmh_launches;
extern "C" uint64_t backend_cuda_lmh_launches(void) { return cu_lmh_launches; }
#if !defined(VLLMC_HIP)
static bool mm_lmh_ok(const struct cu_mm_args &a, int n_act);
static bool mm_lmh_launch(const struct cu_mm_args &a, gpuStream_t s);
#endif

/* Rows a CTA of mm_kernel_sbt for rows of n_sb super-blocks (n_sb x R threads, a multiple of 32, at most
 * SBT_MAX_THREADS); 0 where none fits. */
static int sbt_rows(int n_sb) {
    for (int R = 16; R >= 8; R >>= 1)
        if ((n_sb * R) % 32 == 0 && n_sb * R <= SBT_MAX_THREADS) return R;
    return n_sb * 32 <= SBT_MAX_THREADS ? 32 : 0;
}
uint64_t cu_sbt_launches;
extern "C" uint64_t backend_cuda_sbt_launches(void) { return cu_sbt_launches; }

/* The instance for super-blocks a warp and the K-quant types present (1 Q4_K, 2 Q6_K, 3 both). */
typedef void (*mm_cols_fn)(const struct cu_mm_args);
#if !defined(VLLMC_HIP)
/* The instance with the later super-blocks' activation prefetched (ap 1) or staged (ap 2). */
template <int SBW, int RT, int KT> static mm_cols_fn mma_ap(int ap) {
    return ap == 1 ? mm_kernel_mma<SBW, RT, KT, 512, 1, 1> : ap == 2 ? mm_kernel_mma<SBW, RT, KT, 512, 1, 2>
         : ap == 4 ? mm_kernel_mma<SBW, RT, KT, 512, 1, 4> : ap == 5 ? mm_kernel_mma<SBW, RT, KT, 512, 1, 5>
         : ap == 6 ? mm_kernel_mma<SBW, RT, KT, 512, 1, 6> : mm_kernel_mma<SBW, RT, KT, 512, 1, 3>;
}
#endif
/* The CTAs of kernel k at `threads` threads and `smem` bytes of dynamic shared memory resident at once (its occupancy x
 * the SMs): cu_mm_args.pf_next, mm_kernel_lmh's grid; a huge value (no next round) where the query fails. Kept a
 * (kernel, threads, smem) triple, unsynchronized (backends on two host threads may race on an entry): any value is safe
 * for mma_next_l2, which only ever prefetches rows of the launch itself. */
#define MM_RESIDENT_NONE (1 << 30)
template <typename K> static int mm_resident(K *k, int threads, size_t smem = 0) {
    static const void *pk[32]; /* (per instance of this template: one a kernel signature) */
    static int pt[32], pn[32];
    static size_t ps[32];
    int i = 0;
    while (i < 32 && pk[i] && !(pk[i] == (const void *)k && pt[i] == threads && ps[i] == smem)) i++;
    if (i < 32 && pk[i]) return pn[i];
    int per = 0, dev = 0, sms = 0;
    if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, threads, smem) != gpuSuccess || gpuGetDevice(&dev) != gpuSuccess ||
        gpuDeviceGetSMCount(&sms, dev) != gpuSuccess || per < 1) {
        (void)gpuGetLastError();
        return MM_RESIDENT_NONE;
    }
    if (i < 32) { pk[i] = (const void *)k; pt[i] = threads; ps[i] = smem; pn[i] = per * sms; }
    return per * sms;
}
template <int U, int NA>
static mm_cols_fn mm_cols_pick(int sbw, int kt) {
    if (sbw == 2) return kt == 1 ? mm_kernel_cols<2, 1, U, NA> : kt == 2 ? mm_kernel_cols<2, 2, U, NA> : mm_kernel_cols<2, 3, U, NA>;
    return kt == 1 ? mm_kernel_cols<4, 1, U, NA> : kt == 2 ? mm_kernel_cols<4, 2, U, NA> : mm_kernel_cols<4, 3, U, NA>;
}

/* The launch of segments order[0 .. n-1] of args, in that order: the CTA / row / tile offsets and totals recounted, the
 * conv's segment and the feeding bits of the fused norm renumbered with their segments. */
static void mm_select(const struct cu_mm_args *args, const int *order, int n, struct cu_mm_args *out) {
    *out = *args;
    out->n_seg = 0; out->n_ctas = 0; out->total_rows = 0; out->total_tiles = 0; out->nq.feed = 0;
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        struct cu_mm_seg sg = args->seg[i];
        sg.cta0 = out->n_ctas; sg.row0 = out->total_rows; sg.tile0 = out->total_tiles;
        out->n_ctas += (int32_t)GPU_CEIL_DIV(sg.n_rows, CU_MM_WARPS);
        out->total_rows += sg.n_rows;
        out->total_tiles += (int32_t)GPU_CEIL_DIV(sg.n_rows, 4);
        if (i == args->conv.seg) out->conv.seg = k;
        if (args->nq.feed >> i & 1) out->nq.feed |= 1u << k;
        out->seg[out->n_seg++] = sg;
    }
}
#if !defined(VLLMC_HIP) /* (its callers are CUDA only) */
/* The segments in mask, in their order. */
static void mm_subset(const struct cu_mm_args *args, unsigned mask, struct cu_mm_args *out) {
    int order[CU_MM_MAX_SEG], n = 0;
    for (int i = 0; i < args->n_seg; i++)
        if (mask >> i & 1) order[n++] = i;
    mm_select(args, order, n, out);
}
#endif

uint64_t cu_colx_launches;
extern "C" uint64_t backend_cuda_colx_launches(void) { return cu_colx_launches; }
/* mm_kernel_colx for one activation row (or 2 .. cols_rows: its several-row form) where a segment is Q5_K, IQ4_XS,
 * Q4_0 or Q5_0, or where Q8_0 rows come without K-quant ones (cu_mm_cfg.colx), every segment a type it takes and a
 * row of 256-column groups (of 64 where every segment has 32-element blocks, e.g. 896) that fits 16 warps; false
 * (nothing launched) otherwise. F32 segments first in the grid (their CTAs walk 4-row tiles a warp and take longer, as
 * in mm_launch_cols). */
static bool mm_launch_colx(const struct cu_mm_args *args, gpuStream_t s) {
    if (!cu_mm_cfg.colx || args->n_act < 1 || args->nq.on || args->row_order || args->a.n % 64) return false;
    bool other = false, kq = false, q8 = false, iq4_only = true, q23 = false; /* (iq4_only: F32 rows beside them take mv_other_cta's path) */
    for (int i = 0; i < args->n_seg; i++) {
        const int t = args->seg[i].type;
        if (!colx_type(t) || (args->a.n % QK_K && !colx_b32(t))) return false;
        q23 = q23 || t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K;
        other = other || q23 || t == GGML_TYPE_Q5_K || t == GGML_TYPE_IQ4_XS || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0;
        kq = kq || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
        q8 = q8 || t == GGML_TYPE_Q8_0;
        iq4_only = iq4_only && (t == GGML_TYPE_IQ4_XS || t == GGML_TYPE_F32);
    }
    if (!other && (kq || !q8)) return false; /* (Q4_K / Q6_K launches: mm_launch_cols' kernels) */
    if (args->conv.on && args->seg[args->conv.seg].type == GGML_TYPE_F32) return false;
    const int n_sb = (int)GPU_CEIL_DIV(args->a.n, QK_K), sbw = n_sb <= cu_mm_cfg.cols_sbw2 ? 2 : 4, w = (n_sb + sbw - 1) / sbw;
    if (w > 16) return false;
    int order[CU_MM_MAX_SEG], no = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < args->n_seg; i++)
            if ((args->seg[i].type == GGML_TYPE_F32) == (pass == 0)) order[no++] = i;
    struct cu_mm_args a;
    mm_select(args, order, no, &a);
    /* (colx 2: U 2 for all, comparisons. Rows of more than 16 super-blocks keep 2: at 9,216 columns U 4 measured 11.2 us
     * against 8.6, half the CTAs of 9 warps) */
    const bool mr = args->n_act > 1; /* (several rows: 2 row passes, as mm_kernel_cols' several-row form) */
    const int U = iq4_only && sbw == 2 && !mr && cu_mm_cfg.colx != 2 ? 4 : 2;
    const int rpc = 8 / sbw * U;
    int ctas = 0;
    for (int i = 0; i < a.n_seg; i++) {
        a.seg[i].cta0 = ctas;
        ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, rpc);
    }
    const mm_cols_fn k = q23 ? (mr ? (sbw == 2 ? mm_kernel_colx<2, 2, MV_NA, false, true> : mm_kernel_colx<4, 2, MV_NA, false, true>)
                                   : sbw == 2 ? mm_kernel_colx<2, 2, 1, false, true> : mm_kernel_colx<4, 2, 1, false, true>)
                         : mr ? (sbw == 2 ? mm_kernel_colx<2, 2, MV_NA> : mm_kernel_colx<4, 2, MV_NA>)
                              : sbw == 2 ? (U == 4 ? mm_kernel_colx<2, 4, 1, true> : mm_kernel_colx<2, 2, 1>) : mm_kernel_colx<4, 2, 1>;
    gpu_launch(k, dim3((unsigned)ctas, mr ? (unsigned)GPU_CEIL_DIV(args->n_act, MV_NA) : 1u), dim3(32 * w), 0, s, a);
    cu_colx_launches++;
    return true;
}

uint64_t cu_cols_lb_launches, cu_cols_pf_launches;
extern "C" uint64_t backend_cuda_cols_lb_launches(void) { return cu_cols_lb_launches; }
extern "C" uint64_t backend_cuda_cols_pf_launches(void) { return cu_cols_pf_launches; }

/* The column-split kernel (NA = MV_NA for several activation rows) when every segment is Q4_K, Q6_K, Q8_0 or
 * F32 (one of them K-quant) and a row of 256-column super-blocks fits 16 warps; false (nothing launched) otherwise. */
static bool mm_launch_cols(const struct cu_mm_args *args, gpuStream_t s) {
    const int64_t n = args->a.n;
    if (n % QK_K != 0) return false;
    int kt = 0; /* the K-quant types present: 1 Q4_K, 2 Q6_K */
    for (int i = 0; i < args->n_seg; i++) {
        const int t = args->seg[i].type;
        if (t == GGML_TYPE_Q4_K) kt |= 1;
        else if (t == GGML_TYPE_Q6_K) kt |= 2;
        else if (t != GGML_TYPE_Q8_0 && t != GGML_TYPE_F32) return false;
    }
    const int n_sb = (int)(n / QK_K), sbw = n_sb <= cu_mm_cfg.cols_sbw2 ? 2 : 4, w = (n_sb + sbw - 1) / sbw;
    if (!kt || w > 16) return false;
    if (args->conv.on && args->seg[args->conv.seg].type != GGML_TYPE_Q4_K && args->seg[args->conv.seg].type != GGML_TYPE_Q6_K)
        return false; /* the Q8_0 / F32 rows' path has no conv epilogue */
    /* row groups a CTA: 4 for Q4_K alone, 2 with Q6_K (its 4 groups take 116 registers: measured slower), 2 for
     * several activation rows (NA = MV_NA) */
    const int cfg = cu_mm_cfg.cols[args->total_rows < cu_mm_cfg.rows[0] ? 0 : args->total_rows < cu_mm_cfg.rows[1] ? 1 : 2];
    const bool mr = args->n_act > 1;
    const int U = mr ? 2 : cfg == 2 || cfg == 4 ? cfg : (kt & 2) ? 2 : 4;
    const int rpc = 8 / sbw * U;
    /* the Q8_0 / F32 segments (the GDN's beta / alpha rows) first in the grid: their CTAs walk 4-row tiles a warp and
     * take longer than a K-quant CTA, so as the grid's last CTAs (the segments' order) they started in the last wave
     * and set the launch's end (the in-proj of qwen35-4b: 19.5 -> 15.4 us under ncu, the decode +5-6%: BENCHMARKS.md).
     * The segments are independent. */
    int order[CU_MM_MAX_SEG], no = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < args->n_seg; i++) {
            const int t = args->seg[i].type;
            if ((t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K) == (pass == 1)) order[no++] = i;
        }
    struct cu_mm_args a;
    mm_select(args, order, no, &a);
#if !defined(VLLMC_HIP)
    /* the LM head through a ring of row tiles in shared memory (mm_kernel_lmh: the bits of the column-split instance
     * below, U 2; cu_lmh_ns, off by default) */
    if (!mr && U == 2 && sbw == 2 && mm_lmh_ok(a, (int)args->n_act) && mm_lmh_launch(a, s)) return true;
#endif
    /* one super-block a thread where every K-quant row is Q4_K (one activation row, no fused norm; the same bits as the
     * column-split kernel). Off by default (cu_mm_cfg.sbt 0; VLLMC_CUDA_SBT=16 for rows of up to 16 super-blocks and
     * launches of up to 16,384 rows). In-graph per launch on the qwen35-4b decode it is faster on the GDN in-proj
     * (-15%), attention q / k (-20%) and ssm_out / attn_output (-5..-9%), slower on gate + up (18,432 rows: +6.5%) and
     * the 9,216-column down rows (+84%: 288-thread CTAs, 2 an SM at 96 registers); but with it on where it is faster
     * the norm + quantize launches after it cost as much more, and the decode measured level (BENCHMARKS.md
     * "One super-block a thread") */
    const int sbt_r = !mr && kt == 1 && n_sb <= cu_mm_cfg.sbt && args->total_rows <= cu_mm_cfg.sbt_rows && !args->nq.on &&
                      !args->row_order ? sbt_rows(n_sb) : 0;
    if (sbt_r) {
        int ctas = 0;
        for (int i = 0; i < a.n_seg; i++) {
            a.seg[i].cta0 = ctas;
            ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, sbt_r);
        }
        mm_cols_fn k = sbw == 2 ? (sbt_r == 8 ? mm_kernel_sbt<8, 2> : sbt_r == 16 ? mm_kernel_sbt<16, 2> : mm_kernel_sbt<32, 2>)
                                : (sbt_r == 8 ? mm_kernel_sbt<8, 4> : sbt_r == 16 ? mm_kernel_sbt<16, 4> : mm_kernel_sbt<32, 4>);
        gpu_launch(k, dim3((unsigned)ctas), dim3((unsigned)(n_sb * sbt_r)), 0, s, a);
        cu_sbt_launches++;
        return true;
    }
#if !defined(VLLMC_HIP)
    /* the Q4_K terms on the tensor cores where every K-quant row is Q4_K (one activation row, no fused norm; the same
     * bits as the column-split kernel): cu_mm_cfg.mma, bit 1 rows of up to cols_sbw2 super-blocks (16 rows a CTA), bit 2
     * the longer ones (4 super-blocks a warp, 8 rows a CTA), bit 4 launches with Q6_K rows of up to cols_sbw2 super-blocks
     * (8 rows a CTA) of fewer than rows[1] rows, and with bit 4096 the longer ones too (the LM head) */
    const bool q6_mma = (cu_mm_cfg.mma & 4) && (args->total_rows < cu_mm_cfg.rows[1] || (cu_mm_cfg.mma & 4096));
    if (!mr && !args->nq.on && !args->row_order && (kt == 1 ? (cu_mm_cfg.mma & (sbw == 2 ? 1 : 2)) != 0 : sbw == 2 && q6_mma)) {
        /* bit 8192: launches with Q6_K rows at 16 rows a CTA (rows g and g + 8 of each MMA, as the Q4_K ones): the GDN
         * in-proj's 12,352 rows in 772 CTAs where 8 a CTA take 1,544, ~3 rounds at 4 an SM */
        const bool q6r16 = kt != 1 && (cu_mm_cfg.mma & 8192);
        const int rt = (kt == 1 && sbw == 2) || q6r16 ? 16 : 8;
        int ctas = 0;
        for (int i = 0; i < a.n_seg; i++) {
            a.seg[i].cta0 = ctas;
            ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, rt);
        }
        mm_cols_fn k = kt == 1 ? (sbw == 2 ? mm_kernel_mma<2, 16, 1> : mm_kernel_mma<4, 8, 1>)
                     : kt == 2 ? (q6r16 ? mm_kernel_mma<2, 16, 2> : mm_kernel_mma<2, 8, 2>)
                               : (q6r16 ? mm_kernel_mma<2, 16, 3> : mm_kernel_mma<2, 8, 3>);
        /* bit 8: the 2,560-column Q4_K launches on an instance bounded to 5 CTAs of 160 threads an SM (72 registers, 28
         * bytes spilled): gate + up's 1,152 CTAs in 1.75 rounds where 4 an SM take 2.2. Measured slower (qwen35-4b 558.3
         * against 564.5 tok/s), off */
        if ((cu_mm_cfg.mma & 8) && kt == 1 && sbw == 2 && w == 5) k = mm_kernel_mma<2, 16, 1, 160, 5>;
        /* bit 16: the Q4_K launches of fewer than rows[0] rows (ssm_out / attn_output: 160 CTAs of 16 rows, 1-2 an SM)
         * with 8 rows a CTA, twice the CTAs (each row's sum the same ops in the same order); at 4,096 columns bounded to
         * 3 CTAs of 256 threads an SM (92 -> 76 registers), so the 320 CTAs are one round. Measured level (qwen35-4b
         * 1.739 / 1.740 ms against 1.739 / 1.739), off */
        const bool rt8 = (cu_mm_cfg.mma & 16) && kt == 1 && sbw == 2 && args->total_rows < cu_mm_cfg.rows[0];
        /* bits 128 / 256: the Q4_K launches of cu_mmx_rows rows or more (qwen35-4b: the GDN in-proj, the attention
         * q / k / v, gate + up) with 16 (bit 128) or 8 (bit 256) more rows a CTA in shared memory (mm_kernel_mmx) */
        const int xr = (cu_mm_cfg.mma & 128) ? 16 : (cu_mm_cfg.mma & 256) ? 8 : 0;
        if (xr && kt == 1 && sbw == 2 && args->total_rows >= cu_mmx_rows) {
            bool ok = true;
            for (int i = 0; i < a.n_seg; i++) ok = ok && a.seg[i].stride % 16 == 0 && (uintptr_t)a.seg[i].w % 16 == 0;
            if (ok) {
                ctas = 0;
                uint64_t pitch = 0;
                for (int i = 0; i < a.n_seg; i++) {
                    a.seg[i].cta0 = ctas;
                    ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, 16 + xr);
                    if (a.seg[i].type == GGML_TYPE_Q4_K && a.seg[i].stride + 16 > pitch) pitch = a.seg[i].stride + 16;
                }
                /* 2,560 columns (5 warps): the instance bounded to 4 CTAs an SM, as mm_kernel_mma<2, 16, 1> compiles to */
                const mm_cols_fn kx = w == 5 ? (xr == 16 ? mm_kernel_mmx<16, 160, 4> : mm_kernel_mmx<8, 160, 4>)
                                             : (xr == 16 ? mm_kernel_mmx<16> : mm_kernel_mmx<8>);
                /* the shared-memory carve-out 4 CTAs an SM need (their tiles, the static arrays, 1 KB the system keeps
                 * a CTA), once an instance: else the driver may pick a split that holds fewer */
                static bool carve_set[4];
                if (!carve_set[2 * (w == 5) + (xr == 16)]) {
                    carve_set[2 * (w == 5) + (xr == 16)] = true;
                    cudaFuncAttributes fa;
                    int dev = 0, sm_smem = 0;
                    if (cudaFuncGetAttributes(&fa, kx) == cudaSuccess && cudaGetDevice(&dev) == cudaSuccess &&
                        cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess && sm_smem > 0) {
                        const size_t need = 4 * ((size_t)xr * pitch + fa.sharedSizeBytes + 1024);
                        const int pct = (int)((need * 100 + (size_t)sm_smem - 1) / (size_t)sm_smem);
                        if (cudaFuncSetAttribute(kx, cudaFuncAttributePreferredSharedMemoryCarveout, pct < 100 ? pct : 100) != cudaSuccess)
                            (void)cudaGetLastError();
                    } else (void)cudaGetLastError();
                }
                gpu_launch(kx, dim3((unsigned)ctas), dim3(32 * w), (size_t)xr * pitch, s, a);
                cu_mmx_launches++;
                return true;
            }
        }
        if (rt8) {
            ctas = 0;
            for (int i = 0; i < a.n_seg; i++) {
                a.seg[i].cta0 = ctas;
                ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, 8);
            }
            k = w == 8 ? mm_kernel_mma<2, 8, 1, 256, 3> : mm_kernel_mma<2, 8, 1>; /* 4,096 columns: 3 CTAs an SM, one round */
        }
        /* bits 32 / 64: the activation of a warp's later super-blocks prefetched into L1 / staged in shared memory (the
         * unbounded instances; off until measured) */
        /* bit 512: the low nibbles' sums by subtraction (AP 4, mma_q4k_sb's SUB; the same integers); bit 1024: and the
         * activation of all the warp's super-blocks loaded at once (AP 5); bit 2048: as 512 with the next round's rows
         * asked into L2 right after the release (AP 6) */
        const int ap = (cu_mm_cfg.mma & 64) ? 2 : (cu_mm_cfg.mma & 32) ? 1 : args->a.copies > 1 && kt == 1 ? 3 : (cu_mm_cfg.mma & 2048) ? 6 : (cu_mm_cfg.mma & 1024) ? 5 : (cu_mm_cfg.mma & 512) ? 4 : 0;
        const mm_cols_fn ka = !ap ? NULL : k == mm_kernel_mma<2, 16, 1> ? mma_ap<2, 16, 1>(ap) : k == mm_kernel_mma<4, 8, 1> ? mma_ap<4, 8, 1>(ap)
                            : k == mm_kernel_mma<2, 8, 2> ? mma_ap<2, 8, 2>(ap) : k == mm_kernel_mma<2, 8, 3> ? mma_ap<2, 8, 3>(ap)
                            : k == mm_kernel_mma<2, 16, 2> ? mma_ap<2, 16, 2>(ap) : k == mm_kernel_mma<2, 16, 3> ? mma_ap<2, 16, 3>(ap)
                            : k == mm_kernel_mma<2, 8, 1> ? mma_ap<2, 8, 1>(ap) : NULL;
        /* (ap 5 at 2,560 columns: bounded to the 4 CTAs an SM the plain instance has, 96 registers, where it would take 100) */
        const mm_cols_fn kb = ap == 5 && k == mm_kernel_mma<2, 16, 1> && w == 5 ? mm_kernel_mma<2, 16, 1, 160, 4, 5> : ka;
        if (ap == 6) a.pf_next = mm_resident(kb, 32 * w);
        gpu_launch(kb ? kb : k, dim3((unsigned)ctas), dim3(32 * w), ka && ap == 2 ? (size_t)w * (sbw - 1) * MMA_STAGE_SB : 0, s, a);
        cu_mma_launches++;
        cu_mma_q6r16_launches += q6r16;
        if (ka) cu_mma_ap_launches[ap]++;
        return true;
    }
#endif
    int ctas = 0;
    for (int i = 0; i < a.n_seg; i++) {
        a.seg[i].cta0 = ctas;
        ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, rpc);
    }
    mm_cols_fn kern = mr ? mm_cols_pick<2, MV_NA>(sbw, kt) : U == 4 ? mm_cols_pick<4, 1>(sbw, kt) : mm_cols_pick<2, 1>(sbw, kt);
    if (cu_mm_cfg.cols_lb && !mr) { /* register-bounded instances: more CTAs an SM, fewer rounds of them */
        const int lb = cu_mm_cfg.cols_lb;
        const mm_cols_fn unbounded = kern;
        /* bits 8 / 16: the LM head's / the down rows' bounded instances with the next round's rows into L2 after the release
         * (PF; CUDA only) */
#if !defined(VLLMC_HIP)
        const bool pf_h = lb & 8, pf_d = lb & 16;
#else
        const bool pf_h = false, pf_d = false;
#endif
        bool pf = false; /* the instance taken is a PF one */
        if ((lb & 1) && w == 5 && sbw == 2 && kt == 1 && U == 4) kern = mm_kernel_cols<2, 1, 4, 1, 160, 5>;
        else if ((lb & 2) && w == 5 && sbw == 2 && kt == 2 && U == 2) { /* the LM head */
            kern = pf_h ? mm_kernel_cols<2, 2, 2, 1, 160, 5, true> : mm_kernel_cols<2, 2, 2, 1, 160, 5>;
            pf = pf_h;
        } else if ((lb & 4) && w == 9 && sbw == 4 && kt == 1 && U == 4) {
            kern = pf_d ? mm_kernel_cols<4, 1, 4, 1, 288, 3, true> : mm_kernel_cols<4, 1, 4, 1, 288, 3>;
            pf = pf_d;
        } else if ((lb & 4) && w == 9 && sbw == 4 && U == 2) {
            kern = kt == 2 ? (pf_d ? mm_kernel_cols<4, 2, 2, 1, 288, 3, true> : mm_kernel_cols<4, 2, 2, 1, 288, 3>)
                           : (pf_d ? mm_kernel_cols<4, 3, 2, 1, 288, 3, true> : mm_kernel_cols<4, 3, 2, 1, 288, 3>);
            pf = pf_d;
        }
        cu_cols_lb_launches += kern != unbounded;
        if (pf) {
            a.pf_next = mm_resident(kern, 32 * w);
            cu_cols_pf_launches++;
        }
    }
    gpu_launch(kern, dim3((unsigned)ctas, mr ? (unsigned)GPU_CEIL_DIV(args->n_act, MV_NA) : 1u), dim3(32 * w), 0, s, a);
    return true;
}

#if !defined(VLLMC_HIP) /* (its callers are CUDA only) */
/* The device's SMs (queried once; 132, an H200's, if the query fails). */
static int mm_sm_count(void) {
    static int sms = 0;
    if (!sms) {
        int dev = 0, n = 0;
        sms = gpuGetDevice(&dev) == gpuSuccess && gpuDeviceGetSMCount(&n, dev) == gpuSuccess && n > 0 ? n : 132;
    }
    return sms;
}
#endif

/* Prefill: one warp per (weight row, group of NA activation rows); the groups of one weight slice run
 * next to each other so its bytes come from L2 after the first. */
template <int NA>
static __global__ void __launch_bounds__(32 * CU_MM_WARPS) mm_kernel(const struct cu_mm_args P) {
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    const int n_grp = (P.n_act + NA - 1) / NA;
    const int cta = blockIdx.x / n_grp;
    const int a0 = (blockIdx.x % n_grp) * NA;
    const int na = min(NA, P.n_act - a0);
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_MM_MAX_SEG; i++)
        if (i < P.n_seg && cta >= P.seg[i].cta0) si = i;
    const cu_mm_seg &S = P.seg[si];
    const int row = (cta - S.cta0) * CU_MM_WARPS + wid;
    if (row >= S.n_rows) return;
    mm_row<NA>(P, S, row, a0, na, lane);
}

static int mm_resident_ctas(void) {
    static int n = 0;
    if (!n) {
        int dev = 0, sms = 0, per = 0;
        if (gpuGetDevice(&dev) != gpuSuccess || gpuDeviceGetSMCount(&sms, dev) != gpuSuccess ||
            gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per, mm_kernel_1, 32 * CU_MM_WARPS, 0) != gpuSuccess || sms <= 0 ||
            per <= 0)
            return 1024;
        n = sms * per;
    }
    return n;
}

/* CTAs of mm_kernel_split<ks> the GPU holds at once */
static int split_resident(int ks) {
    static int n[5] = {0, 0, 0, 0, 0};
    if (!n[ks]) {
        int dev = 0, sms = 0, per = 0;
        gpuError_t e = gpuGetDevice(&dev);
        if (e == gpuSuccess) e = gpuDeviceGetSMCount(&sms, dev);
        if (e == gpuSuccess)
            e = gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per, ks == 1 ? mm_kernel_split<1> : ks == 2 ? mm_kernel_split<2> : mm_kernel_split<4>,
                                                             32 * CU_MM_WARPS, 0);
        if (e != gpuSuccess || sms <= 0 || per <= 0) return 1024;
        n[ks] = sms * per;
    }
    return n[ks];
}

/* CTAs an SM the instances of up to 4 groups are bounded for (mm_kernel_mmq; registers: 2 -> 128, 3 -> 80;
 * the default runs target that many an SM of 132 SMs) */
#ifndef VLLMC_MMQ_MINB4
#define VLLMC_MMQ_MINB4 2
#endif
#if !defined(VLLMC_HIP)
/* ---- several activation rows on the tensor cores (mm_kernel_mmrs) ----
 * A decode step of 2 .. cu_mm_cfg.mmr_rows sequences, Q4_K / Q6_K rows. The column-split kernel's several-row form
 * meets each weight with each activation row in turn on dp4a (issue-bound: qwen35-4b ITL 2.8 ms at 2 rows, 10.3 at 16);
 * here one MMA gives the integer sums of a sub-block for 16 weight rows x 8 activation rows at once: Q4_K on m16n8k32
 * (a 32-element sub-block: A the weight nibbles as u8, B the Q8_K quants), Q6_K on m16n8k16 (a 16-element sub-block:
 * the 6-bit quants as u8; the -32 through the Q8_K 16-element sums). An MMA's k slots may hold the sub-block's elements
 * in any order, the same for A and B: lane (g, t) gives elements 8t .. 8t + 7 (Q4_K; a0 / a2 the first / last four,
 * the low and the high nibbles two sub-blocks) or 4t .. 4t + 3 (Q6_K), so each of its reads is one contiguous piece
 * of a row. A CTA takes 16 (R x 16) weight rows of one segment; warp w super-blocks w SBW .. w SBW + SBW - 1 of
 * them, for every group of 8 activation rows in turn. Lane (g, t) then holds the sub-block sums of weight rows g,
 * g + 8 with activation rows 2t, 2t + 1 (C's layout) and forms each super-block's integer sums and float term as the reference
 * does (term_kmin / term_k); the terms are summed over the warp's super-blocks, then the warps in order. That float
 * order is not the one-row kernels', so a row's outputs may differ in the last bits between a one-row and a several-
 * row step (batch invariance keeps the mm_row-order kernels). */
#define MMR_WARPS 16
#define MMRS_MAX_ROWS 64 /* mm_kernel_mmrs's activation rows at most (more: mm_kernel_mmq or nothing) */
static __device__ __forceinline__ void mma_k16_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}
/* A lane's bytes of one super-block of its two rows (g, g + 8): Q4_K q[c][r] bytes 8t .. 8t + 7 of quant chunk c, the 12
 * scale bytes and d / dmin; Q6_K ql[n][2 hw + j][r] bytes 64n + 32hw + 16j + 4t .. + 3 of ql, qh[n][j][r] bytes
 * 32n + 16j + 4t .. + 3 of half n's qh, the 16 scales, d. */
struct mmr_q4 { uint2 q[4][2]; uint32_t s[2][3], dm[2]; };
struct mmr_q6 { uint32_t ql[2][4][2], qh[2][2][2], sc[2][4]; uint32_t d[2]; };
template <int KT> struct mmr_wt { typedef mmr_q4 type; };
template <> struct mmr_wt<GGML_TYPE_Q6_K> { typedef mmr_q6 type; };

/* The activation side of super-block sb for lane t: the 16-element sums of activation rows ag + 2t, ag + 2t + 1 (two
 * int16 a word, zeros past na) and their scales. */
static __device__ __forceinline__ void mmr_act_sums(const cu_act_view &a, int sb, int ag, int na, int t, int (&bw)[2][8], float (&da)[2]) {
    const int64_t n = a.n;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int ar = 2 * t + k;
        if (ar < na) {
            const int4 *bp = (const int4 *)(a.k_bs + (int64_t)(ag + ar) * (n / 16) + (int64_t)sb * 16);
            const int4 b0 = bp[0], b1 = bp[1];
            bw[k][0] = b0.x; bw[k][1] = b0.y; bw[k][2] = b0.z; bw[k][3] = b0.w;
            bw[k][4] = b1.x; bw[k][5] = b1.y; bw[k][6] = b1.z; bw[k][7] = b1.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) bw[k][j] = 0;
        }
    }
#pragma unroll
    for (int k = 0; k < 2; k++) da[k] = 2 * t + k < na ? a.k_d[(int64_t)(ag + 2 * t + k) * (n / QK_K) + sb] : 0.f;
}

/* The activation side of super-block sb for lane (g, t): Q4_K the quants of activation row ag + g, elements 64c + 8t ..
 * + 7 (xl) and 64c + 32 + 8t .. + 7 (xh); Q6_K elements 128nh + 32wq + 16j + 4t .. + 3 (x); both with mmr_act_sums's
 * block sums and scales; zeros past na. mmr_act_at reads the quants where the terms use them (one weight tile a warp);
 * mmr_act4 / mmr_act6 hold them, loaded once and met with each of a warp's R weight tiles. */
struct mmr_act_at {
    const int8_t *aq;
    bool bon;
    int bw[2][8];
    float da[2];
    __device__ __forceinline__ uint2 xl(int c) const { return bon ? *(const uint2 *)(aq + 64 * c) : make_uint2(0, 0); }
    __device__ __forceinline__ uint2 xh(int c) const { return bon ? *(const uint2 *)(aq + 64 * c + 32) : make_uint2(0, 0); }
    __device__ __forceinline__ uint32_t x(int nh, int wq, int j) const { return bon ? *(const uint32_t *)(aq + 128 * nh + 32 * wq + 16 * j) : 0u; }
};
struct mmr_act4 {
    uint2 l[4], h[4];
    int bw[2][8];
    float da[2];
    __device__ __forceinline__ uint2 xl(int c) const { return l[c]; }
    __device__ __forceinline__ uint2 xh(int c) const { return h[c]; }
};
struct mmr_act6 {
    uint32_t q[2][4][2];
    int bw[2][8];
    float da[2];
    __device__ __forceinline__ uint32_t x(int nh, int wq, int j) const { return q[nh][wq][j]; }
};
template <int KT> struct mmr_at { typedef mmr_act4 type; };
template <> struct mmr_at<GGML_TYPE_Q6_K> { typedef mmr_act6 type; };
/* lane (g, t)'s quants of super-block sb (mmr_act_at's address); with sums, also the block sums and scales */
static __device__ __forceinline__ void mmr_act_init(const cu_act_view &a, int KT, int sb, int ag, int na, int g, int t, mmr_act_at &A,
                                                    bool sums = false) {
    A.bon = g < na;
    A.aq = a.k_qs + (int64_t)(ag + (A.bon ? g : 0)) * a.n + (int64_t)sb * QK_K + (KT == GGML_TYPE_Q6_K ? 4 : 8) * t;
    if (sums) mmr_act_sums(a, sb, ag, na, t, A.bw, A.da);
}
static __device__ __forceinline__ void mmr_load_act(const cu_act_view &a, int sb, int ag, int na, int g, int t, mmr_act4 &A) {
    mmr_act_at L;
    mmr_act_init(a, GGML_TYPE_Q4_K, sb, ag, na, g, t, L);
    mmr_act_sums(a, sb, ag, na, t, A.bw, A.da);
#pragma unroll
    for (int c = 0; c < 4; c++) { A.l[c] = L.xl(c); A.h[c] = L.xh(c); }
}
static __device__ __forceinline__ void mmr_load_act(const cu_act_view &a, int sb, int ag, int na, int g, int t, mmr_act6 &A) {
    mmr_act_at L;
    mmr_act_init(a, GGML_TYPE_Q6_K, sb, ag, na, g, t, L);
    mmr_act_sums(a, sb, ag, na, t, A.bw, A.da);
#pragma unroll
    for (int nh = 0; nh < 2; nh++)
#pragma unroll
        for (int wq = 0; wq < 4; wq++)
#pragma unroll
            for (int j = 0; j < 2; j++) A.q[nh][wq][j] = L.x(nh, wq, j);
}

/* The Q4_K super-block's float terms of (row g, act 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1), added to y. */
template <class A_t> static __device__ __forceinline__ void mmr_term(const mmr_q4 &w, const A_t &A, float (&y)[4]) {
    /* scales and mins of the tile's two rows: bytes sc0..3 = s0 & 63, m0..3 = s1 & 63, sc4..7 = (s2 & 15) | (s0 >> 6) << 4,
     * m4..7 = (s2 >> 4) | (s1 >> 6) << 4; the mins' term sum_j m[j] (bs[2j] + bs[2j + 1]) by dp2a (exact), m[j] in both
     * low bytes */
    int I[4], M[4];
    uint32_t scA[2], scB[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        scA[r] = w.s[r][0] & 0x3F3F3F3Fu;
        scB[r] = (w.s[r][2] & 0x0F0F0F0Fu) | ((w.s[r][0] >> 2) & 0x30303030u);
        const uint32_t mA = w.s[r][1] & 0x3F3F3F3Fu;
        const uint32_t mB = ((w.s[r][2] >> 4) & 0x0F0F0F0Fu) | ((w.s[r][1] >> 2) & 0x30303030u);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int m = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) m = __dp2a_lo(A.bw[k][j], (int)__byte_perm(j < 4 ? mA : mB, 0u, (j & 3) | ((j & 3) << 4)), m);
            M[2 * r + k] = m;
            I[2 * r + k] = 0;
        }
    }
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const uint2 xl = A.xl(c), xh = A.xh(c);
        const uint32_t m = 0x0F0F0F0Fu;
        const int j0 = (2 * c) & 3, sh0 = 8 * j0, sh1 = 8 * (j0 + 1);
        int cl[4] = {0, 0, 0, 0}, ch[4] = {0, 0, 0, 0};
        mma_u8s8(cl, w.q[c][0].x & m, w.q[c][1].x & m, w.q[c][0].y & m, w.q[c][1].y & m, xl.x, xl.y);
        mma_u8s8(ch, (w.q[c][0].x >> 4) & m, (w.q[c][1].x >> 4) & m, (w.q[c][0].y >> 4) & m, (w.q[c][1].y >> 4) & m, xh.x, xh.y);
        /* sub-blocks 2c (low) and 2c + 1 (high) */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t sw = c < 2 ? scA[k >> 1] : scB[k >> 1];
            I[k] += (int)((sw >> sh0) & 0xff) * cl[k] + (int)((sw >> sh1) & 0xff) * ch[k];
        }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int r = k >> 1;
        y[k] = __fadd_rn(y[k], term_kmin(A.da[k & 1], sb_h2f<true>((uint16_t)(w.dm[r] & 0xffff)), sb_h2f<true>((uint16_t)(w.dm[r] >> 16)),
                                         I[k], M[k]));
    }
}

/* The same for Q6_K: 16 MMAs of k16 a super-block, the -32 offset's term sum_idx sc[idx] * bs[idx] from the 16-element
 * sums by dp2a (exact). */
template <class A_t> static __device__ __forceinline__ void mmr_term(const mmr_q6 &w, const A_t &A, float (&y)[4]) {
    int I[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int r = k >> 1, ak = k & 1;
        int b2 = 0;
#pragma unroll
        for (int j = 0; j < 8; j++)
            b2 = (j & 1) ? __dp2a_hi(A.bw[ak][j], (int)w.sc[r][j >> 1], b2) : __dp2a_lo(A.bw[ak][j], (int)w.sc[r][j >> 1], b2);
        I[k] = -32 * b2;
    }
#pragma unroll
    for (int nh = 0; nh < 2; nh++)
#pragma unroll
        for (int wq = 0; wq < 4; wq++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                /* sub-block 8 nh + 2 wq + j: elements 128 nh + 32 wq + 16 j + (0 .. 15) */
                const int idx = 8 * nh + 2 * wq + j, qi = 2 * (wq & 1) + j, lsh = wq >= 2 ? 4 : 0, hsh = 2 * wq;
                const uint32_t x = A.x(nh, wq, j);
                const uint32_t q0 = ((w.ql[nh][qi][0] >> lsh) & 0x0F0F0F0Fu) | (((w.qh[nh][j][0] >> hsh) & 0x03030303u) << 4);
                const uint32_t q1 = ((w.ql[nh][qi][1] >> lsh) & 0x0F0F0F0Fu) | (((w.qh[nh][j][1] >> hsh) & 0x03030303u) << 4);
                int cc[4] = {0, 0, 0, 0};
                mma_k16_u8s8(cc, q0, q1, x);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int sc = (int)(int8_t)((w.sc[k >> 1][idx >> 2] >> (8 * (idx & 3))) & 0xff);
                    I[k] += sc * cc[k];
                }
            }
#pragma unroll
    for (int k = 0; k < 4; k++) y[k] = __fadd_rn(y[k], term_k(A.da[k & 1], sb_h2f<true>((uint16_t)w.d[k >> 1]), I[k]));
}

/* The weights are staged in shared memory: before the dependency wait the lanes of a warp copy the 16 rows' bytes of
 * each of its super-blocks there by asynchronous copies (no register held while they are in flight; 16-byte pieces
 * where the row layout allows), and after it each lane reads the words it needs, one super-block at a time. (Held in
 * registers instead, as the one-row kernels hold theirs, the weights took one or two CTAs of 16 rows an SM and the
 * launches were bound by their DRAM round trips: slower than the column-split kernel at 2-4 rows; copied 4 or 8 bytes
 * a lane in each lane's own layout, the copies' instructions bound them the same way. BENCHMARKS.md.) A row's bytes of
 * one super-block at a stride that keeps a half warp's reads off each other's banks: Q4_K 160 (128 quant bytes, the
 * 12 scale bytes, d / dmin), Q6_K 240 (128 ql, 64 qh, 16 scales; d by a plain load). */
#define MMRS_Q4_ROW 160
#define MMRS_Q6_ROW 240
#define MMRS_Q4 (16 * MMRS_Q4_ROW)
#define MMRS_Q6 (16 * MMRS_Q6_ROW)
#define MMRS_SMEM_MAX (227 * 1024 - (int)sizeof(float) * MMR_WARPS * 16 * 8) /* a CTA's dynamic shared memory at most (sm_90: 227 KB with the static part[]) */
/* 4 bytes from global to shared memory, asynchronously (gpu_cp16's 4-byte form: the scale words) */
static __device__ __forceinline__ void mmrs_cp4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
/* the warp's copies of rows r0 .. r0 + 15 (rows of them exist; the others zero) of super-block sb */
static __device__ __forceinline__ void mmrs_stage_q4(uint8_t *base, const uint8_t *w, uint64_t stride, int rows, int n_sb, int sb, int lane) {
    for (int i = lane; i < 16 * 12; i += 32) {
        const int r = i / 12, p = i % 12;
        uint8_t *d = base + r * MMRS_Q4_ROW + (p < 8 ? 16 * p : 128 + 4 * (p - 8));
        if (r >= rows) {
            if (p < 8) *(uint4 *)d = make_uint4(0, 0, 0, 0);
            else *(uint32_t *)d = 0;
            continue;
        }
        const uint8_t *wr = w + (size_t)r * stride;
        if (p < 8) gpu_cp16(d, wr + 128 * (size_t)sb + 16 * p);
        else if (p < 11) mmrs_cp4(d, wr + k4_sc_off(n_sb) + 12 * (size_t)sb + 4 * (p - 8));
        else mmrs_cp4(d, wr + k4_dm_off(n_sb) + 4 * (size_t)sb);
    }
}
static __device__ __forceinline__ void mmrs_read_q4(mmr_q4 &w, const uint8_t *base, int g, int t) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint8_t *row = base + (g + 8 * r) * MMRS_Q4_ROW;
#pragma unroll
        for (int c = 0; c < 4; c++) w.q[c][r] = *(const uint2 *)(row + 32 * c + 8 * t);
#pragma unroll
        for (int i = 0; i < 3; i++) w.s[r][i] = *(const uint32_t *)(row + 128 + 4 * i);
        w.dm[r] = *(const uint32_t *)(row + 140);
    }
}
static __device__ __forceinline__ void mmrs_stage_q6(uint8_t *base, const uint8_t *w, uint64_t stride, int rows, int n_sb, int sb, int lane) {
    for (int i = lane; i < 16 * 13; i += 32) {
        const int r = i / 13, p = i % 13;
        uint8_t *d = base + r * MMRS_Q6_ROW + 16 * p;
        if (r >= rows) { *(uint4 *)d = make_uint4(0, 0, 0, 0); continue; }
        const uint8_t *wr = w + (size_t)r * stride;
        if (p < 8) gpu_cp16(d, wr + 128 * (size_t)sb + 16 * p);
        else if (p < 12) gpu_cp16(d, wr + 128 * (size_t)n_sb + 64 * (size_t)sb + 16 * (p - 8));
        else gpu_cp16(d, wr + 192 * (size_t)n_sb + 16 * (size_t)sb);
    }
}
static __device__ __forceinline__ void mmrs_read_q6(mmr_q6 &w, const uint8_t *base, const uint32_t *d, int g, int t) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint8_t *row = base + (g + 8 * r) * MMRS_Q6_ROW;
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int i = 0; i < 4; i++) w.ql[n][i][r] = *(const uint32_t *)(row + 64 * n + 16 * i + 4 * t);
#pragma unroll
            for (int j = 0; j < 2; j++) w.qh[n][j][r] = *(const uint32_t *)(row + 128 + 32 * n + 16 * j + 4 * t);
        }
        const uint4 s4 = *(const uint4 *)(row + 192);
        w.sc[r][0] = s4.x; w.sc[r][1] = s4.y; w.sc[r][2] = s4.z; w.sc[r][3] = s4.w;
        w.d[r] = d[r];
    }
}

/* grid: the 16R-row tiles of the segments (seg.cta0 in them), every segment of type KT; ceil(n_sb / SBW) warps; dynamic
 * shared memory: mmrs_smem_bytes. With R > 1 each warp stages and sums R 16-row tiles for its super-blocks, meeting each
 * activation load with all R (the activation is read once a CTA of 16R rows, not once a 16 rows); a row's float order
 * (its warp's super-blocks in order, then the warps in order) is that of R = 1, so the bits are the same. */
template <int SBW, int KT, int R>
static __global__ void __launch_bounds__(32 * MMR_WARPS) mm_kernel_mmrs(const struct cu_mm_args P) {
    extern __shared__ __align__(16) uint8_t mmrs_smem[];
    __shared__ float part1[R == 1 ? MMR_WARPS * 16 * 8 : 1];
    constexpr int WS = KT == GGML_TYPE_Q6_K ? MMRS_Q6 : MMRS_Q4;
    typedef typename mmr_wt<KT>::type wt;
    typedef typename mmr_at<KT>::type at;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5, g = lane >> 2, t = lane & 3;
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_MM_MAX_SEG; i++)
        if (i < P.n_seg && (int)blockIdx.x >= P.seg[i].cta0) si = i;
    const cu_mm_seg &S = P.seg[si];
    const int r0 = ((int)blockIdx.x - S.cta0) * 16 * R, rows = min(16 * R, S.n_rows - r0);
    const int n_sb = (int)(P.a.n / QK_K);
    const uint8_t *w0 = S.w + (size_t)r0 * S.stride;
    uint8_t *mine = mmrs_smem + (size_t)wid * SBW * R * WS;
    /* [warp][16 R rows][8 activation rows] */
    float *part = R == 1 ? part1 : (float *)(mmrs_smem + (size_t)W * SBW * R * WS);
    uint32_t d6[R][SBW][2];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int ri = rows - 16 * i; /* this tile's rows (<= 0: none, staged as zeros) */
        const uint8_t *wi = w0 + (size_t)(ri > 0 ? 16 * i : 0) * S.stride;
#pragma unroll
        for (int s = 0; s < SBW; s++) {
            const int sb = wid * SBW + s;
            if (sb >= n_sb) continue;
            if constexpr (KT == GGML_TYPE_Q6_K) {
                mmrs_stage_q6(mine + (i * SBW + s) * WS, wi, S.stride, ri, n_sb, sb, lane);
#pragma unroll
                for (int r = 0; r < 2; r++)
                    d6[i][s][r] = g + 8 * r < ri ? gpu_ldg((const unsigned short *)(wi + (size_t)(g + 8 * r) * S.stride + 208 * (size_t)n_sb +
                                                                                     2 * (size_t)sb))
                                                 : 0u;
            } else {
                mmrs_stage_q4(mine + (i * SBW + s) * WS, wi, S.stride, ri, n_sb, sb, lane);
            }
        }
    }
    gpu_cp_commit();
    gpu_pdl_wait();
    gpu_pdl_trigger();
    gpu_cp_wait_group<0>();
    __syncwarp(); /* the warp's copies, to all its lanes */
    for (int ag = 0; ag < P.n_act; ag += 8) {
        const int na = min(8, P.n_act - ag);
        float y[R][4];
#pragma unroll
        for (int i = 0; i < R; i++) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.f;
#pragma unroll
        for (int s = 0; s < SBW; s++) {
            const int sb = wid * SBW + s;
            if (sb >= n_sb) continue;
            if constexpr (R == 1) { /* the quants read where the terms use them (fewer registers) */
                wt w;
                if constexpr (KT == GGML_TYPE_Q6_K) mmrs_read_q6(w, mine + s * WS, d6[0][s], g, t);
                else mmrs_read_q4(w, mine + s * WS, g, t);
                mmr_act_at A;
                mmr_act_init(P.a, KT, sb, ag, na, g, t, A, true);
                mmr_term(w, A, y[0]);
            } else {
                at A;
                mmr_load_act(P.a, sb, ag, na, g, t, A);
#pragma unroll
                for (int i = 0; i < R; i++) {
                    wt w;
                    if constexpr (KT == GGML_TYPE_Q6_K) mmrs_read_q6(w, mine + (i * SBW + s) * WS, d6[i][s], g, t);
                    else mmrs_read_q4(w, mine + (i * SBW + s) * WS, g, t);
                    mmr_term(w, A, y[i]);
                }
            }
        }
        if (ag) __syncthreads(); /* the last group's partial sums have been read */
#pragma unroll
        for (int i = 0; i < R; i++) {
            float *pw = part + ((size_t)wid * 16 * R + 16 * i) * 8;
            pw[g * 8 + 2 * t] = y[i][0];
            pw[g * 8 + 2 * t + 1] = y[i][1];
            pw[(g + 8) * 8 + 2 * t] = y[i][2];
            pw[(g + 8) * 8 + 2 * t + 1] = y[i][3];
        }
        __syncthreads();
        for (int i = threadIdx.x; i < 16 * R * na; i += blockDim.x) {
            const int j = i % (16 * R), r = i / (16 * R);
            if (j >= rows) continue;
            float v = part[j * 8 + r];
            for (int k = 1; k < W; k++) v = __fadd_rn(v, part[((size_t)k * 16 * R + j) * 8 + r]);
            const int64_t o = (int64_t)(ag + r) * S.ld_y + r0 + j;
            if (S.bias) v = __fadd_rn(v, S.bias[r0 + j]);
            S.y[o] = v;
            if (S.res) S.res[o] = __fadd_rn(S.res[o], v);
        }
    }
}
/* a launch's dynamic shared memory: the warps' staged tiles, and with R > 1 the partial sums (R = 1: static) */
static inline size_t mmrs_smem_bytes(int warps, int sbw, int r, bool q6) {
    return (size_t)warps * sbw * r * (q6 ? MMRS_Q6 : MMRS_Q4) + (r > 1 ? (size_t)warps * 16 * r * 8 * sizeof(float) : 0);
}

/* ---- several activation rows, every activation row of a CTA in each warp (mm_kernel_mmq) ----
 * mm_kernel_mmrs meets each 16-row weight tile with one group of 8 activation rows at a time: for every group it
 * reads the weights back from shared memory, unpacks the nibbles and the scales again and forms the mins' term with
 * 32 dp2a a lane, so at 16-64 activation rows its terms are issue-bound (qwen35-4b at 64 sequences: 62 launches of
 * 2,560 rows 60 us each, gate + up 82 us: ~9 ms of a 13.7 ms step; BENCHMARKS.md). Here a warp loads its super-
 * blocks' weights of the CTA's 16 rows into registers once, unpacks them once (the A fragments and the sub-block
 * scales as integers), and meets them with up to MMQ_NT groups of 8 activation rows in turn; the mins' term (Q4_K)
 * and the -32 offset's term (Q6_K) become two MMAs a group over the activation's 16-element block sums split into
 * their low (u8) and high (s8) bytes. The integer sums are the same integers as the CPU reference's, each
 * super-block's float term its term_kmin / term_k, and a tile of one fragment adds a row's terms from 0 in super-block
 * order, so its outputs are the CPU's bits (test_cuda_ops test_mmr). blockIdx.z: the CTA's activation rows (8 NT). */
#define MMQ_NT 8 /* groups of 8 activation rows a CTA at most */
#define MMQ_WM 8   /* warps a CTA: 16 weight rows each */
#define MMQ_WS_FLOATS CU_MMQ_WS_FLOATS /* the fragments' workspace (16 MB, the backend's: cu_mm_args.mmq_ws) */
#define MMQ_TILES CU_MMQ_TILES         /* ... and its counters: tiles of a launch at most */
static __device__ __forceinline__ void mma_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0, int ta, int tb) {
    /* m16n8k16 on 8-bit integers: ta / tb 0 unsigned, 1 signed (the four combinations) */
    if (!ta && !tb)
        asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a0), "r"(a1), "r"(b0));
    else if (!ta && tb)
        mma_k16_u8s8(d, a0, a1, b0);
    else if (ta && !tb)
        asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a0), "r"(a1), "r"(b0));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]) : "r"(a0), "r"(a1), "r"(b0));
}
/* byte i of w, sign-extended: one permute with the sign-replicating selectors (prmt's msb mode) */
static __device__ __forceinline__ int mmq_sext8(uint32_t w, int i) {
    int r;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "r"(0x8880u | (0x1110u * (uint32_t)i) | (uint32_t)i));
    return r;
}
/* sum_i A[r][i] * bs[a][i] over the super-block's 16 block sums (int16), for lane (g, t)'s C entries: the B fragment is
 * activation row ag + g's sums 4t .. 4t + 3, split into low bytes (unsigned) and high bytes (signed), bs = 256 hi + lo */
template <int TA> static __device__ __forceinline__ void mmq_bsum(int (&m)[4], uint32_t a0, uint32_t a1, uint2 bb) {
    const uint32_t lo = __byte_perm(bb.x, bb.y, 0x6420), hi = __byte_perm(bb.x, bb.y, 0x7531);
    int ml[4] = {0, 0, 0, 0}, mh[4] = {0, 0, 0, 0};
    mma_k16(ml, a0, a1, lo, TA, 0);
    mma_k16(mh, a0, a1, hi, TA, 1);
#pragma unroll
    for (int k = 0; k < 4; k++) m[k] = ml[k] + 256 * mh[k];
}

static __device__ __forceinline__ void mmq_load(mmr_q4 &w, const uint8_t *wr0, const uint8_t *wr1, int n_sb, int sb, int t) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint8_t *row = r ? wr1 : wr0;
#pragma unroll
        for (int c = 0; c < 4; c++) w.q[c][r] = gpu_ldg((const uint2 *)(row + 128 * (size_t)sb + 32 * c + 8 * t));
#pragma unroll
        for (int i = 0; i < 3; i++) w.s[r][i] = gpu_ldg((const uint32_t *)(row + k4_sc_off(n_sb) + 12 * (size_t)sb + 4 * i));
        w.dm[r] = gpu_ldg((const uint32_t *)(row + k4_dm_off(n_sb) + 4 * (size_t)sb));
    }
}
/* The activation of one super-block in shared memory (a stage): 8 MMQ_NT rows of quants at a row stride that keeps
 * a warp's reads off each other's banks (Q4_K: 8-byte reads at 8t, 288; Q6_K: 4-byte reads at 4t, 272), then the rows'
 * 16 block sums (32 bytes a row) and their scales. */
template <int KT> struct mmq_st {
    static constexpr int QS = KT == GGML_TYPE_Q6_K ? 272 : 288;
    static constexpr int BS = 8 * MMQ_NT * QS, DS = BS + 8 * MMQ_NT * 32, BYTES = DS + 8 * MMQ_NT * 4;
};
/* One super-block against the stage's NT groups of 8 activation rows, the terms added to y[group]. The weights are
 * unpacked a quarter of the super-block at a time (a Q4_K chunk: sub-blocks 2c and 2c + 1; a Q6_K quarter: 4
 * sub-blocks) and met with every group before the next quarter, the integer sums of every group held (I): one unpack
 * of each weight byte a super-block, and few enough registers that none is unpacked again. Lane (g, t)'s B fragments
 * are stage row 8 j + g; its C entries rows g, g + 8 x activation rows 8 j + 2t, + 1 (k = 2 (row) + (activation)).
 * NT is the launch's group count (an instance each: no guard between the groups, so the compiler interleaves their
 * shared-memory loads, MMAs and scale multiplies; stage rows past the launch's activation rows are zeros). Q4_K: w
 * holds super-block sb's bytes; each word is asked for again for super-block sbn (when nx) as soon as it is unpacked,
 * so the next super-block's loads are in flight during this one's MMAs. */
template <int NT>
static __device__ __forceinline__ void mmq_sb(mmr_q4 &w, bool nx, const uint8_t *wr0, const uint8_t *wr1, int n_sb, int sbn, const uint8_t *st,
                                              int g, int t, float (&y)[NT][4]) {
    typedef mmq_st<GGML_TYPE_Q4_K> L;
    const uint32_t m = 0x0F0F0F0Fu;
    uint32_t scA[2], scB[2], mf[2];
    float d[2], dmin[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        scA[r] = w.s[r][0] & 0x3F3F3F3Fu;
        scB[r] = (w.s[r][2] & 0x0F0F0F0Fu) | ((w.s[r][0] >> 2) & 0x30303030u);
        const uint32_t mA = w.s[r][1] & 0x3F3F3F3Fu, mB = ((w.s[r][2] >> 4) & 0x0F0F0F0Fu) | ((w.s[r][1] >> 2) & 0x30303030u);
        mf[r] = __byte_perm(t < 2 ? mA : mB, 0u, (t & 1) ? 0x3322 : 0x1100); /* m[2t], m[2t], m[2t + 1], m[2t + 1] */
    }
    int I[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) I[j][0] = I[j][1] = I[j][2] = I[j][3] = 0;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const uint32_t lo0 = w.q[c][0].x & m, lo1 = w.q[c][1].x & m, lo2 = w.q[c][0].y & m, lo3 = w.q[c][1].y & m;
        const uint32_t hi0 = (w.q[c][0].x >> 4) & m, hi1 = (w.q[c][1].x >> 4) & m, hi2 = (w.q[c][0].y >> 4) & m, hi3 = (w.q[c][1].y >> 4) & m;
        if (NT <= 4 && nx) { /* (8 groups: after the chunks, below) */
#pragma unroll
            for (int r = 0; r < 2; r++) w.q[c][r] = gpu_ldg((const uint2 *)((r ? wr1 : wr0) + 128 * (size_t)sbn + 32 * c + 8 * t));
        }
        int sl[2], sh[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t sw = c < 2 ? scA[r] : scB[r];
            sl[r] = (int)((sw >> (16 * (c & 1))) & 0xff);
            sh[r] = (int)((sw >> (16 * (c & 1) + 8)) & 0xff);
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const uint8_t *aq = st + (8 * j + g) * L::QS + 8 * t + 64 * c;
            const uint2 xl = *(const uint2 *)aq, xh = *(const uint2 *)(aq + 32);
            int cl[4] = {0, 0, 0, 0}, ch[4] = {0, 0, 0, 0};
            mma_u8s8(cl, lo0, lo1, lo2, lo3, xl.x, xl.y);
            mma_u8s8(ch, hi0, hi1, hi2, hi3, xh.x, xh.y);
#pragma unroll
            for (int k = 0; k < 4; k++) I[j][k] += sl[k >> 1] * cl[k] + sh[k >> 1] * ch[k];
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        d[r] = sb_h2f<true>((uint16_t)(w.dm[r] & 0xffff));
        dmin[r] = sb_h2f<true>((uint16_t)(w.dm[r] >> 16));
    }
    if (NT > 4 && nx) { /* 8 groups: no registers for the words during the chunks; asked for after them, in flight
                         * during the groups' mins terms and the barrier */
#pragma unroll
        for (int c = 0; c < 4; c++)
#pragma unroll
            for (int r = 0; r < 2; r++) w.q[c][r] = gpu_ldg((const uint2 *)((r ? wr1 : wr0) + 128 * (size_t)sbn + 32 * c + 8 * t));
    }
    if (nx) { /* the next scale words after the chunks (held through them, they would take registers the groups use) */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint8_t *row = r ? wr1 : wr0;
#pragma unroll
            for (int i = 0; i < 3; i++) w.s[r][i] = gpu_ldg((const uint32_t *)(row + k4_sc_off(n_sb) + 12 * (size_t)sbn + 4 * i));
            w.dm[r] = gpu_ldg((const uint32_t *)(row + k4_dm_off(n_sb) + 4 * (size_t)sbn));
        }
    }
    const float *dd = (const float *)(st + L::DS);
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint2 bb = *(const uint2 *)(st + L::BS + (8 * j + g) * 32 + 8 * t);
        int M[4];
        mmq_bsum<0>(M, mf[0], mf[1], bb);
        const float da[2] = {dd[8 * j + 2 * t], dd[8 * j + 2 * t + 1]};
#pragma unroll
        for (int k = 0; k < 4; k++) y[j][k] = __fadd_rn(y[j][k], term_kmin(da[k & 1], d[k >> 1], dmin[k >> 1], I[j][k], M[k]));
    }
}
/* Q6_K: the words of one half of a super-block (128 elements) of the lane's two rows: ql 4 words and qh 2 a row. The
 * kernel holds the half being summed; the next half (or the next super-block's first, when nx) is asked for as soon as
 * the current one is unpacked, so its loads are in flight during the second quarter's MMAs (the split's super-blocks
 * were sent to L2 before the dependency wait). */
struct mmq_q6h { uint32_t ql[4][2], qh[2][2], sc[2][4]; unsigned short d[2]; };
/* the half's quant words; with nh 0 also the super-block's scale words (word i: the sub-blocks 4i .. 4i + 3) and d */
static __device__ __forceinline__ void mmq_q6_load(mmq_q6h &q, const uint8_t *wr0, const uint8_t *wr1, int n_sb, int sb, int nh, int t) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint8_t *row = r ? wr1 : wr0;
#pragma unroll
        for (int i = 0; i < 4; i++) q.ql[i][r] = gpu_ldg((const uint32_t *)(row + 128 * (size_t)sb + 64 * nh + 16 * i + 4 * t));
#pragma unroll
        for (int j = 0; j < 2; j++) q.qh[j][r] = gpu_ldg((const uint32_t *)(row + 128 * (size_t)n_sb + 64 * (size_t)sb + 32 * nh + 16 * j + 4 * t));
        if (nh == 0) {
#pragma unroll
            for (int i = 0; i < 4; i++) q.sc[r][i] = gpu_ldg((const uint32_t *)(row + 192 * (size_t)n_sb + 16 * (size_t)sb) + i);
            q.d[r] = gpu_ldg((const unsigned short *)(row + 208 * (size_t)n_sb + 2 * (size_t)sb));
        }
    }
}
template <int NT>
static __device__ __forceinline__ void mmq_sb(mmq_q6h &hw, bool nx, const uint8_t *wr0, const uint8_t *wr1, int n_sb, int sb, int sbn,
                                              const uint8_t *st, int g, int t, float (&y)[NT][4]) {
    typedef mmq_st<GGML_TYPE_Q6_K> L;
    /* the -32 offset's A fragment (the scale bytes 4t .. 4t + 3: word t) and d, taken before the words are asked for again */
    uint32_t sw[2];
    float d[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        sw[r] = t == 0 ? hw.sc[r][0] : t == 1 ? hw.sc[r][1] : t == 2 ? hw.sc[r][2] : hw.sc[r][3];
        d[r] = sb_h2f<true>(hw.d[r]);
    }
    int I[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) I[j][0] = I[j][1] = I[j][2] = I[j][3] = 0;
#pragma unroll
    for (int nh = 0; nh < 2; nh++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            /* sub-blocks 8 nh + 2 wq + j, wq = 2h, 2h + 1: the scale bytes of word 2 nh + h, in order */
            uint32_t q[4][2];
            int scv[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int wq = 2 * h + (i >> 1), j = i & 1, qi = 2 * (wq & 1) + j, lsh = 4 * h, hsh = 2 * wq;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    q[i][r] = ((hw.ql[qi][r] >> lsh) & 0x0F0F0F0Fu) | (((hw.qh[j][r] >> hsh) & 0x03030303u) << 4);
                    /* byte i, sign-extended (the permute's sign-replicating selectors) */
                    scv[i][r] = mmq_sext8(hw.sc[r][2 * nh + h], i);
                }
            }
            if (h == 1) { /* the half's words are unpacked: the next half's loads */
                if (nh == 0) mmq_q6_load(hw, wr0, wr1, n_sb, sb, 1, t);
                else if (nx) mmq_q6_load(hw, wr0, wr1, n_sb, sbn, 0, t);
            }
#pragma unroll
            for (int jt = 0; jt < NT; jt++) {
                const uint8_t *aq = st + (8 * jt + g) * L::QS + 4 * t + 128 * nh + 64 * h;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const uint32_t x = *(const uint32_t *)(aq + 32 * (i >> 1) + 16 * (i & 1));
                    int cc[4] = {0, 0, 0, 0};
                    mma_k16_u8s8(cc, q[i][0], q[i][1], x);
#pragma unroll
                    for (int k = 0; k < 4; k++) I[jt][k] += scv[i][k >> 1] * cc[k];
                }
            }
        }
    }
    const float *dd = (const float *)(st + L::DS);
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint2 bb = *(const uint2 *)(st + L::BS + (8 * j + g) * 32 + 8 * t);
        int B[4];
        mmq_bsum<1>(B, sw[0], sw[1], bb);
        const float da[2] = {dd[8 * j + 2 * t], dd[8 * j + 2 * t + 1]};
#pragma unroll
        for (int k = 0; k < 4; k++) y[j][k] = __fadd_rn(y[j][k], term_k(da[k & 1], d[k >> 1], I[j][k] - 32 * B[k]));
    }
}
/* the activation rows ag .. ag + na - 1 of super-block sb into a stage (asynchronous copies; rows past na not copied) */
template <int KT> static __device__ __forceinline__ void mmq_stage(uint8_t *st, const cu_act_view &a, int ag, int na, int sb) {
    typedef mmq_st<KT> L;
    const int64_t n = a.n, n_sb = n / QK_K;
    for (int i = threadIdx.x; i < na * 16; i += blockDim.x) { /* quants: 16 pieces of 16 bytes a row */
        const int r = i >> 4, k = i & 15;
        gpu_cp16(st + r * L::QS + 16 * k, a.k_qs + (int64_t)(ag + r) * n + (int64_t)sb * QK_K + 16 * k);
    }
    for (int i = threadIdx.x; i < na * 2; i += blockDim.x) { /* block sums: 2 pieces a row */
        const int r = i >> 1, k = i & 1;
        gpu_cp16(st + L::BS + r * 32 + 16 * k, a.k_bs + (int64_t)(ag + r) * (n / 16) + (int64_t)sb * 16 + 8 * k);
    }
    for (int r = threadIdx.x; r < na; r += blockDim.x) mmrs_cp4(st + L::DS + 4 * r, a.k_d + (int64_t)(ag + r) * n_sb + sb);
}

/* A CTA sums fragments: a tile (16 MMQ_WM weight rows of a segment, seg.cta0 the segment's first tile) over a run of
 * its super-blocks [k0, k1), added from 0 in order. Two ways to cut a launch into fragments:
 * - split (sf 0): grid (tiles, splits, groups of 8 MMQ_NT activation rows); fragment (blockIdx.x, blockIdx.y) takes
 *   super-blocks [y kc, min((y + 1) kc, n_sb));
 * - stream (sf > 0; kc the launch's tiles, sf the workspace's slots a tile): grid (N CTAs, 1, groups); the launch's
 *   units (tile, super-block), tile-major, are cut into N runs as even as integers allow, CTA c taking units
 *   [c U / N, (c + 1) U / N) (U = tiles n_sb) in order, so a run may end one tile and begin the next: every SM busy
 *   with the same share of the work whatever the tile count (the split form leaves SMs idle or runs a second round).
 * A tile of one fragment is stored at once: the CPU reference's bits. A tile of several writes each fragment's sums to
 * the workspace (slot: its place among the tile's fragments), and the fragment that finishes last adds them in order
 * (then the bias and the residual), through the backend's workspace and counters (P.mmq_ws, P.mmq_cnt). Dynamic shared
 * memory: two stages. */
/* the CTA whose run holds unit u (N runs over U units) */
static __device__ __forceinline__ int mmq_cta_of(int64_t u, int N, int64_t U) { return (int)(((u + 1) * N - 1) / U); }

template <int KT, int NT>
static __global__ void __launch_bounds__(32 * MMQ_WM, NT <= 4 ? VLLMC_MMQ_MINB4 : 2) mm_kernel_mmq(const struct cu_mm_args P, int kc, int sf) {
    extern __shared__ __align__(16) uint8_t mmq_smem[];
    typedef mmq_st<KT> L;
    __shared__ unsigned last;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_sb = (int)(P.a.n / QK_K), N = (int)gridDim.x;
    const int64_t U = sf ? (int64_t)kc * n_sb : 0;
    int64_t u = sf ? (int64_t)blockIdx.x * U / N : 0;
    const int64_t u1 = sf ? ((int64_t)blockIdx.x + 1) * U / N : 0;
    const int ag0 = (int)blockIdx.z * 8 * NT, na = min(8 * NT, P.n_act - ag0);
    /* the stage rows na .. 8 NT - 1 (read by the last group, never stored): zeros in both stages */
    for (int i = threadIdx.x; i < 2 * (8 * NT - na); i += blockDim.x) {
        uint8_t *sr = mmq_smem + (i & 1) * L::BYTES;
        const int r = na + (i >> 1);
        for (int k = 0; k < L::QS; k += 4) *(uint32_t *)(sr + r * L::QS + k) = 0u;
        for (int k = 0; k < 32; k += 4) *(uint32_t *)(sr + L::BS + r * 32 + k) = 0u;
        *(float *)(sr + L::DS + 4 * r) = 0.f;
    }
    for (bool first = true;; first = false) {
        int tile, k0, k1, frag, nfrag, slots;
        if (sf) {
            tile = (int)(u / n_sb);
            k0 = (int)(u - (int64_t)tile * n_sb);
            k1 = (int)min((int64_t)n_sb, k0 + (u1 - u));
            const int c0 = mmq_cta_of((int64_t)tile * n_sb, N, U);
            frag = (int)blockIdx.x - c0;
            nfrag = mmq_cta_of((int64_t)tile * n_sb + n_sb - 1, N, U) - c0 + 1;
            slots = sf;
        } else {
            tile = (int)blockIdx.x;
            k0 = (int)blockIdx.y * kc;
            k1 = min(n_sb, k0 + kc);
            frag = (int)blockIdx.y;
            nfrag = slots = (int)gridDim.y;
        }
        int si = 0;
#pragma unroll
        for (int i = 1; i < CU_MM_MAX_SEG; i++)
            if (i < P.n_seg && tile >= P.seg[i].cta0) si = i;
        const cu_mm_seg &S = P.seg[si];
        const int tr0 = (tile - S.cta0) * 16 * MMQ_WM, r0 = tr0 + 16 * wid, rows = min(16, S.n_rows - r0);
        /* rows past the segment read its last row (their sums are not stored) */
        const int rl = S.n_rows - 1;
        const uint8_t *wr0 = S.w + (size_t)min(r0 + g, rl) * S.stride, *wr1 = S.w + (size_t)min(r0 + g + 8, rl) * S.stride;
        /* the first super-block's bytes (before the dependency wait in the first fragment), each later one during the
         * super-block before it */
        typename std::conditional<KT == GGML_TYPE_Q4_K, mmr_q4, mmq_q6h>::type w;
        if constexpr (KT == GGML_TYPE_Q4_K) mmq_load(w, wr0, wr1, n_sb, k0, t);
        else mmq_q6_load(w, wr0, wr1, n_sb, k0, 0, t);
        /* the fragment's super-blocks of the warp's rows to L2 (4 lanes a row pair: the quant and the high / scale bytes) */
        for (int sb = k0 + 1; sb < k1; sb++) {
            const uint8_t *row = (t >> 1) ? wr1 : wr0;
            if constexpr (KT == GGML_TYPE_Q6_K) gpu_prefetch_l2(row + ((t & 1) ? 128 * (size_t)n_sb + 64 * (size_t)sb : 128 * (size_t)sb));
            else gpu_prefetch_l2(row + ((t & 1) ? k4_sc_off(n_sb) + 12 * (size_t)sb : 128 * (size_t)sb));
        }
        if (first) {
            gpu_pdl_wait();
            gpu_pdl_trigger();
        }
        float y[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) y[j][0] = y[j][1] = y[j][2] = y[j][3] = 0.f;
        mmq_stage<KT>(mmq_smem, P.a, ag0, na, k0);
        gpu_cp_commit();
        for (int sb = k0; sb < k1; sb++) {
            const uint8_t *st = mmq_smem + ((sb - k0) & 1) * L::BYTES;
            if (sb + 1 < k1) {
                mmq_stage<KT>(mmq_smem + ((sb + 1 - k0) & 1) * L::BYTES, P.a, ag0, na, sb + 1);
                gpu_cp_commit();
                gpu_cp_wait_group<1>();
            } else {
                gpu_cp_wait_group<0>();
            }
            __syncthreads(); /* the stage of sb, from every thread's copies */
            if constexpr (KT == GGML_TYPE_Q4_K) {
                mmq_sb<NT>(w, sb + 1 < k1, wr0, wr1, n_sb, sb + 1, st, g, t, y);
            } else {
                mmq_sb<NT>(w, sb + 1 < k1, wr0, wr1, n_sb, sb, sb + 1, st, g, t, y);
            }
            __syncthreads(); /* the stage is read before the copies of sb + 2 (or the next fragment's) overwrite it */
        }
        if (nfrag == 1) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int row = g + 8 * (k >> 1), act = 8 * j + 2 * t + (k & 1);
                    if (row >= rows || act >= na) continue;
                    float v = y[j][k];
                    const int64_t o = (int64_t)(ag0 + act) * S.ld_y + r0 + row;
                    if (S.bias) v = __fadd_rn(v, S.bias[r0 + row]);
                    S.y[o] = v;
                    if (S.res) S.res[o] = __fadd_rn(S.res[o], v);
                }
        } else {
            /* the fragment's sums to the workspace: [tile][slot][activation row][tile row], 16 MMQ_WM floats a row */
            constexpr int TR = 16 * MMQ_WM, TO = 8 * NT * TR, PT = TO / 4 / (32 * MMQ_WM); /* PT float4 a thread in the tail */
            const int64_t wtile = (int64_t)blockIdx.z * (sf ? kc : (int)gridDim.x) + tile;
            float *wt = P.mmq_ws + (wtile * slots + frag) * TO;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int k = 0; k < 4; k++) wt[(8 * j + 2 * t + (k & 1)) * TR + 16 * wid + g + 8 * (k >> 1)] = y[j][k];
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) last = atomicAdd(&P.mmq_cnt[wtile], 1u) == (unsigned)nfrag - 1;
            __syncthreads();
            if (last) {
                __threadfence();
                /* the last fragment adds the tile's partials in order: each thread PT float4 of every fragment, all of
                 * a fragment's loads in flight at once (one L2 round trip a fragment), then the residual's and the
                 * bias's loads, then the stores */
                const float4 *w0 = (const float4 *)(P.mmq_ws + wtile * slots * TO);
                float4 v[PT];
#pragma unroll
                for (int q = 0; q < PT; q++) v[q] = __ldcg(w0 + threadIdx.x + q * 32 * MMQ_WM);
                for (int k = 1; k < nfrag; k++) {
                    float4 p[PT];
#pragma unroll
                    for (int q = 0; q < PT; q++) p[q] = __ldcg(w0 + (size_t)k * (TO / 4) + threadIdx.x + q * 32 * MMQ_WM);
#pragma unroll
                    for (int q = 0; q < PT; q++) {
                        v[q].x = __fadd_rn(v[q].x, p[q].x);
                        v[q].y = __fadd_rn(v[q].y, p[q].y);
                        v[q].z = __fadd_rn(v[q].z, p[q].z);
                        v[q].w = __fadd_rn(v[q].w, p[q].w);
                    }
                }
                float rv[PT][4];
#pragma unroll
                for (int q = 0; q < PT; q++) {
                    const int i = 4 * ((int)threadIdx.x + q * 32 * MMQ_WM), row = i % TR, act = i / TR;
                    const float ve[4] = {v[q].x, v[q].y, v[q].z, v[q].w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const bool ok = act < na && tr0 + row + e < S.n_rows;
                        rv[q][e] = ok && S.bias ? __fadd_rn(ve[e], S.bias[tr0 + row + e]) : ve[e];
                    }
                }
                float xv[PT][4];
#pragma unroll
                for (int q = 0; q < PT; q++) {
                    const int i = 4 * ((int)threadIdx.x + q * 32 * MMQ_WM), row = i % TR, act = i / TR;
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        xv[q][e] = act < na && tr0 + row + e < S.n_rows && S.res ? S.res[(int64_t)(ag0 + act) * S.ld_y + tr0 + row + e] : 0.f;
                }
#pragma unroll
                for (int q = 0; q < PT; q++) {
                    const int i = 4 * ((int)threadIdx.x + q * 32 * MMQ_WM), row = i % TR, act = i / TR;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (act >= na || tr0 + row + e >= S.n_rows) continue;
                        const int64_t o = (int64_t)(ag0 + act) * S.ld_y + tr0 + row + e;
                        S.y[o] = rv[q][e];
                        if (S.res) S.res[o] = __fadd_rn(xv[q][e], rv[q][e]);
                    }
                }
                if (threadIdx.x == 0) P.mmq_cnt[wtile] = 0; /* for the next launch (after this grid's end) */
            }
        }
        if (!sf) break;
        u = (int64_t)tile * n_sb + k1;
        if (u >= u1) break;
        __syncthreads(); /* last, read above, is written again by the next fragment */
    }
}
template <int KT> static inline size_t mmq_smem_bytes(void) { return 2 * (size_t)mmq_st<KT>::BYTES; }
#endif

#if !defined(VLLMC_HIP)
/* The Q8_0 / F32 segments of a several-row launch whose K-quant rows go to mm_kernel_mmrs (the GDN in-proj's beta and
 * alpha rows): a warp a (4-row tile, activation row), MMO_WARPS tiles a CTA, blockIdx.y the activation row. Each warp
 * sums with mv_other_rows for one activation row, the ops of the column-split kernel's several-row form in its order,
 * so the bits are that kernel's; that kernel gave these launches 8 rows a CTA, 2 busy warps each walking 8 activation
 * rows in turn (qwen35-4b at 16 sequences: 16 CTAs, 36 us a launch). */
#define MMO_WARPS 4
static __global__ void __launch_bounds__(32 * MMO_WARPS) mm_kernel_other(const struct cu_mm_args P) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const cu_mm_seg &S = P.seg[mv_seg_of(P)];
    const int r0 = ((int)blockIdx.x - S.cta0) * (MM_TR * MMO_WARPS) + MM_TR * wid, rows = min(MM_TR, S.n_rows - r0);
    const uint8_t *wb = S.w + (size_t)(rows > 0 ? r0 : 0) * S.stride;
    for (int i = lane; rows > 0 && i < rows * (int)(S.stride / 128); i += 32) gpu_prefetch_l2(wb + 128 * (size_t)i);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    if (rows > 0) mv_other_rows(P, S, wb, r0, rows, (int)blockIdx.y, 1, lane, 0, 1);
}
#endif

uint64_t cu_mmr_launches, cu_mmr_tiled_launches, cu_mmq_launches, cu_mmq_split_launches, cu_mmq_stream_launches;
extern "C" uint64_t backend_cuda_mmr_launches(void) { return cu_mmr_launches; }
extern "C" uint64_t backend_cuda_mmq_launches(void) { return cu_mmq_launches; }
extern "C" uint64_t backend_cuda_mmq_split_launches(void) { return cu_mmq_split_launches; }
extern "C" uint64_t backend_cuda_mmq_stream_launches(void) { return cu_mmq_stream_launches; }
extern "C" uint64_t backend_cuda_mmr_tiled_launches(void) { return cu_mmr_tiled_launches; }

/* The Q4_K / Q6_K segments of a several-row launch on mm_kernel_mmrs (the others first, in a launch of their own on the
 * column-split kernel), a launch a type. Rows of fewer than mmr_small_sb super-blocks only from mmr_small_rows
 * activation rows (measured: the 2,048-column launches of qwen36-14b-a3b slower than the column-split kernel at 2-4
 * rows, faster from 8). False: nothing launched. The conv and the norm + quantize of the launch are not done here (the
 * caller launches them after). */
static bool mm_launch_mmr(const struct cu_mm_args *args, gpuStream_t s) {
#if defined(VLLMC_HIP)
    (void)args; (void)s;
    return false;
#else
    const int64_t n = args->a.n;
    if (args->n_act < 2 || args->n_act > cu_mm_cfg.mmr_rows || args->row_order || args->nq.on || n % QK_K != 0 || !args->a.k_qs)
        return false;
    if (args->n_act > MMRS_MAX_ROWS && !(cu_mm_cfg.mmq_rows > 0 && args->n_act >= cu_mm_cfg.mmq_rows)) return false;
    unsigned k4 = 0, k6 = 0;
    for (int i = 0; i < args->n_seg; i++) {
        const int t = args->seg[i].type;
        if (t == GGML_TYPE_Q4_K) k4 |= 1u << i;
        else if (t == GGML_TYPE_Q6_K) k6 |= 1u << i;
        else if (t != GGML_TYPE_Q8_0 && t != GGML_TYPE_F32) return false;
    }
    const int n_sb = (int)(n / QK_K), sbw = n_sb <= 2 * MMR_WARPS ? 2 : 4, w = (n_sb + sbw - 1) / sbw;
    if (!(k4 | k6) || (n_sb < cu_mm_cfg.mmr_small_sb && args->n_act < cu_mm_cfg.mmr_small_rows)) return false;
    typedef void (*fn_t)(const struct cu_mm_args);
    /* [type][sbw 2 / 4][R 1 / 2 / 4] */
    static const fn_t kfs[2][2][3] = {
        {{mm_kernel_mmrs<2, GGML_TYPE_Q4_K, 1>, mm_kernel_mmrs<2, GGML_TYPE_Q4_K, 2>, mm_kernel_mmrs<2, GGML_TYPE_Q4_K, 4>},
         {mm_kernel_mmrs<4, GGML_TYPE_Q4_K, 1>, mm_kernel_mmrs<4, GGML_TYPE_Q4_K, 2>, mm_kernel_mmrs<4, GGML_TYPE_Q4_K, 4>}},
        {{mm_kernel_mmrs<2, GGML_TYPE_Q6_K, 1>, mm_kernel_mmrs<2, GGML_TYPE_Q6_K, 2>, mm_kernel_mmrs<2, GGML_TYPE_Q6_K, 4>},
         {mm_kernel_mmrs<4, GGML_TYPE_Q6_K, 1>, mm_kernel_mmrs<4, GGML_TYPE_Q6_K, 2>, mm_kernel_mmrs<4, GGML_TYPE_Q6_K, 4>}}};
    static int smem_ok = -1; /* once: the instances' shared memory past 48 KB */
    if (smem_ok < 0) {
        smem_ok = 1;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++) smem_ok &= gpuFuncSetMaxDynamicSmem((const void *)kfs[a][b][c], MMRS_SMEM_MAX) == gpuSuccess;
        (void)gpuGetLastError();
    }
    const size_t smem_max = smem_ok ? MMRS_SMEM_MAX : 48 * 1024;
    if (w > MMR_WARPS || mmrs_smem_bytes(w, sbw, 1, k6 != 0) > smem_max) return false;
    if ((k4 | k6) != (1u << args->n_seg) - 1) { /* the Q8_0 / F32 segments first */
        struct cu_mm_args o;
        mm_subset(args, ~(k4 | k6), &o);
        o.conv.on = 0;
        o.nq.on = 0;
        int ctas = 0;
        for (int i = 0; i < o.n_seg; i++) {
            o.seg[i].cta0 = ctas;
            ctas += (int)GPU_CEIL_DIV(o.seg[i].n_rows, MM_TR * MMO_WARPS);
        }
        gpu_launch(mm_kernel_other, dim3((unsigned)ctas, (unsigned)args->n_act), dim3(32 * MMO_WARPS), 0, s, o);
    }
    for (int ty = 0; ty < 2; ty++) { /* a launch for each type present */
        const unsigned mask = ty ? k6 : k4;
        if (!mask) continue;
        struct cu_mm_args k;
        mm_subset(args, mask, &k);
        if (cu_mm_cfg.mmq_rows > 0 && args->n_act >= cu_mm_cfg.mmq_rows) {
            /* tiles of 16 MMQ_WM rows x up to 8 MMQ_NT activation rows (mm_kernel_mmq). Where the tiles would run in
             * fewer than 4 rounds of mmq_ctas CTAs (2 an SM), leaving SMs idle or a last round part-empty, the
             * launch's (tile, super-block) units are cut into mmq_ctas even runs (stream; mmq_stream 0: where the
             * tiles are fewer than mmq_ctas, K split into as many splits as still fit, or at least mmq_ctas with
             * mmq_fill 0), the fragments' sums through the workspace */
            int tiles = 0;
            for (int i = 0; i < k.n_seg; i++) {
                k.seg[i].cta0 = tiles;
                tiles += (int)GPU_CEIL_DIV(k.seg[i].n_rows, 16 * MMQ_WM);
            }
            /* a CTA's activation rows: 8 gnt (mmq_nt: 4 groups of 8 by default, 64 rows in 2 CTAs, the weights
             * unpacked in each; launches of many tiles, the LM head, 8 groups: the weights unpacked once for 64 rows,
             * and they run in rounds whatever the cut); the instance for its groups (2, 4 or 8; the rows past n_act
             * are zeros) */
            const int ctas = cu_mm_cfg.mmq_ctas;
            const int gnt = tiles >= 4 * ctas || cu_mm_cfg.mmq_nt > 4 ? MMQ_NT : cu_mm_cfg.mmq_nt <= 2 ? 2 : 4;
            const int groups = (int)GPU_CEIL_DIV(args->n_act, 8 * gnt);
            const int nt = groups > 1 ? gnt : (int)GPU_CEIL_DIV(args->n_act, 8), ni = nt <= 2 ? 0 : nt <= 4 ? 1 : 2;
            static void (*const kq[2][3])(const struct cu_mm_args, int, int) = {
                {mm_kernel_mmq<GGML_TYPE_Q4_K, 2>, mm_kernel_mmq<GGML_TYPE_Q4_K, 4>, mm_kernel_mmq<GGML_TYPE_Q4_K, 8>},
                {mm_kernel_mmq<GGML_TYPE_Q6_K, 2>, mm_kernel_mmq<GGML_TYPE_Q6_K, 4>, mm_kernel_mmq<GGML_TYPE_Q6_K, 8>}};
            const size_t smem = ty ? mmq_smem_bytes<GGML_TYPE_Q6_K>() : mmq_smem_bytes<GGML_TYPE_Q4_K>();
            const int64_t TO = (int64_t)(8 * (2 << ni)) * (16 * MMQ_WM); /* a workspace slot (the instance's tile) */
            bool done = false;
            const bool ws = args->mmq_ws && args->mmq_cnt; /* split and stream forms: the backend's workspace */
            if (ws && cu_mm_cfg.mmq_stream && ctas > 1 && 4 * ctas > tiles * groups && tiles * groups <= MMQ_TILES) {
                /* stream (launches of up to 4 rounds of tiles): N runs of at least 2 units (tile, super-block) each;
                 * the slots a tile: its most fragments */
                const int64_t U = (int64_t)tiles * n_sb;
                const int N = (int)std::min<int64_t>(ctas / groups, U / 2);
                int sf = 1;
                for (int T = 0; N > 1 && T < tiles; T++) {
                    const int64_t f0 = ((int64_t)T * n_sb + 1) * N - 1, f1 = ((int64_t)T * n_sb + n_sb) * N - 1;
                    sf = std::max(sf, (int)(f1 / U - f0 / U + 1));
                }
                if (N > 1 && (int64_t)groups * tiles * sf * TO <= MMQ_WS_FLOATS) {
                    gpu_launch(kq[ty][ni], dim3((unsigned)N, 1u, (unsigned)groups), dim3(32 * MMQ_WM), smem, s, k, tiles, sf);
                    cu_mmq_stream_launches++;
                    cu_mmq_split_launches++;
                    done = true;
                }
            }
            if (!done) {
                int ns = 1;
                if (ws && cu_mm_cfg.mmq_ctas > tiles * groups && tiles * groups <= MMQ_TILES) {
                    ns = std::min(n_sb, cu_mm_cfg.mmq_fill ? cu_mm_cfg.mmq_ctas / (tiles * groups)
                                                           : (int)GPU_CEIL_DIV(cu_mm_cfg.mmq_ctas, tiles * groups));
                    while (ns > 1 && (int64_t)tiles * groups * ns * TO > MMQ_WS_FLOATS) ns--;
                }
                const int kc = (int)GPU_CEIL_DIV(n_sb, ns);
                ns = (int)GPU_CEIL_DIV(n_sb, kc);
                gpu_launch(kq[ty][ni], dim3((unsigned)tiles, (unsigned)ns, (unsigned)groups), dim3(32 * MMQ_WM), smem, s, k, kc, 0);
                cu_mmq_split_launches += ns > 1;
            }
            cu_mmr_launches++;
            cu_mmq_launches++;
            continue;
        }
        /* R 16-row tiles a CTA (cu_mm_cfg.mmr_rt, 1 by default): the largest of R, R / 2, .. whose CTAs still number
         * mmr_rt_ctas and whose tiles fit the shared memory */
        int ri = 0;
        for (int r = cu_mm_cfg.mmr_rt >= 4 ? 4 : cu_mm_cfg.mmr_rt >= 2 ? 2 : 1; r > 1; r /= 2) {
            int n = 0;
            for (int i = 0; i < k.n_seg; i++) n += (int)GPU_CEIL_DIV(k.seg[i].n_rows, 16 * r);
            if (n >= cu_mm_cfg.mmr_rt_ctas && mmrs_smem_bytes(w, sbw, r, ty != 0) <= smem_max) { ri = r == 4 ? 2 : 1; break; }
        }
        const int R = 1 << ri;
        int ctas = 0;
        for (int i = 0; i < k.n_seg; i++) {
            k.seg[i].cta0 = ctas;
            ctas += (int)GPU_CEIL_DIV(k.seg[i].n_rows, 16 * R);
        }
        gpu_launch(kfs[ty][sbw == 2 ? 0 : 1][ri], dim3((unsigned)ctas), dim3(32 * w), mmrs_smem_bytes(w, sbw, R, ty != 0), s, k);
        cu_mmr_launches++;
        cu_mmr_tiled_launches += R > 1;
    }
    return true;
#endif
}

/* measured on the H200 (docs/BENCHMARKS.md); VLLMC_CUDA_MM="tr0,ks0,tr1,ks1,tr2,ks2[,p0,p1,p2]" overrides (experiments) */
/* cols_lb 6 (the LM head and the 9,216-column rows on the bounded instances; not the 2,560-column Q4_K class, slower
 * there): qwen35-4b decode 518.6 / 519.3 -> 525.5 / 524.6 tok/s (BENCHMARKS.md). CUDA only: HIP keeps the instances its
 * spill check covers. */
#if defined(VLLMC_HIP)
#define MM_COLS_LB 0
#else
#define MM_COLS_LB 6
#endif
/* The tensor-core mat-vec (mm_kernel_mma), a bit per row class (cu_mm_cfg.mma): on CUDA for the Q4_K rows of up to 16
 * super-blocks (qwen35-4b decode 557.5 against 544.7 / 536.0 tok/s; the GDN in-proj 117 -> 100 us a step, gate + up
 * level); the 9,216-column rows (bit 2) measured 2.2x slower a launch (8 rows a CTA of 288 threads, 2 an SM), off.
 * Bit 2048 (AP 6: the next round's rows into L2 after the release, the low nibbles by subtraction) on: qwen35-4b on an
 * H100 1.845-1.847 ms a token against 1.875 (BENCHMARKS.md "The activation's copies; the Q4_K low nibbles"). Bit 4 (the
 * Q6_K rows of up to 16 super-blocks, the LM head excepted: the GDN in-proj and attention rows of the Q4_K_M mix, the MoE
 * models' 2,048-column Q6_K launches) on: H100, qwen35-4b 1.847-1.848 ms against 1.881-1.882, qwen36-14b-a3b 1.877-1.881
 * against 1.909-1.910, qwen36-35b-a3b 1.906-1.907 against 1.936-1.939; with the LM head too (bit 4096) slower (BENCHMARKS.md
 * "Q6_K rows on the tensor cores"). */
#if defined(VLLMC_HIP)
#define MM_MMA 0
#else
#define MM_MMA (1 | 4 | 2048)
#endif
/* several activation rows on the tensor cores (mm_kernel_mmrs, mm_kernel_mmq from mmq_rows) up to this many rows
 * (decode steps of more than 128 sequences and other batches of 32 rows and more take the f16 GEMM: cuda_backend.cu
 * gemm_rows_ok); rows of fewer than 10 super-blocks from 8 activation rows. HIP: none. 65-128 rows run on
 * mm_kernel_mmq (mm_kernel_mmrs stops at MMRS_MAX_ROWS); qwen35-4b on an H100 at 96 sequences ITL 32.4 -> 12.1 ms,
 * 128 41.0 -> 15.4 against the GEMM (BENCHMARKS.md "The 64-sequence step, continued", "Decode steps of 65-128
 * sequences") */
#if defined(VLLMC_HIP)
#define MM_MMR 0
#else
#define MM_MMR 128
#endif
/* mm_kernel_mmq from this many activation rows (of the several-row steps above; qwen35-4b on an H100, the decode's token
 * gap against mm_kernel_mmrs: 16 sequences 4.96 -> 4.30 ms, 32 7.89 -> 5.81, 64 12.67 -> 9.10; BENCHMARKS.md);
 * 0: none (HIP: none) */
#if defined(VLLMC_HIP)
#define MM_MMQ 0
#else
#define MM_MMQ 16
#endif
#if defined(VLLMC_HIP)
#define MM_COLX 0
#else
#define MM_COLX 1
#endif
/* mm_kernel_f32r for the MoE router: qwen36-14b-a3b -2.6%, qwen36-35b-a3b -3.4% a token (H100, BENCHMARKS "The MoE
 * router's rows in registers before the wait"); CUDA only (HIP builds no such kernel) */
#if defined(VLLMC_HIP)
#define MM_F32R 0
#else
#define MM_F32R 1
#endif
struct cu_mm_cfg cu_mm_cfg = {{8192, 65536}, {1, 4, 4}, {0, 2, 1}, {0, 0, 0}, 0, {1, 1, 1}, 64, 0, 3, 1, 0, 16, MM_COLS_LB, 0, 16384, MM_MMA, MM_MMR, 10, 8, 32, 1, 132, MM_MMQ, 132 * (VLLMC_MMQ_MINB4 > 2 ? VLLMC_MMQ_MINB4 : 2), 1, 1, 4, 0, MM_COLX, MM_F32R};

static bool mm_launch_dec(const struct cu_mm_args *args, gpuStream_t s);

/* True when the column-split kernel took the launch (a cu_mm_conv and a cu_nq_fuse in its epilogue). */
static bool mm_launch(const struct cu_mm_args *args, gpuStream_t s);

uint64_t cu_nq_fused_launches;
extern "C" uint64_t backend_cuda_nq_launches(void) { return cu_nq_fused_launches; }

/* The deferred-norm form (BK_ACT_Q8_KD): its writer (kdq.on) and its readers (a.kd) take mm_kernel_mma's 16-row Q4_K
 * instances only: one activation row, Q4_K rows of up to cols_sbw2 super-blocks, the tensor-core mat-vec on for them
 * (cu_mm_cfg.mma bit 1). The host checks cu_mm_kd_takes before it records such a launch. */
bool cu_mm_kd_takes(int type, int64_t n, int n_act) {
#if defined(VLLMC_HIP)
    (void)type; (void)n; (void)n_act;
    return false;
#else
    return n_act == 1 && type == GGML_TYPE_Q4_K && n > 0 && n % QK_K == 0 && n / QK_K <= cu_mm_cfg.cols_sbw2 && n / QK_K <= 16 &&
           (cu_mm_cfg.mma & 1) != 0;
#endif
}
uint64_t cu_kd_write_launches, cu_kd_read_launches;
int cu_kd_abl;
extern "C" uint64_t backend_cuda_kd_launches(int read) { return read ? cu_kd_read_launches : cu_kd_write_launches; }
#if !defined(VLLMC_HIP)
static void mm_launch_kd(const struct cu_mm_args *args, gpuStream_t s) {
    struct cu_mm_args a = *args;
    int ctas = 0;
    for (int i = 0; i < a.n_seg; i++) {
        a.seg[i].cta0 = ctas;
        ctas += (int)GPU_CEIL_DIV(a.seg[i].n_rows, 16);
    }
    const int n_sb = (int)(a.a.n / QK_K), w = (n_sb + 1) / 2;
    /* the reader: AP 7 (AP 6's next-round prefetch and low-nibble subtraction, the 16-value scales); the writer alone:
     * the instance the launch would take without it */
    const int ap = a.a.kd && !(cu_kd_abl & 4) ? 7 : (cu_mm_cfg.mma & 2048) ? 6 : (cu_mm_cfg.mma & 512) ? 4 : 0;
    if (a.a.kd && (cu_kd_abl & 4)) a.a.k_d = a.a.kd_d; /* (the measurement: scales read one a super-block) */
    a.kdq.skip = (cu_kd_abl & 1) != 0;
    /* (the reader at 2,560 columns: bounded to the 4 CTAs an SM of 160 threads the writer's instance has, 96 registers,
     * where it would take 101 and fit 3) */
    const mm_cols_fn k = ap == 7 ? (w == 5 && !(cu_kd_abl & 2) ? mm_kernel_mma<2, 16, 1, 160, 4, 7> : mm_kernel_mma<2, 16, 1, 512, 1, 7>)
                         : ap ? mma_ap<2, 16, 1>(ap) : mm_kernel_mma<2, 16, 1>;
    if (ap >= 6) a.pf_next = mm_resident(k, 32 * w);
    gpu_launch(k, dim3((unsigned)ctas), dim3(32 * w), 0, s, a);
    cu_mma_launches++;
    cu_kd_read_launches += a.a.kd != 0;
    cu_kd_write_launches += a.kdq.on != 0;
}
#endif

void cu_launch_matmul(const struct cu_mm_args *args, gpuStream_t s) {
    if (args->n_act <= 0 || args->n_ctas <= 0) return;
#if !defined(VLLMC_HIP)
    if (args->a.kd || args->kdq.on) { /* (the norm + quantize a record pass may have put in the launch: right after) */
        mm_launch_kd(args, s);
        if (args->nq.on) {
            const cu_nq_fuse &q = args->nq;
            cu_launch_norm_quant(q.mode, q.in0, q.in1, q.ld, q.w, q.eps, q.group, args->n_act, q.out, q.fmts, s);
        }
        return;
    }
#endif
    if (mm_launch(args, s)) { /* the column-split kernel: the conv and the norm + quantize are in it */
        cu_nq_fused_launches += args->nq.on != 0;
        return;
    }
    /* a token a grid row: the conv is fused only into decode steps, each token its own sequence (cuda_backend.cu
     * fuse_gdn_conv), so the tokens are independent (a loop over them in each thread took 12 us a launch at 16) */
    if (args->conv.on)
        gpu_launch(mm_conv_kernel, dim3((unsigned)GPU_CEIL_DIV(args->conv.n_ch, 128), (unsigned)args->n_act), dim3(128), 0, s, *args);
    if (args->nq.on) {
        const cu_nq_fuse &q = args->nq;
        cu_launch_norm_quant(q.mode, q.in0, q.in1, q.ld, q.w, q.eps, q.group, args->n_act, q.out, q.fmts, s);
    }
}

static bool mm_launch(const struct cu_mm_args *args, gpuStream_t s) {
    /* the column-split kernels sum a row in the same order for any number of rows, so under batch invariance
     * (row_order) they may take every launch their types allow (cols_invariant, not yet the default) */
    const bool inv_cols = args->row_order && cu_mm_cfg.cols_invariant;
    if (args->n_act > 1 && !inv_cols && args->n_act <= cu_mm_cfg.dec_rows && mm_launch_dec(args, s)) return false;
    /* (the conv and the norm + quantize after it, by the caller) */
    if (args->n_act > 1 && !inv_cols && mm_launch_mmr(args, s)) return false;
    if (args->n_act > 1 && (inv_cols || (!args->row_order && args->n_act <= cu_mm_cfg.cols_rows)) && mm_launch_cols(args, s)) return true;
    if (args->n_act > 1 && !args->row_order && args->n_act <= cu_mm_cfg.cols_rows && mm_launch_colx(args, s)) return true;
#if !defined(VLLMC_HIP)
    if (args->n_act == 1 && mm_f32r_ok(*args)) {
        gpu_launch(mm_kernel_f32r, dim3((unsigned)GPU_CEIL_DIV(args->total_rows, CU_MM_WARPS)), dim3(32 * CU_MM_WARPS), 0, s, *args);
        cu_f32r_launches++;
        return false;
    }
#endif
    if (args->n_act == 1) {
        const int resident = mm_resident_ctas();
        const int cls = args->total_rows < cu_mm_cfg.rows[0] ? 0 : args->total_rows < cu_mm_cfg.rows[1] ? 1 : 2;
        bool q40 = false; /* the tile kernels have Q4_K, Q6_K, Q8_0 and F32; the other types the row kernel */
        for (int i = 0; i < args->n_seg; i++) {
            const int t = args->seg[i].type;
            if (t != GGML_TYPE_Q4_K && t != GGML_TYPE_Q6_K && t != GGML_TYPE_Q8_0 && t != GGML_TYPE_F32) q40 = true;
        }
        int ks = q40 ? 0 : cu_mm_cfg.ks[cls];
        int tr = max(1, min(MM_TR, (int)cu_mm_cfg.tr[cls]));
        /* row_order (batch invariance): the row must sum as mm_row does in the multi-row kernel: no split-K over
         * warps, and tiles of several rows only where a row holds a whole number of warp steps (8 super-blocks,
         * 32 Q8_0 blocks; a tile deals (row, block) units to the lane groups), else tiles of one row */
        bool tile_order = true;
        for (int i = 0; i < args->n_seg; i++) {
            const int t = args->seg[i].type;
            if ((t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K) ? (args->a.n / QK_K) % 8 != 0 : t == GGML_TYPE_Q8_0 ? (args->a.n / 32) % 32 != 0 : false)
                tile_order = false;
        }
        if (args->row_order) {
            if (ks > 1) ks = 1;
            if (!tile_order) tr = 1;
        }
        if ((inv_cols || (!args->row_order && cu_mm_cfg.cols[cls])) &&
            (mm_launch_cols(args, s) || mm_launch_colx(args, s)))
            return true;
        if (ks == 1 || ks == 2 || ks == 4) {
            struct cu_mm_args a = *args;
            a.total_tiles = 0;
            for (int i = 0; i < a.n_seg; i++) {
                a.seg[i].tile0 = a.total_tiles;
                a.total_tiles += (int32_t)GPU_CEIL_DIV(a.seg[i].n_rows, tr);
            }
            int groups = (int)GPU_CEIL_DIV(a.total_tiles, CU_MM_WARPS / ks);
            const int pers = cu_mm_cfg.pers[cls]; /* (< 0: exactly -pers CTAs, for tests) */
            if (pers > 0) groups = min(groups, pers * split_resident(ks));
            else if (pers < 0) groups = min(groups, -pers);
            const dim3 grid((unsigned)groups), block(32 * CU_MM_WARPS);
            if (ks == 1) gpu_launch(mm_kernel_split<1>, grid, block, 0, s, a, tr);
            else if (ks == 2) gpu_launch(mm_kernel_split<2>, grid, block, 0, s, a, tr);
            else gpu_launch(mm_kernel_split<4>, grid, block, 0, s, a, tr);
        } else if (cls > 0 && !q40 && (!args->row_order || tile_order)) {
            /* 4-row tiles when there are rows enough (measured on the H200: never slower from 8,192 rows of
             * 2,560 columns, 1.4x on the LM head; slower on 2,560-row matrices, which leave warps idle) */
            const int ctas = min((int)GPU_CEIL_DIV(args->total_tiles, CU_MM_WARPS), resident);
            gpu_launch(mm_kernel_1, dim3((unsigned)ctas), dim3(32 * CU_MM_WARPS), 0, s, *args);
        } else {
            const int ctas = min(args->n_ctas, resident);
            gpu_launch(mm_kernel_rows, dim3((unsigned)ctas), dim3(32 * CU_MM_WARPS), 0, s, *args);
        }
    } else {
        const int groups = (args->n_act + VLLMC_MM_PREFILL_ACT - 1) / VLLMC_MM_PREFILL_ACT; /* per target: gpu_compat.h */
        mm_kernel<VLLMC_MM_PREFILL_ACT><<<(unsigned)(args->n_ctas * groups), 32 * CU_MM_WARPS, 0, s>>>(*args);
    }
    return false;
}

/* ---------------------------------------------------------------------------------------------
 * MoE expert mat-vecs: entries (token, expert slot) x tiles of MM_TR weight rows, the expert read from device
 * memory. grid (tile blocks, entries); a warp owns one tile of one matrix of one entry: Q4_K, Q6_K and Q8_0
 * through the decode tile functions (the (row, super-block) units of the tile dealt to all lane groups, so
 * 512-wide down rows keep every lane busy), other types row by row as in mm_row. Integer partials exact,
 * per-block float terms as the reference forms them. Entries of group 0 are the routed ones (expert
 * ids[ent]), group 1 the shared expert's (expert 0 of its own 2-D matrices).
 * ------------------------------------------------------------------------------------------- */

/* Few activation rows (a decode step of several sequences): warp w takes weight row w / n_act and activation row
 * w % n_act, so the n_act warps reading one weight row run side by side and all but the first read it from L2.
 * Each row is summed by the one-row tile functions with tiles of one row: the units of a row go to the lane
 * groups as in mm_row, so the outputs are mm_kernel's bits (batch invariance holds). */
static __global__ void __launch_bounds__(32 * CU_MM_WARPS) mm_kernel_dec(const struct cu_mm_args P) {
    const int lane = threadIdx.x % 32;
    const int64_t gw = (int64_t)blockIdx.x * CU_MM_WARPS + threadIdx.x / 32;
    const int r = (int)(gw % P.n_act);
    const int64_t g = gw / P.n_act;
    if (g >= P.total_rows) return;
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_MM_MAX_SEG; i++)
        if (i < P.n_seg && g >= P.seg[i].row0) si = i;
    const cu_mm_seg &S = P.seg[si];
    const int row = (int)(g - S.row0);
    const uint8_t *w0 = S.w + (size_t)row * S.stride;
    const cu_act_view a = act_row(P.a, r);
    const int n = (int)P.a.n;
    float acc[MM_TR] = {0.f, 0.f, 0.f, 0.f};
    if (S.type == GGML_TYPE_F32) {
        row_fw<1, 8>((const float *)w0, n, a, 0, 1, acc, lane);
    } else {
        if (S.type == GGML_TYPE_Q4_K) tile_q4_K(w0, S.stride, 1, n / QK_K, a, acc, lane, 0, 8);
        else if (S.type == GGML_TYPE_Q6_K) tile_q6_K(w0, S.stride, 1, n / QK_K, a, acc, lane, 0, 8);
        else tile_q8_0(w0, S.stride, 1, n / 32, a, acc, lane, 0, 32);
        acc[0] = group32_sum(acc[0]);
    }
    if (lane == 0) {
        float y = acc[0];
        if (S.bias) y = __fadd_rn(y, S.bias[row]);
        S.y[(int64_t)r * S.ld_y + row] = y;
        if (S.res) S.res[(int64_t)r * S.ld_y + row] = __fadd_rn(S.res[(int64_t)r * S.ld_y + row], y);
    }
}

/* False (nothing launched) when a segment's type has no one-row tile function. */
static bool mm_launch_dec(const struct cu_mm_args *args, gpuStream_t s) {
    for (int i = 0; i < args->n_seg; i++) {
        const int t = args->seg[i].type;
        if (t != GGML_TYPE_Q4_K && t != GGML_TYPE_Q6_K && t != GGML_TYPE_Q8_0 && t != GGML_TYPE_F32) return false;
    }
    const int64_t warps = (int64_t)args->total_rows * args->n_act;
    mm_kernel_dec<<<(unsigned)GPU_CEIL_DIV(warps, CU_MM_WARPS), 32 * CU_MM_WARPS, 0, s>>>(*args);
    return true;
}

static __global__ void __launch_bounds__(32 * CU_MM_WARPS) moe_mm_kernel(const struct cu_moe_mm_args P) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    const int total = P.g[0].n_ent + (P.n_grp > 1 ? P.g[1].n_ent : 0);
    for (int ge = blockIdx.y; ge < total; ge += gridDim.y) {
        const int gi = ge < P.g[0].n_ent ? 0 : 1;
        const struct cu_moe_grp &G = P.g[gi];
        const int ent = gi ? ge - P.g[0].n_ent : ge;
        const int tpm = (G.n_rows + MM_TR - 1) / MM_TR, gt = blockIdx.x * CU_MM_WARPS + wid;
        if (gt >= G.n_mat * tpm) continue;
        const int m = gt / tpm, r0 = (gt - m * tpm) * MM_TR, rows = min(MM_TR, G.n_rows - r0);
        const int64_t e = G.ids ? (int64_t)G.ids[ent] : 0;
        const uint64_t stride = G.stride[m];
        const uint8_t *w0 = G.w[m] + mv_woff((size_t)e * G.exp_bytes[m] + (size_t)r0 * stride, stride, G.n_rows);
        const cu_act_view a = act_row(G.a, ent / G.act_div + G.act_off);
        const int n = (int)G.a.n, type = G.type[m];
        float acc[MM_TR] = {0.f, 0.f, 0.f, 0.f};
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K || type == GGML_TYPE_Q8_0) {
            if (type == GGML_TYPE_Q4_K) tile_q4_K(w0, stride, rows, n / QK_K, a, acc, lane, 0, 8);
            else if (type == GGML_TYPE_Q6_K) tile_q6_K(w0, stride, rows, n / QK_K, a, acc, lane, 0, 8);
            else tile_q8_0(w0, stride, rows, n / 32, a, acc, lane, 0, 32);
#pragma unroll
            for (int r = 0; r < MM_TR; r++) acc[r] = group32_sum(acc[r]);
        } else {
            for (int r = 0; r < rows; r++) {
                const uint8_t *wr = w0 + (size_t)r * stride;
                float v[1] = {0.f};
                if (type == GGML_TYPE_Q4_0) row_q45_0<1, 0>(wr, n / 32, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_Q5_0) row_q45_0<1, 1>(wr, n / 32, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_IQ4_NL) row_q45_0<1, 2>(wr, n / 32, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_MXFP4) row_q45_0<1, 5>(wr, n / 32, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_Q5_K) row_q5_K<1>(wr, n / QK_K, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_IQ4_XS) row_iq4_xs<1>(wr, n / QK_K, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_Q2_K) row_q23_K<1, false>(wr, n / QK_K, a, 0, 1, v, lane);
                else if (type == GGML_TYPE_Q3_K) row_q23_K<1, true>(wr, n / QK_K, a, 0, 1, v, lane);
                else if (fw_type(type)) row_f32<1>(type, wr, n, a, 0, 1, v, lane);
                if (!fw_type(type)) v[0] = group32_sum(v[0]);
                acc_add(acc, r, v[0]);
            }
        }
        if (lane < rows) {
            const float y = lane == 0 ? acc[0] : lane == 1 ? acc[1] : lane == 2 ? acc[2] : acc[3];
            G.y[m][(int64_t)ent * G.ld_y + r0 + lane] = y;
        }
    }
}

void cu_launch_moe_matmul(const struct cu_moe_mm_args *a, gpuStream_t s) {
    int total = 0, ctas = 0;
    for (int i = 0; i < a->n_grp; i++) {
        total += a->g[i].n_ent;
        ctas = max(ctas, (int)GPU_CEIL_DIV(a->g[i].n_mat * (int)GPU_CEIL_DIV(a->g[i].n_rows, MM_TR), CU_MM_WARPS));
    }
    if (total <= 0 || ctas <= 0) return;
    gpu_launch(moe_mm_kernel, dim3((unsigned)ctas, (unsigned)min(total, 65535)), dim3(32 * CU_MM_WARPS), 0, s, *a);
}

/* ---------------------------------------------------------------------------------------------
 * MoE decode on the column-split shape (cu_launch_moe_cols): two launches in place of four.
 *   gate+up: grid (row blocks of the 2 matrices, entries then shared-expert rows). Each warp of a routed
 *     entry's CTA routes its token itself (moe_route_warp: the route kernel's ops in its order, in
 *     registers), so no routing launch sits between the router and the experts; the CTAs (0, t k) write
 *     the token's ids and weights for the down and mix launches. The shared expert's CTAs load their
 *     weights before the dependency wait.
 *   down: each CTA forms its entry's hidden row, SwiGLU of the gate / up rows then Q8_K, into shared
 *     memory (norm_quant's ops: the same bytes), and multiplies from there; no quantize launch.
 * A CTA is Wsb warps that split a row's super-blocks (as mm_kernel_cols) times 4 / Wsb row sets.
 * ------------------------------------------------------------------------------------------- */
#define MOE_RT_PL 8    /* experts a lane holds while routing in registers: E <= 256 */
/* the top-k's argmax by warp reductions (redux.sync, sm_80 and later; -DVLLMC_MOE_RT_SHFL for the butterfly) */
#if !defined(VLLMC_HIP) && !defined(VLLMC_MOE_RT_SHFL)
#define MOE_RT_REDUX 1
#else
#define MOE_RT_REDUX 0
#endif
#define MOE_SWI_MAX 2048 /* widest hidden row the down launch quantizes into shared memory */

#if MOE_RT_REDUX
/* The lane's largest key m and the lowest slot that holds it: a tree whose every pair keeps its lower slot on a tie (depth
 * 3 where a chain over the 8 slots was 8 deep). */
static __device__ __forceinline__ void moe_rt_best(const unsigned (&key)[MOE_RT_PL], unsigned &m, int &slot) {
    unsigned v[MOE_RT_PL];
    int ix[MOE_RT_PL];
#pragma unroll
    for (int i = 0; i < MOE_RT_PL; i++) { v[i] = key[i]; ix[i] = i; }
#pragma unroll
    for (int w = 1; w < MOE_RT_PL; w *= 2)
#pragma unroll
        for (int i = 0; i + w < MOE_RT_PL; i += 2 * w)
            if (v[i + w] > v[i]) { v[i] = v[i + w]; ix[i] = ix[i + w]; }
    m = v[0];
    slot = ix[0];
}
#endif
/* Softmax over the E logits l (max, then the sum of exp in double, lane-strided and butterfly-reduced), then the
 * k largest probabilities with ties to the lower id, renormalised when norm: moe_route_kernel's ops in its order.
 * Every lane returns the expert of slot want; with write, lane j < k stores slot j's id and weight. */
template <bool CG = false> /* CG: the logits through L2 (read before the dependency wait: another grid wrote them) */
static __device__ int moe_route_warp(const float *l, int E, int k, int norm, int want, bool write, int32_t *ids, float *wts,
                                     int lane) {
    float mx = -INFINITY;
    float lg[MOE_RT_PL];
#pragma unroll
    for (int i = 0; i < MOE_RT_PL; i++) lg[i] = lane + 32 * i < E ? ldf<CG>(l + lane + 32 * i) : 0.f;
#pragma unroll
    for (int i = 0; i < MOE_RT_PL; i++)
        if (lane + 32 * i < E) mx = fmaxf(mx, lg[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, shfl_xor(mx, off));
    /* each expert's expf once, kept for its probability (the same values: the logits were read again and expf formed
     * again after the sum's shuffles) */
    float ex[MOE_RT_PL];
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < MOE_RT_PL; i++) {
        ex[i] = lane + 32 * i < E ? expf(lg[i] - mx) : 0.f;
        if (lane + 32 * i < E) sum += (double)ex[i];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += shfl_xor(sum, off);
    const double rs = 1.0 / sum;
    float p[MOE_RT_PL];
    unsigned taken = 0;
#pragma unroll
    for (int i = 0; i < MOE_RT_PL; i++) {
        const int e = lane + 32 * i;
        p[i] = e < E ? moe_prob((double)ex[i], sum, rs) : 0.f;
        if (e >= E) taken |= 1u << i;
    }
    int want_id = 0, my_id = 0;
    float my_w = 0.f, s = 0.f;
#if MOE_RT_REDUX
    /* each expert's key: the bits of p + 1 (p >= 0, so the bits order as p does; a NaN p as the least), 0 where taken
     * or past E */
    unsigned key[MOE_RT_PL];
#pragma unroll
    for (int i = 0; i < MOE_RT_PL; i++) key[i] = (taken >> i) & 1 ? 0u : p[i] == p[i] ? __float_as_uint(p[i]) + 1u : 1u;
    /* the lane's largest key and its lowest slot, kept across the rounds (formed again after each round's clear) */
    unsigned lm;
    int li;
    moe_rt_best(key, lm, li);
#endif
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
#if MOE_RT_REDUX
        /* the largest key by a warp reduction, then the lowest expert that has it by another: the butterfly's choice
         * (the largest p, ties to the lower id) in two reductions where it took five levels of two shuffles. A lane
         * holds the round's key km only if its own largest is km, and then its lowest expert with km is slot li's */
        const unsigned km = __reduce_max_sync(0xffffffffu, lm);
        const unsigned cand = lm == km ? (unsigned)(lane + 32 * li) : 0xffffffffu;
        be = km ? (int)__reduce_min_sync(0xffffffffu, cand) : 0; /* (km 0: k > E, refused before a launch) */
        bv = km > 1u ? __uint_as_float(km - 1u) : 0.f;
#pragma unroll
        for (int i = 0; i < MOE_RT_PL; i++) key[i] = be == lane + 32 * i ? 0u : key[i];
        moe_rt_best(key, lm, li);
#else
#pragma unroll
        for (int i = 0; i < MOE_RT_PL; i++)
            if (!((taken >> i) & 1) && (p[i] > bv || be == 0x7fffffff)) { bv = p[i]; be = lane + 32 * i; }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = shfl_xor(bv, off);
            const int oe = shfl_xor(be, off);
            if (oe != 0x7fffffff && (be == 0x7fffffff || ov > bv || (ov == bv && oe < be))) { bv = ov; be = oe; }
        }
        if ((be & 31) == lane) taken |= 1u << (be >> 5);
#endif
        if (j == want) want_id = be;
        if (j == lane) { my_id = be; my_w = bv; }
        s = __fadd_rn(s, bv);
    }
    if (write && lane < k) {
        if (norm) {
            if (s < 6.103515625e-5f) s = 6.103515625e-5f;
            my_w = __fdiv_rn(my_w, s);
        }
        ids[lane] = my_id;
        wts[lane] = my_w;
    }
    return want_id;
}

/* cu_launch_moe_route_sort: warp w routes tokens w, w + warps, ... (moe_route_warp: moe_route_kernel's ops, so the same
 * ids and weights), then the CTA sorts the entries by expert (moe_sort.h: moe_sort_kernel's perm and groups). The
 * routing's stores are this CTA's, seen by its threads after the barrier. */
static __global__ void __launch_bounds__(1024) moe_route_sort_kernel(const float *logits, int T, int E, int k, int norm,
                                                                     int32_t *ids, float *wts, int32_t *perm, int4 *grp,
                                                                     int gmax) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5), nw = (int)(blockDim.x >> 5);
    for (int t = w; t < T; t += nw)
        (void)moe_route_warp(logits + (int64_t)t * E, E, k, norm, 0, true, ids + (int64_t)t * k, wts + (int64_t)t * k, lane);
    __syncthreads();
    moe_sort_cta(ids, T * k, E, perm, grp, gmax);
}

bool cu_launch_moe_route_sort(const struct cu_moe_args *a, gpuStream_t s) {
    if (a->T <= 0 || a->T > cu_mm_cfg.moe_rs_rows || a->E > 32 * MOE_RT_PL || a->k < 1 || a->k > 32 || a->k > a->E) return false;
    const int warps = a->T < 32 ? (int)a->T : 32, need = (int)((a->E + 31) / 32);
    const int threads = 32 * (warps > need ? warps : need);
    gpu_launch(moe_route_sort_kernel, dim3(1), dim3((unsigned)threads), 0, s, a->logits, (int)a->T, (int)a->E, (int)a->k,
               (int)a->norm, a->ids, a->wts, a->perm, (int4 *)a->grp, (int)a->gmax);
    return true;
}

/* A MoE expert CTA's place (moe_cols_kernel, moe_grp_kernel): group G's matrix m, row block rb, this warp's row set
 * and super-blocks; lane (row rr of the set's RW, super-block sb, chunk c). ok false: the group has fewer blocks. */
template <int SBW, int RS>
struct moe_cta {
    int n_sb, wsb, sets, rpc, m, set, rb, r0, rows, c, rr, sb;
    bool on, ok;
    __device__ __forceinline__ moe_cta(const struct cu_moe_grp &G, int lane, int wid) {
        n_sb = (int)(G.a.n / QK_K); wsb = (n_sb + SBW - 1) / SBW; sets = (int)(blockDim.x >> 5) / wsb;
        rpc = RS * sets;
        const int tpm = (G.n_rows + rpc - 1) / rpc;
        m = (int)blockIdx.x / tpm;
        ok = m < G.n_mat;
        set = wid / wsb;
        const int ws = wid - set * wsb;
        rb = ((int)blockIdx.x - m * tpm) * rpc; r0 = rb + set * RS; rows = min(RS, G.n_rows - r0);
        c = lane & 3; rr = lane / (4 * SBW);
        sb = ws * SBW + (lane >> 2) % SBW;
        on = sb < n_sb && set < sets;
    }
};

/* One lane's share of a row of any of the K-quant types (mm_kernel_colx's loads and terms), for the MoE kernels'
 * instance of every K-quant type (KT 4: Q5_K_M and IQ4_XS files' experts, with Q4_K / Q6_K beside them): the type's
 * words in one register set, picked by the matrix's type (the same for the whole CTA). (HIP builds no KT 4 instance:
 * maybe_unused there.) */
struct wx_w { uint4 a, b, c, d; uint32_t e, f; };
[[maybe_unused]] static __device__ __forceinline__ wx_w wx_load(int ty, const uint8_t *wr, int n_sb, int sb, int c) {
    wx_w x = {};
    if (ty == GGML_TYPE_Q4_K) {
        const k4_w w = k4_load(wr, n_sb, sb, c);
        x.a = w.q0; x.b = w.q1; x.e = w.s0; x.f = w.s1; x.c.x = w.s2; x.c.y = w.dm;
    } else if (ty == GGML_TYPE_Q5_K) {
        const k5_w w = k5_load(wr, n_sb, sb, c);
        x.a = w.q0; x.b = w.q1; x.c = w.h0; x.d = w.h1; x.e = w.sw;
    } else if (ty == GGML_TYPE_IQ4_XS) {
        const iq4x_w w = iq4x_load(wr, n_sb, sb, c);
        x.a = w.q0; x.b = w.q1; x.e = w.sl; x.f = w.dh;
    } else {
        const q6_w w = q6_load(wr, n_sb, sb, c);
        x.a = w.l0; x.b = w.l1; x.c = w.h0; x.d = w.h1; x.e = w.sc; x.f = w.d;
    }
    return x;
}
[[maybe_unused]] static __device__ __forceinline__ float wx_term(int ty, const wx_w &x, const k4_sel &ks, const mv_act &v, int c, int lane) {
    if (ty == GGML_TYPE_Q4_K) return k4_term<true>(k4_w{x.a, x.b, x.e, x.f, x.c.x, x.c.y}, ks, v);
    if (ty == GGML_TYPE_Q5_K) return k5_term(k5_w{x.a, x.b, x.c, x.d, x.e}, ks, v, lane);
    if (ty == GGML_TYPE_IQ4_XS) return iq4x_term(iq4x_w{x.a, x.b, x.e, x.f}, c, v);
    return q6_term<true>(q6_w{x.a, x.b, x.c, x.d, x.e, x.f}, c & 1, v);
}

/* The lane's chunk of its U rows (u * RW + rr) of expert e's matrix m: Q4_K into w4 or Q6_K into w6 (KT 4: any
 * K-quant type into wx), zeros where
 * the lane is off or past the set's rows. */
template <int SBW, int KT, int U, int RS>
static __device__ __forceinline__ void moe_w_load(const struct cu_moe_grp &G, const moe_cta<SBW, RS> &q, int64_t e, bool k4,
                                                  k4_w *w4, q6_w *w6, wx_w *wx) {
    constexpr int RW = 8 / SBW;
    const uint64_t stride = G.stride[q.m];
    const uint8_t *wb = G.w[q.m] + mv_woff((size_t)e * G.exp_bytes[q.m] + (size_t)max(q.r0, 0) * stride, stride, G.n_rows);
    if constexpr (KT == 4) {
        const int ty = G.type[q.m];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + q.rr;
            wx[u] = q.on && row < q.rows ? wx_load(ty, wb + (size_t)row * stride, q.n_sb, q.sb, q.c) : wx_w{};
        }
    } else if (KT & 1 && k4) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + q.rr;
            if (q.on && row < q.rows) w4[u] = k4_load(wb + (size_t)row * stride, q.n_sb, q.sb, q.c);
            else w4[u] = k4_w{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0, 0, 0};
        }
    } else if (KT & 2) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + q.rr;
            if (q.on && row < q.rows) w6[u] = q6_load(wb + (size_t)row * stride, q.n_sb, q.sb, q.c);
            else w6[u] = q6_w{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0};
        }
    }
}

/* One activation chunk v against the U rows: each row's super-block terms added over the warp into pp[u * RW + rr]. */
template <int SBW, int KT, int U>
static __device__ __forceinline__ void moe_terms(bool k4, const k4_w *w4, const q6_w *w6, const wx_w *wx, int ty, const k4_sel &ks,
                                                 const mv_act &v, int c, int rr, float *pp, int lane) {
    constexpr int RW = 8 / SBW;
    if constexpr (KT == 4) {
#pragma unroll
        for (int u = 0; u < U; u++) mv_warp_part<SBW>(wx_term(ty, wx[u], ks, v, c, lane), &pp[u * RW + rr], lane);
    } else if (KT & 1 && k4) {
#pragma unroll
        for (int u = 0; u < U; u++) mv_warp_part<SBW>(k4_term<true>(w4[u], ks, v), &pp[u * RW + rr], lane);
    } else if (KT & 2) {
#pragma unroll
        for (int u = 0; u < U; u++) mv_warp_part<SBW>(q6_term<true>(w6[u], c & 1, v), &pp[u * RW + rr], lane);
    }
}

/* The mix in the down launch (cu_moe_mix), every thread of a CTA that wrote rows r0 .. r0 + rows - 1 (<= 256) of token
 * t's entry: count them per 256 columns of the token (target: the k routed entries and the shared one, each all the
 * unit's columns); the CTA that completes a unit mixes it (moe_mix_col, Y / Ys through L2 after the acquire fence),
 * then counts it toward the row's RMSNorm + quantize when that is fused too (nq_fuse_finish). */
static __device__ __noinline__ void moe_mix_tail(const struct cu_moe_cols_args &P, int r0, int rows, int t) {
    __shared__ int done[2], n_done;
    const cu_moe_mix &M = P.mix;
    const int64_t n = M.n, nu = (n + 255) / 256;
    const unsigned per = (unsigned)P.k + (M.Ys ? 1u : 0u);
    __syncthreads(); /* the CTA's rows of Y / Ys are written */
    if (threadIdx.x == 0) {
        __threadfence();
        const int nd = nq_count_cols(M.cnt + (int64_t)t * nu, n, 256, r0, r0 + rows, 1u, per, done, 0, 2);
        n_done = nd;
        if (nd) __threadfence();
    }
    __syncthreads();
    const int nd = n_done;
    if (!nd) return;
    nq_cols pc[2];
    for (int d = 0; d < nd; d++) {
        const int64_t c0 = (int64_t)done[d] * 256, c1 = min(n, c0 + 256);
        for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x)
            moe_mix_col<true>(M.Y, M.wts, P.k, M.Ys, M.glog, n, M.out, M.res, t, c);
        pc[d] = nq_cols{c0, c1 - c0};
    }
    if (M.nq.on) nq_fuse_finish(M.nq, pc, nd, t, t, 1); /* a counter per row, as in moe_mix_kernel */
}

template <int SBW, int KT, int U, bool DOWN, bool MIX = false, bool PRE = false> /* MIX: the down launch mixes (instances of
                                                                  their own, so the others' registers stay as they were); PRE:
                                                                  the down launch's routed CTAs route before the wait
                                                                  (cu_mm_cfg.moe_pre) */
static __global__ void __launch_bounds__(256) moe_cols_kernel(const struct cu_moe_cols_args P) {
    constexpr int RW = 8 / SBW, RS = RW * U; /* rows a row set */
    __shared__ float part[16][RS];
    __shared__ __align__(16) int8_t h_qs[DOWN ? MOE_SWI_MAX : 16];
    __shared__ float h_d[DOWN ? MOE_SWI_MAX / QK_K : 1];
    __shared__ __align__(16) int16_t h_bs[DOWN ? MOE_SWI_MAX / 16 : 8];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int gi = (int)blockIdx.y < P.g[0].n_ent ? 0 : 1;
    const struct cu_moe_grp &G = P.g[gi];
    const int ent = gi ? (int)blockIdx.y - P.g[0].n_ent : (int)blockIdx.y;
    const moe_cta<SBW, RS> q(G, lane, wid);
    if (!q.ok) return; /* the whole CTA: this group has fewer row blocks */
    const int arow = ent / G.act_div + G.act_off;
    int64_t e = 0;
    if (PRE && G.ids) { /* down, routed: the gate+up launch's routing again, before the wait. The logits were written by the
                           launch before gate+up, which every gate+up CTA waited for before it let this launch start (its
                           trigger follows its wait); read through L2. The next writer of the logits (the next MoE op's
                           router) starts only after this launch's triggers, which follow these reads. */
        const int t = ent / P.k, j = ent - t * P.k;
        e = moe_route_warp<true>(P.logits + (int64_t)t * P.E, P.E, P.k, P.norm, j, false, NULL, NULL, lane);
    } else if (G.ids) { /* routed: the expert comes from this step's router (after the wait) */
        gpu_pdl_wait();
        if (DOWN) e = G.ids[ent];
        else {
            const int t = ent / P.k, j = ent - t * P.k;
            e = moe_route_warp(P.logits + (int64_t)t * P.E, P.E, P.k, P.norm, j, blockIdx.x == 0 && j == 0 && wid == 0,
                               P.ids + (int64_t)t * P.k, P.wts + (int64_t)t * P.k, lane);
        }
    }
    const bool k4 = KT == 1 || (KT == 3 && G.type[q.m] == GGML_TYPE_Q4_K);
    const int ty = G.type[q.m];
    const bool a6 = KT == 4 ? ty == GGML_TYPE_Q6_K : !k4; /* the activation's Q6_K chunk layout */
    k4_w w4[KT & 1 ? U : 1];
    q6_w w6[KT & 2 ? U : 1];
    wx_w wx[KT == 4 ? U : 1];
    (void)w4; (void)w6; (void)wx;
    moe_w_load<SBW, KT, U>(G, q, e, k4, w4, w6, wx);
    if (!G.ids || PRE) gpu_pdl_wait(); /* the shared expert (or PRE): its weights were loaded while the kernel before finished */
    gpu_pdl_trigger();
    cu_act_view av = act_row(G.a, arow);
    if (DOWN) { /* the entry's hidden row: SwiGLU(gate, up) as norm_quant forms it, Q8_K into shared memory */
        const int64_t n = G.a.n;
        const float *g = P.swi[gi] + (int64_t)arow * P.swi_ld[gi], *up = g + n;
        for (int s = wid; s < q.n_sb; s += (int)(blockDim.x >> 5)) {
            const int64_t e0 = (int64_t)s * QK_K + lane * 8;
            float a[8], b[8], v[8];
            ld8(g + e0, a);
            ld8(up + e0, b);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = __fmul_rn(__fdiv_rn(a[k], __fadd_rn(1.0f, expf(-a[k]))), b[k]);
            quant_q8_K_sb(v, h_qs + s * QK_K, h_d + s, h_bs + s * 16, lane);
        }
        __syncthreads();
        av.x = NULL; av.k_qs = h_qs; av.k_d = h_d; av.k_bs = h_bs; av.o_qs = NULL; av.o_d = NULL;
    }
    mv_act v;
    if (q.on) mv_act_load(av, a6, q.sb, q.c, v);
    else mv_act_zero(v);
    moe_terms<SBW, KT, U>(k4, w4, w6, wx, ty, k4_sel_make(q.c), v, q.c, q.rr, &part[wid][0], lane);
    __syncthreads();
    for (int i = threadIdx.x; i < q.rpc; i += blockDim.x) {
        const int st = i / RS, j = i - st * RS, row = q.rb + i;
        if (st >= q.sets || row >= G.n_rows) continue;
        float y = part[st * q.wsb][j];
        for (int k = 1; k < q.wsb; k++) y = __fadd_rn(y, part[st * q.wsb + k][j]);
        G.y[q.m][(int64_t)ent * G.ld_y + row] = y;
    }
    if (MIX && DOWN && P.mix.on) /* the token of the entry: routed t k + j, shared t */
        moe_mix_tail(P, q.rb, min(q.rpc, G.n_rows - q.rb), gi ? ent : ent / P.k);
}

/* The launch shape of one of the two expert launches: every matrix Q4_K or Q6_K (kt: 1 Q4_K, 2 Q6_K, 3 both), or
 * with Q5_K / IQ4_XS ones (kt 4, CUDA), all
 * groups of one width (n_sb super-blocks, at most 8 warps a row). False if it has none. */
struct moe_cols_shape { int kt, sbw, wsb, sets, U, bx, total; };
static bool moe_cols_shape_of(const struct cu_moe_mm_args &mm, moe_cols_shape &sh) {
    int kt = 0, n_sb = 0, total = 0;
    for (int i = 0; i < mm.n_grp; i++) {
        const struct cu_moe_grp &g = mm.g[i];
        if (g.a.n % QK_K || (n_sb && g.a.n / QK_K != n_sb)) return false;
        n_sb = (int)(g.a.n / QK_K);
        for (int j = 0; j < g.n_mat; j++) {
            if (g.type[j] == GGML_TYPE_Q4_K) kt |= 1;
            else if (g.type[j] == GGML_TYPE_Q6_K) kt |= 2;
#if !defined(VLLMC_HIP)
            else if ((g.type[j] == GGML_TYPE_Q5_K || g.type[j] == GGML_TYPE_IQ4_XS) && cu_mm_cfg.colx) kt |= 4;
#endif
            else return false;
        }
        total += g.n_ent;
    }
    if (kt & 4) kt = 4; /* Q5_K / IQ4_XS: the instance of every K-quant type */
    sh.kt = kt; sh.total = total;
    sh.sbw = n_sb <= 16 ? 2 : 4;
    sh.wsb = (n_sb + sh.sbw - 1) / sh.sbw;
    if (!kt || sh.wsb > 8) return false;
    sh.sets = max(1, 4 / sh.wsb);
    sh.U = kt == 1 ? 4 : 2;
    const int rpc = (8 / sh.sbw) * sh.U * sh.sets;
    sh.bx = 0;
    for (int i = 0; i < mm.n_grp; i++) sh.bx = max(sh.bx, mm.g[i].n_mat * (int)GPU_CEIL_DIV(mm.g[i].n_rows, rpc));
    return true;
}

/* The instance of moe_cols_kernel for K-quant types kt (moe_cols_shape) */
template <int SBW, bool DOWN, bool MIX = false, bool PRE = false> static void (*moe_cols_pick(int kt))(const struct cu_moe_cols_args) {
    if (kt == 1) return moe_cols_kernel<SBW, 1, 4, DOWN, MIX, PRE>;
    if (kt == 2) return moe_cols_kernel<SBW, 2, 2, DOWN, MIX, PRE>;
#if !defined(VLLMC_HIP)
    if (kt == 4) return moe_cols_kernel<SBW, 4, 2, DOWN, MIX, PRE>;
#endif
    return moe_cols_kernel<SBW, 3, 2, DOWN, MIX, PRE>;
}
static uint64_t cu_moe_pre_launches; /* down launches on the PRE instances (tests: the switch took) */
extern "C" uint64_t backend_cuda_moe_pre_launches(void) { return cu_moe_pre_launches; }

/* pre: the down launch's routed CTAs route before the wait (PRE; not with the mix in the launch) */
template <bool DOWN>
static void moe_cols_launch(const struct cu_moe_cols_args &a, const struct cu_moe_mm_args &mm, const moe_cols_shape &sh, bool pre,
                            gpuStream_t s) {
    struct cu_moe_cols_args p = a;
    p.g[0] = mm.g[0];
    if (mm.n_grp > 1) p.g[1] = mm.g[1];
    else { p.g[1] = mm.g[0]; p.g[1].n_ent = 0; }
    typedef void (*fn)(const struct cu_moe_cols_args);
    const int kt = sh.kt;
    fn f;
#if !defined(VLLMC_HIP) /* (HIP: gfx11's 128 VGPRs spill the mixing instances; cu_moe never asks for them there) */
    if (DOWN && p.mix.on) {
        f = sh.sbw == 2 ? moe_cols_pick<2, true, true>(kt) : moe_cols_pick<4, true, true>(kt);
    } else
#endif
    if (DOWN && pre) {
        f = sh.sbw == 2 ? moe_cols_pick<2, true, false, true>(kt) : moe_cols_pick<4, true, false, true>(kt);
        cu_moe_pre_launches++;
    } else f = sh.sbw == 2 ? moe_cols_pick<2, DOWN>(kt) : moe_cols_pick<4, DOWN>(kt);
    gpu_launch(f, dim3((unsigned)sh.bx, (unsigned)sh.total), dim3(32 * sh.wsb * sh.sets), 0, s, p);
}

bool cu_launch_moe_cols(const struct cu_moe_args *a, gpuStream_t s) {
    if (a->E > 32 * MOE_RT_PL || a->k > 32 || a->T > cu_mm_cfg.moe_cols_rows || (a->router.row_order && !cu_mm_cfg.cols_invariant))
        return false;
    for (int i = 0; i < 1 + (a->shared && !a->merged); i++) /* the down launch forms these rows in shared memory */
        if (a->hfmts[i] != BK_ACT_BIT(BK_ACT_Q8_K) || a->n_ff[i] > MOE_SWI_MAX || a->n_ff[i] % QK_K) return false;
    moe_cols_shape gu, dn;
    if (!moe_cols_shape_of(a->gu, gu) || !moe_cols_shape_of(a->down, dn) || gu.total > 65535 || dn.total > 65535)
        return false; /* an entry a grid row */
    struct cu_moe_cols_args p;
    memset(&p, 0, sizeof(p));
    p.logits = a->logits; p.E = a->E; p.k = a->k; p.norm = a->norm; p.ids = a->ids; p.wts = a->wts;
    moe_cols_launch<false>(p, a->gu, gu, false, s);
    /* the hidden rows: routed then (merged: same buffer) shared */
    p.swi[0] = a->gu_buf[0]; p.swi_ld[0] = 2 * a->n_ff[0];
    p.swi[1] = a->merged ? a->gu_buf[0] : a->gu_buf[1]; p.swi_ld[1] = a->merged ? 2 * a->n_ff[0] : 2 * a->n_ff[1];
    if (a->mix_cnt) { /* the mix and the norm + quantize after it in the down launch's epilogue */
        cu_moe_mix &m = p.mix;
        m.Y = a->Y; m.Ys = a->shared ? a->Ys : NULL; m.wts = a->wts; m.glog = a->sgate ? a->glog : NULL;
        m.out = a->out; m.res = a->res; m.cnt = a->mix_cnt; m.n = a->n_embd; m.nq = a->nq; m.on = 1;
    }
    /* the down launch may route again only where its ids are the ones the gate+up launch writes from these logits */
    const bool pre = cu_mm_cfg.moe_pre && !p.mix.on && a->logits && a->down.g[0].ids == a->ids && a->gu.g[0].ids == a->ids;
    moe_cols_launch<true>(p, a->down, dn, pre, s);
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * MoE steps of many rows: the entries grouped by expert (cu_launch_moe_grouped, cuda_moe.cu). grid (row blocks of
 * the group's matrices, routed groups then the shared expert's groups of CU_MOE_GRP tokens); the CTA shape of
 * moe_cols_kernel. A CTA loads its expert's rows once and meets them with each entry of the group in turn (the
 * activation chunk from L1/L2); each entry's super-block terms, shuffles and warp order are moe_cols_kernel's, so
 * an entry's bits do not depend on the grouping.
 * ------------------------------------------------------------------------------------------- */
struct cu_moe_grp_args {
    struct cu_moe_grp g[2];
    const int32_t *perm;
    const int4 *grp;
    int32_t gmax, pad;
};

/* (KT 4: bounded to 2 CTAs an SM, 128 registers; unbounded it took 222, the loop-invariant terms of its types hoisted) */
template <int SBW, int KT, int U>
static __global__ void __launch_bounds__(256, KT == 4 ? 2 : 1) moe_grp_kernel(const struct cu_moe_grp_args P) {
    constexpr int RW = 8 / SBW, RS = RW * U;
    __shared__ float part[16][CU_MOE_GRP][RS];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int gi = (int)blockIdx.y < P.gmax ? 0 : 1;
    const struct cu_moe_grp &G = P.g[gi];
    const moe_cta<SBW, RS> q(G, lane, wid);
    if (!q.ok) return; /* the whole CTA: this group has fewer row blocks */
    int64_t e = 0;
    int start, cnt;
    if (gi == 0) { /* routed: the group (expert, entries) comes from this step's sort (after the wait) */
        gpu_pdl_wait();
        const int4 gr = P.grp[blockIdx.y];
        e = gr.x; start = gr.y; cnt = gr.z;
    } else {
        start = ((int)blockIdx.y - P.gmax) * CU_MOE_GRP;
        cnt = min(CU_MOE_GRP, G.n_ent - start);
    }
    if (cnt <= 0) return;
    const bool k4 = KT == 1 || (KT == 3 && G.type[q.m] == GGML_TYPE_Q4_K);
    const int ty = G.type[q.m];
    const bool a6 = KT == 4 ? ty == GGML_TYPE_Q6_K : !k4; /* the activation's Q6_K chunk layout */
    k4_w w4[KT & 1 ? U : 1];
    q6_w w6[KT & 2 ? U : 1];
    wx_w wx[KT == 4 ? U : 1];
    (void)w4; (void)w6; (void)wx;
    moe_w_load<SBW, KT, U>(G, q, e, k4, w4, w6, wx);
    if (gi) gpu_pdl_wait(); /* the shared expert: its weights were loaded while the kernel before finished */
    gpu_pdl_trigger();
    const k4_sel ks = k4_sel_make(q.c);
    mv_act v;
#pragma unroll 1
    for (int i = 0; i < cnt; i++) {
        const int ent = gi == 0 ? P.perm[start + i] : start + i;
        if (q.on) mv_act_load(act_row(G.a, ent / G.act_div + G.act_off), a6, q.sb, q.c, v);
        else mv_act_zero(v);
        moe_terms<SBW, KT, U>(k4, w4, w6, wx, ty, ks, v, q.c, q.rr, &part[wid][i][0], lane);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < q.rpc * cnt; idx += blockDim.x) {
        const int i = idx / q.rpc, jj = idx - i * q.rpc, st = jj / RS, j = jj - st * RS, row = q.rb + jj;
        if (st >= q.sets || row >= G.n_rows) continue;
        float y = part[st * q.wsb][i][j];
        for (int k = 1; k < q.wsb; k++) y = __fadd_rn(y, part[st * q.wsb + k][i][j]);
        const int ent = gi == 0 ? P.perm[start + i] : start + i;
        G.y[q.m][(int64_t)ent * G.ld_y + row] = y;
    }
}

bool cu_moe_grp_shape_ok(const struct cu_moe_mm_args *mm) {
    moe_cols_shape sh;
    return moe_cols_shape_of(*mm, sh);
}

void cu_launch_moe_grp_matmul(const struct cu_moe_mm_args *mm, const int32_t *perm, const int32_t *grp, int32_t gmax,
                              gpuStream_t s) {
    moe_cols_shape sh;
    if (!moe_cols_shape_of(*mm, sh)) return; /* the caller checked (cu_moe_grp_shape_ok) */
    struct cu_moe_grp_args p;
    memset(&p, 0, sizeof(p));
    p.g[0] = mm->g[0];
    if (mm->n_grp > 1) p.g[1] = mm->g[1];
    else { p.g[1] = mm->g[0]; p.g[1].n_ent = 0; }
    p.perm = perm; p.grp = (const int4 *)grp; p.gmax = gmax;
    const int ny = gmax + (int)GPU_CEIL_DIV(p.g[1].n_ent, CU_MOE_GRP);
    typedef void (*fn)(const struct cu_moe_grp_args);
    const int kt = sh.kt;
    fn f;
#if defined(VLLMC_HIP_ARCH_GFX11)
    /* LLVM 15 caps these wave32 kernels at 128 VGPRs: the column-split row groups (4 Q4_K, 2 else) spilled 16-24
     * around the entry loop (scripts/hip-check.sh); half of them here, so more row blocks */
    const int U = kt == 1 ? 2 : 1;
    if (sh.sbw == 2) f = kt == 1 ? moe_grp_kernel<2, 1, 2> : kt == 2 ? moe_grp_kernel<2, 2, 1> : moe_grp_kernel<2, 3, 1>;
    else f = kt == 1 ? moe_grp_kernel<4, 1, 2> : kt == 2 ? moe_grp_kernel<4, 2, 1> : moe_grp_kernel<4, 3, 1>;
#else
    const int U = sh.U;
    if (sh.sbw == 2) f = kt == 1 ? moe_grp_kernel<2, 1, 4> : kt == 2 ? moe_grp_kernel<2, 2, 2> : kt == 4 ? moe_grp_kernel<2, 4, 2> : moe_grp_kernel<2, 3, 2>;
    else f = kt == 1 ? moe_grp_kernel<4, 1, 4> : kt == 2 ? moe_grp_kernel<4, 2, 2> : kt == 4 ? moe_grp_kernel<4, 4, 2> : moe_grp_kernel<4, 3, 2>;
#endif
    const int rpc = (8 / sh.sbw) * U * sh.sets; /* rows a CTA: the row blocks for this U */
    int bx = 0;
    for (int i = 0; i < mm->n_grp; i++) bx = max(bx, mm->g[i].n_mat * (int)GPU_CEIL_DIV(mm->g[i].n_rows, rpc));
    gpu_launch(f, dim3((unsigned)bx, (unsigned)ny), dim3(32 * sh.wsb * sh.sets), 0, s, p);
}

/* ---- persistent dataflow FFN chain (an experiment for the decode step's structure: bench/bench_mega.cu) ----
 * The dense FFN of n_layers layers, x += down(swiglu(gate_up(rmsnorm(x)))), Q4_K weights, batch 1, in one launch of
 * one CTA an SM. Each CTA owns a fixed share of every matmul's rows (task t of an op to CTA t mod G) and walks its
 * tasks in step order. A ring of `ns` shared-memory slots holds the weights of its next tasks: thread 0 refills a
 * slot by bulk asynchronous copies (cp.async.bulk, completing on the slot's mbarrier) as soon as the task in it is
 * consumed, so the weight stream runs up to ns tasks ahead of the computation, across the dependency waits between
 * ops; weights are never written, so nothing orders their loads. Between ops a CTA waits on the previous op's
 * completion counter (every CTA adds one when its tasks of that op are done), then forms that op's activation
 * itself in shared memory (the RMSNorm + Q8_K quantize of x, or the Q8_K quantize of h = silu(gate) * up): once an
 * op a CTA, not once a task. A task's rows are summed with the column-split kernel's ops in its order (k4_term, the
 * butterfly over the warp's super-blocks, the warps in order), and the norm and quantize are nq_rms_scale / nq_unit,
 * so the result equals the launch chain's (norm_quant_kernel, mm_kernel_cols) bit for bit. */
#if !defined(VLLMC_HIP)
static __device__ __forceinline__ uint32_t mg_saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mg_bar_init(uint64_t *b) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mg_saddr(b)) : "memory");
}
static __device__ __forceinline__ void mg_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mg_saddr(b)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mg_copy(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(mg_saddr(dst)),
                 "l"(src), "r"(bytes), "r"(mg_saddr(b))
                 : "memory");
}
static __device__ __forceinline__ void mg_wait(uint64_t *b, uint32_t parity) {
    uint32_t ok = 0;
    while (!ok)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(mg_saddr(b)), "r"(parity)
                     : "memory");
}
static __device__ __forceinline__ unsigned mg_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* ---- the tensor-core mat-vec with a second tile in shared memory (cu_mm_cfg.mma bit 128: XR 16, bit 256: XR 8) ----
 * mm_kernel_mma<2, 16, 1> holds a CTA's 16 rows in registers (4 CTAs of 160 threads an SM: the register file), so a
 * launch of more rows than 64 an SM runs in rounds, and only the first round's weights are asked for while the kernels
 * before it run: each later round pays a DRAM round trip after the round before has summed and left. Here a CTA also
 * takes the next XR rows, which one bulk copy a row (cp.async.bulk, completing on an mbarrier) writes into shared memory
 * before the dependency wait: no register and no L1 line is held while they are in flight, so 4 CTAs an SM ask for
 * 64 + 4 XR rows (the GDN in-proj and the attention q / k / v of qwen35-4b in one round, gate + up in two where it took
 * three). The shared rows are read back in the register rows' lane split (a row pitch of stride + 16 bytes keeps a
 * quarter warp's 16-byte reads on distinct banks) and meet the same activation fragments (loaded again for them, from
 * L1). Each row's sum is mm_kernel_mma's ops in its order (the warp's two super-blocks, then the warps), so the outputs
 * are its bits. Q8_0 / F32 segments: mv_other_cta over the CTA's 16 + XR rows, as there. Measured slower in the decode
 * (qwen35-4b on an H100: 2.007 ms a token with 8 rows more, 2.045 with 16, against 1.873-1.880): a CTA's time after
 * its release grows with its rows by more than the rounds save (BENCHMARKS.md "A second tile a CTA in shared memory").
 * Off. */
template <int XR, int LBT, int LBM>
static __global__ void __launch_bounds__(LBT, LBM) mm_kernel_mmx(const struct cu_mm_args P) {
    static_assert(XR == 8 || XR == 16, "shared rows a CTA: 8 (rows g) or 16 (rows g and g + 8)");
    constexpr int RC = 16 + XR, SBW = 2;
    __shared__ float part[16][RC];
    __shared__ float conv_pre[RC][CU_CONV_PRE];
    __shared__ int conv_slot[RC];
    __shared__ __align__(8) uint64_t xbar;
    extern __shared__ __align__(128) uint8_t xtile[]; /* XR rows, pitch S.stride + 16 */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int si = mv_seg_of(P);
    const cu_mm_seg &S = P.seg[si];
    const int r0 = ((int)blockIdx.x - S.cta0) * RC, rows = min(RC, S.n_rows - r0);
    const bool conv = P.conv.on && si == P.conv.seg;
    const int n_sb = (int)(P.a.n / QK_K);
    const uint8_t *wb = S.w + mv_woff((size_t)r0 * S.stride, S.stride, S.n_rows);
    if (S.type != GGML_TYPE_Q4_K) {
        mv_other_cta(P, S, wb, r0, rows, 0, 1, lane, wid, W);
        return;
    }
    const int rx = rows - 16; /* rows of the shared tile (none where <= 0: the same for every thread) */
    const size_t pitch = S.stride + 16;
    if (rx > 0 && wid == 0) { /* the shared rows first: the longest way */
        if (lane == 0) {
            mg_bar_init(&xbar);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            mg_expect(&xbar, (uint32_t)(rx * S.stride));
        }
        __syncwarp();
        if (lane < rx) mg_copy(xtile + (size_t)lane * pitch, wb + (size_t)(16 + lane) * S.stride, (uint32_t)S.stride, &xbar);
    }
    const int g = lane >> 2, c = lane & 3, b = lane & ~3;
    const k4s_w zw{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0};
    k4s_w w0[SBW], w1[SBW];
#pragma unroll
    for (int s = 0; s < SBW; s++) {
        const int sb = wid * SBW + s;
        w0[s] = sb < n_sb && g < rows ? k4s_load(wb + (size_t)g * S.stride, n_sb, sb, c) : zw;
        w1[s] = sb < n_sb && g + 8 < rows ? k4s_load(wb + (size_t)(g + 8) * S.stride, n_sb, sb, c) : zw;
    }
    const mma_conv cv{conv, r0, conv_pre, conv_slot};
    cv.load(P, rows);
    __syncthreads(); /* the barrier's init before any wait on it */
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const k4_sel ks = k4_sel_make(c);
    /* the activation of the warp's super-block sb (B fragment, sums, scale), loaded for each tile: holding it across
     * both took the instance past 96 registers (3 CTAs an SM); the second load finds L1 */
    auto term = [&](const k4s_w &a0, const k4s_w &a1, int sb, bool r16, float &u0, float &u1) {
        uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
        int2 bs = make_int2(0, 0);
        float da = 0.f;
        if (sb < n_sb) mma_q4k_act(P.a.k_qs, P.a.k_bs, P.a.k_d, sb, g, c, x0, x1, bs, da);
        if (r16) mma_q4k_sb<true>(a0.q0, a0.q1, a1.q0, a1.q1, a0.sw, a1.sw, x0, x1, bs, da, ks, b, u0, u1);
        else mma_q4k_sb<false>(a0.q0, a0.q1, a1.q0, a1.q1, a0.sw, a1.sw, x0, x1, bs, da, ks, b, u0, u1);
    };
    float t0[SBW], t1[SBW];
#pragma unroll
    for (int s = 0; s < SBW; s++) term(w0[s], w1[s], wid * SBW + s, true, t0[s], t1[s]);
    const float y0 = __fadd_rn(t0[0], t0[1]), y1 = __fadd_rn(t1[0], t1[1]);
    float y2 = 0.f, y3 = 0.f;
    if (rx > 0) {
        mg_wait(&xbar, 0);
#pragma unroll
        for (int s = 0; s < SBW; s++) {
            const int sb = wid * SBW + s;
            w0[s] = sb < n_sb && g < rx ? k4s_load<true>(xtile + (size_t)g * pitch, n_sb, sb, c) : zw;
            w1[s] = XR == 16 && sb < n_sb && g + 8 < rx ? k4s_load<true>(xtile + (size_t)(g + 8) * pitch, n_sb, sb, c) : zw;
        }
#pragma unroll
        for (int s = 0; s < SBW; s++) term(w0[s], w1[s], wid * SBW + s, XR == 16, t0[s], t1[s]);
        y2 = __fadd_rn(t0[0], t0[1]);
        if (XR == 16) y3 = __fadd_rn(t1[0], t1[1]);
    }
    const float resv = mv_res_load<1>(S, r0, rows);
    if (c == 0) {
        part[wid][g] = y0;
        part[wid][g + 8] = y1;
        part[wid][16 + g] = y2;
        if (XR == 16) part[wid][24 + g] = y3;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < rows; j += blockDim.x) {
        float y = part[0][j];
        for (int k = 1; k < W; k++) y = __fadd_rn(y, part[k][j]);
        mv_out<1>(P, S, 0, r0, j, y, resv, conv, conv_pre[j], conv_slot[j]);
    }
}

/* ---- the LM head: a ring of row tiles in shared memory (cu_lmh_ns; VLLMC_CUDA_LMH) ----
 * The LM head (2,560 x 248,320 Q6_K on qwen35-4b: 524 MB) runs the column-split kernel in ~47 rounds of CTAs; each CTA
 * holds its 8 rows in registers, sums them and leaves, so a CTA's life is its rows' round trip, its terms, its
 * epilogue and a CTA start in series, and the launch streams at ~3.2 TB/s where DRAM gives 4.5 (bench_gemv). Here a
 * grid of resident CTAs walks the tiles (8 rows: tile blockIdx.x + i gridDim.x), and a ring of `ns` tile slots in
 * shared memory holds the next ones: thread 0 asks for a tile with one bulk copy (cp.async.bulk, completing on the
 * slot's mbarrier; a tile of consecutive rows is one range) as soon as the tile in its slot is summed, so the stream
 * runs ns - 1 tiles ahead of the sums and no register waits on DRAM. The activation is loaded once a CTA. A tile's rows
 * are summed with the column-split kernel's ops in its order (q6_term, the butterfly over the warp's super-blocks, the
 * warps in order: mm_kernel_cols<2, 2, 2, 1>), so the outputs are its bits. One segment of Q6_K rows of 8 or 10
 * super-blocks (2,048 / 2,560 columns: 4 / 5 warps, two super-blocks each), one activation row, no residual, conv or
 * fused norm (mm_lmh_ok). */
#define LMH_RPC 8
/* early (cu_lmh_co): the next launch may start as soon as this one's copies are asked for, not after its wait. With a
 * grid of at most cu_lmh_co CTAs an SM, the next launch's CTAs fit beside this one's and ask for their own first tiles
 * while these sum: the weight stream crosses the launch boundary (a measurement: bench_gemv l2's cold chain). */
static __global__ void __launch_bounds__(160, 4) mm_kernel_lmh(const struct cu_mm_args P, int ns, int early) {
    constexpr int SBW = 2, RW = 4, U = 2;
    __shared__ float part[16][LMH_RPC];
    __shared__ __align__(8) uint64_t bars[CU_LMH_MAX_NS];
    extern __shared__ __align__(128) uint8_t ring[];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
    const cu_mm_seg &S = P.seg[0];
    const int n_sb = (int)(P.a.n / QK_K), n_tiles = (S.n_rows + LMH_RPC - 1) / LMH_RPC, G = (int)gridDim.x;
    const size_t tile = (size_t)LMH_RPC * S.stride;
    auto issue = [&](int i) { /* thread 0: the CTA's i-th tile into slot i % ns */
        const int t = (int)blockIdx.x + i * G;
        if (t >= n_tiles) return;
        const uint32_t bytes = (uint32_t)((size_t)min(LMH_RPC, S.n_rows - t * LMH_RPC) * S.stride);
        mg_expect(&bars[i % ns], bytes);
        mg_copy(ring + (size_t)(i % ns) * tile, S.w + (size_t)t * tile, bytes, &bars[i % ns]);
    };
    if (threadIdx.x == 0) { /* the first ns tiles before the dependency wait: the weights are never written */
        for (int k = 0; k < ns; k++) mg_bar_init(&bars[k]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int k = 0; k < ns; k++) issue(k);
    }
    __syncthreads(); /* the barriers' init before any wait on them */
    const int c = lane & 3, sbl = (lane >> 2) % SBW, rr = lane / (4 * SBW);
    const int sb = wid * SBW + sbl;
    const bool on = sb < n_sb;
    if (early) gpu_pdl_trigger();
    gpu_pdl_wait();
    gpu_pdl_trigger();
    mv_act v;
    if (on) mv_act_load(P.a, true, sb, c, v);
    else mv_act_zero(v);
    const q6_w zw{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0};
    for (int i = 0;; i++) {
        const int t = (int)blockIdx.x + i * G;
        if (t >= n_tiles) break;
        const int r0 = t * LMH_RPC, rows = min(LMH_RPC, S.n_rows - r0);
        const uint8_t *sl = ring + (size_t)(i % ns) * tile;
        mg_wait(&bars[i % ns], (uint32_t)((i / ns) & 1));
        q6_w w[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int row = u * RW + rr;
            w[u] = on && row < rows ? q6_load<true>(sl + (size_t)row * S.stride, n_sb, sb, c) : zw;
        }
#pragma unroll
        for (int u = 0; u < U; u++) mv_warp_part<SBW>(q6_term<true>(w[u], c & 1, v), &part[wid][u * RW + rr], lane);
        __syncthreads(); /* every warp has read the slot and written its parts */
        if (threadIdx.x == 0) issue(i + ns);
        if ((int)threadIdx.x < rows) {
            const int j = threadIdx.x;
            float y = part[0][j];
            for (int k = 1; k < W; k++) y = __fadd_rn(y, part[k][j]);
            mv_out<1>(P, S, 0, r0, j, y, 0.f, false, NULL, 0);
        }
        __syncthreads(); /* the parts are read before the next tile writes them */
    }
}
/* Whether launch `a` (its segments in order) can take mm_kernel_lmh: one Q6_K segment at 2,048 or 2,560 columns of at
 * least cu_lmh_rows rows, 16-byte aligned rows, one activation row, nothing in the epilogue but a bias. */
static bool mm_lmh_ok(const struct cu_mm_args &a, int n_act) {
    if (!cu_lmh_ns || a.n_seg != 1 || n_act != 1 || a.conv.on || a.nq.on || a.row_order) return false;
    const cu_mm_seg &S = a.seg[0];
    return S.type == GGML_TYPE_Q6_K && (a.a.n == 2560 || a.a.n == 2048) && S.n_rows >= cu_lmh_rows && !S.res && S.stride % 16 == 0 &&
           (uintptr_t)S.w % 16 == 0 && (size_t)LMH_RPC * S.stride * (size_t)cu_lmh_ns <= 200 * 1024;
}
/* Launches it with a grid of the CTAs resident at once; false (nothing launched: the column-split kernel takes it) where
 * the ring's shared memory cannot be had. */
static bool mm_lmh_launch(const struct cu_mm_args &a, gpuStream_t s) {
    const size_t smem = (size_t)LMH_RPC * a.seg[0].stride * (size_t)cu_lmh_ns;
    const int threads = (int)(a.a.n / QK_K) / 2 * 32;
    static size_t smem_set = 0; /* the dynamic shared memory the kernel is set up for (the largest asked) */
    if (smem > smem_set) {
        if (cudaFuncSetAttribute(mm_kernel_lmh, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
            cudaFuncSetAttribute(mm_kernel_lmh, cudaFuncAttributePreferredSharedMemoryCarveout, 100) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        smem_set = smem;
    }
    int resident = mm_resident(mm_kernel_lmh, threads, smem);
    if (resident == MM_RESIDENT_NONE) return false;
    if (cu_lmh_co > 0) resident = min(resident, cu_lmh_co * mm_sm_count());
    const int n_tiles = (a.seg[0].n_rows + LMH_RPC - 1) / LMH_RPC;
    gpu_launch(mm_kernel_lmh, dim3((unsigned)min(resident, n_tiles)), dim3(threads), smem, s, a, cu_lmh_ns, cu_lmh_co > 0 ? 1 : 0);
    cu_lmh_launches++;
    return true;
}

/* Thread 0: the weights of the CTA's task k (of n0 + n1 a layer) into slot k % ns. */
static __device__ __forceinline__ void mg_issue(const struct cu_mega_ffn_args &P, uint8_t *ring, uint64_t *bars, int k, int n0, int n1) {
    const int l = k / (n0 + n1), j = k % (n0 + n1), s = k % P.ns;
    uint8_t *dst = ring + (size_t)s * P.slot;
    if (j < n0) {
        const int t = (int)blockIdx.x + (int)gridDim.x * j;
        const uint32_t b = (uint32_t)(P.rg * P.s_gu);
        mg_expect(&bars[s], 2 * b);
        mg_copy(dst, P.gu[l] + (size_t)t * P.rg * P.s_gu, b, &bars[s]);
        mg_copy(dst + b, P.gu[l] + (size_t)(P.F + (int64_t)t * P.rg) * P.s_gu, b, &bars[s]);
    } else {
        const int t = (int)blockIdx.x + (int)gridDim.x * (j - n0);
        const uint32_t b = (uint32_t)(P.rd * P.s_dn);
        mg_expect(&bars[s], b);
        mg_copy(dst, P.dn[l] + (size_t)t * P.rd * P.s_dn, b, &bars[s]);
    }
}

/* SB1 / SB2: super-blocks a warp at D / F columns (the column-split kernel's choice, so its sums). NT teams of TW warps
 * (blockDim.x = 32 TW NT) take an op's tasks of the CTA in turn (team g the tasks i = g, g + NT, ...), each with its
 * own named barrier and parts, so more warps an SM hide the dot products' latencies. */
template <int SB1, int SB2, int NT>
static __global__ void __launch_bounds__(NT == 1 ? 512 : 640, 1) mega_ffn_kernel(const struct cu_mega_ffn_args P) {
    extern __shared__ __align__(128) uint8_t mg_smem[];
    const int D = (int)P.D, F = (int)P.F, nb1 = D / QK_K, nb2 = F / QK_K;
    const int W1 = (nb1 + SB1 - 1) / SB1, W2 = (nb2 + SB2 - 1) / SB2;
    constexpr int RW1 = 8 / SB1, RW2 = 8 / SB2;
    const int nmax = D > F ? D : F;
    uint8_t *ring = mg_smem;
    uint64_t *bars = (uint64_t *)(ring + (size_t)P.ns * P.slot);
    int8_t *aqs = (int8_t *)(bars + ((P.ns + 1) & ~1)); /* 16-byte aligned: the activation chunks are loaded as int4 */
    float *ad = (float *)(aqs + nmax);
    int16_t *abs_ = (int16_t *)(ad + nmax / QK_K);
    float *part = (float *)(abs_ + nmax / 16);   /* [NT][2][16 warps][32 rows] */
    double *red = (double *)(part + NT * 2 * 16 * 32); /* NQ_WARPS */
    const int lane = threadIdx.x & 31, NW = blockDim.x >> 5, TW = NW / NT, G = gridDim.x, cta = blockIdx.x;
    const int team = (threadIdx.x >> 5) / TW, wid = (threadIdx.x >> 5) % TW; /* warp in the team */
    const int T0 = F / P.rg, T1 = D / P.rd;
    const int n0 = cta < T0 ? (T0 - cta + G - 1) / G : 0, n1 = cta < T1 ? (T1 - cta + G - 1) / G : 0;
    const int total = P.n_layers * (n0 + n1);
    const bool compute = !(P.flags & 1), deps = !(P.flags & 2), prologue = !(P.flags & 4);
    if (threadIdx.x == 0) {
        for (int s = 0; s < P.ns; s++) mg_bar_init(&bars[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int k = 0; k < P.ns && k < total; k++) mg_issue(P, ring, bars, k, n0, n1);
    }
    __syncthreads();
    cu_act_mut out;
    memset(&out, 0, sizeof(out));
    out.k_qs = aqs; out.k_d = ad; out.k_bs = abs_;
    cu_act_view av;
    memset(&av, 0, sizeof(av));
    av.k_qs = aqs; av.k_d = ad; av.k_bs = abs_;
    const int c = lane & 3;
    const k4_sel ks = k4_sel_make(c);
    int kb = 0; /* the CTA's index of the op's first task */
    for (int l = 0; l < P.n_layers; l++)
        for (int op = 0; op < 2; op++) {
            const int o = 2 * l + op;
            if (deps && o > 0 && threadIdx.x == 0)
                while (mg_ld_acquire(&P.cnt[o - 1]) < (unsigned)G) { }
            __syncthreads();
            /* the op's activation, in shared memory (every warp of the CTA) */
            const int gw = threadIdx.x >> 5;
            if (!prologue) {
            } else if (op == 0) {
                out.x = P.xs + (size_t)cta * D; out.n = D;
                const float scale = nq_rms_scale<true>(P.x, D, P.eps, red);
                for (int u = gw; u < nb1; u += NW)
                    nq_unit<true>(CU_NQ_RMSNORM, P.x, NULL, 0, P.nw[l], P.eps, 0, scale, out, BK_ACT_BIT(BK_ACT_Q8_K), 0, u, lane);
            } else {
                /* h as it is (nq_unit's QUANT mode: the same ops), up to 4 units a warp with their loads together */
                for (int u0 = gw; u0 < nb2; u0 += 4 * NW) {
                    float v[4][8];
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        if (u0 + q * NW < nb2) ld8<true>(P.h + (size_t)(u0 + q * NW) * QK_K + lane * 8, v[q]);
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const int u = u0 + q * NW;
                        if (u < nb2) quant_q8_K_sb(v[q], aqs + (size_t)u * QK_K, ad + u, abs_ + (size_t)u * 16, lane);
                    }
                }
            }
            __syncthreads();
            mv_act v;
            const int SBW = op == 0 ? SB1 : SB2;
            const int sbl = (lane >> 2) % SBW, rr = lane / (4 * SBW);
            const int half = op == 0 ? wid / W1 : 0, wt = op == 0 ? wid % W1 : wid; /* op 0: gate warps, then up warps */
            const bool act = op == 0 ? wid < 2 * W1 : wid < W2;
            const int sb = wt * SBW + sbl;
            const bool on = act && sb < (op == 0 ? nb1 : nb2);
            av.n = op == 0 ? D : F;
            if (on) mv_act_load(av, false, sb, c, v);
            else mv_act_zero(v);
            const int nt = op == 0 ? n0 : n1;
            for (int i = team, j = 0; i < nt; i += NT, j++) {
                const int k = kb + i, s = k % P.ns;
                mg_wait(&bars[s], (uint32_t)(k / P.ns) & 1);
                const uint8_t *slot = ring + (size_t)s * P.slot;
                float *pb = part + ((size_t)team * 2 + (j & 1)) * 16 * 32;
                if (compute) {
                    if (op == 0) {
                        const uint8_t *wr0 = slot + (size_t)half * P.rg * P.s_gu;
                        for (int r = rr; r < P.rg; r += RW1) {
                            const k4_w w = on ? k4_load<true>(wr0 + (size_t)r * P.s_gu, nb1, sb, c)
                                              : k4_w{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0, 0, 0};
                            mv_warp_part<SB1>(k4_term<true>(w, ks, v), &pb[wid * 32 + r], lane);
                        }
                    } else {
                        for (int r = rr; r < P.rd; r += RW2) {
                            const k4_w w = on ? k4_load<true>(slot + (size_t)r * P.s_dn, nb2, sb, c)
                                              : k4_w{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0, 0, 0};
                            mv_warp_part<SB2>(k4_term<true>(w, ks, v), &pb[wid * 32 + r], lane);
                        }
                    }
                }
                /* the slot is read, the parts written (the team's warps) */
                if (NT == 1) __syncthreads();
                else asm volatile("bar.sync %0, %1;" ::"r"(1 + team), "r"(32 * TW) : "memory");
                if (wid == 0 && lane == 0 && k + P.ns < total) mg_issue(P, ring, bars, k + P.ns, n0, n1);
                const int t = cta + G * i, tj = wid * 32 + lane; /* the epilogue's thread in the team */
                if (!compute) {
                } else if (op == 0) {
                    if (tj < P.rg) {
                        float g = pb[tj], u = pb[W1 * 32 + tj];
                        for (int q = 1; q < W1; q++) { g = __fadd_rn(g, pb[q * 32 + tj]); u = __fadd_rn(u, pb[(W1 + q) * 32 + tj]); }
                        P.h[(size_t)t * P.rg + tj] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
                    }
                } else if (tj < P.rd) {
                    float y = pb[tj];
                    for (int q = 1; q < W2; q++) y = __fadd_rn(y, pb[q * 32 + tj]);
                    float *xp = P.x + (size_t)t * P.rd + tj;
                    *xp = __fadd_rn(gpu_ldcg(xp), y);
                }
            }
            kb += nt;
            __syncthreads();
            if (threadIdx.x == 0) { __threadfence(); atomicAdd(&P.cnt[o], 1u); }
        }
}
#endif

size_t cu_mega_ffn_smem(const struct cu_mega_ffn_args *a) {
    const int64_t nmax = a->D > a->F ? a->D : a->F;
    const int nt = a->teams == 2 ? 2 : 1;
    return (size_t)a->ns * a->slot + 8 * (size_t)((a->ns + 1) & ~1) + nmax + 4 * (nmax / QK_K) + 2 * (nmax / 16) + 4 * nt * 2 * 16 * 32 +
           8 * NQ_WARPS + 64;
}

bool cu_mega_ffn(const struct cu_mega_ffn_args *a, int ctas, gpuStream_t s) {
#if defined(VLLMC_HIP)
    (void)a; (void)ctas; (void)s;
    return false;
#else
    if (a->D <= 0 || a->F <= 0 || a->rg <= 0 || a->rd <= 0 || a->ns < 1 || a->n_layers < 1 || ctas < 1) return false;
    const int nb1 = (int)(a->D / QK_K), nb2 = (int)(a->F / QK_K);
    if (a->D % QK_K || a->F % QK_K || nb1 > 16 || nb2 < 17 || nb2 > 64) return false; /* the (2, 4) instance's shapes */
    const int W1 = (nb1 + 1) / 2, W2 = (nb2 + 3) / 4;
    if (a->rg % 4 || a->rd % 2 || a->rg > 32 || a->rd > 32 || a->F % a->rg || a->D % a->rd) return false;
    if ((uint64_t)2 * a->rg * a->s_gu > a->slot || (uint64_t)a->rd * a->s_dn > a->slot || a->slot % 16 || a->s_gu % 16 || a->s_dn % 16)
        return false;
    const int nw = 2 * W1 > W2 ? 2 * W1 : W2, nt = a->teams == 2 ? 2 : 1;
    if (nw * nt > (nt == 1 ? 16 : 20)) return false;
    const size_t smem = cu_mega_ffn_smem(a);
    void (*kern)(const struct cu_mega_ffn_args) = nt == 1 ? mega_ffn_kernel<2, 4, 1> : mega_ffn_kernel<2, 4, 2>;
    if (gpuFuncSetMaxDynamicSmem(kern, (int)smem) != gpuSuccess) return false;
    /* every CTA must be resident at once: a CTA waiting on a counter that a CTA not yet started must add would hang */
    int per = 0, sms = 0, dev = 0;
    if (gpuGetDevice(&dev) != gpuSuccess || gpuDeviceGetSMCount(&sms, dev) != gpuSuccess ||
        gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, 32 * nw * nt, smem) != gpuSuccess || ctas > per * sms)
        return false;
    kern<<<ctas, 32 * nw * nt, smem, s>>>(*a);
    return gpuGetLastError() == gpuSuccess;
#endif
}

/* ---- the persistent FFN chain, second form (cu_mega2_args in cuda_internal.h; bench/bench_mega.cu) ----
 * The task tiles' layout is mega2_tile.h's (host packer, device packer, the kernel's reads). */
uint64_t cu_mega2_task_bytes(int n_sb) { return (uint64_t)MG2_SB_BYTES * (uint64_t)n_sb; }
uint64_t cu_mega2_dn_task_bytes(int ps, bool q6) { return (uint64_t)(q6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES) * (uint64_t)ps; }
void cu_mega2_pack(const uint8_t *const rows[16], int n_sb, int s0, int nsb, uint8_t *dst) { mg2_pack_host(rows, n_sb, s0, nsb, dst); }

/* (the device packer is in mega2_pack.cu: a kernel added to this file changed the code of mm_kernel_mmrs, so the
 * decode kernels here keep the SASS they were measured with) */
#if !defined(VLLMC_HIP)
static __device__ __forceinline__ void mg2_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(mg_saddr(b)) : "memory");
}
static __device__ __forceinline__ void mg2_cbar(int nthreads) { asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory"); }
/* waits bounded by 5 s of %globaltimer: a hang traps (the launch fails) instead of holding the GPU; 5 s and not less, since
 * a programmatic dependent's producer fills its slots and then waits while the kernel before runs, which under
 * compute-sanitizer can take far longer than in a plain run */
#define MG2_WAIT_NS 5000000000ull
static __device__ __forceinline__ unsigned long long mg2_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __noinline__ void mg2_hang(int what, int k) {
    printf("mega2: CTA %d thread %d stuck (%d, %d)\n", (int)blockIdx.x, (int)threadIdx.x, what, k);
    __trap();
}
static __device__ __forceinline__ void mg2_wait(uint64_t *b, uint32_t parity, int what, int k) {
    uint32_t ok = 0;
    const unsigned long long t0 = mg2_now();
    for (;;) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(mg_saddr(b)), "r"(parity)
                     : "memory");
        if (ok) return;
        if (mg2_now() - t0 > MG2_WAIT_NS) mg2_hang(what, k);
    }
}

/* The super-block terms of a task's 16 rows: t0[s] of row g, t1[s] of row g + 8 (the same in the 4 lanes of a row). */
template <int NSB>
static __device__ __forceinline__ void mg2_terms(const uint8_t *tile, const int8_t *aqs, const float *ad, const int16_t *abs_, int a0,
                                                 int lane, float (&t0)[NSB], float (&t1)[NSB]) {
    const int g = lane >> 2, c = lane & 3, b = lane & ~3;
    const k4_sel ks = k4_sel_make(c);
#pragma unroll
    for (int s = 0; s < NSB; s++) {
        const uint8_t *blk = tile + (size_t)s * MG2_SB_BYTES;
        const uint4 q00 = *(const uint4 *)(blk + mg2_q_off(0, 0, lane)), q01 = *(const uint4 *)(blk + mg2_q_off(0, 1, lane));
        const uint4 q10 = *(const uint4 *)(blk + mg2_q_off(1, 0, lane)), q11 = *(const uint4 *)(blk + mg2_q_off(1, 1, lane));
        const uint32_t sw0 = *(const uint32_t *)(blk + mg2_sw_off(g, c)), sw1 = *(const uint32_t *)(blk + mg2_sw_off(g + 8, c));
        const int sb = a0 + s;
        uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
        if ((g >> 1) == c) {
            const uint4 *xp = (const uint4 *)(aqs + (size_t)sb * QK_K + 32 * g);
            x0 = xp[0]; x1 = xp[1];
        }
        /* (the activation's loads written out here, not by mma_q4k_act: in that form this kernel's instances spill
         * differently from the ones measured) */
        mma_q4k_sb<true>(q00, q01, q10, q11, sw0, sw1, x0, x1, *(const int2 *)(abs_ + (size_t)sb * 16 + 4 * c), ad[sb], ks, b, t0[s], t1[s]);
    }
}

/* The same for a Q6_K tile (mma_rows_q6_K's ops with rows g + 8 in the MMA's second half): t0[s] of row g, t1[s] of
 * row g + 8, q6_term's float terms. */
template <int NSB>
static __device__ __forceinline__ void mg2_terms6(const uint8_t *tile, const int8_t *aqs, const float *ad, const int16_t *abs_, int a0,
                                                  int lane, float (&t0)[NSB], float (&t1)[NSB]) {
    const int g = lane >> 2, c = lane & 3, h = c >> 1, k = c & 1;
    const bool own = (g >> 1) == c, odd = g & 1;
#pragma unroll
    for (int s = 0; s < NSB; s++) {
        const uint8_t *blk = tile + (size_t)s * MG2_Q6_SB_BYTES;
        q6_w w[2];
#pragma unroll
        for (int hi = 0; hi < 2; hi++) { /* rows g and g + 8, as q6_load gives them from the rows */
            const uint16_t *sc = (const uint16_t *)(blk + mg2_q6_sc_off(g + 8 * hi) + 8 * h + 2 * k);
            w[hi] = q6_w{*(const uint4 *)(blk + mg2_q6_ql_off(hi, 0, lane)), *(const uint4 *)(blk + mg2_q6_ql_off(hi, 1, lane)),
                         *(const uint4 *)(blk + mg2_q6_qh_off(hi, g, h)), *(const uint4 *)(blk + mg2_q6_qh_off(hi, g, h) + 16),
                         (uint32_t)sc[0] | ((uint32_t)sc[2] << 16), (uint32_t) * (const uint16_t *)(blk + mg2_q6_d_off(g + 8 * hi))};
        }
        uint4 xl = make_uint4(0, 0, 0, 0), xh = xl;
        int bb[4];
        float da;
        mma_q6k_act(aqs, abs_, ad, a0 + s, h, k, odd, own, xl, xh, bb, da);
        t0[s] = mma_q6k_sb<true>(w[0], w[1], xl, xh, odd, 4 - 2 * k, 2 * k, bb, da, &t1[s]);
    }
}

/* A tile's 16 rows over its nsb (even) super-blocks: each pair's terms added, then the pairs in order (mm_kernel_mma's
 * order, and the column-split kernels' for two super-blocks a warp): y0 row g, y1 row g + 8 (the same in a row's 4
 * lanes). Q6: Q6_K tiles. a0: the first super-block's index into the Q8_K act. */
template <bool Q6>
static __device__ __forceinline__ void mg2_pairs(const uint8_t *tile, int nsb, const int8_t *aqs, const float *ad, const int16_t *abs_, int a0,
                                                 int lane, float &y0, float &y1) {
    for (int w = 0; w < nsb / 2; w++) {
        float t0[2], t1[2];
        if constexpr (Q6) mg2_terms6<2>(tile + (size_t)w * 2 * MG2_Q6_SB_BYTES, aqs, ad, abs_, a0 + 2 * w, lane, t0, t1);
        else mg2_terms<2>(tile + (size_t)w * 2 * MG2_SB_BYTES, aqs, ad, abs_, a0 + 2 * w, lane, t0, t1);
        const float p0 = __fadd_rn(t0[0], t0[1]), p1 = __fadd_rn(t1[0], t1[1]);
        y0 = w ? __fadd_rn(y0, p0) : p0;
        y1 = w ? __fadd_rn(y1, p1) : p1;
    }
}
/* silu(g) * u with the SwiGLU + quantize launch's ops */
static __device__ __forceinline__ float mg2_swiglu(float g, float u) { return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u); }

/* NB1: super-blocks of D (the gate / up tasks), PS: super-blocks a down task. Warp 0 lane 0 is the producer; warps
 * 1 .. nc consume. */
template <int NB1, int PS, bool DQ6>
static __global__ void __launch_bounds__(32 * 17, 1) mega2_kernel(const struct cu_mega2_args P) {
    extern __shared__ __align__(128) uint8_t mg_smem[];
    const int D = (int)P.D, F = (int)P.F, nb2 = F / QK_K, NS = P.ns, NC = P.nc;
    const int nrg = D / 16, nparts = nb2 / PS; /* down row groups, tasks a row group */
    uint8_t *ring = mg_smem;
    uint64_t *full = (uint64_t *)(ring + (size_t)NS * P.slot), *empty = full + NS;
    int8_t *aqs = (int8_t *)(empty + NS);
    const int nmax = D > F ? D : F;
    float *ad = (float *)(aqs + nmax);
    int16_t *abs_ = (int16_t *)(ad + nmax / QK_K);
    double *red = (double *)(((uintptr_t)(abs_ + nmax / 16) + 7) & ~(uintptr_t)7);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, G = gridDim.x, cta = blockIdx.x;
    const bool pj = P.pj1 != NULL;             /* the output projection first (one layer) */
    const int pj_np = pj ? P.pj_sb / P.pj_ps : 1, nops = pj ? 3 : 2;
    const int T0 = F / 8, T1 = nrg * nparts, TP = pj ? nrg * pj_np : 0; /* tasks an op */
    const int n0 = cta < T0 ? (T0 - cta + G - 1) / G : 0, n1 = cta < T1 ? (T1 - cta + G - 1) / G : 0;
    const int np_ = cta < TP ? (TP - cta + G - 1) / G : 0;
    const int total = P.n_layers * (np_ + n0 + n1);
    const bool compute = !(P.flags & 1), deps = !(P.flags & 2), prologue = !(P.flags & 4);
    const uint32_t b_gu = (uint32_t)(NB1 * MG2_SB_BYTES), b_dn = (uint32_t)(PS * (DQ6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES));
    const uint32_t b_pj = pj ? (uint32_t)(P.pj_ps * MG2_SB_BYTES) : 0u;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; s++) { mg_bar_init(&full[s]); mg_bar_init(&empty[s]); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wid == 0) { /* the producer: the CTA's tasks in order, a slot at a time once its last reader released it */
        if (lane != 0) return;
        for (int k = 0; k < total; k++) {
            const int s = k % NS;
            if (k >= NS) mg2_wait(&empty[s], (uint32_t)((k / NS) - 1) & 1, 1, k);
            const int l = P.l0 + k / (np_ + n0 + n1);
            int j = k % (np_ + n0 + n1);
            const uint8_t *src;
            uint32_t bytes;
            if (j < np_) { src = P.pj1 + (size_t)(cta + G * j) * b_pj; bytes = b_pj; }
            else if ((j -= np_) < n0) { src = (P.gu ? P.gu[l] : P.gu1) + (size_t)(cta + G * j) * b_gu; bytes = b_gu; }
            else { src = (P.dn ? P.dn[l] : P.dn1) + (size_t)(cta + G * (j - n0)) * b_dn; bytes = b_dn; }
            mg_expect(&full[s], bytes);
            mg_copy(ring + (size_t)s * P.slot, src, bytes, &full[s]);
        }
        if (P.pf) { /* the CTA's share of the next launch's weights to L2, in 32 KB pieces (16-byte multiples) */
            const uint64_t share = ((P.pf_bytes + G - 1) / G + 15) & ~(uint64_t)15;
            const uint64_t b0 = (uint64_t)cta * share, b1 = b0 + share < P.pf_bytes ? b0 + share : P.pf_bytes;
            for (uint64_t a = b0; a < b1; a += 32768) {
                const uint32_t n = (uint32_t)((b1 - a < 32768 ? b1 - a : 32768) & ~(uint64_t)15);
                if (n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(P.pf + a), "r"(n) : "memory");
            }
        }
        return;
    }
    const int cw = wid - 1, ct = threadIdx.x - 32, NT = 32 * NC; /* consumer warp, thread */
    if (cw >= NC) return;
    /* launched as a programmatic dependent (gpu_launch), the producer streams the first tiles while the kernel before
     * finishes; the consumers read x, h and the counters only after it */
    gpu_pdl_wait();
    cu_act_mut out;
    memset(&out, 0, sizeof(out));
    out.k_qs = aqs; out.k_d = ad; out.k_bs = abs_;
    int kb = 0;
    for (int li = 0; li < P.n_layers; li++) {
        const int l = P.l0 + li;
        for (int op = pj ? -1 : 0; op < 2; op++) { /* -1: the output projection */
            const int o = nops * l + op + (pj ? 1 : 0);
            /* the previous op done everywhere (this CTA's part: every consumer warp past it) */
            if (deps && o > nops * P.l0) {
                if (ct == 0) {
                    const unsigned long long t0 = mg2_now();
                    while (mg_ld_acquire(&P.cnt[o - 1]) < (unsigned)G)
                        if (mg2_now() - t0 > MG2_WAIT_NS) mg2_hang(3, o);
                }
                mg2_cbar(NT);
            }
            if (!prologue) {
            } else if (op < 0) { /* the projection's Q8_K act as the launch before wrote it (through L2) */
                const int nq16 = P.pj_sb * QK_K / 16, nb16 = P.pj_sb * 16 * 2 / 16;
                for (int i = ct; i < nq16; i += NT) ((uint4 *)aqs)[i] = __ldcg((const uint4 *)P.pj_qs + i);
                for (int i = ct; i < nb16; i += NT) ((uint4 *)abs_)[i] = __ldcg((const uint4 *)P.pj_bs + i);
                for (int i = ct; i < P.pj_sb; i += NT) ad[i] = __ldcg(P.pj_d + i);
            } else if (op == 0) { /* RMSNorm + Q8_K of x (nq_rms_scale's sums and order, over the consumer warps) */
                nq_rms_partials<true>(P.x, D, red, cw, NC);
                mg2_cbar(NT);
                const float scale = nq_rms_finish(red, D, P.eps);
                out.x = P.xs + (size_t)cta * D; out.n = D;
                for (int u = cw; u < NB1; u += NC)
                    nq_unit<true>(CU_NQ_RMSNORM, P.x, NULL, 0, P.nw ? P.nw[l] : P.nw1, P.eps, 0, scale, out, BK_ACT_BIT(BK_ACT_Q8_K), 0, u,
                                  lane);
            } else { /* Q8_K of h */
                for (int u = cw; u < nb2; u += NC) {
                    float v[8];
                    ld8<true>(P.h + (size_t)u * QK_K + lane * 8, v);
                    quant_q8_K_sb(v, aqs + (size_t)u * QK_K, ad + u, abs_ + (size_t)u * 16, lane);
                }
            }
            mg2_cbar(NT);
            const int nt = op < 0 ? np_ : op == 0 ? n0 : n1;
            for (int i = 0; i < nt; i++) {
                /* slot s belongs to consumer warp s % NC (NS is a multiple of NC): a slot's uses are read in order by
                 * one warp, so a wait on its parity is never a phase ahead of the barrier (a parity wait cannot tell a
                 * phase two back from the one before) */
                const int k = kb + i, s = k % NS;
                if (s % NC != cw) continue;
                mg2_wait(&full[s], (uint32_t)(k / NS) & 1, 2, k);
                const uint8_t *slot = ring + (size_t)s * P.slot;
                const int g = lane >> 2;
                const int t = cta + G * i;
                if (op < 0) {
                    /* mm_kernel_mma's order: pairs of super-blocks (a warp's), then the pairs in turn, then + x */
                    const int r = t / pj_np, q = t % pj_np;
                    if (compute)
                        for (int w = 0; w < P.pj_ps / 2; w++) {
                            float t0[2], t1[2];
                            mg2_terms<2>(slot + (size_t)w * 2 * MG2_SB_BYTES, aqs, ad, abs_, q * P.pj_ps + 2 * w, lane, t0, t1);
                            if ((lane & 3) == 0) {
                                P.pd[(size_t)(q * (P.pj_ps / 2) + w) * D + 16 * r + g] = __fadd_rn(t0[0], t0[1]);
                                P.pd[(size_t)(q * (P.pj_ps / 2) + w) * D + 16 * r + 8 + g] = __fadd_rn(t1[0], t1[1]);
                            }
                        }
                    __syncwarp();
                    if (lane == 0) mg2_arrive(&empty[s]);
                    if (compute) {
                        __threadfence();
                        __syncwarp();
                        unsigned old = 0;
                        if (lane == 0) old = atomicAdd(&P.gcnt[(size_t)nrg + r], 1u);
                        old = shfl_idx(old, 0);
                        if (old == (unsigned)pj_np - 1) {
                            __threadfence();
                            if (lane < 16) {
                                const int row = 16 * r + lane;
                                float y = gpu_ldcg(P.pd + row);
                                for (int w = 1; w < P.pj_sb / 2; w++) y = __fadd_rn(y, gpu_ldcg(P.pd + (size_t)w * D + row));
                                P.x[row] = __fadd_rn(gpu_ldcg(P.x + row), y);
                            }
                        }
                    }
                } else if (op == 0) {
                    float yg = 0.f, yu = 0.f;
                    if (compute) mg2_pairs<false>(slot, NB1, aqs, ad, abs_, 0, lane, yg, yu);
                    __syncwarp();
                    if (lane == 0) mg2_arrive(&empty[s]);
                    if (compute && (lane & 3) == 0) P.h[(size_t)t * 8 + g] = mg2_swiglu(yg, yu);
                } else {
                    const int r = t / nparts, q = t % nparts;
                    if (compute)
                        for (int w = 0; w < PS / 4; w++) {
                            /* the column-split kernel's order: 4 super-blocks a warp by its butterfly, then the warps */
                            float t0[4], t1[4];
                            if constexpr (DQ6) mg2_terms6<4>(slot + (size_t)w * 4 * MG2_Q6_SB_BYTES, aqs, ad, abs_, q * PS + 4 * w, lane, t0, t1);
                            else mg2_terms<4>(slot + (size_t)w * 4 * MG2_SB_BYTES, aqs, ad, abs_, q * PS + 4 * w, lane, t0, t1);
                            if ((lane & 3) == 0) {
                                const float p0 = __fadd_rn(__fadd_rn(t0[0], t0[1]), __fadd_rn(t0[2], t0[3]));
                                const float p1 = __fadd_rn(__fadd_rn(t1[0], t1[1]), __fadd_rn(t1[2], t1[3]));
                                P.pd[(size_t)(q * (PS / 4) + w) * D + 16 * r + g] = p0;
                                P.pd[(size_t)(q * (PS / 4) + w) * D + 16 * r + 8 + g] = p1;
                            }
                        }
                    __syncwarp();
                    if (lane == 0) mg2_arrive(&empty[s]);
                    if (compute) {
                        /* the row group's last task adds the partials into x */
                        __threadfence();
                        __syncwarp();
                        unsigned old = 0;
                        if (lane == 0) old = atomicAdd(&P.gcnt[(size_t)l * nrg + r], 1u);
                        old = shfl_idx(old, 0);
                        if (old == (unsigned)nparts - 1) {
                            __threadfence();
                            if (lane < 16) {
                                const int row = 16 * r + lane;
                                float y = gpu_ldcg(P.pd + row);
                                for (int w = 1; w < nb2 / 4; w++) y = __fadd_rn(y, gpu_ldcg(P.pd + (size_t)w * D + row));
                                P.x[row] = __fadd_rn(gpu_ldcg(P.x + row), y);
                            }
                        }
                    }
                }
            }
            kb += nt;
            mg2_cbar(NT);
            if (ct == 0) {
                __threadfence();
                const unsigned old = atomicAdd(&P.cnt[o], 1u);
                /* flag 8: the last CTA past the last op zeroes the launch's counters for the next launch (every CTA has
                 * passed every wait on them, and every row group's last task has added its partials) */
                if ((P.flags & 8) && o == nops * (P.l0 + P.n_layers) - 1 && old == (unsigned)G - 1) {
                    __threadfence();
                    for (int i = nops * P.l0; i <= o; i++) P.cnt[i] = 0;
                    for (int64_t i = (int64_t)P.l0 * nrg; i < (int64_t)(P.l0 + P.n_layers + (pj ? 1 : 0)) * nrg; i++) P.gcnt[i] = 0;
                }
            }
        }
    }
}
#endif

size_t cu_mega2_smem(const struct cu_mega2_args *a) {
    const int64_t nmax = a->D > a->F ? a->D : a->F;
    return (size_t)a->ns * a->slot + 16 * (size_t)a->ns + nmax + 4 * (nmax / QK_K) + 2 * (nmax / 16) + 8 + 8 * NQ_WARPS + 64;
}

void cu_mega2_fit(struct cu_mega2_args *a, int nc, int ns_max) {
    uint64_t slot = cu_mega2_task_bytes((int)(a->D / QK_K));
    if (cu_mega2_dn_task_bytes(a->ps, a->dn_q6) > slot) slot = cu_mega2_dn_task_bytes(a->ps, a->dn_q6);
    if (a->pj1 && cu_mega2_task_bytes(a->pj_ps) > slot) slot = cu_mega2_task_bytes(a->pj_ps);
    a->slot = (uint32_t)((slot + 127) & ~(uint64_t)127);
    for (a->ns = 2; a->ns < 64; a->ns++)
        if (cu_mega2_smem(a) > 225 * 1024) { a->ns--; break; }
    if (ns_max > 0 && a->ns > ns_max) a->ns = ns_max;
    a->nc = nc < a->ns ? nc : a->ns;
    a->ns -= a->ns % a->nc;
}

bool cu_mega2(const struct cu_mega2_args *a, int ctas, gpuStream_t s) { return cu_mega2_launch(a, ctas, s, true); }
bool cu_mega2_launch(const struct cu_mega2_args *a, int ctas, gpuStream_t s, bool launch) {
#if defined(VLLMC_HIP)
    (void)a; (void)ctas; (void)s; (void)launch;
    return false;
#else
    if (a->D != 2560 || a->F % 1024 || a->F / QK_K > 64 || a->n_layers < 1 || a->ns < 2 || a->nc < 1 || a->nc > 16 || a->ns % a->nc ||
        ctas < 1)
        return false;
    const int nb2 = (int)(a->F / QK_K);
    if (nb2 % a->ps || (a->ps != 4 && a->ps != 12 && a->ps != 36)) return false;
    if (a->slot < cu_mega2_task_bytes(10) || a->slot < cu_mega2_dn_task_bytes(a->ps, a->dn_q6) || a->slot % 128) return false;
    if (a->pj1 && (a->gu || a->dn || a->nw || a->l0 || a->n_layers != 1 || a->pj_ps < 2 || a->pj_ps % 2 || a->pj_sb < a->pj_ps ||
                   a->pj_sb % a->pj_ps || a->pj_sb / 2 > nb2 / 4 || a->pj_sb * QK_K > (a->D > a->F ? a->D : a->F) ||
                   a->slot < cu_mega2_task_bytes(a->pj_ps) || !a->pj_qs || !a->pj_d || !a->pj_bs || (uintptr_t)a->pj_qs % 16 ||
                   (uintptr_t)a->pj_bs % 16))
        return false;
    void (*kern)(const struct cu_mega2_args) =
        a->dn_q6 ? (a->ps == 4 ? mega2_kernel<10, 4, true> : a->ps == 12 ? mega2_kernel<10, 12, true> : mega2_kernel<10, 36, true>)
                 : (a->ps == 4 ? mega2_kernel<10, 4, false> : a->ps == 12 ? mega2_kernel<10, 12, false> : mega2_kernel<10, 36, false>);
    const size_t smem = cu_mega2_smem(a);
    if (gpuFuncSetMaxDynamicSmem(kern, (int)smem) != gpuSuccess) return false;
    int per = 0, sms = 0, dev = 0;
    const int threads = 32 * (1 + a->nc);
    if (gpuGetDevice(&dev) != gpuSuccess || gpuDeviceGetSMCount(&sms, dev) != gpuSuccess ||
        gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, threads, smem) != gpuSuccess || ctas > per * sms)
        return false;
    if (!launch) return true;
    gpu_launch(kern, dim3((unsigned)ctas), dim3((unsigned)threads), smem, s, *a);
    return gpuGetLastError() == gpuSuccess;
#endif
}

/* ---- a one-row MoE op's experts as one tiled persistent launch (cu_moe2; cuda_internal.h) ----
 * One CTA an SM: warp 0 the producer (its lane 0 streams the CTA's tiles into a ring of slots, as mega2_kernel's), warps
 * 1 .. nc the consumers (slot s is warp s % nc's). The CTA's tasks in order: gate / up tasks (the shared expert's first,
 * so the producer streams them before the routing is known; then entry j's F / 8 tasks), then down tasks (entry j, row
 * group r; j = k the shared expert). The producer warp routes the token once its dependency (the router launch) is
 * released, with moe_route_warp (the gate+up launch's ops: the same ids and weights), then streams the chosen experts'
 * tiles. Gate / up: a warp sums a tile's 8 gate and 8 up rows (mg2_terms: the tensor-core mat-vec's terms, a warp's two
 * super-blocks then the warps in order, which is moe_cols_kernel's order for these widths) and writes silu(g) * u with the
 * down launch's ops. After a grid-wide counter each CTA forms the Q8_K of every hidden row (quant_q8_K_sb: the down
 * launch's bytes). Down: a warp sums 16 rows of one entry (pairs of super-blocks, then in order: moe_cols_kernel's
 * order), writes them to Y / Ys as that launch does, and the row group's last task mixes its 16 rows (moe_mix_col's
 * ops) into out and x. The last CTA zeroes the counters. */
#if !defined(VLLMC_HIP)
struct cu_moe2_dev {
    const uint8_t *gu_r, *gu_s, *dn_r, *dn_s;
    const int8_t *a_qs;
    const float *a_d;
    const int16_t *a_bs;
    const float *logits, *glog;
    int32_t *ids;
    float *wts, *h, *Y, *Ys, *out, *x;
    unsigned *cnt;
    int32_t D, F, Fs, E, k, norm, dn_q6_r, dn_q6_s, ns, nc, slot, pad;
};

/* Whether the CTA's task i (0 .. nA + nB - 1) is a gate / up one, its entry j and its tile (gate / up) or row group. */
static __device__ __forceinline__ void moe2_task(const struct cu_moe2_dev &P, int i, int nA, int *op, int *j, int *q) {
    const int G = gridDim.x, cta = blockIdx.x;
    const int Ts = P.Fs / 8, T1 = P.F / 8, RG = P.D / 16;
    if (i < nA) {
        const int t = cta + G * i;
        *op = 0;
        if (t < Ts) { *j = P.k; *q = t; }
        else { *j = (t - Ts) / T1; *q = (t - Ts) % T1; }
    } else {
        const int t = cta + G * (i - nA);
        *op = 1; *j = t / RG; *q = t % RG;
    }
}

static __global__ void __launch_bounds__(32 * 17, 1) moe2_kernel(const struct cu_moe2_dev P) {
    extern __shared__ __align__(128) uint8_t m2_smem[];
    const int D = P.D, NS = P.ns, NC = P.nc, G = gridDim.x, cta = blockIdx.x;
    const int nb1 = D / QK_K, RG = D / 16, ne = P.k + (P.Fs ? 1 : 0); /* gate / up super-blocks, row groups, entries */
    const int TA = P.Fs / 8 + P.k * (P.F / 8), TB = ne * RG;
    const int nA = cta < TA ? (TA - cta + G - 1) / G : 0, nB = cta < TB ? (TB - cta + G - 1) / G : 0;
    const int nq = P.k * P.F + P.Fs; /* hidden values: entry j < k at j F, the shared one at k F */
    uint8_t *ring = m2_smem;
    uint64_t *full = (uint64_t *)(ring + (size_t)NS * P.slot), *empty = full + NS, *routed = empty + NS;
    int32_t *ids_s = (int32_t *)(routed + 1);
    float *wts_s = (float *)(ids_s + 32);
    const int nmax = D > nq ? D : nq;
    int8_t *aqs = (int8_t *)(((uintptr_t)(wts_s + 32) + 127) & ~(uintptr_t)127); /* (16-byte loads and stores of all three) */
    float *ad = (float *)(aqs + nmax);
    int16_t *abs_ = (int16_t *)(((uintptr_t)(ad + nmax / QK_K) + 15) & ~(uintptr_t)15);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const uint32_t b_gu = (uint32_t)(nb1 * MG2_SB_BYTES);
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; s++) { mg_bar_init(&full[s]); mg_bar_init(&empty[s]); }
        mg_bar_init(routed);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wid == 0) { /* the producer warp */
        int i = 0;
        auto issue = [&](int i_) { /* lane 0: task i_ into slot i_ % NS once its last reader released it */
            const int s = i_ % NS;
            if (i_ >= NS) mg2_wait(&empty[s], (uint32_t)((i_ / NS) - 1) & 1, 1, i_);
            int op, j, q;
            moe2_task(P, i_, nA, &op, &j, &q);
            const bool sh = j == P.k;
            const uint8_t *src;
            uint32_t bytes;
            if (op == 0) { /* (the shared expert: one expert's tiles) */
                src = sh ? P.gu_s + mg2_exp_gu_off(0, q, P.Fs, nb1) : P.gu_r + mg2_exp_gu_off(ids_s[j], q, P.F, nb1);
                bytes = b_gu;
            } else {
                const int nsb = (sh ? P.Fs : P.F) / QK_K, q6 = sh ? P.dn_q6_s : P.dn_q6_r;
                bytes = (uint32_t)nsb * (q6 ? MG2_Q6_SB_BYTES : MG2_SB_BYTES);
                src = sh ? P.dn_s + mg2_exp_dn_off(0, q, D, nsb, q6) : P.dn_r + mg2_exp_dn_off(ids_s[j], q, D, nsb, q6);
            }
            mg_expect(&full[s], bytes);
            mg_copy(ring + (size_t)s * P.slot, src, bytes, &full[s]);
        };
        /* the shared expert's gate / up tiles need no routing: streamed while the router launch ends */
        if (lane == 0)
            for (; i < nA && cta + G * i < P.Fs / 8; i++) issue(i);
        gpu_pdl_wait();
        (void)moe_route_warp(P.logits, P.E, P.k, P.norm, 0, true, ids_s, wts_s, lane);
        __syncwarp();
        if (cta == 0 && lane < P.k) { P.ids[lane] = ids_s[lane]; P.wts[lane] = wts_s[lane]; } /* (as the gate+up launch) */
        if (lane != 0) return;
        mg2_arrive(routed); /* the weights in shared memory for the consumers' mix */
        for (; i < nA + nB; i++) issue(i);
        return;
    }
    const int cw = wid - 1, ct = threadIdx.x - 32, NT = 32 * NC;
    if (cw >= NC) return;
    gpu_pdl_wait();
    /* the Q8_K act of the normed x, as the launch before wrote it (through L2) */
    for (int u = ct; u < D / 16; u += NT) ((uint4 *)aqs)[u] = __ldcg((const uint4 *)P.a_qs + u);
    for (int u = ct; u < D / 128; u += NT) ((uint4 *)abs_)[u] = __ldcg((const uint4 *)P.a_bs + u);
    for (int u = ct; u < nb1; u += NT) ad[u] = __ldcg(P.a_d + u);
    mg2_cbar(NT);
    const int g = lane >> 2;
    for (int i = 0; i < nA; i++) { /* gate / up */
        const int s = i % NS;
        if (s % NC != cw) continue;
        int op, j, q;
        moe2_task(P, i, nA, &op, &j, &q);
        mg2_wait(&full[s], (uint32_t)(i / NS) & 1, 2, i);
        const uint8_t *slot = ring + (size_t)s * P.slot;
        float yg = 0.f, yu = 0.f;
        mg2_pairs<false>(slot, nb1, aqs, ad, abs_, 0, lane, yg, yu);
        __syncwarp();
        if (lane == 0) mg2_arrive(&empty[s]);
        if ((lane & 3) == 0) P.h[(size_t)j * P.F + (size_t)q * 8 + g] = mg2_swiglu(yg, yu);
    }
    /* every CTA's hidden values written */
    mg2_cbar(NT);
    if (ct == 0) {
        __threadfence();
        atomicAdd(&P.cnt[0], 1u);
        const unsigned long long t0 = mg2_now();
        while (mg_ld_acquire(&P.cnt[0]) < (unsigned)G)
            if (mg2_now() - t0 > MG2_WAIT_NS) mg2_hang(3, 0);
    }
    mg2_cbar(NT);
    /* the Q8_K of every hidden row (the down launch's ops: ld8 through L2, quant_q8_K_sb), unit u at u * 256 */
    for (int u = cw; u < nq / QK_K; u += NC) {
        float v[8];
        ld8<true>(P.h + (size_t)u * QK_K + lane * 8, v);
        quant_q8_K_sb(v, aqs + (size_t)u * QK_K, ad + u, abs_ + (size_t)u * 16, lane);
    }
    mg2_wait(routed, 0, 4, 0); /* (the producer's routing, for the mix) */
    mg2_cbar(NT);
    for (int i = nA; i < nA + nB; i++) { /* down */
        const int s = i % NS;
        if (s % NC != cw) continue;
        int op, j, r;
        moe2_task(P, i, nA, &op, &j, &r);
        const bool sh = j == P.k, q6 = sh ? P.dn_q6_s : P.dn_q6_r;
        const int nsb = (sh ? P.Fs : P.F) / QK_K, a0 = j * (P.F / QK_K);
        mg2_wait(&full[s], (uint32_t)(i / NS) & 1, 2, i);
        const uint8_t *slot = ring + (size_t)s * P.slot;
        float y0 = 0.f, y1 = 0.f;
        if (q6) mg2_pairs<true>(slot, nsb, aqs, ad, abs_, a0, lane, y0, y1);
        else mg2_pairs<false>(slot, nsb, aqs, ad, abs_, a0, lane, y0, y1);
        __syncwarp();
        if (lane == 0) mg2_arrive(&empty[s]);
        float *yo = sh ? P.Ys : P.Y + (size_t)j * D;
        if ((lane & 3) == 0) { yo[16 * r + g] = y0; yo[16 * r + 8 + g] = y1; }
        /* the row group's last entry mixes its 16 rows */
        __threadfence();
        __syncwarp();
        unsigned old = 0;
        if (lane == 0) old = atomicAdd(&P.cnt[2 + r], 1u);
        old = shfl_idx(old, 0);
        if (old == (unsigned)ne - 1) {
            __threadfence();
            if (lane < 16) /* the mix kernel's column (the weights from shared memory, where this CTA's producer put them) */
                moe_mix_col<true>(P.Y, wts_s, P.k, P.Fs ? P.Ys : NULL, P.glog, D, P.out, P.x, 0, 16 * r + lane);
        }
    }
    mg2_cbar(NT);
    if (ct == 0) {
        __threadfence();
        if (atomicAdd(&P.cnt[1], 1u) == (unsigned)G - 1) { /* the last CTA: every wait on the counters passed */
            __threadfence();
            for (int c = 0; c < 2 + RG; c++) P.cnt[c] = 0;
        }
    }
}
#endif

static size_t moe2_smem(const struct cu_moe_args *a, int ns, uint32_t slot) {
    const int64_t D = a->n_embd, nq = a->k * a->n_ff[0] + (a->shared ? a->n_ff[1] : 0), nmax = D > nq ? D : nq;
    return (size_t)ns * slot + 16 * (size_t)ns + 8 + 128 + 128 + 128 + nmax + 4 * (nmax / QK_K) + 16 + 2 * (nmax / 16) + 64;
}

void cu_moe2_fit(const struct cu_moe_args *a, int nc, struct cu_moe2_tiles *t) {
    const int64_t D = a->n_embd, F = a->n_ff[0], Fs = a->shared ? a->n_ff[1] : 0;
    uint64_t slot = cu_mega2_task_bytes((int)(D / QK_K));
    const uint64_t dr = (uint64_t)(F / QK_K) * (t->dn_q6_r ? MG2_Q6_SB_BYTES : MG2_SB_BYTES);
    const uint64_t ds = (uint64_t)(Fs / QK_K) * (t->dn_q6_s ? MG2_Q6_SB_BYTES : MG2_SB_BYTES);
    if (dr > slot) slot = dr;
    if (ds > slot) slot = ds;
    t->slot = (int32_t)((slot + 127) & ~(uint64_t)127);
    t->ns = 2;
    while (t->ns < 64 && moe2_smem(a, t->ns + 1, (uint32_t)t->slot) <= 225 * 1024) t->ns++;
    t->nc = nc < t->ns ? nc : t->ns;
    t->ns -= t->ns % t->nc;
}

bool cu_moe2_launch(const struct cu_moe_args *a, gpuStream_t s, bool launch) {
#if defined(VLLMC_HIP)
    (void)a; (void)s; (void)launch;
    return false;
#else
    const struct cu_moe2_tiles &t = a->m2;
    const struct cu_moe_grp &gr = a->gu.g[0], &dr = a->down.g[0];
    const int64_t D = a->n_embd, F = a->n_ff[0], Fs = a->shared ? a->n_ff[1] : 0;
    /* one row; widths in pairs of super-blocks; Q4_K gate / up, Q4_K or Q6_K down; the Q8_K act of x; the tiles */
    if (!t.on || a->T != 1 || a->k < 1 || a->k > 32 || a->k > a->E || a->E > 32 * MOE_RT_PL || D % 512 || F % 512 || Fs % 512 ||
        D > 8192 || a->k * F + Fs > 16384 || a->nq.on || !gr.a.k_qs || !gr.a.k_d || !gr.a.k_bs || (uintptr_t)gr.a.k_qs % 16 ||
        (uintptr_t)gr.a.k_bs % 16 || gr.type[0] != GGML_TYPE_Q4_K || gr.type[1] != GGML_TYPE_Q4_K ||
        (dr.type[0] == GGML_TYPE_Q6_K) != (bool)t.dn_q6_r || (dr.type[0] != GGML_TYPE_Q4_K && dr.type[0] != GGML_TYPE_Q6_K) ||
        !t.gu_r || !t.dn_r || (Fs && (!t.gu_s || !t.dn_s || a->down.n_grp < 2 || a->gu.n_grp < 2)) || !t.h || !t.cnt || t.ns < 2 ||
        t.nc < 1 || t.nc > 16 || t.ns % t.nc || t.ctas < 1 || t.slot % 128 || !a->Y || (Fs && !a->Ys) || !a->out || !a->res)
        return false;
    if (Fs) {
        const struct cu_moe_grp &gs = a->gu.g[1], &ds = a->down.g[1];
        if (gs.type[0] != GGML_TYPE_Q4_K || gs.type[1] != GGML_TYPE_Q4_K || (ds.type[0] == GGML_TYPE_Q6_K) != (bool)t.dn_q6_s ||
            (ds.type[0] != GGML_TYPE_Q4_K && ds.type[0] != GGML_TYPE_Q6_K))
            return false;
    }
    const size_t smem = moe2_smem(a, t.ns, (uint32_t)t.slot);
    if ((uint64_t)t.slot < cu_mega2_task_bytes((int)(D / QK_K)) || smem > 227 * 1024) return false;
    if (gpuFuncSetMaxDynamicSmem(moe2_kernel, (int)smem) != gpuSuccess) return false;
    int per = 0, sms = 0, dev = 0;
    const int threads = 32 * (1 + t.nc);
    if (gpuGetDevice(&dev) != gpuSuccess || gpuDeviceGetSMCount(&sms, dev) != gpuSuccess ||
        gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per, moe2_kernel, threads, smem) != gpuSuccess || t.ctas > per * sms)
        return false;
    if (!launch) return true;
    struct cu_moe2_dev p;
    memset(&p, 0, sizeof(p));
    p.gu_r = t.gu_r; p.gu_s = t.gu_s; p.dn_r = t.dn_r; p.dn_s = t.dn_s;
    p.a_qs = gr.a.k_qs; p.a_d = gr.a.k_d; p.a_bs = gr.a.k_bs;
    p.logits = a->logits; p.glog = a->sgate ? a->glog : NULL;
    p.ids = a->ids; p.wts = a->wts; p.h = t.h; p.Y = (float *)a->Y; p.Ys = Fs ? (float *)a->Ys : NULL; p.out = a->out; p.x = a->res;
    p.cnt = t.cnt;
    p.D = (int32_t)D; p.F = (int32_t)F; p.Fs = (int32_t)Fs; p.E = a->E; p.k = a->k; p.norm = a->norm;
    p.dn_q6_r = t.dn_q6_r; p.dn_q6_s = t.dn_q6_s; p.ns = t.ns; p.nc = t.nc; p.slot = t.slot;
    gpu_launch(moe2_kernel, dim3((unsigned)t.ctas), dim3((unsigned)threads), smem, s, p);
    return gpuGetLastError() == gpuSuccess;
#endif
}
