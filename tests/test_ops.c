// test_ops.c: the op harness. Runs every op × type × shape of struct backend
// on every built backend (the fast CPU backend always, the GPU backend in
// builds with one) against the reference backend (backend_cpu_ref_init:
// scalar, double accumulation), on fresh random inputs (seed printed;
// STRATA_SEED repeats a run), outputs poisoned with NaN before each run.
//
// Each case passes when every element is within its bound and the tensor's
// normalised squared error (NMSE = Σ(out-ref)² / Σref²) is within its bound;
// on failure the worst element is printed. Bounds come from the arithmetic,
// not from what passed: for products on 8-bit activations (blocks of B values
// with scale d = max|x|/127, rounding error uniform in ±d/2) an output's error
// has standard deviation σ = sqrt(Σ_c w_c² d_c² / 12); an element may be off
// by 8σ plus 2^-11·Σ|w_c x_c| (half-precision scales), and the tensor's Σ(out-ref)²
// may be at most (4 + 64/N)·Σσ² over its N elements (the 64/N keeps a chi-square
// of few elements from failing by chance; the slack counts in it as an 8σ).
// Float products get 2^-21·Σ|w_c x_c| (8 float roundings of the sum of
// magnitudes); element-wise ops a few ulps.
//
//   test_ops              every op on every backend (make test runs this)
//   test_ops --require-gpu   fail rather than skip when no GPU is usable
//   test_ops --gpu-only   skip the CPU backend (for runs under a memory checker)
//   test_ops --perf       GPU benchmarks: read-bandwidth ceiling, then matrix ×
//                         vector GB/s per type, shape and threads per row; the
//                         int8 tile-product rate, then 512-token products' TOPS; decode
//                         batches (n = 8, 16, 32) per rows-per-warp × token-group form
//   test_ops --perf-only Q4_0:14336x4096   the benchmark of one type and shape (any
//                         shape: perf_key_parse says which)
//   test_ops --perf-only Q4_0:14336x4096x512   the same, a 512-token product
//   test_ops --perf-only Q4_0:4096x4096/8   the same, a decode batch of 8 tokens
//   test_ops --perf-only batch   the decode batches' table alone
//   test_ops --only matmul,attention        only these groups of cases (names below)
#include "test.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/gemm.h"
#include "format/quant.h"
#include "text/sampler.h"
#include "util.h"
#include "gpu/gpu.h" // declarations only; called under STRATA_GPU

// --- random numbers --------------------------------------------------------------------

static uint64_t rng_state;

static uint64_t rng_u64(void) { return st_splitmix64(&rng_state); }

static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; } // [0, 1)

static float rng_normal(void) {
    const double u = 1.0 - rng_unit(), v = rng_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void fill_normal(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rng_normal();
}

// --- backends ------------------------------------------------------------------------

struct be_entry {
    struct backend *be;
    bool gpu;
};

static struct backend *ref;
static struct be_entry bes[2];
static int n_bes;

static void *xmalloc_f(size_t n) { return st_xmalloc(n * sizeof(float)); }

// A buffer of be holding host[0..bytes).
static void *put(struct backend *be, const void *host, size_t bytes) {
    void *p = be->alloc(be, bytes);
    if (!p) {
        printf("  cannot allocate %zu bytes on %s: %s\n", bytes, be->name, st_last_error());
        exit(1);
    }
    if (host) be->upload(be, p, host, bytes);
    return p;
}

// Fills buffer p of be (n floats) with NaN, so unwritten outputs show.
static void poison(struct backend *be, void *p, size_t n) {
    float *nan = xmalloc_f(n);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    be->upload(be, p, nan, n * sizeof(float));
    free(nan);
}

// Downloads bytes of p from be and syncs; false (with a message) on error.
static bool get_bytes(struct backend *be, void *host, const void *p, size_t bytes) {
    be->download(be, host, p, bytes);
    if (be->sync(be)) {
        printf("    %s failed: %s\n", be->name, st_last_error());
        return false;
    }
    return true;
}

// Downloads n floats of p from be and syncs; false (with a message) on error.
static bool get(struct backend *be, float *host, const void *p, size_t n) {
    return get_bytes(be, host, p, n * sizeof(float));
}

// KV caches of either type (backend.h's kv_type), through the type's own row
// conversions (quant.h): bytes of an element, the floats x[0..n) as a new host
// cache of type t (halves rounded to nearest, ties to even), and a cache's n
// elements widened to floats.
static size_t kv_size(enum ggml_type t) { return quant_get(t)->type_size; }

static void *kv_from_floats(enum ggml_type t, const float *x, size_t n) {
    void *c = st_xmalloc(n * kv_size(t));
    quant_get(t)->quantize_row(x, c, (int64_t)n);
    return c;
}

static void kv_to_floats(enum ggml_type t, const void *c, float *out, size_t n) {
    quant_get(t)->dequantize_row(c, out, (int64_t)n);
}

// Sets both e's backend and the reference to KV type t (for a test of the
// cache ops); false when e's backend does not take t.
static bool kv_use(const struct be_entry *e, enum ggml_type t) {
    if (!(e->be->kv_types & (1u << t))) return false;
    return !backend_set_kv_type(e->be, t) && !backend_set_kv_type(ref, t);
}

// A batch's rows for rope, kv_store and attention (backend.h's batch_rows):
// span s has n[s] rows at positions pos0[s] .. in cache region seq[s] of n_ctx
// rows (pos0 NULL: each row at a random position below n_ctx). on_ref points
// at the host values, on_be at a copy on be.
struct rows_case {
    int32_t *host;
    void *buf;
    struct batch_rows on_ref, on_be;
};

static struct rows_case rows_make(struct backend *be, int n_span, const int *seq, const int *pos0,
                                  const int *n, int n_ctx) {
    int total = 0, n_kv = 0;
    for (int s = 0; s < n_span; s++) total += n[s];
    struct rows_case rc = {st_xmalloc(sizeof(int32_t) * 2 * (size_t)total), NULL, {0}, {0}};
    int32_t *pos = rc.host, *base = rc.host + total;
    for (int s = 0, row = 0; s < n_span; s++)
        for (int i = 0; i < n[s]; i++, row++) {
            pos[row] = pos0 ? pos0[s] + i : (int32_t)(rng_u64() % (uint64_t)n_ctx);
            base[row] = seq[s] * n_ctx;
            if (pos[row] + 1 > n_kv) n_kv = pos[row] + 1;
        }
    rc.buf = put(be, rc.host, sizeof(int32_t) * 2 * (size_t)total);
    rc.on_ref = (struct batch_rows){total, pos, base, pos, base, n_kv};
    rc.on_be = (struct batch_rows){total, rc.buf, (int32_t *)rc.buf + total, pos, base, n_kv};
    return rc;
}

static void rows_free(struct backend *be, struct rows_case *rc) {
    be->release(be, rc->buf);
    free(rc->host);
}

// --- comparison ------------------------------------------------------------------------

// Checks got against want: element i within bound[i], or within
// atol_rel·rms(want) + rtol·|want_i| + FLT_MIN when bound is NULL (below the
// smallest normal float no float result has relative precision: an activation
// of a large negative input is 1e-62 in double, 0 or a subnormal in float), and
// the NMSE within nmse_max, counting of each error only what exceeds FLT_MIN
// for the same reason (a one-element case whose want is a subnormal would
// otherwise fail on a one-ulp subnormal). Counts the case and prints the worst
// element on failure.
static bool compare(const char *be_name, const char *what, const float *got, const float *want,
                    const double *bound, size_t n, double atol_rel, double rtol, double nmse_max) {
    double ss_ref = 0, ss_err = 0;
    for (size_t i = 0; i < n; i++) ss_ref += (double)want[i] * want[i];
    const double rms = n ? sqrt(ss_ref / (double)n) : 0;
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        const double allowed = bound ? bound[i] : atol_rel * rms + rtol * fabs(want[i]) + FLT_MIN;
        const double ratio = isnan(d) ? INFINITY : (allowed > 0 ? d / allowed : (d > 0 ? INFINITY : 0));
        if (!(d <= allowed)) bad++;
        if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
        if (!isnan(d) && d > FLT_MIN) ss_err += (d - FLT_MIN) * (d - FLT_MIN);
    }
    const double nmse = ss_ref > 0 ? ss_err / ss_ref : ss_err;
    const bool ok = bad == 0 && nmse <= nmse_max;
    if (ok) {
        test_n_pass++;
        return true;
    }
    test_n_fail++;
    const double allowed_w = bound ? bound[worst] : atol_rel * rms + rtol * fabs(want[worst]) + FLT_MIN;
    printf("  FAIL %s %s: %zu of %zu elements out; worst [%zu] got %.9g want %.9g (|diff| %.3g, "
           "allowed %.3g); NMSE %.3g (max %.3g)\n",
           be_name, what, bad, n, worst, (double)got[worst], (double)want[worst],
           fabs((double)got[worst] - want[worst]), allowed_w, nmse, nmse_max);
    return false;
}

// --- weights ---------------------------------------------------------------------------

// Byte offsets of the half-precision scale fields of each block (facts of the
// GGUF block layouts); every other byte of a block is random.
struct half_fields {
    enum ggml_type type;
    int off[2];
    int n;
};
static const struct half_fields half_fields[] = {
    {GGML_TYPE_Q4_0, {0}, 1},    {GGML_TYPE_Q4_1, {0, 2}, 2}, {GGML_TYPE_Q5_0, {0}, 1},
    {GGML_TYPE_Q5_1, {0, 2}, 2}, {GGML_TYPE_Q8_0, {0}, 1},    {GGML_TYPE_Q2_K, {80, 82}, 2},
    {GGML_TYPE_Q3_K, {108}, 1},  {GGML_TYPE_Q4_K, {0, 2}, 2}, {GGML_TYPE_Q5_K, {0, 2}, 2},
    {GGML_TYPE_Q6_K, {208}, 1},  {GGML_TYPE_IQ4_NL, {0}, 1},  {GGML_TYPE_IQ4_XS, {0}, 1},
};

static const enum ggml_type all_types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,   GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
};
#define N_TYPES (sizeof all_types / sizeof *all_types)

static bool is_float_type(enum ggml_type t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

// Random weight data of type t (rows, cols): floats N(0, 1); quantized blocks
// random bytes with scales ±[0.5, 1.5]·2^-6 times gain. The caller frees w.data.
static struct weight make_weight_gain(enum ggml_type t, int64_t rows, int64_t cols, double gain) {
    const struct quant_traits *qt = quant_get(t);
    struct weight w = {0};
    w.name = "w";
    w.name_len = 1;
    w.n_expert = 1;
    w.type = t;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = quant_row_size(t, cols);
    const size_t bytes = (size_t)rows * w.row_bytes;
    uint8_t *d = st_xmalloc(bytes);
    if (t == GGML_TYPE_F32) {
        fill_normal((float *)d, (size_t)rows * cols);
    } else if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        uint16_t *h = (uint16_t *)d;
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            h[i] = t == GGML_TYPE_F16 ? st_f32_to_fp16(rng_normal()) : st_f32_to_bf16(rng_normal());
    } else {
        for (size_t i = 0; i < bytes; i++) d[i] = (uint8_t)rng_u64();
        const struct half_fields *hf = NULL;
        for (size_t i = 0; i < sizeof half_fields / sizeof *half_fields; i++)
            if (half_fields[i].type == t) hf = &half_fields[i];
        ST_ASSERT(hf);
        for (size_t b = 0; b < bytes / qt->type_size; b++)
            for (int k = 0; k < hf->n; k++) {
                const float v = (float)((0.5 + rng_unit()) * (rng_u64() & 1 ? -1 : 1) / 64.0 * gain);
                const uint16_t h = st_f32_to_fp16(v);
                memcpy(d + b * qt->type_size + hf->off[k], &h, 2);
            }
    }
    w.data = d;
    return w;
}
static struct weight make_weight(enum ggml_type t, int64_t rows, int64_t cols) {
    return make_weight_gain(t, rows, cols, 1.0);
}

// Size of the activation blocks backend `be` quantizes to for weights of
// type t: 0 for float activations.
static int act_block(const struct be_entry *e, enum ggml_type t) {
    if (is_float_type(t)) return 0;
    if (e->gpu) return 32;
    enum gemm_type gt;
    if (gemm_type_of(t, &gt)) // the repacked kernels' activation blocks, or their super-blocks' shared scale
        return gemm_super_scales(gt) ? 8 * GEMM_QK : GEMM_QK;
    const enum ggml_type vt = quant_get(t)->vec_dot_type;
    return (int)quant_get(vt)->block_size;
}

// The same for matmul_id: the CPU backends' expert products take per-row
// dot products with activations quantized to the type's vec_dot_type (blocks
// of 256 for the K-quants), not the repacked kernels' blocks of 32.
static int id_act_block(const struct be_entry *e, enum ggml_type t) {
    if (is_float_type(t)) return 0;
    if (e->gpu) return 32;
    return (int)quant_get(quant_get(t)->vec_dot_type)->block_size;
}

// Per-element bounds of y = x·wᵀ (n tokens) computed with activation blocks of B
// (0: float), and the matching NMSE bound against ref.
static double *matmul_bounds(const struct weight *w, const float *x, int n, int B, const float *ref_y,
                             double *nmse_max) {
    const int64_t rows = w->rows, cols = w->cols;
    double *bound = st_xmalloc(sizeof(double) * (size_t)n * rows);
    float *row = xmalloc_f((size_t)cols);
    double *dq = st_xmalloc(sizeof(double) * (size_t)n * cols); // (d_c)² per token and column
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * cols;
        for (int64_t c0 = 0; B && c0 < cols; c0 += B) {
            double amax = 0;
            for (int64_t c = c0; c < c0 + B; c++) amax = fmax(amax, fabs(xt[c]));
            const double d = amax / 127.0;
            for (int64_t c = c0; c < c0 + B; c++) dq[(size_t)t * cols + c] = d * d;
        }
    }
    double ss_var = 0, ss_ref = 0;
    for (int64_t r = 0; r < rows; r++) {
        quant_get(w->type)->dequantize_row((const uint8_t *)w->data + (size_t)r * w->row_bytes, row, cols);
        for (int t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * cols;
            double var = 0, l1 = 0;
            for (int64_t c = 0; c < cols; c++) {
                l1 += fabs((double)row[c] * xt[c]);
                if (B) var += (double)row[c] * row[c] * dq[(size_t)t * cols + c] / 12.0;
            }
            const double sigma = sqrt(var);
            const double slack = (B ? 0x1p-11 : 0.0) + 0x1p-21;
            bound[(size_t)t * rows + r] = 8 * sigma + slack * l1;
            // rounding of scales and sums, counted as if its bound were 8σ too
            ss_var += var + (slack * l1 / 8) * (slack * l1 / 8);
            const double y = ref_y[(size_t)t * rows + r];
            ss_ref += y * y;
        }
    }
    const double ss_bound = (4 + 64.0 / ((double)n * rows)) * ss_var;
    *nmse_max = ss_ref > 0 ? ss_bound / ss_ref : ss_bound;
    free(row);
    free(dq);
    return bound;
}

