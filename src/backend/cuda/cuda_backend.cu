/* CUDA backend: memory, weights, the batch, the KV cache and the op table (see cuda_backend.h).
 *
 * Every op is validated on the host when it is called and becomes a record: an op code and a POD
 * argument block of device pointers and scalars (zero-filled first, so records compare bytewise). In
 * eager mode a record is executed at once (kernels queued on the backend's stream). In a decode step
 * (B sequences of one token and one logit row each, graphs allowed) records are only collected; the LM
 * head op ends the step: if a cached step has the same records, its CUDA graph is replayed, else the
 * records are captured into a new graph (the least recently used one evicted past
 * BACKEND_CUDA_GRAPH_CACHE). A graph does exactly what its records do, so equal records make replaying
 * it the same as running them. Positions, token ids and block tables are read by the kernels from device
 * memory (one upload from pinned memory, itself a graph node), and the attention split-K is sized from
 * the cache (its chunk) and a power of two of the longest context, so steady decode of B sequences
 * replays one graph per B (a new one each time the longest context doubles). Any other call in the
 * middle of a step (copies, frees, a new batch) runs what was recorded first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <new>
#include <vector>
#include "common/common.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/gpu_gemm.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define MOE_MAX_EXPERT_CU 1024 /* cuda_moe.cu's routing kernel holds the probabilities in shared memory */
#define CU_GRAPH_MAX_TOKENS 512 /* decode steps of up to this many sequences run as graphs */
#define CU_ATT_WORK_FLOATS (32ll << 20) /* attention split-K partials per launch group (128 MiB) */

/* Prefill defaults (measured on the H200, BENCHMARKS.md "## CUDA"): matmuls with at least GEMM_MIN_ROWS
 * activation rows dequantize the weight to f16 and run the dense GEMM; weights of more than GEMM_MAX_ELEMS
 * elements (an LM head) keep the quantized kernel; batches with a run of at least GDN_CHUNK_MIN (ATTN_PREFILL_MIN)
 * rows of one sequence take the chunked GDN rule (the chunked prefill attention). All three round otherwise than
 * the row-by-row kernels, and which one runs depends on the batch, so a batch-invariant backend keeps them off. */
#define GEMM_MIN_ROWS 32
/* Decode steps (every token its own sequence) keep the quantized kernels (and their graphs) up to this many rows: the
 * GEMM dequantizes every weight to f16 each step (qwen35-4b at 32 sequences: 3 ms of dequant a step, ITL 10.5 ms against
 * 7.7 on the several-row tensor-core kernel; at 64: 15.9 against 13.9; BENCHMARKS.md "A step of 16 sequences"; with
 * mm_kernel_mmq up to 128 rows on an H100, 96 sequences 32.4 -> 12.1 ms, 128 41.0 -> 15.4: "The 64-sequence step,
 * continued"; gemv_q.cu MM_MMR). HIP has no several-row tensor-core kernel: its decode steps keep the GEMM from 65. */
#if defined(VLLMC_HIP)
#define GEMM_MIN_DECODE_ROWS 65
#else
#define GEMM_MIN_DECODE_ROWS 129
#endif
#define GEMM_MAX_ELEMS ((int64_t)64 << 20)
#define GDN_CHUNK_MIN 32
#define ATTN_PREFILL_MIN 32

enum cu_op {
    CU_OP_UPLOAD = 1, CU_OP_EMBED, CU_OP_RMSNORM, CU_OP_NQ, CU_OP_MATMUL, CU_OP_ADD, CU_OP_ROPE, CU_OP_ATTN,
    CU_OP_GETROWS, CU_OP_ARGMAX, CU_OP_D2H, CU_OP_GDN, CU_OP_SIGMUL, CU_OP_MOE, CU_OP_DEQ, CU_OP_GEMM, CU_OP_D2D, CU_OP_MEGA2, CU_OP_COUNT
};
static const char *const cu_op_names[CU_OP_COUNT] = {"?", "upload", "embed", "rmsnorm", "norm+quant", "matmul", "add",
                                                     "rope", "attention", "get_rows", "argmax", "d2h", "gdn",
                                                     "sigmoid_mul", "moe", "dequant f16", "gemm f16", "d2d",
                                                     "ffn tiled"};

static_assert(CU_OP_COUNT <= BACKEND_CUDA_PROF_MAX, "the profile counters are indexed by op");

struct rec_upload { void *dst; const void *src; uint64_t bytes; };
/* a dense FFN's four launches as one tiled persistent launch (mega2_ffn) */
struct rec_mega2 { struct cu_mega2_args a; int32_t ctas, pad; double wbytes; };
struct rec_embed { struct cu_batch_dev b; const uint8_t *table; uint64_t stride; int64_t n; float *out; uint32_t type; uint32_t pad; };
struct rec_rmsnorm { const float *x; const float *w; float *out; int64_t ld_x, n_rows, n_cols, ld_out; float eps; uint32_t pad; };
struct rec_nq { const float *in0, *in1, *w; int64_t ld, n_rows; struct cu_act_mut out; float eps; int32_t mode; uint32_t fmts; int32_t group; };
struct rec_matmul { struct cu_mm_args a; };
struct rec_add { float *y; const float *x; int64_t n; };
struct rec_rope { struct cu_batch_dev b; float *x; const float *ff; int64_t ld; int32_t n_head, head_dim, mode, n_rot; float base, scale; };
struct rec_attn { struct cu_batch_dev b; struct cu_attn_args a; int32_t prefill, pad; /* prefill: the chunked kernel */ };
struct rec_getrows { struct cu_batch_dev b; const float *x; float *out; int64_t n; };
struct rec_argmax { const float *x; int32_t *out; void *work; int64_t n_rows, n; const int32_t *sample; /* non-NULL: draw */ };
struct rec_d2h { void *dst; const void *src; uint64_t bytes; };
struct rec_gdn { struct cu_batch_dev b; struct cu_gdn_args a; float *scratch; /* non-NULL: the chunked rule */ };
struct rec_sigmul { float *x; const float *g; int64_t ld_x, ld_g, n_rows, n_cols; };
struct rec_moe { struct cu_moe_args a; double wbytes; };
/* GEMM path of a matmul: DEQ converts the activation (when convert: the f32 rows, or with act_fmt Q8_K / Q8_0
 * the quantized rows' values from av) and dequantizes the weight; GEMM multiplies. */
struct rec_deq { const float *x; uint16_t *a16; const uint8_t *w; uint16_t *w16; uint64_t stride; int64_t n_rows, n_cols, n_out; int32_t convert, type, act_fmt, pad;
                 struct cu_act_view av; };
struct rec_gemm { struct gpu_gemm *g; const uint16_t *a16, *w16; float *y; const float *bias; int64_t n_rows, n_cols, n_out, ld_y; double wbytes; };

struct cu_graph {
    std::vector<uint8_t> rec;  /* the step's records */
    gpuGraphExec_t exec;
    uint64_t last_use;
};

/* The cache with what the backend keeps beside it: the fp8 key shift on the device (uploaded at the first
 * attention call that needs it: the model sets k_shift right after kv_create, before any store). */
struct cu_kv {
    struct bk_kv_cache kv;
    float *d_shift;            /* [n_layers][n_kv_head * head_dim] */
};

struct cu_backend {
    struct backend base;
    gpuStream_t stream;
    bool eager, profile, batch_invariant;
    bool pdl;                  /* programmatic dependent launch between kernels (gpu_compat.h) */
    bool fuse_add;             /* recorded steps: a residual add after a matmul / moe goes into its epilogue */
    /* the batch: host copies, pinned staging, device copy */
    int32_t n_tokens, n_seqs, n_logits, max_pos, max_block;
    std::vector<int32_t> tok, pos, seq, lrows, seq_slot, seq_nblocks;
    int32_t *h_stage, *d_batch;
    const int32_t *sample_dev;   /* this batch's sampling parameters on the device (bk_batch.sample), or NULL */
    int64_t cap_t, cap_s, cap_b, words;
    struct cu_batch_dev bd;
    /* recording and graphs */
    bool recording;
    std::vector<uint8_t> rec;
    std::vector<size_t> rec_offs; /* offsets of this step's records (the fusions look back a few) */
    bool fuse_attn;            /* recorded steps: q / k norm + RoPE + KV store, and sigmoid gate + quantize, into the
                                  attention's launches */
    bool attn_pre_split;       /* ... and in decode steps (every token its sequence's only one) the q / k norm + RoPE + KV
                                  store inside the split launch (cu_attn_args.pre_split; VLLMC_CUDA_ATTN_PRE_SPLIT=1: off
                                  until measured) */
    bool defer_norm;           /* the FFN's RMSNorm deferred into the launch forming the residual and its readers
                                  (matmul_add_defer, BK_ACT_Q8_KD; VLLMC_CUDA_DEFER_NORM=1: off until measured) */
    FILE *hash_log;            /* VLLMC_CUDA_HASH_LOG (eager): each op's output hash (hash_out) */
    bool fuse_conv;            /* recorded decode steps: the GDN conv into the matmul that writes its input */
    unsigned fuse_nq;          /* BACKEND_CUDA_FUSE_*: a norm + quantize into the launch that writes its input (cu_nq_fuse),
                                  the MoE mix into the down launch */
    unsigned *nq_cnt;          /* CU_NQ_FUSE_COUNTERS counters for it, zero between launches */
    float *mmq_ws;             /* mm_kernel_mmq's split workspace and tile counters (cu_mm_args.mmq_ws); NULL: unsplit */
    unsigned *mmq_cnt;
    /* the tiled persistent FFN chain in recorded batch-1 steps (mega2_ffn; VLLMC_CUDA_MEGA2=ps, off by default): its
     * tiles by weight (packed on the device at first use), its scratch and counters */
    int mega2_ps, n_sms;
    bool mega2_pf;             /* its launches send the next matmul's weights to L2 at their tail (VLLMC_CUDA_MEGA2_PF) */
    bool mega2_pj;             /* ... and take the output projection before the FFN too (VLLMC_CUDA_MEGA2_PJ=1; off) */
    struct mega2_tiles { const void *k0, *k1; int ps; uint8_t *tiles; };
    std::vector<mega2_tiles> mg_tiles;
    float *mg_h, *mg_pd, *mg_xs;
    unsigned *mg_cnt;
    /* the tiled persistent MoE experts in recorded one-row steps (moe2_pass; VLLMC_CUDA_MOE2=1, off by default): the
     * tiles are mg_tiles' (keys ps -1 gate / up, -2 down), the scratch its own */
    bool moe2;
    float *m2_h;
    unsigned *m2_cnt;
    int64_t m2_hn, m2_cn;
    int64_t mg_F;
    /* the last steps the passes (moe2_pass, mega2_ffn) changed, before and after (an equal step folds the same way: the
     * records of a step hold nothing that varies from step to step, which is what lets a graph replay), and what each
     * pass took; a few, since pipelined steps alternate between two staging slots and so between two forms of a step */
    struct step_fold { std::vector<uint8_t> pre, post; std::vector<size_t> post_offs; size_t n_ffn, n_pj, n_moe; uint64_t last_use; };
    std::vector<step_fold> mg_folds;
    std::vector<cu_graph> graphs;
    uint64_t use_clock;
    int32_t *d_argmax, *h_argmax;
    int64_t cap_argmax;
    int32_t *argmax_dst;
    int32_t argmax_n;
    float *attn_work;
    int64_t attn_work_floats;
    uint8_t *moe_work;
    uint64_t moe_work_bytes;
    /* prefill: dense GEMM (NULL where unavailable), its f16 scratch, the chunked GDN's scratch */
    struct gpu_gemm *gemm;
    int32_t gemm_min_rows;
    int32_t gemm_min_decode_rows; /* the same for decode steps (every token its own sequence) */
    bool gdn_chunked, attn_prefill;
    bool gemm_act_q8;          /* the GEMM's activation operand: the quantized rows' values (backend_cuda_set_gemm_act) */
    gpuError_t gemm_err;
    uint16_t *a16, *w16;
    int64_t a16_elems, w16_elems;
    float *gdn_work;
    int64_t gdn_work_floats;
    std::vector<int32_t> chunks; /* host copy of the chunk list (gdn_runs.h) */
    std::vector<uint8_t> chunk_seen;
    struct gdn_chunk_info ch;    /* the batch's runs: the longest (max_run), none repeated (unique), the list split or not */
    bool gdn_runs;               /* split chunk lists for the GDN (backend_cuda_set_gdn_runs) */
    struct backend_cuda_stats stats;
    double t_batch;            /* when the step's batch was set (the host time a replayed step costs) */
    /* pipelined steps (backend_cuda_set_pipelined): two staging / argmax slots used in turn, an event after each
     * step's argmax copy, the steps launched and not yet fetched (oldest first) */
    bool pipe, tok_prev;
    int par;
    int32_t *h_stage2, *h_argmax2;
    gpuEvent_t pev[2];
    int pq[2], n_pq;
    int32_t pq_rows[2];
    /* profile */
    gpuEvent_t ev0, ev1;
    struct backend_cuda_prof prof;
};

static inline cu_backend *cub(struct backend *be) { return (cu_backend *)be; }

thread_local struct gpu_pdl_state gpu_pdl;
int gpu_carveout = -1;
/* Once a kernel (a thread's table of those it set): its preferred carve-out to gpu_carveout. */
void gpu_apply_carveout(const void *k) {
#if !defined(VLLMC_HIP)
    static thread_local const void *done[1024];
    static thread_local int n;
    for (int i = 0; i < n; i++)
        if (done[i] == k) return;
    if (cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, gpu_carveout) != cudaSuccess) (void)cudaGetLastError();
    if (n < 1024) done[n++] = k;
#else
    (void)k;
#endif
}

static vllmc_status gpu_err(gpuError_t e, const char *what) {
    if (e == gpuSuccess) return VLLMC_OK;
    return vllmc_errorf(e == gpuErrorMemoryAllocation ? VLLMC_ERR_OOM : VLLMC_ERR_INVALID, "CUDA %s: %s", what,
                        gpuGetErrorString(e));
}

/* ---------------------------------------------------------------------------------------------
 * records
 * ------------------------------------------------------------------------------------------- */

static double rec_weight_bytes(int op, const void *args) {
    if (op == CU_OP_MOE) return ((const rec_moe *)args)->wbytes;
    if (op == CU_OP_MEGA2) return ((const rec_mega2 *)args)->wbytes;
    if (op == CU_OP_GEMM) return ((const rec_gemm *)args)->wbytes;
    if (op != CU_OP_MATMUL) return 0;
    const rec_matmul *r = (const rec_matmul *)args;
    double b = 0;
    for (int i = 0; i < r->a.n_seg; i++) b += (double)r->a.seg[i].stride * r->a.seg[i].n_rows;
    return b;
}

/* VLLMC_CUDA_HASH_LOG=path (eager runs, a debugging aid): after each op, wait for it and append a line with the
 * op's name and an FNV-1a hash of its output rows to path, so two runs' files diff to the first op that differs. */
static void hash_rows(uint64_t *h, const float *y, int64_t n_rows, int64_t n_cols, int64_t ld) {
    std::vector<float> v((size_t)(n_cols > 0 ? n_cols : 0));
    for (int64_t r = 0; r < n_rows && n_cols > 0; r++) {
        if (gpuMemcpy(v.data(), y + r * ld, (size_t)n_cols * 4, gpuMemcpyDeviceToHost) != gpuSuccess) return;
        const uint8_t *b = (const uint8_t *)v.data();
        for (size_t i = 0; i < (size_t)n_cols * 4; i++) *h = (*h ^ b[i]) * 1099511628211ull;
    }
}

static void hash_out(cu_backend *c, int op, const void *args) {
    (void)gpuStreamSynchronize(c->stream);
    uint64_t h = 1469598103934665603ull;
    int64_t rows = 0;
    if (op == CU_OP_MATMUL) {
        const rec_matmul *r = (const rec_matmul *)args;
        rows = r->a.n_act;
        for (int i = 0; i < r->a.n_seg; i++) hash_rows(&h, r->a.seg[i].y, rows, r->a.seg[i].n_rows, r->a.seg[i].ld_y);
    } else if (op == CU_OP_GEMM) {
        const rec_gemm *r = (const rec_gemm *)args;
        rows = r->n_rows;
        hash_rows(&h, r->y, rows, r->n_out, r->ld_y);
    } else if (op == CU_OP_ATTN) {
        const rec_attn *r = (const rec_attn *)args;
        rows = r->b.n_tokens;
        hash_rows(&h, r->a.out, rows, (int64_t)r->a.n_head * r->a.head_dim, (int64_t)r->a.n_head * r->a.head_dim);
    } else if (op == CU_OP_GDN) {
        const rec_gdn *r = (const rec_gdn *)args;
        rows = r->b.n_tokens;
        hash_rows(&h, r->a.out, rows, (int64_t)r->a.n_v_head * r->a.d_v, (int64_t)r->a.n_v_head * r->a.d_v);
    } else if (op == CU_OP_MOE) {
        const rec_moe *r = (const rec_moe *)args;
        rows = r->a.T;
        hash_rows(&h, r->a.out, rows, r->a.n_embd, r->a.n_embd);
    } else if (op == CU_OP_RMSNORM) {
        const rec_rmsnorm *r = (const rec_rmsnorm *)args;
        rows = r->n_rows;
        hash_rows(&h, r->out, rows, r->n_cols, r->ld_out ? r->ld_out : r->n_cols);
    } else {
        return;
    }
    fprintf(c->hash_log, "%s rows %lld %016llx\n", cu_op_names[op], (long long)rows, (unsigned long long)h);
}

static void rec_exec(cu_backend *c, int op, const void *args) {
    gpuStream_t s = c->stream;
    gpu_pdl.on = c->pdl;
    if (op == CU_OP_UPLOAD || op == CU_OP_D2H || op == CU_OP_D2D) gpu_pdl.after_kernel = false; /* a copy comes between */
    switch (op) {
    case CU_OP_UPLOAD: { const rec_upload *r = (const rec_upload *)args; (void)gpuMemcpyAsync(r->dst, r->src, r->bytes, gpuMemcpyHostToDevice, s); break; }
    case CU_OP_EMBED: { const rec_embed *r = (const rec_embed *)args; cu_launch_embed(&r->b, r->table, r->type, r->stride, r->n, r->out, s); break; }
    case CU_OP_RMSNORM: { const rec_rmsnorm *r = (const rec_rmsnorm *)args; cu_launch_rmsnorm(r->x, r->ld_x, r->w, r->eps, r->n_rows, r->n_cols, r->out, r->ld_out, s); break; }
    case CU_OP_NQ: { const rec_nq *r = (const rec_nq *)args; cu_launch_norm_quant(r->mode, r->in0, r->in1, r->ld, r->w, r->eps, r->group, r->n_rows, r->out, r->fmts, s); break; }
    case CU_OP_MATMUL: { const rec_matmul *r = (const rec_matmul *)args; cu_launch_matmul(&r->a, s); break; }
    case CU_OP_ADD: { const rec_add *r = (const rec_add *)args; cu_launch_add(r->y, r->x, r->n, s); break; }
    case CU_OP_ROPE: { const rec_rope *r = (const rec_rope *)args; cu_launch_rope(&r->b, r->x, r->ld, r->n_head, r->head_dim, r->mode, r->n_rot, r->base, r->scale, r->ff, s); break; }
    case CU_OP_ATTN: {
        const rec_attn *r = (const rec_attn *)args;
        if (r->prefill) cu_launch_attention_prefill(&r->b, &r->a, s);
        else cu_launch_attention(&r->b, &r->a, s);
        break;
    }
    case CU_OP_GETROWS: { const rec_getrows *r = (const rec_getrows *)args; cu_launch_get_rows(&r->b, r->x, r->n, r->out, s); break; }
    case CU_OP_ARGMAX: {
        const rec_argmax *r = (const rec_argmax *)args;
        if (r->sample) cu_launch_sample(r->x, r->n_rows, r->n, r->sample, r->out, s);
        else cu_launch_argmax(r->x, r->n_rows, r->n, r->out, r->work, s);
        break;
    }
    case CU_OP_D2H: { const rec_d2h *r = (const rec_d2h *)args; (void)gpuMemcpyAsync(r->dst, r->src, r->bytes, gpuMemcpyDeviceToHost, s); break; }
    case CU_OP_D2D: { const rec_d2h *r = (const rec_d2h *)args; (void)gpuMemcpyAsync(r->dst, r->src, r->bytes, gpuMemcpyDeviceToDevice, s); break; }
    case CU_OP_GDN: {
        const rec_gdn *r = (const rec_gdn *)args;
        if (r->scratch) cu_launch_gdn_chunked(&r->b, &r->a, r->scratch, s);
        if (!r->scratch || r->a.n_runs > 0) cu_launch_gdn(&r->b, &r->a, s); /* a split list: the short runs */
        break;
    }
    case CU_OP_SIGMUL: { const rec_sigmul *r = (const rec_sigmul *)args; cu_launch_sigmoid_mul(r->x, r->ld_x, r->g, r->ld_g, r->n_rows, r->n_cols, s); break; }
    case CU_OP_MOE: {
        const int path = cu_launch_moe(&((const rec_moe *)args)->a, s);
        c->stats.moe_cols += path == CU_MOE_PATH_COLS;
        c->stats.moe_grouped += path == CU_MOE_PATH_GROUPED || path == CU_MOE_PATH_GROUPED_RS;
        c->stats.moe_route_sort += path == CU_MOE_PATH_GROUPED_RS;
        c->stats.moe_mix_down += path == CU_MOE_PATH_COLS && ((const rec_moe *)args)->a.mix_cnt; /* cu_launch_moe */
        break;
    }
    case CU_OP_DEQ: {
        const rec_deq *r = (const rec_deq *)args;
        if (r->convert && r->act_fmt != BK_ACT_F32) cu_launch_q8_to_f16(&r->av, r->act_fmt, r->n_cols, r->n_rows, r->a16, s);
        else if (r->convert) cu_launch_f32_to_f16(r->x, r->n_cols, r->n_cols, r->n_rows, r->a16, s);
        if (r->w16) cu_launch_dequant_f16(r->w, (uint32_t)r->type, r->stride, r->n_cols, r->n_out, r->w16, s);
        break;
    }
    case CU_OP_GEMM: {
        const rec_gemm *r = (const rec_gemm *)args;
        const gpuError_t e = gpu_gemm_f16_nt(r->g, s, r->n_rows, r->n_out, r->n_cols, r->a16, r->n_cols, r->w16, r->n_cols, r->y, r->ld_y, 0);
        if (e != gpuSuccess && c->gemm_err == gpuSuccess) c->gemm_err = e;
        if (r->bias) cu_launch_add_bias(r->y, r->ld_y, r->bias, r->n_rows, r->n_out, s);
        break;
    }
    case CU_OP_MEGA2: {
        const rec_mega2 *r = (const rec_mega2 *)args;
        if (!cu_mega2(&r->a, r->ctas, s) && c->gemm_err == gpuSuccess) c->gemm_err = gpuErrorInvalidValue; /* (checked when recorded) */
        break;
    }
    default: break;
    }
    if (c->hash_log) hash_out(c, op, args);
}

