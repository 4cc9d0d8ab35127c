/* Reference CPU ops: plain scalar loops on one thread, written for clarity. They are the oracle the
 * fast paths (cpu_ops.c) are tested against, and hold the per-row kernels both paths share
 * (RMSNorm row, RoPE head, activation quantization, KV store), so the formulas exist once. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include "backend/cpu/cpu_internal.h"
#include "quant/blocks.h"
#include "quant/quant.h"

/* ---- shared row kernels ---- */

/* f16 -> f32 for every half bit pattern (exactly fp16_to_fp32), built once: the KV-cache reads. */
static float cpu_f16_lut[65536];
static pthread_once_t cpu_f16_lut_once = PTHREAD_ONCE_INIT;
static void cpu_f16_lut_build(void) {
    for (uint32_t h = 0; h < 65536; h++) cpu_f16_lut[h] = fp16_to_fp32((ggml_half)h);
}
void cpu_init_tables(void) { pthread_once(&cpu_f16_lut_once, cpu_f16_lut_build); }

void cpu_rmsnorm_row(const float *x, const float *w, float eps, int64_t n, float *out) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n + (double)eps));
    if (w)
        for (int64_t i = 0; i < n; i++) out[i] = (x[i] * scale) * w[i];
    else
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
}

/* theta_i = pos * base^(-2i/n_rot) built by repeated multiplication in f32 (as ggml's rope cache),
 * divided by freq_factors[i] when given, times freq_scale. */
void cpu_rope_head(float *x, int32_t pos, const struct bk_rope_params *p) {
    const int32_t n_rot = p->n_rot, half = n_rot / 2;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < half; i++) {
        const float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        const float th = p->freq_scale * (theta / ff);
        const float c = cosf(th), s = sinf(th);
        theta *= theta_scale;
        int32_t a, b;
        if (p->mode == BK_ROPE_NEOX) { a = i; b = i + half; }
        else { a = 2 * i; b = 2 * i + 1; }
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void cpu_quantize_rows(struct bk_act *act, int64_t r0, int64_t r1) {
    const int64_t n = act->n_cols;
    for (int f = 1; f < BK_ACT_NFMT; f++) {
        if (!(act->fmts & BK_ACT_BIT(f)) || !act->q[f]) continue;
        const uint64_t rb = bk_act_row_bytes(f, n);
        for (int64_t r = r0; r < r1; r++) {
            const float *x = act->x + r * n;
            void *dst = (char *)act->q[f] + (uint64_t)r * rb;
            switch (f) {
            case BK_ACT_F16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_fp16(x[i]); break;
            case BK_ACT_BF16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_bf16(x[i]); break;
            case BK_ACT_Q8_0: quantize_row_q8_0(x, dst, n); break;
            case BK_ACT_Q8_1: quantize_row_q8_1(x, dst, n); break;
            case BK_ACT_Q8_K: quantize_row_q8_K(x, dst, n); break;
            default: break;
            }
        }
    }
}

/* The canonical q.k: 16 lane partial sums (lane l takes i = l, l+16, ... in order), then the lanes
 * fold l += l+8, l += l+4, l += l+2, l += l+1. The SIMD kernels (attn_avx2.c) compute exactly this. */
static float dot16_fold(float *acc) {
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] = acc[l] + acc[l + w];
    return acc[0];
}

static float cpu_dot16_f32_scalar(const float *q, const void *k, int32_t hd) {
    const float *kr = k;
    float acc[16] = {0};
    for (int32_t i = 0; i < hd; i++) acc[i % 16] = acc[i % 16] + q[i] * kr[i];
    return dot16_fold(acc);
}

static float cpu_dot16_f16_scalar(const float *q, const void *k, int32_t hd) {
    const uint16_t *kr = k;
    float acc[16] = {0};
    for (int32_t i = 0; i < hd; i++) acc[i % 16] = acc[i % 16] + q[i] * cpu_f16_lut[kr[i]];
    return dot16_fold(acc);
}

static void cpu_axpy_f32_scalar(float *out, float w, const void *v, int32_t hd) {
    const float *vr = v;
    for (int32_t i = 0; i < hd; i++) out[i] = out[i] + w * vr[i];
}

static void cpu_axpy_f16_scalar(float *out, float w, const void *v, int32_t hd) {
    const uint16_t *vr = v;
    for (int32_t i = 0; i < hd; i++) out[i] = out[i] + w * cpu_f16_lut[vr[i]];
}

