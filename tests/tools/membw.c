/* Read bandwidth probe: N threads each stream their slice of a 1 GiB buffer (64-bit loads, summed so
 * the loads stay), 7 times; prints every run and the median in GB/s. usage: membw [THREADS] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES (1ull << 30)
static uint64_t *buf;
static int n_threads;
static volatile uint64_t sinks[64];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *reader(void *arg) {
    long i = (long)arg;
    size_t n = BYTES / 8 / (size_t)n_threads;
    const uint64_t *p = buf + (size_t)i * n;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t k = 0; k + 4 <= n; k += 4) { s0 += p[k]; s1 += p[k + 1]; s2 += p[k + 2]; s3 += p[k + 3]; }
    sinks[i] = s0 + s1 + s2 + s3;
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    n_threads = argc > 1 ? atoi(argv[1]) : 1;
    if (n_threads < 1 || n_threads > 64) return 2;
    buf = malloc(BYTES);
    if (!buf) return 1;
    memset(buf, 1, BYTES);
    double gbs[7];
    for (int r = 0; r < 7; r++) {
        pthread_t th[64];
        double t = now_s();
        for (long i = 0; i < n_threads; i++) pthread_create(&th[i], NULL, reader, (void *)i);
        for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
        gbs[r] = (double)BYTES / (now_s() - t) / 1e9;
        printf("%.1f ", gbs[r]);
    }
    qsort(gbs, 7, sizeof(double), cmp_d);
    printf("| median %.1f GB/s (%d threads)\n", gbs[3], n_threads);
    return sinks[0] == 42 ? 3 : 0;
}
