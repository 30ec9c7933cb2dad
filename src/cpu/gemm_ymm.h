// gemm_ymm.h: the repacked matrix kernels (gemm.h) on 256-bit registers, written
// once and compiled twice: by gemm_avxvnni.c with YMM_VNNI 1 (vpdpbusd, VEX form)
// and by gemm_avx2.c with YMM_VNNI 0 (vpmaddubsw + vpmaddwd). Each includer sets
// the target pragma first and defines YMM_NAME(x) to name its functions.
//
// A ymm register holds 8 int32 lanes, so a group of 16 rows is done as two halves
// of 8 rows, each over the whole row for a tile of up to 4 tokens.
//
// Without VNNI, vpmaddubsw adds two u8·s8 products into a saturating int16: the
// word sums are grouped so that no int16 can overflow for activations in
// [-127, 127]: Q4 (u ≤ 15) adds all eight words in int16 (8·2·15·127 = 30480),
// Q6_K (u ≤ 63) two words (2·2·63·127 = 32004), and Q8_0 works on the signed
// quants one word at a time (2·128·127 = 32512), so it has no min term.
#include <immintrin.h>
#include <string.h>

#include "cpu/gemm.h"
#include "cpu/gemm_prefetch.h"

#define YTILE 4 // tokens per register tile
#define INLINE static inline __attribute__((always_inline))

INLINE __m256i y_bcast(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

INLINE __m256 y_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

// Half h of one Q4 block's nibble words: v[j] low, v[j+4] high nibbles of word j.
INLINE void y_unpack_q4(const uint8_t *qs, int h, __m256i v[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 64 * j + 32 * h));
        v[j] = _mm256_and_si256(bits, m4);
        v[j + 4] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    }
}

INLINE void y_unpack_q6(const uint8_t *ql, const uint8_t *qh, int h, __m256i v[8]) {
    y_unpack_q4(ql, h, v);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    for (int k = 0; k < 2; k++) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(qh + 64 * k + 32 * h));
        v[4 * k + 0] = _mm256_or_si256(v[4 * k + 0], _mm256_and_si256(_mm256_slli_epi16(b, 4), m30));
        v[4 * k + 1] = _mm256_or_si256(v[4 * k + 1], _mm256_and_si256(_mm256_slli_epi16(b, 2), m30));
        v[4 * k + 2] = _mm256_or_si256(v[4 * k + 2], _mm256_and_si256(b, m30));
        v[4 * k + 3] = _mm256_or_si256(v[4 * k + 3], _mm256_and_si256(_mm256_srli_epi16(b, 2), m30));
    }
}

// S[t] += Σ over words [j0, j1) of u8 v[j] · s8 activation word j of token t
// (whose block is at q + t·stride), per row. `wide` caps how many words may
// share an int16 sum without VNNI (see the top). With VNNI the words go across
// the tokens, so T chains of vpdpbusd overlap (one or two tokens split theirs).
INLINE void y_dot_tile(const int T, const __m256i v[8], const int8_t *q, size_t stride, int j0, int j1,
                       int wide, __m256i S[YTILE]) {
#if YMM_VNNI
    (void)wide;
    if (T <= 2) {
        __m256i S2[2];
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) S2[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = j0; j < j1; j += 2)
#pragma GCC unroll 2
            for (int t = 0; t < T; t++) {
                S[t] = _mm256_dpbusd_avx_epi32(S[t], v[j], y_bcast(q + (size_t)t * stride + 4 * j));
                S2[t] = _mm256_dpbusd_avx_epi32(S2[t], v[j + 1], y_bcast(q + (size_t)t * stride + 4 * j + 4));
            }
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) S[t] = _mm256_add_epi32(S[t], S2[t]);
        return;
    }
#pragma GCC unroll 8
    for (int j = j0; j < j1; j++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            S[t] = _mm256_dpbusd_avx_epi32(S[t], v[j], y_bcast(q + (size_t)t * stride + 4 * j));
#else
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const int8_t *qt = q + (size_t)t * stride;
#pragma GCC unroll 8
        for (int j = j0; j < j1; j += wide) {
            __m256i s16 = _mm256_maddubs_epi16(v[j], y_bcast(qt + 4 * j));
            for (int k = 1; k < wide; k++)
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(v[j + k], y_bcast(qt + 4 * (j + k))));
            S[t] = _mm256_add_epi32(S[t], _mm256_madd_epi16(s16, ones));
        }
    }
#endif
}

// Valid lanes of half h of group g (0..8) and their store mask.
INLINE int y_lanes(const struct gemm_weight *w, int64_t g, int h) {
    const int64_t left = w->rows - g * GEMM_R - 8 * h;
    return left >= 8 ? 8 : (left <= 0 ? 0 : (int)left);
}

INLINE void y_store(float *p, __m256 v, int lanes) {
    if (lanes == 8) {
        _mm256_storeu_ps(p, v);
    } else {
        const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), idx), v);
    }
}

