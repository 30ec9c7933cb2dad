// intrinsics.h: the device intrinsics of the compat layer (included by compat.h
// after the vendor header). Each function picks the target's instruction under
// a guard for that target and falls back to its portable.h twin everywhere
// else; STRATA_PORTABLE_INTRINSICS forces the portable form on every target, so
// the SPIR-V arithmetic path can be run and timed on any GPU.
//
//   function       CUDA                 AMD gfx                         SPIR-V
//   st_dp4a        __dp4a (sm_61+)      v_dot4_i32_i8 (gfx906/908/90a/  portable, or OpSDot
//   (ST_HAS_DP4A)
//                                       942/950, gfx1011/1012, gfx103x); with STRATA_SPIRV_DOT4
//                                       v_dot4_i32_iu8 (gfx11, gfx12)
//   st_byte_perm   __byte_perm          v_perm_b32, selector translated portable byte-table
//   st_lut16x8     six __byte_perm      six v_perm_b32                  multiplexer tree
//   st_h2f         cvt.f32.f16          _Float16 conversion             portable (bit operations)
//   st_f2h         cvt.rn.f16.f32       _Float16 conversion (to nearest) portable (bit operations)
//   st_vsub4       __vsub4              portable (SWAR)                 portable (SWAR)
//   st_vsubss4     __vsubss4            portable                        portable
//   st_spin_pause  __nanosleep (sm_70+) s_sleep 1                       system-scope fence
//   shuffles       __shfl_*_sync, full  __shfl_* (non-sync)             __shfl_* (non-sync)
//   st_mma_f16_k16 mma.sync m16n8k16    shuffles + float fma            shuffles + float fma
//                  .f16, f32 sums (sm_80+ only on CUDA; below, and in the portable build, the twin)
//   st_ldsm_x4     ldmatrix .x4 (sm_80+) shuffles + loads                 shuffles + loads
//   (_trans)       (.trans)
//   st_f2h2        cvt.rn.f16x2.f32     two st_f2h                      two st_f2h
//   st_h2_add/fma  add/fma.rn.f16x2     float, rounded to half          float, rounded to half
//   st_wait_prior  griddepcontrol.wait  nothing                         nothing
//                  (sm_90+; st_launch_dependents, st_launch_begin alike)
#ifndef STRATA_GPU_COMPAT_INTRINSICS_H
#define STRATA_GPU_COMPAT_INTRINSICS_H

// --- int8 dot product ------------------------------------------------------------

// AMD targets with v_dot4_i32_i8 (dot1-insts), as checked against clang 22.
#if defined(__AMDGCN__) &&                                                                                   \
    (defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__) ||             \
     defined(__gfx950__) || defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) ||          \
     defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1033__) || defined(__gfx1034__) ||         \
     defined(__gfx1035__) || defined(__gfx1036__))
#define ST_AMD_SDOT4 1
// gfx11 and gfx12 dropped v_dot4_i32_i8 for v_dot4_i32_iu8 (dot8-insts), whose
// per-operand sign flags give the same signed product.
#elif defined(__AMDGCN__) && (defined(__GFX11__) || defined(__GFX12__))
#define ST_AMD_SUDOT4 1
#endif

// ST_HAS_DP4A is 1 in the device code where st_dp4a is one instruction; the
// host asks the probe (gpu_device_info.has_dp4a) and elsewhere takes the SWAR
// dot product of portable.h for the one-token matrix x vector products.
#if defined(STRATA_PORTABLE_INTRINSICS)
#define ST_HAS_DP4A 0
#elif (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610) || defined(ST_AMD_SDOT4) || defined(ST_AMD_SUDOT4) || \
    (defined(ST_TARGET_SPIRV) && defined(STRATA_SPIRV_DOT4))
#define ST_HAS_DP4A 1
#else
#define ST_HAS_DP4A 0
#endif

