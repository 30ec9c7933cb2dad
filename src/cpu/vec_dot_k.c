// vec_dot_k.c: the fast dot products of the 256-element super-block types
// (Q2_K..Q6_K, IQ4_XS) with Q8_K activations. With AVX2 each 32-byte group of
// products is summed in int16 pairs (maddubs), multiplied by its sub-block scale
// and widened in one madd, and accumulated in int32 lanes per super-block; the
// min terms come from the activation's bsums. Ranges keep every int16 pair exact
// for activations in [-127, 127] (largest: Q6_K, 2 * 63 * 127). Without AVX2 each
// function is its scalar twin (vec_dot_scalar.c).
#include "format/quant_impl.h"
#include "vec_dot_simd.h"

#ifdef VEC_DOT_AVX2

// Byte shuffles that broadcast one 16-bit scale per 128-bit lane: index i picks
// scales 2i (low lane) and 2i+1 (high lane) of a vector holding 8 int16 scales
// twice.
static inline __m256i shuffle_pair(int i) {
    static const uint8_t k[4][32] = {
#define ROW(a, b, c, d)                                                                                      \
    {a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, c, d, c, d, c, d, c, d, c, d, c, d, c, d, c, d}
        ROW(0, 1, 2, 3),
        ROW(4, 5, 6, 7),
        ROW(8, 9, 10, 11),
        ROW(12, 13, 14, 15),
#undef ROW
    };
    return _mm256_loadu_si256((const __m256i *)k[i]);
}

// Broadcast of one 16-bit scale over the whole vector: index i picks scale i (0..7).
static inline __m256i shuffle_one(int i) {
    static const uint8_t k[8][32] = {
#define ROW(a, b)                                                                                            \
    {a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b}
        ROW(0, 1), ROW(2, 3), ROW(4, 5), ROW(6, 7), ROW(8, 9), ROW(10, 11), ROW(12, 13), ROW(14, 15),
#undef ROW
    };
    return _mm256_loadu_si256((const __m256i *)k[i]);
}

// Sixteen int8 scales s[0..15], widened to int16 and split into two vectors of 8,
// each repeated in both lanes.
static inline void scales_16(__m128i s8, __m256i out[2]) {
    const __m256i all = _mm256_cvtepi8_epi16(s8);
    const __m128i lo = _mm256_castsi256_si128(all), hi = _mm256_extracti128_si256(all, 1);
    out[0] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), lo, 1);
    out[1] = _mm256_inserti128_si256(_mm256_castsi128_si256(hi), hi, 1);
}

float quant_vec_dot_q2_K_q8_K(int64_t n, const void *w, const void *act) {
    const struct block_q2_K *x = w;
    const struct block_q8_K *y = act;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * simd_fp16(x[i].d);
        const float dmin = -y[i].d * simd_fp16(x[i].dmin);
        const uint8_t *q2 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        const __m128i mins_and_scales = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m128i scales8 = _mm_and_si128(mins_and_scales, m4);
        const __m128i mins8 = _mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4);
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m256i prod = _mm256_madd_epi16(_mm256_cvtepi8_epi16(mins8), bsums);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        __m256i scales[2];
        scales_16(scales8, scales);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++, q2 += 32, q8 += 128) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q2);
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(q8 + 32 * k)));
                sumi = _mm256_add_epi32(
                    sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], shuffle_pair(k)), p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return simd_hsum_ps(acc);
}

float quant_vec_dot_q3_K_q8_K(int64_t n, const void *w, const void *act) {
    const struct block_q3_K *x = w;
    const struct block_q8_K *y = act;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i mone = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * simd_fp16(x[i].d);
        const uint8_t *q3 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        // the sixteen 6-bit scales: low 4 bits in bytes 0..7 (two per byte), high 2 bits in
        // bytes 8..11 (four per byte); as quant_q3k_scales, 4 lanes at a time
        const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
        uint32_t aux[3];
        memcpy(aux, x[i].scales, 12);
        const __m128i sc128 = _mm_set_epi32((int)(((aux[1] >> 4) & kmask2) | (((aux[2] >> 6) & kmask1) << 4)),
                                            (int)(((aux[0] >> 4) & kmask2) | (((aux[2] >> 4) & kmask1) << 4)),
                                            (int)((aux[1] & kmask2) | (((aux[2] >> 2) & kmask1) << 4)),
                                            (int)((aux[0] & kmask2) | (((aux[2] >> 0) & kmask1) << 4)));
        __m256i scales[2];
        scales_16(_mm_sub_epi8(sc128, _mm_set1_epi8(32)), scales);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        int bit = 0;
        for (int j = 0; j < 2; j++, q3 += 32, q8 += 128) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q3);
            for (int k = 0; k < 4; k++, bit++) {
                // value = low 2 bits - (hmask bit clear ? 4 : 0): the two parts go through
                // maddubs separately (both unsigned) and are subtracted in int16
                const __m256i ql = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
                const __m256i qh = _mm256_slli_epi16(
                    _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, bit)), bit), 2);
                const __m256i a = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(ql, a), _mm256_maddubs_epi16(qh, a));
                sumi = _mm256_add_epi32(
                    sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], shuffle_pair(k)), p));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return simd_hsum_ps(acc);
}

// The 8 scales (low 128 bits) and 8 mins (high 128 bits) of a q4_K/q5_K block as
// int16: quant_k4_scale_min for all eight at once, on 32-bit words.
static inline __m256i k4_scales_mins(const uint8_t packed[K_SCALE_SIZE]) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[4];
    memcpy(u, packed, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t mins_lo = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = mins_lo;
    u[0] &= kmask1;
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
}

