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

/* moe_mix_col for columns c0 + i * stride (i < C, those below n) of row t, the same ops in the same order, with every
 * slot's loads of a group of 8 issued before its adds (one L2 round trip a group, where a column a call waits for its
 * own); xs[c] = the column's new residual res[t][c] (res non-NULL). The MoE mix with the norm after it (cuda_moe.cu
 * moe_mix_row_kernel). */
template <int C>
static __device__ __forceinline__ void moe_mix_cols(const float *Y, const float *wts, int k, const float *Ys, const float *glog,
                                                    int64_t n, float *out, float *res, int64_t t, int64_t c0, int64_t stride,
                                                    float *xs) {
    bool on[C];
    float o[C];
#pragma unroll
    for (int i = 0; i < C; i++) { on[i] = c0 + i * stride < n; o[i] = 0.f; }
    for (int j0 = 0; j0 < k; j0 += 8) {
        float y[8][C];
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < C; i++) y[j][i] = j0 + j < k && on[i] ? Y[(t * k + j0 + j) * n + c0 + i * stride] : 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (j0 + j >= k) break;
            const float wj = wts[t * k + j0 + j];
#pragma unroll
            for (int i = 0; i < C; i++) {
                const float v = __fmul_rn(wj, y[j][i]);
                o[i] = j0 + j == 0 ? v : __fadd_rn(o[i], v);
            }
        }
    }
    float g = 1.0f;
    if (Ys && glog) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-glog[t])));
    float sv[C], rv[C];
#pragma unroll
    for (int i = 0; i < C; i++) {
        const int64_t c = c0 + i * stride;
        sv[i] = Ys && on[i] ? Ys[t * n + c] : 0.f;
        rv[i] = on[i] ? res[t * n + c] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < C; i++) {
        if (!on[i]) continue;
        const int64_t c = c0 + i * stride;
        if (Ys) o[i] = __fadd_rn(o[i], __fmul_rn(g, sv[i]));
        out[t * n + c] = o[i];
        const float x = __fadd_rn(rv[i], o[i]);
        res[t * n + c] = x;
        xs[c] = x;
    }
}

#endif
