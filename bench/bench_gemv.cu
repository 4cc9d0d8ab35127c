/* GPU quantized mat-vec (the CUDA backend's matmul kernel on repacked weights): for each decode kernel
 * choice (cu_mm_cfg), with plain launches and with programmatic dependent launch, check against the CPU
 * reference (vec_dot_ref on the same quantized activation: error / max |y| under 1e-5), then time it on
 * the decode shapes of Qwen3.5-4B and report achieved GB/s. Each timing cycles through enough weight
 * copies (>= 512 MB) that nothing is served from L2. usage: bench_gemv [reps] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define CK(x) do { gpuError_t e_ = (x); if (e_ != gpuSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, gpuGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static float rndf() { return (rnd() >> 8) * (1.0f / 16777216.0f); }

static void fill_weights(uint32_t type, uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd();
    const size_t bs = quant_traits(type)->type_size;
    for (size_t b = 0; b < bytes / bs; b++) {
        uint8_t *blk = p + b * bs;
        ggml_half d = fp32_to_fp16(1e-3f * (0.5f + rndf())), dm = fp32_to_fp16(5e-4f * (0.5f + rndf()));
        if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) { memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); }
        else if (type == GGML_TYPE_Q6_K) memcpy(blk + 208, &d, 2);
        else if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_IQ4_XS) memcpy(blk, &d, 2);
    }
}

struct shape { uint32_t type; int64_t n_cols, n_rows; int n_fused; const char *what; };

static double median_us(std::vector<float> &t) { std::sort(t.begin(), t.end()); return t[t.size() / 2]; }
/* the floor of a kernel boundary: a kernel that waits for the one before and does nothing else */
static __global__ void empty_kernel(int) { gpu_pdl_wait(); gpu_pdl_trigger(); }
/* n grid-wide barriers: thread 0 of each CTA adds one to the counter and waits until every CTA has added its i-th */
static __global__ void barrier_kernel(unsigned *cnt, int n) {
    for (int i = 1; i <= n; i++) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(cnt, 1u);
            const unsigned tgt = (unsigned)i * gridDim.x;
            unsigned v;
            do { asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(cnt) : "memory"); } while (v < tgt);
        }
        __syncthreads();
    }
}
/* The measured read bandwidth (issue #5's ">= 80% of measured bandwidth"): a grid of 8 CTAs of 512 threads an SM
 * reading 1 GiB by 16-byte loads (grid-stride), each byte once a pass; the median of 7 passes after a warm-up. */
