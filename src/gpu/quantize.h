// quantize.h: activations to 8-bit blocks of 32 (see quantize.cu), and the
// device step that the kernels writing such activations as they go share.
#ifndef STRATA_GPU_QUANTIZE_H
#define STRATA_GPU_QUANTIZE_H

#include "common.h"

// Quantizes x (n, cols) float, cols a multiple of 32,
// into qs (n, cols) int8 and ds (n, cols/32) = (d, d·Σq) with d = max|x|/127
// per block of 32 and q = round(x/d). Enqueued on s.
void gpu_quantize_q8(const float *x, int8_t *qs, float2 *ds, int n, int64_t cols, gpuStream_t s);

// Converts x (n, cols) float, cols a multiple of 8, to gpu_h16's form:
// h (n, cols) halves of x[t]/sc[t], sc (n) = 2^e with e the one that puts
// max|x[t]| in [2^14, 2^15) (e kept within [-126, 126]; 1 for a row of zeros
// or one with an inf or a nan, which then stay inf or nan). Enqueued on s.
void gpu_quantize_f16(const float *x, uint16_t *h, float *sc, int n, int64_t cols, gpuStream_t s);

// Stores v, values 4·sub .. 4·sub+3 of block blk, in gpu_quantize_q8's form:
// the 8 lanes of an aligned group of 8 (sub = lane % 8) hold one block. Every
// lane of the warp calls it (shuffles); lanes with live false store nothing
// and must be whole groups.
static __device__ __forceinline__ void gpu_q8_store4(float4 v, bool live, int8_t *qs, float2 *ds, int64_t blk,
                                                     int sub) {
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

// Values in a quantized block (gpu_quantize_q8's layout).
#define GPU_Q8_BLOCK 32

// Stores v, value sub of block blk, in gpu_quantize_q8's form, to the bit:
// the GPU_Q8_BLOCK lanes of an aligned group (sub = lane % GPU_Q8_BLOCK) hold
// one block. Every lane of the warp calls it (shuffles); lanes with live
// false store nothing and must be whole groups.
static __device__ __forceinline__ void gpu_q8_store1(float v, bool live, int8_t *qs, float2 *ds, int64_t blk,
                                                     int sub) {
    const float amax = st_warp_max_f32(fabsf(v), GPU_Q8_BLOCK);
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const int q = (int)roundf(v * id);
    const int sum = st_warp_sum_i32(q, GPU_Q8_BLOCK);
    if (!live) return;
    qs[blk * GPU_Q8_BLOCK + sub] = (int8_t)q;
    if (sub == 0) ds[blk] = make_float2(d, d * (float)sum);
}

#endif
