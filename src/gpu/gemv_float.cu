// gemv_float.cu: products with F32, F16 and BF16 weights, float activations.
//
// n ≤ 8: a matrix × vector kernel shaped as mmvq (TPR threads per row, the
// split variant), reading 8 weights per 16 or 32 bytes when the row allows it
// (cols a multiple of 8, x 16-byte aligned) and one at a time otherwise. n > 8: 64 × 64 tiles
// through shared memory, 4 × 4 outputs per thread. Checked against the
// reference by tests/test_ops.c.
#include <math.h>

#include "gemv_float.h"

template <int WT> struct gpu_wf;
template <> struct gpu_wf<GGML_TYPE_F32> {
    static constexpr int ES = 4;
    static __device__ __forceinline__ float one(const uint8_t *r, int64_t c) { return ((const float *)r)[c]; }
    static __device__ __forceinline__ void eight(const uint8_t *r, int64_t c, float v[8]) {
        const float4 a = *(const float4 *)(r + 4 * c), b = *(const float4 *)(r + 4 * c + 16);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
};
template <> struct gpu_wf<GGML_TYPE_F16> {
    static constexpr int ES = 2;
    static __device__ __forceinline__ float one(const uint8_t *r, int64_t c) {
        return gpu_h2f(((const uint16_t *)r)[c]);
    }
    static __device__ __forceinline__ void eight(const uint8_t *r, int64_t c, float v[8]) {
        const int4 a = gpu_ld16(r + 2 * c);
        const uint32_t u[4] = {(uint32_t)a.x, (uint32_t)a.y, (uint32_t)a.z, (uint32_t)a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) v[2 * i] = gpu_h2f(u[i] & 0xFFFFu), v[2 * i + 1] = gpu_h2f(u[i] >> 16);
    }
};
template <> struct gpu_wf<GGML_TYPE_BF16> {
    static constexpr int ES = 2;
    static __device__ __forceinline__ float one(const uint8_t *r, int64_t c) {
        return gpu_bf2f(((const uint16_t *)r)[c]);
    }
    static __device__ __forceinline__ void eight(const uint8_t *r, int64_t c, float v[8]) {
        const int4 a = gpu_ld16(r + 2 * c);
        const uint32_t u[4] = {(uint32_t)a.x, (uint32_t)a.y, (uint32_t)a.z, (uint32_t)a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) v[2 * i] = gpu_bf2f(u[i] & 0xFFFFu), v[2 * i + 1] = gpu_bf2f(u[i] >> 16);
    }
};

template <int WT, int TPR, int NT, bool VEC>
__global__ void __launch_bounds__(GPU_BLOCK)
    gemv_kernel(gpu_mat w, const float *x, float *y, int n, bool add) {
    st_launch_begin();
    using F = gpu_wf<WT>;
    const int lane = threadIdx.x % TPR;
    const int64_t row = (int64_t)blockIdx.x * (GPU_BLOCK / TPR) + threadIdx.x / TPR;
    const bool live = row < w.rows;
    const int64_t cols = w.cols;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    if (live) {
        const uint8_t *wr = w.bulk + row * cols * F::ES;
        if (VEC) {
            // two groups of 8 weights in flight per step
            for (int64_t c = 8 * lane; c < cols; c += 16 * TPR) {
                const bool two = c + 8 * TPR < cols;
                float v[2][8];
                F::eight(wr, c, v[0]);
                if (two) F::eight(wr, c + 8 * TPR, v[1]);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t ch = c + h * 8 * TPR;
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        if ((h == 0 || two) && (NT == 1 || t < n)) {
                            const float4 a = *(const float4 *)(x + t * cols + ch);
                            const float4 b = *(const float4 *)(x + t * cols + ch + 4);
                            acc[t] += v[h][0] * a.x + v[h][1] * a.y + v[h][2] * a.z + v[h][3] * a.w +
                                      v[h][4] * b.x + v[h][5] * b.y + v[h][6] * b.z + v[h][7] * b.w;
                        }
                }
            }
        } else {
            for (int64_t c = lane; c < cols; c += TPR) {
                const float v = F::one(wr, c);
#pragma unroll
                for (int t = 0; t < NT; t++)
                    if (NT == 1 || t < n) acc[t] += v * x[t * cols + c];
            }
        }
    }
    gpu_rows_sum_store<TPR, NT>(acc, lane, live, n, row, w.rows, y, add);
}