/* Execute one record now, timing it when profiling. */
static void rec_run(cu_backend *c, int op, const void *args) {
    if (!c->profile) { rec_exec(c, op, args); return; }
    (void)gpuEventRecord(c->ev0, c->stream);
    rec_exec(c, op, args);
    (void)gpuEventRecord(c->ev1, c->stream);
    (void)gpuEventSynchronize(c->ev1);
    float ms = 0.f;
    (void)gpuEventElapsedTime(&ms, c->ev0, c->ev1);
    c->prof.calls[op]++;
    c->prof.ms[op] += ms;
    c->prof.bytes[op] += rec_weight_bytes(op, args);
}

static void rec_run_all(cu_backend *c, const std::vector<uint8_t> &r) {
    for (size_t off = 0; off < r.size();) {
        uint32_t hdr[2];
        memcpy(hdr, &r[off], 8);
        rec_run(c, (int)hdr[0], &r[off + 8]);
        off += 8 + hdr[1];
    }
}

/* Empty the step's records. */
static void rec_reset(cu_backend *c) {
    c->rec.clear();
    c->rec_offs.clear();
}

static vllmc_status submit(cu_backend *c, int op, const void *args, size_t n) {
    if (c->recording) {
        const size_t off = c->rec.size(), padded = (n + 7) & ~(size_t)7;
        c->rec.resize(off + 8 + padded, 0);
        const uint32_t hdr[2] = {(uint32_t)op, (uint32_t)padded};
        memcpy(&c->rec[off], hdr, 8);
        memcpy(&c->rec[off + 8], args, n);
        c->rec_offs.push_back(off);
        return VLLMC_OK;
    }
    rec_run(c, op, args);
    if (c->gemm_err != gpuSuccess) {
        const gpuError_t e = c->gemm_err;
        c->gemm_err = gpuSuccess;
        return vllmc_errorf(VLLMC_ERR_INVALID, "CUDA gemm: error %d (%s)", (int)e, gpuGetErrorString(e));
    }
    return gpu_err(gpuGetLastError(), cu_op_names[op]);
}

/* Run whatever a half-recorded step holds (eagerly) and leave recording. */
static void flush(cu_backend *c) {
    if (!c->recording) return;
    c->recording = false;
    rec_run_all(c, c->rec);
    rec_reset(c);
}

static void graphs_clear(cu_backend *c) {
    for (cu_graph &g : c->graphs)
        if (g.exec) (void)gpuGraphExecDestroy(g.exec);
    c->graphs.clear();
    c->stats.graphs_cached = 0;
}

/* ---- a dense FFN's launches as one tiled persistent launch (cu_mega2, gemv_q.cu; VLLMC_CUDA_MEGA2=ps) ----
 * In a recorded batch-1 step the records  NQ (RMSNorm of x into a1)  MATMUL (gate, up: Q4_K rows of D columns, from a1)
 * NQ (SwiGLU of gate, up into a2)  MATMUL (down: Q4_K rows of F columns, from a2, adding into x)  become one cu_mega2
 * launch over the layer's tiles (packed on the device the first time a weight is seen), which leaves x with the same
 * bits and writes none of a1, gate, up, a2 or the down's own output. So no later record may read those: none, up to the
 * next record that writes each of them whole, may hold a pointer into its bytes (records are plain structs, so any use
 * shows as such a word). */

static vllmc_status dev_alloc(cu_backend *c, size_t n, void **out);
static void dev_free(cu_backend *c, void *p);

static void *rec_at(cu_backend *c, size_t i, uint32_t *op) {
    uint32_t hdr[2];
    memcpy(hdr, &c->rec[c->rec_offs[i]], 8);
    *op = hdr[0];
    return &c->rec[c->rec_offs[i] + 8];
}
/* Whether any 8-byte word of the records [from, to) lies in [lo, lo + len). */
static bool recs_touch(const cu_backend *c, size_t from, size_t to, const void *lo_, uint64_t len) {
    const uintptr_t lo = (uintptr_t)lo_;
    if (!lo || !len) return false;
    for (size_t i = from; i < to; i++) {
        const size_t beg = c->rec_offs[i] + 8, end = i + 1 < c->rec_offs.size() ? c->rec_offs[i + 1] : c->rec.size();
        for (size_t off = beg; off + 8 <= end; off += 8) {
            uint64_t v;
            memcpy(&v, &c->rec[off], 8);
            if (v >= lo && v < lo + len) return true;
        }
    }
    return false;
}
/* The records after `from` up to the next that writes act `o` whole (an RMSNorm or SwiGLU NQ with the same outputs: a
 * QUANT or GATED one reads out.x) or the f32 buffer `y` whole (a matmul segment writing it): none holds a pointer into
 * it. */
static bool act_unread(cu_backend *c, size_t from, const struct cu_act_mut &o, uint32_t fmts) {
    size_t end = from;
    for (; end < c->rec_offs.size(); end++) {
        uint32_t op;
        const rec_nq *w = (const rec_nq *)rec_at(c, end, &op);
        if (op == CU_OP_NQ && (w->mode == CU_NQ_RMSNORM || w->mode == CU_NQ_SWIGLU) && w->out.x == o.x && w->out.k_qs == o.k_qs && w->out.o_qs == o.o_qs &&
            w->out.o_s == o.o_s && (w->fmts & fmts) == fmts && w->n_rows >= 1 && w->in0 != o.x && w->in1 != o.x)
            break;
    }
    const int64_t n = o.n;
    return !recs_touch(c, from, end, o.x, (uint64_t)n * 4) && !recs_touch(c, from, end, o.k_qs, (uint64_t)n) &&
           !recs_touch(c, from, end, o.k_d, (uint64_t)(n / QK_K) * 4) && !recs_touch(c, from, end, o.k_bs, (uint64_t)(n / 16) * 2) &&
           !recs_touch(c, from, end, o.o_qs, (uint64_t)n) && !recs_touch(c, from, end, o.o_d, (uint64_t)(n / 32) * 2) &&
           !recs_touch(c, from, end, o.o_s, (uint64_t)(n / 32) * 2) && !recs_touch(c, from, end, o.h, (uint64_t)n * 2) && !recs_touch(c, from, end, o.bf, (uint64_t)n * 2);
}
static bool out_unread(cu_backend *c, size_t from, const float *y, int64_t n) {
    size_t end = from;
    for (; end < c->rec_offs.size(); end++) {
        uint32_t op;
        const rec_matmul *m = (const rec_matmul *)rec_at(c, end, &op);
        bool whole = false;
        for (int k = 0; op == CU_OP_MATMUL && k < m->a.n_seg; k++)
            whole |= m->a.seg[k].y == y && m->a.seg[k].n_rows >= n && m->a.a.x != y;
        if (whole) break;
    }
    return !recs_touch(c, from, end, y, (uint64_t)n * 4);
}

/* The tiles of (k0, k1) (gate, up; or down rows of `type`, NULL, ps super-blocks a down task) for n_exp experts, expert e
 * at e * exp_bytes of the rows (a dense layer: 1, 0), packed now when first asked for and kept under `key` (the dense
 * FFN's: ps; the MoE experts': -1 gate / up, -2 down). NULL: no memory. */
static const uint8_t *ffn_tiles(cu_backend *c, const uint8_t *k0, const uint8_t *k1, int key, uint32_t type, int ps, int n_exp,
                                uint64_t exp_bytes, int64_t D, int64_t F) {
    for (const auto &t : c->mg_tiles)
        if (t.k0 == k0 && t.k1 == k1 && t.ps == key) return t.tiles;
    const uint64_t bytes = (uint64_t)n_exp * (k1 ? (uint64_t)(F / 8) * cu_mega2_task_bytes((int)(D / QK_K))
                                                 : (uint64_t)(D / 16) * (uint64_t)(F / QK_K / ps) * cu_mega2_dn_task_bytes(ps, type == GGML_TYPE_Q6_K));
    void *p = NULL;
    if (dev_alloc(c, bytes, &p)) { vllmc_clear_error(); return NULL; }
    const bool ok = k1 ? cu_mega2_pack_gu_exps(k0, k1, exp_bytes, n_exp, D, F, (uint8_t *)p, c->stream)
                       : cu_mega2_pack_dn_exps(k0, exp_bytes, n_exp, type, D, F, ps, (uint8_t *)p, c->stream);
    if (!ok) { (void)gpuGetLastError(); dev_free(c, p); return NULL; }
    c->mg_tiles.push_back({k0, k1, key, (uint8_t *)p});
    return (const uint8_t *)p;
}

/* ---- a one-row MoE op's experts as one tiled persistent launch (cu_moe2, gemv_q.cu; VLLMC_CUDA_MOE2=1) ----
 * In a recorded step, each MOE record of one row whose shapes and types the kernel takes gets its tiles (packed on the
 * device the first time an expert tensor is seen: every expert at once, a second copy of those weights) and scratch in
 * its args (cu_moe_args.m2), and cu_launch_moe then runs the router launch and one cu_moe2 launch. That launch writes
 * what the chain writes for later records (ids, wts, Y, Ys, out, x) with the same bits; the chain's other buffers
 * (gate / up rows, hidden rows) are the op's own scratch, written before they are read by every MOE op. Eager steps
 * keep the chain, so test_cuda_model's graph == eager compares the two. */
/* The MoE ops it took. */
static size_t moe2_pass(cu_backend *c) {
    if (!c->moe2) return 0;
    size_t n = 0;
    for (size_t i = 0; i < c->rec_offs.size(); i++) {
        uint32_t op;
        rec_moe *r = (rec_moe *)rec_at(c, i, &op);
        if (op != CU_OP_MOE) continue;
        struct cu_moe_args &a = r->a;
        const int64_t D = a.n_embd, F = a.n_ff[0], Fs = a.shared ? a.n_ff[1] : 0;
        const struct cu_moe_grp &gr = a.gu.g[0], &dr = a.down.g[0];
        if (a.T != 1 || a.m2.on || a.nq.on || a.router.row_order /* (batch invariance: the multi-row path's order) */ || D % 512 || F % 512 || Fs % 512 || gr.n_mat != 2 || gr.n_rows != F || dr.n_rows != D ||
            gr.exp_bytes[0] != gr.exp_bytes[1] || gr.type[0] != GGML_TYPE_Q4_K || gr.type[1] != GGML_TYPE_Q4_K ||
            gr.stride[0] != cu_weight_row_stride(GGML_TYPE_Q4_K, D) || dr.stride[0] != cu_weight_row_stride((uint32_t)dr.type[0], F) ||
            (dr.type[0] != GGML_TYPE_Q4_K && dr.type[0] != GGML_TYPE_Q6_K) || (Fs && (a.gu.n_grp < 2 || a.down.n_grp < 2)))
            continue;
        if (Fs) {
            const struct cu_moe_grp &gs = a.gu.g[1], &ds = a.down.g[1];
            if (gs.n_mat != 2 || gs.type[0] != GGML_TYPE_Q4_K || gs.type[1] != GGML_TYPE_Q4_K || gs.stride[0] != cu_weight_row_stride(GGML_TYPE_Q4_K, D) ||
                gs.stride[1] != gs.stride[0] || (ds.type[0] != GGML_TYPE_Q4_K && ds.type[0] != GGML_TYPE_Q6_K) ||
                ds.stride[0] != cu_weight_row_stride((uint32_t)ds.type[0], Fs))
                continue;
        }
        /* scratch for the largest op so far (grown before any launch of this step is recorded into a graph; an op of
         * this step taken before keeps the old buffers, so the step starts again) */
        const int64_t hn = a.k * F + Fs, cn = 2 + D / 16;
        if (hn > c->m2_hn || cn > c->m2_cn) {
            const bool again = n > 0;
            if (again) {
                for (size_t j = 0; j < i; j++) {
                    uint32_t oj;
                    rec_moe *rj = (rec_moe *)rec_at(c, j, &oj);
                    if (oj == CU_OP_MOE) memset(&rj->a.m2, 0, sizeof(rj->a.m2));
                }
                n = 0;
            }
            (void)gpuStreamSynchronize(c->stream);
            graphs_clear(c); /* (captured steps hold the old buffers) */
            c->mg_folds.clear();
            dev_free(c, c->m2_h); dev_free(c, c->m2_cnt);
            c->m2_h = NULL; c->m2_cnt = NULL; c->m2_hn = c->m2_cn = 0;
            if (dev_alloc(c, (size_t)hn * 4, (void **)&c->m2_h) || dev_alloc(c, (size_t)cn * 4, (void **)&c->m2_cnt)) {
                vllmc_clear_error();
                dev_free(c, c->m2_h);
                c->m2_h = NULL;
                c->moe2 = false;
                LOG_WARN("VLLMC_CUDA_MOE2: no device memory for its scratch; the MoE ops keep their launches");
                return n;
            }
            c->m2_hn = hn; c->m2_cn = cn;
            if (again) { /* (the ops before, smaller, fit the new buffers) */
                i = (size_t)-1;
                continue;
            }
        }
        struct cu_moe2_tiles t;
        memset(&t, 0, sizeof(t));
        t.gu_r = ffn_tiles(c, gr.w[0], gr.w[1], -1, GGML_TYPE_Q4_K, 0, a.E, gr.exp_bytes[0], D, F);
        t.dn_r = t.gu_r ? ffn_tiles(c, dr.w[0], NULL, -2, (uint32_t)dr.type[0], (int)(F / QK_K), a.E, dr.exp_bytes[0], D, F) : NULL;
        bool ok = t.gu_r && t.dn_r;
        if (ok && Fs) {
            const struct cu_moe_grp &gs = a.gu.g[1], &ds = a.down.g[1];
            t.gu_s = ffn_tiles(c, gs.w[0], gs.w[1], -1, GGML_TYPE_Q4_K, 0, 1, 0, D, Fs);
            t.dn_s = t.gu_s ? ffn_tiles(c, ds.w[0], NULL, -2, (uint32_t)ds.type[0], (int)(Fs / QK_K), 1, 0, D, Fs) : NULL;
            ok = t.gu_s && t.dn_s;
            t.dn_q6_s = ds.type[0] == GGML_TYPE_Q6_K;
        }
        if (!ok) { /* no memory for another layer's tiles: the MoE ops without them keep their launches from now on */
            LOG_WARN("VLLMC_CUDA_MOE2: no device memory for more expert tiles; the other MoE ops keep their launches");
            c->moe2 = false;
            break;
        }
        t.dn_q6_r = dr.type[0] == GGML_TYPE_Q6_K;
        t.h = c->m2_h; t.cnt = c->m2_cnt; t.ctas = c->n_sms; t.on = 1;
        cu_moe2_fit(&a, 16, &t);
        a.m2 = t;
        if (!cu_moe2_launch(&a, c->stream, false)) {
            (void)gpuGetLastError();
            memset(&a.m2, 0, sizeof(a.m2));
            continue;
        }
        n++;
    }
    return n;
}

