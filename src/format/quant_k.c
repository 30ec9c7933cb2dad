// quant_k.c: row functions of the 256-element super-block types: the K-quants
// (Q2_K..Q6_K dequantize, Q8_K both ways) and IQ4_XS.
//
// As in quant.c, every value is computed with ggml's reference float operations in
// the same order (bit-exact with ggml and the gguf Python package), with no
// fused multiply-add contraction.
#include <math.h>
#include <string.h>

#include "format/quant_impl.h"
#include "util.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

void quant_dequantize_row_q2_K(const void *src, float *dst, int64_t n) {
    const struct block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = st_fp16_to_f32(b[i].d);
        const float min = st_fp16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        // two halves of 128: 32 bytes of qs hold 4 rows of 2-bit values (shift 0, 2, 4, 6),
        // each row 2 sub-blocks of 16 with their own scale and min
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) {
                    const uint8_t sc = b[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *dst++ = dl * (float)((q[l + 16 * k] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void quant_dequantize_row_q3_K(const void *src, float *dst, int64_t n) {
    const struct block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d_all = st_fp16_to_f32(b[i].d);
        int8_t scales[16];
        quant_q3k_scales(b[i].scales, scales);
        const uint8_t *q = b[i].qs, *hm = b[i].hmask;
        int is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d_all * (float)scales[is++];
                    for (int l = 16 * k; l < 16 * k + 16; l++)
                        *dst++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

void quant_dequantize_row_q4_K(const void *src, float *dst, int64_t n) {
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = st_fp16_to_f32(b[i].d);
        const float min = st_fp16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            quant_k4_scale_min(is, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            quant_k4_scale_min(is + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void quant_dequantize_row_q5_K(const void *src, float *dst, int64_t n) {
    const struct block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = st_fp16_to_f32(b[i].d);
        const float min = st_fp16_to_f32(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 = (uint8_t)(u1 << 2), u2 = (uint8_t)(u2 << 2)) {
            uint8_t sc, m;
            quant_k4_scale_min(is, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            quant_k4_scale_min(is + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void quant_dequantize_row_q6_K(const void *src, float *dst, int64_t n) {
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = st_fp16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int half = 0; half < 2; half++, dst += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                dst[l] = d * (float)sc[is] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void quant_dequantize_row_q8_K(const void *src, float *dst, int64_t n) {
    const struct block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
}

// ggml's quantize_row_q8_K_ref: scale -127/max with max the signed value of largest
// magnitude, round to nearest even; all-zero blocks get d = 0 (and zero sums).
void quant_quantize_row_q8_K(const float *src, void *dst, int64_t n) {
    struct block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(src[j]);
            if (ax > amax) {
                amax = ax;
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = quant_nearest_int(iscale * src[j]);
            b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += b[i].qs[16 * j + k];
            b[i].bsums[j] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}

void quant_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n) {
    const struct block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = st_fp16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int ib = 0; ib < QK_K / 32; ib++, dst += 32, qs += 16) {
            const int ls = ((b[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | ((b[i].scales_h >> 2 * ib) & 3)
                                                                                 << 4;
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)quant_kvalues_iq4nl[qs[j] & 0xF];
                dst[j + 16] = dl * (float)quant_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void quant_quantize_row_iq4_xs(const float *src, void *dst, int64_t n) {
    struct block_iq4_xs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++)
        quant_iq4_quantize_block(QK_K, src + i * QK_K, &b[i].d, b[i].qs, &b[i].scales_h, b[i].scales_l);
}
