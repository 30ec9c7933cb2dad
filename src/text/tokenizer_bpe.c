// tokenizer_bpe.c: byte-level BPE ("gpt2" vocabularies: GPT-2, SmolLM, Llama 3, Qwen2).
//
// Text runs through the pipeline of the model family's tokenizer.json:
// optional NFC, regex splits (pcre2, "isolated": matches and the gaps between
// them both become pieces), then each piece's bytes are spelled in the GPT-2
// byte alphabet and merged by rank exactly as Hugging Face's BPE does (lowest
// rank first, leftmost on ties). Invalid UTF-8 bytes skip the pipeline and
// each becomes its own byte token, so any byte string round-trips.
#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tokenizer_impl.h"
#include "util.h"

// --- pre-tokenizers --------------------------------------------------------------------

// Unicode White_Space, which \s means to the Oniguruma regexes of Hugging Face
// tokenizers; pcre2's \s also takes U+180E, so the patterns spell the set out.
#define WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define S_PLUS_NOT_FOLLOWED_BY_S "[" WS "]+(?![^" WS "])|[" WS "]+"

// Digits(individual_digits=true): every numeric character on its own.
static const char RE_DIGITS[] = "\\p{N}";
// ByteLevel(use_regex=true): GPT-2's split.
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_PLUS_NOT_FOLLOWED_BY_S;
// Llama 3's Split regex: digits in groups of up to three.
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|" S_PLUS_NOT_FOLLOWED_BY_S;
// Qwen2's Split regex: single digits.
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|" S_PLUS_NOT_FOLLOWED_BY_S;

#define MAX_SPLITS 2

struct pre_def {
    const char *name;           // tokenizer.ggml.pre
    const char *re[MAX_SPLITS]; // applied in turn, each to every piece of the one before
    bool nfc;                   // NFC-normalise text first
    bool ignore_merges;         // a piece that is a whole token skips the merges
    bool add_bos;               // BOS by default when the file has no add_bos_token
};

// "default" (and a file with no tokenizer.ggml.pre) means Hugging Face's plain
// ByteLevel pre-tokenizer, the GPT-2 one.
static const struct pre_def PRE_DEFS[] = {
    {"default", {RE_GPT2, NULL}, false, false, false},
    {"gpt-2", {RE_GPT2, NULL}, false, false, false},
    {"smollm", {RE_DIGITS, RE_GPT2}, false, false, false},
    {"starcoder", {RE_DIGITS, RE_GPT2}, false, false, false},
    {"llama-bpe", {RE_LLAMA3, NULL}, false, true, true},
    {"llama3", {RE_LLAMA3, NULL}, false, true, true},
    {"llama-v3", {RE_LLAMA3, NULL}, false, true, true},
    {"qwen2", {RE_QWEN2, NULL}, true, false, false},
};

struct tok_bpe {
    const struct pre_def *pre;
    pcre2_code *re[MAX_SPLITS]; // compiled pre->re, NULL past the last
    struct tok_u64map merges;   // (left id << 32 | right id) -> (rank, merged id)
    int32_t byte_id[256];       // id of each byte's byte-alphabet token, or -1
    uint16_t byte_cp[256];      // GPT-2 byte alphabet: byte -> code point
};

// --- the GPT-2 byte alphabet ---------------------------------------------------------------

// Printable Latin-1 bytes stand for themselves; the other 68 map in order to
// U+0100.. (Hugging Face's bytes_to_unicode).
static bool byte_is_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

static void byte_alphabet(uint16_t cp[256]) {
    int next = 256;
    for (int b = 0; b < 256; b++) cp[b] = (uint16_t)(byte_is_printable(b) ? b : next++);
}

// The byte a code point of the alphabet stands for, or -1. U+0100.. are the
// non-printable bytes in order: 0..32, 127..160, then 173.
static int cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((int)cp) ? (int)cp : -1;
    uint32_t k = cp - 256;
    return k < 33 ? (int)k : k < 67 ? (int)k + 94 : k == 67 ? 173 : -1;
}

size_t bpe_decode_text(const char *s, size_t len, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = tok_utf8_decode((const uint8_t *)s + i, len - i, &cp);
        int b = k ? cp_to_byte(cp) : -1;
        if (b >= 0) {
            out[n++] = (char)b;
        } else {
            // Not of the alphabet (a mislabelled added token): its own bytes.
            if (!k) k = 1;
            memcpy(out + n, s + i, (size_t)k);
            n += (size_t)k;
        }
        i += (size_t)k;
    }
    return n;
}

