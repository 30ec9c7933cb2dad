// embed.cu: embedding lookup. Quantized rows: one thread per weight chunk
// (quants.h), writing its runs as d·q + m. Float rows: one thread per element.
#include "embed.h"
#include "quants.h"

template <int T>
__global__ void __launch_bounds__(GPU_BLOCK) get_rows_q_kernel(gpu_mat w, const int32_t *tokens, float *out) {
    st_launch_begin();
    using Q = gpu_qt<T>;
    const int items = (int)(w.cols / Q::QK * Q::QI);
    const int item = blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (item >= items) return;
    const int64_t row = tokens[blockIdx.y];
    float *o = out + (int64_t)blockIdx.y * w.cols;
    gpu_chunk<Q::R> c;
    gpu_load_item<Q>(w, row, item, c);
#pragma unroll
    for (int r = 0; r < Q::R; r++) {
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int b = 0; b < 4; b++)
                o[c.e[r] + 4 * i + b] = c.d[r] * (float)(int8_t)((uint32_t)c.q[r][i] >> (8 * b)) + c.m[r];
    }
}

template <int T>
__global__ void __launch_bounds__(GPU_BLOCK) get_rows_f_kernel(gpu_mat w, const int32_t *tokens, float *out) {
    st_launch_begin();
    const int64_t c = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (c >= w.cols) return;
    const int64_t row = tokens[blockIdx.y];
    float v;
    if (T == GGML_TYPE_F32)
        v = ((const float *)w.bulk)[row * w.cols + c];
    else if (T == GGML_TYPE_F16)
        v = gpu_h2f(((const uint16_t *)w.bulk)[row * w.cols + c]);
    else
        v = gpu_bf2f(((const uint16_t *)w.bulk)[row * w.cols + c]);
    out[(int64_t)blockIdx.y * w.cols + c] = v;
}

int gpu_get_rows(const gpu_mat &w, const int32_t *tokens, int n, float *out, gpuStream_t s) {
    if (n <= 0) return 0;
    switch (w.type) {
#define F(T)                                                                                                 \
    {                                                                                                        \
        const int64_t items = w.cols / gpu_qt<T>::QK * gpu_qt<T>::QI;                                        \
        const dim3 grid((unsigned)gpu_cdiv(items, GPU_BLOCK), (unsigned)n);                                  \
        ST_LAUNCH((get_rows_q_kernel<T>), grid, GPU_BLOCK, 0, s, w, tokens, out);                            \
    }
        GPU_QTYPE_CASES(F)
#undef F
    case GGML_TYPE_F32:
        ST_LAUNCH((get_rows_f_kernel<GGML_TYPE_F32>),
                  dim3((unsigned)gpu_cdiv(w.cols, GPU_BLOCK), (unsigned)n), GPU_BLOCK, 0, s, w, tokens, out);
        break;
    case GGML_TYPE_F16:
        ST_LAUNCH((get_rows_f_kernel<GGML_TYPE_F16>),
                  dim3((unsigned)gpu_cdiv(w.cols, GPU_BLOCK), (unsigned)n), GPU_BLOCK, 0, s, w, tokens, out);
        break;
    case GGML_TYPE_BF16:
        ST_LAUNCH((get_rows_f_kernel<GGML_TYPE_BF16>),
                  dim3((unsigned)gpu_cdiv(w.cols, GPU_BLOCK), (unsigned)n), GPU_BLOCK, 0, s, w, tokens, out);
        break;
    default:
        return -1;
    }
    GPU_CHECK_LAUNCH();
    return 0;
}
