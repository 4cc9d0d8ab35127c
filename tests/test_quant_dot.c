/* Tests of the activation quantizers and the quantized dot products (scalar reference, every SIMD
 * ISA this CPU has, quant_gemv / quant_gemm), on fresh random weights and activations:
 *  (a) every ISA gives the scalar reference's bits;
 *  (b) dot == dequantize_row(w) . dequantized activation in f64, within (n_terms + 10) * 2^-24 * T
 *      (T = sum of |products| of each scale/min part; Q4_1/Q5_1 also allow the f16 rounding of s);
 *  (c) with unit scales and small integer activations the dot is an exact integer, compared with
 *      an element-wise decoder written here from GGUF-QUANTS.md 3.x (independent of the kernels);
 *  (d) quant_gemv / quant_gemm == vec_dot_ref per (row, activation) pair, bit-exact;
 *  (e) Q8_0 / Q8_1 / Q8_K quantizers vs ggml's formulas recomputed here and hand-checked cases. */
#include <string.h>
#include "test.h"
#include "quant/quant.h"
#include "quant/blocks.h"
#include "quant/gemv.h"

static const uint32_t k_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
    GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_MXFP4, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS,
};

static uint32_t rnd(uint32_t n) { return (uint32_t)(test_rand_u64() % n); }
static int rnd_range(int lo, int hi) { return lo + (int)rnd((uint32_t)(hi - lo + 1)); }
static float rnd_sign(void) { return (test_rand_u64() & 1) ? -1.0f : 1.0f; }

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Activation row bytes for n elements of the type wtype pairs with. */
static size_t act_bytes(uint32_t wtype, int64_t n) {
    uint32_t at = (uint32_t)quant_traits(wtype)->vec_dot_type;
    return at == GGML_TYPE_F32 ? (size_t)n * 4 : (size_t)quant_row_size(at, n);
}

/* ---- (c) independent element decoder: integer parts with d = dmin = 1 ----
 * Returns the value as wq*d - wm*dmin (K-quants with mins), wq*d + m (Q4_1/Q5_1: wm holds -m),
 * wq*d (others). *scale_d / *scale_m are the f32 factors (d, dmin or m) applied to wq / wm. */
static void elem_decode(uint32_t t, const uint8_t *blk, int i, int64_t *wq, int64_t *wm, double *sd, double *sm) {
    *wm = 0;
    *sm = 0;
    switch (t) {
    case GGML_TYPE_Q4_0: {
        const block_q4_0 *b = (const void *)blk;
        int q = i < 16 ? (b->qs[i] & 15) : (b->qs[i - 16] >> 4);
        *wq = q - 8; *sd = fp16_to_fp32(b->d); return;
    }
    case GGML_TYPE_Q4_1: {
        const block_q4_1 *b = (const void *)blk;
        int q = i < 16 ? (b->qs[i] & 15) : (b->qs[i - 16] >> 4);
        *wq = q; *sd = fp16_to_fp32(b->d); *wm = -1; *sm = fp16_to_fp32(b->m); return;
    }
    case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: {
        const uint8_t *qh = blk + (t == GGML_TYPE_Q5_0 ? 2 : 4), *qs = qh + 4;
        uint32_t h = qh[i / 8] >> (i % 8) & 1;
        int q = (i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4)) | (int)(h << 4);
        ggml_half d; memcpy(&d, blk, 2);
        *sd = fp16_to_fp32(d);
        if (t == GGML_TYPE_Q5_0) *wq = q - 16;
        else { ggml_half m; memcpy(&m, blk + 2, 2); *wq = q; *wm = -1; *sm = fp16_to_fp32(m); }
        return;
    }
    case GGML_TYPE_Q8_0: {
        const block_q8_0 *b = (const void *)blk;
        *wq = b->qs[i]; *sd = fp16_to_fp32(b->d); return;
    }
    case GGML_TYPE_IQ4_NL: {
        const block_iq4_nl *b = (const void *)blk;
        int q = i < 16 ? (b->qs[i] & 15) : (b->qs[i - 16] >> 4);
        *wq = kvalues_iq4nl[q]; *sd = fp16_to_fp32(b->d); return;
    }
    case GGML_TYPE_MXFP4: {
        const block_mxfp4 *b = (const void *)blk;
        int q = i < 16 ? (b->qs[i] & 15) : (b->qs[i - 16] >> 4);
        *wq = kvalues_mxfp4[q]; *sd = ldexp(1.0, (int)b->e - 128); return;
    }
    case GGML_TYPE_Q2_K: {
        const block_q2_K *b = (const void *)blk;
        int h = i / 128, g = (i % 128) / 32, l = i % 32;
        int q = (b->qs[32 * h + l] >> (2 * g)) & 3;
        *wq = (b->scales[i / 16] & 15) * q; *wm = b->scales[i / 16] >> 4;
        *sd = fp16_to_fp32(b->d); *sm = fp16_to_fp32(b->dmin); return;
    }
    case GGML_TYPE_Q3_K: {
        const block_q3_K *b = (const void *)blk;
        int h = i / 128, g = (i % 128) / 32, l = i % 32, j = i / 16;
        int lo = (b->qs[32 * h + l] >> (2 * g)) & 3;
        int hb = (b->hmask[l] >> (i / 32)) & 1;
        int slo = j < 8 ? (b->scales[j % 8] & 15) : (b->scales[j % 8] >> 4);
        int shi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        *wq = ((slo | shi << 4) - 32) * (hb ? lo : lo - 4); *sd = fp16_to_fp32(b->d); return;
    }
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: {
        const uint8_t *S = blk + 4;
        const uint8_t *qh = blk + 16, *qs = blk + (t == GGML_TYPE_Q4_K ? 16 : 48);
        int c = i / 64, r = i % 64, s = i / 32, sc, m;
        int q = r < 32 ? (qs[32 * c + r % 32] & 15) : (qs[32 * c + r % 32] >> 4);
        if (t == GGML_TYPE_Q5_K) q += 16 * ((qh[i % 32] >> (i / 32)) & 1);
        if (s < 4) { sc = S[s] & 63; m = S[s + 4] & 63; }
        else { sc = (S[s + 4] & 15) | ((S[s - 4] >> 6) << 4); m = (S[s + 4] >> 4) | ((S[s] >> 6) << 4); }
        ggml_half d, dmin; memcpy(&d, blk, 2); memcpy(&dmin, blk + 2, 2);
        *wq = sc * q; *wm = m; *sd = fp16_to_fp32(d); *sm = fp16_to_fp32(dmin); return;
    }
    case GGML_TYPE_Q6_K: {
        const block_q6_K *b = (const void *)blk;
        int h = i / 128, g = (i % 128) / 32, l = i % 32;
        int lo = g < 2 ? (b->ql[64 * h + 32 * (g % 2) + l] & 15) : (b->ql[64 * h + 32 * (g % 2) + l] >> 4);
        int hi = (b->qh[32 * h + l] >> (2 * g)) & 3;
        *wq = b->scales[i / 16] * ((lo | hi << 4) - 32); *sd = fp16_to_fp32(b->d); return;
    }
    case GGML_TYPE_IQ4_XS: {
        const block_iq4_xs *b = (const void *)blk;
        int sb = i / 32, j = i % 32;
        int q = j < 16 ? (b->qs[16 * sb + j] & 15) : (b->qs[16 * sb + j - 16] >> 4);
        int ls = ((b->scales_l[sb / 2] >> (4 * (sb % 2))) & 15) | (((b->scales_h >> (2 * sb)) & 3) << 4);
        *wq = (ls - 32) * kvalues_iq4nl[q]; *sd = fp16_to_fp32(b->d); return;
    }
    default: *wq = 0; *sd = 0; return;
    }
}

