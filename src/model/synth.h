// synth.h: synthetic GGUF models with random weights, of any architecture of
// the table (model/arch.h), with the keys and tensor names llama.cpp's
// converter writes for it.
//
// For tests (small models of any shape, and crafted bad ones) and for
// benchmarks of model shapes no test file has (a 7B-shaped model on a GPU).
// The vocabulary is byte-level BPE: the 256 byte tokens, <|endoftext|> (BOS and
// EOS), then tokens made of two byte tokens with a merge for each.
#ifndef STRATA_SYNTH_H
#define STRATA_SYNTH_H

#include <stdint.h>

#include "format/gguf_write.h"
#include "format/quant.h"

struct synth_params {
    const char *arch; // general.architecture: a row of the table (default "llama")
    int n_vocab;      // ≥ 257
    int n_embd;       // multiple of n_head and of the weight type's block size
    int n_layer;
    int n_head;
    int n_head_kv; // divides n_head
    int n_ff;      // multiple of the weight type's block size
    int n_ctx_train;
    float rope_base;
    enum ggml_type
        type; // matrices; needs a quantizer (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, IQ4_NL, IQ4_XS)
    enum ggml_type embd_type; // token_embd.weight, same rule
    // llama.cpp's "more bits" rule of its _M mixes, or GGML_TYPE_COUNT for none: this type
    // for attn_v and ffn_down of the first and last eighth of the layers and every third
    // between, and for the output matrix (token_embd.weight when tied)
    enum ggml_type more_bits_type;
    int tied; // 1: no output.weight (the embedding is reused)
    uint64_t seed;
    // architecture options (0: the architecture's usual value or none)
    int head_dim; // per-head width (0: n_embd / n_head)
    int n_rot;    // rotated dimensions (0: head_dim; fewer: partial rotary)
    int n_expert; // experts per layer (architectures with ARCH_EXPERTS)
    int n_expert_used;
    int n_ff_exp;                      // expert width (0: n_ff)
    int n_ff_shexp;                    // shared expert width (ARCH_SHARED_EXPERT; 0: n_ff)
    int n_swa;                         // sliding window (architectures with a pattern)
    float attn_softcap, final_softcap; // written when > 0
    float rope_base_swa;               // written when > 0
    const char *rope_scaling;          // NULL, "linear", "yarn" or "longrope" (LongRoPE factors)
    float rope_factor;                 // scaling factor (linear, yarn)
    int rope_orig_ctx;                 // original context (yarn, longrope)
    float rope_attn_factor;            // written when > 0
};

// The quantizer synth uses for type t (the quant table's, or its own plain
// Q4_K/Q6_K ones, synth_kquant.c), or NULL when it has none.
quant_quantize_fn synth_quantizer(enum ggml_type t);
void synth_quantize_row_q4_K(const float *src, void *dst, int64_t n);
void synth_quantize_row_q6_K(const float *src, void *dst, int64_t n);

// Small defaults: llama, vocabulary 512, width 64, 2 layers, 4 heads (2 KV), FFN 128, Q8_0.
struct synth_params synth_default_params(void);

// Decides whether a key or tensor is written: return 0 to leave it out.
typedef int (*synth_filter_fn)(void *user, const char *name);

// Sets p->arch to name and the architecture's small defaults: experts for
// the MoE architectures (8, 2 used, width n_ff/2), a window of 8 and the
// soft-caps for Gemma, the Gemma 3 RoPE bases. Other fields stay. Returns 0,
// or -1 with a message for an unknown architecture.
int synth_arch_defaults(const char *name, struct synth_params *p);

// Builds the model into a new writer (free with gguf_writer_free). filter may
// be NULL. Returns 0, or -1 with a message naming the bad parameter.
int synth_build(const struct synth_params *p, synth_filter_fn filter, void *user, struct gguf_writer **out);
// Builds the model and writes it to path. Returns 0 or -1 with a message.
int synth_write(const struct synth_params *p, const char *path);

#endif
