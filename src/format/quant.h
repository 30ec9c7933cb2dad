// quant.h: the GGML tensor types stored in GGUF files, one table indexed by type.
//
// Block layouts are facts of the GGUF format and are matched bit for bit. Every
// type the format defines is known here (so the reader can validate sizes);
// `supported` says whether Strata can compute with it.
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    // 4 and 5 (Q4_2, Q4_3) were removed from the format
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    // 31..33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed from the format
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    // 36..38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed from the format
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40,
};

// Dequantizes n values (n a multiple of the block size) from src to dst.
typedef void (*quant_dequantize_fn)(const void *src, float *dst, int64_t n);
// Quantizes n values (n a multiple of the block size) from src to dst (reference rounding).
typedef void (*quant_quantize_fn)(const float *src, void *dst, int64_t n);
// Dot product of n values: one weight row (this type) with one activation row
// made by quantize_row of this type's vec_dot_type (the fast paths rely on its
// value range and block sums). n is a multiple of both block sizes. Rows must be
// 4-byte aligned for F32 and Q8_K activations, 2-byte aligned otherwise.
typedef float (*quant_vec_dot_fn)(int64_t n, const void *w, const void *act);

struct quant_traits {
    const char *name;   // "Q4_K"; NULL for a number the format does not define
    int64_t block_size; // elements per block
    size_t type_size;   // bytes per block
    bool supported;     // dequantize_row (and vec_dot) exist
    quant_dequantize_fn dequantize_row;
    quant_quantize_fn quantize_row;  // NULL where Strata has no quantizer for the type
    enum ggml_type vec_dot_type;     // activation type of vec_dot (meaningful only where vec_dot exists)
    quant_vec_dot_fn vec_dot;        // fast path (SIMD where built); NULL if unsupported
    quant_vec_dot_fn vec_dot_scalar; // the same function in plain C, the fast path's twin
    // The activation quantizer of matrix products at run time, where it differs
    // from quantize_row (NULL: quantize_row): ggml's CPU form for Q8_0 and Q8_1
    // multiplies by 127/amax and rounds half to even, where the reference form
    // divides by amax/127 and rounds half away from zero. quantize_row stays
    // the reference (bytes equal to the gguf package's); products use this one
    // so that they see the same 8-bit activations as llama.cpp's CPU backend.
    quant_quantize_fn from_float;
};

// The traits of type t, or NULL when t is not a type the format defines.
const struct quant_traits *quant_get(enum ggml_type t);
// The activation quantizer for rows of vec_dot_type t (from_float, else
// quantize_row), or NULL when t has none.
quant_quantize_fn quant_from_float(enum ggml_type t);
// Name of t ("Q4_K"), or "unknown" when t is not a defined type.
const char *quant_name(enum ggml_type t);
// Bytes taken by a row of n elements of type t; 0 if n is not a multiple of the
// block size, t is unknown, or the size overflows.
size_t quant_row_size(enum ggml_type t, int64_t n);

#endif