/* Fill n_blocks weight blocks of type t with random bits and sane scales. exact: unit scales
 * (d = dmin = 1, MXFP4 e = 128) and small integer mins / float weights, for check (c). */
static void make_weights(uint32_t t, void *w, int64_t n, bool exact) {
    const struct quant_traits *tr = quant_traits(t);
    int64_t nb = n / tr->block_size;
    uint8_t *p = w;
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = exact ? (float)rnd_range(-8, 8) : test_rand_normal();
            if (t == GGML_TYPE_F32) memcpy(p + 4 * i, &v, 4);
            else { uint16_t h = t == GGML_TYPE_F16 ? fp32_to_fp16(v) : fp32_to_bf16(v); memcpy(p + 2 * i, &h, 2); }
        }
        return;
    }
    for (int64_t k = 0; k < nb * tr->type_size; k++) p[k] = (uint8_t)test_rand_u64();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * tr->type_size;
        ggml_half d = exact ? 0x3C00 : fp32_to_fp16(rnd_sign() * (0.002f + 0.02f * test_rand_uniform()));
        ggml_half dmin = exact ? 0x3C00 : fp32_to_fp16(0.002f + 0.02f * test_rand_uniform());
        ggml_half m = exact ? fp32_to_fp16((float)rnd_range(-8, 8)) : fp32_to_fp16(rnd_sign() * 0.1f * test_rand_uniform());
        switch (t) {
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
            memcpy(blk, &d, 2); break;
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: memcpy(blk, &d, 2); memcpy(blk + 2, &m, 2); break;
        case GGML_TYPE_MXFP4: blk[0] = exact ? 128 : (uint8_t)rnd_range(110, 130); break;
        case GGML_TYPE_Q2_K: memcpy(blk + 80, &d, 2); memcpy(blk + 82, &dmin, 2); break;
        case GGML_TYPE_Q3_K: memcpy(blk + 108, &d, 2); break;
        case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: memcpy(blk, &d, 2); memcpy(blk + 2, &dmin, 2); break;
        case GGML_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        default: break;
        }
    }
}

/* Activation row for weight type t: quantized from random normals, or (exact) unit scale and
 * integer values in [-amax, amax] built directly. */
