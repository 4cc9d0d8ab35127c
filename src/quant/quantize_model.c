/* Whole-model quantization: read a GGUF (mmap), choose every tensor's type with the qmix policy,
 * convert the tensors in parallel into one output buffer, then write metadata + tensors with the GGUF
 * writer to OUT.tmp and rename it to OUT. Tensors, their order and the metadata are llama-quantize's:
 * tensors in its processing order (qmix_name_cmp), input kvs copied in order except general.file_type /
 * general.quantization_version (re-added last) and split.* (dropped).
 * Work split: each tensor is cut into chunks of whole rows (~256K elements); the threads take the chunks
 * of all tensors from one shared counter, so small tensors do not serialize the pool and a thread the OS
 * preempts does not hold the others up (every chunk writes to its own place: the bytes never depend on
 * which thread ran it). Every chunk's input is checked for
 * inf / NaN (as llama.cpp's loader does), converted chunks also their output scales. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "common/threadpool.h"
#include "gguf/gguf.h"
#include "blocks.h"
#include "qmix.h"
#include "quant.h"

#define QM_CHUNK_ELEMS (256 * 1024)
#define QM_NAME_MAX 64

struct qm_tensor {
    struct qmix_tensor q;            /* policy view; q.name points at name */
    char name[QM_NAME_MAX + 1];
    const struct gguf_tensor *src;
    uint64_t out_offset, out_bytes;  /* place in the output buffer (converted tensors only) */
    bool convert;                    /* new_type != type */
};

struct qm_chunk { uint32_t i_tensor; int64_t row0, n_rows; };

struct qm_job {
    struct qm_tensor *tensors;
    struct qm_chunk *chunks;
    uint8_t *out;
    float **scratch;                 /* per thread, QM_CHUNK_ELEMS or one row, whichever is larger */
    _Atomic uint64_t done_bytes;
    _Atomic int64_t next_chunk;
    int64_t n_chunks;
    uint64_t total_bytes;
    _Atomic int failed;              /* 0, or 1 + the index of the chunk that failed */
    _Atomic int failed_output;       /* that chunk's input was fine but its output scales were not */
    double t0, last_report;
    const struct quantize_opts *opts;
};

static int qm_cmp_tensor(const void *a, const void *b) {
    return qmix_name_cmp(((const struct qm_tensor *)a)->name, ((const struct qm_tensor *)b)->name);
}

static bool qm_is_float(uint32_t t) { return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16; }

/* A u32 hyper-parameter that may also be stored as a per-layer array (take layer 0). */
static int qm_get_int(const struct gguf_ctx *ctx, const char *key, int dflt) {
    int64_t i = gguf_find_key(ctx, key);
    if (i < 0) return dflt;
    const struct gguf_kv *kv = &ctx->kv[i];
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->n == 0 || kv->arr_type == GGUF_TYPE_STRING || kv->arr_type == GGUF_TYPE_ARRAY) return dflt;
        return (int)gguf_arr_i64(kv, 0);
    }
    int64_t v;
    if (gguf_get_i64(ctx, key, &v) != VLLMC_OK) { vllmc_clear_error(); return dflt; }
    return (int)VLLMC_MIN(VLLMC_MAX(v, INT32_MIN), INT32_MAX);
}

/* ggml_validate_row_data's test: every value of a float row, and the fp16 scales of every block of a
 * quantized row, must be finite. Types without such fields (IQ*, MXFP4 ...) pass. */
static bool qm_half_ok(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return (h & 0x7c00) != 0x7c00;
}

