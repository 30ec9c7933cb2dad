// portable.h: the portable forms of the GPU integer intrinsics, written once so
// that the same text compiles as device code (CUDA, HIP, HIP on SPIR-V) and as
// host C11. tests/test_compat.c runs exactly these functions on the CPU against
// independent models of the CUDA semantics; the device code of every target
// that lacks a native instruction (and every target when
// STRATA_PORTABLE_INTRINSICS is defined) runs them too.
//
// Only integer arithmetic with defined behaviour in C: bytes are sign-extended
// arithmetically, sums wrap through uint32_t, never through signed overflow
// (the half-precision conversions add one exact float multiply).
#ifndef STRATA_GPU_COMPAT_PORTABLE_H
#define STRATA_GPU_COMPAT_PORTABLE_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIP__)
#define ST_HOST_DEVICE __host__ __device__
#else
#define ST_HOST_DEVICE
#endif
#define ST_PORTABLE static inline ST_HOST_DEVICE

// Byte i (0 = least significant) of w, sign-extended to int. Written as
// (b ^ 0x80) - 0x80, the form compilers recognise as a sign extension of the
// low byte (one instruction on most targets); nvcc compiled the earlier
// b - ((b & 0x80) << 1) into twice the instructions (docs/BACKENDS.md).
ST_PORTABLE int st_sbyte(uint32_t w, int i) { return (int)(((w >> (8 * i)) & 0xffu) ^ 0x80u) - 0x80; }

// c + sum over i of sbyte(a, i) * sbyte(b, i): CUDA __dp4a(int, int, int).
// The four products sum to at most 4 * 128 * 128 in magnitude; only the
// accumulation into c can overflow, and it wraps modulo 2^32 as __dp4a does.
ST_PORTABLE int st_dp4a_portable(int a, int b, int c) {
    uint32_t ua = (uint32_t)a, ub = (uint32_t)b;
    int dot = st_sbyte(ua, 0) * st_sbyte(ub, 0) + st_sbyte(ua, 1) * st_sbyte(ub, 1) +
              st_sbyte(ua, 2) * st_sbyte(ub, 2) + st_sbyte(ua, 3) * st_sbyte(ub, 3);
    return (int)((uint32_t)c + (uint32_t)dot);
}

// --- the SWAR dot product: two products per 32-bit multiply ---------------------
// For targets without a 4 x 8-bit dot instruction. Two bytes of each side go
// into 16-bit lanes of one word, the activation's lanes swapped:
//   (x0 + x2·2^16) · (a2 + a0·2^16) = x0·a2 + (x0·a0 + x2·a2)·2^16 + ...·2^32,
// so the upper half of the 32-bit product holds the two-term dot product and
// the lower half a cross term, which must not reach the upper half: a sum of
// k such products keeps k·2·|x|max·|a|max ≤ 32767, and each upper half is
// taken before it is spoiled. Activations are 8-bit with |a| ≤ 127 (what
// the quantization of activations writes); weights are any int8 (|x| ≤ 128).

// Bytes 0 and 2 of w as the 16-bit lanes of one word, w0 + w2·2^16 (mod 2^32),
// sign-extended when sgn (else the bytes are read as unsigned).
ST_PORTABLE uint32_t st_pair_even(uint32_t w, int sgn) {
    const uint32_t t = w & 0x00ff00ffu;
    return sgn ? (t ^ 0x00800080u) - 0x00800080u : t;
}
// Bytes 1 and 3 of w likewise.
ST_PORTABLE uint32_t st_pair_odd(uint32_t w, int sgn) { return st_pair_even(w >> 8, sgn); }

// The activation words of one 4-byte group a (signed bytes a0..a3, element
// order) for st_dot16_swar: ye = a2 + a0·2^16, yo = a3 + a1·2^16.
ST_PORTABLE void st_swar_act(uint32_t a, uint32_t *ye, uint32_t *yo) {
    const uint32_t r = (a >> 16) | (a << 16); // bytes a2 a3 a0 a1
    *ye = st_pair_even(r, 1);
    *yo = st_pair_odd(r, 1);
}

// The products st_dot16_swar sums before it takes an upper half, for weights
// with |x| ≤ qmax (1 ≤ qmax ≤ 128): at most 8, the products of a 16-byte run.
ST_PORTABLE int st_swar_products(int qmax) {
    const int k = 32767 / (2 * 127 * qmax);
    return k > 8 ? 8 : k;
}

