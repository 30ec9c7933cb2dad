// chat_tools.c: tool calling around the chat templates — tool definitions
// printed as the templates' tojson prints them, and tool calls parsed from an
// answer in the syntax of the model's family.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_text.h"
#include "text/chat.h"
#include "util.h"

// --- json.dumps --------------------------------------------------------------------

static void dumps_string(struct sbuf *b, const char *s) {
    sbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            sbuf_puts(b, "\\\"");
            break;
        case '\\':
            sbuf_puts(b, "\\\\");
            break;
        case '\n':
            sbuf_puts(b, "\\n");
            break;
        case '\r':
            sbuf_puts(b, "\\r");
            break;
        case '\t':
            sbuf_puts(b, "\\t");
            break;
        case '\b':
            sbuf_puts(b, "\\b");
            break;
        case '\f':
            sbuf_puts(b, "\\f");
            break;
        default:
            if (*p < 0x20)
                sbuf_printf(b, "\\u%04x", *p);
            else
                sbuf_append(b, p, 1);
        }
    }
    sbuf_puts(b, "\"");
}

// Python's repr of a float: the shortest digits that read back the same.
static void dumps_number(struct sbuf *b, double x) {
    if (x == floor(x) && fabs(x) < 9.2e18) {
        sbuf_printf(b, "%lld", (long long)x);
        return;
    }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    sbuf_puts(b, buf);
}

static void dumps(struct sbuf *b, const cJSON *v) {
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        const bool obj = cJSON_IsObject(v);
        sbuf_puts(b, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) sbuf_puts(b, ", ");
            if (obj) {
                dumps_string(b, c->string);
                sbuf_puts(b, ": ");
            }
            dumps(b, c);
        }
        sbuf_puts(b, obj ? "}" : "]");
    } else if (cJSON_IsString(v)) {
        dumps_string(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        dumps_number(b, v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        sbuf_puts(b, cJSON_IsTrue(v) ? "true" : "false");
    } else {
        sbuf_puts(b, "null");
    }
}

char *chat_json_dumps(const char *json, size_t len) {
    cJSON *v = cJSON_ParseWithLength(json, len);
    if (!v) {
        st_fail("not valid JSON");
        return NULL;
    }
    struct sbuf b = {0};
    dumps(&b, v);
    cJSON_Delete(v);
    return b.p;
}

// --- parsing tool calls ---------------------------------------------------------------

enum chat_tool_syntax chat_tool_syntax(enum chat_template kind) {
    switch (kind) {
    case CHAT_TEMPLATE_QWEN25:
    case CHAT_TEMPLATE_QWEN3:
        return CHAT_TOOLS_QWEN;
    case CHAT_TEMPLATE_LLAMA31:
        return CHAT_TOOLS_LLAMA31;
    case CHAT_TEMPLATE_MISTRAL_V3:
    case CHAT_TEMPLATE_MISTRAL_V3_TEKKEN:
    case CHAT_TEMPLATE_MISTRAL_V7_TEKKEN:
        return CHAT_TOOLS_MISTRAL;
    default:
        return CHAT_TOOLS_NONE;
    }
}

// Adds {"name", "arguments"} from a call object whose arguments are under
// args_key; false when it is not one.
static bool add_call(cJSON *out, const cJSON *call, const char *args_key) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(call, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(call, args_key);
    if (!cJSON_IsObject(call) || !cJSON_IsString(name) || !name->valuestring[0]) return false;
    char *text = NULL;
    if (!args)
        text = strdup("{}");
    else if (cJSON_IsObject(args))
        text = cJSON_PrintUnformatted(args);
    else if (cJSON_IsString(args))
        text = strdup(args->valuestring); // already a JSON string
    if (!text) return false;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name->valuestring);
    cJSON_AddStringToObject(c, "arguments", text);
    free(text);
    cJSON_AddItemToArray(out, c);
    return true;
}

// text[a..b) without surrounding whitespace.
static void trim(const char *text, size_t *a, size_t *b) {
    while (*a < *b && strchr(" \t\r\n", text[*a])) (*a)++;
    while (*b > *a && strchr(" \t\r\n", text[*b - 1])) (*b)--;
}

static cJSON *parse_slice(const char *text, size_t a, size_t b) {
    trim(text, &a, &b);
    return cJSON_ParseWithLength(text + a, b - a);
}

char *chat_tools_parse(enum chat_tool_syntax syn, const char *text, size_t len) {
    cJSON *out = cJSON_CreateArray();
    bool ok = false;
    if (syn == CHAT_TOOLS_QWEN) {
        const char *open = "<tool_call>", *close = "</tool_call>";
        size_t pos = 0;
        ok = true;
        for (;;) {
            const char *o = memmem(text + pos, len - pos, open, strlen(open));
            if (!o) break;
            size_t a = (size_t)(o - text) + strlen(open);
            const char *c = memmem(text + a, len - a, close, strlen(close));
            size_t b = c ? (size_t)(c - text) : len; // an unclosed last call still counts
            cJSON *call = parse_slice(text, a, b);
            ok = call && add_call(out, call, "arguments");
            cJSON_Delete(call);
            if (!ok || !c) break;
            pos = b + strlen(close);
        }
    } else if (syn == CHAT_TOOLS_LLAMA31) {
        size_t a = 0, b = len;
        trim(text, &a, &b);
        if (b - a >= 14 && !memcmp(text + a, "<|python_tag|>", 14)) a += 14;
        cJSON *call = parse_slice(text, a, b);
        ok = call && (add_call(out, call, "parameters") ||
                      (cJSON_GetObjectItem(call, "arguments") && add_call(out, call, "arguments")));
        cJSON_Delete(call);
    } else if (syn == CHAT_TOOLS_MISTRAL) {
        size_t a = 0, b = len;
        trim(text, &a, &b);
        if (b - a >= 12 && !memcmp(text + a, "[TOOL_CALLS]", 12)) a += 12;
        cJSON *calls = parse_slice(text, a, b);
        ok = cJSON_IsArray(calls) && calls->child;
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) ok = ok && add_call(out, c, "arguments");
        cJSON_Delete(calls);
    }
    char *res = NULL;
    if (ok && out->child) {
        res = cJSON_PrintUnformatted(out);
        ST_ASSERT(res);
    }
    cJSON_Delete(out);
    return res;
}
