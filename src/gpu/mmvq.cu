// mmvq.cu: quantized matrix × vector, y (n, rows) = x (n, cols) · Wᵀ for n ≤ 32,
// integer dot products (dp4a) of the weight chunks (quants.h) with activations
// quantized to 8 bits in blocks of 32 (quantize.cu).
//
// One token: TPR threads share a row (the split variant: 16 .. 256; more
// threads for long rows, fewer for short ones); a 256-thread block holds
// 256/TPR rows. Lane l takes the row's chunks l, l + TPR, ... and loads U of
// them before using any, so that every thread keeps several 16-byte loads in
// flight. Both kernels ask for weights before they wait for x (compat.h's
// overlapping launches: the one-token kernel for all its block's rows, the
// rows kernel for each lane's first chunk), so a product's weights start
// streaming while the kernel before it still runs. Several tokens (n = 2..32): 32
// threads share RPW rows (1, 2 or 4) for a group of up to NT tokens (2, 4 or
// 8; one grid row a group), each loaded weight chunk serving every token of
// the group and each loaded activation chunk every one of the RPW rows;
// without that sharing the activations (8 tokens × 32 bytes for an 18-byte
// Q4_0 block) are read from cache many times over, and a large matrix took 6×
// its single-token time. Small groups give a small matrix more warps, each
// with a shorter chain of dot products: at 576 × 576 and 8 tokens, 72 blocks
// of one group ran 2.8× the one-token time. The same rows form serves one
// token where sharing the activations pays (gpu_pick_matvec). Checked
// against the reference by tests/test_ops.c over every type, ragged shapes,
// every TPR, every RPW (one token and several) and every group size.
//
// A launch takes a set of up to GPU_SET_MAX matrices of one type and width
// that share the input (Q, K and V; gate and up): its blocks are cut into one
// range per matrix, each block finding its own, so the set costs one launch.
#include <math.h>

#include "mmvq.h"
#include "quants.h"

// Chunks in flight are loaded raw where the activations' form takes them so
// (gpu_act_swar) and for CB types always: the dp4a form looks a chunk up
// just before its dot product (gpu_iq4_finish), so that the chunks waiting
// on memory hold their index bytes only (IQ4_NL: 44 registers against 60;
// at 14336 x 4096 on an H100, IQ4_NL at 32 threads a row took 14.6 us
// against 15.1, IQ4_XS 15.1 against 15.5).
template <class Q, class A> struct mmvq_load {
    static constexpr bool RAW = Q::CB || (A::RAW && Q::BIAS);
    static constexpr bool FINISH = Q::CB && !A::RAW;
};

// One lane's share of one row: chunks lane, lane + TPR, ..., U loaded before
// any is used, so that every thread keeps several 16-byte loads in flight.
template <class Q, int TPR, class A>
static __device__ __forceinline__ float mmvq_row(const gpu_mat &w, int64_t row, int lane, int items,
                                                 const A &act, const float2 *ds) {
    using L = mmvq_load<Q, A>;
    constexpr int U = 8 / Q::R; // chunks in flight per thread
    float acc = 0.0f;
    int it = lane;
    for (; it + (U - 1) * TPR < items; it += U * TPR) {
        gpu_chunk<Q::R> c[U];
#pragma unroll
        for (int u = 0; u < U; u++) gpu_load_item<Q, L::RAW>(w, row, it + u * TPR, c[u]);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if constexpr (L::FINISH) gpu_iq4_finish(c[u]);
            acc += gpu_chunk_dot<Q>(c[u], act, ds);
        }
    }
    for (; it < items; it += TPR) {
        gpu_chunk<Q::R> c;
        gpu_load_item<Q, L::RAW>(w, row, it, c);
        if constexpr (L::FINISH) gpu_iq4_finish(c);
        acc += gpu_chunk_dot<Q>(c, act, ds);
    }
    return acc;
}

