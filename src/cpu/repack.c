// repack.c: GGUF blocks → the row-interleaved layouts of gemm.h, and the layout
// of quantized activations. Runs once per weight (prepare_weight), in plain C.
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm.h"
#include "format/quant_impl.h"
#include "util.h"

bool gemm_type_of(enum ggml_type t, enum gemm_type *gt) {
    switch (t) {
    case GGML_TYPE_Q4_0:
        *gt = GEMM_Q4_0;
        return true;
    case GGML_TYPE_Q4_1:
        *gt = GEMM_Q4_1;
        return true;
    case GGML_TYPE_Q8_0:
        *gt = GEMM_Q8_0;
        return true;
    case GGML_TYPE_Q4_K:
        *gt = GEMM_Q4_K;
        return true;
    case GGML_TYPE_Q6_K:
        *gt = GEMM_Q6_K;
        return true;
    default:
        return false;
    }
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

int gemm_weight_layout(struct gemm_weight *w, enum ggml_type t, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    if (!gemm_type_of(t, &w->gt)) return st_fail("type %s has no repacked matrix kernels", quant_name(t));
    const int64_t bs = quant_get(t)->block_size;
    if (rows < 1 || cols < bs || cols % bs || cols > ((int64_t)1 << 30) || rows > ((int64_t)1 << 34))
        return st_fail("a %lld x %lld %s weight cannot be repacked (columns must be a positive "
                       "multiple of %lld)",
                       (long long)rows, (long long)cols, quant_name(t), (long long)bs);
    const size_t nb = (size_t)(cols / GEMM_QK), nsb = (size_t)(cols / QK_K);
    w->type = t;
    w->rows = rows;
    w->cols = cols;
    w->n_groups = (rows + GEMM_R - 1) / GEMM_R;
    switch (w->gt) {
    case GEMM_Q4_0:
        w->scale_bytes = round64(nb * GEMM_R * 2);
        w->group_bytes = w->scale_bytes + nb * sizeof(struct gemm_q4_qs);
        break;
    case GEMM_Q4_1:
        w->scale_bytes = nb * GEMM_R * 4;
        w->group_bytes = w->scale_bytes + nb * sizeof(struct gemm_q4_qs);
        break;
    case GEMM_Q8_0:
        w->scale_bytes = round64(nb * GEMM_R * 2);
        w->group_bytes = w->scale_bytes + nb * sizeof(struct gemm_q8_qs);
        break;
    case GEMM_Q4_K:
        w->group_bytes = nsb * sizeof(struct gemm_q4_K);
        break;
    case GEMM_Q6_K:
        w->group_bytes = nsb * sizeof(struct gemm_q6_K);
        break;
    default:
        ST_ASSERT(0);
    }
    return 0;
}

size_t gemm_weight_bytes(const struct gemm_weight *w) { return (size_t)w->n_groups * w->group_bytes; }

int gemm_weight_init(struct gemm_weight *w, enum ggml_type t, int64_t rows, int64_t cols) {
    if (gemm_weight_layout(w, t, rows, cols)) return -1;
    const size_t bytes = gemm_weight_bytes(w);
    w->data = aligned_alloc(64, bytes);
    if (!w->data)
        return st_fail("cannot allocate %zu bytes for a repacked %lld x %lld %s weight", bytes,
                       (long long)rows, (long long)cols, quant_name(t));
    memset(w->data, 0, bytes);
    return 0;
}

void gemm_weight_free(struct gemm_weight *w) {
    free(w->data);
    w->data = NULL;
}

// The 256 quants (0..63) of a Q6_K block in element order.
static void q6_K_quants(const struct block_q6_K *b, uint8_t q[QK_K]) {
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
        uint8_t *o = q + 128 * half;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4);
            o[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4);
            o[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
        }
    }
}

// Packs 32 values (< 16) into the nibble words of lane `lane`: byte i holds
// element i (low) and element 16+i (high).
static void put_nibbles(uint8_t qs[4][GEMM_R][4], int lane, const uint8_t v[32]) {
    for (int i = 0; i < 16; i++) qs[i / 4][lane][i % 4] = (uint8_t)((v[i] & 0xF) | (v[i + 16] & 0xF) << 4);
}

