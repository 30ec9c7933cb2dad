// vec_dot.c: the fast dot products of float rows and of the 32-element block types
// (the CPU decode hot path). With AVX2 (+FMA, F16C) each block's 32 products are
// summed in integers with maddubs/madd (or one VNNI dpbusd when AVX-512 VNNI is
// built), then scaled and accumulated in float lanes; elsewhere each function is
// its scalar twin from vec_dot_scalar.c. The integer sums equal the twin's; only
// the float accumulation order differs. tests/test_quant.c checks both against a
// double-precision reference.
#include "format/quant_impl.h"
#include "vec_dot_simd.h"

#ifdef VEC_DOT_AVX2

// --- float weights . float activations ---------------------------------------------

// 32 products per iteration in 4 independent accumulators; the tail in scalar.
float quant_vec_dot_f32_f32(int64_t n, const void *w, const void *act) {
    const float *x = w, *y = act;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
    float sum = simd_hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    return sum;
}

float quant_vec_dot_f16_f32(int64_t n, const void *w, const void *act) {
    const uint16_t *x = w;
    const float *y = act;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * k)));
            acc[k] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y + i + 8 * k), acc[k]);
        }
    float sum = simd_hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += simd_fp16(x[i]) * y[i];
    return sum;
}

float quant_vec_dot_bf16_f32(int64_t n, const void *w, const void *act) {
    const uint16_t *x = w;
    const float *y = act;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i + 8 * k)));
            const __m256 xv = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
            acc[k] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y + i + 8 * k), acc[k]);
        }
    float sum = simd_hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) {
        const uint32_t u = (uint32_t)x[i] << 16;
        float xf;
        memcpy(&xf, &u, sizeof xf);
        sum += xf * y[i];
    }
    return sum;
}

// --- 32-element blocks -------------------------------------------------------------------
// Each loop handles two blocks per iteration into two accumulators (to hide the
// FMA latency) and a last odd block.

// The signed quants of Q4_0 block b: nibble - 8, in [-8, 7].
static inline __m256i q4_0_quants(const struct block_q4_0 *b) {
    return _mm256_sub_epi8(simd_nibbles(b->qs), _mm256_set1_epi8(8));
}

