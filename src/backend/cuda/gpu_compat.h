/* GPU portability: every kernel file includes this instead of a vendor header, so the same .cu compiles
 * with nvcc (CUDA, sm_90) and hipcc (ROCm, gfx11/gfx12 wave32, gfx9 wave64).
 * The warp width is a compile-time constant of the target (VLLMC_WARP_SIZE), never assumed 32; shuffles and
 * ballots take explicit full-warp masks; the packed int8 dot is one inline function per target. */
#ifndef VLLMC_GPU_COMPAT_H
#define VLLMC_GPU_COMPAT_H

#include <stdint.h>

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define VLLMC_HIP 1
typedef hipStream_t gpuStream_t;
typedef hipError_t gpuError_t;
typedef hipEvent_t gpuEvent_t;
typedef hipGraph_t gpuGraph_t;
typedef hipGraphExec_t gpuGraphExec_t;
#define gpuSuccess hipSuccess
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuStreamCaptureModeGlobal hipStreamCaptureModeGlobal
#define gpuGraphInstantiate(e, g) hipGraphInstantiate((e), (g), NULL, NULL, 0)
#define gpuFuncSetMaxDynamicSmem(fn, bytes) hipFuncSetAttribute((fn), hipFuncAttributeMaxDynamicSharedMemorySize, (bytes))
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy
#define gpuEventCreate hipEventCreate
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMemGetInfo hipMemGetInfo
#define gpuMemset hipMemset
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), 0)
#define gpuFreeHost hipHostFree
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuDeviceGetSMCount(n, dev) hipDeviceGetAttribute((n), hipDeviceAttributeMultiprocessorCount, (dev))
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#define gpuEventDefault hipEventDefault
#if defined(__GFX9__) && !defined(__GFX11__)
#define VLLMC_WARP_SIZE 64 /* CDNA / GCN: wave64 */
#else
#define VLLMC_WARP_SIZE 32 /* RDNA3 (gfx11) and RDNA4 (gfx12): wave32 (compiled with -mwavefrontsize32 default) */
#endif
typedef uint64_t lane_mask_t;
#define VLLMC_FULL_MASK (~0ull)
#if !defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
/* __syncwarp: a wave runs in lockstep; order its lanes' memory accesses (wave-scope fences) and keep the
 * compiler from moving them across (wave barrier). */
#define __syncwarp(...) \
    do { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"); __builtin_amdgcn_wave_barrier(); \
         __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"); } while (0)
#endif
/* __byte_perm(x, y, s) by one v_perm_b32. HIP's own (amd_device_functions.h) indexes an 8-byte array with the
 * selector's nibbles: with a selector not known at compile time (gemv_q.cu k4_scales, iq4_vals8, iq4_values4) the array
 * stays in scratch, or in LDS where the compiler gives each thread a slot (mm_kernel_colx: 29-31 KB a CTA), a load for
 * each byte, and on gfx11 the kernels spilled VGPRs (docs/ROCM.md). The same bytes: nibble i of s (3 bits; bit 3 and
 * the upper 16 bits unused, as CUDA's) picks result byte i from x (0-3) or y (4-7); v_perm_b32 (src0, src1, sel) takes
 * byte i of sel as the index into src1 (0-3) and src0 (4-7). */
static __device__ __forceinline__ unsigned int gpu_byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    uint32_t t = s & 0x7777u;                 /* nibbles n0 .. n3 */
    t = (t | (t << 8)) & 0x00FF00FFu;         /* n0 | n1 << 4 in byte 0, n2 | n3 << 4 in byte 2 */
    t = (t | (t << 4)) & 0x0F0F0F0Fu;         /* n0, n1, n2, n3 in bytes 0 .. 3 */
    return __builtin_amdgcn_perm(y, x, t);
}
#define __byte_perm(x, y, s) gpu_byte_perm((x), (y), (s))
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#define VLLMC_CUDA_DEVICE 1
typedef cudaStream_t gpuStream_t;
typedef cudaError_t gpuError_t;
typedef cudaEvent_t gpuEvent_t;
typedef cudaGraph_t gpuGraph_t;
typedef cudaGraphExec_t gpuGraphExec_t;
#define gpuSuccess cudaSuccess
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define gpuGraphInstantiate(e, g) cudaGraphInstantiate((e), (g), 0)
#define gpuFuncSetMaxDynamicSmem(fn, bytes) cudaFuncSetAttribute((fn), cudaFuncAttributeMaxDynamicSharedMemorySize, (bytes))
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy
#define gpuEventCreate cudaEventCreate
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMemset cudaMemset
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuHostAlloc(p, n) cudaHostAlloc((p), (n), cudaHostAllocDefault)
#define gpuFreeHost cudaFreeHost
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuDeviceGetSMCount(n, dev) cudaDeviceGetAttribute((n), cudaDevAttrMultiProcessorCount, (dev))
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define gpuEventDefault cudaEventDefault
#define VLLMC_WARP_SIZE 32
typedef uint32_t lane_mask_t;
#define VLLMC_FULL_MASK 0xffffffffu
#endif

