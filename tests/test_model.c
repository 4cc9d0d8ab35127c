/* Model runner on small random models written with the GGUF writer (llama, qwen2, qwen3; weights of
 * mixed types so one activation feeds several formats): logits must not depend on how the tokens are
 * batched. Checked bit for bit: prefill in one chunk vs token by token vs uneven chunks; two sequences
 * interleaved in one batch with shuffled block tables vs each alone; the fast backend at 1 and 3
 * threads vs the reference backend. Also load errors (missing key, bad batch) are clean. */
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "test.h"

#define E 256
#define H 4
#define KVH 2
#define D 64
#define FF 512
#define NV 300
#define NL 2

struct owned { void *p[64]; int n; };

static const void *keep(struct owned *o, void *p) { o->p[o->n++] = p; return p; }

static void add_mat(struct gguf_writer *w, struct owned *o, const char *name, uint32_t type, int64_t n_in, int64_t n_out, float gain) {
    float *f = malloc(sizeof(float) * (size_t)(n_in * n_out));
    for (int64_t i = 0; i < n_in * n_out; i++) f[i] = gain / sqrtf((float)n_in) * test_rand_normal();
    int64_t ne[2] = {n_in, n_out};
    if (type == GGML_TYPE_F32) {
        VLLMC_ASSERT(gguf_writer_add_tensor(w, name, type, n_out == 1 ? 1 : 2, ne, keep(o, f)) == VLLMC_OK);
        return;
    }
    uint64_t rs = quant_row_size(type, n_in);
    char *q = malloc(rs * (uint64_t)n_out);
    for (int64_t r = 0; r < n_out; r++) VLLMC_ASSERT(quantize_row_ref(type, f + r * n_in, q + rs * (uint64_t)r, n_in) == VLLMC_OK);
    free(f);
    VLLMC_ASSERT(gguf_writer_add_tensor(w, name, type, 2, ne, keep(o, q)) == VLLMC_OK);
}

static void add_vec(struct gguf_writer *w, struct owned *o, const char *name, int64_t n, float base, float noise) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = base + noise * test_rand_normal();
    VLLMC_ASSERT(gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 1, (int64_t[]){n}, keep(o, f)) == VLLMC_OK);
}

static void write_model(const char *arch, const char *path, bool skip_key) {
    struct gguf_writer *w = gguf_writer_create();
    struct owned o = {.n = 0};
    char k[96];
    gguf_writer_set_str(w, "general.architecture", arch);
#define KEY(s) (snprintf(k, sizeof(k), "%s.%s", arch, s), k)
    if (!skip_key) gguf_writer_set_u32(w, KEY("block_count"), NL);
    gguf_writer_set_u32(w, KEY("embedding_length"), E);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), FF);
    gguf_writer_set_u32(w, KEY("attention.head_count"), H);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), KVH);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.0f);
#undef KEY
    add_mat(w, &o, "token_embd.weight", GGML_TYPE_Q8_0, E, NV, 8.0f);
    add_vec(w, &o, "output_norm.weight", E, 1.0f, 0.1f);
    if (strcmp(arch, "qwen2")) add_mat(w, &o, "output.weight", GGML_TYPE_Q6_K, E, NV, 4.0f);
    if (!strcmp(arch, "llama")) add_vec(w, &o, "rope_freqs.weight", D / 2, 2.0f, 0.5f);
    char n[96];
    for (int l = 0; l < NL; l++) {
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d.%s", l, s), n)
        add_vec(w, &o, NAME("attn_norm.weight"), E, 1.0f, 0.1f);
        add_mat(w, &o, NAME("attn_q.weight"), GGML_TYPE_Q4_K, E, H * D, 2.0f);   /* Q8_K activations */
        add_mat(w, &o, NAME("attn_k.weight"), GGML_TYPE_Q8_0, E, KVH * D, 2.0f); /* Q8_0 activations */
        add_mat(w, &o, NAME("attn_v.weight"), GGML_TYPE_F32, E, KVH * D, 1.0f);  /* f32 activations */
        add_mat(w, &o, NAME("attn_output.weight"), GGML_TYPE_Q5_0, H * D, E, 0.5f);
        add_vec(w, &o, NAME("ffn_norm.weight"), E, 1.0f, 0.1f);
        add_mat(w, &o, NAME("ffn_gate.weight"), GGML_TYPE_Q6_K, E, FF, 1.0f);
        add_mat(w, &o, NAME("ffn_up.weight"), GGML_TYPE_Q4_0, E, FF, 1.0f);
        add_mat(w, &o, NAME("ffn_down.weight"), GGML_TYPE_Q8_0, FF, E, 0.5f);
        if (!strcmp(arch, "qwen2")) {
            add_vec(w, &o, NAME("attn_q.bias"), H * D, 0.0f, 0.2f);
            add_vec(w, &o, NAME("attn_k.bias"), KVH * D, 0.0f, 0.2f);
            add_vec(w, &o, NAME("attn_v.bias"), KVH * D, 0.0f, 0.2f);
        }
        if (!strcmp(arch, "qwen3")) {
            add_vec(w, &o, NAME("attn_q_norm.weight"), D, 1.0f, 0.1f);
            add_vec(w, &o, NAME("attn_k_norm.weight"), D, 1.0f, 0.1f);
        }
#undef NAME
    }
    VLLMC_ASSERT(gguf_writer_write(w, path) == VLLMC_OK);
    gguf_writer_destroy(w);
    for (int i = 0; i < o.n; i++) free(o.p[i]);
}

