/* `vllmc inspect FILE.gguf [--json] [--full]`: print a GGUF file's metadata (long arrays
 * summarised), tensor table, totals per type and a one-paragraph architecture summary.
 * Reads only the header and tensor infos (the file is mmapped; tensor data is never touched). */
#include <inttypes.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#define INSPECT_ARR_HEAD 8 /* array elements shown before "..." */

struct inspect_type_total { uint64_t n_tensors, params, bytes; };

struct inspect_totals {
    uint64_t params, bytes;
    struct inspect_type_total per_type[GGML_TYPE_COUNT];
};

static uint64_t inspect_params(const struct gguf_tensor *t) {
    return (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

static void inspect_sum(const struct gguf_ctx *ctx, struct inspect_totals *tot) {
    memset(tot, 0, sizeof(*tot));
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        const struct gguf_tensor *t = &ctx->tensors[i];
        uint64_t p = inspect_params(t);
        tot->params += p;
        tot->bytes += t->size_bytes;
        struct inspect_type_total *pt = &tot->per_type[t->type]; /* type < GGML_TYPE_COUNT: checked by the parser */
        pt->n_tensors++;
        pt->params += p;
        pt->bytes += t->size_bytes;
    }
}

static const char *inspect_tname(uint32_t type) {
    const struct quant_traits *tr = quant_traits(type);
    return tr ? tr->name : "?";
}

/* ---- text output ---- */

static void inspect_print_str(FILE *o, const char *p, uint64_t n, uint64_t max) {
    fputc('"', o);
    for (uint64_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", o);
        else if (c == '"' || c == '\\') { fputc('\\', o); fputc(c, o); }
        else if (c < 0x20 || c == 0x7f) fprintf(o, "\\x%02x", c);
        else fputc(c, o);
    }
    fputc('"', o);
    if (n > max) fprintf(o, "... (%" PRIu64 " bytes)", n);
}

static void inspect_print_scalar(FILE *o, enum gguf_type t, const uint8_t *p) {
    switch (t) {
    case GGUF_TYPE_UINT8: fprintf(o, "%u", p[0]); break;
    case GGUF_TYPE_INT8: fprintf(o, "%d", (int8_t)p[0]); break;
    case GGUF_TYPE_BOOL: fputs(p[0] ? "true" : "false", o); break;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); fprintf(o, "%u", v); break; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); fprintf(o, "%d", v); break; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); fprintf(o, "%" PRIu32, v); break; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); fprintf(o, "%" PRId32, v); break; }
    case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p, 8); fprintf(o, "%" PRIu64, v); break; }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); fprintf(o, "%" PRId64, v); break; }
    case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p, 4); fprintf(o, "%.9g", v); break; }
    case GGUF_TYPE_FLOAT64: { double v; memcpy(&v, p, 8); fprintf(o, "%.17g", v); break; }
    default: fputs("?", o);
    }
}

static struct gguf_str inspect_scalar_str(const struct gguf_kv *kv) {
    struct gguf_str s;
    memcpy(&s.len, kv->data, 8);
    s.ptr = (const char *)kv->data + 8;
    return s;
}

static void inspect_print_kv(FILE *o, const struct gguf_kv *kv, bool full) {
    char key[256];
    fprintf(o, "  %-44s ", gguf_str_copy(kv->key, key, sizeof(key)));
    if (kv->type == GGUF_TYPE_STRING) {
        struct gguf_str s = inspect_scalar_str(kv);
        fprintf(o, "%-8s ", "STRING");
        inspect_print_str(o, s.ptr, s.len, full ? UINT64_MAX : 200);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        char tbuf[32];
        snprintf(tbuf, sizeof(tbuf), "[%s]", gguf_type_name(kv->arr_type));
        fprintf(o, "%-8s n=%" PRIu64 " [", tbuf, kv->n);
        uint64_t show = full ? kv->n : VLLMC_MIN(kv->n, (uint64_t)INSPECT_ARR_HEAD);
        uint64_t es = gguf_type_size(kv->arr_type);
        for (uint64_t i = 0; i < show; i++) {
            if (i) fputs(", ", o);
            if (kv->arr_type == GGUF_TYPE_STRING) inspect_print_str(o, kv->strs[i].ptr, kv->strs[i].len, full ? UINT64_MAX : 40);
            else inspect_print_scalar(o, kv->arr_type, kv->data + i * es);
        }
        if (show < kv->n) fputs(", ...", o);
        fputc(']', o);
    } else {
        fprintf(o, "%-8s ", gguf_type_name(kv->type));
        inspect_print_scalar(o, kv->type, kv->data);
    }
    fputc('\n', o);
}

