/* KV-cache dtypes: the FP8 E4M3FN conversions (decode of all 256 codes against the format's formula,
 * encode against a nearest-value search over the code table on exact ties, their neighbours, subnormals,
 * saturation and random floats), and paged attention with f16 / bf16 / fp8 caches against the f32 cache
 * on fresh random data (prefill then decode steps, shuffled block tables, GQA), fast == reference bit
 * for bit per dtype and thread count, the fp8 scales (power-of-two scales give exactly scaled results) and
 * the fp8 key shift (exact codes of k - shift; close to the f32 cache where the unshifted keys are not), and
 * the fp8 read path (scales, shift) against an f32 cache of the values the codes decode to.
 * Through a small random qwen2 model: fp8 scales read from the GGUF keys (one number or one per layer; bad
 * ones refused), the key shift model_kv_create derives from the key bias, logits of every KV dtype close
 * to the f32 cache's, fast == reference bit for bit. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"

static float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_from_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The format's definition, written independently of the table: s eeee mmm. */
static double e4m3_formula(int code) {
    const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp((double)m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

/* Reference encoder: the nearest of the 127 non-negative finite codes (in double), ties to the even
 * code; |x| > 448 gives 448; NaN gives 0x7F; the sign bit of x is kept. */
static uint8_t e4m3_ref(float x) {
    const uint8_t sign = (bits_from_f32(x) >> 31) ? 0x80 : 0;
    if (isnan(x)) return (uint8_t)(sign | 0x7f);
    double a = fabs((double)x);
    if (a > 448.0) return (uint8_t)(sign | 0x7e);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= 0x7e; c++) {
        double d = fabs(e4m3_formula(c) - a);
        if (d < bd || (d == bd && !(c & 1))) { bd = d; best = c; }
    }
    return (uint8_t)(sign | best);
}

static void check_encode(float x) {
    uint8_t got = bk_fp8_e4m3_from_f32(x), want = e4m3_ref(x);
    CHECK_MSG(got == want, "e4m3(%a) = 0x%02x, want 0x%02x", (double)x, got, want);
}

static void test_e4m3(void) {
    /* decode: every code against the formula (NaN codes are NaN; -0 keeps its sign) */
    int n_nan = 0;
    for (int c = 0; c < 256; c++) {
        double want = e4m3_formula(c);
        float got = bk_fp8_e4m3_to_f32((uint8_t)c);
        if (isnan(want)) { n_nan++; CHECK_MSG(isnan(got), "code 0x%02x should be NaN", c); continue; }
        CHECK_MSG((double)got == want && (signbit(got) != 0) == (c >> 7), "code 0x%02x: %a, want %a", c, (double)got, want);
        CHECK_MSG(bk_fp8_e4m3_from_f32(got) == c, "round trip of code 0x%02x gives 0x%02x", c, bk_fp8_e4m3_from_f32(got));
        CHECK(bk_fp8_e4m3_table[c] == got || (isnan(bk_fp8_e4m3_table[c]) && isnan(got)));
    }
    CHECK(n_nan == 2);
    CHECK(bk_fp8_e4m3_to_f32(0x7e) == 448.0f && bk_fp8_e4m3_to_f32(0x01) == 0x1p-9f && bk_fp8_e4m3_to_f32(0x08) == 0x1p-6f);
    /* special inputs */
    CHECK(bk_fp8_e4m3_from_f32(INFINITY) == 0x7e && bk_fp8_e4m3_from_f32(-INFINITY) == 0xfe);
    CHECK(bk_fp8_e4m3_from_f32(NAN) == 0x7f && bk_fp8_e4m3_from_f32(-NAN) == 0xff);
    CHECK(bk_fp8_e4m3_from_f32(1e30f) == 0x7e && bk_fp8_e4m3_from_f32(-449.0f) == 0xfe && bk_fp8_e4m3_from_f32(464.0f) == 0x7e);
    CHECK(bk_fp8_e4m3_from_f32(0x1p-10f) == 0x00 && bk_fp8_e4m3_from_f32(0x1.000002p-10f) == 0x01); /* tie to 0; just above */
    CHECK(bk_fp8_e4m3_from_f32(-0.0f) == 0x80 && bk_fp8_e4m3_from_f32(1e-45f) == 0x00);
    /* every tie (midpoint of adjacent codes, exact in f32) and its f32 neighbours, both signs */
    for (int c = 0; c < 0x7e; c++) {
        float mid = (float)((e4m3_formula(c) + e4m3_formula(c + 1)) / 2);
        CHECK((double)mid == (e4m3_formula(c) + e4m3_formula(c + 1)) / 2);
        for (int d = -2; d <= 2; d++) {
            float x = f32_from_bits(bits_from_f32(mid) + (uint32_t)d);
            check_encode(x);
            check_encode(-x);
        }
        /* the codes themselves and their neighbours */
        float v = (float)e4m3_formula(c + 1);
        check_encode(nextafterf(v, 0.0f));
        check_encode(nextafterf(v, INFINITY));
    }
    /* random floats: log-uniform magnitudes over the whole range (subnormals to saturation), random
     * bit patterns (f32 subnormals, huge values, NaNs), and values near 448 */
    for (int i = 0; i < 200000; i++) {
        float x;
        switch (i % 4) {
        case 0: x = ldexpf(1.0f + test_rand_uniform(), (int)(test_rand_u64() % 34) - 24); break;
        case 1: x = f32_from_bits((uint32_t)test_rand_u64()); break;
        case 2: x = 400.0f + 100.0f * test_rand_uniform(); break;
        default: x = test_rand_normal() * 0x1p-7f; break; /* mostly subnormal e4m3 */
        }
        if (test_rand_u64() & 1) x = -x;
        check_encode(x);
    }
    /* the NaN codes hold the quiet NaN 0x7FC00000 (what the SIMD decoder produces too) */
    CHECK(bits_from_f32(bk_fp8_e4m3_table[0x7f]) == 0x7fc00000u && bits_from_f32(bk_fp8_e4m3_table[0xff]) == 0x7fc00000u);
    /* the attention kernels' fp8 / bf16 / f16 decoders on every code (SIMD set vs the scalar set, bit for bit) */
    cpu_init_tables(); /* the scalar f16 decoder's table (backend_cpu_create builds it otherwise) */
    const struct cpu_attn_kernels *kn = cpu_attn_kernels_avx2(64);
    if (kn) {
        uint8_t codes[256];
        uint16_t halves[256];
        for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
        for (int c0 = 0; c0 < 65536; c0 += 256) {
            for (int c = 0; c < 256; c++) halves[c] = (uint16_t)(c0 + c);
            for (int kind = 0; kind < 2; kind++) {
                float a[256] = {0}, b[256] = {0};
                for (int i = 0; i < 256; i += 64) {
                    void (*fs)(float *, float, const void *, int32_t) = kind ? cpu_attn_kernels_scalar.axpy_bf16 : cpu_attn_kernels_scalar.axpy_f16;
                    void (*fv)(float *, float, const void *, int32_t) = kind ? kn->axpy_bf16 : kn->axpy_f16;
                    fs(a + i, 1.0f, halves + i, 64);
                    fv(b + i, 1.0f, halves + i, 64);
                }
                CHECK_MSG(!memcmp(a, b, sizeof(a)), "%s decode of 0x%04x..: SIMD differs", kind ? "bf16" : "f16", c0);
            }
        }
        float a[256] = {0}, b[256] = {0};
        for (int i = 0; i < 256; i += 64) {
            cpu_attn_kernels_scalar.axpy_fp8(a + i, 1.0f, codes + i, 64);
            kn->axpy_fp8(b + i, 1.0f, codes + i, 64);
        }
        CHECK_MSG(!memcmp(a, b, sizeof(a)), "fp8 decode: SIMD differs from the table");
        for (int c = 0; c < 256; c++) CHECK(!memcmp(&b[c], &bk_fp8_e4m3_table[c], 4) || c == 0x80); /* 0 + -0 = +0 */
    } else {
        printf("  (no AVX2: SIMD decoders not checked)\n");
    }
    /* kv dtype helpers */
    enum bk_kv_dtype dt;
    CHECK(bk_kv_dtype_parse("fp8", &dt) && dt == BK_KV_FP8_E4M3);
    CHECK(bk_kv_dtype_parse("auto", &dt) && dt == BK_KV_F16);
    CHECK(bk_kv_dtype_parse("bf16", &dt) && dt == BK_KV_BF16);
    CHECK(bk_kv_dtype_parse("fp16", &dt) && dt == BK_KV_F16);
    CHECK(bk_kv_dtype_parse("f32", &dt) && dt == BK_KV_F32);
    CHECK(!bk_kv_dtype_parse("fp8_e5m2", &dt) && !bk_kv_dtype_parse("", &dt) && !bk_kv_dtype_parse(NULL, &dt));
    CHECK(bk_kv_dtype_size(BK_KV_FP8_E4M3) == 1 && bk_kv_dtype_size(BK_KV_BF16) == 2 && bk_kv_dtype_size(BK_KV_NDTYPE) == 0);
    CHECK(bk_kv_block_bytes(BK_KV_FP8_E4M3, 2, 64) == 16 * 2 * 64);
}

/* ---- attention with every dtype ---- */

#define N_BE 3 /* reference, fast 1 thread, fast 2 threads */
static struct backend *bes[N_BE];

struct attn_case {
    int32_t H, KVH, D;
    float k_scale, v_scale;  /* fp8 scales set on the cache */
    float data_mul;          /* K and V are normal * data_mul, Q is divided by it (the scores keep their size) */
};

static double rel_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]); den += (double)ref[i] * ref[i]; }
    return sqrt(num / (den > 0 ? den : 1));
}

