// tokenizer.c: the vocabulary from GGUF metadata, special tokens in text, and
// decoding; the two BPE flavours are tokenizer_bpe.c and tokenizer_spm.c.
//
// Parity targets: the Hugging Face `tokenizers` pipeline of each model family
// for "gpt2" vocabularies, the `sentencepiece` library for "llama" ones; the
// GGUF conventions (token types, special ids, defaults) are llama.cpp's.
// tests/test_tokenizer.c compares ids against fixtures those references wrote.
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "util.h"

// --- reading the vocabulary ------------------------------------------------------------

#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_SCORES "tokenizer.ggml.scores"

// Texts of control tokens that end a turn (llama.cpp's list of EOG tokens).
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>",         "<|im_end|>", "<|end|>",  "<end_of_turn>",
    "<|endoftext|>",      "<|eom_id|>", "<EOT>",    "<|end_of_text|>",
    "<end_of_utterance>", "<|return|>", "<|call|>",
};

static int read_tokens(struct tokenizer *t, const struct gguf_file *f) {
    const struct gguf_array *toks;
    int rc = gguf_get_arr(f, KEY_TOKENS, GGUF_VTYPE_STRING, &toks);
    if (rc < 0) return -1;
    if (rc > 0) return st_fail("%s: key '" KEY_TOKENS "' is missing: the file has no vocabulary", f->path);
    if (toks->count == 0) return st_fail("%s: '" KEY_TOKENS "' is empty", f->path);
    if (toks->count >= INT32_MAX)
        return st_fail("%s: '" KEY_TOKENS "' has %llu tokens, more than ids can hold", f->path,
                       (unsigned long long)toks->count);
    int32_t n = (int32_t)toks->count;
    t->n_vocab = n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t len = toks->items[i].v.str.len;
        if (len > UINT32_MAX)
            return st_fail("%s: token %d is %llu bytes long", f->path, i, (unsigned long long)len);
        total += len + 1;
    }
    t->text = malloc(total);
    t->text_off = malloc(n * sizeof *t->text_off);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->type = malloc(n);
    t->eog = calloc(n, sizeof *t->eog);
    if (!t->text || !t->text_off || !t->text_len || !t->type || !t->eog)
        return st_fail("%s: out of memory for %d tokens", f->path, n);
    if (tok_strmap_init(&t->vocab, n)) return -1;
    uint64_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct gguf_str *s = &toks->items[i].v.str;
        memcpy(t->text + off, s->data, s->len);
        t->text[off + s->len] = 0;
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)s->len;
        int32_t dup = tok_strmap_put(&t->vocab, t->text + off, s->len, i);
        if (dup >= 0)
            return st_fail("%s: '" KEY_TOKENS
                           "': tokens %d and %d are both '%.*s'; a vocabulary needs distinct tokens",
                           f->path, dup, i, (int)s->len, s->data);
        off += s->len + 1;
    }

    const struct gguf_array *types;
    rc = gguf_get_arr(f, KEY_TYPES, GGUF_VTYPE_INT32, &types);
    if (rc < 0) return -1;
    for (int32_t i = 0; i < n; i++) {
        int64_t ty = TOK_TYPE_NORMAL;
        if (rc == 0) {
            if (types->count != (uint64_t)n)
                return st_fail("%s: '" KEY_TYPES "' has %llu entries for %d tokens", f->path,
                               (unsigned long long)types->count, n);
            ty = gguf_array_int(types, i);
        }
        if (ty < TOK_TYPE_NORMAL || ty > TOK_TYPE_BYTE)
            return st_fail("%s: '" KEY_TYPES "'[%d] = %lld is not a token type (1 normal .. 6 byte)", f->path,
                           i, (long long)ty);
        t->type[i] = (uint8_t)ty;
    }

    if (t->kind == TOK_KIND_SPM) {
        const struct gguf_array *scores;
        rc = gguf_get_arr(f, KEY_SCORES, GGUF_VTYPE_FLOAT32, &scores);
        if (rc < 0) return -1;
        if (rc > 0)
            return st_fail("%s: key '" KEY_SCORES "' is missing; a SentencePiece vocabulary needs its scores",
                           f->path);
        if (scores->count != (uint64_t)n)
            return st_fail("%s: '" KEY_SCORES "' has %llu entries for %d tokens", f->path,
                           (unsigned long long)scores->count, n);
        t->score = malloc(n * sizeof *t->score);
        if (!t->score) return st_fail("%s: out of memory for %d scores", f->path, n);
        for (int32_t i = 0; i < n; i++) t->score[i] = (float)gguf_array_float(scores, i);
    }
    return 0;
}

