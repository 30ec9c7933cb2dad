// repack.h: the device layout of weights (see repack.cu).
#ifndef STRATA_GPU_REPACK_H
#define STRATA_GPU_REPACK_H

#include "common.h"

// The split layout of a quantized type: bytes per block, the block's bulk
// range [bulk_off, bulk_off + bulk) and the rest's size. Returns 0, or -1 when
// the GPU does not compute with type.
struct gpu_qlayout {
    int qk;    // elements per block
    int bytes; // bytes per block in the file
    int bulk_off, bulk, rest;
};
int gpu_qlayout_of(int type, struct gpu_qlayout *out);

// Whether the GPU computes with type (the float types and those of gpu_qlayout_of).
bool gpu_type_supported(int type);

// The gpu_mat of a weight stored at dev in the device layout.
gpu_mat gpu_mat_of(int type, int64_t rows, int64_t cols, const void *dev);

// Bytes a weight of rows rows of row_bytes takes in the device layout: its blocks, and
// for a quantized type its half-precision scale after them (gpu_mat.hscale).
size_t gpu_weight_bytes(int type, int64_t rows, size_t row_bytes);

// Writes m's hscale: 2^e with e the one that brings the largest magnitude a
// value of m can take (|d|·QMAX + |m| over every chunk run) into [2^14, 2^15),
// within [-126, 126]; 1 when m holds only zeros or an inf or a nan. part is
// device scratch of GPU_RANGE_PARTS floats. Enqueued on s.
#define GPU_RANGE_PARTS 1024
void gpu_weight_scale(const gpu_mat &m, float *part, gpuStream_t s);

// Converts n_blocks consecutive blocks src (file layout, device memory) whose
// first is block first_blk of the matrix at dev (device layout, rows*cols
// elements) into dev's bulk and rest arrays. Enqueued on s.
void gpu_repack(int type, int64_t rows, int64_t cols, void *dev, const void *src, int64_t first_blk,
                int64_t n_blocks, gpuStream_t s);

#endif
