// test_gemm.c: the repacked matrix kernels of the fast CPU backend (src/cpu/gemm*.c).
//
// For every repacked type, every kernel set this CPU can run (the scalar twin
// always; AVX2, AVX-VNNI and AVX-512 VNNI when CPUID has them) and ragged shapes
// (rows and token counts not multiples of the 16-row group or the token tile),
// on fresh random weights and activations (seed printed; STRATA_SEED repeats):
//
// - the activation quantizer: |x − d·q| ≤ d/2, q in [−127, 127], s = d·Σq and
//   the folded-min bias (−8·Σq, −128·Σq, −32·Σq per 16: gemm.h), and the SIMD
//   quantizers give bit-identical blocks (the d/2
//   widens by 3·127 float roundings: x·id, id = 127/max and d = max/127 each
//   round once, relative to values up to 127);
// - each kernel against an independent oracle: the double-precision product of
//   the weight as the GGUF reference dequantizes it with the quantized
//   activations (d·q). The kernel differs from it only by float rounding: each of
//   its 2·nb block terms (S·dw·da and the min term mw·s) is rounded at most three
//   times and then summed, so |y − oracle| ≤ (4·nb + 4)·2⁻²⁴·Σ_c (|w_c| + 2|mw_c|)·|a_c|
//   (|dw·u_c| + |mw_c| ≤ |w_c| + 2|mw_c| bounds each element's share of the
//   terms; mw_c is the block's offset magnitude, from the GGUF block);
// - sub-ranges of groups and tokens write exactly their part (the rest stays NaN);
// - the threaded driver (1, 2 and 3 threads, token blocks smaller than the batch)
//   and the cache of repacked weights; and a batch gives the bits each of its
//   tokens gives alone (whichever kernel set each size takes: AMX for 16 and up).
//
//   test_gemm                                the tests (make test runs this)
//   test_gemm --perf TYPE:ROWSxCOLS[xN]      the benchmark: one thread's kernel
//       of each SIMD set streaming copies of a repacked weight (1 GiB in all, in
//       2 MiB pages as the backend keeps them) for N tokens (default 1), in GB/s
//       of weights and as a fraction of one thread's read ceiling (membw.h)
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/gemm.h"
#include "cpu/hugemem.h"
#include "cpu/membw.h"
#include "cpu/threadpool.h"
#include "format/quant_impl.h"
#include "model/model.h"
#include "util.h"

static uint64_t rng_state;
static uint64_t rng_u64(void) { return st_splitmix64(&rng_state); }
static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }
static float rng_normal(void) {
    const double u = 1.0 - rng_unit(), v = rng_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static const enum ggml_type types[GEMM_N_TYPES] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0,
                                                   GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};

// --- random GGUF weights ---------------------------------------------------------------

static void put_half(uint8_t *p, float v) {
    const uint16_t h = st_f32_to_fp16(v);
    memcpy(p, &h, 2);
}

// Random bytes with scale fields ±[0.5, 1.5]·2^-6 (byte offsets: GGUF block layouts).
static uint8_t *random_weight(enum ggml_type t, int64_t rows, int64_t cols, size_t *row_bytes) {
    const struct quant_traits *qt = quant_get(t);
    *row_bytes = quant_row_size(t, cols);
    const size_t bytes = (size_t)rows * *row_bytes, nblk = bytes / qt->type_size;
    uint8_t *d = st_xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) d[i] = (uint8_t)rng_u64();
    int off[2], n_off;
    switch (t) {
    case GGML_TYPE_Q4_1:
        off[0] = 0, off[1] = 2, n_off = 2;
        break;
    case GGML_TYPE_Q4_K:
        off[0] = 0, off[1] = 2, n_off = 2;
        break;
    case GGML_TYPE_Q6_K:
        off[0] = 208, n_off = 1;
        break;
    default:
        off[0] = 0, n_off = 1;
        break; // Q4_0, Q8_0
    }
    for (size_t b = 0; b < nblk; b++)
        for (int k = 0; k < n_off; k++)
            put_half(d + b * qt->type_size + off[k],
                     (float)((0.5 + rng_unit()) * (rng_u64() & 1 ? -1 : 1) / 64.0));
    return d;
}

