/* Engine scheduler + KV simulation against a fake backend.
 * The fake model stores each row's token in a simulated paged KV pool at (block table[pos/16], pos%16),
 * and the logits of a row single out next(hash of the tokens at positions 0..pos READ BACK THROUGH THE
 * BLOCK TABLE). A fake recurrent state per slot (a running hash, zeroed at position 0) must agree with
 * that history. So a wrong block table, a block shared or reused while still needed, a lost or
 * duplicated token after preemption, or a stale state slot all change the token stream.
 * Thousands of random request mixes (prompt lengths, shared prefixes, chunked prefill budgets, small KV
 * pools forcing preemption, cancels, EOS and stop ids, min_tokens, max_tokens, max_model_len, hybrid
 * engines with and without recurrent-state snapshots for prefix reuse) are
 * checked: after every step engine_check (no leaked or double-freed block, refcounts equal table
 * references, free queue and prefix index consistent); every request finishes exactly once with exactly
 * the stream computed directly from the fake model (a cancelled one with a prefix of it). */
#include <pthread.h>
#include <string.h>
#include "engine/engine.h"
#include "test.h"

#define SIM_V 48
#define SIM_EOS 0
#define SIM_L 160
#define SIM_MAX_REQ 48

struct fake {
    int32_t n_blocks;
    int32_t *kvtok;          /* [n_blocks*16] */
    uint64_t slot_hash[64];
    int32_t slot_pos[64];
    bool has_state;
    int errors;
    int64_t rows;
    /* pipelined steps: the ids of the queued steps, oldest first (a step runs when it is queued: the order of the
     * device's work is the order of queueing, which is what the engine relies on) */
    int32_t qids[2][64], qn[2];
    int nq;
    int64_t from_prev; /* steps queued with the ids of the one before */
};

static uint64_t sim_mix(uint64_t h, int32_t t) {
    h ^= (uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ull;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}
#define SIM_H0 0x1234567ull
static int32_t sim_next(uint64_t h) { return (int32_t)((h >> 21) % SIM_V); }

static vllmc_status fake_forward(void *ctx, const struct bk_batch *b, float *logits) {
    struct fake *f = ctx;
    f->rows += b->n_tokens;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        const struct bk_seq *s = &b->seqs[b->seq_idx[t]];
        int32_t p = b->pos[t];
        if (p / 16 >= s->n_blocks) { f->errors++; return vllmc_errorf(VLLMC_ERR_INVALID, "position outside the table"); }
        f->kvtok[s->block_table[p / 16] * 16 + p % 16] = b->token_ids[t];
        if (f->has_state) {
            int32_t sl = s->state_slot;
            if (sl < 0 || sl >= 64) { f->errors++; continue; }
            if (p == 0) { f->slot_hash[sl] = SIM_H0; f->slot_pos[sl] = 0; }
            if (f->slot_pos[sl] != p) f->errors++;
            f->slot_hash[sl] = sim_mix(f->slot_hash[sl], b->token_ids[t]);
            f->slot_pos[sl] = p + 1;
        }
    }
    for (int32_t i = 0; i < b->n_logits; i++) {
        int32_t t = b->logit_rows[i];
        const struct bk_seq *s = &b->seqs[b->seq_idx[t]];
        uint64_t h = SIM_H0;
        for (int32_t q = 0; q <= b->pos[t]; q++) h = sim_mix(h, f->kvtok[s->block_table[q / 16] * 16 + q % 16]);
        if (f->has_state && f->slot_hash[s->state_slot] != h) f->errors++;
        float *row = logits + (size_t)i * SIM_V;
        for (int32_t v = 0; v < SIM_V; v++) row[v] = 0.0f;
        row[sim_next(h)] = 1.0f;
    }
    return VLLMC_OK;
}