/* Run a schedule: each step feeds rows (seq, count) for up to two sequences; collects the logits of
 * every row, in (seq, position) order, into out[seq][pos][NV]. */
struct sched_step { int n[2]; };

static void run(struct model *m, const int32_t *toks[2], const int n_tok[2], const struct sched_step *steps, int n_steps,
                const int32_t *tables[2], float *out[2]) {
    struct bk_kv_cache *kv = NULL;
    VLLMC_ASSERT(model_kv_create(m, BK_KV_F16, 16, &kv) == VLLMC_OK);
    int done[2] = {0, 0};
    for (int st = 0; st < n_steps; st++) {
        int32_t ids[64], pos[64], seq[64], rows[64];
        int t = 0;
        /* interleave: alternate rows of the two sequences */
        int left[2] = {steps[st].n[0], steps[st].n[1]}, at[2] = {done[0], done[1]};
        while (left[0] || left[1])
            for (int s = 0; s < 2; s++)
                if (left[s]) { ids[t] = toks[s][at[s]]; pos[t] = at[s]; seq[t] = s; rows[t] = t; t++; at[s]++; left[s]--; }
        struct bk_seq seqs[2];
        int n_seqs = 0, map[2] = {-1, -1}, rmap[2] = {0, 0};
        for (int s = 0; s < 2; s++)
            if (steps[st].n[s]) {
                rmap[n_seqs] = s;
                map[s] = n_seqs;
                seqs[n_seqs++] = (struct bk_seq){.block_table = tables[s], .n_blocks = 4, .state_slot = -1};
            }
        for (int i = 0; i < t; i++) seq[i] = map[seq[i]];
        struct bk_batch b = {.n_tokens = t, .token_ids = ids, .pos = pos, .seq_idx = seq, .n_seqs = n_seqs, .seqs = seqs,
                             .n_logits = t, .logit_rows = rows};
        float *lg = malloc(sizeof(float) * (size_t)t * NV);
        CHECK(model_forward(m, &b, kv, lg, NULL) == VLLMC_OK);
        for (int i = 0; i < t; i++) {
            int s = rmap[seq[i]];
            memcpy(out[s] + (size_t)pos[i] * NV, lg + (size_t)i * NV, sizeof(float) * NV);
        }
        free(lg);
        for (int s = 0; s < 2; s++) done[s] += steps[st].n[s];
    }
    (void)n_tok;
    model_kv_destroy(m, kv);
}

