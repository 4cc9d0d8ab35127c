/* Dense decoder families llama, qwen2 and qwen3: one forward pass written as backend ops.
 * llama: normal RoPE pairing (+ llama3 rope_freqs); qwen2: NeoX RoPE, q/k/v biases;
 * qwen3: NeoX RoPE, per-head RMSNorm of q and k before RoPE.
 * Layer: x += Wo * attn(rope(norm?(Wq u + bq)), rope(norm?(Wk u + bk)), Wv u + bv), u = rmsnorm(x);
 *        x += Wdown * (silu(Wgate f) * Wup f), f = rmsnorm(x). Head: Wout * rmsnorm(x). */
#include <math.h>
#include <string.h>
#include "model/model.h"
#include "quant/quant.h"

enum llama_variant { LLAMA_VARIANT_LLAMA, LLAMA_VARIANT_QWEN2, LLAMA_VARIANT_QWEN3 };

struct llama_scratch {
    float *x;                  /* [max_tokens][n_embd] residual stream */
    float *q, *k, *v;          /* [max_tokens][n_head*head_dim], [..][n_kv_head*head_dim] x2 */
    float *o;                  /* [max_tokens][n_embd] attention / FFN output */
    float *gate, *up;          /* [max_tokens][n_ff] */
    float *xl;                 /* [max_logits][n_embd] rows that need logits */
    float *logits;             /* [max_logits][n_vocab] backend memory */
    struct bk_act attn_in, attn_out, ffn_in, ffn_mid, head_in;
};

static enum llama_variant llama_variant_of(const struct model *m) {
    if (!strcmp(m->hp.arch, "qwen2")) return LLAMA_VARIANT_QWEN2;
    if (!strcmp(m->hp.arch, "qwen3")) return LLAMA_VARIANT_QWEN3;
    return LLAMA_VARIANT_LLAMA;
}

