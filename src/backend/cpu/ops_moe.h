/* Mixture-of-experts ops on the CPU (qwen35moe; ARCH-QWEN35.md 4.7): the router (softmax over all
 * experts, top-k, renormalization) and the MoE FFN op of the backend table, which runs the selected
 * experts' SwiGLU FFNs straight from the 3-D expert tensors (expert e's matrix is slab e) plus the shared
 * expert with its sigmoid gate. Result per row: sum over the selected experts in selection order
 * (descending probability), then + the shared expert. */
#ifndef VLLMC_OPS_MOE_H
#define VLLMC_OPS_MOE_H

#include <stdbool.h>
#include <stdint.h>
#include "backend/backend.h"

/* One row of router logits [n_expert] -> the k selected expert ids (descending probability, ties to
 * the lower id) and their weights: softmax probabilities, renormalized to sum 1 when norm is set
 * (the sum clamped to >= 6.103515625e-5 as llama.cpp does). 1 <= k <= n_expert. */
void moe_route(const float *logits, int n_expert, int k, bool norm, int32_t *ids, float *weights);

/* The backend op (struct backend_ops.moe) for the CPU backends (threaded when the backend has a pool). */
vllmc_status cpu_moe(struct backend *be, const struct bk_act *in, const struct bk_moe_weights *w,
                     const struct bk_moe_params *p, float *out);

#endif
