// server_request.c: request bodies, checked field by field.
//
// Every field the server reads is checked for its type and range, and a bad
// one is refused with a 400 that names it (OpenAI's `param`). Fields of
// OpenAI's API that Strata does not implement are accepted at their neutral
// value (n = 1, presence_penalty = 0, no tools, ...) and refused with
// code "unsupported_parameter" otherwise, so a client never silently gets less
// than it asked for. Unknown fields are ignored, as clients send extras.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "server/server.h"
#include "text/grammar.h"
#include "text/tokenizer.h"
#include "util.h"

#define BAD "invalid_request_error"
#define MAX_SAFE_INT 9007199254740991.0 // 2^53 - 1: larger JSON numbers lose digits

void srv_request_free(struct srv_request *r) {
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->bias);
    grammar_free(r->grammar);
    free(r->echo);
    free(r->echo_off);
    for (int k = 0; r->set_prompt && k < r->n_sets; k++) free(r->set_prompt[k]);
    free(r->set_prompt);
    free(r->set_n);
    for (int i = 0; i < r->n_inputs; i++) free(r->inputs[i]);
    free(r->inputs);
    free(r->n_input_tokens);
    memset(r, 0, sizeof *r);
}

// --- JSON values ------------------------------------------------------------------

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

// The member name of o, or NULL when it is absent or null.
static const cJSON *member(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int bad_type(struct srv_error *e, const char *param, const char *want, const cJSON *v) {
    return srv_error_set(e, 400, BAD, "invalid_type", param, "invalid type for '%s': expected %s, got %s",
                         param, want, type_name(v));
}

static int unsupported(struct srv_error *e, const char *param, const char *why) {
    return srv_error_set(e, 400, BAD, "unsupported_parameter", param, "'%s': %s", param, why);
}

// Reads a number in [lo, hi]; returns 1 when present, 0 when absent or null, -1 on error.
static int get_number(const cJSON *o, const char *name, double lo, double hi, double *out,
                      struct srv_error *e) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad_type(e, name, "a number", v);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi)
        return srv_error_set(e, 400, BAD, "invalid_value", name,
                             "invalid value for '%s': %g is out of range [%g, %g]", name, x, lo, hi);
    *out = x;
    return 1;
}

// Reads a whole number in [lo, hi] (|lo|, |hi| ≤ 2^53): 1, 0 or -1 as get_number.
static int get_int(const cJSON *o, const char *name, double lo, double hi, long long *out,
                   struct srv_error *e) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad_type(e, name, "an integer", v);
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x)) return bad_type(e, name, "an integer", v);
    if (x < lo || x > hi)
        return srv_error_set(e, 400, BAD, "invalid_value", name,
                             "invalid value for '%s': %.17g is out of range [%.17g, %.17g]", name, x, lo, hi);
    *out = (long long)x;
    return 1;
}

static int get_bool(const cJSON *o, const char *name, bool *out, struct srv_error *e) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad_type(e, name, "a boolean", v);
    *out = cJSON_IsTrue(v);
    return 1;
}

static int get_string(const cJSON *o, const char *name, const char **out, struct srv_error *e) {
    const cJSON *v = member(o, name);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return bad_type(e, name, "a string", v);
    *out = v->valuestring;
    return 1;
}

// What a string-aware pass over JSON text finds: the deepest nesting of
// arrays and objects, and whether a string holds "\u0000" (which cJSON would
// cut the string at without a word).
struct json_scan {
    int max_depth;
    bool nul_escape;
};

static struct json_scan json_scan(const char *s, size_t n) {
    struct json_scan r = {0, false};
    bool in_string = false;
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!in_string) {
            if (c == '"')
                in_string = true;
            else if (c == '[' || c == '{')
                depth++;
            else if (c == ']' || c == '}')
                depth--;
            if (depth > r.max_depth) r.max_depth = depth;
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\' && i + 1 < n) {
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) r.nul_escape = true;
            i++;
        }
    }
    return r;
}