static float cpu_dot16_bf16_scalar(const float *q, const void *k, int32_t hd) {
    const uint16_t *kr = k;
    float acc[16] = {0};
    for (int32_t i = 0; i < hd; i++) acc[i % 16] = acc[i % 16] + q[i] * bf16_to_fp32(kr[i]);
    return dot16_fold(acc);
}

static float cpu_dot16_fp8_scalar(const float *q, const void *k, int32_t hd) {
    const uint8_t *kr = k;
    float acc[16] = {0};
    for (int32_t i = 0; i < hd; i++) acc[i % 16] = acc[i % 16] + q[i] * bk_fp8_e4m3_table[kr[i]];
    return dot16_fold(acc);
}

static void cpu_axpy_bf16_scalar(float *out, float w, const void *v, int32_t hd) {
    const uint16_t *vr = v;
    for (int32_t i = 0; i < hd; i++) out[i] = out[i] + w * bf16_to_fp32(vr[i]);
}

static void cpu_axpy_fp8_scalar(float *out, float w, const void *v, int32_t hd) {
    const uint8_t *vr = v;
    for (int32_t i = 0; i < hd; i++) out[i] = out[i] + w * bk_fp8_e4m3_table[vr[i]];
}

const struct cpu_attn_kernels cpu_attn_kernels_scalar = {
    cpu_dot16_f32_scalar,  cpu_dot16_f16_scalar, cpu_axpy_f32_scalar,  cpu_axpy_f16_scalar,
    cpu_dot16_bf16_scalar, cpu_dot16_fp8_scalar, cpu_axpy_bf16_scalar, cpu_axpy_fp8_scalar};

void cpu_attn_row_head(const struct cpu_backend *c, const struct bk_kv_cache *kv, const struct bk_attn_params *p,
                       int32_t t, int32_t j, const float *q, float *out, float *scores, const struct cpu_attn_kernels *kn) {
    const int32_t hd = p->head_dim, nkv = p->n_kv_head, kvh = j / (p->n_head / p->n_kv_head);
    const struct bk_seq *s = &c->seqs[c->seq_idx[t]];
    const int32_t n_ctx = c->pos[t] + 1;
    const void *kp = kv->k[p->kv_layer], *vp = kv->v[p->kv_layer];
    const bool f16 = kv->dtype == BK_KV_F16;
    const size_t elt = bk_kv_dtype_size(kv->dtype);
    float (*dot)(const float *, const void *, int32_t) = kn->dot_f32;
    void (*axpy)(float *, float, const void *, int32_t) = kn->axpy_f32;
    /* fp8: K = code * k_scale, V = code * v_scale, so the scales multiply the score and the weight. */
    float k_mul = 1.0f, v_mul = 1.0f;
    switch (kv->dtype) {
    case BK_KV_F16: dot = kn->dot_f16; axpy = kn->axpy_f16; break;
    case BK_KV_BF16: dot = kn->dot_bf16; axpy = kn->axpy_bf16; break;
    case BK_KV_FP8_E4M3:
        dot = kn->dot_fp8;
        axpy = kn->axpy_fp8;
        cpu_kv_scales(kv, p->kv_layer, &k_mul, &v_mul);
        break;
    default: break;
    }
    /* With an f16 cache the query and the probabilities are rounded to f16 too, as ggml's matmul
     * converts its f32 operand to the f16 operand's type (keeps us closest to llama.cpp). bf16 and
     * fp8 caches read against the f32 query and probabilities (vLLM dequantizes the cache instead). */
    float *qr = scores + ((n_ctx + 15) & ~15);
    for (int32_t i = 0; i < hd; i++) qr[i] = f16 ? cpu_f16_lut[fp32_to_fp16(q[i])] : q[i];
    const float score_mul = k_mul * p->scale;
    float mx = -INFINITY;
    for (int32_t tau = 0; tau < n_ctx; tau++) {
        int32_t blk = s->block_table[tau / BK_KV_BLOCK], slot = tau % BK_KV_BLOCK;
        scores[tau] = dot(qr, cpu_kv_slot((void *)kp, blk, kvh, slot, nkv, hd, elt), hd) * score_mul;
        if (scores[tau] > mx) mx = scores[tau];
    }
    double sum = 0.0;
    for (int32_t tau = 0; tau < n_ctx; tau++) {
        scores[tau] = expf(scores[tau] - mx);
        sum += scores[tau];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t i = 0; i < hd; i++) out[i] = 0.0f;
    for (int32_t tau = 0; tau < n_ctx; tau++) {
        int32_t blk = s->block_table[tau / BK_KV_BLOCK], slot = tau % BK_KV_BLOCK;
        float w = scores[tau] * inv;
        if (f16) w = cpu_f16_lut[fp32_to_fp16(w)]; /* ggml rounds the probabilities to f16 for an f16 V */
        axpy(out, w * v_mul, cpu_kv_slot((void *)vp, blk, kvh, slot, nkv, hd, elt), hd);
    }
}

