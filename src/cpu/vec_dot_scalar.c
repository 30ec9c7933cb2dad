// vec_dot_scalar.c: the plain C dot products, twins of the SIMD forms in
// vec_dot.c / vec_dot_k.c and the fallback where those are not built.
//
// Each block's products are summed in integers exactly as ggml's scalar code does
// (the SIMD forms compute the same integers); only the float combination of the
// per-block sums with their scales may round in a different order. Float rows
// (F32/F16/BF16 weights) accumulate in double.
//
// Weight quants are first unpacked to signed bytes and then dotted by dot_i8, as
// ggml's generic code does. Besides vectorizing well, this keeps gcc 12 off a
// miscompilation: with AVX-512 VNNI it turns sum += (unsigned-byte expression - k)
// * int8 into vpdpbusd, reading negative values as unsigned (test_quant caught
// it on Q3_K); int8 operands on both sides are compiled correctly.
#include "format/quant_impl.h"
#include "util.h"

// Sum of a[i] * b[i] over n signed bytes.
static inline int dot_i8(const int8_t *a, const int8_t *b, int n) {
    int sum = 0;
    for (int i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

// --- float weights . float activations ---------------------------------------------

float quant_vec_dot_f32_f32_scalar(int64_t n, const void *w, const void *act) {
    const float *x = w, *y = act;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)y[i];
    return (float)sum;
}

float quant_vec_dot_f16_f32_scalar(int64_t n, const void *w, const void *act) {
    const uint16_t *x = w;
    const float *y = act;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)st_fp16_to_f32(x[i]) * (double)y[i];
    return (float)sum;
}

float quant_vec_dot_bf16_f32_scalar(int64_t n, const void *w, const void *act) {
    const uint16_t *x = w;
    const float *y = act;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)st_bf16_to_f32(x[i]) * (double)y[i];
    return (float)sum;
}

// --- 32-element blocks . Q8_0 / Q8_1 ------------------------------------------------------

float quant_vec_dot_q4_0_q8_0_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q4_0 *x = w;
    const struct block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        int8_t a[QK8_0];
        for (int j = 0; j < QK8_0 / 2; j++) {
            a[j] = (int8_t)((x[ib].qs[j] & 0x0F) - 8);
            a[j + QK8_0 / 2] = (int8_t)((x[ib].qs[j] >> 4) - 8);
        }
        const int sumi = dot_i8(a, y[ib].qs, QK8_0);
        sumf += (float)sumi * (st_fp16_to_f32(x[ib].d) * st_fp16_to_f32(y[ib].d));
    }
    return sumf;
}

float quant_vec_dot_q4_1_q8_1_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q4_1 *x = w;
    const struct block_q8_1 *y = act;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_1; ib++) {
        int8_t a[QK8_1];
        for (int j = 0; j < QK8_1 / 2; j++) {
            a[j] = (int8_t)(x[ib].qs[j] & 0x0F);
            a[j + QK8_1 / 2] = (int8_t)(x[ib].qs[j] >> 4);
        }
        const int sumi = dot_i8(a, y[ib].qs, QK8_1);
        // the mins: m * sum(a) = m * s, with s the activation block's stored d * sum(q)
        sumf += (st_fp16_to_f32(x[ib].d) * st_fp16_to_f32(y[ib].d)) * (float)sumi +
                st_fp16_to_f32(x[ib].m) * st_fp16_to_f32(y[ib].s);
    }
    return sumf;
}

static inline uint32_t qh_word(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

float quant_vec_dot_q5_0_q8_0_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q5_0 *x = w;
    const struct block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        const uint32_t qh = qh_word(x[ib].qh);
        int8_t a[QK8_0];
        for (int j = 0; j < QK8_0 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10);
            const int h1 = (int)((qh >> (j + 12)) & 0x10);
            a[j] = (int8_t)(((x[ib].qs[j] & 0x0F) | h0) - 16);
            a[j + QK8_0 / 2] = (int8_t)(((x[ib].qs[j] >> 4) | h1) - 16);
        }
        const int sumi = dot_i8(a, y[ib].qs, QK8_0);
        sumf += (st_fp16_to_f32(x[ib].d) * st_fp16_to_f32(y[ib].d)) * (float)sumi;
    }
    return sumf;
}

