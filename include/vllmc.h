/* vllmc.h: the one public C API of vllm.c.
 * Every function returns a vllmc_status; on failure vllmc_last_error() names the problem.
 * Handles are opaque; whoever creates one destroys it. */
#ifndef VLLMC_H
#define VLLMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VLLMC_VERSION "0.1.0"

typedef enum {
    VLLMC_OK = 0,
    VLLMC_ERR_INVALID = -1,     /* bad argument, flag or request */
    VLLMC_ERR_CORRUPT = -2,     /* bad file contents */
    VLLMC_ERR_OOM = -3,         /* out of host or device memory */
    VLLMC_ERR_UNSUPPORTED = -4, /* valid, but not implemented here */
    VLLMC_ERR_IO = -5,          /* open/read/mmap failed */
} vllmc_status;

const char *vllmc_status_str(vllmc_status s);

/* The message of the last error raised on this thread ("" if none). Valid until the next
 * failing call on the same thread. */
const char *vllmc_last_error(void);

typedef enum { VLLMC_LOG_DEBUG = 0, VLLMC_LOG_INFO = 1, VLLMC_LOG_WARN = 2, VLLMC_LOG_ERROR = 3 } vllmc_log_level;
typedef void (*vllmc_log_fn)(vllmc_log_level level, const char *msg, void *user);

/* Redirect all library output; NULL restores the default (stderr, INFO and above). */
void vllmc_log_set(vllmc_log_fn fn, void *user);
void vllmc_log_set_level(vllmc_log_level min_level);

#ifdef __cplusplus
}
#endif
#endif