/* The FFNs it folded (*n_pj of them with the projection). */
static size_t mega2_ffn(cu_backend *c, size_t *n_pj) {
    *n_pj = 0;
    if (!c->mega2_ps || c->rec_offs.size() < 4) return 0;
    const size_t nr = c->rec_offs.size();
    std::vector<char> drop(nr, 0);
    std::vector<std::pair<size_t, rec_mega2>> put;
    const uint32_t q8k = BK_ACT_BIT(BK_ACT_Q8_K);
    for (size_t i = 0; i + 3 < nr; i++) {
        uint32_t o0, o1, o2, o3;
        const rec_nq *q1 = (const rec_nq *)rec_at(c, i, &o0);
        const rec_matmul *gu = (const rec_matmul *)rec_at(c, i + 1, &o1);
        const rec_nq *q2 = (const rec_nq *)rec_at(c, i + 2, &o2);
        const rec_matmul *dn = (const rec_matmul *)rec_at(c, i + 3, &o3);
        if (o0 != CU_OP_NQ || o1 != CU_OP_MATMUL || o2 != CU_OP_NQ || o3 != CU_OP_MATMUL) continue;
        const int64_t D = q1->out.n, F = q2->out.n;
        if (q1->mode != CU_NQ_RMSNORM || q1->n_rows != 1 || !(q1->fmts & q8k) || !q1->w || D != 2560 || q2->mode != CU_NQ_SWIGLU ||
            q2->n_rows != 1 || !(q2->fmts & q8k) || F % 1024 || F / QK_K > 64 || (F / QK_K) % c->mega2_ps)
            continue;
        const struct cu_mm_args &A = gu->a, &B = dn->a;
        auto plain = [](const struct cu_mm_args &m) { return m.n_act == 1 && !m.nq.on && !m.conv.on && !m.row_order; };
        if (!plain(A) || !plain(B) || A.n_seg != 2 || B.n_seg != 1 || A.a.k_qs != q1->out.k_qs || B.a.k_qs != q2->out.k_qs) continue;
        int gi = -1;
        for (int k = 0; k < 2; k++)
            if (A.seg[k].y == q2->in0 && A.seg[1 - k].y == q2->in1) gi = k;
        if (gi < 0 || q2->in0 == q2->in1) continue;
        const struct cu_mm_seg &sg = A.seg[gi], &su = A.seg[1 - gi], &sd = B.seg[0];
        const uint64_t s_gu = cu_weight_row_stride(GGML_TYPE_Q4_K, D), s_dn = cu_weight_row_stride(sd.type, F);
        bool ok = true;
        for (const struct cu_mm_seg *t : {&sg, &su})
            ok &= t->type == GGML_TYPE_Q4_K && t->n_rows == F && t->stride == s_gu && !t->bias && !t->res;
        ok &= (sd.type == GGML_TYPE_Q4_K || sd.type == GGML_TYPE_Q6_K) && s_dn && sd.n_rows == D && sd.stride == s_dn && !sd.bias && sd.res == q1->in0 && sd.ld_y == D &&
              sd.y != q1->in0;
        if (!ok || !act_unread(c, i + 4, q1->out, q1->fmts) || !act_unread(c, i + 4, q2->out, q2->fmts) ||
            !out_unread(c, i + 4, sg.y, F) || !out_unread(c, i + 4, su.y, F) || !out_unread(c, i + 4, sd.y, D))
            continue;
        /* scratch for the largest F so far (grown before any launch of this step is recorded into a graph) */
        if (F > c->mg_F) {
            c->mg_folds.clear(); /* (the folds kept hold the old buffers) */
            (void)gpuStreamSynchronize(c->stream);
            if (c->mg_F) graphs_clear(c); /* (captured steps hold the old buffers) */
            dev_free(c, c->mg_h); dev_free(c, c->mg_pd);
            c->mg_h = c->mg_pd = NULL;
            c->mg_F = 0;
            if (dev_alloc(c, (size_t)F * 4, (void **)&c->mg_h) || dev_alloc(c, (size_t)(F / 1024) * D * 4, (void **)&c->mg_pd)) {
                vllmc_clear_error();
                dev_free(c, c->mg_h);
                c->mg_h = NULL;
                c->mega2_ps = 0;
                return 0; /* (nothing rewritten yet) */
            }
            c->mg_F = F;
            for (auto &p : put) { p.second.a.h = c->mg_h; p.second.a.pd = c->mg_pd; } /* (FFNs taken before: the new buffers) */
        }
        if (!c->mg_xs && (dev_alloc(c, (size_t)c->n_sms * D * 4, (void **)&c->mg_xs) ||
                          dev_alloc(c, (3 + 2 * (size_t)D / 16) * 4, (void **)&c->mg_cnt))) {
            vllmc_clear_error();
            c->mega2_ps = 0;
            return 0;
        }
        const uint8_t *tg = ffn_tiles(c, sg.w, su.w, 0, GGML_TYPE_Q4_K, 0, 1, 0, D, F);
        const uint8_t *td = tg ? ffn_tiles(c, sd.w, NULL, c->mega2_ps, (uint32_t)sd.type, c->mega2_ps, 1, 0, D, F) : NULL;
        if (!tg || !td) { /* no memory for another layer's tiles: the FFNs without them keep their launches from now on */
            LOG_WARN("VLLMC_CUDA_MEGA2: no device memory for more FFN tiles; the other FFNs keep their four launches");
            c->mega2_ps = 0;
            break;
        }
        rec_mega2 r;
        memset(&r, 0, sizeof(r));
        struct cu_mega2_args &a = r.a;
        a.gu1 = tg; a.dn1 = td; a.nw1 = q1->w;
        a.x = (float *)q1->in0; a.h = c->mg_h; a.pd = c->mg_pd; a.xs = c->mg_xs; a.cnt = c->mg_cnt; a.gcnt = c->mg_cnt + 3;
        a.D = D; a.F = F; a.eps = q1->eps; a.l0 = 0; a.n_layers = 1; a.ps = c->mega2_ps; a.flags = 8;
        a.dn_q6 = sd.type == GGML_TYPE_Q6_K;
        cu_mega2_fit(&a, 16, 0);
        /* the next matmul's weights to L2 at the launch's tail (its first segment; VLLMC_CUDA_MEGA2_PF=0: not) */
        for (size_t j = i + 4; c->mega2_pf && j < nr; j++) {
            uint32_t oj;
            const rec_matmul *nm = (const rec_matmul *)rec_at(c, j, &oj);
            if (oj == CU_OP_NQ) continue; /* (a norm + quantize reads no weights) */
            if (oj == CU_OP_MATMUL && nm->a.n_seg > 0 && !((uintptr_t)nm->a.seg[0].w % 16)) {
                a.pf = nm->a.seg[0].w;
                a.pf_bytes = VLLMC_MIN((uint64_t)nm->a.seg[0].stride * (uint64_t)nm->a.seg[0].n_rows, (uint64_t)24 << 20);
            }
            break;
        }
        r.ctas = c->n_sms;
        r.wbytes = (double)F * 2 * s_gu + (double)D * s_dn;
        if (!cu_mega2_launch(&a, r.ctas, c->stream, false)) { (void)gpuGetLastError(); continue; }
        /* VLLMC_CUDA_MEGA2_PJ: the record before, the output projection adding into x (Q4_K rows of D, one segment, its
         * own output written nowhere else read), into the same launch (mm_kernel_mma's pair order, so the same bits) */
        size_t at = i;
        uint32_t op_p = 0;
        const rec_matmul *pm = c->mega2_pj && i > 0 && !drop[i - 1] && (put.empty() || put.back().first != i - 1)
                                   ? (const rec_matmul *)rec_at(c, i - 1, &op_p) : NULL;
        if (pm && op_p == CU_OP_MATMUL && plain(pm->a) && pm->a.n_seg == 1) {
            const struct cu_mm_seg &sp = pm->a.seg[0];
            const int64_t K0 = pm->a.a.n, pj_sb = K0 / QK_K;
            const int pj_ps = pj_sb % 8 == 0 ? 8 : pj_sb % 4 == 0 ? 4 : 2;
            const bool fits = sp.type == GGML_TYPE_Q4_K && K0 % QK_K == 0 && sp.n_rows == D && sp.stride == cu_weight_row_stride(GGML_TYPE_Q4_K, K0) &&
                              !sp.bias && sp.res == q1->in0 && sp.ld_y == D && sp.y != q1->in0 && pj_sb % 2 == 0 && pj_sb / 2 <= F / 1024 &&
                              pj_sb * QK_K <= VLLMC_MAX(D, F) && pm->a.a.k_qs && pm->a.a.k_d && pm->a.a.k_bs && !((uintptr_t)pm->a.a.k_qs % 16) &&
                              !((uintptr_t)pm->a.a.k_bs % 16) && (sp.y == sd.y || out_unread(c, i + 4, sp.y, D));
            const uint8_t *tp = fits ? ffn_tiles(c, sp.w, NULL, pj_ps, GGML_TYPE_Q4_K, pj_ps, 1, 0, D, K0) : NULL;
            if (tp) {
                cu_mega2_args b = a;
                b.pj1 = tp; b.pj_qs = pm->a.a.k_qs; b.pj_d = pm->a.a.k_d; b.pj_bs = pm->a.a.k_bs; b.pj_sb = (int32_t)pj_sb; b.pj_ps = pj_ps;
                cu_mega2_fit(&b, 16, 0);
                if (cu_mega2_launch(&b, r.ctas, c->stream, false)) {
                    a = b;
                    at = i - 1;
                    r.wbytes += (double)D * sp.stride;
                } else {
                    (void)gpuGetLastError();
                }
            }
        }
        put.push_back({at, r});
        drop[i] = at != i;
        drop[i + 1] = drop[i + 2] = drop[i + 3] = 1;
        i += 3;
    }
    if (put.empty()) return 0;
    std::vector<uint8_t> rec;
    std::vector<size_t> offs;
    rec.reserve(c->rec.size());
    size_t pi = 0;
    for (size_t i = 0; i < nr; i++) {
        if (drop[i]) continue;
        offs.push_back(rec.size());
        if (pi < put.size() && put[pi].first == i) {
            const size_t padded = (sizeof(rec_mega2) + 7) & ~(size_t)7;
            const uint32_t hdr[2] = {(uint32_t)CU_OP_MEGA2, (uint32_t)padded};
            const size_t off = rec.size();
            rec.resize(off + 8 + padded, 0);
            memcpy(&rec[off], hdr, 8);
            memcpy(&rec[off + 8], &put[pi].second, sizeof(rec_mega2));
            pi++;
            continue;
        }
        const size_t beg = c->rec_offs[i], end = i + 1 < nr ? c->rec_offs[i + 1] : c->rec.size();
        rec.insert(rec.end(), c->rec.begin() + (std::ptrdiff_t)beg, c->rec.begin() + (std::ptrdiff_t)end);
    }
    c->rec.swap(rec);
    c->rec_offs.swap(offs);
    for (const auto &p : put) *n_pj += p.second.a.pj1 != NULL;
    return put.size();
}

/* The passes over a recorded step's records (moe2_pass, mega2_ffn). They scan the records (mega2_ffn the records after
 * each FFN for readers of its buffers) and query the device, which costs a decode step ~0.1 ms of host time; a step
 * equal to one they changed before takes that one's result instead (a memcmp). */
static void step_passes(cu_backend *c) {
    if (!c->moe2 && !c->mega2_ps) return;
    for (cu_backend::step_fold &f : c->mg_folds)
        if (f.pre.size() == c->rec.size() && !memcmp(f.pre.data(), c->rec.data(), c->rec.size())) {
            c->rec = f.post;
            c->rec_offs = f.post_offs;
            c->stats.mega2_ffn += f.n_ffn;
            c->stats.mega2_pj += f.n_pj;
            c->stats.moe2 += f.n_moe;
            f.last_use = ++c->use_clock;
            return;
        }
    std::vector<uint8_t> pre(c->rec);
    const size_t n_moe = moe2_pass(c);
    size_t n_pj = 0;
    const size_t n_ffn = mega2_ffn(c, &n_pj);
    c->stats.mega2_ffn += n_ffn;
    c->stats.mega2_pj += n_pj;
    c->stats.moe2 += n_moe;
    if (!n_moe && !n_ffn) return; /* (steps the passes leave alone do not push out the ones they change) */
    /* keep it, in place of the least recently used of 4 */
    size_t slot = c->mg_folds.size();
    if (slot == 4) {
        slot = 0;
        for (size_t k = 1; k < c->mg_folds.size(); k++)
            if (c->mg_folds[k].last_use < c->mg_folds[slot].last_use) slot = k;
    } else {
        c->mg_folds.emplace_back();
    }
    cu_backend::step_fold &f = c->mg_folds[slot];
    f.pre.swap(pre);
    f.post = c->rec;
    f.post_offs = c->rec_offs;
    f.n_ffn = n_ffn; f.n_pj = n_pj; f.n_moe = n_moe;
    f.last_use = ++c->use_clock;
}

/* End of a recorded step: replay the cached graph of an equal step, else capture one. */
static vllmc_status finish_step(cu_backend *c) {
    c->recording = false;
    step_passes(c);
    gpuError_t e;
    for (cu_graph &g : c->graphs)
        if (g.rec.size() == c->rec.size() && !memcmp(g.rec.data(), c->rec.data(), c->rec.size())) {
            g.last_use = ++c->use_clock;
            rec_reset(c);
            e = gpuGraphLaunch(g.exec, c->stream);
            if (e == gpuSuccess) {
                c->stats.graph_replays++;
                c->stats.host_steps++;
                c->stats.host_ns += (uint64_t)((vllmc_time_s() - c->t_batch) * 1e9);
                return VLLMC_OK;
            }
            return gpu_err(e, "graph launch");
        }
    gpuGraph_t g = NULL;
    gpuGraphExec_t exec = NULL;
    e = gpuStreamBeginCapture(c->stream, gpuStreamCaptureModeThreadLocal);
    gpu_pdl.after_kernel = false;
    if (e == gpuSuccess) {
        rec_run_all(c, c->rec);
        e = gpuStreamEndCapture(c->stream, &g);
    }
    if (e == gpuSuccess) e = gpuGraphInstantiate(&exec, g);
    if (g) (void)gpuGraphDestroy(g);
    if (e != gpuSuccess) { /* no graph: run the step eagerly */
        (void)gpuGetLastError();
        rec_run_all(c, c->rec);
        rec_reset(c);
        c->stats.eager_steps++;
        return gpu_err(gpuGetLastError(), "eager step");
    }
    if (c->graphs.size() >= BACKEND_CUDA_GRAPH_CACHE) { /* evict the least recently used */
        size_t lru = 0;
        for (size_t i = 1; i < c->graphs.size(); i++)
            if (c->graphs[i].last_use < c->graphs[lru].last_use) lru = i;
        (void)gpuGraphExecDestroy(c->graphs[lru].exec);
        c->graphs.erase(c->graphs.begin() + (std::ptrdiff_t)lru);
    }
    cu_graph ng;
    ng.rec.swap(c->rec);
    ng.exec = exec;
    ng.last_use = ++c->use_clock;
    c->graphs.push_back(std::move(ng));
    rec_reset(c);
    c->stats.graph_captures++;
    c->stats.graphs_cached = c->graphs.size();
    return gpu_err(gpuGraphLaunch(exec, c->stream), "graph launch");
}

/* ---------------------------------------------------------------------------------------------
 * memory
 * ------------------------------------------------------------------------------------------- */

static vllmc_status dev_alloc(cu_backend *c, size_t n, void **out) {
    *out = NULL;
    if (n == 0) n = 64;
    n = ((n + 255) & ~(size_t)255) + 256; /* slack for alignment pads inside buffers */
    void *p = NULL;
    vllmc_status st = gpu_err(gpuMalloc(&p, n + 256), "malloc");
    if (st) return vllmc_errorf(st, "cannot allocate %zu bytes on the GPU: %s", n, vllmc_last_error());
    /* a size header in front, so frees can update the counters */
    uint64_t hdr[2] = {(uint64_t)n, 0x76636c6c6d76ull};
    (void)gpuMemcpy(p, hdr, sizeof(hdr), gpuMemcpyHostToDevice);
    void *user = (char *)p + 256;
    (void)gpuMemset(user, 0, n);
    c->stats.bytes_now += n;
    if (c->stats.bytes_now > c->stats.bytes_peak) c->stats.bytes_peak = c->stats.bytes_now;
    *out = user;
    return VLLMC_OK;
}

static void dev_free(cu_backend *c, void *p) {
    if (!p) return;
    void *base = (char *)p - 256;
    uint64_t hdr[2] = {0, 0};
    if (gpuMemcpy(hdr, base, sizeof(hdr), gpuMemcpyDeviceToHost) == gpuSuccess && hdr[1] == 0x76636c6c6d76ull)
        c->stats.bytes_now -= hdr[0];
    (void)gpuFree(base);
}

static vllmc_status cu_alloc(struct backend *be, size_t n, void **out) { return dev_alloc(cub(be), n, out); }

static void cu_free(struct backend *be, void *p) {
    cu_backend *c = cub(be);
    flush(c);
    (void)gpuStreamSynchronize(c->stream);
    dev_free(c, p);
}

static vllmc_status cu_copy_to_device(struct backend *be, void *dst, const void *src, size_t n) {
    cu_backend *c = cub(be);
    flush(c);
    if (!n) return VLLMC_OK;
    (void)gpuMemcpyAsync(dst, src, n, gpuMemcpyHostToDevice, c->stream);
    gpu_pdl.after_kernel = false;
    return gpu_err(gpuStreamSynchronize(c->stream), "copy to device");
}

static vllmc_status cu_copy_within(struct backend *be, void *dst, const void *src, size_t n) {
    cu_backend *c = cub(be);
    flush(c);
    if (!n) return VLLMC_OK;
    (void)gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToDevice, c->stream);
    return gpu_err(gpuGetLastError(), "copy on device");
}

static vllmc_status cu_mem_info(struct backend *be, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)be;
    size_t f = 0, t = 0;
    vllmc_status st = gpu_err(gpuMemGetInfo(&f, &t), "memory info");
    if (st) return st;
    *free_bytes = f;
    *total_bytes = t;
    return VLLMC_OK;
}

static vllmc_status cu_copy_to_host(struct backend *be, void *dst, const void *src, size_t n) {
    cu_backend *c = cub(be);
    flush(c);
    if (!n) return VLLMC_OK;
    (void)gpuMemcpyAsync(dst, src, n, gpuMemcpyDeviceToHost, c->stream);
    gpu_pdl.after_kernel = false;
    return gpu_err(gpuStreamSynchronize(c->stream), "copy to host");
}

static bool cu_matmul_type(uint32_t t) {
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_IQ4_XS || t == GGML_TYPE_Q8_0 ||
           t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_F32 ||
           t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 ||
           t == GGML_TYPE_MXFP4;
}

static vllmc_status cu_weight_upload(struct backend *be, const void *host_data, uint32_t type, int n_dims,
                                     const int64_t *ne, struct bk_tensor *out) {
    cu_backend *c = cub(be);
    flush(c);
    memset(out, 0, sizeof(*out));
    const struct quant_traits *tr = quant_traits(type);
    if (!tr || !tr->supported) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tensor type %u not supported", type);
    if (n_dims < 1 || n_dims > 4) return vllmc_errorf(VLLMC_ERR_INVALID, "tensor with %d dims", n_dims);
    out->type = type;
    out->n_dims = n_dims;
    for (int i = 0; i < 4; i++) out->ne[i] = i < n_dims ? ne[i] : 1;
    out->row_size_bytes = quant_row_size(type, out->ne[0]);
    if (!out->row_size_bytes || out->ne[0] <= 0)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "row of %lld elements is not a multiple of the %s block (%d)",
                            (long long)out->ne[0], tr->name, tr->block_size);
    for (int i = 1; i < 4; i++)
        if (out->ne[i] <= 0) return vllmc_errorf(VLLMC_ERR_INVALID, "tensor extent %lld", (long long)out->ne[i]);
    vllmc_status st;
    if (n_dims == 1) {
        std::vector<float> f((size_t)out->ne[0]);
        dequantize_row(type, host_data, f.data(), out->ne[0]);
        void *d = NULL;
        if ((st = dev_alloc(c, f.size() * 4, &d))) return st;
        if ((st = gpu_err(gpuMemcpy(d, f.data(), f.size() * 4, gpuMemcpyHostToDevice), "upload"))) { dev_free(c, d); return st; }
        out->data = d;
        out->type = GGML_TYPE_F32;
        out->row_size_bytes = (uint64_t)out->ne[0] * 4;
        c->stats.weight_bytes += f.size() * 4;
        return VLLMC_OK;
    }
    const uint64_t stride = cu_weight_row_stride(type, out->ne[0]);
    if (!stride)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tensor type %s (rows of %lld) is not supported by the CUDA backend",
                            tr->name, (long long)out->ne[0]);
    const int64_t rows = out->ne[1] * out->ne[2] * out->ne[3];
    const uint64_t total = stride * (uint64_t)rows;
    void *d = NULL;
    if ((st = dev_alloc(c, total, &d))) return st;
    /* repack in slices through a host buffer */
    const int64_t slice = VLLMC_MAX((int64_t)1, (int64_t)((64u << 20) / stride));
    std::vector<uint8_t> buf((size_t)(stride * (uint64_t)VLLMC_MIN(slice, rows)));
    for (int64_t r0 = 0; r0 < rows; r0 += slice) {
        const int64_t n = VLLMC_MIN(slice, rows - r0);
        cu_repack_rows(type, (const uint8_t *)host_data + (uint64_t)r0 * out->row_size_bytes, out->ne[0], n, buf.data());
        if ((st = gpu_err(gpuMemcpy((uint8_t *)d + (uint64_t)r0 * stride, buf.data(), stride * (uint64_t)n,
                                    gpuMemcpyHostToDevice), "upload"))) {
            dev_free(c, d);
            return st;
        }
    }
    out->data = d;
    c->stats.weight_bytes += total;
    return VLLMC_OK;
}

