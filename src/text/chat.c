// chat.c: chat-template families rendered in C to the same bytes Jinja gives
// for the family's reference template (tests/reference/templates/; detection
// is in chat_detect.c).
//
//   chatml    SmolLM2 / Qwen2 / OpenHermes: "<|im_start|>role\ncontent<|im_end|>\n";
//             a default system prompt, when the template has one, opens a
//             conversation that does not start with a system message.
//   qwen2.5   chatml whose template always opens with a system message (its
//             default "You are Qwen, ...") and raises on no messages.
//   qwen3     chatml without a default; an assistant turn after the last user
//             query shows its reasoning as "<think>\n...\n</think>\n\n", earlier
//             ones lose their <think> blocks; enable_thinking=false adds an
//             empty think block after the generation prompt.
//   phi4      "<|im_start|>role<|im_sep|>content<|im_end|>", no newlines.
//   llama2    Llama-2-chat: "<s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s>".
//   llama3    Llama-3-Instruct: "<|start_header_id|>role<|end_header_id|>\n\n"
//             + trimmed content + "<|eot_id|>", BOS before the first message.
//   llama3.1  Llama 3.1/3.2/3.3: as llama3, but always opens with a system block
//             "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n" + the
//             trimmed system message.
//   mistral-legacy  "<s>[INST] user [/INST]answer</s>", no system message.
//   mistral-v1      "<s> [INST] sys\n\nuser [/INST] answer</s>" (system prompt
//                   with the first user message).
//   mistral-v3      "<s>[INST] user[/INST] answer</s>", the system prompt with
//                   the last message when that is a user one, else nowhere.
//   mistral-v3-tekken  the same without the spaces and trim.
//   mistral-v7-tekken  "<s>[SYSTEM_PROMPT]sys[/SYSTEM_PROMPT][INST]user[/INST]answer</s>",
//                   a default system prompt (the template's, with the date).
//   gemma3    "<start_of_turn>user\n" ... "<end_of_turn>\n", assistant is "model",
//             a system message is merged into the first user turn.
//   gemma2    gemma3 without a system message (the template raises on one).
//   phi3      Phi-3.5-mini: "<|user|>\ncontent<|end|>\n"; an empty system message
//             is dropped; without a generation prompt the text ends with EOS.
//
// BOS: the templates that write bos_token (llama2, llama3, llama3.1, the
// mistrals, the gemmas) need fmt->bos, the vocabulary's BOS text, which the
// caller fills in after chat_detect()/chat_format_by_name(); rendering refuses
// an empty one. The result is meant to be tokenized with special tokens parsed
// and no BOS added.
// EOS: struct chat_format has no EOS field, so the EOS text the llama2 and
// Mistral templates write after an assistant turn is "</s>" (their
// vocabularies' EOS) and phi3's is "<|endoftext|>" (Phi-3 and Phi-3.5's
// tokenizer_config).
//
// Where a template raises an exception (role order, no messages), rendering
// fails with a message; where it silently skips a message, so does this code.
#include "text/chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// --- text helpers ------------------------------------------------------------

struct chat_buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void buf_put(struct chat_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_puts(struct chat_buf *b, const char *s) { buf_put(b, s, strlen(s)); }

// Python's str.isspace(), which str.strip() and Jinja's trim filter use.
static bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

// Decodes the UTF-8 sequence at s (n bytes left); returns its length, or 0 when
// it is not a well-formed sequence (such bytes are never whitespace).
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

// Python's s.strip() on UTF-8 text: narrows [*s, *s + *n) to drop leading and
// trailing whitespace.
static void py_strip(const char **s, size_t *n) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t a = 0, b = *n;
    uint32_t cp;
    size_t k;
    while (a < b && (k = utf8_decode(p + a, b - a, &cp)) > 0 && py_isspace(cp)) a += k;
    while (b > a) {
        size_t start = b - 1; // find the start of the last sequence
        while (start > a && b - start < 4 && (p[start] & 0xc0) == 0x80) start--;
        k = utf8_decode(p + start, b - start, &cp);
        if (k != b - start || !py_isspace(cp)) break;
        b = start;
    }
    *s = (const char *)p + a;
    *n = b - a;
}

