// model.c: hyper-parameters and weights of a model, from GGUF alone, following
// its architecture's row of the table (arch.c). Keys and tensor names are
// llama.cpp's (the GGUF convention): "<arch>.<key>" and "blk.<i>.<name>.weight".
#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/rope.h"
#include "text/tokenizer.h"
#include "util.h"

// --- metadata helpers ----------------------------------------------------------

// Reads "<arch>.<suffix>" as an int in [lo, hi]; required unless def ≥ 0. An
// array value (a per-layer list) is accepted when all its elements are equal.
static int read_int(const struct model *m, const char *suffix, int64_t def, int64_t lo, int64_t hi,
                    int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    int64_t v;
    const struct gguf_kv *kv = gguf_find(m->gguf, key);
    if (kv && kv->value.type == GGUF_VTYPE_ARRAY) {
        const struct gguf_array *a = &kv->value.v.arr;
        if (!a->data || a->count == 0 || a->type == GGUF_VTYPE_FLOAT32 || a->type == GGUF_VTYPE_FLOAT64 ||
            a->type == GGUF_VTYPE_BOOL)
            return st_fail("%s: metadata '%s' is an array of %s; whole numbers expected", m->gguf->path, key,
                           gguf_vtype_name(a->type));
        v = gguf_array_int(a, 0);
        for (uint64_t i = 1; i < a->count; i++)
            if (gguf_array_int(a, i) != v)
                return st_fail("%s: metadata '%s' differs between layers (%" PRId64 " and %" PRId64
                               "); per-layer sizes are not supported yet",
                               m->gguf->path, key, v, gguf_array_int(a, i));
    } else {
        int rc = gguf_get_i64(m->gguf, key, &v);
        if (rc < 0) return st_fail("%s: %s", m->gguf->path, st_last_error());
        if (rc == 1) {
            if (def < 0)
                return st_fail("%s: required metadata key '%s' is missing; the file is not a "
                               "complete %s model",
                               m->gguf->path, key, m->hp.arch);
            v = def;
        }
    }
    if (v < lo || v > hi)
        return st_fail("%s: metadata '%s' = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
                       m->gguf->path, key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int read_float(const struct model *m, const char *suffix, float def, bool required, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    float v;
    int rc = gguf_get_f32(m->gguf, key, &v);
    if (rc < 0) return st_fail("%s: %s", m->gguf->path, st_last_error());
    if (rc == 1) {
        if (required) return st_fail("%s: required metadata key '%s' is missing", m->gguf->path, key);
        v = def;
    }
    if (!isfinite(v) || v > 1e30f || v < -1e30f)
        return st_fail("%s: metadata '%s' = %g is not a finite number", m->gguf->path, key, v);
    *out = v;
    return 0;
}

// "<arch>.<suffix>" as a string: 0 and *out, 1 when absent, -1 on a bad type.
static int read_str(const struct model *m, const char *suffix, struct gguf_str *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    int rc = gguf_get_str(m->gguf, key, out);
    if (rc < 0) return st_fail("%s: %s", m->gguf->path, st_last_error());
    return rc;
}

static bool str_is(const struct gguf_str *s, const char *lit) {
    return s->len == strlen(lit) && !memcmp(s->data, lit, s->len);
}

// --- hyper-parameters ------------------------------------------------------------

static int load_rope(struct model *m) {
    struct model_hparams *hp = &m->hp;
    struct rope_params *rp = &hp->rope;
    const char *path = m->gguf->path;
    rp->kind = (enum rope_kind)m->arch->rope_kind;
    rp->attn_factor = 1.0f;
    rp->beta_fast = 32.0f;
    rp->beta_slow = 1.0f;
    if (read_int(m, "rope.dimension_count", hp->head_dim, 2, hp->head_dim, &rp->n_dims) ||
        read_float(m, "rope.freq_base", 10000.0f, false, &rp->base) ||
        read_int(m, "rope.scaling.original_context_length", hp->n_ctx_train, 1, 1 << 24, &rp->n_ctx_orig) ||
        read_float(m, "rope.scaling.attn_factor", 1.0f, false, &rp->attn_factor))
        return -1;
    if (rp->n_dims % 2) return st_fail("%s: rope.dimension_count %d is odd", path, rp->n_dims);
    float factor = 0.0f;
    if (read_float(m, "rope.scaling.factor", 0.0f, false, &factor)) return -1;
    if (factor == 0.0f && read_float(m, "rope.scale_linear", 0.0f, false, &factor)) return -1;
    if (factor < 0) return st_fail("%s: rope.scaling.factor %g must be > 0", path, factor);
    rp->freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    struct gguf_str scaling = {0};
    const int rc = read_str(m, "rope.scaling.type", &scaling);
    if (rc < 0) return -1;
    if (rc == 1 || str_is(&scaling, "linear")) {
        // linear interpolation: freq_scale alone
    } else if (str_is(&scaling, "none")) {
        rp->freq_scale = 1.0f;
    } else if (str_is(&scaling, "yarn")) {
        rp->ext_factor = 1.0f;
    } else if (str_is(&scaling, "longrope")) {
        if (!(m->arch->flags & ARCH_LONGROPE))
            return st_fail("%s: rope scaling 'longrope' is not supported for %s", path, hp->arch);
    } else {
        return st_fail("%s: rope scaling '%.*s' is not supported yet (supported: none, linear, "
                       "yarn, longrope)",
                       path, (int)scaling.len, scaling.data);
    }
    // sliding-window layers: their own base, unscaled where the row says so
    hp->rope_swa = *rp;
    if (m->arch->rope_base_swa > 0) {
        hp->rope_swa.base = m->arch->rope_base_swa;
        hp->rope_swa.freq_scale = 1.0f;
        hp->rope_swa.ext_factor = 0.0f;
    }
    if (read_float(m, "rope.freq_base_swa", hp->rope_swa.base, false, &hp->rope_swa.base)) return -1;
    return 0;
}

static int load_hparams(struct model *m) {
    struct model_hparams *hp = &m->hp;
    const char *path = m->gguf->path;
    struct gguf_str arch;
    int rc = gguf_get_str(m->gguf, "general.architecture", &arch);
    if (rc != 0)
        return rc < 0 ? st_fail("%s: %s", path, st_last_error())
                      : st_fail("%s: metadata key 'general.architecture' is missing; not a model "
                                "file",
                                path);
    if (arch.len >= sizeof hp->arch) arch.len = sizeof hp->arch - 1;
    memcpy(hp->arch, arch.data, arch.len);
    hp->arch[arch.len] = 0;
    if (!(m->arch = arch_find(hp->arch))) {
        char names[256];
        return st_fail("%s: architecture '%s' is not supported yet (supported: %s)", path, hp->arch,
                       arch_names(names, sizeof names));
    }
    const struct arch_desc *ad = m->arch;

    const int64_t big = 1 << 20;
    if (read_int(m, "embedding_length", -1, 1, big, &hp->n_embd) ||
        read_int(m, "block_count", -1, 1, 4096, &hp->n_layer) ||
        read_int(m, "attention.head_count", -1, 1, 4096, &hp->n_head) ||
        read_int(m, "attention.head_count_kv", hp->n_head, 1, hp->n_head, &hp->n_head_kv) ||
        read_int(m, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train) ||
        read_int(m, "expert_count", 0, 0, 1024, &hp->n_expert))
        return -1;
    if (hp->n_expert > 0 && !(ad->flags & ARCH_EXPERTS))
        return st_fail("%s: %s.expert_count is %d but %s has no expert layers", path, hp->arch, hp->n_expert,
                       hp->arch);
    if (read_int(m, "feed_forward_length", hp->n_expert ? 0 : -1, hp->n_expert ? 0 : 1, 4 * big, &hp->n_ff))
        return -1;
    if (hp->n_head % hp->n_head_kv)
        return st_fail("%s: head_count %d is not a multiple of head_count_kv %d", path, hp->n_head,
                       hp->n_head_kv);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.key_length", hp->arch);
    if (hp->n_embd % hp->n_head && !gguf_find(m->gguf, key))
        return st_fail("%s: embedding_length %d is not a multiple of head_count %d", path, hp->n_embd,
                       hp->n_head);
    if (read_int(m, "attention.key_length", hp->n_embd / hp->n_head, 2, 4096, &hp->head_dim)) return -1;
    int v_dim;
    if (read_int(m, "attention.value_length", hp->head_dim, 1, 4096, &v_dim)) return -1;
    if (v_dim != hp->head_dim)
        return st_fail("%s: attention.value_length %d differs from key_length %d; not supported", path, v_dim,
                       hp->head_dim);
    if (hp->head_dim % 2)
        return st_fail("%s: head dimension %d is odd; RoPE needs pairs", path, hp->head_dim);

    if (read_float(m, "attention.layer_norm_rms_epsilon", 0, true, &hp->norm_eps)) return -1;
    if (!(hp->norm_eps >= 0)) return st_fail("%s: layer_norm_rms_epsilon %g is negative", path, hp->norm_eps);

    // attention scale, soft-caps, sliding window
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (ad->big_layers && hp->n_layer == ad->big_layers)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    if (ad->flags & ARCH_SOFTCAPS) { // the attention cap only where the row has one (Gemma 2)
        if ((ad->attn_softcap > 0 &&
             read_float(m, "attn_logit_softcapping", ad->attn_softcap, false, &hp->attn_softcap)) ||
            read_float(m, "final_logit_softcapping", ad->final_softcap, false, &hp->final_softcap))
            return -1;
        if (hp->attn_softcap < 0 || hp->final_softcap < 0)
            return st_fail("%s: soft-capping values must be ≥ 0", path);
    }
    hp->n_swa = 0;
    if (ad->swa_period > 0 &&
        read_int(m, "attention.sliding_window", ad->swa_default, 0, 1 << 24, &hp->n_swa))
        return -1;
    hp->embd_scale = ad->flags & ARCH_EMBD_SCALE ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->act = (enum glu_act)ad->act;

    // experts: gating, renormalisation and scale are the architecture's (llama.cpp
    // reads no expert_weights_* or expert_gating_func key for these)
    if (hp->n_expert > 0) {
        if (read_int(m, "expert_used_count", -1, 1, hp->n_expert, &hp->n_expert_used) ||
            read_int(m, "expert_feed_forward_length",
                     ad->moe_ff_split && hp->n_ff ? hp->n_ff / hp->n_expert_used : hp->n_ff, 1, 4 * big,
                     &hp->n_ff_exp))
            return -1;
        if ((ad->flags & ARCH_SHARED_EXPERT) &&
            read_int(m, "expert_shared_feed_forward_length", hp->n_ff, 1, 4 * big, &hp->n_ff_shexp))
            return -1;
        hp->moe_gating = (enum moe_gating)ad->moe_gating;
        hp->moe_norm = ad->moe_norm;
        hp->moe_scale = 1.0f;
    }
    if (load_rope(m)) return -1;
    return 0;
}

// --- weights -------------------------------------------------------------------

enum find_flags {
    FIND_OPTIONAL = 1 << 0, // absent: leave w zeroed, return 1
    FIND_F32 = 1 << 1,      // must be F32 (norms, biases)
};

// Finds tensor `name` and checks it is (cols), (cols, rows) or, with n_exp >
// 0, (cols, rows, n_exp) of a supported type.
static int find_weight(const struct model *m, const char *name, int64_t cols, int64_t rows, int n_exp,
                       int flags, struct weight *w) {
    memset(w, 0, sizeof *w);
    const char *path = m->gguf->path;
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (flags & FIND_OPTIONAL) return 1;
        return st_fail("%s: required tensor '%s' is missing; the file is not a complete %s model", path, name,
                       m->hp.arch);
    }
    const struct quant_traits *qt = quant_get(t->type);
    if (!qt || !qt->supported)
        return st_fail("%s: tensor '%s' has type %s, which Strata does not support yet", path, name,
                       quant_name(t->type));
    const int64_t want[3] = {cols, rows, n_exp > 0 ? n_exp : 1};
    const uint32_t want_dims = n_exp > 0 ? 3 : (rows > 1 ? 2 : 1);
    bool ok = t->n_dims <= (want_dims > 1 ? want_dims : 2);
    for (uint32_t d = 0; d < 4 && ok; d++) ok = t->ne[d] == (d < 3 ? want[d] : 1);
    if (!ok) {
        char got_s[96], want_s[96];
        if (n_exp > 0 || t->n_dims > 2) {
            snprintf(got_s, sizeof got_s, "%" PRId64 ", %" PRId64 ", %" PRId64, t->ne[0], t->ne[1], t->ne[2]);
            snprintf(want_s, sizeof want_s, "%" PRId64 ", %" PRId64 ", %" PRId64, want[0], want[1], want[2]);
        } else {
            snprintf(got_s, sizeof got_s, "%" PRId64 ", %" PRId64, t->ne[0], t->ne[1]);
            snprintf(want_s, sizeof want_s, "%" PRId64 ", %" PRId64, want[0], want[1]);
        }
        return st_fail("%s: tensor '%s' has shape [%s], expected [%s] from the metadata", path, name, got_s,
                       want_s);
    }
    if ((flags & FIND_F32) && t->type != GGML_TYPE_F32)
        return st_fail("%s: tensor '%s' has type %s; norm weights and biases must be F32", path, name,
                       quant_name(t->type));
    if (!(flags & FIND_F32) && !qt->vec_dot)
        return st_fail("%s: tensor '%s' has type %s, which is not usable as a weight matrix", path, name,
                       quant_name(t->type));
    w->name = t->name.data;
    w->name_len = (int)t->name.len;
    w->type = t->type;
    w->cols = cols;
    w->rows = rows;
    w->n_expert = n_exp > 0 ? n_exp : 1;
    w->row_bytes = quant_row_size(t->type, cols);
    w->data = t->data;
    ST_ASSERT(w->row_bytes * (uint64_t)rows * (uint64_t)w->n_expert == t->nbytes);
    return 0;
}

// Rows [r0, r0 + rows) of w as a weight of their own (w is 2-D, or a vector
// when rows count its elements: then the view is a shorter vector).
static struct weight weight_rows(const struct weight *w, int64_t r0, int64_t rows) {
    struct weight v = *w;
    if (w->rows == 1 && w->type == GGML_TYPE_F32 && rows != 1) { // a vector: elements
        v.cols = rows;
        v.row_bytes = sizeof(float) * (size_t)rows;
        v.data = (const float *)w->data + r0;
        return v;
    }
    v.rows = rows;
    v.data = (const char *)w->data + (size_t)r0 * w->row_bytes;
    return v;
}

// "blk.<l>.<stem>.<kind>" into name (cap bytes).
static const char *blk(char *name, size_t cap, int l, const char *stem, const char *kind) {
    snprintf(name, cap, "blk.%d.%s.%s", l, stem, kind);
    return name;
}

static int load_attention(struct model *m, int l, struct layer_weights *L) {
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim,
                  kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    struct weight qkv;
    int rc = find_weight(m, blk(name, sizeof name, l, "attn_qkv", "weight"), E, q_dim + 2 * kv_dim, 0,
                         FIND_OPTIONAL, &qkv);
    if (rc < 0) return -1;
    if (rc == 0) { // fused: the rows are q, then k, then v
        L->wq = weight_rows(&qkv, 0, q_dim);
        L->wk = weight_rows(&qkv, q_dim, kv_dim);
        L->wv = weight_rows(&qkv, q_dim + kv_dim, kv_dim);
        struct weight b;
        rc = find_weight(m, blk(name, sizeof name, l, "attn_qkv", "bias"), q_dim + 2 * kv_dim, 1, 0,
                         FIND_F32 | FIND_OPTIONAL, &b);
        if (rc < 0) return -1;
        if (rc == 0) {
            L->bq = weight_rows(&b, 0, q_dim);
            L->bk = weight_rows(&b, q_dim, kv_dim);
            L->bv = weight_rows(&b, q_dim + kv_dim, kv_dim);
            return 0;
        }
    } else {
        if (find_weight(m, blk(name, sizeof name, l, "attn_q", "weight"), E, q_dim, 0, 0, &L->wq) ||
            find_weight(m, blk(name, sizeof name, l, "attn_k", "weight"), E, kv_dim, 0, 0, &L->wk) ||
            find_weight(m, blk(name, sizeof name, l, "attn_v", "weight"), E, kv_dim, 0, 0, &L->wv))
            return -1;
    }
    const int bflags = FIND_F32 | FIND_OPTIONAL;
    if (find_weight(m, blk(name, sizeof name, l, "attn_q", "bias"), q_dim, 1, 0, bflags, &L->bq) < 0 ||
        find_weight(m, blk(name, sizeof name, l, "attn_k", "bias"), kv_dim, 1, 0, bflags, &L->bk) < 0 ||
        find_weight(m, blk(name, sizeof name, l, "attn_v", "bias"), kv_dim, 1, 0, bflags, &L->bv) < 0)
        return -1;
    return 0;
}

static int load_ffn(struct model *m, int l, struct layer_weights *L) {
    const struct model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    char name[96];
    if (hp->n_expert > 0) {
        const int ne = hp->n_expert;
        if (find_weight(m, blk(name, sizeof name, l, "ffn_gate_inp", "weight"), E, ne, 0, 0, &L->gate_inp) ||
            find_weight(m, blk(name, sizeof name, l, "ffn_gate_exps", "weight"), E, hp->n_ff_exp, ne, 0,
                        &L->gate_exps) ||
            find_weight(m, blk(name, sizeof name, l, "ffn_up_exps", "weight"), E, hp->n_ff_exp, ne, 0,
                        &L->up_exps) ||
            find_weight(m, blk(name, sizeof name, l, "ffn_down_exps", "weight"), hp->n_ff_exp, E, ne, 0,
                        &L->down_exps))
            return -1;
        if (hp->n_ff_shexp > 0) {
            const int64_t fs = hp->n_ff_shexp;
            if (find_weight(m, blk(name, sizeof name, l, "ffn_gate_shexp", "weight"), E, fs, 0, 0,
                            &L->gate_shexp) ||
                find_weight(m, blk(name, sizeof name, l, "ffn_up_shexp", "weight"), E, fs, 0, 0,
                            &L->up_shexp) ||
                find_weight(m, blk(name, sizeof name, l, "ffn_down_shexp", "weight"), fs, E, 0, 0,
                            &L->down_shexp) ||
                find_weight(m, blk(name, sizeof name, l, "ffn_gate_inp_shexp", "weight"), E, 1, 0,
                            FIND_OPTIONAL, &L->gate_inp_shexp) < 0)
                return -1;
        }
        return 0;
    }
    const int64_t F = hp->n_ff;
    if (m->arch->flags & ARCH_FUSED_GATE_UP) {
        struct weight gu;
        int rc =
            find_weight(m, blk(name, sizeof name, l, "ffn_up", "weight"), E, 2 * F, 0, FIND_OPTIONAL, &gu);
        if (rc < 0) return -1;
        if (rc == 0) { // the gate's rows, then the up rows
            L->w_gate = weight_rows(&gu, 0, F);
            L->w_up = weight_rows(&gu, F, F);
            return find_weight(m, blk(name, sizeof name, l, "ffn_down", "weight"), F, E, 0, 0, &L->w_down);
        }
    }
    if (find_weight(m, blk(name, sizeof name, l, "ffn_gate", "weight"), E, F, 0, 0, &L->w_gate) ||
        find_weight(m, blk(name, sizeof name, l, "ffn_up", "weight"), E, F, 0, 0, &L->w_up) ||
        find_weight(m, blk(name, sizeof name, l, "ffn_down", "weight"), F, E, 0, 0, &L->w_down))
        return -1;
    return 0;
}

static int load_layer(struct model *m, int l, struct layer_weights *L) {
    const struct model_hparams *hp = &m->hp;
    const unsigned fl = m->arch->flags;
    const int64_t E = hp->n_embd, q_dim = (int64_t)hp->n_head * hp->head_dim;
    char name[96];
    const int post = FIND_F32 | (fl & ARCH_POST_NORMS ? 0 : FIND_OPTIONAL);
    const int qk = FIND_F32 | (fl & ARCH_QK_NORM ? 0 : FIND_OPTIONAL);
    if (find_weight(m, blk(name, sizeof name, l, "attn_norm", "weight"), E, 1, 0, FIND_F32, &L->attn_norm) ||
        load_attention(m, l, L) ||
        find_weight(m, blk(name, sizeof name, l, "attn_q_norm", "weight"), hp->head_dim, 1, 0, qk,
                    &L->q_norm) < 0 ||
        find_weight(m, blk(name, sizeof name, l, "attn_k_norm", "weight"), hp->head_dim, 1, 0, qk,
                    &L->k_norm) < 0 ||
        find_weight(m, blk(name, sizeof name, l, "attn_output", "weight"), q_dim, E, 0, 0, &L->wo) ||
        find_weight(m, blk(name, sizeof name, l, "attn_output", "bias"), E, 1, 0, FIND_F32 | FIND_OPTIONAL,
                    &L->bo) < 0 ||
        find_weight(m, blk(name, sizeof name, l, "post_attention_norm", "weight"), E, 1, 0, post,
                    &L->attn_post_norm) < 0 ||
        find_weight(m, blk(name, sizeof name, l, "ffn_norm", "weight"), E, 1, 0, FIND_F32, &L->ffn_norm) ||
        load_ffn(m, l, L) ||
        find_weight(m, blk(name, sizeof name, l, "post_ffw_norm", "weight"), E, 1, 0, post,
                    &L->ffn_post_norm) < 0)
        return -1;
    if (weight_present(&L->q_norm) != weight_present(&L->k_norm))
        return st_fail("%s: layer %d has only one of attn_q_norm and attn_k_norm", m->gguf->path, l);
    return 0;
}

// Which layers slide: attention.sliding_window_pattern as one bool per layer,
// or as a period, else the row's period; none without a window.
static int load_swa_layers(struct model *m) {
    const struct model_hparams *hp = &m->hp;
    if (hp->n_swa == 0) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    const struct gguf_kv *kv = gguf_find(m->gguf, key);
    if (kv && kv->value.type == GGUF_VTYPE_ARRAY) {
        const struct gguf_array *a = &kv->value.v.arr;
        if (a->type != GGUF_VTYPE_BOOL || a->count != (uint64_t)hp->n_layer)
            return st_fail("%s: %s must hold one bool per layer (%d), not %" PRIu64 " of %s", m->gguf->path,
                           key, hp->n_layer, a->count, gguf_vtype_name(a->type));
        for (int l = 0; l < hp->n_layer; l++) m->layers[l].swa = gguf_array_int(a, (uint64_t)l) != 0;
        return 0;
    }
    int period;
    if (read_int(m, "attention.sliding_window_pattern", m->arch->swa_period, 0, 1 << 20, &period)) return -1;
    for (int l = 0; l < hp->n_layer; l++) m->layers[l].swa = arch_layer_swa(period, l);
    return 0;
}

// A copy of an optional F32 vector tensor of n values, checked positive and
// finite; NULL (and 0) when absent.
static int load_factors(const struct model *m, const char *name, int n, float **out) {
    struct weight w;
    *out = NULL;
    int rc = find_weight(m, name, n, 1, 0, FIND_F32 | FIND_OPTIONAL, &w);
    if (rc) return rc < 0 ? -1 : 0;
    *out = st_xmalloc(sizeof(float) * (size_t)n);
    memcpy(*out, w.data, sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (!((*out)[i] > 0) || !isfinite((*out)[i]))
            return st_fail("%s: %s[%d] = %g must be a positive number", m->gguf->path, name, i, (*out)[i]);
    return 0;
}

static int load_weights(struct model *m) {
    struct model_hparams *hp = &m->hp;
    const char *path = m->gguf->path;
    const struct gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return st_fail("%s: required tensor 'token_embd.weight' is missing", path);
    int n_vocab = tokenizer_n_vocab(m->tok);
    if (emb->n_dims != 2 || emb->ne[1] != n_vocab)
        return st_fail("%s: the vocabulary has %d tokens but token_embd.weight has %" PRId64
                       " rows; the file is inconsistent",
                       path, n_vocab, emb->n_dims == 2 ? emb->ne[1] : 1);
    int meta_vocab;
    if (read_int(m, "vocab_size", n_vocab, 1, 1 << 24, &meta_vocab)) return -1;
    if (meta_vocab != n_vocab)
        return st_fail("%s: %s.vocab_size is %d but the vocabulary has %d tokens", path, hp->arch, meta_vocab,
                       n_vocab);
    hp->n_vocab = n_vocab;

    if (find_weight(m, "token_embd.weight", hp->n_embd, n_vocab, 0, 0, &m->tok_embd) ||
        find_weight(m, "output_norm.weight", hp->n_embd, 1, 0, FIND_F32, &m->output_norm))
        return -1;
    int rc = 1;
    if (!(m->arch->flags & ARCH_OUTPUT_IS_EMBD)) {
        rc = find_weight(m, "output.weight", hp->n_embd, n_vocab, 0, FIND_OPTIONAL, &m->output);
        if (rc < 0) return -1;
    }
    m->tied_output = rc == 1;
    if (m->tied_output) m->output = m->tok_embd;
    if (find_weight(m, "output.bias", n_vocab, 1, 0, FIND_F32 | FIND_OPTIONAL, &m->output_b) < 0) return -1;

    m->layers = st_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    for (int l = 0; l < hp->n_layer; l++)
        if (load_layer(m, l, &m->layers[l])) return -1;
    if (load_swa_layers(m)) return -1;

    const int half = hp->rope.n_dims / 2;
    if (load_factors(m, "rope_freqs.weight", half, &m->rope_freqs) ||
        load_factors(m, "rope_factors_long.weight", half, &m->rope_long) ||
        load_factors(m, "rope_factors_short.weight", half, &m->rope_short))
        return -1;
    if (!m->rope_long != !m->rope_short)
        return st_fail("%s: only one of rope_factors_long and rope_factors_short is present", path);
    if (m->rope_freqs && m->rope_long)
        return st_fail("%s: both rope_freqs and LongRoPE factors are present", path);
    hp->rope.freq_factors = m->rope_freqs;
    if (rope_check(&hp->rope, hp->head_dim) || rope_check(&hp->rope_swa, hp->head_dim))
        return st_fail("%s: %s", path, st_last_error());

    m->weight_bytes = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) m->weight_bytes += m->gguf->tensors[i].nbytes;
    return 0;
}

int model_load(const char *path, struct model **out) {
    *out = NULL;
    struct model *m = st_xcalloc(1, sizeof *m);
    if (gguf_open(path, &m->gguf)) {
        free(m);
        return -1;
    }
    if (load_hparams(m)) goto fail;
    if (tokenizer_init(m->gguf, &m->tok)) {
        st_fail("%s: tokenizer: %s", path, st_last_error());
        goto fail;
    }
    if (load_weights(m)) goto fail;
    struct gguf_str tmpl;
    int rc = gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl);
    if (rc < 0) {
        st_fail("%s: %s", path, st_last_error());
        goto fail;
    }
    if (rc == 0) {
        m->chat_template = st_xmalloc(tmpl.len + 1);
        memcpy(m->chat_template, tmpl.data, tmpl.len);
        m->chat_template[tmpl.len] = 0;
    }
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(struct model *m) {
    if (!m) return;
    tokenizer_free(m->tok);
    gguf_close(m->gguf);
    free(m->layers);
    free(m->rope_freqs);
    free(m->rope_long);
    free(m->rope_short);
    free(m->chat_template);
    free(m);
}

uint64_t model_kv_bytes(const struct model *m, int n_ctx, enum ggml_type kv_type) {
    return 2ull * (uint64_t)m->hp.n_layer * (uint64_t)n_ctx * (uint64_t)m->hp.n_head_kv *
           (uint64_t)m->hp.head_dim * (kv_type == GGML_TYPE_F16 ? 2u : 4u);
}

int model_for_each_layer_weight(const struct model *m, int l, int (*fn)(void *user, const struct weight *w),
                                void *user) {
    const struct layer_weights *L = &m->layers[l];
    const struct weight *ws[] = {
        &L->attn_norm,    &L->wq,        &L->bq,         &L->wk,       &L->bk,         &L->wv,
        &L->bv,           &L->q_norm,    &L->k_norm,     &L->wo,       &L->bo,         &L->attn_post_norm,
        &L->ffn_norm,     &L->w_gate,    &L->w_up,       &L->w_down,   &L->gate_inp,   &L->gate_exps,
        &L->up_exps,      &L->down_exps, &L->gate_shexp, &L->up_shexp, &L->down_shexp, &L->gate_inp_shexp,
        &L->ffn_post_norm};
    int rc;
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if (weight_present(ws[i]) && (rc = fn(user, ws[i]))) return rc;
    return 0;
}

int model_for_each_weight(const struct model *m, int (*fn)(void *user, const struct weight *w), void *user) {
    int rc;
#define W(w)                                                                                                 \
    if (weight_present(w) && (rc = fn(user, w))) return rc;
    W(&m->tok_embd);
    W(&m->output_norm);
    if (!m->tied_output) W(&m->output);
    W(&m->output_b);
#undef W
    for (int l = 0; l < m->hp.n_layer; l++)
        if ((rc = model_for_each_layer_weight(m, l, fn, user))) return rc;
    return 0;
}