float quant_vec_dot_q4_0_q8_0(int64_t n, const void *w, const void *act) {
    const struct block_q4_0 *x = w;
    const struct block_q8_0 *y = act;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const __m256i p0 = simd_dot_s8(q4_0_quants(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 =
            simd_dot_s8(q4_0_quants(&x[ib + 1]), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        const float d0 = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        const float d1 = simd_fp16(x[ib + 1].d) * simd_fp16(y[ib + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p = simd_dot_s8(q4_0_quants(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const float d = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    return simd_hsum_ps(_mm256_add_ps(acc0, acc1));
}

float quant_vec_dot_q4_1_q8_1(int64_t n, const void *w, const void *act) {
    const struct block_q4_1 *x = w;
    const struct block_q8_1 *y = act;
    const int64_t nb = n / QK8_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float summs = 0;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const __m256i p0 =
            simd_dot_us8(simd_nibbles(x[ib].qs), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 =
            simd_dot_us8(simd_nibbles(x[ib + 1].qs), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        const float d0 = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        const float d1 = simd_fp16(x[ib + 1].d) * simd_fp16(y[ib + 1].d);
        summs += simd_fp16(x[ib].m) * simd_fp16(y[ib].s) + simd_fp16(x[ib + 1].m) * simd_fp16(y[ib + 1].s);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p = simd_dot_us8(simd_nibbles(x[ib].qs), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const float d = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        summs += simd_fp16(x[ib].m) * simd_fp16(y[ib].s);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    return simd_hsum_ps(_mm256_add_ps(acc0, acc1)) + summs;
}

// The signed quants of Q5_0 block b, q - 16 in [-16, 15]: bit 4 clear means the
// value is nibble - 16, i.e. the nibble with 0xF0 set as a signed byte.
static inline __m256i q5_0_quants(const struct block_q5_0 *b) {
    const __m256i hi = _mm256_andnot_si256(simd_bits_to_bytes(b->qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(simd_nibbles(b->qs), hi);
}

float quant_vec_dot_q5_0_q8_0(int64_t n, const void *w, const void *act) {
    const struct block_q5_0 *x = w;
    const struct block_q8_0 *y = act;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const __m256i p0 = simd_dot_s8(q5_0_quants(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 =
            simd_dot_s8(q5_0_quants(&x[ib + 1]), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        const float d0 = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        const float d1 = simd_fp16(x[ib + 1].d) * simd_fp16(y[ib + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p = simd_dot_s8(q5_0_quants(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const float d = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    return simd_hsum_ps(_mm256_add_ps(acc0, acc1));
}

// The unsigned quants of Q5_1 block b, in [0, 31].
static inline __m256i q5_1_quants(const struct block_q5_1 *b) {
    const __m256i hi = _mm256_and_si256(simd_bits_to_bytes(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(simd_nibbles(b->qs), hi);
}

float quant_vec_dot_q5_1_q8_1(int64_t n, const void *w, const void *act) {
    const struct block_q5_1 *x = w;
    const struct block_q8_1 *y = act;
    const int64_t nb = n / QK8_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float summs = 0;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const __m256i p0 = simd_dot_us8(q5_1_quants(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 =
            simd_dot_us8(q5_1_quants(&x[ib + 1]), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        const float d0 = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        const float d1 = simd_fp16(x[ib + 1].d) * simd_fp16(y[ib + 1].d);
        summs += simd_fp16(x[ib].m) * simd_fp16(y[ib].s) + simd_fp16(x[ib + 1].m) * simd_fp16(y[ib + 1].s);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p = simd_dot_us8(q5_1_quants(&x[ib]), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const float d = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        summs += simd_fp16(x[ib].m) * simd_fp16(y[ib].s);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    return simd_hsum_ps(_mm256_add_ps(acc0, acc1)) + summs;
}

float quant_vec_dot_q8_0_q8_0(int64_t n, const void *w, const void *act) {
    const struct block_q8_0 *x = w;
    const struct block_q8_0 *y = act;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const __m256i p0 = simd_dot_s8(_mm256_loadu_si256((const __m256i *)x[ib].qs),
                                       _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 = simd_dot_s8(_mm256_loadu_si256((const __m256i *)x[ib + 1].qs),
                                       _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        const float d0 = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        const float d1 = simd_fp16(x[ib + 1].d) * simd_fp16(y[ib + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p = simd_dot_s8(_mm256_loadu_si256((const __m256i *)x[ib].qs),
                                      _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const float d = simd_fp16(x[ib].d) * simd_fp16(y[ib].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    return simd_hsum_ps(_mm256_add_ps(acc0, acc1));
}

// The levels of IQ4_NL block b as signed bytes (a 16-entry byte shuffle per nibble).
static inline __m256i iq4_nl_levels(const struct block_iq4_nl *b, __m128i table) {
    const __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(t, m4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(t, 4), m4));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

float quant_vec_dot_iq4_nl_q8_0(int64_t n, const void *w, const void *act) {
    const struct block_iq4_nl *x = w;
    const struct block_q8_0 *y = act;
    const int64_t nb = n / QK4_NL;
    const __m128i table = _mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const __m256i p0 =
            simd_dot_s8(iq4_nl_levels(&x[ib], table), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const __m256i p1 =
            simd_dot_s8(iq4_nl_levels(&x[ib + 1], table), _mm256_loadu_si256((const __m256i *)y[ib + 1].qs));
        const float d0 = simd_fp16(y[ib].d) * simd_fp16(x[ib].d);
        const float d1 = simd_fp16(y[ib + 1].d) * simd_fp16(x[ib + 1].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(p1), acc1);
    }
    if (ib < nb) {
        const __m256i p =
            simd_dot_s8(iq4_nl_levels(&x[ib], table), _mm256_loadu_si256((const __m256i *)y[ib].qs));
        const float d = simd_fp16(y[ib].d) * simd_fp16(x[ib].d);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc0);
    }
    return simd_hsum_ps(_mm256_add_ps(acc0, acc1));
}

#else // no AVX2: the fast path is the scalar twin

float quant_vec_dot_f32_f32(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_f32_f32_scalar(n, w, act);
}
float quant_vec_dot_f16_f32(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_f16_f32_scalar(n, w, act);
}
float quant_vec_dot_bf16_f32(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_bf16_f32_scalar(n, w, act);
}
float quant_vec_dot_q4_0_q8_0(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q4_0_q8_0_scalar(n, w, act);
}
float quant_vec_dot_q4_1_q8_1(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q4_1_q8_1_scalar(n, w, act);
}
float quant_vec_dot_q5_0_q8_0(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q5_0_q8_0_scalar(n, w, act);
}
float quant_vec_dot_q5_1_q8_1(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q5_1_q8_1_scalar(n, w, act);
}
float quant_vec_dot_q8_0_q8_0(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q8_0_q8_0_scalar(n, w, act);
}
float quant_vec_dot_iq4_nl_q8_0(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_iq4_nl_q8_0_scalar(n, w, act);
}

#endif
