// test_quant.c: the quant table, dequantize/quantize of every supported type and
// the dot products, against independent references:
//   * tests/fixtures/quant_cases.bin (tests/reference/quant_reference.py): the gguf
//     Python package's dequantized values and quantized bytes, ggml's own quantizers
//     and dot products (via ggml-python) and the gguf type table;
//   * derived error bounds for quantize -> dequantize round trips;
//   * a double-precision dot of the dequantized rows for vec_dot (fast and scalar);
//   * an ldexp model and exhaustive checks for the half conversions of util.c.
// Random inputs use a fresh seed each run (printed; STRATA_SEED repeats one).
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/quant.h"
#include "format/quant_impl.h"
#include "test.h"
#include "util.h"
#include "cpu/vec_dot_simd.h"

#define FIXTURE "tests/fixtures/quant_cases.bin"
#define U32 5.9604644775390625e-08 // 2^-24, float32 unit roundoff

// --- random numbers ---------------------------------------------------------------------

static uint64_t rng_state;

static uint64_t rng_u64(void) { // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1.0p-53; }
static double rng_normal(void) {
    const double u = rng_unit() + 0x1.0p-60, v = rng_unit();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static int rng_int(int lo, int hi) { return lo + (int)(rng_u64() % (uint64_t)(hi - lo + 1)); }

// Random floats: blocks of 32 with scales spanning 2^-8..2^8, a few outliers.
static void random_floats(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        const double scale = exp2(rng_unit() * 16 - 8);
        for (int64_t i = b; i < b + 32 && i < n; i++)
            x[i] = (float)(rng_normal() * scale * (rng_unit() < 0.02 ? 10 : 1));
    }
}

// --- the fixture file -------------------------------------------------------------------

enum { REC_DEQUANT = 1, REC_QUANT = 2, REC_SIZES = 3, REC_VECDOT = 4 };

struct rec {
    uint32_t kind, type, n, nbytes, aux;
    const uint8_t *payload;
};

static uint8_t *fix_data;
static size_t fix_size;

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static void fixture_load(void) {
    FILE *f = fopen(FIXTURE, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    fix_size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    fix_data = malloc(fix_size);
    if (!fix_data || fread(fix_data, 1, fix_size, f) != fix_size || fix_size < 12 ||
        memcmp(fix_data, "STQF", 4) || rd32(fix_data + 4) != 1) {
        free(fix_data);
        fix_data = NULL;
    }
    fclose(f);
}

// Size of a record's payload, from its header.
static size_t rec_payload(const struct rec *r) {
    switch (r->kind) {
    case REC_DEQUANT:
    case REC_QUANT:
        return (size_t)r->nbytes + 4 * (size_t)r->n;
    case REC_SIZES:
        return 28 * (size_t)r->n;
    case REC_VECDOT:
        return (size_t)r->nbytes + 4 * (size_t)r->n + r->aux + 4;
    default:
        return SIZE_MAX;
    }
}

// Visits record i (0-based) of the given kind in order; false past the last one.
static bool fixture_next(uint32_t kind, size_t *off, struct rec *r) {
    if (!fix_data) return false;
    if (*off == 0) *off = 12;
    while (*off + 20 <= fix_size) {
        const uint8_t *p = fix_data + *off;
        *r = (struct rec){rd32(p), rd32(p + 4), rd32(p + 8), rd32(p + 12), rd32(p + 16), p + 20};
        const size_t len = rec_payload(r);
        if (len == SIZE_MAX || len > fix_size - *off - 20) return false;
        *off += 20 + len;
        if (r->kind == kind) return true;
    }
    return false;
}

// A malloc'd (so suitably aligned) copy of n fixture bytes: rows are read through
// their block structs, which need their natural alignment.
static uint8_t *aligned_copy(const uint8_t *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, p, n);
    return c;
}

static float rdf(const uint8_t *p) {
    const uint32_t u = rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// --- (e) the table ----------------------------------------------------------------------------

static void test_table(void) {
    static const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38};
    for (size_t i = 0; i < sizeof removed / sizeof *removed; i++) {
        CHECK(quant_get((enum ggml_type)removed[i]) == NULL, "type %d", removed[i]);
        CHECK(!strcmp(quant_name((enum ggml_type)removed[i]), "unknown"), "type %d", removed[i]);
    }
    CHECK(quant_get(GGML_TYPE_COUNT) == NULL && quant_get((enum ggml_type) - 1) == NULL, "out of range");
    CHECK(!strcmp(quant_name((enum ggml_type)1000), "unknown"), "name of 1000");

    // every number the reference defines below 40, with its name, block and size
    size_t off = 0;
    struct rec r;
    int seen = 0;
    if (fixture_next(REC_SIZES, &off, &r)) {
        for (uint32_t i = 0; i < r.n; i++) {
            const uint8_t *e = r.payload + 28 * i;
            const enum ggml_type t = (enum ggml_type)rd32(e);
            char name[17] = {0};
            memcpy(name, e + 12, 16);
            const struct quant_traits *q = quant_get(t);
            CHECK(q != NULL, "type %d (%s) unknown", t, name);
            if (!q) continue;
            seen++;
            CHECK(!strcmp(q->name, name), "type %d: name %s, reference %s", t, q->name, name);
            CHECK(q->block_size == (int64_t)rd32(e + 4) && q->type_size == rd32(e + 8),
                  "%s: %lld/%zu, reference %u/%u", name, (long long)q->block_size, q->type_size, rd32(e + 4),
                  rd32(e + 8));
        }
        int defined = 0;
        for (int t = 0; t < GGML_TYPE_COUNT; t++) defined += quant_get((enum ggml_type)t) != NULL;
        CHECK(seen == defined && defined == 32, "%d defined, %d in the reference", defined, seen);
    }

    // supported types, their quantizers and dot products
    static const struct {
        enum ggml_type t, vdt;
        bool quant, dot;
    } sup[] = {
        {GGML_TYPE_F32, GGML_TYPE_F32, true, true},     {GGML_TYPE_F16, GGML_TYPE_F32, true, true},
        {GGML_TYPE_BF16, GGML_TYPE_F32, true, true},    {GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, true, true},
        {GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, true, true},   {GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, true, true},
        {GGML_TYPE_Q5_1, GGML_TYPE_Q8_1, true, true},   {GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, true, true},
        {GGML_TYPE_Q8_1, GGML_TYPE_Q8_1, true, false},  {GGML_TYPE_Q2_K, GGML_TYPE_Q8_K, false, true},
        {GGML_TYPE_Q3_K, GGML_TYPE_Q8_K, false, true},  {GGML_TYPE_Q4_K, GGML_TYPE_Q8_K, false, true},
        {GGML_TYPE_Q5_K, GGML_TYPE_Q8_K, false, true},  {GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, false, true},
        {GGML_TYPE_Q8_K, GGML_TYPE_Q8_K, true, false},  {GGML_TYPE_IQ4_NL, GGML_TYPE_Q8_0, true, true},
        {GGML_TYPE_IQ4_XS, GGML_TYPE_Q8_K, true, true},
    };
    int nsup = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *q = quant_get((enum ggml_type)t);
        if (q && q->supported) nsup++;
        if (q && !q->supported) CHECK(!q->dequantize_row && !q->vec_dot && !q->quantize_row, "%s", q->name);
    }
    CHECK(nsup == (int)(sizeof sup / sizeof *sup), "%d supported types", nsup);
    for (size_t i = 0; i < sizeof sup / sizeof *sup; i++) {
        const struct quant_traits *q = quant_get(sup[i].t);
        CHECK(q && q->supported && q->dequantize_row, "type %d", sup[i].t);
        if (!q) continue;
        CHECK((q->quantize_row != NULL) == sup[i].quant, "%s quantize", q->name);
        CHECK((q->vec_dot != NULL) == sup[i].dot && (q->vec_dot_scalar != NULL) == sup[i].dot, "%s dot",
              q->name);
        CHECK(q->vec_dot_type == sup[i].vdt, "%s vec_dot_type %d", q->name, q->vec_dot_type);
        if (sup[i].dot && sup[i].vdt != GGML_TYPE_F32) {
            const struct quant_traits *a = quant_get(q->vec_dot_type);
            CHECK(a->quantize_row &&
                      (a->block_size % q->block_size == 0 || q->block_size % a->block_size == 0),
                  "%s activation type", q->name);
        }
    }

    CHECK(quant_row_size(GGML_TYPE_Q4_K, 512) == 288, "Q4_K 512");
    CHECK(quant_row_size(GGML_TYPE_Q4_0, 33) == 0 && quant_row_size(GGML_TYPE_Q4_0, -32) == 0,
          "not a multiple");
    CHECK(quant_row_size(GGML_TYPE_F32, 7) == 28 && quant_row_size(GGML_TYPE_F32, 0) == 0, "F32 rows");
    CHECK(quant_row_size((enum ggml_type)4, 32) == 0, "removed type");
    CHECK(quant_row_size(GGML_TYPE_F64, INT64_MAX) == 0, "overflow");
    CHECK(quant_row_size(GGML_TYPE_MXFP4, 64) == 34, "MXFP4 64");
}