static void cu_weight_free(struct backend *be, struct bk_tensor *t) {
    if (!t || !t->data) return;
    cu_free(be, t->data);
    t->data = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * batch
 * ------------------------------------------------------------------------------------------- */

/* The rows' draws as cu_launch_sample reads them, 6 words a row: {u (a double), temperature, top_p, min_p, top_k};
 * a parameter out of range is refused before anything is written (w NULL: only the check). */
static vllmc_status pack_sample(const struct bk_sample *rows, int32_t n, int32_t *w) {
    for (int32_t i = 0; i < n; i++) {
        const struct bk_sample *q = &rows[i];
        if (!(q->temperature >= 0.0f && q->temperature <= 1e4f) || !(q->top_p > 0.0f && q->top_p <= 1.0f) ||
            !(q->min_p >= 0.0f && q->min_p <= 1.0f) || q->top_k < 0 || !(q->u >= 0.0 && q->u < 1.0))
            return vllmc_errorf(VLLMC_ERR_INVALID, "sampling parameters of logit row %d out of range", i);
    }
    for (int32_t i = 0; w && i < n; i++, w += 6) {
        memcpy(w, &rows[i].u, 8);
        memcpy(w + 2, &rows[i].temperature, 4);
        memcpy(w + 3, &rows[i].top_p, 4);
        memcpy(w + 4, &rows[i].min_p, 4);
        w[5] = rows[i].top_k;
    }
    return VLLMC_OK;
}

static vllmc_status grow_batch(cu_backend *c, int64_t nt, int64_t ns, int64_t nb) {
    if (nt <= c->cap_t && ns <= c->cap_s && nb <= c->cap_b && c->d_batch) return VLLMC_OK;
    int64_t ct = VLLMC_MAX(c->cap_t, (int64_t)16), cs = VLLMC_MAX(c->cap_s, (int64_t)4), cb = VLLMC_MAX(c->cap_b, (int64_t)64);
    while (ct < nt) ct *= 2;
    while (cs < ns) cs *= 2;
    while (cb < nb) cb *= 2;
    (void)gpuStreamSynchronize(c->stream);
    if (c->h_stage) (void)gpuFreeHost(c->h_stage);
    if (c->h_stage2) (void)gpuFreeHost(c->h_stage2);
    if (c->d_batch) dev_free(c, c->d_batch);
    c->h_stage = NULL;
    c->h_stage2 = NULL;
    c->d_batch = NULL;
    c->cap_t = c->cap_s = c->cap_b = 0;
    /* ... + the chunk list (at most one chunk a row), then 6 words a row of sampling parameters (even: its doubles) */
    const int64_t words = 4 * ct + 4 * cs + cb + 8 * ct + (cb & 1) + 6 * ct;
    vllmc_status st;
    if ((st = gpu_err(gpuHostAlloc((void **)&c->h_stage, (size_t)words * 4), "pinned batch"))) return st;
    if ((st = gpu_err(gpuHostAlloc((void **)&c->h_stage2, (size_t)words * 4), "pinned batch"))) return st;
    if ((st = dev_alloc(c, (size_t)words * 4, (void **)&c->d_batch))) return st;
    memset(c->h_stage, 0, (size_t)words * 4);
    memset(c->h_stage2, 0, (size_t)words * 4);
    c->cap_t = ct; c->cap_s = cs; c->cap_b = cb; c->words = words;
    return VLLMC_OK;
}

static vllmc_status cu_batch_set(struct backend *be, const struct bk_batch *b) {
    cu_backend *c = cub(be);
    flush(c);
    const bool tok_prev = c->tok_prev; /* (for this batch only, set or refused) */
    c->tok_prev = false;
    if (!b || b->n_tokens <= 0 || b->n_seqs <= 0 || b->n_logits < 0 || b->n_logits > b->n_tokens)
        return vllmc_errorf(VLLMC_ERR_INVALID, "batch: bad counts");
    if (!b->token_ids || !b->pos || !b->seq_idx || !b->seqs || (b->n_logits && !b->logit_rows))
        return vllmc_errorf(VLLMC_ERR_INVALID, "batch: missing array");
    int64_t n_blocks = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seqs[s].n_blocks < 0 || (b->seqs[s].n_blocks && !b->seqs[s].block_table))
            return vllmc_errorf(VLLMC_ERR_INVALID, "batch: sequence %d has a bad block table", s);
        n_blocks += b->seqs[s].n_blocks;
    }
    std::vector<int32_t> last((size_t)b->n_seqs, -1);
    int32_t max_pos = 0;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        const int32_t s = b->seq_idx[t], p = b->pos[t];
        if (s < 0 || s >= b->n_seqs) return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: sequence index %d out of range", t, s);
        if (p < 0 || p / BK_KV_BLOCK >= b->seqs[s].n_blocks)
            return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: position %d not covered by the block table of sequence %d", t, p, s);
        if (p <= last[(size_t)s]) return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: positions of sequence %d not increasing", t, s);
        last[(size_t)s] = p;
        if (b->token_ids[t] < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "batch: row %d: negative token id", t);
        max_pos = VLLMC_MAX(max_pos, p);
    }
    for (int32_t i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens || (i && b->logit_rows[i] <= b->logit_rows[i - 1]))
            return vllmc_errorf(VLLMC_ERR_INVALID, "batch: logit row %d (%d) out of range or not ascending", i, b->logit_rows[i]);
    if (b->sample && b->n_logits > 0) { /* (refused here, before the batch changes anything) */
        const vllmc_status sst = pack_sample(b->sample, b->n_logits, NULL);
        if (sst) return sst;
    }
    int32_t max_block = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        for (int32_t k = 0; k < b->seqs[s].n_blocks; k++) {
            if (b->seqs[s].block_table[k] < 0)
                return vllmc_errorf(VLLMC_ERR_INVALID, "batch: sequence %d: negative block id", s);
            max_block = VLLMC_MAX(max_block, b->seqs[s].block_table[k]);
        }
    vllmc_status st;
    c->t_batch = vllmc_time_s();
    if (c->pipe) {
        /* the slot this step fills fed the step two back: its argmax must have been fetched (then that step ended) */
        if (c->n_pq == 2) return vllmc_errorf(VLLMC_ERR_INVALID, "pipelined steps: two in flight; fetch an argmax first");
        if (tok_prev && (b->n_tokens > c->cap_argmax || !c->d_argmax))
            return vllmc_errorf(VLLMC_ERR_INVALID, "pipelined steps: %d tokens from the previous argmax of %lld rows",
                                b->n_tokens, (long long)c->cap_argmax);
    } else {
        (void)gpuStreamSynchronize(c->stream); /* the staging buffer may still feed the last upload */
    }
    if ((st = grow_batch(c, b->n_tokens, b->n_seqs, n_blocks))) return st;
    c->n_tokens = b->n_tokens; c->n_seqs = b->n_seqs; c->n_logits = b->n_logits; c->max_pos = max_pos; c->max_block = max_block;
    c->tok.assign(b->token_ids, b->token_ids + b->n_tokens);
    c->pos.assign(b->pos, b->pos + b->n_tokens);
    c->seq.assign(b->seq_idx, b->seq_idx + b->n_tokens);
    c->lrows.assign(b->logit_rows ? b->logit_rows : b->pos, (b->logit_rows ? b->logit_rows : b->pos) + b->n_logits);
    c->seq_slot.resize((size_t)b->n_seqs);
    c->seq_nblocks.resize((size_t)b->n_seqs);
    int32_t *h = c->pipe && c->par ? c->h_stage2 : c->h_stage;
    const int64_t T = c->cap_t, S = c->cap_s;
    memcpy(h, b->token_ids, 4 * (size_t)b->n_tokens);
    memcpy(h + T, b->pos, 4 * (size_t)b->n_tokens);
    memcpy(h + 2 * T, b->seq_idx, 4 * (size_t)b->n_tokens);
    if (b->n_logits) memcpy(h + 3 * T, b->logit_rows, 4 * (size_t)b->n_logits);
    int32_t off = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t *si = h + 4 * T + 4 * s;
        si[0] = off; si[1] = b->seqs[s].n_blocks; si[2] = b->seqs[s].state_slot; si[3] = 0;
        c->seq_slot[(size_t)s] = b->seqs[s].state_slot;
        c->seq_nblocks[(size_t)s] = b->seqs[s].n_blocks;
        if (b->seqs[s].n_blocks) memcpy(h + 4 * T + 4 * S + off, b->seqs[s].block_table, 4 * (size_t)b->seqs[s].n_blocks);
        off += b->seqs[s].n_blocks;
    }
    /* runs of one sequence, cut into chunks for the chunked GDN prefill and the prefill attention; split (the long
     * runs first) for the GDN ops of a mixed step when gdn_runs is on (gdn_runs.h) */
    {
        c->chunks.resize((size_t)CU_CH_WORDS * (size_t)b->n_tokens);
        c->chunk_seen.resize((size_t)b->n_seqs);
        std::vector<int32_t> &slots = c->seq_slot; /* the sequences' state slots (set above) */
        const int32_t min_long = c->gdn_runs && c->gdn_chunked && !c->batch_invariant ? GDN_CHUNK_MIN : 0;
        gdn_chunk_list(b->seq_idx, b->pos, b->n_tokens, slots.data(), b->n_seqs, min_long, c->chunks.data(), c->chunk_seen.data(),
                       &c->ch);
        c->chunks.resize((size_t)CU_CH_WORDS * (size_t)c->ch.n_entries);
        memcpy(h + 4 * T + 4 * S + c->cap_b, c->chunks.data(), 4 * c->chunks.size());
    }
    const int32_t *d = c->d_batch;
    c->sample_dev = NULL;
    if (b->sample && b->n_logits > 0) { /* the rows' draws: {u, temperature, top_p, min_p, top_k} (cu_launch_sample) */
        const int64_t off = 4 * T + 4 * S + c->cap_b + 8 * T + (c->cap_b & 1);
        (void)pack_sample(b->sample, b->n_logits, h + off); /* (checked above) */
        c->sample_dev = d + off;
    }
    c->bd.chunks = d + 4 * T + 4 * S + c->cap_b;
    c->bd.n_chunks = c->ch.n_entries;
    c->bd.tok = d; c->bd.pos = d + T; c->bd.seq = d + 2 * T; c->bd.logit_rows = d + 3 * T;
    c->bd.seqinfo = d + 4 * T; c->bd.bt = d + 4 * T + 4 * S;
    c->bd.n_tokens = b->n_tokens; c->bd.n_logits = b->n_logits;
    /* pure decode (one token and one logit row per sequence) is recorded and replayed as a graph */
    c->recording = !c->eager && !c->profile && b->n_tokens == b->n_logits && b->n_tokens == b->n_seqs &&
                   b->n_tokens <= CU_GRAPH_MAX_TOKENS;
    rec_reset(c);
    rec_upload r;
    memset(&r, 0, sizeof(r));
    r.dst = c->d_batch; r.src = h; r.bytes = (uint64_t)c->words * 4;
    st = submit(c, CU_OP_UPLOAD, &r, sizeof(r));
    if (!st && c->pipe && tok_prev) { /* the token ids: the previous step's argmax, on the device */
        rec_d2h rt;
        memset(&rt, 0, sizeof(rt));
        rt.dst = c->d_batch; rt.src = c->d_argmax; rt.bytes = (uint64_t)b->n_tokens * 4;
        st = submit(c, CU_OP_D2D, &rt, sizeof(rt));
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * ops
 * ------------------------------------------------------------------------------------------- */

#define NEED_BATCH(c, what) do { if (!(c)->n_tokens) return vllmc_errorf(VLLMC_ERR_INVALID, "%s: no batch set", what); } while (0)

static vllmc_status cu_embed(struct backend *be, const struct bk_tensor *table, float *out) {
    cu_backend *c = cub(be);
    NEED_BATCH(c, "embed");
    for (int32_t t = 0; t < c->n_tokens; t++)
        if (c->tok[(size_t)t] >= table->ne[1])
            return vllmc_errorf(VLLMC_ERR_INVALID, "token id %d outside the vocabulary of %lld", c->tok[(size_t)t], (long long)table->ne[1]);
    const uint64_t stride = cu_weight_row_stride(table->type, table->ne[0]);
    if (!stride || table->n_dims < 2) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "embed: table type %u", table->type);
    rec_embed r;
    memset(&r, 0, sizeof(r));
    r.b = c->bd; r.table = (const uint8_t *)table->data; r.stride = stride; r.n = table->ne[0]; r.out = out; r.type = table->type;
    return submit(c, CU_OP_EMBED, &r, sizeof(r));
}

static vllmc_status cu_rmsnorm(struct backend *be, const float *x, int64_t ld_x, const float *w, float eps, int64_t n_rows,
                               int64_t n_cols, float *out, int64_t ld_out) {
    cu_backend *c = cub(be);
    if (n_cols <= 0 || n_rows < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm: bad shape");
    rec_rmsnorm r;
    memset(&r, 0, sizeof(r));
    r.x = x; r.w = w; r.out = out; r.ld_x = ld_x ? ld_x : n_cols; r.n_rows = n_rows; r.n_cols = n_cols;
    r.ld_out = ld_out ? ld_out : n_cols; r.eps = eps;
    return submit(c, CU_OP_RMSNORM, &r, sizeof(r));
}

/* The record `back` places before the end of the step's records (1: the last) and its op, or NULL. */
static void *rec_back(cu_backend *c, size_t back, uint32_t *op) {
    if (!c->recording || back == 0 || back > c->rec_offs.size()) return NULL;
    const size_t off = c->rec_offs[c->rec_offs.size() - back];
    uint32_t hdr[2];
    memcpy(hdr, &c->rec[off], 8);
    *op = hdr[0];
    return &c->rec[off + 8]; /* records start 8-byte aligned */
}
/* Drop the last n records (their work has moved into the record that follows). */
static void rec_drop(cu_backend *c, size_t n) {
    c->rec.resize(c->rec_offs[c->rec_offs.size() - n]);
    c->rec_offs.resize(c->rec_offs.size() - n);
}

/* In a recorded step, the attention's combine takes the ops that follow it on its output: out *= sigmoid(gate)
 * (sigmoid_mul over the output's head rows), then the quantize of the output act when each head is one Q8_K
 * super-block (head_dim 256) and only Q8_K / Q8_0 are wanted. Same ops and order, so the bits of the separate
 * launches. False (nothing changed) when the last record is not such an attention. */
static rec_attn *fusable_attn(cu_backend *c, const float *out) {
    uint32_t op = 0;
    rec_attn *r = c->fuse_attn ? (rec_attn *)rec_back(c, 1, &op) : NULL;
    return r && op == CU_OP_ATTN && !r->prefill && r->a.out == out ? r : NULL;
}
static bool fuse_attn_gate(cu_backend *c, float *x, int64_t ld_x, const float *g, int64_t ld_g, int64_t n_rows, int64_t n_cols) {
    rec_attn *r = fusable_attn(c, x);
    if (!r || r->a.gate || r->a.qfmts || ld_x != r->a.head_dim || n_cols != r->a.head_dim || n_rows != (int64_t)c->n_tokens * r->a.n_head)
        return false;
    r->a.gate = g;
    r->a.ld_gate = ld_g;
    return true;
}
static bool fuse_attn_quant(cu_backend *c, const struct bk_act *act) {
    rec_attn *r = fusable_attn(c, act->x);
    const uint32_t ok = BK_ACT_BIT(BK_ACT_F32) | BK_ACT_BIT(BK_ACT_Q8_K) | BK_ACT_BIT(BK_ACT_Q8_0);
    if (!r || r->a.qfmts || r->a.head_dim != 256 || act->n_cols != (int64_t)r->a.n_head * 256 || act->n_rows != c->n_tokens ||
        (act->fmts & ~ok) || !(act->fmts & ~BK_ACT_BIT(BK_ACT_F32)))
        return false;
    r->a.qo = cu_act_split(act);
    r->a.qfmts = act->fmts & ~BK_ACT_BIT(BK_ACT_F32);
    return true;
}

static vllmc_status check_fmts(const struct bk_act *a, const char *what) {
    const uint32_t ok = BK_ACT_BIT(BK_ACT_F32) | BK_ACT_BIT(BK_ACT_Q8_K) | BK_ACT_BIT(BK_ACT_Q8_0) | BK_ACT_BIT(BK_ACT_Q8_1) |
                        BK_ACT_BIT(BK_ACT_F16) | BK_ACT_BIT(BK_ACT_BF16);
    if (a->fmts & BK_ACT_BIT(BK_ACT_Q8_KD))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s: the deferred-norm form (BK_ACT_Q8_KD) is filled only by matmul_add_defer", what);
    if (a->fmts & ~ok) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s: activation formats 0x%x not supported on CUDA", what, a->fmts);
    for (int f = 1; f < BK_ACT_NFMT; f++)
        if ((a->fmts & BK_ACT_BIT(f)) && !a->q[f])
            return vllmc_errorf(VLLMC_ERR_INVALID, "%s: format %s was not allocated", what, bk_act_fmt_name(f));
    return VLLMC_OK;
}

/* In a recorded step, a norm + quantize whose input the op recorded just before writes goes into that op's launch
 * (cu_nq_fuse): RMSNORM of the residual a matmul segment or a MoE op added its output to (the fused add: res == in0,
 * rows of the output's width), or SWIGLU of the gate and up that two segments of a matmul wrote. False: nothing
 * changed. */
static bool fuse_nq(cu_backend *c, int mode, const float *in0, const float *in1, int64_t ld, const float *w, float eps,
                    int64_t n_rows, struct bk_act *out) {
    uint32_t op = 0;
    void *args = c->fuse_nq && c->nq_cnt && n_rows >= 1 ? rec_back(c, 1, &op) : NULL;
    if (!args) return false;
    const int64_t n = out->n_cols;
    struct cu_nq_fuse *q = NULL;
    uint32_t feed = 0;
    if (op == CU_OP_MATMUL) {
        rec_matmul *m = (rec_matmul *)args;
        if (!(c->fuse_nq & (mode == CU_NQ_RMSNORM ? BACKEND_CUDA_FUSE_NORM_MATMUL : BACKEND_CUDA_FUSE_SWIGLU))) return false;
        if (m->a.nq.on || m->a.n_act != n_rows || cu_nq_fuse_counters(mode, n, n_rows) > CU_NQ_FUSE_COUNTERS) return false;
        int n0 = 0, n1 = 0;
        for (int i = 0; i < m->a.n_seg; i++) {
            const struct cu_mm_seg *sg = &m->a.seg[i];
            if (sg->n_rows != n) continue;
            if (mode == CU_NQ_RMSNORM && sg->res == in0 && sg->ld_y == n) { feed |= 1u << i; n0++; }
            else if (mode == CU_NQ_SWIGLU && !sg->res && sg->ld_y == ld && (sg->y == in0 || sg->y == in1)) {
                feed |= 1u << i;
                n0 += sg->y == in0;
                n1 += sg->y == in1;
            }
        }
        if (mode == CU_NQ_RMSNORM ? n0 != 1 : (mode != CU_NQ_SWIGLU || n0 != 1 || n1 != 1 || in0 == in1)) return false;
        q = &m->a.nq;
    } else if (op == CU_OP_MOE) { /* the mix kernel: a counter per row */
        rec_moe *r = (rec_moe *)args;
        if (!(c->fuse_nq & BACKEND_CUDA_FUSE_NORM_MIX) || mode != CU_NQ_RMSNORM || r->a.nq.on || r->a.res != in0 ||
            r->a.n_embd != n || r->a.T != n_rows ||
            n_rows > CU_NQ_FUSE_COUNTERS / 2) /* (the second half: the mix in the down launch) */
            return false;
        q = &r->a.nq;
    } else {
        return false;
    }
    memset(q, 0, sizeof(*q));
    q->in0 = in0; q->in1 = in1; q->w = w; q->cnt = c->nq_cnt; q->out = cu_act_split(out); q->ld = ld; q->eps = eps;
    q->mode = mode; q->group = 0; q->fmts = out->fmts; q->feed = feed; q->n_feed = mode == CU_NQ_RMSNORM ? 1 : 2; q->on = 1;
    c->stats.fused_nq++;
    return true;
}

static vllmc_status submit_nq(cu_backend *c, int mode, const float *in0, const float *in1, int64_t ld, const float *w,
                              float eps, int64_t n_rows, struct bk_act *out) {
    if (fuse_nq(c, mode, in0, in1, ld, w, eps, n_rows, out)) return VLLMC_OK;
    rec_nq r;
    memset(&r, 0, sizeof(r));
    r.in0 = in0; r.in1 = in1; r.w = w; r.ld = ld; r.n_rows = n_rows; r.out = cu_act_split(out); r.eps = eps;
    r.mode = mode; r.fmts = out->fmts;
    return submit(c, CU_OP_NQ, &r, sizeof(r));
}

static vllmc_status cu_rmsnorm_quantize(struct backend *be, const float *x, const float *w, float eps, int64_t n_rows,
                                        struct bk_act *out) {
    cu_backend *c = cub(be);
    if (n_rows < 0 || n_rows > out->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm_quantize: %lld rows", (long long)n_rows);
    vllmc_status st = check_fmts(out, "rmsnorm_quantize");
    if (st) return st;
    if (x == out->x) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm_quantize: input aliases the output");
    out->n_rows = n_rows;
    return submit_nq(c, CU_NQ_RMSNORM, x, NULL, out->n_cols, w, eps, n_rows, out);
}

static vllmc_status cu_quantize(struct backend *be, struct bk_act *act) {
    cu_backend *c = cub(be);
    if (act->n_rows < 0 || act->n_rows > act->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "quantize: bad rows");
    vllmc_status st = check_fmts(act, "quantize");
    if (st) return st;
    if (fuse_attn_quant(c, act)) return VLLMC_OK;
    return submit_nq(c, CU_NQ_QUANT, NULL, NULL, 0, NULL, 0.f, act->n_rows, act);
}

static vllmc_status cu_swiglu_quantize(struct backend *be, const float *gate, const float *up, int64_t ld, int64_t n_rows,
                                       struct bk_act *out) {
    cu_backend *c = cub(be);
    if (n_rows < 0 || n_rows > out->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "swiglu: %lld rows", (long long)n_rows);
    vllmc_status st = check_fmts(out, "swiglu_quantize");
    if (st) return st;
    out->n_rows = n_rows;
    return submit_nq(c, CU_NQ_SWIGLU, gate, up, ld ? ld : out->n_cols, NULL, 0.f, n_rows, out);
}

static struct cu_act_view act_view(const struct bk_act *a) {
    const struct cu_act_mut m = cu_act_split(a);
    struct cu_act_view v;
    memset(&v, 0, sizeof(v));
    v.x = m.x; v.k_qs = m.k_qs; v.k_d = m.k_d; v.k_bs = m.k_bs; v.n = m.n;
    v.o_qs = m.o_qs; v.o_d = m.o_d; v.o_s = m.o_s;
    if ((a->fmts & BK_ACT_BIT(BK_ACT_Q8_KD)) && m.kd_qs) { /* the deferred-norm form is what the act holds */
        v.k_qs = m.kd_qs; v.k_bs = m.kd_bs; v.k_d = NULL;
        v.kd_d = m.kd_d; v.kd_ssq = m.kd_ssq; v.kd_eps = a->kd_eps; v.kd = 1;
    }
    return v;
}

static vllmc_status check_mm(const struct bk_act *act, const struct bk_tensor *w) {
    if (!w || !w->data) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: weight absent");
    if (w->ne[0] != act->n_cols)
        return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: weight %s has rows of %lld, activation %lld", w->name ? w->name : "?",
                            (long long)w->ne[0], (long long)act->n_cols);
    if (!cu_matmul_type(w->type))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "matmul: weight type %s has no CUDA kernel", quant_traits(w->type)->name);
    if (act->fmts & BK_ACT_BIT(BK_ACT_Q8_KD)) {
        if (!act->q[BK_ACT_Q8_KD] || !cu_mm_kd_takes((int)w->type, w->ne[0], (int)act->n_rows))
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "matmul: the deferred-norm activation has no kernel for weight %s (%s, %lld rows)",
                                w->name ? w->name : "?", quant_traits(w->type)->name, (long long)act->n_rows);
        if (w->ne[1] * w->ne[2] * w->ne[3] > INT32_MAX) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "matmul: too many rows");
        return VLLMC_OK;
    }
    const int f = bk_act_fmt_for_weight(w->type);
    if (f < 0 || !(act->fmts & BK_ACT_BIT(f)) || !act->q[f])
        return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: activation lacks format %s", bk_act_fmt_name(f));
    if (w->ne[1] * w->ne[2] * w->ne[3] > INT32_MAX) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "matmul: too many rows");
    return VLLMC_OK;
}

/* Grow a device scratch buffer to at least need elements of elt bytes (synchronizes first: queued kernels may use it). */
template <typename T> static vllmc_status grow_scratch(cu_backend *c, T **p, int64_t *cap, int64_t need, size_t elt) {
    if (need <= *cap) return VLLMC_OK;
    flush(c);
    (void)gpuStreamSynchronize(c->stream);
    if (*p) dev_free(c, *p);
    *p = NULL;
    *cap = 0;
    vllmc_status st = dev_alloc(c, (size_t)need * elt, (void **)p);
    if (st) return st;
    *cap = need;
    return VLLMC_OK;
}

/* The batch is a decode step: every token its own sequence (no run longer than one, no sequence twice), so the
 * tokens are independent (the GDN kernels take them in parallel, the GEMM waits for more rows). */
static bool decode_batch(const cu_backend *c) { return c->ch.max_run <= 1 && c->ch.unique; }

