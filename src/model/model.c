/* Model loading: opens the GGUF, picks the architecture from general.architecture in the arch table
 * (MODEL_ARCH_LIST), reads the shared hparams and binds weights by name with shape and type checks.
 * Every tensor bound is recorded so model_destroy can free it exactly once. */
#include "model/model.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "quant/quant.h"

#define MODEL_ARCH_ENTRY(name) &model_arch_##name,
static const struct model_arch *const model_archs[] = {MODEL_ARCH_LIST(MODEL_ARCH_ENTRY)};
#undef MODEL_ARCH_ENTRY

uint32_t model_weight_fmt(const struct bk_tensor *w) {
    if (!w || !w->data) return 0;
    int f = bk_act_fmt_for_weight(w->type);
    return f < 0 ? 0 : BK_ACT_BIT(f);
}

static vllmc_status model_record_bound(struct model *m, struct bk_tensor *t) {
    if (m->n_bound == m->cap_bound) {
        int32_t nc = m->cap_bound ? m->cap_bound * 2 : 64;
        struct bk_tensor **p = realloc(m->bound, (size_t)nc * sizeof(*p));
        if (!p) return vllmc_errorf(VLLMC_ERR_OOM, "model tensor list");
        m->bound = p;
        m->cap_bound = nc;
    }
    m->bound[m->n_bound++] = t;
    return VLLMC_OK;
}

vllmc_status model_bind(struct model *m, struct bk_tensor *out, int flags, int n_dims, const int64_t *ne,
                        const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    memset(out, 0, sizeof(*out));
    if (len < 0 || (size_t)len >= sizeof(name)) return vllmc_errorf(VLLMC_ERR_INVALID, "tensor name too long");
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (flags & MODEL_BIND_OPTIONAL) return VLLMC_OK;
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: tensor '%s' is missing", m->hp.arch, name);
    }
    /* Compare extent by extent; missing trailing dims count as 1. */
    bool ok = n_dims >= 1 && n_dims <= GGUF_MAX_DIMS;
    for (int i = 0; ok && i < GGUF_MAX_DIMS; i++) {
        int64_t have = i < (int)t->n_dims ? t->ne[i] : 1, want = i < n_dims ? ne[i] : 1;
        if (want >= 0 && have != want) ok = false;
    }
    if (!ok) {
        char want_s[96] = "", have_s[96] = "";
        for (int i = 0; i < n_dims; i++)
            snprintf(want_s + strlen(want_s), sizeof(want_s) - strlen(want_s), "%s%lld", i ? " x " : "", (long long)ne[i]);
        for (uint32_t i = 0; i < t->n_dims; i++)
            snprintf(have_s + strlen(have_s), sizeof(have_s) - strlen(have_s), "%s%lld", i ? " x " : "", (long long)t->ne[i]);
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: tensor '%s' has shape [%s], expected [%s] (-1 = any)", m->hp.arch,
                            name, have_s, want_s);
    }
    const struct quant_traits *tr = quant_traits(t->type);
    if (!tr || !tr->supported || (n_dims > 1 && bk_act_fmt_for_weight(t->type) < 0))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: tensor '%s' has type %s, not supported", m->hp.arch, name,
                            tr ? tr->name : "unknown");
    int64_t tne[4] = {1, 1, 1, 1};
    for (int i = 0; i < n_dims && i < 4; i++) tne[i] = i < (int)t->n_dims ? t->ne[i] : 1;
    vllmc_status st = m->be->ops->weight_upload(m->be, t->data, t->type, n_dims, tne, out);
    if (st) return vllmc_errorf(st, "%s model: tensor '%s': %s", m->hp.arch, name, vllmc_last_error());
    char *nm = malloc((size_t)len + 1);
    if (!nm || (st = model_record_bound(m, out))) {
        free(nm);
        m->be->ops->weight_free(m->be, out);
        return nm ? st : vllmc_errorf(VLLMC_ERR_OOM, "tensor name");
    }
    memcpy(nm, name, (size_t)len + 1);
    out->name = nm;
    return VLLMC_OK;
}

static vllmc_status model_key(struct model *m, const char *suffix, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s.%s", m->hp.arch, suffix);
    if (n < 0 || (size_t)n >= cap) return vllmc_errorf(VLLMC_ERR_INVALID, "key too long");
    return VLLMC_OK;
}

vllmc_status model_get_u32(struct model *m, const char *suffix, int32_t *out, bool required) {
    char key[128];
    vllmc_status st = model_key(m, suffix, key, sizeof(key));
    if (st) return st;
    if (gguf_find_key(m->gguf, key) < 0) {
        if (!required) return VLLMC_OK;
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: metadata key '%s' is missing", m->hp.arch, key);
    }
    uint32_t v;
    if ((st = gguf_get_u32(m->gguf, key, &v))) return st;
    if (v > INT32_MAX) return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s = %u is too large", key, v);
    *out = (int32_t)v;
    return VLLMC_OK;
}

