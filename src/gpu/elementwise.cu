// elementwise.cu: SiLU·mul and add, one thread per element, grid-strided.
#include <math.h>

#include "elementwise.h"

__global__ void __launch_bounds__(GPU_BLOCK) swiglu_kernel(float *g, const float *u, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * GPU_BLOCK) {
        const float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

__global__ void __launch_bounds__(GPU_BLOCK) add_kernel(float *x, const float *y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * GPU_BLOCK)
        x[i] += y[i];
}

static unsigned ew_grid(int64_t n) {
    const int64_t g = gpu_cdiv(n, GPU_BLOCK);
    return (unsigned)(g < 65536 ? g : 65536);
}

void gpu_swiglu(float *gate, const float *up, int64_t n, gpuStream_t s) {
    if (n <= 0) return;
    swiglu_kernel<<<ew_grid(n), GPU_BLOCK, 0, s>>>(gate, up, n);
    GPU_CHECK_LAUNCH();
}

void gpu_add(float *x, const float *y, int64_t n, gpuStream_t s) {
    if (n <= 0) return;
    add_kernel<<<ew_grid(n), GPU_BLOCK, 0, s>>>(x, y, n);
    GPU_CHECK_LAUNCH();
}