// c + the dot product of the four signed bytes of a and b, wrapping modulo 2^32
// (CUDA __dp4a).
static __device__ __forceinline__ int st_dp4a(int a, int b, int c) {
#if defined(STRATA_PORTABLE_INTRINSICS)
    return st_dp4a_portable(a, b, c);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#elif defined(__AMDGCN__) && defined(ST_AMD_SDOT4)
    return __builtin_amdgcn_sdot4(a, b, c, false); // clamp off: wraps like __dp4a
#elif defined(__AMDGCN__) && defined(ST_AMD_SUDOT4)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#elif defined(ST_TARGET_SPIRV) && defined(STRATA_SPIRV_DOT4)
    // OpSDot (SPV_KHR_integer_dot_product) never overflows for 4 x 8 bits; the
    // accumulation wraps through unsigned like __dp4a.
    return (int)((unsigned)c + (unsigned)dot_4x8packed_ss_int((unsigned)a, (unsigned)b));
#else
    return st_dp4a_portable(a, b, c);
#endif
}

// --- byte permute -----------------------------------------------------------------

// CUDA __byte_perm(x, y, s): see st_byte_perm_portable for the exact semantics
// (selector bit 3 of each nibble ignored).
static __device__ __forceinline__ unsigned st_byte_perm(unsigned x, unsigned y, unsigned s) {
#if defined(STRATA_PORTABLE_INTRINSICS)
    return st_byte_perm_portable(x, y, s);
#elif defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s);
#elif defined(__AMDGCN__)
    // v_perm_b32 (GFX8+) reads {S0, S1} with S1 as bytes 0-3 and one selector
    // byte per result byte; st_amd_perm_selector is exact for every s.
    return __builtin_amdgcn_perm(y, x, st_amd_perm_selector(s));
#else
    return st_byte_perm_portable(x, y, s);
#endif
}

// --- 16-entry byte table ----------------------------------------------------------------

// The 16-entry byte table {t0, t1, t2, t3} (entry e is byte e % 4 of te/4)
// looked up for the eight nibbles of q: byte k of lo is the entry of the low
// nibble of byte k of q, byte k of hi that of its high nibble (the IQ4
// codebook). Six byte permutes where the target has them; elsewhere the
// multiplexer tree of portable.h, cheaper than six emulated permutes.
static __device__ __forceinline__ void st_lut16x8(uint32_t q, uint32_t t0, uint32_t t1, uint32_t t2,
                                                  uint32_t t3, uint32_t &lo, uint32_t &hi) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && (defined(__CUDA_ARCH__) || defined(__AMDGCN__))
    ST_LUT16X8_BY_PERM(st_byte_perm, q, t0, t1, t2, t3, lo, hi);
#else
    st_lut16x8_portable(q, t0, t1, t2, t3, &lo, &hi);
#endif
}

// --- half precision -------------------------------------------------------------------
// Both conversions are exact or correctly rounded to nearest-even in hardware,
// so the native forms give the portable ones' bits (a nan's payload aside).

// IEEE binary16 bits (the low 16 of h) to float.
static __device__ __forceinline__ float st_h2f(uint32_t h) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
#elif !defined(STRATA_PORTABLE_INTRINSICS) && defined(__AMDGCN__)
    return (float)__builtin_bit_cast(_Float16, (unsigned short)h);
#else
    return st_h2f_portable(h);
#endif
}

// float to IEEE binary16 bits, to nearest with ties to even.
static __device__ __forceinline__ uint32_t st_f2h(float f) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__)
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#elif !defined(STRATA_PORTABLE_INTRINSICS) && defined(__AMDGCN__)
    return __builtin_bit_cast(unsigned short, (_Float16)f);
#else
    return st_f2h_portable(f);
#endif
}

// --- SWAR byte arithmetic -----------------------------------------------------------

// Per-byte a - b modulo 256 (CUDA __vsub4).
static __device__ __forceinline__ unsigned st_vsub4(unsigned a, unsigned b) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__)
    return __vsub4(a, b);
#else
    return st_vsub4_portable(a, b);
#endif
}

// Per-byte signed a - b saturated to [-128, 127] (CUDA __vsubss4).
static __device__ __forceinline__ unsigned st_vsubss4(unsigned a, unsigned b) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__)
    return __vsubss4(a, b);
#else
    return st_vsubss4_portable(a, b);
#endif
}

// --- spin-waiting -------------------------------------------------------------------