static void inspect_shape(const struct gguf_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    uint32_t nd = t->n_dims ? t->n_dims : 1;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (uint32_t d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void inspect_human_bytes(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", (double)b / (1ull << 20));
    else if (b >= (1ull << 10)) snprintf(buf, n, "%.2f KiB", (double)b / (1ull << 10));
    else snprintf(buf, n, "%" PRIu64 " B", b);
}

/* ---- architecture summary ---- */

/* A u32-ish hyper-parameter "{arch}.{suffix}": scalar, or a per-layer array (first..max). */
static bool inspect_hparam(const struct gguf_ctx *ctx, const char *arch, const char *suffix, char *out, size_t n,
                           double *value) {
    char key[256];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    int64_t i = gguf_find_key(ctx, key);
    if (i < 0) return false;
    const struct gguf_kv *kv = &ctx->kv[i];
    if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type != GGUF_TYPE_STRING && kv->n > 0) {
        int64_t lo = gguf_arr_i64(kv, 0), hi = lo;
        for (uint64_t j = 1; j < kv->n; j++) {
            int64_t v = gguf_arr_i64(kv, j);
            lo = VLLMC_MIN(lo, v);
            hi = VLLMC_MAX(hi, v);
        }
        if (lo == hi) snprintf(out, n, "%" PRId64, lo);
        else snprintf(out, n, "%" PRId64 "..%" PRId64 " (per layer)", lo, hi);
        if (value) *value = (double)hi;
        return true;
    }
    uint64_t u;
    if (gguf_get_u64(ctx, key, &u) == VLLMC_OK) {
        snprintf(out, n, "%" PRIu64, u);
        if (value) *value = (double)u;
        return true;
    }
    float f;
    if (gguf_get_f32(ctx, key, &f) == VLLMC_OK) {
        snprintf(out, n, "%.10g", f);
        if (value) *value = f;
        return true;
    }
    return false;
}

struct inspect_summary {
    char arch[64], name[128];
    char text[2048];
    cJSON *json;
};

static void inspect_summarise(const struct gguf_ctx *ctx, const struct inspect_totals *tot, struct inspect_summary *s) {
    struct gguf_str a;
    s->json = cJSON_CreateObject();
    size_t k = 0;
    char *t = s->text;
    const size_t tn = sizeof(s->text);
#define APPEND(...) do { if (k < tn) k += (size_t)snprintf(t + k, tn - k, __VA_ARGS__); } while (0)
    if (gguf_get_str(ctx, "general.architecture", &a) != VLLMC_OK) {
        snprintf(s->arch, sizeof(s->arch), "unknown");
        APPEND("No general.architecture key: not a model file llama.cpp would load. ");
    } else {
        gguf_str_copy(a, s->arch, sizeof(s->arch));
    }
    cJSON_AddStringToObject(s->json, "architecture", s->arch);
    struct gguf_str nm;
    if (gguf_get_str(ctx, "general.name", &nm) == VLLMC_OK) {
        gguf_str_copy(nm, s->name, sizeof(s->name));
        cJSON_AddStringToObject(s->json, "name", s->name);
        APPEND("\"%s\": ", s->name);
    }
    APPEND("a %s model", s->arch);
    static const struct { const char *suffix, *label, *json; } hp[] = { /* label NULL: JSON only */
        {"block_count", "layers", "n_layer"},
        {"embedding_length", "embedding", "n_embd"},
        {"feed_forward_length", "feed-forward", "n_ff"},
        {"attention.head_count", "attention heads", "n_head"},
        {"attention.head_count_kv", "KV heads", "n_kv_head"},
        {"attention.key_length", "head dim", "head_dim"},
        {"context_length", "trained context", "n_ctx_train"},
        {"rope.freq_base", "RoPE base", "rope_freq_base"},
        {"expert_count", "experts", "n_expert"},
        {"expert_used_count", "experts per token", "n_expert_used"},
        {"expert_feed_forward_length", "expert feed-forward", "n_ff_exp"},
        {"full_attention_interval", NULL, "full_attention_interval"},
        {"ssm.conv_kernel", "SSM conv kernel", "ssm_conv_kernel"},
        {"ssm.state_size", "SSM state size", "ssm_state_size"},
        {"ssm.group_count", "SSM groups", "ssm_group_count"},
        {"ssm.time_step_rank", "SSM time-step rank (value heads)", "ssm_time_step_rank"},
        {"ssm.inner_size", "SSM inner size", "ssm_inner_size"},
    };
    int shown = 0;
    for (size_t i = 0; i < ARRAY_LEN(hp); i++) {
        char v[96];
        double u = 0;
        if (!inspect_hparam(ctx, s->arch, hp[i].suffix, v, sizeof(v), &u)) continue;
        if (hp[i].label) APPEND("%s %s %s", shown++ ? "," : " with", v, hp[i].label);
        if (strchr(v, '(')) cJSON_AddStringToObject(s->json, hp[i].json, v);
        else cJSON_AddNumberToObject(s->json, hp[i].json, u);
    }
    /* vocabulary: the token list, else {arch}.vocab_size */
    int64_t it = gguf_find_key(ctx, "tokenizer.ggml.tokens");
    double n_vocab = 0;
    char v[96];
    if (it >= 0 && ctx->kv[it].type == GGUF_TYPE_ARRAY) n_vocab = (double)ctx->kv[it].n;
    else if (inspect_hparam(ctx, s->arch, "vocab_size", v, sizeof(v), &n_vocab)) {}
    if (n_vocab > 0) {
        APPEND("%s a vocabulary of %.0f tokens", shown++ ? "," : " with", n_vocab);
        cJSON_AddNumberToObject(s->json, "n_vocab", n_vocab);
    }
    struct gguf_str tm;
    if (gguf_get_str(ctx, "tokenizer.ggml.model", &tm) == VLLMC_OK) {
        char m[64];
        APPEND(" (%s tokenizer)", gguf_str_copy(tm, m, sizeof(m)));
    }
    APPEND(". ");
    double n_layer = 0, interval = 0;
    if (inspect_hparam(ctx, s->arch, "full_attention_interval", v, sizeof(v), &interval) && interval >= 1 &&
        interval < 1e9 && inspect_hparam(ctx, s->arch, "block_count", v, sizeof(v), &n_layer) && n_layer < 1e9) {
        uint64_t iv = (uint64_t)interval, nl = (uint64_t)n_layer;
        APPEND("Hybrid: layer i uses full attention when (i+1) %% %" PRIu64 " == 0 (%" PRIu64 " of %" PRIu64
               " layers), the rest are linear-attention (SSM) layers. ", iv, nl / iv, nl);
    }
    char hb[32];
    inspect_human_bytes(tot->bytes, hb, sizeof(hb));
    APPEND("%" PRIu64 " tensors, %.3f B parameters, %s of weights (%.2f bits per weight)", ctx->n_tensors,
           (double)tot->params / 1e9, hb, tot->params ? 8.0 * (double)tot->bytes / (double)tot->params : 0.0);
    uint32_t top = 0;
    for (uint32_t ty = 0; ty < GGML_TYPE_COUNT; ty++)
        if (tot->per_type[ty].bytes > tot->per_type[top].bytes) top = ty;
    if (tot->bytes) APPEND(", mostly %s (%.0f%% of the bytes)", inspect_tname(top), 100.0 * (double)tot->per_type[top].bytes / (double)tot->bytes);
    APPEND(".");
#undef APPEND
    cJSON_AddStringToObject(s->json, "text", s->text);
}

/* ---- JSON output ---- */

static cJSON *inspect_json_scalar(enum gguf_type t, const uint8_t *p) {
    double d = 0;
    switch (t) {
    case GGUF_TYPE_BOOL: return cJSON_CreateBool(p[0] != 0);
    case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, p, 4); d = v; break; }
    case GGUF_TYPE_FLOAT64: memcpy(&d, p, 8); break;
    case GGUF_TYPE_UINT64: { uint64_t v; memcpy(&v, p, 8);
        if (v > (1ull << 53)) { char b[32]; snprintf(b, sizeof(b), "%" PRIu64, v); return cJSON_CreateString(b); }
        d = (double)v; break; }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8);
        if (v > (1ll << 53) || v < -(1ll << 53)) { char b[32]; snprintf(b, sizeof(b), "%" PRId64, v); return cJSON_CreateString(b); }
        d = (double)v; break; }
    default: {
        struct gguf_kv fake = {.type = GGUF_TYPE_ARRAY, .arr_type = t, .n = 1, .data = p};
        d = (double)gguf_arr_i64(&fake, 0);
    }
    }
    if (d != d || d - d != 0) { char b[32]; snprintf(b, sizeof(b), "%g", d); return cJSON_CreateString(b); }
    return cJSON_CreateNumber(d);
}

