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
 * With Q4_K / Q6_K experts, steps of 1-3 rows (cu_launch_moe_cols says where) take four: 2 and 3 become one
 * column-split launch whose CTAs route their token themselves, 4 and 5 one whose CTAs form their hidden row
 * (gemv_q.cu); steps of more rows (cu_launch_moe_grouped) sort the entries by expert after 2, and 3 and 5 load each
 * expert's rows once for up to CU_MOE_GRP of its entries. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/norm_quant.h"
#include "backend/cuda/moe_mix.h"
#include "backend/cuda/moe_sort.h"
#include "backend/cuda/moe_route.h"
#include "quant/quant.h"

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
    const double rs = 1.0 / sum;
    for (int e = lane; e < E; e += 32) {
        p[e] = moe_prob((double)expf(l[e] - mx), sum, rs);
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

/* grid (ceil(n / 256), T); with nq.on, the RMSNorm + quantize of res row t by the CTA that completes it (norm_quant.h) */
static __global__ void __launch_bounds__(256) moe_mix_kernel(const float *Y, const float *wts, int k, const float *Ys,
                                                             const float *glog, int64_t n, float *out, float *res,
                                                             const struct cu_nq_fuse nq) {
    nq_fuse_prefetch(nq, (int64_t)blockIdx.y * gridDim.x + blockIdx.x, (int64_t)gridDim.x * gridDim.y);
    gpu_pdl_wait();
    gpu_pdl_trigger();
    const int64_t t = blockIdx.y, c0 = (int64_t)blockIdx.x * blockDim.x, c = c0 + threadIdx.x;
    if (c < n) moe_mix_col(Y, wts, k, Ys, glog, n, out, res, t, c);
    if (nq.on) {
        const nq_cols pc = {c0, (n - c0 < (int64_t)blockDim.x ? n - c0 : (int64_t)blockDim.x)};
        nq_fuse_finish(nq, &pc, 1, (int)t, (int)t, 1);
    }
}

/* The entries sorted by expert (moe_sort.h), one CTA of at least E threads. */
static __global__ void __launch_bounds__(1024) moe_sort_kernel(const int32_t *ids, int n_ent, int E, int32_t *perm, int4 *grp,
                                                               int gmax) {
    gpu_pdl_wait();
    gpu_pdl_trigger();
    moe_sort_cta(ids, n_ent, E, perm, grp, gmax);
}

/* Routing, gate+up, SwiGLU + quantize, down: four launches (any row count, type and width); grouped: the entries
 * sorted by expert between the routing and gate+up, and both expert launches on the grouped kernel. True where the
 * routing and the sort were one launch. */
static bool moe_experts(const struct cu_moe_args *a, gpuStream_t s, bool grouped) {
    /* a decode step's few rows: routed and sorted in one CTA (cu_launch_moe_route_sort), else a launch each */
    const bool rs = grouped && cu_launch_moe_route_sort(a, s);
    if (!rs) {
        gpu_launch(moe_route_kernel, dim3((unsigned)a->T), dim3(32), 0, s, a->logits, a->E, a->k, a->norm, a->ids, a->wts);
        if (grouped)
            gpu_launch(moe_sort_kernel, dim3(1), dim3(a->E < 1024 ? ((a->E + 31) / 32) * 32 : 1024), 0, s, (const int32_t *)a->ids,
                       a->T * a->k, a->E, a->perm, (int4 *)a->grp, a->gmax);
    }
    if (grouped) {
        cu_launch_moe_grp_matmul(&a->gu, a->perm, a->grp, a->gmax, s);
    } else {
        cu_launch_moe_matmul(&a->gu, s);
    }
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
    if (grouped) cu_launch_moe_grp_matmul(&a->down, a->perm, a->grp, a->gmax, s);
    else cu_launch_moe_matmul(&a->down, s);
    return rs;
}

/* The grouped path's conditions: cu_launch_moe_cols's types and shapes (so an entry's bits are the same on both), at
 * least moe_group_rows rows, the scratch for the sort (perm, grp). */
static bool moe_grouped_ok(const struct cu_moe_args *a) {
    return cu_mm_cfg.moe_group_rows > 0 && a->T >= cu_mm_cfg.moe_group_rows && a->perm && a->grp && a->E <= MOE_MAX_EXPERT &&
           (int64_t)a->gmax + (a->T + CU_MOE_GRP - 1) / CU_MOE_GRP <= 65535 && /* a group a grid row */
           !(a->router.row_order && !cu_mm_cfg.cols_invariant) && cu_moe_grp_shape_ok(&a->gu) && cu_moe_grp_shape_ok(&a->down);
}

int cu_launch_moe_grouped(const struct cu_moe_args *a, gpuStream_t s) {
    if (!moe_grouped_ok(a)) return 0;
    return moe_experts(a, s, true) ? 2 : 1;
}

int cu_launch_moe(const struct cu_moe_args *a, gpuStream_t s) {
    if (a->T <= 0) return CU_MOE_PATH_GENERAL;
    cu_launch_matmul(&a->router, s);
    /* a recorded decode step's tiled form (the moe2 pass checked it launches; a launch that fails is an error there) */
    if (a->m2.on && cu_moe2_launch(a, s, true)) return CU_MOE_PATH_TILED;
    int path = CU_MOE_PATH_GENERAL;
    if (cu_launch_moe_cols(a, s)) {
        path = CU_MOE_PATH_COLS;
        if (a->mix_cnt) return path; /* the down launch mixed */
    } else if (const int g = cu_launch_moe_grouped(a, s)) {
        path = g == 2 ? CU_MOE_PATH_GROUPED_RS : CU_MOE_PATH_GROUPED;
    } else {
        moe_experts(a, s, false);
    }
    gpu_launch(moe_mix_kernel, dim3((unsigned)GPU_CEIL_DIV(a->n_embd, 256), (unsigned)a->T), dim3(256), 0, s,
        a->Y, a->wts, a->k, a->shared ? a->Ys : NULL, a->sgate ? a->glog : NULL, a->n_embd, a->out, a->res, a->nq);
    return path;
}
