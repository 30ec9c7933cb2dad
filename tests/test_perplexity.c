// test_perplexity.c: perplexity and KL divergence by llama-perplexity's method
// (model/perplexity.c). Each position's arithmetic is checked against long
// double log-softmax and KL computed here; whole runs on synthetic models
// against an independent scoring of full-chunk logits; KLD files round-trip
// and hostile ones are refused. (llama.cpp itself is the oracle in
// tests/test_oracle.py.)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/synth.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/strata_test_perplexity_XXXXXX";
static uint64_t rng_state = 0x5eed0001;

static double unit_rand(void) { return (double)(st_splitmix64(&rng_state) >> 11) / 9007199254740992.0; }
static double normal_rand(void) {
    double u = unit_rand(), v = unit_rand();
    return sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

// exact log-softmax of x (n) in long double
static void log_softmax_ld(const float *x, int n, long double *out) {
    long double mx = x[0], s = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) s += expl((long double)x[i] - mx);
    const long double lse = mx + logl(s);
    for (int i = 0; i < n; i++) out[i] = (long double)x[i] - lse;
}

// Float rounding of one position's NLL: the shifted logit (|shift| ulp-rounded
// once or twice) and the log of a double sum of expf (each within 1 ulp), at
// float precision: 2^-23 · (|shift| + log-sum-exp + 2) covers both formulas.
static double nll_bound(long double exact_nll) {
    return ldexp(1.0, -23) * ((double)fabsl(exact_nll) + 40 + 2);
}

static void random_logits(float *x, int n, double sigma) {
    for (int i = 0; i < n; i++) x[i] = (float)(sigma * normal_rand());
}

static void test_nll_matches_exact(void) {
    const int n = 1001;
    float *x = malloc(sizeof(float) * n);
    long double *ls = malloc(sizeof(long double) * n);
    uint16_t *row = malloc(sizeof(uint16_t) * (size_t)ppl_kld_row_len(n));
    for (int t = 0; t < 50; t++) {
        random_logits(x, n, 0.5 + 0.2 * t);
        log_softmax_ld(x, n, ls);
        const int tok = (int)(unit_rand() * n);
        const double a = ppl_nll(x, n, tok), b = ppl_nll_row(x, n, tok, row);
        const double want = (double)-ls[tok], bound = nll_bound(-ls[tok]);
        CHECK(fabs(a - want) <= bound, "trial %d: ppl_nll %.9g, exact %.9g (bound %.3g)", t, a, want, bound);
        CHECK(fabs(b - want) <= bound, "trial %d: ppl_nll_row %.9g, exact %.9g (bound %.3g)", t, b, want,
              bound);
    }
    free(x);
    free(ls);
    free(row);
}

// The compressed row decodes to the exact log-probabilities within half a step
// (scale/2) plus float rounding, for tokens above min_logit; the rest are 0.
static void test_row_format(void) {
    const int n = 1001; // odd: the row has a pad u16
    const int64_t len = ppl_kld_row_len(n);
    CHECK(len == 4 + 1002, "row length %lld for n_vocab %d", (long long)len, n);
    CHECK(ppl_kld_row_len(1000) == 1004, "row length for an even vocabulary");
    float *x = malloc(sizeof(float) * n);
    long double *ls = malloc(sizeof(long double) * n);
    uint16_t *row = malloc(sizeof(uint16_t) * (size_t)len);
    for (int t = 0; t < 20; t++) {
        random_logits(x, n, t < 10 ? 1.0 : 8.0); // σ 8: a range wider than 16 nats
        memset(row, 0xab, sizeof(uint16_t) * (size_t)len);
        ppl_nll_row(x, n, 0, row);
        log_softmax_ld(x, n, ls);
        float mx = x[0], mn = x[0];
        for (int i = 1; i < n; i++) {
            mx = fmaxf(mx, x[i]);
            mn = fminf(mn, x[i]);
        }
        const float min_logit = fmaxf(mn, mx - 16);
        float head[2];
        memcpy(head, row, sizeof head);
        const double scale = head[0], want_scale = (mx - min_logit) / 65535.0;
        CHECK(fabs(scale - want_scale) <= 1e-6 * want_scale, "scale %.9g, want %.9g", scale, want_scale);
        const long double min_lp = (long double)min_logit - mx + ls[0] - ((long double)x[0] - mx);
        CHECK(fabsl(head[1] - min_lp) <= 1e-5, "min_log_prob %.9g, exact %.9Lg", head[1], min_lp);
        int worst = -1;
        double worst_err = 0;
        for (int i = 0; i < n; i++) {
            const uint16_t q = row[4 + i];
            if (x[i] <= min_logit) {
                CHECK(q == 0, "token %d below min_logit stored as %u", i, q);
                continue;
            }
            const double dec = scale * q + head[1];
            const double err = fabs(dec - (double)ls[i]);
            if (err > worst_err) worst_err = err, worst = i;
        }
        const double bound = scale / 2 + 4e-6; // half a step, plus float rounding of ~16-nat values
        CHECK(worst_err <= bound, "trial %d: token %d decodes %.3g from exact (bound %.3g)", t, worst,
              worst_err, bound);
        CHECK(row[4 + n] == 0, "pad u16 is %u, not 0", row[4 + n]);
    }
    // a flat row: scale 0, every q 0, min_log_prob = -ln n
    for (int i = 0; i < n; i++) x[i] = 1.5f;
    ppl_nll_row(x, n, 3, row);
    float head[2];
    memcpy(head, row, sizeof head);
    CHECK(head[0] == 0.f && fabs(head[1] + log((double)n)) < 1e-5, "flat row head %g %g", head[0], head[1]);
    int nz = 0;
    for (int i = 0; i < n; i++) nz += row[4 + i] != 0;
    CHECK(nz == 0, "flat row has %d non-zero entries", nz);
    free(x);
    free(ls);
    free(row);
}

