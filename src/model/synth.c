// synth.c: see synth.h.
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch.h"
#include "util.h"

struct synth_params synth_default_params(void) {
    return (struct synth_params){
        .arch = "llama",
        .n_vocab = 512,
        .n_embd = 64,
        .n_layer = 2,
        .n_head = 4,
        .n_head_kv = 2,
        .n_ff = 128,
        .n_ctx_train = 2048,
        .rope_base = 10000.0f,
        .type = GGML_TYPE_Q8_0,
        .embd_type = GGML_TYPE_Q8_0,
        .tied = 1,
        .more_bits_type = GGML_TYPE_COUNT,
        .seed = 1,
    };
}

int synth_arch_defaults(const char *name, struct synth_params *p) {
    const struct arch_desc *ad = arch_find(name);
    if (!ad) {
        char names[256];
        return st_fail("unknown architecture '%s' (known: %s)", name, arch_names(names, sizeof names));
    }
    p->arch = ad->name;
    p->n_expert = p->n_expert_used = p->n_ff_exp = p->n_ff_shexp = 0;
    p->n_swa = 0;
    p->attn_softcap = p->final_softcap = p->rope_base_swa = 0;
    if (!strcmp(name, "qwen2moe")) p->tied = 0; // llama.cpp requires its output.weight
    if (!strcmp(name, "qwen2moe") || !strcmp(name, "qwen3moe")) {
        p->n_expert = 8;
        p->n_expert_used = 2;
        p->n_ff_exp = p->n_ff / 2;
    }
    if (ad->swa_period > 0) p->n_swa = 8;
    if (!strcmp(name, "gemma2")) p->attn_softcap = 50.0f, p->final_softcap = 30.0f;
    if (!strcmp(name, "gemma3")) p->rope_base = 1e6f, p->rope_base_swa = 10000.0f;
    return 0;
}

quant_quantize_fn synth_quantizer(enum ggml_type t) {
    if (t == GGML_TYPE_Q4_K) return synth_quantize_row_q4_K;
    if (t == GGML_TYPE_Q6_K) return synth_quantize_row_q6_K;
    const struct quant_traits *qt = quant_get(t);
    return qt ? qt->quantize_row : NULL;
}

