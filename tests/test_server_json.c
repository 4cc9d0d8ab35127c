/* Unit tests of the server's request parsing and validation (src/server/server_api.c), error objects and
 * the reasoning splitter, on fresh random inputs:
 * - random valid requests (every field at random, some left out) are built with cJSON, printed, parsed,
 *   and every parsed field must equal what was put in (defaults where left out);
 * - each field given a wrong type or out-of-range value must fail with 400 naming that field;
 * - truncations and byte flips of valid bodies never crash and either parse or give a 400;
 * - the reasoning splitter fed random texts (with and without tags, tags at random places) in random
 *   pieces must give exactly what a plain whole-string reference split gives;
 * - the tool-call parser on texts built from known parts (plain text with partial and stray tags, valid
 *   Hermes blocks, malformed blocks, an unclosed block at the end) fed in random pieces must give exactly
 *   the calls of the valid blocks and every other byte as content; plus fixed odd cases. */
#include <string.h>
#include "server/server.h"
#include "test.h"

static int rnd(int n) { return (int)(test_rand_u64() % (unsigned long long)n); }

static char *rand_text(int max_len) {
    static const char *const pieces[] = {"a", "b", " ", "\n", "<", ">", "/", "think", "<think>", "</think>", "\xc3\xa9", "xyz", "\"", "\\"};
    struct sbuf b = {0};
    int n = rnd(max_len + 1);
    for (int i = 0; i < n; i++) sbuf_adds(&b, pieces[rnd((int)(sizeof(pieces) / sizeof(pieces[0])))]);
    sbuf_add(&b, "", 0);
    return b.p;
}

