/* The llama-quantize type-mix policy on hand-written tables: (arch, tensor, shape) -> expected type for
 * Q4_K_M, Q6_K and a few other file types, the row-length fallbacks, the qwen35 / qwen35moe layouts
 * (GGUF-QUANTS.md 6.4, ARCH-QWEN35.md 3.5), ordering, ftype parsing, and random shapes. */
#include <dirent.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "gguf/gguf.h"
#include "quant/qmix.h"
#include "quant/quant.h"
#include "test.h"

#define MAXT 2048
static struct qmix_tensor g_t[MAXT];
static char g_names[MAXT][64];
static size_t g_n;

static void reset(void) { g_n = 0; }

static void add(const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    VLLMC_ASSERT(g_n < MAXT);
    snprintf(g_names[g_n], sizeof(g_names[g_n]), "%s", name);
    struct qmix_tensor *t = &g_t[g_n++];
    memset(t, 0, sizeof(*t));
    t->name = g_names[g_n - 1];
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2; t->ne[3] = 1;
    t->type = GGML_TYPE_F32;
}

static void addf(const char *fmt, int i, int64_t ne0, int64_t ne1, int64_t ne2) {
    char name[64];
    snprintf(name, sizeof(name), fmt, i);
    add(name, ne0, ne1, ne2);
}

static int cmp_t(const void *a, const void *b) {
    return qmix_name_cmp(((const struct qmix_tensor *)a)->name, ((const struct qmix_tensor *)b)->name);
}

static vllmc_status assign(const char *arch, int n_layer, int n_expert, int n_head, int n_head_kv, int ftype) {
    qsort(g_t, g_n, sizeof(g_t[0]), cmp_t);
    struct qmix_model m = {arch, n_layer, n_expert, n_head, n_head_kv};
    struct qmix_params p = {.ftype = ftype, .output_type = -1, .token_embd_type = -1};
    return qmix_assign_types(&m, &p, g_t, g_n);
}

static int type_of(const char *name) {
    for (size_t i = 0; i < g_n; i++)
        if (!strcmp(g_t[i].name, name)) return (int)g_t[i].new_type;
    return -1;
}

static const char *tn(int t) {
    const struct quant_traits *tr = t >= 0 ? quant_traits((uint32_t)t) : NULL;
    return tr ? tr->name : "?";
}

#define EXPECT(name, want) do { int got_ = type_of(name); \
    CHECK_MSG(got_ == (int)(want), "%s: got %s, want %s", name, tn(got_), tn(want)); } while (0)

static void expectf(const char *fmt, int i, int want) {
    char name[64];
    snprintf(name, sizeof(name), fmt, i);
    EXPECT(name, want);
}

