// elementwise.h: element-wise ops (see elementwise.cu).
#ifndef STRATA_GPU_ELEMENTWISE_H
#define STRATA_GPU_ELEMENTWISE_H

#include "common.h"

// gate (n) = silu(gate) · up. Enqueued on s.
void gpu_swiglu(float *gate, const float *up, int64_t n, gpuStream_t s);
// x (n) += y. Enqueued on s.
void gpu_add(float *x, const float *y, int64_t n, gpuStream_t s);

#endif
