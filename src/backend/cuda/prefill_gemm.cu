/* Prefill matmuls through the dense f16 GEMM (gpu_gemm.h): the kernels around it. A weight of a repacked
 * quant type (cuda_internal.h) is dequantized to f16 rows in a scratch buffer, the f32 activation rows are
 * converted to f16 once per matmul call, the GEMM writes f32 outputs, and the bias (if any) is added after.
 * Each dequantized element is f16(A*q - B) with A, B formed in f32 exactly as the CPU's dequantizer forms
 * them (quant/dequant.c), so it equals the f16 rounding of the CPU's value bit for bit. */
#include "backend/cuda/cuda_internal.h"
#include "quant/blocks.h"
#include "quant/quant.h"

/* Round to nearest even f32 -> f16 bits (hardware conversion). */
static __device__ __forceinline__ uint32_t f16_bits(float f) {
#if defined(VLLMC_HIP)
    _Float16 h = (_Float16)f;
    uint16_t u;
    __builtin_memcpy(&u, &h, 2);
    return u;
#else
    uint16_t u;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(u) : "f"(f));
    return u;
#endif
}

static __device__ __forceinline__ float half_at(const uint8_t *p) { return fp16_to_fp32((uint16_t)(p[0] | (p[1] << 8))); }

/* Eight consecutive elements e0 .. e0+7 (e0 % 8 == 0) of one repacked row of n columns, as f16 bits packed
 * two to a word. 32-bit index math (a row is at most 2^31 elements). */
