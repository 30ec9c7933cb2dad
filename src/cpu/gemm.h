// gemm.h: quantized matrix products of the fast CPU backend on row-interleaved
// ("repacked") weights. Private to src/cpu/ and its tests.
//
// prepare_weight repacks a weight of a supported type once: its rows are cut
// into groups of GEMM_R = 16 (the last one padded with zero rows), and inside a
// group each 32-element block of the 16 rows is stored word-interleaved: 4-byte
// word j of row r sits at [j][r], so one 64-byte load holds word j of all 16
// rows and one integer dot-product instruction (vpdpbusd: 4 unsigned weight bytes
// × 4 signed activation bytes, summed per 32-bit lane) advances 16 rows' dot
// products by 4 elements against a broadcast activation word. Quants are kept
// unsigned (Q4 nibbles as they are, Q8_0 plus 128, Q6_K's 6 bits as they are)
// and every offset moves into a "min" term paid with the activation block sums.
// Scales stay bit-exact: fp16 as stored, K-quant sub-block scales as 8-bit ints
// expanded at run time, so the repacked weight dequantizes to the same values.
//
// Activations are quantized once per product to int8 blocks of 32 with a float
// scale d = max|x|/127 and the block's s = d·Σq; for the K types the max is
// taken over the 256 elements of a super-block, so its 8 blocks share one d
// (as llama.cpp's Q8_K blocks do) and a kernel may apply d once per
// super-block instead of once per block and token. For a weight row with block
// scale dw and min mw (x = dw·q + mw) the product is
//     Σ_blocks  Σq_w·q_a · (dw·da)  +  mw · s.
// Where the min is a fixed multiple of the scale (Q4_0: −8·dw, Q8_0: −128·dw,
// Q6_K: −32·dw per 16) it is folded into the integer sum instead: the quantizer
// stores that multiple of Σq_a ("bias") and the kernels start the block's sum
// from it, saving a float multiply-add per block and token.
//
// Kernels (one per type) exist for AMX int8 tiles (prompts), AVX-512 VNNI (16 rows
// in a zmm), AVX-VNNI and AVX2 (two halves of 8 rows in ymm registers), and in
// plain C; the set used is picked at run time from CPUID (gemm_isa_best), never
// above what the CPU (and the OS) allows.
// Every kernel is checked against the scalar one and against a double-precision
// product of the dequantized operands (tests/test_gemm.c).
#ifndef STRATA_GEMM_H
#define STRATA_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "format/quant.h"
#include "util.h"

#define GEMM_R 16  // weight rows per interleaved group
#define GEMM_QK 32 // activation block

// --- repacked blocks (all sizes multiples of 64 bytes where a group holds several) ---

// Q4_0, Q4_1: a group is [scale region][nb blocks of quants]; the scale region
// holds, per block, d[16] (Q4_0) or d[16], m[16] (Q4_1), fp16, padded to 64 bytes.
// qs[j][r]: word j of row r's 16 nibble bytes (GGUF order: low nibble element
// 4j+i, high nibble element 16+4j+i).
struct gemm_q4_qs {
    uint8_t qs[4][GEMM_R][4];
};
// Q8_0: scale region d[nb][16] fp16, then per block qs[j][r]: bytes 4j..4j+3 of
// row r plus 128.
struct gemm_q8_qs {
    uint8_t qs[8][GEMM_R][4];
};
// Q4_K super-block of 16 rows (x = d·sc·q − dmin·m per 32-element sub-block;
// sub-block j's nibbles in the Q4_0 order of struct gemm_q4_qs).
struct gemm_q4_K {
    uint16_t d[GEMM_R];
    uint16_t dmin[GEMM_R];
    uint8_t sc[8][GEMM_R];
    uint8_t m[8][GEMM_R];
    uint8_t qs[8][4][GEMM_R][4];
};
// Q6_K super-block of 16 rows (x = d·sc·(q − 32) per 16 elements, q in [0, 63]).
// Per 32-element block b: ql as the Q4_0 nibble order, and qh[k][r] byte i holding
// in bits 2l..2l+1 the top two bits of element 4(4k+l)+i.
struct gemm_q6_K {
    float d[GEMM_R];
    int8_t sc[16][GEMM_R];
    uint8_t ql[8][4][GEMM_R][4];
    uint8_t qh[8][2][GEMM_R][4];
};
_Static_assert(sizeof(struct gemm_q4_K) % 64 == 0, "gemm_q4_K keeps 64-byte alignment");
_Static_assert(sizeof(struct gemm_q6_K) % 64 == 0, "gemm_q6_K keeps 64-byte alignment");

// The types with repacked kernels, as indexes into kernel tables.
enum gemm_type { GEMM_Q4_0, GEMM_Q4_1, GEMM_Q8_0, GEMM_Q4_K, GEMM_Q6_K, GEMM_N_TYPES };

