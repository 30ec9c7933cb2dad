// spirv_device_api.h: a minimal declaration of the HIP API that chipStar
// provides, enough for scripts/check-portability.sh to compile every GPU source
// for spirv64 without chipStar installed:
//   clang++ -x hip --offload=spirv64 --cuda-device-only -nogpulib -nogpuinc
//           -D__HIP_PLATFORM_SPIRV__ -include tests/compat/spirv_device_api.h ...
// Device functions are declared, not defined: in the module they are imports
// that chipStar's device library resolves when it links, so the check proves
// the sources are SPIR-V-clean (no AMD or NVIDIA builtin, no inline asm) and
// lower to valid SPIR-V, not that chipStar's definitions behave.
// Add a declaration here when a kernel needs more of the HIP API; keep each one
// matching chipStar's signature.
#ifndef STRATA_TESTS_SPIRV_DEVICE_API_H
#define STRATA_TESTS_SPIRV_DEVICE_API_H

#define STRATA_SPIRV_DEVICE_API 1

// HIP device code defaults to hidden visibility, and the SPIR-V backend does not
// import a hidden declaration: everything declared here is default-visible.
#pragma GCC visibility push(default)

#include <stddef.h>
#include <stdint.h>

// --- attributes ---------------------------------------------------------------------
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))

// --- vector types (members only: chipStar's also carry operators) -----------------------
#define ST_SPIRV_VEC2_(t, name, al)                                                        \
    struct __attribute__((aligned(al))) name {                                             \
        t x, y;                                                                            \
    };                                                                                     \
    static __host__ __device__ inline name make_##name(t x, t y) { return name{x, y}; }
#define ST_SPIRV_VEC4_(t, name, al)                                                        \
    struct __attribute__((aligned(al))) name {                                             \
        t x, y, z, w;                                                                      \
    };                                                                                     \
    static __host__ __device__ inline name make_##name(t x, t y, t z, t w) {               \
        return name{x, y, z, w};                                                           \
    }
ST_SPIRV_VEC2_(float, float2, 8)
ST_SPIRV_VEC4_(float, float4, 16)
ST_SPIRV_VEC2_(int, int2, 8)
ST_SPIRV_VEC4_(int, int4, 16)
ST_SPIRV_VEC2_(unsigned, uint2, 8)
ST_SPIRV_VEC4_(unsigned, uint4, 16)
ST_SPIRV_VEC4_(signed char, char4, 4)
ST_SPIRV_VEC4_(unsigned char, uchar4, 4)
#undef ST_SPIRV_VEC2_
#undef ST_SPIRV_VEC4_

// --- launch configuration ---------------------------------------------------------------
struct dim3 {
    unsigned x, y, z;
    __host__ __device__ constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
        : x(x_), y(y_), z(z_) {}
};
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
extern "C" int __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shmem = 0,
                                          hipStream_t stream = 0);
extern "C" int __hipPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, hipStream_t *stream);

// --- work-item indices ---------------------------------------------------------------------
// chipStar reads them through OpenCL's get_local_id() and friends (size_t). Here
// they are opaque 32-bit imports instead: LLVM 22's SPIR-V backend mis-lowers a
// truncation of those builtins (an OpBitwiseAnd of a 64-bit operand into a
// 32-bit result, which spirv-val rejects), and the kernels only need an index.
extern "C" __device__ unsigned st_spirv_thread_idx(unsigned dim);
extern "C" __device__ unsigned st_spirv_block_idx(unsigned dim);
extern "C" __device__ unsigned st_spirv_block_dim(unsigned dim);
extern "C" __device__ unsigned st_spirv_grid_dim(unsigned dim);

#define ST_SPIRV_INDEX_(name, fn)                                                          \
    struct name##_t {                                                                      \
        static __device__ __forceinline__ unsigned get_x() { return fn(0); }               \
        static __device__ __forceinline__ unsigned get_y() { return fn(1); }               \
        static __device__ __forceinline__ unsigned get_z() { return fn(2); }               \
        __declspec(property(get = get_x)) unsigned x;                                      \
        __declspec(property(get = get_y)) unsigned y;                                      \
        __declspec(property(get = get_z)) unsigned z;                                      \
    };                                                                                     \
    extern const __device__ __attribute__((weak)) name##_t name;
