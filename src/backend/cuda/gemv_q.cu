/* Quantized mat-vec for decode: one warp per weight row; lanes split the row into fixed units
 * (a 64-element chunk of a Q4_K super-block, a 32-element slice of a Q6_K super-block, a Q8_0 block).
 * Integer partial sums are exact (dp4a) and are reduced across the lanes of one super-block with
 * integer shuffles before the single float combination per super-block, so the float work matches
 * the CPU reference per super-block; only the final sum over super-blocks is ordered differently. */
#include "backend/cuda/gpu_compat.h"
#include "backend/cuda/gemv_q.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define GEMV_WARPS 4 /* warps (rows) per CTA */

static __device__ __forceinline__ int ld_i32_u16(const uint8_t *p) { /* 2-byte aligned 4-byte load */
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

static __device__ __forceinline__ float half_bits_to_float(uint16_t h) { return fp16_to_fp32(h); }

/* ggml's nearest_int: round half to even through the 1.5 * 2^23 trick; no FMA contraction. */
static __device__ __forceinline__ int nearest_int_dev(float v) {
    float t = __fadd_rn(v, 12582912.f);
    return (__float_as_int(t) & 0x007fffff) - 0x00400000;
}

/* ---- activation quantizers ---- */

/* One warp per 256-element super-block; lane l holds elements 8l .. 8l+7. */
static __global__ void quantize_q8_K_warp_per_block(const float *x, int8_t *qs, float *d_out, int16_t *bsums,
                                                    int64_t n_sb) {
    const int lane = threadIdx.x % 32; /* 32-lane groups on every target (butterflies below stay inside) */
    const int64_t sb = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (sb >= n_sb) return;
    const float *xb = x + sb * QK_K;
    float v[8];
    float amax = 0.f, vmax = 0.f;
    int imax = 0;
    for (int k = 0; k < 8; k++) {
        v[k] = xb[lane * 8 + k];
        float ax = fabsf(v[k]);
        if (ax > amax) { amax = ax; vmax = v[k]; imax = lane * 8 + k; }
    }
    if (amax == 0.f) imax = 1 << 30;
    /* the element of largest magnitude; ties go to the lowest index, as the sequential scan does */
    for (int off = 16; off > 0; off >>= 1) {
        float oa = shfl_xor(amax, off);
        float ov = shfl_xor(vmax, off);
        int oi = shfl_xor(imax, off);
        if (oa > amax || (oa == amax && oi < imax)) { amax = oa; vmax = ov; imax = oi; }
    }
    if (amax == 0.f) {
        for (int k = 0; k < 8; k++) qs[sb * QK_K + lane * 8 + k] = 0;
        if (lane < 16) bsums[sb * 16 + lane] = 0;
        if (lane == 0) d_out[sb] = 0.f;
        return;
    }
    const float iscale = -127.f / vmax;
    int sum = 0;
    char4 packed[2];
    int8_t *pk = (int8_t *)packed;
    for (int k = 0; k < 8; k++) {
        int q = nearest_int_dev(__fmul_rn(iscale, v[k]));
        q = q > 127 ? 127 : q;
        pk[k] = (int8_t)q;
        sum += q;
    }
    *(int2 *)(qs + sb * QK_K + lane * 8) = *(int2 *)packed;
    /* lanes 2j and 2j+1 together hold the 16 elements of bsums[j] */
    sum += shfl_xor(sum, 1);
    if ((lane & 1) == 0) bsums[sb * 16 + lane / 2] = (int16_t)sum;
    if (lane == 0) d_out[sb] = 1.f / iscale;
}

/* One warp per 32-element block, one element per lane. */
static __global__ void quantize_q8_0_warp_per_block(const float *x, int8_t *qs, uint16_t *d_out, int64_t n_blk) {
    const int lane = threadIdx.x % 32; /* 32-element blocks: one element per lane of a 32-lane group */
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blk) return;
    const float v = x[b * 32 + lane];
    float amax = fabsf(v);
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, shfl_xor(amax, off));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    qs[b * 32 + lane] = (int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0) d_out[b] = fp32_to_fp16(d);
}

