// model.h: a model's hyper-parameters and weights table, read from GGUF metadata.
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

enum rope_kind {
    ROPE_KIND_NORM, // rotate adjacent pairs (x[2i], x[2i+1]): llama in GGUF
    ROPE_KIND_NEOX, // rotate halves (x[i], x[i + d/2]): qwen2, gemma, ...
};

struct rope_params {
    enum rope_kind kind;
    int n_dims;               // rotated dimensions per head (≤ head_dim, even)
    float base;               // theta base
    float freq_scale;         // 1 / linear scaling factor (1 when unscaled)
    const float *freq_factors; // [n_dims/2] per-frequency divisors (llama 3.1 rope_freqs), or NULL
};

// A 2-D weight used as y = W·x: rows = output features, cols = input features.
struct weight {
    const char *name;     // tensor name (into the GGUF mapping; not NUL-terminated safe: use name_len)
    int name_len;
    enum ggml_type type;
    int64_t cols;         // ne[0]: input features (contiguous)
    int64_t rows;         // ne[1]: output features (1 for vectors)
    size_t row_bytes;     // bytes per row in `type`
    const void *data;     // [rows][row_bytes] in the mapping
};

struct layer_weights {
    struct weight attn_norm; // (n_embd) F32
    struct weight wq;        // (n_head*head_dim, n_embd)
    struct weight wk;        // (n_head_kv*head_dim, n_embd)
    struct weight wv;        // (n_head_kv*head_dim, n_embd)
    struct weight wo;        // (n_embd, n_head*head_dim)
    struct weight ffn_norm;  // (n_embd) F32
    struct weight w_gate;    // (n_ff, n_embd)
    struct weight w_up;      // (n_ff, n_embd)
    struct weight w_down;    // (n_embd, n_ff)
};

struct model_hparams {
    char arch[32];     // general.architecture
    int n_vocab;
    int n_ctx_train;   // context length the model was trained with
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;      // n_embd / n_head unless attention.key_length says otherwise
    int n_ff;
    float norm_eps;
    struct rope_params rope;
};

struct model {
    struct gguf_file *gguf;     // owned
    struct model_hparams hp;
    struct weight tok_embd;     // (n_vocab, n_embd) rows are embeddings
    struct weight output_norm;  // (n_embd) F32
    struct weight output;       // (n_vocab, n_embd); == tok_embd when tied
    bool tied_output;
    struct layer_weights *layers; // [n_layer]
    float *rope_freqs;          // [rope.n_dims/2] owned copy, or NULL
    struct tokenizer *tok;      // owned
    char *chat_template;        // owned NUL-terminated copy, or NULL
    uint64_t weight_bytes;      // total bytes of all weights
};

// Loads path: validates the file, reads hyper-parameters from metadata, finds
// every weight (checking type, shape and that the type is supported) and builds
// the tokenizer. Returns 0 and sets *out (free with model_free), or -1 with a
// message naming the file and the missing/bad key or tensor.
int model_load(const char *path, struct model **out);
void model_free(struct model *m);

// Bytes of a KV cache for n_ctx positions (keys and values, every layer).
uint64_t model_kv_bytes(const struct model *m, int n_ctx);

#endif