/* Run the same two steps (a prefill of 2 sequences, then 3 decode rows) through every dtype and
 * backend; out[dtype][be] hold the outputs of both steps, concatenated. */
static void run_attention(const struct attn_case *ac, float *out[BK_KV_NDTYPE][N_BE], size_t *n_out) {
    const int32_t H = ac->H, KVH = ac->KVH, D = ac->D, n_seqs = 2;
    const int32_t n_prefill[2] = {37, 18}, n_decode[2] = {2, 1};
    int32_t n_blocks = 0;
    for (int s = 0; s < n_seqs; s++) n_blocks += CEIL_DIV(n_prefill[s] + n_decode[s], BK_KV_BLOCK);
    int32_t tables[16];
    for (int i = 0; i < n_blocks; i++) tables[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(test_rand_u64() % (uint64_t)(i + 1));
        int32_t t = tables[i]; tables[i] = tables[j]; tables[j] = t;
    }
    struct bk_seq seqs[2];
    int32_t off = 0;
    for (int s = 0; s < n_seqs; s++) {
        seqs[s] = (struct bk_seq){.block_table = tables + off, .n_blocks = CEIL_DIV(n_prefill[s] + n_decode[s], BK_KV_BLOCK), .state_slot = -1};
        off += seqs[s].n_blocks;
    }
    struct bk_kv_cache *kv[BK_KV_NDTYPE][N_BE];
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
        for (int b = 0; b < N_BE; b++) {
            kv[dt][b] = NULL;
            CHECK(bes[b]->ops->kv_create(bes[b], (enum bk_kv_dtype)dt, 2, n_blocks + 1, KVH, D, &kv[dt][b]) == VLLMC_OK);
            kv[dt][b]->k_scales[1] = ac->k_scale;
            kv[dt][b]->v_scales[1] = ac->v_scale;
        }
    const struct bk_attn_params p = {.n_head = H, .n_kv_head = KVH, .head_dim = D, .scale = 1.0f / sqrtf((float)D), .kv_layer = 1};
    size_t total = 0;
    for (int step = 0; step < 2; step++) {
        int32_t tok[64], pos[64], sq[64], rows[64], T = 0;
        int32_t done[2] = {0, 0};
        for (int s = 0; s < n_seqs; s++) done[s] = 0;
        /* rows interleaved round robin, positions increasing within each sequence */
        for (bool any = true; any;) {
            any = false;
            for (int s = 0; s < n_seqs; s++) {
                int32_t n = step ? n_decode[s] : n_prefill[s];
                if (done[s] < n) {
                    tok[T] = 0;
                    pos[T] = (step ? n_prefill[s] : 0) + done[s]++;
                    sq[T] = s;
                    rows[T] = T;
                    T++;
                    any = true;
                }
            }
        }
        struct bk_batch bt = {.n_tokens = T, .token_ids = tok, .pos = pos, .seq_idx = sq, .n_seqs = n_seqs, .seqs = seqs,
                              .n_logits = 1, .logit_rows = rows};
        const size_t nq = (size_t)T * (size_t)(H * D), nk = (size_t)T * (size_t)(KVH * D);
        float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
        /* queries with a few large channels (as real models have) so the softmax is not flat */
        for (size_t i = 0; i < nq; i++) q[i] = test_rand_normal() * ((i % (size_t)D) < 4 ? 4.0f : 1.0f) / ac->data_mul;
        for (size_t i = 0; i < nk; i++) { k[i] = test_rand_normal() * ac->data_mul; v[i] = test_rand_normal() * ac->data_mul; }
        for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
            for (int b = 0; b < N_BE; b++) {
                CHECK(bes[b]->ops->batch_set(bes[b], &bt) == VLLMC_OK);
                CHECK(bes[b]->ops->attention(bes[b], kv[dt][b], &p, q, 0, k, 0, v, 0, out[dt][b] + total) == VLLMC_OK);
            }
        total += nq;
        free(q); free(k); free(v);
    }
    /* the caches of one dtype hold identical bytes on every backend */
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
        for (int b = 1; b < N_BE; b++) {
            size_t bytes = (size_t)bk_kv_block_bytes((enum bk_kv_dtype)dt, KVH, D) * (size_t)(n_blocks + 1);
            CHECK_MSG(!memcmp(kv[dt][b]->k[1], kv[dt][0]->k[1], bytes) && !memcmp(kv[dt][b]->v[1], kv[dt][0]->v[1], bytes),
                      "dtype %s backend %d: cache bytes differ", bk_kv_dtype_name((enum bk_kv_dtype)dt), b);
        }
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
        for (int b = 0; b < N_BE; b++) bes[b]->ops->kv_destroy(bes[b], kv[dt][b]);
    *n_out = total;
}