ST_SPIRV_INDEX_(threadIdx, st_spirv_thread_idx)
ST_SPIRV_INDEX_(blockIdx, st_spirv_block_idx)
ST_SPIRV_INDEX_(blockDim, st_spirv_block_dim)
ST_SPIRV_INDEX_(gridDim, st_spirv_grid_dim)
#undef ST_SPIRV_INDEX_

// --- synchronisation, fences, sub-group exchange ----------------------------------------
__device__ void __syncthreads(void);
__device__ void __threadfence_block(void);
__device__ void __threadfence(void);
__device__ void __threadfence_system(void);

__device__ int __shfl(int var, int src_lane, int width);
__device__ unsigned __shfl(unsigned var, int src_lane, int width);
__device__ float __shfl(float var, int src_lane, int width);
__device__ int __shfl_xor(int var, int lane_mask, int width);
__device__ unsigned __shfl_xor(unsigned var, int lane_mask, int width);
__device__ float __shfl_xor(float var, int lane_mask, int width);
__device__ int __shfl_down(int var, unsigned delta, int width);
__device__ unsigned __shfl_down(unsigned var, unsigned delta, int width);
__device__ float __shfl_down(float var, unsigned delta, int width);
__device__ int __shfl_up(int var, unsigned delta, int width);
__device__ unsigned __shfl_up(unsigned var, unsigned delta, int width);
__device__ float __shfl_up(float var, unsigned delta, int width);
__device__ unsigned long long __ballot(int predicate);

// --- atomics ---------------------------------------------------------------------------
__device__ int atomicAdd(int *address, int val);
__device__ unsigned atomicAdd(unsigned *address, unsigned val);
__device__ unsigned long long atomicAdd(unsigned long long *address, unsigned long long val);
__device__ float atomicAdd(float *address, float val);
__device__ int atomicMax(int *address, int val);
__device__ unsigned atomicMax(unsigned *address, unsigned val);
__device__ int atomicMin(int *address, int val);
__device__ int atomicExch(int *address, int val);
__device__ unsigned atomicExch(unsigned *address, unsigned val);
__device__ int atomicCAS(int *address, int compare, int val);
__device__ unsigned atomicCAS(unsigned *address, unsigned compare, unsigned val);

// --- float math ---------------------------------------------------------------------------
__device__ float expf(float);
__device__ float exp2f(float);
__device__ float logf(float);
__device__ float log2f(float);
__device__ float sqrtf(float);
__device__ float rsqrtf(float);
__device__ float fabsf(float);
__device__ float fmaxf(float, float);
__device__ float fminf(float, float);
__device__ float fmaf(float, float, float);
__device__ float floorf(float);
__device__ float ceilf(float);
__device__ float roundf(float);
__device__ float rintf(float);
__device__ float truncf(float);
__device__ float powf(float, float);
__device__ float sinf(float);
__device__ float cosf(float);
__device__ void sincosf(float, float *, float *);
__device__ float tanhf(float);
__device__ float erff(float);
__device__ float __expf(float);
__device__ float __logf(float);
__device__ float __fdividef(float, float);
__device__ int __float_as_int(float);
__device__ float __int_as_float(int);
__device__ unsigned __float_as_uint(float);
__device__ float __uint_as_float(unsigned);
__device__ int __float2int_rn(float);
__device__ int min(int, int);
__device__ unsigned min(unsigned, unsigned);
__device__ long long min(long long, long long);
__device__ int max(int, int);
__device__ unsigned max(unsigned, unsigned);
__device__ long long max(long long, long long);
__device__ int abs(int);
__device__ int __clz(int);
__device__ int __popc(unsigned);
__device__ int __ffs(int);

