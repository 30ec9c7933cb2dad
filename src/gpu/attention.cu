// attention.cu: the KV cache: storing a batch's keys and values, and causal
// grouped-query attention over it, one query row per block, with a score
// scale, optional soft-capping of the scores and an optional sliding window.
// Each row carries its own position and cache region (backend.h's batch_rows),
// so the rows of several sequences run in one launch.
//
// A block takes one (head, token, key range) in rounds of 128 keys (on 32-lane
// warps), dealt out to the warps in turn: each lane scores one key, and each
// warp keeps a running max, sum and weighted value sum of its keys (online
// softmax), four value columns a lane; the warps are merged through shared
// memory. A long context is cut into n_split equal ranges of the row's keys,
// whose partial results (unnormalised output, max, sum) a second kernel
// merges, so that decode (one token, few heads) still fills the device. The
// query sits in shared memory.
//
// A prompt chunk (a run of rows of one sequence at consecutive positions)
// goes to the tile kernel instead, in which every key and value row read
// serves many queries: a block takes a kv head and qr consecutive rows, the
// (row, head) pairs of its group shared out four to a warp; tiles of KT keys
// and values are staged in shared memory, each lane scores one key against
// its warp's four queries, and the online softmax's weights go through shared
// memory to the lanes that accumulate the output, one value column a lane.
// Where the device has tensor cores, prompt runs with head sizes that are
// multiples of 16 up to 128 take attn_mma_kernel instead: the same walk over
// key tiles with both products (Q·K^T and P·V) on half-precision tiles.
// Checked against the reference (double, two-pass softmax) by tests/test_ops.c.
#include <math.h>

#include "attention.h"
#include "quantize.h"

#define ATT_THREADS 128

// Row qi of out (hd values, a multiple of 32, just written by this block)
// stored again in its 8-bit form, in a loop of its own after a barrier: the
// quantizing store shuffles, and PoCL (sub-groups built on work-group
// barriers) ran it wrongly inside the loop that computed the values under a
// lane-dependent branch (the op harness's attention-then-product checks).
// Every thread of the block calls it.
static __device__ __forceinline__ void attn_store_q8(const float *row, int hd, int8_t *oq, float2 *od,
                                                     int64_t qi) {
    __syncthreads();
    for (int d0 = 0; d0 < hd; d0 += blockDim.x) {
        const int d = d0 + threadIdx.x;
        const bool live = d < hd;
        gpu_q8_store1(live ? row[d] : 0.0f, live, oq, od, (qi * hd + d) / GPU_Q8_BLOCK, d % GPU_Q8_BLOCK);
    }
}

