/* Qwen3.5 / Qwen3.6 hybrid decoders, GGUF archs qwen35 (dense SwiGLU FFN) and qwen35moe (routed experts +
 * gated shared expert), written as backend ops (ARCH-QWEN35.md). Layer i is gated full attention when
 * (i+1) % full_attention_interval == 0, else Gated DeltaNet:
 *   u = rmsnorm(x; attn_norm);  x += mixer(u);  x += ffn(rmsnorm(x; post_attention_norm)).
 * GDN: [qkv | z | b | a] = W u, then the backend's gdn op (conv, norms, gates, delta rule, gated norm)
 *      and ssm_out. Attention: attn_q rows per head [256 query | 256 gate]; q/k per-head RMSNorm (which
 *      also de-interleaves q), partial NeoX RoPE, softmax attention, sigmoid(gate) * o, attn_output.
 * The recurrent state lives in the caller's KV cache (kv->rs, attached by model_kv_create through
 * qwen35_kv_attach); the MTP block (blk.{n_layer}) is not run. */
#include <math.h>
#include <string.h>
#include "model/model.h"
#include "quant/quant.h"

struct qwen35_layer {
    bool recurrent;
    int32_t rs_layer, kv_layer;
    struct bk_tensor attn_norm, post_norm;
    /* Gated DeltaNet */
    struct bk_tensor qkv, gate, beta, alpha, conv, dt_bias, ssm_a, ssm_norm, ssm_out;
    /* gated attention */
    struct bk_tensor wq, wk, wv, wo, q_norm, k_norm;
    /* dense FFN */
    struct bk_tensor ffn_gate, ffn_up, ffn_down;
    /* MoE FFN */
    struct bk_tensor router, gate_exps, up_exps, down_exps, gate_shexp, up_shexp, down_shexp, shexp_gate;
    uint32_t fmts_in, fmts_mix_out, fmts_ffn_in, fmts_ffn_down;
};

struct qwen35_data {
    bool moe;
    int32_t n_k_head, n_v_head, d_state, d_conv, interval, n_rs_layers;
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int64_t key_dim, value_dim, conv_dim, ld_proj;
    struct qwen35_layer *layers; /* [n_layer] */
};

struct qwen35_scratch {
    float *x;                 /* [max_tokens][n_embd] residual stream */
    float *o;                 /* [max_tokens][n_embd] mixer / FFN output */
    float *proj;              /* [max_tokens][ld_proj] GDN [qkv | z | b | a] */
    float *qg, *q, *k, *v;    /* attention: [T][n_head*2*hd], [T][n_head*hd], [T][n_kv*hd] x2 */
    float *gate, *up;         /* [T][n_ff] dense FFN */
    float *gdn_work;
    float *xl, *logits;
    struct bk_act mix_in, gdn_out, attn_out, ffn_in, ffn_mid, head_in;
};

