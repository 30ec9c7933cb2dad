// cli_args.h: strict parsing of command-line values and the model options, shared by
// every command.
#ifndef STRATA_CLI_ARGS_H
#define STRATA_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "model/session.h"
#include "text/sampler.h"

// Parses all of s as a base-10 integer in [lo, hi]. Returns 0, or -1 with a
// message naming flag, the text and the range.
int cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
// Parses all of s as a finite number in [lo, hi]. Returns 0 or -1 with a message.
int cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);

// The value after a flag: argv[*i + 1], advancing *i; NULL with a message when missing.
const char *cli_value(int argc, char **argv, int *i);

// Options every model-running command shares (run, chat, serve, bench, perplexity).
struct cli_model_opts {
    struct session_opts s;    // -m, -c, -b, -t, --backend
    struct sampler_params sp; // --temp, --top-k, ...
    bool seed_given;          // -s with a seed of its own (not -1, which asks for a random one)
};

void cli_model_opts_default(struct cli_model_opts *o);
// If argv[*i] is one of the shared options, consumes it (and its value) and
// returns 1; returns 0 if it is not one; -1 with a message for a bad value.
int cli_model_opt(struct cli_model_opts *o, int argc, char **argv, int *i);
// The same for the session's options alone (-m, -c, -t, -b, --backend,
// --cache-type, --main-gpu, --split-mode, --tensor-split: no sampling), for
// commands that do not sample.
int cli_session_opt(struct session_opts *so, int argc, char **argv, int *i);
// The help text of the shared options.
extern const char cli_model_opts_help[];

#endif