// --- ops ---------------------------------------------------------------------------------

// gain scales the weights (make_weight_gain); with spread, the tokens'
// activations lie at 2^-40, 1 and 2^40 in turn, the first token's all zero.
static void test_matmul_case(const struct be_entry *e, enum ggml_type t, int64_t rows, int64_t cols, int n,
                             double gain, bool spread) {
    struct weight w = make_weight_gain(t, rows, cols, gain);
    char gain_s[48] = "";
    if (gain != 1.0) snprintf(gain_s, sizeof gain_s, " gain=%g", gain);
    if (spread) snprintf(gain_s + strlen(gain_s), sizeof gain_s - strlen(gain_s), " spread");
    const size_t nx = (size_t)n * cols, ny = (size_t)n * rows;
    float *x = xmalloc_f(nx), *want = xmalloc_f(ny), *got = xmalloc_f(ny);
    fill_normal(x, nx);
    for (int tk = 0; spread && tk < n; tk++)
        for (int64_t c = 0; c < cols; c++)
            x[(size_t)tk * cols + c] *= tk == 0 ? 0.0f : (float)ldexp(1.0, 40 * (tk % 3 - 1));
    ref->matmul(ref, &w, x, want, n);
    double nmse_max;
    double *bound = matmul_bounds(&w, x, n, act_block(e, t), want, &nmse_max);

    struct weight wb = w;
    if (e->be->prepare_weight(e->be, &wb)) {
        printf("  FAIL %s matmul %s: prepare_weight: %s\n", e->be->name, quant_name(t), st_last_error());
        test_n_fail++;
    } else {
        float *bx = put(e->be, x, nx * sizeof(float)), *by = put(e->be, NULL, ny * sizeof(float));
        // the GPU's variants: every threads-per-row choice for single tokens,
        // each with the dp4a and the SWAR dot product (the same integers: at a
        // given threads per row the two results must be equal to the bit; the
        // automatic choice may differ between them), every rows-per-warp choice
        // for several, and for prompt batches both forms of the tile product
        // (tensor cores, or their twin, and dp4a)
        // (tensor cores at every tile shape, 64 or 128 rows × 64 or 128 tokens a block)
        // (single tokens: -r the rows form with r rows a warp)
        static const int tprs[] = {0, 16, 32, 64, 128, 256, -1, -2, -4}, rpws[] = {0, 1, 2, 4};
        static const int mmas[] = {-1, 1, 1, 1, 1, 1, 0};
        static const int tile_rows[] = {0, 0, 64, 64, 128, 128, 0},
                         tile_tokens[] = {0, 0, 64, 128, 64, 128, 0};
        const bool tile = n > GPU_MATVEC_MAX_BATCH && !is_float_type(t);
        const int *var = n == 1 ? tprs : tile ? mmas : rpws;
        const char *var_name = n == 1 ? " tpr=" : tile ? " mma=" : " rpw=";
        const int n_var = !e->gpu  ? 1
                          : n == 1 ? (int)(sizeof tprs / sizeof *tprs)
                          : tile   ? (int)(sizeof mmas / sizeof *mmas)
                                   : (int)(sizeof rpws / sizeof *rpws);
        // and, for several tokens, every token group size with each rows per warp
        static const int tpgs[] = {0, 2, 4, 8};
        const int n_swar = e->gpu && n == 1 ? 2 : 1;
        const int n_tpg = e->gpu && n > 1 && !tile ? (int)(sizeof tpgs / sizeof *tpgs) : 1;
        float *first = n_swar > 1 ? xmalloc_f(ny) : NULL;
        for (int k = 0; k < n_var; k++)
            for (int sw = 0; sw < n_swar * n_tpg; sw++) {
#ifdef STRATA_GPU
                if (e->gpu && n == 1) gpu_backend_set_matvec_split(e->be, var[k] > 0 ? var[k] : 0);
                if (e->gpu && n == 1) gpu_backend_set_matvec_rows(e->be, var[k] < 0 ? -var[k] : 0);
                if (e->gpu && n == 1) gpu_backend_set_matvec_swar(e->be, sw);
                if (e->gpu && n > 1 && !tile) gpu_backend_set_matvec_rows(e->be, var[k]);
                if (e->gpu && n > 1 && !tile) gpu_backend_set_matvec_tokens(e->be, tpgs[sw]);
                if (e->gpu && tile) gpu_backend_set_tensor_cores(e->be, var[k]);
                if (e->gpu && tile) gpu_backend_set_tile(e->be, tile_rows[k], tile_tokens[k]);
#endif
                poison(e->be, by, ny);
                e->be->matmul(e->be, &wb, bx, by, n);
                char what[128];
                if (n_var == 1)
                    snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d%s", quant_name(t), (long long)rows,
                             (long long)cols, n, gain_s);
                else {
                    char form[24] = "";
                    if (n_swar > 1) snprintf(form, sizeof form, "%s", sw ? " swar" : " dp4a");
                    if (n_tpg > 1) snprintf(form, sizeof form, " tpg=%d", tpgs[sw]);
                    if (tile && tile_tokens[k])
                        snprintf(form, sizeof form, " tile=%dx%d", tile_rows[k], tile_tokens[k]);
                    snprintf(what, sizeof what, "matmul %s %lldx%lld n=%d%s%s%d%s", quant_name(t),
                             (long long)rows, (long long)cols, n, gain_s, var[k] < 0 ? " rows=" : var_name,
                             var[k] < 0 ? -var[k] : var[k], form);
                }
                if (!get(e->be, got, by, ny)) {
                    test_n_fail++;
                    continue;
                }
                compare(e->be->name, what, got, want, bound, ny, 0, 0, nmse_max);
                if (n_swar > 1 && sw == 0) memcpy(first, got, ny * sizeof(float));
                if (n_swar > 1 && sw == 1 && var[k] > 0) { // the SWAR form against dp4a, to the bit
                    size_t diff = 0;
                    for (size_t i = 0; i < ny; i++) diff += memcmp(&got[i], &first[i], sizeof(float)) != 0;
                    if (diff) {
                        printf("  FAIL %s %s: %zu of %zu outputs differ from the dp4a form's\n", e->be->name,
                               what, diff, ny);
                        test_n_fail++;
                    } else {
                        test_n_pass++;
                    }
                }
            }
        free(first);
#ifdef STRATA_GPU
        if (e->gpu)
            gpu_backend_set_matvec_split(e->be, 0), gpu_backend_set_matvec_rows(e->be, 0),
                gpu_backend_set_matvec_tokens(e->be, 0), gpu_backend_set_tensor_cores(e->be, -1),
                gpu_backend_set_tile(e->be, 0, 0), gpu_backend_set_matvec_swar(e->be, -1);
#endif
        if (e->be->matmul_add) { // y0 + x·wᵀ: the bound grows by the add's rounding
            float *y0 = xmalloc_f(ny), *want_add = xmalloc_f(ny);
            double *bound_add = st_xmalloc(sizeof(double) * ny);
            fill_normal(y0, ny);
            double ss = 0, ss_add = 0; // the NMSE bound rescaled to the new result's size
            for (size_t i = 0; i < ny; i++) {
                want_add[i] = y0[i] + want[i];
                bound_add[i] = bound[i] + fabs((double)want_add[i]) * 0x1p-22;
                ss += (double)want[i] * want[i];
                ss_add += (double)want_add[i] * want_add[i];
            }
            const double ss_bound = ss > 0 ? nmse_max * ss : nmse_max; // as matmul_bounds made it
            const double nmse_add = ss_add > 0 ? (ss_bound + 0x1p-44 * ss_add) / ss_add : ss_bound;
            e->be->upload(e->be, by, y0, ny * sizeof(float));
            e->be->matmul_add(e->be, &wb, bx, by, n);
            char what[128];
            snprintf(what, sizeof what, "matmul_add %s %lldx%lld n=%d", quant_name(t), (long long)rows,
                     (long long)cols, n);
            if (get(e->be, got, by, ny))
                compare(e->be->name, what, got, want_add, bound_add, ny, 0, 0, nmse_add);
            else
                test_n_fail++;
            free(y0), free(want_add), free(bound_add);
        }
        e->be->release(e->be, bx);
        e->be->release(e->be, by);
        e->be->release_weight(e->be, &wb);
    }
    free(bound);
    free(x);
    free(want);
    free(got);
    free((void *)w.data);
}

static void test_matmul(const struct be_entry *e) {
    // rows ragged against warps and blocks; n covers one token, the small
    // batches of the matrix × vector kernels (up to 32 on a GPU, in token
    // groups of 2, 4 or 8, the last one ragged) and the tiled batch product; rows of 23552 and 23808
    // on either side of the widest the SWAR form stages (CUDA), of 16384 and 20480 where it keeps 8
    // and 4 copies of the codebook table (16 at 4160 and below, 1 at 23552);
    // 8195 x 4096 (one token) has the rows and the chunks a lane for which
    // the automatic choice takes the rows form (gpu_pick_matvec)
    static const int64_t shapes32[][3] = {{1, 32, 1},     {7, 96, 1},    {33, 576, 1},     {300, 1024, 1},
                                          {77, 224, 2},   {77, 224, 3},  {40, 288, 5},     {40, 288, 8},
                                          {70, 320, 9},   {70, 320, 17}, {45, 256, 32},    {45, 256, 33},
                                          {130, 160, 67}, {65, 4160, 1}, {200, 1056, 130}, {3, 16384, 1},
                                          {2, 20480, 1},  {5, 23552, 1}, {3, 23808, 1},    {8195, 4096, 1}};
    static const int64_t shapes256[][3] = {
        {1, 256, 1},      {7, 512, 1},   {33, 768, 1},  {300, 1024, 1}, {77, 256, 3},   {40, 512, 8},
        {70, 512, 9},     {70, 512, 17}, {45, 512, 32}, {45, 512, 33},  {130, 256, 67}, {65, 4352, 1},
        {200, 1280, 100}, {3, 16384, 1}, {2, 20480, 1}, {5, 23552, 1},  {3, 23808, 1},  {8195, 4096, 1}};
    static const int64_t shapesf[][3] = {{1, 8, 1},    {7, 100, 1}, {33, 576, 1}, {300, 1024, 1},
                                         {77, 101, 3}, {40, 96, 8}, {70, 100, 9}, {130, 96, 67}};
    const int before = test_n_fail;
    int cases = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum ggml_type t = all_types[ti];
        const int64_t(*s)[3];
        size_t ns;
        if (is_float_type(t))
            s = shapesf, ns = sizeof shapesf / sizeof *shapesf;
        else if (quant_get(t)->block_size == 32)
            s = shapes32, ns = sizeof shapes32 / sizeof *shapes32;
        else
            s = shapes256, ns = sizeof shapes256 / sizeof *shapes256;
        for (size_t k = 0; k < ns; k++, cases++)
            test_matmul_case(e, t, s[k][0], s[k][1], (int)s[k][2], 1.0, false);
    }
    // weights beyond the half range either way (scales of about 2^10 and
    // 2^-23, the largest and smallest a block's half can hold; the tensor-core
    // tiles hold the weights as halves), and activations far apart from token
    // to token, through every form of the tiles
    static const enum ggml_type range_types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K,
                                                 GGML_TYPE_Q6_K};
    static const double gains[] = {0x1p16, 0x1p-17};
    for (size_t ti = 0; ti < sizeof range_types / sizeof *range_types; ti++)
        for (size_t g = 0; g < sizeof gains / sizeof *gains; g++, cases++)
            test_matmul_case(e, range_types[ti], 70, 512, 40, gains[g], false);
    // (the GPU's: the CPU backends' 8-bit blocks keep Q8_0's activation
    // scale as a half, so activations near 2^40 or 2^-40 leave its range)
    for (size_t ti = 0; e->gpu && ti < sizeof range_types / sizeof *range_types; ti++, cases++)
        test_matmul_case(e, range_types[ti], 70, 512, 40, 1.0, true);
    printf("  %s %s matmul: %d shapes over %zu types\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name,
           cases, N_TYPES);
}

