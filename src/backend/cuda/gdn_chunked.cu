/* Chunked Gated DeltaNet prefill (the algorithm of the CPU's gdn_delta_rule_chunked, ops_gdn.c; math in
 * ARCH-QWEN35.md). The batch is cut into chunks of at most CU_GDN_CHUNK rows of one run (consecutive rows of
 * one sequence); cu_batch_set builds the chunk list. Four launches:
 *   1. causal conv + SiLU, one CTA per (128 channels, chunk); the first chunk of a run reads the old conv
 *      state and writes the new one, so no two CTAs touch the same state;
 *   2. L2 norm of every q and k head in place (q also scaled by 1/sqrt(d_k)), sums in double;
 *   3. per (value head, chunk), all in parallel: gates, cumulative log-decay G (double), the masked
 *      matrices A[t][s] = beta_t exp(G_t - G_s) k_t.k_s (s < t) and QK[t][s] = exp(G_t - G_s) q_t.k_s
 *      (s <= t), and the forward substitution (I + A) U = diag(beta) V, (I + A) W = diag(beta exp(G)) K,
 *      one thread per column of [U | W];
 *   4. per (value head, 32 value rows), chunk after chunk in batch order (with a split list, gdn_runs.h: per run,
 *      the runs side by side): Vt = U - W S^T, o = exp(G) Q S^T + QK Vt, S = exp(G_n) S + sum_t exp(G_n - G_t) Vt_t k_t^T.
 * With a split list only the entries [0, a.ch_hi) (the long runs) come here; the recurrent kernels take the rest.
 * The gated RMSNorm follows in the quantize (as for the recurrent kernel). */
#include <math.h>
#include "backend/cuda/cuda_internal.h"
#include "quant/blocks.h"

/* Partial unrolls of loops with run-time trip counts: hipcc (clang) cannot always perform them and warns. */
#if defined(VLLMC_HIP)
#define GDN_UNROLL(n)
#else
#define GDN_UNROLL_STR(x) #x
#define GDN_UNROLL(n) _Pragma(GDN_UNROLL_STR(unroll n))
#endif

#define GDN_DK 128
#define GDN_CT CU_GDN_CHUNK
#define GDN_VR 32 /* value rows (of the state) per CTA of the scan */

static_assert(CU_GDN_CHUNK == 64, "the kernels below are written for chunks of 64 rows");

static __device__ __forceinline__ const int32_t *chunk_at(const struct cu_batch_dev &b, int c) { return b.chunks + 8 * c; }

/* ---- 1. conv ---- */

template <int DC> /* d_conv, or 0: a.d_conv at run time */
static __global__ void gdn_conv_chunk_kernel(struct cu_batch_dev b, struct cu_gdn_args a, int64_t conv_dim) {
    const int64_t ch = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (ch >= conv_dim) return;
    const int32_t *cd = chunk_at(b, blockIdx.y);
    const int t0 = cd[CU_CH_T0], n = cd[CU_CH_N], slot = cd[CU_CH_SLOT], zero = cd[CU_CH_ZERO];
    const int rs = cd[CU_CH_RUN0], rl = cd[CU_CH_RUNLEN], first = cd[CU_CH_FIRST];
    const int dc = DC ? DC : a.d_conv, nh = dc - 1;
    const float *w = a.conv_w + ch * dc;
    float *st = a.conv_state + (int64_t)slot * a.conv_floats + ch * nh;
    float old[8], win[8];
    for (int k = 0; k < nh; k++) old[k] = zero ? 0.f : st[k];
    /* window of the chunk's first row: run-relative positions o - nh .. o - 1 (negative: the old state) */
    const int o0 = t0 - rs;
    for (int k = 0; k < nh; k++) {
        const int tau = o0 - nh + k;
        win[k] = tau >= 0 ? a.in[(int64_t)(rs + tau) * a.ld_in + ch] : old[nh + tau];
    }
    float wk[8];
#pragma unroll
    for (int k = 0; k < (DC ? DC : 8); k++) wk[k] = k <= nh ? w[k] : 0.f;
GDN_UNROLL(4)
    for (int t = 0; t < n; t++) {
        win[nh] = a.in[(int64_t)(t0 + t) * a.ld_in + ch];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < (DC ? DC : 8); k++)
            if (k <= nh) s = __fadd_rn(s, __fmul_rn(win[k], wk[k]));
        a.conv_out[(int64_t)(t0 + t) * conv_dim + ch] = __fdiv_rn(s, __fadd_rn(1.0f, expf(-s)));
#pragma unroll
        for (int k = 0; k < (DC ? DC : 8) - 1; k++)
            if (k < nh) win[k] = win[k + 1];
    }
    if (first) /* the new state: the run's last nh inputs (older ones from the old state) */
        for (int k = 0; k < nh; k++) {
            const int tau = rl - nh + k;
            st[k] = tau >= 0 ? a.in[(int64_t)(rs + tau) * a.ld_in + ch] : old[nh + tau];
        }
}