// Parses body as a JSON object; NULL with err when it is not one.
static cJSON *parse_body(struct server *s, const char *body, size_t len, struct srv_error *e) {
    if (len == 0) {
        srv_error_set(e, 400, BAD, "invalid_json", NULL, "the request body is empty: send a JSON object");
        return NULL;
    }
    if (memchr(body, 0, len) || !utf8_valid(body, len)) {
        srv_error_set(e, 400, BAD, "invalid_json", NULL,
                      "the request body is not valid UTF-8 text (or holds a NUL byte)");
        return NULL;
    }
    // body[len] is the sbuf's NUL; cJSON requires it inside the length when
    // asked to refuse trailing text
    const char *end = NULL;
    pthread_mutex_lock(&s->json_mu);
    cJSON *root = cJSON_ParseWithLengthOpts(body, len + 1, &end, 1);
    pthread_mutex_unlock(&s->json_mu);
    const struct json_scan scan = json_scan(body, len);
    if (!root) {
        if (scan.max_depth > CJSON_NESTING_LIMIT)
            srv_error_set(e, 400, BAD, "invalid_json", NULL,
                          "the request body nests arrays and objects %d deep; at most %d levels "
                          "are accepted",
                          scan.max_depth, CJSON_NESTING_LIMIT);
        else
            srv_error_set(e, 400, BAD, "invalid_json", NULL,
                          "the request body is not valid JSON (the error is near byte %ld)",
                          end ? (long)(end - body) : 0L);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        srv_error_set(e, 400, BAD, "invalid_json", NULL, "the request body must be a JSON object, not %s",
                      type_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    if (scan.nul_escape) {
        srv_error_set(e, 400, BAD, "invalid_value", NULL, "strings may not contain \\u0000");
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

// --- fields common to both kinds -------------------------------------------------------

static int parse_stop(const cJSON *root, struct srv_request *r, struct srv_error *e) {
    const cJSON *v = member(root, "stop");
    if (!v) return 0;
    const cJSON *items[SRV_MAX_STOP];
    int n = 0;
    if (cJSON_IsString(v)) {
        items[n++] = v;
    } else if (cJSON_IsArray(v)) {
        int size = cJSON_GetArraySize(v);
        if (size > SRV_MAX_STOP)
            return srv_error_set(e, 400, BAD, "invalid_value", "stop",
                                 "'stop' holds %d strings; at most %d are allowed", size, SRV_MAX_STOP);
        const cJSON *it;
        cJSON_ArrayForEach(it, v) items[n++] = it;
    } else {
        return bad_type(e, "stop", "a string or an array of strings", v);
    }
    for (int i = 0; i < n; i++) {
        char param[32];
        snprintf(param, sizeof param, cJSON_IsArray(v) ? "stop[%d]" : "stop", i);
        if (!cJSON_IsString(items[i])) return bad_type(e, param, "a string", items[i]);
        size_t len = strlen(items[i]->valuestring);
        if (len == 0 || len > SRV_MAX_STOP_LEN)
            return srv_error_set(e, 400, BAD, "invalid_value", param, "'%s' must have 1 to %d bytes, not %zu",
                                 param, SRV_MAX_STOP_LEN, len);
        r->stop[r->n_stop++] = strdup(items[i]->valuestring);
        ST_ASSERT(r->stop[r->n_stop - 1]);
    }
    return 0;
}

// logit_bias: {"token id": bias in [-100, 100], ...}.
static int parse_logit_bias(struct server *s, const cJSON *root, struct srv_request *r, struct srv_error *e) {
    const cJSON *lb = member(root, "logit_bias");
    if (!lb) return 0;
    if (!cJSON_IsObject(lb)) return bad_type(e, "logit_bias", "an object", lb);
    const int n = cJSON_GetArraySize(lb), n_vocab = s->sess.model->hp.n_vocab;
    if (n > n_vocab)
        return srv_error_set(e, 400, BAD, "invalid_value", "logit_bias",
                             "'logit_bias' has %d entries, more than the vocabulary's %d", n, n_vocab);
    r->bias = st_xcalloc((size_t)(n ? n : 1), sizeof *r->bias);
    const cJSON *it;
    cJSON_ArrayForEach(it, lb) {
        char param[64];
        snprintf(param, sizeof param, "logit_bias.%.40s", it->string);
        char *end;
        long id = strtol(it->string, &end, 10);
        if (!*it->string || *end || id < 0 || id >= n_vocab)
            return srv_error_set(e, 400, BAD, "invalid_value", param,
                                 "'logit_bias' keys are token ids 0 to %d as strings, not '%.40s'",
                                 n_vocab - 1, it->string);
        if (!cJSON_IsNumber(it)) return bad_type(e, param, "a number", it);
        if (!(it->valuedouble >= -100 && it->valuedouble <= 100))
            return srv_error_set(e, 400, BAD, "invalid_value", param, "'%s': %g is out of range [-100, 100]",
                                 param, it->valuedouble);
        r->bias[r->n_bias++] = (struct srv_bias){(int32_t)id, (float)it->valuedouble};
    }
    return 0;
}

// Sampling, length, streaming and the neutral-only fields shared by both endpoints.
static int parse_common(struct server *s, const cJSON *root, struct srv_request *r, struct srv_error *e) {
    struct sampler_params *sp = &r->sp;
    *sp = s->cfg.sp;
    if (!s->cfg.seed_given) sp->seed = srv_random(s);
    double x = 0;
    long long n = 0;
    const char *str = NULL;
    int rc;
    if (get_string(root, "model", &str, e) < 0 || get_string(root, "user", &str, e) < 0) return -1;
    if ((rc = get_number(root, "temperature", 0, 2, &x, e)) < 0) return -1;
    if (rc) sp->temperature = (float)x;
    if ((rc = get_int(root, "top_k", 0, 1 << 30, &n, e)) < 0) return -1;
    if (rc) sp->top_k = (int)n;
    if ((rc = get_number(root, "top_p", 0, 1, &x, e)) < 0) return -1;
    if (rc && x > 0) sp->top_p = (float)x;
    if (rc && x == 0) { // the smallest set with probability ≥ 0: the most likely token
        sp->top_p = 1;
        sp->top_k = 1;
    }
    if ((rc = get_number(root, "min_p", 0, 1, &x, e)) < 0) return -1;
    if (rc) sp->min_p = (float)x;
    if ((rc = get_number(root, "repeat_penalty", 0.01, 100, &x, e)) < 0) return -1;
    if (rc) sp->repeat_penalty = (float)x;
    if ((rc = get_int(root, "repeat_last_n", 0, s->n_ctx, &n, e)) < 0) return -1;
    if (rc) sp->repeat_last_n = (int)n;
    if ((rc = get_int(root, "seed", -MAX_SAFE_INT, MAX_SAFE_INT, &n, e)) < 0) return -1;
    if (rc) sp->seed = n == -1 ? srv_random(s) : (uint64_t)n; // -1: random, as llama.cpp's server
    if (sampler_params_check(sp))
        return srv_error_set(e, 400, BAD, "invalid_value", NULL, "%s", st_last_error());

    // max_completion_tokens is the newer name of max_tokens
    r->max_tokens = r->kind == SRV_COMPLETION ? 16 : -1; // OpenAI's defaults
    const char *len_name = member(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    // larger values than the context holds are clamped to it (after the prompt)
    if ((rc = get_int(root, len_name, 1, MAX_SAFE_INT, &n, e)) < 0) return -1;
    if (rc) r->max_tokens = n > s->n_ctx ? s->n_ctx : (int)n;

    if (get_bool(root, "stream", &r->stream, e) < 0) return -1;
    const cJSON *so = member(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return bad_type(e, "stream_options", "an object", so);
        const cJSON *iu = member(so, "include_usage");
        if (iu && !cJSON_IsBool(iu)) return bad_type(e, "stream_options.include_usage", "a boolean", iu);
        r->include_usage = iu && cJSON_IsTrue(iu);
    }
    if (parse_stop(root, r, e)) return -1;

    r->n_choices = 1;
    if ((rc = get_int(root, "n", 1, SRV_MAX_CHOICES, &n, e)) < 0) return -1;
    if (rc) r->n_choices = (int)n;
    if ((rc = get_number(root, "presence_penalty", -2, 2, &x, e)) < 0) return -1;
    if (rc) r->presence_penalty = (float)x;
    if ((rc = get_number(root, "frequency_penalty", -2, 2, &x, e)) < 0) return -1;
    if (rc) r->frequency_penalty = (float)x;
    return parse_logit_bias(s, root, r, e);
}

// --- prompts --------------------------------------------------------------------------

// Concatenates the text parts of a content array (joined by newlines) into a
// malloc'd string; NULL with err for anything but text parts.
static char *content_parts(const cJSON *arr, int i, struct srv_error *e) {
    struct sbuf b = {0};
    sbuf_append(&b, "", 0);
    int k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, arr) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d].content[%d]", i, k++);
        const cJSON *type = member(part, "type"), *text = member(part, "text");
        if (!cJSON_IsObject(part)) {
            bad_type(e, param, "an object", part);
        } else if (!type || !cJSON_IsString(type)) {
            bad_type(e, param, "an object with a string 'type'", type ? type : part);
        } else if (strcmp(type->valuestring, "text")) {
            unsupported(e, param, "only parts of type 'text' are supported");
        } else if (!text || !cJSON_IsString(text)) {
            bad_type(e, param, "a text part with a string 'text'", text ? text : part);
        } else {
            if (b.len) sbuf_puts(&b, "\n");
            sbuf_puts(&b, text->valuestring);
            continue;
        }
        sbuf_free(&b);
        return NULL;
    }
    return b.p;
}

static int compile_grammar(const char *gbnf, const char *param, struct srv_request *r, struct srv_error *e);

static int parse_messages(struct server *s, const cJSON *root, struct srv_request *r, struct srv_error *e) {
    if (!s->have_chat)
        return srv_error_set(e, 400, BAD, "no_chat_template", "messages",
                             "%s; restart the server with --template NAME, or use "
                             "/v1/completions",
                             s->chat_error);
    const cJSON *msgs = member(root, "messages");
    if (!msgs)
        return srv_error_set(e, 400, BAD, "missing_required_parameter", "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return bad_type(e, "messages", "an array", msgs);
    const int n = cJSON_GetArraySize(msgs);
    if (n == 0)
        return srv_error_set(e, 400, BAD, "invalid_value", "messages",
                             "'messages' is empty: send at least one message");
    struct chat_message *cm = st_xcalloc((size_t)n, sizeof *cm);
    char **owned = st_xcalloc((size_t)n, sizeof *owned);
    struct srv_tools tools = {0};
    int rc = -1, i = 0;
    char param[64];
    if (srv_tools_request(root, s->fmt.kind, r, &tools, e)) goto out;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) {
            bad_type(e, param, "an object", m);
            goto out;
        }
        const cJSON *role = member(m, "role"), *content = member(m, "content");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!role) {
            srv_error_set(e, 400, BAD, "missing_required_parameter", param, "'%s' is required", param);
            goto out;
        }
        if (!cJSON_IsString(role)) {
            bad_type(e, param, "a string", role);
            goto out;
        }
        const char *rn = role->valuestring;
        if (!strcmp(rn, "developer")) rn = "system"; // OpenAI's newer name for it
        const bool tool_role = chat_has_tools(s->fmt.kind) && !strcmp(rn, "tool");
        if (strcmp(rn, "system") && strcmp(rn, "user") && strcmp(rn, "assistant") && !tool_role) {
            srv_error_set(e, 400, BAD, "invalid_value", param,
                          "'%s': unknown or unsupported role '%.40s' (system, developer, user, "
                          "assistant%s)",
                          param, rn, chat_has_tools(s->fmt.kind) ? ", tool" : "");
            goto out;
        }
        cm[i].role = rn;
        if (member(m, "function_call")) {
            snprintf(param, sizeof param, "messages[%d].function_call", i);
            unsupported(e, param, "'function_call' (deprecated) is not supported; use 'tool_calls'");
            goto out;
        }
        if (!strcmp(rn, "assistant") && srv_tools_message(m, i, n, s->fmt.kind, &tools, e)) goto out;
        const bool has_calls = tools.calls && tools.calls[i].n > 0;
        const cJSON *name = member(m, "name");
        if (name && !cJSON_IsString(name)) {
            snprintf(param, sizeof param, "messages[%d].name", i);
            bad_type(e, param, "a string", name);
            goto out;
        }
        snprintf(param, sizeof param, "messages[%d].content", i);
        if (!content && has_calls) { // an answer that only called tools
            cm[i].content = "";
        } else if (!content) {
            srv_error_set(e, 400, BAD, "missing_required_parameter", param, "'%s' is required", param);
            goto out;
        } else if (cJSON_IsString(content)) {
            cm[i].content = content->valuestring;
        } else if (cJSON_IsArray(content)) {
            if (!(owned[i] = content_parts(content, i, e))) goto out;
            cm[i].content = owned[i];
        } else {
            bad_type(e, param, "a string or an array of text parts", content);
            goto out;
        }
        i++;
    }
    // Template variables as vLLM and llama.cpp's server take them; a template
    // that does not read enable_thinking ignores it, as Jinja would.
    struct chat_format fmt = s->fmt;
    const cJSON *kw = member(root, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw)) {
        bad_type(e, "chat_template_kwargs", "an object", kw);
        goto out;
    }
    const cJSON *think = kw ? member(kw, "enable_thinking") : NULL;
    if (think && !cJSON_IsBool(think)) {
        bad_type(e, "chat_template_kwargs.enable_thinking", "a boolean", think);
        goto out;
    }
    if (think) fmt.enable_thinking = cJSON_IsTrue(think);
    char *text = chat_render_tools(&fmt, cm, srv_tools_calls(&tools, n), n, (const char *const *)tools.defs,
                                   tools.n_defs, true);
    r->n_prompt = text ? session_text_tokens(s->sess.model, text, &r->prompt) : -1;
    free(text);
    if (r->n_prompt < 0) {
        r->n_prompt = 0;
        srv_error_set(e, 400, BAD, "invalid_value", "messages", "%s", st_last_error());
        goto out;
    }
    if (tools.grammar) {
        if (r->grammar) {
            srv_error_set(e, 400, BAD, "invalid_value", "tool_choice",
                          "a required tool call cannot be combined with 'grammar' or "
                          "'response_format'");
            goto out;
        }
        if (compile_grammar(tools.grammar, "tools", r, e)) goto out;
    }
    rc = 0;
