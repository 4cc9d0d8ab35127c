/* libFuzzer target for the OpenAI request parser (src/server/server_api.c) over (data, size): both
 * endpoints, the error object of a refusal, and the reasoning splitter and the tool-call parser
 * (server_tools.c) fed the same bytes in two pieces, which must give what one feed gives. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    for (int ep = 0; ep < 2; ep++) {
        struct srv_request r;
        struct srv_error e;
        vllmc_status st = srv_request_parse(ep ? SRV_EP_CHAT : SRV_EP_COMPLETIONS, p, size, &r, &e);
        if (st == VLLMC_OK) {
            if (r.n < 1 || (ep == 0 && r.n_prompts < 1) || (ep == 1 && !r.messages)) abort();
            for (int i = 0; i < r.sp.n_stop; i++)
                if (!r.sp.stop[i] || !r.sp.stop[i][0]) abort();
        } else {
            if (e.http != 400 && e.http != 500) abort();
            char *s = srv_error_json(&e);
            free(s);
        }
        srv_request_free(&r);
    }
    struct sbuf r1 = {0}, c1 = {0}, r2 = {0}, c2 = {0};
    struct srv_think a, b;
    const bool in_r = size && (data[0] & 1);
    srv_think_init(&a, in_r);
    srv_think_init(&b, in_r);
    srv_think_feed(&a, p, size, &r1, &c1);
    srv_think_flush(&a, &r1, &c1);
    const size_t cut = size / 2;
    srv_think_feed(&b, p, cut, &r2, &c2);
    srv_think_feed(&b, p + cut, size - cut, &r2, &c2);
    srv_think_flush(&b, &r2, &c2);
    if (r1.n != r2.n || c1.n != c2.n || (r1.n && memcmp(r1.p, r2.p, r1.n)) || (c1.n && memcmp(c1.p, c2.p, c1.n))) abort();
    if (r1.n + c1.n > size) abort();
    sbuf_free(&r1); sbuf_free(&c1); sbuf_free(&r2); sbuf_free(&c2);
    struct srv_tools t1, t2;
    struct sbuf k1 = {0}, k2 = {0};
    srv_tools_init(&t1);
    srv_tools_init(&t2);
    srv_tools_feed(&t1, p, size, &k1);
    srv_tools_flush(&t1, &k1);
    srv_tools_feed(&t2, p, cut, &k2);
    srv_tools_feed(&t2, p + cut, size - cut, &k2);
    srv_tools_flush(&t2, &k2);
    if (k1.n != k2.n || (k1.n && memcmp(k1.p, k2.p, k1.n)) || t1.n_calls != t2.n_calls || k1.n > size) abort();
    for (int i = 0; i < t1.n_calls; i++)
        if (!t1.calls[i].name[0] || strcmp(t1.calls[i].name, t2.calls[i].name) || strcmp(t1.calls[i].arguments, t2.calls[i].arguments)) abort();
    srv_tools_free(&t1);
    srv_tools_free(&t2);
    sbuf_free(&k1); sbuf_free(&k2);
    return 0;
}