/* The argmax of each logits row (ties to the lowest id). */
static vllmc_status fake_forward_argmax(void *ctx, const struct bk_batch *b, int32_t *ids) {
    struct fake *f = ctx;
    if (f->nq) { f->errors++; return vllmc_errorf(VLLMC_ERR_INVALID, "a plain step while steps are queued"); }
    float *lg = malloc((size_t)(b->n_logits > 0 ? b->n_logits : 1) * SIM_V * sizeof(float));
    vllmc_status st = fake_forward(ctx, b, lg);
    for (int32_t i = 0; !st && i < b->n_logits; i++) {
        int32_t best = 0;
        for (int32_t v = 1; v < SIM_V; v++)
            if (lg[(size_t)i * SIM_V + v] > lg[(size_t)i * SIM_V + best]) best = v;
        ids[i] = best;
    }
    free(lg);
    return st;
}

static vllmc_status fake_forward_queue(void *ctx, const struct bk_batch *b, bool from_prev) {
    struct fake *f = ctx;
    if (f->nq == 2 || b->n_tokens > 64 || b->n_logits != b->n_tokens) { f->errors++; return vllmc_errorf(VLLMC_ERR_INVALID, "queue"); }
    struct bk_batch c = *b;
    int32_t tok[64];
    if (from_prev) { /* the ids of the step queued last, row for row */
        if (!f->nq || b->n_tokens > f->qn[f->nq - 1]) { f->errors++; return vllmc_errorf(VLLMC_ERR_INVALID, "from_prev"); }
        for (int32_t t = 0; t < b->n_tokens; t++) tok[t] = f->qids[f->nq - 1][t];
        c.token_ids = tok;
        f->from_prev++;
    }
    const int nq = f->nq;
    f->nq = 0; /* (fake_forward_argmax refuses plain steps while some are queued) */
    vllmc_status st = fake_forward_argmax(ctx, &c, f->qids[nq]);
    f->nq = nq;
    if (st) return st;
    f->qn[f->nq++] = b->n_logits;
    return VLLMC_OK;
}

static vllmc_status fake_fetch_ids(void *ctx, int32_t *ids, int32_t n) {
    struct fake *f = ctx;
    if (!f->nq || n != f->qn[0]) { f->errors++; return vllmc_errorf(VLLMC_ERR_INVALID, "fetch"); }
    memcpy(ids, f->qids[0], (size_t)n * sizeof(int32_t));
    memcpy(f->qids[0], f->qids[1], sizeof(f->qids[0]));
    f->qn[0] = f->qn[1];
    f->nq--;
    return VLLMC_OK;
}

static vllmc_status fake_pipe_off(void *ctx) {
    ((struct fake *)ctx)->nq = 0;
    return VLLMC_OK;
}

static vllmc_status fake_state_copy(void *ctx, int32_t src, int32_t dst) {
    struct fake *f = ctx;
    if (src < 0 || src >= 64 || dst < 0 || dst >= 64 || src == dst) { f->errors++; return vllmc_errorf(VLLMC_ERR_INVALID, "slot copy"); }
    f->slot_hash[dst] = f->slot_hash[src];
    f->slot_pos[dst] = f->slot_pos[src];
    return VLLMC_OK;
}

struct sim_req {
    int32_t prompt[SIM_L], n_prompt;
    vllmc_sampling_params sp;
    int32_t stop_ids[2];
    int32_t expect[SIM_L], n_expect;
    vllmc_finish_reason expect_fin;
    int32_t got[SIM_L], n_got;
    vllmc_finish_reason fin;
    int n_finish_seen;
    bool cancelled;
    vllmc_request *h;
};

static unsigned rnd(unsigned n) { return (unsigned)(test_rand_u64() % n); }

