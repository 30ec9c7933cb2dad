// gguf.h: a bounds-checked reader for GGUF files (versions 2 and 3).
//
// The file is mapped read-only; every length, count, offset, type and dimension
// read from it is validated before use (see gguf.c for the full list). Strings
// and arrays returned point into the mapping and live until gguf_close().
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/quant.h"

enum gguf_vtype {
    GGUF_VTYPE_UINT8 = 0,
    GGUF_VTYPE_INT8 = 1,
    GGUF_VTYPE_UINT16 = 2,
    GGUF_VTYPE_INT16 = 3,
    GGUF_VTYPE_UINT32 = 4,
    GGUF_VTYPE_INT32 = 5,
    GGUF_VTYPE_FLOAT32 = 6,
    GGUF_VTYPE_BOOL = 7,
    GGUF_VTYPE_STRING = 8,
    GGUF_VTYPE_ARRAY = 9,
    GGUF_VTYPE_UINT64 = 10,
    GGUF_VTYPE_INT64 = 11,
    GGUF_VTYPE_FLOAT64 = 12,
    GGUF_VTYPE_COUNT = 13,
};

// A string inside the mapping: not NUL-terminated, may contain any bytes.
struct gguf_str {
    uint64_t len;
    const char *data;
};

// Limits on what a file may hold; the reader refuses a file past any of them
// and the writer refuses to write one.
#define GGUF_MAX_KEY_LEN 65535 // bytes in a key (the GGUF specification)
#define GGUF_MAX_NAME_LEN 63   // bytes in a tensor name: ggml's GGML_MAX_NAME (64) holds its NUL too
#define GGUF_MAX_STRING_LEN (1ull << 30) // bytes in one string (llama.cpp's GGUF_MAX_STRING_LENGTH)
#define GGUF_MAX_ARRAY_LEN (1ull << 30)  // elements in one array (llama.cpp's GGUF_MAX_ARRAY_ELEMENTS)

// Whether key[0..len) is a valid key: 1 to GGUF_MAX_KEY_LEN bytes of
// lower_snake_case ASCII words ([a-z0-9_]+) joined by single dots, as the GGUF
// specification requires. When it is not, *bad (if not NULL) is the offset of
// the first byte that breaks the rule (len for an empty or too long key).
bool gguf_key_valid(const char *key, uint64_t len, uint64_t *bad);

struct gguf_value;

// An array value. Elements of fixed-size types are stored contiguously at
// `data` (little-endian, possibly unaligned: read them with gguf_array_*);
// strings and nested arrays are parsed into `items`.
struct gguf_array {
    enum gguf_vtype type; // element type
    uint64_t count;
    const void *data;         // fixed-size elements; NULL for STRING/ARRAY
    struct gguf_value *items; // [count] for STRING and ARRAY elements; NULL otherwise
};

struct gguf_value {
    enum gguf_vtype type;
    union {
        uint64_t u64; // UINT8..UINT64 and BOOL, zero-extended
        int64_t i64;  // INT8..INT64, sign-extended
        double f64;   // FLOAT32 and FLOAT64
        struct gguf_str str;
        struct gguf_array arr;
    } v;
};

struct gguf_kv {
    struct gguf_str key;
    struct gguf_value value;
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims; // 1..4
    int64_t ne[4];   // elements per dimension, ne[0] fastest; unused dims are 1
    enum ggml_type type;
    uint64_t offset;  // from the start of the data section
    uint64_t nbytes;  // bytes of data
    const void *data; // into the mapping
};

struct gguf_file {
    char *path; // owned copy of the path given to gguf_open
    uint32_t version;
    uint64_t n_kv;
    struct gguf_kv *kv; // [n_kv]
    uint64_t n_tensors;
    struct gguf_tensor *tensors; // [n_tensors]
    uint64_t alignment;
    uint64_t data_offset; // start of the data section in the file
    const uint8_t *map;   // the whole file
    uint64_t size;
};

// Opens and validates path. On success returns 0 and sets *out (free with
// gguf_close); on failure returns -1 with st_last_error() naming the file, the
// field and the bad value.
int gguf_open(const char *path, struct gguf_file **out);
// Validates an in-memory image (not copied: it must outlive the result).
int gguf_open_memory(const void *data, uint64_t size, const char *name, struct gguf_file **out);
void gguf_close(struct gguf_file *f);

// The key/value named key, or NULL.
const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key);
// The tensor named name, or NULL.
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

// Typed getters: return 0 and store the value when the key exists with a
// compatible type (any integer type for u32/i64 if the value fits; FLOAT32 or
// FLOAT64 for f32), 1 when the key is absent (out untouched), and -1 with a
// message when it exists with a wrong type or an out-of-range value.
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out);
// An array of the given element type; same return convention.
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype elem,
                 const struct gguf_array **out);

// Element i of a fixed-size-element array, converted (caller checks type).
int64_t gguf_array_int(const struct gguf_array *a, uint64_t i);
double gguf_array_float(const struct gguf_array *a, uint64_t i);

// Name of a value type ("uint32"), "unknown" out of range.
const char *gguf_vtype_name(enum gguf_vtype t);
// Byte size of a fixed-size value type, 0 for STRING/ARRAY/unknown.
size_t gguf_vtype_size(enum gguf_vtype t);

#endif
