/* `vllmc tokenize`: tokenize text with a GGUF file's vocabulary; print ids and pieces, only the ids as one
 * JSON array (--ids), a batch of JSON-string lines (--jsonl), the throughput on a file (--bench), or the
 * vocabulary itself (--info, --dump-pieces). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void tokenize_usage(void) {
    fprintf(stderr,
            "usage: vllmc tokenize -m MODEL.gguf (-p TEXT | -f FILE | --jsonl FILE | --info | --dump-pieces) [options]\n"
            "  -m, --model FILE     GGUF file (a vocabulary-only file works)\n"
            "  -p, --prompt TEXT    text to tokenize\n"
            "  -f, --file FILE      read the text from FILE (bytes as they are)\n"
            "  --ids                print only the ids, as one JSON array on one line\n"
            "  --no-parse-special   treat special-token text in the input as plain text\n"
            "  --no-add-special     never add BOS/EOS (default: as the vocabulary asks)\n"
            "  --jsonl FILE         each line a JSON string or {\"hex\": \"...\"} (exact bytes): one line per input,\n"
            "                       {\"ids\": [...], \"decoded_hex\": \"...\"} (decode of the ids, hex)\n"
            "  --bench N            tokenize the text N times, print MB/s (median) and token count\n"
            "  --info               print the vocabulary's facts as one JSON line (no text needed)\n"
            "  --dump-pieces        print every token's piece (the bytes it decodes to) in hex, one per line\n");
}

static char *tokenize_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *q = realloc(buf, cap * 2);
        if (!q) { free(buf); buf = NULL; break; }
        buf = q;
        cap *= 2;
    }
    if (buf && ferror(f)) { free(buf); buf = NULL; }
    fclose(f);
    *len = n;
    return buf;
}

static void tokenize_print_piece(const char *p, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

static int tokenize_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int tokenize_hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int tokenize_unhex(const char *s, size_t n, char *out) {
    if (n % 2) return -1;
    for (size_t i = 0; i < n; i += 2) {
        int hi = tokenize_hexval(s[i]), lo = tokenize_hexval(s[i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i / 2] = (char)(hi * 16 + lo);
    }
    return 0;
}

static int tokenize_jsonl(const struct tokenizer *tok, const char *path, unsigned flags) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "vllmc tokenize: cannot open %s\n", path); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    long lineno = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (n == 0 || (n == 1 && line[0] == '\n')) continue;
        cJSON *j = cJSON_ParseWithLength(line, (size_t)n);
        cJSON *hex = j && cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "hex") : NULL;
        if (!j || !(cJSON_IsString(j) || cJSON_IsString(hex))) {
            fprintf(stderr, "vllmc tokenize: %s:%ld: not a JSON string or {\"hex\": \"...\"}\n", path, lineno);
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        const char *text = hex ? hex->valuestring : j->valuestring;
        size_t text_len = strlen(text);
        char *bytes = NULL;
        if (hex) { /* exact bytes, NUL and invalid UTF-8 included */
            bytes = malloc(text_len / 2 + 1);
            if (!bytes || tokenize_unhex(text, text_len, bytes) != 0) {
                fprintf(stderr, "vllmc tokenize: %s:%ld: bad hex\n", path, lineno);
                free(bytes);
                cJSON_Delete(j);
                rc = 1;
                break;
            }
            text = bytes;
            text_len /= 2;
        }
        int32_t *ids = NULL;
        size_t n_ids = 0;
        vllmc_status st = tokenizer_encode_alloc(tok, text, text_len, flags, &ids, &n_ids);
        free(bytes);
        if (st != VLLMC_OK) {
            fprintf(stderr, "vllmc tokenize: %s:%ld: %s\n", path, lineno, vllmc_last_error());
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        char *dec = NULL;
        size_t n_dec = 0;
        st = tokenizer_decode_alloc(tok, ids, n_ids, 0, &dec, &n_dec);
        fputs("{\"ids\": [", stdout);
        for (size_t i = 0; i < n_ids; i++) printf(i ? ", %d" : "%d", ids[i]);
        fputs("], \"decoded_hex\": \"", stdout);
        for (size_t i = 0; st == VLLMC_OK && i < n_dec; i++) printf("%02x", (unsigned char)dec[i]);
        fputs("\"}\n", stdout);
        free(dec);
        free(ids);
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    return rc;
}

static void tokenize_print_info(const struct tokenizer *tok) {
    uint32_t n = tokenizer_n_vocab(tok);
    printf("{\"n_vocab\": %u, \"model\": \"%s\", \"pre\": \"%s\", \"bos\": %d, \"eos\": %d, \"add_bos\": %s, \"eog\": [",
           n, tokenizer_model_type(tok) == TOKENIZER_MODEL_BPE ? "gpt2" : "llama", tokenizer_pre_name(tok),
           tokenizer_bos(tok), tokenizer_eos(tok), tokenizer_add_bos(tok) ? "true" : "false");
    const char *sep = "";
    for (uint32_t i = 0; i < n; i++)
        if (tokenizer_is_eog(tok, (int32_t)i)) { printf("%s%u", sep, i); sep = ", "; }
    fputs("], \"control\": [", stdout);
    sep = "";
    for (uint32_t i = 0; i < n; i++)
        if (tokenizer_is_control(tok, (int32_t)i)) { printf("%s%u", sep, i); sep = ", "; }
    fputs("]}\n", stdout);
}