/* The stream the engine must produce, straight from the fake model. */
static void sim_expect(struct sim_req *q, int32_t L) {
    int32_t hist[SIM_L], n = q->n_prompt;
    memcpy(hist, q->prompt, (size_t)n * sizeof(int32_t));
    const int32_t room = L - q->n_prompt;
    const int32_t max_tokens = q->sp.max_tokens > 0 ? VLLMC_MIN(q->sp.max_tokens, room) : room;
    const int32_t min_tokens = VLLMC_MIN(q->sp.min_tokens, max_tokens);
    q->n_expect = 0;
    for (;;) {
        uint64_t h = SIM_H0;
        for (int32_t i = 0; i < n; i++) h = sim_mix(h, hist[i]);
        int32_t t = sim_next(h);
        bool masked[SIM_V] = {0};
        if (q->n_expect < min_tokens) {
            if (!q->sp.ignore_eos) masked[SIM_EOS] = true;
            for (int32_t i = 0; i < q->sp.n_stop_ids; i++) masked[q->sp.stop_ids[i]] = true;
        }
        if (masked[t]) { t = 0; while (masked[t]) t++; } /* all others tie at 0: the lowest unmasked id */
        hist[n++] = t;
        q->expect[q->n_expect++] = t;
        bool stop = false;
        if (q->n_expect >= min_tokens) {
            if (!q->sp.ignore_eos && t == SIM_EOS) stop = true;
            for (int32_t i = 0; i < q->sp.n_stop_ids; i++) stop |= q->sp.stop_ids[i] == t;
        }
        if (stop) { q->expect_fin = VLLMC_FINISH_STOP; return; }
        if (q->n_expect >= max_tokens || n >= L) { q->expect_fin = VLLMC_FINISH_LENGTH; return; }
    }
}

static int64_t g_preempt, g_hits, g_cancels, g_steps, g_reqs, g_state_hits, g_from_prev, g_pipe_trials;

static void sim_poll(struct sim_req *q) {
    if (!q->h) return;
    vllmc_output o;
    vllmc_request_next(q->h, 0, &o);
    for (int32_t i = 0; i < o.n_tokens; i++) {
        if (q->n_got < SIM_L) q->got[q->n_got] = o.tokens[i];
        q->n_got++;
    }
    if (o.finish != VLLMC_FINISH_NONE) {
        q->n_finish_seen++;
        q->fin = o.finish;
        vllmc_output o2;
        vllmc_request_next(q->h, 0, &o2); /* after the end: nothing new, same reason */
        CHECK(o2.n_tokens == 0 && o2.finish == o.finish);
        vllmc_request_release(q->h);
        q->h = NULL;
    }
}

static void sim_verify(const struct sim_req *q, int trial, int idx) {
    CHECK_MSG(q->n_finish_seen == 1, "trial %d req %d finished %d times", trial, idx, q->n_finish_seen);
    if (q->fin == VLLMC_FINISH_ABORT) {
        CHECK_MSG(q->cancelled, "trial %d req %d aborted without a cancel", trial, idx);
        bool prefix = q->n_got <= q->n_expect;
        for (int32_t i = 0; prefix && i < q->n_got; i++) prefix = q->got[i] == q->expect[i];
        CHECK_MSG(prefix, "trial %d req %d: cancelled stream is not a prefix of the expected one", trial, idx);
    } else {
        bool same = q->n_got == q->n_expect && q->fin == q->expect_fin;
        for (int32_t i = 0; same && i < q->n_got; i++) same = q->got[i] == q->expect[i];
        CHECK_MSG(same, "trial %d req %d: got %d tokens (finish %d), expected %d (finish %d)", trial, idx, q->n_got, q->fin,
                  q->n_expect, q->expect_fin);
    }
}

