/* What a chain of dependent launches costs apart from the work in them: a graph of N launches with programmatic
 * dependent launch (PDL), replayed, timed by events (the median of 7 replays, us a launch).
 *   empty  kernels that only wait and release, at grids of 2 to 1,544 CTAs of 160 threads, with and without PDL: the
 *          launch boundary of a decode step's mat-vecs (1,152 CTAs: gate + up; 1,544: the GDN in-proj);
 *   code   K dependent integer steps after the wait as straight code (K instructions: 8, 32 or 96 KB), one kernel or 8 distinct ones in turn (each launch's code is then not in the
 *          SM's instruction caches), with or without a 96 MB read between launches (the weight stream's eviction of
 *          L2, code included): does a kernel's code size cost the chain?
 *   sync   the same dependency inside one persistent grid (every CTA resident: a cooperative launch), 2,000 in a row:
 *          cooperative groups' grid.sync(); a barrier of one atomic a CTA and a poll on a generation word; and a
 *          one-to-all flag (CTA i mod G raises generation i with a release store once it has seen i - 1, every CTA
 *          polls for it): what a persistent decode kernel would pay a stage in place of a launch boundary.
 * usage: bench_chain [empty|code|sync]   (all without an argument) */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__global__ void k_empty(unsigned *p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    if (p && threadIdx.x == 0 && blockIdx.x == 0) p[0]++;
}
template <int K, int I> __global__ void __launch_bounds__(160) k_code(unsigned *p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned x = threadIdx.x + I;
#pragma unroll
    for (int i = 0; i < K; i++) asm volatile("mad.lo.u32 %0, %0, 3, 1;" : "+r"(x)); /* (volatile: K instructions) */
    if (x == 0x12345u) p[1] = x; /* (keeps the chain) */
}
__global__ void k_flush(const uint4 *src, size_t n, unsigned *p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc ^= __ldcs(src + i).x;
    if (acc == 0x1234567u) p[2] = 1;
}
static __device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
/* MODE 0 grid.sync(), 1 atomic arrive + generation poll, 2 one-to-all flag chain; p[0..1] zero at the start */
template <int MODE> __global__ void __launch_bounds__(160) k_sync(unsigned *p, int n) {
    for (int i = 1; i <= n; i++) {
        if (MODE == 0) {
            cooperative_groups::this_grid().sync();
        } else if (MODE == 1) {
            __syncthreads();
            if (threadIdx.x == 0) {
                if (atomicAdd(p, 1u) == (unsigned)i * gridDim.x - 1) st_release(p + 1, (unsigned)i); /* the last one in */
                else
                    while (ld_acquire(p + 1) < (unsigned)i) { }
            }
            __syncthreads();
        } else {
            if (threadIdx.x == 0) {
                if (blockIdx.x == (unsigned)(i % (int)gridDim.x)) {
                    while (ld_acquire(p + 1) < (unsigned)(i - 1)) { }
                    st_release(p + 1, (unsigned)i);
                } else
                    while (ld_acquire(p + 1) < (unsigned)i) { }
            }
            __syncthreads();
        }
    }
}
typedef void (*kfn)(unsigned *);
template <int K> static void fill8(kfn *f) {
    f[0] = k_code<K, 0>; f[1] = k_code<K, 1>; f[2] = k_code<K, 2>; f[3] = k_code<K, 3>;
    f[4] = k_code<K, 4>; f[5] = k_code<K, 5>; f[6] = k_code<K, 6>; f[7] = k_code<K, 7>;
}
/* the median of n (n <= 16) */
static float median(const float *v, int n) {
    float t[16];
    for (int i = 0; i < n; i++) t[i] = v[i];
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (t[j] < t[i]) { float x = t[i]; t[i] = t[j]; t[j] = x; }
    return t[n / 2];
}
static cudaError_t launch(cudaStream_t s, const void *fn, dim3 g, dim3 b, void **args, bool pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = g; cfg.blockDim = b; cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelExC(&cfg, fn, args);
}
/* the median of 7 replays of the captured graph, us a launch of N; negative where the graph does not instantiate */
static double replay(cudaStream_t s, cudaGraph_t g, int N) {
    cudaGraphExec_t ge;
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) return -1;
    for (int w = 0; w < 3; w++) cudaGraphLaunch(ge, s);
    cudaStreamSynchronize(s);
    float t[7], ms;
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (int r = 0; r < 7; r++) {
        cudaEventRecord(a, s); cudaGraphLaunch(ge, s); cudaEventRecord(b, s); cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        t[r] = ms;
    }
    cudaEventDestroy(a); cudaEventDestroy(b); cudaGraphExecDestroy(ge);
    return median(t, 7) * 1000.0 / N;
}
int main(int argc, char **argv) {
    const bool all = argc < 2, empty = all || !strcmp(argv[1], "empty"), code = all || !strcmp(argv[1], "code"),
               sync = all || !strcmp(argv[1], "sync");
    if (argc > 2 || !(empty || code || sync)) {
        fprintf(stderr, "usage: bench_chain [empty|code|sync]\n");
        return 2;
    }
    unsigned *d;
    CK(cudaMalloc(&d, 64));
    CK(cudaMemset(d, 0, 64));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    if (empty) {
        const int N = 300, grids[] = {2, 132, 528, 1152, 1544};
        for (int pdl = 0; pdl < 2; pdl++)
            for (int gi = 0; gi < 5; gi++) {
                cudaGraph_t g;
                CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                for (int i = 0; i < N; i++) {
                    void *a[] = {&d};
                    CK(launch(s, (const void *)k_empty, dim3(grids[gi]), dim3(160), a, pdl));
                }
                CK(cudaStreamEndCapture(s, &g));
                printf("empty pdl=%d grid=%5d: %6.2f us a launch (graphs of %d)\n", pdl, grids[gi], replay(s, g, N), N);
                cudaGraphDestroy(g);
            }
    }
    if (code) {
        const size_t fb = 96ull << 20;
        uint4 *fl;
        CK(cudaMalloc(&fl, fb));
        CK(cudaMemset(fl, 1, fb));
        size_t fn = fb / 16;
        struct V { const char *name; kfn f[8]; } v[3] = {{"straight 512", {}}, {"straight 2048", {}}, {"straight 6144", {}}};
        fill8<512>(v[0].f); fill8<2048>(v[1].f); fill8<6144>(v[2].f);
        const int grids[] = {132, 528};
        for (int flush = 0; flush < 2; flush++)
            for (int gi = 0; gi < 2; gi++)
                for (int vi = 0; vi < 3; vi++)
                    for (int distinct = 0; distinct < 2; distinct++) {
                        const int N = flush ? 64 : 256;
                        cudaGraph_t g;
                        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                        for (int i = 0; i < N; i++) {
                            if (flush) {
                                void *a[] = {&fl, &fn, &d};
                                CK(launch(s, (const void *)k_flush, dim3(528), dim3(256), a, true));
                            }
                            void *a[] = {&d};
                            CK(launch(s, (const void *)v[vi].f[distinct ? i % 8 : 0], dim3(grids[gi]), dim3(160), a, true));
                        }
                        CK(cudaStreamEndCapture(s, &g));
                        printf("code flush=%d grid=%4d %-14s %s: %7.2f us a launch%s (graphs of %d)\n", flush, grids[gi], v[vi].name,
                               distinct ? "8 kernels" : "1 kernel ", replay(s, g, N), flush ? " and its read" : "", N);
                        cudaGraphDestroy(g);
                    }
        cudaFree(fl);
    }
    if (sync) {
        const char *names[3] = {"grid.sync()", "atomic + poll", "one-to-all flag"};
        const void *fns[3] = {(const void *)k_sync<0>, (const void *)k_sync<1>, (const void *)k_sync<2>};
        int sms = 0, dev = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        const int per[] = {1, 2, 4};
        for (int mi = 0; mi < 3; mi++)
            for (int pi = 0; pi < 3; pi++) {
                int fit = 0;
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, (void (*)(unsigned *, int))fns[mi], 160, 0));
                if (fit < per[pi]) continue;
                int G = sms * per[pi], n = 2000;
                float t[5], ms;
                for (int r = 0; r < 5; r++) {
                    CK(cudaMemset(d, 0, 64));
                    void *a[] = {&d, &n};
                    cudaEvent_t e0, e1;
                    cudaEventCreate(&e0); cudaEventCreate(&e1);
                    cudaEventRecord(e0, s);
                    CK(cudaLaunchCooperativeKernel(fns[mi], dim3(G), dim3(160), a, 0, s));
                    cudaEventRecord(e1, s);
                    CK(cudaEventSynchronize(e1));
                    cudaEventElapsedTime(&ms, e0, e1);
                    t[r] = ms;
                    cudaEventDestroy(e0); cudaEventDestroy(e1);
                }
                printf("sync %-16s grid=%4d: %6.2f us a dependency (median of 5 launches of %d)\n", names[mi], G, median(t, 5) * 1000 / n, n);
            }
    }
    CK(cudaGetLastError());
    return 0;
}
