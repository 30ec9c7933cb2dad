// sampler.c: the next token from logits, as llama.cpp's default sampler chain
// chooses it: repetition penalty → top-k → top-p → min-p → temperature → draw.
//
// Semantics (llama.cpp's, written out):
//   penalty  each distinct token among the last repeat_last_n accepted ones has
//            its logit divided by repeat_penalty when positive, multiplied when
//            not (CTRL); it applies before greedy selection too.
//   top-k    the k largest logits; ties broken towards the lower token id.
//   top-p    over the softmax of what top-k kept: the shortest prefix (largest
//            first) whose probability reaches top_p; never empty.
//   min-p    keeps tokens with p ≥ min_p · p_max (ratios do not depend on the
//            normalisation, so it reads the logits: l ≥ l_max + log(min_p)).
//   temp     the draw is from softmax(l / temperature) over what is left.
// Top-p and min-p see temperature-1 probabilities, as in llama.cpp's chain.
//
// Non-finite logits: -inf masks a token (probability 0); NaN counts as -inf;
// +inf counts as the largest finite float (so several +inf tokens share the
// mass). When every logit is masked the result is argmax, i.e. token 0.
//
// Randomness: xoshiro256** seeded through splitmix64 from params.seed; the same
// seed and the same calls give the same tokens. sampler_reset keeps the state.
//
// Cost per token, n = n_vocab: O(n) passes (penalty, max, top-k through a
// k-element heap, or min-p's logit bound), then a sort of the kept candidates
// only. With top-k and min-p both off, top-p selects the prefix holding its
// mass by quickselect (O(n) expected) and sorts just that prefix.
#include "text/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

struct sampler_cand {
    float logit;
    int32_t id;
};

struct sampler {
    struct sampler_params p;
    int n_vocab;
    uint64_t rng[4];     // xoshiro256** state
    int32_t *recent;     // [repeat_last_n] ring of accepted tokens
    int n_recent;        // filled entries of recent
    int recent_next;     // slot the next accepted token goes to
    uint32_t *penalised; // [n_vocab] stamp: == epoch when penalised this call
    uint32_t epoch;
    struct sampler_cand *cand; // [n_vocab] candidates, best first once sorted
    double *weight;            // [n_vocab] unnormalised probabilities of cand (or of
                               // the tokens in id order when nothing is filtered)
};

// --- random numbers ----------------------------------------------------------

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

// Uniform in [0, 1) with 53 random bits.
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

// --- parameters --------------------------------------------------------------

struct sampler_params sampler_default_params(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return (struct sampler_params){
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = st_splitmix64(&x),
    };
}

