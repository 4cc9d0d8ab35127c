/* OpenAI request parsing and validation, error objects, the reasoning splitter. No HTTP, no engine. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "server/server.h"

/* ---- buffers ---- */

void sbuf_add(struct sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sbuf_adds(struct sbuf *b, const char *s) { sbuf_add(b, s, strlen(s)); }

void sbuf_free(struct sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* ---- errors ---- */

void srv_error_set(struct srv_error *e, int http, const char *param, const char *fmt, ...) {
    e->http = http;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

const char *srv_error_type(int http) {
    switch (http) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowed";
    case 413: return "RequestEntityTooLarge";
    case 429: return "RateLimitError";
    case 503: return "ServiceUnavailableError";
    default: return http >= 500 ? "InternalServerError" : "BadRequestError";
    }
}

char *srv_error_json(const struct srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_CreateObject();
    if (!root || !o) { cJSON_Delete(root); cJSON_Delete(o); return NULL; }
    cJSON_AddItemToObject(root, "error", o);
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", srv_error_type(e->http));
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    cJSON_AddNumberToObject(o, "code", e->http);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- field readers: each returns false after filling err ---- */

#define BAD(param, ...) do { srv_error_set(err, 400, param, __VA_ARGS__); return false; } while (0)

static bool get_bool(const cJSON *o, const char *k, bool *out, struct srv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) BAD(k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return true;
}

static bool get_num(const cJSON *o, const char *k, double lo, double hi, float *out, struct srv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v)) BAD(k, "'%s' must be a number", k);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi) BAD(k, "'%s' must be in [%g, %g], got %g", k, lo, hi, d);
    *out = (float)d;
    return true;
}

static bool is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) <= 9007199254740992.0;
}

/* Integer in [lo, hi]; *given set when present (not null). */
static bool get_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t *out, bool *given, struct srv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (given) *given = false;
    if (!v || cJSON_IsNull(v)) return true;
    if (!is_int(v)) BAD(k, "'%s' must be an integer", k);
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi) BAD(k, "'%s' must be in [%lld, %lld], got %.0f", k, (long long)lo, (long long)hi, d);
    *out = (int64_t)d;
    if (given) *given = true;
    return true;
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* A JSON array of token ids (non-negative int32); empty allowed only if allow_empty. */
static bool parse_ids(const cJSON *a, const char *param, int32_t **ids, int32_t *n, int max, struct srv_error *err) {
    int cnt = cJSON_GetArraySize(a);
    if (cnt > max) BAD(param, "'%s' has %d token ids, more than %d", param, cnt, max);
    int32_t *p = malloc((size_t)(cnt ? cnt : 1) * sizeof(int32_t));
    if (!p) { srv_error_set(err, 500, param, "out of memory"); return false; }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!is_int(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX) {
            free(p);
            BAD(param, "'%s'[%d] must be a token id (a non-negative integer)", param, i);
        }
        p[i++] = (int32_t)e->valuedouble;
    }
    *ids = p;
    *n = cnt;
    return true;
}

static bool is_id_array(const cJSON *a) {
    if (!cJSON_IsArray(a)) return false;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) if (!cJSON_IsNumber(e)) return false;
    return true;
}

static bool add_prompt_text(struct srv_request *r, const cJSON *s, struct srv_error *err) {
    struct srv_prompt *p = &r->prompts[r->n_prompts];
    const char *t = cJSON_GetStringValue(s);
    size_t n = strlen(t);
    if (!(p->text = dup_n(t, n))) { srv_error_set(err, 500, "prompt", "out of memory"); return false; }
    p->text_len = n;
    r->n_prompts++;
    return true;
}

