// arch.h: the architecture table. One row per GGUF `general.architecture`:
// which tensors a layer has, which metadata keys it reads, and the flags the
// forward pass (model/forward.c) follows. Adding an architecture is adding a
// row in arch.c (and, for something no flag covers yet, a flag here, its
// tensors in model.c and its step in forward.c).
#ifndef STRATA_ARCH_H
#define STRATA_ARCH_H

#include <stdbool.h>
#include <stddef.h>

enum arch_flag {
    ARCH_QKV_BIAS = 1u << 0,        // files carry q, k, v biases (any architecture may have them)
    ARCH_QK_NORM = 1u << 1,         // per-head RMS norm of q and k, before RoPE
    ARCH_POST_NORMS = 1u << 2,      // RMS norms on the attention and feed-forward outputs
    ARCH_EMBD_SCALE = 1u << 3,      // embeddings multiplied by sqrt(n_embd)
    ARCH_FUSED_QKV = 1u << 4,       // files carry one attn_qkv tensor (any architecture may)
    ARCH_FUSED_GATE_UP = 1u << 5,   // ffn_up holds the gate rows, then the up rows
    ARCH_EXPERTS = 1u << 6,         // expert layers when <arch>.expert_count > 0
    ARCH_SHARED_EXPERT = 1u << 7,   // expert layers also have a shared expert
    ARCH_SOFTCAPS = 1u << 8,        // reads attention and final-logit soft-capping
    ARCH_LONGROPE = 1u << 10,       // rope_factors_long/short (chosen by context length)
    ARCH_OUTPUT_IS_EMBD = 1u << 11, // the output layer is always the token embedding
};

struct arch_desc {
    const char *name;    // general.architecture
    unsigned flags;      // enum arch_flag bits
    int rope_kind;       // enum rope_kind (model.h)
    int act;             // enum glu_act of the feed-forward
    int swa_period;      // sliding-window layers: il % period < period - 1 (Gemma 2:
                         // 2, even layers; Gemma 3: 6); 0: none. The GGUF key
                         // attention.sliding_window_pattern overrides it.
    int swa_default;     // window when attention.sliding_window is absent (0: no window)
    float rope_base_swa; // > 0: RoPE base of sliding-window layers (unscaled) unless
                         // rope.freq_base_swa says; 0: the same RoPE as global layers
    float attn_softcap;  // ARCH_SOFTCAPS: defaults when the keys are absent
    float final_softcap;
    int big_layers;    // > 0: with this many layers the attention scale is
                       // 1/sqrt(n_embd/n_head), not 1/sqrt(head_dim) (Gemma 27B)
    int moe_gating;    // enum moe_gating of expert layers
    bool moe_norm;     // default of <arch>.expert_weights_norm
    bool moe_ff_split; // expert width defaults to n_ff / n_expert_used (else n_ff)
};

// The row for `name`, or NULL.
const struct arch_desc *arch_find(const char *name);
// Writes the supported architectures' names, comma-separated, to buf (cap
// bytes) for messages; returns buf.
const char *arch_names(char *buf, size_t cap);

// Whether layer il is a sliding-window layer under a pattern of `period`.
static inline bool arch_layer_swa(int period, int il) { return period > 0 && il % period < period - 1; }

#endif
