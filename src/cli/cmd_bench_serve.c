/* vllmc bench serve: a load generator for an OpenAI-compatible server (ours or vLLM), measured like vLLM's
 * benchmark_serving. For each concurrency level, --num-prompts requests run through that many client
 * threads (each one request at a time over its own connection, our HTTP/1.1 client on POSIX sockets).
 * Prompts: --input-len random token ids (the "prompt": [ids] form; fresh ids per level, so no prefix
 * cache hits) or the lines of --prompts-file as text; --output-len tokens each with ignore_eos and
 * temperature 0. Streamed requests ask for stream_options.continuous_usage_stats, so every chunk says
 * how many tokens the request has produced: TTFT is the first chunk with a token, and the gap between
 * two chunks is spread over the tokens the later one brought (a chunk's extra tokens count a gap of 0),
 * so each request gives exactly (output tokens - 1) inter-token latencies.
 * Per level: request throughput, output and total token throughput, TTFT / TPOT / ITL / end-to-end
 * latency mean, median and p99 (linear interpolation, as numpy), a table on stdout and --json FILE. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "common/common.h"
#include "server/http_client.h"

#define BS_MAX_LEVELS 32

struct bs_opts {
    char host[256], prefix[256];
    int port;
    const char *endpoint, *model, *api_key, *json_path, *prompts_file;
    int conc[BS_MAX_LEVELS], n_conc;
    int num_prompts, input_len, output_len, id_max, warmup;
    uint64_t seed;
    bool stream, chat;
    double timeout_s, ready_timeout_s;
};

struct bs_req {
    bool ok;
    char err[200];
    double t_send, ttft, e2e;   /* seconds; ttft < 0 until the first token */
    int32_t n_prompt, n_out;    /* the server's usage (last seen) */
    int32_t n_counted;          /* tokens counted chunk by chunk */
    int32_t n_chunks;
    double *itl;                /* [n_itl] */
    int32_t n_itl, cap_itl;
    double t_last;
    bool done_seen, usage_seen;
    struct hc_sse sse;
    struct sbuf raw;            /* the start of the body, for error messages and non-streamed responses */
};

struct bs_level {
    const struct bs_opts *o;
    char **bodies;              /* [n] request bodies */
    size_t *body_len;
    struct bs_req *req;         /* [n] */
    int n;
    atomic_int next;
};

static uint64_t bs_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void usage(void) {
    fprintf(stderr,
            "usage: vllmc bench serve [options]   (load generator for a running `vllmc serve` or vLLM)\n"
            "  --base-url URL        server (default http://127.0.0.1:8000)\n"
            "  --endpoint PATH       /v1/completions (default) or /v1/chat/completions\n"
            "  --concurrency LIST    clients per level, e.g. 1,4,16,64 (default 1)\n"
            "  --num-prompts N       requests per level (default 4 x concurrency, at least 8)\n"
            "  --input-len L         random prompt tokens (default 128); ids in [0, --id-max)\n"
            "  --id-max N            random ids below N (default 256: valid in any byte-level vocabulary)\n"
            "  --prompts-file F      text prompts, one per line (cycled), instead of random ids\n"
            "  --output-len G        output tokens per request, ignore_eos (default 128)\n"
            "  --model NAME          the request's model field (default: left out)\n"
            "  --api-key KEY         Authorization: Bearer KEY\n"
            "  --no-stream           non-streamed requests (no TTFT / ITL)\n"
            "  --warmup N            requests before the first level, not measured (default 1)\n"
            "  --seed S              prompt seed (default 0)\n"
            "  --timeout S           socket timeout per request (default 600)\n"
            "  --ready-timeout S     first wait up to S seconds for GET /health to answer 200 (a server still loading)\n"
            "  --json FILE           write the results as JSON\n");
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s || v < 1 || v > 4096 || n >= cap) return -1;
        out[n++] = (int)v;
        s = e;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

/* ---- one request ---- */

static void itl_push(struct bs_req *q, double v) {
    if (q->n_itl == q->cap_itl) {
        int32_t cap = q->cap_itl ? 2 * q->cap_itl : 256;
        double *p = realloc(q->itl, (size_t)cap * sizeof(double));
        if (!p) return;
        q->itl = p;
        q->cap_itl = cap;
    }
    q->itl[q->n_itl++] = v;
}