// |offset| of element c's block in a row (x = dw·u + offset in the kernels' terms).
static double offset_mag(enum ggml_type t, const uint8_t *row, int64_t c) {
    switch (t) {
    case GGML_TYPE_Q4_0: {
        const struct block_q4_0 *b = (const void *)row;
        return 8 * fabs(st_fp16_to_f32(b[c / 32].d));
    }
    case GGML_TYPE_Q8_0: {
        const struct block_q8_0 *b = (const void *)row;
        return 128 * fabs(st_fp16_to_f32(b[c / 32].d));
    }
    case GGML_TYPE_Q4_1: {
        const struct block_q4_1 *b = (const void *)row;
        return fabs(st_fp16_to_f32(b[c / 32].m));
    }
    case GGML_TYPE_Q4_K: {
        const struct block_q4_K *b = (const struct block_q4_K *)row + c / QK_K;
        uint8_t sc, m;
        quant_k4_scale_min((int)(c % QK_K) / 32, b->scales, &sc, &m);
        return fabs(st_fp16_to_f32(b->dmin)) * m;
    }
    case GGML_TYPE_Q6_K: {
        const struct block_q6_K *b = (const struct block_q6_K *)row + c / QK_K;
        return 32 * fabs(st_fp16_to_f32(b->d) * b->scales[(c % QK_K) / 16]);
    }
    default:
        ST_ASSERT(0);
    }
}

// --- oracle -----------------------------------------------------------------------------

struct oracle {
    double *y;     // (n, rows)
    double *bound; // (n, rows)
};

static struct oracle make_oracle(enum ggml_type t, const uint8_t *w, size_t row_bytes, int64_t rows,
                                 int64_t cols, const struct gemm_act *a) {
    struct oracle o = {st_xmalloc(sizeof(double) * (size_t)a->n * rows),
                       st_xmalloc(sizeof(double) * (size_t)a->n * rows)};
    float *deq = st_xmalloc(sizeof(float) * (size_t)cols);
    double *off = st_xmalloc(sizeof(double) * (size_t)cols);
    const int64_t nb = cols / 32;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        quant_get(t)->dequantize_row(row, deq, cols);
        for (int64_t c = 0; c < cols; c++) off[c] = offset_mag(t, row, c);
        for (int tk = 0; tk < a->n; tk++) {
            double y = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                const double av = (double)a->d[(size_t)tk * nb + c / 32] * a->qs[(size_t)tk * cols + c];
                y += (double)deq[c] * av;
                mag += (fabs((double)deq[c]) + 2 * off[c]) * fabs(av);
            }
            if (t == GGML_TYPE_Q4_1) // its mins meet the activation's stored s, rounded to half
                for (int64_t b = 0; b < nb; b++) {
                    uint16_t mh;
                    memcpy(&mh, row + (size_t)b * 20 + 2, 2); // block_q4_1: d, m (half), 16 bytes
                    const size_t ib = (size_t)tk * nb + (size_t)b;
                    int qsum = 0;
                    for (int c = 0; c < 32; c++) qsum += a->qs[(size_t)tk * cols + b * 32 + c];
                    y += (double)st_fp16_to_f32(mh) * ((double)a->s[ib] - (double)a->d[ib] * qsum);
                }
            o.y[(size_t)tk * rows + r] = y;
            o.bound[(size_t)tk * rows + r] = (4.0 * nb + 4) * 0x1p-24 * mag * 1.01 + 1e-30;
        }
    }
    free(deq);
    free(off);
    return o;
}

static void free_oracle(struct oracle *o) {
    free(o->y);
    free(o->bound);
}

static void random_acts(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rng_normal();
    if (n >= 64) { // a zero block and a block with one large value
        memset(x, 0, 32 * sizeof(float));
        x[40] = 1000.0f;
    }
}