template <int MAXD, typename KV>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_kernel(const float *q, const KV *kc, const KV *vc, float *out, int8_t *oq, float2 *od, float *part,
                const int32_t *pos, const int32_t *base, int n_head, int group, int hd, int kv_dim,
                int n_split, float scale, float softcap, int window) {
    st_launch_begin();
    constexpr int W = ST_WARP_SIZE, ATT_WARPS = ATT_THREADS / W;
    constexpr int NG = (MAXD + 4 * W - 1) / (4 * W); // groups of 4 output values a lane
    const int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z;
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    const int kvh = h / group;
    const int n_kv = pos[t] + 1;
    kc += (int64_t)base[t] * kv_dim + (int64_t)kvh * hd;
    vc += (int64_t)base[t] * kv_dim + (int64_t)kvh * hd;
    // The row's keys (those in the window) cut into n_split equal ranges.
    const int lo = window > 0 ? max(0, n_kv - window) : 0;
    const int chunk = (n_kv - lo + n_split - 1) / n_split;
    const int j0 = lo + sp * chunk, j1 = min(j0 + chunk, n_kv);
    const float inv_cap = softcap > 0 ? 1.0f / softcap : 0.0f;
    const float *qh = q + ((int64_t)t * n_head + h) * hd;
    __shared__ __align__(16) float qsh[MAXD]; // the query, scaled
    __shared__ float ps[ATT_WARPS][W];        // each warp's softmax weights of its keys
    for (int d = threadIdx.x; d < MAXD; d += ATT_THREADS) qsh[d] = d < hd ? qh[d] * scale : 0.0f;
    float o[4 * NG]; // output values 4·(lane + W·g) + c of the warp's keys
#pragma unroll
    for (int i = 0; i < 4 * NG; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const bool vec = hd % 4 == 0; // rows read 4 values at a time
    // A round takes ATT_WARPS · W keys, one a lane, dealt out in turn to the
    // warps (key jb + ATT_WARPS·lane + warp), so that a short range keeps
    // every warp busy: each lane scores its own key (its row's loads all
    // independent), the warp's weights go through shared memory, then each
    // lane sums 4 value columns (one 16-byte load a key) over the warp's keys.
    // Every round, barrier and warp reduction is in block-uniform control
    // flow, which OpenCL devices that build sub-group operations on
    // work-group barriers (PoCL's CPU device) require.
    for (int jb = j0; jb < j1; jb += ATT_WARPS * W) {
        __syncthreads(); // the query stored; the last round's weights used
        const int j = jb + ATT_WARPS * lane + warp;
        const bool live = j < j1;
        const KV *kr = kc + (int64_t)(live ? j : j0) * kv_dim;
        float s = 0.0f;
        if (vec) {
            ST_UNROLL(8)
            for (int d = 0; d < hd; d += 4) {
                const float4 kk = kv_ld4(kr + d), qq = *(const float4 *)&qsh[d];
                s = fmaf(qq.w, kk.w, fmaf(qq.z, kk.z, fmaf(qq.y, kk.y, fmaf(qq.x, kk.x, s))));
            }
        } else {
            for (int d = 0; d < hd; d++) s = fmaf(qsh[d], kv_ld(kr + d), s);
        }
        if (softcap > 0) s = softcap * tanhf(s * inv_cap);
        s = live ? s : -INFINITY;
        const float mn = fmaxf(m, st_warp_max_f32(s, W));
        const float ms = mn == -INFINITY ? 0.0f : mn; // no key yet: nothing to rescale
        const float corr = expf(m - ms), p = live ? expf(s - ms) : 0.0f;
        l = l * corr + st_warp_sum_f32(p, W);
        m = mn;
        ps[warp][lane] = p;
#pragma unroll
        for (int i = 0; i < 4 * NG; i++) o[i] *= corr;
        __syncthreads(); // the weights stored
        // the warp's keys: lanes 0 .. nk-1 (none when ≤ 0)
        const int nk = min(W, (j1 - jb - warp + ATT_WARPS - 1) / ATT_WARPS);
        if (vec) {
            ST_UNROLL(8)
            for (int k = 0; k < nk; k++) {
                const float pk = ps[warp][k];
                const KV *vr = vc + (int64_t)(jb + ATT_WARPS * k + warp) * kv_dim;
#pragma unroll
                for (int g = 0; g < NG; g++) {
                    const int d = 4 * (lane + W * g);
                    if (d < hd) {
                        const float4 vv = kv_ld4(vr + d);
                        o[4 * g] = fmaf(pk, vv.x, o[4 * g]);
                        o[4 * g + 1] = fmaf(pk, vv.y, o[4 * g + 1]);
                        o[4 * g + 2] = fmaf(pk, vv.z, o[4 * g + 2]);
                        o[4 * g + 3] = fmaf(pk, vv.w, o[4 * g + 3]);
                    }
                }
            }
        } else {
            for (int k = 0; k < nk; k++) {
                const float pk = ps[warp][k];
                const KV *vr = vc + (int64_t)(jb + ATT_WARPS * k + warp) * kv_dim;
#pragma unroll
                for (int i = 0; i < 4 * NG; i++) {
                    const int d = 4 * (lane + W * (i / 4)) + i % 4;
                    if (d < hd) o[i] = fmaf(pk, kv_ld(vr + d), o[i]);
                }
            }
        }
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    __shared__ float so[ATT_WARPS][MAXD];
    if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
    for (int g = 0; g < NG; g++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int d = 4 * (lane + W * g) + c;
            if (d < MAXD) so[warp][d] = o[4 * g + c];
        }
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, sm[w]);
    float f[ATT_WARPS], sum = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - mx); // a warp with no keys adds nothing
        sum += sl[w] * f[w];
    }
    const int64_t qi = (int64_t)t * n_head + h;
    for (int d0 = 0; d0 < hd; d0 += ATT_THREADS) {
        const int d = d0 + threadIdx.x;
        const bool live = d < hd;
        float acc = 0.0f;
        if (live)
            for (int w = 0; w < ATT_WARPS; w++) acc += so[w][d] * f[w];
        if (n_split > 1) {
            if (live) part[(qi * n_split + sp) * (hd + 2) + d] = acc;
            continue;
        }
        if (live) out[qi * hd + d] = acc / sum;
    }
    if (oq && n_split == 1) attn_store_q8(out + qi * hd, hd, oq, od, qi);
    if (n_split > 1 && threadIdx.x == 0) {
        part[(qi * n_split + sp) * (hd + 2) + hd] = mx;
        part[(qi * n_split + sp) * (hd + 2) + hd + 1] = sum;
    }
}

// (row, head) pairs a warp of the tile kernel takes at once, and pairs a block
// aims at (on 32-lane warps: four warps of four).
#define ATT_TILE_PAIRS 4
#define ATT_TILE_QUERIES 16

