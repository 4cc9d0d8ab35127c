/* Whole-model parity of the CUDA backend: the same GGUF on the CPU backend, on CUDA with graphs and on
 * CUDA eager; a random prompt, then decode steps fed with the CPU's greedy tokens (teacher forcing).
 * CUDA graph replay must equal CUDA eager bit for bit (same kernels); CUDA vs CPU within a relative
 * logit error (activations may round differently in the last place, which moves a quantized value).
 * The prompt's matmuls take the CUDA backend's f16 GEMM (activations and weights rounded to f16) where the CPU
 * multiplies Q8 activations by integer dot products; on some random models and prompts that difference alone moves
 * the logits past the bound (BENCHMARKS.md "A failing seed of test_cuda_model"). So the bound is held against a
 * second CPU instance whose matmuls of as many rows as the GEMM takes compute what the GEMM computes (f16 of the f32
 * rows times f16 of the dequantized weights, summed in double: f16_matmul); the integer CPU's deviation is printed.
 * Any architecture the loader knows: scripts/gpu-check.sh runs the tiny qwen35 (dense), the tiny dense llama /
 * qwen2 / qwen3 files and the tiny qwen35moe ones (routed + shared experts through the moe op).
 * usage: test_cuda_model MODEL.gguf [n_prompt] [n_decode]  (or $VLLMC_CUDA_TEST_MODEL); skips without. */
#include <math.h>
#include <string.h>
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "gguf/gguf.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "model/model.h"
#include "test.h"

/* The backend's on-by-default switches: off only when set to "0" (as backend_cuda_create reads them). */
static bool env_on(const char *name) {
    const char *e = getenv(name);
    return !(e && !strcmp(e, "0"));
}

struct inst { struct backend *be; struct model *m; struct bk_kv_cache *kv; };

/* The CPU oracle of the CUDA prefill GEMM (which == 3 below): the CPU backend's ops with matmul replaced. Batches of
 * at least g_gemm_rows rows (the CUDA backend's threshold; 0: it has no GEMM) meet each weight of a type the GEMM
 * dequantizes as y = sum f16(x) f16(w) (+ bias); other batches and weights take the CPU's own matmul. */
static const struct backend_ops *g_cpu_ops;
static struct backend_ops g_f16_ops;
static int64_t g_gemm_rows;
static uint64_t g_f16_matmuls;

