/* Dense f16 GEMM on AMD (gpu_gemm.h): C[i][j] (+)= sum_k A[i][k] * B[j][k], f16 inputs, f32 products and sums.
 * One kernel, one launch shape for every AMD target; the device pass of each target compiles its own body:
 *   gfx11 (RDNA3) and gfx12 (RDNA4): v_wmma_f32_16x16x16_f16 (wave32), each wave a 64 x 32 sub-block;
 *   other targets: scalar f32 FMAs, each thread 8 x 8 cells.
 * The tiling, LDS layout, fragment layouts and bounds are the inline functions of backend/gpu_gemm_tile.h,
 * which tests/test_gpu_gemm.c runs on the CPU. Compiles to nothing with nvcc (gpu_gemm_cublas.cu is the
 * NVIDIA side). */
#include "backend/cuda/gpu_compat.h"

#if defined(VLLMC_HIP)
#include <stdlib.h>
#include "backend/cuda/gpu_gemm.h"
#include "backend/gpu_gemm_tile.h"

#if defined(VLLMC_GEMM_NO_WMMA) /* HIP_EXTRA=-DVLLMC_GEMM_NO_WMMA: the plain body on every target */
#define GEMM_WMMA_GEN 0
#elif defined(__GFX11__)
#define GEMM_WMMA_GEN 11
#elif defined(__GFX12__) || defined(__gfx1200__) || defined(__gfx1201__)
#define GEMM_WMMA_GEN 12 /* compilers that know gfx12 (ROCm >= 6.4 for the RX 9000 series) */
#else
#define GEMM_WMMA_GEN 0
#endif

static_assert(GPU_GEMM_THREADS == GPU_GEMM_WAVES_M * GPU_GEMM_WAVES_N * GPU_GEMM_WAVE, "one wave per sub-block");
static_assert(GPU_GEMM_BM == GPU_GEMM_WAVES_M * GPU_GEMM_FRAG_M * GPU_GEMM_FRAG, "waves cover M");
static_assert(GPU_GEMM_BN == GPU_GEMM_WAVES_N * GPU_GEMM_FRAG_N * GPU_GEMM_FRAG, "waves cover N");
static_assert(GPU_GEMM_BM == GPU_GEMM_BN, "A and B tiles share the chunk mapping");
static_assert(GPU_GEMM_CHUNKS * GPU_GEMM_THREADS * GPU_GEMM_CHUNK == GPU_GEMM_BM * GPU_GEMM_BK, "chunks cover a tile");
static_assert(GPU_GEMM_THREADS == 16 * 16 && GPU_GEMM_PLAIN_TM * 16 == GPU_GEMM_BM && GPU_GEMM_PLAIN_TN * 16 == GPU_GEMM_BN,
              "plain cells cover the block");
static_assert(GPU_GEMM_LDS_BYTES <= 65536, "LDS of one work-group on RDNA");
static_assert(GPU_GEMM_BK % GPU_GEMM_FRAG == 0 && (GPU_GEMM_LDS_STRIDE * 2) % 16 == 0, "16-byte LDS rows");

struct gpu_gemm {
    int unused;
};

struct gemm_args {
    const uint16_t *A, *B; /* f16 bits */
    float *C;
    int64_t m, n, k_dim, lda, ldb, ldc;
    int accumulate;
    int vec; /* A, B 16-byte aligned and lda, ldb multiples of 8: whole chunks load as one 16-byte read */
};

typedef _Float16 half8_t __attribute__((ext_vector_type(8)));
typedef _Float16 half16_t __attribute__((ext_vector_type(16)));
typedef float float8_t __attribute__((ext_vector_type(8)));

/* One chunk of 8 halves of an operand (rows n_rows, leading dimension ld) at global (row, k); zeros past
 * the edges. */
static __device__ __forceinline__ uint4 gemm_load_chunk(const uint16_t *X, int64_t ld, int64_t n_rows, int64_t k_dim,
                                                        int64_t row, int64_t k, int vec) {
    const int valid = gpu_gemm_chunk_valid(row, k, n_rows, k_dim);
    const uint16_t *p = X + row * ld + k;
    if (valid == GPU_GEMM_CHUNK && vec) return *(const uint4 *)p;
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < GPU_GEMM_CHUNK; e++)
        if (e < valid) w[e >> 1] |= (uint32_t)p[e] << (16 * (e & 1));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* The thread's chunks of K tile kt of the block's A rows (row0 ..) and B rows (col0 ..). A tile wholly inside
 * both operands (the common case; the test is uniform over the work-group) takes straight 16-byte loads. */
