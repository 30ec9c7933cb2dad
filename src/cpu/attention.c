// attention.c: see attention.h. Compiled for AVX-512 whatever -march says;
// called only when CPUID has it.
#include "cpu/attention.h"

#include <math.h>
#include <string.h>

#include "backend.h"
#include "cpu/threadpool.h"
#include "util.h"

#define DSPLIT 128 // keys per task: ranges are absolute, so a token's arithmetic never depends on the batch

static int n_pieces(int n, int pos0) { return (pos0 + n + DSPLIT - 1) / DSPLIT; }

#define TQ 4 // tokens per task: they share each block of keys and values in L1

// Per thread: the running max and sum of a task's queries.
static size_t per_thread(int n_head, int n_head_kv) {
    (void)n_head_kv;
    return (size_t)2 * TQ * (size_t)n_head + 16;
}

// The partials of one run: (n, n_head, pieces, hd + 2) floats.
static size_t run_partials(const struct att_run *r, int n_head, int head_dim) {
    return (size_t)r->n * n_head * (size_t)n_pieces(r->n, r->pos0) * ((size_t)head_dim + 2);
}

size_t attention_scratch_floats(int n_threads, const struct att_run *runs, int n_runs, int n_head,
                                int n_head_kv, int head_dim) {
    size_t f = (size_t)n_threads * per_thread(n_head, n_head_kv);
    for (int i = 0; i < n_runs; i++) f += run_partials(&runs[i], n_head, head_dim);
    return f;
}

#if defined(__x86_64__)

#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))),              \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
#endif

#include "cpu/simd_exp.h"

struct att_job {
    const float *q;
    const char *k, *v; // the run's first cache row
    int f16;           // the caches hold halves (else floats)
    float *out;
    int n, pos0, n_head, n_head_kv, hd;
    float scale, softcap; // softcap 0: none
    int window;           // keys a token sees, itself included; 0: all before it
    float *partials;      // (n, n_head, pieces, hd + 2): max, sum, unnormalized output
    int pieces;           // key ranges of DSPLIT
    float *scratch;       // per thread: stride floats
    size_t stride;
};
// --- the kernel ---------------------------------------------------------------------------

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

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
        c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

// 16 elements of a cache from element i of c (lanes of mk; 0 elsewhere), as
// floats: c holds halves when f16, else floats. Callers pass f16 as a constant.
static ALWAYS_INLINE __m512 kv16(const char *c, size_t i, __mmask16 mk, int f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)c + i));
    return _mm512_maskz_loadu_ps(mk, (const float *)c + i);
}

// Scores (unscaled) of the ns ≤ 16 keys from kc (rows kv_dim apart) for query q:
// lane i = q · k_i, lanes from ns on −inf (and their keys not read).
static ALWAYS_INLINE __m512 score16(const float *q, const char *kc, int kv_dim, int hd, int ns, int f16) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    if (ns == 16 && hd % 16 == 0) {
        for (int d = 0; d < hd; d += 16) {
            const __m512 qd = _mm512_loadu_ps(q + d);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                acc[i] = _mm512_fmadd_ps(qd, kv16(kc, (size_t)i * kv_dim + d, 0xFFFF, f16), acc[i]);
        }
    } else {
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 mk = tail_mask(hd - d);
            const __m512 qd = _mm512_maskz_loadu_ps(mk, q + d);
            for (int i = 0; i < ns; i++)
                acc[i] = _mm512_fmadd_ps(qd, kv16(kc, (size_t)i * kv_dim + d, mk, f16), acc[i]);
        }
    }
    return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), tail_mask(ns), hsum16(acc));
}

