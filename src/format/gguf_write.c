// gguf_write.c: see gguf_write.h.
#include "format/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct buf {
    uint8_t *p;
    uint64_t len, cap;
};

struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];
    enum ggml_type type;
    uint8_t *data; // [nbytes]
    uint64_t nbytes;
};

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;
    struct buf kv; // the encoded key/value pairs, in order
    char **keys;   // [n_kv] copies, for duplicate checks
    uint64_t n_kv, cap_kv;
    struct wtensor *tensors; // [n_tensors]
    uint64_t n_tensors, cap_tensors;
};

static int buf_reserve(struct buf *b, uint64_t n) {
    if (n <= b->cap - b->len) return 0;
    if (n > UINT64_MAX / 2 - b->len)
        return st_fail("gguf writer: %llu bytes is too large", (unsigned long long)n);
    uint64_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    if (cap > SIZE_MAX) return st_fail("gguf writer: %llu bytes is too large", (unsigned long long)cap);
    uint8_t *p = realloc(b->p, (size_t)cap);
    if (!p) return st_fail("gguf writer: out of memory for %llu bytes", (unsigned long long)cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(struct buf *b, const void *src, uint64_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static int buf_put_le(struct buf *b, uint64_t v, int n) {
    uint8_t bytes[8];
    for (int i = 0; i < n; i++) bytes[i] = (uint8_t)(v >> (8 * i));
    return buf_put(b, bytes, (uint64_t)n);
}

static int buf_zeros(struct buf *b, uint64_t n) {
    if (buf_reserve(b, n)) return -1;
    memset(b->p + b->len, 0, (size_t)n);
    b->len += n;
    return 0;
}

static int buf_put_str(struct buf *b, const char *s, uint64_t len) {
    return buf_put_le(b, len, 8) || buf_put(b, s, len) ? -1 : 0;
}

struct gguf_writer *gguf_writer_init(void) {
    struct gguf_writer *w = st_xcalloc(1, sizeof *w);
    w->version = 3;
    w->alignment = 32;
    return w;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->kv.p);
    free(w);
}

int gguf_writer_set_version(struct gguf_writer *w, uint32_t version) {
    if (version != 2 && version != 3)
        return st_fail("gguf writer: version %u: only 2 and 3 are written", version);
    w->version = version;
    return 0;
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment) {
    if (alignment < 8 || (alignment & (alignment - 1)) || alignment > (1u << 20))
        return st_fail("gguf writer: alignment %u: must be a power of two from 8 to 1048576", alignment);
    if (gguf_writer_add_u32(w, "general.alignment", alignment)) return -1;
    w->alignment = alignment;
    return 0;
}

// --- values ---------------------------------------------------------------------

static int put_value(struct buf *b, const char *key, const struct gguf_value *v);

static int put_array(struct buf *b, const char *key, const struct gguf_array *a) {
    if ((unsigned)a->type >= GGUF_VTYPE_COUNT)
        return st_fail("gguf writer: key '%s': undefined array element type %d", key, (int)a->type);
    if (a->count > GGUF_MAX_ARRAY_LEN)
        return st_fail("gguf writer: key '%s': %llu elements is over the limit of %llu", key,
                       (unsigned long long)a->count, GGUF_MAX_ARRAY_LEN);
    if (buf_put_le(b, (uint64_t)a->type, 4) || buf_put_le(b, a->count, 8)) return -1;
    size_t esize = gguf_vtype_size(a->type);
    if (esize) {
        if (a->count && !a->data)
            return st_fail("gguf writer: key '%s': array of %llu elements without data", key,
                           (unsigned long long)a->count);
        if (a->count > UINT64_MAX / esize)
            return st_fail("gguf writer: key '%s': %llu elements is too many", key,
                           (unsigned long long)a->count);
        if (a->type == GGUF_VTYPE_BOOL)
            for (uint64_t i = 0; i < a->count; i++)
                if (((const uint8_t *)a->data)[i] > 1)
                    return st_fail("gguf writer: key '%s': bool element %llu is not 0 or 1", key,
                                   (unsigned long long)i);
        return buf_put(b, a->data, a->count * esize);
    }
    if (a->count && !a->items)
        return st_fail("gguf writer: key '%s': array of %llu elements without items", key,
                       (unsigned long long)a->count);
    for (uint64_t i = 0; i < a->count; i++) {
        if (a->items[i].type != a->type)
            return st_fail("gguf writer: key '%s': element %llu has type %s in an array of %s", key,
                           (unsigned long long)i, gguf_vtype_name(a->items[i].type),
                           gguf_vtype_name(a->type));
        if (put_value(b, key, &a->items[i])) return -1;
    }
    return 0;
}

static int put_value(struct buf *b, const char *key, const struct gguf_value *v) {
    switch (v->type) {
    case GGUF_VTYPE_FLOAT32: {
        float f = (float)v->v.f64;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        return buf_put_le(b, bits, 4);
    }
    case GGUF_VTYPE_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, &v->v.f64, 8);
        return buf_put_le(b, bits, 8);
    }
    case GGUF_VTYPE_BOOL:
        if (v->v.u64 > 1)
            return st_fail("gguf writer: key '%s': bool %llu is not 0 or 1", key,
                           (unsigned long long)v->v.u64);
        return buf_put_le(b, v->v.u64, 1);
    case GGUF_VTYPE_STRING:
        if (v->v.str.len && !v->v.str.data) return st_fail("gguf writer: key '%s': string without data", key);
        if (v->v.str.len > GGUF_MAX_STRING_LEN)
            return st_fail("gguf writer: key '%s': a string of %llu bytes is over the limit of %llu", key,
                           (unsigned long long)v->v.str.len, GGUF_MAX_STRING_LEN);
        return buf_put_str(b, v->v.str.data, v->v.str.len);
    case GGUF_VTYPE_ARRAY:
        return put_array(b, key, &v->v.arr);
    case GGUF_VTYPE_UINT8:
    case GGUF_VTYPE_INT8:
    case GGUF_VTYPE_UINT16:
    case GGUF_VTYPE_INT16:
    case GGUF_VTYPE_UINT32:
    case GGUF_VTYPE_INT32:
    case GGUF_VTYPE_UINT64:
    case GGUF_VTYPE_INT64: // the low bytes, as two's complement for the signed types
        return buf_put_le(b, v->v.u64, (int)gguf_vtype_size(v->type));
    case GGUF_VTYPE_COUNT:
        break;
    }
    return st_fail("gguf writer: key '%s': undefined value type %d", key, (int)v->type);
}

