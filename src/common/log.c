/* Logging: every message of the library goes through vllmc_log, which an embedder can redirect. */
#include <stdarg.h>
#include <stdio.h>
#include "common.h"

static vllmc_log_fn g_log_fn;
static void *g_log_user;
static vllmc_log_level g_log_min = VLLMC_LOG_INFO;

void vllmc_log_set(vllmc_log_fn fn, void *user) { g_log_fn = fn; g_log_user = user; }
void vllmc_log_set_level(vllmc_log_level min_level) { g_log_min = min_level; }

void vllmc_log(vllmc_log_level level, const char *fmt, ...) {
    if (level < g_log_min) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (g_log_fn) { g_log_fn(level, buf, g_log_user); return; }
    static const char *names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "vllmc %s: %s\n", names[level & 3], buf);
}
