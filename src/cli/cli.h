/* Subcommands of the vllmc binary. Each lives in its own cmd_<name>.c and returns the process exit
 * status; main.c declares them weak so a build without one says so instead of failing to link. */
#ifndef VLLMC_CLI_H
#define VLLMC_CLI_H

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_serve(int argc, char **argv); /* `vllmc bench serve`: argv[0] is "serve" */
int cmd_quantize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* cli_device.c: the backend of --device auto|cpu|cuda (auto: CUDA when built with it and a GPU is present) */
#include <stdbool.h>
#include <stdio.h>
#include "backend/backend.h"
enum cli_device { CLI_DEVICE_AUTO, CLI_DEVICE_CPU, CLI_DEVICE_CUDA };
bool cli_device_parse(const char *s, enum cli_device *out);
enum cli_device cli_device_resolve(enum cli_device d); /* AUTO to CPU or CUDA */
/* --mamba-ssm-cache-dtype: auto (= float32), float32 / fp32 / f32, bfloat16 / bf16 -> *bf16 */
bool cli_ssm_dtype_parse(const char *s, bool *bf16);
struct cli_backend_opts {
    enum cli_device device;
    int threads;    /* cpu: 0 = all */
    bool reference; /* cpu: the plain scalar ops */
    bool eager;     /* cuda: no graphs */
    bool profile;   /* cuda: event-timed per op family (eager); an error on the cpu device */
};
/* *is_cuda: whether the backend made is the CUDA one. Errors (no GPU, a CPU-only build) are clear messages. */
vllmc_status cli_backend_create(const struct cli_backend_opts *o, struct backend **be, bool *is_cuda);
#ifdef VLLMC_CUDA
struct backend_cuda_prof;
/* op, calls, ms, share, GB/s per op family; calls and ms divided by div (e.g. per token) */
void cli_print_prof_table(FILE *f, const struct backend_cuda_prof *p, double div);
double cli_prof_busy_ms(const struct backend_cuda_prof *p);
#endif

#endif
