// forward.c: the forward pass over the backend interface, one readable pass
// over the flags of the model's architecture (model/arch.h):
//
//   x = embed(tokens) [· sqrt(n_embd)]
//   per layer:
//     h = rms_norm(x)
//     q, k, v = h·Wq [+bq], h·Wk [+bk], h·Wv [+bv]   (views of attn_qkv when fused)
//     [q, k = per-head rms_norm(q), rms_norm(k)]
//     q, k = rope(q), rope(k)                        (the layer's RoPE: global or sliding)
//     o = attention(q, cache) ·Wo [+bo]              (scale, soft-cap, window)
//     x += [rms_norm](o)                             (post-attention norm)
//     h = rms_norm(x)
//     f = dense:   (act(h·Wgate) · h·Wup) ·Wdown
//         experts: Σ_top-k w_e · expert_e(h) [+ shared expert, sigmoid-gated]
//     x += [rms_norm](f)                             (post-feed-forward norm)
//   logits = rms_norm(x) ·Wout [+bout] [soft-capped]
#include "model/forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int prepare_one(void *be, const struct weight *w) {
    struct backend *b = be;
    return b->prepare_weight(b, w);
}

// The scratch buffers of a context, in bytes each; context_init allocates
// exactly these and context_scratch_bytes adds them up, so the memory plan and
// the allocation cannot disagree.
enum {
    SCRATCH_TOKENS,
    SCRATCH_X,
    SCRATCH_XB,
    SCRATCH_XB2,
    SCRATCH_Q,
    SCRATCH_K,
    SCRATCH_V,
    SCRATCH_ATT,
    SCRATCH_HB,
    SCRATCH_HB2,
    SCRATCH_MOE_LOGITS,
    SCRATCH_MOE_IDS,
    SCRATCH_MOE_W,
    SCRATCH_MOE_Y,
    SCRATCH_LOGITS,
    N_SCRATCH
};

// last: the context that runs the output layer (a layer split's last stage).
static void scratch_sizes(const struct model *m, int n_batch, bool last, size_t sz[N_SCRATCH]) {
    const struct model_hparams *hp = &m->hp;
    const size_t nb = (size_t)n_batch, f = sizeof(float);
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    const size_t k = (size_t)hp->n_expert_used;
    size_t hidden = (size_t)hp->n_ff;
    if (k * (size_t)hp->n_ff_exp > hidden) hidden = k * (size_t)hp->n_ff_exp;
    if ((size_t)hp->n_ff_shexp > hidden) hidden = (size_t)hp->n_ff_shexp;
    memset(sz, 0, sizeof(size_t) * N_SCRATCH);
    sz[SCRATCH_TOKENS] = sizeof(int32_t) * 3 * nb; // ids, positions, cache bases
    sz[SCRATCH_X] = sz[SCRATCH_XB] = f * nb * (size_t)hp->n_embd;
    if (hp->n_ff_shexp) sz[SCRATCH_XB2] = f * nb * (size_t)hp->n_embd;
    sz[SCRATCH_Q] = sz[SCRATCH_ATT] = f * nb * q_dim;
    sz[SCRATCH_K] = sz[SCRATCH_V] = f * nb * kv_dim;
    sz[SCRATCH_HB] = sz[SCRATCH_HB2] = f * nb * hidden;
    if (hp->n_expert) {
        sz[SCRATCH_MOE_LOGITS] = f * nb * (size_t)hp->n_expert;
        sz[SCRATCH_MOE_IDS] = sizeof(int32_t) * nb * k;
        sz[SCRATCH_MOE_W] = f * nb * k;
        sz[SCRATCH_MOE_Y] = f * nb * k * (size_t)hp->n_embd;
    }
    if (last) sz[SCRATCH_LOGITS] = f * nb * (size_t)hp->n_vocab;
}

uint64_t context_scratch_bytes(const struct model *m, int n_batch) {
    size_t sz[N_SCRATCH];
    scratch_sizes(m, n_batch, true, sz);
    uint64_t total = 0;
    for (int i = 0; i < N_SCRATCH; i++) total += sz[i];
    return total;
}

static void *balloc(struct context *c, size_t bytes, int *failed) {
    if (*failed || !bytes) return NULL;
    void *p = c->be->alloc(c->be, bytes);
    if (!p) *failed = 1;
    return p;
}