static void run_trial(int trial) {
    static struct sim_req reqs[SIM_MAX_REQ];
    const bool has_state = rnd(4) == 0;
    const int32_t L = SIM_L - (int32_t)rnd(40);
    const int32_t per_seq = CEIL_DIV(L, 16);
    struct engine_config c = {.max_model_len = L, .max_num_seqs = 1 + (int32_t)rnd(8),
                              .max_num_batched_tokens = 1 + (int32_t)rnd(rnd(2) ? 24 : 200), .n_blocks = per_seq + (int32_t)rnd(per_seq * 3),
                              .prefix_caching = rnd(5) != 0, .seed = test_rand_u64()};
    if (has_state && rnd(4)) c.n_state_snapshots = 1 + (int32_t)rnd(16); /* else: no reuse for the hybrid */
    struct fake f = {.n_blocks = c.n_blocks, .has_state = has_state};
    f.kvtok = malloc((size_t)c.n_blocks * 16 * sizeof(int32_t));
    for (int32_t i = 0; i < c.n_blocks * 16; i++) f.kvtok[i] = -1;
    const int32_t eos = SIM_EOS;
    struct engine_runner run = {.ctx = &f, .n_vocab = SIM_V, .has_state = has_state, .eos_ids = &eos, .n_eos_ids = 1,
                                .forward = fake_forward, .state_copy = fake_state_copy};
    const unsigned mode = rnd(3); /* 0: logits only, 1: argmax steps, 2: argmax steps pipelined */
    if (mode >= 1) run.forward_argmax = fake_forward_argmax;
    if (mode == 2) { run.forward_queue = fake_forward_queue; run.fetch_ids = fake_fetch_ids; run.pipe_off = fake_pipe_off; }
    g_pipe_trials += mode == 2;
    vllmc_engine *e = NULL;
    vllmc_status st = engine_create(&run, &c, NULL, false, &e);
    CHECK(st == VLLMC_OK);
    if (st) { free(f.kvtok); return; }
    /* a few shared prefixes */
    int32_t bases[3][SIM_L];
    int32_t chunks[3][16];
    for (int k = 0; k < 3; k++) for (int i = 0; i < SIM_L; i++) bases[k][i] = (int32_t)rnd(SIM_V);
    for (int k = 0; k < 3; k++) for (int i = 0; i < 16; i++) chunks[k][i] = (int32_t)rnd(SIM_V);
    const int n_req = 4 + (int)rnd(SIM_MAX_REQ - 4);
    for (int i = 0; i < n_req; i++) {
        struct sim_req *q = &reqs[i];
        memset(q, 0, sizeof(*q));
        q->n_prompt = 1 + (int32_t)rnd((unsigned)(rnd(3) ? L / 2 : L - 1));
        int k = (int)rnd(4);
        int32_t shared = k < 3 ? (int32_t)rnd((unsigned)q->n_prompt + 1) : 0;
        if (rnd(4) == 0 && k < 3) shared = q->n_prompt; /* identical prompts */
        for (int32_t j = 0; j < q->n_prompt; j++) q->prompt[j] = j < shared ? bases[k][j] : (int32_t)rnd(SIM_V);
        if (rnd(3) == 0) /* whole blocks drawn from 3 chunks: equal blocks after different prefixes */
            for (int32_t j = 0; j + 16 <= q->n_prompt; j += 16) memcpy(q->prompt + j, chunks[rnd(3)], sizeof(chunks[0]));
        vllmc_sampling_params_default(&q->sp);
        q->sp.max_tokens = rnd(5) ? 1 + (int32_t)rnd(60) : 0;
        q->sp.min_tokens = rnd(4) == 0 ? (int32_t)rnd(8) : 0;
        q->sp.ignore_eos = rnd(6) == 0;
        if (rnd(3) == 0) {
            q->sp.n_stop_ids = 1 + (int32_t)rnd(2);
            for (int32_t j = 0; j < q->sp.n_stop_ids; j++) q->stop_ids[j] = 1 + (int32_t)rnd(SIM_V - 1);
            q->sp.stop_ids = q->stop_ids;
        }
        sim_expect(q, L);
    }
    int submitted = 0, done = 0;
    for (int step = 0; done < n_req && step < 100000; step++) {
        /* submissions arrive over time */
        while (submitted < n_req && (rnd(3) == 0 || submitted == done)) {
            struct sim_req *q = &reqs[submitted];
            q->sp.stop_ids = q->stop_ids;
            st = vllmc_engine_submit(e, q->prompt, q->n_prompt, &q->sp, NULL, NULL, &q->h);
            CHECK_MSG(st == VLLMC_OK, "submit: %s", vllmc_last_error());
            submitted++;
        }
        if (rnd(25) == 0) {
            int i = (int)rnd((unsigned)submitted);
            if (reqs[i].h && !reqs[i].cancelled) { vllmc_request_cancel(reqs[i].h); reqs[i].cancelled = true; g_cancels++; }
        }
        engine_step(e);
        st = engine_check(e);
        CHECK_MSG(st == VLLMC_OK, "trial %d step %d: %s", trial, step, vllmc_last_error());
        if (st) break;
        done = 0;
        for (int i = 0; i < submitted; i++) {
            sim_poll(&reqs[i]);
            done += reqs[i].h == NULL;
        }
    }
    for (int i = 0; i < n_req; i++) sim_verify(&reqs[i], trial, i);
    CHECK_MSG(f.errors == 0, "trial %d: fake backend saw %d inconsistencies (state slot / positions)", trial, f.errors);
    vllmc_engine_stats s;
    vllmc_engine_get_stats(e, &s);
    CHECK(s.running == 0 && s.waiting == 0 && s.kv_blocks_free == c.n_blocks);
    CHECK(s.requests_finished == n_req);
    g_preempt += s.preemptions;
    g_hits += s.prefix_cache_hit_tokens;
    g_steps += s.steps;
    g_reqs += n_req;
    g_from_prev += f.from_prev;
    if (has_state && !c.n_state_snapshots) CHECK(s.prefix_cache_hit_tokens == 0 && !s.prefix_caching);
    if (has_state && c.n_state_snapshots) g_state_hits += s.prefix_cache_hit_tokens;
    vllmc_engine_destroy(e);
    free(f.kvtok);
}

