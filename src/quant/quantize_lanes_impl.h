/* Lane-parallel versions of the K-quant and IQ4 scale searches (make_qkx2_quants, make_qx_quants, the IQ4
 * group search): independent groups run side by side, one group per vector lane. Invariant: each lane
 * performs exactly the f32 operations, in exactly the order, of the scalar reference (quantize_kquants.c,
 * quantize_ref.c); data-dependent branches become per-lane selects, so the results are bit-identical. The
 * gain is SIMD width and instruction-level parallelism (the scalar searches are bound by the latency of
 * their serial sums). Template: the including file defines QL (lanes per vector) and QL_FN(name) (the
 * suffix of the exported entry points); quantize_lanes.c builds it for SSE2 (4 lanes, any x86-64),
 * quantize_lanes_avx2.c for AVX2 (8 lanes). GCC/Clang vector extensions; no FMA contraction
 * (quantize_priv.h). */
#include "quant.h"
#include "blocks.h"
#include "quantize_priv.h"

#include <math.h>

#if !defined(QL) || !defined(QL_FN)
#error "define QL and QL_FN before including quantize_lanes_impl.h"
#endif

typedef float ql_f __attribute__((vector_size(4 * QL)));
typedef int32_t ql_i __attribute__((vector_size(4 * QL)));

#define QL_SPLAT_F(s) ((ql_f){0} + (float)(s))
#define QL_SPLAT_I(s) ((ql_i){0} + (int32_t)(s))
/* m ? a : b per lane; m is a comparison result (all ones / all zeros per lane) */
#define QL_SEL_F(m, a, b) ((ql_f)(((m) & (ql_i)(a)) | (~(m) & (ql_i)(b))))
#define QL_SEL_I(m, a, b) (((m) & (a)) | (~(m) & (b)))
#define QL_FABS(v) ((ql_f)((ql_i)(v) & 0x7fffffff))
/* quant_nearest_int per lane (same 1.5*2^23 trick, same out-of-range garbage) */
#define QL_NEAREST(v) ((((ql_i)((v) + 12582912.f)) & 0x007fffff) - 0x00400000)
#define QL_TO_F(vi) __builtin_convertvector((vi), ql_f)
#define QL_CLAMP_I(l, lo, hi) QL_SEL_I((l) < (lo), QL_SPLAT_I(lo), QL_SEL_I((l) > (hi), QL_SPLAT_I(hi), (l)))

/* Gather element i of the 8 groups (group k starts at x + k*stride). */
static void ql_load_t(const float *x, int stride, int n, ql_f *X) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < QL; k++) X[i][k] = x[k * stride + i];
}