// The rows of a run (positions p0 ..) that block (kv head, blockIdx.y) of a
// prompt-run kernel takes, qr a block: rows r0 .. r0 + rows - 1, the last at
// position plast; the first key any of them sees (jlo; 0 without a window);
// and the offset of the run's first cache row at the block's kv head.
struct attn_run_block {
    int r0, rows, plast, jlo;
    int64_t kv;
};
static __device__ __forceinline__ attn_run_block attn_run_span(int p0, int nr, int qr, int window, int base,
                                                               int kv_dim, int hd) {
    attn_run_block b;
    b.r0 = (int)blockIdx.y * qr;
    b.rows = min(qr, nr - b.r0);
    b.plast = p0 + b.r0 + b.rows - 1;
    b.jlo = window > 0 ? max(0, p0 + b.r0 - window + 1) : 0;
    b.kv = (int64_t)base * kv_dim + (int64_t)blockIdx.x * hd;
    return b;
}

// Rows base + 0 .. of the caches (rows, kv_dim) are the run's sequence; row i
// of the run (q and out rows i: (n_head, hd)) is at position p0 + i. Block
// (kvh, b) takes rows b·qr .. of the run and the group's heads kvh·group ..
// hd % 4 == 0 (16-byte rows in shared memory).
template <int MAXD, int KT, typename KV>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_tile_kernel(const float *q, const KV *kc, const KV *vc, float *out, int base, int p0, int nr,
                     int n_head, int group, int hd, int kv_dim, int qr, float scale, float softcap,
                     int window) {
    st_wait_prior(); // as mmq_kernel: the kernel after starts when this one ends
    constexpr int W = ST_WARP_SIZE, NW = ATT_THREADS / W, P = ATT_TILE_PAIRS;
    constexpr int NV = (MAXD + W - 1) / W, KLD = MAXD + 4; // KLD: key rows spread over the banks
    __shared__ __align__(16) float qs[NW][P][MAXD];        // the warps' queries, scaled
    __shared__ __align__(16) float ks[KT][KLD];
    __shared__ __align__(16) float vs[KT][MAXD];
    __shared__ float ps[NW][P][KT]; // softmax weights of the tile's keys
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    const attn_run_block rb = attn_run_span(p0, nr, qr, window, base, kv_dim, hd);
    const int kvh = blockIdx.x, r0 = rb.r0, rows = rb.rows, pairs = rows * group, plast = rb.plast,
              jlo = rb.jlo;
    const float inv_cap = softcap > 0 ? 1.0f / softcap : 0.0f;
    kc += rb.kv, vc += rb.kv;
    // Every loop bound below is the block's, so that every barrier and warp
    // reduction is in block-uniform control flow (PoCL builds sub-group
    // operations on work-group barriers).
    const int passes = (qr * group + NW * P - 1) / (NW * P);
    for (int pass = 0; pass < passes; pass++) {
        bool ok[P];
        int pk[P], lk[P]; // the pair's position and first key
        int64_t off[P];   // its row of q and out
        float m[P], l[P], o[P][NV];
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int pi = (pass * NW + warp) * P + k, i = pi / group;
            ok[k] = pi < pairs;
            pk[k] = p0 + r0 + i;
            lk[k] = window > 0 ? pk[k] - window + 1 : 0;
            off[k] = ((int64_t)(r0 + i) * n_head + (int64_t)kvh * group + pi % group) * hd;
            for (int d = lane; d < MAXD; d += W)
                qs[warp][k][d] = ok[k] && d < hd ? q[off[k] + d] * scale : 0.0f;
            m[k] = -INFINITY, l[k] = 0.0f;
#pragma unroll
            for (int i2 = 0; i2 < NV; i2++) o[k][i2] = 0.0f;
        }
        for (int j0 = jlo; j0 <= plast; j0 += KT) {
            __syncthreads(); // the last tile consumed, the queries stored
            for (int idx = threadIdx.x; idx < KT * (MAXD / 4); idx += ATT_THREADS) {
                const int jj = idx / (MAXD / 4), d = 4 * (idx % (MAXD / 4)), j = j0 + jj;
                float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
                if (j <= plast && d < hd) {
                    kv = kv_ld4(kc + (int64_t)j * kv_dim + d);
                    vv = kv_ld4(vc + (int64_t)j * kv_dim + d);
                }
                *(float4 *)&ks[jj][d] = kv;
                *(float4 *)&vs[jj][d] = vv;
            }
            __syncthreads();
            // lane jj scores key j0 + jj against the warp's queries
            const int jj = lane < KT ? lane : KT - 1, j = j0 + lane;
            float sc[P];
#pragma unroll
            for (int k = 0; k < P; k++) sc[k] = 0.0f;
#pragma unroll 4
            for (int d = 0; d < MAXD; d += 4) {
                const float4 kk = *(const float4 *)&ks[jj][d];
#pragma unroll
                for (int k = 0; k < P; k++) {
                    const float4 qq = *(const float4 *)&qs[warp][k][d];
                    sc[k] = fmaf(qq.w, kk.w, fmaf(qq.z, kk.z, fmaf(qq.y, kk.y, fmaf(qq.x, kk.x, sc[k]))));
                }
            }
#pragma unroll
            for (int k = 0; k < P; k++) {
                float s = sc[k];
                if (softcap > 0) s = softcap * tanhf(s * inv_cap);
                const bool live = ok[k] && lane < KT && j <= pk[k] && j >= lk[k];
                s = live ? s : -INFINITY;
                const float mn = fmaxf(m[k], st_warp_max_f32(s, W));
                const float ms = mn == -INFINITY ? 0.0f : mn; // no key yet: nothing to rescale
                const float corr = expf(m[k] - ms), p = live ? expf(s - ms) : 0.0f;
                l[k] = l[k] * corr + st_warp_sum_f32(p, W);
                m[k] = mn;
#pragma unroll
                for (int i2 = 0; i2 < NV; i2++) o[k][i2] *= corr;
                if (lane < KT) ps[warp][k][lane] = p;
            }
            __syncthreads(); // the weights stored
            for (int t = 0; t < KT; t++)
#pragma unroll
                for (int k = 0; k < P; k++) {
                    const float p = ps[warp][k][t];
#pragma unroll
                    for (int i2 = 0; i2 < NV; i2++) {
                        const int d = lane + W * i2;
                        if (d < MAXD) o[k][i2] = fmaf(p, vs[t][d], o[k][i2]);
                    }
                }
        }
#pragma unroll
        for (int k = 0; k < P; k++)
#pragma unroll
            for (int i2 = 0; i2 < NV; i2++) {
                const int d = lane + W * i2;
                if (ok[k] && d < hd) out[off[k] + d] = o[k][i2] / l[k];
            }
        __syncthreads(); // the queries read before the next pass stores its own
    }
}

