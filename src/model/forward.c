// forward.c: the llama forward pass over the backend interface.
#include "model/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int prepare_weights(struct model *m, struct backend *be) {
    struct weight *ws[] = {&m->tok_embd, &m->output_norm, &m->output};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        if (i == 2 && m->tied_output) continue;
        if (be->prepare_weight(be, ws[i])) return -1;
    }
    for (int l = 0; l < m->hp.n_layer; l++) {
        struct layer_weights *L = &m->layers[l];
        struct weight *lw[] = {&L->attn_norm, &L->wq,     &L->wk,   &L->wv,    &L->wo,
                               &L->ffn_norm,  &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof lw / sizeof *lw; i++)
            if (be->prepare_weight(be, lw[i])) return -1;
    }
    return 0;
}

static void *balloc(struct context *c, size_t bytes, int *failed) {
    if (*failed) return NULL;
    void *p = c->be->alloc(c->be, bytes);
    if (!p) *failed = 1;
    return p;
}

// The scratch buffers of a context, in the order of the fields of struct
// context from `tokens` on; context_init allocates exactly these sizes and
// context_scratch_bytes adds them up, so the memory plan and the allocation
// cannot disagree.
enum { SCRATCH_TOKENS, SCRATCH_X, SCRATCH_XB, SCRATCH_Q, SCRATCH_K, SCRATCH_V, SCRATCH_ATT,
       SCRATCH_HB, SCRATCH_HB2, SCRATCH_LOGITS, N_SCRATCH };

static void scratch_sizes(const struct model *m, int n_batch, size_t sz[N_SCRATCH]) {
    const struct model_hparams *hp = &m->hp;
    const size_t nb = (size_t)n_batch, f = sizeof(float);
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    sz[SCRATCH_TOKENS] = sizeof(int32_t) * nb;
    sz[SCRATCH_X] = sz[SCRATCH_XB] = f * nb * (size_t)hp->n_embd;
    sz[SCRATCH_Q] = sz[SCRATCH_ATT] = f * nb * q_dim;
    sz[SCRATCH_K] = sz[SCRATCH_V] = f * nb * kv_dim;
    sz[SCRATCH_HB] = sz[SCRATCH_HB2] = f * nb * (size_t)hp->n_ff;
    sz[SCRATCH_LOGITS] = f * nb * (size_t)hp->n_vocab;
}

uint64_t context_scratch_bytes(const struct model *m, int n_batch) {
    size_t sz[N_SCRATCH];
    scratch_sizes(m, n_batch, sz);
    uint64_t total = 0;
    for (int i = 0; i < N_SCRATCH; i++) total += sz[i];
    return total;
}

int context_init(struct model *m, struct backend *be, int n_ctx, int n_batch, struct context **out) {
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    if (n_ctx < 1) return st_fail("context size %d must be at least 1", n_ctx);
    if (n_batch < 1) return st_fail("batch size %d must be at least 1", n_batch);
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (prepare_weights(m, be)) return -1;
    struct context *c = st_xcalloc(1, sizeof *c);
    c->model = m;
    c->be = be;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    int failed = 0;
    c->k_cache = st_xcalloc((size_t)hp->n_layer, sizeof *c->k_cache);
    c->v_cache = st_xcalloc((size_t)hp->n_layer, sizeof *c->v_cache);
    for (int l = 0; l < hp->n_layer; l++) {
        c->k_cache[l] = balloc(c, sizeof(float) * (size_t)n_ctx * kv_dim, &failed);
        c->v_cache[l] = balloc(c, sizeof(float) * (size_t)n_ctx * kv_dim, &failed);
    }
    size_t sz[N_SCRATCH];
    scratch_sizes(m, n_batch, sz);
    void **bufs[N_SCRATCH] = {(void **)&c->tokens, (void **)&c->x,   (void **)&c->xb,
                              (void **)&c->q,      (void **)&c->k,   (void **)&c->v,
                              (void **)&c->att,    (void **)&c->hb,  (void **)&c->hb2,
                              (void **)&c->logits};
    for (int i = 0; i < N_SCRATCH; i++) *bufs[i] = balloc(c, sz[i], &failed);
    c->history = st_xcalloc((size_t)n_ctx, sizeof *c->history);
    if (failed) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_last_error());
        context_free(c);
        return st_fail("allocating the context (%d positions, batch %d) on %s: %s", n_ctx,
                       n_batch, be->name, msg);
    }
    *out = c;
    return 0;
}

