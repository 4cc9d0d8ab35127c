/* vllmc.h: the one public C API of vllm.c.
 * Every function returns a vllmc_status; on failure vllmc_last_error() names the problem.
 * Handles are opaque; whoever creates one destroys it. */
#ifndef VLLMC_H
#define VLLMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VLLMC_VERSION "0.1.0"

typedef enum {
    VLLMC_OK = 0,
    VLLMC_ERR_INVALID = -1,     /* bad argument, flag or request */
    VLLMC_ERR_CORRUPT = -2,     /* bad file contents */
    VLLMC_ERR_OOM = -3,         /* out of host or device memory */
    VLLMC_ERR_UNSUPPORTED = -4, /* valid, but not implemented here */
    VLLMC_ERR_IO = -5,          /* open/read/mmap failed */
} vllmc_status;

const char *vllmc_status_str(vllmc_status s);

/* The message of the last error raised on this thread ("" if none). Valid until the next
 * failing call on the same thread. */
const char *vllmc_last_error(void);

typedef enum { VLLMC_LOG_DEBUG = 0, VLLMC_LOG_INFO = 1, VLLMC_LOG_WARN = 2, VLLMC_LOG_ERROR = 3 } vllmc_log_level;
typedef void (*vllmc_log_fn)(vllmc_log_level level, const char *msg, void *user);

/* Redirect all library output; NULL restores the default (stderr, INFO and above). */
void vllmc_log_set(vllmc_log_fn fn, void *user);
void vllmc_log_set_level(vllmc_log_level min_level);

/* =============================================================================================
 * Engine: continuous batching over a paged KV cache (see docs/DESIGN.md).
 *
 * One engine owns one model. vllmc_engine_create loads it, plans memory (weights, activations, KV
 * pool, recurrent-state slots; refused with numbers if it cannot fit), and starts the engine thread,
 * the only thread that touches model state. Any thread may submit, read, cancel and release requests:
 * submission goes through a mutex-protected queue, and each request's output goes to its own queue
 * that the engine thread appends to without ever waiting for the reader.
 *
 * Life of a request: vllmc_engine_submit -> vllmc_request_next (repeat until finish != NONE)
 * -> vllmc_request_release. vllmc_request_cancel ends it early (finish ABORT). Releasing an unfinished
 * request cancels it. Handles stay valid until released, even after vllmc_engine_destroy.
 * ============================================================================================= */
typedef struct vllmc_engine vllmc_engine;
typedef struct vllmc_request vllmc_request;

typedef enum { VLLMC_KV_F16 = 0, VLLMC_KV_F32 = 1, VLLMC_KV_BF16 = 2, VLLMC_KV_FP8_E4M3 = 3 } vllmc_kv_dtype;
/* The element type of a hybrid model's Gated DeltaNet state (vLLM's --mamba-ssm-cache-dtype): F32 (default) or
 * BF16 (half the state memory and its traffic; the state is rounded once a step per sequence). */
typedef enum { VLLMC_SSM_F32 = 0, VLLMC_SSM_BF16 = 1 } vllmc_ssm_dtype;
/* Where the model runs. AUTO: the GPU when the library was built with CUDA (or HIP) and a device is
 * present, else the CPU. */
typedef enum { VLLMC_DEVICE_AUTO = 0, VLLMC_DEVICE_CPU = 1, VLLMC_DEVICE_CUDA = 2 } vllmc_device;

