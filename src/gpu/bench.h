// bench.h: the ceilings benchmarks are held to: read bandwidth and the
// half-precision tensor-core rate (see bench.cu).
#ifndef STRATA_GPU_BENCH_H
#define STRATA_GPU_BENCH_H

#include "common.h"

// Median GB/s (1e9 bytes/s) over reps timed launches of a streaming-read
// kernel (16-byte loads, grid-strided over n_sm·8 blocks) over a fresh device
// buffer of `bytes`, after one warm-up launch. Returns 0, or -1 with the error
// recorded (gpu_record_error).
int gpu_read_bandwidth(size_t bytes, int reps, int n_sm, gpuStream_t s, double *gbps);

// Median half-precision tile-product rate (1e12 operations/s, a multiply and
// an add each) over reps timed launches of a kernel that runs st_mma_f16_k16 on
// registers in n_sm·4 blocks, after one warm-up launch: the tensor cores'
// rate where the target has them, the compat layer's twin elsewhere.
// Returns 0, or -1 with the error recorded.
int gpu_mma_rate(int reps, int n_sm, gpuStream_t s, double *tops);

// The median of v[0..n) (sorts v).
double gpu_median(double *v, int n);

#endif
