/* Multi-row quantized products (decode GEMV, prefill GEMM) on top of the dispatched dot kernels.
 * Each output is exactly one kernel call on one (weight row, activation row) pair, so results are
 * bit-identical to vec_dot_ref for any row range, batch size or thread split. */
#include "dot_impl.h"
#include "gemv.h"

void quant_gemv(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                const void *act, float *out) {
    vec_dot_fn f = quant_get_vec_dot(wtype);
    VLLMC_ASSERT(f != NULL && n_cols % quant_traits(wtype)->block_size == 0);
    const uint8_t *wr = (const uint8_t *)w + (size_t)row0 * w_row_bytes;
    for (int64_t r = 0; r < n_rows; r++, wr += w_row_bytes) out[r] = f(n_cols, wr, act);
}

/* Activation rows are taken in tiles that fit in L2 next to one weight row; within a tile every
 * weight row is streamed from memory once and dotted with all rows of the tile. */
#define GEMM_ACT_TILE_BYTES (512 * 1024)

static void gemm_dots(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                      const void *act, size_t act_row_bytes, int64_t n_act, float *out, int64_t out_stride);

void quant_gemm(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                const void *act, size_t act_row_bytes, int64_t n_act, float *out, int64_t out_stride) {
    /* Q4_K / Q5_K / Q6_K on AMX tiles where the CPU has them: whole 16 x 16 tiles there, the edges below (the same bits).
     * From 32 activation rows: the weights' tiles are built once a call, which one tile of 16 rows does not repay when
     * the weights stream from DRAM (a CPU engine step of 16 sequences: 263 ms a step on the VNNI kernels, 288-293 on the
     * tiles; 32 sequences: 512 -> 401 ms; BENCHMARKS.md "Prefill on AMX tiles"). */
    const int64_t nr = n_rows & ~(int64_t)15, na = n_act & ~(int64_t)15;
    if (nr > 0 && na >= QUANT_AMX_MIN_ACT &&
        quant_gemm_amx(wtype, n_cols, (const uint8_t *)w + (size_t)row0 * w_row_bytes, w_row_bytes, nr, act, act_row_bytes, na, out,
                       out_stride)) {
        if (n_rows > nr)
            gemm_dots(wtype, n_cols, w, w_row_bytes, row0 + nr, n_rows - nr, act, act_row_bytes, n_act, out + nr, out_stride);
        if (n_act > na)
            gemm_dots(wtype, n_cols, w, w_row_bytes, row0, nr, (const uint8_t *)act + (size_t)na * act_row_bytes, act_row_bytes,
                      n_act - na, out + (size_t)na * (size_t)out_stride, out_stride);
        return;
    }
    gemm_dots(wtype, n_cols, w, w_row_bytes, row0, n_rows, act, act_row_bytes, n_act, out, out_stride);
}

static void gemm_dots(uint32_t wtype, int64_t n_cols, const void *w, size_t w_row_bytes, int64_t row0, int64_t n_rows,
                      const void *act, size_t act_row_bytes, int64_t n_act, float *out, int64_t out_stride) {
    vec_dot_fn f = quant_get_vec_dot(wtype);
    VLLMC_ASSERT(f != NULL && n_cols % quant_traits(wtype)->block_size == 0);
    int64_t tile = act_row_bytes ? (int64_t)(GEMM_ACT_TILE_BYTES / act_row_bytes) : n_act;
    if (tile < 8) tile = 8;
    const uint8_t *w0 = (const uint8_t *)w + (size_t)row0 * w_row_bytes;
    vec_dot_multi_fn fm = dot_get_multi(wtype);
    if (fm) { /* weight blocks unpacked once for up to DOT_MULTI_MAX activation rows */
        for (int64_t i0 = 0; i0 < n_act; i0 += tile) {
            int64_t i1 = VLLMC_MIN(n_act, i0 + tile);
            const uint8_t *wr = w0;
            for (int64_t r = 0; r < n_rows; r++, wr += w_row_bytes) {
                for (int64_t i = i0; i < i1; i += DOT_MULTI_MAX) {
                    int na = (int)VLLMC_MIN(DOT_MULTI_MAX, i1 - i);
                    float tmp[DOT_MULTI_MAX];
                    fm(n_cols, wr, (const uint8_t *)act + (size_t)i * act_row_bytes, act_row_bytes, na, tmp);
                    for (int k = 0; k < na; k++) out[(i + k) * out_stride + r] = tmp[k];
                }
            }
        }
        return;
    }
    for (int64_t i0 = 0; i0 < n_act; i0 += tile) {
        int64_t i1 = VLLMC_MIN(n_act, i0 + tile);
        const uint8_t *wr = w0;
        for (int64_t r = 0; r < n_rows; r++, wr += w_row_bytes) {
            const uint8_t *ar = (const uint8_t *)act + (size_t)i0 * act_row_bytes;
            for (int64_t i = i0; i < i1; i++, ar += act_row_bytes) out[i * out_stride + r] = f(n_cols, wr, ar);
        }
    }
}