/* ---- mat-vec kernels ---- */

/* Q4_K x Q8_K. Unit u = (super-block u/4, 64-element chunk u%4): 32 bytes of quants, 64 activations. */
static __global__ void gemv_q4_K_warp_per_row(const uint8_t *w, size_t row_bytes, int n_sb, int64_t n_rows,
                                              const int8_t *aq, const float *ad, const int16_t *abs, float *out) {
    const int lane = threadIdx.x;
    const int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.y;
    if (row >= n_rows) return;
    const uint8_t *wr = w + row * row_bytes;
    const int n_units = n_sb * 4;
    float acc = 0.f;
    for (int base = 0; base < n_units; base += VLLMC_WARP_SIZE) {
        const int u = base + lane;
        int I = 0, M = 0;
        int sb = u >> 2, c = u & 3;
        if (u < n_units) {
            const block_q4_K *b = (const block_q4_K *)(wr + (size_t)sb * sizeof(block_q4_K));
            const uint4 q0 = *(const uint4 *)(b->qs + 32 * c);
            const uint4 q1 = *(const uint4 *)(b->qs + 32 * c + 16);
            const int8_t *a = aq + (int64_t)sb * QK_K + 64 * c;
            const int4 a0 = *(const int4 *)(a), a1 = *(const int4 *)(a + 16);
            const int4 a2 = *(const int4 *)(a + 32), a3 = *(const int4 *)(a + 48);
            const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            const int alo[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const int ahi[8] = {a2.x, a2.y, a2.z, a2.w, a3.x, a3.y, a3.z, a3.w};
            int s_lo = 0, s_hi = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                s_lo = dot4_i8((int)(qw[k] & 0x0F0F0F0Fu), alo[k], s_lo);
                s_hi = dot4_i8((int)((qw[k] >> 4) & 0x0F0F0F0Fu), ahi[k], s_hi);
            }
            const uint8_t *S = b->scales;
            const int j0 = 2 * c, j1 = 2 * c + 1;
            int sc0, m0, sc1, m1;
            if (j0 < 4) { sc0 = S[j0] & 63; m0 = S[j0 + 4] & 63; }
            else { sc0 = (S[j0 + 4] & 15) | ((S[j0 - 4] >> 6) << 4); m0 = (S[j0 + 4] >> 4) | ((S[j0] >> 6) << 4); }
            if (j1 < 4) { sc1 = S[j1] & 63; m1 = S[j1 + 4] & 63; }
            else { sc1 = (S[j1 + 4] & 15) | ((S[j1 - 4] >> 6) << 4); m1 = (S[j1 + 4] >> 4) | ((S[j1] >> 6) << 4); }
            const int16_t *bs = abs + (int64_t)sb * 16 + 4 * c;
            I = sc0 * s_lo + sc1 * s_hi;
            M = m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
        }
        /* the four chunks of a super-block sit in lanes 4k..4k+3 */
        I += shfl_xor(I, 1);
        I += shfl_xor(I, 2);
        M += shfl_xor(M, 1);
        M += shfl_xor(M, 2);
        if (u < n_units && c == 0) {
            const block_q4_K *b = (const block_q4_K *)(wr + (size_t)sb * sizeof(block_q4_K));
            const float da = ad[sb];
            acc += da * (half_bits_to_float(b->d) * (float)I) - da * (half_bits_to_float(b->dmin) * (float)M);
        }
    }
    acc = warp_reduce_sum(acc);
    if (lane == 0) out[row] = acc;
}

/* Q6_K x Q8_K. Unit u = (super-block u/8, half h = (u/4)%2, quarter q = u%4): elements with
 * l in [8q, 8q+8) of all four 32-groups of half h. Blocks are 210 bytes: 2-byte aligned loads. */