static vllmc_status qwen35_load(struct model *m) {
    vllmc_status st;
    if ((st = model_read_common_hparams(m))) return st;
    struct model_hparams *hp = &m->hp;
    struct qwen35_data *d = calloc(1, sizeof(*d));
    if (!d) return vllmc_errorf(VLLMC_ERR_OOM, "qwen35 data");
    m->arch_data = d;
    d->moe = !strcmp(hp->arch, "qwen35moe");
    hp->rope.mode = BK_ROPE_NEOX;
    int32_t n_nextn = 0;
    d->interval = 4;
    if ((st = model_get_u32(m, "nextn_predict_layers", &n_nextn, false)) ||
        (st = model_get_u32(m, "full_attention_interval", &d->interval, false)) ||
        (st = model_get_u32(m, "ssm.conv_kernel", &d->d_conv, true)) ||
        (st = model_get_u32(m, "ssm.state_size", &d->d_state, true)) ||
        (st = model_get_u32(m, "ssm.group_count", &d->n_k_head, true)) ||
        (st = model_get_u32(m, "ssm.time_step_rank", &d->n_v_head, true)))
        return st;
    int32_t inner = 0;
    if ((st = model_get_u32(m, "ssm.inner_size", &inner, true))) return st;
    if (n_nextn < 0 || n_nextn >= hp->n_layer)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: %d MTP layers of %d blocks", hp->arch, n_nextn, hp->n_layer);
    hp->n_layer -= n_nextn;
    if (d->interval <= 0 || d->d_conv < 2 || d->d_conv > 8 || d->d_state <= 0 || d->d_state > 1024 ||
        d->n_k_head <= 0 || d->n_v_head <= 0 || d->n_v_head % d->n_k_head || inner != d->n_v_head * d->d_state)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: bad ssm hparams (interval %d, conv %d, state %d, groups %d, "
                            "rank %d, inner %d)", hp->arch, d->interval, d->d_conv, d->d_state, d->n_k_head, d->n_v_head, inner);
    if (hp->head_dim_v != hp->head_dim)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: key length %d != value length %d", hp->arch, hp->head_dim, hp->head_dim_v);
    if (d->moe) {
        if ((st = model_get_u32(m, "expert_count", &d->n_expert, true)) ||
            (st = model_get_u32(m, "expert_used_count", &d->n_expert_used, true)))
            return st;
        d->n_ff_exp = hp->n_ff && d->n_expert_used ? hp->n_ff / d->n_expert_used : 0;
        d->n_ff_shexp = hp->n_ff;
        if ((st = model_get_u32(m, "expert_feed_forward_length", &d->n_ff_exp, false)) ||
            (st = model_get_u32(m, "expert_shared_feed_forward_length", &d->n_ff_shexp, false)))
            return st;
        if (d->n_expert <= 0 || d->n_expert > 1024 || d->n_expert_used <= 0 || d->n_expert_used > d->n_expert ||
            d->n_ff_exp <= 0)
            return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: %d experts, %d used, expert width %d", hp->arch, d->n_expert,
                                d->n_expert_used, d->n_ff_exp);
    } else if (hp->n_ff <= 0) {
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: feed_forward_length missing or 0", hp->arch);
    }
    d->key_dim = (int64_t)d->n_k_head * d->d_state;
    d->value_dim = (int64_t)d->n_v_head * d->d_state;
    d->conv_dim = 2 * d->key_dim + d->value_dim;
    d->ld_proj = d->conv_dim + d->value_dim + 2 * (int64_t)d->n_v_head;

    const int64_t E = hp->n_embd, HD = hp->head_dim, QD = (int64_t)hp->n_head * HD, KD = (int64_t)hp->n_kv_head * HD;
    const int64_t C = d->conv_dim, VD = d->value_dim, NV = d->n_v_head;
    if ((st = model_bind(m, &m->tok_embd, 0, 2, (int64_t[]){E, -1}, "token_embd.weight"))) return st;
    if (m->tok_embd.ne[1] <= 0 || m->tok_embd.ne[1] > INT32_MAX)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: vocabulary of %lld", hp->arch, (long long)m->tok_embd.ne[1]);
    hp->n_vocab = (int32_t)m->tok_embd.ne[1];
    if ((st = model_bind(m, &m->output_norm, 0, 1, (int64_t[]){E}, "output_norm.weight")) ||
        (st = model_bind(m, &m->output, MODEL_BIND_OPTIONAL, 2, (int64_t[]){E, hp->n_vocab}, "output.weight")))
        return st;
    hp->tied_embeddings = m->output.data == NULL;
    if (hp->tied_embeddings) {
        m->output = m->tok_embd;
        if (bk_act_fmt_for_weight(m->output.type) < 0)
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: tied head of type %u has no matmul", hp->arch, m->output.type);
    }
    m->fmts_output = model_weight_fmt(&m->output);

    d->layers = calloc((size_t)hp->n_layer, sizeof(*d->layers));
    if (!d->layers) return vllmc_errorf(VLLMC_ERR_OOM, "layers");
    hp->n_attn_layers = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        struct qwen35_layer *L = &d->layers[il];
        L->recurrent = (il + 1) % d->interval != 0;
        L->rs_layer = L->recurrent ? d->n_rs_layers++ : -1;
        L->kv_layer = L->recurrent ? -1 : hp->n_attn_layers++;
        if ((st = model_bind(m, &L->attn_norm, 0, 1, (int64_t[]){E}, "blk.%d.attn_norm.weight", il)) ||
            (st = model_bind(m, &L->post_norm, 0, 1, (int64_t[]){E}, "blk.%d.post_attention_norm.weight", il)))
            return st;
        if (L->recurrent) {
            if ((st = model_bind(m, &L->qkv, 0, 2, (int64_t[]){E, C}, "blk.%d.attn_qkv.weight", il)) ||
                (st = model_bind(m, &L->gate, 0, 2, (int64_t[]){E, VD}, "blk.%d.attn_gate.weight", il)) ||
                (st = model_bind(m, &L->beta, 0, 2, (int64_t[]){E, NV}, "blk.%d.ssm_beta.weight", il)) ||
                (st = model_bind(m, &L->alpha, 0, 2, (int64_t[]){E, NV}, "blk.%d.ssm_alpha.weight", il)) ||
                (st = model_bind(m, &L->conv, 0, 2, (int64_t[]){d->d_conv, C}, "blk.%d.ssm_conv1d.weight", il)) ||
                (st = model_bind(m, &L->dt_bias, 0, 1, (int64_t[]){NV}, "blk.%d.ssm_dt.bias", il)) ||
                (st = model_bind(m, &L->ssm_a, 0, 1, (int64_t[]){NV}, "blk.%d.ssm_a", il)) ||
                (st = model_bind(m, &L->ssm_norm, 0, 1, (int64_t[]){d->d_state}, "blk.%d.ssm_norm.weight", il)) ||
                (st = model_bind(m, &L->ssm_out, 0, 2, (int64_t[]){VD, E}, "blk.%d.ssm_out.weight", il)))
                return st;
            if (L->conv.type != GGML_TYPE_F32)
                return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: blk.%d.ssm_conv1d.weight must be F32", hp->arch, il);
            L->fmts_in = model_weight_fmt(&L->qkv) | model_weight_fmt(&L->gate) | model_weight_fmt(&L->beta) |
                         model_weight_fmt(&L->alpha);
            L->fmts_mix_out = model_weight_fmt(&L->ssm_out);
        } else {
            if ((st = model_bind(m, &L->wq, 0, 2, (int64_t[]){E, 2 * QD}, "blk.%d.attn_q.weight", il)) ||
                (st = model_bind(m, &L->wk, 0, 2, (int64_t[]){E, KD}, "blk.%d.attn_k.weight", il)) ||
                (st = model_bind(m, &L->wv, 0, 2, (int64_t[]){E, KD}, "blk.%d.attn_v.weight", il)) ||
                (st = model_bind(m, &L->wo, 0, 2, (int64_t[]){QD, E}, "blk.%d.attn_output.weight", il)) ||
                (st = model_bind(m, &L->q_norm, 0, 1, (int64_t[]){HD}, "blk.%d.attn_q_norm.weight", il)) ||
                (st = model_bind(m, &L->k_norm, 0, 1, (int64_t[]){HD}, "blk.%d.attn_k_norm.weight", il)))
                return st;
            L->fmts_in = model_weight_fmt(&L->wq) | model_weight_fmt(&L->wk) | model_weight_fmt(&L->wv);
            L->fmts_mix_out = model_weight_fmt(&L->wo);
        }
        if (!d->moe) {
            const int64_t F = hp->n_ff;
            if ((st = model_bind(m, &L->ffn_gate, 0, 2, (int64_t[]){E, F}, "blk.%d.ffn_gate.weight", il)) ||
                (st = model_bind(m, &L->ffn_up, 0, 2, (int64_t[]){E, F}, "blk.%d.ffn_up.weight", il)) ||
                (st = model_bind(m, &L->ffn_down, 0, 2, (int64_t[]){F, E}, "blk.%d.ffn_down.weight", il)))
                return st;
            L->fmts_ffn_in = model_weight_fmt(&L->ffn_gate) | model_weight_fmt(&L->ffn_up);
            L->fmts_ffn_down = model_weight_fmt(&L->ffn_down);
        } else {
            const int64_t X = d->n_expert, FE = d->n_ff_exp, FS = d->n_ff_shexp;
            if ((st = model_bind(m, &L->router, 0, 2, (int64_t[]){E, X}, "blk.%d.ffn_gate_inp.weight", il)) ||
                (st = model_bind(m, &L->gate_exps, 0, 3, (int64_t[]){E, FE, X}, "blk.%d.ffn_gate_exps.weight", il)) ||
                (st = model_bind(m, &L->up_exps, 0, 3, (int64_t[]){E, FE, X}, "blk.%d.ffn_up_exps.weight", il)) ||
                (st = model_bind(m, &L->down_exps, 0, 3, (int64_t[]){FE, E, X}, "blk.%d.ffn_down_exps.weight", il)) ||
                (st = model_bind(m, &L->gate_shexp, MODEL_BIND_OPTIONAL, 2, (int64_t[]){E, FS}, "blk.%d.ffn_gate_shexp.weight", il)) ||
                (st = model_bind(m, &L->up_shexp, MODEL_BIND_OPTIONAL, 2, (int64_t[]){E, FS}, "blk.%d.ffn_up_shexp.weight", il)) ||
                (st = model_bind(m, &L->down_shexp, MODEL_BIND_OPTIONAL, 2, (int64_t[]){FS, E}, "blk.%d.ffn_down_shexp.weight", il)) ||
                (st = model_bind(m, &L->shexp_gate, MODEL_BIND_OPTIONAL, 1, (int64_t[]){E}, "blk.%d.ffn_gate_inp_shexp.weight", il)))
                return st;
            if (L->router.type != GGML_TYPE_F32)
                return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: blk.%d.ffn_gate_inp.weight must be F32", hp->arch, il);
            if (!L->gate_shexp.data != !L->up_shexp.data || !L->gate_shexp.data != !L->down_shexp.data)
                return vllmc_errorf(VLLMC_ERR_CORRUPT, "%s model: blk.%d has part of a shared expert", hp->arch, il);
            L->fmts_ffn_in = model_weight_fmt(&L->gate_exps) | model_weight_fmt(&L->up_exps) |
                             model_weight_fmt(&L->gate_shexp) | model_weight_fmt(&L->up_shexp);
        }
    }
    if (d->moe && (!m->be->ops->moe))
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: backend '%s' has no moe op", hp->arch, m->be->ops->name);
    if (!m->be->ops->gdn || !m->be->ops->sigmoid_mul)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "%s model: backend '%s' has no gdn op", hp->arch, m->be->ops->name);
    return VLLMC_OK;
}

