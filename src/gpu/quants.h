// quants.h: device access to quantized weight blocks, one struct per type.
//
// Every type is read the same way: a block is cut into QI chunks, and loading
// chunk ci of a block yields R runs of 16 int8 values, run r standing for the
// 16 consecutive elements starting at e[r] with value = d[r]·q + m[r]. The dot
// products (mmvq, mmq) and the embedding lookup are written once over that
// form; only the unpacking below knows each format. Layouts follow the GGUF
// blocks bit for bit (src/quant_impl.h), stored split into bulk and rest
// (common.h, repack.cu): BULK_OFF/BULK give the byte range of the block that
// goes to the bulk array, the rest keeps the other bytes in order.
//
// SPAN: the aligned window of a row's elements that one chunk's runs lie in
// (QK/QI, a chunk's own elements, unless the type spreads them further).
// PAIRED: runs 2k and 2k+1 are one whole 32-element activation block with one
// d and m, so the min term can use the activation block's sum (d·Σq) instead
// of summing the 16-element run. MIN: m may be non-zero. The chunk's int8
// values lie within ±QMAX when SGN, else within [0, QMAX]: the SWAR dot
// product of targets without dp4a sums as many products as that allows.
// CB (IQ4 types): the values are looked up in a codebook; BIAS: they are the
// stored unsigned bytes less BIAS. Such types also have load_raw, which
// leaves the indices or the unsigned bytes for the SWAR form to finish in
// its own way (gpu_act_swar).
#ifndef STRATA_GPU_QUANTS_H
#define STRATA_GPU_QUANTS_H

#include "common.h"

template <int R> struct gpu_chunk {
    int q[R][4]; // 16 int8 per run, four to an int, element order
    float d[R];
    float m[R];
    int e[R]; // first element of the run within the row
};

// Per-byte v - k for bytes v in [0, 127], k < 128, without borrows between bytes.
static __device__ __forceinline__ int gpu_sub_bytes(uint32_t v, uint32_t k4) {
    return (int)(((v | 0x80808080u) - k4) ^ 0x80808080u);
}

// The IQ4_NL codebook looked up for the 8 nibbles of q: byte k of q holds the
// index of element k (low nibble) and of element k+16 (high nibble); returns
// the int8 values of elements 0..3 in lo and 16..19 in hi.
static __device__ __forceinline__ void gpu_iq4_lookup(uint32_t q, int &lo, int &hi) {
    // {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
    uint32_t l, h;
    st_lut16x8(q, 0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u, l, h);
    lo = (int)l;
    hi = (int)h;
}

// An IQ4 chunk from its 16 index bytes v (a whole block of 32 elements from
// e0) and scale d: the int8 values of runs 0 and 1, or (raw) the index bytes
// in the order of the IQ4 types' load_raw.
template <int R>
static __device__ __forceinline__ void gpu_iq4_chunk(int4 v, float d, int e0, bool raw, gpu_chunk<R> &c) {
    if (raw) {
        c.q[0][0] = v.x, c.q[0][1] = v.y, c.q[1][0] = v.z, c.q[1][1] = v.w;
        c.q[0][2] = c.q[0][3] = c.q[1][2] = c.q[1][3] = 0;
    } else {
        gpu_iq4_lookup((uint32_t)v.x, c.q[0][0], c.q[1][0]);
        gpu_iq4_lookup((uint32_t)v.y, c.q[0][1], c.q[1][1]);
        gpu_iq4_lookup((uint32_t)v.z, c.q[0][2], c.q[1][2]);
        gpu_iq4_lookup((uint32_t)v.w, c.q[0][3], c.q[1][3]);
    }
    c.d[0] = c.d[1] = d;
    c.m[0] = c.m[1] = 0.0f;
    c.e[0] = e0;
    c.e[1] = e0 + 16;
}

// A raw IQ4 chunk (load_raw's index bytes) looked up in the codebook, as
// load would have left it. The threads-a-row kernel's dp4a form loads raw
// and looks up just before the dot product: a chunk in flight then holds 4
// words, not 8 (IQ4_NL: 60 registers a thread against 44).
template <int R> static __device__ __forceinline__ void gpu_iq4_finish(gpu_chunk<R> &c) {
    const int4 v = {c.q[0][0], c.q[0][1], c.q[1][0], c.q[1][1]};
    gpu_iq4_chunk(v, c.d[0], c.e[0], false, c);
}

// A raw chunk of a BIAS type (load_raw: the bytes before the bias is taken
// off, each below 128) less the bias k4 (the bias in every byte).
template <int R> static __device__ __forceinline__ void gpu_unbias_chunk(gpu_chunk<R> &c, uint32_t k4) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < 4; i++) c.q[r][i] = gpu_sub_bytes((uint32_t)c.q[r][i], k4);
}

// The IQ4 codebook's entry e (0..15).
static __device__ __forceinline__ int gpu_iq4_value(int e) {
    const uint32_t t = e < 8 ? (e < 4 ? 0xBFAD9881u : 0xF6EADDCFu) : (e < 12 ? 0x26190D01u : 0x71594535u);
    return st_sbyte(t, e & 3);
}

