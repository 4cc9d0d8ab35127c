/* HTTP/1.1 response parser, SSE splitter and a blocking POST for the serving benchmark (see http_client.h). */
#include "server/http_client.h"
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "common/common.h"

enum { HC_STATUS, HC_HEADERS, HC_BODY_LEN, HC_CHUNK_SIZE, HC_CHUNK_DATA, HC_CHUNK_END, HC_TRAILER, HC_BODY_EOF, HC_DONE, HC_FAILED };

void hc_resp_init(struct hc_resp *r) {
    memset(r, 0, sizeof(*r));
    r->state = HC_STATUS;
    r->content_length = -1;
}

static vllmc_status resp_fail(struct hc_resp *r, const char *what) {
    r->state = HC_FAILED;
    return vllmc_errorf(VLLMC_ERR_CORRUPT, "http response: %s", what);
}

/* Digits of base 10 or 16 only (no sign, no spaces), at most max_digits of them. */
static bool parse_uint(const char *s, size_t n, int base, int max_digits, int64_t *out) {
    if (n == 0 || (int)n > max_digits) return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d;
        const char c = s[i];
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        v = v * base + d;
    }
    *out = v;
    return true;
}

static size_t trim_len(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    return n;
}

/* One complete line (without its CR LF) in the current state. */
static vllmc_status resp_line(struct hc_resp *r, const char *s, size_t n) {
    switch (r->state) {
    case HC_STATUS: {
        /* HTTP/1.x SSS[ reason] */
        if (n < 12 || memcmp(s, "HTTP/1.", 7) || !isdigit((unsigned char)s[7]) || s[8] != ' ') return resp_fail(r, "bad status line");
        int64_t code;
        if (!parse_uint(s + 9, 3, 10, 3, &code) || code < 100 || (n > 12 && s[12] != ' ')) return resp_fail(r, "bad status code");
        r->status = (int)code;
        r->state = HC_HEADERS;
        return VLLMC_OK;
    }
    case HC_HEADERS: {
        if (n == 0) { /* end of the head */
            if (r->status >= 100 && r->status < 200) { /* an interim response: the real one follows */
                hc_resp_init(r);
                return VLLMC_OK;
            }
            if (r->chunked) r->state = HC_CHUNK_SIZE;
            else if (r->content_length >= 0) {
                r->left = r->content_length;
                r->state = r->left ? HC_BODY_LEN : HC_DONE;
            } else r->state = HC_BODY_EOF;
            if (r->status == 204 || r->status == 304) r->state = HC_DONE;
            r->done = r->state == HC_DONE;
            return VLLMC_OK;
        }
        if (++r->n_headers > HC_MAX_HEADERS) return resp_fail(r, "too many headers");
        const char *colon = memchr(s, ':', n);
        if (!colon || colon == s) return resp_fail(r, "bad header line");
        const size_t kn = (size_t)(colon - s);
        const char *v = colon + 1;
        size_t vn = n - kn - 1;
        while (vn && (*v == ' ' || *v == '\t')) { v++; vn--; }
        vn = trim_len(v, vn);
        if (kn == 14 && !strncasecmp(s, "Content-Length", 14)) {
            int64_t len;
            if (!parse_uint(v, vn, 10, 13, &len)) return resp_fail(r, "bad Content-Length");
            if (r->content_length >= 0 && r->content_length != len) return resp_fail(r, "conflicting Content-Length");
            r->content_length = len;
        } else if (kn == 17 && !strncasecmp(s, "Transfer-Encoding", 17)) {
            if (vn == 7 && !strncasecmp(v, "chunked", 7)) r->chunked = true;
            else if (vn != 8 || strncasecmp(v, "identity", 8)) return resp_fail(r, "unsupported Transfer-Encoding");
        }
        return VLLMC_OK;
    }
    case HC_CHUNK_SIZE: {
        size_t k = 0;
        while (k < n && s[k] != ';') k++;
        int64_t len;
        if (!parse_uint(s, trim_len(s, k), 16, 10, &len)) return resp_fail(r, "bad chunk size");
        r->left = len;
        r->state = len ? HC_CHUNK_DATA : HC_TRAILER;
        return VLLMC_OK;
    }
    case HC_CHUNK_END:
        if (n) return resp_fail(r, "chunk data longer than its size");
        r->state = HC_CHUNK_SIZE;
        return VLLMC_OK;
    case HC_TRAILER:
        if (n == 0) { r->state = HC_DONE; r->done = true; }
        else if (++r->n_headers > HC_MAX_HEADERS) return resp_fail(r, "too many trailer lines");
        return VLLMC_OK;
    default:
        return resp_fail(r, "internal state");
    }
}