static __device__ __forceinline__ void gemm_load_tile(const gemm_args &P, int64_t row0, int64_t col0, int kt, int tid,
                                                      uint4 *ra, uint4 *rb) {
    const int64_t k0 = (int64_t)kt * GPU_GEMM_BK;
    if (gpu_gemm_tile_whole(P.vec, row0, col0, k0, P.m, P.n, P.k_dim)) {
#pragma unroll
        for (int i = 0; i < GPU_GEMM_CHUNKS; i++) {
            int r, k;
            gpu_gemm_load_chunk(tid, i, &r, &k);
            ra[i] = *(const uint4 *)(P.A + (row0 + r) * P.lda + k0 + k);
            rb[i] = *(const uint4 *)(P.B + (col0 + r) * P.ldb + k0 + k);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < GPU_GEMM_CHUNKS; i++) {
        int r, k;
        gpu_gemm_load_chunk(tid, i, &r, &k);
        ra[i] = gemm_load_chunk(P.A, P.lda, P.m, P.k_dim, row0 + r, k0 + k, P.vec);
        rb[i] = gemm_load_chunk(P.B, P.ldb, P.n, P.k_dim, col0 + r, k0 + k, P.vec);
    }
}

static __device__ __forceinline__ void gemm_store_tile(_Float16 *st, const uint4 *ra, const uint4 *rb, int tid) {
#pragma unroll
    for (int i = 0; i < GPU_GEMM_CHUNKS; i++) {
        int r, k;
        gpu_gemm_load_chunk(tid, i, &r, &k);
        *(uint4 *)(st + gpu_gemm_lds_a(r, k)) = ra[i];
        *(uint4 *)(st + gpu_gemm_lds_b(r, k)) = rb[i];
    }
}

static __device__ __forceinline__ void gemm_store_c(const gemm_args &P, int64_t row, int64_t col, float v) {
    if (gpu_gemm_c_in(row, col, P.m, P.n)) {
        float *c = P.C + row * P.ldc + col;
        *c = P.accumulate ? *c + v : v;
    }
}

#if GEMM_WMMA_GEN == 11
typedef half16_t gemm_frag_t; /* 16 K values of one row (column) */
#elif GEMM_WMMA_GEN == 12
typedef half8_t gemm_frag_t; /* 8 K values of one row (column) */
#endif

#if GEMM_WMMA_GEN
/* Lane's operand of the 16 x 16 fragment whose first row is block row r0 of A (b = false) or of B (b = true),
 * K offset kk of the tile: its elements are contiguous in K (gpu_gemm_frag_ab), one or two 16-byte LDS reads. */
static __device__ __forceinline__ gemm_frag_t gemm_frag(const _Float16 *st, bool b, int r0, int kk, int lane) {
    int rc, k;
    gpu_gemm_frag_ab(GEMM_WMMA_GEN, lane, 0, &rc, &k);
    const _Float16 *p = st + (b ? gpu_gemm_lds_b(r0 + rc, kk + k) : gpu_gemm_lds_a(r0 + rc, kk + k));
#if GEMM_WMMA_GEN == 11
    const half8_t lo = *(const half8_t *)p, hi = *(const half8_t *)(p + 8);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    return *(const half8_t *)p;
#endif
}

static __device__ __forceinline__ float8_t gemm_wmma(gemm_frag_t a, gemm_frag_t b, float8_t c) {
#if GEMM_WMMA_GEN == 11
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c);
#else
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c);
#endif
}
#endif

static __global__ void __launch_bounds__(GPU_GEMM_THREADS) gemm_f16_nt_tiled(const gemm_args P) {
    __shared__ __attribute__((aligned(16))) _Float16 lds[2 * GPU_GEMM_LDS_STAGE];
    const int tid = threadIdx.x;
    const int64_t row0 = (int64_t)blockIdx.y * GPU_GEMM_BM, col0 = (int64_t)blockIdx.x * GPU_GEMM_BN;
    const int n_kt = gpu_gemm_k_tiles(P.k_dim);
    uint4 ra[GPU_GEMM_CHUNKS], rb[GPU_GEMM_CHUNKS];
    gemm_load_tile(P, row0, col0, 0, tid, ra, rb);
    gemm_store_tile(lds, ra, rb, tid);
    __syncthreads();
#if GEMM_WMMA_GEN
    const int lane = tid % GPU_GEMM_WAVE, wave = tid / GPU_GEMM_WAVE;
    int wr0, wc0;
    gpu_gemm_wave_origin(wave, &wr0, &wc0);
    float8_t acc[GPU_GEMM_FRAG_M][GPU_GEMM_FRAG_N];
#pragma unroll
    for (int i = 0; i < GPU_GEMM_FRAG_M; i++)
#pragma unroll
        for (int j = 0; j < GPU_GEMM_FRAG_N; j++) acc[i][j] = (float8_t){0, 0, 0, 0, 0, 0, 0, 0};
#else
    float acc[GPU_GEMM_PLAIN_TM][GPU_GEMM_PLAIN_TN];
#pragma unroll
    for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++)