// Reads an optional token id key into *id (left as is when absent).
static int read_special_id(const struct tokenizer *t, const struct gguf_file *f, const char *key,
                           int32_t *id) {
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v);
    if (rc < 0) return -1;
    if (rc > 0) return 0;
    if (v >= (uint32_t)t->n_vocab)
        return st_fail("%s: %s = %u is out of range: the vocabulary has %d tokens", f->path, key, v,
                       t->n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int read_flag(const struct gguf_file *f, const char *key, bool *flag) {
    int rc = gguf_get_bool(f, key, flag);
    return rc < 0 ? -1 : 0;
}

static int read_specials(struct tokenizer *t, const struct gguf_file *f, bool default_add_bos) {
    t->bos = t->eos = t->unk = t->pad = t->eot = t->eom = t->sep = -1;
    t->add_bos = default_add_bos;
    t->add_eos = false;
    t->add_space_prefix = false;
    if (t->kind == TOK_KIND_SPM) {
        // llama.cpp's defaults for SentencePiece files that name no special ids.
        t->unk = 0;
        t->bos = t->n_vocab > 1 ? 1 : -1;
        t->eos = t->n_vocab > 2 ? 2 : -1;
        t->add_space_prefix = true;
    }
    static const struct {
        const char *key;
        size_t field;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct tokenizer, eos)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct tokenizer, unk)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct tokenizer, pad)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct tokenizer, eom)},
        {"tokenizer.ggml.seperator_token_id",
         offsetof(struct tokenizer, sep)}, // sic: the GGUF key's spelling
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (read_special_id(t, f, ids[i].key, (int32_t *)((char *)t + ids[i].field))) return -1;
    if (read_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos) ||
        read_flag(f, "tokenizer.ggml.add_eos_token", &t->add_eos))
        return -1;
    if (t->kind == TOK_KIND_SPM && read_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix))
        return -1;
    if (t->add_bos && t->bos < 0)
        return st_fail("%s: tokenizer.ggml.add_bos_token is true but the file names no BOS token "
                       "(tokenizer.ggml.bos_token_id)",
                       f->path);
    if (t->add_eos && t->eos < 0)
        return st_fail("%s: tokenizer.ggml.add_eos_token is true but the file names no EOS token "
                       "(tokenizer.ggml.eos_token_id)",
                       f->path);

    int32_t ends[] = {t->eos, t->eot, t->eom};
    for (size_t i = 0; i < 3; i++)
        if (ends[i] >= 0) t->eog[ends[i]] = true;
    for (size_t i = 0; i < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; i++) {
        int32_t id = tok_strmap_get(&t->vocab, EOG_TEXTS[i], strlen(EOG_TEXTS[i]));
        if (id >= 0 && (t->type[id] == TOK_TYPE_CONTROL || t->type[id] == TOK_TYPE_USER_DEFINED))
            t->eog[id] = true;
    }
    return 0;
}

static bool is_special_type(uint8_t type) {
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN || type == TOK_TYPE_USER_DEFINED;
}

