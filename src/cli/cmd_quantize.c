/* vllmc quantize: convert a GGUF model to a llama-quantize type mix (src/quant/qmix.h).
 * Arguments follow llama-quantize: [options] IN.gguf OUT.gguf TYPE [NTHREADS]. */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "quant/qmix.h"
#include "quant/quant.h"

static void quantize_usage(FILE *fp) {
    fprintf(fp,
            "usage: vllmc quantize [options] IN.gguf OUT.gguf TYPE [NTHREADS]\n\n"
            "TYPE: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S\n"
            "      Q5_K_M Q6_K (or llama-quantize's ftype number, e.g. 15 for Q4_K_M)\n\n"
            "options:\n"
            "  --threads N                 worker threads (default: all CPUs)\n"
            "  --output-tensor-type T      type of output.weight (e.g. Q8_0, F16)\n"
            "  --token-embedding-type T    type of token_embd.weight\n"
            "  --tensor-type PATTERN=T     tensors whose name contains a match of the regex PATTERN get type T\n"
            "                              (repeatable, first match wins; e.g. ssm_alpha=q8_0, 'blk\\.[0-3]\\.ffn_down=q6_k';\n"
            "                              T: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4)\n"
            "  --pure                      every quantizable tensor gets TYPE's default type\n"
            "  --leave-output-tensor       keep output.weight as it is\n"
            "  --allow-requantize          accept already-quantized inputs (dequantized first)\n"
            "  --max-memory MIB            stage a larger output in a scratch file (default: half the RAM)\n"
            "  --quiet                     no progress line\n"
            "  --verbose                   one line per tensor with its chosen type\n");
}

static bool quantize_parse_int(const char *s, long max, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 1 || v > max) return false;
    *out = (int)v;
    return true;
}

struct quantize_progress_state { bool tty; int last_pct; };

static void quantize_progress(const struct qmix_progress *p, void *user) {
    struct quantize_progress_state *s = user;
    int pct = p->n_total_bytes ? (int)(100.0 * (double)p->n_done_bytes / (double)p->n_total_bytes) : 100;
    if (!s->tty && pct < 100 && pct / 10 == s->last_pct / 10) return; /* a line per 10 % when not a terminal */
    s->last_pct = pct;
    double mb = (double)p->n_done_bytes / 1048576.0;
    fprintf(stderr, "%squantize: %3d%%  %8.1f / %.1f MiB  %6.1f MiB/s  %5.1f s%s", s->tty ? "\r" : "", pct, mb,
            (double)p->n_total_bytes / 1048576.0, p->elapsed_s > 0 ? mb / p->elapsed_s : 0.0, p->elapsed_s,
            s->tty ? "" : "\n");
    fflush(stderr);
}

/* Ctrl-C / kill while converting: remove OUT.tmp (unlink is async-signal-safe), then die of the signal. */
static char quantize_tmp_path[4200];