// --- init ----------------------------------------------------------------------------------

static int compile_pre(struct tok_bpe *b) {
    for (int i = 0; i < MAX_SPLITS && b->pre->re[i]; i++) {
        int err;
        PCRE2_SIZE at;
        b->re[i] = pcre2_compile((PCRE2_SPTR)b->pre->re[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                 &err, &at, NULL);
        if (!b->re[i]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            return st_fail("tokenizer: pre-tokenizer '%s': regex does not compile at %zu: %s", b->pre->name,
                           (size_t)at, (const char *)msg);
        }
        // JIT is a speed-up only: without it pcre2_match interprets.
        (void)pcre2_jit_compile(b->re[i], PCRE2_JIT_COMPLETE);
    }
    return 0;
}

static int read_pre(struct tok_bpe *b, const struct gguf_file *f) {
    struct gguf_str pre = {7, "default"};
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre) < 0) return -1;
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++) {
        if (strlen(PRE_DEFS[i].name) == pre.len && memcmp(PRE_DEFS[i].name, pre.data, pre.len) == 0) {
            b->pre = &PRE_DEFS[i];
            return compile_pre(b);
        }
    }
    char known[256] = "";
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++) {
        if (i) strcat(known, ", ");
        strcat(known, PRE_DEFS[i].name);
    }
    return st_fail("%s: tokenizer.ggml.pre = '%.*s' is not a known pre-tokenizer (known: %s)", f->path,
                   (int)(pre.len > 64 ? 64 : pre.len), pre.data, known);
}

static int read_merges(struct tokenizer *t, struct tok_bpe *b, const struct gguf_file *f) {
    const struct gguf_array *merges;
    int rc = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_VTYPE_STRING, &merges);
    if (rc < 0) return -1;
    if (rc > 0)
        return st_fail("%s: key 'tokenizer.ggml.merges' is missing; a BPE vocabulary needs its merges",
                       f->path);
    if (merges->count >= INT32_MAX)
        return st_fail("%s: tokenizer.ggml.merges has %llu entries", f->path,
                       (unsigned long long)merges->count);
    if (tok_u64map_init(&b->merges, merges->count)) return -1;
    char *both = NULL;
    size_t both_cap = 0;
    for (uint64_t i = 0; i < merges->count; i++) {
        const struct gguf_str *m = &merges->items[i].v.str;
        // "left right"; the first space after the first byte separates them.
        const char *sp = m->len > 1 ? memchr(m->data + 1, ' ', m->len - 1) : NULL;
        if (!sp) {
            free(both);
            return st_fail("%s: tokenizer.ggml.merges[%llu] = '%.*s' is not two tokens joined by a space",
                           f->path, (unsigned long long)i, (int)(m->len > 64 ? 64 : m->len), m->data);
        }
        size_t la = (size_t)(sp - m->data), lb = m->len - la - 1;
        if (la + lb > both_cap) {
            both_cap = 2 * (la + lb);
            char *nb = realloc(both, both_cap);
            if (!nb) {
                free(both);
                return st_fail("%s: out of memory reading merges", f->path);
            }
            both = nb;
        }
        memcpy(both, m->data, la);
        memcpy(both + la, sp + 1, lb);
        int32_t a = tok_strmap_get(&t->vocab, m->data, la);
        int32_t c = tok_strmap_get(&t->vocab, sp + 1, lb);
        int32_t ab = tok_strmap_get(&t->vocab, both, la + lb);
        if (a < 0 || c < 0 || ab < 0) {
            const char *what = a < 0 ? m->data : c < 0 ? sp + 1 : both;
            size_t wlen = a < 0 ? la : c < 0 ? lb : la + lb;
            int rc2 = st_fail(
                "%s: tokenizer.ggml.merges[%llu] = '%.*s' names '%.*s', which is not in the vocabulary",
                f->path, (unsigned long long)i, (int)(m->len > 64 ? 64 : m->len), m->data,
                (int)(wlen > 64 ? 64 : wlen), what);
            free(both);
            return rc2;
        }
        // A repeated pair takes its last rank, as Hugging Face's merge map does.
        tok_u64map_put(&b->merges, (uint64_t)a << 32 | (uint32_t)c, (int32_t)i, ab);
    }
    free(both);
    return 0;
}