static bool qm_data_ok(uint32_t type, const uint8_t *p, int64_t n_elem) {
    size_t off_d = 0, off_m = SIZE_MAX, bsz = quant_traits(type)->type_size;
    switch (type) {
    /* Float rows: no early exit, so the loops vectorize (this runs over every input byte). */
    case GGML_TYPE_F32: {
        /* Two floats per 64-bit word: an all-ones exponent plus one carries into the lane's sign bit
         * (never across lanes: 0x7f800000 + 0x00800000 fits in 32 bits). */
        uint64_t bad = 0;
        int64_t i = 0;
        for (; i + 2 <= n_elem; i += 2) {
            uint64_t w;
            memcpy(&w, p + 4 * i, 8);
            bad |= ((w & 0x7f8000007f800000ull) + 0x0080000000800000ull) & 0x8000000080000000ull;
        }
        if (i < n_elem) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        return !bad;
    }
    case GGML_TYPE_F16: case GGML_TYPE_BF16: {
        const uint16_t mask = type == GGML_TYPE_F16 ? 0x7c00 : 0x7f80;
        uint16_t bad = 0;
        for (int64_t i = 0; i < n_elem; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            bad |= (h & mask) == mask;
        }
        return !bad;
    }
    case GGML_TYPE_Q4_1: off_m = offsetof(block_q4_1, m); break;
    case GGML_TYPE_Q5_1: off_m = offsetof(block_q5_1, m); break;
    case GGML_TYPE_Q2_K: off_d = offsetof(block_q2_K, d); off_m = offsetof(block_q2_K, dmin); break;
    case GGML_TYPE_Q3_K: off_d = offsetof(block_q3_K, d); break;
    case GGML_TYPE_Q4_K: off_m = offsetof(block_q4_K, dmin); break;
    case GGML_TYPE_Q5_K: off_m = offsetof(block_q5_K, dmin); break;
    case GGML_TYPE_Q6_K: off_d = offsetof(block_q6_K, d); break;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
        break; /* d first */
    default: return true;
    }
    const int64_t nb = n_elem / quant_traits(type)->block_size;
    for (int64_t b = 0; b < nb; b++, p += bsz)
        if (!qm_half_ok(p + off_d) || (off_m != SIZE_MAX && !qm_half_ok(p + off_m))) return false;
    return true;
}

static void qm_chunk_run(struct qm_job *job, int i_task, int i_thread) {
    if (atomic_load_explicit(&job->failed, memory_order_relaxed)) return;
    const struct qm_chunk *c = &job->chunks[i_task];
    const struct qm_tensor *t = &job->tensors[c->i_tensor];
    const int64_t ne0 = t->q.ne[0];
    const uint64_t src_row = quant_row_size(t->q.type, ne0), dst_row = quant_row_size(t->q.new_type, ne0);
    const uint8_t *src = (const uint8_t *)t->src->data + (uint64_t)c->row0 * src_row;
    uint8_t *dst = t->convert ? job->out + t->out_offset + (uint64_t)c->row0 * dst_row : NULL;
    vllmc_status st = VLLMC_OK;
    bool in_ok = qm_data_ok(t->q.type, src, c->n_rows * ne0);
    if (!in_ok || !t->convert) {
        /* copied tensor: the check is all */
    } else if (t->q.type == GGML_TYPE_F32) {
        /* Rows are contiguous and blocks never straddle rows: one call covers the chunk. */
        st = quantize_row_ref(t->q.new_type, (const float *)src, dst, c->n_rows * ne0);
    } else {
        float *f = job->scratch[i_thread];
        int64_t rows_per = VLLMC_MAX((int64_t)1, QM_CHUNK_ELEMS / ne0);
        for (int64_t r = 0; r < c->n_rows && st == VLLMC_OK; r += rows_per) {
            int64_t nr = VLLMC_MIN(rows_per, c->n_rows - r);
            for (int64_t k = 0; k < nr; k++)
                dequantize_row(t->q.type, src + (uint64_t)(r + k) * src_row, f + k * ne0, ne0);
            st = quantize_row_ref(t->q.new_type, f, dst + (uint64_t)r * dst_row, nr * ne0);
        }
    }
    bool out_ok = !in_ok || !t->convert || (st == VLLMC_OK && qm_data_ok(t->q.new_type, dst, c->n_rows * ne0));
    if (!in_ok || !out_ok) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&job->failed, &expected, i_task + 1)) atomic_store(&job->failed_output, in_ok);
        return;
    }
    uint64_t done = atomic_fetch_add(&job->done_bytes, (uint64_t)c->n_rows * src_row) + (uint64_t)c->n_rows * src_row;
    if (i_thread == 0 && job->opts->progress) {
        double now = vllmc_time_s();
        if (now - job->last_report >= 0.25) {
            job->last_report = now;
            struct qmix_progress p = {done, job->total_bytes, now - job->t0};
            job->opts->progress(&p, job->opts->progress_user);
        }
    }
}

/* One worker: chunks from the shared counter until none is left. */
static void qm_worker(void *ctx, int i_task, int i_thread) {
    struct qm_job *job = ctx;
    (void)i_task;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed);
        if (i >= job->n_chunks) return;
        qm_chunk_run(job, (int)i, i_thread);
    }
}

/* Output buffer. Up to limit (default half the RAM): anonymous memory. Larger: a shared mapping of an unlinked scratch
 * file next to the output, so the kernel can write finished tensors back and reclaim their pages. */
