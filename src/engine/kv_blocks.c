/* Paged KV block manager (see kv_blocks.h). */
#include "engine/kv_blocks.h"
#include <stdlib.h>
#include <string.h>

vllmc_status kvb_init(struct kv_blocks *k, int32_t n_blocks) {
    memset(k, 0, sizeof(*k));
    if (n_blocks <= 0) return vllmc_errorf(VLLMC_ERR_INVALID, "KV pool of %d blocks", n_blocks);
    uint32_t nb = 16;
    while (nb < (uint32_t)n_blocks * 2u && nb < (1u << 30)) nb <<= 1;
    k->n_blocks = n_blocks;
    k->bucket_mask = nb - 1;
    size_t n = (size_t)n_blocks;
    k->ref = calloc(n, sizeof(int32_t));
    k->prev = malloc(n * sizeof(int32_t));
    k->next = malloc(n * sizeof(int32_t));
    k->in_free = calloc(n, 1);
    k->hashed = calloc(n, 1);
    k->hash = calloc(n, sizeof(uint64_t));
    k->parent = malloc(n * sizeof(int32_t));
    k->tokens = malloc(n * BK_KV_BLOCK * sizeof(int32_t));
    k->bucket = malloc((size_t)nb * sizeof(int32_t));
    k->bnext = malloc(n * sizeof(int32_t));
    if (!k->ref || !k->prev || !k->next || !k->in_free || !k->hashed || !k->hash || !k->parent || !k->tokens || !k->bucket ||
        !k->bnext) {
        kvb_free(k);
        return vllmc_errorf(VLLMC_ERR_OOM, "KV block manager for %d blocks", n_blocks);
    }
    for (uint32_t i = 0; i < nb; i++) k->bucket[i] = -1;
    for (int32_t i = 0; i < n_blocks; i++) {
        k->prev[i] = i - 1;
        k->next[i] = i + 1 < n_blocks ? i + 1 : -1;
        k->in_free[i] = 1;
        k->parent[i] = -1;
        k->bnext[i] = -1;
    }
    k->free_head = 0;
    k->free_tail = n_blocks - 1;
    k->n_free = n_blocks;
    return VLLMC_OK;
}

void kvb_free(struct kv_blocks *k) {
    free(k->ref); free(k->prev); free(k->next); free(k->in_free); free(k->hashed); free(k->hash);
    free(k->parent); free(k->tokens); free(k->bucket); free(k->bnext);
    memset(k, 0, sizeof(*k));
}

static inline uint64_t kvb_mix(uint64_t h) {
    h ^= h >> 30; h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27; h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

uint64_t kvb_hash_block(uint64_t parent_hash, const int32_t *tokens) {
    uint64_t h = kvb_mix(parent_hash ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < BK_KV_BLOCK; i++) h = kvb_mix(h ^ ((uint64_t)(uint32_t)tokens[i] + ((uint64_t)i << 32)));
    return h;
}

static void kvb_queue_remove(struct kv_blocks *k, int32_t b) {
    VLLMC_ASSERT(k->in_free[b]);
    if (k->prev[b] >= 0) k->next[k->prev[b]] = k->next[b]; else k->free_head = k->next[b];
    if (k->next[b] >= 0) k->prev[k->next[b]] = k->prev[b]; else k->free_tail = k->prev[b];
    k->prev[b] = k->next[b] = -1;
    k->in_free[b] = 0;
    k->n_free--;
}

static void kvb_queue_push_tail(struct kv_blocks *k, int32_t b) {
    VLLMC_ASSERT(!k->in_free[b]);
    k->prev[b] = k->free_tail;
    k->next[b] = -1;
    if (k->free_tail >= 0) k->next[k->free_tail] = b; else k->free_head = b;
    k->free_tail = b;
    k->in_free[b] = 1;
    k->n_free++;
}

static void kvb_unindex(struct kv_blocks *k, int32_t b) {
    if (!k->hashed[b]) return;
    int32_t *pp = &k->bucket[k->hash[b] & k->bucket_mask];
    while (*pp != b) {
        VLLMC_ASSERT(*pp >= 0);
        pp = &k->bnext[*pp];
    }
    *pp = k->bnext[b];
    k->bnext[b] = -1;
    k->hashed[b] = 0;
    k->n_hashed--;
}

int32_t kvb_alloc(struct kv_blocks *k) {
    int32_t b = k->free_head;
    if (b < 0) return -1;
    kvb_queue_remove(k, b);
    if (k->hashed[b]) { kvb_unindex(k, b); k->n_evicted++; }
    VLLMC_ASSERT(k->ref[b] == 0);
    k->ref[b] = 1;
    return b;
}

void kvb_ref(struct kv_blocks *k, int32_t b) {
    VLLMC_ASSERT(b >= 0 && b < k->n_blocks);
    if (k->ref[b] == 0) kvb_queue_remove(k, b);
    k->ref[b]++;
}

void kvb_release_seq(struct kv_blocks *k, const int32_t *blocks, int32_t n) {
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t b = blocks[i];
        VLLMC_ASSERT(b >= 0 && b < k->n_blocks && k->ref[b] > 0);
        if (--k->ref[b] == 0) kvb_queue_push_tail(k, b);
    }
}

int32_t kvb_lookup(const struct kv_blocks *k, uint64_t hash, const int32_t *tokens, int32_t parent) {
    for (int32_t b = k->bucket[hash & k->bucket_mask]; b >= 0; b = k->bnext[b])
        if (k->hash[b] == hash && k->parent[b] == parent &&
            !memcmp(k->tokens + (size_t)b * BK_KV_BLOCK, tokens, BK_KV_BLOCK * sizeof(int32_t)))
            return b;
    return -1;
}

void kvb_insert(struct kv_blocks *k, int32_t b, uint64_t hash, const int32_t *tokens, int32_t parent) {
    if (k->hashed[b] || kvb_lookup(k, hash, tokens, parent) >= 0) return;
    k->hashed[b] = 1;
    k->hash[b] = hash;
    k->parent[b] = parent;
    memcpy(k->tokens + (size_t)b * BK_KV_BLOCK, tokens, BK_KV_BLOCK * sizeof(int32_t));
    uint32_t i = (uint32_t)(hash & k->bucket_mask);
    k->bnext[b] = k->bucket[i];
    k->bucket[i] = b;
    k->n_hashed++;
}
