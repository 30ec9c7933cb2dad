// cpu_ops.h: pieces shared by the CPU backends.
#ifndef STRATA_CPU_OPS_H
#define STRATA_CPU_OPS_H

#include "backend.h"
#include "model/model.h"

// The fast backend's ops outside backend_cpu.c (backend.h has their contracts):
// cpu_common.c holds memory and copies, fast_ops.c the element-wise and routing ops.
void cpu_get_rows(struct backend *be, const struct weight *emb, const int32_t *tokens, int n, float *out);
void cpu_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k, const float *v,
                  const struct batch_rows *r, int kv_dim);
void cpu_copy(struct backend *be, void *dst, const void *src, size_t bytes);
void cpu_release(struct backend *be, void *buf);
int cpu_prepare_weight(struct backend *be, const struct weight *w);
void cpu_release_weight(struct backend *be, const struct weight *w);
int cpu_sync(struct backend *be);
// Host memory for the KV cache and scratch (backend.h's check_memory).
int cpu_check_memory(struct backend *be, uint64_t weight_bytes, uint64_t kv_bytes, uint64_t scratch_bytes,
                     int n_ctx);
void cpu_add(struct backend *be, float *x, const float *y, int64_t n);

void cpu_add_bias(struct backend *be, const struct weight *b, float *x, int n, int dim);
void cpu_scale(struct backend *be, float *x, int64_t n, float s);
void cpu_softcap(struct backend *be, float *x, int64_t n, float cap);
void cpu_moe_route(struct backend *be, const float *logits, int n, const struct moe_params *mp, int32_t *ids,
                   float *weights);
void cpu_moe_combine(struct backend *be, const float *y, const float *weights, int n, int k, int dim,
                     float *out);

#endif