out:
    srv_tools_free(&tools);
    for (int k = 0; k < n; k++) free(owned[k]);
    free(owned);
    free(cm);
    return rc;
}

// Reads an array of token ids (each < n_vocab) into *ids (owned, also on an
// error), *n_ids of them.
static int prompt_ids(struct server *s, const cJSON *arr, const char *param, int32_t **ids, int *n_ids,
                      struct srv_error *e) {
    const int n = cJSON_GetArraySize(arr), n_vocab = s->sess.model->hp.n_vocab;
    *ids = st_xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    *n_ids = 0;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        char p[64];
        snprintf(p, sizeof p, "%s[%d]", param, k);
        double x = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!cJSON_IsNumber(it) || x != floor(x)) return bad_type(e, p, "a token id (integer)", it);
        if (!(x >= 0 && x < n_vocab))
            return srv_error_set(e, 400, BAD, "invalid_value", p,
                                 "'%s': token id %.17g is out of range [0, %d)", p, x, n_vocab);
        (*ids)[k++] = (int32_t)x;
    }
    *n_ids = k;
    return 0;
}

// One prompt or input v, a string or an array of token ids, into *ids (owned,
// also on an error; *n_ids of them); with text, its text appended there: the
// string as sent, or the ids decoded (special tokens as their text; a
// character cut in two becomes U+FFFD).
static int one_prompt(struct server *s, const cJSON *v, const char *param, const char *want, int32_t **ids,
                      int *n_ids, struct sbuf *text, struct srv_error *e) {
    *ids = NULL;
    *n_ids = 0;
    if (cJSON_IsString(v)) {
        *n_ids = session_text_tokens(s->sess.model, v->valuestring, ids);
        if (*n_ids < 0) {
            *n_ids = 0;
            return srv_error_set(e, 400, BAD, "invalid_value", param, "%s", st_last_error());
        }
        if (text) sbuf_append(text, v->valuestring, strlen(v->valuestring));
        return 0;
    }
    if (!cJSON_IsArray(v)) return bad_type(e, param, want, v);
    if (prompt_ids(s, v, param, ids, n_ids, e)) return -1;
    if (text) {
        char *dec = NULL;
        size_t len = 0;
        if (tokenizer_decode(s->sess.model->tok, *ids, *n_ids, true, &dec, &len))
            return srv_error_set(e, 400, BAD, "invalid_value", param, "%s", st_last_error());
        utf8_append_sanitized(text, dec, len); // ids may cut a character in two
        free(dec);
    }
    return 0;
}

