/* The dense FFN chain of a decode step two ways: the launch chain the backend records today (per layer an RMSNorm +
 * quantize, the gate / up mat-vec, the SwiGLU + quantize, the down mat-vec adding into the residual; captured as a
 * graph with programmatic dependent launch and replayed) and the persistent dataflow kernel (cu_mega_ffn: one launch,
 * the weights streamed through a ring of shared-memory slots ahead of the dependency waits). Both must leave the
 * same residual, bit for bit; then each is timed (median of reps, the weights of all layers cold: they are far larger
 * than L2) and reported as us a layer and GB/s of weights. Qwen3.5-4B's FFN shapes (2,560 x 9,216, Q4_K).
 * usage: bench_mega [reps] [layers] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <functional>
#include <vector>
#include "backend/cuda/cuda_internal.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define CK(x) do { gpuError_t e_ = (x); if (e_ != gpuSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, gpuGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)rng; }
static float rndf() { return (rnd() >> 8) * (1.0f / 16777216.0f); }

/* random Q4_K rows with small scales (so the residual stays bounded over the layers), repacked for the device */
static std::vector<uint8_t> q4k_rows(int64_t n_cols, int64_t n_rows) {
    const uint64_t rs = quant_row_size(GGML_TYPE_Q4_K, n_cols), stride = cu_weight_row_stride(GGML_TYPE_Q4_K, n_cols);
    std::vector<uint8_t> w(rs * n_rows), packed(stride * n_rows);
    for (auto &b : w) b = (uint8_t)rnd();
    for (size_t b = 0; b < w.size() / sizeof(block_q4_K); b++) {
        uint8_t *blk = w.data() + b * sizeof(block_q4_K);
        ggml_half d = fp32_to_fp16(2e-3f * (0.5f + rndf())), dm = fp32_to_fp16(2e-3f * (0.5f + rndf()));
        memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2);
    }
    cu_repack_rows(GGML_TYPE_Q4_K, w.data(), n_cols, n_rows, packed.data());
    return packed;
}

/* random Q6_K rows (int8 scales of up to 64, small d), repacked for the device */
static std::vector<uint8_t> q6k_rows(int64_t n_cols, int64_t n_rows) {
    const uint64_t rs = quant_row_size(GGML_TYPE_Q6_K, n_cols), stride = cu_weight_row_stride(GGML_TYPE_Q6_K, n_cols);
    std::vector<uint8_t> w(rs * n_rows), packed(stride * n_rows);
    for (auto &b : w) b = (uint8_t)rnd();
    for (size_t b = 0; b < w.size() / sizeof(block_q6_K); b++) {
        block_q6_K *blk = (block_q6_K *)(w.data() + b * sizeof(block_q6_K));
        for (auto &sc : blk->scales) sc = (int8_t)((int)(rnd() % 128) - 64);
        blk->d = fp32_to_fp16(5e-4f * (0.5f + rndf()));
    }
    cu_repack_rows(GGML_TYPE_Q6_K, w.data(), n_cols, n_rows, packed.data());
    return packed;
}