static bool parse_prompt(struct srv_request *r, const cJSON *pr, struct srv_error *err) {
    if (!pr || cJSON_IsNull(pr)) BAD("prompt", "'prompt' is required");
    int cnt = cJSON_IsArray(pr) ? cJSON_GetArraySize(pr) : 1;
    if (cJSON_IsArray(pr) && cnt == 0) BAD("prompt", "'prompt' must not be empty");
    /* a flat list of ids is one prompt */
    if (cJSON_IsArray(pr) && is_id_array(pr)) cnt = 1;
    if (cnt > SRV_MAX_PROMPTS) BAD("prompt", "'prompt' has %d prompts, more than %d", cnt, SRV_MAX_PROMPTS);
    r->prompts = calloc((size_t)cnt, sizeof(*r->prompts));
    if (!r->prompts) { srv_error_set(err, 500, "prompt", "out of memory"); return false; }
    if (cJSON_IsString(pr)) return add_prompt_text(r, pr, err);
    if (!cJSON_IsArray(pr)) BAD("prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids");
    if (is_id_array(pr)) {
        struct srv_prompt *p = &r->prompts[0];
        if (!parse_ids(pr, "prompt", &p->ids, &p->n_ids, SRV_MAX_PROMPT_IDS, err)) return false;
        r->n_prompts = 1;
        return true;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, pr) {
        if (cJSON_IsString(e)) {
            if (!add_prompt_text(r, e, err)) return false;
        } else if (is_id_array(e)) {
            struct srv_prompt *p = &r->prompts[r->n_prompts];
            if (!parse_ids(e, "prompt", &p->ids, &p->n_ids, SRV_MAX_PROMPT_IDS, err)) return false;
            r->n_prompts++;
            if (p->n_ids == 0) BAD("prompt", "'prompt'[%d] is an empty list of token ids", r->n_prompts - 1);
        } else {
            BAD("prompt", "'prompt'[%d] must be a string or a list of token ids", r->n_prompts);
        }
    }
    return true;
}

/* Flatten content (string, null, or a list of parts) into a string; only text parts are supported. */
static bool content_text(const cJSON *c, int idx, struct sbuf *out, bool *is_null, struct srv_error *err) {
    *is_null = false;
    if (!c || cJSON_IsNull(c)) { *is_null = true; return true; }
    if (cJSON_IsString(c)) { sbuf_adds(out, c->valuestring); sbuf_add(out, "", 0); return true; }
    if (!cJSON_IsArray(c)) BAD("messages", "messages[%d].content must be a string or a list of content parts", idx);
    sbuf_add(out, "", 0);
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (cJSON_IsString(part)) { sbuf_adds(out, part->valuestring); j++; continue; }
        if (!cJSON_IsObject(part) || !cJSON_IsString(ty))
            BAD("messages", "messages[%d].content[%d] must be an object with a 'type'", idx, j);
        if (strcmp(ty->valuestring, "text") && strcmp(ty->valuestring, "input_text"))
            BAD("messages", "messages[%d].content[%d]: content part type '%.64s' is not supported (text only)", idx, j, ty->valuestring);
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(tx)) BAD("messages", "messages[%d].content[%d].text must be a string", idx, j);
        sbuf_adds(out, tx->valuestring);
        j++;
    }
    return true;
}

