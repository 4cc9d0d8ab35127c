/* `vllmc serve`: OpenAI-compatible HTTP front end on libmicrohttpd (one epoll thread) over the engine.
 *
 * Requests never block a thread on the engine: a connection waiting for output is suspended
 * (MHD_suspend_connection) and the engine's per-request notify callback resumes it. Non-streamed
 * requests suspend in the access handler and answer once every choice has finished; streamed requests
 * answer 200 at once with a chunked text/event-stream body whose reader suspends when it has nothing to
 * send. The wake-up state (struct srv_waker) lives in a pool that is only freed at shutdown, so a late
 * notify from an engine request whose connection has gone is harmless. When a connection ends early
 * its unfinished engine requests are released, which cancels them and frees their KV blocks; a watcher
 * thread notices clients that leave while their connection is suspended (watch_main). */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "common/common.h"
#include "gguf/gguf.h"
#include "server/server.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

/* ------------------------------------------------------------------------------------------------ */
/* Metrics                                                                                          */

struct srv_hist { const double *b; int nb; uint64_t cnt[40]; double sum; uint64_t n; };

static const double TTFT_B[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double E2E_B[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                               480.0, 960.0, 1920.0, 7680.0};
static const double TPOT_B[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                                40.0, 80.0};

static const double N_B[] = {1, 2, 5, 10, 20};

static void hist_observe(struct srv_hist *h, double v) {
    for (int i = 0; i < h->nb; i++)
        if (v <= h->b[i]) h->cnt[i]++;
    h->sum += v;
    h->n++;
}

/* ------------------------------------------------------------------------------------------------ */
/* Server state                                                                                     */

struct srv_ctx;
struct srv_waker {
    pthread_mutex_t mu;
    struct MHD_Connection *conn; /* NULL once the request has completed */
    struct srv_ctx *x;           /* its request context, valid while conn is set */
    bool suspended;
    bool cancelled;              /* the watcher found the client gone and cancelled the requests */
    struct srv_waker *next_free, *next_all;
};

struct srv_choice {
    vllmc_request *r;
    int index;
    bool done, role_sent;
    vllmc_finish_reason finish;
    int32_t n_prompt, n_cached, n_out;
    double t_first, t_last;          /* first and latest output (inter-token latency) */
    struct srv_think think;
    bool use_think;
    bool use_tools;                   /* chat with tools: <tool_call> blocks of the content become tool_calls */
    struct srv_tools tools;
    int calls_sent;                   /* streamed: tool calls already sent */
    struct sbuf text, reasoning;      /* non-streamed: everything; streamed: this poll's delta */
    cJSON *lp;                        /* chat: content array; completions: object of four arrays */
    size_t text_off;                  /* completions logprobs text_offset */
    const char *echo; size_t echo_len; /* completions echo: the prompt text to put first */
    struct tokenizer_stream *ts;      /* skip_special_tokens false: own detokenizer keeping special tokens */
    char *ts_buf;
};

enum srv_route { R_NONE, R_HEALTH, R_VERSION, R_MODELS, R_METRICS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_NOTFOUND };

struct srv_ctx {
    enum srv_route route;
    bool post, too_big, running, streaming, sent_done, in_flight, over_limit;
    struct sbuf body;
    struct MHD_Connection *conn;
    struct srv_waker *w;
    struct srv_request req;
    struct srv_choice *ch;
    int n_ch;
    char id[48];
    long long created;
    struct sbuf out;
    size_t out_off;
    double t_start;
    int status;
    struct srv_ctx *prev, *next; /* active list (shutdown cancels) */
};

struct srv {
    struct srv_opts o;
    struct MHD_Daemon *d;
    vllmc_engine *eng;
    atomic_int ready, draining;
    struct gguf_file *gf;
    struct tokenizer *tok;
    struct tmpl *tmpl;
    bool think;
    char bos[128], eos[128];
    const char *name;
    int32_t max_model_len, n_vocab;
    long long started;
    pthread_mutex_t mu; /* everything below */
    int inflight;
    struct srv_ctx *active;
    struct srv_waker *wfree, *wall;
    uint64_t rng;
    uint64_t prompt_tokens, gen_tokens, prefix_queries, prefix_hits, finished[4], http_2xx, http_4xx, http_5xx;
    struct srv_hist ttft, e2e, tpot, itl, decode, prefill, req_prompt, req_gen, params_n, params_max;
    double len_b[40];
    int n_len_b;
};
static struct srv S;

static struct srv_waker *waker_get(struct MHD_Connection *c, struct srv_ctx *x) {
    pthread_mutex_lock(&S.mu);
    struct srv_waker *w = S.wfree;
    if (w) S.wfree = w->next_free;
    else if ((w = calloc(1, sizeof(*w)))) {
        pthread_mutex_init(&w->mu, NULL);
        w->next_all = S.wall;
        S.wall = w;
    }
    pthread_mutex_unlock(&S.mu);
    if (!w) return NULL;
    pthread_mutex_lock(&w->mu);
    w->conn = c;
    w->x = x;
    w->suspended = false;
    w->cancelled = false;
    pthread_mutex_unlock(&w->mu);
    return w;
}

static void waker_put(struct srv_waker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->conn = NULL;
    w->x = NULL;
    w->suspended = false;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&S.mu);
    w->next_free = S.wfree;
    S.wfree = w;
    pthread_mutex_unlock(&S.mu);
}

/* Engine thread: new output for a request of this connection. */
static void on_notify(vllmc_request *r, void *user) {
    (void)r;
    struct srv_waker *w = user;
    pthread_mutex_lock(&w->mu);
    if (w->conn && w->suspended) {
        w->suspended = false;
        MHD_resume_connection(w->conn);
    }
    pthread_mutex_unlock(&w->mu);
}

/* Call with w->mu held. */
static void ctx_suspend(struct srv_ctx *x) {
    x->w->suspended = true;
    MHD_suspend_connection(x->conn);
}

/* ------------------------------------------------------------------------------------------------ */
/* Small helpers                                                                                    */

/* Valid UTF-8 copy of (s, n): bytes that do not form a sequence become U+FFFD. */
static void utf8_clean(struct sbuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && len == 2 && c < 0xC2) ok = false;
        if (ok && len == 3 && ((c == 0xE0 && u[i + 1] < 0xA0) || (c == 0xED && u[i + 1] >= 0xA0))) ok = false;
        if (ok && len == 4 && ((c == 0xF0 && u[i + 1] < 0x90) || c > 0xF4 || (c == 0xF4 && u[i + 1] >= 0x90))) ok = false;
        if (!ok) { sbuf_add(b, "\xEF\xBF\xBD", 3); i++; continue; }
        sbuf_add(b, s + i, len);
        i += len;
    }
    sbuf_add(b, "", 0);
}

static cJSON *add_clean_string(cJSON *o, const char *key, const char *s, size_t n) {
    struct sbuf b = {0};
    utf8_clean(&b, s, n);
    cJSON *v = cJSON_AddStringToObject(o, key, b.p ? b.p : "");
    sbuf_free(&b);
    return v;
}

static enum MHD_Result send_text(struct MHD_Connection *c, struct srv_ctx *x, int status, const char *ctype, char *body, size_t n) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    if (ctype) MHD_add_response_header(resp, "Content-Type", ctype);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (x) x->status = status;
    return r;
}

static enum MHD_Result send_json(struct MHD_Connection *c, struct srv_ctx *x, int status, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return MHD_NO;
    return send_text(c, x, status, "application/json", s, strlen(s));
}

static enum MHD_Result send_error(struct MHD_Connection *c, struct srv_ctx *x, const struct srv_error *e) {
    char *s = srv_error_json(e);
    if (!s) return MHD_NO;
    return send_text(c, x, e->http, "application/json", s, strlen(s));
}

static enum MHD_Result send_err(struct MHD_Connection *c, struct srv_ctx *x, int http, const char *param, const char *msg) {
    struct srv_error e;
    srv_error_set(&e, http, param, "%s", msg);
    return send_error(c, x, &e);
}

