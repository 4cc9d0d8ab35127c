/* End-to-end checks of the qwen35 / qwen35moe forward on small random models written to a temporary
 * GGUF (fresh random weights each run): whole-prompt prefill vs token-by-token decode vs prefill in pieces
 * (with VLLMC_SIMD=scalar the whole-prompt run takes the chunked delta rule); fast vs reference CPU backend;
 * 1 vs 2 threads (bit-exact); two sequences interleaved in one batch with their own state slots vs each
 * alone; a slot reused from position 0 starts from zero state; corrupt metadata / missing tensors come
 * back as errors. */
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "test.h"

enum { E = 64, NL = 4, NH = 2, NKV = 1, HD = 32, NROT = 16, NK = 2, NV = 4, DS = 16, DC = 4, FF = 96, VOCAB = 50,
       NX = 6, NXU = 2, FFX = 32, FFS = 48, INTERVAL = 2 };

struct tensor_buf { char name[64]; int n_dims; int64_t ne[3]; float *data; };
static struct tensor_buf tbufs[128];
static int n_tbufs;

static void add_t(const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, float scale, float offset) {
    struct tensor_buf *t = &tbufs[n_tbufs++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2;
    int64_t n = ne0 * (n_dims > 1 ? ne1 : 1) * (n_dims > 2 ? ne2 : 1);
    t->data = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) t->data[i] = offset + scale * test_rand_normal();
}

