/* Sampler: logit bias, penalties, temperature, min-p, top-k, top-p and a seeded draw, on one logits row
 * (sampler.h has the exact definition). Deterministic: candidates are ordered by (logit desc, id asc), the
 * selections are deterministic, sums run in a fixed order in double, and the only randomness is the per-request
 * xoshiro256** state. No allocation per call. */
#include "engine/sampler.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"

/* a candidate: its tempered logit, id and exp(l - max) */
struct sampler_cand { float l; int32_t id; float e; };

struct sampler {
    int32_t n_vocab;
    float *l;                    /* [n_vocab] working logits */
    int32_t *count;              /* [n_vocab] occurrences in the output part of the history */
    uint8_t *seen;               /* [n_vocab] occurs anywhere in the history */
    struct sampler_cand *cand;   /* [n_vocab] */
    uint8_t *keep;               /* [n_vocab] survives every filter */
};

void sampler_params_default(struct sampler_params *p) {
    memset(p, 0, sizeof(*p));
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
}

bool sampler_params_plain(const struct sampler_params *p) {
    return p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f &&
           (!p->bias || p->n_bias == 0);
}

bool sampler_params_argmax_only(const struct sampler_params *p) { return p->temperature == 0.0f && sampler_params_plain(p); }

vllmc_status sampler_params_check(const struct sampler_params *p) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return vllmc_errorf(VLLMC_ERR_INVALID, "temperature must be a finite number >= 0, got %g", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return vllmc_errorf(VLLMC_ERR_INVALID, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return vllmc_errorf(VLLMC_ERR_INVALID, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return vllmc_errorf(VLLMC_ERR_INVALID, "repetition_penalty must be > 0, got %g", (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return vllmc_errorf(VLLMC_ERR_INVALID, "presence_penalty must be in [-2, 2], got %g", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return vllmc_errorf(VLLMC_ERR_INVALID, "frequency_penalty must be in [-2, 2], got %g", (double)p->frequency_penalty);
    if (p->n_bias < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "logit_bias: %d entries", p->n_bias);
    for (int32_t i = 0; p->bias && i < p->n_bias; i++) {
        if (p->bias[i].id < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "logit_bias token id %d is negative", p->bias[i].id);
        if (!(p->bias[i].bias >= -100.0f && p->bias[i].bias <= 100.0f))
            return vllmc_errorf(VLLMC_ERR_INVALID, "logit_bias for token %d must be in [-100, 100], got %g", p->bias[i].id,
                                (double)p->bias[i].bias);
    }
    return VLLMC_OK;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sampler_rng_seed(struct sampler_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sampler_rng_next(struct sampler_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double sampler_rng_uniform(struct sampler_rng *r) { return (double)(sampler_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

vllmc_status sampler_create(int32_t n_vocab, struct sampler **out) {
    *out = NULL;
    if (n_vocab <= 0) return vllmc_errorf(VLLMC_ERR_INVALID, "sampler: vocabulary of %d", n_vocab);
    struct sampler *s = calloc(1, sizeof(*s));
    if (!s) return vllmc_errorf(VLLMC_ERR_OOM, "sampler");
    s->n_vocab = n_vocab;
    s->l = malloc((size_t)n_vocab * sizeof(float));
    s->count = calloc((size_t)n_vocab, sizeof(int32_t));
    s->seen = calloc((size_t)n_vocab, 1);
    s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
    s->keep = malloc((size_t)n_vocab);
    if (!s->l || !s->count || !s->seen || !s->cand || !s->keep) {
        sampler_destroy(s);
        return vllmc_errorf(VLLMC_ERR_OOM, "sampler scratch");
    }
    *out = s;
    return VLLMC_OK;
}

void sampler_destroy(struct sampler *s) {
    if (!s) return;
    free(s->l);
    free(s->count);
    free(s->seen);
    free(s->cand);
    free(s->keep);
    free(s);
}

int32_t sampler_argmax(const float *l, int32_t n) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(l[i]) && (best < 0 || l[i] > l[best])) best = i;
    return best < 0 ? 0 : best;
}

/* Descending logit, then ascending id: a total order, so sorting is deterministic. */
static int cand_id_cmp(const void *a, const void *b) {
    const struct sampler_cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}
/* The candidate order: logit descending, then id ascending (so every key is distinct). */
static inline bool cand_better(const struct sampler_cand *a, const struct sampler_cand *b) {
    return a->l > b->l || (a->l == b->l && a->id < b->id);
}
static inline void cand_swap(struct sampler_cand *c, int32_t i, int32_t j) {
    const struct sampler_cand t = c[i]; c[i] = c[j]; c[j] = t;
}
/* Min-heap on the order for top-k selection: the root is the worst kept candidate. */
static void heap_sift_down(struct sampler_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && cand_better(&h[m], &h[l])) m = l;
        if (r < n && cand_better(&h[m], &h[r])) m = r;
        if (m == i) return;
        struct sampler_cand t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}
/* Partition c[lo, hi) around a pivot (the median of three by the order): the better ones first, then the pivot at
 * the returned index, then the worse. */
static int32_t cand_partition(struct sampler_cand *c, int32_t lo, int32_t hi) {
    const int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (cand_better(&c[mid], &c[lo])) cand_swap(c, mid, lo);
    if (cand_better(&c[last], &c[lo])) cand_swap(c, last, lo);
    if (cand_better(&c[last], &c[mid])) cand_swap(c, last, mid);
    cand_swap(c, mid, last); /* the median as the pivot, at the end */
    const struct sampler_cand pv = c[last];
    int32_t k = lo;
    for (int32_t i = lo; i < last; i++)
        if (cand_better(&c[i], &pv)) cand_swap(c, i, k++);
    cand_swap(c, k, last);
    return k;
}
/* Reorder c[0, n) so that its k best (0 < k < n) come first, in any order (expected O(n)). */
static void cand_select_k(struct sampler_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        const int32_t p = cand_partition(c, lo, hi);
        if (p == k || p == k - 1) return;
        if (p > k) hi = p;
        else lo = p + 1;
    }
}
/* The number of best candidates of c[0, n) that top-p keeps: the shortest prefix in the order whose mass reaches
 * target (the candidate that reaches it included); n if none does. Quickselect on the masses (expected O(n)): the
 * masses of the parts are summed in double as they fall, so a prefix's mass is its exact sum rounded in an order of
 * its own. c is reordered: the kept candidates come first. */
static int32_t cand_top_p(struct sampler_cand *c, int32_t n, double target) {
    int32_t lo = 0, hi = n;
    double before = 0.0; /* the mass of c[0, lo): all better than c[lo, hi) */
    while (hi > lo) {
        if (hi - lo == 1) return before + (double)c[lo].e >= target ? lo + 1 : n;
        const int32_t p = cand_partition(c, lo, hi);
        double mb = 0.0;
        for (int32_t i = lo; i < p; i++) mb += (double)c[i].e;
        if (before + mb >= target) {
            hi = p;
        } else if (before + mb + (double)c[p].e >= target) {
            return p + 1;
        } else {
            before += mb + (double)c[p].e;
            lo = p + 1;
        }
    }
    return n; /* (not reached: the invariant before < target keeps the range non-empty until a return) */
}

static void apply_penalties(struct sampler *s, const struct sampler_params *p, const int32_t *hist, int32_t n_hist,
                            int32_t n_prompt) {
    const bool rep = p->repetition_penalty != 1.0f, pf = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if ((!rep && !pf) || n_hist <= 0 || !hist) return;
    const int32_t V = s->n_vocab;
    for (int32_t i = 0; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= V) continue;
        s->seen[id] = 1;
        if (i >= n_prompt) s->count[id]++;
    }
    for (int32_t i = 0; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= V || s->seen[id] != 1) continue;
        s->seen[id] = 2; /* handle each distinct id once */
        float l = s->l[id];
        if (rep) l = l > 0.0f ? l / p->repetition_penalty : l * p->repetition_penalty;
        if (s->count[id] > 0) l -= p->frequency_penalty * (float)s->count[id] + p->presence_penalty;
        s->l[id] = l;
    }
    for (int32_t i = 0; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= V) continue;
        s->seen[id] = 0;
        s->count[id] = 0;
    }
}

int32_t sampler_sample(struct sampler *s, const float *logits, const struct sampler_params *p,
                       struct sampler_rng *rng, const int32_t *history, int32_t n_history, int32_t n_prompt) {
    const int32_t V = s->n_vocab;
    memcpy(s->l, logits, (size_t)V * sizeof(float));
    for (int32_t i = 0; p->bias && i < p->n_bias; i++) {
        const int32_t id = p->bias[i].id;
        if (id >= 0 && id < V) s->l[id] += p->bias[i].bias;
    }
    apply_penalties(s, p, history, n_history, n_prompt);
    if (p->temperature == 0.0f) return sampler_argmax(s->l, V);

    /* temperature; NaN and -inf logits drop out */
    const float inv_t = 1.0f / p->temperature;
    if (p->min_p <= 0.0f && (p->top_k <= 0 || p->top_k >= V) && p->top_p >= 1.0f) {
        /* no filter: the draw over every candidate in id order, on the logits row itself (the general path's values and
         * sums, without its candidate list: three passes over V floats) */
        float mx = -INFINITY;
        for (int32_t i = 0; i < V; i++) {
            const float l = s->l[i];
            if (!isnan(l) && l != -INFINITY && l * inv_t > mx) mx = l * inv_t;
        }
        if (mx == -INFINITY) return sampler_argmax(logits, V);
        double mass = 0.0;
        int32_t last = 0;
        for (int32_t i = 0; i < V; i++) {
            const float l = s->l[i];
            const float e = isnan(l) || l == -INFINITY ? -1.0f : expf(l * inv_t - mx);
            s->l[i] = e; /* -1: dropped */
            if (e >= 0.0f) { mass += (double)e; last = i; }
        }
        const double u = sampler_rng_uniform(rng) * mass;
        double cum = 0.0;
        for (int32_t i = 0; i <= last; i++)
            if (s->l[i] >= 0.0f) {
                cum += (double)s->l[i];
                if (u < cum) return i;
            }
        return last;
    }
    float mx = -INFINITY;
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++) {
        float l = s->l[i];
        if (isnan(l) || l == -INFINITY) continue;
        l *= inv_t;
        s->cand[n].l = l;
        s->cand[n].id = i;
        n++;
        if (l > mx) mx = l;
    }
    if (n == 0) return sampler_argmax(logits, V);
    /* min-p on the full distribution: keep p >= min_p * p_max, i.e. l >= mx + log(min_p) */
    if (p->min_p > 0.0f) {
        const float thr = mx + logf(p->min_p);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (s->cand[i].l >= thr) s->cand[k++] = s->cand[i];
        n = k;
    }
    /* top-k, then top-p over what top-k kept: each the best candidates in the order, found by selection (so the
     * candidates leave id order) */
    bool id_order = true;
    if (p->top_k > 0 && p->top_k < n) {
        const int32_t k = p->top_k;
        if (k <= 4096) { /* a heap of the k best: most candidates cost one comparison with its root */
            for (int32_t i = k / 2 - 1; i >= 0; i--) heap_sift_down(s->cand, k, i);
            for (int32_t i = k; i < n; i++)
                if (cand_better(&s->cand[i], &s->cand[0])) {
                    s->cand[0] = s->cand[i];
                    heap_sift_down(s->cand, k, 0);
                }
        } else {
            cand_select_k(s->cand, n, k);
        }
        n = k;
        id_order = false;
    }
    for (int32_t i = 0; i < n; i++) s->cand[i].e = expf(s->cand[i].l - mx);
    if (p->top_p < 1.0f) {
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++) sum += (double)s->cand[i].e;
        n = cand_top_p(s->cand, n, (double)p->top_p * sum);
        id_order = false; /* (its partitions reorder the candidates even where it keeps them all) */
    }
    /* the draw: the kept candidates in id order, u uniform over their mass (summed in that order, as the walk) */
    if (!id_order) {
        if ((int64_t)n * 16 < V) {
            qsort(s->cand, (size_t)n, sizeof(*s->cand), cand_id_cmp);
        } else { /* many kept: back to id order through a map of the vocabulary */
            memset(s->keep, 0, (size_t)V);
            for (int32_t i = 0; i < n; i++) {
                s->keep[s->cand[i].id] = 1;
                s->l[s->cand[i].id] = s->cand[i].e;
            }
            int32_t k = 0;
            for (int32_t i = 0; i < V; i++)
                if (s->keep[i]) s->cand[k++] = (struct sampler_cand){0.0f, i, s->l[i]};
        }
    }
    double mass = 0.0;
    for (int32_t i = 0; i < n; i++) mass += (double)s->cand[i].e;
    const double u = sampler_rng_uniform(rng) * mass;
    double cum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cum += (double)s->cand[i].e;
        if (u < cum) return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}

void sampler_device_draw(const struct sampler_params *p, struct sampler_rng *rng, struct bk_sample *out) {
    *out = (struct bk_sample){.u = p->temperature > 0.0f ? sampler_rng_uniform(rng) : 0.0, .temperature = p->temperature,
                              .top_p = p->top_p, .min_p = p->min_p, .top_k = p->top_k > 0 ? p->top_k : 0};
}

bool sampler_device_draws_on(void) {
    const char *v = getenv("VLLMC_DEVICE_SAMPLE");
    return !(v && !strcmp(v, "0"));
}