// --- (a) dequantization against the gguf package -------------------------------------------

static void test_dequant_fixtures(void) {
    size_t off = 0;
    struct rec r;
    int records = 0;
    while (fixture_next(REC_DEQUANT, &off, &r)) {
        const struct quant_traits *q = quant_get((enum ggml_type)r.type);
        CHECK(q && q->dequantize_row && quant_row_size(r.type, r.n) == r.nbytes, "record type %u", r.type);
        if (!q || !q->dequantize_row || quant_row_size(r.type, r.n) != r.nbytes) continue;
        records++;
        float *y = malloc(r.n * sizeof *y);
        uint8_t *src = aligned_copy(r.payload, r.nbytes);
        memset(y, 0xFF, r.n * sizeof *y); // poison
        q->dequantize_row(src, y, r.n);
        free(src);
        int bad = 0;
        for (uint32_t i = 0; i < r.n; i++) {
            const float want = rdf(r.payload + r.nbytes + 4 * i);
            // a NaN half stays NaN; its payload bits are not part of the format
            const bool ok = isnan(want) ? isnan(y[i]) : fbits(y[i]) == fbits(want);
            if (!ok && bad++ < 3)
                CHECK(ok, "%s element %u: %.9g (0x%08x), gguf %.9g (0x%08x)", q->name, i, y[i], fbits(y[i]),
                      want, fbits(want));
        }
        CHECK(bad == 0, "%s: %d of %u values differ", q->name, bad, r.n);
        free(y);
    }
    CHECK(fix_data != NULL, "%s missing or not a version 1 fixture (tests run from the repository root)",
          FIXTURE);
    CHECK(!fix_data || records == 16, "%d dequantize records", records);
}

