/* Sampler: greedy (ties to the lowest id, NaN never wins), seeded determinism, the empirical
 * distribution against softmax(l / T) over the tokens each filter keeps (top-k, top-p, min-p),
 * the penalties' exact effect on the logits, the logit bias (first, for greedy and sampling) and
 * parameter checks. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/sampler.h"
#include "test.h"

#define V 1000

static float logits[V];

static void fill_random(float scale) {
    for (int i = 0; i < V; i++) logits[i] = scale * test_rand_normal();
}

/* Sample n times; returns counts per token. */
static void histogram(struct sampler *s, const struct sampler_params *p, uint64_t seed, int n, int *counts) {
    struct sampler_rng rng;
    sampler_rng_seed(&rng, seed);
    memset(counts, 0, sizeof(int) * V);
    for (int i = 0; i < n; i++) {
        int32_t t = sampler_sample(s, logits, p, &rng, NULL, 0, 0);
        VLLMC_ASSERT(t >= 0 && t < V);
        counts[t]++;
    }
}

/* Max |freq - prob| over tokens, probs = softmax(l / T) restricted to keep[] (renormalized). */
static double dist_err(const int *counts, int n, float temp, const bool *keep) {
    double mx = -1e300, sum = 0, err = 0;
    for (int i = 0; i < V; i++) if (keep[i]) mx = fmax(mx, logits[i] / temp);
    for (int i = 0; i < V; i++) if (keep[i]) sum += exp(logits[i] / temp - mx);
    for (int i = 0; i < V; i++) {
        double p = keep[i] ? exp(logits[i] / temp - mx) / sum : 0.0;
        double f = (double)counts[i] / n;
        if (!keep[i] && counts[i]) return 1.0; /* a filtered token was drawn */
        err = fmax(err, fabs(f - p));
    }
    return err;
}

/* indices sorted by (logit desc, id asc) */
static int order[V];
static int cmp_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (logits[x] != logits[y]) return logits[x] > logits[y] ? -1 : 1;
    return x - y;
}
static void sort_order(void) {
    for (int i = 0; i < V; i++) order[i] = i;
    qsort(order, V, sizeof(int), cmp_desc);
}

static void test_greedy(struct sampler *s) {
    struct sampler_params p;
    sampler_params_default(&p);
    struct sampler_rng rng;
    sampler_rng_seed(&rng, 1);
    fill_random(2.0f);
    int best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == best);
    CHECK(sampler_argmax(logits, V) == best);
    /* ties go to the lowest id */
    logits[700] = logits[best] + 1.0f;
    logits[300] = logits[700];
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == 300);
    /* NaN never wins; -inf is fine */
    logits[5] = NAN;
    logits[0] = -INFINITY;
    CHECK(sampler_argmax(logits, V) == 300);
    /* top_k = 1 with temperature is greedy too, whatever the seed */
    p.temperature = 1.5f;
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 20; seed++) {
        sampler_rng_seed(&rng, seed);
        CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == 300);
    }
}

static void test_determinism(struct sampler *s) {
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_p = 0.9f;
    fill_random(1.0f);
    struct sampler_rng a, b, c;
    sampler_rng_seed(&a, 42);
    sampler_rng_seed(&b, 42);
    sampler_rng_seed(&c, 43);
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = sampler_sample(s, logits, &p, &a, NULL, 0, 0), y = sampler_sample(s, logits, &p, &b, NULL, 0, 0);
        int32_t z = sampler_sample(s, logits, &p, &c, NULL, 0, 0);
        same &= x == y;
        diff += x != z;
    }
    CHECK(same);
    CHECK(diff > 50);
    /* the RNG itself: xoshiro256** from splitmix64(seed) gives uniform doubles in [0, 1) */
    double mean = 0;
    bool in_range = true;
    for (int i = 0; i < 100000; i++) {
        double u = sampler_rng_uniform(&a);
        in_range &= u >= 0.0 && u < 1.0;
        mean += u;
    }
    CHECK(in_range);
    CHECK_NEAR(mean / 100000, 0.5, 0.01);
}