#define GPU_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Activation rows per group of the prefill mat-vec (gemv_q.cu mm_kernel<NA>; the launcher sizes the grid with
 * it, so host and device code must agree: the build states the target family, VLLMC_HIP_ARCH_GFX11 for
 * HIP_ARCH=gfx11*, see the Makefile). gfx11: 4. At 8, ROCm 5.2's LLVM holds the kernel to 128 VGPRs on gfx11
 * and spills 22 (80 bytes of scratch); at 4 it takes 124 and spills none. The host-side table (gpu_target.c,
 * mm_prefill_act) states the same values and tests/test_gpu_target.c checks the two agree. */
#if defined(VLLMC_HIP) && defined(VLLMC_HIP_ARCH_GFX11)
#define VLLMC_MM_PREFILL_ACT 4
#else
#define VLLMC_MM_PREFILL_ACT 8
#endif
#if defined(__GFX11__) && !defined(VLLMC_HIP_ARCH_GFX11)
#error "gfx11 device code needs -DVLLMC_HIP_ARCH_GFX11 (the Makefile adds it for HIP_ARCH=gfx11*): it sizes the prefill mat-vec"
#endif
#if defined(VLLMC_HIP_ARCH_GFX11) && defined(__HIP_DEVICE_COMPILE__) && !defined(__GFX11__)
#error "VLLMC_HIP_ARCH_GFX11 is set but this device pass is not gfx11: build one HIP_ARCH family at a time"
#endif

/* Full-warp butterfly exchange with an explicit mask. */
template <typename T> static __device__ __forceinline__ T shfl_xor(T v, int off) {
#if defined(VLLMC_HIP)
    return __shfl_xor(v, off, VLLMC_WARP_SIZE);
#else
    return __shfl_xor_sync(VLLMC_FULL_MASK, v, off, VLLMC_WARP_SIZE);
#endif
}

/* The value of the lane off below, within groups of 32 lanes (a lane below off keeps its own). */
template <typename T> static __device__ __forceinline__ T shfl_up32(T v, int off) {
#if defined(VLLMC_HIP)
    return __shfl_up(v, off, 32);
#else
    return __shfl_up_sync(VLLMC_FULL_MASK, v, off, 32);
#endif
}

/* Read lane src's value (full-warp mask). */
template <typename T> static __device__ __forceinline__ T shfl_idx(T v, int src) {
#if defined(VLLMC_HIP)
    return __shfl(v, src, VLLMC_WARP_SIZE);
#else
    return __shfl_sync(VLLMC_FULL_MASK, v, src, VLLMC_WARP_SIZE);
#endif
}

/* Read-only cached load (the non-coherent path on NVIDIA; a plain load elsewhere). (Cache hints on the weight loads
 * measured slower: BENCHMARKS.md "the weight loads' cache hints".) */
template <typename T> static __device__ __forceinline__ T gpu_ldg(const T *p) {
#if defined(VLLMC_HIP)
    return *p;
#else
    return __ldg(p);
#endif
}

/* A load through L2 (past this SM's L1): for values other CTAs of the running grid wrote (the fused norm + quantize of
 * gemv_q.cu reads them after an acquire fence). HIP's __threadfence invalidates the CU's L1, so a plain load there. */
template <typename T> static __device__ __forceinline__ T gpu_ldcg(const T *p) {
#if defined(VLLMC_HIP)
    return *p;
#else
    return __ldcg(p);
#endif
}

