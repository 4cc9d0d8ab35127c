/* Status codes, the thread-local last-error message, assertion failure, clock and allocators. */

#include <stdarg.h>
#include <string.h>
#include <time.h>
#include "common.h"

static _Thread_local char g_last_error[1024];

const char *vllmc_status_str(vllmc_status s) {
    switch (s) {
    case VLLMC_OK: return "ok";
    case VLLMC_ERR_INVALID: return "invalid argument";
    case VLLMC_ERR_CORRUPT: return "corrupt input";
    case VLLMC_ERR_OOM: return "out of memory";
    case VLLMC_ERR_UNSUPPORTED: return "unsupported";
    case VLLMC_ERR_IO: return "i/o error";
    }
    return "unknown status";
}

const char *vllmc_last_error(void) { return g_last_error; }
void vllmc_clear_error(void) { g_last_error[0] = 0; }

vllmc_status vllmc_errorf(vllmc_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
    va_end(ap);
    return st;
}

void vllmc_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "vllmc: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}

double vllmc_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *vllmc_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) vllmc_errorf(VLLMC_ERR_OOM, "out of memory allocating %zu bytes", n);
    return p;
}

void *vllmc_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) vllmc_errorf(VLLMC_ERR_OOM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *vllmc_malloc_aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64) != 0) {
        vllmc_errorf(VLLMC_ERR_OOM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    return p;
}

void vllmc_free_aligned(void *p) { free(p); }
