/* The benchmark's HTTP/1.1 client parsers (src/server/http_client.c) on fresh random input: responses
 * with Content-Length, chunked (random chunk sizes, extensions, trailers), close-delimited bodies and an
 * interim 100 response, fed in random pieces, give back the exact body and stop at the response's end;
 * the SSE splitter gives the same events for any split of the stream (CRLF or LF, multi-line data,
 * comments, other fields); malformed framing, overlong lines and truncation are clean errors; URLs. */
#include <string.h>
#include "common/common.h"
#include "server/http_client.h"
#include "test.h"

static int rnd(int n) { return (int)(test_rand_u64() % (unsigned long long)n); }

static void body_sink(void *user, const char *p, size_t n) { sbuf_add(user, p, n); }

/* Feed s in random pieces; returns the status of the first failure (or OK) and the bytes consumed. */
static vllmc_status feed_pieces(struct hc_resp *r, const char *s, size_t n, struct sbuf *body, size_t *consumed) {
    size_t at = 0;
    *consumed = 0;
    while (at < n && !r->done) {
        size_t k = 1 + (size_t)rnd(rnd(4) ? 7 : 300);
        if (k > n - at) k = n - at;
        size_t used;
        vllmc_status st = hc_resp_feed(r, s + at, k, &used, body_sink, body);
        at += used;
        if (st) { *consumed = at; return st; }
        if (used < k) break;
    }
    *consumed = at;
    return VLLMC_OK;
}

static void rand_bytes(struct sbuf *b, size_t n) {
    for (size_t i = 0; i < n; i++) { char c = (char)rnd(256); sbuf_add(b, &c, 1); }
}

static void test_responses(void) {
    for (int it = 0; it < 600; it++) {
        struct sbuf body = {0}, msg = {0}, got = {0};
        const size_t n = (size_t)rnd(rnd(2) ? 50 : 5000);
        rand_bytes(&body, n);
        const int form = rnd(3); /* 0 length, 1 chunked, 2 close-delimited */
        int status = 200 + rnd(400);
        if (status == 204 || status == 304) status = 200; /* those have no body */
        char line[256];
        if (rnd(4) == 0) sbuf_adds(&msg, "HTTP/1.1 100 Continue\r\n\r\n");
        snprintf(line, sizeof(line), "HTTP/1.%d %d %s\r\n", rnd(2), status, rnd(2) ? "Some Reason" : "");
        if (rnd(2)) line[strlen(line) - 3] = 0, strcat(line, "\r\n"); /* no reason phrase, sometimes no space */
        sbuf_adds(&msg, line);
        sbuf_adds(&msg, rnd(2) ? "Content-Type: text/event-stream\r\n" : "X-A:b\r\n");
        if (form == 0) { snprintf(line, sizeof(line), "content-length:  %zu \r\n", n); sbuf_adds(&msg, line); }
        if (form == 1) sbuf_adds(&msg, rnd(2) ? "Transfer-Encoding: chunked\r\n" : "transfer-encoding:chunked\n");
        sbuf_adds(&msg, rnd(2) ? "\r\n" : "\n");
        if (form == 1) {
            size_t at = 0;
            while (at < n) {
                size_t k = 1 + (size_t)rnd(700);
                if (k > n - at) k = n - at;
                snprintf(line, sizeof(line), rnd(2) ? "%zx\r\n" : "%zX;ext=1\r\n", k);
                sbuf_adds(&msg, line);
                sbuf_add(&msg, body.p + at, k);
                sbuf_adds(&msg, "\r\n");
                at += k;
            }
            sbuf_adds(&msg, rnd(2) ? "0\r\n\r\n" : "0\r\nX-Trailer: 1\r\n\r\n");
        } else {
            sbuf_add(&msg, body.p ? body.p : "", n);
        }
        const size_t msg_len = msg.n;
        sbuf_adds(&msg, "HTTP/1.1 200 OK\r\n"); /* the next response on the connection: not consumed */
        struct hc_resp r;
        hc_resp_init(&r);
        size_t used = 0;
        vllmc_status st = feed_pieces(&r, msg.p, form == 2 ? msg_len : msg.n, &got, &used);
        CHECK_MSG(st == VLLMC_OK, "form %d: %s", form, vllmc_last_error());
        if (form == 2) {
            CHECK(!r.done);
            CHECK(hc_resp_eof(&r) == VLLMC_OK);
        }
        CHECK(r.done && r.status == status);
        if (form != 2) CHECK_MSG(used == msg_len, "form %d used %zu of %zu", form, used, msg_len);
        CHECK(got.n == n && (n == 0 || !memcmp(got.p, body.p, n)));
        /* truncated before the end: the close is an error (unless the body runs to the close) */
        if (form != 2 && n > 0) {
            hc_resp_init(&r);
            struct sbuf g2 = {0};
            size_t cut = (size_t)rnd((int)msg_len);
            feed_pieces(&r, msg.p, cut, &g2, &used);
            CHECK(hc_resp_eof(&r) == VLLMC_ERR_CORRUPT);
            sbuf_free(&g2);
        }
        sbuf_free(&body);
        sbuf_free(&msg);
        sbuf_free(&got);
    }
}