/* Whether a streamed choice carries output: text (completions), delta content, reasoning or tool calls (chat). */
static bool chunk_has_output(const cJSON *c) {
    if (!cJSON_IsObject(c)) return false;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text"), *d = cJSON_GetObjectItemCaseSensitive(c, "delta");
    if (cJSON_IsString(t) && t->valuestring[0]) return true;
    static const char *const keys[] = {"content", "reasoning_content", "reasoning"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, keys[k]);
        if (cJSON_IsString(v) && v->valuestring[0]) return true;
    }
    return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(d, "tool_calls")) > 0;
}

static int on_event(void *user, const char *data, size_t n) {
    struct bs_req *q = user;
    const double now = vllmc_time_s();
    if (n == 6 && !memcmp(data, "[DONE]", 6)) { q->done_seen = true; return 0; }
    cJSON *j = cJSON_ParseWithLength(data, n);
    if (!j) { snprintf(q->err, sizeof(q->err), "an event that is not JSON"); cJSON_Delete(j); return 1; }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        snprintf(q->err, sizeof(q->err), "error event: %.160s", cJSON_IsString(m) ? m->valuestring : "?");
        cJSON_Delete(j);
        return 1;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(j, "choices");
    int32_t count = q->n_counted;
    if (cJSON_IsObject(u)) {
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens"), *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
        if (cJSON_IsNumber(ct)) { q->n_out = (int32_t)ct->valuedouble; count = q->n_out; q->usage_seen = true; }
        if (cJSON_IsNumber(pt)) q->n_prompt = (int32_t)pt->valuedouble;
    } else if (!q->usage_seen && chunk_has_output(cJSON_GetArrayItem(cs, 0))) {
        count = q->n_counted + 1; /* a server without continuous usage: one token per chunk with output */
    }
    if (count > q->n_counted) {
        const int32_t delta = count - q->n_counted;
        if (q->n_counted == 0) {
            q->ttft = now - q->t_send;
            for (int32_t k = 1; k < delta; k++) itl_push(q, 0.0);
        } else {
            for (int32_t k = 0; k < delta; k++) itl_push(q, (now - q->t_last) / delta);
        }
        q->n_counted = count;
        q->t_last = now;
        q->n_chunks++;
    }
    cJSON_Delete(j);
    return 0;
}

static void on_body(void *user, const char *p, size_t n) {
    struct bs_req *q = user;
    if (q->raw.n < (1u << 20)) sbuf_add(&q->raw, p, VLLMC_MIN(n, (size_t)(1u << 20) - q->raw.n));
    if (q->sse.failed || q->err[0]) return;
    if (hc_sse_feed(&q->sse, p, n, on_event, q) < 0 && !q->err[0]) snprintf(q->err, sizeof(q->err), "sse: %s", vllmc_last_error());
}

static void run_request(const struct bs_opts *o, const char *body, size_t len, struct bs_req *q) {
    char path[600];
    snprintf(path, sizeof(path), "%s%s", o->prefix, o->endpoint);
    memset(q, 0, sizeof(*q));
    q->ttft = -1;
    hc_sse_init(&q->sse);
    int status = 0;
    q->t_send = vllmc_time_s();
    vllmc_status st = hc_request(o->host, o->port, path, o->api_key, body, len, o->timeout_s, &status, on_body, q);
    q->e2e = vllmc_time_s() - q->t_send;
    if (st) snprintf(q->err, sizeof(q->err), "%s", vllmc_last_error());
    else if (status != 200) snprintf(q->err, sizeof(q->err), "HTTP %d: %.150s", status, q->raw.p ? q->raw.p : "");
    else if (!o->stream) {
        cJSON *j = cJSON_ParseWithLength(q->raw.p ? q->raw.p : "", q->raw.n);
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens"), *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
        if (cJSON_IsNumber(ct) && cJSON_IsNumber(pt)) {
            q->n_out = q->n_counted = (int32_t)ct->valuedouble;
            q->n_prompt = (int32_t)pt->valuedouble;
        } else snprintf(q->err, sizeof(q->err), "a response without usage");
        cJSON_Delete(j);
    } else if (!q->err[0] && !q->done_seen) snprintf(q->err, sizeof(q->err), "the stream ended without [DONE]");
    q->ok = !q->err[0];
    hc_sse_free(&q->sse);
    sbuf_free(&q->raw);
}

static void *worker(void *arg) {
    struct bs_level *L = arg;
    for (;;) {
        int i = atomic_fetch_add(&L->next, 1);
        if (i >= L->n) break;
        run_request(L->o, L->bodies[i], L->body_len[i], &L->req[i]);
    }
    return NULL;
}

