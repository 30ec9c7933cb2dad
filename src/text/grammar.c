// grammar.c: the lazily built matcher of a compiled grammar (grammar.h), the
// vocabulary trie and the logits mask. GBNF is parsed in grammar_gbnf.c, JSON
// schemas are compiled to GBNF in json_schema.c.
//
// A parse stack is a chain of frames: a frame is (pos, parent) where pos is
// the next element to match — always a byte set in a stack of a state — and
// parent the frame of the reference to return past. Frames are interned, so
// equal stacks are the same pointer; a reference that ends its alternative
// pushes nothing (a tail call), which keeps right recursion (x*) flat and
// lets the set of stacks repeat, so the cache of steps pays.
#include "text/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar_impl.h"
#include "text/tokenizer.h"
#include "util.h"

// --- the matcher --------------------------------------------------------------------

struct frame {
    const struct gelem *pos;
    struct frame *parent;
    struct frame *hnext; // intern table chain
};

// The accepting stack: the root rule has been matched completely.
static struct frame accept_frame;
#define ACCEPT (&accept_frame)

#define MAX_STATES 4096 // past this many cached states (or 4M frames) the caches are flushed
#define STATE_BUCKETS 8192
#define ARENA_CHUNK 4096

struct gstate {
    struct frame **f; // sorted by address, unique
    int n;
    uint32_t hash;
    int hnext;
    int32_t next[256]; // -2 unknown, -1 dead, else the state reached by the byte
};

struct grammar_state {
    const struct grammar *g;
    // frames: interned in a hash table, allocated in chunks
    struct frame **fhash;
    size_t fhash_cap, n_frames;
    struct frame **chunks;
    int n_chunks, chunk_used;
    // states: interned, each with its cached steps
    struct gstate *states;
    int n_states, cap_states;
    int *shash; // [STATE_BUCKETS] chain heads
    int cur;    // the current state
    // scratch for one step
    struct frame **tmp;
    int n_tmp, cap_tmp;
    // the mask walk
    uint32_t *stamp; // [n_vocab] == epoch: allowed this call
    int n_stamp;
    uint32_t epoch;
};

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static void frames_reset(struct grammar_state *s) {
    for (int i = 0; i < s->n_chunks; i++) free(s->chunks[i]);
    free(s->chunks);
    s->chunks = NULL;
    s->n_chunks = 0;
    s->chunk_used = ARENA_CHUNK;
    memset(s->fhash, 0, sizeof *s->fhash * s->fhash_cap);
    s->n_frames = 0;
}

static struct frame *frame_intern(struct grammar_state *s, const struct gelem *pos, struct frame *parent) {
    uint32_t h = mix((uint64_t)(uintptr_t)pos * 31 + (uint64_t)(uintptr_t)parent);
    size_t b = h & (s->fhash_cap - 1);
    for (struct frame *f = s->fhash[b]; f; f = f->hnext)
        if (f->pos == pos && f->parent == parent) return f;
    if (s->chunk_used == ARENA_CHUNK) {
        s->chunks = realloc(s->chunks, sizeof *s->chunks * (size_t)(s->n_chunks + 1));
        ST_ASSERT(s->chunks);
        s->chunks[s->n_chunks++] = st_xmalloc(sizeof(struct frame) * ARENA_CHUNK);
        s->chunk_used = 0;
    }
    struct frame *f = &s->chunks[s->n_chunks - 1][s->chunk_used++];
    *f = (struct frame){pos, parent, s->fhash[b]};
    s->fhash[b] = f;
    if (++s->n_frames > s->fhash_cap) { // grow the table: rehash every frame
        size_t cap = s->fhash_cap * 2;
        struct frame **t = st_xcalloc(cap, sizeof *t);
        for (size_t i = 0; i < s->fhash_cap; i++) {
            for (struct frame *x = s->fhash[i], *nx; x; x = nx) {
                nx = x->hnext;
                size_t nb =
                    mix((uint64_t)(uintptr_t)x->pos * 31 + (uint64_t)(uintptr_t)x->parent) & (cap - 1);
                x->hnext = t[nb];
                t[nb] = x;
            }
        }
        free(s->fhash);
        s->fhash = t;
        s->fhash_cap = cap;
    }
    return f;
}

