/* Quantized matrix-vector products and the activation quantizers that feed them (layouts in
 * cuda_internal.h).
 *
 * matmul: one warp per weight row, up to CU_MM_MAX_SEG weights (q/k/v, gate/up, ...) in one launch.
 * A warp step covers 512 contiguous bytes of quants: 4 Q4_K/Q6_K super-blocks (8 lanes x 16 bytes each)
 * or 16 Q8_0 blocks (2 lanes each). Two steps' loads are issued before their math. The integer sums of
 * a super-block (block) are reduced with integer shuffles, the float term is formed exactly as the CPU
 * reference forms it (no FMA contraction), and the terms are added in the reference's order, so every
 * output equals vec_dot_ref bit for bit. NA activation rows share each weight load (prefill). */
#include <string.h>
#include "backend/cuda/cuda_internal.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define MM_UNROLL 2

static inline uint64_t pad16(uint64_t x) { return (x + 15) & ~(uint64_t)15; }

uint64_t cu_weight_row_stride(uint32_t type, int64_t n) {
    if (n <= 0) return 0;
    switch (type) {
    case GGML_TYPE_Q4_K: return n % QK_K ? 0 : 128 * (uint64_t)(n / QK_K) + pad16(12 * (uint64_t)(n / QK_K)) + pad16(4 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q6_K: return n % QK_K ? 0 : 208 * (uint64_t)(n / QK_K) + pad16(2 * (uint64_t)(n / QK_K));
    case GGML_TYPE_Q8_0: return n % 32 ? 0 : 32 * (uint64_t)(n / 32) + pad16(2 * (uint64_t)(n / 32));
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
        m.k_bs = (int16_t *)(m.k_d + R * (n / QK_K));
    }
    if (a->q[BK_ACT_Q8_0]) {
        m.o_qs = (int8_t *)a->q[BK_ACT_Q8_0];
        m.o_d = (uint16_t *)(m.o_qs + R * n);
    }
    m.h = (uint16_t *)a->q[BK_ACT_F16];
    m.bf = (uint16_t *)a->q[BK_ACT_BF16];
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * Activation quantizers (device): exact ports of quantize_row_q8_K / quantize_row_q8_0.
 * ------------------------------------------------------------------------------------------- */

/* ggml's nearest_int: round half to even through the 1.5 * 2^23 trick; no FMA contraction. */
static __device__ __forceinline__ int nearest_int_dev(float v) {
    float t = __fadd_rn(v, 12582912.f);
    return (__float_as_int(t) & 0x007fffff) - 0x00400000;
}

/* One 32-lane group quantizes 256 elements at xb; lane l holds elements 8l .. 8l+7. */
static __device__ void quant_q8_K_sb(const float *xb, int8_t *qs, float *d_out, int16_t *bsums, int lane) {
    float v[8];
    float amax = 0.f, vmax = 0.f;
    int imax = 1 << 30;
    const float4 v0 = *(const float4 *)(xb + lane * 8), v1 = *(const float4 *)(xb + lane * 8 + 4);
    v[0] = v0.x; v[1] = v0.y; v[2] = v0.z; v[3] = v0.w; v[4] = v1.x; v[5] = v1.y; v[6] = v1.z; v[7] = v1.w;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float ax = fabsf(v[k]);
        if (ax > amax) { amax = ax; vmax = v[k]; imax = lane * 8 + k; }
    }
    /* the element of largest magnitude; ties go to the lowest index, as the sequential scan does */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float oa = shfl_xor(amax, off);
        float ov = shfl_xor(vmax, off);
        int oi = shfl_xor(imax, off);
        if (oa > amax || (oa == amax && oi < imax)) { amax = oa; vmax = ov; imax = oi; }
    }
    if (amax == 0.f) {
        *(int2 *)(qs + lane * 8) = make_int2(0, 0);
        if (lane < 16) bsums[lane] = 0;
        if (lane == 0) *d_out = 0.f;
        return;
    }
    const float iscale = __fdiv_rn(-127.f, vmax);
    int sum = 0;
    int packed[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int q = nearest_int_dev(__fmul_rn(iscale, v[k]));
        q = q > 127 ? 127 : q;
        packed[k / 4] |= (q & 0xff) << (8 * (k % 4));
        sum += q;
    }
    *(int2 *)(qs + lane * 8) = make_int2(packed[0], packed[1]);
    sum += shfl_xor(sum, 1); /* lanes 2j and 2j+1 hold the 16 elements of bsums[j] */
    if ((lane & 1) == 0) bsums[lane / 2] = (int16_t)sum;
    if (lane == 0) *d_out = __fdiv_rn(1.f, iscale);
}