static void make_id(char *out, size_t cap, const char *prefix) {
    pthread_mutex_lock(&S.mu);
    uint64_t a = S.rng += 0x9E3779B97F4A7C15ull, b;
    pthread_mutex_unlock(&S.mu);
    a ^= a >> 30; a *= 0xBF58476D1CE4E5B9ull; a ^= a >> 27; a *= 0x94D049BB133111EBull; a ^= a >> 31;
    b = a * 0x2545F4914F6CDD1Dull + 0x632BE59BD9B4E019ull;
    b ^= b >> 29;
    snprintf(out, cap, "%s%016llx%016llx", prefix, (unsigned long long)a, (unsigned long long)b);
}

/* ------------------------------------------------------------------------------------------------ */
/* Prompts                                                                                          */

/* Render the chat template for req's messages. */
static vllmc_status render_chat(const cJSON *messages, const cJSON *tools, const cJSON *kwargs, bool add_gen, char **out,
                                size_t *out_len) {
    if (!S.tmpl) return vllmc_errorf(VLLMC_ERR_INVALID, "the model has no chat template; start the server with --chat-template");
    cJSON *cx = cJSON_CreateObject();
    if (!cx) return vllmc_errorf(VLLMC_ERR_OOM, "chat");
    const cJSON *kv;
    if (kwargs) cJSON_ArrayForEach(kv, kwargs) {
        if (kv->string && strcmp(kv->string, "messages")) cJSON_AddItemToObject(cx, kv->string, cJSON_Duplicate(kv, 1));
    }
    cJSON_AddItemReferenceToObject(cx, "messages", (cJSON *)messages);
    if (!cJSON_GetObjectItemCaseSensitive(cx, "add_generation_prompt")) cJSON_AddBoolToObject(cx, "add_generation_prompt", add_gen);
    if (tools) cJSON_AddItemReferenceToObject(cx, "tools", (cJSON *)tools);
    vllmc_status st = tmpl_apply_chat_defaults(cx, S.bos, S.eos);
    if (!st) st = tmpl_render(S.tmpl, cx, NULL, out, out_len);
    cJSON_Delete(cx);
    return st;
}

static vllmc_status encode(const char *text, size_t len, unsigned flags, int32_t **ids, int32_t *n) {
    size_t nn = 0;
    vllmc_status st = tokenizer_encode_alloc(S.tok, text, len, flags, ids, &nn);
    if (st) return st;
    if (nn > INT32_MAX / 2) { free(*ids); *ids = NULL; return vllmc_errorf(VLLMC_ERR_INVALID, "prompt too long"); }
    *n = (int32_t)nn;
    return VLLMC_OK;
}

/* ------------------------------------------------------------------------------------------------ */
/* Output                                                                                           */

static void add_usage(cJSON *o, const struct srv_ctx *x) {
    int64_t p = 0, g = 0, cached = 0;
    for (int i = 0; i < x->n_ch; i++) {
        if (i % x->req.n == 0) { p += x->ch[i].n_prompt; cached += x->ch[i].n_cached; }
        g += x->ch[i].n_out;
    }
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)p);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(p + g));
    cJSON_AddNumberToObject(u, "completion_tokens", (double)g);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
}

static cJSON *top_entry(int32_t id, float lp, bool chat) {
    size_t n = 0;
    const char *p = tokenizer_piece(S.tok, id, &n);
    if (!p) { p = ""; n = 0; }
    cJSON *e = cJSON_CreateObject();
    add_clean_string(e, "token", p, n);
    cJSON_AddNumberToObject(e, "logprob", lp < -9999.0f ? -9999.0 : (double)lp);
    if (chat) {
        cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
        for (size_t k = 0; k < n; k++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)p[k]));
    }
    return e;
}

/* Append the logprobs of new tokens to ch->lp (created on first use). */
static void add_logprobs(struct srv_choice *ch, const vllmc_output *o, bool chat) {
    if (!o->logprobs || o->n_tokens == 0) return;
    if (!ch->lp) {
        if (chat) ch->lp = cJSON_CreateArray();
        else {
            ch->lp = cJSON_CreateObject();
            cJSON_AddArrayToObject(ch->lp, "tokens");
            cJSON_AddArrayToObject(ch->lp, "token_logprobs");
            cJSON_AddArrayToObject(ch->lp, "top_logprobs");
            cJSON_AddArrayToObject(ch->lp, "text_offset");
        }
        if (!ch->lp) return;
    }
    for (int32_t i = 0; i < o->n_tokens; i++) {
        const int32_t id = o->tokens[i];
        if (chat) {
            cJSON *e = top_entry(id, o->logprobs[i], true);
            cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int32_t k = 0; k < o->n_top && o->top_logprobs; k++) {
                const vllmc_token_logprob *t = &o->top_logprobs[(size_t)i * (size_t)o->n_top + (size_t)k];
                cJSON_AddItemToArray(tops, top_entry(t->id, t->logprob, true));
            }
            cJSON_AddItemToArray(ch->lp, e);
        } else {
            size_t n = 0;
            const char *p = tokenizer_piece(S.tok, id, &n);
            if (!p) { p = ""; n = 0; }
            cJSON *tok = cJSON_CreateObject();
            add_clean_string(tok, "t", p, n);
            cJSON *ts = cJSON_DetachItemFromObject(tok, "t");
            cJSON_Delete(tok);
            cJSON_AddItemToArray(cJSON_GetObjectItem(ch->lp, "tokens"), ts);
            cJSON_AddItemToArray(cJSON_GetObjectItem(ch->lp, "token_logprobs"), cJSON_CreateNumber(o->logprobs[i]));
            cJSON *top = cJSON_CreateObject();
            for (int32_t k = 0; k < o->n_top && o->top_logprobs; k++) {
                const vllmc_token_logprob *t = &o->top_logprobs[(size_t)i * (size_t)o->n_top + (size_t)k];
                size_t tn = 0;
                const char *tp = tokenizer_piece(S.tok, t->id, &tn);
                struct sbuf b = {0};
                utf8_clean(&b, tp ? tp : "", tp ? tn : 0);
                if (b.p && !cJSON_GetObjectItemCaseSensitive(top, b.p)) cJSON_AddNumberToObject(top, b.p, t->logprob);
                sbuf_free(&b);
            }
            cJSON_AddItemToArray(cJSON_GetObjectItem(ch->lp, "top_logprobs"), top);
            cJSON_AddItemToArray(cJSON_GetObjectItem(ch->lp, "text_offset"), cJSON_CreateNumber((double)ch->text_off));
            ch->text_off += n;
        }
    }
}

static void record_finish(const struct srv_ctx *x, const struct srv_choice *ch) {
    double now = vllmc_time_s();
    pthread_mutex_lock(&S.mu);
    S.gen_tokens += (uint64_t)ch->n_out;
    S.finished[ch->finish & 3]++;
    hist_observe(&S.e2e, now - x->t_start);
    if (ch->n_out > 0 && ch->t_first > 0) hist_observe(&S.ttft, ch->t_first - x->t_start);
    if (ch->n_out > 1 && ch->t_first > 0) hist_observe(&S.tpot, (now - ch->t_first) / (ch->n_out - 1));
    if (ch->t_first > 0) {
        hist_observe(&S.prefill, ch->t_first - x->t_start);
        hist_observe(&S.decode, now - ch->t_first);
    }
    hist_observe(&S.req_gen, ch->n_out);
    pthread_mutex_unlock(&S.mu);
}

static cJSON *chunk_head(const struct srv_ctx *x) {
    const bool chat = x->route == R_CHAT;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", x->id);
    cJSON_AddStringToObject(o, "object", chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)x->created);
    cJSON_AddStringToObject(o, "model", S.name);
    return o;
}

static void add_usage(cJSON *o, const struct srv_ctx *x);

static void sse_emit(struct srv_ctx *x, cJSON *o) {
    if (x->req.continuous_usage) add_usage(o, x); /* vLLM's continuous_usage_stats: the counts so far */
    else if (x->req.include_usage) cJSON_AddNullToObject(o, "usage");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) { x->out.oom = true; return; }
    sbuf_adds(&x->out, "data: ");
    sbuf_adds(&x->out, s);
    sbuf_adds(&x->out, "\n\n");
    free(s);
}