static void tmp_push(struct grammar_state *s, struct frame *f) {
    if (s->n_tmp == s->cap_tmp) {
        s->cap_tmp = s->cap_tmp ? 2 * s->cap_tmp : 64;
        s->tmp = realloc(s->tmp, sizeof *s->tmp * (size_t)s->cap_tmp);
        ST_ASSERT(s->tmp);
    }
    s->tmp[s->n_tmp++] = f;
}

// Pushes to tmp every stack that continues at pos with return frame parent,
// expanded until each stack's top is a byte set (or the accepting stack).
static void expand(struct grammar_state *s, const struct gelem *pos, struct frame *parent) {
    for (;;) {
        if (pos->kind == G_BYTES) {
            tmp_push(s, frame_intern(s, pos, parent));
            return;
        }
        if (pos->kind == G_END_ALT) {
            if (!parent) {
                tmp_push(s, ACCEPT);
                return;
            }
            pos = parent->pos + 1;
            parent = parent->parent;
            continue;
        }
        ST_ASSERT(pos->kind == G_REF);
        // a reference that ends its alternative returns where its rule would: no frame
        struct frame *ret = pos[1].kind == G_END_ALT ? parent : frame_intern(s, pos, parent);
        const struct gelem *e = s->g->rules[pos->arg].e;
        while (e->kind != G_END_RULE) {
            expand(s, e, ret);
            while (e->kind != G_END_ALT) e++;
            e++;
        }
        return;
    }
}

static int ptr_cmp(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (struct frame *const *)a, y = (uintptr_t) * (struct frame *const *)b;
    return x < y ? -1 : x > y;
}

// Interns the set in tmp as a state; returns its index (-1 for the empty set).
static int state_intern(struct grammar_state *s) {
    if (s->n_tmp == 0) return -1;
    qsort(s->tmp, (size_t)s->n_tmp, sizeof *s->tmp, ptr_cmp);
    int n = 0;
    for (int i = 0; i < s->n_tmp; i++)
        if (!n || s->tmp[i] != s->tmp[n - 1]) s->tmp[n++] = s->tmp[i];
    uint64_t h = (uint64_t)n;
    for (int i = 0; i < n; i++) h = h * 1000003u ^ (uint64_t)(uintptr_t)s->tmp[i];
    uint32_t hash = mix(h);
    int *head = &s->shash[hash & (STATE_BUCKETS - 1)];
    for (int i = *head; i >= 0; i = s->states[i].hnext) {
        const struct gstate *st = &s->states[i];
        if (st->hash == hash && st->n == n && !memcmp(st->f, s->tmp, sizeof *s->tmp * (size_t)n)) return i;
    }
    if (s->n_states == s->cap_states) { // flushes happen between walks, never inside one
        s->cap_states *= 2;
        s->states = realloc(s->states, sizeof *s->states * (size_t)s->cap_states);
        ST_ASSERT(s->states);
    }
    struct gstate *st = &s->states[s->n_states];
    st->f = st_xmalloc(sizeof *st->f * (size_t)n);
    memcpy(st->f, s->tmp, sizeof *st->f * (size_t)n);
    st->n = n;
    st->hash = hash;
    st->hnext = *head;
    for (int b = 0; b < 256; b++) st->next[b] = -2;
    *head = s->n_states;
    return s->n_states++;
}

static void states_reset(struct grammar_state *s) {
    for (int i = 0; i < s->n_states; i++) free(s->states[i].f);
    s->n_states = 0;
    for (int i = 0; i < STATE_BUCKETS; i++) s->shash[i] = -1;
}

// Copies a stack into the fresh frame table.
static struct frame *frame_copy(struct grammar_state *s, const struct frame *f) {
    if (!f || f == ACCEPT) return (struct frame *)f;
    return frame_intern(s, f->pos, frame_copy(s, f->parent));
}

