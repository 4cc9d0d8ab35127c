/* Quantization formats: ggml type ids, per-type traits, and the row-level entry points
 * (dequantize, reference quantize, quantized dot products). Block layouts live in blocks.h. */
#ifndef VLLMC_QUANT_H
#define VLLMC_QUANT_H

#include <stdbool.h>
#include "common/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids exactly as stored in GGUF tensor infos. */
enum ggml_type {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_IQ2_XXS = 16, GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18, GGML_TYPE_IQ1_S = 19, GGML_TYPE_IQ4_NL = 20, GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22, GGML_TYPE_IQ4_XS = 23, GGML_TYPE_I8 = 24, GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26, GGML_TYPE_I64 = 27, GGML_TYPE_F64 = 28, GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30, GGML_TYPE_TQ1_0 = 34, GGML_TYPE_TQ2_0 = 35, GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_NVFP4 = 40, GGML_TYPE_Q1_0 = 41, GGML_TYPE_Q2_0 = 42,
    GGML_TYPE_COUNT = 43
};

struct quant_traits {
    const char *name;   /* "Q4_K" */
    int block_size;     /* elements per block */
    int type_size;      /* bytes per block */
    bool supported;     /* dequantize (and dot) implemented here */
    int vec_dot_type;   /* activation type its dot product pairs with (GGML_TYPE_Q8_0/Q8_1/Q8_K/F32) */
};

/* NULL for an id that is not a ggml type (ids in the gaps, >= GGML_TYPE_COUNT). */
const struct quant_traits *quant_traits(uint32_t type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or type unknown. */
uint64_t quant_row_size(uint32_t type, int64_t n);

/* ---- Row-level entry points. n is the number of elements and a multiple of the block size. ---- */

/* Dequantize n elements of a weight row (any supported type) to f32, bit-identical to ggml's
 * dequantize_row_*. Precondition (asserted, not an error path): quant_traits(type)->supported and n a
 * multiple of the block size; callers validate types read from a file with quant_traits() first.
 * Handles F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4. */
void dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Reference quantizer of weights (no importance matrix), byte-identical to what llama-quantize writes
 * for that type without an imatrix (ggml_quantize_chunk: the *_ref code, except IQ4_NL/IQ4_XS, which
 * take quantize_iq4_*'s +-7 scale search). Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4. Returns VLLMC_ERR_UNSUPPORTED for another type and
 * VLLMC_ERR_INVALID if n is not a multiple of the block size. Thread-safe (no shared state). Non-finite
 * inputs give unspecified (but memory-safe) blocks, as in ggml. */
vllmc_status quantize_row_ref(uint32_t type, const float *src, void *dst, int64_t n);
/* True if quantize_row_ref can produce this type. */
bool quant_can_quantize(uint32_t type);
/* Half of the MXFP4 E8M0 block scale as f32: 2^(e-128) (subnormal for e = 0, 1), as ggml decodes it. */
float quant_e8m0_to_fp32_half(uint8_t e);

/* Activation quantizers for the dot products (GGUF-QUANTS.md section 4). */
void quantize_row_q8_0(const float *x, void *dst, int64_t n);
void quantize_row_q8_1(const float *x, void *dst, int64_t n);
void quantize_row_q8_K(const float *x, void *dst, int64_t n);
/* The deferred-norm activation (BK_ACT_Q8_KD, backend.h) as the CUDA decode forms it: x * w quantized a group of 16
 * at a time (d = max |v| / 127, quants v * (127 / max |v|) rounded to nearest even, their sum), with each group's sum
 * of x^2 in the writer's butterfly order; q8_kd_rms_ref: the readers' 1 / sqrt(sum / n + eps) in their order;
 * q8_kd_dot_q4_K_ref: a Q4_K row against it (integer sums per group, the float terms in the tensor-core mat-vec's
 * order; without the RMS scale). The oracles of test_cuda_ops' kd case. n <= 4,096 (the readers' bound, cu_mm_kd_takes:
 * q8_kd_rms_ref takes at most 8 groups a lane, as the kernel does). */
void quantize_row_q8_kd_ref(const float *x, const float *w, int64_t n, int8_t *qs, float *d, int16_t *bs, float *ssq);
float q8_kd_rms_ref(const float *ssq, int64_t n, float eps);
float q8_kd_dot_q4_K_ref(int64_t n, const void *w, const int8_t *qs, const float *d, const int16_t *bs);
/* Quantize to the activation type that weight type wtype pairs with (traits->vec_dot_type). */
void quantize_row_act(uint32_t wtype, const float *x, void *dst, int64_t n);

/* Dot product of a weight row (type wtype) with an activation row already quantized to
 * traits(wtype)->vec_dot_type (F32 weights take F32 activations). The integer part is computed
 * in integers; the float combination order is fixed (see dot_impl.h: 32-element blocks go into 8 partial sums
 * combined by a fixed tree, super-blocks are summed in order), so the scalar
 * reference and the SIMD paths give the same bits. */
typedef float (*vec_dot_fn)(int64_t n, const void *w, const void *a);
float vec_dot_ref(uint32_t wtype, int64_t n, const void *w, const void *a);
/* The fastest implementation this CPU supports (AVX-512 VNNI / AVX2 / scalar), chosen once. */
vec_dot_fn quant_get_vec_dot(uint32_t wtype);
/* Name of the instruction set the dispatcher chose ("avx512vnni", "avx2", "scalar"). */
const char *quant_simd_name(void);

#ifdef __cplusplus
}
#endif

#endif