// The KV cache of c: per layer of its own K and V of (n_seq·n_ctx,
// n_head_kv*head_dim) elements of the backend's KV type.
static void alloc_kv(struct context *c, int *failed) {
    const struct model_hparams *hp = &c->model->hp;
    const size_t bytes =
        (size_t)model_kv_bytes(c->model, c->n_seq * c->n_ctx, c->be->kv_type) / 2 / (size_t)hp->n_layer;
    c->k_cache = st_xcalloc((size_t)hp->n_layer, sizeof *c->k_cache);
    c->v_cache = st_xcalloc((size_t)hp->n_layer, sizeof *c->v_cache);
    for (int l = c->layer0; l < c->layer1; l++) {
        c->k_cache[l] = balloc(c, bytes, failed);
        c->v_cache[l] = balloc(c, bytes, failed);
    }
}

// The weights a stage runs: its blocks', the embedding on the first and the
// output layer's on the last.
static int prepare_stage(struct model *m, struct backend *be, int l0, int l1) {
    if (l0 == 0 && l1 == m->hp.n_layer) return model_for_each_weight(m, prepare_one, be);
    const struct weight *ends[] = {
        l0 == 0 ? &m->tok_embd : NULL, l1 == m->hp.n_layer ? &m->output_norm : NULL,
        l1 == m->hp.n_layer ? &m->output : NULL, l1 == m->hp.n_layer ? &m->output_b : NULL};
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++)
        if (ends[i] && weight_present(ends[i]) && be->prepare_weight(be, ends[i])) return -1;
    for (int l = l0; l < l1; l++)
        if (model_for_each_layer_weight(m, l, prepare_one, be)) return -1;
    return 0;
}

// One stage of blocks l0 .. l1-1 on be: weights prepared, cache and scratch allocated.
static int stage_init(struct model *m, struct backend *be, int l0, int l1, int n_ctx, int n_batch, int n_seq,
                      struct context **out) {
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    if (prepare_stage(m, be, l0, l1)) return -1;
    struct context *c = st_xcalloc(1, sizeof *c);
    c->model = m;
    c->be = be;
    c->layer0 = l0;
    c->layer1 = l1;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->n_seq = n_seq;
    c->n_seq_made = 1;
    static atomic_uint_least64_t next_serial = 1;
    c->serial = atomic_fetch_add(&next_serial, 1);
    // LongRoPE: the long factors when the context, padded to a multiple of 256 as
    // llama.cpp pads it, is longer than the original one
    c->rope[0] = hp->rope;
    c->rope[1] = hp->rope_swa;
    if (m->rope_long) {
        const int padded = (n_ctx + 255) / 256 * 256;
        const float *ff = padded > hp->rope.n_ctx_orig ? m->rope_long : m->rope_short;
        c->rope[0].freq_factors = c->rope[1].freq_factors = ff;
    }
    c->attn[0] = (struct attn_params){hp->attn_scale, hp->attn_softcap, 0};
    c->attn[1] = (struct attn_params){hp->attn_scale, hp->attn_softcap, hp->n_swa};
    int failed = 0;
    alloc_kv(c, &failed);
    size_t sz[N_SCRATCH];
    scratch_sizes(m, n_batch, l1 == hp->n_layer, sz);
    void **bufs[N_SCRATCH] = {(void **)&c->tokens, (void **)&c->x,          (void **)&c->xb,
                              (void **)&c->xb2,    (void **)&c->q,          (void **)&c->k,
                              (void **)&c->v,      (void **)&c->att,        (void **)&c->hb,
                              (void **)&c->hb2,    (void **)&c->moe_logits, (void **)&c->moe_ids,
                              (void **)&c->moe_w,  (void **)&c->moe_y,      (void **)&c->logits};
    for (int i = 0; i < N_SCRATCH; i++) *bufs[i] = balloc(c, sz[i], &failed);
    if (l0 == 0) c->history = st_xcalloc((size_t)n_ctx, sizeof *c->history); // the head's only
    c->host_tokens = st_xcalloc((size_t)3 * n_batch, sizeof *c->host_tokens);
    c->scratch_owner = c;
    if (failed) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_last_error());
        context_free(c);
        return st_fail("allocating the context (%d sequences of %d positions, batch %d) on %s: %s", n_seq,
                       n_ctx, n_batch, be->name, msg);
    }
    *out = c;
    return 0;
}

