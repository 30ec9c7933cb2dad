// vec_dot_simd.h: AVX2 helpers shared by vec_dot.c and vec_dot_k.c (x86 builds
// with -mavx2 / -march=native). Private to those two files.
#ifndef STRATA_VEC_DOT_SIMD_H
#define STRATA_VEC_DOT_SIMD_H

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VEC_DOT_AVX2 1

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

// Half -> float in one instruction; equal to st_fp16_to_f32 for every non-NaN input.
static inline float simd_fp16(uint16_t h) { return _cvtsh_ss(h); }

static inline float simd_hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// Sums of 4 adjacent products of unsigned bytes ax and signed bytes sy, in 8 int32
// lanes. Exact when each pair ax[2k]*sy[2k] + ax[2k+1]*sy[2k+1] fits int16 (the
// AVX2 form saturates there; VNNI does not).
static inline __m256i simd_dot_us8(__m256i ax, __m256i sy) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
#endif
}

// The same for signed x and y: |x| moves the sign onto y. Exact for y in [-127, 127]
// (x = -128 is fine: its |x| = 128 reads as unsigned).
static inline __m256i simd_dot_s8(__m256i x, __m256i y) {
    return simd_dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// 32 nibbles -> 32 bytes in [0, 15]: the low nibbles of the 16 bytes first, then the high ones.
static inline __m256i simd_nibbles(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// 32 bits (little endian) -> 32 bytes, 0xFF where the bit is set, else 0.
static inline __m256i simd_bits_to_bytes(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, sizeof x);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

#endif
#endif