static void ql_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *scale_out,
                    float *the_min_out, float rmin, float rdelta, int nstep, int use_mad) {
    ql_f X[32] = {{0}}, W[32] = {{0}};
    ql_i Lv[32], La[32];
    ql_load_t(x, n, n, X);
    ql_load_t(w, n, n, W);
    ql_f min = X[0], max = X[0], sum_w = W[0];
    ql_f sum_x = sum_w * X[0];
    for (int i = 1; i < n; i++) {
        min = QL_SEL_F(X[i] < min, X[i], min);
        max = QL_SEL_F(X[i] > max, X[i], max);
        sum_w += W[i];
        sum_x += W[i] * X[i];
    }
    const ql_f zero = QL_SPLAT_F(0.0f);
    min = QL_SEL_F(min > 0, zero, min);
    const ql_i degenerate = max == min;
    const ql_f min0 = min;
    /* as in the scalar search, later steps use the min of the last accepted fit */
    ql_f iscale = QL_SPLAT_F((float)nmax) / (max - min);
    ql_f scale = QL_SPLAT_F(1.0f) / iscale;
    ql_f best_error = zero;
    for (int i = 0; i < n; i++) {
        ql_i l = QL_NEAREST(iscale * (X[i] - min));
        Lv[i] = QL_CLAMP_I(l, 0, nmax);
        ql_f diff = scale * QL_TO_F(Lv[i]) + min - X[i];
        diff = use_mad ? QL_FABS(diff) : diff * diff;
        best_error += W[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        const float num = rmin + rdelta * (float)is + (float)nmax;
        iscale = QL_SPLAT_F(num) / (max - min);
        ql_f sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < n; i++) {
            ql_i l = QL_NEAREST(iscale * (X[i] - min));
            l = QL_CLAMP_I(l, 0, nmax);
            La[i] = l;
            ql_f lf = QL_TO_F(l);
            ql_f wl = W[i] * lf;
            sum_l += wl;
            sum_l2 += wl * lf;
            sum_xl += wl * X[i];
        }
        ql_f D = sum_w * sum_l2 - sum_l * sum_l;
        ql_i ok = D > 0;
        int any = 0;
        for (int k = 0; k < QL; k++) any |= ok[k];
        if (!any) continue;
        ql_f this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        ql_f this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        ql_i pos = this_min > 0;
        this_min = QL_SEL_F(pos, zero, this_min);
        this_scale = QL_SEL_F(pos, sum_xl / sum_l2, this_scale);
        ql_f cur_error = zero;
        for (int i = 0; i < n; i++) {
            ql_f diff = this_scale * QL_TO_F(La[i]) + this_min - X[i];
            diff = use_mad ? QL_FABS(diff) : diff * diff;
            cur_error += W[i] * diff;
        }
        ql_i acc = ok & (cur_error < best_error);
        for (int i = 0; i < n; i++) Lv[i] = QL_SEL_I(acc, La[i], Lv[i]);
        best_error = QL_SEL_F(acc, cur_error, best_error);
        scale = QL_SEL_F(acc, this_scale, scale);
        min = QL_SEL_F(acc, this_min, min);
    }
    for (int k = 0; k < QL; k++) {
        if (degenerate[k]) {
            for (int i = 0; i < n; i++) L[k * n + i] = 0;
            the_min_out[k] = -min0[k];
            scale_out[k] = 0.f;
        } else {
            for (int i = 0; i < n; i++) L[k * n + i] = (uint8_t)Lv[i][k];
            the_min_out[k] = -min[k];
            scale_out[k] = scale[k];
        }
    }
}

static void ql_qx(int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    ql_f X[32] = {{0}};
    ql_i Lv[32], Lt[32];
    ql_load_t(x, n, n, X);
    const ql_f zero = QL_SPLAT_F(0.0f);
    ql_f max = zero, amax = zero;
    for (int i = 0; i < n; i++) {
        ql_f ax = QL_FABS(X[i]);
        ql_i m = ax > amax;
        amax = QL_SEL_F(m, ax, amax);
        max = QL_SEL_F(m, X[i], max);
    }
    const ql_i all_zero = amax < QUANT_GROUP_MAX_EPS;
    ql_f iscale = QL_SPLAT_F((float)-nmax) / max;
    ql_f sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        ql_i l = QL_CLAMP_I(QL_NEAREST(iscale * X[i]), -nmax, nmax - 1);
        Lv[i] = l + nmax;
        ql_f lf = QL_TO_F(l);
        ql_f w = X[i] * X[i];
        sumlx += w * X[i] * lf;
        suml2 += w * lf * lf;
    }
    ql_f scale = QL_SEL_F(suml2 != 0, sumlx / suml2, zero);
    ql_f best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        const float num = -((float)nmax + 0.1f * (float)is);
        iscale = QL_SPLAT_F(num) / max;
        sumlx = suml2 = zero;
        for (int i = 0; i < n; i++) {
            ql_i l = QL_CLAMP_I(QL_NEAREST(iscale * X[i]), -nmax, nmax - 1);
            Lt[i] = l + nmax;
            ql_f lf = QL_TO_F(l);
            ql_f w = X[i] * X[i];
            sumlx += w * X[i] * lf;
            suml2 += w * lf * lf;
        }
        ql_i acc = (suml2 > 0) & (sumlx * sumlx > best * suml2);
        for (int i = 0; i < n; i++) Lv[i] = QL_SEL_I(acc, Lt[i], Lv[i]);
        ql_f new_scale = sumlx / suml2;
        scale = QL_SEL_F(acc, new_scale, scale);
        best = QL_SEL_F(acc, new_scale * sumlx, best);
    }
    for (int k = 0; k < QL; k++) {
        for (int i = 0; i < n; i++) L[k * n + i] = all_zero[k] ? 0 : (int8_t)Lv[i][k];
        scale_out[k] = all_zero[k] ? 0.f : scale[k];
    }
}