// Bit 4 of bytes 0..3 from bits 0..3 of b.
static __device__ __forceinline__ uint32_t gpu_spread4(uint32_t b) {
    return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

// Q4_K/Q5_K 6-bit scale and min of sub-block s from the 12 scale bytes a|b|c.
// Without branches: neighbouring lanes decode different sub-blocks.
static __device__ __forceinline__ void gpu_k4_scale_min(uint32_t a, uint32_t b, uint32_t c, int s, float &sc,
                                                        float &mn) {
    const int t = 8 * (s & 3);
    const uint32_t ba = (a >> t) & 0xFF, bb = (b >> t) & 0xFF, bc = (c >> t) & 0xFF;
    const bool hi = s >= 4;
    sc = (float)(hi ? (bc & 0xF) | ((ba >> 2) & 0x30) : ba & 63);
    mn = (float)(hi ? (bc >> 4) | ((bb >> 2) & 0x30) : bb & 63);
}

template <int T> struct gpu_qt;

// Arguments of every load: the matrix, the block's index in the whole matrix,
// the chunk within the block, and the block's first element within its row.
#define GPU_QT_LOAD                                                                                          \
    static __device__ __forceinline__ void load(const gpu_mat &w, int64_t blk, int ci, int e0,               \
                                                gpu_chunk<R> &c)

template <> struct gpu_qt<GGML_TYPE_Q4_0> {
    static constexpr int QK = 32, QI = 1, R = 2, BYTES = 18, BULK_OFF = 2, BULK = 16, REST = 2, SPAN = 32;
    static constexpr bool MIN = true, PAIRED = true;
    static constexpr int QMAX = 15, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        (void)ci;
        const int4 v = gpu_ld16(w.bulk + blk * BULK);
        const float d = gpu_scale_h2f(gpu_ld_u16(w.rest + blk * REST));
        const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)(u[i] & 0x0F0F0F0Fu);
            c.q[1][i] = (int)((u[i] >> 4) & 0x0F0F0F0Fu);
        }
        c.d[0] = c.d[1] = d;
        c.m[0] = c.m[1] = -8.0f * d;
        c.e[0] = e0;
        c.e[1] = e0 + 16;
    }
};

template <> struct gpu_qt<GGML_TYPE_Q4_1> {
    static constexpr int QK = 32, QI = 1, R = 2, BYTES = 20, BULK_OFF = 4, BULK = 16, REST = 4, SPAN = 32;
    static constexpr bool MIN = true, PAIRED = true;
    static constexpr int QMAX = 15, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        (void)ci;
        const int4 v = gpu_ld16(w.bulk + blk * BULK);
        const uint32_t dm = gpu_ld_u32(w.rest + blk * REST);
        const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)(u[i] & 0x0F0F0F0Fu);
            c.q[1][i] = (int)((u[i] >> 4) & 0x0F0F0F0Fu);
        }
        c.d[0] = c.d[1] = gpu_scale_h2f(dm & 0xFFFFu);
        c.m[0] = c.m[1] = gpu_scale_h2f(dm >> 16);
        c.e[0] = e0;
        c.e[1] = e0 + 16;
    }
};

template <> struct gpu_qt<GGML_TYPE_Q5_0> {
    static constexpr int QK = 32, QI = 1, R = 2, BYTES = 22, BULK_OFF = 6, BULK = 16, REST = 6, SPAN = 32;
    static constexpr bool MIN = true, PAIRED = true;
    static constexpr int QMAX = 31, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        (void)ci;
        const int4 v = gpu_ld16(w.bulk + blk * BULK);
        const uint8_t *r = w.rest + blk * REST;
        const float d = gpu_scale_h2f(gpu_ld_u16(r));
        const uint32_t qh = gpu_ld_u32_a2(r + 2);
        const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)((u[i] & 0x0F0F0F0Fu) | gpu_spread4(qh >> (4 * i)));
            c.q[1][i] = (int)(((u[i] >> 4) & 0x0F0F0F0Fu) | gpu_spread4(qh >> (16 + 4 * i)));
        }
        c.d[0] = c.d[1] = d;
        c.m[0] = c.m[1] = -16.0f * d;
        c.e[0] = e0;
        c.e[1] = e0 + 16;
    }
};

template <> struct gpu_qt<GGML_TYPE_Q5_1> {
    static constexpr int QK = 32, QI = 1, R = 2, BYTES = 24, BULK_OFF = 8, BULK = 16, REST = 8, SPAN = 32;
    static constexpr bool MIN = true, PAIRED = true;
    static constexpr int QMAX = 31, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        (void)ci;
        const int4 v = gpu_ld16(w.bulk + blk * BULK);
        const uint2 r = *(const uint2 *)(w.rest + blk * REST);
        const uint32_t qh = r.y;
        const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)((u[i] & 0x0F0F0F0Fu) | gpu_spread4(qh >> (4 * i)));
            c.q[1][i] = (int)(((u[i] >> 4) & 0x0F0F0F0Fu) | gpu_spread4(qh >> (16 + 4 * i)));
        }
        c.d[0] = c.d[1] = gpu_scale_h2f(r.x & 0xFFFFu);
        c.m[0] = c.m[1] = gpu_scale_h2f(r.x >> 16);
        c.e[0] = e0;
        c.e[1] = e0 + 16;
    }
};