static void test_distributions(struct sampler *s) {
    static int counts[V];
    static bool keep[V];
    const int N = 40000; /* frequency std <= 0.0025: the 0.012 bound is ~5 sigma */
    struct sampler_params p;
    /* a vocabulary where a handful of tokens carry most mass, so the frequencies are measurable */
    fill_random(1.0f);
    for (int i = 0; i < 12; i++) logits[(i * 97) % V] += 6.0f - 0.4f * (float)i;
    sort_order();

    for (int ti = 0; ti < 2; ti++) {
        const float T = ti ? 0.7f : 1.0f;
        sampler_params_default(&p);
        p.temperature = T;
        histogram(s, &p, 7, N, counts);
        for (int i = 0; i < V; i++) keep[i] = true;
        CHECK_MSG(dist_err(counts, N, T, keep) < 0.012, "plain T=%g", (double)T);

        /* top-k */
        sampler_params_default(&p);
        p.temperature = T;
        p.top_k = 5;
        histogram(s, &p, 8, N, counts);
        for (int i = 0; i < V; i++) keep[i] = false;
        for (int i = 0; i < 5; i++) keep[order[i]] = true;
        CHECK_MSG(dist_err(counts, N, T, keep) < 0.012, "top-k T=%g", (double)T);

        /* top-p: the smallest prefix whose mass reaches p */
        sampler_params_default(&p);
        p.temperature = T;
        p.top_p = 0.8f;
        double mx = logits[order[0]] / T, sum = 0, cum = 0;
        for (int i = 0; i < V; i++) sum += exp(logits[i] / T - mx);
        for (int i = 0; i < V; i++) keep[i] = false;
        for (int i = 0; i < V && cum < 0.8 * sum; i++) { keep[order[i]] = true; cum += exp(logits[order[i]] / T - mx); }
        histogram(s, &p, 9, N, counts);
        CHECK_MSG(dist_err(counts, N, T, keep) < 0.012, "top-p T=%g", (double)T);

        /* min-p: keep p >= min_p * p_max */
        sampler_params_default(&p);
        p.temperature = T;
        p.min_p = 0.1f;
        for (int i = 0; i < V; i++) keep[i] = exp(logits[i] / T - mx) >= 0.1;
        histogram(s, &p, 10, N, counts);
        CHECK_MSG(dist_err(counts, N, T, keep) < 0.012, "min-p T=%g", (double)T);

        /* all three: min-p first, then top-k, then top-p over what is left */
        sampler_params_default(&p);
        p.temperature = T;
        p.min_p = 0.05f;
        p.top_k = 8;
        p.top_p = 0.9f;
        int kept = 0;
        for (int i = 0; i < V; i++) keep[i] = false;
        double s2 = 0, c2 = 0;
        for (int i = 0; i < 8; i++) if (exp(logits[order[i]] / T - mx) >= 0.05) s2 += exp(logits[order[i]] / T - mx);
        for (int i = 0; i < 8 && c2 < 0.9 * s2; i++)
            if (exp(logits[order[i]] / T - mx) >= 0.05) { keep[order[i]] = true; c2 += exp(logits[order[i]] / T - mx); kept++; }
        histogram(s, &p, 11, N, counts);
        /* kept can be 1 for some draws (then every sample must be that token): still a real check */
        CHECK_MSG(kept >= 1 && dist_err(counts, N, T, keep) < 0.012, "combined T=%g (%d kept)", (double)T, kept);
    }
}

