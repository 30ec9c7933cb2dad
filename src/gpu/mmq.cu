// mmq.cu: quantized matrix × matrix for prompt batches, as integer products of
// int8 weights and activations: on tensor cores (mma.sync, NVIDIA sm_80+) or
// on dp4a (four int8 pairs per instruction), which runs on every target of the
// compat layer, the portable form included.
//
// A 256-thread block computes a 64-row × 64-token tile of y, stepping through
// the columns 128 at a time: it unpacks the weight chunks of the step into
// shared memory as int8 with one (d, m) per group of G elements (G = 32 for
// types whose scales cover whole 32-blocks, 16 otherwise) and copies the
// activations' int8 values and per-group (d, d·Σq). Then, per group, the dp4a
// form has each thread form 4 × 4 outputs from integer dots; the tensor-core
// form has each warp take 32 rows × 16 tokens as 2 × 2 tiles of 16 × 8
// (st_mma_s8_k32 for G = 32, _k16 for G = 16). Both scale the group's integer
// sums in float. Checked against the reference by tests/test_ops.c (ragged
// rows, tokens and columns; both forms on every build, the tensor-core one
// through the compat layer's shuffle twin where the target has no mma).
#include "mmq.h"
#include "quants.h"

#define MMQ_BM 64
#define MMQ_BN 64
#define MMQ_BK 128
#define MMQ_LD (MMQ_BK / 4 + 4) // ints per tile row; the 4 extra spread rows over the banks

// A thread's global loads of one step of the columns, staged in registers
// while the step before is computed: its weight chunk (threads below MMQ_BM ·
// chunks per row and step; ok false past the row's end or the matrix) and
// MMQ_XPT activation chunks of 16 bytes with their block's (d, d·Σq).
#define MMQ_XPT (MMQ_BN * (MMQ_BK / 16) / GPU_BLOCK)
template <class Q> struct mmq_stage {
    gpu_chunk<Q::R> c;
    bool ok;
    int4 a[MMQ_XPT];
    float2 ds[MMQ_XPT];
};

template <class Q>
static __device__ __forceinline__ void mmq_fetch(const gpu_mat &w, const gpu_q8 &x, int n, int64_t row0,
                                                 int tok0, int64_t k0, mmq_stage<Q> &s) {
    constexpr int EPI = Q::QK / Q::QI, IPS = MMQ_BK / EPI; // elements per chunk, chunks per row and step
    const int tid = threadIdx.x;
    if (tid < MMQ_BM * IPS) {
        const int64_t row = row0 + tid / IPS;
        const int item = (int)(k0 / EPI) + tid % IPS;
        s.ok = row < w.rows && item < (int)(w.cols / EPI);
        if (s.ok) gpu_load_item<Q>(w, row, item, s.c);
    }
#pragma unroll
    for (int u = 0; u < MMQ_XPT; u++) {
        const int idx = tid + u * GPU_BLOCK, t = tok0 + idx / (MMQ_BK / 16);
        const int64_t k = k0 + 16 * (idx % (MMQ_BK / 16));
        s.a[u] = make_int4(0, 0, 0, 0);
        s.ds[u] = make_float2(0.0f, 0.0f);
        if (t < n && k < x.cols) {
            s.a[u] = gpu_ld16(x.qs + t * x.cols + k);
            s.ds[u] = x.ds[t * (x.cols / 32) + k / 32];
        }
    }
}

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