static void buf_put_stripped(struct chat_buf *b, const char *s, size_t n) {
    py_strip(&s, &n);
    buf_put(b, s, n);
}

// Python's s.lstrip(chars)/rstrip(chars) for the one character c.
static void lstrip_char(const char **s, size_t *n, char c) {
    while (*n > 0 && **s == c) (*s)++, (*n)--;
}
static void rstrip_char(const char **s, size_t *n, char c) {
    while (*n > 0 && (*s)[*n - 1] == c) (*n)--;
}

// The first/last occurrence of needle in [s, s + n), or NULL.
static const char *find_first(const char *s, size_t n, const char *needle) {
    return memmem(s, n, needle, strlen(needle));
}
static const char *find_last(const char *s, size_t n, const char *needle) {
    const char *last = NULL, *p = s;
    size_t k = strlen(needle);
    while ((p = memmem(p, n - (size_t)(p - s), needle, k)) != NULL) last = p++;
    return last;
}

static bool has_prefix(const char *s, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}
static bool has_suffix(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

// --- rendering ---------------------------------------------------------------

enum chat_role { CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT, CHAT_ROLE_TOOL };
static const char *const chat_role_names[] = {"system", "user", "assistant", "tool"};

struct chat_msg {
    enum chat_role role;
    const char *text;
    size_t len;
    const struct chat_tool_call *calls; // [n_calls] (assistant)
    int n_calls;
};

// The tool definitions of a rendering.
struct chat_tools {
    const char *const *defs; // [n] each as tojson prints it
    int n;
};

static const char qwen_tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char qwen_tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

// Qwen's tool definitions block (the system turn's end included).
static void put_qwen_tools(struct chat_buf *b, const struct chat_tools *t) {
    buf_puts(b, qwen_tools_head);
    for (int i = 0; i < t->n; i++) {
        buf_puts(b, "\n");
        buf_puts(b, t->defs[i]);
    }
    buf_puts(b, qwen_tools_tail);
}

// One call as Qwen writes it: <tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>
static void put_qwen_call(struct chat_buf *b, const struct chat_tool_call *c) {
    buf_puts(b, "<tool_call>\n{\"name\": \"");
    buf_puts(b, c->name);
    buf_puts(b, "\", \"arguments\": ");
    buf_puts(b, c->arguments);
    buf_puts(b, "}\n</tool_call>");
}

// A tool result: consecutive results share one user turn.
static void put_qwen_tool_result(struct chat_buf *b, const struct chat_msg *m, int i, int n) {
    if (i == 0 || m[i - 1].role != CHAT_ROLE_TOOL) buf_puts(b, "<|im_start|>user");
    buf_puts(b, "\n<tool_response>\n");
    buf_put(b, m[i].text, m[i].len);
    buf_puts(b, "\n</tool_response>");
    if (i == n - 1 || m[i + 1].role != CHAT_ROLE_TOOL) buf_puts(b, "<|im_end|>\n");
}

// Checks that messages from `start` on alternate user, other, user, ... as the
// llama2, Mistral and Gemma templates require (their raise_exception).
static int chat_check_alternation(enum chat_template kind, const struct chat_msg *m, int n, int start) {
    for (int i = start; i < n; i++) {
        if ((m[i].role == CHAT_ROLE_USER) != ((i - start) % 2 == 0))
            return st_fail("chat_render: the %s template needs roles to alternate user/assistant "
                           "after an optional first system message, but message %d is %s",
                           chat_template_name(kind), i, chat_role_names[m[i].role]);
    }
    return 0;
}

// Refuses a system message after the first, for the templates that raise on one.
static int chat_check_no_late_system(enum chat_template kind, const struct chat_msg *m, int n) {
    for (int i = 1; i < n; i++) {
        if (m[i].role == CHAT_ROLE_SYSTEM)
            return st_fail("chat_render: the %s template takes a system message only first, but "
                           "message %d is system",
                           chat_template_name(kind), i);
    }
    return 0;
}

static void put_chatml(struct chat_buf *b, const struct chat_msg *m) {
    buf_puts(b, "<|im_start|>");
    buf_puts(b, chat_role_names[m->role]);
    buf_puts(b, "\n");
    buf_put(b, m->text, m->len);
    buf_puts(b, "<|im_end|>\n");
}

static void render_chatml(struct chat_buf *b, const struct chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) put_chatml(b, &m[i]);
    if (gen) buf_puts(b, "<|im_start|>assistant\n");
}