// --- (b) quantization against the gguf package and ggml -------------------------------------------

static bool half_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }

static void test_quant_fixtures(void) {
    size_t off = 0;
    struct rec r;
    int records = 0;
    while (fixture_next(REC_QUANT, &off, &r)) {
        const struct quant_traits *q = quant_get((enum ggml_type)r.type);
        CHECK(q && q->quantize_row && quant_row_size(r.type, r.n) == r.nbytes, "record type %u", r.type);
        if (!q || !q->quantize_row || quant_row_size(r.type, r.n) != r.nbytes) continue;
        records++;
        float *x = malloc(r.n * sizeof *x);
        uint8_t *b = malloc(r.nbytes);
        for (uint32_t i = 0; i < r.n; i++) x[i] = rdf(r.payload + 4 * i);
        memset(b, 0xA5, r.nbytes);
        q->quantize_row(x, b, r.n);
        const uint8_t *want = r.payload + 4 * (size_t)r.n;
        int bad = 0;
        for (uint32_t i = 0; i < r.nbytes; i++) {
            if (b[i] == want[i]) continue;
            if (r.type == GGML_TYPE_F16 && isnan(x[i / 2])) { // NaN -> some NaN half
                const uint16_t h = (uint16_t)(b[i & ~1u] | b[i | 1u] << 8);
                if (half_is_nan(h)) continue;
            }
            const size_t el = (size_t)i / q->type_size * (size_t)q->block_size;
            if (bad++ < 3)
                printf("    %s byte %u (block %zu, input[%zu] = %.9g): 0x%02x, reference 0x%02x\n", q->name,
                       i, (size_t)(i / q->type_size), el, x[el], b[i], want[i]);
        }
        CHECK(bad == 0, "%s: %d of %u bytes differ", q->name, bad, r.nbytes);
        free(x);
        free(b);
    }
    CHECK(!fix_data || records >= 7, "%d quantize records", records);
    if (fix_data && records < 11) printf("    note: no ggml records for Q8_1/Q8_K/IQ4_NL/IQ4_XS quantize\n");
}

// --- (c) quantize -> dequantize round trips within each format's bound ---------------------------------

// Distance from t to the nearest IQ4 level.
static double iq4_dist(double t) {
    double best = INFINITY;
    for (int k = 0; k < 16; k++) best = fmin(best, fabs(t - quant_kvalues_iq4nl[k]));
    return best;
}

// Largest |x| of block b and the signed value reaching it (the first one).
static double block_absmax(const float *x, int n, double *signed_max) {
    double amax = 0;
    *signed_max = 0;
    for (int i = 0; i < n; i++)
        if (fabs(x[i]) > amax) amax = fabs(x[i]), *signed_max = x[i];
    return amax;
}