static void test_arch(const char *arch, const char *path) {
    write_model(arch, path, false);
    struct backend *ref = NULL, *f1 = NULL, *f3 = NULL;
    CHECK(backend_cpu_create(1, true, &ref) == VLLMC_OK);
    CHECK(backend_cpu_create(1, false, &f1) == VLLMC_OK);
    CHECK(backend_cpu_create(3, false, &f3) == VLLMC_OK);
    struct backend *bes[3] = {ref, f1, f3};
    enum { L0 = 23, L1 = 17 };
    int32_t t0[L0], t1[L1];
    for (int i = 0; i < L0; i++) t0[i] = (int32_t)(test_rand_u64() % NV);
    for (int i = 0; i < L1; i++) t1[i] = (int32_t)(test_rand_u64() % NV);
    const int32_t *toks[2] = {t0, t1};
    const int n_tok[2] = {L0, L1};
    /* disjoint, shuffled block tables inside a pool of 16 */
    const int32_t tab0[4] = {9, 2, 14, 5}, tab1[4] = {0, 11, 7, 3}, tab_alone[4] = {1, 2, 3, 4};
    const int32_t *tables[2] = {tab0, tab1};
    float *base[2] = {calloc((size_t)L0 * NV, 4), calloc((size_t)L1 * NV, 4)};
    float *got[2] = {calloc((size_t)L0 * NV, 4), calloc((size_t)L1 * NV, 4)};
    for (int bi = 0; bi < 3; bi++) {
        struct model *m = NULL;
        CHECK(model_load(path, bes[bi], &m) == VLLMC_OK);
        if (!m) { fprintf(stderr, "%s\n", vllmc_last_error()); break; }
        CHECK(m->hp.n_layer == NL && m->hp.n_vocab == NV && m->hp.n_attn_layers == NL);
        /* bytes a decode token reads (vllmc bench's roofline): every tensor of the file once, but an untied token
         * table one row (qwen2's test model ties it to the head, which reads all of it) */
        uint64_t want = 0;
        for (uint64_t i = 0; i < m->gguf->n_tensors; i++) want += m->gguf->tensors[i].size_bytes;
        const struct gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
        const bool untied = gguf_find_tensor(m->gguf, "output.weight") != NULL;
        CHECK(te && untied == (strcmp(arch, "qwen2") != 0));
        if (te && untied) want -= te->size_bytes - quant_row_size(te->type, te->ne[0]);
        CHECK_MSG(model_active_weight_bytes(m) == want, "%s: active weight bytes %llu, want %llu", arch,
                  (unsigned long long)model_active_weight_bytes(m), (unsigned long long)want);
        CHECK(model_reserve(m, 48, 48) == VLLMC_OK);
        /* (a) each sequence alone, one prefill chunk */
        const int32_t *alone[2] = {tab_alone, tab_alone};
        struct sched_step s_a0 = {{L0, 0}}, s_a1 = {{0, L1}};
        float *tmp[2] = {got[0], got[1]};
        if (bi == 0) {
            tmp[0] = base[0];
            tmp[1] = base[1];
        }
        run(m, toks, n_tok, &s_a0, 1, alone, tmp);
        run(m, toks, n_tok, &s_a1, 1, alone, tmp);
        if (bi) CHECK_MSG(!memcmp(got[0], base[0], (size_t)L0 * NV * 4) && !memcmp(got[1], base[1], (size_t)L1 * NV * 4),
                          "%s: backend %d differs from the reference", arch, bi);
        /* (b) both sequences interleaved: uneven chunks, then decode steps together, then the rest */
        struct sched_step sch[] = {{{5, 3}}, {{7, 0}}, {{1, 1}}, {{1, 1}}, {{0, 9}}, {{9, 1}}, {{0, 2}}};
        memset(got[0], 0, (size_t)L0 * NV * 4);
        memset(got[1], 0, (size_t)L1 * NV * 4);
        run(m, toks, n_tok, sch, (int)ARRAY_LEN(sch), tables, got);
        CHECK_MSG(!memcmp(got[0], base[0], (size_t)L0 * NV * 4) && !memcmp(got[1], base[1], (size_t)L1 * NV * 4),
                  "%s: backend %d: interleaved batches differ from each sequence alone", arch, bi);
        /* (c) token by token */
        struct sched_step one[L0];
        for (int i = 0; i < L0; i++) one[i] = (struct sched_step){{1, 0}};
        memset(got[0], 0, (size_t)L0 * NV * 4);
        run(m, toks, n_tok, one, L0, tables, got);
        CHECK_MSG(!memcmp(got[0], base[0], (size_t)L0 * NV * 4), "%s: backend %d: token-by-token differs", arch, bi);
        /* sane logits: finite, not constant */
        bool finite = true;
        for (int i = 0; i < L0 * NV; i++) finite &= isfinite(base[0][i]);
        CHECK(finite && base[0][0] != base[0][1]);
        /* a batch larger than the reserve, a position past its block table: errors */
        int32_t ids[2] = {1, 2}, pos[2] = {0, 64}, sq[2] = {0, 0}, rows[1] = {0};
        struct bk_seq seq = {.block_table = tab0, .n_blocks = 4, .state_slot = -1};
        struct bk_batch bad = {.n_tokens = 2, .token_ids = ids, .pos = pos, .seq_idx = sq, .n_seqs = 1, .seqs = &seq,
                               .n_logits = 1, .logit_rows = rows};
        struct bk_kv_cache *kv = NULL;
        CHECK(model_kv_create(m, BK_KV_F16, 16, &kv) == VLLMC_OK);
        CHECK(model_forward(m, &bad, kv, NULL, NULL) == VLLMC_ERR_INVALID);
        bad.n_tokens = 49;
        CHECK(model_forward(m, &bad, kv, NULL, NULL) == VLLMC_ERR_INVALID);
        model_kv_destroy(m, kv);
        model_destroy(m);
    }
    for (int i = 0; i < 2; i++) { free(base[i]); free(got[i]); }
    for (int i = 0; i < 3; i++) bes[i]->ops->destroy(bes[i]);
}

int main(void) {
    test_seed_auto("test_model");
    char path[64];
    snprintf(path, sizeof(path), "/tmp/vllmc_test_model_%d.gguf", (int)getpid());
    test_arch("llama", path);
    test_arch("qwen2", path);
    test_arch("qwen3", path);
    /* a missing hparam key is a clear error */
    write_model("qwen2", path, true);
    struct backend *be = NULL;
    CHECK(backend_cpu_create(1, false, &be) == VLLMC_OK);
    struct model *m = NULL;
    CHECK(model_load(path, be, &m) == VLLMC_ERR_CORRUPT && !m);
    CHECK(strstr(vllmc_last_error(), "qwen2.block_count") != NULL);
    be->ops->destroy(be);
    unlink(path);
    return test_finish("test_model");
}