// KL(base ‖ Q), Δp and same-top of one position against long double.
static void test_kld_position(void) {
    const int n = 700;
    float *b = malloc(sizeof(float) * n), *q = malloc(sizeof(float) * n);
    long double *lb = malloc(sizeof(long double) * n), *lq = malloc(sizeof(long double) * n);
    uint16_t *row = malloc(sizeof(uint16_t) * (size_t)ppl_kld_row_len(n));
    struct ppl_kld_sums s = {0};
    int same = 0;
    // reference sums: KLD, KLD², NLL, NLL², NLL_base, NLL_base², NLL·NLL_base, Δp, Δp², Δp⁴
    long double sum_kld = 0, ref[10] = {0};
    for (int t = 0; t < 40; t++) {
        random_logits(b, n, 2.0);
        const double noise = t < 20 ? 0.05 : 1.0;
        for (int i = 0; i < n; i++) q[i] = b[i] + (float)(noise * normal_rand());
        const int tok = (int)(unit_rand() * n);
        ppl_nll_row(b, n, tok, row);
        float p_diff;
        const double kld = ppl_kld_position(q, n, row, tok, &s, &p_diff);
        // the reference reads the base from the row, as the method does
        float head[2];
        memcpy(head, row, sizeof head);
        log_softmax_ld(q, n, lq);
        long double want = 0;
        int imax_b = 0, imax_q = 0;
        for (int i = 0; i < n; i++) {
            lb[i] = (long double)head[0] * row[4 + i] + head[1];
            if (lb[i] > lb[imax_b]) imax_b = i;
            if (q[i] > q[imax_q]) imax_q = i;
            if (lb[i] > -16) want += expl(lb[i]) * (lb[i] - lq[i]);
        }
        sum_kld += want;
        same += imax_b == imax_q;
        const long double nq = -lq[tok], nb = -lb[tok], dp = expl(-nq) - expl(-nb);
        const long double terms[10] = {want,    want * want, nq, nq * nq, nb,
                                       nb * nb, nq * nb,     dp, dp * dp, dp * dp * dp * dp};
        for (int k = 0; k < 10; k++) ref[k] += terms[k];
        // float terms: each p·(Δ) within a few ulp of its 16-nat range
        const double bound = 1e-6 * (1 + fabs((double)want)) + 4e-6;
        CHECK(fabs(kld - (double)want) <= bound, "trial %d: KLD %.9g, exact %.9Lg", t, kld, want);
        const long double pd = expl(lq[tok]) - expl(lb[tok]);
        CHECK(fabsl(p_diff - pd) <= 2e-6, "trial %d: Δp %.9g, exact %.9Lg", t, p_diff, pd);
        // against the unquantised base: within half a step per token (scale ≤ 16/65535)
        log_softmax_ld(b, n, lb);
        long double exact = 0;
        for (int i = 0; i < n; i++) exact += expl(lb[i]) * (lb[i] - lq[i]);
        CHECK(fabsl(kld - exact) <= 16.0 / 65535 / 2 + 1e-5 + 1e-7 * n,
              "trial %d: KLD %.6g vs unquantised %.6Lg", t, kld, exact);
    }
    CHECK(s.count == 40 && s.n_same_top == same, "count %lld, same top %lld (want 40, %d)",
          (long long)s.count, (long long)s.n_same_top, same);
    CHECK(fabsl(s.sum_kld - sum_kld) <= 40 * 1e-5, "sum KLD %.9g, exact %.9Lg", s.sum_kld, sum_kld);
    // every running sum within float rounding of its terms (relative 1e-5, or 1e-9 absolute per term)
    const double got[10] = {s.sum_kld,       s.sum_kld2,         s.sum_nll,    s.sum_nll2,    s.sum_nll_base,
                            s.sum_nll_base2, s.sum_nll_nll_base, s.sum_p_diff, s.sum_p_diff2, s.sum_p_diff4};
    for (int k = 0; k < 10; k++)
        CHECK(fabsl(got[k] - ref[k]) <= 1e-5 * fabsl(ref[k]) + 40 * 1e-6,
              "running sum %d: %.9g, reference %.9Lg", k, got[k], ref[k]);
    CHECK(same > 20 && same < 40, "same top %d of 40: the noisy half should change some", same);
    free(b);
    free(q);
    free(lb);
    free(lq);
    free(row);
}

