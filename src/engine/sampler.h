/* Sampler: turns one logits row into a token id, deterministically from (logits, params, rng state,
 * token history). Order of the transforms (as vLLM): the logit bias (OpenAI logit_bias, added to the
 * raw logits before anything else), repetition/presence/frequency penalties,
 * temperature, min-p (on the full distribution), top-k, top-p, then a draw from the renormalized
 * distribution over the survivors. Exactly: l = logit * (1 / T); min-p keeps l >= max + log(min_p); top-k the k
 * best in the order (l desc, id asc); top-p the shortest prefix of that order whose mass (expf(l - max) summed in
 * double) reaches top_p x the mass top-k kept; the draw takes u = uniform x the survivors' mass (summed in id
 * order) and the first survivor, in id order, whose running mass exceeds u. The filters find their survivors by
 * selection (a heap for top-k, quickselect on the masses for top-p), not by sorting the vocabulary.
 * temperature == 0 is greedy: the argmax, ties to the lowest id (bias and penalties still apply first). */
#ifndef VLLMC_SAMPLER_H
#define VLLMC_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>
#include "common/common.h"

/* One logit_bias entry: bias is added to the token's logit (-100 bans it in practice, +100 forces it). */
struct sampler_bias { int32_t id; float bias; };

struct sampler_params {
    float temperature;       /* 0 = greedy; > 0 divides the logits */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* (0, 1]; 1: off */
    float min_p;             /* [0, 1]; 0: off. Keeps p >= min_p * p_max */
    float repetition_penalty;/* > 0; 1: off. Tokens seen in prompt or output: l > 0 ? l / r : l * r */
    float presence_penalty;  /* [-2, 2]; 0: off. l -= presence if the token occurs in the output */
    float frequency_penalty; /* [-2, 2]; 0: off. l -= frequency * count in the output */
    uint64_t seed;
    const struct sampler_bias *bias; /* [n_bias] or NULL (none), not owned; ids in [0, n_vocab), |bias| <= 100;
                                        entries for one id add up */
    int32_t n_bias;
};

/* Defaults: greedy, every filter off, seed 0. */
void sampler_params_default(struct sampler_params *p);
/* VLLMC_ERR_INVALID with a message naming the bad field (NaN, out of range). Bias ids must be >= 0
 * (the upper bound, the vocabulary, is checked by the caller; sampler_sample skips ids beyond it). */
vllmc_status sampler_params_check(const struct sampler_params *p);

/* Per-request RNG (xoshiro256**), seeded by splitmix64 of the seed. */
struct sampler_rng { uint64_t s[4]; };
void sampler_rng_seed(struct sampler_rng *r, uint64_t seed);
uint64_t sampler_rng_next(struct sampler_rng *r);
/* Uniform in [0, 1) with 53 bits. */
double sampler_rng_uniform(struct sampler_rng *r);

/* Scratch sized for a vocabulary (no allocation per call). */
struct sampler;
vllmc_status sampler_create(int32_t n_vocab, struct sampler **out);
void sampler_destroy(struct sampler *s); /* accepts NULL */

/* Sample one token from logits[n_vocab] (not modified). history: the tokens of the request so far,
 * the first n_prompt of them the prompt (repetition penalty uses all, presence/frequency only the
 * rest). Ids in history outside [0, n_vocab) are ignored. Returns the token id in [0, n_vocab). */
/* Whether nothing but temperature and the filters acts on the logits: no bias, no penalties. */
bool sampler_params_plain(const struct sampler_params *p);
/* Whether the next token is simply the argmax of the raw logits: greedy, no bias, no penalties. */
bool sampler_params_argmax_only(const struct sampler_params *p);

int32_t sampler_sample(struct sampler *s, const float *logits, const struct sampler_params *p,
                       struct sampler_rng *rng, const int32_t *history, int32_t n_history, int32_t n_prompt);

/* Argmax with ties to the lowest id (NaN never wins). */
int32_t sampler_argmax(const float *logits, int32_t n);

/* A plain draw (sampler_params_plain) made on the device (struct bk_sample, backend/backend.h): p's temperature and
 * filters, and the uniform sampler_sample would take from rng for the same draw (none at temperature 0), so the
 * device draws the host's ids. */
struct bk_sample;
void sampler_device_draw(const struct sampler_params *p, struct sampler_rng *rng, struct bk_sample *out);
/* Whether plain draws go to the device where the backend offers it (VLLMC_DEVICE_SAMPLE=0: on the host). */
bool sampler_device_draws_on(void);

#endif
