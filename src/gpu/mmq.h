// mmq.h: quantized matrix × matrix for batches (see mmq.cu).
#ifndef STRATA_GPU_MMQ_H
#define STRATA_GPU_MMQ_H

#include "common.h"

// y (n, w.rows) = x (n, w.cols) · wᵀ for any n ≥ 1 (used above the mmvq
// batch limit), on tensor cores when mma (st_mma_s8_*: fast only where the
// device has them, gpu_device_info.has_mma_s8; exact everywhere), else on
// dp4a tiles; with add, y += the product instead. Returns 0 once enqueued on
// s, -1 for a type it does not take.
int gpu_mmq(const gpu_mat &w, const gpu_q8 &x, float *y, int n, bool mma, bool add, gpuStream_t s);

#endif
