#!/bin/sh
# test_check_compat.sh: tools/check-compat catches each kind of portability
# violation when it is planted in a scratch copy of the GPU tree, lets a file of
# look-alikes that are fine through, and passes the repository's own tree.
# Prints "RESULT passed failed" like the C tests.
cd "$(dirname "$0")/.." || exit 1
pass=0
fail=0
scratch=$(mktemp -d "${TMPDIR:-/tmp}/check-compat-test.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/src/gpu" "$scratch/tests/compat"
cp -R src/gpu/compat "$scratch/src/gpu/"
cp tests/compat/*.cu "$scratch/tests/compat/"
intrinsics="$scratch/src/gpu/compat/intrinsics.h"
cp "$intrinsics" "$scratch/intrinsics.orig"

ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; sed 's/^/    /' "$scratch/out" | head -n 10; }

# expect_clean NAME: the scratch tree must pass.
expect_clean() {
    if sh tools/check-compat "$scratch" >"$scratch/out" 2>&1; then ok "$1"; else bad "$1"; fi
}

# plant RULE NAME: the kernel text on stdin, in a fresh scratch kernel file,
# must be reported under RULE at the line holding the marker VIOLATION.
plant() {
    rule=$1 name=$2
    cat >"$scratch/src/gpu/planted.cu"
    want=$(grep -n 'VIOLATION' "$scratch/src/gpu/planted.cu" | head -n 1 | cut -d: -f1)
    check_caught "$rule" "$name" "src/gpu/planted.cu:$want: $rule:"
    rm -f "$scratch/src/gpu/planted.cu"
}

# plant_compat RULE NAME: the text on stdin is inserted into the compat layer's
# intrinsics.h (before its closing #endif) and must be reported there.
plant_compat() {
    rule=$1 name=$2
    sed '$d' "$scratch/intrinsics.orig" >"$intrinsics"
    cat >>"$intrinsics"
    echo '#endif' >>"$intrinsics"
    want=$(grep -n 'VIOLATION' "$intrinsics" | head -n 1 | cut -d: -f1)
    check_caught "$rule" "$name" "src/gpu/compat/intrinsics.h:$want: $rule:"
    cp "$scratch/intrinsics.orig" "$intrinsics"
}

check_caught() {
    if sh tools/check-compat "$scratch" >"$scratch/out" 2>&1; then
        bad "$2: not caught"
    elif grep -qF "$3" "$scratch/out"; then
        ok "$2"
    else
        bad "$2: reported, but not as '$3'"
    fi
}

expect_clean "the compat layer and its tests pass"

# --- names without a mapping
plant unmapped-name "gpu* name missing from vendor_hip.h" <<'EOF'
#include "compat/compat.h"
void f(void *d, gpuStream_t s) {
    gpuMemcpy2DAsync(d, 0, d, 0, 0, 0, gpuMemcpyDeviceToDevice, s); // VIOLATION
}
EOF
plant unmapped-name "CUDA runtime name" <<'EOF'
#include "compat/compat.h"
void f(void *d) { cudaMemset(d, 0, 4); } // VIOLATION
EOF
plant unmapped-name "CUDA library name" <<'EOF'
#include "compat/compat.h"
void f(void) {
    cublasHandle_t h; // VIOLATION
}
EOF
plant vendor-code "vendor header outside compat" <<'EOF'
#include <cuda_fp16.h> // VIOLATION
EOF
plant vendor-code "CUDA intrinsic with a compat form" <<'EOF'
#include "compat/compat.h"
__device__ int f(int a, int b) { return __dp4a(a, b, 0); } // VIOLATION
EOF
plant vendor-code "raw shuffle outside compat" <<'EOF'
#include "compat/compat.h"
__device__ float f(float v) { return __shfl_xor_sync(0xffffffffu, v, 1, 16); } // VIOLATION
EOF

# --- builtins and inline asm
plant unguarded-asm "AMD builtin in a kernel" <<'EOF'
#include "compat/compat.h"
#if defined(__AMDGCN__)
__device__ unsigned f(unsigned a) { return __builtin_amdgcn_perm(a, a, 0x0c0c0c0cu); } // VIOLATION
#endif
EOF
plant unguarded-asm "NVVM builtin in a kernel" <<'EOF'
__device__ int f(void) { return __nvvm_read_ptx_sreg_laneid(); } // VIOLATION
EOF
plant unguarded-asm "PTX asm in a kernel" <<'EOF'
__device__ void f(void) {
    asm volatile("membar.gl;"); // VIOLATION
}
EOF
plant_compat unguarded-asm "AMD builtin in compat without a guard" <<'EOF'
static __device__ void st_planted(void) { __builtin_amdgcn_s_sleep(2); } // VIOLATION
EOF
plant_compat unguarded-asm "AMD builtin in compat under another target's guard" <<'EOF'
#if defined(__CUDA_ARCH__)
static __device__ void st_planted(void) { __builtin_amdgcn_s_sleep(2); } // VIOLATION
#endif
EOF
plant_compat unguarded-asm "AMD builtin in compat under a negated guard" <<'EOF'
#if !defined(__AMDGCN__)
static __device__ void st_planted(void) { __builtin_amdgcn_s_sleep(2); } // VIOLATION
#endif
EOF
plant_compat unguarded-asm "AMD builtin in the #else of an AMD guard" <<'EOF'
#if defined(__gfx906__)
static __device__ void st_planted(void) { }
#else
static __device__ void st_planted(void) { __builtin_amdgcn_s_sleep(2); } // VIOLATION
#endif
EOF
plant_compat unguarded-asm "PTX asm in compat without __CUDA_ARCH__" <<'EOF'
static __device__ void st_planted(void) { asm("membar.gl;"); } // VIOLATION
EOF

# --- warp-size literals
plant warp-literal "warpSize" <<'EOF'
#include "compat/compat.h"
__device__ int f(void) { return threadIdx.x % warpSize; } // VIOLATION
EOF
plant warp-literal "a warp-size macro" <<'EOF'
#define WARP_SIZE 32 // VIOLATION
EOF
plant warp-literal "a warp-size variable" <<'EOF'
static const int wave_size = 64; // VIOLATION
EOF
plant warp-literal "lane from threadIdx % 32" <<'EOF'
#include "compat/compat.h"
__device__ int f(void) {
    const int lane = threadIdx.x % 32; // VIOLATION
    return lane;
}
EOF
plant warp-literal "lane mask & 31" <<'EOF'
__device__ int f(int tid) {
    int lane_id = tid & 31; // VIOLATION
    return lane_id;
}
EOF
plant warp-literal "warp index >> 5" <<'EOF'
__device__ int f(int tid) {
    int warp = tid >> 5; // VIOLATION
    return warp;
}
EOF
plant warp-literal "reduction width 32" <<'EOF'
#include "compat/compat.h"
__device__ float f(float v) { return st_warp_sum_f32(v, 32); } // VIOLATION
EOF
plant warp-literal "shuffle width 64 on a continued line" <<'EOF'
#include "compat/compat.h"
__device__ float f(float v) {
    return st_shfl_xor(v, 1, // VIOLATION
                       64);
}
EOF

# --- shuffle widths and masks
plant shuffle-mask "shuffle without a width" <<'EOF'
#include "compat/compat.h"
__device__ float f(float v) { return st_shfl_xor(v, 1); } // VIOLATION
EOF
plant shuffle-mask "reduction without a width, over two lines" <<'EOF'
#include "compat/compat.h"
__device__ float f(float v) {
    return st_warp_max_f32( // VIOLATION
        v);
}
EOF
plant shuffle-mask "__activemask" <<'EOF'
__device__ unsigned f(void) { return __activemask(); } // VIOLATION
EOF
plant_compat shuffle-mask "partial shuffle mask in compat" <<'EOF'
#if defined(ST_TARGET_CUDA)
static __device__ float st_planted(float v) { return __shfl_xor_sync(0x0000ffffu, v, 1, 16); } // VIOLATION
#endif
EOF
plant_compat shuffle-mask "sync shuffle without a width in compat" <<'EOF'
#if defined(ST_TARGET_CUDA)
static __device__ float st_planted(float v) { return __shfl_down_sync(0xffffffffu, v, 1); } // VIOLATION
#endif
EOF
plant_compat shuffle-mask "partial ballot mask in compat" <<'EOF'
#if defined(ST_TARGET_CUDA)
static __device__ unsigned st_planted(unsigned m, int p) { return __ballot_sync(m, p); } // VIOLATION
#endif
EOF

# --- look-alikes that are fine
cat >"$scratch/src/gpu/fine.cu" <<'EOF'
// A comment may name __builtin_amdgcn_perm, asm("x"), cudaMalloc and warpSize.
#include "compat/compat.h"
#define QK 32
static const char *msg = "cudaMalloc and __dp4a in a string are text";
static const int n_warps = 32; // a count of warps, not a warp size
__global__ void k(const int *a, float *out, int n) {
    const int lane = threadIdx.x % ST_WARP_SIZE;
    const int iqs = threadIdx.x % QK;
    const int blk = threadIdx.x / 32; // compat-ok: 32 is the quant block here
    float v = st_warp_sum_f32((float)a[blk * QK + iqs], ST_WARP_SIZE);
    v = st_shfl_down(v, 1,
                     ST_WARP_SIZE);
    if (lane == 0 && blk < n) out[blk] = v + (float)st_dp4a(a[0], a[1], 0);
}
int host_warp(const gpuDeviceProp *prop) { return prop->warpSize + (msg[0] == 'c') * n_warps; }
EOF
expect_clean "look-alikes in comments, strings, host props and named constants pass"
rm -f "$scratch/src/gpu/fine.cu"

# --- the repository's own GPU sources
if sh tools/check-compat >"$scratch/out" 2>&1; then ok "the repository's GPU tree passes"
else bad "the repository's GPU tree passes"; fi

echo "RESULT $pass $fail"
[ "$fail" -eq 0 ]
