/* Prefill attention: one CTA per (chunk of up to 64 rows of one sequence, query head), a flash-attention loop
 * over the sequence's cached positions in tiles of 32 (after the KV store of the split-K path). The chunk's
 * queries sit in shared memory; each K/V tile is read once from the paged pool (f32 or f16) into shared
 * memory, then S = Q K^T for 64 x 32 (each thread 2 queries x 4 positions), the online softmax per query row
 * (one thread per row), and O += P V (each thread 8 queries x head_dim/32 dims in registers). All math in
 * f32; any cache type of kv_access.h; with an f16 cache q is rounded to f16 first (as the split-K kernel and the
 * CPU do), fp8 scales are applied as the split-K kernel applies them. */
#include <math.h>
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/kv_access.h"
#include "quant/blocks.h"

#define AP_Q 64  /* query rows per CTA (= CU_GDN_CHUNK, the chunk list's unit) */
#define AP_KT 32 /* positions per tile */

static_assert(AP_Q == CU_GDN_CHUNK, "one CTA per chunk");

template <int HD> struct ap_layout {
    static constexpr int ld_k = HD + 4; /* K rows padded: the 8 positions a quarter-warp reads hit distinct banks */
    static constexpr int q = 0;
    static constexpr int k = q + AP_Q * HD;
    static constexpr int v = k + AP_KT * ld_k;
    static constexpr int s = v + AP_KT * HD;
    static constexpr int corr = s + AP_Q * (AP_KT + 1);
    static constexpr int l = corr + AP_Q;
    static constexpr int floats = l + AP_Q;
};

template <int HD>
static __global__ void __launch_bounds__(256) attn_prefill_kernel(struct cu_batch_dev b, struct cu_attn_args a) {
    typedef ap_layout<HD> L;
    extern __shared__ float4 ap_smem4[];
    float *sm = (float *)ap_smem4;
    float *Qs = sm + L::q, *Ks = sm + L::k, *Vs = sm + L::v, *Ss = sm + L::s, *corr = sm + L::corr, *lsum = sm + L::l;
    const int32_t *cd = b.chunks + 8 * blockIdx.x;
    const int t0 = cd[CU_CH_T0], n = cd[CU_CH_N];
    const int j = blockIdx.y, tid = threadIdx.x, kvh = j / (a.n_head / a.n_kv_head);
    const int32_t *bt = b.bt + b.seqinfo[4 * b.seq[t0]];
    const int32_t n_ctx = b.pos[t0 + n - 1] + 1;
    const bool f16 = a.dtype == BK_KV_F16;
    const float score_mul = __fmul_rn(a.k_scale, a.scale); /* fp8: K = code * k_scale, folded into the scale */
    /* queries (rows >= n: zeros) */
    for (int idx = tid; idx < AP_Q * HD / 4; idx += 256) {
        const int r = idx / (HD / 4), c4 = idx % (HD / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < n) {
            v = *(const float4 *)(a.q + (int64_t)(t0 + r) * a.ld_q + (int64_t)j * HD + 4 * c4);
            if (f16) {
                v.x = fp16_to_fp32(fp32_to_fp16(v.x)); v.y = fp16_to_fp32(fp32_to_fp16(v.y));
                v.z = fp16_to_fp32(fp32_to_fp16(v.z)); v.w = fp16_to_fp32(fp32_to_fp16(v.w));
            }
        }
        ((float4 *)Qs)[idx] = v;
    }
    /* per-row state of the online softmax (threads < AP_Q) */
    float m_row = -INFINITY, l_row = 0.f;
    /* S mapping: rows 2 sq, 2 sq + 1; positions sp + 8 k */
    const int sq = tid / 8, spp = tid % 8;
    const int pos0 = sq * 2 < n ? b.pos[t0 + 2 * sq] : -1, pos1 = sq * 2 + 1 < n ? b.pos[t0 + 2 * sq + 1] : -1;
    /* O mapping: rows 8 oq .. 8 oq + 7; dims 4 od + 128 c (c < HD / 128) */
    constexpr int NC = HD / 128;
    const int oq = tid / 32, od = tid % 32;
    /* rows past the chunk's n are never stored: a warp whose 8 rows (the same 8 in the S and the O mapping) all lie
     * past n skips its scores, softmax rows and P V, so a short run (a decode token of a mixed step: n = 1) costs an
     * eighth of a full chunk's arithmetic. Each kept row's operations are unchanged (the same bits). */
    const bool live = 8 * oq < n;
    float acc[8][4 * NC];
#pragma unroll
    for (int r = 0; r < 8; r++)
#pragma unroll
        for (int e = 0; e < 4 * NC; e++) acc[r][e] = 0.f;

    for (int tau0 = 0; tau0 < n_ctx; tau0 += AP_KT) {
        __syncthreads(); /* the previous tile's K, V, S are consumed */
        /* K and V tile: position tau0 + p, HD elements each, from the paged pool */
        for (int idx = tid; idx < AP_KT * HD / 8; idx += 256) {
            const int p = idx / (HD / 8), c8 = idx % (HD / 8), tau = tau0 + p;
            float kv[8], vv[8];
            if (tau < n_ctx) {
                const size_t base = (((size_t)bt[tau / BK_KV_BLOCK] * a.n_kv_head + kvh) * BK_KV_BLOCK + tau % BK_KV_BLOCK) * HD + 8 * c8;
                kv_load<8>(a.kpool, a.dtype, base, kv);
                kv_load<8>(a.vpool, a.dtype, base, vv);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) { kv[e] = 0.f; vv[e] = 0.f; }
            }
            float4 *kd = (float4 *)(Ks + p * L::ld_k + 8 * c8), *vd = (float4 *)(Vs + p * HD + 8 * c8);
            kd[0] = make_float4(kv[0], kv[1], kv[2], kv[3]); kd[1] = make_float4(kv[4], kv[5], kv[6], kv[7]);
            vd[0] = make_float4(vv[0], vv[1], vv[2], vv[3]); vd[1] = make_float4(vv[4], vv[5], vv[6], vv[7]);
        }
        __syncthreads();
        /* scores */
        if (live) {
            float d[2][4];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int k = 0; k < 4; k++) d[r][k] = 0.f;
            const float *q0 = Qs + (2 * sq) * HD, *q1 = q0 + HD;
#pragma unroll 4
            for (int i = 0; i < HD; i += 4) {
                const float4 a0 = *(const float4 *)(q0 + i), a1 = *(const float4 *)(q1 + i);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float4 kk = *(const float4 *)(Ks + (spp + 8 * k) * L::ld_k + i);
                    d[0][k] = fmaf(a0.w, kk.w, fmaf(a0.z, kk.z, fmaf(a0.y, kk.y, fmaf(a0.x, kk.x, d[0][k]))));
                    d[1][k] = fmaf(a1.w, kk.w, fmaf(a1.z, kk.z, fmaf(a1.y, kk.y, fmaf(a1.x, kk.x, d[1][k]))));
                }
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int tau = tau0 + spp + 8 * k;
                Ss[(2 * sq) * (AP_KT + 1) + spp + 8 * k] = tau <= pos0 ? __fmul_rn(d[0][k], score_mul) : -INFINITY;
                Ss[(2 * sq + 1) * (AP_KT + 1) + spp + 8 * k] = tau <= pos1 ? __fmul_rn(d[1][k], score_mul) : -INFINITY;
            }
        }
        __syncthreads();
        /* online softmax, one thread per row */
        if (tid < AP_Q && 8 * (tid / 8) < n) {
            float *srow = Ss + tid * (AP_KT + 1);
            float mx = m_row;
            for (int p = 0; p < AP_KT; p++) mx = fmaxf(mx, srow[p]);
            float c = 1.f, sum = 0.f;
            if (mx == -INFINITY) {
                for (int p = 0; p < AP_KT; p++) srow[p] = 0.f;
            } else {
                c = expf(m_row - mx);
                for (int p = 0; p < AP_KT; p++) {
                    const float e = expf(srow[p] - mx);
                    srow[p] = e;
                    sum += e;
                }
            }
            l_row = l_row * c + sum;
            m_row = mx;
            corr[tid] = c;
        }
        __syncthreads();
        /* O = O * corr + P V */
        if (!live) continue;
