/* Thread pool: workers sleep on a condition variable between jobs; a job is a generation number.
 * Invariant: a job's fn is only called between threadpool_run's start and its return. */

#include <pthread.h>
#include <unistd.h>
#include "threadpool.h"

struct threadpool {
    int n_threads; /* workers + the caller */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    uint64_t generation;
    int n_pending;
    int stop;
    threadpool_fn fn;
    void *ctx;
    int n_tasks;
};

struct worker_arg { struct threadpool *tp; int i_thread; };

static void run_share(struct threadpool *tp, int i_thread) {
    for (int i = i_thread; i < tp->n_tasks; i += tp->n_threads) tp->fn(tp->ctx, i, i_thread);
}

static void *worker_main(void *p) {
    struct worker_arg a = *(struct worker_arg *)p;
    free(p);
    struct threadpool *tp = a.tp;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&tp->mu);
        while (!tp->stop && tp->generation == seen) pthread_cond_wait(&tp->cv_start, &tp->mu);
        if (tp->stop) { pthread_mutex_unlock(&tp->mu); return NULL; }
        seen = tp->generation;
        pthread_mutex_unlock(&tp->mu);
        run_share(tp, a.i_thread);
        pthread_mutex_lock(&tp->mu);
        if (--tp->n_pending == 0) pthread_cond_signal(&tp->cv_done);
        pthread_mutex_unlock(&tp->mu);
    }
}

struct threadpool *threadpool_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    struct threadpool *tp = vllmc_calloc(1, sizeof(*tp));
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv_start, NULL);
    pthread_cond_init(&tp->cv_done, NULL);
    tp->workers = vllmc_calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->workers) { threadpool_destroy(tp); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *a = malloc(sizeof(*a));
        if (!a) { tp->n_threads = i; threadpool_destroy(tp); vllmc_errorf(VLLMC_ERR_OOM, "thread pool"); return NULL; }
        a->tp = tp; a->i_thread = i;
        if (pthread_create(&tp->workers[i], NULL, worker_main, a) != 0) {
            free(a); tp->n_threads = i; threadpool_destroy(tp);
            vllmc_errorf(VLLMC_ERR_OOM, "cannot start thread %d", i);
            return NULL;
        }
    }
    return tp;
}

void threadpool_destroy(struct threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->stop = 1;
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);
    if (tp->workers)
        for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i], NULL);
    free(tp->workers);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv_start);
    pthread_cond_destroy(&tp->cv_done);
    free(tp);
}

int threadpool_n_threads(const struct threadpool *tp) { return tp ? tp->n_threads : 1; }

void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    if (!tp || tp->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn; tp->ctx = ctx; tp->n_tasks = n_tasks;
    tp->n_pending = tp->n_threads - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->cv_start);
    pthread_mutex_unlock(&tp->mu);
    run_share(tp, 0);
    pthread_mutex_lock(&tp->mu);
    while (tp->n_pending > 0) pthread_cond_wait(&tp->cv_done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