// matmul_multi against the backend's own matmul of each weight: the same bits;
// then norm_matmul_multi (where the backend has it) against its own rms_norm
// and matmul_multi, the norm's output written apart from x and in place over
// it: the same bits again (rms_norm and matmul are held to the reference by
// their own tests). Weights with and without repacked CPU kernels (Q5_K, F16
// take the plain ops), several activation layouts at once.
static void test_matmul_multi(const struct be_entry *e) {
    if (!e->be->matmul_multi) {
        printf("  --   %s matmul_multi: none (the forward pass calls matmul for each weight)\n", e->be->name);
        return;
    }
    static const enum ggml_type sets[][3] = {
        {GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}, {GGML_TYPE_Q4_1, GGML_TYPE_Q4_1, GGML_TYPE_Q4_1},
        {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_F16},  {GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_K},
        {GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0}, {GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K}};
    static const int64_t rows[3] = {40, 17, 130};
    static const int ns[] = {1, 3, 8, 17, 40};
    static const char *const modes[] = {"matmul_multi", "norm_matmul_multi", "norm_matmul_multi in place"};
    const int n_modes = e->be->norm_matmul_multi ? 3 : 1;
#ifdef STRATA_GPU
    // one launch takes a set of weights of one type, its threads per row or
    // rows per warp picked for all of them: fixed here, so that each weight's
    // own product sums in the same order
    if (e->gpu) gpu_backend_set_matvec_split(e->be, 32), gpu_backend_set_matvec_rows(e->be, 2);
#endif
    const int before = test_n_fail;
    int cases = 0;
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++)
        for (int n_w = 1; n_w <= 3; n_w++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (int mode = 0; mode < n_modes; mode++, cases++) {
                    const int64_t cols = 512;
                    const int n = ns[ni];
                    const size_t nx = (size_t)n * cols;
                    struct weight g = make_weight(GGML_TYPE_F32, 1, cols), w[3];
                    const struct weight *wp[3];
                    float *by[3], *want[3];
                    float *x = xmalloc_f(nx), *want_h = xmalloc_f(nx),
                          *got = xmalloc_f(nx > 130 * (size_t)n ? nx : 130 * (size_t)n);
                    fill_normal(x, nx);
                    float *bx = put(e->be, x, nx * sizeof(float)), *bh = put(e->be, NULL, nx * sizeof(float));
                    bool ok = !e->be->prepare_weight(e->be, &g);
                    for (int i = 0; i < n_w; i++) {
                        w[i] = make_weight(sets[si][i], rows[i], cols);
                        wp[i] = &w[i];
                        ok = ok && !e->be->prepare_weight(e->be, &w[i]);
                        by[i] = put(e->be, NULL, (size_t)n * rows[i] * sizeof(float));
                        want[i] = xmalloc_f((size_t)n * rows[i]);
                    }
                    if (ok) { // the plain ops first
                        if (mode) {
                            e->be->rms_norm(e->be, &g, bx, bh, n, (int)cols, 1e-5f);
                            ok = get(e->be, want_h, bh, nx);
                            e->be->matmul_multi(e->be, wp, n_w, bh, by, n);
                            poison(e->be, bh, nx);
                        } else {
                            for (int i = 0; i < n_w; i++) e->be->matmul(e->be, &w[i], bx, by[i], n);
                        }
                        for (int i = 0; i < n_w; i++) {
                            ok = ok && get(e->be, want[i], by[i], (size_t)n * rows[i]);
                            poison(e->be, by[i], (size_t)n * rows[i]);
                        }
                    }
                    float *h = mode == 2 ? bx : bh;
                    if (ok) {
                        if (mode)
                            e->be->norm_matmul_multi(e->be, &g, 1e-5f, bx, h, (int)cols, wp, n_w, by, n);
                        else
                            e->be->matmul_multi(e->be, wp, n_w, bx, by, n);
                        if (mode && !(get(e->be, got, h, nx) && !memcmp(got, want_h, nx * sizeof(float)))) {
                            ok = false;
                            printf("  FAIL %s %s: n=%d: the norm's output is not rms_norm's bits\n",
                                   e->be->name, modes[mode], n);
                        }
                        for (int i = 0; ok && i < n_w; i++) {
                            ok = get(e->be, got, by[i], (size_t)n * rows[i]) &&
                                 !memcmp(got, want[i], sizeof(float) * (size_t)n * rows[i]);
                            if (!ok)
                                printf(
                                    "  FAIL %s %s: weight %d of %d (%s %lldx%lld), n=%d: not the plain ops' "
                                    "bits\n",
                                    e->be->name, modes[mode], i, n_w, quant_name(sets[si][i]),
                                    (long long)rows[i], (long long)cols, n);
                        }
                    } else {
                        printf("  FAIL %s %s: prepare_weight or download: %s\n", e->be->name, modes[mode],
                               st_last_error());
                    }
                    if (ok)
                        test_n_pass++;
                    else
                        test_n_fail++;
                    for (int i = 0; i < n_w; i++) {
                        e->be->release(e->be, by[i]);
                        e->be->release_weight(e->be, &w[i]);
                        free((void *)w[i].data);
                        free(want[i]);
                    }
                    e->be->release_weight(e->be, &g);
                    e->be->release(e->be, bx);
                    e->be->release(e->be, bh);
                    free((void *)g.data);
                    free(x);
                    free(want_h);
                    free(got);
                }
#ifdef STRATA_GPU
    if (e->gpu) gpu_backend_set_matvec_split(e->be, 0), gpu_backend_set_matvec_rows(e->be, 0);
#endif
    printf("  %s %s matmul_multi%s: %d cases\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name,
           n_modes > 1 ? " and norm_matmul_multi" : "", cases);
}

// A product of the output of an op, held to the product of a fresh copy of
// that output: the weight and the buffers are made before the op runs, since
// allocating or uploading drops a GPU backend's cached 8-bit activations.
struct fresh_product {
    struct weight w; // 40 rows
    float *bx2, *by; // the copy (n, w.cols) and the product (n, 40)
    int n;
};

static bool fresh_begin(const struct be_entry *e, struct fresh_product *f, enum ggml_type t, int cols,
                        int n) {
    f->w = make_weight(t, 40, cols);
    f->n = n;
    f->bx2 = put(e->be, NULL, sizeof(float) * (size_t)n * cols);
    f->by = put(e->be, NULL, sizeof(float) * (size_t)n * 40);
    return !e->be->prepare_weight(e->be, &f->w);
}

// Whether the product of f->w by the backend buffer bx (the op's output, n
// rows) has the bits of the product of a fresh copy of bx (one no op wrote,
// so quantized by the product itself). Releases what fresh_begin made.
static bool fresh_end(const struct be_entry *e, struct fresh_product *f, float *bx) {
    const size_t nn = (size_t)f->n * f->w.cols, ny = (size_t)f->n * 40;
    float *h = xmalloc_f(nn), *y1 = xmalloc_f(ny), *y2 = xmalloc_f(ny);
    e->be->matmul(e->be, &f->w, bx, f->by, f->n);
    bool ok = get(e->be, y1, f->by, ny) && get(e->be, h, bx, nn);
    e->be->upload(e->be, f->bx2, h, sizeof(float) * nn);
    e->be->matmul(e->be, &f->w, f->bx2, f->by, f->n);
    ok = ok && get(e->be, y2, f->by, ny) && !memcmp(y1, y2, sizeof(float) * ny);
    e->be->release(e->be, f->bx2), e->be->release(e->be, f->by);
    e->be->release_weight(e->be, &f->w);
    free((void *)f->w.data);
    free(h), free(y1), free(y2);
    return ok;
}

// A norm or a gated activation followed by a product of its output: where the
// backend writes the output's 8-bit form with it (the GPU), the product must
// give the bits it gives on a fresh copy of that output (quantized on its
// own); with disturb, an add into the output between the two must make the
// product quantize it again.
static bool fused_q8_case(const struct be_entry *e, bool glu, enum ggml_type t, int dim, int n,
                          bool disturb) {
    const size_t nn = (size_t)n * dim;
    struct weight wn = make_weight(GGML_TYPE_F32, 1, dim);
    float *a = xmalloc_f(nn), *b = xmalloc_f(nn);
    fill_normal(a, nn);
    fill_normal(b, nn);
    struct fresh_product f;
    bool ok = fresh_begin(e, &f, t, dim, n) && !e->be->prepare_weight(e->be, &wn);
    float *ba = put(e->be, a, sizeof(float) * nn), *bb = put(e->be, b, sizeof(float) * nn);
    float *bo = put(e->be, NULL, sizeof(float) * nn);
    if (glu)
        e->be->glu(e->be, GLU_SILU, ba, bb, bo, n, dim, dim);
    else
        e->be->rms_norm(e->be, &wn, ba, bo, n, dim, 1e-5f);
    if (disturb) e->be->add(e->be, bo, bb, (int64_t)nn);
    ok = fresh_end(e, &f, bo) && ok;
    if (!ok)
        printf("  FAIL %s %s then matmul %s dim=%d n=%d%s: not the bits of a fresh copy's product%s%s\n",
               e->be->name, glu ? "glu" : "rms_norm", quant_name(t), dim, n, disturb ? " (add between)" : "",
               st_last_error()[0] ? ": " : "", st_last_error());
    e->be->release(e->be, ba), e->be->release(e->be, bb), e->be->release(e->be, bo);
    e->be->release_weight(e->be, &wn);
    free((void *)wn.data);
    free(a), free(b);
    return ok;
}

static void test_fused_q8(const struct be_entry *e) {
    if (!e->gpu) { // the CPU backends quantize a product's input in the product
        printf("  --   %s rms_norm, glu then matmul: no fused quantization to check\n", e->be->name);
        return;
    }
    static const int shapes[][2] = {{96, 1}, {576, 3}, {4096, 1}, {12288, 2}, {512, 40}};
    const int before = test_n_fail;
    int cases = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int op = 0; op < 2; op++)
            for (int disturb = 0; disturb < 2; disturb++) {
                const int dim = shapes[k][0];
                const enum ggml_type t = dim % 256 ? GGML_TYPE_Q4_0 : GGML_TYPE_Q6_K;
                cases++;
                if (fused_q8_case(e, op == 1, t, dim, shapes[k][1], disturb))
                    test_n_pass++;
                else
                    test_n_fail++;
            }
    printf("  %s %s rms_norm, glu then matmul: %d cases\n", test_n_fail == before ? "ok  " : "FAIL",
           e->be->name, cases);
}

static void test_get_rows(const struct be_entry *e) {
    if (e->be->get_rows == ref->get_rows) { // the same code compared with itself proves nothing
        printf("  --   %s get_rows: the reference's own code (dequantize_row, tested in test_quant): "
               "not compared\n",
               e->be->name);
        return;
    }
    const int before = test_n_fail;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum ggml_type t = all_types[ti];
        const int64_t bs = quant_get(t)->block_size;
        const int64_t rows = 37, cols = bs == 1 ? 100 : (bs == 32 ? 224 : 512);
        struct weight w = make_weight(t, rows, cols);
        const int n = 5;
        const int32_t tok[5] = {0, 36, 5, 5, (int32_t)(rng_u64() % rows)};
        float *want = xmalloc_f((size_t)n * cols), *got = xmalloc_f((size_t)n * cols);
        ref->get_rows(ref, &w, tok, n, want);
        struct weight wb = w;
        if (e->be->prepare_weight(e->be, &wb)) {
            printf("  FAIL %s get_rows %s: %s\n", e->be->name, quant_name(t), st_last_error());
            test_n_fail++;
        } else {
            int32_t *bt = put(e->be, tok, sizeof tok);
            float *bo = put(e->be, NULL, sizeof(float) * (size_t)n * cols);
            poison(e->be, bo, (size_t)n * cols);
            e->be->get_rows(e->be, &wb, bt, n, bo);
            char what[64];
            snprintf(what, sizeof what, "get_rows %s %lldx%lld", quant_name(t), (long long)rows,
                     (long long)cols);
            if (get(e->be, got, bo, (size_t)n * cols))
                compare(e->be->name, what, got, want, NULL, (size_t)n * cols, 1e-6, 1e-6, 1e-12);
            else
                test_n_fail++;
            e->be->release(e->be, bt);
            e->be->release(e->be, bo);
            e->be->release_weight(e->be, &wb);
        }
        free(want);
        free(got);
        free((void *)w.data);
    }
    printf("  %s %s get_rows: %zu types\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name, N_TYPES);
}