static float f16r(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

static vllmc_status f16_matmul(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs) {
    const int64_t R = act->n_rows, K = act->n_cols;
    if (g_gemm_rows <= 0 || R < g_gemm_rows || R > 65535 || K % 32 || !act->x) return g_cpu_ops->matmul(be, act, n_out, outs);
    float *xh = malloc((size_t)(R * K) * sizeof(float)), *wr = malloc((size_t)K * sizeof(float));
    if (!xh || !wr) {
        free(xh); free(wr);
        return vllmc_errorf(VLLMC_ERR_OOM, "f16_matmul");
    }
    for (int64_t i = 0; i < R * K; i++) xh[i] = f16r(act->x[i]);
    vllmc_status st = VLLMC_OK;
    for (int o = 0; o < n_out && !st; o++) {
        const struct bk_tensor *w = outs[o].w;
        if (!backend_cuda_gemm_weight(w)) {
            st = g_cpu_ops->matmul(be, act, 1, &outs[o]);
            continue;
        }
        const int64_t N = w->ne[1], ld = outs[o].ld_y ? outs[o].ld_y : N;
        for (int64_t n = 0; n < N; n++) {
            dequantize_row(w->type, (const uint8_t *)w->data + (size_t)n * w->row_size_bytes, wr, K);
            for (int64_t k = 0; k < K; k++) wr[k] = f16r(wr[k]);
            for (int64_t r = 0; r < R; r++) {
                double sum = 0;
                for (int64_t k = 0; k < K; k++) sum += (double)xh[r * K + k] * wr[k];
                float y = (float)sum;
                if (outs[o].bias) y += outs[o].bias[n];
                outs[o].y[r * ld + n] = y;
            }
        }
        g_f16_matmuls++;
    }
    free(xh); free(wr);
    return st;
}

static int inst_open(struct inst *in, const char *path, int which, int max_tokens, int n_blocks) {
    memset(in, 0, sizeof(*in));
    vllmc_status st;
    if (which == 0 || which == 3) {
        st = backend_cpu_create(0, false, &in->be);
        if (!st && which == 3) {
            g_cpu_ops = in->be->ops;
            g_f16_ops = *g_cpu_ops;
            g_f16_ops.matmul = f16_matmul;
            in->be->ops = &g_f16_ops;
        }
    } else {
        struct backend_cuda_opts o = {0, which == 2, false, false};
        st = backend_cuda_create(&o, &in->be);
    }
    if (st) return -1;
    if ((st = model_load(path, in->be, &in->m)) || (st = model_reserve(in->m, max_tokens, 1)) ||
        (st = model_kv_create(in->m, BK_KV_F32, n_blocks, &in->kv))) {
        fprintf(stderr, "load on %s: %s\n", in->be->ops->name, vllmc_last_error());
        return -2;
    }
    return 0;
}

static void inst_close(struct inst *in) {
    if (in->kv) model_kv_destroy(in->m, in->kv);
    model_destroy(in->m);
    if (in->be) in->be->ops->destroy(in->be);
}

int main(int argc, char **argv) {
    test_seed_auto("test_cuda_model");
    const char *path = argc > 1 ? argv[1] : getenv("VLLMC_CUDA_TEST_MODEL");
    const int P = argc > 2 ? atoi(argv[2]) : 24, D = argc > 3 ? atoi(argv[3]) : 16;
    if (!path || P < 1 || D < 1) { printf("test_cuda_model: no model given: skipped\n"); return 0; }
    const int n_blocks = (P + D) / 16 + 2;
    struct inst x[4]; /* the CPU, CUDA graphs, CUDA eager, the CPU with the GEMM's f16 prefill (f16_matmul) */
    if (inst_open(&x[0], path, 0, P, n_blocks)) { printf("test_cuda_model: cannot load %s on the CPU: skipped\n", path); return 0; }
    int r1 = inst_open(&x[1], path, 1, P, n_blocks);
    if (r1 == -1) { printf("test_cuda_model: no GPU: skipped\n"); inst_close(&x[0]); return 0; }
    CHECK(r1 == 0);
    CHECK(inst_open(&x[2], path, 2, P, n_blocks) == 0);
    /* the GEMM's row threshold for such a batch (read by swapping in a value and back); none where it has no GEMM or
     * multiplies the Q8 values instead (VLLMC_CUDA_GEMM_ACT=q8: then the CPU's own activations, no f16 oracle) */
    {
        int rows = 0, drows = 0;
        backend_cuda_swap_gemm_rows(x[1].be, &rows, &drows);
        const int r0 = rows;
        backend_cuda_swap_gemm_rows(x[1].be, &rows, &drows);
        const char *ga = getenv("VLLMC_CUDA_GEMM_ACT");
        g_gemm_rows = backend_cuda_has_gemm(x[1].be) && !(ga && !strcmp(ga, "q8")) ? r0 : 0;
    }
    CHECK(inst_open(&x[3], path, 3, P, n_blocks) == 0);
    if (test_n_fail) return test_finish("test_cuda_model");
    const int V = x[0].m->hp.n_vocab;
    /* The bound: 5e-2. Against the oracle the prefill's f16 rounding is gone (the seeds that failed on it measure
     * ~6e-7), but the tiny models are ill-conditioned: where CPU and GPU form an activation in another float order, one
     * element can land on the other side of a Q8 rounding boundary, and that moves the logits by up to ~1.7e-2 on the
     * dense tiny files and ~6e-2 on the tiny qwen35moe (its top-k routing is discontinuous too), seed by seed. */
    const double bound = 5e-2;
    float *lg[4];
    for (int i = 0; i < 4; i++) lg[i] = malloc((size_t)V * sizeof(float));
    int32_t *tok = malloc((size_t)(P + D) * sizeof(int32_t)), *pos = malloc((size_t)(P + D) * sizeof(int32_t));
    int32_t *sidx = calloc((size_t)(P + D), sizeof(int32_t)), *bt = malloc((size_t)n_blocks * sizeof(int32_t));
    for (int i = 0; i < P; i++) tok[i] = (int32_t)(test_rand_u64() % (uint64_t)V);
    for (int i = 0; i < P + D; i++) pos[i] = i;
    for (int i = 0; i < n_blocks; i++) bt[i] = n_blocks - 1 - i;
    struct bk_seq seq = {bt, n_blocks, 0};
    double worst = 0, worst_int = 0;
    int agree = 0, exact_steps = 0;
    for (int step = 0; step <= D; step++) {
        const int t0 = step == 0 ? 0 : P + step - 1, n = step == 0 ? P : 1;
        int32_t row = n - 1, am[4];
        struct bk_batch b = {n, tok + t0, pos + t0, sidx, 1, &seq, 1, &row, NULL};
        for (int i = 0; i < 4; i++) {
            for (int v = 0; v < V; v++) lg[i][v] = NAN;
            CHECK_MSG(model_forward(x[i].m, &b, x[i].kv, lg[i], &am[i]) == VLLMC_OK, "%s", vllmc_last_error());
        }
        double amax = 0, dmax = 0, amax_i = 0, dmax_i = 0;
        bool nan = false;
        for (int v = 0; v < V; v++) {
            nan |= isnan(lg[1][v]) || isnan(lg[2][v]);
            amax = fmax(amax, fabs(lg[3][v]));
            dmax = fmax(dmax, fabs((double)lg[1][v] - lg[3][v]));
            amax_i = fmax(amax_i, fabs(lg[0][v]));
            dmax_i = fmax(dmax_i, fabs((double)lg[1][v] - lg[0][v]));
        }
        CHECK_MSG(!nan, "step %d: NaN logits", step);
        const double rel = dmax / fmax(amax, 1e-6), rel_i = dmax_i / fmax(amax_i, 1e-6);
        worst = fmax(worst, rel);
        worst_int = fmax(worst_int, rel_i);
        agree += am[0] == am[1];
        const bool same = memcmp(lg[1], lg[2], (size_t)V * sizeof(float)) == 0 && am[1] == am[2];
        exact_steps += same;
        CHECK_MSG(same, "step %d: graph and eager logits differ", step);
        CHECK_MSG(rel < bound, "step %d: CUDA vs CPU (f16 prefill) max |dlogit| / max |logit| = %.3g (integer CPU: %.3g)", step, rel, rel_i);
        if (step < D) tok[P + step] = am[0]; /* teacher forcing with the CPU's token */
    }
    printf("test_cuda_model: %s: %d steps, worst relative logit error %.3g, argmax agreement %d/%d, graph == eager in %d/%d\n",
           path, D + 1, worst, agree, D + 1, exact_steps, D + 1);
    printf("test_cuda_model: the CPU oracle's prefill matmuls as the f16 GEMM takes them (%lld rows and more): %llu; against the "
           "integer CPU the worst relative logit error is %.3g\n",
           (long long)g_gemm_rows, (unsigned long long)g_f16_matmuls, worst_int);
    CHECK_MSG(agree * 4 >= (D + 1) * 3, "argmax agreement %d of %d", agree, D + 1);
    struct backend_cuda_stats cs;
    backend_cuda_get_stats(x[1].be, &cs);
    printf("test_cuda_model: graph captures %llu, replays %llu, residual adds fused into the op before %llu, attentions with "
           "their q / k norm + RoPE fused %llu\n",
           (unsigned long long)cs.graph_captures, (unsigned long long)cs.graph_replays, (unsigned long long)cs.fused_adds,
           (unsigned long long)cs.fused_attn);
    CHECK(cs.graph_captures >= 1 && cs.graph_replays + cs.graph_captures >= (uint64_t)D);
    if (env_on("VLLMC_CUDA_FUSE_ADD")) CHECK_MSG(cs.fused_adds > 0, "no residual add was fused"); /* graph steps only */
    /* the qwen35 families' attention layers (q / k norm, RoPE, gate, head_dim 256) take the fused decode launches */
    if (env_on("VLLMC_CUDA_FUSE_ATTN") && !strncmp(x[1].m->hp.arch, "qwen35", 6))
        CHECK_MSG(cs.fused_attn > 0, "no decode attention was fused");
    /* VLLMC_CUDA_ATTN_PRE_SPLIT=1 (off by default): that prologue inside the split launch; graph == eager above then holds
     * its bits against the separate norm, RoPE and KV store launches */
    printf("test_cuda_model: of them, with the prologue inside the split launch %llu (launched or captured %llu)\n",
           (unsigned long long)cs.fused_attn_split, (unsigned long long)backend_cuda_attn_pre_split_launches());
    const char *ps = getenv("VLLMC_CUDA_ATTN_PRE_SPLIT");
    if (ps && !strcmp(ps, "1") && env_on("VLLMC_CUDA_FUSE_ATTN") && !strncmp(x[1].m->hp.arch, "qwen35", 6)) {
        CHECK_MSG(cs.fused_attn_split > 0, "no decode attention took its prologue into the split launch");
        CHECK_MSG(backend_cuda_attn_pre_split_launches() > 0, "recorded with the prologue in the split, but no such launch ran");
    }
    /* VLLMC_CUDA_DEFER_NORM=1 (off by default): the dense FFN's norm deferred into the output projection's launch and the
     * gate / up mat-vec where their weights are Q4_K rows the 16-row kernel takes; graph == eager above holds for it
     * (both take that form), the CPU bound for its other quantization */
    printf("test_cuda_model: deferred norms %llu (writer launches %llu, reader launches %llu)\n", (unsigned long long)cs.deferred_norms,
           (unsigned long long)backend_cuda_kd_launches(0), (unsigned long long)backend_cuda_kd_launches(1));
    const char *dn = getenv("VLLMC_CUDA_DEFER_NORM");
    if (dn && !strcmp(dn, "1") && !strcmp(x[1].m->hp.arch, "qwen35") && x[1].m->hp.n_embd % 256 == 0) {
        const struct gguf_tensor *gt = gguf_find_tensor(x[1].m->gguf, "blk.0.ffn_gate.weight");
        const struct gguf_tensor *pt = gguf_find_tensor(x[1].m->gguf, "blk.0.ssm_out.weight");
        if (gt && pt && gt->type == GGML_TYPE_Q4_K && pt->type == GGML_TYPE_Q4_K)
            CHECK_MSG(cs.deferred_norms > 0 && backend_cuda_kd_launches(1) > 0, "no FFN norm was deferred");
    }
    /* the GDN conv moves into the in-proj matmul's epilogue where the conv channels' weights are Q4_K / Q6_K */
    const struct gguf_tensor *qkv = gguf_find_tensor(x[1].m->gguf, "blk.0.attn_qkv.weight");
    printf("test_cuda_model: GDN convs fused into the in-proj matmul %llu; MoE ops on the column-split kernels %llu, grouped by expert %llu\n",
           (unsigned long long)cs.fused_conv, (unsigned long long)cs.moe_cols, (unsigned long long)cs.moe_grouped);
    if (env_on("VLLMC_CUDA_FUSE_CONV") && qkv && (qkv->type == GGML_TYPE_Q4_K || qkv->type == GGML_TYPE_Q6_K))
        CHECK_MSG(cs.fused_conv > 0, "no GDN conv was fused");
    /* the norm + quantize in the launch before it (off by default): every model has RMSNorms after fused residual adds */
    const char *nq = getenv("VLLMC_CUDA_FUSE_NQ");
    printf("test_cuda_model: norm + quantize ops recorded into the launch before them %llu (matmul launches that ran one: %llu)\n",
           (unsigned long long)cs.fused_nq, (unsigned long long)backend_cuda_nq_launches());
    /* every model has one of: RMSNorms after fused residual adds (bit 1), SwiGLU (2), GDN gated norms (4) */
    if (nq && (strtoul(nq, NULL, 0) & 7) == 7 && env_on("VLLMC_CUDA_FUSE_ADD")) CHECK_MSG(cs.fused_nq > 0, "no norm + quantize was fused");
    printf("test_cuda_model: decode attentions with the combine in the split launch %llu\n", (unsigned long long)cs.fused_comb);
    /* (default on) the GDN's gated norm inside the rule kernel by clusters, in eager and recorded steps alike: its bits
     * against the separate launch are test_cuda_ops gdn_cluster's, op by op */
    printf("test_cuda_model: GDN rule kernels with the gated norm by clusters %llu\n", (unsigned long long)backend_cuda_gdn_cluster_launches());
    /* VLLMC_CUDA_MEGA2 (off by default): the dense FFNs of D 2,560 with Q4_K gate, up and down as one tiled launch; graph
     * == eager above then checks its bits against the four launches */
    printf("test_cuda_model: dense FFNs recorded as one tiled persistent launch %llu (with the output projection inside %llu)\n",
           (unsigned long long)cs.mega2_ffn, (unsigned long long)cs.mega2_pj);
    /* VLLMC_CUDA_MOE2 (off by default): one-row MoE ops as the router and one tiled launch; graph == eager checks its bits */
    printf("test_cuda_model: MoE ops recorded as one tiled persistent launch %llu\n", (unsigned long long)cs.moe2);
    if (nq && (strtoul(nq, NULL, 0) & 32)) CHECK_MSG(cs.fused_comb > 0, "no attention combine was fused"); /* every model has attention */
    for (int i = 0; i < 4; i++) { free(lg[i]); inst_close(&x[i]); }
    free(tok); free(pos); free(sidx); free(bt);
    return test_finish("test_cuda_model");
}
