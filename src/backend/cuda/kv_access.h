/* KV-cache element access for the CUDA kernels: every attention kernel (decode split-K, prefill) stores and
 * loads cache elements through these helpers, so a KV dtype lives in one place. Element types are the
 * bk_kv_dtype values (backend.h): f32, f16, bf16 and fp8 e4m3 (OCP E4M3FN).
 *
 * Stores match the CPU backend's byte for byte: f16 and bf16 by the conversions of quant/blocks.h, fp8 as
 * e4m3(x / scale) with the division rounded (not a multiply by the inverse), round to nearest even,
 * saturated to +-448, NaN to 0x7F with the sign of x (kv_dtype.c's bk_fp8_e4m3_from_f32, ported below).
 * Loads return the stored value itself: for fp8 the code's value WITHOUT the scale; the kernels apply the
 * per-layer scales where the CPU does (k_scale on the score, v_scale on the probability). */
#ifndef VLLMC_CUDA_KV_ACCESS_H
#define VLLMC_CUDA_KV_ACCESS_H

#include "backend/cuda/gpu_compat.h"
#include "quant/blocks.h"
extern "C" {
#include "backend/backend.h"
}

/* Round-to-nearest-even e4m3 code of x (saturating), as bk_fp8_e4m3_from_f32. */
static __device__ __forceinline__ uint8_t kv_fp8_encode(float x) {
    const uint32_t u = __float_as_uint(x);
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7f);          /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7e);         /* >= 448 (and inf): saturate */
    if (a < 0x3c800000u) {                                       /* < 2^-6: subnormal codes 0..8 */
        const float s = __fmul_rn(__uint_as_float(a), 512.0f);   /* exact: units of 2^-9, in [0, 8) */
        const uint32_t su = __float_as_uint(s);
        if (su < 0x3f000000u) return (uint8_t)sign;              /* < 0.5 (and the 0.5 tie to even 0) */
        const int e = (int)(su >> 23) - 127;                     /* -1 .. 2 */
        const uint32_t mant = (su & 0x7fffffu) | 0x800000u;
        const int sh = 23 - e;
        uint32_t q = mant >> sh;
        const uint32_t rem = mant & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint8_t)(sign | q);
    }
    const uint32_t e = (a >> 23) - 127 + 7;                      /* 1 .. 15 */
    const uint32_t m = a & 0x7fffffu;
    uint32_t code = (e << 3) | (m >> 20);
    const uint32_t rem = m & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (code & 1))) code++;
    if (code > 0x7e) code = 0x7e;
    return (uint8_t)(sign | code);
}

/* The value of an e4m3 code (bk_fp8_e4m3_table's): the 7 magnitude bits placed at the top of an f32
 * mantissa/exponent and rescaled by 2^120 (exact, subnormal codes included); 0x7F / 0xFF are NaN. */
static __device__ __forceinline__ float kv_fp8_decode(uint32_t c) {
    const uint32_t mag = c & 0x7fu;
    const float v = __fmul_rn(__uint_as_float(mag << 20), 1.329227995784916e36f); /* 2^120 */
    const float r = mag == 0x7fu ? __uint_as_float(0x7fc00000u) : v;
    return (c & 0x80u) ? -r : r;
}

/* Bytes of one element of a pool (the prefetch of rows). */
static __device__ __forceinline__ int kv_elem_bytes(int dtype) {
    return dtype == BK_KV_F32 ? 4 : dtype == BK_KV_FP8_E4M3 ? 1 : 2;
}
/* Store x (f32) at element idx of a pool; scale: the fp8 scale (the value is divided by it). */
static __device__ __forceinline__ void kv_store(void *pool, int dtype, size_t idx, float x, float scale) {
    switch (dtype) {
    case BK_KV_F16: ((uint16_t *)pool)[idx] = fp32_to_fp16(x); break;
    case BK_KV_BF16: ((uint16_t *)pool)[idx] = fp32_to_bf16(x); break;
    /* a NaN is encoded as it is: the GPU's division returns the canonical NaN, dropping the sign x86 keeps */
    case BK_KV_FP8_E4M3: ((uint8_t *)pool)[idx] = kv_fp8_encode(x != x ? x : __fdiv_rn(x, scale)); break;
    default: ((float *)pool)[idx] = x; break;
    }
}

/* f16 K / V elements convert by the instruction (gpu_h2f): the attention kernels convert every element they read, and
 * ncu found the decode split kernel issue-bound on the portable conversion (0.28 instructions a cycle a scheduler,
 * 2.06% of DRAM bandwidth, ~4,000 instructions a warp for 8 positions). */

/* Two 16-bit elements of a word -> f32 (f16 or bf16). */
static __device__ __forceinline__ void kv_h2(uint32_t w, bool bf, float *v) {
    if (bf) { v[0] = __uint_as_float(w << 16); v[1] = __uint_as_float(w & 0xffff0000u); }
    else { v[0] = gpu_h2f((uint16_t)(w & 0xffff)); v[1] = gpu_h2f((uint16_t)(w >> 16)); }
}

/* Load D contiguous elements starting at element idx (D | 8 or D < 8 with idx a multiple of D) into v as f32:
 * vector loads of 4 (fp8), 8 or 16 bytes. */
template <int D> static __device__ __forceinline__ void kv_load(const void *pool, int dtype, size_t idx, float *v) {
    if (dtype == BK_KV_F16 || dtype == BK_KV_BF16) {
        const bool bf = dtype == BK_KV_BF16;
        const uint16_t *p = (const uint16_t *)pool + idx;
        if (D % 8 == 0) {
#pragma unroll
            for (int k = 0; k < D; k += 8) {
                const uint4 u = *(const uint4 *)(p + k);
                kv_h2(u.x, bf, v + k); kv_h2(u.y, bf, v + k + 2); kv_h2(u.z, bf, v + k + 4); kv_h2(u.w, bf, v + k + 6);
            }
        } else if (D == 4) {
            const uint2 u = *(const uint2 *)p;
            kv_h2(u.x, bf, v); kv_h2(u.y, bf, v + 2);
        } else {
#pragma unroll
            for (int k = 0; k < D; k++) v[k] = bf ? bf16_to_fp32(p[k]) : gpu_h2f(p[k]);
        }
    } else if (dtype == BK_KV_FP8_E4M3) {
        const uint8_t *p = (const uint8_t *)pool + idx;
        if (D % 4 == 0) {
#pragma unroll
            for (int k = 0; k < D; k += 4) {
                const uint32_t w = *(const uint32_t *)(p + k);
#pragma unroll
                for (int b = 0; b < 4; b++) v[k + b] = kv_fp8_decode((w >> (8 * b)) & 0xffu);
            }
        } else {
#pragma unroll
            for (int k = 0; k < D; k++) v[k] = kv_fp8_decode(p[k]);
        }
    } else {
        const float *p = (const float *)pool + idx;
        if (D % 4 == 0) {
#pragma unroll
            for (int k = 0; k < D; k += 4) {
                const float4 f = *(const float4 *)(p + k);
                v[k] = f.x; v[k + 1] = f.y; v[k + 2] = f.z; v[k + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int k = 0; k < D; k++) v[k] = p[k];
        }
    }
}

#endif
