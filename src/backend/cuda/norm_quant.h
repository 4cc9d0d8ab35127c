/* The norm + quantize's device code (RMSNorm / SwiGLU / gated RMSNorm, then every activation format), shared by its own
 * kernel (gemv_q.cu norm_quant_kernel) and the launches that do it in their epilogue (cu_nq_fuse: the column-split and
 * streaming mat-vecs, the GDN rule kernel), so that all of them give the same bits. */
#ifndef VLLMC_CUDA_NORM_QUANT_H
#define VLLMC_CUDA_NORM_QUANT_H

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/act_quant.h"
#include "quant/blocks.h"

#define NQ_WARPS 8

static __device__ __forceinline__ bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }
/* CG: the values were written by other CTAs of the running grid (the norm + quantize inside a matmul): loads through L2 */
template <bool CG = false> static __device__ __forceinline__ float4 ldf4(const float *p) {
    return CG ? gpu_ldcg((const float4 *)p) : *(const float4 *)p;
}
template <bool CG = false> static __device__ __forceinline__ float ldf(const float *p) { return CG ? gpu_ldcg(p) : *p; }
template <bool CG = false> static __device__ __forceinline__ void ld8(const float *p, float v[8]) {
    const float4 a = ldf4<CG>(p), b = ldf4<CG>(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
static __device__ __forceinline__ void st8(float *p, const float v[8]) {
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/* The RMSNorm scale of row x (n floats) as the norm+quantize kernel forms it: NQ_WARPS x 32 strided partial sums of
 * the squares in double (16-byte loads where aligned), a butterfly per warp, then the warps' sums in order. Any
 * block size: warp w takes the partials of warps w, w + W, ... (in the kernel, W = NQ_WARPS), so a kernel of
 * another shape that calls it gets the same bits. red: NQ_WARPS doubles of shared memory; every thread calls it
 * (nq_rms_scale). Its two halves, for a kernel whose warps meet at a barrier of their own (the tiled persistent
 * chain): the partials by warps w0, w0 + W, ... of W (nq_rms_partials), then, after the caller's barrier, the scale
 * from red (nq_rms_finish). */
template <bool CG = false>
static __device__ __forceinline__ void nq_rms_partials(const float *x, int64_t n, double *red, int w0, int W) {
    const int lane = threadIdx.x & 31;
    for (int g = w0; g < NQ_WARPS; g += W) {
        const int tid = g * 32 + lane;
        double sum = 0.0;
        if ((n & 3) == 0 && al16(x)) {
            /* 16-byte loads, NQ_SUM_LD of them issued before the first add: a row of up to 4,096 columns is one L2
             * round trip (a loop of unroll 4 left rows of 2 or 3 loads a thread to its remainder, one load at a
             * time). The adds are the same, in the same order (an out-of-row slot adds +0.0, which changes no sum). */
            constexpr int NQ_SUM_LD = 4;
            for (int64_t i0 = tid; i0 < n / 4; i0 += NQ_SUM_LD * 32 * NQ_WARPS) {
                float4 q[NQ_SUM_LD];
#pragma unroll
                for (int k = 0; k < NQ_SUM_LD; k++) {
                    const int64_t i = i0 + (int64_t)k * 32 * NQ_WARPS;
                    q[k] = i < n / 4 ? ldf4<CG>(x + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int k = 0; k < NQ_SUM_LD; k++) {
                    sum += (double)__fmul_rn(q[k].x, q[k].x);
                    sum += (double)__fmul_rn(q[k].y, q[k].y);
                    sum += (double)__fmul_rn(q[k].z, q[k].z);
                    sum += (double)__fmul_rn(q[k].w, q[k].w);
                }
            }
        } else {
            for (int64_t i = tid; i < n; i += 32 * NQ_WARPS) {
                const float xi = ldf<CG>(x + i);
                sum += (double)__fmul_rn(xi, xi);
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) sum += shfl_xor(sum, off);
        if (lane == 0) red[g] = sum;
    }
}
static __device__ __forceinline__ float nq_rms_finish(const double *red, int64_t n, float eps) {
    double tot = 0.0;
    for (int g = 0; g < NQ_WARPS; g++) tot += red[g];
    return __fdiv_rn(1.0f, sqrtf((float)(tot / (double)n + (double)eps)));
}
template <bool CG = false>
static __device__ float nq_rms_scale(const float *x, int64_t n, float eps, double *red) {
    nq_rms_partials<CG>(x, n, red, (int)(threadIdx.x >> 5), (int)(blockDim.x >> 5));
    __syncthreads();
    return nq_rms_finish(red, n, eps);
}

/* The gated RMSNorm of one warp's 256-element unit (lane: elements e0 .. e0 + 7 of a row of n): v the raw values, z
 * the gate's; RMSNorm over each group of `group` columns (group / 8 lanes), times w (or the lane's wpre), times
 * silu(z); the results back into v and to xr. Shared by nq_unit and the GDN rule kernel's cluster epilogue. */
static __device__ __forceinline__ void nq_gated(float v[8], const float zv[8], const float *w, const float *wpre, int group, float eps,
                                                int64_t e0, int64_t n, float *xr) {
    double sq = 0.0;
#pragma unroll
    for (int k = 0; k < 8; k++) sq += (double)v[k] * (double)v[k];
    for (int off = 1; off < group / 8; off <<= 1) sq += shfl_xor(sq, off);
    const float gscale = __fdiv_rn(1.0f, sqrtf(__fadd_rn((float)(sq / group), eps)));
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int64_t e = e0 + k;
        if (e < n) {
            const float z = zv[k];
            const float sz = __fdiv_rn(z, __fadd_rn(1.0f, expf(-z)));
            v[k] = __fmul_rn(__fmul_rn(__fmul_rn(v[k], gscale), wpre ? wpre[k] : w[e % group]), sz);
            xr[e] = v[k];
        }
    }
}
/* One warp's 256-element unit `unit` of row r (lane: elements e0 .. e0 + 7, values v) into every format in fmts. */
static __device__ __forceinline__ void nq_formats(const float v[8], const struct cu_act_mut &out, uint32_t fmts, int64_t r, int64_t unit,
                                                  int64_t e0, int lane) {
    const int64_t n = out.n;
    if ((fmts & BK_ACT_BIT(BK_ACT_Q8_K)) && out.k_qs) {
        const int64_t ns = n / QK_K, s = unit;
        quant_q8_K_sb(v, out.k_qs + r * n + s * QK_K, out.k_d + r * ns + s, out.k_bs + r * (n / 16) + s * 16, lane);
    }
    if ((fmts & (BK_ACT_BIT(BK_ACT_Q8_0) | BK_ACT_BIT(BK_ACT_Q8_1))) && out.o_qs) /* every lane takes part in the shuffles */
        quant_q8_0_lane(v, out.o_qs + r * n + e0, out.o_d + r * (n / 32) + e0 / 32, lane, e0 < n,
                        (fmts & BK_ACT_BIT(BK_ACT_Q8_1)) && out.o_s ? out.o_s + r * (n / 32) + e0 / 32 : NULL);
    if ((fmts & BK_ACT_BIT(BK_ACT_F16)) && out.h)
        for (int k = 0; k < 8; k++) if (e0 + k < n) out.h[r * n + e0 + k] = fp32_to_fp16(v[k]);
    if ((fmts & BK_ACT_BIT(BK_ACT_BF16)) && out.bf)
        for (int k = 0; k < 8; k++) if (e0 + k < n) out.bf[r * n + e0 + k] = fp32_to_bf16(v[k]);
}

/* One warp: 256-element unit `unit` of row r (lane l: elements 8l .. 8l+7): its f32 values (normed with scale /
 * gated / as they are) to out.x, then into every format in fmts. */
template <bool CG = false>
static __device__ void nq_unit(int mode, const float *in0, const float *in1, int64_t ld, const float *w, float eps, int group,
                               float scale, const struct cu_act_mut &out, uint32_t fmts, int64_t r, int64_t unit, int lane,
                               const float *wpre = NULL) {
    const int64_t n = out.n, e0 = unit * 256 + lane * 8;
    float *xr = out.x + r * n;
    const float *x0 = mode == CU_NQ_RMSNORM ? in0 + r * n : NULL;
    float v[8];
    /* GATED: the gate z with the values (one L2 round trip for both, not a second one after the group's sum) */
    float zv[8];
    if (mode == CU_NQ_GATED)
#pragma unroll
        for (int k = 0; k < 8; k++) zv[k] = e0 + k < n ? ldf<CG>(in1 + r * ld + e0 + k) : 0.f;
    /* whole 8-element pieces with aligned rows: 16-byte loads and stores (the same values) */
    const bool vec = e0 + 8 <= n && al16(xr + e0) &&
                     (mode == CU_NQ_RMSNORM ? al16(x0 + e0) && (!w || al16(w + e0))
                      : mode == CU_NQ_SWIGLU ? al16(in0 + r * ld + e0) && al16(in1 + r * ld + e0) : true);
    if (vec) {
        if (mode == CU_NQ_RMSNORM) {
            float a[8], b[8];
            ld8<CG>(x0 + e0, a);
            if (wpre) for (int k = 0; k < 8; k++) b[k] = wpre[k];
            else if (w) ld8(w + e0, b);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = w ? __fmul_rn(__fmul_rn(a[k], scale), b[k]) : __fmul_rn(a[k], scale);
            st8(xr + e0, v);
        } else if (mode == CU_NQ_SWIGLU) {
            float a[8], b[8];
            ld8<CG>(in0 + r * ld + e0, a);
            ld8<CG>(in1 + r * ld + e0, b);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = __fmul_rn(__fdiv_rn(a[k], __fadd_rn(1.0f, expf(-a[k]))), b[k]);
            st8(xr + e0, v);
        } else {
            ld8<CG>(xr + e0, v);
        }
    }
#pragma unroll
    for (int k = 0; k < 8 && !vec; k++) {
        const int64_t e = e0 + k;
        float val = 0.f;
        if (e < n) {
            if (mode == CU_NQ_RMSNORM) {
                val = __fmul_rn(ldf<CG>(x0 + e), scale);
                if (w) val = __fmul_rn(val, wpre ? wpre[k] : w[e]);
                xr[e] = val;
            } else if (mode == CU_NQ_SWIGLU) {
                const float gv = ldf<CG>(in0 + r * ld + e);
                val = __fmul_rn(__fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv))), ldf<CG>(in1 + r * ld + e));
                xr[e] = val;
            } else {
                val = ldf<CG>(xr + e);
            }
        }
        v[k] = val;
    }
    if (mode == CU_NQ_GATED) nq_gated(v, zv, w, wpre, group, eps, e0, n, xr);
    nq_formats(v, out, fmts, r, unit, e0, lane);
}

/* ---- the norm + quantize of a launch's outputs, inside it (cu_nq_fuse) ----
 * Units of the output act: RMSNORM a whole row (its scale wants the row's sum of squares), else 256 columns; one counter
 * per (activation-row group, unit). A CTA adds the columns it wrote (times the group's activation rows) to the counters
 * of the units they fall in; the add that reaches the unit's total (feeding sources x its columns x the group's rows)
 * makes that CTA the unit's last: it resets the counter (the next launch that uses it starts after this grid ended, and
 * its adds follow its dependency wait) and runs nq_rms_scale / nq_unit over the unit, as norm_quant_kernel does. */
#define NQ_FUSE_MAX_DONE (2 * CU_MM_MAX_SEG) /* units one CTA can complete: <= 4 runs of <= 256 columns, each meeting <= 2 */
struct nq_cols { int64_t c0, n; };          /* columns c0 .. c0 + n - 1 of the output, written by this CTA (one source) */

static __host__ __device__ __forceinline__ int64_t nq_fuse_uw(int mode, int64_t n) { return mode == CU_NQ_RMSNORM ? n : 256; }

/* Thread 0 of a CTA that wrote columns c0 .. c1 - 1 (of n): add them (mul each) to the counters cnt[u] of the
 * uw-column units they fall in. A unit whose count reaches tgt x its width is complete: its counter goes back to zero
 * (no CTA of this launch adds to it any more) and u is appended to done (at most max_done). Returns the new length
 * of done. Shared by the norm + quantize below and the MoE mix in the down launch (gemv_q.cu moe_mix_tail). */
static __device__ int nq_count_cols(unsigned *cnt, int64_t n, int64_t uw, int64_t c0, int64_t c1, unsigned mul, unsigned tgt,
                                    int *done, int nd, int max_done) {
    for (int64_t u = c0 / uw; u * uw < c1 && u * uw < n; u++) {
        const int64_t ue = (u + 1) * uw < n ? (u + 1) * uw : n;
        const int64_t lo = c0 > u * uw ? c0 : u * uw, hi = c1 < ue ? c1 : ue;
        const unsigned add = (unsigned)(hi - lo) * mul;
        if (add && atomicAdd(cnt + u, add) + add == tgt * (unsigned)(ue - u * uw)) {
            atomicExch(cnt + u, 0u);
            if (nd < max_done) done[nd++] = (int)u;
        }
    }
    return nd;
}

/* Before the dependency wait, by every CTA of the launch (cta of n_cta): the norm's weights into L2, so the CTA that
 * completes a unit reads them from there and not from DRAM (the weight streaming between two steps evicts them). */
static __device__ __forceinline__ void nq_fuse_prefetch(const struct cu_nq_fuse &Q, int64_t cta, int64_t n_cta) {
    if (!Q.on || !Q.w || threadIdx.x != 0) return;
    const int64_t lines = ((Q.mode == CU_NQ_GATED ? Q.group : Q.out.n) * 4 + 127) / 128;
    for (int64_t i = cta; i < lines; i += n_cta) gpu_prefetch_l2((const char *)Q.w + 128 * i);
}

/* Every thread of the CTA, after the CTA wrote its outputs (its column runs pc, activation rows a0 .. a0 + na - 1 of
 * group grp): count them, then run the units this CTA completed. */
static __device__ void nq_fuse_finish(const struct cu_nq_fuse &Q, const nq_cols *pc, int n_pc, int grp, int a0, int na) {
    __shared__ double red[NQ_WARPS];
    __shared__ int done[NQ_FUSE_MAX_DONE], n_done;
    const int64_t n = Q.out.n, uw = nq_fuse_uw(Q.mode, n), nu = (n + uw - 1) / uw;
    __syncthreads(); /* the CTA's outputs are written */
    if (threadIdx.x == 0) {
        int nd = 0;
        __threadfence(); /* ... and visible before they are counted */
        for (int i = 0; i < n_pc; i++)
            nd = nq_count_cols(Q.cnt + (int64_t)grp * nu, n, uw, pc[i].c0, pc[i].c0 + pc[i].n, (unsigned)na,
                               (unsigned)(Q.n_feed * na), done, nd, NQ_FUSE_MAX_DONE);
        n_done = nd;
        if (nd) __threadfence(); /* acquire: the other CTAs' outputs, counted before ours, are read below */
    }
    __syncthreads();
    const int nd = n_done;
    if (!nd) return;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = (int)(blockDim.x >> 5);
    const int64_t units = (n + 255) / 256;
    if (Q.mode == CU_NQ_RMSNORM) {
        for (int r = a0; r < a0 + na; r++) {
            const float scale = nq_rms_scale<true>(Q.in0 + (int64_t)r * n, n, Q.eps, red);
            for (int64_t u = wid; u < units; u += W)
                nq_unit<true>(Q.mode, Q.in0, Q.in1, Q.ld, Q.w, Q.eps, Q.group, scale, Q.out, Q.fmts, r, u, lane);
            __syncthreads(); /* red is the next row's */
        }
    } else {
        for (int i = wid; i < nd * na; i += W)
            nq_unit<true>(Q.mode, Q.in0, Q.in1, Q.ld, Q.w, Q.eps, Q.group, 1.f, Q.out, Q.fmts, a0 + i % na, done[i / na], lane);
    }
}

#endif
