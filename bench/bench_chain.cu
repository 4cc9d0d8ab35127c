/* What a chain of dependent launches costs apart from the work in them: a graph of N launches with programmatic
 * dependent launch (PDL), replayed, timed by events (the median of 7 replays, us a launch).
 *   empty  kernels that only wait and release, at grids of 2 to 1,544 CTAs of 160 threads, with and without PDL: the
 *          launch boundary of a decode step's mat-vecs (1,152 CTAs: gate + up; 1,544: the GDN in-proj);
 *   code   K dependent integer steps after the wait, as a loop (a few instructions of code) or straight (K
 *          instructions: 8, 32 or 96 KB), one kernel or 8 distinct ones in turn (each launch's code is then not in the
 *          SM's instruction caches), with or without a 96 MB read between launches (the weight stream's eviction of
 *          L2, code included): does a kernel's code size cost the chain?
 * usage: bench_chain [empty|code]   (both without an argument) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__global__ void k_empty(unsigned *p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    if (p && threadIdx.x == 0 && blockIdx.x == 0) p[0]++;
}
template <int K, bool STRAIGHT, int I> __global__ void __launch_bounds__(160) k_code(unsigned *p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned x = threadIdx.x + I;
    if (STRAIGHT) {
#pragma unroll
        for (int i = 0; i < K; i++) asm volatile("mad.lo.u32 %0, %0, 3, 1;" : "+r"(x));
    } else {
#pragma unroll 1
        for (int i = 0; i < K; i++) asm volatile("mad.lo.u32 %0, %0, 3, 1;" : "+r"(x));
    }
    if (x == 0x12345u) p[1] = x; /* (keeps the chain) */
}
__global__ void k_flush(const uint4 *src, size_t n, unsigned *p) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc ^= __ldcs(src + i).x;
    if (acc == 0x1234567u) p[2] = 1;
}
typedef void (*kfn)(unsigned *);
template <int K, bool S> static void fill8(kfn *f) {
    f[0] = k_code<K, S, 0>; f[1] = k_code<K, S, 1>; f[2] = k_code<K, S, 2>; f[3] = k_code<K, S, 3>;
    f[4] = k_code<K, S, 4>; f[5] = k_code<K, S, 5>; f[6] = k_code<K, S, 6>; f[7] = k_code<K, S, 7>;
}
static cudaError_t launch(cudaStream_t s, const void *fn, dim3 g, dim3 b, void **args, bool pdl) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDim = g; cfg.blockDim = b; cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelExC(&cfg, fn, args);
}
/* the median of 7 replays of the captured graph, us a launch of N */
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
    for (int i = 0; i < 7; i++)
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) { float x = t[i]; t[i] = t[j]; t[j] = x; }
    cudaEventDestroy(a); cudaEventDestroy(b); cudaGraphExecDestroy(ge);
    return t[3] * 1000.0 / N;
}
int main(int argc, char **argv) {
    const bool all = argc < 2, empty = all || !strcmp(argv[1], "empty"), code = all || !strcmp(argv[1], "code");
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
        struct V { const char *name; kfn f[8]; } v[6] = {{"loop 512", {}}, {"straight 512", {}}, {"loop 2048", {}},
                                                        {"straight 2048", {}}, {"loop 6144", {}}, {"straight 6144", {}}};
        fill8<512, false>(v[0].f); fill8<512, true>(v[1].f); fill8<2048, false>(v[2].f);
        fill8<2048, true>(v[3].f); fill8<6144, false>(v[4].f); fill8<6144, true>(v[5].f);
        const int grids[] = {132, 528};
        for (int flush = 0; flush < 2; flush++)
            for (int gi = 0; gi < 2; gi++)
                for (int vi = 0; vi < 6; vi++)
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
    CK(cudaGetLastError());
    return 0;
}
