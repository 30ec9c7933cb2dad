// test_compat.c: the portable forms of the GPU intrinsics (src/gpu/compat/
// portable.h, the very code the device runs where a target has no native
// instruction) against models of the CUDA semantics written here from the
// CUDA/PTX documentation, independently of the implementation:
//   __dp4a(a, b, c)       c + sum of the four signed byte products, mod 2^32
//   __byte_perm(x, y, s)  byte n = byte (s >> 4n) & 7 of {y, x}; bit 3 of each
//                         nibble ignored (nvcc masks the selector with 0x7777)
//   __vsub4, __vsubss4    per-byte wrapping / signed saturating subtraction
//   st_dot16_swar         four chained __dp4a of 16 weight bytes within ±qmax
//                         and 16 activations in [-127, 127], two products a
//                         32-bit multiply
//   a 16-entry byte table looked up per byte lane and per nibble (the IQ4
//   codebook), both as the multiplexer tree and as byte permutes
// and the AMD selector translation against a model of v_perm_b32 written from
// AMD's ISA description: translate + v_perm_b32 == __byte_perm for every
// selector. Random inputs use a fresh seed each run (STRATA_SEED to repeat).
#include "test.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "gpu/compat/portable.h"
#include "util.h"

// --- random numbers -------------------------------------------------------------------
static uint64_t rng_state;

static uint32_t rng_u32(void) { return (uint32_t)(st_splitmix64(&rng_state) >> 32); }

// --- models -------------------------------------------------------------------------------
// The bytes of w, least significant first.
static void model_bytes(uint32_t w, uint8_t out[4]) {
    for (int i = 0; i < 4; i++) out[i] = (uint8_t)(w >> (8 * i));
}

static int32_t model_dp4a(uint32_t a, uint32_t b, int32_t c) {
    uint8_t ab[4], bb[4];
    model_bytes(a, ab);
    model_bytes(b, bb);
    int64_t sum = c;
    for (int i = 0; i < 4; i++) {
        int sa = ab[i] < 128 ? ab[i] : ab[i] - 256;
        int sb = bb[i] < 128 ? bb[i] : bb[i] - 256;
        sum += (int64_t)sa * sb;
    }
    uint32_t wrapped = (uint32_t)((uint64_t)sum & 0xffffffffull);
    int32_t r;
    memcpy(&r, &wrapped, sizeof r);
    return r;
}

static uint32_t model_byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint8_t input[8];
    model_bytes(x, input);
    model_bytes(y, input + 4);
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) {
        unsigned selector = (s >> (4 * n)) & 0x7u;
        r |= (uint32_t)input[selector] << (8 * n);
    }
    return r;
}

// AMD v_perm_b32 D, S0, S1, S2: byte n of D = BYTE_PERMUTE({S0, S1}, S2[8n+7:8n])
// where the 64-bit {S0, S1} has S1 in bits 0-31, and a selector byte sel gives
//   0-7: byte sel of {S0, S1};  8, 9, 10, 11: 0xff if bit 15, 31, 47, 63 is set
//   (the sign of byte 1, 3, 5, 7), else 0x00;  12: 0x00;  13-255: 0xff.
static uint32_t model_v_perm_b32(uint32_t s0, uint32_t s1, uint32_t s2) {
    uint64_t data = ((uint64_t)s0 << 32) | s1;
    uint32_t d = 0;
    for (int n = 0; n < 4; n++) {
        unsigned sel = (s2 >> (8 * n)) & 0xffu;
        uint32_t byte;
        if (sel >= 13)
            byte = 0xff;
        else if (sel == 12)
            byte = 0x00;
        else if (sel >= 8)
            byte = ((data >> (16 * (sel - 8) + 15)) & 1) ? 0xff : 0x00;
        else
            byte = (uint32_t)(data >> (8 * sel)) & 0xff;
        d |= byte << (8 * n);
    }
    return d;
}

