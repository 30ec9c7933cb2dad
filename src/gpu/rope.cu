// rope.cu: rotary position embedding, normal (adjacent pairs) and NeoX (halves),
// one thread per rotated pair, (cos, sin) from a table the host builds with
// the project's one RoPE formula (model/rope.c: scaling, YaRN and magnitude
// factors included). rope_store_kernel does a layer's q and k rotation and
// the k, v cache store in one launch: q's pairs rotated in place, then every
// element of k (rotated where it is part of a pair) and v written to its
// cache row.
#include "rope.h"

extern "C" {
#include "model/rope.h"
}

void gpu_rope_table(float2 *cs, int n_pos, const struct rope_params *rp) {
    const int half = rp->n_dims / 2;
    for (int p = 0; p < n_pos; p++)
        for (int i = 0; i < half; i++) {
            double c, sn;
            rope_cos_sin(p, i, rp, &c, &sn);
            cs[(size_t)p * half + i] = make_float2((float)c, (float)sn);
        }
}

// Rotates pair gid of x (n, n_head, head_dim): pair i = gid % half of head
// gid / half, at its row's position.
static __device__ __forceinline__ void rope_pair(float *x, const float2 *cs, const int32_t *pos, int n_head,
                                                 int head_dim, int half, int neox, int64_t gid) {
    const int i = (int)(gid % half);
    const int64_t th = gid / half; // token * n_head + head
    const int t = (int)(th / n_head);
    const float2 r = cs[(int64_t)pos[t] * half + i];
    float *base = x + th * head_dim;
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = base[a], x1 = base[b];
    base[a] = x0 * r.x - x1 * r.y;
    base[b] = x0 * r.y + x1 * r.x;
}

__global__ void __launch_bounds__(GPU_BLOCK)
    rope_kernel(float *x, const float2 *cs, const int32_t *pos, int n_head, int head_dim, int half, int neox,
                int64_t total) {
    st_launch_begin();
    const int64_t gid = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (gid < total) rope_pair(x, cs, pos, n_head, head_dim, half, neox, gid);
}

void gpu_rope(float *x, const float2 *cs, const int32_t *pos, int n, int n_head, int head_dim, int n_dims,
              int neox, gpuStream_t s) {
    const int half = n_dims / 2;
    const int64_t total = (int64_t)n * n_head * half;
    if (total == 0) return;
    ST_LAUNCH(rope_kernel, (unsigned)gpu_cdiv(total, GPU_BLOCK), GPU_BLOCK, 0, s, x, cs, pos, n_head,
              head_dim, half, neox, total);
    GPU_CHECK_LAUNCH();
}

// Threads 0 .. nq-1 rotate q's pairs; the next n·kv_dim threads each store one
// element of k (rotated) and of v.
template <typename KV>
__global__ void __launch_bounds__(GPU_BLOCK)
    rope_store_kernel(float *q, const float *k, const float *v, KV *kc, KV *vc, const float2 *cs,
                      const int32_t *pos, const int32_t *base, int n_head, int kv_dim, int head_dim, int half,
                      int neox, int64_t nq, int64_t total) {
    st_launch_begin();
    const int64_t gid = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (gid >= total) return;
    if (gid < nq) {
        rope_pair(q, cs, pos, n_head, head_dim, half, neox, gid);
        return;
    }
    const int64_t e = gid - nq; // element of k and v (n, kv_dim)
    const int t = (int)(e / kv_dim), d = (int)(e % kv_dim), j = d % head_dim;
    const float *kh = k + e - j; // the element's head
    float kv = kh[j];
    if (j < 2 * half) { // a rotated element: its pair index i, partner p, and whether it is the pair's first
        const int i = neox ? j % half : j / 2;
        const bool first = neox ? j < half : j % 2 == 0;
        const int p = neox ? (first ? j + half : j - half) : (first ? j + 1 : j - 1);
        const float2 r = cs[(int64_t)pos[t] * half + i];
        const float x0 = first ? kv : kh[p], x1 = first ? kh[p] : kv;
        kv = first ? x0 * r.x - x1 * r.y : x0 * r.y + x1 * r.x;
    }
    const int64_t dst = ((int64_t)base[t] + pos[t]) * kv_dim + d;
    kv_st(kc + dst, kv);
    kv_st(vc + dst, v[e]);
}

void gpu_rope_store(float *q, const float *k, const float *v, void *kc, void *vc, bool f16, const float2 *cs,
                    const int32_t *pos, const int32_t *base, int n, int n_head, int n_head_kv, int head_dim,
                    int n_dims, int neox, gpuStream_t s) {
    const int half = n_dims / 2, kv_dim = n_head_kv * head_dim;
    const int64_t nq = (int64_t)n * n_head * half, total = nq + (int64_t)n * kv_dim;
    if (total == 0) return;
    const unsigned blocks = (unsigned)gpu_cdiv(total, GPU_BLOCK);
    if (f16)
        ST_LAUNCH(rope_store_kernel<uint16_t>, blocks, GPU_BLOCK, 0, s, q, k, v, (uint16_t *)kc,
                  (uint16_t *)vc, cs, pos, base, n_head, kv_dim, head_dim, half, neox, nq, total);
    else
        ST_LAUNCH(rope_store_kernel<float>, blocks, GPU_BLOCK, 0, s, q, k, v, (float *)kc, (float *)vc, cs,
                  pos, base, n_head, kv_dim, head_dim, half, neox, nq, total);
    GPU_CHECK_LAUNCH();
}