// Qwen2.5: the first message is a system one (the default was added before);
// with tools the definitions follow it in the same turn.
static void render_qwen25(struct chat_buf *b, const struct chat_msg *m, int n, bool gen,
                          const struct chat_tools *t) {
    for (int i = 0; i < n; i++) {
        if (i == 0 && t->n) {
            buf_puts(b, "<|im_start|>system\n");
            buf_put(b, m[0].text, m[0].len);
            buf_puts(b, "\n\n");
            put_qwen_tools(b, t);
        } else if (m[i].role == CHAT_ROLE_TOOL) {
            put_qwen_tool_result(b, m, i, n);
        } else if (m[i].role == CHAT_ROLE_ASSISTANT && m[i].n_calls) {
            buf_puts(b, "<|im_start|>assistant");
            if (m[i].len) {
                buf_puts(b, "\n");
                buf_put(b, m[i].text, m[i].len);
            }
            for (int k = 0; k < m[i].n_calls; k++) {
                buf_puts(b, "\n");
                put_qwen_call(b, &m[i].calls[k]);
            }
            buf_puts(b, "<|im_end|>\n");
        } else {
            put_chatml(b, &m[i]);
        }
    }
    if (gen) buf_puts(b, "<|im_start|>assistant\n");
}

static void render_qwen3(struct chat_buf *b, const struct chat_msg *m, int n, bool gen, bool enable_thinking,
                         const struct chat_tools *t) {
    // The last user message that is not a tool result is the query; the
    // reasoning of assistant turns after it is kept.
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        if (m[i].role == CHAT_ROLE_USER && !(has_prefix(m[i].text, m[i].len, "<tool_response>") &&
                                             has_suffix(m[i].text, m[i].len, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    if (t->n) { // the system message, then the definitions, in one turn
        buf_puts(b, "<|im_start|>system\n");
        if (n > 0 && m[0].role == CHAT_ROLE_SYSTEM) {
            buf_put(b, m[0].text, m[0].len);
            buf_puts(b, "\n\n");
        }
        put_qwen_tools(b, t);
    }
    for (int i = 0; i < n; i++) {
        if (i == 0 && t->n && m[0].role == CHAT_ROLE_SYSTEM) continue;
        if (m[i].role == CHAT_ROLE_TOOL) {
            put_qwen_tool_result(b, m, i, n);
            continue;
        }
        if (m[i].role != CHAT_ROLE_ASSISTANT) {
            put_chatml(b, &m[i]);
            continue;
        }
        // content: after the last </think>; reasoning: before the first one,
        // after the last <think> in that part.
        const char *content = m[i].text, *reasoning = "";
        size_t content_len = m[i].len, reasoning_len = 0;
        const char *close = find_first(m[i].text, m[i].len, "</think>");
        if (close) {
            const char *last_close = find_last(m[i].text, m[i].len, "</think>") + 8;
            content = last_close;
            content_len = m[i].len - (size_t)(last_close - m[i].text);
            lstrip_char(&content, &content_len, '\n');
            reasoning = m[i].text;
            reasoning_len = (size_t)(close - m[i].text);
            rstrip_char(&reasoning, &reasoning_len, '\n');
            const char *open = find_last(reasoning, reasoning_len, "<think>");
            if (open) {
                reasoning_len -= (size_t)(open + 7 - reasoning);
                reasoning = open + 7;
            }
            lstrip_char(&reasoning, &reasoning_len, '\n');
        }
        buf_puts(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || reasoning_len > 0)) {
            lstrip_char(&reasoning, &reasoning_len, '\n');
            rstrip_char(&reasoning, &reasoning_len, '\n');
            lstrip_char(&content, &content_len, '\n');
            buf_puts(b, "<think>\n");
            buf_put(b, reasoning, reasoning_len);
            buf_puts(b, "\n</think>\n\n");
        }
        buf_put(b, content, content_len);
        for (int k = 0; k < m[i].n_calls; k++) {
            if (k > 0 || content_len) buf_puts(b, "\n");
            put_qwen_call(b, &m[i].calls[k]);
        }
        buf_puts(b, "<|im_end|>\n");
    }
    if (gen) {
        buf_puts(b, "<|im_start|>assistant\n");
        if (!enable_thinking) buf_puts(b, "<think>\n\n</think>\n\n");
    }
}

static void render_phi4(struct chat_buf *b, const struct chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        buf_puts(b, "<|im_start|>");
        buf_puts(b, chat_role_names[m[i].role]);
        buf_puts(b, "<|im_sep|>");
        buf_put(b, m[i].text, m[i].len);
        buf_puts(b, "<|im_end|>");
    }
    if (gen) buf_puts(b, "<|im_start|>assistant<|im_sep|>");
}

static int render_llama2(struct chat_buf *b, const struct chat_msg *m, int n, const char *bos) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (chat_check_alternation(CHAT_TEMPLATE_LLAMA2, m, n, start) < 0) return -1;
    for (int i = start; i < n; i++) {
        // The system prompt joins the first turn before strip(), so only the
        // turn's end is stripped then.
        struct chat_buf turn = {0};
        if (start && i == start) {
            buf_puts(&turn, "<<SYS>>\n");
            buf_put(&turn, m[0].text, m[0].len);
            buf_puts(&turn, "\n<</SYS>>\n\n");
        }
        buf_put(&turn, m[i].text, m[i].len);
        if (turn.oom) {
            b->oom = true;
        } else if (m[i].role == CHAT_ROLE_USER) {
            buf_puts(b, bos);
            buf_puts(b, "[INST] ");
            buf_put_stripped(b, turn.p, turn.len);
            buf_puts(b, " [/INST]");
        } else if (m[i].role == CHAT_ROLE_ASSISTANT) {
            buf_puts(b, " ");
            buf_put_stripped(b, turn.p, turn.len);
            buf_puts(b, " </s>");
        } // a later system message is skipped, as the template does
        free(turn.p);
    }
    return 0;
}

