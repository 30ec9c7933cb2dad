// vec_ops.c: see vec_ops.h.
#include "cpu/vec_ops.h"

#include <math.h>
#include <stddef.h>

#include "cpu/threadpool.h"

#define SWIGLU_CHUNK 16384 // elements per chunk when threads share a swiglu

static void swiglu_plain(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void rms_norm_plain(const float *g, const float *x, float *out, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float acc[8] = {0};
        int j = 0;
        for (; j + 8 <= dim; j += 8)
            for (int k = 0; k < 8; k++) acc[k] += xi[j + k] * xi[j + k];
        float ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; j < dim; j++) ss += xi[j] * xi[j];
        const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
        float *oi = out + (size_t)i * dim;
        for (j = 0; j < dim; j++) oi[j] = xi[j] * scale * g[j];
    }
}

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")
#endif

#include "cpu/simd_exp.h"

static void swiglu_512(float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
    }
}

static void rms_norm_512(const float *g, const float *x, float *out, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int j = 0;
        for (; j + 32 <= dim; j += 32) {
            const __m512 v0 = _mm512_loadu_ps(xi + j), v1 = _mm512_loadu_ps(xi + j + 16);
            a0 = _mm512_fmadd_ps(v0, v0, a0);
            a1 = _mm512_fmadd_ps(v1, v1, a1);
        }
        for (; j < dim; j += 16) {
            const __mmask16 m = dim - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dim - j)) - 1);
            const __m512 v = _mm512_maskz_loadu_ps(m, xi + j);
            a0 = _mm512_fmadd_ps(v, v, a0);
        }
        const float ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        const __m512 scale = _mm512_set1_ps(1.0f / sqrtf(ss / (float)dim + eps));
        float *oi = out + (size_t)i * dim;
        for (j = 0; j < dim; j += 16) {
            const __mmask16 m = dim - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dim - j)) - 1);
            const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xi + j), scale);
            _mm512_mask_storeu_ps(oi + j, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, g + j)));
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
static void swiglu_512(float *gate, const float *up, int64_t n) { swiglu_plain(gate, up, n); }
static void rms_norm_512(const float *g, const float *x, float *out, int n, int dim, float eps) {
    rms_norm_plain(g, x, out, n, dim, eps);
}
#endif

struct swiglu_job {
    float *gate;
    const float *up;
    int64_t n;
    bool avx512;
};

static void swiglu_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    const struct swiglu_job *j = arg;
    const int64_t i0 = (int64_t)chunk * SWIGLU_CHUNK;
    const int64_t len = j->n - i0 < SWIGLU_CHUNK ? j->n - i0 : SWIGLU_CHUNK;
    if (j->avx512) swiglu_512(j->gate + i0, j->up + i0, len);
    else swiglu_plain(j->gate + i0, j->up + i0, len);
}

void vec_swiglu(struct threadpool *tp, bool avx512, float *gate, const float *up, int64_t n) {
    struct swiglu_job j = {gate, up, n, avx512};
    const int64_t chunks = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    if (chunks <= 1) swiglu_chunk(&j, 0, 0);
    else threadpool_run_chunks(tp, swiglu_chunk, &j, (int)chunks);
}

void vec_rms_norm(bool avx512, const float *g, const float *x, float *out, int n, int dim, float eps) {
    if (avx512) rms_norm_512(g, x, out, n, dim, eps);
    else rms_norm_plain(g, x, out, n, dim, eps);
}
