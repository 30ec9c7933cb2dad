// test_chat.c: chat-template detection and rendering against Jinja's rendering
// of the real templates (tests/reference/chat_reference.py writes the fixtures).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/chat.h"
#include "test.h"
#include "util.h"

// Every fixture tests/reference/chat_reference.py writes, the family
// chat_detect must find for its template, and whether it holds rendered cases.
// A fixture that is missing, empty, of another family, or renderable with no
// case compared fails the test, as does a family no fixture renders.
static const struct {
    const char *name;
    enum chat_template family;
    bool render;
} fixtures[] = {
    {"chatml_smollm2", CHAT_TEMPLATE_CHATML, true},
    {"chatml_qwen2", CHAT_TEMPLATE_CHATML, true},
    {"chatml_openhermes", CHAT_TEMPLATE_CHATML, true},
    {"qwen2_5_instruct", CHAT_TEMPLATE_QWEN25, true},
    {"qwen3", CHAT_TEMPLATE_QWEN3, true},
    {"phi4", CHAT_TEMPLATE_PHI4, true},
    {"llama2_chat", CHAT_TEMPLATE_LLAMA2, true},
    {"llama3_instruct", CHAT_TEMPLATE_LLAMA3, true},
    {"llama3_1_instruct", CHAT_TEMPLATE_LLAMA31, true},
    {"llama3_2_instruct", CHAT_TEMPLATE_LLAMA31, true},
    {"mistral_v1", CHAT_TEMPLATE_MISTRAL_V1, true},
    {"mistral_legacy", CHAT_TEMPLATE_MISTRAL_LEGACY, true},
    {"mistral_v3", CHAT_TEMPLATE_MISTRAL_V3, true},
    {"mistral_v3_tekken", CHAT_TEMPLATE_MISTRAL_V3_TEKKEN, true},
    {"mistral_v7_tekken", CHAT_TEMPLATE_MISTRAL_V7_TEKKEN, true},
    {"gemma2_it", CHAT_TEMPLATE_GEMMA2, true},
    {"gemma3_it", CHAT_TEMPLATE_GEMMA3, true},
    {"phi3_5_mini", CHAT_TEMPLATE_PHI3, true},
};
#define N_FIXTURES (int)(sizeof(fixtures) / sizeof(fixtures[0]))

// Reads a whole file; returns a malloc'd NUL-terminated buffer or NULL.
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = '\0';
    if (len) *len = p ? (size_t)n : 0;
    return p;
}

// Decodes a fixture string ("-" is empty); returns a malloc'd NUL-terminated string.
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

struct fixture_case {
    int add_gen, n;
    char think[4]; // "-", "0" or "1": enable_thinking as the reference passed it
    struct chat_message msgs[16];
    char *expect; // NULL: the template raises
};

static void case_free(struct fixture_case *c) {
    for (int i = 0; i < c->n; i++) {
        free((char *)c->msgs[i].role);
        free((char *)c->msgs[i].content);
    }
    free(c->expect);
    memset(c, 0, sizeof(*c));
}

// Prints a string with escapes, for failure reports.
static void print_escaped(const char *label, const char *s) {
    printf("      %s: \"", label);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n')
            printf("\\n");
        else if (c < 0x20)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    printf("\"\n");
}

// What one fixture's cases came to.
struct fixture_count {
    int cases;   // case lines read
    int equal;   // rendered byte-equal to Jinja's expected text
    int refused; // Jinja raised and chat_render refused with a message
    int differ;  // anything else
};

static struct fixture_count family_counts[CHAT_TEMPLATE_COUNT];