// Half h of group g × tokens [t0, t0+T) of the 32-block types and Q4_K.
INLINE void y_tile_q(const enum gemm_type gt, const int T, const struct gemm_weight *w,
                     const struct gemm_act *a, int64_t g, int h, int t0, float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    const uint8_t *gp = w->data + (size_t)g * w->group_bytes;
    const int8_t *qa = a->qs + (size_t)t0 * (size_t)a->cols;
    const float *da = a->d + (size_t)t0 * (size_t)nb, *sa = a->s + (size_t)t0 * (size_t)nb;
    // Q4_0 and Q8_0 (with VNNI) start from the folded min; Q8_0 without VNNI works
    // on signed quants and needs none
    const bool biased = gt == GEMM_Q4_0 || (gt == GEMM_Q8_0 && YMM_VNNI);
    const int32_t *bias = biased ? a->bias + (size_t)t0 * (size_t)nb : NULL;
    __m256 acc[YTILE];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    __m256 d8 = _mm256_setzero_ps(), dmin8 = _mm256_setzero_ps();
    const size_t share = pf_share(w->group_bytes, nb);
    const int qbytes = gt == GEMM_Q8_0 ? (int)sizeof(struct gemm_q8_qs) : (int)sizeof(struct gemm_q4_qs);
    for (int64_t b = 0; b < nb; b++) {
        __m256i v[8];
        __m256 dv, mv;
        int wide = 8;
        // the first half's pass asks for the weights ahead; the second finds the group in cache
        if (h == 0 && gt == GEMM_Q4_K)
            prefetch_share(gp, share, b);
        else if (h == 0)
            prefetch_block(gp + w->scale_bytes + (size_t)b * (size_t)qbytes, qbytes);
        if (gt == GEMM_Q4_0 || gt == GEMM_Q4_1) {
            y_unpack_q4(gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q4_qs), h, v);
            const uint16_t *sc = (const uint16_t *)gp;
            if (gt == GEMM_Q4_0) {
                dv = y_f16(sc + b * GEMM_R + 8 * h);
                mv = _mm256_setzero_ps();
            } else {
                dv = y_f16(sc + b * 2 * GEMM_R + 8 * h);
                mv = y_f16(sc + b * 2 * GEMM_R + GEMM_R + 8 * h);
            }
        } else if (gt == GEMM_Q8_0) {
            const uint8_t *qs = gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q8_qs);
            for (int j = 0; j < 8; j++) v[j] = _mm256_loadu_si256((const __m256i *)(qs + 64 * j + 32 * h));
            dv = y_f16((const uint16_t *)gp + b * GEMM_R + 8 * h);
            mv = _mm256_setzero_ps();
        } else { // GEMM_Q4_K
            const struct gemm_q4_K *s = (const struct gemm_q4_K *)gp + b / 8;
            const int j = (int)(b % 8);
            if (j == 0) {
                d8 = y_f16(s->d + 8 * h);
                dmin8 = y_f16(s->dmin + 8 * h);
            }
            y_unpack_q4(&s->qs[j][0][0][0], h, v);
            const __m256 sc =
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&s->sc[j][8 * h])));
            const __m256 m =
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&s->m[j][8 * h])));
            dv = _mm256_mul_ps(d8, sc);
            mv = _mm256_mul_ps(_mm256_mul_ps(dmin8, m), _mm256_set1_ps(-1.0f));
        }
#if !YMM_VNNI
        __m256i absv[8];
        if (gt == GEMM_Q8_0)
            for (int j = 0; j < 8; j++) {
                v[j] = _mm256_xor_si256(v[j], _mm256_set1_epi8((char)0x80)); // the signed quants
                absv[j] = _mm256_sign_epi8(v[j], v[j]);
            }
#endif
        __m256i S[YTILE];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            S[t] =
                biased ? _mm256_set1_epi32(bias[(size_t)t * (size_t)nb + (size_t)b]) : _mm256_setzero_si256();
#if !YMM_VNNI
        if (gt == GEMM_Q8_0) {
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const int8_t *q = qa + (size_t)t * (size_t)a->cols + b * GEMM_QK;
                for (int j = 0; j < 8; j++) {
                    const __m256i p =
                        _mm256_maddubs_epi16(absv[j], _mm256_sign_epi8(y_bcast(q + 4 * j), v[j]));
                    S[t] = _mm256_add_epi32(S[t], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
                }
            }
        } else
#endif
            y_dot_tile(T, v, qa + b * GEMM_QK, (size_t)a->cols, 0, 8, wide, S);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const size_t ib = (size_t)t * (size_t)nb + (size_t)b;
            acc[t] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[t]), _mm256_mul_ps(dv, _mm256_set1_ps(da[ib])), acc[t]);
            if (gt == GEMM_Q4_1 || gt == GEMM_Q4_K)
                acc[t] = _mm256_fmadd_ps(mv, _mm256_set1_ps(sa[ib]), acc[t]);
        }
    }
    const int lanes = y_lanes(w, g, h);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y_store(y + (size_t)(t0 + t) * (size_t)ldy + g * GEMM_R + 8 * h, acc[t], lanes);
}