// The prompt or prompts into r: "prompt" a string or an array of token ids, or
// an array of up to SRV_MAX_PROMPTS of those; each must leave the context room
// for an answer. With echo also their texts (one_prompt).
static int parse_prompt(struct server *s, const cJSON *root, bool echo, struct srv_request *r,
                        struct srv_error *e) {
    const cJSON *p = member(root, "prompt");
    if (!p) return srv_error_set(e, 400, BAD, "missing_required_parameter", "prompt", "'prompt' is required");
    const char *want = "a string, an array of token ids, or an array of those (several prompts)";
    const bool several =
        cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    const int n = several ? cJSON_GetArraySize(p) : 1;
    if (n > SRV_MAX_PROMPTS)
        return srv_error_set(e, 400, BAD, "invalid_value", "prompt",
                             "'prompt' holds %d prompts; one request takes at most %d", n, SRV_MAX_PROMPTS);
    r->n_sets = n;
    if (n > 1) {
        r->set_prompt = st_xcalloc((size_t)n, sizeof *r->set_prompt);
        r->set_n = st_xcalloc((size_t)n, sizeof *r->set_n);
    }
    struct sbuf text = {0};
    if (echo) r->echo_off = st_xcalloc((size_t)n + 1, sizeof *r->echo_off);
    const cJSON *it = several ? p->child : p;
    int rc = 0;
    for (int k = 0; k < n && !rc; k++, it = it->next) {
        char param[32] = "prompt";
        if (several) snprintf(param, sizeof param, "prompt[%d]", k);
        int32_t *ids = NULL;
        int m = 0;
        rc = one_prompt(s, it, param, want, &ids, &m, echo ? &text : NULL, e);
        if (!rc && m == 0)
            rc = srv_error_set(e, 400, BAD, "invalid_value", param, "the prompt is empty after tokenization");
        if (!rc && m >= s->n_ctx)
            rc = srv_error_set(e, 400, BAD, "context_length_exceeded", param,
                               "the prompt has %d tokens but the context holds %d (the server's -c), and at "
                               "least one must be left for the answer; shorten '%s'",
                               m, s->n_ctx, param);
        if (echo) r->echo_off[k + 1] = text.len;
        if (k == 0)
            r->prompt = ids, r->n_prompt = m;
        else
            r->set_prompt[k] = ids;
        if (n > 1) r->set_n[k] = m;
    }
    if (echo)
        r->echo = text.p ? text.p : st_xcalloc(1, 1); // empty texts too
    else
        sbuf_free(&text);
    return rc;
}