// --- KLD files ---------------------------------------------------------------------------

static const char *path_in_dir(const char *name) {
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_raw(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static void expect_open_fails(const char *path, const char *want) {
    struct ppl_kld_file kf;
    const int rc = ppl_kld_file_open(path, &kf);
    CHECK(rc == -1 && strstr(st_last_error(), want), "open %s: rc %d, message '%s' (want '%s')", path, rc,
          st_last_error(), want);
    if (!rc) ppl_kld_file_close(&kf);
}

static void test_kld_file(void) {
    const int n_ctx = 8, n_vocab = 5, n_chunk = 2, rows = ppl_scored_per_chunk(n_ctx);
    const int64_t len = ppl_kld_row_len(n_vocab);
    CHECK(rows == 3, "scored per chunk of 8: %d", rows);
    int32_t tokens[16];
    for (int i = 0; i < 16; i++) tokens[i] = i % n_vocab;
    uint16_t data[2 * 3 * 10];
    for (int i = 0; i < 60; i++) data[i] = (uint16_t)(i * 977);
    const char *path = path_in_dir("good.kld");
    struct ppl_kld_file kf;
    int rc = ppl_kld_file_create(path, n_ctx, n_vocab, n_chunk, tokens, &kf);
    rc |= ppl_kld_file_write_rows(&kf, data, 3);
    rc |= ppl_kld_file_write_rows(&kf, data + 30, 3);
    rc |= ppl_kld_file_close(&kf);
    CHECK(rc == 0, "writing: %s", st_last_error());
    // the exact bytes of the format
    FILE *f = fopen(path, "rb");
    unsigned char raw[400];
    const size_t n = f ? fread(raw, 1, sizeof raw, f) : 0;
    if (f) fclose(f);
    CHECK(n == 20 + 16 * 4 + 60 * 2, "file size %zu", n);
    int32_t head[3];
    memcpy(head, raw + 8, 12);
    CHECK(!memcmp(raw, "_logits_", 8) && head[0] == 8 && head[1] == 5 && head[2] == 2, "header %.8s %d %d %d",
          raw, head[0], head[1], head[2]);
    CHECK(!memcmp(raw + 20, tokens, 64) && !memcmp(raw + 84, data, 120), "tokens or rows differ");
    CHECK(len == 10, "row length %lld", (long long)len);

    rc = ppl_kld_file_open(path, &kf);
    CHECK(rc == 0 && kf.n_ctx == 8 && kf.n_vocab == 5 && kf.n_chunk == 2 &&
              !memcmp(kf.tokens, tokens, sizeof tokens),
          "reading back: rc %d %s", rc, st_last_error());
    uint16_t back[60];
    if (!rc) {
        rc = ppl_kld_file_read_rows(&kf, back, 3) | ppl_kld_file_read_rows(&kf, back + 30, 3);
        CHECK(rc == 0 && !memcmp(back, data, sizeof back), "rows read back differ");
        CHECK(ppl_kld_file_read_rows(&kf, back, 1) == -1 && strstr(st_last_error(), "ends early"),
              "reading past the end: '%s'", st_last_error());
        ppl_kld_file_close(&kf);
    }

    // hostile files
    write_raw(path_in_dir("short.kld"), raw, n - 1);
    expect_open_fails(path_in_dir("short.kld"), "truncated");
    write_raw(path_in_dir("magic.kld"), "_logitz_", 8);
    expect_open_fails(path_in_dir("magic.kld"), "does not look like");
    write_raw(path_in_dir("empty.kld"), "", 0);
    expect_open_fails(path_in_dir("empty.kld"), "does not look like");
    unsigned char bad[400];
    memcpy(bad, raw, n);
    int32_t tok_bad = 5; // = n_vocab
    memcpy(bad + 20 + 4 * 7, &tok_bad, 4);
    write_raw(path_in_dir("token.kld"), bad, n);
    expect_open_fails(path_in_dir("token.kld"), "outside its vocabulary");
    const int32_t huge[3] = {1 << 24, 1 << 24, 1 << 24};
    memcpy(bad + 8, huge, 12);
    write_raw(path_in_dir("huge.kld"), bad, n);
    expect_open_fails(path_in_dir("huge.kld"), "n_chunk");
    const int32_t neg[3] = {-8, 5, 2};
    memcpy(bad + 8, neg, 12);
    write_raw(path_in_dir("neg.kld"), bad, n);
    expect_open_fails(path_in_dir("neg.kld"), "not a sane");
    expect_open_fails(path_in_dir("missing.kld"), "cannot open");
    expect_open_fails(dir, "not a regular file");
}

// --- whole runs on synthetic models -----------------------------------------------------

static void add_bos_true(struct gguf_writer *w) {
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
}
static int no_add_bos(void *user, const char *name) {
    (void)user;
    return strcmp(name, "tokenizer.ggml.add_bos_token") != 0;
}

// A synthetic model (seed, BOS added or not) loaded from a file in dir.
static struct model *synth_model(uint64_t seed, bool add_bos, int n_vocab) {
    struct synth_params p = synth_default_params();
    p.seed = seed;
    p.n_vocab = n_vocab;
    p.tied = 0; // a tied random model predicts its input token with certainty
    char name[64];
    snprintf(name, sizeof name, "m%llu_%d_%d.gguf", (unsigned long long)seed, add_bos, n_vocab);
    const char *path = path_in_dir(name);
    struct gguf_writer *w;
    if (synth_build(&p, no_add_bos, NULL, &w)) return NULL;
    if (add_bos)
        add_bos_true(w);
    else
        gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false);
    const int rc = gguf_writer_write_file(w, path);
    gguf_writer_free(w);
    struct model *m = NULL;
    if (rc || model_load(path, &m)) {
        printf("    synth model: %s\n", st_last_error());
        return NULL;
    }
    return m;
}

struct runner {
    struct backend *be;
    struct context *c;
};

static int runner_open(struct runner *r, struct model *m, const char *be_name, int n_ctx, int n_batch) {
    const struct backend_opts bo = {.n_threads = 2};
    memset(r, 0, sizeof *r);
    if (!(r->be = backend_open(be_name, &bo))) return -1;
    return context_init(m, r->be, n_ctx, n_batch, 1, &r->c);
}

static void runner_close(struct runner *r) {
    context_free(r->c);
    if (r->be) r->be->free(r->be);
}

// Independent scoring: each chunk in one forward pass with every position's
// logits, BOS placed here, log-softmax in long double over the second half.
// Returns the NLL sum and its rounding bound; *count positions.
static long double reference_nll(struct model *m, const int32_t *tokens, int n_chunk, int n_ctx, bool add_bos,
                                 double *bound, int64_t *count) {
    struct runner r;
    const int nv = m->hp.n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)n_ctx * nv);
    long double *ls = malloc(sizeof(long double) * nv);
    int32_t *chunk = malloc(sizeof(int32_t) * n_ctx);
    long double sum = 0;
    *bound = 0;
    *count = 0;
    if (runner_open(&r, m, "cpu-ref", n_ctx, n_ctx)) {
        printf("    reference: %s\n", st_last_error());
        return NAN;
    }
    for (int i = 0; i < n_chunk; i++) {
        memcpy(chunk, tokens + (size_t)i * n_ctx, sizeof(int32_t) * n_ctx);
        if (add_bos) chunk[0] = 256; // synth's BOS
        if (context_forward(r.c, chunk, n_ctx, 0, lg, true)) return NAN;
        for (int p = n_ctx / 2; p < n_ctx - 1; p++) {
            log_softmax_ld(lg + (size_t)p * nv, nv, ls);
            const long double v = -ls[tokens[(size_t)i * n_ctx + p + 1]];
            sum += v;
            *bound += nll_bound(v);
            (*count)++;
        }
    }
    runner_close(&r);
    free(lg);
    free(ls);
    free(chunk);
    return sum;
}