int context_init_split(struct model *m, struct backend *const *bes, const int *layer_end, int n_stage,
                       int n_ctx, int n_batch, int n_seq, struct context **out) {
    *out = NULL;
    const int n_layer = m->hp.n_layer;
    if (n_ctx < 1) return st_fail("context size %d must be at least 1", n_ctx);
    if (n_batch < 1) return st_fail("batch size %d must be at least 1", n_batch);
    if (n_seq < 1 || (int64_t)n_seq * n_ctx > INT32_MAX)
        return st_fail("%d sequences of %d positions: there must be 1 or more, and 2^31 positions in all "
                       "at most",
                       n_seq, n_ctx);
    if (n_stage < 1 || layer_end[n_stage - 1] != n_layer)
        return st_fail("a layer split of %d stages must end at the model's %d blocks", n_stage, n_layer);
    for (int i = 0; i < n_stage; i++)
        if (layer_end[i] <= (i ? layer_end[i - 1] : 0))
            return st_fail("layer split: stage %d has no blocks (ends at %d after %d)", i, layer_end[i],
                           i ? layer_end[i - 1] : 0);
    if (n_batch > n_ctx) n_batch = n_ctx;
    struct context *head = NULL, **link = &head;
    for (int i = 0; i < n_stage; i++) {
        if (stage_init(m, bes[i], i ? layer_end[i - 1] : 0, layer_end[i], n_ctx, n_batch, n_seq, link)) {
            context_free(head);
            return -1;
        }
        link = &(*link)->next;
    }
    if (n_stage > 1) head->host_x = st_xmalloc(sizeof(float) * (size_t)n_batch * (size_t)m->hp.n_embd);
    *out = head;
    return 0;
}

int context_init(struct model *m, struct backend *be, int n_ctx, int n_batch, int n_seq,
                 struct context **out) {
    const int end = m->hp.n_layer;
    return context_init_split(m, &be, &end, 1, n_ctx, n_batch, n_seq, out);
}

int context_init_seq(struct context *base, struct context **out) {
    *out = NULL;
    if (base->scratch_owner->n_seq_made >= base->n_seq)
        return st_fail("the context was made for %d sequences, all in use", base->n_seq);
    struct context **link = out;
    for (struct context *st = base->scratch_owner; st; st = st->next) { // each stage's owner
        struct context *c = st_xmalloc(sizeof *c);
        *c = *st; // the same model, backend, sizes, parameters, cache and scratch
        c->seq = st->n_seq_made++;
        c->history =
            st->layer0 == 0 ? st_xcalloc((size_t)c->n_ctx, sizeof *c->history) : NULL; // the head's only
        c->n_past = 0;
        c->hidden_out = NULL;
        c->next = NULL;
        *link = c;
        link = &c->next;
    }
    return 0;
}

void context_free(struct context *c) {
    while (c) {
        struct context *next = c->next;
        struct backend *be = c->be;
        if (c->scratch_owner == c) {
            for (int l = c->layer0; l < c->layer1; l++) {
                if (c->k_cache[l]) be->release(be, c->k_cache[l]);
                if (c->v_cache[l]) be->release(be, c->v_cache[l]);
            }
            void *bufs[] = {c->tokens,     c->x,       c->xb,    c->xb2,   c->q,
                            c->k,          c->v,       c->att,   c->hb,    c->hb2,
                            c->moe_logits, c->moe_ids, c->moe_w, c->moe_y, c->logits};
            for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
                if (bufs[i]) be->release(be, bufs[i]);
            free(c->host_tokens);
            free(c->host_x);
            free(c->k_cache);
            free(c->v_cache);
        }
        free(c->history);
        free(c);
        c = next;
    }
}

// --- the pass ----------------------------------------------------------------------

// y (n, w.rows) = x·wᵀ [+ b]
static void linear(struct backend *be, const struct weight *w, const struct weight *b, const float *x,
                   float *y, int n) {
    be->matmul(be, w, x, y, n);
    if (weight_present(b)) be->add_bias(be, b, y, n, (int)w->rows);
}

// y[i] (n, w[i].rows) += b[i] for those of the n_w weights that have a bias (b may be NULL).
static void add_biases(struct backend *be, const struct weight *const *w, const struct weight *const *b,
                       int n_w, float *const *y, int n) {
    for (int i = 0; b && i < n_w; i++)
        if (weight_present(b[i])) be->add_bias(be, b[i], y[i], n, (int)w[i]->rows);
}

