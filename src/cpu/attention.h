// attention.h: the fast CPU backend's causal attention with AVX-512 (the
// backend's plain loop is the fallback on other CPUs). Private to src/cpu/ and
// its tests.
#ifndef STRATA_CPU_ATTENTION_H
#define STRATA_CPU_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>

struct threadpool;

// Floats of scratch attention_avx512 needs with n_threads threads and these sizes.
size_t attention_scratch_floats(int n_threads, int n, int pos0, int n_head, int n_head_kv, int head_dim);

// backend.h's attention op: out (n, n_head, head_dim) for queries q (n, n_head,
// head_dim) at positions pos0.. against cache rows 0 .. pos0+n-1 (no row past
// them is read). Prompts (n ≥ 8) go through a flash kernel: 16 queries of one
// head in the lanes of a register, keys in blocks of 16 with an online softmax.
// Fewer queries split each head's keys into ranges of 256, score a range in one
// pass (16 keys' dot products reduced together) and merge the ranges' softmaxes.
// scratch: attention_scratch_floats(threadpool_size(tp), ...) floats. Only call
// it when the CPU has AVX-512 (gemm_isa_available).
void attention_avx512(struct threadpool *tp, const float *q, const float *k_cache, const float *v_cache,
                      float *out, int n, int pos0, int n_head, int n_head_kv, int head_dim, float *scratch);

#endif
