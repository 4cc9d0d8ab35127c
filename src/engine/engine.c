/* Engine: request queue, scheduler (continuous batching, chunked prefill, preemption by recompute),
 * paged KV block tables with prefix caching, recurrent-state slots, sampling, stop conditions and
 * per-request output queues. One engine thread owns every piece of model state; clients talk to it
 * through the submission queue (engine mutex) and per-request output queues (request mutex).
 *
 * Step (engine_step):
 *   1. intake: move submitted requests to the waiting queue (FCFS); finish cancelled requests.
 *   2. schedule under a token budget (max_num_batched_tokens) and a running cap (max_num_seqs):
 *      running decodes first, then running prefills (chunked to the budget), then waiting requests in
 *      arrival order (a request that does not fit stops admission: no overtaking). A running request
 *      that needs a block when none is free preempts the latest-admitted running request not yet
 *      scheduled in this step (possibly itself): its blocks and state slot are freed and it goes back to
 *      the FRONT of the waiting queue with every token it has (prompt + generated) to recompute. Its
 *      sampler RNG, detokenizer and delivered output stay as they were, so the resumed stream continues
 *      exactly where it stopped. No admission happens in a step that preempted.
 *   3. one forward over the batch (each request's rows contiguous, positions increasing), logits only
 *      for requests whose last known token was computed in this step.
 *   4. index newly full blocks in the prefix cache; sample; check stops; deliver output; free what
 *      finished.
 * Every buffer is allocated at creation or at submission; a step allocates nothing (except growing a
 * request's text queue when a client falls far behind).
 *
 * Prefix caching and recurrent state. The KV of a full block is a pure function of the tokens up to
 * it, so attention layers can share it; the Gated DeltaNet state of a hybrid model is not kept per
 * block: a running slot holds only the state after the last token its sequence computed. Reusing cached
 * KV for a prefix also needs the recurrent state at that block boundary, exactly.
 * Policy (exact by construction): snapshots at block boundaries.
 *   - A hybrid engine keeps n_state_snapshots extra state slots. When a step ends a sequence exactly at
 *     a block boundary inside its prompt, and the cached block holding that boundary has no snapshot,
 *     the running slot is copied into a free snapshot slot tied to that block. To make boundaries
 *     happen, a hybrid prefill chunk that would cross the last block boundary of the prompt is cut there
 *     (a prompt of 100 tokens runs as 96 + 4; the backend results do not depend on the chunking).
 *   - A prefix hit on a hybrid engine ends at the deepest matched block that has a snapshot; admission
 *     copies that snapshot into the request's running slot, and the first run starts after the hit
 *     (a run starting at position 0 zeroes the slot instead).
 *   - A snapshot lives as long as its block stays cached: evicting the block (kvb_alloc handing it out
 *     again) frees the snapshot slot. With no free snapshot slot, no snapshot is taken (reuse only
 *     shrinks, never becomes inexact).
 *   - So a hybrid reuses a prefix only up to a boundary where an earlier run ended: the last full block
 *     of an earlier prompt (a chat's next turn, a repeated prompt, a preempted request's recompute) or a
 *     chunk end cut by the token budget. A prefix shared only part-way into an earlier prompt is
 *     recomputed (dense models reuse every matched block).
 *   - Without snapshot slots (n_state_snapshots == 0 or a runner without state_copy) a hybrid engine
 *     reuses no prefix at all, and a preempted request recomputes from position 0.
 * Tested: tests/test_engine_sim.c (a fake state that must equal the hash of the history read back through
 * the block table, at every logits row) and tests/test_engine.c (qwen35 / qwen35moe: reuse, and output
 * equal to a cold run). */
#include "engine/engine.h"
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "engine/kv_blocks.h"
#include "engine/sampler.h"
#include "common/threadpool.h"

enum req_state { REQ_INCOMING, REQ_WAITING, REQ_RUNNING, REQ_FINISHED };

struct vllmc_request {
    uint64_t id;
    /* immutable after submit */
    int32_t n_prompt, max_tokens, min_tokens;
    bool ignore_eos;
    struct sampler_params sp;      /* sp.bias points at bias */
    struct sampler_bias *bias;
    int32_t stop_ids[VLLMC_MAX_STOP_IDS], n_stop_ids;
    char *stops[VLLMC_MAX_STOP_STRINGS];
    int32_t n_stops;
    int32_t logprobs, n_top;
    vllmc_notify_fn notify;
    void *user;
    atomic_bool cancel;

    /* engine thread only */
    enum req_state state;
    struct sampler_rng rng;
    int32_t *tokens, n_tokens;     /* prompt + output; capacity n_prompt + max_tokens */
    int32_t n_out;
    int32_t n_computed;
    int32_t *blocks, n_blocks;     /* capacity: blocks of max_model_len */
    uint64_t *bhash;               /* chain hashes of full blocks of tokens, n_bhash known */
    int32_t *bcanon;               /* indexed block holding each full block's key (n_indexed valid) */
    int32_t n_bhash, n_indexed;
    int32_t slot;
    int32_t sched_new;
    bool scheduled;
    int32_t q_pos;                 /* the position the queued step computes for it (pipelined steps) */
    int32_t n_cached_first;
    bool admitted;
    struct tokenizer_stream ts;
    char *dbuf;
    size_t dbuf_cap;
    struct vllmc_request *qnext, *qprev; /* incoming / waiting list links */

    /* shared with the client (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int32_t *p_tok, *c_tok;
    float *p_lp, *c_lp;
    vllmc_token_logprob *p_top, *c_top;
    char *p_text, *c_text;
    size_t p_text_len, p_text_cap, c_text_cap;
    int32_t p_n;
    vllmc_finish_reason finish;
    int32_t out_total;
    int32_t cached_pub;
};

struct vllmc_engine {
    struct engine_runner run;
    struct engine_config cfg;
    const struct tokenizer *tok;
    /* sampling the rows of a step in parallel: a pool, a sampler's scratch a thread, each row's draw until the
     * rows are emitted in order */
    struct threadpool *spool;
    struct sampler **smps;
    int32_t n_smp;
    int32_t *s_tok;
    float *s_lp;
    struct bk_sample *b_samp;      /* [max_num_seqs] the rows' draws on the device (run.device_sample) */
    vllmc_token_logprob *s_top;    /* [max_num_seqs][VLLMC_MAX_TOP_LOGPROBS] */
    struct kv_blocks kv;
    bool prefix_caching;
    bool snapshots;                /* hybrid prefix reuse through state snapshots */
    int32_t *blk_snap;             /* [n_blocks] snapshot slot of a cached block, -1 */
    int32_t *snap_free, n_snap_free;
    int32_t max_blocks_per_seq;
    bool *is_eos;                  /* [n_vocab] */
    int32_t *eos_list, n_eos;

    /* scheduling state (engine thread) */
    struct vllmc_request **running;
    int32_t n_running;
    struct vllmc_request *wait_head, *wait_tail;
    int32_t n_waiting;
    int32_t *free_slots, n_free_slots;
    struct vllmc_request **sched;
    int32_t n_sched;

    /* batch buffers */
    int32_t *b_tok, *b_pos, *b_seq, *b_lrow;
    struct bk_seq *b_seqs;
    struct vllmc_request **b_lreq;
    int32_t *b_ids;                /* [max_num_seqs] argmax of each logits row (steps of plain greedy rows) */
    /* pipelined steps (run.forward_queue): the queued step's rows' requests, one a row and each holding a reference
     * (q_n 0: none queued), and the next step's while it is built */
    struct vllmc_request **q_req, **q_next;
    int32_t q_n;
    bool q_sample;                 /* the queued rows are device draws (else all greedy) */
    struct sampler_rng *q_rng;     /* the rows' RNGs after the next step's draws, theirs once it is queued */
    float *logits;

    /* shared with clients (mu) */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, idle_cv;
    struct vllmc_request *in_head, *in_tail;
    int32_t n_live;
    bool stop;
    uint64_t next_id;
    vllmc_engine_stats stats_pub;
    vllmc_engine_stats stats;      /* engine thread's copy */
    pthread_t thread;
    bool has_thread;

    /* owned model (vllmc_engine_create) */
    void *owner;
    void (*owner_free)(void *);
};

/* ------------------------------------------------------------------------------------------------ */
/* Requests                                                                                         */

