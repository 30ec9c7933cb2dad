// vendor_cuda.h: the CUDA side of the compat layer (included by compat.h only).
// Maps the vendor-neutral gpu* runtime names to cuda* and fixes the per-target
// constants. Every name defined here has its twin in vendor_hip.h, in the same
// order; tools/check-compat fails the build when one side is missing.
#ifndef STRATA_GPU_COMPAT_VENDOR_CUDA_H
#define STRATA_GPU_COMPAT_VENDOR_CUDA_H

#include <cuda_runtime.h>

#define ST_VENDOR_NAME "cuda"

// Every NVIDIA target has 32 lanes.
#define ST_WARP_SIZE_TARGET 32
#define ST_WARP_SIZE_HOST_PASS 32
// Dynamic shared memory a launch may use without opting in; above it, up to the
// device's sharedMemPerBlockOptin, the kernel needs gpuFuncSetAttribute(...,
// gpuFuncAttributeMaxDynamicSharedMemorySize, bytes) first.
#define ST_MAX_DYN_SMEM (48 * 1024)

// --- types -------------------------------------------------------------------
#define gpuError_t cudaError_t
#define gpuStream_t cudaStream_t
#define gpuEvent_t cudaEvent_t
#define gpuDeviceProp cudaDeviceProp
#define gpuMemcpyKind cudaMemcpyKind
#define gpuFuncAttribute cudaFuncAttribute
#define gpuDeviceAttr cudaDeviceAttr
#define gpuGraph_t cudaGraph_t
#define gpuGraphExec_t cudaGraphExec_t

// --- constants -----------------------------------------------------------------
#define gpuSuccess cudaSuccess
#define gpuErrorNotReady cudaErrorNotReady
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyHostToHost cudaMemcpyHostToHost
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuStreamDefault cudaStreamDefault
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuEventDefault cudaEventDefault
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuHostAllocDefault cudaHostAllocDefault
#define gpuFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuDevAttrMaxSharedMemoryPerBlockOptin cudaDevAttrMaxSharedMemoryPerBlockOptin
#define gpuDevAttrWarpSize cudaDevAttrWarpSize
#define gpuDevAttrL2CacheSize cudaDevAttrL2CacheSize
#define gpuStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define gpuStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed

// --- memory --------------------------------------------------------------------
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc cudaHostAlloc
#define gpuFreeHost cudaFreeHost
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemset cudaMemset
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemGetInfo cudaMemGetInfo

// --- streams, events, graphs ------------------------------------------------------
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuEventCreate cudaEventCreate
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventQuery cudaEventQuery
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy

// --- devices, errors, kernels -------------------------------------------------------
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuGetLastError cudaGetLastError
#define gpuPeekAtLastError cudaPeekAtLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuFuncSetAttribute cudaFuncSetAttribute
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor

// --- launches -----------------------------------------------------------------------
// ST_LAUNCH(kernel, grid, block, shared bytes, stream, arguments...): launches
// the kernel (a name with template arguments goes in parentheses); with
// gpu_launch_overlap (compat.h) as a programmatic dependent launch, which may
// start before the kernel ahead of it on the stream has finished. The launch
// error, if any, is left for gpuGetLastError.
#define ST_LAUNCH(k, g, b, smem, s, ...)                                                                     \
    do {                                                                                                     \
        cudaLaunchAttribute st_attr_[1];                                                                     \
        st_attr_[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;                                 \
        st_attr_[0].val.programmaticStreamSerializationAllowed = gpu_launch_overlap ? 1 : 0;                 \
        cudaLaunchConfig_t st_cfg_ = {};                                                                     \
        st_cfg_.gridDim = dim3(g);                                                                           \
        st_cfg_.blockDim = dim3(b);                                                                          \
        st_cfg_.dynamicSmemBytes = (smem);                                                                   \
        st_cfg_.stream = (s);                                                                                \
        st_cfg_.attrs = st_attr_;                                                                            \
        st_cfg_.numAttrs = 1;                                                                                \
        (void)cudaLaunchKernelEx(&st_cfg_, k, __VA_ARGS__);                                                  \
    } while (0)

#endif
