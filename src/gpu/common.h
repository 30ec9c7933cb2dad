// common.h: what every GPU kernel family shares: the compat layer, the device
// view of a weight matrix and of quantized activations, small load and
// conversion helpers, and the launch check. Included only by src/gpu/*.cu.
#ifndef STRATA_GPU_COMMON_H
#define STRATA_GPU_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "compat/compat.h"

extern "C" {
#include "format/quant.h"
#include "model/model.h" // the op parameters: enum glu_act, struct rope_params, ...
}

// Threads per block of most kernels: a multiple of every warp size (32, 64).
#define GPU_BLOCK 256

// A weight matrix on the device, y = W·x with W (rows, cols).
// Quantized types are stored split (see repack.cu): every block's "bulk" (its
// packed quant bits, a multiple of 16 bytes) goes to one array and the rest of
// the block (scales, mins, high bits) to another, both in block order, so that
// kernels load the bulk with aligned 16-byte loads whatever the block size.
struct gpu_mat {
    int type; // enum ggml_type
    int64_t rows, cols;
    const uint8_t *bulk; // quantized: [rows * cols/QK][bulk bytes]; float types: [rows][cols]
    const uint8_t *rest; // quantized: [rows * cols/QK][rest bytes]; float types: NULL
    // quantized: the power of two the tensor-core tiles divide the weights by
    // to hold them as halves (gpu_weight_scale), after the rest; else NULL
    const float *hscale;
};

// Matrices of one type and width that take the same input (Q, K and V; gate
// and up), for one launch of a product: y[i] (n, w[i].rows) = x · w[i]ᵀ. The
// launch gives member i the blocks start[i] .. start[i+1]-1 (gpu_set_blocks).
#define GPU_SET_MAX 3
struct gpu_mat_set {
    gpu_mat w[GPU_SET_MAX];
    float *y[GPU_SET_MAX];
    unsigned start[GPU_SET_MAX];
    int count; // 1 .. GPU_SET_MAX
};

// The set of one matrix.
static inline gpu_mat_set gpu_set_one(const gpu_mat &w, float *y) {
    gpu_mat_set s = {};
    s.w[0] = w;
    s.y[0] = y;
    s.count = 1;
    return s;
}

// Whether s's members are 1 .. GPU_SET_MAX matrices of one type, cols wide.
static inline bool gpu_set_valid(const gpu_mat_set &s, int64_t cols) {
    if (s.count < 1 || s.count > GPU_SET_MAX) return false;
    for (int i = 0; i < s.count; i++)
        if (s.w[i].type != s.w[0].type || s.w[i].cols != cols || s.w[i].rows < 1) return false;
    return true;
}

// Cuts a launch of blocks of rows_per_block rows into the members' ranges
// (s.start); returns the blocks of the whole launch.
static inline unsigned gpu_set_blocks(gpu_mat_set &s, int64_t rows_per_block) {
    unsigned b = 0;
    for (int i = 0; i < GPU_SET_MAX; i++) {
        s.start[i] = i < s.count ? b : 0xFFFFFFFFu;
        if (i < s.count) b += (unsigned)((s.w[i].rows + rows_per_block - 1) / rows_per_block);
    }
    return b;
}

// The member block b belongs to (w, y); returns the block's index within it.
static __device__ __forceinline__ unsigned gpu_set_member_at(const gpu_mat_set &s, unsigned b, gpu_mat &w,
                                                             float *&y) {
    w = s.w[0];
    y = s.y[0];
    unsigned start = 0;
#pragma unroll
    for (int i = 1; i < GPU_SET_MAX; i++)
        if (b >= s.start[i]) {
            w = s.w[i];
            y = s.y[i];
            start = s.start[i];
        }
    return b - start;
}

// The member block blockIdx.x belongs to (w, y); returns the block's index within it.
static __device__ __forceinline__ unsigned gpu_set_member(const gpu_mat_set &s, gpu_mat &w, float *&y) {
    return gpu_set_member_at(s, blockIdx.x, w, y);
}

// Activations quantized in blocks of 32 (Q8_1-style): value ≈ d · q.
struct gpu_q8 {
    const int8_t *qs; // (n, cols) int8
    const float2 *ds; // (n, cols/32): (d, d · Σq)
    int64_t cols;
};

// Activations in half precision for the tensor-core tile products, each row
// scaled by a power of two that brings its largest magnitude into [2^14,
// 2^15): value = sc[t] · h[t][c].
struct gpu_h16 {
    const uint16_t *h; // (n, cols) IEEE binary16 bits
    const float *sc;   // (n) powers of two
    int64_t cols;
};

// Checks the launch just made (bad configuration, missing kernel image);
// the error, if any, becomes the backend's sticky error.
#define GPU_CHECK_LAUNCH() GPU_CHECK(gpuGetLastError()) // 0, or -1 with the error recorded

static inline int64_t gpu_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// --- conversions ------------------------------------------------------------------

// IEEE binary16 bits to float, exact (st_h2f: the target's instruction, or the
// bit operations of portable.h): for arrays of halves (the K/V cache, F16
// weights), where it measured the faster.
static __device__ __forceinline__ float gpu_h2f(uint32_t h) { return st_h2f(h); }

// The same for the quantized types' fp16 scales (quants.h), always in bit
// operations: next to the unpacking's integer work they leave the conversion
// unit free, and on an H100 the instruction made Q4_0's matrix × vector 6.5%
// slower and Q4_K's 2% (IQ4_NL's 6% faster, Q6_K's 2%: docs/PERF.md).
static __device__ __forceinline__ float gpu_scale_h2f(uint32_t h) { return st_h2f_portable(h); }

static __device__ __forceinline__ float gpu_bf2f(uint32_t h) { return __uint_as_float(h << 16); }