// The SWAR body is built where a device may take it (no native dp4a) and on
// NVIDIA, where the op harness checks it against dp4a; every AMD target has
// dp4a, so there the SWAR instantiation is the dp4a kernel.
#if !ST_HAS_DP4A || defined(__CUDA_ARCH__)
#define MMVQ_SWAR_BUILT 1
#else
#define MMVQ_SWAR_BUILT 0
#endif

// One token. The block asks for its rows (into L2, one request a 128-byte
// line: gpu_prefetch_rows) before st_wait_prior: where launches overlap
// (compat's ST_LAUNCH), the weights stream in while the kernel before this
// one, which writes x, finishes. (Each lane asked for its first chunks
// before: a request for every chunk's bulk, up to eight a line, and one for
// its block's rest. With one a line the 1B-shaped Q4_0 model, whose products
// all take this kernel, went from 1592 and 1595 to 1643 and 1641 tok/s on an
// H100. The rows kernel asking for its whole rows so lost: docs/PERF.md.)
// SWAR (for targets without a native dp4a): the block first stages x in
// shared memory as the words of the SWAR dot product (x.cols / 2 of them,
// the launch's dynamic shared memory), each made once for all the block's
// rows, and for codebook types the table of codebook pairs.
template <int T, int TPR, bool SWAR>
__global__ void __launch_bounds__(GPU_BLOCK) mmvq_kernel(gpu_mat_set set, gpu_q8 x, bool add, int cbs) {
    using Q = gpu_qt<T>;
    st_launch_dependents();
    gpu_mat w;
    float *y;
    const unsigned b = gpu_set_member(set, w, y);
    const int lane = threadIdx.x % TPR;
    const int64_t row = (int64_t)b * (GPU_BLOCK / TPR) + threadIdx.x / TPR;
    const int items = (int)(w.cols / Q::QK * Q::QI);
    const bool live = row < w.rows;
    gpu_prefetch_rows<Q>(w, (int64_t)b * (GPU_BLOCK / TPR), GPU_BLOCK / TPR);
    st_wait_prior();
    float acc[1] = {0.0f};
    if constexpr (SWAR && MMVQ_SWAR_BUILT) {
        extern __shared__ uint4 mmvq_smem[]; // CB types: the pair table's copies; the stage
        if constexpr (Q::CB) {
            uint32_t *cb = (uint32_t *)mmvq_smem;
            uint4 *staged = mmvq_smem + cbs * 256 / 4; // after the table's cbs · 256 words
            gpu_swar_cb_table(cb, cbs);
            gpu_swar_stage_cb(x.qs, x.cols, staged);
            if (live)
                acc[0] = mmvq_row<Q, TPR>(w, row, lane, items,
                                          gpu_act_swar{staged, cb + (threadIdx.x & (cbs - 1)), cbs}, x.ds);
        } else {
            gpu_swar_stage(x.qs, x.cols, mmvq_smem);
            if (live)
                acc[0] = mmvq_row<Q, TPR>(w, row, lane, items, gpu_act_swar{mmvq_smem, nullptr, 0}, x.ds);
        }
    } else {
        if (live) acc[0] = mmvq_row<Q, TPR>(w, row, lane, items, gpu_act_q8{x.qs}, x.ds);
    }
    gpu_rows_sum_store<TPR, 1>(acc, lane, live, 1, row, w.rows, y, add);
}