/* "tool_calls" once the output held a tool call (and was not aborted), else the engine's reason. */
static const char *choice_finish(const struct srv_choice *ch) {
    if (ch->use_tools && ch->tools.n_calls > 0 && ch->finish != VLLMC_FINISH_ABORT) return "tool_calls";
    return vllmc_finish_reason_str(ch->finish);
}

static cJSON *tool_call_json(const struct srv_tool_call *tc, int index, bool with_index, bool name_part, bool args_part) {
    cJSON *t = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(t, "index", index);
    if (name_part) {
        char id[48];
        make_id(id, sizeof(id), "call_");
        cJSON_AddStringToObject(t, "id", id);
        cJSON_AddStringToObject(t, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(t, "function");
    if (name_part) add_clean_string(f, "name", tc->name, strlen(tc->name));
    if (args_part) add_clean_string(f, "arguments", tc->arguments, strlen(tc->arguments));
    return t;
}

/* Streamed tool calls as vLLM's hermes parser sends them: a delta with index, id, type and the function
 * name, then one with the arguments. */
static void stream_tool_calls(struct srv_ctx *x, struct srv_choice *ch) {
    for (; ch->calls_sent < ch->tools.n_calls; ch->calls_sent++) {
        for (int part = 0; part < 2; part++) {
            cJSON *o = chunk_head(x);
            cJSON *cs = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddItemToArray(cs, c);
            cJSON_AddNumberToObject(c, "index", ch->index);
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            cJSON *tcs = cJSON_AddArrayToObject(d, "tool_calls");
            cJSON_AddItemToArray(tcs, tool_call_json(&ch->tools.calls[ch->calls_sent], ch->calls_sent, true, part == 0, part == 1));
            cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddNullToObject(c, "finish_reason");
            sse_emit(x, o);
        }
    }
}

/* A streamed chunk with this choice's new text (and finish reason when done). */
static void stream_choice(struct srv_ctx *x, struct srv_choice *ch, bool finishing) {
    const bool chat = x->route == R_CHAT;
    if (chat && !ch->role_sent) {
        ch->role_sent = true;
        cJSON *o = chunk_head(x);
        cJSON *cs = cJSON_AddArrayToObject(o, "choices");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(cs, c);
        cJSON_AddNumberToObject(c, "index", ch->index);
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        sse_emit(x, o);
    }
    const bool new_calls = ch->use_tools && ch->tools.n_calls > ch->calls_sent;
    if (ch->text.n == 0 && ch->reasoning.n == 0 && !ch->lp && !(finishing && !new_calls)) {
        if (new_calls) stream_tool_calls(x, ch);
        if (finishing) { /* the finish reason after the calls */
            cJSON *o = chunk_head(x);
            cJSON *cs = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddItemToArray(cs, c);
            cJSON_AddNumberToObject(c, "index", ch->index);
            cJSON_AddObjectToObject(c, "delta");
            cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddStringToObject(c, "finish_reason", choice_finish(ch));
            sse_emit(x, o);
        }
        return;
    }
    if (new_calls) finishing = false; /* the text first, then the calls, then the finish reason */
    cJSON *o = chunk_head(x);
    cJSON *cs = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, c);
    cJSON_AddNumberToObject(c, "index", ch->index);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (ch->reasoning.n) {
            cJSON_AddStringToObject(d, "reasoning_content", ch->reasoning.p);
            cJSON_AddStringToObject(d, "reasoning", ch->reasoning.p);
        }
        if (ch->text.n) cJSON_AddStringToObject(d, "content", ch->text.p);
        if (ch->lp) {
            cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
            cJSON_AddItemToObject(l, "content", ch->lp);
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        cJSON_AddStringToObject(c, "text", ch->text.p ? ch->text.p : "");
        if (ch->lp) cJSON_AddItemToObject(c, "logprobs", ch->lp);
        else cJSON_AddNullToObject(c, "logprobs");
    }
    ch->lp = NULL;
    if (finishing) cJSON_AddStringToObject(c, "finish_reason", choice_finish(ch));
    else cJSON_AddNullToObject(c, "finish_reason");
    sse_emit(x, o);
    ch->text.n = ch->reasoning.n = 0;
    if (ch->text.p) ch->text.p[0] = 0;
    if (ch->reasoning.p) ch->reasoning.p[0] = 0;
    if (new_calls) stream_choice(x, ch, ch->done); /* now without text: the calls and the finish reason */
}

/* Collect new output from every unfinished choice. Returns true when all have finished. */
static bool ctx_poll(struct srv_ctx *x) {
    bool all = true;
    const bool chat = x->route == R_CHAT;
    for (int i = 0; i < x->n_ch; i++) {
        struct srv_choice *ch = &x->ch[i];
        if (ch->done) continue;
        vllmc_output o;
        vllmc_request_next(ch->r, 0, &o);
        if (o.n_tokens) {
            const double now = vllmc_time_s();
            if (ch->t_first == 0) ch->t_first = now;
            else { /* the gap since the previous output, spread over the tokens it brought */
                pthread_mutex_lock(&S.mu);
                for (int32_t k = 0; k < o.n_tokens; k++) hist_observe(&S.itl, (now - ch->t_last) / o.n_tokens);
                pthread_mutex_unlock(&S.mu);
            }
            ch->t_last = now;
        }
        ch->n_prompt = o.n_prompt_tokens;
        ch->n_cached = o.n_cached_tokens;
        ch->n_out = o.n_output_tokens;
        if (ch->echo_len) { sbuf_add(&ch->text, ch->echo, ch->echo_len); ch->echo_len = 0; }
        const char *text = o.text;
        size_t text_len = o.text_len;
        struct sbuf own = {0};
        if (ch->ts) { /* the text with special tokens, cut at the same stop strings */
            const size_t cap = tokenizer_stream_bound(S.tok);
            for (int32_t k = 0; k < o.n_tokens && !ch->ts->stopped; k++) {
                const int32_t id = o.tokens[k];
                if (o.finish == VLLMC_FINISH_STOP && k == o.n_tokens - 1) { /* the EOS or stop id itself shows no text */
                    bool stop_id = tokenizer_is_eog(S.tok, id);
                    for (int32_t j = 0; j < x->req.sp.n_stop_ids; j++) stop_id |= x->req.sp.stop_ids[j] == id;
                    if (stop_id) break;
                }
                size_t n = 0;
                if (tokenizer_stream_feed(ch->ts, id, ch->ts_buf, cap, &n) == VLLMC_OK) sbuf_add(&own, ch->ts_buf, n);
            }
            if (o.finish != VLLMC_FINISH_NONE) sbuf_add(&own, ch->ts_buf, tokenizer_stream_flush(ch->ts, ch->ts_buf, cap));
            text = own.p ? own.p : "";
            text_len = own.n;
        }
        /* content goes through the tool-call parser when the request has tools */
        struct sbuf fresh = {0}, *content = ch->use_tools ? &fresh : &ch->text;
        if (ch->use_think) srv_think_feed(&ch->think, text, text_len, &ch->reasoning, content);
        else sbuf_add(content, text, text_len);
        sbuf_free(&own);
        if (x->req.logprobs >= 0) add_logprobs(ch, &o, chat);
        if (o.finish != VLLMC_FINISH_NONE && ch->use_think) srv_think_flush(&ch->think, &ch->reasoning, content);
        if (ch->use_tools) {
            srv_tools_feed(&ch->tools, fresh.p, fresh.n, &ch->text);
            if (o.finish != VLLMC_FINISH_NONE) srv_tools_flush(&ch->tools, &ch->text);
            if (ch->tools.oom || fresh.oom) x->out.oom = true;
        }
        sbuf_free(&fresh);
        if (o.finish != VLLMC_FINISH_NONE) {
            ch->done = true;
            ch->finish = o.finish;
            record_finish(x, ch);
        } else {
            all = false;
        }
        if (x->streaming) stream_choice(x, ch, ch->done);
    }
    return all;
}

static cJSON *final_json(struct srv_ctx *x) {
    const bool chat = x->route == R_CHAT;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", x->id);
    cJSON_AddStringToObject(o, "object", chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)x->created);
    cJSON_AddStringToObject(o, "model", S.name);
    cJSON *cs = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < x->n_ch; i++) {
        struct srv_choice *ch = &x->ch[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(cs, c);
        cJSON_AddNumberToObject(c, "index", ch->index);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            const bool calls = ch->use_tools && ch->tools.n_calls > 0;
            bool blank = true; /* with tool calls, content that is only whitespace is null */
            for (size_t k = 0; k < ch->text.n && blank; k++) blank = strchr(" \t\r\n", ch->text.p[k]) != NULL;
            if (calls && blank) cJSON_AddNullToObject(m, "content");
            else cJSON_AddStringToObject(m, "content", ch->text.p ? ch->text.p : "");
            if (ch->use_think) {
                if (ch->reasoning.n) {
                    cJSON_AddStringToObject(m, "reasoning_content", ch->reasoning.p);
                    cJSON_AddStringToObject(m, "reasoning", ch->reasoning.p);
                } else {
                    cJSON_AddNullToObject(m, "reasoning_content");
                    cJSON_AddNullToObject(m, "reasoning");
                }
            }
            cJSON *tcs = cJSON_AddArrayToObject(m, "tool_calls");
            for (int k = 0; calls && k < ch->tools.n_calls; k++) cJSON_AddItemToArray(tcs, tool_call_json(&ch->tools.calls[k], k, false, true, true));
            if (ch->lp) {
                cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
                cJSON_AddItemToObject(l, "content", ch->lp);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
        } else {
            cJSON_AddStringToObject(c, "text", ch->text.p ? ch->text.p : "");
            if (ch->lp) cJSON_AddItemToObject(c, "logprobs", ch->lp);
            else cJSON_AddNullToObject(c, "logprobs");
        }
        ch->lp = NULL;
        cJSON_AddStringToObject(c, "finish_reason", choice_finish(ch));
    }
    add_usage(o, x);
    return o;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct srv_ctx *x = cls;
    for (;;) {
        if (x->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (x->out_off < x->out.n) {
            size_t k = VLLMC_MIN(max, x->out.n - x->out_off);
            memcpy(buf, x->out.p + x->out_off, k);
            x->out_off += k;
            if (x->out_off == x->out.n) x->out_off = x->out.n = 0;
            return (ssize_t)k;
        }
        if (x->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&x->w->mu);
        bool all = ctx_poll(x);
        if (x->out.n) { pthread_mutex_unlock(&x->w->mu); continue; }
        if (all) {
            pthread_mutex_unlock(&x->w->mu);
            if (x->req.include_usage) {
                cJSON *o = chunk_head(x);
                cJSON_AddArrayToObject(o, "choices");
                add_usage(o, x);
                char *s = cJSON_PrintUnformatted(o);
                cJSON_Delete(o);
                if (!s) return MHD_CONTENT_READER_END_WITH_ERROR;
                sbuf_adds(&x->out, "data: ");
                sbuf_adds(&x->out, s);
                sbuf_adds(&x->out, "\n\n");
                free(s);
            }
            sbuf_adds(&x->out, "data: [DONE]\n\n");
            x->sent_done = true;
            continue;
        }
        ctx_suspend(x);
        pthread_mutex_unlock(&x->w->mu);
        return 0;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Generation requests                                                                              */

static void ctx_release_choices(struct srv_ctx *x) {
    pthread_mutex_lock(&S.mu);
    struct srv_choice *chs = x->ch;
    const int n = x->n_ch;
    x->ch = NULL;
    x->n_ch = 0;
    for (int i = 0; i < n; i++) {
        struct srv_choice *ch = &chs[i];
        if (ch->r && !ch->done && x->running) {
            ch->finish = VLLMC_FINISH_ABORT;
            S.finished[VLLMC_FINISH_ABORT]++;
        }
    }
    pthread_mutex_unlock(&S.mu);
    for (int i = 0; i < n; i++) {
        struct srv_choice *ch = &chs[i];
        vllmc_request_release(ch->r); /* cancels an unfinished request */
        ch->r = NULL;
        free(ch->ts);
        free(ch->ts_buf);
        sbuf_free(&ch->text);
        sbuf_free(&ch->reasoning);
        srv_tools_free(&ch->tools);
        cJSON_Delete(ch->lp);
        ch->lp = NULL;
    }
    free(chs);
}

static enum MHD_Result continue_generation(struct MHD_Connection *c, struct srv_ctx *x);

static enum MHD_Result start_generation(struct MHD_Connection *c, struct srv_ctx *x) {
    struct srv_error err;
    const bool chat = x->route == R_CHAT;
    if (srv_request_parse(chat ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, x->body.p ? x->body.p : "", x->body.n, &x->req, &err))
        return send_error(c, x, &err);
    struct srv_request *q = &x->req;
    if (q->model && strcmp(q->model, S.name)) {
        srv_error_set(&err, 404, "model", "The model `%.200s` does not exist.", q->model);
        return send_error(c, x, &err);
    }
    const int n_prompts = chat ? 1 : q->n_prompts;
    int32_t **ids = calloc((size_t)n_prompts, sizeof(*ids));
    int32_t *n_ids = calloc((size_t)n_prompts, sizeof(*n_ids));
    char *chat_text = NULL;
    size_t chat_len = 0;
    bool opens_think = false;
    enum MHD_Result ret = MHD_YES;
    vllmc_status st = VLLMC_OK;
    if (!ids || !n_ids) { ret = send_err(c, x, 500, NULL, "out of memory"); goto done; }
    if (chat) {
        if ((st = render_chat(q->messages, q->tools, q->template_kwargs, q->add_generation_prompt, &chat_text, &chat_len))) {
            ret = send_err(c, x, st == VLLMC_ERR_OOM ? 500 : 400, "messages", vllmc_last_error());
            goto done;
        }
        opens_think = srv_prompt_opens_think(chat_text, chat_len);
        if ((st = encode(chat_text, chat_len, TOKENIZER_ENCODE_PARSE_SPECIAL, &ids[0], &n_ids[0]))) {
            ret = send_err(c, x, 400, "messages", vllmc_last_error());
            goto done;
        }
    } else {
        for (int i = 0; i < n_prompts; i++) {
            struct srv_prompt *p = &q->prompts[i];
            if (p->ids) {
                for (int32_t k = 0; k < p->n_ids; k++)
                    if (p->ids[k] >= S.n_vocab) {
                        srv_error_set(&err, 400, "prompt", "token id %d is outside the vocabulary (%d tokens)", p->ids[k], S.n_vocab);
                        ret = send_error(c, x, &err);
                        goto done;
                    }
                if (q->echo) { /* echo shows the prompt as text */
                    size_t tl = 0;
                    if (tokenizer_decode_alloc(S.tok, p->ids, (size_t)p->n_ids, 0, &p->text, &tl) == VLLMC_OK) p->text_len = tl;
                    else p->text = NULL;
                }
                ids[i] = p->ids;
                n_ids[i] = p->n_ids;
                p->ids = NULL;
            } else if ((st = encode(p->text, p->text_len, TOKENIZER_ENCODE_ADD_SPECIAL | TOKENIZER_ENCODE_PARSE_SPECIAL, &ids[i], &n_ids[i]))) {
                ret = send_err(c, x, 400, "prompt", vllmc_last_error());
                goto done;
            }
        }
    }
    for (int i = 0; i < n_prompts; i++) {
        const char *param = chat ? "messages" : "prompt";
        if (n_ids[i] == 0) {
            srv_error_set(&err, 400, param, "the prompt is empty (no tokens)");
            ret = send_error(c, x, &err);
            goto done;
        }
        const int64_t want = (int64_t)n_ids[i] + (q->max_tokens > 0 ? q->max_tokens : 1);
        if (n_ids[i] >= S.max_model_len || want > S.max_model_len) {
            srv_error_set(&err, 400, n_ids[i] >= S.max_model_len ? param : "max_tokens",
                          "This model's maximum context length is %d tokens. However, you requested %lld tokens (%d in the %s, %d in "
                          "the completion). Please reduce the length of the %s or completion.",
                          S.max_model_len, (long long)want, n_ids[i], param, q->max_tokens > 0 ? q->max_tokens : 1, param);
            ret = send_error(c, x, &err);
            goto done;
        }
        for (int32_t k = 0; k < q->n_logit_bias; k++)
            if (q->logit_bias[k].id >= S.n_vocab) {
                srv_error_set(&err, 400, "logit_bias", "logit_bias token id %d is outside the vocabulary (%d tokens)", q->logit_bias[k].id,
                              S.n_vocab);
                ret = send_error(c, x, &err);
                goto done;
            }
        if (n_ids[i] > 0 && q->sp.n_stop_ids)
            for (int32_t k = 0; k < q->sp.n_stop_ids; k++)
                if (q->sp.stop_ids[k] >= S.n_vocab) {
                    ret = send_err(c, x, 400, "stop_token_ids", "a stop token id is outside the vocabulary");
                    goto done;
                }
    }
    /* choices */
    struct srv_choice *chs = calloc((size_t)(n_prompts * q->n), sizeof(*chs));
    if (!chs) { ret = send_err(c, x, 500, NULL, "out of memory"); goto done; }
    pthread_mutex_lock(&S.mu);
    x->ch = chs;
    x->n_ch = n_prompts * q->n;
    pthread_mutex_unlock(&S.mu);
    make_id(x->id, sizeof(x->id), chat ? "chatcmpl-" : "cmpl-");
    x->created = (long long)time(NULL);
    for (int i = 0; i < x->n_ch; i++) {
        struct srv_choice *ch = &x->ch[i];
        const int pi = i / q->n;
        ch->index = i;
        ch->use_think = chat && S.think;
        srv_think_init(&ch->think, opens_think);
        ch->use_tools = chat && q->parse_tool_calls;
        srv_tools_init(&ch->tools);
        if (q->echo && !chat) {
            struct srv_prompt *p = &q->prompts[pi];
            if (p->text) { ch->echo = p->text; ch->echo_len = p->text_len; }
        }
        if (!q->skip_special_tokens) {
            ch->ts = malloc(sizeof(*ch->ts));
            ch->ts_buf = malloc(tokenizer_stream_bound(S.tok));
            if (!ch->ts || !ch->ts_buf) { ret = send_err(c, x, 500, NULL, "out of memory"); goto done; }
            tokenizer_stream_init(ch->ts, S.tok, TOKENIZER_DECODE_REPLACE_INVALID);
            if (tokenizer_stream_set_stops(ch->ts, q->sp.stop, (size_t)q->sp.n_stop)) {
                ret = send_err(c, x, 400, "stop", vllmc_last_error());
                goto done;
            }
        }
        vllmc_sampling_params sp = q->sp;
        sp.max_tokens = q->max_tokens > 0 ? q->max_tokens : 0;
        if (sp.seed >= 0) sp.seed += i % q->n;
        st = vllmc_engine_submit(S.eng, ids[pi], n_ids[pi], &sp, on_notify, x->w, &ch->r);
        if (st) {
            ret = send_err(c, x, st == VLLMC_ERR_INVALID ? 400 : 500, NULL, vllmc_last_error());
            goto done;
        }
    }
    pthread_mutex_lock(&S.mu);
    for (int i = 0; i < n_prompts; i++) {
        S.prompt_tokens += (uint64_t)n_ids[i] * (uint64_t)q->n;
        S.prefix_queries += (uint64_t)n_ids[i] * (uint64_t)q->n;
        for (int k = 0; k < q->n; k++) {
            hist_observe(&S.req_prompt, n_ids[i]);
            hist_observe(&S.params_max, q->max_tokens > 0 ? q->max_tokens : S.max_model_len - n_ids[i]);
        }
    }
    hist_observe(&S.params_n, q->n);
    pthread_mutex_unlock(&S.mu);
    x->running = true;
    if (q->stream) {
        x->streaming = true;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, x, NULL);
        if (!resp) { ret = MHD_NO; goto done; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        x->status = 200;
    } else {
        ret = continue_generation(c, x); /* polls before suspending: output may have come already */
    }
done:
    if (ids) for (int i = 0; i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(n_ids);
    free(chat_text);
    if (!x->running) ctx_release_choices(x);
    return ret;
}

/* Whether the client closed its end. MHD does not watch a connection that waits for its response, so a
 * non-streamed request checks at each wake-up (one per engine output). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    char b;
    ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Ends the context's unfinished engine requests early (finish ABORT at the engine's next step). */
static void ctx_cancel(const struct srv_ctx *x) {
    for (int i = 0; i < x->n_ch; i++) vllmc_request_cancel(x->ch[i].r);
}

/* The watcher thread. MHD watches no suspended socket, so a client that hangs up while its request waits
 * (in the engine's queue, or between outputs) would only be noticed at the request's next output. Every
 * WATCH_MS the watcher looks at the socket of each suspended connection and cancels the requests of one whose
 * client has gone; the engine finishes them at its next step, whose notify resumes the connection, and MHD
 * closes it (on_completed releases the requests). It walks the waker pool (never freed before shutdown) and
 * takes only a waker's lock, which the connection's handler holds while it suspends: while a waker reads
 * suspended, its context and choices are not in use by the handler. */
#define WATCH_MS 100
static atomic_int watch_stop;
static void *watch_main(void *arg) {
    (void)arg;
    while (!atomic_load(&watch_stop)) {
        const struct timespec ts = {0, WATCH_MS * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&S.mu);
        struct srv_waker *head = S.wall;
        pthread_mutex_unlock(&S.mu);
        for (struct srv_waker *w = head; w; w = w->next_all) {
            pthread_mutex_lock(&w->mu);
            if (w->conn && w->x && w->suspended && !w->cancelled && client_gone(w->conn)) {
                w->cancelled = true;
                ctx_cancel(w->x);
            }
            pthread_mutex_unlock(&w->mu);
        }
    }
    return NULL;
}

/* A resumed non-streamed request. */
static enum MHD_Result continue_generation(struct MHD_Connection *c, struct srv_ctx *x) {
    if (client_gone(c)) {
        ctx_cancel(x);
        return MHD_NO; /* MHD closes the connection; on_completed releases the requests */
    }
    pthread_mutex_lock(&x->w->mu);
    bool all = ctx_poll(x);
    if (!all) {
        ctx_suspend(x);
        pthread_mutex_unlock(&x->w->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&x->w->mu);
    x->running = false;
    bool aborted = false;
    for (int i = 0; i < x->n_ch; i++) aborted |= x->ch[i].finish == VLLMC_FINISH_ABORT;
    if (aborted && atomic_load(&S.draining)) return send_err(c, x, 503, NULL, "the server is shutting down");
    if (aborted) return send_err(c, x, 500, NULL, "the request was aborted by the engine");
    return send_json(c, x, 200, final_json(x));
}

/* ------------------------------------------------------------------------------------------------ */
/* Other endpoints                                                                                  */

static enum MHD_Result do_models(struct MHD_Connection *c, struct srv_ctx *x) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(d, m);
    cJSON_AddStringToObject(m, "id", S.name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)S.started);
    cJSON_AddStringToObject(m, "owned_by", "vllmc");
    cJSON_AddStringToObject(m, "root", S.o.model_path);
    cJSON_AddNullToObject(m, "parent");
    cJSON_AddNumberToObject(m, "max_model_len", S.max_model_len);
    const vllmc_kv_dtype kd = S.o.eng.kv_dtype;
    cJSON_AddStringToObject(m, "kv_cache_dtype", kd == VLLMC_KV_F32 ? "fp32" : kd == VLLMC_KV_BF16 ? "bf16"
                                                 : kd == VLLMC_KV_FP8_E4M3 ? "fp8_e4m3" : "fp16");
    cJSON_AddArrayToObject(m, "permission");
    return send_json(c, x, 200, o);
}

static enum MHD_Result do_tokenize(struct MHD_Connection *c, struct srv_ctx *x) {
    cJSON *j = x->body.n ? cJSON_ParseWithLength(x->body.p, x->body.n) : NULL;
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); return send_err(c, x, 400, NULL, "the request body must be a JSON object"); }
    enum MHD_Result ret;
    int32_t *ids = NULL, n = 0;
    char *text = NULL;
    size_t len = 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (cJSON_IsString(model) && strcmp(model->valuestring, S.name)) {
        struct srv_error e;
        srv_error_set(&e, 404, "model", "The model `%.200s` does not exist.", model->valuestring);
        ret = send_error(c, x, &e);
        goto out;
    }
    if (x->route == R_TOKENIZE) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt"), *ms = cJSON_GetObjectItemCaseSensitive(j, "messages");
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(j, "add_special_tokens");
        if (as && !cJSON_IsBool(as)) { ret = send_err(c, x, 400, "add_special_tokens", "'add_special_tokens' must be a boolean"); goto out; }
        vllmc_status st;
        if (cJSON_IsString(p)) {
            const bool add = !as || cJSON_IsTrue(as);
            st = encode(p->valuestring, strlen(p->valuestring), TOKENIZER_ENCODE_PARSE_SPECIAL | (add ? TOKENIZER_ENCODE_ADD_SPECIAL : 0), &ids, &n);
        } else if (ms) {
            struct srv_request q;
            struct srv_error e;
            cJSON *only = cJSON_CreateObject();
            cJSON_AddItemReferenceToObject(only, "messages", (cJSON *)ms);
            const cJSON *agp = cJSON_GetObjectItemCaseSensitive(j, "add_generation_prompt");
            if (agp) cJSON_AddItemReferenceToObject(only, "add_generation_prompt", (cJSON *)agp);
            const cJSON *kw = cJSON_GetObjectItemCaseSensitive(j, "chat_template_kwargs");
            if (kw) cJSON_AddItemReferenceToObject(only, "chat_template_kwargs", (cJSON *)kw);
            const cJSON *tl = cJSON_GetObjectItemCaseSensitive(j, "tools");
            if (tl) cJSON_AddItemReferenceToObject(only, "tools", (cJSON *)tl);
            char *s = cJSON_PrintUnformatted(only);
            cJSON_Delete(only);
            if (!s) { ret = MHD_NO; goto out; }
            vllmc_status ps = srv_request_parse(SRV_EP_CHAT, s, strlen(s), &q, &e);
            free(s);
            if (ps) { ret = send_error(c, x, &e); goto out; }
            st = render_chat(q.messages, q.tools, q.template_kwargs, q.add_generation_prompt, &text, &len);
            srv_request_free(&q);
            if (!st) {
                const bool add = as && cJSON_IsTrue(as);
                st = encode(text, len, TOKENIZER_ENCODE_PARSE_SPECIAL | (add ? TOKENIZER_ENCODE_ADD_SPECIAL : 0), &ids, &n);
            }
        } else {
            ret = send_err(c, x, 400, "prompt", "give 'prompt' (a string) or 'messages'");
            goto out;
        }
        if (st) { ret = send_err(c, x, 400, NULL, vllmc_last_error()); goto out; }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "count", n);
        cJSON_AddNumberToObject(o, "max_model_len", S.max_model_len);
        cJSON *a = cJSON_AddArrayToObject(o, "tokens");
        for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        cJSON_AddNullToObject(o, "token_strs");
        ret = send_json(c, x, 200, o);
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
        if (!cJSON_IsArray(t)) { ret = send_err(c, x, 400, "tokens", "'tokens' must be a list of token ids"); goto out; }
        int cnt = cJSON_GetArraySize(t);
        ids = malloc((size_t)(cnt ? cnt : 1) * sizeof(int32_t));
        if (!ids) { ret = send_err(c, x, 500, NULL, "out of memory"); goto out; }
        const cJSON *e;
        cJSON_ArrayForEach(e, t) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= S.n_vocab || e->valuedouble != (double)(int32_t)e->valuedouble) {
                ret = send_err(c, x, 400, "tokens", "'tokens' must hold token ids of this model's vocabulary");
                goto out;
            }
            ids[n++] = (int32_t)e->valuedouble;
        }
        char *raw = NULL;
        size_t rl = 0;
        if (tokenizer_decode_alloc(S.tok, ids, (size_t)n, 0, &raw, &rl)) { ret = send_err(c, x, 400, "tokens", vllmc_last_error()); goto out; }
        cJSON *o = cJSON_CreateObject();
        add_clean_string(o, "prompt", raw, rl);
        free(raw);
        ret = send_json(c, x, 200, o);
    }