static void check_fixture(int fi) {
    const char *name = fixtures[fi].name;
    char path[256];
    snprintf(path, sizeof(path), "tests/fixtures/chat_%s.txt", name);
    size_t data_len = 0;
    char *data = read_file(path, &data_len);
    CHECK(data != NULL, "cannot read %s (run from the repository root)", path);
    CHECK(data == NULL || data_len > 0, "%s is empty", path);
    if (!data || data_len == 0) {
        free(data);
        return;
    }

    struct chat_format fmt;
    char *def = NULL;
    char family[32] = "";
    struct chat_date today = {0, 0, 0};
    int detected = -1, render = -1;
    bool saw_template = false;
    struct fixture_count cnt = {0};
    struct fixture_case c = {0};
    int msg_i = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        char key[32], a[64];
        if (line[0] == '#') continue;
        if (sscanf(line, "%31s", key) != 1) continue;
        char *rest = line + strlen(key) + (line[strlen(key)] == ' ');
        if (strcmp(key, "today") == 0) {
            CHECK(sscanf(rest, "%d-%d-%d", &today.year, &today.month, &today.day) == 3,
                  "%s: bad today line \"%s\"", name, rest);
        } else if (strcmp(key, "template") == 0) {
            saw_template = true;
            char tpath[256];
            snprintf(tpath, sizeof(tpath), "tests/reference/templates/%s", rest);
            size_t len;
            char *text = read_file(tpath, &len);
            CHECK(text != NULL, "cannot read %s", tpath);
            CHECK(today.year > 0, "%s: no today line before the template", name);
            if (text) detected = chat_detect_on(text, len, today, &fmt);
            CHECK(detected == 0, "%s: chat_detect failed: %s", name, st_last_error());
            free(text);
        } else if (strcmp(key, "family") == 0) {
            snprintf(family, sizeof(family), "%s", rest);
            CHECK(strcmp(family, chat_template_name(fixtures[fi].family)) == 0,
                  "%s: the fixture says family %s, this test %s", name, family,
                  chat_template_name(fixtures[fi].family));
            if (detected == 0)
                CHECK(fmt.kind == fixtures[fi].family, "%s: detected %s, want %s", name,
                      chat_template_name(fmt.kind), family);
        } else if (strcmp(key, "bos") == 0) {
            char *bos = unhex(rest);
            if (detected == 0) snprintf(fmt.bos, sizeof(fmt.bos), "%s", bos);
            free(bos);
        } else if (strcmp(key, "eos") == 0) {
            // the families' EOS text is fixed in chat.c
        } else if (strcmp(key, "default_system") == 0) {
            def = unhex(rest);
            if (detected == 0)
                CHECK(strcmp(fmt.default_system, def) == 0, "%s: default system \"%s\", want \"%s\"", name,
                      fmt.default_system, def);
        } else if (strcmp(key, "render") == 0) {
            render = atoi(rest);
        } else if (strcmp(key, "case") == 0) {
            case_free(&c);
            CHECK(sscanf(rest, "%d %d %3s", &c.add_gen, &c.n, c.think) == 3, "%s: bad case line", name);
            ST_ASSERT(c.n >= 0 && c.n <= 16);
            msg_i = 0;
        } else if (strcmp(key, "msg") == 0) {
            char h[8192];
            ST_ASSERT(msg_i < c.n);
            if (sscanf(rest, "%63s %8191s", a, h) == 2) {
                c.msgs[msg_i].role = strdup(a);
                c.msgs[msg_i].content = unhex(h);
                msg_i++;
            }
        } else if (strcmp(key, "expect") == 0 || strcmp(key, "raises") == 0) {
            if (key[0] == 'e') c.expect = unhex(rest);
            cnt.cases++;
            if (detected != 0 || msg_i != c.n) {
                cnt.differ++;
                continue;
            }
            struct chat_format f = fmt;
            if (c.think[0] != '-') f.enable_thinking = c.think[0] == '1';
            char *got = chat_render(&f, c.msgs, c.n, c.add_gen != 0);
            bool ok;
            if (c.expect) {
                ok = got && strcmp(got, c.expect) == 0;
                cnt.equal += ok;
            } else {
                ok = !got && st_last_error()[0] != '\0';
                cnt.refused += ok;
            }
            if (!ok) {
                cnt.differ++;
                CHECK(ok,
                      "%s case %d (%d messages, add_generation_prompt %d, enable_thinking %s) "
                      "differs from Jinja",
                      name, cnt.cases, c.n, c.add_gen, c.think);
                for (int i = 0; i < c.n; i++) print_escaped(c.msgs[i].role, c.msgs[i].content);
                print_escaped("want", c.expect ? c.expect : "(raises)");
                print_escaped("got ", got ? got : st_last_error());
            }
            free(got);
        }
    }
    case_free(&c);
    CHECK(saw_template, "%s: no template line", name);
    CHECK(render == (int)fixtures[fi].render, "%s: render %d, this test expects %d", name, render,
          (int)fixtures[fi].render);
    if (fixtures[fi].render)
        CHECK(cnt.equal > 0, "%s: a renderable fixture with no case rendered and compared", name);
    printf("    %-18s %-17s %3d cases: %3d byte-equal to Jinja, %3d refused where Jinja raises, "
           "%d differ\n",
           name, family, cnt.cases, cnt.equal, cnt.refused, cnt.differ);
    struct fixture_count *fc = &family_counts[fixtures[fi].family];
    fc->cases += cnt.cases;
    fc->equal += cnt.equal;
    fc->refused += cnt.refused;
    fc->differ += cnt.differ;
    free(def);
    free(data);
}