static struct gemm_act quantize(const float *x, int n, int64_t cols, enum gemm_type gt, void **buf) {
    *buf = aligned_alloc(64, (gemm_act_bytes(n, cols, gt) + 63) & ~(size_t)63);
    struct gemm_act a;
    gemm_act_layout(&a, *buf, n, cols, gt);
    gemm_quantize_scalar(x, &a, 0, n);
    return a;
}

// Compares y (n, ldy) against the oracle over rows [0, rows); counts elements out.
static int compare(const float *y, const struct oracle *o, int n, int64_t rows, const char *what) {
    int bad = 0;
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            const size_t i = (size_t)t * rows + r;
            const double d = fabs((double)y[i] - o->y[i]);
            if (!(d <= o->bound[i])) {
                if (bad < 3)
                    printf("    %s: y[t=%d][r=%lld] = %.9g, oracle %.9g, |diff| %.3g > bound %.3g\n", what, t,
                           (long long)r, (double)y[i], o->y[i], d, o->bound[i]);
                bad++;
            }
        }
    return bad;
}

// --- tests ------------------------------------------------------------------------------

static void test_quantizer(void) {
    static const int64_t colss[] = {32, 64, 576, 1536};
    static const struct {
        enum gemm_type gt;
        int n;
        int32_t mul;
    } kinds[] = {
        {GEMM_Q4_1, 0, 0}, {GEMM_Q4_0, 1, -8}, {GEMM_Q8_0, 1, -128}, {GEMM_Q6_K, 2, -32}, {GEMM_Q4_K, 0, 0}};
    for (size_t k = 0; k < sizeof colss / sizeof *colss; k++)
        for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++) {
            const int64_t cols = colss[k];
            const enum gemm_type gt = kinds[ki].gt;
            const int n = 5;
            float *x = st_xmalloc(sizeof(float) * (size_t)n * cols);
            random_acts(x, (size_t)n * cols);
            void *buf;
            struct gemm_act a = quantize(x, n, cols, gt, &buf);
            CHECK(a.bias_n == kinds[ki].n && a.bias_mul == kinds[ki].mul &&
                      (a.bias != NULL) == (a.bias_n > 0),
                  "%s: bias %d x %d", quant_name(types[gt]), a.bias_n, a.bias_mul);
            const int64_t nb = cols / 32;
            int bad = 0;
            for (int t = 0; t < n; t++)
                for (int64_t b = 0; b < nb; b++) {
                    const size_t ib = (size_t)t * nb + b;
                    const float *xb = x + (size_t)t * cols + b * 32;
                    const int8_t *q = a.qs + (size_t)t * cols + b * 32;
                    // the K types share one scale over each 8 blocks (a super-block of
                    // 256; fewer at the end of a row whose cols are not a multiple)
                    const bool super = gt == GEMM_Q4_K || gt == GEMM_Q6_K;
                    const int64_t s0 = super ? b / 8 * 8 : b, s1 = super && s0 + 8 < nb ? s0 + 8
                                                                   : super              ? nb
                                                                                        : b + 1;
                    float amax = 0;
                    for (int64_t i = s0 * 32; i < s1 * 32; i++)
                        amax = fmaxf(amax, fabsf(x[(size_t)t * cols + i]));
                    // Q4_0, Q4_1 and Q8_0 take llama.cpp's Q8_0/Q8_1 block scales: d and
                    // s = d·Σq (from the unrounded d) rounded to half precision
                    const bool half = gt == GEMM_Q4_0 || gt == GEMM_Q4_1 || gt == GEMM_Q8_0;
                    const float d0 = amax / 127.0f;
                    const float d = half ? st_fp16_to_f32(st_f32_to_fp16(d0)) : d0;
                    int sum[2] = {0, 0};
                    for (int i = 0; i < 32; i++) {
                        const double err = fabs((double)xb[i] - (double)a.d[ib] * q[i]);
                        if (q[i] < -127 ||
                            err > d0 * (0.5 + 381 * 0x1p-24) + fabs((double)d - d0) * 127 + 1e-30)
                            bad++;
                        sum[i / 16] += q[i];
                    }
                    const float sw = half ? st_fp16_to_f32(st_f32_to_fp16(d0 * (float)(sum[0] + sum[1])))
                                          : d0 * (float)(sum[0] + sum[1]);
                    if (a.d[ib] != d || a.s[ib] != sw) bad++;
                    if (a.bias_n == 1 && a.bias[ib] != a.bias_mul * (sum[0] + sum[1])) bad++;
                    if ((a.qsum != NULL) != (gt == GEMM_Q4_K) || (a.qsum && a.qsum[ib] != sum[0] + sum[1]))
                        bad++;
                    if (a.bias_n == 2 &&
                        (a.bias[2 * ib] != a.bias_mul * sum[0] || a.bias[2 * ib + 1] != a.bias_mul * sum[1]))
                        bad++;
                }
            CHECK(bad == 0, "cols %lld: %d quantized blocks or values out of their bounds", (long long)cols,
                  bad);
            for (int isa = GEMM_ISA_AVX2; isa < GEMM_ISA_COUNT; isa++) {
                if (!gemm_isa_available((enum gemm_isa)isa)) continue;
                const size_t bytes = gemm_act_bytes(n, cols, gt);
                void *buf2 = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
                memset(buf2, 0x55, bytes);
                struct gemm_act b;
                gemm_act_layout(&b, buf2, n, cols, gt);
                gemm_quantizer((enum gemm_isa)isa)(x, &b, 0, n);
                const bool same =
                    !memcmp(a.qs, b.qs, (size_t)n * cols) && !memcmp(a.d, b.d, sizeof(float) * n * nb) &&
                    !memcmp(a.s, b.s, sizeof(float) * n * nb) &&
                    (!a.bias_n || !memcmp(a.bias, b.bias, sizeof(int32_t) * n * nb * a.bias_n)) &&
                    (!a.qsum || !memcmp(a.qsum, b.qsum, sizeof(int16_t) * n * nb));
                CHECK(same, "cols %lld: the %s quantizer differs from the scalar one", (long long)cols,
                      gemm_isa_name((enum gemm_isa)isa));
                free(buf2);
            }
            free(buf);
            free(x);
        }
}