static bool umb(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* ---- llama-like dense model, every row a multiple of 256 ---- */
static void build_llama(int n_layer, int64_t n_embd, int64_t n_ff, int64_t n_kv_dim, bool tied) {
    reset();
    add("token_embd.weight", n_embd, 32000, 1);
    add("output_norm.weight", n_embd, 1, 1);
    if (!tied) add("output.weight", n_embd, 32000, 1);
    for (int i = 0; i < n_layer; i++) {
        addf("blk.%d.attn_norm.weight", i, n_embd, 1, 1);
        addf("blk.%d.attn_q.weight", i, n_embd, n_embd, 1);
        addf("blk.%d.attn_q.bias", i, n_embd, 1, 1);
        addf("blk.%d.attn_k.weight", i, n_embd, n_kv_dim, 1);
        addf("blk.%d.attn_v.weight", i, n_embd, n_kv_dim, 1);
        addf("blk.%d.attn_output.weight", i, n_embd, n_embd, 1);
        addf("blk.%d.ffn_norm.weight", i, n_embd, 1, 1);
        addf("blk.%d.ffn_gate.weight", i, n_embd, n_ff, 1);
        addf("blk.%d.ffn_up.weight", i, n_embd, n_ff, 1);
        addf("blk.%d.ffn_down.weight", i, n_ff, n_embd, 1);
    }
}

static void test_llama_q4_k_m(void) {
    build_llama(32, 4096, 11008, 1024, false);
    CHECK(assign("llama", 32, 0, 32, 8, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("token_embd.weight", GGML_TYPE_Q4_K);
    EXPECT("output.weight", GGML_TYPE_Q6_K);
    EXPECT("output_norm.weight", GGML_TYPE_F32);
    /* use_more_bits(i, 32): 0-3, 6, 9, ..., 27, 28-31 (written out, not computed). */
    static const int q6[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    for (int i = 0; i < 32; i++) {
        bool hi = false;
        for (size_t k = 0; k < ARRAY_LEN(q6); k++) hi |= q6[k] == i;
        CHECK(hi == umb(i, 32));
        int want = hi ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
        expectf("blk.%d.attn_v.weight", i, want);
        expectf("blk.%d.ffn_down.weight", i, want);
        expectf("blk.%d.attn_q.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.attn_k.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.attn_output.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_gate.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_up.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.attn_norm.weight", i, GGML_TYPE_F32);
        expectf("blk.%d.attn_q.bias", i, GGML_TYPE_F32);
    }
    for (size_t i = 0; i < g_n; i++) CHECK(!g_t[i].fallback);
}

static void test_llama_q6_k(void) {
    build_llama(32, 4096, 11008, 1024, false);
    CHECK(assign("llama", 32, 0, 32, 8, QMIX_FTYPE_Q6_K) == VLLMC_OK);
    EXPECT("token_embd.weight", GGML_TYPE_Q6_K);
    EXPECT("output.weight", GGML_TYPE_Q6_K);
    EXPECT("output_norm.weight", GGML_TYPE_F32);
    for (int i = 0; i < 32; i++) {
        expectf("blk.%d.attn_v.weight", i, GGML_TYPE_Q6_K);
        expectf("blk.%d.ffn_down.weight", i, GGML_TYPE_Q6_K);
        expectf("blk.%d.attn_q.weight", i, GGML_TYPE_Q6_K);
        expectf("blk.%d.ffn_up.weight", i, GGML_TYPE_Q6_K);
        expectf("blk.%d.ffn_norm.weight", i, GGML_TYPE_F32);
    }
}

static void test_other_ftypes(void) {
    /* Q8_0: output stays Q8_0. Q4_0: output Q6_K, everything else Q4_0 (no imatrix). */
    build_llama(8, 4096, 11008, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q8_0) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.3.attn_v.weight", GGML_TYPE_Q8_0);
    build_llama(8, 4096, 11008, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q4_0) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q6_K);
    EXPECT("token_embd.weight", GGML_TYPE_Q4_0);
    EXPECT("blk.0.ffn_down.weight", GGML_TYPE_Q4_0);
    /* Q4_K_S: Q5_K for the first 4 attn_v and for ffn_down in layers < n/8. */
    build_llama(16, 4096, 11008, 1024, false);
    CHECK(assign("llama", 16, 0, 32, 8, QMIX_FTYPE_Q4_K_S) == VLLMC_OK);
    for (int i = 0; i < 16; i++) {
        expectf("blk.%d.attn_v.weight", i, i < 4 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_down.weight", i, i < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K);
    }
    /* Q3_K_M: attn_v Q5_K for the first 2, then Q4_K; ffn_down Q5_K below n/16, else Q4_K;
     * attn_output Q4_K; the rest Q3_K. */
    build_llama(32, 4096, 11008, 1024, false);
    CHECK(assign("llama", 32, 0, 32, 8, QMIX_FTYPE_Q3_K_M) == VLLMC_OK);
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.1.attn_v.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.2.attn_v.weight", GGML_TYPE_Q4_K);
    EXPECT("blk.1.ffn_down.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.2.ffn_down.weight", GGML_TYPE_Q4_K);
    EXPECT("blk.5.attn_output.weight", GGML_TYPE_Q4_K);
    EXPECT("blk.5.attn_q.weight", GGML_TYPE_Q3_K);
    EXPECT("output.weight", GGML_TYPE_Q6_K);
    /* Q2_K: attn_v Q4_K when n_gqa >= 4 else Q3_K; ffn_down and attn_output Q3_K. */
    build_llama(8, 4096, 11008, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q2_K) == VLLMC_OK);
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_Q4_K);
    EXPECT("blk.0.ffn_down.weight", GGML_TYPE_Q3_K);
    EXPECT("blk.0.attn_output.weight", GGML_TYPE_Q3_K);
    EXPECT("blk.0.attn_q.weight", GGML_TYPE_Q2_K);
    build_llama(8, 4096, 11008, 4096, false);
    CHECK(assign("llama", 8, 0, 32, 32, QMIX_FTYPE_Q2_K) == VLLMC_OK);
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_Q3_K);
    /* F16 / BF16: every quantizable tensor converted, no rules, 1-D kept. */
    build_llama(4, 4096, 11008, 1024, false);
    CHECK(assign("llama", 4, 0, 32, 8, QMIX_FTYPE_BF16) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_BF16);
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_BF16);
    EXPECT("blk.0.attn_norm.weight", GGML_TYPE_F32);
    /* 70B llama (80 layers, GQA): attn_v Q4_K -> Q5_K under Q4_K_M. */
    build_llama(80, 8192, 28672, 1024, false);
    CHECK(assign("llama", 80, 0, 64, 8, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("blk.20.attn_v.weight", umb(20, 80) ? GGML_TYPE_Q6_K : GGML_TYPE_Q5_K);
    EXPECT("blk.21.attn_v.weight", umb(21, 80) ? GGML_TYPE_Q6_K : GGML_TYPE_Q5_K);
    EXPECT("blk.20.attn_q.weight", GGML_TYPE_Q4_K);
    /* ... not without GQA (65B), but qwen2 with 80 layers is 70B either way. */
    build_llama(80, 8192, 28672, 8192, false);
    CHECK(assign("llama", 80, 0, 64, 64, QMIX_FTYPE_Q4_K_S) == VLLMC_OK);
    EXPECT("blk.20.attn_v.weight", GGML_TYPE_Q4_K);
    build_llama(80, 8192, 28672, 8192, false);
    CHECK(assign("qwen2", 80, 0, 64, 64, QMIX_FTYPE_Q4_K_S) == VLLMC_OK);
    EXPECT("blk.20.attn_v.weight", GGML_TYPE_Q5_K);
}

/* Tied embeddings: token_embd takes the output rule. */
static void test_tied(void) {
    build_llama(8, 4096, 11008, 1024, true);
    CHECK(assign("qwen2", 8, 0, 32, 8, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("token_embd.weight", GGML_TYPE_Q6_K);
    build_llama(8, 4096, 11008, 1024, true);
    CHECK(assign("qwen2", 8, 0, 32, 8, QMIX_FTYPE_Q8_0) == VLLMC_OK);
    EXPECT("token_embd.weight", GGML_TYPE_Q8_0);
    build_llama(8, 4096, 11008, 1024, true);
    CHECK(assign("qwen2", 8, 0, 32, 8, QMIX_FTYPE_Q4_0) == VLLMC_OK);
    EXPECT("token_embd.weight", GGML_TYPE_Q6_K);
}

/* Row lengths that are not a multiple of 256 (fallback table) or of 32 (F16). */
static void test_fallbacks(void) {
    /* n_embd 2880: 2880 % 256 = 64, 2880 % 32 = 0. n_ff 100: not a multiple of 32. */
    build_llama(8, 2880, 100, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q8_0);         /* output rule: ne0 % 256 -> Q8_0 */
    EXPECT("token_embd.weight", GGML_TYPE_Q5_0);     /* Q4_K -> Q5_0 */
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_Q8_0);   /* umb: Q6_K -> Q8_0 */
    EXPECT("blk.1.attn_v.weight", GGML_TYPE_Q5_0);   /* Q4_K -> Q5_0 */
    EXPECT("blk.1.attn_q.weight", GGML_TYPE_Q5_0);
    EXPECT("blk.0.ffn_down.weight", GGML_TYPE_F16);  /* Q6_K -> Q8_0 does not fit 100 either */
    EXPECT("blk.1.ffn_down.weight", GGML_TYPE_F16);  /* Q4_K -> Q5_0 neither */
    EXPECT("blk.1.ffn_up.weight", GGML_TYPE_Q5_0);   /* its row is n_embd */
    for (size_t i = 0; i < g_n; i++) {
        /* The output rule picks Q8_0 itself; the others went through the fallback table. */
        if (!strcmp(g_t[i].name, "output.weight")) CHECK(!g_t[i].fallback);
        if (!strcmp(g_t[i].name, "token_embd.weight") || !strcmp(g_t[i].name, "blk.0.ffn_down.weight"))
            CHECK(g_t[i].fallback);
    }

    build_llama(8, 2880, 100, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q6_K) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q8_0);
    EXPECT("token_embd.weight", GGML_TYPE_Q8_0);     /* Q6_K -> Q8_0 */
    EXPECT("blk.3.attn_q.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.3.ffn_down.weight", GGML_TYPE_F16);

    build_llama(8, 2880, 100, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q5_K_M) == VLLMC_OK);
    EXPECT("blk.1.attn_q.weight", GGML_TYPE_Q5_1);   /* Q5_K -> Q5_1 */
    build_llama(8, 2880, 100, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q3_K_M) == VLLMC_OK);
    EXPECT("blk.5.attn_q.weight", GGML_TYPE_Q4_0);   /* Q3_K -> Q4_0 */
    build_llama(8, 2880, 100, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q2_K) == VLLMC_OK);
    EXPECT("blk.5.attn_q.weight", GGML_TYPE_Q4_0);   /* Q2_K -> Q4_0 */
    build_llama(8, 2880, 100, 1024, false);
    CHECK(assign("llama", 8, 0, 32, 8, QMIX_FTYPE_Q4_0) == VLLMC_OK);
    EXPECT("blk.5.attn_q.weight", GGML_TYPE_Q4_0);
    EXPECT("blk.5.ffn_down.weight", GGML_TYPE_F16);  /* a 32-block type that does not fit: F16 */
    EXPECT("output.weight", GGML_TYPE_Q8_0);
}