/* skip: a tensor name to leave out; bad_inner: write an inconsistent ssm.inner_size. */
static void write_model(const char *path, bool moe, const char *skip, bool bad_inner) {
    const char *arch = moe ? "qwen35moe" : "qwen35";
    char k[128];
    struct gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", arch);
#define KU(suffix, v) do { snprintf(k, sizeof(k), "%s.%s", arch, suffix); gguf_writer_set_u32(w, k, v); } while (0)
    KU("block_count", NL);
    KU("context_length", 1024);
    KU("embedding_length", E);
    if (!moe) KU("feed_forward_length", FF);
    KU("attention.head_count", NH);
    KU("attention.head_count_kv", NKV);
    KU("attention.key_length", HD);
    KU("attention.value_length", HD);
    KU("rope.dimension_count", NROT);
    KU("ssm.conv_kernel", DC);
    KU("ssm.state_size", DS);
    KU("ssm.group_count", NK);
    KU("ssm.time_step_rank", NV);
    KU("ssm.inner_size", bad_inner ? NV * DS + 1 : NV * DS);
    KU("full_attention_interval", INTERVAL);
    if (moe) {
        KU("expert_count", NX);
        KU("expert_used_count", NXU);
        KU("expert_feed_forward_length", FFX);
        KU("expert_shared_feed_forward_length", FFS);
    }
#undef KU
    snprintf(k, sizeof(k), "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_writer_set_f32(w, k, 1e-6f);
    snprintf(k, sizeof(k), "%s.rope.freq_base", arch);
    gguf_writer_set_f32(w, k, 10000.0f);
    n_tbufs = 0;
    const int64_t KD = NK * DS, VD = NV * DS, C = 2 * KD + VD;
    add_t("token_embd.weight", 2, E, VOCAB, 1, 1.0f, 0);
    add_t("output_norm.weight", 1, E, 1, 1, 0.1f, 1);
    if (moe) add_t("output.weight", 2, E, VOCAB, 1, 0.5f, 0);
    char n[64];
    for (int il = 0; il < NL; il++) {
#define T(suffix, nd, a, b, c, s, o) do { snprintf(n, sizeof(n), "blk.%d.%s", il, suffix); add_t(n, nd, a, b, c, s, o); } while (0)
        T("attn_norm.weight", 1, E, 1, 1, 0.1f, 1);
        T("post_attention_norm.weight", 1, E, 1, 1, 0.1f, 1);
        if ((il + 1) % INTERVAL) {
            T("attn_qkv.weight", 2, E, C, 1, 0.25f, 0);
            T("attn_gate.weight", 2, E, VD, 1, 0.125f, 0);
            T("ssm_beta.weight", 2, E, NV, 1, 0.125f, 0);
            T("ssm_alpha.weight", 2, E, NV, 1, 0.125f, 0);
            T("ssm_conv1d.weight", 2, DC, C, 1, 0.5f, 0);
            T("ssm_dt.bias", 1, NV, 1, 1, 0.5f, 0);
            T("ssm_a", 1, NV, 1, 1, 0.3f, -1.5f);
            T("ssm_norm.weight", 1, DS, 1, 1, 0.1f, 1);
            T("ssm_out.weight", 2, VD, E, 1, 0.125f, 0);
        } else {
            T("attn_q.weight", 2, E, 2 * NH * HD, 1, 0.125f, 0);
            T("attn_k.weight", 2, E, NKV * HD, 1, 0.125f, 0);
            T("attn_v.weight", 2, E, NKV * HD, 1, 0.125f, 0);
            T("attn_q_norm.weight", 1, HD, 1, 1, 0.1f, 1);
            T("attn_k_norm.weight", 1, HD, 1, 1, 0.1f, 1);
            T("attn_output.weight", 2, NH * HD, E, 1, 0.125f, 0);
        }
        if (!moe) {
            T("ffn_gate.weight", 2, E, FF, 1, 0.125f, 0);
            T("ffn_up.weight", 2, E, FF, 1, 0.125f, 0);
            T("ffn_down.weight", 2, FF, E, 1, 0.1f, 0);
        } else {
            T("ffn_gate_inp.weight", 2, E, NX, 1, 0.3f, 0);
            T("ffn_gate_exps.weight", 3, E, FFX, NX, 0.125f, 0);
            T("ffn_up_exps.weight", 3, E, FFX, NX, 0.125f, 0);
            T("ffn_down_exps.weight", 3, FFX, E, NX, 0.18f, 0);
            T("ffn_gate_inp_shexp.weight", 1, E, 1, 1, 0.125f, 0);
            T("ffn_gate_shexp.weight", 2, E, FFS, 1, 0.125f, 0);
            T("ffn_up_shexp.weight", 2, E, FFS, 1, 0.125f, 0);
            T("ffn_down_shexp.weight", 2, FFS, E, 1, 0.15f, 0);
        }
#undef T
    }
    for (int i = 0; i < n_tbufs; i++) {
        if (skip && !strcmp(skip, tbufs[i].name)) continue;
        /* ssm_a = -exp(A_log) < 0 */
        if (strstr(tbufs[i].name, "ssm_a") && !strstr(tbufs[i].name, "alpha"))
            for (int j = 0; j < NV; j++) tbufs[i].data[j] = -expf(tbufs[i].data[j] + 1.5f);
        VLLMC_ASSERT(gguf_writer_add_tensor(w, tbufs[i].name, GGML_TYPE_F32, (uint32_t)tbufs[i].n_dims, tbufs[i].ne,
                                            tbufs[i].data) == VLLMC_OK);
    }
    VLLMC_ASSERT(gguf_writer_write(w, path) == VLLMC_OK);
    gguf_writer_destroy(w);
    for (int i = 0; i < n_tbufs; i++) free(tbufs[i].data);
}

/* Runs `n_seqs` sequences (ids[s][0..len)) through one model: tokens are fed in steps of `step` per
 * sequence (0 = whole prompt at once), sequences interleaved in the same batch, sequence s in slot s and
 * KV blocks [s*16, s*16+16). logits[s] gets [len][VOCAB]. */
static vllmc_status run(struct model *m, struct bk_kv_cache *kv, int n_seqs, const int32_t ids[][64], int len,
                        int step, float *logits[]) {
    int32_t tables[2][16];
    for (int s = 0; s < n_seqs; s++)
        for (int b = 0; b < 16; b++) tables[s][b] = s * 16 + b;
    int32_t tok[128], pos[128], sidx[128], rows[128];
    float *out = malloc(sizeof(float) * 128 * VOCAB);
    if (!step) step = len;
    vllmc_status st = VLLMC_OK;
    for (int p0 = 0; p0 < len && !st; p0 += step) {
        const int c = VLLMC_MIN(step, len - p0);
        int n = 0;
        struct bk_seq seqs[2];
        /* interleave: alternate single rows of the sequences when there are two */
        for (int i = 0; i < c; i++)
            for (int s = 0; s < n_seqs; s++) {
                tok[n] = ids[s][p0 + i]; pos[n] = p0 + i; sidx[n] = s; rows[n] = n; n++;
            }
        for (int s = 0; s < n_seqs; s++)
            seqs[s] = (struct bk_seq){.block_table = tables[s], .n_blocks = CEIL_DIV(p0 + c, 16), .state_slot = s};
        struct bk_batch b = {.n_tokens = n, .token_ids = tok, .pos = pos, .seq_idx = sidx, .n_seqs = n_seqs, .seqs = seqs,
                             .n_logits = n, .logit_rows = rows};
        st = model_forward(m, &b, kv, out, NULL);
        for (int r = 0; r < n && !st; r++)
            memcpy(logits[sidx[r]] + (size_t)pos[r] * VOCAB, out + (size_t)r * VOCAB, sizeof(float) * VOCAB);
    }
    free(out);
    return st;
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        e = d > e || d != d ? (d != d ? INFINITY : d) : e;
        m = fmax(m, fabs(b[i]));
    }
    return e / m;
}

