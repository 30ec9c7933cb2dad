// quant_impl.h: block layouts of the GGML quant formats and the row functions
// behind the quant_traits table (quant.h). Private to quant.c, quant_k.c,
// cpu/vec_dot*.c and their test.
//
// Every struct here is a fact of the GGUF format: field order, widths and the
// total size are matched bit for bit (the static asserts pin the sizes).
// Half-precision fields are raw IEEE binary16 bits (st_fp16_to_f32).
#ifndef STRATA_QUANT_IMPL_H
#define STRATA_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "format/quant.h"

// Elements per block.
#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_K 256
#define K_SCALE_SIZE 12

// --- 32-element blocks ---------------------------------------------------------

// x = d * (q - 8), q in [0, 15]; element j in the low nibble of qs[j], j+16 in the high one.
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
};
_Static_assert(sizeof(struct block_q4_0) == 18, "block_q4_0 size");

// x = d * q + m, q in [0, 15]; nibble order as q4_0.
struct block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK4_1 / 2];
};
_Static_assert(sizeof(struct block_q4_1) == 20, "block_q4_1 size");

// x = d * (q - 16), q in [0, 31]; low 4 bits as q4_0, bit 4 of element j is bit j of qh (LE).
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
_Static_assert(sizeof(struct block_q5_0) == 22, "block_q5_0 size");

// x = d * q + m, q in [0, 31]; bit layout as q5_0.
struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
_Static_assert(sizeof(struct block_q5_1) == 24, "block_q5_1 size");

// x = d * q.
struct block_q8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
};
_Static_assert(sizeof(struct block_q8_0) == 34, "block_q8_0 size");

// x = d * q; s = d * sum(q) (as half), used by the q4_1/q5_1 dot products for the mins.
struct block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[QK8_1];
};
_Static_assert(sizeof(struct block_q8_1) == 36, "block_q8_1 size");

// x = d * kvalues_iq4nl[q]; nibble order as q4_0.
struct block_iq4_nl {
    uint16_t d;
    uint8_t qs[QK4_NL / 2];
};
_Static_assert(sizeof(struct block_iq4_nl) == 18, "block_iq4_nl size");

// --- 256-element super-blocks ------------------------------------------------------

// 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4), q in [0, 3].
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
_Static_assert(sizeof(struct block_q2_K) == 84, "block_q2_K size");

// 16 sub-blocks of 16: x = d * (s6[i] - 32) * (q2 - (hmask bit ? 0 : 4)); 6-bit scales packed in 12 bytes.
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
_Static_assert(sizeof(struct block_q3_K) == 110, "block_q3_K size");

// 8 sub-blocks of 32: x = d * sc[i] * q - dmin * m[i], q in [0, 15]; 6-bit sc/m packed in 12 bytes.
struct block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct block_q4_K) == 144, "block_q4_K size");

// As q4_K with a fifth bit per element in qh, q in [0, 31].
struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct block_q5_K) == 176, "block_q5_K size");

// 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q in [0, 63] (4 low bits in ql, 2 high in qh).
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
_Static_assert(sizeof(struct block_q6_K) == 210, "block_q6_K size");

// Activation block of the K-quant dot products: x = d * q (d is a float32 here);
// bsums[i] = sum of qs[16 i .. 16 i + 15].
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
_Static_assert(sizeof(struct block_q8_K) == 292, "block_q8_K size");

// 8 sub-blocks of 32: x = d * (ls[i] - 32) * kvalues_iq4nl[q]; ls 6 bits: low 4 in
// scales_l (two per byte), high 2 in scales_h (2 bits per sub-block, LE).
struct block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
};
_Static_assert(sizeof(struct block_iq4_xs) == 136, "block_iq4_xs size");

// The 16 non-linear levels of IQ4_NL and IQ4_XS.
extern const int8_t quant_kvalues_iq4nl[16];

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block.
static inline void quant_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

