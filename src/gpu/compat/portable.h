// portable.h: the portable forms of the GPU integer intrinsics, written once so
// that the same text compiles as device code (CUDA, HIP, HIP on SPIR-V) and as
// host C11. tests/test_compat.c runs exactly these functions on the CPU against
// independent models of the CUDA semantics; the device code of every target
// that lacks a native instruction (and every target when
// STRATA_PORTABLE_INTRINSICS is defined) runs them too.
//
// Only integer arithmetic with defined behaviour in C: bytes are sign-extended
// arithmetically, sums wrap through uint32_t, never through signed overflow.
#ifndef STRATA_GPU_COMPAT_PORTABLE_H
#define STRATA_GPU_COMPAT_PORTABLE_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIP__)
#define ST_HOST_DEVICE __host__ __device__
#else
#define ST_HOST_DEVICE
#endif
#define ST_PORTABLE static inline ST_HOST_DEVICE

// Byte i (0 = least significant) of w, sign-extended to int.
ST_PORTABLE int st_sbyte(uint32_t w, int i) {
    uint32_t b = (w >> (8 * i)) & 0xffu;
    return (int)b - (int)((b & 0x80u) << 1);
}

// c + sum over i of sbyte(a, i) * sbyte(b, i): CUDA __dp4a(int, int, int).
// The four products sum to at most 4 * 128 * 128 in magnitude; only the
// accumulation into c can overflow, and it wraps modulo 2^32 as __dp4a does.
ST_PORTABLE int st_dp4a_portable(int a, int b, int c) {
    uint32_t ua = (uint32_t)a, ub = (uint32_t)b;
    int dot = st_sbyte(ua, 0) * st_sbyte(ub, 0) + st_sbyte(ua, 1) * st_sbyte(ub, 1) +
              st_sbyte(ua, 2) * st_sbyte(ub, 2) + st_sbyte(ua, 3) * st_sbyte(ub, 3);
    return (int)((uint32_t)c + (uint32_t)dot);
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

#endif