typedef struct {
    int32_t max_model_len;          /* prompt + output tokens per request; 0 = min(model context, 4096) */
    int32_t max_num_seqs;           /* requests running at once; 0 = 16 */
    int32_t max_num_batched_tokens; /* tokens per step (decodes + prefill chunks); 0 = 2048 on the GPU, 512 on the CPU */
    int32_t kv_blocks;              /* > 0: exactly this many KV blocks of 16 tokens */
    uint64_t kv_memory_bytes;       /* kv_blocks == 0: KV pool budget; 0 = enough for max_num_seqs full
                                       requests, at most 4 GiB */
    uint64_t memory_limit_bytes;    /* 0 = none; else weights + activations + KV + state must fit */
    vllmc_kv_dtype kv_dtype;
    int kv_fp8_plain;               /* fp8 KV: 1 = store e4m3(k / scale) as vLLM, without the key shift (0, default;
                                       docs/DESIGN.md "Memory") */
    int enable_prefix_caching;      /* 1 (default) or 0 */
    int32_t state_snapshots;        /* models with recurrent state (qwen35): snapshot slots of the state at block
                                       boundaries, which prefix reuse needs; < 0 = default (max_num_seqs),
                                       0 = no prefix reuse for such models */
    int threads;                    /* CPU threads; <= 0 = all */
    uint64_t seed;                  /* seeds requests that give no seed of their own */
    int print_plan;                 /* log the memory plan at INFO level (default 1) */
    vllmc_device device;            /* default AUTO */
    float gpu_memory_utilization;   /* (0, 1]: weights + activations + KV + state must fit this fraction of the
                                       device's memory (the host's on cpu); with no KV size given the KV pool
                                       takes what is left of it (at most max_num_seqs full requests). 0 = not set */
    int enforce_eager;              /* cuda: run every op as it is called (no CUDA graphs) */
    int batch_invariant;            /* cuda: every op computes a row the same way for any batch, so a request's
                                       tokens do not depend on what runs next to it; off by default on cuda
                                       (it keeps prefill off the GEMM / chunked-GDN / flash paths: >10x slower
                                       prefill); the CPU backend is batch-invariant always */
    vllmc_ssm_dtype mamba_ssm_cache_dtype; /* hybrid models (qwen35): the delta-rule state's type; default F32 */
} vllmc_engine_opts;

void vllmc_engine_opts_default(vllmc_engine_opts *o);
vllmc_status vllmc_engine_create(const char *model_path, const vllmc_engine_opts *opts, vllmc_engine **out);
/* Stops the engine thread; unfinished requests finish with VLLMC_FINISH_ABORT. Accepts NULL. */
void vllmc_engine_destroy(vllmc_engine *e);

#define VLLMC_MAX_STOP_STRINGS 16
#define VLLMC_MAX_STOP_IDS 64
#define VLLMC_MAX_TOP_LOGPROBS 20

/* One OpenAI logit_bias entry: added to the token's raw logit before every other sampling step. */
typedef struct { int32_t id; float bias; } vllmc_logit_bias;

typedef struct {
    float temperature;        /* 0 = greedy, the default here (OpenAI's default is 1: a server sets it) */
    int32_t top_k;            /* <= 0 off */
    float top_p;              /* (0, 1], 1 off */
    float min_p;              /* [0, 1], 0 off */
    float repetition_penalty; /* 1 off */
    float presence_penalty;   /* 0 off */
    float frequency_penalty;  /* 0 off */
    int64_t seed;             /* < 0: derived from the engine seed and the request number */
    int32_t max_tokens;       /* output tokens; <= 0 or more than fit: up to max_model_len - n_prompt */
    int32_t min_tokens;       /* EOS (unless ignored) and stop ids cannot be drawn before this many
                                 output tokens; a completed stop string still ends the request */
    int ignore_eos;
    const int32_t *stop_ids;  int32_t n_stop_ids;        /* <= VLLMC_MAX_STOP_IDS */
    const char *const *stop;  int32_t n_stop;            /* <= VLLMC_MAX_STOP_STRINGS, each <= 256 bytes */
    int32_t logprobs;         /* < 0: none; 0: the sampled token's; n: plus the top n (<= 20). Log-softmax
                                 of the raw logits (before penalties, temperature, filters) */
    const vllmc_logit_bias *logit_bias; int32_t n_logit_bias; /* copied; ids in the vocabulary, biases in
                                 [-100, 100] (greedy too: -100 bans a token, +100 forces it in practice) */
} vllmc_sampling_params;

