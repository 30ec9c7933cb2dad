// vec_ops.h: element-wise and row ops of the fast CPU backend, with AVX-512 forms
// chosen at run time and plain C twins. Private to src/cpu/ and its tests.
#ifndef STRATA_VEC_OPS_H
#define STRATA_VEC_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

struct threadpool;

// backend.h's glu: out (n, dim) = act(g) · u over rows `stride` floats apart
// (out may be g when stride = dim). With avx512 (only where the CPU has it) e^x
// is exp16 (simd_exp.h, 2 ulp); large inputs are shared out over tp's threads.
void vec_glu(struct threadpool *tp, bool avx512, enum glu_act act, const float *g, const float *u, float *out,
             int n, int dim, int stride);
// out (n, dim) = x / sqrt(mean(x²) + eps) · g, sums of squares in float.
void vec_rms_norm(bool avx512, const float *g, const float *x, float *out, int n, int dim, float eps);

#endif
