// attention.h: the fast CPU backend's causal attention with AVX-512 (the
// backend's plain loop is the fallback on other CPUs). Private to src/cpu/ and
// its tests.
#ifndef STRATA_CPU_ATTENTION_H
#define STRATA_CPU_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>

struct threadpool;
struct attn_params;

// Floats of scratch attention_avx512 needs with n_threads threads and these sizes.
size_t attention_scratch_floats(int n_threads, int n, int pos0, int n_head, int n_head_kv, int head_dim);

// backend.h's attention op: out (n, n_head, head_dim) for queries q (n, n_head,
// head_dim) at positions pos0.. against cache rows 0 .. pos0+n-1 (no row past
// them is read), with ap's score scale, soft cap and sliding window. Flash-attention style: each query walks its keys in blocks of
// 64 (scores 16 at a time, reduced together, then an online softmax and the
// value sums, all in AVX-512), in ranges of 128 keys that run as separate tasks and
// are merged at the end. Blocks and ranges are absolute positions, so a query's
// arithmetic, and its result to the bit, is the same whatever batch it comes in.
// scratch: attention_scratch_floats(threadpool_size(tp), ...) floats. Only call
// it when the CPU has AVX-512 (gemm_isa_available).
void attention_avx512(struct threadpool *tp, const float *q, const float *k_cache, const float *v_cache,
                      float *out, int n, int pos0, int n_head, int n_head_kv, int head_dim,
                      const struct attn_params *ap, float *scratch);

#endif
