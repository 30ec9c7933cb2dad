// moe.h: mixture-of-experts routing and combination (see moe.cu). Enqueued on s.
#ifndef STRATA_GPU_MOE_H
#define STRATA_GPU_MOE_H

#include "common.h"

// The most experts a layer may have here (the gate values live in shared memory).
#define GPU_MOE_MAX_EXPERTS 4096

// ids, weights (n, mp.n_used): backend.h's moe_route. Returns 0 once enqueued,
// -1 for an expert count out of range (nothing enqueued).
int gpu_moe_route(const float *logits, int n, const struct moe_params &mp, int32_t *ids, float *weights,
                  gpuStream_t s);
// out (n, dim) = Σ_s weights[t·k + s] · y (t, s, :); out may be y when k = 1.
void gpu_moe_combine(const float *y, const float *weights, int n, int k, int dim, float *out, gpuStream_t s);

#endif