// acc + the dot product of 16 weights given as the 8 lane pairs x[2i] =
// st_pair_even, x[2i+1] = st_pair_odd of word i (elements 4i .. 4i+3), every
// weight within ±qmax, with 16 activations given as the 8 words y[2i] = ye,
// y[2i+1] = yo of st_swar_act for group i: the result of four chained
// __dp4a, wrapping modulo 2^32 alike. The upper half of a sum is taken by
// sign-extending its top 16 bits (the lower half, plus the 2^15 the sum
// starts from, lies in [0, 2^16)).
ST_PORTABLE int st_dot16_swar_pairs(const uint32_t x[8], const uint32_t y[8], int qmax, int acc) {
    const int k = st_swar_products(qmax);
    uint32_t sum = (uint32_t)acc, part = 0x8000u;
    int n = 0;
    for (int i = 0; i < 8; i++) {
        part += x[i] * y[i];
        if (++n == k || i == 7) {
            sum += ((part >> 16) ^ 0x8000u) - 0x8000u;
            part = 0x8000u;
            n = 0;
        }
    }
    return (int)sum;
}

// The same for the 16 bytes of q[0..3] (element order, signed when sgn;
// unsigned: within [0, qmax] and qmax ≤ 127, so that the bytes read the same
// either way).
ST_PORTABLE int st_dot16_swar(const uint32_t q[4], const uint32_t y[8], int sgn, int qmax, int acc) {
    uint32_t x[8];
    for (int i = 0; i < 4; i++) x[2 * i] = st_pair_even(q[i], sgn), x[2 * i + 1] = st_pair_odd(q[i], sgn);
    return st_dot16_swar_pairs(x, y, qmax, acc);
}

// CUDA __byte_perm(x, y, s): byte n of the result is byte (s >> 4n) & 7 of the
// eight bytes {y, x} (x holds bytes 0-3, y bytes 4-7). Bit 3 of each selector
// nibble and bits 16-31 of s are ignored: nvcc masks the selector with 0x7777
// before its prmt, so prmt's sign-replicate mode is never reached through
// __byte_perm (and HIP's __byte_perm ignores the same bits).
ST_PORTABLE unsigned st_byte_perm_portable(unsigned x, unsigned y, unsigned s) {
    uint64_t v = ((uint64_t)y << 32) | (uint64_t)x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) {
        uint32_t sel = (s >> (4 * n)) & 7u;
        r |= (uint32_t)((v >> (8 * sel)) & 0xffu) << (8 * n);
    }
    return r;
}

// Per byte lane: t0 where the lane of m is 0x00, t1 where it is 0xff.
ST_PORTABLE uint32_t st_mux_bytes(uint32_t t0, uint32_t t1, uint32_t m) { return t0 ^ ((t0 ^ t1) & m); }

// 0xff in each byte lane of x whose bit k is set, 0x00 elsewhere.
ST_PORTABLE uint32_t st_lane_mask(uint32_t x, int k) { return ((x >> k) & 0x01010101u) * 0xffu; }

// The 16-entry byte table t (entry e is byte e % 4 of t[e / 4]) looked up in
// each byte lane of x, whose bytes hold indices 0-15: byte n of the result is
// entry (byte n of x). No byte permute and no memory: a multiplexer tree over
// the four index bits, four lanes at a time (15 lane-wise selects, the
// table's pairs folded into constants when t is constant).
ST_PORTABLE uint32_t st_lut16_portable(uint32_t x, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
    const uint32_t t[4] = {t0, t1, t2, t3};
    const uint32_t m0 = st_lane_mask(x, 0), m1 = st_lane_mask(x, 1);
    const uint32_t m2 = st_lane_mask(x, 2), m3 = st_lane_mask(x, 3);
    uint32_t quad[4]; // entries 4q .. 4q+3 chosen by bits 0 and 1
    for (int q = 0; q < 4; q++) {
        uint32_t e[4];
        for (int i = 0; i < 4; i++) e[i] = ((t[q] >> (8 * i)) & 0xffu) * 0x01010101u;
        quad[q] = st_mux_bytes(st_mux_bytes(e[0], e[1], m0), st_mux_bytes(e[2], e[3], m0), m1);
    }
    return st_mux_bytes(st_mux_bytes(quad[0], quad[1], m2), st_mux_bytes(quad[2], quad[3], m2), m3);
}

// The table t looked up for the eight nibbles of q, GGML's nibble layout:
// byte k of *lo is the entry of the low nibble of byte k of q, byte k of *hi
// that of its high nibble (st_lut16x8 in intrinsics.h; byte_perm-based there
// where the target has a byte permute).
ST_PORTABLE void st_lut16x8_portable(uint32_t q, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3,
                                     uint32_t *lo, uint32_t *hi) {
    *lo = st_lut16_portable(q & 0x0f0f0f0fu, t0, t1, t2, t3);
    *hi = st_lut16_portable((q >> 4) & 0x0f0f0f0fu, t0, t1, t2, t3);
}

