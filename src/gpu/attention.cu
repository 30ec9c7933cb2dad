// attention.cu: the KV cache: storing a batch's keys and values, and causal
// grouped-query attention over it, one query row per block, with a score
// scale, optional soft-capping of the scores and an optional sliding window.
// Each row carries its own position and cache region (backend.h's batch_rows),
// so the rows of several sequences run in one launch.
//
// A block takes one (head, token, key range): its warps take every 4th key,
// each warp keeping a running max, sum and weighted value sum (online
// softmax); the warps are merged through shared memory. A long context is cut
// into n_split key ranges whose partial results (unnormalised output, max,
// sum) a second kernel merges, so that decode (one token, few heads) still
// fills the device. Each lane holds MAXD/warp values of q and of the output.
// Checked against the reference (double, two-pass softmax) by tests/test_ops.c.
#include <math.h>

#include "attention.h"

#define ATT_THREADS 128

template <int MAXD>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_kernel(const float *q, const float *kc, const float *vc, float *out, float *part, const int32_t *pos,
                const int32_t *base, int n_head, int group, int hd, int kv_dim, int chunk, int n_split,
                float scale, float softcap, int window) {
    constexpr int ATT_WARPS = ATT_THREADS / ST_WARP_SIZE;
    constexpr int NV = (MAXD + ST_WARP_SIZE - 1) / ST_WARP_SIZE;
    const int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z;
    const int warp = threadIdx.x / ST_WARP_SIZE, lane = threadIdx.x % ST_WARP_SIZE;
    const int kvh = h / group;
    const int n_kv = pos[t] + 1;
    kc += (int64_t)base[t] * kv_dim;
    vc += (int64_t)base[t] * kv_dim;
    const int lo = window > 0 ? max(0, n_kv - window) : 0; // the first key in the window
    const int j0 = max(sp * chunk, lo), j1 = min(sp * chunk + chunk, n_kv);
    const float inv_cap = softcap > 0 ? 1.0f / softcap : 0.0f;
    const float *qh = q + ((int64_t)t * n_head + h) * hd;
    float qv[NV], o[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int d = lane + ST_WARP_SIZE * i;
        qv[i] = d < hd ? qh[d] * scale : 0.0f;
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    // Every warp runs the same number of rounds (a warp past the last key
    // idles through its last one): the warp sum stays in block-uniform
    // control flow, which OpenCL devices that build sub-group operations on
    // work-group barriers (PoCL's CPU device) require.
    for (int jb = j0; jb < j1; jb += ATT_WARPS) {
        const int j = jb + warp;
        const bool live = j < j1;
        const float *kr = kc + (int64_t)j * kv_dim + (int64_t)kvh * hd;
        const float *vr = vc + (int64_t)j * kv_dim + (int64_t)kvh * hd;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int d = lane + ST_WARP_SIZE * i;
            if (live && d < hd) s += qv[i] * kr[d];
        }
        s = st_warp_sum_f32(s, ST_WARP_SIZE);
        if (!live) continue;
        if (softcap > 0) s = softcap * tanhf(s * inv_cap);
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int d = lane + ST_WARP_SIZE * i;
            o[i] = o[i] * corr + (d < hd ? p * vr[d] : 0.0f);
        }
        m = mn;
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    __shared__ float so[ATT_WARPS][NV * ST_WARP_SIZE];
    if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
    for (int i = 0; i < NV; i++) so[warp][lane + ST_WARP_SIZE * i] = o[i];
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, sm[w]);
    float f[ATT_WARPS], sum = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - mx); // a warp with no keys adds nothing
        sum += sl[w] * f[w];
    }
    const int64_t qi = (int64_t)t * n_head + h;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) acc += so[w][d] * f[w];
        if (n_split == 1)
            out[qi * hd + d] = acc / sum;
        else
            part[(qi * n_split + sp) * (hd + 2) + d] = acc;
    }
    if (n_split > 1 && threadIdx.x == 0) {
        part[(qi * n_split + sp) * (hd + 2) + hd] = mx;
        part[(qi * n_split + sp) * (hd + 2) + hd + 1] = sum;
    }
}