static void test_attention_case(const struct attn_case *ac) {
    const size_t cap = (size_t)64 * (size_t)(ac->H * ac->D);
    float *out[BK_KV_NDTYPE][N_BE];
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
        for (int b = 0; b < N_BE; b++) out[dt][b] = malloc(cap * 4);
    size_t n = 0;
    run_attention(ac, out, &n);
    /* bounds vs the f32 cache: f16 and bf16 round K/V to 11 and 8 significant bits (relative error
     * 2^-11 / 2^-8 per element, less after averaging); e4m3 keeps 4 (2^-4 per element) */
    const double bound[BK_KV_NDTYPE] = {0.0, 2e-3, 1e-2, 6e-2};
    for (int dt = 1; dt < BK_KV_NDTYPE; dt++) {
        double err = rel_err(out[dt][0], out[BK_KV_F32][0], n);
        printf("  H %d KVH %d D %d scales %g/%g data x%g: %-8s rel err vs f32 cache %.3e (bound %.0e)\n", ac->H, ac->KVH, ac->D,
               (double)ac->k_scale, (double)ac->v_scale, (double)ac->data_mul, bk_kv_dtype_name((enum bk_kv_dtype)dt), err, bound[dt]);
        CHECK_MSG(err < bound[dt] && err > 0, "dtype %s: rel err %g", bk_kv_dtype_name((enum bk_kv_dtype)dt), err);
    }
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
        for (int b = 1; b < N_BE; b++)
            CHECK_MSG(!memcmp(out[dt][b], out[dt][0], n * 4), "dtype %s: fast backend %d (%d threads) differs from the reference",
                      bk_kv_dtype_name((enum bk_kv_dtype)dt), b, bes[b]->n_threads);
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++)
        for (int b = 0; b < N_BE; b++) free(out[dt][b]);
}

