/* A GGUF file opened with one read-only private mmap; the parsed ctx points into the mapping.
 * Opening reads only the header and tensor infos (the pages the parser touches); tensor data is
 * left to be paged in by whoever uses it, or read ahead on request with gguf_file_prefetch. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gguf.h"

/* Read ahead this much of the file start before parsing: one large I/O instead of a fault per
 * readahead window over the metadata (vocabularies make it a few MiB). */
#define GGUF_HEADER_READAHEAD (16ull << 20)

vllmc_status gguf_file_open(const char *path, struct gguf_file **out) {
    *out = NULL;
    if (!path) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf: NULL path");
    struct gguf_file *f = vllmc_calloc(1, sizeof(*f));
    if (!f) return VLLMC_ERR_OOM;
    f->fd = -1;
    vllmc_status st;
    if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        st = vllmc_errorf(VLLMC_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        st = vllmc_errorf(VLLMC_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = vllmc_errorf(VLLMC_ERR_IO, "gguf: '%s' is not a regular file", path);
        goto fail;
    }
    f->map_size = (uint64_t)sb.st_size;
    if (f->map_size == 0) {
        st = vllmc_errorf(VLLMC_ERR_CORRUPT, "gguf: '%s': truncated: file is empty", path);
        goto fail;
    }
    void *m = mmap(NULL, (size_t)f->map_size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (m == MAP_FAILED) {
        st = vllmc_errorf(VLLMC_ERR_IO, "gguf: cannot mmap '%s' (%llu bytes): %s", path,
                          (unsigned long long)f->map_size, strerror(errno));
        goto fail;
    }
    f->map = m;
    madvise(f->map, (size_t)VLLMC_MIN(f->map_size, GGUF_HEADER_READAHEAD), MADV_WILLNEED);
    if ((st = gguf_parse(f->map, f->map_size, &f->ctx)) != VLLMC_OK) {
        /* Prefix the file name, keep the parser's message. */
        char msg[900];
        snprintf(msg, sizeof(msg), "%s", vllmc_last_error());
        vllmc_errorf(st, "%s: %s", path, msg);
        goto fail;
    }
    *out = f;
    return VLLMC_OK;
fail:
    gguf_file_close(f);
    return st;
}

void gguf_file_prefetch(const struct gguf_file *f) {
    if (!f || !f->map || !f->ctx || f->ctx->data_offset >= f->map_size) return;
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = f->ctx->data_offset & ~(uint64_t)(page > 0 ? page - 1 : 4095);
    madvise((uint8_t *)f->map + start, (size_t)(f->map_size - start), MADV_WILLNEED);
}

void gguf_file_close(struct gguf_file *f) {
    if (!f) return;
    gguf_free(f->ctx);
    if (f->map) munmap(f->map, (size_t)f->map_size);
    if (f->fd >= 0) close(f->fd);
    free(f);
}
