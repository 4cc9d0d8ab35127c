/* llama-quantize's per-tensor type mix (GGUF-QUANTS.md section 6), written from the spec.
 *
 * How a type is chosen, per tensor, in processing order:
 *   1. Tensors llama-quantize never touches keep their type (qmix_allows_quantization).
 *   2. --token-embedding-type / --output-tensor-type win for their tensor.
 *   3. The default type of the ftype; if it is a quantized type, the first --tensor-type pattern found
 *      in the name sets the type, else (unless --pure) the category rules below refine it (output / tied
 *      embeddings, attn_v-like, attn_k, ffn_down, attn_output ...).
 *   4. If the row length is not a multiple of the chosen block, the fallback table substitutes a type
 *      with a smaller block (F16 as the last resort).
 * The attn_v-like counter (attn_v, attn_qkv, attn_kv_b share it) and the dense ffn_down counter advance
 * only when a tensor reaches its rule, exactly as in llama.cpp, so the order of the tensors matters. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <string.h>
#include "qmix.h"
#include "quant.h"

/* ---------------------------------------------------------------- ftype and type names */

struct qmix_ftype_name { const char *name; int ftype; };
static const struct qmix_ftype_name qmix_ftype_names[] = {
    {"Q4_0", QMIX_FTYPE_Q4_0},     {"Q4_1", QMIX_FTYPE_Q4_1},     {"Q5_0", QMIX_FTYPE_Q5_0},
    {"Q5_1", QMIX_FTYPE_Q5_1},     {"Q2_K", QMIX_FTYPE_Q2_K},     {"Q3_K_S", QMIX_FTYPE_Q3_K_S},
    {"Q3_K_M", QMIX_FTYPE_Q3_K_M}, {"Q3_K_L", QMIX_FTYPE_Q3_K_L}, {"Q4_K_S", QMIX_FTYPE_Q4_K_S},
    {"Q4_K_M", QMIX_FTYPE_Q4_K_M}, {"Q5_K_S", QMIX_FTYPE_Q5_K_S}, {"Q5_K_M", QMIX_FTYPE_Q5_K_M},
    {"Q6_K", QMIX_FTYPE_Q6_K},     {"Q8_0", QMIX_FTYPE_Q8_0},     {"F16", QMIX_FTYPE_F16},
    {"BF16", QMIX_FTYPE_BF16},     {"F32", QMIX_FTYPE_ALL_F32},
    /* llama-quantize's aliases */
    {"Q3_K", QMIX_FTYPE_Q3_K_M},   {"Q4_K", QMIX_FTYPE_Q4_K_M},   {"Q5_K", QMIX_FTYPE_Q5_K_M},
};

static bool qmix_streq_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (toupper((unsigned char)*a) != toupper((unsigned char)*b)) return false;
    return *a == *b;
}

/* A non-negative decimal number filling the whole string; -1 otherwise. */
static long qmix_parse_uint(const char *s) {
    if (!*s) return -1;
    long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 100000) return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

const char *qmix_ftype_name(int ftype) {
    for (size_t i = 0; i < ARRAY_LEN(qmix_ftype_names); i++)
        if (qmix_ftype_names[i].ftype == ftype) return qmix_ftype_names[i].name;
    return NULL;
}

vllmc_status qmix_parse_ftype(const char *s, int *ftype) {
    if (!s) return vllmc_errorf(VLLMC_ERR_INVALID, "missing quantization type");
    long num = qmix_parse_uint(s);
    if (num >= 0) {
        if (num == QMIX_FTYPE_Q2_K_S)
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "file type %ld (Q2_K_S) needs an importance matrix, "
                                "which is not supported", num);
        if (!qmix_ftype_name((int)num)) goto unknown;
        *ftype = (int)num;
        return VLLMC_OK;
    }
    for (size_t i = 0; i < ARRAY_LEN(qmix_ftype_names); i++)
        if (qmix_streq_nocase(s, qmix_ftype_names[i].name)) { *ftype = qmix_ftype_names[i].ftype; return VLLMC_OK; }
    if (qmix_streq_nocase(s, "Q2_K_S"))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "Q2_K_S needs an importance matrix, which is not supported");