static vllmc_status llama_load(struct model *m) {
    vllmc_status st;
    if ((st = model_read_common_hparams(m))) return st;
    struct model_hparams *hp = &m->hp;
    const enum llama_variant var = llama_variant_of(m);
    hp->rope.mode = var == LLAMA_VARIANT_LLAMA ? BK_ROPE_NORM : BK_ROPE_NEOX;
    if (hp->n_ff <= 0) return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: feed_forward_length missing or 0", hp->arch);
    if (hp->head_dim_v != hp->head_dim)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: key length %d != value length %d", hp->arch, hp->head_dim, hp->head_dim_v);
    const int64_t E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_kv_head * hp->head_dim;
    const int64_t F = hp->n_ff;

    if ((st = model_bind(m, &m->tok_embd, MODEL_BIND_REQUIRED, 2, (int64_t[]){E, -1}, "token_embd.weight"))) return st;
    if (m->tok_embd.ne[1] <= 0 || m->tok_embd.ne[1] > INT32_MAX)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: vocabulary of %lld", hp->arch, (long long)m->tok_embd.ne[1]);
    hp->n_vocab = (int32_t)m->tok_embd.ne[1];
    const int64_t V = hp->n_vocab;
    if ((st = model_bind(m, &m->output_norm, MODEL_BIND_REQUIRED, 1, (int64_t[]){E}, "output_norm.weight"))) return st;
    if ((st = model_bind(m, &m->output, MODEL_BIND_OPTIONAL, 2, (int64_t[]){E, V}, "output.weight"))) return st;
    hp->tied_embeddings = m->output.data == NULL;
    if (hp->tied_embeddings) {
        m->output = m->tok_embd;
        if (bk_act_fmt_for_weight(m->output.type) < 0)
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: tied head of type %u has no matmul", hp->arch, m->output.type);
    }
    if ((st = model_bind(m, &m->rope_freqs, MODEL_BIND_OPTIONAL, 1, (int64_t[]){hp->rope.n_rot / 2}, "rope_freqs.weight"))) return st;
    if (m->rope_freqs.data) hp->rope.freq_factors = m->rope_freqs.data;
    m->fmts_output = model_weight_fmt(&m->output);

    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) return vllmc_errorf(VLLMC_ERR_OOM, "layers");
    const int bias = var == LLAMA_VARIANT_QWEN2 ? MODEL_BIND_REQUIRED : MODEL_BIND_OPTIONAL;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        L->kv_layer = il;
        if ((st = model_bind(m, &L->attn_norm, 0, 1, (int64_t[]){E}, "blk.%d.attn_norm.weight", il)) ||
            (st = model_bind(m, &L->wq, 0, 2, (int64_t[]){E, QD}, "blk.%d.attn_q.weight", il)) ||
            (st = model_bind(m, &L->wk, 0, 2, (int64_t[]){E, KD}, "blk.%d.attn_k.weight", il)) ||
            (st = model_bind(m, &L->wv, 0, 2, (int64_t[]){E, KD}, "blk.%d.attn_v.weight", il)) ||
            (st = model_bind(m, &L->wo, 0, 2, (int64_t[]){QD, E}, "blk.%d.attn_output.weight", il)) ||
            (st = model_bind(m, &L->bq, bias, 1, (int64_t[]){QD}, "blk.%d.attn_q.bias", il)) ||
            (st = model_bind(m, &L->bk, bias, 1, (int64_t[]){KD}, "blk.%d.attn_k.bias", il)) ||
            (st = model_bind(m, &L->bv, bias, 1, (int64_t[]){KD}, "blk.%d.attn_v.bias", il)) ||
            (st = model_bind(m, &L->bo, MODEL_BIND_OPTIONAL, 1, (int64_t[]){E}, "blk.%d.attn_output.bias", il)) ||
            (st = model_bind(m, &L->ffn_norm, 0, 1, (int64_t[]){E}, "blk.%d.ffn_norm.weight", il)) ||
            (st = model_bind(m, &L->ffn_gate, 0, 2, (int64_t[]){E, F}, "blk.%d.ffn_gate.weight", il)) ||
            (st = model_bind(m, &L->ffn_up, 0, 2, (int64_t[]){E, F}, "blk.%d.ffn_up.weight", il)) ||
            (st = model_bind(m, &L->ffn_down, 0, 2, (int64_t[]){F, E}, "blk.%d.ffn_down.weight", il)))
            return st;
        if (var == LLAMA_VARIANT_QWEN3 &&
            ((st = model_bind(m, &L->q_norm, 0, 1, (int64_t[]){hp->head_dim}, "blk.%d.attn_q_norm.weight", il)) ||
             (st = model_bind(m, &L->k_norm, 0, 1, (int64_t[]){hp->head_dim}, "blk.%d.attn_k_norm.weight", il))))
            return st;
        L->fmts_attn_in = model_weight_fmt(&L->wq) | model_weight_fmt(&L->wk) | model_weight_fmt(&L->wv);
        L->fmts_attn_out = model_weight_fmt(&L->wo);
        L->fmts_ffn_in = model_weight_fmt(&L->ffn_gate) | model_weight_fmt(&L->ffn_up);
        L->fmts_ffn_down = model_weight_fmt(&L->ffn_down);
    }
    hp->n_attn_layers = hp->n_layer;
    return VLLMC_OK;
}

static void llama_scratch_free(struct model *m) {
    struct llama_scratch *s = m->scratch;
    if (!s) return;
    struct backend *be = m->be;
    float **bufs[] = {&s->x, &s->q, &s->k, &s->v, &s->o, &s->gate, &s->up, &s->xl, &s->logits};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
        if (*bufs[i]) be->ops->free(be, *bufs[i]);
    bk_act_free(be, &s->attn_in);
    bk_act_free(be, &s->attn_out);
    bk_act_free(be, &s->ffn_in);
    bk_act_free(be, &s->ffn_mid);
    bk_act_free(be, &s->head_in);
    free(s);
    m->scratch = NULL;
}

