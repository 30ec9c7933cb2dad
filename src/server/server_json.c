// server_json.c: responses in the shapes of OpenAI's API, close enough that
// the official clients parse them: chat.completion, chat.completion.chunk,
// text_completion, model lists and error objects. Text put in here is valid
// UTF-8 (server_text.c makes it so); cJSON escapes what JSON requires.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "text/tokenizer.h"
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
    if (e->param[0])
        cJSON_AddStringToObject(err, "param", e->param);
    else
        cJSON_AddNullToObject(err, "param");
    if (e->code)
        cJSON_AddStringToObject(err, "code", e->code);
    else
        cJSON_AddNullToObject(err, "code");
    return root;
}

char *srv_json_error(const struct srv_error *e) { return print_free(error_object(e)); }

static const char *finish_name(enum srv_finish f) {
    switch (f) {
    case SRV_FINISH_LENGTH:
        return "length";
    case SRV_FINISH_TIMEOUT:
        return "timeout";
    case SRV_FINISH_TOOLS:
        return "tool_calls";
    default:
        return "stop";
    }
}

bool srv_job_has_result(const struct srv_job *j) {
    if (j->finish == SRV_FINISH_STOP || j->finish == SRV_FINISH_LENGTH || j->finish == SRV_FINISH_TOOLS)
        return true;
    return j->finish == SRV_FINISH_TIMEOUT && j->stats.n_gen > 0;
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
    const char *object =
        j->req.kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)j->created);
    cJSON_AddStringToObject(root, "model", s->model_id);
    cJSON_AddStringToObject(root, "system_fingerprint", "strata");
    return root;
}

static cJSON *string_slice(const char *text, size_t len) {
    char *copy = st_xmalloc(len + 1); // cJSON wants a NUL-terminated string
    memcpy(copy, text, len);
    copy[len] = 0;
    cJSON *str = cJSON_CreateString(copy);
    free(copy);
    ST_ASSERT(str);
    return str;
}

// A token's bytes (after prev) into raw.
static void token_bytes(const struct server *s, int32_t prev, int32_t id, struct sbuf *raw) {
    char buf[256];
    raw->len = 0;
    int n = tokenizer_piece(s->sess.model->tok, prev, id, false, buf, sizeof buf);
    if (n < 0) n = 0;
    sbuf_append(raw, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf);
}

// OpenAI's {"token", "logprob", "bytes"}: the token as valid text (a part of a
// character becomes U+FFFD) and its real bytes.
static cJSON *token_object(const struct server *s, int32_t prev, int32_t id, float logprob) {
    struct sbuf raw = {0}, clean = {0};
    token_bytes(s, prev, id, &raw);
    utf8_append_sanitized(&clean, raw.p ? raw.p : "", raw.len);
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToObject(t, "token", string_slice(clean.p ? clean.p : "", clean.len));
    cJSON_AddNumberToObject(t, "logprob", logprob);
    cJSON *bytes = cJSON_AddArrayToObject(t, "bytes");
    for (size_t i = 0; i < raw.len; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)raw.p[i]));
    sbuf_free(&raw);
    sbuf_free(&clean);
    return t;
}

// The logprobs object of entries lp[a..b): chat's {"content": [...], "refusal": null}
// or completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
static cJSON *logprobs_object(const struct server *s, const struct srv_job *j, const struct srv_logprob *lp,
                              int a, int b) {
    cJSON *o = cJSON_CreateObject();
    if (j->req.kind == SRV_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = a; i < b; i++) {
            cJSON *t = token_object(s, lp[i].prev, lp[i].id, lp[i].logprob);
            cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
            for (int k = 0; k < lp[i].n_top; k++)
                cJSON_AddItemToArray(top, token_object(s, lp[i].prev, lp[i].top[k].id, lp[i].top[k].logprob));
            cJSON_AddItemToArray(content, t);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = a; i < b; i++) {
        cJSON *t = token_object(s, lp[i].prev, lp[i].id, lp[i].logprob);
        cJSON_AddItemToArray(tokens, cJSON_Duplicate(cJSON_GetObjectItem(t, "token"), 1));
        cJSON_Delete(t);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp[i].logprob));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < lp[i].n_top; k++) {
            cJSON *alt = token_object(s, lp[i].prev, lp[i].top[k].id, lp[i].top[k].logprob);
            const char *name = cJSON_GetObjectItem(alt, "token")->valuestring;
            if (!cJSON_GetObjectItemCaseSensitive(top, name)) // two ids may print alike
                cJSON_AddNumberToObject(top, name, lp[i].top[k].logprob);
            cJSON_Delete(alt);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)lp[i].offset));
    }
    return o;
}