out:
    free(ids);
    free(text);
    cJSON_Delete(j);
    return ret;
}

static void metric_hdr(struct sbuf *b, const char *name, const char *type, const char *help) {
    char t[512];
    snprintf(t, sizeof(t), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    sbuf_adds(b, t);
}

static void metric_val(struct sbuf *b, const char *name, const char *extra, double v) {
    sbuf_adds(b, name);
    sbuf_adds(b, "{model_name=\"");
    for (const char *p = S.name; *p; p++) { /* label escaping */
        if (*p == '"' || *p == '\\') { sbuf_add(b, "\\", 1); sbuf_add(b, p, 1); }
        else if (*p == '\n') sbuf_adds(b, "\\n");
        else sbuf_add(b, p, 1);
    }
    char t[64];
    snprintf(t, sizeof(t), "\"%s} %.17g\n", "", v);
    if (extra) { sbuf_adds(b, "\""); sbuf_adds(b, extra); snprintf(t, sizeof(t), "} %.17g\n", v); }
    sbuf_adds(b, t);
}

static void metric_hist(struct sbuf *b, const char *name, const char *help, const struct srv_hist *h) {
    char t[512], le[96];
    metric_hdr(b, name, "histogram", help);
    for (int i = 0; i < h->nb; i++) {
        snprintf(le, sizeof(le), ",le=\"%.17g\"", h->b[i]);
        snprintf(t, sizeof(t), "%s_bucket", name);
        metric_val(b, t, le, (double)h->cnt[i]);
    }
    snprintf(t, sizeof(t), "%s_bucket", name);
    metric_val(b, t, ",le=\"+Inf\"", (double)h->n);
    snprintf(t, sizeof(t), "%s_count", name);
    metric_val(b, t, NULL, (double)h->n);
    snprintf(t, sizeof(t), "%s_sum", name);
    metric_val(b, t, NULL, h->sum);
}

static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long a = 0, r = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &a, &r) != 2) r = 0;
        fclose(f);
    }
    return (double)r * (double)sysconf(_SC_PAGESIZE);
}