static void test_rms_norm(const struct be_entry *e) {
    const int before = test_n_fail;
    // the GPU's forms: float4 rows kept in registers (4096; 64 as a per-head
    // norm), rows longer than its registers hold (12288), and scalar rows
    static const int dims[] = {1, 7, 64, 100, 576, 4096, 4097, 12288};
    for (size_t k = 0; k < sizeof dims / sizeof *dims; k++)
        for (int n = 1; n <= 3; n += 2) {
            const int dim = dims[k];
            struct weight w = make_weight(GGML_TYPE_F32, 1, dim);
            float *x = xmalloc_f((size_t)n * dim), *want = xmalloc_f((size_t)n * dim),
                  *got = xmalloc_f((size_t)n * dim);
            fill_normal(x, (size_t)n * dim);
            ref->rms_norm(ref, &w, x, want, n, dim, 1e-5f);
            struct weight wb = w;
            if (e->be->prepare_weight(e->be, &wb)) {
                printf("  FAIL %s rms_norm: %s\n", e->be->name, st_last_error());
                test_n_fail++;
            } else {
                float *bx = put(e->be, x, sizeof(float) * (size_t)n * dim);
                float *bo = put(e->be, NULL, sizeof(float) * (size_t)n * dim);
                poison(e->be, bo, (size_t)n * dim);
                e->be->rms_norm(e->be, &wb, bx, bo, n, dim, 1e-5f);
                char what[64];
                snprintf(what, sizeof what, "rms_norm dim=%d n=%d", dim, n);
                if (get(e->be, got, bo, (size_t)n * dim))
                    compare(e->be->name, what, got, want, NULL, (size_t)n * dim, 1e-6, 1e-5, 1e-10);
                else
                    test_n_fail++;
                e->be->release(e->be, bx);
                e->be->release(e->be, bo);
                e->be->release_weight(e->be, &wb);
            }
            free(x);
            free(want);
            free(got);
            free((void *)w.data);
        }
    printf("  %s %s rms_norm\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name);
}

// The RoPE variants every backend is checked on: NORM and NEOX, whole and
// partial rotation, frequency factors, linear scaling, YaRN and a magnitude factor.
static struct rope_params rope_variant(int kind, int hd, int partial, int variant, float *ff) {
    struct rope_params rp = {.kind = kind ? ROPE_KIND_NEOX : ROPE_KIND_NORM,
                             .n_dims = partial ? (hd / 2 + hd / 4) / 2 * 2 : hd,
                             .base = variant == 3 ? 1e6f : 10000.0f,
                             .freq_scale = 1.0f,
                             .attn_factor = 1.0f,
                             .beta_fast = 32.0f,
                             .beta_slow = 1.0f,
                             .n_ctx_orig = 4096};
    if (variant == 1) { // rope_freqs / LongRoPE factors, linear scaling
        for (int i = 0; i < rp.n_dims / 2; i++) ff[i] = (float)(1 + 3 * rng_unit());
        rp.freq_factors = ff;
        rp.freq_scale = 0.25f;
    } else if (variant == 2) { // YaRN, x4, with a magnitude factor
        rp.freq_scale = 0.25f;
        rp.ext_factor = 1.0f;
        rp.attn_factor = 0.9f;
    }
    return rp;
}

// The reference's RoPE against its closed form, computed here on its own: each
// pair's angle from the formula in long double, rotated as a complex number.
static void test_rope_reference(void) {
    const int before = test_n_fail;
    for (int kind = 0; kind < 2; kind++)
        for (int partial = 0; partial < 2; partial++)
            for (int variant = 0; variant < 4; variant++) {
                const int hd = 64, n_head = 2;
                const int32_t pos = variant == 0 ? 3 : 20000;
                float ff[64];
                const struct rope_params rp = rope_variant(kind, hd, partial, variant, ff);
                float x[128], want[128];
                fill_normal(x, 128);
                memcpy(want, x, sizeof x);
                const long double pi2 = 6.283185307179586476925L;
                const long double lb = 2 * logl(rp.base);
                const long double lo =
                    fmaxl(0, floorl(rp.n_dims * logl(rp.n_ctx_orig / (rp.beta_fast * pi2)) / lb));
                const long double hi =
                    fminl(rp.n_dims - 1, ceill(rp.n_dims * logl(rp.n_ctx_orig / (rp.beta_slow * pi2)) / lb));
                for (int h = 0; h < n_head; h++)
                    for (int i = 0; i < rp.n_dims / 2; i++) {
                        long double ext = pos * powl(rp.base, -(long double)(2 * i) / rp.n_dims);
                        if (rp.freq_factors) ext /= rp.freq_factors[i];
                        long double th = rp.freq_scale * ext, mag = rp.attn_factor;
                        if (rp.ext_factor) {
                            long double y = (i - lo) / fmaxl(0.001L, hi - lo);
                            const long double ramp = 1 - fminl(1, fmaxl(0, y));
                            th = th * (1 - ramp) + ext * ramp;
                            mag *= 1 + 0.1L * logl(1 / (long double)rp.freq_scale);
                        }
                        const int a = kind ? i : 2 * i, b = kind ? i + rp.n_dims / 2 : 2 * i + 1;
                        const long double re = x[h * hd + a], im = x[h * hd + b];
                        want[h * hd + a] = (float)(mag * (re * cosl(th) - im * sinl(th)));
                        want[h * hd + b] = (float)(mag * (re * sinl(th) + im * cosl(th)));
                    }
                float got[128];
                memcpy(got, x, sizeof x);
                const int32_t zero = 0;
                const struct batch_rows one = {1, &pos, &zero, &pos, &zero, pos + 1};
                ref->rope(ref, got, &one, n_head, hd, &rp);
                char what[96];
                snprintf(what, sizeof what, "rope closed form %s n_dims=%d variant=%d",
                         kind ? "neox" : "norm", rp.n_dims, variant);
                compare(ref->name, what, got, want, NULL, 128, 1e-6, 1e-5, 1e-11);
            }
    printf("  %s %s rope against its closed form\n", test_n_fail == before ? "ok  " : "FAIL", ref->name);
}

// Rows at consecutive positions from 0 and from 1000, and rows at random
// positions below 30000 (as the rows of several sequences come).
static void test_rope(const struct be_entry *e) {
    const int before = test_n_fail;
    static const int hds[] = {64, 128, 40};
    for (int kind = 0; kind < 2; kind++)
        for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
            for (int partial = 0; partial < 2; partial++)
                for (int variant = 0; variant < 4; variant++)
                    for (int pi = 0; pi < 3; pi++) {
                        const int hd = hds[hi], n_head = 1 + (int)(rng_u64() % 9);
                        const int n = pi == 1 ? 1 : 4, pos0 = pi == 1 ? 1000 : 0, seq = 0;
                        struct rows_case rc = rows_make(e->be, 1, &seq, pi == 2 ? NULL : &pos0, &n, 30000);
                        float ff[64];
                        const struct rope_params rp = rope_variant(kind, hd, partial, variant, ff);
                        const size_t nx = (size_t)n * n_head * hd;
                        float *x = xmalloc_f(nx), *want = xmalloc_f(nx), *got = xmalloc_f(nx);
                        fill_normal(x, nx);
                        memcpy(want, x, nx * sizeof(float));
                        ref->rope(ref, want, &rc.on_ref, n_head, hd, &rp);
                        float *bx = put(e->be, x, nx * sizeof(float));
                        e->be->rope(e->be, bx, &rc.on_be, n_head, hd, &rp);
                        char what[128];
                        snprintf(what, sizeof what,
                                 "rope %s hd=%d n_dims=%d variant=%d positions %d%s n=%d heads=%d",
                                 kind ? "neox" : "norm", hd, rp.n_dims, variant, rc.host[0],
                                 pi == 2 ? ".. random" : "..", n, n_head);
                        if (get(e->be, got, bx, nx))
                            compare(e->be->name, what, got, want, NULL, nx, 1e-6, 1e-5, 1e-10);
                        else
                            test_n_fail++;
                        e->be->release(e->be, bx);
                        rows_free(e->be, &rc);
                        free(x);
                        free(want);
                        free(got);
                    }
    printf("  %s %s rope\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name);
}

// One sequence, and three in one batch (their spans out of cache order, at
// different positions), each in its own region of the caches.
// rope_store (q and k rotated, k and v stored) against the reference's rope,
// rope and kv_store: two sequences' rows, caches filled beforehand so that a
// store to a wrong row shows.
static void test_rope_store(const struct be_entry *e) {
    if (!e->be->rope_store) {
        printf("  --   %s rope_store: none (the forward pass calls rope, rope, kv_store)\n", e->be->name);
        return;
    }
    const int before = test_n_fail;
    static const int hds[] = {64, 40}, groups[][2] = {{8, 2}, {3, 3}, {4, 1}};
    const enum ggml_type kv_default = e->be->kv_type;
    int cases = 0;
    for (int ti = 0; ti < 2; ti++) {
        const enum ggml_type kt = ti ? GGML_TYPE_F16 : GGML_TYPE_F32;
        if (!kv_use(e, kt)) continue;
        const size_t es = kv_size(kt);
        for (int kind = 0; kind < 2; kind++)
            for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
                for (int partial = 0; partial < 2; partial++)
                    for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++, cases++) {
                        const int hd = hds[hi], n_head = groups[gi][0], n_head_kv = groups[gi][1], n_ctx = 64;
                        const int seq[2] = {1, 0}, pos0[2] = {5, 0}, ns[2] = {3, 1}, n = 4;
                        struct rows_case rc = rows_make(e->be, 2, seq, pos0, ns, n_ctx);
                        float ff[64];
                        const struct rope_params rp = rope_variant(kind, hd, partial, 2 * (int)(gi % 2), ff);
                        const int kv_dim = n_head_kv * hd;
                        const size_t nq = (size_t)n * n_head * hd, nk = (size_t)n * kv_dim,
                                     nc = 2 * (size_t)n_ctx * kv_dim;
                        float *q = xmalloc_f(nq), *k = xmalloc_f(nk), *v = xmalloc_f(nk);
                        float *kc = xmalloc_f(nc), *vc = xmalloc_f(nc), *got = xmalloc_f(nc);
                        fill_normal(q, nq), fill_normal(k, nk), fill_normal(v, nk);
                        fill_normal(kc, nc), fill_normal(vc, nc);
                        // the caches as the type holds them: the reference's copies, and the uploads'
                        void *wkc = kv_from_floats(kt, kc, nc), *wvc = kv_from_floats(kt, vc, nc);
                        float *bq = put(e->be, q, nq * sizeof(float)),
                              *bk = put(e->be, k, nk * sizeof(float));
                        float *bv = put(e->be, v, nk * sizeof(float));
                        void *hkc = kv_from_floats(kt, kc, nc), *hvc = kv_from_floats(kt, vc, nc);
                        void *bkc = put(e->be, hkc, nc * es), *bvc = put(e->be, hvc, nc * es);
                        // the reference on copies: the uploads may still be reading q, k, the caches
                        float *wq = xmalloc_f(nq), *wk = xmalloc_f(nk);
                        memcpy(wq, q, nq * sizeof(float)), memcpy(wk, k, nk * sizeof(float));
                        ref->rope(ref, wq, &rc.on_ref, n_head, hd, &rp);
                        ref->rope(ref, wk, &rc.on_ref, n_head_kv, hd, &rp);
                        ref->kv_store(ref, wkc, wvc, wk, v, &rc.on_ref, kv_dim);
                        e->be->rope_store(e->be, bq, bk, bv, bkc, bvc, &rc.on_be, n_head, n_head_kv, hd, &rp);
                        char what[128];
                        snprintf(what, sizeof what, "rope_store %s hd=%d n_dims=%d heads %d/%d, %s cache: ",
                                 kind ? "neox" : "norm", hd, rp.n_dims, n_head, n_head_kv, quant_name(kt));
                        const size_t wl = strlen(what);
                        snprintf(what + wl, sizeof what - wl, "q");
                        if (get(e->be, got, bq, nq))
                            compare(e->be->name, what, got, wq, NULL, nq, 1e-6, 1e-5, 1e-10);
                        else
                            test_n_fail++;
                        // a rotated key may round to the neighbouring half: within the bound, widened
                        static const char *parts[] = {"k cache", "v cache"};
                        const void *bufs[] = {bkc, bvc}, *wants[] = {wkc, wvc};
                        void *raw = st_xmalloc(nc * es);
                        float *want = xmalloc_f(nc);
                        for (int b = 0; b < 2; b++) {
                            snprintf(what + wl, sizeof what - wl, "%s", parts[b]);
                            kv_to_floats(kt, wants[b], want, nc);
                            if (get_bytes(e->be, raw, bufs[b], nc * es)) {
                                kv_to_floats(kt, raw, got, nc);
                                compare(e->be->name, what, got, want, NULL, nc, 1e-6,
                                        es == 2 ? 1.0 / 1024 : 1e-5, 1e-10);
                            } else {
                                test_n_fail++;
                            }
                        }
                        free(raw), free(want), free(hkc), free(hvc);
                        e->be->release(e->be, bq), e->be->release(e->be, bk), e->be->release(e->be, bv);
                        e->be->release(e->be, bkc), e->be->release(e->be, bvc);
                        rows_free(e->be, &rc);
                        free(q), free(k), free(v), free(kc), free(vc), free(got);
                        free(wq), free(wk), free(wkc), free(wvc);
                    }
    }
    kv_use(e, kv_default);
    printf("  %s %s rope_store: %d cases\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name, cases);
}

// Per-element bounds for attention outputs where the GPU's tensor-core form
// computes them (gpu_backend_attention_mma: the rows of runs it takes; the
// other rows get the float tolerance atol_rel·rms + rtol·|want| of the other
// cases), from a float64 pass over the same inputs (kf, vf: the caches
// widened). That form rounds each query, times the scale and a power of two,
// to a half (relative u = 2^-11, or 2^-25 of 2^e absolute where it falls
// below the half range, 2^e ≤ 2^-14 of its largest |scale·q|), and each
// softmax weight to a half (relative u, or 2^-25 absolute); the tile sums are
// float (products of halves exact; tensor cores may truncate, so 2^-23 an
// addition). A score s_j = scale·q·k_j then errs by at most
//   δ_j = (1.001u + hd·2^-23)·T_j + 2^-39·A·K_j (+ 2^-24|s_j| + 2^-22·cap capped)
// with T_j = scale·Σ|q_d·k_jd|, A = max|scale·q|, K_j = Σ|k_jd|; a float
// cache's keys and values are rounded to halves too (round_kv), which adds
// u·T_j + 2^-25·scale·Σ|q_d| to δ_j, and u to γ and 2^-25 to the output's
// bound below. The weight w_j = e^(s_j - M) is off by the factor e^(±δ_j)
// times (1 ± 2^-22) for expf, (1 ± u) for the half and (1 ± nt·2^-22) for the
// rescales of nt tiles, a relative ρ_j, plus 2^-24 absolute (the half's
// subnormals and expf's argument; the largest weight is 1). The output is the
// weighted mean of the values, so that with W = Σ w_j and D_j = |v_jd - out_d|:
//   |Δout_d| ≤ (Σ ρ_j·w_j·D_j + 2^-24·Σ D_j) / (W·(1 - ρmax) - n·2^-24)
//             + γ·Σ w_j|v_jd| / W · (1 + ρmax) / (1 - ρmax) + (N + 3)·2^-24·|out_d|,
// γ = (N + 2nt + 2)·2^-23 for the float sums over the N = 64·nt keys staged.
static void attn_mma_bounds(struct backend *be, const float *q, const float *kf, const float *vf,
                            bool round_kv, const float *want, const struct batch_rows *r, int n_head,
                            int n_head_kv, int hd, const struct attn_params *ap, double atol_rel, double rtol,
                            double *bound) {
#ifdef STRATA_GPU
    const size_t nq = (size_t)r->n * n_head * hd;
    double ss = 0;
    for (size_t i = 0; i < nq; i++) ss += (double)want[i] * want[i];
    const double rms = sqrt(ss / (double)nq), u = 0x1p-11, group = n_head / n_head_kv;
    const int kv_dim = n_head_kv * hd;
    double *sj = st_xmalloc(sizeof(double) * (size_t)(r->n_kv + 1) * 3); // scores, weights, ρ_j
    double *wj = sj + r->n_kv + 1, *rj = wj + r->n_kv + 1;
    for (int t = 0; t < r->n;) {
        const int len = batch_run_length(r, t);
        const bool mma = gpu_backend_attention_mma(be, len, hd);
        const int nt = (r->host_pos[t + len - 1] + 1 + 63) / 64 + 1; // the tiles of any block of the run
        const double gam = (64.0 * nt + 2 * nt + 2) * 0x1p-23;
        for (int i = t; i < t + len; i++)
            for (int h = 0; h < n_head; h++) {
                const float *qi = q + ((size_t)i * n_head + h) * hd;
                double *bo = bound + ((size_t)i * n_head + h) * hd;
                const float *wo = want + ((size_t)i * n_head + h) * hd;
                if (!mma) {
                    for (int d = 0; d < hd; d++) bo[d] = atol_rel * rms + rtol * fabs(wo[d]) + FLT_MIN;
                    continue;
                }
                const int p = r->host_pos[i],
                          lo = ap->window > 0 && p - ap->window + 1 > 0 ? p - ap->window + 1 : 0;
                const int kvh = (int)(h / group);
                double amax = 0, q1 = 0;
                for (int d = 0; d < hd; d++) {
                    amax = fmax(amax, fabs((double)ap->scale * qi[d]));
                    q1 += fabs((double)ap->scale * qi[d]);
                }
                double M = -INFINITY, rmax = 0;
                for (int j = lo; j <= p; j++) {
                    const float *kj = kf + ((size_t)r->host_base[i] + j) * kv_dim + (size_t)kvh * hd;
                    double s = 0, T = 0, K = 0;
                    for (int d = 0; d < hd; d++) {
                        s += (double)qi[d] * kj[d];
                        T += fabs((double)qi[d] * kj[d]);
                        K += fabs((double)kj[d]);
                    }
                    s *= ap->scale, T *= ap->scale;
                    double delta = (1.001 * u + hd * 0x1p-23) * T + 0x1p-39 * amax * K;
                    if (round_kv) delta += u * T + 0x1p-25 * q1;
                    if (ap->softcap > 0) {
                        delta += 0x1p-24 * fabs(s) + 0x1p-22 * ap->softcap;
                        s = ap->softcap * tanh(s / ap->softcap);
                    }
                    sj[j - lo] = s;
                    rj[j - lo] = exp(delta) * (1 + 0x1p-22) * (1 + u) * (1 + nt * 0x1p-22) - 1;
                    rmax = fmax(rmax, rj[j - lo]);
                    M = fmax(M, s);
                }
                const int n = p - lo + 1;
                double W = 0;
                for (int j = 0; j < n; j++) W += wj[j] = exp(sj[j] - M);
                for (int d = 0; d < hd; d++) {
                    double num = 0, absd = 0, wv = 0;
                    for (int j = 0; j < n; j++) {
                        const double v =
                            vf[((size_t)r->host_base[i] + lo + j) * kv_dim + (size_t)kvh * hd + d];
                        const double D = fabs(v - wo[d]);
                        num += rj[j] * wj[j] * D;
                        absd += D;
                        wv += wj[j] * fabs(v);
                    }
                    const double den = W * (1 - rmax) - n * 0x1p-24;
                    // inputs for which this analysis gives no bound (none of the test's) fail the case
                    const double g = gam + (round_kv ? u : 0);
                    bo[d] = den > 0 ? (num + 0x1p-24 * absd) / den + g * wv / W * (1 + rmax) / (1 - rmax) +
                                          (64.0 * nt + 3) * 0x1p-24 * fabs(wo[d]) + (round_kv ? 0x1p-25 : 0)
                                    : 0;
                }
            }
        t += len;
    }
    free(sj);
#else
    (void)be, (void)q, (void)kf, (void)vf, (void)round_kv, (void)want, (void)r, (void)n_head, (void)n_head_kv,
        (void)hd;
    (void)ap, (void)atol_rel, (void)rtol, (void)bound;
#endif
}

static void test_kv_store_attention(const struct be_entry *e) {
    const int before = test_n_fail;
    static const int cfg[][3] = {{9, 3, 64}, {4, 4, 128}, {8, 2, 80}, {2, 1, 256},
                                 {6, 2, 32}, {17, 1, 36}, {4, 2, 30}};
    static const int pos0s[] = {0, 7, 300, 1100};
    // attention options: plain; a soft-cap that bites (scores reach several
    // times the cap) with an unusual scale; sliding windows shorter and longer
    // than the context
    static const struct {
        float scale_mul, softcap;
        int window;
    } opts[] = {{1, 0, 0}, {2.5f, 1.5f, 0}, {1, 0, 5}, {1, 0, 600}, {1, 30, 1}};
    const enum ggml_type kv_default = e->be->kv_type;
    char types[32] = "";
    for (int ti = 0; ti < 2; ti++) {
        const enum ggml_type kt = ti ? GGML_TYPE_F16 : GGML_TYPE_F32;
        if (!kv_use(e, kt)) continue;
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s", types[0] ? ", " : "",
                 quant_name(kt));
        const size_t es = kv_size(kt);
        for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++)
            for (size_t pi = 0; pi < sizeof pos0s / sizeof *pos0s; pi++)
                for (int ni = 0; ni < 3; ni++) // a decode token, short spans, prompt chunks (GPU tiles)
                    for (int multi = 0; multi < 2; multi++) {
                        const int n = (int[]){1, 5, 40}[ni];
                        const int n_head = cfg[ci][0], n_head_kv = cfg[ci][1], hd = cfg[ci][2];
                        const int kv_dim = n_head_kv * hd, n_span = multi ? 3 : 1;
                        const int seq[3] = {multi ? 2 : 0, 0, 1};
                        const int pos0[3] = {pos0s[pi], pos0s[(pi + 1) % 4], pos0s[(pi + 3) % 4]};
                        const int cnt[3] = {n, 1, n};
                        // each region: 3 rows past its last position hold NaN: reading them is a bug
                        int n_ctx = 0, len[3] = {0, 0, 0}; // region size; rows each region holds
                        for (int s = 0; s < n_span; s++) {
                            len[seq[s]] = pos0[s] + cnt[s];
                            if (len[seq[s]] + 3 > n_ctx) n_ctx = len[seq[s]] + 3;
                        }
                        struct rows_case rc = rows_make(e->be, n_span, seq, pos0, cnt, n_ctx);
                        const int rows = rc.on_ref.n;
                        const size_t nc = (size_t)n_span * n_ctx * kv_dim, nq = (size_t)rows * n_head * hd;
                        const size_t nkv = (size_t)rows * kv_dim;
                        float *kc = xmalloc_f(nc), *vc = xmalloc_f(nc), *q = xmalloc_f(nq);
                        float *k = xmalloc_f(nkv), *v = xmalloc_f(nkv);
                        float *want = xmalloc_f(nq), *got = xmalloc_f(nq), *gotc = xmalloc_f(nc),
                              *wantc = xmalloc_f(nc);
                        void *raw = st_xmalloc(nc * es);
                        float *kcf = xmalloc_f(nc), *vcf = xmalloc_f(nc); // the caches as stored, widened
                        double *abound = st_xmalloc(sizeof(double) * nq);
                        fill_normal(kc, nc);
                        fill_normal(vc, nc);
                        for (int r = 0; r < n_span; r++)
                            for (size_t i = (size_t)len[r] * kv_dim; i < (size_t)n_ctx * kv_dim; i++)
                                kc[(size_t)r * n_ctx * kv_dim + i] = vc[(size_t)r * n_ctx * kv_dim + i] = NAN;
                        fill_normal(q, nq);
                        fill_normal(k, nkv);
                        fill_normal(v, nkv);
                        // the caches as the type holds them: the reference's, and the uploads' copies
                        void *hkc = kv_from_floats(kt, kc, nc), *hvc = kv_from_floats(kt, vc, nc);
                        void *ukc = kv_from_floats(kt, kc, nc), *uvc = kv_from_floats(kt, vc, nc);
                        void *bkc = put(e->be, ukc, nc * es), *bvc = put(e->be, uvc, nc * es);
                        float *bk = put(e->be, k, nkv * sizeof(float)),
                              *bv = put(e->be, v, nkv * sizeof(float));
                        float *bq = put(e->be, q, nq * sizeof(float)),
                              *bo = put(e->be, NULL, nq * sizeof(float));
                        ref->kv_store(ref, hkc, hvc, k, v, &rc.on_ref, kv_dim);
                        e->be->kv_store(e->be, bkc, bvc, bk, bv, &rc.on_be, kv_dim);
                        char what[192];
                        snprintf(what, sizeof what, "kv_store pos0=%d n=%d kv_dim=%d sequences=%d, %s cache",
                                 pos0[0], n, kv_dim, n_span, quant_name(kt));
                        const void *caches[2][2] = {{bkc, hkc}, {bvc, hvc}};
                        for (int kvi = 0; kvi < 2; kvi++) {
                            if (!get_bytes(e->be, raw, caches[kvi][0], nc * es)) {
                                test_n_fail++;
                                continue;
                            }
                            kv_to_floats(kt, raw, gotc, nc);
                            kv_to_floats(kt, caches[kvi][1], wantc, nc);
                            for (int r = 0; r < n_span; r++) {
                                const size_t off = (size_t)r * n_ctx * kv_dim;
                                compare(e->be->name, what, gotc + off, wantc + off, NULL,
                                        (size_t)len[r] * kv_dim, 0, 0, 0);
                            }
                        }
                        kv_to_floats(kt, hkc, kcf, nc); // with the batch's rows stored
                        kv_to_floats(kt, hvc, vcf, nc);
                        for (size_t oi = 0; oi < sizeof opts / sizeof *opts; oi++) {
                            const struct attn_params ap = {opts[oi].scale_mul / sqrtf((float)hd),
                                                           opts[oi].softcap, opts[oi].window};
                            // the output product follows, where the GPU writes the output's 8-bit form with it
                            const bool product = e->gpu && oi == 0 && n_head * hd % 32 == 0;
                            struct fresh_product f;
                            const bool made =
                                product && fresh_begin(e, &f, GGML_TYPE_Q4_0, n_head * hd, rows);
                            ref->attention(ref, q, hkc, hvc, want, &rc.on_ref, n_head, n_head_kv, hd, &ap);
                            // GPU prompt runs: the float tiles, then the tensor-core form
                            const int forms = e->gpu && n >= 8 ? 2 : 1;
                            for (int form = 0; form < forms; form++) {
#ifdef STRATA_GPU
                                if (forms == 2) gpu_backend_set_tensor_cores(e->be, form);
#endif
                                const bool mma = forms == 2 && form == 1;
                                poison(e->be, bo, nq);
                                e->be->attention(e->be, bq, bkc, bvc, bo, &rc.on_be, n_head, n_head_kv, hd,
                                                 &ap);
                                snprintf(what, sizeof what,
                                         "attention heads=%d/%d hd=%d pos0=%d n=%d sequences=%d scale=%.3g "
                                         "cap=%g window=%d, %s cache%s",
                                         n_head, n_head_kv, hd, pos0[0], n, n_span, ap.scale, ap.softcap,
                                         ap.window, quant_name(kt), mma ? ", tensor cores" : "");
                                if (!get(e->be, got, bo, nq)) {
                                    test_n_fail++;
                                } else if (mma) {
                                    attn_mma_bounds(e->be, q, kcf, vcf, kt == GGML_TYPE_F32, want, &rc.on_ref,
                                                    n_head, n_head_kv, hd, &ap, 2e-5, 1e-4, abound);
                                    compare(e->be->name, what, got, want, abound, nq, 0, 0, INFINITY);
                                } else {
                                    compare(e->be->name, what, got, want, NULL, nq, 2e-5, 1e-4, 1e-9);
                                }
                            }
#ifdef STRATA_GPU
                            if (forms == 2) gpu_backend_set_tensor_cores(e->be, -1);
#endif
                            if (product) {
                                if (fresh_end(e, &f, bo) && made) {
                                    test_n_pass++;
                                } else {
                                    test_n_fail++;
                                    printf(
                                        "  FAIL %s %s, then matmul: not the bits of a fresh copy's product\n",
                                        e->be->name, what);
                                }
                            }
                        }
                        void *bufs[] = {bkc, bvc, bk, bv, bq, bo};
                        for (size_t i = 0; i < 6; i++) e->be->release(e->be, bufs[i]);
                        rows_free(e->be, &rc);
                        free(kc), free(vc), free(q), free(k), free(v), free(want), free(got), free(gotc);
                        free(wantc), free(raw), free(hkc), free(hvc), free(ukc), free(uvc);
                        free(kcf), free(vcf), free(abound);
                    }
    }
    kv_use(e, kv_default);
    printf("  %s %s kv_store, attention (scale, soft-cap, sliding window, several sequences; %s caches%s)\n",
           test_n_fail == before ? "ok  " : "FAIL", e->be->name, types,
           e->gpu ? "; prompt runs in float and on tensor-core tiles" : "");
}

