// mmq.cu: quantized matrix × matrix for prompt batches, in two forms.
//
// Tensor cores (mmh_kernel; NVIDIA sm_80+, the compat layer's twin
// elsewhere): a 256-thread block computes a tile of 128 or 64 rows × 128 or
// 64 tokens of y, stepping through the columns 64 at a time (64 rows, 64
// tokens and 128 columns for types whose chunks spread over 128 elements),
// the largest tile that still gives every multiprocessor a block. It
// unpacks the step's weight chunks into shared memory as halves (value
// (d·q + m) / hscale, the weight's power of two that keeps them in the half
// range; converted once a block), copies the activations' halves (gpu_h16:
// each token's row scaled by a power of two), and each warp takes 32 rows ×
// 16 to 64 tokens as 2 × 2..8 tiles of 16 × 8 (st_mma_f16_k16, fragments by
// st_ldsm_x4) with float sums; the token's scale multiplies the sum once at
// the end. The next step's loads are in flight, staged in registers, while a
// step is computed.
//
// dp4a (mmq_kernel; every target): a 256-thread block computes a 64-row ×
// 64-token tile from the weights unpacked as int8 with one (d, m) per group of
// G elements (G = 32 for types whose scales cover whole 32-blocks, 16
// otherwise) and the activations' 8-bit blocks (gpu_q8); per group each
// thread forms 4 × 4 outputs from integer dots and scales them in float.
//
// Both are checked against the reference by tests/test_ops.c (ragged rows,
// tokens and columns; both forms on every build, the tensor-core one through
// the compat layer's twin where the target has no tensor cores).
#include "mmq.h"
#include "quants.h"

#define MMQ_BM 64
#define MMQ_BN 64
#define MMQ_BK 128
#define MMQ_LD (MMQ_BK / 4 + 4) // ints per tile row; the 4 extra spread rows over the banks

// Shared memory of a step: weights as int8 (rows, MMQ_BK) with one (d, m) per
// group of G elements, activations as int8 (tokens, MMQ_BK) with (d, d·Σq).
template <int NG> struct mmq_smem {
    __align__(16) int wq[MMQ_BM][MMQ_LD];
    __align__(16) int xq[MMQ_BN][MMQ_LD];
    float wd[MMQ_BM][NG], wm[MMQ_BM][NG];
    float xd[MMQ_BN][NG], xs[MMQ_BN][NG];
};

// Chunk ii of row r of the step at column k0 into shared memory; ok false (a
// chunk past the row's end, only on the last step of 32-element types, or of
// a row past the matrix) zero-fills its columns.
template <class Q, int G, int NG>
static __device__ __forceinline__ void mmq_put_weights(mmq_smem<NG> &sh, const gpu_chunk<Q::R> &c, bool ok,
                                                       int r, int ii, int64_t k0) {
    constexpr int EPI = Q::QK / Q::QI;
    if (ok) {
#pragma unroll
        for (int p = 0; p < Q::R; p++) {
            const int col = c.e[p] - (int)k0;
            *(int4 *)&sh.wq[r][col / 4] = make_int4(c.q[p][0], c.q[p][1], c.q[p][2], c.q[p][3]);
            if (col % G == 0) {
                sh.wd[r][col / G] = c.d[p];
                sh.wm[r][col / G] = c.m[p];
            }
        }
    } else {
        for (int k = ii * EPI; k < (ii + 1) * EPI; k += 16) *(int4 *)&sh.wq[r][k / 4] = make_int4(0, 0, 0, 0);
        for (int g = ii * EPI / G; g < (ii + 1) * EPI / G; g++) sh.wd[r][g] = sh.wm[r][g] = 0.0f;
    }
}

// Activation chunk k16 (16 bytes) of tile token tt into shared memory.
template <int G, int NG>
static __device__ __forceinline__ void mmq_put_acts(mmq_smem<NG> &sh, int4 a, float2 ds, int tt, int k16) {
    *(int4 *)&sh.xq[tt][4 * k16] = a;
    if (G == 16) {
        int sum = st_dp4a(0x01010101, a.x, 0);
        sum = st_dp4a(0x01010101, a.y, sum);
        sum = st_dp4a(0x01010101, a.z, sum);
        sum = st_dp4a(0x01010101, a.w, sum);
        sh.xd[tt][k16 * 16 / G] = ds.x;
        sh.xs[tt][k16 * 16 / G] = ds.x * (float)sum;
    } else if (k16 % 2 == 0) {
        sh.xd[tt][k16 / 2] = ds.x;
        sh.xs[tt][k16 / 2] = ds.y;
    }
}