// The allowed |x - dequant(quant(x))| for element i of a block starting at x0 (bs
// elements), given the block's stored bytes. Derivations (u = 2^-11 half rounding,
// "slack" = float rounding of the scaled value, far below the terms it pads):
//   Q8_0/Q8_1: d = amax/127, q = round(x/d): d/2 + |d16 - d|*|q|.
//   Q8_K: d = max/-127 kept in float32: |d|/2.
//   Q4_0 (Q5_0): d = max/-8 (-16), t = x/d in [-8, 8] ([-16, 16]); q = trunc(t + 8.5) clamped
//     to 15 (31): |d|/2, or |d|*(t - 7) (t - 15) where t > 7.5 (15.5) clamps; + |d16 - d|*8 (16).
//   Q4_1 (Q5_1): d = (max - min)/15 (31): d/2 + |d16 - d|*15 (31) + |m16 - min|.
//   IQ4_NL/IQ4_XS: each element takes the level nearest to x/s for the (sub-)block scale s the
//     search chose; s16 = s (1 +- u): |s16| (dist(x/s16, levels) + 2^-9 |x/s16|).
static double round_trip_bound(enum ggml_type t, const float *x0, int bs, int i, const uint8_t *blk,
                               const float *deq) {
    const double slack = 0x1.0p-18;
    const double x = x0[i];
    double smax;
    const double amax = block_absmax(x0, bs, &smax);
    switch (t) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q8_1: {
        const double d = amax / 127, d16 = st_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        const double q = d16 != 0 ? deq[i] / d16 : 0;
        return d * (0.5 + slack * 128) + fabs(d16 - d) * fabs(q);
    }
    case GGML_TYPE_Q8_K:
        return amax / 127 * (0.5 + slack * 128);
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0: {
        const double half = t == GGML_TYPE_Q4_0 ? 8 : 16;
        const double d = smax / -half, d16 = st_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        const double tt = d != 0 ? x / d : 0;
        return fabs(d) * (fmax(0.5, tt - (half - 1)) + slack * 2 * half) + fabs(d16 - d) * half;
    }
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1: {
        const double levels = t == GGML_TYPE_Q4_1 ? 15 : 31;
        double min = INFINITY, max = -INFINITY;
        for (int k = 0; k < bs; k++) min = fmin(min, x0[k]), max = fmax(max, x0[k]);
        const double d = (max - min) / levels;
        const double d16 = st_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        const double m16 = st_fp16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
        return d * (0.5 + slack * 2 * levels) + fabs(d16 - d) * levels + fabs(m16 - min);
    }
    case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ4_XS: {
        double s16 = st_fp16_to_f32((uint16_t)(blk[0] | blk[1] << 8)), sub_max = amax;
        if (t == GGML_TYPE_IQ4_XS) {
            const struct block_iq4_xs *b = (const struct block_iq4_xs *)blk;
            const int ib = i / 32;
            const int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | ((b->scales_h >> 2 * ib) & 3) << 4;
            s16 *= ls - 32;
            sub_max = block_absmax(x0 + 32 * ib, 32, &smax);
        }
        if (s16 == 0) return sub_max == 0 ? 0 : -1; // only an all-zero (sub-)block may get a zero scale
        const double tt = x / s16;
        return fabs(s16) * (iq4_dist(tt) + 0x1.0p-9 * fabs(tt)) + 1e-30;
    }
    default:
        return -1;
    }
}

static void round_trip_type(enum ggml_type t) {
    const struct quant_traits *q = quant_get(t);
    const int64_t n = 4096;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint8_t *b = malloc(quant_row_size(t, n));
    random_floats(x, n);
    if (t == GGML_TYPE_IQ4_XS) // sub-block magnitudes within 4x of each other: no sub-block scale rounds to 0
        for (int64_t i = 0; i < n; i++) x[i] = (float)(rng_normal() * (1 + 3 * ((i / 32) % 2)));
    for (int i = 32; i < 64; i++) x[i] = 0; // an all-zero block
    q->quantize_row(x, b, n);
    q->dequantize_row(b, y, n);
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t blk = i / q->block_size;
        double bound;
        if (t == GGML_TYPE_F32)
            bound = 0;
        else if (t == GGML_TYPE_F16) // half precision: 11 significant bits; subnormals below 2^-14
            bound = fmax(fabs(x[i]) * 0x1.0p-11, 0x1.0p-25);
        else if (t == GGML_TYPE_BF16)
            bound = fabs(x[i]) * 0x1.0p-8;
        else
            bound = round_trip_bound(t, x + blk * q->block_size, (int)q->block_size, (int)(i % q->block_size),
                                     b + blk * q->type_size, y + blk * q->block_size);
        const double err = fabs((double)y[i] - x[i]);
        if (bound > 0) worst = fmax(worst, err / bound);
        if (!(err <= bound) && bad++ < 3)
            printf("    %s element %lld: x %.9g -> %.9g, error %.3g > bound %.3g\n", q->name, (long long)i,
                   x[i], y[i], err, bound);
    }
    CHECK(bad == 0, "%s: %d elements past their bound", q->name, bad);
    printf("    %-6s worst error / bound = %.3f\n", q->name, worst);
    free(x);
    free(y);
    free(b);
}