static void put_llama3_turn(struct chat_buf *b, const char *role, const char *text, size_t len) {
    buf_puts(b, "<|start_header_id|>");
    buf_puts(b, role);
    buf_puts(b, "<|end_header_id|>\n\n");
    buf_put_stripped(b, text, len);
    buf_puts(b, "<|eot_id|>");
}

static void render_llama3(struct chat_buf *b, const struct chat_msg *m, int n, bool gen, const char *bos) {
    for (int i = 0; i < n; i++) {
        if (i == 0) buf_puts(b, bos);
        put_llama3_turn(b, chat_role_names[m[i].role], m[i].text, m[i].len);
    }
    if (gen) buf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_llama31(struct chat_buf *b, const struct chat_msg *m, int n, bool gen,
                           const struct chat_format *fmt) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    buf_puts(b, fmt->bos);
    buf_puts(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                "2023\nToday Date: ");
    buf_puts(b, fmt->date_string);
    buf_puts(b, "\n\n");
    if (start) buf_put_stripped(b, m[0].text, m[0].len);
    buf_puts(b, "<|eot_id|>");
    for (int i = start; i < n; i++) put_llama3_turn(b, chat_role_names[m[i].role], m[i].text, m[i].len);
    if (gen) buf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int render_mistral_legacy(struct chat_buf *b, const struct chat_msg *m, int n, const char *bos) {
    if (chat_check_alternation(CHAT_TEMPLATE_MISTRAL_LEGACY, m, n, 0) < 0 ||
        chat_check_no_late_system(CHAT_TEMPLATE_MISTRAL_LEGACY, m, n) < 0)
        return -1;
    buf_puts(b, bos);
    for (int i = 0; i < n; i++) {
        if (m[i].role == CHAT_ROLE_USER) {
            buf_puts(b, "[INST] ");
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, " [/INST]");
        } else {
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "</s>");
        }
    }
    return 0;
}