template <> struct gpu_qt<GGML_TYPE_Q8_0> {
    static constexpr int QK = 32, QI = 1, R = 2, BYTES = 34, BULK_OFF = 2, BULK = 32, REST = 2, SPAN = 32;
    static constexpr bool MIN = false, PAIRED = true;
    static constexpr int QMAX = 128, SGN = 1, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        (void)ci;
        const int4 v0 = gpu_ld16(w.bulk + blk * BULK);
        const int4 v1 = gpu_ld16(w.bulk + blk * BULK + 16);
        const float d = gpu_scale_h2f(gpu_ld_u16(w.rest + blk * REST));
        c.q[0][0] = v0.x, c.q[0][1] = v0.y, c.q[0][2] = v0.z, c.q[0][3] = v0.w;
        c.q[1][0] = v1.x, c.q[1][1] = v1.y, c.q[1][2] = v1.z, c.q[1][3] = v1.w;
        c.d[0] = c.d[1] = d;
        c.m[0] = c.m[1] = 0.0f;
        c.e[0] = e0;
        c.e[1] = e0 + 16;
    }
};

// IQ4_NL, IQ4_XS: CB, the chunk's bytes are looked up in the IQ4 codebook.
// load_raw leaves the 16 index bytes for the SWAR form, in the order its
// stage pairs elements k and k + 16 (gpu_swar_stage_cb): q[0][0..1] bytes
// 0-7, q[1][0..1] bytes 8-15, byte k holding the indices of elements k (low
// nibble) and k + 16 (high).
template <> struct gpu_qt<GGML_TYPE_IQ4_NL> {
    static constexpr int QK = 32, QI = 1, R = 2, BYTES = 18, BULK_OFF = 2, BULK = 16, REST = 2, SPAN = 32;
    static constexpr bool MIN = false, PAIRED = true;
    static constexpr int QMAX = 127, SGN = 1, CB = 1, BIAS = 0;
    GPU_QT_LOAD {
        (void)ci;
        const int4 v = gpu_ld16(w.bulk + blk * BULK);
        gpu_iq4_chunk(v, gpu_scale_h2f(gpu_ld_u16(w.rest + blk * REST)), e0, false, c);
    }
    static __device__ __forceinline__ void load_raw(const gpu_mat &w, int64_t blk, int ci, int e0,
                                                    gpu_chunk<R> &c) {
        (void)ci;
        const int4 v = gpu_ld16(w.bulk + blk * BULK);
        gpu_iq4_chunk(v, gpu_scale_h2f(gpu_ld_u16(w.rest + blk * REST)), e0, true, c);
    }
};

// Q2_K: chunk ci = 16 bytes of qs, half n = ci/2 of the block, byte offset h =
// ci%2: its 4 shifts are 4 runs of 16 elements, each with its own scale and min.
template <> struct gpu_qt<GGML_TYPE_Q2_K> {
    static constexpr int QK = 256, QI = 4, R = 4, BYTES = 84, BULK_OFF = 16, BULK = 64, REST = 20, SPAN = 128;
    static constexpr bool MIN = true, PAIRED = false;
    static constexpr int QMAX = 3, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        const int n = ci / 2, h = ci % 2;
        const int4 v = gpu_ld16(w.bulk + blk * BULK + 32 * n + 16 * h);
        const uint8_t *r = w.rest + blk * REST; // scales[16], d, dmin
        const uint32_t s0 = gpu_ld_u32(r + 8 * n), s1 = gpu_ld_u32(r + 8 * n + 4);
        const uint32_t dd = gpu_ld_u32(r + 16);
        const float d = gpu_scale_h2f(dd & 0xFFFFu), dmin = gpu_scale_h2f(dd >> 16);
        const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) c.q[j][i] = (int)((u[i] >> (2 * j)) & 0x03030303u);
            // scale byte 8n + 2j + h
            const uint32_t sc = ((j < 2 ? s0 : s1) >> (8 * (2 * (j % 2) + h))) & 0xFF;
            c.d[j] = d * (float)(sc & 0xF);
            c.m[j] = -dmin * (float)(sc >> 4);
            c.e[j] = e0 + 128 * n + 32 * j + 16 * h;
        }
    }
};