static bool parse_messages(struct srv_request *r, const cJSON *ms, struct srv_error *err) {
    if (!ms || cJSON_IsNull(ms)) BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) BAD("messages", "'messages' must be a list of messages");
    if (cJSON_GetArraySize(ms) == 0) BAD("messages", "'messages' must not be empty");
    if (!(r->messages = cJSON_CreateArray())) { srv_error_set(err, 500, "messages", "out of memory"); return false; }
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, ms) {
        if (!cJSON_IsObject(m)) BAD("messages", "messages[%d] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) BAD("messages", "messages[%d].role must be a string", i);
        bool ok = false;
        for (size_t k = 0; k < sizeof(roles) / sizeof(roles[0]); k++) ok |= !strcmp(role->valuestring, roles[k]);
        if (!ok) BAD("messages", "messages[%d].role '%.64s' is not one of system, developer, user, assistant, tool", i, role->valuestring);
        const bool assistant = !strcmp(role->valuestring, "assistant");
        struct sbuf text = {0};
        bool is_null;
        if (!content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &text, &is_null, err)) { sbuf_free(&text); return false; }
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && !cJSON_IsNull(tc) && (!assistant || !cJSON_IsArray(tc))) {
            sbuf_free(&text);
            BAD("messages", "messages[%d].tool_calls must be a list on an assistant message", i);
        }
        if (is_null && !assistant) { sbuf_free(&text); BAD("messages", "messages[%d].content is required", i); }
        cJSON *nm = cJSON_CreateObject();
        if (!nm || text.oom) { cJSON_Delete(nm); sbuf_free(&text); srv_error_set(err, 500, "messages", "out of memory"); return false; }
        cJSON_AddItemToArray(r->messages, nm);
        cJSON_AddStringToObject(nm, "role", role->valuestring);
        cJSON_AddStringToObject(nm, "content", text.p ? text.p : "");
        sbuf_free(&text);
        /* keep the other members templates read (name, tool_call_id, tool_calls, reasoning_content) */
        const cJSON *f;
        cJSON_ArrayForEach(f, m) {
            if (!f->string || !strcmp(f->string, "role") || !strcmp(f->string, "content")) continue;
            if (!strcmp(f->string, "tool_calls") && cJSON_IsArray(f)) {
                /* OpenAI sends function.arguments as a JSON string; templates expect a mapping */
                cJSON *calls = cJSON_Duplicate(f, 1);
                if (!calls) { srv_error_set(err, 500, "messages", "out of memory"); return false; }
                cJSON *call;
                cJSON_ArrayForEach(call, calls) {
                    cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                    cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                    if (cJSON_IsString(args)) {
                        cJSON *parsed = cJSON_Parse(args->valuestring);
                        if (parsed && cJSON_IsObject(parsed)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
                        else cJSON_Delete(parsed);
                    }
                }
                cJSON_AddItemToObject(nm, "tool_calls", calls);
                continue;
            }
            cJSON *d = cJSON_Duplicate(f, 1);
            if (!d) { srv_error_set(err, 500, "messages", "out of memory"); return false; }
            cJSON_AddItemToObject(nm, f->string, d);
        }
        i++;
    }
    return true;
}

static bool parse_stop(struct srv_request *r, const cJSON *o, struct srv_error *err) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stop");
    int n = 0;
    if (st && !cJSON_IsNull(st)) {
        if (cJSON_IsString(st)) {
            if (strlen(st->valuestring) > 256) BAD("stop", "a stop string is longer than 256 bytes");
            if (st->valuestring[0] && !(r->stop[n++] = dup_n(st->valuestring, strlen(st->valuestring)))) goto oom;
        } else if (cJSON_IsArray(st)) {
            if (cJSON_GetArraySize(st) > VLLMC_MAX_STOP_STRINGS) BAD("stop", "at most %d stop strings", VLLMC_MAX_STOP_STRINGS);
            const cJSON *e;
            cJSON_ArrayForEach(e, st) {
                if (!cJSON_IsString(e)) BAD("stop", "'stop' must be a string or a list of strings");
                if (strlen(e->valuestring) > 256) BAD("stop", "a stop string is longer than 256 bytes");
                if (!e->valuestring[0]) continue;
                if (!(r->stop[n++] = dup_n(e->valuestring, strlen(e->valuestring)))) goto oom;
            }
        } else {
            BAD("stop", "'stop' must be a string or a list of strings");
        }
    }
    for (int i = 0; i < n; i++) r->stop_ptr[i] = r->stop[i];
    r->sp.stop = n ? r->stop_ptr : NULL;
    r->sp.n_stop = n;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "stop_token_ids");
    if (ids && !cJSON_IsNull(ids)) {
        if (!cJSON_IsArray(ids)) BAD("stop_token_ids", "'stop_token_ids' must be a list of token ids");
        if (cJSON_GetArraySize(ids) > VLLMC_MAX_STOP_IDS) BAD("stop_token_ids", "at most %d stop token ids", VLLMC_MAX_STOP_IDS);
        int k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, ids) {
            if (!is_int(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX) BAD("stop_token_ids", "'stop_token_ids' must be a list of token ids");
            r->stop_ids[k++] = (int32_t)e->valuedouble;
        }
        r->sp.stop_ids = k ? r->stop_ids : NULL;
        r->sp.n_stop_ids = k;
    }
    return true;
