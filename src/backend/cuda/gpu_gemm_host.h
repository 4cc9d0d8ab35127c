/* Host-buffer entry to the dense f16 GEMM of gpu_gemm.h, for the C parity test (tests/cuda/test_gpu_gemm_dev.c):
 * copies the operands to the current GPU, runs gpu_gemm_f16_nt there, copies C back. */
#ifndef VLLMC_GPU_GEMM_HOST_H
#define VLLMC_GPU_GEMM_HOST_H

#include <stdint.h>
#include "vllmc.h"
#ifdef __cplusplus
extern "C" {
#endif

/* A: m rows of lda halves (f16 bits), B: n rows of ldb halves, C: m rows of ldc floats (read when accumulate,
 * written back in full). VLLMC_OK on success; VLLMC_ERR_UNSUPPORTED where this build has no direct path (the
 * NVIDIA build: its GEMM is cuBLAS, checked through the backend); VLLMC_ERR_INVALID for arguments the GEMM
 * rejects or a GPU error (message in vllmc_last_error). */
vllmc_status gpu_gemm_host_f16_nt(int64_t m, int64_t n, int64_t k_dim, const uint16_t *A, int64_t lda, const uint16_t *B,
                                  int64_t ldb, float *C, int64_t ldc, int accumulate);

#ifdef __cplusplus
}
#endif
#endif
