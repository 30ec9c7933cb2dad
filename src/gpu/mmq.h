// mmq.h: quantized matrix × matrix for batches (see mmq.cu).
#ifndef STRATA_GPU_MMQ_H
#define STRATA_GPU_MMQ_H

#include "common.h"

// y (n, w.rows) = x (n, w.cols) · wᵀ for any n ≥ 1 (used above the mmvq
// batch limit) on dp4a tiles, from the activations' 8-bit blocks; with add,
// y += the product instead. Returns 0 once enqueued on s, -1 for a type it
// does not take.
int gpu_mmq(const gpu_mat &w, const gpu_q8 &x, float *y, int n, bool add, gpuStream_t s);

// The same on tensor cores (st_mma_f16_k16: fast only where the device has
// them, gpu_device_info.has_mma; as exact everywhere), from the activations'
// half-precision form, for a set of matrices that take the same input (Q, K
// and V; gate and up) in one launch: y[i] (n, w[i].rows) = x · w[i]ᵀ, the
// weights converted to halves (d·q + m over each weight's power-of-two
// hscale, rounded once), sums in float; blocks of bm rows × bn tokens (each
// 64 or 128, or 0 sized for a device of n_sm multiprocessors over the set's
// rows; 64 × 64 for types whose chunks spread over 128 elements). Returns -1
// for another bm or bn, or a set that gpu_set_valid refuses.
int gpu_mmh(const gpu_mat_set &set, const gpu_h16 &x, int n, bool add, int bm, int bn, int n_sm,
            gpuStream_t s);

#endif