static void test_fixtures(void) {
    memset(family_counts, 0, sizeof(family_counts));
    for (int i = 0; i < N_FIXTURES; i++) check_fixture(i);
    struct fixture_count all = {0};
    printf("    per family:\n");
    for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++) {
        const struct fixture_count *fc = &family_counts[k];
        printf("    %-18s %4d cases: %4d byte-equal, %3d refused, %d differ\n",
               chat_template_name((enum chat_template)k), fc->cases, fc->equal, fc->refused, fc->differ);
        CHECK(fc->equal > 0, "family %s: no fixture case rendered and compared",
              chat_template_name((enum chat_template)k));
        all.cases += fc->cases;
        all.equal += fc->equal;
        all.refused += fc->refused;
        all.differ += fc->differ;
    }
    printf("    all %d families: %d cases: %d byte-equal to Jinja, %d refused where Jinja raises, "
           "%d differ\n",
           CHAT_TEMPLATE_COUNT, all.cases, all.equal, all.refused, all.differ);
}

static void test_unknown_templates(void) {
    static const char *const unknown[] = {
        // Zephyr: <|assistant|> without <|end|>
        ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
         "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
         "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% endfor %}"),
        // Vicuna-style plain text
        "{% for message in messages %}{{ 'USER: ' + message['content'] + '\n' }}{% endfor %}",
    };
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        struct chat_format fmt;
        int rc = chat_detect(unknown[i], strlen(unknown[i]), &fmt);
        CHECK(rc == -1, "template %zu detected as %s", i, chat_template_name(fmt.kind));
        const char *e = st_last_error();
        CHECK(strstr(e, "{% for message in messages %}") != NULL, "message lacks the template start: %s", e);
        for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++)
            CHECK(strstr(e, chat_template_name((enum chat_template)k)) != NULL,
                  "message lacks the family %s: %s", chat_template_name((enum chat_template)k), e);
    }
    // The preview is cut near 60 characters and shows newlines escaped.
    struct chat_format fmt;
    const char *t = unknown[0];
    CHECK(chat_detect(t, strlen(t), &fmt) == -1, "zephyr detected");
    CHECK(strstr(st_last_error(), "\\n{% if") != NULL && strstr(st_last_error(), "eos_token") == NULL,
          "preview not cut or not escaped: %s", st_last_error());
    CHECK(chat_detect("", 0, &fmt) == -1, "empty template detected");
}

