// sampler.h: choosing the next token from logits.
//
// Order, as in llama.cpp's default chain: repetition penalty → top-k → top-p →
// min-p → temperature → draw. temperature ≤ 0 is greedy (argmax, lowest id on ties).
#ifndef STRATA_SAMPLER_H
#define STRATA_SAMPLER_H

#include <stdint.h>

struct sampler_params {
    float temperature;    // default 0.8; 0: greedy
    int top_k;            // default 40; 0: off
    float top_p;          // default 0.95; ≥ 1: off
    float min_p;          // default 0.05; 0: off
    float repeat_penalty; // default 1.0 (off); > 1 penalises recent tokens
    int repeat_last_n;    // default 64; how many recent tokens the penalty sees
    uint64_t seed;        // default: from the clock
};

// The defaults above (seed from the clock).
struct sampler_params sampler_default_params(void);
// Checks every field's range; returns 0 or -1 with a message naming the field.
int sampler_params_check(const struct sampler_params *p);

struct sampler;
// Returns NULL (with a message) if params are out of range.
struct sampler *sampler_init(const struct sampler_params *p, int n_vocab);
void sampler_free(struct sampler *s);
// Picks a token from logits [n_vocab] (the array may be modified).
int32_t sampler_sample(struct sampler *s, float *logits);
// Records a token as generated (or part of the prompt) for the repetition penalty.
void sampler_accept(struct sampler *s, int32_t id);
// Forgets accepted tokens (keeps the random state).
void sampler_reset(struct sampler *s);
// The index of the largest value (lowest index on ties).
int32_t sampler_argmax(const float *logits, int n);

#endif
