// quantize.cu: activation quantization for the integer dot products (mmvq,
// mmq): 8 threads per block of 32 values, 4 values each; and the
// half-precision form of the tensor-core tiles (mmq): a block a row.
#include <math.h>

#include "quantize.h"

__global__ void __launch_bounds__(GPU_BLOCK)
    quantize_q8_kernel(const float *x, int8_t *qs, float2 *ds, int64_t n_blocks, bool aligned) {
    st_launch_begin();
    const int64_t gid = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    const int64_t blk = gid / 8;
    const int sub = (int)(gid % 8);
    const bool live = blk < n_blocks;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (live) {
        const float *p = x + blk * 32 + sub * 4;
        if (aligned)
            v = *(const float4 *)p;
        else
            v = make_float4(p[0], p[1], p[2], p[3]);
    }
    gpu_q8_store4(v, live, qs, ds, blk, sub);
}

void gpu_quantize_q8(const float *x, int8_t *qs, float2 *ds, int n, int64_t cols, gpuStream_t s) {
    const int64_t n_blocks = (int64_t)n * cols / 32;
    const int64_t grid = gpu_cdiv(n_blocks * 8, GPU_BLOCK);
    const bool aligned = (uintptr_t)x % 16 == 0;
    ST_LAUNCH(quantize_q8_kernel, (unsigned)grid, GPU_BLOCK, 0, s, x, qs, ds, n_blocks, aligned);
    GPU_CHECK_LAUNCH();
}

// One block a row: the row's largest magnitude, then its values scaled by the
// power of two that brings it into [2^14, 2^15), 8 a thread and step.
__global__ void __launch_bounds__(GPU_BLOCK)
    quantize_f16_kernel(const float *x, uint16_t *h, float *sc, int64_t cols) {
    st_launch_begin();
    const float *xr = x + (int64_t)blockIdx.x * cols;
    uint4 *hr = (uint4 *)(h + (int64_t)blockIdx.x * cols);
    float amax = 0.0f;
    bool bad = false; // fmaxf drops nans: a nan anywhere leaves the scale at 1 below
    for (int64_t c = 8 * (int64_t)threadIdx.x; c < cols; c += 8 * GPU_BLOCK)
        for (int i = 0; i < 8; i++) {
            const float v = xr[c + i];
            amax = fmaxf(amax, fabsf(v));
            bad |= v != v;
        }
    const int e = gpu_half_exponent(gpu_block_max(bad ? INFINITY : amax));
    const float inv = __uint_as_float((uint32_t)(127 - e) << 23);
    if (threadIdx.x == 0) sc[blockIdx.x] = __uint_as_float((uint32_t)(127 + e) << 23);
    for (int64_t c = 8 * (int64_t)threadIdx.x; c < cols; c += 8 * GPU_BLOCK) {
        uint32_t w[4];
        for (int i = 0; i < 4; i++) w[i] = st_f2h2(xr[c + 2 * i] * inv, xr[c + 2 * i + 1] * inv);
        hr[c / 8] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

void gpu_quantize_f16(const float *x, uint16_t *h, float *sc, int n, int64_t cols, gpuStream_t s) {
    ST_LAUNCH(quantize_f16_kernel, (unsigned)n, GPU_BLOCK, 0, s, x, h, sc, cols);
    GPU_CHECK_LAUNCH();
}