static int n_kernel_cases;

static void kernel_case(enum ggml_type t, int64_t rows, int64_t cols, int n) {
    size_t row_bytes;
    uint8_t *wd = random_weight(t, rows, cols, &row_bytes);
    struct gemm_weight gw;
    if (gemm_weight_init(&gw, t, rows, cols)) {
        CHECK(0, "gemm_weight_init %s: %s", quant_name(t), st_last_error());
        free(wd);
        return;
    }
    gemm_repack_rows(&gw, wd, row_bytes, 0, rows);
    float *x = st_xmalloc(sizeof(float) * (size_t)n * cols);
    random_acts(x, (size_t)n * cols);
    void *abuf;
    struct gemm_act a = quantize(x, n, cols, gw.gt, &abuf);
    struct oracle o = make_oracle(t, wd, row_bytes, rows, cols, &a);
    float *y = st_xmalloc(sizeof(float) * (size_t)n * rows);
    for (int isa = 0; isa < GEMM_ISA_COUNT; isa++) {
        if (!gemm_isa_available((enum gemm_isa)isa)) continue;
        const gemm_kernel_fn k = gemm_kernel((enum gemm_isa)isa, gw.gt, 16); // AMX's kernel even for small n
        char what[128];
        snprintf(what, sizeof what, "%s %s %lldx%lld n=%d", gemm_isa_name((enum gemm_isa)isa), quant_name(t),
                 (long long)rows, (long long)cols, n);
        for (size_t i = 0; i < (size_t)n * rows; i++) y[i] = NAN;
        k(&gw, &a, 0, n, 0, gw.n_groups, y, rows);
        CHECK(compare(y, &o, n, rows, what) == 0, "%s: elements out of bounds", what);
        // a sub-range: groups [1, n_groups) and tokens [1, n) only
        if (gw.n_groups > 1 && n > 1) {
            for (size_t i = 0; i < (size_t)n * rows; i++) y[i] = NAN;
            k(&gw, &a, 1, n - 1, 1, gw.n_groups, y, rows);
            int wrong = 0;
            for (int tk = 0; tk < n; tk++)
                for (int64_t r = 0; r < rows; r++) {
                    const size_t i = (size_t)tk * rows + r;
                    const bool inside = tk >= 1 && r >= GEMM_R;
                    if (inside ? !(fabs((double)y[i] - o.y[i]) <= o.bound[i]) : !isnan(y[i])) wrong++;
                }
            CHECK(wrong == 0, "%s, tokens 1.. and groups 1..: %d elements wrong or written outside", what,
                  wrong);
        }
        n_kernel_cases++;
    }
    free(y);
    free_oracle(&o);
    free(abuf);
    free(x);
    gemm_weight_free(&gw);
    free(wd);
}

