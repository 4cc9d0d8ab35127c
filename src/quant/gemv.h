/* Quantized matrix-vector / matrix-matrix products for the CPU backend, and the instruction-set
 * selection of the dot-product kernels.
 *
 * Contract: every output element is bit-identical to vec_dot_ref(wtype, n_cols, w_row, act_row) for
 * its (weight row, activation row) pair, whatever the ISA, row range or batch split. Activations
 * are already quantized with quantize_row_act(wtype, ...) (F32 for F32/F16/BF16 weights) and every
 * quantized activation value is in [-127, 127] (the quantizers guarantee it; SIMD relies on it).
 * The functions keep no state and write only out[], so the caller may run disjoint row ranges on
 * several threads at once (threadpool). n_cols must be a multiple of the type's block size. */
#ifndef VLLMC_GEMV_H
#define VLLMC_GEMV_H

#include <stdbool.h>
#include <stddef.h>
#include "quant.h"

enum quant_isa { QUANT_ISA_SCALAR = 0, QUANT_ISA_AVX2 = 1, QUANT_ISA_AVX512 = 2, QUANT_ISA_COUNT = 3 };

/* true if this CPU can run the kernels of isa (scalar always). */
bool quant_isa_supported(int isa);
/* The ISA quant_get_vec_dot uses: the best supported one, or $VLLMC_SIMD (scalar|avx2|avx512) if
 * set and supported (an unsupported or unknown value logs a warning and is ignored). Chosen once. */
int quant_isa_active(void);
/* The dot product of wtype for one ISA; types without a kernel for that ISA get the scalar one.
 * NULL if the type is unsupported or the ISA is not supported by this CPU. */
vec_dot_fn quant_get_vec_dot_isa(uint32_t wtype, int isa);

/* The activation quantizer (act_type GGML_TYPE_Q8_0 / Q8_1 / Q8_K) of one ISA; ISAs without a SIMD one get
 * the scalar reference. Same bits as quantize_row_q8_*; NULL for other types or an unsupported ISA. */
typedef void (*quant_act_fn)(const float *x, void *dst, int64_t n);
quant_act_fn quant_get_act_quantizer_isa(uint32_t act_type, int isa);

/* out[r] = dot(weight row row0 + r, act) for r in [0, n_rows). w points at row 0 of the matrix;
 * rows are w_row_bytes apart (>= quant_row_size(wtype, n_cols)). */
void quant_gemv(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                const void *act, float *out);

/* Batched form for prefill: out[i * out_stride + r] = dot(weight row row0 + r, activation row i)
 * for i in [0, n_act), r in [0, n_rows). Activation rows are act_row_bytes apart. Each weight row
 * is read from memory once per tile of activation rows (the tile fits in L2); on AVX-512 every
 * quantized type except the float ones unpacks each weight block once for up to DOT_MULTI_MAX activation rows, and
 * with AMX-INT8 Q4_K / Q5_K / Q6_K take 16 x 16 tiles from QUANT_AMX_MIN_ACT activation rows (quant_gemm_amx). */
void quant_gemm(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                const void *act, size_t act_row_bytes, int64_t n_act, float *out, int64_t out_stride);

/* AMX-INT8 (Sapphire Rapids and later, with the OS's permission; env VLLMC_AMX=0 keeps it off): whether the tile
 * kernels run here, whether they take wtype (Q4_K, Q5_K, Q6_K), and wtype rows x Q8_K activation rows in 16 x 16 tiles
 * (n_rows, n_act multiples of 16; w at the first row; out[i * out_stride + r]), the same bits as the other kernels.
 * false: nothing done (no AMX, another type, no memory). */
#define QUANT_AMX_MIN_ACT 32 /* quant_gemm takes the tiles from this many activation rows */
bool quant_amx_ok(void);
bool quant_amx_type(uint32_t wtype);
bool quant_gemm_amx(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t n_rows, const void *act,
                    size_t act_row_bytes, int64_t n_act, float *out, int64_t out_stride);

#endif