static void req_free(struct vllmc_request *r) {
    free(r->tokens); free(r->blocks); free(r->bhash); free(r->bcanon); free(r->dbuf);
    free(r->p_tok); free(r->c_tok); free(r->p_lp); free(r->c_lp); free(r->p_top); free(r->c_top);
    free(r->p_text); free(r->c_text); free(r->bias);
    for (int32_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void req_ref(struct vllmc_request *r) {
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
}

static void req_unref(struct vllmc_request *r) {
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left == 0) req_free(r);
}

void vllmc_sampling_params_default(vllmc_sampling_params *p) {
    memset(p, 0, sizeof(*p));
    p->temperature = 0.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->seed = -1;
    p->logprobs = -1;
}

const char *vllmc_finish_reason_str(vllmc_finish_reason r) {
    switch (r) {
    case VLLMC_FINISH_STOP: return "stop";
    case VLLMC_FINISH_LENGTH: return "length";
    case VLLMC_FINISH_ABORT: return "abort";
    default: return NULL;
    }
}

static uint64_t eng_splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

vllmc_status vllmc_engine_submit(vllmc_engine *e, const int32_t *prompt, int32_t n_prompt, const vllmc_sampling_params *spp,
                                 vllmc_notify_fn notify, void *user, vllmc_request **out) {
    *out = NULL;
    vllmc_sampling_params dflt;
    if (!spp) { vllmc_sampling_params_default(&dflt); spp = &dflt; }
    const int32_t L = e->cfg.max_model_len, V = e->run.n_vocab;
    if (!prompt || n_prompt <= 0) return vllmc_errorf(VLLMC_ERR_INVALID, "request: the prompt is empty");
    if (n_prompt >= L)
        return vllmc_errorf(VLLMC_ERR_INVALID, "request: the prompt has %d tokens; max_model_len %d leaves room for at most %d",
                            n_prompt, L, L - 1);
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return vllmc_errorf(VLLMC_ERR_INVALID, "request: prompt token %d (at %d) is outside the vocabulary of %d", prompt[i], i, V);
    if (spp->n_stop_ids < 0 || spp->n_stop_ids > VLLMC_MAX_STOP_IDS || (spp->n_stop_ids && !spp->stop_ids))
        return vllmc_errorf(VLLMC_ERR_INVALID, "request: %d stop ids (at most %d)", spp->n_stop_ids, VLLMC_MAX_STOP_IDS);
    for (int32_t i = 0; i < spp->n_stop_ids; i++)
        if (spp->stop_ids[i] < 0 || spp->stop_ids[i] >= V)
            return vllmc_errorf(VLLMC_ERR_INVALID, "request: stop id %d is outside the vocabulary of %d", spp->stop_ids[i], V);
    if (spp->n_stop < 0 || spp->n_stop > VLLMC_MAX_STOP_STRINGS || (spp->n_stop && !spp->stop))
        return vllmc_errorf(VLLMC_ERR_INVALID, "request: %d stop strings (at most %d)", spp->n_stop, VLLMC_MAX_STOP_STRINGS);
    if (spp->n_stop && !e->tok) return vllmc_errorf(VLLMC_ERR_INVALID, "request: stop strings need a tokenizer; the model has none");
    for (int32_t i = 0; i < spp->n_stop; i++)
        if (!spp->stop[i] || strlen(spp->stop[i]) > TOKENIZER_STREAM_MAX_STOP)
            return vllmc_errorf(VLLMC_ERR_INVALID, "request: stop string %d is missing or longer than %d bytes", i, TOKENIZER_STREAM_MAX_STOP);
    if (spp->logprobs > VLLMC_MAX_TOP_LOGPROBS)
        return vllmc_errorf(VLLMC_ERR_INVALID, "request: logprobs %d (at most %d)", spp->logprobs, VLLMC_MAX_TOP_LOGPROBS);
    if (spp->min_tokens < 0) return vllmc_errorf(VLLMC_ERR_INVALID, "request: min_tokens %d", spp->min_tokens);
    if (spp->n_logit_bias < 0 || (spp->n_logit_bias && !spp->logit_bias))
        return vllmc_errorf(VLLMC_ERR_INVALID, "request: %d logit_bias entries", spp->n_logit_bias);
    for (int32_t i = 0; i < spp->n_logit_bias; i++)
        if (spp->logit_bias[i].id < 0 || spp->logit_bias[i].id >= V)
            return vllmc_errorf(VLLMC_ERR_INVALID, "request: logit_bias token id %d is outside the vocabulary of %d",
                                spp->logit_bias[i].id, V);
        else if (!(spp->logit_bias[i].bias >= -100.0f && spp->logit_bias[i].bias <= 100.0f))
            return vllmc_errorf(VLLMC_ERR_INVALID, "request: logit_bias for token %d must be in [-100, 100], got %g",
                                spp->logit_bias[i].id, (double)spp->logit_bias[i].bias);
    struct sampler_params sp;
    sampler_params_default(&sp);
    sp.temperature = spp->temperature;
    sp.top_k = spp->top_k;
    sp.top_p = spp->top_p;
    sp.min_p = spp->min_p;
    sp.repetition_penalty = spp->repetition_penalty;
    sp.presence_penalty = spp->presence_penalty;
    sp.frequency_penalty = spp->frequency_penalty;
    sp.n_bias = spp->n_logit_bias; /* sp.bias: the request's copy, made below */
    vllmc_status st = sampler_params_check(&sp);
    if (st) return vllmc_errorf(st, "request: %s", vllmc_last_error());

    const int32_t room = L - n_prompt;
    const int32_t max_tokens = spp->max_tokens > 0 ? VLLMC_MIN(spp->max_tokens, room) : room;
    struct vllmc_request *r = calloc(1, sizeof(*r));
    if (!r) return vllmc_errorf(VLLMC_ERR_OOM, "request");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    r->min_tokens = VLLMC_MIN(spp->min_tokens, max_tokens);
    r->ignore_eos = spp->ignore_eos != 0;
    r->sp = sp;
    r->n_stop_ids = spp->n_stop_ids;
    if (spp->n_stop_ids) memcpy(r->stop_ids, spp->stop_ids, (size_t)spp->n_stop_ids * sizeof(int32_t));
    r->logprobs = spp->logprobs < 0 ? -1 : spp->logprobs;
    r->n_top = r->logprobs > 0 ? r->logprobs : 0;
    r->notify = notify;
    r->user = user;
    r->slot = -1;
    r->refs = 2; /* engine + client */
    const size_t cap = (size_t)n_prompt + (size_t)max_tokens, nb = (size_t)e->max_blocks_per_seq, mt = (size_t)max_tokens;
    r->tokens = malloc(cap * sizeof(int32_t));
    r->blocks = malloc(nb * sizeof(int32_t));
    r->bhash = malloc(nb * sizeof(uint64_t));
    r->bcanon = malloc(nb * sizeof(int32_t));
    r->p_tok = malloc(mt * sizeof(int32_t));
    r->c_tok = malloc(mt * sizeof(int32_t));
    bool ok = r->tokens && r->blocks && r->bhash && r->bcanon && r->p_tok && r->c_tok;
    if (ok && sp.n_bias) {
        r->bias = malloc((size_t)sp.n_bias * sizeof(*r->bias));
        if ((ok = r->bias != NULL))
            for (int32_t i = 0; i < sp.n_bias; i++) r->bias[i] = (struct sampler_bias){spp->logit_bias[i].id, spp->logit_bias[i].bias};
        r->sp.bias = r->bias;
    }
    if (ok && r->logprobs >= 0) {
        r->p_lp = malloc(mt * sizeof(float));
        r->c_lp = malloc(mt * sizeof(float));
        ok = r->p_lp && r->c_lp;
        if (ok && r->n_top) {
            r->p_top = malloc(mt * (size_t)r->n_top * sizeof(vllmc_token_logprob));
            r->c_top = malloc(mt * (size_t)r->n_top * sizeof(vllmc_token_logprob));
            ok = r->p_top && r->c_top;
        }
    }
    if (ok && e->tok) {
        r->dbuf_cap = tokenizer_stream_bound(e->tok);
        r->p_text_cap = r->c_text_cap = 4 * r->dbuf_cap + 256;
        r->dbuf = malloc(r->dbuf_cap);
        r->p_text = malloc(r->p_text_cap);
        r->c_text = malloc(r->c_text_cap);
        ok = r->dbuf && r->p_text && r->c_text;
        for (int32_t i = 0; ok && i < spp->n_stop; i++) {
            if (!(r->stops[i] = strdup(spp->stop[i]))) ok = false;
            else r->n_stops = i + 1;
        }
        if (ok) {
            tokenizer_stream_init(&r->ts, e->tok, TOKENIZER_DECODE_SKIP_SPECIAL | TOKENIZER_DECODE_REPLACE_INVALID);
            if (tokenizer_stream_set_stops(&r->ts, (const char *const *)r->stops, (size_t)r->n_stops)) {
                st = vllmc_errorf(VLLMC_ERR_INVALID, "request: %s", vllmc_last_error());
                req_free(r);
                return st;
            }
        }
    }
    if (!ok) { req_free(r); return vllmc_errorf(VLLMC_ERR_OOM, "request of %zu tokens", cap); }
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    r->n_tokens = n_prompt;
    r->state = REQ_INCOMING;

    pthread_mutex_lock(&e->mu);
    if (e->stop) {
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return vllmc_errorf(VLLMC_ERR_INVALID, "request: the engine is shutting down");
    }
    r->id = e->next_id++;
    uint64_t seed = spp->seed >= 0 ? (uint64_t)spp->seed : eng_splitmix(e->cfg.seed ^ eng_splitmix(r->id));
    r->sp.seed = seed;
    sampler_rng_seed(&r->rng, seed);
    r->qnext = NULL;
    r->qprev = e->in_tail;
    if (e->in_tail) e->in_tail->qnext = r; else e->in_head = r;
    e->in_tail = r;
    e->n_live++;
    pthread_cond_signal(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return VLLMC_OK;
}

vllmc_status vllmc_request_next(vllmc_request *r, int timeout_ms, vllmc_output *o) {
    memset(o, 0, sizeof(*o));
    pthread_mutex_lock(&r->mu);
    if (r->p_n == 0 && r->p_text_len == 0 && r->finish == VLLMC_FINISH_NONE && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (r->p_n == 0 && r->p_text_len == 0 && r->finish == VLLMC_FINISH_NONE) pthread_cond_wait(&r->cv, &r->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            while (r->p_n == 0 && r->p_text_len == 0 && r->finish == VLLMC_FINISH_NONE)
                if (pthread_cond_timedwait(&r->cv, &r->mu, &ts)) break;
        }
    }
    /* swap the pending and client buffers: the engine keeps appending to what the client returned */
    int32_t *t = r->c_tok; r->c_tok = r->p_tok; r->p_tok = t;
    float *l = r->c_lp; r->c_lp = r->p_lp; r->p_lp = l;
    vllmc_token_logprob *tp = r->c_top; r->c_top = r->p_top; r->p_top = tp;
    char *x = r->c_text; r->c_text = r->p_text; r->p_text = x;
    size_t xc = r->c_text_cap; r->c_text_cap = r->p_text_cap; r->p_text_cap = xc;
    o->tokens = r->c_tok;
    o->n_tokens = r->p_n;
    o->logprobs = r->logprobs >= 0 ? r->c_lp : NULL;
    o->top_logprobs = r->n_top ? r->c_top : NULL;
    o->n_top = r->n_top;
    o->text = r->c_text;
    o->text_len = r->p_text_len;
    o->finish = r->finish;
    o->n_prompt_tokens = r->n_prompt;
    o->n_cached_tokens = r->cached_pub;
    o->n_output_tokens = r->out_total;
    r->p_n = 0;
    r->p_text_len = 0;
    pthread_mutex_unlock(&r->mu);
    return VLLMC_OK;
}

void vllmc_request_cancel(vllmc_request *r) {
    if (r) atomic_store(&r->cancel, true);
}

void vllmc_request_release(vllmc_request *r) {
    if (!r) return;
    atomic_store(&r->cancel, true);
    req_unref(r);
}

/* ------------------------------------------------------------------------------------------------ */
/* Queues and resources (engine thread)                                                             */

static void wait_remove(vllmc_engine *e, struct vllmc_request *r) {
    if (r->qprev) r->qprev->qnext = r->qnext; else e->wait_head = r->qnext;
    if (r->qnext) r->qnext->qprev = r->qprev; else e->wait_tail = r->qprev;
    r->qnext = r->qprev = NULL;
    e->n_waiting--;
}

static void wait_push_back(vllmc_engine *e, struct vllmc_request *r) {
    r->qnext = NULL;
    r->qprev = e->wait_tail;
    if (e->wait_tail) e->wait_tail->qnext = r; else e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    r->state = REQ_WAITING;
}

static void wait_push_front(vllmc_engine *e, struct vllmc_request *r) {
    r->qprev = NULL;
    r->qnext = e->wait_head;
    if (e->wait_head) e->wait_head->qprev = r; else e->wait_tail = r;
    e->wait_head = r;
    e->n_waiting++;
    r->state = REQ_WAITING;
}

static void running_remove(vllmc_engine *e, struct vllmc_request *r) {
    for (int32_t i = 0; i < e->n_running; i++)
        if (e->running[i] == r) {
            memmove(e->running + i, e->running + i + 1, (size_t)(e->n_running - i - 1) * sizeof(*e->running));
            e->n_running--;
            return;
        }
    VLLMC_ASSERT(!"request not running");
}

/* Give back a request's blocks and state slot; it keeps its tokens. */
static void req_drop_resources(vllmc_engine *e, struct vllmc_request *r) {
    kvb_release_seq(&e->kv, r->blocks, r->n_blocks);
    r->n_blocks = 0;
    r->n_computed = 0;
    r->n_indexed = 0;
    if (r->slot >= 0) { e->free_slots[e->n_free_slots++] = r->slot; r->slot = -1; }
}

/* Deliver: append new output (already in the pending buffers) and wake the client. */
static void req_wake(struct vllmc_request *r) {
    pthread_cond_broadcast(&r->cv);
    if (r->notify) r->notify(r, r->user);
}

static void req_finish(vllmc_engine *e, struct vllmc_request *r, vllmc_finish_reason why) {
    if (r->state == REQ_RUNNING) running_remove(e, r);
    else if (r->state == REQ_WAITING) wait_remove(e, r);
    req_drop_resources(e, r);
    r->state = REQ_FINISHED;
    pthread_mutex_lock(&r->mu);
    r->finish = why;
    pthread_mutex_unlock(&r->mu);
    req_wake(r);
    e->stats.requests_finished++;
    pthread_mutex_lock(&e->mu);
    if (--e->n_live == 0) pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    req_unref(r);
}

static void req_preempt(vllmc_engine *e, struct vllmc_request *r) {
    running_remove(e, r);
    req_drop_resources(e, r);
    r->scheduled = false;
    wait_push_front(e, r);
    e->stats.preemptions++;
}

/* Chain hashes of the first n full blocks of r's tokens. */
static void req_hash_blocks(struct vllmc_request *r, int32_t n) {
    for (int32_t i = r->n_bhash; i < n; i++)
        r->bhash[i] = kvb_hash_block(i ? r->bhash[i - 1] : KVB_ROOT_HASH, r->tokens + (size_t)i * BK_KV_BLOCK);
    if (n > r->n_bhash) r->n_bhash = n;
}

/* Grow r's block table to cover n_tokens positions. false if the pool has too few free blocks. */
static bool req_grow(vllmc_engine *e, struct vllmc_request *r, int32_t n_tokens) {
    int32_t need = CEIL_DIV(n_tokens, BK_KV_BLOCK) - r->n_blocks;
    if (need <= 0) return true;
    if (need > e->kv.n_free) return false;
    for (int32_t i = 0; i < need; i++) {
        int32_t b = kvb_alloc(&e->kv);
        VLLMC_ASSERT(b >= 0);
        if (e->snapshots && e->blk_snap[b] >= 0) { e->snap_free[e->n_snap_free++] = e->blk_snap[b]; e->blk_snap[b] = -1; }
        r->blocks[r->n_blocks++] = b;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------------ */
/* Scheduling                                                                                       */

static void sched_add(vllmc_engine *e, struct vllmc_request *r, int32_t n_new, int32_t *budget) {
    r->scheduled = true;
    r->sched_new = n_new;
    *budget -= n_new;
    e->sched[e->n_sched++] = r;
}

/* Hybrid engines with snapshots: cut a chunk at the last block boundary of the prompt it crosses. */
static int32_t chunk_cut(const vllmc_engine *e, const struct vllmc_request *r, int32_t n_new) {
    if (!e->snapshots) return n_new;
    const int32_t end = r->n_computed + n_new;
    const int32_t bnd = VLLMC_MIN(end, r->n_prompt) / BK_KV_BLOCK * BK_KV_BLOCK;
    return bnd > r->n_computed && bnd < end ? bnd - r->n_computed : n_new;
}

/* Schedule a running request; may preempt others (or itself). */
static void sched_running(vllmc_engine *e, struct vllmc_request *r, int32_t *budget, bool *preempted) {
    const int32_t n_new = chunk_cut(e, r, VLLMC_MIN(r->n_tokens - r->n_computed, *budget));
    for (;;) {
        if (req_grow(e, r, r->n_computed + n_new)) break;
        struct vllmc_request *victim = NULL;
        for (int32_t j = e->n_running - 1; j >= 0 && !victim; j--)
            if (!e->running[j]->scheduled) victim = e->running[j];
        VLLMC_ASSERT(victim);
        req_preempt(e, victim);
        *preempted = true;
        if (victim == r) return;
    }
    sched_add(e, r, n_new, budget);
}

static void schedule(vllmc_engine *e) {
    int32_t budget = e->cfg.max_num_batched_tokens;
    bool preempted = false;
    e->n_sched = 0;
    for (int32_t i = 0; i < e->n_running; i++) e->running[i]->scheduled = false;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < e->n_running && budget > 0;) {
            struct vllmc_request *r = e->running[i];
            const bool decode = r->n_tokens - r->n_computed == 1;
            if (r->scheduled || decode != (pass == 0)) { i++; continue; }
            sched_running(e, r, &budget, &preempted);
            if (r->state == REQ_RUNNING) i++; /* else it left running[i] */
        }
    }
    if (preempted) return;
    while (budget > 0 && e->n_running < e->cfg.max_num_seqs && e->wait_head) {
        struct vllmc_request *r = e->wait_head;
        VLLMC_ASSERT(r->n_computed == 0 && r->n_blocks == 0);
        int32_t n_hit = 0;
        if (e->prefix_caching) {
            const int32_t max_hit = (r->n_tokens - 1) / BK_KV_BLOCK;
            req_hash_blocks(r, max_hit);
            int32_t parent = -1, usable = 0;
            for (; n_hit < max_hit; n_hit++) {
                int32_t b = kvb_lookup(&e->kv, r->bhash[n_hit], r->tokens + (size_t)n_hit * BK_KV_BLOCK, parent);
                if (b < 0) break;
                r->bcanon[n_hit] = b; /* staged; committed below */
                parent = b;
                if (!e->snapshots || e->blk_snap[b] >= 0) usable = n_hit + 1;
            }
            n_hit = usable; /* hybrid: only up to a block with a state snapshot */
        }
        const int32_t hit_tokens = n_hit * BK_KV_BLOCK;
        r->n_computed = hit_tokens; /* for chunk_cut; reset below if the request does not fit */
        const int32_t n_new = chunk_cut(e, r, VLLMC_MIN(r->n_tokens - hit_tokens, budget));
        r->n_computed = 0;
        int32_t hit_free = 0;
        for (int32_t i = 0; i < n_hit; i++) hit_free += e->kv.ref[r->bcanon[i]] == 0;
        const int32_t need = CEIL_DIV(hit_tokens + n_new, BK_KV_BLOCK) - n_hit;
        if (need + hit_free > e->kv.n_free) break;
        if (e->run.has_state) {
            VLLMC_ASSERT(e->n_free_slots > 0);
            r->slot = e->free_slots[--e->n_free_slots];
            /* the hit ends at a block with a snapshot: resume the recurrent state from there */
            if (n_hit && e->run.state_copy(e->run.ctx, e->blk_snap[r->bcanon[n_hit - 1]], r->slot)) {
                LOG_ERROR("engine: state snapshot copy failed: %s; request aborted", vllmc_last_error());
                req_finish(e, r, VLLMC_FINISH_ABORT);
                continue;
            }
        }
        for (int32_t i = 0; i < n_hit; i++) {
            kvb_ref(&e->kv, r->bcanon[i]);
            r->blocks[i] = r->bcanon[i];
        }
        r->n_blocks = n_hit;
        r->n_indexed = n_hit;
        r->n_computed = hit_tokens;
        bool grown = req_grow(e, r, hit_tokens + n_new);
        VLLMC_ASSERT(grown);
        e->stats.prefix_cache_hit_tokens += hit_tokens;
        if (!r->admitted) {
            r->admitted = true;
            r->n_cached_first = hit_tokens;
            pthread_mutex_lock(&r->mu);
            r->cached_pub = hit_tokens;
            pthread_mutex_unlock(&r->mu);
        }
        wait_remove(e, r);
        r->state = REQ_RUNNING;
        e->running[e->n_running++] = r;
        sched_add(e, r, n_new, &budget);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Output                                                                                           */

static void text_append(struct vllmc_request *r, const char *s, size_t n) {
    if (!n) return;
    if (r->p_text_len + n > r->p_text_cap) {
        size_t nc = VLLMC_MAX(r->p_text_cap * 2, r->p_text_len + n);
        char *p = realloc(r->p_text, nc);
        if (!p) return; /* text dropped under memory exhaustion; ids still delivered */
        r->p_text = p;
        r->p_text_cap = nc;
    }
    memcpy(r->p_text + r->p_text_len, s, n);
    r->p_text_len += n;
}

/* Logprobs of the raw logits row (before masking, penalties and temperature, as vLLM reports them by
 * default): the log-sum-exp and the n_top best ids (ties to the lower id). */
static double logprobs_top(vllmc_engine *e, const float *row, int32_t n_top, vllmc_token_logprob *top) {
    const int32_t V = e->run.n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) if (row[i] > mx) mx = row[i];
    double s = 0;
    for (int32_t i = 0; i < V; i++) s += exp((double)row[i] - (double)mx);
    const double lse = (double)mx + log(s);
    for (int32_t k = 0; k < n_top; k++) { top[k].id = -1; top[k].logprob = -INFINITY; }
    for (int32_t i = 0; i < V && n_top > 0; i++) {
        if (top[n_top - 1].id >= 0 && !(row[i] > row[top[n_top - 1].id])) continue;
        int32_t k = n_top - 1;
        while (k > 0 && (top[k - 1].id < 0 || row[i] > row[top[k - 1].id])) { top[k] = top[k - 1]; k--; }
        top[k].id = i;
    }
    for (int32_t k = 0; k < n_top; k++)
        if (top[k].id >= 0) top[k].logprob = (float)((double)row[top[k].id] - lse);
    return lse;
}

static void emit_token(vllmc_engine *e, struct vllmc_request *r, int32_t tok, float lp, const vllmc_token_logprob *top);

/* The request's logits row as the model gives it is all its next token needs: no bias or penalties, no logprobs, no
 * min_tokens mask in force. */
static bool plain_row(const vllmc_engine *e, const struct vllmc_request *r) {
    const bool masked = r->n_out < r->min_tokens && ((!r->ignore_eos && e->n_eos > 0) || r->n_stop_ids > 0);
    return sampler_params_plain(&r->sp) && r->logprobs < 0 && !masked;
}
/* ... and it is that row's argmax (greedy). Steps whose logits rows all are so bring back only the argmax ids. */
static bool plain_greedy(const vllmc_engine *e, const struct vllmc_request *r) {
    return r->sp.temperature == 0.0f && plain_row(e, r);
}
/* The request's next token is a draw the device can make (bk_sample): temperature, top-k, top-p and min-p only. */
static bool plain_draw(const vllmc_engine *e, const struct vllmc_request *r) {
    return r->sp.temperature <= 1e4f && plain_row(e, r);
}

/* The draw of logits row i (threadpool task; thread th's sampler): the token, its logprob and the top ids into
 * s_tok / s_lp / s_top. Touches only its row and its request's RNG, so the rows run in parallel. */
static void sample_task(void *ctx, int i, int th) {
    vllmc_engine *e = ctx;
    struct vllmc_request *r = e->b_lreq[i];
    float *row = e->logits + (size_t)i * (size_t)e->run.n_vocab;
    vllmc_token_logprob *top = e->s_top + (size_t)i * VLLMC_MAX_TOP_LOGPROBS;
    double lse = 0;
    if (r->logprobs >= 0) lse = logprobs_top(e, row, r->n_top, top);
    /* min_tokens: EOS (unless ignored) and stop ids cannot be drawn while the output is shorter */
    if (r->n_out < r->min_tokens) {
        if (!r->ignore_eos) for (int32_t k = 0; k < e->n_eos; k++) row[e->eos_list[k]] = -INFINITY;
        for (int32_t k = 0; k < r->n_stop_ids; k++) row[r->stop_ids[k]] = -INFINITY;
    }
    const int32_t tok = sampler_sample(e->smps[th], row, &r->sp, &r->rng, r->tokens, r->n_tokens, r->n_prompt);
    e->s_tok[i] = tok;
    e->s_lp[i] = r->logprobs >= 0 ? (float)((double)row[tok] - lse) : 0.0f;
}

/* Append a drawn token: stop checks, text, the output queue. */
static void emit_token(vllmc_engine *e, struct vllmc_request *r, int32_t tok, float lp, const vllmc_token_logprob *top) {
    r->tokens[r->n_tokens++] = tok;
    r->n_out++;
    e->stats.generated_tokens++;
    vllmc_finish_reason fin = VLLMC_FINISH_NONE;
    bool stop_tok = false;
    if (r->n_out >= r->min_tokens) {
        if (!r->ignore_eos && e->is_eos[tok]) stop_tok = true;
        for (int32_t i = 0; i < r->n_stop_ids && !stop_tok; i++) stop_tok = r->stop_ids[i] == tok;
    }
    if (stop_tok) fin = VLLMC_FINISH_STOP;
    size_t dn = 0, fn = 0;
    if (e->tok && !stop_tok) {
        if (tokenizer_stream_feed(&r->ts, tok, r->dbuf, r->dbuf_cap, &dn)) dn = 0;
        /* a stop string ends the request even before min_tokens: the stream has cut the text there */
        if (r->ts.stopped) fin = VLLMC_FINISH_STOP;
    }
    if (fin == VLLMC_FINISH_NONE && (r->n_out >= r->max_tokens || r->n_tokens >= e->cfg.max_model_len)) fin = VLLMC_FINISH_LENGTH;
    pthread_mutex_lock(&r->mu);
    r->p_tok[r->p_n] = tok;
    if (r->logprobs >= 0) {
        r->p_lp[r->p_n] = lp;
        if (r->n_top) memcpy(r->p_top + (size_t)r->p_n * (size_t)r->n_top, top, (size_t)r->n_top * sizeof(*top));
    }
    r->p_n++;
    r->out_total = r->n_out;
    if (dn) text_append(r, r->dbuf, dn);
    if (fin != VLLMC_FINISH_NONE && e->tok && !r->ts.stopped) {
        /* the held text of the last token (a partial UTF-8 sequence or a stop-string prefix) */
        fn = tokenizer_stream_flush(&r->ts, r->dbuf, r->dbuf_cap);
        text_append(r, r->dbuf, fn);
    }
    pthread_mutex_unlock(&r->mu);
    if (fin != VLLMC_FINISH_NONE) req_finish(e, r, fin);
    else req_wake(r);
}

/* ------------------------------------------------------------------------------------------------ */
/* Step                                                                                             */

static void intake(vllmc_engine *e) {
    pthread_mutex_lock(&e->mu);
    struct vllmc_request *r = e->in_head;
    e->in_head = e->in_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    while (r) {
        struct vllmc_request *n = r->qnext;
        wait_push_back(e, r);
        r = n;
    }
    /* cancellations */
    for (int32_t i = 0; i < e->n_running;) {
        struct vllmc_request *q = e->running[i];
        if (atomic_load(&q->cancel)) req_finish(e, q, VLLMC_FINISH_ABORT); else i++;
    }
    for (struct vllmc_request *q = e->wait_head; q;) {
        struct vllmc_request *n = q->qnext;
        if (atomic_load(&q->cancel)) req_finish(e, q, VLLMC_FINISH_ABORT);
        q = n;
    }
}

static void publish_stats(vllmc_engine *e) {
    e->stats.running = e->n_running;
    e->stats.waiting = e->n_waiting;
    e->stats.kv_blocks_free = e->kv.n_free;
    e->stats.kv_blocks_cached = e->kv.n_hashed;
    e->stats.state_snapshots_used = e->snapshots ? e->cfg.n_state_snapshots - e->n_snap_free : 0;
    pthread_mutex_lock(&e->mu);
    e->stats_pub = e->stats;
    pthread_mutex_unlock(&e->mu);
}

static void commit_rows(vllmc_engine *e, struct vllmc_request *r, int32_t n_new);
static void emit_rows(vllmc_engine *e, int32_t nl, bool ids);

/* Pipelined steps (run.forward_queue). A step of decode rows only (each a request past its prompt, one position, its
 * token drawn on the device) is queued without waiting for its ids; the next engine_step queues the step after it
 * (the same requests a position further, their token ids the queued step's, taken on the device) before it takes the
 * queued step's ids, so the device goes from one step to the next without waiting for the host. The next step is
 * queued only where every row certainly goes on: no request waiting to be scheduled, none cancelled, each with room
 * for a token past the queued one, KV blocks for one more position free. A row whose request ends on the queued
 * step's token (a stop token or string) has had one step too many computed: its result is dropped, and its KV blocks
 * and state slot, freed at its end, are given out only by a step scheduled after that one ran. Anything else drains
 * the pipeline (the queued step is taken, the runner goes back to plain steps) and the next engine_step schedules as
 * usual. The rows are committed (n_computed, prefix index) when their ids are taken, when every token they read is
 * known. */
static bool queue_row_ok(const vllmc_engine *e, const struct vllmc_request *r, bool draws) {
    return r->n_computed >= r->n_prompt && (draws ? plain_draw(e, r) && e->run.device_sample : plain_greedy(e, r));
}

/* The queued step's rows, and the step after it where it is certain to be wanted; then the queued step's ids. */
static bool step_queued(vllmc_engine *e) {
    const int32_t n = e->q_n;
    const bool draws = e->q_sample;
    bool next = e->wait_head == NULL && e->n_running == n;
    int32_t need = 0;
    for (int32_t i = 0; i < n && next; i++) {
        const struct vllmc_request *r = e->q_req[i];
        next = r->state == REQ_RUNNING && !atomic_load(&r->cancel) && r->n_out + 2 <= r->max_tokens &&
               r->q_pos + 2 < e->cfg.max_model_len && queue_row_ok(e, r, draws);
        if (next) need += VLLMC_MAX(0, CEIL_DIV(r->q_pos + 2, BK_KV_BLOCK) - r->n_blocks);
    }
    if (next && need > e->kv.n_free) next = false;
    if (next) {
        for (int32_t i = 0; i < n; i++) {
            struct vllmc_request *r = e->q_req[i];
            const bool grown = req_grow(e, r, r->q_pos + 2);
            VLLMC_ASSERT(grown);
            e->b_tok[i] = 0; /* a placeholder: the queued step's id of this row, on the device */
            e->b_pos[i] = r->q_pos + 1;
            e->b_seq[i] = i;
            e->b_lrow[i] = i;
            e->b_seqs[i] = (struct bk_seq){.block_table = r->blocks, .n_blocks = r->n_blocks, .state_slot = r->slot};
            if (draws) {
                e->q_rng[i] = r->rng;
                sampler_device_draw(&r->sp, &e->q_rng[i], &e->b_samp[i]);
            }
        }
        const struct bk_batch b = {.n_tokens = n, .token_ids = e->b_tok, .pos = e->b_pos, .seq_idx = e->b_seq, .n_seqs = n,
                                   .seqs = e->b_seqs, .n_logits = n, .logit_rows = e->b_lrow, .sample = draws ? e->b_samp : NULL};
        if (e->run.forward_queue(e->run.ctx, &b, true)) {
            LOG_ERROR("engine: queueing a step failed: %s; steps wait again", vllmc_last_error());
            next = false;
        } else {
            e->stats.steps++;
            for (int32_t i = 0; i < n; i++) {
                req_ref(e->q_req[i]);
                e->q_req[i]->q_pos++;
                if (draws) e->q_req[i]->rng = e->q_rng[i];
                e->q_next[i] = e->q_req[i];
            }
        }
    }
    /* the queued step's ids: its rows whose requests still run are computed, their tokens emitted in order */
    vllmc_status st = e->run.fetch_ids(e->run.ctx, e->b_ids, n);
    if (st) LOG_ERROR("engine: a queued step failed: %s; aborting its requests", vllmc_last_error());
    int32_t nl = 0;
    for (int32_t i = 0; i < n; i++) {
        struct vllmc_request *r = e->q_req[i];
        if (r->state == REQ_RUNNING) {
            if (st) req_finish(e, r, VLLMC_FINISH_ABORT);
            else {
                commit_rows(e, r, 1);
                e->b_ids[nl] = e->b_ids[i];
                e->b_lreq[nl++] = r;
            }
        }
    }
    emit_rows(e, nl, true);
    for (int32_t i = 0; i < n; i++) req_unref(e->q_req[i]);
    if (next && !st) {
        struct vllmc_request **t = e->q_req;
        e->q_req = e->q_next;
        e->q_next = t;
    } else {
        if (next) /* queued after a step that failed: its rows' requests were aborted with that step; pipe_off drops it */
            for (int32_t i = 0; i < n; i++) req_unref(e->q_next[i]);
        e->q_n = 0;
        if (e->run.pipe_off(e->run.ctx)) LOG_ERROR("engine: ending pipelined steps: %s", vllmc_last_error());
    }
    publish_stats(e);
    return true;
}

/* Take whatever step is still queued, drop its results and return the runner to plain steps (destroy). */
static void drain_queued(vllmc_engine *e) {
    if (!e->q_n) return;
    for (int32_t i = 0; i < e->q_n; i++) req_unref(e->q_req[i]);
    e->q_n = 0;
    if (e->run.pipe_off(e->run.ctx)) LOG_ERROR("engine: ending pipelined steps: %s", vllmc_last_error());
}

bool engine_step(vllmc_engine *e) {
    intake(e);
    if (e->q_n) return step_queued(e);
    if (!e->n_running && !e->wait_head) { publish_stats(e); return false; }
    schedule(e);
    if (e->n_sched == 0) { publish_stats(e); return false; }
    /* build the batch */
    int32_t nt = 0, nl = 0;
    for (int32_t j = 0; j < e->n_sched; j++) {
        struct vllmc_request *r = e->sched[j];
        for (int32_t p = r->n_computed; p < r->n_computed + r->sched_new; p++) {
            e->b_tok[nt] = r->tokens[p];
            e->b_pos[nt] = p;
            e->b_seq[nt] = j;
            nt++;
        }
        e->b_seqs[j] = (struct bk_seq){.block_table = r->blocks, .n_blocks = r->n_blocks, .state_slot = r->slot};
        if (r->n_computed + r->sched_new == r->n_tokens) { e->b_lrow[nl] = nt - 1; e->b_lreq[nl] = r; nl++; }
    }
    struct bk_batch b = {.n_tokens = nt, .token_ids = e->b_tok, .pos = e->b_pos, .seq_idx = e->b_seq, .n_seqs = e->n_sched,
                         .seqs = e->b_seqs, .n_logits = nl, .logit_rows = e->b_lrow};
    bool argmax_only = e->run.forward_argmax && nl > 0;
    for (int32_t i = 0; i < nl && argmax_only; i++) argmax_only = plain_greedy(e, e->b_lreq[i]);
    /* rows that sample without bias, penalties or logprobs: drawn on the device where the runner offers it (each
     * takes its uniform from its request's RNG, as the host sampler would) */
    bool dev_draw = !argmax_only && e->run.device_sample && e->run.forward_argmax && nl > 0;
    for (int32_t i = 0; i < nl && dev_draw; i++) dev_draw = plain_draw(e, e->b_lreq[i]);
    if (dev_draw) {
        for (int32_t i = 0; i < nl; i++) sampler_device_draw(&e->b_lreq[i]->sp, &e->b_lreq[i]->rng, &e->b_samp[i]);
        b.sample = e->b_samp;
        argmax_only = true; /* the ids come back as the argmax's do */
    }
    /* decode rows only, each drawn on the device: queued, its ids taken by the next engine_step (step_queued) */
    bool queue = argmax_only && e->run.forward_queue && nt == nl && nl == e->n_sched;
    for (int32_t i = 0; i < nl && queue; i++) queue = queue_row_ok(e, e->b_lreq[i], dev_draw);
    if (queue) {
        const vllmc_status qs = e->run.forward_queue(e->run.ctx, &b, false);
        e->stats.steps++;
        if (qs) {
            LOG_ERROR("engine: queueing a step failed: %s; aborting the %d requests of this step", vllmc_last_error(), e->n_sched);
            for (int32_t j = 0; j < e->n_sched; j++) req_finish(e, e->sched[j], VLLMC_FINISH_ABORT);
            (void)e->run.pipe_off(e->run.ctx);
        } else {
            for (int32_t i = 0; i < nl; i++) {
                struct vllmc_request *r = e->b_lreq[i];
                req_ref(r);
                r->q_pos = r->n_computed;
                r->scheduled = false;
                e->q_req[i] = r;
            }
            e->q_n = nl;
            e->q_sample = dev_draw;
        }
        publish_stats(e);
        return true;
    }
    vllmc_status st = argmax_only ? e->run.forward_argmax(e->run.ctx, &b, e->b_ids) : e->run.forward(e->run.ctx, &b, e->logits);
    e->stats.steps++;
    if (st) {
        LOG_ERROR("engine: forward failed: %s; aborting the %d requests of this step", vllmc_last_error(), e->n_sched);
        for (int32_t j = 0; j < e->n_sched; j++) req_finish(e, e->sched[j], VLLMC_FINISH_ABORT);
        publish_stats(e);
        return true;
    }
    for (int32_t j = 0; j < e->n_sched; j++) commit_rows(e, e->sched[j], e->sched[j]->sched_new);
    if (!argmax_only && nl > 0) threadpool_run(nl > 1 ? e->spool : NULL, sample_task, e, nl); /* the draws, then in order: */
    emit_rows(e, nl, argmax_only);
    publish_stats(e);
    return true;
}

/* n_new more positions of r are computed: the prefix index takes its full blocks, and a hybrid prompt's state at a
 * block boundary goes into a snapshot. */
static void commit_rows(vllmc_engine *e, struct vllmc_request *r, int32_t n_new) {
    {
        const int32_t p0 = r->n_computed, p1 = p0 + n_new;
        e->stats.prompt_tokens_computed += VLLMC_MAX(0, VLLMC_MIN(p1, r->n_prompt) - p0);
        r->n_computed = p1;
        r->scheduled = false;
        if (e->prefix_caching) {
            const int32_t full = r->n_computed / BK_KV_BLOCK;
            req_hash_blocks(r, full);
            for (int32_t i = r->n_indexed; i < full; i++) {
                const int32_t parent = i ? r->bcanon[i - 1] : -1;
                const int32_t *tk = r->tokens + (size_t)i * BK_KV_BLOCK;
                int32_t have = kvb_lookup(&e->kv, r->bhash[i], tk, parent);
                if (have < 0) { kvb_insert(&e->kv, r->blocks[i], r->bhash[i], tk, parent); have = r->blocks[i]; }
                r->bcanon[i] = have;
            }
            if (full > r->n_indexed) r->n_indexed = full;
            /* hybrid: the running slot now holds the state after block full-1 */
            if (e->snapshots && full > 0 && r->n_computed == full * BK_KV_BLOCK && r->n_computed <= r->n_prompt) {
                const int32_t cb = r->bcanon[full - 1];
                if (e->blk_snap[cb] < 0 && e->n_snap_free > 0) {
                    const int32_t sn = e->snap_free[--e->n_snap_free];
                    if (e->run.state_copy(e->run.ctx, r->slot, sn)) {
                        LOG_ERROR("engine: state snapshot failed: %s", vllmc_last_error());
                        e->snap_free[e->n_snap_free++] = sn;
                    } else {
                        e->blk_snap[cb] = sn;
                    }
                }
            }
        }
    }
}

/* The step's logits rows' tokens, in order (the ids of b_ids where the step gave ids, else the host draws). */
static void emit_rows(vllmc_engine *e, int32_t nl, bool ids) {
    for (int32_t i = 0; i < nl; i++) {
        if (ids) {
            const int32_t tok = e->b_ids[i];
            if (tok < 0 || tok >= e->run.n_vocab) { /* a backend bug, never a request's: end it cleanly */
                LOG_ERROR("engine: argmax %d outside the vocabulary", tok);
                req_finish(e, e->b_lreq[i], VLLMC_FINISH_ABORT);
                continue;
            }
            emit_token(e, e->b_lreq[i], tok, 0.0f, NULL);
        } else {
            emit_token(e, e->b_lreq[i], e->s_tok[i], e->s_lp[i], e->s_top + (size_t)i * VLLMC_MAX_TOP_LOGPROBS);
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Invariants                                                                                       */

vllmc_status engine_check(vllmc_engine *e) {
    const struct kv_blocks *k = &e->kv;
    int32_t *cnt = calloc((size_t)k->n_blocks, sizeof(int32_t));
    if (!cnt) return vllmc_errorf(VLLMC_ERR_OOM, "check");
    vllmc_status st = VLLMC_OK;
#define FAILC(...) do { st = vllmc_errorf(VLLMC_ERR_INVALID, __VA_ARGS__); goto out; } while (0)
    int32_t slots_used = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const struct vllmc_request *r = e->running[i];
        if (r->state != REQ_RUNNING) FAILC("running[%d] in state %d", i, r->state);
        if (r->n_blocks != CEIL_DIV(r->n_computed, BK_KV_BLOCK) && r->n_blocks < CEIL_DIV(r->n_computed, BK_KV_BLOCK))
            FAILC("request %llu: %d blocks for %d computed tokens", (unsigned long long)r->id, r->n_blocks, r->n_computed);
        if (r->n_blocks > CEIL_DIV(r->n_tokens, BK_KV_BLOCK)) FAILC("request %llu: %d blocks for %d tokens", (unsigned long long)r->id, r->n_blocks, r->n_tokens);
        if (r->n_computed >= r->n_tokens + 1 || r->n_computed > r->n_tokens) FAILC("request %llu: computed %d of %d", (unsigned long long)r->id, r->n_computed, r->n_tokens);
        for (int32_t j = 0; j < r->n_blocks; j++) {
            if (r->blocks[j] < 0 || r->blocks[j] >= k->n_blocks) FAILC("bad block id %d", r->blocks[j]);
            cnt[r->blocks[j]]++;
        }
        for (int32_t j = 0; j < r->n_blocks; j++) {
            const int32_t b = r->blocks[j];
            /* a cached block in a table holds exactly that table's tokens there (and is full of computed ones) */
            if (k->hashed[b] && ((j + 1) * BK_KV_BLOCK > r->n_computed ||
                                 memcmp(k->tokens + (size_t)b * BK_KV_BLOCK, r->tokens + (size_t)j * BK_KV_BLOCK, BK_KV_BLOCK * sizeof(int32_t))))
                FAILC("request %llu: cached block %d at table index %d does not hold its tokens", (unsigned long long)r->id, b, j);
        }
        for (int32_t j = 0; j < r->n_blocks; j++)
            for (int32_t m = j + 1; m < r->n_blocks; m++)
                if (r->blocks[j] == r->blocks[m]) FAILC("request %llu holds block %d twice", (unsigned long long)r->id, r->blocks[j]);
        if (e->run.has_state) { if (r->slot < 0) FAILC("running request without a state slot"); slots_used++; }
    }
    int32_t nw = 0;
    for (const struct vllmc_request *r = e->wait_head; r; r = r->qnext, nw++)
        if (r->n_blocks || r->n_computed || r->slot >= 0 || r->state != REQ_WAITING) FAILC("waiting request holds resources");
    if (nw != e->n_waiting) FAILC("waiting count %d != %d", nw, e->n_waiting);
    if (e->run.has_state && slots_used + e->n_free_slots != e->cfg.max_num_seqs) FAILC("state slots leak: %d used + %d free", slots_used, e->n_free_slots);
    int32_t n_zero = 0, n_hashed = 0;
    for (int32_t b = 0; b < k->n_blocks; b++) {
        if (k->ref[b] != cnt[b]) FAILC("block %d: refcount %d, referenced by %d tables", b, k->ref[b], cnt[b]);
        if ((k->ref[b] == 0) != (k->in_free[b] != 0)) FAILC("block %d: ref %d but in_free %d", b, k->ref[b], k->in_free[b]);
        n_zero += k->ref[b] == 0;
        if (k->hashed[b]) {
            n_hashed++;
            int32_t f = kvb_lookup(k, k->hash[b], k->tokens + (size_t)b * BK_KV_BLOCK, k->parent[b]);
            if (f != b) FAILC("block %d: index lookup gives %d", b, f);
        }
    }
    if (n_hashed != k->n_hashed) FAILC("hashed count %d != %d", n_hashed, k->n_hashed);
    if (e->snapshots) {
        int32_t n_snap = 0;
        for (int32_t b = 0; b < k->n_blocks; b++) {
            if (e->blk_snap[b] < 0) continue;
            n_snap++;
            if (!k->hashed[b]) FAILC("block %d has a state snapshot but is not cached", b);
            const int32_t sn = e->blk_snap[b];
            if (sn < e->cfg.max_num_seqs || sn >= e->cfg.max_num_seqs + e->cfg.n_state_snapshots) FAILC("block %d: snapshot slot %d", b, sn);
            for (int32_t c = b + 1; c < k->n_blocks; c++) if (e->blk_snap[c] == sn) FAILC("snapshot slot %d on blocks %d and %d", sn, b, c);
            for (int32_t i = 0; i < e->n_snap_free; i++) if (e->snap_free[i] == sn) FAILC("snapshot slot %d both used and free", sn);
        }
        if (n_snap + e->n_snap_free != e->cfg.n_state_snapshots) FAILC("snapshot slots: %d used + %d free != %d", n_snap, e->n_snap_free, e->cfg.n_state_snapshots);
    }
    int32_t nq = 0, prev = -1;
    for (int32_t b = k->free_head; b >= 0; b = k->next[b]) {
        if (++nq > k->n_blocks) FAILC("free queue cycle");
        if (k->prev[b] != prev || !k->in_free[b]) FAILC("free queue link broken at %d", b);
        prev = b;
    }
    if (prev != k->free_tail || nq != k->n_free || nq != n_zero) FAILC("free queue: %d linked, n_free %d, %d unreferenced", nq, k->n_free, n_zero);
    /* every bucket entry is a hashed block in the right bucket */
    int32_t nb = 0;
    for (uint32_t i = 0; i <= k->bucket_mask; i++)
        for (int32_t b = k->bucket[i]; b >= 0; b = k->bnext[b]) {
            if (!k->hashed[b] || (k->hash[b] & k->bucket_mask) != i) FAILC("bucket %u holds block %d wrongly", i, b);
            if (++nb > k->n_blocks) FAILC("bucket cycle");
        }
    if (nb != k->n_hashed) FAILC("buckets hold %d blocks, %d hashed", nb, k->n_hashed);
#undef FAILC
out:
    free(cnt);
    return st;
}

/* ------------------------------------------------------------------------------------------------ */
/* Creation, thread, destruction                                                                    */

static void *engine_thread_main(void *arg) {
    vllmc_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->in_head && e->n_live == 0 && e->q_n == 0) pthread_cond_wait(&e->work_cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        if (!engine_step(e)) {
            /* live requests exist but nothing could run (only cancelled ones in flight): wait briefly */
            pthread_mutex_lock(&e->mu);
            if (!e->stop && !e->in_head && e->n_live > 0 && !e->n_running && !e->wait_head) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 1000000L;
                if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
                pthread_cond_timedwait(&e->work_cv, &e->mu, &ts);
            }
            pthread_mutex_unlock(&e->mu);
        }
    }
    return NULL;
}

static void engine_free(vllmc_engine *e) {
    threadpool_destroy(e->spool);
    for (int32_t i = 0; e->smps && i < e->n_smp; i++) sampler_destroy(e->smps[i]);
    free(e->smps); free(e->s_tok); free(e->s_lp); free(e->s_top); free(e->b_samp);
    kvb_free(&e->kv);
    free(e->blk_snap); free(e->snap_free);
    free(e->is_eos); free(e->eos_list); free(e->running); free(e->free_slots); free(e->sched);
    free(e->b_tok); free(e->b_pos); free(e->b_seq); free(e->b_lrow); free(e->b_seqs); free(e->b_lreq); free(e->b_ids); free(e->logits);
    free(e->q_req); free(e->q_next); free(e->q_rng);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->idle_cv);
    if (e->run.destroy) e->run.destroy(e->run.ctx);
    if (e->owner_free) e->owner_free(e->owner);
    free(e);
}

vllmc_status engine_create(const struct engine_runner *run, const struct engine_config *c, const struct tokenizer *tok,
                           bool start_thread, vllmc_engine **out) {
    *out = NULL;
    if (c->max_model_len < 2 || c->max_num_seqs <= 0 || c->max_num_batched_tokens <= 0 || c->n_blocks <= 0 || run->n_vocab <= 0)
        return vllmc_errorf(VLLMC_ERR_INVALID, "engine: max_model_len %d, max_num_seqs %d, max_num_batched_tokens %d, %d KV blocks",
                            c->max_model_len, c->max_num_seqs, c->max_num_batched_tokens, c->n_blocks);
    const int32_t per_seq = CEIL_DIV(c->max_model_len, BK_KV_BLOCK);
    if (c->n_blocks < per_seq)
        return vllmc_errorf(VLLMC_ERR_INVALID,
                            "engine: a KV pool of %d blocks (%d tokens) cannot hold one request of max_model_len %d (%d blocks); "
                            "give the KV cache more memory or lower max_model_len", c->n_blocks, c->n_blocks * BK_KV_BLOCK,
                            c->max_model_len, per_seq);
    vllmc_engine *e = calloc(1, sizeof(*e));
    if (!e) return vllmc_errorf(VLLMC_ERR_OOM, "engine");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    e->run = *run;
    e->cfg = *c;
    e->tok = tok;
    e->snapshots = c->prefix_caching && run->has_state && run->state_copy && c->n_state_snapshots > 0;
    e->prefix_caching = c->prefix_caching && (!run->has_state || e->snapshots);
    e->max_blocks_per_seq = per_seq;
    const int32_t V = run->n_vocab, S = c->max_num_seqs, T = c->max_num_batched_tokens;
    vllmc_status st;
    if ((st = kvb_init(&e->kv, c->n_blocks))) { e->run.destroy = NULL; engine_free(e); return st; }
    /* up to 8 sampling threads (a sampler's scratch is ~22 bytes a vocabulary entry), none past the rows a step has */
    {
        int32_t nt = VLLMC_MIN(S, (int32_t)8);
        if (nt > 1 && !(e->spool = threadpool_create(nt))) nt = 1;
        if (e->spool) nt = threadpool_n_threads(e->spool);
        e->smps = calloc((size_t)nt, sizeof(*e->smps));
        if (!e->smps) { e->run.destroy = NULL; engine_free(e); return vllmc_errorf(VLLMC_ERR_OOM, "engine samplers"); }
        e->n_smp = nt;
        for (int32_t i = 0; i < nt; i++)
            if ((st = sampler_create(V, &e->smps[i]))) { e->run.destroy = NULL; engine_free(e); return st; }
    }
    e->s_tok = malloc((size_t)S * sizeof(int32_t));
    e->b_samp = malloc((size_t)S * sizeof(*e->b_samp));
    e->s_lp = malloc((size_t)S * sizeof(float));
    e->s_top = malloc((size_t)S * VLLMC_MAX_TOP_LOGPROBS * sizeof(vllmc_token_logprob));
    e->is_eos = calloc((size_t)V, sizeof(bool));
    e->eos_list = malloc((size_t)V * sizeof(int32_t));
    e->running = malloc((size_t)S * sizeof(*e->running));
    e->free_slots = malloc((size_t)S * sizeof(int32_t));
    e->sched = malloc((size_t)S * sizeof(*e->sched));
    e->b_tok = malloc((size_t)T * sizeof(int32_t));
    e->b_pos = malloc((size_t)T * sizeof(int32_t));
    e->b_seq = malloc((size_t)T * sizeof(int32_t));
    e->b_lrow = malloc((size_t)S * sizeof(int32_t));
    e->b_lreq = malloc((size_t)S * sizeof(*e->b_lreq));
    e->b_ids = malloc((size_t)S * sizeof(*e->b_ids));
    e->b_seqs = malloc((size_t)S * sizeof(struct bk_seq));
    e->logits = malloc((size_t)S * (size_t)V * sizeof(float));
    e->q_req = malloc((size_t)S * sizeof(*e->q_req));
    e->q_next = malloc((size_t)S * sizeof(*e->q_next));
    e->q_rng = malloc((size_t)S * sizeof(*e->q_rng));
    if (!run->forward_queue || !run->fetch_ids || !run->pipe_off) e->run.forward_queue = NULL; /* all three or none */
    if (e->snapshots) {
        e->blk_snap = malloc((size_t)c->n_blocks * sizeof(int32_t));
        e->snap_free = malloc((size_t)c->n_state_snapshots * sizeof(int32_t));
        if (!e->blk_snap || !e->snap_free) { e->run.destroy = NULL; engine_free(e); return vllmc_errorf(VLLMC_ERR_OOM, "snapshots"); }
        for (int32_t i = 0; i < c->n_blocks; i++) e->blk_snap[i] = -1;
        for (int32_t i = 0; i < c->n_state_snapshots; i++) e->snap_free[i] = S + c->n_state_snapshots - 1 - i;
        e->n_snap_free = c->n_state_snapshots;
    }
    if (!e->is_eos || !e->eos_list || !e->running || !e->free_slots || !e->sched || !e->b_tok || !e->b_pos || !e->b_seq ||
        !e->b_lrow || !e->b_lreq || !e->b_ids || !e->b_seqs || !e->logits || !e->s_tok || !e->s_lp || !e->s_top || !e->b_samp ||
        !e->q_req || !e->q_next || !e->q_rng) {
        e->run.destroy = NULL;
        engine_free(e);
        return vllmc_errorf(VLLMC_ERR_OOM, "engine buffers");
    }
    for (int32_t i = 0; i < V; i++) {
        bool eos = tok ? tokenizer_is_eog(tok, i) : false;
        if (!tok) for (int32_t j = 0; j < run->n_eos_ids; j++) eos |= run->eos_ids[j] == i;
        if (eos) { e->is_eos[i] = true; e->eos_list[e->n_eos++] = i; }
    }
    for (int32_t i = 0; i < S; i++) e->free_slots[i] = S - 1 - i;
    e->n_free_slots = S;
    e->stats.kv_blocks_total = c->n_blocks;
    e->stats.max_model_len = c->max_model_len;
    e->stats.max_num_seqs = S;
    e->stats.max_num_batched_tokens = T;
    e->stats.prefix_caching = e->prefix_caching;
    e->stats.recurrent_state = run->has_state;
    e->stats.device = c->device ? c->device : VLLMC_DEVICE_CPU;
    e->stats.n_vocab = run->n_vocab;
    e->stats.state_snapshots_total = e->snapshots ? c->n_state_snapshots : 0;
    publish_stats(e);
    if (start_thread) {
        if (pthread_create(&e->thread, NULL, engine_thread_main, e)) {
            e->run.destroy = NULL;
            engine_free(e);
            return vllmc_errorf(VLLMC_ERR_OOM, "engine thread");
        }
        e->has_thread = true;
    }
    *out = e;
    return VLLMC_OK;
}

void vllmc_engine_destroy(vllmc_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    if (e->has_thread) pthread_join(e->thread, NULL);
    drain_queued(e);
    /* abort what is left: submitted, waiting, running */
    pthread_mutex_lock(&e->mu);
    struct vllmc_request *r = e->in_head;
    e->in_head = e->in_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    while (r) { struct vllmc_request *n = r->qnext; wait_push_back(e, r); r = n; }
    while (e->n_running) req_finish(e, e->running[e->n_running - 1], VLLMC_FINISH_ABORT);
    while (e->wait_head) req_finish(e, e->wait_head, VLLMC_FINISH_ABORT);
    engine_free(e);
}

void vllmc_engine_get_stats(vllmc_engine *e, vllmc_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats_pub;
    pthread_mutex_unlock(&e->mu);
}

void vllmc_engine_wait_idle(vllmc_engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->n_live > 0) pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}
