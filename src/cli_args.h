// cli_args.h: strict parsing of command-line values, shared by every command.
#ifndef STRATA_CLI_ARGS_H
#define STRATA_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "sampler.h"

// Parses all of s as a base-10 integer in [lo, hi]. Returns 0, or -1 with a
// message naming flag, the text and the range.
int cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
// Parses all of s as a finite number in [lo, hi]. Returns 0 or -1 with a message.
int cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);

// The value after a flag: argv[*i + 1], advancing *i; NULL with a message when missing.
const char *cli_value(int argc, char **argv, int *i);

// Options every model-running command shares (run, chat, serve, bench).
struct cli_model_opts {
    const char *model;      // -m
    int n_ctx;              // -c, 0: the default (4096, or less if the model is smaller)
    int n_threads;          // -t, 0: every core
    int n_batch;            // -b
    const char *backend;    // --backend
    struct sampler_params sp;
};

void cli_model_opts_default(struct cli_model_opts *o);
// If argv[*i] is one of the shared options, consumes it (and its value) and
// returns 1; returns 0 if it is not one; -1 with a message for a bad value.
int cli_model_opt(struct cli_model_opts *o, int argc, char **argv, int *i);
// The help text of the shared options.
extern const char cli_model_opts_help[];

struct model;
struct backend;
struct context;
struct chat_format;
struct chat_message;
// Loads the model, picks the backend and makes a context as the options say,
// checking that the KV cache fits in memory. Returns 0, or -1 with a message.
int cli_open(const struct cli_model_opts *o, struct model **m, struct backend **be,
             struct context **ctx);
void cli_close(struct model *m, struct backend *be, struct context *ctx);

// The chat format to use for m: the family named by template_name, or else the
// one detected from the model's tokenizer.chat_template; fmt->bos is filled
// from the vocabulary. Returns 0 or -1 with a message.
int cli_chat_format(const struct model *m, const char *template_name, struct chat_format *fmt);
// Renders msgs with fmt and tokenizes the text (special tokens parsed, BOS
// added as the vocabulary asks, never twice). Returns the number of ids and
// sets *ids (malloc'd, caller frees), or -1 with a message.
int cli_chat_tokens(const struct model *m, const struct chat_format *fmt,
                    const struct chat_message *msgs, int n, bool add_generation_prompt,
                    int32_t **ids);
// Tokenizes plain text (special tokens parsed, BOS added as the vocabulary
// asks). Returns the number of ids and sets *ids (caller frees), or -1.
int cli_text_tokens(const struct model *m, const char *text, int32_t **ids);

#endif