// o (hd) = o·alpha + Σ_k<nk p_k v_k (rows kv_dim apart): 64 dimensions at a time,
// even and odd keys apart (eight independent chains of multiply-adds).
static ALWAYS_INLINE void pv_update(float *o, __m512 alpha, const float *pk, const char *vc, int kv_dim,
                                    int hd, int nk, int f16) {
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
            const size_t ve = (size_t)k * kv_dim + d0, vo = ve + kv_dim;
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                oe[c] = _mm512_fmadd_ps(pe, kv16(vc, ve + 16 * c, mk[c], f16), oe[c]);
                oo[c] = _mm512_fmadd_ps(po, kv16(vc, vo + 16 * c, mk[c], f16), oo[c]);
            }
        }
        if (k < nk) {
            const __m512 pe = _mm512_set1_ps(pk[k]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                oe[c] = _mm512_fmadd_ps(pe, kv16(vc, (size_t)k * kv_dim + d0 + 16 * c, mk[c], f16), oe[c]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm512_mask_storeu_ps(o + d0 + 16 * c, mk[c], _mm512_add_ps(oe[c], oo[c]));
    }
}

#define KBLK 64 // keys per online-softmax step

#define QG 4 // queries stepped together (their dependency chains interleave)

// The online-softmax step of nq ≤ QG queries qh[i] (state m[i], l[i], o[i]) over
// the nk ≤ KBLK keys from kc / vc (rows kv_dim apart), of which query i skips the
// first lo[i] < nk (before its sliding window): all scores first, then all
// softmax updates, then the value sums, so one query's long chain of dependent
// steps overlaps another's. Each query's arithmetic is its own. Scores are
// q·k·scale, then cap·tanh(score/cap) when cap > 0. The caches hold halves
// when f16 (a constant in each of the two forms below).
static ALWAYS_INLINE void queries_block_t(int nq, const float *const *qh, const int *lo, const char *kc,
                                          const char *vc, int kv_dim, int hd, int nk, __m512 scale, float cap,
                                          float *m, float *l, float *const *o, int f16) {
    float sc[QG][KBLK], pk[QG][KBLK];
    __m512 alpha[QG];
    for (int i = 0; i < nq; i++) {
#pragma GCC unroll 4
        for (int sb = 0; sb < KBLK / 16; sb++) {
            const int ns = nk - 16 * sb < 0 ? 0 : (nk - 16 * sb > 16 ? 16 : nk - 16 * sb);
            const __m512 sv = ns ? _mm512_mul_ps(score16(qh[i], kc + (size_t)16 * sb * kv_dim * (f16 ? 2 : 4),
                                                         kv_dim, hd, ns, f16),
                                                 scale)
                                 : _mm512_set1_ps(-INFINITY);
            _mm512_storeu_ps(sc[i] + 16 * sb, sv);
        }
        if (cap > 0)
            for (int k = lo[i]; k < nk; k++) sc[i][k] = cap * tanhf(sc[i][k] / cap);
        for (int k = 0; k < lo[i]; k++) sc[i][k] = -INFINITY;
    }
    for (int i = 0; i < nq; i++) {
        __m512 mx = _mm512_loadu_ps(sc[i]);
#pragma GCC unroll 3
        for (int sb = 1; sb < KBLK / 16; sb++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sc[i] + 16 * sb));
        const __m512 m_old = _mm512_set1_ps(m[i]);
        const __m512 m_new = _mm512_max_ps(m_old, _mm512_set1_ps(_mm512_reduce_max_ps(mx)));
        alpha[i] = exp16(_mm512_sub_ps(m_old, m_new));
        __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int sb = 0; sb < KBLK / 16; sb++) {
            const __m512 sv = _mm512_loadu_ps(sc[i] + 16 * sb);
            const __mmask16 seen = _mm512_cmp_ps_mask(sv, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
            const __m512 p = _mm512_maskz_mov_ps(seen, exp16(_mm512_sub_ps(sv, m_new))); // 0 at −inf
            sum = _mm512_add_ps(sum, p);
            _mm512_storeu_ps(pk[i] + 16 * sb, p);
        }
        l[i] = l[i] * _mm_cvtss_f32(_mm512_castps512_ps128(alpha[i])) + _mm512_reduce_add_ps(sum);
        m[i] = _mm_cvtss_f32(_mm512_castps512_ps128(m_new));
    }
    for (int i = 0; i < nq; i++) pv_update(o[i], alpha[i], pk[i], vc, kv_dim, hd, nk, f16);
}

