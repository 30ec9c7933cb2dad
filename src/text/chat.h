// chat.h: chat templates, detected from tokenizer.chat_template and rendered in C.
//
// Strata does not run Jinja: it recognises the template families below by
// their distinctive text and renders them with code checked against Jinja's own
// rendering of the real templates (tests/reference/chat_reference.py). A
// template that looks like a family but differs from the variants this code
// renders is refused by chat_detect rather than rendered approximately.
#ifndef STRATA_CHAT_H
#define STRATA_CHAT_H

#include <stdbool.h>
#include <stddef.h>

// One value per rendering rule set; the comment names the models whose
// template it renders byte for byte.
enum chat_template {
    CHAT_TEMPLATE_CHATML,            // SmolLM2, Qwen2, OpenHermes: <|im_start|>role\n...<|im_end|>\n
    CHAT_TEMPLATE_LLAMA2,            // Llama-2-chat
    CHAT_TEMPLATE_LLAMA3,            // Llama 3.0 Instruct
    CHAT_TEMPLATE_MISTRAL_V1,        // Mistral-7B-Instruct v0.1/v0.2, Mixtral-8x7B (2024 template)
    CHAT_TEMPLATE_GEMMA3,            // Gemma 3: a system message joins the first user turn
    CHAT_TEMPLATE_PHI3,              // Phi-3.5-mini
    CHAT_TEMPLATE_QWEN25,            // Qwen2.5 Instruct: chatml, a default system prompt
    CHAT_TEMPLATE_QWEN3,             // Qwen3: chatml with <think> blocks
    CHAT_TEMPLATE_PHI4,              // Phi-4: <|im_start|>role<|im_sep|>...<|im_end|>
    CHAT_TEMPLATE_LLAMA31,           // Llama 3.1/3.2/3.3: a system block with the date
    CHAT_TEMPLATE_MISTRAL_LEGACY,    // Mistral-7B-Instruct / Mixtral before the v1 template
    CHAT_TEMPLATE_MISTRAL_V3,        // Mistral-7B-Instruct-v0.3, Mixtral-8x22B
    CHAT_TEMPLATE_MISTRAL_V3_TEKKEN, // Mistral-Nemo
    CHAT_TEMPLATE_MISTRAL_V7_TEKKEN, // Mistral-Small-3.2: [SYSTEM_PROMPT]...[/SYSTEM_PROMPT]
    CHAT_TEMPLATE_GEMMA2,            // Gemma 2 (and 1): no system message
    CHAT_TEMPLATE_COUNT
};

// A tool call of an earlier assistant turn.
struct chat_tool_call {
    const char *name;
    const char *arguments; // a JSON object as chat_json_dumps writes it
};

struct chat_message {
    const char *role; // "system", "user" or "assistant"; "tool" with chat_render_tools
    const char *content;
};

// The tool calls of one message (chat_render_tools), beside the message array.
struct chat_calls {
    const struct chat_tool_call *calls; // [n]
    int n;
};

// A detected template: its family and what the template's text fixes.
struct chat_format {
    enum chat_template kind;
    // qwen3: false writes an empty <think>\n\n</think>\n\n after the generation
    // prompt, as the template does for enable_thinking=false; true (the
    // template's default) writes nothing. Other families ignore it.
    bool enable_thinking;
    char date_string[32];      // llama3.1: the "Today Date:" text; "" for other families
    char default_system[4096]; // a system prompt the template uses when the
                               // conversation has none; "" if none
    char bos[64];              // text of BOS when the template writes it, else ""
};

// The date a template's strftime_now() sees.
struct chat_date {
    int year, month, day; // month 1-12
};

// Detects the family of template text (len bytes) as of today's local date
// (Llama 3.2 and Mistral Small 3.x templates write the date). Returns 0, or
// -1 with a message that names the template (its first characters) and what
// to do: choose a family by name.
int chat_detect(const char *text, size_t len, struct chat_format *out);
// chat_detect with `today` as the date.
int chat_detect_on(const char *text, size_t len, struct chat_date today, struct chat_format *out);
// Parses a family name given by the user ("chatml", "qwen3", "mistral-v3",
// ...; "mistral" and "gemma" name mistral-v1 and gemma3): 0 or -1. The format
// holds what the family's rules fix (Qwen2.5's default system prompt, Llama
// 3.1's default date), nothing from a template text.
int chat_format_by_name(const char *name, struct chat_format *out);
const char *chat_template_name(enum chat_template kind);
// Whether the family reads enable_thinking (a --no-think option applies).
bool chat_has_thinking(enum chat_template kind);

// Renders n messages, followed by the assistant's opening when
// add_generation_prompt (families whose templates ignore it, like Mistral's,
// ignore it too). Returns a malloc'd string, or NULL with a message wherever
// the template raises (unknown role, a role order the family does not allow,
// no messages where it needs one).
char *chat_render(const struct chat_format *fmt, const struct chat_message *msgs, int n,
                  bool add_generation_prompt);

// --- tools (chat_tools.c; rendering in chat.c) ---

// Whether the family's renderer takes tool definitions, tool results and
// assistant tool calls (Qwen2.5 and Qwen3, checked against their Jinja templates).
bool chat_has_tools(enum chat_template kind);
// chat_render with tools: calls[i] (calls may be NULL) are message i's tool
// calls (an assistant message), messages may have the role "tool" (a tool's
// result), and tools[i] is one OpenAI tool object as chat_json_dumps writes it
// (the template prints it with tojson); n_tools may be 0. Fails with a message
// for a family without tools (chat_has_tools) when any of these is used.
char *chat_render_tools(const struct chat_format *fmt, const struct chat_message *msgs,
                        const struct chat_calls *calls, int n, const char *const *tools, int n_tools,
                        bool add_generation_prompt);
// JSON text re-written as Python's json.dumps(json.loads(text),
// ensure_ascii=False) writes it — what the templates' tojson filter prints in
// transformers — keys in their order, ", " and ": " between items. Numbers
// with an integral value print as integers (JSON text does not keep 1.0 apart
// from 1 once parsed). Returns a malloc'd string, or NULL with a message.
char *chat_json_dumps(const char *json, size_t len);

// How a family's model writes tool calls.
enum chat_tool_syntax {
    CHAT_TOOLS_NONE,
    CHAT_TOOLS_QWEN,    // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated
    CHAT_TOOLS_LLAMA31, // {"name": ..., "parameters": {...}} (after <|python_tag|> or alone)
    CHAT_TOOLS_MISTRAL, // [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]
};
enum chat_tool_syntax chat_tool_syntax(enum chat_template kind);
// The tool calls an answer written in syntax syn holds: a JSON array
// [{"name": str, "arguments": str (compact JSON)}, ...] (malloc'd), or NULL
// when the answer is not tool calls (it is then plain content).
char *chat_tools_parse(enum chat_tool_syntax syn, const char *text, size_t len);

#endif