static vllmc_status qm_alloc_out(uint64_t bytes, uint64_t limit, const char *tmp_path, uint8_t **out) {
    if (limit == 0) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : UINT64_MAX;
    }
    if (bytes <= limit) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return vllmc_errorf(VLLMC_ERR_OOM, "cannot map %.1f MiB for the output: %s", bytes / 1048576.0, strerror(errno));
        /* (No MADV_HUGEPAGE: on a busy machine its faults cost more system time than the 4 KiB ones save.) */
        *out = p;
        return VLLMC_OK;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s.scratch", tmp_path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return vllmc_errorf(VLLMC_ERR_IO, "cannot create scratch file '%s': %s", path, strerror(errno));
    unlink(path);
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)bytes) == 0) p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return vllmc_errorf(VLLMC_ERR_IO, "cannot map a %.1f MiB scratch file: %s", bytes / 1048576.0, strerror(err));
    LOG_INFO("quantize: output (%.1f MiB) staged in a scratch file next to '%s'", bytes / 1048576.0, tmp_path);
    *out = p;
    return VLLMC_OK;
}

static vllmc_status qm_copy_metadata(struct gguf_writer *w, const struct gguf_ctx *ctx, int ftype) {
    vllmc_status st;
    for (uint64_t i = 0; i < ctx->n_kv; i++) {
        const struct gguf_kv *kv = &ctx->kv[i];
        if (gguf_str_eq(kv->key, "general.file_type") || gguf_str_eq(kv->key, "general.quantization_version") ||
            gguf_str_eq(kv->key, "split.no") || gguf_str_eq(kv->key, "split.count") ||
            gguf_str_eq(kv->key, "split.tensors.count"))
            continue;
        if ((st = gguf_writer_copy_kv(w, kv)) != VLLMC_OK) return st;
    }
    if ((st = gguf_writer_set_u32(w, "general.quantization_version", 2)) != VLLMC_OK) return st;
    return gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype);
}

static vllmc_status qm_read_model(const struct gguf_ctx *ctx, char *arch, size_t arch_size, struct qmix_model *m) {
    struct gguf_str s;
    if (gguf_get_str(ctx, "general.architecture", &s) != VLLMC_OK)
        return vllmc_errorf(VLLMC_ERR_CORRUPT, "model has no general.architecture string");
    gguf_str_copy(s, arch, arch_size);
    char key[160];
    memset(m, 0, sizeof(*m));
    m->arch = arch;
    snprintf(key, sizeof(key), "%s.block_count", arch);
    m->n_layer = qm_get_int(ctx, key, -1);
    if (m->n_layer < 0) return vllmc_errorf(VLLMC_ERR_CORRUPT, "model has no %s", key);
    snprintf(key, sizeof(key), "%s.expert_count", arch);
    m->n_expert = qm_get_int(ctx, key, 0);
    snprintf(key, sizeof(key), "%s.attention.head_count", arch);
    m->n_head = qm_get_int(ctx, key, 0);
    snprintf(key, sizeof(key), "%s.attention.head_count_kv", arch);
    m->n_head_kv = qm_get_int(ctx, key, m->n_head);
    return VLLMC_OK;
}