// Q3_K: chunks as Q2_K; the high bit of element 128n + 32j + l is bit 4n + j
// of hmask[l]; values q2 - 4·(1 - bit) in [-4, 3].
template <> struct gpu_qt<GGML_TYPE_Q3_K> {
    static constexpr int QK = 256, QI = 4, R = 4, BYTES = 110, BULK_OFF = 0, BULK = 96, REST = 14, SPAN = 128;
    static constexpr bool MIN = false, PAIRED = false;
    static constexpr int QMAX = 4, SGN = 1, CB = 0, BIAS = 4;
    GPU_QT_LOAD {
        load_raw(w, blk, ci, e0, c);
        gpu_unbias_chunk(c, 0x04040404u);
    }
    static __device__ __forceinline__ void load_raw(const gpu_mat &w, int64_t blk, int ci, int e0,
                                                    gpu_chunk<R> &c) {
        const int n = ci / 2, h = ci % 2;
        const uint8_t *b = w.bulk + blk * BULK;
        const int4 hv = gpu_ld16(b + 16 * h);
        const int4 v = gpu_ld16(b + 32 + 32 * n + 16 * h);
        const uint8_t *r = w.rest + blk * REST; // scales[12], d (2-byte aligned)
        const uint32_t w0 = gpu_ld_u32_a2(r), w1 = gpu_ld_u32_a2(r + 4), w2 = gpu_ld_u32_a2(r + 8);
        const float d = gpu_scale_h2f(gpu_ld_u16(r + 12));
        const uint32_t u[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
        const uint32_t hm[4] = {(uint32_t)hv.x, (uint32_t)hv.y, (uint32_t)hv.z, (uint32_t)hv.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int bit = 4 * n + j;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                c.q[j][i] = (int)(((u[i] >> (2 * j)) & 0x03030303u) | (((hm[i] >> bit) & 0x01010101u) << 2));
            }
            // 6-bit scale k = 8n + 2j + h: low 4 bits in byte (2j + h) % 8 (high nibble
            // when n = 1), high 2 bits at 2·(k/4) of byte 8 + k%4
            const int k = 8 * n + 2 * j + h;
            const uint32_t lo = (((j < 2 ? w0 : w1) >> (8 * (2 * (j % 2) + h))) >> (4 * n)) & 0xF;
            const uint32_t hi = ((w2 >> (8 * (k % 4))) >> (2 * (k / 4))) & 3;
            c.d[j] = d * (float)((int)(lo | (hi << 4)) - 32);
            c.m[j] = 0.0f;
            c.e[j] = e0 + 128 * n + 32 * j + 16 * h;
        }
    }
};

// Q4_K: chunk j = 32 bytes of qs = sub-blocks 2j (low nibbles) and 2j+1 (high).
template <> struct gpu_qt<GGML_TYPE_Q4_K> {
    static constexpr int QK = 256, QI = 4, R = 4, BYTES = 144, BULK_OFF = 16, BULK = 128, REST = 16,
                         SPAN = 64;
    static constexpr bool MIN = true, PAIRED = true;
    static constexpr int QMAX = 15, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        const int j = ci;
        const uint8_t *b = w.bulk + blk * BULK + 32 * j;
        const int4 v0 = gpu_ld16(b), v1 = gpu_ld16(b + 16);
        const int4 r = gpu_ld16(w.rest + blk * REST); // d, dmin, scales[12]
        const float d = gpu_scale_h2f((uint32_t)r.x & 0xFFFFu), dmin = gpu_scale_h2f((uint32_t)r.x >> 16);
        const uint32_t u0[4] = {(uint32_t)v0.x, (uint32_t)v0.y, (uint32_t)v0.z, (uint32_t)v0.w};
        const uint32_t u1[4] = {(uint32_t)v1.x, (uint32_t)v1.y, (uint32_t)v1.z, (uint32_t)v1.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)(u0[i] & 0x0F0F0F0Fu);
            c.q[1][i] = (int)(u1[i] & 0x0F0F0F0Fu);
            c.q[2][i] = (int)((u0[i] >> 4) & 0x0F0F0F0Fu);
            c.q[3][i] = (int)((u1[i] >> 4) & 0x0F0F0F0Fu);
        }
        float sc, mn;
        gpu_k4_scale_min((uint32_t)r.y, (uint32_t)r.z, (uint32_t)r.w, 2 * j, sc, mn);
        c.d[0] = c.d[1] = d * sc;
        c.m[0] = c.m[1] = -dmin * mn;
        gpu_k4_scale_min((uint32_t)r.y, (uint32_t)r.z, (uint32_t)r.w, 2 * j + 1, sc, mn);
        c.d[2] = c.d[3] = d * sc;
        c.m[2] = c.m[3] = -dmin * mn;
        c.e[0] = e0 + 64 * j;
        c.e[1] = e0 + 64 * j + 16;
        c.e[2] = e0 + 64 * j + 32;
        c.e[3] = e0 + 64 * j + 48;
    }
};

