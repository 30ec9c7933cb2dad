// server_tools.c: OpenAI tool calling on the chat route — tool definitions and
// earlier calls handed to the chat template (text/chat.h renders them for the
// families whose Jinja templates it reproduces), tool_choice "required" or a
// named function enforced by a grammar of the family's call syntax, and the
// calls parsed back out of the answer.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "text/grammar.h"
#include "util.h"

#define BAD "invalid_request_error"
#define MAX_TOOLS 128

static const cJSON *member(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int bad(struct srv_error *e, const char *param, const char *fmt, const char *arg) {
    return srv_error_set(e, 400, BAD, "invalid_value", param, fmt, param, arg);
}

void srv_tools_free(struct srv_tools *t) {
    for (int i = 0; i < t->n_defs; i++) free(t->defs[i]);
    free(t->defs);
    for (int i = 0; i < t->n_all; i++) {
        free((char *)t->all[i].name);
        free((char *)t->all[i].arguments);
    }
    free(t->all);
    free(t->calls);
    free(t->first);
    free(t->grammar);
    memset(t, 0, sizeof *t);
}

// The GBNF of one call of tool `def` (an OpenAI tool object) in Qwen's
// syntax, as rule `name`; its argument rules are prefixed by name too.
static int call_rule(struct sbuf *g, const cJSON *def, const char *name, struct srv_error *e,
                     const char *param) {
    const cJSON *fn = member(def, "function");
    const cJSON *params = member(fn, "parameters");
    char *schema = params ? cJSON_PrintUnformatted(params) : strdup("{\"type\":\"object\"}");
    ST_ASSERT(schema);
    char args[48];
    snprintf(args, sizeof args, "%s-args", name);
    char *rules = json_schema_to_gbnf_rules(schema, strlen(schema), args);
    free(schema);
    if (!rules)
        return srv_error_set(e, 400, BAD, "invalid_value", param,
                             "'%s.function.parameters' cannot be enforced for a required call: %s", param,
                             st_last_error());
    // the name as a JSON string inside a GBNF literal
    cJSON *ns = cJSON_CreateString(member(fn, "name")->valuestring);
    char *json_name = cJSON_PrintUnformatted(ns);
    cJSON_Delete(ns);
    sbuf_printf(g, "%s ::= \"<tool_call>\\n{\\\"name\\\": ", name);
    for (const char *p = json_name; *p; p++) {
        if (*p == '"' || *p == '\\')
            sbuf_printf(g, "\\%c", *p);
        else if ((unsigned char)*p < 0x20)
            sbuf_printf(g, "\\x%02X", (unsigned char)*p);
        else
            sbuf_append(g, p, 1);
    }
    sbuf_printf(g, ", \\\"arguments\\\": \" %s \"}\\n</tool_call>\"\n%s", args, rules);
    free(json_name);
    free(rules);
    return 0;
}

int srv_tools_request(const cJSON *root, enum chat_template kind, struct srv_request *r, struct srv_tools *t,
                      struct srv_error *e) {
    if (member(root, "functions"))
        return srv_error_set(e, 400, BAD, "unsupported_parameter", "functions",
                             "'functions' (deprecated) is not supported; use 'tools'");
    if (member(root, "function_call"))
        return srv_error_set(e, 400, BAD, "unsupported_parameter", "function_call",
                             "'function_call' (deprecated) is not supported; use 'tool_choice'");
    const cJSON *pt = member(root, "parallel_tool_calls");
    if (pt && !cJSON_IsBool(pt))
        return srv_error_set(e, 400, BAD, "invalid_type", "parallel_tool_calls",
                             "invalid type for 'parallel_tool_calls': expected a boolean");
    const cJSON *tools = member(root, "tools");
    const cJSON *tc = member(root, "tool_choice");
    if (tools && !cJSON_IsArray(tools))
        return srv_error_set(e, 400, BAD, "invalid_type", "tools",
                             "invalid type for 'tools': expected an array");
    const int n = tools ? cJSON_GetArraySize(tools) : 0;
    if (n > MAX_TOOLS)
        return srv_error_set(e, 400, BAD, "invalid_value", "tools", "'tools' holds %d tools; at most %d", n,
                             MAX_TOOLS);
    // tool_choice: none, auto, required, or {"type": "function", "function": {"name": ...}}
    const char *choice = n ? "auto" : "none", *named = NULL;
    if (tc && cJSON_IsString(tc)) {
        choice = tc->valuestring;
        if (strcmp(choice, "none") && strcmp(choice, "auto") && strcmp(choice, "required"))
            return bad(e, "tool_choice", "'%s' must be none, auto, required or a function, not '%.40s'",
                       choice);
    } else if (tc) {
        const cJSON *fn = member(tc, "function"), *name = fn ? member(fn, "name") : NULL;
        if (!cJSON_IsObject(tc) || !name || !cJSON_IsString(name))
            return srv_error_set(e, 400, BAD, "invalid_type", "tool_choice",
                                 "'tool_choice' must be a string or {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}");
        choice = "named";
        named = name->valuestring;
    }
    if (strcmp(choice, "none") && n == 0)
        return srv_error_set(e, 400, BAD, "invalid_value", "tool_choice",
                             "'tool_choice' is '%s' but the request has no 'tools'", choice);
    t->defs = st_xcalloc((size_t)(n ? n : 1), sizeof *t->defs);
    bool found = false;
    int i = 0;
    const cJSON *def;
    cJSON_ArrayForEach(def, tools) {
        char param[32];
        snprintf(param, sizeof param, "tools[%d]", i);
        const cJSON *type = member(def, "type"), *fn = member(def, "function");
        const cJSON *name = fn ? member(fn, "name") : NULL, *params = fn ? member(fn, "parameters") : NULL;
        if (!cJSON_IsObject(def) || !type || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return bad(e, param, "'%s' must be {\"type\": \"function\", \"function\": {...}}%s", "");
        if (!cJSON_IsObject(fn) || !name || !cJSON_IsString(name) || !name->valuestring[0])
            return bad(e, param, "'%s.function' must be an object with a non-empty 'name'%s", "");
        if (params && !cJSON_IsObject(params))
            return bad(e, param, "'%s.function.parameters' must be a JSON schema object%s", "");
        if (named && !strcmp(named, name->valuestring)) found = true;
        char *compact = cJSON_PrintUnformatted(def);
        ST_ASSERT(compact);
        t->defs[i] = chat_json_dumps(compact, strlen(compact));
        free(compact);
        ST_ASSERT(t->defs[i]);
        t->n_defs = ++i;
    }
    if (named && !found)
        return srv_error_set(e, 400, BAD, "invalid_value", "tool_choice",
                             "'tool_choice' names the function '%.60s', which is not in 'tools'", named);
    if (!strcmp(choice, "none")) { // the model is not told of the tools
        for (int k = 0; k < t->n_defs; k++) free(t->defs[k]);
        t->n_defs = 0;
        return 0;
    }
    if (!chat_has_tools(kind))
        return srv_error_set(e, 400, BAD, "unsupported_parameter", "tools",
                             "tool calling is not supported with the %s chat template (the qwen2.5 "
                             "and qwen3 templates have it); leave 'tools' out or set tool_choice "
                             "to none",
                             chat_template_name(kind));
    r->tools = chat_tool_syntax(kind);
    if (!strcmp(choice, "auto")) return 0;
    // required or named: the answer must be one call, of any tool or of the named one
    struct sbuf g = {0};
    sbuf_puts(&g, "root ::= ");
    int k = 0, alts = 0;
    cJSON_ArrayForEach(def, tools) {
        const char *name = member(member(def, "function"), "name")->valuestring;
        if (!named || !strcmp(named, name)) sbuf_printf(&g, "%scall%d", alts++ ? " | " : "", k);
        k++;
    }
    sbuf_puts(&g, "\n");
    k = 0;
    cJSON_ArrayForEach(def, tools) {
        const char *name = member(member(def, "function"), "name")->valuestring;
        char rule[16], param[32];
        snprintf(rule, sizeof rule, "call%d", k);
        snprintf(param, sizeof param, "tools[%d]", k++);
        if ((!named || !strcmp(named, name)) && call_rule(&g, def, rule, e, param)) {
            sbuf_free(&g);
            return -1;
        }
    }
    sbuf_puts(&g, grammar_json_primitives);
    t->grammar = g.p;
    return 0;
}

int srv_tools_message(const cJSON *m, int i, int n, enum chat_template kind, struct srv_tools *t,
                      struct srv_error *e) {
    const cJSON *calls = member(m, "tool_calls");
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!calls) return 0;
    if (!cJSON_IsArray(calls))
        return srv_error_set(e, 400, BAD, "invalid_type", param, "invalid type for '%s': expected an array",
                             param);
    if (!calls->child) return 0;
    if (!chat_has_tools(kind))
        return srv_error_set(e, 400, BAD, "unsupported_parameter", param,
                             "'%s': tool calls are not supported with the %s chat template", param,
                             chat_template_name(kind));
    if (!t->calls) {
        t->calls = st_xcalloc((size_t)n, sizeof *t->calls);
        t->first = st_xcalloc((size_t)n, sizeof *t->first);
    }
    const int k = cJSON_GetArraySize(calls);
    t->all = realloc(t->all, sizeof *t->all * (size_t)(t->n_all + k));
    ST_ASSERT(t->all);
    int first = t->n_all, j = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function", i, j++);
        const cJSON *fn = member(c, "function");
        const cJSON *name = fn ? member(fn, "name") : NULL, *args = fn ? member(fn, "arguments") : NULL;
        if (!name || !cJSON_IsString(name) || !args || !cJSON_IsString(args))
            return srv_error_set(e, 400, BAD, "invalid_value", param,
                                 "'%s' must have a string 'name' and 'arguments' (JSON text)", param);
        char *dumped = chat_json_dumps(args->valuestring, strlen(args->valuestring));
        if (!dumped)
            return srv_error_set(e, 400, BAD, "invalid_value", param, "'%s.arguments' is not valid JSON text",
                                 param);
        char *nm = strdup(name->valuestring);
        ST_ASSERT(nm);
        t->all[t->n_all++] = (struct chat_tool_call){nm, dumped};
    }
    t->calls[i] = (struct chat_calls){NULL, t->n_all - first}; // pointed at by srv_tools_calls
    t->first[i] = first;
    return 0;
}

const struct chat_calls *srv_tools_calls(struct srv_tools *t, int n) {
    if (!t->calls) return NULL;
    for (int i = 0; i < n; i++) t->calls[i].calls = t->calls[i].n ? t->all + t->first[i] : NULL;
    return t->calls;
}

char *srv_tools_parse(struct server *s, enum chat_tool_syntax syn, const char *text, size_t len) {
    char *calls = chat_tools_parse(syn, text, len);
    if (!calls) return NULL;
    cJSON *arr = cJSON_Parse(calls), *out = cJSON_CreateArray();
    free(calls);
    ST_ASSERT(arr);
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) {
        char id[40];
        srv_make_id(s, "call_", id, sizeof id);
        cJSON *call = cJSON_CreateObject();
        cJSON_AddStringToObject(call, "id", id);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(call, "function");
        cJSON_AddStringToObject(fn, "name", cJSON_GetObjectItem(c, "name")->valuestring);
        cJSON_AddStringToObject(fn, "arguments", cJSON_GetObjectItem(c, "arguments")->valuestring);
        cJSON_AddItemToArray(out, call);
    }
    cJSON_Delete(arr);
    char *res = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return res;
}