// Per-element bounds for act(g)·u against the double reference, and the NMSE
// they allow. Both activations are x / (1 + e^a), the exponent a (−x for SiLU,
// −2√(2/π)(x + 0.044715x³) for GELU) computed in float with a few roundings,
// each within eps/2 of its value: an error δ in a moves the result by
// δ·e^a/(1 + e^a) of itself. Where a is large (GELU of x = −7.5 has a ≈ 42)
// that is a conditioning no float implementation escapes, so the bound holds
// 4·eps·|a|·e^a/(1 + e^a) beside the rounding of the rest (rtol), and the NMSE
// allowance grows by the same terms' share of the reference's energy.
static double glu_bounds(enum glu_act act, const float *g, const float *want, int rows, int dim, int stride,
                         double *bound) {
    const double rtol = 4e-6, atol_rel = 1e-7, nmse_base = 1e-11;
    const size_t n = (size_t)rows * dim;
    double ss_ref = 0, ss_cond = 0;
    for (size_t i = 0; i < n; i++) ss_ref += (double)want[i] * want[i];
    const double rms = n ? sqrt(ss_ref / (double)n) : 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < dim; c++) {
            const size_t i = (size_t)r * dim + c;
            const double x = g[(size_t)r * stride + c];
            const double a = act == GLU_SILU ? -x : -2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x);
            const double cond = 4.0 * FLT_EPSILON * fabs(a) / (1.0 + exp(-a)) * fabs(want[i]);
            bound[i] = atol_rel * rms + rtol * fabs(want[i]) + cond + FLT_MIN;
            ss_cond += cond * cond;
        }
    return nmse_base + (ss_ref > 0 ? ss_cond / ss_ref : 0);
}