static uint32_t model_vsub4(uint32_t a, uint32_t b) {
    uint8_t ab[4], bb[4];
    model_bytes(a, ab);
    model_bytes(b, bb);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)(ab[i] - bb[i]) << (8 * i);
    return r;
}

static uint32_t model_vsubss4(uint32_t a, uint32_t b) {
    uint8_t ab[4], bb[4];
    model_bytes(a, ab);
    model_bytes(b, bb);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        int d = (ab[i] < 128 ? ab[i] : ab[i] - 256) - (bb[i] < 128 ? bb[i] : bb[i] - 256);
        if (d > 127) d = 127;
        if (d < -128) d = -128;
        r |= (uint32_t)(d & 0xff) << (8 * i);
    }
    return r;
}

// --- dp4a ------------------------------------------------------------------------------------
static const int32_t acc_cases[] = {0, 1, -1, 123456789, INT32_MAX, INT32_MIN, INT32_MAX - 3, INT32_MIN + 5};
#define N_ACC ((int)(sizeof acc_cases / sizeof acc_cases[0]))

// Every word whose four bytes are edge values, as both operands: 5^8 pairs.
static void test_dp4a_edge_bytes_exhaustive(void) {
    static const int8_t edge[5] = {-128, -1, 0, 1, 127};
    uint32_t words[625];
    int n = 0;
    for (int i0 = 0; i0 < 5; i0++)
        for (int i1 = 0; i1 < 5; i1++)
            for (int i2 = 0; i2 < 5; i2++)
                for (int i3 = 0; i3 < 5; i3++)
                    words[n++] = (uint32_t)(uint8_t)edge[i0] | (uint32_t)(uint8_t)edge[i1] << 8 |
                                 (uint32_t)(uint8_t)edge[i2] << 16 | (uint32_t)(uint8_t)edge[i3] << 24;
    long bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int32_t c = acc_cases[(i + j) % N_ACC];
            int32_t want = model_dp4a(words[i], words[j], c);
            int got = st_dp4a_portable((int)words[i], (int)words[j], c);
            if (got != want && bad++ == 0)
                CHECK(0, "dp4a(0x%08x, 0x%08x, %d) = %d, want %d", words[i], words[j], c, got, want);
        }
    CHECK(bad == 0, "%ld of %d edge-byte pairs wrong", bad, n * n);
}

static void test_dp4a_random(void) {
    long bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t a = rng_u32(), b = rng_u32();
        int32_t c = (int32_t)rng_u32();
        if (i % 4 == 0) c = acc_cases[i / 4 % N_ACC];
        int32_t want = model_dp4a(a, b, c);
        int got = st_dp4a_portable((int)a, (int)b, c);
        if (got != want && bad++ == 0) CHECK(0, "dp4a(0x%08x, 0x%08x, %d) = %d, want %d", a, b, c, got, want);
    }
    CHECK(bad == 0, "%ld random cases wrong", bad);
}

// The accumulation wraps modulo 2^32 in both directions.
static void test_dp4a_wraparound(void) {
    const uint32_t max_pos = 0x80808080u; // (-128)^2 * 4 = +65536
    const uint32_t neg_one = 0x7f7f7f7fu; // with 0x80808080: 127 * -128 * 4 = -65024
    int32_t got = st_dp4a_portable((int)max_pos, (int)max_pos, INT32_MAX);
    CHECK(got == model_dp4a(max_pos, max_pos, INT32_MAX), "INT32_MAX + 65536 gave %d", got);
    CHECK(got < 0, "INT32_MAX + 65536 must wrap negative, gave %d", got);
    got = st_dp4a_portable((int)neg_one, (int)max_pos, INT32_MIN);
    CHECK(got == model_dp4a(neg_one, max_pos, INT32_MIN), "INT32_MIN - 65024 gave %d", got);
    CHECK(got > 0, "INT32_MIN - 65024 must wrap positive, gave %d", got);
}