// Q5_K: as Q4_K, with the fifth bit of element 64j + 32t + l at bit 2j + t of qh[l].
template <> struct gpu_qt<GGML_TYPE_Q5_K> {
    static constexpr int QK = 256, QI = 4, R = 4, BYTES = 176, BULK_OFF = 16, BULK = 160, REST = 16,
                         SPAN = 64;
    static constexpr bool MIN = true, PAIRED = true;
    static constexpr int QMAX = 31, SGN = 0, CB = 0, BIAS = 0;
    GPU_QT_LOAD {
        const int j = ci;
        const uint8_t *b = w.bulk + blk * BULK; // qh[32], qs[128]
        const int4 h0 = gpu_ld16(b), h1 = gpu_ld16(b + 16);
        const int4 v0 = gpu_ld16(b + 32 + 32 * j), v1 = gpu_ld16(b + 48 + 32 * j);
        const int4 r = gpu_ld16(w.rest + blk * REST);
        const float d = gpu_scale_h2f((uint32_t)r.x & 0xFFFFu), dmin = gpu_scale_h2f((uint32_t)r.x >> 16);
        const uint32_t u0[4] = {(uint32_t)v0.x, (uint32_t)v0.y, (uint32_t)v0.z, (uint32_t)v0.w};
        const uint32_t u1[4] = {(uint32_t)v1.x, (uint32_t)v1.y, (uint32_t)v1.z, (uint32_t)v1.w};
        const uint32_t g0[4] = {(uint32_t)h0.x, (uint32_t)h0.y, (uint32_t)h0.z, (uint32_t)h0.w};
        const uint32_t g1[4] = {(uint32_t)h1.x, (uint32_t)h1.y, (uint32_t)h1.z, (uint32_t)h1.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)((u0[i] & 0x0F0F0F0Fu) | (((g0[i] >> (2 * j)) & 0x01010101u) << 4));
            c.q[1][i] = (int)((u1[i] & 0x0F0F0F0Fu) | (((g1[i] >> (2 * j)) & 0x01010101u) << 4));
            c.q[2][i] = (int)(((u0[i] >> 4) & 0x0F0F0F0Fu) | (((g0[i] >> (2 * j + 1)) & 0x01010101u) << 4));
            c.q[3][i] = (int)(((u1[i] >> 4) & 0x0F0F0F0Fu) | (((g1[i] >> (2 * j + 1)) & 0x01010101u) << 4));
        }
        float sc, mn;
        gpu_k4_scale_min((uint32_t)r.y, (uint32_t)r.z, (uint32_t)r.w, 2 * j, sc, mn);
        c.d[0] = c.d[1] = d * sc;
        c.m[0] = c.m[1] = -dmin * mn;
        gpu_k4_scale_min((uint32_t)r.y, (uint32_t)r.z, (uint32_t)r.w, 2 * j + 1, sc, mn);
        c.d[2] = c.d[3] = d * sc;
        c.m[2] = c.m[3] = -dmin * mn;
        c.e[0] = e0 + 64 * j;
        c.e[1] = e0 + 64 * j + 16;
        c.e[2] = e0 + 64 * j + 32;
        c.e[3] = e0 + 64 * j + 48;
    }
};

// Q6_K: chunk ci: half n = ci/4, r = ci%4: 16 bytes of ql at 64n + 16r hold
// groups g = r/2 (low nibbles) and g + 2 (high), lines l = 16·(r%2) + 0..15;
// the two high bits of element 128n + 32g + l are bits 2g of qh[32n + l].
template <> struct gpu_qt<GGML_TYPE_Q6_K> {
    static constexpr int QK = 256, QI = 8, R = 2, BYTES = 210, BULK_OFF = 0, BULK = 192, REST = 18,
                         SPAN = 128;
    static constexpr bool MIN = false, PAIRED = false;
    static constexpr int QMAX = 32, SGN = 1, CB = 0, BIAS = 32;
    GPU_QT_LOAD {
        load_raw(w, blk, ci, e0, c);
        gpu_unbias_chunk(c, 0x20202020u);
    }
    static __device__ __forceinline__ void load_raw(const gpu_mat &w, int64_t blk, int ci, int e0,
                                                    gpu_chunk<R> &c) {
        const int n = ci / 4, rr = ci % 4, g = rr / 2, ls = rr % 2;
        const uint8_t *b = w.bulk + blk * BULK; // ql[128], qh[64]
        const int4 lv = gpu_ld16(b + 64 * n + 16 * rr);
        const int4 hv = gpu_ld16(b + 128 + 32 * n + 16 * ls);
        const uint8_t *r = w.rest + blk * REST; // int8 scales[16], d
        const float d = gpu_scale_h2f(gpu_ld_u16(r + 16));
        const int8_t *sc = (const int8_t *)r + 8 * n + 2 * g + ls;
        const uint32_t ql[4] = {(uint32_t)lv.x, (uint32_t)lv.y, (uint32_t)lv.z, (uint32_t)lv.w};
        const uint32_t qh[4] = {(uint32_t)hv.x, (uint32_t)hv.y, (uint32_t)hv.z, (uint32_t)hv.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c.q[0][i] = (int)((ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * g)) & 0x03030303u) << 4));
            c.q[1][i] = (int)(((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * g + 4)) & 0x03030303u) << 4));
        }
        c.d[0] = d * (float)sc[0];
        c.d[1] = d * (float)sc[4];
        c.m[0] = c.m[1] = 0.0f;
        c.e[0] = e0 + 128 * n + 32 * g + 16 * ls;
        c.e[1] = e0 + 128 * n + 32 * (g + 2) + 16 * ls;
    }
};

