// rope.cu: rotary position embedding, normal (adjacent pairs) and NeoX (halves),
// one thread per rotated pair, (cos, sin) from a table the host builds with
// the project's one RoPE formula (model/rope.c: scaling, YaRN and magnitude
// factors included).
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

__global__ void __launch_bounds__(GPU_BLOCK)
    rope_kernel(float *x, const float2 *cs, const int32_t *pos, int n_head, int head_dim, int half, int neox,
                int64_t total) {
    const int64_t gid = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (gid >= total) return;
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

void gpu_rope(float *x, const float2 *cs, const int32_t *pos, int n, int n_head, int head_dim, int n_dims,
              int neox, gpuStream_t s) {
    const int half = n_dims / 2;
    const int64_t total = (int64_t)n * n_head * half;
    if (total == 0) return;
    rope_kernel<<<(unsigned)gpu_cdiv(total, GPU_BLOCK), GPU_BLOCK, 0, s>>>(x, cs, pos, n_head, head_dim, half,
                                                                           neox, total);
    GPU_CHECK_LAUNCH();
}