/* ---- parse of random valid requests ---- */
static void test_parse_random_valid(void) {
    for (int it = 0; it < 400; it++) {
        const bool chat = rnd(2);
        cJSON *o = cJSON_CreateObject();
        char *texts[4] = {0};
        int n_prompts = 1, ids_prompt = -1;
        int32_t ids[8];
        if (rnd(2)) cJSON_AddStringToObject(o, "model", "m");
        if (chat) {
            cJSON *ms = cJSON_AddArrayToObject(o, "messages");
            int nm = 1 + rnd(3);
            for (int i = 0; i < nm; i++) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", i == 0 ? "system" : (i % 2 ? "user" : "assistant"));
                texts[0] = rand_text(8);
                if (rnd(2)) cJSON_AddStringToObject(m, "content", texts[0]);
                else {
                    cJSON *parts = cJSON_AddArrayToObject(m, "content");
                    cJSON *p = cJSON_CreateObject();
                    cJSON_AddStringToObject(p, "type", "text");
                    cJSON_AddStringToObject(p, "text", texts[0]);
                    cJSON_AddItemToArray(parts, p);
                }
                free(texts[0]);
                texts[0] = NULL;
                cJSON_AddItemToArray(ms, m);
            }
        } else {
            int form = rnd(3);
            if (form == 0) {
                texts[0] = rand_text(10);
                cJSON_AddStringToObject(o, "prompt", texts[0]);
            } else if (form == 1) {
                n_prompts = 1 + rnd(3);
                cJSON *a = cJSON_AddArrayToObject(o, "prompt");
                for (int i = 0; i < n_prompts; i++) {
                    texts[i] = rand_text(6);
                    cJSON_AddItemToArray(a, cJSON_CreateString(texts[i]));
                }
            } else {
                ids_prompt = 1 + rnd(8);
                cJSON *a = cJSON_AddArrayToObject(o, "prompt");
                for (int i = 0; i < ids_prompt; i++) {
                    ids[i] = (int32_t)rnd(100000);
                    cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
                }
            }
        }
        int max_tokens = -1, n = 1, top_k = 0, min_tokens = 0, logprobs = -1;
        float temp = 1.0f, top_p = 1.0f, min_p = 0, pres = 0;
        bool stream = false, incl = false, ign = false;
        long long seed = -1;
        int n_stop = 0, n_bias = 0;
        char *stops[4] = {0};
        vllmc_logit_bias bias[6];
        if (rnd(2)) { max_tokens = 1 + rnd(1000); cJSON_AddNumberToObject(o, rnd(2) ? "max_tokens" : "max_completion_tokens", max_tokens); }
        if (rnd(2)) { n = 1 + rnd(4); cJSON_AddNumberToObject(o, "n", n); }
        if (rnd(2)) { temp = (float)rnd(200) / 100.0f; cJSON_AddNumberToObject(o, "temperature", temp); }
        if (rnd(2)) { top_p = (float)(1 + rnd(100)) / 100.0f; cJSON_AddNumberToObject(o, "top_p", top_p); }
        if (rnd(2)) { top_k = rnd(100) - 1; cJSON_AddNumberToObject(o, "top_k", top_k); }
        if (rnd(2)) { min_p = (float)rnd(100) / 100.0f; cJSON_AddNumberToObject(o, "min_p", min_p); }
        if (rnd(2)) { pres = (float)(rnd(400) - 200) / 100.0f; cJSON_AddNumberToObject(o, "presence_penalty", pres); }
        if (rnd(2)) { min_tokens = max_tokens > 0 ? rnd(max_tokens + 1) : rnd(5); cJSON_AddNumberToObject(o, "min_tokens", min_tokens); }
        if (rnd(2)) { seed = rnd(1 << 30); cJSON_AddNumberToObject(o, "seed", (double)seed); }
        if (rnd(2)) { ign = rnd(2); cJSON_AddBoolToObject(o, "ignore_eos", ign); }
        if (rnd(2)) {
            stream = true;
            cJSON_AddBoolToObject(o, "stream", true);
            if (rnd(2)) { incl = rnd(2); cJSON_AddItemToObject(o, "stream_options", cJSON_CreateObject()); cJSON_AddBoolToObject(cJSON_GetObjectItem(o, "stream_options"), "include_usage", incl); }
        }
        if (rnd(2)) {
            logprobs = rnd(6);
            if (chat) { cJSON_AddBoolToObject(o, "logprobs", true); cJSON_AddNumberToObject(o, "top_logprobs", logprobs); }
            else cJSON_AddNumberToObject(o, "logprobs", logprobs);
        }
        if (rnd(2)) {
            n_stop = 1 + rnd(3);
            cJSON *a = cJSON_AddArrayToObject(o, "stop");
            for (int i = 0; i < n_stop; i++) {
                do { free(stops[i]); stops[i] = rand_text(3); } while (!stops[i][0]);
                cJSON_AddItemToArray(a, cJSON_CreateString(stops[i]));
            }
        }
        if (rnd(2)) {
            n_bias = rnd(6);
            cJSON *b = cJSON_AddObjectToObject(o, "logit_bias");
            for (int i = 0; i < n_bias; i++) {
                char key[16];
                bias[i].id = (int32_t)(i * 1000 + rnd(1000)); /* distinct keys */
                bias[i].bias = (float)(rnd(20001) - 10000) / 100.0f;
                snprintf(key, sizeof(key), "%d", bias[i].id);
                cJSON_AddNumberToObject(b, key, bias[i].bias);
            }
        }
        if (rnd(2)) cJSON_AddStringToObject(o, "unknown_field", "ignored");
        if (!chat && max_tokens < 0 && min_tokens > 16) cJSON_DeleteItemFromObject(o, "min_tokens"), min_tokens = 0;
        char *body = cJSON_PrintUnformatted(o);
        struct srv_request r;
        struct srv_error e;
        vllmc_status st = srv_request_parse(chat ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, body, strlen(body), &r, &e);
        CHECK_MSG(st == VLLMC_OK, "%s: %s", body, e.message);
        if (st == VLLMC_OK) {
            CHECK(r.max_tokens == (max_tokens > 0 ? max_tokens : chat ? -1 : 16));
            CHECK(r.n == n && r.stream == stream && r.include_usage == incl);
            CHECK_NEAR(r.sp.temperature, temp, 1e-6);
            CHECK_NEAR(r.sp.top_p, top_p, 1e-6);
            CHECK(r.sp.top_k == top_k && r.sp.min_tokens == min_tokens && r.sp.ignore_eos == ign);
            CHECK_NEAR(r.sp.min_p, min_p, 1e-6);
            CHECK_NEAR(r.sp.presence_penalty, pres, 1e-6);
            CHECK(r.sp.seed == seed);
            CHECK(r.logprobs == logprobs && r.sp.logprobs == logprobs);
            CHECK(r.sp.n_stop == n_stop);
            CHECK(r.sp.n_logit_bias == n_bias && r.n_logit_bias == n_bias);
            for (int i = 0; i < n_bias && i < r.sp.n_logit_bias; i++)
                CHECK(r.sp.logit_bias[i].id == bias[i].id && r.sp.logit_bias[i].bias == bias[i].bias);
            for (int i = 0; i < n_stop && i < r.sp.n_stop; i++) CHECK(!strcmp(r.sp.stop[i], stops[i]));
            if (chat) CHECK(cJSON_IsArray(r.messages) && r.n_prompts == 0);
            else if (ids_prompt > 0) {
                CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == ids_prompt && !r.prompts[0].text);
                for (int i = 0; i < ids_prompt && i < r.prompts[0].n_ids; i++) CHECK(r.prompts[0].ids[i] == ids[i]);
            } else {
                CHECK(r.n_prompts == n_prompts);
                for (int i = 0; i < n_prompts && i < r.n_prompts; i++) CHECK(!strcmp(r.prompts[i].text, texts[i]));
            }
            srv_request_free(&r);
        }
        free(body);
        for (int i = 0; i < 4; i++) { free(texts[i]); free(stops[i]); }
        cJSON_Delete(o);
    }
}

