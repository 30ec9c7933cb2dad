// attention.c: see attention.h. Compiled for AVX-512 whatever -march says;
// called only when CPUID has it.
#include "cpu/attention.h"

#include <math.h>
#include <string.h>

#include "cpu/threadpool.h"
#include "util.h"

#define QB 16 // queries per flash task (the lanes of a zmm)
#define KB 16 // keys per block

#define DSPLIT 256 // keys per task when few queries score a long cache

// Per-thread scratch, then the few-query tasks' partial results (m, l, out[hd]
// per head of the group).
static size_t per_thread(int n_head, int n_head_kv, int head_dim) {
    const size_t flash = 2 * (size_t)head_dim * QB + 2 * QB;
    const size_t decode = (size_t)(n_head / n_head_kv) * DSPLIT;
    return (flash > decode ? flash : decode) + 16;
}

static int n_pieces(int n, int pos0) { return (pos0 + n + DSPLIT - 1) / DSPLIT; }

size_t attention_scratch_floats(int n_threads, int n, int pos0, int n_head, int n_head_kv, int head_dim) {
    const size_t partials = (size_t)n * n_head * (size_t)n_pieces(n, pos0) * ((size_t)head_dim + 2);
    return (size_t)n_threads * per_thread(n_head, n_head_kv, head_dim) + partials;
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
    float *scratch;   // per-thread blocks of `stride` floats
    size_t stride;
    float *partials;  // few-query tasks: (n, n_head, pieces, hd + 2)
    int n_qb;         // query blocks per head (flash)
    int pieces;       // key ranges of DSPLIT per (token, KV head) (few queries)
};

// --- prompts: flash kernel ------------------------------------------------------------

// One block of KB keys from j0 for the QB queries in Qt (d-major) of one head:
// online-softmax update of the running max m, sum l and output Ot (d-major).
// `diag`: queries at positions p0 + lane, so key j is masked where j > p0 + lane.
static inline void flash_block(const struct att_job *j, const float *Qt, float *Ot, const float *kb,
                               const float *vb, int kv_dim, bool diag, int key0, int p0, __m512 *m, __m512 *l) {
    const int hd = j->hd;
    __m512 s[KB];
#pragma GCC unroll 16
    for (int k = 0; k < KB; k++) s[k] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const __m512 qd = _mm512_loadu_ps(Qt + (size_t)d * QB);
#pragma GCC unroll 16
        for (int k = 0; k < KB; k++) s[k] = _mm512_fmadd_ps(qd, _mm512_set1_ps(kb[(size_t)k * kv_dim + d]), s[k]);
    }
    if (diag) {
#pragma GCC unroll 16
        for (int k = 0; k < KB; k++) {
            const int first = key0 + k - p0; // first lane that sees key key0 + k
            if (first > 0) {
                const __mmask16 hidden = first >= QB ? (__mmask16)0xFFFF : (__mmask16)((1u << first) - 1);
                s[k] = _mm512_mask_mov_ps(s[k], hidden, _mm512_set1_ps(-INFINITY));
            }
        }
    }
    __m512 mx = s[0];
#pragma GCC unroll 16
    for (int k = 1; k < KB; k++) mx = _mm512_max_ps(mx, s[k]);
    const __m512 m_new = _mm512_max_ps(*m, mx);
    const __m512 alpha = exp16(_mm512_sub_ps(*m, m_new));
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int k = 0; k < KB; k++) {
        s[k] = exp16(_mm512_sub_ps(s[k], m_new));
        sum = _mm512_add_ps(sum, s[k]);
    }
    *l = _mm512_fmadd_ps(*l, alpha, sum);
    *m = m_new;
    // four output dimensions at a time: four independent chains of multiply-adds
    int d = 0;
    for (; d + 4 <= hd; d += 4) {
        __m512 o[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) o[i] = _mm512_mul_ps(_mm512_loadu_ps(Ot + (size_t)(d + i) * QB), alpha);
#pragma GCC unroll 16
        for (int k = 0; k < KB; k++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) o[i] = _mm512_fmadd_ps(s[k], _mm512_set1_ps(vb[(size_t)k * kv_dim + d + i]), o[i]);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) _mm512_storeu_ps(Ot + (size_t)(d + i) * QB, o[i]);
    }
    for (; d < hd; d++) {
        __m512 o = _mm512_mul_ps(_mm512_loadu_ps(Ot + (size_t)d * QB), alpha);
#pragma GCC unroll 16
        for (int k = 0; k < KB; k++) o = _mm512_fmadd_ps(s[k], _mm512_set1_ps(vb[(size_t)k * kv_dim + d]), o);
        _mm512_storeu_ps(Ot + (size_t)d * QB, o);
    }
}