static void qwen35_scratch_free(struct model *m) {
    struct qwen35_scratch *s = m->scratch;
    if (!s) return;
    struct backend *be = m->be;
    float **bufs[] = {&s->x, &s->o, &s->proj, &s->qg, &s->q, &s->k, &s->v, &s->gate, &s->up, &s->gdn_work, &s->xl, &s->logits};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
        if (*bufs[i]) be->ops->free(be, *bufs[i]);
    struct bk_act *acts[] = {&s->mix_in, &s->gdn_out, &s->attn_out, &s->ffn_in, &s->ffn_mid, &s->head_in};
    for (size_t i = 0; i < ARRAY_LEN(acts); i++) bk_act_free(be, acts[i]);
    free(s);
    m->scratch = NULL;
}

static void qwen35_free(struct model *m) {
    qwen35_scratch_free(m);
    struct qwen35_data *d = m->arch_data;
    if (d) free(d->layers);
    free(d);
    m->arch_data = NULL;
}

static struct bk_gdn_params qwen35_gdn_params(const struct model *m, const struct qwen35_data *d, int32_t rs_layer) {
    struct bk_gdn_params p = {.n_k_head = d->n_k_head, .n_v_head = d->n_v_head, .d_k = d->d_state, .d_v = d->d_state,
                              .d_conv = d->d_conv, .eps = m->hp.norm_eps, .rs_layer = rs_layer};
    return p;
}

