// model.c: hyper-parameters and weights of a llama-family model, from GGUF alone.
#include "model/model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util.h"

// --- metadata helpers ----------------------------------------------------------

// Reads "<arch>.<suffix>" as a positive int in [lo, hi]; required unless def ≥ 0.
static int read_int(const struct model *m, const char *suffix, int64_t def, int64_t lo, int64_t hi,
                    int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    int64_t v;
    int rc = gguf_get_i64(m->gguf, key, &v);
    if (rc < 0) return st_fail("%s: %s", m->gguf->path, st_last_error());
    if (rc == 1) {
        if (def < 0)
            return st_fail("%s: required metadata key '%s' is missing; the file is not a complete "
                           "%s model",
                           m->gguf->path, key, m->hp.arch);
        v = def;
    }
    if (v < lo || v > hi)
        return st_fail("%s: metadata '%s' = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
                       m->gguf->path, key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int read_float(const struct model *m, const char *suffix, float def, bool required,
                      float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->hp.arch, suffix);
    float v;
    int rc = gguf_get_f32(m->gguf, key, &v);
    if (rc < 0) return st_fail("%s: %s", m->gguf->path, st_last_error());
    if (rc == 1) {
        if (required)
            return st_fail("%s: required metadata key '%s' is missing", m->gguf->path, key);
        v = def;
    }
    if (!(v == v) || v > 1e30f || v < -1e30f)
        return st_fail("%s: metadata '%s' = %g is not a finite number", m->gguf->path, key, v);
    *out = v;
    return 0;
}

// --- weights -------------------------------------------------------------------

// Finds tensor `name` and checks it is (cols) or (cols, rows) of a supported
// type. A missing optional tensor leaves w zeroed and returns 1.
static int find_weight(const struct model *m, const char *name, int64_t cols, int64_t rows,
                       bool optional, bool float_only, struct weight *w) {
    memset(w, 0, sizeof *w);
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (optional) return 1;
        return st_fail("%s: required tensor '%s' is missing; the file is not a complete %s model",
                       m->gguf->path, name, m->hp.arch);
    }
    const struct quant_traits *qt = quant_get(t->type);
    if (!qt || !qt->supported)
        return st_fail("%s: tensor '%s' has type %s, which Strata does not support yet",
                       m->gguf->path, name, quant_name(t->type));
    int64_t t_rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) t_rows *= t->ne[d];
    if (t->ne[0] != cols || t_rows != rows || (rows == 1 && t->n_dims != 1 && t->ne[1] != 1))
        return st_fail("%s: tensor '%s' has shape [%" PRId64 ", %" PRId64 "], expected [%" PRId64
                       ", %" PRId64 "] from the metadata",
                       m->gguf->path, name, t->ne[0], t_rows, cols, rows);
    if (float_only && t->type != GGML_TYPE_F32)
        return st_fail("%s: tensor '%s' has type %s; norm weights must be F32", m->gguf->path,
                       name, quant_name(t->type));
    if (rows > 1 && !qt->vec_dot)
        return st_fail("%s: tensor '%s' has type %s, which is not usable as a weight matrix",
                       m->gguf->path, name, quant_name(t->type));
    w->name = t->name.data;
    w->name_len = (int)t->name.len;
    w->type = t->type;
    w->cols = cols;
    w->rows = rows;
    w->row_bytes = quant_row_size(t->type, cols);
    w->data = t->data;
    ST_ASSERT(w->row_bytes * (uint64_t)rows == t->nbytes);
    return 0;
}

