/* A CUDA runtime without a GPU, for running the CUDA backend's host side on a machine that has none.
 *
 * Built three times (scripts/cuda-host-check.sh) as libcudart.so.13, libcublas.so.13 and libcublasLt.so.13 and put
 * first on LD_LIBRARY_PATH, it lets an unchanged `make CUDA=1` binary run: "device" memory is host memory, copies
 * and memsets happen, kernel launches and graph launches do nothing, the device is an H200-like part (132 SMs,
 * 227 KB of shared memory a block, STUB_GPU_GB of memory, 16 by default). What runs for real is everything the
 * backend does on the host: the recording of a step, the passes over its records (fusions, the tiled FFN), the
 * graph cache, the engine and the CLI around it. Token ids that come back are whatever the untouched buffers hold
 * (zeros), so the text is meaningless; counts and host times are the point.
 *
 * STUB_CUDA_LOG=1 prints the kernel launches each captured graph holds, =2 also each launch's grid, block and shared
 * memory, to stderr. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(STUB_CUDART)
static size_t g_used;
static size_t total_bytes(void) {
    const char *e = getenv("STUB_GPU_GB");
    const long gb = e ? atol(e) : 16;
    return (size_t)(gb > 0 ? gb : 16) << 30;
}
static int g_log = -1;
static int log_on(void) {
    if (g_log < 0) g_log = getenv("STUB_CUDA_LOG") ? atoi(getenv("STUB_CUDA_LOG")) : 0;
    return g_log;
}

/* fat binaries and kernels: registered, never run */
void **__cudaRegisterFatBinary(void *fat) {
    static void *handle;
    handle = fat;
    return &handle;
}
void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
void __cudaUnregisterFatBinary(void **h) { (void)h; }
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName, int thread_limit, uint3 *tid,
                            uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
    (void)h; (void)hostFun; (void)deviceFun; (void)deviceName; (void)thread_limit; (void)tid; (void)bid; (void)bDim; (void)gDim;
    (void)wSize;
}
void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress, const char *deviceName, int ext, size_t size, int constant,
                       int global) {
    (void)h; (void)hostVar; (void)deviceAddress; (void)deviceName; (void)ext; (void)size; (void)constant; (void)global;
}
static dim3 cfg_grid, cfg_block;
static size_t cfg_smem;
static void *cfg_stream;
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, void *stream) {
    cfg_grid = grid; cfg_block = block; cfg_smem = smem; cfg_stream = stream;
    return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *smem, void *stream) {
    *grid = cfg_grid; *block = cfg_block; *smem = cfg_smem;
    *(void **)stream = cfg_stream;
    return cudaSuccess;
}
cudaError_t __cudaGetKernel(void **kernel, const void *fn) {
    *kernel = (void *)fn;
    return cudaSuccess;
}
static int g_capturing, g_captured;
static void log_launch(const char *how, const void *fn, dim3 g, dim3 b, size_t smem) {
    g_captured += g_capturing;
    if (log_on() > 1)
        fprintf(stderr, "stub-cuda: %s %p grid (%u, %u, %u) block (%u, %u, %u) smem %zu\n", how, fn, g.x, g.y, g.z, b.x, b.y, b.z,
                smem);
}
cudaError_t __cudaLaunchKernel(const void *k, dim3 grid, dim3 block, void **args, size_t smem, cudaStream_t s) {
    (void)args; (void)s;
    log_launch("launch", k, grid, block, smem);
    return cudaSuccess;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *cfg, const void *fn, void **args) {
    (void)args;
    log_launch("launch-ex", fn, cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes);
    return cudaSuccess;
}

/* the device */
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int dev) {
    (void)dev;
    switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 232448; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 233472; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMemoryClockRate: *v = 2619000; break; /* kHz, an H100 80GB HBM3's: 3.35 TB/s on 5,120 bits */
    case cudaDevAttrGlobalMemoryBusWidth: *v = 5120; break;
    default: *v = 0; break;
    }
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *fn, enum cudaFuncAttribute a, int v) {
    (void)fn;
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize && (v < 0 || v > 232448)) return cudaErrorInvalidValue;
    return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *at, const void *fn) {
    (void)fn;
    memset(at, 0, sizeof(*at));
    at->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
/* no register counts here: blocks an SM by threads and shared memory alone (an upper bound of the real figure) */
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *fn, int threads, size_t smem, unsigned flags) {
    (void)fn; (void)flags;
    if (threads <= 0 || threads > 1024) { *n = 0; return cudaErrorInvalidValue; }
    int by_t = 2048 / threads, by_s = smem ? (int)(233472 / (smem + 1024)) : 32;
    *n = by_t < by_s ? by_t : by_s;
    if (*n > 32) *n = 32;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "stub CUDA error"; }

/* memory: host memory, 256-byte aligned, the size kept in front */
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = NULL;
    if (g_used + n > total_bytes()) return cudaErrorMemoryAllocation;
    char *raw = calloc(1, n + 256);
    if (!raw) return cudaErrorMemoryAllocation;
    char *user = (char *)(((uintptr_t)raw + 256) & ~(uintptr_t)255);
    ((void **)user)[-1] = raw;
    ((size_t *)user)[-2] = n;
    g_used += n;
    *p = user;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    g_used -= ((size_t *)p)[-2];
    free(((void **)p)[-1]);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    *p = calloc(1, n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = total_bytes();
    *free_b = *total - g_used;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    (void)k;
    if (n) memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    (void)st;
    return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    if (n) memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    (void)st;
    return cudaMemset(d, v, n);
}

/* streams, events, graphs: handles that stand for nothing */
static char g_handles[4096];
static int g_next;
static void *handle(void) { return &g_handles[(g_next++) % (int)sizeof(g_handles)]; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = (cudaStream_t)handle(); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m) {
    (void)s; (void)m;
    g_capturing = 1;
    g_captured = 0;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    (void)s;
    g_capturing = 0;
    if (log_on()) fprintf(stderr, "stub-cuda: captured a graph of %d kernel launches\n", g_captured);
    *g = (cudaGraph_t)handle();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    (void)g; (void)flags;
    *e = (cudaGraphExec_t)handle();
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { (void)g; return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (cudaEvent_t)handle(); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { (void)f; return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 0.f; return cudaSuccess; }
#endif

#if defined(STUB_CUBLAS) /* no cuBLAS: the backend runs without its dense GEMM (as where none is available) */
typedef int stub_status; /* CUBLAS_STATUS_NOT_INITIALIZED */
#define STUB_NI 1
stub_status cublasCreate_v2(void **h) { *h = NULL; return STUB_NI; }
stub_status cublasDestroy_v2(void *h) { (void)h; return 0; }
stub_status cublasSetStream_v2(void *h, void *s) { (void)h; (void)s; return STUB_NI; }
stub_status cublasSetWorkspace_v2(void *h, void *w, size_t n) { (void)h; (void)w; (void)n; return STUB_NI; }
stub_status cublasSetMathMode(void *h, int m) { (void)h; (void)m; return STUB_NI; }
stub_status cublasGemmEx(void) { return STUB_NI; }
#endif