static void tokenize_dump_pieces(const struct tokenizer *tok) {
    uint32_t n = tokenizer_n_vocab(tok);
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *p = tokenizer_piece(tok, (int32_t)i, &len);
        for (size_t k = 0; k < len; k++) printf("%02x", (unsigned char)p[k]);
        putchar('\n');
    }
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *jsonl = NULL;
    bool ids_only = false, info = false, dump = false;
    unsigned flags = TOKENIZER_ENCODE_PARSE_SPECIAL | TOKENIZER_ENCODE_ADD_SPECIAL;
    long bench = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) prompt = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) file = argv[++i];
        else if (!strcmp(a, "--jsonl") && has_val) jsonl = argv[++i];
        else if (!strcmp(a, "--bench") && has_val) {
            char *end;
            bench = strtol(argv[++i], &end, 10);
            if (*end || bench < 1 || bench > 1000) { fprintf(stderr, "vllmc tokenize: --bench wants 1..1000\n"); return 2; }
        } else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--info")) info = true;
        else if (!strcmp(a, "--dump-pieces")) dump = true;
        else if (!strcmp(a, "--no-parse-special")) flags &= ~TOKENIZER_ENCODE_PARSE_SPECIAL;
        else if (!strcmp(a, "--no-add-special")) flags &= ~TOKENIZER_ENCODE_ADD_SPECIAL;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tokenize_usage(); return 0; }
        else { fprintf(stderr, "vllmc tokenize: unknown or incomplete option '%s'\n", a); tokenize_usage(); return 2; }
    }
    if (!model || (!!prompt + !!file + !!jsonl + (info || dump)) != 1) { tokenize_usage(); return 2; }

    struct gguf_file *gf = NULL;
    struct tokenizer *tok = NULL;
    char *text = NULL;
    int rc = 1;
    if (gguf_file_open(model, &gf) != VLLMC_OK) { fprintf(stderr, "vllmc tokenize: %s\n", vllmc_last_error()); goto done; }
    if (tokenizer_load_gguf(gf->ctx, &tok) != VLLMC_OK) {
        fprintf(stderr, "vllmc tokenize: %s: %s\n", model, vllmc_last_error());
        goto done;
    }
    if (jsonl) { rc = tokenize_jsonl(tok, jsonl, flags); goto done; }
    if (info || dump) {
        if (info) tokenize_print_info(tok);
        if (dump) tokenize_dump_pieces(tok);
        rc = 0;
        goto done;
    }
    size_t len;
    if (file) {
        text = tokenize_read_file(file, &len);
        if (!text) { fprintf(stderr, "vllmc tokenize: cannot read %s\n", file); goto done; }
    } else {
        len = strlen(prompt);
    }
    const char *src = file ? text : prompt;
    if (bench) {
        double *mbs = malloc((size_t)bench * sizeof(double));
        size_t n_ids = 0;
        if (!mbs) goto done;
        for (long r = 0; r < bench; r++) {
            int32_t *ids = NULL;
            double t0 = vllmc_time_s();
            vllmc_status st = tokenizer_encode_alloc(tok, src, len, flags, &ids, &n_ids);
            double dt = vllmc_time_s() - t0;
            free(ids);
            if (st != VLLMC_OK) { fprintf(stderr, "vllmc tokenize: %s\n", vllmc_last_error()); free(mbs); goto done; }
            mbs[r] = (double)len / 1e6 / (dt > 0 ? dt : 1e-9);
        }
        qsort(mbs, (size_t)bench, sizeof(double), tokenize_cmp_double);
        printf("{\"bytes\": %zu, \"tokens\": %zu, \"runs\": %ld, \"mb_per_s_median\": %.3f, \"mb_per_s_min\": %.3f, "
               "\"mb_per_s_max\": %.3f}\n", len, n_ids, bench, mbs[bench / 2], mbs[0], mbs[bench - 1]);
        free(mbs);
        rc = 0;
        goto done;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (tokenizer_encode_alloc(tok, src, len, flags, &ids, &n_ids) != VLLMC_OK) {
        fprintf(stderr, "vllmc tokenize: %s\n", vllmc_last_error());
        goto done;
    }
    if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n_ids; i++) printf(i ? ", %d" : "%d", ids[i]);
        puts("]");
    } else {
        for (size_t i = 0; i < n_ids; i++) {
            size_t n;
            const char *p = tokenizer_piece(tok, ids[i], &n);
            printf("%6d -> ", ids[i]);
            tokenize_print_piece(p, n);
            putchar('\n');
        }
    }
    free(ids);
    rc = 0;
done:
    free(text);
    tokenizer_destroy(tok);
    gguf_file_close(gf);
    return rc;
}