static bool gemm_rows_ok(const cu_backend *c, const struct bk_act *act) {
    const int32_t min_rows = decode_batch(c) ? c->gemm_min_decode_rows : c->gemm_min_rows;
    return c->gemm && !c->batch_invariant && min_rows > 0 && act->n_rows >= min_rows && act->n_rows <= 65535 && act->x &&
           act->n_cols % 32 == 0;
}

static bool gemm_weight_ok(const struct bk_tensor *w) {
    return cu_dequant_f16_type(w->type) && w->n_dims == 2 && w->ne[0] * w->ne[1] <= GEMM_MAX_ELEMS;
}

/* The activation rows the GEMM multiplies a weight of this type by: the f32 rows, or (gemm_act_q8) the values of
 * the quantized rows the CPU's integer dot products use for it, when the activation holds that format. */
static int gemm_act_fmt(const cu_backend *c, const struct bk_act *act, uint32_t type) {
    const int f = c->gemm_act_q8 ? bk_act_fmt_for_weight(type) : BK_ACT_F32;
    return (f == BK_ACT_Q8_K || f == BK_ACT_Q8_0 || f == BK_ACT_Q8_1) && (act->fmts & BK_ACT_BIT(f)) ? f : BK_ACT_F32;
}

/* One output of a matmul through the GEMM: (convert the activation to f16,) dequantize the weight, multiply. */
static vllmc_status submit_gemm(cu_backend *c, const struct bk_act *act, const struct bk_matmul_out *o, bool convert, int act_fmt) {
    const struct bk_tensor *w = o->w;
    vllmc_status st;
    const bool in_place = w->type == GGML_TYPE_F16; /* (its rows are the GEMM's f16 rows already) */
    if ((st = grow_scratch(c, &c->a16, &c->a16_elems, act->max_rows * act->n_cols, 2)) ||
        (!in_place && (st = grow_scratch(c, &c->w16, &c->w16_elems, w->ne[0] * w->ne[1], 2))))
        return st;
    rec_deq d;
    memset(&d, 0, sizeof(d));
    d.x = act->x; d.a16 = c->a16; d.w = (const uint8_t *)w->data; d.w16 = in_place ? NULL : c->w16;
    d.stride = cu_weight_row_stride(w->type, w->ne[0]);
    d.n_rows = act->n_rows; d.n_cols = act->n_cols; d.n_out = w->ne[1]; d.convert = convert; d.type = (int32_t)w->type;
    d.act_fmt = act_fmt; d.av = act_view(act);
    if ((st = submit(c, CU_OP_DEQ, &d, sizeof(d)))) return st;
    rec_gemm g;
    memset(&g, 0, sizeof(g));
    g.g = c->gemm; g.a16 = c->a16; g.w16 = in_place ? (const uint16_t *)w->data : c->w16; g.y = o->y; g.bias = o->bias; g.n_rows = act->n_rows; g.n_cols = act->n_cols;
    g.n_out = w->ne[1]; g.ld_y = o->ld_y ? o->ld_y : w->ne[1]; g.wbytes = (double)d.stride * (double)w->ne[1];
    return submit(c, CU_OP_GEMM, &g, sizeof(g));
}

/* A matmul record of act's rows with no segment yet, and one segment more (its CTAs after the others') */
static void mm_rec_init(const cu_backend *c, const struct bk_act *act, rec_matmul *r) {
    memset(r, 0, sizeof(*r));
    r->a.a = act_view(act);
    r->a.n_act = (int32_t)act->n_rows;
    r->a.row_order = c->batch_invariant;
    r->a.mmq_ws = c->mmq_ws; r->a.mmq_cnt = c->mmq_cnt;
}
static struct cu_mm_seg *mm_rec_seg(rec_matmul *r, const struct bk_matmul_out *o) {
    const struct bk_tensor *w = o->w;
    struct cu_mm_seg *s = &r->a.seg[r->a.n_seg++];
    s->w = (const uint8_t *)w->data; s->bias = o->bias; s->y = o->y;
    s->ld_y = o->ld_y ? o->ld_y : w->ne[1];
    s->stride = cu_weight_row_stride(w->type, w->ne[0]);
    s->type = (int32_t)w->type; s->n_rows = (int32_t)w->ne[1]; s->cta0 = r->a.n_ctas; s->row0 = r->a.total_rows;
    s->tile0 = r->a.total_tiles;
    r->a.n_ctas += (int)GPU_CEIL_DIV(w->ne[1], CU_MM_WARPS);
    r->a.total_rows += s->n_rows;
    r->a.total_tiles += (int32_t)GPU_CEIL_DIV(s->n_rows, 4);
    return s;
}

static vllmc_status cu_matmul(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs) {
    cu_backend *c = cub(be);
    if (n_out < 0 || act->n_rows < 0 || act->n_rows > act->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: bad counts");
    for (int i = 0; i < n_out; i++) {
        vllmc_status st = check_mm(act, outs[i].w);
        if (st) return st;
        const int64_t ld = outs[i].ld_y ? outs[i].ld_y : outs[i].w->ne[1];
        if (ld < outs[i].w->ne[1]) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul: ld_y %lld < %lld", (long long)ld, (long long)outs[i].w->ne[1]);
    }
    if (act->n_rows == 0) return VLLMC_OK;
    /* prefill-sized: the dense GEMM for every weight it takes; the rest below */
    std::vector<struct bk_matmul_out> rest;
    if (gemm_rows_ok(c, act)) {
        int converted = -1; /* the activation format a16 holds now */
        for (int i = 0; i < n_out; i++) {
            if (!gemm_weight_ok(outs[i].w)) { rest.push_back(outs[i]); continue; }
            const int f = gemm_act_fmt(c, act, outs[i].w->type);
            vllmc_status st = submit_gemm(c, act, &outs[i], f != converted, f);
            if (st) return st;
            converted = f;
        }
        n_out = (int)rest.size();
        outs = rest.data();
    }
    for (int i0 = 0; i0 < n_out; i0 += CU_MM_MAX_SEG) {
        rec_matmul r;
        mm_rec_init(c, act, &r);
        for (int i = i0; i < VLLMC_MIN(n_out, i0 + CU_MM_MAX_SEG); i++) mm_rec_seg(&r, &outs[i]);
        vllmc_status st = submit(c, CU_OP_MATMUL, &r, sizeof(r));
        if (st) return st;
    }
    return VLLMC_OK;
}

/* The deferred-norm form (backend.h matmul_add_defer): on when VLLMC_CUDA_DEFER_NORM=1, for one activation row where the
 * writer's and every reader's launch take mm_kernel_mma's 16-row Q4_K instances (cu_mm_kd_takes), and not under batch
 * invariance (whose one-row launches sum in the several-row kernels' order). */
static bool cu_defer_norm_ok(struct backend *be, const struct bk_tensor *w, const struct bk_tensor *const *readers, int n_readers,
                             int64_t n_rows) {
    cu_backend *c = cub(be);
    if (!c->defer_norm || c->batch_invariant || n_rows != 1 || !w || w->ne[2] != 1 || w->ne[1] % 16 ||
        !cu_mm_kd_takes((int)w->type, w->ne[0], 1))
        return false;
    for (int i = 0; i < n_readers; i++)
        if (!readers[i] || readers[i]->ne[0] != w->ne[1] || !cu_mm_kd_takes((int)readers[i]->type, readers[i]->ne[0], 1)) return false;
    return true;
}

static vllmc_status cu_matmul_add_defer(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *x,
                                        const float *norm_w, float eps, struct bk_act *out) {
    cu_backend *c = cub(be);
    vllmc_status st = check_mm(act, w);
    if (st) return st;
    if (!x || !norm_w || !out || act->n_rows != 1 || out->n_cols != w->ne[1] || out->max_rows < 1 || !out->q[BK_ACT_Q8_KD] ||
        out->fmts != BK_ACT_BIT(BK_ACT_Q8_KD) || w->ne[1] % 16 || !cu_mm_kd_takes((int)w->type, w->ne[0], 1))
        return vllmc_errorf(VLLMC_ERR_INVALID, "matmul_add_defer: needs one activation row, a Q4_K weight the 16-row mat-vec "
                                               "takes and an output holding only BK_ACT_Q8_KD of its rows");
    if (act->q[BK_ACT_F32] == x || out->x == x) return vllmc_errorf(VLLMC_ERR_INVALID, "matmul_add_defer: the residual aliases an input");
    const struct cu_act_mut m = cu_act_split(out);
    rec_matmul r;
    mm_rec_init(c, act, &r);
    const struct bk_matmul_out o = {w, NULL, out->x, 0}; /* y itself into the out's f32 rows */
    mm_rec_seg(&r, &o)->res = x;
    r.a.kdq.qs = m.kd_qs; r.a.kdq.d = m.kd_d; r.a.kdq.bs = m.kd_bs; r.a.kdq.ssq = m.kd_ssq; r.a.kdq.nw = norm_w; r.a.kdq.on = 1;
    out->n_rows = 1;
    out->kd_eps = eps;
    c->stats.deferred_norms++;
    return submit(c, CU_OP_MATMUL, &r, sizeof(r));
}

/* In a recorded step, y += x right after the matmul (one weight) or moe op that wrote x, of n_rows rows of
 * n_cols: the op's epilogue adds each output into y as it writes it (same float sums, so the bits equal
 * those of the separate add; x is still written). False when the last record is not such an op. */
static bool fuse_add(cu_backend *c, float *y, const float *x, int64_t n_rows, int64_t n_cols) {
    uint32_t op = 0;
    void *args = c->fuse_add && y != x ? rec_back(c, 1, &op) : NULL;
    if (!args) return false;
    if (op == CU_OP_MATMUL) {
        rec_matmul *r = (rec_matmul *)args;
        struct cu_mm_seg *sg = &r->a.seg[0];
        if (r->a.n_seg != 1 || r->a.n_act != n_rows || sg->y != x || sg->ld_y != n_cols || sg->n_rows != n_cols ||
            sg->res || r->a.a.x == y)
            return false;
        sg->res = y;
    } else if (op == CU_OP_MOE) {
        rec_moe *r = (rec_moe *)args;
        if (r->a.out != x || r->a.n_embd != n_cols || r->a.T != n_rows || r->a.res || r->a.router.a.x == y) return false;
        r->a.res = y;
    } else {
        return false;
    }
    c->stats.fused_adds++;
    return true;
}

static vllmc_status cu_add(struct backend *be, float *y, const float *x, int64_t n_rows, int64_t n_cols) {
    cu_backend *c = cub(be);
    if (n_rows < 0 || n_cols < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "add: bad shape");
    if (fuse_add(c, y, x, n_rows, n_cols)) return VLLMC_OK;
    rec_add r;
    memset(&r, 0, sizeof(r));
    r.y = y; r.x = x; r.n = n_rows * n_cols;
    return submit(c, CU_OP_ADD, &r, sizeof(r));
}

static vllmc_status cu_rope(struct backend *be, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                            const struct bk_rope_params *p) {
    cu_backend *c = cub(be);
    NEED_BATCH(c, "rope");
    if (n_head <= 0 || head_dim <= 0 || p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 ||
        (p->mode != BK_ROPE_NORM && p->mode != BK_ROPE_NEOX))
        return vllmc_errorf(VLLMC_ERR_INVALID, "rope: n_rot %d, head_dim %d, mode %d", p->n_rot, head_dim, (int)p->mode);
    rec_rope r;
    memset(&r, 0, sizeof(r));
    r.b = c->bd; r.x = x; r.ff = p->freq_factors; r.ld = ld ? ld : (int64_t)n_head * head_dim; r.n_head = n_head;
    r.head_dim = head_dim; r.mode = (int32_t)p->mode; r.n_rot = p->n_rot; r.base = p->freq_base; r.scale = p->freq_scale;
    return submit(c, CU_OP_ROPE, &r, sizeof(r));
}

/* In a recorded step, the four records before a decode attention when they are RMSNorm(q), RMSNorm(k), RoPE(q),
 * RoPE(k) writing the q and k it reads, packed by head: one launch (attn_pre_kernel) does their work and the KV
 * store, with the same ops in the same order. */
static void fuse_attn_pre(cu_backend *c, struct cu_attn_args *a) {
    uint32_t o1 = 0, o2 = 0, o3 = 0, o4 = 0;
    if (!c->fuse_attn) return;
    rec_rmsnorm *nq = (rec_rmsnorm *)rec_back(c, 4, &o1), *nk = (rec_rmsnorm *)rec_back(c, 3, &o2);
    rec_rope *rq = (rec_rope *)rec_back(c, 2, &o3), *rk = (rec_rope *)rec_back(c, 1, &o4);
    if (!nq || !nk || !rq || !rk || o1 != CU_OP_RMSNORM || o2 != CU_OP_RMSNORM || o3 != CU_OP_ROPE || o4 != CU_OP_ROPE) return;
    const int64_t hd = a->head_dim, T = c->n_tokens;
    if (a->ld_q != a->n_head * hd || a->ld_k != a->n_kv_head * hd) return;
    if (rq->x != a->q || rq->ld != a->ld_q || rq->n_head != a->n_head || rq->head_dim != hd || rk->x != a->k || rk->ld != a->ld_k ||
        rk->n_head != a->n_kv_head || rk->head_dim != hd || rq->mode != rk->mode || rq->n_rot != rk->n_rot || rq->base != rk->base ||
        rq->scale != rk->scale || rq->ff != rk->ff)
        return;
    if (nq->out != a->q || nq->ld_out != hd || nq->n_cols != hd || nq->n_rows != T * a->n_head || nk->out != a->k || nk->ld_out != hd ||
        nk->n_cols != hd || nk->n_rows != T * a->n_kv_head)
        return;
    a->pre = 1;
    a->qx = nq->x; a->ld_qx = nq->ld_x; a->qw = nq->w; a->q_eps = nq->eps;
    a->kx = nk->x; a->ld_kx = nk->ld_x; a->kw = nk->w; a->k_eps = nk->eps;
    a->rope_mode = rq->mode; a->n_rot = rq->n_rot; a->ff = rq->ff; a->freq_scale = rq->scale;
    a->theta_scale = powf(rq->base, -2.0f / (float)rq->n_rot); /* as cu_launch_rope */
    /* the split launch takes that work too where no token of the step reads another's key (cu_launch_attention checks
       the head size) */
    a->pre_split = c->attn_pre_split && decode_batch(c) && (hd == 128 || hd == 256);
    rec_drop(c, 4);
    c->stats.fused_attn++;
    c->stats.fused_attn_split += a->pre_split != 0;
}

static vllmc_status cu_attention(struct backend *be, struct bk_kv_cache *kv, const struct bk_attn_params *p, const float *q,
                                 int64_t ld_q, const float *k, int64_t ld_k, const float *v, int64_t ld_v, float *out) {
    cu_backend *c = cub(be);
    NEED_BATCH(c, "attention");
    if (!kv || p->kv_layer < 0 || p->kv_layer >= kv->n_layers || p->n_kv_head != kv->n_kv_head || p->head_dim != kv->head_dim ||
        p->n_head <= 0 || p->n_kv_head <= 0 || p->n_head % p->n_kv_head)
        return vllmc_errorf(VLLMC_ERR_INVALID, "attention: parameters do not match the KV cache");
    if (p->head_dim != 32 && p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "attention: head_dim %d (CUDA: 32, 64, 128 or 256)", p->head_dim);
    const int32_t hd = p->head_dim;
    const int64_t lq = ld_q ? ld_q : (int64_t)p->n_head * hd;
    const bool prefill = c->attn_prefill && !c->batch_invariant && c->ch.max_run >= ATTN_PREFILL_MIN && (hd == 128 || hd == 256) && lq % 4 == 0 &&
                         ((uintptr_t)q & 15) == 0 && c->bd.n_chunks > 0 && cu_attn_prefill_ready(hd);
    float ks = 1.0f, vs = 1.0f;
    if (kv->dtype == BK_KV_FP8_E4M3) {
        ks = kv->k_scales ? kv->k_scales[p->kv_layer] : kv->k_scale;
        vs = kv->v_scales ? kv->v_scales[p->kv_layer] : kv->v_scale;
        if (!(ks > 0.0f) || !(vs > 0.0f) || isinf(ks) || isinf(vs))
            return vllmc_errorf(VLLMC_ERR_INVALID, "attention: KV layer %d fp8 scales %g / %g (must be finite and > 0)", p->kv_layer,
                                (double)ks, (double)vs);
    }
    if (c->max_block >= kv->n_blocks)
        return vllmc_errorf(VLLMC_ERR_INVALID, "attention: block id %d outside the pool of %d", c->max_block, kv->n_blocks);
    /* split-K: the chunk depends only on the cache (its longest context), so every row is split at the same
     * positions whatever else is in the batch (batch invariance) and decode records do not move with the
     * positions; the number of splits is a power of two of what the longest row needs (few distinct graphs) */
    const int64_t cap = (int64_t)kv->n_blocks * BK_KV_BLOCK;
    const int64_t max_ctx = kv->max_ctx > 0 ? VLLMC_MIN((int64_t)kv->max_ctx, cap) : cap;
    int64_t chunk = VLLMC_MAX((int64_t)32, GPU_CEIL_DIV(max_ctx, 256));
    chunk = GPU_CEIL_DIV(chunk, 16) * 16;
    const int64_t need_split = GPU_CEIL_DIV((int64_t)c->max_pos + 1, chunk);
    int64_t n_split = 1;
    while (n_split < need_split) n_split *= 2;
    if (n_split > CU_ATT_MAX_SPLIT) /* only past max_ctx: chunk >= max_ctx / 256 */
        return vllmc_errorf(VLLMC_ERR_INVALID, "attention: position %d past the cache's context of %lld", c->max_pos, (long long)max_ctx);
    const int64_t per_tok = (int64_t)p->n_head * n_split * (hd + 2);
    /* tokens per launch: the work buffer's bound, and the grid's z extent (65,535) */
    const int64_t group = VLLMC_MAX((int64_t)1, VLLMC_MIN(VLLMC_MIN((int64_t)c->n_tokens, (int64_t)65535), CU_ATT_WORK_FLOATS / per_tok));
    const int64_t need = group * per_tok;
    if (need > c->attn_work_floats) {
        flush(c);
        (void)gpuStreamSynchronize(c->stream);
        if (c->attn_work) dev_free(c, c->attn_work);
        c->attn_work = NULL;
        c->attn_work_floats = 0;
        vllmc_status st = dev_alloc(c, (size_t)need * 4, (void **)&c->attn_work);
        if (st) return st;
        c->attn_work_floats = need;
    }
    rec_attn r;
    memset(&r, 0, sizeof(r));
    r.b = c->bd;
    r.a.q = q; r.a.k = k; r.a.v = v;
    r.a.ld_q = ld_q ? ld_q : (int64_t)p->n_head * hd;
    r.a.ld_k = ld_k ? ld_k : (int64_t)p->n_kv_head * hd;
    r.a.ld_v = ld_v ? ld_v : (int64_t)p->n_kv_head * hd;
    r.a.out = out; r.a.kpool = kv->k[p->kv_layer]; r.a.vpool = kv->v[p->kv_layer]; r.a.dtype = (int32_t)kv->dtype;
    r.a.n_head = p->n_head; r.a.n_kv_head = p->n_kv_head; r.a.head_dim = hd; r.a.scale = p->scale;
    r.a.k_scale = ks; r.a.v_scale = vs;
    if (kv->dtype == BK_KV_FP8_E4M3 && kv->k_shift) {
        struct cu_kv *ck = (struct cu_kv *)kv;
        const size_t per = (size_t)kv->n_kv_head * (size_t)kv->head_dim;
        if (!ck->d_shift) {
            flush(c);
            vllmc_status st = dev_alloc(c, per * (size_t)kv->n_layers * 4, (void **)&ck->d_shift);
            if (!st) st = gpu_err(gpuMemcpy(ck->d_shift, kv->k_shift, per * (size_t)kv->n_layers * 4, gpuMemcpyHostToDevice), "key shift");
            if (st) return st;
        }
        r.a.k_shift = ck->d_shift + per * (size_t)p->kv_layer;
    }
    r.a.n_split = (int32_t)n_split; r.a.chunk = (int32_t)chunk; r.a.group = (int32_t)group; r.a.work = c->attn_work;
    r.prefill = prefill;
    if (!prefill) fuse_attn_pre(c, &r.a);
    /* the combine in the split launch (a recorded decode step; counters [group][n_head] from the shared array) */
    if (!prefill && c->recording && (c->fuse_nq & BACKEND_CUDA_FUSE_ATTN_COMBINE) && c->nq_cnt &&
        group * p->n_head <= CU_NQ_FUSE_COUNTERS) {
        r.a.comb_cnt = c->nq_cnt;
        c->stats.fused_comb++;
    }
    return submit(c, CU_OP_ATTN, &r, sizeof(r));
}

static vllmc_status cu_get_rows(struct backend *be, const float *x, int64_t n_cols, float *out) {
    cu_backend *c = cub(be);
    NEED_BATCH(c, "get_rows");
    rec_getrows r;
    memset(&r, 0, sizeof(r));
    r.b = c->bd; r.x = x; r.out = out; r.n = n_cols;
    return submit(c, CU_OP_GETROWS, &r, sizeof(r));
}

static vllmc_status cu_logits(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *logits,
                              int32_t *argmax) {
    cu_backend *c = cub(be);
    struct bk_matmul_out o;
    memset(&o, 0, sizeof(o));
    o.w = w; o.y = logits;
    vllmc_status st = cu_matmul(be, act, 1, &o);
    if (st) { flush(c); return st; }
    if (argmax && act->n_rows > 0) {
        if (act->n_rows > c->cap_argmax) {
            flush(c);
            (void)gpuStreamSynchronize(c->stream);
            if (c->pipe && c->n_pq) return vllmc_errorf(VLLMC_ERR_INVALID, "pipelined steps: more logit rows than before");
            if (c->d_argmax) dev_free(c, c->d_argmax);
            if (c->h_argmax) (void)gpuFreeHost(c->h_argmax);
            if (c->h_argmax2) (void)gpuFreeHost(c->h_argmax2);
            c->d_argmax = NULL; c->h_argmax = NULL; c->h_argmax2 = NULL; c->cap_argmax = 0;
            const int64_t cap = VLLMC_MAX(act->n_rows, (int64_t)64);
            /* the ids, then CU_ARGMAX_PARTS (value, index) partials per row */
            if ((st = dev_alloc(c, (size_t)cap * (4 + 8 * CU_ARGMAX_PARTS) + 16, (void **)&c->d_argmax)) ||
                (st = gpu_err(gpuHostAlloc((void **)&c->h_argmax, (size_t)cap * 4), "pinned argmax")) ||
                (st = gpu_err(gpuHostAlloc((void **)&c->h_argmax2, (size_t)cap * 4), "pinned argmax")))
                return st;
            c->cap_argmax = cap;
        }
        rec_argmax ra;
        memset(&ra, 0, sizeof(ra));
        ra.x = logits; ra.out = c->d_argmax; ra.n_rows = act->n_rows; ra.n = w->ne[1];
        ra.sample = act->n_rows == c->n_logits ? c->sample_dev : NULL;
        ra.work = (uint8_t *)c->d_argmax + ((4 * (size_t)c->cap_argmax + 15) & ~(size_t)15);
        if ((st = submit(c, CU_OP_ARGMAX, &ra, sizeof(ra)))) return st;
        rec_d2h rd;
        memset(&rd, 0, sizeof(rd));
        rd.dst = c->pipe && c->par ? c->h_argmax2 : c->h_argmax; rd.src = c->d_argmax; rd.bytes = (uint64_t)act->n_rows * 4;
        if ((st = submit(c, CU_OP_D2H, &rd, sizeof(rd)))) return st;
    }
    const uint64_t replays = c->stats.graph_replays;
    if (c->recording) {
        if ((st = finish_step(c))) return st;
    } else {
        c->stats.eager_steps++;
    }
    if (argmax && act->n_rows > 0 && c->pipe) { /* no wait: backend_cuda_fetch_argmax takes the ids */
        if ((st = gpu_err(gpuEventRecord(c->pev[c->par], c->stream), "pipelined step"))) return st;
        c->pq[c->n_pq] = c->par;
        c->pq_rows[c->n_pq] = (int32_t)act->n_rows;
        c->n_pq++;
        c->par ^= 1;
        return VLLMC_OK;
    }
    if (argmax && act->n_rows > 0) {
        const double t0 = vllmc_time_s();
        if ((st = gpu_err(gpuStreamSynchronize(c->stream), "step"))) return st;
        if (c->stats.graph_replays != replays) c->stats.wait_ns += (uint64_t)((vllmc_time_s() - t0) * 1e9);
        memcpy(argmax, c->h_argmax, (size_t)act->n_rows * 4);
    }
    return VLLMC_OK;
}

/* In a recorded decode step (every token its sequence's only one), the GDN conv moves into the epilogue of the
 * matmul recorded just before it when that matmul writes the conv channels (one segment: y == in, the conv_dim
 * rows, a K-quant type). Same ops in the same order, so the bits of gdn_conv_kernel. False: nothing changed. */
static bool fuse_gdn_conv(cu_backend *c, const struct bk_gdn_params *p, const float *in, int64_t ld_in, int64_t conv_dim,
                          float *conv_state, int64_t conv_floats, const float *conv_w, float *conv_out) {
    uint32_t op = 0;
    /* decode steps only: the conv kernels take the tokens in parallel (gemv_q.cu) */
    rec_matmul *m = c->fuse_conv && p->d_conv == CU_CONV_K && decode_batch(c) ? (rec_matmul *)rec_back(c, 1, &op) : NULL;
    if (!m || op != CU_OP_MATMUL || m->a.conv.on || m->a.n_act != c->n_tokens) return false;
    for (int i = 0; i < m->a.n_seg; i++) {
        const struct cu_mm_seg *sg = &m->a.seg[i];
        if (sg->y != in || sg->ld_y != ld_in || sg->n_rows != conv_dim || sg->res ||
            (sg->type != GGML_TYPE_Q4_K && sg->type != GGML_TYPE_Q6_K))
            continue;
        struct cu_mm_conv *cv = &m->a.conv;
        cv->pos = c->bd.pos; cv->seq = c->bd.seq; cv->seqinfo = c->bd.seqinfo;
        cv->out = conv_out; cv->state = conv_state; cv->w = conv_w; cv->state_floats = conv_floats;
        cv->seg = i; cv->n_ch = (int32_t)conv_dim; cv->on = 1;
        c->stats.fused_conv++;
        return true;
    }
    return false;
}

/* Decode steps of up to this many tokens take the gated norm by clusters: at 64 sequences the separate launch measured
 * faster (qwen35-4b ITL 8.85 against 9.16 ms, H100), at 1 the clusters (-1.0 to -1.3%), at 16 the two level. */
#define CU_GDN_CL_MAX_TOKENS 16
static vllmc_status cu_gdn(struct backend *be, struct bk_rs_cache *rs, const struct bk_gdn_params *p,
                           const struct bk_gdn_weights *w, const float *in, int64_t ld_in, float *work, struct bk_act *out) {
    cu_backend *c = cub(be);
    NEED_BATCH(c, "gdn");
    if (p->n_k_head <= 0 || p->n_v_head <= 0 || p->n_v_head % p->n_k_head || p->d_k <= 0 || p->d_v <= 0 || p->d_conv < 2 ||
        p->d_conv > 8)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: bad dims (k heads %d, v heads %d, d_k %d, d_v %d, conv %d)", p->n_k_head,
                            p->n_v_head, p->d_k, p->d_v, p->d_conv);
    if (p->d_k != 128 || (p->d_v != 64 && p->d_v != 128))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "gdn: d_k %d, d_v %d (CUDA kernel: d_k 128, d_v 64 or 128)", p->d_k, p->d_v);
    const int64_t key_dim = (int64_t)p->n_k_head * p->d_k, value_dim = (int64_t)p->n_v_head * p->d_v;
    const int64_t conv_dim = 2 * key_dim + value_dim, nv = p->n_v_head;
    if (!rs || p->rs_layer < 0 || p->rs_layer >= rs->n_layers)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: recurrent layer %d not in the state cache", p->rs_layer);
    if (rs->conv_floats != conv_dim * (p->d_conv - 1) || rs->ssm_floats != value_dim * p->d_k)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: state cache slot sizes do not match the layer");
    if (out->n_cols != value_dim || out->max_rows < c->n_tokens || ld_in < conv_dim + value_dim + 2 * nv)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: output or input rows too small");
    for (int32_t s = 0; s < c->n_seqs; s++)
        if (c->seq_slot[(size_t)s] < 0 || c->seq_slot[(size_t)s] >= rs->n_slots)
            return vllmc_errorf(VLLMC_ERR_INVALID, "gdn: sequence %d has state slot %d of %d", s, c->seq_slot[(size_t)s], rs->n_slots);
    vllmc_status st = check_fmts(out, "gdn");
    if (st) return st;
    const bool chunked = c->gdn_chunked && !c->batch_invariant && c->ch.max_run >= GDN_CHUNK_MIN && c->ch.unique && c->bd.n_chunks > 0 &&
                         p->d_v % 32 == 0 && cu_gdn_chunked_ready();
    /* a split list (gdn_runs.h): the chunked kernels take the long runs [0, n_long), the recurrent ones the rest, a
     * run a CTA; with no long run and every run one entry, the recurrent kernels take the runs side by side (a grid's
     * y and z take at most 65,535 runs; a split list read whole is still a valid list for the chunked walk) */
    const bool split = chunked && c->ch.split && c->ch.n_entries <= 65535;
    const bool runs = !decode_batch(c) && c->ch.unique && c->bd.n_chunks > 0 && c->bd.n_chunks <= 65535 &&
                      (split ? c->ch.n_entries > c->ch.n_long : c->gdn_runs && !chunked && !c->ch.split && c->ch.max_run <= CU_GDN_CHUNK);
    const int32_t ch_hi = split ? c->ch.n_long : c->bd.n_chunks;
    if (chunked && (st = grow_scratch(c, &c->gdn_work, &c->gdn_work_floats, cu_gdn_chunk_scratch_floats(p->n_v_head, p->d_v, ch_hi), 4)))
        return st;
    rec_gdn r;
    memset(&r, 0, sizeof(r));
    r.b = c->bd;
    r.scratch = chunked ? c->gdn_work : NULL;
    if (split) { r.a.ch_hi = c->ch.n_long; r.a.ch_runs = c->ch.n_long_runs; c->stats.gdn_split++; }
    if (runs) { r.a.run_lo = split ? c->ch.n_long : 0; r.a.n_runs = c->bd.n_chunks - r.a.run_lo; c->stats.gdn_runs++; }
    r.a.in = in; r.a.ld_in = ld_in; r.a.conv_out = work;
    r.a.conv_state = rs->conv[p->rs_layer]; r.a.ssm_state = rs->ssm[p->rs_layer];
    r.a.conv_floats = rs->conv_floats; r.a.ssm_floats = rs->ssm_floats; r.a.ssm_bf16 = rs->ssm_bf16;
    r.a.conv_w = w->conv; r.a.dt_bias = w->dt_bias; r.a.ssm_a = w->ssm_a; r.a.norm = w->norm;
    r.a.n_k_head = p->n_k_head; r.a.n_v_head = p->n_v_head; r.a.d_k = p->d_k; r.a.d_v = p->d_v; r.a.d_conv = p->d_conv;
    r.a.eps = p->eps; r.a.out = out->x;
    r.a.conv_done = !chunked && fuse_gdn_conv(c, p, in, ld_in, conv_dim, r.a.conv_state, r.a.conv_floats, r.a.conv_w, work);
    /* a decode step of several sequences: the rule kernel takes its tokens in parallel (each its own state) */
    r.a.per_token = !chunked && c->n_tokens > 1 && decode_batch(c);
    out->n_rows = c->n_tokens;
    /* gated RMSNorm with z (in[:, conv_dim:]) fused into the quantize, or into the rule kernel: by clusters (a CTA a token,
     * the heads of a 256-column unit in one cluster: at d_v 64 or 128, 256 / d_v heads of d_v / (32 R) CTAs, 8 / R <= 8
     * CTAs), or in a recorded step by completion counters */
    rec_nq q;
    memset(&q, 0, sizeof(q));
    q.in1 = in + conv_dim; q.w = w->norm; q.ld = ld_in; q.n_rows = out->n_rows; q.out = cu_act_split(out); q.eps = p->eps;
    q.mode = CU_NQ_GATED; q.fmts = out->fmts; q.group = p->d_v;
