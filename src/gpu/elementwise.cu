// elementwise.cu: the element-wise ops, one thread per element, grid-strided:
// gated activations (SiLU or GELU's tanh form, over rows with a stride),
// add, scale, soft-cap and a per-row bias. The gated activation can also
// write its output 8-bit quantized (four elements a thread, 8 threads a block
// of 32), sparing the product that follows its own quantization pass. Checked against the reference by
// tests/test_ops.c.
#include <math.h>

#include "elementwise.h"
#include "quantize.h"

// v / (1 + e^x), the SiLU and GELU quotient of v with exponent x. Past x = 80
// e^x nears float's largest (expf overflows at 88.72 and the quotient would be
// −0) while the result is still a normal float for |v| of a few units (about
// 1e-37 at x = 88): there it is v·e^−x / (1 + e^−x), as on the CPU.
static __device__ __forceinline__ float glu_quotient(float v, float x) {
    if (x <= 80.0f) return v / (1.0f + expf(x));
    const float t = expf(-x);
    return v * t / (1.0f + t);
}

static __device__ __forceinline__ float act_silu(float v) { return glu_quotient(v, -v); }

// The tanh approximation of GELU, 0.5·v·(1 + tanh u), written as v / (1 + e^(-2u)),
// the same function: 1 + tanh u cancels for negative v, so the tanh form's
// error is absolute (half an ulp of 1 times v), and a tanhf a few ulps off
// (OpenCL allows 5; PoCL's CPU device through chipStar) put results near zero
// outside the op harness's bound.
static __device__ __forceinline__ float act_gelu(float v) {
    return glu_quotient(v, -1.5957691216f * (v + 0.044715f * v * v * v));
}

static __device__ __forceinline__ float act_of(int act, float v) {
    return act == GLU_SILU ? act_silu(v) : act_gelu(v);
}

template <int ACT>
__global__ void __launch_bounds__(GPU_BLOCK)
    glu_kernel(const float *g, const float *u, float *out, int64_t total, int dim, int stride) {
    st_launch_begin();
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * GPU_BLOCK) {
        const int64_t r = i / dim, c = i % dim, src = r * stride + c;
        const float v = g[src];
        out[i] = act_of(ACT, v) * u[src];
    }
}

// glu_kernel's values, four a thread (dim and stride multiples of 4 and 32,
// 16-byte aligned rows), stored as float and quantized.
template <int ACT>
__global__ void __launch_bounds__(GPU_BLOCK)
    glu_q8_kernel(const float *g, const float *u, float *out, int8_t *qs, float2 *ds, int64_t total4, int dim,
                  int stride) {
    st_launch_begin();
    const int64_t i4 = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    const bool live = i4 < total4;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (live) {
        const int64_t r = i4 / (dim / 4), c = (i4 % (dim / 4)) * 4, src = r * stride + c;
        const float4 gv = *(const float4 *)(g + src), uv = *(const float4 *)(u + src);
        o = make_float4(act_of(ACT, gv.x) * uv.x, act_of(ACT, gv.y) * uv.y, act_of(ACT, gv.z) * uv.z,
                        act_of(ACT, gv.w) * uv.w);
        *(float4 *)(out + i4 * 4) = o;
    }
    gpu_q8_store4(o, live, qs, ds, i4 / 8, (int)(i4 % 8));
}

__global__ void __launch_bounds__(GPU_BLOCK) add_kernel(float *x, const float *y, int64_t n) {
    st_launch_begin();
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * GPU_BLOCK)
        x[i] += y[i];
}

__global__ void __launch_bounds__(GPU_BLOCK) scale_kernel(float *x, int64_t n, float s) {
    st_launch_begin();
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * GPU_BLOCK)
        x[i] *= s;
}

__global__ void __launch_bounds__(GPU_BLOCK) softcap_kernel(float *x, int64_t n, float cap) {
    st_launch_begin();
    const float inv = 1.0f / cap;
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * GPU_BLOCK)
        x[i] = cap * tanhf(x[i] * inv);
}

__global__ void __launch_bounds__(GPU_BLOCK)
    add_bias_kernel(float *x, const float *b, int64_t total, int dim) {
    st_launch_begin();
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * GPU_BLOCK)
        x[i] += b[i % dim];
}

static unsigned ew_grid(int64_t n) {
    const int64_t g = gpu_cdiv(n, GPU_BLOCK);
    return (unsigned)(g < 65536 ? g : 65536);
}

bool gpu_glu(int act, const float *g, const float *u, float *out, int n, int dim, int stride, int8_t *qs,
             float2 *ds, gpuStream_t s) {
    const int64_t total = (int64_t)n * dim;
    if (total <= 0) return false;
    const bool q8 = qs && dim % 32 == 0 && stride % 4 == 0 && (uintptr_t)g % 16 == 0 &&
                    (uintptr_t)u % 16 == 0 && (uintptr_t)out % 16 == 0;
    if (q8) {
        const unsigned grid = (unsigned)gpu_cdiv(total / 4, GPU_BLOCK);
        if (act == GLU_SILU)
            ST_LAUNCH((glu_q8_kernel<GLU_SILU>), grid, GPU_BLOCK, 0, s, g, u, out, qs, ds, total / 4, dim,
                      stride);
        else
            ST_LAUNCH((glu_q8_kernel<GLU_GELU>), grid, GPU_BLOCK, 0, s, g, u, out, qs, ds, total / 4, dim,
                      stride);
    } else if (act == GLU_SILU) {
        ST_LAUNCH((glu_kernel<GLU_SILU>), ew_grid(total), GPU_BLOCK, 0, s, g, u, out, total, dim, stride);
    } else {
        ST_LAUNCH((glu_kernel<GLU_GELU>), ew_grid(total), GPU_BLOCK, 0, s, g, u, out, total, dim, stride);
    }
    GPU_CHECK_LAUNCH();
    return q8;
}

void gpu_add(float *x, const float *y, int64_t n, gpuStream_t s) {
    if (n <= 0) return;
    ST_LAUNCH(add_kernel, ew_grid(n), GPU_BLOCK, 0, s, x, y, n);
    GPU_CHECK_LAUNCH();
}

void gpu_scale(float *x, int64_t n, float v, gpuStream_t s) {
    if (n <= 0) return;
    ST_LAUNCH(scale_kernel, ew_grid(n), GPU_BLOCK, 0, s, x, n, v);
    GPU_CHECK_LAUNCH();
}

void gpu_softcap(float *x, int64_t n, float cap, gpuStream_t s) {
    if (n <= 0) return;
    ST_LAUNCH(softcap_kernel, ew_grid(n), GPU_BLOCK, 0, s, x, n, cap);
    GPU_CHECK_LAUNCH();
}

void gpu_add_bias(float *x, const float *b, int n, int dim, gpuStream_t s) {
    const int64_t total = (int64_t)n * dim;
    if (total <= 0) return;
    ST_LAUNCH(add_bias_kernel, ew_grid(total), GPU_BLOCK, 0, s, x, b, total, dim);
    GPU_CHECK_LAUNCH();
}
