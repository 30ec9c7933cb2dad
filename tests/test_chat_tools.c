// test_chat_tools.c: tool calling around the chat templates — tool
// definitions, calls and results rendered as the real Qwen2.5 and Qwen3
// templates render them (tests/fixtures/chat_tools_*.txt, written by
// tests/reference/chat_reference.py with Jinja), tojson's printing, and tool
// calls parsed out of answers in each family's syntax.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/chat.h"
#include "util.h"

static char *unhex(const char *h) {
    size_t n = strcmp(h, "-") == 0 ? 0 : strlen(h) / 2;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        s[i] = (char)v;
    }
    s[n] = '\0';
    return s;
}

#define MAX_ITEMS 16

struct tcase {
    int add_gen, n_msgs, n_tools, n_calls;
    char *tools[MAX_ITEMS];
    struct chat_message msgs[MAX_ITEMS];
    struct chat_calls calls[MAX_ITEMS];
    struct chat_tool_call call[MAX_ITEMS];
    char *expect;
    bool raises;
};

static void tcase_free(struct tcase *c) {
    for (int i = 0; i < c->n_tools; i++) free(c->tools[i]);
    for (int i = 0; i < c->n_msgs; i++) {
        free((char *)c->msgs[i].role);
        free((char *)c->msgs[i].content);
    }
    for (int i = 0; i < c->n_calls; i++) {
        free((char *)c->call[i].name);
        free((char *)c->call[i].arguments);
    }
    free(c->expect);
    memset(c, 0, sizeof *c);
}

// Renders one case and compares it with Jinja's text; returns 1 when equal.
static int run_case(const struct chat_format *fmt, struct tcase *c, const char *name, int k) {
    char *got = chat_render_tools(fmt, c->msgs, c->calls, c->n_msgs, (const char *const *)c->tools,
                                  c->n_tools, c->add_gen != 0);
    int ok = c->raises ? got == NULL : got && !strcmp(got, c->expect);
    CHECK(ok, "%s case %d: %s\n      want: %s\n      got:  %s", name, k, ok ? "" : "differs",
          c->raises ? "(raises)" : c->expect, got ? got : st_last_error());
    free(got);
    return ok;
}

static void check_fixture(const char *name, enum chat_template family) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/chat_tools_%s.txt", name);
    FILE *f = fopen(path, "r");
    CHECK(f, "cannot read %s", path);
    if (!f) return;
    struct chat_format fmt;
    CHECK(chat_format_by_name(chat_template_name(family), &fmt) == 0, "%s", st_last_error());
    static char line[1 << 16];
    struct tcase c = {0};
    int n_cases = 0, n_equal = 0, msg = -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char key[16], a[8192], b[8192];
        int n = 0;
        if (line[0] == '#' || sscanf(line, "%15s", key) != 1) continue;
        if (!strcmp(key, "case")) {
            tcase_free(&c);
            msg = -1;
            CHECK(sscanf(line, "case %d %d %d", &c.add_gen, &c.n_msgs, &c.n_tools) == 3, "%s", line);
            ST_ASSERT(c.n_msgs <= MAX_ITEMS && c.n_tools <= MAX_ITEMS);
            c.n_msgs = c.n_tools = 0; // counted again as they are read
        } else if (!strcmp(key, "tool") && sscanf(line, "tool %8191s", a) == 1) {
            char *compact = unhex(a);
            c.tools[c.n_tools] = chat_json_dumps(compact, strlen(compact)); // as tojson prints it
            CHECK(c.tools[c.n_tools], "tool JSON: %s", st_last_error());
            c.n_tools++;
            free(compact);
        } else if (!strcmp(key, "msg") && sscanf(line, "msg %63s %8191s %d", b, a, &n) == 3) {
            msg = c.n_msgs++;
            c.msgs[msg].role = strdup(b);
            c.msgs[msg].content = unhex(a);
            c.calls[msg] = (struct chat_calls){c.call + c.n_calls, n};
        } else if (!strcmp(key, "call") && sscanf(line, "call %8191s %8191s", a, b) == 2) {
            char *args = unhex(b);
            c.call[c.n_calls].name = unhex(a);
            c.call[c.n_calls].arguments = chat_json_dumps(args, strlen(args));
            c.n_calls++;
            free(args);
        } else if (!strcmp(key, "expect") || !strcmp(key, "raises")) {
            c.raises = key[0] == 'r';
            if (!c.raises) c.expect = unhex(line + 7);
            n_equal += run_case(&fmt, &c, name, n_cases++);
        }
    }
    tcase_free(&c);
    fclose(f);
    CHECK(n_cases >= 10, "%s: only %d cases", name, n_cases);
    printf("    %-18s %d of %d cases byte-equal to Jinja\n", name, n_equal, n_cases);
}

static void test_fixtures(void) {
    check_fixture("qwen2_5_instruct", CHAT_TEMPLATE_QWEN25);
    check_fixture("qwen3", CHAT_TEMPLATE_QWEN3);
}