/* ---- reference ops ---- */

vllmc_status cpu_ref_embed(struct backend *be, const struct bk_tensor *table, float *out) {
    struct cpu_backend *c = cpu_be(be);
    if (!c->n_tokens) return vllmc_errorf(VLLMC_ERR_INVALID, "embed: no batch set");
    for (int32_t t = 0; t < c->n_tokens; t++) {
        int32_t id = c->token_ids[t];
        if (id < 0 || id >= table->ne[1])
            return vllmc_errorf(VLLMC_ERR_INVALID, "token id %d outside the vocabulary of %lld", id, (long long)table->ne[1]);
        dequantize_row(table->type, (const char *)table->data + (uint64_t)id * table->row_size_bytes,
                       out + (int64_t)t * table->ne[0], table->ne[0]);
    }
    return VLLMC_OK;
}

vllmc_status cpu_ref_rmsnorm(struct backend *be, const float *x, int64_t ld_x, const float *w, float eps,
                             int64_t n_rows, int64_t n_cols, float *out, int64_t ld_out) {
    (void)be;
    if (n_cols <= 0 || n_rows < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm: bad shape");
    if (!ld_x) ld_x = n_cols;
    if (!ld_out) ld_out = n_cols;
    for (int64_t r = 0; r < n_rows; r++) cpu_rmsnorm_row(x + r * ld_x, w, eps, n_cols, out + r * ld_out);
    return VLLMC_OK;
}

vllmc_status cpu_ref_rmsnorm_quantize(struct backend *be, const float *x, const float *w, float eps, int64_t n_rows,
                                      struct bk_act *out) {
    if (n_rows < 0 || n_rows > out->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "rmsnorm_quantize: %lld rows", (long long)n_rows);
    vllmc_status st = cpu_ref_rmsnorm(be, x, out->n_cols, w, eps, n_rows, out->n_cols, out->x, out->n_cols);
    if (st) return st;
    out->n_rows = n_rows;
    cpu_quantize_rows(out, 0, n_rows);
    return VLLMC_OK;
}

vllmc_status cpu_ref_quantize(struct backend *be, struct bk_act *act) {
    (void)be;
    if (act->n_rows < 0 || act->n_rows > act->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "quantize: bad rows");
    cpu_quantize_rows(act, 0, act->n_rows);
    return VLLMC_OK;
}

static const void *act_rows(const struct bk_act *act, const struct bk_tensor *w, uint64_t *row_bytes) {
    int f = bk_act_fmt_for_weight(w->type);
    *row_bytes = bk_act_row_bytes(f, act->n_cols);
    return act->q[f];
}

vllmc_status cpu_ref_matmul(struct backend *be, const struct bk_act *act, int n_out, const struct bk_matmul_out *outs) {
    (void)be;
    for (int i = 0; i < n_out; i++) {
        vllmc_status st = cpu_check_act_for_weight(act, outs[i].w);
        if (st) return st;
    }
    for (int i = 0; i < n_out; i++) {
        const struct bk_tensor *w = outs[i].w;
        const int64_t ld = outs[i].ld_y ? outs[i].ld_y : w->ne[1];
        uint64_t arb;
        const char *a = act_rows(act, w, &arb);
        for (int64_t r = 0; r < act->n_rows; r++)
            for (int64_t o = 0; o < w->ne[1]; o++) {
                float y = vec_dot_ref(w->type, w->ne[0], (const char *)w->data + (uint64_t)o * w->row_size_bytes,
                                      a + (uint64_t)r * arb);
                if (outs[i].bias) y += outs[i].bias[o];
                outs[i].y[r * ld + o] = y;
            }
    }
    return VLLMC_OK;
}

vllmc_status cpu_ref_add(struct backend *be, float *y, const float *x, int64_t n_rows, int64_t n_cols) {
    (void)be;
    for (int64_t i = 0; i < n_rows * n_cols; i++) y[i] += x[i];
    return VLLMC_OK;
}

static vllmc_status rope_check(const struct cpu_backend *c, int32_t n_head, int32_t head_dim, const struct bk_rope_params *p) {
    if (!c->n_tokens) return vllmc_errorf(VLLMC_ERR_INVALID, "rope: no batch set");
    if (n_head <= 0 || head_dim <= 0 || p->n_rot <= 0 || p->n_rot > head_dim || p->n_rot % 2 ||
        (p->mode != BK_ROPE_NORM && p->mode != BK_ROPE_NEOX))
        return vllmc_errorf(VLLMC_ERR_INVALID, "rope: n_rot %d, head_dim %d, mode %d", p->n_rot, head_dim, (int)p->mode);
    return VLLMC_OK;
}

vllmc_status cpu_ref_rope(struct backend *be, float *x, int64_t ld, int32_t n_head, int32_t head_dim,
                          const struct bk_rope_params *p) {
    struct cpu_backend *c = cpu_be(be);
    vllmc_status st = rope_check(c, n_head, head_dim, p);
    if (st) return st;
    if (!ld) ld = (int64_t)n_head * head_dim;
    for (int32_t t = 0; t < c->n_tokens; t++)
        for (int32_t h = 0; h < n_head; h++) cpu_rope_head(x + t * ld + (int64_t)h * head_dim, c->pos[t], p);
    return VLLMC_OK;
}

vllmc_status cpu_ref_attention(struct backend *be, struct bk_kv_cache *kv, const struct bk_attn_params *p,
                               const float *q, int64_t ld_q, const float *k, int64_t ld_k, const float *v,
                               int64_t ld_v, float *out) {
    struct cpu_backend *c = cpu_be(be);
    vllmc_status st = cpu_attn_check(c, kv, p);
    if (st) return st;
    const int32_t hd = p->head_dim;
    if (!ld_q) ld_q = (int64_t)p->n_head * hd;
    if (!ld_k) ld_k = (int64_t)p->n_kv_head * hd;
    if (!ld_v) ld_v = (int64_t)p->n_kv_head * hd;
    int32_t max_pos = 0;
    for (int32_t t = 0; t < c->n_tokens; t++) max_pos = VLLMC_MAX(max_pos, c->pos[t]);
    if ((st = cpu_ensure_attn_scratch(c, max_pos + 1, hd))) return st;
    cpu_kv_store(c, kv, p, 0, c->n_tokens, k, ld_k, v, ld_v);
    for (int32_t t = 0; t < c->n_tokens; t++)
        for (int32_t j = 0; j < p->n_head; j++)
            cpu_attn_row_head(c, kv, p, t, j, q + t * ld_q + (int64_t)j * hd, out + ((int64_t)t * p->n_head + j) * hd,
                              c->attn_scratch, &cpu_attn_kernels_scalar);
    return VLLMC_OK;
}

vllmc_status cpu_ref_swiglu_quantize(struct backend *be, const float *gate, const float *up, int64_t ld,
                                     int64_t n_rows, struct bk_act *out) {
    (void)be;
    if (n_rows < 0 || n_rows > out->max_rows) return vllmc_errorf(VLLMC_ERR_INVALID, "swiglu: %lld rows", (long long)n_rows);
    const int64_t n = out->n_cols;
    if (!ld) ld = n;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[r * ld + i];
            out->x[r * n + i] = (g / (1.0f + expf(-g))) * up[r * ld + i];
        }
    out->n_rows = n_rows;
    cpu_quantize_rows(out, 0, n_rows);
    return VLLMC_OK;
}

vllmc_status cpu_ref_get_rows(struct backend *be, const float *x, int64_t n_cols, float *out) {
    struct cpu_backend *c = cpu_be(be);
    for (int32_t i = 0; i < c->n_logits; i++)
        memmove(out + (int64_t)i * n_cols, x + (int64_t)c->logit_rows[i] * n_cols, (size_t)n_cols * sizeof(float));
    return VLLMC_OK;
}

static void argmax_rows(const float *logits, int64_t n_rows, int64_t n, int32_t *argmax) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *l = logits + r * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (l[i] > l[best]) best = i;
        argmax[r] = (int32_t)best;
    }
}

vllmc_status cpu_ref_logits(struct backend *be, const struct bk_act *act, const struct bk_tensor *w, float *logits,
                            int32_t *argmax) {
    struct bk_matmul_out o = {.w = w, .y = logits};
    vllmc_status st = cpu_ref_matmul(be, act, 1, &o);
    if (st) return st;
    if (argmax) argmax_rows(logits, act->n_rows, w->ne[1], argmax);
    return VLLMC_OK;
}