template <int T, bool MMA>
__global__ void __launch_bounds__(GPU_BLOCK, ST_MIN_BLOCKS(2))
    mmq_kernel(gpu_mat w, gpu_q8 x, float *y, int n, bool add) {
    st_wait_prior(); // no early start for the kernel after: it would hold room the tiles use
    using Q = gpu_qt<T>;
    constexpr int G = Q::PAIRED ? 32 : 16; // elements sharing one weight (d, m)
    constexpr int NG = MMQ_BK / G;         // groups per step
    constexpr int EPI = Q::QK / Q::QI;     // elements per chunk
    constexpr int IPS = MMQ_BK / EPI;      // chunks per row per step
    static_assert(MMQ_BM * IPS <= GPU_BLOCK && MMQ_XPT * GPU_BLOCK == MMQ_BN * (MMQ_BK / 16),
                  "one weight chunk and MMQ_XPT activation chunks a thread and step");
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
    // tensor cores: warp wp takes rows wr .. wr+31 and tokens wt .. wt+15; lane
    // (lg, lt) of its fragments holds rows lg, lg + 8 and tokens 2lt, 2lt + 1
    // of each 16 × 8 tile
    const int wp = tid / 32, lg = tid % 32 / 4, lt = tid % 4;
    const int wr = (wp % 2) * 32, wt = (wp / 2) * 16;
    float acc[4][4]; // dp4a: row ty + 16i, token tx + 16j; mma: tile (i/2, i%2), fragment element j
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    // On tensor cores the next step's loads are in flight while this one is
    // computed (staged in registers); the dp4a form and the tensor-core twin,
    // whose products hold more registers, load each chunk just before storing it.
    constexpr bool AHEAD = MMA && ST_HAS_MMA_S8;
    mmq_stage<Q> st;
    if (AHEAD) mmq_fetch<Q>(w, x, n, row0, tok0, 0, st);
    for (int64_t k0 = 0; k0 < w.cols; k0 += MMQ_BK) {
        if (AHEAD) {
            if (tid < MMQ_BM * IPS) mmq_put_weights<Q, G, NG>(sh, st.c, st.ok, tid / IPS, tid % IPS, k0);
#pragma unroll
            for (int u = 0; u < MMQ_XPT; u++) {
                const int idx = tid + u * GPU_BLOCK;
                mmq_put_acts<G, NG>(sh, st.a[u], st.ds[u], idx / (MMQ_BK / 16), idx % (MMQ_BK / 16));
            }
        } else {
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
        }
        __syncthreads();
        if (AHEAD && k0 + MMQ_BK < w.cols) mmq_fetch<Q>(w, x, n, row0, tok0, k0 + MMQ_BK, st);
#pragma unroll
        for (int g = 0; g < NG && MMA; g++) {
            int dot[4][4] = {}; // tile (mt, nt) at 2·mt + nt
            const int c4 = g * G / 4;
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r = wr + 16 * mt + lg;
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const int t = wt + 8 * nt + lg;
                    if (G == 32) {
                        const int a[4] = {wq[r][c4 + lt], wq[r + 8][c4 + lt], wq[r][c4 + 4 + lt],
                                          wq[r + 8][c4 + 4 + lt]};
                        const int b[2] = {xq[t][c4 + lt], xq[t][c4 + 4 + lt]};
                        st_mma_s8_k32(dot[2 * mt + nt], a, b);
                    } else {
                        const int a[2] = {wq[r][c4 + lt], wq[r + 8][c4 + lt]};
                        const int b[1] = {xq[t][c4 + lt]};
                        st_mma_s8_k16(dot[2 * mt + nt], a, b);
                    }
                }
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
#pragma unroll
                for (int h = 0; h < 2; h++) { // fragment rows lg, lg + 8
                    const int r = wr + 16 * mt + 8 * h + lg;
                    const float d = wd[r][g], m = wm[r][g];
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int t = wt + 8 * nt + 2 * lt + e;
                            float &o = acc[2 * mt + nt][2 * h + e];
                            o += d * xd[t][g] * (float)dot[2 * mt + nt][2 * h + e];
                            if (Q::MIN) o += m * xs[t][g];
                        }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < NG && !MMA; g++) {
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
            const int64_t row = row0 + (MMA ? wr + 16 * (i / 2) + 8 * (j / 2) + lg : ty + 16 * i);
            const int t = tok0 + (MMA ? wt + 8 * (i % 2) + 2 * lt + j % 2 : tx + 16 * j);
            if (row < w.rows && t < n) gpu_store(y + t * w.rows + row, acc[i][j], add);
        }
    }
}

template <int T>
static void mmq_launch(const gpu_mat &w, const gpu_q8 &x, float *y, int n, bool mma, bool add,
                       gpuStream_t s) {
    const dim3 grid((unsigned)gpu_cdiv(n, MMQ_BN), (unsigned)gpu_cdiv(w.rows, MMQ_BM));
    if (mma)
        ST_LAUNCH((mmq_kernel<T, true>), grid, GPU_BLOCK, 0, s, w, x, y, n, add);
    else
        ST_LAUNCH((mmq_kernel<T, false>), grid, GPU_BLOCK, 0, s, w, x, y, n, add);
    GPU_CHECK_LAUNCH();
}

int gpu_mmq(const gpu_mat &w, const gpu_q8 &x, float *y, int n, bool mma, bool add, gpuStream_t s) {
    if (n < 1 || x.cols != w.cols) return -1;
    switch (w.type) {
#define F(T)                                                                                                 \
    mmq_launch<T>(w, x, y, n, mma, add, s);                                                                  \
    return 0
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}