template <int T>
__global__ void __launch_bounds__(GPU_BLOCK, ST_MIN_BLOCKS(2))
    mmq_kernel(gpu_mat w, gpu_q8 x, float *y, int n, bool add) {
    st_wait_prior(); // no early start for the kernel after: it would hold room the tiles use
    using Q = gpu_qt<T>;
    constexpr int G = Q::PAIRED ? 32 : 16; // elements sharing one weight (d, m)
    constexpr int NG = MMQ_BK / G;         // groups per step
    constexpr int EPI = Q::QK / Q::QI;     // elements per chunk
    constexpr int IPS = MMQ_BK / EPI;      // chunks per row per step
    __shared__ mmq_smem<NG> sh;
    auto &wq = sh.wq, &xq = sh.xq;
    auto &wd = sh.wd, &wm = sh.wm, &xd = sh.xd, &xs = sh.xs;

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    // token tiles along x: the blocks that share a tile of weight rows run
    // side by side and read it from L2
    const int64_t row0 = (int64_t)blockIdx.y * MMQ_BM;
    const int tok0 = blockIdx.x * MMQ_BN;
    const int items = (int)(w.cols / EPI);
    const int64_t xblocks = x.cols / 32;
    float acc[4][4]; // row ty + 16i, token tx + 16j
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int64_t k0 = 0; k0 < w.cols; k0 += MMQ_BK) {
        for (int idx = tid; idx < MMQ_BM * IPS; idx += GPU_BLOCK) {
            const int r = idx / IPS, ii = idx % IPS;
            const int64_t row = row0 + r;
            const int item = (int)(k0 / EPI) + ii;
            const bool ok = row < w.rows && item < items;
            gpu_chunk<Q::R> c;
            if (ok) gpu_load_item<Q>(w, row, item, c);
            mmq_put_weights<Q, G, NG>(sh, c, ok, r, ii, k0);
        }
        for (int idx = tid; idx < MMQ_BN * (MMQ_BK / 16); idx += GPU_BLOCK) {
            const int tt = idx / (MMQ_BK / 16), k16 = idx % (MMQ_BK / 16);
            const int t = tok0 + tt;
            const int64_t k = k0 + 16 * k16;
            int4 a = make_int4(0, 0, 0, 0);
            float2 ds = make_float2(0.0f, 0.0f);
            if (t < n && k < x.cols) {
                a = gpu_ld16(x.qs + t * x.cols + k);
                ds = x.ds[t * xblocks + k / 32];
            }
            mmq_put_acts<G, NG>(sh, a, ds, tt, k16);
        }
        __syncthreads();
        // one group at a time: unrolled, the groups' loads overlap and the
        // AMD wave32 targets run out of registers
#pragma unroll 1
        for (int g = 0; g < NG; g++) {
            int dot[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) dot[i][j] = 0;
#pragma unroll
            for (int h = 0; h < G / 16; h++) {
                const int c4 = (g * G + 16 * h) / 4;
                int4 a[4], b[4];
#pragma unroll
                for (int i = 0; i < 4; i++) a[i] = *(const int4 *)&wq[ty + 16 * i][c4];
#pragma unroll
                for (int j = 0; j < 4; j++) b[j] = *(const int4 *)&xq[tx + 16 * j][c4];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        dot[i][j] = st_dp4a(a[i].x, b[j].x, dot[i][j]);
                        dot[i][j] = st_dp4a(a[i].y, b[j].y, dot[i][j]);
                        dot[i][j] = st_dp4a(a[i].z, b[j].z, dot[i][j]);
                        dot[i][j] = st_dp4a(a[i].w, b[j].w, dot[i][j]);
                    }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float d = wd[ty + 16 * i][g], m = wm[ty + 16 * i][g];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[i][j] += d * xd[tx + 16 * j][g] * (float)dot[i][j];
                    if (Q::MIN) acc[i][j] += m * xs[tx + 16 * j][g];
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t row = row0 + ty + 16 * i;
            const int t = tok0 + tx + 16 * j;
            if (row < w.rows && t < n) gpu_store(y + t * w.rows + row, acc[i][j], add);
        }
    }
}

// --- the tensor-core form ------------------------------------------------------------

