// quantize.h: activations to 8-bit blocks of 32 (see quantize.cu).
#ifndef STRATA_GPU_QUANTIZE_H
#define STRATA_GPU_QUANTIZE_H

#include "common.h"

// Quantizes x (n, cols) float, cols a multiple of 32,
// into qs (n, cols) int8 and ds (n, cols/32) = (d, d·Σq) with d = max|x|/127
// per block of 32 and q = round(x/d). Enqueued on s.
void gpu_quantize_q8(const float *x, int8_t *qs, float2 *ds, int n, int64_t cols, gpuStream_t s);

#endif
