/* `vllmc serve MODEL.gguf`: OpenAI-compatible HTTP server. Flag names follow vLLM's `vllm serve`,
 * with llama.cpp's short aliases (-m, -c, -np, -ngl). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/backend.h"
#include "cli/cli.h"
#include "server/server.h"

static void serve_usage(void) {
    fprintf(stderr,
            "usage: vllmc serve MODEL.gguf [options]      (or -m MODEL.gguf)\n"
            "  --host HOST                      address to listen on (default 127.0.0.1)\n"
            "  --port N                         port (default 8000)\n"
            "  --api-key KEY                    require 'Authorization: Bearer KEY' on /v1/*\n"
            "  --served-model-name NAME         model name in the API (default: the model path)\n"
            "  --max-model-len N, -c N          tokens per request, prompt + output (default min(training context, 4096))\n"
            "  --max-num-seqs N, -np N          requests running at once (default 16)\n"
            "  --max-num-batched-tokens N       tokens per engine step (default 2048 on the GPU, 512 on the CPU)\n"
            "  --num-gpu-blocks-override N      exactly N KV blocks of 16 tokens\n"
            "  --device cuda|cpu                where the model runs (default: cuda when built with CUDA and a GPU is present)\n"
            "  --gpu-memory-utilization F       fraction (0, 1] of the device's memory (the host's on cpu) for weights,\n"
            "                                   activations, KV cache and state; the KV cache takes what is left\n"
            "  --kv-cache-dtype DTYPE           KV cache element type: auto (= fp16), fp16, bf16, fp32, or fp8 / fp8_e4m3\n"
            "                                   (e4m3 with a per-tensor K and V scale, 1.0 as in vLLM)\n"
            "  --mamba-ssm-cache-dtype DTYPE    hybrid models (qwen35): the Gated DeltaNet state, auto (= float32), float32,\n"
            "                                   or bfloat16 (half its memory and traffic; rounded once a step)\n"
            "  --enable-prefix-caching / --no-enable-prefix-caching   (default on)\n"
            "  --seed N                         seed for requests that give none (default 0)\n"
            "  --chat-template FILE|TEXT        chat template instead of the GGUF's\n"
            "  --reasoning-parser qwen3|none    split <think> output into reasoning_content (default: when the template has <think>)\n"
            "  --disable-log-requests           no line per request\n"
            "  --enforce-eager                  cuda: run every op as it is called, no CUDA graphs for decode steps\n"
            "  --batch-invariant                cuda: compute every row the same way whatever runs beside it, so a\n"
            "                                   request's tokens never depend on the batch (costs the fast prefill paths)\n"
            "  --no-batch-invariant             cuda: the default: split-K decode and the GEMM / chunked prefill paths\n"
            "  -ngl N, --n-gpu-layers N         accepted and ignored (the chosen device runs every layer)\n"
            "  -t N, --threads N                CPU threads (default: all; cpu device)\n"
            "  --max-pending-requests N         generation requests in flight before 429 (default 4096)\n"
            "  --max-request-bytes N            request body limit (default 16777216; 413 above)\n"
            "  --timeout N                      idle connection timeout, seconds (default 600)\n");
}

static bool parse_i64(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int cmd_serve(int argc, char **argv) {
    struct srv_opts o;
    srv_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n = 0;
#define NEED_ARG() do { if (!v) { fprintf(stderr, "vllmc serve: %s needs a value\n", a); return 2; } i++; } while (0)
#define BAD(why) do { fprintf(stderr, "vllmc serve: bad value for %s: '%s' (%s)\n", a, v, why); return 2; } while (0)
#define INT_ARG(lo, hi, why) do { NEED_ARG(); if (!parse_i64(v, lo, hi, &n)) BAD(why); } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { serve_usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_ARG(); o.model_path = v; }
        else if (!strcmp(a, "--host")) { NEED_ARG(); if (!*v) BAD("empty"); o.host = v; }
        else if (!strcmp(a, "--port")) { INT_ARG(0, 65535, "a port number 0..65535"); o.port = (int)n; }
        else if (!strcmp(a, "--api-key")) { NEED_ARG(); if (!*v) BAD("empty"); o.api_key = v; }
        else if (!strcmp(a, "--served-model-name")) { NEED_ARG(); if (!*v) BAD("empty"); o.served_model_name = v; }
        else if (!strcmp(a, "--max-model-len") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            INT_ARG(2, 1 << 24, "an integer 2..16777216"); o.eng.max_model_len = (int32_t)n;
        } else if (!strcmp(a, "--max-num-seqs") || !strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            INT_ARG(1, 4096, "an integer 1..4096"); o.eng.max_num_seqs = (int32_t)n;
        } else if (!strcmp(a, "--max-num-batched-tokens") || !strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            INT_ARG(1, 1 << 20, "an integer 1..1048576"); o.eng.max_num_batched_tokens = (int32_t)n;
        } else if (!strcmp(a, "--num-gpu-blocks-override")) {
            INT_ARG(1, 1 << 26, "an integer >= 1"); o.eng.kv_blocks = (int32_t)n;
        } else if (!strcmp(a, "--gpu-memory-utilization")) {
            NEED_ARG();
            char *end;
            errno = 0;
            double f = strtod(v, &end);
            if (errno || end == v || *end || !(f > 0 && f <= 1)) BAD("a fraction in (0, 1]");
            o.eng.gpu_memory_utilization = (float)f;
        } else if (!strcmp(a, "--device")) {
            NEED_ARG();
            if (!strcmp(v, "cuda") || !strcmp(v, "gpu")) o.eng.device = VLLMC_DEVICE_CUDA;
            else if (!strcmp(v, "cpu")) o.eng.device = VLLMC_DEVICE_CPU;
            else if (!strcmp(v, "auto")) o.eng.device = VLLMC_DEVICE_AUTO;
            else BAD("cuda, cpu or auto");
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            NEED_ARG();
            enum bk_kv_dtype kd;
            if (!bk_kv_dtype_parse(v, &kd)) BAD("auto, fp16, bf16, fp8, fp8_e4m3 or fp32");
            o.eng.kv_dtype = kd == BK_KV_F32 ? VLLMC_KV_F32 : kd == BK_KV_BF16 ? VLLMC_KV_BF16
                           : kd == BK_KV_FP8_E4M3 ? VLLMC_KV_FP8_E4M3 : VLLMC_KV_F16;
        } else if (!strcmp(a, "--mamba-ssm-cache-dtype")) {
            NEED_ARG();
            bool bf;
            if (!cli_ssm_dtype_parse(v, &bf)) BAD("auto, float32 or bfloat16");
            o.eng.mamba_ssm_cache_dtype = bf ? VLLMC_SSM_BF16 : VLLMC_SSM_F32;
        } else if (!strcmp(a, "--enable-prefix-caching")) o.eng.enable_prefix_caching = 1;
        else if (!strcmp(a, "--no-enable-prefix-caching")) o.eng.enable_prefix_caching = 0;
        else if (!strcmp(a, "--seed")) { INT_ARG(0, INT64_MAX, "a non-negative integer"); o.eng.seed = (uint64_t)n; }
        else if (!strcmp(a, "--chat-template")) { NEED_ARG(); o.chat_template_path = v; }
        else if (!strcmp(a, "--reasoning-parser")) {
            NEED_ARG();
            if (!strcmp(v, "qwen3") || !strcmp(v, "deepseek_r1")) o.reasoning = 1;
            else if (!strcmp(v, "none")) o.reasoning = 0;
            else BAD("qwen3, deepseek_r1 or none");
        } else if (!strcmp(a, "--disable-log-requests") || !strcmp(a, "--no-enable-log-requests")) o.log_requests = false;
        else if (!strcmp(a, "--enable-log-requests")) o.log_requests = true;
        else if (!strcmp(a, "--enforce-eager")) o.eng.enforce_eager = 1;
        else if (!strcmp(a, "--no-batch-invariant")) o.eng.batch_invariant = 0;
        else if (!strcmp(a, "--batch-invariant")) o.eng.batch_invariant = 1;
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) {
            INT_ARG(-1, 1 << 20, "an integer");
            fprintf(stderr, "vllmc serve: note: %s is accepted and ignored (the chosen device runs every layer)\n", a);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { INT_ARG(0, 1024, "an integer 0..1024"); o.eng.threads = (int)n; }
        else if (!strcmp(a, "--max-pending-requests")) { INT_ARG(1, 1 << 20, "an integer >= 1"); o.max_pending = (int)n; }
        else if (!strcmp(a, "--max-request-bytes")) { INT_ARG(1024, 1ll << 32, "an integer 1024..4294967296"); o.max_body = (size_t)n; }
        else if (!strcmp(a, "--timeout")) { INT_ARG(1, 86400, "seconds 1..86400"); o.timeout_s = (int)n; }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "vllmc serve: unknown option '%s' (see vllmc serve --help)\n", a); return 2; }
        else if (!o.model_path) o.model_path = a;
        else { fprintf(stderr, "vllmc serve: unexpected argument '%s' (the model is already %s)\n", a, o.model_path); return 2; }
#undef NEED_ARG
#undef BAD
#undef INT_ARG
    }
    if (!o.model_path) { fprintf(stderr, "vllmc serve: give the model: vllmc serve MODEL.gguf\n"); return 2; }
    if (access(o.model_path, R_OK) != 0) { fprintf(stderr, "vllmc serve: cannot read %s: %s\n", o.model_path, strerror(errno)); return 2; }
    if (o.eng.max_num_batched_tokens && o.eng.max_num_seqs && o.eng.max_num_batched_tokens < o.eng.max_num_seqs) {
        fprintf(stderr, "vllmc serve: --max-num-batched-tokens (%d) must be at least --max-num-seqs (%d)\n", o.eng.max_num_batched_tokens,
                o.eng.max_num_seqs);
        return 2;
    }
    /* every thread inherits this mask; srv_run waits for the signals */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    return srv_run(&o);
}