/* ---- prompts ---- */

static const char *const WORDS[] = {"the", "engine", "reads", "a", "file", "and", "maps", "every", "tensor", "by", "name",
                                    "then", "walks", "layers", "of", "attention", "over", "cache", "with", "tokens"};

/* The body of request i of a level. */
static char *make_body(const struct bs_opts *o, char **lines, int n_lines, int level, int i, size_t *len) {
    struct sbuf b = {0};
    char tmp[128];
    sbuf_adds(&b, "{");
    if (o->model) {
        cJSON *s = cJSON_CreateString(o->model);
        char *m = cJSON_PrintUnformatted(s);
        sbuf_adds(&b, "\"model\":");
        sbuf_adds(&b, m ? m : "\"\"");
        sbuf_adds(&b, ",");
        free(m);
        cJSON_Delete(s);
    }
    uint64_t rs = o->seed * 1000003ull + (uint64_t)level * 7919ull + (uint64_t)i * 104729ull;
    char *text = NULL;
    if (lines) {
        cJSON *s = cJSON_CreateString(lines[((unsigned)(level + 1) * 7u + (unsigned)i) % (unsigned)n_lines]); /* level -1: warm-up */
        text = cJSON_PrintUnformatted(s);
        cJSON_Delete(s);
    } else if (o->chat) {
        struct sbuf t = {0};
        for (int k = 0; k < o->input_len; k++) {
            if (k) sbuf_add(&t, " ", 1);
            sbuf_adds(&t, WORDS[bs_rng(&rs) % (sizeof(WORDS) / sizeof(WORDS[0]))]);
        }
        cJSON *s = cJSON_CreateString(t.p ? t.p : "");
        text = cJSON_PrintUnformatted(s);
        cJSON_Delete(s);
        sbuf_free(&t);
    }
    if (o->chat) {
        sbuf_adds(&b, "\"messages\":[{\"role\":\"user\",\"content\":");
        sbuf_adds(&b, text ? text : "\"\"");
        sbuf_adds(&b, "}]");
    } else if (text) {
        sbuf_adds(&b, "\"prompt\":");
        sbuf_adds(&b, text);
    } else {
        sbuf_adds(&b, "\"prompt\":[");
        for (int k = 0; k < o->input_len; k++) {
            snprintf(tmp, sizeof(tmp), k ? ",%d" : "%d", (int)(bs_rng(&rs) % (uint64_t)o->id_max));
            sbuf_adds(&b, tmp);
        }
        sbuf_adds(&b, "]");
    }
    free(text);
    snprintf(tmp, sizeof(tmp), ",\"max_tokens\":%d,\"ignore_eos\":true,\"temperature\":0", o->output_len);
    sbuf_adds(&b, tmp);
    if (o->stream) sbuf_adds(&b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}");
    sbuf_adds(&b, "}");
    if (b.oom) { sbuf_free(&b); return NULL; }
    *len = b.n;
    return b.p;
}

static char **read_lines(const char *path, int *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) { vllmc_errorf(VLLMC_ERR_IO, "%s: %s", path, strerror(errno)); return NULL; }
    char **v = NULL;
    int n = 0, cap = 0;
    char *line = NULL;
    size_t lc = 0;
    ssize_t k;
    while ((k = getline(&line, &lc, f)) >= 0) {
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r')) line[--k] = 0;
        if (!k) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, (size_t)cap * sizeof(*v));
            if (!nv) break;
            v = nv;
        }
        if (!(v[n] = strdup(line))) break;
        n++;
    }
    free(line);
    fclose(f);
    if (n == 0) { free(v); vllmc_errorf(VLLMC_ERR_INVALID, "%s: no prompts", path); return NULL; }
    *n_out = n;
    return v;
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct bs_stat { double mean, median, p99; int n; };

/* Sorts v. Percentiles by linear interpolation between closest ranks (numpy's default). */
static struct bs_stat stat_of(double *v, int n) {
    struct bs_stat s = {0, 0, 0, n};
    if (n == 0) return s;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    s.mean = sum / n;
    const double q[2] = {0.5, 0.99};
    double out[2];
    for (int k = 0; k < 2; k++) {
        const double r = q[k] * (n - 1);
        const int lo = (int)floor(r), hi = lo + 1 < n ? lo + 1 : lo;
        out[k] = v[lo] + (v[hi] - v[lo]) * (r - lo);
    }
    s.median = out[0];
    s.p99 = out[1];
    return s;
}

