// bench.h: the read-bandwidth ceiling (see bench.cu).
#ifndef STRATA_GPU_BENCH_H
#define STRATA_GPU_BENCH_H

#include "common.h"

// Median GB/s (1e9 bytes/s) over reps timed launches of a streaming-read
// kernel (16-byte loads, grid-strided over n_sm·8 blocks) over a fresh device
// buffer of `bytes`, after one warm-up launch. Returns 0, or -1 with the error
// recorded (gpu_record_error).
int gpu_read_bandwidth(size_t bytes, int reps, int n_sm, gpuStream_t s, double *gbps);

// The median of v[0..n) (sorts v).
double gpu_median(double *v, int n);

#endif