static void make_act(uint32_t t, void *a, int64_t n, bool exact, int amax) {
    uint32_t at = (uint32_t)quant_traits(t)->vec_dot_type;
    if (!exact) {
        float *x = malloc((size_t)n * sizeof(float));
        float sc = 0.1f + 3.0f * test_rand_uniform();
        for (int64_t i = 0; i < n; i++) x[i] = sc * test_rand_normal();
        quantize_row_act(t, x, a, n);
        free(x);
        return;
    }
    if (at == GGML_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)a)[i] = (float)rnd_range(-amax, amax);
    } else if (at == GGML_TYPE_Q8_0) {
        block_q8_0 *y = a;
        for (int64_t b = 0; b < n / 32; b++) {
            y[b].d = 0x3C00;
            for (int j = 0; j < 32; j++) y[b].qs[j] = (int8_t)rnd_range(-amax, amax);
        }
    } else if (at == GGML_TYPE_Q8_1) {
        block_q8_1 *y = a;
        for (int64_t b = 0; b < n / 32; b++) {
            int s = 0;
            y[b].d = 0x3C00;
            for (int j = 0; j < 32; j++) s += y[b].qs[j] = (int8_t)rnd_range(-amax, amax);
            y[b].s = fp32_to_fp16((float)s);
        }
    } else {
        block_q8_K *y = a;
        for (int64_t b = 0; b < n / 256; b++) {
            y[b].d = 1.0f;
            for (int k = 0; k < 16; k++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += y[b].qs[16 * k + j] = (int8_t)rnd_range(-amax, amax);
                y[b].bsums[k] = (int16_t)s;
            }
        }
    }
}

/* Activation element i as f64 (the value the dot product uses). */
static double act_value(uint32_t t, const void *a, int64_t i) {
    uint32_t at = (uint32_t)quant_traits(t)->vec_dot_type;
    if (at == GGML_TYPE_F32) return ((const float *)a)[i];
    if (at == GGML_TYPE_Q8_0) { const block_q8_0 *y = a; return (double)fp16_to_fp32(y[i / 32].d) * y[i / 32].qs[i % 32]; }
    if (at == GGML_TYPE_Q8_1) { const block_q8_1 *y = a; return (double)fp16_to_fp32(y[i / 32].d) * y[i / 32].qs[i % 32]; }
    const block_q8_K *y = a;
    return (double)y[i / 256].d * y[i / 256].qs[i % 256];
}

static bool is_float_type(uint32_t t) { return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16; }

static double float_weight(uint32_t t, const void *w, int64_t i) {
    if (t == GGML_TYPE_F32) return ((const float *)w)[i];
    uint16_t h; memcpy(&h, (const uint8_t *)w + 2 * i, 2);
    return t == GGML_TYPE_F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

static void test_one(uint32_t t, int64_t n) {
    const struct quant_traits *tr = quant_traits(t);
    const char *nm = tr->name;
    size_t wb = is_float_type(t) ? (size_t)n * tr->type_size : (size_t)quant_row_size(t, n);
    uint8_t *w = malloc(wb), *a = malloc(act_bytes(t, n));
    float *deq = malloc((size_t)n * sizeof(float));

    /* (a) + (b): random weights and quantized random activations */
    for (int trial = 0; trial < 4; trial++) {
        make_weights(t, w, n, false);
        make_act(t, a, n, false, 0);
        float ref = vec_dot_ref(t, n, w, a);
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            vec_dot_fn f = quant_get_vec_dot_isa(t, isa);
            if (!quant_isa_supported(isa)) { CHECK(f == NULL); continue; }
            CHECK(f != NULL);
            if (!f) continue;
            float got = f(n, w, a);
            CHECK_MSG(f2u(got) == f2u(ref), "%s n=%lld isa=%d: %.9g vs ref %.9g", nm, (long long)n, isa, got, ref);
        }
        dequantize_row(t, w, deq, n);
        double exact = 0, bound = 0, extra = 0;
        int64_t bs = tr->block_size;
        for (int64_t i = 0; i < n; i++) {
            double av = act_value(t, a, i);
            exact += (double)deq[i] * av;
            if (is_float_type(t)) { bound += fabs(float_weight(t, w, i) * av); continue; }
            int64_t wq, wm; double sd, sm;
            elem_decode(t, w + (i / bs) * tr->type_size, (int)(i % bs), &wq, &wm, &sd, &sm);
            bound += fabs(sd * (double)wq * av) + fabs(sm * (double)wm * av);
            if (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1) extra += fabs(sm) * fabs(av) * 0x1p-9;
        }
        int64_t n_terms = is_float_type(t) ? n : n / bs;
        double tol = (double)(n_terms + 10) * 0x1p-24 * bound + extra;
        CHECK_MSG(fabs((double)ref - exact) <= tol, "%s n=%lld: dot %.9g vs dequantized f64 %.9g (tol %g)", nm,
                  (long long)n, ref, exact, tol);
    }

    /* (c): unit scales, small integer activations -> exact integer result */
    for (int trial = 0; trial < 4; trial++) {
        int64_t m = is_float_type(t) ? n : VLLMC_MIN(n, 2 * tr->block_size * (tr->block_size == 32 ? 8 : 1));
        make_weights(t, w, m, true);
        make_act(t, a, m, true, 7);
        double want = 0;
        for (int64_t i = 0; i < m; i++) {
            double av = act_value(t, a, i);
            if (is_float_type(t)) { want += float_weight(t, w, i) * av; continue; }
            int64_t wq, wm; double sd, sm;
            elem_decode(t, w + (i / tr->block_size) * tr->type_size, (int)(i % tr->block_size), &wq, &wm, &sd, &sm);
            want += (sd * (double)wq - sm * (double)wm) * av;
        }
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            vec_dot_fn f = quant_get_vec_dot_isa(t, isa);
            if (!f) continue;
            float got = f(m, w, a);
            CHECK_MSG((double)got == want, "%s exact n=%lld isa=%d: got %.9g want %.9g", nm, (long long)m, isa, got, want);
        }
    }
    free(w);
    free(a);
    free(deq);
}

