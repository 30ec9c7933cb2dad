// test_grammar.c: the GBNF parser, the byte-level matcher, JSON schemas
// compiled to grammars, and the logits mask over the real vocabulary.
//
// Expected answers are written by hand from the grammar's meaning (which
// strings a GBNF rule set accepts), never taken from the code. The mask is
// checked against a plain path that shares nothing with it but the grammar:
// for every token, a fresh state replays the text so far and then tries the
// token's bytes. Timings of the mask are printed (the per-token overhead).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test.h"
#include "text/grammar.h"
#include "text/tokenizer.h"
#include "util.h"

// Whether grammar text accepts s as a complete sentence (prefix: as a prefix).
static int accepts(const char *gbnf, const char *s, bool prefix_only) {
    struct grammar *g;
    if (grammar_parse(gbnf, &g)) return -2;
    struct grammar_state *st = grammar_state_new(g);
    int ok = grammar_state_accept(st, s, strlen(s)) == 0 && (prefix_only || grammar_state_complete(st));
    grammar_state_free(st);
    grammar_free(g);
    return ok;
}

static const struct {
    const char *gbnf, *text;
    int want; // 1 complete sentence, 0 refused
} cases[] = {
    {"root ::= \"abc\"", "abc", 1},
    {"root ::= \"abc\"", "ab", 0},
    {"root ::= \"abc\"", "abcd", 0},
    {"root ::= \"a\" | \"b\"", "b", 1},
    {"root ::= [a-c]+", "abccba", 1},
    {"root ::= [a-c]+", "", 0},
    {"root ::= [a-c]*", "", 1},
    {"root ::= [a-c]*", "abd", 0},
    {"root ::= [^a]", "b", 1},
    {"root ::= [^a]", "a", 0},
    {"root ::= [^a]", "\xc3\xa9", 1},         // é: two bytes, one character
    {"root ::= [^a]", "\xc3", 0},             // half a character is not a sentence
    {"root ::= [^a]", "\xed\xa0\x80", 0},     // a surrogate is not UTF-8
    {"root ::= [^a]", "\xf4\x90\x80\x80", 0}, // above U+10FFFF
    {"root ::= [^a]", "\xf0\x9f\x98\x80", 1}, // U+1F600
    {"root ::= [\\u00e0-\\u00ff]", "\xc3\xa9", 1},
    {"root ::= [\\u00e0-\\u00ff]", "\xc3\x9f", 0}, // U+00DF
    {"root ::= [\\u0800-\\uFFFF]", "\xe0\xa0\x80", 1},
    {"root ::= [\\u0800-\\uFFFF]", "\xdf\xbf", 0},
    {"root ::= .", "\xe2\x82\xac", 1},
    {"root ::= \"x\"{2,3}", "xx", 1},
    {"root ::= \"x\"{2,3}", "xxx", 1},
    {"root ::= \"x\"{2,3}", "x", 0},
    {"root ::= \"x\"{2,3}", "xxxx", 0},
    {"root ::= \"ab\"{2}", "abab", 1},
    {"root ::= \"ab\"{2}", "aba", 0},
    {"root ::= \"x\"{2,}", "xxxxxx", 1},
    {"root ::= (\"a\" | \"b\")? \"c\"", "c", 1},
    {"root ::= (\"a\" | \"b\")? \"c\"", "bc", 1},
    {"root ::= (\"a\" | \"b\")? \"c\"", "abc", 0},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+ # a number\n", "1,22,333", 1},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+\n", "1,,2", 0},
    {"root ::= (\n  \"a\"\n  | \"b\"\n)", "b", 1},
    {"root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\"", "\n\t\\\"A\xc3\xa9", 1},
    {"root ::= \"(\" root \")\" | \"\"", "((()))", 1},
    {"root ::= \"(\" root \")\" | \"\"", "(()", 0},
};

static void test_sentences(void) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = accepts(cases[i].gbnf, cases[i].text, false);
        CHECK(got == cases[i].want, "case %zu: %s on '%s': got %d (%s)", i, cases[i].gbnf, cases[i].text, got,
              got == -2 ? st_last_error() : "");
    }
    // a prefix that can still be completed is accepted as a prefix
    CHECK(accepts("root ::= \"abc\"", "ab", true) == 1, "prefix");
    CHECK(accepts("root ::= [^a]", "\xc3", true) == 1, "half a character as a prefix");
}

