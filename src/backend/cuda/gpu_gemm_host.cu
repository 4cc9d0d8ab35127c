/* gpu_gemm_host.h: the AMD GEMM (gpu_gemm_hip.cu) on host buffers. The NVIDIA build answers
 * VLLMC_ERR_UNSUPPORTED: its GEMM (cuBLAS) is checked through the backend's prefill path. */
#include "backend/cuda/gpu_gemm_host.h"
#include "backend/cuda/gpu_compat.h"
#include "common/common.h"

#if defined(VLLMC_HIP)
#include "backend/cuda/gpu_gemm.h"

static vllmc_status gemm_host_fail(gpuError_t e, const char *what) {
    return vllmc_errorf(VLLMC_ERR_INVALID, "gpu_gemm_host: %s: %s", what, gpuGetErrorString(e));
}

extern "C" vllmc_status gpu_gemm_host_f16_nt(int64_t m, int64_t n, int64_t k_dim, const uint16_t *A, int64_t lda,
                                             const uint16_t *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
    if (m < 0 || n < 0 || k_dim < 0 || lda < 0 || ldb < 0 || ldc < 0 || (m > 0 && !C))
        return vllmc_errorf(VLLMC_ERR_INVALID, "gpu_gemm_host: bad shape m %lld n %lld k %lld", (long long)m,
                            (long long)n, (long long)k_dim);
    const size_t a_bytes = (size_t)(m * lda) * 2, b_bytes = (size_t)(n * ldb) * 2, c_bytes = (size_t)(m * ldc) * 4;
    void *dA = NULL, *dB = NULL;
    float *dC = NULL;
    struct gpu_gemm *g = NULL;
    vllmc_status st = VLLMC_OK;
    gpuError_t e;
    if ((e = gpuMalloc(&dA, a_bytes + 16)) != gpuSuccess || (e = gpuMalloc(&dB, b_bytes + 16)) != gpuSuccess ||
        (e = gpuMalloc((void **)&dC, c_bytes + 16)) != gpuSuccess) { st = gemm_host_fail(e, "allocation"); goto out; }
    if ((a_bytes && A && (e = gpuMemcpy(dA, A, a_bytes, gpuMemcpyHostToDevice)) != gpuSuccess) ||
        (b_bytes && B && (e = gpuMemcpy(dB, B, b_bytes, gpuMemcpyHostToDevice)) != gpuSuccess) ||
        (c_bytes && (e = gpuMemcpy(dC, C, c_bytes, gpuMemcpyHostToDevice)) != gpuSuccess)) {
        st = gemm_host_fail(e, "copy in");
        goto out;
    }
    if ((e = gpu_gemm_create(0, &g)) != gpuSuccess) { st = gemm_host_fail(e, "create"); goto out; }
    if ((e = gpu_gemm_f16_nt(g, 0, m, n, k_dim, A ? dA : NULL, lda, B ? dB : NULL, ldb, dC, ldc, accumulate)) != gpuSuccess) {
        st = gemm_host_fail(e, "gpu_gemm_f16_nt");
        goto out;
    }
    if ((e = gpuDeviceSynchronize()) != gpuSuccess) { st = gemm_host_fail(e, "kernel"); goto out; }
    if (c_bytes && (e = gpuMemcpy(C, dC, c_bytes, gpuMemcpyDeviceToHost)) != gpuSuccess) st = gemm_host_fail(e, "copy out");
out:
    gpu_gemm_destroy(g);
    if (dA) (void)gpuFree(dA);
    if (dB) (void)gpuFree(dB);
    if (dC) (void)gpuFree(dC);
    return st;
}

#else

extern "C" vllmc_status gpu_gemm_host_f16_nt(int64_t m, int64_t n, int64_t k_dim, const uint16_t *A, int64_t lda,
                                             const uint16_t *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
    (void)m; (void)n; (void)k_dim; (void)A; (void)lda; (void)B; (void)ldb; (void)C; (void)ldc; (void)accumulate;
    return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "gpu_gemm_host: no direct GEMM path in the NVIDIA build");
}

#endif