// Templates with a known family's tokens but rules this engine does not
// render are refused, naming the families to choose from instead.
static void test_unknown_variants(void) {
    static const struct {
        const char *text, *closest;
    } variants[] = {
        // Phi-4's first template: the assistant's opening after every user turn.
        {"{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system"
         "<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}"
         "{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant"
         "<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + "
         "'<|im_end|>'}}{% endif %}{% endfor %}",
         "phi4"},
        // QwQ-style: <think> handling without Qwen3's enable_thinking switch.
        {"{%- for message in messages %}{{'<|im_start|>' + message.role + '\\n' + "
         "message.content.split('</think>')[-1] + '<|im_end|>\\n'}}{%- endfor %}{%- if "
         "add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}",
         "qwen3"},
        // Mistral's cookbook v1 without a system message.
        {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ ' [INST] ' "
         "+ message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
         "message['content'] + eos_token}}{% endif %}{% endfor %}",
         "mistral-v1"},
        // v3 with the system prompt on the last user message, not the last message.
        {"{%- for message in loop_messages %}[AVAILABLE_TOOLS]{%- if (message == user_messages[-1]) "
         "and system_message is defined %}{{- \"[INST] \" + system_message + \"\\n\\n\" + "
         "message[\"content\"] + \"[/INST]\" }}{%- endif %}{%- endfor %}",
         "mistral-v3"},
        // Mistral Small 3.1's processor template: no alternation check.
        {"{{- bos_token }}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{%- for "
         "message in loop_messages %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- endfor %}",
         "mistral-v7-tekken"},
        // A Gemma-like template of neither Gemma 2's nor Gemma 3's rules.
        {"{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
         "message['content'] + '<end_of_turn>\\n' }}{% endfor %}",
         "gemma3"},
        // chatml that writes BOS (LFM2's, Hermes' tool-use templates).
        {"{{bos_token}}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
         "chatml"},
        // chatml handling tools, other than Qwen2.5's (Qwen3-Coder's).
        {"{%- if tools %}{{- '<|im_start|>system\\nYou are Qwen, a coder.<|im_end|>\\n' }}{%- endif "
         "%}{%- for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + '<|im_end|>\\n'}}{%- endfor %}",
         "chatml"},
        // Qwen3.5's: Qwen3's rules, but a think block opened after the generation prompt.
        {"<think> enable_thinking is defined and enable_thinking is false ns.last_query_index "
         "split('</think>')[-1].lstrip('\\n') not(message.content.startswith('<tool_response>') "
         "<|im_start|> {%- else %}{{- '<think>\\n' }}",
         "qwen3"},
        // Phi-3-mini's first template: BOS, then the turns.
        {"{{ bos_token }}{% for message in messages %}{{'<|user|>' + '\\n' + message['content'] + "
         "'<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}{% endfor %}",
         "phi3"},
        // A function-calling template with Llama 3's tokens (firefunction-style).
        {"{{ bos_token }}{{ '<|start_header_id|>system<|end_header_id|>\\n\\n' + functions + "
         "'<|eot_id|>' }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
         "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}",
         "llama3"},
        // Llama 3.1-like system block without any date.
        {"{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: "
         "December 2023\\n\" }}{{- \"Today Date: \" + date_string + \"\\n\\n\" }}",
         "llama3.1"},
    };
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        struct chat_format fmt;
        const char *t = variants[i].text;
        int rc = chat_detect(t, strlen(t), &fmt);
        CHECK(rc == -1, "variant %zu detected as %s", i, chat_template_name(fmt.kind));
        const char *e = st_last_error();
        CHECK(strstr(e, "variant") && strstr(e, variants[i].closest) && strstr(e, "by name"),
              "variant %zu: message %s", i, e);
    }
}