// Runs one element-wise op on be and on the reference over the same inputs and
// compares; op 0 add, 1 scale, 2 softcap, 3 add_bias, 4 glu SiLU, 5 glu GELU.
static void elementwise_case(const struct be_entry *e, int op, int rows, int dim, int stride) {
    static const char *names[] = {"add", "scale", "softcap", "add_bias", "glu silu", "glu gelu"};
    const bool glu = op >= 4;
    const size_t n_in = glu ? (size_t)rows * stride : (size_t)rows * dim, n_out = (size_t)rows * dim;
    float *a = xmalloc_f(n_in), *b = xmalloc_f(n_in), *want = xmalloc_f(n_in), *got = xmalloc_f(n_in);
    fill_normal(a, n_in);
    fill_normal(b, n_in);
    for (size_t i = 0; i < n_in; i++) a[i] *= 4; // reach the tails of tanh and the activations
    struct weight bias = make_weight(GGML_TYPE_F32, 1, dim);
    const float sc = (float)(0.1 + 3 * rng_unit()), cap = (float)(0.5 + 4 * rng_unit());
    memcpy(want, a, sizeof(float) * n_in);
    float *ba = put(e->be, a, sizeof(float) * n_in), *bb = put(e->be, b, sizeof(float) * n_in);
    float *bo = glu ? put(e->be, NULL, sizeof(float) * n_out) : ba;
    const enum glu_act act = op == 4 ? GLU_SILU : GLU_GELU;
    if (glu) poison(e->be, bo, n_out);
    int ok_prep = 1;
    switch (op) {
    case 0:
        ref->add(ref, want, b, (int64_t)n_out), e->be->add(e->be, ba, bb, (int64_t)n_out);
        break;
    case 1:
        ref->scale(ref, want, (int64_t)n_out, sc), e->be->scale(e->be, ba, (int64_t)n_out, sc);
        break;
    case 2:
        ref->softcap(ref, want, (int64_t)n_out, cap), e->be->softcap(e->be, ba, (int64_t)n_out, cap);
        break;
    case 3:
        ref->add_bias(ref, &bias, want, rows, dim);
        if ((ok_prep = !e->be->prepare_weight(e->be, &bias))) e->be->add_bias(e->be, &bias, ba, rows, dim);
        break;
    default:
        ref->glu(ref, act, a, b, want, rows, dim, stride);
        e->be->glu(e->be, act, ba, bb, bo, rows, dim, stride);
    }
    char what[96];
    snprintf(what, sizeof what, "%s rows=%d dim=%d stride=%d", names[op], rows, dim, stride);
    if (!ok_prep) {
        printf("  FAIL %s %s: %s\n", e->be->name, what, st_last_error());
        test_n_fail++;
    } else if (get(e->be, got, bo, n_out)) {
        if (glu) {
            double *bound = st_xmalloc((sizeof *bound) * n_out);
            const double nmse_max = glu_bounds(act, a, want, rows, dim, stride, bound);
            compare(e->be->name, what, got, want, bound, n_out, 0, 0, nmse_max);
            free(bound);
        } else { // float ops: a few roundings, and tanhf against double
            compare(e->be->name, what, got, want, NULL, n_out, 1e-7, op == 0 || op == 3 ? 1e-7 : 4e-6, 1e-11);
        }
    } else {
        test_n_fail++;
    }
    if (op == 3) e->be->release_weight(e->be, &bias);
    e->be->release(e->be, ba);
    e->be->release(e->be, bb);
    if (glu) e->be->release(e->be, bo);
    free(a), free(b), free(want), free(got), free((void *)bias.data);
}

static void test_elementwise(const struct be_entry *e) {
    const int before = test_n_fail;
    static const int shapes[][3] = {{1, 1, 1},       {3, 31, 31},  {5, 1000, 1000},
                                    {7, 4099, 4099}, {4, 96, 192}, {2, 37, 100}};
    for (int op = 0; op < 6; op++)
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
            if (op >= 4 || shapes[k][1] == shapes[k][2])
                elementwise_case(e, op, shapes[k][0], shapes[k][1], shapes[k][2]);
    // glu in place (out = g, the forward pass's use)
    {
        const int rows = 3, dim = 517;
        const size_t nn = (size_t)rows * dim;
        float *g = xmalloc_f(nn), *u = xmalloc_f(nn), *want = xmalloc_f(nn), *got = xmalloc_f(nn);
        fill_normal(g, nn);
        fill_normal(u, nn);
        ref->glu(ref, GLU_SILU, g, u, want, rows, dim, dim);
        float *bg = put(e->be, g, sizeof(float) * nn), *bu = put(e->be, u, sizeof(float) * nn);
        e->be->glu(e->be, GLU_SILU, bg, bu, bg, rows, dim, dim);
        double *bound = st_xmalloc((sizeof *bound) * nn);
        const double nmse_max = glu_bounds(GLU_SILU, g, want, rows, dim, dim, bound);
        if (get(e->be, got, bg, nn))
            compare(e->be->name, "glu silu in place", got, want, bound, nn, 0, 0, nmse_max);
        else
            test_n_fail++;
        free(bound);
        e->be->release(e->be, bg);
        e->be->release(e->be, bu);
        free(g), free(u), free(want), free(got);
    }
    // the far tails, one element a case (no other element's size in the bound):
    // exponents up to and past where e^a overflows a float (88.72), whose
    // results are tiny normal floats, subnormals or 0
    {
        static const float silu_g[] = {-80, -85, -88, -88.7f, -89, -90, -95, -100, -104, -110, -200};
        static const float gelu_g[] = {-9, -9.6f, -10, -10.05f, -10.1f, -10.2f, -10.5f, -11, -13, -20, -100};
        for (int act = 0; act < 2; act++)
            for (int k = 0; k < 11; k++)
                for (int sign = 0; sign < 2; sign++) {
                    const float g = act ? gelu_g[k] : silu_g[k], u = sign ? -3.0f : 3.0f;
                    float want, got, *bg = put(e->be, &g, sizeof g), *bu = put(e->be, &u, sizeof u);
                    float *bo = put(e->be, NULL, sizeof(float));
                    ref->glu(ref, act ? GLU_GELU : GLU_SILU, &g, &u, &want, 1, 1, 1);
                    e->be->glu(e->be, act ? GLU_GELU : GLU_SILU, bg, bu, bo, 1, 1, 1);
                    char what[64];
                    snprintf(what, sizeof what, "glu %s of %g times %g", act ? "gelu" : "silu", (double)g,
                             (double)u);
                    double bound;
                    const double nmse_max = glu_bounds(act ? GLU_GELU : GLU_SILU, &g, &want, 1, 1, 1, &bound);
                    if (get(e->be, &got, bo, 1))
                        compare(e->be->name, what, &got, &want, &bound, 1, 0, 0, nmse_max);
                    else
                        test_n_fail++;
                    e->be->release(e->be, bg), e->be->release(e->be, bu), e->be->release(e->be, bo);
                }
    }
    printf("  %s %s add, scale, softcap, add_bias, glu\n", test_n_fail == before ? "ok  " : "FAIL",
           e->be->name);
}

// --- mixture of experts ---------------------------------------------------------------

static void test_moe_route(const struct be_entry *e) {
    const int before = test_n_fail;
    static const int cfg[][2] = {{1, 1}, {4, 2}, {8, 2}, {60, 4}, {128, 8}, {16, 16}};
    for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++)
        for (int gating = 0; gating < 2; gating++)
            for (int norm = 0; norm < 2; norm++) {
                const int ne = cfg[ci][0], k = cfg[ci][1], n = 1 + (int)(rng_u64() % 9);
                const struct moe_params mp = {ne, k, gating ? MOE_GATING_SIGMOID : MOE_GATING_SOFTMAX,
                                              norm != 0, norm ? 1.0f : (float)(0.5 + rng_unit())};
                const size_t nl = (size_t)n * ne, nk = (size_t)n * k;
                float *l = xmalloc_f(nl), *ww = xmalloc_f(nk), *gw = xmalloc_f(nk);
                int32_t *wi = st_xmalloc(sizeof(int32_t) * nk), *gi = st_xmalloc(sizeof(int32_t) * nk);
                fill_normal(l, nl);
                for (size_t i = 0; i < nl; i++) l[i] *= 3;
                ref->moe_route(ref, l, n, &mp, wi, ww);
                float *bl = put(e->be, l, sizeof(float) * nl), *bw = put(e->be, NULL, sizeof(float) * nk);
                int32_t *bi = put(e->be, NULL, sizeof(int32_t) * nk);
                poison(e->be, bw, nk);
                e->be->moe_route(e->be, bl, n, &mp, bi, bw);
                e->be->download(e->be, gi, bi, sizeof(int32_t) * nk);
                char what[96];
                snprintf(what, sizeof what, "moe_route experts=%d k=%d n=%d %s%s", ne, k, n,
                         gating ? "sigmoid" : "softmax", norm ? " norm" : "");
                if (get(e->be, gw, bw, nk)) {
                    size_t bad = 0;
                    for (size_t i = 0; i < nk; i++) bad += gi[i] != wi[i];
                    if (bad) {
                        printf("  FAIL %s %s: %zu of %zu expert ids differ (first [0] got %d want %d)\n",
                               e->be->name, what, bad, nk, gi[0], wi[0]);
                        test_n_fail++;
                    } else {
                        compare(e->be->name, what, gw, ww, NULL, nk, 1e-7, 2e-6, 1e-11);
                    }
                } else {
                    test_n_fail++;
                }
                e->be->release(e->be, bl), e->be->release(e->be, bw), e->be->release(e->be, bi);
                free(l), free(ww), free(gw), free(wi), free(gi);
            }
    printf("  %s %s moe_route\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name);
}

// y (n, k, rows) = expert products, checked per (token, slot) with the
// matmul bounds of that expert's rows.
static void test_matmul_id_case(const struct be_entry *e, enum ggml_type t, int ne, int64_t rows,
                                int64_t cols, int n, int k, int x_slots) {
    struct weight w = make_weight(t, rows * ne, cols);
    w.rows = rows;
    w.n_expert = ne;
    const size_t nx = (size_t)n * x_slots * cols, ny = (size_t)n * k * rows;
    float *x = xmalloc_f(nx), *want = xmalloc_f(ny), *got = xmalloc_f(ny);
    int32_t *ids = st_xmalloc(sizeof(int32_t) * (size_t)n * k);
    fill_normal(x, nx);
    for (int i = 0; i < n; i++) // k distinct experts per token, as routing gives
        for (int s = 0; s < k; s++) {
            int32_t id;
            bool dup;
            do {
                id = (int32_t)(rng_u64() % (uint64_t)ne);
                dup = false;
                for (int r = 0; r < s; r++) dup |= ids[i * k + r] == id;
            } while (dup);
            ids[i * k + s] = id;
        }
    ref->matmul_id(ref, &w, x, x_slots, ids, k, want, n);
    // bounds: each (token, slot) is a one-token product with that expert's rows
    double *bound = st_xmalloc(sizeof(double) * ny), nmse_sum = 0, ss_ref = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < k; s++) {
            struct weight we = w;
            we.n_expert = 1;
            we.data = (const char *)w.data + (size_t)ids[i * k + s] * rows * w.row_bytes;
            const float *xr = x + ((size_t)i * x_slots + (x_slots > 1 ? s : 0)) * cols;
            const float *yr = want + ((size_t)i * k + s) * rows;
            double nm;
            double *b = matmul_bounds(&we, xr, 1, id_act_block(e, t), yr, &nm);
            double ssr = 0;
            for (int64_t r = 0; r < rows; r++) ssr += (double)yr[r] * yr[r];
            nmse_sum += nm * ssr; // back to an absolute sum of squares
            ss_ref += ssr;
            memcpy(bound + ((size_t)i * k + s) * rows, b, sizeof(double) * (size_t)rows);
            free(b);
        }
    const double nmse_max = ss_ref > 0 ? nmse_sum / ss_ref : nmse_sum;
    char what[128];
    snprintf(what, sizeof what, "matmul_id %s experts=%d %lldx%lld n=%d k=%d x_slots=%d", quant_name(t), ne,
             (long long)rows, (long long)cols, n, k, x_slots);
    if (e->be->prepare_weight(e->be, &w)) {
        printf("  FAIL %s %s: prepare_weight: %s\n", e->be->name, what, st_last_error());
        test_n_fail++;
    } else {
        float *bx = put(e->be, x, nx * sizeof(float)), *by = put(e->be, NULL, ny * sizeof(float));
        int32_t *bi = put(e->be, ids, sizeof(int32_t) * (size_t)n * k);
        poison(e->be, by, ny);
        e->be->matmul_id(e->be, &w, bx, x_slots, bi, k, by, n);
        if (get(e->be, got, by, ny))
            compare(e->be->name, what, got, want, bound, ny, 0, 0, nmse_max);
        else
            test_n_fail++;
        e->be->release(e->be, bx), e->be->release(e->be, by), e->be->release(e->be, bi);
        e->be->release_weight(e->be, &w);
    }
    free(bound), free(x), free(want), free(got), free(ids), free((void *)w.data);
}