// --- host runtime API (what vendor_hip.h maps) ---------------------------------------------
typedef enum hipError_t {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNoDevice = 100,
    hipErrorNotReady = 600,
} hipError_t;
typedef enum hipMemcpyKind {
    hipMemcpyHostToHost = 0,
    hipMemcpyHostToDevice = 1,
    hipMemcpyDeviceToHost = 2,
    hipMemcpyDeviceToDevice = 3,
    hipMemcpyDefault = 4,
} hipMemcpyKind;
typedef enum hipFuncAttribute {
    hipFuncAttributeMaxDynamicSharedMemorySize = 8,
} hipFuncAttribute;
typedef enum hipDeviceAttribute_t {
    hipDeviceAttributeL2CacheSize = 36,
    hipDeviceAttributeMultiprocessorCount = 63,
    hipDeviceAttributeSharedMemPerBlockOptin = 75,
    hipDeviceAttributeWarpSize = 87,
} hipDeviceAttribute_t;
typedef enum hipStreamCaptureMode {
    hipStreamCaptureModeGlobal = 0,
    hipStreamCaptureModeThreadLocal = 1,
    hipStreamCaptureModeRelaxed = 2,
} hipStreamCaptureMode;
typedef struct ihipGraph *hipGraph_t;
typedef struct hipGraphExec *hipGraphExec_t;
#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01
#define hipEventDefault 0x0
#define hipEventDisableTiming 0x2
#define hipHostMallocDefault 0x0

typedef struct hipDeviceProp_t {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    int memoryClockRate;
    int memoryBusWidth;
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    int computeMode;
    int integrated;
    int canMapHostMemory;
    int concurrentKernels;
    int pciDomainID;
    int pciBusID;
    int pciDeviceID;
    size_t maxSharedMemoryPerMultiProcessor;
    int isMultiGpuBoard;
    int managedMemory;
    char gcnArchName[256];
} hipDeviceProp_t;

extern "C" {
hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipFree(void *ptr);
hipError_t hipHostMalloc(void **ptr, size_t size, unsigned flags);
hipError_t hipHostFree(void *ptr);
hipError_t hipMemcpy(void *dst, const void *src, size_t size, hipMemcpyKind kind);
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t size, hipMemcpyKind kind,
                          hipStream_t stream);
hipError_t hipMemset(void *dst, int value, size_t size);
hipError_t hipMemsetAsync(void *dst, int value, size_t size, hipStream_t stream);
hipError_t hipMemGetInfo(size_t *free, size_t *total);
hipError_t hipStreamCreate(hipStream_t *stream);
hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned flags);
hipError_t hipStreamDestroy(hipStream_t stream);
hipError_t hipStreamSynchronize(hipStream_t stream);
hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned flags);
hipError_t hipEventCreate(hipEvent_t *event);
hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags);
hipError_t hipEventDestroy(hipEvent_t event);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventQuery(hipEvent_t event);
hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop);
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *graph);
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *exec, hipGraph_t graph,
                                        unsigned long long flags);
hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream);
hipError_t hipGraphExecDestroy(hipGraphExec_t exec);
hipError_t hipGraphDestroy(hipGraph_t graph);
hipError_t hipGetDeviceCount(int *count);
hipError_t hipGetDevice(int *device);
hipError_t hipSetDevice(int device);
hipError_t hipGetDeviceProperties(hipDeviceProp_t *prop, int device);
hipError_t hipDeviceGetAttribute(int *value, hipDeviceAttribute_t attr, int device);
hipError_t hipDeviceSynchronize(void);
hipError_t hipDriverGetVersion(int *version);
hipError_t hipRuntimeGetVersion(int *version);
hipError_t hipGetLastError(void);
hipError_t hipPeekAtLastError(void);
const char *hipGetErrorString(hipError_t error);
const char *hipGetErrorName(hipError_t error);
hipError_t hipFuncSetAttribute(const void *func, hipFuncAttribute attr, int value);
hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func,
                                                        int block_size, size_t dyn_shmem);
}
// The typed overloads HIP's C++ API adds.
template <class T> static inline hipError_t hipMalloc(T **ptr, size_t size) {
    return hipMalloc((void **)ptr, size);
}
template <class T> static inline hipError_t hipHostMalloc(T **ptr, size_t size, unsigned flags = 0) {
    return hipHostMalloc((void **)ptr, size, flags);
}
template <class F>
static inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, F func,
                                                                      int block_size,
                                                                      size_t dyn_shmem) {
    return hipOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (const void *)func, block_size,
                                                        dyn_shmem);
}

#pragma GCC visibility pop

#endif
