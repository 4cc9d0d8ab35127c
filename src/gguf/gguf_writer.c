/* GGUF v3 writer: collects kvs (copied, pre-encoded) and tensor infos (data borrowed), then
 * streams header, metadata, tensor infos and padded tensor data to a file in gguf-py's layout.
 * Invariant: each kv's payload holds exactly the bytes that follow its value-type field. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "gguf.h"
#include "quant/quant.h"

struct gguf_writer_kv {
    char *key;
    enum gguf_type type;
    uint8_t *payload;
    uint64_t payload_len;
};

struct gguf_writer_tensor {
    char *name;
    uint32_t n_dims, type;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t size_bytes;
    const void *data;
};

struct gguf_writer {
    struct gguf_writer_kv *kv;
    uint64_t n_kv, cap_kv;
    struct gguf_writer_tensor *tensors;
    uint64_t n_tensors, cap_tensors;
};

struct gguf_writer *gguf_writer_create(void) {
    return vllmc_calloc(1, sizeof(struct gguf_writer));
}

void gguf_writer_destroy(struct gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].payload); }
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kv);
    free(w->tensors);
    free(w);
}

static char *gguf_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = vllmc_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Take ownership of payload (freed here on failure). Replaces an existing key's value in place. */
static vllmc_status gguf_writer_put(struct gguf_writer *w, const char *key, enum gguf_type type, uint8_t *payload,
                                    uint64_t len) {
    if (!w || !key) { free(payload); return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: NULL writer or key"); }
    size_t klen = strlen(key);
    if (klen == 0 || klen > 65535) {
        free(payload);
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%.64s' must be 1..65535 bytes", key);
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key)) continue;
        free(w->kv[i].payload);
        w->kv[i].type = type;
        w->kv[i].payload = payload;
        w->kv[i].payload_len = len;
        return VLLMC_OK;
    }
    if (w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        void *p = realloc(w->kv, cap * sizeof(*w->kv));
        if (!p) { free(payload); return vllmc_errorf(VLLMC_ERR_OOM, "gguf writer: out of memory"); }
        w->kv = p;
        w->cap_kv = cap;
    }
    char *k = gguf_strdup(key);
    if (!k) { free(payload); return VLLMC_ERR_OOM; }
    w->kv[w->n_kv++] = (struct gguf_writer_kv){k, type, payload, len};
    return VLLMC_OK;
}

static vllmc_status gguf_writer_put_bytes(struct gguf_writer *w, const char *key, enum gguf_type type, const void *v,
                                          uint64_t n) {
    uint8_t *p = vllmc_malloc(n);
    if (!p) return VLLMC_ERR_OOM;
    if (n) memcpy(p, v, n);
    return gguf_writer_put(w, key, type, p, n);
}

vllmc_status gguf_writer_set_val(struct gguf_writer *w, const char *key, enum gguf_type type, const void *val) {
    uint64_t sz = gguf_type_size(type);
    if (sz == 0 || !val)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': type %s is not a fixed-size scalar",
                            key ? key : "(null)", gguf_type_name(type));
    if (type == GGUF_TYPE_BOOL && *(const uint8_t *)val > 1)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': bool byte must be 0 or 1", key ? key : "(null)");
    return gguf_writer_put_bytes(w, key, type, val, sz);
}

vllmc_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_UINT32, &v);
}
vllmc_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_INT32, &v);
}
vllmc_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_UINT64, &v);
}
vllmc_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_FLOAT32, &v);
}
vllmc_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return gguf_writer_set_val(w, key, GGUF_TYPE_BOOL, &b);
}

/* Encode n strings as (u64 len, bytes) records after an optional prefix of prefix_len bytes. */
static uint8_t *gguf_encode_strs(const struct gguf_str *strs, uint64_t n, const uint8_t *prefix, uint64_t prefix_len,
                                 uint64_t *len_out) {
    uint64_t total = prefix_len;
    for (uint64_t i = 0; i < n; i++) total += 8 + strs[i].len;
    uint8_t *p = vllmc_malloc(total), *q = p;
    if (!p) return NULL;
    if (prefix_len) { memcpy(q, prefix, prefix_len); q += prefix_len; }
    for (uint64_t i = 0; i < n; i++) {
        memcpy(q, &strs[i].len, 8);
        q += 8;
        if (strs[i].len) memcpy(q, strs[i].ptr, strs[i].len);
        q += strs[i].len;
    }
    *len_out = total;
    return p;
}