/* (d) gemv / gemm vs per-pair vec_dot_ref, odd row counts, padded rows, several batch sizes; n = 0: the
 * type's default length, else n columns (long K-quant rows: quant_gemm's column segments). */
static void test_gemv(uint32_t t, int64_t n) {
    const struct quant_traits *tr = quant_traits(t);
    if (!n) n = tr->block_size == 256 ? 512 : tr->block_size == 32 ? 320 : 100;
    int64_t n_rows = 7;
    size_t row = is_float_type(t) ? (size_t)n * tr->type_size : (size_t)quant_row_size(t, n);
    size_t row_bytes = row + 16; /* padded stride */
    uint8_t *w = malloc(row_bytes * (size_t)(n_rows + 2));
    for (int64_t r = 0; r < n_rows + 2; r++) make_weights(t, w + r * row_bytes, n, false);
    size_t ab = act_bytes(t, n);
    int64_t max_act = 17;
    uint8_t *a = malloc(ab * (size_t)max_act);
    for (int64_t i = 0; i < max_act; i++) make_act(t, a + i * ab, n, false, 0);
    float out[16 * 16];
    const int64_t row0 = 1;
    quant_gemv(t, n, w, row_bytes, row0, n_rows, a, out);
    bool ok = true;
    for (int64_t r = 0; r < n_rows; r++) ok &= f2u(out[r]) == f2u(vec_dot_ref(t, n, w + (row0 + r) * row_bytes, a));
    CHECK_MSG(ok, "%s gemv != vec_dot_ref", tr->name);
    const int64_t acts[] = {1, 2, 3, 5, 6, 7, 8, 9, 16, 17};
    for (size_t k = 0; k < ARRAY_LEN(acts); k++) {
        int64_t n_act = acts[k], stride = n_rows + 3;
        for (size_t i = 0; i < ARRAY_LEN(out); i++) out[i] = -1.0f;
        quant_gemm(t, n, w, row_bytes, row0, n_rows, a, ab, n_act, out, stride);
        ok = true;
        for (int64_t i = 0; i < n_act; i++)
            for (int64_t r = 0; r < n_rows; r++)
                ok &= f2u(out[i * stride + r]) == f2u(vec_dot_ref(t, n, w + (row0 + r) * row_bytes, a + i * ab));
        for (int64_t i = 0; i < n_act; i++) ok &= out[i * stride + n_rows] == -1.0f; /* no write past n_rows */
        CHECK_MSG(ok, "%s gemm n_act=%lld != vec_dot_ref", tr->name, (long long)n_act);
    }
    free(w);
    free(a);
}

/* (d') Q4_K / Q5_K / Q6_K through quant_gemm at whole 16 x 16 tiles and their edges: the AMX tiles where the CPU has them
 * (quant_amx_ok), the other kernels elsewhere; bit-exact against vec_dot_ref either way, on random activations and on
 * extreme ones (every quant +-127: the tile sums' largest magnitudes). */