// The trie of special token texts, for leftmost-longest matching in text.
static int build_trie(struct tokenizer *t) {
    size_t total = 1;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->type[i])) total += t->text_len[i];
    if (total >= INT32_MAX) return st_fail("tokenizer: special tokens too long (%zu bytes)", total);
    if (tok_u64map_init(&t->trie, total)) return -1;
    t->node_token = malloc(total * sizeof *t->node_token);
    if (!t->node_token) return st_fail("tokenizer: out of memory for the special-token trie");
    t->node_token[0] = -1;
    t->n_nodes = 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint32_t len;
        const char *s = tok_text(t, i, &len);
        if (!is_special_type(t->type[i]) || len == 0) continue;
        t->special_first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
        int32_t node = 0, unused;
        for (uint32_t k = 0; k < len; k++) {
            uint64_t key = (uint64_t)node << 8 | (uint8_t)s[k];
            int32_t child;
            if (!tok_u64map_get(&t->trie, key, &child, &unused)) {
                child = t->n_nodes++;
                t->node_token[child] = -1;
                tok_u64map_put(&t->trie, key, child, 0);
            }
            node = child;
        }
        t->node_token[node] = i;
    }
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The byte a token spelled <0xNN> stands for, or -1.
static int hex_byte(const char *s, uint32_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Decoded bytes of every token, so tokenizer_piece is a copy.
static int build_pieces(struct tokenizer *t, const struct gguf_file *f) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += t->text_len[i];
    t->piece = malloc(total ? total : 1);
    t->piece_off = malloc(t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc(t->n_vocab * sizeof *t->piece_len);
    if (!t->piece || !t->piece_off || !t->piece_len)
        return st_fail("%s: out of memory for token pieces", f->path);
    uint64_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint32_t len, n = 0;
        const char *s = tok_text(t, i, &len);
        char *out = t->piece + off;
        uint8_t ty = t->type[i];
        int byte = hex_byte(s, len);
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_USER_DEFINED) {
            memcpy(out, s, len), n = len;
        } else if (ty == TOK_TYPE_BYTE && byte >= 0) {
            out[0] = (char)byte, n = 1;
        } else if (t->kind == TOK_KIND_BPE) {
            n = (uint32_t)bpe_decode_text(s, len, out);
        } else if (ty == TOK_TYPE_BYTE) {
            return st_fail("%s: token %d '%s' has the byte type but is not spelled <0xNN>", f->path, i, s);
        } else {
            // SentencePiece spells a space U+2581 (e2 96 81).
            for (uint32_t k = 0; k < len; k++) {
                if (k + 2 < len && memcmp(s + k, "\xe2\x96\x81", 3) == 0) {
                    out[n++] = ' ';
                    k += 2;
                } else {
                    out[n++] = s[k];
                }
            }
        }
        t->piece_off[i] = off;
        t->piece_len[i] = n;
        off += n;
    }
    return 0;
}

int tokenizer_init(const struct gguf_file *f, struct tokenizer **out) {
    *out = NULL;
    struct gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (rc < 0) return -1;
    if (rc > 0)
        return st_fail("%s: key 'tokenizer.ggml.model' is missing: the file has no tokenizer", f->path);
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) return st_fail("%s: out of memory for the tokenizer", f->path);
    if (model.len == 4 && memcmp(model.data, "gpt2", 4) == 0) {
        t->kind = TOK_KIND_BPE;
    } else if (model.len == 5 && memcmp(model.data, "llama", 5) == 0) {
        t->kind = TOK_KIND_SPM;
    } else {
        free(t);
        return st_fail("%s: tokenizer.ggml.model = '%.*s' is not supported (known: gpt2, llama)", f->path,
                       (int)(model.len > 64 ? 64 : model.len), model.data);
    }
    bool default_add_bos = t->kind == TOK_KIND_SPM;
    if (read_tokens(t, f) || (t->kind == TOK_KIND_BPE ? bpe_init(t, f, &default_add_bos) : spm_init(t)) ||
        read_specials(t, f, default_add_bos) || build_pieces(t, f) || build_trie(t)) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tokenizer_free(struct tokenizer *t) {
    if (!t) return;
    bpe_free(t->bpe);
    spm_free(t->spm);
    tok_strmap_free(&t->vocab);
    tok_u64map_free(&t->trie);
    free(t->text);
    free(t->text_off);
    free(t->text_len);
    free(t->type);
    free(t->score);
    free(t->eog);
    free(t->piece);
    free(t->piece_off);
    free(t->piece_len);
    free(t->node_token);
    free(t);
}

// --- encoding -----------------------------------------------------------------------

// The longest special token starting at s[0..n) that this call accepts
// (user-defined tokens always, control and unknown ones when parse_special);
// returns its id and sets *len, or -1.
static int32_t match_special(const struct tokenizer *t, const char *s, size_t n, bool parse_special,
                             size_t *len) {
    int32_t node = 0, best = -1, unused;
    for (size_t k = 0; k < n; k++) {
        if (!tok_u64map_get(&t->trie, (uint64_t)node << 8 | (uint8_t)s[k], &node, &unused)) break;
        int32_t id = t->node_token[node];
        if (id >= 0 && (parse_special || t->type[id] == TOK_TYPE_USER_DEFINED)) {
            best = id;
            *len = k + 1;
        }
    }
    return best;
}