static void test_moe(const struct be_entry *e) {
    test_moe_route(e);
    const int before = test_n_fail;
    static const enum ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_Q8_0,
                                           GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int64_t c = quant_get(types[ti])->block_size == 256 ? 512 : 96;
        test_matmul_id_case(e, types[ti], 8, 40, c, 1, 2, 1); // decode, gate/up
        test_matmul_id_case(e, types[ti], 8, 40, c, 1, 2, 2); // decode, down
        test_matmul_id_case(e, types[ti], 4, 33, c, 7, 2, 1); // a batch
        test_matmul_id_case(e, types[ti], 16, 17, c, 5, 4, 4);
    }
    // moe_combine, and in place for one slot (the shared expert's gate)
    for (int k = 1; k <= 8; k *= 2) {
        const int n = 5, dim = 300;
        const size_t ny = (size_t)n * k * dim, nw = (size_t)n * k, no = (size_t)n * dim;
        float *y = xmalloc_f(ny), *w = xmalloc_f(nw), *want = xmalloc_f(no), *got = xmalloc_f(no);
        fill_normal(y, ny);
        fill_normal(w, nw);
        ref->moe_combine(ref, y, w, n, k, dim, want);
        float *by = put(e->be, y, sizeof(float) * ny), *bw = put(e->be, w, sizeof(float) * nw);
        float *bo = k == 1 ? by : put(e->be, NULL, sizeof(float) * no);
        if (k > 1) poison(e->be, bo, no);
        e->be->moe_combine(e->be, by, bw, n, k, dim, bo);
        char what[64];
        snprintf(what, sizeof what, "moe_combine k=%d%s", k, k == 1 ? " in place" : "");
        if (get(e->be, got, bo, no))
            compare(e->be->name, what, got, want, NULL, no, 1e-6, 1e-6, 1e-11);
        else
            test_n_fail++;
        e->be->release(e->be, by), e->be->release(e->be, bw);
        if (k > 1) e->be->release(e->be, bo);
        free(y), free(w), free(want), free(got);
    }
    printf("  %s %s matmul_id, moe_combine\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name);
}

#ifdef STRATA_GPU
// The GPU backend's variant setters refuse what no kernel takes, with a
// message, and leave the backend working (its choice restored).
static void test_gpu_setters(const struct be_entry *e) {
    const int before = test_n_fail;
    static const int bad_tpr[] = {-1, 1, 8, 48, 512}, bad_rpw[] = {-1, 3, 8}, bad_mma[] = {-2, 2};
    static const int bad_tpg[] = {-1, 1, 3, 16}, bad_tt[] = {-1, 32, 96, 256};
    for (size_t i = 0; i < sizeof bad_tt / sizeof *bad_tt; i++) {
        if (gpu_backend_set_tile(e->be, 0, bad_tt[i]) != -1 || !strstr(st_last_error(), "tile tokens")) {
            printf("  FAIL tile tokens %d accepted or refused without its message\n", bad_tt[i]);
            test_n_fail++;
        }
        if (gpu_backend_set_tile(e->be, bad_tt[i], 64) != -1 || !strstr(st_last_error(), "tile rows")) {
            printf("  FAIL tile rows %d accepted or refused without its message\n", bad_tt[i]);
            test_n_fail++;
        }
    }
    for (size_t i = 0; i < sizeof bad_tpr / sizeof *bad_tpr; i++)
        if (gpu_backend_set_matvec_split(e->be, bad_tpr[i]) != -1 ||
            !strstr(st_last_error(), "threads per row")) {
            printf("  FAIL threads per row %d accepted or refused without its message\n", bad_tpr[i]);
            test_n_fail++;
        }
    for (size_t i = 0; i < sizeof bad_rpw / sizeof *bad_rpw; i++)
        if (gpu_backend_set_matvec_rows(e->be, bad_rpw[i]) != -1 ||
            !strstr(st_last_error(), "rows per warp")) {
            printf("  FAIL rows per warp %d accepted or refused without its message\n", bad_rpw[i]);
            test_n_fail++;
        }
    for (size_t i = 0; i < sizeof bad_tpg / sizeof *bad_tpg; i++)
        if (gpu_backend_set_matvec_tokens(e->be, bad_tpg[i]) != -1 ||
            !strstr(st_last_error(), "tokens per group")) {
            printf("  FAIL tokens per group %d accepted or refused without its message\n", bad_tpg[i]);
            test_n_fail++;
        }
    for (size_t i = 0; i < sizeof bad_mma / sizeof *bad_mma; i++)
        if (gpu_backend_set_tensor_cores(e->be, bad_mma[i]) != -1 ||
            !strstr(st_last_error(), "tensor-core mode")) {
            printf("  FAIL tensor-core mode %d accepted or refused without its message\n", bad_mma[i]);
            test_n_fail++;
        }
    for (size_t i = 0; i < sizeof bad_mma / sizeof *bad_mma; i++)
        if (gpu_backend_set_matvec_swar(e->be, bad_mma[i]) != -1 || !strstr(st_last_error(), "SWAR mode")) {
            printf("  FAIL SWAR mode %d accepted or refused without its message\n", bad_mma[i]);
            test_n_fail++;
        }
    if (gpu_backend_set_matvec_split(e->be, 0) || gpu_backend_set_matvec_rows(e->be, 0) ||
        gpu_backend_set_matvec_tokens(e->be, 0) || gpu_backend_set_tensor_cores(e->be, -1) ||
        gpu_backend_set_tile(e->be, 0, 0) || gpu_backend_set_matvec_swar(e->be, -1)) {
        printf("  FAIL the automatic choices refused: %s\n", st_last_error());
        test_n_fail++;
    }
    test_n_pass += test_n_fail == before;
    printf("  %s %s variant setters refuse bad values\n", test_n_fail == before ? "ok  " : "FAIL",
           e->be->name);
}
#endif

// The types the benchmarks time, F16 last (its prompts take another path).
static const enum ggml_type perf_types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q8_0,   GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,   GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS, GGML_TYPE_F16};
#define PERF_N_TYPES (sizeof perf_types / sizeof *perf_types)

// One benchmark of --perf-only: "TYPE:ROWSxCOLS" (one token), "TYPE:ROWSxCOLSxN"
// (a prompt product of N tokens, 33 to 4096) or "TYPE:ROWSxCOLS/N" (a decode
// batch of N tokens, 2 to 32), any shape whose columns are a multiple of
// the type's block (at most 2^20 rows, 2^16 columns, 2^29 elements).
struct perf_key {
    enum ggml_type type;
    int64_t shape[2]; // rows, cols
    int n;            // tokens
    char kind;        // 'v' one token, 'p' prompt, 'b' decode batch
};

// Parses s into k; false, with the reason printed, where s is no such key.
static bool perf_key_parse(const char *s, struct perf_key *k) {
    const char *colon = strchr(s, ':');
    size_t ti = PERF_N_TYPES;
    for (size_t t = 0; colon && t < PERF_N_TYPES; t++)
        if (strlen(quant_name(perf_types[t])) == (size_t)(colon - s) &&
            !strncmp(s, quant_name(perf_types[t]), (size_t)(colon - s)))
            ti = t;
    if (ti == PERF_N_TYPES) {
        printf("--perf-only %s: no type the benchmarks time before ':' (", s);
        for (size_t t = 0; t < PERF_N_TYPES; t++) printf("%s%s", t ? ", " : "", quant_name(perf_types[t]));
        printf("), or \"batch\"\n");
        return false;
    }
    char *e;
    const long long rows = strtoll(colon + 1, &e, 10);
    long long cols = 0, n = 1;
    bool ok = e != colon + 1 && *e == 'x' && rows >= 1 && rows <= 1 << 20;
    if (ok) {
        const char *c = e + 1;
        cols = strtoll(c, &e, 10);
        ok = e != c && cols >= 1 && cols <= 1 << 16;
    }
    k->kind = 'v';
    if (ok && (*e == 'x' || *e == '/')) {
        const char *c = e + 1;
        k->kind = *e == 'x' ? 'p' : 'b';
        n = strtoll(c, &e, 10);
        ok = e != c && (k->kind == 'p' ? n >= 33 && n <= 4096 : n >= 2 && n <= 32);
    }
    ok = ok && *e == 0 && rows * cols <= 1 << 29;
    if (!ok) {
        printf(
            "--perf-only %s: not TYPE:ROWSxCOLS, TYPE:ROWSxCOLSxN (N 33 to 4096) or TYPE:ROWSxCOLS/N (N 2 to "
            "32), rows 1 to 2^20, columns 1 to 2^16, at most 2^29 elements\n",
            s);
        return false;
    }
    k->type = perf_types[ti];
    if (cols % quant_get(k->type)->block_size) {
        printf("--perf-only %s: %s rows take a multiple of %lld columns\n", s, quant_name(k->type),
               (long long)quant_get(k->type)->block_size);
        return false;
    }
    if (k->kind == 'p' && k->type == GGML_TYPE_F16) {
        printf("--perf-only %s: F16 prompts take the float path, which this benchmark does not time\n", s);
        return false;
    }
    k->shape[0] = rows, k->shape[1] = cols, k->n = (int)n;
    return true;
}

#ifdef STRATA_GPU
static void test_argmax(const struct be_entry *e) {
    const int before = test_n_fail;
    static const int sizes[] = {1, 7, 49152, 100000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int tie = 0; tie < 2; tie++) {
            const int n = sizes[k];
            float *x = xmalloc_f((size_t)n);
            fill_normal(x, (size_t)n);
            if (tie && n > 1) { // the maximum twice: the lower index wins
                const int i = (int)(rng_u64() % (uint64_t)(n - 1));
                x[i] = x[i + 1 + (int)(rng_u64() % (uint64_t)(n - 1 - i))] = 100.0f;
            }
            const int32_t want = sampler_argmax(x, n);
            float *bx = put(e->be, x, sizeof(float) * (size_t)n);
            int32_t *bo = put(e->be, NULL, sizeof(int32_t));
            int32_t got = -1;
            gpu_backend_argmax(e->be, bx, n, bo);
            e->be->download(e->be, &got, bo, sizeof got);
            if (e->be->sync(e->be) || got != want) {
                printf("  FAIL %s argmax n=%d tie=%d: got %d want %d %s\n", e->be->name, n, tie, got, want,
                       st_last_error());
                test_n_fail++;
            } else {
                test_n_pass++;
            }
            e->be->release(e->be, bx);
            e->be->release(e->be, bo);
            free(x);
        }
    printf("  %s %s argmax\n", test_n_fail == before ? "ok  " : "FAIL", e->be->name);
}

// --- benchmarks ------------------------------------------------------------------------

// Copies of w prepared on be into ws, with pointers in wp: want of them, or
// (want 0) as many as fill 240 MB (4× a 60 MB cache, so every pass reads
// device memory; 2 to 16). Sets *copies and returns how many were prepared
// (fewer after a failure). Each copy after the first has its own host data:
// a backend keeps one device copy of each host array (a tied output shares
// the embedding's), so copies of one array would all read the same device
// memory, much of it from the cache. release_copies gives them back.
static int prepare_copies(struct backend *be, const struct weight *w, int want, struct weight ws[16],
                          struct weight *wp[16], int *copies) {
    const double bytes = (double)w->rows * (double)w->row_bytes;
    int c = want ? want : (int)ceil(240e6 / bytes);
    *copies = c < 2 ? 2 : c > 16 ? 16 : c;
    int prepared = 0;
    for (; prepared < *copies; prepared++) {
        ws[prepared] = *w;
        wp[prepared] = &ws[prepared];
        if (prepared > 0) {
            void *data = malloc((size_t)bytes);
            if (!data) break;
            memcpy(data, w->data, (size_t)bytes);
            ws[prepared].data = data;
        }
        if (be->prepare_weight(be, &ws[prepared])) {
            if (prepared > 0) free((void *)ws[prepared].data);
            break;
        }
    }
    return prepared;
}

// Releases the n copies prepare_copies prepared and the host data of those after the first.
static void release_copies(struct backend *be, struct weight ws[16], int n) {
    for (int c = 0; c < n; c++) {
        be->release_weight(be, &ws[c]);
        if (c > 0) free((void *)ws[c].data);
    }
}

// The prompt products: a 512-token product of each type and shape, as
// operations a second against the half-precision tile-product rate measured first.
// key: one type, shape and token count (kind 'p'), or NULL for the whole table.
static void perf_prompt(struct backend *be, const struct perf_key *key, const enum ggml_type *types,
                        size_t n_types) {
    static const int64_t all_shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
    const int64_t(*shapes)[2] = all_shapes;
    size_t n_shapes = sizeof all_shapes / sizeof *all_shapes;
    int N = 512;
    if (key && key->kind != 'p') return;
    if (key) types = &key->type, n_types = 1, shapes = &key->shape, n_shapes = 1, N = key->n;
    double peak = 0;
    if (gpu_bench_mma(be, 15, &peak)) {
        printf("  FAIL tensor-core rate: %s\n", st_last_error());
        test_n_fail++;
        return;
    }
    printf("\nhalf-precision tile-product ceiling: %.0f TFLOPS (st_mma_f16_k16 from registers, median of "
           "15)\n",
           peak);
    printf("matrix x matrix, %d tokens (the prompt products; 2 copies of the weights rotating; median of\n"
           "10 passes): the backend's tile, then us at each tile of rows x tokens\n"
           "| type | rows x cols | us | TOPS | of ceiling | 64x64 | 64x128 | 128x64 | 128x128 |\n"
           "|---|---|---|---|---|---|---|---|---|\n",
           N);
    const int64_t max_cols = key ? key->shape[1] : 14336;
    float *x = xmalloc_f((size_t)N * (size_t)max_cols);
    fill_normal(x, (size_t)N * (size_t)max_cols);
    for (size_t ti = 0; ti < n_types; ti++)
        for (size_t si = 0; si < n_shapes; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            char name[64];
            snprintf(name, sizeof name, "%s:%lldx%lldx%d", quant_name(types[ti]), (long long)rows,
                     (long long)cols, N);
            struct weight w = make_weight(types[ti], rows, cols);
            struct weight ws[16], *wp[16];
            int copies;
            const int prepared = prepare_copies(be, &w, 2, ws, wp, &copies);
            float *bx = prepared == 2 ? put(be, x, sizeof(float) * (size_t)N * (size_t)cols) : NULL;
            static const int tiles[5][2] = {{0, 0}, {64, 64}, {64, 128}, {128, 64}, {128, 128}};
            for (int k = 0; k < 5; k++) {
                double sec = 0;
                gpu_backend_set_tile(be, tiles[k][0], tiles[k][1]);
                if (!bx || gpu_bench_matmul(be, wp, 2, bx, N, 10, false, &sec)) {
                    printf("%s  FAIL prompt bench %s: %s\n", k ? "\n" : "", name, st_last_error());
                    test_n_fail++;
                    break;
                }
                const double tops = 2.0 * (double)rows * (double)cols * N / sec / 1e12;
                if (k == 0)
                    printf("| %s | %lldx%lld | %.1f | %.1f | %.1f%% |", quant_name(types[ti]),
                           (long long)rows, (long long)cols, sec * 1e6, tops, 100.0 * tops / peak);
                else
                    printf(" %.1f |%s", sec * 1e6, k == 4 ? "\n" : "");
            }
            gpu_backend_set_tile(be, 0, 0);
            if (bx) be->release(be, bx);
            release_copies(be, ws, prepared);
            free((void *)w.data);
        }
    free(x);
}