int bpe_init(struct tokenizer *t, const struct gguf_file *f, bool *default_add_bos) {
    struct tok_bpe *b = calloc(1, sizeof *b);
    if (!b) return st_fail("tokenizer: out of memory");
    t->bpe = b;
    if (read_pre(b, f) || read_merges(t, b, f)) return -1;
    *default_add_bos = b->pre->add_bos;
    byte_alphabet(b->byte_cp);
    for (int i = 0; i < 256; i++) {
        char u[4];
        int n = tok_utf8_encode(b->byte_cp[i], u);
        b->byte_id[i] = tok_strmap_get(&t->vocab, u, (size_t)n);
    }
    return 0;
}

void bpe_free(struct tok_bpe *b) {
    if (!b) return;
    for (int i = 0; i < MAX_SPLITS; i++) pcre2_code_free(b->re[i]);
    tok_u64map_free(&b->merges);
    free(b);
}

// --- encoding ------------------------------------------------------------------------------

struct span {
    size_t off, len;
};

struct merge {
    int32_t rank, pos, id;
};

// A symbol of the word being merged: a token id (-1 once merged into the one
// before it) in a doubly linked list.
struct symbol {
    int32_t id, prev, next;
};

// Buffers reused across the words of one bpe_encode call.
struct scratch {
    struct span *pieces[2];
    size_t n_pieces[2], cap_pieces[2];
    struct symbol *sym;
    size_t cap_sym;
    struct merge *heap;
    size_t n_heap, cap_heap;
    char *spelled;
    size_t cap_spelled;
    pcre2_match_data *md;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return st_fail("tokenizer: out of memory (%zu elements of %zu bytes)", c, elem);
    *p = q;
    *cap = c;
    return 0;
}

static int push_piece(struct scratch *s, int k, size_t off, size_t len) {
    if (grow((void **)&s->pieces[k], &s->cap_pieces[k], s->n_pieces[k] + 1, sizeof(struct span))) return -1;
    s->pieces[k][s->n_pieces[k]++] = (struct span){off, len};
    return 0;
}

