// chat_detect.c: which chat-template family a tokenizer.chat_template text is,
// and what the text fixes beyond the family's rules (a default system prompt,
// the date a Llama 3.1 system block shows).
//
// Detection looks for the text that makes a family render the way it does
// (the literal around [INST], the think-block handling, the date header), not
// just for its special tokens: a template that shares a family's tokens but
// not its rules is refused with a message, since rendering it by another
// variant's rules would give the model a prompt it was not trained on.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "text/chat.h"
#include "util.h"

static const char *const chat_family_names[CHAT_TEMPLATE_COUNT] = {
    [CHAT_TEMPLATE_CHATML] = "chatml",
    [CHAT_TEMPLATE_QWEN25] = "qwen2.5",
    [CHAT_TEMPLATE_QWEN3] = "qwen3",
    [CHAT_TEMPLATE_PHI4] = "phi4",
    [CHAT_TEMPLATE_LLAMA2] = "llama2",
    [CHAT_TEMPLATE_LLAMA3] = "llama3",
    [CHAT_TEMPLATE_LLAMA31] = "llama3.1",
    [CHAT_TEMPLATE_MISTRAL_LEGACY] = "mistral-legacy",
    [CHAT_TEMPLATE_MISTRAL_V1] = "mistral-v1",
    [CHAT_TEMPLATE_MISTRAL_V3] = "mistral-v3",
    [CHAT_TEMPLATE_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_TEMPLATE_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [CHAT_TEMPLATE_GEMMA2] = "gemma2",
    [CHAT_TEMPLATE_GEMMA3] = "gemma3",
    [CHAT_TEMPLATE_PHI3] = "phi3",
};

#define CHAT_KNOWN_FAMILIES                                                                                  \
    "chatml, qwen2.5, qwen3, phi4, llama2, llama3, llama3.1, mistral-legacy, mistral-v1, "                   \
    "mistral-v3, mistral-v3-tekken, mistral-v7-tekken, gemma2, gemma3, phi3"

static const char qwen_default_system[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
static const char llama31_default_date[] = "26 Jul 2024";

const char *chat_template_name(enum chat_template kind) {
    if ((unsigned)kind >= CHAT_TEMPLATE_COUNT) return "unknown";
    return chat_family_names[kind];
}

bool chat_has_thinking(enum chat_template kind) { return kind == CHAT_TEMPLATE_QWEN3; }

static void format_init(struct chat_format *out, enum chat_template kind) {
    memset(out, 0, sizeof(*out));
    out->kind = kind;
    out->enable_thinking = true;
}

int chat_format_by_name(const char *name, struct chat_format *out) {
    ST_ASSERT(out);
    format_init(out, CHAT_TEMPLATE_CHATML);
    int kind = -1;
    for (int i = 0; name && i < CHAT_TEMPLATE_COUNT; i++)
        if (strcmp(name, chat_family_names[i]) == 0) kind = i;
    if (name && strcmp(name, "mistral") == 0) kind = CHAT_TEMPLATE_MISTRAL_V1;
    if (name && strcmp(name, "gemma") == 0) kind = CHAT_TEMPLATE_GEMMA3;
    if (kind < 0)
        return st_fail("chat template family \"%s\" is unknown; known families: " CHAT_KNOWN_FAMILIES,
                       name ? name : "(null)");
    format_init(out, (enum chat_template)kind);
    if (kind == CHAT_TEMPLATE_QWEN25)
        snprintf(out->default_system, sizeof(out->default_system), "%s", qwen_default_system);
    if (kind == CHAT_TEMPLATE_LLAMA31)
        snprintf(out->date_string, sizeof(out->date_string), "%s", llama31_default_date);
    return 0;
}

// --- reading template text ---------------------------------------------------

static bool text_has(const char *text, size_t len, const char *needle) {
    return memmem(text, len, needle, strlen(needle)) != NULL;
}

// Writes the first ~60 bytes of text into out (cap ≥ 256 bytes), control
// characters escaped and not cutting a UTF-8 sequence, for error messages.
static void text_preview(const char *text, size_t len, char *out, size_t cap) {
    size_t o = 0, i = 0;
    while (i < len && (i < 60 || ((unsigned char)text[i] & 0xc0) == 0x80) && o + 8 < cap) {
        unsigned char c = (unsigned char)text[i++];
        if (c == '\n' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    if (i < len) memcpy(out + o, "...", 3), o += 3;
    out[o] = '\0';
}

// Appends c to out[*o] when it fits (cap counts the NUL); *o counts every byte.
static void out_put(char *out, size_t cap, size_t *o, char c) {
    if (*o + 1 < cap) out[*o] = c;
    (*o)++;
}

// Decodes one backslash escape of a Jinja string literal at q[0] == '\\'
// (Jinja unescapes literals as Python's unicode-escape codec does). Returns the
// bytes consumed and appends the text, or 0 for escapes this code does not
// decode (\x, \u, \U, \N, octal), which a caller refuses.
static size_t literal_escape(const char *q, const char *end, char *out, size_t cap, size_t *o) {
    if (q + 1 >= end) return 0;
    char c;
    switch (q[1]) {
    case 'n':
        c = '\n';
        break;
    case 't':
        c = '\t';
        break;
    case 'r':
        c = '\r';
        break;
    case 'a':
        c = '\a';
        break;
    case 'b':
        c = '\b';
        break;
    case 'f':
        c = '\f';
        break;
    case 'v':
        c = '\v';
        break;
    case '\\':
    case '\'':
    case '"':
        c = q[1];
        break;
    case '\n':
        return 2; // a backslash-newline continues the literal
    case 'x':
    case 'u':
    case 'U':
    case 'N':
        return 0;
    default:
        if (q[1] >= '0' && q[1] <= '7') return 0;
        out_put(out, cap, o, '\\'); // unknown escapes stay as written
        c = q[1];
    }
    out_put(out, cap, o, c);
    return 2;
}

// The default system prompt of a chatml template: the text of a string literal
// '<|im_start|>system\n' DEFAULT '<|im_end|>' in one piece, as SmolLM2's,
// Qwen2's and Qwen2.5's templates write it for a conversation that does not
// open with a system message. A run that leaves the literal (its closing
// quote) or holds template markup is a system message built from variables,
// not a default. Returns 1 and fills out, 0 when there is none, -1 when it
// does not fit or uses an escape this code does not decode.
static int chat_default_system(const char *text, size_t len, char *out, size_t cap) {
    static const char open[] = "<|im_start|>system";
    static const char close[] = "<|im_end|>";
    const char *end = text + len;
    const char *p = text;
    while ((p = memmem(p, (size_t)(end - p), open, sizeof(open) - 1)) != NULL) {
        char quote = p > text ? p[-1] : '\0';
        p += sizeof(open) - 1;
        if (quote != '\'' && quote != '"') continue;
        const char *s = p;
        if (s < end && *s == '\n')
            s += 1;
        else if (end - s >= 2 && s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *e = memmem(s, (size_t)(end - s), close, sizeof(close) - 1);
        if (!e) return 0;
        size_t o = 0;
        bool literal = true;
        for (const char *q = s; q < e && literal;) {
            if (*q == quote) {
                literal = false;
            } else if (*q == '{' && q + 1 < e && (q[1] == '{' || q[1] == '%' || q[1] == '#')) {
                literal = false;
            } else if (*q == '\\') {
                size_t k = literal_escape(q, e, out, cap, &o);
                if (k == 0)
                    return st_fail("chat template: its default system prompt uses the escape "
                                   "\\%c, which this engine does not decode; choose a family "
                                   "by name",
                                   q + 1 < e ? q[1] : ' ');
                q += k;
                continue;
            } else {
                out_put(out, cap, &o, *q);
            }
            q++;
        }
        if (!literal || o == 0) continue;
        if (o >= cap) {
            out[0] = '\0';
            return st_fail("chat template: its default system prompt is %zu bytes, longer than the "
                           "%zu this engine keeps",
                           o, cap - 1);
        }
        out[o] = '\0';
        return 1;
    }
    return 0;
}

// --- dates ---------------------------------------------------------------------

// Formats d with a strftime format of the conversions %d %m %Y %y %b %B %%
// (the C locale's names, which Python's strftime gives under transformers).
// Returns 0, or -1 with a message for any other conversion.
static int date_format(struct chat_date d, const char *fmt, size_t fmt_len, char *out, size_t cap) {
    static const char *const months[12] = {"January",   "February", "March",    "April",
                                           "May",       "June",     "July",     "August",
                                           "September", "October",  "November", "December"};
    if (d.month < 1 || d.month > 12 || d.day < 1 || d.day > 31 || d.year < 1 || d.year > 9999)
        return st_fail("chat template: date %d-%d-%d is not a date", d.year, d.month, d.day);
    size_t o = 0;
    char tmp[16];
    for (size_t i = 0; i < fmt_len; i++) {
        const char *piece = tmp;
        if (fmt[i] != '%') {
            tmp[0] = fmt[i], tmp[1] = '\0';
        } else if (++i >= fmt_len) {
            return st_fail("chat template: strftime_now format \"%.*s\" ends in %%", (int)fmt_len, fmt);
        } else {
            switch (fmt[i]) {
            case 'd':
                snprintf(tmp, sizeof(tmp), "%02d", d.day);
                break;
            case 'm':
                snprintf(tmp, sizeof(tmp), "%02d", d.month);
                break;
            case 'Y':
                snprintf(tmp, sizeof(tmp), "%d", d.year);
                break;
            case 'y':
                snprintf(tmp, sizeof(tmp), "%02d", d.year % 100);
                break;
            case 'b':
                snprintf(tmp, sizeof(tmp), "%.3s", months[d.month - 1]);
                break;
            case 'B':
                piece = months[d.month - 1];
                break;
            case '%':
                tmp[0] = '%', tmp[1] = '\0';
                break;
            default:
                return st_fail("chat template: strftime_now format \"%.*s\" uses %%%c, which this "
                               "engine does not format; choose a family by name",
                               (int)fmt_len, fmt, fmt[i]);
            }
        }
        for (; *piece; piece++) out_put(out, cap, &o, *piece);
    }
    if (o >= cap) return st_fail("chat template: the formatted date is too long");
    out[o] = '\0';
    return 0;
}

// Skips spaces, tabs and newlines.
static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

// Reads the string literal at *p (quoted with ' or "), appending its text to
// out; advances *p past it. Returns 0, or -1 with a message.
static int read_literal(const char **p, const char *end, char *out, size_t cap, size_t *o) {
    char quote = **p;
    const char *q = *p + 1;
    while (q < end && *q != quote) {
        if (*q == '\\') {
            size_t k = literal_escape(q, end, out, cap, o);
            if (k == 0)
                return st_fail("chat template: a string uses the escape \\%c, which this engine "
                               "does not decode; choose a family by name",
                               q + 1 < end ? q[1] : ' ');
            q += k;
        } else {
            out_put(out, cap, o, *q++);
        }
    }
    if (q >= end) return st_fail("chat template: a string literal is not closed");
    *p = q + 1;
    return 0;
}

// The date text of `strftime_now("FMT")` at its first call in text, formatted
// for today; returns 1 and fills out, 0 when the template does not call it,
// -1 with a message.
static int template_strftime(const char *text, size_t len, struct chat_date today, char *out, size_t cap) {
    static const char call[] = "strftime_now(";
    const char *end = text + len;
    const char *p = memmem(text, len, call, sizeof(call) - 1);
    if (!p) return 0;
    p = skip_space(p + sizeof(call) - 1, end);
    if (p >= end || (*p != '"' && *p != '\''))
        return st_fail("chat template: strftime_now() is called without a literal format; "
                       "choose a family by name");
    char fmt[64];
    size_t n = 0;
    if (read_literal(&p, end, fmt, sizeof(fmt), &n)) return -1;
    if (n >= sizeof(fmt)) return st_fail("chat template: the strftime_now format is too long");
    return date_format(today, fmt, n, out, cap) ? -1 : 1;
}

// Evaluates the expression after "{%- set NAME =" in text: string literals
// and the variable `today` (the template's strftime_now date) joined by '+',
// up to the closing "%}". Returns 1 and fills out, 0 when the text has no such
// set, -1 with a message when the expression is anything else or too long.
static int template_set_string(const char *text, size_t len, const char *name, struct chat_date today,
                               char *out, size_t cap) {
    const char *end = text + len;
    const char *p = text;
    size_t nlen = strlen(name);
    for (;;) { // the "set" whose target is name
        p = memmem(p, (size_t)(end - p), "set ", 4);
        if (!p) return 0;
        p = skip_space(p + 4, end);
        if ((size_t)(end - p) > nlen && memcmp(p, name, nlen) == 0) {
            const char *q = skip_space(p + nlen, end);
            if (q < end && *q == '=') {
                p = q + 1;
                break;
            }
        }
    }
    size_t o = 0;
    for (;;) {
        p = skip_space(p, end);
        if (p < end && (*p == '"' || *p == '\'')) {
            if (read_literal(&p, end, out, cap, &o)) return -1;
        } else if (end - p >= 5 && memcmp(p, "today", 5) == 0) {
            char date[32];
            int rc = template_strftime(text, len, today, date, sizeof(date));
            if (rc <= 0)
                return rc < 0 ? -1
                              : st_fail("chat template: `%s` uses `today`, which is not "
                                        "strftime_now(); choose a family by name",
                                        name);
            for (const char *d = date; *d; d++) out_put(out, cap, &o, *d);
            p += 5;
        } else {
            return st_fail("chat template: `%s` is not made of strings and `today`; choose a "
                           "family by name",
                           name);
        }
        p = skip_space(p, end);
        if (p < end && *p == '+') {
            p++;
            continue;
        }
        if (p < end && (*p == '%' || (*p == '-' && p + 1 < end && p[1] == '%'))) break;
        return st_fail("chat template: `%s` is not made of strings and `today`; choose a family by "
                       "name",
                       name);
    }
    if (o >= cap) {
        out[0] = '\0';
        return st_fail("chat template: `%s` is %zu bytes, longer than the %zu this engine keeps", name, o,
                       cap - 1);
    }
    out[o] = '\0';
    return 1;
}

// --- detection -----------------------------------------------------------------

// Refuses a template of a known family's tokens but an unknown variant.
static int refuse_variant(const char *text, size_t len, const char *what, const char *names) {
    char preview[256];
    text_preview(text, len, preview, sizeof(preview));
    return st_fail("chat template \"%s\" is %s of a variant this engine does not render; choose a "
                   "family by name (%s are the closest)",
                   preview, what, names);
}

// A chatml template (<|im_start|>): Phi-4, Qwen3, Qwen2.5 or the plain form.
static int detect_chatml(const char *text, size_t len, struct chat_format *out) {
    if (text_has(text, len, "<|im_sep|>")) {
        // Phi-4's first template closed every user turn with the assistant's
        // opening, ignoring add_generation_prompt; the one rendered here does not.
        if (!text_has(text, len, "add_generation_prompt") ||
            !text_has(text, len, "'<|im_start|>assistant<|im_sep|>'"))
            return refuse_variant(text, len, "chatml with <|im_sep|> (Phi-4 style)", "phi4");
        format_init(out, CHAT_TEMPLATE_PHI4);
        return 0;
    }
    // None of the chatml renderings writes BOS (LFM2's and Hermes' tool-use
    // templates do).
    if (text_has(text, len, "bos_token"))
        return refuse_variant(text, len, "chatml that writes bos_token", "chatml");
    if (text_has(text, len, "<think>")) {
        // Qwen3.5's opens a think block after the generation prompt.
        if (!text_has(text, len, "enable_thinking is defined and enable_thinking is false") ||
            !text_has(text, len, "ns.last_query_index") ||
            !text_has(text, len, "split('</think>')[-1].lstrip('\\n')") ||
            !text_has(text, len, "not(message.content.startswith('<tool_response>')") ||
            text_has(text, len, "{{- '<think>\\n' }}"))
            return refuse_variant(text, len, "chatml with <think> blocks", "qwen3, chatml");
        format_init(out, CHAT_TEMPLATE_QWEN3);
        return 0;
    }
    bool qwen25 = text_has(text, len, "<tool_call>") &&
                  text_has(text, len, "(message.role == \"system\" and not loop.first)") &&
                  text_has(text, len, "(message.role == \"assistant\" and not message.tool_calls)");
    // Other templates that handle tools (Qwen3-Coder's) have tool-less paths
    // this code has not been checked against.
    if (!qwen25 && text_has(text, len, "tools"))
        return refuse_variant(text, len, "chatml with tool handling", "chatml, qwen2.5");
    format_init(out, qwen25 ? CHAT_TEMPLATE_QWEN25 : CHAT_TEMPLATE_CHATML);
    int rc = chat_default_system(text, len, out->default_system, sizeof(out->default_system));
    if (rc < 0) return -1;
    if (qwen25 && rc == 0)
        return refuse_variant(text, len, "Qwen2.5-style chatml without a default system prompt",
                              "qwen2.5, chatml");
    return 0;
}

// An [INST] template: Llama 2 or one of Mistral's.
static int detect_inst(const char *text, size_t len, struct chat_date today, struct chat_format *out) {
    static const char mistral_names[] =
        "mistral-legacy, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7-tekken";
    if (text_has(text, len, "<<SYS>>")) {
        format_init(out, CHAT_TEMPLATE_LLAMA2);
        return 0;
    }
    if (text_has(text, len, "[SYSTEM_PROMPT]")) {
        // Mistral Small 3.2's: no space after [INST], roles checked to
        // alternate, a default system prompt with today's date.
        if (!text_has(text, len, "'[INST]'") || !text_has(text, len, "must alternate") ||
            !text_has(text, len, "messages|length > 0 and messages[0]['role'] == 'system'"))
            return refuse_variant(text, len, "a Mistral [SYSTEM_PROMPT] template", mistral_names);
        format_init(out, CHAT_TEMPLATE_MISTRAL_V7_TEKKEN);
        int rc = template_set_string(text, len, "default_system_message", today, out->default_system,
                                     sizeof(out->default_system));
        if (rc < 0) return -1;
        if (rc == 0)
            return refuse_variant(text, len,
                                  "a Mistral [SYSTEM_PROMPT] template without "
                                  "default_system_message",
                                  mistral_names);
        return 0;
    }
    if (text_has(text, len, "[AVAILABLE_TOOLS]")) {
        // v3: the system prompt goes with the user message that is the last
        // message; templates that put it with the last user message differ.
        if (!text_has(text, len, "loop.last and system_message is defined"))
            return refuse_variant(text, len, "a Mistral v3 template", mistral_names);
        if (text_has(text, len, "\"[INST] \" + system_message") &&
            text_has(text, len, "\" \" + message[\"content\"]|trim + eos_token"))
            format_init(out, CHAT_TEMPLATE_MISTRAL_V3);
        else if (text_has(text, len, "\"[INST]\" + system_message") &&
                 text_has(text, len, "{{- message[\"content\"] + eos_token"))
            format_init(out, CHAT_TEMPLATE_MISTRAL_V3_TEKKEN);
        else
            return refuse_variant(text, len, "a Mistral v3 template", mistral_names);
        return 0;
    }
    if (text_has(text, len, "' [INST] ' + system_message + '\\n\\n'") &&
        text_has(text, len, "' ' + message['content'] + eos_token")) {
        format_init(out, CHAT_TEMPLATE_MISTRAL_V1);
        return 0;
    }
    if (!text_has(text, len, "system_message") && text_has(text, len, "'[INST] '") &&
        text_has(text, len, "' [/INST]'") && text_has(text, len, "{{ message['content'] + eos_token}}")) {
        format_init(out, CHAT_TEMPLATE_MISTRAL_LEGACY);
        return 0;
    }
    return refuse_variant(text, len, "an [INST] template", mistral_names);
}

int chat_detect_on(const char *text, size_t len, struct chat_date today, struct chat_format *out) {
    ST_ASSERT(out);
    format_init(out, CHAT_TEMPLATE_CHATML);
    if (!text || len == 0)
        return st_fail("chat template is empty; choose a family by name (" CHAT_KNOWN_FAMILIES ")");
    if (text_has(text, len, "<|im_start|>")) return detect_chatml(text, len, out);
    if (text_has(text, len, "[INST]")) return detect_inst(text, len, today, out);
    if (text_has(text, len, "<|assistant|>") && text_has(text, len, "<|end|>") &&
        text_has(text, len, "<|user|>")) {
        if (text_has(text, len, "bos_token")) // Phi-3-mini's first template, Apriel's
            return refuse_variant(text, len, "a <|user|> template that writes bos_token", "phi3");
        format_init(out, CHAT_TEMPLATE_PHI3);
        return 0;
    }
    if (text_has(text, len, "<|start_header_id|>") && text_has(text, len, "<|end_header_id|>")) {
        if (!text_has(text, len, "Cutting Knowledge Date: December 2023")) {
            // Llama 3.0's turn; function-calling templates (firefunction,
            // functionary) that add system text of their own lack it.
            if (!text_has(text, len, "message['content'] | trim + '<|eot_id|>'"))
                return refuse_variant(text, len, "a <|start_header_id|> template", "llama3, llama3.1");
            format_init(out, CHAT_TEMPLATE_LLAMA3);
            return 0;
        }
        // Llama 3.1/3.3 set date_string to a literal; 3.2 prefers
        // strftime_now(), which transformers and llama.cpp both provide.
        format_init(out, CHAT_TEMPLATE_LLAMA31);
        int rc = template_strftime(text, len, today, out->date_string, sizeof(out->date_string));
        if (rc == 0)
            rc = template_set_string(text, len, "date_string", today, out->date_string,
                                     sizeof(out->date_string));
        if (rc < 0) return -1;
        if (rc == 0) return refuse_variant(text, len, "a Llama 3.1 template without a date", "llama3.1");
        return 0;
    }
    if (text_has(text, len, "<start_of_turn>")) {
        if (text_has(text, len, "System role not supported")) {
            format_init(out, CHAT_TEMPLATE_GEMMA2);
        } else if (text_has(text, len, "first_user_prefix")) {
            format_init(out, CHAT_TEMPLATE_GEMMA3);
        } else {
            return refuse_variant(text, len, "a <start_of_turn> template", "gemma2, gemma3");
        }
        return 0;
    }
    char preview[256];
    text_preview(text, len, preview, sizeof(preview));
    return st_fail("chat template \"%s\" is of no known family (" CHAT_KNOWN_FAMILIES "); choose one by name",
                   preview);
}

int chat_detect(const char *text, size_t len, struct chat_format *out) {
    time_t now = time(NULL);
    struct tm tm;
    struct chat_date today = {2024, 7, 26};
    if (localtime_r(&now, &tm)) today = (struct chat_date){tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday};
    return chat_detect_on(text, len, today, out);
}