/* fp8 with power-of-two scales: K, V multiplied by 2^a, 2^b with k_scale 2^a, v_scale 2^b store the
 * same codes; with Q divided by 2^a the scores are the same bits, so the output is exactly 2^b times
 * the unscaled one. */
static void test_fp8_pow2_scales(void) {
    const int32_t H = 4, KVH = 2, D = 64, T = 20;
    int32_t table[2] = {1, 0}, tok[20] = {0}, pos[20], sq[20] = {0}, rows[1] = {0};
    for (int t = 0; t < T; t++) pos[t] = t;
    struct bk_seq seq = {.block_table = table, .n_blocks = 2, .state_slot = -1};
    struct bk_batch bt = {.n_tokens = T, .token_ids = tok, .pos = pos, .seq_idx = sq, .n_seqs = 1, .seqs = &seq, .n_logits = 1, .logit_rows = rows};
    float *q = malloc(sizeof(float) * T * H * D), *k = malloc(sizeof(float) * T * KVH * D), *v = malloc(sizeof(float) * T * KVH * D);
    float *q2 = malloc(sizeof(float) * T * H * D), *k2 = malloc(sizeof(float) * T * KVH * D), *v2 = malloc(sizeof(float) * T * KVH * D);
    float *o1 = malloc(sizeof(float) * T * H * D), *o2 = malloc(sizeof(float) * T * H * D);
    for (int i = 0; i < T * H * D; i++) { q[i] = test_rand_normal(); q2[i] = q[i] / 8.0f; }
    for (int i = 0; i < T * KVH * D; i++) {
        k[i] = test_rand_normal(); v[i] = test_rand_normal();
        k2[i] = k[i] * 8.0f; v2[i] = v[i] * 0.25f;
    }
    const struct bk_attn_params p = {.n_head = H, .n_kv_head = KVH, .head_dim = D, .scale = 0.125f, .kv_layer = 0};
    for (int b = 0; b < N_BE; b++) {
        struct bk_kv_cache *c1 = NULL, *c2 = NULL;
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_FP8_E4M3, 1, 2, KVH, D, &c1) == VLLMC_OK);
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_FP8_E4M3, 1, 2, KVH, D, &c2) == VLLMC_OK);
        c2->k_scales[0] = 8.0f;
        c2->v_scales[0] = 0.25f;
        CHECK(bes[b]->ops->batch_set(bes[b], &bt) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c1, &p, q, 0, k, 0, v, 0, o1) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c2, &p, q2, 0, k2, 0, v2, 0, o2) == VLLMC_OK);
        CHECK(!memcmp(c1->k[0], c2->k[0], 2 * 16 * KVH * D) && !memcmp(c1->v[0], c2->v[0], 2 * 16 * KVH * D));
        int bad = 0;
        for (int i = 0; i < T * H * D; i++) bad += o2[i] != o1[i] * 0.25f;
        CHECK_MSG(bad == 0, "backend %d: %d outputs not exactly scaled", b, bad);
        /* scales must be finite and > 0 */
        c2->k_scales[0] = 0.0f;
        CHECK(bes[b]->ops->attention(bes[b], c2, &p, q2, 0, k2, 0, v2, 0, o2) == VLLMC_ERR_INVALID);
        c2->k_scales[0] = NAN;
        CHECK(bes[b]->ops->attention(bes[b], c2, &p, q2, 0, k2, 0, v2, 0, o2) == VLLMC_ERR_INVALID);
        bes[b]->ops->kv_destroy(bes[b], c1);
        bes[b]->ops->kv_destroy(bes[b], c2);
    }
    free(q); free(q2); free(k); free(v); free(k2); free(v2); free(o1); free(o2);
}


/* fp8 key shift: keys with a large per-channel constant (as a key bias gives) plus a small variation.
 * With k_shift = the constant the cache holds e4m3((k - shift) / k_scale) exactly, attention is close
 * to the f32 cache's (the shift only moves every score of a query by q . shift), much closer than
 * without the shift, fast == reference bit for bit; f16 caches ignore the shift. */