static __global__ void read_kernel(const uint4 *p, size_t n, uint32_t *sink) {
    uint32_t a = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = gpu_ldg(p + i);
        a ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (a == 0x9e3779b9u) *sink = a; /* (keeps the loads) */
}
static double read_bandwidth(gpuStream_t st) {
    const size_t bytes = (size_t)1 << 30;
    uint4 *p;
    uint32_t *sink;
    CK(gpuMalloc((void **)&p, bytes));
    CK(gpuMalloc((void **)&sink, 4));
    CK(gpuMemset(p, 0x5a, bytes));
    int dev = 0, sms = 0;
    CK(gpuGetDevice(&dev));
    CK(gpuDeviceGetSMCount(&sms, dev));
    gpuEvent_t e0, e1;
    CK(gpuEventCreate(&e0)); CK(gpuEventCreate(&e1));
    std::vector<float> t;
    for (int k = 0; k < 8; k++) {
        CK(gpuEventRecord(e0, st));
        read_kernel<<<sms * 8, 512, 0, st>>>(p, bytes / 16, sink);
        CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
        float ms; CK(gpuEventElapsedTime(&ms, e0, e1));
        if (k) t.push_back(ms);
    }
    const double gbs = bytes / (median_us(t) * 1e-3) / 1e9;
    printf("measured read bandwidth: %.0f GB/s (1 GiB, 16-byte loads, %d x 512 threads, median of 7)\n", gbs, sms * 8);
    CK(gpuFree(p)); CK(gpuFree(sink));
    CK(gpuEventDestroy(e0)); CK(gpuEventDestroy(e1));
    return gbs;
}
static void boundary_floor(gpuStream_t st) {
    gpuEvent_t e0, e1;
    CK(gpuEventCreate(&e0)); CK(gpuEventCreate(&e1));
    for (int pdl = 0; pdl < 2; pdl++)
        for (int ctas : {1, 132, 264, 528})
            for (int thr : {32, 256}) {
                gpu_pdl.on = pdl == 1;
                std::vector<float> t;
                for (int k = 0; k < 5; k++) {
                    gpu_pdl.after_kernel = false;
                    CK(gpuEventRecord(e0, st));
                    for (int i = 0; i < 500; i++) gpu_launch(empty_kernel, dim3(ctas), dim3(thr), 0, st, 0);
                    CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
                    float ms; CK(gpuEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000.f / 500);
                }
                printf("empty kernel chain%s: %3d CTAs x %3d threads: %.2f us a launch\n", pdl ? " with PDL" : "", ctas, thr, median_us(t));
            }
    /* the same chain captured as a graph and replayed (how a decode step runs) */
    for (int pdl = 0; pdl < 2; pdl++)
        for (int ctas : {1, 264}) {
            gpu_pdl.on = pdl == 1;
            gpu_pdl.after_kernel = false;
            gpuGraph_t g;
            gpuGraphExec_t ge;
            CK(gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal));
            for (int i = 0; i < 300; i++) gpu_launch(empty_kernel, dim3(ctas), dim3(256), 0, st, 0);
            CK(gpuStreamEndCapture(st, &g));
            CK(gpuGraphInstantiate(&ge, g));
            CK(gpuGraphLaunch(ge, st));
            CK(gpuStreamSynchronize(st));
            std::vector<float> t;
            for (int k = 0; k < 7; k++) {
                CK(gpuEventRecord(e0, st));
                CK(gpuGraphLaunch(ge, st));
                CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
                float ms; CK(gpuEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000.f / 300);
            }
            printf("empty kernel chain in a graph%s: %3d CTAs x 256 threads: %.2f us a kernel\n", pdl ? " with PDL" : "", ctas, median_us(t));
            CK(gpuGraphExecDestroy(ge)); CK(gpuGraphDestroy(g));
        }
    /* a grid-wide barrier inside one kernel (every CTA resident), the alternative to a kernel boundary */
    unsigned *cnt;
    CK(gpuMalloc((void **)&cnt, 4));
    int sms = 132, dev = 0;
    CK(gpuGetDevice(&dev)); CK(gpuDeviceGetSMCount(&sms, dev));
    for (int per : {1, 2}) {
        std::vector<float> t;
        for (int k = 0; k < 5; k++) {
            CK(gpuMemset(cnt, 0, 4));
            CK(gpuEventRecord(e0, st));
            barrier_kernel<<<sms * per, 256, 0, st>>>(cnt, 1000);
            CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
            float ms; CK(gpuEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000.f / 1000);
        }
        printf("grid barrier, %d CTAs x 256 threads (%d an SM): %.2f us a barrier\n", sms * per, per, median_us(t));
    }
    CK(gpuFree(cnt));
    gpu_pdl.on = false;
    CK(gpuEventDestroy(e0)); CK(gpuEventDestroy(e1));
}