/* ---- 2. q / k L2 norms ---- */

/* grid (n_tokens, 2 n_k_head), GDN_DK threads; with a split list (a.ch_hi > 0) grid (64 a.ch_hi, 2 n_k_head): the
 * rows of the chunked entries only (the recurrent kernels normalize their own runs' q and k). */
static __global__ void __launch_bounds__(GDN_DK) gdn_qk_norm_kernel(struct cu_batch_dev b, struct cu_gdn_args a, int64_t conv_dim) {
    __shared__ double red[GDN_DK / 32];
    const int h = blockIdx.y, i = threadIdx.x;
    int32_t t;
    if (!gdn_norm_token(b.chunks, a.ch_hi, (int32_t)blockIdx.x, &t)) return;
    float *x = a.conv_out + (int64_t)t * conv_dim + (int64_t)h * GDN_DK;
    const float v = x[i];
    double sq = (double)v * (double)v;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sq += shfl_xor(sq, off);
    if (i % 32 == 0) red[i / 32] = sq;
    __syncthreads();
    double tot = 0.0;
#pragma unroll
    for (int g = 0; g < GDN_DK / 32; g++) tot += red[g];
    const float sc = __fdiv_rn(1.0f, fmaxf(sqrtf((float)tot), a.eps));
    float y = __fmul_rn(v, sc);
    if (h < a.n_k_head) y = __fmul_rn(y, __fdiv_rn(1.0f, sqrtf((float)GDN_DK)));
    x[i] = y;
}

/* ---- 3. per (head, chunk) preparation ---- */

/* Scratch of one (chunk, head): U [64][d_v] | W [64][d_k] | QK [64][64] | A [64][64] | eG [64] | dn [64]. */
static __host__ __device__ __forceinline__ int64_t prep_floats(int dv) {
    return (int64_t)GDN_CT * dv + (int64_t)GDN_CT * GDN_DK + 2 * GDN_CT * GDN_CT + 2 * GDN_CT;
}

int64_t cu_gdn_chunk_scratch_floats(int32_t n_v_head, int32_t d_v, int64_t n_chunks) {
    return prep_floats(d_v) * n_v_head * n_chunks;
}

