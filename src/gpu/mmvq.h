// mmvq.h: quantized matrix × vector (see mmvq.cu).
#ifndef STRATA_GPU_MMVQ_H
#define STRATA_GPU_MMVQ_H

#include "common.h"

// Tokens one mmvq launch takes; larger batches go to mmq.
#define GPU_MMVQ_MAX_TOKENS 32

// y[i] (n, rows) = x (n, cols) · w[i]ᵀ for every member of the set (one
// launch): when n = 1 with tpr threads per row (16, 32, 64, 128 or 256); when
// n > 1, or n = 1 with tpr = 0 (the rows form), with 32 threads for every
// rpw rows (1, 2 or 4) and the tokens in groups of tpg (2, 4 or 8; each
// group reads the weights again); with add,
// y[i] += the product instead. swar (n = 1 and gpu_mmvq_swar_fits only): the SWAR dot
// product of compat's portable.h instead of dp4a, with the same results, for
// targets without a native dp4a (gpu_device_info.has_dp4a). Returns 0 once
// enqueued on s, -1 for a set, type, n, tpr, rpw or swar it does not take
// (nothing enqueued).
int gpu_mmvq(const gpu_mat_set &set, const gpu_q8 &x, int n, int tpr, int rpw, int tpg, bool swar, bool add,
             gpuStream_t s);

// Whether the SWAR form takes rows of cols activations (its staged copy, two
// bytes an activation, fits the shared memory of a launch).
bool gpu_mmvq_swar_fits(int64_t cols);

// The copies of the codebook's pair table (1 to 16, a power of two; see
// gpu_act_swar) the SWAR form keeps for rows of cols activations: as many as
// fit in a launch's shared memory beside the stage, less 1 KiB for the
// kernel's own.
int gpu_swar_cb_copies(int64_t cols);

// The expert products of backend.h's matmul_id: w is n_exp matrices stacked
// (w.rows = n_exp · rows); y (n, k, rows), pair (t, s) the product of expert
// ids[t·k + s] with activation row t·x_slots + (x_slots > 1 ? s : 0) of x.
// Returns 0 once enqueued, -1 for what it does not take.
int gpu_mmvq_id(const gpu_mat &w, const gpu_q8 &x, float *y, const int32_t *ids, int n, int k, int x_slots,
                int n_exp, gpuStream_t s);

// Weight chunks per row of a quantized type (the unit a thread takes), -1 if unknown.
int gpu_mmvq_items_per_row(int type, int64_t cols);

// The threads per row (16 .. 256) the backend uses by default for a matrix of
// rows rows of `items` units of work each (chunks; 8-element groups for float
// weights) on a device with n_sm multiprocessors, for the dp4a form or (swar)
// the SWAR form.
int gpu_pick_tpr(int64_t items, int64_t rows, int n_sm, bool swar);
// The form the backend uses by default for one token and a quantized matrix
// (all members of a set) of rows rows of cols elements of type (the dp4a
// dot product) on a device of n_sm multiprocessors: *tpr threads a row
// (16 .. 256), or *tpr = 0 and the rows form with *rpw rows a warp (*rpw is
// left as it was for the other).
void gpu_pick_matvec(int type, int64_t cols, int64_t rows, int n_sm, int *tpr, int *rpw);
// The rows per 32 threads (2 or 4) the backend uses by default for several
// tokens: 4, or 2 where a matrix has too few rows to give the device's n_sm
// multiprocessors 3/4 of a block each.
int gpu_pick_rpw(int64_t rows, int n_sm);
// The tokens per group (2 or 4) the backend uses by default for n tokens and
// rows rows at rpw rows per 32 threads: 4, or 2 where n <= 16 and a group's
// blocks would leave more than half the n_sm multiprocessors without one.
int gpu_pick_tpg(int64_t rows, int rpw, int n, int n_sm);

#endif