static int render_mistral_v1(struct chat_buf *b, const struct chat_msg *m, int n, const char *bos) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (chat_check_alternation(CHAT_TEMPLATE_MISTRAL_V1, m, n, start) < 0 ||
        chat_check_no_late_system(CHAT_TEMPLATE_MISTRAL_V1, m, n) < 0)
        return -1;
    buf_puts(b, bos);
    for (int i = start; i < n; i++) {
        if (m[i].role == CHAT_ROLE_USER) {
            buf_puts(b, " [INST] ");
            if (start && i == start) {
                buf_put(b, m[0].text, m[0].len);
                buf_puts(b, "\n\n");
            }
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, " [/INST]");
        } else {
            buf_puts(b, " ");
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "</s>");
        }
    }
    return 0;
}

// v3 and v3-tekken: the system prompt joins the last message when it is a
// user message (a conversation ending with an answer loses it, as the
// template's "loop.last" does).
static int render_mistral_v3(struct chat_buf *b, const struct chat_msg *m, int n, const char *bos,
                             bool tekken) {
    enum chat_template kind = tekken ? CHAT_TEMPLATE_MISTRAL_V3_TEKKEN : CHAT_TEMPLATE_MISTRAL_V3;
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (chat_check_alternation(kind, m, n, start) < 0 || chat_check_no_late_system(kind, m, n) < 0) return -1;
    buf_puts(b, bos);
    for (int i = start; i < n; i++) {
        if (m[i].role == CHAT_ROLE_USER) {
            buf_puts(b, tekken ? "[INST]" : "[INST] ");
            if (start && i == n - 1) {
                buf_put(b, m[0].text, m[0].len);
                buf_puts(b, "\n\n");
            }
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "[/INST]");
        } else if (tekken) {
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "</s>");
        } else {
            buf_puts(b, " ");
            buf_put_stripped(b, m[i].text, m[i].len);
            buf_puts(b, "</s>");
        }
    }
    return 0;
}

// v7-tekken: the first message, when system (the default prompt is one by
// now), is the [SYSTEM_PROMPT] block; later system messages are blocks where
// they stand, counted as the assistant's side of the alternation.
static int render_mistral_v7(struct chat_buf *b, const struct chat_msg *m, int n, const char *bos) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (chat_check_alternation(CHAT_TEMPLATE_MISTRAL_V7_TEKKEN, m, n, start) < 0) return -1;
    buf_puts(b, bos);
    for (int i = 0; i < n; i++) {
        if (m[i].role == CHAT_ROLE_SYSTEM) {
            buf_puts(b, "[SYSTEM_PROMPT]");
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "[/SYSTEM_PROMPT]");
        } else if (m[i].role == CHAT_ROLE_USER) {
            buf_puts(b, "[INST]");
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "[/INST]");
        } else {
            buf_put(b, m[i].text, m[i].len);
            buf_puts(b, "</s>");
        }
    }
    return 0;
}

static int render_gemma(struct chat_buf *b, const struct chat_msg *m, int n, bool gen, const char *bos,
                        enum chat_template kind) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (start && kind == CHAT_TEMPLATE_GEMMA2)
        return st_fail("chat_render: the gemma2 template does not take a system message (\"System "
                       "role not supported\"); leave it out or put it in the first user message");
    if (chat_check_alternation(kind, m, n, start) < 0) return -1;
    buf_puts(b, bos);
    for (int i = start; i < n; i++) {
        buf_puts(b, "<start_of_turn>");
        buf_puts(b, m[i].role == CHAT_ROLE_ASSISTANT ? "model" : chat_role_names[m[i].role]);
        buf_puts(b, "\n");
        if (start && i == start) { // the system text is not trimmed, the turn is
            buf_put(b, m[0].text, m[0].len);
            buf_puts(b, "\n\n");
        }
        buf_put_stripped(b, m[i].text, m[i].len);
        buf_puts(b, "<end_of_turn>\n");
    }
    if (gen) buf_puts(b, "<start_of_turn>model\n");
    return 0;
}

static void render_phi3(struct chat_buf *b, const struct chat_msg *m, int n, bool gen) {
    static const char *const tags[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};
    for (int i = 0; i < n; i++) {
        if (m[i].role == CHAT_ROLE_SYSTEM && m[i].len == 0) continue;
        buf_puts(b, tags[m[i].role]);
        buf_put(b, m[i].text, m[i].len);
        buf_puts(b, "<|end|>\n");
    }
    buf_puts(b, gen ? "<|assistant|>\n" : "<|endoftext|>");
}

