// test_attention.c: the fast CPU backend's attention (src/cpu/attention.c, and
// the backend op that picks it) against a double-precision causal softmax
// attention written here, on prompts of ragged lengths (the 16-query flash
// blocks and 16-key blocks cut mid-way), several head groupings and head sizes,
// and cache rows past the last position filled with NaN (reading them is a bug);
// also with a score scale other than 1/sqrt(head_dim), Gemma 2's tanh soft cap
// and sliding windows shorter and longer than a key block.
// Both cache types: floats, and halves (the values rounded to nearest first,
// so that the reference sees exactly what the kernels widen).
// Fresh random inputs each run (seed printed; STRATA_SEED repeats).
//
// Batch invariance: a prompt evaluated at once and token by token must give the
// same outputs to the bit (the model tests compare the two ways end to end),
// and so must several sequences' rows (decode tokens and prompt chunks, each
// sequence in its own cache region) in one batch and each sequence alone.
//
// Bound: the kernels compute scores and sums in float with an exponential good
// to 2 ulp; an output element may differ from the double result by
// 2e-5·rms(out) + 1e-4·|out| (the op harness's attention bound, test_ops.c).
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/threadpool.h"
#include "util.h"

static uint64_t rng_state;
static double rng_unit(void) { return (double)(st_splitmix64(&rng_state) >> 11) * 0x1p-53; }
static float rng_normal(void) {
    const double u = 1.0 - rng_unit(), v = rng_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void reference(const float *q, const float *kc, const float *vc, double *out, int n, int pos0,
                      int n_head, int n_head_kv, int hd, const struct attn_params *ap) {
    const int G = n_head / n_head_kv, kv_dim = n_head_kv * hd;
    double *s = st_xmalloc(sizeof(double) * (size_t)(pos0 + n));
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_head; h++) {
            const float *qh = q + ((size_t)t * n_head + h) * hd;
            const int nk = pos0 + t + 1, off = (h / G) * hd;
            const int first = ap->window > 0 && nk > ap->window ? nk - ap->window : 0;
            double mx = -INFINITY, sum = 0;
            for (int p = first; p < nk; p++) {
                double d = 0;
                for (int c = 0; c < hd; c++) d += (double)qh[c] * kc[(size_t)p * kv_dim + off + c];
                s[p] = d * ap->scale;
                if (ap->softcap > 0) s[p] = ap->softcap * tanh(s[p] / ap->softcap);
                mx = fmax(mx, s[p]);
            }
            for (int p = first; p < nk; p++) sum += s[p] = exp(s[p] - mx);
            double *o = out + ((size_t)t * n_head + h) * hd;
            for (int c = 0; c < hd; c++) {
                double a = 0;
                for (int p = first; p < nk; p++) a += s[p] * vc[(size_t)p * kv_dim + off + c];
                o[c] = a / sum;
            }
        }
    free(s);
}

// n rows of one sequence at positions pos0 .. pos0+n-1, in pos and base (n each).
static struct batch_rows prompt_rows(int32_t *pos, int32_t *base, int n, int pos0) {
    for (int t = 0; t < n; t++) pos[t] = pos0 + t, base[t] = 0;
    return (struct batch_rows){n, pos, base, pos, base, pos0 + n};
}

// Rounds the n floats of c to halves in place (NaN stays NaN) and returns their
// bits (free them).
static uint16_t *to_halves(float *c, size_t n) {
    uint16_t *h = st_xmalloc(sizeof *h * n);
    for (size_t i = 0; i < n; i++) c[i] = st_fp16_to_f32(h[i] = st_f32_to_fp16(c[i]));
    return h;
}

static int compare(const float *got, const double *want, size_t n, const char *what) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += want[i] * want[i];
    const double rms = sqrt(ss / (double)n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (!(d <= 2e-5 * rms + 1e-4 * fabs(want[i]))) {
            if (!bad) printf("    %s: [%zu] got %.9g want %.9g\n", what, i, (double)got[i], want[i]);
            bad++;
        }
    }
    return bad;
}