// Compiles GBNF text into r->grammar; a 400 naming param when it does not compile.
static int compile_grammar(const char *gbnf, const char *param, struct srv_request *r, struct srv_error *e) {
    if (grammar_parse(gbnf, &r->grammar))
        return srv_error_set(e, 400, BAD, "invalid_value", param, "'%s': %s", param, st_last_error());
    return 0;
}

// logprobs, and what constrains the text: response_format or grammar.
static int parse_output(const cJSON *root, enum srv_kind kind, struct srv_request *r, struct srv_error *e) {
    long long n = 0;
    bool b = false;
    int rc;
    r->logprobs = -1;
    if (kind == SRV_CHAT) {
        if ((rc = get_bool(root, "logprobs", &b, e)) < 0) return -1;
        if ((rc = get_int(root, "top_logprobs", 0, SRV_MAX_TOP, &n, e)) < 0) return -1;
        if (rc && !b)
            return srv_error_set(e, 400, BAD, "invalid_value", "top_logprobs",
                                 "'top_logprobs' needs 'logprobs' set to true");
        if (b) r->logprobs = rc ? (int)n : 0;
    } else {
        if ((rc = get_int(root, "logprobs", 0, SRV_MAX_TOP, &n, e)) < 0) return -1;
        if (rc) r->logprobs = (int)n;
    }
    const char *gbnf = NULL;
    if (get_string(root, "grammar", &gbnf, e) < 0) return -1;
    const cJSON *rf = member(root, "response_format");
    const char *type = "text";
    if (rf) {
        if (!cJSON_IsObject(rf)) return bad_type(e, "response_format", "an object", rf);
        const cJSON *t = member(rf, "type");
        if (!t || !cJSON_IsString(t)) return bad_type(e, "response_format.type", "a string", t ? t : rf);
        type = t->valuestring;
    }
    if (gbnf && strcmp(type, "text"))
        return srv_error_set(e, 400, BAD, "invalid_value", "grammar",
                             "give either 'grammar' or a 'response_format' other than text, not both");
    if (gbnf) return compile_grammar(gbnf, "grammar", r, e);
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) return compile_grammar(grammar_json_object, "response_format", r, e);
    if (strcmp(type, "json_schema"))
        return srv_error_set(e, 400, BAD, "invalid_value", "response_format.type",
                             "'response_format.type' must be text, json_object or json_schema, not "
                             "'%.40s'",
                             type);
    const cJSON *js = member(rf, "json_schema");
    if (!js || !cJSON_IsObject(js))
        return bad_type(e, "response_format.json_schema", "an object with a 'schema'", js ? js : rf);
    const cJSON *schema = member(js, "schema");
    if (!schema)
        return srv_error_set(e, 400, BAD, "missing_required_parameter", "response_format.json_schema.schema",
                             "'response_format.json_schema.schema' is required");
    char *text = cJSON_PrintUnformatted(schema);
    ST_ASSERT(text);
    char *g = json_schema_to_gbnf(text, strlen(text));
    free(text);
    if (!g)
        return srv_error_set(e, 400, BAD, "invalid_value", "response_format.json_schema.schema",
                             "the JSON schema cannot be enforced: %s", st_last_error());
    rc = compile_grammar(g, "response_format.json_schema.schema", r, e);
    free(g);
    return rc;
}