static void test_bad_responses(void) {
    static const char *const bad[] = {
        "HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 -20 OK\r\n\r\n", "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffff\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct hc_resp r;
        hc_resp_init(&r);
        size_t used;
        vllmc_status st = hc_resp_feed(&r, bad[i], strlen(bad[i]), &used, NULL, NULL);
        CHECK_MSG(st == VLLMC_ERR_CORRUPT && !r.done, "case %zu", i);
        CHECK(hc_resp_feed(&r, "x", 1, &used, NULL, NULL) == VLLMC_ERR_CORRUPT); /* stays failed */
    }
    /* a line over the limit */
    static char big[HC_MAX_LINE + 64];
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    memset(big + 20, 'a', sizeof(big) - 20);
    struct hc_resp r;
    hc_resp_init(&r);
    size_t used;
    CHECK(hc_resp_feed(&r, big, sizeof(big), &used, NULL, NULL) == VLLMC_ERR_CORRUPT);
    /* too many headers */
    hc_resp_init(&r);
    CHECK(hc_resp_feed(&r, "HTTP/1.1 200 OK\r\n", 17, &used, NULL, NULL) == VLLMC_OK);
    vllmc_status st = VLLMC_OK;
    for (int i = 0; i < HC_MAX_HEADERS + 2 && st == VLLMC_OK; i++) st = hc_resp_feed(&r, "A: b\r\n", 6, &used, NULL, NULL);
    CHECK(st == VLLMC_ERR_CORRUPT);
    /* eof with nothing read */
    hc_resp_init(&r);
    CHECK(hc_resp_eof(&r) == VLLMC_ERR_CORRUPT);
    /* 204 has no body even without a length */
    hc_resp_init(&r);
    CHECK(hc_resp_feed(&r, "HTTP/1.1 204 No Content\r\n\r\n", 27, &used, NULL, NULL) == VLLMC_OK && r.done && r.status == 204);
}

/* ---- SSE ---- */

struct ev_list { struct sbuf all; int n; int stop_after; };

static int ev_sink(void *user, const char *d, size_t n) {
    struct ev_list *l = user;
    char hdr[32];
    snprintf(hdr, sizeof(hdr), "[%zu]", n);
    sbuf_adds(&l->all, hdr);
    sbuf_add(&l->all, d, n);
    l->n++;
    return l->stop_after && l->n >= l->stop_after;
}