static void test_fp8_k_shift(void) {
    const int32_t H = 4, KVH = 2, D = 64, T = 40;
    int32_t table[3] = {2, 0, 1}, tok[40] = {0}, pos[40], sq[40] = {0}, rows[1] = {0};
    for (int t = 0; t < T; t++) pos[t] = t;
    struct bk_seq seq = {.block_table = table, .n_blocks = 3, .state_slot = -1};
    struct bk_batch bt = {.n_tokens = T, .token_ids = tok, .pos = pos, .seq_idx = sq, .n_seqs = 1, .seqs = &seq, .n_logits = 1, .logit_rows = rows};
    const int32_t nq = T * H * D, nk = T * KVH * D, kd = KVH * D;
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk), *v = malloc(sizeof(float) * (size_t)nk);
    float *shift = malloc(sizeof(float) * (size_t)kd);
    float *o32 = malloc(sizeof(float) * (size_t)nq), *o8 = malloc(sizeof(float) * (size_t)nq), *o8s[N_BE];
    /* the last 8 channels of each head: constants of 100..250 (either sign), the query large there too */
    for (int32_t c = 0; c < kd; c++)
        shift[c] = (c % D) >= D - 8 ? (float)((test_rand_u64() & 1) ? 1 : -1) * (100.0f + 150.0f * (float)test_rand_uniform()) : 0.0f;
    for (int32_t i = 0; i < nq; i++) q[i] = test_rand_normal() * ((i % D) >= D - 8 ? 2.0f : 1.0f);
    for (int32_t i = 0; i < nk; i++) { k[i] = shift[i % kd] + test_rand_normal(); v[i] = test_rand_normal(); }
    const struct bk_attn_params p = {.n_head = H, .n_kv_head = KVH, .head_dim = D, .scale = 0.125f, .kv_layer = 1};
    for (int b = 0; b < N_BE; b++) {
        struct bk_kv_cache *c32 = NULL, *c8 = NULL, *c8s = NULL, *c16 = NULL, *c16s = NULL;
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_F32, 2, 3, KVH, D, &c32) == VLLMC_OK);
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_FP8_E4M3, 2, 3, KVH, D, &c8) == VLLMC_OK);
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_FP8_E4M3, 2, 3, KVH, D, &c8s) == VLLMC_OK);
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_F16, 2, 3, KVH, D, &c16) == VLLMC_OK);
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_F16, 2, 3, KVH, D, &c16s) == VLLMC_OK);
        CHECK(!c8s->k_shift); /* a backend's new cache has none */
        c8s->k_shift = calloc((size_t)2 * kd, sizeof(float));
        c16s->k_shift = calloc((size_t)2 * kd, sizeof(float));
        memcpy(c8s->k_shift + kd, shift, sizeof(float) * (size_t)kd);
        memcpy(c16s->k_shift + kd, shift, sizeof(float) * (size_t)kd);
        c8s->k_scales[1] = 0.75f;
        o8s[b] = malloc(sizeof(float) * (size_t)nq);
        CHECK(bes[b]->ops->batch_set(bes[b], &bt) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c32, &p, q, 0, k, 0, v, 0, o32) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c8, &p, q, 0, k, 0, v, 0, o8) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c8s, &p, q, 0, k, 0, v, 0, o8s[b]) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c16, &p, q, 0, k, 0, v, 0, o8) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c16s, &p, q, 0, k, 0, v, 0, o8) == VLLMC_OK);
        /* stored codes: e4m3((k - shift) / 0.75) at [block][head][slot][dim] */
        int bad = 0;
        for (int32_t t = 0; t < T; t++)
            for (int32_t h = 0; h < KVH; h++)
                for (int32_t i = 0; i < D; i++) {
                    const uint8_t *kc = (const uint8_t *)c8s->k[1] + ((size_t)(table[t / 16] * KVH + h) * 16 + (size_t)(t % 16)) * (size_t)D;
                    bad += kc[i] != bk_fp8_e4m3_from_f32((k[t * kd + h * D + i] - shift[h * D + i]) / 0.75f);
                }
        CHECK_MSG(bad == 0, "backend %d: %d shifted fp8 codes differ", b, bad);
        CHECK_MSG(!memcmp(c16->k[1], c16s->k[1], (size_t)bk_kv_block_bytes(BK_KV_F16, KVH, D) * 3), "f16 cache read k_shift");
        if (b == 0) {
            CHECK(bes[b]->ops->attention(bes[b], c8, &p, q, 0, k, 0, v, 0, o8) == VLLMC_OK); /* o8 was overwritten */
            const double e_plain = rel_err(o8, o32, (size_t)nq), e_shift = rel_err(o8s[0], o32, (size_t)nq);
            printf("  fp8 keys of |k| 100..250 +- 1: rel err vs f32 cache %.3e without the shift, %.3e with it\n", e_plain, e_shift);
            CHECK_MSG(e_shift < 6e-2 && e_shift > 0 && e_plain > 4 * e_shift, "k_shift: rel err %g with, %g without", e_shift, e_plain);
        } else {
            CHECK_MSG(!memcmp(o8s[b], o8s[0], sizeof(float) * (size_t)nq), "k_shift: backend %d differs from the reference", b);
        }
        bes[b]->ops->kv_destroy(bes[b], c32);
        bes[b]->ops->kv_destroy(bes[b], c8);
        bes[b]->ops->kv_destroy(bes[b], c8s);
        bes[b]->ops->kv_destroy(bes[b], c16);
        bes[b]->ops->kv_destroy(bes[b], c16s);
    }
    for (int b = 0; b < N_BE; b++) free(o8s[b]);
    free(q); free(k); free(v); free(shift); free(o32); free(o8);
}


/* The fp8 read path against the values it should decode: an f32 cache holding e4m3((k - shift) / k_scale) *
 * k_scale and e4m3(v / v_scale) * v_scale, computed here from the conversion, gives the fp8 cache's attention
 * up to float rounding (non-power-of-two scales, a key shift, keys and values from subnormal to saturated). */