static void test_kernels(void) {
    // rows ragged against the 16-row group, tokens against the tiles of 4 and 8
    static const int64_t shapes32[][3] = {{1, 32, 1},   {15, 64, 3},   {16, 96, 8},   {17, 128, 9},
                                          {40, 576, 5}, {33, 160, 17}, {130, 64, 67}, {48, 2048, 2},
                                          {11, 96, 4},  {19, 64, 12}};
    static const int64_t shapes256[][3] = {{1, 256, 1},  {15, 512, 3},  {16, 256, 8},   {17, 768, 9},
                                           {40, 512, 5}, {33, 256, 17}, {130, 256, 20}, {24, 2048, 2},
                                           {11, 256, 4}, {19, 512, 12}};
    for (int k = 0; k < GEMM_N_TYPES; k++) {
        const bool k_quant = quant_get(types[k])->block_size == QK_K;
        const int64_t(*s)[3] = k_quant ? shapes256 : shapes32;
        for (int i = 0; i < 10; i++) kernel_case(types[k], s[i][0], s[i][1], (int)s[i][2]);
    }
    printf("  %d kernel runs (type x shape x kernel set)\n", n_kernel_cases);
}

// The threaded driver end to end: y = x·wᵀ against the oracle of x quantized the
// same way, for several thread counts and a batch larger than one token block.
static void test_driver(void) {
    static const int threads[] = {1, 2, 3};
    static const int64_t shapes[][3] = {{70, 8192, 200}, {1000, 256, 1}, {33, 512, 30}};
    for (size_t si = 0; si < 3; si++)
        for (int k = 0; k < GEMM_N_TYPES; k++) {
            const enum ggml_type t = types[k];
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            const int n = (int)shapes[si][2];
            size_t row_bytes;
            uint8_t *wd = random_weight(t, rows, cols, &row_bytes);
            struct weight w = {.name = "w",
                               .name_len = 1,
                               .type = t,
                               .cols = cols,
                               .rows = rows,
                               .n_expert = 1,
                               .row_bytes = row_bytes,
                               .data = wd};
            float *x = st_xmalloc(sizeof(float) * (size_t)n * cols);
            random_acts(x, (size_t)n * cols);
            void *abuf;
            struct gemm_act a = quantize(x, n, cols, (enum gemm_type)k, &abuf);
            struct oracle o = make_oracle(t, wd, row_bytes, rows, cols, &a);
            float *y = st_xmalloc(sizeof(float) * (size_t)n * rows);
            for (size_t ti = 0; ti < 3; ti++) {
                struct threadpool *tp = threadpool_init(threads[ti]);
                struct gemm_cache *c = gemm_cache_init();
                CHECK(gemm_cache_add(c, tp, &w) == 0, "gemm_cache_add: %s", st_last_error());
                const struct gemm_weight *gw = gemm_cache_find(c, wd);
                CHECK(gw != NULL, "the repacked weight is not in the cache");
                if (gw) {
                    void *scratch = NULL;
                    size_t cap = 0;
                    for (size_t i = 0; i < (size_t)n * rows; i++) y[i] = NAN;
                    gemm_matmul(tp, gemm_isa_best(), gw, x, y, n, &scratch, &cap);
                    char what[128];
                    snprintf(what, sizeof what, "driver %s %lldx%lld n=%d threads %d", quant_name(t),
                             (long long)rows, (long long)cols, n, threads[ti]);
                    CHECK(compare(y, &o, n, rows, what) == 0, "%s: elements out of bounds", what);
                    if (ti == 0) { // batch invariance: token by token, the same bits
                        float *one = st_xmalloc(sizeof(float) * (size_t)rows);
                        int differ = 0;
                        for (int t = 0; t < n; t++) {
                            gemm_matmul(tp, gemm_isa_best(), gw, x + (size_t)t * cols, one, 1, &scratch,
                                        &cap);
                            differ += memcmp(one, y + (size_t)t * rows, sizeof(float) * (size_t)rows) != 0;
                        }
                        CHECK(differ == 0, "%s: %d tokens give other bits alone than in the batch", what,
                              differ);
                        free(one);
                    }
                    free(scratch);
                }
                gemm_cache_free(c);
                threadpool_free(tp);
            }
            free(y);
            free_oracle(&o);
            free(abuf);
            free(x);
            free(wd);
        }
}

