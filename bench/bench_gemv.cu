/* GPU quantized mat-vec: validate against the CPU reference (same quantized activations, exact integer
 * parts), then time each kernel on the decode shapes of Qwen3.5-4B and report achieved GB/s.
 * usage: bench_gemv [reps]. Weights are random quant bytes with sane scales (as synth_gguf.py writes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "backend/cuda/gpu_compat.h"
#include "backend/cuda/gemv_q.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define CK(x) do { gpuError_t e_ = (x); if (e_ != gpuSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, gpuGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static float rndf() { return (rnd() >> 8) * (1.0f / 16777216.0f); }

static void fill_weights(uint32_t type, uint8_t *p, size_t bytes, int64_t n_blocks) {
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd();
    const size_t bs = quant_traits(type)->type_size;
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = p + b * bs;
        ggml_half d = fp32_to_fp16(1e-3f * (0.5f + rndf())), dm = fp32_to_fp16(5e-4f * (0.5f + rndf()));
        if (type == GGML_TYPE_Q4_K) { memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); }
        else if (type == GGML_TYPE_Q6_K) memcpy(blk + 208, &d, 2);
        else if (type == GGML_TYPE_Q8_0) memcpy(blk, &d, 2);
    }
}

struct shape { uint32_t type; int64_t n_cols, n_rows; const char *what; };

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    const shape shapes[] = {
        {GGML_TYPE_Q4_K, 2560, 9216, "ffn_gate / ffn_up (qwen35-4b)"},
        {GGML_TYPE_Q4_K, 9216, 2560, "ffn_down Q4_K"},
        {GGML_TYPE_Q6_K, 9216, 2560, "ffn_down Q6_K"},
        {GGML_TYPE_Q4_K, 2560, 8192, "ssm in_proj qkv+z (qwen35-4b)"},
        {GGML_TYPE_Q4_K, 4096, 2560, "ssm_out / attn_output"},
        {GGML_TYPE_Q6_K, 2560, 248320, "LM head Q6_K"},
        {GGML_TYPE_Q8_0, 2560, 8192, "Q8_0 2560x8192"},
        {GGML_TYPE_Q4_K, 2048, 512 * 8, "MoE expert gate/up x top-8 (2048x512x8)"},
    };
    printf("%-42s %6s %8s %8s %10s %9s %8s %s\n", "shape", "type", "n_cols", "n_rows", "MB", "us", "GB/s", "max rel err");
    gpuStream_t st;
    CK(gpuStreamCreate(&st));
    for (const shape &s : shapes) {
        const size_t row_bytes = quant_row_size(s.type, s.n_cols);
        const size_t bytes = row_bytes * s.n_rows;
        /* enough copies that every timed call reads cold weights (L2 is 50 MB) */
        const int n_copies = (int)(bytes > (256u << 20) ? 1 : ((256u << 20) / bytes) + 1);
        std::vector<uint8_t> hw(bytes);
        fill_weights(s.type, hw.data(), bytes, (int64_t)(bytes / quant_traits(s.type)->type_size));
        std::vector<float> hx(s.n_cols);
        for (auto &v : hx) v = 2.f * rndf() - 1.f;
        hx[rnd() % s.n_cols] = 7.5f; /* an outlier */
        uint8_t *dw;
        CK(gpuMalloc((void **)&dw, bytes * n_copies));
        for (int c = 0; c < n_copies; c++) CK(gpuMemcpy(dw + c * bytes, hw.data(), bytes, gpuMemcpyHostToDevice));
        float *dx, *dy;
        void *dq;
        CK(gpuMalloc((void **)&dx, s.n_cols * 4));
        CK(gpuMalloc((void **)&dy, s.n_rows * 4));
        CK(gpuMalloc(&dq, gpu_qact_bytes(s.n_cols)));
        CK(gpuMemcpy(dx, hx.data(), s.n_cols * 4, gpuMemcpyHostToDevice));
        struct gpu_qact a;
        gpu_qact_init(&a, dq, s.n_cols);
        const bool k = s.type != GGML_TYPE_Q8_0;
        if ((k ? gpu_quantize_q8_K(dx, &a, st) : gpu_quantize_q8_0(dx, &a, st)) != VLLMC_OK) return 1;
        if (gpu_gemv_q(s.type, dw, row_bytes, s.n_cols, s.n_rows, &a, dy, st) != VLLMC_OK) { printf("launch refused\n"); return 1; }
        CK(gpuStreamSynchronize(st));
        /* CPU reference: the same activation quantizer, vec_dot_ref per row */
        const uint32_t at = k ? GGML_TYPE_Q8_K : GGML_TYPE_Q8_0;
        std::vector<uint8_t> hq(quant_row_size(at, s.n_cols));
        quantize_row_act(s.type, hx.data(), hq.data(), s.n_cols);
        /* activation bits must match exactly */
        std::vector<int8_t> gqs(s.n_cols);
        CK(gpuMemcpy(gqs.data(), a.qs, s.n_cols, gpuMemcpyDeviceToHost));
        long bad_q = 0;
        if (k) {
            std::vector<float> gd(s.n_cols / 256);
            std::vector<int16_t> gb(s.n_cols / 16);
            CK(gpuMemcpy(gd.data(), a.d_k, gd.size() * 4, gpuMemcpyDeviceToHost));
            CK(gpuMemcpy(gb.data(), a.bsums, gb.size() * 2, gpuMemcpyDeviceToHost));
            const block_q8_K *cb = (const block_q8_K *)hq.data();
            for (int64_t i = 0; i < s.n_cols / 256; i++) {
                bad_q += memcmp(&cb[i].d, &gd[i], 4) != 0;
                bad_q += memcmp(cb[i].qs, &gqs[i * 256], 256) != 0;
                bad_q += memcmp(cb[i].bsums, &gb[i * 16], 32) != 0;
            }
        } else {
            std::vector<uint16_t> gd(s.n_cols / 32);
            CK(gpuMemcpy(gd.data(), a.d_0, gd.size() * 2, gpuMemcpyDeviceToHost));
            const block_q8_0 *cb = (const block_q8_0 *)hq.data();
            for (int64_t i = 0; i < s.n_cols / 32; i++)
                bad_q += (cb[i].d != gd[i]) + (memcmp(cb[i].qs, &gqs[i * 32], 32) != 0);
        }
        std::vector<float> hy(s.n_rows);
        CK(gpuMemcpy(hy.data(), dy, s.n_rows * 4, gpuMemcpyDeviceToHost));
        double max_rel = 0;
        const int64_t n_check = s.n_rows < 4096 ? s.n_rows : 4096;
        for (int64_t r = 0; r < n_check; r++) {
            const int64_t row = r * (s.n_rows / n_check);
            const float ref = vec_dot_ref(s.type, s.n_cols, hw.data() + row * row_bytes, hq.data());
            /* scale of the terms: |ref| can be near 0, so compare against the row's magnitude */
            double mag = 1e-30;
            std::vector<float> deq(s.n_cols);
            dequantize_row(s.type, hw.data() + row * row_bytes, deq.data(), s.n_cols);
            for (int64_t i = 0; i < s.n_cols; i++) mag += fabs((double)deq[i] * hx[i]);
            max_rel = fmax(max_rel, fabs((double)hy[row] - ref) / mag);
        }
        /* timing */
        gpuEvent_t e0, e1;
        CK(gpuEventCreate(&e0));
        CK(gpuEventCreate(&e1));
        std::vector<float> times;
        for (int it = 0; it < reps + 3; it++) {
            CK(gpuEventRecord(e0, st));
            gpu_gemv_q(s.type, dw + (it % n_copies) * bytes, row_bytes, s.n_cols, s.n_rows, &a, dy, st);
            CK(gpuEventRecord(e1, st));
            CK(gpuEventSynchronize(e1));
            float ms;
            CK(gpuEventElapsedTime(&ms, e0, e1));
            if (it >= 3) times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const double med_us = times[times.size() / 2] * 1e3;
        printf("%-42s %6s %8lld %8lld %10.2f %9.1f %8.0f %.2e%s\n", s.what, quant_traits(s.type)->name, (long long)s.n_cols,
               (long long)s.n_rows, bytes / 1e6, med_us, bytes / med_us / 1e3, max_rel,
               bad_q ? "  ACTIVATION MISMATCH" : "");
        if (bad_q || max_rel > 1e-5) { printf("FAIL: %s\n", s.what); return 1; }
        gpuFree(dw); gpuFree(dx); gpuFree(dy); gpuFree(dq);
    }
    printf("bench_gemv: all shapes match the CPU reference\n");
    return 0;
}
