/* The dense f16 GEMM of gpu_gemm.h on the GPU against a CPU GEMM, on fresh random f16 inputs. Runs the AMD
 * kernel (gpu_gemm_hip.cu) in the HIP build (`make HIP=1 HIP_ARCH=... cuda-tests`); the NVIDIA build has no
 * direct path and skips (its GEMM is cuBLAS, checked through the backend's prefill). Shapes of whole tiles and
 * with ragged edges in m, n and k, row strides that are not multiples of 8 (the per-chunk loads), C with padding
 * columns that must stay untouched, accumulate. Small-integer inputs must match exactly (every partial sum is
 * exact in f32, in any order); normal inputs within f32 rounding of a double GEMM. C is poisoned with NaN first,
 * so a cell never written fails. Bad arguments are rejected. VLLMC_TEST_SEED replays a run. */
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include "backend/cuda/gpu_gemm_host.h"
#include "common/common.h"
#include "quant/blocks.h"
#include "test.h"

static uint16_t rand_half(bool integer) {
    if (integer) return fp32_to_fp16((float)((int)(test_rand_u64() % 17) - 8));
    return fp32_to_fp16(test_rand_normal());
}

/* Returns false when the GPU run itself failed (reported). */
static bool run_case(int64_t m, int64_t n, int64_t k_dim, int64_t pad_k, int64_t pad_n, bool integer, int accumulate) {
    const int64_t lda = k_dim + pad_k, ldb = k_dim + pad_k, ldc = n + pad_n;
    uint16_t *A = malloc(sizeof(uint16_t) * (size_t)(m * lda + 1)), *B = malloc(sizeof(uint16_t) * (size_t)(n * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(m * ldc)), *C0 = malloc(sizeof(float) * (size_t)(m * ldc));
    bool ok = true;
    if (!A || !B || !C || !C0) { CHECK(!"out of memory"); ok = false; goto out; }
    for (int64_t i = 0; i < m * lda; i++) A[i] = rand_half(integer);
    for (int64_t i = 0; i < n * ldb; i++) B[i] = rand_half(integer);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++)
            C[i * ldc + j] = j >= n ? 1234.5f : accumulate ? (float)((int)(test_rand_u64() % 9) - 4) : NAN;
    memcpy(C0, C, sizeof(float) * (size_t)(m * ldc));
    const vllmc_status st = gpu_gemm_host_f16_nt(m, n, k_dim, A, lda, B, ldb, C, ldc, accumulate);
    CHECK_MSG(st == VLLMC_OK, "m %lld n %lld k %lld: %s", (long long)m, (long long)n, (long long)k_dim, vllmc_last_error());
    if (st != VLLMC_OK) { ok = false; goto out; }
    int64_t bad = 0, bad_pad = 0;
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            const float got = C[i * ldc + j];
            if (j >= n) { bad_pad += got != 1234.5f; continue; }
            double ref = accumulate ? C0[i * ldc + j] : 0, mag = fabs(ref);
            for (int64_t k = 0; k < k_dim; k++) {
                const double p = (double)fp16_to_fp32(A[i * lda + k]) * fp16_to_fp32(B[j * ldb + k]);
                ref += p;
                mag += fabs(p);
            }
            const double err = fabs((double)got - ref);
            if (integer ? !(err == 0) : !(err <= 4e-7 * (double)(k_dim + 2) * mag + 1e-30)) bad++;
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
    CHECK_MSG(bad == 0 && bad_pad == 0, "m %lld n %lld k %lld pad_k %lld %s%s: %lld wrong cells, %lld padding cells changed "
              "(worst rel %.3g)", (long long)m, (long long)n, (long long)k_dim, (long long)pad_k,
              integer ? "integer" : "normal", accumulate ? " accumulate" : "", (long long)bad, (long long)bad_pad, worst);
out:
    free(A); free(B); free(C); free(C0);
    return ok;
}

int main(void) {
    test_seed_auto("test_cuda_gemm");
    float c1 = NAN;
    const uint16_t one = fp32_to_fp16(1.0f);
    const vllmc_status st = gpu_gemm_host_f16_nt(1, 1, 1, &one, 1, &one, 1, &c1, 1, 0);
    if (st == VLLMC_ERR_UNSUPPORTED || (st != VLLMC_OK && strstr(vllmc_last_error(), "allocation"))) {
        printf("test_cuda_gemm: %s: skipped\n", vllmc_last_error());
        return 0;
    }
    CHECK_MSG(st == VLLMC_OK && c1 == 1.0f, "1 x 1 x 1: %s, C = %g", st == VLLMC_OK ? "ok" : vllmc_last_error(), c1);
    /* whole tiles (16-byte loads), several blocks and K tiles; ragged m, n, k; tiny; k = 0; a prefill shape */
    static const int64_t shapes[][3] = {{128, 128, 32}, {256, 384, 512}, {129, 128, 32}, {128, 129, 32}, {128, 128, 33},
                                        {77, 300, 100}, {3, 200, 7},     {1, 1000, 64},  {40, 56, 0},    {512, 1024, 2560}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        run_case(shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, true, 0);
        run_case(shapes[s][0], shapes[s][1], shapes[s][2], 3, 5, true, 1);  /* unaligned strides, padded C */
        run_case(shapes[s][0], shapes[s][1], shapes[s][2], 8, 1, false, 0); /* normal values */
    }
    for (int it = 0; it < 8; it++) {
        const int64_t m = 1 + (int64_t)(test_rand_u64() % 300), n = 1 + (int64_t)(test_rand_u64() % 300);
        const int64_t k = 1 + (int64_t)(test_rand_u64() % 300), pad = (int64_t)(test_rand_u64() % 9);
        run_case(m, n, k, pad, (int64_t)(test_rand_u64() % 3), it & 1, (int)(test_rand_u64() & 1));
    }
    /* rejected: a row stride shorter than k, a negative size */
    uint16_t h[4] = {one, one, one, one};
    float c[4] = {0};
    CHECK(gpu_gemm_host_f16_nt(2, 2, 2, h, 1, h, 2, c, 2, 0) == VLLMC_ERR_INVALID);
    CHECK(gpu_gemm_host_f16_nt(-1, 2, 2, h, 2, h, 2, c, 2, 0) == VLLMC_ERR_INVALID);
    CHECK(gpu_gemm_host_f16_nt(2, 2, 2, h, 2, h, 2, c, 1, 0) == VLLMC_ERR_INVALID);
    return test_finish("test_cuda_gemm");
}