// y[i] (n, w[i].rows) = x·w[i]ᵀ [+ b[i]] for n_w weights that share the input x.
static void linears(struct backend *be, const struct weight *const *w, const struct weight *const *b, int n_w,
                    const float *x, float *const *y, int n) {
    if (be->matmul_multi)
        be->matmul_multi(be, w, n_w, x, y, n);
    else
        for (int i = 0; i < n_w; i++) be->matmul(be, w[i], x, y[i], n);
    add_biases(be, w, b, n_w, y, n);
}

// out (n, dim) = rms_norm(x)·nw, then y[i] = out·w[i]ᵀ [+ b[i]] for n_w weights
// of dim cols: in one op where the backend has it.
static void norm_linears(struct backend *be, const struct weight *nw, float eps, const float *x, float *out,
                         int dim, const struct weight *const *w, const struct weight *const *b, int n_w,
                         float *const *y, int n) {
    if (!be->norm_matmul_multi) {
        be->rms_norm(be, nw, x, out, n, dim, eps);
        linears(be, w, b, n_w, out, y, n);
        return;
    }
    be->norm_matmul_multi(be, nw, eps, x, out, dim, w, n_w, y, n);
    add_biases(be, w, b, n_w, y, n);
}

// x (n, w.rows) += h·wᵀ, in one op where the backend has it.
static void matmul_add(struct context *c, const struct weight *w, const float *h, float *x, float *tmp,
                       int n) {
    struct backend *be = c->be;
    if (be->matmul_add) {
        be->matmul_add(be, w, h, x, n);
        return;
    }
    be->matmul(be, w, h, tmp, n);
    be->add(be, x, tmp, (int64_t)n * w->rows);
}

// out (n, n_embd) = the dense feed-forward of h (n, n_embd), through hb, hb2:
// h = rms_norm(in)·norm, made into xb, or with norm NULL h = in; with add, out
// += it instead (out then not h; xb may be overwritten).
static void ffn_dense(struct context *c, const struct weight *norm, const struct weight *gate,
                      const struct weight *up, const struct weight *down, const float *in, float *out, int n,
                      bool add) {
    struct backend *be = c->be;
    const int F = (int)gate->rows;
    const struct weight *gu[2] = {gate, up};
    float *const out_gu[2] = {c->hb, c->hb2};
    if (norm)
        norm_linears(be, norm, c->model->hp.norm_eps, in, c->xb, c->model->hp.n_embd, gu, NULL, 2, out_gu, n);
    else
        linears(be, gu, NULL, 2, in, out_gu, n);
    be->glu(be, c->model->hp.act, c->hb, c->hb2, c->hb, n, F, F);
    if (add)
        matmul_add(c, down, c->hb, out, c->xb, n); // h (xb) is no longer needed
    else
        be->matmul(be, down, c->hb, out, n);
}

// xb (n, n_embd) = the expert feed-forward of xb: the shared expert first
// (into xb2, while xb still holds the input), then the routed experts.
static void ffn_experts(struct context *c, const struct layer_weights *L, int n) {
    struct backend *be = c->be;
    const struct model_hparams *hp = &c->model->hp;
    const int k = hp->n_expert_used, F = hp->n_ff_exp, E = hp->n_embd;
    if (weight_present(&L->gate_shexp)) {
        ffn_dense(c, NULL, &L->gate_shexp, &L->up_shexp, &L->down_shexp, c->xb, c->xb2, n, false);
        if (weight_present(&L->gate_inp_shexp)) { // xb2 ·= sigmoid(h·w)
            const struct moe_params gate = {1, 1, MOE_GATING_SIGMOID, false, 1.0f};
            be->matmul(be, &L->gate_inp_shexp, c->xb, c->moe_logits, n);
            be->moe_route(be, c->moe_logits, n, &gate, c->moe_ids, c->moe_w);
            be->moe_combine(be, c->xb2, c->moe_w, n, 1, E, c->xb2);
        }
    }
    const struct moe_params mp = {hp->n_expert, k, hp->moe_gating, hp->moe_norm, hp->moe_scale};
    be->matmul(be, &L->gate_inp, c->xb, c->moe_logits, n);
    be->moe_route(be, c->moe_logits, n, &mp, c->moe_ids, c->moe_w);
    be->matmul_id(be, &L->gate_exps, c->xb, 1, c->moe_ids, k, c->hb, n); // (n, k, F)
    be->matmul_id(be, &L->up_exps, c->xb, 1, c->moe_ids, k, c->hb2, n);  // (n, k, F)
    be->glu(be, hp->act, c->hb, c->hb2, c->hb, n * k, F, F);
    be->matmul_id(be, &L->down_exps, c->hb, k, c->moe_ids, k, c->moe_y, n); // (n, k, E)
    be->moe_combine(be, c->moe_y, c->moe_w, n, k, E, c->xb);
    if (weight_present(&L->gate_shexp)) be->add(be, c->xb, c->xb2, (int64_t)n * E);
}