static __device__ __forceinline__ uint4 dequant8_f16(const uint8_t *row, uint32_t type, int n, int e0) {
    float y[8];
    if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) { /* Q5_K: the 5th bit (bit sub of qh[l % 32]) from the 32 qh
                                                              bytes after the quants, the scales after those */
        const bool q5 = type == GGML_TYPE_Q5_K;
        const int ns = n / QK_K, s = e0 / QK_K;
        const int i = e0 % QK_K, c = i / 64, l = i % 64, sub = i / 32;
        const uint2 qw = *(const uint2 *)(row + 128 * s + 32 * c + (l % 32));
        const uint2 hw = q5 ? *(const uint2 *)(row + 128 * ns + 32 * s + (l % 32)) : make_uint2(0, 0);
        const int sc_off = (q5 ? 160 : 128) * ns;
        const uint8_t *S = row + sc_off + 12 * s;
        const uint8_t *dm = row + sc_off + ((12 * ns + 15) & ~15) + 4 * s;
        int sc, m;
        if (sub < 4) { sc = S[sub] & 63; m = S[sub + 4] & 63; }
        else { sc = (S[sub + 4] & 15) | ((S[sub - 4] >> 6) << 4); m = (S[sub + 4] >> 4) | ((S[sub] >> 6) << 4); }
        const uint32_t dmw = *(const uint32_t *)dm;
        const float a = __fmul_rn(fp16_to_fp32((uint16_t)(dmw & 0xffff)), (float)sc);
        const float bm = __fmul_rn(fp16_to_fp32((uint16_t)(dmw >> 16)), (float)m);
        const int shift = l < 32 ? 0 : 4;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t w = k < 4 ? qw.x : qw.y, h = k < 4 ? hw.x : hw.y;
            const int q = (int)((w >> (8 * (k % 4) + shift)) & 15) | (int)(((h >> (8 * (k % 4) + sub)) & 1) << 4);
            y[k] = __fsub_rn(__fmul_rn(a, (float)q), bm);
        }
    } else if (type == GGML_TYPE_IQ4_XS) { /* d * (scale - 32) * kvalues_iq4nl[q] (quant/dequant.c dequant_iq4_xs) */
        const int ns = n / QK_K, s = e0 / QK_K;
        const int i = e0 % QK_K, b = i / 32, j0 = i % 32;
        const uint2 qw = *(const uint2 *)(row + 128 * s + 16 * b + (j0 % 16));
        const uint32_t dh = *(const uint32_t *)(row + 128 * ns + ((4 * ns + 15) & ~15) + 4 * s);
        const int ls = (((row[128 * ns + 4 * s + b / 2] >> (4 * (b % 2))) & 15) | (int)(((dh >> (16 + 2 * b)) & 3) << 4)) - 32;
        const float a = __fmul_rn(fp16_to_fp32((uint16_t)(dh & 0xffff)), (float)ls);
        const int shift = j0 < 16 ? 0 : 4;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t w = k < 4 ? qw.x : qw.y;
            y[k] = __fmul_rn(a, (float)iq4nl_value((int)((w >> (8 * (k % 4) + shift)) & 15)));
        }
    } else if (type == GGML_TYPE_Q6_K) {
        const int ns = n / QK_K, s = e0 / QK_K;
        const int i = e0 % QK_K, h = i / 128, g = (i % 128) / 32, l = i % 32;
        const uint2 lw = *(const uint2 *)(row + 128 * s + 64 * h + 32 * (g % 2) + l);
        const uint2 hw = *(const uint2 *)(row + 128 * ns + 64 * s + 32 * h + l);
        const int8_t sc = (int8_t)row[192 * ns + 16 * s + i / 16];
        const float a = __fmul_rn(half_at(row + 208 * ns + 2 * s), (float)sc);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t lo8 = (k < 4 ? lw.x : lw.y) >> (8 * (k % 4)), hi8 = (k < 4 ? hw.x : hw.y) >> (8 * (k % 4));
            const int lo = (int)((lo8 >> (4 * (g / 2))) & 15), hi = (int)((hi8 >> (2 * g)) & 3);
            y[k] = __fmul_rn(a, (float)((lo | (hi << 4)) - 32));
        }
    } else if (type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q3_K) { /* element i of a super-block: 2 bits (shift 2g) of
        qs byte 32h + l (h = i / 128, g = i % 128 / 32, l = i % 32), scale i / 16; Q3_K: -4 where bit 4h + g of hmask[l] is clear */
        const bool q3 = type == GGML_TYPE_Q3_K;
        const int ns = n / QK_K, s = e0 / QK_K;
        const int i = e0 % QK_K, h = i / 128, g = (i % 128) / 32, l = i % 32, j = i / 16;
        const uint2 qw = *(const uint2 *)(row + 64 * s + 32 * h + l);
        float a, bm = 0.f;
        uint2 hw = make_uint2(0, 0);
        if (q3) {
            hw = *(const uint2 *)(row + 64 * ns + 32 * s + l);
            a = __fmul_rn(half_at(row + 96 * ns + ((12 * ns + 15) & ~15) + 2 * s), (float)q3k_scale(row + 96 * ns + 12 * s, j));
        } else {
            const int sc = row[64 * ns + 16 * s + j];
            const uint8_t *dm = row + 80 * ns + 4 * s;
            a = __fmul_rn(half_at(dm), (float)(sc & 15));
            bm = __fmul_rn(half_at(dm + 2), (float)(sc >> 4));
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int q = (int)(((k < 4 ? qw.x : qw.y) >> (8 * (k % 4) + 2 * g)) & 3);
            if (q3) {
                if (!((((k < 4 ? hw.x : hw.y) >> (8 * (k % 4))) >> (4 * h + g)) & 1)) q -= 4;
                y[k] = __fmul_rn(a, (float)q);
            } else {
                y[k] = __fsub_rn(__fmul_rn(a, (float)q), bm);
            }
        }
    } else if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) { /* F16: the words as they are; BF16: exact in f32, then
                                                                       rounded to f16 */
        const uint4 v = *(const uint4 *)(row + 2 * (size_t)e0);
        if (type == GGML_TYPE_F16) return v;
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = __uint_as_float(((w[k / 2] >> (16 * (k % 2))) & 0xffff) << 16);
    } else if (type == GGML_TYPE_Q8_0) {
        const int nb = n / 32, b = e0 / 32;
        const uint2 qw = *(const uint2 *)(row + e0);
        const float d = half_at(row + 32 * nb + 2 * b);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = __fmul_rn((float)(int8_t)(((k < 4 ? qw.x : qw.y) >> (8 * (k % 4))) & 0xff), d);
    } else if (type == GGML_TYPE_MXFP4) { /* kvalues_mxfp4[q] * 2^(e - 128) (quant/dequant.c dequant_mxfp4): Q4_0's nibbles,
                                             then the byte e of each block */
        const int nb = n / 32, b = e0 / 32;
        const int j0 = e0 % 32, shift = j0 < 16 ? 0 : 4;
        const uint2 qw = *(const uint2 *)(row + 16 * b + j0 % 16);
        const float d = e8m0_half(row[16 * nb + b]);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = __fmul_rn((float)mxfp4_value((int)(((k < 4 ? qw.x : qw.y) >> (8 * (k % 4) + shift)) & 15)), d);
    } else { /* Q4_0, Q5_0, IQ4_NL, Q4_1, Q5_1: element j of a block is nibble (j < 16 ? low : high) of byte j % 16 */
        const int nb = n / 32, b = e0 / 32;
        const int j0 = e0 % 32, l0 = j0 % 16, shift = j0 < 16 ? 0 : 4;
        const uint2 qw = *(const uint2 *)(row + 16 * b + l0);
        const bool q5 = type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1, mn = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
        uint32_t hbits = 0;
        float d, m = 0.f;
        const uint8_t *dp = row + 16 * nb + (q5 ? ((4 * nb + 15) & ~15) : 0) + (mn ? 4 : 2) * b;
        if (q5) {
            const uint8_t *qh = row + 16 * nb + 4 * b;
            hbits = (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
        }
        d = half_at(dp);
        if (mn) m = half_at(dp + 2);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int q = (int)(((k < 4 ? qw.x : qw.y) >> (8 * (k % 4) + shift)) & 15);
            if (type == GGML_TYPE_IQ4_NL) {
                y[k] = __fmul_rn(d, (float)iq4nl_value(q));
                continue;
            }
            if (q5) q |= (int)(((hbits >> (j0 + k)) & 1u) << 4);
            if (mn) { /* d * q + m (dequant_q4_1 / dequant_q5_1) */
                y[k] = __fadd_rn(__fmul_rn((float)q, d), m);
                continue;
            }
            q -= type == GGML_TYPE_Q5_0 ? 16 : 8;
            y[k] = __fmul_rn((float)q, d);
        }
    }
    return make_uint4(f16_bits(y[0]) | (f16_bits(y[1]) << 16), f16_bits(y[2]) | (f16_bits(y[3]) << 16),
                      f16_bits(y[4]) | (f16_bits(y[5]) << 16), f16_bits(y[6]) | (f16_bits(y[7]) << 16));
}