/* grid (n_v_head, n_chunks), 256 threads (d_v + d_k <= 256 columns in the solve). */
#define PREP_SMEM_BYTES ((GDN_CT * (GDN_DK + 1) + GDN_CT * GDN_DK) * 4)
static __global__ void __launch_bounds__(256) gdn_chunk_prep_kernel(struct cu_batch_dev b, struct cu_gdn_args a, float *scratch) {
    extern __shared__ float4 prep_smem4[];
    float *ks = (float *)prep_smem4;     /* K rows (stride 129: conflict-free column reads); A later */
    float *qs = ks + GDN_CT * (GDN_DK + 1); /* Q rows (broadcast reads) */
    __shared__ double G[GDN_CT];
    __shared__ float beta[GDN_CT], eG[GDN_CT];
    const int m = blockIdx.x, ci = blockIdx.y, tid = threadIdx.x;
    const int32_t *cd = chunk_at(b, ci);
    const int t0 = cd[CU_CH_T0], n = cd[CU_CH_N];
    const int dv = a.d_v, kh = m % a.n_k_head;
    const int64_t key_dim = (int64_t)a.n_k_head * GDN_DK, value_dim = (int64_t)a.n_v_head * dv;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    float *sc = scratch + ((int64_t)ci * a.n_v_head + m) * prep_floats(dv);
    float *U = sc, *W = U + GDN_CT * dv, *QK = W + GDN_CT * GDN_DK, *A = QK + GDN_CT * GDN_CT, *eGo = A + GDN_CT * GDN_CT,
          *dno = eGo + GDN_CT;
    const float *qbase = a.conv_out + (int64_t)t0 * conv_dim + (int64_t)kh * GDN_DK;
    const float *kbase = qbase + key_dim;
    for (int idx = tid; idx < GDN_CT * GDN_DK; idx += blockDim.x) {
        const int t = idx / GDN_DK, i = idx % GDN_DK;
        ks[t * (GDN_DK + 1) + i] = t < n ? kbase[(int64_t)t * conv_dim + i] : 0.f;
        qs[idx] = t < n ? qbase[(int64_t)t * conv_dim + i] : 0.f;
    }
    if (tid < n) { /* gates, as gdn_gates */
        const float *in = a.in + (int64_t)(t0 + tid) * a.ld_in + conv_dim + value_dim;
        const float bv = in[m];
        const float x = __fadd_rn(in[a.n_v_head + m], a.dt_bias[m]);
        const float sp = x > 20.0f ? x : logf(__fadd_rn(1.0f, expf(x)));
        beta[tid] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-bv)));
        eG[tid] = __fmul_rn(sp, a.ssm_a[m]); /* g for now */
    }
    __syncthreads();
    if (tid == 0) {
        double acc = 0.0;
        for (int t = 0; t < GDN_CT; t++) {
            if (t < n) acc += eG[t];
            G[t] = acc;
        }
    }
    __syncthreads();
    if (tid < GDN_CT) {
        eG[tid] = tid < n ? (float)exp(G[tid]) : 0.f;
        if (tid >= n) beta[tid] = 0.f;
        eGo[tid] = eG[tid];
        dno[tid] = tid < n ? (float)exp(G[n - 1] - G[tid]) : 0.f;
    }
    /* A and QK: group w of 32 threads takes rows t = w + 8r, its threads columns s = l and l + 32 */
    const int l = tid % 32, w = tid / 32;
    for (int r = 0; r < GDN_CT / 8; r++) {
        const int t = w + 8 * r;
        float kk0 = 0.f, kk1 = 0.f, qk0 = 0.f, qk1 = 0.f;
        if (t < n) {
            const float *qt = qs + t * GDN_DK;
            const float *kt = ks + t * (GDN_DK + 1), *k0 = ks + l * (GDN_DK + 1), *k1 = ks + (l + 32) * (GDN_DK + 1);
GDN_UNROLL(8)
            for (int i = 0; i < GDN_DK; i++) {
                const float q = qt[i], kv = kt[i], a0 = k0[i], a1 = k1[i];
                kk0 = fmaf(kv, a0, kk0); kk1 = fmaf(kv, a1, kk1);
                qk0 = fmaf(q, a0, qk0); qk1 = fmaf(q, a1, qk1);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int s = l + 32 * h;
            float av = 0.f, qv = 0.f;
            if (t < n && s <= t) {
                const float dec = (float)exp(G[t] - G[s]);
                qv = __fmul_rn(dec, h ? qk1 : qk0);
                if (s < t) av = __fmul_rn(__fmul_rn(beta[t], dec), h ? kk1 : kk0);
            }
            A[t * GDN_CT + s] = av;
            QK[t * GDN_CT + s] = qv;
        }
    }
    __syncthreads();
    float *as = ks; /* K no longer needed in shared memory */
    for (int idx = tid; idx < GDN_CT * GDN_CT; idx += blockDim.x) as[idx] = A[idx];
    __syncthreads();
    /* forward substitution, one column per thread: x_t = init_t - sum_{s<t} A[t][s] x_s */
    if (tid < dv + GDN_DK) {
        const bool is_u = tid < dv;
        const int col = is_u ? tid : tid - dv;
        const float *src = is_u ? a.conv_out + (int64_t)t0 * conv_dim + 2 * key_dim + (int64_t)m * dv + col : kbase + col;
        float *dst = is_u ? U + col : W + col;
        const int ld = is_u ? dv : GDN_DK;
        float x[GDN_CT];
#pragma unroll
        for (int t = 0; t < GDN_CT; t++) {
            float v = 0.f;
            if (t < n) v = __fmul_rn(is_u ? beta[t] : __fmul_rn(beta[t], eG[t]), src[(int64_t)t * conv_dim]);
#pragma unroll
            for (int s = 0; s < t; s++) v = __fadd_rn(v, __fmul_rn(-as[t * GDN_CT + s], x[s]));
            x[t] = v;
            dst[t * ld] = v;
        }
    }
}

