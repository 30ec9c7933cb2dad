// fuzz_server_request.c: libFuzzer target for the server's request path —
// arbitrary bytes as the body of a chat request, a completion request, an
// embeddings request (grammars, JSON schemas and tools included), /tokenize
// and /detokenize, with the test model's tokenizer and chat template
// (STRATA_TEST_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf). Every
// body must be either accepted as a request within its bounds or refused with
// a 4xx whose error object is valid JSON.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/session.h"
#include "server/server.h"
#include "util.h"

static struct server srv;

// The server as its worker leaves it once loaded, without a backend or
// context: parsing needs the model and the chat format only.
static void setup(void) {
    const char *path = getenv("STRATA_TEST_MODEL");
    if (!path || !*path) path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    ST_ASSERT(model_load(path, &srv.sess.model) == 0);
    session_opts_default(&srv.cfg.so);
    srv.cfg.sp = sampler_default_params();
    srv.have_chat = session_chat_format(srv.sess.model, NULL, &srv.fmt) == 0;
    srv.pooling = 1;
    snprintf(srv.model_id, sizeof srv.model_id, "fuzz");
    srv.n_ctx = 512;
    srv.rng = 1;
    pthread_mutex_init(&srv.mu, NULL);
    pthread_mutex_init(&srv.json_mu, NULL);
}

static void check_error(const struct srv_error *e) {
    ST_ASSERT(e->status >= 400 && e->status < 500 && e->message[0]);
    char *json = srv_json_error(e);
    cJSON *back = cJSON_Parse(json);
    ST_ASSERT(back);
    cJSON_Delete(back);
    free(json);
}

static void check_json(char *out, const struct srv_error *e) {
    if (!out) {
        check_error(e);
        return;
    }
    cJSON *back = cJSON_Parse(out);
    ST_ASSERT(back);
    cJSON_Delete(back);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!srv.sess.model) setup();
    char *body = malloc(size + 1); // the server's bodies end in a NUL after their length
    ST_ASSERT(body);
    memcpy(body, data, size);
    body[size] = 0;
    for (int kind = SRV_CHAT; kind <= SRV_EMBEDDING; kind++) {
        struct srv_request r;
        struct srv_error e;
        int rc = kind == SRV_EMBEDDING ? srv_embeddings_parse(&srv, body, size, &r, &e)
                                       : srv_request_parse(&srv, (enum srv_kind)kind, body, size, &r, &e);
        if (rc) {
            check_error(&e);
            continue;
        }
        if (kind == SRV_EMBEDDING) {
            ST_ASSERT(r.n_inputs >= 1 && r.n_inputs <= SRV_MAX_INPUTS);
            for (int i = 0; i < r.n_inputs; i++)
                ST_ASSERT(r.n_input_tokens[i] >= 1 && r.n_input_tokens[i] <= srv.n_ctx);
            srv_request_free(&r);
            continue;
        }
        ST_ASSERT(r.n_sets >= 1 && r.n_sets <= SRV_MAX_PROMPTS);
        ST_ASSERT(r.n_choices >= r.n_sets && r.n_choices % r.n_sets == 0 &&
                  r.n_choices / r.n_sets <= SRV_MAX_CHOICES);
        int shortest = r.n_prompt;
        ST_ASSERT(r.n_sets == 1 ? !r.set_prompt && !r.set_n : !r.set_prompt[0] && r.set_n[0] == r.n_prompt);
        for (int k = 0; k < r.n_sets; k++) { // each prompt
            int n;
            const int32_t *ids = srv_set_prompt(&r, k, &n);
            ST_ASSERT(n >= 1 && n < srv.n_ctx);
            for (int i = 0; i < n; i++) ST_ASSERT(ids[i] >= 0 && ids[i] < srv.sess.model->hp.n_vocab);
            if (n < shortest) shortest = n;
        }
        ST_ASSERT(r.max_tokens == -1 || (r.max_tokens >= 1 && r.max_tokens <= srv.n_ctx - shortest));
        if (r.echo) { // each prompt's text, valid UTF-8, one after another
            ST_ASSERT(r.echo_off[0] == 0);
            for (int k = 0; k < r.n_sets; k++) ST_ASSERT(r.echo_off[k] <= r.echo_off[k + 1]);
            ST_ASSERT(utf8_valid(r.echo, r.echo_off[r.n_sets]));
        }
        ST_ASSERT(r.logprobs >= -1 && r.logprobs <= SRV_MAX_TOP);
        ST_ASSERT(sampler_params_check(&r.sp) == 0);
        for (int i = 0; i < r.n_stop; i++)
            ST_ASSERT(r.stop[i][0] && utf8_valid(r.stop[i], strlen(r.stop[i])));
        srv_request_free(&r);
    }
    struct srv_error e;
    check_json(srv_tokenize(&srv, body, size, &e), &e);
    check_json(srv_detokenize(&srv, body, size, &e), &e);
    free(body);
    return 0;
}
