// chat.h: chat templates, detected from tokenizer.chat_template and rendered in C.
//
// Strata does not run Jinja: it recognises the template families below by
// their distinctive text and renders them with code checked against Jinja's own
// rendering of the real templates (tests/reference/chat_reference.py).
#ifndef STRATA_CHAT_H
#define STRATA_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum chat_template {
    CHAT_TEMPLATE_CHATML,
    CHAT_TEMPLATE_LLAMA2,
    CHAT_TEMPLATE_LLAMA3,
    CHAT_TEMPLATE_MISTRAL,
    CHAT_TEMPLATE_GEMMA,
    CHAT_TEMPLATE_PHI3,
};

struct chat_message {
    const char *role; // "system", "user" or "assistant"
    const char *content;
};

// A detected template: its family and what the family's text fixes (a default
// system prompt some chatml templates add, the BOS text some templates emit).
struct chat_format {
    enum chat_template kind;
    char default_system[512]; // "" if none
    char bos[64];             // text of BOS when the template writes it, else ""
};

// Detects the family of template text (len bytes). Returns 0, or -1 with a
// message that names the unknown template (its first characters) and says
// which families are known.
int chat_detect(const char *text, size_t len, struct chat_format *out);
// Parses a family name given by the user ("chatml", "llama3", ...): 0 or -1.
int chat_format_by_name(const char *name, struct chat_format *out);
const char *chat_template_name(enum chat_template kind);

// Renders n messages, followed by the assistant's opening when
// add_generation_prompt. Returns a malloc'd string, or NULL with a message
// (unknown role, a role order the family does not allow).
char *chat_render(const struct chat_format *fmt, const struct chat_message *msgs, int n,
                  bool add_generation_prompt);

#endif