// The same for one key (the ragged end of a head's keys).
static inline void flash_key(const struct att_job *j, const float *Qt, float *Ot, const float *kr, const float *vr,
                             int key, int p0, __m512 *m, __m512 *l) {
    __m512 s = _mm512_setzero_ps();
    for (int d = 0; d < j->hd; d++) s = _mm512_fmadd_ps(_mm512_loadu_ps(Qt + (size_t)d * QB), _mm512_set1_ps(kr[d]), s);
    const int first = key - p0;
    if (first > 0) {
        const __mmask16 hidden = first >= QB ? (__mmask16)0xFFFF : (__mmask16)((1u << first) - 1);
        s = _mm512_mask_mov_ps(s, hidden, _mm512_set1_ps(-INFINITY));
    }
    const __m512 m_new = _mm512_max_ps(*m, s);
    const __m512 alpha = exp16(_mm512_sub_ps(*m, m_new));
    const __m512 p = exp16(_mm512_sub_ps(s, m_new));
    *l = _mm512_fmadd_ps(*l, alpha, p);
    *m = m_new;
    for (int d = 0; d < j->hd; d++) {
        const __m512 o = _mm512_mul_ps(_mm512_loadu_ps(Ot + (size_t)d * QB), alpha);
        _mm512_storeu_ps(Ot + (size_t)d * QB, _mm512_fmadd_ps(p, _mm512_set1_ps(vr[d]), o));
    }
}

// Task: head h, queries [t0, t0 + QB) (the later query blocks first: they see
// more keys, so the long tasks start early).
static void flash_task(void *arg, int task, int ith) {
    const struct att_job *j = arg;
    const int h = task % j->n_head, qb = j->n_qb - 1 - task / j->n_head;
    const int t0 = qb * QB, nq = j->n - t0 < QB ? j->n - t0 : QB;
    const int hd = j->hd, kv_dim = j->n_head_kv * hd, hkv = h / (j->n_head / j->n_head_kv);
    float *Qt = j->scratch + (size_t)ith * j->stride, *Ot = Qt + (size_t)hd * QB;
    for (int d = 0; d < hd; d++)
        for (int l = 0; l < QB; l++)
            Qt[(size_t)d * QB + l] = l < nq ? j->q[((size_t)(t0 + l) * j->n_head + h) * hd + d] * j->scale : 0.0f;
    memset(Ot, 0, sizeof(float) * (size_t)hd * QB);
    __m512 m = _mm512_set1_ps(-INFINITY), l = _mm512_setzero_ps();
    const int p0 = j->pos0 + t0;      // position of lane 0
    const int kend = p0 + nq;         // keys [0, kend) exist and some lane sees them
    const float *kc = j->k + (size_t)hkv * hd, *vc = j->v + (size_t)hkv * hd;
    int key = 0;
    for (; key + KB <= kend; key += KB)
        flash_block(j, Qt, Ot, kc + (size_t)key * kv_dim, vc + (size_t)key * kv_dim, kv_dim, key + KB - 1 > p0, key,
                    p0, &m, &l);
    for (; key < kend; key++) flash_key(j, Qt, Ot, kc + (size_t)key * kv_dim, vc + (size_t)key * kv_dim, key, p0, &m, &l);
    float inv[QB];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
    for (int lq = 0; lq < nq; lq++) {
        float *o = j->out + ((size_t)(t0 + lq) * j->n_head + h) * hd;
        for (int d = 0; d < hd; d++) o[d] = Ot[(size_t)d * QB + lq] * inv[lq];
    }
}

// --- few queries: key ranges scored in one pass, merged at the end -------------------

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

static inline float dot_hd(const float *a, const float *b, int hd) {
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        const __mmask16 mk = tail_mask(hd - d);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + d), _mm512_maskz_loadu_ps(mk, b + d), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