// float to IEEE binary16 bits, to nearest with ties to even: the bits
// st_f32_to_fp16 gives on the host (st_f2h).
static __device__ __forceinline__ uint32_t gpu_f2h(float f) { return st_f2h(f); }

// --- the KV cache's elements ----------------------------------------------------------
// A cache holds floats, or halves as their bits (uint16_t): kernels that read or
// write it take the element type as a template argument and go through these.

static __device__ __forceinline__ float kv_ld(const float *p) { return *p; }
static __device__ __forceinline__ float kv_ld(const uint16_t *p) { return gpu_h2f(*p); }
// four elements from p, 4-element aligned
static __device__ __forceinline__ float4 kv_ld4(const float *p) { return *(const float4 *)p; }
static __device__ __forceinline__ float4 kv_ld4(const uint16_t *p) {
    const uint2 u = *(const uint2 *)p;
    return make_float4(gpu_h2f(u.x & 0xffffu), gpu_h2f(u.x >> 16), gpu_h2f(u.y & 0xffffu),
                       gpu_h2f(u.y >> 16));
}
// eight elements from p, 8-element aligned, as four pairs of halves (floats
// rounded to nearest-even: beyond the half range they become infinite)
static __device__ __forceinline__ uint4 kv_ld8h(const uint16_t *p) { return *(const uint4 *)p; }
static __device__ __forceinline__ uint4 kv_ld8h(const float *p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    return make_uint4(st_f2h2(a.x, a.y), st_f2h2(a.z, a.w), st_f2h2(b.x, b.y), st_f2h2(b.z, b.w));
}
static __device__ __forceinline__ void kv_st(float *p, float x) { *p = x; }
static __device__ __forceinline__ void kv_st(uint16_t *p, float x) { *p = (uint16_t)gpu_f2h(x); }

// --- loads ---------------------------------------------------------------------------
// p must be aligned to the width named; weights and activations are laid out so
// that it is (see gpu_mat).

static __device__ __forceinline__ int4 gpu_ld16(const void *p) { return *(const int4 *)p; }
static __device__ __forceinline__ uint32_t gpu_ld_u16(const void *p) { return *(const uint16_t *)p; }
static __device__ __forceinline__ uint32_t gpu_ld_u32(const void *p) { return *(const uint32_t *)p; }
// A 32-bit word at a 2-byte-aligned address.
static __device__ __forceinline__ uint32_t gpu_ld_u32_a2(const void *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

// --- row reductions -----------------------------------------------------------------

// The largest of the block's values v (GPU_BLOCK threads; every thread of the
// block calls it, and each gets the result). A nan is dropped (fmaxf): a
// caller that must see one passes INFINITY for it.
static __device__ __forceinline__ float gpu_block_max(float v) {
    __shared__ float part[GPU_BLOCK / ST_WARP_SIZE];
    v = st_warp_max_f32(v, ST_WARP_SIZE);
    if (threadIdx.x % ST_WARP_SIZE == 0) part[threadIdx.x / ST_WARP_SIZE] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < GPU_BLOCK / ST_WARP_SIZE; w++) v = fmaxf(v, part[w]);
    return v;
}

// The exponent e of the power of two 2^e that brings a largest magnitude amax
// into [2^14, 2^15) (amax / 2^e): floor(log2 amax) - 14 within [-126, 126],
// a subnormal amax counting as 2^-127; 0 for a zero, infinite or nan amax.
// The half-precision forms of the tensor-core tiles scale by it (their
// activations a row, their weights a matrix), keeping room below the half
// range's 65504 for sums of two.
static __device__ __forceinline__ int gpu_half_exponent(float amax) {
    const uint32_t bits = __float_as_uint(amax);
    if (!(amax > 0.0f) || bits >= 0x7f800000u) return 0; // zero, negative, infinite or nan
    return min(max((int)(bits >> 23) - 127 - 14, -126), 126);
}

// *y = v, or *y += v with add: a product's result, or a residual it adds to.
static __device__ __forceinline__ void gpu_store(float *y, float v, bool add) { *y = add ? *y + v : v; }

// The end of a matrix × vector kernel in which TPR consecutive threads share a
// row (GPU_BLOCK threads a block): sums each thread's partial acc[t] over the
// row's threads and has the row's first lane (lane 0) write y[t·rows + row]
// (add to it, with add) for t < n, when the row is live. Every thread of the block must call it
// (it may synchronise the block).
template <int TPR, int NT>
static __device__ __forceinline__ void gpu_rows_sum_store(float (&acc)[NT], int lane, bool live, int n,
                                                          int64_t row, int64_t rows, float *y, bool add) {
    constexpr int WIDTH = TPR < ST_WARP_SIZE ? TPR : ST_WARP_SIZE;
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = st_warp_sum_f32(acc[t], WIDTH);
    if constexpr (TPR > ST_WARP_SIZE) {
        // the warps of a row are consecutive: the row's first lane sums their parts
        constexpr int W = TPR / ST_WARP_SIZE;
        __shared__ float part[NT][GPU_BLOCK / ST_WARP_SIZE];
        const int warp = threadIdx.x / ST_WARP_SIZE;
        if (threadIdx.x % ST_WARP_SIZE == 0)
#pragma unroll
            for (int t = 0; t < NT; t++) part[t][warp] = acc[t];
        __syncthreads();
        if (lane == 0 && live)
            for (int t = 0; t < NT && t < n; t++) {
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < W; k++) s += part[t][warp + k];
                gpu_store(y + t * rows + row, s, add);
            }
    } else {
        if (lane == 0 && live)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (NT == 1 || t < n) gpu_store(y + t * rows + row, acc[t], add);
    }
}

#endif