int main(int argc, char **argv) {
    const bool l2 = argc > 1 && !strcmp(argv[1], "l2");
    if (l2) { argv++; argc--; }
    /* the backend's switches this tool's launches follow (vllmc reads them at backend creation) */
    if (getenv("VLLMC_CUDA_MMA")) cu_mm_cfg.mma = atoi(getenv("VLLMC_CUDA_MMA")) & 8191; /* (the backend's mask) */
    if (getenv("VLLMC_CUDA_COLS_LB")) cu_mm_cfg.cols_lb = atoi(getenv("VLLMC_CUDA_COLS_LB")) & 31;
    if (getenv("VLLMC_CUDA_LMH")) { /* ns[,rows], as the backend reads it */
        const char *cm = strchr(getenv("VLLMC_CUDA_LMH"), ',');
        backend_cuda_set_lmh(atoi(getenv("VLLMC_CUDA_LMH")), cm ? atoi(cm + 1) : 0);
    }
    if (getenv("VLLMC_CUDA_MMX_ROWS")) cu_mmx_rows = atoi(getenv("VLLMC_CUDA_MMX_ROWS"));
    if (getenv("VLLMC_CUDA_LMH_CO")) cu_lmh_co = std::min(std::max(atoi(getenv("VLLMC_CUDA_LMH_CO")), 0), 4);
    if (getenv("VLLMC_CUDA_CARVEOUT")) gpu_carveout = atoi(getenv("VLLMC_CUDA_CARVEOUT"));
    if (getenv("VLLMC_CUDA_COLX")) cu_mm_cfg.colx = std::min(std::max(atoi(getenv("VLLMC_CUDA_COLX")), 0), 2);
    const int reps = argc > 1 ? atoi(argv[1]) : 30;
    std::vector<shape> shapes = {
        {GGML_TYPE_Q4_K, 2560, 9216, 1, "ffn_gate (qwen35-4b)"},
        {GGML_TYPE_Q4_K, 2560, 9216, 2, "ffn_gate+ffn_up fused"},
        {GGML_TYPE_Q4_K, 9216, 2560, 1, "ffn_down Q4_K"},
        {GGML_TYPE_Q6_K, 9216, 2560, 1, "ffn_down Q6_K"},
        {GGML_TYPE_Q4_K, 2560, 8192, 1, "attn_qkv (qwen35-4b)"},
        {GGML_TYPE_Q4_K, 4096, 2560, 1, "ssm_out / attn_output"},
        {GGML_TYPE_Q6_K, 2560, 248320, 1, "LM head Q6_K"},
        {GGML_TYPE_Q6_K, 2560, 12288, 1, "GDN in-proj Q6_K rows"},
        {GGML_TYPE_Q8_0, 2560, 8192, 1, "Q8_0 2560x8192"},
        {GGML_TYPE_Q4_K, 2048, 512 * 8, 1, "MoE 8 experts gate (2048x4096)"},
    };
    /* BENCH_GEMV_LARGE=1: the LM head's shape in each decode weight type (issue #5's >= 80% of the measured bandwidth
     * on large matrices) */
    if (getenv("BENCH_GEMV_LARGE") && atoi(getenv("BENCH_GEMV_LARGE")))
        for (uint32_t t : {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_IQ4_XS})
            shapes.push_back({t, 2560, 248320, 1, "LM head shape, large"});
    /* BENCH_GEMV_TYPES=1: the decode's gate + up and down shapes in the other weight types (mm_kernel_colx) */
    if (getenv("BENCH_GEMV_TYPES") && atoi(getenv("BENCH_GEMV_TYPES")))
        for (uint32_t t : {GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0}) {
            shapes.push_back({t, 2560, 9216, 2, "gate + up shape"});
            shapes.push_back({t, 9216, 2560, 1, "ffn_down shape"});
        }
    printf("%-32s %5s %6s %7s %5s %8s %9s %8s %s\n", "shape", "type", "n_cols", "n_rows", "fused", "MB", "us", "GB/s", "max err / max |y|");
    gpuStream_t st;
    CK(gpuStreamCreate(&st));
    double read_gbs = 0;
    if (l2) {
        boundary_floor(st);
        read_gbs = read_bandwidth(st);
    }
    std::vector<double> gbs_all;
    for (const shape &s : shapes) {
        const uint64_t rs = quant_row_size(s.type, s.n_cols), stride = cu_weight_row_stride(s.type, s.n_cols);
        const size_t gguf_bytes = rs * s.n_rows, dev_bytes = stride * s.n_rows;
        std::vector<uint8_t> w(gguf_bytes), packed(dev_bytes);
        fill_weights(s.type, w.data(), gguf_bytes);
        cu_repack_rows(s.type, w.data(), s.n_cols, s.n_rows, packed.data());
        /* round trip of the repack */
        std::vector<uint8_t> back(gguf_bytes);
        cu_unpack_rows(s.type, packed.data(), s.n_cols, s.n_rows, back.data());
        const bool rt = back == w;
        /* activation: quantize on the CPU (the kernels' quantizers are checked by test_cuda_ops) */
        std::vector<float> x(s.n_cols);
        for (auto &v : x) v = 2.f * rndf() - 1.f;
        const int af = bk_act_fmt_for_weight(s.type);
        if (af != BK_ACT_Q8_0 && af != BK_ACT_Q8_K) {
            printf("%-32s %5s: its activation format is not Q8_0 / Q8_K here: skipped\n", s.what, quant_traits(s.type)->name);
            continue;
        }
        std::vector<uint8_t> aq(bk_act_row_bytes(af, s.n_cols));
        if (af == BK_ACT_Q8_K) quantize_row_q8_K(x.data(), aq.data(), s.n_cols);
        else quantize_row_q8_0(x.data(), aq.data(), s.n_cols);
        std::vector<float> ref(s.n_rows);
        for (int64_t r = 0; r < s.n_rows; r++) ref[r] = vec_dot_ref(s.type, s.n_cols, w.data() + r * rs, aq.data());
        /* split layout of the activation */
        const int64_t n = s.n_cols;
        std::vector<uint8_t> split(n + 4 * (n / 256) + 2 * (n / 16) + 2 * (n / 32) + 64);
        if (af == BK_ACT_Q8_K) {
            for (int64_t b = 0; b < n / 256; b++) {
                const block_q8_K *q = (const block_q8_K *)aq.data() + b;
                memcpy(split.data() + 256 * b, q->qs, 256);
                memcpy(split.data() + n + 4 * b, &q->d, 4);
                memcpy(split.data() + ((n + 4 * (n / 256) + 15) & ~(int64_t)15) + 32 * b, q->bsums, 32);
            }
        } else {
            for (int64_t b = 0; b < n / 32; b++) {
                const block_q8_0 *q = (const block_q8_0 *)aq.data() + b;
                memcpy(split.data() + 32 * b, q->qs, 32);
                memcpy(split.data() + n + 2 * b, &q->d, 2);
            }
        }
        /* BENCH_GEMV_ACT_COPIES=N: the Q8_K activation N times over (cu_act_view.copies), CTA b of the tensor-core
         * mat-vec reading copy b % N: how much the every-CTA-at-once reads of the same L2 lines cost */
        const int act_copies = getenv("BENCH_GEMV_ACT_COPIES") ? std::max(1, atoi(getenv("BENCH_GEMV_ACT_COPIES"))) : 1;
        const size_t copy_bytes = (split.size() + 255) & ~(size_t)255;
        uint8_t *d_act;
        CK(gpuMalloc((void **)&d_act, copy_bytes * act_copies));
        for (int k = 0; k < act_copies; k++) CK(gpuMemcpy(d_act + k * copy_bytes, split.data(), split.size(), gpuMemcpyHostToDevice));
        cu_act_view av;
        memset(&av, 0, sizeof(av));
        av.n = n;
        if (af == BK_ACT_Q8_K && act_copies > 1) { av.copies = act_copies; av.copy_bytes = (int64_t)copy_bytes; }
        if (af == BK_ACT_Q8_K) {
            av.k_qs = (const int8_t *)d_act; av.k_d = (const float *)(d_act + n);
            av.k_bs = (const int16_t *)(d_act + ((n + 4 * (n / 256) + 15) & ~(int64_t)15));
        } else {
            av.o_qs = (const int8_t *)d_act; av.o_d = (const uint16_t *)(d_act + n);
        }
        const size_t set_bytes = dev_bytes * s.n_fused;
        const int copies = (int)std::max<size_t>(1, (512u << 20) / set_bytes + 1);
        uint8_t *d_w;
        float *d_y;
        CK(gpuMalloc((void **)&d_w, set_bytes * copies));
        CK(gpuMalloc((void **)&d_y, sizeof(float) * s.n_rows * s.n_fused));
        for (int c = 0; c < copies * s.n_fused; c++) CK(gpuMemcpy(d_w + c * dev_bytes, packed.data(), dev_bytes, gpuMemcpyHostToDevice));
        std::vector<cu_mm_args> args(copies);
        for (int c = 0; c < copies; c++) {
            memset(&args[c], 0, sizeof(cu_mm_args));
            args[c].a = av;
            args[c].n_act = 1;
            int ctas = 0;
            for (int f = 0; f < s.n_fused; f++) {
                cu_mm_seg &g = args[c].seg[args[c].n_seg++];
                g.w = d_w + (size_t)(c * s.n_fused + f) * dev_bytes; g.y = d_y + f * s.n_rows; g.ld_y = s.n_rows;
                g.stride = stride; g.type = (int32_t)s.type; g.n_rows = (int32_t)s.n_rows; g.cta0 = ctas;
                g.row0 = args[c].total_rows;
                g.tile0 = args[c].total_tiles;
                args[c].total_rows += g.n_rows;
                args[c].total_tiles += (int32_t)GPU_CEIL_DIV(g.n_rows, 4);
                ctas += (int)GPU_CEIL_DIV(s.n_rows, CU_MM_WARPS);
            }
            args[c].n_ctas = ctas;
        }
        gpuEvent_t e0, e1;
        CK(gpuEventCreate(&e0));
        CK(gpuEventCreate(&e1));
        /* kernel choices (see cu_mm_cfg): the previous default (one warp per row below 8,192 rows, 4-row
         * tiles from there), the column-split kernel (row groups by type, then 4 and 2), then tiles of tr rows split over ks warps, one CTA per tile group (p 0) or a
         * grid of p x the resident CTAs stepping over them, each with plain launches and with programmatic
         * dependent launch (the next launch prefetches its weights while one runs) */
        const int cfgs[][3] = {{-1, -1, 0}, {-2, 1, 0}, {-3, 1, 0}, {-2, 4, 0}, {-2, 2, 0}, {1, 1, 0}, {4, 1, 0}, {2, 2, 0}, {4, 2, 0},
                               {1, 1, 1}, {4, 1, 1}, {2, 2, 1}, {4, 2, 1}, {4, 2, 2}};
        const struct cu_mm_cfg keep = cu_mm_cfg;
        if (l2) {
            /* "l2": the default kernel with PDL, its weights cold (the copies in turn) and hot (one copy launched again
             * and again: from L2 where it fits) */
            { /* the default kernels */
                cu_mm_cfg = keep;
                gpu_pdl.on = true;
                std::vector<float> tc, th;
                for (int k = 0; k < reps; k++) {
                    CK(gpuEventRecord(e0, st)); gpu_pdl.after_kernel = false;
                    for (int i = 0; i < copies; i++) cu_launch_matmul(&args[i], st);
                    CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
                    float ms; CK(gpuEventElapsedTime(&ms, e0, e1)); tc.push_back(ms * 1000.f / copies);
                    CK(gpuEventRecord(e0, st)); gpu_pdl.after_kernel = false;
                    for (int i = 0; i < 64; i++) cu_launch_matmul(&args[0], st);
                    CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
                    CK(gpuEventElapsedTime(&ms, e0, e1)); th.push_back(ms * 1000.f / 64);
                }
                const double uc = median_us(tc), uh = median_us(th);
                /* the outputs of one more launch against vec_dot_ref (every fused copy holds the same rows) */
                CK(gpuMemset(d_y, 0xff, sizeof(float) * s.n_rows * s.n_fused));
                cu_launch_matmul(&args[0], st);
                CK(gpuStreamSynchronize(st));
                std::vector<float> yo(s.n_rows * s.n_fused);
                CK(gpuMemcpy(yo.data(), d_y, yo.size() * 4, gpuMemcpyDeviceToHost));
                double e_max = 0, y_max = 0;
                for (int64_t r = 0; r < s.n_rows; r++) y_max = std::max(y_max, (double)fabsf(ref[r]));
                for (size_t i = 0; i < yo.size(); i++) {
                    const double e = fabs((double)yo[i] - ref[i % s.n_rows]);
                    e_max = std::max(e_max, e == e ? e : INFINITY);
                }
                printf("%-32s %-6s %-13s %8.2f MB  cold %8.2f us (%5.0f GB/s, %3.0f%% of read)  hot %8.2f us (%5.0f GB/s)\n", s.what,
                       quant_traits(s.type)->name, "default",
                       set_bytes / 1e6, uc, set_bytes / (uc * 1e3), 100.0 * set_bytes / (uc * 1e3) / read_gbs, uh, set_bytes / (uh * 1e3));
                printf("%-32s   max err / max |y| %.2g%s\n", "", e_max / std::max(y_max, 1e-30), e_max / std::max(y_max, 1e-30) < 1e-5 ? "" : " (OFF)");
            }
            cu_mm_cfg = keep;
            gpu_pdl.on = false;
            CK(gpuFree(d_w)); CK(gpuFree(d_y)); CK(gpuFree(d_act));
            CK(gpuEventDestroy(e0)); CK(gpuEventDestroy(e1));
            continue;
        }
        for (const auto &cf : cfgs)
            for (int pdl = 0; pdl < 2; pdl++) {
                cu_mm_cfg = keep;
                for (int c = 0; c < 3; c++) cu_mm_cfg.cols[c] = cf[0] == -2 || cf[0] == -3 ? cf[1] : 0;
                cu_mm_cfg.cols_lb = cf[0] == -3 ? 7 : 0;
                if (cf[0] == -1) cu_mm_cfg.ks[0] = cu_mm_cfg.ks[1] = cu_mm_cfg.ks[2] = 0;
                else if (cf[0] > 0)
                    for (int c = 0; c < 3; c++) { cu_mm_cfg.tr[c] = cf[0]; cu_mm_cfg.ks[c] = cf[1]; cu_mm_cfg.pers[c] = cf[2]; }
                gpu_pdl.on = pdl == 1;
                gpu_pdl.after_kernel = false;
                CK(gpuMemset(d_y, 0xff, sizeof(float) * s.n_rows * s.n_fused)); /* NaN: every output must be written */
                cu_launch_matmul(&args[0], st);
                CK(gpuStreamSynchronize(st));
                std::vector<float> y(s.n_rows * s.n_fused);
                CK(gpuMemcpy(y.data(), d_y, y.size() * 4, gpuMemcpyDeviceToHost));
                size_t bad = 0;
                double mrel = 0, ymax = 0;
                for (int64_t r = 0; r < s.n_rows; r++) ymax = std::max(ymax, (double)fabsf(ref[r]));
                for (int f = 0; f < s.n_fused; f++)
                    for (int64_t r = 0; r < s.n_rows; r++) {
                        const double e = fabs((double)y[f * s.n_rows + r] - ref[r]) / ymax;
                        mrel = std::max(mrel, e);
                        bad += !(e < 1e-5);
                    }
                for (int i = 0; i < copies; i++) cu_launch_matmul(&args[i % copies], st); /* warm-up */
                std::vector<float> times;
                for (int k = 0; k < reps; k++) {
                    CK(gpuEventRecord(e0, st));
                    gpu_pdl.after_kernel = false;
                    for (int i = 0; i < copies; i++) cu_launch_matmul(&args[i], st);
                    CK(gpuEventRecord(e1, st));
                    CK(gpuEventSynchronize(e1));
                    float ms;
                    CK(gpuEventElapsedTime(&ms, e0, e1));
                    times.push_back(ms * 1000.f / copies);
                }
                std::sort(times.begin(), times.end());
                const double us = times[times.size() / 2];
                const double gbs = set_bytes / (us * 1e-6) / 1e9;
                gbs_all.push_back(gbs);
                char name[64];
                if (cf[0] == -1) snprintf(name, sizeof(name), "%s", s.what);
                else if (cf[0] == -2 && cf[1] == 1) snprintf(name, sizeof(name), "  column split (default)");
                else if (cf[0] == -3) snprintf(name, sizeof(name), "  column split, bounded (cols_lb)");
                else if (cf[0] == -2) snprintf(name, sizeof(name), "  column split, %d row groups", cf[1]);
                else snprintf(name, sizeof(name), "  tr %d ks %d p %d", cf[0], cf[1], cf[2]);
                printf("%-32s %5s %6lld %7lld %5d %8.2f %9.2f %8.0f %.2g%s%s\n", name, quant_traits(s.type)->name, (long long)s.n_cols,
                       (long long)s.n_rows, s.n_fused, set_bytes / 1e6, us, gbs, mrel, pdl ? " pdl" : "",
                       rt ? "" : " (repack round trip FAILED)");
                if (bad) printf("  %zu of %lld outputs differ from vec_dot_ref\n", bad, (long long)(s.n_rows * s.n_fused));
            }
        cu_mm_cfg = keep;
        gpu_pdl.on = false;
        CK(gpuFree(d_w)); CK(gpuFree(d_y)); CK(gpuFree(d_act));
        CK(gpuEventDestroy(e0)); CK(gpuEventDestroy(e1));
    }
    return 0;
}