// A prompt run on tensor cores (st_mma_f16_k16), for head sizes that are
// multiples of 16 up to D; arguments and layouts as attn_tile_kernel's. Each
// unit of 32 lanes takes 16 (row, head) pairs of the block's kv head, four
// units a block. The queries, times the score scale, are rounded to halves
// once, each pair's scaled by the power of two that brings its largest
// magnitude into [2^14, 2^15) (as gpu_quantize_f16 does a row), and kept in
// registers as A fragments; tiles of ATT_MMA_KT keys and values are staged in
// shared memory as halves (a float cache's rounded to nearest), rows padded so
// that ldmatrix reads every bank once. The scores S = Q·K^T come out of the
// tiles in float and are unscaled, soft-capped and masked there; the online
// softmax's weights P are rounded to halves and go straight from the scores'
// registers into the A fragments of O += P·V (the values read through the
// transposed ldmatrix), and the running sum adds the rounded weights, so that
// each output is the weighted mean of its values with exactly the weights the
// tiles multiplied. The error bound: tests/test_ops.c (attn_mma_bounds).
#define ATT_MMA_KT 64    // keys a tile
#define ATT_MMA_LANES 32 // lanes of one tile product (a 64-lane wave holds two units)
#define ATT_MMA_PAIRS (ATT_THREADS / ATT_MMA_LANES * 16) // (row, head) pairs a block