void QL_FN(quant_lanes_qkx2)(int n, int nmax, const float *x, const float *w, uint8_t *L, float *scale_out,
                             float *the_min_out, float rmin, float rdelta, int nstep, int use_mad) {
    for (int h = 0; h < 8; h += QL)
        ql_qkx2(n, nmax, x + h * n, w + h * n, L + h * n, scale_out + h, the_min_out + h, rmin, rdelta, nstep, use_mad);
}

void QL_FN(quant_lanes_qx)(int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    for (int h = 0; h < 8; h += QL) ql_qx(n, nmax, x + h * n, L + h * n, scale_out + h);
}

/* make_q3_quants (do_rmse) per lane: RNE start at -nmax/max, then up to 5 coordinate-descent passes. A lane
 * whose pass changed nothing would have stopped; running it again changes nothing either (a pass reads only
 * x and the unchanged state), so all lanes simply run until no lane changes. */
static void ql_q3(int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    ql_f X[32] = {{0}};
    ql_i Lv[32];
    ql_load_t(x, n, n, X);
    const ql_f zero = QL_SPLAT_F(0.0f);
    ql_f max = zero, amax = zero;
    for (int i = 0; i < n; i++) {
        ql_f ax = QL_FABS(X[i]);
        ql_i m = ax > amax;
        amax = QL_SEL_F(m, ax, amax);
        max = QL_SEL_F(m, X[i], max);
    }
    const ql_i all_zero = amax < QUANT_GROUP_MAX_EPS;
    const ql_f iscale = QL_SPLAT_F((float)-nmax) / max;
    ql_f sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        ql_i l = QL_CLAMP_I(QL_NEAREST(iscale * X[i]), -nmax, nmax - 1);
        Lv[i] = l;
        ql_f lf = QL_TO_F(l);
        ql_f w = X[i] * X[i];
        sumlx += w * X[i] * lf;
        suml2 += w * lf * lf;
    }
    for (int itry = 0; itry < 5; itry++) {
        ql_i changed = QL_SPLAT_I(0);
        for (int i = 0; i < n; i++) {
            ql_f w = X[i] * X[i];
            ql_f lf = QL_TO_F(Lv[i]);
            ql_f slx = sumlx - w * X[i] * lf;
            ql_i pos = slx > 0;
            ql_f sl2 = suml2 - w * lf * lf;
            ql_i new_l = QL_CLAMP_I(QL_NEAREST(X[i] * sl2 / slx), -nmax, nmax - 1);
            ql_i differ = pos & (new_l != Lv[i]);
            ql_f nlf = QL_TO_F(new_l);
            slx += w * X[i] * nlf;
            sl2 += w * nlf * nlf;
            ql_i acc = differ & (sl2 > 0) & (slx * slx * suml2 > sumlx * sumlx * sl2);
            Lv[i] = QL_SEL_I(acc, new_l, Lv[i]);
            sumlx = QL_SEL_F(acc, slx, sumlx);
            suml2 = QL_SEL_F(acc, sl2, suml2);
            changed |= acc;
        }
        int any = 0;
        for (int k = 0; k < QL; k++) any |= changed[k];
        if (!any) break;
    }
    ql_f scale = QL_SEL_F(suml2 > 0, sumlx / suml2, zero);
    for (int k = 0; k < QL; k++) {
        for (int i = 0; i < n; i++) L[k * n + i] = all_zero[k] ? 0 : (int8_t)(Lv[i][k] + nmax);
        scale_out[k] = all_zero[k] ? 0.f : scale[k];
    }
}

void QL_FN(quant_lanes_q3)(int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    for (int h = 0; h < 8; h += QL) ql_q3(n, nmax, x + h * n, L + h * n, scale_out + h);
}

/* ---- IQ4_NL / IQ4_XS group scale (see qref_iq4_group_scale in quantize_ref.c) ---- */

/* Bracket table for the K_NL nearest-entry search: for an integer f in [K_NL[0], K_NL[15]), lo[f - K_NL[0]]
 * is the largest entry <= f and hi[...] the next one. For a real v in (K_NL[0], K_NL[15]) the pair
 * bracketing v (what best_index_int8's binary search finds) is the pair of floor(v), as entries are
 * integers. Built per call (240 entries): no shared state. */
