/* A small HTTP/1.1 client for `vllmc bench serve`: an incremental response parser (status line, headers,
 * Content-Length / chunked / close-delimited bodies) and a server-sent-events splitter, both fed
 * (data, size) in pieces of any length, plus one blocking request over a POSIX socket. It only needs to
 * talk to our own server, so it speaks plain http:// and no TLS, redirects or compression. Every length
 * is checked: a line over HC_MAX_LINE, a chunk size over 2^40, a body or event over its limit or any
 * malformed framing is VLLMC_ERR_CORRUPT with a message, never a crash. */
#ifndef VLLMC_HTTP_CLIENT_H
#define VLLMC_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/server.h"

#define HC_MAX_LINE 8192          /* status, header, chunk-size and trailer lines */
#define HC_MAX_HEADERS 128
#define HC_MAX_EVENT (4u << 20)   /* one SSE event's data */

/* Body bytes as they are decoded (chunk framing removed). */
typedef void (*hc_body_fn)(void *user, const char *p, size_t n);

struct hc_resp {
    int state;
    int status;               /* 0 until the status line is read */
    int64_t content_length;   /* -1: not given */
    bool chunked;
    int64_t left;             /* bytes left of the body (Content-Length) or of the current chunk */
    int n_headers;
    char line[HC_MAX_LINE];
    size_t n_line;
    bool done;                /* the whole response was read */
};
void hc_resp_init(struct hc_resp *r);
/* Consume bytes; body bytes go to fn (may be NULL). *used: bytes consumed, all of them unless the
 * response completed first. VLLMC_ERR_CORRUPT (message) on malformed framing; the parser then stays failed. */
vllmc_status hc_resp_feed(struct hc_resp *r, const char *data, size_t size, size_t *used, hc_body_fn fn, void *user);
/* The peer closed: VLLMC_OK when the response is complete (or its body runs to the close). */
vllmc_status hc_resp_eof(struct hc_resp *r);

/* Called with each event's data (its data: lines joined by '\n'); a nonzero return stops the feed. */
typedef int (*hc_event_fn)(void *user, const char *data, size_t n);

struct hc_sse {
    struct sbuf line;   /* the current line */
    struct sbuf data;   /* the current event's data */
    bool has_data, failed;
};
void hc_sse_init(struct hc_sse *s);
/* VLLMC_ERR_CORRUPT for a line or event over HC_MAX_EVENT, VLLMC_ERR_OOM; 1 (not an error) when fn asked to stop. */
int hc_sse_feed(struct hc_sse *s, const char *data, size_t size, hc_event_fn fn, void *user);
void hc_sse_free(struct hc_sse *s);

/* "http://host[:port][/prefix]" -> host, port (default 80) and the path prefix ("" if none). */
vllmc_status hc_parse_url(const char *url, char *host, size_t host_cap, int *port, char *prefix, size_t prefix_cap);

/* One request with "Connection: close": a POST of a JSON body (body != NULL) or a GET (body NULL); the
 * response body goes to fn as it arrives. timeout_s bounds each socket wait. Returns the HTTP status in
 * *status (0 if none was read). */
vllmc_status hc_request(const char *host, int port, const char *path, const char *api_key, const char *body, size_t body_len,
                        double timeout_s, int *status, hc_body_fn fn, void *user);

#endif