// Many weights in, some out, the rest still found (open addressing with removal).
static void test_cache(void) {
    struct threadpool *tp = threadpool_init(1);
    struct gemm_cache *c = gemm_cache_init();
    enum { N = 300 };
    static uint8_t *data[N];
    static struct weight ws[N];
    size_t row_bytes = 0;
    for (int i = 0; i < N; i++) {
        data[i] = random_weight(GGML_TYPE_Q4_0, 3, 32, &row_bytes);
        ws[i] = (struct weight){.name = "w",
                                .name_len = 1,
                                .type = GGML_TYPE_Q4_0,
                                .cols = 32,
                                .rows = 3,
                                .n_expert = 1,
                                .row_bytes = row_bytes,
                                .data = data[i]};
        CHECK(gemm_cache_add(c, tp, &ws[i]) == 0, "add %d: %s", i, st_last_error());
    }
    CHECK(gemm_cache_add(c, tp, &ws[0]) == 0, "adding twice is a no-op");
    for (int i = 0; i < N; i += 3) gemm_cache_remove(c, data[i]);
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        const struct gemm_weight *g = gemm_cache_find(c, data[i]);
        if ((i % 3 == 0) != (g == NULL) || (g && g->rows != 3)) wrong++;
    }
    CHECK(wrong == 0, "%d weights found or lost wrongly after removals", wrong);
    struct weight f32 = {.name = "w",
                         .name_len = 1,
                         .type = GGML_TYPE_F32,
                         .cols = 32,
                         .rows = 3,
                         .n_expert = 1,
                         .row_bytes = 128,
                         .data = data[1]};
    CHECK(gemm_cache_add(c, tp, &f32) == 0, "an unsupported type is left alone");
    gemm_cache_free(c);
    threadpool_free(tp);
    for (int i = 0; i < N; i++) free(data[i]);
}

// --- the weights' arena (hugemem.h) ----------------------------------------------------

// Blocks of several sizes, some larger than a slab: each 64-byte aligned,
// zeroed, disjoint from the others (each filled with its own byte and read back
// after all were filled); every slab returned once its blocks are freed, in an
// order that frees the slab taking new blocks before older ones.
static void test_hugemem_arena(void) {
    struct hugemem *h = hugemem_init();
    enum { N = 12 };
    const size_t sizes[N] = {1,       100,      4096,    5 << 20, 40 << 20, 64,
                             3 << 20, 20 << 20, 1 << 20, 7,       33 << 20, 128};
    uint8_t *p[N];
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        p[i] = hugemem_alloc(h, sizes[i]);
        CHECK(p[i], "block %d of %zu bytes: %s", i, sizes[i], st_last_error());
        if (!p[i]) return;
        CHECK((uintptr_t)p[i] % 64 == 0, "block %d is not 64-byte aligned", i);
        size_t nonzero = 0;
        for (size_t k = 0; k < sizes[i]; k++) nonzero += p[i][k] != 0;
        CHECK(nonzero == 0, "block %d: %zu of %zu bytes not zero", i, nonzero, sizes[i]);
        memset(p[i], i + 1, sizes[i]);
        total += sizes[i];
    }
    for (int i = 0; i < N; i++) {
        size_t wrong = 0;
        for (size_t k = 0; k < sizes[i]; k++) wrong += p[i][k] != (uint8_t)(i + 1);
        CHECK(wrong == 0, "block %d: %zu bytes overwritten by another block", i, wrong);
    }
    CHECK(hugemem_mapped(h) >= total, "%zu bytes mapped for %zu handed out", hugemem_mapped(h), total);
    const int order[N] = {11, 10, 0, 5, 3, 9, 1, 2, 4, 6, 8, 7};
    for (int i = 0; i < N; i++) hugemem_free(h, p[order[i]]);
    CHECK(hugemem_mapped(h) == 0, "%zu bytes still mapped after every block was freed", hugemem_mapped(h));
    // and it hands out blocks again
    uint8_t *q = hugemem_alloc(h, 1000);
    CHECK(q && q[999] == 0, "a block after the arena emptied");
    hugemem_free_all(h);
}