static cJSON *inspect_json_str(const char *p, uint64_t n) {
    char *s = malloc(n + 1);
    if (!s) return cJSON_CreateNull();
    memcpy(s, p, n);
    s[n] = 0; /* keys and strings may hold no NUL for C consumers; an inner NUL truncates here */
    cJSON *j = cJSON_CreateString(s);
    free(s);
    return j;
}

static int inspect_json(const char *path, const struct gguf_file *f, const struct inspect_totals *tot,
                        struct inspect_summary *sum, bool full) {
    const struct gguf_ctx *ctx = f->ctx;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", path);
    cJSON_AddNumberToObject(root, "file_size", (double)f->map_size);
    cJSON_AddNumberToObject(root, "version", ctx->version);
    cJSON_AddNumberToObject(root, "alignment", (double)ctx->alignment);
    cJSON_AddNumberToObject(root, "data_offset", (double)ctx->data_offset);
    cJSON *md = cJSON_AddArrayToObject(root, "metadata");
    for (uint64_t i = 0; i < ctx->n_kv; i++) {
        const struct gguf_kv *kv = &ctx->kv[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "key", inspect_json_str(kv->key.ptr, kv->key.len));
        cJSON_AddStringToObject(o, "type", gguf_type_name(kv->type));
        if (kv->type == GGUF_TYPE_ARRAY) {
            cJSON_AddStringToObject(o, "arr_type", gguf_type_name(kv->arr_type));
            cJSON_AddNumberToObject(o, "n", (double)kv->n);
            cJSON *arr = cJSON_AddArrayToObject(o, full ? "value" : "head");
            uint64_t show = full ? kv->n : VLLMC_MIN(kv->n, (uint64_t)INSPECT_ARR_HEAD);
            for (uint64_t j = 0; j < show; j++)
                cJSON_AddItemToArray(arr, kv->arr_type == GGUF_TYPE_STRING
                                              ? inspect_json_str(kv->strs[j].ptr, kv->strs[j].len)
                                              : inspect_json_scalar(kv->arr_type, kv->data + j * gguf_type_size(kv->arr_type)));
        } else if (kv->type == GGUF_TYPE_STRING) {
            struct gguf_str s = inspect_scalar_str(kv);
            cJSON_AddItemToObject(o, "value", inspect_json_str(s.ptr, s.len));
        } else {
            cJSON_AddItemToObject(o, "value", inspect_json_scalar(kv->type, kv->data));
        }
        cJSON_AddItemToArray(md, o);
    }
    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        const struct gguf_tensor *t = &ctx->tensors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "name", inspect_json_str(t->name.ptr, t->name.len));
        cJSON_AddStringToObject(o, "type", inspect_tname(t->type));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (uint32_t d = 0; d < (t->n_dims ? t->n_dims : 1); d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[d]));
        cJSON_AddNumberToObject(o, "bytes", (double)t->size_bytes);
        cJSON_AddNumberToObject(o, "offset", (double)t->offset);
        cJSON_AddItemToArray(ts, o);
    }
    cJSON *to = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddNumberToObject(to, "params", (double)tot->params);
    cJSON_AddNumberToObject(to, "bytes", (double)tot->bytes);
    cJSON_AddNumberToObject(to, "bits_per_weight", tot->params ? 8.0 * (double)tot->bytes / (double)tot->params : 0.0);
    cJSON *pt = cJSON_AddObjectToObject(to, "per_type");
    for (uint32_t ty = 0; ty < GGML_TYPE_COUNT; ty++) {
        if (!tot->per_type[ty].n_tensors) continue;
        cJSON *o = cJSON_AddObjectToObject(pt, inspect_tname(ty));
        cJSON_AddNumberToObject(o, "tensors", (double)tot->per_type[ty].n_tensors);
        cJSON_AddNumberToObject(o, "params", (double)tot->per_type[ty].params);
        cJSON_AddNumberToObject(o, "bytes", (double)tot->per_type[ty].bytes);
    }
    cJSON_AddItemToObject(root, "summary", sum->json);
    sum->json = NULL;
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) { fprintf(stderr, "vllmc inspect: out of memory\n"); return 1; }
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
    return 0;
}