/* grid (ceil(n / 8 / 256), rows in slices of 65535): one thread per 8 outputs, consecutive threads of a row write
 * consecutive 16-byte words; the type is a template parameter so each kernel holds one decoder. */
template <uint32_t TYPE>
static __global__ void __launch_bounds__(256) dequant_f16_kernel(const uint8_t *w, uint64_t stride, int n, int r0, uint4 *out) {
    const int g = blockIdx.x * 256 + threadIdx.x, r = r0 + blockIdx.y;
    if (g >= n / 8) return;
    out[(int64_t)r * (n / 8) + g] = dequant8_f16(w + (uint64_t)r * stride, TYPE, n, 8 * g);
}

bool cu_dequant_f16_type(uint32_t type) {
    return type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K || type == GGML_TYPE_IQ4_XS ||
           type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q2_K ||
           type == GGML_TYPE_Q3_K || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_IQ4_NL ||
           type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_MXFP4;
}

void cu_launch_dequant_f16(const uint8_t *w, uint32_t type, uint64_t stride, int64_t n_cols, int64_t n_rows, uint16_t *out,
                           gpuStream_t s) {
    if (n_cols <= 0 || n_rows <= 0 || n_cols > INT32_MAX) return;
    const unsigned bx = (unsigned)GPU_CEIL_DIV(n_cols / 8, 256);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 65535) {
        const dim3 grid(bx, (unsigned)(n_rows - r0 < 65535 ? n_rows - r0 : 65535));
        switch (type) {
        case GGML_TYPE_Q4_K: dequant_f16_kernel<GGML_TYPE_Q4_K><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q5_K: dequant_f16_kernel<GGML_TYPE_Q5_K><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q6_K: dequant_f16_kernel<GGML_TYPE_Q6_K><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_IQ4_XS: dequant_f16_kernel<GGML_TYPE_IQ4_XS><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q8_0: dequant_f16_kernel<GGML_TYPE_Q8_0><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q4_0: dequant_f16_kernel<GGML_TYPE_Q4_0><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q5_0: dequant_f16_kernel<GGML_TYPE_Q5_0><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q4_1: dequant_f16_kernel<GGML_TYPE_Q4_1><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q5_1: dequant_f16_kernel<GGML_TYPE_Q5_1><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_IQ4_NL: dequant_f16_kernel<GGML_TYPE_IQ4_NL><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_MXFP4: dequant_f16_kernel<GGML_TYPE_MXFP4><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q2_K: dequant_f16_kernel<GGML_TYPE_Q2_K><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_Q3_K: dequant_f16_kernel<GGML_TYPE_Q3_K><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_F16: dequant_f16_kernel<GGML_TYPE_F16><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        case GGML_TYPE_BF16: dequant_f16_kernel<GGML_TYPE_BF16><<<grid, 256, 0, s>>>(w, stride, (int)n_cols, (int)r0, (uint4 *)out); break;
        default: return;
        }
    }
}

