/* `vllmc template`: render a conversation (JSON) with a model's chat template, as transformers'
 * apply_chat_template would, and print the prompt text exactly (no trailing newline added). */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "common/common.h"
#include "gguf/gguf.h"
#include "template/template.h"

static void usage(void) {
    fprintf(stderr,
            "usage: vllmc template (-m MODEL.gguf | --template FILE.jinja) -f CONVERSATION.json\n"
            "                      [--bos TEXT] [--eos TEXT] [--check]\n\n"
            "CONVERSATION.json: {\"messages\": [...], \"tools\": [...]?, \"add_generation_prompt\": bool?,\n"
            "                    \"enable_thinking\": bool?, ...any other template variables}\n"
            "Missing tools/documents become null and add_generation_prompt false, as in transformers.\n"
            "bos_token/eos_token come from the GGUF vocabulary (or --bos/--eos).\n"
            "-f - reads the conversation from stdin. --check only compiles the template.\n\n"
            "vllmc template --batch FILE.jsonl   (testing) each line {\"template\": TEXT, \"context\": JSON-TEXT};\n"
            "prints one line each: {\"ok\": true, \"text\": ...} or {\"ok\": false, \"error\": ..., \"parse\": bool}\n");
}

/* One JSON line per input line; the context stays text so numbers keep their int/float spelling. */
static int run_batch(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) { fprintf(stderr, "vllmc template: cannot read %s\n", path); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        cJSON *in = cJSON_ParseWithLength(line, (size_t)n), *res = cJSON_CreateObject();
        const cJSON *jt = cJSON_GetObjectItemCaseSensitive(in, "template"), *jc = cJSON_GetObjectItemCaseSensitive(in, "context");
        if (!res) { cJSON_Delete(in); rc = 1; break; }
        if (!cJSON_IsString(jt) || !cJSON_IsString(jc)) {
            cJSON_AddFalseToObject(res, "ok");
            cJSON_AddStringToObject(res, "error", "bad batch line: needs string fields template and context");
        } else {
            struct tmpl *t = NULL;
            char *out = NULL;
            size_t out_len = 0;
            vllmc_status st = tmpl_parse(jt->valuestring, strlen(jt->valuestring), &t);
            if (st == VLLMC_OK) st = tmpl_render_json(t, jc->valuestring, strlen(jc->valuestring), NULL, NULL, &out, &out_len);
            if (st == VLLMC_OK && strlen(out) == out_len) {
                cJSON_AddTrueToObject(res, "ok");
                cJSON_AddStringToObject(res, "text", out);
            } else {
                cJSON_AddFalseToObject(res, "ok");
                cJSON_AddStringToObject(res, "error", st == VLLMC_OK ? "output holds a NUL byte" : vllmc_last_error());
                cJSON_AddBoolToObject(res, "parse", t == NULL);
            }
            free(out);
            tmpl_free(t);
        }
        char *txt = cJSON_PrintUnformatted(res);
        if (txt) { fputs(txt, stdout); fputc('\n', stdout); free(txt); } else rc = 1;
        cJSON_Delete(res);
        cJSON_Delete(in);
    }
    free(line);
    if (f != stdin) fclose(f);
    return fflush(stdout) == 0 ? rc : 1;
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (len < cap) break;
        char *nb = cap > ((size_t)1 << 30) ? NULL : realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) { free(buf); buf = NULL; }
    if (f != stdin) fclose(f);
    *n = len;
    return buf;
}

/* token text by id from tokenizer.ggml.tokens; NULL if absent */
static char *gguf_token(const struct gguf_ctx *ctx, const char *id_key) {
    uint32_t id;
    const struct gguf_kv *toks;
    if (gguf_find_key(ctx, id_key) < 0 || gguf_get_u32(ctx, id_key, &id) != VLLMC_OK) return NULL;
    if (gguf_get_arr(ctx, "tokenizer.ggml.tokens", &toks) != VLLMC_OK || toks->arr_type != GGUF_TYPE_STRING || !toks->strs || id >= toks->n)
        return NULL;
    struct gguf_str s = toks->strs[id];
    char *r = malloc(s.len + 1);
    if (r) { memcpy(r, s.ptr, s.len); r[s.len] = 0; }
    return r;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *tmpl_path = NULL, *conv = NULL, *bos_arg = NULL, *eos_arg = NULL;
    int check_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!strcmp(a, "--check")) { check_only = 1; continue; }
        if (!strcmp(a, "--batch")) {
            if (!next) { fprintf(stderr, "vllmc template: --batch needs a file\n"); return 2; }
            return run_batch(next);
        }
        const char **dst = !strcmp(a, "-m") || !strcmp(a, "--model") ? &model
                           : !strcmp(a, "--template") || !strcmp(a, "-t") ? &tmpl_path
                           : !strcmp(a, "-f") || !strcmp(a, "--file") ? &conv
                           : !strcmp(a, "--bos") ? &bos_arg
                           : !strcmp(a, "--eos") ? &eos_arg : NULL;
        if (!dst) { fprintf(stderr, "vllmc template: unknown option '%s'\n", a); usage(); return 2; }
        if (!next) { fprintf(stderr, "vllmc template: %s needs a value\n", a); return 2; }
        *dst = next;
        i++;
    }
    if (!!model == !!tmpl_path || (!conv && !check_only)) { usage(); return 2; }

    int rc = 1;
    struct gguf_file *gf = NULL;
    struct tmpl *t = NULL;
    char *src = NULL, *json = NULL, *bos = NULL, *eos = NULL, *out = NULL;
    size_t src_len = 0, json_len = 0, out_len = 0;
    const char *tsrc;
    vllmc_status st;
    if (model) {
        struct gguf_str s;
        if ((st = gguf_file_open(model, &gf)) != VLLMC_OK) {
            fprintf(stderr, "vllmc template: %s\n", vllmc_last_error());
            goto done;
        }
        if (gguf_find_key(gf->ctx, "tokenizer.chat_template") < 0 || gguf_get_str(gf->ctx, "tokenizer.chat_template", &s) != VLLMC_OK) {
            fprintf(stderr, "vllmc template: %s has no tokenizer.chat_template\n", model);
            goto done;
        }
        tsrc = s.ptr;
        src_len = s.len;
        bos = gguf_token(gf->ctx, "tokenizer.ggml.bos_token_id");
        eos = gguf_token(gf->ctx, "tokenizer.ggml.eos_token_id");
    } else {
        if (!(src = read_all(tmpl_path, &src_len))) {
            fprintf(stderr, "vllmc template: cannot read %s\n", tmpl_path);
            goto done;
        }
        tsrc = src;
    }
    if (tmpl_parse(tsrc, src_len, &t) != VLLMC_OK) {
        fprintf(stderr, "vllmc template: %s\n", vllmc_last_error());
        goto done;
    }
    if (check_only) { fprintf(stderr, "vllmc template: template compiles\n"); rc = 0; goto done; }
    if (!(json = read_all(conv, &json_len))) {
        fprintf(stderr, "vllmc template: cannot read %s\n", conv);
        goto done;
    }
    struct tmpl_chat_defaults defs = {bos_arg ? bos_arg : bos, eos_arg ? eos_arg : eos};
    if (tmpl_render_json(t, json, json_len, &defs, NULL, &out, &out_len) != VLLMC_OK) {
        fprintf(stderr, "vllmc template: %s\n", vllmc_last_error());
        goto done;
    }
    rc = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;
done:
    free(out);
    free(json);
    free(src);
    free(bos);
    free(eos);
    tmpl_free(t);
    gguf_file_close(gf);
    return rc;
}