vllmc_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v) {
    if (!v) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': NULL string", key ? key : "(null)");
    struct gguf_str s = {v, strlen(v)};
    uint64_t len;
    uint8_t *p = gguf_encode_strs(&s, 1, NULL, 0, &len);
    if (!p) return VLLMC_ERR_OOM;
    return gguf_writer_put(w, key, GGUF_TYPE_STRING, p, len);
}

vllmc_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type arr_type, const void *data,
                                 uint64_t n) {
    uint64_t esz = gguf_type_size(arr_type), bytes;
    if (esz == 0)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': array element type %s is not numeric",
                            key ? key : "(null)", gguf_type_name(arr_type));
    if (!checked_mul_u64(n, esz, &bytes) || bytes > SIZE_MAX - 12 || (n && !data))
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': bad array (n = %llu)", key ? key : "(null)",
                            (unsigned long long)n);
    if (arr_type == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': bool element %llu is not 0 or 1",
                                    key ? key : "(null)", (unsigned long long)i);
    uint8_t *p = vllmc_malloc(12 + bytes);
    if (!p) return VLLMC_ERR_OOM;
    uint32_t at = arr_type;
    memcpy(p, &at, 4);
    memcpy(p + 4, &n, 8);
    if (bytes) memcpy(p + 12, data, bytes);
    return gguf_writer_put(w, key, GGUF_TYPE_ARRAY, p, 12 + bytes);
}

vllmc_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs, uint64_t n) {
    if (n && !strs) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s': NULL strings", key ? key : "(null)");
    uint8_t prefix[12];
    uint32_t at = GGUF_TYPE_STRING;
    memcpy(prefix, &at, 4);
    memcpy(prefix + 4, &n, 8);
    uint64_t len;
    uint8_t *p = gguf_encode_strs(strs, n, prefix, 12, &len);
    if (!p) return VLLMC_ERR_OOM;
    return gguf_writer_put(w, key, GGUF_TYPE_ARRAY, p, len);
}

vllmc_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv) {
    if (!kv || !kv->key.ptr || kv->key.len == 0 || kv->key.len > 65535)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: bad kv to copy");
    char key[65536];
    gguf_str_copy(kv->key, key, sizeof(key));
    if (strlen(key) != kv->key.len)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: key '%s' contains a NUL byte", key);
    if (kv->type == GGUF_TYPE_STRING) {
        struct gguf_str s;
        memcpy(&s.len, kv->data, 8);
        s.ptr = (const char *)kv->data + 8;
        uint64_t len;
        uint8_t *p = gguf_encode_strs(&s, 1, NULL, 0, &len);
        if (!p) return VLLMC_ERR_OOM;
        return gguf_writer_put(w, key, GGUF_TYPE_STRING, p, len);
    }
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_type == GGUF_TYPE_STRING) return gguf_writer_set_arr_str(w, key, kv->strs, kv->n);
        return gguf_writer_set_arr(w, key, kv->arr_type, kv->data, kv->n);
    }
    return gguf_writer_set_val(w, key, kv->type, kv->data);
}

vllmc_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t ggml_type, uint32_t n_dims,
                                    const int64_t *ne, const void *data) {
    if (!w || !name || !ne) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: NULL argument to add_tensor");
    size_t len = strlen(name);
    if (len == 0 || len > 63) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor name '%s' must be 1..63 bytes", name);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: duplicate tensor name '%s'", name);
    if (n_dims > GGUF_MAX_DIMS)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor '%s': n_dims %u > %d", name, n_dims, GGUF_MAX_DIMS);
    const struct quant_traits *tr = quant_traits(ggml_type);
    if (!tr) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor '%s': unknown type id %u", name, ggml_type);
    struct gguf_writer_tensor t = {.n_dims = n_dims, .type = ggml_type, .data = data};
    uint64_t n_elem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0 || !checked_mul_u64(n_elem, (uint64_t)t.ne[d], &n_elem) || n_elem > (uint64_t)INT64_MAX)
            return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor '%s': bad dimension ne[%d] = %lld", name, d,
                                (long long)t.ne[d]);
    }
    if (t.ne[0] % tr->block_size)
        return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor '%s' row %lld not a multiple of block %d", name,
                            (long long)t.ne[0], tr->block_size);
    uint64_t bytes = (uint64_t)(t.ne[0] / tr->block_size);
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (!checked_mul_u64(bytes, d == 0 ? (uint64_t)tr->type_size : (uint64_t)t.ne[d], &bytes))
            return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor '%s': byte size overflows", name);
    if (!data) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: tensor '%s': NULL data", name);
    t.size_bytes = bytes;
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        void *p = realloc(w->tensors, cap * sizeof(*w->tensors));
        if (!p) return vllmc_errorf(VLLMC_ERR_OOM, "gguf writer: out of memory");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    if (!(t.name = gguf_strdup(name))) return VLLMC_ERR_OOM;
    w->tensors[w->n_tensors++] = t;
    return VLLMC_OK;
}

