// gemm_prefetch.h: software prefetch of a repacked weight's stream, shared by
// the x86 matrix kernels (gemm_avx512.c, gemm_ymm.h). Private to src/cpu/.
#ifndef STRATA_GEMM_PREFETCH_H
#define STRATA_GEMM_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

// The weights stream from memory: while working on one block, ask for the
// lines PF_L2 bytes further on into L2 (and PF_L1 bytes on into L1), which
// keeps loads in flight across the page boundaries where the hardware
// prefetcher stops. Measured on one-token products of 8192 x 2048 weights
// (`test_gemm --perf T:8192x2048`) and whole decode steps (`strata bench`;
// docs/PERF.md): on a Xeon 4 KiB into L2 was the best of 2 to 8 KiB, and 2 KiB
// into L1 made the K types stream 4-7% faster. On an AMD EPYC (Zen 4) the
// AVX-512 kernels of the 32-block types streamed at 60-65% of the read ceiling
// asking for their quants alone into L2 (prefetch_block) and at 81-90% asking
// for their whole stream into L2 and L1 (prefetch_share), which every AVX-512
// kernel now does. The AVX2 and AVX-VNNI kernels of those types keep
// prefetch_block: there they measured 10-20% slower the other way, but on that
// CPU the same AVX2 object code also measured 20% apart in two builds, so the
// question is open.
#ifndef PF_L2
#define PF_L2 4096
#endif
#ifndef PF_L1
#define PF_L1 2048
#endif
static inline __attribute__((always_inline)) void prefetch_line(uintptr_t p, bool l1) {
    _mm_prefetch((const char *)p + PF_L2, _MM_HINT_T1);
    if (l1) _mm_prefetch((const char *)p + PF_L1, _MM_HINT_T0);
}
// The lines of one block's quants, into L2, where a group keeps them apart
// from its scales (the 32-block types): the rest of the group and the next
// one follow.
static inline __attribute__((always_inline)) void prefetch_block(const void *p, int bytes) {
    for (int i = 0; i < bytes; i += 64) prefetch_line((uintptr_t)p + (uintptr_t)i, false);
}
// Block b's share of a group's whole stream (scales and quants alike), into L2
// and L1: the group's bytes / nb (share: that in 1/65536ths, rounded up), each
// line once.
static inline __attribute__((always_inline)) size_t pf_share(size_t group_bytes, int64_t nb) {
    return ((group_bytes << 16) + (size_t)nb - 1) / (size_t)nb;
}
static inline __attribute__((always_inline)) void prefetch_share(const uint8_t *gp, size_t share, int64_t b) {
    const uintptr_t lo = (uintptr_t)gp + (((size_t)b * share) >> 16);
    const uintptr_t hi = (uintptr_t)gp + (((size_t)(b + 1) * share) >> 16);
    for (uintptr_t p = (lo + 63) & ~(uintptr_t)63; p < hi; p += 64) prefetch_line(p, true);
}

#endif
