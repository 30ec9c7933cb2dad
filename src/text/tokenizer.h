// tokenizer.h: tokenizers built from a GGUF vocabulary.
//
// tokenizer.ggml.model = "gpt2": byte-level BPE with the pre-tokenizer named by
// tokenizer.ggml.pre (SmolLM2, Llama 3, Qwen2 and their relatives);
// "llama": SentencePiece-style BPE (Llama 2, TinyLlama, Mistral).
#ifndef STRATA_TOKENIZER_H
#define STRATA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

struct tokenizer;

// Builds the tokenizer described by f's tokenizer.ggml.* metadata. Returns 0 and
// sets *out (free with tokenizer_free), or -1 with a message naming the missing
// or bad key (unknown model or pre-tokenizer, merges naming unknown tokens,
// special ids out of range, ...). The tokenizer copies what it keeps: f may be
// closed afterwards.
int tokenizer_init(const struct gguf_file *f, struct tokenizer **out);
void tokenizer_free(struct tokenizer *t);

// Encodes len bytes of text (UTF-8; invalid bytes are encoded as the model's
// byte fallback would). add_special: add BOS/EOS as the vocabulary asks
// (tokenizer.ggml.add_bos_token / add_eos_token). User-defined tokens are
// always matched in text (as Hugging Face and llama.cpp do); parse_special: text
// equal to a control token becomes that token, otherwise it is plain text.
// Returns the number of ids (≥ 0) and sets *ids (malloc'd, caller frees), or -1.
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids);

// The bytes token id stands for, as they appear in decoded text (byte-level
// pieces turned back into bytes, SentencePiece's ▁ into a space, <0xNN> into
// its byte). Control and unknown tokens give their text only when `special` is
// true, else nothing. Writes at most cap bytes to buf and returns the full
// length, or -1 for an id out of range. `prev` is the id before this one (-1 at
// the start): SentencePiece vocabularies drop the leading space of a piece that
// follows the start or a control, unknown or user-defined token (the encoder
// adds one there), so decoding round-trips exactly.
int tokenizer_piece(const struct tokenizer *t, int32_t prev, int32_t id, bool special, char *buf, size_t cap);

// Decodes n ids to a malloc'd NUL-terminated string (*len bytes, not counting
// the NUL). Returns 0, or -1 for an id out of range.
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int n, bool special, char **out,
                     size_t *len);

int tokenizer_n_vocab(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t); // -1 if none
int32_t tokenizer_eos(const struct tokenizer *t); // -1 if none
// Whether encoding with add_special adds BOS first / EOS last (the vocabulary's
// tokenizer.ggml.add_bos_token / add_eos_token, or the model family's default).
bool tokenizer_adds_bos(const struct tokenizer *t);
bool tokenizer_adds_eos(const struct tokenizer *t);
// True for ids that end generation: EOS, EOT (tokenizer.ggml.eot_token_id),
// and end-of-turn control tokens the vocabulary marks (<|im_end|>, <|eot_id|>,
// <end_of_turn>, <|end|>, ...).
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id);
// The text of token id as stored in the vocabulary (not decoded), or NULL.
const char *tokenizer_token_text(const struct tokenizer *t, int32_t id);
// The id whose stored text is exactly s, or -1.
int32_t tokenizer_find(const struct tokenizer *t, const char *s);

#endif
