// test_chat.c: chat-template detection and rendering against Jinja's rendering
// of the real templates (tests/reference/chat_reference.py writes the fixtures).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "test.h"
#include "util.h"

static const char *const fixture_names[] = {
    "chatml_smollm2", "chatml_qwen2", "chatml_openhermes", "llama2_chat", "llama3_instruct",
    "mistral_v1",     "mistral_legacy", "gemma2_it",       "gemma3_it",   "phi3_5_mini",
};
#define N_FIXTURES (int)(sizeof(fixture_names) / sizeof(fixture_names[0]))

// Reads a whole file; returns a malloc'd NUL-terminated buffer or NULL.
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = '\0';
    if (len) *len = (size_t)n;
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
        if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\x%02x", c);
        else putchar(c);
    }
    printf("\"\n");
}

static void check_fixture(const char *name) {
    char path[256];
    snprintf(path, sizeof(path), "tests/fixtures/chat_%s.txt", name);
    char *data = read_file(path, NULL);
    CHECK(data != NULL, "cannot read %s (run from the repository root)", path);
    if (!data) return;

    struct chat_format fmt;
    char *bos = NULL, *eos = NULL, *def = NULL;
    char family[32] = "";
    int detected = -1, n_cases = 0, n_ok = 0;
    struct fixture_case c = {0};
    int msg_i = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        char key[32], a[64];
        if (line[0] == '#') continue;
        if (sscanf(line, "%31s", key) != 1) continue;
        char *rest = line + strlen(key) + (line[strlen(key)] == ' ');
        if (strcmp(key, "template") == 0) {
            char tpath[256];
            snprintf(tpath, sizeof(tpath), "tests/reference/templates/%s", rest);
            size_t len;
            char *text = read_file(tpath, &len);
            CHECK(text != NULL, "cannot read %s", tpath);
            if (text) detected = chat_detect(text, len, &fmt);
            CHECK(detected == 0, "%s: chat_detect failed: %s", name, st_last_error());
            free(text);
        } else if (strcmp(key, "family") == 0) {
            snprintf(family, sizeof(family), "%s", rest);
            if (detected == 0)
                CHECK(strcmp(chat_template_name(fmt.kind), family) == 0, "%s: detected %s, want %s",
                      name, chat_template_name(fmt.kind), family);
        } else if (strcmp(key, "bos") == 0) {
            bos = unhex(rest);
            if (detected == 0) snprintf(fmt.bos, sizeof(fmt.bos), "%s", bos);
        } else if (strcmp(key, "eos") == 0) {
            eos = unhex(rest);
        } else if (strcmp(key, "default_system") == 0) {
            def = unhex(rest);
            if (detected == 0)
                CHECK(strcmp(fmt.default_system, def) == 0, "%s: default system \"%s\", want \"%s\"",
                      name, fmt.default_system, def);
        } else if (strcmp(key, "render") == 0) {
            // 0: detection only
        } else if (strcmp(key, "case") == 0) {
            case_free(&c);
            sscanf(rest, "%d %d", &c.add_gen, &c.n);
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
            n_cases++;
            if (detected != 0) continue;
            char *got = chat_render(&fmt, c.msgs, c.n, c.add_gen != 0);
            bool ok = c.expect ? (got && strcmp(got, c.expect) == 0) : got == NULL;
            if (!c.expect && !got) ok = ok && st_last_error()[0] != '\0';
            n_ok += ok;
            if (!ok) {
                CHECK(ok, "%s case %d (%d messages, add_generation_prompt %d) differs from Jinja", name,
                      n_cases, c.n, c.add_gen);
                for (int i = 0; i < c.n; i++) print_escaped(c.msgs[i].role, c.msgs[i].content);
                print_escaped("want", c.expect ? c.expect : "(raises)");
                print_escaped("got ", got ? got : st_last_error());
            }
            free(got);
        }
    }
    case_free(&c);
    printf("    %-18s %-8s %d/%d cases equal to Jinja\n", name, family, n_ok, n_cases);
    free(bos);
    free(eos);
    free(def);
    free(data);
}