/* ---- 4. the scan over chunks ---- */

/* Dynamic shared memory of the scan (floats): the state rows S [32][129], Vt [64][33], eG and dn [64] each, and the
 * chunk's operands staged with coalesced loads: W [64][128], Q [64][128], K [64][128], QK [64][64], U [64][32]. */
#define SCAN_S 0
#define SCAN_VT (SCAN_S + GDN_VR * (GDN_DK + 1))
#define SCAN_EG (SCAN_VT + GDN_CT * (GDN_VR + 1))
#define SCAN_DN (SCAN_EG + GDN_CT)
#define SCAN_W (((SCAN_DN + GDN_CT) + 3) & ~3)
#define SCAN_Q (SCAN_W + GDN_CT * GDN_DK)
#define SCAN_K (SCAN_Q + GDN_CT * GDN_DK)
#define SCAN_QK (SCAN_K + GDN_CT * GDN_DK)
#define SCAN_U (SCAN_QK + GDN_CT * GDN_CT)
#define SCAN_FLOATS (SCAN_U + GDN_CT * GDN_VR)

/* grid (n_v_head, d_v / GDN_VR, a.ch_runs or 1), 256 threads: thread (w = tid / 32, l = tid % 32) owns value row j0 + l and,
 * for the outputs, chunk rows t = w + 8r; for the state update, state columns 16 w .. 16 w + 15. Every read of
 * the staged operands is a broadcast (all l of a group read one address). */