static void test_default_system_parsing(void) {
    struct chat_format fmt;
    // Escaped newline, an escaped quote and a system message built from variables before it.
    const char *t = "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + "
                    "messages[0]['content'] + '<|im_end|>\\n' }}{% else %}{{ "
                    "'<|im_start|>system\\nYou\\'re Qwen.\\tBe \"helpful\"<|im_end|>\\n' }}{% endif %}";
    CHECK(chat_detect(t, strlen(t), &fmt) == 0, "detect: %s", st_last_error());
    CHECK(fmt.kind == CHAT_TEMPLATE_CHATML, "kind %d", fmt.kind);
    CHECK(strcmp(fmt.default_system, "You're Qwen.\tBe \"helpful\"") == 0, "default \"%s\"",
          fmt.default_system);
    // Raw template text, not a string literal: no default.
    const char *raw = "<|im_start|>system\n{{ system }}<|im_end|>\n{{ eos_token }}";
    CHECK(chat_detect(raw, strlen(raw), &fmt) == 0 && fmt.default_system[0] == '\0', "default \"%s\"",
          fmt.default_system);
    // Too long to keep: refused, not cut.
    char longt[5000];
    int o = snprintf(longt, sizeof(longt), "{{ '<|im_start|>system\\n");
    while (o < 4500) longt[o++] = 'x';
    snprintf(longt + o, sizeof(longt) - (size_t)o, "<|im_end|>\\n' }}");
    CHECK(chat_detect(longt, strlen(longt), &fmt) == -1, "long default accepted");
    CHECK(strstr(st_last_error(), "default system prompt") != NULL, "message: %s", st_last_error());
    // An escape Jinja decodes but this code does not: refused, not kept as written.
    const char *hex = "{{ '<|im_start|>system\\nCaf\\xe9<|im_end|>\\n' }}";
    CHECK(chat_detect(hex, strlen(hex), &fmt) == -1, "\\x escape accepted");
    CHECK(strstr(st_last_error(), "\\x") != NULL, "message: %s", st_last_error());
}

