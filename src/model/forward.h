// forward.h: an inference context (KV cache + scratch on one backend, or a
// chain of them that divides the model's blocks: a layer split) and the
// forward pass, written once over the backend interface for every
// architecture of the table (model/arch.h).
#ifndef STRATA_FORWARD_H
#define STRATA_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "model/model.h"

struct context {
    struct model *model; // borrowed
    struct backend *be;  // borrowed
    // A layer split's stage: this context runs blocks layer0 .. layer1-1 (the
    // embedding where layer0 is 0, the output where next is NULL) and hands
    // the residual stream to next, the following blocks' context on their own
    // backend (same sequence, sizes and parameters). One backend: 0, n_layer, NULL.
    int layer0, layer1;
    struct context *next; // owned by this one
    int n_ctx;            // positions the KV cache holds
    int n_batch;          // tokens one forward call takes at most
    int n_seq;            // sequences the KV cache holds (the base and its context_init_seq ones)
    int seq;              // this context's: its cache rows are seq·n_ctx .. seq·n_ctx + n_ctx-1
    // per layer kind: [0] global layers, [1] sliding-window layers
    struct rope_params rope[2]; // LongRoPE factors chosen for n_ctx
    struct attn_params attn[2];
    void **k_cache; // [n_layer] backend buffers (n_seq·n_ctx, n_head_kv*head_dim) of be->kv_type, shared;
                    // NULL outside layer0 .. layer1-1
    void **v_cache; // [n_layer] same
    // scratch, backend buffers
    int32_t *tokens;   // (3, n_batch) of a batch of n: ids, positions, cache bases (3n used)
    float *x;          // (n_batch, n_embd) residual stream
    float *xb;         // (n_batch, n_embd) normed input / block output
    float *xb2;        // (n_batch, n_embd) shared expert's output
    float *q;          // (n_batch, n_head*head_dim)
    float *k, *v;      // (n_batch, n_head_kv*head_dim)
    float *att;        // (n_batch, n_head*head_dim)
    float *hb, *hb2;   // (n_batch, n_hidden): n_ff, n_used·n_ff_exp or n_ff_shexp wide
    float *moe_logits; // (n_batch, n_expert) router logits
    int32_t *moe_ids;  // (n_batch, n_used) chosen experts
    float *moe_w;      // (n_batch, n_used) their weights
    float *moe_y;      // (n_batch, n_used, n_embd) each expert's output
    float *logits;     // (n_batch, n_vocab); only where next is NULL
    // What the KV cache holds: tokens at positions 0 .. n_past-1. Kept on the
    // first stage only (NULL and 0 on the later ones, which follow it).
    int32_t *history; // [n_ctx] host
    int n_past;
    float *hidden_out;             // host (n, n_embd), or NULL: see context_forward_hidden
    int32_t *host_tokens;          // (3, n_batch) host: the same, gathered for one upload
    float *host_x;                 // (n_batch, n_embd) host: the residual stream between stages, or NULL
    int n_seq_made;                // the base: sequences handed out (itself included)
    uint64_t serial;               // the base: a number no other context of the process has
    struct context *scratch_owner; // the context whose scratch this one uses (itself, or a base)
};

// Allocates a KV cache of n_ctx positions for each of n_seq sequences and
// scratch for n_batch tokens on be (preparing the model's weights for it).
// The context returned is the first sequence; context_init_seq makes the
// others. Returns 0 and sets *out (free with context_free), or -1 with a
// message (e.g. the memory is not there).
int context_init(struct model *m, struct backend *be, int n_ctx, int n_batch, int n_seq,
                 struct context **out);