static void test_fixtures(void) {
    for (int i = 0; i < N_FIXTURES; i++) check_fixture(fixture_names[i]);
}

static void test_unknown_templates(void) {
    static const char *const unknown[] = {
        // Zephyr: <|assistant|> without <|end|>
        ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
         "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
         "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% endfor %}"),
        // Vicuna-style plain text
        "{% for message in messages %}{{ 'USER: ' + message['content'] + '\n' }}{% endfor %}",
        // Phi-4: chatml markers with <|im_sep|>
        ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + "
         "message['content'] + '<|im_end|>'}}{% endfor %}"),
    };
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        struct chat_format fmt;
        int rc = chat_detect(unknown[i], strlen(unknown[i]), &fmt);
        CHECK(rc == -1, "template %zu detected as %s", i, chat_template_name(fmt.kind));
        const char *e = st_last_error();
        CHECK(strstr(e, "{% for message in messages %}") != NULL, "message lacks the template start: %s",
              e);
        CHECK(strstr(e, "chatml, llama2, llama3, mistral, gemma, phi3") != NULL,
              "message lacks the known families: %s", e);
    }
    // The preview is cut near 60 characters and shows newlines escaped.
    struct chat_format fmt;
    const char *t = unknown[0];
    CHECK(chat_detect(t, strlen(t), &fmt) == -1, "zephyr detected");
    CHECK(strstr(st_last_error(), "\\n{% if") != NULL && strstr(st_last_error(), "eos_token") == NULL,
          "preview not cut or not escaped: %s", st_last_error());
    CHECK(chat_detect("", 0, &fmt) == -1, "empty template detected");
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
    const char *raw = "<|im_start|>system\n{{ system }}<|im_end|>\n{{ bos_token }}";
    CHECK(chat_detect(raw, strlen(raw), &fmt) == 0 && fmt.default_system[0] == '\0', "default \"%s\"",
          fmt.default_system);
    // Too long to keep: refused, not cut.
    char longt[1200];
    int o = snprintf(longt, sizeof(longt), "{{ '<|im_start|>system\\n");
    while (o < 1100) longt[o++] = 'x';
    snprintf(longt + o, sizeof(longt) - (size_t)o, "<|im_end|>\\n' }}");
    CHECK(chat_detect(longt, strlen(longt), &fmt) == -1, "long default accepted");
    CHECK(strstr(st_last_error(), "default system prompt") != NULL, "message: %s", st_last_error());
}

static void test_by_name(void) {
    for (int k = 0; k <= CHAT_TEMPLATE_PHI3; k++) {
        struct chat_format fmt;
        const char *name = chat_template_name((enum chat_template)k);
        CHECK(chat_format_by_name(name, &fmt) == 0 && (int)fmt.kind == k, "by name %s", name);
        CHECK(fmt.default_system[0] == '\0' && fmt.bos[0] == '\0', "by name %s not blank", name);
    }
    struct chat_format fmt;
    CHECK(chat_format_by_name("vicuna", &fmt) == -1, "vicuna accepted");
    CHECK(strstr(st_last_error(), "vicuna") && strstr(st_last_error(), "chatml"), "message: %s",
          st_last_error());
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

    // Templates that write BOS refuse to render without its text.
    struct chat_message user[] = {{"user", "hi"}};
    const char *need_bos[] = {"llama2", "llama3", "mistral", "gemma"};
    for (int i = 0; i < 4; i++) {
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

    // A default system prompt set by hand applies to any family, as if the
    // conversation opened with it.
    chat_format_by_name("phi3", &fmt);
    struct chat_message with_system[] = {{"system", "Be brief."}, {"user", "hi"}};
    char *want = chat_render(&fmt, with_system, 2, true);
    snprintf(fmt.default_system, sizeof(fmt.default_system), "Be brief.");
    char *s = chat_render(&fmt, user, 1, true);
    CHECK(s && want && strcmp(s, want) == 0, "got %s", s ? s : st_last_error());
    free(s);
    free(want);
}

int main(void) {
    RUN(test_fixtures);
    RUN(test_unknown_templates);
    RUN(test_default_system_parsing);
    RUN(test_by_name);
    RUN(test_render_errors);
    TEST_END();
}