static void test_parse_errors(void) {
    static const struct {
        const char *gbnf, *want;
    } bad[] = {
        {"root ::= missing", "'missing' is used but not defined"},
        {"start ::= \"a\"", "no 'root' rule"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= x\nx ::= [a]? root", "left-recursive"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= \"abc", "unexpected end"},
        {"root ::= [z-a]", "end is below its start"},
        {"root ::= *", "nothing before it"},
        {"root ::= \"a\"{3,1}", "n below m"},
        {"root ::= (\"a\"", "without its ')'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root \"a\"", "'::=' is expected"},
        {"root ::= \"a\" )", "without its '('"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct grammar *g = NULL;
        int rc = grammar_parse(bad[i].gbnf, &g);
        CHECK(rc == -1 && g == NULL && strstr(st_last_error(), bad[i].want),
              "'%s': rc %d, message '%s' (want '%s')", bad[i].gbnf, rc, st_last_error(), bad[i].want);
        grammar_free(g);
    }
}

static int schema_accepts(const char *schema, const char *text) {
    char *gbnf = json_schema_to_gbnf(schema, strlen(schema));
    if (!gbnf) return -2;
    int r = accepts(gbnf, text, false);
    free(gbnf);
    return r;
}

static void test_json_schema(void) {
    static const struct {
        const char *schema, *text;
        int want;
    } sc[] = {
        {"{\"type\":\"integer\"}", "42", 1},
        {"{\"type\":\"integer\"}", "042", 0},
        {"{\"type\":\"integer\"}", "-7", 1},
        {"{\"type\":\"integer\"}", "4.5", 0},
        {"{\"type\":\"number\"}", "4.5e-3", 1},
        {"{\"type\":\"string\"}", "\"a\\\"b\\u00e9\"", 1},
        {"{\"type\":\"string\"}", "\"a\nb\"", 0}, // a raw control character
        {"{\"type\":\"string\",\"maxLength\":2}", "\"abc\"", 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", "\"ab\"", 1},
        {"{\"type\":\"boolean\"}", "true", 1},
        {"{\"type\":[\"string\",\"null\"]}", "null", 1},
        {"{\"enum\":[\"red\",\"green\",3]}", "\"green\"", 1},
        {"{\"enum\":[\"red\",\"green\",3]}", "\"blue\"", 0},
        {"{\"enum\":[\"red\",\"green\",3]}", "3", 1},
        {"{\"const\":{\"a\":1}}", "{\"a\":1}", 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", "[1, 2,3]", 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", "[]", 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", "[1,\"x\"]", 0},
        {"{\"type\":\"array\",\"minItems\":2,\"maxItems\":3}", "[1]", 0},
        {"{\"type\":\"array\",\"minItems\":2,\"maxItems\":3}", "[1,2,3]", 1},
        {"{\"type\":\"array\",\"minItems\":2,\"maxItems\":3}", "[1,2,3,4]", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
         "{\"a\": 1, \"b\": \"x\"}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
         "{\"b\": \"x\"}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
         "{\"a\": 1}", 0}, // b is required
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
         "{\"b\": \"x\", \"c\": 1}", 0}, // no additional properties
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\": 1, \"z\": [true]}",
         1}, // additional properties allowed by default
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":"
         "false}",
         "{}", 1},
        {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"object\",\"properties\":{\"q\":{"
         "\"type\":\"null\"}},\"required\":[\"q\"]}},\"required\":[\"p\"]}",
         "{\"p\": {\"q\": null}}", 1},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#/"
         "$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"next\"],\"additionalProperties\":false}},"
         "\"$ref\":\"#/$defs/n\"}",
         "{\"next\": {\"next\": null}}", 1},
        {"{\"type\":\"object\",\"title\":\"T\",\"description\":\"d\"}", "{\"x\": 1}", 1},
        {"{\"type\":\"integer\"}", "   42", 0}, // more than one space before the value
        {"{\"type\":\"integer\"}", " 42", 1},
    };
    for (size_t i = 0; i < sizeof sc / sizeof *sc; i++) {
        int got = schema_accepts(sc[i].schema, sc[i].text);
        CHECK(got == sc[i].want, "schema %zu %s on '%s': got %d (%s)", i, sc[i].schema, sc[i].text, got,
              got == -2 ? st_last_error() : "");
    }
    static const struct {
        const char *schema, *want;
    } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"a+\"}", "'pattern' is not supported"},
        {"{\"type\":\"string\",\"format\":\"date\"}", "'format' is not supported"},
        {"{\"type\":\"integer\",\"minimum\":3}", "'minimum' is not supported"},
        {"{\"type\":\"wat\"}", "unknown type 'wat'"},
        {"{\"$ref\":\"#/nowhere\"}", "does not name"},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "as a schema"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'b' is not in"},
        {"[1]", "must be an object"},
        {"{", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *g = json_schema_to_gbnf(bad[i].schema, strlen(bad[i].schema));
        CHECK(!g && strstr(st_last_error(), bad[i].want), "%s: '%s' (want '%s')", bad[i].schema,
              g ? "compiled" : st_last_error(), bad[i].want);
        free(g);
    }
    CHECK(accepts(grammar_json_object, "{\"a\": [1, {\"b\": null}], \"c\": \"d\"}", false) == 1,
          "json_object");
    CHECK(accepts(grammar_json_object, "[1]", false) == 0, "json_object takes an array");
}