// Forgets every cached state but the current one (the caches are full).
static void cache_flush(struct grammar_state *s) {
    const struct gstate *cur = &s->states[s->cur];
    int n = cur->n;
    struct frame **keep = st_xmalloc(sizeof *keep * (size_t)n);
    struct frame **chunks = s->chunks;
    int n_chunks = s->n_chunks;
    memcpy(keep, cur->f, sizeof *keep * (size_t)n);
    s->chunks = NULL; // the old frames stay readable until copied
    s->n_chunks = 0;
    s->chunk_used = ARENA_CHUNK;
    memset(s->fhash, 0, sizeof *s->fhash * s->fhash_cap);
    s->n_frames = 0;
    s->n_tmp = 0;
    for (int i = 0; i < n; i++) tmp_push(s, frame_copy(s, keep[i]));
    for (int i = 0; i < n_chunks; i++) free(chunks[i]);
    free(chunks);
    free(keep);
    states_reset(s);
    s->cur = state_intern(s);
}

// The state reached from state i by byte b (-1: none). Cached.
static int step(struct grammar_state *s, int i, unsigned b) {
    int32_t nx = s->states[i].next[b];
    if (nx != -2) return nx;
    s->n_tmp = 0;
    const struct gstate *st = &s->states[i];
    for (int k = 0; k < st->n; k++) {
        const struct frame *f = st->f[k];
        if (f == ACCEPT || !bset_has(&s->g->sets[f->pos->arg], b)) continue;
        expand(s, f->pos + 1, f->parent);
    }
    nx = state_intern(s);
    s->states[i].next[b] = nx;
    return nx;
}

struct grammar_state *grammar_state_new(const struct grammar *g) {
    struct grammar_state *s = st_xcalloc(1, sizeof *s);
    s->g = g;
    s->fhash_cap = 1024;
    s->fhash = st_xcalloc(s->fhash_cap, sizeof *s->fhash);
    s->chunk_used = ARENA_CHUNK;
    s->cap_states = 256;
    s->states = st_xmalloc(sizeof *s->states * (size_t)s->cap_states);
    s->shash = st_xmalloc(sizeof *s->shash * STATE_BUCKETS);
    states_reset(s);
    const struct gelem *e = g->rules[g->root].e;
    while (e->kind != G_END_RULE) {
        expand(s, e, NULL);
        while (e->kind != G_END_ALT) e++;
        e++;
    }
    s->cur = state_intern(s);
    if (s->cur < 0) { // cannot happen for a parsed grammar: every rule has an alternative
        grammar_state_free(s);
        st_fail("grammar: the root rule matches nothing");
        return NULL;
    }
    return s;
}

void grammar_state_free(struct grammar_state *s) {
    if (!s) return;
    states_reset(s);
    frames_reset(s);
    free(s->fhash);
    free(s->states);
    free(s->shash);
    free(s->tmp);
    free(s->stamp);
    free(s);
}

// Bounds the caches: flushes them (keeping the current state) when they are full.
static void ensure_room(struct grammar_state *s) {
    if (s->n_states > MAX_STATES || s->n_frames > ((size_t)1 << 22)) cache_flush(s);
}

int grammar_state_accept(struct grammar_state *s, const char *bytes, size_t n) {
    ensure_room(s);
    int i = s->cur;
    for (size_t k = 0; k < n; k++) {
        i = step(s, i, (unsigned char)bytes[k]);
        if (i < 0) return -1;
    }
    s->cur = i;
    return 0;
}

bool grammar_state_complete(const struct grammar_state *s) {
    const struct gstate *st = &s->states[s->cur];
    for (int k = 0; k < st->n; k++)
        if (st->f[k] == ACCEPT) return true;
    return false;
}

bool grammar_state_can_continue(const struct grammar_state *s) {
    const struct gstate *st = &s->states[s->cur];
    for (int k = 0; k < st->n; k++)
        if (st->f[k] != ACCEPT) return true;
    return false;
}

// --- the vocabulary trie and the mask ---------------------------------------------------

struct trie_node {
    int child, sibling; // first child, next sibling (-1: none)
    int token;          // first token ending here (-1: none); more through next_token
    unsigned char byte; // the edge into this node
};

struct grammar_vocab {
    int n_vocab;
    struct trie_node *nodes;
    int n_nodes;
    int32_t *next_token; // [n_vocab] chain of tokens ending at the same node
    char **bytes;        // [n_vocab] each token's bytes (NULL: none)
    int *len;            // [n_vocab]
    bool *eog;           // [n_vocab]
};

void grammar_vocab_free(struct grammar_vocab *v) {
    if (!v) return;
    for (int i = 0; i < v->n_vocab; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->eog);
    free(v->nodes);
    free(v->next_token);
    free(v);
}

