// model.h: a model's hyper-parameters and weights table, read from GGUF
// metadata as its architecture's row of the table (model/arch.h) says.
//
// Weights stay where they are: views into the file's mapping, in their stored
// type. The model is read-only once loaded: a backend that needs the weights
// elsewhere (a GPU) keeps its own copies, keyed by weight.data.
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "model/arch.h"

// --- op parameters (backend.h) ------------------------------------------------------

enum rope_kind {
    ROPE_KIND_NORM, // rotate adjacent pairs (x[2i], x[2i+1]): llama in GGUF
    ROPE_KIND_NEOX, // rotate halves (x[i], x[i + n_dims/2]): qwen2, gemma, phi3, ...
};

// Rotary position embedding, as ggml computes it (model/rope.h has the angles).
struct rope_params {
    enum rope_kind kind;
    int n_dims;                // rotated dimensions per head (≤ head_dim, even); the rest pass
    float base;                // theta base
    float freq_scale;          // 1 / linear (or YaRN) scaling factor; 1 when unscaled
    const float *freq_factors; // [n_dims/2] per-frequency divisors (rope_freqs, LongRoPE), or NULL
    // YaRN: ext_factor 0 turns it off; the rest only matter when it is on
    float ext_factor;           // how much of the ramp extrapolates (1 for YaRN)
    float attn_factor;          // multiplies every cos and sin (1 unless the model says)
    float beta_fast, beta_slow; // ramp ends, in rotations over n_ctx_orig
    int n_ctx_orig;             // the context the unscaled model was trained with
};

enum glu_act {
    GLU_SILU, // x·sigmoid(x)
    GLU_GELU, // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
};

struct attn_params {
    float scale;   // multiplies q·k: 1/sqrt(head_dim) unless the model says otherwise
    float softcap; // > 0: scores become softcap·tanh(score/softcap) before the softmax
    int window;    // > 0: sliding window, a query at p sees keys p-window+1 .. p
};

enum moe_gating {
    MOE_GATING_SOFTMAX, // softmax over every expert's logit
    MOE_GATING_SIGMOID, // each logit's sigmoid
};

struct moe_params {
    int n_expert; // experts in the layer
    int n_used;   // experts each token goes through (k)
    enum moe_gating gating;
    bool norm;   // divide the chosen weights by their sum
    float scale; // then multiply them by this (1 unless the model says)
};

// --- weights ---------------------------------------------------------------------------

// A weight used as y = W·x: rows = output features, cols = input features.
// Expert weights hold n_expert such matrices back to back; 1-D weights (norms,
// biases) are one row. A weight may be a view of part of a GGUF tensor (the
// query rows of a fused QKV tensor): name is then the whole tensor's.
struct weight {
    const char *name; // tensor name (into the GGUF mapping; not NUL-terminated: use name_len)
    int name_len;
    enum ggml_type type;
    int64_t cols;     // ne[0]: input features (contiguous)
    int64_t rows;     // ne[1]: output features per expert (1 for vectors)
    int n_expert;     // ne[2] of expert weights; 1 otherwise
    size_t row_bytes; // bytes per row in `type`
    const void *data; // [n_expert][rows][row_bytes] in the mapping; NULL: absent (optional)
};

static inline bool weight_present(const struct weight *w) { return w->data != NULL; }

