// tokenizer_spm.c: SentencePiece-style BPE ("llama" vocabularies: Llama 2, TinyLlama, Mistral).
//
// The algorithm of sentencepiece's bpe_model.cc, which llama.cpp's SPM
// tokenizer follows: spaces become U+2581 (one more in front of the text when
// add_space_prefix), the text is cut into characters, and the adjacent pair
// whose joined text is the highest-scoring piece merges first (leftmost on
// ties) until no pair is a piece. A merged piece marked unused is split back
// into the two it came from; a character that is no piece becomes its
// <0xNN> byte tokens (byte fallback) or the unknown token.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "util.h"

struct tok_spm {
    int32_t byte_id[256]; // id of <0xNN>, or -1
    bool byte_fallback;   // the vocabulary has byte tokens
    bool has_unused;      // some token is marked unused
};

int spm_init(struct tokenizer *t) {
    struct tok_spm *s = calloc(1, sizeof *s);
    if (!s) return st_fail("tokenizer: out of memory");
    t->spm = s;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        s->byte_id[b] = tok_strmap_get(&t->vocab, name, 6);
        if (s->byte_id[b] >= 0) s->byte_fallback = true;
    }
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] == TOK_TYPE_UNUSED) s->has_unused = true;
    return 0;
}

void spm_free(struct tok_spm *s) { free(s); }

struct symbol {
    size_t start;
    size_t n; // bytes; 0 once merged into the symbol before it
    int32_t prev, next;
};

struct bigram {
    float score;
    int32_t left, right;
    size_t size; // bytes of the joined text when queued
};

struct session {
    const struct tokenizer *t;
    const char *text;
    struct symbol *sym;
    struct bigram *heap;
    size_t n_heap, cap_heap;
    struct tok_strmap
        rev; // unused piece -> bytes of its left part (the last pair queued wins, as in sentencepiece)
};

// Max-heap order: higher score first, then the leftmost.
static bool bigram_before(const struct bigram *a, const struct bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(struct session *s, struct bigram g) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? 2 * s->cap_heap : 64;
        struct bigram *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return st_fail("tokenizer: out of memory for %zu bigrams", cap);
        s->heap = h;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0 && bigram_before(&g, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = g;
    return 0;
}

static struct bigram heap_pop(struct session *s) {
    struct bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!bigram_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

// Queues the pair (left, right) when their joined text is a piece that merges
// (normal, user-defined or unused: the pieces sentencepiece merges into).
static int try_pair(struct session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const struct tokenizer *t = s->t;
    const char *p = s->text + s->sym[left].start;
    size_t n = s->sym[left].n + s->sym[right].n;
    int32_t id = tok_strmap_get(&t->vocab, p, n);
    if (id < 0) return 0;
    uint8_t ty = t->type[id];
    if (ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_USER_DEFINED && ty != TOK_TYPE_UNUSED) return 0;
    if (ty == TOK_TYPE_UNUSED) tok_strmap_put(&s->rev, p, n, (int32_t)s->sym[left].n);
    return heap_push(s, (struct bigram){t->score[id], left, right, n});
}

// Appends the ids of one final symbol's text.
static int emit(struct session *s, const char *p, size_t n, struct tok_ids *out) {
    const struct tokenizer *t = s->t;
    int32_t id = tok_strmap_get(&t->vocab, p, n);
    if (id >= 0 && t->type[id] == TOK_TYPE_UNUSED && s->rev.value) {
        int32_t left = tok_strmap_get(&s->rev, p, n);
        if (left > 0)
            return emit(s, p, (size_t)left, out) || emit(s, p + left, n - (size_t)left, out) ? -1 : 0;
    }
    if (id >= 0) return tok_ids_push(out, id);
    if (!t->spm->byte_fallback) return tok_ids_push(out, t->unk);
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->spm->byte_id[(uint8_t)p[i]];
        if (tok_ids_push(out, b >= 0 ? b : t->unk)) return -1;
    }
    return 0;
}

int spm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out) {
    static const char SPACE[] = "\xe2\x96\x81"; // U+2581, SentencePiece's space
    struct session s = {.t = t};
    int rc = -1;
    char *buf = malloc(3 * (len + 1));
    s.sym = malloc((len + 1) * sizeof *s.sym);
    if (!buf || !s.sym) {
        st_fail("tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    if (t->add_space_prefix) memcpy(buf, SPACE, 3), n = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, SPACE, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    s.text = buf;
    // One symbol per character; an invalid byte is a character of its own.
    int32_t m = 0;
    for (size_t i = 0; i < n; m++) {
        uint32_t cp;
        int k = tok_utf8_decode((const uint8_t *)buf + i, n - i, &cp);
        if (k == 0) k = 1;
        s.sym[m] = (struct symbol){i, (size_t)k, m - 1, m + 1};
        i += (size_t)k;
    }
    s.sym[m - 1].next = -1;
    // Each queued pair names one piece, so 3 per symbol bounds the unused ones.
    if (t->spm->has_unused && tok_strmap_init(&s.rev, 3 * (size_t)m)) goto done;
    for (int32_t i = 0; i + 1 < m; i++)
        if (try_pair(&s, i, i + 1)) goto done;
    while (s.n_heap) {
        struct bigram g = heap_pop(&s);
        struct symbol *left = &s.sym[g.left], *right = &s.sym[g.right];
        // Stale: one side already merged elsewhere.
        if (left->n == 0 || right->n == 0 || left->n + right->n != g.size) continue;
        left->n += right->n;
        right->n = 0;
        left->next = right->next;
        if (right->next >= 0) s.sym[right->next].prev = g.left;
        if (try_pair(&s, left->prev, g.left) || try_pair(&s, g.left, left->next)) goto done;
    }
    for (int32_t i = 0; i >= 0; i = s.sym[i].next)
        if (emit(&s, buf + s.sym[i].start, s.sym[i].n, out)) goto done;
    rc = 0;
done:
    tok_strmap_free(&s.rev);
    free(s.heap);
    free(s.sym);
    free(buf);
    return rc;
}
