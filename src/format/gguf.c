// gguf.c: see gguf.h.
//
// The reader trusts nothing in the file. Before anything read from it is used:
// - every read is bounded by the file size (truncation anywhere is an error);
// - magic "GGUF"; version 2 or 3 (1 and big-endian files are refused by name);
// - n_kv, n_tensors and every array count are checked against the bytes left
//   (each entry needs a minimum number of bytes) BEFORE anything is allocated,
//   and parsed strings/nested arrays are capped in total (GGUF_MAX_ITEMS);
// - string lengths fit in the file and are at most GGUF_MAX_STRING_LEN;
//   arrays hold at most GGUF_MAX_ARRAY_LEN elements;
// - keys are valid (gguf_key_valid: dot-separated lower_snake_case ASCII, at
//   most 65535 bytes) and unique; tensor names are non-empty, at most
//   GGUF_MAX_NAME_LEN bytes, without a NUL byte, and unique;
// - value types and array element types are defined; bools are 0 or 1;
//   arrays nest at most GGUF_MAX_DEPTH deep;
// - general.alignment, when present, is a uint32 power of two from 8 to 1 MiB
//   (the specification asks for a multiple of 8: tensor data at an offset of
//   1, 2 or 4 would be read as misaligned floats and half floats);
// - each tensor: n_dims 1..4, every dimension >= 1, element count and byte size
//   without overflow, type defined (quant_get), ne[0] a multiple of the block
//   size, offset aligned, data inside the file, no two tensors overlapping.
//
// Where llama.cpp's reader (ggml's gguf.cpp) differs: it also refuses arrays
// of arrays and tensors whose offsets are not exactly the running sum of the
// padded sizes before them, neither of which the specification asks for; it
// accepts n_dims 0 and zero-sized dimensions, which no writer produces, and an
// alignment of 1, 2 or 4, which the specification forbids; this reader refuses
// those. Everything else it checks is checked here too.
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MIN_ALIGNMENT 8
#define GGUF_MAX_ALIGNMENT (1u << 20)
#define GGUF_MAX_DEPTH 8            // levels of arrays inside one value
#define GGUF_MAX_ITEMS (1ull << 24) // strings and arrays parsed inside arrays, whole file
// Fewest bytes a kv (key length, 1-byte key, type, 1-byte value) and a tensor
// info (name length, 1-byte name, n_dims, one dim, type, offset) can take.
#define GGUF_MIN_KV_BYTES 14
#define GGUF_MIN_TENSOR_BYTES 33

#define FIX_TRUNCATED "the file is truncated or corrupt — download it again"
#define FIX_CORRUPT "the file is corrupt — re-convert the model or download it again"

// A name with the entry it belongs to, sorted for duplicate checks and lookup.
struct name_ref {
    const char *data;
    uint64_t len;
    size_t index;
};

// The public struct is the first member so a gguf_file* is a gguf_impl*.
struct gguf_impl {
    struct gguf_file pub;
    struct name_ref *kv_sorted;     // [n_kv] by key
    struct name_ref *tensor_sorted; // [n_tensors] by name
    size_t map_len;                 // nonzero when pub.map is our mmap
};

// --- the cursor ---------------------------------------------------------------

enum rd_ctx { RD_HEADER, RD_KV, RD_TENSOR };

struct rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *name; // file name for messages
    // where the cursor is, for messages
    enum rd_ctx ctx;
    uint64_t entry;       // kv or tensor number
    struct gguf_str what; // its key or name once read (len 0 before)
    int depth;            // arrays entered within the current value
    uint64_t idx[GGUF_MAX_DEPTH];
    uint64_t items; // strings and arrays parsed inside arrays so far
};

// Appends s to buf (printable, escaped, cut after max bytes).
static void append_escaped(char *buf, size_t cap, const char *s, uint64_t len, uint64_t max) {
    size_t n = strlen(buf);
    for (uint64_t i = 0; i < len && i < max && n + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\'' || c == '\\')
            n += (size_t)snprintf(buf + n, cap - n, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", c);
        else
            buf[n++] = (char)c;
        buf[n] = 0;
    }
    if (len > max && n + 4 < cap) strcat(buf, "...");
}

