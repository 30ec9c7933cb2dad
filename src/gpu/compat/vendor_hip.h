// vendor_hip.h: the HIP side of the compat layer (included by compat.h, and by
// vendor_spirv.h for the names). Maps the vendor-neutral gpu* runtime names to
// hip*, which both HIP platforms implement: AMD's runtime and chipStar. On AMD
// it also includes the HIP runtime and fixes the per-target constants. Every
// name mapped here has its twin in vendor_cuda.h, in the same order;
// tools/check-compat fails the build when a gpu* or cuda* name used under
// src/gpu has no mapping here.
#ifndef STRATA_GPU_COMPAT_VENDOR_HIP_H
#define STRATA_GPU_COMPAT_VENDOR_HIP_H

#if !defined(__HIP_PLATFORM_SPIRV__)
#include <hip/hip_runtime.h>

#define ST_VENDOR_NAME "hip"

// Wave size of the gfx target of this device pass. gfx9 (GCN, CDNA) runs 64
// lanes only; gfx10+ (RDNA) is built wave32, its default (a -mwavefrontsize64
// build of gfx10+ is not supported; the device layer compares the runtime warp
// size with what the binary expects). The family macros come from clang 17+;
// older compilers are recognised by processor name or their
// __AMDGCN_WAVEFRONT_SIZE.
#if defined(__AMDGCN__)
#if defined(__GFX9__) || defined(__GFX8__) || defined(__gfx900__) || defined(__gfx902__) ||                  \
    defined(__gfx904__) || defined(__gfx906__) || defined(__gfx908__) || defined(__gfx909__) ||              \
    defined(__gfx90a__) || defined(__gfx90c__) || defined(__gfx940__) || defined(__gfx941__) ||              \
    defined(__gfx942__) || defined(__gfx950__)
#define ST_WARP_SIZE_TARGET 64
#elif defined(__GFX10__) || defined(__GFX11__) || defined(__GFX12__)
#define ST_WARP_SIZE_TARGET 32
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define ST_WARP_SIZE_TARGET __AMDGCN_WAVEFRONT_SIZE
#else
#error "unknown AMD gfx target: add its wave size to src/gpu/compat/vendor_hip.h"
#endif
#endif
// The host pass has no single warp size (see ST_WARP_SIZE in compat.h); this
// value only lets kernel bodies compile there.
#define ST_WARP_SIZE_HOST_PASS 64

// gfx906 has 256 VGPRs per lane and SIMD and no AGPRs to spill into: two
// 256-thread blocks per CU cap a kernel at 128 VGPRs, and mmq_kernel, which
// needs about 140, spilled 11 to 34 of them to scratch. There it asks for one
// block (ST_MIN_BLOCKS in compat.h); gfx908 and later keep the bound.
#if defined(__gfx906__)
#define ST_MIN_BLOCKS(n) 1
#endif

// Dynamic shared memory per block: 64 KiB of LDS is what every supported gfx
// target gives one block (HIP has no opt-in step).
#define ST_MAX_DYN_SMEM (64 * 1024)
#endif

// --- types -------------------------------------------------------------------
#define gpuError_t hipError_t
#define gpuStream_t hipStream_t
#define gpuEvent_t hipEvent_t
#define gpuDeviceProp hipDeviceProp_t
#define gpuMemcpyKind hipMemcpyKind
#define gpuFuncAttribute hipFuncAttribute
#define gpuDeviceAttr hipDeviceAttribute_t
#define gpuGraph_t hipGraph_t
#define gpuGraphExec_t hipGraphExec_t

// --- constants -----------------------------------------------------------------
#define gpuSuccess hipSuccess
#define gpuErrorNotReady hipErrorNotReady
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyHostToHost hipMemcpyHostToHost
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuStreamDefault hipStreamDefault
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuEventDefault hipEventDefault
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuHostAllocDefault hipHostMallocDefault
#define gpuFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define gpuDevAttrWarpSize hipDeviceAttributeWarpSize
#define gpuDevAttrL2CacheSize hipDeviceAttributeL2CacheSize
#define gpuStreamCaptureModeGlobal hipStreamCaptureModeGlobal
#define gpuStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed

// --- memory --------------------------------------------------------------------
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc hipHostMalloc
#define gpuFreeHost hipHostFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemset hipMemset
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemGetInfo hipMemGetInfo

// --- streams, events, graphs ------------------------------------------------------
#define gpuStreamCreate hipStreamCreate
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuEventCreate hipEventCreate
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventQuery hipEventQuery
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy

// --- devices, errors, kernels -------------------------------------------------------
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuGetLastError hipGetLastError
#define gpuPeekAtLastError hipPeekAtLastError
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuFuncSetAttribute hipFuncSetAttribute
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor

// --- launches -----------------------------------------------------------------------
// ST_LAUNCH(kernel, grid, block, shared bytes, stream, arguments...): a plain
// launch; HIP has no launch that overlaps the kernel before it.
#define ST_LAUNCH(k, g, b, smem, s, ...) (k)<<<(g), (b), (smem), (s)>>>(__VA_ARGS__)

#endif