template <int D, typename KV>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_mma_kernel(const float *q, const KV *kc, const KV *vc, float *out, int base, int p0, int nr,
                    int n_head, int group, int hd, int kv_dim, int qr, float scale, float softcap,
                    int window) {
    st_wait_prior(); // as mmq_kernel: the kernel after starts when this one ends
    constexpr int KT = ATT_MMA_KT, LDW = (D + 8) / 2; // words a staged row (8 halves more: no bank conflicts)
    constexpr int NU = KT * D / 8 / ATT_THREADS;      // 16-byte units a thread stages of K, and of V
    constexpr int KK = D / 16, NT = KT / 8, DT = D / 8; // 16-dim steps; 8-key and 8-dim tiles
    static_assert(NU * ATT_THREADS * 8 == KT * D && DT % 2 == 0, "whole units a thread, dim tiles in pairs");
    __shared__ __align__(16) uint32_t ks[KT * LDW]; // key rows (KT, D) as halves
    __shared__ __align__(16) uint32_t vs[KT * LDW]; // value rows likewise
    const int tid = threadIdx.x, unit = tid / ATT_MMA_LANES, lane = tid % ATT_MMA_LANES;
    const int lg = lane / 4, lt = lane % 4; // fragment row (pairs lg, lg + 8) and column pair
    const attn_run_block rb = attn_run_span(p0, nr, qr, window, base, kv_dim, hd);
    const int kvh = blockIdx.x, r0 = rb.r0, rows = rb.rows, pairs = rows * group, plast = rb.plast,
              jlo = rb.jlo;
    const float inv_cap = softcap > 0 ? 1.0f / softcap : 0.0f;
    kc += rb.kv, vc += rb.kv;
    // Every loop bound below is the block's (block-uniform control flow for
    // every barrier and shuffle, as in attn_tile_kernel).
    const int passes = (qr * group + ATT_MMA_PAIRS - 1) / ATT_MMA_PAIRS;
    for (int pass = 0; pass < passes; pass++) {
        bool ok[2];
        int pk[2], lk[2]; // each pair's position and first key
        int64_t off[2];   // its row of q and out
        float unsc[2];    // 2^e: the scores' scale back
        uint32_t qa[KK][4];
#pragma unroll
        for (int h = 0; h < 2; h++) { // pairs lg (h = 0) and lg + 8
            const int pi = pass * ATT_MMA_PAIRS + unit * 16 + lg + 8 * h, i = pi / group;
            ok[h] = pi < pairs;
            pk[h] = p0 + r0 + i;
            lk[h] = window > 0 ? pk[h] - window + 1 : 0;
            off[h] = ((int64_t)(r0 + i) * n_head + (int64_t)kvh * group + pi % group) * hd;
            // dims 16kk + 2lt, +1 and 16kk + 8 + 2lt, +1: the pair's A fragment columns
            float x[KK][4];
            float amax = 0.0f;
            bool bad = false;
#pragma unroll
            for (int kk = 0; kk < KK; kk++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int d = 16 * kk + 8 * c + 2 * lt;
                    float2 v = make_float2(0.0f, 0.0f);
                    if (ok[h] && d < hd) v = *(const float2 *)(q + off[h] + d);
                    x[kk][2 * c] = v.x * scale, x[kk][2 * c + 1] = v.y * scale;
                    amax = fmaxf(amax, fmaxf(fabsf(x[kk][2 * c]), fabsf(x[kk][2 * c + 1])));
                    bad |= x[kk][2 * c] != x[kk][2 * c] || x[kk][2 * c + 1] != x[kk][2 * c + 1];
                }
            // the pair's four lanes hold all its dims
            amax = fmaxf(amax, st_shfl_xor(amax, 1, ATT_MMA_LANES));
            amax = fmaxf(amax, st_shfl_xor(amax, 2, ATT_MMA_LANES));
            bad |= st_shfl_xor((int)bad, 1, ATT_MMA_LANES) != 0;
            bad |= st_shfl_xor((int)bad, 2, ATT_MMA_LANES) != 0;
            const int e = gpu_half_exponent(bad ? INFINITY : amax);
            const float inv = __uint_as_float((uint32_t)(127 - e) << 23);
            unsc[h] = __uint_as_float((uint32_t)(127 + e) << 23);
#pragma unroll
            for (int kk = 0; kk < KK; kk++) {
                qa[kk][h] = st_f2h2(x[kk][0] * inv, x[kk][1] * inv);
                qa[kk][2 + h] = st_f2h2(x[kk][2] * inv, x[kk][3] * inv);
            }
        }
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        float o[DT][4]; // O: dim tile dt, fragment element (pairs lg, lg + 8; dims 8dt + 2lt, +1)
#pragma unroll
        for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
        for (int j0 = jlo; j0 <= plast; j0 += KT) {
            __syncthreads(); // the last tile consumed
#pragma unroll
            for (int u = 0; u < NU; u++) {
                const int idx = tid + u * ATT_THREADS, jj = idx / (D / 8), d = 8 * (idx % (D / 8)),
                          j = j0 + jj;
                uint4 kv = make_uint4(0, 0, 0, 0), vv = kv; // keys past the run's last and dims past hd: 0
                if (j <= plast && d < hd) {
                    kv = kv_ld8h(kc + (int64_t)j * kv_dim + d);
                    vv = kv_ld8h(vc + (int64_t)j * kv_dim + d);
                }
                *(uint4 *)&ks[jj * LDW + d / 2] = kv;
                *(uint4 *)&vs[jj * LDW + d / 2] = vv;
            }
            __syncthreads();
            float sc[NT][4] = {}; // S: key tile nt, fragment element (pairs lg, lg + 8; keys 8nt + 2lt, +1)
#pragma unroll
            for (int kk = 0; kk < KK; kk++)
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    // keys 8 (2np + lane / 16) + lane % 8, dims 16kk + 8 (lane / 8 % 2) ..
                    uint32_t bf[4];
                    st_ldsm_x4(bf, ks,
                               (16 * np + 8 * (lane / 16) + lane % 8) * LDW + 8 * kk + 4 * (lane / 8 % 2));
                    const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
                    st_mma_f16_k16(sc[2 * np], qa[kk], b0);
                    st_mma_f16_k16(sc[2 * np + 1], qa[kk], b1);
                }
            float corr[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const int j = j0 + 8 * nt + 2 * lt + c;
                        float s = sc[nt][2 * h + c] * unsc[h];
                        if (softcap > 0) s = softcap * tanhf(s * inv_cap);
                        s = ok[h] && j <= pk[h] && j >= lk[h] ? s : -INFINITY;
                        sc[nt][2 * h + c] = s;
                        mx = fmaxf(mx, s);
                    }
                mx = fmaxf(mx, st_shfl_xor(mx, 1, ATT_MMA_LANES));
                mx = fmaxf(mx, st_shfl_xor(mx, 2, ATT_MMA_LANES));
                const float mn = fmaxf(m[h], mx);
                const float ms = mn == -INFINITY ? 0.0f : mn; // no key yet: nothing to rescale
                corr[h] = expf(m[h] - ms);
                m[h] = mn;
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int c = 0; c < 2; c++) sc[nt][2 * h + c] = expf(sc[nt][2 * h + c] - ms);
            }
            // the weights as halves, in the A fragments of P · V (keys 16s ..)
            uint32_t pa[KT / 16][4];
            float ps[2] = {0.0f, 0.0f};