static void inspect_usage(FILE *o) {
    fprintf(o, "usage: vllmc inspect FILE.gguf [--json] [--full]\n"
               "  Print a GGUF file's metadata, tensor table, totals and an architecture summary.\n"
               "  --json   machine-readable output\n"
               "  --full   print arrays and long strings in full\n");
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, full = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--full")) full = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { inspect_usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "vllmc inspect: unknown option '%s'\n", argv[i]); inspect_usage(stderr); return 2; }
        else if (path) { fprintf(stderr, "vllmc inspect: more than one file given\n"); return 2; }
        else path = argv[i];
    }
    if (!path) { inspect_usage(stderr); return 2; }
    struct gguf_file *f = NULL;
    vllmc_status st = gguf_file_open(path, &f);
    if (st != VLLMC_OK) {
        fprintf(stderr, "vllmc inspect: %s (%s)\n", vllmc_last_error(), vllmc_status_str(st));
        return 1;
    }
    const struct gguf_ctx *ctx = f->ctx;
    struct inspect_totals tot;
    inspect_sum(ctx, &tot);
    struct inspect_summary sum;
    memset(&sum, 0, sizeof(sum));
    inspect_summarise(ctx, &tot, &sum);
    if (json) {
        int rc = inspect_json(path, f, &tot, &sum, full);
        cJSON_Delete(sum.json);
        gguf_file_close(f);
        return rc;
    }
    FILE *o = stdout;
    char hb[32], hb2[32];
    inspect_human_bytes(f->map_size, hb, sizeof(hb));
    fprintf(o, "%s: GGUF v%u, %" PRIu64 " bytes (%s), alignment %" PRIu64 ", tensor data at offset %" PRIu64 "\n\n",
            path, ctx->version, f->map_size, hb, ctx->alignment, ctx->data_offset);
    fprintf(o, "metadata (%" PRIu64 " keys):\n", ctx->n_kv);
    for (uint64_t i = 0; i < ctx->n_kv; i++) inspect_print_kv(o, &ctx->kv[i], full);
    fprintf(o, "\ntensors (%" PRIu64 "):\n  %5s  %-40s %-8s %-26s %14s\n", ctx->n_tensors, "#", "name", "type", "shape (ne)", "bytes");
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        const struct gguf_tensor *t = &ctx->tensors[i];
        char name[80], shape[96];
        inspect_shape(t, shape, sizeof(shape));
        fprintf(o, "  %5" PRIu64 "  %-40s %-8s %-26s %14" PRIu64 "\n", i, gguf_str_copy(t->name, name, sizeof(name)),
                inspect_tname(t->type), shape, t->size_bytes);
    }
    inspect_human_bytes(tot.bytes, hb, sizeof(hb));
    fprintf(o, "\ntotals: %" PRIu64 " tensors, %" PRIu64 " params, %" PRIu64 " bytes (%s), %.3f bits/weight\n", ctx->n_tensors,
            tot.params, tot.bytes, hb, tot.params ? 8.0 * (double)tot.bytes / (double)tot.params : 0.0);
    for (uint32_t ty = 0; ty < GGML_TYPE_COUNT; ty++) {
        const struct inspect_type_total *p = &tot.per_type[ty];
        if (!p->n_tensors) continue;
        inspect_human_bytes(p->bytes, hb2, sizeof(hb2));
        fprintf(o, "  %-8s %5" PRIu64 " tensors %14" PRIu64 " params %12s  %6.2f%% of bytes\n", inspect_tname(ty),
                p->n_tensors, p->params, hb2, tot.bytes ? 100.0 * (double)p->bytes / (double)tot.bytes : 0.0);
    }
    fprintf(o, "\nsummary: %s\n", sum.text);
    cJSON_Delete(sum.json);
    gguf_file_close(f);
    return 0;
}
