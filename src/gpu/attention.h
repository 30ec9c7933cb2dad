// attention.h: the KV cache: storing keys and values, and causal grouped-query
// attention over it (see attention.cu).
#ifndef STRATA_GPU_ATTENTION_H
#define STRATA_GPU_ATTENTION_H

#include "common.h"

// The largest head_dim the kernels take.
#define GPU_ATTN_MAX_HEAD_DIM 256

// How many key ranges one query's keys (n_kv at most) are split into
// (flash-decoding), so that at least about 2·n_sm blocks run: 1 when the batch
// has enough queries.
int gpu_attention_splits(int n, int n_kv, int n_head, int n_sm);
// Scratch floats gpu_attention needs with n_split splits (0 when 1).
size_t gpu_attention_scratch(int n, int n_head, int head_dim, int n_split);

// Every cache below holds floats, or with f16 halves (IEEE binary16 bits,
// rounded to nearest with ties to even as they are stored).

// Stores k, v (n, kv_dim) into the caches kc, vc: row t at cache row base[t] +
// pos[t] (device arrays of n). Enqueued on s.
void gpu_kv_store(void *kc, void *vc, bool f16, const float *k, const float *v, const int32_t *pos,
                  const int32_t *base, int n, int kv_dim, gpuStream_t s);

// out (n, n_head, head_dim): row t (position p = pos[t]) attends to positions
// 0 .. p of its sequence, cache rows base[t] + 0 .. p of k/v (rows, n_head_kv,
// head_dim), only p-window+1 .. p with a window. Scores ap.scale·q·k,
// soft-capped when ap.softcap > 0; softmax in float with a running maximum.
// A row's keys are cut into n_split equal ranges (gpu_attention_splits), whose
// partial results go through part (gpu_attention_scratch floats). With oq (and od)
// not NULL, out is also written 8-bit quantized in gpu_quantize_q8's form
// (oq (n, n_head·head_dim), od (n, n_head·head_dim/32)), to the bit as that
// function would; head_dim must then be a multiple of 32. Returns 0 once
// enqueued, -1 for a head_dim over the limit (or not a multiple of 32 with
// oq) or heads that do not group (n_head % n_head_kv).
int gpu_attention(const float *q, const void *k, const void *v, bool f16, float *out, int8_t *oq, float2 *od,
                  float *part, const int32_t *pos, const int32_t *base, int n, int n_head, int n_head_kv,
                  int head_dim, int n_split, const struct attn_params &ap, gpuStream_t s);

// Rows in a batch from which a run of one sequence takes gpu_attention_run.
#define GPU_ATTN_TILE_MIN_ROWS 8

// The attention of a run of nr rows of one sequence at consecutive positions
// (a prompt chunk): row i of q and out (nr, n_head, head_dim) is at position
// p0 + i and sees cache rows base + 0 .. p0 + i of k/v (rows, n_head_kv,
// head_dim; only the last ap.window with a window), the same as gpu_attention
// gives for those rows, with each key and value row read once for many
// queries. With mma, where gpu_attention_run_mma says so, on tensor-core
// tiles (st_mma_f16_k16): the queries (each (row, head)'s scaled by a power of
// two), the softmax weights and a float cache's keys and values rounded to
// halves (so that values past the half range, 65504, become infinite, as in a
// half cache), scores and sums in float; otherwise in float throughout. Returns 0 once enqueued, -1 for a head_dim
// over the limit or not a multiple of 4, or heads that do not group.
int gpu_attention_run(const float *q, const void *k, const void *v, bool f16, float *out, int base, int p0,
                      int nr, int n_head, int n_head_kv, int head_dim, const struct attn_params &ap, bool mma,
                      gpuStream_t s);

// The largest head_dim of the tensor-core form of gpu_attention_run.
#define GPU_ATTN_MMA_MAX_HEAD_DIM 128

// Whether gpu_attention_run with mma takes the tensor-core form: a head_dim
// that is a multiple of 16, at most GPU_ATTN_MMA_MAX_HEAD_DIM.
bool gpu_attention_run_mma(int head_dim);

#endif
