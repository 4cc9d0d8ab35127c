/* Dense f16 GEMM behind one seam, for prefill-sized matmuls: cuBLAS(Lt) on NVIDIA (gpu_gemm_cublas.cu), a WMMA
 * kernel on RDNA3/RDNA4 and a plain tiled kernel on other AMD targets (gpu_gemm_hip.cu). Each implementation file
 * compiles to nothing on the other platform, so both go through nvcc and hipcc unchanged.
 *
 *   C[i][j] (+)= sum_k A[i][k] * B[j][k]        i < m, j < n, k < k_dim
 *
 * A: the activations, m rows of k_dim f16 values (row stride lda elements); B: the weights, n rows of k_dim f16
 * values (row stride ldb elements), i.e. the GGUF layout of a dequantized weight; C: f32, m rows of n (row stride
 * ldc elements). Products and sums in f32. accumulate != 0 adds into C instead of overwriting it. */
#ifndef VLLMC_GPU_GEMM_H
#define VLLMC_GPU_GEMM_H

#include <stdint.h>
#include "backend/cuda/gpu_compat.h"

struct gpu_gemm; /* per-backend state (library handle, workspace); one per stream */

gpuError_t gpu_gemm_create(gpuStream_t s, struct gpu_gemm **out);
void gpu_gemm_destroy(struct gpu_gemm *g);
gpuError_t gpu_gemm_f16_nt(struct gpu_gemm *g, gpuStream_t s, int64_t m, int64_t n, int64_t k_dim, const void *A, int64_t lda,
                           const void *B, int64_t ldb, float *C, int64_t ldc, int accumulate);

#endif