/* One 32-lane group quantizes a 32-element block: one element per lane. */
static __device__ void quant_q8_0_blk(const float *xb, int8_t *qs, uint16_t *d_out, int lane) {
    const float v = xb[lane];
    float amax = fabsf(v);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, shfl_xor(amax, off));
    const float d = __fdiv_rn(amax, 127.f);
    const float id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
    qs[lane] = (int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0) *d_out = fp32_to_fp16(d);
}

#define NQ_THREADS 256

/* One CTA per row: the row's f32 values (normed / gated / as is) into out.x, then every format. */
static __global__ void __launch_bounds__(NQ_THREADS) norm_quant_kernel(int mode, const float *in0, const float *in1,
                                                                        int64_t ld, const float *w, float eps,
                                                                        struct cu_act_mut out, uint32_t fmts) {
    const int64_t r = blockIdx.x, n = out.n;
    const int tid = threadIdx.x, lane = tid % 32, grp = tid / 32, n_grp = NQ_THREADS / 32;
    float *xr = out.x + r * n;
    if (mode == CU_NQ_RMSNORM) {
        __shared__ double red[NQ_THREADS / 32];
        const float *x = in0 + r * n;
        double sum = 0.0;
        for (int64_t i = tid; i < n; i += NQ_THREADS) sum += (double)__fmul_rn(x[i], x[i]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) sum += shfl_xor(sum, off);
        if (lane == 0) red[grp] = sum;
        __syncthreads();
        double tot = 0.0;
        for (int g = 0; g < n_grp; g++) tot += red[g];
        const float scale = __fdiv_rn(1.0f, sqrtf((float)(tot / (double)n + (double)eps)));
        for (int64_t i = tid; i < n; i += NQ_THREADS) {
            const float v = __fmul_rn(x[i], scale);
            xr[i] = w ? __fmul_rn(v, w[i]) : v;
        }
    } else if (mode == CU_NQ_SWIGLU) {
        const float *g = in0 + r * ld, *u = in1 + r * ld;
        for (int64_t i = tid; i < n; i += NQ_THREADS) {
            const float gv = g[i];
            xr[i] = __fmul_rn(__fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv))), u[i]);
        }
    }
    __syncthreads();
    if ((fmts & BK_ACT_BIT(BK_ACT_Q8_K)) && out.k_qs) {
        const int64_t ns = n / QK_K;
        for (int64_t s = grp; s < ns; s += n_grp)
            quant_q8_K_sb(xr + s * QK_K, out.k_qs + r * n + s * QK_K, out.k_d + r * ns + s, out.k_bs + r * (n / 16) + s * 16,
                          lane);
    }
    if ((fmts & BK_ACT_BIT(BK_ACT_Q8_0)) && out.o_qs) {
        const int64_t nb = n / 32;
        for (int64_t b = grp; b < nb; b += n_grp)
            quant_q8_0_blk(xr + b * 32, out.o_qs + r * n + b * 32, out.o_d + r * nb + b, lane);
    }
    if ((fmts & BK_ACT_BIT(BK_ACT_F16)) && out.h)
        for (int64_t i = tid; i < n; i += NQ_THREADS) out.h[r * n + i] = fp32_to_fp16(xr[i]);
    if ((fmts & BK_ACT_BIT(BK_ACT_BF16)) && out.bf)
        for (int64_t i = tid; i < n; i += NQ_THREADS) out.bf[r * n + i] = fp32_to_bf16(xr[i]);
}