// Unpacks the sixteen 6-bit scales of a q3_K block, minus their offset 32.
static inline void quant_q3k_scales(const uint8_t in[12], int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? in[j] & 0xF : in[j - 8] >> 4;
        const int hi = (in[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

// Rounds fval to the nearest integer, ties to even (|fval| < 2^22): adding 1.5 * 2^23
// leaves the rounded integer in the low mantissa bits. ggml's nearest_int.
static inline int quant_nearest_int(float fval) {
    const float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

// Quantizes one IQ4 super-block of `super_block` elements (32 for IQ4_NL, 256 for
// IQ4_XS) with ggml's search (7 scale trials each side, no importance weights):
// writes the half scale to *dh, the nibbles to q4 and, when super_block > 32, the
// 6-bit sub-block scales to *scales_h / scales_l.
void quant_iq4_quantize_block(int super_block, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                              uint8_t *scales_l);

// --- row functions (n a multiple of the block size) ---------------------------------
// quant.c
void quant_dequantize_row_f32(const void *src, float *dst, int64_t n);
void quant_dequantize_row_f16(const void *src, float *dst, int64_t n);
void quant_dequantize_row_bf16(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q4_0(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q4_1(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q5_0(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q5_1(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q8_0(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q8_1(const void *src, float *dst, int64_t n);
void quant_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n);
void quant_quantize_row_f32(const float *src, void *dst, int64_t n);
void quant_quantize_row_f16(const float *src, void *dst, int64_t n);
void quant_quantize_row_bf16(const float *src, void *dst, int64_t n);
void quant_quantize_row_q4_0(const float *src, void *dst, int64_t n);
void quant_quantize_row_q4_1(const float *src, void *dst, int64_t n);
void quant_quantize_row_q5_0(const float *src, void *dst, int64_t n);
void quant_quantize_row_q5_1(const float *src, void *dst, int64_t n);
void quant_quantize_row_q8_0(const float *src, void *dst, int64_t n);
void quant_quantize_row_q8_1(const float *src, void *dst, int64_t n);
// The run-time activation forms (quant.h: quant_traits.from_float).
void quant_from_float_q8_0(const float *src, void *dst, int64_t n);
void quant_from_float_q8_1(const float *src, void *dst, int64_t n);
void quant_quantize_row_iq4_nl(const float *src, void *dst, int64_t n);
// quant_k.c
void quant_dequantize_row_q2_K(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q3_K(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q4_K(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q5_K(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q6_K(const void *src, float *dst, int64_t n);
void quant_dequantize_row_q8_K(const void *src, float *dst, int64_t n);
void quant_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n);
void quant_quantize_row_q8_K(const float *src, void *dst, int64_t n);
void quant_quantize_row_iq4_xs(const float *src, void *dst, int64_t n);

// --- dot products: weight row (first type) . activation row (second type) -------
// The activation row must come from quant_quantize_row of the second type: its
// int8 values lie in [-127, 127] and its sums (s, bsums) are consistent, which the
// SIMD forms rely on (no int16 saturation, mins from the block sums).
// cpu/vec_dot.c: fast forms (AVX2 / AVX-512 VNNI where built, else the scalar twin)
float quant_vec_dot_f32_f32(int64_t n, const void *w, const void *act);
float quant_vec_dot_f16_f32(int64_t n, const void *w, const void *act);
float quant_vec_dot_bf16_f32(int64_t n, const void *w, const void *act);
float quant_vec_dot_q4_0_q8_0(int64_t n, const void *w, const void *act);
float quant_vec_dot_q4_1_q8_1(int64_t n, const void *w, const void *act);
float quant_vec_dot_q5_0_q8_0(int64_t n, const void *w, const void *act);
float quant_vec_dot_q5_1_q8_1(int64_t n, const void *w, const void *act);
float quant_vec_dot_q8_0_q8_0(int64_t n, const void *w, const void *act);
float quant_vec_dot_iq4_nl_q8_0(int64_t n, const void *w, const void *act);
// cpu/vec_dot_k.c
float quant_vec_dot_q2_K_q8_K(int64_t n, const void *w, const void *act);
float quant_vec_dot_q3_K_q8_K(int64_t n, const void *w, const void *act);
float quant_vec_dot_q4_K_q8_K(int64_t n, const void *w, const void *act);
float quant_vec_dot_q5_K_q8_K(int64_t n, const void *w, const void *act);
float quant_vec_dot_q6_K_q8_K(int64_t n, const void *w, const void *act);
float quant_vec_dot_iq4_xs_q8_K(int64_t n, const void *w, const void *act);
// cpu/vec_dot_scalar.c: plain C twins (integer sums per block as ggml's scalar code)
float quant_vec_dot_f32_f32_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_f16_f32_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_bf16_f32_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q4_0_q8_0_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q4_1_q8_1_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q5_0_q8_0_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q5_1_q8_1_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q8_0_q8_0_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_iq4_nl_q8_0_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q2_K_q8_K_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q3_K_q8_K_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q4_K_q8_K_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q5_K_q8_K_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_q6_K_q8_K_scalar(int64_t n, const void *w, const void *act);
float quant_vec_dot_iq4_xs_q8_K_scalar(int64_t n, const void *w, const void *act);

#endif
