// attention.h: the fast CPU backend's causal attention with AVX-512 (the
// backend's plain loop is the fallback on other CPUs). Private to src/cpu/ and
// its tests.
#ifndef STRATA_CPU_ATTENTION_H
#define STRATA_CPU_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct threadpool;
struct attn_params;

// One run of a batch: rows [row, row + n) of the queries and the output, at
// positions pos0 .. pos0+n-1 of the sequence whose cache rows start at row
// `base` of the caches.
struct att_run {
    int row, n, pos0;
    int64_t base;
};

// Floats of scratch attention_avx512 needs with n_threads threads for these runs.
size_t attention_scratch_floats(int n_threads, const struct att_run *runs, int n_runs, int n_head,
                                int n_head_kv, int head_dim);

// backend.h's attention op for the runs of a batch: out (rows, n_head,
// head_dim) for queries q (rows, n_head, head_dim); a run's token at position p
// sees its sequence's cache rows base .. base+p (no row past them is read), with
// ap's score scale, soft cap and sliding window. Flash-attention style: each
// query walks its keys in blocks of 64 (scores 16 at a time, reduced together,
// then an online softmax and the value sums, all in AVX-512), in ranges of 128
// keys; the ranges of every run are tasks of one threaded job, merged at the
// end. Blocks and ranges are absolute positions, so a query's arithmetic, and
// its result to the bit, is the same whatever batch it comes in.
// The caches hold floats, or IEEE halves when f16 (widened as they are read).
// scratch: attention_scratch_floats(threadpool_size(tp), ...) floats. Only call
// it when the CPU has AVX-512 (gemm_isa_available).
void attention_avx512(struct threadpool *tp, const float *q, const void *k_cache, const void *v_cache,
                      bool f16, float *out, const struct att_run *runs, int n_runs, int n_head, int n_head_kv,
                      int head_dim, const struct attn_params *ap, float *scratch);

#endif