/* Qwen3.6-27B layout (64 layers, attention every 4th, untied): GGUF-QUANTS.md 6.4's verified table. */
static void build_qwen35(int n_layer, bool tied, bool moe, int n_expert) {
    reset();
    const int64_t E = 5120;
    add("token_embd.weight", E, 248320, 1);
    add("output_norm.weight", E, 1, 1);
    if (!tied) add("output.weight", E, 248320, 1);
    for (int i = 0; i < n_layer; i++) {
        addf("blk.%d.attn_norm.weight", i, E, 1, 1);
        addf("blk.%d.post_attention_norm.weight", i, E, 1, 1);
        if ((i + 1) % 4) {
            addf("blk.%d.attn_qkv.weight", i, E, 10240, 1);
            addf("blk.%d.attn_gate.weight", i, E, 6144, 1);
            addf("blk.%d.ssm_beta.weight", i, E, 48, 1);
            addf("blk.%d.ssm_alpha.weight", i, E, 48, 1);
            addf("blk.%d.ssm_conv1d.weight", i, 4, 10240, 1);
            addf("blk.%d.ssm_dt.bias", i, 48, 1, 1);
            addf("blk.%d.ssm_a", i, 48, 1, 1);
            addf("blk.%d.ssm_norm.weight", i, 128, 1, 1);
            addf("blk.%d.ssm_out.weight", i, 6144, E, 1);
        } else {
            addf("blk.%d.attn_q.weight", i, E, 12288, 1);
            addf("blk.%d.attn_k.weight", i, E, 1024, 1);
            addf("blk.%d.attn_v.weight", i, E, 1024, 1);
            addf("blk.%d.attn_q_norm.weight", i, 256, 1, 1);
            addf("blk.%d.attn_k_norm.weight", i, 256, 1, 1);
            addf("blk.%d.attn_output.weight", i, 6144, E, 1);
        }
        if (!moe) {
            addf("blk.%d.ffn_gate.weight", i, E, 17408, 1);
            addf("blk.%d.ffn_up.weight", i, E, 17408, 1);
            addf("blk.%d.ffn_down.weight", i, 17408, E, 1);
        } else {
            addf("blk.%d.ffn_gate_inp.weight", i, E, n_expert, 1);
            addf("blk.%d.ffn_gate_exps.weight", i, E, 512, n_expert);
            addf("blk.%d.ffn_up_exps.weight", i, E, 512, n_expert);
            addf("blk.%d.ffn_down_exps.weight", i, 512, E, n_expert);
            addf("blk.%d.ffn_gate_inp_shexp.weight", i, E, 1, 1);
            addf("blk.%d.ffn_gate_shexp.weight", i, E, 512, 1);
            addf("blk.%d.ffn_up_shexp.weight", i, E, 512, 1);
            addf("blk.%d.ffn_down_shexp.weight", i, 512, E, 1);
        }
    }
}

static bool in_list(int i, const int *l, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (l[k] == i) return true;
    return false;
}