// Uniform in [-1, 1).
static float rng_float(uint64_t *s) { return (float)((st_splitmix64(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

// The GPT-2 byte-to-character map: printable bytes stand for themselves, the
// rest move to U+0100 and up. Writes the UTF-8 of byte b's character to out.
static int byte_char(int b, char *out) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

struct build {
    struct gguf_writer *w;
    synth_filter_fn filter;
    void *user;
    uint64_t rng;
};

static int keep(struct build *b, const char *name) { return !b->filter || b->filter(b->user, name); }

// Adds a tensor of n_exp × (rows, cols) random values of the given type
// (uniform in offset ± scale); n_exp 0 writes a 2-D (or 1-D) tensor.
static int add_tensor3(struct build *b, const char *name, enum ggml_type type, int64_t cols, int64_t rows,
                       int n_exp, float scale, float offset) {
    if (!keep(b, name)) return 0;
    const int64_t all_rows = rows * (n_exp > 0 ? n_exp : 1);
    const quant_quantize_fn quantize = synth_quantizer(type);
    size_t row_bytes = quant_row_size(type, cols);
    char *data = malloc(row_bytes * (size_t)all_rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!data || !row) {
        free(data);
        free(row);
        return st_fail("synth: out of memory for tensor %s", name);
    }
    for (int64_t r = 0; r < all_rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = offset + scale * rng_float(&b->rng);
        quantize(row, data + (size_t)r * row_bytes, cols);
    }
    int64_t ne[3] = {cols, rows, n_exp};
    int rc = gguf_writer_add_tensor(b->w, name, type, n_exp > 0 ? 3 : (rows > 1 ? 2 : 1), ne, data);
    free(data);
    free(row);
    return rc;
}

static int add_tensor(struct build *b, const char *name, enum ggml_type type, int64_t cols, int64_t rows,
                      float scale, float offset) {
    return add_tensor3(b, name, type, cols, rows, 0, scale, offset);
}

static int check_type(const char *what, enum ggml_type t, int64_t n) {
    const struct quant_traits *qt = quant_get(t);
    if (!qt || !synth_quantizer(t))
        return st_fail("synth: %s type %s has no quantizer (use F32, F16, BF16, Q4_0, Q4_1, Q5_0, "
                       "Q5_1, Q8_0, Q4_K, Q6_K, IQ4_NL or IQ4_XS)",
                       what, quant_name(t));
    if (n % qt->block_size)
        return st_fail("synth: width %lld is not a multiple of %s's block size %lld", (long long)n, qt->name,
                       (long long)qt->block_size);
    return 0;
}

static int add_vocab(struct build *b, const struct synth_params *p) {
    const int n = p->n_vocab, n_extra = n - 257;
    char **tokens = st_xcalloc((size_t)n, sizeof *tokens);
    char **merges = st_xcalloc((size_t)n_extra + 1, sizeof *merges);
    int32_t *types = st_xcalloc((size_t)n, sizeof *types);
    char ch[256][3];
    for (int i = 0; i < 256; i++) {
        ch[i][byte_char(i, ch[i])] = 0;
        tokens[i] = strdup(ch[i]);
        types[i] = 1;
    }
    tokens[256] = strdup("<|endoftext|>");
    types[256] = 3;
    // two-byte tokens over common characters first, so ordinary text merges;
    // past every such pair, unused placeholder tokens
    static const char order[] = "etaoinshrdlucmfwypvbgkjqxz ETAOINSHRDLUCMFWYPVBGKJQXZ0123456789";
    const int no = (int)sizeof order - 1;
    int n_merges = 0;
    for (int i = 0; i < n_extra; i++) {
        char buf[32];
        if (i < no * no) {
            const int a = (unsigned char)order[i / no], c = (unsigned char)order[i % no];
            snprintf(buf, sizeof buf, "%s%s", ch[a], ch[c]);
            tokens[257 + i] = strdup(buf);
            types[257 + i] = 1;
            snprintf(buf, sizeof buf, "%s %s", ch[a], ch[c]);
            merges[n_merges++] = strdup(buf);
        } else {
            snprintf(buf, sizeof buf, "<unused%d>", i);
            tokens[257 + i] = strdup(buf);
            types[257 + i] = 5;
        }
    }
    int rc = 0;
    if (keep(b, "tokenizer.ggml.model")) rc |= gguf_writer_add_str(b->w, "tokenizer.ggml.model", "gpt2");
    if (keep(b, "tokenizer.ggml.pre")) rc |= gguf_writer_add_str(b->w, "tokenizer.ggml.pre", "default");
    if (keep(b, "tokenizer.ggml.tokens"))
        rc |=
            gguf_writer_add_arr_str(b->w, "tokenizer.ggml.tokens", (const char *const *)tokens, (uint64_t)n);
    if (keep(b, "tokenizer.ggml.token_type"))
        rc |= gguf_writer_add_arr(b->w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, types, (uint64_t)n);
    if (keep(b, "tokenizer.ggml.merges"))
        rc |= gguf_writer_add_arr_str(b->w, "tokenizer.ggml.merges", (const char *const *)merges,
                                      (uint64_t)n_merges);
    if (keep(b, "tokenizer.ggml.bos_token_id"))
        rc |= gguf_writer_add_u32(b->w, "tokenizer.ggml.bos_token_id", 256);
    if (keep(b, "tokenizer.ggml.eos_token_id"))
        rc |= gguf_writer_add_u32(b->w, "tokenizer.ggml.eos_token_id", 256);
    if (keep(b, "tokenizer.ggml.add_bos_token"))
        rc |= gguf_writer_add_bool(b->w, "tokenizer.ggml.add_bos_token", false);
    for (int i = 0; i < n; i++) free(tokens[i]);
    for (int i = 0; i < n_merges; i++) free(merges[i]);
    free(tokens);
    free(merges);
    free(types);
    return rc ? -1 : 0;
}

// "<arch>.<suffix>" into key.
static const char *akey(char *key, size_t cap, const char *arch, const char *suffix) {
    snprintf(key, cap, "%s.%s", arch, suffix);
    return key;
}

int synth_build(const struct synth_params *p, synth_filter_fn filter, void *user, struct gguf_writer **out) {
    *out = NULL;
    const char *arch = p->arch ? p->arch : "llama";
    const struct arch_desc *ad = arch_find(arch);
    if (!ad) {
        char names[256];
        return st_fail("synth: unknown architecture '%s' (known: %s)", arch, arch_names(names, sizeof names));
    }
    if (p->n_vocab < 257 || p->n_vocab > (1 << 20))
        return st_fail("synth: vocabulary %d must be in [257, 1048576]", p->n_vocab);
    if (p->n_embd < 2 || p->n_layer < 1 || p->n_head < 1 || p->n_head_kv < 1 || p->n_ff < 1 ||
        p->n_ctx_train < 1 || p->head_dim < 0 || p->n_rot < 0 || p->n_expert < 0 || p->n_expert_used < 0 ||
        p->n_ff_exp < 0 || p->n_ff_shexp < 0 || p->n_swa < 0)
        return st_fail("synth: every dimension must be positive");
    if (!p->head_dim && p->n_embd % p->n_head)
        return st_fail("synth: width %d does not split into %d heads; give --head-dim", p->n_embd, p->n_head);
    const int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    const int n_rot = p->n_rot ? p->n_rot : hd;
    if (hd % 2 || n_rot % 2 || n_rot > hd)
        return st_fail("synth: head width %d and rotated dimensions %d must be even, rotated <= "
                       "head width",
                       hd, n_rot);
    if (p->n_head % p->n_head_kv)
        return st_fail("synth: %d KV heads must divide %d heads", p->n_head_kv, p->n_head);
    const bool mix = p->more_bits_type != GGML_TYPE_COUNT;
    const bool moe = p->n_expert > 0;
    if (moe && !(ad->flags & ARCH_EXPERTS)) return st_fail("synth: %s has no expert layers", arch);
    if (moe && (p->n_expert_used < 1 || p->n_expert_used > p->n_expert))
        return st_fail("synth: experts used %d must be in [1, %d]", p->n_expert_used, p->n_expert);
    if (!moe && (p->n_expert_used || p->n_ff_exp || p->n_ff_shexp))
        return st_fail("synth: expert options need --experts");
    const int ff_exp = p->n_ff_exp ? p->n_ff_exp : p->n_ff;
    const int ff_sh = (ad->flags & ARCH_SHARED_EXPERT) && moe ? (p->n_ff_shexp ? p->n_ff_shexp : p->n_ff) : 0;
    const char *scaling = p->rope_scaling;
    if (scaling && strcmp(scaling, "linear") && strcmp(scaling, "yarn") && strcmp(scaling, "longrope"))
        return st_fail("synth: RoPE scaling '%s' (use linear, yarn or longrope)", scaling);
    if (scaling && !strcmp(scaling, "longrope") && !(ad->flags & ARCH_LONGROPE))
        return st_fail("synth: %s has no LongRoPE factors", arch);
    if (check_type("weight", p->type, p->n_embd) || check_type("weight", p->type, p->n_ff) ||
        check_type("weight", p->type, (int64_t)p->n_head * hd) ||
        (moe && check_type("weight", p->type, ff_exp)) || (ff_sh && check_type("weight", p->type, ff_sh)) ||
        check_type("embedding", p->embd_type, p->n_embd) ||
        (mix && (check_type("more-bits", p->more_bits_type, p->n_embd) ||
                 check_type("more-bits", p->more_bits_type, p->n_ff))))
        return -1;
    struct build b = {.w = gguf_writer_init(), .filter = filter, .user = user, .rng = p->seed};
    const int64_t E = p->n_embd, q_dim = (int64_t)p->n_head * hd, kv_dim = (int64_t)p->n_head_kv * hd;
    int rc = 0;
    char key[128];
#define KEY_U32(k, v)                                                                                        \
    if (keep(&b, akey(key, sizeof key, arch, k))) rc |= gguf_writer_add_u32(b.w, key, (uint32_t)(v))
#define KEY_F32(k, v)                                                                                        \
    if (keep(&b, akey(key, sizeof key, arch, k))) rc |= gguf_writer_add_f32(b.w, key, (v))
    if (keep(&b, "general.architecture")) rc |= gguf_writer_add_str(b.w, "general.architecture", arch);
    if (keep(&b, "general.name")) rc |= gguf_writer_add_str(b.w, "general.name", "strata synthetic");
    KEY_U32("block_count", p->n_layer);
    KEY_U32("context_length", p->n_ctx_train);
    KEY_U32("embedding_length", p->n_embd);
    KEY_U32("feed_forward_length", p->n_ff);
    KEY_U32("attention.head_count", p->n_head);
    KEY_U32("attention.head_count_kv", p->n_head_kv);
    if (p->head_dim) {
        KEY_U32("attention.key_length", hd);
        KEY_U32("attention.value_length", hd);
    }
    KEY_U32("vocab_size", p->n_vocab);
    KEY_U32("rope.dimension_count", n_rot);
    KEY_F32("rope.freq_base", p->rope_base);
    KEY_F32("attention.layer_norm_rms_epsilon", 1e-5f);
    if (moe) {
        KEY_U32("expert_count", p->n_expert);
        KEY_U32("expert_used_count", p->n_expert_used);
        if (p->n_ff_exp) KEY_U32("expert_feed_forward_length", ff_exp);
        if (ff_sh) KEY_U32("expert_shared_feed_forward_length", ff_sh);
    }
    if (p->n_swa) KEY_U32("attention.sliding_window", p->n_swa);
    if (p->attn_softcap > 0) KEY_F32("attn_logit_softcapping", p->attn_softcap);
    if (p->final_softcap > 0) KEY_F32("final_logit_softcapping", p->final_softcap);
    if (p->rope_base_swa > 0) KEY_F32("rope.freq_base_swa", p->rope_base_swa);
    if (scaling && strcmp(scaling, "longrope")) { // LongRoPE files carry factors, not a type
        if (keep(&b, akey(key, sizeof key, arch, "rope.scaling.type")))
            rc |= gguf_writer_add_str(b.w, key, scaling);
        KEY_F32("rope.scaling.factor", p->rope_factor > 0 ? p->rope_factor : 4.0f);
    }
    if (scaling && p->rope_orig_ctx) KEY_U32("rope.scaling.original_context_length", p->rope_orig_ctx);
    if (p->rope_attn_factor > 0) KEY_F32("rope.scaling.attn_factor", p->rope_attn_factor);
#undef KEY_U32
#undef KEY_F32
    if (rc || add_vocab(&b, p)) goto fail;

    // weights scaled like a trained model's: unit-variance activations, norms near 1
    const float ws = 1.0f / sqrtf((float)E), fs = 1.0f / sqrtf((float)p->n_ff),
                qs = 1.0f / sqrtf((float)q_dim);
    // the mix's output matrix: output.weight, or the embedding it is tied to
    const enum ggml_type embd_type = mix && p->tied ? p->more_bits_type : p->embd_type;
    const enum ggml_type out_type = mix ? p->more_bits_type : p->type;
    if (add_tensor(&b, "token_embd.weight", embd_type, E, p->n_vocab, 1.0f, 0) ||
        add_tensor(&b, "output_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f))
        goto fail;
    if (!p->tied && !(ad->flags & ARCH_OUTPUT_IS_EMBD) &&
        add_tensor(&b, "output.weight", out_type, E, p->n_vocab, ws, 0))
        goto fail;
    if (scaling && !strcmp(scaling, "longrope") &&
        (add_tensor(&b, "rope_factors_long.weight", GGML_TYPE_F32, n_rot / 2, 1, 1.5f, 3.0f) ||
         add_tensor(&b, "rope_factors_short.weight", GGML_TYPE_F32, n_rot / 2, 1, 0.25f, 1.25f)))
        goto fail;
    for (int l = 0; l < p->n_layer; l++) {
        char name[64];
        const int n8 = p->n_layer / 8;
        const bool more = mix && (l < n8 || l >= 7 * p->n_layer / 8 || (l - n8) % 3 == 2);
        const enum ggml_type vd_type = more ? p->more_bits_type : p->type; // attn_v, ffn_down
#define T3(suffix, type, cols, rows, n_exp, scale, offset)                                                   \
    do {                                                                                                     \
        snprintf(name, sizeof name, "blk.%d." suffix, l);                                                    \
        if (add_tensor3(&b, name, type, cols, rows, n_exp, scale, offset)) goto fail;                        \
    } while (0)
#define T(suffix, type, cols, rows, scale, offset) T3(suffix, type, cols, rows, 0, scale, offset)
        T("attn_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
        if (ad->flags & ARCH_FUSED_QKV) {
            T("attn_qkv.weight", p->type, E, q_dim + 2 * kv_dim, ws, 0);
        } else {
            T("attn_q.weight", p->type, E, q_dim, ws, 0);
            T("attn_k.weight", p->type, E, kv_dim, ws, 0);
            T("attn_v.weight", vd_type, E, kv_dim, ws, 0);
        }
        if (ad->flags & ARCH_QKV_BIAS) {
            T("attn_q.bias", GGML_TYPE_F32, q_dim, 1, 0.5f, 0);
            T("attn_k.bias", GGML_TYPE_F32, kv_dim, 1, 0.5f, 0);
            T("attn_v.bias", GGML_TYPE_F32, kv_dim, 1, 0.5f, 0);
        }
        if (ad->flags & ARCH_QK_NORM) {
            T("attn_q_norm.weight", GGML_TYPE_F32, hd, 1, 0.2f, 1.0f);
            T("attn_k_norm.weight", GGML_TYPE_F32, hd, 1, 0.2f, 1.0f);
        }
        T("attn_output.weight", p->type, q_dim, E, qs, 0);
        if (ad->flags & ARCH_POST_NORMS) T("post_attention_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
        T("ffn_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
        if (moe) {
            const float es = 1.0f / sqrtf((float)ff_exp);
            T("ffn_gate_inp.weight", GGML_TYPE_F32, E, p->n_expert, 4 * ws, 0);
            T3("ffn_gate_exps.weight", p->type, E, ff_exp, p->n_expert, ws, 0);
            T3("ffn_up_exps.weight", p->type, E, ff_exp, p->n_expert, ws, 0);
            T3("ffn_down_exps.weight", vd_type, ff_exp, E, p->n_expert, es, 0);
            if (ff_sh) {
                T("ffn_gate_inp_shexp.weight", GGML_TYPE_F32, E, 1, 4 * ws, 0);
                T("ffn_gate_shexp.weight", p->type, E, ff_sh, ws, 0);
                T("ffn_up_shexp.weight", p->type, E, ff_sh, ws, 0);
                T("ffn_down_shexp.weight", p->type, ff_sh, E, 1.0f / sqrtf((float)ff_sh), 0);
            }
        } else if (ad->flags & ARCH_FUSED_GATE_UP) {
            T("ffn_up.weight", p->type, E, 2 * p->n_ff, ws, 0);
            T("ffn_down.weight", vd_type, p->n_ff, E, fs, 0);
        } else {
            T("ffn_gate.weight", p->type, E, p->n_ff, ws, 0);
            T("ffn_up.weight", p->type, E, p->n_ff, ws, 0);
            T("ffn_down.weight", vd_type, p->n_ff, E, fs, 0);
        }
        if (ad->flags & ARCH_POST_NORMS) T("post_ffw_norm.weight", GGML_TYPE_F32, E, 1, 0.2f, 1.0f);
#undef T
#undef T3
    }
    *out = b.w;
    return 0;
fail:
    gguf_writer_free(b.w);
    return -1;
}

int synth_write(const struct synth_params *p, const char *path) {
    struct gguf_writer *w;
    if (synth_build(p, NULL, NULL, &w)) return -1;
    int rc = gguf_writer_write_file(w, path);
    gguf_writer_free(w);
    return rc;
}
