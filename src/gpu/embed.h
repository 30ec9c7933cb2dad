// embed.h: embedding rows (see embed.cu).
#ifndef STRATA_GPU_EMBED_H
#define STRATA_GPU_EMBED_H

#include "common.h"

// out (n, w.cols) = rows tokens[i] of w dequantized (tokens: n device int32
// ids, each < w.rows, checked by the caller). Every float and quantized type
// of gpu_mat. Returns 0 once enqueued on s, -1 for a type it does not take.
int gpu_get_rows(const gpu_mat &w, const int32_t *tokens, int n, float *out, gpuStream_t s);

#endif