// Completion-only fields that must keep their neutral values, and echo (*echo;
// not with logprobs, which would need the prompt tokens' log-probabilities).
static int parse_neutral(const cJSON *root, enum srv_kind kind, const struct srv_request *r, bool *echo,
                         struct srv_error *e) {
    long long n = 0;
    int rc;
    const char *str = NULL;
    *echo = false;
    if (kind == SRV_COMPLETION) {
        if ((rc = get_bool(root, "echo", echo, e)) < 0) return -1;
        if (*echo && r->logprobs >= 0)
            return unsupported(e, "echo",
                               "echo with logprobs is not supported: the server does not compute the prompt "
                               "tokens' log-probabilities; leave out one of them");
        if ((rc = get_string(root, "suffix", &str, e)) < 0) return -1;
        if (rc && *str) return unsupported(e, "suffix", "not supported");
        if ((rc = get_int(root, "best_of", 1, 20, &n, e)) < 0) return -1;
        if (rc && n != 1) return unsupported(e, "best_of", "only best_of = 1 is supported");
    }
    return 0;
}

int srv_request_parse(struct server *s, enum srv_kind kind, const char *body, size_t len,
                      struct srv_request *r, struct srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    cJSON *root = parse_body(s, body, len, e);
    if (!root) return -1;
    int rc = -1;
    bool echo = false;
    if (parse_common(s, root, r, e) || parse_output(root, kind, r, e) ||
        parse_neutral(root, kind, r, &echo, e))
        goto out;
    r->n_sets = 1;
    if (kind == SRV_CHAT) {
        if (parse_messages(s, root, r, e)) goto out;
        if (r->n_prompt == 0) {
            srv_error_set(e, 400, BAD, "invalid_value", "messages", "the prompt is empty after tokenization");
            goto out;
        }
        if (r->n_prompt >= s->n_ctx) {
            srv_error_set(e, 400, BAD, "context_length_exceeded", "messages",
                          "the prompt has %d tokens but the context holds %d (the server's -c), "
                          "and at least one must be left for the answer; shorten the messages",
                          r->n_prompt, s->n_ctx);
            goto out;
        }
    } else if (parse_prompt(s, root, echo, r, e)) {
        goto out;
    }
    // clamped to what the context leaves after the shortest prompt (each
    // choice's generation stops at its own context's end)
    int shortest = r->n_prompt;
    for (int k = 1; k < r->n_sets; k++)
        if (r->set_n[k] < shortest) shortest = r->set_n[k];
    if (r->max_tokens > s->n_ctx - shortest) r->max_tokens = s->n_ctx - shortest;
    r->n_choices *= r->n_sets;
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) srv_request_free(r);
    return rc;
}

