// repack.cu: quantized weights from the file's block layout to the device's
// split layout (common.h): each block's bulk bytes (packed quants) go to one
// array and its other bytes, in order, to another, so that kernels read quants
// with aligned 16-byte loads whatever the block size. One thread per block.
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

gpu_mat gpu_mat_of(int type, int64_t rows, int64_t cols, const void *dev) {
    gpu_mat m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.bulk = (const uint8_t *)dev;
    m.rest = NULL;
    struct gpu_qlayout l;
    if (gpu_qlayout_of(type, &l) == 0) m.rest = m.bulk + rows * (cols / l.qk) * l.bulk;
    return m;
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
