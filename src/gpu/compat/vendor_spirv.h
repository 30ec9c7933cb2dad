// vendor_spirv.h: the SPIR-V side of the compat layer, HIP on chipStar
// (included by compat.h when __HIP_PLATFORM_SPIRV__ is defined). chipStar
// implements the hip* runtime, so the gpu* names come from vendor_hip.h; this
// file includes chipStar's runtime and fixes the per-target constants.
//
// CI has no chipStar: it compiles every kernel source for spirv64 against a
// minimal declaration of chipStar's device API (tests/compat/spirv_device_api.h,
// force-included, which defines STRATA_SPIRV_DEVICE_API) and validates the
// module with spirv-val. See docs/BACKENDS.md for what that proves.
#ifndef STRATA_GPU_COMPAT_VENDOR_SPIRV_H
#define STRATA_GPU_COMPAT_VENDOR_SPIRV_H

#if !defined(STRATA_SPIRV_DEVICE_API)
#include <hip/hip_runtime.h>
#endif

#define ST_VENDOR_NAME "spirv"

// chipStar compiles kernels with a required sub-group size of 32 (Intel's
// cl_intel_required_subgroup_size); the device layer refuses a device whose
// reported warpSize differs.
#define ST_WARP_SIZE_TARGET 32
#define ST_WARP_SIZE_HOST_PASS 32
// Intel Arc and chipStar's other targets give a work-group 64 KiB of local memory.
#define ST_MAX_DYN_SMEM (64 * 1024)

#if defined(STRATA_SPIRV_DOT4)
// OpenCL C's cl_khr_integer_dot_product builtin: the signed dot product of four
// packed bytes. Declared with C++ linkage it mangles to the OpenCL name
// (_Z20dot_4x8packed_ss_intjj), which LLVM's SPIR-V backend lowers to OpSDot
// with PackedVectorFormat4x8Bit when SPV_KHR_integer_dot_product is enabled.
// Only for devices that report cl_khr_integer_dot_product (docs/BACKENDS.md).
__device__ int dot_4x8packed_ss_int(unsigned a, unsigned b);
#endif

// LLVM's SPIR-V path refuses (as an error under -Werror) to unroll a loop whose
// count is known only at run time: ST_UNROLL asks nothing there (compat.h).
#define ST_UNROLL(n)

#include "vendor_hip.h"

#endif