#pragma unroll
            for (int s2 = 0; s2 < KT / 16; s2++)
#pragma unroll
                for (int i = 0; i < 4; i++) { // a[i]: pair lg + 8 (i % 2), key tile 2s2 + i / 2
                    const float *f = &sc[2 * s2 + i / 2][2 * (i % 2)];
                    pa[s2][i] = st_f2h2(f[0], f[1]);
                    ps[i % 2] += st_h2f(pa[s2][i] & 0xffffu) + st_h2f(pa[s2][i] >> 16);
                }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                ps[h] += st_shfl_xor(ps[h], 1, ATT_MMA_LANES);
                ps[h] += st_shfl_xor(ps[h], 2, ATT_MMA_LANES);
                l[h] = l[h] * corr[h] + ps[h];
            }
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
#pragma unroll
                for (int i = 0; i < 4; i++) o[dt][i] *= corr[i / 2];
#pragma unroll
            for (int s2 = 0; s2 < KT / 16; s2++)
#pragma unroll
                for (int dp = 0; dp < DT / 2; dp++) {
                    // keys 16s2 + 8 (lane / 8 % 2) + lane % 8, dims 8 (2dp + lane / 16) ..
                    uint32_t bf[4];
                    st_ldsm_x4_trans(
                        bf, vs, (16 * s2 + 8 * (lane / 8 % 2) + lane % 8) * LDW + 8 * dp + 4 * (lane / 16));
                    const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
                    st_mma_f16_k16(o[2 * dp], pa[s2], b0);
                    st_mma_f16_k16(o[2 * dp + 1], pa[s2], b1);
                }
        }
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                const int d = 8 * dt + 2 * lt;
                if (ok[h] && d < hd)
                    *(float2 *)(out + off[h] + d) = make_float2(o[dt][2 * h] / l[h], o[dt][2 * h + 1] / l[h]);
            }
    }
}

__global__ void __launch_bounds__(GPU_BLOCK) attn_merge_kernel(const float *part, float *out, int8_t *oq,
                                                               float2 *od, int n_head, int hd, int n_split) {
    st_launch_begin();
    const int64_t qi = (int64_t)blockIdx.y * n_head + blockIdx.x;
    const float *p = part + qi * n_split * (hd + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_split; s++) mx = fmaxf(mx, p[s * (hd + 2) + hd]);
    float sum = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float ms = p[s * (hd + 2) + hd];
        if (ms != -INFINITY) sum += p[s * (hd + 2) + hd + 1] * expf(ms - mx);
    }
    for (int d0 = 0; d0 < hd; d0 += blockDim.x) {
        const int d = d0 + threadIdx.x;
        const bool live = d < hd;
        float acc = 0.0f;
        for (int s = 0; s < n_split && live; s++) {
            const float ms = p[s * (hd + 2) + hd];
            if (ms != -INFINITY) acc += p[s * (hd + 2) + d] * expf(ms - mx);
        }
        if (live) out[qi * hd + d] = acc / sum;
    }
    if (oq) attn_store_q8(out + qi * hd, hd, oq, od, qi);
}