static double median(std::vector<float> t) { std::sort(t.begin(), t.end()); return t[t.size() / 2]; }

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const int reps = argc > 1 ? atoi(argv[1]) : 7, L = argc > 2 ? atoi(argv[2]) : 32;
    const int64_t D = 2560, F = 9216;
    const float eps = 1e-6f;
    const uint64_t s_gu = cu_weight_row_stride(GGML_TYPE_Q4_K, D), s_dn = cu_weight_row_stride(GGML_TYPE_Q4_K, F);
    const double bytes = (double)L * (2.0 * F * s_gu + (double)D * s_dn);
    printf("FFN chain: %d layers, D %lld, F %lld, Q4_K, %.1f MB of weights (%.2f MB a layer)\n", L, (long long)D, (long long)F,
           bytes / 1e6, bytes / 1e6 / L);
    gpuStream_t st;
    CK(gpuStreamCreate(&st));
    std::vector<uint8_t *> gu(L), dn(L), dn6(L), dn6t(L); /* dn6: Q6_K down rows, dn6t: their tiles (ps 4, device packer) */
    std::vector<float *> nw(L);
    /* cu_mega2's task tiles of the same weights: gate / up tasks of 8 + 8 rows, down tasks of 16 rows x ps super-blocks */
    const int ps_list[3] = {4, 12, 36};
    std::vector<uint8_t *> gu2(L), dn2[3];
    for (auto &v : dn2) v.resize(L);
    for (int l = 0; l < L; l++) {
        std::vector<uint8_t> a = q4k_rows(D, 2 * F), b = q4k_rows(F, D);
        {
            const uint64_t tb = cu_mega2_task_bytes((int)(D / 256));
            std::vector<uint8_t> t((size_t)(F / 8) * tb);
            for (int64_t j = 0; j < F / 8; j++) {
                const uint8_t *rows[16];
                for (int i = 0; i < 8; i++) { rows[i] = a.data() + (size_t)(8 * j + i) * s_gu; rows[8 + i] = a.data() + (size_t)(F + 8 * j + i) * s_gu; }
                cu_mega2_pack(rows, (int)(D / 256), 0, (int)(D / 256), t.data() + (size_t)j * tb);
            }
            CK(gpuMalloc((void **)&gu2[l], t.size())); CK(gpuMemcpy(gu2[l], t.data(), t.size(), gpuMemcpyHostToDevice));
            for (int pi = 0; pi < 3; pi++) {
                const int ps = ps_list[pi], np = (int)(F / 256) / ps;
                const uint64_t db = cu_mega2_task_bytes(ps);
                std::vector<uint8_t> u((size_t)(D / 16) * np * db);
                for (int64_t r = 0; r < D / 16; r++)
                    for (int q = 0; q < np; q++) {
                        const uint8_t *rows[16];
                        for (int i = 0; i < 16; i++) rows[i] = b.data() + (size_t)(16 * r + i) * s_dn;
                        cu_mega2_pack(rows, (int)(F / 256), q * ps, ps, u.data() + (size_t)(r * np + q) * db);
                    }
                CK(gpuMalloc((void **)&dn2[pi][l], u.size())); CK(gpuMemcpy(dn2[pi][l], u.data(), u.size(), gpuMemcpyHostToDevice));
            }
        }
        std::vector<float> w(D);
        for (auto &v : w) v = 0.5f + rndf();
        CK(gpuMalloc((void **)&gu[l], a.size())); CK(gpuMemcpy(gu[l], a.data(), a.size(), gpuMemcpyHostToDevice));
        CK(gpuMalloc((void **)&dn[l], b.size())); CK(gpuMemcpy(dn[l], b.data(), b.size(), gpuMemcpyHostToDevice));
        CK(gpuMalloc((void **)&nw[l], 4 * D)); CK(gpuMemcpy(nw[l], w.data(), 4 * D, gpuMemcpyHostToDevice));
        std::vector<uint8_t> b6 = q6k_rows(F, D);
        CK(gpuMalloc((void **)&dn6[l], b6.size())); CK(gpuMemcpy(dn6[l], b6.data(), b6.size(), gpuMemcpyHostToDevice));
        const uint64_t t6 = (uint64_t)(D / 16) * (F / 256 / 4) * cu_mega2_dn_task_bytes(4, true);
        CK(gpuMalloc((void **)&dn6t[l], t6));
        if (!cu_mega2_pack_dn(dn6[l], GGML_TYPE_Q6_K, D, F, 4, dn6t[l], st)) { fprintf(stderr, "Q6_K down tiles: not packed\n"); exit(1); }
        if (l == 0) { /* the device packer against the host's: layer 0's gate / up and Q4_K down (ps 4) tiles */
            const uint64_t bg = (uint64_t)(F / 8) * cu_mega2_task_bytes((int)(D / 256)), bd = (uint64_t)(D / 16) * (F / 256 / 4) * cu_mega2_task_bytes(4);
            uint8_t *tg, *td;
            CK(gpuMalloc((void **)&tg, bg)); CK(gpuMalloc((void **)&td, bd));
            const bool ok = cu_mega2_pack_gu(gu[l], gu[l] + (size_t)F * s_gu, D, F, tg, st) && cu_mega2_pack_dn(dn[l], GGML_TYPE_Q4_K, D, F, 4, td, st);
            CK(gpuStreamSynchronize(st));
            std::vector<uint8_t> hg(bg), hd(bd), wg(bg), wd(bd);
            CK(gpuMemcpy(hg.data(), tg, bg, gpuMemcpyDeviceToHost)); CK(gpuMemcpy(hd.data(), td, bd, gpuMemcpyDeviceToHost));
            CK(gpuMemcpy(wg.data(), gu2[l], bg, gpuMemcpyDeviceToHost)); CK(gpuMemcpy(wd.data(), dn2[0][l], bd, gpuMemcpyDeviceToHost));
            printf("device packer against the host packer (layer 0): %s\n",
                   !ok ? "NOT LAUNCHED" : hg == wg && hd == wd ? "same bytes" : "BYTES DIFFER");
            CK(gpuFree(tg)); CK(gpuFree(td));
        }
    }
    std::vector<float> x0(D);
    for (auto &v : x0) v = 2.f * rndf() - 1.f;
    float *x, *x_init, *g, *y, *h, *xs;
    CK(gpuMalloc((void **)&x, 4 * D)); CK(gpuMalloc((void **)&x_init, 4 * D));
    CK(gpuMemcpy(x_init, x0.data(), 4 * D, gpuMemcpyHostToDevice));
    CK(gpuMalloc((void **)&g, 8 * F)); CK(gpuMalloc((void **)&y, 4 * D)); CK(gpuMalloc((void **)&h, 4 * F));
    int sms = 132, dev = 0;
    CK(gpuGetDevice(&dev)); CK(gpuDeviceGetSMCount(&sms, dev));
    CK(gpuMalloc((void **)&xs, 4 * D * (size_t)sms));
    /* the launch chain's activations: f32 + Q8_K of D and of F columns */
    auto act = [&](int64_t n) {
        cu_act_mut m;
        memset(&m, 0, sizeof(m));
        m.n = n;
        CK(gpuMalloc((void **)&m.x, 4 * n)); CK(gpuMalloc((void **)&m.k_qs, n));
        CK(gpuMalloc((void **)&m.k_d, 4 * (n / 256))); CK(gpuMalloc((void **)&m.k_bs, 2 * (n / 16)));
        return m;
    };
    const cu_act_mut a1 = act(D), a2 = act(F);
    auto view = [](const cu_act_mut &m) {
        cu_act_view v;
        memset(&v, 0, sizeof(v));
        v.x = m.x; v.k_qs = m.k_qs; v.k_d = m.k_d; v.k_bs = m.k_bs; v.n = m.n;
        return v;
    };
    std::vector<cu_mm_args> mgu(L), mdn(L);
    for (int l = 0; l < L; l++) {
        cu_mm_args &A = mgu[l], &B = mdn[l];
        memset(&A, 0, sizeof(A)); memset(&B, 0, sizeof(B));
        A.a = view(a1); A.n_act = 1;
        for (int f = 0; f < 2; f++) {
            cu_mm_seg &sg = A.seg[A.n_seg++];
            sg.w = gu[l] + (size_t)f * F * s_gu; sg.y = g + f * F; sg.ld_y = F; sg.stride = s_gu; sg.type = GGML_TYPE_Q4_K;
            sg.n_rows = (int32_t)F; sg.cta0 = A.n_ctas; sg.row0 = A.total_rows; sg.tile0 = A.total_tiles;
            A.total_rows += (int32_t)F; A.total_tiles += (int32_t)(F / 4); A.n_ctas += (int32_t)(F / CU_MM_WARPS);
        }
        B.a = view(a2); B.n_act = 1; B.n_seg = 1;
        cu_mm_seg &sd = B.seg[0];
        sd.w = dn[l]; sd.y = y; sd.res = x; sd.ld_y = D; sd.stride = s_dn; sd.type = GGML_TYPE_Q4_K; sd.n_rows = (int32_t)D;
        B.total_rows = (int32_t)D; B.total_tiles = (int32_t)(D / 4); B.n_ctas = (int32_t)(D / CU_MM_WARPS);
    }
    /* the launch chain, captured */
    gpu_pdl.on = true;
    gpu_pdl.after_kernel = false;
    gpuGraph_t graph;
    gpuGraphExec_t ge;
    CK(gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal));
    for (int l = 0; l < L; l++) {
        cu_launch_norm_quant(CU_NQ_RMSNORM, x, NULL, 0, nw[l], eps, 0, 1, a1, BK_ACT_BIT(BK_ACT_Q8_K), st);
        cu_launch_matmul(&mgu[l], st);
        cu_launch_norm_quant(CU_NQ_SWIGLU, g, g + F, F, NULL, eps, 0, 1, a2, BK_ACT_BIT(BK_ACT_Q8_K), st);
        cu_launch_matmul(&mdn[l], st);
    }
    CK(gpuStreamEndCapture(st, &graph));
    CK(gpuGraphInstantiate(&ge, graph));
    gpuEvent_t e0, e1;
    CK(gpuEventCreate(&e0)); CK(gpuEventCreate(&e1));
    auto run_chain = [&]() {
        CK(gpuMemcpyAsync(x, x_init, 4 * D, gpuMemcpyDeviceToDevice, st));
        CK(gpuEventRecord(e0, st));
        CK(gpuGraphLaunch(ge, st));
        CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
        float ms; CK(gpuEventElapsedTime(&ms, e0, e1));
        return ms * 1000.f;
    };
    run_chain();
    std::vector<float> ref(D);
    CK(gpuMemcpy(ref.data(), x, 4 * D, gpuMemcpyDeviceToHost));
    double xmax = 0;
    for (float v : ref) xmax = std::max(xmax, (double)fabsf(v));
    std::vector<float> tc;
    for (int r = 0; r < reps; r++) tc.push_back(run_chain());
    const double uc = median(tc);
    printf("%-72s %9.1f us  %7.2f us a layer  %6.0f GB/s  (max |x| %.3g)\n", "launch chain (graph, PDL)", uc, uc / L,
           bytes / (uc * 1e-6) / 1e9, xmax);
    /* One variant: a first run (its result against want: bit for bit, the largest difference), then reps timed runs,
     * their median as us, us a layer and GB/s of the FFN weights. run(&ok) returns its us; ok false: nothing was
     * launched. want NULL: not compared (an ablation, wrong by design, or the reference itself). */
    auto report = [&](const char *name, const std::vector<float> *want, const std::function<float(bool *)> &run) {
        bool ok = false;
        run(&ok);
        if (!ok) { printf("%-72s not launched\n", name); return; }
        std::vector<float> got(D);
        CK(gpuMemcpy(got.data(), x, 4 * D, gpuMemcpyDeviceToHost));
        int diff = 0;
        double emax = 0;
        for (int64_t i = 0; i < D; i++) {
            if (!want) break;
            diff += memcmp(&got[i], &(*want)[i], 4) != 0;
            emax = std::max(emax, (double)fabsf(got[i] - (*want)[i]));
        }
        std::vector<float> tm;
        for (int r = 0; r < reps; r++) tm.push_back(run(&ok));
        const double um = median(tm);
        if (!want)
            printf("%-72s %9.1f us  %7.2f us a layer  %6.0f GB/s  (not compared)\n", name, um, um / L, bytes / (um * 1e-6) / 1e9);
        else
            printf("%-72s %9.1f us  %7.2f us a layer  %6.0f GB/s  %s (%d of %lld differ, max %.3g)\n", name, um, um / L,
                   bytes / (um * 1e-6) / 1e9, diff ? "DIFFERS" : "same bits", diff, (long long)D, emax);
    };
    /* the persistent kernel: pointer tables, counters, configurations */
    const uint8_t **dgu; const uint8_t **ddn; const float **dnw;
    unsigned *cnt;
    CK(gpuMalloc((void **)&dgu, sizeof(void *) * L)); CK(gpuMalloc((void **)&ddn, sizeof(void *) * L));
    CK(gpuMalloc((void **)&dnw, sizeof(void *) * L)); CK(gpuMalloc((void **)&cnt, 8 * L));
    CK(gpuMemcpy(dgu, gu.data(), sizeof(void *) * L, gpuMemcpyHostToDevice));
    CK(gpuMemcpy(ddn, dn.data(), sizeof(void *) * L, gpuMemcpyHostToDevice));
    CK(gpuMemcpy(dnw, nw.data(), sizeof(void *) * L, gpuMemcpyHostToDevice));
    /* rg, rd, slots (0: as many as fit), teams, flags (timing ablations: 1 no dot products, 2 no dependency waits, 4 no
     * prologues; their results are wrong by design and are not compared) */
    const int cfgs[][5] = {{16, 8, 0, 1, 0}, {8, 4, 0, 2, 0}};
    for (const auto &cf : cfgs) {
        cu_mega_ffn_args a;
        memset(&a, 0, sizeof(a));
        a.gu = dgu; a.dn = ddn; a.nw = dnw; a.x = x; a.h = h; a.xs = xs; a.cnt = cnt;
        a.D = D; a.F = F; a.s_gu = s_gu; a.s_dn = s_dn; a.eps = eps; a.n_layers = L; a.rg = cf[0]; a.rd = cf[1];
        a.teams = cf[3]; a.flags = (uint32_t)cf[4];
        a.slot = (uint32_t)std::max<uint64_t>(2 * a.rg * s_gu, a.rd * s_dn);
        a.slot = (a.slot + 127) & ~127u;
        a.ns = 1;
        while (a.ns < 64) {
            a.ns++;
            if (cu_mega_ffn_smem(&a) > 225 * 1024) { a.ns--; break; }
        }
        if (cf[2]) a.ns = std::min(a.ns, cf[2]);
        auto run_mega = [&](bool *ok) {
            CK(gpuMemcpyAsync(x, x_init, 4 * D, gpuMemcpyDeviceToDevice, st));
            CK(gpuMemsetAsync(cnt, 0, 8 * L, st));
            CK(gpuEventRecord(e0, st));
            *ok = cu_mega_ffn(&a, sms, st);
            CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
            float ms; CK(gpuEventElapsedTime(&ms, e0, e1));
            return ms * 1000.f;
        };
        char name[96];
        snprintf(name, sizeof(name), "persistent: rg %d rd %d, %d slots of %u B, %d team%s%s%s%s", a.rg, a.rd, a.ns, a.slot, a.teams,
                 a.teams > 1 ? "s" : "", a.flags & 1 ? ", no dots" : "", a.flags & 2 ? ", no waits" : "", a.flags & 4 ? ", no prologues" : "");
        report(name, a.flags ? NULL : &ref, run_mega);
    }
    /* the second form (cu_mega2): ps, consumer warps, slots (0: as many as fit), flags, one launch a layer */
    const uint8_t **dgu2, **ddn2[3];
    float *pd;
    unsigned *gcnt;
    CK(gpuMalloc((void **)&dgu2, sizeof(void *) * L));
    CK(gpuMemcpy(dgu2, gu2.data(), sizeof(void *) * L, gpuMemcpyHostToDevice));
    for (int pi = 0; pi < 3; pi++) {
        CK(gpuMalloc((void **)&ddn2[pi], sizeof(void *) * L));
        CK(gpuMemcpy(ddn2[pi], dn2[pi].data(), sizeof(void *) * L, gpuMemcpyHostToDevice));
    }
    CK(gpuMalloc((void **)&pd, 4 * D * (F / 1024))); CK(gpuMalloc((void **)&gcnt, 4 * L * (D / 16)));
    /* a timed run of the tiled chain over all L layers: one launch, or a launch a layer (l0 = l) */
    auto run_tiles = [&](const cu_mega2_args &a, bool per_layer) {
        return [&, a, per_layer](bool *ok) {
            CK(gpuMemcpyAsync(x, x_init, 4 * D, gpuMemcpyDeviceToDevice, st));
            CK(gpuMemsetAsync(cnt, 0, 8 * L, st));
            CK(gpuMemsetAsync(gcnt, 0, 4 * L * (D / 16), st));
            CK(gpuEventRecord(e0, st));
            gpu_pdl.after_kernel = false; /* (a memset before: a plain launch) */
            *ok = true;
            for (int l = 0; l < (per_layer ? L : 1) && *ok; l++) {
                cu_mega2_args b = a;
                if (per_layer) { b.l0 = l; b.n_layers = 1; }
                *ok = cu_mega2(&b, sms, st);
            }
            CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
            float ms; CK(gpuEventElapsedTime(&ms, e0, e1));
            return ms * 1000.f;
        };
    };
    const int cfg2[][5] = {{12, 16, 0, 0, 0}, {4, 16, 0, 0, 0}, {4, 3, 0, 0, 0}, {36, 2, 0, 0, 0}, {12, 16, 4, 0, 0},
                           {4, 16, 0, 0, 1}, {4, 16, 0, 1, 0}, {4, 16, 0, 6, 0}, {4, 16, 0, 7, 0}};
    for (const auto &cf : cfg2) {
        const int pi = cf[0] == 4 ? 0 : cf[0] == 12 ? 1 : 2;
        cu_mega2_args a;
        memset(&a, 0, sizeof(a));
        a.gu = dgu2; a.dn = ddn2[pi]; a.nw = dnw; a.x = x; a.h = h; a.pd = pd; a.xs = xs; a.cnt = cnt; a.gcnt = gcnt;
        a.D = D; a.F = F; a.eps = eps; a.l0 = 0; a.n_layers = L; a.ps = cf[0]; a.flags = (uint32_t)cf[3];
        cu_mega2_fit(&a, cf[1], cf[2]);
        const bool per_layer = cf[4] != 0;
        char name[112];
        snprintf(name, sizeof(name), "tiles: ps %d, %d consumer warps, %d slots of %u B%s%s%s%s", a.ps, a.nc, a.ns, a.slot,
                 per_layer ? ", a launch a layer" : "", a.flags & 1 ? ", no dots" : "", a.flags & 2 ? ", no waits" : "",
                 a.flags & 4 ? ", no prologues" : "");
        report(name, a.flags ? NULL : &ref, run_tiles(a, per_layer));
    }
    /* Q6_K down rows (about half the layers of a Q4_K_M file): the launch chain with them, then the tiles (ps 4, the down
     * tiles from the device packer) against it */
    {
        std::vector<cu_mm_args> mdn6(mdn);
        for (int l = 0; l < L; l++) {
            mdn6[l].seg[0].w = dn6[l]; mdn6[l].seg[0].type = GGML_TYPE_Q6_K; mdn6[l].seg[0].stride = cu_weight_row_stride(GGML_TYPE_Q6_K, F);
        }
        gpuGraph_t g6;
        gpuGraphExec_t ge6;
        CK(gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal));
        for (int l = 0; l < L; l++) {
            cu_launch_norm_quant(CU_NQ_RMSNORM, x, NULL, 0, nw[l], eps, 0, 1, a1, BK_ACT_BIT(BK_ACT_Q8_K), st);
            cu_launch_matmul(&mgu[l], st);
            cu_launch_norm_quant(CU_NQ_SWIGLU, g, g + F, F, NULL, eps, 0, 1, a2, BK_ACT_BIT(BK_ACT_Q8_K), st);
            cu_launch_matmul(&mdn6[l], st);
        }
        CK(gpuStreamEndCapture(st, &g6));
        CK(gpuGraphInstantiate(&ge6, g6));
        auto run6 = [&](bool *ok) {
            CK(gpuMemcpyAsync(x, x_init, 4 * D, gpuMemcpyDeviceToDevice, st));
            CK(gpuEventRecord(e0, st));
            CK(gpuGraphLaunch(ge6, st));
            CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
            float ms; CK(gpuEventElapsedTime(&ms, e0, e1));
            *ok = true;
            return ms * 1000.f;
        };
        bool ok6 = false;
        run6(&ok6);
        std::vector<float> ref6(D);
        CK(gpuMemcpy(ref6.data(), x, 4 * D, gpuMemcpyDeviceToHost));
        report("Q6_K down: launch chain (graph, PDL)", NULL, run6);
        const uint8_t **ddn6;
        CK(gpuMalloc((void **)&ddn6, sizeof(void *) * L));
        CK(gpuMemcpy(ddn6, dn6t.data(), sizeof(void *) * L, gpuMemcpyHostToDevice));
        cu_mega2_args a;
        memset(&a, 0, sizeof(a));
        a.gu = dgu2; a.dn = ddn6; a.nw = dnw; a.x = x; a.h = h; a.pd = pd; a.xs = xs; a.cnt = cnt; a.gcnt = gcnt;
        a.D = D; a.F = F; a.eps = eps; a.l0 = 0; a.n_layers = L; a.ps = 4; a.dn_q6 = 1;
        cu_mega2_fit(&a, 16, 0);
        for (int per_layer = 0; per_layer < 2; per_layer++) {
            char name[112];
            snprintf(name, sizeof(name), "Q6_K down: tiles, ps 4, %d consumer warps, %d slots of %u B%s", a.nc, a.ns, a.slot,
                     per_layer ? ", a launch a layer" : "");
            report(name, &ref6, run_tiles(a, per_layer != 0));
        }
    }
    /* The form an integration into the decode would take: a launch a layer, between the launches of the rest of the
     * step. Per layer one more mat-vec first (an ssm_out-shaped 4,096 -> 2,560 Q4_K matrix adding into x, from a fixed
     * random Q8_K activation, the column-split kernel's shape), then the FFN: the launch chain's four launches or one
     * cu_mega2 launch, each sequence captured as a graph. The mat-vec keeps ~6 KB of shared memory and leans on L1, the
     * tiled chain takes ~210 KB, so this also prices the SMs' shared-memory / L1 split changing at every boundary. */
    {
        const int64_t E = 4096;
        const uint64_t s_ex = cu_weight_row_stride(GGML_TYPE_Q4_K, E);
        std::vector<uint8_t> w = q4k_rows(E, D);
        uint8_t *ex;
        CK(gpuMalloc((void **)&ex, w.size())); CK(gpuMemcpy(ex, w.data(), w.size(), gpuMemcpyHostToDevice));
        const cu_act_mut a3 = act(E);
        {   /* a fixed activation: random quants, scales and their 16-element sums */
            std::vector<int8_t> q(E);
            std::vector<float> d(E / 256);
            std::vector<int16_t> bs(E / 16);
            for (auto &v : q) v = (int8_t)((int)(rnd() % 255) - 127);
            for (auto &v : d) v = 1e-2f * (0.5f + rndf());
            for (int64_t i = 0; i < E / 16; i++) {
                int t = 0;
                for (int k = 0; k < 16; k++) t += q[16 * i + k];
                bs[i] = (int16_t)t;
            }
            CK(gpuMemcpy(a3.k_qs, q.data(), E, gpuMemcpyHostToDevice));
            CK(gpuMemcpy(a3.k_d, d.data(), 4 * (E / 256), gpuMemcpyHostToDevice));
            CK(gpuMemcpy(a3.k_bs, bs.data(), 2 * (E / 16), gpuMemcpyHostToDevice));
        }
        cu_mm_args mx;
        memset(&mx, 0, sizeof(mx));
        mx.a = view(a3); mx.n_act = 1; mx.n_seg = 1;
        cu_mm_seg &sx = mx.seg[0];
        float *yx;
        CK(gpuMalloc((void **)&yx, 4 * D));
        sx.w = ex; sx.y = yx; sx.res = x; sx.ld_y = D; sx.stride = s_ex; sx.type = GGML_TYPE_Q4_K; sx.n_rows = (int32_t)D;
        mx.total_rows = (int32_t)D; mx.total_tiles = (int32_t)(D / 4); mx.n_ctas = (int32_t)(D / CU_MM_WARPS);
        cu_mega2_args a;
        memset(&a, 0, sizeof(a));
        a.gu = dgu2; a.dn = ddn2[0]; a.nw = dnw; a.x = x; a.h = h; a.pd = pd; a.xs = xs; a.cnt = cnt; a.gcnt = gcnt;
        a.D = D; a.F = F; a.eps = eps; a.n_layers = 1; a.ps = 4;
        cu_mega2_fit(&a, 16, 0);
        gpuGraph_t g1, g2;
        gpuGraphExec_t ge1, ge2;
        CK(gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal));
        for (int l = 0; l < L; l++) {
            cu_launch_matmul(&mx, st);
            cu_launch_norm_quant(CU_NQ_RMSNORM, x, NULL, 0, nw[l], eps, 0, 1, a1, BK_ACT_BIT(BK_ACT_Q8_K), st);
            cu_launch_matmul(&mgu[l], st);
            cu_launch_norm_quant(CU_NQ_SWIGLU, g, g + F, F, NULL, eps, 0, 1, a2, BK_ACT_BIT(BK_ACT_Q8_K), st);
            cu_launch_matmul(&mdn[l], st);
        }
        CK(gpuStreamEndCapture(st, &g1));
        CK(gpuGraphInstantiate(&ge1, g1));
        /* pf: each tiled launch sends the next mat-vec's weights to L2 at its tail (the decode form's default) */
        auto capture2 = [&](gpuGraph_t *gr, gpuGraphExec_t *gx, bool pf) {
            bool okc = true;
            CK(gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal));
            for (int l = 0; l < L && okc; l++) {
                cu_launch_matmul(&mx, st);
                cu_mega2_args b = a;
                b.l0 = l;
                if (pf) { b.pf = ex; b.pf_bytes = (uint64_t)D * s_ex; }
                okc = cu_mega2(&b, sms, st);
            }
            const bool c2 = gpuStreamEndCapture(st, gr) == gpuSuccess && okc && gpuGraphInstantiate(gx, *gr) == gpuSuccess;
            (void)gpuGetLastError();
            return c2;
        };
        gpuGraph_t g3;
        gpuGraphExec_t ge3;
        const bool cap = capture2(&g2, &ge2, false), cap3 = capture2(&g3, &ge3, true);
        auto timed = [&](gpuGraphExec_t ge_, bool *ok_) {
            CK(gpuMemcpyAsync(x, x_init, 4 * D, gpuMemcpyDeviceToDevice, st));
            CK(gpuMemsetAsync(cnt, 0, 8 * L, st));
            CK(gpuMemsetAsync(gcnt, 0, 4 * L * (D / 16), st));
            CK(gpuEventRecord(e0, st));
            gpu_pdl.after_kernel = false; /* (a memset before: a plain launch) */
            CK(gpuGraphLaunch(ge_, st));
            CK(gpuEventRecord(e1, st)); CK(gpuEventSynchronize(e1));
            float ms; CK(gpuEventElapsedTime(&ms, e0, e1));
            *ok_ = true;
            return ms * 1000.f;
        };
        bool ok1 = false;
        timed(ge1, &ok1);
        std::vector<float> r1(D);
        CK(gpuMemcpy(r1.data(), x, 4 * D, gpuMemcpyDeviceToHost));
        report("with a mat-vec between layers: launch chain (graph, PDL)", NULL, [&](bool *o) { return timed(ge1, o); });
        char name[112];
        snprintf(name, sizeof(name), "with a mat-vec between layers: tiles, a launch a layer (%d slots, %d warps)", a.ns, a.nc);
        if (!cap) printf("%-72s not captured\n", name);
        else report(name, &r1, [&](bool *o) { return timed(ge2, o); });
        snprintf(name, sizeof(name), "with a mat-vec between layers: tiles, a launch a layer, next weights to L2 at the tail");
        if (!cap3) printf("%-72s not captured\n", name);
        else report(name, &r1, [&](bool *o) { return timed(ge3, o); });
        /* the mat-vec inside the tiled launch (pj: its tiles of 8 super-blocks first, then the FFN), one launch a layer
         * with direct pointers and counters of its own that each launch zeroes when it ends */
        {
            const int pj_ps = 8;
            const uint64_t tb = (uint64_t)(D / 16) * (E / 256 / pj_ps) * cu_mega2_task_bytes(pj_ps);
            uint8_t *ext;
            unsigned *c3;
            CK(gpuMalloc((void **)&ext, tb)); CK(gpuMalloc((void **)&c3, 4 * (3 + 2 * (D / 16))));
            CK(gpuMemset(c3, 0, 4 * (3 + 2 * (D / 16))));
            const bool packed = cu_mega2_pack_dn(ex, GGML_TYPE_Q4_K, D, E, pj_ps, ext, st);
            CK(gpuStreamSynchronize(st));
            gpuGraph_t g4;
            gpuGraphExec_t ge4;
            bool ok4 = packed;
            CK(gpuStreamBeginCapture(st, gpuStreamCaptureModeThreadLocal));
            for (int l = 0; l < L && ok4; l++) {
                cu_mega2_args b = a;
                b.gu = NULL; b.dn = NULL; b.nw = NULL;
                b.gu1 = gu2[l]; b.dn1 = dn2[0][l]; b.nw1 = nw[l];
                b.pj1 = ext; b.pj_qs = a3.k_qs; b.pj_d = a3.k_d; b.pj_bs = a3.k_bs; b.pj_sb = (int32_t)(E / 256); b.pj_ps = pj_ps;
                b.cnt = c3; b.gcnt = c3 + 3; b.l0 = 0; b.n_layers = 1; b.flags = 8;
                b.pf = NULL; b.pf_bytes = 0;
                ok4 = cu_mega2(&b, sms, st);
            }
            const bool cap4 = gpuStreamEndCapture(st, &g4) == gpuSuccess && ok4 && gpuGraphInstantiate(&ge4, g4) == gpuSuccess;
            (void)gpuGetLastError();
            snprintf(name, sizeof(name), "with a mat-vec between layers: tiles with the mat-vec inside, a launch a layer");
            if (!cap4) printf("%-72s not captured\n", name);
            else report(name, &r1, [&](bool *o) { return timed(ge4, o); });
        }
    }
    return 0;
}