static void test_round_trip(void) {
    static const enum ggml_type types[] = {
        GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1,   GGML_TYPE_Q8_K,
        GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) round_trip_type(types[i]);
}

// --- (d) dot products ---------------------------------------------------------------------------

// Offsets of a weight block's scale (d) and min (m/dmin) half fields; -1 where absent.
static void scale_fields(enum ggml_type t, int *d, int *m) {
    *m = -1;
    switch (t) {
    case GGML_TYPE_Q4_1:
        *d = offsetof(struct block_q4_1, d), *m = offsetof(struct block_q4_1, m);
        break;
    case GGML_TYPE_Q5_1:
        *d = offsetof(struct block_q5_1, d), *m = offsetof(struct block_q5_1, m);
        break;
    case GGML_TYPE_Q2_K:
        *d = offsetof(struct block_q2_K, d), *m = offsetof(struct block_q2_K, dmin);
        break;
    case GGML_TYPE_Q3_K:
        *d = offsetof(struct block_q3_K, d);
        break;
    case GGML_TYPE_Q4_K:
        *d = offsetof(struct block_q4_K, d), *m = offsetof(struct block_q4_K, dmin);
        break;
    case GGML_TYPE_Q5_K:
        *d = offsetof(struct block_q5_K, d), *m = offsetof(struct block_q5_K, dmin);
        break;
    case GGML_TYPE_Q6_K:
        *d = offsetof(struct block_q6_K, d);
        break;
    default:
        *d = 0;
        break; // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first
    }
}