vllmc_status model_get_f32(struct model *m, const char *suffix, float *out, bool required) {
    char key[128];
    vllmc_status st = model_key(m, suffix, key, sizeof(key));
    if (st) return st;
    if (gguf_find_key(m->gguf, key) < 0) {
        if (!required) return VLLMC_OK;
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: metadata key '%s' is missing", m->hp.arch, key);
    }
    return gguf_get_f32(m->gguf, key, out);
}

vllmc_status model_read_common_hparams(struct model *m) {
    struct model_hparams *hp = &m->hp;
    vllmc_status st;
    if ((st = model_get_u32(m, "block_count", &hp->n_layer, true)) || (st = model_get_u32(m, "embedding_length", &hp->n_embd, true)) ||
        (st = model_get_u32(m, "attention.head_count", &hp->n_head, true)))
        return st;
    hp->n_kv_head = hp->n_head;
    hp->n_ff = 0;
    hp->n_ctx_train = 4096;
    hp->norm_eps = 1e-6f;
    if ((st = model_get_u32(m, "feed_forward_length", &hp->n_ff, false)) || (st = model_get_u32(m, "attention.head_count_kv", &hp->n_kv_head, false)) ||
        (st = model_get_u32(m, "context_length", &hp->n_ctx_train, false)) ||
        (st = model_get_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps, false)))
        return st;
    if (hp->n_layer <= 0 || hp->n_layer > MODEL_MAX_LAYERS || hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_kv_head <= 0 ||
        hp->n_head % hp->n_kv_head || hp->n_ff < 0)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: bad hparams: %d layers, n_embd %d, %d heads, %d kv heads, n_ff %d", hp->arch,
                            hp->n_layer, hp->n_embd, hp->n_head, hp->n_kv_head, hp->n_ff);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = model_get_u32(m, "attention.key_length", &hp->head_dim, false))) return st;
    hp->head_dim_v = hp->head_dim;
    if ((st = model_get_u32(m, "attention.value_length", &hp->head_dim_v, false))) return st;
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim_v <= 0 || hp->head_dim_v > 1024)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: head dims %d / %d", hp->arch, hp->head_dim, hp->head_dim_v);
    hp->rope.mode = BK_ROPE_NORM;
    hp->rope.n_rot = hp->head_dim;
    hp->rope.freq_base = 10000.0f;
    hp->rope.freq_scale = 1.0f;
    hp->rope.freq_factors = NULL;
    if ((st = model_get_u32(m, "rope.dimension_count", &hp->rope.n_rot, false)) ||
        (st = model_get_f32(m, "rope.freq_base", &hp->rope.freq_base, false)))
        return st;
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", hp->arch);
    struct gguf_str stype = {0};
    bool linear = false;
    if (gguf_find_key(m->gguf, key) >= 0) {
        if ((st = gguf_get_str(m->gguf, key, &stype))) return st;
        if (gguf_str_eq(stype, "linear")) linear = true;
        else if (!gguf_str_eq(stype, "none") && !gguf_str_eq(stype, "llama3")) {
            char b[32];
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: rope scaling '%s' not supported", hp->arch, gguf_str_copy(stype, b, sizeof(b)));
        }
    }
    float factor = 0.0f;
    if ((st = model_get_f32(m, "rope.scaling.factor", &factor, false))) return st;
    if (linear && factor > 0.0f) hp->rope.freq_scale = 1.0f / factor;
    if (hp->rope.n_rot <= 0 || hp->rope.n_rot > hp->head_dim || hp->rope.n_rot % 2 || !(hp->rope.freq_base > 0.0f))
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: rope dims %d of head %d, base %g", hp->arch, hp->rope.n_rot, hp->head_dim,
                            (double)hp->rope.freq_base);
    if (!(hp->norm_eps > 0.0f) || hp->norm_eps > 1.0f) return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: norm eps %g", hp->arch, (double)hp->norm_eps);
    return VLLMC_OK;
}

vllmc_status model_load(const char *path, struct backend *be, struct model **out) {
    *out = NULL;
    struct gguf_file *f = NULL;
    vllmc_status st = gguf_file_open(path, &f);
    if (st) return st;
    struct model *m = calloc(1, sizeof(*m));
    if (!m) { gguf_file_close(f); return vllmc_errorf(VLLMC_ERR_OOM, "model"); }
    m->file = f;
    m->gguf = f->ctx;
    m->be = be;
    struct gguf_str arch;
    if ((st = gguf_get_str(m->gguf, "general.architecture", &arch))) {
        st = vllmc_errorf(VLLMC_ERR_CORRUPT, "%s: no general.architecture", path);
        goto fail;
    }
    gguf_str_copy(arch, m->hp.arch, sizeof(m->hp.arch));
    for (size_t i = 0; i < ARRAY_LEN(model_archs); i++)
        if (!strcmp(model_archs[i]->name, m->hp.arch)) m->arch = model_archs[i];
    if (!m->arch) {
        st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported", path, m->hp.arch);
        goto fail;
    }
    if ((st = m->arch->load(m))) goto fail;
    *out = m;
    return VLLMC_OK;
fail:
    model_destroy(m);
    return st;
}