// Several tokens: grid row g takes tokens g·NT .. g·NT + NT - 1 (those below
// n); a group of 32 threads takes rows row0 .. row0 + RPW - 1 and lane l their
// chunks l, l + 32, ...; the RPW chunks of a step are loaded together, then
// each token's activation chunk is read once for all of them. Rows past the
// end read the last row and store nothing. One token has its own
// instantiation (NT = 1): with NT = 2 the unused second token's sums took
// registers (Q4_K in rows of 4: 117 against 97), and at 14336 x 4096 on an
// H100 the Q4_K product in rows of 4 took 14.0 us against 13.6. Its two-run
// types (R = 2) name a minimum of one block a multiprocessor: nvcc then
// gives them the registers that more loads in flight want (Q4_0 in rows of
// 1: 54 against 32; IQ4_NL in rows of 2: 64 against 48), where without the
// minimum it keeps them few (at 14336 x 4096 on an H100, in one run: Q4_0
// in rows of 1 13.6 us without, 12.8 with a minimum of three, which gave the
// same registers; IQ4_NL in rows of 2 15.8 to 16.3 without, 14.0 with).
// Four-run types keep none (0): with one, Q4_K in rows of 2 took 14.0 us,
// against 13.5 without in another run.
template <int T, int NT, int RPW>
__global__ void __launch_bounds__(GPU_BLOCK, ST_MIN_BLOCKS(NT == 1 && gpu_qt<T>::R == 2 ? 1 : 0))
    mmvq_rows_kernel(gpu_mat_set set, gpu_q8 x, int n, bool add) {
    using Q = gpu_qt<T>;
    constexpr int TPR = 32;
    st_launch_dependents();
    gpu_mat w;
    float *y;
    const unsigned b = gpu_set_member(set, w, y);
    const int t0 = (int)blockIdx.y * NT; // this group's first token
    n = n - t0 < NT ? n - t0 : NT;
    const int lane = threadIdx.x % TPR;
    const int64_t row0 = ((int64_t)b * (GPU_BLOCK / TPR) + threadIdx.x / TPR) * RPW;
    const int items = (int)(w.cols / Q::QK * Q::QI);
    const int64_t xblocks = x.cols / 32;
    const int8_t *xq = x.qs + (int64_t)t0 * x.cols;
    const float2 *xd = x.ds + (int64_t)t0 * xblocks;
    y += (int64_t)t0 * w.rows;
    int64_t rk[RPW];
#pragma unroll
    for (int k = 0; k < RPW; k++) rk[k] = row0 + k < w.rows ? row0 + k : w.rows - 1;
    float acc[RPW][NT];
#pragma unroll
    for (int k = 0; k < RPW; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0.0f;
    if (lane < items)
#pragma unroll
        for (int k = 0; k < RPW; k++) gpu_prefetch_item<Q>(w, rk[k], lane);
    st_wait_prior(); // as in mmvq_kernel
    for (int it = lane; it < items; it += TPR) {
        gpu_chunk<Q::R> c[RPW];
#pragma unroll
        for (int k = 0; k < RPW; k++) gpu_load_item<Q>(w, rk[k], it, c[k]);
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n) {
                float v[RPW];
                gpu_chunk_dot_rows<Q, RPW>(c, gpu_act_q8{xq + t * x.cols}, xd + t * xblocks, v);
#pragma unroll
                for (int k = 0; k < RPW; k++) acc[k][t] += v[k];
            }
    }
#pragma unroll
    for (int k = 0; k < RPW; k++)
        gpu_rows_sum_store<TPR, NT>(acc[k], lane, row0 + k < w.rows, n, row0 + k, w.rows, y, add);
}

template <int T, int TPR>
static void mmvq_launch(gpu_mat_set set, const gpu_q8 &x, bool swar, bool add, gpuStream_t s) {
    const unsigned grid = gpu_set_blocks(set, GPU_BLOCK / TPR);
    if (swar) {
        const int cbs = gpu_qt<T>::CB ? gpu_swar_cb_copies(x.cols) : 0;
        ST_LAUNCH((mmvq_kernel<T, TPR, true>), grid, GPU_BLOCK, (size_t)cbs * 1024 + (size_t)x.cols * 2, s,
                  set, x, add, cbs);
    } else {
        ST_LAUNCH((mmvq_kernel<T, TPR, false>), grid, GPU_BLOCK, 0, s, set, x, add, 0);
    }
    GPU_CHECK_LAUNCH();
}