static void put_half(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

// A random weight row: random bytes, scale fields set by pick(). Float types: random values.
static void random_weights(enum ggml_type t, int64_t n, uint8_t *w, uint16_t (*pick)(void)) {
    const struct quant_traits *q = quant_get(t);
    const size_t size = quant_row_size(t, n);
    if (q->block_size == 1) {
        float *x = malloc(n * sizeof *x);
        random_floats(x, n);
        q->quantize_row(x, w, n);
        free(x);
        return;
    }
    for (size_t i = 0; i < size; i++) w[i] = (uint8_t)rng_u64();
    int d, m;
    scale_fields(t, &d, &m);
    for (size_t b = 0; b < size; b += q->type_size) {
        put_half(w + b + d, pick());
        if (m >= 0) put_half(w + b + m, pick());
    }
}

static uint16_t pick_moderate(void) { // +-2^[-10, -2]
    return st_f32_to_fp16((float)(exp2(rng_unit() * 8 - 10) * (rng_u64() & 1 ? 1 : -1)));
}
static uint16_t pick_exact(void) {
    return st_f32_to_fp16((float)((rng_u64() & 1 ? 1 : 2) * (rng_u64() & 2 ? 1 : -1)));
}

// An activation row of small integers (in [-1, 1]) with scales +-1 or +-2, built
// directly as the quantizer's output would be (consistent s / bsums).
static void exact_activations(enum ggml_type t, int64_t n, uint8_t *a) {
    for (int64_t b = 0; b < n / (t == GGML_TYPE_Q8_K ? QK_K : 32); b++) {
        const float d = (float)((rng_u64() & 1 ? 1 : 2) * (rng_u64() & 2 ? 1 : -1));
        if (t == GGML_TYPE_Q8_K) {
            struct block_q8_K *k = (struct block_q8_K *)a + b;
            k->d = d;
            for (int j = 0; j < QK_K; j++) k->qs[j] = (int8_t)rng_int(-1, 1);
            for (int j = 0; j < QK_K / 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += k->qs[16 * j + l];
                k->bsums[j] = (int16_t)s;
            }
        } else if (t == GGML_TYPE_Q8_1) {
            struct block_q8_1 *k = (struct block_q8_1 *)a + b;
            int s = 0;
            for (int j = 0; j < 32; j++) s += k->qs[j] = (int8_t)rng_int(-1, 1);
            k->d = st_f32_to_fp16(d);
            k->s = st_f32_to_fp16(d * (float)s);
        } else {
            struct block_q8_0 *k = (struct block_q8_0 *)a + b;
            for (int j = 0; j < 32; j++) k->qs[j] = (int8_t)rng_int(-1, 1);
            k->d = st_f32_to_fp16(d);
        }
    }
}

struct dot_ref {
    double dot; // sum of dequantized w * a, in double
    double mag; // sum over elements of |scale part * a| + |min part * a|: the float terms' size
};

// The reference for w . a: dequantized in float (bit-exact, checked above), dot in
// double. With Q8_1 activations the mins multiply the block's stored s (its sum
// as a half), as the format defines that dot product, not the sum of its values.
static struct dot_ref dot_reference(enum ggml_type t, int64_t n, const uint8_t *w, const void *a) {
    const struct quant_traits *q = quant_get(t);
    struct dot_ref r = {0, 0};
    float *wd = malloc(n * sizeof *wd), *ad = malloc(n * sizeof *ad), *wm = malloc(n * sizeof *wm);
    q->dequantize_row(w, wd, n);
    if (q->vec_dot_type == GGML_TYPE_F32)
        memcpy(ad, a, n * sizeof *ad);
    else
        quant_get(q->vec_dot_type)->dequantize_row(a, ad, n);
    int d, m;
    scale_fields(t, &d, &m);
    memset(wm, 0, n * sizeof *wm);
    if (m >= 0 && q->block_size > 1) { // split the value into its scale and min parts
        const size_t size = quant_row_size(t, n);
        uint8_t *z = malloc(size);
        memcpy(z, w, size);
        for (size_t b = 0; b < size; b += q->type_size) put_half(z + b + d, 0);
        q->dequantize_row(z, wm, n);
        free(z);
    }
    for (int64_t i = 0; i < n; i++) {
        r.dot += (double)wd[i] * ad[i];
        r.mag += (fabs((double)wd[i] - wm[i]) + fabs((double)wm[i])) * fabs((double)ad[i]);
    }
    if (q->vec_dot_type == GGML_TYPE_Q8_1) {
        const struct block_q8_1 *y = a;
        for (int64_t b = 0; b < n / 32; b++) {
            int sum = 0;
            for (int j = 0; j < 32; j++) sum += y[b].qs[j];
            const double mm =
                st_fp16_to_f32((uint16_t)(w[b * q->type_size + 2] | w[b * q->type_size + 3] << 8));
            const double sd = (double)st_fp16_to_f32(y[b].s) - (double)st_fp16_to_f32(y[b].d) * sum;
            r.dot += mm * sd;
            r.mag += fabs(mm) * fabs(sd);
        }
    }
    free(wd);
    free(ad);
    free(wm);
    return r;
}

// Float rounding of a dot over nb blocks (or nb elements for float rows): each of
// the nb block terms is rounded a few times (scale product, int -> float, the
// product) and goes through at most nb + log2(lanes) additions in any order the
// SIMD or scalar form uses: |error| <= (nb + 8) u * sum |terms|.
static double dot_bound(const struct quant_traits *q, int64_t n, const struct dot_ref *r) {
    const double nb = (double)(n / q->block_size);
    return (nb + 8) * U32 * r->mag;
}

static const enum ggml_type dot_types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,    GGML_TYPE_BF16,  GGML_TYPE_Q4_0,
                                           GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,   GGML_TYPE_Q5_1,  GGML_TYPE_Q8_0,
                                           GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,   GGML_TYPE_Q4_K,  GGML_TYPE_Q5_K,
                                           GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};

// Scales +-1, +-2 and activations in [-1, 1]: every term and partial sum is an
// integer below 2^24, so float arithmetic is exact in any order and the fast form,
// the scalar twin and the double reference must agree bit for bit. This pins the
// integer part of every SIMD path (unpacking, scales, mins, bsums) exactly.
static void test_vec_dot_exact(void) {
    for (size_t k = 0; k < sizeof dot_types / sizeof *dot_types; k++) {
        const struct quant_traits *q = quant_get(dot_types[k]);
        if (q->vec_dot_type == GGML_TYPE_F32) continue; // float rows: covered by the random test
        for (int64_t n = 256; n <= 1024; n *= 2) {
            uint8_t *w = malloc(quant_row_size(dot_types[k], n));
            uint8_t *a = malloc(quant_row_size(q->vec_dot_type, n));
            random_weights(dot_types[k], n, w, pick_exact);
            exact_activations(q->vec_dot_type, n, a);
            const struct dot_ref r = dot_reference(dot_types[k], n, w, a);
            CHECK(r.mag < 0x1.0p24, "%s n %lld: terms too large for the exact test (%g)", q->name,
                  (long long)n, r.mag);
            const float fast = q->vec_dot(n, w, a), slow = q->vec_dot_scalar(n, w, a);
            CHECK(fast == slow && (double)slow == r.dot, "%s n %lld: fast %.9g scalar %.9g reference %.17g",
                  q->name, (long long)n, fast, slow, r.dot);
            free(w);
            free(a);
        }
    }
}

