// compat.h: the one header every GPU source (src/gpu/*.cu) includes. It picks
// the vendor from one compiler define and nothing else:
//
//   __HIP_PLATFORM_SPIRV__          HIP on chipStar (SPIR-V)  vendor_spirv.h
//   __HIP_PLATFORM_AMD__ / __HIP__  HIP on AMD gfx           vendor_hip.h
//   __CUDACC__ without __HIP__       CUDA (nvcc)              vendor_cuda.h
//
// and gives kernels, in vendor-neutral names:
//   - the gpu* runtime names (gpuMalloc, gpuStream_t, ...) and GPU_CHECK;
//   - ST_WARP_SIZE, ST_MAX_DYN_SMEM, ST_MIN_BLOCKS;
//   - st_dp4a, st_byte_perm, st_vsub4, st_vsubss4 (native where the target has
//     the instruction, the portable.h form elsewhere or when
//     STRATA_PORTABLE_INTRINSICS is defined);
//   - st_shfl_xor / st_shfl_down / st_shfl, st_warp_sum_f32 / st_warp_max_f32 /
//     st_warp_sum_i32 (full mask, explicit width);
//   - st_spin_pause and the bounded spin ST_SPIN_UNTIL;
//   - st_mma_f16_k16, a warp's half-precision 16 x 8 tile product with float
//     sums, and st_ldsm_x4, its fragments from shared memory (tensor cores
//     where ST_HAS_MMA, shuffle twins elsewhere); half pairs (st_f2h2,
//     st_h2_add, st_h2_fma);
//   - ST_UNROLL(n), a request to unroll a loop n times where the target's
//     compiler takes it (a pragma; nothing on SPIR-V);
//   - ST_LAUNCH, and st_launch_begin / st_launch_dependents / st_wait_prior
//     in the kernels it launches: launches that may overlap the kernel before
//     them where the target can (ST_HAS_PDL).
// Nothing else in src/gpu may name a vendor: tools/check-compat enforces it.
// docs/BACKENDS.md lists the targets and what each one does.
#ifndef STRATA_GPU_COMPAT_H
#define STRATA_GPU_COMPAT_H

#include <stdio.h>

#if defined(__HIP_PLATFORM_SPIRV__)
#define ST_TARGET_SPIRV 1
#include "vendor_spirv.h"
#elif defined(__SPIRV__)
#error                                                                                                       \
    "SPIR-V device compile without __HIP_PLATFORM_SPIRV__: build with chipStar's hipcc or pass -D__HIP_PLATFORM_SPIRV__"
#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#define ST_TARGET_AMD 1
#include "vendor_hip.h"
#elif defined(__CUDACC__)
#define ST_TARGET_CUDA 1
#include "vendor_cuda.h"
#else
#error "compat.h is for GPU sources built by nvcc or a HIP compiler; host C includes portable.h at most"
#endif

// ST_WARP_SIZE: lanes per warp (wavefront, sub-group) of the target being
// compiled, an integer constant expression in device code: 32 on CUDA and
// SPIR-V, 64 on AMD gfx9 (GCN/CDNA), 32 on gfx10+ (RDNA, wave32 build).
// One HIP build holds code for several gfx targets, so the host side has no
// single warp size: host code must take the device's warp size from the device
// layer at run time. To keep that from compiling by accident on any vendor, the
// host pass defines ST_WARP_SIZE as a call to a __device__ constexpr function:
// kernel bodies still compile, host code naming ST_WARP_SIZE is a compile error.
// It is therefore not usable in #if; write `if (ST_WARP_SIZE == 64)`, which
// folds away.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define ST_WARP_SIZE ST_WARP_SIZE_TARGET
#else
__device__ constexpr int st_warp_size_device_only(void) { return ST_WARP_SIZE_HOST_PASS; }
#define ST_WARP_SIZE (st_warp_size_device_only())
#endif

// ST_UNROLL(n), before a loop: `#pragma unroll n` where the vendor header
// has not defined it away (vendor_spirv.h).
#ifndef ST_UNROLL
#define ST_PRAGMA(x) _Pragma(#x)
#define ST_UNROLL(n) ST_PRAGMA(unroll n)
#endif

// ST_MIN_BLOCKS(n): the minimum-blocks argument of __launch_bounds__, n
// unless the target's register file would force a kernel so bounded to spill
// (vendor_hip.h).
#ifndef ST_MIN_BLOCKS
#define ST_MIN_BLOCKS(n) (n)
#endif

#include "portable.h"
#include "intrinsics.h"

// Records a GPU runtime failure as the backend's last error (defined by the GPU
// backend, src/gpu/gpu_backend.cu). msg is copied; the caller keeps it.
extern "C" void gpu_record_error(const char *msg);

// Whether ST_LAUNCH lets a kernel start while the one before it on its stream
// still runs (vendor_cuda.h); set by the GPU backend where the device runs code
// with ST_HAS_PDL, unless STRATA_GPU_OVERLAP=0. The kernels so launched wait
// for their inputs with st_wait_prior (intrinsics.h).
extern bool gpu_launch_overlap;

// GPU_CHECK(call): evaluates a gpu* runtime call once; on failure records
// "<call> failed at <file>:<line>: <error name> (<error string>)" through
// gpu_record_error and yields -1, else 0. It never exits, so callers return:
//   if (GPU_CHECK(gpuMalloc(&p, n))) return -1;
static inline int st_gpu_check(gpuError_t err, const char *call, const char *file, int line) {
    if (err == gpuSuccess) return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s failed at %s:%d: %s (%s)", call, file, line, gpuGetErrorName(err),
             gpuGetErrorString(err));
    gpu_record_error(msg);
    return -1;
}
#define GPU_CHECK(call) st_gpu_check((call), #call, __FILE__, __LINE__)

#endif