static void test_gemm_amx(uint32_t t) {
    printf("test_quant_dot: AMX tiles %s\n", quant_amx_ok() ? "on" : "off (no AMX-INT8 here, or VLLMC_AMX=0: the gemm on the other kernels)");
    const int64_t cfg[][3] = {{256, 16, 32}, {2560, 37, 21}, {9216, 32, 48}, {512, 64, 33}, {1024, 17, 16}, {768, 48, 70}};
    for (size_t k = 0; k < ARRAY_LEN(cfg); k++) {
        const int64_t n = cfg[k][0], n_rows = cfg[k][1], n_act = cfg[k][2], row0 = 1, stride = n_rows + 5;
        const size_t row_bytes = (size_t)quant_row_size(t, n) + 16, ab = act_bytes(t, n);
        uint8_t *w = malloc(row_bytes * (size_t)(n_rows + 1)), *a = malloc(ab * (size_t)n_act);
        float *out = malloc(sizeof(float) * (size_t)(n_act * stride));
        for (int64_t r = 0; r < n_rows + 1; r++) make_weights(t, w + (size_t)r * row_bytes, n, false);
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t i = 0; i < n_act; i++) make_act(t, a + (size_t)i * ab, n, pass == 1, 127);
            for (int64_t i = 0; i < n_act * stride; i++) out[i] = -1.0f;
            quant_gemm(t, n, w, row_bytes, row0, n_rows, a, ab, n_act, out, stride);
            int64_t bad = 0;
            for (int64_t i = 0; i < n_act; i++) {
                for (int64_t r = 0; r < n_rows; r++)
                    bad += f2u(out[i * stride + r]) != f2u(vec_dot_ref(t, n, w + (size_t)(row0 + r) * row_bytes, a + (size_t)i * ab));
                bad += out[i * stride + n_rows] != -1.0f; /* no write past n_rows */
            }
            CHECK_MSG(bad == 0, "%s gemm %lld x %lld x %lld (%s activations): %lld outputs differ from vec_dot_ref", quant_traits(t)->name,
                      (long long)n_rows, (long long)n_act, (long long)n, pass ? "extreme" : "random", (long long)bad);
        }
        if (quant_amx_ok()) { /* the tile kernel itself on the whole tiles (quant_gemm takes it from QUANT_AMX_MIN_ACT rows) */
            const int64_t nr = n_rows & ~15, na = n_act & ~15;
            CHECK(quant_gemm_amx(t, n, w + row_bytes, row_bytes, nr, a, ab, na, out, stride));
            int64_t bad = 0;
            for (int64_t i = 0; i < na; i++)
                for (int64_t r = 0; r < nr; r++)
                    bad += f2u(out[i * stride + r]) != f2u(vec_dot_ref(t, n, w + (size_t)(1 + r) * row_bytes, a + (size_t)i * ab));
            CHECK_MSG(bad == 0, "%s tiles %lld x %lld x %lld: %lld outputs differ from vec_dot_ref", quant_traits(t)->name, (long long)nr,
                      (long long)na, (long long)n, (long long)bad);
        }
        free(w); free(a); free(out);
    }
}

