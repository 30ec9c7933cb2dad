// generate.h: the generation loop shared by run, chat and serve.
#ifndef STRATA_GENERATE_H
#define STRATA_GENERATE_H

#include <stdbool.h>
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

// One generation advanced a step at a time, so that a caller can run the steps
// of several (each on its own sequence, context_init_seq) in one batch:
//
//   gen_seq_begin(&g, ...);
//   while (gen_seq_span(&g, budget, &span)) {
//       context_forward_batch(c, &span, 1, logits);   // or many spans at once
//       gen_seq_advance(&g, logits);                  // the span's logits row
//   }
//   gen_seq_end(&g, &stats);
//
// generate_hooked is exactly this loop with a batch of one.
struct gen_seq {
    struct context *c;
    struct sampler *s;
    struct gen_hooks h;
    const int32_t *prompt; // borrowed until gen_seq_end
    int n_prompt, n_predict;
    int pos;       // the next prompt position to run
    bool decoding; // the prompt is in: the next span is the token `next`
    bool done;
    int32_t next, prev;
    char *piece;
    size_t cap;
    double t0;
    int rc; // -1 after an error (with its message)
    struct gen_stats st;
};

// Starts a generation of up to n_predict tokens (< 0: until the end of turn or
// a full context) after prompt[0..n_prompt) on c, reusing the longest prefix
// c's cache holds. Returns 0, or -1 with a message (the prompt does not fit).
int gen_seq_begin(struct gen_seq *g, struct context *c, struct sampler *s, const int32_t *prompt,
                  int n_prompt, int n_predict, const struct gen_hooks *hooks);
// Fills *sp with the tokens g runs next, at most max (≥ 1): a chunk of the
// prompt (asking hooks.cancel first) or the last sampled token. Returns false
// when g is done (then nothing is to run).
bool gen_seq_span(struct gen_seq *g, int max, struct forward_span *sp);
// Takes the result of the span gen_seq_span gave, once the batch has run:
// logits is its row (n_vocab; the hooks may change it), or NULL when the span
// wanted none (a prompt chunk before the last). Samples, calls the hooks, and
// decides the next span or the end. A forward error is reported with
// gen_seq_fail instead.
void gen_seq_advance(struct gen_seq *g, float *logits);
// Ends g after a failed forward pass (the message is already set).
void gen_seq_fail(struct gen_seq *g);
// Frees g and fills *stats (if not NULL). Returns 0, or -1 when it failed.
int gen_seq_end(struct gen_seq *g, struct gen_stats *stats);

#endif
