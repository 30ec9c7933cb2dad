// norm.h: RMS normalisation (see norm.cu).
#ifndef STRATA_GPU_NORM_H
#define STRATA_GPU_NORM_H

#include "common.h"

// out (n, dim) = x / sqrt(mean(x²) + eps) * w, w (dim) float. When qs is not
// NULL, dim is a multiple of 32 and x, out and w are 16-byte aligned, out is
// also written quantized into qs (n, dim) and ds (n, dim/32) as
// gpu_quantize_q8 writes it; returns whether it was. Enqueued on s.
bool gpu_rms_norm(const float *x, const float *w, float *out, int n, int dim, float eps, int8_t *qs,
                  float2 *ds, gpuStream_t s);

#endif