/* ---- each field wrong: 400 naming it ---- */
static void test_parse_bad_fields(void) {
    static const struct { const char *field, *json; bool chat; } B[] = {
        {"max_tokens", "\"7\"", false},     {"max_tokens", "0", false},          {"max_tokens", "1.5", false},
        {"max_completion_tokens", "-3", true}, {"n", "0", false},             {"n", "1000", false},
        {"temperature", "-1", false},       {"temperature", "\"hot\"", true},   {"top_p", "0", false},
        {"top_p", "1.5", false},            {"top_k", "-2", false},             {"min_p", "2", false},
        {"presence_penalty", "3", false},   {"frequency_penalty", "[]", false}, {"repetition_penalty", "0", false},
        {"seed", "\"x\"", false},           {"stop", "5", false},               {"stop", "[\"a\", 1]", false},
        {"stop_token_ids", "[-1]", false},  {"logprobs", "21", false},          {"logprobs", "\"yes\"", true},
        {"top_logprobs", "30", true},       {"stream", "1", false},             {"logit_bias", "{\"x\": 1}", false},
        {"logit_bias", "{\"5\": 500}", false}, {"logit_bias", "{\"5\": \"-100\"}", false}, {"logit_bias", "{\" 5\": 1}", true},
        {"logit_bias", "{\"-5\": 1}", false}, {"logit_bias", "{\"99999999999\": 1}", false}, {"logit_bias", "[]", true},
        {"chat_template_kwargs", "[]", true}, {"tools", "{}", true},
        {"model", "5", false},              {"min_tokens", "-1", false},        {"echo", "\"no\"", false},
        {"ignore_eos", "0", false},
    };
    for (size_t i = 0; i < sizeof(B) / sizeof(B[0]); i++) {
        char body[512];
        snprintf(body, sizeof(body), "{%s, \"%s\": %s}", B[i].chat ? "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]" : "\"prompt\": \"hi\"",
                 B[i].field, B[i].json);
        struct srv_request r;
        struct srv_error e;
        vllmc_status st = srv_request_parse(B[i].chat ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, body, strlen(body), &r, &e);
        CHECK_MSG(st == VLLMC_ERR_INVALID && e.http == 400, "%s", body);
        CHECK_MSG(!strcmp(e.param, B[i].field) || (!strcmp(B[i].field, "top_logprobs") && !strcmp(e.param, "top_logprobs")), "%s -> param '%s'", body, e.param);
        CHECK(r.prompts == NULL && r.messages == NULL && r.model == NULL);
        srv_request_free(&r);
    }
    /* structure errors */
    static const char *const S1[] = {"", "{", "[]", "3", "\"x\"", "{\"prompt\": \"a\"} x", "{\"prompt\": null}", "{\"prompt\": []}",
                                     "{\"prompt\": [[1], \"a\", 3]}", "{\"prompt\": [[]]}", "{\"prompt\": [-1]}", "{\"prompt\": {}}",
                                     "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}", "{\"prompt\": \"a\", \"max_tokens\": 5, \"min_tokens\": 9}"};
    for (size_t i = 0; i < sizeof(S1) / sizeof(S1[0]); i++) {
        struct srv_request r;
        struct srv_error e;
        CHECK_MSG(srv_request_parse(SRV_EP_COMPLETIONS, S1[i], strlen(S1[i]), &r, &e) == VLLMC_ERR_INVALID && e.http == 400, "%s", S1[i]);
    }
    static const char *const S2[] = {"{}", "{\"messages\": \"hi\"}", "{\"messages\": []}", "{\"messages\": [5]}",
                                     "{\"messages\": [{\"content\": \"x\"}]}", "{\"messages\": [{\"role\": \"god\", \"content\": \"x\"}]}",
                                     "{\"messages\": [{\"role\": \"user\"}]}", "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]}",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}"};
    for (size_t i = 0; i < sizeof(S2) / sizeof(S2[0]); i++) {
        struct srv_request r;
        struct srv_error e;
        CHECK_MSG(srv_request_parse(SRV_EP_CHAT, S2[i], strlen(S2[i]), &r, &e) == VLLMC_ERR_INVALID && e.http == 400, "%s", S2[i]);
    }
    /* an assistant message with tool calls and no content is fine; arguments become an object */
    const char *ok = "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"r\", \"tool_calls\": "
                     "[{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}}]}, "
                     "{\"role\": \"tool\", \"tool_call_id\": \"c\", \"content\": \"2\"}]}";
    struct srv_request r;
    struct srv_error e;
    CHECK(srv_request_parse(SRV_EP_CHAT, ok, strlen(ok), &r, &e) == VLLMC_OK);
    const cJSON *m0 = cJSON_GetArrayItem(r.messages, 0);
    const cJSON *args = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(m0, "tool_calls"), 0), "function"), "arguments");
    CHECK(cJSON_IsObject(args) && cJSON_GetObjectItem(args, "a") && cJSON_GetObjectItem(args, "a")->valuedouble == 1);
    CHECK(!strcmp(cJSON_GetObjectItem(m0, "content")->valuestring, "") && cJSON_GetObjectItem(m0, "reasoning_content"));
    srv_request_free(&r);
}

