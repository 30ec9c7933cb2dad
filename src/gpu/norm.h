// norm.h: RMS normalisation (see norm.cu).
#ifndef STRATA_GPU_NORM_H
#define STRATA_GPU_NORM_H

#include "common.h"

// out (n, dim) = x / sqrt(mean(x²) + eps) * w, w (dim) float. Enqueued on s.
void gpu_rms_norm(const float *x, const float *w, float *out, int n, int dim, float eps, gpuStream_t s);

#endif