int gguf_writer_add_value(struct gguf_writer *w, const char *key, const struct gguf_value *v) {
    if (!key || !*key) return st_fail("gguf writer: empty key");
    uint64_t bad;
    if (!gguf_key_valid(key, strlen(key), &bad))
        return st_fail("gguf writer: key '%.96s': not a valid key at byte %llu (keys are at most %d bytes of "
                       "lower_snake_case ASCII words joined by single dots)",
                       key, (unsigned long long)bad, GGUF_MAX_KEY_LEN);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) return st_fail("gguf writer: key '%s' added twice", key);
    uint64_t mark = w->kv.len;
    uint64_t klen = strlen(key);
    if (buf_put_str(&w->kv, key, klen) || buf_put_le(&w->kv, (uint64_t)v->type, 4) ||
        put_value(&w->kv, key, v)) {
        w->kv.len = mark;
        return -1;
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 16;
        char **keys = realloc(w->keys, (size_t)w->cap_kv * sizeof *keys);
        ST_ASSERT(keys);
        w->keys = keys;
    }
    w->keys[w->n_kv] = strdup(key);
    ST_ASSERT(w->keys[w->n_kv]);
    w->n_kv++;
    return 0;
}

int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t x) {
    struct gguf_value v = {.type = GGUF_VTYPE_UINT32, .v.u64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t x) {
    struct gguf_value v = {.type = GGUF_VTYPE_INT32, .v.i64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t x) {
    struct gguf_value v = {.type = GGUF_VTYPE_UINT64, .v.u64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t x) {
    struct gguf_value v = {.type = GGUF_VTYPE_INT64, .v.i64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float x) {
    struct gguf_value v = {.type = GGUF_VTYPE_FLOAT32, .v.f64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double x) {
    struct gguf_value v = {.type = GGUF_VTYPE_FLOAT64, .v.f64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool x) {
    struct gguf_value v = {.type = GGUF_VTYPE_BOOL, .v.u64 = x};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s) {
    struct gguf_value v = {.type = GGUF_VTYPE_STRING, .v.str = {strlen(s), s}};
    return gguf_writer_add_value(w, key, &v);
}

int gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem, const void *data,
                        uint64_t n) {
    size_t esize = gguf_vtype_size(elem);
    if (!esize)
        return st_fail("gguf writer: key '%s': %s is not a fixed-size element type", key,
                       gguf_vtype_name(elem));
    if (n && !data)
        return st_fail("gguf writer: key '%s': array of %llu elements without data", key,
                       (unsigned long long)n);
    if (n > SIZE_MAX / esize)
        return st_fail("gguf writer: key '%s': %llu elements is too many", key, (unsigned long long)n);
    // host values to little-endian bytes
    uint8_t *le = malloc(n ? (size_t)(n * esize) : 1);
    if (!le)
        return st_fail("gguf writer: key '%s': out of memory for %llu elements", key, (unsigned long long)n);
    const uint8_t *src = data;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t x = 0;
        if (elem == GGUF_VTYPE_BOOL)
            x = ((const bool *)data)[i];
        else if (esize == 1)
            x = src[i];
        else if (esize == 2) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            x = h;
        } else if (esize == 4) {
            uint32_t h;
            memcpy(&h, src + 4 * i, 4);
            x = h;
        } else
            memcpy(&x, src + 8 * i, 8);
        for (size_t k = 0; k < esize; k++) le[i * esize + k] = (uint8_t)(x >> (8 * k));
    }
    struct gguf_value v = {.type = GGUF_VTYPE_ARRAY, .v.arr = {.type = elem, .count = n, .data = le}};
    int rc = gguf_writer_add_value(w, key, &v);
    free(le);
    return rc;
}

int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (n && !strs)
        return st_fail("gguf writer: key '%s': array of %llu strings without data", key,
                       (unsigned long long)n);
    if (n > SIZE_MAX / sizeof(struct gguf_value))
        return st_fail("gguf writer: key '%s': %llu strings is too many", key, (unsigned long long)n);
    struct gguf_value *items = malloc(n ? (size_t)n * sizeof *items : 1);
    if (!items)
        return st_fail("gguf writer: key '%s': out of memory for %llu strings", key, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        items[i] = (struct gguf_value){.type = GGUF_VTYPE_STRING, .v.str = {strlen(strs[i]), strs[i]}};
    struct gguf_value v = {.type = GGUF_VTYPE_ARRAY,
                           .v.arr = {.type = GGUF_VTYPE_STRING, .count = n, .items = items}};
    int rc = gguf_writer_add_value(w, key, &v);
    free(items);
    return rc;
}

// --- tensors ----------------------------------------------------------------------

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data) {
    if (!name || !*name) return st_fail("gguf writer: empty tensor name");
    if (strlen(name) > GGUF_MAX_NAME_LEN)
        return st_fail("gguf writer: tensor '%.96s': the name is %zu bytes long, over the limit of %d", name,
                       strlen(name), GGUF_MAX_NAME_LEN);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return st_fail("gguf writer: tensor '%s' added twice", name);
    if (n_dims < 1 || n_dims > 4)
        return st_fail("gguf writer: tensor '%s': n_dims %u is not 1..4", name, n_dims);
    const struct quant_traits *q = (unsigned)type < GGML_TYPE_COUNT ? quant_get(type) : NULL;
    if (!q) return st_fail("gguf writer: tensor '%s': undefined type %d", name, (int)type);
    struct wtensor t = {.n_dims = n_dims, .type = type, .ne = {1, 1, 1, 1}};
    int64_t rows = 1;
    for (uint32_t j = 0; j < n_dims; j++) {
        if (ne[j] < 1)
            return st_fail("gguf writer: tensor '%s': ne[%u] = %lld is not >= 1", name, j, (long long)ne[j]);
        t.ne[j] = ne[j];
        if (j > 0 && __builtin_mul_overflow(rows, ne[j], &rows))
            return st_fail("gguf writer: tensor '%s': element count overflows", name);
    }
    if (ne[0] % q->block_size)
        return st_fail("gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s block size %lld",
                       name, (long long)ne[0], q->name, (long long)q->block_size);
    uint64_t nbytes = (uint64_t)(ne[0] / q->block_size);
    if (__builtin_mul_overflow(nbytes, (uint64_t)q->type_size, &nbytes) ||
        __builtin_mul_overflow(nbytes, (uint64_t)rows, &nbytes) || nbytes > SIZE_MAX)
        return st_fail("gguf writer: tensor '%s': byte size overflows", name);
    t.nbytes = nbytes;
    t.data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!t.data)
        return st_fail("gguf writer: tensor '%s': out of memory for %llu bytes", name,
                       (unsigned long long)nbytes);
    if (data)
        memcpy(t.data, data, (size_t)nbytes);
    else
        memset(t.data, 0, (size_t)nbytes);
    t.name = strdup(name);
    ST_ASSERT(t.name);
    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? 2 * w->cap_tensors : 16;
        struct wtensor *ts = realloc(w->tensors, (size_t)w->cap_tensors * sizeof *ts);
        ST_ASSERT(ts);
        w->tensors = ts;
    }
    w->tensors[w->n_tensors++] = t;
    return 0;
}

