/* The MoE entries sorted by expert, shared by the sort kernel (cuda_moe.cu) and the routing launch that sorts in its
 * own CTA (gemv_q.cu moe_route_sort_kernel), so both give the same perm and groups. */
#ifndef VLLMC_CUDA_MOE_SORT_H
#define VLLMC_CUDA_MOE_SORT_H

#include "backend/cuda/cuda_internal.h"

#define MOE_MAX_EXPERT 1024
#define MOE_SORT_CHUNK 4096

/* The entries (ids[n_ent], experts < E <= 1024) sorted by expert, in entry order within one (stable), into perm, and
 * their groups of up to CU_MOE_GRP entries of one expert into grp ({expert, first, count, 0}; count 0 from the last
 * to gmax). One CTA of at least E threads: counts by shared-memory atomics (integers: the same whatever the order),
 * offsets in expert order, then thread e lists expert e's entries, the ids read a chunk at a time from shared
 * memory (every thread reads the same word: a broadcast). */
static __device__ __forceinline__ void moe_sort_cta(const int32_t *ids, int n_ent, int E, int32_t *perm, int4 *grp, int gmax) {
    __shared__ int cnt[MOE_MAX_EXPERT], off[MOE_MAX_EXPERT], goff[MOE_MAX_EXPERT + 1];
    __shared__ int chunk[MOE_SORT_CHUNK];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_ent; i += blockDim.x) atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, g = 0;
        for (int e = 0; e < E; e++) {
            off[e] = o; goff[e] = g;
            o += cnt[e]; g += (cnt[e] + CU_MOE_GRP - 1) / CU_MOE_GRP;
        }
        goff[E] = g;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        for (int j = 0; j < cnt[e]; j += CU_MOE_GRP)
            grp[goff[e] + j / CU_MOE_GRP] = make_int4(e, off[e] + j, min(CU_MOE_GRP, cnt[e] - j), 0);
    for (int g = goff[E] + threadIdx.x; g < gmax; g += blockDim.x) grp[g] = make_int4(0, 0, 0, 0);
    const int e = (int)threadIdx.x; /* blockDim >= E: one expert a thread */
    int pe = e < E ? off[e] : 0;
    for (int c0 = 0; c0 < n_ent; c0 += MOE_SORT_CHUNK) {
        const int nc = min(MOE_SORT_CHUNK, n_ent - c0);
        __syncthreads();
        for (int i = threadIdx.x; i < nc; i += blockDim.x) chunk[i] = ids[c0 + i];
        __syncthreads();
        if (e < E && cnt[e] > 0) {
#pragma unroll 8
            for (int i = 0; i < nc; i++)
                if (chunk[i] == e) perm[pe++] = c0 + i;
        }
    }
}

#endif