vllmc_status quantize_model(const char *in_path, const char *out_path, const struct quantize_opts *opts,
                            struct quantize_stats *stats) {
    const double t0 = vllmc_time_s();
    struct gguf_file *f = NULL;
    struct qm_tensor *ts = NULL;
    struct qm_chunk *chunks = NULL;
    struct qmix_tensor *qv = NULL;
    struct threadpool *tp = NULL;
    struct gguf_writer *w = NULL;
    float **scratch = NULL;
    uint8_t *out = NULL;
    uint64_t out_size = 0;
    char *tmp_path = NULL;
    bool tmp_created = false;
    int n_threads = 0;
    vllmc_status st;
    if (stats) memset(stats, 0, sizeof(*stats));
    if (!in_path || !out_path || !opts) return vllmc_errorf(VLLMC_ERR_INVALID, "quantize: NULL argument");

    if ((st = gguf_file_open(in_path, &f)) != VLLMC_OK) goto done;
    const struct gguf_ctx *ctx = f->ctx;
    int n_split = qm_get_int(ctx, "split.count", 1);
    if (n_split > 1) {
        st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "'%s' is part of a split model (%d files); merge it first "
                          "(llama-gguf-split --merge)", in_path, n_split);
        goto done;
    }
    char arch[128];
    struct qmix_model model;
    if ((st = qm_read_model(ctx, arch, sizeof(arch), &model)) != VLLMC_OK) goto done;

    /* Tensors in llama.cpp's processing order. */
    const uint64_t n = ctx->n_tensors;
    if (!(ts = vllmc_calloc(n ? n : 1, sizeof(*ts))) || !(qv = vllmc_calloc(n ? n : 1, sizeof(*qv)))) {
        st = VLLMC_ERR_OOM;
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *g = &ctx->tensors[i];
        if (g->name.len > QM_NAME_MAX) {
            st = vllmc_errorf(VLLMC_ERR_CORRUPT, "tensor %llu: name longer than %d bytes", (unsigned long long)i, QM_NAME_MAX);
            goto done;
        }
        gguf_str_copy(g->name, ts[i].name, sizeof(ts[i].name));
        ts[i].src = g;
        for (int d = 0; d < 4; d++) ts[i].q.ne[d] = d < (int)g->n_dims ? g->ne[d] : 1;
        ts[i].q.type = g->type;
    }
    qsort(ts, n, sizeof(*ts), qm_cmp_tensor);
    for (uint64_t i = 0; i < n; i++) { qv[i] = ts[i].q; qv[i].name = ts[i].name; }
    if ((st = qmix_assign_types(&model, &opts->params, qv, n)) != VLLMC_OK) goto done;

    /* Validate every conversion before any work; lay out the output buffer. */
    uint64_t total_in = 0, n_chunks = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct qm_tensor *t = &ts[i];
        t->q = qv[i];
        t->q.name = t->name;
        t->convert = t->q.new_type != t->q.type;
        if (stats) {
            stats->n_tensors++;
            stats->in_bytes += t->src->size_bytes;
            stats->n_fallback += t->q.fallback;
        }
        if (opts->verbose)
            LOG_INFO("[%4llu/%4llu] %-40s [%lld, %lld, %lld] %s -> %s%s", (unsigned long long)i + 1,
                     (unsigned long long)n, t->name, (long long)t->q.ne[0], (long long)t->q.ne[1],
                     (long long)t->q.ne[2], quant_traits(t->q.type)->name, quant_traits(t->q.new_type)->name,
                     t->q.fallback ? " (fallback)" : "");
        total_in += t->src->size_bytes;
        const int64_t rows = t->q.ne[1] * t->q.ne[2] * t->q.ne[3];
        const int64_t per = VLLMC_MAX((int64_t)1, QM_CHUNK_ELEMS / t->q.ne[0]);
        n_chunks += (uint64_t)((rows + per - 1) / per);
        if (!t->convert) { if (stats) stats->out_bytes += t->src->size_bytes; continue; }
        const struct quant_traits *src_tr = quant_traits(t->q.type);
        if (!qm_is_float(t->q.type)) {
            if (!opts->allow_requantize) {
                st = vllmc_errorf(VLLMC_ERR_INVALID, "tensor '%s' is already quantized (%s); requantizing to %s loses "
                                  "quality, pass --allow-requantize to do it anyway", t->name, src_tr->name,
                                  quant_traits(t->q.new_type)->name);
                goto done;
            }
            if (!src_tr->supported) {
                st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "tensor '%s': cannot dequantize type %s", t->name, src_tr->name);
                goto done;
            }
        }
        t->out_bytes = quant_row_size(t->q.new_type, t->q.ne[0]) * (uint64_t)(t->q.ne[1] * t->q.ne[2] * t->q.ne[3]);
        t->out_offset = out_size;
        out_size += (t->out_bytes + 63) & ~(uint64_t)63;
        if (stats) { stats->n_quantized++; stats->out_bytes += t->out_bytes; }
    }
    if (n_chunks > (uint64_t)INT32_MAX) { st = vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "quantize: model too large"); goto done; }

    /* Fail on an unwritable destination before the long part. */
    size_t plen = strlen(out_path);
    if (!(tmp_path = vllmc_malloc(plen + 5))) { st = VLLMC_ERR_OOM; goto done; }
    memcpy(tmp_path, out_path, plen);
    memcpy(tmp_path + plen, ".tmp", 5);
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        st = vllmc_errorf(VLLMC_ERR_IO, "cannot create output '%s': %s", tmp_path, strerror(errno));
        goto done;
    }
    tmp_created = true;
    close(fd);

    /* Chunks of whole rows, tensor by tensor. */
    if (!(chunks = vllmc_calloc(n_chunks ? n_chunks : 1, sizeof(*chunks)))) { st = VLLMC_ERR_OOM; goto done; }
    int64_t max_scratch = 0;
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        const struct qm_tensor *t = &ts[i];
        const int64_t rows = t->q.ne[1] * t->q.ne[2] * t->q.ne[3];
        const int64_t per = VLLMC_MAX((int64_t)1, QM_CHUNK_ELEMS / t->q.ne[0]);
        if (t->convert && t->q.type != GGML_TYPE_F32) max_scratch = VLLMC_MAX(max_scratch, per * t->q.ne[0]);
        for (int64_t r = 0; r < rows; r += per)
            chunks[k++] = (struct qm_chunk){(uint32_t)i, r, VLLMC_MIN(per, rows - r)};
    }
    VLLMC_ASSERT(k == n_chunks);

    if (n_chunks) {
        if (out_size && (st = qm_alloc_out(out_size, opts->mem_limit_bytes, tmp_path, &out)) != VLLMC_OK) goto done;
        if (!(tp = threadpool_create(opts->n_threads))) { st = VLLMC_ERR_OOM; goto done; }
        n_threads = threadpool_n_threads(tp);
        if (!(scratch = vllmc_calloc((size_t)n_threads, sizeof(*scratch)))) { st = VLLMC_ERR_OOM; goto done; }
        if (max_scratch)
            for (int i = 0; i < n_threads; i++)
                if (!(scratch[i] = vllmc_malloc((size_t)max_scratch * sizeof(float)))) { st = VLLMC_ERR_OOM; goto done; }
        gguf_file_prefetch(f);
        struct qm_job job = {.tensors = ts, .chunks = chunks, .out = out, .scratch = scratch,
                             .total_bytes = total_in, .t0 = t0, .last_report = 0, .opts = opts};
        atomic_init(&job.done_bytes, 0);
        atomic_init(&job.failed, 0);
        atomic_init(&job.failed_output, 0);
        atomic_init(&job.next_chunk, 0);
        job.n_chunks = (int64_t)n_chunks;
        threadpool_run(tp, qm_worker, &job, n_threads);
        int bad = atomic_load(&job.failed);
        if (bad) {
            const struct qm_chunk *c = &chunks[bad - 1];
            const struct qm_tensor *t = &ts[c->i_tensor];
            if (atomic_load(&job.failed_output))
                st = vllmc_errorf(VLLMC_ERR_INVALID, "tensor '%s': rows %lld..%lld overflow the fp16 scales of %s",
                                  t->name, (long long)c->row0, (long long)(c->row0 + c->n_rows - 1),
                                  quant_traits(t->q.new_type)->name);
            else
                st = vllmc_errorf(VLLMC_ERR_CORRUPT, "tensor '%s' (%s): rows %lld..%lld hold inf or NaN values",
                                  t->name, quant_traits(t->q.type)->name, (long long)c->row0,
                                  (long long)(c->row0 + c->n_rows - 1));
            goto done;
        }
        if (opts->progress) {
            struct qmix_progress p = {total_in, total_in, vllmc_time_s() - t0};
            opts->progress(&p, opts->progress_user);
        }
    }

    /* Metadata, then tensor infos + data in processing order. */
    if (!(w = gguf_writer_create())) { st = VLLMC_ERR_OOM; goto done; }
    if ((st = qm_copy_metadata(w, ctx, opts->params.ftype)) != VLLMC_OK) goto done;
    for (uint64_t i = 0; i < n; i++) {
        const struct qm_tensor *t = &ts[i];
        const void *data = t->convert ? (const void *)(out + t->out_offset) : t->src->data;
        if ((st = gguf_writer_add_tensor(w, t->name, t->q.new_type, (uint32_t)qmix_n_dims(t->q.ne), t->q.ne, data)) != VLLMC_OK)
            goto done;
    }
    if ((st = gguf_writer_write(w, tmp_path)) != VLLMC_OK) goto done;
    if (rename(tmp_path, out_path) != 0) {
        st = vllmc_errorf(VLLMC_ERR_IO, "cannot rename '%s' to '%s': %s", tmp_path, out_path, strerror(errno));
        goto done;
    }
    tmp_created = false;
    if (stats) stats->seconds = vllmc_time_s() - t0;

done:
    if (tmp_created) unlink(tmp_path);
    free(tmp_path);
    gguf_writer_destroy(w);
    if (scratch) for (int i = 0; i < n_threads; i++) free(scratch[i]);
    free(scratch);
    threadpool_destroy(tp);
    if (out) munmap(out, out_size);
    free(chunks);
    free(qv);
    free(ts);
    gguf_file_close(f);
    return st;
}
