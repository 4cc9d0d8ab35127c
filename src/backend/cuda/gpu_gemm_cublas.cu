/* The dense f16 GEMM seam (gpu_gemm.h) on NVIDIA: cublasGemmEx with f16 inputs, f32 output and f32
 * accumulation (tensor cores). Row-major C[m][n] = A[m][k] . B[n][k]^T is, in cuBLAS's column-major terms,
 * C^T (n x m, ld ldc) = op_T(B^T as stored: k x n, ld ldb) . A^T as stored (k x m, ld lda): the "TN" case,
 * the layout cuBLAS's fastest f16 kernels take. Compiles to nothing under hipcc. */
#include "backend/cuda/gpu_compat.h"
#if !defined(VLLMC_HIP)
#include <new>
#include <cublas_v2.h>
#include "backend/cuda/gpu_gemm.h"

struct gpu_gemm {
    cublasHandle_t h;
    void *workspace;
    size_t workspace_bytes;
};

#define GPU_GEMM_WORKSPACE_BYTES (32u << 20) /* cuBLAS's recommendation for Hopper */

static gpuError_t gemm_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
    }
}

gpuError_t gpu_gemm_create(gpuStream_t s, struct gpu_gemm **out) {
    *out = NULL;
    gpu_gemm *g = new (std::nothrow) gpu_gemm();
    if (!g) return cudaErrorMemoryAllocation;
    gpuError_t e = gemm_status(cublasCreate(&g->h));
    if (e != cudaSuccess) { delete g; return e; }
    if ((e = cudaMalloc(&g->workspace, GPU_GEMM_WORKSPACE_BYTES)) != cudaSuccess) {
        (void)cudaGetLastError();
        g->workspace = NULL;
    } else {
        g->workspace_bytes = GPU_GEMM_WORKSPACE_BYTES;
    }
    if ((e = gemm_status(cublasSetStream(g->h, s))) == cudaSuccess && g->workspace)
        e = gemm_status(cublasSetWorkspace(g->h, g->workspace, g->workspace_bytes));
    if (e == cudaSuccess) e = gemm_status(cublasSetMathMode(g->h, CUBLAS_DEFAULT_MATH));
    if (e != cudaSuccess) { gpu_gemm_destroy(g); return e; }
    *out = g;
    return cudaSuccess;
}

void gpu_gemm_destroy(struct gpu_gemm *g) {
    if (!g) return;
    if (g->h) (void)cublasDestroy(g->h);
    if (g->workspace) (void)cudaFree(g->workspace);
    delete g;
}

gpuError_t gpu_gemm_f16_nt(struct gpu_gemm *g, gpuStream_t s, int64_t m, int64_t n, int64_t k_dim, const void *A, int64_t lda,
                           const void *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
    if (!g || m < 0 || n < 0 || k_dim < 0 || lda < k_dim || ldb < k_dim || ldc < n || m > INT32_MAX || n > INT32_MAX ||
        k_dim > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX)
        return cudaErrorInvalidValue;
    if (m == 0 || n == 0) return cudaSuccess;
    gpuError_t e = gemm_status(cublasSetStream(g->h, s));
    if (e != cudaSuccess) return e;
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return gemm_status(cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k_dim, &alpha, B, CUDA_R_16F, (int)ldb, A,
                                    CUDA_R_16F, (int)lda, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
#endif