// Where Linux offers transparent huge pages, a touched arena block and a large
// buffer fault in 2 MiB pages: the kernel's count of huge-page faults (taken,
// or fallen back to small pages when none was free) grows by at least one per
// 2 MiB touched.
static long vmstat_thp_faults(void) {
    FILE *f = fopen("/proc/vmstat", "r");
    if (!f) return -1;
    char name[64];
    long v, n = -1;
    while (fscanf(f, "%63s %ld", name, &v) == 2)
        if (!strcmp(name, "thp_fault_alloc") || !strcmp(name, "thp_fault_fallback")) n = (n < 0 ? 0 : n) + v;
    fclose(f);
    return n;
}

static void test_hugemem_pages(void) {
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
        fclose(f);
    }
    if (vmstat_thp_faults() < 0 || (!strstr(mode, "[always]") && !strstr(mode, "[madvise]")))
        SKIP("transparent huge pages are off here (%s)", mode[0] ? "never" : "no THP in this kernel");
    struct hugemem *h = hugemem_init();
    const size_t bytes = 8 << 20;
    long before = vmstat_thp_faults();
    uint8_t *p = hugemem_alloc(h, bytes);
    CHECK(p, "%s", st_last_error());
    if (!p) return;
    memset(p, 1, bytes);
    long faults = vmstat_thp_faults() - before;
    CHECK(faults >= (long)(bytes >> 21), "an arena block of %zu bytes took %ld huge-page faults", bytes,
          faults);
    hugemem_free_all(h);
    before = vmstat_thp_faults();
    uint8_t *b = hugemem_buffer(bytes + 100);
    CHECK(b && (uintptr_t)b % (2 << 20) == 0, "a large buffer is 2 MiB aligned");
    if (!b) return;
    memset(b, 1, bytes + 100);
    faults = vmstat_thp_faults() - before;
    CHECK(faults >= (long)(bytes >> 21), "a buffer of %zu bytes took %ld huge-page faults", bytes + 100,
          faults);
    free(b);
    uint8_t *small = hugemem_buffer(1000);
    CHECK(small && (uintptr_t)small % 64 == 0, "a small buffer is 64-byte aligned");
    free(small);
}

static void test_isa(void) {
    const enum gemm_isa best = gemm_isa_best();
    CHECK(gemm_isa_available(best), "the chosen kernel set %s is not available", gemm_isa_name(best));
    CHECK(gemm_isa_available(GEMM_ISA_SCALAR), "the scalar kernels are always available");
    printf("  kernel sets on this CPU:");
    for (int i = 0; i < GEMM_ISA_COUNT; i++)
        if (gemm_isa_available((enum gemm_isa)i)) printf(" %s", gemm_isa_name((enum gemm_isa)i));
    printf(" (used: %s)\n", gemm_isa_name(best));
}

// --- the benchmark --------------------------------------------------------------------