// --- byte_perm --------------------------------------------------------------------------------
// Every 16-bit selector (all 16 values of each nibble in each position,
// sign-replicate nibbles 8-15 included) on inputs whose eight bytes are all
// different and mix set and clear sign bits, with junk in the ignored bits 16-31.
static void test_byte_perm_all_selectors(void) {
    static const uint32_t xs[] = {0x83f27a01u, 0x00000000u, 0xffffffffu, 0x7f80ff01u};
    static const uint32_t ys[] = {0x0c5db4e9u, 0xffffffffu, 0x00000000u, 0x807f01ffu};
    long bad = 0;
    for (int k = 0; k < 4; k++)
        for (uint32_t s = 0; s < 0x10000u; s++) {
            uint32_t sel = s | (rng_u32() & 0xffff0000u);
            uint32_t want = model_byte_perm(xs[k], ys[k], sel);
            uint32_t got = st_byte_perm_portable(xs[k], ys[k], sel);
            if (got != want && bad++ == 0)
                CHECK(0, "byte_perm(0x%08x, 0x%08x, 0x%08x) = 0x%08x, want 0x%08x", xs[k], ys[k], sel, got,
                      want);
        }
    CHECK(bad == 0, "%ld selector cases wrong", bad);
}

static void test_byte_perm_random(void) {
    long bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t x = rng_u32(), y = rng_u32(), s = rng_u32();
        uint32_t want = model_byte_perm(x, y, s);
        uint32_t got = st_byte_perm_portable(x, y, s);
        if (got != want && bad++ == 0)
            CHECK(0, "byte_perm(0x%08x, 0x%08x, 0x%08x) = 0x%08x, want 0x%08x", x, y, s, got, want);
    }
    CHECK(bad == 0, "%ld random cases wrong", bad);
}

// The AMD path computes __builtin_amdgcn_perm(y, x, st_amd_perm_selector(s)):
// on v_perm_b32 that must equal __byte_perm(x, y, s) for every selector.
static void test_amd_perm_translation(void) {
    static const uint32_t xs[] = {0x83f27a01u, 0x80808080u, 0x7f7f7f7fu};
    static const uint32_t ys[] = {0x0c5db4e9u, 0x7f7f7f7fu, 0x80808080u};
    long bad = 0;
    for (int k = 0; k < 3 + 64; k++) {
        uint32_t x = k < 3 ? xs[k] : rng_u32(), y = k < 3 ? ys[k] : rng_u32();
        for (uint32_t s = 0; s < 0x10000u; s++) {
            uint32_t sel = s | (rng_u32() & 0xffff0000u);
            uint32_t want = model_byte_perm(x, y, sel);
            uint32_t got = model_v_perm_b32(y, x, st_amd_perm_selector(sel));
            if (got != want && bad++ == 0)
                CHECK(0,
                      "v_perm_b32 of selector 0x%08x (from 0x%08x) on x=0x%08x y=0x%08x "
                      "gives 0x%08x, __byte_perm gives 0x%08x",
                      st_amd_perm_selector(sel), sel, x, y, got, want);
        }
    }
    CHECK(bad == 0, "%ld translated selectors wrong", bad);
}

// --- 16-entry byte table ----------------------------------------------------------------------
// Model: entry e of the table {t0, t1, t2, t3} is byte e % 4 of word e / 4.
static uint8_t model_entry(const uint32_t t[4], unsigned e) { return (uint8_t)(t[e / 4] >> (8 * (e % 4))); }

// The IQ4_NL codebook as GGUF defines it, then tables with every byte different.
static void lut_table(int k, uint32_t t[4]) {
    static const int8_t iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};
    for (int w = 0; w < 4; w++) {
        t[w] = 0;
        for (int i = 0; i < 4; i++) {
            uint8_t b = k == 0 ? (uint8_t)iq4nl[4 * w + i] : (uint8_t)rng_u32();
            t[w] |= (uint32_t)b << (8 * i);
        }
    }
}

