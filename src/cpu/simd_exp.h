// simd_exp.h: e^x on 16 float lanes (AVX-512F). Include it after the file's
// AVX-512 target pragma: the function takes the includer's target.
#ifndef STRATA_SIMD_EXP_H
#define STRATA_SIMD_EXP_H

#include <immintrin.h>

// e^x for 16 lanes, within 2 ulp: x = n·ln2 + r (|r| ≤ ln2/2), e^r by Cephes'
// degree-7 polynomial, times 2^n by scalef. x is clamped to [−87.3, 88.7], so
// the result is always a normal float: below e^−87.3 ≈ 1.2e−38 it stays there
// (a subnormal result would cost every later multiply a microcode assist, some
// hundred cycles), above 88.7 it stays below the largest float (no inf). Lanes
// that must give exactly 0 (masked keys) are zeroed by the caller.
static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

#endif