// The mask against a fresh state per token, at several points of a JSON text.
static void test_mask_real_vocab(void) {
    const char *path = test_model_path();
    if (!path) {
        printf("    skip: no test model (STRATA_TEST_MODEL)\n");
        return;
    }
    struct model *m;
    if (model_load(path, &m)) {
        CHECK(0, "model_load: %s", st_last_error());
        return;
    }
    const int n = tokenizer_n_vocab(m->tok);
    double t0 = st_time_s();
    struct grammar_vocab *v = grammar_vocab_new(m->tok);
    printf("    vocabulary trie of %d tokens built in %.1f ms\n", n, (st_time_s() - t0) * 1e3);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                         "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{"
                         "\"enum\":[\"x\",\"yz\"]}}},\"required\":[\"name\",\"age\",\"tags\"],"
                         "\"additionalProperties\":false}";
    char *gbnf = json_schema_to_gbnf(schema, strlen(schema));
    struct grammar *g = NULL;
    CHECK(gbnf && grammar_parse(gbnf, &g) == 0, "compile: %s", st_last_error());
    free(gbnf);
    if (!g) goto out;
    // prefixes of one valid answer: each point is a different grammar context
    const char *answer = "{\"name\": \"Ann \xc3\xa9\", \"age\": 42, \"tags\": [\"yz\"]}";
    const int cuts[] = {0, 1, 3, 9, 12, 15, 25, 26, 38, 41, (int)strlen(answer)};
    float *logits = malloc(sizeof(float) * (size_t)n);
    double t_mask = 0;
    int n_mask = 0;
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        struct grammar_state *s = grammar_state_new(g);
        CHECK(grammar_state_accept(s, answer, (size_t)cuts[c]) == 0, "prefix %d refused", cuts[c]);
        for (int rep = 0; rep < 3; rep++) { // the first walk fills the step cache
            for (int i = 0; i < n; i++) logits[i] = 0;
            double t = st_time_s();
            grammar_mask(s, v, logits);
            if (rep > 0) t_mask += st_time_s() - t, n_mask++;
        }
        int allowed = 0, wrong = 0;
        char buf[512];
        for (int id = 0; id < n; id++) {
            struct grammar_state *f = grammar_state_new(g);
            grammar_state_accept(f, answer, (size_t)cuts[c]);
            bool ok;
            if (tokenizer_is_eog(m->tok, id)) {
                ok = grammar_state_complete(f);
            } else {
                int len = tokenizer_piece(m->tok, tokenizer_find(m->tok, "a"), id, false, buf, sizeof buf);
                ok = len > 0 && len <= (int)sizeof buf && grammar_state_accept(f, buf, (size_t)len) == 0;
            }
            grammar_state_free(f);
            allowed += ok;
            if (ok != (logits[id] != -INFINITY) && wrong++ < 3)
                CHECK(0, "cut %d token %d: mask says %s, replay says %s", cuts[c], id,
                      logits[id] != -INFINITY ? "allowed" : "refused", ok ? "allowed" : "refused");
        }
        printf("    after %2d bytes: %5d of %d tokens allowed\n", cuts[c], allowed, n);
        grammar_state_free(s);
    }
    printf("    mask: %.2f ms per token (mean of %d warm masks over %d tokens)\n", t_mask / n_mask * 1e3,
           n_mask, n);
    free(logits);
out:
    grammar_free(g);
    grammar_vocab_free(v);
    model_free(m);
}

int main(void) {
    RUN(test_sentences);
    RUN(test_parse_errors);
    RUN(test_json_schema);
    RUN(test_mask_real_vocab);
    TEST_END();
}