// IQ4_XS: chunk ib = sub-block of 32, its 6-bit scale split over scales_l/_h.
template <> struct gpu_qt<GGML_TYPE_IQ4_XS> {
    static constexpr int QK = 256, QI = 8, R = 2, BYTES = 136, BULK_OFF = 8, BULK = 128, REST = 8, SPAN = 32;
    static constexpr bool MIN = false, PAIRED = true;
    static constexpr int QMAX = 127, SGN = 1, CB = 1, BIAS = 0;
    // chunk ib: the sub-block's 16 index bytes and its scale
    static __device__ __forceinline__ void load_any(const gpu_mat &w, int64_t blk, int ib, int e0, bool raw,
                                                    gpu_chunk<R> &c) {
        const int4 v = gpu_ld16(w.bulk + blk * BULK + 16 * ib);
        const uint2 r = *(const uint2 *)(w.rest + blk * REST); // d, scales_h | scales_l[4]
        const uint32_t ls = ((r.y >> (4 * ib)) & 0xF) | (((r.x >> (16 + 2 * ib)) & 3) << 4);
        gpu_iq4_chunk(v, gpu_scale_h2f(r.x & 0xFFFFu) * (float)((int)ls - 32), e0 + 32 * ib, raw, c);
    }
    GPU_QT_LOAD { load_any(w, blk, ci, e0, false, c); }
    static __device__ __forceinline__ void load_raw(const gpu_mat &w, int64_t blk, int ci, int e0,
                                                    gpu_chunk<R> &c) {
        load_any(w, blk, ci, e0, true, c);
    }
};

#undef GPU_QT_LOAD

// Loads chunk `item` (chunks counted along the row) of row `row` of w.
// RAW (CB and BIAS types only): what load_raw leaves.
template <class Q, bool RAW = false>
static __device__ __forceinline__ void gpu_load_item(const gpu_mat &w, int64_t row, int item,
                                                     gpu_chunk<Q::R> &c) {
    const int ib = item / Q::QI;
    if constexpr (RAW)
        Q::load_raw(w, row * (w.cols / Q::QK) + ib, item % Q::QI, ib * Q::QK, c);
    else
        Q::load(w, row * (w.cols / Q::QK) + ib, item % Q::QI, ib * Q::QK, c);
}

// Asks for chunk `item` of row `row` of w to be brought into the L2 cache
// (st_prefetch_l2): its 16 bytes of bulk and the block's rest.
template <class Q>
static __device__ __forceinline__ void gpu_prefetch_item(const gpu_mat &w, int64_t row, int item) {
    const int64_t blk = row * (w.cols / Q::QK) + item / Q::QI;
    st_prefetch_l2(w.bulk + blk * Q::BULK + (item % Q::QI) * (Q::BULK / Q::QI));
    st_prefetch_l2(w.rest + blk * Q::REST);
}

// Asks for rows row0 .. row0 + nrows - 1 of w (those below w.rows) to be
// brought into the L2 cache, the block's threads sharing out the 128-byte
// lines of their bulk and of their rest: one request a line (st_prefetch_l2;
// a line's start rounded down stays inside the weight's allocation, which
// starts on a 256-byte boundary with the bulk).
template <class Q>
static __device__ __forceinline__ void gpu_prefetch_rows(const gpu_mat &w, int64_t row0, int64_t nrows) {
    if (row0 + nrows > w.rows) nrows = w.rows - row0;
    if (nrows <= 0) return;
    const int64_t blocks = w.cols / Q::QK, b0 = row0 * blocks, b1 = (row0 + nrows) * blocks;
    const uintptr_t bulk0 = (uintptr_t)(w.bulk + b0 * Q::BULK) & ~(uintptr_t)127;
    const uintptr_t rest0 = (uintptr_t)(w.rest + b0 * Q::REST) & ~(uintptr_t)127;
    for (uintptr_t p = bulk0 + threadIdx.x * 128u; p < (uintptr_t)(w.bulk + b1 * Q::BULK);
         p += blockDim.x * 128u)
        st_prefetch_l2((const void *)p);
    for (uintptr_t p = rest0 + threadIdx.x * 128u; p < (uintptr_t)(w.rest + b1 * Q::REST);
         p += blockDim.x * 128u)
        st_prefetch_l2((const void *)p);
}

// acc + the dot product of 16 int8 weights (four to an int) with 16 int8 activations.
static __device__ __forceinline__ int gpu_dot16(const int (&q)[4], int4 a, int acc) {
    acc = st_dp4a(q[0], a.x, acc);
    acc = st_dp4a(q[1], a.y, acc);
    acc = st_dp4a(q[2], a.z, acc);
    return st_dp4a(q[3], a.w, acc);
}

// The activations a chunk's dot product reads, in one of two forms with the
// same integer results. gpu_act_q8: the 8-bit values as quantized (x.qs),
// summed with st_dp4a. gpu_act_swar: staged for the SWAR dot product of
// portable.h (st_dot16_swar, two products a 32-bit multiply), for targets
// without a native dp4a: the st_swar_act words of every 4-element group, in
// shared memory (gpu_swar_stage; gpu_swar_stage_cb for CB types). load(e)
// reads the run of 16 starting at element e (a multiple of 16); dot<Q>(q,
// run, acc) is acc + the dot product of the run with the 16 weights of a
// chunk run of type Q (its values within QMAX and SGN; for the SWAR form,
// CB and BIAS types as load_raw leaves them).
struct gpu_act_q8 {
    static constexpr bool RAW = false; // takes chunks looked up (CB types)
    const int8_t *qs;
    typedef int4 run;
    __device__ __forceinline__ run load(int e) const { return gpu_ld16(qs + e); }
    template <class Q> __device__ __forceinline__ int dot(const int (&q)[4], run a, int acc) const {
        return gpu_dot16(q, a, acc);
    }
};