static __global__ void __launch_bounds__(256) gdn_chunk_scan_kernel(struct cu_batch_dev b, struct cu_gdn_args a,
                                                                   const float *scratch) {
    extern __shared__ float4 scan_smem4[];
    float *sm = (float *)scan_smem4;
    float *S = sm + SCAN_S, *Vt = sm + SCAN_VT, *eG = sm + SCAN_EG, *dn = sm + SCAN_DN;
    float *Ws = sm + SCAN_W, *Qs = sm + SCAN_Q, *Ks = sm + SCAN_K, *QKs = sm + SCAN_QK, *Us = sm + SCAN_U;
    const int m = blockIdx.x, j0 = blockIdx.y * GDN_VR, tid = threadIdx.x, l = tid % 32, w = tid / 32;
    const int dv = a.d_v, kh = m % a.n_k_head;
    const int64_t key_dim = (int64_t)a.n_k_head * GDN_DK, value_dim = (int64_t)a.n_v_head * dv;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    int32_t c_lo = 0, c_hi = a.ch_hi > 0 ? a.ch_hi : b.n_chunks;
    if (a.ch_runs > 0) gdn_run_entries(b.chunks, c_hi, (int32_t)blockIdx.z, &c_lo, &c_hi); /* one run a CTA */
    for (int ci = c_lo; ci < c_hi; ci++) {
        const int32_t *cd = chunk_at(b, ci);
        const int t0 = cd[CU_CH_T0], n = cd[CU_CH_N], slot = cd[CU_CH_SLOT];
        const int64_t so = (int64_t)slot * a.ssm_floats + ((int64_t)m * dv + j0) * GDN_DK; /* the state's element offset */
        if (cd[CU_CH_FIRST]) {
            for (int idx = tid; idx < GDN_VR * GDN_DK; idx += blockDim.x) {
                const int j = idx / GDN_DK, i = idx % GDN_DK;
                S[j * (GDN_DK + 1) + i] = cd[CU_CH_ZERO] ? 0.f
                                          : a.ssm_bf16 ? bf16_to_fp32(((const uint16_t *)a.ssm_state)[so + idx])
                                                       : ((const float *)a.ssm_state)[so + idx];
            }
        }
        const float *sc = scratch + ((int64_t)ci * a.n_v_head + m) * prep_floats(dv);
        const float *U = sc, *W = U + GDN_CT * dv, *QK = W + GDN_CT * GDN_DK, *eGi = QK + 2 * GDN_CT * GDN_CT, *dni = eGi + GDN_CT;
        const float *qbase = a.conv_out + (int64_t)t0 * conv_dim + (int64_t)kh * GDN_DK, *kbase = qbase + key_dim;
        /* stage the chunk: rows t >= n of Q and K read as zeros (W, U, QK rows are zero there already) */
GDN_UNROLL(4)
        for (int idx = tid; idx < GDN_CT * GDN_DK / 4; idx += 256) {
            const int t = idx / (GDN_DK / 4), i4 = idx % (GDN_DK / 4);
            ((float4 *)Ws)[idx] = ((const float4 *)W)[idx];
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
            ((float4 *)Qs)[idx] = t < n ? ((const float4 *)(qbase + (int64_t)t * conv_dim))[i4] : z;
            ((float4 *)Ks)[idx] = t < n ? ((const float4 *)(kbase + (int64_t)t * conv_dim))[i4] : z;
        }
GDN_UNROLL(4)
        for (int idx = tid; idx < GDN_CT * GDN_CT / 4; idx += 256) ((float4 *)QKs)[idx] = ((const float4 *)QK)[idx];
        for (int idx = tid; idx < GDN_CT * GDN_VR / 4; idx += 256) {
            const int t = idx / (GDN_VR / 4), j4 = idx % (GDN_VR / 4);
            ((float4 *)Us)[idx] = ((const float4 *)(U + (int64_t)t * dv + j0))[j4];
        }
        if (tid < GDN_CT) { eG[tid] = eGi[tid]; dn[tid] = dni[tid]; }
        __syncthreads();
        /* Vt = U - W S^T and the inter-chunk output exp(G) Q S^T */
        float accv[GDN_CT / 8], acco[GDN_CT / 8];
#pragma unroll
        for (int r = 0; r < GDN_CT / 8; r++) { accv[r] = 0.f; acco[r] = 0.f; }
        const float *srow = S + l * (GDN_DK + 1);
GDN_UNROLL(2)
        for (int i = 0; i < GDN_DK; i += 4) {
            const float s0 = srow[i], s1 = srow[i + 1], s2 = srow[i + 2], s3 = srow[i + 3];
#pragma unroll
            for (int r = 0; r < GDN_CT / 8; r++) {
                const int t = w + 8 * r;
                const float4 wv = *(const float4 *)(Ws + t * GDN_DK + i);
                const float4 qv = *(const float4 *)(Qs + t * GDN_DK + i);
                accv[r] = fmaf(wv.w, s3, fmaf(wv.z, s2, fmaf(wv.y, s1, fmaf(wv.x, s0, accv[r]))));
                acco[r] = fmaf(qv.w, s3, fmaf(qv.z, s2, fmaf(qv.y, s1, fmaf(qv.x, s0, acco[r]))));
            }
        }
#pragma unroll
        for (int r = 0; r < GDN_CT / 8; r++) {
            const int t = w + 8 * r;
            Vt[t * (GDN_VR + 1) + l] = __fsub_rn(Us[t * GDN_VR + l], accv[r]);
            acco[r] = __fmul_rn(eG[t], acco[r]);
        }
        __syncthreads();
        /* intra-chunk output (QK is zero above the diagonal and on rows >= n): the 8 rows as independent sums */
GDN_UNROLL(4)
        for (int s2 = 0; s2 < n; s2++) {
            const float v = Vt[s2 * (GDN_VR + 1) + l];
#pragma unroll
            for (int r = 0; r < GDN_CT / 8; r++) acco[r] = fmaf(QKs[(w + 8 * r) * GDN_CT + s2], v, acco[r]);
        }
#pragma unroll
        for (int r = 0; r < GDN_CT / 8; r++)
            if (w + 8 * r < n) a.out[(int64_t)(t0 + w + 8 * r) * value_dim + (int64_t)m * dv + j0 + l] = acco[r];
        /* state carry: S = exp(G_n) S + sum_t (dn_t Vt_t) k_t */
        const float eGn = eG[n - 1];
        float acc[16];
#pragma unroll
        for (int e = 0; e < 16; e++) acc[e] = __fmul_rn(S[l * (GDN_DK + 1) + 16 * w + e], eGn);
GDN_UNROLL(4)
        for (int t = 0; t < n; t++) {
            const float cf = __fmul_rn(dn[t], Vt[t * (GDN_VR + 1) + l]);
            const float4 *kp = (const float4 *)(Ks + t * GDN_DK + 16 * w);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float4 kv = kp[q];
                acc[4 * q] = fmaf(cf, kv.x, acc[4 * q]); acc[4 * q + 1] = fmaf(cf, kv.y, acc[4 * q + 1]);
                acc[4 * q + 2] = fmaf(cf, kv.z, acc[4 * q + 2]); acc[4 * q + 3] = fmaf(cf, kv.w, acc[4 * q + 3]);
            }
        }
#pragma unroll
        for (int e = 0; e < 16; e++) S[l * (GDN_DK + 1) + 16 * w + e] = acc[e];
        if (cd[CU_CH_LAST] && a.ssm_bf16) { /* rounded to nearest even, as the CPU backend stores it */
            uint16_t *hp = (uint16_t *)a.ssm_state + so + (int64_t)l * GDN_DK + 16 * w;
#pragma unroll
            for (int q = 0; q < 4; q++)
                *(uint2 *)(hp + 4 * q) = bf16x4_pack(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
        } else if (cd[CU_CH_LAST]) {
            float *sp = (float *)a.ssm_state + so + (int64_t)l * GDN_DK + 16 * w;
#pragma unroll
            for (int q = 0; q < 4; q++)
                *(float4 *)(sp + 4 * q) = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
        }
        __syncthreads(); /* S, Vt, the staged operands are rewritten by the next chunk */
    }
}

