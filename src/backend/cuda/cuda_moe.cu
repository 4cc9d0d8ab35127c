/* Mixture-of-experts FFN on the GPU (qwen35moe; the CPU reference is src/backend/cpu/ops_moe.c).
 *
 * One op, no host synchronisation (so a decode step holding it is captured into a graph). In general six launches:
 *   1. router (+ shared-expert gate) mat-vec on the f32 activation (F32 weights: bit-exact with the CPU);
 *   2. route: per row, softmax over all experts (sum in double), top-k with ties to the lower id, the
 *      renormalisation with llama.cpp's clamp; the chosen ids and weights stay on the device;
 *   3. gate+up of every (row, slot) entry and of the shared expert, one launch over (row block, entry),
 *      reading the expert id of the entry and the activation quantized once by the model;
 *   4. SwiGLU + quantize of the hidden rows (routed, then shared when its width differs, else one launch);
 *   5. down of every entry and of the shared expert, one launch, each entry into its own row;
 *   6. mix: out = sum over slots in selection order of w * y (then + sigmoid gate * shared), a fixed order,
 *      no atomics, so results are deterministic and equal the reference's order.
 * Steps of few rows with Q4_K / Q6_K experts (cu_launch_moe_cols says where) take four: 2 and 3 become one column-split launch
 * whose CTAs route their token themselves, 4 and 5 one whose CTAs form their hidden row (gemv_q.cu). */
#include "backend/cuda/cuda_internal.h"
#include "quant/quant.h"

#define MOE_MAX_EXPERT 1024

/* One 32-lane group per row. Lane l owns experts l, l + 32, ... */
static __global__ void __launch_bounds__(32) moe_route_kernel(const float *logits, int E, int k, int norm, int32_t *ids,
                                                              float *wts) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    __shared__ float p[MOE_MAX_EXPERT];
    __shared__ unsigned char taken[MOE_MAX_EXPERT];
    const int lane = threadIdx.x;
    const float *l = logits + (int64_t)blockIdx.x * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, shfl_xor(mx, off));
    double sum = 0.0;
    for (int e = lane; e < E; e += 32) sum += (double)expf(l[e] - mx);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += shfl_xor(sum, off);
    for (int e = lane; e < E; e += 32) {
        p[e] = (float)((double)expf(l[e] - mx) / sum);
        taken[e] = 0;
    }
    __syncthreads(); /* the block is one 32-lane group */
    int32_t *oid = ids + (int64_t)blockIdx.x * k;
    float *ow = wts + (int64_t)blockIdx.x * k;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
        for (int e = lane; e < E; e += 32)
            if (!taken[e] && (p[e] > bv || be == 0x7fffffff)) { bv = p[e]; be = e; }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = shfl_xor(bv, off);
            const int oe = shfl_xor(be, off);
            if (oe != 0x7fffffff && (be == 0x7fffffff || ov > bv || (ov == bv && oe < be))) { bv = ov; be = oe; }
        }
        if (lane == 0) {
            oid[j] = be;
            ow[j] = bv;
            taken[be] = 1;
        }
        __syncthreads(); /* the block is one 32-lane group */
    }
    if (norm && lane == 0) {
        float s = 0.f;
        for (int j = 0; j < k; j++) s = __fadd_rn(s, ow[j]);
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int j = 0; j < k; j++) ow[j] = __fdiv_rn(ow[j], s);
    }
}

/* out[t][c] = sum_j w[t][j] * Y[t k + j][c] (j in selection order) + sigmoid(glog[t]) * Ys[t][c]. */
static __global__ void moe_mix_kernel(const float *Y, const float *wts, int k, const float *Ys, const float *glog,
                                      int64_t n, float *out, float *res) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int64_t t = blockIdx.y, c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    float o = 0.f;
    for (int j = 0; j < k; j++) {
        const float v = __fmul_rn(wts[t * k + j], Y[(t * k + j) * n + c]);
        o = j == 0 ? v : __fadd_rn(o, v);
    }
    if (Ys) {
        float g = 1.0f;
        if (glog) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-glog[t])));
        o = __fadd_rn(o, __fmul_rn(g, Ys[t * n + c]));
    }
    out[t * n + c] = o;
    if (res) res[t * n + c] = __fadd_rn(res[t * n + c], o);
}

/* Routing, gate+up, SwiGLU + quantize, down: four launches (any row count, type and width). */
static void moe_experts(const struct cu_moe_args *a, gpuStream_t s) {
    gpu_launch(moe_route_kernel, dim3((unsigned)a->T), dim3(32), 0, s, a->logits, a->E, a->k, a->norm, a->ids, a->wts);
    cu_launch_moe_matmul(&a->gu, s);
    const int n_ent = a->T * a->k;
    if (a->merged) {
        /* the shared expert's rows follow the routed ones in one buffer: one launch for both */
        cu_launch_norm_quant(CU_NQ_SWIGLU, a->gu_buf[0], a->gu_buf[0] + a->n_ff[0], 2 * a->n_ff[0], NULL, 0.f, 0,
                             n_ent + a->T, a->h[0], a->hfmts[0], s);
    } else {
        cu_launch_norm_quant(CU_NQ_SWIGLU, a->gu_buf[0], a->gu_buf[0] + a->n_ff[0], 2 * a->n_ff[0], NULL, 0.f, 0, n_ent,
                             a->h[0], a->hfmts[0], s);
        if (a->shared)
            cu_launch_norm_quant(CU_NQ_SWIGLU, a->gu_buf[1], a->gu_buf[1] + a->n_ff[1], 2 * a->n_ff[1], NULL, 0.f, 0, a->T,
                                 a->h[1], a->hfmts[1], s);
    }
    cu_launch_moe_matmul(&a->down, s);
}

bool cu_launch_moe(const struct cu_moe_args *a, gpuStream_t s) {
    if (a->T <= 0) return false;
    cu_launch_matmul(&a->router, s);
    const bool cols = cu_launch_moe_cols(a, s);
    if (!cols) moe_experts(a, s);
    gpu_launch(moe_mix_kernel, dim3((unsigned)GPU_CEIL_DIV(a->n_embd, 256), (unsigned)a->T), dim3(256), 0, s,
        a->Y, a->wts, a->k, a->shared ? a->Ys : NULL, a->sgate ? a->glog : NULL, a->n_embd, a->out, a->res);
    return cols;
}