// --- output ------------------------------------------------------------------------

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

int gguf_writer_write_memory(const struct gguf_writer *w, uint8_t **out, uint64_t *size) {
    struct buf b = {0};
    int rc = buf_put(&b, "GGUF", 4) || buf_put_le(&b, w->version, 4) || buf_put_le(&b, w->n_tensors, 8) ||
             buf_put_le(&b, w->n_kv, 8) || buf_put(&b, w->kv.p, w->kv.len);
    uint64_t offset = 0; // of the next tensor in the data section
    for (uint64_t i = 0; i < w->n_tensors && !rc; i++) {
        const struct wtensor *t = &w->tensors[i];
        offset += pad_to(offset, w->alignment);
        rc = buf_put_str(&b, t->name, strlen(t->name)) || buf_put_le(&b, t->n_dims, 4);
        for (uint32_t j = 0; j < t->n_dims && !rc; j++) rc = buf_put_le(&b, (uint64_t)t->ne[j], 8);
        rc = rc || buf_put_le(&b, (uint64_t)t->type, 4) || buf_put_le(&b, offset, 8);
        offset += t->nbytes;
    }
    if (!rc) rc = buf_zeros(&b, pad_to(b.len, w->alignment));
    for (uint64_t i = 0; i < w->n_tensors && !rc; i++) {
        if (i > 0) rc = buf_zeros(&b, pad_to(b.len, w->alignment)); // the data section start is aligned
        rc = rc || buf_put(&b, w->tensors[i].data, w->tensors[i].nbytes);
    }
    if (rc) {
        free(b.p);
        return -1;
    }
    *out = b.p ? b.p : st_xmalloc(1);
    *size = b.len;
    return 0;
}

int gguf_writer_write_file(const struct gguf_writer *w, const char *path) {
    uint8_t *p;
    uint64_t n;
    if (gguf_writer_write_memory(w, &p, &n)) return -1;
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        int e = errno;
        free(p);
        return st_fail("%s: cannot create: %s", path, strerror(e));
    }
    size_t put = fwrite(p, 1, (size_t)n, fp);
    int e = put == n ? 0 : errno;
    free(p);
    if (fclose(fp) != 0 && !e) e = errno;
    if (e || put != n) return st_fail("%s: write failed: %s", path, strerror(e ? e : EIO));
    return 0;
}
