/* The MoE mix of one output column, shared by the mix kernel (cuda_moe.cu) and the down launch that does it in its
 * epilogue (gemv_q.cu moe_cols_kernel, cu_moe_mix), so both give the same bits. */
#ifndef VLLMC_CUDA_MOE_MIX_H
#define VLLMC_CUDA_MOE_MIX_H

#include "backend/cuda/cuda_internal.h"

/* out[t][c] = sum_j w[t][j] * Y[t k + j][c] (j in selection order) + sigmoid(glog[t]) * Ys[t][c], and res[t][c] += it.
 * CG: Y and Ys were written by other CTAs of the running grid (loads through L2, after an acquire fence). */
template <bool CG = false>
static __device__ __forceinline__ void moe_mix_col(const float *Y, const float *wts, int k, const float *Ys, const float *glog,
                                                   int64_t n, float *out, float *res, int64_t t, int64_t c) {
    float o = 0.f;
    for (int j = 0; j < k; j++) {
        const float *yp = Y + (t * k + j) * n + c;
        const float v = __fmul_rn(wts[t * k + j], CG ? gpu_ldcg(yp) : *yp);
        o = j == 0 ? v : __fadd_rn(o, v);
    }
    if (Ys) {
        float g = 1.0f;
        if (glog) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-glog[t])));
        const float *sp = Ys + t * n + c;
        o = __fadd_rn(o, __fmul_rn(g, CG ? gpu_ldcg(sp) : *sp));
    }
    out[t * n + c] = o;
    if (res) res[t * n + c] = __fadd_rn(res[t * n + c], o);
}

#endif