void model_destroy(struct model *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_bound; i++) {
        free((char *)m->bound[i]->name);
        m->bound[i]->name = NULL;
        m->be->ops->weight_free(m->be, m->bound[i]);
    }
    free(m->bound);
    if (m->arch && m->arch->free) m->arch->free(m);
    free(m->layers);
    gguf_file_close(m->file);
    free(m);
}

vllmc_status model_reserve(struct model *m, int32_t max_tokens, int32_t max_logits) {
    if (max_tokens <= 0 || max_logits <= 0 || max_logits > max_tokens)
        return vllmc_errorf(VLLMC_ERR_INVALID, "reserve: %d tokens, %d logit rows", max_tokens, max_logits);
    return m->arch->reserve(m, max_tokens, max_logits);
}

vllmc_status model_forward(struct model *m, const struct bk_batch *b, struct bk_kv_cache *kv, float *logits,
                           int32_t *argmax) {
    if (!b || b->n_tokens > m->max_tokens || b->n_logits > m->max_logits)
        return vllmc_errorf(VLLMC_ERR_INVALID, "forward: batch of %d tokens / %d logit rows exceeds the reserve (%d / %d)",
                            b ? b->n_tokens : 0, b ? b->n_logits : 0, m->max_tokens, m->max_logits);
    return m->arch->forward(m, b, kv, logits, argmax);
}

/* fp8 KV scales from the GGUF, if it has them. There is no standard key; these take either one f32 for
 * every attention layer or an array of n_attn_layers numbers (KV-layer order), each finite and > 0.
 * Absent: 1.0 (as vLLM when a checkpoint carries no scales). */
#define MODEL_KV_K_SCALE_KEY "vllmc.kv_cache.k_scale"
#define MODEL_KV_V_SCALE_KEY "vllmc.kv_cache.v_scale"

static vllmc_status model_kv_read_scales(const struct model *m, const char *key, float *scales, int32_t n_layers) {
    const int64_t i = gguf_find_key(m->gguf, key);
    if (i < 0) return VLLMC_OK;
    const struct gguf_kv *kv = &m->gguf->kv[i];
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->n != (uint64_t)n_layers || kv->strs)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s: an array of %llu, want %d numbers (one per attention layer)", key,
                                (unsigned long long)kv->n, n_layers);
        for (int32_t l = 0; l < n_layers; l++) scales[l] = (float)gguf_arr_f64(kv, (uint64_t)l);
    } else {
        float v;
        vllmc_status st = gguf_get_f32(m->gguf, key, &v);
        if (st) return st;
        for (int32_t l = 0; l < n_layers; l++) scales[l] = v;
    }
    for (int32_t l = 0; l < n_layers; l++)
        if (!(scales[l] > 0.0f) || isinf(scales[l]))
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s: layer %d scale %g (must be finite and > 0)", key, l, (double)scales[l]);
    return VLLMC_OK;
}

/* The fp8 key shift (bk_kv_cache.k_shift): a key bias b (qwen2) reaches the cache as R(pos) b after RoPE. In
 * the pairs that turn by at most 1 radian over the longest sequence (theta_i * H <= 1, H = m->kv_max_len or
 * the trained context; the unrotated channels past n_rot too) that stays near the constant b: subtracting b
 * leaves |R(pos) b - b| <= 2 sin(1/2) |b| < |b| at every position. On Qwen2.5 b is large in the lowest-
 * frequency pairs (|b| up to ~210), where e4m3's step is 16 while the keys vary there by ~1 from token to
 * token: the variation rounds away and a score jumps wherever a key crosses a rounding point. The shift is
 * b in those channels and 0 elsewhere; layers with a key norm (after the bias) or without an f32 key bias
 * get 0. It depends on the model and H only, so every batch stores the same codes. */