// One pause inside a spin-wait loop. On SPIR-V (and in the portable build) it
// is a system-scope fence, so a flag written by the host or another device
// becomes visible: Intel GPUs need it for the loop to make progress.
static __device__ __forceinline__ void st_spin_pause(void) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(100);
#elif !defined(STRATA_PORTABLE_INTRINSICS) && defined(__AMDGCN__)
    __builtin_amdgcn_s_sleep(1); // about 64 clocks
#else
    __threadfence_system();
#endif
}

// Evaluates pred() up to max_iters + 1 times with st_spin_pause() between
// tries; returns whether it became true. No spin in this project is unbounded
// (an unbounded spin can hang or reset a GPU): on false the caller gives up
// and reports, e.g. through an error flag the host reads.
template <typename Pred> static __device__ __forceinline__ bool st_spin_until(Pred pred, unsigned max_iters) {
    for (unsigned i = 0; i < max_iters; i++) {
        if (pred()) return true;
        st_spin_pause();
    }
    return pred();
}

// bool ST_SPIN_UNTIL(cond, max_iters): st_spin_until over the expression cond,
// re-evaluated each try (read flags through volatile or atomic loads).
#define ST_SPIN_UNTIL(cond, max_iters) st_spin_until([&]() -> bool { return (cond); }, (max_iters))

// --- shuffles and warp reductions ---------------------------------------------------
// Every lane of the warp takes part (full mask; HIP traps on a partial one) and
// width is explicit: a power of two <= ST_WARP_SIZE, lanes exchange within
// aligned groups of width lanes.

#if defined(ST_TARGET_CUDA)
#define ST_SHFL_XOR_(v, m, w) __shfl_xor_sync(0xffffffffu, (v), (m), (w))
#define ST_SHFL_DOWN_(v, d, w) __shfl_down_sync(0xffffffffu, (v), (d), (w))
#define ST_SHFL_IDX_(v, l, w) __shfl_sync(0xffffffffu, (v), (l), (w))
#else
#define ST_SHFL_XOR_(v, m, w) __shfl_xor((v), (m), (w))
#define ST_SHFL_DOWN_(v, d, w) __shfl_down((v), (d), (w))
#define ST_SHFL_IDX_(v, l, w) __shfl((v), (l), (w))
#endif

// v of lane (this lane ^ lane_mask).
static __device__ __forceinline__ float st_shfl_xor(float v, int lane_mask, int width) {
    return ST_SHFL_XOR_(v, lane_mask, width);
}
static __device__ __forceinline__ int st_shfl_xor(int v, int lane_mask, int width) {
    return ST_SHFL_XOR_(v, lane_mask, width);
}
static __device__ __forceinline__ unsigned st_shfl_xor(unsigned v, int lane_mask, int width) {
    return ST_SHFL_XOR_(v, lane_mask, width);
}
// v of lane (this lane + delta); lanes past the end of their group keep v.
static __device__ __forceinline__ float st_shfl_down(float v, int delta, int width) {
    return ST_SHFL_DOWN_(v, (unsigned)delta, width);
}
static __device__ __forceinline__ int st_shfl_down(int v, int delta, int width) {
    return ST_SHFL_DOWN_(v, (unsigned)delta, width);
}
static __device__ __forceinline__ unsigned st_shfl_down(unsigned v, int delta, int width) {
    return ST_SHFL_DOWN_(v, (unsigned)delta, width);
}
// v of lane src_lane of this lane's group (src_lane taken modulo width).
static __device__ __forceinline__ float st_shfl(float v, int src_lane, int width) {
    return ST_SHFL_IDX_(v, src_lane, width);
}
static __device__ __forceinline__ int st_shfl(int v, int src_lane, int width) {
    return ST_SHFL_IDX_(v, src_lane, width);
}
static __device__ __forceinline__ unsigned st_shfl(unsigned v, int src_lane, int width) {
    return ST_SHFL_IDX_(v, src_lane, width);
}