void context_free(struct context *c) {
    if (!c) return;
    struct backend *be = c->be;
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        if (c->k_cache[l]) be->release(be, c->k_cache[l]);
        if (c->v_cache[l]) be->release(be, c->v_cache[l]);
    }
    void *bufs[] = {c->tokens, c->x, c->xb, c->q, c->k, c->v, c->att, c->hb, c->hb2, c->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->release(be, bufs[i]);
    free(c->k_cache);
    free(c->v_cache);
    free(c->history);
    free(c);
}

int context_forward(struct context *c, const int32_t *tokens, int n, int pos0, float *logits,
                    bool all_logits) {
    const struct model *m = c->model;
    const struct model_hparams *hp = &m->hp;
    struct backend *be = c->be;
    if (n < 1 || n > c->n_batch)
        return st_fail("forward: %d tokens, but a batch holds 1 to %d", n, c->n_batch);
    if (pos0 < 0 || pos0 + n > c->n_ctx)
        return st_fail("forward: positions %d..%d do not fit the context of %d", pos0,
                       pos0 + n - 1, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return st_fail("forward: token id %d is outside the vocabulary (0..%d)", tokens[i],
                           hp->n_vocab - 1);
    const int E = hp->n_embd, hd = hp->head_dim;
    const int kv_dim = hp->n_head_kv * hd;
    const int64_t nE = (int64_t)n * E;

    be->upload(be, c->tokens, tokens, sizeof(int32_t) * (size_t)n);
    be->get_rows(be, &m->tok_embd, c->tokens, n, c->x);
    for (int l = 0; l < hp->n_layer; l++) {
        const struct layer_weights *L = &m->layers[l];
        // attention block
        be->rms_norm(be, &L->attn_norm, c->x, c->xb, n, E, hp->norm_eps);
        be->matmul(be, &L->wq, c->xb, c->q, n);
        be->matmul(be, &L->wk, c->xb, c->k, n);
        be->matmul(be, &L->wv, c->xb, c->v, n);
        be->rope(be, c->q, n, hp->n_head, hd, pos0, &hp->rope);
        be->rope(be, c->k, n, hp->n_head_kv, hd, pos0, &hp->rope);
        be->kv_store(be, c->k_cache[l], c->v_cache[l], c->k, c->v, n, pos0, kv_dim);
        be->attention(be, c->q, c->k_cache[l], c->v_cache[l], c->att, n, pos0, hp->n_head,
                      hp->n_head_kv, hd);
        be->matmul(be, &L->wo, c->att, c->xb, n);
        be->add(be, c->x, c->xb, nE);
        // feed-forward block
        be->rms_norm(be, &L->ffn_norm, c->x, c->xb, n, E, hp->norm_eps);
        be->matmul(be, &L->w_gate, c->xb, c->hb, n);
        be->matmul(be, &L->w_up, c->xb, c->hb2, n);
        be->swiglu(be, c->hb, c->hb2, (int64_t)n * hp->n_ff);
        be->matmul(be, &L->w_down, c->hb, c->xb, n);
        be->add(be, c->x, c->xb, nE);
    }
    // only the rows whose logits are wanted go through the output layer
    const int first = all_logits ? 0 : n - 1;
    const int n_out = n - first;
    be->rms_norm(be, &m->output_norm, c->x + (size_t)first * E, c->xb, n_out, E, hp->norm_eps);
    be->matmul(be, &m->output, c->xb, c->logits, n_out);
    be->download(be, logits, c->logits, sizeof(float) * (size_t)n_out * hp->n_vocab);
    if (be->sync(be)) return -1;
    for (int i = 0; i < n; i++) c->history[pos0 + i] = tokens[i];
    c->n_past = pos0 + n;
    return 0;
}

int context_eval(struct context *c, const int32_t *tokens, int n, float *logits, int *n_reused) {
    if (n < 1) return st_fail("nothing to evaluate: the prompt has no tokens");
    if (n > c->n_ctx)
        return st_fail("%d tokens do not fit the context of %d positions; use a larger -c or a "
                       "shorter prompt",
                       n, c->n_ctx);
    int keep = 0;
    while (keep < c->n_past && keep < n && c->history[keep] == tokens[keep]) keep++;
    if (keep == n) keep--; // the last token must run to produce logits
    if (n_reused) *n_reused = keep;
    c->n_past = keep;
    for (int p = keep; p < n;) {
        int chunk = n - p < c->n_batch ? n - p : c->n_batch;
        if (context_forward(c, tokens + p, chunk, p, logits, false)) return -1;
        p += chunk;
    }
    return 0;
}