// The same lookup with four byte permutes and two to reorder, PERM(x, y, s)
// being __byte_perm or a twin: what the targets with a native byte permute
// run (st_lut16x8 in intrinsics.h). Byte n of a permute picks by selector
// nibble n, so the selector q yields elements 0, 16, 1, 17 of the block in one
// word and 2, 18, 3, 19 in the other; bit 3 of each index picks the table
// half. A macro, so that host C runs it with st_byte_perm_portable.
#define ST_LUT16X8_BY_PERM(PERM, q, t0, t1, t2, t3, lo, hi)                                                  \
    do {                                                                                                     \
        const uint32_t half_ = (((q)&0x88888888u) >> 1) | 0x32103210u;                                       \
        const uint32_t r0_ = PERM(PERM(t0, t1, q), PERM(t2, t3, q), half_);                                  \
        const uint32_t r1_ = PERM(PERM(t0, t1, (q) >> 16), PERM(t2, t3, (q) >> 16), half_ >> 16);            \
        (lo) = PERM(r0_, r1_, 0x6420u);                                                                      \
        (hi) = PERM(r0_, r1_, 0x7531u);                                                                      \
    } while (0)

// The v_perm_b32 selector that makes AMD's __builtin_amdgcn_perm(y, x, sel)
// equal CUDA __byte_perm(x, y, s) for every s: v_perm_b32 takes one selector
// byte per result byte over the bytes {S0, S1} (S1 = bytes 0-3), so nibble n of
// s, less its ignored bit 3, becomes byte n. Selector values 0-7 pick bytes in
// both encodings; v_perm_b32's constant and sign values (8-15 and up) are never
// produced, which is exactly right since __byte_perm has none.
ST_PORTABLE unsigned st_amd_perm_selector(unsigned s) {
    return (s & 0x7u) | ((s & 0x70u) << 4) | ((s & 0x700u) << 8) | ((s & 0x7000u) << 12);
}

// Per-byte a - b modulo 256 (CUDA __vsub4), SWAR: borrow never crosses a byte
// because each byte of a is lifted by 0x80 and each byte of b has its top bit
// cleared before the subtraction; the top bits are fixed up afterwards.
ST_PORTABLE unsigned st_vsub4_portable(unsigned a, unsigned b) {
    uint32_t ua = a, ub = b;
    uint32_t d = (ua | 0x80808080u) - (ub & 0x7f7f7f7fu);
    return d ^ ((ua ^ ~ub) & 0x80808080u);
}

// Per-byte signed a - b clamped to [-128, 127] (CUDA __vsubss4).
ST_PORTABLE unsigned st_vsubss4_portable(unsigned a, unsigned b) {
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        int d = st_sbyte(a, i) - st_sbyte(b, i);
        d = d < -128 ? -128 : (d > 127 ? 127 : d);
        r |= ((uint32_t)d & 0xffu) << (8 * i);
    }
    return r;
}

// --- half precision -------------------------------------------------------------------

// A float's bits and back: the device's own reinterpretation in device code
// (memcpy is a host function there), memcpy in host C.
ST_PORTABLE float st_u2f(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
ST_PORTABLE uint32_t st_f2u(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

// IEEE binary16 bits (the low 16 of h) to float: exact, subnormals, inf and nan
// included (st_h2f in intrinsics.h; one instruction where the target has it).
ST_PORTABLE float st_h2f_portable(uint32_t h) {
    const uint32_t a = h & 0x7fffu;
    float f = st_u2f((a << 13) + 0x38000000u);               // normal: rebias by 112
    if (a < 0x0400u) f = (float)a * 5.9604644775390625e-08f; // zero, subnormal: a·2^-24
    if (a >= 0x7c00u) f = st_u2f((a << 13) | 0x7f800000u);   // inf, nan
    return (h & 0x8000u) ? -f : f;
}

// float to IEEE binary16 bits, to nearest with ties to even (overflow to inf,
// subnormals kept, nan stays nan with its top payload bits and the quiet bit
// set): the bits st_f32_to_fp16 gives on the host (st_f2h in intrinsics.h).
ST_PORTABLE uint32_t st_f2h_portable(float f) {
    const uint32_t x = st_f2u(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u; // rounds to 65520 or more
    uint32_t h, rest, tie;
    if (ax < 0x38800000u) { // a subnormal half or zero: units of 2^-24
        const uint32_t e = ax >> 23;
        if (e < 102) return sign;                                      // below 2^-25
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u, sh = 126 - e; // |f| = m·2^(e-150), sh 14..24
        h = m >> sh, rest = m & ((1u << sh) - 1), tie = 1u << (sh - 1);
    } else {
        h = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ffu), rest = ax & 0x1fffu, tie = 0x1000u;
    }
    if (rest > tie || (rest == tie && (h & 1u))) h++; // a carry into the exponent is right
    return sign | h;
}

#endif
