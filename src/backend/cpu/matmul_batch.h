/* Batched quantized matmul for several activation rows (batched decode, prefill) of the 32-element
 * symmetric legacy types Q4_0 / Q5_0 / Q8_0 on AVX-512 VNNI.
 *
 * Each weight row is unpacked once (to unsigned bytes w + offset and fp32 scales) and dotted with
 * every activation row; the activations are prepared once per matmul (fp32 scales, per-block sums
 * for the offset correction, zero padding to whole groups of 8 blocks), so no per-pair work is
 * spent on conversions and short rows (e.g. 896 columns) need no scalar tail.
 *
 * Contract: every output is bit-identical to vec_dot_ref(wtype, n_cols, w_row, act_row): the
 * per-block integer sums are exact, block b's term dot_term_sym(dw, da, s) goes to lane b % 8 in
 * block order, and the lanes are combined by dot_reduce8. The functions write only out[], so
 * disjoint weight-row ranges may run on several threads at once. */
#ifndef VLLMC_CPU_MATMUL_BATCH_H
#define VLLMC_CPU_MATMUL_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true if the kernels can run here (AVX-512 VNNI is the active quant ISA) and wtype is one of them. */
bool cpu_mmb_supported(uint32_t wtype);
/* Bytes of one prepared activation row of n_cols columns (a multiple of 32). */
size_t cpu_mmb_prep_row_bytes(int64_t n_cols);
/* Prepare n_act Q8_0 activation rows (act_row_bytes apart) into prep (n_act * cpu_mmb_prep_row_bytes). */
void cpu_mmb_prepare(int64_t n_cols, const void *act, size_t act_row_bytes, int64_t n_act, void *prep);
/* out[i * out_stride + r] = dot(weight row row0 + r, activation row i) for r in [0, n_rows), i in [0, n_act). */
void cpu_mmb_gemm(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                  const void *prep, int64_t n_act, float *out, int64_t out_stride);

#endif