// Every word of four indices, on the IQ4_NL table and 15 random ones.
static void test_lut16_exhaustive(void) {
    long bad = 0;
    for (int k = 0; k < 16; k++) {
        uint32_t t[4];
        lut_table(k, t);
        for (uint32_t i = 0; i < 0x10000u; i++) {
            uint32_t x = (i & 0xfu) | (i & 0xf0u) << 4 | (i & 0xf00u) << 8 | (i & 0xf000u) << 12;
            uint32_t want = 0;
            for (int n = 0; n < 4; n++) want |= (uint32_t)model_entry(t, (x >> (8 * n)) & 0xfu) << (8 * n);
            uint32_t got = st_lut16_portable(x, t[0], t[1], t[2], t[3]);
            if (got != want && bad++ == 0) CHECK(0, "lut16(0x%08x) = 0x%08x, want 0x%08x", x, got, want);
        }
    }
    CHECK(bad == 0, "%ld index words wrong", bad);
}

// Both formulations of the nibble lookup (the multiplexer tree, and the byte
// permutes that targets with a native permute run, here with the portable
// permute) on random words and on every word of equal bytes.
static void test_lut16x8(void) {
    long bad = 0;
    for (int k = 0; k < 4; k++) {
        uint32_t t[4];
        lut_table(k, t);
        for (int i = 0; i < 250000 + 256; i++) {
            uint32_t q = i < 256 ? (uint32_t)i * 0x01010101u : rng_u32();
            uint32_t want_lo = 0, want_hi = 0;
            for (int n = 0; n < 4; n++) {
                want_lo |= (uint32_t)model_entry(t, (q >> (8 * n)) & 0xfu) << (8 * n);
                want_hi |= (uint32_t)model_entry(t, (q >> (8 * n + 4)) & 0xfu) << (8 * n);
            }
            uint32_t lo, hi, plo, phi;
            st_lut16x8_portable(q, t[0], t[1], t[2], t[3], &lo, &hi);
            ST_LUT16X8_BY_PERM(st_byte_perm_portable, q, t[0], t[1], t[2], t[3], plo, phi);
            if ((lo != want_lo || hi != want_hi || plo != want_lo || phi != want_hi) && bad++ == 0)
                CHECK(0,
                      "lut16x8(0x%08x): tree 0x%08x 0x%08x, permutes 0x%08x 0x%08x, want "
                      "0x%08x 0x%08x",
                      q, lo, hi, plo, phi, want_lo, want_hi);
        }
    }
    CHECK(bad == 0, "%ld words wrong", bad);
}

// --- SWAR byte arithmetic ---------------------------------------------------------------------
// Lanes 0 and 1 run over every byte pair; lanes 2 and 3 over every pair too,
// in another order.
static void test_swar_sub_exhaustive(void) {
    long bad4 = 0, badss = 0;
    for (uint32_t p = 0; p < 256; p++)
        for (uint32_t q = 0; q < 256; q++) {
            uint32_t a = p | q << 8 | (p ^ 0x5au) << 16 | (q ^ 0xc3u) << 24;
            uint32_t b = q | p << 8 | (q ^ 0xa5u) << 16 | (p ^ 0x3cu) << 24;
            uint32_t got = st_vsub4_portable(a, b), want = model_vsub4(a, b);
            if (got != want && bad4++ == 0)
                CHECK(0, "vsub4(0x%08x, 0x%08x) = 0x%08x, want 0x%08x", a, b, got, want);
            got = st_vsubss4_portable(a, b);
            want = model_vsubss4(a, b);
            if (got != want && badss++ == 0)
                CHECK(0, "vsubss4(0x%08x, 0x%08x) = 0x%08x, want 0x%08x", a, b, got, want);
        }
    CHECK(bad4 == 0 && badss == 0, "vsub4: %ld wrong, vsubss4: %ld wrong", bad4, badss);
}