// Checks a batch's spans against the context whose scratch runs them; sets *total.
static int check_spans(const struct context *c, const struct forward_span *sp, int n_span, int *total) {
    const struct model_hparams *hp = &c->model->hp;
    *total = 0;
    if (n_span < 1) return st_fail("forward: a batch needs at least one span");
    for (int s = 0; s < n_span; s++) {
        const struct forward_span *p = &sp[s];
        if (p->c->model != c->model || p->c->be != c->be || p->c->scratch_owner != c->scratch_owner)
            return st_fail("forward: span %d belongs to another model, backend or scratch", s);
        if (p->n < 1 || p->n > c->n_batch - *total)
            return st_fail("forward: %d tokens in all, but a batch holds 1 to %d", *total + p->n, c->n_batch);
        if (p->pos0 < 0 || p->pos0 + p->n > p->c->n_ctx)
            return st_fail("forward: positions %d..%d do not fit the context of %d", p->pos0,
                           p->pos0 + p->n - 1, p->c->n_ctx);
        for (int t = 0; t < s; t++)
            if (sp[t].c == p->c) return st_fail("forward: spans %d and %d are of one sequence", t, s);
        for (int i = 0; i < p->n; i++)
            if (p->tokens[i] < 0 || p->tokens[i] >= hp->n_vocab)
                return st_fail("forward: token id %d is outside the vocabulary (0..%d)", p->tokens[i],
                               hp->n_vocab - 1);
        *total += p->n;
    }
    return 0;
}

// The attention of one layer for every row: rotated at its position, stored in
// its sequence's cache region and attending to it.
static void attention_rows(struct context *c, const struct batch_rows *r, int l) {
    struct backend *be = c->be;
    const struct model_hparams *hp = &c->model->hp;
    const struct layer_weights *L = &c->model->layers[l];
    const int hd = hp->head_dim, kv_dim = hp->n_head_kv * hd;
    const struct rope_params *rp = &c->rope[L->swa];
    if (be->rope_store) {
        be->rope_store(be, c->q, c->k, c->v, c->k_cache[l], c->v_cache[l], r, hp->n_head, hp->n_head_kv, hd,
                       rp);
    } else {
        be->rope(be, c->q, r, hp->n_head, hd, rp);
        be->rope(be, c->k, r, hp->n_head_kv, hd, rp);
        be->kv_store(be, c->k_cache[l], c->v_cache[l], c->k, c->v, r, kv_dim);
    }
    be->attention(be, c->q, c->k_cache[l], c->v_cache[l], c->att, r, hp->n_head, hp->n_head_kv, hd,
                  &c->attn[L->swa]);
}

