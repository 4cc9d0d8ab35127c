/* The MoE mix of one output column, shared by the mix kernel (cuda_moe.cu) and the down launch that does it in its
 * epilogue (gemv_q.cu moe_cols_kernel, cu_moe_mix), so both give the same bits. */
#ifndef VLLMC_CUDA_MOE_MIX_H
#define VLLMC_CUDA_MOE_MIX_H

#include "backend/cuda/cuda_internal.h"

/* out[t][c] = sum_j w[t][j] * Y[t k + j][c] (j in selection order) + sigmoid(glog[t]) * Ys[t][c], and res[t][c] += it.
 * CG: Y and Ys were written by other CTAs of the running grid (loads through L2, after an acquire fence). */
template <bool CG = false>
static __device__ __forceinline__ float moe_mix_col(const float *Y, const float *wts, int k, const float *Ys, const float *glog,
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
    if (res) {
        const float v = __fadd_rn(res[t * n + c], o);
        res[t * n + c] = v;
        return v;
    }
    return o;
}

/* moe_mix_col of the 8 columns c0 .. c0 + 7 with res (16-byte aligned rows): every source's loads issued before the
 * sums that wait on them, 8 sources at a time; the same ops in the same order. v: the new res values. */
static __device__ __forceinline__ void moe_mix_8(const float *Y, const float *wts, int k, const float *Ys, const float *glog,
                                                 int64_t n, float *out, float *res, int64_t t, int64_t c0, float v[8]) {
    float o[8], rv[8], sv[8];
    const float4 r0 = *(const float4 *)(res + t * n + c0), r1 = *(const float4 *)(res + t * n + c0 + 4);
    rv[0] = r0.x; rv[1] = r0.y; rv[2] = r0.z; rv[3] = r0.w; rv[4] = r1.x; rv[5] = r1.y; rv[6] = r1.z; rv[7] = r1.w;
    if (Ys) {
        const float4 s0 = *(const float4 *)(Ys + t * n + c0), s1 = *(const float4 *)(Ys + t * n + c0 + 4);
        sv[0] = s0.x; sv[1] = s0.y; sv[2] = s0.z; sv[3] = s0.w; sv[4] = s1.x; sv[5] = s1.y; sv[6] = s1.z; sv[7] = s1.w;
    }
    for (int j0 = 0; j0 < k; j0 += 8) {
        float4 y[8][2];
        float wj[8];
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
            if (j0 + jj < k) {
                const float *yp = Y + (t * k + j0 + jj) * n + c0;
                y[jj][0] = *(const float4 *)yp;
                y[jj][1] = *(const float4 *)(yp + 4);
                wj[jj] = wts[t * k + j0 + jj];
            }
#pragma unroll
        for (int jj = 0; jj < 8; jj++)
            if (j0 + jj < k) {
                const float yv[8] = {y[jj][0].x, y[jj][0].y, y[jj][0].z, y[jj][0].w, y[jj][1].x, y[jj][1].y, y[jj][1].z, y[jj][1].w};
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float p = __fmul_rn(wj[jj], yv[e]);
                    o[e] = j0 + jj == 0 ? p : __fadd_rn(o[e], p);
                }
            }
    }
    if (Ys) {
        float g = 1.0f;
        if (glog) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-glog[t])));
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = __fadd_rn(o[e], __fmul_rn(g, sv[e]));
    }
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = __fadd_rn(rv[e], o[e]);
    *(float4 *)(out + t * n + c0) = make_float4(o[0], o[1], o[2], o[3]);
    *(float4 *)(out + t * n + c0 + 4) = make_float4(o[4], o[5], o[6], o[7]);
    *(float4 *)(res + t * n + c0) = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(res + t * n + c0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

#endif