static int load_hparams(struct model *m) {
    struct model_hparams *hp = &m->hp;
    struct gguf_str arch;
    int rc = gguf_get_str(m->gguf, "general.architecture", &arch);
    if (rc != 0)
        return rc < 0 ? st_fail("%s: %s", m->gguf->path, st_last_error())
                      : st_fail("%s: metadata key 'general.architecture' is missing; not a model "
                                "file",
                                m->gguf->path);
    if (arch.len >= sizeof hp->arch) arch.len = sizeof hp->arch - 1;
    memcpy(hp->arch, arch.data, arch.len);
    hp->arch[arch.len] = 0;
    if (strcmp(hp->arch, "llama") != 0)
        return st_fail("%s: architecture '%s' is not supported yet (supported: llama)",
                       m->gguf->path, hp->arch);

    const int64_t big = 1 << 20;
    if (read_int(m, "embedding_length", -1, 1, big, &hp->n_embd) ||
        read_int(m, "block_count", -1, 1, 4096, &hp->n_layer) ||
        read_int(m, "feed_forward_length", -1, 1, 4 * big, &hp->n_ff) ||
        read_int(m, "attention.head_count", -1, 1, 4096, &hp->n_head) ||
        read_int(m, "attention.head_count_kv", hp->n_head, 1, hp->n_head, &hp->n_head_kv) ||
        read_int(m, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train))
        return -1;
    if (hp->n_head % hp->n_head_kv)
        return st_fail("%s: head_count %d is not a multiple of head_count_kv %d", m->gguf->path,
                       hp->n_head, hp->n_head_kv);
    if (hp->n_embd % hp->n_head && !gguf_find(m->gguf, "llama.attention.key_length"))
        return st_fail("%s: embedding_length %d is not a multiple of head_count %d",
                       m->gguf->path, hp->n_embd, hp->n_head);
    if (read_int(m, "attention.key_length", hp->n_embd / hp->n_head, 2, 4096, &hp->head_dim))
        return -1;
    int v_dim;
    if (read_int(m, "attention.value_length", hp->head_dim, 1, 4096, &v_dim)) return -1;
    if (v_dim != hp->head_dim)
        return st_fail("%s: attention.value_length %d differs from key_length %d; not supported",
                       m->gguf->path, v_dim, hp->head_dim);
    if (hp->head_dim % 2)
        return st_fail("%s: head dimension %d is odd; RoPE needs pairs", m->gguf->path,
                       hp->head_dim);

    if (read_float(m, "attention.layer_norm_rms_epsilon", 0, true, &hp->norm_eps)) return -1;
    if (!(hp->norm_eps >= 0))
        return st_fail("%s: layer_norm_rms_epsilon %g is negative", m->gguf->path, hp->norm_eps);

    struct rope_params *rp = &hp->rope;
    rp->kind = ROPE_KIND_NORM;
    if (read_int(m, "rope.dimension_count", hp->head_dim, 2, hp->head_dim, &rp->n_dims) ||
        read_float(m, "rope.freq_base", 10000.0f, false, &rp->base))
        return -1;
    if (rp->n_dims % 2)
        return st_fail("%s: rope.dimension_count %d is odd", m->gguf->path, rp->n_dims);
    if (!(rp->base > 0)) return st_fail("%s: rope.freq_base %g must be > 0", m->gguf->path, rp->base);
    rp->freq_scale = 1.0f;
    struct gguf_str scaling = {0};
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    rc = gguf_get_str(m->gguf, key, &scaling);
    if (rc < 0) return st_fail("%s: %s", m->gguf->path, st_last_error());
    float factor = 1.0f;
    if (read_float(m, "rope.scaling.factor", 1.0f, false, &factor)) return -1;
    if (rc == 0 && !(scaling.len == 4 && !memcmp(scaling.data, "none", 4))) {
        if (scaling.len == 6 && !memcmp(scaling.data, "linear", 6)) {
            if (!(factor > 0))
                return st_fail("%s: rope.scaling.factor %g must be > 0", m->gguf->path, factor);
            rp->freq_scale = 1.0f / factor;
        } else {
            return st_fail("%s: rope scaling '%.*s' is not supported yet (supported: none, linear)",
                           m->gguf->path, (int)scaling.len, scaling.data);
        }
    } else if (rc == 1) {
        // older files give only the factor: linear scaling
        if (!(factor > 0))
            return st_fail("%s: rope.scaling.factor %g must be > 0", m->gguf->path, factor);
        rp->freq_scale = 1.0f / factor;
    }
    return 0;
}

