// grammar.h: grammar-constrained sampling — GBNF grammars, JSON schemas
// compiled to them, and the logits mask that lets a model write only text the
// grammar accepts.
//
// GBNF (the notation llama.cpp uses): rules `name ::= alternatives`, one per
// line (a rule continues on the next line inside parentheses or after `|`);
// "literals" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes; character
// classes [a-z0-9_], negated [^"\\], `.` (any character); ( groups ); the
// postfix operators * + ? {m} {m,} {m,n}; `#` comments. The start rule is
// `root`. Characters are Unicode code points; the grammar is compiled to bytes
// (each class becomes the UTF-8 sequences of its code points), so a token that
// ends inside a character is judged by its bytes like any other.
//
// Matching keeps the set of parse stacks the text so far allows (as
// llama.cpp's grammar sampler does), with two differences that make masking a
// 50k-token vocabulary cheap: stack frames are shared and interned, so a set
// of stacks is a small sorted array of pointers, and every (state, byte) step
// is cached — in effect a DFA built lazily. The mask walks a trie of the
// vocabulary's token bytes: a token is rejected at its first byte the grammar
// refuses, and tokens that share a prefix share its steps.
#ifndef STRATA_GRAMMAR_H
#define STRATA_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

// A compiled grammar: immutable, may be shared by any number of states.
struct grammar;
// Parses GBNF text. Returns 0 and sets *out (free with grammar_free), or -1
// with a message naming the line and what is wrong (undefined rule, no root,
// left recursion, a bad escape, ...).
int grammar_parse(const char *text, struct grammar **out);
void grammar_free(struct grammar *g);

// Compiles a JSON schema (JSON text of len bytes) to GBNF: types string,
// number, integer, boolean, null, object, array (and lists of them),
// properties (written in the schema's order), required, additionalProperties
// (false, true or absent: extra string keys with any value after the declared
// ones), items, minItems, maxItems, minLength, maxLength, enum, const, anyOf,
// oneOf, and $ref to "#/$defs/..." or "#/definitions/...". Annotations (title,
// description, default, examples, $schema, ...) are ignored. Returns a
// malloc'd GBNF text, or NULL with a message naming the schema path and the
// keyword it cannot honour (pattern, format, minimum, ...).
char *json_schema_to_gbnf(const char *json, size_t len);
// GBNF of any JSON object (response_format {"type": "json_object"}).
extern const char grammar_json_object[];
// json_schema_to_gbnf's rules without a root: the schema's rule is named
// prefix and every other rule starts with it; the rules refer to those of
// grammar_json_primitives (ws, json-string, json-value, ...), which a grammar
// using them must append once.
char *json_schema_to_gbnf_rules(const char *json, size_t len, const char *prefix);
extern const char grammar_json_primitives[];

// The vocabulary's token bytes as a trie, built once per tokenizer (read-only
// afterwards, shareable between threads). Returns NULL with a message on
// allocation failure.
struct grammar_vocab;
struct grammar_vocab *grammar_vocab_new(const struct tokenizer *t);
void grammar_vocab_free(struct grammar_vocab *v);

// The matching state of one sequence (not thread-safe; one per sequence).
struct grammar_state;
// Returns the state at the start of the text, or NULL with a message.
struct grammar_state *grammar_state_new(const struct grammar *g);
void grammar_state_free(struct grammar_state *s);
// Advances by n bytes. Returns 0, or -1 (state unchanged) when the grammar
// does not allow them.
int grammar_state_accept(struct grammar_state *s, const char *bytes, size_t n);
// True when the text so far is a complete sentence of the grammar.
bool grammar_state_complete(const struct grammar_state *s);
// True when the grammar allows more bytes after the text so far.
bool grammar_state_can_continue(const struct grammar_state *s);
// Sets logits[id] = -inf for every token the grammar refuses next: a token
// whose bytes are not a continuation, a token with no bytes (control tokens),
// and the end-of-generation tokens unless the text is complete.
void grammar_mask(struct grammar_state *s, const struct grammar_vocab *v, float *logits);
// Advances by token id's bytes; -1 when refused (an end-of-generation token is
// accepted when the text is complete and changes nothing).
int grammar_accept_token(struct grammar_state *s, const struct grammar_vocab *v, int32_t id);

#endif
