// gemm_avx512.c: the repacked matrix kernels (gemm.h) for AVX-512 with VNNI.
//
// A zmm register holds 16 int32 lanes, one per row of a group. For each 32-element
// block the 16 rows' quants are unpacked once into eight registers v[j] (word j:
// elements 4j..4j+3 of every row), and reused for a tile of up to 8 tokens: eight
// vpdpbusd against each token's broadcast activation words give the 16 rows' block
// sums (issued word by word across the tile, so the tokens' chains overlap),
// which are scaled and accumulated in float. Compiled for these
// instructions whatever -march says; gemm.c calls them only when CPUID has them.
#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "cpu/gemm.h"
#include "cpu/gemm_prefetch.h"

#if defined(__clang__)
#pragma clang attribute push(                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
#endif

#define TILE 8 // tokens per register tile

#define INLINE static inline __attribute__((always_inline))

INLINE __m512i bcast_word(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

// Loads 16 fp16 scales as floats.
INLINE __m512 load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

// The nibble words of one Q4 block: v[j] low nibbles, v[j+4] high nibbles of word j.
INLINE void unpack_q4(const uint8_t *qs, __m512i v[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i bits = _mm512_loadu_si512((const void *)(qs + 64 * j));
        v[j] = _mm512_and_si512(bits, m4);
        v[j + 4] = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
    }
}

// Q6_K block: nibbles as Q4 plus the two high bits moved to bits 4-5.
INLINE void unpack_q6(const uint8_t *ql, const uint8_t *qh, __m512i v[8]) {
    unpack_q4(ql, v);
    const __m512i m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        const __m512i h = _mm512_loadu_si512((const void *)(qh + 64 * k));
        v[4 * k + 0] = _mm512_or_si512(v[4 * k + 0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
        v[4 * k + 1] = _mm512_or_si512(v[4 * k + 1], _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
        v[4 * k + 2] = _mm512_or_si512(v[4 * k + 2], _mm512_and_si512(h, m30));
        v[4 * k + 3] = _mm512_or_si512(v[4 * k + 3], _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
    }
}

// S[t] += Σ over words [j0, j1) of v[j] · token t's activation word j (int32 per
// row), token t's block at q + t·stride. Word by word across the tokens: T
// independent vpdpbusd chains in flight, not one chain of 8 per token.
INLINE void dot_tile(const int T, const __m512i v[8], const int8_t *q, size_t stride, int j0, int j1,
                     __m512i S[TILE]) {
    if (T <= 2) { // too few tokens to hide the latency: each splits its chain in two
        __m512i S2[2];
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) S2[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int j = j0; j < j1; j += 2)
#pragma GCC unroll 2
            for (int t = 0; t < T; t++) {
                S[t] = _mm512_dpbusd_epi32(S[t], v[j], bcast_word(q + (size_t)t * stride + 4 * j));
                S2[t] = _mm512_dpbusd_epi32(S2[t], v[j + 1], bcast_word(q + (size_t)t * stride + 4 * j + 4));
            }
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) S[t] = _mm512_add_epi32(S[t], S2[t]);
        return;
    }
#pragma GCC unroll 8
    for (int j = j0; j < j1; j++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            S[t] = _mm512_dpbusd_epi32(S[t], v[j], bcast_word(q + (size_t)t * stride + 4 * j));
}

// Rows of group g that exist, as a store mask.
INLINE __mmask16 row_mask(const struct gemm_weight *w, int64_t g) {
    const int64_t left = w->rows - g * GEMM_R;
    return left >= GEMM_R ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

// Row r of group g for token t0 + t: acc[t] lane r (the rows that exist).
INLINE void store_tile(const int T, const struct gemm_weight *w, int64_t g, int t0, float *y, int64_t ldy,
                       const __m512 acc[TILE]) {
    const __mmask16 mask = row_mask(w, g);
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * (size_t)ldy + g * GEMM_R, mask, acc[t]);
}

// One group g × tokens [t0, t0+T) of the 32-block types: per block, v, scale
// dv and min mv, then for each token acc += S·(dv·da) + mv·s; for Q4_0 and Q8_0
// the min is in the bias S starts from.
INLINE void tile_q(const enum gemm_type gt, const int T, const struct gemm_weight *w,
                   const struct gemm_act *a, int64_t g, int t0, float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    const uint8_t *gp = w->data + (size_t)g * w->group_bytes;
    const int8_t *qa = a->qs + (size_t)t0 * (size_t)a->cols;
    const float *da = a->d + (size_t)t0 * (size_t)nb, *sa = a->s + (size_t)t0 * (size_t)nb;
    const bool biased = gt == GEMM_Q4_0 || gt == GEMM_Q8_0;
    const size_t share = pf_share(w->group_bytes, nb);
    const int32_t *bias = biased ? a->bias + (size_t)t0 * (size_t)nb : NULL;
    __m512 acc[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i v[8];
        __m512 dv, mv;
        prefetch_share(gp, share, b);
        if (gt != GEMM_Q8_0) {
            unpack_q4(gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q4_qs), v);
            const uint16_t *sc = (const uint16_t *)gp;
            if (gt == GEMM_Q4_0) {
                dv = load_f16(sc + b * GEMM_R);
                mv = _mm512_setzero_ps();
            } else {
                dv = load_f16(sc + b * 2 * GEMM_R);
                mv = load_f16(sc + b * 2 * GEMM_R + GEMM_R);
            }
        } else {
            const uint8_t *qs = gp + w->scale_bytes + (size_t)b * sizeof(struct gemm_q8_qs);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) v[j] = _mm512_loadu_si512((const void *)(qs + 64 * j));
            dv = load_f16((const uint16_t *)gp + b * GEMM_R);
            mv = _mm512_setzero_ps();
        }
        __m512i S[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            S[t] =
                biased ? _mm512_set1_epi32(bias[(size_t)t * (size_t)nb + (size_t)b]) : _mm512_setzero_si512();
        dot_tile(T, v, qa + b * GEMM_QK, (size_t)a->cols, 0, 8, S);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const size_t ib = (size_t)t * (size_t)nb + (size_t)b;
            acc[t] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[t]), _mm512_mul_ps(dv, _mm512_set1_ps(da[ib])), acc[t]);
            if (!biased) acc[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(sa[ib]), acc[t]);
        }
    }
    store_tile(T, w, g, t0, y, ldy, acc);
}

