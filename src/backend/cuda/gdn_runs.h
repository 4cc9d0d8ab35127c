/* The chunk list of a CUDA batch (cu_batch_dev.chunks) and which CTA of the GDN kernels takes which part of it.
 * Plain C, shared by the backend (host), the kernels (device) and tests/test_gdn_runs.c (the host checks).
 *
 * A batch is a sequence of runs (consecutive tokens of one sequence). Each run is cut into entries of at most
 * CU_GDN_CHUNK tokens: {t0, n, state slot, run starts at position 0, run's t0, run's length, first entry of its
 * run, last entry of its run}. The prefill attention takes one entry a CTA in any order; the chunked GDN walks a
 * run's entries in order.
 *
 * Split lists (min_long > 0): a step that mixes decode tokens with a prompt chunk (the engine's usual step under
 * load) has one run a decode sequence. The chunked GDN costs a whole 64-row chunk for a 1-token run, and its scan
 * walks every entry of the batch in one CTA, so a step of 64 decode sequences and a 448-token prompt chunk walked 71
 * chunks in series in each GDN layer. With a split list the runs of at least min_long tokens come first (entries
 * [0, n_long), in batch order, n_long_runs runs) and go to the chunked kernels, whose scan takes one run a CTA;
 * every other run is one entry (min_long <= CU_GDN_CHUNK) and goes to the recurrent kernels, one run a CTA. */
#ifndef VLLMC_GDN_RUNS_H
#define VLLMC_GDN_RUNS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GDN_RUNS_HD __host__ __device__
#else
#define GDN_RUNS_HD
#endif

#define CU_GDN_CHUNK 64
enum { CU_CH_T0 = 0, CU_CH_N, CU_CH_SLOT, CU_CH_ZERO /* run starts at position 0 */, CU_CH_RUN0, CU_CH_RUNLEN,
       CU_CH_FIRST /* first chunk of its run */, CU_CH_LAST, CU_CH_WORDS };

struct gdn_chunk_info {
    int32_t n_entries;   /* entries written (at most n_tokens) */
    int32_t n_long;      /* split: entries [0, n_long) are the runs of >= min_long tokens; else 0 */
    int32_t n_long_runs; /* runs among them */
    int32_t max_run;     /* longest run */
    bool unique;         /* no sequence in two runs */
    bool split;          /* the list is split (min_long > 0, runs unique, some run >= min_long) */
};

static inline void gdn_chunk_emit_run(int32_t *out, int32_t *n, int32_t t0, int32_t t1, int32_t slot, int32_t zero) {
    for (int32_t q = t0; q < t1; q += CU_GDN_CHUNK) {
        int32_t *e = out + (size_t)CU_CH_WORDS * (size_t)(*n)++;
        e[CU_CH_T0] = q;
        e[CU_CH_N] = t1 - q < CU_GDN_CHUNK ? t1 - q : CU_GDN_CHUNK;
        e[CU_CH_SLOT] = slot;
        e[CU_CH_ZERO] = zero;
        e[CU_CH_RUN0] = t0;
        e[CU_CH_RUNLEN] = t1 - t0;
        e[CU_CH_FIRST] = q == t0;
        e[CU_CH_LAST] = q + CU_GDN_CHUNK >= t1;
    }
}

/* The chunk list of a batch: seq_idx[t] (< n_seqs) the sequence of token t, pos[t] its position, slot[s] the state
 * slot of sequence s. min_long 0: the runs in batch order (the list every path reads when the split is off);
 * 1 .. CU_GDN_CHUNK: split as above when the runs are unique and one is at least that long. out: room for n_tokens
 * entries (CU_CH_WORDS words each); seen: n_seqs bytes of scratch. */
static inline void gdn_chunk_list(const int32_t *seq_idx, const int32_t *pos, int32_t n_tokens, const int32_t *slot,
                                  int32_t n_seqs, int32_t min_long, int32_t *out, uint8_t *seen, struct gdn_chunk_info *info) {
    memset(info, 0, sizeof(*info));
    info->unique = true;
    if (n_seqs > 0) memset(seen, 0, (size_t)n_seqs);
    for (int32_t t0 = 0; t0 < n_tokens;) {
        const int32_t s = seq_idx[t0];
        int32_t t1 = t0 + 1;
        while (t1 < n_tokens && seq_idx[t1] == s) t1++;
        if (seen[s]) info->unique = false;
        seen[s] = 1;
        if (t1 - t0 > info->max_run) info->max_run = t1 - t0;
        t0 = t1;
    }
    info->split = min_long > 0 && min_long <= CU_GDN_CHUNK && info->unique && info->max_run >= min_long;
    for (int pass = info->split ? 0 : 1; pass < 2; pass++) { /* split: the long runs, then the others */
        for (int32_t t0 = 0; t0 < n_tokens;) {
            const int32_t s = seq_idx[t0];
            int32_t t1 = t0 + 1;
            while (t1 < n_tokens && seq_idx[t1] == s) t1++;
            const bool is_long = info->split && t1 - t0 >= min_long;
            if (!info->split || is_long == (pass == 0)) {
                gdn_chunk_emit_run(out, &info->n_entries, t0, t1, slot[s], pos[t0] == 0);
                if (is_long) info->n_long_runs++;
            }
            t0 = t1;
        }
        if (pass == 0) info->n_long = info->n_entries;
    }
}

/* The entries [*lo, *hi) of the z-th run among the entries [0, n) (runs in order, each starting at an entry with
 * CU_CH_FIRST): the chunked scan's CTA z of a split list. An empty range when there are not z + 1 runs. */
GDN_RUNS_HD static inline void gdn_run_entries(const int32_t *chunks, int32_t n, int32_t z, int32_t *lo, int32_t *hi) {
    int32_t run = -1;
    *lo = 0;
    *hi = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!chunks[CU_CH_WORDS * i + CU_CH_FIRST]) continue;
        run++;
        if (run == z) *lo = i;
        else if (run == z + 1) { *hi = i; return; }
    }
    if (run >= z) *hi = n;
}

/* The tokens [*t0, *t1) the recurrent kernels' CTA z takes: the whole batch (n_runs 0: one walk, in order), or the
 * run of entry run_lo + z (every such run one entry). */
GDN_RUNS_HD static inline void gdn_run_tokens(const int32_t *chunks, int32_t run_lo, int32_t n_runs, int32_t n_tokens, int32_t z,
                                              int32_t *t0, int32_t *t1) {
    if (n_runs <= 0) { *t0 = 0; *t1 = n_tokens; return; }
    const int32_t *e = chunks + CU_CH_WORDS * (run_lo + z);
    *t0 = e[CU_CH_T0];
    *t1 = e[CU_CH_T0] + e[CU_CH_N];
}

/* The token whose q and k the chunked qk-norm kernel's CTA row bx normalizes: bx itself (ch_hi 0: every token of the
 * batch), or row bx % CU_GDN_CHUNK of entry bx / CU_GDN_CHUNK among the first ch_hi (false past the entry's rows). */
GDN_RUNS_HD static inline bool gdn_norm_token(const int32_t *chunks, int32_t ch_hi, int32_t bx, int32_t *t) {
    if (ch_hi <= 0) { *t = bx; return true; }
    const int32_t *e = chunks + CU_CH_WORDS * (bx / CU_GDN_CHUNK);
    if (bx % CU_GDN_CHUNK >= e[CU_CH_N]) return false;
    *t = e[CU_CH_T0] + bx % CU_GDN_CHUNK;
    return true;
}

#endif
