/* Paged KV block manager: a pool of fixed-size blocks (BK_KV_BLOCK tokens), per-block refcounts,
 * one free queue that is also the LRU order of cached blocks, and the prefix-cache index.
 *
 * A block is in exactly one of three states:
 *   in use      ref > 0, not in the free queue (possibly cached: shared by several sequences);
 *   free+cached ref == 0, in the free queue, still indexed by its hash (a later request may revive it);
 *   free        ref == 0, in the free queue, not indexed.
 * kvb_alloc pops the head of the free queue (the least recently freed block) and drops its index
 * entry if it had one: that is the LRU eviction of cached blocks. kvb_release_seq appends a
 * sequence's blocks to the tail in reverse order, so a prefix's later blocks are evicted before its
 * earlier ones (an earlier block is worth more: every longer match needs it).
 *
 * Prefix-cache key of a full block: hash = H(parent hash, the block's BK_KV_BLOCK token ids). A lookup
 * matches only if the 64-bit hash, the block's own token ids (compared exactly) and the parent block id
 * all agree, so a false match needs a 64-bit hash collision within the prefix chain.
 * Everything is allocated at creation; no operation allocates. Not thread-safe (the engine thread owns it). */
#ifndef VLLMC_ENGINE_KV_BLOCKS_H
#define VLLMC_ENGINE_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include "backend/backend.h"
#include "common/common.h"

struct kv_blocks {
    int32_t n_blocks;
    int32_t *ref;            /* [n_blocks] */
    int32_t *prev, *next;    /* free queue links, -1 = none */
    uint8_t *in_free;        /* [n_blocks] */
    int32_t free_head, free_tail, n_free;
    /* prefix index */
    uint8_t *hashed;         /* [n_blocks] */
    uint64_t *hash;          /* [n_blocks] */
    int32_t *parent;         /* [n_blocks] parent block id (-1 for the first block of a sequence) */
    int32_t *tokens;         /* [n_blocks][BK_KV_BLOCK] */
    int32_t *bucket;         /* [n_buckets] head block id, -1 */
    int32_t *bnext;          /* [n_blocks] next block in the same bucket */
    uint32_t bucket_mask;
    int32_t n_hashed;
    int64_t n_evicted;       /* cached blocks dropped by kvb_alloc */
};

vllmc_status kvb_init(struct kv_blocks *k, int32_t n_blocks);
void kvb_free(struct kv_blocks *k);

/* Chain hash of one full block. parent_hash of the first block: KVB_ROOT_HASH. */
#define KVB_ROOT_HASH 0x6a09e667f3bcc909ull
uint64_t kvb_hash_block(uint64_t parent_hash, const int32_t *tokens);

/* Take a block from the free queue head (ref becomes 1); -1 if none. Evicts its cache entry. */
int32_t kvb_alloc(struct kv_blocks *k);
/* One more reference to a block (a prefix-cache hit); revives a free+cached block. */
void kvb_ref(struct kv_blocks *k, int32_t b);
/* Drop one reference to each of blocks[0..n), last first; blocks reaching 0 go to the free queue tail. */
void kvb_release_seq(struct kv_blocks *k, const int32_t *blocks, int32_t n);
/* The cached block for (hash, tokens, parent), or -1. */
int32_t kvb_lookup(const struct kv_blocks *k, uint64_t hash, const int32_t *tokens, int32_t parent);
/* Index block b (full, computed) under (hash, tokens, parent) unless b is already indexed or another
 * block holds the same key. */
void kvb_insert(struct kv_blocks *k, int32_t b, uint64_t hash, const int32_t *tokens, int32_t parent);

#endif