static vllmc_status qwen35_reserve(struct model *m, int32_t max_tokens, int32_t max_logits) {
    qwen35_scratch_free(m);
    struct qwen35_scratch *s = calloc(1, sizeof(*s));
    if (!s) return vllmc_errorf(VLLMC_ERR_OOM, "scratch");
    m->scratch = s;
    const struct model_hparams *hp = &m->hp;
    const struct qwen35_data *d = m->arch_data;
    struct backend *be = m->be;
    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_embd, HD = (size_t)hp->head_dim;
    const size_t QD = (size_t)hp->n_head * HD, KD = (size_t)hp->n_kv_head * HD, F = (size_t)(d->moe ? 1 : hp->n_ff);
    uint32_t f_in = 0, f_gdn_out = 0, f_attn_out = 0, f_ffn_in = 0, f_ffn_down = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct qwen35_layer *L = &d->layers[il];
        f_in |= L->fmts_in;
        if (L->recurrent) f_gdn_out |= L->fmts_mix_out;
        else f_attn_out |= L->fmts_mix_out;
        f_ffn_in |= L->fmts_ffn_in;
        f_ffn_down |= L->fmts_ffn_down;
    }
    /* the deferred-norm form of the FFN's input, where the backend has it (qwen35_forward asks step by step) */
    if (!d->moe && be->ops->defer_norm_ok && be->ops->matmul_add_defer && hp->n_embd % 256 == 0) f_ffn_in |= BK_ACT_BIT(BK_ACT_Q8_KD);
    const struct bk_gdn_params gp = qwen35_gdn_params(m, d, 0);
    const int64_t work = bk_gdn_work_floats(&gp, max_tokens, be->n_threads);
    vllmc_status st;
    if ((st = be->ops->alloc(be, T * E * 4, (void **)&s->x)) || (st = be->ops->alloc(be, T * E * 4, (void **)&s->o)) ||
        (st = be->ops->alloc(be, T * (size_t)d->ld_proj * 4, (void **)&s->proj)) ||
        (st = be->ops->alloc(be, T * 2 * QD * 4, (void **)&s->qg)) || (st = be->ops->alloc(be, T * QD * 4, (void **)&s->q)) ||
        (st = be->ops->alloc(be, T * KD * 4, (void **)&s->k)) || (st = be->ops->alloc(be, T * KD * 4, (void **)&s->v)) ||
        (st = be->ops->alloc(be, T * F * 4, (void **)&s->gate)) || (st = be->ops->alloc(be, T * F * 4, (void **)&s->up)) ||
        (st = be->ops->alloc(be, (size_t)work * 4, (void **)&s->gdn_work)) ||
        (st = be->ops->alloc(be, (size_t)max_logits * E * 4, (void **)&s->xl)) ||
        (st = be->ops->alloc(be, (size_t)max_logits * (size_t)hp->n_vocab * 4, (void **)&s->logits)) ||
        (st = bk_act_alloc(be, max_tokens, hp->n_embd, f_in, &s->mix_in)) ||
        (st = bk_act_alloc(be, max_tokens, d->value_dim, f_gdn_out, &s->gdn_out)) ||
        (st = bk_act_alloc(be, max_tokens, (int64_t)QD, f_attn_out, &s->attn_out)) ||
        (st = bk_act_alloc(be, max_tokens, hp->n_embd, f_ffn_in, &s->ffn_in)) ||
        (!d->moe && (st = bk_act_alloc(be, max_tokens, hp->n_ff, f_ffn_down, &s->ffn_mid))) ||
        (st = bk_act_alloc(be, max_logits, hp->n_embd, m->fmts_output, &s->head_in))) {
        qwen35_scratch_free(m);
        return st;
    }
    m->max_tokens = max_tokens;
    m->max_logits = max_logits;
    return VLLMC_OK;
}