static void test_refusals(void) {
    struct chat_format fmt;
    chat_format_by_name("chatml", &fmt);
    const char *tools[] = {"{\"type\": \"function\"}"};
    struct chat_message msgs[] = {{"user", "hi"}, {"tool", "42"}};
    char *r = chat_render_tools(&fmt, msgs, NULL, 1, tools, 1, true);
    CHECK(!r && strstr(st_last_error(), "not supported with the chatml"), "chatml took tools: %s",
          r ? r : st_last_error());
    free(r);
    r = chat_render_tools(&fmt, msgs, NULL, 2, NULL, 0, true);
    CHECK(!r && strstr(st_last_error(), "role \"tool\""), "chatml took a tool message");
    free(r);
    const struct chat_tool_call call = {"f", "{}"};
    struct chat_calls calls[] = {{NULL, 0}, {&call, 1}};
    struct chat_message conv[] = {{"user", "hi"}, {"assistant", ""}};
    r = chat_render_tools(&fmt, conv, calls, 2, NULL, 0, true);
    CHECK(!r && strstr(st_last_error(), "tool calls"), "chatml took a tool call");
    free(r);
    chat_format_by_name("qwen2.5", &fmt);
    struct chat_calls user_calls[] = {{&call, 1}};
    r = chat_render_tools(&fmt, conv, user_calls, 1, NULL, 0, true);
    CHECK(!r, "a user message with tool calls was rendered");
    free(r);
}

// Expected texts written by hand from Python's json.dumps(..., ensure_ascii=False),
// except the last two lines' -0.0 and 2^53 + 1, which show the documented
// limit: once parsed, an integral number prints as an integer of double precision.
static void test_json_dumps(void) {
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"{\"a\":1,\"b\":[true,false,null],\"c\":{}}", "{\"a\": 1, \"b\": [true, false, null], \"c\": {}}"},
        {"[]", "[]"},
        {"{\"z\":1,\"a\":2}", "{\"z\": 1, \"a\": 2}"}, // key order kept
        {"\"caf\\u00e9 \\u65e5\"", "\"caf\xc3\xa9 \xe6\x97\xa5\""},
        {"\"q\\\"b\\\\n\\n\\t\\u0001\\u001f/\"", "\"q\\\"b\\\\n\\n\\t\\u0001\\u001f/\""},
        {"[0.5,-2.25,1e-07,123456.789,0.1,1e300,-0.0]", "[0.5, -2.25, 1e-07, 123456.789, 0.1, 1e+300, 0]"},
        {"[10,-3,9007199254740993]", "[10, -3, 9007199254740992]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *got = chat_json_dumps(cases[i].in, strlen(cases[i].in));
        CHECK(got && !strcmp(got, cases[i].want), "%s: got %s, want %s", cases[i].in, got ? got : "NULL",
              cases[i].want);
        free(got);
    }
    CHECK(chat_json_dumps("{", 1) == NULL, "bad JSON accepted");
}

static void test_parse_calls(void) {
    static const struct {
        enum chat_tool_syntax syn;
        const char *text, *want; // want NULL: plain content
    } cases[] = {
        {CHAT_TOOLS_QWEN, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"a\": 1}}\n</tool_call>",
         "[{\"name\":\"get\",\"arguments\":\"{\\\"a\\\":1}\"}]"},
        {CHAT_TOOLS_QWEN,
         "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
         "\"b\", \"arguments\": {\"x\": [1]}}\n</tool_call>",
         "[{\"name\":\"a\",\"arguments\":\"{}\"},{\"name\":\"b\",\"arguments\":\"{\\\"x\\\":[1]}\"}]"},
        {CHAT_TOOLS_QWEN, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", // cut short at the end
         "[{\"name\":\"a\",\"arguments\":\"{}\"}]"},
        {CHAT_TOOLS_QWEN, "Just text.", NULL},
        {CHAT_TOOLS_QWEN, "<tool_call>\nnot json\n</tool_call>", NULL},
        {CHAT_TOOLS_QWEN, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", NULL}, // no name
        {CHAT_TOOLS_LLAMA31, "{\"name\": \"get\", \"parameters\": {\"city\": \"Oslo\"}}",
         "[{\"name\":\"get\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}]"},
        {CHAT_TOOLS_LLAMA31, "<|python_tag|>{\"name\": \"get\", \"parameters\": {}}",
         "[{\"name\":\"get\",\"arguments\":\"{}\"}]"},
        {CHAT_TOOLS_LLAMA31, "The weather is fine.", NULL},
        {CHAT_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get\", \"arguments\": {\"a\": true}}]",
         "[{\"name\":\"get\",\"arguments\":\"{\\\"a\\\":true}\"}]"},
        {CHAT_TOOLS_MISTRAL, "[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {}}]",
         "[{\"name\":\"a\",\"arguments\":\"{}\"},{\"name\":\"b\",\"arguments\":\"{}\"}]"},
        {CHAT_TOOLS_MISTRAL, "[1, 2]", NULL},
        {CHAT_TOOLS_NONE, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *got = chat_tools_parse(cases[i].syn, cases[i].text, strlen(cases[i].text));
        bool ok = cases[i].want ? got && !strcmp(got, cases[i].want) : got == NULL;
        CHECK(ok, "case %zu: got %s, want %s", i, got ? got : "NULL", cases[i].want ? cases[i].want : "NULL");
        free(got);
    }
    CHECK(chat_tool_syntax(CHAT_TEMPLATE_QWEN25) == CHAT_TOOLS_QWEN &&
              chat_tool_syntax(CHAT_TEMPLATE_LLAMA31) == CHAT_TOOLS_LLAMA31 &&
              chat_tool_syntax(CHAT_TEMPLATE_MISTRAL_V3) == CHAT_TOOLS_MISTRAL &&
              chat_tool_syntax(CHAT_TEMPLATE_CHATML) == CHAT_TOOLS_NONE,
          "syntax per family");
}

int main(void) {
    RUN(test_fixtures);
    RUN(test_refusals);
    RUN(test_json_dumps);
    RUN(test_parse_calls);
    TEST_END();
}