#pragma unroll
        for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) acc[i][j] = 0.f;
    int pr0, pc0;
    gpu_gemm_plain_cell(tid, 0, 0, &pr0, &pc0); /* cell (i, j) is (pr0 + 16 i, pc0 + 16 j) */
#endif
    for (int kt = 0; kt < n_kt; kt++) {
        const _Float16 *st = lds + (kt & 1) * GPU_GEMM_LDS_STAGE;
        if (kt + 1 < n_kt) {
            gemm_load_tile(P, row0, col0, kt + 1, tid, ra, rb);
            gemm_store_tile(lds + ((kt + 1) & 1) * GPU_GEMM_LDS_STAGE, ra, rb, tid);
        }
#if GEMM_WMMA_GEN
#pragma unroll 1
        for (int kk = 0; kk < GPU_GEMM_BK; kk += GPU_GEMM_FRAG) {
            gemm_frag_t b[GPU_GEMM_FRAG_N];
#pragma unroll
            for (int j = 0; j < GPU_GEMM_FRAG_N; j++) b[j] = gemm_frag(st, true, wc0 + 16 * j, kk, lane);
#pragma unroll
            for (int i = 0; i < GPU_GEMM_FRAG_M; i++) {
                const gemm_frag_t a = gemm_frag(st, false, wr0 + 16 * i, kk, lane);
#pragma unroll
                for (int j = 0; j < GPU_GEMM_FRAG_N; j++) acc[i][j] = gemm_wmma(a, b[j], acc[i][j]);
            }
        }
#else
#pragma unroll 4
        for (int k = 0; k < GPU_GEMM_BK; k++) {
            float a[GPU_GEMM_PLAIN_TM], b[GPU_GEMM_PLAIN_TN];
#pragma unroll
            for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++) a[i] = (float)st[gpu_gemm_lds_a(pr0 + 16 * i, k)];
#pragma unroll
            for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) b[j] = (float)st[gpu_gemm_lds_b(pc0 + 16 * j, k)];
#pragma unroll
            for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++)
#pragma unroll
                for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
#endif
        __syncthreads();
    }
#if GEMM_WMMA_GEN
#pragma unroll
    for (int i = 0; i < GPU_GEMM_FRAG_M; i++)
#pragma unroll
        for (int j = 0; j < GPU_GEMM_FRAG_N; j++)
#pragma unroll
            for (int v = 0; v < 8; v++) {
                int r, c;
                gpu_gemm_frag_c(GEMM_WMMA_GEN, lane, v, &r, &c);
                gemm_store_c(P, row0 + wr0 + 16 * i + r, col0 + wc0 + 16 * j + c, acc[i][j][v]);
            }
#else
#pragma unroll
    for (int i = 0; i < GPU_GEMM_PLAIN_TM; i++)
#pragma unroll
        for (int j = 0; j < GPU_GEMM_PLAIN_TN; j++) gemm_store_c(P, row0 + pr0 + 16 * i, col0 + pc0 + 16 * j, acc[i][j]);
#endif
}

gpuError_t gpu_gemm_create(gpuStream_t s, struct gpu_gemm **out) {
    (void)s;
    if (!out) return hipErrorInvalidValue;
    *out = (struct gpu_gemm *)calloc(1, sizeof(struct gpu_gemm));
    return *out ? hipSuccess : hipErrorOutOfMemory;
}

void gpu_gemm_destroy(struct gpu_gemm *g) { free(g); }

gpuError_t gpu_gemm_f16_nt(struct gpu_gemm *g, gpuStream_t s, int64_t m, int64_t n, int64_t k_dim, const void *A, int64_t lda,
                           const void *B, int64_t ldb, float *C, int64_t ldc, int accumulate) {
    if (!g || m < 0 || n < 0 || k_dim < 0) return hipErrorInvalidValue;
    if (m == 0 || n == 0) return hipSuccess;
    if (!C || ldc < n || (k_dim > 0 && (!A || !B || lda < k_dim || ldb < k_dim))) return hipErrorInvalidValue;
    unsigned gx, gy;
    if (!gpu_gemm_grid(m, n, k_dim, &gx, &gy)) return hipErrorInvalidValue;
    gemm_args P;
    P.A = (const uint16_t *)A;
    P.B = (const uint16_t *)B;
    P.C = C;
    P.m = m; P.n = n; P.k_dim = k_dim;
    P.lda = lda; P.ldb = ldb; P.ldc = ldc;
    P.accumulate = accumulate != 0;
    P.vec = ((uintptr_t)A % 16 == 0) && ((uintptr_t)B % 16 == 0) && lda % GPU_GEMM_CHUNK == 0 && ldb % GPU_GEMM_CHUNK == 0;
    gemm_f16_nt_tiled<<<dim3(gx, gy), GPU_GEMM_THREADS, 0, s>>>(P);
    return hipGetLastError();
}

#endif