static vllmc_status llama_reserve(struct model *m, int32_t max_tokens, int32_t max_logits) {
    llama_scratch_free(m);
    struct llama_scratch *s = calloc(1, sizeof(*s));
    if (!s) return vllmc_errorf(VLLMC_ERR_OOM, "scratch");
    m->scratch = s;
    const struct model_hparams *hp = &m->hp;
    struct backend *be = m->be;
    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_embd, QD = (size_t)hp->n_head * (size_t)hp->head_dim;
    const size_t KD = (size_t)hp->n_kv_head * (size_t)hp->head_dim, F = (size_t)hp->n_ff;
    uint32_t f_attn_in = 0, f_attn_out = 0, f_ffn_in = 0, f_ffn_down = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        f_attn_in |= m->layers[il].fmts_attn_in;
        f_attn_out |= m->layers[il].fmts_attn_out;
        f_ffn_in |= m->layers[il].fmts_ffn_in;
        f_ffn_down |= m->layers[il].fmts_ffn_down;
    }
    vllmc_status st;
    if ((st = be->ops->alloc(be, T * E * 4, (void **)&s->x)) || (st = be->ops->alloc(be, T * QD * 4, (void **)&s->q)) ||
        (st = be->ops->alloc(be, T * KD * 4, (void **)&s->k)) || (st = be->ops->alloc(be, T * KD * 4, (void **)&s->v)) ||
        (st = be->ops->alloc(be, T * E * 4, (void **)&s->o)) || (st = be->ops->alloc(be, T * F * 4, (void **)&s->gate)) ||
        (st = be->ops->alloc(be, T * F * 4, (void **)&s->up)) ||
        (st = be->ops->alloc(be, (size_t)max_logits * E * 4, (void **)&s->xl)) ||
        (st = be->ops->alloc(be, (size_t)max_logits * (size_t)hp->n_vocab * 4, (void **)&s->logits)) ||
        (st = bk_act_alloc(be, max_tokens, hp->n_embd, f_attn_in, &s->attn_in)) ||
        (st = bk_act_alloc(be, max_tokens, (int64_t)QD, f_attn_out, &s->attn_out)) ||
        (st = bk_act_alloc(be, max_tokens, hp->n_embd, f_ffn_in, &s->ffn_in)) ||
        (st = bk_act_alloc(be, max_tokens, hp->n_ff, f_ffn_down, &s->ffn_mid)) ||
        (st = bk_act_alloc(be, max_logits, hp->n_embd, m->fmts_output, &s->head_in))) {
        llama_scratch_free(m);
        return st;
    }
    m->max_tokens = max_tokens;
    m->max_logits = max_logits;
    return VLLMC_OK;
}