static vllmc_status model_kv_k_shift(struct model *m, struct bk_kv_cache *kv) {
    const struct model_hparams *hp = &m->hp;
    const int32_t kd = hp->n_kv_head * hp->head_dim, half = hp->rope.n_rot / 2;
    const double horizon = m->kv_max_len > 0 ? m->kv_max_len : hp->n_ctx_train;
    const struct gguf_tensor *ff = gguf_find_tensor(m->gguf, "rope_freqs.weight");
    if (ff && (ff->type != GGML_TYPE_F32 || ff->ne[0] < half)) ff = NULL;
    kv->k_shift = NULL;
    if (!m->layers) return VLLMC_OK; /* the hybrid families keep their own layer table and have a key norm */
    bool any = false;
    float *shift = calloc((size_t)(kv->n_layers ? kv->n_layers : 1) * (size_t)kd, sizeof(float));
    if (!shift) return vllmc_errorf(VLLMC_ERR_OOM, "fp8 key shift");
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const int32_t l = m->layers[il].kv_layer;
        if (l < 0 || l >= kv->n_layers || m->layers[il].k_norm.data) continue;
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.attn_k.bias", il);
        const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
        if (!t || t->type != GGML_TYPE_F32 || t->n_dims != 1 || t->ne[0] != kd) continue;
        const float *b = t->data;
        for (int32_t h = 0; h < hp->n_kv_head; h++)
            for (int32_t c = 0; c < hp->head_dim; c++) {
                double theta = 0.0;
                if (c < hp->rope.n_rot) {
                    const int32_t i = hp->rope.mode == BK_ROPE_NEOX ? c % half : c / 2;
                    theta = hp->rope.freq_scale * pow(hp->rope.freq_base, -2.0 * i / hp->rope.n_rot);
                    if (ff) theta /= ((const float *)ff->data)[i];
                }
                if (theta * horizon <= 1.0 && b[h * hp->head_dim + c] != 0.0f) {
                    shift[(int64_t)l * kd + h * hp->head_dim + c] = b[h * hp->head_dim + c];
                    any = true;
                }
            }
    }
    if (any) kv->k_shift = shift;
    else free(shift);
    return VLLMC_OK;
}

vllmc_status model_kv_create(struct model *m, enum bk_kv_dtype dtype, int32_t n_blocks, struct bk_kv_cache **out) {
    vllmc_status st = m->be->ops->kv_create(m->be, dtype, m->hp.n_attn_layers, n_blocks, m->hp.n_kv_head, m->hp.head_dim, out);
    if (!st) (*out)->k_shift = NULL;
    if (!st && dtype == BK_KV_FP8_E4M3 && (*out)->k_scales && (*out)->v_scales &&
        ((st = model_kv_read_scales(m, MODEL_KV_K_SCALE_KEY, (*out)->k_scales, m->hp.n_attn_layers)) ||
         (st = model_kv_read_scales(m, MODEL_KV_V_SCALE_KEY, (*out)->v_scales, m->hp.n_attn_layers)) ||
         (!m->kv_fp8_plain && (st = model_kv_k_shift(m, *out))))) {
        m->be->ops->kv_destroy(m->be, *out);
        *out = NULL;
        return st;
    }
    if (st || !m->arch->kv_attach) return st;
    if ((st = m->arch->kv_attach(m, *out, 1))) {
        model_kv_destroy(m, *out);
        *out = NULL;
    }
    return st;
}

vllmc_status model_kv_set_state_slots(struct model *m, struct bk_kv_cache *kv, int32_t n_slots) {
    return m->arch->kv_attach ? m->arch->kv_attach(m, kv, n_slots) : VLLMC_OK;
}

void model_kv_destroy(struct model *m, struct bk_kv_cache *kv) {
    if (!kv) return;
    if (m->arch->kv_detach) m->arch->kv_detach(m, kv);
    free(kv->k_shift);
    kv->k_shift = NULL;
    m->be->ops->kv_destroy(m->be, kv);
}

uint64_t model_weight_bytes(const struct model *m) {
    uint64_t total = 0;
    for (int32_t i = 0; i < m->n_bound; i++) {
        const struct bk_tensor *t = m->bound[i];
        total += t->row_size_bytes * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return total;
}

uint64_t model_active_weight_bytes(struct model *m) {
    int32_t n_used = 0;
    if (model_get_u32(m, "expert_used_count", &n_used, false) != VLLMC_OK) n_used = 0;
    /* the token table: one row a token, unless it is also the (tied) LM head, which reads all of it */
    const bool tied = m->output.data == m->tok_embd.data;
    uint64_t total = 0;
    for (int32_t i = 0; i < m->n_bound; i++) {
        const struct bk_tensor *t = m->bound[i];
        if (t == &m->tok_embd && !tied) {
            total += t->row_size_bytes;
            continue;
        }
        const uint64_t matrix = t->row_size_bytes * (uint64_t)t->ne[1];
        /* a 3-D expert tensor: a decode step reads only the chosen experts' matrices */
        const int64_t n_mat = t->ne[2] > 1 && n_used > 0 && n_used < t->ne[2] ? n_used : t->ne[2];
        total += matrix * (uint64_t)(n_mat * t->ne[3]);
    }
    return total;
}