static void test_penalties(struct sampler *s) {
    struct sampler_params p;
    sampler_params_default(&p);
    struct sampler_rng rng;
    sampler_rng_seed(&rng, 3);
    for (int i = 0; i < V; i++) logits[i] = -10.0f;
    logits[10] = 3.0f;  /* positive: divided by the repetition penalty */
    logits[11] = 2.0f;
    logits[12] = -1.0f; /* negative: multiplied */
    logits[13] = -1.5f;
    /* history: prompt [10, 12], output [11, 11, 11] */
    const int32_t hist[] = {10, 12, 11, 11, 11, -5, V + 3}; /* out-of-range ids are ignored */
    p.repetition_penalty = 2.0f; /* 10 -> 1.5, 11 -> 1.0, 12 -> -2.0 */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 10);
    p.repetition_penalty = 4.0f; /* 10 -> 0.75, 11 -> 0.5: still 10 */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 10);
    /* frequency: output tokens only; 11 seen 3 times: 2 - 3 * 0.5 = 0.5 < 3 */
    sampler_params_default(&p);
    p.frequency_penalty = -1.0f; /* negative = encourage: 2 + 3 = 5 > 3 */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 11);
    p.frequency_penalty = 0.0f;
    p.presence_penalty = -1.5f; /* 11 -> 3.5 > 3; prompt token 10 untouched */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 11);
    p.presence_penalty = -0.5f; /* 11 -> 2.5 < 3 */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 10);
    /* with everything in the prompt, presence/frequency do nothing */
    p.presence_penalty = -2.0f;
    p.frequency_penalty = -2.0f;
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 7) == 10);
    /* repetition penalty < 1 rewards: 12 -> -1 * 0.25 = -0.25; 13 (unseen) stays; 10 -> 12 */
    sampler_params_default(&p);
    p.repetition_penalty = 0.25f;
    logits[10] = -3.0f;
    logits[11] = -2.0f;
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 12);
    /* scratch state does not leak between calls: no penalties now, plain argmax */
    sampler_params_default(&p);
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 7, 2) == 12);
    logits[12] = -4.0f;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == 13);
}

/* logit_bias: added to the raw logits before penalties, temperature and filters. */
static void test_bias(struct sampler *s) {
    struct sampler_params p;
    sampler_params_default(&p);
    struct sampler_rng rng;
    sampler_rng_seed(&rng, 5);
    fill_random(3.0f);
    sort_order();
    const int32_t top = order[0], second = order[1], far = order[V - 1];
    /* greedy: -100 bans the argmax (the next best wins), +100 forces the worst token */
    struct sampler_bias ban = {top, -100.0f}, force = {far, 100.0f};
    p.bias = &ban; p.n_bias = 1;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == second);
    p.bias = &force;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == far);
    /* the exact sum decides: second + (gap + 0.5) beats top; gap - 0.5 does not; entries for one id add */
    const float gap = logits[top] - logits[second];
    struct sampler_bias b2[2] = {{second, gap + 0.5f}, {top, 0.0f}};
    p.bias = b2; p.n_bias = 1;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == second);
    b2[0].bias = gap - 0.5f;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == top);
    b2[1] = (struct sampler_bias){second, 1.0f}; p.n_bias = 2;
    CHECK(sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == second);
    /* the logits row itself is not modified */
    CHECK(sampler_argmax(logits, V) == top);
    /* bias comes before top-k: with top_k 1 and the top token banned, every draw is the second */
    p.bias = &ban; p.n_bias = 1;
    p.temperature = 1.0f;
    p.top_k = 1;
    int ok = 0;
    for (int i = 0; i < 50; i++) ok += sampler_sample(s, logits, &p, &rng, NULL, 0, 0) == second;
    CHECK(ok == 50);
    /* sampling at T = 1: the draw follows softmax(l + bias); a banned token is (practically) never drawn */
    p.top_k = 0;
    struct sampler_bias many[3] = {{top, -100.0f}, {order[5], 2.0f}, {order[40], 4.0f}};
    p.bias = many; p.n_bias = 3;
    float saved[3];
    for (int k = 0; k < 3; k++) saved[k] = logits[many[k].id];
    static int counts[V];
    histogram(s, &p, 11, 20000, counts);
    CHECK(counts[top] == 0);
    for (int k = 0; k < 3; k++) logits[many[k].id] += many[k].bias;
    bool keep[V];
    for (int i = 0; i < V; i++) keep[i] = true;
    keep[top] = false; /* its probability is ~e^-100 */
    const double err = dist_err(counts, 20000, 1.0f, keep);
    CHECK_MSG(err < 0.02, "bias distribution error %g", err);
    for (int k = 0; k < 3; k++) logits[many[k].id] = saved[k];
    /* bias before the repetition penalty: a positive biased logit is divided by it */
    sampler_params_default(&p);
    for (int i = 0; i < V; i++) logits[i] = -10.0f;
    logits[20] = 1.0f;
    logits[21] = 0.5f;
    struct sampler_bias b21 = {21, 2.5f}; /* 21 -> 3.0, / 2 -> 1.5 > 1: 21; penalised before bias it would be 2.75 */
    p.bias = &b21; p.n_bias = 1;
    p.repetition_penalty = 2.0f;
    const int32_t hist[] = {21};
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 1, 1) == 21);
    b21.bias = 1.7f; /* (0.5 + 1.7) / 2 = 1.1 > 1 still 21; penalty then bias would give 1.95 either way */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 1, 1) == 21);
    b21.bias = 1.3f; /* (0.5 + 1.3) / 2 = 0.9 < 1: 20 (penalty first would give 0.25 + 1.3 = 1.55: 21) */
    CHECK(sampler_sample(s, logits, &p, &rng, hist, 1, 1) == 20);
}

