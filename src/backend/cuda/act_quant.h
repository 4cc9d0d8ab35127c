/* Activation quantizers on the device: exact ports of quantize_row_q8_K / quantize_row_q8_0, shared by the
 * norm+quantize kernel (gemv_q.cu), the MoE down launch and the attention combine (cuda_ops.cu). */
#ifndef VLLMC_CUDA_ACT_QUANT_H
#define VLLMC_CUDA_ACT_QUANT_H

#include "backend/cuda/cuda_internal.h"
#include "quant/blocks.h"

/* ggml's nearest_int: round half to even through the 1.5 * 2^23 trick; no FMA contraction. */
static __device__ __forceinline__ int nearest_int_dev(float v) {
    float t = __fadd_rn(v, 12582912.f);
    return (__float_as_int(t) & 0x007fffff) - 0x00400000;
}

/* One 32-lane group quantizes the 256 values v (lane l holds elements 8l .. 8l+7) into a Q8_K super-block. */
static __device__ void quant_q8_K_sb(const float v[8], int8_t *qs, float *d_out, int16_t *bsums, int lane) {
    float amax = 0.f, vmax = 0.f;
    int imax = 1 << 30;
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

/* Four lanes (8 values each) quantize one 32-element Q8_0 block (the quants and scale of a Q8_1 block too); where s1 is
 * not NULL, Q8_1's s = f16(d * sum(q)) with the f32 d (as act_quant_q8_1_ref forms it). */
static __device__ void quant_q8_0_lane(const float v[8], int8_t *qs, uint16_t *d_out, int lane, bool store, uint16_t *s1 = NULL) {
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
    amax = fmaxf(amax, shfl_xor(amax, 1));
    amax = fmaxf(amax, shfl_xor(amax, 2));
    const float d = __fdiv_rn(amax, 127.f);
    const float id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
    int packed[2] = {0, 0}, sum = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) packed[k / 4] |= ((int)roundf(__fmul_rn(v[k], id)) & 0xff) << (8 * (k % 4));
    if (s1) { /* the block's quant sum (every lane takes part in the shuffles); nothing more where there is no Q8_1 */
        sum = dot4_i8(packed[1], 0x01010101, dot4_i8(packed[0], 0x01010101, 0));
        sum += shfl_xor(sum, 1);
        sum += shfl_xor(sum, 2);
    }
    if (!store) return;
    *(int2 *)qs = make_int2(packed[0], packed[1]);
    if ((lane & 3) == 0) {
        *d_out = fp32_to_fp16(d);
        if (s1) *s1 = fp32_to_fp16(__fmul_rn((float)sum, d));
    }
}

#endif