vllmc_status hc_resp_feed(struct hc_resp *r, const char *data, size_t size, size_t *used, hc_body_fn fn, void *user) {
    size_t i = 0;
    vllmc_status st = VLLMC_OK;
    *used = 0;
    if (r->state == HC_FAILED) return vllmc_errorf(VLLMC_ERR_CORRUPT, "http response: the parser already failed");
    while (i < size && r->state != HC_DONE && r->state != HC_FAILED) {
        if (r->state == HC_BODY_LEN || r->state == HC_CHUNK_DATA || r->state == HC_BODY_EOF) {
            size_t k = size - i;
            if (r->state != HC_BODY_EOF && (int64_t)k > r->left) k = (size_t)r->left;
            if (fn && k) fn(user, data + i, k);
            i += k;
            if (r->state != HC_BODY_EOF) {
                r->left -= (int64_t)k;
                if (r->left == 0) {
                    if (r->state == HC_CHUNK_DATA) r->state = HC_CHUNK_END;
                    else { r->state = HC_DONE; r->done = true; }
                }
            }
            continue;
        }
        /* line states: collect up to LF */
        const char c = data[i++];
        if (c == '\n') {
            size_t n = r->n_line;
            if (n && r->line[n - 1] == '\r') n--;
            r->n_line = 0;
            if ((st = resp_line(r, r->line, n)) != VLLMC_OK) break;
        } else {
            if (r->n_line >= HC_MAX_LINE) { st = resp_fail(r, "line too long"); break; }
            r->line[r->n_line++] = c;
        }
    }
    *used = i;
    return st;
}

vllmc_status hc_resp_eof(struct hc_resp *r) {
    if (r->state == HC_DONE) return VLLMC_OK;
    if (r->state == HC_BODY_EOF) { r->state = HC_DONE; r->done = true; return VLLMC_OK; }
    if (r->state == HC_FAILED) return vllmc_errorf(VLLMC_ERR_CORRUPT, "http response: the parser already failed");
    return resp_fail(r, r->status ? "connection closed before the body ended" : "connection closed before a response");
}

/* ---- server-sent events ---- */

void hc_sse_init(struct hc_sse *s) { memset(s, 0, sizeof(*s)); }

void hc_sse_free(struct hc_sse *s) {
    sbuf_free(&s->line);
    sbuf_free(&s->data);
    memset(s, 0, sizeof(*s));
}

/* One line (without its LF or CR): dispatches the event on an empty line. */
static int sse_line(struct hc_sse *s, const char *p, size_t n, hc_event_fn fn, void *user) {
    if (n == 0) {
        int rc = 0;
        if (s->has_data && fn) rc = fn(user, s->data.p ? s->data.p : "", s->data.n);
        s->data.n = 0;
        if (s->data.p) s->data.p[0] = 0;
        s->has_data = false;
        return rc ? 1 : 0;
    }
    if (p[0] == ':') return 0; /* a comment */
    size_t k = 0;
    while (k < n && p[k] != ':') k++;
    if (k != 4 || memcmp(p, "data", 4)) return 0; /* event:, id:, retry: and unknown fields carry nothing we use */
    const char *v = p + (k < n ? k + 1 : n);
    size_t vn = n - (size_t)(v - p);
    if (vn && *v == ' ') { v++; vn--; }
    if (s->data.n + vn + 1 > HC_MAX_EVENT) return vllmc_errorf(VLLMC_ERR_CORRUPT, "sse: an event over %u bytes", HC_MAX_EVENT);
    if (s->has_data) sbuf_add(&s->data, "\n", 1);
    sbuf_add(&s->data, v, vn);
    if (!s->data.p) sbuf_add(&s->data, "", 0);
    if (s->data.oom) return vllmc_errorf(VLLMC_ERR_OOM, "sse event");
    s->has_data = true;
    return 0;
}