static int perf(const char *spec) {
    char name[16];
    long long rows = 0, cols = 0;
    int n = 1;
    const int got = sscanf(spec, "%15[^:]:%lldx%lldx%d", name, &rows, &cols, &n);
    enum ggml_type t = GGML_TYPE_COUNT;
    for (int k = 0; k < GEMM_N_TYPES; k++)
        if (!strcmp(name, quant_name(types[k]))) t = types[k];
    if (got < 3 || t == GGML_TYPE_COUNT || rows < 1 || cols < 1 || n < 1 || n > 64) {
        fprintf(stderr,
                "--perf: want TYPE:ROWSxCOLS[xN] with a repacked type (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K), "
                "N at most 64; got '%s'\n",
                spec);
        return 2;
    }
    struct gemm_weight w0;
    if (gemm_weight_init(&w0, t, rows, cols)) {
        fprintf(stderr, "--perf: %s\n", st_last_error());
        return 2;
    }
    size_t row_bytes;
    uint8_t *src = random_weight(t, rows, cols, &row_bytes);
    gemm_repack_rows(&w0, src, row_bytes, 0, rows);
    free(src);
    // copies enough to stream 1 GiB, each in the arena the backend keeps weights in
    const size_t bytes = gemm_weight_bytes(&w0);
    const int copies = (int)(((size_t)1 << 30) / bytes) + 1;
    struct hugemem *h = hugemem_init();
    struct gemm_weight *w = st_xcalloc((size_t)copies, sizeof *w);
    for (int i = 0; i < copies; i++) {
        w[i] = w0;
        w[i].data = hugemem_alloc(h, bytes);
        if (!w[i].data) {
            fprintf(stderr, "--perf: %s\n", st_last_error());
            return 2;
        }
        memcpy(w[i].data, w0.data, bytes);
    }
    float *x = st_xmalloc(sizeof(float) * (size_t)n * (size_t)cols);
    random_acts(x, (size_t)n * (size_t)cols);
    float *y = st_xmalloc(sizeof(float) * (size_t)n * (size_t)rows);
    const double ceiling = cpu_read_bandwidth(1, (size_t)1 << 30, 5);
    printf("%s %lld x %lld, %d token(s), %d copies of %.1f MB; one thread's read ceiling %.1f GB/s\n", name,
           rows, cols, n, copies, (double)bytes / 1e6, ceiling / 1e9);
    printf("| kernels | ms a pass | GB/s | of ceiling |\n|---|---|---|---|\n");
    for (int isa = GEMM_ISA_AVX2; isa < GEMM_ISA_COUNT; isa++) {
        if (!gemm_isa_available((enum gemm_isa)isa) || (isa == GEMM_ISA_AMX && n < 16)) continue; // AVX-512's
        void *buf;
        struct gemm_act a = quantize(x, n, cols, w0.gt, &buf);
        const gemm_kernel_fn k = gemm_kernel((enum gemm_isa)isa, w0.gt, n);
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            const double t0 = st_time_s();
            for (int i = 0; i < copies; i++) k(&w[i], &a, 0, n, 0, w[i].n_groups, y, rows);
            const double dt = st_time_s() - t0;
            best = dt < best ? dt : best;
        }
        const double gbs = (double)bytes * copies / best;
        printf("| %s | %.1f | %.2f | %.0f%% |\n", gemm_isa_name((enum gemm_isa)isa), best * 1e3, gbs / 1e9,
               100.0 * gbs / ceiling);
        free(buf);
    }
    free(x);
    free(y);
    free(w);
    hugemem_free_all(h);
    gemm_weight_free(&w0);
    return 0;
}

int main(int argc, char **argv) {
    const char *seed_env = getenv("STRATA_SEED");
    const uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                                : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    if (argc == 3 && !strcmp(argv[1], "--perf")) return perf(argv[2]);
    if (argc > 1) {
        fprintf(stderr, "usage: %s [--perf TYPE:ROWSxCOLS[xN]]\n", argv[0]);
        return 2;
    }
    printf("seed %llu (STRATA_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    RUN(test_isa);
    RUN(test_quantizer);
    RUN(test_kernels);
    RUN(test_driver);
    RUN(test_cache);
    RUN(test_hugemem_arena);
    RUN(test_hugemem_pages);
    TEST_END();
}
