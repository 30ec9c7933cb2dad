// gguf_write.h: builds a GGUF file in memory and writes it out (version 3 by
// default, or 2: the two share one layout).
//
// Values and tensor data are copied when added, so the caller's buffers may be
// freed right after each call. The writer refuses what the reader would refuse
// in a kv or tensor it is given (empty, invalid, too long or duplicate keys and
// names, strings and arrays over the limits of gguf.h, undefined types, bad
// dimensions, bools other than 0/1), with two deliberate exceptions that
// let tests build hostile files: it writes arrays nested to any depth, and a
// "general.alignment" key added with the plain adders is written as given
// (gguf_writer_set_alignment is the one that also lays the data out by it).
#ifndef STRATA_GGUF_WRITE_H
#define STRATA_GGUF_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf.h"

struct gguf_writer;

// A new writer: version 3, alignment 32, no keys, no tensors. Free with gguf_writer_free.
struct gguf_writer *gguf_writer_init(void);
void gguf_writer_free(struct gguf_writer *w);

// Sets the header version: 2 or 3. Returns 0, or -1 with a message.
int gguf_writer_set_version(struct gguf_writer *w, uint32_t version);
// Lays the data section out with this alignment (a power of two, 8..1 MiB)
// and adds the uint32 key general.alignment in this position among the keys.
// Returns 0, or -1 with a message (bad value, or the key already added).
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);

// Adds key = *v, any type, arrays nested to any depth. Fixed-size array
// elements are copied from v->v.arr.data as little-endian bytes; STRING and
// ARRAY elements come from v->v.arr.items, each of the array's element type.
// Returns 0, or -1 with a message (empty or duplicate key, undefined type,
// missing data, an element of the wrong type, a bool other than 0 or 1); on
// failure nothing is added.
int gguf_writer_add_value(struct gguf_writer *w, const char *key, const struct gguf_value *v);
// Shorthands for gguf_writer_add_value; same returns.
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t x);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t x);
int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t x);
int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t x);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float x);
int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double x);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool x);
// s is NUL-terminated.
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s);
// An array of n fixed-size elements of type elem read from host values at
// data (uint8_t[n] for UINT8, float[n] for FLOAT32, bool[n] for BOOL, ...).
int gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem, const void *data,
                        uint64_t n);
// An array of n NUL-terminated strings.
int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

// Adds a tensor of the given type and shape (ne[0] fastest, n_dims 1..4, each
// >= 1, ne[0] a multiple of the type's block size); its bytes are copied from
// data (quant_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3] of them), or are
// zeros when data is NULL. Tensors are laid out in the order added. Returns 0,
// or -1 with a message.
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data);

// Writes the file to a new malloc'd buffer: *out (the caller frees it) of
// *size bytes. The data section and each tensor start at a multiple of the
// alignment; the file ends with the last tensor's data. Returns 0, or -1 with
// a message.
int gguf_writer_write_memory(const struct gguf_writer *w, uint8_t **out, uint64_t *size);
// Writes the file to path (created or truncated). Returns 0, or -1 with a message.
int gguf_writer_write_file(const struct gguf_writer *w, const char *path);

#endif