static void test_swar_sub_random(void) {
    long bad = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t a = rng_u32(), b = rng_u32();
        if (st_vsub4_portable(a, b) != model_vsub4(a, b) ||
            st_vsubss4_portable(a, b) != model_vsubss4(a, b)) {
            if (bad++ == 0) CHECK(0, "vsub4/vsubss4 wrong for 0x%08x, 0x%08x", a, b);
        }
    }
    CHECK(bad == 0, "%ld random cases wrong", bad);
}

// --- the SWAR dot product ------------------------------------------------------------------
// Weights within ±qmax (signed) or [0, qmax] (unsigned), activations in
// [-127, 127], against four chained model __dp4a: every bound the
// multiply-count rule allows, the extreme words (every byte at a bound, the
// signs that make the upper half largest and the cross term most negative),
// and random words; accumulators at the wrap edges.
static uint32_t swar_byte(int sgn, int qmax, int pick) {
    int v;
    switch (pick) {
    case 0:
        v = qmax;
        break;
    case 1:
        v = sgn ? -qmax : 0;
        break;
    case 2:
        v = sgn ? (qmax == 128 ? -128 : -qmax) : qmax;
        break;
    default:
        v = sgn ? (int)(rng_u32() % (uint32_t)(2 * qmax + 1)) - qmax
                : (int)(rng_u32() % (uint32_t)(qmax + 1));
    }
    if (sgn && qmax == 128 && v == 128) v = 127;
    return (uint32_t)v & 0xffu;
}

static void test_dot16_swar(void) {
    static const int qmaxes[] = {1, 3, 4, 15, 16, 31, 32, 63, 64, 127, 128};
    long bad = 0, cases = 0;
    for (int sgn = 0; sgn < 2; sgn++)
        for (size_t m = 0; m < sizeof qmaxes / sizeof qmaxes[0]; m++) {
            const int qmax = qmaxes[m];
            if (!sgn && qmax > 127) continue; // unsigned weights are below 128 (portable.h)
            for (int rep = 0; rep < 20000; rep++) {
                uint32_t q[4] = {0}, a[4] = {0}, y[8];
                const int mode = rep < 16 ? rep % 4 : 3; // extremes first, then random
                for (int i = 0; i < 4; i++)
                    for (int b = 0; b < 4; b++) {
                        q[i] |= swar_byte(sgn, qmax, mode) << (8 * b);
                        int av = mode == 3 ? (int)(rng_u32() % 255u) - 127 : (rep / 4 % 2 ? 127 : -127);
                        if (mode == 1 && b % 2) av = -av; // cross terms of both signs
                        a[i] |= ((uint32_t)av & 0xffu) << (8 * b);
                    }
                for (int i = 0; i < 4; i++) st_swar_act(a[i], &y[2 * i], &y[2 * i + 1]);
                const int32_t c = acc_cases[(size_t)rep % (sizeof acc_cases / sizeof acc_cases[0])];
                int32_t want = c;
                for (int i = 0; i < 4; i++) want = model_dp4a(q[i], a[i], want);
                const int got = st_dot16_swar(q, y, sgn, qmax, c);
                cases++;
                if (got != want && bad++ == 0)
                    CHECK(0, "dot16_swar (sgn %d, qmax %d, acc %d) q 0x%08x.. a 0x%08x..: %d, want %d", sgn,
                          qmax, c, q[0], a[0], got, want);
            }
        }
    CHECK(bad == 0, "%ld of %ld cases wrong", bad, cases);
    // the rule itself: 8 products below |x| 16, one at 128
    CHECK(st_swar_products(15) == 8 && st_swar_products(16) == 8 && st_swar_products(17) == 7,
          "products per upper half: %d %d %d", st_swar_products(15), st_swar_products(16),
          st_swar_products(17));
    CHECK(st_swar_products(128) == 1 && st_swar_products(63) == 2, "products per upper half: %d %d",
          st_swar_products(128), st_swar_products(63));
}