static void test_fp8_read_path(void) {
    const int32_t H = 4, KVH = 2, D = 64, T = 33, kd = KVH * D;
    int32_t table[3] = {1, 2, 0}, tok[33] = {0}, pos[33], sq[33] = {0}, rows[1] = {0};
    for (int t = 0; t < T; t++) pos[t] = t;
    struct bk_seq seq = {.block_table = table, .n_blocks = 3, .state_slot = -1};
    struct bk_batch bt = {.n_tokens = T, .token_ids = tok, .pos = pos, .seq_idx = sq, .n_seqs = 1, .seqs = &seq, .n_logits = 1, .logit_rows = rows};
    const float ks = 0.37f, vs = 2.9f;
    float *q = malloc(sizeof(float) * (size_t)(T * H * D)), *k = malloc(sizeof(float) * (size_t)(T * kd)), *v = malloc(sizeof(float) * (size_t)(T * kd));
    float *kq = malloc(sizeof(float) * (size_t)(T * kd)), *vq = malloc(sizeof(float) * (size_t)(T * kd)), *shift = malloc(sizeof(float) * (size_t)kd);
    float *o8 = malloc(sizeof(float) * (size_t)(T * H * D)), *o32 = malloc(sizeof(float) * (size_t)(T * H * D));
    for (int32_t c = 0; c < kd; c++) shift[c] = c % 5 == 0 ? 40.0f * test_rand_normal() : 0.0f;
    for (int32_t i = 0; i < T * H * D; i++) q[i] = 0.05f * test_rand_normal();
    for (int32_t i = 0; i < T * kd; i++) {
        /* magnitudes 2^-14 .. 2^9 (e4m3 subnormals at these scales up to past 448 * scale) */
        const float mag = ldexpf(1.0f, -14 + (int)(test_rand_u64() % 24));
        k[i] = shift[i % kd] + mag * test_rand_normal();
        v[i] = mag * test_rand_normal();
        kq[i] = bk_fp8_e4m3_to_f32(bk_fp8_e4m3_from_f32((k[i] - shift[i % kd]) / ks)) * ks;
        vq[i] = bk_fp8_e4m3_to_f32(bk_fp8_e4m3_from_f32(v[i] / vs)) * vs;
    }
    const struct bk_attn_params p = {.n_head = H, .n_kv_head = KVH, .head_dim = D, .scale = 0.125f, .kv_layer = 0};
    for (int b = 0; b < N_BE; b++) {
        struct bk_kv_cache *c8 = NULL, *c32 = NULL;
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_FP8_E4M3, 1, 3, KVH, D, &c8) == VLLMC_OK);
        CHECK(bes[b]->ops->kv_create(bes[b], BK_KV_F32, 1, 3, KVH, D, &c32) == VLLMC_OK);
        c8->k_scales[0] = ks;
        c8->v_scales[0] = vs;
        c8->k_shift = malloc(sizeof(float) * (size_t)kd);
        memcpy(c8->k_shift, shift, sizeof(float) * (size_t)kd);
        CHECK(bes[b]->ops->batch_set(bes[b], &bt) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c8, &p, q, 0, k, 0, v, 0, o8) == VLLMC_OK);
        CHECK(bes[b]->ops->attention(bes[b], c32, &p, q, 0, kq, 0, vq, 0, o32) == VLLMC_OK);
        const double err = rel_err(o8, o32, (size_t)(T * H * D));
        if (b == 0) printf("  fp8 read path (scales %g / %g, key shift) vs an f32 cache of the decoded values: rel err %.2e\n", (double)ks, (double)vs, err);
        CHECK_MSG(err < 1e-4, "backend %d: fp8 read path rel err %g", b, err); /* a wrong scale or code: >= 1e-2 */
        bes[b]->ops->kv_destroy(bes[b], c8);
        bes[b]->ops->kv_destroy(bes[b], c32);
    }
    free(q); free(k); free(v); free(kq); free(vq); free(shift); free(o8); free(o32);
}


/* ---- through a model ---- */

#define ME 128
#define MH 4
#define MKVH 2
#define MD 32
#define MFF 256
#define MNV 200
#define MNL 2

static float *rand_f32(int64_t n, float gain) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = gain * test_rand_normal();
    return f;
}

/* A qwen2 model of f32 weights (k bias large, as real qwen2 checkpoints have) with the given scale keys:
 * k_scale < 0 = no key; v_scales NULL = no key, else an array of n_v numbers. */