static void check_model(const char *path, bool moe) {
    const char *arch = moe ? "qwen35moe" : "qwen35";
    struct backend *fast = NULL, *ref = NULL;
    struct model *mf = NULL, *mr = NULL;
    VLLMC_ASSERT(backend_cpu_create(2, false, &fast) == VLLMC_OK && backend_cpu_create(1, true, &ref) == VLLMC_OK);
    vllmc_status st = model_load(path, fast, &mf);
    CHECK_MSG(st == VLLMC_OK, "%s: load: %s", arch, vllmc_last_error());
    if (st) return;
    VLLMC_ASSERT(model_load(path, ref, &mr) == VLLMC_OK);
    VLLMC_ASSERT(model_reserve(mf, 128, 128) == VLLMC_OK && model_reserve(mr, 128, 128) == VLLMC_OK);
    struct bk_kv_cache *kvf = NULL, *kvr = NULL;
    VLLMC_ASSERT(model_kv_create(mf, BK_KV_F32, 32, &kvf) == VLLMC_OK && model_kv_create(mr, BK_KV_F32, 32, &kvr) == VLLMC_OK);
    CHECK(kvf->rs && kvf->rs->n_layers == NL - NL / INTERVAL && kvf->rs->n_slots == 1);
    VLLMC_ASSERT(model_kv_set_state_slots(mf, kvf, 2) == VLLMC_OK);
    CHECK(kvf->rs->n_slots == 2);

    const int len = 45; /* > 32: the fast backend's whole-prompt run takes the chunked rule */
    int32_t ids[2][64];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 64; i++) ids[s][i] = (int32_t)(test_rand_u64() % VOCAB);
    const size_t nl = (size_t)len * VOCAB;
    float *whole = malloc(sizeof(float) * nl), *steps = malloc(sizeof(float) * nl), *pieces = malloc(sizeof(float) * nl);
    float *refl = malloc(sizeof(float) * nl), *two0 = malloc(sizeof(float) * nl), *two1 = malloc(sizeof(float) * nl);
    float *alone1 = malloc(sizeof(float) * nl), *again = malloc(sizeof(float) * nl);
    CHECK((st = run(mf, kvf, 1, ids, len, 0, &whole)) == VLLMC_OK);
    CHECK(run(mf, kvf, 1, ids, len, 1, &steps) == VLLMC_OK);
    CHECK(run(mf, kvf, 1, ids, len, 7, &pieces) == VLLMC_OK);
    CHECK(run(mr, kvr, 1, ids, len, 0, &refl) == VLLMC_OK);
    double e1 = rel_err(steps, whole, nl), e2 = rel_err(pieces, whole, nl), e3 = rel_err(refl, whole, nl);
    printf("%s: decode vs prefill %.2e, pieces of 7 vs prefill %.2e, reference vs fast %.2e\n", arch, e1, e2, e3);
    CHECK_MSG(e1 < 1e-4, "%s: token-by-token vs whole prompt %g", arch, e1);
    CHECK_MSG(e2 < 1e-4, "%s: pieces vs whole prompt %g", arch, e2);
    CHECK_MSG(e3 < 1e-4, "%s: reference vs fast %g", arch, e3);
    /* The fast backend on one thread gives the same bits as on two. */
    {
        struct backend *one = NULL;
        struct model *m1 = NULL;
        struct bk_kv_cache *kv1 = NULL;
        VLLMC_ASSERT(backend_cpu_create(1, false, &one) == VLLMC_OK && model_load(path, one, &m1) == VLLMC_OK);
        VLLMC_ASSERT(model_reserve(m1, 128, 128) == VLLMC_OK && model_kv_create(m1, BK_KV_F32, 32, &kv1) == VLLMC_OK);
        float *l1 = malloc(sizeof(float) * nl);
        CHECK(run(m1, kv1, 1, ids, len, 0, &l1) == VLLMC_OK);
        CHECK_MSG(memcmp(l1, whole, sizeof(float) * nl) == 0, "%s: 1 thread vs 2 threads differ", arch);
        free(l1);
        model_kv_destroy(m1, kv1);
        model_destroy(m1);
        one->ops->destroy(one);
    }
    /* Two sequences interleaved row by row (slots 0 and 1) vs each alone. */
    const int32_t (*ids1)[64] = (const int32_t(*)[64])ids[1];
    CHECK(run(mf, kvf, 1, ids1, len, 0, &alone1) == VLLMC_OK);
    float *two[2] = {two0, two1};
    CHECK(run(mf, kvf, 2, ids, len, 0, two) == VLLMC_OK);
    double e4 = fmax(rel_err(two0, whole, nl), rel_err(two1, alone1, nl));
    CHECK_MSG(e4 < 1e-4, "%s: interleaved batch vs alone %g", arch, e4);
    run(mf, kvf, 2, ids, len, 5, two);
    double e5 = fmax(rel_err(two0, whole, nl), rel_err(two1, alone1, nl));
    CHECK_MSG(e5 < 1e-4, "%s: interleaved pieces of 5 vs alone %g", arch, e5);
    /* Slot 0 now holds the state of a finished sequence; a run from position 0 must not see it. */
    CHECK(run(mf, kvf, 1, ids, len, 0, &again) == VLLMC_OK);
    CHECK_MSG(memcmp(again, whole, sizeof(float) * nl) == 0, "%s: rerun from position 0 differs", arch);
    /* The delta-rule state in bf16 (--mamba-ssm-cache-dtype bfloat16): half the bytes a slot. A run of a sequence's
     * tokens keeps its state in f32 and rounds it once at its end, so the whole prompt in one run gives the f32 state's
     * logits exactly, and token by token (a rounding after every token) gives logits near them but not equal (the bf16
     * path is taken); the reference backend token by token near the fast one; one thread the same bits as two. */
    {
        mf->ssm_bf16 = mr->ssm_bf16 = true;
        struct bk_kv_cache *kb = NULL, *kbr = NULL;
        VLLMC_ASSERT(model_kv_create(mf, BK_KV_F32, 32, &kb) == VLLMC_OK && model_kv_create(mr, BK_KV_F32, 32, &kbr) == VLLMC_OK);
        CHECK(kb->rs->ssm_bf16 && 2 * bk_rs_ssm_bytes(kb->rs) == bk_rs_ssm_bytes(kvf->rs));
        float *bw = malloc(sizeof(float) * nl), *bs = malloc(sizeof(float) * nl), *br = malloc(sizeof(float) * nl);
        CHECK(run(mf, kb, 1, ids, len, 0, &bw) == VLLMC_OK);
        CHECK(run(mf, kb, 1, ids, len, 1, &bs) == VLLMC_OK);
        CHECK(run(mr, kbr, 1, ids, len, 1, &br) == VLLMC_OK);
        const double b1 = rel_err(bw, whole, nl), b2 = rel_err(bs, whole, nl), b3 = rel_err(br, bs, nl);
        printf("%s: bf16 state: whole prompt vs f32 %.2e, token by token vs f32 %.2e, reference vs fast (token by token) %.2e\n",
               arch, b1, b2, b3);
        CHECK_MSG(b1 == 0, "%s: bf16 state, whole prompt (one run) vs f32 state %g", arch, b1);
        /* (the MoE model's top-k routing can flip on the rounding: a bound there would measure the router) */
        CHECK_MSG(b2 > 0 && (moe || b2 < 2e-2), "%s: bf16 state, token by token vs f32 state %g", arch, b2);
        CHECK_MSG(b3 < 1e-3, "%s: bf16 state, reference vs fast %g", arch, b3);
        struct backend *one = NULL;
        struct model *m1 = NULL;
        struct bk_kv_cache *kv1 = NULL;
        VLLMC_ASSERT(backend_cpu_create(1, false, &one) == VLLMC_OK && model_load(path, one, &m1) == VLLMC_OK);
        m1->ssm_bf16 = true;
        VLLMC_ASSERT(model_reserve(m1, 128, 128) == VLLMC_OK && model_kv_create(m1, BK_KV_F32, 32, &kv1) == VLLMC_OK);
        CHECK(run(m1, kv1, 1, ids, len, 1, &br) == VLLMC_OK);
        CHECK_MSG(memcmp(br, bs, sizeof(float) * nl) == 0, "%s: bf16 state, 1 thread vs 2 threads differ", arch);
        model_kv_destroy(m1, kv1);
        model_destroy(m1);
        one->ops->destroy(one);
        free(bw); free(bs); free(br);
        model_kv_destroy(mf, kb);
        model_kv_destroy(mr, kbr);
        mf->ssm_bf16 = mr->ssm_bf16 = false;
    }
    /* The model refuses a KV cache without state slots. */
    struct bk_rs_cache *keep = kvf->rs;
    kvf->rs = NULL;
    CHECK(run(mf, kvf, 1, ids, 4, 0, &again) == VLLMC_ERR_INVALID);
    kvf->rs = keep;
    free(whole); free(steps); free(pieces); free(refl); free(two0); free(two1); free(alone1); free(again);
    model_kv_destroy(mf, kvf);
    model_kv_destroy(mr, kvr);
    model_destroy(mf);
    model_destroy(mr);
    fast->ops->destroy(fast);
    ref->ops->destroy(ref);
}

