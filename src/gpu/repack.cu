// repack.cu: quantized weights from the file's block layout to the device's
// split layout (common.h): each block's bulk bytes (packed quants) go to one
// array and its other bytes, in order, to another, so that kernels read quants
// with aligned 16-byte loads whatever the block size. One thread per block.
#include <math.h>

#include "quants.h"
#include "repack.h"

int gpu_qlayout_of(int type, struct gpu_qlayout *out) {
    switch (type) {
#define F(T)                                                                                                 \
    *out = {gpu_qt<T>::QK, gpu_qt<T>::BYTES, gpu_qt<T>::BULK_OFF, gpu_qt<T>::BULK, gpu_qt<T>::REST};         \
    return 0
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return -1;
    }
}

bool gpu_type_supported(int type) {
    struct gpu_qlayout l;
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 ||
           gpu_qlayout_of(type, &l) == 0;
}

// Bytes of a quantized weight's blocks rounded up to 16: where its hscale lies.
static size_t hscale_offset(size_t block_bytes) { return (block_bytes + 15) & ~(size_t)15; }

gpu_mat gpu_mat_of(int type, int64_t rows, int64_t cols, const void *dev) {
    gpu_mat m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.bulk = (const uint8_t *)dev;
    m.rest = NULL;
    struct gpu_qlayout l;
    m.hscale = NULL;
    if (gpu_qlayout_of(type, &l) == 0) {
        m.rest = m.bulk + rows * (cols / l.qk) * l.bulk;
        m.hscale = (const float *)(m.bulk + hscale_offset((size_t)(rows * (cols / l.qk) * l.bytes)));
    }
    return m;
}

size_t gpu_weight_bytes(int type, int64_t rows, size_t row_bytes) {
    struct gpu_qlayout l;
    const size_t bytes = (size_t)rows * row_bytes;
    return gpu_qlayout_of(type, &l) == 0 ? hscale_offset(bytes) + 16 : bytes;
}

// Each block's largest |d|·QMAX + |m| over the chunks it strides through
// (inf for a nan), into part[blockIdx.x].
template <int T> __global__ void __launch_bounds__(GPU_BLOCK) range_kernel(gpu_mat m, float *part) {
    using Q = gpu_qt<T>;
    const int items = (int)(m.cols / (Q::QK / Q::QI));
    const int64_t chunks = m.rows * items;
    float b = 0.0f;
    for (int64_t c = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x; c < chunks;
         c += (int64_t)gridDim.x * GPU_BLOCK) {
        gpu_chunk<Q::R> ch;
        gpu_load_item<Q>(m, c / items, (int)(c % items), ch);
#pragma unroll
        for (int p = 0; p < Q::R; p++) {
            const float v = fabsf(ch.d[p]) * (float)Q::QMAX + fabsf(ch.m[p]);
            b = v != v ? INFINITY : fmaxf(b, v);
        }
    }
    b = gpu_block_max(b);
    if (threadIdx.x == 0) part[blockIdx.x] = b;
}

__global__ void hscale_kernel(const float *part, int n, float *hscale) {
    if (threadIdx.x != 0) return;
    float b = 0.0f;
    for (int i = 0; i < n; i++) b = fmaxf(b, part[i]);
    *hscale = __uint_as_float((uint32_t)(127 + gpu_half_exponent(b)) << 23);
}

template <int T> static void weight_scale(const gpu_mat &m, float *part, gpuStream_t s) {
    const int64_t chunks = m.rows * (m.cols / (gpu_qt<T>::QK / gpu_qt<T>::QI));
    int grid = (int)gpu_cdiv(chunks, GPU_BLOCK);
    if (grid > GPU_RANGE_PARTS) grid = GPU_RANGE_PARTS;
    if (grid < 1) grid = 1;
    range_kernel<T><<<(unsigned)grid, GPU_BLOCK, 0, s>>>(m, part);
    GPU_CHECK_LAUNCH();
    hscale_kernel<<<1, 1, 0, s>>>(part, grid, (float *)m.hscale);
    GPU_CHECK_LAUNCH();
}

void gpu_weight_scale(const gpu_mat &m, float *part, gpuStream_t s) {
    switch (m.type) {
#define F(T)                                                                                                 \
    weight_scale<T>(m, part, s);                                                                             \
    return
        GPU_QTYPE_CASES(F)
#undef F
    default:
        return;
    }
}

__global__ void __launch_bounds__(GPU_BLOCK)
    repack_kernel(uint8_t *bulk, uint8_t *rest, const uint8_t *src, int64_t first_blk, int64_t n_blocks,
                  int bytes, int bulk_off, int bulk_n, int rest_n) {
    const int64_t i = (int64_t)blockIdx.x * GPU_BLOCK + threadIdx.x;
    if (i >= n_blocks) return;
    const uint8_t *b = src + i * bytes;
    uint8_t *ob = bulk + (first_blk + i) * bulk_n;
    uint8_t *orr = rest + (first_blk + i) * rest_n;
    for (int k = 0; k < bulk_n; k++) ob[k] = b[bulk_off + k];
    for (int k = 0; k < bulk_off; k++) orr[k] = b[k];
    for (int k = bulk_off + bulk_n; k < bytes; k++) orr[k - bulk_n] = b[k];
}

void gpu_repack(int type, int64_t rows, int64_t cols, void *dev, const void *src, int64_t first_blk,
                int64_t n_blocks, gpuStream_t s) {
    struct gpu_qlayout l;
    if (gpu_qlayout_of(type, &l) != 0 || n_blocks <= 0) return;
    uint8_t *bulk = (uint8_t *)dev;
    uint8_t *rest = bulk + rows * (cols / l.qk) * l.bulk;
    repack_kernel<<<(unsigned)gpu_cdiv(n_blocks, GPU_BLOCK), GPU_BLOCK, 0, s>>>(
        bulk, rest, (const uint8_t *)src, first_blk, n_blocks, l.bytes, l.bulk_off, l.bulk, l.rest);
    GPU_CHECK_LAUNCH();
}
