// quantize.cu: activation quantization for the integer dot products (mmvq,
// mmq): 8 threads per block of 32 values, 4 values each.
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