/* ---- truncations and byte flips never crash ---- */
static void test_parse_mutations(void) {
    const char *base = "{\"model\": \"m\", \"prompt\": [\"ab\", \"cd\"], \"max_tokens\": 5, \"stop\": [\"x\"], \"n\": 2, "
                       "\"logprobs\": 2, \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"logit_bias\": {\"3\": 1}}";
    const size_t n = strlen(base);
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        size_t len = (size_t)rnd((int)n + 1);
        memcpy(buf, base, len);
        for (int k = rnd(3); k > 0 && len; k--) buf[rnd((int)len)] = (char)rnd(256);
        struct srv_request r;
        struct srv_error e;
        vllmc_status st = srv_request_parse(rnd(2) ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, buf, len, &r, &e);
        CHECK(st == VLLMC_OK || (st == VLLMC_ERR_INVALID && e.http == 400 && e.message[0]));
        srv_request_free(&r);
    }
}

static void test_error_json(void) {
    struct srv_error e;
    static const int codes[] = {400, 401, 404, 413, 429, 500, 503};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        char msg[64];
        snprintf(msg, sizeof(msg), "msg \"%d\"\n", (int)rnd(1000));
        srv_error_set(&e, codes[i], i % 2 ? "prompt" : NULL, "%s", msg);
        char *s = srv_error_json(&e);
        cJSON *j = cJSON_Parse(s);
        const cJSON *o = cJSON_GetObjectItem(j, "error");
        CHECK(cJSON_IsObject(o) && cJSON_GetArraySize(j) == 1);
        CHECK(!strcmp(cJSON_GetObjectItem(o, "message")->valuestring, msg));
        CHECK(!strcmp(cJSON_GetObjectItem(o, "type")->valuestring, srv_error_type(codes[i])));
        CHECK(cJSON_GetObjectItem(o, "code")->valuedouble == codes[i]);
        CHECK(i % 2 ? !strcmp(cJSON_GetObjectItem(o, "param")->valuestring, "prompt") : cJSON_IsNull(cJSON_GetObjectItem(o, "param")));
        cJSON_Delete(j);
        free(s);
    }
}

