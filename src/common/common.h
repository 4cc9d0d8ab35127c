/* Internal helpers shared by every module: error raising, assertions, logging, small utilities.
 * Errors: a failing function calls vllmc_errorf(status, fmt, ...) which stores the message in a
 * thread-local buffer (vllmc_last_error) and returns status, so `return vllmc_errorf(...)` reads well. */
#ifndef VLLMC_COMMON_H
#define VLLMC_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "vllmc.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define VLLMC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VLLMC_PRINTF(a, b)
#endif

vllmc_status vllmc_errorf(vllmc_status st, const char *fmt, ...) VLLMC_PRINTF(2, 3);
void vllmc_clear_error(void);

void vllmc_log(vllmc_log_level level, const char *fmt, ...) VLLMC_PRINTF(2, 3);
#define LOG_DEBUG(...) vllmc_log(VLLMC_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) vllmc_log(VLLMC_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...) vllmc_log(VLLMC_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) vllmc_log(VLLMC_LOG_ERROR, __VA_ARGS__)

/* For our own bugs only: stays on in release builds. Never for bad input. */
void vllmc_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define VLLMC_ASSERT(x) do { if (!(x)) vllmc_assert_fail(#x, __FILE__, __LINE__); } while (0)

#define VLLMC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VLLMC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Overflow-checked arithmetic for parsers: return 0 on overflow. */
static inline int checked_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int checked_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Monotonic wall clock in seconds. */
double vllmc_time_s(void);

/* Allocation that never returns NULL silently: returns NULL and sets an OOM error. */
void *vllmc_malloc(size_t n);
void *vllmc_calloc(size_t n, size_t size);
/* 64-byte aligned allocation, freed with vllmc_free_aligned. */
void *vllmc_malloc_aligned(size_t n);
void vllmc_free_aligned(void *p);

#ifdef __cplusplus
}
#endif

#endif