static void test_params(void) {
    struct sampler_params p;
    sampler_params_default(&p);
    CHECK(sampler_params_check(&p) == VLLMC_OK);
    struct sampler_params bad[8];
    for (int i = 0; i < 8; i++) bad[i] = p;
    bad[0].temperature = -1.0f;
    bad[1].temperature = NAN;
    bad[2].top_p = 0.0f;
    bad[3].top_p = 1.5f;
    bad[4].min_p = -0.1f;
    bad[5].repetition_penalty = 0.0f;
    bad[6].presence_penalty = 3.0f;
    bad[7].frequency_penalty = NAN;
    for (int i = 0; i < 8; i++) CHECK_MSG(sampler_params_check(&bad[i]) == VLLMC_ERR_INVALID, "case %d", i);
    struct sampler_bias bb[3] = {{3, 100.0f}, {-1, 1.0f}, {4, NAN}};
    p.bias = bb; p.n_bias = 1;
    CHECK(sampler_params_check(&p) == VLLMC_OK);
    p.n_bias = 2;
    CHECK(sampler_params_check(&p) == VLLMC_ERR_INVALID);
    bb[1] = (struct sampler_bias){1, 100.5f};
    CHECK(sampler_params_check(&p) == VLLMC_ERR_INVALID);
    bb[1] = (struct sampler_bias){1, -100.0f};
    CHECK(sampler_params_check(&p) == VLLMC_OK);
    p.n_bias = 3;
    CHECK(sampler_params_check(&p) == VLLMC_ERR_INVALID);
    p.n_bias = -1;
    CHECK(sampler_params_check(&p) == VLLMC_ERR_INVALID);
    struct sampler *s = NULL;
    CHECK(sampler_create(0, &s) == VLLMC_ERR_INVALID && !s);
}

/* The draw, by its definition written plainly (a full sort, sums in order), against sampler_sample for the same RNG
 * state: after temperature (l * (1 / T)), min-p keeps l >= max + log(min_p); top-k the k best in (l desc, id asc)
 * order; top-p the shortest prefix of that order whose mass (exp(l - max), float, summed in double) reaches top_p x
 * the mass top-k kept; then u = uniform x the kept mass (summed in id order) picks the first kept id, in id order,
 * whose running mass exceeds u. Random shapes, ties included (logits rounded to a coarse grid in half the cases). */
