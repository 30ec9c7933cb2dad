// tokenizer_impl.h: what tokenizer.c, tokenizer_bpe.c and tokenizer_spm.c share.
//
// tokenizer.c reads the vocabulary, finds special tokens in the text and
// decodes; tokenizer_bpe.c is the byte-level BPE of "gpt2" vocabularies (regex
// pre-tokenizers, merges); tokenizer_spm.c is the SentencePiece BPE of "llama"
// vocabularies (scores, byte fallback).
#ifndef STRATA_TOKENIZER_IMPL_H
#define STRATA_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "text/tokenizer.h"

// GGUF token types (tokenizer.ggml.token_type).
enum tok_type {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

enum tok_kind {
    TOK_KIND_BPE, // tokenizer.ggml.model = "gpt2"
    TOK_KIND_SPM, // tokenizer.ggml.model = "llama"
};

// --- tok_base.c: growable id list ------------------------------------------------------------

struct tok_ids {
    int32_t *v;
    size_t n, cap;
};

// Appends id; returns 0, or -1 with a message when memory runs out.
int tok_ids_push(struct tok_ids *a, int32_t id);

// --- hash maps ----------------------------------------------------------------------

// 32-bit FNV-1a of n bytes.
uint32_t tok_hash(const void *p, size_t n);

// Byte string -> int32 value, open addressing. Keys are not copied: they must
// outlive the map. Capacity is fixed at init (load factor <= 1/2).
struct tok_strmap {
    uint32_t mask;     // slots - 1 (slots a power of two)
    uint32_t *hash;    // [slots]
    int32_t *value;    // [slots], -1 = empty slot
    const char **key;  // [slots]
    uint32_t *key_len; // [slots]
};

// Sized for up to n keys. Returns 0, or -1 with a message.
int tok_strmap_init(struct tok_strmap *m, size_t n);
void tok_strmap_free(struct tok_strmap *m);
// Inserts key -> value (value >= 0) or replaces an existing key's value;
// returns the previous value, or -1 when the key is new.
int32_t tok_strmap_put(struct tok_strmap *m, const char *key, size_t len, int32_t value);
// The value of key, or -1.
int32_t tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len);

// uint64 key -> two int32 values, open addressing; UINT64_MAX is never a key.
struct tok_u64map {
    uint32_t mask;
    uint64_t *key; // [slots], UINT64_MAX = empty
    int32_t *a;    // [slots]
    int32_t *b;    // [slots]
};

int tok_u64map_init(struct tok_u64map *m, size_t n);
void tok_u64map_free(struct tok_u64map *m);
// Inserts or replaces key -> (a, b).
void tok_u64map_put(struct tok_u64map *m, uint64_t key, int32_t a, int32_t b);
// True and sets *a, *b when key is present.
bool tok_u64map_get(const struct tok_u64map *m, uint64_t key, int32_t *a, int32_t *b);

// --- UTF-8 --------------------------------------------------------------------------

// Length (1..4) of the well-formed UTF-8 sequence at s[0..n) and its code
// point in *cp, or 0 when s does not start with one (bad lead or continuation
// byte, overlong form, surrogate, above U+10FFFF, or cut short).
int tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
// Writes cp (<= U+10FFFF) as UTF-8 to out[0..4); returns the byte count.
int tok_utf8_encode(uint32_t cp, char *out);

// --- the tokenizer -------------------------------------------------------------------

struct tok_bpe; // tokenizer_bpe.c
struct tok_spm; // tokenizer_spm.c

struct tokenizer {
    enum tok_kind kind;
    int32_t n_vocab;
    char *text;              // token texts, each NUL-terminated (a text may itself hold NULs)
    uint64_t *text_off;      // [n_vocab] into text
    uint32_t *text_len;      // [n_vocab]
    uint8_t *type;           // [n_vocab] enum tok_type
    float *score;            // [n_vocab] SentencePiece scores (SPM only, else NULL)
    bool *eog;               // [n_vocab] ends generation
    struct tok_strmap vocab; // text -> id

    char *piece;         // decoded bytes of every token
    uint64_t *piece_off; // [n_vocab] into piece
    uint32_t *piece_len; // [n_vocab]

    // Special tokens found in text: a byte trie over the texts of control,
    // unknown and user-defined tokens. Node 0 is the root; node_token[i] is the
    // id of the token spelled by the path to node i, or -1.
    struct tok_u64map trie; // (node << 8 | byte) -> (child node, unused)
    int32_t *node_token;    // [n_nodes]
    int32_t n_nodes;
    uint8_t special_first[32]; // bitmap of bytes that start a special token

    int32_t bos, eos, unk, pad, eot, eom, sep; // -1 when absent
    bool add_bos, add_eos;
    bool add_space_prefix; // SPM: a space before each run of text

    struct tok_bpe *bpe;
    struct tok_spm *spm;
};

// The text of token id and its length.
static inline const char *tok_text(const struct tokenizer *t, int32_t id, uint32_t *len) {
    *len = t->text_len[id];
    return t->text + t->text_off[id];
}

// Byte-level BPE (tokenizer_bpe.c). bpe_init reads the merges and the
// pre-tokenizer named by tokenizer.ggml.pre; *default_add_bos reports whether
// that pre-tokenizer's models add BOS when the file does not say.
int bpe_init(struct tokenizer *t, const struct gguf_file *f, bool *default_add_bos);
void bpe_free(struct tok_bpe *b);
// Appends the ids of text[0..len) (holding no special tokens) to out.
int bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);
// The bytes a byte-level token text stands for, written to out (room for
// len bytes); returns their count.
size_t bpe_decode_text(const char *s, size_t len, char *out);

// SentencePiece BPE (tokenizer_spm.c).
int spm_init(struct tokenizer *t);
void spm_free(struct tok_spm *s);
// Appends the ids of text[0..len) (holding no special tokens) to out, with a
// leading space when t->add_space_prefix.
int spm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);

#endif
