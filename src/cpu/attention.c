// attention.c: see attention.h. Compiled for AVX-512 whatever -march says;
// called only when CPUID has it.
#include "cpu/attention.h"

#include <math.h>
#include <string.h>

#include "cpu/threadpool.h"
#include "util.h"


#define DSPLIT 256 // keys per task: ranges are absolute, so a token's arithmetic never depends on the batch

static int n_pieces(int n, int pos0) { return (pos0 + n + DSPLIT - 1) / DSPLIT; }

size_t attention_scratch_floats(int n_threads, int n, int pos0, int n_head, int n_head_kv, int head_dim) {
    (void)n_threads, (void)n_head_kv;
    return (size_t)n * n_head * (size_t)n_pieces(n, pos0) * ((size_t)head_dim + 2);
}

#if defined(__x86_64__)

#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
#endif

#include "cpu/simd_exp.h"

struct att_job {
    const float *q, *k, *v;
    float *out;
    int n, pos0, n_head, n_head_kv, hd;
    float scale;
    float *partials; // (n, n_head, pieces, hd + 2): max, sum, unnormalized output
    int pieces;      // key ranges of DSPLIT
};
// --- the kernel ---------------------------------------------------------------------------

// r[k] = Σ lanes of v[k], k < 16. The inputs are taken in transposed order
// (v[4(k%4) + k/4] as the k-th), which the three shuffle-and-add levels undo.
static inline __m512 hsum16(const __m512 v[16]) {
    __m512 a[8], b[4], c[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const __m512 x = v[4 * ((2 * i) % 4) + (2 * i) / 4], y = v[4 * ((2 * i + 1) % 4) + (2 * i + 1) / 4];
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xDD));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44), _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
}

static inline __mmask16 tail_mask(int left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }

// Task: token t, KV head hkv, keys [DSPLIT·piece, DSPLIT·(piece+1)) of the
// positions token t sees; the group's query heads in turn, each through the keys
// in blocks of 16 (absolute: block b holds keys 16b..16b+15) with an online
// softmax. Leaves (max, sum, unnormalized output) per head in the partials.
static void attention_task(void *arg, int task, int ith) {
    const struct att_job *j = arg;
    const int piece = task % j->pieces, hkv = task / j->pieces % j->n_head_kv;
    const int t = j->n - 1 - task / j->pieces / j->n_head_kv; // later tokens see more keys: they go first
    const int G = j->n_head / j->n_head_kv, hd = j->hd, kv_dim = j->n_head_kv * hd;
    const int k0 = piece * DSPLIT, n_kv = j->pos0 + t + 1;
    const int k1 = n_kv < k0 + DSPLIT ? n_kv : k0 + DSPLIT; // keys [k0, k1); none when k1 ≤ k0
    (void)ith;
    for (int g = 0; g < G; g++) {
        const int h = hkv * G + g;
        float *part = j->partials + (((size_t)t * j->n_head + h) * j->pieces + piece) * ((size_t)hd + 2);
        float *o = part + 2;
        memset(o, 0, sizeof(float) * (size_t)hd);
        const float *qh = j->q + ((size_t)t * j->n_head + h) * hd;
        __m512 m = _mm512_set1_ps(-INFINITY); // the running max, in every lane
        float l = 0;
        for (int kb = k0; kb < k1; kb += 16) {
            const int nk = k1 - kb < 16 ? k1 - kb : 16;
            const float *kc = j->k + (size_t)kb * kv_dim + (size_t)hkv * hd;
            const float *vc = j->v + (size_t)kb * kv_dim + (size_t)hkv * hd;
            // scores of the block's keys (lanes past nk: no load, −inf)
            __m512 acc[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
            for (int d = 0; d < hd; d += 16) {
                const __mmask16 mk = tail_mask(hd - d);
                const __m512 qd = _mm512_maskz_loadu_ps(mk, qh + d);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    if (i < nk) acc[i] = _mm512_fmadd_ps(qd, _mm512_maskz_loadu_ps(mk, kc + (size_t)i * kv_dim + d), acc[i]);
            }
            const __mmask16 valid = tail_mask(nk);
            const __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid,
                                                 _mm512_mul_ps(hsum16(acc), _mm512_set1_ps(j->scale)));
            const __m512 m_new = _mm512_max_ps(m, _mm512_set1_ps(_mm512_reduce_max_ps(sv)));
            const __m512 alpha = exp16(_mm512_sub_ps(m, m_new));
            const __m512 p = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(sv, m_new)));
            l = l * _mm_cvtss_f32(_mm512_castps512_ps128(alpha)) + _mm512_reduce_add_ps(p);
            m = m_new;
            float pk[16];
            _mm512_storeu_ps(pk, p);
            // o = o·alpha + Σ p_k v_k, 64 dimensions at a time, even and odd keys apart
            for (int d0 = 0; d0 < hd; d0 += 64) {
                __mmask16 mk[4];
                for (int c = 0; c < 4; c++) mk[c] = d0 + 16 * c < hd ? tail_mask(hd - d0 - 16 * c) : 0;
                __m512 oe[4], oo[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    oe[c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[c], o + d0 + 16 * c), alpha);
                    oo[c] = _mm512_setzero_ps();
                }
                int k = 0;
                for (; k + 2 <= nk; k += 2) {
                    const __m512 pe = _mm512_set1_ps(pk[k]), po = _mm512_set1_ps(pk[k + 1]);
                    const float *ve = vc + (size_t)k * kv_dim + d0, *vo = ve + kv_dim;
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) {
                        oe[c] = _mm512_fmadd_ps(pe, _mm512_maskz_loadu_ps(mk[c], ve + 16 * c), oe[c]);
                        oo[c] = _mm512_fmadd_ps(po, _mm512_maskz_loadu_ps(mk[c], vo + 16 * c), oo[c]);
                    }
                }
                if (k < nk) {
                    const __m512 pe = _mm512_set1_ps(pk[k]);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++)
                        oe[c] = _mm512_fmadd_ps(pe, _mm512_maskz_loadu_ps(mk[c], vc + (size_t)k * kv_dim + d0 + 16 * c), oe[c]);
                }
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(o + d0 + 16 * c, mk[c], _mm512_add_ps(oe[c], oo[c]));
            }
        }
        part[0] = _mm_cvtss_f32(_mm512_castps512_ps128(m));
        part[1] = l;
    }
}