// --- /v1/embeddings ----------------------------------------------------------------

// One input (a string, or an array of token ids) into input slot k.
static int embedding_input(struct server *s, const cJSON *v, int k, const char *param, struct srv_request *r,
                           struct srv_error *e) {
    int32_t *ids = NULL;
    int n = 0;
    const int rc = one_prompt(s, v, param, "a string or an array of token ids", &ids, &n, NULL, e);
    r->inputs[k] = ids;
    r->n_input_tokens[k] = n;
    if (rc) return -1;
    if (n == 0) return srv_error_set(e, 400, BAD, "invalid_value", param, "'%s' is empty", param);
    if (n > s->n_ctx)
        return srv_error_set(e, 400, BAD, "context_length_exceeded", param,
                             "'%s' has %d tokens but the context holds %d (the server's -c)", param, n,
                             s->n_ctx);
    return 0;
}

int srv_embeddings_parse(struct server *s, const char *body, size_t len, struct srv_request *r,
                         struct srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = SRV_EMBEDDING;
    r->n_choices = 1;
    r->logprobs = -1;
    cJSON *root = parse_body(s, body, len, e);
    if (!root) return -1;
    int rc = -1;
    const char *str = NULL, *fmt = NULL;
    long long dims = 0;
    int drc;
    if (get_string(root, "model", &str, e) < 0 || get_string(root, "user", &str, e) < 0 ||
        get_string(root, "encoding_format", &fmt, e) < 0 ||
        (drc = get_int(root, "dimensions", 1, 1 << 20, &dims, e)) < 0)
        goto out;
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64")) {
        srv_error_set(e, 400, BAD, "invalid_value", "encoding_format",
                      "'encoding_format' must be float or base64, not '%.40s'", fmt);
        goto out;
    }
    r->base64 = fmt && !strcmp(fmt, "base64");
    if (drc && dims != s->sess.model->hp.n_embd) {
        unsupported(e, "dimensions", "the model's embeddings have a fixed size; leave it out");
        goto out;
    }
    if (s->pooling < 0) {
        srv_error_set(e, 400, BAD, "unsupported_parameter", NULL,
                      "this model's pooling type (%d in the file) is not supported; embeddings "
                      "are made by mean, first-token or last-token pooling",
                      -s->pooling);
        goto out;
    }
    const cJSON *in = member(root, "input");
    if (!in) {
        srv_error_set(e, 400, BAD, "missing_required_parameter", "input", "'input' is required");
        goto out;
    }
    // a list of inputs unless it is one string or one array of token ids
    const bool many = cJSON_IsArray(in) && in->child && !cJSON_IsNumber(in->child);
    const int n = many ? cJSON_GetArraySize(in) : 1;
    if (cJSON_IsArray(in) && !in->child) {
        srv_error_set(e, 400, BAD, "invalid_value", "input", "'input' is empty");
        goto out;
    }
    if (n > SRV_MAX_INPUTS) {
        srv_error_set(e, 400, BAD, "invalid_value", "input",
                      "'input' holds %d inputs; at most %d are allowed", n, SRV_MAX_INPUTS);
        goto out;
    }
    r->inputs = st_xcalloc((size_t)n, sizeof *r->inputs);
    r->n_input_tokens = st_xcalloc((size_t)n, sizeof *r->n_input_tokens);
    r->n_inputs = n;
    if (!many) {
        if (embedding_input(s, in, 0, "input", r, e)) goto out;
    } else {
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, in) {
            char param[32];
            snprintf(param, sizeof param, "input[%d]", k);
            if (embedding_input(s, it, k++, param, r, e)) goto out;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    if (rc) srv_request_free(r);
    return rc;
}

