/* The CUDA batch's chunk list and the GDN kernels' share of it (src/backend/cuda/gdn_runs.h), on the host, over random
 * batches (runs of 1 .. 200 tokens, 1 .. 80 sequences, positions at 0 or continuing):
 *  - unsplit (min_long 0), the list is the runs in batch order cut into 64-token entries (written plainly here);
 *  - split, entries [0, n_long) are exactly the runs of >= min_long tokens in batch order, and every other run is
 *    one entry of its own;
 *  - what the kernels take: the scan's CTAs (gdn_run_entries, one run a CTA) cover [0, n_long) once, each CTA one
 *    whole run in order; the qk-norm kernel's rows of those entries (gdn_norm_token) and the recurrent kernels' runs
 *    (gdn_run_tokens) cover every token of the batch exactly once; the unsplit walk (n_runs 0) is the whole batch. */
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/gdn_runs.h"
#include "test.h"

#define MAXT 2048
#define MAXS 96

struct rbatch { int32_t n_tokens, n_seqs, seq[MAXT], pos[MAXT], slot[MAXS]; };

/* Random runs; dup: a sequence may come back for a second run (runs not unique). */
static void rbatch_make(struct rbatch *b, bool dup) {
    memset(b, 0, sizeof(*b));
    b->n_seqs = 1 + (int32_t)(test_rand_u64() % 80);
    for (int32_t s = 0; s < b->n_seqs; s++) b->slot[s] = (int32_t)(test_rand_u64() % 200);
    int32_t next_pos[MAXS] = {0};
    for (int32_t s = 0; s < b->n_seqs; s++) next_pos[s] = test_rand_u64() % 2 ? (int32_t)(test_rand_u64() % 500) : 0;
    int32_t s = 0;
    while (s < b->n_seqs && b->n_tokens < MAXT) {
        const int kind = (int)(test_rand_u64() % 4); /* decode token, short run, long run */
        int32_t len = kind < 2 ? 1 : kind == 2 ? 2 + (int32_t)(test_rand_u64() % 40) : 30 + (int32_t)(test_rand_u64() % 170);
        if (len > MAXT - b->n_tokens) len = MAXT - b->n_tokens;
        for (int32_t i = 0; i < len; i++, b->n_tokens++) {
            b->seq[b->n_tokens] = s;
            b->pos[b->n_tokens] = next_pos[s]++;
        }
        if (!(dup && test_rand_u64() % 5 == 0)) s++; /* the same sequence again after another (below) */
        else if (s + 1 < b->n_seqs) {
            const int32_t t = b->n_tokens; /* one token of s + 1, then s again */
            if (t < MAXT) { b->seq[t] = s + 1; b->pos[t] = next_pos[s + 1]++; b->n_tokens++; }
        }
    }
}

/* The list as batch order makes it, written plainly. */
static int32_t plain_list(const struct rbatch *b, int32_t *out) {
    int32_t n = 0;
    for (int32_t t0 = 0; t0 < b->n_tokens;) {
        int32_t t1 = t0;
        while (t1 < b->n_tokens && b->seq[t1] == b->seq[t0]) t1++;
        for (int32_t q = t0; q < t1; q += 64, n++) {
            const int32_t e[8] = {q, t1 - q < 64 ? t1 - q : 64, b->slot[b->seq[t0]], b->pos[t0] == 0, t0, t1 - t0, q == t0, q + 64 >= t1};
            memcpy(out + 8 * n, e, sizeof(e));
        }
        t0 = t1;
    }
    return n;
}

static int32_t out[8 * MAXT], ref[8 * MAXT], cover[MAXT];