static int32_t ref_draw(const struct sampler_params *p, double uni) {
    static float lt[V];
    static int ord[V];
    static bool keep[V];
    const float inv_t = 1.0f / p->temperature;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) { lt[i] = logits[i] * inv_t; mx = fmaxf(mx, lt[i]); }
    const float thr = p->min_p > 0.0f ? mx + logf(p->min_p) : -INFINITY;
    int n = 0;
    for (int i = 0; i < V; i++)
        if (lt[i] >= thr) ord[n++] = i;
    /* sort the survivors by (lt desc, id asc): insertion into a plain sort of the indices */
    for (int i = 1; i < n; i++) {
        const int x = ord[i];
        int j = i - 1;
        while (j >= 0 && (lt[ord[j]] < lt[x] || (lt[ord[j]] == lt[x] && ord[j] > x))) { ord[j + 1] = ord[j]; j--; }
        ord[j + 1] = x;
    }
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    if (p->top_p < 1.0f) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += (double)expf(lt[ord[i]] - mx);
        double cum = 0.0;
        int k = 0;
        while (k < n && cum < (double)p->top_p * sum) cum += (double)expf(lt[ord[k++]] - mx);
        n = k;
    }
    memset(keep, 0, sizeof(keep));
    for (int i = 0; i < n; i++) keep[ord[i]] = true;
    double mass = 0.0;
    int last = -1;
    for (int i = 0; i < V; i++)
        if (keep[i]) { mass += (double)expf(lt[i] - mx); last = i; }
    const double u = uni * mass;
    double cum = 0.0;
    for (int i = 0; i < V; i++)
        if (keep[i]) {
            cum += (double)expf(lt[i] - mx);
            if (u < cum) return i;
        }
    return last;
}

static void test_definition(struct sampler *s) {
    int same = 0, cases = 0;
    for (int c = 0; c < 300; c++) {
        fill_random(0.5f + 4.0f * (float)test_rand_uniform());
        if (c % 2) for (int i = 0; i < V; i++) logits[i] = roundf(logits[i] * 2.0f) / 2.0f; /* many ties */
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = 0.2f + 1.5f * (float)test_rand_uniform();
        const int mode = c % 4;
        if (mode & 1) p.top_k = 1 + (int)(test_rand_u64() % (c % 8 == 1 ? 5000 : 300)); /* > V too: off */
        if (mode & 2) p.top_p = 0.05f + 0.9f * (float)test_rand_uniform();
        if (c % 5 == 0) p.min_p = 0.3f * (float)test_rand_uniform();
        const uint64_t seed = test_rand_u64();
        struct sampler_rng r1, r2;
        sampler_rng_seed(&r1, seed);
        sampler_rng_seed(&r2, seed);
        for (int d = 0; d < 4; d++) {
            const int32_t got = sampler_sample(s, logits, &p, &r1, NULL, 0, 0);
            const int32_t want = ref_draw(&p, sampler_rng_uniform(&r2));
            same += got == want;
            cases++;
            if (got != want)
                printf("definition: case %d draw %d: T %g top_k %d top_p %g min_p %g: got %d, want %d\n", c, d, (double)p.temperature,
                       p.top_k, (double)p.top_p, (double)p.min_p, got, want);
        }
    }
    CHECK_MSG(same == cases, "%d of %d draws as the definition", same, cases);
}

int main(void) {
    test_seed_auto("test_sampler");
    struct sampler *s = NULL;
    CHECK(sampler_create(V, &s) == VLLMC_OK);
    test_greedy(s);
    test_determinism(s);
    test_distributions(s);
    test_penalties(s);
    test_bias(s);
    test_params();
    test_definition(s);
    sampler_destroy(s);
    return test_finish("test_sampler");
}