#if !defined(VLLMC_HIP)
    const bool by_cluster = !chunked && !runs && (c->fuse_nq & BACKEND_CUDA_FUSE_GATED_CLUSTER) && (r.a.per_token || c->n_tokens == 1) &&
                            c->n_tokens <= CU_GDN_CL_MAX_TOKENS && w->norm && value_dim % 256 == 0 && 256 % p->d_v == 0 &&
                            p->n_v_head % (256 / p->d_v) == 0;
#else
    const bool by_cluster = false; /* (no clusters) */
#endif
    const bool by_counters = !by_cluster && !chunked && (c->fuse_nq & BACKEND_CUDA_FUSE_GATED) && c->recording && c->nq_cnt &&
                             cu_nq_fuse_counters(CU_NQ_GATED, value_dim, 1) <= CU_NQ_FUSE_COUNTERS;
    if (by_cluster || by_counters) {
        struct cu_nq_fuse *f = &r.a.nq;
        f->in1 = q.in1; f->w = q.w; f->out = q.out; f->ld = q.ld; f->eps = q.eps;
        f->mode = CU_NQ_GATED; f->group = q.group; f->fmts = q.fmts;
        if (by_cluster) r.a.nq_cluster = 1;
        else {
            f->cnt = c->nq_cnt; f->n_feed = 1; f->on = 1;
            r.a.per_token = 0; /* the fused norm counts the head's CTAs over all tokens */
        }
        c->stats.fused_nq++;
        return submit(c, CU_OP_GDN, &r, sizeof(r));
    }
    if ((st = submit(c, CU_OP_GDN, &r, sizeof(r)))) return st;
    return submit(c, CU_OP_NQ, &q, sizeof(q));
}

static vllmc_status cu_sigmoid_mul(struct backend *be, float *x, int64_t ld_x, const float *gate, int64_t ld_gate, int64_t n_rows,
                                   int64_t n_cols) {
    cu_backend *c = cub(be);
    if (n_rows < 0 || n_cols < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "sigmoid_mul: %lld x %lld", (long long)n_rows, (long long)n_cols);
    if (fuse_attn_gate(c, x, ld_x ? ld_x : n_cols, gate, ld_gate ? ld_gate : n_cols, n_rows, n_cols)) return VLLMC_OK;
    rec_sigmul r;
    memset(&r, 0, sizeof(r));
    r.x = x; r.g = gate; r.ld_x = ld_x ? ld_x : n_cols; r.ld_g = ld_gate ? ld_gate : n_cols; r.n_rows = n_rows; r.n_cols = n_cols;
    return submit(c, CU_OP_SIGMUL, &r, sizeof(r));
}

static vllmc_status moe_check_mat(const struct bk_tensor *t, const char *what, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2) {
    if (!t || !t->data) return vllmc_errorf(VLLMC_ERR_INVALID, "moe: %s missing", what);
    if (t->n_dims != n_dims || t->ne[0] != ne0 || (ne1 >= 0 && t->ne[1] != ne1) || (n_dims == 3 && t->ne[2] != ne2))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: %s has shape {%lld, %lld, %lld}", what, (long long)t->ne[0],
                            (long long)t->ne[1], (long long)t->ne[2]);
    if (!cu_matmul_type(t->type) || !cu_weight_row_stride(t->type, t->ne[0]))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: %s type %u is not supported by the CUDA backend", what, t->type);
    return VLLMC_OK;
}

/* The activation format weight t reads: present in `in` (gate/up) or one the hidden quantizer writes (down). */
static vllmc_status moe_fmt(const struct bk_act *in, const struct bk_tensor *t, const char *what, int *fmt) {
    *fmt = bk_act_fmt_for_weight(t->type);
    if (*fmt != BK_ACT_F32 && *fmt != BK_ACT_Q8_K && *fmt != BK_ACT_Q8_0)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: %s is %s: the CUDA expert kernels do not take its %s activations", what,
                            quant_traits(t->type)->name, bk_act_fmt_name(*fmt));
    if (in && !(in->fmts & BK_ACT_BIT(*fmt)))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: input lacks the activation format %s reads", what);
    return VLLMC_OK;
}

static vllmc_status cu_moe(struct backend *be, const struct bk_act *in, const struct bk_moe_weights *w,
                           const struct bk_moe_params *p, float *out) {
    cu_backend *c = cub(be);
    const int64_t n_embd = in->n_cols, T = in->n_rows;
    vllmc_status st;
    if (!w->router || !w->router->data || w->router->type != GGML_TYPE_F32 || w->router->ne[0] != n_embd || w->router->n_dims != 2)
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: router must be F32 {%lld, n_expert}", (long long)n_embd);
    const int64_t E = w->router->ne[1];
    const int k = p->n_expert_used;
    if (E > MOE_MAX_EXPERT_CU) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: %lld experts (CUDA: at most %d)", (long long)E, MOE_MAX_EXPERT_CU);
    if (k < 1 || k > E) return vllmc_errorf(VLLMC_ERR_INVALID, "moe: %d experts used of %lld", k, (long long)E);
    if (T < 0 || T > in->max_rows || !in->x || !(in->fmts & BK_ACT_BIT(BK_ACT_F32)))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: input needs %lld valid f32 rows", (long long)T);
    if ((st = check_fmts(in, "moe"))) return st;
    if ((st = moe_check_mat(w->gate_exps, "ffn_gate_exps", 3, n_embd, -1, E))) return st;
    const int64_t n_ff = w->gate_exps->ne[1];
    if ((st = moe_check_mat(w->up_exps, "ffn_up_exps", 3, n_embd, n_ff, E))) return st;
    if ((st = moe_check_mat(w->down_exps, "ffn_down_exps", 3, n_ff, n_embd, E))) return st;
    const bool shared = w->gate_shexp && w->gate_shexp->data;
    int64_t n_ffs = 0;
    if (shared) {
        if ((st = moe_check_mat(w->gate_shexp, "ffn_gate_shexp", 2, n_embd, -1, 1))) return st;
        n_ffs = w->gate_shexp->ne[1];
        if ((st = moe_check_mat(w->up_shexp, "ffn_up_shexp", 2, n_embd, n_ffs, 1))) return st;
        if ((st = moe_check_mat(w->down_shexp, "ffn_down_shexp", 2, n_ffs, n_embd, 1))) return st;
    }
    const bool sgate = shared && w->shexp_gate && w->shexp_gate->data;
    if (sgate && (w->shexp_gate->type != GGML_TYPE_F32 || w->shexp_gate->ne[0] != n_embd))
        return vllmc_errorf(VLLMC_ERR_INVALID, "moe: shared-expert gate must be F32 {%lld}", (long long)n_embd);
    int f, fd, fds = -1;
    if ((st = moe_fmt(in, w->gate_exps, "ffn_gate_exps", &f)) || (st = moe_fmt(in, w->up_exps, "ffn_up_exps", &f)) ||
        (st = moe_fmt(NULL, w->down_exps, "ffn_down_exps", &fd)))
        return st;
    if (shared && ((st = moe_fmt(in, w->gate_shexp, "ffn_gate_shexp", &f)) || (st = moe_fmt(in, w->up_shexp, "ffn_up_shexp", &f)) ||
                   (st = moe_fmt(NULL, w->down_shexp, "ffn_down_shexp", &fds))))
        return st;
    if (T == 0) return VLLMC_OK;
    if (T * k > (1 << 24)) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "moe: %lld rows", (long long)T);

    /* device scratch, grown on demand (sizes are constant across decode steps, so graphs replay) */
    const int64_t n_ent = T * k;
    const bool merged = shared && n_ffs == n_ff && fds == fd;
    const int64_t R0 = n_ent + (merged ? T : 0);
    uint64_t off = 0;
    auto take = [&off](uint64_t bytes) { const uint64_t o = off; off += (bytes + 255) & ~(uint64_t)255; return o; };
    const uint64_t o_logits = take(4 * (uint64_t)(T * E)), o_glog = take(4 * (uint64_t)T), o_ids = take(4 * (uint64_t)n_ent),
                   o_wts = take(4 * (uint64_t)n_ent);
    const uint64_t o_gu0 = take(4 * (uint64_t)(R0 * 2 * n_ff)), o_gu1 = take(shared && !merged ? 4 * (uint64_t)(T * 2 * n_ffs) : 0);
    const uint64_t o_hx0 = take(4 * (uint64_t)(R0 * n_ff)), o_hq0 = take(fd == BK_ACT_F32 ? 0 : bk_act_row_bytes(fd, n_ff) * R0 + 256);
    const uint64_t o_hx1 = take(shared && !merged ? 4 * (uint64_t)(T * n_ffs) : 0);
    const uint64_t o_hq1 = take(shared && !merged && fds != BK_ACT_F32 ? bk_act_row_bytes(fds, n_ffs) * T + 256 : 0);
    const uint64_t o_Y = take(4 * (uint64_t)(n_ent * n_embd)), o_Ys = take(shared ? 4 * (uint64_t)(T * n_embd) : 0);
    const int32_t gmax = cu_moe_gmax(n_ent, E);
    const uint64_t o_perm = take(4 * (uint64_t)n_ent), o_grp = take(16 * (uint64_t)gmax);
    if (off > c->moe_work_bytes) {
        flush(c);
        (void)gpuStreamSynchronize(c->stream);
        if (c->moe_work) dev_free(c, c->moe_work);
        c->moe_work = NULL;
        c->moe_work_bytes = 0;
        if ((st = dev_alloc(c, (size_t)off, (void **)&c->moe_work))) return st;
        c->moe_work_bytes = off;
    }
    uint8_t *m = c->moe_work;
    rec_moe r;
    memset(&r, 0, sizeof(r));
    struct cu_moe_args *a = &r.a;
    /* 1. router (+ shared-expert gate) */
    a->router.a = act_view(in);
    a->router.n_act = (int32_t)T;
    a->router.row_order = c->batch_invariant;
    struct cu_mm_seg *sg = &a->router.seg[a->router.n_seg++];
    sg->w = (const uint8_t *)w->router->data; sg->y = (float *)(m + o_logits); sg->ld_y = E;
    sg->stride = cu_weight_row_stride(GGML_TYPE_F32, n_embd); sg->type = GGML_TYPE_F32; sg->n_rows = (int32_t)E;
    a->router.n_ctas = (int32_t)GPU_CEIL_DIV(E, CU_MM_WARPS);
    a->router.total_rows = (int32_t)E;
    a->router.total_tiles = (int32_t)GPU_CEIL_DIV(E, 4);
    if (sgate) {
        sg = &a->router.seg[a->router.n_seg++];
        sg->w = (const uint8_t *)w->shexp_gate->data; sg->y = (float *)(m + o_glog); sg->ld_y = 1;
        sg->stride = cu_weight_row_stride(GGML_TYPE_F32, n_embd); sg->type = GGML_TYPE_F32; sg->n_rows = 1;
        sg->cta0 = a->router.n_ctas; sg->row0 = a->router.total_rows; sg->tile0 = a->router.total_tiles;
        a->router.n_ctas += 1; a->router.total_rows += 1; a->router.total_tiles += 1;
    }
    /* 2. routing */
    a->logits = (const float *)(m + o_logits); a->glog = (const float *)(m + o_glog);
    a->ids = (int32_t *)(m + o_ids); a->wts = (float *)(m + o_wts);
    a->T = (int32_t)T; a->E = (int32_t)E; a->k = k; a->norm = p->norm_weights; a->shared = shared; a->sgate = sgate;
    a->merged = merged;
    a->perm = (int32_t *)(m + o_perm); a->grp = (int32_t *)(m + o_grp); a->gmax = gmax;
    /* 3. gate + up */
    float *gu0 = (float *)(m + o_gu0), *gu1 = merged ? gu0 + n_ent * 2 * n_ff : (float *)(m + o_gu1);
    a->gu_buf[0] = gu0; a->gu_buf[1] = shared ? gu1 : NULL;
    a->n_ff[0] = n_ff; a->n_ff[1] = n_ffs;
    {
        struct cu_moe_grp *g = &a->gu.g[a->gu.n_grp++];
        const struct bk_tensor *t2[2] = {w->gate_exps, w->up_exps};
        for (int i = 0; i < 2; i++) {
            g->w[i] = (const uint8_t *)t2[i]->data; g->stride[i] = cu_weight_row_stride(t2[i]->type, n_embd);
            g->exp_bytes[i] = g->stride[i] * (uint64_t)n_ff; g->type[i] = (int32_t)t2[i]->type;
        }
        g->y[0] = gu0; g->y[1] = gu0 + n_ff; g->ld_y = 2 * n_ff; g->ids = a->ids;
        g->n_rows = (int32_t)n_ff; g->n_mat = 2; g->n_ent = (int32_t)n_ent; g->act_div = k; g->a = act_view(in);
    }
    if (shared) {
        struct cu_moe_grp *g = &a->gu.g[a->gu.n_grp++];
        const struct bk_tensor *t2[2] = {w->gate_shexp, w->up_shexp};
        for (int i = 0; i < 2; i++) {
            g->w[i] = (const uint8_t *)t2[i]->data; g->stride[i] = cu_weight_row_stride(t2[i]->type, n_embd);
            g->type[i] = (int32_t)t2[i]->type;
        }
        g->y[0] = gu1; g->y[1] = gu1 + n_ffs; g->ld_y = 2 * n_ffs;
        g->n_rows = (int32_t)n_ffs; g->n_mat = 2; g->n_ent = (int32_t)T; g->act_div = 1; g->a = act_view(in);
    }
    /* 4. hidden rows */
    struct bk_act h0, h1;
    memset(&h0, 0, sizeof(h0));
    memset(&h1, 0, sizeof(h1));
    h0.x = (float *)(m + o_hx0); h0.n_cols = n_ff; h0.max_rows = R0;
    if (fd != BK_ACT_F32) h0.q[fd] = m + o_hq0;
    a->h[0] = cu_act_split(&h0); a->hfmts[0] = BK_ACT_BIT(fd);
    if (shared && !merged) {
        h1.x = (float *)(m + o_hx1); h1.n_cols = n_ffs; h1.max_rows = T;
        if (fds != BK_ACT_F32) h1.q[fds] = m + o_hq1;
        a->h[1] = cu_act_split(&h1); a->hfmts[1] = BK_ACT_BIT(fds);
    }
    /* 5. down */
    a->Y = (const float *)(m + o_Y); a->Ys = shared ? (const float *)(m + o_Ys) : NULL;
    {
        struct cu_moe_grp *g = &a->down.g[a->down.n_grp++];
        g->w[0] = (const uint8_t *)w->down_exps->data; g->stride[0] = cu_weight_row_stride(w->down_exps->type, n_ff);
        g->exp_bytes[0] = g->stride[0] * (uint64_t)n_embd; g->type[0] = (int32_t)w->down_exps->type;
        g->y[0] = (float *)(m + o_Y); g->ld_y = n_embd; g->ids = a->ids;
        g->n_rows = (int32_t)n_embd; g->n_mat = 1; g->n_ent = (int32_t)n_ent; g->act_div = 1; g->a = act_view(&h0);
    }
    if (shared) {
        struct cu_moe_grp *g = &a->down.g[a->down.n_grp++];
        g->w[0] = (const uint8_t *)w->down_shexp->data; g->stride[0] = cu_weight_row_stride(w->down_shexp->type, n_ffs);
        g->type[0] = (int32_t)w->down_shexp->type;
        g->y[0] = (float *)(m + o_Ys); g->ld_y = n_embd;
        g->n_rows = (int32_t)n_embd; g->n_mat = 1; g->n_ent = (int32_t)T; g->act_div = 1;
        g->act_off = merged ? (int32_t)n_ent : 0; g->a = act_view(merged ? &h0 : &h1);
    }
    /* 6. mix; with the fused norm + quantize switch on, in the down launch where the column-split expert kernels run
     * (counters: the second half of the array, the first is the per-row norm + quantize's) */
    a->out = out; a->n_embd = n_embd;