static __global__ void gemv_q6_K_warp_per_row(const uint8_t *w, size_t row_bytes, int n_sb, int64_t n_rows,
                                              const int8_t *aq, const float *ad, float *out) {
    const int lane = threadIdx.x;
    const int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.y;
    if (row >= n_rows) return;
    const uint8_t *wr = w + row * row_bytes;
    const int n_units = n_sb * 8;
    float acc = 0.f;
    for (int base = 0; base < n_units; base += VLLMC_WARP_SIZE) {
        const int u = base + lane;
        int I = 0;
        const int sb = u >> 3, h = (u >> 2) & 1, q = u & 3;
        if (u < n_units) {
            const block_q6_K *b = (const block_q6_K *)(wr + (size_t)sb * sizeof(block_q6_K));
            const uint8_t *ql = b->ql + 64 * h + 8 * q;
            const uint8_t *qh = b->qh + 32 * h + 8 * q;
            const int8_t *a = aq + (int64_t)sb * QK_K + 128 * h + 8 * q;
#pragma unroll
            for (int half = 0; half < 2; half++) { /* 4 elements at a time: l = 8q + 4*half .. +3 */
                const uint32_t l0 = (uint32_t)ld_i32_u16(ql + 4 * half);       /* groups 0 (lo) and 2 (hi) */
                const uint32_t l1 = (uint32_t)ld_i32_u16(ql + 32 + 4 * half);  /* groups 1 (lo) and 3 (hi) */
                const uint32_t hh = (uint32_t)ld_i32_u16(qh + 4 * half);
                const uint32_t v0 = (l0 & 0x0F0F0F0Fu) | ((hh << 4) & 0x30303030u);
                const uint32_t v1 = (l1 & 0x0F0F0F0Fu) | ((hh << 2) & 0x30303030u);
                const uint32_t v2 = ((l0 >> 4) & 0x0F0F0F0Fu) | (hh & 0x30303030u);
                const uint32_t v3 = ((l1 >> 4) & 0x0F0F0F0Fu) | ((hh >> 2) & 0x30303030u);
                const uint32_t vs[4] = {v0, v1, v2, v3};
#pragma unroll
                for (int g = 0; g < 4; g++) {
                    /* q - 32 in each byte (q in 0..63): set bit 7 so no byte borrows, subtract, flip bit 7 back */
                    const int qv = (int)(((vs[g] | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
                    const int av = *(const int *)(a + 32 * g + 4 * half);
                    const int s = dot4_i8(qv, av, 0);
                    I += (int)b->scales[8 * h + 2 * g + (q >> 1)] * s;
                }
            }
        }
        I += shfl_xor(I, 1);
        I += shfl_xor(I, 2);
        I += shfl_xor(I, 4);
        if (u < n_units && (u & 7) == 0) {
            const block_q6_K *b = (const block_q6_K *)(wr + (size_t)sb * sizeof(block_q6_K));
            acc += half_bits_to_float(b->d) * ad[sb] * (float)I;
        }
    }
    acc = warp_reduce_sum(acc);
    if (lane == 0) out[row] = acc;
}

/* Q8_0 x Q8_0: one 32-element block per lane per step. */
static __global__ void gemv_q8_0_warp_per_row(const uint8_t *w, size_t row_bytes, int n_blk, int64_t n_rows,
                                              const int8_t *aq, const uint16_t *ad, float *out) {
    const int lane = threadIdx.x;
    const int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.y;
    if (row >= n_rows) return;
    const uint8_t *wr = w + row * row_bytes;
    float acc = 0.f;
    for (int ib = lane; ib < n_blk; ib += VLLMC_WARP_SIZE) {
        const block_q8_0 *b = (const block_q8_0 *)(wr + (size_t)ib * sizeof(block_q8_0));
        const int8_t *a = aq + (int64_t)ib * 32;
        const int4 a0 = *(const int4 *)a, a1 = *(const int4 *)(a + 16);
        const int av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        int s = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) s = dot4_i8(ld_i32_u16((const uint8_t *)b->qs + 4 * k), av[k], s);
        acc += (float)s * (half_bits_to_float(b->d) * half_bits_to_float(ad[ib]));
    }
    acc = warp_reduce_sum(acc);
    if (lane == 0) out[row] = acc;
}

/* ---- C entry points ---- */

static vllmc_status check_launch(const char *what) {
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) {
        fprintf(stderr, "vllmc: %s launch failed: %s\n", what, gpuGetErrorString(e));
        return VLLMC_ERR_INVALID;
    }
    return VLLMC_OK;
}

extern "C" size_t gpu_qact_bytes(int64_t n) {
    return (size_t)n + 4 * (size_t)(n / QK_K) + 2 * (size_t)(n / 16) + 2 * (size_t)(n / 32) + 64;
}

extern "C" void gpu_qact_init(struct gpu_qact *a, void *buf, int64_t n) {
    uint8_t *p = (uint8_t *)buf;
    a->n = n;
    a->qs = (int8_t *)p;
    p += (n + 15) & ~(int64_t)15;
    a->d_k = (float *)p;
    p += 4 * (n / QK_K);
    a->bsums = (int16_t *)p;
    p += 2 * (n / 16);
    a->d_0 = (uint16_t *)p;
}

extern "C" vllmc_status gpu_quantize_q8_K(const float *x, struct gpu_qact *a, void *stream) {
    if (a->n % QK_K) return VLLMC_ERR_UNSUPPORTED;
    const int64_t n_sb = a->n / QK_K;
    const int warps = 4;
    quantize_q8_K_warp_per_block<<<GPU_CEIL_DIV(n_sb, warps), warps * 32, 0, (gpuStream_t)stream>>>(
        x, a->qs, a->d_k, a->bsums, n_sb);
    return check_launch("quantize_q8_K");
}

extern "C" vllmc_status gpu_quantize_q8_0(const float *x, struct gpu_qact *a, void *stream) {
    if (a->n % 32) return VLLMC_ERR_UNSUPPORTED;
    const int64_t n_blk = a->n / 32;
    const int warps = 8;
    quantize_q8_0_warp_per_block<<<GPU_CEIL_DIV(n_blk, warps), warps * 32, 0, (gpuStream_t)stream>>>(
        x, a->qs, a->d_0, n_blk);
    return check_launch("quantize_q8_0");
}

extern "C" vllmc_status gpu_gemv_q(uint32_t wtype, const void *w, size_t row_bytes, int64_t n_cols, int64_t n_rows,
                                   const struct gpu_qact *a, float *out, void *stream) {
    if (n_cols != a->n || quant_row_size(wtype, n_cols) != row_bytes || n_rows <= 0) return VLLMC_ERR_INVALID;
    const dim3 block(VLLMC_WARP_SIZE, GEMV_WARPS);
    const dim3 grid((unsigned)GPU_CEIL_DIV(n_rows, GEMV_WARPS));
    const uint8_t *wb = (const uint8_t *)w;
    gpuStream_t s = (gpuStream_t)stream;
    switch (wtype) {
    case GGML_TYPE_Q4_K:
        if (row_bytes % 16 || (uintptr_t)w % 16) return VLLMC_ERR_UNSUPPORTED;
        gemv_q4_K_warp_per_row<<<grid, block, 0, s>>>(wb, row_bytes, (int)(n_cols / QK_K), n_rows, a->qs, a->d_k,
                                                      a->bsums, out);
        return check_launch("gemv_q4_K");
    case GGML_TYPE_Q6_K:
        if ((uintptr_t)w % 2) return VLLMC_ERR_UNSUPPORTED;
        gemv_q6_K_warp_per_row<<<grid, block, 0, s>>>(wb, row_bytes, (int)(n_cols / QK_K), n_rows, a->qs, a->d_k, out);
        return check_launch("gemv_q6_K");
    case GGML_TYPE_Q8_0:
        if ((uintptr_t)w % 2) return VLLMC_ERR_UNSUPPORTED;
        gemv_q8_0_warp_per_row<<<grid, block, 0, s>>>(wb, row_bytes, (int)(n_cols / 32), n_rows, a->qs, a->d_0, out);
        return check_launch("gemv_q8_0");
    default:
        return VLLMC_ERR_UNSUPPORTED;
    }
}