// Whether the family's template writes bos_token.
static bool family_writes_bos(enum chat_template kind) {
    switch (kind) {
    case CHAT_TEMPLATE_LLAMA2:
    case CHAT_TEMPLATE_LLAMA3:
    case CHAT_TEMPLATE_LLAMA31:
    case CHAT_TEMPLATE_MISTRAL_LEGACY:
    case CHAT_TEMPLATE_MISTRAL_V1:
    case CHAT_TEMPLATE_MISTRAL_V3:
    case CHAT_TEMPLATE_MISTRAL_V3_TEKKEN:
    case CHAT_TEMPLATE_MISTRAL_V7_TEKKEN:
    case CHAT_TEMPLATE_GEMMA2:
    case CHAT_TEMPLATE_GEMMA3:
        return true;
    default:
        return false;
    }
}

// Whether the family's template raises on an empty conversation (it reads
// messages[0] unguarded, or checks for one).
static bool family_needs_messages(enum chat_template kind) {
    switch (kind) {
    case CHAT_TEMPLATE_QWEN25:
    case CHAT_TEMPLATE_QWEN3:
    case CHAT_TEMPLATE_LLAMA2:
    case CHAT_TEMPLATE_LLAMA31:
    case CHAT_TEMPLATE_MISTRAL_V1:
    case CHAT_TEMPLATE_MISTRAL_V3:
    case CHAT_TEMPLATE_MISTRAL_V3_TEKKEN:
    case CHAT_TEMPLATE_GEMMA2:
    case CHAT_TEMPLATE_GEMMA3:
        return true;
    default:
        return false;
    }
}

bool chat_has_tools(enum chat_template kind) {
    return kind == CHAT_TEMPLATE_QWEN25 || kind == CHAT_TEMPLATE_QWEN3;
}

char *chat_render(const struct chat_format *fmt, const struct chat_message *msgs, int n,
                  bool add_generation_prompt) {
    return chat_render_tools(fmt, msgs, NULL, n, NULL, 0, add_generation_prompt);
}