// "key 'tokenizer.ggml.tokens'[12]", "tensor 'blk.0.attn_q.weight'", "kv #3", "header".
static void rd_where(const struct rd *r, char *buf, size_t cap) {
    buf[0] = 0;
    if (r->ctx == RD_HEADER) {
        snprintf(buf, cap, "header");
        return;
    }
    const char *kind = r->ctx == RD_KV ? "key" : "tensor";
    if (r->what.len == 0) {
        snprintf(buf, cap, "%s #%llu", r->ctx == RD_KV ? "kv" : "tensor", (unsigned long long)r->entry);
        return;
    }
    snprintf(buf, cap, "%s '", kind);
    append_escaped(buf, cap, r->what.data, r->what.len, 96);
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "'");
    for (int d = 0; d < r->depth; d++) {
        n = strlen(buf);
        snprintf(buf + n, cap - n, "[%llu]", (unsigned long long)r->idx[d]);
    }
}

// Fails with "NAME: WHERE FIELD: message" (FIELD may be "").
__attribute__((format(printf, 3, 4))) static int rd_fail(const struct rd *r, const char *field,
                                                         const char *fmt, ...) {
    char where[384], msg[640];
    rd_where(r, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return st_fail("%s: %s%s%s: %s", r->name, where, *field ? " " : "", field, msg);
}

static int rd_need(struct rd *r, uint64_t n, const char *field) {
    if (r->size - r->pos >= n) return 0;
    return rd_fail(r, field, "needs %llu bytes at offset %llu but the file ends at %llu; " FIX_TRUNCATED,
                   (unsigned long long)n, (unsigned long long)r->pos, (unsigned long long)r->size);
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd_u32(struct rd *r, const char *field, uint32_t *out) {
    if (rd_need(r, 4, field)) return -1;
    *out = (uint32_t)load_le(r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(struct rd *r, const char *field, uint64_t *out) {
    if (rd_need(r, 8, field)) return -1;
    *out = load_le(r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int rd_str(struct rd *r, const char *field, struct gguf_str *out) {
    uint64_t len;
    if (rd_u64(r, field, &len)) return -1;
    if (len > r->size - r->pos)
        return rd_fail(r, field,
                       "string length %llu runs past the end of the file (%llu bytes left); " FIX_TRUNCATED,
                       (unsigned long long)len, (unsigned long long)(r->size - r->pos));
    if (len > GGUF_MAX_STRING_LEN)
        return rd_fail(r, field, "string length %llu is over the limit of %llu bytes; " FIX_CORRUPT,
                       (unsigned long long)len, GGUF_MAX_STRING_LEN);
    out->len = len;
    out->data = (const char *)r->p + r->pos;
    r->pos += len;
    return 0;
}

bool gguf_key_valid(const char *key, uint64_t len, uint64_t *bad) {
    uint64_t at = len;
    if (len > 0 && len <= GGUF_MAX_KEY_LEN)
        for (at = 0; at < len; at++) {
            const char c = key[at];
            if (c == '.' ? at == 0 || at == len - 1 || key[at - 1] == '.'
                         : !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
                break;
        }
    if (bad) *bad = at;
    return len > 0 && len <= GGUF_MAX_KEY_LEN && at == len;
}

// A key or tensor name: non-empty and without NUL (it is looked up as a C
// string); a key valid (gguf_key_valid), a name at most GGUF_MAX_NAME_LEN bytes.
static int rd_name(struct rd *r, const char *field, struct gguf_str *out) {
    if (rd_str(r, field, out)) return -1;
    if (out->len == 0) return rd_fail(r, field, "is empty; " FIX_CORRUPT);
    if (memchr(out->data, 0, out->len)) return rd_fail(r, field, "contains a NUL byte; " FIX_CORRUPT);
    char shown[160] = "";
    append_escaped(shown, sizeof shown, out->data, out->len, 96);
    if (r->ctx == RD_TENSOR && out->len > GGUF_MAX_NAME_LEN)
        return rd_fail(r, field,
                       "'%s' is %llu bytes long, over the limit of %d (ggml's GGML_MAX_NAME); " FIX_CORRUPT,
                       shown, (unsigned long long)out->len, GGUF_MAX_NAME_LEN);
    uint64_t bad;
    if (r->ctx == RD_KV && !gguf_key_valid(out->data, out->len, &bad)) {
        if (out->len > GGUF_MAX_KEY_LEN)
            return rd_fail(r, field, "'%s' is %llu bytes long, over the limit of %d; " FIX_CORRUPT, shown,
                           (unsigned long long)out->len, GGUF_MAX_KEY_LEN);
        return rd_fail(r, field,
                       "'%s' is not a valid key: byte %llu (0x%02x) breaks the rule that keys are "
                       "lower_snake_case ASCII words joined by single dots; " FIX_CORRUPT,
                       shown, (unsigned long long)bad, (unsigned char)out->data[bad]);
    }
    return 0;
}

// --- values -------------------------------------------------------------------

static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64",
};
static const uint8_t vtype_sizes[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(enum gguf_vtype t) {
    return (unsigned)t < GGUF_VTYPE_COUNT ? vtype_names[t] : "unknown";
}

size_t gguf_vtype_size(enum gguf_vtype t) { return (unsigned)t < GGUF_VTYPE_COUNT ? vtype_sizes[t] : 0; }

static bool vtype_is_int(enum gguf_vtype t) {
    return t == GGUF_VTYPE_UINT8 || t == GGUF_VTYPE_INT8 || t == GGUF_VTYPE_UINT16 || t == GGUF_VTYPE_INT16 ||
           t == GGUF_VTYPE_UINT32 || t == GGUF_VTYPE_INT32 || t == GGUF_VTYPE_UINT64 || t == GGUF_VTYPE_INT64;
}

static bool vtype_is_signed(enum gguf_vtype t) {
    return t == GGUF_VTYPE_INT8 || t == GGUF_VTYPE_INT16 || t == GGUF_VTYPE_INT32 || t == GGUF_VTYPE_INT64;
}

// Decodes one fixed-size element of type t at p into v.
static void decode_fixed(enum gguf_vtype t, const uint8_t *p, struct gguf_value *v) {
    int n = (int)vtype_sizes[t];
    uint64_t raw = load_le(p, n);
    v->type = t;
    if (t == GGUF_VTYPE_FLOAT32) {
        uint32_t b = (uint32_t)raw;
        float f;
        memcpy(&f, &b, 4);
        v->v.f64 = f;
    } else if (t == GGUF_VTYPE_FLOAT64) {
        memcpy(&v->v.f64, &raw, 8);
    } else if (vtype_is_signed(t)) {
        int shift = 64 - 8 * n; // sign-extend from n bytes
        v->v.i64 = (int64_t)(raw << shift) >> shift;
    } else {
        v->v.u64 = raw;
    }
}

static void value_free(struct gguf_value *v) {
    if (v->type != GGUF_VTYPE_ARRAY || !v->v.arr.items) return;
    for (uint64_t i = 0; i < v->v.arr.count; i++) value_free(&v->v.arr.items[i]);
    free(v->v.arr.items);
    v->v.arr.items = NULL;
}

static int rd_value(struct rd *r, enum gguf_vtype t, struct gguf_value *out);

static int rd_array(struct rd *r, struct gguf_array *a) {
    if (r->depth >= GGUF_MAX_DEPTH)
        return rd_fail(r, "", "arrays are nested more than %d deep; " FIX_CORRUPT, GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t count;
    if (rd_u32(r, "array element type", &et)) return -1;
    if (et >= GGUF_VTYPE_COUNT)
        return rd_fail(r, "array element type", "is undefined (%u); " FIX_CORRUPT, et);
    if (rd_u64(r, "array count", &count)) return -1;
    a->type = (enum gguf_vtype)et;
    uint64_t left = r->size - r->pos;
    // smallest encoding of one element: its bytes, a string length, or a type and count
    uint64_t min_elem = vtype_sizes[et] ? vtype_sizes[et] : et == GGUF_VTYPE_STRING ? 8 : 12;
    if (count > left / min_elem)
        return rd_fail(r, "array count",
                       "%llu elements of %s cannot fit in the %llu bytes left; " FIX_TRUNCATED,
                       (unsigned long long)count, vtype_names[et], (unsigned long long)left);
    if (count > GGUF_MAX_ARRAY_LEN)
        return rd_fail(r, "array count", "%llu elements is over the limit of %llu; " FIX_CORRUPT,
                       (unsigned long long)count, GGUF_MAX_ARRAY_LEN);
    if (vtype_sizes[et]) {
        a->data = r->p + r->pos;
        if (et == GGUF_VTYPE_BOOL) {
            for (uint64_t i = 0; i < count; i++)
                if (r->p[r->pos + i] > 1) {
                    r->idx[r->depth++] = i;
                    return rd_fail(r, "", "bool is %u, not 0 or 1; " FIX_CORRUPT, r->p[r->pos + i]);
                }
        }
        r->pos += count * vtype_sizes[et];
        a->count = count;
        return 0;
    }
    if (count > GGUF_MAX_ITEMS - r->items)
        return rd_fail(r, "array count",
                       "%llu more strings or arrays exceed the limit of %llu in one file; " FIX_CORRUPT,
                       (unsigned long long)count, (unsigned long long)GGUF_MAX_ITEMS);
    r->items += count;
    if (count == 0) return 0;
    a->items = calloc(count, sizeof *a->items);
    if (!a->items)
        return rd_fail(r, "array count", "out of memory for %llu elements", (unsigned long long)count);
    a->count = count; // set now so a partial array is freed in full (unparsed items are zero)
    int depth = r->depth++;
    for (uint64_t i = 0; i < count; i++) {
        r->idx[depth] = i;
        if (rd_value(r, a->type, &a->items[i])) return -1;
    }
    r->depth = depth;
    return 0;
}

static int rd_value(struct rd *r, enum gguf_vtype t, struct gguf_value *out) {
    out->type = t;
    if (t == GGUF_VTYPE_STRING) return rd_str(r, "value", &out->v.str);
    if (t == GGUF_VTYPE_ARRAY) {
        memset(&out->v.arr, 0, sizeof out->v.arr);
        return rd_array(r, &out->v.arr);
    }
    if (rd_need(r, vtype_sizes[t], "value")) return -1;
    decode_fixed(t, r->p + r->pos, out);
    if (t == GGUF_VTYPE_BOOL && out->v.u64 > 1)
        return rd_fail(r, "", "bool is %llu, not 0 or 1; " FIX_CORRUPT, (unsigned long long)out->v.u64);
    r->pos += vtype_sizes[t];
    return 0;
}

// --- names ----------------------------------------------------------------------

static int str_cmp(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

static int name_ref_cmp(const void *pa, const void *pb) {
    const struct name_ref *a = pa, *b = pb;
    return str_cmp(a->data, a->len, b->data, b->len);
}

static const struct name_ref *name_lookup(const struct name_ref *refs, uint64_t n, const char *s) {
    uint64_t len = strlen(s), lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(refs[mid].data, refs[mid].len, s, len);
        if (c == 0) return &refs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

struct off_ref {
    uint64_t offset;
    size_t index;
};

static int off_ref_cmp(const void *pa, const void *pb) {
    const struct off_ref *a = pa, *b = pb;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

// --- the file -------------------------------------------------------------------------

static int parse_header(struct rd *r, struct gguf_file *f) {
    if (r->size == 0)
        return st_fail("%s: header magic: the file is empty; download the model again", r->name);
    if (r->size < 4 || memcmp(r->p, GGUF_MAGIC, 4) != 0) {
        char got[32] = "";
        for (uint64_t i = 0; i < 4 && i < r->size; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%02x", i ? " " : "", r->p[i]);
        return st_fail("%s: header magic: not a GGUF file (first bytes %s, expected 47 47 55 46 \"GGUF\"); "
                       "check that the path names a .gguf model",
                       r->name, got);
    }
    r->pos = 4;
    if (rd_u32(r, "version", &f->version)) return -1;
    uint32_t v = f->version, swapped = __builtin_bswap32(v);
    if (v == 1)
        return st_fail("%s: header version: unsupported GGUF version 1; re-convert the model", r->name);
    if (v != 2 && v != 3) {
        if (swapped >= 1 && swapped <= 3)
            return st_fail(
                "%s: header version: reads as 0x%08x, a big-endian GGUF file (version %u); Strata reads "
                "little-endian files only — convert the model to little-endian",
                r->name, v, swapped);
        return st_fail("%s: header version: unsupported GGUF version %u (Strata reads versions 2 and 3); "
                       "re-convert the model or update Strata",
                       r->name, v);
    }
    if (rd_u64(r, "n_tensors", &f->n_tensors) || rd_u64(r, "n_kv", &f->n_kv)) return -1;
    uint64_t left = r->size - r->pos;
    if (f->n_kv > left / GGUF_MIN_KV_BYTES)
        return rd_fail(r, "n_kv", "%llu key/value pairs cannot fit in the %llu bytes left; " FIX_TRUNCATED,
                       (unsigned long long)f->n_kv, (unsigned long long)left);
    left -= f->n_kv * GGUF_MIN_KV_BYTES;
    if (f->n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return rd_fail(r, "n_tensors", "%llu tensors cannot fit in the %llu bytes left; " FIX_TRUNCATED,
                       (unsigned long long)f->n_tensors, (unsigned long long)left);
    return 0;
}

static int parse_kvs(struct rd *r, struct gguf_impl *g) {
    struct gguf_file *f = &g->pub;
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    g->kv_sorted = calloc(f->n_kv ? f->n_kv : 1, sizeof *g->kv_sorted);
    if (!f->kv || !g->kv_sorted)
        return rd_fail(r, "n_kv", "out of memory for %llu pairs", (unsigned long long)f->n_kv);
    r->ctx = RD_KV;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        r->entry = i;
        r->what.len = 0;
        r->depth = 0;
        if (rd_name(r, "key", &kv->key)) return -1;
        r->what = kv->key;
        uint32_t t;
        if (rd_u32(r, "value type", &t)) return -1;
        if (t >= GGUF_VTYPE_COUNT) return rd_fail(r, "value type", "is undefined (%u); " FIX_CORRUPT, t);
        if (rd_value(r, (enum gguf_vtype)t, &kv->value)) return -1;
        g->kv_sorted[i] = (struct name_ref){kv->key.data, kv->key.len, (size_t)i};
    }
    r->depth = 0;
    qsort(g->kv_sorted, f->n_kv, sizeof *g->kv_sorted, name_ref_cmp);
    for (uint64_t i = 1; i < f->n_kv; i++)
        if (name_ref_cmp(&g->kv_sorted[i - 1], &g->kv_sorted[i]) == 0) {
            r->what = f->kv[g->kv_sorted[i].index].key;
            return rd_fail(r, "", "appears twice (pairs #%zu and #%zu); " FIX_CORRUPT,
                           g->kv_sorted[i - 1].index, g->kv_sorted[i].index);
        }
    return 0;
}

static int parse_alignment(struct rd *r, struct gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return 0;
    if (kv->value.type != GGUF_VTYPE_UINT32)
        return st_fail("%s: key 'general.alignment': has type %s, must be uint32; " FIX_CORRUPT, r->name,
                       gguf_vtype_name(kv->value.type));
    uint64_t a = kv->value.v.u64;
    if (a < GGUF_MIN_ALIGNMENT || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
        return st_fail(
            "%s: key 'general.alignment': must be a power of two from %u to %u (%llu); " FIX_CORRUPT, r->name,
            GGUF_MIN_ALIGNMENT, GGUF_MAX_ALIGNMENT, (unsigned long long)a);
    f->alignment = a;
    return 0;
}

static int parse_tensor_info(struct rd *r, struct gguf_tensor *t, uint64_t alignment) {
    if (rd_name(r, "name", &t->name)) return -1;
    r->what = t->name;
    if (rd_u32(r, "n_dims", &t->n_dims)) return -1;
    if (t->n_dims < 1 || t->n_dims > 4)
        return rd_fail(r, "n_dims", "must be 1 to 4 (%u); " FIX_CORRUPT, t->n_dims);
    int64_t nelem = 1;
    for (uint32_t j = 0; j < 4; j++) {
        t->ne[j] = 1;
        if (j >= t->n_dims) continue;
        uint64_t d;
        if (rd_u64(r, "dimension", &d)) return -1;
        if (d == 0 || d > INT64_MAX)
            return rd_fail(r, "dimension", "ne[%u] must be at least 1 and below 2^63 (%lld); " FIX_CORRUPT, j,
                           (long long)d);
        t->ne[j] = (int64_t)d;
        if (__builtin_mul_overflow(nelem, t->ne[j], &nelem))
            return rd_fail(r, "dimension", "element count overflows (ne[%u] = %lld); " FIX_CORRUPT, j,
                           (long long)d);
    }
    uint32_t type;
    if (rd_u32(r, "type", &type)) return -1;
    const struct quant_traits *q = type < GGML_TYPE_COUNT ? quant_get((enum ggml_type)type) : NULL;
    if (!q)
        return rd_fail(r, "type",
                       "is not a defined tensor type (%u); the model uses a type removed from GGUF or "
                       "newer than Strata — re-convert the model or update Strata",
                       type);
    t->type = (enum ggml_type)type;
    if (t->ne[0] % q->block_size)
        return rd_fail(r, "ne[0]", "%lld is not a multiple of the %s block size %lld; " FIX_CORRUPT,
                       (long long)t->ne[0], q->name, (long long)q->block_size);
    uint64_t nbytes = (uint64_t)(t->ne[0] / q->block_size);
    if (__builtin_mul_overflow(nbytes, (uint64_t)q->type_size, &nbytes) ||
        __builtin_mul_overflow(nbytes, (uint64_t)(nelem / t->ne[0]), &nbytes))
        return rd_fail(r, "size", "byte size of %lld %s elements overflows; " FIX_CORRUPT, (long long)nelem,
                       q->name);
    t->nbytes = nbytes;
    if (rd_u64(r, "offset", &t->offset)) return -1;
    if (t->offset % alignment)
        return rd_fail(r, "offset", "%llu is not a multiple of the alignment %llu; " FIX_CORRUPT,
                       (unsigned long long)t->offset, (unsigned long long)alignment);
    return 0;
}

static int parse_tensors(struct rd *r, struct gguf_impl *g) {
    struct gguf_file *f = &g->pub;
    uint64_t n = f->n_tensors;
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    g->tensor_sorted = calloc(n ? n : 1, sizeof *g->tensor_sorted);
    if (!f->tensors || !g->tensor_sorted)
        return st_fail("%s: header n_tensors: out of memory for %llu tensors", r->name,
                       (unsigned long long)n);
    r->ctx = RD_TENSOR;
    r->depth = 0;
    for (uint64_t i = 0; i < n; i++) {
        r->entry = i;
        r->what.len = 0;
        if (parse_tensor_info(r, &f->tensors[i], f->alignment)) return -1;
        g->tensor_sorted[i] = (struct name_ref){f->tensors[i].name.data, f->tensors[i].name.len, (size_t)i};
    }
    qsort(g->tensor_sorted, n, sizeof *g->tensor_sorted, name_ref_cmp);
    for (uint64_t i = 1; i < n; i++)
        if (name_ref_cmp(&g->tensor_sorted[i - 1], &g->tensor_sorted[i]) == 0) {
            r->what = f->tensors[g->tensor_sorted[i].index].name;
            return rd_fail(r, "name", "appears twice (tensors #%zu and #%zu); " FIX_CORRUPT,
                           g->tensor_sorted[i - 1].index, g->tensor_sorted[i].index);
        }

    // The data section starts at the next multiple of the alignment. A file
    // without tensors may end before that padding; its data section is empty.
    uint64_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    if (pad > r->size - r->pos) {
        if (n > 0) {
            r->ctx = RD_HEADER;
            return rd_fail(r, "data section",
                           "starts at %llu, past the end of the file (size %llu); " FIX_TRUNCATED,
                           (unsigned long long)(r->pos + pad), (unsigned long long)r->size);
        }
        pad = r->size - r->pos;
    }
    f->data_offset = r->pos + pad;
    uint64_t data_size = r->size - f->data_offset;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            r->entry = i;
            r->what = t->name;
            if (t->offset > r->size) // the file offset may not even be representable
                return rd_fail(r, "data",
                               "[data section %llu + offset %llu, %llu bytes] runs past the end of the file "
                               "(size %llu); " FIX_TRUNCATED,
                               (unsigned long long)f->data_offset, (unsigned long long)t->offset,
                               (unsigned long long)t->nbytes, (unsigned long long)r->size);
            return rd_fail(
                r, "data",
                "[offset %llu, %llu bytes] runs past the end of the file (size %llu); " FIX_TRUNCATED,
                (unsigned long long)(f->data_offset + t->offset), (unsigned long long)t->nbytes,
                (unsigned long long)r->size);
        }
        t->data = r->p + f->data_offset + t->offset;
    }
    struct off_ref *by_off = calloc(n ? n : 1, sizeof *by_off);
    if (!by_off) return st_fail("%s: out of memory sorting %llu tensors", r->name, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) by_off[i] = (struct off_ref){f->tensors[i].offset, (size_t)i};
    qsort(by_off, n, sizeof *by_off, off_ref_cmp);
    int rc = 0;
    for (uint64_t i = 1; i < n && rc == 0; i++) {
        const struct gguf_tensor *a = &f->tensors[by_off[i - 1].index], *b = &f->tensors[by_off[i].index];
        if (a->offset + a->nbytes > b->offset) {
            char an[160] = "";
            append_escaped(an, sizeof an, a->name.data, a->name.len, 96);
            r->entry = by_off[i].index;
            r->what = b->name;
            rc = rd_fail(
                r, "data",
                "[offset %llu, %llu bytes] overlaps tensor '%s' [offset %llu, %llu bytes]; " FIX_CORRUPT,
                (unsigned long long)(f->data_offset + b->offset), (unsigned long long)b->nbytes, an,
                (unsigned long long)(f->data_offset + a->offset), (unsigned long long)a->nbytes);
        }
    }
    free(by_off);
    return rc;
}

static int gguf_parse(const uint8_t *p, uint64_t size, const char *name, size_t map_len,
                      struct gguf_file **out) {
    struct gguf_impl *g = st_xcalloc(1, sizeof *g);
    struct gguf_file *f = &g->pub;
    f->path = strdup(name);
    ST_ASSERT(f->path);
    f->map = p;
    f->size = size;
    g->map_len = map_len;
    struct rd r = {.p = p, .size = size, .name = name, .ctx = RD_HEADER};
    if (parse_header(&r, f) || parse_kvs(&r, g) || parse_alignment(&r, f) || parse_tensors(&r, g)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_open_memory(const void *data, uint64_t size, const char *name, struct gguf_file **out) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!data && size)
        return st_fail("%s: no data for an image of %llu bytes", name, (unsigned long long)size);
    return gguf_parse(data, size, name, 0, out);
}

int gguf_open(const char *path, struct gguf_file **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_fail("%s: cannot open: %s; check the path", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return st_fail("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail("%s: not a regular file; give the path of a .gguf model", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return st_fail("%s: the file is empty; download the model again", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return st_fail("%s: %lld bytes do not fit in this process's address space", path,
                       (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); // the mapping keeps the file alive
    if (map == MAP_FAILED) return st_fail("%s: cannot map %zu bytes: %s", path, len, strerror(e));
    return gguf_parse(map, (uint64_t)len, path, len, out);
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    struct gguf_impl *g = (struct gguf_impl *)f;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) value_free(&f->kv[i].value);
    free(f->kv);
    free(f->tensors);
    free(g->kv_sorted);
    free(g->tensor_sorted);
    if (g->map_len) munmap((void *)f->map, g->map_len);
    free(f->path);
    free(g);
}

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key) {
    const struct gguf_impl *g = (const struct gguf_impl *)f;
    const struct name_ref *r = name_lookup(g->kv_sorted, f->n_kv, key);
    return r ? &f->kv[r->index] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    const struct gguf_impl *g = (const struct gguf_impl *)f;
    const struct name_ref *r = name_lookup(g->tensor_sorted, f->n_tensors, name);
    return r ? &f->tensors[r->index] : NULL;
}

// --- typed getters ------------------------------------------------------------------

#define FIX_METADATA "the model's metadata is wrong — re-convert the model"

static int get_fail_type(const struct gguf_file *f, const char *key, const struct gguf_value *v,
                         const char *want) {
    char got[48];
    if (v->type == GGUF_VTYPE_ARRAY)
        snprintf(got, sizeof got, "array of %s", gguf_vtype_name(v->v.arr.type));
    else
        snprintf(got, sizeof got, "%s", gguf_vtype_name(v->type));
    return st_fail("%s: key '%s': has type %s, expected %s; " FIX_METADATA, f->path, key, got, want);
}

static int get_int(const struct gguf_file *f, const char *key, int64_t lo, uint64_t hi, const char *want,
                   const struct gguf_value **vout) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    const struct gguf_value *v = &kv->value;
    if (!vtype_is_int(v->type)) return get_fail_type(f, key, v, want);
    bool ok = vtype_is_signed(v->type) ? v->v.i64 >= lo && (v->v.i64 < 0 || (uint64_t)v->v.i64 <= hi)
                                       : v->v.u64 <= hi;
    if (!ok) {
        if (vtype_is_signed(v->type))
            return st_fail("%s: key '%s': %lld is out of range for %s; " FIX_METADATA, f->path, key,
                           (long long)v->v.i64, want);
        return st_fail("%s: key '%s': %llu is out of range for %s; " FIX_METADATA, f->path, key,
                       (unsigned long long)v->v.u64, want);
    }
    *vout = v;
    return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) {
    const struct gguf_value *v;
    int rc = get_int(f, key, 0, UINT32_MAX, "a uint32", &v);
    if (rc == 0) *out = (uint32_t)v->v.u64; // non-negative either way, so the bits agree
    return rc;
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out) {
    const struct gguf_value *v;
    int rc = get_int(f, key, INT64_MIN, INT64_MAX, "an int64", &v);
    if (rc == 0) *out = v->v.i64;
    return rc;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    const struct gguf_value *v = &kv->value;
    if (v->type != GGUF_VTYPE_FLOAT32 && v->type != GGUF_VTYPE_FLOAT64)
        return get_fail_type(f, key, v, "float32 or float64");
    double d = v->v.f64;
    if (isfinite(d) && fabs(d) > FLT_MAX) // NaN and infinities carry over as they are
        return st_fail("%s: key '%s': %g is out of range for a float32; " FIX_METADATA, f->path, key, d);
    *out = (float)d;
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->value.type != GGUF_VTYPE_BOOL) return get_fail_type(f, key, &kv->value, "bool");
    *out = kv->value.v.u64 != 0;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->value.type != GGUF_VTYPE_STRING) return get_fail_type(f, key, &kv->value, "string");
    *out = kv->value.v.str;
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype elem,
                 const struct gguf_array **out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    const struct gguf_value *v = &kv->value;
    if (v->type != GGUF_VTYPE_ARRAY || v->v.arr.type != elem) {
        char want[48];
        snprintf(want, sizeof want, "array of %s", gguf_vtype_name(elem));
        return get_fail_type(f, key, v, want);
    }
    *out = &v->v.arr;
    return 0;
}

int64_t gguf_array_int(const struct gguf_array *a, uint64_t i) {
    ST_ASSERT(i < a->count && (vtype_is_int(a->type) || a->type == GGUF_VTYPE_BOOL));
    size_t n = vtype_sizes[a->type];
    struct gguf_value v;
    decode_fixed(a->type, (const uint8_t *)a->data + i * n, &v);
    return v.v.i64; // uint64 above INT64_MAX wraps, as the two's-complement bits
}

double gguf_array_float(const struct gguf_array *a, uint64_t i) {
    ST_ASSERT(i < a->count && vtype_sizes[a->type] != 0 && a->type != GGUF_VTYPE_BOOL);
    size_t n = vtype_sizes[a->type];
    struct gguf_value v;
    decode_fixed(a->type, (const uint8_t *)a->data + i * n, &v);
    if (a->type == GGUF_VTYPE_FLOAT32 || a->type == GGUF_VTYPE_FLOAT64) return v.v.f64;
    return vtype_is_signed(a->type) ? (double)v.v.i64 : (double)v.v.u64;
}