template <int T, int NT, int RPW>
static void mmvq_rows_launch(gpu_mat_set set, const gpu_q8 &x, int n, bool add, gpuStream_t s) {
    const dim3 grid(gpu_set_blocks(set, GPU_BLOCK / 32 * RPW), (unsigned)gpu_cdiv(n, NT));
    ST_LAUNCH((mmvq_rows_kernel<T, NT, RPW>), grid, GPU_BLOCK, 0, s, set, x, n, add);
    GPU_CHECK_LAUNCH();
}

template <int T, int NT>
static int mmvq_rows(const gpu_mat_set &set, const gpu_q8 &x, int n, int rpw, bool add, gpuStream_t s) {
    switch (rpw) {
    case 1:
        mmvq_rows_launch<T, NT, 1>(set, x, n, add, s);
        return 0;
    case 2:
        mmvq_rows_launch<T, NT, 2>(set, x, n, add, s);
        return 0;
    case 4:
        mmvq_rows_launch<T, NT, 4>(set, x, n, add, s);
        return 0;
    default:
        return -1;
    }
}

template <int T>
static int mmvq_type(const gpu_mat_set &set, const gpu_q8 &x, int n, int tpr, int rpw, int tpg, bool swar,
                     bool add, gpuStream_t s) {
    if (n == 1 && tpr == 0) return mmvq_rows<T, 1>(set, x, n, rpw, add, s); // the rows form, one token
    if (n == 1) {
        switch (tpr) {
        case 16:
            mmvq_launch<T, 16>(set, x, swar, add, s);
            return 0;
        case 32:
            mmvq_launch<T, 32>(set, x, swar, add, s);
            return 0;
        case 64:
            mmvq_launch<T, 64>(set, x, swar, add, s);
            return 0;
        case 128:
            mmvq_launch<T, 128>(set, x, swar, add, s);
            return 0;
        case 256:
            mmvq_launch<T, 256>(set, x, swar, add, s);
            return 0;
        default:
            return -1;
        }
    }
    // groups of tpg tokens, or fewer where n needs no more
    if (tpg == 2 || n == 2) return mmvq_rows<T, 2>(set, x, n, rpw, add, s);
    if (tpg == 4 || n <= 4) return mmvq_rows<T, 4>(set, x, n, rpw, add, s);
    return mmvq_rows<T, 8>(set, x, n, rpw, add, s);
}

// The expert products of matmul_id: one matrix × vector per (token, slot)
// pair (blockIdx.y), with the expert's rows (e·rows .. of the stacked
// matrix) and the pair's activation row. An expert id out of range gives NaN.
template <int T, int TPR>
__global__ void __launch_bounds__(GPU_BLOCK) mmvq_id_kernel(gpu_mat w, gpu_q8 x, float *y, const int32_t *ids,
                                                            int k, int x_slots, int64_t rows, int n_exp) {
    st_launch_begin();
    using Q = gpu_qt<T>;
    const int pair = blockIdx.y, t = pair / k, slot = pair % k;
    const int e = ids[pair];
    const int lane = threadIdx.x % TPR;
    const int64_t r = (int64_t)blockIdx.x * (GPU_BLOCK / TPR) + threadIdx.x / TPR;
    const bool live = r < rows;
    const int items = (int)(w.cols / Q::QK * Q::QI);
    const int64_t xblocks = x.cols / 32;
    const int64_t a = (int64_t)t * x_slots + (x_slots > 1 ? slot : 0);
    float acc[1] = {0.0f};
    if (live && e >= 0 && e < n_exp) {
        const int64_t row = (int64_t)e * rows + r;
        for (int it = lane; it < items; it += TPR) {
            gpu_chunk<Q::R> c;
            gpu_load_item<Q>(w, row, it, c);
            acc[0] += gpu_chunk_dot<Q>(c, gpu_act_q8{x.qs + a * x.cols}, x.ds + a * xblocks);
        }
    } else if (live) {
        acc[0] = NAN;
    }
    gpu_rows_sum_store<TPR, 1>(acc, lane, live, 1, r, rows, y + (int64_t)pair * rows, false);
}