/* A second request sharing a long prefix computes only its suffix (dense); with recurrent state the
 * policy is no reuse, so it computes everything; both give the cold-run stream. */
static void test_prefix_reuse(bool has_state, int32_t n_snap) {
    struct engine_config c = {.max_model_len = 256, .max_num_seqs = 4, .max_num_batched_tokens = 64, .n_blocks = 64,
                              .prefix_caching = true, .n_state_snapshots = n_snap, .seed = 1};
    struct fake f = {.n_blocks = c.n_blocks, .has_state = has_state};
    f.kvtok = malloc((size_t)c.n_blocks * 16 * sizeof(int32_t));
    const int32_t eos = -1;
    struct engine_runner run = {.ctx = &f, .n_vocab = SIM_V, .has_state = has_state, .eos_ids = &eos, .n_eos_ids = 0,
                                .forward = fake_forward, .state_copy = fake_state_copy};
    vllmc_engine *e = NULL;
    CHECK(engine_create(&run, &c, NULL, false, &e) == VLLMC_OK);
    static struct sim_req a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    a.n_prompt = 100;
    b.n_prompt = 110;
    for (int i = 0; i < 110; i++) b.prompt[i] = (int32_t)rnd(SIM_V);
    memcpy(a.prompt, b.prompt, 96 * sizeof(int32_t));
    for (int i = 96; i < 100; i++) a.prompt[i] = (b.prompt[i] + 1) % SIM_V;
    vllmc_sampling_params_default(&a.sp);
    a.sp.max_tokens = 8;
    a.sp.ignore_eos = 1; /* this engine has no EOS id */
    b.sp = a.sp;
    sim_expect(&a, c.max_model_len);
    sim_expect(&b, c.max_model_len);
    vllmc_engine_stats s0, s1;
    CHECK(vllmc_engine_submit(e, a.prompt, a.n_prompt, &a.sp, NULL, NULL, &a.h) == VLLMC_OK);
    while (a.h) { engine_step(e); sim_poll(&a); }
    vllmc_engine_get_stats(e, &s0);
    CHECK(vllmc_engine_submit(e, b.prompt, b.n_prompt, &b.sp, NULL, NULL, &b.h) == VLLMC_OK);
    vllmc_request *bh = b.h;
    (void)bh;
    while (b.h) { engine_step(e); sim_poll(&b); }
    vllmc_engine_get_stats(e, &s1);
    sim_verify(&a, -1, 0);
    sim_verify(&b, -1, 1);
    const int64_t computed = s1.prompt_tokens_computed - s0.prompt_tokens_computed;
    if (has_state && !n_snap) CHECK_MSG(computed == 110, "hybrid without snapshots: computed %lld prompt tokens", (long long)computed);
    else CHECK_MSG(computed == 110 - 96, "%s: computed %lld prompt tokens of the second request (expected 14)",
                   has_state ? "hybrid with snapshots" : "dense", (long long)computed);
    CHECK(engine_check(e) == VLLMC_OK);
    CHECK(f.errors == 0);
    vllmc_engine_destroy(e);
    free(f.kvtok);
}