// The decode batches' products (several sequences, n tokens ≤ 32) over every
// rows-per-warp × tokens-per-group form and the backend's own choice, at the
// shapes of the test models' decode steps (a set such as Q, K and V timed as
// one matrix of all its rows). Weights rotate as in the matrix × vector table
// (up to 16 copies: the smallest stay in the L2, as in a small model's step);
// the pass replayed as a graph. key: one type, shape and n (kind 'b'), or
// NULL for the whole table.
static void perf_batch(struct backend *be, const struct perf_key *key) {
    static const enum ggml_type all_types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q4_K,
                                               GGML_TYPE_Q6_K};
    static const int64_t all_shapes[][2] = {{576, 576},   {960, 576},   {3072, 576},   {576, 1536},
                                            {2048, 2048}, {3072, 2048}, {16384, 2048}, {2048, 8192},
                                            {4096, 4096}, {6144, 4096}, {28672, 4096}, {4096, 14336}};
    static const int all_ns[] = {8, 16, 32};
    static const int rpws[] = {1, 2, 4}, tpgs[] = {2, 4, 8};
    const enum ggml_type *types = all_types;
    const int64_t(*shapes)[2] = all_shapes;
    const int *ns = all_ns;
    size_t n_types = sizeof all_types / sizeof *all_types, n_shapes = sizeof all_shapes / sizeof *all_shapes,
           n_ns = sizeof all_ns / sizeof *all_ns;
    if (key && key->kind != 'b') return;
    if (key) types = &key->type, shapes = &key->shape, ns = &key->n, n_types = n_shapes = n_ns = 1;
    printf("\nmatrix x several tokens (decode batches), us a product, graph replay, median of 30; columns:\n"
           "the backend's choice, then rows per warp / tokens per group\n| type | rows x cols | n | auto |");
    for (size_t r = 0; r < 3; r++)
        for (size_t t = 0; t < 3; t++) printf(" %d/%d |", rpws[r], tpgs[t]);
    printf("\n|---|---|---|---|");
    for (int k = 0; k < 9; k++) printf("---|");
    printf("\n");
    const int64_t max_cols = key ? key->shape[1] : 14336;
    float *x = xmalloc_f((size_t)32 * (size_t)max_cols);
    fill_normal(x, (size_t)32 * (size_t)max_cols);
    for (size_t ti = 0; ti < n_types; ti++)
        for (size_t si = 0; si < n_shapes; si++)
            for (size_t ni = 0; ni < n_ns; ni++) {
                const int64_t rows = shapes[si][0], cols = shapes[si][1];
                const int n = ns[ni];
                if (cols % quant_get(types[ti])->block_size) continue;
                char name[64];
                snprintf(name, sizeof name, "%s:%lldx%lld/%d", quant_name(types[ti]), (long long)rows,
                         (long long)cols, n);
                struct weight w = make_weight(types[ti], rows, cols);
                struct weight ws[16];
                struct weight *wp[16];
                int copies;
                const int prepared = prepare_copies(be, &w, 0, ws, wp, &copies);
                float *bx = prepared == copies ? put(be, x, sizeof(float) * (size_t)n * (size_t)cols) : NULL;
                printf("| %s | %lldx%lld | %d |", quant_name(types[ti]), (long long)rows, (long long)cols, n);
                for (int k = 0; k < 10 && bx; k++) {
                    gpu_backend_set_matvec_rows(be, k ? rpws[(k - 1) / 3] : 0);
                    gpu_backend_set_matvec_tokens(be, k ? tpgs[(k - 1) % 3] : 0);
                    double sec = 0;
                    if (gpu_bench_matmul(be, wp, copies, bx, n, 30, true, &sec)) {
                        printf(" FAIL |");
                        printf("  FAIL batch bench %s: %s\n", name, st_last_error());
                        test_n_fail++;
                        break;
                    }
                    printf(" %.2f |", sec * 1e6);
                }
                printf("\n");
                if (!bx) {
                    printf("  FAIL batch bench %s: %s\n", name, st_last_error());
                    test_n_fail++;
                }
                gpu_backend_set_matvec_rows(be, 0);
                gpu_backend_set_matvec_tokens(be, 0);
                if (bx) be->release(be, bx);
                release_copies(be, ws, prepared);
                free((void *)w.data);
            }
    free(x);
}

// The matrix × vector table: every type and shape (or the key's) over every
// threads-a-row choice, the rows form and the SWAR form, against the ceiling.
static void perf_matvec(struct backend *be, const struct perf_key *key, double ceiling) {
    printf("matrix x vector, weights rotating over >= 240 MB; median of 30 passes; launched one by\n"
           "one on a stream, and the same pass replayed as a graph\n");
    printf("| type | rows x cols | MB | threads/row | stream us | GB/s | of ceiling | graph us | GB/s "
           "| of ceiling |\n|---|---|---|---|---|---|---|---|---|---|\n");
    static const int64_t all_shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
    const enum ggml_type *types = perf_types;
    const int64_t(*shapes)[2] = all_shapes;
    size_t n_types = PERF_N_TYPES, n_shapes = sizeof all_shapes / sizeof *all_shapes;
    if (key) types = &key->type, shapes = &key->shape, n_types = n_shapes = 1;
    static const int tprs[] = {0, 16, 32, 64, 128, 256};
    const int64_t max_cols = key ? key->shape[1] : 14336;
    float *x = xmalloc_f((size_t)max_cols);
    fill_normal(x, (size_t)max_cols);
    for (size_t ti = 0; ti < n_types; ti++)
        for (size_t si = 0; si < n_shapes; si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            char name[64];
            snprintf(name, sizeof name, "%s:%lldx%lld", quant_name(types[ti]), (long long)rows,
                     (long long)cols);
            struct weight w = make_weight(types[ti], rows, cols);
            const double bytes = (double)rows * (double)w.row_bytes;
            struct weight ws[16];
            struct weight *wp[16];
            int copies;
            const int prepared = prepare_copies(be, &w, 0, ws, wp, &copies);
            if (prepared < copies) {
                printf("  FAIL prepare: %s\n", st_last_error());
                test_n_fail++;
                release_copies(be, ws, prepared);
                free((void *)w.data);
                free(x);
                return;
            }
            float *bx = put(be, x, sizeof(float) * (size_t)cols);
            // every threads-per-row choice with the device's dot product, the
            // rows form with 1, 2 and 4 rows a warp (quantized types), then the
            // automatic choice with the SWAR form
            const int n_tpr = (int)(sizeof tprs / sizeof *tprs), n_rows = types[ti] == GGML_TYPE_F16 ? 0 : 3;
            for (int k = 0; k <= n_tpr + n_rows; k++) {
                double st = 0, sg = 0;
                const int rpw = k > n_tpr ? 1 << (k - n_tpr - 1) : 0; // the rows form's rows a warp
                gpu_backend_set_matvec_split(be, k < n_tpr ? tprs[k] : 0);
                gpu_backend_set_matvec_rows(be, rpw);
                gpu_backend_set_matvec_swar(be, k == n_tpr ? 1 : -1);
                if (gpu_bench_matmul(be, wp, copies, bx, 1, 30, false, &st) ||
                    gpu_bench_matmul(be, wp, copies, bx, 1, 30, true, &sg)) {
                    printf("  FAIL bench %s: %s\n", name, st_last_error());
                    test_n_fail++;
                    continue;
                }
                char tpr[16];
                snprintf(tpr, sizeof tpr,
                         rpw          ? "rows %d"
                         : k == n_tpr ? "auto, swar"
                         : tprs[k]    ? "%d"
                                      : "auto",
                         rpw ? rpw : tprs[k % n_tpr]);
                printf("| %s | %lldx%lld | %.1f | %s | %.2f | %.0f | %.1f%% | %.2f | %.0f | %.1f%% |\n",
                       quant_name(types[ti]), (long long)rows, (long long)cols, bytes / 1e6, tpr, st * 1e6,
                       bytes / st / 1e9, 100.0 * bytes / st / 1e9 / ceiling, sg * 1e6, bytes / sg / 1e9,
                       100.0 * bytes / sg / 1e9 / ceiling);
            }
            gpu_backend_set_matvec_rows(be, 0);
            gpu_backend_set_matvec_swar(be, -1);
            gpu_backend_set_matvec_split(be, 0);
            be->release(be, bx);
            release_copies(be, ws, copies);
            free((void *)w.data);
        }
    free(x);
}

// The benchmarks: the read ceiling, then the matrix × vector table, the
// prompt products' and the decode batches' (batch_only: that one alone), or
// with a key the one benchmark it names.
static void perf(struct backend *be, const struct perf_key *key, bool batch_only) {
    double ceiling = 0;
    if (gpu_bench_read_bw(be, (size_t)2 << 30, 15, &ceiling)) {
        printf("  FAIL read bandwidth: %s\n", st_last_error());
        test_n_fail++;
        return;
    }
    printf("read-bandwidth ceiling: %.0f GB/s (streaming read of 2 GiB, 16-byte loads, median of 15)\n",
           ceiling);
    if (batch_only) {
        perf_batch(be, NULL);
        return;
    }
    if (!key || key->kind == 'v') perf_matvec(be, key, ceiling);
    perf_prompt(be, key, perf_types, PERF_N_TYPES - 1); // no F16: its prompts take another path
    perf_batch(be, key);
}
#endif

static const char *const groups[] = {"get_rows",    "rms_norm", "matmul",     "matmul_multi",
                                     "fused_q8",    "rope",     "rope_store", "attention",
                                     "elementwise", "moe",      "gpu"};

static void print_groups(void) {
    printf("groups:");
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) printf(" %s", groups[g]);
    printf("\n");
}

// Whether group name is in the comma-separated list (every group without one).
static bool group_on(const char *list, const char *name) {
    if (!list) return true;
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}

int main(int argc, char **argv) {
    bool want_perf = false, require_gpu = false, gpu_only = false, batch_only = false;
    const char *perf_only = NULL, *only = NULL;
    struct perf_key key = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--perf"))
            want_perf = true;
        else if (!strcmp(argv[i], "--require-gpu"))
            require_gpu = true;
        else if (!strcmp(argv[i], "--gpu-only"))
            gpu_only = true;
        else if (!strcmp(argv[i], "--perf-only") && i + 1 < argc) {
            want_perf = true, perf_only = argv[++i];
            batch_only = !strcmp(perf_only, "batch");
            if (!batch_only && !perf_key_parse(perf_only, &key)) return 2;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            printf("usage: %s [--perf | --perf-only TYPE:ROWSxCOLS[xN|/N] | --perf-only batch] "
                   "[--require-gpu] [--gpu-only] "
                   "[--only "
                   "GROUP,...]\n",
                   argv[0]);
            print_groups();
            return 2;
        }
    }
    for (const char *p = only; p && *p;) { // every name must be a group: a typo must not pass as nothing run
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        bool known = false;
        for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
            known |= strlen(groups[g]) == len && !strncmp(p, groups[g], len);
        if (!known) {
            printf("--only: unknown group \"%.*s\"; ", (int)len, p);
            print_groups();
            return 2;
        }
        p = end ? end + 1 : p + len;
    }
    const char *seed_env = getenv("STRATA_SEED");
    const uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                                : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    printf("seed %llu (STRATA_SEED=%llu repeats this run)\n", (unsigned long long)seed,
           (unsigned long long)seed);

    ref = backend_cpu_ref_init();
    if (!gpu_only) bes[n_bes++] = (struct be_entry){backend_cpu_init(2), false};
#ifdef STRATA_GPU
    char warn[512];
    struct backend *gpu = backend_gpu_init(0, warn, sizeof warn);
    if (gpu) {
        if (warn[0]) printf("warning: %s\n", warn);
        bes[n_bes++] = (struct be_entry){gpu, true};
    } else if (require_gpu) {
        printf("  FAIL no GPU backend: %s\n", st_last_error());
        test_n_fail++;
    } else {
        printf("  skip gpu: %s\n", st_last_error());
        test_n_skip++; // the GPU backend's cases count as one skipped test
    }
#else
    if (require_gpu) {
        printf("  FAIL --require-gpu: this build has no GPU backend (build with mk/gpu.mk)\n");
        test_n_fail++;
    }
#endif
    if (want_perf) {
#ifdef STRATA_GPU
        for (int b = 0; b < n_bes; b++)
            if (bes[b].gpu) perf(bes[b].be, perf_only && !batch_only ? &key : NULL, batch_only);
#else
        (void)perf_only, (void)batch_only;
        printf("--perf times the GPU backend, which this build does not have\n");
#endif
    } else {
        if (group_on(only, "rope")) test_rope_reference();
        for (int b = 0; b < n_bes; b++) {
            const struct be_entry *e = &bes[b];
            printf("== %s against %s\n", e->be->name, ref->name);
            if (group_on(only, "get_rows")) test_get_rows(e);
            if (group_on(only, "rms_norm")) test_rms_norm(e);
            if (group_on(only, "matmul")) test_matmul(e);
            if (group_on(only, "matmul_multi")) test_matmul_multi(e);
            if (group_on(only, "fused_q8")) test_fused_q8(e);
            if (group_on(only, "rope")) test_rope(e);
            if (group_on(only, "rope_store")) test_rope_store(e);
            if (group_on(only, "attention")) test_kv_store_attention(e);
            if (group_on(only, "elementwise")) test_elementwise(e);
            if (group_on(only, "moe")) test_moe(e);
#ifdef STRATA_GPU
            if (e->gpu && group_on(only, "gpu")) test_argmax(e), test_gpu_setters(e);
#endif
        }
    }
    for (int b = 0; b < n_bes; b++) bes[b].be->free(bes[b].be);
    ref->free(ref);
    (void)test_checks_failed; // cases are counted directly, not through CHECK
    TEST_END();
}
