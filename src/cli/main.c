/* vllmc: the command-line front end. Thin: picks the subcommand and hands it argv. */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "vllmc.h"

#pragma weak cmd_generate
#pragma weak cmd_chat
#pragma weak cmd_serve
#pragma weak cmd_bench
#pragma weak cmd_quantize
#pragma weak cmd_inspect
#pragma weak cmd_tokenize
#pragma weak cmd_template

struct subcommand { const char *name; int (*fn)(int, char **); const char *help; };

static void usage(const struct subcommand *cmds, size_t n) {
    fprintf(stderr, "vllmc %s: LLM inference engine for GGUF models\n\nusage: vllmc COMMAND [ARGS]\n\n", VLLMC_VERSION);
    for (size_t i = 0; i < n; i++)
        if (cmds[i].fn) fprintf(stderr, "  %-10s %s\n", cmds[i].name, cmds[i].help);
    fprintf(stderr, "\n`vllmc COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv) {
    const struct subcommand cmds[] = {
        {"generate", cmd_generate, "generate text from a prompt"},
        {"chat", cmd_chat, "interactive chat with the model's chat template"},
        {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
        {"bench", cmd_bench, "measure prefill and decode speed"},
        {"quantize", cmd_quantize, "convert a GGUF to another quant type mix"},
        {"inspect", cmd_inspect, "print a GGUF file's metadata and tensors"},
        {"tokenize", cmd_tokenize, "tokenize text with a model's vocabulary"},
        {"template", cmd_template, "render a conversation with the model's chat template"},
    };
    const size_t n = sizeof(cmds) / sizeof(cmds[0]);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { usage(cmds, n); return argc < 2 ? 2 : 0; }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) { printf("vllmc %s\n", VLLMC_VERSION); return 0; }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        if (!cmds[i].fn) { fprintf(stderr, "vllmc: '%s' is not built into this binary\n", argv[1]); return 2; }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "vllmc: unknown command '%s'\n\n", argv[1]);
    usage(cmds, n);
    return 2;
}