int sampler_params_check(const struct sampler_params *p) {
    ST_ASSERT(p);
    if (!isfinite(p->temperature) || p->temperature < 0)
        return st_fail("sampler: temperature = %g must be finite and >= 0 (0: greedy)",
                       (double)p->temperature);
    if (p->top_k < 0) return st_fail("sampler: top_k = %d must be >= 0 (0: off)", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return st_fail("sampler: top_p = %g must be in (0, 1] (1: off)", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return st_fail("sampler: min_p = %g must be in [0, 1] (0: off)", (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0)
        return st_fail("sampler: repeat_penalty = %g must be finite and > 0 (1: off)",
                       (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return st_fail("sampler: repeat_last_n = %d must be >= 0 (0: off)", p->repeat_last_n);
    return 0;
}

// --- lifetime ----------------------------------------------------------------

struct sampler *sampler_init(const struct sampler_params *p, int n_vocab) {
    if (sampler_params_check(p) < 0) return NULL;
    if (n_vocab <= 0) {
        st_fail("sampler: n_vocab = %d must be > 0", n_vocab);
        return NULL;
    }
    struct sampler *s = calloc(1, sizeof(*s));
    if (!s) {
        st_fail("sampler: out of memory");
        return NULL;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = st_splitmix64(&x);
    size_t n = (size_t)n_vocab;
    s->recent = malloc((p->repeat_last_n > 0 ? (size_t)p->repeat_last_n : 1) * sizeof(int32_t));
    s->penalised = calloc(n, sizeof(uint32_t));
    s->cand = malloc(n * sizeof(*s->cand));
    s->weight = malloc(n * sizeof(double));
    if (!s->recent || !s->penalised || !s->cand || !s->weight) {
        sampler_free(s);
        st_fail("sampler: out of memory for n_vocab = %d, repeat_last_n = %d", n_vocab, p->repeat_last_n);
        return NULL;
    }
    return s;
}

void sampler_free(struct sampler *s) {
    if (!s) return;
    free(s->recent);
    free(s->penalised);
    free(s->cand);
    free(s->weight);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t id) {
    ST_ASSERT(id >= 0 && id < s->n_vocab);
    int cap = s->p.repeat_last_n;
    if (cap == 0) return;
    s->recent[s->recent_next] = id;
    s->recent_next = (s->recent_next + 1) % cap;
    if (s->n_recent < cap) s->n_recent++;
}

void sampler_reset(struct sampler *s) {
    s->n_recent = 0;
    s->recent_next = 0;
}

// --- selection ---------------------------------------------------------------

int32_t sampler_argmax(const float *logits, int n) {
    // NaN compares false, so it loses like -inf; when nothing beats -inf the
    // answer is index 0, the lowest of the tied. The largest value first, in 16
    // independent lanes (vector registers), then the first index that holds it.
    float lane[16];
    for (int j = 0; j < 16; j++) lane[j] = -INFINITY;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) lane[j] = logits[i + j] > lane[j] ? logits[i + j] : lane[j];
    float best_v = -INFINITY;
    for (int j = 0; j < 16; j++) best_v = lane[j] > best_v ? lane[j] : best_v;
    for (; i < n; i++) best_v = logits[i] > best_v ? logits[i] : best_v;
    if (best_v == -INFINITY) return 0;
    for (i = 0; logits[i] != best_v; i++) {}
    return i;
}

// Candidate order: larger logit first, then lower id.
static bool cand_better(struct sampler_cand a, struct sampler_cand b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

static int cand_cmp(const void *pa, const void *pb) {
    struct sampler_cand a = *(const struct sampler_cand *)pa, b = *(const struct sampler_cand *)pb;
    return cand_better(a, b) ? -1 : cand_better(b, a) ? 1 : 0;
}

// Restores the heap property (worst candidate at the root) below index i.
static void heap_sift_down(struct sampler_cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(h[w], h[l])) w = l;
        if (r < n && cand_better(h[w], h[r])) w = r;
        if (w == i) return;
        struct sampler_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void cand_swap(struct sampler_cand *c, double *w, int i, int j) {
    struct sampler_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
    double u = w[i];
    w[i] = w[j];
    w[j] = u;
}

// The k best unmasked tokens into cand, best first; returns how many (fewer
// than k when fewer are unmasked).
static int select_top_k(struct sampler *s, const float *logits, int k) {
    struct sampler_cand *h = s->cand;
    int n = 0, i = 0;
    for (; i < s->n_vocab && n < k; i++)
        if (logits[i] != -INFINITY) h[n++] = (struct sampler_cand){logits[i], i};
    if (n == k) {
        for (int j = k / 2 - 1; j >= 0; j--) heap_sift_down(h, k, j);
        float worst = h[0].logit;
        for (; i < s->n_vocab; i++) {
            // Most tokens lose to the heap's worst: a block of 16 is skipped when
            // none beats it (a loop the compiler turns into vector compares).
            if ((i & 15) == 0 && i + 16 <= s->n_vocab) {
                int beats = 0;
                for (int j = 0; j < 16; j++) beats |= logits[i + j] > worst;
                if (!beats) {
                    i += 15;
                    continue;
                }
            }
            // i is above every id in the heap, so a tie with the worst loses.
            if (logits[i] <= worst) continue;
            h[0] = (struct sampler_cand){logits[i], i};
            heap_sift_down(h, k, 0);
            worst = h[0].logit;
        }
    }
    qsort(h, (size_t)n, sizeof(*h), cand_cmp);
    return n;
}

// Reorders cand[0..n) (with their weights w) so that a prefix [0, m) holds,
// in some order, every candidate of the best-first prefix whose weight reaches
// target; returns m (n when the whole set is needed). Quickselect on the
// candidate order: O(n) expected, where sorting would be O(n log n).
static int select_mass(struct sampler_cand *c, double *w, int n, double target) {
    int lo = 0, hi = n; // [0, lo) is in; the answer ends in [lo, hi]
    double mass_in = 0;
    while (hi - lo > 32) {
        int mid = lo + (hi - lo) / 2, a = lo, b = mid, d = hi - 1;
        // Median of three as pivot, moved to hi - 1.
        if (cand_better(c[b], c[a])) {
            int t = a;
            a = b;
            b = t;
        }
        if (cand_better(c[d], c[b])) b = cand_better(c[d], c[a]) ? a : d;
        cand_swap(c, w, b, hi - 1);
        struct sampler_cand pivot = c[hi - 1];
        int store = lo;
        double mass_better = 0;
        for (int i = lo; i < hi - 1; i++) {
            if (cand_better(c[i], pivot)) {
                mass_better += w[i];
                cand_swap(c, w, i, store++);
            }
        }
        cand_swap(c, w, store, hi - 1); // the pivot right after the better ones
        if (mass_in + mass_better >= target) {
            hi = store;
        } else {
            mass_in += mass_better + w[store];
            lo = store + 1;
            if (mass_in >= target) return lo;
        }
    }
    return hi;
}

// Draws index i of weight[0..n) with probability weight[i] / sum.
static int draw(struct sampler *s, const double *weight, int n, double sum) {
    double u = rng_uniform(s->rng) * sum, cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (weight[i] <= 0) continue;
        cum += weight[i];
        last = i;
        if (u < cum) return i;
    }
    return last; // u landed past the rounded total
}

static void apply_penalty(struct sampler *s, float *logits) {
    if (s->p.repeat_penalty == 1.0f || s->n_recent == 0) return;
    if (++s->epoch == 0) { // stamps wrapped: forget them all
        memset(s->penalised, 0, (size_t)s->n_vocab * sizeof(uint32_t));
        s->epoch = 1;
    }
    float pen = s->p.repeat_penalty;
    for (int i = 0; i < s->n_recent; i++) {
        int32_t t = s->recent[i];
        if (s->penalised[t] == s->epoch) continue;
        s->penalised[t] = s->epoch;
        logits[t] = logits[t] > 0 ? logits[t] / pen : logits[t] * pen;
    }
}

int32_t sampler_sample(struct sampler *s, float *logits) {
    const int n_vocab = s->n_vocab;
    apply_penalty(s, logits);
    // The largest logit, and whether any is NaN or +inf: 16 independent lanes
    // (the compiler keeps them in vector registers), odd values found from
    // their bits (exponent all ones: NaN, or +inf when the fraction is 0).
    float lane_max[16];
    uint32_t lane_odd[16];
    for (int j = 0; j < 16; j++) lane_max[j] = -INFINITY, lane_odd[j] = 0;
    int i0 = 0;
    for (; i0 + 16 <= n_vocab; i0 += 16)
        for (int j = 0; j < 16; j++) {
            const float l = logits[i0 + j];
            uint32_t u;
            memcpy(&u, &l, sizeof u);
            lane_odd[j] |= (uint32_t)((u & 0x7fffffffu) > 0x7f800000u) | (uint32_t)(u == 0x7f800000u);
            lane_max[j] = l > lane_max[j] ? l : lane_max[j];
        }
    float lmax = -INFINITY;
    bool odd = false; // NaN or +inf seen
    for (int j = 0; j < 16; j++) {
        odd |= lane_odd[j] != 0;
        lmax = lane_max[j] > lmax ? lane_max[j] : lmax;
    }
    for (; i0 < n_vocab; i0++) {
        const float l = logits[i0];
        odd |= !(l <= FLT_MAX);
        lmax = l > lmax ? l : lmax;
    }
    if (odd) {
        lmax = -INFINITY;
        for (int i = 0; i < n_vocab; i++) {
            float l = logits[i];
            if (isnan(l))
                l = -INFINITY;
            else if (l == INFINITY)
                l = FLT_MAX;
            logits[i] = l;
            lmax = l > lmax ? l : lmax;
        }
    }
    if (s->p.temperature <= 0 || lmax == -INFINITY) return sampler_argmax(logits, n_vocab);

    const double inv_t = 1.0 / s->p.temperature;
    const double top_p = s->p.top_p, min_p = s->p.min_p;
    const int top_k = s->p.top_k;
    struct sampler_cand *cand = s->cand;
    double *w = s->weight;

    if (top_p >= 1 && min_p <= 0 && (top_k <= 0 || top_k >= n_vocab)) {
        // No filter: draw from the whole vocabulary, unsorted.
        double sum = 0;
        for (int i = 0; i < n_vocab; i++) sum += w[i] = exp(((double)logits[i] - lmax) * inv_t);
        return draw(s, w, n_vocab, sum);
    }

    // Candidates best first, and the normaliser z of the set top-p reads.
    int n = 0;
    double z = 0;
    if (top_k > 0 && top_k < n_vocab) {
        n = select_top_k(s, logits, top_k);
        for (int i = 0; i < n; i++) z += exp((double)cand[i].logit - lmax);
    } else if (min_p > 0) {
        // Top-k off: min-p's set is a prefix of the sorted vocabulary, and so
        // is top-p's, so only tokens passing min-p need sorting; z still sums
        // the whole vocabulary. A cheap logit bound (with slack) spares most
        // of the exp() calls.
        const double bound = log(min_p) - 1e-6;
        for (int i = 0; i < n_vocab; i++)
            if ((double)logits[i] - lmax >= bound && exp((double)logits[i] - lmax) >= min_p)
                cand[n++] = (struct sampler_cand){logits[i], i};
        if (top_p < 1)
            for (int i = 0; i < n_vocab; i++) z += exp((double)logits[i] - lmax);
        qsort(cand, (size_t)n, sizeof(*cand), cand_cmp);
    } else {
        // Top-k and min-p off, top-p on: select the prefix holding top_p of
        // the mass (plus a margin far above rounding), then sort only it; the
        // exact cut is made below in sorted order.
        for (int i = 0; i < n_vocab; i++) {
            if (logits[i] == -INFINITY) continue;
            cand[n] = (struct sampler_cand){logits[i], i};
            z += w[n++] = exp((double)logits[i] - lmax);
        }
        n = select_mass(cand, w, n, fmin(top_p + 1e-9, 1.0) * z);
        qsort(cand, (size_t)n, sizeof(*cand), cand_cmp);
    }
    if (top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)cand[i].logit - lmax) / z;
            if (cum >= top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (min_p > 0) {
        int keep = 1; // the best token always passes (p_max ≥ min_p · p_max)
        while (keep < n && exp((double)cand[keep].logit - lmax) >= min_p) keep++;
        n = keep;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w[i] = exp(((double)cand[i].logit - lmax) * inv_t);
    return cand[draw(s, w, n, sum)].id;
}
