// gemm_amx.c: the repacked matrix kernels (gemm.h) on AMX int8 tiles, for
// prompts (16 tokens or more at a time; single tokens stay on AVX-512 VNNI).
//
// For each group of 16 weight rows the kernel first unpacks every block of the
// group to signed or unsigned bytes in the tile layout of B (8 rows of 64
// bytes: row k holds elements 4k..4k+3 of the 16 weight rows, which is the
// repacked word order) and the blocks' scales to floats, once; then for each
// 16 tokens it walks the blocks: one tile multiply (16 tokens × 32 bytes of
// activations, A, times B) gives the 16 × 16 block sums, which AVX-512 scales by
// the token's and the row's block scales and adds to 16 float accumulators. The
// next block's multiply runs while the one before is scaled (two C tiles, three
// buffers for their sums).
// Integer sums and the float order are those of the AVX-512 kernels, so a
// token's outputs have the same bits in a prompt as alone (single tokens take
// AVX-512 VNNI). Q4_K, as there: each block's sums times d·sc into a
// super-block's part, then the mins in integers and the part times the
// super-block's activation scale into the sum, once every 8 blocks.
//
// Q4_0 and Q8_0 go through signed × signed products (nibble − 8, the Q8 bytes),
// Q4_1 and Q4_K signed activations × unsigned nibbles plus the min term. Q6_K
// has sub-blocks of 16 and stays on the AVX-512 VNNI kernel (NULL here).
// Tiles need the process's permission (arch_prctl), asked for by gemm.c.
#if defined(__x86_64__)

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm.h"
#include "util.h"

#if defined(__clang__)
#pragma clang attribute push(                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,amx-tile,amx-int8"))),                \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,amx-tile,amx-int8")
#endif

#define INLINE static inline __attribute__((always_inline))

struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Tiles 0, 1: C (16 tokens × 16 int32); 2, 3: A (16 tokens × 32 bytes); 4, 5: B
// (8 × 64 bytes). Pairs alternate between even and odd blocks.
static void config_tiles(void) {
    struct tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 2; i++) {
        c.rows[i] = 16, c.colsb[i] = 64;
        c.rows[2 + i] = 16, c.colsb[2 + i] = 32;
        c.rows[4 + i] = 8, c.colsb[4 + i] = 64;
    }
    // gcc's _tile_loadconfig tells the compiler it reads one byte: make every store land first
    __asm__ __volatile__("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

INLINE __m512 load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

// Nibble words of one Q4 block (struct gemm_q4_qs) as 8 B rows; minus `off`.
INLINE void unpack_q4(const uint8_t *qs, int8_t *b, int off) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), o = _mm512_set1_epi8((char)off);
    for (int j = 0; j < 4; j++) {
        const __m512i bits = _mm512_loadu_si512((const void *)(qs + 64 * j));
        _mm512_storeu_si512(b + 64 * j, _mm512_sub_epi8(_mm512_and_si512(bits, m4), o));
        _mm512_storeu_si512(b + 64 * (j + 4),
                            _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(bits, 4), m4), o));
    }
}

// Group g's blocks as B tiles (bb: nb × 512 bytes) and their scales and mins
// (dv, mv: nb × 16 floats; mv only for Q4_1, whose min term is a float per
// block; Q4_K's mins are taken from the weight at each super-block's end).
static void unpack_group(enum gemm_type gt, const struct gemm_weight *w, int64_t g, int8_t *bb, float *dv,
                         float *mv) {
    const int64_t nb = w->cols / GEMM_QK;
    const uint8_t *gp = w->data + (size_t)g * w->group_bytes;
    for (int64_t b = 0; b < nb; b++) {
        int8_t *bt = bb + (size_t)b * 512;
        float *d = dv + b * GEMM_R, *m = mv ? mv + b * GEMM_R : NULL;
        switch (gt) {
        case GEMM_Q4_0:
            unpack_q4(gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q4_qs), bt, 8);
            _mm512_storeu_ps(d, load_f16((const uint16_t *)gp + b * GEMM_R));
            break;
        case GEMM_Q4_1:
            unpack_q4(gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q4_qs), bt, 0);
            _mm512_storeu_ps(d, load_f16((const uint16_t *)gp + b * 2 * GEMM_R));
            _mm512_storeu_ps(m, load_f16((const uint16_t *)gp + b * 2 * GEMM_R + GEMM_R));
            break;
        case GEMM_Q8_0: {
            const uint8_t *qs = gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q8_qs);
            for (int j = 0; j < 8; j++)
                _mm512_storeu_si512(bt + 64 * j,
                                    _mm512_xor_si512(_mm512_loadu_si512((const void *)(qs + 64 * j)),
                                                     _mm512_set1_epi8((char)0x80)));
            _mm512_storeu_ps(d, load_f16((const uint16_t *)gp + b * GEMM_R));
            break;
        }
        case GEMM_Q4_K: {
            const struct gemm_q4_K *s = (const struct gemm_q4_K *)gp + b / 8;
            const int j = (int)(b % 8);
            unpack_q4(&s->qs[j][0][0][0], bt, 0);
            const __m512 sc =
                _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s->sc[j])));
            _mm512_storeu_ps(d, _mm512_mul_ps(load_f16(s->d), sc)); // mins: at the fold (epilogue_q4_K)
            break;
        }
        default:
            ST_ASSERT(0);
        }
    }
}