static void repack_row(struct gemm_weight *w, const uint8_t *src, int64_t r) {
    uint8_t *g = w->data + (size_t)(r / GEMM_R) * w->group_bytes;
    const int lane = (int)(r % GEMM_R);
    const int64_t nb = w->cols / GEMM_QK, nsb = w->cols / QK_K;
    switch (w->gt) {
    case GEMM_Q4_0: {
        const struct block_q4_0 *x = (const void *)src;
        uint16_t *d = (uint16_t *)g;
        struct gemm_q4_qs *q = (struct gemm_q4_qs *)(g + w->scale_bytes);
        for (int64_t b = 0; b < nb; b++) {
            d[b * GEMM_R + lane] = x[b].d;
            for (int i = 0; i < 16; i++) q[b].qs[i / 4][lane][i % 4] = x[b].qs[i];
        }
        break;
    }
    case GEMM_Q4_1: {
        const struct block_q4_1 *x = (const void *)src;
        uint16_t *dm = (uint16_t *)g;
        struct gemm_q4_qs *q = (struct gemm_q4_qs *)(g + w->scale_bytes);
        for (int64_t b = 0; b < nb; b++) {
            dm[b * 2 * GEMM_R + lane] = x[b].d;
            dm[b * 2 * GEMM_R + GEMM_R + lane] = x[b].m;
            for (int i = 0; i < 16; i++) q[b].qs[i / 4][lane][i % 4] = x[b].qs[i];
        }
        break;
    }
    case GEMM_Q8_0: {
        const struct block_q8_0 *x = (const void *)src;
        uint16_t *d = (uint16_t *)g;
        struct gemm_q8_qs *q = (struct gemm_q8_qs *)(g + w->scale_bytes);
        for (int64_t b = 0; b < nb; b++) {
            d[b * GEMM_R + lane] = x[b].d;
            for (int i = 0; i < 32; i++) q[b].qs[i / 4][lane][i % 4] = (uint8_t)(x[b].qs[i] ^ 0x80);
        }
        break;
    }
    case GEMM_Q4_K: {
        const struct block_q4_K *x = (const void *)src;
        struct gemm_q4_K *y = (struct gemm_q4_K *)g;
        for (int64_t s = 0; s < nsb; s++) {
            y[s].d[lane] = x[s].d;
            y[s].dmin[lane] = x[s].dmin;
            for (int j = 0; j < 8; j++) {
                quant_k4_scale_min(j, x[s].scales, &y[s].sc[j][lane], &y[s].m[j][lane]);
                // sub-block j: the low (j even) or high nibbles of bytes 32(j/2) .. +31
                uint8_t v[32];
                for (int e = 0; e < 32; e++) {
                    const uint8_t byte = x[s].qs[32 * (j / 2) + e];
                    v[e] = (uint8_t)(j % 2 ? byte >> 4 : byte & 0xF);
                }
                put_nibbles(y[s].qs[j], lane, v);
            }
        }
        break;
    }
    case GEMM_Q6_K: {
        const struct block_q6_K *x = (const void *)src;
        struct gemm_q6_K *y = (struct gemm_q6_K *)g;
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t q[QK_K];
            q6_K_quants(&x[s], q);
            y[s].d[lane] = st_fp16_to_f32(x[s].d);
            for (int i = 0; i < 16; i++) y[s].sc[i][lane] = x[s].scales[i];
            for (int b = 0; b < 8; b++) {
                const uint8_t *v = q + 32 * b;
                put_nibbles(y[s].ql[b], lane, v);
                for (int k = 0; k < 2; k++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t h = 0;
                        for (int l = 0; l < 4; l++) h |= (uint8_t)((v[4 * (4 * k + l) + i] >> 4) << (2 * l));
                        y[s].qh[b][k][lane][i] = h;
                    }
            }
        }
        break;
    }
    default:
        ST_ASSERT(0);
    }
}

void gemm_repack_rows(struct gemm_weight *w, const void *src, size_t row_bytes, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) repack_row(w, (const uint8_t *)src + (size_t)r * row_bytes, r);
}

// --- activations ---------------------------------------------------------------------

// The folded min of type gt: bias_n sums per block, times mul (gemm.h).
static void bias_of(enum gemm_type gt, int *n, int32_t *mul) {
    switch (gt) {
    case GEMM_Q4_0:
        *n = 1, *mul = -8;
        break;
    case GEMM_Q8_0:
        *n = 1, *mul = -128;
        break;
    case GEMM_Q6_K:
        *n = 2, *mul = -32;
        break;
    default:
        *n = 0, *mul = 0;
        break;
    }
}

// Offsets of qs, d, s, bias and qsum in one buffer; returns its size.
static size_t act_parts(int n, int64_t cols, int bias_n, bool qsum, size_t off[5]) {
    const size_t nn = (size_t)n + 16, nb = (size_t)cols / GEMM_QK; // a 16-token tile may start at any token
    off[0] = 0;
    off[1] = off[0] + round64(nn * (size_t)cols);
    off[2] = off[1] + round64(nn * nb * sizeof(float));
    off[3] = off[2] + round64(nn * nb * sizeof(float));
    off[4] = off[3] + round64(nn * nb * (size_t)bias_n * sizeof(int32_t));
    return off[4] + (qsum ? round64(nn * nb * sizeof(int16_t)) : 0);
}

size_t gemm_act_bytes(int n, int64_t cols, enum gemm_type gt) {
    size_t off[5];
    int bn;
    int32_t mul;
    bias_of(gt, &bn, &mul);
    return act_parts(n, cols, bn, gt == GEMM_Q4_K, off);
}

void gemm_act_layout(struct gemm_act *a, void *buf, int n, int64_t cols, enum gemm_type gt) {
    size_t off[5];
    bias_of(gt, &a->bias_n, &a->bias_mul);
    act_parts(n, cols, a->bias_n, gt == GEMM_Q4_K, off);
    uint8_t *b = buf;
    a->n = n;
    a->cols = cols;
    a->half_scales = gt == GEMM_Q4_0 || gt == GEMM_Q4_1 || gt == GEMM_Q8_0;
    a->super_scales = gemm_super_scales(gt); // their cols are multiples of 256
    a->qs = (int8_t *)(b + off[0]);
    a->d = (float *)(b + off[1]);
    a->s = (float *)(b + off[2]);
    a->bias = a->bias_n ? (int32_t *)(b + off[3]) : NULL;
    a->qsum = gt == GEMM_Q4_K ? (int16_t *)(b + off[4]) : NULL;
    // the padding tokens: zero quants and scales
    const size_t pad = 16, nb = (size_t)cols / GEMM_QK;
    memset(a->qs + (size_t)n * (size_t)cols, 0, pad * (size_t)cols);
    memset(a->d + (size_t)n * nb, 0, pad * nb * sizeof(float));
    memset(a->s + (size_t)n * nb, 0, pad * nb * sizeof(float));
    if (a->bias)
        memset(a->bias + (size_t)n * nb * (size_t)a->bias_n, 0,
               pad * nb * (size_t)a->bias_n * sizeof(int32_t));
    if (a->qsum) memset(a->qsum + (size_t)n * nb, 0, pad * nb * sizeof(int16_t));
}