static void quantize_on_signal(int sig) {
    if (quantize_tmp_path[0]) unlink(quantize_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

#define QUANTIZE_MAX_OVERRIDES 64

int cmd_quantize(int argc, char **argv) {
    struct quantize_opts o = {.params = {.ftype = -1, .output_type = -1, .token_embd_type = -1}, .n_threads = 0};
    struct qmix_override ovr[QUANTIZE_MAX_OVERRIDES];
    char ovr_pat[QUANTIZE_MAX_OVERRIDES][256];
    size_t n_ovr = 0;
    const char *pos[4];
    int n_pos = 0;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { quantize_usage(stdout); return 0; }
        else if (!strcmp(a, "--pure")) o.params.pure = true;
        else if (!strcmp(a, "--leave-output-tensor")) o.params.leave_output = true;
        else if (!strcmp(a, "--allow-requantize")) o.allow_requantize = true;
        else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = true;
        else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) o.verbose = true;
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!has_val || !quantize_parse_int(argv[i + 1], 4096, &o.n_threads)) {
                fprintf(stderr, "vllmc quantize: %s needs a thread count between 1 and 4096\n", a);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--max-memory")) {
            int mib;
            if (!has_val || !quantize_parse_int(argv[i + 1], 1 << 24, &mib)) {
                fprintf(stderr, "vllmc quantize: --max-memory needs a size in MiB (at least 1)\n");
                return 2;
            }
            o.mem_limit_bytes = (uint64_t)mib << 20;
            i++;
        } else if (!strcmp(a, "--tensor-type")) {
            const char *v = has_val ? argv[i + 1] : "", *eq = strchr(v, '=');
            size_t plen = eq ? (size_t)(eq - v) : 0;
            if (!eq || plen == 0 || !eq[1] || plen >= sizeof(ovr_pat[0])) {
                fprintf(stderr, "vllmc quantize: --tensor-type needs PATTERN=TYPE (got '%s')\n", v);
                return 2;
            }
            if (n_ovr == QUANTIZE_MAX_OVERRIDES) {
                fprintf(stderr, "vllmc quantize: at most %d --tensor-type options\n", QUANTIZE_MAX_OVERRIDES);
                return 2;
            }
            for (size_t k = 0; k < plen; k++) ovr_pat[n_ovr][k] = (char)tolower((unsigned char)v[k]);
            ovr_pat[n_ovr][plen] = 0;
            if (qmix_parse_ggml_type(eq + 1, &ovr[n_ovr].type) != VLLMC_OK) {
                fprintf(stderr, "vllmc quantize: --tensor-type %s: %s\n", v, vllmc_last_error());
                return 2;
            }
            ovr[n_ovr].pattern = ovr_pat[n_ovr];
            n_ovr++;
            i++;
        } else if (!strcmp(a, "--output-tensor-type") || !strcmp(a, "--token-embedding-type")) {
            uint32_t t;
            if (!has_val) { fprintf(stderr, "vllmc quantize: %s needs a type\n", a); return 2; }
            if (qmix_parse_ggml_type(argv[i + 1], &t) != VLLMC_OK) {
                fprintf(stderr, "vllmc quantize: %s: %s\n", a, vllmc_last_error());
                return 2;
            }
            if (a[2] == 'o') o.params.output_type = (int)t;
            else o.params.token_embd_type = (int)t;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "vllmc quantize: unknown option '%s'\n\n", a);
            quantize_usage(stderr);
            return 2;
        } else if (n_pos < 4) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "vllmc quantize: too many arguments\n\n");
            quantize_usage(stderr);
            return 2;
        }
    }
    if (n_pos < 3) { quantize_usage(stderr); return 2; }
    o.params.overrides = ovr;
    o.params.n_overrides = n_ovr;
    if (qmix_parse_ftype(pos[2], &o.params.ftype) != VLLMC_OK) {
        fprintf(stderr, "vllmc quantize: %s\n", vllmc_last_error());
        return 2;
    }
    if (n_pos == 4 && !quantize_parse_int(pos[3], 4096, &o.n_threads)) {
        fprintf(stderr, "vllmc quantize: bad thread count '%s'\n", pos[3]);
        return 2;
    }
    if (!strcmp(pos[0], pos[1])) {
        fprintf(stderr, "vllmc quantize: input and output are the same file\n");
        return 2;
    }
    if (strlen(pos[1]) + 5 > sizeof(quantize_tmp_path)) {
        fprintf(stderr, "vllmc quantize: output path too long\n");
        return 2;
    }
    snprintf(quantize_tmp_path, sizeof(quantize_tmp_path), "%s.tmp", pos[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = quantize_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct quantize_progress_state ps = {.tty = isatty(2) != 0, .last_pct = -100};
    if (!quiet) { o.progress = quantize_progress; o.progress_user = &ps; }
    struct quantize_stats stats;
    vllmc_status st = quantize_model(pos[0], pos[1], &o, &stats);
    if (!quiet && ps.tty && ps.last_pct >= 0) fputc('\n', stderr);
    if (st != VLLMC_OK) {
        fprintf(stderr, "vllmc quantize: %s (%s)\n", vllmc_last_error(), vllmc_status_str(st));
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "vllmc quantize: %s -> %s (%s): %llu tensors, %llu converted, %llu fallbacks, "
                "%.2f MiB -> %.2f MiB in %.2f s\n", pos[0], pos[1], qmix_ftype_name(o.params.ftype),
                (unsigned long long)stats.n_tensors, (unsigned long long)stats.n_quantized,
                (unsigned long long)stats.n_fallback, stats.in_bytes / 1048576.0, stats.out_bytes / 1048576.0,
                stats.seconds);
    return 0;
}
