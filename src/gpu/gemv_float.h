// gemv_float.h: float-weight (F32, F16, BF16) products (see gemv_float.cu).
#ifndef STRATA_GPU_GEMV_FLOAT_H
#define STRATA_GPU_GEMV_FLOAT_H

#include "common.h"

// y (n, w.rows) = x (n, w.cols) · wᵀ for n ≤ 8 with tpr threads per row (16 ..
// 256 when n = 1, 32 otherwise), or for any n ≥ 1 through a tiled product when
// n > 8 (tpr unused). Float accumulation; with add, y += the product instead.
// Returns 0 once enqueued on s, -1 for a type, n or tpr it does not take.
int gpu_gemv_float(const gpu_mat &w, const float *x, float *y, int n, int tpr, bool add, gpuStream_t s);

// The expert products of backend.h's matmul_id with float weights (see
// gpu_mmvq_id for the layout). Returns 0 once enqueued, -1 otherwise.
int gpu_gemv_float_id(const gpu_mat &w, const float *x, float *y, const int32_t *ids, int n, int k,
                      int x_slots, int n_exp, gpuStream_t s);

#endif
