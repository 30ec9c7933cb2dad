// bench.cu: the streaming-read kernel that gives benchmarks their ceiling: every
// thread keeps four independent 16-byte loads in flight and folds them into a
// value the compiler cannot drop.
#include <stdlib.h>

#include "bench.h"

__global__ void __launch_bounds__(GPU_BLOCK) read_kernel(const int4 *p, int64_t n16, int *sink) {
    const int64_t stride = (int64_t)gridDim.x * GPU_BLOCK;
    int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    int acc = 0;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        const int4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
        acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
        const int4 a = p[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x13579bdf) *sink = acc; // practically never: keeps the loads
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double gpu_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int gpu_read_bandwidth(size_t bytes, int reps, int n_sm, gpuStream_t s, double *gbps) {
    bytes &= ~(size_t)15;
    if (bytes == 0 || reps < 1) return -1;
    void *buf = NULL;
    int *sink = NULL;
    gpuEvent_t e0, e1;
    if (GPU_CHECK(gpuMalloc(&buf, bytes))) return -1;
    if (GPU_CHECK(gpuMalloc((void **)&sink, sizeof(int)))) {
        (void)gpuFree(buf);
        return -1;
    }
    int rc = -1;
    double *ms = (double *)malloc(sizeof(double) * (size_t)reps);
    if (ms && !GPU_CHECK(gpuEventCreate(&e0))) {
        if (!GPU_CHECK(gpuEventCreate(&e1))) {
            GPU_CHECK(gpuMemsetAsync(buf, 0x5a, bytes, s));
            const unsigned grid = (unsigned)n_sm * 8;
            const int64_t n16 = (int64_t)(bytes / 16);
            read_kernel<<<grid, GPU_BLOCK, 0, s>>>((const int4 *)buf, n16, sink); // warm-up
            rc = GPU_CHECK_LAUNCH();
            for (int r = 0; r < reps && rc == 0; r++) {
                float t = 0;
                GPU_CHECK(gpuEventRecord(e0, s));
                read_kernel<<<grid, GPU_BLOCK, 0, s>>>((const int4 *)buf, n16, sink);
                GPU_CHECK(gpuEventRecord(e1, s));
                rc = GPU_CHECK(gpuEventSynchronize(e1)) || GPU_CHECK(gpuEventElapsedTime(&t, e0, e1));
                ms[r] = t;
            }
            if (rc == 0) *gbps = (double)bytes / (gpu_median(ms, reps) * 1e-3) / 1e9;
            (void)gpuEventDestroy(e1);
        }
        (void)gpuEventDestroy(e0);
    }
    free(ms);
    (void)gpuFree(sink);
    (void)gpuFree(buf);
    return rc ? -1 : 0;
}

// Each warp runs `iters` rounds of four independent half-precision tile
// products of 16 × 8 × 16 (st_mma_f16_k16) on values it holds in registers:
// the tensor-core rate, no memory in the way.
__global__ void __launch_bounds__(GPU_BLOCK) mma_kernel(int iters, uint32_t seed, float *sink) {
    const uint32_t a[4] = {seed, seed ^ 0x00010002u, seed ^ 0x00030004u, seed ^ 0x00050006u};
    const uint32_t b[2] = {seed ^ 0x00070008u, seed ^ 0x0009000au};
    float c[4][4] = {};
    for (int i = 0; i < iters; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) st_mma_f16_k16(c[k], a, b);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) acc += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    if (acc == 1234.5f) *sink = acc; // practically never: keeps the products
}

int gpu_mma_rate(int reps, int n_sm, gpuStream_t s, double *tops) {
    if (reps < 1) return -1;
    float *sink = NULL;
    gpuEvent_t e0, e1;
    if (GPU_CHECK(gpuMalloc((void **)&sink, sizeof(float)))) return -1;
    int rc = -1;
    double *ms = (double *)malloc(sizeof(double) * (size_t)reps);
    const unsigned grid = (unsigned)n_sm * 4;
    const int iters = 4096;
    if (ms && !GPU_CHECK(gpuEventCreate(&e0))) {
        if (!GPU_CHECK(gpuEventCreate(&e1))) {
            mma_kernel<<<grid, GPU_BLOCK, 0, s>>>(iters, 0x3c003c00u, sink); // warm-up
            rc = GPU_CHECK_LAUNCH();
            for (int r = 0; r < reps && rc == 0; r++) {
                float t = 0;
                GPU_CHECK(gpuEventRecord(e0, s));
                mma_kernel<<<grid, GPU_BLOCK, 0, s>>>(iters, 0x3c003c00u + (uint32_t)r, sink);
                GPU_CHECK(gpuEventRecord(e1, s));
                rc = GPU_CHECK(gpuEventSynchronize(e1)) || GPU_CHECK(gpuEventElapsedTime(&t, e0, e1));
                ms[r] = t;
            }
            // two operations (multiply, add) a product term; per 32 lanes and
            // round, four tiles of 16 · 8 · 16 terms (a 64-lane wave is two)
            const double ops = 2.0 * 16 * 8 * 16 * 4 * iters * ((double)grid * GPU_BLOCK / 32);
            if (rc == 0) *tops = ops / (gpu_median(ms, reps) * 1e-3) / 1e12;
            (void)gpuEventDestroy(e1);
        }
        (void)gpuEventDestroy(e0);
    }
    free(ms);
    (void)gpuFree(sink);
    return rc ? -1 : 0;
}