// acc[t] += C[t] · (dv · da[t]) (+ mv · s[t]) for the 16 tokens of one block.
INLINE void epilogue(const int32_t *c, const float *dv, const float *mv, const float *da, const float *sa,
                     int64_t nb, __m512 acc[16]) {
    const __m512 d = _mm512_loadu_ps(dv);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        const __m512 ct = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + 16 * t)));
        acc[t] = _mm512_fmadd_ps(ct, _mm512_mul_ps(d, _mm512_set1_ps(da[(size_t)t * nb])), acc[t]);
    }
    if (mv) {
        const __m512 m = _mm512_loadu_ps(mv);
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(sa[(size_t)t * nb]), acc[t]);
    }
}

// Q4_K block b: part[t] += C[t] · dv (dv = d·sc_j); at the end of a
// super-block (b % 8 == 7) its min term −dmin·Σ_j m_j·Σq_j in integers into
// part (vpdpwssd over pairs of blocks), then acc[t] += part[t] · da of the
// super-block and part = 0: the order of the AVX-512 kernel's q4_K_block and
// q4_K_fold. acc lives in memory (16 × 16 floats): it is touched once a
// super-block, and part takes the registers.
INLINE void epilogue_q4_K(const int32_t *c, const float *dv, const struct gemm_q4_K *s, const float *da,
                          const int16_t *qsum, int64_t b, int64_t nb, __m512 part[16], float *acc) {
    const __m512 d = _mm512_loadu_ps(dv + b * GEMM_R);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++)
        part[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(c + 16 * t))), d, part[t]);
    if (b % 8 != 7) return;
    const int64_t b0 = b - 7;
    const struct gemm_q4_K *sb = s + b0 / 8;
    __m512i mp[4]; // each row's (m_2k, m_2k+1) as a pair of int16
    for (int k = 0; k < 4; k++)
        mp[k] = _mm512_or_si512(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sb->m[2 * k])),
            _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sb->m[2 * k + 1])), 16));
    const __m512 ndmin = _mm512_xor_ps(load_f16(sb->dmin), _mm512_set1_ps(-0.0f));
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        const int16_t *qt = qsum + (size_t)t * (size_t)nb + b0;
        __m512i mins = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            int32_t pair;
            memcpy(&pair, qt + 2 * k, sizeof pair);
            mins = _mm512_dpwssd_epi32(mins, mp[k], _mm512_set1_epi32(pair));
        }
        part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), ndmin, part[t]);
        _mm512_store_ps(acc + 16 * t,
                        _mm512_fmadd_ps(part[t], _mm512_set1_ps(da[(size_t)t * (size_t)nb + b0]),
                                        _mm512_load_ps(acc + 16 * t)));
        part[t] = _mm512_setzero_ps();
    }
}

// Block b's sums into the accumulators, by type.
#define EPILOGUE(bk)                                                                                         \
    do {                                                                                                     \
        const int32_t *cb_ = cbuf + 256 * ((bk) % 3);                                                        \
        if (gt == GEMM_Q4_K)                                                                                 \
            epilogue_q4_K(cb_, dv, sk, da, qsum, (bk), nb, part, acck);                                      \
        else                                                                                                 \
            epilogue(cb_, dv + (bk)*GEMM_R, mv ? mv + (bk)*GEMM_R : NULL, da + (bk), sa + (bk), nb, acc);    \
    } while (0)

