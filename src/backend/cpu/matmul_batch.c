/* Dispatch side of the batched legacy-type matmul (kernels in matmul_batch_avx512.c). */
#include "backend/cpu/matmul_batch.h"
#include "quant/gemv.h"

bool cpu_mmb_supported(uint32_t wtype) {
    if (wtype != GGML_TYPE_Q4_0 && wtype != GGML_TYPE_Q5_0 && wtype != GGML_TYPE_Q8_0) return false;
    return quant_isa_active() == QUANT_ISA_AVX512;
}

size_t cpu_mmb_prep_row_bytes(int64_t n_cols) {
    const int64_t nbp = ((n_cols / 32) + 7) & ~(int64_t)7;
    return (size_t)nbp * (32 + sizeof(float) + sizeof(int32_t));
}