// Task: token t, KV head hkv, keys [DSPLIT·piece, ...) of the positions token t
// sees; the group's query heads in turn. Leaves (max, sum, unnormalized output)
// per head in the task's partials.
static void decode_task(void *arg, int task, int ith) {
    const struct att_job *j = arg;
    const int piece = task % j->pieces, hkv = task / j->pieces % j->n_head_kv, t = task / j->pieces / j->n_head_kv;
    const int G = j->n_head / j->n_head_kv, hd = j->hd, kv_dim = j->n_head_kv * hd;
    const int k0 = piece * DSPLIT, n_kv = j->pos0 + t + 1;
    const int nk = n_kv - k0 < DSPLIT ? n_kv - k0 : DSPLIT; // may be ≤ 0: nothing to see
    const float *kc = j->k + (size_t)k0 * kv_dim + (size_t)hkv * hd, *vc = j->v + (size_t)k0 * kv_dim + (size_t)hkv * hd;
    float *s = j->scratch + (size_t)ith * j->stride;
    for (int g = 0; g < G; g++) {
        const int h = hkv * G + g;
        float *part = j->partials + (((size_t)t * j->n_head + h) * j->pieces + piece) * ((size_t)hd + 2);
        float *o = part + 2;
        memset(o, 0, sizeof(float) * (size_t)hd);
        if (nk <= 0) {
            part[0] = -INFINITY, part[1] = 0;
            continue;
        }
        const float *qh = j->q + ((size_t)t * j->n_head + h) * hd;
        int k = 0;
        for (; k + 16 <= nk; k += 16) {
            __m512 acc[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
            for (int d = 0; d < hd; d += 16) {
                const __mmask16 mk = tail_mask(hd - d);
                const __m512 qd = _mm512_maskz_loadu_ps(mk, qh + d);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    acc[i] = _mm512_fmadd_ps(qd, _mm512_maskz_loadu_ps(mk, kc + (size_t)(k + i) * kv_dim + d), acc[i]);
            }
            _mm512_storeu_ps(s + k, _mm512_mul_ps(hsum16(acc), _mm512_set1_ps(j->scale)));
        }
        for (; k < nk; k++) s[k] = dot_hd(qh, kc + (size_t)k * kv_dim, hd) * j->scale;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (k = 0; k < nk; k += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, tail_mask(nk - k), s + k));
        const float m = _mm512_reduce_max_ps(mx);
        __m512 sum = _mm512_setzero_ps();
        for (k = 0; k < nk; k += 16) {
            const __mmask16 mk = tail_mask(nk - k);
            const __m512 e = _mm512_maskz_mov_ps(mk, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + k), _mm512_set1_ps(m))));
            _mm512_mask_storeu_ps(s + k, mk, e);
            sum = _mm512_add_ps(sum, e);
        }
        // 64 output dimensions at a time, even and odd keys apart: eight independent
        // chains of multiply-adds
        for (int d0 = 0; d0 < hd; d0 += 64) {
            __mmask16 mk[4];
            for (int c = 0; c < 4; c++) mk[c] = d0 + 16 * c < hd ? tail_mask(hd - d0 - 16 * c) : 0;
            __m512 oe[4], oo[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) oe[c] = oo[c] = _mm512_setzero_ps();
            for (k = 0; k + 2 <= nk; k += 2) {
                const __m512 pe = _mm512_set1_ps(s[k]), po = _mm512_set1_ps(s[k + 1]);
                const float *ve = vc + (size_t)k * kv_dim + d0, *vo = ve + kv_dim;
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    oe[c] = _mm512_fmadd_ps(pe, _mm512_maskz_loadu_ps(mk[c], ve + 16 * c), oe[c]);
                    oo[c] = _mm512_fmadd_ps(po, _mm512_maskz_loadu_ps(mk[c], vo + 16 * c), oo[c]);
                }
            }
            if (k < nk) {
                const __m512 pe = _mm512_set1_ps(s[k]);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    oe[c] = _mm512_fmadd_ps(pe, _mm512_maskz_loadu_ps(mk[c], vc + (size_t)k * kv_dim + d0 + 16 * c), oe[c]);
            }
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(o + d0 + 16 * c, mk[c], _mm512_add_ps(oe[c], oo[c]));
        }
        part[0] = m;
        part[1] = _mm512_reduce_add_ps(sum);
    }
}

// out = Σ pieces e^(m_i − M)·out_i / Σ e^(m_i − M)·l_i for each (token, head).
static void decode_merge(const struct att_job *j) {
    const int hd = j->hd;
    for (int th = 0; th < j->n * j->n_head; th++) {
        const float *part = j->partials + (size_t)th * j->pieces * ((size_t)hd + 2);
        float M = -INFINITY;
        for (int p = 0; p < j->pieces; p++) M = fmaxf(M, part[(size_t)p * (hd + 2)]);
        float *o = j->out + (size_t)th * hd;
        float l = 0;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int p = 0; p < j->pieces; p++) {
            const float *pp = part + (size_t)p * (hd + 2);
            if (pp[1] == 0) continue; // an empty range
            const float w = expf(pp[0] - M);
            l += w * pp[1];
            for (int d = 0; d < hd; d++) o[d] += w * pp[2 + d];
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; d++) o[d] *= inv;
    }
}

void attention_avx512(struct threadpool *tp, const float *q, const float *k_cache, const float *v_cache,
                      float *out, int n, int pos0, int n_head, int n_head_kv, int head_dim, float *scratch) {
    struct att_job j = {q, k_cache, v_cache, out, n, pos0, n_head, n_head_kv, head_dim,
                        1.0f / sqrtf((float)head_dim), scratch, per_thread(n_head, n_head_kv, head_dim), NULL,
                        (n + QB - 1) / QB, n_pieces(n, pos0)};
    j.partials = scratch + (size_t)threadpool_size(tp) * j.stride;
    if (n >= 8) {
        threadpool_run_chunks(tp, flash_task, &j, n_head * j.n_qb);
    } else {
        threadpool_run_chunks(tp, decode_task, &j, n * n_head_kv * j.pieces);
        decode_merge(&j);
    }
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
