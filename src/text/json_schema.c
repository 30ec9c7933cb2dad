// json_schema.c: JSON schemas compiled to GBNF (grammar.h says what is
// supported). Each schema node becomes a rule named after its path; shared
// rules (value, string, number, ...) are written once at the end.
//
// Whitespace between tokens is at most one space, or a newline and up to 20
// spaces or tabs of indentation (as llama.cpp's converter bounds it): a small
// model must not be able to fill its answer with blank lines. Numbers are
// bounded too (16 integer digits, 16 fraction digits, 3 exponent digits).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_text.h"
#include "text/grammar.h"
#include "util.h"

#define PRIMITIVES                                                                                           \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"                                                                \
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"                \
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"                                                         \
    "json-int ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n"                                                      \
    "json-number ::= json-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"                               \
    "json-bool ::= \"true\" | \"false\"\n"                                                                   \
    "json-null ::= \"null\"\n"                                                                               \
    "json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null\n"          \
    "json-object ::= \"{\" ws (json-member (\",\" ws json-member)*)? \"}\" ws\n"                             \
    "json-member ::= json-string ws \":\" ws json-value ws\n"                                                \
    "json-array ::= \"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\" ws\n"

const char grammar_json_object[] = "root ::= ws json-object\n" PRIMITIVES;
const char grammar_json_primitives[] = PRIMITIVES;

struct conv {
    struct sbuf out;      // rules written so far
    const char *refs[64]; // $ref targets given a rule (ref-<i>), so recursion ends
    int n_refs;
    const cJSON *root; // for $ref
    char err[256];
    int n_rules;
    int depth;
    const char *prefix; // of every rule name
};

static int fail(struct conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct conv *c, const char *path, const char *fmt, ...) {
    if (c->err[0]) return -1;
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, sizeof c->err, "schema at '%.60s': %s", path, msg);
    return -1;
}

// Writes s as a GBNF literal.
static void put_literal(struct sbuf *b, const char *s) {
    sbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            sbuf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            sbuf_printf(b, "\\x%02X", *p);
        else
            sbuf_append(b, p, 1);
    }
    sbuf_puts(b, "\"");
}

// A JSON value written as the text the model must produce (compact JSON).
static void put_json_literal(struct sbuf *b, const cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    ST_ASSERT(text);
    put_literal(b, text);
    free(text);
}

static int node(struct conv *c, const cJSON *s, const char *path, char *name, size_t cap);

static const char *const ignored_keys[] = {"title",    "description", "default",    "examples",    "$schema",
                                           "$id",      "$comment",    "$defs",      "definitions", "strict",
                                           "readOnly", "writeOnly",   "deprecated", "nullable",    NULL};
static const char *const known_keys[] = {"type",      "properties", "required", "additionalProperties",
                                         "items",     "minItems",   "maxItems", "minLength",
                                         "maxLength", "enum",       "const",    "anyOf",
                                         "oneOf",     "$ref",       NULL};

static bool in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

static int get_count(struct conv *c, const cJSON *s, const char *key, const char *path, int dflt, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1000 ||
        v->valuedouble != floor(v->valuedouble))
        return fail(c, path, "'%s' must be a whole number from 0 to 1000", key);
    *out = (int)v->valuedouble;
    return 0;
}

