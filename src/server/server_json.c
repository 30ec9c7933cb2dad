// server_json.c: responses in the shapes of OpenAI's API, close enough that
// the official clients parse them: chat.completion, chat.completion.chunk,
// text_completion, model lists and error objects. Text put in here is valid
// UTF-8 (server_text.c makes it so); cJSON escapes what JSON requires.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "util.h"

// Prints and deletes root; allocation failure aborts (the objects are small).
static char *print_free(cJSON *root) {
    ST_ASSERT(root);
    char *out = cJSON_PrintUnformatted(root);
    ST_ASSERT(out);
    cJSON_Delete(root);
    return out;
}

static cJSON *error_object(const struct srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "server_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    return root;
}

char *srv_json_error(const struct srv_error *e) { return print_free(error_object(e)); }


static const char *finish_name(enum srv_finish f) {
    return f == SRV_FINISH_LENGTH ? "length" : "stop";
}

// The usage object: token counts, the cached share as OpenAI reports it.
static cJSON *usage_object(const struct srv_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->stats.n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->stats.n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->stats.n_prompt + j->stats.n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->stats.n_reused);
    return u;
}

// Strata's timings (the chat page shows them; OpenAI clients ignore extra fields).
static cJSON *timings_object(const struct srv_job *j) {
    const struct gen_stats *st = &j->stats;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "prompt_n", st->n_prompt - st->n_reused);
    cJSON_AddNumberToObject(t, "prompt_ms", st->t_prompt * 1e3);
    cJSON_AddNumberToObject(t, "predicted_n", st->n_gen);
    cJSON_AddNumberToObject(t, "predicted_ms", st->t_gen * 1e3);
    cJSON_AddNumberToObject(t, "predicted_per_second", st->t_gen > 0 ? st->n_gen / st->t_gen : 0);
    cJSON_AddNumberToObject(t, "time_to_first_token_ms", j->t_first * 1e3);
    return t;
}

// The fields every response and chunk starts with.
static cJSON *response_head(const struct server *s, const struct srv_job *j, bool chunk) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", j->id);
    const char *object = j->req.kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                 : "text_completion";
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)j->created);
    cJSON_AddStringToObject(root, "model", s->model_id);
    cJSON_AddStringToObject(root, "system_fingerprint", "strata");
    return root;
}

// One choice. text == NULL: no text field (a chat chunk's empty delta).
static cJSON *choice_object(const struct srv_job *j, bool chunk, const char *text, size_t len,
                            bool with_role, const char *finish) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *str = NULL;
    if (text) {
        // cJSON wants a NUL-terminated string; the text may be a slice
        char *copy = st_xmalloc(len + 1);
        memcpy(copy, text, len);
        copy[len] = 0;
        str = cJSON_CreateString(copy);
        free(copy);
        ST_ASSERT(str);
    }
    if (j->req.kind == SRV_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (with_role) cJSON_AddStringToObject(m, "role", "assistant");
        if (str) cJSON_AddItemToObject(m, "content", str);
    } else {
        cJSON_AddItemToObject(c, "text", str ? str : cJSON_CreateString(""));
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

char *srv_json_result(const struct server *s, const struct srv_job *j, const char *text,
                      size_t len) {
    cJSON *root = response_head(s, j, false);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToArray(choices, choice_object(j, false, text, len, true, finish_name(j->finish)));
    cJSON_AddItemToObject(root, "usage", usage_object(j));
    cJSON_AddItemToObject(root, "timings", timings_object(j));
    return print_free(root);
}

static void sse_event(struct sbuf *out, cJSON *root) {
    char *json = print_free(root);
    sbuf_puts(out, "data: ");
    sbuf_puts(out, json);
    sbuf_puts(out, "\n\n");
    free(json);
}

static cJSON *chunk_with_choice(const struct server *s, const struct srv_job *j, cJSON *choice) {
    cJSON *root = response_head(s, j, true);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToArray(choices, choice);
    if (j->req.include_usage) cJSON_AddNullToObject(root, "usage");
    return root;
}

void srv_sse_open(struct sbuf *out, const struct server *s, const struct srv_job *j) {
    if (j->req.kind != SRV_CHAT) return; // completions have no opening chunk
    sse_event(out, chunk_with_choice(s, j, choice_object(j, true, "", 0, true, NULL)));
}

void srv_sse_text(struct sbuf *out, const struct server *s, const struct srv_job *j,
                  const char *text, size_t len) {
    sse_event(out, chunk_with_choice(s, j, choice_object(j, true, text, len, false, NULL)));
}

void srv_sse_close(struct sbuf *out, const struct server *s, const struct srv_job *j) {
    const bool chat = j->req.kind == SRV_CHAT;
    cJSON *last = chunk_with_choice(
        s, j, choice_object(j, true, chat ? NULL : "", 0, false, finish_name(j->finish)));
    cJSON_AddItemToObject(last, "timings", timings_object(j));
    sse_event(out, last);
    if (j->req.include_usage) {
        cJSON *root = response_head(s, j, true);
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_object(j));
        sse_event(out, root);
    }
    sbuf_puts(out, "data: [DONE]\n\n");
}

void srv_sse_error(struct sbuf *out, const struct srv_error *e) { sse_event(out, error_object(e)); }

void srv_job_error(const struct srv_job *j, double timeout_s, struct srv_error *e) {
    switch (j->finish) {
    case SRV_FINISH_TIMEOUT:
        srv_error_set(e, 503, "server_error", "timeout", NULL,
                      "the request did not finish within the server's limit of %g s (--timeout)",
                      timeout_s);
        break;
    case SRV_FINISH_CANCELLED:
        srv_error_set(e, 503, "server_error", "cancelled", NULL,
                      "the request was cancelled: the server is shutting down");
        break;
    default:
        srv_error_set(e, 500, "server_error", "internal_error", NULL, "generation failed: %s",
                      j->error);
        break;
    }
}

static cJSON *model_object(const struct server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "strata");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", s->sess.model->hp.n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_vocab", s->sess.model->hp.n_vocab);
    cJSON_AddStringToObject(meta, "architecture", s->sess.model->hp.arch);
    cJSON_AddStringToObject(meta, "chat_template",
                            s->have_chat ? chat_template_name(s->fmt.kind) : "none");
    return m;
}

char *srv_json_models(const struct server *s) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), model_object(s));
    return print_free(root);
}

char *srv_json_model(const struct server *s) { return print_free(model_object(s)); }