int gpu_attention_splits(int n, int n_kv, int n_head, int n_sm) {
    const int64_t blocks = (int64_t)n * n_head;
    if (blocks >= 2 * (int64_t)n_sm || n_kv <= 128) return 1;
    // ranges of at least 64 keys, enough of them for about 2 blocks per multiprocessor
    int64_t splits = gpu_cdiv(2 * (int64_t)n_sm, blocks);
    const int64_t most = gpu_cdiv(n_kv, 64);
    return (int)(splits < most ? splits : most);
}

size_t gpu_attention_scratch(int n, int n_head, int head_dim, int n_split) {
    return n_split > 1 ? (size_t)n * n_head * n_split * (head_dim + 2) : 0;
}

template <typename KV>
__global__ void __launch_bounds__(GPU_BLOCK)
    kv_store_kernel(KV *kc, KV *vc, const float *k, const float *v, const int32_t *pos, const int32_t *base,
                    int kv_dim, int64_t total) {
    st_launch_begin();
    const int64_t gid = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (gid >= total) return;
    const int t = (int)(gid / kv_dim), d = (int)(gid % kv_dim);
    const int64_t dst = ((int64_t)base[t] + pos[t]) * kv_dim + d;
    kv_st(kc + dst, k[gid]);
    kv_st(vc + dst, v[gid]);
}

void gpu_kv_store(void *kc, void *vc, bool f16, const float *k, const float *v, const int32_t *pos,
                  const int32_t *base, int n, int kv_dim, gpuStream_t s) {
    const int64_t total = (int64_t)n * kv_dim;
    if (total == 0) return;
    const unsigned blocks = (unsigned)gpu_cdiv(total, GPU_BLOCK);
    if (f16)
        ST_LAUNCH(kv_store_kernel<uint16_t>, blocks, GPU_BLOCK, 0, s, (uint16_t *)kc, (uint16_t *)vc, k, v,
                  pos, base, kv_dim, total);
    else
        ST_LAUNCH(kv_store_kernel<float>, blocks, GPU_BLOCK, 0, s, (float *)kc, (float *)vc, k, v, pos, base,
                  kv_dim, total);
    GPU_CHECK_LAUNCH();
}

template <int MAXD, typename KV>
static void attn_launch(const float *q, const KV *k, const KV *v, float *out, int8_t *oq, float2 *od,
                        float *part, const int32_t *pos, const int32_t *base, int n, int n_head,
                        int n_head_kv, int hd, int n_split, const struct attn_params &ap, gpuStream_t s) {
    const dim3 grid((unsigned)n_head, (unsigned)n, (unsigned)n_split);
    ST_LAUNCH((attn_kernel<MAXD, KV>), grid, ATT_THREADS, 0, s, q, k, v, out, oq, od, part, pos, base, n_head,
              n_head / n_head_kv, hd, n_head_kv * hd, n_split, ap.scale, ap.softcap, ap.window);
    GPU_CHECK_LAUNCH();
    if (n_split > 1) {
        ST_LAUNCH(attn_merge_kernel, dim3((unsigned)n_head, (unsigned)n), 128, 0, s, part, out, oq, od,
                  n_head, hd, n_split);
        GPU_CHECK_LAUNCH();
    }
}

template <int MAXD, int KT, typename KV>
static void attn_tile_launch(const float *q, const KV *k, const KV *v, float *out, int base, int p0, int nr,
                             int n_head, int n_head_kv, int hd, const struct attn_params &ap, gpuStream_t s) {
    const int group = n_head / n_head_kv;
    const int qr = group >= ATT_TILE_QUERIES ? 1 : ATT_TILE_QUERIES / group; // rows a block
    const dim3 grid((unsigned)n_head_kv, (unsigned)gpu_cdiv(nr, qr));
    ST_LAUNCH((attn_tile_kernel<MAXD, KT, KV>), grid, ATT_THREADS, 0, s, q, k, v, out, base, p0, nr, n_head,
              group, hd, n_head_kv * hd, qr, ap.scale, ap.softcap, ap.window);
    GPU_CHECK_LAUNCH();
}

template <typename KV>
static void attn_tile_dispatch(const float *q, const KV *k, const KV *v, float *out, int base, int p0, int nr,
                               int n_head, int n_head_kv, int hd, const struct attn_params &ap,
                               gpuStream_t s) {
    if (hd <= 32)
        attn_tile_launch<32, 32>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
    else if (hd <= 64)
        attn_tile_launch<64, 32>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
    else if (hd <= 128)
        attn_tile_launch<128, 32>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
    else
        attn_tile_launch<256, 8>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
}