// Sum / max over each group of width lanes (butterfly: every lane of the group
// gets the result). The float sum's rounding depends on the order, which is the
// same on every target for a given width.
static __device__ __forceinline__ float st_warp_sum_f32(float v, int width) {
    for (int m = width >> 1; m > 0; m >>= 1) v += st_shfl_xor(v, m, width);
    return v;
}
// fmaxf semantics: a NaN lane loses to any number.
static __device__ __forceinline__ float st_warp_max_f32(float v, int width) {
    for (int m = width >> 1; m > 0; m >>= 1) v = fmaxf(v, st_shfl_xor(v, m, width));
    return v;
}
// Wraps modulo 2^32 on overflow.
static __device__ __forceinline__ int st_warp_sum_i32(int v, int width) {
    for (int m = width >> 1; m > 0; m >>= 1) v = (int)((unsigned)v + (unsigned)st_shfl_xor(v, m, width));
    return v;
}

// --- half-precision matrix tiles (tensor cores) --------------------------------------
// One warp's 16 x 8 tile C += A · B of half-precision A (16 x 16, row-major)
// and B (16 x 8, column-major) with float C, in the fragment layout of PTX's
// mma.sync m16n8k16 .f16 with .f32 accumulators: with g = lane / 4 and
// t = lane % 4 of the first 32 lanes, a[0] holds A row g, k 2t and 2t + 1 (two
// halves, the lower k in the low 16 bits), a[1] row g + 8 at the same k,
// a[2] and a[3] the same rows at k 2t + 8 ..; b[0] holds B column g, k 2t and
// 2t + 1, b[1] column g at k 2t + 8 ..; c[0], c[1] are C row g, columns 2t
// and 2t + 1, c[2], c[3] row g + 8 at the same columns. Every lane of the warp
// must call it (on a 64-lane wave each half is its own tile).
//
// ST_HAS_MMA is 1 in the device code of targets with the instruction (NVIDIA
// sm_80+); everywhere else, and in the portable build, the same function is a
// twin from shuffles and float multiply-adds (each lane gathers its rows and
// columns): float sums like the hardware's, rounded in another order, and no
// faster than plain arithmetic:
// the host asks the probe (gpu_device_info.has_mma) and takes the
// tensor-core kernels only where they are real.
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define ST_HAS_MMA 1
#else
#define ST_HAS_MMA 0
#endif

static __device__ __forceinline__ void st_mma_f16_k16(float (&c)[4], const uint32_t (&a)[4],
                                                      const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && ST_HAS_MMA
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    // this lane's halves as floats (af: a[0] low, high, a[1] low, high, ..),
    // then each lane gathers its rows' and columns' floats
    const int lane = (int)(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    float af[8], bf[4];
#pragma unroll
    for (int i = 0; i < 4; i++) af[2 * i] = st_h2f(a[i] & 0xffffu), af[2 * i + 1] = st_h2f(a[i] >> 16);
#pragma unroll
    for (int i = 0; i < 2; i++) bf[2 * i] = st_h2f(b[i] & 0xffffu), bf[2 * i + 1] = st_h2f(b[i] >> 16);
#pragma unroll
    for (int j = 0; j < 4; j++) { // k 2j, 2j + 1 and 2j + 8, 2j + 9
        float ar[8];
#pragma unroll
        for (int i = 0; i < 8; i++) ar[i] = st_shfl(af[i], 4 * g + j, 32);
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float bc[4];
#pragma unroll
            for (int i = 0; i < 4; i++) bc[i] = st_shfl(bf[i], 4 * (2 * t + e) + j, 32);
            c[e] = fmaf(ar[5], bc[3], fmaf(ar[4], bc[2], fmaf(ar[1], bc[1], fmaf(ar[0], bc[0], c[e]))));
            c[2 + e] =
                fmaf(ar[7], bc[3], fmaf(ar[6], bc[2], fmaf(ar[3], bc[1], fmaf(ar[2], bc[0], c[2 + e]))));
        }
    }
#endif
}

// Four 8 x 8 matrices of halves from shared memory, in the fragment layout
// above (PTX ldmatrix .x4): lane l gives, in off, the word offset from base of
// row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); r[i] receives row
// lane / 4 of matrix i, halves 2 (lane % 4) and the one after. base must
// point into shared memory, the same for every lane; every lane of the warp
// must call it (on a 64-lane wave each half on its own).
static __device__ __forceinline__ void st_ldsm_x4(uint32_t (&r)[4], const uint32_t *base, int off) {
#if defined(__CUDA_ARCH__) && ST_HAS_MMA
    const unsigned addr = (unsigned)__cvta_generic_to_shared(base + off);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
    const int lane = (int)(threadIdx.x % 32);
#pragma unroll
    for (int i = 0; i < 4; i++) r[i] = base[st_shfl(off, 8 * i + lane / 4, 32) + lane % 4];
#endif
}

