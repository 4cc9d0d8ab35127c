/* Pre-tokenizer throughput: the hand-written matchers vs PCRE2 (JIT) running the same regex, on a text file;
 * checks both give the same words, then reports MB/s (median of RUNS) for gpt2, llama3, qwen2 and qwen35.
 * usage: bench_pretok FILE [RUNS=5]
 * build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_pretok.c build/libvllmc.a -lpcre2-8 -lcjson -lm -pthread */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "tokenizer/pretok.h"

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bench_run(const struct pretok *p, const uint8_t *text, size_t n, int runs, struct pretok_scratch *s) {
    double mbs[64];
    for (int r = 0; r < runs; r++) {
        double t0 = vllmc_time_s();
        if (pretok_split(p, text, n, s) != VLLMC_OK) { fprintf(stderr, "split failed: %s\n", vllmc_last_error()); exit(1); }
        mbs[r] = (double)n / 1e6 / (vllmc_time_s() - t0);
    }
    qsort(mbs, (size_t)runs, sizeof(double), bench_cmp);
    return mbs[runs / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_pretok FILE [RUNS=5]\n"); return 2; }
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (runs < 1 || runs > 64) runs = 5;
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) { perror("read"); return 1; }
    fclose(f);
    static const struct { enum pretok_kind kind; const char *name, *regex; } cases[] = {
        {PRETOK_GPT2, "gpt2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
        {PRETOK_LLAMA3, "llama3", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
        {PRETOK_QWEN2, "qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
        {PRETOK_QWEN35, "qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                                  "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    };
    printf("| pre-tokenizer | words | hand-written MB/s | PCRE2 JIT MB/s | same words |\n|---|---|---|---|---|\n");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct pretok hand, re;
        const char *rx[1] = {cases[c].regex};
        if (pretok_init(&hand, cases[c].kind, NULL, 0) != VLLMC_OK || pretok_init(&re, PRETOK_REGEX, rx, 1) != VLLMC_OK) {
            fprintf(stderr, "init: %s\n", vllmc_last_error());
            return 1;
        }
        struct pretok_scratch sh = {0}, sr = {0};
        double mh = bench_run(&hand, text, (size_t)n, runs, &sh);
        double mr = bench_run(&re, text, (size_t)n, runs, &sr);
        int same = sh.n_words == sr.n_words && !memcmp(sh.words, sr.words, sh.n_words * sizeof(uint32_t));
        printf("| %s | %zu | %.1f | %.1f | %s |\n", cases[c].name, sh.n_words, mh, mr, same ? "yes" : "NO");
        pretok_scratch_free(&sh);
        pretok_scratch_free(&sr);
        pretok_free(&hand);
        pretok_free(&re);
    }
    free(text);
    return 0;
}