// Random rows of several lengths: fast and scalar each within the float bound of
// the double reference, and of each other.
static void test_vec_dot_random(void) {
    for (size_t k = 0; k < sizeof dot_types / sizeof *dot_types; k++) {
        const struct quant_traits *q = quant_get(dot_types[k]);
        static const int64_t lens32[] = {32, 64, 96, 1056, 4096}, lensK[] = {256, 512, 768, 4096},
                             lens1[] = {1, 7, 33, 100, 1000, 4096};
        const int64_t *lens = q->block_size == 1 ? lens1 : q->block_size == 32 ? lens32 : lensK;
        const int nlens = q->block_size == 1 ? 6 : q->block_size == 32 ? 5 : 4;
        double worst = 0;
        for (int li = 0; li < nlens; li++) {
            const int64_t n = lens[li];
            uint8_t *w = malloc(quant_row_size(dot_types[k], n));
            float *x = malloc(n * sizeof *x);
            const size_t abytes =
                q->vec_dot_type == GGML_TYPE_F32 ? n * sizeof(float) : quant_row_size(q->vec_dot_type, n);
            uint8_t *a = malloc(abytes);
            random_weights(dot_types[k], n, w, pick_moderate);
            random_floats(x, n);
            if (q->vec_dot_type == GGML_TYPE_F32)
                memcpy(a, x, abytes);
            else
                quant_get(q->vec_dot_type)->quantize_row(x, a, n);
            const struct dot_ref r = dot_reference(dot_types[k], n, w, a);
            const double bound = dot_bound(q, n, &r);
            const float fast = q->vec_dot(n, w, a), slow = q->vec_dot_scalar(n, w, a);
            CHECK(fabs(fast - r.dot) <= bound, "%s n %lld: fast %.9g, reference %.17g, bound %.3g", q->name,
                  (long long)n, fast, r.dot, bound);
            CHECK(fabs(slow - r.dot) <= bound, "%s n %lld: scalar %.9g, reference %.17g, bound %.3g", q->name,
                  (long long)n, slow, r.dot, bound);
            CHECK(fabs((double)fast - slow) <= 2 * bound, "%s n %lld: fast %.9g scalar %.9g", q->name,
                  (long long)n, fast, slow);
            if (bound > 0) worst = fmax(worst, fmax(fabs(fast - r.dot), fabs(slow - r.dot)) / bound);
            free(w);
            free(x);
            free(a);
        }
        printf("    %-6s worst error / bound = %.3f\n", q->name, worst);
    }
}

// ggml's own dot products (and activation quantizers) on the fixture's rows.
static void test_vec_dot_ggml(void) {
    size_t off = 0;
    struct rec r;
    int records = 0;
    while (fixture_next(REC_VECDOT, &off, &r)) {
        const struct quant_traits *q = quant_get((enum ggml_type)r.type);
        const bool sizes_ok = q && q->vec_dot && quant_row_size(r.type, r.n) == r.nbytes &&
                              quant_row_size(q->vec_dot_type, r.n) == r.aux;
        CHECK(sizes_ok, "record type %u", r.type);
        if (!sizes_ok) continue;
        records++;
        uint8_t *w = aligned_copy(r.payload, r.nbytes);
        uint8_t *want_a = aligned_copy(r.payload + r.nbytes + 4 * (size_t)r.n, r.aux + 4);
        float *x = malloc(r.n * sizeof *x);
        uint8_t *a = malloc(r.aux);
        for (uint32_t i = 0; i < r.n; i++) x[i] = rdf(r.payload + r.nbytes + 4 * i);
        quant_get(q->vec_dot_type)->quantize_row(x, a, r.n);
        CHECK(!memcmp(a, want_a, r.aux), "%s n %u: activation bytes differ from ggml's %s", q->name, r.n,
              quant_name(q->vec_dot_type));
        const float ggml = rdf(want_a + r.aux);
        const struct dot_ref ref = dot_reference(r.type, r.n, w, want_a);
        const double bound = 2 * dot_bound(q, r.n, &ref);
        const float fast = q->vec_dot(r.n, w, want_a), slow = q->vec_dot_scalar(r.n, w, want_a);
        CHECK(fabs(fast - ggml) <= bound && fabs(slow - ggml) <= bound,
              "%s n %u: fast %.9g scalar %.9g ggml %.9g (bound %.3g)", q->name, r.n, fast, slow, ggml, bound);
        free(x);
        free(a);
        free(w);
        free(want_a);
    }
    if (fix_data && records == 0) SKIP("the fixture holds no ggml dot-product records");
    CHECK(!fix_data || records == 0 || records == 24, "%d records", records);
}