struct grammar_vocab *grammar_vocab_new(const struct tokenizer *t) {
    const int n = tokenizer_n_vocab(t);
    struct grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return st_fail("grammar: out of memory"), NULL;
    v->n_vocab = n;
    v->bytes = calloc((size_t)n, sizeof *v->bytes);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->eog = calloc((size_t)n, sizeof *v->eog);
    v->next_token = malloc(sizeof *v->next_token * (size_t)n);
    int cap = 1 << 16;
    v->nodes = malloc(sizeof *v->nodes * (size_t)cap);
    if (!v->bytes || !v->len || !v->eog || !v->next_token || !v->nodes) goto oom;
    v->nodes[0] = (struct trie_node){-1, -1, -1, 0};
    v->n_nodes = 1;
    // A piece after an ordinary token: SentencePiece drops a leading space only
    // after the start or a control token.
    int32_t prev = tokenizer_find(t, "a");
    char buf[512];
    for (int id = 0; id < n; id++) {
        v->next_token[id] = -1;
        v->eog[id] = tokenizer_is_eog(t, id);
        int len = tokenizer_piece(t, prev, id, false, buf, sizeof buf);
        if (len <= 0 || len > (int)sizeof buf) continue; // no bytes (control) or absurdly long
        if (!(v->bytes[id] = malloc((size_t)len))) goto oom;
        memcpy(v->bytes[id], buf, (size_t)len);
        v->len[id] = len;
        int node = 0;
        for (int k = 0; k < len; k++) {
            unsigned char b = (unsigned char)buf[k];
            int c = v->nodes[node].child;
            while (c >= 0 && v->nodes[c].byte != b) c = v->nodes[c].sibling;
            if (c < 0) {
                if (v->n_nodes == cap) {
                    cap *= 2;
                    struct trie_node *nn = realloc(v->nodes, sizeof *nn * (size_t)cap);
                    if (!nn) goto oom;
                    v->nodes = nn;
                }
                c = v->n_nodes++;
                v->nodes[c] = (struct trie_node){-1, v->nodes[node].child, -1, b};
                v->nodes[node].child = c;
            }
            node = c;
        }
        v->next_token[id] = v->nodes[node].token;
        v->nodes[node].token = id;
    }
    return v;
oom:
    grammar_vocab_free(v);
    st_fail("grammar: out of memory for the vocabulary trie (%d tokens)", n);
    return NULL;
}

static void walk(struct grammar_state *s, const struct grammar_vocab *v, int node, int state) {
    for (int t = v->nodes[node].token; t >= 0; t = v->next_token[t]) s->stamp[t] = s->epoch;
    for (int c = v->nodes[node].child; c >= 0; c = v->nodes[c].sibling) {
        int nx = step(s, state, v->nodes[c].byte);
        if (nx >= 0) walk(s, v, c, nx);
    }
}

void grammar_mask(struct grammar_state *s, const struct grammar_vocab *v, float *logits) {
    if (s->n_stamp != v->n_vocab) {
        free(s->stamp);
        s->stamp = st_xcalloc((size_t)v->n_vocab, sizeof *s->stamp);
        s->n_stamp = v->n_vocab;
        s->epoch = 0;
    }
    if (++s->epoch == 0) {
        memset(s->stamp, 0, sizeof *s->stamp * (size_t)v->n_vocab);
        s->epoch = 1;
    }
    ensure_room(s);
    for (int c = v->nodes[0].child; c >= 0; c = v->nodes[c].sibling) {
        int nx = step(s, s->cur, v->nodes[c].byte);
        if (nx >= 0) walk(s, v, c, nx);
    }
    const bool complete = grammar_state_complete(s);
    for (int id = 0; id < v->n_vocab; id++) {
        if (v->eog[id] ? !complete : s->stamp[id] != s->epoch) logits[id] = -INFINITY;
    }
}

int grammar_accept_token(struct grammar_state *s, const struct grammar_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n_vocab) return -1;
    if (v->eog[id]) return grammar_state_complete(s) ? 0 : -1;
    if (!v->bytes[id]) return -1;
    return grammar_state_accept(s, v->bytes[id], (size_t)v->len[id]);
}
