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

#endif