int gpu_mmvq_id(const gpu_mat &w, const gpu_q8 &x, float *y, const int32_t *ids, int n, int k, int x_slots,
                int n_exp, gpuStream_t s) {
    const int64_t rows = w.rows / n_exp;
    if (n < 1 || k < 1 || n_exp < 1 || w.rows % n_exp || x.cols != w.cols) return -1;
    const dim3 grid((unsigned)gpu_cdiv(rows, GPU_BLOCK / 32), (unsigned)(n * k));
    switch (w.type) {
#define F(T)                                                                                                 \
    ST_LAUNCH((mmvq_id_kernel<T, 32>), grid, GPU_BLOCK, 0, s, w, x, y, ids, k, x_slots, rows, n_exp);        \
    GPU_CHECK_LAUNCH();                                                                                      \
    return 0
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}

int gpu_mmvq_items_per_row(int type, int64_t cols) {
    switch (type) {
#define F(T) return (int)(cols / gpu_qt<T>::QK * gpu_qt<T>::QI)
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}

int gpu_pick_tpr(int64_t items, int64_t rows, int n_sm, bool swar) {
    // Short rows: fewer threads, so that no lane idles. Long rows with too few
    // rows to fill the device: more threads per row. The SWAR form stages the
    // activations once a block: half as many threads a row, twice the rows
    // to share the stage (at 14336 x 4096 on the H200, Q4_0 took 11.8 us at
    // 32 and 10.6 at 16).
    int tpr = 32;
    while (tpr > 16 && items <= tpr / 2) tpr /= 2;
    while (tpr < 256 && rows * tpr < (int64_t)n_sm * 2048 && items >= 4 * tpr) tpr *= 2;
    return swar && tpr > 16 ? tpr / 2 : tpr;
}

// The chunks a thread of the dp4a form takes by default, fitted to `test_ops
// --perf` at 14336 x 4096, 4096 x 14336 and 4096 x 4096 (docs/PERF.md, H100,
// weights read from device memory): Q8_0, the cheapest to unpack, was
// fastest at one (128 threads a 4096-wide row: 22.0 us against 25.6 at the
// earlier 32), the codebook types, the dearest, at four, the others at two.
static int mmvq_lane_chunks(int type) {
    switch (type) {
    case GGML_TYPE_Q8_0:
        return 1;
    case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ4_XS:
        return 4;
    default:
        return 2;
    }
}

// The rows a warp of the rows form for one token of a matrix of many rows
// (gpu_pick_matvec), 0 where the threads-a-row form is faster. Four-run
// types (64 activations a chunk), given two chunks a lane or more: their
// activation loads are the largest cost of the one-token products (ncu, Q4_K
// at 14336 x 4096 on an H100: the L1 at 82% of its throughput), which the
// rows form shares among its rows; 2 rows a warp but for Q5_K, 4 (at 14336
// x 4096 on an H100, graph replay: Q2_K 9.95 and 10.01 us at 2 against 10.34
// and 10.29 at 4, Q3_K 15.16 against 15.27, Q4_K 13.31 against 13.42, Q5_K
// 19.21 against 17.92; the figures of an earlier run, Q3_K 17.5 against
// 21.5, timed the rows form's two-token instantiation). Q4_0 in rows of
// 1 and IQ4_NL in rows of 2, given four chunks a lane or more (12.7 us
// against 13.5 at 64 threads a row; 13.7 against 15.2 at 32).
static int mmvq_one_token_rows(int type, int64_t items) {
    int rows = 0, lane_chunks = 2; // the rows a warp, given lane_chunks chunks a lane or more
    switch (type) {
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K:
        rows = 2;
        break;
    case GGML_TYPE_Q5_K:
        rows = 4;
        break;
    case GGML_TYPE_Q4_0:
        rows = 1, lane_chunks = 4;
        break;
    case GGML_TYPE_IQ4_NL:
        rows = 2, lane_chunks = 4;
        break;
    default:
        break;
    }
    return items >= lane_chunks * 32 ? rows : 0;
}

void gpu_pick_matvec(int type, int64_t cols, int64_t rows, int n_sm, int *tpr, int *rpw) {
    // The rows form where the rows are many and the type gains from it
    // (mmvq_one_token_rows; Q4_K at 14336 x 4096: 13.5 us against 15.9 for
    // the best threads per row; at 4096 rows 6.1 against 5.9; narrower rows,
    // as the 1B shape's 16384 x 2048, keep the form they had: the rows form
    // there was measured only together with the change below); otherwise
    // the fewest threads a row from 32 (16 for rows of 16 chunks or fewer:
    // starting at 16 cost the 1B-shaped Q4_K_M model's decode 3-4%) up to
    // 256 that give each at most its type's chunks (mmvq_lane_chunks), more
    // while rows of four chunks a thread or more leave the device short of
    // threads.
    const int64_t items = gpu_mmvq_items_per_row(type, cols);
    *tpr = items <= 16 ? 16 : 32;
    const int one_rows = mmvq_one_token_rows(type, items);
    if (rows >= 8192 && one_rows) {
        *tpr = 0;
        *rpw = one_rows;
        return;
    }
    while (*tpr < 256 && items > (int64_t)mmvq_lane_chunks(type) * *tpr) *tpr *= 2;
    while (*tpr < 256 && rows * *tpr < (int64_t)n_sm * 2048 && items >= 4 * *tpr) *tpr *= 2;
}

// Both picks are fitted to `test_ops --perf-only batch` (every form at the
// test models' decode shapes, n = 8, 16 and 32; docs/PERF.md): 4 rows a warp
// and groups of 4 tokens were the best or near it at most shapes, small
// matrices want more blocks. Fitted on an H100; on the H200 the picks come
// to 1.07x the best form in geometric mean over the table.
int gpu_pick_tpg(int64_t rows, int rpw, int n, int n_sm) {
    // groups of 4; of 2 where a group's blocks would give fewer than half the
    // multiprocessors a block and the batch is not large
    const int64_t blocks = gpu_cdiv(rows, GPU_BLOCK / 32 * rpw);
    return n <= 16 && blocks * 2 < n_sm ? 2 : 4;
}

int gpu_pick_rpw(int64_t rows, int n_sm) {
    // 4 rows a warp; 2 where that leaves less than 3/4 of a block per multiprocessor
    return gpu_cdiv(rows, GPU_BLOCK / 32 * 4) * 4 < (int64_t)n_sm * 3 ? 2 : 4;
}

// The stage in dynamic shared memory, leaving 2 KiB for the kernel's own (at
// least one copy of the codebook's pair table, the partial sums).
bool gpu_mmvq_swar_fits(int64_t cols) { return cols * 2 <= ST_MAX_DYN_SMEM - 2048; }

int gpu_swar_cb_copies(int64_t cols) {
    // at most 16: 32 (32 KiB) left room for only 5 blocks an SM on the H200,
    // where IQ4_NL's SWAR form at 14336 x 4096 took 18.0 us against 17.2 at
    // 16 (19.8 at 1)
    int c = 16;
    while (c > 1 && cols * 2 + (int64_t)c * 1024 > ST_MAX_DYN_SMEM - 1024) c /= 2;
    return c;
}

int gpu_mmvq(const gpu_mat_set &set, const gpu_q8 &x, int n, int tpr, int rpw, int tpg, bool swar, bool add,
             gpuStream_t s) {
    if (n < 1 || n > GPU_MMVQ_MAX_TOKENS || !gpu_set_valid(set, x.cols)) return -1;
    if (n > 1 && tpg != 2 && tpg != 4 && tpg != 8) return -1;
    if (swar && (n > 1 || tpr == 0 || !gpu_mmvq_swar_fits(x.cols))) return -1;
    switch (set.w[0].type) {
#define F(T) return mmvq_type<T>(set, x, n, tpr, rpw, tpg, swar, add, s)
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}