// The same four 8 x 8 matrices transposed (PTX ldmatrix .x4 .trans): lane l
// gives the offset of row l % 8 of matrix l / 8 as above, and r[i] receives
// column lane / 4 of matrix i, rows 2 (lane % 4) and the one after (the lower
// row in the low 16 bits): the B fragment of st_mma_f16_k16 from a matrix
// stored k-major (a tile of value rows, say).
static __device__ __forceinline__ void st_ldsm_x4_trans(uint32_t (&r)[4], const uint32_t *base, int off) {
#if defined(__CUDA_ARCH__) && ST_HAS_MMA
    const unsigned addr = (unsigned)__cvta_generic_to_shared(base + off);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
    const int lane = (int)(threadIdx.x % 32), col = lane / 4, sh = 16 * (col % 2);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t w0 = base[st_shfl(off, 8 * i + 2 * (lane % 4), 32) + col / 2];
        const uint32_t w1 = base[st_shfl(off, 8 * i + 2 * (lane % 4) + 1, 32) + col / 2];
        r[i] = ((w0 >> sh) & 0xffffu) | ((w1 >> sh) << 16);
    }
#endif
}

// Two floats to a pair of halves (lo in the low 16 bits), each rounded to
// nearest-even: the bits of two st_f2h.
static __device__ __forceinline__ uint32_t st_f2h2(float lo, float hi) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return st_f2h(lo) | st_f2h(hi) << 16;
#endif
}

// Per half of a pair: a + b, and a · b + c (fused), rounded to nearest-even.
// The twins compute in float (a product of two halves is exact there) and
// round that to half: exact sums give the same bits, a multiply-add may differ
// from the fused hardware result by its double rounding (one unit in the last
// place, rarely).
static __device__ __forceinline__ uint32_t st_h2_add(uint32_t a, uint32_t b) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 530
    uint32_t r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return st_f2h2(st_h2f(a & 0xffffu) + st_h2f(b & 0xffffu), st_h2f(a >> 16) + st_h2f(b >> 16));
#endif
}
static __device__ __forceinline__ uint32_t st_h2_fma(uint32_t a, uint32_t b, uint32_t c) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 530
    uint32_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    return st_f2h2(fmaf(st_h2f(a & 0xffffu), st_h2f(b & 0xffffu), st_h2f(c & 0xffffu)),
                   fmaf(st_h2f(a >> 16), st_h2f(b >> 16), st_h2f(c >> 16)));
#endif
}

// --- kernels that overlap the one before them ----------------------------------------
// On targets with programmatic dependent launch (CUDA sm_90+; not in the
// portable build) a kernel launched with ST_LAUNCH while gpu_launch_overlap is
// set may start while the kernel before it on its stream is still running.
// Such a kernel calls st_launch_dependents() to let the kernel after it start
// likewise, and st_wait_prior() before it reads memory an earlier kernel wrote
// or writes memory an earlier kernel may read; before that it may only read
// what no kernel writes (weights). st_launch_begin() does both at a kernel's
// start. Elsewhere all three are no-ops and launches run one after another.
// ST_HAS_PDL is 1 in the device code that waits; the host asks the probe
// (gpu_device_info.has_pdl) before it sets gpu_launch_overlap.
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ST_HAS_PDL 1
#else
#define ST_HAS_PDL 0
#endif

static __device__ __forceinline__ void st_wait_prior(void) {
#if defined(__CUDA_ARCH__) && ST_HAS_PDL
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void st_launch_dependents(void) {
#if defined(__CUDA_ARCH__) && ST_HAS_PDL
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A hint that the line holding p will be read soon: brought into L2 on CUDA
// (prefetch.global.L2), nothing elsewhere. p must point into an allocation.
static __device__ __forceinline__ void st_prefetch_l2(const void *p) {
#if !defined(STRATA_PORTABLE_INTRINSICS) && defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

static __device__ __forceinline__ void st_launch_begin(void) {
    st_launch_dependents();
    st_wait_prior();
}

#endif
