/* Per-type traits of every ggml type id: block size, bytes per block, activation pairing. */
#include "quant.h"
#include "blocks.h"

#define T(id, nm, bs, ts, sup, vd) [id] = {nm, bs, ts, sup, vd}
static const struct quant_traits g_traits[GGML_TYPE_COUNT] = {
    T(GGML_TYPE_F32, "F32", 1, 4, true, GGML_TYPE_F32),
    T(GGML_TYPE_F16, "F16", 1, 2, true, GGML_TYPE_F32),
    T(GGML_TYPE_BF16, "BF16", 1, 2, true, GGML_TYPE_F32),
    T(GGML_TYPE_Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), true, GGML_TYPE_Q8_0),
    T(GGML_TYPE_Q4_1, "Q4_1", QK4_1, sizeof(block_q4_1), true, GGML_TYPE_Q8_1),
    T(GGML_TYPE_Q5_0, "Q5_0", QK5_0, sizeof(block_q5_0), true, GGML_TYPE_Q8_0),
    T(GGML_TYPE_Q5_1, "Q5_1", QK5_1, sizeof(block_q5_1), true, GGML_TYPE_Q8_1),
    T(GGML_TYPE_Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), true, GGML_TYPE_Q8_0),
    T(GGML_TYPE_Q8_1, "Q8_1", QK8_1, sizeof(block_q8_1), false, GGML_TYPE_Q8_1),
    T(GGML_TYPE_Q2_K, "Q2_K", QK_K, sizeof(block_q2_K), true, GGML_TYPE_Q8_K),
    T(GGML_TYPE_Q3_K, "Q3_K", QK_K, sizeof(block_q3_K), true, GGML_TYPE_Q8_K),
    T(GGML_TYPE_Q4_K, "Q4_K", QK_K, sizeof(block_q4_K), true, GGML_TYPE_Q8_K),
    T(GGML_TYPE_Q5_K, "Q5_K", QK_K, sizeof(block_q5_K), true, GGML_TYPE_Q8_K),
    T(GGML_TYPE_Q6_K, "Q6_K", QK_K, sizeof(block_q6_K), true, GGML_TYPE_Q8_K),
    T(GGML_TYPE_Q8_K, "Q8_K", QK_K, sizeof(block_q8_K), false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ2_XXS, "IQ2_XXS", QK_K, 66, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ2_XS, "IQ2_XS", QK_K, 74, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ3_XXS, "IQ3_XXS", QK_K, 98, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ1_S, "IQ1_S", QK_K, 50, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ4_NL, "IQ4_NL", QK4_NL, sizeof(block_iq4_nl), true, GGML_TYPE_Q8_0),
    T(GGML_TYPE_IQ3_S, "IQ3_S", QK_K, 110, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ2_S, "IQ2_S", QK_K, 82, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_IQ4_XS, "IQ4_XS", QK_K, sizeof(block_iq4_xs), true, GGML_TYPE_Q8_K),
    T(GGML_TYPE_I8, "I8", 1, 1, false, GGML_TYPE_I8),
    T(GGML_TYPE_I16, "I16", 1, 2, false, GGML_TYPE_I16),
    T(GGML_TYPE_I32, "I32", 1, 4, false, GGML_TYPE_I32),
    T(GGML_TYPE_I64, "I64", 1, 8, false, GGML_TYPE_I64),
    T(GGML_TYPE_F64, "F64", 1, 8, false, GGML_TYPE_F64),
    T(GGML_TYPE_IQ1_M, "IQ1_M", QK_K, 56, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_TQ1_0, "TQ1_0", QK_K, 54, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_TQ2_0, "TQ2_0", QK_K, 66, false, GGML_TYPE_Q8_K),
    T(GGML_TYPE_MXFP4, "MXFP4", QK_MXFP4, sizeof(block_mxfp4), true, GGML_TYPE_Q8_0),
    T(GGML_TYPE_NVFP4, "NVFP4", 64, 36, false, GGML_TYPE_Q8_0),
    T(GGML_TYPE_Q1_0, "Q1_0", 128, 18, false, GGML_TYPE_Q8_0),
    T(GGML_TYPE_Q2_0, "Q2_0", 64, 18, false, GGML_TYPE_Q8_0),
};
#undef T

const struct quant_traits *quant_traits(uint32_t type) {
    if (type >= GGML_TYPE_COUNT || !g_traits[type].name) return NULL;
    return &g_traits[type];
}

uint64_t quant_row_size(uint32_t type, int64_t n) {
    const struct quant_traits *t = quant_traits(type);
    if (!t || n < 0 || n % t->block_size) return 0;
    return (uint64_t)(n / t->block_size) * (uint64_t)t->type_size;
}
