// elementwise.h: element-wise ops (see elementwise.cu). Each is enqueued on s.
#ifndef STRATA_GPU_ELEMENTWISE_H
#define STRATA_GPU_ELEMENTWISE_H

#include "common.h"

// out (n, dim) = act(g) · u over rows of g and u that start every `stride`
// floats; act is an enum glu_act (SiLU or GELU, tanh form). out may be g when
// stride = dim. When qs is not NULL, dim is a multiple of 32, stride of 4 and
// g, u, out are 16-byte aligned, out is also written quantized into qs (n,
// dim) and ds (n, dim/32) as gpu_quantize_q8 writes it; returns whether it was.
bool gpu_glu(int act, const float *g, const float *u, float *out, int n, int dim, int stride, int8_t *qs,
             float2 *ds, gpuStream_t s);
// x (n) += y
void gpu_add(float *x, const float *y, int64_t n, gpuStream_t s);
// x (n) *= v
void gpu_scale(float *x, int64_t n, float v, gpuStream_t s);
// x (n) = cap · tanh(x / cap)
void gpu_softcap(float *x, int64_t n, float cap, gpuStream_t s);
// x (n, dim) += b (dim), every row
void gpu_add_bias(float *x, const float *b, int n, int dim, gpuStream_t s);

#endif
