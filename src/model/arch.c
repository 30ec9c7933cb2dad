// arch.c: the architecture table (arch.h). Each row is what llama.cpp's GGUF
// convention says of the architecture: its flags, RoPE layout, activation,
// sliding-window pattern and defaults for keys a file may leave out. Every
// architecture may also have: biases on any projection, a fused attn_qkv
// tensor, an untied output layer with a bias, rope_freqs factors; the
// ARCH_QKV_BIAS and ARCH_FUSED_QKV flags say what the files usually hold (strata
// synth writes them so) and are not demanded of a file, as llama.cpp does not.
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

#include "model/model.h"

static const struct arch_desc table[] = {
    {.name = "llama", // Llama 1/2/3, SmolLM, Mistral; with experts: Mixtral
     .flags = ARCH_EXPERTS,
     .rope_kind = ROPE_KIND_NORM,
     .act = GLU_SILU,
     .moe_gating = MOE_GATING_SOFTMAX,
     .moe_norm = true},
    {.name = "qwen2", // Qwen2, Qwen2.5
     .flags = ARCH_QKV_BIAS,
     .rope_kind = ROPE_KIND_NEOX,
     .act = GLU_SILU},
    {.name = "qwen2moe", // Qwen1.5-MoE, Qwen2-57B-A14B: a sigmoid-gated shared expert
     .flags = ARCH_QKV_BIAS | ARCH_EXPERTS | ARCH_SHARED_EXPERT,
     .rope_kind = ROPE_KIND_NEOX,
     .act = GLU_SILU,
     .moe_gating = MOE_GATING_SOFTMAX,
     .moe_norm = false,
     .moe_ff_split = true},
    {.name = "qwen3", .flags = ARCH_QK_NORM, .rope_kind = ROPE_KIND_NEOX, .act = GLU_SILU},
    {.name = "qwen3moe",
     .flags = ARCH_QK_NORM | ARCH_EXPERTS,
     .rope_kind = ROPE_KIND_NEOX,
     .act = GLU_SILU,
     .moe_gating = MOE_GATING_SOFTMAX,
     .moe_norm = true,
     .moe_ff_split = true},
    {.name = "gemma2",
     .flags = ARCH_POST_NORMS | ARCH_EMBD_SCALE | ARCH_SOFTCAPS | ARCH_OUTPUT_IS_EMBD,
     .rope_kind = ROPE_KIND_NEOX,
     .act = GLU_GELU,
     .swa_period = 2,
     .swa_default = 4096,
     .attn_softcap = 50.0f,
     .final_softcap = 30.0f,
     .big_layers = 46},
    {.name = "gemma3", // text: 5 of every 6 layers slide, with their own RoPE base
     .flags = ARCH_QK_NORM | ARCH_POST_NORMS | ARCH_EMBD_SCALE | ARCH_SOFTCAPS,
     .rope_kind = ROPE_KIND_NEOX,
     .act = GLU_GELU,
     .swa_period = 6,
     .rope_base_swa = 10000.0f,
     .big_layers = 62},
    {.name = "phi3", // Phi-3, Phi-3.5, Phi-4, Phi-4-mini (partial rotary)
     .flags = ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP | ARCH_LONGROPE,
     .rope_kind = ROPE_KIND_NEOX,
     .act = GLU_SILU},
};
#define N_TABLE (sizeof table / sizeof *table)

const struct arch_desc *arch_find(const char *name) {
    for (size_t i = 0; i < N_TABLE; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}

const char *arch_names(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_TABLE && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", table[i].name);
    return buf;
}