// sum_j mins[j] * (bsums[2j] + bsums[2j+1]) as 4 int32 lanes.
static inline __m128i k4_min_products(__m256i mins_and_scales, const int16_t *bsums) {
    const __m256i q8sums = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256(q8sums, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
}

float quant_vec_dot_q4_K_q8_K(int64_t n, const void *w, const void *act) {
    const struct block_q4_K *x = w;
    const struct block_q8_K *y = act;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * simd_fp16(x[i].d);
        const float dmin = -y[i].d * simd_fp16(x[i].dmin);
        const __m256i mins_and_scales = k4_scales_mins(x[i].scales);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_products(mins_and_scales, y[i].bsums)),
                             acc_m);
        const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
        const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++, q4 += 32, q8 += 64) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q4);
            const __m256i ql = _mm256_and_si256(bits, m4);
            const __m256i qh = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i pl = _mm256_maddubs_epi16(ql, _mm256_loadu_si256((const __m256i *)q8));
            const __m256i ph = _mm256_maddubs_epi16(qh, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            sumi = _mm256_add_epi32(sumi,
                                    _mm256_madd_epi16(_mm256_shuffle_epi8(scales, shuffle_one(2 * j)), pl));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(scales, shuffle_one(2 * j + 1)), ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    return simd_hsum_ps(acc) + _mm_cvtss_f32(acc_m);
}

float quant_vec_dot_q5_K_q8_K(int64_t n, const void *w, const void *act) {
    const struct block_q5_K *x = w;
    const struct block_q8_K *y = act;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i mone = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * simd_fp16(x[i].d);
        const float dmin = -y[i].d * simd_fp16(x[i].dmin);
        const __m256i mins_and_scales = k4_scales_mins(x[i].scales);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_products(mins_and_scales, y[i].bsums)),
                             acc_m);
        const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
        const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].qh);
        const uint8_t *q5 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++, q5 += 32, q8 += 64) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)q5);
            // bit 2j of qh is bit 4 of the low-nibble value, bit 2j+1 of the high one
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), mone);
            const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), mone);
            const __m256i ql = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(h0, 4));
            const __m256i qh =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), _mm256_slli_epi16(h1, 4));
            const __m256i pl = _mm256_maddubs_epi16(ql, _mm256_loadu_si256((const __m256i *)q8));
            const __m256i ph = _mm256_maddubs_epi16(qh, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            sumi = _mm256_add_epi32(sumi,
                                    _mm256_madd_epi16(_mm256_shuffle_epi8(scales, shuffle_one(2 * j)), pl));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(scales, shuffle_one(2 * j + 1)), ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    return simd_hsum_ps(acc) + _mm_cvtss_f32(acc_m);
}

float quant_vec_dot_q6_K_q8_K(int64_t n, const void *w, const void *act) {
    const struct block_q6_K *x = w;
    const struct block_q8_K *y = act;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * simd_fp16(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        __m256i scales[2];
        scales_16(_mm_loadu_si128((const __m128i *)x[i].scales), scales);
        // the -32 offset: 32 * sum_j scale[j] * bsums[j], subtracted once per super-block
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m256i offset =
            _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[i].bsums), sc16), 5);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++, ql += 64, qh += 32, q8 += 128) {
            const __m256i lo1 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i lo2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i hi = _mm256_loadu_si256((const __m256i *)qh);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(lo1, m15), _mm256_slli_epi16(_mm256_and_si256(hi, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(lo2, m15),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), m15),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo2, 4), m15),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 6), m3), 4)),
            };
            for (int k = 0; k < 4; k++) {
                const __m256i p =
                    _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(q8 + 32 * k)));
                sumi = _mm256_add_epi32(
                    sumi, _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], shuffle_pair(k)), p));
            }
        }
        sumi = _mm256_sub_epi32(sumi, offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return simd_hsum_ps(acc);
}

float quant_vec_dot_iq4_xs_q8_K(int64_t n, const void *w, const void *act) {
    const struct block_iq4_xs *x = w;
    const struct block_q8_K *y = act;
    const __m128i table = _mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        const int8_t *q8 = y[i].qs;
        unsigned sh = x[i].scales_h;
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, q8 += 32, sh >>= 2) {
            const __m128i t = _mm_loadu_si128((const __m128i *)qs);
            const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(t, m4));
            const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(t, 4), m4));
            const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
            const __m256i a = _mm256_loadu_si256((const __m256i *)q8);
            // |level| <= 127 and |a| <= 127: each maddubs pair fits int16
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(a, v));
            const int ls = (((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (int)(sh & 3) << 4) - 32;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((int16_t)ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(simd_fp16(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return simd_hsum_ps(acc);
}

#else // no AVX2: the fast path is the scalar twin

float quant_vec_dot_q2_K_q8_K(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q2_K_q8_K_scalar(n, w, act);
}
float quant_vec_dot_q3_K_q8_K(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q3_K_q8_K_scalar(n, w, act);
}
float quant_vec_dot_q4_K_q8_K(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q4_K_q8_K_scalar(n, w, act);
}
float quant_vec_dot_q5_K_q8_K(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q5_K_q8_K_scalar(n, w, act);
}
float quant_vec_dot_q6_K_q8_K(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_q6_K_q8_K_scalar(n, w, act);
}
float quant_vec_dot_iq4_xs_q8_K(int64_t n, const void *w, const void *act) {
    return quant_vec_dot_iq4_xs_q8_K_scalar(n, w, act);
}

#endif
