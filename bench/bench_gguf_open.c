/* Times gguf_file_open + gguf_file_close on one file: cold-ish (the file's pages dropped from the
 * page cache with POSIX_FADV_DONTNEED before each open) and warm, median of N runs, and how much
 * of the file the open left resident (mincore) to show that tensor data is not read.
 * usage: bench_gguf_open FILE.gguf [RUNS=5]
 * build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_gguf_open.c build/libvllmc.a -lm -pthread */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "gguf/gguf.h"

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Resident bytes of the file's mapping right after opening it. */
static uint64_t bench_resident(const struct gguf_file *f) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t n_pages = (f->map_size + (uint64_t)page - 1) / (uint64_t)page, n = 0;
    unsigned char *vec = malloc(n_pages);
    if (!vec || mincore(f->map, f->map_size, vec) != 0) { free(vec); return 0; }
    for (uint64_t i = 0; i < n_pages; i++) n += vec[i] & 1;
    free(vec);
    return n * (uint64_t)page;
}

static int bench_run(const char *path, int runs, bool cold, double *med, double *lo, double *hi, uint64_t *resident) {
    double *t = calloc((size_t)runs, sizeof(double));
    for (int r = 0; r < runs; r++) {
        if (cold) bench_drop_cache(path);
        struct gguf_file *f = NULL;
        double t0 = vllmc_time_s();
        vllmc_status st = gguf_file_open(path, &f);
        double t1 = vllmc_time_s();
        if (st != VLLMC_OK) { fprintf(stderr, "%s\n", vllmc_last_error()); free(t); return 1; }
        if (r == runs - 1) *resident = bench_resident(f);
        gguf_file_close(f);
        t[r] = t1 - t0;
    }
    qsort(t, (size_t)runs, sizeof(double), bench_cmp);
    *med = t[runs / 2];
    *lo = t[0];
    *hi = t[runs - 1];
    free(t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_gguf_open FILE.gguf [RUNS]\n"); return 2; }
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (runs < 1) runs = 1;
    struct gguf_file *f = NULL;
    if (gguf_file_open(argv[1], &f) != VLLMC_OK) { fprintf(stderr, "%s\n", vllmc_last_error()); return 1; }
    printf("%s: %.2f GiB, %llu kvs, %llu tensors, metadata+infos %.2f MiB\n", argv[1],
           (double)f->map_size / (1 << 30), (unsigned long long)f->ctx->n_kv, (unsigned long long)f->ctx->n_tensors,
           (double)f->ctx->data_offset / (1 << 20));
    gguf_file_close(f);
    for (int cold = 1; cold >= 0; cold--) {
        double med, lo, hi;
        uint64_t res = 0;
        if (bench_run(argv[1], runs, cold, &med, &lo, &hi, &res)) return 1;
        printf("%-5s open+close: median %.3f ms (min %.3f, max %.3f) over %d runs; resident after open %.2f MiB\n",
               cold ? "cold" : "warm", med * 1e3, lo * 1e3, hi * 1e3, runs, (double)res / (1 << 20));
    }
    return 0;
}