/* ---- reasoning split ---- */
static void think_ref(const char *t, bool in_reasoning, struct sbuf *rs, struct sbuf *ct) {
    size_t n = strlen(t);
    if (!in_reasoning) {
        if (strncmp(t, "<think>", 7) != 0) { sbuf_add(ct, t, n); return; }
        t += 7;
    }
    const char *e = strstr(t, "</think>");
    if (!e) { sbuf_adds(rs, t); return; }
    sbuf_add(rs, t, (size_t)(e - t));
    sbuf_adds(ct, e + 8);
}

static void test_think(void) {
    for (int it = 0; it < 3000; it++) {
        char *t = rand_text(12);
        const bool in_r = rnd(2);
        if (!in_r && rnd(2)) { /* often open with the tag */
            struct sbuf b = {0};
            sbuf_adds(&b, "<think>");
            sbuf_adds(&b, t);
            free(t);
            t = b.p;
        }
        struct sbuf r1 = {0}, c1 = {0}, r2 = {0}, c2 = {0};
        think_ref(t, in_r, &r1, &c1);
        struct srv_think th;
        srv_think_init(&th, in_r);
        size_t n = strlen(t);
        for (size_t off = 0; off < n;) {
            size_t k = (size_t)rnd(5);
            if (k > n - off) k = n - off;
            srv_think_feed(&th, t + off, k, &r2, &c2);
            off += k;
        }
        srv_think_flush(&th, &r2, &c2);
        CHECK_MSG(r1.n == r2.n && (r1.n == 0 || !memcmp(r1.p, r2.p, r1.n)), "reasoning of '%s' (%d)", t, in_r);
        CHECK_MSG(c1.n == c2.n && (c1.n == 0 || !memcmp(c1.p, c2.p, c1.n)), "content of '%s' (%d)", t, in_r);
        sbuf_free(&r1); sbuf_free(&c1); sbuf_free(&r2); sbuf_free(&c2);
        free(t);
    }
    CHECK(srv_prompt_opens_think("a<think>\n", 9));
    CHECK(srv_prompt_opens_think("<think>", 7));
    CHECK(!srv_prompt_opens_think("<think>\n\n</think>\n\n", 19));
    CHECK(!srv_prompt_opens_think("think>", 6));
}