// One choice. text == NULL: no text field (a chat chunk's empty delta).
static cJSON *choice_object(const struct srv_job *j, int index, bool chunk, const char *text, size_t len,
                            bool with_role, const char *finish) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON *str = text ? string_slice(text, len) : NULL;
    if (j->req.kind == SRV_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (with_role) cJSON_AddStringToObject(m, "role", "assistant");
        if (str) cJSON_AddItemToObject(m, "content", str);
    } else {
        cJSON_AddItemToObject(c, "text", str ? str : cJSON_CreateString(""));
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static void set_logprobs(cJSON *choice, cJSON *lp) {
    cJSON_ReplaceItemInObjectCaseSensitive(choice, "logprobs", lp);
}

// A finished choice's tool calls as the message's tool_calls (content null).
static void add_tool_calls(cJSON *choice, const struct srv_choice *ch, bool chunk) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(choice, chunk ? "delta" : "message");
    cJSON *calls = cJSON_Parse(ch->tool_calls);
    ST_ASSERT(m && calls);
    if (chunk) { // streamed calls carry their index
        int k = 0;
        cJSON *c;
        cJSON_ArrayForEach(c, calls) cJSON_AddNumberToObject(c, "index", k++);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
    cJSON_AddNullToObject(m, "content");
    cJSON_AddItemToObject(m, "tool_calls", calls);
}

char *srv_json_result(const struct server *s, const struct srv_job *j) {
    cJSON *root = response_head(s, j, false);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    struct sbuf text = {0};
    for (int i = 0; i < j->req.n_choices; i++) {
        const struct srv_choice *ch = &j->choices[i];
        if (!ch->done) continue; // a timeout before this choice began
        text.len = 0;            // with echo the choice's prompt, then the completion
        const size_t *eo = j->req.echo_off;
        const int set = srv_choice_set(&j->req, i);
        if (j->req.echo) sbuf_append(&text, j->req.echo + eo[set], eo[set + 1] - eo[set]);
        sbuf_append(&text, ch->text.p ? ch->text.p : "", ch->text.len);
        cJSON *c = choice_object(j, i, false, text.p ? text.p : "", text.len, true, finish_name(ch->finish));
        if (j->req.logprobs >= 0) set_logprobs(c, logprobs_object(s, j, ch->lp, 0, ch->n_lp));
        if (ch->tool_calls) add_tool_calls(c, ch, false);
        cJSON_AddItemToArray(choices, c);
    }
    sbuf_free(&text);
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

// An error event, for a stream that ends without a result.
static void srv_sse_error(struct sbuf *out, const struct srv_error *e) { sse_event(out, error_object(e)); }

// The logprob entries of ch whose bytes begin before `upto`.
static int lp_until(const struct srv_choice *ch, size_t upto) {
    int k = ch->lp_sent;
    while (k < ch->n_lp && ch->lp[k].offset < upto) k++;
    return k;
}

bool srv_sse_drain_locked(struct sbuf *out, const struct server *s, struct srv_job *j) {
    const bool chat = j->req.kind == SRV_CHAT;
    const bool done = j->state == SRV_JOB_DONE;
    if (done && !srv_job_has_result(j)) {
        struct srv_error e;
        srv_job_error(j, s->cfg.timeout_s, &e);
        srv_sse_error(out, &e);
        return true;
    }
    int taken = 0;
    for (int i = 0; i < j->req.n_choices; i++) {
        struct srv_choice *ch = &j->choices[i];
        if (!ch->started || ch->closed) {
            taken += ch->n_gen;
            continue;
        }
        if (!ch->opened) { // a chat choice opens with its role, an echoing completion with its prompt
            ch->opened = true;
            if (chat) sse_event(out, chunk_with_choice(s, j, choice_object(j, i, true, "", 0, true, NULL)));
            const size_t *eo = j->req.echo_off;
            const int set = srv_choice_set(&j->req, i);
            if (j->req.echo)
                sse_event(out, chunk_with_choice(s, j,
                                                 choice_object(j, i, true, j->req.echo + eo[set],
                                                               eo[set + 1] - eo[set], false, NULL)));
        }
        // with tools the text is held until the answer is parsed
        const bool hold = j->req.tools != CHAT_TOOLS_NONE && !ch->done;
        if (!hold && ch->text.len > ch->text_sent && !ch->tool_calls) {
            cJSON *c = choice_object(j, i, true, ch->text.p + ch->text_sent, ch->text.len - ch->text_sent,
                                     false, NULL);
            int k = lp_until(ch, ch->done ? SIZE_MAX : ch->text.len);
            if (j->req.logprobs >= 0) set_logprobs(c, logprobs_object(s, j, ch->lp, ch->lp_sent, k));
            ch->lp_sent = k;
            sse_event(out, chunk_with_choice(s, j, c));
            ch->text_sent = ch->text.len;
        }
        // the last choice closes with the job, whose timings are final then
        if (ch->done && !ch->closed && (done || i < j->req.n_choices - 1)) {
            if (ch->tool_calls) {
                cJSON *c = choice_object(j, i, true, NULL, 0, false, NULL);
                add_tool_calls(c, ch, true);
                sse_event(out, chunk_with_choice(s, j, c));
            }
            cJSON *last = chunk_with_choice(
                s, j, choice_object(j, i, true, chat ? NULL : "", 0, false, finish_name(ch->finish)));
            if (done) cJSON_AddItemToObject(last, "timings", timings_object(j));
            sse_event(out, last);
            ch->closed = true;
        }
        taken += ch->n_gen;
        if (!ch->closed) break; // choices stream one after another
    }
    j->n_taken = taken;
    j->t_taken = st_time_s();
    if (!done) return false;
    if (j->req.include_usage) {
        cJSON *root = response_head(s, j, true);
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_object(j));
        sse_event(out, root);
    }
    sbuf_puts(out, "data: [DONE]\n\n");
    return true;
}

void srv_job_error(const struct srv_job *j, double timeout_s, struct srv_error *e) {
    switch (j->finish) {
    case SRV_FINISH_TIMEOUT:
        srv_error_set(e, 503, "server_error", "timeout", NULL,
                      "the request did not finish within the server's limit of %g s (--timeout)", timeout_s);
        break;
    case SRV_FINISH_CANCELLED:
    case SRV_FINISH_SHUTDOWN:
        srv_error_set(e, 503, "server_error", "cancelled", NULL,
                      "the request was cancelled: the server is shutting down");
        break;
    default:
        srv_error_set(e, 500, "server_error", "internal_error", NULL, "generation failed: %s", j->error);
        break;
    }
}

static const char base64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// n float32 values, little-endian, as base64 (what OpenAI's encoding_format "base64" sends).
static cJSON *base64_floats(const float *v, int n) {
    const unsigned char *b = (const unsigned char *)v; // x86 and ARM hosts are little-endian
    size_t len = sizeof(float) * (size_t)n;
    struct sbuf out = {0};
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16;
        if (i + 1 < len) w |= (uint32_t)b[i + 1] << 8;
        if (i + 2 < len) w |= b[i + 2];
        char q[4] = {base64_chars[(w >> 18) & 63], base64_chars[(w >> 12) & 63],
                     i + 1 < len ? base64_chars[(w >> 6) & 63] : '=',
                     i + 2 < len ? base64_chars[w & 63] : '='};
        sbuf_append(&out, q, 4);
    }
    cJSON *str = cJSON_CreateString(out.p ? out.p : "");
    sbuf_free(&out);
    return str;
}

