// session.h: the engine session every front end shares (run, chat, bench,
// perplexity, serve): a model loaded, a backend opened from the registry, the
// memory planned before anything is allocated, and a context made; plus the
// prompt side: the chat format and tokenisation as the vocabulary asks.
#ifndef STRATA_SESSION_H
#define STRATA_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/placement.h"
#include "text/chat.h"

#define SESSION_DEFAULT_CTX 4096
#define SESSION_DEFAULT_BATCH 512
#define SESSION_AUTO_SEQ 4

struct session_opts {
    const char *model;                     // GGUF path (required)
    int n_ctx;                             // positions; 0: SESSION_DEFAULT_CTX, or the model's own if smaller
    int n_batch;                           // tokens per forward pass (capped by n_ctx)
    int n_threads;                         // CPU threads; ≤ 0: every core
    const char *backend;                   // a registry name (backend.h) or "auto"
    int device;                            // the GPU a GPU backend runs on (--main-gpu), from 0
    enum split_mode split_mode;            // --split-mode (SPLIT_MODE_NONE: the default)
    float tensor_split[PLACEMENT_MAX_DEV]; // --tensor-split proportions,
    int n_tensor_split;                    // n_tensor_split of them (0: none given)
    const char *cache_type;                // the KV cache's element type, "f32" or "f16"; NULL: the backend's
                                           // default (f16 on the CPU backends, f32 on the GPU ones)
    int n_seq;                             // sequences (KV caches of n_ctx each) sharing one batch: ≥ 1,
                                           // or 0: as many as SESSION_AUTO_SEQ that fit the memory
    bool progress;                         // pre-fault the model file's pages before use, with a progress
                                           // bar on stderr when it is a terminal and this takes a while
};

struct session {
    struct model *model;                         // owned
    struct backend *be;                          // stage_be[0]
    struct backend *stage_be[PLACEMENT_MAX_DEV]; // owned: the backend of each stage of the context
    int n_stage;                                 //   (more than one: a layer split over GPUs)
    struct context *ctx;                         // owned: sequence 0
    struct context **seq;                        // [n_seq] owned: ctx, then the others (context_init_seq)
    int n_seq;
};

void session_opts_default(struct session_opts *o);

// Loads the model, opens the backend, checks that the KV caches and scratch fit
// the backend's memory, and makes the context and its sequences; with
// --split-mode layer over several GPUs, a backend a GPU and the context over
// them (context_init_split), as placement_plan places the blocks. Returns 0 and fills *s (free
// with session_close), or -1 with a message and *s zeroed.
int session_open(const struct session_opts *o, struct session *s);
// Reads every page of the model's file mapping into memory, so that the first
// tokens do not wait on the disk; when stderr is a terminal and this takes
// over a quarter of a second (or STRATA_LOAD_PROGRESS=1), draws a progress bar
// there (its last state stays, at 100%). Silent otherwise.
void session_prefault(const struct model *m);
// Frees what session_open made; s may be zeroed or partly filled.
void session_close(struct session *s);

// The chat format to use for m: the family named by template_name, or else the
// one detected from the model's tokenizer.chat_template; fmt->bos is filled
// from the vocabulary. Returns 0 or -1 with a message.
int session_chat_format(const struct model *m, const char *template_name, struct chat_format *fmt);
// Applies a --no-think request: with no_think, sets fmt->enable_thinking to
// false, or fails with a message when the family has no thinking switch (so
// the request would change nothing). Returns 0 or -1.
int session_chat_no_think(struct chat_format *fmt, bool no_think);
// Renders msgs with fmt and tokenizes the text (special tokens parsed, BOS
// added as the vocabulary asks, never twice). Returns the number of ids and
// sets *ids (malloc'd, caller frees), or -1 with a message.
int session_chat_tokens(const struct model *m, const struct chat_format *fmt, const struct chat_message *msgs,
                        int n, bool add_generation_prompt, int32_t **ids);
// Tokenizes plain text (special tokens parsed, BOS added as the vocabulary
// asks, never twice). Returns the number of ids and sets *ids (caller frees), or -1.
int session_text_tokens(const struct model *m, const char *text, int32_t **ids);

#endif