// A block's tile: BM rows × BN tokens (each 64 or 128), stepping BK = 64
// columns at a time; for a type whose chunks spread over 128 elements
// (Q::SPAN) BK = 128 and the tile is 64 × 64 whatever was asked, so that
// every shape fits the same shared memory. Eight warps, WR along the rows
// (32 rows each) and 8 / WR along the tokens (NT tiles of 8 tokens each).
#define MMH_TILE_LANES 32 // the lanes of one tile product (a 64-lane wave holds two)
template <class Q, int BM_, int BN_> struct mmh_shape {
    static constexpr int BK = Q::SPAN > 64 ? 128 : 64;
    static constexpr int BM = BK == 128 ? 64 : BM_, BN = BK == 128 ? 64 : BN_;
    static constexpr int WR = BM / 32, NT = BN / (8 / WR) / 8;
    static constexpr int XPT = BN * BK / 8 / GPU_BLOCK; // 16-byte activation units a thread and step
    static constexpr int LD = BK / 2 + 4; // words (half pairs) a tile row; 4 more spread rows over the banks
    static constexpr int EPI = Q::QK / Q::QI, IPS = BK / EPI; // elements a chunk, chunks a row and step
    static constexpr int C = BM * IPS;                        // chunks a step: threads 0 .. C-1 take one each
};

// A thread's global loads of one step of the columns, staged in registers
// while the step before is computed: its weight chunk (threads below BM ·
// chunks per row and step; ok false past the row's end or the matrix) and
// XPT units of 8 activation halves.
template <class Q, int BM, int BN> struct mmh_stage {
    gpu_chunk<Q::R> c;
    bool ok;
    uint4 a[mmh_shape<Q, BM, BN>::XPT];
};

template <class Q, int BM, int BN>
static __device__ __forceinline__ void mmh_fetch(const gpu_mat &w, const gpu_h16 &x, int n, int64_t row0,
                                                 int tok0, int64_t k0, mmh_stage<Q, BM, BN> &s) {
    using S = mmh_shape<Q, BM, BN>;
    constexpr int EPI = S::EPI, IPS = S::IPS;
    const int tid = threadIdx.x;
    if (tid < S::C) {
        const int64_t row = row0 + tid / IPS;
        const int item = (int)(k0 / EPI) + tid % IPS;
        s.ok = row < w.rows && item < (int)(w.cols / EPI);
        if (s.ok) gpu_load_item<Q>(w, row, item, s.c);
    }
#pragma unroll
    for (int u = 0; u < S::XPT; u++) {
        const int idx = tid + u * GPU_BLOCK, t = tok0 + idx / (S::BK / 8);
        const int64_t k = k0 + 8 * (idx % (S::BK / 8));
        s.a[u] = make_uint4(0, 0, 0, 0);
        if (t < n && k < x.cols) s.a[u] = *(const uint4 *)(x.h + t * x.cols + k);
    }
}

// Shared memory of a step: weights (BM, BK) and activations (BN, BK) as
// halves, two to a word, rows padded to LD words.
template <class Q, int BM, int BN> struct mmh_smem {
    using S = mmh_shape<Q, BM, BN>;
    __align__(16) uint32_t a[S::BM][S::LD];
    __align__(16) uint32_t b[S::BN][S::LD];
};

// The four int8 values of q (element order) as two pairs of halves, d·q + m
// each (d and m already over hscale): the byte with its sign bit flipped,
// under the exponent bits of 1024, is the half 1152 + q, less 1152 exactly;
// then one multiply-add, rounded once.
static __device__ __forceinline__ void mmh_dequant4(uint32_t q, uint32_t d2, uint32_t m2, uint32_t &lo,
                                                    uint32_t &hi) {
    const uint32_t u = q ^ 0x80808080u;
    const uint32_t m1152 = 0xE480E480u; // -1152, twice
    lo = st_h2_fma(st_h2_add(st_byte_perm(u, 0x64646464u, 0x4140), m1152), d2, m2);
    hi = st_h2_fma(st_h2_add(st_byte_perm(u, 0x64646464u, 0x4342), m1152), d2, m2);
}

