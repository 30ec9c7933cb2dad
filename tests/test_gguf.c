// test_gguf.c: the GGUF reader against files built by the GGUF writer (every
// value type, nested arrays, versions 2 and 3, several alignments), against
// crafted hostile files (each must fail with a message naming the field), a
// byte-flip fuzz loop, `strata info`, and the real model when present.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "test.h"
#include "util.h"

#define NAME "test.gguf"

// --- helpers -----------------------------------------------------------------------

static uint64_t rng_state;

static uint64_t rng_next(void) { // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static uint8_t *write_mem(struct gguf_writer *w, uint64_t *n) {
    uint8_t *p = NULL;
    int rc = gguf_writer_write_memory(w, &p, n);
    CHECK(rc == 0, "write_memory: %s", st_last_error());
    gguf_writer_free(w);
    return p;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// Offset just past the length-prefixed string s in buf (where the field after
// a key or tensor name starts); aborts the test program if s is absent.
static uint64_t after_str(const uint8_t *buf, uint64_t n, const char *s) {
    uint64_t len = strlen(s);
    for (uint64_t i = 0; i + 8 + len <= n; i++) {
        uint64_t l = 0;
        for (int k = 7; k >= 0; k--) l = (l << 8) | buf[i + k];
        if (l == len && memcmp(buf + i + 8, s, len) == 0) return i + 8 + len;
    }
    printf("    string '%s' not found in the image\n", s);
    abort();
}

// Opening buf must fail with a message that names the file and holds each needle.
static void expect_fail_(const uint8_t *buf, uint64_t n, const char *what, const char *needle1,
                         const char *needle2, int line) {
    struct gguf_file *f = (struct gguf_file *)1;
    int rc = gguf_open_memory(buf, n, NAME, &f);
    const char *e = st_last_error();
    CHECK(rc == -1 && f == NULL, "line %d (%s): opened a bad file", line, what);
    if (rc == 0) gguf_close(f);
    bool ok = strncmp(e, NAME ": ", strlen(NAME) + 2) == 0 && strstr(e, needle1) &&
              (!needle2 || strstr(e, needle2));
    CHECK(ok, "line %d (%s): message '%s' should name the file and hold '%s'%s%s", line, what, e, needle1,
          needle2 ? " and " : "", needle2 ? needle2 : "");
}
#define expect_fail(buf, n, what, n1, n2) expect_fail_(buf, n, what, n1, n2, __LINE__)

static struct gguf_file *open_ok(const uint8_t *buf, uint64_t n) {
    struct gguf_file *f = NULL;
    int rc = gguf_open_memory(buf, n, NAME, &f);
    CHECK(rc == 0, "open: %s", st_last_error());
    return rc == 0 ? f : NULL;
}

static float tensor_a[8] = {1, -2, 3.5f, 0, 1e-3f, -7, 8, 9};

// A small file with a bit of everything; the last tensor ends the file.
static uint8_t *small_file(uint64_t *n) {
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "answer", 42);
    gguf_writer_add_f32(w, "pi", 3.25f);
    gguf_writer_add_bool(w, "flag", true);
    int32_t ints[3] = {1, -2, 3};
    gguf_writer_add_arr(w, "ints", GGUF_VTYPE_INT32, ints, 3);
    const char *strs[3] = {"a", "bc", ""};
    gguf_writer_add_arr_str(w, "strs", strs, 3);
    int16_t in0[2] = {5, -6}, in1[1] = {7};
    uint8_t le0[4], le1[2];
    put_le(le0, (uint16_t)in0[0], 2), put_le(le0 + 2, (uint16_t)in0[1], 2), put_le(le1, (uint16_t)in1[0], 2);
    struct gguf_value inner[2] = {
        {.type = GGUF_VTYPE_ARRAY, .v.arr = {.type = GGUF_VTYPE_INT16, .count = 2, .data = le0}},
        {.type = GGUF_VTYPE_ARRAY, .v.arr = {.type = GGUF_VTYPE_INT16, .count = 1, .data = le1}},
    };
    struct gguf_value nested = {.type = GGUF_VTYPE_ARRAY,
                                .v.arr = {.type = GGUF_VTYPE_ARRAY, .count = 2, .items = inner}};
    gguf_writer_add_value(w, "nested", &nested);
    uint8_t q8[34];
    for (int i = 0; i < 34; i++) q8[i] = (uint8_t)(i * 7);
    uint16_t f16[3] = {0x3c00, 0xc000, 0x7bff};
    CHECK(gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, (int64_t[]){4, 2}, tensor_a) == 0, "%s",
          st_last_error());
    CHECK(gguf_writer_add_tensor(w, "b", GGML_TYPE_Q8_0, 1, (int64_t[]){32}, q8) == 0, "%s", st_last_error());
    CHECK(gguf_writer_add_tensor(w, "c", GGML_TYPE_F16, 1, (int64_t[]){3}, f16) == 0, "%s", st_last_error());
    return write_mem(w, n);
}

// --- valid files ----------------------------------------------------------------------

static void test_small_file(void) {
    uint64_t n;
    uint8_t *buf = small_file(&n);
    struct gguf_file *f = open_ok(buf, n);
    if (f) {
        CHECK(f->version == 3 && f->n_kv == 7 && f->n_tensors == 3 && f->alignment == 32, "header");
        CHECK(f->data_offset % 32 == 0 && f->size == n, "data offset %llu",
              (unsigned long long)f->data_offset);
        struct gguf_str s;
        uint32_t u;
        float x;
        bool b;
        CHECK(gguf_get_str(f, "general.architecture", &s) == 0 && s.len == 5 &&
                  memcmp(s.data, "llama", 5) == 0,
              "arch");
        CHECK(gguf_get_u32(f, "answer", &u) == 0 && u == 42, "answer");
        CHECK(gguf_get_f32(f, "pi", &x) == 0 && x == 3.25f, "pi");
        CHECK(gguf_get_bool(f, "flag", &b) == 0 && b, "flag");
        const struct gguf_array *a;
        CHECK(gguf_get_arr(f, "ints", GGUF_VTYPE_INT32, &a) == 0 && a->count == 3 &&
                  gguf_array_int(a, 1) == -2,
              "ints");
        CHECK(gguf_get_arr(f, "strs", GGUF_VTYPE_STRING, &a) == 0 && a->count == 3 &&
                  a->items[1].v.str.len == 2 && memcmp(a->items[1].v.str.data, "bc", 2) == 0 &&
                  a->items[2].v.str.len == 0,
              "strs");
        CHECK(gguf_get_arr(f, "nested", GGUF_VTYPE_ARRAY, &a) == 0 && a->count == 2, "nested");
        if (a && a->count == 2) {
            const struct gguf_array *a0 = &a->items[0].v.arr, *a1 = &a->items[1].v.arr;
            CHECK(a0->type == GGUF_VTYPE_INT16 && a0->count == 2 && gguf_array_int(a0, 1) == -6, "nested[0]");
            CHECK(a1->count == 1 && gguf_array_int(a1, 0) == 7 && gguf_array_float(a1, 0) == 7.0,
                  "nested[1]");
        }
        const struct gguf_tensor *t = gguf_find_tensor(f, "a");
        CHECK(t && t->type == GGML_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 &&
                  t->ne[2] == 1 && t->ne[3] == 1 && t->nbytes == 32 && memcmp(t->data, tensor_a, 32) == 0,
              "tensor a");
        t = gguf_find_tensor(f, "b");
        CHECK(t && t->type == GGML_TYPE_Q8_0 && t->nbytes == 34 && t->offset % 32 == 0 &&
                  ((const uint8_t *)t->data)[33] == (uint8_t)(33 * 7),
              "tensor b");
        t = gguf_find_tensor(f, "c");
        CHECK(t && t->nbytes == 6 && (const uint8_t *)t->data + 6 == buf + n, "tensor c ends the file");
        CHECK(!gguf_find_tensor(f, "d") && !gguf_find(f, "nope") && !gguf_find(f, ""), "absent names");
        gguf_close(f);
    }
    free(buf);
}

