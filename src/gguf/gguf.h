/* GGUF v2/v3 reader over (pointer, size) and a GGUF writer.
 * The reader never copies tensor data: every string, array and tensor in a gguf_ctx points into the
 * caller's buffer (usually an mmap), which must outlive the ctx. Every count, length and offset is
 * checked against the buffer size; a corrupt file gives VLLMC_ERR_CORRUPT and a message naming it. */
#ifndef VLLMC_GGUF_H
#define VLLMC_GGUF_H

#include <stdbool.h>
#include "common/common.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

enum gguf_type {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
};

/* A string slice into the file: not NUL-terminated. */
struct gguf_str { const char *ptr; uint64_t len; };

struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;     /* GGUF_TYPE_ARRAY for arrays */
    enum gguf_type arr_type; /* element type when type == ARRAY */
    uint64_t n;              /* array length (1 for scalars) */
    const uint8_t *data;     /* scalar: the value's bytes (a string: its (u64 len, bytes) record);
                                array of numbers: the packed elements;
                                array of strings: the first (u64 len, bytes) record */
    const struct gguf_str *strs; /* array of strings: n decoded slices (owned by the ctx); else NULL */
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (contiguous); unused dims are 1 */
    uint32_t type;             /* ggml type id (quant/quant.h: enum ggml_type) */
    uint64_t offset;           /* relative to the data section */
    uint64_t size_bytes;
    const void *data;          /* base + data_offset + offset */
};

struct gguf_ctx {
    uint32_t version;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;      /* start of the data section from the file start */
    const uint8_t *base;       /* the buffer parsed */
    uint64_t size;
    /* Private lookup tables (open addressing, slot = index + 1, 0 = empty); NULL means linear scan. */
    uint32_t *kv_slots, *tensor_slots;
    uint64_t kv_mask, tensor_mask;
};

/* Parse a GGUF image. On success *out owns the index arrays (free with gguf_free).
 * Checks (all give VLLMC_ERR_CORRUPT naming the problem): magic, version 2/3 (byte-swapped files
 * rejected), every count/length/offset against the size, key rules (non-empty, <= 65535 bytes,
 * no NUL byte, unique), value types (nested arrays rejected), bools strictly 0 or 1, general.alignment (UINT32,
 * a power of two), tensor names (non-empty, < 64 bytes, no NUL, unique), n_dims <= 4, extents > 0, element
 * and byte counts below 2^63, known ggml type (quant_traits), row a multiple of the block size,
 * offsets aligned, data inside the buffer, no two tensors overlapping. */
vllmc_status gguf_parse(const void *data, uint64_t size, struct gguf_ctx **out);
void gguf_free(struct gguf_ctx *ctx); /* accepts NULL */

/* Lookup. Return the index or -1. */
int64_t gguf_find_key(const struct gguf_ctx *ctx, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_ctx *ctx, const char *name);

/* Typed getters: return VLLMC_OK, or VLLMC_ERR_INVALID if the key is missing (message names it)
 * or VLLMC_ERR_CORRUPT if the stored type cannot be converted without loss (integers of any
 * width convert when the value fits; floats from f32/f64). */
vllmc_status gguf_get_u32(const struct gguf_ctx *ctx, const char *key, uint32_t *out);
vllmc_status gguf_get_u64(const struct gguf_ctx *ctx, const char *key, uint64_t *out);
vllmc_status gguf_get_i64(const struct gguf_ctx *ctx, const char *key, int64_t *out);
vllmc_status gguf_get_f32(const struct gguf_ctx *ctx, const char *key, float *out);
vllmc_status gguf_get_bool(const struct gguf_ctx *ctx, const char *key, bool *out);
vllmc_status gguf_get_str(const struct gguf_ctx *ctx, const char *key, struct gguf_str *out);
/* Array: *out points at the kv (check arr_type / n / data / strs yourself). */
vllmc_status gguf_get_arr(const struct gguf_ctx *ctx, const char *key, const struct gguf_kv **out);
/* Array element i of a numeric array converted to int64 / double (arr_type checked). */
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i);
double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i);

/* Compare a slice with a C string. */
bool gguf_str_eq(struct gguf_str s, const char *cstr);
/* Copy a slice into buf (truncating), NUL-terminated; returns buf. */
char *gguf_str_copy(struct gguf_str s, char *buf, size_t buf_size);
const char *gguf_type_name(enum gguf_type t);
/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and unknown ids. */
uint64_t gguf_type_size(enum gguf_type t);

/* A GGUF file mapped read-only; the ctx points into the mapping. */
struct gguf_file {
    struct gguf_ctx *ctx;
    void *map;
    uint64_t map_size;
    int fd;
};
vllmc_status gguf_file_open(const char *path, struct gguf_file **out);
void gguf_file_close(struct gguf_file *f); /* accepts NULL */
/* Ask the kernel to start reading the whole tensor-data section in the background (MADV_WILLNEED).
 * gguf_file_open itself only touches the header and tensor infos. */
void gguf_file_prefetch(const struct gguf_file *f);

/* Writer: collect kvs and tensor infos, then stream header + data to a FILE.
 * Values are copied at add time. Setting a key again replaces its value in place (as gguf-py does).
 * Layout is gguf-py's: header, kvs in insertion order, tensor infos (n_dims as given), zero padding to
 * the alignment, then each tensor's bytes followed by zero padding to the alignment. The alignment
 * is 32, or the value of a UINT32 general.alignment key (a power of two). */
struct gguf_writer;
struct gguf_writer *gguf_writer_create(void);
void gguf_writer_destroy(struct gguf_writer *w);
vllmc_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
vllmc_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
vllmc_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
vllmc_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
vllmc_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
vllmc_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Any fixed-size scalar type (UINT8 .. FLOAT64, BOOL): val points at one value of that type. */
vllmc_status gguf_writer_set_val(struct gguf_writer *w, const char *key, enum gguf_type type, const void *val);
/* Numeric array: n elements of arr_type packed in data. */
vllmc_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type arr_type,
                                 const void *data, uint64_t n);
vllmc_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                                     uint64_t n);
/* Copy one kv of a parsed file verbatim. */
vllmc_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Add a tensor; data is not copied and must live until gguf_writer_write returns. */
vllmc_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t ggml_type,
                                    uint32_t n_dims, const int64_t *ne, const void *data);
vllmc_status gguf_writer_write(struct gguf_writer *w, const char *path);

#endif