oom:
    srv_error_set(err, 500, "stop", "out of memory");
    return false;
}

static bool parse_fields(enum srv_endpoint ep, const cJSON *o, struct srv_request *r, struct srv_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) BAD("model", "'model' must be a string");
        if (!(r->model = dup_n(model->valuestring, strlen(model->valuestring)))) { srv_error_set(err, 500, "model", "out of memory"); return false; }
    }
    if (ep == SRV_EP_COMPLETIONS) {
        if (!parse_prompt(r, cJSON_GetObjectItemCaseSensitive(o, "prompt"), err)) return false;
        if (!get_bool(o, "echo", &r->echo, err)) return false;
    } else {
        if (!parse_messages(r, cJSON_GetObjectItemCaseSensitive(o, "messages"), err)) return false;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
        if (tools && !cJSON_IsNull(tools)) {
            if (!cJSON_IsArray(tools)) BAD("tools", "'tools' must be a list");
            if (cJSON_GetArraySize(tools) > 0 && !(r->tools = cJSON_Duplicate(tools, 1))) { srv_error_set(err, 500, "tools", "out of memory"); return false; }
        }
        /* tool_choice: "none" turns the output parsing off; "auto", "required" and a named function parse it
         * (the choice is not enforced on the sampling) */
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
        bool none = false;
        if (tc && !cJSON_IsNull(tc)) {
            if (cJSON_IsString(tc)) {
                none = !strcmp(tc->valuestring, "none");
                if (!none && strcmp(tc->valuestring, "auto") && strcmp(tc->valuestring, "required"))
                    BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function object");
            } else if (!cJSON_IsObject(tc)) BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function object");
        }
        r->parse_tool_calls = r->tools && !none;
        const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
        if (kw && !cJSON_IsNull(kw)) {
            if (!cJSON_IsObject(kw)) BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
            if (!(r->template_kwargs = cJSON_Duplicate(kw, 1))) { srv_error_set(err, 500, "chat_template_kwargs", "out of memory"); return false; }
        }
        if (!get_bool(o, "add_generation_prompt", &r->add_generation_prompt, err)) return false;
    }
    int64_t v;
    bool given, given2;
    v = -1;
    if (!get_int(o, "max_tokens", 0, INT32_MAX, &v, &given, err)) return false;
    int64_t v2 = -1;
    if (!get_int(o, "max_completion_tokens", 0, INT32_MAX, &v2, &given2, err)) return false;
    if (given2) v = v2, given = true;
    if (given && v < 1) BAD(given2 ? "max_completion_tokens" : "max_tokens", "max_tokens must be at least 1, got %lld", (long long)v);
    r->max_tokens = given ? (int32_t)v : (ep == SRV_EP_COMPLETIONS ? 16 : -1);
    v = 1;
    if (!get_int(o, "n", 1, SRV_MAX_N, &v, NULL, err)) return false;
    r->n = (int)v;
    if ((int64_t)r->n * (ep == SRV_EP_COMPLETIONS ? r->n_prompts : 1) > SRV_MAX_CHOICES)
        BAD("n", "prompts x n = %d x %d is more than %d choices", r->n_prompts, r->n, SRV_MAX_CHOICES);
    if (!get_bool(o, "stream", &r->stream, err)) return false;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) BAD("stream_options", "'stream_options' must be an object");
        if (!r->stream) BAD("stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (!get_bool(so, "include_usage", &r->include_usage, err)) return false;
        if (!get_bool(so, "continuous_usage_stats", &r->continuous_usage, err)) return false;
        r->continuous_usage = r->continuous_usage && r->include_usage;
    }
    vllmc_sampling_params *sp = &r->sp;
    sp->temperature = 1.0f;
    if (!get_num(o, "temperature", 0, 100, &sp->temperature, err)) return false;
    if (!get_num(o, "top_p", 0, 1, &sp->top_p, err)) return false;
    if (sp->top_p <= 0) BAD("top_p", "'top_p' must be in (0, 1]");
    v = 0;
    if (!get_int(o, "top_k", -1, INT32_MAX, &v, NULL, err)) return false;
    sp->top_k = (int32_t)v;
    if (!get_num(o, "min_p", 0, 1, &sp->min_p, err)) return false;
    if (!get_num(o, "presence_penalty", -2, 2, &sp->presence_penalty, err)) return false;
    if (!get_num(o, "frequency_penalty", -2, 2, &sp->frequency_penalty, err)) return false;
    if (!get_num(o, "repetition_penalty", 1e-6, 100, &sp->repetition_penalty, err)) return false;
    v = -1;
    if (!get_int(o, "seed", INT64_MIN / 2, INT64_MAX / 2, &v, &given, err)) return false;
    sp->seed = given ? (int64_t)((uint64_t)v & 0x7fffffffffffffffull) : -1;
    v = 0;
    if (!get_int(o, "min_tokens", 0, INT32_MAX, &v, NULL, err)) return false;
    sp->min_tokens = (int32_t)v;
    bool ig = false;
    if (!get_bool(o, "ignore_eos", &ig, err)) return false;
    sp->ignore_eos = ig;
    if (!get_bool(o, "skip_special_tokens", &r->skip_special_tokens, err)) return false;
    if (r->max_tokens > 0 && sp->min_tokens > r->max_tokens)
        BAD("min_tokens", "min_tokens (%d) must not exceed max_tokens (%d)", sp->min_tokens, r->max_tokens);
    /* logprobs: completions take an int, chat a bool plus top_logprobs */
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
    r->logprobs = -1;
    if (ep == SRV_EP_COMPLETIONS) {
        if (!get_int(o, "logprobs", 0, VLLMC_MAX_TOP_LOGPROBS, &v, &given, err)) return false;
        if (given) r->logprobs = (int)v;
    } else {
        bool want = false;
        if (!get_bool(o, "logprobs", &want, err)) return false;
        v = 0;
        if (!get_int(o, "top_logprobs", 0, VLLMC_MAX_TOP_LOGPROBS, &v, &given, err)) return false;
        if (given && v > 0 && !want) BAD("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
        if (want) r->logprobs = (int)v;
    }
    (void)lp;
    sp->logprobs = r->logprobs;
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
    if (lb && !cJSON_IsNull(lb)) {
        if (!cJSON_IsObject(lb)) BAD("logit_bias", "'logit_bias' must be an object of token id -> bias");
        const int n = cJSON_GetArraySize(lb);
        if (n > 0 && !(r->logit_bias = malloc((size_t)n * sizeof(*r->logit_bias)))) {
            srv_error_set(err, 500, "logit_bias", "out of memory");
            return false;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, lb) {
            char *end;
            errno = 0;
            long id = strtol(e->string, &end, 10);
            if (!e->string[0] || *end || id < 0 || id > INT32_MAX || errno || !isdigit((unsigned char)e->string[0]))
                BAD("logit_bias", "'logit_bias' key '%.32s' is not a token id", e->string);
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
                BAD("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
            VLLMC_ASSERT(r->n_logit_bias < n);
            r->logit_bias[r->n_logit_bias++] = (vllmc_logit_bias){(int32_t)id, (float)e->valuedouble};
        }
        sp->logit_bias = r->logit_bias;
        sp->n_logit_bias = r->n_logit_bias;
    }
    if (!parse_stop(r, o, err)) return false;
    return true;
}

#undef BAD

vllmc_status srv_request_parse(enum srv_endpoint ep, const char *data, size_t size, struct srv_request *out, struct srv_error *err) {
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    out->ep = ep;
    out->add_generation_prompt = true;
    out->skip_special_tokens = true;
    vllmc_sampling_params_default(&out->sp);
    const char *end = NULL;
    cJSON *root = size ? cJSON_ParseWithLengthOpts(data, size, &end, 0) : NULL;
    if (root && end) {
        /* only whitespace may follow the value */
        for (const char *p = end; p < data + size; p++)
            if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') { cJSON_Delete(root); root = NULL; break; }
    }
    if (!root) {
        srv_error_set(err, 400, NULL, "the request body is not valid JSON");
        return VLLMC_ERR_INVALID;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        srv_error_set(err, 400, NULL, "the request body must be a JSON object");
        return VLLMC_ERR_INVALID;
    }
    bool ok = parse_fields(ep, root, out, err);
    cJSON_Delete(root);
    if (!ok) {
        srv_request_free(out);
        out->ep = ep;
        return err->http >= 500 ? VLLMC_ERR_OOM : VLLMC_ERR_INVALID;
    }
    return VLLMC_OK;
}

void srv_request_free(struct srv_request *r) {
    free(r->model);
    for (int i = 0; i < r->n_prompts; i++) { free(r->prompts[i].text); free(r->prompts[i].ids); }
    free(r->prompts);
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_kwargs);
    free(r->logit_bias);
    for (int i = 0; i < VLLMC_MAX_STOP_STRINGS; i++) free(r->stop[i]);
    memset(r, 0, sizeof(*r));
}