#define QL_IQ4_SPAN 240   /* K_NL[15] - K_NL[0] */
struct ql_iq4_bracket { float lo[QL_IQ4_SPAN], hi[QL_IQ4_SPAN]; };

static void ql_iq4_bracket_init(struct ql_iq4_bracket *b) {
    const int8_t *t = kvalues_iq4nl;
    int ml = 0;
    for (int f = t[0]; f < t[15]; f++) {
        while (t[ml + 1] <= f) ml++;
        b->lo[f - t[0]] = (float)t[ml];
        b->hi[f - t[0]] = (float)t[ml + 1];
    }
}

/* Nearest K_NL entry per lane, as best_index_int8: v <= K_NL[0] -> K_NL[0], v >= K_NL[15] -> K_NL[15],
 * else the bracketing pair (lo, hi) and lo iff v - lo < hi - v (ties to the upper entry), with the same
 * f32 subtractions. Returns the entry's value as f32. Identical to the binary search for every non-NaN v. */
static ql_f ql_iq4_nearest_value(const struct ql_iq4_bracket *b, ql_f v) {
    const int8_t *t = kvalues_iq4nl;
    ql_i fi = __builtin_convertvector(v, ql_i);   /* truncation toward zero ... */
    fi += QL_TO_F(fi) > v;                        /* ... corrected to floor (adds -1 where trunc > v) */
    fi = QL_CLAMP_I(fi, t[0], t[15] - 1) - t[0];
    ql_f lo, hi;
    for (int k = 0; k < QL; k++) {
        lo[k] = b->lo[fi[k]];
        hi[k] = b->hi[fi[k]];
    }
    ql_f q = QL_SEL_F(v - lo < hi - v, lo, hi);
    q = QL_SEL_F(v <= QL_SPLAT_F(t[0]), QL_SPLAT_F(t[0]), q);
    return QL_SEL_F(v >= QL_SPLAT_F(t[15]), QL_SPLAT_F(t[15]), q);
}

static void ql_iq4_scale(const struct ql_iq4_bracket *b, const float *x, float *d_out) {
    const int8_t *values = kvalues_iq4nl;
    ql_f X[32] = {{0}}, W[32];
    ql_load_t(x, 32, 32, X);
    const ql_f zero = QL_SPLAT_F(0.0f);
    ql_f amax = zero, max = zero;
    for (int j = 0; j < 32; j++) {
        W[j] = X[j] * X[j];
        ql_f ax = QL_FABS(X[j]);
        ql_i m = ax > amax;
        amax = QL_SEL_F(m, ax, amax);
        max = QL_SEL_F(m, X[j], max);
    }
    const ql_i all_zero = amax < QUANT_GROUP_MAX_EPS;
    ql_f d = -max / QL_SPLAT_F((float)values[0]);
    ql_f id = QL_SPLAT_F(1.0f) / d;
    ql_f sumqx = zero, sumq2 = zero;
    for (int j = 0; j < 32; j++) {
        ql_f q = ql_iq4_nearest_value(b, id * X[j]);
        sumqx += W[j] * q * X[j];
        sumq2 += W[j] * q * q;
    }
    d = QL_SEL_F(sumq2 > 0, sumqx / sumq2, zero);
    ql_f best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        id = QL_SPLAT_F((float)(itry + values[0])) / max;
        sumqx = sumq2 = zero;
        for (int j = 0; j < 32; j++) {
            ql_f q = ql_iq4_nearest_value(b, id * X[j]);
            sumqx += W[j] * q * X[j];
            sumq2 += W[j] * q * q;
        }
        ql_i acc = (sumq2 > 0) & (sumqx * sumqx > best * sumq2);
        ql_f new_d = sumqx / sumq2;
        d = QL_SEL_F(acc, new_d, d);
        best = QL_SEL_F(acc, new_d * sumqx, best);
    }
    for (int k = 0; k < QL; k++) d_out[k] = all_zero[k] ? 0.f : d[k];
}

void QL_FN(quant_lanes_iq4_scale)(const float *x, float *d_out) {
    struct ql_iq4_bracket b;
    ql_iq4_bracket_init(&b);
    for (int h = 0; h < 8; h += QL) ql_iq4_scale(&b, x + 32 * h, d_out + h);
}
