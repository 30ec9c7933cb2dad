// argmax.cu: one block scans the vector (a vocabulary's logits), each thread a
// strided slice, then (value, index) pairs are reduced within warps and across
// them through shared memory, keeping the lowest index on ties.
#include <math.h>

#include "argmax.h"

#define ARGMAX_THREADS 1024

static __device__ __forceinline__ void argmax_pick(float &v, int &i, float ov, int oi) {
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
}

__global__ void __launch_bounds__(ARGMAX_THREADS) argmax_kernel(const float *x, int n, int32_t *out) {
    st_launch_begin();
    float v = -INFINITY;
    int idx = n; // past the end: loses every tie
    for (int i = threadIdx.x; i < n; i += ARGMAX_THREADS)
        if (x[i] > v) v = x[i], idx = i;
    for (int m = ST_WARP_SIZE / 2; m > 0; m >>= 1)
        argmax_pick(v, idx, st_shfl_xor(v, m, ST_WARP_SIZE), st_shfl_xor(idx, m, ST_WARP_SIZE));
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    const int warps = ARGMAX_THREADS / ST_WARP_SIZE;
    if (threadIdx.x % ST_WARP_SIZE == 0) {
        sv[threadIdx.x / ST_WARP_SIZE] = v;
        si[threadIdx.x / ST_WARP_SIZE] = idx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < warps; w++) argmax_pick(v, idx, sv[w], si[w]);
        *out = idx < n ? idx : 0;
    }
}

void gpu_argmax(const float *x, int n, int32_t *out, gpuStream_t s) {
    ST_LAUNCH(argmax_kernel, 1, ARGMAX_THREADS, 0, s, x, n, out);
    GPU_CHECK_LAUNCH();
}