// --- /tokenize and /detokenize ----------------------------------------------------------

char *srv_tokenize(struct server *s, const char *body, size_t len, struct srv_error *e) {
    cJSON *root = parse_body(s, body, len, e);
    if (!root) return NULL;
    char *out = NULL;
    int32_t *ids = NULL;
    const char *content = NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    int rc = get_string(root, "content", &content, e);
    if (rc == 0) srv_error_set(e, 400, BAD, "missing_required_parameter", "content", "'content' is required");
    if (rc <= 0 || get_bool(root, "add_special", &add_special, e) < 0 ||
        get_bool(root, "parse_special", &parse_special, e) < 0 ||
        get_bool(root, "with_pieces", &with_pieces, e) < 0)
        goto done;
    int n = tokenizer_encode(s->sess.model->tok, content, strlen(content), add_special, parse_special, &ids);
    if (n < 0) {
        srv_error_set(e, 400, BAD, "invalid_value", "content", "%s", st_last_error());
        goto done;
    }
    cJSON *res = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(res, "tokens");
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", ids[i]);
        const int32_t prev = i ? ids[i - 1] : -1;
        int pl = tokenizer_piece(s->sess.model->tok, prev, ids[i], true, NULL, 0);
        ST_ASSERT(pl >= 0); // ids come from the tokenizer
        char *piece = st_xmalloc((size_t)pl + 1);
        tokenizer_piece(s->sess.model->tok, prev, ids[i], true, piece, (size_t)pl);
        piece[pl] = 0;
        if (utf8_valid(piece, (size_t)pl)) {
            cJSON_AddStringToObject(t, "piece", piece);
        } else { // part of a character: its bytes
            cJSON *bytes = cJSON_AddArrayToObject(t, "piece");
            for (int k = 0; k < pl; k++)
                cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[k]));
        }
        free(piece);
        cJSON_AddItemToArray(arr, t);
    }
    out = cJSON_PrintUnformatted(res);
    ST_ASSERT(out);
    cJSON_Delete(res);
done:
    free(ids);
    cJSON_Delete(root);
    return out;
}

char *srv_detokenize(struct server *s, const char *body, size_t len, struct srv_error *e) {
    cJSON *root = parse_body(s, body, len, e);
    if (!root) return NULL;
    char *out = NULL, *text = NULL;
    size_t text_len = 0;
    struct srv_request r = {0};
    const cJSON *toks = member(root, "tokens");
    if (!toks) {
        srv_error_set(e, 400, BAD, "missing_required_parameter", "tokens", "'tokens' is required");
        goto done;
    }
    if (!cJSON_IsArray(toks)) {
        bad_type(e, "tokens", "an array of token ids", toks);
        goto done;
    }
    if (prompt_ids(s, toks, "tokens", &r.prompt, &r.n_prompt, e)) goto done;
    if (tokenizer_decode(s->sess.model->tok, r.prompt, r.n_prompt, true, &text, &text_len)) {
        srv_error_set(e, 400, BAD, "invalid_value", "tokens", "%s", st_last_error());
        goto done;
    }
    struct sbuf clean = {0};
    utf8_append_sanitized(&clean, text, text_len); // ids may cut a character in two
    sbuf_append(&clean, "", 0);
    cJSON *res = cJSON_CreateObject();
    cJSON_AddStringToObject(res, "content", clean.p);
    sbuf_free(&clean);
    out = cJSON_PrintUnformatted(res);
    ST_ASSERT(out);
    cJSON_Delete(res);
done:
    free(text);
    srv_request_free(&r);
    cJSON_Delete(root);
    return out;
}
