/* OpenAI-compatible HTTP server (`vllmc serve`).
 * server_api.c: request parsing and validation into plain structs, error objects, the reasoning
 * splitter and small string buffers; no HTTP and no engine, so unit tests and the fuzzer use it alone.
 * server_http.c: libmicrohttpd front end, routing, auth, limits, engine wiring, SSE and metrics. */
#ifndef VLLMC_SERVER_H
#define VLLMC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "vllmc.h"

#define SRV_MAX_BODY_DEFAULT (16u << 20) /* request body limit (413 above) */
#define SRV_MAX_PROMPTS 256              /* prompts in one completions request */
#define SRV_MAX_N 64                     /* choices per prompt */
#define SRV_MAX_CHOICES 256              /* prompts x n */
#define SRV_MAX_PROMPT_IDS (1 << 22)     /* token ids in one prompt given as ids */

/* A growable byte buffer; p is always NUL-terminated once anything was added. */
struct sbuf { char *p; size_t n, cap; bool oom; };
void sbuf_add(struct sbuf *b, const char *s, size_t n);
void sbuf_adds(struct sbuf *b, const char *s);
void sbuf_free(struct sbuf *b);

/* An error for the client: HTTP status and the OpenAI error object's fields. */
struct srv_error {
    int http;         /* 400, 401, 404, 405, 413, 429, 500, 503 */
    char param[64];   /* "" -> null */
    char message[512];
};
void srv_error_set(struct srv_error *e, int http, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error":{"message","type","param","code"}}, malloc'd, NULL on OOM. type follows the status
 * (BadRequestError, AuthenticationError, NotFoundError, ...), code is the status number. */
char *srv_error_json(const struct srv_error *e);
const char *srv_error_type(int http);

enum srv_endpoint { SRV_EP_COMPLETIONS = 0, SRV_EP_CHAT = 1 };

/* One completions prompt: text (tokenized by the server) or token ids. */
struct srv_prompt { char *text; size_t text_len; int32_t *ids; int32_t n_ids; };

struct srv_request {
    enum srv_endpoint ep;
    char *model;                       /* NULL if not given */
    struct srv_prompt *prompts;        /* completions: n_prompts >= 1 */
    int n_prompts;
    cJSON *messages;                   /* chat: normalised copy (content flattened to a string) */
    cJSON *tools;                      /* chat: copy or NULL */
    bool parse_tool_calls;             /* chat: tools given and tool_choice is not "none" */
    cJSON *template_kwargs;            /* chat: chat_template_kwargs copy or NULL */
    bool add_generation_prompt;        /* chat, default true */
    bool echo;                         /* completions: prepend the prompt text */
    int32_t max_tokens;                /* -1: not given */
    int n;                             /* choices per prompt, >= 1 */
    bool stream, include_usage;
    bool continuous_usage;             /* stream_options.continuous_usage_stats (with include_usage): usage in every chunk */
    int logprobs;                      /* -1: none; else number of top alternatives (0..20) */
    bool skip_special_tokens;
    vllmc_logit_bias *logit_bias;      /* [n_logit_bias] (ids checked against the vocabulary later); sp points here */
    int32_t n_logit_bias;
    vllmc_sampling_params sp;          /* stop / stop_ids point into this struct */
    char *stop[VLLMC_MAX_STOP_STRINGS];
    const char *stop_ptr[VLLMC_MAX_STOP_STRINGS];
    int32_t stop_ids[VLLMC_MAX_STOP_IDS];
};

/* Parse and validate a request body (data, size: any bytes). On failure fills err (400 with the
 * offending param) and returns VLLMC_ERR_INVALID (or VLLMC_ERR_OOM, err 500); out is then empty.
 * Unknown fields are ignored. Token-id ranges and lengths against the context are checked later. */
vllmc_status srv_request_parse(enum srv_endpoint ep, const char *data, size_t size, struct srv_request *out,
                               struct srv_error *err);
void srv_request_free(struct srv_request *r);

/* Splits a thinking model's output into reasoning and answer: text between <think> and </think>
 * (the opening tag may be in the prompt already) is reasoning, the rest content. Tags split across
 * feeds are held back until they are decided. */
struct srv_think {
    int state;      /* 0: the output may still open with <think>, 1: in reasoning, 2: content */
    char hold[16];
    size_t n_hold;
};
void srv_think_init(struct srv_think *t, bool in_reasoning);
void srv_think_feed(struct srv_think *t, const char *s, size_t n, struct sbuf *reasoning, struct sbuf *content);
void srv_think_flush(struct srv_think *t, struct sbuf *reasoning, struct sbuf *content);
/* Whether a rendered chat prompt leaves the model inside a <think> block (ends with "<think>" and
 * optional whitespace). */
bool srv_prompt_opens_think(const char *prompt, size_t len);

/* Hermes / Qwen tool calls in chat output (server_tools.c): "<tool_call>" JSON "</tool_call>" blocks whose
 * JSON is an object with a non-empty string "name" become calls (arguments kept as JSON text); all other
 * text, malformed and unclosed blocks included, is content, byte for byte. Fed in any pieces it gives
 * what one feed gives; a possible tag start or an open block is held until decided or flushed. */
struct srv_tool_call { char *name, *arguments; };
struct srv_tools {
    struct srv_tool_call *calls;
    int n_calls, cap_calls;
    struct sbuf hold;
    bool in_block, oom;
};
void srv_tools_init(struct srv_tools *t);
void srv_tools_feed(struct srv_tools *t, const char *s, size_t n, struct sbuf *content);
void srv_tools_flush(struct srv_tools *t, struct sbuf *content);
void srv_tools_free(struct srv_tools *t);

/* Server options (cmd_serve fills them from flags). */
struct srv_opts {
    const char *model_path;
    const char *host;
    int port;
    const char *api_key;            /* NULL: no auth */
    const char *served_model_name;  /* NULL: the model path */
    const char *chat_template_path; /* NULL: the GGUF's tokenizer.chat_template */
    int reasoning;                  /* -1 auto (template mentions <think>), 0 off, 1 on */
    size_t max_body;
    int max_pending;                /* HTTP requests in flight before 429 */
    int timeout_s;                  /* idle connection timeout */
    bool log_requests;
    vllmc_engine_opts eng;
};
void srv_opts_default(struct srv_opts *o);
/* Runs until SIGINT/SIGTERM (which must be blocked in every thread before this is called; the
 * caller's thread waits for them), then drains in-flight requests and returns the exit status. */
int srv_run(const struct srv_opts *o);

#endif