// Every scalar type at its extremes, strings with any bytes, random arrays of
// every fixed type, string arrays, empty arrays, nested arrays up to the limit.
static void test_every_type(void) {
    struct gguf_writer *w = gguf_writer_init();
    const struct {
        const char *key;
        struct gguf_value v;
    } sc[] = {
        {"u8", {.type = GGUF_VTYPE_UINT8, .v.u64 = 255}},
        {"i8", {.type = GGUF_VTYPE_INT8, .v.i64 = -128}},
        {"u16", {.type = GGUF_VTYPE_UINT16, .v.u64 = 65535}},
        {"i16", {.type = GGUF_VTYPE_INT16, .v.i64 = -32768}},
        {"u32", {.type = GGUF_VTYPE_UINT32, .v.u64 = UINT32_MAX}},
        {"i32", {.type = GGUF_VTYPE_INT32, .v.i64 = INT32_MIN}},
        {"f32", {.type = GGUF_VTYPE_FLOAT32, .v.f64 = -1.5e-30}},
        {"bool", {.type = GGUF_VTYPE_BOOL, .v.u64 = 1}},
        {"str", {.type = GGUF_VTYPE_STRING, .v.str = {7, "a\0b\nc\xff"}}},
        {"empty", {.type = GGUF_VTYPE_STRING, .v.str = {0, NULL}}},
        {"u64", {.type = GGUF_VTYPE_UINT64, .v.u64 = UINT64_MAX}},
        {"i64", {.type = GGUF_VTYPE_INT64, .v.i64 = INT64_MIN}},
        {"f64", {.type = GGUF_VTYPE_FLOAT64, .v.f64 = 1e300}},
    };
    int n_sc = (int)(sizeof sc / sizeof sc[0]);
    for (int i = 0; i < n_sc; i++)
        CHECK(gguf_writer_add_value(w, sc[i].key, &sc[i].v) == 0, "%s: %s", sc[i].key, st_last_error());

    // random arrays of each fixed type, as host values
    enum gguf_vtype fixed[] = {GGUF_VTYPE_UINT8,  GGUF_VTYPE_INT8,  GGUF_VTYPE_UINT16,  GGUF_VTYPE_INT16,
                               GGUF_VTYPE_UINT32, GGUF_VTYPE_INT32, GGUF_VTYPE_FLOAT32, GGUF_VTYPE_BOOL,
                               GGUF_VTYPE_UINT64, GGUF_VTYPE_INT64, GGUF_VTYPE_FLOAT64};
    int n_fixed = (int)(sizeof fixed / sizeof fixed[0]);
    static uint8_t host[11][64 * 8];
    uint64_t counts[11];
    char key[32];
    for (int k = 0; k < n_fixed; k++) {
        counts[k] = k == 0 ? 0 : rng_next() % 64; // one empty array
        size_t es = gguf_vtype_size(fixed[k]);
        for (uint64_t i = 0; i < counts[k] * es; i++) host[k][i] = (uint8_t)rng_next();
        if (fixed[k] == GGUF_VTYPE_BOOL)
            for (uint64_t i = 0; i < counts[k]; i++) host[k][i] &= 1;
        if (fixed[k] == GGUF_VTYPE_FLOAT32 || fixed[k] == GGUF_VTYPE_FLOAT64) // finite values, so == works
            for (uint64_t i = 0; i < counts[k]; i++) {
                if (es == 4)
                    memcpy(host[k] + 4 * i, &(float){(float)(int32_t)rng_next() / 1024.0f}, 4);
                else
                    memcpy(host[k] + 8 * i, &(double){(double)(int64_t)rng_next() / 3.0}, 8);
            }
        snprintf(key, sizeof key, "arr.%s", gguf_vtype_name(fixed[k]));
        CHECK(gguf_writer_add_arr(w, key, fixed[k], host[k], counts[k]) == 0, "%s: %s", key, st_last_error());
    }
    const char *strs[4] = {"", "x", "hello world", "\xe4\xb8\xad"};
    CHECK(gguf_writer_add_arr_str(w, "arr.str", strs, 4) == 0, "%s", st_last_error());
    CHECK(gguf_writer_add_arr_str(w, "arr.str_empty", strs, 0) == 0, "%s", st_last_error());
    // arrays of strings inside arrays
    struct gguf_value sv[2] = {{.type = GGUF_VTYPE_STRING, .v.str = {3, "abc"}},
                               {.type = GGUF_VTYPE_STRING, .v.str = {1, "d"}}};
    struct gguf_value inner = {.type = GGUF_VTYPE_ARRAY,
                               .v.arr = {.type = GGUF_VTYPE_STRING, .count = 2, .items = sv}};
    struct gguf_value outer = {.type = GGUF_VTYPE_ARRAY,
                               .v.arr = {.type = GGUF_VTYPE_ARRAY, .count = 1, .items = &inner}};
    CHECK(gguf_writer_add_value(w, "arr.nested_str", &outer) == 0, "%s", st_last_error());
    // 8 levels of arrays, the reader's limit
    uint8_t leaf[4] = {9, 0, 0, 0};
    struct gguf_value lv[8];
    lv[0] = (struct gguf_value){.type = GGUF_VTYPE_ARRAY,
                                .v.arr = {.type = GGUF_VTYPE_UINT32, .count = 1, .data = leaf}};
    for (int d = 1; d < 8; d++)
        lv[d] = (struct gguf_value){.type = GGUF_VTYPE_ARRAY,
                                    .v.arr = {.type = GGUF_VTYPE_ARRAY, .count = 1, .items = &lv[d - 1]}};
    CHECK(gguf_writer_add_value(w, "arr.deep", &lv[7]) == 0, "%s", st_last_error());

    uint64_t n;
    uint8_t *buf = write_mem(w, &n);
    struct gguf_file *f = open_ok(buf, n);
    if (f) {
        CHECK(f->n_kv == (uint64_t)n_sc + (uint64_t)n_fixed + 4 && f->n_tensors == 0, "counts %llu",
              (unsigned long long)f->n_kv);
        for (int i = 0; i < n_sc; i++) {
            const struct gguf_kv *kv = gguf_find(f, sc[i].key);
            CHECK(kv && kv->value.type == sc[i].v.type, "%s: type", sc[i].key);
            if (!kv) continue;
            if (sc[i].v.type == GGUF_VTYPE_STRING)
                CHECK(kv->value.v.str.len == sc[i].v.v.str.len &&
                          (!kv->value.v.str.len ||
                           memcmp(kv->value.v.str.data, sc[i].v.v.str.data, kv->value.v.str.len) == 0),
                      "%s: value", sc[i].key);
            else if (sc[i].v.type == GGUF_VTYPE_FLOAT32)
                CHECK(kv->value.v.f64 == (double)(float)sc[i].v.v.f64, "%s: value", sc[i].key);
            else
                CHECK(kv->value.v.u64 == sc[i].v.v.u64, "%s: value %llx", sc[i].key,
                      (unsigned long long)kv->value.v.u64);
        }
        for (int k = 0; k < n_fixed; k++) {
            const struct gguf_array *a = NULL;
            snprintf(key, sizeof key, "arr.%s", gguf_vtype_name(fixed[k]));
            CHECK(gguf_get_arr(f, key, fixed[k], &a) == 0 && a->count == counts[k] && !a->items, "%s", key);
            if (!a) continue;
            bool same = true;
            for (uint64_t i = 0; i < a->count; i++) {
                const uint8_t *h = host[k] + i * gguf_vtype_size(fixed[k]);
                switch (fixed[k]) {
                case GGUF_VTYPE_UINT8:
                    same &= gguf_array_int(a, i) == *h;
                    break;
                case GGUF_VTYPE_INT8:
                    same &= gguf_array_int(a, i) == *(const int8_t *)h;
                    break;
                case GGUF_VTYPE_BOOL:
                    same &= gguf_array_int(a, i) == *h;
                    break;
                case GGUF_VTYPE_UINT16: {
                    uint16_t v;
                    memcpy(&v, h, 2);
                    same &= gguf_array_int(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_INT16: {
                    int16_t v;
                    memcpy(&v, h, 2);
                    same &= gguf_array_int(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_UINT32: {
                    uint32_t v;
                    memcpy(&v, h, 4);
                    same &= gguf_array_int(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_INT32: {
                    int32_t v;
                    memcpy(&v, h, 4);
                    same &= gguf_array_int(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_UINT64: {
                    uint64_t v;
                    memcpy(&v, h, 8);
                    same &= (uint64_t)gguf_array_int(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_INT64: {
                    int64_t v;
                    memcpy(&v, h, 8);
                    same &= gguf_array_int(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_FLOAT32: {
                    float v;
                    memcpy(&v, h, 4);
                    same &= gguf_array_float(a, i) == v;
                    break;
                }
                case GGUF_VTYPE_FLOAT64: {
                    double v;
                    memcpy(&v, h, 8);
                    same &= gguf_array_float(a, i) == v;
                    break;
                }
                default:
                    same = false;
                }
            }
            CHECK(same, "%s: elements differ", key);
        }
        const struct gguf_array *a;
        CHECK(gguf_get_arr(f, "arr.str", GGUF_VTYPE_STRING, &a) == 0 && a->count == 4 &&
                  a->items[3].v.str.len == 3 && memcmp(a->items[2].v.str.data, "hello world", 11) == 0,
              "arr.str");
        CHECK(gguf_get_arr(f, "arr.str_empty", GGUF_VTYPE_STRING, &a) == 0 && a->count == 0, "arr.str_empty");
        CHECK(gguf_get_arr(f, "arr.nested_str", GGUF_VTYPE_ARRAY, &a) == 0 && a->count == 1 &&
                  a->items[0].v.arr.type == GGUF_VTYPE_STRING && a->items[0].v.arr.count == 2 &&
                  memcmp(a->items[0].v.arr.items[0].v.str.data, "abc", 3) == 0,
              "arr.nested_str");
        CHECK(gguf_get_arr(f, "arr.deep", GGUF_VTYPE_ARRAY, &a) == 0, "arr.deep");
        for (int d = 0; a && d < 7; d++)
            a = a->count == 1 && a->type == GGUF_VTYPE_ARRAY ? &a->items[0].v.arr : NULL;
        CHECK(a && a->type == GGUF_VTYPE_UINT32 && a->count == 1 && gguf_array_int(a, 0) == 9,
              "arr.deep leaf");
        gguf_close(f);
    }
    free(buf);
}

static void test_getters(void) {
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_add_value(w, "u8", &(struct gguf_value){.type = GGUF_VTYPE_UINT8, .v.u64 = 200});
    gguf_writer_add_i32(w, "neg", -1);
    gguf_writer_add_i32(w, "pos", 7);
    gguf_writer_add_u64(w, "big", 1ull << 40);
    gguf_writer_add_u64(w, "huge", UINT64_MAX);
    gguf_writer_add_i64(w, "min", INT64_MIN);
    gguf_writer_add_f64(w, "f64", 0.25);
    gguf_writer_add_f64(w, "f64big", 1e300);
    gguf_writer_add_bool(w, "b", false);
    gguf_writer_add_str(w, "s", "text");
    gguf_writer_add_arr(w, "arr", GGUF_VTYPE_FLOAT32, (float[]){1, 2}, 2);
    uint64_t n;
    uint8_t *buf = write_mem(w, &n);
    struct gguf_file *f = open_ok(buf, n);
    if (f) {
        uint32_t u = 123;
        int64_t i = 0;
        float x = 0;
        bool b = true;
        struct gguf_str s;
        const struct gguf_array *a;
        CHECK(gguf_get_u32(f, "absent", &u) == 1 && u == 123, "absent leaves out untouched");
        CHECK(gguf_get_u32(f, "u8", &u) == 0 && u == 200, "u32 from uint8");
        CHECK(gguf_get_u32(f, "pos", &u) == 0 && u == 7, "u32 from int32");
        CHECK(gguf_get_u32(f, "neg", &u) == -1 && strstr(st_last_error(), "'neg'") &&
                  strstr(st_last_error(), "-1"),
              "u32 from -1: %s", st_last_error());
        CHECK(gguf_get_u32(f, "big", &u) == -1 && strstr(st_last_error(), "'big'"), "u32 from 2^40");
        CHECK(gguf_get_u32(f, "s", &u) == -1 && strstr(st_last_error(), "string"), "u32 from string");
        CHECK(gguf_get_u32(f, "b", &u) == -1, "u32 from bool");
        CHECK(gguf_get_i64(f, "neg", &i) == 0 && i == -1, "i64 from int32");
        CHECK(gguf_get_i64(f, "min", &i) == 0 && i == INT64_MIN, "i64 min");
        CHECK(gguf_get_i64(f, "big", &i) == 0 && i == (1ll << 40), "i64 from uint64");
        CHECK(gguf_get_i64(f, "huge", &i) == -1 && strstr(st_last_error(), "'huge'"), "i64 from UINT64_MAX");
        CHECK(gguf_get_f32(f, "f64", &x) == 0 && x == 0.25f, "f32 from float64");
        CHECK(gguf_get_f32(f, "f64big", &x) == -1 && strstr(st_last_error(), "range"), "f32 from 1e300");
        CHECK(gguf_get_f32(f, "pos", &x) == -1 && strstr(st_last_error(), "int32"), "f32 from int32");
        CHECK(gguf_get_bool(f, "b", &b) == 0 && !b, "bool");
        CHECK(gguf_get_bool(f, "u8", &b) == -1, "bool from uint8");
        CHECK(gguf_get_str(f, "s", &s) == 0 && s.len == 4, "str");
        CHECK(gguf_get_str(f, "arr", &s) == -1 && strstr(st_last_error(), "array of float32"),
              "str from array");
        CHECK(gguf_get_arr(f, "arr", GGUF_VTYPE_FLOAT32, &a) == 0 && gguf_array_float(a, 1) == 2.0, "arr");
        CHECK(gguf_get_arr(f, "arr", GGUF_VTYPE_INT32, &a) == -1 && strstr(st_last_error(), "array of int32"),
              "arr of the wrong element type: %s", st_last_error());
        CHECK(gguf_get_arr(f, "s", GGUF_VTYPE_STRING, &a) == -1, "arr from string");
        CHECK(strcmp(gguf_vtype_name(GGUF_VTYPE_FLOAT64), "float64") == 0 &&
                  strcmp(gguf_vtype_name(99), "unknown") == 0,
              "vtype names");
        CHECK(gguf_vtype_size(GGUF_VTYPE_UINT16) == 2 && gguf_vtype_size(GGUF_VTYPE_STRING) == 0 &&
                  gguf_vtype_size(GGUF_VTYPE_COUNT) == 0,
              "vtype sizes");
        gguf_close(f);
    }
    free(buf);
}

// Versions 2 and 3, with and without general.alignment, tensors of odd sizes.
static void test_versions_alignments(void) {
    const uint32_t aligns[] = {0, 8, 16, 32, 64, 4096, 1u << 20};
    for (uint32_t version = 2; version <= 3; version++)
        for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
            struct gguf_writer *w = gguf_writer_init();
            CHECK(gguf_writer_set_version(w, version) == 0, "version");
            gguf_writer_add_str(w, "name", "x");
            if (aligns[ai]) CHECK(gguf_writer_set_alignment(w, aligns[ai]) == 0, "%s", st_last_error());
            uint8_t data[3][200];
            int64_t ne[3] = {3, 5, 1};
            for (int t = 0; t < 3; t++) {
                for (int i = 0; i < 200; i++) data[t][i] = (uint8_t)rng_next();
                char name[8] = {'t', (char)('0' + t), 0};
                CHECK(gguf_writer_add_tensor(w, name, GGML_TYPE_I8, 1, &ne[t], data[t]) == 0, "%s",
                      st_last_error());
            }
            uint64_t n;
            uint8_t *buf = write_mem(w, &n);
            struct gguf_file *f = open_ok(buf, n);
            if (!f) {
                free(buf);
                continue;
            }
            uint64_t al = aligns[ai] ? aligns[ai] : 32;
            CHECK(f->version == version && f->alignment == al && f->data_offset % al == 0, "v%u align %llu",
                  version, (unsigned long long)al);
            for (int t = 0; t < 3; t++) {
                char name[8] = {'t', (char)('0' + t), 0};
                const struct gguf_tensor *tt = gguf_find_tensor(f, name);
                CHECK(tt && tt->offset % al == 0 && tt->nbytes == (uint64_t)ne[t] &&
                          memcmp(tt->data, data[t], (size_t)ne[t]) == 0,
                      "v%u align %llu tensor %d", version, (unsigned long long)al, t);
            }
            gguf_close(f);
            free(buf);
        }
}

// The writer refuses what the reader would refuse.
static void test_writer_refuses(void) {
    struct gguf_writer *w = gguf_writer_init();
    CHECK(gguf_writer_add_u32(w, "k", 1) == 0, "first");
    CHECK(gguf_writer_add_u32(w, "k", 2) == -1 && strstr(st_last_error(), "twice"), "duplicate key");
    CHECK(gguf_writer_add_u32(w, "", 2) == -1, "empty key");
    CHECK(gguf_writer_add_value(w, "bad", &(struct gguf_value){.type = GGUF_VTYPE_COUNT}) == -1,
          "undefined type");
    CHECK(gguf_writer_add_value(w, "b2", &(struct gguf_value){.type = GGUF_VTYPE_BOOL, .v.u64 = 2}) == -1,
          "bool 2");
    struct gguf_value item = {.type = GGUF_VTYPE_UINT8};
    struct gguf_value mixed = {.type = GGUF_VTYPE_ARRAY,
                               .v.arr = {.type = GGUF_VTYPE_STRING, .count = 1, .items = &item}};
    CHECK(gguf_writer_add_value(w, "mixed", &mixed) == -1 && strstr(st_last_error(), "element 0"),
          "mixed array");
    CHECK(gguf_writer_add_arr(w, "s", GGUF_VTYPE_STRING, NULL, 0) == -1, "add_arr of strings");
    CHECK(gguf_writer_set_version(w, 1) == -1 && gguf_writer_set_version(w, 4) == -1, "version");
    CHECK(gguf_writer_set_alignment(w, 3) == -1 && gguf_writer_set_alignment(w, 0) == -1 &&
              gguf_writer_set_alignment(w, 1) == -1 && gguf_writer_set_alignment(w, 4) == -1 &&
              gguf_writer_set_alignment(w, 1u << 21) == -1,
          "alignment");
    int64_t ne[2] = {64, 2};
    CHECK(gguf_writer_add_tensor(w, "t", GGML_TYPE_Q4_0, 2, ne, NULL) == 0, "%s", st_last_error());
    CHECK(gguf_writer_add_tensor(w, "t", GGML_TYPE_Q4_0, 2, ne, NULL) == -1, "duplicate tensor");
    CHECK(gguf_writer_add_tensor(w, "u", GGML_TYPE_Q4_0, 0, ne, NULL) == -1, "n_dims 0");
    CHECK(gguf_writer_add_tensor(w, "u", GGML_TYPE_Q4_0, 5, ne, NULL) == -1, "n_dims 5");
    CHECK(gguf_writer_add_tensor(w, "u", (enum ggml_type)4, 2, ne, NULL) == -1, "removed type");
    CHECK(gguf_writer_add_tensor(w, "u", GGML_TYPE_Q4_0, 1, (int64_t[]){48}, NULL) == -1 &&
              strstr(st_last_error(), "block size"),
          "ne[0] 48 for Q4_0");
    CHECK(gguf_writer_add_tensor(w, "u", GGML_TYPE_F32, 2, (int64_t[]){4, 0}, NULL) == -1, "ne 0");
    // nothing refused was added: the file holds one key and one tensor
    uint64_t n;
    uint8_t *buf = write_mem(w, &n);
    struct gguf_file *f = open_ok(buf, n);
    if (f) {
        CHECK(f->n_kv == 1 && f->n_tensors == 1 && f->tensors[0].nbytes == 2 * 2 * 18, "contents");
        gguf_close(f);
    }
    free(buf);
}

// --- hostile files ----------------------------------------------------------------------

static void test_truncated_everywhere(void) {
    uint64_t n;
    uint8_t *buf = small_file(&n);
    int bad = 0;
    for (uint64_t len = 0; len < n; len++) {
        uint8_t *cut = malloc(len ? len : 1); // its own allocation, so ASan sees any over-read
        memcpy(cut, buf, len);
        struct gguf_file *f = NULL;
        int rc = gguf_open_memory(cut, len, NAME, &f);
        if (rc == 0) gguf_close(f);
        if (rc != -1 || strncmp(st_last_error(), NAME ": ", strlen(NAME) + 2) != 0) {
            if (bad++ < 5)
                printf("    prefix of %llu bytes: rc %d, '%s'\n", (unsigned long long)len, rc,
                       st_last_error());
        }
        free(cut);
    }
    CHECK(bad == 0, "%d of %llu prefixes not refused cleanly", bad, (unsigned long long)n);
    // and a few messages in full
    expect_fail(buf, 0, "empty", "magic", "empty");
    expect_fail(buf, 20, "in n_kv", "n_kv", "truncated");
    expect_fail(buf, n - 1, "last byte", "tensor 'c' data", "runs past the end of the file");
    free(buf);
}

static void test_bad_header(void) {
    uint64_t n;
    uint8_t *buf = small_file(&n);
    uint8_t *b = malloc(n);
    memcpy(b, buf, n), memcpy(b, "GGUX", 4);
    expect_fail(b, n, "magic", "magic", "not a GGUF file");
    memcpy(b, buf, n), put_le(b + 4, 1, 4);
    expect_fail(b, n, "v1", "unsupported GGUF version 1; re-convert the model", NULL);
    memcpy(b, buf, n), put_le(b + 4, 4, 4);
    expect_fail(b, n, "v4", "version", "unsupported GGUF version 4");
    memcpy(b, buf, n), put_le(b + 4, 0, 4);
    expect_fail(b, n, "v0", "version", "unsupported GGUF version 0");
    memcpy(b, buf, n), put_le(b + 4, 0x03000000u, 4);
    expect_fail(b, n, "big-endian", "version", "big-endian");
    memcpy(b, buf, n), put_le(b + 8, 1ull << 60, 8);
    expect_fail(b, n, "n_tensors 2^60", "n_tensors", "1152921504606846976");
    memcpy(b, buf, n), put_le(b + 16, 1ull << 60, 8);
    expect_fail(b, n, "n_kv 2^60", "n_kv", "1152921504606846976");
    memcpy(b, buf, n), put_le(b + 16, UINT64_MAX, 8);
    expect_fail(b, n, "n_kv 2^64-1", "n_kv", "cannot fit");
    free(b);
    free(buf);
}

static void test_bad_kv(void) {
    uint64_t n;
    uint8_t *buf = small_file(&n);
    uint8_t *b = malloc(n);
    uint64_t at;
    // key length (the first key's length sits right after the header)
    memcpy(b, buf, n), put_le(b + 24, 1ull << 60, 8);
    expect_fail(b, n, "key length 2^60", "kv #0 key", "string length");
    memcpy(b, buf, n), put_le(b + 24, 0, 8);
    expect_fail(b, n, "empty key", "kv #0 key", "empty");
    at = after_str(buf, n, "answer");
    memcpy(b, buf, n), b[at - 2] = 0;
    expect_fail(b, n, "NUL in key", "kv #1 key", "NUL");
    // value string length
    at = after_str(buf, n, "general.architecture");
    memcpy(b, buf, n), put_le(b + at + 4, 1ull << 62, 8);
    expect_fail(b, n, "string length 2^62", "key 'general.architecture' value",
                "string length 4611686018427387904");
    memcpy(b, buf, n), put_le(b + at, 13, 4);
    expect_fail(b, n, "value type 13", "key 'general.architecture' value type", "(13)");
    // array counts and element types
    at = after_str(buf, n, "ints");
    memcpy(b, buf, n), put_le(b + at + 8, 1ull << 60, 8);
    expect_fail(b, n, "int array count 2^60", "key 'ints' array count", "1152921504606846976");
    memcpy(b, buf, n), put_le(b + at + 4, 99, 4);
    expect_fail(b, n, "array element type 99", "key 'ints' array element type", "(99)");
    at = after_str(buf, n, "strs");
    memcpy(b, buf, n), put_le(b + at + 8, 1ull << 60, 8);
    expect_fail(b, n, "string array count 2^60", "key 'strs' array count", "1152921504606846976");
    memcpy(b, buf, n), put_le(b + after_str(buf, n, "bc") - 10, 1ull << 40, 8);
    expect_fail(b, n, "string in array length 2^40", "key 'strs'[1] value", "string length");
    at = after_str(buf, n, "nested");
    memcpy(b, buf, n), put_le(b + at + 8, 1ull << 60, 8);
    expect_fail(b, n, "nested array count 2^60", "key 'nested' array count", "1152921504606846976");
    memcpy(b, buf, n), put_le(b + at + 20, 1ull << 60, 8); // the first inner array's count
    expect_fail(b, n, "inner array count 2^60", "key 'nested'[0] array count", "1152921504606846976");
    // a bool other than 0/1
    at = after_str(buf, n, "flag");
    memcpy(b, buf, n), b[at + 4] = 2;
    expect_fail(b, n, "bool 2", "key 'flag'", "not 0 or 1");
    // a duplicate key: "strs" respelled "ints"
    at = after_str(buf, n, "strs");
    memcpy(b, buf, n), memcpy(b + at - 4, "ints", 4);
    expect_fail(b, n, "duplicate key", "key 'ints'", "appears twice");
    free(b);
    free(buf);

    // nesting one level past the limit
    struct gguf_writer *w = gguf_writer_init();
    uint8_t leaf[1] = {1};
    struct gguf_value lv[9];
    lv[0] = (struct gguf_value){.type = GGUF_VTYPE_ARRAY,
                                .v.arr = {.type = GGUF_VTYPE_UINT8, .count = 1, .data = leaf}};
    for (int d = 1; d < 9; d++)
        lv[d] = (struct gguf_value){.type = GGUF_VTYPE_ARRAY,
                                    .v.arr = {.type = GGUF_VTYPE_ARRAY, .count = 1, .items = &lv[d - 1]}};
    gguf_writer_add_value(w, "deep", &lv[8]);
    buf = write_mem(w, &n);
    expect_fail(buf, n, "nesting 9", "key 'deep'[0][0][0][0][0][0][0][0]", "nested more than 8");
    free(buf);
}

static uint8_t *alignment_file(const struct gguf_value *v, uint64_t *n) {
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_add_value(w, "general.alignment", v);
    gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 1, (int64_t[]){4}, NULL);
    return write_mem(w, n);
}

static void test_bad_alignment(void) {
    const struct {
        struct gguf_value v;
        const char *needle;
    } cases[] = {
        {{.type = GGUF_VTYPE_UINT32, .v.u64 = 0}, "(0)"},
        {{.type = GGUF_VTYPE_UINT32, .v.u64 = 1}, "(1)"},
        {{.type = GGUF_VTYPE_UINT32, .v.u64 = 3}, "(3)"},
        {{.type = GGUF_VTYPE_UINT32, .v.u64 = 4}, "(4)"},
        {{.type = GGUF_VTYPE_UINT32, .v.u64 = 1u << 21}, "(2097152)"},
        {{.type = GGUF_VTYPE_UINT32, .v.u64 = 1u << 31}, "(2147483648)"},
        {{.type = GGUF_VTYPE_UINT64, .v.u64 = 1ull << 40}, "type uint64"},
        {{.type = GGUF_VTYPE_INT32, .v.i64 = 32}, "type int32"},
        {{.type = GGUF_VTYPE_STRING, .v.str = {2, "32"}}, "type string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t n;
        uint8_t *buf = alignment_file(&cases[i].v, &n);
        expect_fail(buf, n, cases[i].needle, "general.alignment", cases[i].needle);
        free(buf);
    }
}

static void test_bad_tensors(void) {
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_add_str(w, "k", "v");
    gguf_writer_add_tensor(w, "w.q4", GGML_TYPE_Q4_0, 2, (int64_t[]){64, 2}, NULL); // 72 bytes at 0
    gguf_writer_add_tensor(w, "w.f32", GGML_TYPE_F32, 2, (int64_t[]){8, 4}, NULL);  // 128 bytes at 96
    uint64_t n;
    uint8_t *buf = write_mem(w, &n);
    uint8_t *b = malloc(n);
    uint64_t q4 = after_str(buf, n, "w.q4"), f32 = after_str(buf, n, "w.f32");
    // layout after a name: n_dims u32, ne u64 x n_dims, type u32, offset u64
    uint64_t q4_type = q4 + 4 + 16, q4_off = q4_type + 4, f32_off = f32 + 4 + 16 + 4;
    struct gguf_file *f = open_ok(buf, n);
    if (f) {
        CHECK(f->tensors[1].offset == 96, "layout assumed by this test: %llu",
              (unsigned long long)f->tensors[1].offset);
        gguf_close(f);
    }
    const uint32_t bad_types[] = {4, 5, 31, 36, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        char needle[24];
        snprintf(needle, sizeof needle, "(%u)", bad_types[i]);
        memcpy(b, buf, n), put_le(b + q4_type, bad_types[i], 4);
        expect_fail(b, n, "tensor type", "tensor 'w.q4' type", needle);
    }
    memcpy(b, buf, n), put_le(b + q4, 0, 4);
    expect_fail(b, n, "n_dims 0", "tensor 'w.q4' n_dims", "(0)");
    memcpy(b, buf, n), put_le(b + q4, 5, 4);
    expect_fail(b, n, "n_dims 5", "tensor 'w.q4' n_dims", "(5)");
    memcpy(b, buf, n), put_le(b + q4 + 12, (uint64_t)-1, 8);
    expect_fail(b, n, "ne[1] -1", "tensor 'w.q4' dimension", "ne[1]");
    memcpy(b, buf, n), put_le(b + q4 + 12, 0, 8);
    expect_fail(b, n, "ne[1] 0", "tensor 'w.q4' dimension", "ne[1]");
    memcpy(b, buf, n), put_le(b + q4 + 4, 1ull << 32, 8), put_le(b + q4 + 12, 1ull << 32, 8);
    expect_fail(b, n, "element count 2^64", "tensor 'w.q4' dimension", "overflows");
    memcpy(b, buf, n), put_le(b + f32 + 4, 1ull << 60, 8);
    expect_fail(b, n, "byte size 2^64", "tensor 'w.f32' size", "overflows");
    memcpy(b, buf, n), put_le(b + f32 + 4, 1ull << 40, 8);
    expect_fail(b, n, "data past the end", "tensor 'w.f32' data", "runs past the end of the file");
    memcpy(b, buf, n), put_le(b + q4 + 4, 48, 8);
    expect_fail(b, n, "ne[0] 48 for Q4_0", "tensor 'w.q4' ne[0]", "block size 32");
    memcpy(b, buf, n), put_le(b + f32_off, 1ull << 62, 8);
    expect_fail(b, n, "offset 2^62", "tensor 'w.f32' data", "runs past the end of the file");
    memcpy(b, buf, n), put_le(b + f32_off, UINT64_MAX - 31, 8);
    expect_fail(b, n, "offset 2^64-32", "tensor 'w.f32' data", "runs past the end of the file");
    memcpy(b, buf, n), put_le(b + f32_off, 100, 8);
    expect_fail(b, n, "misaligned offset", "tensor 'w.f32' offset",
                "100 is not a multiple of the alignment 32");
    memcpy(b, buf, n), put_le(b + f32_off, 64, 8);
    expect_fail(b, n, "overlap", "tensor 'w.f32' data", "overlaps tensor 'w.q4'");
    memcpy(b, buf, n), put_le(b + q4_off, 96, 8);
    expect_fail(b, n, "same offset", "data", "overlaps");
    memcpy(b, buf, n), b[f32 - 2] = 0;
    expect_fail(b, n, "NUL in name", "tensor #1 name", "NUL");
    memcpy(b, buf, n), put_le(b + f32 - 5 - 8, 0, 8);
    expect_fail(b, n, "empty name", "tensor #1 name", "empty");
    free(b);
    free(buf);

    // a real duplicate: two equal-length names, one patched to the other
    w = gguf_writer_init();
    gguf_writer_add_tensor(w, "x.a", GGML_TYPE_F32, 1, (int64_t[]){4}, NULL);
    gguf_writer_add_tensor(w, "x.b", GGML_TYPE_F32, 1, (int64_t[]){4}, NULL);
    buf = write_mem(w, &n);
    buf[after_str(buf, n, "x.b") - 1] = 'a';
    expect_fail(buf, n, "duplicate tensor", "tensor 'x.a' name", "appears twice");
    free(buf);
}

// --- the limits of gguf.h, each just at and just past ---------------------------------

// A GGUF image written byte by byte, so that it can break rules the writer
// keeps. Anonymous memory: a string or array of 2^30 bytes costs only the
// pages written, the header.
struct raw {
    uint8_t *p;
    uint64_t n, cap;
};

static struct raw raw_begin(uint64_t cap, uint64_t n_tensors, uint64_t n_kv) {
    struct raw r = {
        mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), 24, cap};
    ST_ASSERT(r.p != MAP_FAILED);
    memcpy(r.p, "GGUF", 4);
    put_le(r.p + 4, 3, 4), put_le(r.p + 8, n_tensors, 8), put_le(r.p + 16, n_kv, 8);
    return r;
}

static void raw_le(struct raw *r, uint64_t v, int n) {
    ST_ASSERT(r->n + (uint64_t)n <= r->cap);
    put_le(r->p + r->n, v, n);
    r->n += (uint64_t)n;
}

// A string of len bytes: s, or 'a's when s is NULL.
static void raw_str(struct raw *r, const char *s, uint64_t len) {
    raw_le(r, len, 8);
    ST_ASSERT(r->n + len <= r->cap);
    if (s)
        memcpy(r->p + r->n, s, len);
    else
        memset(r->p + r->n, 'a', len);
    r->n += len;
}

// One F32 tensor of n_dims dimensions 8x1x1..., named by `len` bytes, at offset 0.
static struct raw raw_tensor_file(const char *name, uint64_t len, uint32_t n_dims) {
    struct raw r = raw_begin(1 << 16, 1, 0);
    raw_str(&r, name, len);
    raw_le(&r, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++) raw_le(&r, d ? 1 : 8, 8);
    raw_le(&r, GGML_TYPE_F32, 4), raw_le(&r, 0, 8);
    r.n = (r.n + 31) / 32 * 32 + 32; // the data section: padding, then 8 floats (zero)
    return r;
}

// One key of `len` bytes (key, or 'a's when NULL) holding a uint8.
static struct raw raw_key_file(const char *key, uint64_t len) {
    struct raw r = raw_begin(1 << 17, 0, 1);
    raw_str(&r, key, len);
    raw_le(&r, GGUF_VTYPE_UINT8, 4), raw_le(&r, 7, 1);
    return r;
}

// The image must open; returns whether it did (closing it).
static bool raw_opens(struct raw *r, const char *what) {
    struct gguf_file *f = NULL;
    int rc = gguf_open_memory(r->p, r->n, NAME, &f);
    CHECK(rc == 0, "%s: %s", what, st_last_error());
    if (f) gguf_close(f);
    munmap(r->p, r->cap);
    return rc == 0;
}

#define raw_fails(r, what, n1, n2) (expect_fail((r).p, (r).n, what, n1, n2), munmap((r).p, (r).cap))

static void test_limits(void) {
    struct raw r;
    // tensor names: at most 63 bytes (ggml keeps names in char[GGML_MAX_NAME = 64] with the NUL)
    r = raw_tensor_file(NULL, GGUF_MAX_NAME_LEN, 1);
    raw_opens(&r, "tensor name of 63 bytes");
    r = raw_tensor_file(NULL, GGUF_MAX_NAME_LEN + 1, 1);
    raw_fails(r, "tensor name of 64 bytes", "tensor #0 name", "64 bytes long, over the limit of 63");
    // dimensions: at most 4
    r = raw_tensor_file("t", 1, 4);
    raw_opens(&r, "4 dimensions");
    r = raw_tensor_file("t", 1, 5);
    raw_fails(r, "5 dimensions", "tensor 't' n_dims", "(5)");
    // keys: at most 65535 bytes, dot-separated lower_snake_case ASCII words
    r = raw_key_file(NULL, GGUF_MAX_KEY_LEN);
    raw_opens(&r, "key of 65535 bytes");
    r = raw_key_file(NULL, GGUF_MAX_KEY_LEN + 1);
    raw_fails(r, "key of 65536 bytes", "kv #0 key", "65536 bytes long, over the limit of 65535");
    const char *good[] = {"a", "general.base_model.0.name", "x_1.y2._"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        r = raw_key_file(good[i], strlen(good[i]));
        raw_opens(&r, good[i]);
        struct gguf_writer *w = gguf_writer_init();
        CHECK(gguf_writer_add_u32(w, good[i], 1) == 0, "writer refused key '%s': %s", good[i],
              st_last_error());
        gguf_writer_free(w);
    }
    const struct {
        const char *key, *byte;
    } bad[] = {{"General.name", "byte 0 (0x47)"}, {"a..b", "byte 2 (0x2e)"}, {".a", "byte 0 (0x2e)"},
               {"a.", "byte 1 (0x2e)"},           {"a b", "byte 1 (0x20)"},  {"a-b", "byte 1 (0x2d)"},
               {"t\xc3\xa9st", "byte 1 (0xc3)"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = raw_key_file(bad[i].key, strlen(bad[i].key));
        raw_fails(r, bad[i].key, "not a valid key", bad[i].byte);
        struct gguf_writer *w = gguf_writer_init();
        CHECK(gguf_writer_add_u32(w, bad[i].key, 1) == -1, "writer took key '%s'", bad[i].key);
        gguf_writer_free(w);
    }
    struct gguf_writer *w = gguf_writer_init();
    char name[GGUF_MAX_NAME_LEN + 2];
    memset(name, 'n', sizeof name - 1), name[sizeof name - 1] = 0;
    CHECK(gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 1, (int64_t[]){4}, NULL) == -1,
          "writer took a 64-byte name");
    name[GGUF_MAX_NAME_LEN] = 0;
    CHECK(gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 1, (int64_t[]){4}, NULL) == 0, "%s",
          st_last_error());
    gguf_writer_free(w);
    // one string: at most 2^30 bytes; one array: at most 2^30 elements
    for (uint64_t extra = 0; extra < 2; extra++) {
        const uint64_t len = GGUF_MAX_STRING_LEN + extra;
        r = raw_begin(len + 4096, 0, 2);
        raw_str(&r, "s", 1), raw_le(&r, GGUF_VTYPE_STRING, 4), raw_le(&r, len, 8);
        r.n += len; // the string: zero pages, never touched
        raw_str(&r, "u", 1), raw_le(&r, GGUF_VTYPE_UINT8, 4), raw_le(&r, 1, 1);
        if (extra)
            raw_fails(r, "string of 2^30 + 1 bytes", "key 's' value",
                      "1073741825 is over the limit of 1073741824");
        else
            raw_opens(&r, "string of 2^30 bytes");
        r = raw_begin(len + 4096, 0, 1);
        raw_str(&r, "a", 1), raw_le(&r, GGUF_VTYPE_ARRAY, 4), raw_le(&r, GGUF_VTYPE_UINT8, 4),
            raw_le(&r, len, 8);
        r.n += len;
        if (extra)
            raw_fails(r, "array of 2^30 + 1 elements", "key 'a' array count", "over the limit of 1073741824");
        else
            raw_opens(&r, "array of 2^30 elements");
    }
}

// Random byte changes in the header, metadata and tensor infos: every image
// either opens (and then every value can be walked) or fails with a message.
static void walk_value(const struct gguf_value *v, uint64_t *sink) {
    if (v->type == GGUF_VTYPE_STRING && v->v.str.len) *sink += (uint8_t)v->v.str.data[v->v.str.len - 1];
    if (v->type != GGUF_VTYPE_ARRAY) return;
    const struct gguf_array *a = &v->v.arr;
    for (uint64_t i = 0; i < a->count; i++) {
        if (a->items)
            walk_value(&a->items[i], sink);
        else if (a->type == GGUF_VTYPE_FLOAT32 || a->type == GGUF_VTYPE_FLOAT64)
            *sink += (uint64_t)isnan(gguf_array_float(a, i));
        else
            *sink += (uint64_t)gguf_array_int(a, i);
    }
}

static void test_fuzz_flips(void) {
    uint64_t n;
    uint8_t *buf = small_file(&n);
    struct gguf_file *f0 = open_ok(buf, n);
    uint64_t meta_end = f0 ? f0->data_offset : n;
    gguf_close(f0);
    const uint8_t special[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x20, 0x09, 0x0d};
    int opened = 0, refused = 0, unclear = 0;
    uint64_t sink = 0;
    for (int it = 0; it < 2000; it++) {
        uint8_t *b = malloc(n);
        memcpy(b, buf, n);
        int flips = 1 + (int)(rng_next() % 4);
        for (int k = 0; k < flips; k++) {
            uint64_t at = rng_next() % meta_end;
            uint64_t r = rng_next();
            if (r % 3 == 0)
                b[at] ^= (uint8_t)(1u << (r >> 8) % 8);
            else if (r % 3 == 1)
                b[at] = special[(r >> 8) % sizeof special];
            else
                b[at] = (uint8_t)(r >> 16);
        }
        uint64_t len = rng_next() % 8 == 0 ? rng_next() % (n + 1) : n; // sometimes cut as well
        struct gguf_file *f = NULL;
        if (gguf_open_memory(b, len, NAME, &f) == 0) {
            opened++;
            for (uint64_t i = 0; i < f->n_kv; i++) {
                char key[256];
                const struct gguf_kv *kv = &f->kv[i];
                if (kv->key.len < sizeof key) {
                    memcpy(key, kv->key.data, kv->key.len);
                    key[kv->key.len] = 0;
                    if (gguf_find(f, key) != kv) unclear++;
                }
                walk_value(&kv->value, &sink);
            }
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                const struct gguf_tensor *t = &f->tensors[i];
                const uint8_t *d = t->data;
                if (d < f->map + f->data_offset || d + t->nbytes > f->map + f->size) unclear++;
                if (t->nbytes) sink += d[0] + d[t->nbytes - 1];
            }
            gguf_close(f);
        } else {
            refused++;
            if (strncmp(st_last_error(), NAME ": ", strlen(NAME) + 2) != 0 || strlen(st_last_error()) < 30) {
                if (unclear++ < 5) printf("    unclear message: '%s'\n", st_last_error());
            }
        }
        free(b);
    }
    printf("    2000 mutated images: %d opened, %d refused (sink %llu)\n", opened, refused,
           (unsigned long long)sink);
    CHECK(unclear == 0, "%d images opened inconsistently or failed without a clear message", unclear);
    CHECK(refused > 0, "no mutation was refused");
    free(buf);
}

// --- files on disk and `strata info` ----------------------------------------------------

static const char *tmp_dir(void) {
    const char *d = getenv("TMPDIR");
    return d && *d ? d : P_tmpdir;
}

// Runs cli_info with stdout and stderr captured into out/err (NUL-terminated).
static int run_info(int argc, char **argv, char *out, size_t out_cap, char *err, size_t err_cap) {
    fflush(stdout), fflush(stderr);
    FILE *fo = tmpfile(), *fe = tmpfile();
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fileno(fo), 1), dup2(fileno(fe), 2);
    int rc = cli_info(argc, argv);
    fflush(stdout), fflush(stderr);
    dup2(saved_out, 1), dup2(saved_err, 2);
    close(saved_out), close(saved_err);
    rewind(fo), rewind(fe);
    out[fread(out, 1, out_cap - 1, fo)] = 0;
    err[fread(err, 1, err_cap - 1, fe)] = 0;
    fclose(fo), fclose(fe);
    return rc;
}

static void test_files_and_info(void) {
    char path[512], bad[512], dir[512];
    snprintf(path, sizeof path, "%s/strata_test_gguf_%d.gguf", tmp_dir(), (int)getpid());
    snprintf(bad, sizeof bad, "%s/strata_test_gguf_%d_bad.gguf", tmp_dir(), (int)getpid());
    snprintf(dir, sizeof dir, "%s", tmp_dir());
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_add_str(w, "general.architecture", "llama");
    char tmpl[301];
    for (int i = 0; i < 300; i++) tmpl[i] = i % 50 == 10 ? '\n' : (char)('a' + i % 26);
    tmpl[300] = 0;
    gguf_writer_add_str(w, "tokenizer.chat_template", tmpl);
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = i * 3;
    gguf_writer_add_arr(w, "ids", GGUF_VTYPE_INT32, ids, 20);
    gguf_writer_add_f32(w, "eps", 1e-5f);
    gguf_writer_add_tensor(w, "tok.weight", GGML_TYPE_Q8_0, 2, (int64_t[]){64, 2}, NULL);
    gguf_writer_add_tensor(w, "norm", GGML_TYPE_F32, 1, (int64_t[]){64}, NULL);
    CHECK(gguf_writer_write_file(w, path) == 0, "%s", st_last_error());
    gguf_writer_free(w);

    struct gguf_file *f = NULL;
    CHECK(gguf_open(path, &f) == 0, "%s", st_last_error());
    if (f) {
        CHECK(strcmp(f->path, path) == 0 && f->n_tensors == 2 && gguf_find_tensor(f, "norm")->nbytes == 256,
              "on disk");
        gguf_close(f);
    }
    CHECK(gguf_open(bad, &f) == -1 && f == NULL && strstr(st_last_error(), bad) &&
              strstr(st_last_error(), "cannot open"),
          "missing file: %s", st_last_error());
    CHECK(gguf_open(dir, &f) == -1 && strstr(st_last_error(), "not a regular file"), "directory: %s",
          st_last_error());
    FILE *fp = fopen(bad, "wb");
    fclose(fp);
    CHECK(gguf_open(bad, &f) == -1 && strstr(st_last_error(), "empty"), "empty file: %s", st_last_error());
    fp = fopen(bad, "wb");
    fwrite("GGUF\3\0\0\0\1", 1, 9, fp);
    fclose(fp);
    CHECK(gguf_open(bad, &f) == -1 && strstr(st_last_error(), "n_tensors"), "short file: %s",
          st_last_error());

    int failed_before = test_checks_failed;
    static char out[16384], err[4096];
    char *a_ok[] = {"info", path}, *a_help[] = {"info", "--help"}, *a_none[] = {"info"};
    char *a_flag[] = {"info", "--bogus", path}, *a_two[] = {"info", path, path}, *a_bad[] = {"info", bad};
    int rc = run_info(2, a_ok, out, sizeof out, err, sizeof err);
    CHECK(rc == 0, "info rc %d: %s", rc, err);
    const char *want[] = {"version:     3",
                          "tensors:     2",
                          "kv pairs:    4",
                          "alignment:   32",
                          "general.architecture     string",
                          "\"llama\"",
                          "[0, 3, 6, 9, 12, 15, 18, 21, ... (20 total)]",
                          "array[int32]",
                          "... (300 bytes)",
                          "abcdefghij\\nlmnop",
                          "1e-05",
                          "tok.weight",
                          "Q8_0",
                          "[64, 2]",
                          "136",
                          "[64]",
                          "256",
                          "total: 2 tensors, 392 bytes",
                          "192 parameters",
                          "Q8_0          1 tensor "};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(out, want[i]), "info output lacks '%s'", want[i]);
    if (test_checks_failed > failed_before) printf("%s", out);
    CHECK(run_info(2, a_help, out, sizeof out, err, sizeof err) == 0 && strstr(out, "usage: strata info"),
          "--help");
    CHECK(run_info(1, a_none, out, sizeof out, err, sizeof err) == 2 && strstr(err, "no model"), "no args");
    CHECK(run_info(3, a_flag, out, sizeof out, err, sizeof err) == 2 &&
              strstr(err, "unknown option '--bogus'"),
          "unknown flag: %s", err);
    CHECK(run_info(3, a_two, out, sizeof out, err, sizeof err) == 2, "two models");
    CHECK(run_info(2, a_bad, out, sizeof out, err, sizeof err) == 1 && strstr(err, "n_tensors") &&
              strstr(err, bad),
          "bad file: %s", err);
    unlink(path);
    unlink(bad);
}

// The real model. The expected values were read from the same file with the
// `gguf` Python package (GGUFReader, version 0.19.0): 272 tensors, 33 keys,
// data at 1785664, the shapes, types, offsets and sizes below, 96576768 tensor
// bytes, 134515008 parameters, 210 Q4_1 + 61 F32 + 1 Q8_0 tensors.
static void test_real_model(void) {
    const char *path = test_model_path();
    if (!path || access(path, R_OK) != 0) SKIP("no test model (run scripts/fetch-model.sh)");
    struct gguf_file *f = NULL;
    CHECK(gguf_open(path, &f) == 0, "%s", st_last_error());
    if (!f) return;
    CHECK(f->version == 3 && f->n_tensors == 272 && f->n_kv == 33 && f->alignment == 32 &&
              f->data_offset == 1785664,
          "header: v%u %llu tensors %llu kv", f->version, (unsigned long long)f->n_tensors,
          (unsigned long long)f->n_kv);
    const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->type == GGML_TYPE_Q8_0 && t->n_dims == 2 && t->ne[0] == 576 && t->ne[1] == 49152 &&
              t->nbytes == 30081024 && f->data_offset + t->offset == 1785664,
          "token_embd.weight");
    t = gguf_find_tensor(f, "blk.0.ffn_down.weight");
    CHECK(t && t->type == GGML_TYPE_Q4_1 && t->ne[0] == 1536 && t->ne[1] == 576 && t->nbytes == 552960 &&
              f->data_offset + t->offset == 31868992,
          "blk.0.ffn_down.weight");
    t = gguf_find_tensor(f, "output_norm.weight");
    CHECK(t && t->type == GGML_TYPE_F32 && t->n_dims == 1 && t->ne[0] == 576 && t->nbytes == 2304 &&
              f->data_offset + t->offset == 98360128,
          "output_norm.weight");
    uint64_t bytes = 0, params = 0, by_type[GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        t = &f->tensors[i];
        bytes += t->nbytes;
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        by_type[t->type]++;
    }
    CHECK(bytes == 96576768 && params == 134515008, "totals %llu %llu", (unsigned long long)bytes,
          (unsigned long long)params);
    CHECK(by_type[GGML_TYPE_Q4_1] == 210 && by_type[GGML_TYPE_F32] == 61 && by_type[GGML_TYPE_Q8_0] == 1,
          "types");
    struct gguf_str s;
    uint32_t u;
    float x;
    bool b;
    const struct gguf_array *a;
    CHECK(gguf_get_str(f, "general.architecture", &s) == 0 && s.len == 5 && !memcmp(s.data, "llama", 5),
          "arch");
    CHECK(gguf_get_str(f, "tokenizer.ggml.pre", &s) == 0 && s.len == 6 && !memcmp(s.data, "smollm", 6),
          "pre");
    CHECK(gguf_get_str(f, "tokenizer.chat_template", &s) == 0 && s.len == 368, "chat template");
    CHECK(gguf_get_u32(f, "llama.block_count", &u) == 0 && u == 30, "block_count");
    CHECK(gguf_get_u32(f, "llama.embedding_length", &u) == 0 && u == 576, "embedding_length");
    CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) == 0 && u == 2, "eos");
    CHECK(gguf_get_f32(f, "llama.rope.freq_base", &x) == 0 && x == 100000.0f, "freq_base");
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &x) == 0 && x == 1e-5f, "eps");
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == 0 && !b, "add_bos_token");
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, &a) == 0 && a->count == 49152 &&
              a->items[0].v.str.len == 13 && !memcmp(a->items[0].v.str.data, "<|endoftext|>", 13) &&
              a->items[49151].v.str.len == 7 && !memcmp(a->items[49151].v.str.data, "ectable", 7),
          "tokens");
    CHECK(gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_VTYPE_STRING, &a) == 0 && a->count == 48900 &&
              a->items[0].v.str.len == 4 && !memcmp(a->items[0].v.str.data, "\xc4\xa0 t", 4),
          "merges");
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, &a) == 0 && a->count == 49152 &&
              gguf_array_int(a, 0) == 3 && gguf_array_int(a, 100) == 1,
          "token_type");
    gguf_close(f);
}

int main(void) {
    const char *seed_env = getenv("STRATA_SEED");
    uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                          : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
    printf("seed %llu (set STRATA_SEED to repeat)\n", (unsigned long long)seed);
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1; // never zero
    if (!rng_state) rng_state = 1;
    RUN(test_small_file);
    RUN(test_every_type);
    RUN(test_getters);
    RUN(test_versions_alignments);
    RUN(test_writer_refuses);
    RUN(test_truncated_everywhere);
    RUN(test_bad_header);
    RUN(test_bad_kv);
    RUN(test_bad_alignment);
    RUN(test_bad_tensors);
    RUN(test_limits);
    RUN(test_fuzz_flips);
    RUN(test_files_and_info);
    RUN(test_real_model);
    TEST_END();
}