// Enqueues c's part of the pass over the batch's rows (their ids, positions
// and cache bases already uploaded; on a later stage of a layer split, its
// residual stream in c->x): the embedding on the first stage, its layers,
// then on the last stage the output layer over the wanted rows into
// c->logits, or with hidden the normed states into c->xb. Returns the number
// of logits rows (0 before the last stage).
static int enqueue_pass(struct context *c, const struct forward_span *sp, int n_span,
                        const struct batch_rows *rows, bool hidden) {
    const struct model *m = c->model;
    const struct model_hparams *hp = &m->hp;
    struct backend *be = c->be;
    const int n = rows->n, E = hp->n_embd, hd = hp->head_dim;
    const int64_t nE = (int64_t)n * E;
    if (c->layer0 == 0) {
        be->get_rows(be, &m->tok_embd, c->tokens, n, c->x);
        if (hp->embd_scale != 1.0f) be->scale(be, c->x, nE, hp->embd_scale);
    }
    for (int l = c->layer0; l < c->layer1; l++) {
        const struct layer_weights *L = &m->layers[l];
        // attention block
        const struct weight *qkv[3] = {&L->wq, &L->wk, &L->wv}, *qkv_b[3] = {&L->bq, &L->bk, &L->bv};
        float *const out_qkv[3] = {c->q, c->k, c->v};
        norm_linears(be, &L->attn_norm, hp->norm_eps, c->x, c->xb, E, qkv, qkv_b, 3, out_qkv, n);
        if (weight_present(&L->q_norm)) { // per head: (n·heads, head_dim)
            be->rms_norm(be, &L->q_norm, c->q, c->q, n * hp->n_head, hd, hp->norm_eps);
            be->rms_norm(be, &L->k_norm, c->k, c->k, n * hp->n_head_kv, hd, hp->norm_eps);
        }
        attention_rows(c, rows, l);
        if (!weight_present(&L->bo) && !weight_present(&L->attn_post_norm)) {
            matmul_add(c, &L->wo, c->att, c->x, c->xb, n); // the residual add in the product
        } else {
            linear(be, &L->wo, &L->bo, c->att, c->xb, n);
            if (weight_present(&L->attn_post_norm))
                be->rms_norm(be, &L->attn_post_norm, c->xb, c->xb, n, E, hp->norm_eps);
            be->add(be, c->x, c->xb, nE);
        }
        // feed-forward block
        const bool post = weight_present(&L->ffn_post_norm), experts = weight_present(&L->gate_inp);
        if (experts) {
            be->rms_norm(be, &L->ffn_norm, c->x, c->xb, n, E, hp->norm_eps);
            ffn_experts(c, L, n);
        } else { // without a post-norm the residual add is fused into the down product
            ffn_dense(c, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down, c->x, post ? c->xb : c->x, n, !post);
        }
        if (experts || post) {
            if (post) be->rms_norm(be, &L->ffn_post_norm, c->xb, c->xb, n, E, hp->norm_eps);
            be->add(be, c->x, c->xb, nE);
        }
    }
    if (c->next) return 0;
    if (hidden) { // embeddings: every row's normed state, no output layer
        be->rms_norm(be, &m->output_norm, c->x, c->xb, n, E, hp->norm_eps);
        return 0;
    }
    // only the rows whose logits are wanted go through the output layer: their
    // normed states gathered into xb (a run of consecutive rows at a time: the
    // last rows of spans that follow each other), then one product for all
    int n_out = 0, run0 = 0, run1 = 0; // rows gathered so far; the pending run [run0, run1)
    for (int s = 0, row = 0; s <= n_span; s++) {
        int a = 0, b = 0; // span s's wanted rows
        if (s < n_span) {
            a = sp[s].logits == SPAN_LOGITS_ALL ? row : row + sp[s].n - 1;
            b = sp[s].logits == SPAN_LOGITS_NONE ? a : row + sp[s].n;
            row += sp[s].n;
            if (a == b) continue;
            if (a == run1 && run1 > run0) { // the run goes on
                run1 = b;
                continue;
            }
        }
        if (run1 > run0) {
            be->rms_norm(be, &m->output_norm, c->x + (size_t)run0 * E, c->xb + (size_t)n_out * E, run1 - run0,
                         E, hp->norm_eps);
            n_out += run1 - run0;
        }
        run0 = a;
        run1 = b;
    }
    if (n_out) linear(be, &m->output, &m->output_b, c->xb, c->logits, n_out);
    if (n_out && hp->final_softcap > 0)
        be->softcap(be, c->logits, (int64_t)n_out * hp->n_vocab, hp->final_softcap);
    return n_out;
}

// Decode steps (every span one token whose logits are wanted) of at most this
// many rows are recorded and replayed where the backend can (graph_begin).
#define GRAPH_MAX_ROWS 16

// A recorded pass's key: the context (by its serial number: a freed context's
// address may come back), the rows, and the n_kv bucket.
static uint64_t graph_key(const struct context *c, int n, int bucket) {
    return c->scratch_owner->serial << 16 | (uint64_t)bucket << 8 | (uint64_t)n;
}