// Chunk ii of row r of the step at column k0 into shared memory as halves,
// the values times inv (the weight's 1/hscale); ok false (a chunk past the
// row's end, only on the last step of 32-element types, or of a row past the
// matrix) zero-fills columns ii·EPI .. (the step's chunks together cover the
// step's window either way).
template <class Q, int BM, int BN>
static __device__ __forceinline__ void mmh_put_weights(mmh_smem<Q, BM, BN> &sh, const gpu_chunk<Q::R> &c,
                                                       bool ok, int r, int ii, int64_t k0, float inv) {
    using S = mmh_shape<Q, BM, BN>;
    constexpr int EPI = S::EPI;
    if (ok) {
#pragma unroll
        for (int p = 0; p < Q::R; p++) {
            const int col = c.e[p] - (int)k0;
            const float d = c.d[p] * inv, m = c.m[p] * inv;
            const uint32_t d2 = st_f2h2(d, d), m2 = st_f2h2(m, m);
            uint32_t h[8];
#pragma unroll
            for (int i = 0; i < 4; i++) mmh_dequant4((uint32_t)c.q[p][i], d2, m2, h[2 * i], h[2 * i + 1]);
            *(uint4 *)&sh.a[r][col / 2] = make_uint4(h[0], h[1], h[2], h[3]);
            *(uint4 *)&sh.a[r][col / 2 + 4] = make_uint4(h[4], h[5], h[6], h[7]);
        }
    } else {
        for (int k = ii * EPI; k < (ii + 1) * EPI; k += 8) *(uint4 *)&sh.a[r][k / 2] = make_uint4(0, 0, 0, 0);
    }
}

// The steps of 16 columns: unrolled where the tiles are real; the compat
// layer's twin elsewhere (many instructions a tile product) would pass
// clang's unrolling limit at the widest tiles.
#if ST_HAS_MMA
#define MMH_UNROLL _Pragma("unroll")
#else
#define MMH_UNROLL _Pragma("unroll 1")
#endif

// Two blocks a multiprocessor where the tiles are real; the twin of the other
// targets holds more registers (on wave64 AMD targets one block fits).
template <int T, int BM, int BN>
__global__ void __launch_bounds__(GPU_BLOCK, ST_MIN_BLOCKS(ST_HAS_MMA ? 2 : 1))
    mmh_kernel(gpu_mat_set set, gpu_h16 x, int n, bool add) {
    st_wait_prior(); // no early start for the kernel after: it would hold room the tiles use
    using Q = gpu_qt<T>;
    using S = mmh_shape<Q, BM, BN>;
    constexpr int IPS = S::IPS, NT = S::NT;
    static_assert(S::BK % Q::SPAN == 0 && S::C <= GPU_BLOCK && S::XPT * GPU_BLOCK * 8 == S::BN * S::BK &&
                      NT % 2 == 0 && sizeof(mmh_smem<Q, BM, BN>) <= 48 * 1024,
                  "whole chunks, one weight chunk and XPT activation units a thread and step, "
                  "tiles in pairs, static shared memory");
    __shared__ mmh_smem<Q, BM, BN> sh;

    const int tid = threadIdx.x, lane = tid % MMH_TILE_LANES;
    // token tiles along x: the blocks that share a tile of weight rows run
    // side by side and read it from L2
    gpu_mat w;
    float *y;
    const int64_t row0 = (int64_t)gpu_set_member_at(set, blockIdx.y, w, y) * S::BM;
    const int tok0 = blockIdx.x * S::BN;
    // warp wp takes rows wr .. wr+31 and tokens wt .. wt+8·NT-1; lane (lg, lt) of
    // its fragments holds rows lg, lg + 8 and tokens 2lt, 2lt + 1 of each 16 × 8 tile
    const int wp = tid / MMH_TILE_LANES, lg = lane / 4, lt = lane % 4;
    const int wr = (wp % S::WR) * 32, wt = (wp / S::WR) * 8 * NT;
    float acc[2][NT][4] = {}; // tile (mt, nt), fragment element j

    const float ws = *w.hscale, inv = 1.0f / ws; // powers of two: exact
    mmh_stage<Q, BM, BN> st;
    mmh_fetch<Q, BM, BN>(w, x, n, row0, tok0, 0, st);
    for (int64_t k0 = 0; k0 < w.cols; k0 += S::BK) {
        if (tid < S::C) mmh_put_weights<Q, BM, BN>(sh, st.c, st.ok, tid / IPS, tid % IPS, k0, inv);
#pragma unroll
        for (int u = 0; u < S::XPT; u++) {
            const int idx = tid + u * GPU_BLOCK;
            *(uint4 *)&sh.b[idx / (S::BK / 8)][4 * (idx % (S::BK / 8))] = st.a[u];
        }
        __syncthreads();
        if (k0 + S::BK < w.cols) mmh_fetch<Q, BM, BN>(w, x, n, row0, tok0, k0 + S::BK, st);
        MMH_UNROLL
        for (int kk = 0; kk < S::BK / 16; kk++) {
            uint32_t af[2][4], bf[NT / 2][4];
            // A: rows lane % 16, k 8 (lane / 16) ..; B: tokens 8 (lane / 16) + lane % 8, k 8 (lane / 8 % 2) ..
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                st_ldsm_x4(af[mt], &sh.a[0][0],
                           (wr + 16 * mt + lane % 16) * S::LD + 8 * kk + 4 * (lane / 16));
#pragma unroll
            for (int np = 0; np < NT / 2; np++)
                st_ldsm_x4(bf[np], &sh.b[0][0],
                           (wt + 16 * np + 8 * (lane / 16) + lane % 8) * S::LD + 8 * kk + 4 * (lane / 8 % 2));
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const uint32_t b[2] = {bf[nt / 2][2 * (nt % 2)], bf[nt / 2][2 * (nt % 2) + 1]};
                    st_mma_f16_k16(acc[mt][nt], af[mt], b);
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int t = tok0 + wt + 8 * nt + 2 * lt + e;
            if (t >= n) continue;
            const float sc = x.sc[t] * ws;
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t row = row0 + wr + 16 * mt + 8 * h + lg;
                    if (row < w.rows) gpu_store(y + t * w.rows + row, acc[mt][nt][2 * h + e] * sc, add);
                }
        }
}

