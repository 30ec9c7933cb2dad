// rope.h: rotary position embedding angles, written once in double for every
// backend (the CPU backends rotate with them; a GPU builds its table from them).
//
// ggml's formula: for rotary pair i (0 ≤ i < n_dims/2) at position pos,
//   θ_extrap = pos · base^(-2i/n_dims) / freq_factors[i]
//   θ_interp = freq_scale · θ_extrap
//   θ        = θ_interp, or with YaRN (ext_factor ≠ 0) a mix ramping from
//              θ_extrap (fast-rotating pairs) to θ_interp (slow ones)
//   (cos, sin) = (cos θ, sin θ) · attn_factor · (YaRN: 1 + 0.1·ln(1/freq_scale))
// and pair i rotates elements (2i, 2i+1) (NORM) or (i, i + n_dims/2) (NEOX);
// elements past n_dims are left as they are.
#ifndef STRATA_ROPE_H
#define STRATA_ROPE_H

#include "model/model.h"

// cos and sin of pair i at position pos, magnitude scaling included.
void rope_cos_sin(int pos, int i, const struct rope_params *rp, double *c, double *s);

// The elements rotary pair i turns: NORM (2i, 2i+1), NEOX (i, i + n_dims/2).
static inline void rope_pair(const struct rope_params *rp, int i, int *a, int *b) {
    *a = rp->kind == ROPE_KIND_NORM ? 2 * i : i;
    *b = rp->kind == ROPE_KIND_NORM ? 2 * i + 1 : i + rp->n_dims / 2;
}

// Checks rp for a head of head_dim: n_dims even in [2, head_dim], base > 0,
// freq_scale > 0, finite factors. Returns 0 or -1 with a message.
int rope_check(const struct rope_params *rp, int head_dim);

#endif
