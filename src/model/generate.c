// generate.c: prompt → tokens → sample, until a stop condition.
#include "model/generate.h"

#include <stdlib.h>

#include "text/tokenizer.h"
#include "util.h"

int generate(struct context *c, struct sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
             gen_token_fn on_token, void *user, struct gen_stats *stats) {
    const struct gen_hooks h = {.on_token = on_token, .user = user};
    return generate_hooked(c, s, prompt, n_prompt, n_predict, &h, stats);
}

int generate_hooked(struct context *c, struct sampler *s, const int32_t *prompt, int n_prompt, int n_predict,
                    const struct gen_hooks *h, struct gen_stats *stats) {
    gen_token_fn on_token = h->on_token;
    void *user = h->user;
    struct gen_stats st = {.n_prompt = n_prompt, .stop_reason = GEN_STOP_LENGTH};
    const struct tokenizer *tok = c->model->tok;
    const int n_vocab = c->model->hp.n_vocab;
    if (n_prompt > c->n_ctx)
        return st_fail("the prompt has %d tokens but the context holds %d; use a larger -c or a "
                       "shorter prompt",
                       n_prompt, c->n_ctx);
    size_t cap = 256;
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    char *piece = malloc(cap);
    if (!logits || !piece) {
        free(logits);
        free(piece);
        return st_fail("out of memory for %d logits", n_vocab);
    }
    int rc = -1;
    double t0 = st_time_s();
    int erc = context_eval_cancellable(c, prompt, n_prompt, logits, &st.n_reused, h->cancel, user);
    st.t_prompt = st_time_s() - t0;
    if (erc < 0) goto out;
    if (erc > 0) {
        st.stop_reason = GEN_STOP_CALLER;
        rc = 0;
        goto out;
    }
    sampler_reset(s);
    for (int i = 0; i < n_prompt; i++) sampler_accept(s, prompt[i]);

    t0 = st_time_s();
    int32_t prev = n_prompt ? prompt[n_prompt - 1] : -1;
    for (;;) {
        if (n_predict >= 0 && st.n_gen >= n_predict) {
            st.stop_reason = GEN_STOP_LENGTH;
            break;
        }
        if (h->on_logits && h->on_logits(user, logits)) {
            st.stop_reason = GEN_STOP_CALLER;
            break;
        }
        int32_t id = sampler_sample(s, logits);
        if (tokenizer_is_eog(tok, id)) {
            st.stop_reason = GEN_STOP_EOG;
            break;
        }
        sampler_accept(s, id);
        st.n_gen++;
        int len = tokenizer_piece(tok, prev, id, false, piece, cap);
        if (len < 0) goto out;
        if ((size_t)len > cap) {
            char *bigger = realloc(piece, (size_t)len);
            if (!bigger) {
                st_fail("out of memory");
                goto out;
            }
            piece = bigger;
            cap = (size_t)len;
            tokenizer_piece(tok, prev, id, false, piece, cap);
        }
        if (on_token && on_token(user, id, piece, (size_t)len)) {
            st.stop_reason = GEN_STOP_CALLER;
            break;
        }
        prev = id;
        if (c->n_past >= c->n_ctx) {
            st.stop_reason = GEN_STOP_CONTEXT;
            break;
        }
        if (context_forward(c, &id, 1, c->n_past, logits, false)) goto out;
    }
    st.t_gen = st_time_s() - t0;
    rc = 0;
out:
    free(piece);
    free(logits);
    if (stats) *stats = st;
    return rc;
}
