/* libFuzzer entry for the GGUF parser: parse (data, size), then walk everything a consumer would
 * touch (every kv through every getter, array elements, tensor lookups and data bounds) and copy
 * the kvs through the writer's encoders. Any over-read or crash is a bug. */
#include <string.h>
#include "gguf/gguf.h"

static volatile uint64_t g_sink;

static void fuzz_walk(const struct gguf_ctx *ctx) {
    struct gguf_writer *w = gguf_writer_create();
    for (uint64_t i = 0; i < ctx->n_kv; i++) {
        const struct gguf_kv *kv = &ctx->kv[i];
        char key[256];
        gguf_str_copy(kv->key, key, sizeof(key));
        uint32_t u32; uint64_t u64; int64_t i64; float f; bool b; struct gguf_str s; const struct gguf_kv *a;
        if (gguf_get_u32(ctx, key, &u32) == VLLMC_OK) g_sink += u32;
        if (gguf_get_u64(ctx, key, &u64) == VLLMC_OK) g_sink += u64;
        if (gguf_get_i64(ctx, key, &i64) == VLLMC_OK) g_sink += (uint64_t)i64;
        if (gguf_get_f32(ctx, key, &f) == VLLMC_OK) g_sink += f == f;
        if (gguf_get_bool(ctx, key, &b) == VLLMC_OK) g_sink += b;
        if (gguf_get_str(ctx, key, &s) == VLLMC_OK && s.len) g_sink += (unsigned char)s.ptr[s.len - 1];
        if (gguf_get_arr(ctx, key, &a) == VLLMC_OK) {
            for (uint64_t j = 0; j < a->n; j++) {
                if (a->arr_type == GGUF_TYPE_STRING) {
                    if (a->strs[j].len) g_sink += (unsigned char)a->strs[j].ptr[a->strs[j].len - 1];
                } else {
                    g_sink += (uint64_t)gguf_arr_i64(a, j);
                    g_sink += gguf_arr_f64(a, j) > 0;
                }
            }
        }
        if (w) (void)gguf_writer_copy_kv(w, kv);
    }
    gguf_writer_destroy(w);
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        const struct gguf_tensor *t = &ctx->tensors[i];
        char name[80];
        if (gguf_find_tensor(ctx, gguf_str_copy(t->name, name, sizeof(name))) != t) __builtin_trap();
        if ((const uint8_t *)t->data < ctx->base || (const uint8_t *)t->data + t->size_bytes > ctx->base + ctx->size)
            __builtin_trap();
        if (t->size_bytes) g_sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->size_bytes - 1];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_ctx *ctx = NULL;
    vllmc_status st = gguf_parse(data, size, &ctx);
    if (st == VLLMC_OK) {
        fuzz_walk(ctx);
        gguf_free(ctx);
    } else if (st != VLLMC_ERR_CORRUPT && st != VLLMC_ERR_OOM) {
        __builtin_trap(); /* a bad image must say CORRUPT */
    }
    return 0;
}