INLINE void y_tile_q6_K(const int T, const struct gemm_weight *w, const struct gemm_act *a, int64_t g, int h,
                        int t0, float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    const struct gemm_q6_K *s0 = (const struct gemm_q6_K *)(w->data + (size_t)g * w->group_bytes);
    const int8_t *qa = a->qs + (size_t)t0 * (size_t)a->cols;
    const float *da = a->d + (size_t)t0 * (size_t)nb;
    const int32_t *bias = a->bias + (size_t)t0 * (size_t)nb * 2;
    __m256 acc[YTILE];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    const size_t share = pf_share(w->group_bytes, nb);
    for (int64_t b = 0; b < nb; b++) {
        const struct gemm_q6_K *s = s0 + b / 8;
        const int bb = (int)(b % 8);
        __m256i v[8];
        if (h == 0) prefetch_share((const uint8_t *)s0, share, b);
        y_unpack_q6(&s->ql[bb][0][0][0], &s->qh[bb][0][0][0], h, v);
        const __m256 d = _mm256_loadu_ps(s->d + 8 * h);
        const __m256 ds0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                _mm_loadl_epi64((const __m128i *)&s->sc[2 * bb][8 * h]))));
        const __m256 ds1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                                (const __m128i *)&s->sc[2 * bb + 1][8 * h]))));
        // each half from the activation's −32·Σq of that half, with its own scale
#pragma GCC unroll 2
        for (int hh = 0; hh < 2; hh++) {
            const __m256 ds = hh ? ds1 : ds0;
            __m256i S[YTILE];
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                S[t] = _mm256_set1_epi32(bias[2 * ((size_t)t * (size_t)nb + (size_t)b) + hh]);
            y_dot_tile(T, v, qa + b * GEMM_QK, (size_t)a->cols, 4 * hh, 4 * hh + 4, 2, S);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                acc[t] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(S[t]),
                    _mm256_mul_ps(ds, _mm256_set1_ps(da[(size_t)t * (size_t)nb + (size_t)b])), acc[t]);
        }
    }
    const int lanes = y_lanes(w, g, h);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y_store(y + (size_t)(t0 + t) * (size_t)ldy + g * GEMM_R + 8 * h, acc[t], lanes);
}

#define Y_TILE_SWITCH(CALL)                                                                                  \
    switch (n) {                                                                                             \
    case 1:                                                                                                  \
        CALL(1);                                                                                             \
        break;                                                                                               \
    case 2:                                                                                                  \
        CALL(2);                                                                                             \
        break;                                                                                               \
    case 3:                                                                                                  \
        CALL(3);                                                                                             \
        break;                                                                                               \
    default:                                                                                                 \
        CALL(4);                                                                                             \
        break;                                                                                               \
    }

#define Y_DEFINE_KERNEL(name, TILE_CALL)                                                                     \
    static void name(const struct gemm_weight *w, const struct gemm_act *a, int t0, int nt, int64_t g0,      \
                     int64_t g1, float *y, int64_t ldy) {                                                    \
        for (int64_t g = g0; g < g1; g++)                                                                    \
            for (int h = 0; h < 2; h++) {                                                                    \
                if (!y_lanes(w, g, h)) continue;                                                             \
                for (int t = t0; t < t0 + nt; t += YTILE) {                                                  \
                    const int n = t0 + nt - t < YTILE ? t0 + nt - t : YTILE;                                 \
                    Y_TILE_SWITCH(TILE_CALL)                                                                 \
                }                                                                                            \
            }                                                                                                \
    }

#define Y_CALL_Q4_0(T) y_tile_q(GEMM_Q4_0, T, w, a, g, h, t, y, ldy)
#define Y_CALL_Q4_1(T) y_tile_q(GEMM_Q4_1, T, w, a, g, h, t, y, ldy)
#define Y_CALL_Q8_0(T) y_tile_q(GEMM_Q8_0, T, w, a, g, h, t, y, ldy)
#define Y_CALL_Q4_K(T) y_tile_q(GEMM_Q4_K, T, w, a, g, h, t, y, ldy)
#define Y_CALL_Q6_K(T) y_tile_q6_K(T, w, a, g, h, t, y, ldy)
Y_DEFINE_KERNEL(y_kernel_q4_0, Y_CALL_Q4_0)
Y_DEFINE_KERNEL(y_kernel_q4_1, Y_CALL_Q4_1)
Y_DEFINE_KERNEL(y_kernel_q8_0, Y_CALL_Q8_0)
Y_DEFINE_KERNEL(y_kernel_q4_K, Y_CALL_Q4_K)
Y_DEFINE_KERNEL(y_kernel_q6_K, Y_CALL_Q6_K)

const gemm_kernel_fn YMM_NAME(gemm_kernels)[GEMM_N_TYPES] = {y_kernel_q4_0, y_kernel_q4_1, y_kernel_q8_0,
                                                             y_kernel_q4_K, y_kernel_q6_K};
