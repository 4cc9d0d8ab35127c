/* Engine internals shared with tests: the model runner interface (a real model, or a fake backend in
 * tests/test_engine_sim.c), engine creation around a runner, synchronous stepping and the invariant
 * check. The public API is in include/vllmc.h. */
#ifndef VLLMC_ENGINE_H
#define VLLMC_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include "vllmc.h"
#include "backend/backend.h"
#include "tokenizer/tokenizer.h"

/* What the engine needs from a model: one forward step over a batch. logits (host): [b->n_logits][n_vocab]. */
struct engine_runner {
    void *ctx;
    int32_t n_vocab;
    bool has_state;          /* per-sequence recurrent state: running slots 0..max_num_seqs-1, then
                                n_state_snapshots snapshot slots */
    const int32_t *eos_ids;  /* end-of-generation ids when there is no tokenizer (else the tokenizer's) */
    int32_t n_eos_ids;
    vllmc_status (*forward)(void *ctx, const struct bk_batch *b, float *logits);
    /* The same step when every logits row is greedy with nothing applied to the logits: only the argmax of each
     * row comes back (ties to the lowest id), the logits stay on the device. NULL: not offered. */
    vllmc_status (*forward_argmax)(void *ctx, const struct bk_batch *b, int32_t *ids);
    /* forward_argmax draws rows by bk_batch.sample (the sampler without bias or penalties) on the device */
    bool device_sample;
    /* Pipelined steps (all three or none; NULL: not offered). forward_queue queues a forward_argmax step without waiting
     * for its ids; with from_prev its token ids are, row for row, the ids of the step queued before it (taken where the
     * runner has them, the batch's own are placeholders). fetch_ids waits for the oldest queued step and gives its n ids.
     * pipe_off waits for whatever is queued and returns the runner to plain steps (forward / forward_argmax need it off).
     * At most two steps queued. */
    vllmc_status (*forward_queue)(void *ctx, const struct bk_batch *b, bool from_prev);
    vllmc_status (*fetch_ids)(void *ctx, int32_t *ids, int32_t n);
    vllmc_status (*pipe_off)(void *ctx);
    /* Copy recurrent-state slot src to dst (has_state only; NULL: no snapshots, no prefix reuse). */
    vllmc_status (*state_copy)(void *ctx, int32_t src, int32_t dst);
    void (*destroy)(void *ctx); /* called by vllmc_engine_destroy; may be NULL */
};

/* Resolved sizes (no zero defaults here). */
struct engine_config {
    int32_t max_model_len, max_num_seqs, max_num_batched_tokens;
    int32_t n_blocks;
    bool prefix_caching;
    int32_t n_state_snapshots; /* runners with state: snapshot slots for prefix reuse (0: no reuse) */
    uint64_t seed;
    vllmc_device device;       /* reported in the stats */
};

/* tok may be NULL (no text, no stop strings); it must outlive the engine. With start_thread false the
 * caller drives the engine with engine_step (tests). */
vllmc_status engine_create(const struct engine_runner *r, const struct engine_config *c, const struct tokenizer *tok,
                           bool start_thread, vllmc_engine **out);
/* vllmc_engine_create's engine around a model file; with start_thread false the caller steps it (engine_step), so a
 * test fixes the steps' batches: every request submitted before the first step, the schedule the same each run. */
vllmc_status engine_model_create(const char *model_path, const vllmc_engine_opts *opts, bool start_thread, vllmc_engine **out);
/* One step in the calling thread (engines created without a thread). Returns false if there was
 * nothing to run. A forward failure aborts the requests of that step. */
bool engine_step(vllmc_engine *e);
/* Check every KV-block invariant (refcounts equal table references, free queue = unreferenced blocks,
 * index consistent, tables cover computed tokens). VLLMC_ERR_INVALID with a message if one is broken. */
vllmc_status engine_check(vllmc_engine *e);

#endif