static void check_run(struct model *m, const char *be_name, const int32_t *tokens, int n_tokens, int n_ctx,
                      int n_batch, bool add_bos, long double want, double bound, int64_t want_count) {
    struct runner r;
    if (runner_open(&r, m, be_name, n_ctx, n_batch)) {
        CHECK(0, "%s: %s", be_name, st_last_error());
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *prog = open_memstream(&text, &len);
    const struct ppl_output out = {.progress = prog, .info = NULL};
    struct ppl_result res;
    const int rc = ppl_run(r.c, tokens, n_tokens, n_ctx, 0, NULL, &out, &res);
    fclose(prog);
    CHECK(rc == 0, "%s batch %d: %s", be_name, n_batch, st_last_error());
    CHECK(res.count == want_count, "count %lld, want %lld", (long long)res.count, (long long)want_count);
    CHECK(fabsl(res.nll - want) <= bound, "%s batch %d, bos %d: NLL sum %.9g, reference %.9Lg (bound %.3g)",
          be_name, n_batch, add_bos, res.nll, want, bound);
    const double ppl = exp((double)want / want_count);
    CHECK(fabs(res.ppl / ppl - 1) <= bound / want_count * 2, "PPL %.9g, reference %.9g", res.ppl, ppl);
    // the progress line ends with this run's total as "[n]x.xxxx,"
    char last[64];
    snprintf(last, sizeof last, "[%d]%.4f,\n", res.n_chunk, res.ppl);
    CHECK(text && len >= strlen(last) && !strcmp(text + len - strlen(last), last) && text[0] == '[',
          "progress '%s' does not end with '%s'", text ? text : "", last);
    free(text);
    runner_close(&r);
}

static void test_runs_match_reference(void) {
    const int n_ctx = 32, n_tokens = 3 * 32 + 7, n_chunk = 3;
    int32_t tokens[3 * 32 + 7];
    for (int i = 0; i < n_tokens; i++) tokens[i] = (int32_t)(st_splitmix64(&rng_state) % 512);
    for (int bos = 0; bos < 2; bos++) {
        struct model *m = synth_model(11, bos, 512);
        if (!m) {
            CHECK(0, "no synthetic model");
            return;
        }
        double bound;
        int64_t count;
        const long double want = reference_nll(m, tokens, n_chunk, n_ctx, bos, &bound, &count);
        CHECK(count == n_chunk * 15, "reference count %lld", (long long)count);
        const int batches[] = {32, 7, 1, 16};
        for (size_t k = 0; k < sizeof batches / sizeof *batches; k++)
            check_run(m, "cpu-ref", tokens, n_tokens, n_ctx, batches[k], bos, want, bound, count);
        // the fast backend quantizes activations: same method, its own numbers
        // (parity of the backends is test_model's and test_ops' concern)
        struct runner r;
        struct ppl_result res;
        if (!runner_open(&r, m, "cpu", n_ctx, 13)) {
            CHECK(ppl_run(r.c, tokens, n_tokens, n_ctx, 2, NULL, NULL, &res) == 0 && res.n_chunk == 2 &&
                      res.count == 30,
                  "cpu backend, --chunks 2: %s", st_last_error());
            runner_close(&r);
        }
        // placing BOS matters, so the reference can tell a run that forgets it
        double b2;
        int64_t c2;
        const long double other = reference_nll(m, tokens, n_chunk, n_ctx, !bos, &b2, &c2);
        CHECK(fabsl(other - want) > 100 * bound, "BOS replacement changes the NLL by only %.3Lg",
              other - want);
        model_free(m);
    }
}

static void test_short_text(void) {
    struct model *m = synth_model(12, false, 512);
    struct runner r;
    if (!m || runner_open(&r, m, "cpu-ref", 64, 64)) {
        CHECK(0, "setup: %s", st_last_error());
        return;
    }
    int32_t tokens[127] = {0};
    struct ppl_result res;
    int rc = ppl_run(r.c, tokens, 127, 64, 0, NULL, NULL, &res);
    CHECK(rc == -1 && strstr(st_last_error(), "127 tokens") && strstr(st_last_error(), "-c 63"),
          "127 tokens at -c 64: '%s'", st_last_error());
    rc = ppl_run(r.c, tokens, 7, 64, 0, NULL, NULL, &res);
    CHECK(rc == -1 && strstr(st_last_error(), "too few for perplexity"), "7 tokens: '%s'", st_last_error());
    rc = ppl_run(r.c, tokens, 127, 128, 0, NULL, NULL, &res);
    CHECK(rc == -1 && strstr(st_last_error(), "chunk size 128"), "-c above the context: '%s'",
          st_last_error());
    CHECK(ppl_chunk_count(127, 64, 0) == 0 && ppl_chunk_count(128, 64, 0) == 2 &&
              ppl_chunk_count(1000, 64, 3) == 3 && ppl_chunk_count(1000, 64, 0) == 15,
          "chunk counts");
    runner_close(&r);
    model_free(m);
}

// A base file written by a run, read back by a KL-divergence run: the same
// model gives KLD within the 16-bit rounding and the same PPL; another model
// gives a real divergence; another vocabulary is refused.
static void test_kld_runs(void) {
    const int n_ctx = 32, n_tokens = 4 * 32;
    int32_t tokens[4 * 32];
    for (int i = 0; i < n_tokens; i++) tokens[i] = (int32_t)(st_splitmix64(&rng_state) % 512);
    struct model *m = synth_model(21, true, 512), *m2 = synth_model(22, true, 512),
                 *m3 = synth_model(23, true, 600);
    struct runner r;
    if (!m || !m2 || !m3 || runner_open(&r, m, "cpu-ref", n_ctx, 10)) {
        CHECK(0, "setup: %s", st_last_error());
        return;
    }
    const char *path = path_in_dir("run.kld");
    struct ppl_kld_file kf;
    struct ppl_result res;
    int rc = ppl_kld_file_create(path, n_ctx, 512, 4, tokens, &kf);
    rc |= ppl_run(r.c, tokens, n_tokens, n_ctx, 0, &kf, NULL, &res);
    rc |= ppl_kld_file_close(&kf);
    CHECK(rc == 0, "writing the base: %s", st_last_error());
    struct ppl_kld_result kr;
    rc = ppl_kld_file_open(path, &kf) || ppl_kld_run(r.c, &kf, 0, NULL, &kr);
    ppl_kld_file_close(&kf);
    runner_close(&r);
    CHECK(rc == 0, "self KLD: %s", st_last_error());
    if (!rc) {
        const struct ppl_kld_sums *s = &kr.s;
        CHECK(s->count == 4 * 15 && kr.n_values == s->count, "count %lld", (long long)s->count);
        CHECK(s->sum_nll == res.nll, "PPL(Q) NLL sum %.17g, the base run's %.17g", s->sum_nll, res.nll);
        const double step = 16.0 / 65535 / 2; // half a quantisation step at most
        CHECK(fabs(s->sum_nll_base - s->sum_nll) <= s->count * (step + 4e-6), "NLL base %.9g vs %.9g",
              s->sum_nll_base, s->sum_nll);
        CHECK(kr.kld[0] >= -(step + 1e-5) && kr.kld[kr.n_values - 1] <= step + 1e-5,
              "self KLD range %.3g..%.3g beyond the rounding %.3g", kr.kld[0], kr.kld[kr.n_values - 1], step);
        CHECK(s->n_same_top == s->count, "same top %lld of %lld", (long long)s->n_same_top,
              (long long)s->count);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        ppl_kld_print(f, &kr);
        fclose(f);
        CHECK(strstr(text, "(60 positions: too few"), "60 positions print: %s", text);
        free(text);
        ppl_kld_result_free(&kr);
    }
    // another model on the same base: a real divergence
    if (runner_open(&r, m2, "cpu-ref", n_ctx, n_ctx) == 0) {
        rc = ppl_kld_file_open(path, &kf) || ppl_kld_run(r.c, &kf, 3, NULL, &kr);
        ppl_kld_file_close(&kf);
        CHECK(rc == 0 && kr.s.count == 45, "other model, --chunks 3: %s", st_last_error());
        if (!rc) {
            CHECK(kr.s.sum_kld / kr.s.count > 0.05, "another model's mean KLD is only %g",
                  kr.s.sum_kld / kr.s.count);
            ppl_kld_result_free(&kr);
        }
        runner_close(&r);
    }
    if (runner_open(&r, m3, "cpu-ref", n_ctx, n_ctx) == 0) {
        rc = ppl_kld_file_open(path, &kf) || ppl_kld_run(r.c, &kf, 0, NULL, &kr);
        ppl_kld_file_close(&kf);
        CHECK(rc != 0 && strstr(st_last_error(), "vocabulary of 512"), "vocabulary 600: '%s'",
              st_last_error());
        runner_close(&r);
    }
    if (runner_open(&r, m2, "cpu-ref", 16, 16) == 0) {
        rc = ppl_kld_file_open(path, &kf) || ppl_kld_run(r.c, &kf, 0, NULL, &kr);
        ppl_kld_file_close(&kf);
        CHECK(rc != 0 && strstr(st_last_error(), "-c 32"), "context 16: '%s'", st_last_error());
        runner_close(&r);
    }
    model_free(m);
    model_free(m2);
    model_free(m3);
}

// The closing statistics on known values: percentiles interpolate, the median
// averages the middle two, same top and its uncertainty.
static void test_kld_print(void) {
    struct ppl_kld_result r = {0};
    const int n = 200;
    r.kld = malloc(sizeof(float) * n);
    r.p_diff = malloc(sizeof(float) * n);
    r.n_values = n;
    for (int i = 0; i < n; i++) {
        r.kld[i] = (float)i / 1000; // 0 .. 0.199
        r.p_diff[i] = (float)(i - 100) / 1000;
        const double nll = 2 + 0.01 * (i % 7), nll_b = 2 + 0.01 * (i % 5);
        r.s.sum_nll += nll;
        r.s.sum_nll2 += nll * nll;
        r.s.sum_nll_base += nll_b;
        r.s.sum_nll_base2 += nll_b * nll_b;
        r.s.sum_nll_nll_base += nll * nll_b;
        r.s.sum_kld += r.kld[i];
        r.s.sum_kld2 += (double)r.kld[i] * r.kld[i];
        r.s.sum_p_diff += r.p_diff[i];
        r.s.sum_p_diff2 += (double)r.p_diff[i] * r.p_diff[i];
        r.s.sum_p_diff4 += pow(r.p_diff[i], 4);
    }
    r.s.count = n;
    r.s.n_same_top = 150;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ppl_kld_print(f, &r);
    fclose(f);
    // 99% of 199 = 197.01 → 0.197 + 0.01·0.001; median (0.099 + 0.100)/2
    const char *want[] = {"Maximum KLD:   0.199000\n",
                          "99.0%   KLD:   0.197010\n",
                          "Median  KLD:   0.099500\n",
                          "Minimum KLD:   0.000000\n",
                          "Mean    KLD:   0.099500 ±   0.004093\n",
                          "Median  Δp: -0.050%\n",
                          "Same top p: 75.000 ± 3.070 %\n",
                          "Mean PPL(Q)                   :   "};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(strstr(text, want[i]), "missing '%s' in:\n%s", want[i], text);
    free(text);
    ppl_kld_result_free(&r);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_nll_matches_exact);
    RUN(test_row_format);
    RUN(test_kld_position);
    RUN(test_kld_file);
    RUN(test_runs_match_reference);
    RUN(test_short_text);
    RUN(test_kld_runs);
    RUN(test_kld_print);
    char cmd[300];
    // KEEP=1 keeps the files (models, KLD files) for a look
    snprintf(cmd, sizeof cmd, "%s %s", getenv("KEEP") ? "echo" : "rm -rf", dir);
    if (system(cmd)) printf("  (could not remove %s)\n", dir);
    TEST_END();
}