// The dates templates write: Llama 3.1's literal, Llama 3.2's strftime_now()
// and Mistral Small 3.2's default system prompt, for a given day and today.
static void test_dates(void) {
    size_t len;
    struct chat_format fmt;
    char *l31 = read_file("tests/reference/templates/llama3_1_instruct.jinja", &len);
    CHECK(l31 && chat_detect_on(l31, len, (struct chat_date){2031, 12, 9}, &fmt) == 0, "llama3.1: %s",
          st_last_error());
    CHECK(strcmp(fmt.date_string, "26 Jul 2024") == 0, "llama3.1 date \"%s\"", fmt.date_string);
    free(l31);

    char *l32 = read_file("tests/reference/templates/llama3_2_instruct.jinja", &len);
    CHECK(l32 && chat_detect_on(l32, len, (struct chat_date){2031, 12, 9}, &fmt) == 0, "llama3.2: %s",
          st_last_error());
    CHECK(fmt.kind == CHAT_TEMPLATE_LLAMA31 && strcmp(fmt.date_string, "09 Dec 2031") == 0,
          "llama3.2 date \"%s\"", fmt.date_string);
    // chat_detect uses the local date, as strftime() formats it in the C locale.
    char want[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(want, sizeof(want), "%d %b %Y", &tm);
    CHECK(l32 && chat_detect(l32, len, &fmt) == 0, "llama3.2: %s", st_last_error());
    // (a midnight between the two calls would differ by a day; not worth a retry)
    CHECK(strcmp(fmt.date_string, want) == 0, "llama3.2 today \"%s\", want \"%s\"", fmt.date_string, want);
    CHECK(l32 && chat_detect_on(l32, len, (struct chat_date){2031, 13, 9}, &fmt) == -1, "month 13 accepted");
    free(l32);

    char *v7 = read_file("tests/reference/templates/mistral_v7_tekken.jinja", &len);
    CHECK(v7 && chat_detect_on(v7, len, (struct chat_date){2031, 12, 9}, &fmt) == 0, "v7: %s",
          st_last_error());
    CHECK(strstr(fmt.default_system, "The current date is 2031-12-09.\n\nWhen you're not sure") &&
              strncmp(fmt.default_system, "You are Mistral Small 3, a Large", 32) == 0,
          "v7 default \"%.200s\"", fmt.default_system);
    free(v7);

    // A default built from anything but strings and `today` is refused.
    const char *bad = "{%- set today = strftime_now(\"%Y-%m-%d\") %}{%- set default_system_message "
                      "= \"Today is \" + today + name %}[SYSTEM_PROMPT] '[INST]' must alternate "
                      "messages|length > 0 and messages[0]['role'] == 'system'";
    CHECK(chat_detect(bad, strlen(bad), &fmt) == -1, "an expression with a variable accepted");
    CHECK(strstr(st_last_error(), "default_system_message"), "message: %s", st_last_error());
    const char *badfmt = "{{ bos_token }}<|start_header_id|><|end_header_id|>Cutting Knowledge Date: "
                         "December 2023 {%- set date_string = strftime_now(\"%d %H\") %}";
    CHECK(chat_detect(badfmt, strlen(badfmt), &fmt) == -1, "strftime %%H accepted");
    CHECK(strstr(st_last_error(), "%H"), "message: %s", st_last_error());
}

static void test_by_name(void) {
    for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++) {
        struct chat_format fmt;
        const char *name = chat_template_name((enum chat_template)k);
        CHECK(chat_format_by_name(name, &fmt) == 0 && (int)fmt.kind == k, "by name %s", name);
        CHECK(fmt.bos[0] == '\0' && fmt.enable_thinking, "by name %s not blank", name);
        // only what the family's rules fix
        bool def = k == CHAT_TEMPLATE_QWEN25, date = k == CHAT_TEMPLATE_LLAMA31;
        CHECK((fmt.default_system[0] != '\0') == def && (fmt.date_string[0] != '\0') == date,
              "by name %s: default \"%s\", date \"%s\"", name, fmt.default_system, fmt.date_string);
        CHECK(chat_has_thinking((enum chat_template)k) == (k == CHAT_TEMPLATE_QWEN3), "thinking %s", name);
    }
    struct chat_format fmt;
    CHECK(chat_format_by_name("qwen2.5", &fmt) == 0 &&
              strcmp(fmt.default_system,
                     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") == 0,
          "qwen2.5 default \"%s\"", fmt.default_system);
    CHECK(chat_format_by_name("llama3.1", &fmt) == 0 && strcmp(fmt.date_string, "26 Jul 2024") == 0,
          "llama3.1 date \"%s\"", fmt.date_string);
    CHECK(chat_format_by_name("mistral", &fmt) == 0 && fmt.kind == CHAT_TEMPLATE_MISTRAL_V1, "mistral is %s",
          chat_template_name(fmt.kind));
    CHECK(chat_format_by_name("gemma", &fmt) == 0 && fmt.kind == CHAT_TEMPLATE_GEMMA3, "gemma is %s",
          chat_template_name(fmt.kind));
    CHECK(chat_format_by_name("vicuna", &fmt) == -1, "vicuna accepted");
    CHECK(strstr(st_last_error(), "vicuna") && strstr(st_last_error(), "chatml") &&
              strstr(st_last_error(), "mistral-v7-tekken"),
          "message: %s", st_last_error());
    CHECK(chat_format_by_name(NULL, &fmt) == -1, "NULL accepted");
}

static void test_render_errors(void) {
    struct chat_format fmt;
    chat_format_by_name("chatml", &fmt);
    struct chat_message bad_role[] = {{"user", "hi"}, {"tool", "42"}};
    CHECK(chat_render(&fmt, bad_role, 2, true) == NULL, "role tool accepted");
    CHECK(strstr(st_last_error(), "tool") && strstr(st_last_error(), "message 1"), "message: %s",
          st_last_error());
    struct chat_message null_content[] = {{"user", NULL}};
    CHECK(chat_render(&fmt, null_content, 1, true) == NULL, "NULL content accepted");
    struct chat_message null_role[] = {{NULL, "x"}};
    CHECK(chat_render(&fmt, null_role, 1, true) == NULL, "NULL role accepted");
    CHECK(chat_render(&fmt, NULL, -1, true) == NULL, "n = -1 accepted");
    fmt.kind = CHAT_TEMPLATE_COUNT;
    CHECK(chat_render(&fmt, bad_role, 1, true) == NULL, "kind COUNT accepted");

    // Templates that write BOS refuse to render without its text.
    struct chat_message user[] = {{"user", "hi"}};
    const char *need_bos[] = {"llama2",         "llama3",     "llama3.1",          "mistral-v1",
                              "mistral-legacy", "mistral-v3", "mistral-v3-tekken", "mistral-v7-tekken",
                              "gemma2",         "gemma3"};
    for (size_t i = 0; i < sizeof(need_bos) / sizeof(need_bos[0]); i++) {
        chat_format_by_name(need_bos[i], &fmt);
        CHECK(chat_render(&fmt, user, 1, true) == NULL, "%s rendered without BOS", need_bos[i]);
        CHECK(strstr(st_last_error(), "BOS") != NULL, "message: %s", st_last_error());
    }
    // Role order the template rejects, with the message naming the message.
    chat_format_by_name("llama2", &fmt);
    snprintf(fmt.bos, sizeof(fmt.bos), "<s>");
    struct chat_message two_users[] = {{"user", "a"}, {"user", "b"}};
    CHECK(chat_render(&fmt, two_users, 2, true) == NULL, "user, user accepted by llama2");
    CHECK(strstr(st_last_error(), "alternate") && strstr(st_last_error(), "message 1"), "message: %s",
          st_last_error());
    // Gemma 2 says why it refuses a system message.
    chat_format_by_name("gemma2", &fmt);
    snprintf(fmt.bos, sizeof(fmt.bos), "<bos>");
    struct chat_message sys_user[] = {{"system", "Be brief."}, {"user", "hi"}};
    CHECK(chat_render(&fmt, sys_user, 2, true) == NULL, "gemma2 took a system message");
    CHECK(strstr(st_last_error(), "system message"), "message: %s", st_last_error());
    // Llama 3.1 needs its date.
    chat_format_by_name("llama3.1", &fmt);
    snprintf(fmt.bos, sizeof(fmt.bos), "<|begin_of_text|>");
    fmt.date_string[0] = '\0';
    CHECK(chat_render(&fmt, user, 1, true) == NULL, "llama3.1 rendered without a date");

    // A default system prompt set by hand applies to any family, as if the
    // conversation opened with it.
    chat_format_by_name("phi3", &fmt);
    char *want = chat_render(&fmt, sys_user, 2, true);
    snprintf(fmt.default_system, sizeof(fmt.default_system), "Be brief.");
    char *s = chat_render(&fmt, user, 1, true);
    CHECK(s && want && strcmp(s, want) == 0, "got %s", s ? s : st_last_error());
    free(s);
    free(want);
    // mistral-v7-tekken by name has no default: no [SYSTEM_PROMPT] block then.
    chat_format_by_name("mistral-v7-tekken", &fmt);
    snprintf(fmt.bos, sizeof(fmt.bos), "<s>");
    s = chat_render(&fmt, user, 1, true);
    CHECK(s && strcmp(s, "<s>[INST]hi[/INST]") == 0, "got %s", s ? s : st_last_error());
    free(s);
}

int main(void) {
    RUN(test_fixtures);
    RUN(test_unknown_templates);
    RUN(test_unknown_variants);
    RUN(test_default_system_parsing);
    RUN(test_dates);
    RUN(test_by_name);
    RUN(test_render_errors);
    TEST_END();
}