/* ---- reasoning split ---- */

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

void srv_think_init(struct srv_think *t, bool in_reasoning) {
    memset(t, 0, sizeof(*t));
    t->state = in_reasoning ? 1 : 0;
}

void srv_think_feed(struct srv_think *t, const char *s, size_t n, struct sbuf *reasoning, struct sbuf *content) {
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (t->state == 2) {
            /* copy the rest in one go */
            sbuf_add(content, s + i, n - i);
            return;
        }
        const char *tag = t->state == 0 ? THINK_OPEN : THINK_CLOSE;
        const size_t tl = strlen(tag);
        t->hold[t->n_hold++] = c;
        for (;;) {
            if (t->n_hold && memcmp(t->hold, tag, t->n_hold) == 0) {
                if (t->n_hold == tl) { /* the whole tag */
                    t->n_hold = 0;
                    t->state = t->state == 0 ? 1 : 2;
                }
                break;
            }
            if (!t->n_hold) break;
            if (t->state == 0) { /* the output does not open with <think>: all content */
                sbuf_add(content, t->hold, t->n_hold);
                t->n_hold = 0;
                t->state = 2;
                break;
            }
            /* in reasoning: the first held byte cannot start the closing tag */
            sbuf_add(reasoning, t->hold, 1);
            memmove(t->hold, t->hold + 1, --t->n_hold);
        }
    }
}

void srv_think_flush(struct srv_think *t, struct sbuf *reasoning, struct sbuf *content) {
    if (t->n_hold) sbuf_add(t->state == 1 ? reasoning : content, t->hold, t->n_hold);
    t->n_hold = 0;
}

bool srv_prompt_opens_think(const char *prompt, size_t len) {
    while (len && (prompt[len - 1] == ' ' || prompt[len - 1] == '\n' || prompt[len - 1] == '\r' || prompt[len - 1] == '\t')) len--;
    const size_t tl = strlen(THINK_OPEN);
    return len >= tl && memcmp(prompt + len - tl, THINK_OPEN, tl) == 0;
}

void srv_opts_default(struct srv_opts *o) {
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8000;
    o->reasoning = -1;
    o->max_body = SRV_MAX_BODY_DEFAULT;
    o->max_pending = 4096;
    o->timeout_s = 600;
    o->log_requests = true;
    vllmc_engine_opts_default(&o->eng);
}