/* Full-warp reductions. */
static __device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
    for (int off = VLLMC_WARP_SIZE / 2; off > 0; off >>= 1) {
#if defined(VLLMC_HIP)
        v += __shfl_xor(v, off, VLLMC_WARP_SIZE);
#else
        v += __shfl_xor_sync(VLLMC_FULL_MASK, v, off, VLLMC_WARP_SIZE);
#endif
    }
    return v;
}

/* Sum over an aligned group of 32 lanes (a whole warp on NVIDIA and wave32; half a wave64), for kernels
 * that give each 32-lane group its own work. */
static __device__ __forceinline__ float group32_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += shfl_xor(v, off);
    return v;
}

static __device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
    for (int off = VLLMC_WARP_SIZE / 2; off > 0; off >>= 1) {
#if defined(VLLMC_HIP)
        v = fmaxf(v, __shfl_xor(v, off, VLLMC_WARP_SIZE));
#else
        v = fmaxf(v, __shfl_xor_sync(VLLMC_FULL_MASK, v, off, VLLMC_WARP_SIZE));
#endif
    }
    return v;
}

static __device__ __forceinline__ int warp_reduce_sum_int(int v) {
#pragma unroll
    for (int off = VLLMC_WARP_SIZE / 2; off > 0; off >>= 1) {
#if defined(VLLMC_HIP)
        v += __shfl_xor(v, off, VLLMC_WARP_SIZE);
#else
        v += __shfl_xor_sync(VLLMC_FULL_MASK, v, off, VLLMC_WARP_SIZE);
#endif
    }
    return v;
}

/* c + dot(4 x int8 of a, 4 x int8 of b): dp4a on NVIDIA, sudot4 (signed form) on RDNA3/4, a scalar
 * fallback elsewhere. Exact in int32 on every target. gfx11 lacks the sdot4 builtin (it crashes
 * ROCm 5.2's clang): it takes the sudot4 form with both operands signed. */
static __device__ __forceinline__ int dot4_i8(int a, int b, int c) {
#if defined(VLLMC_HIP)
#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1200__) || defined(__gfx1201__)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#elif defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx1030__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    const int8_t *pa = (const int8_t *)&a, *pb = (const int8_t *)&b;
    return c + pa[0] * pb[0] + pa[1] * pb[1] + pa[2] * pb[2] + pa[3] * pb[3];
#endif
#else
    return __dp4a(a, b, c);
#endif
}

/* c + dot(4 x uint8 of a, 4 x int8 of b) on NVIDIA (dp4a.u32.s32): lets a Q4_K high nibble be dotted in place, as
 * 16 x its value, without the shift that would move it down (gemv_q.cu k4_term). Not used on HIP. */