static void json_stat(cJSON *o, const char *name, struct bs_stat s) {
    char k[64];
    snprintf(k, sizeof(k), "mean_%s_ms", name);
    cJSON_AddNumberToObject(o, k, s.mean * 1e3);
    snprintf(k, sizeof(k), "median_%s_ms", name);
    cJSON_AddNumberToObject(o, k, s.median * 1e3);
    snprintf(k, sizeof(k), "p99_%s_ms", name);
    cJSON_AddNumberToObject(o, k, s.p99 * 1e3);
}

/* Runs one level; adds its JSON to levels and prints its table row. */
static int run_level(const struct bs_opts *o, char **lines, int n_lines, int level, int conc, int n, cJSON *levels) {
    struct bs_level L = {.o = o, .n = n};
    L.bodies = calloc((size_t)n, sizeof(char *));
    L.body_len = calloc((size_t)n, sizeof(size_t));
    L.req = calloc((size_t)n, sizeof(struct bs_req));
    pthread_t *th = calloc((size_t)conc, sizeof(pthread_t));
    int rc = 1;
    if (!L.bodies || !L.body_len || !L.req || !th) { fprintf(stderr, "vllmc bench serve: out of memory\n"); goto done; }
    for (int i = 0; i < n; i++)
        if (!(L.bodies[i] = make_body(o, lines, n_lines, level, i, &L.body_len[i]))) { fprintf(stderr, "vllmc bench serve: out of memory\n"); goto done; }
    atomic_init(&L.next, 0);
    const double t0 = vllmc_time_s();
    int started = 0;
    for (int t = 0; t < conc && t < n; t++, started++)
        if (pthread_create(&th[t], NULL, worker, &L)) { fprintf(stderr, "vllmc bench serve: pthread_create failed\n"); break; }
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    const double dur = vllmc_time_s() - t0;
    if (started == 0) goto done;

    int ok = 0, failed = 0;
    int64_t tot_in = 0, tot_out = 0, n_itl = 0, mismatched = 0;
    for (int i = 0; i < n; i++) {
        const struct bs_req *q = &L.req[i];
        if (!q->ok) {
            if (failed++ < 3) fprintf(stderr, "vllmc bench serve: request %d failed: %s\n", i, q->err);
            continue;
        }
        ok++;
        tot_in += q->n_prompt;
        tot_out += q->n_out;
        n_itl += q->n_itl;
        mismatched += q->n_counted != q->n_out;
    }
    double *ttft = malloc(sizeof(double) * (size_t)(ok + 1)), *tpot = malloc(sizeof(double) * (size_t)(ok + 1)),
           *e2e = malloc(sizeof(double) * (size_t)(ok + 1)), *itl = malloc(sizeof(double) * (size_t)(n_itl + 1));
    if (!ttft || !tpot || !e2e || !itl) { free(ttft); free(tpot); free(e2e); free(itl); fprintf(stderr, "vllmc bench serve: out of memory\n"); goto done; }
    int n_ttft = 0, n_tpot = 0, n_e2e = 0;
    int64_t k_itl = 0;
    for (int i = 0; i < n; i++) {
        const struct bs_req *q = &L.req[i];
        if (!q->ok) continue;
        e2e[n_e2e++] = q->e2e;
        if (q->ttft >= 0) ttft[n_ttft++] = q->ttft;
        if (q->ttft >= 0 && q->n_out > 1) tpot[n_tpot++] = (q->e2e - q->ttft) / (q->n_out - 1);
        for (int32_t k = 0; k < q->n_itl; k++) itl[k_itl++] = q->itl[k];
    }
    const struct bs_stat s_ttft = stat_of(ttft, n_ttft), s_tpot = stat_of(tpot, n_tpot), s_itl = stat_of(itl, (int)k_itl),
                         s_e2e = stat_of(e2e, n_e2e);
    free(ttft); free(tpot); free(e2e); free(itl);
    printf("%5d %6d %6d %8.2f %8.3f %10.1f %10.1f %9.1f %9.1f %9.1f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", conc, ok, failed, dur,
           ok / dur, tot_out / dur, (tot_in + tot_out) / dur, s_ttft.mean * 1e3, s_ttft.median * 1e3, s_ttft.p99 * 1e3,
           s_tpot.mean * 1e3, s_tpot.median * 1e3, s_tpot.p99 * 1e3, s_itl.mean * 1e3, s_itl.median * 1e3, s_itl.p99 * 1e3);
    fflush(stdout);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "concurrency", conc);
    cJSON_AddNumberToObject(j, "num_prompts", n);
    cJSON_AddNumberToObject(j, "completed", ok);
    cJSON_AddNumberToObject(j, "failed", failed);
    cJSON_AddNumberToObject(j, "duration_s", dur);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)tot_in);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)tot_out);
    cJSON_AddNumberToObject(j, "request_throughput", ok / dur);
    cJSON_AddNumberToObject(j, "output_throughput", tot_out / dur);
    cJSON_AddNumberToObject(j, "total_token_throughput", (tot_in + tot_out) / dur);
    json_stat(j, "ttft", s_ttft);
    json_stat(j, "tpot", s_tpot);
    json_stat(j, "itl", s_itl);
    json_stat(j, "e2el", s_e2e);
    cJSON_AddNumberToObject(j, "n_ttft", s_ttft.n);
    cJSON_AddNumberToObject(j, "n_tpot", s_tpot.n);
    cJSON_AddNumberToObject(j, "n_itl", (double)k_itl);
    cJSON_AddNumberToObject(j, "count_mismatches", (double)mismatched); /* requests whose chunk count != usage */
    cJSON_AddItemToArray(levels, j);
    rc = 0;