int hc_sse_feed(struct hc_sse *s, const char *data, size_t size, hc_event_fn fn, void *user) {
    if (s->failed) return vllmc_errorf(VLLMC_ERR_CORRUPT, "sse: the parser already failed");
    size_t i = 0;
    while (i < size) {
        const char *nl = memchr(data + i, '\n', size - i);
        const size_t k = nl ? (size_t)(nl - (data + i)) : size - i;
        if (s->line.n + k > HC_MAX_EVENT) { s->failed = true; return vllmc_errorf(VLLMC_ERR_CORRUPT, "sse: a line over %u bytes", HC_MAX_EVENT); }
        if (!nl) { /* an unfinished line: keep it */
            sbuf_add(&s->line, data + i, k);
            if (s->line.oom) { s->failed = true; return vllmc_errorf(VLLMC_ERR_OOM, "sse line"); }
            return 0;
        }
        const char *lp = data + i;
        size_t ln = k;
        if (s->line.n) { /* completes a held line */
            sbuf_add(&s->line, data + i, k);
            if (s->line.oom) { s->failed = true; return vllmc_errorf(VLLMC_ERR_OOM, "sse line"); }
            lp = s->line.p;
            ln = s->line.n;
        }
        if (ln && lp[ln - 1] == '\r') ln--;
        int rc = sse_line(s, lp, ln, fn, user);
        s->line.n = 0;
        i += k + 1;
        if (rc < 0) { s->failed = true; return rc; }
        if (rc > 0) return 1;
    }
    return 0;
}

/* ---- URL and request ---- */

vllmc_status hc_parse_url(const char *url, char *host, size_t host_cap, int *port, char *prefix, size_t prefix_cap) {
    if (strncmp(url, "http://", 7)) return vllmc_errorf(VLLMC_ERR_INVALID, "url '%s': only http:// is supported", url);
    const char *h = url + 7, *e = h;
    while (*e && *e != ':' && *e != '/') e++;
    if (e == h || (size_t)(e - h) >= host_cap) return vllmc_errorf(VLLMC_ERR_INVALID, "url '%s': bad host", url);
    memcpy(host, h, (size_t)(e - h));
    host[e - h] = 0;
    *port = 80;
    if (*e == ':') {
        int64_t p;
        const char *d = ++e;
        while (*e && *e != '/') e++;
        if (!parse_uint(d, (size_t)(e - d), 10, 5, &p) || p < 1 || p > 65535) return vllmc_errorf(VLLMC_ERR_INVALID, "url '%s': bad port", url);
        *port = (int)p;
    }
    size_t n = strlen(e);
    while (n && e[n - 1] == '/') n--;
    if (n >= prefix_cap) return vllmc_errorf(VLLMC_ERR_INVALID, "url '%s': path too long", url);
    memcpy(prefix, e, n);
    prefix[n] = 0;
    return VLLMC_OK;
}

static int hc_connect(const char *host, int port, double timeout_s) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) { vllmc_errorf(VLLMC_ERR_IO, "resolve %s: %s", host, gai_strerror(rc)); return -1; }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    if (fd < 0) vllmc_errorf(VLLMC_ERR_IO, "connect %s:%d: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

vllmc_status hc_request(const char *host, int port, const char *path, const char *api_key, const char *body, size_t body_len,
                        double timeout_s, int *status, hc_body_fn fn, void *user) {
    *status = 0;
    int fd = hc_connect(host, port, timeout_s);
    if (fd < 0) return VLLMC_ERR_IO;
    char head[1024];
    char len_hdr[64] = "";
    if (body) snprintf(len_hdr, sizeof(len_hdr), "Content-Type: application/json\r\nContent-Length: %zu\r\n", body_len);
    int hn = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: */*\r\n%sConnection: close\r\n%s%s%s",
                      body ? "POST" : "GET", path, host, port, len_hdr, api_key ? "Authorization: Bearer " : "",
                      api_key ? api_key : "", api_key ? "\r\n" : "");
    if (hn < 0 || (size_t)hn + 3 > sizeof(head)) { close(fd); return vllmc_errorf(VLLMC_ERR_INVALID, "request head too long"); }
    memcpy(head + hn, "\r\n", 3);
    hn += 2;
    if (!send_all(fd, head, (size_t)hn) || (body && !send_all(fd, body, body_len))) {
        close(fd);
        return vllmc_errorf(VLLMC_ERR_IO, "send to %s:%d: %s", host, port, strerror(errno));
    }
    struct hc_resp r;
    hc_resp_init(&r);
    char buf[65536];
    vllmc_status st = VLLMC_OK;
    while (!r.done) {
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { st = vllmc_errorf(VLLMC_ERR_IO, "recv from %s:%d: %s", host, port, strerror(errno)); break; }
        if (k == 0) { st = hc_resp_eof(&r); break; }
        size_t used;
        if ((st = hc_resp_feed(&r, buf, (size_t)k, &used, fn, user)) != VLLMC_OK) break;
    }
    close(fd);
    *status = r.status;
    return st;
}
