// generate.c: prompt → tokens → sample, until a stop condition.
#include "model/generate.h"

#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "util.h"

int generate(struct context *c, struct sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
             gen_token_fn on_token, void *user, struct gen_stats *stats) {
    const struct gen_hooks h = {.on_token = on_token, .user = user};
    return generate_hooked(c, s, prompt, n_prompt, n_predict, &h, stats);
}

int gen_seq_begin(struct gen_seq *g, struct context *c, struct sampler *s, const int32_t *prompt,
                  int n_prompt, int n_predict, const struct gen_hooks *hooks) {
    memset(g, 0, sizeof *g);
    if (n_prompt < 1) return st_fail("nothing to evaluate: the prompt has no tokens");
    if (n_prompt > c->n_ctx)
        return st_fail("the prompt has %d tokens but the context holds %d; use a larger -c or a "
                       "shorter prompt",
                       n_prompt, c->n_ctx);
    g->c = c;
    g->s = s;
    if (hooks) g->h = *hooks;
    g->prompt = prompt;
    g->n_prompt = n_prompt;
    g->n_predict = n_predict;
    g->st = (struct gen_stats){.n_prompt = n_prompt, .stop_reason = GEN_STOP_LENGTH};
    g->pos = g->st.n_reused = context_reuse_prefix(c, prompt, n_prompt);
    g->prev = prompt[n_prompt - 1];
    g->cap = 256;
    g->piece = st_xmalloc(g->cap);
    g->t0 = st_time_s();
    return 0;
}

bool gen_seq_span(struct gen_seq *g, int max, struct forward_span *sp) {
    if (g->done) return false;
    if (g->decoding) {
        *sp = (struct forward_span){g->c, &g->next, 1, g->c->n_past, SPAN_LOGITS_LAST};
        return true;
    }
    if (g->h.cancel && g->h.cancel(g->h.user)) {
        g->st.stop_reason = GEN_STOP_CALLER;
        g->st.t_prompt = st_time_s() - g->t0;
        g->done = true;
        return false;
    }
    int n = g->n_prompt - g->pos;
    if (n > max) n = max;
    if (n > g->c->n_batch) n = g->c->n_batch;
    const bool last = g->pos + n == g->n_prompt;
    *sp = (struct forward_span){g->c, g->prompt + g->pos, n, g->pos,
                                last ? SPAN_LOGITS_LAST : SPAN_LOGITS_NONE};
    return true;
}

// Draws the next token from logits; sets next, or ends g.
static void sample_step(struct gen_seq *g, float *logits) {
    const struct tokenizer *tok = g->c->model->tok;
    if (g->n_predict >= 0 && g->st.n_gen >= g->n_predict) {
        g->st.stop_reason = GEN_STOP_LENGTH;
        g->done = true;
        return;
    }
    if (g->h.on_logits && g->h.on_logits(g->h.user, logits)) {
        g->st.stop_reason = GEN_STOP_CALLER;
        g->done = true;
        return;
    }
    int32_t id = sampler_sample(g->s, logits);
    if (tokenizer_is_eog(tok, id)) {
        g->st.stop_reason = GEN_STOP_EOG;
        g->done = true;
        return;
    }
    sampler_accept(g->s, id);
    g->st.n_gen++;
    int len = tokenizer_piece(tok, g->prev, id, false, g->piece, g->cap);
    if (len >= 0 && (size_t)len > g->cap) {
        char *bigger = realloc(g->piece, (size_t)len);
        if (!bigger) {
            st_fail("out of memory");
            gen_seq_fail(g);
            return;
        }
        g->piece = bigger;
        g->cap = (size_t)len;
        tokenizer_piece(tok, g->prev, id, false, g->piece, g->cap);
    }
    if (len < 0) {
        gen_seq_fail(g);
        return;
    }
    if (g->h.on_token && g->h.on_token(g->h.user, id, g->piece, (size_t)len)) {
        g->st.stop_reason = GEN_STOP_CALLER;
        g->done = true;
        return;
    }
    g->prev = id;
    if (g->c->n_past >= g->c->n_ctx) {
        g->st.stop_reason = GEN_STOP_CONTEXT;
        g->done = true;
        return;
    }
    g->next = id;
}

void gen_seq_advance(struct gen_seq *g, float *logits) {
    if (g->done) return;
    if (!g->decoding) {
        g->pos = g->c->n_past;
        if (g->pos < g->n_prompt) return; // more of the prompt to run
        const double now = st_time_s();
        g->st.t_prompt = now - g->t0;
        g->t0 = now;
        g->decoding = true;
        sampler_reset(g->s);
        for (int i = 0; i < g->n_prompt; i++) sampler_accept(g->s, g->prompt[i]);
    }
    sample_step(g, logits);
    if (g->done) g->st.t_gen = st_time_s() - g->t0;
}

void gen_seq_fail(struct gen_seq *g) {
    g->rc = -1;
    g->done = true;
}

int gen_seq_end(struct gen_seq *g, struct gen_stats *stats) {
    if (g->decoding && !g->st.t_gen) g->st.t_gen = st_time_s() - g->t0;
    if (stats) *stats = g->st;
    free(g->piece);
    g->piece = NULL;
    return g->rc;
}

int generate_hooked(struct context *c, struct sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
                    const struct gen_hooks *h, struct gen_stats *stats) {
    struct gen_seq g;
    if (gen_seq_begin(&g, c, s, prompt, n_prompt, n_predict, h)) return -1;
    float *logits = backend_host_alloc(c->be, sizeof(float) * (size_t)c->model->hp.n_vocab);
    if (!logits) {
        gen_seq_end(&g, NULL);
        return -1;
    }
    struct forward_span sp;
    while (gen_seq_span(&g, c->n_batch, &sp)) {
        if (context_forward_batch(c, &sp, 1, logits))
            gen_seq_fail(&g);
        else
            gen_seq_advance(&g, sp.logits == SPAN_LOGITS_NONE ? NULL : logits);
    }
    backend_host_free(c->be, logits);
    return gen_seq_end(&g, stats);
}