static int encode_run(const struct tokenizer *t, const char *s, size_t n, struct tok_ids *out) {
    if (n == 0) return 0;
    return t->kind == TOK_KIND_BPE ? bpe_encode(t, s, n, out) : spm_encode(t, s, n, out);
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids) {
    *ids = NULL;
    if (len > (size_t)INT32_MAX / 4)
        return st_fail("tokenizer: %zu bytes of text are too many to encode", len);
    struct tok_ids out = {0};
    if (add_special && t->add_bos && tok_ids_push(&out, t->bos)) goto fail;
    // Special tokens split the text as Hugging Face's added tokens do:
    // leftmost match first, the longest among those starting there.
    size_t run = 0;
    for (size_t i = 0; i < len;) {
        uint8_t c = (uint8_t)text[i];
        size_t mlen = 0;
        int32_t id = -1;
        if (t->special_first[c >> 3] & (1u << (c & 7)))
            id = match_special(t, text + i, len - i, parse_special, &mlen);
        if (id < 0) {
            i++;
            continue;
        }
        if (encode_run(t, text + run, i - run, &out) || tok_ids_push(&out, id)) goto fail;
        i += mlen;
        run = i;
    }
    if (encode_run(t, text + run, len - run, &out)) goto fail;
    if (add_special && t->add_eos && tok_ids_push(&out, t->eos)) goto fail;
    if (out.n == 0) {
        *ids = malloc(sizeof **ids); // a valid pointer even for no ids, so the caller's free is uniform
        if (!*ids) return st_fail("tokenizer: out of memory");
        return 0;
    }
    *ids = out.v;
    return (int)out.n;
fail:
    free(out.v);
    return -1;
}

// --- decoding -----------------------------------------------------------------------

int tokenizer_piece(const struct tokenizer *t, int32_t prev, int32_t id, bool special, char *buf,
                    size_t cap) {
    if (id < 0 || id >= t->n_vocab)
        return st_fail("tokenizer: token id %d is out of range (vocabulary of %d)", id, t->n_vocab);
    if (prev < -1 || prev >= t->n_vocab)
        return st_fail("tokenizer: previous token id %d is out of range (vocabulary of %d)", prev,
                       t->n_vocab);
    uint8_t ty = t->type[id];
    if (!special && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN)) return 0;
    const char *p = t->piece + t->piece_off[id];
    size_t n = t->piece_len[id];
    // Encoding put a space before each run of text (at the start and after
    // each special token); decoding takes it back off.
    if (t->kind == TOK_KIND_SPM && t->add_space_prefix && n > 0 && p[0] == ' ' &&
        (prev < 0 || is_special_type(t->type[prev])))
        p++, n--;
    if (cap) memcpy(buf, p, n < cap ? n : cap);
    return (int)n;
}

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int n, bool special, char **out,
                     size_t *len) {
    *out = NULL;
    *len = 0;
    if (n < 0) return st_fail("tokenizer: negative token count %d", n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int k = tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], special, NULL, 0);
        if (k < 0) return -1;
        total += (size_t)k;
    }
    char *s = malloc(total + 1);
    if (!s) return st_fail("tokenizer: out of memory for %zu bytes of text", total);
    size_t pos = 0;
    for (int i = 0; i < n; i++)
        pos += (size_t)tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], special, s + pos, total - pos);
    s[pos] = 0;
    *out = s;
    *len = pos;
    return 0;
}

// --- accessors ----------------------------------------------------------------------

int tokenizer_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const struct tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const struct tokenizer *t) { return t->eos; }
bool tokenizer_adds_bos(const struct tokenizer *t) { return t->add_bos; }
bool tokenizer_adds_eos(const struct tokenizer *t) { return t->add_eos; }

bool tokenizer_is_eog(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

const char *tokenizer_token_text(const struct tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return t->text + t->text_off[id];
}

int32_t tokenizer_find(const struct tokenizer *t, const char *s) {
    return tok_strmap_get(&t->vocab, s, strlen(s));
}