static void test_attention_cases(void) {
    static const int cfg[][3] = {{9, 3, 64}, {8, 2, 64}, {4, 4, 128}, {6, 2, 80}, {2, 1, 40}, {32, 8, 64}};
    static const int ns[] = {1, 3, 8, 16, 17, 40, 70};
    static const int pos0s[] = {0, 7, 300, 600};
    const bool have512 = gemm_isa_available(GEMM_ISA_AVX512);
    struct threadpool *tp = threadpool_init(3);
    struct backend *be = backend_cpu_init(2);
    // scale relative to 1/sqrt(head_dim), soft cap, window
    static const struct {
        float scale_mul, softcap;
        int window;
    } var[] = {{1, 0, 0}, {0.6f, 0, 0}, {1, 1.5f, 0}, {1, 0, 5}, {1, 0, 100}, {1.3f, 2.0f, 70}};
    int cases = 0;
    for (size_t vi = 0; vi < sizeof var / sizeof *var; vi++)
        for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t pi = 0; pi < sizeof pos0s / sizeof *pos0s; pi++) {
                    const int n_head = cfg[ci][0], n_head_kv = cfg[ci][1], hd = cfg[ci][2];
                    const int n = ns[ni], pos0 = pos0s[pi], kv_dim = n_head_kv * hd, n_ctx = pos0 + n + 5;
                    if (n_head == 32 && n > 17) continue; // the wide case once per length is enough
                    if (vi > 0 && ci % 2) continue;       // the variants on half the head shapes
                    const struct attn_params ap = {var[vi].scale_mul / sqrtf((float)hd), var[vi].softcap,
                                                   var[vi].window};
                    const size_t nc = (size_t)n_ctx * kv_dim, nq = (size_t)n * n_head * hd;
                    float *kc = st_xmalloc(sizeof(float) * nc), *vc = st_xmalloc(sizeof(float) * nc);
                    float *q = st_xmalloc(sizeof(float) * nq), *got = st_xmalloc(sizeof(float) * nq);
                    double *want = st_xmalloc(sizeof(double) * nq);
                    for (size_t i = 0; i < nc; i++) {
                        const bool past = i >= (size_t)(pos0 + n) * kv_dim;
                        kc[i] = past ? NAN : rng_normal();
                        vc[i] = past ? NAN : rng_normal();
                    }
                    for (size_t i = 0; i < nq; i++) q[i] = 2 * rng_normal(); // peaked softmaxes too
                    for (int f16 = 0; f16 < 2; f16++) {
                        uint16_t *kh = f16 ? to_halves(kc, nc) : NULL, *vh = f16 ? to_halves(vc, nc) : NULL;
                        const void *kk = f16 ? (const void *)kh : kc, *vv = f16 ? (const void *)vh : vc;
                        const char *tn = f16 ? "f16" : "f32";
                        CHECK(backend_set_kv_type(be, f16 ? GGML_TYPE_F16 : GGML_TYPE_F32) == 0, "%s",
                              st_last_error());
                        reference(q, kc, vc, want, n, pos0, n_head, n_head_kv, hd, &ap);
                        char what[160];
                        if (have512) {
                            const struct att_run run = {0, n, pos0, 0};
                            float *scratch = st_xmalloc(
                                sizeof(float) * attention_scratch_floats(3, &run, 1, n_head, n_head_kv, hd));
                            for (size_t i = 0; i < nq; i++) got[i] = NAN;
                            attention_avx512(tp, q, kk, vv, f16, got, &run, 1, n_head, n_head_kv, hd, &ap,
                                             scratch);
                            snprintf(what, sizeof what,
                                     "avx512 %s heads %d/%d hd %d n %d pos0 %d scale %g cap %g window %d", tn,
                                     n_head, n_head_kv, hd, n, pos0, (double)ap.scale, (double)ap.softcap,
                                     ap.window);
                            CHECK(compare(got, want, nq, what) == 0, "%s: elements out of bounds", what);
                            free(scratch);
                        }
                        for (size_t i = 0; i < nq; i++) got[i] = NAN;
                        int32_t pos[70], base[70];
                        const struct batch_rows rows = prompt_rows(pos, base, n, pos0);
                        be->attention(be, q, kk, vv, got, &rows, n_head, n_head_kv, hd, &ap);
                        snprintf(what, sizeof what,
                                 "backend cpu %s heads %d/%d hd %d n %d pos0 %d scale %g cap %g window %d",
                                 tn, n_head, n_head_kv, hd, n, pos0, (double)ap.scale, (double)ap.softcap,
                                 ap.window);
                        CHECK(compare(got, want, nq, what) == 0, "%s: elements out of bounds", what);
                        if (n > 1) { // the same queries one at a time: identical bits
                            float *one = st_xmalloc(sizeof(float) * nq);
                            const size_t row = (size_t)n_head * hd;
                            for (int t = 0; t < n; t++) {
                                const struct batch_rows r1 = prompt_rows(pos, base, 1, pos0 + t);
                                be->attention(be, q + t * row, kk, vv, one + t * row, &r1, n_head, n_head_kv,
                                              hd, &ap);
                            }
                            CHECK(!memcmp(one, got, sizeof(float) * nq),
                                  "%s: one query at a time gives other bits", what);
                            free(one);
                        }
                        cases++;
                        free(kh), free(vh);
                    }
                    free(kc), free(vc), free(q), free(got), free(want);
                }
    printf("  %d cases, f32 and f16 caches (%s)\n", cases,
           have512 ? "AVX-512 kernels and the backend op" : "the backend op");
    be->free(be);
    threadpool_free(tp);
}