static void queries_block_f32(int nq, const float *const *qh, const int *lo, const char *kc, const char *vc,
                              int kv_dim, int hd, int nk, __m512 scale, float cap, float *m, float *l,
                              float *const *o) {
    queries_block_t(nq, qh, lo, kc, vc, kv_dim, hd, nk, scale, cap, m, l, o, 0);
}

static void queries_block_f16(int nq, const float *const *qh, const int *lo, const char *kc, const char *vc,
                              int kv_dim, int hd, int nk, __m512 scale, float cap, float *m, float *l,
                              float *const *o) {
    queries_block_t(nq, qh, lo, kc, vc, kv_dim, hd, nk, scale, cap, m, l, o, 1);
}

// Tokens [t0, t0 + nt), KV heads [hkv0, hkv1), keys [DSPLIT·piece,
// DSPLIT·(piece+1)) of the positions each token sees. Each block of 64 keys
// (absolute: block b holds keys 64b..64b+63) goes through every query (token,
// head) that sees part of it, each with its own online softmax, so every query's
// arithmetic is the same whatever its batch and whichever task computes it.
// Leaves (max, sum, unnormalized output) per query in the partials.
static void attend(const struct att_job *j, int t0, int nt, int hkv0, int hkv1, int piece, int ith) {
    const int G = j->n_head / j->n_head_kv, hd = j->hd, kv_dim = j->n_head_kv * hd;
    const int nh = (hkv1 - hkv0) * G; // query heads of the task
    const size_t es = j->f16 ? 2 : 4; // bytes of a cache element
    void (*const queries_block)(int, const float *const *, const int *, const char *, const char *, int, int,
                                int, __m512, float, float *, float *, float *const *) =
        j->f16 ? queries_block_f16 : queries_block_f32;
    const int k0 = piece * DSPLIT;
    const __m512 scale = _mm512_set1_ps(j->scale);
    float *ms = j->scratch + (size_t)ith * j->stride, *ls = ms + TQ * j->n_head; // per query of the task
#define PART(t, h) (j->partials + (((size_t)(t)*j->n_head + (h)) * j->pieces + piece) * ((size_t)hd + 2))
    for (int i = 0; i < nt * nh; i++) {
        memset(PART(t0 + i / nh, hkv0 * G + i % nh), 0, sizeof(float) * ((size_t)hd + 2));
        ms[i] = -INFINITY, ls[i] = 0;
    }
    const int kend = j->pos0 + t0 + nt; // keys the task's last token sees
    const int k1 = kend < k0 + DSPLIT ? kend : k0 + DSPLIT;
    for (int kb = k0; kb < k1; kb += KBLK) {
        if (j->n < TQ) // a few queries stream the cache: ask for the next block's rows early
            for (int r = KBLK; r < 2 * KBLK && kb + r < k1; r++)
                for (int d = hkv0 * hd; d < hkv1 * hd; d += 64 / (int)es) { // a cache line at a time
                    _mm_prefetch(j->k + ((size_t)(kb + r) * kv_dim + d) * es, _MM_HINT_T0);
                    _mm_prefetch(j->v + ((size_t)(kb + r) * kv_dim + d) * es, _MM_HINT_T0);
                }
        for (int hkv = hkv0; hkv < hkv1; hkv++) {
            const char *kc = j->k + ((size_t)kb * kv_dim + (size_t)hkv * hd) * es;
            const char *vc = j->v + ((size_t)kb * kv_dim + (size_t)hkv * hd) * es;
            // the queries (token, head of this KV head) that see part of this block, QG at a time
            const float *qs[QG];
            float *os[QG], mq[QG], lq[QG];
            int idx[QG], los[QG], nq = 0, nk_q = 0;
            for (int tt = 0; tt < nt; tt++) {
                const int n_kv = j->pos0 + t0 + tt + 1; // keys token t0 + tt sees: [first, n_kv)
                const int first = j->window > 0 && n_kv > j->window ? n_kv - j->window : 0;
                if (kb >= n_kv || kb + KBLK <= first) continue;
                const int nk = n_kv - kb < KBLK ? n_kv - kb : KBLK;
                for (int g = 0; g < G; g++) {
                    if (nq == QG || (nq && nk != nk_q)) { // a full set, or queries that see other keys
                        queries_block(nq, qs, los, kc, vc, kv_dim, hd, nk_q, scale, j->softcap, mq, lq, os);
                        for (int i = 0; i < nq; i++) ms[idx[i]] = mq[i], ls[idx[i]] = lq[i];
                        nq = 0;
                    }
                    const int t = t0 + tt, h = hkv * G + g;
                    const int i = tt * nh + (hkv - hkv0) * G + g;
                    qs[nq] = j->q + ((size_t)t * j->n_head + h) * hd;
                    os[nq] = PART(t, h) + 2;
                    mq[nq] = ms[i], lq[nq] = ls[i], idx[nq] = i, los[nq] = first > kb ? first - kb : 0;
                    nq++, nk_q = nk;
                }
            }
            if (nq) {
                queries_block(nq, qs, los, kc, vc, kv_dim, hd, nk_q, scale, j->softcap, mq, lq, os);
                for (int i = 0; i < nq; i++) ms[idx[i]] = mq[i], ls[idx[i]] = lq[i];
            }
        }
    }
    for (int i = 0; i < nt * nh; i++) {
        float *part = PART(t0 + i / nh, hkv0 * G + i % nh);
        part[0] = ms[i], part[1] = ls[i];
    }
#undef PART
}

