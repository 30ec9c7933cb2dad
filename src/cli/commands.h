// commands.h: the strata subcommands. Each takes the arguments after the
// program name (argv[0] is the command's name), prints to stdout/stderr, and
// returns the process exit status: 0 success, 1 failure, 2 bad usage.
#ifndef STRATA_COMMANDS_H
#define STRATA_COMMANDS_H

int cli_run(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_perplexity(int argc, char **argv);
int cli_synth(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_chat(int argc, char **argv);

#endif