// The staged words in 16-byte units (two 4-element groups each), unit u kept
// at unit gpu_swar_unit(u) of the stage: lanes whose runs lie 4, 8 or 16
// units apart (the chunks of neighbouring lanes) then read different banks
// of shared memory instead of the same few. A permutation of each aligned
// group of 8 units (bits 0-2 changed by bits 3 and up).
static __device__ __forceinline__ uint32_t gpu_swar_unit(uint32_t u) {
    return u ^ (((u >> 3) ^ (u >> 6)) & 7u);
}

// The SWAR form takes the chunks of CB and BIAS types raw: the codebook
// index bytes, each looked up in cb as one lane pair (entry i | j << 4 the
// pair of codebook values i and j, as st_pair_even would make it,
// gpu_swar_cb_table) against a stage that pairs elements k and k + 16
// (gpu_swar_stage_cb), or the unsigned bytes, the bias taken off each lane.
// The table is kept in cbs copies (a power of two, gpu_swar_cb_copies),
// entry i of copy c at word i·cbs + c, and a thread reads copy threadIdx.x %
// cbs: lanes reading different copies never meet on a bank, so a lookup of
// random indices costs about 2 passes of the shared memory at 16 copies
// instead of 3 to 4 at one (on the H200 the bank conflicts were half the
// kernel's shared-memory passes).
struct gpu_act_swar {
    static constexpr bool RAW = true;
    const uint4 *y;     // the stage
    const uint32_t *cb; // CB types: this thread's copy of the pair table (stride cbs)
    int cbs;            // CB types: the copies of the table
    struct run {
        uint32_t w[8];
    };
    __device__ __forceinline__ run load(int e) const {
        const uint32_t p = gpu_swar_unit((uint32_t)e / 8); // e / 8 even: unit e / 8 + 1 is at p ^ 1
        const uint4 a = y[p], b = y[p ^ 1u];
        return {{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}};
    }
    template <class Q> __device__ __forceinline__ int dot(const int (&q)[4], const run &a, int acc) const {
        uint32_t x[8]; // the lane pairs of elements 4i, 4i+2 and 4i+1, 4i+3
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t w = (uint32_t)q[i];
            if constexpr (Q::CB) { // q[0..1]: 8 index bytes, each a lane pair of the stage
                if (i < 2)
#pragma unroll
                    for (int j = 0; j < 4; j++) x[4 * i + j] = cb[((w >> (8 * j)) & 0xFFu) * (uint32_t)cbs];
            } else if constexpr (Q::BIAS) { // unsigned bytes, the bias taken off each lane
                x[2 * i] = st_pair_even(w, 0) - (uint32_t)Q::BIAS * 0x00010001u;
                x[2 * i + 1] = st_pair_odd(w, 0) - (uint32_t)Q::BIAS * 0x00010001u;
            } else {
                x[2 * i] = st_pair_even(w, Q::SGN);
                x[2 * i + 1] = st_pair_odd(w, Q::SGN);
            }
        }
        return st_dot16_swar_pairs(x, a.w, Q::QMAX, acc);
    }
};

// Fills the pair table of gpu_act_swar (cbs copies, 256 · cbs words of
// shared memory, 16-byte aligned) from the IQ4 codebook; the block's threads
// share the work, one 16-byte unit a step (gpu_swar_stage's barrier follows).
static __device__ __forceinline__ void gpu_swar_cb_table(uint32_t *cb, int cbs) {
    int sh = 0; // log2(cbs)
    while ((1 << sh) < cbs) sh++;
    for (int u = threadIdx.x; u < cbs * 256 / 4; u += blockDim.x) { // words 4u .. 4u + 3
        uint32_t t[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int i = (4 * u + j) >> sh; // the entry
            t[j] = (j > 0 && cbs >= 4)
                       ? t[0]
                       : (uint32_t)gpu_iq4_value(i & 15) + ((uint32_t)gpu_iq4_value(i >> 4) << 16);
        }
        ((uint4 *)cb)[u] = make_uint4(t[0], t[1], t[2], t[3]);
    }
}

// The stage of CB types (gpu_swar_cb_table's pairs): in each block of 32,
// word k (k < 16) is a[k + 16] + a[k]·2^16, in the same 16-byte units.
static __device__ __forceinline__ void gpu_swar_stage_cb(const int8_t *x, int64_t cols, uint4 *y) {
    const uint32_t *x4 = (const uint32_t *)x;
    for (int64_t u = threadIdx.x; u < cols / 8; u += blockDim.x) { // block u / 4, pairs 4 (u % 4) ..
        const uint32_t lo = x4[u / 4 * 8 + u % 4], hi = x4[u / 4 * 8 + u % 4 + 4];
        uint32_t t[4];
#pragma unroll
        for (int j = 0; j < 4; j++) t[j] = (uint32_t)st_sbyte(hi, j) + ((uint32_t)st_sbyte(lo, j) << 16);
        y[gpu_swar_unit((uint32_t)u)] = make_uint4(t[0], t[1], t[2], t[3]);
    }
    __syncthreads();
}