int context_forward_batch(struct context *c, const struct forward_span *sp, int n_span, float *logits) {
    const struct model *m = c->model;
    const struct model_hparams *hp = &m->hp;
    int n;
    if (check_spans(c, sp, n_span, &n)) return -1;

    // ids, positions and cache bases of the rows, (3, n), in one upload a stage
    int32_t *ids = c->host_tokens, *pos = ids + n, *base = pos + n;
    int n_kv = 0;
    bool decode = n <= GRAPH_MAX_ROWS && !c->hidden_out;
    for (int s = 0, row = 0; s < n_span; row += sp[s].n, s++) {
        memcpy(ids + row, sp[s].tokens, sizeof(int32_t) * (size_t)sp[s].n);
        for (int i = 0; i < sp[s].n; i++) {
            pos[row + i] = sp[s].pos0 + i;
            base[row + i] = sp[s].c->seq * c->n_ctx;
        }
        if (sp[s].pos0 + sp[s].n > n_kv) n_kv = sp[s].pos0 + sp[s].n;
        decode = decode && sp[s].n == 1 && sp[s].logits == SPAN_LOGITS_LAST;
    }
    // n_kv rounded up to 256·2^bucket (at most n_ctx), so that what the backends
    // decide from it holds from one token to the next
    int bucket = 0;
    while (256 << bucket < n_kv && 256 << bucket < c->n_ctx) bucket++;
    n_kv = 256 << bucket < c->n_ctx ? 256 << bucket : c->n_ctx;
    const size_t x_bytes = sizeof(float) * (size_t)n * hp->n_embd;

    // each stage of a layer split in turn (one stage without a split), the
    // residual stream handed on through host memory
    for (struct context *st = c; st; st = st->next) {
        struct backend *be = st->be;
        be->upload(be, st->tokens, ids, sizeof(int32_t) * 3 * (size_t)n);
        if (st != c) be->upload(be, st->x, c->host_x, x_bytes);
        const struct batch_rows rows = {n, st->tokens + n, st->tokens + 2 * n, pos, base, n_kv};
        int mode = BACKEND_GRAPH_NONE, n_out = n;
        if (decode && be->graph_begin) mode = be->graph_begin(be, graph_key(st, n, bucket));
        if (mode != BACKEND_GRAPH_REPLAYED) {
            n_out = enqueue_pass(st, sp, n_span, &rows, c->hidden_out);
            if (mode == BACKEND_GRAPH_RECORDING && be->graph_end(be))
                n_out = enqueue_pass(st, sp, n_span, &rows, c->hidden_out);
        }
        if (st->next)
            be->download(be, c->host_x, st->x, x_bytes);
        else if (c->hidden_out)
            be->download(be, c->hidden_out, st->xb, x_bytes);
        else if (n_out)
            be->download(be, logits, st->logits, sizeof(float) * (size_t)n_out * hp->n_vocab);
        if (be->sync(be)) return -1;
    }
    for (int s = 0; s < n_span; s++) {
        struct context *sc = sp[s].c;
        memcpy(sc->history + sp[s].pos0, sp[s].tokens, sizeof(int32_t) * (size_t)sp[s].n);
        sc->n_past = sp[s].pos0 + sp[s].n;
    }
    return 0;
}

int context_forward(struct context *c, const int32_t *tokens, int n, int pos0, float *logits,
                    bool all_logits) {
    const struct forward_span sp = {c, tokens, n, pos0, all_logits ? SPAN_LOGITS_ALL : SPAN_LOGITS_LAST};
    return context_forward_batch(c, &sp, 1, logits);
}

int context_forward_hidden(struct context *c, const int32_t *tokens, int n, int pos0, float *hidden) {
    c->hidden_out = hidden;
    int rc = context_forward(c, tokens, n, pos0, NULL, false);
    c->hidden_out = NULL;
    return rc;
}

int context_common_prefix(const struct context *c, const int32_t *tokens, int n) {
    int keep = 0;
    while (keep < c->n_past && keep < n && c->history[keep] == tokens[keep]) keep++;
    return keep;
}

int context_reuse_prefix(struct context *c, const int32_t *tokens, int n) {
    int keep = context_common_prefix(c, tokens, n);
    if (keep == n && keep > 0) keep--; // the last token must run to produce logits
    c->n_past = keep;
    return keep;
}

int context_eval(struct context *c, const int32_t *tokens, int n, float *logits, int *n_reused) {
    if (n < 1) return st_fail("nothing to evaluate: the prompt has no tokens");
    if (n > c->n_ctx)
        return st_fail("%d tokens do not fit the context of %d positions; use a larger -c or a "
                       "shorter prompt",
                       n, c->n_ctx);
    const int keep = context_reuse_prefix(c, tokens, n);
    if (n_reused) *n_reused = keep;
    for (int p = keep; p < n;) {
        int chunk = n - p < c->n_batch ? n - p : c->n_batch;
        if (context_forward(c, tokens + p, chunk, p, logits, false)) return -1;
        p += chunk;
    }
    return 0;
}
