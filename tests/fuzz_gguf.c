// fuzz_gguf.c: libFuzzer target for the GGUF reader (built by `make fuzz`,
// with clang -fsanitize=fuzzer,address,undefined).
//
// Every input must either be refused with a message or open into a file whose
// every value, array element, lookup and tensor byte can be touched safely.
#include <stdint.h>
#include <string.h>

#include "format/gguf.h"
#include "util.h"

static volatile uint64_t sink; // keeps the reads from being optimised away

static void touch_value(const struct gguf_value *v) {
    if (v->type == GGUF_VTYPE_STRING && v->v.str.len) sink += (uint8_t)v->v.str.data[v->v.str.len - 1];
    if (v->type != GGUF_VTYPE_ARRAY) return;
    const struct gguf_array *a = &v->v.arr;
    for (uint64_t i = 0; i < a->count; i++) {
        if (a->items)
            touch_value(&a->items[i]);
        else if (a->type == GGUF_VTYPE_FLOAT32 || a->type == GGUF_VTYPE_FLOAT64)
            sink += gguf_array_float(a, i) > 0;
        else
            sink += (uint64_t)gguf_array_int(a, i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f;
    if (gguf_open_memory(data, size, "fuzz.gguf", &f) != 0) {
        ST_ASSERT(st_last_error()[0] != 0);
        return 0;
    }
    char key[512];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        touch_value(&kv->value);
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.data, kv->key.len);
        key[kv->key.len] = 0;
        ST_ASSERT(gguf_find(f, key) == kv);
        uint32_t u;
        int64_t i64;
        float x;
        bool b;
        struct gguf_str s;
        const struct gguf_array *a;
        sink += (uint64_t)(gguf_get_u32(f, key, &u) + gguf_get_i64(f, key, &i64) + gguf_get_f32(f, key, &x) +
                           gguf_get_bool(f, key, &b) + gguf_get_str(f, key, &s) +
                           gguf_get_arr(f, key, GGUF_VTYPE_STRING, &a));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        ST_ASSERT(d >= f->map + f->data_offset && t->nbytes <= f->size - (uint64_t)(d - f->map));
        if (t->nbytes) sink += d[0] + d[t->nbytes - 1];
        if (t->name.len < sizeof key) {
            memcpy(key, t->name.data, t->name.len);
            key[t->name.len] = 0;
            ST_ASSERT(gguf_find_tensor(f, key) == t);
        }
    }
    gguf_close(f);
    return 0;
}