/* ---- (e) activation quantizers ---- */
static void test_act_quant(void) {
    enum { N = 1024 };
    float x[N];
    block_q8_0 q0[N / 32];
    block_q8_1 q1[N / 32];
    block_q8_K qk[N / 256];
    for (int trial = 0; trial < 40; trial++) {
        float sc = 0.01f + 10.0f * test_rand_uniform();
        for (int i = 0; i < N; i++) x[i] = sc * test_rand_normal();
        if (trial == 1) for (int i = 0; i < 32; i++) x[i] = 0.0f;       /* all-zero block */
        if (trial == 2) for (int i = 256; i < 512; i++) x[i] = 0.0f;    /* all-zero super-block */
        if (trial == 3) for (int i = 0; i < N; i++) x[i] = (float)rnd_range(-254, 254) * 0.5f; /* .5 ties */
        if (trial == 4) { /* equal magnitudes: Q8_K keeps the first (here negative) one */
            for (int i = 0; i < N; i++) x[i] = 0.25f * (float)rnd_range(-20, 20);
            x[37] = -9.0f; x[200] = 9.0f; x[300] = 9.0f; x[290] = -9.0f; x[700] = 0.5f * 18.0f;
        }
        quantize_row_q8_0(x, q0, N);
        quantize_row_q8_1(x, q1, N);
        quantize_row_q8_K(x, qk, N);
        /* every ISA's quantizer == the scalar reference, byte for byte */
        for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
            if (!quant_isa_supported(isa)) continue;
            static block_q8_0 r0[N / 32], s0[N / 32];
            static block_q8_1 r1[N / 32], s1[N / 32];
            static block_q8_K rk[N / 256], sk[N / 256];
            quant_get_act_quantizer_isa(GGML_TYPE_Q8_0, QUANT_ISA_SCALAR)(x, r0, N);
            quant_get_act_quantizer_isa(GGML_TYPE_Q8_0, isa)(x, s0, N);
            quant_get_act_quantizer_isa(GGML_TYPE_Q8_1, QUANT_ISA_SCALAR)(x, r1, N);
            quant_get_act_quantizer_isa(GGML_TYPE_Q8_1, isa)(x, s1, N);
            quant_get_act_quantizer_isa(GGML_TYPE_Q8_K, QUANT_ISA_SCALAR)(x, rk, N);
            quant_get_act_quantizer_isa(GGML_TYPE_Q8_K, isa)(x, sk, N);
            CHECK_MSG(memcmp(r0, s0, sizeof(r0)) == 0, "q8_0 isa %d != scalar, trial %d", isa, trial);
            CHECK_MSG(memcmp(r1, s1, sizeof(r1)) == 0, "q8_1 isa %d != scalar, trial %d", isa, trial);
            CHECK_MSG(memcmp(rk, sk, sizeof(rk)) == 0, "q8_K isa %d != scalar, trial %d", isa, trial);
        }
        if (trial == 4) CHECK(qk[0].d == 1.0f / (-127.0f / -9.0f) && qk[0].qs[37] == -127 && qk[0].qs[200] == 127);
        bool ok0 = true, ok1 = true, okk = true, okerr = true;
        for (int b = 0; b < N / 32; b++) {
            const float *v = x + 32 * b;
            float amax = 0;
            for (int j = 0; j < 32; j++) if (fabsf(v[j]) > amax) amax = fabsf(v[j]);
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            int sum = 0;
            ok0 &= q0[b].d == fp32_to_fp16(d) && q1[b].d == fp32_to_fp16(d);
            for (int j = 0; j < 32; j++) {
                int q = (int)roundf(v[j] * id);
                sum += q;
                ok0 &= q0[b].qs[j] == q;
                ok1 &= q1[b].qs[j] == q;
                okerr &= fabsf((float)q * d - v[j]) <= 0.5001f * d + 1e-30f && q >= -127 && q <= 127;
            }
            ok1 &= q1[b].s == fp32_to_fp16((float)sum * d);
        }
        for (int b = 0; b < N / 256; b++) {
            const float *v = x + 256 * b;
            float amax = 0, mx = 0;
            for (int j = 0; j < 256; j++) if (fabsf(v[j]) > amax) { amax = fabsf(v[j]); mx = v[j]; }
            if (amax == 0.0f) {
                okk &= qk[b].d == 0.0f;
                for (int j = 0; j < 256; j++) okk &= qk[b].qs[j] == 0;
                for (int k = 0; k < 16; k++) okk &= qk[b].bsums[k] == 0;
                continue;
            }
            float is = -127.0f / mx;
            okk &= f2u(qk[b].d) == f2u(1.0f / is);
            for (int j = 0; j < 256; j++) {
                float p = is * v[j];
                int q = (int)nearbyintf(p); /* default rounding mode: ties to even */
                if (q > 127) q = 127;
                okk &= qk[b].qs[j] == q;
            }
            for (int k = 0; k < 16; k++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += qk[b].qs[16 * k + j];
                okk &= qk[b].bsums[k] == s;
            }
        }
        CHECK_MSG(ok0, "q8_0 trial %d", trial);
        CHECK_MSG(ok1, "q8_1 trial %d", trial);
        CHECK_MSG(okk, "q8_K trial %d", trial);
        CHECK_MSG(okerr, "q8_0 error > d/2 trial %d", trial);
    }
    /* hand-checked: amax 127 -> d = 1; halves round away from zero (Q8_0/Q8_1), to even (Q8_K) */
    float h[256];
    for (int i = 0; i < 256; i++) h[i] = 0.0f;
    h[0] = 127.0f; h[1] = 2.5f; h[2] = -2.5f; h[3] = 3.5f; h[4] = -0.5f; h[5] = 100.0f; h[31] = -7.0f;
    quantize_row_q8_0(h, q0, 32);
    CHECK(q0[0].d == 0x3C00);
    CHECK(q0[0].qs[0] == 127 && q0[0].qs[1] == 3 && q0[0].qs[2] == -3 && q0[0].qs[3] == 4 && q0[0].qs[4] == -1);
    CHECK(q0[0].qs[5] == 100 && q0[0].qs[31] == -7 && q0[0].qs[6] == 0);
    quantize_row_q8_1(h, q1, 32);
    CHECK(q1[0].d == 0x3C00 && q1[0].s == fp32_to_fp16(127.0f + 3 - 3 + 4 - 1 + 100 - 7)); /* 223 */
    /* Q8_K: max element +127 -> iscale = -1, d = -1, q = -x with ties to even */
    quantize_row_q8_K(h, qk, 256);
    CHECK(qk[0].d == -1.0f);
    CHECK(qk[0].qs[0] == -127 && qk[0].qs[1] == -2 && qk[0].qs[2] == 2 && qk[0].qs[3] == -4 && qk[0].qs[4] == 0);
    CHECK(qk[0].bsums[0] == -127 - 2 + 2 - 4 + 0 - 100 && qk[0].bsums[1] == 7);
    /* negative max: -127 -> iscale = +1, d = 1 */
    h[0] = -127.0f;
    quantize_row_q8_K(h, qk, 256);
    CHECK(qk[0].d == 1.0f && qk[0].qs[0] == -127 && qk[0].qs[1] == 2 && qk[0].qs[3] == 4 && qk[0].qs[5] == 100);
    /* quantize_row_act picks the pairing */
    float xa[256];
    for (int i = 0; i < 256; i++) xa[i] = test_rand_normal();
    block_q8_K ka, kb;
    quantize_row_act(GGML_TYPE_Q4_K, xa, &ka, 256);
    quantize_row_q8_K(xa, &kb, 256);
    CHECK(memcmp(&ka, &kb, sizeof(ka)) == 0);
    block_q8_1 a1[8], b1[8];
    quantize_row_act(GGML_TYPE_Q5_1, xa, a1, 256);
    quantize_row_q8_1(xa, b1, 256);
    CHECK(memcmp(a1, b1, sizeof(a1)) == 0);
    float fa[256];
    quantize_row_act(GGML_TYPE_F16, xa, fa, 256);
    CHECK(memcmp(fa, xa, sizeof(fa)) == 0);
}

/* Single-element probes: a lone nonzero weight bit at a documented position (GGUF-QUANTS.md 3.5)
 * must meet exactly the activation element the table names. */