#pragma unroll
        for (int r = 0; r < 8; r++) {
            const float c = corr[8 * oq + r];
#pragma unroll
            for (int e = 0; e < 4 * NC; e++) acc[r][e] *= c;
        }
        const int np = min(AP_KT, n_ctx - tau0);
        for (int p = 0; p < np; p++) {
            float4 vv[NC];
#pragma unroll
            for (int cc = 0; cc < NC; cc++) vv[cc] = *(const float4 *)(Vs + p * HD + 4 * od + 128 * cc);
#pragma unroll
            for (int r = 0; r < 8; r++) {
                const float pr = Ss[(8 * oq + r) * (AP_KT + 1) + p];
#pragma unroll
                for (int cc = 0; cc < NC; cc++) {
                    acc[r][4 * cc] = fmaf(pr, vv[cc].x, acc[r][4 * cc]);
                    acc[r][4 * cc + 1] = fmaf(pr, vv[cc].y, acc[r][4 * cc + 1]);
                    acc[r][4 * cc + 2] = fmaf(pr, vv[cc].z, acc[r][4 * cc + 2]);
                    acc[r][4 * cc + 3] = fmaf(pr, vv[cc].w, acc[r][4 * cc + 3]);
                }
            }
        }
    }
    if (tid < AP_Q) lsum[tid] = l_row;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const int row = 8 * oq + r;
        if (row >= n) continue;
        const float inv = __fmul_rn(1.0f / lsum[row], a.v_scale); /* fp8: V = code * v_scale */
        float *o = a.out + ((int64_t)(t0 + row) * a.n_head + j) * HD;
#pragma unroll
        for (int cc = 0; cc < NC; cc++)
            *(float4 *)(o + 4 * od + 128 * cc) = make_float4(acc[r][4 * cc] * inv, acc[r][4 * cc + 1] * inv, acc[r][4 * cc + 2] * inv,
                                                           acc[r][4 * cc + 3] * inv);
    }
}

bool cu_attn_prefill_ready(int head_dim) {
    static int ok128 = -1, ok256 = -1;
    if (head_dim == 128) {
        if (ok128 < 0) ok128 = gpuFuncSetMaxDynamicSmem((const void *)attn_prefill_kernel<128>, ap_layout<128>::floats * 4) == gpuSuccess;
        if (!ok128) (void)gpuGetLastError();
        return ok128;
    }
    if (head_dim == 256) {
        if (ok256 < 0) ok256 = gpuFuncSetMaxDynamicSmem((const void *)attn_prefill_kernel<256>, ap_layout<256>::floats * 4) == gpuSuccess;
        if (!ok256) (void)gpuGetLastError();
        return ok256;
    }
    return false;
}

void cu_launch_attention_prefill(const struct cu_batch_dev *b, const struct cu_attn_args *a, gpuStream_t s) {
    cu_launch_kv_store(b, a, s);
    const dim3 g((unsigned)b->n_chunks, (unsigned)a->n_head);
    if (a->head_dim == 128) attn_prefill_kernel<128><<<g, 256, ap_layout<128>::floats * 4, s>>>(*b, *a);
    else attn_prefill_kernel<256><<<g, 256, ap_layout<256>::floats * 4, s>>>(*b, *a);
}
