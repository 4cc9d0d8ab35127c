/* The backend a command runs on (--device auto|cpu|cuda), shared by generate, chat and bench, and the
 * CUDA per-op-family profile table they print. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#ifdef VLLMC_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

bool cli_device_parse(const char *s, enum cli_device *out) {
    if (!strcmp(s, "auto")) *out = CLI_DEVICE_AUTO;
    else if (!strcmp(s, "cpu")) *out = CLI_DEVICE_CPU;
    else if (!strcmp(s, "cuda")) *out = CLI_DEVICE_CUDA;
    else return false;
    return true;
}

bool cli_ssm_dtype_parse(const char *s, bool *bf16) {
    if (!strcmp(s, "auto") || !strcmp(s, "float32") || !strcmp(s, "fp32") || !strcmp(s, "f32")) *bf16 = false;
    else if (!strcmp(s, "bfloat16") || !strcmp(s, "bf16")) *bf16 = true;
    else return false;
    return true;
}

enum cli_device cli_device_resolve(enum cli_device d) {
#ifdef VLLMC_CUDA
    if (d == CLI_DEVICE_AUTO) d = backend_cuda_device_count() > 0 ? CLI_DEVICE_CUDA : CLI_DEVICE_CPU;
#else
    if (d == CLI_DEVICE_AUTO) d = CLI_DEVICE_CPU;
#endif
    return d;
}

vllmc_status cli_backend_create(const struct cli_backend_opts *o, struct backend **be, bool *is_cuda) {
    *be = NULL;
    *is_cuda = false;
    const enum cli_device d = cli_device_resolve(o->device);
#ifdef VLLMC_CUDA
    if (d == CLI_DEVICE_CUDA) {
        if (backend_cuda_device_count() <= 0) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "device cuda: no GPU found");
        if (o->reference) return vllmc_errorf(VLLMC_ERR_INVALID, "--reference runs on the cpu device only");
        struct backend_cuda_opts co = {0};
        co.enforce_eager = o->eager;
        co.profile = o->profile;
        *is_cuda = true;
        return backend_cuda_create(&co, be);
    }
#else
    if (d == CLI_DEVICE_CUDA)
        return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "device cuda: this build has no GPU backend (make CUDA=1 or HIP=1)");
#endif
    if (o->profile) return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "--profile times the CUDA backend's kernels; the cpu device has none");
    return backend_cpu_create(o->threads, o->reference, be);
}

#ifdef VLLMC_CUDA
void cli_print_prof_table(FILE *f, const struct backend_cuda_prof *p, double div) {
    double busy = 0;
    for (int i = 0; i < p->n; i++) busy += p->ms[i];
    fprintf(f, "%-12s %10s %10s %7s %9s\n", "op", "calls", "ms", "share", "GB/s");
    for (int i = 0; i < p->n; i++)
        fprintf(f, "%-12s %10.1f %10.4f %6.1f%% %9.0f\n", p->name[i], (double)p->calls[i] / div, p->ms[i] / div,
                busy > 0 ? 100.0 * p->ms[i] / busy : 0.0, p->bytes[i] > 0 ? p->bytes[i] / (p->ms[i] * 1e-3) / 1e9 : 0.0);
}

double cli_prof_busy_ms(const struct backend_cuda_prof *p) {
    double busy = 0;
    for (int i = 0; i < p->n; i++) busy += p->ms[i];
    return busy;
}
#endif