static void write_qwen2(const char *path, float k_scale, const float *v_scales, int n_v) {
    struct gguf_writer *w = gguf_writer_create();
    float *own[64];
    int n_own = 0;
    gguf_writer_set_str(w, "general.architecture", "qwen2");
    gguf_writer_set_u32(w, "qwen2.block_count", MNL);
    gguf_writer_set_u32(w, "qwen2.embedding_length", ME);
    gguf_writer_set_u32(w, "qwen2.feed_forward_length", MFF);
    gguf_writer_set_u32(w, "qwen2.attention.head_count", MH);
    gguf_writer_set_u32(w, "qwen2.attention.head_count_kv", MKVH);
    gguf_writer_set_f32(w, "qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_writer_set_f32(w, "qwen2.rope.freq_base", 10000.0f);
    if (k_scale >= 0) gguf_writer_set_f32(w, "vllmc.kv_cache.k_scale", k_scale);
    if (v_scales) gguf_writer_set_arr(w, "vllmc.kv_cache.v_scale", GGUF_TYPE_FLOAT32, v_scales, (uint64_t)n_v);
#define ADD(name, n_in, n_out, gain, bias) do { \
        float *f_ = rand_f32((int64_t)(n_in) * (n_out), gain); \
        if (bias) for (int64_t i_ = 0; i_ < (int64_t)(n_in) * (n_out); i_++) f_[i_] += (bias); \
        own[n_own++] = f_; \
        int64_t ne_[2] = {n_in, n_out}; \
        VLLMC_ASSERT(gguf_writer_add_tensor(w, name, GGML_TYPE_F32, (n_out) == 1 ? 1 : 2, (n_out) == 1 ? (int64_t[]){n_in} : ne_, f_) == VLLMC_OK); \
    } while (0)
    ADD("token_embd.weight", ME, MNV, 1.0f, 0.0f);
    ADD("output_norm.weight", ME, 1, 0.1f, 1.0f);
    char n[64];
    for (int l = 0; l < MNL; l++) {
#define NAME(x) (snprintf(n, sizeof(n), "blk.%d.%s", l, x), n)
        ADD(NAME("attn_norm.weight"), ME, 1, 0.1f, 1.0f);
        ADD(NAME("attn_q.weight"), ME, MH * MD, 0.3f / sqrtf(ME), 0.0f);
        ADD(NAME("attn_k.weight"), ME, MKVH * MD, 0.3f / sqrtf(ME), 0.0f);
        ADD(NAME("attn_v.weight"), ME, MKVH * MD, 1.0f / sqrtf(ME), 0.0f);
        ADD(NAME("attn_output.weight"), MH * MD, ME, 0.5f / sqrtf(MH * MD), 0.0f);
        ADD(NAME("ffn_norm.weight"), ME, 1, 0.1f, 1.0f);
        ADD(NAME("ffn_gate.weight"), ME, MFF, 1.0f / sqrtf(ME), 0.0f);
        ADD(NAME("ffn_up.weight"), ME, MFF, 1.0f / sqrtf(ME), 0.0f);
        ADD(NAME("ffn_down.weight"), MFF, ME, 0.5f / sqrtf(MFF), 0.0f);
        ADD(NAME("attn_q.bias"), MH * MD, 1, 0.2f, 0.0f);
        ADD(NAME("attn_k.bias"), MKVH * MD, 1, 4.0f, 0.0f);
        ADD(NAME("attn_v.bias"), MKVH * MD, 1, 0.2f, 0.0f);
#undef NAME
    }
#undef ADD
    VLLMC_ASSERT(gguf_writer_write(w, path) == VLLMC_OK);
    gguf_writer_destroy(w);
    for (int i = 0; i < n_own; i++) free(own[i]);
}

/* Prefill 40 tokens in chunks of 16 (all logits) then 4 decode steps; logits [44][MNV]. */
static void model_logits(struct model *m, enum bk_kv_dtype dt, const int32_t *toks, float *out) {
    struct bk_kv_cache *kv = NULL;
    CHECK(model_kv_create(m, dt, 4, &kv) == VLLMC_OK);
    if (!kv) return;
    int32_t table[4] = {2, 0, 3, 1}, pos[16], sq[16] = {0}, rows[16];
    struct bk_seq seq = {.block_table = table, .n_blocks = 4, .state_slot = 0};
    for (int p0 = 0; p0 < 44;) {
        const int c = p0 < 40 ? (p0 + 16 <= 40 ? 16 : 40 - p0) : 1;
        for (int i = 0; i < c; i++) { pos[i] = p0 + i; rows[i] = i; }
        struct bk_batch b = {.n_tokens = c, .token_ids = toks + p0, .pos = pos, .seq_idx = sq, .n_seqs = 1, .seqs = &seq,
                             .n_logits = c, .logit_rows = rows};
        CHECK(model_forward(m, &b, kv, out + (size_t)p0 * MNV, NULL) == VLLMC_OK);
        p0 += c;
    }
    model_kv_destroy(m, kv);
}

