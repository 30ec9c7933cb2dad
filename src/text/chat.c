// chat.c: chat-template families, detected from the template text and rendered
// in C to the same bytes Jinja gives for the family's reference template.
//
// The reference template of each family (tests/reference/templates/):
//   chatml   SmolLM2 / Qwen2 / OpenHermes: "<|im_start|>role\ncontent<|im_end|>\n";
//            a default system prompt, when the template has one, opens a
//            conversation that does not start with a system message.
//   llama2   Llama-2-chat: "<s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s>".
//   llama3   Llama-3-Instruct: "<|start_header_id|>role<|end_header_id|>\n\n"
//            + trimmed content + "<|eot_id|>", BOS before the first message.
//   mistral  Mistral "v1" (Mistral-7B-Instruct-v0.1/v0.2, Mixtral-8x7B after their
//            2024 update): "<s> [INST] sys\n\nuser [/INST] answer</s>". Other
//            Mistral templates (v3, v7, the 2023 one) are detected as this family
//            and rendered as v1, which differs from them in spaces only.
//   gemma    Gemma 3: "<start_of_turn>user\n" ... "<end_of_turn>\n", assistant
//            is "model", a system message is merged into the first user turn.
//   phi3     Phi-3.5-mini: "<|user|>\ncontent<|end|>\n"; an empty system message
//            is dropped; without a generation prompt the text ends with EOS.
//
// BOS: the templates that write bos_token (llama2, llama3, mistral, gemma) need
// fmt->bos, the vocabulary's BOS text, which the caller fills in after
// chat_detect()/chat_format_by_name(); rendering refuses an empty one. The
// result is meant to be tokenized with special tokens parsed and no BOS added.
// EOS: struct chat_format has no EOS field, so the EOS text the llama2 and
// mistral templates write after an assistant turn is "</s>" (their vocabularies'
// EOS) and phi3's is "<|endoftext|>" (Phi-3 and Phi-3.5's tokenizer_config).
//
// Where a template raises an exception (role order, no messages), rendering
// fails with a message; where it silently skips a message, so does this code.
#include "text/chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define CHAT_N_FAMILIES 6

static const char *const chat_family_names[CHAT_N_FAMILIES] = {
    [CHAT_TEMPLATE_CHATML] = "chatml", [CHAT_TEMPLATE_LLAMA2] = "llama2",
    [CHAT_TEMPLATE_LLAMA3] = "llama3", [CHAT_TEMPLATE_MISTRAL] = "mistral",
    [CHAT_TEMPLATE_GEMMA] = "gemma",   [CHAT_TEMPLATE_PHI3] = "phi3",
};

#define CHAT_KNOWN_FAMILIES "chatml, llama2, llama3, mistral, gemma, phi3"

const char *chat_template_name(enum chat_template kind) {
    if ((unsigned)kind >= CHAT_N_FAMILIES) return "unknown";
    return chat_family_names[kind];
}

int chat_format_by_name(const char *name, struct chat_format *out) {
    ST_ASSERT(out);
    memset(out, 0, sizeof(*out));
    for (int i = 0; name && i < CHAT_N_FAMILIES; i++) {
        if (strcmp(name, chat_family_names[i]) == 0) {
            out->kind = (enum chat_template)i;
            return 0;
        }
    }
    return st_fail("chat template family \"%s\" is unknown; known families: " CHAT_KNOWN_FAMILIES,
                   name ? name : "(null)");
}

// --- detection ---------------------------------------------------------------

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

