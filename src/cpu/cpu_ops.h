// cpu_ops.h: pieces shared by the CPU backends.
#ifndef STRATA_CPU_OPS_H
#define STRATA_CPU_OPS_H

#include "backend.h"
#include "model/model.h"

// Angle of rotary pair i at position pos, in double:
// pos · freq_scale · base^(-2i/n_dims) / freq_factors[i].
double cpu_rope_theta(int pos, int i, const struct rope_params *rp);

// The elements rotary pair i turns: NORM (2i, 2i+1), NEOX (i, i + n_dims/2).
static inline void cpu_rope_pair(const struct rope_params *rp, int i, int *a, int *b) {
    *a = rp->kind == ROPE_KIND_NORM ? 2 * i : i;
    *b = rp->kind == ROPE_KIND_NORM ? 2 * i + 1 : i + rp->n_dims / 2;
}

// Rotates one head x (head_dim) in place for position pos, angles in double;
// dimensions past n_dims are left as they are.
void cpu_rope_head(float *x, int pos, const struct rope_params *rp);

// Ops identical in both CPU backends (see backend.h for their contracts).
void cpu_get_rows(struct backend *be, const struct weight *emb, const int32_t *tokens, int n,
                  float *out);
void cpu_kv_store(struct backend *be, float *k_cache, float *v_cache, const float *k,
                  const float *v, int n, int pos0, int kv_dim);
void cpu_copy(struct backend *be, void *dst, const void *src, size_t bytes);
void cpu_release(struct backend *be, void *buf);
int cpu_prepare_weight(struct backend *be, const struct weight *w);
void cpu_release_weight(struct backend *be, const struct weight *w);
int cpu_sync(struct backend *be);
// Host memory for the KV cache and scratch (backend.h's check_memory).
int cpu_check_memory(struct backend *be, uint64_t weight_bytes, uint64_t kv_bytes,
                     uint64_t scratch_bytes, int n_ctx);
void cpu_add(struct backend *be, float *x, const float *y, int64_t n);

#endif