static vllmc_status llama_forward(struct model *m, const struct bk_batch *b, struct bk_kv_cache *kv, float *logits,
                                  int32_t *argmax) {
    struct llama_scratch *s = m->scratch;
    if (!s) return vllmc_errorf(VLLMC_ERR_INVALID, "forward before model_reserve");
    const struct model_hparams *hp = &m->hp;
    if (!kv || kv->n_layers != hp->n_attn_layers)
        return vllmc_errorf(VLLMC_ERR_INVALID, "forward: KV cache has %d layers, model %d", kv ? kv->n_layers : 0, hp->n_attn_layers);
    struct backend *be = m->be;
    const struct backend_ops *op = be->ops;
    const int64_t T = b->n_tokens, E = hp->n_embd;
    const float eps = hp->norm_eps;
    vllmc_status st;
#define TRY(x) do { if ((st = (x)) != VLLMC_OK) return st; } while (0)
    TRY(op->batch_set(be, b));
    TRY(op->embed(be, &m->tok_embd, s->x));
    const struct bk_attn_params ap = {.n_head = hp->n_head, .n_kv_head = hp->n_kv_head, .head_dim = hp->head_dim,
                                      .scale = 1.0f / sqrtf((float)hp->head_dim)};
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        struct bk_attn_params lap = ap;
        lap.kv_layer = L->kv_layer;
        /* attention */
        s->attn_in.fmts = L->fmts_attn_in | BK_ACT_BIT(BK_ACT_F32);
        TRY(op->rmsnorm_quantize(be, s->x, L->attn_norm.data, eps, T, &s->attn_in));
        const struct bk_matmul_out qkv[3] = {
            {.w = &L->wq, .bias = L->bq.data, .y = s->q},
            {.w = &L->wk, .bias = L->bk.data, .y = s->k},
            {.w = &L->wv, .bias = L->bv.data, .y = s->v},
        };
        TRY(op->matmul(be, &s->attn_in, 3, qkv));
        if (L->q_norm.data) {
            TRY(op->rmsnorm(be, s->q, 0, L->q_norm.data, eps, T * hp->n_head, hp->head_dim, s->q, 0));
            TRY(op->rmsnorm(be, s->k, 0, L->k_norm.data, eps, T * hp->n_kv_head, hp->head_dim, s->k, 0));
        }
        TRY(op->rope(be, s->q, 0, hp->n_head, hp->head_dim, &hp->rope));
        TRY(op->rope(be, s->k, 0, hp->n_kv_head, hp->head_dim, &hp->rope));
        TRY(op->attention(be, kv, &lap, s->q, 0, s->k, 0, s->v, 0, s->attn_out.x));
        s->attn_out.n_rows = T;
        s->attn_out.fmts = L->fmts_attn_out | BK_ACT_BIT(BK_ACT_F32);
        TRY(op->quantize(be, &s->attn_out));
        const struct bk_matmul_out wo = {.w = &L->wo, .bias = L->bo.data, .y = s->o};
        TRY(op->matmul(be, &s->attn_out, 1, &wo));
        TRY(op->add(be, s->x, s->o, T, E));
        /* feed-forward */
        s->ffn_in.fmts = L->fmts_ffn_in | BK_ACT_BIT(BK_ACT_F32);
        TRY(op->rmsnorm_quantize(be, s->x, L->ffn_norm.data, eps, T, &s->ffn_in));
        const struct bk_matmul_out gu[2] = {{.w = &L->ffn_gate, .y = s->gate}, {.w = &L->ffn_up, .y = s->up}};
        TRY(op->matmul(be, &s->ffn_in, 2, gu));
        s->ffn_mid.fmts = L->fmts_ffn_down | BK_ACT_BIT(BK_ACT_F32);
        TRY(op->swiglu_quantize(be, s->gate, s->up, 0, T, &s->ffn_mid));
        const struct bk_matmul_out down = {.w = &L->ffn_down, .y = s->o};
        TRY(op->matmul(be, &s->ffn_mid, 1, &down));
        TRY(op->add(be, s->x, s->o, T, E));
    }
    if (b->n_logits == 0) return VLLMC_OK;
    const float *xh = s->x; /* the rows the head reads */
    if (!model_logits_all_rows(b)) {
        TRY(op->get_rows(be, s->x, E, s->xl));
        xh = s->xl;
    }
    TRY(op->rmsnorm_quantize(be, xh, m->output_norm.data, eps, b->n_logits, &s->head_in));
    TRY(op->logits(be, &s->head_in, &m->output, s->logits, argmax));
    if (logits) TRY(op->copy_to_host(be, logits, s->logits, (size_t)b->n_logits * (size_t)hp->n_vocab * sizeof(float)));
#undef TRY
    return VLLMC_OK;
}

const struct model_arch model_arch_llama = {"llama", llama_load, llama_reserve, llama_forward, llama_scratch_free, NULL, NULL};
const struct model_arch model_arch_qwen2 = {"qwen2", llama_load, llama_reserve, llama_forward, llama_scratch_free, NULL, NULL};
const struct model_arch model_arch_qwen3 = {"qwen3", llama_load, llama_reserve, llama_forward, llama_scratch_free, NULL, NULL};