static void test_probes(void) {
    /* Q4_K element 200: qs[104] low nibble (byte 120), sub-block 6: sc from byte 14 bits 0-3 + byte 6 bits 6-7 */
    block_q4_K w;
    memset(&w, 0, sizeof(w));
    w.d = 0x3C00; w.dmin = 0x3C00;
    w.scales[10] = 1;            /* sc_6 bits 0-3 = 1 (byte 14 = scales[10]) */
    w.scales[2] = 1u << 6;       /* sc_6 bit 4 (byte 6 = scales[2]) -> sc_6 = 17 */
    w.qs[104] = 3;
    block_q8_K a;
    memset(&a, 0, sizeof(a));
    a.d = 1.0f; a.qs[200] = 5; a.bsums[12] = 5;
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        vec_dot_fn f = quant_get_vec_dot_isa(GGML_TYPE_Q4_K, isa);
        if (f) CHECK_MSG(f(256, &w, &a) == 17.0f * 3 * 5, "Q4_K probe isa %d: %g", isa, f(256, &w, &a));
    }
    /* Q6_K element 200: ql[72] high nibble, qh[40] bits 4-5, scales[12] */
    block_q6_K w6;
    memset(&w6, 0, sizeof(w6));
    for (int i = 0; i < 128; i++) w6.ql[i] = 0;
    for (int i = 0; i < 64; i++) w6.qh[i] = 0xAA; /* every hi = 2 -> q = 32 - 32 = 0 unless lo != 0 */
    w6.d = 0x3C00;
    w6.scales[12] = -3;
    w6.ql[72] = 0x50; /* lo = 5 at element 200 -> q = 37 - 32 = 5 */
    memset(&a, 0, sizeof(a));
    a.d = 1.0f;
    for (int i = 0; i < 256; i++) a.qs[i] = (int8_t)(i % 7 - 3);
    a.qs[200] = 11;
    for (int k = 0; k < 16; k++) { int s = 0; for (int j = 0; j < 16; j++) s += a.qs[16 * k + j]; a.bsums[k] = (int16_t)s; }
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        vec_dot_fn f = quant_get_vec_dot_isa(GGML_TYPE_Q6_K, isa);
        if (f) CHECK_MSG(f(256, &w6, &a) == -3.0f * 5 * 11, "Q6_K probe isa %d: %g", isa, f(256, &w6, &a));
    }
}

/* The deferred-norm activation (BK_ACT_Q8_KD: Q8_K's quants of x * w with a scale every 16 values) and its CPU
 * references, which the GPU's writer and reader equal bit for bit (test_cuda_ops kd). Each reference is held to a bound
 * that follows from its definition, so no draw can fail a correct one:
 *   - the quantizer: |q d - x w| <= d / 2 per element (d = max |x w| / 127 of the group; the float 127 / max the
 *     kernel multiplies by is 1 / d to an ulp), |q| <= 127, the sums the quants' sums, the sums of squares the group's
 *     sum of x^2 to float rounding;
 *   - the RMS scale: 1 / sqrt(mean(x^2) + eps) to float rounding;
 *   - the Q4_K dot: the sum over elements of the dequantized weight times q d, to float rounding of the sum of the
 *     terms' magnitudes (the integer sums are exact; only the float terms round);
 * so against the exact product of the unquantized norm the error is at most the quantization bound
 * rms x sum |w| d / 2 plus rounding. (A comparison with the standard path's error, which the test on the GPU used, can
 * fail a correct implementation: both errors are sums of the activation's rounding errors over rows of a common
 * offset, and the standard path's is near zero in some draws.) */