static int load_weights(struct model *m) {
    const struct model_hparams *hp = &m->hp;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;

    const struct gguf_tensor *emb = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb)
        return st_fail("%s: required tensor 'token_embd.weight' is missing", m->gguf->path);
    int n_vocab = tokenizer_n_vocab(m->tok);
    if (emb->n_dims != 2 || emb->ne[1] != n_vocab)
        return st_fail("%s: the vocabulary has %d tokens but token_embd.weight has %" PRId64
                       " rows; the file is inconsistent",
                       m->gguf->path, n_vocab, emb->n_dims == 2 ? emb->ne[1] : 1);
    int meta_vocab;
    if (read_int(m, "vocab_size", n_vocab, 1, 1 << 24, &meta_vocab)) return -1;
    if (meta_vocab != n_vocab)
        return st_fail("%s: %s.vocab_size is %d but the vocabulary has %d tokens", m->gguf->path,
                       hp->arch, meta_vocab, n_vocab);
    m->hp.n_vocab = n_vocab;

    if (find_weight(m, "token_embd.weight", hp->n_embd, n_vocab, false, false, &m->tok_embd) ||
        find_weight(m, "output_norm.weight", hp->n_embd, 1, false, true, &m->output_norm))
        return -1;
    int rc = find_weight(m, "output.weight", hp->n_embd, n_vocab, true, false, &m->output);
    if (rc < 0) return -1;
    m->tied_output = rc == 1;
    if (m->tied_output) m->output = m->tok_embd;

    m->layers = st_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    for (int l = 0; l < hp->n_layer; l++) {
        struct layer_weights *L = &m->layers[l];
        char name[96];
#define W(field, suffix, cols, rows, fl)                                                          \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", l);                                   \
    if (find_weight(m, name, cols, rows, false, fl, &L->field)) return -1;
        W(attn_norm, "attn_norm", hp->n_embd, 1, true);
        W(wq, "attn_q", hp->n_embd, q_dim, false);
        W(wk, "attn_k", hp->n_embd, kv_dim, false);
        W(wv, "attn_v", hp->n_embd, kv_dim, false);
        W(wo, "attn_output", q_dim, hp->n_embd, false);
        W(ffn_norm, "ffn_norm", hp->n_embd, 1, true);
        W(w_gate, "ffn_gate", hp->n_embd, hp->n_ff, false);
        W(w_up, "ffn_up", hp->n_embd, hp->n_ff, false);
        W(w_down, "ffn_down", hp->n_ff, hp->n_embd, false);
#undef W
    }

    struct weight rf;
    rc = find_weight(m, "rope_freqs.weight", hp->rope.n_dims / 2, 1, true, true, &rf);
    if (rc < 0) return -1;
    if (rc == 0) {
        m->rope_freqs = st_xmalloc(sizeof(float) * (size_t)(hp->rope.n_dims / 2));
        memcpy(m->rope_freqs, rf.data, sizeof(float) * (size_t)(hp->rope.n_dims / 2));
        for (int i = 0; i < hp->rope.n_dims / 2; i++)
            if (!(m->rope_freqs[i] > 0) || m->rope_freqs[i] > 1e30f)
                return st_fail("%s: rope_freqs.weight[%d] = %g must be a positive number",
                               m->gguf->path, i, m->rope_freqs[i]);
        m->hp.rope.freq_factors = m->rope_freqs;
    }

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
    free(m->chat_template);
    free(m);
}

uint64_t model_kv_bytes(const struct model *m, int n_ctx) {
    return 2ull * (uint64_t)m->hp.n_layer * (uint64_t)n_ctx * (uint64_t)m->hp.n_head_kv *
           (uint64_t)m->hp.head_dim * sizeof(float);
}