// The tile product of block b into C tile CT with A tile AT and B tile BT.
#define TILE_BLOCK(CT, AT, BT, b, SIGNED)                                                                    \
    do {                                                                                                     \
        _tile_loadd(AT, qa + (size_t)(b)*GEMM_QK, (long)a->cols);                                            \
        _tile_loadd(BT, bb + (size_t)(b)*512, 64);                                                           \
        _tile_zero(CT);                                                                                      \
        if (SIGNED)                                                                                          \
            _tile_dpbssd(CT, AT, BT);                                                                        \
        else                                                                                                 \
            _tile_dpbsud(CT, AT, BT);                                                                        \
    } while (0)

INLINE void amx_kernel(const enum gemm_type gt, const struct gemm_weight *w, const struct gemm_act *a, int t0,
                       int nt, int64_t g0, int64_t g1, float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    const bool has_min = gt == GEMM_Q4_1 || gt == GEMM_Q4_K, is_signed = !has_min;
    uint8_t *mem = aligned_alloc(64, (size_t)nb * 512 + (size_t)nb * GEMM_R * 4 * 2 + 3072 + 1024);
    ST_ASSERT(mem); // about 600 bytes per 32 columns
    int8_t *bb = (int8_t *)mem;
    float *dv = (float *)(mem + (size_t)nb * 512), *mv = gt == GEMM_Q4_1 ? dv + nb * GEMM_R : NULL;
    int32_t *cbuf = (int32_t *)(mem + (size_t)nb * 512 + (size_t)nb * GEMM_R * 4 * 2);
    float *acck = (float *)(cbuf + 3 * 256); // Q4_K's accumulators (epilogue_q4_K), 16 × 16
    config_tiles();
    for (int64_t g = g0; g < g1; g++) {
        unpack_group(gt, w, g, bb, dv, mv);
        const int64_t left = w->rows - g * GEMM_R;
        const __mmask16 rows = left >= GEMM_R ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        for (int tt = t0; tt < t0 + nt; tt += 16) {
            // rows past the batch are padding the activation buffer holds (gemm_act_layout)
            const int8_t *qa = a->qs + (size_t)tt * (size_t)a->cols;
            const float *da = a->d + (size_t)tt * (size_t)nb, *sa = a->s + (size_t)tt * (size_t)nb;
            const int16_t *qsum = a->qsum ? a->qsum + (size_t)tt * (size_t)nb : NULL;
            const struct gemm_q4_K *sk = (const struct gemm_q4_K *)(w->data + (size_t)g * w->group_bytes);
            __m512 acc[16], part[16];
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) acc[t] = part[t] = _mm512_setzero_ps();
            if (gt == GEMM_Q4_K) memset(acck, 0, sizeof(float) * 256);
            // block b's product runs in C tile b % 2 while block b − 1's sums, stored a
            // block earlier (AMX stores are slow to forward to vector loads), are scaled
            TILE_BLOCK(0, 2, 4, 0, is_signed);
            for (int64_t b = 0; b < nb; b += 2) {
                if (b + 1 < nb) TILE_BLOCK(1, 3, 5, b + 1, is_signed);
                _tile_stored(0, cbuf + 256 * (b % 3), 64);
                if (b > 0) EPILOGUE(b - 1);
                if (b + 1 < nb) {
                    if (b + 2 < nb) TILE_BLOCK(0, 2, 4, b + 2, is_signed);
                    _tile_stored(1, cbuf + 256 * ((b + 1) % 3), 64);
                    EPILOGUE(b);
                }
            }
            EPILOGUE(nb - 1);
            const int ntok = t0 + nt - tt < 16 ? t0 + nt - tt : 16;
            for (int t = 0; t < ntok; t++)
                _mm512_mask_storeu_ps(y + (size_t)(tt + t) * (size_t)ldy + g * GEMM_R, rows,
                                      gt == GEMM_Q4_K ? _mm512_load_ps(acck + 16 * t) : acc[t]);
        }
    }
    _tile_release();
    free(mem);
}

#define DEFINE_AMX(name, GT)                                                                                 \
    static void name(const struct gemm_weight *w, const struct gemm_act *a, int t0, int nt, int64_t g0,      \
                     int64_t g1, float *y, int64_t ldy) {                                                    \
        amx_kernel(GT, w, a, t0, nt, g0, g1, y, ldy);                                                        \
    }
DEFINE_AMX(amx_q4_0, GEMM_Q4_0)
DEFINE_AMX(amx_q4_1, GEMM_Q4_1)
DEFINE_AMX(amx_q8_0, GEMM_Q8_0)
DEFINE_AMX(amx_q4_K, GEMM_Q4_K)

const gemm_kernel_fn gemm_kernels_amx[GEMM_N_TYPES] = {amx_q4_0, amx_q4_1, amx_q8_0, amx_q4_K, NULL};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