/* f32 rows (stride ld) -> packed f16 rows of n (n % 4 == 0), four elements a thread. */
static __global__ void f32_to_f16_kernel(const float *x, int64_t ld, int64_t n, int64_t n_rows, uint2 *out) {
    const int64_t quads = n / 4, total = quads * n_rows;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / quads, c = (i % quads) * 4;
        const float4 v = *(const float4 *)(x + r * ld + c);
        out[i] = make_uint2(f16_bits(v.x) | (f16_bits(v.y) << 16), f16_bits(v.z) | (f16_bits(v.w) << 16));
    }
}

void cu_launch_f32_to_f16(const float *x, int64_t ld, int64_t n_cols, int64_t n_rows, uint16_t *out, gpuStream_t s) {
    const int64_t total = n_cols / 4 * n_rows;
    if (total <= 0) return;
    const int64_t blocks = GPU_CEIL_DIV(total, 256);
    f32_to_f16_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(x, ld, n_cols, n_rows, (uint2 *)out);
}

/* Quantized rows -> packed f16 rows of their values d * q (the product rounded to f32, then to f16), four
 * elements a thread. dk: the Q8_K super-block scales (256 a row block), else d0: the Q8_0 block scales (32). */
static __global__ void q8_to_f16_kernel(const int8_t *qs, const float *dk, const uint16_t *d0, int64_t n, int64_t n_rows, uint2 *out) {
    const int64_t quads = n / 4, total = quads * n_rows;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / quads, c = (i % quads) * 4;
        const float d = dk ? dk[r * (n / 256) + c / 256] : fp16_to_fp32(d0[r * (n / 32) + c / 32]);
        const char4 q = *(const char4 *)(qs + r * n + c);
        out[i] = make_uint2(f16_bits(__fmul_rn(d, (float)q.x)) | (f16_bits(__fmul_rn(d, (float)q.y)) << 16),
                            f16_bits(__fmul_rn(d, (float)q.z)) | (f16_bits(__fmul_rn(d, (float)q.w)) << 16));
    }
}

void cu_launch_q8_to_f16(const struct cu_act_view *a, int fmt, int64_t n_cols, int64_t n_rows, uint16_t *out, gpuStream_t s) {
    const int64_t total = n_cols / 4 * n_rows;
    if (total <= 0) return;
    const int64_t blocks = GPU_CEIL_DIV(total, 256);
    const bool k = fmt == BK_ACT_Q8_K;
    q8_to_f16_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(k ? a->k_qs : a->o_qs, k ? a->k_d : NULL,
                                                                                k ? NULL : a->o_d, n_cols, n_rows, (uint2 *)out);
}

static __global__ void add_bias_kernel(float *y, int64_t ld, const float *bias, int64_t n) {
    float *row = y + blockIdx.y * ld;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < n; c += (int64_t)gridDim.x * blockDim.x)
        row[c] = __fadd_rn(row[c], bias[c]);
}

void cu_launch_add_bias(float *y, int64_t ld, const float *bias, int64_t n_rows, int64_t n_cols, gpuStream_t s) {
    if (n_rows <= 0 || n_cols <= 0) return;
    const int64_t bx = GPU_CEIL_DIV(n_cols, 256);
    add_bias_kernel<<<dim3((unsigned)(bx < 64 ? bx : 64), (unsigned)n_rows), 256, 0, s>>>(y, ld, bias, n_cols);
}