static void test_q8_kd(void) {
    enum { NMAX = 4096, F = 24 };
    static float x[NMAX], nw[NMAX], wd[NMAX], d[NMAX / 16], ssq[NMAX / 16];
    static int8_t q[NMAX];
    static int16_t bs[NMAX / 16];
    static uint8_t w[F * (NMAX / QK_K) * sizeof(block_q4_K)];
    const float eps = 1e-6f;
    int bad_q = 0, bad_s = 0, bad_r = 0, bad_dot = 0, bad_end = 0, cases = 0;
    double worst_q = 0, worst_dot = 0, worst_end = 0;
    for (int trial = 0; trial < 60; trial++) {
        const int64_t n = QK_K * (1 + (int64_t)rnd(NMAX / QK_K)), G = n / 16;
        const float sc = 0.01f + 10.0f * test_rand_uniform();
        for (int64_t i = 0; i < n; i++) {
            x[i] = sc * test_rand_normal() * (rnd(16) == 0 ? 20.0f : 1.0f); /* some outliers */
            nw[i] = test_rand_normal();
        }
        if (trial % 3 == 0) for (int64_t i = 16; i < 32; i++) x[i] = 0.0f;  /* a group of zeros: scale 0 */
        if (trial % 5 == 1) x[rnd((uint32_t)n)] = 0.0f;
        quantize_row_q8_kd_ref(x, nw, n, q, d, bs, ssq);
        for (int64_t g = 0; g < G; g++) {
            int sum = 0;
            double s2 = 0;
            for (int64_t i = 16 * g; i < 16 * g + 16; i++) {
                const double v = (double)x[i] * nw[i], e = fabs((double)q[i] * d[g] - v);
                const double b = 0.5 * d[g] * (1.0 + 1e-4) + 1e-6 * fabs(v);
                if (e > b || q[i] == -128) bad_q++;
                if (d[g] > 0) worst_q = fmax(worst_q, e / (0.5 * d[g]));
                sum += q[i];
                s2 += (double)x[i] * x[i];
            }
            if (sum != bs[g] || fabs(ssq[g] - s2) > 1e-5 * s2 + 1e-30) bad_s++;
        }
        double s2 = 0;
        for (int64_t i = 0; i < n; i++) s2 += (double)x[i] * x[i];
        const double rmsd = 1.0 / sqrt(s2 / (double)n + eps);
        const float rms = q8_kd_rms_ref(ssq, n, eps);
        if (fabs(rms - rmsd) > 1e-5 * rmsd) bad_r++;
        make_weights(GGML_TYPE_Q4_K, w, n * F, false);
        const size_t rb = quant_row_size(GGML_TYPE_Q4_K, n);
        for (int o = 0; o < F; o++) {
            const uint8_t *row = w + (size_t)o * rb;
            dequantize_row(GGML_TYPE_Q4_K, row, wd, n);
            double dq = 0, dq_abs = 0, ex = 0, ex_abs = 0, qb = 0;
            for (int64_t i = 0; i < n; i++) {
                const double t = (double)wd[i] * q[i] * d[i / 16], v = (double)x[i] * nw[i];
                dq += t;
                dq_abs += fabs(t);
                ex += (double)wd[i] * v * rmsd;
                ex_abs += fabs((double)wd[i] * v * rmsd);
                qb += fabs((double)wd[i]) * (0.5 * d[i / 16] * (1.0 + 1e-4) + 1e-6 * fabs(v));
            }
            const float y = q8_kd_dot_q4_K_ref(n, row, q, d, bs);
            const double e_dot = fabs((double)y - dq);
            if (e_dot > 1e-5 * dq_abs + 1e-30) bad_dot++;
            if (dq_abs > 0) worst_dot = fmax(worst_dot, e_dot / dq_abs);
            /* end to end, against the exact product of the unquantized norm */
            const double e_end = fabs((double)y * rms - ex), b_end = rmsd * qb * (1.0 + 1e-5) + 1e-5 * (rmsd * dq_abs + ex_abs) + 1e-30;
            if (e_end > b_end) bad_end++;
            worst_end = fmax(worst_end, e_end / b_end);
            cases++;
        }
    }
    printf("q8_kd: quantizer worst |q d - x w| / (d / 2) %.6f (%d over), sums %d bad, rms %d bad; Q4_K dot worst |err| / "
           "sum |terms| %.3g (%d over); end to end worst error / bound %.3f (%d of %d over)\n",
           worst_q, bad_q, bad_s, bad_r, worst_dot, bad_dot, worst_end, bad_end, cases);
    CHECK_MSG(bad_q == 0 && bad_s == 0 && bad_r == 0, "q8_kd quantizer: %d quants, %d group sums, %d rms scales out of bound", bad_q,
              bad_s, bad_r);
    CHECK_MSG(bad_dot == 0, "q8_kd_dot_q4_K_ref: %d rows off the dequantized product by more than float rounding", bad_dot);
    CHECK_MSG(bad_end == 0, "q8_kd end to end: %d rows past the quantization bound", bad_end);
}

int main(void) {
    test_seed_auto("test_quant_dot");
    printf("test_quant_dot: active ISA %s (avx2 %s, avx512vnni %s)\n", quant_simd_name(),
           quant_isa_supported(QUANT_ISA_AVX2) ? "yes" : "no", quant_isa_supported(QUANT_ISA_AVX512) ? "yes" : "no");
    CHECK(quant_get_vec_dot(GGML_TYPE_Q4_K) != NULL);
    CHECK(quant_get_vec_dot(GGML_TYPE_IQ2_XXS) == NULL);
    CHECK(quant_get_vec_dot_isa(GGML_TYPE_Q4_K, 99) == NULL);
    test_act_quant();
    test_q8_kd();
    test_probes();
    for (size_t k = 0; k < ARRAY_LEN(k_types); k++) {
        uint32_t t = k_types[k];
        int bs = quant_traits(t)->block_size;
        if (bs == 1) {
            const int64_t ns[] = {1, 7, 31, 32, 33, 100, 257, 4096};
            for (size_t i = 0; i < ARRAY_LEN(ns); i++) test_one(t, ns[i]);
        } else if (bs == 32) {
            const int64_t nbs[] = {1, 3, 7, 8, 9, 16, 28, 131};
            for (size_t i = 0; i < ARRAY_LEN(nbs); i++) test_one(t, 32 * nbs[i]);
        } else {
            const int64_t nbs[] = {1, 2, 3, 16};
            for (size_t i = 0; i < ARRAY_LEN(nbs); i++) test_one(t, 256 * nbs[i]);
        }
        test_gemv(t, 0);
        if (quant_traits(t)->block_size == 256) test_gemv(t, 19 * 256); /* 4864 columns, as Qwen2.5-0.5B's ffn_down */
    }
    test_gemm_amx(GGML_TYPE_Q4_K);
    test_gemm_amx(GGML_TYPE_Q5_K);
    test_gemm_amx(GGML_TYPE_Q6_K);
    CHECK(!quant_amx_type(GGML_TYPE_Q8_0));
    return test_finish("test_quant_dot");
}