// The K types' activations share one scale da per super-block (super_scales),
// so their tiles sum each super-block in units of da ("part") and scale it once,
// after its 8 blocks. One token streams its blocks in one flat loop; a tile of
// several tokens runs the 8 blocks as a loop of their own, where the compiler
// keeps part, the sums and the quants in registers: at 8 tokens the flat loop
// spilled, at one token the nested one streamed 10-20% slower (measured with
// test_gemm --perf; the machine code of the two looked alike).
#define K_TILE_LOOP(BLOCK, FOLD)                                                                             \
    if (T == 1) {                                                                                            \
        for (int64_t b = 0; b < nb; b++) {                                                                   \
            BLOCK(b);                                                                                        \
            if (b % 8 == 7) FOLD(b - 7);                                                                     \
        }                                                                                                    \
    } else {                                                                                                 \
        for (int64_t b0 = 0; b0 < nb; b0 += 8) {                                                             \
            for (int64_t b = b0; b < b0 + 8; b++) BLOCK(b);                                                  \
            FOLD(b0);                                                                                        \
        }                                                                                                    \
    }

// Q4_K block b: part += S·dv per token, dv = d·sc_j (j = b % 8).
INLINE void q4_K_block(const int T, const struct gemm_q4_K *s, int j, const int8_t *qa, size_t stride,
                       __m512 part[TILE]) {
    __m512i v[8];
    unpack_q4(&s->qs[j][0][0][0], v);
    __m512i S[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) S[t] = _mm512_setzero_si512();
    dot_tile(T, v, qa, stride, 0, 8, S);
    const __m512 dv = _mm512_mul_ps(
        load_f16(s->d), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s->sc[j]))));
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[t]), dv, part[t]);
}

// acc += part·da[t·nb], then part = 0.
INLINE void k_fold(const int T, const float *da, int64_t nb, __m512 part[TILE], __m512 acc[TILE]) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        acc[t] = _mm512_fmadd_ps(part[t], _mm512_set1_ps(da[(size_t)t * (size_t)nb]), acc[t]);
        part[t] = _mm512_setzero_ps();
    }
}

