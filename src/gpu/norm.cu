// norm.cu: RMS normalisation, one block per row: the sum of squares is reduced
// within warps, then across them through shared memory. Rows of a multiple of
// 4 floats, 16-byte aligned, are read as float4 and kept in registers up to
// NORM_REGS float4 a thread (dim ≤ 4096), so each value is loaded once; those
// rows can also be written 8-bit quantized as they are stored (q8 != NULL),
// which spares the product that follows its own quantization pass.
#include <math.h>

#include "norm.h"
#include "quantize.h"

#define NORM_REGS 4

// The sum of ss over the block, in every thread.
static __device__ __forceinline__ float block_sum(float ss) {
    ss = st_warp_sum_f32(ss, ST_WARP_SIZE);
    __shared__ float part[GPU_BLOCK / ST_WARP_SIZE];
    if (threadIdx.x % ST_WARP_SIZE == 0) part[threadIdx.x / ST_WARP_SIZE] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int k = 0; k < GPU_BLOCK / ST_WARP_SIZE; k++) total += part[k];
    return total;
}

__global__ void __launch_bounds__(GPU_BLOCK)
    rms_norm_kernel(const float *x, const float *w, float *out, int dim, float eps) {
    st_launch_begin();
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *orow = out + (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += GPU_BLOCK) ss += xr[i] * xr[i];
    const float scale = 1.0f / sqrtf(block_sum(ss) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += GPU_BLOCK) orow[i] = xr[i] * scale * w[i];
}

static __device__ __forceinline__ float sq4(float4 v) {
    return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
}

static __device__ __forceinline__ float4 norm4(float4 v, float s, float4 w) {
    return make_float4(v.x * s * w.x, v.y * s * w.y, v.z * s * w.z, v.w * s * w.w);
}

// Stores float4 i of the row (xv, scale and the weight wv applied) when
// i < n4, and with Q8 its quantized form; every thread of the block calls it.
template <bool Q8>
static __device__ __forceinline__ void norm_store(float4 xv, float4 wv, int i, int n4, float scale,
                                                  float4 *orow, int8_t *qs, float2 *ds, int64_t blk0) {
    const bool live = i < n4;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (live) {
        o = norm4(xv, scale, wv);
        orow[i] = o;
    }
    if (Q8) gpu_q8_store4(o, live, qs, ds, blk0 + i / 8, i % 8);
}

// dim % 4 == 0, rows 16-byte aligned; with Q8, dim % 32 == 0 and qs/ds the
// quantized rows (gpu_quantize_q8's layout). The weight's first NORM_REGS
// float4 a thread are loaded before st_wait_prior: it is no kernel's output.
template <bool Q8>
__global__ void __launch_bounds__(GPU_BLOCK)
    rms_norm4_kernel(const float *x, const float *w, float *out, int8_t *qs, float2 *ds, int dim, float eps) {
    st_launch_dependents();
    const int n4 = dim / 4;
    const float4 *xr = (const float4 *)(x + (int64_t)blockIdx.x * dim);
    const float4 *w4 = (const float4 *)w;
    float4 *orow = (float4 *)(out + (int64_t)blockIdx.x * dim);
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 v[NORM_REGS], wv[NORM_REGS];
#pragma unroll
    for (int k = 0; k < NORM_REGS; k++) {
        const int i = threadIdx.x + k * GPU_BLOCK;
        wv[k] = i < n4 ? w4[i] : zero;
    }
    st_wait_prior();
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_REGS; k++) {
        const int i = threadIdx.x + k * GPU_BLOCK;
        v[k] = i < n4 ? xr[i] : zero;
        ss += sq4(v[k]);
    }
    for (int i = threadIdx.x + NORM_REGS * GPU_BLOCK; i < n4; i += GPU_BLOCK) ss += sq4(xr[i]);
    const float scale = 1.0f / sqrtf(block_sum(ss) / (float)dim + eps);
    const int64_t blk0 = (int64_t)blockIdx.x * (dim / 32);
    // every bound below is the block's: the quantizing store shuffles
#pragma unroll
    for (int k = 0; k < NORM_REGS; k++) {
        if (k * GPU_BLOCK >= n4) break;
        norm_store<Q8>(v[k], wv[k], threadIdx.x + k * GPU_BLOCK, n4, scale, orow, qs, ds, blk0);
    }
    for (int k = NORM_REGS; k * GPU_BLOCK < n4; k++) {
        const int i = threadIdx.x + k * GPU_BLOCK;
        norm_store<Q8>(i < n4 ? xr[i] : zero, i < n4 ? w4[i] : zero, i, n4, scale, orow, qs, ds, blk0);
    }
}

bool gpu_rms_norm(const float *x, const float *w, float *out, int n, int dim, float eps, int8_t *qs,
                  float2 *ds, gpuStream_t s) {
    if (n <= 0) return false;
    const bool vec =
        dim % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)w % 16 == 0;
    const bool q8 = qs && vec && dim % 32 == 0;
    if (q8)
        ST_LAUNCH((rms_norm4_kernel<true>), (unsigned)n, GPU_BLOCK, 0, s, x, w, out, qs, ds, dim, eps);
    else if (vec)
        ST_LAUNCH((rms_norm4_kernel<false>), (unsigned)n, GPU_BLOCK, 0, s, x, w, out, (int8_t *)NULL,
                  (float2 *)NULL, dim, eps);
    else
        ST_LAUNCH(rms_norm_kernel, (unsigned)n, GPU_BLOCK, 0, s, x, w, out, dim, eps);
    GPU_CHECK_LAUNCH();
    return q8;
}