/* ---- output ---- */

struct gguf_out {
    FILE *fp;
    const char *path;
    uint64_t pos;
    vllmc_status st;
};

static void gguf_out_write(struct gguf_out *o, const void *p, uint64_t n) {
    const uint8_t *b = p;
    while (o->st == VLLMC_OK && n) {
        size_t chunk = n > (64u << 20) ? (64u << 20) : (size_t)n;
        if (fwrite(b, 1, chunk, o->fp) != chunk) {
            o->st = vllmc_errorf(VLLMC_ERR_IO, "gguf writer: write to '%s' failed at byte %llu: %s", o->path,
                                 (unsigned long long)o->pos, strerror(errno));
            return;
        }
        b += chunk;
        n -= chunk;
        o->pos += chunk;
    }
}

static void gguf_out_u32(struct gguf_out *o, uint32_t v) { gguf_out_write(o, &v, 4); }
static void gguf_out_u64(struct gguf_out *o, uint64_t v) { gguf_out_write(o, &v, 8); }

static void gguf_out_pad(struct gguf_out *o, uint64_t align) {
    static const uint8_t zeros[4096];
    uint64_t pad = (align - o->pos % align) % align;
    while (pad && o->st == VLLMC_OK) {
        uint64_t k = pad > sizeof(zeros) ? sizeof(zeros) : pad;
        gguf_out_write(o, zeros, k);
        pad -= k;
    }
}

static vllmc_status gguf_writer_alignment(const struct gguf_writer *w, uint64_t *align) {
    *align = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        uint32_t a;
        if (w->kv[i].type != GGUF_TYPE_UINT32)
            return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: general.alignment must be UINT32, not %s",
                                gguf_type_name(w->kv[i].type));
        memcpy(&a, w->kv[i].payload, 4);
        if (a == 0 || (a & (a - 1)))
            return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: general.alignment %u is not a power of two", a);
        *align = a;
    }
    return VLLMC_OK;
}

vllmc_status gguf_writer_write(struct gguf_writer *w, const char *path) {
    if (!w || !path) return vllmc_errorf(VLLMC_ERR_INVALID, "gguf writer: NULL writer or path");
    uint64_t align;
    vllmc_status st = gguf_writer_alignment(w, &align);
    if (st) return st;
    struct gguf_out o = {fopen(path, "wb"), path, 0, VLLMC_OK};
    if (!o.fp) return vllmc_errorf(VLLMC_ERR_IO, "gguf writer: cannot create '%s': %s", path, strerror(errno));
    setvbuf(o.fp, NULL, _IOFBF, 1 << 20);

    gguf_out_write(&o, "GGUF", 4);
    gguf_out_u32(&o, 3);
    gguf_out_u64(&o, w->n_tensors);
    gguf_out_u64(&o, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        const struct gguf_writer_kv *kv = &w->kv[i];
        uint64_t klen = strlen(kv->key);
        gguf_out_u64(&o, klen);
        gguf_out_write(&o, kv->key, klen);
        gguf_out_u32(&o, kv->type);
        gguf_out_write(&o, kv->payload, kv->payload_len);
    }
    uint64_t offset = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const struct gguf_writer_tensor *t = &w->tensors[i];
        uint64_t nlen = strlen(t->name);
        gguf_out_u64(&o, nlen);
        gguf_out_write(&o, t->name, nlen);
        gguf_out_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) gguf_out_u64(&o, (uint64_t)t->ne[d]);
        gguf_out_u32(&o, t->type);
        gguf_out_u64(&o, offset);
        offset += t->size_bytes + (align - t->size_bytes % align) % align;
    }
    gguf_out_pad(&o, align);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        gguf_out_write(&o, w->tensors[i].data, w->tensors[i].size_bytes);
        gguf_out_pad(&o, align);
    }
    st = o.st;
    if (fclose(o.fp) != 0 && st == VLLMC_OK)
        st = vllmc_errorf(VLLMC_ERR_IO, "gguf writer: closing '%s' failed: %s", path, strerror(errno));
    if (st != VLLMC_OK) unlink(path);
    return st;
}