struct layer_weights {
    struct weight attn_norm;      // (n_embd) F32
    struct weight wq, bq;         // (n_head·head_dim, n_embd), bias (n_head·head_dim) or absent
    struct weight wk, bk;         // (n_head_kv·head_dim, n_embd), bias or absent
    struct weight wv, bv;         // (n_head_kv·head_dim, n_embd), bias or absent
    struct weight q_norm;         // (head_dim) F32 per-head RMS norm, or absent
    struct weight k_norm;         // (head_dim) F32, or absent
    struct weight wo, bo;         // (n_embd, n_head·head_dim), bias (n_embd) or absent
    struct weight attn_post_norm; // (n_embd) F32 on the attention output, or absent
    struct weight ffn_norm;       // (n_embd) F32
    // dense feed-forward (absent in expert layers)
    struct weight w_gate; // (n_ff, n_embd)
    struct weight w_up;   // (n_ff, n_embd)
    struct weight w_down; // (n_embd, n_ff)
    // experts
    struct weight gate_inp;  // (n_expert, n_embd) router
    struct weight gate_exps; // n_expert × (n_ff_exp, n_embd)
    struct weight up_exps;   // n_expert × (n_ff_exp, n_embd)
    struct weight down_exps; // n_expert × (n_embd, n_ff_exp)
    // shared expert, added to the routed ones (absent unless the model has one)
    struct weight gate_shexp;     // (n_ff_shexp, n_embd)
    struct weight up_shexp;       // (n_ff_shexp, n_embd)
    struct weight down_shexp;     // (n_embd, n_ff_shexp)
    struct weight gate_inp_shexp; // (1, n_embd): sigmoid gate of the shared expert, or absent
    struct weight ffn_post_norm;  // (n_embd) F32 on the feed-forward output, or absent
    bool swa;                     // a sliding-window layer (its own window and RoPE)
};

struct model_hparams {
    char arch[32]; // general.architecture
    int n_vocab;
    int n_ctx_train; // context length the model was trained with
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim; // n_embd / n_head unless attention.key_length says otherwise
    int n_ff;     // dense feed-forward width (0 in all-expert models)
    float norm_eps;
    // attention
    float attn_scale;   // multiplies q·k
    float attn_softcap; // 0: none
    int n_swa;          // sliding window of the layers that have one (0: none)
    // output
    float final_softcap; // 0: none
    float embd_scale;    // the embeddings are multiplied by this (1: none)
    // experts (n_expert 0: a dense model)
    int n_expert, n_expert_used;
    int n_ff_exp;   // expert feed-forward width
    int n_ff_shexp; // shared expert width (0: none)
    enum moe_gating moe_gating;
    bool moe_norm; // renormalise the chosen experts' weights
    float moe_scale;
    enum glu_act act;
    // RoPE of the global layers and of the sliding-window layers
    struct rope_params rope, rope_swa;
};

struct model {
    struct gguf_file *gguf;       // owned
    const struct arch_desc *arch; // the table row (static)
    struct model_hparams hp;
    struct weight tok_embd;    // (n_vocab, n_embd) rows are embeddings
    struct weight output_norm; // (n_embd) F32
    struct weight output;      // (n_vocab, n_embd); the embedding's view when tied
    struct weight output_b;    // (n_vocab) F32 bias of the output layer, or absent
    bool tied_output;
    struct layer_weights *layers;  // [n_layer]
    float *rope_freqs;             // [rope.n_dims/2] owned copy, or NULL
    float *rope_long, *rope_short; // LongRoPE factors [rope.n_dims/2] owned copies, or NULL
    struct tokenizer *tok;         // owned
    char *chat_template;           // owned NUL-terminated copy, or NULL
    uint64_t weight_bytes;         // total bytes of all weights
};

// Loads path: validates the file, reads hyper-parameters from metadata, finds
// every weight (checking type, shape and that the type is supported) and builds
// the tokenizer. Returns 0 and sets *out (free with model_free), or -1 with a
// message naming the file and the missing/bad key or tensor.
int model_load(const char *path, struct model **out);
void model_free(struct model *m);

// Bytes of a KV cache for n_ctx positions (keys and values, every layer) of
// elements kv_type (GGML_TYPE_F32 or GGML_TYPE_F16).
uint64_t model_kv_bytes(const struct model *m, int n_ctx, enum ggml_type kv_type);

// Calls fn for every weight of m (each once; a tied output is the embedding).
// Stops at and returns the first non-zero fn result.
int model_for_each_weight(const struct model *m, int (*fn)(void *user, const struct weight *w), void *user);
// The same for the weights of block l alone.
int model_for_each_layer_weight(const struct model *m, int l, int (*fn)(void *user, const struct weight *w),
                                void *user);

#endif
