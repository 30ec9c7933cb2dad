// quantize.cu: activation quantization for the integer dot products (mmvq,
// mmq): 8 threads per block of 32 values, 4 values each.
#include "quantize.h"

__global__ void __launch_bounds__(GPU_BLOCK)
    quantize_q8_kernel(const float *x, int8_t *qs, float2 *ds, int64_t n_blocks, bool aligned) {
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
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    amax = st_warp_max_f32(amax, 8);
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const int q0 = (int)roundf(v.x * id), q1 = (int)roundf(v.y * id);
    const int q2 = (int)roundf(v.z * id), q3 = (int)roundf(v.w * id);
    const int sum = st_warp_sum_i32(q0 + q1 + q2 + q3, 8);
    if (live) {
        *(uint32_t *)(qs + blk * 32 + sub * 4) = (uint32_t)(q0 & 0xff) | ((uint32_t)(q1 & 0xff) << 8) |
                                                 ((uint32_t)(q2 & 0xff) << 16) |
                                                 ((uint32_t)(q3 & 0xff) << 24);
        if (sub == 0) ds[blk] = make_float2(d, d * (float)sum);
    }
}

void gpu_quantize_q8(const float *x, int8_t *qs, float2 *ds, int n, int64_t cols, gpuStream_t s) {
    const int64_t n_blocks = (int64_t)n * cols / 32;
    const int64_t grid = gpu_cdiv(n_blocks * 8, GPU_BLOCK);
    const bool aligned = (uintptr_t)x % 16 == 0;
    quantize_q8_kernel<<<(unsigned)grid, GPU_BLOCK, 0, s>>>(x, qs, ds, n_blocks, aligned);
    GPU_CHECK_LAUNCH();
}