/* stream_options.continuous_usage_stats: usage in every chunk, only together with include_usage */
static void test_continuous_usage(void) {
    static const struct { const char *so; bool incl, cont; } C[] = {
        {"{\"include_usage\": true, \"continuous_usage_stats\": true}", true, true},
        {"{\"continuous_usage_stats\": true}", false, false},
        {"{\"include_usage\": true}", true, false},
        {"{\"include_usage\": false, \"continuous_usage_stats\": true}", false, false},
    };
    for (size_t i = 0; i < sizeof(C) / sizeof(C[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": %s}", C[i].so);
        struct srv_request r;
        struct srv_error e;
        CHECK(srv_request_parse(SRV_EP_COMPLETIONS, body, strlen(body), &r, &e) == VLLMC_OK);
        CHECK_MSG(r.include_usage == C[i].incl && r.continuous_usage == C[i].cont, "%s", body);
        srv_request_free(&r);
    }
    const char *bad = "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"continuous_usage_stats\": 1}}";
    struct srv_request r;
    struct srv_error e;
    CHECK(srv_request_parse(SRV_EP_COMPLETIONS, bad, strlen(bad), &r, &e) == VLLMC_ERR_INVALID && e.http == 400);
    srv_request_free(&r);
}

/* ---- tool calls ---- */

static void tools_run(const char *text, size_t n, bool random_pieces, struct sbuf *content, struct srv_tools *t) {
    srv_tools_init(t);
    size_t at = 0;
    while (at < n) {
        size_t k = random_pieces ? 1 + (size_t)rnd(rnd(3) ? 4 : 40) : n;
        if (k > n - at) k = n - at;
        srv_tools_feed(t, text + at, k, content);
        at += k;
    }
    srv_tools_flush(t, content);
}

static void test_tools_fixed(void) {
    static const struct { const char *in, *content; int n; const char *name0, *args0; } C[] = {
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "", 1, "get_weather", "{\"city\":\"Paris\"}"},
        {"Sure.\n<tool_call>{\"name\":\"f\"}</tool_call>\nDone", "Sure.\n\nDone", 1, "f", "{}"},
        {"<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}</tool_call>", "", 1, "f", "{\"a\": 1}"},
        {"<tool_call>{\"name\":\"f\",\"parameters\":[1,2]}</tool_call>", "", 1, "f", "[1,2]"},
        {"<tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}</tool_call>", "", 2, "a", "{}"},
        {"<tool_call>{\"name\": 5}</tool_call>", "<tool_call>{\"name\": 5}</tool_call>", 0, NULL, NULL},
        {"<tool_call>{\"name\": \"\"}</tool_call>", "<tool_call>{\"name\": \"\"}</tool_call>", 0, NULL, NULL},
        {"<tool_call>{\"name\": \"f\"} x</tool_call>", "<tool_call>{\"name\": \"f\"} x</tool_call>", 0, NULL, NULL},
        {"<tool_call>[{\"name\": \"f\"}]</tool_call>", "<tool_call>[{\"name\": \"f\"}]</tool_call>", 0, NULL, NULL},
        {"<tool_call>{\"name\": \"f\"", "<tool_call>{\"name\": \"f\"", 0, NULL, NULL},
        {"<tool_call></tool_call>", "<tool_call></tool_call>", 0, NULL, NULL},
        {"</tool_call> <tool_ca", "</tool_call> <tool_ca", 0, NULL, NULL},
        {"<tool_call><tool_call>{\"name\":\"f\"}</tool_call>", "<tool_call><tool_call>{\"name\":\"f\"}</tool_call>", 0, NULL, NULL},
        {"<<tool_call>{\"name\":\"g\"}</tool_call>>", "<>", 1, "g", "{}"},
        {"", "", 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(C) / sizeof(C[0]); i++)
        for (int pieces = 0; pieces < 2; pieces++) {
            struct sbuf content = {0};
            struct srv_tools t;
            tools_run(C[i].in, strlen(C[i].in), pieces, &content, &t);
            const char *got = content.p ? content.p : "";
            CHECK_MSG(!strcmp(got, C[i].content) && t.n_calls == C[i].n, "case %zu: content '%s', %d calls", i, got, t.n_calls);
            if (C[i].n && t.n_calls) CHECK_MSG(!strcmp(t.calls[0].name, C[i].name0) && !strcmp(t.calls[0].arguments, C[i].args0),
                                               "case %zu: %s(%s)", i, t.calls[0].name, t.calls[0].arguments);
            if (i == 4 && t.n_calls == 2) CHECK(!strcmp(t.calls[1].name, "b"));
            srv_tools_free(&t);
            sbuf_free(&content);
        }
}

static void test_tools_random(void) {
    static const char *const text_pieces[] = {"a", " ", "\n", "<", ">", "/", "tool", "call", "_", "<tool_ca", "</tool_call>", "{", "}", "\"", "\xc3\xa9"};
    static const char *const bad_inside[] = {"{\"name\": 5}", "{\"arguments\": {}}", "not json", "{\"name\": \"f\"} trailing", "[1, 2]",
                                             "{\"name\": \"\"}", "{\"name\": \"f\", \"arguments\": {\"a\": 1}", "", "\n  \n", "<tool_call>"};
    static const char *const names[] = {"get_weather", "search", "f", "x_y.z"};
    for (int it = 0; it < 400; it++) {
        struct sbuf text = {0}, want = {0};
        char *want_name[16], *want_args[16];
        int n_want = 0;
        const int parts = rnd(8);
        int prev = -1;
        for (int k = 0; k < parts; k++) {
            int kind = rnd(3); /* 0 text, 1 valid block, 2 malformed block */
            if (kind == 0 && prev == 0) kind = 1 + rnd(2); /* no two text parts in a row (a tag across them) */
            if (kind == 1 && n_want == 16) kind = 2;
            if (kind == 0) {
                struct sbuf seg = {0};
                for (int j = rnd(10); j >= 0; j--) sbuf_adds(&seg, text_pieces[rnd((int)(sizeof(text_pieces) / sizeof(text_pieces[0])))]);
                if (strstr(seg.p, "<tool_call>")) { sbuf_free(&seg); continue; }
                sbuf_add(&text, seg.p, seg.n);
                sbuf_add(&want, seg.p, seg.n);
                sbuf_free(&seg);
            } else if (kind == 1) {
                cJSON *o = cJSON_CreateObject(), *a = NULL;
                const char *nm = names[rnd(4)];
                cJSON_AddStringToObject(o, "name", nm);
                const int form = rnd(4);
                if (form > 0) {
                    a = cJSON_CreateObject();
                    for (int j = rnd(3); j > 0; j--) {
                        char key[16];
                        snprintf(key, sizeof(key), "k%d", j);
                        if (rnd(2)) cJSON_AddNumberToObject(a, key, rnd(1000));
                        else cJSON_AddStringToObject(a, key, rnd(2) ? "</tool_call" : "v \"q\" <x>");
                    }
                }
                char *args = a ? cJSON_PrintUnformatted(a) : strdup("{}");
                if (form == 1) cJSON_AddItemToObject(o, "arguments", a);
                else if (form == 2) cJSON_AddItemToObject(o, "parameters", a);
                else if (form == 3) { cJSON_AddStringToObject(o, "arguments", args); cJSON_Delete(a); }
                char *js = rnd(2) ? cJSON_Print(o) : cJSON_PrintUnformatted(o);
                sbuf_adds(&text, "<tool_call>");
                sbuf_adds(&text, rnd(2) ? "\n" : "");
                sbuf_adds(&text, js);
                sbuf_adds(&text, rnd(2) ? "\n" : " ");
                sbuf_adds(&text, "</tool_call>");
                want_name[n_want] = strdup(nm);
                want_args[n_want++] = args;
                free(js);
                cJSON_Delete(o);
            } else {
                const char *in = bad_inside[rnd((int)(sizeof(bad_inside) / sizeof(bad_inside[0])))];
                sbuf_adds(&text, "<tool_call>"); sbuf_adds(&text, in); sbuf_adds(&text, "</tool_call>");
                sbuf_adds(&want, "<tool_call>"); sbuf_adds(&want, in); sbuf_adds(&want, "</tool_call>");
            }
            prev = kind;
        }
        if (rnd(4) == 0) { /* an unclosed block at the end stays content */
            sbuf_adds(&text, "<tool_call>{\"name\": \"f\"}");
            sbuf_adds(&want, "<tool_call>{\"name\": \"f\"}");
        }
        struct sbuf content = {0};
        struct srv_tools t;
        tools_run(text.p ? text.p : "", text.n, true, &content, &t);
        bool same = content.n == want.n && (want.n == 0 || !memcmp(content.p, want.p, want.n)) && t.n_calls == n_want;
        for (int k = 0; same && k < n_want; k++) same = !strcmp(t.calls[k].name, want_name[k]) && !strcmp(t.calls[k].arguments, want_args[k]);
        CHECK_MSG(same, "text '%s': content '%s' (want '%s'), %d calls (want %d)", text.p ? text.p : "", content.p ? content.p : "",
                  want.p ? want.p : "", t.n_calls, n_want);
        for (int k = 0; k < n_want; k++) { free(want_name[k]); free(want_args[k]); }
        srv_tools_free(&t);
        sbuf_free(&content);
        sbuf_free(&text);
        sbuf_free(&want);
    }
}

int main(void) {
    test_seed_auto("test_server_json");
    test_tools_fixed();
    test_tools_random();
    test_continuous_usage();
    test_parse_random_valid();
    test_parse_bad_fields();
    test_parse_mutations();
    test_error_json();
    test_think();
    return test_finish("test_server_json");
}
