/* Batched Q4_0 / Q5_0 / Q8_0 matmul kernels of the CPU backend: every output against vec_dot_ref bit
 * for bit on fresh random weights (all byte values, so Q8_0 weights of -128 too) and activations, for
 * row lengths with and without a partial group of 8 blocks and over several 1,024-column segments,
 * 1 to 19 activation rows, and a weight-row range starting inside the matrix. Skips (passes) where
 * the CPU has no AVX-512 VNNI. */
#include <string.h>
#include "backend/cpu/matmul_batch.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"

static void check_type(uint32_t t, int64_t n_cols, int64_t n_rows, int64_t n_act) {
    const size_t wrb = quant_row_size(t, n_cols), arb = quant_row_size(GGML_TYPE_Q8_0, n_cols);
    const size_t bsz = quant_traits(t)->type_size;
    uint8_t *w = malloc(wrb * (size_t)n_rows);
    for (size_t i = 0; i < wrb * (size_t)n_rows; i++) w[i] = (uint8_t)test_rand_u64();
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t b = 0; b < n_cols / 32; b++) {
            ggml_half d = fp32_to_fp16(0.02f * test_rand_normal());
            memcpy(w + (size_t)r * wrb + (size_t)b * bsz, &d, sizeof(d)); /* d is the first field of each block */
        }
    float *x = malloc(sizeof(float) * (size_t)(n_cols * n_act));
    for (int64_t i = 0; i < n_cols * n_act; i++) x[i] = test_rand_normal() * (i % 7 == 0 ? 4.0f : 1.0f);
    uint8_t *a = malloc(arb * (size_t)n_act);
    for (int64_t i = 0; i < n_act; i++) quantize_row_act(t, x + i * n_cols, a + (size_t)i * arb, n_cols);
    void *prep = malloc(cpu_mmb_prep_row_bytes(n_cols) * (size_t)n_act);
    cpu_mmb_prepare(n_cols, a, arb, n_act, prep);
    const int64_t row0 = n_rows > 3 ? 3 : 0, nr = n_rows - row0, ld = nr + 5;
    float *out = malloc(sizeof(float) * (size_t)(ld * n_act));
    for (int64_t i = 0; i < ld * n_act; i++) out[i] = -1.0f;
    cpu_mmb_gemm(t, n_cols, w, wrb, row0, nr, prep, n_act, out, ld);
    int bad = 0, pad_bad = 0;
    for (int64_t i = 0; i < n_act; i++) {
        for (int64_t r = 0; r < nr; r++) {
            float ref = vec_dot_ref(t, n_cols, w + (size_t)(row0 + r) * wrb, a + (size_t)i * arb);
            if (memcmp(&ref, &out[i * ld + r], sizeof(float))) bad++;
        }
        for (int64_t r = nr; r < ld; r++) pad_bad += out[i * ld + r] != -1.0f;
    }
    CHECK_MSG(bad == 0, "%s n_cols %lld n_act %lld: %d of %lld outputs differ from vec_dot_ref", quant_traits(t)->name,
              (long long)n_cols, (long long)n_act, bad, (long long)(nr * n_act));
    CHECK(pad_bad == 0);
    /* a batch gives each row the bits it gets alone */
    float *one = malloc(sizeof(float) * (size_t)nr);
    int bad1 = 0;
    for (int64_t i = 0; i < n_act; i++) {
        cpu_mmb_gemm(t, n_cols, w, wrb, row0, nr, (const uint8_t *)prep + (size_t)i * cpu_mmb_prep_row_bytes(n_cols), 1,
                     one, nr);
        bad1 += memcmp(one, out + i * ld, sizeof(float) * (size_t)nr) != 0;
    }
    CHECK(bad1 == 0);
    free(one);
    free(out);
    free(prep);
    free(a);
    free(x);
    free(w);
}

int main(void) {
    test_seed_auto("test_matmul_batch");
    const uint32_t types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0};
    if (!cpu_mmb_supported(GGML_TYPE_Q8_0)) {
        printf("test_matmul_batch: no AVX-512 VNNI active, kernels not run\n");
        CHECK(!cpu_mmb_supported(GGML_TYPE_Q4_K));
        return test_finish("test_matmul_batch");
    }
    CHECK(!cpu_mmb_supported(GGML_TYPE_Q4_K) && !cpu_mmb_supported(GGML_TYPE_Q4_1));
    const int64_t cols[] = {32, 96, 256, 288, 896, 1024, 1056, 2080, 4864};
    const int64_t acts[] = {1, 2, 3, 4, 5, 8, 16, 17, 19};
    for (int ti = 0; ti < 3; ti++)
        for (size_t ci = 0; ci < sizeof(cols) / sizeof(cols[0]); ci++)
            for (size_t ai = 0; ai < sizeof(acts) / sizeof(acts[0]); ai++)
                check_type(types[ti], cols[ci], 13 + (int64_t)(test_rand_u64() % 20), acts[ai]);
    return test_finish("test_matmul_batch");
}
