/* Quantization type mix: which ggml type each tensor of a model gets for a target file type, following
 * llama-quantize's rules (GGUF-QUANTS.md section 6, ARCH-QWEN35.md 3.5), and the whole-model driver
 * (quantize_model.c) that applies it. The policy is pure: it looks only at names, shapes, the current
 * types and a few hyper-parameters, so it is testable without any tensor data.
 * Invariant: qmix_assign_types must see the tensors in llama.cpp's processing order (qmix_name_cmp),
 * because the attn_v-like and ffn_down counters advance in that order. */
#ifndef VLLMC_QMIX_H
#define VLLMC_QMIX_H

#include <stdbool.h>
#include <stdint.h>
#include "common/common.h"

/* llama_ftype values (stored as general.file_type). */
enum qmix_ftype {
    QMIX_FTYPE_ALL_F32 = 0, QMIX_FTYPE_F16 = 1, QMIX_FTYPE_Q4_0 = 2, QMIX_FTYPE_Q4_1 = 3,
    QMIX_FTYPE_Q8_0 = 7, QMIX_FTYPE_Q5_0 = 8, QMIX_FTYPE_Q5_1 = 9, QMIX_FTYPE_Q2_K = 10,
    QMIX_FTYPE_Q3_K_S = 11, QMIX_FTYPE_Q3_K_M = 12, QMIX_FTYPE_Q3_K_L = 13, QMIX_FTYPE_Q4_K_S = 14,
    QMIX_FTYPE_Q4_K_M = 15, QMIX_FTYPE_Q5_K_S = 16, QMIX_FTYPE_Q5_K_M = 17, QMIX_FTYPE_Q6_K = 18,
    QMIX_FTYPE_Q2_K_S = 21, QMIX_FTYPE_BF16 = 32,
};

/* Parse a file type the way llama-quantize does: a name ("Q4_K_M", case-insensitive, also the aliases
 * "Q4_K", "Q5_K", "Q3_K") or an ftype number ("15"). Returns VLLMC_ERR_INVALID (message lists the
 * accepted names) for an unknown or unsupported one. */
vllmc_status qmix_parse_ftype(const char *s, int *ftype);
/* Canonical name of an ftype ("Q4_K_M"), or NULL if not one we produce. */
const char *qmix_ftype_name(int ftype);
/* The default tensor type of an ftype (Q4_K for Q4_K_M ...), or -1. */
int qmix_ftype_default_type(int ftype);
/* Parse a ggml type name ("q6_k", "F16", case-insensitive) or id; VLLMC_ERR_INVALID if unknown or one
 * we cannot produce. */
vllmc_status qmix_parse_ggml_type(const char *s, uint32_t *type);

/* Model facts the rules depend on. */
struct qmix_model {
    const char *arch;   /* general.architecture ("llama", "qwen2", "qwen35", "qwen35moe", "falcon" ...) */
    int n_layer;        /* {arch}.block_count, MTP/NextN layers included */
    int n_expert;       /* {arch}.expert_count, 0 when absent */
    int n_head;         /* attention.head_count of layer 0 (0 when absent) */
    int n_head_kv;      /* attention.head_count_kv of layer 0 (n_head when absent) */
};

/* --tensor-type PATTERN=TYPE: the first pattern found in a tensor's name (regex search, PCRE2 syntax,
 * which agrees with llama.cpp's std::regex for the usual patterns) sets its type; the category rules are
 * skipped for it, the row-length fallback still applies. */
struct qmix_override {
    const char *pattern;
    uint32_t type;
};

struct qmix_params {
    int ftype;                /* enum qmix_ftype */
    const struct qmix_override *overrides; /* optional, n_overrides entries */
    size_t n_overrides;
    int output_type;          /* --output-tensor-type: a ggml type, or -1 */
    int token_embd_type;      /* --token-embedding-type: a ggml type, or -1 */
    bool pure;                /* --pure: every quantizable tensor gets the default type */
    bool leave_output;        /* --leave-output-tensor: output.weight keeps its type */
};

struct qmix_tensor {
    const char *name;   /* NUL-terminated */
    int64_t ne[4];      /* unused dims are 1 */
    uint32_t type;      /* current ggml type */
    uint32_t new_type;  /* out: the type it gets */
    bool quantizable;   /* out: the rules may change its type (tensor_allows_quantization) */
    bool fallback;      /* out: the row length forced a fallback type */
};

/* Number of dimensions as ggml counts them: trailing extents of 1 do not count (minimum 1). */
int qmix_n_dims(const int64_t ne[4]);

/* llama.cpp's tensor processing order: tensors outside "blk.N." first, then by layer number; ties
 * by strcmp of the names. qsort-style result. */
int qmix_name_cmp(const char *a, const char *b);

/* Would llama-quantize ever change this tensor's type? (1-D, norms, routers, conv1d ... are kept.) */
bool qmix_allows_quantization(const struct qmix_params *p, const char *name, const int64_t ne[4]);

/* Choose new_type for every tensor; t[] must be in qmix_name_cmp order and hold the whole model
 * (counters and the tied-embedding test look at all names). Errors (VLLMC_ERR_INVALID / _UNSUPPORTED,
 * message naming the tensor): an MoE tensor without a parsable "blk.N." layer or with N >= n_layer,
 * an ftype we do not support, an explicit type whose block does not divide the row. */
vllmc_status qmix_assign_types(const struct qmix_model *m, const struct qmix_params *p,
                               struct qmix_tensor *t, size_t n);

/* ---- Whole-file driver (quantize_model.c) ---- */

struct qmix_progress {
    uint64_t n_done_bytes, n_total_bytes; /* input bytes of the tensors converted so far / in all */
    double elapsed_s;
};
typedef void (*qmix_progress_fn)(const struct qmix_progress *p, void *user);

struct quantize_opts {
    struct qmix_params params;
    int n_threads;            /* <= 0: all online CPUs */
    bool allow_requantize;    /* dequantize already-quantized inputs instead of refusing */
    qmix_progress_fn progress; /* optional; called from one thread a few times a second */
    void *progress_user;
    bool verbose;             /* log one line per tensor (name, shape, old -> new type) */
    uint64_t mem_limit_bytes; /* converted tensors above this size are staged in a scratch file next to the
                                 output instead of anonymous memory; 0 = half the RAM */
};

struct quantize_stats {
    uint64_t n_tensors, n_quantized, n_fallback;
    uint64_t in_bytes, out_bytes; /* tensor data only */
    double seconds;
};

/* Read in_path, choose the types, convert in parallel and write out_path (through out_path.tmp,
 * renamed at the end; nothing is left behind on failure). Metadata is copied, general.file_type and
 * general.quantization_version (2) are set last, split.* keys dropped, as llama-quantize does.
 * stats may be NULL. */
vllmc_status quantize_model(const char *in_path, const char *out_path, const struct quantize_opts *opts,
                            struct quantize_stats *stats);

#endif