// Several sequences in one call: the rows of 2..6 sequences (one token, or a
// chunk of up to 40), each at a random position of its own cache region, in
// one batch, against each sequence alone (identical bits) and the reference.
static void test_batched_sequences(void) {
    static const int cfg[][3] = {{9, 3, 64}, {8, 2, 64}, {6, 2, 80}};
    struct backend *be = backend_cpu_init(2);
    const int region = 700; // cache rows per sequence
    int cases = 0;
    for (int rep = 0; rep < 12; rep++) {
        const int *cf = cfg[rep % 3];
        const int n_head = cf[0], n_head_kv = cf[1], hd = cf[2], kv_dim = n_head_kv * hd;
        const int n_seq = 2 + (int)(rng_unit() * 5);
        int n_of[6], pos_of[6], n = 0;
        for (int i = 0; i < n_seq; i++) {
            n_of[i] = rng_unit() < 0.6 ? 1 : 1 + (int)(rng_unit() * 40);
            pos_of[i] = (int)(rng_unit() * (region - n_of[i]));
            n += n_of[i];
        }
        const struct attn_params ap = {1 / sqrtf((float)hd), 0, rep % 4 == 3 ? 100 : 0};
        const size_t nc = (size_t)n_seq * region * kv_dim, row = (size_t)n_head * hd;
        float *kc = st_xmalloc(sizeof(float) * nc), *vc = st_xmalloc(sizeof(float) * nc);
        float *q = st_xmalloc(sizeof(float) * n * row), *got = st_xmalloc(sizeof(float) * n * row);
        float *one = st_xmalloc(sizeof(float) * n * row);
        double *want = st_xmalloc(sizeof(double) * n * row);
        for (int i = 0; i < n_seq; i++)
            for (size_t e = 0; e < (size_t)region * kv_dim; e++) {
                const bool past = e >= (size_t)(pos_of[i] + n_of[i]) * kv_dim;
                kc[(size_t)i * region * kv_dim + e] = past ? NAN : rng_normal();
                vc[(size_t)i * region * kv_dim + e] = past ? NAN : rng_normal();
            }
        for (size_t e = 0; e < (size_t)n * row; e++) q[e] = 2 * rng_normal();
        const bool f16 = rep % 2; // half the batches with a cache of halves
        uint16_t *kh = f16 ? to_halves(kc, nc) : NULL, *vh = f16 ? to_halves(vc, nc) : NULL;
        const size_t es = f16 ? 2 : 4;
        const char *kk = f16 ? (const char *)kh : (const char *)kc,
                   *vv = f16 ? (const char *)vh : (const char *)vc;
        CHECK(backend_set_kv_type(be, f16 ? GGML_TYPE_F16 : GGML_TYPE_F32) == 0, "%s", st_last_error());
        int32_t pos[256], base[256];
        for (int i = 0, t = 0; i < n_seq; t += n_of[i], i++)
            for (int k = 0; k < n_of[i]; k++) pos[t + k] = pos_of[i] + k, base[t + k] = i * region;
        int max_kv = 0;
        for (int t = 0; t < n; t++) max_kv = pos[t] + 1 > max_kv ? pos[t] + 1 : max_kv;
        const struct batch_rows all = {n, pos, base, pos, base, max_kv};
        for (size_t e = 0; e < (size_t)n * row; e++) got[e] = NAN;
        be->attention(be, q, kk, vv, got, &all, n_head, n_head_kv, hd, &ap);
        for (int i = 0, t = 0; i < n_seq; t += n_of[i], i++) {
            const size_t off = (size_t)i * region * kv_dim;
            int32_t zero[64] = {0}; // alone: its region is the whole cache
            const struct batch_rows local = {n_of[i], pos + t, zero, pos + t, zero, pos_of[i] + n_of[i]};
            be->attention(be, q + t * row, kk + off * es, vv + off * es, one + t * row, &local, n_head,
                          n_head_kv, hd, &ap);
            reference(q + t * row, kc + off, vc + off, want + t * row, n_of[i], pos_of[i], n_head, n_head_kv,
                      hd, &ap);
        }
        char what[128];
        snprintf(what, sizeof what, "%d sequences, %d rows, heads %d/%d hd %d window %d, %s cache", n_seq, n,
                 n_head, n_head_kv, hd, ap.window, f16 ? "f16" : "f32");
        CHECK(compare(got, want, (size_t)n * row, what) == 0, "%s: elements out of bounds", what);
        CHECK(!memcmp(got, one, sizeof(float) * n * row),
              "%s: the batch gives other bits than each sequence alone", what);
        free(kc), free(vc), free(q), free(got), free(one), free(want), free(kh), free(vh);
        cases++;
    }
    printf("  %d batches\n", cases);
    be->free(be);
}

int main(void) {
    const char *seed_env = getenv("STRATA_SEED");
    const uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                                : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    printf("seed %llu (STRATA_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    RUN(test_attention_cases);
    RUN(test_batched_sequences);
    TEST_END();
}
