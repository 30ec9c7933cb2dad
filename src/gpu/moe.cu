// moe.cu: mixture-of-experts routing and the weighted sum of the experts'
// outputs. Routing: one block per token computes the gate values (softmax over
// every expert's logit, or each logit's sigmoid) in shared memory, then picks
// the k best in k passes of a block argmax (lowest index on ties), then their
// weights. The expert products themselves are mmvq.cu's and gemv_float.cu's
// "id" variants. Checked against the reference by tests/test_ops.c.
#include <math.h>

#include "moe.h"

#define MOE_THREADS 128

// Block-wide (value, index) argmax, lowest index on ties; every thread gets it.
static __device__ void block_argmax(float &v, int &i, float *sv, int *si) {
    for (int m = ST_WARP_SIZE / 2; m > 0; m >>= 1) {
        const float ov = st_shfl_xor(v, m, ST_WARP_SIZE);
        const int oi = st_shfl_xor(i, m, ST_WARP_SIZE);
        if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
    }
    const int warps = MOE_THREADS / ST_WARP_SIZE;
    __syncthreads();
    if (threadIdx.x % ST_WARP_SIZE == 0)
        sv[threadIdx.x / ST_WARP_SIZE] = v, si[threadIdx.x / ST_WARP_SIZE] = i;
    __syncthreads();
    v = sv[0];
    i = si[0];
    for (int w = 1; w < warps; w++)
        if (sv[w] > v || (sv[w] == v && si[w] < i)) v = sv[w], i = si[w];
}

// Block-wide sum (op 0) or max (op 1); every thread gets it.
static __device__ float block_reduce(float v, int op, float *sv) {
    v = op ? st_warp_max_f32(v, ST_WARP_SIZE) : st_warp_sum_f32(v, ST_WARP_SIZE);
    const int warps = MOE_THREADS / ST_WARP_SIZE;
    __syncthreads();
    if (threadIdx.x % ST_WARP_SIZE == 0) sv[threadIdx.x / ST_WARP_SIZE] = v;
    __syncthreads();
    float r = sv[0];
    for (int w = 1; w < warps; w++) r = op ? fmaxf(r, sv[w]) : r + sv[w];
    return r;
}

__global__ void __launch_bounds__(MOE_THREADS)
    moe_route_kernel(const float *logits, int ne, int k, int sigmoid, int norm, float scale, int32_t *ids,
                     float *weights) {
    st_launch_begin();
    extern __shared__ float g[]; // [ne] gate values, then [ne] logits not yet taken
    __shared__ float sv[MOE_THREADS / 32];
    __shared__ int si[MOE_THREADS / 32];
    const int t = blockIdx.x;
    const float *l = logits + (int64_t)t * ne;
    float *cand = g + ne; // [ne] values still to pick
    if (sigmoid) {
        for (int e = threadIdx.x; e < ne; e += MOE_THREADS) g[e] = 1.0f / (1.0f + expf(-l[e]));
    } else {
        float mx = -INFINITY;
        for (int e = threadIdx.x; e < ne; e += MOE_THREADS) mx = fmaxf(mx, l[e]);
        mx = block_reduce(mx, 1, sv);
        float sum = 0.0f;
        for (int e = threadIdx.x; e < ne; e += MOE_THREADS) sum += g[e] = expf(l[e] - mx);
        const float inv = 1.0f / block_reduce(sum, 0, sv);
        for (int e = threadIdx.x; e < ne; e += MOE_THREADS) g[e] *= inv;
    }
    __syncthreads();
    // chosen by the logits: the gate is increasing in them, and they do not round
    // two experts to one value as float sigmoids near 1 do; taken ones become NaN
    for (int e = threadIdx.x; e < ne; e += MOE_THREADS) cand[e] = l[e];
    float sel = 0.0f;
    for (int s = 0; s < k; s++) {
        __syncthreads();
        float v = -INFINITY;
        int i = ne;
        for (int e = threadIdx.x; e < ne; e += MOE_THREADS)
            if (cand[e] > v || (i == ne && cand[e] == -INFINITY)) v = cand[e], i = e;
        block_argmax(v, i, sv, si);
        if (i >= ne) i = 0; // only with NaN logits; the weights show it
        if (threadIdx.x == 0) {
            ids[(int64_t)t * k + s] = i;
            weights[(int64_t)t * k + s] = g[i];
            cand[i] = NAN;
        }
        sel += g[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const float f = norm ? scale / fmaxf(sel, 6.103515625e-5f) : scale;
        for (int s = 0; s < k; s++) weights[(int64_t)t * k + s] *= f;
    }
}

__global__ void __launch_bounds__(GPU_BLOCK)
    moe_combine_kernel(const float *y, const float *w, int k, int dim, float *out, int64_t total) {
    st_launch_begin();
    for (int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * GPU_BLOCK) {
        const int64_t t = i / dim, c = i % dim;
        float acc = 0.0f;
        for (int s = 0; s < k; s++) acc += w[t * k + s] * y[(t * k + s) * dim + c];
        out[i] = acc;
    }
}

int gpu_moe_route(const float *logits, int n, const struct moe_params &mp, int32_t *ids, float *weights,
                  gpuStream_t s) {
    if (mp.n_expert < 1 || mp.n_expert > GPU_MOE_MAX_EXPERTS || mp.n_used < 1 || mp.n_used > mp.n_expert)
        return -1;
    if (n <= 0) return 0;
    const size_t shared = sizeof(float) * 2 * (size_t)mp.n_expert;
    ST_LAUNCH(moe_route_kernel, (unsigned)n, MOE_THREADS, shared, s, logits, mp.n_expert, mp.n_used,
              mp.gating == MOE_GATING_SIGMOID, mp.norm, mp.scale, ids, weights);
    GPU_CHECK_LAUNCH();
    return 0;
}

void gpu_moe_combine(const float *y, const float *weights, int n, int k, int dim, float *out, gpuStream_t s) {
    const int64_t total = (int64_t)n * dim;
    if (total <= 0) return;
    const int64_t g = gpu_cdiv(total, GPU_BLOCK);
    ST_LAUNCH(moe_combine_kernel, (unsigned)(g < 65536 ? g : 65536), GPU_BLOCK, 0, s, y, weights, k, dim, out,
              total);
    GPU_CHECK_LAUNCH();
}