#if !defined(VLLMC_HIP)
static __device__ __forceinline__ int dot4_u8s8(unsigned a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#endif

/* ---- programmatic dependent launch (PDL) ----
 * On sm_90 a kernel launched by gpu_launch while gpu_pdl.on is set (and the stream's previous operation
 * was a kernel) may start while that kernel still runs. Such a kernel calls gpu_pdl_wait() before it
 * reads anything an earlier kernel writes and before it writes anything: what it does before the wait
 * may only read data no kernel writes (weights), e.g. prefetch them into L2. gpu_pdl_wait() returns once
 * every earlier kernel has completed with its writes visible (each of them waited in turn), so the
 * ordering is the stream's. gpu_pdl_trigger() lets the next kernel launch now. Every kernel launched
 * through gpu_launch must call gpu_pdl_wait(); kernels launched with <<< >>> are ordered as usual. On
 * HIP, and without the flag, gpu_launch is a plain launch and both calls are no-ops. */
struct gpu_pdl_state {
    bool on;           /* launch with the programmatic-serialization attribute */
    bool after_kernel; /* the stream's last operation was a kernel launch */
};
extern thread_local struct gpu_pdl_state gpu_pdl;
/* A shared-memory carve-out (percent of the most an SM has) every kernel launched through gpu_launch prefers, -1 the
 * driver's choice (VLLMC_CUDA_CARVEOUT, comparisons: kernels of different shared-memory needs side by side make an SM
 * change its L1 / shared split between them). CUDA only. */
extern int gpu_carveout;
void gpu_apply_carveout(const void *k);

static __device__ __forceinline__ void gpu_pdl_wait(void) {
#if !defined(VLLMC_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void gpu_pdl_trigger(void) {
#if !defined(VLLMC_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#if !defined(VLLMC_HIP)
/* The two halves of the cluster's barrier (every thread of every CTA of the cluster, warps converged): the arrive
 * releases this thread's earlier writes (distributed shared memory included) to the cluster, the wait returns once
 * every thread has arrived and acquires theirs. Work between them overlaps the barrier. */
static __device__ __forceinline__ void gpu_cluster_arrive(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
/* an arrive that orders nothing: with the wait after it, only that every CTA of the cluster is running (before a CTA's
 * distributed shared memory is touched by another) */
static __device__ __forceinline__ void gpu_cluster_arrive_relaxed(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
static __device__ __forceinline__ void gpu_cluster_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
#endif
/* Hint: bring the 128-byte line at p into this SM's L1 (no register written, nothing to wait on). HIP: nothing. */
static __device__ __forceinline__ void gpu_prefetch_l1(const void *p) {
#if !defined(VLLMC_HIP)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}
/* Hint: bring the 128-byte line at p into L2 (no register written, no fault on a valid address). */
static __device__ __forceinline__ void gpu_prefetch_l2(const void *p) {
#if !defined(VLLMC_HIP)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

/* 16 bytes from global memory (16-byte aligned, data no kernel of the step writes) to shared memory: an
 * asynchronous copy on sm_80 and later (no register held while it is in flight, so it can be issued before the
 * dependency wait and finish behind it), a plain one elsewhere. gpu_cp_wait_group() waits for the thread's
 * copies; other threads see them after the barrier that follows. */
static __device__ __forceinline__ void gpu_cp16(void *smem, const void *g) {
#if !defined(VLLMC_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(smem)), "l"(g) : "memory");
#else
    *(float4 *)smem = *(const float4 *)g;
#endif
}
/* The thread's copies issued since the last commit form a group; gpu_cp_wait_group<N>() waits until at most N of
 * its groups are still in flight (a pipeline of N + 1 stages). */
static __device__ __forceinline__ void gpu_cp_commit(void) {
#if !defined(VLLMC_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void gpu_cp_wait_group(void) {
#if !defined(VLLMC_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

template <typename... P, typename... A>
static inline void gpu_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t s, A... args) {
#if !defined(VLLMC_HIP)
    if (gpu_carveout >= 0) gpu_apply_carveout((const void *)k);
    if (gpu_pdl.on && gpu_pdl.after_kernel) {
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = s;
        cfg.attrs = at; cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...) == cudaSuccess) return;
        (void)cudaGetLastError(); /* not taken: launch it the plain way (which reports a real error) */
    }
#endif
    k<<<grid, block, smem, s>>>(static_cast<P>(args)...);
    gpu_pdl.after_kernel = true;
}

#if !defined(VLLMC_HIP)
/* gpu_launch with a cluster of cl CTAs (the grid a multiple of it; at most 8 CTAs, the portable size). Kernels that use
 * the cluster's barrier or distributed shared memory; CUDA only (HIP has no clusters). A launch that fails leaves its
 * error for the stream's next check, as a plain launch does. */
template <typename... P, typename... A>
static inline void gpu_launch_cluster(void (*k)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t s, dim3 cl, A... args) {
    if (gpu_carveout >= 0) gpu_apply_carveout((const void *)k);
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cl.x; at[0].val.clusterDim.y = cl.y; at[0].val.clusterDim.z = cl.z;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = s;
    cfg.attrs = at; cfg.numAttrs = gpu_pdl.on && gpu_pdl.after_kernel ? 2 : 1;
    if (cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...) != cudaSuccess && cfg.numAttrs == 2) {
        (void)cudaGetLastError(); /* without the programmatic serialization: ordered as a plain launch */
        cfg.numAttrs = 1;
        (void)cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
    }
    gpu_pdl.after_kernel = true;
}
#endif

/* f16 bits -> f32 by the conversion instruction: the value of fp16_to_fp32 (quant/blocks.h, the portable form the
 * CPU shares) for every half, NaN payloads aside, in one instruction where the portable code takes a dozen. */
static __device__ __forceinline__ float gpu_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

#endif
