// backend.h: the small boundary between the forward pass and the hardware.
//
// The forward pass (forward.c) is written once against these function
// pointers. Buffers are opaque: host memory for the CPU backends, device memory
// for GPU backends; the forward pass only passes them back to the backend.
// Ops are enqueued in order and may run asynchronously; errors are sticky and
// reported by sync().
//
// All activations are float32, row-major, one row per token:
//   x    (n_tok, dim)
//   q    (n_tok, n_head, head_dim)       k, v  (n_tok, n_head_kv, head_dim)
//   kv cache per layer: (n_ctx, n_head_kv, head_dim), float32
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct backend {
    const char *name; // "cpu", "cpu-ref", "cuda", "hip", "spirv"
    void *impl;

    // Frees everything the backend allocated, then the backend itself.
    void (*free)(struct backend *be);

    // Memory. alloc returns NULL with a message when the bytes are not there.
    void *(*alloc)(struct backend *be, size_t bytes);
    void (*release)(struct backend *be, void *buf);
    void (*upload)(struct backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(struct backend *be, void *host_dst, const void *src, size_t bytes);
    // Makes w usable by this backend's ops (a GPU copies it and sets w->dev).
    // Returns 0 or -1 with a message.
    int (*prepare_weight)(struct backend *be, struct weight *w);

    // out (n, emb.cols) = rows tokens[i] of emb, dequantized. tokens is a
    // backend buffer of n int32 ids, each < emb.rows (checked by the caller).
    void (*get_rows)(struct backend *be, const struct weight *emb, const int32_t *tokens, int n,
                     float *out);
    // out (n, dim) = x / sqrt(mean(x²) + eps) * w   (w: F32 weight of dim)
    void (*rms_norm)(struct backend *be, const struct weight *w, const float *x, float *out, int n,
                     int dim, float eps);
    // y (n, w.rows) = x (n, w.cols) · wᵀ
    void (*matmul)(struct backend *be, const struct weight *w, const float *x, float *y, int n);
    // In place: rotates x (n, n_head, head_dim) for positions pos0 .. pos0+n-1.
    void (*rope)(struct backend *be, float *x, int n, int n_head, int head_dim, int pos0,
                 const struct rope_params *rp);
    // Stores k, v (n, n_head_kv, head_dim) into the caches at rows pos0 .. pos0+n-1.
    void (*kv_store)(struct backend *be, float *k_cache, float *v_cache, const float *k,
                     const float *v, int n, int pos0, int kv_dim);
    // out (n, n_head, head_dim): causal grouped-query attention of q (token i
    // at position pos0+i sees cache rows 0 .. pos0+i), scale 1/sqrt(head_dim).
    void (*attention)(struct backend *be, const float *q, const float *k_cache,
                      const float *v_cache, float *out, int n, int pos0, int n_head, int n_head_kv,
                      int head_dim);
    // gate (n) = silu(gate) * up
    void (*swiglu)(struct backend *be, float *gate, const float *up, int64_t n);
    // x (n) += y
    void (*add)(struct backend *be, float *x, const float *y, int64_t n);
    // Waits for every enqueued op. Returns 0, or -1 with the first error's message.
    int (*sync)(struct backend *be);
};

// The plain reference backend: scalar C, double accumulation, one thread. The oracle.
struct backend *backend_cpu_ref_init(void);
// The fast CPU backend: activations quantized to 8-bit blocks for integer dot
// products, rows split across n_threads (≤ 0: every core).
struct backend *backend_cpu_init(int n_threads);

#endif
