// argmax.h: greedy token choice on the device (see argmax.cu).
#ifndef STRATA_GPU_ARGMAX_H
#define STRATA_GPU_ARGMAX_H

#include "common.h"

// *out = the index of the largest of x[0..n) (the lowest such index on ties;
// NaN never wins; 0 when no value beats -inf). Enqueued on s.
void gpu_argmax(const float *x, int n, int32_t *out, gpuStream_t s);

#endif