// The rule for one type name of s (which may carry that type's keywords).
static int type_rule(struct conv *c, const cJSON *s, const char *type, const char *path, struct sbuf *body) {
    if (!strcmp(type, "string")) {
        int lo, hi;
        if (get_count(c, s, "minLength", path, 0, &lo) || get_count(c, s, "maxLength", path, -1, &hi))
            return -1;
        if (lo == 0 && hi < 0) {
            sbuf_puts(body, "json-string");
        } else {
            if (hi >= 0 && hi < lo) return fail(c, path, "maxLength is below minLength");
            if (hi >= 0)
                sbuf_printf(body, "\"\\\"\" json-char{%d,%d} \"\\\"\"", lo, hi);
            else
                sbuf_printf(body, "\"\\\"\" json-char{%d,} \"\\\"\"", lo);
        }
    } else if (!strcmp(type, "number")) {
        sbuf_puts(body, "json-number");
    } else if (!strcmp(type, "integer")) {
        sbuf_puts(body, "json-int");
    } else if (!strcmp(type, "boolean")) {
        sbuf_puts(body, "json-bool");
    } else if (!strcmp(type, "null")) {
        sbuf_puts(body, "json-null");
    } else if (!strcmp(type, "array")) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        char item[64] = "json-value";
        char sub[200];
        snprintf(sub, sizeof sub, "%s/items", path);
        if (items && node(c, items, sub, item, sizeof item)) return -1;
        int lo, hi;
        if (get_count(c, s, "minItems", path, 0, &lo) || get_count(c, s, "maxItems", path, -1, &hi))
            return -1;
        if (hi >= 0 && hi < lo) return fail(c, path, "maxItems is below minItems");
        // the first item, then ("," item) for the others
        char more[32];
        const int min_more = lo > 1 ? lo - 1 : 0;
        if (hi < 0)
            snprintf(more, sizeof more, "{%d,}", min_more);
        else
            snprintf(more, sizeof more, "{%d,%d}", min_more, hi > 0 ? hi - 1 : 0);
        if (hi == 0)
            sbuf_puts(body, "\"[\" ws \"]\"");
        else if (lo == 0)
            sbuf_printf(body, "\"[\" ws (%s ws (\",\" ws %s ws)%s)? \"]\"", item, item, more);
        else
            sbuf_printf(body, "\"[\" ws %s ws (\",\" ws %s ws)%s \"]\"", item, item, more);
    } else if (!strcmp(type, "object")) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        if (props && !cJSON_IsObject(props)) return fail(c, path, "'properties' must be an object");
        if (req && !cJSON_IsArray(req)) return fail(c, path, "'required' must be an array");
        if (ap && !cJSON_IsBool(ap))
            return fail(c, path,
                        "additionalProperties as a schema is not supported (only true "
                        "or false)");
        const bool extra = !ap || cJSON_IsTrue(ap);
        if (!props && extra) {
            sbuf_puts(body, "json-object");
            return 0;
        }
        int n = props ? cJSON_GetArraySize(props) : 0;
        if (n > 64) return fail(c, path, "more than 64 properties");
        // every required name must be a property
        const cJSON *r;
        cJSON_ArrayForEach(r, req) {
            if (!cJSON_IsString(r)) return fail(c, path, "'required' must hold strings");
            if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
                return fail(c, path, "the required property '%.60s' is not in 'properties'", r->valuestring);
        }
        // kv rules, then T_i(first) chains: T_i = sep kv_i T_{i+1}(false) [| T_{i+1}(first)]
        char kv[64][64];
        bool required[64];
        int i = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            char sub[200];
            snprintf(sub, sizeof sub, "%s/properties/%s", path, p->string);
            char val[64];
            if (node(c, p, sub, val, sizeof val)) return -1;
            snprintf(kv[i], sizeof kv[i], "%sr%d", c->prefix, c->n_rules++);
            sbuf_printf(&c->out, "%s ::= ", kv[i]);
            cJSON *ks = cJSON_CreateString(p->string);
            put_json_literal(&c->out, ks);
            cJSON_Delete(ks);
            sbuf_printf(&c->out, " ws \":\" ws %s ws\n", val);
            required[i] = false;
            cJSON_ArrayForEach(r, req) if (!strcmp(r->valuestring, p->string)) required[i] = true;
            i++;
        }
        const int base = c->n_rules;
        c->n_rules += 2 * (n + 1);
        // rule T_i(first) is r<base + 2i + first>
        for (int k = n; k >= 0; k--) {
            for (int first = 0; first <= 1; first++) {
                sbuf_printf(&c->out, "%sr%d ::= ", c->prefix, base + 2 * k + first);
                const char *sep = first ? "" : "\",\" ws ";
                if (k == n) {
                    if (extra)
                        sbuf_printf(&c->out, "(%sjson-member (\",\" ws json-member)*)?\n", sep);
                    else
                        sbuf_puts(&c->out, "\"\"\n");
                    continue;
                }
                sbuf_printf(&c->out, "%s%s %sr%d", sep, kv[k], c->prefix, base + 2 * (k + 1));
                if (!required[k]) sbuf_printf(&c->out, " | %sr%d", c->prefix, base + 2 * (k + 1) + first);
                sbuf_puts(&c->out, "\n");
            }
        }
        sbuf_printf(body, "\"{\" ws %sr%d \"}\"", c->prefix, base + 1);
    } else {
        return fail(c, path, "unknown type '%.40s'", type);
    }
    return 0;
}