__global__ void __launch_bounds__(GPU_BLOCK)
    attn_merge_kernel(const float *part, float *out, int n_head, int hd, int n_split) {
    const int64_t qi = (int64_t)blockIdx.y * n_head + blockIdx.x;
    const float *p = part + qi * n_split * (hd + 2);
    float mx = -INFINITY;
    for (int s = 0; s < n_split; s++) mx = fmaxf(mx, p[s * (hd + 2) + hd]);
    float sum = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float ms = p[s * (hd + 2) + hd];
        if (ms != -INFINITY) sum += p[s * (hd + 2) + hd + 1] * expf(ms - mx);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float ms = p[s * (hd + 2) + hd];
            if (ms != -INFINITY) acc += p[s * (hd + 2) + d] * expf(ms - mx);
        }
        out[qi * hd + d] = acc / sum;
    }
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

__global__ void __launch_bounds__(GPU_BLOCK)
    kv_store_kernel(float *kc, float *vc, const float *k, const float *v, const int32_t *pos,
                    const int32_t *base, int kv_dim, int64_t total) {
    const int64_t gid = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (gid >= total) return;
    const int t = (int)(gid / kv_dim), d = (int)(gid % kv_dim);
    const int64_t dst = ((int64_t)base[t] + pos[t]) * kv_dim + d;
    kc[dst] = k[gid];
    vc[dst] = v[gid];
}

void gpu_kv_store(float *kc, float *vc, const float *k, const float *v, const int32_t *pos,
                  const int32_t *base, int n, int kv_dim, gpuStream_t s) {
    const int64_t total = (int64_t)n * kv_dim;
    if (total == 0) return;
    kv_store_kernel<<<(unsigned)gpu_cdiv(total, GPU_BLOCK), GPU_BLOCK, 0, s>>>(kc, vc, k, v, pos, base,
                                                                               kv_dim, total);
    GPU_CHECK_LAUNCH();
}

template <int MAXD>
static void attn_launch(const float *q, const float *k, const float *v, float *out, float *part,
                        const int32_t *pos, const int32_t *base, int n, int n_kv, int n_head, int n_head_kv,
                        int hd, int n_split, const struct attn_params &ap, gpuStream_t s) {
    const int chunk = (int)gpu_cdiv(n_kv, n_split);
    const dim3 grid((unsigned)n_head, (unsigned)n, (unsigned)n_split);
    attn_kernel<MAXD><<<grid, ATT_THREADS, 0, s>>>(q, k, v, out, part, pos, base, n_head, n_head / n_head_kv,
                                                   hd, n_head_kv * hd, chunk, n_split, ap.scale, ap.softcap,
                                                   ap.window);
    GPU_CHECK_LAUNCH();
    if (n_split > 1) {
        attn_merge_kernel<<<dim3((unsigned)n_head, (unsigned)n), 128, 0, s>>>(part, out, n_head, hd, n_split);
        GPU_CHECK_LAUNCH();
    }
}

int gpu_attention(const float *q, const float *k, const float *v, float *out, float *part, const int32_t *pos,
                  const int32_t *base, int n, int n_kv, int n_head, int n_head_kv, int head_dim, int n_split,
                  const struct attn_params &ap, gpuStream_t s) {
    if (head_dim < 1 || head_dim > GPU_ATTN_MAX_HEAD_DIM || n_head_kv < 1 || n_head % n_head_kv != 0 ||
        n_split < 1)
        return -1;
    if (head_dim <= 32)
        attn_launch<32>(q, k, v, out, part, pos, base, n, n_kv, n_head, n_head_kv, head_dim, n_split, ap, s);
    else if (head_dim <= 64)
        attn_launch<64>(q, k, v, out, part, pos, base, n, n_kv, n_head, n_head_kv, head_dim, n_split, ap, s);
    else if (head_dim <= 128)
        attn_launch<128>(q, k, v, out, part, pos, base, n, n_kv, n_head, n_head_kv, head_dim, n_split, ap, s);
    else
        attn_launch<256>(q, k, v, out, part, pos, base, n, n_kv, n_head, n_head_kv, head_dim, n_split, ap, s);
    return 0;
}