float quant_vec_dot_q5_1_q8_1_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q5_1 *x = w;
    const struct block_q8_1 *y = act;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_1; ib++) {
        const uint32_t qh = qh_word(x[ib].qh);
        int8_t a[QK8_1];
        for (int j = 0; j < QK8_1 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4 & 0x10);
            const int h1 = (int)((qh >> (j + 12)) & 0x10);
            a[j] = (int8_t)((x[ib].qs[j] & 0x0F) | h0);
            a[j + QK8_1 / 2] = (int8_t)((x[ib].qs[j] >> 4) | h1);
        }
        const int sumi = dot_i8(a, y[ib].qs, QK8_1);
        sumf += (st_fp16_to_f32(x[ib].d) * st_fp16_to_f32(y[ib].d)) * (float)sumi +
                st_fp16_to_f32(x[ib].m) * st_fp16_to_f32(y[ib].s);
    }
    return sumf;
}

float quant_vec_dot_q8_0_q8_0_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q8_0 *x = w;
    const struct block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ib++) {
        const int sumi = dot_i8(x[ib].qs, y[ib].qs, QK8_0);
        sumf += (float)sumi * (st_fp16_to_f32(x[ib].d) * st_fp16_to_f32(y[ib].d));
    }
    return sumf;
}

float quant_vec_dot_iq4_nl_q8_0_scalar(int64_t n, const void *w, const void *act) {
    const struct block_iq4_nl *x = w;
    const struct block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK4_NL; ib++) {
        const float d = st_fp16_to_f32(y[ib].d) * st_fp16_to_f32(x[ib].d);
        int8_t a[QK4_NL];
        for (int j = 0; j < QK4_NL / 2; j++) {
            a[j] = quant_kvalues_iq4nl[x[ib].qs[j] & 0xF];
            a[j + QK4_NL / 2] = quant_kvalues_iq4nl[x[ib].qs[j] >> 4];
        }
        const int sumi = dot_i8(a, y[ib].qs, QK4_NL);
        sumf += d * (float)sumi;
    }
    return sumf;
}

// --- 256-element super-blocks . Q8_K ----------------------------------------------------

float quant_vec_dot_q2_K_q8_K_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q2_K *x = w;
    const struct block_q8_K *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q2 = x[i].qs, *sc = x[i].scales;
        const int8_t *q8 = y[i].qs;
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (sc[j] >> 4);
        int8_t a[QK_K];
        for (int half = 0; half < 2; half++, q2 += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int l = 0; l < 32; l++) a[128 * half + 16 * shift + l] = (int8_t)((q2[l] >> shift) & 3);
        int isum = 0;
        for (int j = 0; j < 16; j++) isum += (sc[j] & 0xF) * dot_i8(a + 16 * j, q8 + 16 * j, 16);
        const float dall = y[i].d * st_fp16_to_f32(x[i].d);
        const float dmin = y[i].d * st_fp16_to_f32(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

float quant_vec_dot_q3_K_q8_K_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q3_K *x = w;
    const struct block_q8_K *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t scales[16];
        quant_q3k_scales(x[i].scales, scales);
        const uint8_t *q3 = x[i].qs, *hm = x[i].hmask;
        int8_t a[QK_K];
        int bit = 0;
        for (int half = 0; half < 2; half++, q3 += 32)
            for (int shift = 0; shift < 8; shift += 2, bit++)
                for (int l = 0; l < 32; l++)
                    a[32 * bit + l] = (int8_t)(((q3[l] >> shift) & 3) - ((hm[l] >> bit) & 1 ? 0 : 4));
        int isum = 0;
        for (int j = 0; j < 16; j++) isum += scales[j] * dot_i8(a + 16 * j, y[i].qs + 16 * j, 16);
        sumf += (st_fp16_to_f32(x[i].d) * y[i].d) * (float)isum;
    }
    return sumf;
}