// Prompts: a task is TQ tokens, one KV head, one key range (later tokens see
// more keys: their tasks come first, so the long ones start early).
static void prompt_task(const struct att_job *j, int task, int ith) {
    const int piece = task % j->pieces, hkv = task / j->pieces % j->n_head_kv;
    const int n_tb = (j->n + TQ - 1) / TQ;
    const int t0 = (n_tb - 1 - task / j->pieces / j->n_head_kv) * TQ;
    attend(j, t0, j->n - t0 < TQ ? j->n - t0 : TQ, hkv, hkv + 1, piece, ith);
}

// A few tokens: a task is one token, every KV head, one key range, so the cache
// rows are read whole (a KV head's slice of a row is a third of it or less, and
// the prefetchers fetch the rest anyway).
static void few_task(const struct att_job *j, int task, int ith) {
    attend(j, task / j->pieces, 1, 0, j->n_head_kv, task % j->pieces, ith);
}

static int run_tasks(const struct att_job *j) {
    return j->n < TQ ? j->n * j->pieces : (j->n + TQ - 1) / TQ * j->n_head_kv * j->pieces;
}

// Every run of a batch in one job: task k belongs to the run whose range of
// [end[i-1], end[i]) holds it.
struct att_batch {
    const struct att_job *jobs;
    const int *end;
    int n_jobs;
};