template <int T>
static void mmq_launch(const gpu_mat &w, const gpu_q8 &x, float *y, int n, bool add, gpuStream_t s) {
    const dim3 grid((unsigned)gpu_cdiv(n, MMQ_BN), (unsigned)gpu_cdiv(w.rows, MMQ_BM));
    ST_LAUNCH((mmq_kernel<T>), grid, GPU_BLOCK, 0, s, w, x, y, n, add);
    GPU_CHECK_LAUNCH();
}

template <int T, int BM, int BN>
static void mmh_go(gpu_mat_set set, const gpu_h16 &x, int n, bool add, gpuStream_t s) {
    using S = mmh_shape<gpu_qt<T>, BM, BN>;
    const unsigned row_blocks = gpu_set_blocks(set, S::BM);
    ST_LAUNCH((mmh_kernel<T, S::BM, S::BN>), dim3((unsigned)gpu_cdiv(n, S::BN), row_blocks), GPU_BLOCK, 0, s,
              set, x, n, add);
}

// Tiles of bm rows × bn tokens as asked (0: either); among those, the largest
// (in the order 128 × 128, 64 × 128, 128 × 64, 64 × 64) that gives each of the
// device's n_sm multiprocessors a block, else the smallest.
template <int T>
static void mmh_launch(const gpu_mat_set &set, const gpu_h16 &x, int n, bool add, int bm, int bn, int n_sm,
                       gpuStream_t s) {
    int64_t rows = 0;
    for (int i = 0; i < set.count; i++) rows += set.w[i].rows;
    static const int tiles[4][2] = {{128, 128}, {64, 128}, {128, 64}, {64, 64}};
    const bool small = gpu_qt<T>::SPAN > 64; // one tile shape: 64 × 64
    int k = -1;
    for (int i = 0; i < 4; i++) {
        if ((bm && tiles[i][0] != bm) || (bn && tiles[i][1] != bn)) continue;
        k = i;
        const int tm = small ? 64 : tiles[i][0], tn = small ? 64 : tiles[i][1];
        if (gpu_cdiv(n, tn) * gpu_cdiv(rows, tm) >= (int64_t)n_sm) break;
    }
    switch (k) {
    case 0:
        mmh_go<T, 128, 128>(set, x, n, add, s);
        break;
    case 1:
        mmh_go<T, 64, 128>(set, x, n, add, s);
        break;
    case 2:
        mmh_go<T, 128, 64>(set, x, n, add, s);
        break;
    default:
        mmh_go<T, 64, 64>(set, x, n, add, s);
    }
    GPU_CHECK_LAUNCH();
}

int gpu_mmq(const gpu_mat &w, const gpu_q8 &x, float *y, int n, bool add, gpuStream_t s) {
    if (n < 1 || x.cols != w.cols) return -1;
    switch (w.type) {
#define F(T)                                                                                                 \
    mmq_launch<T>(w, x, y, n, add, s);                                                                       \
    return 0
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}

int gpu_mmh(const gpu_mat_set &set, const gpu_h16 &x, int n, bool add, int bm, int bn, int n_sm,
            gpuStream_t s) {
    if (n < 1 || !gpu_set_valid(set, x.cols) || (bm != 0 && bm != 64 && bm != 128) ||
        (bn != 0 && bn != 64 && bn != 128))
        return -1;
    switch (set.w[0].type) {
#define F(T)                                                                                                 \
    mmh_launch<T>(set, x, n, add, bm, bn, n_sm, s);                                                          \
    return 0
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}
