/* A fixed pool of worker threads running parallel-for jobs.
 * threadpool_run(tp, fn, ctx, n_tasks) calls fn(ctx, i_task, i_thread) for every i_task in [0, n_tasks)
 * across the workers plus the calling thread and returns when all are done. Tasks are handed out
 * statically (task i goes to thread i % n_threads), so a result never depends on timing. */
#ifndef VLLMC_THREADPOOL_H
#define VLLMC_THREADPOOL_H

#include "common.h"

struct threadpool;
typedef void (*threadpool_fn)(void *ctx, int i_task, int i_thread);

/* n_threads <= 0 picks the number of online CPUs. Returns NULL (with an error set) on failure. */
struct threadpool *threadpool_create(int n_threads);
void threadpool_destroy(struct threadpool *tp); /* accepts NULL */
int threadpool_n_threads(const struct threadpool *tp);
/* tp may be NULL: then everything runs on the calling thread. */
void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks);

#endif