/* Submission refusals. */
static void test_refusals(void) {
    struct engine_config c = {.max_model_len = 64, .max_num_seqs = 2, .max_num_batched_tokens = 16, .n_blocks = 8, .prefix_caching = true};
    struct fake f = {.n_blocks = 8};
    f.kvtok = calloc(8 * 16, sizeof(int32_t));
    struct engine_runner run = {.ctx = &f, .n_vocab = SIM_V, .forward = fake_forward};
    vllmc_engine *e = NULL;
    CHECK(engine_create(&run, &c, NULL, false, &e) == VLLMC_OK);
    int32_t p[80] = {0};
    vllmc_request *r = NULL;
    CHECK(vllmc_engine_submit(e, p, 64, NULL, NULL, NULL, &r) == VLLMC_ERR_INVALID && r == NULL);
    CHECK(strstr(vllmc_last_error(), "max_model_len 64") != NULL);
    CHECK(vllmc_engine_submit(e, p, 0, NULL, NULL, NULL, &r) == VLLMC_ERR_INVALID);
    p[3] = SIM_V;
    CHECK(vllmc_engine_submit(e, p, 10, NULL, NULL, NULL, &r) == VLLMC_ERR_INVALID);
    p[3] = 1;
    const char *stop = "x";
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.stop = &stop;
    sp.n_stop = 1;
    CHECK(vllmc_engine_submit(e, p, 10, &sp, NULL, NULL, &r) == VLLMC_ERR_INVALID); /* no tokenizer */
    vllmc_sampling_params_default(&sp);
    sp.temperature = -1.0f;
    CHECK(vllmc_engine_submit(e, p, 10, &sp, NULL, NULL, &r) == VLLMC_ERR_INVALID);
    CHECK(vllmc_engine_submit(e, p, 63, NULL, NULL, NULL, &r) == VLLMC_OK);
    vllmc_request_release(r); /* released unfinished: aborted at the next step */
    engine_step(e);
    CHECK(engine_check(e) == VLLMC_OK);
    vllmc_engine_stats s;
    vllmc_engine_get_stats(e, &s);
    CHECK(s.running == 0 && s.waiting == 0 && s.requests_finished == 1);
    /* a pool smaller than one max_model_len request is refused with numbers */
    vllmc_engine *e2 = NULL;
    c.n_blocks = 3;
    CHECK(engine_create(&run, &c, NULL, false, &e2) == VLLMC_ERR_INVALID && strstr(vllmc_last_error(), "3 blocks"));
    vllmc_engine_destroy(e);
    free(f.kvtok);
}