unknown:
    return vllmc_errorf(VLLMC_ERR_INVALID, "unknown quantization type '%s' (expected one of F32, F16, BF16, Q8_0, "
                        "Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, "
                        "Q6_K, or an ftype number)", s);
}

int qmix_ftype_default_type(int ftype) {
    switch (ftype) {
    case QMIX_FTYPE_ALL_F32: return GGML_TYPE_F32;
    case QMIX_FTYPE_F16: return GGML_TYPE_F16;
    case QMIX_FTYPE_BF16: return GGML_TYPE_BF16;
    case QMIX_FTYPE_Q4_0: return GGML_TYPE_Q4_0;
    case QMIX_FTYPE_Q4_1: return GGML_TYPE_Q4_1;
    case QMIX_FTYPE_Q5_0: return GGML_TYPE_Q5_0;
    case QMIX_FTYPE_Q5_1: return GGML_TYPE_Q5_1;
    case QMIX_FTYPE_Q8_0: return GGML_TYPE_Q8_0;
    case QMIX_FTYPE_Q2_K: case QMIX_FTYPE_Q2_K_S: return GGML_TYPE_Q2_K;
    case QMIX_FTYPE_Q3_K_S: case QMIX_FTYPE_Q3_K_M: case QMIX_FTYPE_Q3_K_L: return GGML_TYPE_Q3_K;
    case QMIX_FTYPE_Q4_K_S: case QMIX_FTYPE_Q4_K_M: return GGML_TYPE_Q4_K;
    case QMIX_FTYPE_Q5_K_S: case QMIX_FTYPE_Q5_K_M: return GGML_TYPE_Q5_K;
    case QMIX_FTYPE_Q6_K: return GGML_TYPE_Q6_K;
    default: return -1;
    }
}

/* Types the driver can write. */
static bool qmix_type_producible(uint32_t t) {
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0: case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
    case GGML_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

vllmc_status qmix_parse_ggml_type(const char *s, uint32_t *type) {
    if (!s) return vllmc_errorf(VLLMC_ERR_INVALID, "missing tensor type");
    long num = qmix_parse_uint(s);
    for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *tr = quant_traits(t);
        if (!tr) continue;
        if ((num >= 0 && (uint32_t)num == t) || (num < 0 && qmix_streq_nocase(s, tr->name))) {
            if (!qmix_type_producible(t))
                return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tensor type '%s' cannot be produced here (supported: "
                                    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)", s);
            *type = t;
            return VLLMC_OK;
        }
    }
    return vllmc_errorf(VLLMC_ERR_INVALID, "unknown tensor type '%s' (expected a ggml type name such as Q6_K or F16)", s);
}

/* ---------------------------------------------------------------- names and categories */

int qmix_n_dims(const int64_t ne[4]) {
    for (int i = 3; i >= 1; i--)
        if (ne[i] != 1) return i + 1;
    return 1;
}

/* sscanf(name, "blk.%d.", &layer) == 1: the prefix, then an optionally signed decimal (after optional
 * white space). The character after the number is not checked, as with sscanf. */
static bool qmix_parse_layer(const char *name, int *layer) {
    if (strncmp(name, "blk.", 4) != 0) return false;
    const char *p = name + 4;
    while (isspace((unsigned char)*p)) p++;
    int sign = 1;
    if (*p == '+' || *p == '-') { sign = *p == '-' ? -1 : 1; p++; }
    if (*p < '0' || *p > '9') return false;
    long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if (v < 1000000000LL) v = v * 10 + (*p - '0');
    *layer = (int)(sign * v);
    return true;
}

int qmix_name_cmp(const char *a, const char *b) {
    int la = -1, lb = -1;
    qmix_parse_layer(a, &la);
    qmix_parse_layer(b, &lb);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0;
}