bool cu_gdn_chunked_ready(void) {
    static int ok = -1;
    if (ok < 0)
        ok = gpuFuncSetMaxDynamicSmem((const void *)gdn_chunk_prep_kernel, PREP_SMEM_BYTES) == gpuSuccess &&
             gpuFuncSetMaxDynamicSmem((const void *)gdn_chunk_scan_kernel, SCAN_FLOATS * 4) == gpuSuccess;
    if (!ok) (void)gpuGetLastError();
    return ok;
}

void cu_launch_gdn_chunked(const struct cu_batch_dev *b, const struct cu_gdn_args *a, float *scratch, gpuStream_t s) {
    const int32_t nc = a->ch_hi > 0 ? a->ch_hi : b->n_chunks; /* entries [0, nc): a split list's long runs, or all */
    if (nc <= 0) return;
    const int64_t conv_dim = 2 * (int64_t)a->n_k_head * a->d_k + (int64_t)a->n_v_head * a->d_v;
    const dim3 cg((unsigned)GPU_CEIL_DIV(conv_dim, 128), (unsigned)nc);
    if (a->d_conv == 4) gdn_conv_chunk_kernel<4><<<cg, 128, 0, s>>>(*b, *a, conv_dim);
    else gdn_conv_chunk_kernel<0><<<cg, 128, 0, s>>>(*b, *a, conv_dim);
    const unsigned nq_rows = a->ch_hi > 0 ? (unsigned)nc * GDN_CT : (unsigned)b->n_tokens;
    gdn_qk_norm_kernel<<<dim3(nq_rows, (unsigned)(2 * a->n_k_head)), GDN_DK, 0, s>>>(*b, *a, conv_dim);
    gdn_chunk_prep_kernel<<<dim3((unsigned)a->n_v_head, (unsigned)nc), 256, PREP_SMEM_BYTES, s>>>(*b, *a, scratch);
    const unsigned runs = a->ch_runs > 0 ? (unsigned)a->ch_runs : 1u;
    gdn_chunk_scan_kernel<<<dim3((unsigned)a->n_v_head, (unsigned)(a->d_v / GDN_VR), runs), 256, SCAN_FLOATS * 4, s>>>(*b, *a, scratch);
}