static void test_qwen35_27b(void) {
    /* Q6_K layers for n = 64, written out: 0-7, 10, 13, ..., 55, 56-63. */
    int q6[64], nq = 0;
    for (int i = 0; i <= 7; i++) q6[nq++] = i;
    for (int i = 10; i <= 55; i += 3) q6[nq++] = i;
    for (int i = 56; i <= 63; i++) q6[nq++] = i;
    build_qwen35(64, false, false, 0);
    CHECK(assign("qwen35", 64, 0, 24, 4, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q6_K);
    EXPECT("token_embd.weight", GGML_TYPE_Q4_K);
    EXPECT("output_norm.weight", GGML_TYPE_F32);
    for (int i = 0; i < 64; i++) {
        int want = in_list(i, q6, (size_t)nq) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
        expectf((i + 1) % 4 ? "blk.%d.attn_qkv.weight" : "blk.%d.attn_v.weight", i, want);
        expectf("blk.%d.ffn_down.weight", i, want);
        expectf("blk.%d.ffn_gate.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_up.weight", i, GGML_TYPE_Q4_K);
        if ((i + 1) % 4) {
            expectf("blk.%d.attn_gate.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.ssm_out.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.ssm_alpha.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.ssm_beta.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.ssm_conv1d.weight", i, GGML_TYPE_F32);
            expectf("blk.%d.ssm_a", i, GGML_TYPE_F32);
            expectf("blk.%d.ssm_dt.bias", i, GGML_TYPE_F32);
            expectf("blk.%d.ssm_norm.weight", i, GGML_TYPE_F32);
        } else {
            expectf("blk.%d.attn_q.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.attn_k.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.attn_output.weight", i, GGML_TYPE_Q4_K);
            expectf("blk.%d.attn_q_norm.weight", i, GGML_TYPE_F32);
        }
    }
    /* Q4_K_S: Q5_K for the first 4 attn_v-like tensors (blk.0-2.attn_qkv, blk.3.attn_v), ffn_down < 8. */
    build_qwen35(64, false, false, 0);
    CHECK(assign("qwen35", 64, 0, 24, 4, QMIX_FTYPE_Q4_K_S) == VLLMC_OK);
    EXPECT("blk.0.attn_qkv.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.2.attn_qkv.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.3.attn_v.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.4.attn_qkv.weight", GGML_TYPE_Q4_K);
    EXPECT("blk.7.ffn_down.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.8.ffn_down.weight", GGML_TYPE_Q4_K);
    EXPECT("output.weight", GGML_TYPE_Q6_K);
    /* Q6_K: all Q6_K; F32 ones kept. */
    build_qwen35(64, false, false, 0);
    CHECK(assign("qwen35", 64, 0, 24, 4, QMIX_FTYPE_Q6_K) == VLLMC_OK);
    EXPECT("blk.9.attn_qkv.weight", GGML_TYPE_Q6_K);
    EXPECT("blk.9.ssm_alpha.weight", GGML_TYPE_Q6_K);
    EXPECT("blk.9.ssm_conv1d.weight", GGML_TYPE_F32);
    EXPECT("token_embd.weight", GGML_TYPE_Q6_K);
    /* Tied (Qwen3.5-4B style, 32 layers): token_embd becomes Q6_K under Q4_K_M. */
    build_qwen35(32, true, false, 0);
    CHECK(assign("qwen35", 32, 0, 16, 4, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("token_embd.weight", GGML_TYPE_Q6_K);
    static const int q6_32[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    for (int i = 0; i < 32; i++)
        expectf("blk.%d.ffn_down.weight", i, in_list(i, q6_32, ARRAY_LEN(q6_32)) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K);
}

static void test_qwen35moe(void) {
    /* 40 layers, 256 experts: ffn_down_exps and ffn_down_shexp follow use_more_bits on the parsed layer:
     * 0-4, 7, 10, ..., 34 (step 3), 35-39. Router F32, 3-D experts quantized. */
    int q6[40], nq = 0;
    for (int i = 0; i <= 4; i++) q6[nq++] = i;
    for (int i = 7; i <= 34; i += 3) q6[nq++] = i;
    for (int i = 35; i <= 39; i++) q6[nq++] = i;
    build_qwen35(40, false, true, 256);
    CHECK(assign("qwen35moe", 40, 256, 16, 2, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    for (int i = 0; i < 40; i++) {
        int want = in_list(i, q6, (size_t)nq) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
        expectf("blk.%d.ffn_down_exps.weight", i, want);
        expectf("blk.%d.ffn_down_shexp.weight", i, want);
        expectf("blk.%d.ffn_gate_exps.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_up_exps.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_up_shexp.weight", i, GGML_TYPE_Q4_K);
        expectf("blk.%d.ffn_gate_inp.weight", i, GGML_TYPE_F32);
        expectf("blk.%d.ffn_gate_inp_shexp.weight", i, GGML_TYPE_F32);
        if ((i + 1) % 4 == 0) expectf("blk.%d.attn_k.weight", i, GGML_TYPE_Q4_K);
    }
    /* 8 experts: the Mixtral rules (attn_v / attn_qkv / attn_k -> Q8_0, attn_output -> Q5_K). */
    build_qwen35(8, false, true, 8);
    CHECK(assign("qwen35moe", 8, 8, 16, 2, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("blk.3.attn_v.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.1.attn_qkv.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.3.attn_k.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.3.attn_output.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.3.attn_q.weight", GGML_TYPE_Q4_K);
    build_qwen35(8, false, true, 8);
    CHECK(assign("qwen35moe", 8, 8, 16, 2, QMIX_FTYPE_Q6_K) == VLLMC_OK);
    EXPECT("blk.3.attn_v.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.3.attn_output.weight", GGML_TYPE_Q6_K);
    /* Expert rows of 160 (fallbacks) and a shared expert of 200 (F16). */
    reset();
    add("output.weight", 256, 1000, 1);
    add("token_embd.weight", 256, 1000, 1);
    add("blk.0.ffn_down_exps.weight", 160, 256, 4);
    add("blk.1.ffn_down_exps.weight", 160, 256, 4);
    add("blk.0.ffn_down_shexp.weight", 200, 256, 1);
    add("blk.0.ffn_gate_exps.weight", 256, 160, 4);
    CHECK(assign("qwen35moe", 16, 4, 4, 1, QMIX_FTYPE_Q4_K_M) == VLLMC_OK);
    EXPECT("blk.0.ffn_down_exps.weight", GGML_TYPE_Q8_0); /* umb(0, 16): Q6_K -> Q8_0 */
    EXPECT("blk.1.ffn_down_exps.weight", GGML_TYPE_Q8_0); /* umb(1, 16) */
    EXPECT("blk.0.ffn_down_shexp.weight", GGML_TYPE_F16);
    EXPECT("blk.0.ffn_gate_exps.weight", GGML_TYPE_Q4_K);
    /* An MoE ffn tensor outside blk.N, or with N >= n_layer, is an error. */
    reset();
    add("ffn_down_exps.weight", 256, 256, 4);
    CHECK(assign("qwen35moe", 4, 4, 4, 1, QMIX_FTYPE_Q4_K_M) == VLLMC_ERR_INVALID);
    reset();
    add("blk.9.ffn_up_exps.weight", 256, 256, 4);
    CHECK(assign("qwen35moe", 4, 4, 4, 1, QMIX_FTYPE_Q4_K_M) == VLLMC_ERR_INVALID);
    CHECK(strstr(vllmc_last_error(), "blk.9.ffn_up_exps.weight") != NULL);
    /* ... but not for a type that runs no rules. */
    reset();
    add("blk.9.ffn_up_exps.weight", 256, 256, 4);
    CHECK(assign("qwen35moe", 4, 4, 4, 1, QMIX_FTYPE_F16) == VLLMC_OK);
}

/* Counters run in processing order, not file order: blk.10 comes after blk.9. */
static void test_order(void) {
    CHECK(qmix_name_cmp("output.weight", "blk.0.attn_v.weight") < 0);
    CHECK(qmix_name_cmp("blk.9.attn_v.weight", "blk.10.attn_k.weight") < 0);
    CHECK(qmix_name_cmp("blk.2.ffn_up.weight", "blk.2.attn_q.weight") > 0);
    CHECK(qmix_name_cmp("token_embd.weight", "output_norm.weight") > 0);
    CHECK(qmix_name_cmp("blk.3.x", "blk.3.x") == 0);
    /* Fed in reverse file order; assign() sorts, so layer 0 still gets the first counter value. */
    reset();
    for (int i = 11; i >= 0; i--) addf("blk.%d.attn_v.weight", i, 4096, 1024, 1);
    add("output.weight", 4096, 100, 1);
    CHECK(assign("llama", 12, 0, 32, 8, QMIX_FTYPE_Q4_K_S) == VLLMC_OK);
    CHECK(!strcmp(g_t[0].name, "output.weight") && !strcmp(g_t[11].name, "blk.10.attn_v.weight"));
    for (int i = 0; i < 12; i++) expectf("blk.%d.attn_v.weight", i, i < 4 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K);
}

static void test_never_quantized(void) {
    struct qmix_params p = {.ftype = QMIX_FTYPE_Q4_K_M, .output_type = -1, .token_embd_type = -1};
    const int64_t m2[4] = {4096, 4096, 1, 1}, v1[4] = {4096, 1, 1, 1}, col[4] = {4096, 1, 1, 1};
    CHECK(qmix_allows_quantization(&p, "blk.0.attn_q.weight", m2));
    CHECK(!qmix_allows_quantization(&p, "blk.0.attn_q.bias", m2));
    CHECK(!qmix_allows_quantization(&p, "blk.0.attn_norm.weight", v1));
    CHECK(!qmix_allows_quantization(&p, "blk.0.attn_q_norm.weight", m2));
    CHECK(!qmix_allows_quantization(&p, "blk.0.ffn_gate_inp.weight", m2));
    CHECK(!qmix_allows_quantization(&p, "blk.0.ffn_gate_inp_shexp.weight", col)); /* {n, 1} counts as 1-D */
    CHECK(!qmix_allows_quantization(&p, "blk.0.ssm_conv1d.weight", m2));
    CHECK(!qmix_allows_quantization(&p, "blk.0.ssm_a", m2));
    CHECK(!qmix_allows_quantization(&p, "position_embd.weight", m2));
    p.leave_output = true;
    CHECK(!qmix_allows_quantization(&p, "output.weight", m2));
    CHECK(qmix_n_dims((int64_t[4]){7, 1, 1, 1}) == 1 && qmix_n_dims((int64_t[4]){7, 1, 3, 1}) == 3);
}

static void test_params(void) {
    /* --pure: default type everywhere (fallbacks still apply); explicit output / embedding types. */
    build_llama(8, 4096, 11008, 1024, false);
    qsort(g_t, g_n, sizeof(g_t[0]), cmp_t);
    struct qmix_model m = {"llama", 8, 0, 32, 8};
    struct qmix_params p = {.ftype = QMIX_FTYPE_Q4_K_M, .output_type = -1, .token_embd_type = -1, .pure = true};
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q4_K);
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_Q4_K);
    p.pure = false;
    p.output_type = GGML_TYPE_Q8_0;
    p.token_embd_type = GGML_TYPE_F16;
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_OK);
    EXPECT("output.weight", GGML_TYPE_Q8_0);
    EXPECT("token_embd.weight", GGML_TYPE_F16);
    /* --tensor-type: first match wins, the rules (and their counters) are skipped for it, the fallback
     * still applies; a bad pattern or type is refused. */
    p.output_type = p.token_embd_type = -1;
    const struct qmix_override ov[] = {{"blk\\.0\\.attn_v", GGML_TYPE_Q8_0}, {"ffn_up|ffn_gate", GGML_TYPE_Q5_K},
                                       {"ffn", GGML_TYPE_Q8_0}};
    p.overrides = ov;
    p.n_overrides = ARRAY_LEN(ov);
    p.ftype = QMIX_FTYPE_Q4_K_S;
    build_llama(8, 4096, 11008, 1024, false);
    qsort(g_t, g_n, sizeof(g_t[0]), cmp_t);
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_OK);
    EXPECT("blk.0.attn_v.weight", GGML_TYPE_Q8_0);
    for (int i = 1; i < 8; i++) expectf("blk.%d.attn_v.weight", i, i <= 4 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K);
    EXPECT("blk.3.ffn_up.weight", GGML_TYPE_Q5_K);
    EXPECT("blk.3.ffn_down.weight", GGML_TYPE_Q8_0);
    EXPECT("blk.3.attn_q.weight", GGML_TYPE_Q4_K);
    build_llama(2, 288, 768, 96, false);
    qsort(g_t, g_n, sizeof(g_t[0]), cmp_t);
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_OK);
    EXPECT("blk.1.ffn_up.weight", GGML_TYPE_Q5_1); /* Q5_K on rows of 288 falls back */
    const struct qmix_override bad_re[] = {{"(unclosed", GGML_TYPE_Q8_0}}, bad_ty[] = {{"ffn", GGML_TYPE_IQ2_XXS}};
    p.overrides = bad_re;
    p.n_overrides = 1;
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_ERR_INVALID);
    p.overrides = bad_ty;
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_ERR_UNSUPPORTED);
    p.overrides = NULL;
    p.n_overrides = 0;
    p.ftype = QMIX_FTYPE_Q4_K_M;
    /* An explicit type whose block does not divide the row is refused. */
    build_llama(2, 288, 768, 96, false);
    qsort(g_t, g_n, sizeof(g_t[0]), cmp_t);
    p.output_type = GGML_TYPE_Q6_K;
    CHECK(qmix_assign_types(&m, &p, g_t, g_n) == VLLMC_ERR_INVALID);
    CHECK(strstr(vllmc_last_error(), "output.weight") != NULL);
}

static void test_parse(void) {
    int f = -1;
    uint32_t t = 0;
    CHECK(qmix_parse_ftype("Q4_K_M", &f) == VLLMC_OK && f == 15);
    CHECK(qmix_parse_ftype("q4_k_m", &f) == VLLMC_OK && f == 15);
    CHECK(qmix_parse_ftype("Q4_K", &f) == VLLMC_OK && f == 15);
    CHECK(qmix_parse_ftype("Q5_K", &f) == VLLMC_OK && f == 17);
    CHECK(qmix_parse_ftype("18", &f) == VLLMC_OK && f == 18);
    CHECK(qmix_parse_ftype("bf16", &f) == VLLMC_OK && f == 32);
    CHECK(qmix_parse_ftype("Q3_K_M", &f) == VLLMC_OK && f == 12);
    CHECK(qmix_parse_ftype("Q2_K", &f) == VLLMC_OK && f == 10);
    CHECK(qmix_parse_ftype("Q9_Z", &f) == VLLMC_ERR_INVALID);
    CHECK(qmix_parse_ftype("", &f) == VLLMC_ERR_INVALID);
    CHECK(qmix_parse_ftype("4", &f) == VLLMC_ERR_INVALID);  /* removed ftype */
    CHECK(qmix_parse_ftype("19", &f) == VLLMC_ERR_INVALID); /* IQ2_XXS: not produced here */
    CHECK(qmix_parse_ftype("Q2_K_S", &f) == VLLMC_ERR_UNSUPPORTED);
    CHECK(qmix_parse_ftype("99999999999", &f) == VLLMC_ERR_INVALID);
    CHECK(qmix_parse_ggml_type("q6_k", &t) == VLLMC_OK && t == GGML_TYPE_Q6_K);
    CHECK(qmix_parse_ggml_type("F16", &t) == VLLMC_OK && t == GGML_TYPE_F16);
    CHECK(qmix_parse_ggml_type("8", &t) == VLLMC_OK && t == GGML_TYPE_Q8_0);
    CHECK(qmix_parse_ggml_type("iq2_xxs", &t) == VLLMC_ERR_UNSUPPORTED);
    CHECK(qmix_parse_ggml_type("q9", &t) == VLLMC_ERR_INVALID);
    CHECK(!strcmp(qmix_ftype_name(15), "Q4_K_M") && qmix_ftype_name(4) == NULL);
    CHECK(qmix_ftype_default_type(QMIX_FTYPE_Q5_K_S) == GGML_TYPE_Q5_K);
}

/* Fresh random models: whatever the shapes, the chosen block divides the row, a K-quant row that
 * fits never falls back, 1-D tensors never change, and the pattern is use_more_bits of the layer. */
static void test_random(void) {
    static const int ftypes[] = {QMIX_FTYPE_Q4_K_M, QMIX_FTYPE_Q6_K, QMIX_FTYPE_Q5_K_M, QMIX_FTYPE_Q2_K,
                                 QMIX_FTYPE_Q3_K_M, QMIX_FTYPE_Q4_0, QMIX_FTYPE_Q8_0, QMIX_FTYPE_Q4_K_S};
    for (int it = 0; it < 200; it++) {
        int n_layer = 1 + (int)(test_rand_u64() % 100);
        int64_t n_embd = 32 * (1 + (int64_t)(test_rand_u64() % 40)) + (test_rand_u64() % 4 == 0 ? 8 : 0);
        int64_t n_ff = 32 * (1 + (int64_t)(test_rand_u64() % 100));
        build_llama(n_layer, n_embd, n_ff, 64, test_rand_u64() & 1);
        int ftype = ftypes[test_rand_u64() % ARRAY_LEN(ftypes)];
        CHECK(assign("llama", n_layer, 0, 8, 2, ftype) == VLLMC_OK);
        for (size_t i = 0; i < g_n; i++) {
            const struct qmix_tensor *x = &g_t[i];
            CHECK(x->ne[0] % quant_traits(x->new_type)->block_size == 0);
            if (x->ne[1] == 1) CHECK(x->new_type == GGML_TYPE_F32);
            if (x->ne[0] % 256 == 0) CHECK(!x->fallback);
        }
        if (ftype == QMIX_FTYPE_Q4_K_M && n_ff % 256 == 0 && n_embd % 256 == 0) {
            int il = (int)(test_rand_u64() % (uint64_t)n_layer);
            expectf("blk.%d.ffn_down.weight", il, umb(il, n_layer) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K);
            expectf("blk.%d.attn_v.weight", il, umb(il, n_layer) ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K);
        }
    }
}


/* ---- the whole-file driver on a small model written here with fresh random weights ---- */

static char g_dir[64];

/* g_dir/name in one of 64 rotating buffers: enough that every path the test keeps stays valid. */
static const char *path_in(const char *name) {
    static char buf[64][128];
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", g_dir, name);
    return buf[k];
}

static int count_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

struct drv_tensor { const char *name; int64_t ne0, ne1; };
static const struct drv_tensor g_drv[] = {
    /* in file order (not llama.cpp's): layers before the globals, blk.1 before blk.0 */
    {"blk.1.attn_v.weight", 256, 64}, {"blk.1.ffn_down.weight", 512, 256}, {"blk.1.attn_norm.weight", 256, 1},
    {"blk.0.attn_v.weight", 256, 64}, {"blk.0.ffn_down.weight", 512, 256}, {"blk.0.attn_norm.weight", 256, 1},
    {"blk.0.ffn_up.weight", 256, 512}, {"token_embd.weight", 256, 100}, {"output_norm.weight", 256, 1},
    {"blk.0.ffn_gate.weight", 96, 40},
};
static float *g_drv_data[ARRAY_LEN(g_drv)];

static void write_model(const char *path, int nan_tensor) {
    struct gguf_writer *w = gguf_writer_create();
    CHECK(gguf_writer_set_str(w, "general.architecture", "llama") == VLLMC_OK);
    CHECK(gguf_writer_set_u32(w, "general.file_type", 0) == VLLMC_OK);
    CHECK(gguf_writer_set_u32(w, "llama.block_count", 2) == VLLMC_OK);
    CHECK(gguf_writer_set_u32(w, "llama.attention.head_count", 4) == VLLMC_OK);
    CHECK(gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1) == VLLMC_OK);
    CHECK(gguf_writer_set_str(w, "general.name", "driver test") == VLLMC_OK);
    for (size_t i = 0; i < ARRAY_LEN(g_drv); i++) {
        int64_t ne[2] = {g_drv[i].ne0, g_drv[i].ne1};
        if (!g_drv_data[i]) {
            g_drv_data[i] = malloc((size_t)(ne[0] * ne[1]) * sizeof(float));
            for (int64_t k = 0; k < ne[0] * ne[1]; k++) g_drv_data[i][k] = 0.05f * test_rand_normal();
        }
        CHECK(gguf_writer_add_tensor(w, g_drv[i].name, GGML_TYPE_F32, ne[1] > 1 ? 2 : 1, ne, g_drv_data[i]) == VLLMC_OK);
    }
    float saved = nan_tensor >= 0 ? g_drv_data[nan_tensor][7] : 0.0f;
    if (nan_tensor >= 0) g_drv_data[nan_tensor][7] = NAN;
    CHECK(gguf_writer_write(w, path) == VLLMC_OK);
    if (nan_tensor >= 0) g_drv_data[nan_tensor][7] = saved;
    gguf_writer_destroy(w);
}