#if !defined(VLLMC_HIP) /* (its kernel instances are CUDA's only: gemv_q.cu moe_cols_launch) */
    if ((c->fuse_nq & BACKEND_CUDA_FUSE_MOE_MIX) && c->nq_cnt && T * ((n_embd + 255) / 256) <= CU_NQ_FUSE_COUNTERS / 2)
        a->mix_cnt = c->nq_cnt + CU_NQ_FUSE_COUNTERS / 2;
#endif
    /* weight bytes read (profile): the router, the distinct experts at most, the shared expert */
    const double per_exp = (double)a->gu.g[0].exp_bytes[0] + (double)a->gu.g[0].exp_bytes[1] + (double)a->down.g[0].exp_bytes[0];
    r.wbytes = 4.0 * (double)(E + (sgate ? 1 : 0)) * (double)n_embd + per_exp * (double)VLLMC_MIN(n_ent, E);
    if (shared)
        r.wbytes += (double)cu_weight_row_stride(w->gate_shexp->type, n_embd) * n_ffs + (double)cu_weight_row_stride(w->up_shexp->type, n_embd) * n_ffs +
                    (double)cu_weight_row_stride(w->down_shexp->type, n_ffs) * n_embd;
    return submit(c, CU_OP_MOE, &r, sizeof(r));
}

/* ---------------------------------------------------------------------------------------------
 * KV cache, lifetime
 * ------------------------------------------------------------------------------------------- */

static void cu_kv_destroy(struct backend *be, struct bk_kv_cache *kv) {
    if (!kv) return;
    if (((struct cu_kv *)kv)->d_shift) cu_free(be, ((struct cu_kv *)kv)->d_shift);
    free(kv->k_shift);
    for (int32_t l = 0; l < kv->n_layers; l++) {
        if (kv->k && kv->k[l]) cu_free(be, kv->k[l]);
        if (kv->v && kv->v[l]) cu_free(be, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->k_scales);
    free(kv->v_scales);
    free(kv);
}

static vllmc_status cu_kv_create(struct backend *be, enum bk_kv_dtype dtype, int32_t n_layers, int32_t n_blocks, int32_t n_kv_head,
                                 int32_t head_dim, struct bk_kv_cache **out) {
    *out = NULL;
    if ((int)dtype < 0 || dtype >= BK_KV_NDTYPE) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "KV dtype %d", (int)dtype);
    if (head_dim % 4) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "KV cache: head_dim %d (CUDA: a multiple of 4)", head_dim);
    if (n_layers < 0 || n_blocks <= 0 || n_kv_head <= 0 || head_dim <= 0)
        return vllmc_errorf(VLLMC_ERR_INVALID, "KV cache of %d layers, %d blocks, %d heads of %d", n_layers, n_blocks, n_kv_head, head_dim);
    uint64_t bytes;
    if (!checked_mul_u64(bk_kv_block_bytes(dtype, n_kv_head, head_dim), (uint64_t)n_blocks, &bytes) || bytes > SIZE_MAX)
        return vllmc_errorf(VLLMC_ERR_OOM, "KV cache too large");
    struct cu_kv *ck = (struct cu_kv *)calloc(1, sizeof(*ck));
    if (!ck) return vllmc_errorf(VLLMC_ERR_OOM, "KV cache");
    struct bk_kv_cache *kv = &ck->kv;
    kv->dtype = dtype; kv->n_blocks = n_blocks; kv->n_kv_head = n_kv_head; kv->head_dim = head_dim;
    kv->k_scale = kv->v_scale = 1.0f;
    kv->k = (void **)calloc((size_t)(n_layers ? n_layers : 1), sizeof(void *));
    kv->v = (void **)calloc((size_t)(n_layers ? n_layers : 1), sizeof(void *));
    kv->k_scales = (float *)malloc((size_t)(n_layers ? n_layers : 1) * sizeof(float));
    kv->v_scales = (float *)malloc((size_t)(n_layers ? n_layers : 1) * sizeof(float));
    if (!kv->k || !kv->v || !kv->k_scales || !kv->v_scales) { cu_kv_destroy(be, kv); return vllmc_errorf(VLLMC_ERR_OOM, "KV cache"); }
    for (int32_t l = 0; l < n_layers; l++) kv->k_scales[l] = kv->v_scales[l] = 1.0f;
    kv->n_layers = n_layers;
    for (int32_t l = 0; l < n_layers; l++) {
        vllmc_status st;
        if ((st = cu_alloc(be, (size_t)bytes, &kv->k[l])) || (st = cu_alloc(be, (size_t)bytes, &kv->v[l]))) {
            cu_kv_destroy(be, kv);
            return st;
        }
    }
    *out = kv;
    return VLLMC_OK;
}

#ifdef VLLMC_MV_TIMELINE
extern "C" void cu_tl_dump(const char *path);
#endif
static void cu_destroy(struct backend *be) {
    if (!be) return;
    cu_backend *c = cub(be);
    flush(c);
    if (c->hash_log) fclose(c->hash_log);
#ifdef VLLMC_MV_TIMELINE /* (a measurement build: gemv_q.cu) */
    if (getenv("VLLMC_MV_TIMELINE_OUT")) { (void)gpuStreamSynchronize(c->stream); cu_tl_dump(getenv("VLLMC_MV_TIMELINE_OUT")); }
#endif
    (void)gpuStreamSynchronize(c->stream);
    graphs_clear(c);
    if (c->h_stage) (void)gpuFreeHost(c->h_stage);
    if (c->h_stage2) (void)gpuFreeHost(c->h_stage2);
    if (c->h_argmax) (void)gpuFreeHost(c->h_argmax);
    if (c->h_argmax2) (void)gpuFreeHost(c->h_argmax2);
    for (int i = 0; i < 2; i++)
        if (c->pev[i]) (void)gpuEventDestroy(c->pev[i]);
    dev_free(c, c->d_batch);
    dev_free(c, c->d_argmax);
    dev_free(c, c->attn_work);
    dev_free(c, c->moe_work);
    dev_free(c, c->a16);
    dev_free(c, c->w16);
    dev_free(c, c->gdn_work);
    for (const auto &t : c->mg_tiles) dev_free(c, t.tiles);
    dev_free(c, c->mg_h); dev_free(c, c->mg_pd); dev_free(c, c->mg_xs); dev_free(c, c->mg_cnt);
    dev_free(c, c->m2_h); dev_free(c, c->m2_cnt);
    if (c->nq_cnt) (void)gpuFree(c->nq_cnt);
    if (c->mmq_ws) (void)gpuFree(c->mmq_ws);
    if (c->mmq_cnt) (void)gpuFree(c->mmq_cnt);
    if (c->gemm) gpu_gemm_destroy(c->gemm);
    if (c->ev0) (void)gpuEventDestroy(c->ev0);
    if (c->ev1) (void)gpuEventDestroy(c->ev1);
    (void)gpuStreamDestroy(c->stream);
    delete c;
}

static const struct backend_ops cu_ops = {
    "cuda",
    cu_destroy,
    cu_alloc,
    cu_free,
    cu_copy_to_device,
    cu_copy_to_host,
    cu_weight_upload,
    cu_weight_free,
    cu_batch_set,
    cu_embed,
    cu_rmsnorm,
    cu_rmsnorm_quantize,
    cu_quantize,
    cu_matmul,
    cu_add,
    cu_rope,
    cu_attention,
    cu_swiglu_quantize,
    cu_get_rows,
    cu_logits,
    cu_kv_create,
    cu_kv_destroy,
    cu_gdn,
    cu_moe,
    cu_sigmoid_mul,
    cu_copy_within,
    cu_mem_info,
    cu_defer_norm_ok,
    cu_matmul_add_defer,
};

/* An on-by-default switch from the environment: off only when set to "0". */
static bool env_on(const char *name) {
    const char *e = getenv(name);
    return !(e && !strcmp(e, "0"));
}

extern "C" vllmc_status backend_cuda_create(const struct backend_cuda_opts *o, struct backend **out) {
    *out = NULL;
    const int dev = o ? o->device : 0;
    vllmc_status st = gpu_err(gpuSetDevice(dev), "set device");
    if (st) return st;
    cu_backend *c = new (std::nothrow) cu_backend();
    if (!c) return vllmc_errorf(VLLMC_ERR_OOM, "CUDA backend");
    c->base.ops = &cu_ops;
    c->base.n_threads = 1;
#if !defined(VLLMC_HIP)
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess && mem_khz > 0 && bus_bits > 0)
        c->stats.dram_peak_bps = 2.0 * 1e3 * mem_khz * (bus_bits / 8.0);
    else (void)cudaGetLastError();