#define GEMM_BM 64
#define GEMM_BN 64
#define GEMM_BK 16

template <int WT>
__global__ void __launch_bounds__(GPU_BLOCK)
    gemm_float_kernel(gpu_mat w, const float *x, float *y, int n, bool add) {
    st_launch_begin();
    using F = gpu_wf<WT>;
    __shared__ __align__(16) float ws[GEMM_BK][GEMM_BM + 4];
    __shared__ __align__(16) float xs[GEMM_BK][GEMM_BN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t row0 = (int64_t)blockIdx.x * GEMM_BM;
    const int tok0 = blockIdx.y * GEMM_BN;
    const int64_t cols = w.cols;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    // each thread stages 4 consecutive columns of one row and of one token
    const int lr = tid / 4, lc = (tid % 4) * 4;
    for (int64_t k0 = 0; k0 < cols; k0 += GEMM_BK) {
        const int64_t row = row0 + lr;
        const int t = tok0 + lr;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int64_t k = k0 + lc + q;
            ws[lc + q][lr] = (row < w.rows && k < cols) ? F::one(w.bulk + row * cols * F::ES, k) : 0.0f;
            xs[lc + q][lr] = (t < n && k < cols) ? x[t * cols + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < GEMM_BK; k++) {
            const float4 a = *(const float4 *)&ws[k][4 * ty];
            const float4 b = *(const float4 *)&xs[k][4 * tx];
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t row = row0 + 4 * ty + i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int t = tok0 + 4 * tx + j;
            if (row < w.rows && t < n) gpu_store(y + t * w.rows + row, acc[i][j], add);
        }
    }
}

template <int WT, int TPR, int NT>
static void gemv_launch(const gpu_mat &w, const float *x, float *y, int n, bool add, gpuStream_t s) {
    const unsigned grid = (unsigned)gpu_cdiv(w.rows, GPU_BLOCK / TPR);
    if (w.cols % 8 == 0 && (uintptr_t)x % 16 == 0)
        ST_LAUNCH((gemv_kernel<WT, TPR, NT, true>), grid, GPU_BLOCK, 0, s, w, x, y, n, add);
    else
        ST_LAUNCH((gemv_kernel<WT, TPR, NT, false>), grid, GPU_BLOCK, 0, s, w, x, y, n, add);
    GPU_CHECK_LAUNCH();
}

template <int WT>
static int gemv_type(const gpu_mat &w, const float *x, float *y, int n, int tpr, bool add, gpuStream_t s) {
    if (n > 8) {
        const dim3 grid((unsigned)gpu_cdiv(w.rows, GEMM_BM), (unsigned)gpu_cdiv(n, GEMM_BN));
        ST_LAUNCH((gemm_float_kernel<WT>), grid, GPU_BLOCK, 0, s, w, x, y, n, add);
        GPU_CHECK_LAUNCH();
        return 0;
    }
    if (n == 1) {
        switch (tpr) {
        case 16:
            gemv_launch<WT, 16, 1>(w, x, y, n, add, s);
            return 0;
        case 32:
            gemv_launch<WT, 32, 1>(w, x, y, n, add, s);
            return 0;
        case 64:
            gemv_launch<WT, 64, 1>(w, x, y, n, add, s);
            return 0;
        case 128:
            gemv_launch<WT, 128, 1>(w, x, y, n, add, s);
            return 0;
        case 256:
            gemv_launch<WT, 256, 1>(w, x, y, n, add, s);
            return 0;
        default:
            return -1;
        }
    }
    if (n == 2)
        gemv_launch<WT, 32, 2>(w, x, y, n, add, s);
    else if (n <= 4)
        gemv_launch<WT, 32, 4>(w, x, y, n, add, s);
    else
        gemv_launch<WT, 32, 8>(w, x, y, n, add, s);
    return 0;
}

// The expert products of matmul_id with float weights: one matrix × vector per
// (token, slot) pair (blockIdx.y), ID_TPR threads per row.
#define ID_TPR 32 // compat-ok: threads per row, not a warp size
template <int WT>
__global__ void __launch_bounds__(GPU_BLOCK)
    gemv_id_kernel(gpu_mat w, const float *x, float *y, const int32_t *ids, int k, int x_slots, int64_t rows,
                   int n_exp) {
    st_launch_begin();
    using F = gpu_wf<WT>;
    const int pair = blockIdx.y, t = pair / k, slot = pair % k;
    const int e = ids[pair];
    const int lane = threadIdx.x % ID_TPR;
    const int64_t r = (int64_t)blockIdx.x * (GPU_BLOCK / ID_TPR) + threadIdx.x / ID_TPR;
    const bool live = r < rows;
    const float *xr = x + ((int64_t)t * x_slots + (x_slots > 1 ? slot : 0)) * w.cols;
    float acc[1] = {0.0f};
    if (live && e >= 0 && e < n_exp) {
        const uint8_t *wr = w.bulk + ((int64_t)e * rows + r) * w.cols * F::ES;
        for (int64_t c = lane; c < w.cols; c += ID_TPR) acc[0] += F::one(wr, c) * xr[c];
    } else if (live) {
        acc[0] = NAN;
    }
    gpu_rows_sum_store<ID_TPR, 1>(acc, lane, live, 1, r, rows, y + (int64_t)pair * rows, false);
}

int gpu_gemv_float_id(const gpu_mat &w, const float *x, float *y, const int32_t *ids, int n, int k,
                      int x_slots, int n_exp, gpuStream_t s) {
    const int64_t rows = w.rows / n_exp;
    if (n < 1 || k < 1 || n_exp < 1 || w.rows % n_exp) return -1;
    const dim3 grid((unsigned)gpu_cdiv(rows, GPU_BLOCK / ID_TPR), (unsigned)(n * k));
    switch (w.type) {
    case GGML_TYPE_F32:
        ST_LAUNCH((gemv_id_kernel<GGML_TYPE_F32>), grid, GPU_BLOCK, 0, s, w, x, y, ids, k, x_slots, rows,
                  n_exp);
        break;
    case GGML_TYPE_F16:
        ST_LAUNCH((gemv_id_kernel<GGML_TYPE_F16>), grid, GPU_BLOCK, 0, s, w, x, y, ids, k, x_slots, rows,
                  n_exp);
        break;
    case GGML_TYPE_BF16:
        ST_LAUNCH((gemv_id_kernel<GGML_TYPE_BF16>), grid, GPU_BLOCK, 0, s, w, x, y, ids, k, x_slots, rows,
                  n_exp);
        break;
    default:
        return -1;
    }
    GPU_CHECK_LAUNCH();
    return 0;
}

int gpu_gemv_float(const gpu_mat &w, const float *x, float *y, int n, int tpr, bool add, gpuStream_t s) {
    if (n < 1) return -1;
    switch (w.type) {
    case GGML_TYPE_F32:
        return gemv_type<GGML_TYPE_F32>(w, x, y, n, tpr, add, s);
    case GGML_TYPE_F16:
        return gemv_type<GGML_TYPE_F16>(w, x, y, n, tpr, add, s);
    case GGML_TYPE_BF16:
        return gemv_type<GGML_TYPE_BF16>(w, x, y, n, tpr, add, s);
    default:
        return -1;
    }
}