// Splits text[sp.off, sp.off + sp.len) by re into list k: matches and the gaps
// between them, in order. The piece is matched on its own, so lookarounds see
// only it, as when Hugging Face runs a pre-tokenizer on each piece.
static int split_piece(const pcre2_code *re, struct scratch *s, int k, const char *text, struct span sp) {
    PCRE2_SPTR subject = (PCRE2_SPTR)(text + sp.off);
    size_t last = 0;
    while (last < sp.len) {
        int rc = pcre2_match(re, subject, sp.len, last, PCRE2_NO_UTF_CHECK, s->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return st_fail("tokenizer: pre-tokenizer regex failed on a %zu-byte piece: %s", sp.len,
                           (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        ST_ASSERT(ov[1] > ov[0]); // no pattern above matches the empty string
        if (ov[0] > last && push_piece(s, k, sp.off + last, ov[0] - last)) return -1;
        if (push_piece(s, k, sp.off + ov[0], ov[1] - ov[0])) return -1;
        last = ov[1];
    }
    if (last < sp.len && push_piece(s, k, sp.off + last, sp.len - last)) return -1;
    return 0;
}

static bool merge_less(struct merge a, struct merge b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static int heap_push(struct scratch *s, struct merge m) {
    if (grow((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof m)) return -1;
    size_t i = s->n_heap++;
    while (i > 0 && merge_less(m, s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = m;
    return 0;
}

static struct merge heap_pop(struct scratch *s) {
    struct merge top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(s->heap[c + 1], s->heap[c])) c++;
        if (!merge_less(s->heap[c], last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

// Queues the merge of symbol pos with the one after it, if the pair has one.
static int queue_pair(const struct tok_bpe *b, struct scratch *s, int32_t pos) {
    if (pos < 0 || s->sym[pos].next < 0) return 0;
    int32_t rank, id;
    if (!tok_u64map_get(&b->merges, (uint64_t)s->sym[pos].id << 32 | (uint32_t)s->sym[s->sym[pos].next].id,
                        &rank, &id))
        return 0;
    return heap_push(s, (struct merge){rank, pos, id});
}

// One piece: its bytes spelled in the byte alphabet, merged by rank.
static int encode_word(const struct tokenizer *t, struct scratch *s, const uint8_t *w, size_t n,
                       struct tok_ids *out) {
    const struct tok_bpe *b = t->bpe;
    if (b->pre->ignore_merges) {
        if (grow((void **)&s->spelled, &s->cap_spelled, 2 * n, 1)) return -1;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += (size_t)tok_utf8_encode(b->byte_cp[w[i]], s->spelled + k);
        int32_t id = tok_strmap_get(&t->vocab, s->spelled, k);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (grow((void **)&s->sym, &s->cap_sym, n, sizeof *s->sym)) return -1;
    // A byte missing from the vocabulary is dropped, as Hugging Face's BPE
    // drops characters it has no token for when there is no unknown token.
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (b->byte_id[w[i]] < 0) continue;
        s->sym[m] = (struct symbol){b->byte_id[w[i]], m - 1, m + 1};
        m++;
    }
    if (m == 0) return 0;
    s->sym[m - 1].next = -1;
    s->n_heap = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        if (queue_pair(b, s, i)) return -1;
    while (s->n_heap) {
        struct merge top = heap_pop(s);
        struct symbol *left = &s->sym[top.pos];
        if (left->id < 0 || left->next < 0) continue;
        struct symbol *right = &s->sym[left->next];
        // A stale entry: the pair at pos changed since it was queued.
        int32_t rank, id;
        if (!tok_u64map_get(&b->merges, (uint64_t)left->id << 32 | (uint32_t)right->id, &rank, &id) ||
            id != top.id)
            continue;
        left->id = id;
        right->id = -1;
        left->next = right->next;
        if (right->next >= 0) s->sym[right->next].prev = top.pos;
        if (queue_pair(b, s, left->prev) || queue_pair(b, s, top.pos)) return -1;
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        if (tok_ids_push(out, s->sym[i].id)) return -1;
    return 0;
}

// Valid UTF-8 after normalisation: pre-tokenize, then encode each piece.
static int split_and_encode(const struct tokenizer *t, struct scratch *s, const char *text, size_t len,
                            struct tok_ids *out) {
    const struct tok_bpe *b = t->bpe;
    s->n_pieces[0] = 0;
    if (push_piece(s, 0, 0, len)) return -1;
    int k = 0;
    for (int r = 0; r < MAX_SPLITS && b->re[r]; r++) {
        s->n_pieces[!k] = 0;
        for (size_t i = 0; i < s->n_pieces[k]; i++)
            if (split_piece(b->re[r], s, !k, text, s->pieces[k][i])) return -1;
        k = !k;
    }
    for (size_t i = 0; i < s->n_pieces[k]; i++) {
        struct span sp = s->pieces[k][i];
        if (encode_word(t, s, (const uint8_t *)text + sp.off, sp.len, out)) return -1;
    }
    return 0;
}

// A run of valid UTF-8: NFC first when the pre-tokenizer asks for it.
static int encode_valid(const struct tokenizer *t, struct scratch *s, const char *text, size_t len,
                        struct tok_ids *out) {
    utf8proc_uint8_t *nfc = NULL;
    if (t->bpe->pre->nfc) {
        size_t i = 0;
        while (i < len && (uint8_t)text[i] < 0x80) i++;
        if (i < len) { // ASCII is its own NFC
            utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (n < 0) return st_fail("tokenizer: NFC normalisation failed: %s", utf8proc_errmsg(n));
            text = (const char *)nfc;
            len = (size_t)n;
        }
    }
    int rc = split_and_encode(t, s, text, len, out);
    free(nfc);
    return rc;
}

int bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out) {
    const struct tok_bpe *b = t->bpe;
    struct scratch s = {0};
    int rc = 0;
    s.md = pcre2_match_data_create(1, NULL);
    if (!s.md) return st_fail("tokenizer: out of memory for regex match data");
    const uint8_t *u = (const uint8_t *)text;
    for (size_t i = 0; i < len && rc == 0;) {
        size_t j = i;
        uint32_t cp;
        int k;
        while (j < len && (k = tok_utf8_decode(u + j, len - j, &cp)) > 0) j += (size_t)k;
        if (j > i) rc = encode_valid(t, &s, text + i, j - i, out);
        if (rc == 0 && j < len) {
            // An invalid byte: its byte token on its own.
            if (b->byte_id[u[j]] >= 0) rc = tok_ids_push(out, b->byte_id[u[j]]);
            j++;
        }
        i = j;
    }
    pcre2_match_data_free(s.md);
    free(s.pieces[0]);
    free(s.pieces[1]);
    free(s.sym);
    free(s.heap);
    free(s.spelled);
    return rc;
}