void vllmc_sampling_params_default(vllmc_sampling_params *p); /* greedy, no limits, no logprobs */

typedef enum {
    VLLMC_FINISH_NONE = 0,   /* still running */
    VLLMC_FINISH_STOP = 1,   /* EOS, a stop id or a stop string */
    VLLMC_FINISH_LENGTH = 2, /* max_tokens or max_model_len reached */
    VLLMC_FINISH_ABORT = 3,  /* cancelled, released, engine destroyed or failed */
} vllmc_finish_reason;
const char *vllmc_finish_reason_str(vllmc_finish_reason r); /* "stop", "length", "abort", NULL for NONE */

typedef struct { int32_t id; float logprob; } vllmc_token_logprob;

/* What vllmc_request_next returns: everything produced since the previous call. Pointers stay valid
 * until the next call on the same request (or its release). */
typedef struct {
    const int32_t *tokens;   int32_t n_tokens;  /* new token ids */
    const char *text;        size_t text_len;   /* new text (UTF-8; stop strings and what follows cut) */
    const float *logprobs;                      /* [n_tokens] logprob of each new token, or NULL */
    const vllmc_token_logprob *top_logprobs;    /* [n_tokens][n_top], or NULL */
    int32_t n_top;
    vllmc_finish_reason finish;                 /* != NONE on the last output of the request */
    int32_t n_prompt_tokens;                    /* prompt length */
    int32_t n_cached_tokens;                    /* prompt tokens reused from the prefix cache (first admission) */
    int32_t n_output_tokens;                    /* output tokens so far */
} vllmc_output;

/* Called on the engine thread after new output is queued (to wake an event loop); must not block
 * and must not call back into the engine except vllmc_request_* readers. May be NULL. */
typedef void (*vllmc_notify_fn)(vllmc_request *r, void *user);

/* Submit a request (prompt ids are copied). Refused with VLLMC_ERR_INVALID (and a message) for an empty
 * or too long prompt (n_prompt + 1 > max_model_len), ids outside the vocabulary or bad parameters. */
vllmc_status vllmc_engine_submit(vllmc_engine *e, const int32_t *prompt, int32_t n_prompt, const vllmc_sampling_params *sp,
                                 vllmc_notify_fn notify, void *user, vllmc_request **out);
/* Wait up to timeout_ms (< 0: forever, 0: poll) for output. VLLMC_OK with n_tokens == 0 and finish ==
 * NONE means nothing new yet. After the output carrying finish != NONE, further calls return it again
 * with nothing new. */
vllmc_status vllmc_request_next(vllmc_request *r, int timeout_ms, vllmc_output *out);
void vllmc_request_cancel(vllmc_request *r);
void vllmc_request_release(vllmc_request *r); /* accepts NULL */

typedef struct {
    int64_t steps;
    int64_t prompt_tokens_computed;  /* prompt positions run through the model (again after a preemption) */
    int64_t prefix_cache_hit_tokens; /* tokens reused from the prefix cache */
    int64_t generated_tokens;
    int64_t preemptions;
    int64_t requests_finished;
    int32_t running, waiting;
    int32_t kv_blocks_total, kv_blocks_free; /* free includes cached-but-unreferenced blocks */
    int32_t kv_blocks_cached;
    int32_t max_model_len, max_num_seqs, max_num_batched_tokens;
    int prefix_caching;              /* effective setting */
    int recurrent_state;             /* the model has recurrent (GDN) state */
    int32_t state_snapshots_total, state_snapshots_used;
    vllmc_device device;             /* CPU or CUDA (never AUTO) */
    int32_t n_vocab;                 /* token ids are below this */
} vllmc_engine_stats;
void vllmc_engine_get_stats(vllmc_engine *e, vllmc_engine_stats *out);
/* Block until no request is waiting or running. */
void vllmc_engine_wait_idle(vllmc_engine *e);

#ifdef __cplusplus
}
#endif
#endif