// Stages the activations x (cols int8, cols a multiple of 8) in y (cols / 2
// words of shared memory) for gpu_act_swar; every thread of the block calls it.
static __device__ __forceinline__ void gpu_swar_stage(const int8_t *x, int64_t cols, uint4 *y) {
    const uint2 *x8 = (const uint2 *)x;
    for (int64_t u = threadIdx.x; u < cols / 8; u += blockDim.x) {
        const uint2 a = x8[u];
        uint4 t;
        st_swar_act(a.x, &t.x, &t.y);
        st_swar_act(a.y, &t.z, &t.w);
        y[gpu_swar_unit((uint32_t)u)] = t;
    }
    __syncthreads();
}

// The bounds of an all-ones run (the sum of a run of activations).
struct gpu_qt_ones {
    static constexpr int QMAX = 1, SGN = 0, CB = 0, BIAS = 0;
};

// Dot products of RPW loaded chunks, one per weight row and all at the same
// place in their rows (the same e[]), with one row of activations (act, and
// ads the scale and scaled sum of each block of 32): each activation run is
// loaded once for all of them. v[k] for chunk k. The fused multiply-adds are
// written out, so that every compiler rounds the same sums the same way
// whatever integer form came before them (PoCL contracted the SWAR and dp4a
// forms of Q2_K differently).
template <class Q, int RPW, class A>
static __device__ __forceinline__ void gpu_chunk_dot_rows(const gpu_chunk<Q::R> (&c)[RPW], const A &act,
                                                          const float2 *ads, float (&v)[RPW]) {
#pragma unroll
    for (int k = 0; k < RPW; k++) v[k] = 0.0f;
    if (Q::PAIRED) {
#pragma unroll
        for (int p = 0; p < Q::R; p += 2) {
            const typename A::run a0 = act.load(c[0].e[p]), a1 = act.load(c[0].e[p] + 16);
            const float2 ds = ads[c[0].e[p] / 32];
#pragma unroll
            for (int k = 0; k < RPW; k++) {
                const int dot = act.template dot<Q>(c[k].q[p + 1], a1, act.template dot<Q>(c[k].q[p], a0, 0));
                v[k] = fmaf(c[k].d[p] * ds.x, (float)dot, v[k]);
                if (Q::MIN) v[k] = fmaf(c[k].m[p], ds.y, v[k]);
            }
        }
    } else {
#pragma unroll
        for (int r = 0; r < Q::R; r++) {
            const typename A::run a = act.load(c[0].e[r]);
            const float da = ads[c[0].e[r] / 32].x;
            const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
            const int sum = Q::MIN ? act.template dot<gpu_qt_ones>(ones, a, 0) : 0;
#pragma unroll
            for (int k = 0; k < RPW; k++) {
                float t = c[k].d[r] * (float)act.template dot<Q>(c[k].q[r], a, 0);
                if (Q::MIN) t = fmaf(c[k].m[r], (float)sum, t);
                v[k] = fmaf(da, t, v[k]);
            }
        }
    }
}

// Dot product of a loaded chunk with one row of activations.
template <class Q, class A>
static __device__ __forceinline__ float gpu_chunk_dot(const gpu_chunk<Q::R> &c, const A &act,
                                                      const float2 *ads) {
    const gpu_chunk<Q::R> one[1] = {c};
    float v[1];
    gpu_chunk_dot_rows<Q, 1>(one, act, ads, v);
    return v[0];
}

// Instantiates F<type> for the quantized weight types the GPU computes with,
// as the cases of a switch over an enum ggml_type.
#define GPU_QTYPE_CASES(F)                                                                                   \
    case GGML_TYPE_Q4_0:                                                                                     \
        F(GGML_TYPE_Q4_0);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q4_1:                                                                                     \
        F(GGML_TYPE_Q4_1);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q5_0:                                                                                     \
        F(GGML_TYPE_Q5_0);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q5_1:                                                                                     \
        F(GGML_TYPE_Q5_1);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q8_0:                                                                                     \
        F(GGML_TYPE_Q8_0);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q2_K:                                                                                     \
        F(GGML_TYPE_Q2_K);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q3_K:                                                                                     \
        F(GGML_TYPE_Q3_K);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q4_K:                                                                                     \
        F(GGML_TYPE_Q4_K);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q5_K:                                                                                     \
        F(GGML_TYPE_Q5_K);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_Q6_K:                                                                                     \
        F(GGML_TYPE_Q6_K);                                                                                   \
        break;                                                                                               \
    case GGML_TYPE_IQ4_NL:                                                                                   \
        F(GGML_TYPE_IQ4_NL);                                                                                 \
        break;                                                                                               \
    case GGML_TYPE_IQ4_XS:                                                                                   \
        F(GGML_TYPE_IQ4_XS);                                                                                 \
        break;

#endif