// The end of a Q4_K super-block: its min term −dmin·Σ_j m_j·Σq_j, in integers
// (vpdpwssd over pairs of blocks, with the activation block sums qsum[0..8) of
// each token, nb apart), into part; then acc += part·da[t·nb], and part = 0.
INLINE void q4_K_fold(const int T, const struct gemm_q4_K *s, const int16_t *qsum, const float *da,
                      int64_t nb, __m512 part[TILE], __m512 acc[TILE]) {
    __m512i mp[4]; // each row's (m_2k, m_2k+1) as a pair of int16
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        mp[k] = _mm512_or_si512(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s->m[2 * k])),
            _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s->m[2 * k + 1])), 16));
    const __m512 ndmin = _mm512_xor_ps(load_f16(s->dmin), _mm512_set1_ps(-0.0f));
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        const int16_t *qt = qsum + (size_t)t * (size_t)nb;
        __m512i mins = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            mins = _mm512_dpwssd_epi32(mins, mp[k], bcast_word((const int8_t *)(qt + 2 * k)));
        part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), ndmin, part[t]);
    }
    k_fold(T, da, nb, part, acc);
}

// Q4_K: per block, the scale dv = d·sc_j; for each token part += S·dv; the
// mins once per super-block in integers (q4_K_fold). Against scaling every
// block by its activation scale and adding every block's min in float, two
// float operations a block and token fewer, on the pipes the VNNI products
// also use (Zen 4: 91 → 75 a block of 8 tokens).
INLINE void tile_q4_K(const int T, const struct gemm_weight *w, const struct gemm_act *a, int64_t g, int t0,
                      float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    const uint8_t *gp = w->data + (size_t)g * w->group_bytes;
    const struct gemm_q4_K *s0 = (const struct gemm_q4_K *)gp;
    const int8_t *qa = a->qs + (size_t)t0 * (size_t)a->cols;
    const float *da = a->d + (size_t)t0 * (size_t)nb;
    const int16_t *qsum = a->qsum + (size_t)t0 * (size_t)nb;
    const size_t share = pf_share(w->group_bytes, nb);
    __m512 acc[TILE], part[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = part[t] = _mm512_setzero_ps();
#define BLOCK(b)                                                                                             \
    do {                                                                                                     \
        prefetch_share(gp, share, b);                                                                        \
        q4_K_block(T, s0 + (b) / 8, (int)((b) % 8), qa + (b)*GEMM_QK, (size_t)a->cols, part);                \
    } while (0)
#define FOLD(b0) q4_K_fold(T, s0 + (b0) / 8, qsum + (b0), da + (b0), nb, part, acc)
    K_TILE_LOOP(BLOCK, FOLD)
#undef BLOCK
#undef FOLD
    store_tile(T, w, g, t0, y, ldy, acc);
}

// Q6_K block b: two 16-element halves, each with its own scale d·sc, both
// starting from the activation's −32·Σq of that half: part += S·d·sc.
INLINE void q6_K_block(const int T, const struct gemm_q6_K *s, int bb, const int8_t *qa, size_t stride,
                       const int32_t *bias, int64_t nb, __m512 part[TILE]) {
    __m512i v[8];
    unpack_q6(&s->ql[bb][0][0][0], &s->qh[bb][0][0][0], v);
    const __m512 d = _mm512_loadu_ps(s->d);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512 ds = _mm512_mul_ps(
            d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)s->sc[2 * bb + h]))));
        __m512i S[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) S[t] = _mm512_set1_epi32(bias[2 * (size_t)t * (size_t)nb + (size_t)h]);
        dot_tile(T, v, qa, stride, 4 * h, 4 * h + 4, S);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) part[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[t]), ds, part[t]);
    }
}

// Q6_K: every block's halves into part (q6_K_block), scaled once per
// super-block.
INLINE void tile_q6_K(const int T, const struct gemm_weight *w, const struct gemm_act *a, int64_t g, int t0,
                      float *y, int64_t ldy) {
    const int64_t nb = w->cols / GEMM_QK;
    const struct gemm_q6_K *s0 = (const struct gemm_q6_K *)(w->data + (size_t)g * w->group_bytes);
    const int8_t *qa = a->qs + (size_t)t0 * (size_t)a->cols;
    const float *da = a->d + (size_t)t0 * (size_t)nb;
    const int32_t *bias = a->bias + (size_t)t0 * (size_t)nb * 2;
    const size_t share = pf_share(w->group_bytes, nb);
    __m512 acc[TILE], part[TILE];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) acc[t] = part[t] = _mm512_setzero_ps();
#define BLOCK(b)                                                                                             \
    do {                                                                                                     \
        prefetch_share((const uint8_t *)s0, share, b);                                                       \
        q6_K_block(T, s0 + (b) / 8, (int)((b) % 8), qa + (b)*GEMM_QK, (size_t)a->cols, bias + 2 * (b), nb,   \
                   part);                                                                                    \
    } while (0)