// The same over n_stage backends (a layer split): stage i runs blocks
// layer_end[i-1] .. layer_end[i]-1 (from 0; layer_end strictly increasing to
// the model's n_layer) on bes[i] with their KV cache and its own scratch, the
// embedding on the first and the output on the last; a pass hands the
// residual stream (n, n_embd floats) from each stage to the next through
// host memory. The context returned is the first stage; every function here
// takes it (and its sequences) as it takes a one-backend context. Returns 0
// and sets *out, or -1 with a message.
int context_init_split(struct model *m, struct backend *const *bes, const int *layer_end, int n_stage,
                       int n_ctx, int n_batch, int n_seq, struct context **out);
// Frees c: its history, and its KV cache and scratch when it is the base (free
// the sequences made with context_init_seq before their base).
void context_free(struct context *c);
// Makes the next sequence of base's cache: a context of the same model,
// backend and size with a cache region and history of its own that shares
// base's scratch, so that the two can run in one batch (context_forward_batch)
// but never from two threads at once. Returns 0 and sets *out, or -1 with a
// message when base's n_seq sequences are all made.
int context_init_seq(struct context *base, struct context **out);
// Bytes of scratch a context with batch n_batch allocates on its backend
// (beside the KV cache, model_kv_bytes): what a memory plan must count (a
// layer split's stages but the last allocate less: no logits).
uint64_t context_scratch_bytes(const struct model *m, int n_batch);

// Runs n tokens (1 ≤ n ≤ n_batch) at positions pos0 .. pos0+n-1 (pos0+n ≤ n_ctx;
// positions before pos0 must already be in the cache). Writes logits to host
// memory: (n, n_vocab) when all_logits, else the last token's (n_vocab).
// Returns 0 or -1 with a message.
int context_forward(struct context *c, const int32_t *tokens, int n, int pos0, float *logits,
                    bool all_logits);

// Makes the cache hold exactly tokens[0..n) and writes the last token's logits
// (n_vocab) to host memory: reuses the longest prefix already in the cache and
// runs the rest in n_batch chunks. n ≥ 1 and n ≤ n_ctx, else -1 with a message.
// On return *n_reused (if not NULL) says how many tokens came from the cache.
int context_eval(struct context *c, const int32_t *tokens, int n, float *logits, int *n_reused);

// How many of tokens[0..n) the cache holds already, from the start.
int context_common_prefix(const struct context *c, const int32_t *tokens, int n);
// Keeps that prefix in the cache (but the last of n tokens, which must run to
// produce logits) and forgets the rest: n_past becomes the returned count.
int context_reuse_prefix(struct context *c, const int32_t *tokens, int n);

// Asked between two chunks of a prompt evaluation: non-zero stops it.
typedef int (*context_cancel_fn)(void *user);

// One sequence's part of a batch: n tokens of c's sequence at positions
// pos0 .. pos0+n-1 (positions before pos0 must already be in c's cache).
struct forward_span {
    struct context *c;     // the sequence: c itself, or one sharing its scratch
    const int32_t *tokens; // (n) ids
    int n, pos0;
    enum { SPAN_LOGITS_LAST, SPAN_LOGITS_ALL, SPAN_LOGITS_NONE } logits; // which rows' logits come back
};

// Runs the spans' tokens as one batch (Σ n ≤ c->n_batch) through the weights,
// each span attending to its own sequence's cache: decode steps of several
// sequences, or chunks of their prompts, share each weight read, and each
// layer's RoPE, cache store and attention run once over every row (a sequence
// may appear in one span of a batch at most). Writes the
// wanted logits to host memory in span order: (Σ wanted rows, n_vocab).
// Updates each sequence's history and n_past. Returns 0 or -1 with a message
// (nothing is run when a span is out of range).
int context_forward_batch(struct context *c, const struct forward_span *sp, int n_span, float *logits);

// context_forward that writes the final normed hidden states of all n tokens,
// (n, n_embd), to host memory instead of logits (for embeddings). The KV cache
// is filled exactly as by context_forward. Returns 0 or -1 with a message.
int context_forward_hidden(struct context *c, const int32_t *tokens, int n, int pos0, float *hidden);

#endif
