/* libFuzzer target for the benchmark client's parsers (src/server/http_client.c) over (data, size): the
 * HTTP response parser fed the bytes in one piece and in two must agree (status, completion, body), and
 * the body never outgrows the input; the SSE splitter fed the bytes whole and split gives the same events. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/http_client.h"

static void sink(void *user, const char *p, size_t n) { sbuf_add(user, p, n); }

static int ev(void *user, const char *d, size_t n) {
    struct sbuf *b = user;
    char len[24];
    int k = snprintf(len, sizeof(len), "%zu:", n);
    sbuf_add(b, len, (size_t)k);
    sbuf_add(b, d, n);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    const size_t cut = size ? data[0] % (size + 1) : 0;
    struct hc_resp a, b;
    struct sbuf ba = {0}, bb = {0};
    size_t ua = 0, ub1 = 0, ub2 = 0;
    hc_resp_init(&a);
    hc_resp_init(&b);
    vllmc_status sa = hc_resp_feed(&a, p, size, &ua, sink, &ba);
    vllmc_status sb = hc_resp_feed(&b, p, cut, &ub1, sink, &bb);
    if (sb == VLLMC_OK && !b.done) sb = hc_resp_feed(&b, p + cut, size - cut, &ub2, sink, &bb);
    if ((sa == VLLMC_OK) != (sb == VLLMC_OK)) abort();
    if (sa == VLLMC_OK) {
        if (a.done != b.done || a.status != b.status || ua != ub1 + ub2 || ua > size) abort();
        if (ba.n != bb.n || (ba.n && memcmp(ba.p, bb.p, ba.n))) abort();
        hc_resp_eof(&a);
    }
    if (ba.n > size) abort();
    struct hc_sse s1, s2;
    struct sbuf e1 = {0}, e2 = {0};
    hc_sse_init(&s1);
    hc_sse_init(&s2);
    int r1 = hc_sse_feed(&s1, p, size, ev, &e1);
    int r2 = hc_sse_feed(&s2, p, cut, ev, &e2);
    if (r2 == 0) r2 = hc_sse_feed(&s2, p + cut, size - cut, ev, &e2);
    if (r1 != r2 || e1.n != e2.n || (e1.n && memcmp(e1.p, e2.p, e1.n))) abort();
    hc_sse_free(&s1);
    hc_sse_free(&s2);
    sbuf_free(&ba); sbuf_free(&bb); sbuf_free(&e1); sbuf_free(&e2);
    return 0;
}