// Writes the rule for schema s; puts its name in name.
static int node(struct conv *c, const cJSON *s, const char *path, char *name, size_t cap) {
    if (++c->depth > 64) return fail(c, path, "schemas nested more than 64 deep (or a $ref cycle)");
    struct sbuf body = {0};
    int rc = -1;
    if (cJSON_IsBool(s)) { // true: anything; false: nothing can match
        if (cJSON_IsFalse(s)) {
            fail(c, path, "the schema false matches nothing");
            goto out;
        }
        snprintf(name, cap, "json-value");
        rc = 0;
        goto out;
    }
    if (!cJSON_IsObject(s)) {
        fail(c, path, "a schema must be an object");
        goto out;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (!in_list(k->string, known_keys) && !in_list(k->string, ignored_keys)) {
            fail(c, path, "the keyword '%.40s' is not supported", k->string);
            goto out;
        }
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ref) {
        const char *r = cJSON_IsString(ref) ? ref->valuestring : "";
        const char *pre = !strncmp(r, "#/$defs/", 8)          ? "$defs"
                          : !strncmp(r, "#/definitions/", 14) ? "definitions"
                                                              : NULL;
        const cJSON *defs = pre ? cJSON_GetObjectItemCaseSensitive(c->root, pre) : NULL;
        const cJSON *target = defs ? cJSON_GetObjectItemCaseSensitive(defs, strchr(r + 2, '/') + 1) : NULL;
        if (!target) {
            fail(c, path, "$ref '%.60s' does not name an entry of #/$defs or #/definitions", r);
            goto out;
        }
        int i = 0;
        while (i < c->n_refs && strcmp(c->refs[i], r)) i++;
        if (i == c->n_refs) { // first use: the rule ref-<i> is written once
            if (i == 64) {
                fail(c, path, "more than 64 different $ref targets");
                goto out;
            }
            c->refs[c->n_refs++] = r;
            char sub[64];
            if (node(c, target, r, sub, sizeof sub)) goto out;
            sbuf_printf(&c->out, "%sref-%d ::= %s\n", c->prefix, i, sub);
        }
        sbuf_printf(&body, "%sref-%d", c->prefix, i);
    } else if (cn) {
        put_json_literal(&body, cn);
    } else if (en) {
        if (!cJSON_IsArray(en) || !en->child) {
            fail(c, path, "'enum' must be a non-empty array");
            goto out;
        }
        const cJSON *v;
        cJSON_ArrayForEach(v, en) {
            if (v != en->child) sbuf_puts(&body, " | ");
            put_json_literal(&body, v);
        }
    } else if (any) {
        if (!cJSON_IsArray(any) || !any->child) {
            fail(c, path, "'anyOf'/'oneOf' must be a non-empty array");
            goto out;
        }
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, any) {
            char sub[200], alt[64];
            snprintf(sub, sizeof sub, "%s/anyOf/%d", path, i);
            if (node(c, v, sub, alt, sizeof alt)) goto out;
            sbuf_printf(&body, "%s%s", i++ ? " | " : "", alt);
        }
    } else if (!type) {
        sbuf_puts(&body, "json-value");
    } else if (cJSON_IsString(type)) {
        if (type_rule(c, s, type->valuestring, path, &body)) goto out;
    } else if (cJSON_IsArray(type) && type->child) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t)) {
                fail(c, path, "'type' must be a string or an array of strings");
                goto out;
            }
            if (t != type->child) sbuf_puts(&body, " | ");
            if (type_rule(c, s, t->valuestring, path, &body)) goto out;
        }
    } else {
        fail(c, path, "'type' must be a string or an array of strings");
        goto out;
    }
    snprintf(name, cap, "%sr%d", c->prefix, c->n_rules++);
    sbuf_printf(&c->out, "%s ::= %s\n", name, body.p);
    rc = 0;
out:
    sbuf_free(&body);
    c->depth--;
    return rc;
}

char *json_schema_to_gbnf_rules(const char *json, size_t len, const char *prefix) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        st_fail("the schema is not valid JSON");
        return NULL;
    }
    struct conv c = {.root = root, .prefix = prefix};
    char top[64];
    if (node(&c, root, "#", top, sizeof top)) {
        cJSON_Delete(root);
        sbuf_free(&c.out);
        st_fail("%s", c.err);
        return NULL;
    }
    cJSON_Delete(root);
    struct sbuf g = {0};
    sbuf_printf(&g, "%s ::= %s\n%s", prefix, top, c.out.p ? c.out.p : "");
    sbuf_free(&c.out);
    return g.p;
}

char *json_schema_to_gbnf(const char *json, size_t len) {
    char *rules = json_schema_to_gbnf_rules(json, len, "s-");
    if (!rules) return NULL;
    struct sbuf g = {0};
    sbuf_printf(&g, "root ::= ws s-\n%s" PRIMITIVES, rules);
    free(rules);
    return g.p;
}