enum qmix_category {
    QMIX_CAT_OUTPUT, QMIX_CAT_TOKEN_EMBD, QMIX_CAT_ATTN_QKV, QMIX_CAT_ATTN_KV_B, QMIX_CAT_ATTN_V,
    QMIX_CAT_ATTN_K, QMIX_CAT_ATTN_Q, QMIX_CAT_ATTN_OUTPUT, QMIX_CAT_FFN_UP, QMIX_CAT_FFN_GATE,
    QMIX_CAT_FFN_DOWN, QMIX_CAT_OTHER
};

/* Substring tests in a fixed order: "ffn_down_exps" is FFN_DOWN, "ffn_gate_up_exps" is FFN_UP's
 * neighbour FFN_GATE only because "ffn_up" is not a substring of it. */
static enum qmix_category qmix_category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return QMIX_CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return QMIX_CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight")) return QMIX_CAT_ATTN_QKV;
    if (strstr(name, "attn_kv_b.weight")) return QMIX_CAT_ATTN_KV_B;
    if (strstr(name, "attn_v.weight")) return QMIX_CAT_ATTN_V;
    if (strstr(name, "attn_k.weight")) return QMIX_CAT_ATTN_K;
    if (strstr(name, "attn_q.weight")) return QMIX_CAT_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return QMIX_CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up")) return QMIX_CAT_FFN_UP;
    if (strstr(name, "ffn_gate")) return QMIX_CAT_FFN_GATE;
    if (strstr(name, "ffn_down")) return QMIX_CAT_FFN_DOWN;
    return QMIX_CAT_OTHER;
}

static bool qmix_is_attn_v_like(enum qmix_category c) {
    return c == QMIX_CAT_ATTN_V || c == QMIX_CAT_ATTN_QKV || c == QMIX_CAT_ATTN_KV_B;
}

static bool qmix_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

