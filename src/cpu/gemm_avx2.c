// gemm_avx2.c: the repacked matrix kernels for AVX2 (gemm_ymm.h without VNNI) and
// the AVX2 activation quantizer. Compiled for AVX2 whatever -march says; gemm.c
// calls them only when CPUID has AVX2, FMA and F16C.
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define YMM_VNNI 0
#define YMM_NAME(x) x##_avx2
#include "cpu/gemm_ymm.h"

// The same arithmetic as gemm_quantize_scalar, 8 lanes at a time: identical results.
static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

void gemm_quantize_avx2(const float *x, struct gemm_act *a, int t0, int t1) {
    const int64_t nb = a->cols / GEMM_QK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const int64_t span = gemm_act_span(a);
    float amax = 0;
    for (int t = t0; t < t1; t++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + (size_t)t * (size_t)a->cols + b * GEMM_QK;
            if (b % span == 0) { // over the blocks that share a scale (fewer at a row's end)
                const int64_t blocks = nb - b < span ? nb - b : span;
                __m256 m = _mm256_setzero_ps();
                for (int64_t k = 0; k < 4 * blocks; k++) // NaN |x| keeps m, as fmaxf
                    m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * k)), m);
                amax = hmax8(m);
            }
            __m256 xv[4];
            for (int k = 0; k < 4; k++) xv[k] = _mm256_loadu_ps(xb + 8 * k);
            const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(xv[k], id), lo), hi));
            // int32 -> int8 (in range, so the saturation does nothing); packs work per
            // 128-bit lane, the permute puts the 32 bytes back in order
            const __m256i p =
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(a->qs + (size_t)t * (size_t)a->cols + b * GEMM_QK), o);
            const int s0 = hsum8(_mm256_add_epi32(q[0], q[1])), s1 = hsum8(_mm256_add_epi32(q[2], q[3]));
            const size_t i = (size_t)t * (size_t)nb + (size_t)b;
            gemm_act_scales(a, i, amax, s0 + s1);
            if (a->qsum) a->qsum[i] = (int16_t)(s0 + s1); // |Σq| ≤ 32·127
            if (a->bias_n == 1)
                a->bias[i] = a->bias_mul * (s0 + s1);
            else if (a->bias_n == 2)
                a->bias[2 * i] = a->bias_mul * s0, a->bias[2 * i + 1] = a->bias_mul * s1;
        }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
