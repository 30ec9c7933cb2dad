// vec_ops.h: element-wise and row ops of the fast CPU backend, with AVX-512 forms
// chosen at run time and plain C twins. Private to src/cpu/ and its tests.
#ifndef STRATA_VEC_OPS_H
#define STRATA_VEC_OPS_H

#include <stdbool.h>
#include <stdint.h>

struct threadpool;

// gate (n) = silu(gate) · up. With avx512 (only where the CPU has it) e^x is
// exp16 (simd_exp.h, 2 ulp); large n is shared out over tp's threads.
void vec_swiglu(struct threadpool *tp, bool avx512, float *gate, const float *up, int64_t n);
// out (n, dim) = x / sqrt(mean(x²) + eps) · g, sums of squares in float.
void vec_rms_norm(bool avx512, const float *g, const float *x, float *out, int n, int dim, float eps);

#endif
