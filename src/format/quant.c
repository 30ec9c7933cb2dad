// quant.c: the quant_traits table (see quant.h) and the row functions of the
// float types and the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q8_1, IQ4_NL). K-quants live in quant_k.c, dot products in cpu/vec_dot*.c.
//
// Dequantization computes each value with the same float operations, in the same
// order, as ggml's reference (and the gguf Python package), so results agree bit
// for bit. Quantizers reproduce ggml's reference rounding (quantize_row_*_ref;
// for IQ4_NL the scale search ggml uses when writing model files), so bytes agree.
// Both need every product rounded on its own: no fused multiply-add contraction.
// gcc does not contract in ISO C mode (-std=c11); clang is told so here.
#include "format/quant.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "format/quant_impl.h"
#include "util.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

const int8_t quant_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

// --- F32, F16, BF16 ------------------------------------------------------------------

void quant_dequantize_row_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_dequantize_row_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = st_fp16_to_f32(h[i]);
}

void quant_dequantize_row_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(h[i]);
}

void quant_quantize_row_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void quant_quantize_row_f16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    int64_t i = 0;
#ifdef __F16C__ // the same halves, 8 at a time (to nearest, ties to even)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) h[i] = st_f32_to_fp16(src[i]);
}

void quant_quantize_row_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = st_f32_to_bf16(src[i]);
}

// --- helpers --------------------------------------------------------------------------

