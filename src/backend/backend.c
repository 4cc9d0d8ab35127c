/* Helpers shared by every backend and by the model code: activation formats, their row sizes, and
 * allocation of activation buffers through a backend's alloc op. */
#include "backend/backend.h"
#include <string.h>
#include "quant/blocks.h"
#include "quant/quant.h"

int bk_act_fmt_for_weight(uint32_t type) {
    const struct quant_traits *tr = quant_traits(type);
    if (!tr || !tr->supported) return -1;
    switch (tr->vec_dot_type) {
    case GGML_TYPE_F32: return BK_ACT_F32;
    case GGML_TYPE_F16: return BK_ACT_F16;
    case GGML_TYPE_BF16: return BK_ACT_BF16;
    case GGML_TYPE_Q8_0: return BK_ACT_Q8_0;
    case GGML_TYPE_Q8_1: return BK_ACT_Q8_1;
    case GGML_TYPE_Q8_K: return BK_ACT_Q8_K;
    default: return -1;
    }
}

uint64_t bk_act_row_bytes(int fmt, int64_t n_cols) {
    if (n_cols <= 0) return 0;
    switch (fmt) {
    case BK_ACT_F32: return (uint64_t)n_cols * 4;
    case BK_ACT_F16:
    case BK_ACT_BF16: return (uint64_t)n_cols * 2;
    case BK_ACT_Q8_0: return n_cols % QK8_0 ? 0 : (uint64_t)(n_cols / QK8_0) * sizeof(block_q8_0);
    case BK_ACT_Q8_1: return n_cols % QK8_1 ? 0 : (uint64_t)(n_cols / QK8_1) * sizeof(block_q8_1);
    case BK_ACT_Q8_K: return n_cols % QK_K ? 0 : (uint64_t)(n_cols / QK_K) * sizeof(block_q8_K);
    /* the quants, then a float scale, an int16 sum and a float sum of squares every 16 (each array 16-aligned) */
    case BK_ACT_Q8_KD: return n_cols % QK_K ? 0 : (uint64_t)n_cols + (uint64_t)(n_cols / 16) * 10 + 48;
    default: return 0;
    }
}

const char *bk_act_fmt_name(int fmt) {
    static const char *names[BK_ACT_NFMT] = {"F32", "F16", "Q8_0", "Q8_1", "Q8_K", "BF16", "Q8_KD"};
    return fmt >= 0 && fmt < BK_ACT_NFMT ? names[fmt] : "?";
}

vllmc_status bk_act_alloc(struct backend *be, int64_t max_rows, int64_t n_cols, uint32_t fmts, struct bk_act *a) {
    memset(a, 0, sizeof(*a));
    if (max_rows <= 0 || n_cols <= 0) return vllmc_errorf(VLLMC_ERR_INVALID, "activation of %lld x %lld", (long long)max_rows, (long long)n_cols);
    fmts |= BK_ACT_BIT(BK_ACT_F32);
    a->n_cols = n_cols;
    a->max_rows = max_rows;
    a->fmts = fmts;
    for (int f = 0; f < BK_ACT_NFMT; f++) {
        if (!(fmts & BK_ACT_BIT(f))) continue;
        uint64_t rb = bk_act_row_bytes(f, n_cols);
        if (!rb) {
            bk_act_free(be, a);
            return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "activation format %s needs a row length that is a block multiple, got %lld",
                                bk_act_fmt_name(f), (long long)n_cols);
        }
        void *p = NULL;
        vllmc_status st = be->ops->alloc(be, (size_t)(rb * (uint64_t)max_rows), &p);
        if (st != VLLMC_OK) { bk_act_free(be, a); return st; }
        a->q[f] = p;
    }
    a->x = a->q[BK_ACT_F32];
    return VLLMC_OK;
}

void bk_act_free(struct backend *be, struct bk_act *a) {
    if (!a) return;
    for (int f = 0; f < BK_ACT_NFMT; f++)
        if (a->q[f]) be->ops->free(be, a->q[f]);
    memset(a, 0, sizeof(*a));
}

uint64_t bk_kv_block_bytes(enum bk_kv_dtype dtype, int32_t n_kv_head, int32_t head_dim) {
    uint64_t elt = bk_kv_dtype_size(dtype);
    return (uint64_t)BK_KV_BLOCK * (uint64_t)n_kv_head * (uint64_t)head_dim * elt;
}
