/* Tool calls in a chat model's output, in the Hermes form Qwen models use:
 *     <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
 * one or several. A block whose inside is one JSON object with a non-empty string "name" (and optional
 * "arguments" / "parameters") becomes a call; its arguments are kept as JSON text (a string value as it
 * is, anything else printed compactly, none: "{}"). Everything else, malformed blocks and an unclosed
 * block included, stays content byte for byte. The parser is incremental: text is fed in any pieces and
 * gives the same content and calls as one feed; a possible start of "<tool_call>" and an open block are
 * held back until they are decided (the flush at the end gives back whatever is still held). */
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "common/common.h"
#include "server/server.h"

static const char TC_OPEN[] = "<tool_call>", TC_CLOSE[] = "</tool_call>";
#define TC_OPEN_LEN (sizeof(TC_OPEN) - 1)
#define TC_CLOSE_LEN (sizeof(TC_CLOSE) - 1)

void srv_tools_init(struct srv_tools *t) { memset(t, 0, sizeof(*t)); }

void srv_tools_free(struct srv_tools *t) {
    for (int i = 0; i < t->n_calls; i++) { free(t->calls[i].name); free(t->calls[i].arguments); }
    free(t->calls);
    sbuf_free(&t->hold);
    memset(t, 0, sizeof(*t));
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A call from a block's inside, or false when it is not one. */
static bool parse_call(struct srv_tools *t, const char *s, size_t n) {
    while (n && is_ws(*s)) { s++; n--; }
    while (n && is_ws(s[n - 1])) n--;
    if (n == 0 || s[0] != '{') return false;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
    if (!j) return false;
    bool ok = false;
    char *name = NULL, *args = NULL;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (end != s + n || !cJSON_IsObject(j) || !cJSON_IsString(nm) || !nm->valuestring[0]) goto out;
    name = strdup(nm->valuestring);
    if (!a || cJSON_IsNull(a)) args = strdup("{}");
    else if (cJSON_IsString(a)) args = strdup(a->valuestring);
    else args = cJSON_PrintUnformatted(a);
    if (!name || !args) { t->oom = true; goto out; }
    if (t->n_calls == t->cap_calls) {
        int cap = t->cap_calls ? 2 * t->cap_calls : 4;
        struct srv_tool_call *v = realloc(t->calls, (size_t)cap * sizeof(*v));
        if (!v) { t->oom = true; goto out; }
        t->calls = v;
        t->cap_calls = cap;
    }
    t->calls[t->n_calls].name = name;
    t->calls[t->n_calls].arguments = args;
    t->n_calls++;
    name = args = NULL;
    ok = true;
out:
    free(name);
    free(args);
    cJSON_Delete(j);
    return ok;
}

/* The longest suffix of s[0, n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag, size_t tag_len) {
    for (size_t k = tag_len - 1 < n ? tag_len - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *tag, size_t tag_len) {
    if (n < tag_len) return NULL;
    for (const char *p = s; (p = memchr(p, tag[0], (size_t)(s + n - p))) != NULL; p++) {
        if ((size_t)(s + n - p) < tag_len) return NULL;
        if (!memcmp(p, tag, tag_len)) return p;
    }
    return NULL;
}

void srv_tools_feed(struct srv_tools *t, const char *s, size_t n, struct sbuf *content) {
    if (n == 0) return;
    /* work on hold + s: hold is either a partial "<tool_call>" (outside) or an open block (inside) */
    sbuf_add(&t->hold, s, n);
    if (t->hold.oom) { t->oom = true; return; }
    size_t at = 0;
    const char *p = t->hold.p;
    const size_t len = t->hold.n;
    for (;;) {
        if (!t->in_block) {
            const char *o = find(p + at, len - at, TC_OPEN, TC_OPEN_LEN);
            if (!o) {
                const size_t keep = partial_tag(p + at, len - at, TC_OPEN, TC_OPEN_LEN);
                sbuf_add(content, p + at, len - at - keep);
                at = len - keep;
                break;
            }
            sbuf_add(content, p + at, (size_t)(o - (p + at)));
            at = (size_t)(o - p);
            t->in_block = true;
        } else {
            const char *body = p + at + TC_OPEN_LEN;
            const char *c = find(body, (size_t)(p + len - body), TC_CLOSE, TC_CLOSE_LEN);
            if (!c) break; /* the block is still open: hold it */
            const size_t block_end = (size_t)(c - p) + TC_CLOSE_LEN;
            if (!parse_call(t, body, (size_t)(c - body))) sbuf_add(content, p + at, block_end - at);
            at = block_end;
            t->in_block = false;
        }
    }
    /* keep the undecided rest */
    memmove(t->hold.p, t->hold.p + at, len - at);
    t->hold.n = len - at;
    t->hold.p[t->hold.n] = 0;
}

void srv_tools_flush(struct srv_tools *t, struct sbuf *content) {
    if (t->hold.n) sbuf_add(content, t->hold.p, t->hold.n);
    t->hold.n = 0;
    if (t->hold.p) t->hold.p[0] = 0;
    t->in_block = false;
}