void cu_launch_norm_quant(int mode, const float *in0, const float *in1, int64_t ld, const float *w, float eps,
                          int64_t n_rows, struct cu_act_mut out, uint32_t fmts, gpuStream_t s) {
    if (n_rows <= 0) return;
    norm_quant_kernel<<<(unsigned)n_rows, NQ_THREADS, 0, s>>>(mode, in0, in1, ld, w, eps, out, fmts);
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

/* Sequential accumulation of the 4 super-block terms of one warp step (lanes 0, 8, 16, 24) into lane 0. */
static __device__ __forceinline__ void acc_sb4(float &acc, float t, int sb0, int n_sb) {
#pragma unroll
    for (int g = 0; g < 4; g++) {
        const float tg = shfl_idx(t, 8 * g);
        if (sb0 + g < n_sb) acc = __fadd_rn(acc, tg);
    }
}

template <int NA>
static __device__ void row_q4_K(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 3, j = lane & 7, c = j >> 1, h = j & 1;
    const uint8_t *scb = wr + 128 * (size_t)n_sb;
    const uint8_t *dmb = scb + ((12 * (size_t)n_sb + 15) & ~(size_t)15);
    const int n_steps = (n_sb + 3) / 4;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL) {
        uint4 q[MM_UNROLL];
        uint32_t sw[MM_UNROLL][3], dm[MM_UNROLL];
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int sb = 4 * (st0 + u) + g;
            if (sb < n_sb) {
                q[u] = gpu_ldg((const uint4 *)(wr + 128 * (size_t)sb + 16 * j));
                const uint32_t *sp = (const uint32_t *)(scb + 12 * (size_t)sb);
                sw[u][0] = gpu_ldg(sp); sw[u][1] = gpu_ldg(sp + 1); sw[u][2] = gpu_ldg(sp + 2);
                dm[u] = gpu_ldg((const uint32_t *)(dmb + 4 * (size_t)sb));
            } else {
                q[u] = make_uint4(0, 0, 0, 0); sw[u][0] = sw[u][1] = sw[u][2] = 0; dm[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int st = st0 + u;
            if (st >= n_steps) break;
            const int sb = 4 * st + g;
            const bool ok = sb < n_sb;
            int sc0, m0, sc1, m1;
            k4_scale_min(2 * c, sw[u][0], sw[u][1], sw[u][2], sc0, m0);
            k4_scale_min(2 * c + 1, sw[u][0], sw[u][1], sw[u][2], sc1, m1);
            const uint32_t qw[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
            const float d = fp16_to_fp32((uint16_t)(dm[u] & 0xffff)), dmin = fp16_to_fp32((uint16_t)(dm[u] >> 16));
#pragma unroll
            for (int r = 0; r < NA; r++) {
                int I = 0, M = 0;
                float da = 0.f;
                if (ok && r < na) {
                    const int64_t ar = a0 + r;
                    const int8_t *aq = a.k_qs + ar * a.n + (int64_t)sb * QK_K + 64 * c + 16 * h;
                    const int4 alo = *(const int4 *)aq, ahi = *(const int4 *)(aq + 32);
                    const int al[4] = {alo.x, alo.y, alo.z, alo.w}, ah[4] = {ahi.x, ahi.y, ahi.z, ahi.w};
                    int slo = 0, shi = 0;
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        slo = dot4_i8((int)(qw[k] & 0x0F0F0F0Fu), al[k], slo);
                        shi = dot4_i8((int)((qw[k] >> 4) & 0x0F0F0F0Fu), ah[k], shi);
                    }
                    const int16_t *bs = a.k_bs + ar * (a.n / 16) + (int64_t)sb * 16;
                    I = sc0 * slo + sc1 * shi;
                    M = m0 * (int)bs[4 * c + h] + m1 * (int)bs[4 * c + 2 + h];
                    da = a.k_d[ar * (a.n / QK_K) + sb];
                }
                I += shfl_xor(I, 1); I += shfl_xor(I, 2); I += shfl_xor(I, 4);
                M += shfl_xor(M, 1); M += shfl_xor(M, 2); M += shfl_xor(M, 4);
                const float t = term_kmin(da, d, dmin, I, M);
                acc_sb4(acc[r], t, 4 * st, n_sb);
            }
        }
    }
}

template <int NA>
static __device__ void row_q6_K(const uint8_t *wr, int n_sb, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 3, j = lane & 7, h = j >> 2, k = j & 3;
    const uint8_t *qhb = wr + 128 * (size_t)n_sb, *scb = qhb + 64 * (size_t)n_sb, *db = scb + 16 * (size_t)n_sb;
    const int n_steps = (n_sb + 3) / 4;
    const int sh_lo = 2 * (k >> 1), sh_hi = 4 + 2 * (k >> 1);
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL) {
        uint4 ql[MM_UNROLL], qh[MM_UNROLL];
        int scw[MM_UNROLL];
        uint16_t dd[MM_UNROLL];
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int sb = 4 * (st0 + u) + g;
            if (sb < n_sb) {
                ql[u] = gpu_ldg((const uint4 *)(wr + 128 * (size_t)sb + 64 * h + 16 * k));
                qh[u] = gpu_ldg((const uint4 *)(qhb + 64 * (size_t)sb + 32 * h + 16 * (k & 1)));
                const int8_t *sc = (const int8_t *)(scb + 16 * (size_t)sb);
                scw[u] = ((int)(uint8_t)sc[8 * h + k]) | ((int)(uint8_t)sc[8 * h + 4 + k] << 8);
                dd[u] = gpu_ldg((const unsigned short *)(db + 2 * (size_t)sb));
            } else {
                ql[u] = qh[u] = make_uint4(0, 0, 0, 0); scw[u] = 0; dd[u] = 0;
            }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int st = st0 + u;
            if (st >= n_steps) break;
            const int sb = 4 * st + g;
            const bool ok = sb < n_sb;
            const uint32_t L[4] = {ql[u].x, ql[u].y, ql[u].z, ql[u].w}, H[4] = {qh[u].x, qh[u].y, qh[u].z, qh[u].w};
            int vlo[4], vhi[4];
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const uint32_t lo = (L[w] & 0x0F0F0F0Fu) | (((H[w] >> sh_lo) & 0x03030303u) << 4);
                const uint32_t hi = ((L[w] >> 4) & 0x0F0F0F0Fu) | (((H[w] >> sh_hi) & 0x03030303u) << 4);
                /* q - 32 in each byte (q in 0..63): set bit 7 so no byte borrows, subtract, flip bit 7 back */
                vlo[w] = (int)(((lo | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
                vhi[w] = (int)(((hi | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
            }
            const int sc_lo = (int)(int8_t)(scw[u] & 0xff), sc_hi = (int)(int8_t)((scw[u] >> 8) & 0xff);
            const float d = fp16_to_fp32(dd[u]);
#pragma unroll
            for (int r = 0; r < NA; r++) {
                int I = 0;
                float da = 0.f;
                if (ok && r < na) {
                    const int64_t ar = a0 + r;
                    const int8_t *aq = a.k_qs + ar * a.n + (int64_t)sb * QK_K + 128 * h + 16 * k;
                    const int4 alo = *(const int4 *)aq, ahi = *(const int4 *)(aq + 64);
                    const int al[4] = {alo.x, alo.y, alo.z, alo.w}, ah[4] = {ahi.x, ahi.y, ahi.z, ahi.w};
                    int slo = 0, shi = 0;
#pragma unroll
                    for (int w = 0; w < 4; w++) {
                        slo = dot4_i8(vlo[w], al[w], slo);
                        shi = dot4_i8(vhi[w], ah[w], shi);
                    }
                    I = sc_lo * slo + sc_hi * shi;
                    da = a.k_d[ar * (a.n / QK_K) + sb];
                }
                I += shfl_xor(I, 1); I += shfl_xor(I, 2); I += shfl_xor(I, 4);
                const float t = term_k(da, d, I);
                acc_sb4(acc[r], t, 4 * st, n_sb);
            }
        }
    }
}

/* Q8_0: block b of a step is lane pair b % 16; p[b % 8] partials live in lanes 0, 2, .., 14. */
template <int NA>
static __device__ void row_q8_0(const uint8_t *wr, int n_b, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    const int g = lane >> 1, j = lane & 1;
    const uint8_t *db = wr + 32 * (size_t)n_b;
    const int n_steps = (n_b + 15) / 16;
    float p[NA];
#pragma unroll
    for (int r = 0; r < NA; r++) p[r] = 0.f;
    for (int st0 = 0; st0 < n_steps; st0 += MM_UNROLL) {
        uint4 q[MM_UNROLL];
        uint16_t dw[MM_UNROLL];
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int b = 16 * (st0 + u) + g;
            if (b < n_b) {
                q[u] = gpu_ldg((const uint4 *)(wr + 32 * (size_t)b + 16 * j));
                dw[u] = gpu_ldg((const unsigned short *)(db + 2 * (size_t)b));
            } else { q[u] = make_uint4(0, 0, 0, 0); dw[u] = 0; }
        }
#pragma unroll
        for (int u = 0; u < MM_UNROLL; u++) {
            const int st = st0 + u;
            if (st >= n_steps) break;
            const int b = 16 * st + g;
            const bool ok = b < n_b;
            const int qw[4] = {(int)q[u].x, (int)q[u].y, (int)q[u].z, (int)q[u].w};
            const float d = fp16_to_fp32(dw[u]);
#pragma unroll
            for (int r = 0; r < NA; r++) {
                int I = 0;
                float da = 0.f;
                if (ok && r < na) {
                    const int64_t ar = a0 + r;
                    const int4 av = *(const int4 *)(a.o_qs + ar * a.n + 32 * (int64_t)b + 16 * j);
                    I = dot4_i8(qw[0], av.x, I); I = dot4_i8(qw[1], av.y, I);
                    I = dot4_i8(qw[2], av.z, I); I = dot4_i8(qw[3], av.w, I);
                    da = fp16_to_fp32(a.o_d[ar * (a.n / 32) + b]);
                }
                I += shfl_xor(I, 1);
                const float t = __fmul_rn(__fmul_rn(d, da), (float)I);
                const float t8 = shfl_xor(t, 16); /* block b + 8 of this step, for lanes 0..15 */
                if (lane < 16 && (lane & 1) == 0) {
                    if (ok) p[r] = __fadd_rn(p[r], t);
                    if (b + 8 < n_b) p[r] = __fadd_rn(p[r], t8);
                }
            }
        }
    }
    /* dot_reduce8 over lanes 0, 2, .., 14: ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)) */
#pragma unroll
    for (int r = 0; r < NA; r++) {
        float v = p[r];
        v = __fadd_rn(v, shfl_xor(v, 8));
        v = __fadd_rn(v, shfl_xor(v, 4));
        v = __fadd_rn(v, shfl_xor(v, 2));
        acc[r] = v;
    }
}

/* F32 weights x f32 activations: p[i % 32] in lane i % 32, then dot_reduce32 as butterflies. */
template <int NA>
static __device__ void row_f32(const float *wr, int n, const cu_act_view &a, int a0, int na, float *acc, int lane) {
    float p[NA];
#pragma unroll
    for (int r = 0; r < NA; r++) p[r] = 0.f;
    for (int i = lane; i < n; i += 32) {
        const float wv = gpu_ldg(wr + i);
#pragma unroll
        for (int r = 0; r < NA; r++)
            if (r < na) p[r] = __fadd_rn(p[r], __fmul_rn(wv, a.x[(int64_t)(a0 + r) * a.n + i]));
    }
#pragma unroll
    for (int r = 0; r < NA; r++) {
        float v = p[r];
        v = __fadd_rn(v, shfl_xor(v, 8));
        v = __fadd_rn(v, shfl_xor(v, 16));
        v = __fadd_rn(v, shfl_xor(v, 4));
        v = __fadd_rn(v, shfl_xor(v, 2));
        v = __fadd_rn(v, shfl_xor(v, 1));
        acc[r] = v;
    }
}

/* 32-lane groups: on wave64 targets each half-wave does its own row. */
template <int NA>
static __global__ void __launch_bounds__(32 * CU_MM_WARPS) mm_kernel(const struct cu_mm_args P) {
    const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    /* groups of NA activation rows vary fastest, so the CTAs reading one weight slice run together */
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
    const uint8_t *wr = S.w + (size_t)row * S.stride;
    float acc[NA];
#pragma unroll
    for (int r = 0; r < NA; r++) acc[r] = 0.f;
    const int n = (int)P.a.n;
    switch (S.type) {
    case GGML_TYPE_Q4_K: row_q4_K<NA>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q6_K: row_q6_K<NA>(wr, n / QK_K, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_Q8_0: row_q8_0<NA>(wr, n / 32, P.a, a0, na, acc, lane); break;
    case GGML_TYPE_F32: row_f32<NA>((const float *)wr, n, P.a, a0, na, acc, lane); break;
    default: break;
    }
    if (lane == 0)
        for (int r = 0; r < na; r++) {
            float y = acc[r];
            if (S.bias) y = __fadd_rn(y, S.bias[row]);
            S.y[(int64_t)(a0 + r) * S.ld_y + row] = y;
        }
}

void cu_launch_matmul(const struct cu_mm_args *args, gpuStream_t s) {
    if (args->n_act <= 0 || args->n_ctas <= 0) return;
    if (args->n_act == 1) {
        mm_kernel<1><<<(unsigned)args->n_ctas, 32 * CU_MM_WARPS, 0, s>>>(*args);
    } else {
        const int groups = (args->n_act + 7) / 8;
        mm_kernel<8><<<(unsigned)(args->n_ctas * groups), 32 * CU_MM_WARPS, 0, s>>>(*args);
    }
}