static void test_sse(void) {
    for (int it = 0; it < 400; it++) {
        struct sbuf stream = {0}, want = {0};
        const int n_ev = rnd(12);
        const char *eol = rnd(2) ? "\r\n" : "\n";
        int want_n = 0;
        for (int e = 0; e < n_ev; e++) {
            if (rnd(4) == 0) { sbuf_adds(&stream, ": keep-alive"); sbuf_adds(&stream, eol); }
            if (rnd(4) == 0) { sbuf_adds(&stream, "event: x"); sbuf_adds(&stream, eol); }
            const int lines = rnd(3);
            struct sbuf data = {0};
            for (int k = 0; k < lines; k++) {
                char d[64];
                int len = rnd(40);
                for (int j = 0; j < len; j++) d[j] = (char)(' ' + rnd(95));
                d[len] = 0;
                const bool space = rnd(2);
                sbuf_adds(&stream, space ? "data: " : "data:");
                if (!space && d[0] == ' ') d[0] = 'x'; /* (one leading space after the colon is dropped) */
                sbuf_adds(&stream, d);
                sbuf_adds(&stream, eol);
                if (k) sbuf_add(&data, "\n", 1);
                sbuf_adds(&data, d);
            }
            sbuf_adds(&stream, eol);
            if (lines) {
                char hdr[32];
                snprintf(hdr, sizeof(hdr), "[%zu]", data.n);
                sbuf_adds(&want, hdr);
                sbuf_add(&want, data.p ? data.p : "", data.n);
                want_n++;
            }
            sbuf_free(&data);
        }
        if (rnd(2)) sbuf_adds(&stream, "data: unfinished"); /* no blank line: not dispatched */
        struct hc_sse s;
        hc_sse_init(&s);
        struct ev_list got = {0};
        size_t at = 0;
        while (at < stream.n) {
            size_t k = 1 + (size_t)rnd(20);
            if (k > stream.n - at) k = stream.n - at;
            CHECK(hc_sse_feed(&s, stream.p + at, k, ev_sink, &got) == 0);
            at += k;
        }
        CHECK_MSG(got.n == want_n && got.all.n == want.n && (want.n == 0 || !memcmp(got.all.p, want.p, want.n)), "events %d/%d", got.n, want_n);
        hc_sse_free(&s);
        /* stop after the first event */
        if (want_n > 1) {
            struct ev_list one = {.stop_after = 1};
            hc_sse_init(&s);
            CHECK(hc_sse_feed(&s, stream.p, stream.n, ev_sink, &one) == 1 && one.n == 1);
            hc_sse_free(&s);
            sbuf_free(&one.all);
        }
        sbuf_free(&got.all);
        sbuf_free(&stream);
        sbuf_free(&want);
    }
    /* a line over the limit is an error, in one piece or many */
    char *big = malloc(HC_MAX_EVENT + 16);
    memcpy(big, "data: ", 6);
    memset(big + 6, 'a', HC_MAX_EVENT + 10);
    struct hc_sse s;
    hc_sse_init(&s);
    CHECK(hc_sse_feed(&s, big, HC_MAX_EVENT + 16, NULL, NULL) == VLLMC_ERR_CORRUPT);
    CHECK(hc_sse_feed(&s, "\n\n", 2, NULL, NULL) == VLLMC_ERR_CORRUPT);
    hc_sse_free(&s);
    hc_sse_init(&s);
    int rc = 0;
    for (size_t at = 0; at < HC_MAX_EVENT + 16 && rc == 0; at += 4096)
        rc = hc_sse_feed(&s, big + at, VLLMC_MIN((size_t)4096, HC_MAX_EVENT + 16 - at), NULL, NULL);
    CHECK(rc == VLLMC_ERR_CORRUPT);
    hc_sse_free(&s);
    /* many data lines adding up past the limit */
    hc_sse_init(&s);
    memcpy(big + 1024 * 1024 - 1, "\n", 1);
    rc = 0;
    for (int i = 0; i < 8 && rc == 0; i++) rc = hc_sse_feed(&s, big, 1024 * 1024, NULL, NULL);
    CHECK(rc == VLLMC_ERR_CORRUPT);
    hc_sse_free(&s);
    free(big);
}

static void test_url(void) {
    char host[64], prefix[64];
    int port;
    CHECK(hc_parse_url("http://127.0.0.1:8000", host, sizeof(host), &port, prefix, sizeof(prefix)) == VLLMC_OK);
    CHECK(!strcmp(host, "127.0.0.1") && port == 8000 && !strcmp(prefix, ""));
    CHECK(hc_parse_url("http://h/v1/", host, sizeof(host), &port, prefix, sizeof(prefix)) == VLLMC_OK);
    CHECK(!strcmp(host, "h") && port == 80 && !strcmp(prefix, "/v1"));
    static const char *const bad[] = {"https://h", "http://", "http://:80", "http://h:0", "http://h:65536", "http://h:8x/", "ftp://h",
                                      "http://h:123456"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_MSG(hc_parse_url(bad[i], host, sizeof(host), &port, prefix, sizeof(prefix)) == VLLMC_ERR_INVALID, "%s", bad[i]);
    char small[4];
    CHECK(hc_parse_url("http://longhost", small, sizeof(small), &port, prefix, sizeof(prefix)) == VLLMC_ERR_INVALID);
}

int main(void) {
    test_seed_auto("test_http_client");
    test_responses();
    test_bad_responses();
    test_sse();
    test_url();
    return test_finish("test_http_client");
}