// A repacked weight (rows, cols). data: n_groups × group_bytes, 64-byte aligned;
// from gemm_weight_init (gemm_weight_free frees it) or a cache's arena.
struct gemm_weight {
    enum ggml_type type;
    enum gemm_type gt;
    int64_t rows, cols;
    int64_t n_groups;   // ceil(rows / 16)
    size_t group_bytes; // bytes of one group of 16 rows
    size_t scale_bytes; // Q4_0, Q4_1, Q8_0: bytes of the scale region of a group
    uint8_t *data;
};

// Quantized activations of n tokens × cols (cols a multiple of 32). Owned by the
// caller; gemm_act_bytes sizes the one buffer they all live in.
// Every array holds n + 16 tokens, the 16 past the batch zeroed, so a kernel may
// read a whole 16-token tile from any token of the batch.
struct gemm_act {
    int n;
    int64_t cols;
    int8_t *qs;    // (n, cols)
    float *d;      // (n, cols/32) block scales
    float *s;      // (n, cols/32) d · Σq of each block
    int32_t *bias; // (n, cols/32 · bias_n): bias_mul · Σq over each block (bias_n 1) or
                   // each half (bias_n 2); NULL when bias_n is 0
    int bias_n;
    int32_t bias_mul;
    int16_t *qsum;     // (n, cols/32) Σq of each block for Q4_K (its kernels' integer min
                       // term, with the super-block's shared d), else NULL
    bool half_scales;  // d and s rounded to half precision (see gemm_act_scales)
    bool super_scales; // the K types': each 8 blocks (256 elements) share one d
};

// Block i's scale d = amax/127 (amax: the largest |x| of the block, or of its
// super-block with super_scales) and s = d·Σq. For the types whose GGUF dot
// products take Q8_0 or Q8_1 activation blocks (Q4_0, Q4_1, Q8_0) both are
// rounded to half precision, as those blocks store them (s from the unrounded
// d), so the products equal llama.cpp's given the same input; the K types keep
// them in float.
static inline void gemm_act_scales(struct gemm_act *a, size_t i, float amax, int sum) {
    const float d = amax / 127.0f;
    if (a->half_scales) {
        a->d[i] = st_fp16_to_f32(st_f32_to_fp16(d));
        a->s[i] = st_fp16_to_f32(st_f32_to_fp16(d * (float)sum));
    } else {
        a->d[i] = d;
        a->s[i] = d * (float)sum;
    }
}

// Blocks of 32 that share one activation scale: 8 with super_scales, else 1.
static inline int64_t gemm_act_span(const struct gemm_act *a) { return a->super_scales ? 8 : 1; }

// Whether activations for weights of type gt share one scale per 256-element
// super-block (gemm_act.super_scales): the K types'.
static inline bool gemm_super_scales(enum gemm_type gt) { return gt == GEMM_Q4_K || gt == GEMM_Q6_K; }

// Kernel sets, each a superset of the CPU features of the one before. AMX: AMX
// int8 tiles for prompts, AVX-512 VNNI for single tokens and Q6_K.
enum gemm_isa {
    GEMM_ISA_SCALAR,
    GEMM_ISA_AVX2,
    GEMM_ISA_AVXVNNI,
    GEMM_ISA_AVX512,
    GEMM_ISA_AMX,
    GEMM_ISA_COUNT
};

// y[t·ldy + r] = row r of w · token t, for tokens [t0, t0+nt) and the rows of
// groups [g0, g1) (rows past w->rows are not written).
typedef void (*gemm_kernel_fn)(const struct gemm_weight *w, const struct gemm_act *a, int t0, int nt,
                               int64_t g0, int64_t g1, float *y, int64_t ldy);
// Quantizes rows [t0, t1) of x (n, cols) into a (whose pointers are set).
typedef void (*gemm_quantize_fn)(const float *x, struct gemm_act *a, int t0, int t1);

// --- repack.c ---------------------------------------------------------------------------

// Whether type t has repacked kernels; if so *gt gets its index.
bool gemm_type_of(enum ggml_type t, enum gemm_type *gt);
// Repacks rows [r0, r1) of the GGUF weight data (rows × cols of type t, row_bytes
// apart) into w, whose data was sized by gemm_weight_init. r0, r1 multiples of
// 16 (or r1 = rows).
void gemm_repack_rows(struct gemm_weight *w, const void *src, size_t row_bytes, int64_t r0, int64_t r1);
// Fills w's shape fields (data NULL). Returns 0, or -1 with a message
// (unsupported type, cols not a multiple of the block).
int gemm_weight_layout(struct gemm_weight *w, enum ggml_type t, int64_t rows, int64_t cols);
// Bytes of w's data: n_groups × group_bytes.
size_t gemm_weight_bytes(const struct gemm_weight *w);
// gemm_weight_layout, then data allocated (zeroed) with aligned_alloc. Returns 0,
// or -1 with a message (as layout, or no memory). gemm_weight_free frees it.
int gemm_weight_init(struct gemm_weight *w, enum ggml_type t, int64_t rows, int64_t cols);
void gemm_weight_free(struct gemm_weight *w);