// The default system prompt of a chatml template: the text of a string literal
// '<|im_start|>system\n' DEFAULT '<|im_end|>' in one piece, as SmolLM2's and
// Qwen2's templates write it for a conversation that does not open with a
// system message. A run that leaves the literal (its closing quote) or holds
// template markup is a system message built from variables, not a default.
// Returns 1 and fills out, 0 when there is none, -1 when it does not fit.
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
        if (s < end && *s == '\n') s += 1;
        else if (end - s >= 2 && s[0] == '\\' && s[1] == 'n') s += 2;
        else continue;
        const char *e = memmem(s, (size_t)(end - s), close, sizeof(close) - 1);
        if (!e) return 0;
        size_t o = 0;
        bool literal = true;
        for (const char *q = s; q < e && literal; q++) {
            char c = *q;
            if (c == quote) {
                literal = false;
            } else if (c == '{' && q + 1 < e && (q[1] == '{' || q[1] == '%' || q[1] == '#')) {
                literal = false;
            } else {
                if (c == '\\' && q + 1 < e) {
                    q++; // Python/Jinja string-literal escapes
                    switch (*q) {
                    case 'n': c = '\n'; break;
                    case 't': c = '\t'; break;
                    case 'r': c = '\r'; break;
                    case '\\': case '\'': case '"': c = *q; break;
                    default: // unknown escapes stay as written
                        if (o + 1 < cap) out[o] = '\\';
                        o++;
                        c = *q;
                    }
                }
                if (o + 1 < cap) out[o] = c;
                o++;
            }
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

int chat_detect(const char *text, size_t len, struct chat_format *out) {
    ST_ASSERT(out);
    memset(out, 0, sizeof(*out));
    if (!text || len == 0)
        return st_fail("chat template is empty; choose a family by name (" CHAT_KNOWN_FAMILIES ")");
    char preview[256];
    if (text_has(text, len, "<|im_start|>")) {
        if (text_has(text, len, "<|im_sep|>")) {
            text_preview(text, len, preview, sizeof(preview));
            return st_fail("chat template \"%s\" is chatml with <|im_sep|> (Phi-4 style), which is not "
                           "supported; known families: " CHAT_KNOWN_FAMILIES,
                           preview);
        }
        out->kind = CHAT_TEMPLATE_CHATML;
        if (chat_default_system(text, len, out->default_system, sizeof(out->default_system)) < 0)
            return -1;
    } else if (text_has(text, len, "[INST]")) {
        out->kind = text_has(text, len, "<<SYS>>") ? CHAT_TEMPLATE_LLAMA2 : CHAT_TEMPLATE_MISTRAL;
    } else if (text_has(text, len, "<|assistant|>") && text_has(text, len, "<|end|>")) {
        out->kind = CHAT_TEMPLATE_PHI3;
    } else if (text_has(text, len, "<|start_header_id|>") && text_has(text, len, "<|end_header_id|>")) {
        out->kind = CHAT_TEMPLATE_LLAMA3;
    } else if (text_has(text, len, "<start_of_turn>")) {
        out->kind = CHAT_TEMPLATE_GEMMA;
    } else {
        text_preview(text, len, preview, sizeof(preview));
        return st_fail("chat template \"%s\" is of no known family (" CHAT_KNOWN_FAMILIES
                       "); choose one by name",
                       preview);
    }
    return 0;
}

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
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
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

// --- rendering ---------------------------------------------------------------

enum chat_role { CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT };
static const char *const chat_role_names[] = {"system", "user", "assistant"};

struct chat_msg {
    enum chat_role role;
    const char *text;
    size_t len;
};

// Checks that messages from `start` on alternate user, other, user, ... as the
// llama2, mistral and gemma templates require (their raise_exception).
static int chat_check_alternation(enum chat_template kind, const struct chat_msg *m, int n,
                                  int start) {
    for (int i = start; i < n; i++) {
        if ((m[i].role == CHAT_ROLE_USER) != ((i - start) % 2 == 0))
            return st_fail("chat_render: the %s template needs roles to alternate user/assistant "
                           "after an optional first system message, but message %d is %s",
                           chat_family_names[kind], i, chat_role_names[m[i].role]);
    }
    return 0;
}

static void render_chatml(struct chat_buf *b, const struct chat_msg *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        buf_puts(b, "<|im_start|>");
        buf_puts(b, chat_role_names[m[i].role]);
        buf_puts(b, "\n");
        buf_put(b, m[i].text, m[i].len);
        buf_puts(b, "<|im_end|>\n");
    }
    if (gen) buf_puts(b, "<|im_start|>assistant\n");
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

static void render_llama3(struct chat_buf *b, const struct chat_msg *m, int n, bool gen,
                          const char *bos) {
    for (int i = 0; i < n; i++) {
        if (i == 0) buf_puts(b, bos);
        buf_puts(b, "<|start_header_id|>");
        buf_puts(b, chat_role_names[m[i].role]);
        buf_puts(b, "<|end_header_id|>\n\n");
        buf_put_stripped(b, m[i].text, m[i].len);
        buf_puts(b, "<|eot_id|>");
    }
    if (gen) buf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int render_mistral(struct chat_buf *b, const struct chat_msg *m, int n, const char *bos) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (chat_check_alternation(CHAT_TEMPLATE_MISTRAL, m, n, start) < 0) return -1;
    for (int i = start; i < n; i++) {
        if (m[i].role == CHAT_ROLE_SYSTEM)
            return st_fail("chat_render: the mistral template takes a system message only first, "
                           "but message %d is system",
                           i);
    }
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

static int render_gemma(struct chat_buf *b, const struct chat_msg *m, int n, bool gen,
                        const char *bos) {
    int start = n > 0 && m[0].role == CHAT_ROLE_SYSTEM;
    if (chat_check_alternation(CHAT_TEMPLATE_GEMMA, m, n, start) < 0) return -1;
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

char *chat_render(const struct chat_format *fmt, const struct chat_message *msgs, int n,
                  bool add_generation_prompt) {
    ST_ASSERT(fmt);
    if ((unsigned)fmt->kind >= CHAT_N_FAMILIES) {
        st_fail("chat_render: chat format kind %d is not a known family", (int)fmt->kind);
        return NULL;
    }
    enum chat_template kind = fmt->kind;
    const char *family = chat_family_names[kind];
    if (n < 0 || (n > 0 && !msgs)) {
        st_fail("chat_render: %d messages at %p", n, (const void *)msgs);
        return NULL;
    }
    if (memchr(fmt->bos, '\0', sizeof(fmt->bos)) == NULL ||
        memchr(fmt->default_system, '\0', sizeof(fmt->default_system)) == NULL) {
        st_fail("chat_render: fmt->bos or fmt->default_system is not NUL-terminated");
        return NULL;
    }
    bool writes_bos = kind == CHAT_TEMPLATE_LLAMA2 || kind == CHAT_TEMPLATE_LLAMA3 ||
                      kind == CHAT_TEMPLATE_MISTRAL || kind == CHAT_TEMPLATE_GEMMA;
    if (writes_bos && fmt->bos[0] == '\0') {
        st_fail("chat_render: the %s template writes BOS but fmt->bos is empty; set it to the "
                "vocabulary's BOS text",
                family);
        return NULL;
    }
    bool needs_messages = kind == CHAT_TEMPLATE_LLAMA2 || kind == CHAT_TEMPLATE_MISTRAL ||
                          kind == CHAT_TEMPLATE_GEMMA;
    if (needs_messages && n == 0) {
        st_fail("chat_render: the %s template needs at least one message", family);
        return NULL;
    }

    // The messages as roles and lengths, after the default system prompt that
    // opens a conversation whose first message is not a system one.
    bool add_default = fmt->default_system[0] && n > 0;
    struct chat_msg *m = calloc((size_t)n + 1, sizeof(*m));
    if (!m) {
        st_fail("chat_render: out of memory for %d messages", n);
        return NULL;
    }
    int count = 0;
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role ? msgs[i].role : "(null)";
        int r = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(role, chat_role_names[k]) == 0) r = k;
        if (r < 0 || !msgs[i].content) {
            if (r < 0)
                st_fail("chat_render: message %d has role \"%s\"; roles are system, user and "
                        "assistant",
                        i, role);
            else
                st_fail("chat_render: message %d (%s) has no content", i, role);
            free(m);
            return NULL;
        }
        if (i == 0 && add_default && r != CHAT_ROLE_SYSTEM)
            m[count++] = (struct chat_msg){CHAT_ROLE_SYSTEM, fmt->default_system,
                                           strlen(fmt->default_system)};
        m[count++] = (struct chat_msg){(enum chat_role)r, msgs[i].content, strlen(msgs[i].content)};
    }

    struct chat_buf b = {0};
    buf_put(&b, "", 0); // an empty rendering is "", not NULL
    int rc = 0;
    switch (kind) {
    case CHAT_TEMPLATE_CHATML: render_chatml(&b, m, count, add_generation_prompt); break;
    case CHAT_TEMPLATE_LLAMA2: rc = render_llama2(&b, m, count, fmt->bos); break;
    case CHAT_TEMPLATE_LLAMA3: render_llama3(&b, m, count, add_generation_prompt, fmt->bos); break;
    case CHAT_TEMPLATE_MISTRAL: rc = render_mistral(&b, m, count, fmt->bos); break;
    case CHAT_TEMPLATE_GEMMA: rc = render_gemma(&b, m, count, add_generation_prompt, fmt->bos); break;
    case CHAT_TEMPLATE_PHI3: render_phi3(&b, m, count, add_generation_prompt); break;
    }
    free(m);
    if (rc == 0 && b.oom) rc = st_fail("chat_render: out of memory for the %s prompt", family);
    if (rc < 0) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