char *srv_json_embeddings(const struct server *s, const struct srv_job *j) {
    const int n_embd = s->sess.model->hp.n_embd;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    for (int i = 0; i < j->req.n_inputs; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        const float *v = j->embd + (size_t)i * n_embd;
        if (j->req.base64) {
            cJSON_AddItemToObject(e, "embedding", base64_floats(v, n_embd));
        } else {
            cJSON *arr = cJSON_AddArrayToObject(e, "embedding");
            for (int k = 0; k < n_embd; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[k]));
        }
        cJSON_AddItemToArray(data, e);
    }
    cJSON_AddStringToObject(root, "model", s->model_id);
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->stats.n_prompt);
    cJSON_AddNumberToObject(u, "total_tokens", j->stats.n_prompt);
    return print_free(root);
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
    cJSON_AddStringToObject(meta, "chat_template", s->have_chat ? chat_template_name(s->fmt.kind) : "none");
    return m;
}

char *srv_json_models(const struct server *s) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), model_object(s));
    return print_free(root);
}

char *srv_json_model(const struct server *s) { return print_free(model_object(s)); }

char *srv_json_props(const struct server *s) {
    static const char *const pooling[] = {"mean", "mean", "cls", "last"};
    const struct model_hparams *hp = &s->sess.model->hp;
    const struct sampler_params *sp = &s->cfg.sp;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", s->model_id);
    cJSON_AddStringToObject(root, "model_path", s->cfg.so.model);
    cJSON_AddStringToObject(root, "architecture", hp->arch);
    cJSON_AddNumberToObject(root, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(root, "n_ctx_train", hp->n_ctx_train);
    cJSON_AddNumberToObject(root, "n_vocab", hp->n_vocab);
    cJSON_AddNumberToObject(root, "n_embd", hp->n_embd);
    cJSON_AddNumberToObject(root, "n_batch", s->sess.ctx->n_batch);
    cJSON_AddNumberToObject(root, "total_slots", s->n_slots);
    cJSON_AddStringToObject(root, "backend", s->sess.be->name);
    cJSON_AddStringToObject(root, "chat_template", s->have_chat ? chat_template_name(s->fmt.kind) : "none");
    cJSON_AddStringToObject(root, "embedding_pooling", pooling[s->pooling & 3]);
    cJSON_AddBoolToObject(root, "api_key_required", s->cfg.api_key != NULL);
    cJSON_AddNumberToObject(root, "timeout_s", s->cfg.timeout_s);
    cJSON_AddNumberToObject(root, "max_queue", s->cfg.max_queue);
    cJSON *d = cJSON_AddObjectToObject(root, "default_generation_settings");
    cJSON_AddNumberToObject(d, "temperature", sp->temperature);
    cJSON_AddNumberToObject(d, "top_k", sp->top_k);
    cJSON_AddNumberToObject(d, "top_p", sp->top_p);
    cJSON_AddNumberToObject(d, "min_p", sp->min_p);
    cJSON_AddNumberToObject(d, "repeat_penalty", sp->repeat_penalty);
    cJSON_AddNumberToObject(d, "repeat_last_n", sp->repeat_last_n);
    cJSON_AddBoolToObject(d, "seed_fixed", s->cfg.seed_given);
    cJSON *f = cJSON_AddArrayToObject(root, "endpoints");
    static const char *const eps[] = {"/v1/chat/completions",
                                      "/v1/completions",
                                      "/v1/embeddings",
                                      "/v1/models",
                                      "/props",
                                      "/health",
                                      "/metrics",
                                      "/tokenize",
                                      "/detokenize"};
    for (size_t i = 0; i < sizeof eps / sizeof *eps; i++) cJSON_AddItemToArray(f, cJSON_CreateString(eps[i]));
    return print_free(root);
}