// Bytes of one buffer holding the activations of n tokens × cols for weights of
// type gt, and the pointers into buf (64-byte aligned) and bias fields it sets in a.
size_t gemm_act_bytes(int n, int64_t cols, enum gemm_type gt);
void gemm_act_layout(struct gemm_act *a, void *buf, int n, int64_t cols, enum gemm_type gt);

// --- dispatch (gemm.c) -----------------------------------------------------------------

// The best kernel set this CPU runs (CPUID and OS support), lowered by the
// environment variable STRATA_CPU_ISA=scalar|avx2|avxvnni|avx512|amx if set.
// The first call asks Linux for this process's AMX permission, which threads
// started before it do not get: call it before starting threads that run kernels.
enum gemm_isa gemm_isa_best(void);
// Whether this CPU can run kernels of isa (and this build holds them).
bool gemm_isa_available(enum gemm_isa isa);
const char *gemm_isa_name(enum gemm_isa isa);
// The kernel of type gt for isa and a batch of n tokens (AMX takes batches of 16
// and more, and not Q6_K: else the AVX-512 one), and the activation quantizer;
// isa must be available.
gemm_kernel_fn gemm_kernel(enum gemm_isa isa, enum gemm_type gt, int n);
gemm_quantize_fn gemm_quantizer(enum gemm_isa isa);
// Tokens of one register tile of isa's kernels (used to size cache blocks).
int gemm_tile_tokens(enum gemm_isa isa);

// --- repacked weights of a backend, and the threaded product (gemm.c) ---------------

struct threadpool;
struct weight;
struct gemm_cache;

struct gemm_cache *gemm_cache_init(void);
// Frees every repacked weight, then the cache.
void gemm_cache_free(struct gemm_cache *c);
// Repacks w (a GGUF weight) unless its type has no repacked kernels, it is a
// stack of experts, or its data
// is already in the cache; tp's threads share the work. Returns 0, or -1 with a
// message naming the weight.
int gemm_cache_add(struct gemm_cache *c, struct threadpool *tp, const struct weight *w);
// The repacked copy of the weight whose GGUF data is `data`, or NULL.
const struct gemm_weight *gemm_cache_find(const struct gemm_cache *c, const void *data);
void gemm_cache_remove(struct gemm_cache *c, const void *data);

// y (n, w->rows) = x (n, w->cols) · wᵀ with isa's kernels on tp's threads: the
// activations are quantized into *scratch (grown to fit, 64-byte aligned, owned
// by the caller), then chunks of (token block, row groups) are shared out.
void gemm_matmul(struct threadpool *tp, enum gemm_isa isa, const struct gemm_weight *w, const float *x,
                 float *y, int n, void **scratch, size_t *scratch_cap);
// The most weights gemm_matmul_multi takes at once.
#define GEMM_MAX_PRODUCTS 4
// An RMS norm taken in the products' first job: out (n, cols) =
// vec_rms_norm(x)·g, each row quantized for the products while it is in cache.
// out may be x.
struct gemm_norm {
    const float *g; // (cols)
    float eps;
    float *out;
};
// y[i] (n, w[i]->rows) = x · w[i]ᵀ for the n_w ≤ GEMM_MAX_PRODUCTS weights (all
// of x's cols) as gemm_matmul, in two jobs for all of them: x quantized once per
// weight type, then the chunks of every product shared out together. With
// norm (else NULL), the products take norm->out, the normed x, made row by row
// in the first job.
void gemm_matmul_multi(struct threadpool *tp, enum gemm_isa isa, const struct gemm_weight *const *w, int n_w,
                       const float *x, const struct gemm_norm *norm, float *const *y, int n, void **scratch,
                       size_t *scratch_cap);

// Per-ISA tables (gemm_scalar.c, gemm_avx2.c, gemm_avxvnni.c, gemm_avx512.c).
extern const gemm_kernel_fn gemm_kernels_scalar[GEMM_N_TYPES];
void gemm_quantize_scalar(const float *x, struct gemm_act *a, int t0, int t1);
#if defined(__x86_64__)
extern const gemm_kernel_fn gemm_kernels_avx2[GEMM_N_TYPES];
extern const gemm_kernel_fn gemm_kernels_avxvnni[GEMM_N_TYPES];
extern const gemm_kernel_fn gemm_kernels_avx512[GEMM_N_TYPES];
extern const gemm_kernel_fn gemm_kernels_amx[GEMM_N_TYPES]; // NULL where AMX does not take the type
void gemm_quantize_avx2(const float *x, struct gemm_act *a, int t0, int t1);
void gemm_quantize_avx512(const float *x, struct gemm_act *a, int t0, int t1);
#endif

#endif