static enum MHD_Result do_metrics(struct MHD_Connection *c, struct srv_ctx *x) {
    vllmc_engine_stats es;
    memset(&es, 0, sizeof(es));
    if (atomic_load(&S.ready)) vllmc_engine_get_stats(S.eng, &es);
    struct sbuf b = {0};
    pthread_mutex_lock(&S.mu);
    metric_hdr(&b, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
    metric_val(&b, "vllm:num_requests_running", NULL, es.running);
    metric_hdr(&b, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
    metric_val(&b, "vllm:num_requests_waiting", NULL, es.waiting);
    const double usage = es.kv_blocks_total ? 1.0 - (double)es.kv_blocks_free / es.kv_blocks_total : 0.0;
    metric_hdr(&b, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
    metric_val(&b, "vllm:kv_cache_usage_perc", NULL, usage);
    metric_hdr(&b, "vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
    metric_val(&b, "vllm:gpu_cache_usage_perc", NULL, usage);
    metric_hdr(&b, "vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.");
    metric_val(&b, "vllm:prefix_cache_queries_total", NULL, (double)S.prefix_queries);
    metric_hdr(&b, "vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.");
    metric_val(&b, "vllm:prefix_cache_hits_total", NULL, (double)es.prefix_cache_hit_tokens);
    metric_hdr(&b, "vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.");
    metric_val(&b, "vllm:num_preemptions_total", NULL, (double)es.preemptions);
    metric_hdr(&b, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
    metric_val(&b, "vllm:prompt_tokens_total", NULL, (double)S.prompt_tokens);
    metric_hdr(&b, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
    metric_val(&b, "vllm:generation_tokens_total", NULL, (double)S.gen_tokens);
    metric_hdr(&b, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    metric_val(&b, "vllm:request_success_total", ",finished_reason=\"stop\"", (double)S.finished[VLLMC_FINISH_STOP]);
    metric_val(&b, "vllm:request_success_total", ",finished_reason=\"length\"", (double)S.finished[VLLMC_FINISH_LENGTH]);
    metric_val(&b, "vllm:request_success_total", ",finished_reason=\"abort\"", (double)S.finished[VLLMC_FINISH_ABORT]);
    metric_hist(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &S.ttft);
    metric_hist(&b, "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", &S.e2e);
    metric_hist(&b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &S.itl);
    metric_hist(&b, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", &S.itl);
    metric_hist(&b, "vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", &S.tpot);
    metric_hist(&b, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", &S.prefill);
    metric_hist(&b, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", &S.decode);
    metric_hist(&b, "vllm:request_params_n", "Histogram of the n request parameter.", &S.params_n);
    metric_hist(&b, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", &S.params_max);
    metric_hist(&b, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", &S.req_prompt);
    metric_hist(&b, "vllm:request_generation_tokens", "Number of generation tokens processed.", &S.req_gen);
    metric_hdr(&b, "vllmc:kv_blocks_total", "gauge", "KV-cache blocks of 16 tokens in the pool.");
    metric_val(&b, "vllmc:kv_blocks_total", NULL, es.kv_blocks_total);
    metric_hdr(&b, "vllmc:kv_blocks_free", "gauge", "KV-cache blocks no request holds (cached prefixes included).");
    metric_val(&b, "vllmc:kv_blocks_free", NULL, es.kv_blocks_free);
    metric_hdr(&b, "vllmc:kv_blocks_cached", "gauge", "Free KV-cache blocks that still hold a reusable prefix.");
    metric_val(&b, "vllmc:kv_blocks_cached", NULL, es.kv_blocks_cached);
    metric_hdr(&b, "vllmc:requests_in_flight", "gauge", "HTTP generation requests being served.");
    metric_val(&b, "vllmc:requests_in_flight", NULL, S.inflight);
    metric_hdr(&b, "vllmc:http_responses_total", "counter", "HTTP responses by status class.");
    metric_val(&b, "vllmc:http_responses_total", ",code=\"2xx\"", (double)S.http_2xx);
    metric_val(&b, "vllmc:http_responses_total", ",code=\"4xx\"", (double)S.http_4xx);
    metric_val(&b, "vllmc:http_responses_total", ",code=\"5xx\"", (double)S.http_5xx);
    pthread_mutex_unlock(&S.mu);
    metric_hdr(&b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    char t[128];
    snprintf(t, sizeof(t), "process_resident_memory_bytes %.17g\n", rss_bytes());
    sbuf_adds(&b, t);
    if (b.oom) { sbuf_free(&b); return MHD_NO; }
    return send_text(c, x, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n);
}

/* ------------------------------------------------------------------------------------------------ */
/* Dispatch                                                                                         */

static enum srv_route route_of(const char *url, bool *post_only) {
    static const struct { const char *path; enum srv_route r; bool post; } T[] = {
        {"/health", R_HEALTH, false},           {"/version", R_VERSION, false},   {"/v1/models", R_MODELS, false},
        {"/metrics", R_METRICS, false},         {"/v1/completions", R_COMPLETIONS, true},
        {"/v1/chat/completions", R_CHAT, true}, {"/tokenize", R_TOKENIZE, true},  {"/detokenize", R_DETOKENIZE, true},
    };
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
        if (!strcmp(url, T[i].path)) { *post_only = T[i].post; return T[i].r; }
    *post_only = false;
    return R_NOTFOUND;
}

static bool authorized(struct MHD_Connection *c, const char *url) {
    if (!S.o.api_key || strncmp(url, "/v1/", 4)) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    /* compare without an early exit */
    const size_t a = strlen(h), b = strlen(S.o.api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)S.o.api_key[i % (b ? b : 1)];
    return diff == 0;
}

static enum MHD_Result dispatch(struct MHD_Connection *c, struct srv_ctx *x, const char *url, const char *method) {
    bool post_only;
    (void)route_of(url, &post_only);
    if (x->route == R_NOTFOUND) return send_err(c, x, 404, NULL, "Not Found");
    if (post_only != x->post) return send_err(c, x, 405, NULL, "Method Not Allowed");
    (void)method;
    if (!authorized(c, url)) return send_err(c, x, 401, NULL, "Unauthorized");
    if (x->too_big) {
        struct srv_error e;
        srv_error_set(&e, 413, NULL, "the request body is larger than %zu bytes", S.o.max_body);
        return send_error(c, x, &e);
    }
    switch (x->route) {
    case R_HEALTH:
        if (!atomic_load(&S.ready) || atomic_load(&S.draining)) return send_err(c, x, 503, NULL, "the model is loading");
        return send_text(c, x, 200, NULL, strdup(""), 0);
    case R_VERSION: {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "version", VLLMC_VERSION);
        return send_json(c, x, 200, o);
    }
    case R_METRICS: return do_metrics(c, x);
    default: break;
    }
    if (!atomic_load(&S.ready)) return send_err(c, x, 503, NULL, "the model is still loading");
    if (x->route == R_MODELS) return do_models(c, x);
    if (x->route == R_TOKENIZE || x->route == R_DETOKENIZE) return do_tokenize(c, x);
    if (atomic_load(&S.draining)) return send_err(c, x, 503, NULL, "the server is shutting down");
    if (x->over_limit) return send_err(c, x, 429, NULL, "too many requests in flight; retry later");
    if (!(x->w = waker_get(c, x))) return send_err(c, x, 500, NULL, "out of memory");
    return start_generation(c, x);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)version;
    struct srv_ctx *x = *con_cls;
    if (!x) {
        if (!(x = calloc(1, sizeof(*x)))) return MHD_NO;
        *con_cls = x;
        x->conn = c;
        x->t_start = vllmc_time_s();
        x->post = !strcmp(method, "POST");
        bool post_only;
        x->route = route_of(url, &post_only);
        if (!x->post && strcmp(method, "GET") && strcmp(method, "HEAD")) x->route = R_NOTFOUND;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > S.o.max_body) x->too_big = true;
        if (x->route == R_COMPLETIONS || x->route == R_CHAT) {
            pthread_mutex_lock(&S.mu);
            if (S.inflight >= S.o.max_pending) x->over_limit = true;
            else {
                S.inflight++;
                x->in_flight = true;
                x->next = S.active;
                if (S.active) S.active->prev = x;
                S.active = x;
            }
            pthread_mutex_unlock(&S.mu);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!x->too_big) {
            if (x->body.n + *upload_size > S.o.max_body) {
                x->too_big = true;
                sbuf_free(&x->body);
            } else {
                sbuf_add(&x->body, upload, *upload_size);
                if (x->body.oom) return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (x->running) return continue_generation(c, x);
    return dispatch(c, x, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    struct srv_ctx *x = *con_cls;
    if (!x) return;
    *con_cls = NULL;
    if (x->w) {
        pthread_mutex_lock(&x->w->mu);
        x->w->conn = NULL; /* no resume from a late notify, no look from the watcher */
        x->w->x = NULL;
        pthread_mutex_unlock(&x->w->mu);
    }
    pthread_mutex_lock(&S.mu);
    if (x->in_flight) {
        S.inflight--;
        if (x->prev) x->prev->next = x->next; else S.active = x->next;
        if (x->next) x->next->prev = x->prev;
    }
    int st = x->status ? x->status : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 500 : 499; /* 499: the client went away */
    if (x->status == 200 && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !x->sent_done && x->streaming) st = 499;
    if (st >= 500) S.http_5xx++;
    else if (st >= 400) S.http_4xx++;
    else S.http_2xx++;
    pthread_mutex_unlock(&S.mu);
    if (S.o.log_requests && x->route != R_METRICS && x->route != R_HEALTH)
        LOG_INFO("serve: %s %d %.3f s%s", x->route == R_CHAT ? "chat" : x->route == R_COMPLETIONS ? "completions" : "request", st,
                 vllmc_time_s() - x->t_start, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " (client gone)" : "");
    ctx_release_choices(x);
    waker_put(x->w);
    srv_request_free(&x->req);
    sbuf_free(&x->body);
    sbuf_free(&x->out);
    free(x);
}

/* ------------------------------------------------------------------------------------------------ */
/* Start-up and shutdown                                                                            */

static vllmc_status load_frontend(void) {
    vllmc_status st;
    if ((st = gguf_file_open(S.o.model_path, &S.gf))) return st;
    if ((st = tokenizer_load_gguf(S.gf->ctx, &S.tok))) return vllmc_errorf(st, "tokenizer: %s", vllmc_last_error());
    S.n_vocab = (int32_t)tokenizer_n_vocab(S.tok);
    size_t bl = 0, el = 0;
    const char *bos = tokenizer_bos(S.tok) >= 0 ? tokenizer_piece(S.tok, tokenizer_bos(S.tok), &bl) : NULL;
    const char *eos = tokenizer_eos(S.tok) >= 0 ? tokenizer_piece(S.tok, tokenizer_eos(S.tok), &el) : NULL;
    if (bos) snprintf(S.bos, sizeof(S.bos), "%.*s", (int)VLLMC_MIN(bl, 120), bos);
    if (eos) snprintf(S.eos, sizeof(S.eos), "%.*s", (int)VLLMC_MIN(el, 120), eos);
    char *text = NULL;
    size_t len = 0;
    if (S.o.chat_template_path) {
        FILE *f = fopen(S.o.chat_template_path, "rb");
        if (f) {
            struct sbuf b = {0};
            char buf[65536];
            size_t k;
            while ((k = fread(buf, 1, sizeof(buf), f)) > 0) sbuf_add(&b, buf, k);
            bool bad = ferror(f) || b.oom;
            fclose(f);
            if (bad) { sbuf_free(&b); return vllmc_errorf(VLLMC_ERR_IO, "--chat-template: cannot read %s", S.o.chat_template_path); }
            text = b.p ? b.p : strdup("");
            len = b.n;
        } else if (strchr(S.o.chat_template_path, '{')) {
            text = strdup(S.o.chat_template_path); /* the template itself, as vLLM allows */
            len = text ? strlen(text) : 0;
        } else {
            return vllmc_errorf(VLLMC_ERR_IO, "--chat-template: cannot open %s", S.o.chat_template_path);
        }
        if (!text) return vllmc_errorf(VLLMC_ERR_OOM, "chat template");
    } else {
        struct gguf_str ts;
        if (gguf_get_str(S.gf->ctx, "tokenizer.chat_template", &ts) == VLLMC_OK) {
            if (!(text = malloc(ts.len + 1))) return vllmc_errorf(VLLMC_ERR_OOM, "chat template");
            memcpy(text, ts.ptr, ts.len);
            text[ts.len] = 0;
            len = ts.len;
        }
    }
    if (text) {
        st = tmpl_parse(text, len, &S.tmpl);
        S.think = S.o.reasoning == 1 || (S.o.reasoning < 0 && strstr(text, "<think>") != NULL);
        free(text);
        if (st) return vllmc_errorf(st, "chat template: %s", vllmc_last_error());
    } else {
        LOG_WARN("serve: the model has no chat template: /v1/chat/completions answers 400 (use --chat-template)");
    }
    return VLLMC_OK;
}

static void free_all(void) {
    vllmc_engine_destroy(S.eng);
    S.eng = NULL;
    tmpl_free(S.tmpl);
    tokenizer_destroy(S.tok);
    gguf_file_close(S.gf);
    for (struct srv_waker *w = S.wall, *n; w; w = n) {
        n = w->next_all;
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
    S.wall = S.wfree = NULL;
}

static void wait_inflight(double seconds) {
    double t0 = vllmc_time_s();
    for (;;) {
        pthread_mutex_lock(&S.mu);
        int n = S.inflight;
        pthread_mutex_unlock(&S.mu);
        if (n == 0 || vllmc_time_s() - t0 > seconds) return;
        usleep(20000);
    }
}

/* libmicrohttpd's own messages (a client that hung up, a malformed request line) at debug level. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    LOG_DEBUG("serve: http: %s", buf);
}

int srv_run(const struct srv_opts *o) {
    memset(&S, 0, sizeof(S));
    S.o = *o;
    S.name = o->served_model_name ? o->served_model_name : o->model_path;
    S.started = (long long)time(NULL);
    S.rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&S.mu, NULL);
    S.ttft.b = TTFT_B; S.ttft.nb = (int)(sizeof(TTFT_B) / sizeof(double));
    S.e2e.b = E2E_B; S.e2e.nb = (int)(sizeof(E2E_B) / sizeof(double));
    S.tpot.b = TPOT_B; S.tpot.nb = (int)(sizeof(TPOT_B) / sizeof(double));
    S.itl.b = TPOT_B; S.itl.nb = S.tpot.nb;
    S.prefill.b = E2E_B; S.prefill.nb = S.e2e.nb;
    S.decode.b = E2E_B; S.decode.nb = S.e2e.nb;
    S.params_n.b = N_B; S.params_n.nb = (int)(sizeof(N_B) / sizeof(double));
    int rc = 1;
    vllmc_status st = load_frontend();
    if (st) { fprintf(stderr, "vllmc serve: %s\n", vllmc_last_error()); goto out; }

    /* listen first: /health answers 503 while the engine loads */
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof(port), "%d", o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai || !ai) { fprintf(stderr, "vllmc serve: --host %s: %s\n", o->host, gai_strerror(gai)); goto out; }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    S.d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, NULL,
                           MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                           MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                           MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                           MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
                           MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
                           MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
                           MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                           MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!S.d) { fprintf(stderr, "vllmc serve: cannot listen on %s:%d (in use?)\n", o->host, o->port); goto out; }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S.d, MHD_DAEMON_INFO_BIND_PORT);
    LOG_INFO("serve: listening on http://%s:%u (model loading)", o->host, di ? (unsigned)di->port : (unsigned)o->port);

    if ((st = vllmc_engine_create(o->model_path, &o->eng, &S.eng))) {
        fprintf(stderr, "vllmc serve: %s\n", vllmc_last_error());
        MHD_stop_daemon(S.d);
        S.d = NULL;
        goto out;
    }
    vllmc_engine_stats es;
    vllmc_engine_get_stats(S.eng, &es);
    S.max_model_len = es.max_model_len;
    /* vLLM's 1-2-5 buckets up to max_model_len for the token-count histograms */
    for (double m = 1; S.n_len_b < 36; m *= 10) {
        const double f[3] = {1, 2, 5};
        for (int i = 0; i < 3 && S.n_len_b < 36; i++) {
            if (m * f[i] > S.max_model_len) goto buckets_done;
            S.len_b[S.n_len_b++] = m * f[i];
        }
    }
buckets_done:
    S.req_prompt.b = S.len_b; S.req_prompt.nb = S.n_len_b;
    S.req_gen.b = S.len_b; S.req_gen.nb = S.n_len_b;
    S.params_max.b = S.len_b; S.params_max.nb = S.n_len_b;
    atomic_store(&S.ready, 1);
    LOG_INFO("serve: ready: model '%s', max_model_len %d, max_num_seqs %d", S.name, es.max_model_len, es.max_num_seqs);
    fflush(stderr);

    pthread_t watcher;
    atomic_store(&watch_stop, 0);
    const bool watching = pthread_create(&watcher, NULL, watch_main, NULL) == 0;
    if (!watching) LOG_WARN("serve: no watcher thread: a waiting request whose client leaves runs until its first output");

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    LOG_INFO("serve: signal %d: draining", sig);
    atomic_store(&S.draining, 1);
    MHD_socket ls = MHD_quiesce_daemon(S.d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    wait_inflight(30.0);
    /* still running after the grace period: cancel them */
    pthread_mutex_lock(&S.mu);
    for (struct srv_ctx *x = S.active; x; x = x->next) ctx_cancel(x);
    pthread_mutex_unlock(&S.mu);
    wait_inflight(10.0);
    if (watching) {
        atomic_store(&watch_stop, 1);
        pthread_join(watcher, NULL);
    }
    MHD_stop_daemon(S.d);
    S.d = NULL;
    LOG_INFO("serve: stopped");
    rc = 0;
out:
    free_all();
    pthread_mutex_destroy(&S.mu);
    return rc;
}