// Bit j of the 32-bit little-endian field qh.
static inline uint32_t qh_word(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void qh_store(uint8_t qh[4], uint32_t w) {
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(w >> (8 * i));
}

// The value of largest magnitude in x[0..n) (the first one on ties), with its sign.
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

// --- Q4_0 -----------------------------------------------------------------------------

void quant_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    const struct block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)((b[i].qs[j] & 0x0F) - 8) * d;
            dst[j + QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void quant_quantize_row_q4_0(const float *src, void *dst, int64_t n) {
    struct block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, src += QK4_0) {
        const float max = signed_absmax(src, QK4_0);
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = st_f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float x0 = src[j] * id;
            const float x1 = src[j + QK4_0 / 2] * id;
            // x*id lies in [-8, 8]: truncating x*id + 8.5 rounds half up; 16 clamps to 15
            const int8_t t0 = (int8_t)(x0 + 8.5f), t1 = (int8_t)(x1 + 8.5f);
            const uint8_t q0 = (uint8_t)(t0 < 15 ? t0 : 15), q1 = (uint8_t)(t1 < 15 ? t1 : 15);
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

// --- Q4_1 -----------------------------------------------------------------------------

void quant_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    const struct block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = st_fp16_to_f32(b[i].d);
        const float m = st_fp16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (float)(b[i].qs[j] & 0x0F) * d + m;
            dst[j + QK4_1 / 2] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

// Minimum and maximum of x[0..n).
static void min_max(const float *x, int n, float *min, float *max) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    *max = hi;
}

void quant_quantize_row_q4_1(const float *src, void *dst, int64_t n) {
    struct block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, src += QK4_1) {
        float min, max;
        min_max(src, QK4_1, &min, &max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = st_f32_to_fp16(d);
        b[i].m = st_f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float x0 = (src[j] - min) * id;
            const float x1 = (src[j + QK4_1 / 2] - min) * id;
            const int8_t t0 = (int8_t)(x0 + 0.5f), t1 = (int8_t)(x1 + 0.5f);
            const uint8_t q0 = (uint8_t)(t0 < 15 ? t0 : 15), q1 = (uint8_t)(t1 < 15 ? t1 : 15);
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

// --- Q5_0 -----------------------------------------------------------------------------

void quant_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    const struct block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = st_fp16_to_f32(b[i].d);
        const uint32_t qh = qh_word(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10);
            const int h1 = (int)((qh >> (j + 12)) & 0x10);
            dst[j] = (float)(((b[i].qs[j] & 0x0F) | h0) - 16) * d;
            dst[j + QK5_0 / 2] = (float)(((b[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void quant_quantize_row_q5_0(const float *src, void *dst, int64_t n) {
    struct block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, src += QK5_0) {
        const float max = signed_absmax(src, QK5_0);
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = st_f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const float x0 = src[j] * id;
            const float x1 = src[j + QK5_0 / 2] * id;
            const int8_t t0 = (int8_t)(x0 + 16.5f), t1 = (int8_t)(x1 + 16.5f);
            const uint8_t q0 = (uint8_t)(t0 < 31 ? t0 : 31), q1 = (uint8_t)(t1 < 31 ? t1 : 31);
            b[i].qs[j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        qh_store(b[i].qh, qh);
    }
}

// --- Q5_1 -----------------------------------------------------------------------------

void quant_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    const struct block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = st_fp16_to_f32(b[i].d);
        const float m = st_fp16_to_f32(b[i].m);
        const uint32_t qh = qh_word(b[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10);
            const int h1 = (int)((qh >> (j + 12)) & 0x10);
            dst[j] = (float)((b[i].qs[j] & 0x0F) | h0) * d + m;
            dst[j + QK5_1 / 2] = (float)((b[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void quant_quantize_row_q5_1(const float *src, void *dst, int64_t n) {
    struct block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, src += QK5_1) {
        float min, max;
        min_max(src, QK5_1, &min, &max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = st_f32_to_fp16(d);
        b[i].m = st_f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const float x0 = (src[j] - min) * id;
            const float x1 = (src[j + QK5_1 / 2] - min) * id;
            // (x - min) * id <= 31 * (1 + 2^-23): + 0.5 never truncates past 31
            const uint8_t q0 = (uint8_t)(x0 + 0.5f), q1 = (uint8_t)(x1 + 0.5f);
            b[i].qs[j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
            qh |= (uint32_t)((q0 & 0x10) >> 4) << j;
            qh |= (uint32_t)((q1 & 0x10) >> 4) << (j + QK5_1 / 2);
        }
        qh_store(b[i].qh, qh);
    }
}

// --- Q8_0, Q8_1 -------------------------------------------------------------------------

void quant_dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

// The scale amax/127 of x[0..n) and its inverse (0 for an all-zero block).
static float q8_scale(const float *x, int n, float *id) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

void quant_quantize_row_q8_0(const float *src, void *dst, int64_t n) {
    struct block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float id;
        const float d = q8_scale(src, QK8_0, &id);
        b[i].d = st_f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) {
            const float x = src[j] * id;
            b[i].qs[j] = (int8_t)roundf(x); // half away from zero, as ggml
        }
    }
}

// ggml's CPU activation form: amax over the block, id = 127/amax (not
// 1/(amax/127)), x·id rounded half to even; the scale d = amax/127 as stored.
static float q8_runtime_block(const float *x, int8_t *q, int n, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < n; j++) s += q[j] = (int8_t)nearbyintf(x[j] * id); // default mode: ties to even
    *sum = s;
    return amax / 127.0f;
}

void quant_from_float_q8_0(const float *src, void *dst, int64_t n) {
    struct block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        int sum;
        b[i].d = st_f32_to_fp16(q8_runtime_block(src, b[i].qs, QK8_0, &sum));
    }
}

void quant_from_float_q8_1(const float *src, void *dst, int64_t n) {
    struct block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        int sum;
        const float d = q8_runtime_block(src, b[i].qs, QK8_1, &sum);
        b[i].d = st_f32_to_fp16(d);
        b[i].s = st_f32_to_fp16(d * (float)sum);
    }
}

void quant_dequantize_row_q8_1(const void *src, float *dst, int64_t n) {
    const struct block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

void quant_quantize_row_q8_1(const float *src, void *dst, int64_t n) {
    struct block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float id;
        const float d = q8_scale(src, QK8_1, &id);
        b[i].d = st_f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            const float x = src[j] * id;
            b[i].qs[j] = (int8_t)roundf(x);
            sum += b[i].qs[j];
        }
        b[i].s = st_f32_to_fp16((float)sum * d);
    }
}

// --- IQ4_NL -------------------------------------------------------------------------------

void quant_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n) {
    const struct block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        const float d = st_fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            dst[j] = d * (float)quant_kvalues_iq4nl[b[i].qs[j] & 0xF];
            dst[j + QK4_NL / 2] = d * (float)quant_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

// Index of the level in the sorted table val[0..n) nearest to x (the upper on ties).
static int best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// ggml's quantize_row_iq4_nl_impl with block_size 32, ntry 7 and no importance
// weights (each element weighted by x^2), as used for model files.
void quant_iq4_quantize_block(int super_block, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                              uint8_t *scales_l) {
    enum { BLOCK = 32, NTRY = 7 };
    const int8_t *values = quant_kvalues_iq4nl;
    const int nsub = super_block / BLOCK;
    uint8_t L[QK_K];
    float scales[QK_K / BLOCK] = {0};
    float weight[BLOCK];
    ST_ASSERT(super_block % BLOCK == 0 && super_block <= QK_K);

    memset(q4, 0, (size_t)super_block / 2);
    *dh = st_f32_to_fp16(0.0f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = x + ib * BLOCK;
        uint8_t *Lb = L + ib * BLOCK;
        for (int j = 0; j < BLOCK; j++) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < BLOCK; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < 1e-15f) { // all zero
            scales[ib] = 0;
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < BLOCK; j++) {
            const float al = id * xb[j];
            const int l = best_index_int8(16, values, al);
            Lb[j] = (uint8_t)l;
            const float q = values[l];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
        float best = d * sumqx;
        for (int itry = -NTRY; itry <= NTRY; itry++) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < BLOCK; j++) {
                const float al = id * xb[j];
                const int l = best_index_int8(16, values, al);
                const float q = values[l];
                const float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    if (nsub > 1) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = st_f32_to_fp16(d);
        const float id = d != 0.0f ? 1 / d : 0.0f;
        for (int ib = 0; ib < nsub; ib++) {
            int l = quant_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * (float)l;
            const float idl = dl != 0.0f ? 1 / dl : 0.0f;
            uint8_t *Lb = L + ib * BLOCK;
            const float *xb = x + ib * BLOCK;
            for (int j = 0; j < BLOCK; j++) Lb[j] = (uint8_t)best_index_int8(16, values, idl * xb[j]);
            l += 32;
            const uint8_t l_l = (uint8_t)(l & 0xF), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                scales_l[ib / 2] = l_l;
            else
                scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            *scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        *dh = st_f32_to_fp16(scales[0]);
        const float id = scales[0] != 0.0f ? 1 / scales[0] : 0.0f;
        for (int j = 0; j < super_block; j++) L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
    }
    for (int i = 0; i < super_block / 32; i++)
        for (int j = 0; j < 16; j++) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

void quant_quantize_row_iq4_nl(const float *src, void *dst, int64_t n) {
    struct block_iq4_nl *b = dst;
    for (int64_t i = 0; i < n / QK4_NL; i++)
        quant_iq4_quantize_block(QK4_NL, src + i * QK4_NL, &b[i].d, b[i].qs, NULL, NULL);
}

// --- the table ------------------------------------------------------------------------------

#define FLOAT_TYPE(T, NAME, SIZE, lower)                                                                     \
    [T] = {NAME,                                                                                             \
           1,                                                                                                \
           SIZE,                                                                                             \
           true,                                                                                             \
           quant_dequantize_row_##lower,                                                                     \
           quant_quantize_row_##lower,                                                                       \
           GGML_TYPE_F32,                                                                                    \
           quant_vec_dot_##lower##_f32,                                                                      \
           quant_vec_dot_##lower##_f32_scalar,                                                               \
           NULL}
#define WEIGHT_TYPE(T, NAME, BLOCK, SIZE, lower, QUANT, VT, vt)                                              \
    [T] = {NAME,                                                                                             \
           BLOCK,                                                                                            \
           SIZE,                                                                                             \
           true,                                                                                             \
           quant_dequantize_row_##lower,                                                                     \
           QUANT,                                                                                            \
           VT,                                                                                               \
           quant_vec_dot_##lower##_##vt,                                                                     \
           quant_vec_dot_##lower##_##vt##_scalar,                                                            \
           NULL}
// A type Strata only knows the size of; its vec_dot_type is itself (no dot product).
#define KNOWN_TYPE(T, NAME, BLOCK, SIZE) [T] = {NAME, BLOCK, SIZE, false, NULL, NULL, T, NULL, NULL, NULL}

static const struct quant_traits quant_table[GGML_TYPE_COUNT] = {
    FLOAT_TYPE(GGML_TYPE_F32, "F32", 4, f32),
    FLOAT_TYPE(GGML_TYPE_F16, "F16", 2, f16),
    FLOAT_TYPE(GGML_TYPE_BF16, "BF16", 2, bf16),
    WEIGHT_TYPE(GGML_TYPE_Q4_0, "Q4_0", 32, 18, q4_0, quant_quantize_row_q4_0, GGML_TYPE_Q8_0, q8_0),
    WEIGHT_TYPE(GGML_TYPE_Q4_1, "Q4_1", 32, 20, q4_1, quant_quantize_row_q4_1, GGML_TYPE_Q8_1, q8_1),
    WEIGHT_TYPE(GGML_TYPE_Q5_0, "Q5_0", 32, 22, q5_0, quant_quantize_row_q5_0, GGML_TYPE_Q8_0, q8_0),
    WEIGHT_TYPE(GGML_TYPE_Q5_1, "Q5_1", 32, 24, q5_1, quant_quantize_row_q5_1, GGML_TYPE_Q8_1, q8_1),
    [GGML_TYPE_Q8_0] = {"Q8_0", 32, 34, true, quant_dequantize_row_q8_0, quant_quantize_row_q8_0,
                        GGML_TYPE_Q8_0, quant_vec_dot_q8_0_q8_0, quant_vec_dot_q8_0_q8_0_scalar,
                        quant_from_float_q8_0},
    [GGML_TYPE_Q8_1] = {"Q8_1", 32, 36, true, quant_dequantize_row_q8_1, quant_quantize_row_q8_1,
                        GGML_TYPE_Q8_1, NULL, NULL, quant_from_float_q8_1},
    WEIGHT_TYPE(GGML_TYPE_Q2_K, "Q2_K", 256, 84, q2_K, NULL, GGML_TYPE_Q8_K, q8_K),
    WEIGHT_TYPE(GGML_TYPE_Q3_K, "Q3_K", 256, 110, q3_K, NULL, GGML_TYPE_Q8_K, q8_K),
    WEIGHT_TYPE(GGML_TYPE_Q4_K, "Q4_K", 256, 144, q4_K, NULL, GGML_TYPE_Q8_K, q8_K),
    WEIGHT_TYPE(GGML_TYPE_Q5_K, "Q5_K", 256, 176, q5_K, NULL, GGML_TYPE_Q8_K, q8_K),
    WEIGHT_TYPE(GGML_TYPE_Q6_K, "Q6_K", 256, 210, q6_K, NULL, GGML_TYPE_Q8_K, q8_K),
    [GGML_TYPE_Q8_K] = {"Q8_K", 256, 292, true, quant_dequantize_row_q8_K, quant_quantize_row_q8_K,
                        GGML_TYPE_Q8_K, NULL, NULL, NULL},
    KNOWN_TYPE(GGML_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66),
    KNOWN_TYPE(GGML_TYPE_IQ2_XS, "IQ2_XS", 256, 74),
    KNOWN_TYPE(GGML_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98),
    KNOWN_TYPE(GGML_TYPE_IQ1_S, "IQ1_S", 256, 50),
    WEIGHT_TYPE(GGML_TYPE_IQ4_NL, "IQ4_NL", 32, 18, iq4_nl, quant_quantize_row_iq4_nl, GGML_TYPE_Q8_0, q8_0),
    KNOWN_TYPE(GGML_TYPE_IQ3_S, "IQ3_S", 256, 110),
    KNOWN_TYPE(GGML_TYPE_IQ2_S, "IQ2_S", 256, 82),
    WEIGHT_TYPE(GGML_TYPE_IQ4_XS, "IQ4_XS", 256, 136, iq4_xs, quant_quantize_row_iq4_xs, GGML_TYPE_Q8_K,
                q8_K),
    KNOWN_TYPE(GGML_TYPE_I8, "I8", 1, 1),
    KNOWN_TYPE(GGML_TYPE_I16, "I16", 1, 2),
    KNOWN_TYPE(GGML_TYPE_I32, "I32", 1, 4),
    KNOWN_TYPE(GGML_TYPE_I64, "I64", 1, 8),
    KNOWN_TYPE(GGML_TYPE_F64, "F64", 1, 8),
    KNOWN_TYPE(GGML_TYPE_IQ1_M, "IQ1_M", 256, 56),
    KNOWN_TYPE(GGML_TYPE_TQ1_0, "TQ1_0", 256, 54),
    KNOWN_TYPE(GGML_TYPE_TQ2_0, "TQ2_0", 256, 66),
    KNOWN_TYPE(GGML_TYPE_MXFP4, "MXFP4", 32, 17),
};

const struct quant_traits *quant_get(enum ggml_type t) {
    if ((int)t < 0 || (int)t >= GGML_TYPE_COUNT || !quant_table[t].name) return NULL;
    return &quant_table[t];
}

quant_quantize_fn quant_from_float(enum ggml_type t) {
    const struct quant_traits *qt = quant_get(t);
    if (!qt) return NULL;
    return qt->from_float ? qt->from_float : qt->quantize_row;
}

const char *quant_name(enum ggml_type t) {
    const struct quant_traits *q = quant_get(t);
    return q ? q->name : "unknown";
}

size_t quant_row_size(enum ggml_type t, int64_t n) {
    const struct quant_traits *q = quant_get(t);
    if (!q || n < 0 || n % q->block_size) return 0;
    const uint64_t blocks = (uint64_t)(n / q->block_size);
    if (blocks > SIZE_MAX / q->type_size) return 0; // the size does not fit: no such row
    return (size_t)blocks * q->type_size;
}
