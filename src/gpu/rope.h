// rope.h: rotary position embedding (see rope.cu).
#ifndef STRATA_GPU_ROPE_H
#define STRATA_GPU_ROPE_H

#include "common.h"

// Fills cs (n_pos, rp->n_dims/2) with (cos θ, sin θ) for positions 0 ..
// n_pos-1 (magnitude factors included), computed in float64 on the host by
// model/rope.c and rounded once.
void gpu_rope_table(float2 *cs, int n_pos, const struct rope_params *rp);

// Rotates x (n, n_head, head_dim) in place, row t for position pos[t] (device,
// n) with the table cs of gpu_rope_table (covering those positions): pairs
// (2i, 2i+1) when neox is 0, (i, i + n_dims/2) when 1, i < n_dims/2. Enqueued on s.
void gpu_rope(float *x, const float2 *cs, const int32_t *pos, int n, int n_head, int head_dim, int n_dims,
              int neox, gpuStream_t s);

// gpu_rope of q (n, n_head, head_dim) and of k (n, n_head_kv, head_dim), then
// the cache store of k and v (gpu_kv_store), in one launch; k itself is left
// as it was (its rotated form goes only to kc). The caches hold halves with f16
// (gpu_kv_store). Enqueued on s.
void gpu_rope_store(float *q, const float *k, const float *v, void *kc, void *vc, bool f16, const float2 *cs,
                    const int32_t *pos, const int32_t *base, int n, int n_head, int n_head_kv, int head_dim,
                    int n_dims, int neox, gpuStream_t s);

#endif