// The half-precision conversions against an independent conversion: the
// compiler's _Float16 (C23 / ISO TS 18661-3) where it has one, else x86's F16C
// instructions: every half to float, and to half from every half's value,
// every midpoint between neighbours (ties), values just either side of each
// midpoint, and random bit patterns. NaNs: both nan.
#if defined(__FLT16_MAX__)
#define REF_HALF "the compiler's _Float16"
static float ref_h2f(uint16_t h) {
    _Float16 x;
    memcpy(&x, &h, sizeof x);
    return (float)x;
}
static uint16_t ref_f2h(float f) {
    const _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, sizeof h);
    return h;
}
#elif defined(__F16C__)
#include <immintrin.h>
#define REF_HALF "F16C"
static float ref_h2f(uint16_t h) { return _cvtsh_ss(h); }
static uint16_t ref_f2h(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#endif

#ifdef REF_HALF
static bool same_half(uint32_t got, uint16_t w) {
    const bool gnan = (got & 0x7c00u) == 0x7c00u && (got & 0x3ffu),
               wnan = (w & 0x7c00u) == 0x7c00u && (w & 0x3ffu);
    return gnan || wnan ? gnan && wnan : got == w;
}
#endif

static void test_half_conversions(void) {
#ifndef REF_HALF
    SKIP("no independent half conversion here (neither _Float16 nor F16C)");
#else
    long bad_h2f = 0, bad_f2h = 0, checked = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const float want = ref_h2f((uint16_t)h), got = st_h2f_portable(h);
        const bool ok = (want != want) ? got != got : memcmp(&want, &got, sizeof got) == 0;
        if (!ok && bad_h2f++ == 0)
            CHECK(0, "h2f(0x%04x) = %a, want %a (%s)", h, (double)got, (double)want, REF_HALF);
    }
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const float a = ref_h2f((uint16_t)h);
        const float b = (h & 0x7fffu) < 0x7c00u && (h & 0x7fffu) != 0x7bffu ? ref_h2f((uint16_t)(h + 1)) : a;
        const float mid = a + (b - a) / 2; // exact: halves have 11 bits, floats 24
        const float probes[5] = {a, mid, nextafterf(mid, a), nextafterf(mid, b), -mid};
        for (int i = 0; i < 5; i++, checked++)
            if (!same_half(st_f2h_portable(probes[i]), ref_f2h(probes[i])) && bad_f2h++ == 0)
                CHECK(0, "f2h(%a) = 0x%04x, want 0x%04x (%s)", (double)probes[i], st_f2h_portable(probes[i]),
                      ref_f2h(probes[i]), REF_HALF);
    }
    for (int i = 0; i < 1 << 20; i++, checked++) {
        const float f = st_u2f(rng_u32());
        if (!same_half(st_f2h_portable(f), ref_f2h(f)) && bad_f2h++ == 0)
            CHECK(0, "f2h(%a) = 0x%04x, want 0x%04x (%s)", (double)f, st_f2h_portable(f), ref_f2h(f),
                  REF_HALF);
    }
    CHECK(bad_h2f == 0 && bad_f2h == 0, "h2f: %ld of 65536 wrong, f2h: %ld of %ld wrong", bad_h2f, bad_f2h,
          checked);
#endif
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    rng_state = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    printf("seed %" PRIu64 " (STRATA_SEED to repeat)\n", rng_state);
    RUN(test_dp4a_edge_bytes_exhaustive);
    RUN(test_dp4a_random);
    RUN(test_dp4a_wraparound);
    RUN(test_byte_perm_all_selectors);
    RUN(test_byte_perm_random);
    RUN(test_amd_perm_translation);
    RUN(test_lut16_exhaustive);
    RUN(test_lut16x8);
    RUN(test_swar_sub_exhaustive);
    RUN(test_swar_sub_random);
    RUN(test_dot16_swar);
    RUN(test_half_conversions);
    TEST_END();
}