// --- (f) half-precision conversions of util.c ------------------------------------------------------

// binary16 value of h by its definition (an independent model of st_fp16_to_f32).
static double half_value(uint16_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

// f32 -> f16 by definition: the nearest half (ties to the even one), inf from 65520 up.
static uint16_t half_nearest(float f) {
    if (isnan(f)) return 0x7E00;
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    const double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7C00;
    uint16_t lo = 0, hi = 0x7BFF; // largest half with value <= a, by bisection over the ordered bits
    while (lo < hi) {
        const uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (half_value(mid) <= a)
            lo = mid;
        else
            hi = (uint16_t)(mid - 1);
    }
    const double dlo = a - half_value(lo), dhi = half_value((uint16_t)(lo + 1)) - a;
    const uint16_t r = dlo < dhi ? lo : dhi < dlo ? (uint16_t)(lo + 1) : (lo & 1 ? (uint16_t)(lo + 1) : lo);
    return sign | r;
}

static void test_half(void) {
    int bad = 0, bad_rt = 0, bad_bf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = st_fp16_to_f32((uint16_t)h);
        const double want = half_value((uint16_t)h);
        if (isnan(want) ? !isnan(f) : (double)f != want || (signbit(f) != 0) != (h >> 15 != 0)) bad++;
        const uint16_t back = st_f32_to_fp16(f);
        if (isnan(want) ? !half_is_nan(back) : back != h) bad_rt++;
        const float b = st_bf16_to_f32((uint16_t)h);
        const uint16_t bb = st_f32_to_bf16(b);
        if (isnan(b) ? !(isnan(st_bf16_to_f32(bb)) && (bb & 0x8000) == (h & 0x8000)) : bb != h) bad_bf++;
    }
    CHECK(bad == 0, "%d halves convert wrongly", bad);
#ifdef VEC_DOT_AVX2
    int bad_simd = 0; // the dot products' one-instruction conversion
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = simd_fp16((uint16_t)h), b = st_fp16_to_f32((uint16_t)h);
        bad_simd += isnan(b) ? !isnan(a) : fbits(a) != fbits(b);
    }
    CHECK(bad_simd == 0, "%d halves convert differently in the SIMD dot products", bad_simd);
#endif
    CHECK(bad_rt == 0, "%d halves do not round-trip", bad_rt);
    CHECK(bad_bf == 0, "%d bfloat16 values do not round-trip", bad_bf);

    // f32 -> f16 against the model: random bit patterns over the half range, exact ties
    int bad_r = 0;
    for (int i = 0; i < 200000; i++) {
        float f;
        if (i % 2) {
            const uint32_t u = (uint32_t)rng_u64();
            const uint32_t e = 100 + (uint32_t)(rng_u64() % 45); // 2^-27 .. 2^17
            const uint32_t bits = (u & 0x807FFFFFu) | e << 23;
            memcpy(&f, &bits, 4);
        } else {
            const uint16_t h = (uint16_t)(rng_u64() % 0x7BFF);
            f = (float)((half_value(h) + half_value((uint16_t)(h + 1))) / 2); // exact tie
            if (rng_u64() & 1) f = -f;
        }
        const uint16_t got = st_f32_to_fp16(f), want = half_nearest(f);
        if (got != want && bad_r++ < 3)
            printf("    f32 %.9g (0x%08x): 0x%04x, nearest 0x%04x\n", f, fbits(f), got, want);
    }
    CHECK(bad_r == 0, "%d f32 -> f16 roundings differ from the nearest half", bad_r);
    CHECK(st_f32_to_fp16(65519.99f) == 0x7BFF && st_f32_to_fp16(65520.0f) == 0x7C00, "overflow threshold");
    CHECK(half_is_nan(st_f32_to_fp16(NAN)) && st_f32_to_bf16(INFINITY) == 0x7F80, "nan / inf");
}

int main(void) {
    const char *seed_env = getenv("STRATA_SEED");
    const uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                                : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
    printf("seed %llu (set STRATA_SEED to repeat)\n", (unsigned long long)seed);
    rng_state = seed;
    fixture_load();
    RUN(test_table);
    RUN(test_dequant_fixtures);
    RUN(test_quant_fixtures);
    RUN(test_round_trip);
    RUN(test_vec_dot_exact);
    RUN(test_vec_dot_random);
    RUN(test_vec_dot_ggml);
    RUN(test_half);
    free(fix_data);
    TEST_END();
}