done:
    for (int i = 0; i < n && L.req; i++) free(L.req[i].itl);
    for (int i = 0; i < n && L.bodies; i++) free(L.bodies[i]);
    free(L.bodies);
    free(L.body_len);
    free(L.req);
    free(th);
    return rc;
}

int cmd_bench_serve(int argc, char **argv) {
    struct bs_opts o;
    memset(&o, 0, sizeof(o));
    const char *url = "http://127.0.0.1:8000", *conc = "1";
    o.endpoint = "/v1/completions";
    o.input_len = 128;
    o.output_len = 128;
    o.id_max = 256;
    o.warmup = 1;
    o.stream = true;
    o.timeout_s = 600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "--base-url") && has) url = argv[++i];
        else if (!strcmp(a, "--endpoint") && has) o.endpoint = argv[++i];
        else if (!strcmp(a, "--concurrency") && has) conc = argv[++i];
        else if (!strcmp(a, "--num-prompts") && has) o.num_prompts = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--input-len") && has) o.input_len = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--output-len") && has) o.output_len = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--id-max") && has) o.id_max = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--warmup") && has) o.warmup = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--seed") && has) o.seed = strtoull(argv[++i], &end, 10);
        else if (!strcmp(a, "--timeout") && has) o.timeout_s = strtod(argv[++i], &end);
        else if (!strcmp(a, "--ready-timeout") && has) o.ready_timeout_s = strtod(argv[++i], &end);
        else if (!strcmp(a, "--prompts-file") && has) o.prompts_file = argv[++i];
        else if (!strcmp(a, "--model") && has) o.model = argv[++i];
        else if (!strcmp(a, "--api-key") && has) o.api_key = argv[++i];
        else if (!strcmp(a, "--json") && has) o.json_path = argv[++i];
        else if (!strcmp(a, "--no-stream")) o.stream = false;
        else { fprintf(stderr, "vllmc bench serve: unknown or incomplete option '%s'\n", a); usage(); return 2; }
        if (end && *end) { fprintf(stderr, "vllmc bench serve: %s needs a number, got '%s'\n", a, argv[i]); return 2; }
    }
    if (hc_parse_url(url, o.host, sizeof(o.host), &o.port, o.prefix, sizeof(o.prefix))) {
        fprintf(stderr, "vllmc bench serve: %s\n", vllmc_last_error());
        return 2;
    }
    /* a base URL ending in /v1 and an endpoint starting with it name the same path once */
    const size_t pl = strlen(o.prefix);
    if (pl >= 3 && !strcmp(o.prefix + pl - 3, "/v1") && !strncmp(o.endpoint, "/v1/", 4)) o.prefix[pl - 3] = 0;
    if ((o.n_conc = parse_list(conc, o.conc, BS_MAX_LEVELS)) <= 0) {
        fprintf(stderr, "vllmc bench serve: --concurrency wants a list like 1,4,16,64 (each 1..4096), got '%s'\n", conc);
        return 2;
    }
    if (o.endpoint[0] != '/' || strlen(o.endpoint) > 256) { fprintf(stderr, "vllmc bench serve: --endpoint must be a path\n"); return 2; }
    o.chat = strstr(o.endpoint, "chat") != NULL;
    if (o.input_len < 1 || o.output_len < 1 || o.id_max < 1 || o.num_prompts < 0 || o.warmup < 0 || !(o.timeout_s > 0)) {
        fprintf(stderr, "vllmc bench serve: --input-len, --output-len, --id-max must be >= 1, --num-prompts, --warmup >= 0\n");
        return 2;
    }
    char **lines = NULL;
    int n_lines = 0;
    if (o.prompts_file && !(lines = read_lines(o.prompts_file, &n_lines))) {
        fprintf(stderr, "vllmc bench serve: %s\n", vllmc_last_error());
        return 2;
    }
    int rc = 0;
    if (o.ready_timeout_s > 0) { /* wait for a server that is still loading its model */
        const double t_end = vllmc_time_s() + o.ready_timeout_s;
        int status = 0;
        while (hc_request(o.host, o.port, "/health", NULL, NULL, 0, 5, &status, NULL, NULL) != VLLMC_OK || status != 200) {
            if (vllmc_time_s() > t_end) {
                fprintf(stderr, "vllmc bench serve: http://%s:%d/health not ready within %g s\n", o.host, o.port, o.ready_timeout_s);
                rc = 1;
                goto out;
            }
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    for (int w = 0; w < o.warmup; w++) {
        size_t len;
        char *body = make_body(&o, lines, n_lines, -1, w, &len);
        struct bs_req q;
        memset(&q, 0, sizeof(q));
        if (body) run_request(&o, body, len, &q);
        free(body);
        if (!body || !q.ok) {
            fprintf(stderr, "vllmc bench serve: the warm-up request to http://%s:%d%s%s failed: %s\n", o.host, o.port, o.prefix,
                    o.endpoint, body ? q.err : "out of memory");
            free(q.itl);
            rc = 1;
            goto out;
        }
        free(q.itl);
    }
    printf("vllmc bench serve: http://%s:%d%s%s, %s, %s prompts of %d tokens, %d output tokens, %s\n", o.host, o.port, o.prefix, o.endpoint,
           o.chat ? "chat" : "completions", lines ? "text" : "random-id", lines ? 0 : o.input_len, o.output_len,
           o.stream ? "streamed" : "not streamed");
    printf("%5s %6s %6s %8s %8s %10s %10s %9s %9s %9s %8s %8s %8s %8s %8s %8s\n", "conc", "ok", "failed", "dur_s", "req/s",
           "out_tok/s", "tot_tok/s", "ttft_mean", "ttft_p50", "ttft_p99", "tpot_mn", "tpot_p50", "tpot_p99", "itl_mean",
           "itl_p50", "itl_p99");
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "base_url", url);
    cJSON_AddStringToObject(root, "endpoint", o.endpoint);
    cJSON_AddNumberToObject(root, "input_len", lines ? 0 : o.input_len);
    cJSON_AddNumberToObject(root, "output_len", o.output_len);
    cJSON_AddBoolToObject(root, "stream", o.stream);
    cJSON *levels = cJSON_AddArrayToObject(root, "levels");
    int any_failed = 0;
    for (int l = 0; l < o.n_conc; l++) {
        const int n = o.num_prompts > 0 ? o.num_prompts : (4 * o.conc[l] > 8 ? 4 * o.conc[l] : 8);
        if (run_level(&o, lines, n_lines, l, o.conc[l], n, levels)) { rc = 1; break; }
        const cJSON *last = cJSON_GetArrayItem(levels, cJSON_GetArraySize(levels) - 1);
        any_failed |= cJSON_GetObjectItem(last, "failed")->valueint > 0;
    }
    printf("(latencies in ms; tpot = (e2e - ttft) / (output tokens - 1) per request, itl over every token gap)\n");
    if (o.json_path) {
        char *s = cJSON_Print(root);
        FILE *f = fopen(o.json_path, "w");
        if (!s || !f || fputs(s, f) < 0 || fputc('\n', f) < 0) {
            fprintf(stderr, "vllmc bench serve: cannot write %s\n", o.json_path);
            rc = 1;
        }
        if (f) fclose(f);
        free(s);
    }
    cJSON_Delete(root);
    if (any_failed && rc == 0) rc = 1;
out:
    for (int i = 0; i < n_lines; i++) free(lines[i]);
    free(lines);
    return rc;
}