template <int D, typename KV>
static void attn_mma_launch(const float *q, const KV *k, const KV *v, float *out, int base, int p0, int nr,
                            int n_head, int n_head_kv, int hd, const struct attn_params &ap, gpuStream_t s) {
    const int group = n_head / n_head_kv;
    const int qr = group >= ATT_MMA_PAIRS ? 1 : ATT_MMA_PAIRS / group; // rows a block
    const dim3 grid((unsigned)n_head_kv, (unsigned)gpu_cdiv(nr, qr));
    ST_LAUNCH((attn_mma_kernel<D, KV>), grid, ATT_THREADS, 0, s, q, k, v, out, base, p0, nr, n_head, group,
              hd, n_head_kv * hd, qr, ap.scale, ap.softcap, ap.window);
    GPU_CHECK_LAUNCH();
}

bool gpu_attention_run_mma(int head_dim) {
    return head_dim % 16 == 0 && head_dim <= GPU_ATTN_MMA_MAX_HEAD_DIM;
}

template <typename KV>
static void attn_mma_dispatch(const float *q, const KV *k, const KV *v, float *out, int base, int p0, int nr,
                              int n_head, int n_head_kv, int hd, const struct attn_params &ap,
                              gpuStream_t s) {
    if (hd <= 32)
        attn_mma_launch<32>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
    else if (hd <= 64)
        attn_mma_launch<64>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
    else
        attn_mma_launch<128>(q, k, v, out, base, p0, nr, n_head, n_head_kv, hd, ap, s);
}

int gpu_attention_run(const float *q, const void *k, const void *v, bool f16, float *out, int base, int p0,
                      int nr, int n_head, int n_head_kv, int head_dim, const struct attn_params &ap, bool mma,
                      gpuStream_t s) {
    if (head_dim < 4 || head_dim > GPU_ATTN_MAX_HEAD_DIM || head_dim % 4 || n_head_kv < 1 ||
        n_head % n_head_kv != 0 || nr < 1 || base < 0 || p0 < 0)
        return -1;
    if (mma && gpu_attention_run_mma(head_dim)) {
        if (f16)
            attn_mma_dispatch(q, (const uint16_t *)k, (const uint16_t *)v, out, base, p0, nr, n_head,
                              n_head_kv, head_dim, ap, s);
        else
            attn_mma_dispatch(q, (const float *)k, (const float *)v, out, base, p0, nr, n_head, n_head_kv,
                              head_dim, ap, s);
        return 0;
    }
    if (f16)
        attn_tile_dispatch(q, (const uint16_t *)k, (const uint16_t *)v, out, base, p0, nr, n_head, n_head_kv,
                           head_dim, ap, s);
    else
        attn_tile_dispatch(q, (const float *)k, (const float *)v, out, base, p0, nr, n_head, n_head_kv,
                           head_dim, ap, s);
    return 0;
}

template <typename KV>
static void attn_dispatch(const float *q, const KV *k, const KV *v, float *out, int8_t *oq, float2 *od,
                          float *part, const int32_t *pos, const int32_t *base, int n, int n_head,
                          int n_head_kv, int hd, int n_split, const struct attn_params &ap, gpuStream_t s) {
    if (hd <= 32)
        attn_launch<32>(q, k, v, out, oq, od, part, pos, base, n, n_head, n_head_kv, hd, n_split, ap, s);
    else if (hd <= 64)
        attn_launch<64>(q, k, v, out, oq, od, part, pos, base, n, n_head, n_head_kv, hd, n_split, ap, s);
    else if (hd <= 128)
        attn_launch<128>(q, k, v, out, oq, od, part, pos, base, n, n_head, n_head_kv, hd, n_split, ap, s);
    else
        attn_launch<256>(q, k, v, out, oq, od, part, pos, base, n, n_head, n_head_kv, hd, n_split, ap, s);
}

int gpu_attention(const float *q, const void *k, const void *v, bool f16, float *out, int8_t *oq, float2 *od,
                  float *part, const int32_t *pos, const int32_t *base, int n, int n_head, int n_head_kv,
                  int head_dim, int n_split, const struct attn_params &ap, gpuStream_t s) {
    if (head_dim < 1 || head_dim > GPU_ATTN_MAX_HEAD_DIM || n_head_kv < 1 || n_head % n_head_kv != 0 ||
        n_split < 1 || (oq && head_dim % GPU_Q8_BLOCK))
        return -1;
    if (f16)
        attn_dispatch(q, (const uint16_t *)k, (const uint16_t *)v, out, oq, od, part, pos, base, n, n_head,
                      n_head_kv, head_dim, n_split, ap, s);
    else
        attn_dispatch(q, (const float *)k, (const float *)v, out, oq, od, part, pos, base, n, n_head,
                      n_head_kv, head_dim, n_split, ap, s);
    return 0;
}