/* The engine thread with several client threads submitting and reading at once. */
struct client_arg { vllmc_engine *e; int id; int ok; };
static void *client_main(void *p) {
    struct client_arg *a = p;
    a->ok = 1;
    for (int k = 0; k < 20; k++) {
        struct sim_req q;
        memset(&q, 0, sizeof(q));
        uint64_t s = (uint64_t)a->id * 1000 + (uint64_t)k;
        q.n_prompt = 1 + (int32_t)(s * 7 % 90);
        for (int32_t j = 0; j < q.n_prompt; j++) q.prompt[j] = (int32_t)((s * 31 + (uint64_t)j * 17) % SIM_V);
        vllmc_sampling_params_default(&q.sp);
        q.sp.max_tokens = 1 + (int32_t)(s % 40);
        sim_expect(&q, SIM_L);
        if (vllmc_engine_submit(a->e, q.prompt, q.n_prompt, &q.sp, NULL, NULL, &q.h)) { a->ok = 0; return NULL; }
        while (q.h) {
            vllmc_output o;
            vllmc_request_next(q.h, -1, &o);
            for (int32_t i = 0; i < o.n_tokens && q.n_got < SIM_L; i++) q.got[q.n_got++] = o.tokens[i];
            if (o.finish) { q.fin = o.finish; vllmc_request_release(q.h); q.h = NULL; }
        }
        if (q.n_got != q.n_expect || q.fin != q.expect_fin || memcmp(q.got, q.expect, (size_t)q.n_got * sizeof(int32_t))) a->ok = 0;
    }
    return NULL;
}

static void test_threaded(void) {
    struct engine_config c = {.max_model_len = SIM_L, .max_num_seqs = 4, .max_num_batched_tokens = 32, .n_blocks = 24,
                              .prefix_caching = true, .seed = 3};
    struct fake f = {.n_blocks = c.n_blocks};
    f.kvtok = calloc((size_t)c.n_blocks * 16, sizeof(int32_t));
    const int32_t eos = SIM_EOS;
    struct engine_runner run = {.ctx = &f, .n_vocab = SIM_V, .eos_ids = &eos, .n_eos_ids = 1, .forward = fake_forward};
    vllmc_engine *e = NULL;
    CHECK(engine_create(&run, &c, NULL, true, &e) == VLLMC_OK);
    pthread_t th[4];
    struct client_arg ca[4];
    for (int i = 0; i < 4; i++) { ca[i] = (struct client_arg){e, i, 0}; pthread_create(&th[i], NULL, client_main, &ca[i]); }
    for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); CHECK_MSG(ca[i].ok, "client thread %d", i); }
    vllmc_engine_wait_idle(e);
    /* a request left running when the engine is destroyed finishes with ABORT and stays readable */
    int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    vllmc_sampling_params sp;
    vllmc_sampling_params_default(&sp);
    sp.ignore_eos = 1;
    vllmc_request *r = NULL;
    CHECK(vllmc_engine_submit(e, p, 8, &sp, NULL, NULL, &r) == VLLMC_OK);
    vllmc_engine_destroy(e);
    vllmc_output o;
    int32_t n = 0;
    do { vllmc_request_next(r, -1, &o); n += o.n_tokens; } while (!o.finish);
    CHECK(o.finish == VLLMC_FINISH_ABORT || o.finish == VLLMC_FINISH_LENGTH);
    vllmc_request_release(r);
    CHECK(f.errors == 0);
    free(f.kvtok);
}


/* Sampled (temperature > 0) requests: a request's stream depends only on its seed and history, so it is
 * the same run alone in a roomy engine as among many under preemption (the RNG is not replayed on recompute). */