static int run_of(const struct att_batch *b, int *task) {
    int lo = 0, hi = b->n_jobs - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (*task < b->end[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    if (lo) *task -= b->end[lo - 1];
    return lo;
}

static void attend_task(void *arg, int task, int ith) {
    const struct att_batch *b = arg;
    const struct att_job *j = &b->jobs[run_of(b, &task)];
    if (j->n < TQ)
        few_task(j, task, ith);
    else
        prompt_task(j, task, ith);
}

// out = Σ pieces e^(m_i − M)·out_i / Σ e^(m_i − M)·l_i for each (token, head).
static void merge_one(const struct att_job *j, int th) {
    const int hd = j->hd;
    const float *part = j->partials + (size_t)th * j->pieces * ((size_t)hd + 2);
    float M = -INFINITY;
    for (int p = 0; p < j->pieces; p++) {
        const float mp = part[(size_t)p * (hd + 2)];
        if (mp > M) M = mp;
    }
    float w[64], l = 0; // the weights of the first 64 pieces; later ones are recomputed
    for (int p = 0; p < j->pieces; p++) {
        const float *pp = part + (size_t)p * (hd + 2);
        const float wp = pp[1] == 0 ? 0.0f : expf(pp[0] - M); // 0: a range the token does not reach
        if (p < 64) w[p] = wp;
        l += wp * pp[1];
    }
    float *o = j->out + (size_t)th * hd;
    const __m512 inv = _mm512_set1_ps(1.0f / l);
    for (int d = 0; d < hd; d += 16) {
        const __mmask16 mk = tail_mask(hd - d);
        __m512 acc = _mm512_setzero_ps();
        for (int p = 0; p < j->pieces; p++) {
            const float *pp = part + (size_t)p * (hd + 2);
            const float wp = p < 64 ? w[p] : (pp[1] == 0 ? 0.0f : expf(pp[0] - M));
            if (wp != 0)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(wp), _mm512_maskz_loadu_ps(mk, pp + 2 + d), acc);
        }
        _mm512_mask_storeu_ps(o + d, mk, _mm512_mul_ps(acc, inv));
    }
}

static void merge_task(void *arg, int task, int ith) {
    (void)ith;
    const struct att_batch *b = arg;
    const int r = run_of(b, &task);
    merge_one(&b->jobs[r], task);
}

void attention_avx512(struct threadpool *tp, const float *q, const void *k_cache, const void *v_cache,
                      bool f16, float *out, const struct att_run *runs, int n_runs, int n_head, int n_head_kv,
                      int head_dim, const struct attn_params *ap, float *scratch) {
    if (n_runs <= 0) return;
    const size_t es = f16 ? 2 : 4;
    struct att_job *jobs = st_xmalloc(sizeof *jobs * (size_t)n_runs);
    int *ends = st_xmalloc(sizeof *ends * 2 * (size_t)n_runs), *merge_ends = ends + n_runs;
    const size_t stride = per_thread(n_head, n_head_kv), kv_dim = (size_t)n_head_kv * head_dim;
    float *thread_scratch = scratch, *partials = scratch + (size_t)threadpool_size(tp) * stride;
    int tasks = 0, merges = 0;
    for (int i = 0; i < n_runs; i++) {
        const struct att_run *r = &runs[i];
        const size_t row = (size_t)r->row * n_head * head_dim;
        jobs[i] = (struct att_job){.q = q + row,
                                   .k = (const char *)k_cache + (size_t)r->base * kv_dim * es,
                                   .v = (const char *)v_cache + (size_t)r->base * kv_dim * es,
                                   .f16 = f16,
                                   .out = out + row,
                                   .n = r->n,
                                   .pos0 = r->pos0,
                                   .n_head = n_head,
                                   .n_head_kv = n_head_kv,
                                   .hd = head_dim,
                                   .scale = ap->scale,
                                   .softcap = ap->softcap,
                                   .window = ap->window,
                                   .partials = partials,
                                   .pieces = n_pieces(r->n, r->pos0),
                                   .scratch = thread_scratch,
                                   .stride = stride};
        partials += run_partials(r, n_head, head_dim);
        ends[i] = tasks += run_tasks(&jobs[i]);
        merge_ends[i] = merges += r->n * n_head;
    }
    const struct att_batch b = {jobs, ends, n_runs}, bm = {jobs, merge_ends, n_runs};
    threadpool_run_chunks(tp, attend_task, (void *)&b, tasks);
    if (merges >= 64)
        threadpool_run_chunks(tp, merge_task, (void *)&bm, merges);
    else
        for (int i = 0; i < n_runs; i++)
            for (int th = 0; th < runs[i].n * n_head; th++) merge_one(&jobs[i], th);
    free(ends);
    free(jobs);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else // not x86-64: never called (gemm_isa_available says no AVX-512)

void attention_avx512(struct threadpool *tp, const float *q, const void *k_cache, const void *v_cache,
                      bool f16, float *out, const struct att_run *runs, int n_runs, int n_head, int n_head_kv,
                      int head_dim, const struct attn_params *ap, float *scratch) {
    (void)tp, (void)q, (void)k_cache, (void)v_cache, (void)f16, (void)out, (void)runs, (void)n_runs,
        (void)n_head;
    (void)n_head_kv, (void)head_dim, (void)ap, (void)scratch;
    ST_ASSERT(!"attention_avx512 called on a CPU without AVX-512");
}

#endif