#endif
    c->eager = o && o->enforce_eager;
    c->profile = o && o->profile;
    /* switches on by default, "0" turns each off (comparisons) */
    c->pdl = !c->profile && env_on("VLLMC_CUDA_PDL"); /* plain launches when off */
    c->fuse_add = env_on("VLLMC_CUDA_FUSE_ADD");
    c->fuse_attn = env_on("VLLMC_CUDA_FUSE_ATTN");
    c->fuse_conv = env_on("VLLMC_CUDA_FUSE_CONV");
    const char *env;
    if ((env = getenv("VLLMC_CUDA_ATTN_PRE_SPLIT"))) { /* off until measured */
        if (!strcmp(env, "1")) c->attn_pre_split = true;
        else if (strcmp(env, "0")) LOG_WARN("VLLMC_CUDA_ATTN_PRE_SPLIT=%s: not 0 or 1; the attention prologue keeps its launch", env);
    }
    if ((env = getenv("VLLMC_CUDA_KD_ABL"))) {
        cu_kd_abl = atoi(env) & 7;
        if (cu_kd_abl & 5) LOG_WARN("VLLMC_CUDA_KD_ABL=%d: a timing measurement of the deferred norm; the results are wrong", cu_kd_abl);
    }
    if ((env = getenv("VLLMC_CUDA_DEFER_NORM"))) { /* off until measured */
        if (!strcmp(env, "1")) c->defer_norm = true;
        else if (strcmp(env, "0")) LOG_WARN("VLLMC_CUDA_DEFER_NORM=%s: not 0 or 1; the FFN norms keep their launches", env);
    }
    if (c->eager && (env = getenv("VLLMC_CUDA_HASH_LOG")) && *env) {
        if ((c->hash_log = fopen(env, "a"))) fprintf(c->hash_log, "== backend\n");
        else LOG_WARN("VLLMC_CUDA_HASH_LOG: cannot open %s for appending: no op hashes", env);
    }
    /* the tiled persistent FFN chain in recorded batch-1 steps: super-blocks a down task (4, 12 or 36); off until measured */
    if ((env = getenv("VLLMC_CUDA_MEGA2"))) {
        const int ps = atoi(env);
        c->mega2_ps = ps == 4 || ps == 12 || ps == 36 ? ps : 0;
        if (!c->mega2_ps && strcmp(env, "0"))
            LOG_WARN("VLLMC_CUDA_MEGA2=%s: not 4, 12 or 36 (super-blocks a down task); the FFNs keep their launches", env);
        c->mega2_pf = env_on("VLLMC_CUDA_MEGA2_PF");
        c->mega2_pj = getenv("VLLMC_CUDA_MEGA2_PJ") && atoi(getenv("VLLMC_CUDA_MEGA2_PJ")) != 0;
        int dev = 0;
        if (c->mega2_ps && (gpuGetDevice(&dev) != gpuSuccess || gpuDeviceGetSMCount(&c->n_sms, dev) != gpuSuccess || c->n_sms < 1)) {
            (void)gpuGetLastError();
            c->mega2_ps = 0;
        }
    }
    /* the tiled persistent MoE experts in recorded one-row steps; off until measured */
    if ((env = getenv("VLLMC_CUDA_MOE2")) && strcmp(env, "0") && strcmp(env, "1"))
        LOG_WARN("VLLMC_CUDA_MOE2=%s: not 0 or 1; the MoE ops keep their launches", env);
    else if (env && !strcmp(env, "1")) {
        int dev = 0;
        c->moe2 = gpuGetDevice(&dev) == gpuSuccess && gpuDeviceGetSMCount(&c->n_sms, dev) == gpuSuccess && c->n_sms >= 1;
        if (!c->moe2) (void)gpuGetLastError();
    }
    env = getenv("VLLMC_CUDA_FUSE_NQ"); /* BACKEND_CUDA_FUSE_* mask: the gated norm by clusters, the others off (measured) */
    c->fuse_nq = env ? (unsigned)strtoul(env, NULL, 0) & BACKEND_CUDA_FUSE_ALL : (unsigned)BACKEND_CUDA_FUSE_GATED_CLUSTER;
    if (env && (strtoul(env, NULL, 0) & ~(unsigned long)BACKEND_CUDA_FUSE_ALL)) /* (bits 128 / 256 / 512: folds since removed) */
        LOG_WARN("VLLMC_CUDA_FUSE_NQ=%s: bits above %d are not folds; taking %u", env, BACKEND_CUDA_FUSE_ALL, c->fuse_nq);
    if ((env = getenv("VLLMC_CUDA_MM"))) { /* "tr0,ks0,tr1,ks1,tr2,ks2[,p0,p1,p2]": mat-vec kernel choice (comparisons) */
        int v[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
        const int nv = sscanf(env, "%d,%d,%d,%d,%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]);
        if (nv == 6 || nv == 9) {
            const int tr[3] = {v[0], v[2], v[4]}, ks[3] = {v[1], v[3], v[5]}, pers[3] = {v[6], v[7], v[8]};
            backend_cuda_set_matvec(tr, ks, pers);
        }
    }
    if ((env = getenv("VLLMC_CUDA_MMV"))) { /* "c0,c1,c2": the column-split mat-vec per row class: 0 off, 2 or 4 row
                                                 groups a CTA, 1 by type (comparisons) */
        int v[3] = {0, 0, 0};
        if (sscanf(env, "%d,%d,%d", &v[0], &v[1], &v[2]) == 3) backend_cuda_set_matvec_cols(v);
    }
    if ((env = getenv("VLLMC_CUDA_MMV_ROWS"))) cu_mm_cfg.cols_rows = atoi(env); /* 0: multi-row steps as before (comparisons) */
    if ((env = getenv("VLLMC_CUDA_MMV_INVARIANT"))) cu_mm_cfg.cols_invariant = atoi(env) != 0; /* 1: the column-split kernels
                                                                                             under batch invariance too */
    /* the streaming and warp-streamed mat-vecs were removed (measured slower in every form: BENCHMARKS.md) */
    static const char *const gone[] = {"VLLMC_CUDA_MS", "VLLMC_CUDA_WS"};
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
        if ((env = getenv(gone[i]))) LOG_WARN("%s=%s: that mat-vec form was removed (measured slower); ignored", gone[i], env);
    if ((env = getenv("VLLMC_CUDA_NQ_EARLY"))) cu_mm_cfg.nq_early = atoi(env) != 0; /* (comparisons) */
    if ((env = getenv("VLLMC_CUDA_COLS_SBW2")) && atoi(env) >= 1 && atoi(env) <= 16) cu_mm_cfg.cols_sbw2 = atoi(env);
    if ((env = getenv("VLLMC_CUDA_COLS_LB"))) cu_mm_cfg.cols_lb = atoi(env) & 31; /* (comparisons) */
    if ((env = getenv("VLLMC_CUDA_SBT"))) { /* max super-blocks a row[,max rows] (comparisons) */
        cu_mm_cfg.sbt = atoi(env) > 0 ? atoi(env) : 0;
        const char *c = strchr(env, ',');
        if (c && atoi(c + 1) > 0) cu_mm_cfg.sbt_rows = atoi(c + 1);
    }
    if ((env = getenv("VLLMC_CUDA_MMX_ROWS")) && atoi(env) >= 0) cu_mmx_rows = atoi(env); /* (tests: every launch size) */
    if ((env = getenv("VLLMC_CUDA_LMH"))) { /* ns[,rows]: the LM head's ring of ns tiles (mm_kernel_lmh), 0 off */
        const char *cm = strchr(env, ',');
        const int ns = atoi(env);
        backend_cuda_set_lmh(ns, cm ? atoi(cm + 1) : 0);
        if (ns && cu_lmh_ns != ns) LOG_WARN("VLLMC_CUDA_LMH=%s: a ring of 2-%d tiles (or 0); the LM head keeps its kernel", env, CU_LMH_MAX_NS);
    }
    if ((env = getenv("VLLMC_CUDA_LMH_CO")) && atoi(env) >= 0 && atoi(env) <= 4) cu_lmh_co = atoi(env); /* (measurements) */
    if ((env = getenv("VLLMC_CUDA_CARVEOUT")) && atoi(env) >= 0 && atoi(env) <= 100) gpu_carveout = atoi(env); /* (comparisons) */
    if ((env = getenv("VLLMC_CUDA_MMA"))) cu_mm_cfg.mma = atoi(env) & 16383; /* the tensor-core mat-vec's classes */
    if ((env = getenv("VLLMC_CUDA_COLX"))) cu_mm_cfg.colx = VLLMC_MIN(VLLMC_MAX(atoi(env), 0), 2); /* mm_kernel_colx for the other weight types (2: IQ4_XS at 2 row passes a CTA too) */
    if ((env = getenv("VLLMC_CUDA_MMR"))) { /* "rows[,small_sb,small_rows]": several-row steps on the tensor cores */
        int v[3] = {0, 0, 0};
        const int nv = sscanf(env, "%d,%d,%d", &v[0], &v[1], &v[2]);
        if (nv >= 1) backend_cuda_set_matvec_mmr(v[0]);
        if (nv == 3 && v[1] >= 0 && v[2] >= 2) { cu_mm_cfg.mmr_small_sb = v[1]; cu_mm_cfg.mmr_small_rows = v[2]; }
    }
    if ((env = getenv("VLLMC_CUDA_MMR_RT"))) { /* "tiles[,min CTAs]": mm_kernel_mmrs's 16-row tiles a CTA (comparisons) */
        int v[2] = {0, 0};
        const int nv = sscanf(env, "%d,%d", &v[0], &v[1]);
        backend_cuda_set_mmr_tiles(nv >= 1 ? v[0] : 1, nv >= 2 ? v[1] : 132);
    }
    if ((env = getenv("VLLMC_CUDA_MMQ"))) { /* "rows[,ctas[,fill[,stream[,nt]]]]": several-row steps of rows or more on
                                                mm_kernel_mmq (0 off); launches of few tiles cut into ctas even runs
                                                (stream 1, default) or K split into at most (fill 1) or at least (0) ctas */
        int v[5] = {0, 0, 1, 1, 4};
        const int nv = sscanf(env, "%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4]);
        if (nv >= 1) backend_cuda_set_mmq_rows(v[0]);
        if (nv >= 2) backend_cuda_set_mmq_split(v[1]);
        if (nv >= 3) cu_mm_cfg.mmq_fill = v[2] != 0;
        if (nv >= 4) cu_mm_cfg.mmq_stream = v[3] != 0;
        if (nv >= 5) backend_cuda_set_mmq_groups(v[4]); /* activation rows a CTA / 8 (4 default, 8 or 2) */
    }
    if ((env = getenv("VLLMC_CUDA_GDN_R"))) backend_cuda_set_gdn_rows(atoi(env)); /* 1 or 2 rows a thread (comparisons) */
    if ((env = getenv("VLLMC_CUDA_DEC"))) backend_cuda_set_decode_rows(atoi(env));
    if ((env = getenv("VLLMC_CUDA_MOE_COLS"))) backend_cuda_set_moe_cols(atoi(env)); /* MoE ops of up to N rows on the
                                                                                   column-split expert kernels; 0 off */
    if ((env = getenv("VLLMC_CUDA_MOE_RS"))) backend_cuda_set_moe_route_sort(atoi(env));
    if ((env = getenv("VLLMC_CUDA_MOE_PRE"))) backend_cuda_set_moe_pre(atoi(env)); /* the down launch routes before its wait */
    if ((env = getenv("VLLMC_CUDA_F32R"))) backend_cuda_set_f32r(atoi(env)); /* F32 rows (the MoE router) on mm_kernel_f32r */
    if ((env = getenv("VLLMC_CUDA_MOE_GROUP"))) backend_cuda_set_moe_group(atoi(env)); /* MoE ops of N rows or more with the
                                                                                    entries grouped by expert; 0 off */
    c->batch_invariant = o && o->batch_invariant;
    if ((st = gpu_err(gpuStreamCreate(&c->stream), "stream"))) { delete c; return st; }
    if (gpuMalloc((void **)&c->nq_cnt, CU_NQ_FUSE_COUNTERS * sizeof(unsigned)) != gpuSuccess ||
        gpuMemset(c->nq_cnt, 0, CU_NQ_FUSE_COUNTERS * sizeof(unsigned)) != gpuSuccess) {
        (void)gpuGetLastError();
        if (c->nq_cnt) (void)gpuFree(c->nq_cnt);
        c->nq_cnt = NULL; /* no fused norm + quantize */
    }
#if !defined(VLLMC_HIP) /* (HIP has no mm_kernel_mmq) */
    if (gpuMalloc((void **)&c->mmq_ws, CU_MMQ_WS_FLOATS * sizeof(float)) != gpuSuccess ||
        gpuMalloc((void **)&c->mmq_cnt, CU_MMQ_TILES * sizeof(unsigned)) != gpuSuccess ||
        gpuMemset(c->mmq_cnt, 0, CU_MMQ_TILES * sizeof(unsigned)) != gpuSuccess) {
        (void)gpuGetLastError();
        if (c->mmq_ws) (void)gpuFree(c->mmq_ws);
        if (c->mmq_cnt) (void)gpuFree(c->mmq_cnt);
        c->mmq_ws = NULL; c->mmq_cnt = NULL; /* mm_kernel_mmq unsplit only */
    }
#endif
    /* prefill paths; VLLMC_CUDA_GEMM_ROWS (0: never), VLLMC_CUDA_GDN_CHUNKED=0 and VLLMC_CUDA_ATTN_PREFILL=0
     * override for measurements */
    c->gemm_min_rows = GEMM_MIN_ROWS;
    c->gemm_min_decode_rows = GEMM_MIN_DECODE_ROWS;
    env = getenv("VLLMC_CUDA_GEMM_ROWS"); /* "rows[,decode_rows]": one threshold for every batch, or the decode steps' apart */
    if (env && *env) {
        int v[2] = {0, 0};
        const int nv = sscanf(env, "%d,%d", &v[0], &v[1]);
        if (nv >= 1) c->gemm_min_rows = c->gemm_min_decode_rows = v[0];
        if (nv >= 2) c->gemm_min_decode_rows = v[1];
    }
    c->gdn_chunked = env_on("VLLMC_CUDA_GDN_CHUNKED");
    env = getenv("VLLMC_CUDA_GDN_RUNS");
    c->gdn_runs = !(env && !strcmp(env, "0")); /* on by default: serve at 64 sequences +34% (BENCHMARKS.md "Mixed steps") */
    if (env && *env && strcmp(env, "0") && strcmp(env, "1")) LOG_WARN("VLLMC_CUDA_GDN_RUNS=%s: not 0 or 1; it stays on", env);
    c->attn_prefill = env_on("VLLMC_CUDA_ATTN_PREFILL");
    env = getenv("VLLMC_CUDA_GEMM_ACT");
    c->gemm_act_q8 = env && !strcmp(env, "q8");
#if defined(VLLMC_HIP)
    c->gdn_chunked = c->attn_prefill = false; /* their kernels want ~150 KB of shared memory per CTA */
#endif
    if (c->gemm_min_rows >= 0 && gpu_gemm_create(c->stream, &c->gemm) != gpuSuccess) {
        (void)gpuGetLastError();
        c->gemm = NULL; /* the quantized kernels serve every size */
    }
    if (c->profile) {
        (void)gpuEventCreate(&c->ev0);
        (void)gpuEventCreate(&c->ev1);
    }
    *out = &c->base;
    return VLLMC_OK;
}

extern "C" void backend_cuda_get_stats(struct backend *be, struct backend_cuda_stats *out) { *out = cub(be)->stats; }

extern "C" void backend_cuda_set_fuse_nq(struct backend *be, unsigned mask) {
    cu_backend *c = cub(be);
    flush(c);
    (void)gpuStreamSynchronize(c->stream);
    graphs_clear(c); /* steps are captured again, with the process-wide kernel choices of now */
    c->fuse_nq = mask & BACKEND_CUDA_FUSE_ALL;
}

extern "C" void backend_cuda_set_matvec(const int tr[3], const int ks[3], const int pers[3]) {
    for (int i = 0; i < 3; i++) { cu_mm_cfg.tr[i] = tr[i]; cu_mm_cfg.ks[i] = ks[i]; cu_mm_cfg.pers[i] = pers[i]; }
}
extern "C" void backend_cuda_set_matvec_cols(const int cols[3]) {
    for (int i = 0; i < 3; i++) cu_mm_cfg.cols[i] = cols[i];
}
extern "C" void backend_cuda_set_matvec_sbt(int max_sb, int max_rows) {
    cu_mm_cfg.sbt = max_sb > 0 ? max_sb : 0;
    if (max_rows > 0) cu_mm_cfg.sbt_rows = max_rows;
}
extern "C" int backend_cuda_set_matvec_mmr(int rows) {
    const int old = cu_mm_cfg.mmr_rows;
#if !defined(VLLMC_HIP)
    cu_mm_cfg.mmr_rows = rows > 0 ? rows : 0;
#else
    (void)rows; /* no such kernel */
#endif
    return old;
}
extern "C" uint64_t backend_cuda_gdn_cluster_launches(void) { return cu_gdn_cluster_launches; }
extern "C" int backend_cuda_set_gdn_rows(int rows) {
    const int old = cu_gdn_rows2;
    cu_gdn_rows2 = rows == 1 || rows == 2 ? rows : -1;
    return old;
}
extern "C" int backend_cuda_set_mmq_rows(int rows) {
    const int old = cu_mm_cfg.mmq_rows;
#if !defined(VLLMC_HIP)
    cu_mm_cfg.mmq_rows = rows > 0 ? rows : 0;
#else
    (void)rows; /* no such kernel */
#endif
    return old;
}
extern "C" int backend_cuda_set_mmq_split(int ctas) {
    const int old = cu_mm_cfg.mmq_ctas;
    cu_mm_cfg.mmq_ctas = ctas > 0 ? ctas : 0;
    return old;
}
extern "C" int backend_cuda_set_mmq_groups(int nt) {
    const int old = cu_mm_cfg.mmq_nt;
    cu_mm_cfg.mmq_nt = nt <= 2 ? 2 : nt <= 4 ? 4 : 8;
    return old;
}
extern "C" int backend_cuda_set_mmq_stream(int on) {
    const int old = cu_mm_cfg.mmq_stream;
    cu_mm_cfg.mmq_stream = on != 0;
    return old;
}
extern "C" int backend_cuda_set_mmr_tiles(int tiles, int min_ctas) {
    const int old = cu_mm_cfg.mmr_rt > 1 ? cu_mm_cfg.mmr_rt : 1;
    cu_mm_cfg.mmr_rt = tiles >= 4 ? 4 : tiles >= 2 ? 2 : 1;
    cu_mm_cfg.mmr_rt_ctas = min_ctas > 0 ? min_ctas : 0;
    return old;
}
extern "C" void backend_cuda_get_matvec_sbt(int *max_sb, int *max_rows) {
    *max_sb = cu_mm_cfg.sbt;
    *max_rows = cu_mm_cfg.sbt_rows;
}
extern "C" vllmc_status backend_cuda_set_pipelined(struct backend *be, bool on) {
    cu_backend *c = cub(be);
    flush(c);
    if (!on) {
        (void)gpuStreamSynchronize(c->stream);
        c->pipe = false; c->tok_prev = false; c->n_pq = 0; c->par = 0;
        return VLLMC_OK;
    }
    for (int i = 0; i < 2; i++)
        if (!c->pev[i]) {
            vllmc_status st = gpu_err(gpuEventCreate(&c->pev[i]), "pipelined steps: event");
            if (st) return st;
        }
    (void)gpuStreamSynchronize(c->stream);
    c->pipe = true; c->tok_prev = false; c->n_pq = 0; c->par = 0;
    return VLLMC_OK;
}
extern "C" void backend_cuda_tokens_from_argmax(struct backend *be) { cub(be)->tok_prev = true; }
extern "C" vllmc_status backend_cuda_fetch_argmax(struct backend *be, int32_t *ids, int32_t n) {
    cu_backend *c = cub(be);
    if (!c->pipe || !c->n_pq) return vllmc_errorf(VLLMC_ERR_INVALID, "fetch argmax: no pipelined step in flight");
    const int p = c->pq[0];
    if (n != c->pq_rows[0]) return vllmc_errorf(VLLMC_ERR_INVALID, "fetch argmax: %d ids asked, the step has %d", n, c->pq_rows[0]);
    const double t0 = vllmc_time_s();
    vllmc_status st = gpu_err(gpuEventSynchronize(c->pev[p]), "pipelined step");
    if (st) return st;
    c->stats.wait_ns += (uint64_t)((vllmc_time_s() - t0) * 1e9);
    memcpy(ids, p ? c->h_argmax2 : c->h_argmax, (size_t)n * 4);
    c->pq[0] = c->pq[1]; c->pq_rows[0] = c->pq_rows[1];
    c->n_pq--;
    return VLLMC_OK;
}
extern "C" int backend_cuda_set_matvec_mma(int mask) {
#if defined(VLLMC_HIP)
    (void)mask;
    return -1; /* no such kernel there */
#else
    const int old = cu_mm_cfg.mma;
    cu_mm_cfg.mma = mask & 16383;
    return old;
#endif
}
extern "C" int backend_cuda_set_matvec_colx(int on) {
    const int old = cu_mm_cfg.colx;
    cu_mm_cfg.colx = VLLMC_MIN(VLLMC_MAX(on, 0), 2);
    return old;
}
extern "C" int backend_cuda_set_lmh(int ns, int rows) {
#if defined(VLLMC_HIP)
    (void)ns; (void)rows;
    return -1; /* no such kernel there */
#else
    const int old = cu_lmh_ns;
    cu_lmh_ns = ns >= 2 && ns <= CU_LMH_MAX_NS ? ns : 0;
    if (rows > 0) cu_lmh_rows = rows;
    return old;
#endif
}
extern "C" int backend_cuda_set_mmx_rows(int rows) {
    const int old = cu_mmx_rows;
    if (rows >= 0) cu_mmx_rows = rows;
    return old;
}
extern "C" int backend_cuda_set_matvec_lb(int mask) {
    const int old = cu_mm_cfg.cols_lb;
    cu_mm_cfg.cols_lb = mask & 31;
    return old;
}
extern "C" void backend_cuda_get_matvec_cols(int cols[3]) {
    for (int i = 0; i < 3; i++) cols[i] = cu_mm_cfg.cols[i];
}
extern "C" void backend_cuda_set_decode_rows(int max_rows) { cu_mm_cfg.dec_rows = max_rows < 0 ? 0 : max_rows; }
extern "C" int backend_cuda_set_moe_cols(int max_rows) {
    const int old = cu_mm_cfg.moe_cols_rows;
    cu_mm_cfg.moe_cols_rows = max_rows < 0 ? 0 : max_rows;
    return old;
}
extern "C" int backend_cuda_set_moe_group(int min_rows) {
    const int old = cu_mm_cfg.moe_group_rows;
    cu_mm_cfg.moe_group_rows = min_rows < 0 ? 0 : min_rows;
    return old;
}
extern "C" int backend_cuda_set_f32r(int on) {
#if defined(VLLMC_HIP) /* (the kernel is CUDA's only) */
    (void)on;
    return -1;
#endif
    const int old = cu_mm_cfg.f32r;
    cu_mm_cfg.f32r = on != 0;
    return old;
}
extern "C" int backend_cuda_set_moe_pre(int on) {
    const int old = cu_mm_cfg.moe_pre;
    cu_mm_cfg.moe_pre = on != 0;
    return old;
}
extern "C" int backend_cuda_set_moe_route_sort(int max_rows) {
    const int old = cu_mm_cfg.moe_rs_rows;
    cu_mm_cfg.moe_rs_rows = max_rows < 0 ? 0 : max_rows;
    return old;
}
extern "C" void backend_cuda_set_matvec_rows(int rows0, int rows1) {
    cu_mm_cfg.rows[0] = rows0;
    cu_mm_cfg.rows[1] = rows1;
}
extern "C" void backend_cuda_get_matvec(int tr[3], int ks[3], int pers[3]) {
    for (int i = 0; i < 3; i++) { tr[i] = cu_mm_cfg.tr[i]; ks[i] = cu_mm_cfg.ks[i]; pers[i] = cu_mm_cfg.pers[i]; }
}

extern "C" int backend_cuda_device_count(void) {
    int n = 0;
    if (gpuGetDeviceCount(&n) != gpuSuccess) {
        (void)gpuGetLastError();
        return 0;
    }
    return n;
}

extern "C" void backend_cuda_get_prof(struct backend *be, struct backend_cuda_prof *out) {
    cu_backend *c = cub(be);
    memset(out, 0, sizeof(*out));
    for (int op = 1; op < CU_OP_COUNT && out->n < BACKEND_CUDA_PROF_MAX; op++) {
        if (!c->prof.calls[op]) continue;
        const int i = out->n++;
        out->name[i] = cu_op_names[op];
        out->calls[i] = c->prof.calls[op];
        out->ms[i] = c->prof.ms[op];
        out->bytes[i] = c->prof.bytes[op];
    }
}

extern "C" void backend_cuda_reset_prof(struct backend *be) {
    cu_backend *c = cub(be);
    memset(&c->prof, 0, sizeof(c->prof));
}

extern "C" vllmc_status backend_cuda_weight_f16(struct backend *be, const struct bk_tensor *w, void *out) {
    cu_backend *c = cub(be);
    if (!w || !w->data || w->n_dims != 2 || !cu_dequant_f16_type(w->type) || w->ne[0] % 32)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "weight_f16: weight type or shape not supported");
    flush(c);
    cu_launch_dequant_f16((const uint8_t *)w->data, w->type, cu_weight_row_stride(w->type, w->ne[0]), w->ne[0], w->ne[1],
                          (uint16_t *)out, c->stream);
    vllmc_status st = gpu_err(gpuGetLastError(), "weight_f16");
    if (!st) st = gpu_err(gpuStreamSynchronize(c->stream), "weight_f16");
    return st;
}

extern "C" bool backend_cuda_has_gemm(struct backend *be) { return cub(be)->gemm != NULL; }
extern "C" bool backend_cuda_gemm_weight(const struct bk_tensor *w) { return gemm_weight_ok(w); }

extern "C" void backend_cuda_set_gemm_act(struct backend *be, bool quantized) { cub(be)->gemm_act_q8 = quantized; }

extern "C" vllmc_status backend_cuda_sample_rows(struct backend *be, const float *d_logits, int32_t n_rows, int64_t n,
                                                 const struct bk_sample *rows, int32_t *ids) {
    cu_backend *c = cub(be);
    flush(c);
    if (n_rows <= 0 || n <= 0 || n > INT32_MAX) return vllmc_errorf(VLLMC_ERR_INVALID, "sample rows: bad shape");
    std::vector<int32_t> p((size_t)n_rows * 6);
    vllmc_status st = pack_sample(rows, n_rows, p.data());
    if (st) return st;
    int32_t *d = NULL;
    if ((st = dev_alloc(c, p.size() * 4 + (size_t)n_rows * 4, (void **)&d))) return st;
    gpu_pdl.on = false;
    gpu_pdl.after_kernel = false;
    if (!(st = gpu_err(gpuMemcpy(d, p.data(), p.size() * 4, gpuMemcpyHostToDevice), "sample rows"))) {
        cu_launch_sample(d_logits, n_rows, n, d, d + p.size(), c->stream);
        if (!(st = gpu_err(gpuStreamSynchronize(c->stream), "sample rows")))
            st = gpu_err(gpuMemcpy(ids, d + p.size(), (size_t)n_rows * 4, gpuMemcpyDeviceToHost), "sample rows");
    }
    dev_free(c, d);
    return st;
}
extern "C" void backend_cuda_swap_gemm_rows(struct backend *be, int *rows, int *decode_rows) {
    cu_backend *c = cub(be);
    const int r = c->gemm_min_rows, d = c->gemm_min_decode_rows;
    c->gemm_min_rows = *rows;
    c->gemm_min_decode_rows = *decode_rows;
    *rows = r;
    *decode_rows = d;
}
extern "C" bool backend_cuda_set_gdn_runs(struct backend *be, bool on) {
    cu_backend *c = cub(be);
    flush(c);
    const bool was = c->gdn_runs;
    c->gdn_runs = on;
    return was;
}
extern "C" void backend_cuda_set_prefill(struct backend *be, int gemm_min_rows, bool gdn_chunked) {
    cu_backend *c = cub(be);
    flush(c);
    c->gemm_min_rows = c->gemm_min_decode_rows = gemm_min_rows;
    c->gdn_chunked = gdn_chunked;
}