bool qmix_allows_quantization(const struct qmix_params *p, const char *name, const int64_t ne[4]) {
    if (qmix_n_dims(ne) < 2) return false;
    if (!qmix_ends_with(name, "weight")) return false;
    if (p && p->leave_output && !strcmp(name, "output.weight")) return false;
    /* Small or precision-critical tensors that are kept as the converter wrote them. */
    static const char *const kept_substr[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
        "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (size_t i = 0; i < ARRAY_LEN(kept_substr); i++)
        if (strstr(name, kept_substr[i])) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    return true;
}

/* ---------------------------------------------------------------- the rules */

struct qmix_state {
    const struct qmix_model *m;
    const struct qmix_params *p;
    int n_attn_wv, i_attn_wv;
    int i_ffn_down;
    bool tied;        /* no output.weight: token_embd doubles as the LM head */
    bool is_falcon, is_70b;
    int n_gqa;
};

static bool qmix_use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int qmix_block_size(uint32_t type) {
    const struct quant_traits *t = quant_traits(type);
    return t ? t->block_size : 1;
}

/* Layer of an ffn tensor: the running counter for dense models, "blk.N." for MoE models. */
static vllmc_status qmix_layer_of(const struct qmix_state *s, int counter, const char *name, int *layer) {
    *layer = counter;
    if (s->m->n_expert > 1) {
        if (!qmix_parse_layer(name, layer))
            return vllmc_errorf(VLLMC_ERR_INVALID, "cannot determine the layer of tensor '%s'", name);
        if (*layer < 0 || *layer >= s->m->n_layer)
            return vllmc_errorf(VLLMC_ERR_INVALID, "tensor '%s': layer %d not in [0, %d)", name, *layer, s->m->n_layer);
    }
    return VLLMC_OK;
}

static int qmix_rule_output(const struct qmix_state *s, const struct qmix_tensor *t, int type) {
    if (s->p->output_type >= 0) return s->p->output_type;
    if (s->is_falcon || t->ne[0] % qmix_block_size((uint32_t)type) != 0) return GGML_TYPE_Q8_0;
    return type == GGML_TYPE_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q6_K;
}

static int qmix_rule_attn_v(struct qmix_state *s, int type) {
    const int f = s->p->ftype;
    if (f == QMIX_FTYPE_Q2_K) type = s->n_gqa >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
    else if (f == QMIX_FTYPE_Q2_K_S && s->n_gqa >= 4) type = GGML_TYPE_Q4_K;
    else if (f == QMIX_FTYPE_Q3_K_M) type = s->i_attn_wv < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
    else if (f == QMIX_FTYPE_Q3_K_L) type = GGML_TYPE_Q5_K;
    else if ((f == QMIX_FTYPE_Q4_K_M || f == QMIX_FTYPE_Q5_K_M) && qmix_use_more_bits(s->i_attn_wv, s->n_attn_wv))
        type = GGML_TYPE_Q6_K;
    else if (f == QMIX_FTYPE_Q4_K_S && s->i_attn_wv < 4) type = GGML_TYPE_Q5_K;
    /* 70B: 8 query heads share each V head, so V is small and worth more bits. */
    if (s->is_70b && (type == GGML_TYPE_Q3_K || type == GGML_TYPE_Q4_K)) type = GGML_TYPE_Q5_K;
    if (s->m->n_expert == 8) type = GGML_TYPE_Q8_0;
    s->i_attn_wv++;
    return type;
}

static vllmc_status qmix_rule_ffn_down(struct qmix_state *s, const struct qmix_tensor *t, int *type) {
    const int f = s->p->ftype;
    int il, n = s->m->n_layer;
    vllmc_status st = qmix_layer_of(s, s->i_ffn_down, t->name, &il);
    if (st != VLLMC_OK) return st;
    if (f == QMIX_FTYPE_Q2_K) *type = GGML_TYPE_Q3_K;
    else if (f == QMIX_FTYPE_Q2_K_S) { if (il < n / 8) *type = GGML_TYPE_Q4_K; }
    else if (f == QMIX_FTYPE_Q3_K_M)
        *type = il < n / 16 ? GGML_TYPE_Q5_K
              : (!s->is_falcon || qmix_use_more_bits(il, n)) ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
    else if (f == QMIX_FTYPE_Q3_K_L) *type = s->is_falcon ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;
    else if (f == QMIX_FTYPE_Q4_K_M) {
        if (s->is_falcon)
            *type = il < n / 16 ? GGML_TYPE_Q6_K : qmix_use_more_bits(il, n) ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        else if (qmix_use_more_bits(il, n))
            *type = GGML_TYPE_Q6_K;
    } else if (f == QMIX_FTYPE_Q5_K_M && qmix_use_more_bits(il, n)) *type = GGML_TYPE_Q6_K;
    else if (f == QMIX_FTYPE_Q4_K_S && !s->is_falcon && il < n / 8) *type = GGML_TYPE_Q5_K;
    /* (Q4_0/Q5_0 -> Q4_1/Q5_1 in the first layers applies only with an importance matrix.) */
    s->i_ffn_down++;
    return VLLMC_OK;
}

static int qmix_rule_attn_output(const struct qmix_state *s, int type) {
    const int f = s->p->ftype;
    if (s->is_falcon) return f == QMIX_FTYPE_Q3_K_L ? GGML_TYPE_Q4_K : type;
    if (s->m->n_expert == 8) {
        if (f == QMIX_FTYPE_Q2_K || f == QMIX_FTYPE_Q3_K_S || f == QMIX_FTYPE_Q3_K_M || f == QMIX_FTYPE_Q4_K_S ||
            f == QMIX_FTYPE_Q4_K_M)
            type = GGML_TYPE_Q5_K;
        return type;
    }
    if (f == QMIX_FTYPE_Q2_K) return GGML_TYPE_Q3_K;
    if (f == QMIX_FTYPE_Q3_K_M) return GGML_TYPE_Q4_K;
    if (f == QMIX_FTYPE_Q3_K_L) return GGML_TYPE_Q5_K;
    return type;
}

/* The category rules for a quantized default type (llama.cpp's llama_tensor_get_type_impl). */
static vllmc_status qmix_rules(struct qmix_state *s, const struct qmix_tensor *t, enum qmix_category cat, int *type) {
    int il;
    vllmc_status st;
    if (cat == QMIX_CAT_OUTPUT || (s->tied && cat == QMIX_CAT_TOKEN_EMBD)) {
        *type = qmix_rule_output(s, t, *type);
    } else if (cat == QMIX_CAT_TOKEN_EMBD) {
        if (s->p->token_embd_type >= 0) *type = s->p->token_embd_type;
        /* otherwise the default type, for every ftype supported here */
    } else if (qmix_is_attn_v_like(cat)) {
        *type = qmix_rule_attn_v(s, *type);
    } else if (cat == QMIX_CAT_ATTN_K) {
        if (s->m->n_expert == 8) *type = GGML_TYPE_Q8_0;
    } else if (cat == QMIX_CAT_FFN_DOWN) {
        return qmix_rule_ffn_down(s, t, type);
    } else if (cat == QMIX_CAT_ATTN_OUTPUT) {
        *type = qmix_rule_attn_output(s, *type);
    } else if (cat == QMIX_CAT_FFN_GATE || cat == QMIX_CAT_FFN_UP) {
        /* No type change for these ftypes, but an MoE tensor still needs a valid layer. */
        if ((st = qmix_layer_of(s, 0, t->name, &il)) != VLLMC_OK) return st;
    }
    return VLLMC_OK;
}

/* Row length not a multiple of the block: a type with a smaller block, F16 when even that fails. */
static int qmix_fallback(const struct qmix_tensor *t, int type, bool *used) {
    const int64_t ncols = t->ne[0];
    *used = false;
    if (ncols % qmix_block_size((uint32_t)type) == 0) return type;
    *used = true;
    int fb;
    switch (type) {
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: fb = GGML_TYPE_Q4_0; break;
    case GGML_TYPE_Q4_K: fb = GGML_TYPE_Q5_0; break;
    case GGML_TYPE_Q5_K: fb = GGML_TYPE_Q5_1; break;
    case GGML_TYPE_Q6_K: fb = GGML_TYPE_Q8_0; break;
    case GGML_TYPE_IQ4_XS: fb = GGML_TYPE_IQ4_NL; break;
    default: fb = type; break; /* already a 32-element block */
    }
    if (ncols % qmix_block_size((uint32_t)fb) != 0) fb = GGML_TYPE_F16;
    return fb;
}

static bool qmix_type_is_quantized(int type) {
    return type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_BF16;
}

/* Compiled --tensor-type patterns. */
struct qmix_regexes {
    pcre2_code **re;
    pcre2_match_data *md;
    size_t n;
};

static void qmix_regexes_free(struct qmix_regexes *r) {
    for (size_t i = 0; r->re && i < r->n; i++) pcre2_code_free(r->re[i]);
    free(r->re);
    if (r->md) pcre2_match_data_free(r->md);
    memset(r, 0, sizeof(*r));
}

static vllmc_status qmix_regexes_init(struct qmix_regexes *r, const struct qmix_params *p) {
    memset(r, 0, sizeof(*r));
    if (!p->n_overrides) return VLLMC_OK;
    if (!p->overrides) return vllmc_errorf(VLLMC_ERR_INVALID, "tensor type overrides: NULL list");
    if (!(r->re = vllmc_calloc(p->n_overrides, sizeof(*r->re)))) return VLLMC_ERR_OOM;
    r->n = p->n_overrides;
    for (size_t i = 0; i < r->n; i++) {
        const struct qmix_override *o = &p->overrides[i];
        if (!o->pattern || !*o->pattern) { qmix_regexes_free(r); return vllmc_errorf(VLLMC_ERR_INVALID, "empty tensor pattern"); }
        if (!qmix_type_producible(o->type)) {
            qmix_regexes_free(r);
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tensor type override '%s': type %u cannot be produced here",
                                o->pattern, o->type);
        }
        int err;
        PCRE2_SIZE off;
        r->re[i] = pcre2_compile((PCRE2_SPTR)o->pattern, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
        if (!r->re[i]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof(msg));
            vllmc_status st = vllmc_errorf(VLLMC_ERR_INVALID, "tensor pattern '%s': %s at offset %zu", o->pattern,
                                           (const char *)msg, (size_t)off);
            qmix_regexes_free(r);
            return st;
        }
    }
    if (!(r->md = pcre2_match_data_create(1, NULL))) { qmix_regexes_free(r); return VLLMC_ERR_OOM; }
    return VLLMC_OK;
}