static double rel_rms(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += (a[i] - b[i]) * (double)(a[i] - b[i]); den += (double)a[i] * a[i]; }
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_driver(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_qmix_XXXXXX");
    if (!mkdtemp(g_dir)) { CHECK(!"mkdtemp"); return; }
    const char *in = path_in("in.gguf"), *out = path_in("out.gguf");
    write_model(in, -1);
    struct quantize_opts o = {.params = {.ftype = QMIX_FTYPE_Q4_K_M, .output_type = -1, .token_embd_type = -1},
                              .n_threads = 2};
    struct quantize_stats stats;
    CHECK(quantize_model(in, out, &o, &stats) == VLLMC_OK);
    CHECK(stats.n_tensors == ARRAY_LEN(g_drv) && stats.n_quantized == 7 && stats.n_fallback == 1);
    struct gguf_file *f = NULL;
    CHECK(gguf_file_open(out, &f) == VLLMC_OK);
    if (f) {
        const struct gguf_ctx *c = f->ctx;
        /* Metadata copied in order, file_type and quantization_version re-added last. */
        CHECK(c->n_kv == 7);
        CHECK(gguf_str_eq(c->kv[0].key, "general.architecture"));
        CHECK(gguf_str_eq(c->kv[4].key, "general.name"));
        CHECK(gguf_str_eq(c->kv[5].key, "general.quantization_version"));
        CHECK(gguf_str_eq(c->kv[6].key, "general.file_type"));
        uint32_t ft = 0;
        CHECK(gguf_get_u32(c, "general.file_type", &ft) == VLLMC_OK && ft == 15);
        /* llama.cpp's order: globals by name, then layer 0, then layer 1. */
        static const char *order[] = {"output_norm.weight", "token_embd.weight", "blk.0.attn_norm.weight",
                                      "blk.0.attn_v.weight", "blk.0.ffn_down.weight", "blk.0.ffn_gate.weight",
                                      "blk.0.ffn_up.weight", "blk.1.attn_norm.weight", "blk.1.attn_v.weight",
                                      "blk.1.ffn_down.weight"};
        /* Tied (no output.weight): token_embd Q6_K. Two layers: use_more_bits(1, 2) holds (1 >= 7*2/8),
         * use_more_bits(0, 2) does not, so layer 0's attn_v / ffn_down are Q4_K and layer 1's Q6_K.
         * ffn_gate rows of 96: Q4_K falls back to Q5_0. */
        static const int types[] = {GGML_TYPE_F32, GGML_TYPE_Q6_K, GGML_TYPE_F32, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K,
                                    GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_F32, GGML_TYPE_Q6_K, GGML_TYPE_Q6_K};
        CHECK(!umb(0, 2) && umb(1, 2));
        CHECK(c->n_tensors == ARRAY_LEN(order));
        for (size_t i = 0; i < ARRAY_LEN(order) && i < c->n_tensors; i++) {
            const struct gguf_tensor *t = &c->tensors[i];
            CHECK_MSG(gguf_str_eq(t->name, order[i]), "tensor %zu is not %s", i, order[i]);
            CHECK_MSG((int)t->type == types[i], "%s: %s", order[i], tn((int)t->type));
            size_t k = 0;
            while (k < ARRAY_LEN(g_drv) && !gguf_str_eq(t->name, g_drv[k].name)) k++;
            if (k == ARRAY_LEN(g_drv)) continue;
            const int64_t n_el = g_drv[k].ne0 * g_drv[k].ne1;
            CHECK(t->n_dims == (g_drv[k].ne1 > 1 ? 2u : 1u));
            float *deq = malloc((size_t)n_el * sizeof(float));
            const uint64_t rs = quant_row_size(t->type, g_drv[k].ne0);
            for (int64_t r = 0; r < g_drv[k].ne1; r++)
                dequantize_row(t->type, (const uint8_t *)t->data + r * rs, deq + r * g_drv[k].ne0, g_drv[k].ne0);
            double e = rel_rms(g_drv_data[k], deq, n_el);
            double bound = t->type == GGML_TYPE_F32 ? 0.0 : t->type == GGML_TYPE_Q6_K ? 0.03 : 0.12;
            CHECK_MSG(e <= bound, "%s (%s): relative RMS error %.4f > %.4f", order[i], tn((int)t->type), e, bound);
            free(deq);
        }
        gguf_file_close(f);
    }
    CHECK(access(path_in("out.gguf.tmp"), F_OK) != 0);

    /* A quantized input: refused unless requantizing is allowed, then dequantized first. */
    const char *q = path_in("q.gguf"), *q2 = path_in("q2.gguf");
    o.params.ftype = QMIX_FTYPE_Q8_0;
    CHECK(quantize_model(in, q, &o, NULL) == VLLMC_OK);
    o.params.ftype = QMIX_FTYPE_Q4_0;
    CHECK(quantize_model(q, q2, &o, NULL) == VLLMC_ERR_INVALID);
    CHECK(strstr(vllmc_last_error(), "--allow-requantize") != NULL);
    CHECK(access(q2, F_OK) != 0);
    o.allow_requantize = true;
    CHECK(quantize_model(q, q2, &o, NULL) == VLLMC_OK);
    o.allow_requantize = false;

    /* Scratch-file staging gives the same bytes. */
    const char *m1 = path_in("m1.gguf"), *m2 = path_in("m2.gguf");
    o.params.ftype = QMIX_FTYPE_Q5_K_M;
    CHECK(quantize_model(in, m1, &o, NULL) == VLLMC_OK);
    o.mem_limit_bytes = 1;
    o.n_threads = 1;
    CHECK(quantize_model(in, m2, &o, NULL) == VLLMC_OK);
    o.mem_limit_bytes = 0;
    o.n_threads = 2;
    FILE *a = fopen(m1, "rb"), *b = fopen(m2, "rb");
    int same = a && b;
    for (int ca = 0, cb = 0; same && ca != EOF;) { ca = fgetc(a); cb = fgetc(b); same = ca == cb; }
    if (a) fclose(a);
    if (b) fclose(b);
    CHECK(same);

    /* Errors: nothing left behind. */
    int n_files = count_files();
    CHECK(quantize_model(path_in("missing.gguf"), out, &o, NULL) == VLLMC_ERR_IO);
    CHECK(quantize_model(in, path_in("no/such/dir.gguf"), &o, NULL) == VLLMC_ERR_IO);
    CHECK(strstr(vllmc_last_error(), "no/such/dir.gguf") != NULL);
    const char *bad = path_in("nan.gguf");
    write_model(bad, 4);
    n_files = count_files();
    CHECK(quantize_model(bad, path_in("nan-out.gguf"), &o, NULL) == VLLMC_ERR_CORRUPT);
    CHECK(strstr(vllmc_last_error(), "blk.0.ffn_down.weight") != NULL);
    CHECK(count_files() == n_files);
    o.params.ftype = 4; /* a removed ftype */
    CHECK(quantize_model(in, path_in("x.gguf"), &o, NULL) == VLLMC_ERR_UNSUPPORTED);
    CHECK(count_files() == n_files);

    DIR *d = opendir(g_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') unlink(path_in(e->d_name));
    if (d) closedir(d);
    rmdir(g_dir);
    for (size_t i = 0; i < ARRAY_LEN(g_drv); i++) free(g_drv_data[i]);
}

int main(void) {
    test_seed_auto("test_qmix");
    test_llama_q4_k_m();
    test_llama_q6_k();
    test_other_ftypes();
    test_tied();
    test_fallbacks();
    test_qwen35_27b();
    test_qwen35moe();
    test_order();
    test_never_quantized();
    test_params();
    test_parse();
    test_random();
    test_driver();
    return test_finish("test_qmix");
}