static void run_sampled(int n, int32_t budget, int32_t seqs, int32_t blocks, struct sim_req *reqs, int64_t *preempt) {
    struct engine_config c = {.max_model_len = SIM_L, .max_num_seqs = seqs, .max_num_batched_tokens = budget, .n_blocks = blocks,
                              .prefix_caching = true, .seed = 99};
    struct fake f = {.n_blocks = blocks};
    f.kvtok = calloc((size_t)blocks * 16, sizeof(int32_t));
    const int32_t eos = SIM_EOS;
    struct engine_runner run = {.ctx = &f, .n_vocab = SIM_V, .eos_ids = &eos, .n_eos_ids = 1, .forward = fake_forward};
    vllmc_engine *e = NULL;
    CHECK(engine_create(&run, &c, NULL, false, &e) == VLLMC_OK);
    for (int i = 0; i < n; i++) {
        reqs[i].n_got = 0;
        reqs[i].n_finish_seen = 0;
        CHECK(vllmc_engine_submit(e, reqs[i].prompt, reqs[i].n_prompt, &reqs[i].sp, NULL, NULL, &reqs[i].h) == VLLMC_OK);
    }
    for (int left = n; left > 0;) {
        engine_step(e);
        CHECK(engine_check(e) == VLLMC_OK);
        left = 0;
        for (int i = 0; i < n; i++) { sim_poll(&reqs[i]); left += reqs[i].h != NULL; }
    }
    vllmc_engine_stats st;
    vllmc_engine_get_stats(e, &st);
    *preempt = st.preemptions;
    vllmc_engine_destroy(e);
    free(f.kvtok);
}

static void test_sampled_preemption(void) {
    enum { N = 24 };
    static struct sim_req a[N], b[N];
    for (int i = 0; i < N; i++) {
        memset(&a[i], 0, sizeof(a[i]));
        a[i].n_prompt = 1 + (int32_t)rnd(100);
        for (int32_t j = 0; j < a[i].n_prompt; j++) a[i].prompt[j] = (int32_t)rnd(SIM_V);
        vllmc_sampling_params_default(&a[i].sp);
        a[i].sp.temperature = 0.5f + (float)rnd(100) / 100.0f;
        a[i].sp.top_k = (int32_t)rnd(10);
        a[i].sp.seed = (int64_t)rnd(1000);
        a[i].sp.max_tokens = 5 + (int32_t)rnd(50);
        b[i] = a[i];
    }
    int64_t p0 = 0, p1 = 0;
    run_sampled(N, 256, 1, 64, a, &p0);
    run_sampled(N, 16 + (int32_t)rnd(32), 8, 10, b, &p1);
    CHECK_MSG(p0 == 0 && p1 > 0, "sampled: %lld preemptions alone, %lld squeezed", (long long)p0, (long long)p1);
    for (int i = 0; i < N; i++) {
        CHECK(a[i].n_finish_seen == 1 && b[i].n_finish_seen == 1 && a[i].fin == b[i].fin);
        CHECK_MSG(a[i].n_got == b[i].n_got && !memcmp(a[i].got, b[i].got, (size_t)VLLMC_MIN(a[i].n_got, SIM_L) * sizeof(int32_t)),
                  "sampled request %d: alone and under preemption differ", i);
    }
}

int main(void) {
    test_seed_auto("test_engine_sim");
    test_refusals();
    test_prefix_reuse(false, 0);
    test_prefix_reuse(true, 0);
    test_prefix_reuse(true, 4);
    test_threaded();
    test_sampled_preemption();
    const int trials = getenv("VLLMC_SIM_TRIALS") ? atoi(getenv("VLLMC_SIM_TRIALS")) : 2000;
    for (int t = 0; t < trials && test_n_fail < 20; t++) run_trial(t);
    printf("test_engine_sim: %d mixes, %lld requests, %lld steps, %lld preemptions, %lld prefix-hit tokens (%lld on hybrids, "
           "through state snapshots), %lld cancels; %lld mixes with pipelined steps, %lld steps queued on the ids of the one "
           "before\n", trials, (long long)g_reqs, (long long)g_steps, (long long)g_preempt, (long long)g_hits,
           (long long)g_state_hits, (long long)g_cancels, (long long)g_pipe_trials, (long long)g_from_prev);
    CHECK(g_preempt > 0 && g_hits > 0 && g_cancels > 0 && g_state_hits > 0);
    CHECK(trials < 100 || (g_pipe_trials > 0 && g_from_prev > 0));
    return test_finish("test_engine_sim");
}
