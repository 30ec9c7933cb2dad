// main.c: the strata command line. Only this file exits.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

#define STRATA_VERSION "0.1.0"

static const char help[] =
    "usage: strata COMMAND [options]\n"
    "\n"
    "Strata runs GGUF language models on the CPU (and on GPUs when built for them).\n"
    "\n"
    "commands:\n"
    "  run     generate text from a prompt          strata run -m MODEL -p \"Once upon a time\"\n"
    "  info    print a GGUF file's metadata and tensors   strata info MODEL\n"
    "  bench   measure prompt and generation speed     strata bench -m MODEL -p 512 -n 128\n"
    "  perplexity  perplexity of a text; KL divergence  strata perplexity -m MODEL -f TEXT\n"
    "  synth   write a model with random weights       strata synth -o tiny.gguf\n"
    "  chat    talk with a model in the terminal       strata chat -m MODEL\n"
    "  serve   OpenAI-compatible HTTP server and chat page   strata serve -m MODEL --port 8080\n"
    "\n"
    "  strata COMMAND --help   explains a command's options\n"
    "  strata --version        prints the version\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "%s", help);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        printf("%s", help);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("strata %s\n", STRATA_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cli_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "perplexity")) return cli_perplexity(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cli_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cli_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 1, argv + 1);
    fprintf(stderr, "strata: unknown command '%s'\n\n%s", cmd, help);
    return 2;
}
