// norm.cu: RMS normalisation, one block per row: the sum of squares is reduced
// within warps, then across them through shared memory.
#include <math.h>

#include "norm.h"

__global__ void __launch_bounds__(GPU_BLOCK)
    rms_norm_kernel(const float *x, const float *w, float *out, int dim, float eps) {
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *orow = out + (int64_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += GPU_BLOCK) ss += xr[i] * xr[i];
    ss = st_warp_sum_f32(ss, ST_WARP_SIZE);
    __shared__ float part[GPU_BLOCK / ST_WARP_SIZE];
    if (threadIdx.x % ST_WARP_SIZE == 0) part[threadIdx.x / ST_WARP_SIZE] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int k = 0; k < GPU_BLOCK / ST_WARP_SIZE; k++) total += part[k];
    const float scale = 1.0f / sqrtf(total / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += GPU_BLOCK) orow[i] = xr[i] * scale * w[i];
}

void gpu_rms_norm(const float *x, const float *w, float *out, int n, int dim, float eps, gpuStream_t s) {
    if (n <= 0) return;
    rms_norm_kernel<<<(unsigned)n, GPU_BLOCK, 0, s>>>(x, w, out, dim, eps);
    GPU_CHECK_LAUNCH();
}