#define FOLD(b0) k_fold(T, da + (b0), nb, part, acc)
    K_TILE_LOOP(BLOCK, FOLD)
#undef BLOCK
#undef FOLD
    store_tile(T, w, g, t0, y, ldy, acc);
}

// The kernels: groups outermost (a group's weights stay in L1 across token tiles).
#define TILE_SWITCH(CALL)                                                                                    \
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
    case 4:                                                                                                  \
        CALL(4);                                                                                             \
        break;                                                                                               \
    case 5:                                                                                                  \
        CALL(5);                                                                                             \
        break;                                                                                               \
    case 6:                                                                                                  \
        CALL(6);                                                                                             \
        break;                                                                                               \
    case 7:                                                                                                  \
        CALL(7);                                                                                             \
        break;                                                                                               \
    default:                                                                                                 \
        CALL(8);                                                                                             \
        break;                                                                                               \
    }

#define DEFINE_KERNEL(name, TILE_CALL)                                                                       \
    static void name(const struct gemm_weight *w, const struct gemm_act *a, int t0, int nt, int64_t g0,      \
                     int64_t g1, float *y, int64_t ldy) {                                                    \
        for (int64_t g = g0; g < g1; g++)                                                                    \
            for (int t = t0; t < t0 + nt; t += TILE) {                                                       \
                const int n = t0 + nt - t < TILE ? t0 + nt - t : TILE;                                       \
                TILE_SWITCH(TILE_CALL)                                                                       \
            }                                                                                                \
    }

#define CALL_Q4_0(T) tile_q(GEMM_Q4_0, T, w, a, g, t, y, ldy)
#define CALL_Q4_1(T) tile_q(GEMM_Q4_1, T, w, a, g, t, y, ldy)
#define CALL_Q8_0(T) tile_q(GEMM_Q8_0, T, w, a, g, t, y, ldy)
#define CALL_Q4_K(T) tile_q4_K(T, w, a, g, t, y, ldy)
#define CALL_Q6_K(T) tile_q6_K(T, w, a, g, t, y, ldy)
DEFINE_KERNEL(kernel_q4_0, CALL_Q4_0)
DEFINE_KERNEL(kernel_q4_1, CALL_Q4_1)
DEFINE_KERNEL(kernel_q8_0, CALL_Q8_0)
DEFINE_KERNEL(kernel_q4_K, CALL_Q4_K)
DEFINE_KERNEL(kernel_q6_K, CALL_Q6_K)

const gemm_kernel_fn gemm_kernels_avx512[GEMM_N_TYPES] = {kernel_q4_0, kernel_q4_1, kernel_q8_0, kernel_q4_K,
                                                          kernel_q6_K};

// --- activations ------------------------------------------------------------------------
// The same arithmetic as gemm_quantize_scalar, 16 lanes at a time: identical results.

void gemm_quantize_avx512(const float *x, struct gemm_act *a, int t0, int t1) {
    const int64_t nb = a->cols / GEMM_QK;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const int64_t span = gemm_act_span(a);
    float amax = 0;
    for (int t = t0; t < t1; t++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + (size_t)t * (size_t)a->cols + b * GEMM_QK;
            if (b % span == 0) { // over the blocks that share a scale (fewer at a row's end)
                const int64_t blocks = nb - b < span ? nb - b : span;
                // max(|x|, m): a NaN |x| yields m, as fmaxf does
                __m512 m = _mm512_setzero_ps();
                for (int64_t k = 0; k < 2 * blocks; k++)
                    m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(xb + 16 * k)), m);
                amax = _mm512_reduce_max_ps(m);
            }
            const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
            const __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
            const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
            const __m512i q0 =
                _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x0, id), lo), hi));
            const __m512i q1 =
                _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x1, id), lo), hi));
            int8_t *qb = a->qs + (size_t)t * (size_t)a->cols + b * GEMM_QK;
            _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtepi32_epi8(q1));
            const int s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
            const size_t i = (size_t)t * (size_t)nb + (size_t)b;
            gemm_act_scales(a, i, amax, s0 + s1);
            if (a->qsum) a->qsum[i] = (int16_t)(s0 + s1); // |Σq| ≤ 32·127
            if (a->bias_n == 1)
                a->bias[i] = a->bias_mul * (s0 + s1);
            else if (a->bias_n == 2)
                a->bias[2 * i] = a->bias_mul * s0, a->bias[2 * i + 1] = a->bias_mul * s1;
        }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