/* Index of the first pattern found in name, or -1. */
static int qmix_regexes_match(const struct qmix_regexes *r, const char *name) {
    for (size_t i = 0; i < r->n; i++)
        if (pcre2_match(r->re[i], (PCRE2_SPTR)name, strlen(name), 0, 0, r->md, NULL) >= 0) return (int)i;
    return -1;
}

vllmc_status qmix_assign_types(const struct qmix_model *m, const struct qmix_params *p,
                               struct qmix_tensor *t, size_t n) {
    const int default_type = qmix_ftype_default_type(p->ftype);
    if (default_type < 0 || !qmix_ftype_name(p->ftype))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "file type %d is not supported", p->ftype);
    if (p->ftype == QMIX_FTYPE_Q2_K_S)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "Q2_K_S needs an importance matrix, which is not supported");
    if (p->output_type >= 0 && !qmix_type_producible((uint32_t)p->output_type))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "output tensor type %d cannot be produced here", p->output_type);
    if (p->token_embd_type >= 0 && !qmix_type_producible((uint32_t)p->token_embd_type))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "token embedding type %d cannot be produced here", p->token_embd_type);

    struct qmix_regexes rx;
    vllmc_status st = qmix_regexes_init(&rx, p);
    if (st != VLLMC_OK) return st;
    struct qmix_state s = {.m = m, .p = p, .tied = true};
    const char *arch = m->arch ? m->arch : "";
    s.is_falcon = !strcmp(arch, "falcon");
    /* llama.cpp's LLM_TYPE_70B, for the architectures whose loaders assign it (llama: GQA, not Mixtral). */
    s.is_70b = (m->n_layer == 80 && !strcmp(arch, "llama") && m->n_head != m->n_head_kv && m->n_expert != 8) ||
               (m->n_layer == 80 && (!strcmp(arch, "qwen2") || !strcmp(arch, "deci"))) ||
               (m->n_layer == 68 && !strcmp(arch, "jais2"));
    s.n_gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
    for (size_t i = 0; i < n; i++) {
        enum qmix_category c = qmix_category_of(t[i].name);
        if (qmix_is_attn_v_like(c)) s.n_attn_wv++;
        if (c == QMIX_CAT_OUTPUT) s.tied = false;
    }

    for (size_t i = 0; i < n; i++) {
        struct qmix_tensor *x = &t[i];
        x->fallback = false;
        x->quantizable = qmix_allows_quantization(p, x->name, x->ne);
        if (!x->quantizable) { x->new_type = x->type; continue; }
        enum qmix_category c = qmix_category_of(x->name);
        int type;
        /* per_layer_token_embd follows --token-embedding-type unless a pattern names it. */
        bool embd_named = !strcmp(x->name, "per_layer_token_embd.weight") && qmix_regexes_match(&rx, x->name) >= 0;
        if (p->token_embd_type >= 0 && c == QMIX_CAT_TOKEN_EMBD && !embd_named) type = p->token_embd_type;
        else if (p->output_type >= 0 && c == QMIX_CAT_OUTPUT) type = p->output_type;
        else {
            type = default_type;
            if (qmix_type_is_quantized(default_type)) {
                int k = qmix_regexes_match(&rx, x->name);
                if (k >= 0) type = (int)p->overrides[k].type;
                else if (!p->pure && (st = qmix_rules(&s, x, c, &type)) != VLLMC_OK) break;
                type = qmix_fallback(x, type, &x->fallback);
            }
        }
        /* Explicit types skip the fallback table; a block that does not divide the row is an error. */
        if (x->ne[0] % qmix_block_size((uint32_t)type) != 0) {
            st = vllmc_errorf(VLLMC_ERR_INVALID, "tensor '%s': row length %lld is not a multiple of the block "
                              "size %d of %s", x->name, (long long)x->ne[0], qmix_block_size((uint32_t)type),
                              quant_traits((uint32_t)type)->name);
            break;
        }
        x->new_type = (uint32_t)type;
    }
    qmix_regexes_free(&rx);
    return st;
}