// out = Σ pieces e^(m_i − M)·out_i / Σ e^(m_i − M)·l_i for each (token, head).
static void merge_task(void *arg, int th, int ith) {
    (void)ith;
    const struct att_job *j = arg;
    const int hd = j->hd;
    const float *part = j->partials + (size_t)th * j->pieces * ((size_t)hd + 2);
    float M = -INFINITY;
    for (int p = 0; p < j->pieces; p++) M = fmaxf(M, part[(size_t)p * (hd + 2)]);
    float *o = j->out + (size_t)th * hd;
    float l = 0;
    memset(o, 0, sizeof(float) * (size_t)hd);
    for (int p = 0; p < j->pieces; p++) {
        const float *pp = part + (size_t)p * (hd + 2);
        if (pp[1] == 0) continue; // a range the token does not reach
        const float w = expf(pp[0] - M);
        l += w * pp[1];
        for (int d = 0; d < hd; d++) o[d] += w * pp[2 + d];
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < hd; d++) o[d] *= inv;
}

void attention_avx512(struct threadpool *tp, const float *q, const float *k_cache, const float *v_cache,
                      float *out, int n, int pos0, int n_head, int n_head_kv, int head_dim, float *scratch) {
    struct att_job j = {q, k_cache, v_cache, out, n, pos0, n_head, n_head_kv, head_dim,
                        1.0f / sqrtf((float)head_dim), scratch, n_pieces(n, pos0)};
    threadpool_run_chunks(tp, attention_task, &j, n * n_head_kv * j.pieces);
    if (n * n_head >= 64) threadpool_run_chunks(tp, merge_task, &j, n * n_head);
    else for (int th = 0; th < n * n_head; th++) merge_task(&j, th, 0);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else // not x86-64: never called (gemm_isa_available says no AVX-512)

void attention_avx512(struct threadpool *tp, const float *q, const float *k_cache, const float *v_cache,
                      float *out, int n, int pos0, int n_head, int n_head_kv, int head_dim, float *scratch) {
    (void)tp, (void)q, (void)k_cache, (void)v_cache, (void)out, (void)n, (void)pos0, (void)n_head;
    (void)n_head_kv, (void)head_dim, (void)scratch;
    ST_ASSERT(!"attention_avx512 called on a CPU without AVX-512");
}

#endif