static void test_model_kv(void) {
    char path[] = "/tmp/test_kv_dtype_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    struct backend *ref = bes[0], *fast = bes[2];
    /* scale keys: a number for K, an array for V */
    const float vs[MNL] = {0.5f, 0.25f};
    write_qwen2(path, 4.0f, vs, MNL);
    struct model *m = NULL, *mr = NULL;
    CHECK(model_load(path, fast, &m) == VLLMC_OK && model_load(path, ref, &mr) == VLLMC_OK);
    if (!m || !mr) { unlink(path); return; }
    CHECK(model_reserve(m, 16, 16) == VLLMC_OK && model_reserve(mr, 16, 16) == VLLMC_OK);
    struct bk_kv_cache *kv = NULL;
    CHECK(model_kv_create(m, BK_KV_FP8_E4M3, 2, &kv) == VLLMC_OK && kv);
    if (kv) {
        CHECK(kv->k_scales[0] == 4.0f && kv->k_scales[1] == 4.0f && kv->v_scales[0] == 0.5f && kv->v_scales[1] == 0.25f);
        /* the key shift is the key bias in the NeoX pairs that turn by <= 1 radian over the trained context
         * (4096 by default; theta_i = 10000^(-i/16)): pair 15 only, channels 15 and 31 of each head */
        CHECK(kv->k_shift != NULL);
        int n_set = 0, bad = 0;
        for (int l = 0; kv->k_shift && l < MNL; l++) {
            char name[64];
            snprintf(name, sizeof(name), "blk.%d.attn_k.bias", l);
            const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
            CHECK(t != NULL);
            if (!t) break;
            for (int c = 0; c < MKVH * MD; c++) {
                const bool slow = pow(10000.0, -(double)(c % (MD / 2)) / (MD / 2)) * 4096.0 <= 1.0;
                const float want = slow ? ((const float *)t->data)[c] : 0.0f;
                n_set += slow;
                bad += kv->k_shift[l * MKVH * MD + c] != want;
            }
        }
        CHECK_MSG(n_set == MNL * MKVH * 2 && bad == 0, "k_shift: %d channels shifted, %d entries wrong", n_set, bad);
        model_kv_destroy(m, kv);
    }
    CHECK(model_kv_create(m, BK_KV_F16, 2, &kv) == VLLMC_OK && kv);
    if (kv) { CHECK(kv->k_scales[0] == 1.0f && kv->v_scales[1] == 1.0f && !kv->k_shift); model_kv_destroy(m, kv); }
    /* logits: every dtype close to the f32 cache; the fast backend gives the reference's bits */
    int32_t toks[44];
    for (int i = 0; i < 44; i++) toks[i] = (int32_t)(test_rand_u64() % MNV);
    const size_t nl = (size_t)44 * MNV;
    float *l32 = malloc(nl * 4), *l = malloc(nl * 4), *lr = malloc(nl * 4);
    model_logits(m, BK_KV_F32, toks, l32);
    const double bound[BK_KV_NDTYPE] = {0.0, 2e-3, 1e-2, 6e-2};
    for (int dt = 0; dt < BK_KV_NDTYPE; dt++) {
        model_logits(m, (enum bk_kv_dtype)dt, toks, l);
        model_logits(mr, (enum bk_kv_dtype)dt, toks, lr);
        CHECK_MSG(!memcmp(l, lr, nl * 4), "model logits with a %s cache: fast differs from the reference", bk_kv_dtype_name((enum bk_kv_dtype)dt));
        double num = 0, den = 0;
        for (size_t i = 0; i < nl; i++) { num += ((double)l[i] - l32[i]) * ((double)l[i] - l32[i]); den += (double)l32[i] * l32[i]; }
        const double err = sqrt(num / den);
        printf("  model logits, %-8s cache: rel err vs f32 cache %.3e\n", bk_kv_dtype_name((enum bk_kv_dtype)dt), err);
        if (dt) CHECK_MSG(err < bound[dt] && err > 0, "model logits %s: rel err %g", bk_kv_dtype_name((enum bk_kv_dtype)dt), err);
    }
    free(l32); free(l); free(lr);
    model_destroy(m);
    model_destroy(mr);
    /* bad scale keys are refused when an fp8 cache is made (other dtypes do not read them) */
    const float bad_v[3] = {1.0f, -1.0f, 1.0f};
    for (int c = 0; c < 3; c++) {
        if (c == 0) write_qwen2(path, 0.0f, NULL, 0);           /* zero */
        if (c == 1) write_qwen2(path, -1.0f, bad_v, 2);         /* a negative entry */
        if (c == 2) write_qwen2(path, -1.0f, bad_v, 3);         /* 3 entries for 2 layers */
        m = NULL;
        CHECK(model_load(path, fast, &m) == VLLMC_OK);
        if (!m) continue;
        kv = (struct bk_kv_cache *)1;
        CHECK_MSG(model_kv_create(m, BK_KV_FP8_E4M3, 2, &kv) == VLLMC_ERR_CORRUPT && !kv, "bad scale case %d", c);
        kv = NULL;
        CHECK(model_kv_create(m, BK_KV_F16, 2, &kv) == VLLMC_OK && kv);
        model_kv_destroy(m, kv);
        model_destroy(m);
    }
    unlink(path);
}

int main(void) {
    test_seed_auto("test_kv_dtype");
    test_e4m3();
    CHECK(backend_cpu_create(1, true, &bes[0]) == VLLMC_OK);
    CHECK(backend_cpu_create(1, false, &bes[1]) == VLLMC_OK);
    CHECK(backend_cpu_create(2, false, &bes[2]) == VLLMC_OK);
    if (!bes[0] || !bes[1] || !bes[2]) return test_finish("test_kv_dtype");
    const struct attn_case cases[] = {
        {6, 2, 64, 1.0f, 1.0f, 1.0f},     /* AVX2 kernels */
        {4, 4, 128, 1.0f, 1.0f, 3.0f},    /* MHA, wider heads */
        {6, 3, 40, 1.0f, 1.0f, 1.0f},     /* head_dim not a multiple of 16: scalar kernels on both paths */
        {6, 2, 64, 0.37f, 2.9f, 30.0f},   /* non-unit scales on large data (1.0 would saturate K and V) */
        {6, 2, 64, 1.0f, 1.0f, 0.02f},    /* small data: many subnormal codes */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) test_attention_case(&cases[i]);
    test_fp8_pow2_scales();
    test_fp8_k_shift();
    test_fp8_read_path();
    test_model_kv();
    for (int b = 0; b < N_BE; b++) bes[b]->ops->destroy(bes[b]);
    return test_finish("test_kv_dtype");
}