static vllmc_status qwen35_forward(struct model *m, const struct bk_batch *b, struct bk_kv_cache *kv, float *logits,
                                   int32_t *argmax) {
    struct qwen35_scratch *s = m->scratch;
    if (!s) return vllmc_errorf(VLLMC_ERR_INVALID, "forward before model_reserve");
    const struct model_hparams *hp = &m->hp;
    const struct qwen35_data *d = m->arch_data;
    if (!kv || kv->n_layers != hp->n_attn_layers)
        return vllmc_errorf(VLLMC_ERR_INVALID, "forward: KV cache has %d layers, model %d", kv ? kv->n_layers : 0, hp->n_attn_layers);
    if (!kv->rs || kv->rs->n_layers != d->n_rs_layers)
        return vllmc_errorf(VLLMC_ERR_INVALID, "forward: %s model needs recurrent-state slots for %d layers (model_kv_create)",
                            hp->arch, d->n_rs_layers);
    struct backend *be = m->be;
    const struct backend_ops *op = be->ops;
    const int64_t T = b->n_tokens, E = hp->n_embd, HD = hp->head_dim;
    const float eps = hp->norm_eps;
    vllmc_status st;
#define TRY(x) do { if ((st = (x)) != VLLMC_OK) return st; } while (0)
    TRY(op->batch_set(be, b));
    TRY(op->embed(be, &m->tok_embd, s->x));
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const struct qwen35_layer *L = &d->layers[il];
        s->mix_in.fmts = L->fmts_in | BK_ACT_BIT(BK_ACT_F32);
        TRY(op->rmsnorm_quantize(be, s->x, L->attn_norm.data, eps, T, &s->mix_in));
        if (L->recurrent) {
            const int64_t C = d->conv_dim, VD = d->value_dim, NV = d->n_v_head;
            const struct bk_matmul_out proj[4] = {
                {.w = &L->qkv, .y = s->proj, .ld_y = d->ld_proj},
                {.w = &L->gate, .y = s->proj + C, .ld_y = d->ld_proj},
                {.w = &L->beta, .y = s->proj + C + VD, .ld_y = d->ld_proj},
                {.w = &L->alpha, .y = s->proj + C + VD + NV, .ld_y = d->ld_proj},
            };
            TRY(op->matmul(be, &s->mix_in, 4, proj));
            const struct bk_gdn_params gp = qwen35_gdn_params(m, d, L->rs_layer);
            const struct bk_gdn_weights gw = {L->conv.data, L->dt_bias.data, L->ssm_a.data, L->ssm_norm.data};
            s->gdn_out.fmts = L->fmts_mix_out | BK_ACT_BIT(BK_ACT_F32);
            TRY(op->gdn(be, kv->rs, &gp, &gw, s->proj, d->ld_proj, s->gdn_work, &s->gdn_out));
        } else {
            const struct bk_matmul_out qkv[3] = {{.w = &L->wq, .y = s->qg}, {.w = &L->wk, .y = s->k}, {.w = &L->wv, .y = s->v}};
            TRY(op->matmul(be, &s->mix_in, 3, qkv));
            /* per head [q | gate]: the q norm reads the q halves (row stride 2*hd) into a packed q */
            TRY(op->rmsnorm(be, s->qg, 2 * HD, L->q_norm.data, eps, T * hp->n_head, HD, s->q, HD));
            TRY(op->rmsnorm(be, s->k, 0, L->k_norm.data, eps, T * hp->n_kv_head, HD, s->k, 0));
            TRY(op->rope(be, s->q, 0, hp->n_head, hp->head_dim, &hp->rope));
            TRY(op->rope(be, s->k, 0, hp->n_kv_head, hp->head_dim, &hp->rope));
            const struct bk_attn_params ap = {.n_head = hp->n_head, .n_kv_head = hp->n_kv_head, .head_dim = hp->head_dim,
                                              .scale = 1.0f / sqrtf((float)hp->head_dim), .kv_layer = L->kv_layer};
            TRY(op->attention(be, kv, &ap, s->q, 0, s->k, 0, s->v, 0, s->attn_out.x));
            TRY(op->sigmoid_mul(be, s->attn_out.x, HD, s->qg + HD, 2 * HD, T * hp->n_head, HD));
            s->attn_out.n_rows = T;
            s->attn_out.fmts = L->fmts_mix_out | BK_ACT_BIT(BK_ACT_F32);
            TRY(op->quantize(be, &s->attn_out));
        }
        /* the mixer's output projection, its residual add, then the feed-forward's norm (post_attention_norm); in a
         * one-row step on a backend with the deferred form, all three in the projection's launch, the RMS scale
         * applied by the gate / up mat-vec (backend.h matmul_add_defer) */
        const struct bk_tensor *proj = L->recurrent ? &L->ssm_out : &L->wo;
        const struct bk_act *proj_in = L->recurrent ? &s->gdn_out : &s->attn_out;
        const struct bk_tensor *gu_w[2] = {&L->ffn_gate, &L->ffn_up};
        if (!d->moe && s->ffn_in.q[BK_ACT_Q8_KD] && op->defer_norm_ok(be, proj, gu_w, 2, T)) {
            s->ffn_in.fmts = BK_ACT_BIT(BK_ACT_Q8_KD);
            TRY(op->matmul_add_defer(be, proj_in, proj, s->x, L->post_norm.data, eps, &s->ffn_in));
        } else {
            const struct bk_matmul_out po = {.w = proj, .y = s->o};
            TRY(op->matmul(be, proj_in, 1, &po));
            TRY(op->add(be, s->x, s->o, T, E));
            s->ffn_in.fmts = L->fmts_ffn_in | BK_ACT_BIT(BK_ACT_F32);
            TRY(op->rmsnorm_quantize(be, s->x, L->post_norm.data, eps, T, &s->ffn_in));
        }
        if (!d->moe) {
            const struct bk_matmul_out gu[2] = {{.w = &L->ffn_gate, .y = s->gate}, {.w = &L->ffn_up, .y = s->up}};
            TRY(op->matmul(be, &s->ffn_in, 2, gu));
            s->ffn_mid.fmts = L->fmts_ffn_down | BK_ACT_BIT(BK_ACT_F32);
            TRY(op->swiglu_quantize(be, s->gate, s->up, 0, T, &s->ffn_mid));
            const struct bk_matmul_out down = {.w = &L->ffn_down, .y = s->o};
            TRY(op->matmul(be, &s->ffn_mid, 1, &down));
        } else {
            const struct bk_moe_weights mw = {&L->router, &L->gate_exps, &L->up_exps, &L->down_exps,
                                              &L->gate_shexp, &L->up_shexp, &L->down_shexp, &L->shexp_gate};
            const struct bk_moe_params mp = {.n_expert_used = d->n_expert_used, .norm_weights = true};
            TRY(op->moe(be, &s->ffn_in, &mw, &mp, s->o));
        }
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

/* Recurrent-state slots: one conv and one delta-rule state (f32, or bf16 with m->ssm_bf16) per (GDN layer, slot). */
static void qwen35_kv_detach(struct model *m, struct bk_kv_cache *kv) {
    struct bk_rs_cache *rs = kv ? kv->rs : NULL;
    if (!rs) return;
    for (int32_t i = 0; i < rs->n_layers; i++) {
        if (rs->conv && rs->conv[i]) m->be->ops->free(m->be, rs->conv[i]);
        if (rs->ssm && rs->ssm[i]) m->be->ops->free(m->be, rs->ssm[i]);
    }
    free(rs->conv);
    free(rs->ssm);
    free(rs);
    kv->rs = NULL;
}

static vllmc_status qwen35_kv_attach(struct model *m, struct bk_kv_cache *kv, int32_t n_slots) {
    const struct qwen35_data *d = m->arch_data;
    if (n_slots <= 0) return vllmc_errorf(VLLMC_ERR_INVALID, "%d recurrent-state slots", n_slots);
    qwen35_kv_detach(m, kv);
    struct bk_rs_cache *rs = calloc(1, sizeof(*rs));
    if (!rs) return vllmc_errorf(VLLMC_ERR_OOM, "state cache");
    kv->rs = rs;
    rs->n_layers = d->n_rs_layers;
    rs->n_slots = n_slots;
    rs->conv_floats = d->conv_dim * (d->d_conv - 1);
    rs->ssm_floats = d->value_dim * d->d_state;
    rs->ssm_bf16 = m->ssm_bf16;
    rs->conv = calloc((size_t)VLLMC_MAX(rs->n_layers, 1), sizeof(float *));
    rs->ssm = calloc((size_t)VLLMC_MAX(rs->n_layers, 1), sizeof(void *));
    if (!rs->conv || !rs->ssm) { qwen35_kv_detach(m, kv); return vllmc_errorf(VLLMC_ERR_OOM, "state cache"); }
    for (int32_t i = 0; i < rs->n_layers; i++) {
        vllmc_status st;
        if ((st = m->be->ops->alloc(m->be, (size_t)n_slots * (size_t)rs->conv_floats * 4, (void **)&rs->conv[i])) ||
            (st = m->be->ops->alloc(m->be, (size_t)n_slots * bk_rs_ssm_bytes(rs), &rs->ssm[i]))) {
            qwen35_kv_detach(m, kv);
            return st;
        }
    }
    return VLLMC_OK;
}

const struct model_arch model_arch_qwen35 = {"qwen35", qwen35_load, qwen35_reserve, qwen35_forward, qwen35_free,
                                             qwen35_kv_attach, qwen35_kv_detach};
const struct model_arch model_arch_qwen35moe = {"qwen35moe", qwen35_load, qwen35_reserve, qwen35_forward, qwen35_free,
                                                qwen35_kv_attach, qwen35_kv_detach};
