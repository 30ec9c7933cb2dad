// tok_base.c: the pieces every tokenizer file shares: a growable id list, hash
// maps and UTF-8 (declared in tokenizer_impl.h). It depends on nothing else of
// the tokenizer, so tokenizer.c → tokenizer_bpe.c, tokenizer_spm.c → tok_base.c.
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"
#include "util.h"

// --- growable id list ---------------------------------------------------------------

int tok_ids_push(struct tok_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return st_fail("tokenizer: out of memory for %zu token ids", cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

// --- hash maps ----------------------------------------------------------------------

uint32_t tok_hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

static uint32_t slots_for(size_t n) {
    uint32_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

int tok_strmap_init(struct tok_strmap *m, size_t n) {
    memset(m, 0, sizeof *m);
    if (n > (1u << 30)) return st_fail("tokenizer: %zu keys are too many for a map", n);
    uint32_t s = slots_for(n);
    m->mask = s - 1;
    m->hash = malloc(s * sizeof *m->hash);
    m->value = malloc(s * sizeof *m->value);
    m->key = malloc(s * sizeof *m->key);
    m->key_len = malloc(s * sizeof *m->key_len);
    if (!m->hash || !m->value || !m->key || !m->key_len) {
        tok_strmap_free(m);
        return st_fail("tokenizer: out of memory for a map of %zu keys", n);
    }
    for (uint32_t i = 0; i < s; i++) m->value[i] = -1;
    return 0;
}

void tok_strmap_free(struct tok_strmap *m) {
    free(m->hash);
    free(m->value);
    free((void *)m->key);
    free(m->key_len);
    memset(m, 0, sizeof *m);
}

// The slot holding key, or the empty slot where it would go.
static uint32_t strmap_slot(const struct tok_strmap *m, const char *key, size_t len, uint32_t h) {
    uint32_t i = h & m->mask;
    while (m->value[i] >= 0) {
        if (m->hash[i] == h && m->key_len[i] == len && memcmp(m->key[i], key, len) == 0) return i;
        i = (i + 1) & m->mask;
    }
    return i;
}

int32_t tok_strmap_put(struct tok_strmap *m, const char *key, size_t len, int32_t value) {
    ST_ASSERT(value >= 0 && len <= UINT32_MAX);
    uint32_t h = tok_hash(key, len);
    uint32_t i = strmap_slot(m, key, len, h);
    int32_t old = m->value[i];
    m->hash[i] = h;
    m->key[i] = key;
    m->key_len[i] = (uint32_t)len;
    m->value[i] = value;
    return old;
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len) {
    return m->value[strmap_slot(m, key, len, tok_hash(key, len))];
}

int tok_u64map_init(struct tok_u64map *m, size_t n) {
    memset(m, 0, sizeof *m);
    if (n > (1u << 30)) return st_fail("tokenizer: %zu keys are too many for a map", n);
    uint32_t s = slots_for(n);
    m->mask = s - 1;
    m->key = malloc(s * sizeof *m->key);
    m->a = malloc(s * sizeof *m->a);
    m->b = malloc(s * sizeof *m->b);
    if (!m->key || !m->a || !m->b) {
        tok_u64map_free(m);
        return st_fail("tokenizer: out of memory for a map of %zu keys", n);
    }
    memset(m->key, 0xff, s * sizeof *m->key);
    return 0;
}

void tok_u64map_free(struct tok_u64map *m) {
    free(m->key);
    free(m->a);
    free(m->b);
    memset(m, 0, sizeof *m);
}

static uint32_t u64_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

void tok_u64map_put(struct tok_u64map *m, uint64_t key, int32_t a, int32_t b) {
    ST_ASSERT(key != UINT64_MAX);
    uint32_t i = u64_hash(key) & m->mask;
    while (m->key[i] != UINT64_MAX && m->key[i] != key) i = (i + 1) & m->mask;
    m->key[i] = key;
    m->a[i] = a;
    m->b[i] = b;
}

bool tok_u64map_get(const struct tok_u64map *m, uint64_t key, int32_t *a, int32_t *b) {
    uint32_t i = u64_hash(key) & m->mask;
    while (m->key[i] != UINT64_MAX) {
        if (m->key[i] == key) {
            *a = m->a[i];
            *b = m->b[i];
            return true;
        }
        i = (i + 1) & m->mask;
    }
    return false;
}

// --- UTF-8 --------------------------------------------------------------------------

int tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < (size_t)len) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

int tok_utf8_encode(uint32_t cp, char *out) {
    ST_ASSERT(cp <= 0x10ffff);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}
