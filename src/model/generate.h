// generate.h: the generation loop shared by run, chat and serve.
#ifndef STRATA_GENERATE_H
#define STRATA_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "model/forward.h"
#include "text/sampler.h"

struct gen_stats {
    int n_prompt;    // prompt tokens
    int n_reused;    // of which came from the KV cache
    int n_gen;       // tokens generated
    double t_prompt; // seconds evaluating the prompt
    double t_gen;    // seconds generating (sampling + forward)
    int stop_reason; // GEN_STOP_*
};

enum {
    GEN_STOP_EOG,     // the model ended its turn
    GEN_STOP_LENGTH,  // n_predict tokens were made
    GEN_STOP_CONTEXT, // the context is full
    GEN_STOP_CALLER,  // the callback asked to stop
};

// Called with each generated token and its text; returns 0 to continue,
// non-zero to stop (GEN_STOP_CALLER).
typedef int (*gen_token_fn)(void *user, int32_t id, const char *piece, size_t len);

// Evaluates prompt[0..n_prompt) (reusing what the cache already holds), then
// samples up to n_predict tokens (< 0: until the end of turn or a full context),
// calling on_token for each one that is not an end-of-generation token. Prompt
// tokens are fed to the sampler's repetition history. Returns 0 and fills
// *stats, or -1 with a message.
int generate(struct context *c, struct sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
             gen_token_fn on_token, void *user, struct gen_stats *stats);

// What a caller may hook into a generation (every member may be NULL).
struct gen_hooks {
    gen_token_fn on_token;
    // Called with the model's logits (n_vocab) before each draw; may change
    // them (biases, masks) and returns non-zero to stop (GEN_STOP_CALLER).
    int (*on_logits)(void *user, float *logits);
    // Asked before each chunk of the prompt: non-zero stops (GEN_STOP_CALLER).
    context_cancel_fn cancel;
    void *user;
};

// generate() with hooks: a long prompt can be stopped between two chunks of
// n_batch tokens, and the logits can be read or changed before each draw.
int generate_hooked(struct context *c, struct sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
                    const struct gen_hooks *hooks, struct gen_stats *stats);

#endif