static void check_bad(const char *path) {
    struct backend *be = NULL;
    VLLMC_ASSERT(backend_cpu_create(1, false, &be) == VLLMC_OK);
    struct model *m = NULL;
    write_model(path, false, "blk.0.ssm_a", false);
    CHECK(model_load(path, be, &m) == VLLMC_ERR_CORRUPT && m == NULL);
    CHECK(strstr(vllmc_last_error(), "ssm_a") != NULL);
    write_model(path, true, "blk.1.ffn_down_exps.weight", false);
    CHECK(model_load(path, be, &m) == VLLMC_ERR_CORRUPT && m == NULL);
    write_model(path, false, NULL, true);
    CHECK(model_load(path, be, &m) == VLLMC_ERR_CORRUPT && m == NULL);
    CHECK(strstr(vllmc_last_error(), "inner") != NULL);
    be->ops->destroy(be);
}

int main(void) {
    test_seed_auto("test_qwen35");
    char path[] = "/tmp/vllmc_test_qwen35_XXXXXX";
    int fd = mkstemp(path);
    VLLMC_ASSERT(fd >= 0);
    close(fd);
    write_model(path, false, NULL, false);
    check_model(path, false);
    write_model(path, true, NULL, false);
    check_model(path, true);
    check_bad(path);
    unlink(path);
    return test_finish("test_qwen35");
}