char *chat_render_tools(const struct chat_format *fmt, const struct chat_message *msgs,
                        const struct chat_calls *calls, int n, const char *const *tools, int n_tools,
                        bool add_generation_prompt) {
    ST_ASSERT(fmt);
    const struct chat_tools t = {tools, n_tools};
    if ((unsigned)fmt->kind >= CHAT_TEMPLATE_COUNT) {
        st_fail("chat_render: chat format kind %d is not a known family", (int)fmt->kind);
        return NULL;
    }
    enum chat_template kind = fmt->kind;
    const char *family = chat_template_name(kind);
    if (n < 0 || (n > 0 && !msgs)) {
        st_fail("chat_render: %d messages at %p", n, (const void *)msgs);
        return NULL;
    }
    if (memchr(fmt->bos, '\0', sizeof(fmt->bos)) == NULL ||
        memchr(fmt->default_system, '\0', sizeof(fmt->default_system)) == NULL ||
        memchr(fmt->date_string, '\0', sizeof(fmt->date_string)) == NULL) {
        st_fail("chat_render: fmt->bos, fmt->default_system or fmt->date_string is not "
                "NUL-terminated");
        return NULL;
    }
    if (family_writes_bos(kind) && fmt->bos[0] == '\0') {
        st_fail("chat_render: the %s template writes BOS but fmt->bos is empty; set it to the "
                "vocabulary's BOS text",
                family);
        return NULL;
    }
    if (kind == CHAT_TEMPLATE_LLAMA31 && fmt->date_string[0] == '\0') {
        st_fail("chat_render: the llama3.1 template shows a date but fmt->date_string is empty");
        return NULL;
    }
    if (n_tools && !chat_has_tools(kind)) {
        st_fail("chat_render: tool definitions are not supported with the %s template (only "
                "qwen2.5 and qwen3 render them)",
                family);
        return NULL;
    }
    if (family_needs_messages(kind) && n == 0) {
        st_fail("chat_render: the %s template needs at least one message", family);
        return NULL;
    }

    // The messages as roles and lengths, after the default system prompt that
    // opens a conversation whose first message is not a system one (Mistral
    // v7's template shows its default even for no messages).
    bool add_default = fmt->default_system[0] && (n > 0 || kind == CHAT_TEMPLATE_MISTRAL_V7_TEKKEN);
    struct chat_msg *m = calloc((size_t)n + 1, sizeof(*m));
    if (!m) {
        st_fail("chat_render: out of memory for %d messages", n);
        return NULL;
    }
    int count = 0;
    if (add_default && (n == 0 || !msgs[0].role || strcmp(msgs[0].role, "system") != 0))
        m[count++] =
            (struct chat_msg){CHAT_ROLE_SYSTEM, fmt->default_system, strlen(fmt->default_system), NULL, 0};
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role ? msgs[i].role : "(null)";
        int r = -1;
        for (int k = 0; k < (chat_has_tools(kind) ? 4 : 3); k++)
            if (strcmp(role, chat_role_names[k]) == 0) r = k;
        const struct chat_calls mc = calls ? calls[i] : (struct chat_calls){NULL, 0};
        if (r < 0 || !msgs[i].content || (mc.n && (r != CHAT_ROLE_ASSISTANT || !chat_has_tools(kind)))) {
            if (r < 0)
                st_fail("chat_render: message %d has role \"%s\"; roles are system, user and "
                        "assistant%s",
                        i, role, chat_has_tools(kind) ? " and tool" : "");
            else if (mc.n)
                st_fail("chat_render: message %d (%s) has tool calls, which the %s template "
                        "does not render",
                        i, role, family);
            else
                st_fail("chat_render: message %d (%s) has no content", i, role);
            free(m);
            return NULL;
        }
        m[count++] =
            (struct chat_msg){(enum chat_role)r, msgs[i].content, strlen(msgs[i].content), mc.calls, mc.n};
    }

    struct chat_buf b = {0};
    buf_put(&b, "", 0); // an empty rendering is "", not NULL
    const bool gen = add_generation_prompt;
    int rc = 0;
    switch (kind) {
    case CHAT_TEMPLATE_CHATML:
        render_chatml(&b, m, count, gen);
        break;
    case CHAT_TEMPLATE_QWEN25:
        render_qwen25(&b, m, count, gen, &t);
        break;
    case CHAT_TEMPLATE_QWEN3:
        render_qwen3(&b, m, count, gen, fmt->enable_thinking, &t);
        break;
    case CHAT_TEMPLATE_PHI4:
        render_phi4(&b, m, count, gen);
        break;
    case CHAT_TEMPLATE_LLAMA2:
        rc = render_llama2(&b, m, count, fmt->bos);
        break;
    case CHAT_TEMPLATE_LLAMA3:
        render_llama3(&b, m, count, gen, fmt->bos);
        break;
    case CHAT_TEMPLATE_LLAMA31:
        render_llama31(&b, m, count, gen, fmt);
        break;
    case CHAT_TEMPLATE_MISTRAL_LEGACY:
        rc = render_mistral_legacy(&b, m, count, fmt->bos);
        break;
    case CHAT_TEMPLATE_MISTRAL_V1:
        rc = render_mistral_v1(&b, m, count, fmt->bos);
        break;
    case CHAT_TEMPLATE_MISTRAL_V3:
        rc = render_mistral_v3(&b, m, count, fmt->bos, false);
        break;
    case CHAT_TEMPLATE_MISTRAL_V3_TEKKEN:
        rc = render_mistral_v3(&b, m, count, fmt->bos, true);
        break;
    case CHAT_TEMPLATE_MISTRAL_V7_TEKKEN:
        rc = render_mistral_v7(&b, m, count, fmt->bos);
        break;
    case CHAT_TEMPLATE_GEMMA2:
    case CHAT_TEMPLATE_GEMMA3:
        rc = render_gemma(&b, m, count, gen, fmt->bos, kind);
        break;
    case CHAT_TEMPLATE_PHI3:
        render_phi3(&b, m, count, gen);
        break;
    case CHAT_TEMPLATE_COUNT:
        ST_ASSERT(0);
        break;
    }
    free(m);
    if (rc == 0 && b.oom) rc = st_fail("chat_render: out of memory for the %s prompt", family);
    if (rc < 0) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