static void check_batch(const struct rbatch *b, int32_t min_long, int *n_split, int *n_runs_checked) {
    uint8_t seen[MAXS];
    struct gdn_chunk_info info;
    gdn_chunk_list(b->seq, b->pos, b->n_tokens, b->slot, b->n_seqs, min_long, out, seen, &info);
    const int32_t nref = plain_list(b, ref);
    CHECK(info.n_entries == nref);
    if (!info.split) { /* the plain list, entry for entry */
        CHECK_MSG(info.n_entries == nref && !memcmp(out, ref, (size_t)nref * 32), "min_long %d: unsplit list differs", min_long);
        CHECK(info.n_long == 0 && info.n_long_runs == 0);
    } else {
        (*n_split)++;
        CHECK(min_long > 0 && info.unique && info.max_run >= min_long);
        /* [0, n_long): the long runs of the plain list in order; then the short ones in order, one entry each */
        int32_t k = 0, runs = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int32_t i = 0; i < nref; i++) {
                const int32_t *e = ref + 8 * i;
                if ((e[CU_CH_RUNLEN] >= min_long) != (pass == 0)) continue;
                CHECK_MSG(!memcmp(out + 8 * k, e, 32), "split list entry %d differs", k);
                if (pass == 0 && e[CU_CH_FIRST]) runs++;
                if (pass == 1) CHECK(e[CU_CH_FIRST] && e[CU_CH_LAST] && e[CU_CH_N] == e[CU_CH_RUNLEN]);
                k++;
                if (pass == 0) CHECK(k <= info.n_long);
            }
        CHECK(k == info.n_entries);
        CHECK(runs == info.n_long_runs);
    }
    /* the kernels' shares: the chunked side (split: [0, n_long), one run a CTA), the recurrent side (the rest, one
     * run a CTA, or the whole batch walked once) */
    memset(cover, 0, sizeof(cover));
    const int32_t ch_hi = info.split ? info.n_long : 0;
    int32_t next = 0;
    for (int32_t z = 0; z <= info.n_long_runs; z++) {
        int32_t lo, hi;
        gdn_run_entries(out, ch_hi, z, &lo, &hi);
        if (z == info.n_long_runs) { CHECK(lo == hi || hi == 0); break; }
        CHECK_MSG(lo == next && hi > lo, "scan CTA %d: entries [%d, %d), expected from %d", z, lo, hi, next);
        CHECK(out[8 * lo + CU_CH_FIRST] && out[8 * (hi - 1) + CU_CH_LAST]);
        for (int32_t i = lo; i < hi; i++) {
            const int32_t *e = out + 8 * i;
            CHECK(e[CU_CH_RUN0] == out[8 * lo + CU_CH_RUN0] && e[CU_CH_SLOT] == out[8 * lo + CU_CH_SLOT]);
            if (i > lo) CHECK(e[CU_CH_T0] == out[8 * (i - 1) + CU_CH_T0] + 64);
        }
        next = hi;
    }
    CHECK(next == ch_hi);
    /* the qk-norm kernel's CTA rows over the chunked entries: the long runs' tokens once each */
    if (ch_hi > 0)
        for (int32_t bx = 0; bx < 64 * ch_hi; bx++) {
            int32_t t;
            if (gdn_norm_token(out, ch_hi, bx, &t)) {
                CHECK(t >= 0 && t < b->n_tokens);
                if (t >= 0 && t < b->n_tokens) cover[t]++;
            }
        }
    else {
        int32_t t = -1;
        CHECK(gdn_norm_token(out, 0, 7, &t) && t == 7);
    }
    const bool runs_mode = info.split ? info.n_entries > info.n_long : info.unique && info.max_run <= CU_GDN_CHUNK;
    const int32_t run_lo = info.split ? info.n_long : 0, n_runs = runs_mode ? info.n_entries - run_lo : 0;
    for (int32_t z = 0; z < (n_runs > 0 ? n_runs : 1); z++) {
        if (info.split && n_runs == 0) break; /* every run chunked */
        int32_t t0, t1;
        gdn_run_tokens(out, run_lo, n_runs, b->n_tokens, z, &t0, &t1);
        for (int32_t t = t0; t < t1; t++) {
            cover[t]++;
            if (n_runs > 0) CHECK(b->seq[t] == b->seq[t0]); /* one run: one state slot */
        }
        (*n_runs_checked) += n_runs > 0;
    }
    int32_t bad = 0;
    for (int32_t t = 0; t < b->n_tokens; t++) bad += cover[t] != 1;
    CHECK_MSG(bad == 0, "min_long %d, split %d: %d of %d tokens not taken exactly once", min_long, info.split, bad, b->n_tokens);
}

int main(void) {
    test_seed_auto("test_gdn_runs");
    static struct rbatch b;
    int n_split = 0, n_runs = 0;
    for (int it = 0; it < 3000; it++) {
        rbatch_make(&b, it % 3 == 2);
        const int32_t mins[4] = {0, 32, 1 + (int32_t)(test_rand_u64() % 64), 64};
        for (int m = 0; m < 4; m++) check_batch(&b, mins[m], &n_split, &n_runs);
    }
    /* a mixed step as the engine makes it: 64 decode tokens, then a 448-token prompt chunk */
    memset(&b, 0, sizeof(b));
    b.n_seqs = 65;
    for (int32_t s = 0; s < 65; s++) b.slot[s] = s;
    for (int32_t s = 0; s < 64; s++) { b.seq[s] = s; b.pos[s] = 100 + s; }
    for (int32_t i = 0; i < 448; i++) { b.seq[64 + i] = 64; b.pos[64 + i] = i; }
    b.n_tokens = 512;
    uint8_t seen[MAXS];
    struct gdn_chunk_info info;
    gdn_chunk_list(b.seq, b.pos, b.n_tokens, b.slot, b.n_seqs, 32, out, seen, &info);
    CHECK(info.split && info.n_long == 7 && info.n_long_runs == 1 && info.n_entries == 71 && info.max_run == 448);
    check_batch(&b, 32, &n_split, &n_runs);
    printf("test_gdn_runs: 12,001 lists, %d split, %d recurrent runs checked\n", n_split, n_runs);
    CHECK(n_split > 1000 && n_runs > 10000);
    return test_finish("test_gdn_runs");
}
