/* The Gated DeltaNet causal conv of one channel at one token, shared by gdn_conv_kernel (cuda_ops.cu) and the
 * matmul epilogue that does it in a decode step (gemv_q.cu): silu(sum_k win[k] w[k]) with the sum in k order, as
 * the CPU reference forms it. */
#ifndef VLLMC_GDN_CONV_H
#define VLLMC_GDN_CONV_H

static __device__ __forceinline__ float gdn_conv_silu(const float *win, const float *wv, int nh) {
    float s = 0.f;
    for (int k = 0; k <= nh; k++) s = __fadd_rn(s, __fmul_rn(win[k], wv[k]));
    return __fdiv_rn(s, __fadd_rn(1.0f, expf(-s)));
}

#endif
