// vec_ops.c: see vec_ops.h.
#include "cpu/vec_ops.h"

#include <math.h>
#include <stddef.h>

#include "cpu/threadpool.h"

#define GLU_CHUNK 16384 // elements per task when threads share a glu

// GELU's tanh form 0.5·v·(1 + tanh u), u = √(2/π)(v + 0.044715v³), written as
// v / (1 + e^(−2u)): the same function without tanh's cancellation for
// negative v (e^(−2u) grows to inf there and the quotient to −0).
#define GELU_K 0.7978845608f

// Past this exponent v / (1 + e^x) is computed as v·e^−x / (1 + e^−x): e^x
// nears float's largest (it overflows at 88.72), where the quotient would be
// −0 or, with the vector exp's clamp, too large, while its value is still a
// normal float for |v| of a few units (about 1e-37 at x = 88).
#define GLU_FAR 80.0f

// v / (1 + e^x), the SiLU and GELU quotient of v with exponent x.
static float glu_quotient(float v, float x) {
    if (x <= GLU_FAR) return v / (1.0f + expf(x));
    const float t = expf(-x);
    return v * t / (1.0f + t);
}

static void glu_plain(enum glu_act act, const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = g[i];
        const float x = act == GLU_SILU ? -v : -2.0f * (GELU_K * (v + 0.044715f * v * v * v));
        out[i] = glu_quotient(v, x) * u[i];
    }
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

// exp16 clamps its argument at 88.7, so lanes past GLU_FAR take the quotient
// as g·t / (1 + t), t = e^−arg as the square of exp16(−arg/2) (exact in
// range down to e^−174; the values there are subnormal or 0, as the float
// result of the exact quotient is).
static void glu_512(enum glu_act act, const float *gp, const float *up, float *out, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gp + i), u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 arg; // the exponent: −g for SiLU, −2·√(2/π)(g + 0.044715g³) for GELU
        if (act == GLU_SILU) {
            arg = _mm512_sub_ps(_mm512_setzero_ps(), g);
        } else {
            const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
            arg = _mm512_mul_ps(_mm512_set1_ps(-2.0f * GELU_K),
                                _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), g3, g));
        }
        __m512 q = _mm512_div_ps(g, _mm512_add_ps(one, exp16(arg)));
        const __mmask16 far = _mm512_mask_cmp_ps_mask(m, arg, _mm512_set1_ps(GLU_FAR), _CMP_GT_OQ);
        if (far) {
            const __m512 h = exp16(_mm512_mul_ps(arg, _mm512_set1_ps(-0.5f)));
            const __m512 t = _mm512_mul_ps(h, h);
            q = _mm512_mask_div_ps(q, far, _mm512_mul_ps(g, t), _mm512_add_ps(one, t));
        }
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(q, u));
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
static void glu_512(enum glu_act act, const float *g, const float *u, float *out, int64_t n) {
    glu_plain(act, g, u, out, n);
}
static void rms_norm_512(const float *g, const float *x, float *out, int n, int dim, float eps) {
    rms_norm_plain(g, x, out, n, dim, eps);
}
#endif

struct glu_job {
    enum glu_act act;
    const float *g, *u;
    float *out;
    int dim, stride, per_row; // per_row: tasks per row
    bool avx512;
};

static void glu_task(void *arg, int task, int ith) {
    (void)ith;
    const struct glu_job *j = arg;
    const int row = task / j->per_row, c0 = task % j->per_row * GLU_CHUNK;
    const int len = j->dim - c0 < GLU_CHUNK ? j->dim - c0 : GLU_CHUNK;
    const size_t in = (size_t)row * j->stride + c0, o = (size_t)row * j->dim + c0;
    if (j->avx512)
        glu_512(j->act, j->g + in, j->u + in, j->out + o, len);
    else
        glu_plain(j->act, j->g + in, j->u + in, j->out + o, len);
}

void vec_glu(struct threadpool *tp, bool avx512, enum glu_act act, const float *g, const float *u, float *out,
             int n, int dim, int stride) {
    struct glu_job j = {act, g, u, out, dim, stride, (dim + GLU_CHUNK - 1) / GLU_CHUNK, avx512};
    const int64_t tasks = (int64_t)n * j.per_row;
    if ((int64_t)n * dim <= GLU_CHUNK) // too little to share out
        for (int t = 0; t < tasks; t++) glu_task(&j, t, 0);
    else
        threadpool_run_chunks(tp, glu_task, &j, (int)tasks);
}

void vec_rms_norm(bool avx512, const float *g, const float *x, float *out, int n, int dim, float eps) {
    if (avx512)
        rms_norm_512(g, x, out, n, dim, eps);
    else
        rms_norm_plain(g, x, out, n, dim, eps);
}