// The 8 scales and 8 mins of a q4_K / q5_K block.
static void k4_scales(const uint8_t packed[K_SCALE_SIZE], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) quant_k4_scale_min(j, packed, &sc[j], &mn[j]);
}

float quant_vec_dot_q4_K_q8_K_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q4_K *x = w;
    const struct block_q8_K *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * mn[j / 2];
        const uint8_t *q4 = x[i].qs;
        int8_t a[QK_K];
        for (int j = 0; j < 4; j++, q4 += 32)
            for (int l = 0; l < 32; l++) {
                a[64 * j + l] = (int8_t)(q4[l] & 0xF);
                a[64 * j + 32 + l] = (int8_t)(q4[l] >> 4);
            }
        int isum = 0;
        for (int j = 0; j < 8; j++) isum += sc[j] * dot_i8(a + 32 * j, y[i].qs + 32 * j, 32);
        const float d = st_fp16_to_f32(x[i].d) * y[i].d;
        const float dmin = st_fp16_to_f32(x[i].dmin) * y[i].d;
        sumf += d * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

float quant_vec_dot_q5_K_q8_K_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q5_K *x = w;
    const struct block_q8_K *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_scales(x[i].scales, sc, mn);
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * mn[j / 2];
        const uint8_t *q5 = x[i].qs, *qh = x[i].qh;
        int8_t a[QK_K];
        for (int j = 0; j < 4; j++, q5 += 32)
            for (int l = 0; l < 32; l++) {
                a[64 * j + l] = (int8_t)((q5[l] & 0xF) | ((qh[l] >> (2 * j)) & 1) << 4);
                a[64 * j + 32 + l] = (int8_t)((q5[l] >> 4) | ((qh[l] >> (2 * j + 1)) & 1) << 4);
            }
        int isum = 0;
        for (int j = 0; j < 8; j++) isum += sc[j] * dot_i8(a + 32 * j, y[i].qs + 32 * j, 32);
        const float d = st_fp16_to_f32(x[i].d) * y[i].d;
        const float dmin = st_fp16_to_f32(x[i].dmin) * y[i].d;
        sumf += d * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

float quant_vec_dot_q6_K_q8_K_scalar(int64_t n, const void *w, const void *act) {
    const struct block_q6_K *x = w;
    const struct block_q8_K *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        int8_t a[QK_K];
        // each half of 128: 4 rows of 32 (low/high nibbles of ql[0..31] and ql[32..63],
        // 2 bits each of qh[0..31]), each row two sub-blocks of 16 with their own scale
        for (int half = 0; half < 2; half++, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                int8_t *o = a + 128 * half + l;
                o[0] = (int8_t)(((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32);
                o[32] = (int8_t)(((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32);
                o[64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
                o[96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
            }
        int isum = 0;
        for (int j = 0; j < 16; j++) isum += x[i].scales[j] * dot_i8(a + 16 * j, y[i].qs + 16 * j, 16);
        sumf += (st_fp16_to_f32(x[i].d) * y[i].d) * (float)isum;
    }
    return sumf;
}

float quant_vec_dot_iq4_xs_q8_K_scalar(int64_t n, const void *w, const void *act) {
    const struct block_iq4_xs *x = w;
    const struct block_q8_K *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d4d8 = st_fp16_to_f32(x[i].d) * y[i].d;
        const uint8_t *qs = x[i].qs;
        const int8_t *q8 = y[i].qs;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, q8 += 32) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | ((x[i].scales_h >> 2 * ib) & 3)
                                                                                 << 4;
            int8_t a[32];
            for (int j = 0; j < 16; j++) {
                a[j] = quant_kvalues_iq4nl[qs[j] & 0xF];
                a[j + 16] = quant_kvalues_iq4nl[qs[j] >> 4];
            }
            const int sumi = dot_i8(a, q8, 32);
            sumf += d4d8 * (float)(ls - 32) * (float)sumi;
        }
    }
    return sumf;
}
