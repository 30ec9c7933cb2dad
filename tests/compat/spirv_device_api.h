// spirv_device_api.h: the part of chipStar's HIP API that the GPU sources use,
// declared as chipStar 1.1's headers declare it (include/hip/spirv_hip.hh and
// include/hip/devicelib/), enough for scripts/check-portability.sh to compile
// every GPU source for spirv64 without chipStar installed:
//   clang++ -x hip --offload=spirv64 --cuda-device-only -nogpulib -nogpuinc
//           -D__HIP_PLATFORM_SPIRV__ -include tests/compat/spirv_device_api.h ...
// Each CUDA device function maps to what chipStar maps it to: an OpenCL
// built-in (lowered to SPIR-V instructions, no import) or a function of
// chipStar's device library (__chip_*, the shuffles), which stays an import
// of the module. The check compares every import with the names chipStar's
// device library exports (tests/compat/chipstar_devicelib_exports.txt), so a
// name chipStar does not define fails it.
// Add a declaration here when a kernel needs more of the HIP API, copying
// chipStar's name and signature.
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
#define ST_SPIRV_VEC2_(t, name, al)                                                                          \
    struct __attribute__((aligned(al))) name {                                                               \
        t x, y;                                                                                              \
    };                                                                                                       \
    static __host__ __device__ inline name make_##name(t x, t y) { return name{x, y}; }
#define ST_SPIRV_VEC4_(t, name, al)                                                                          \
    struct __attribute__((aligned(al))) name {                                                               \
        t x, y, z, w;                                                                                        \
    };                                                                                                       \
    static __host__ __device__ inline name make_##name(t x, t y, t z, t w) { return name{x, y, z, w}; }
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
extern "C" int __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shmem = 0, hipStream_t stream = 0);
extern "C" int __hipPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, hipStream_t *stream);

// --- work-item indices ---------------------------------------------------------------------
// As chipStar's spirv_hip.hh: OpenCL's work-item functions (size_t, C++-mangled
// names), which the SPIR-V backend lowers to built-in variables. The index is
// truncated to 32 bits into a volatile local: LLVM 22's SPIR-V backend can
// drop a truncation that feeds an AND (in mmvq.cu: "OpBitwiseAnd %uint" of a
// 64-bit operand, which spirv-val rejects). chipStar's own toolchain (the
// SPIRV-LLVM-Translator) does not take this path; the detour only keeps the
// check's module valid.
extern "C" __device__ size_t _Z12get_local_idj(unsigned dim);
extern "C" __device__ size_t _Z12get_group_idj(unsigned dim);
extern "C" __device__ size_t _Z14get_local_sizej(unsigned dim);
extern "C" __device__ size_t _Z14get_num_groupsj(unsigned dim);

#define ST_SPIRV_GET_(axis, fn, dim)                                                                         \
    static __device__ __forceinline__ unsigned get_##axis() {                                                \
        volatile unsigned v = (unsigned)fn(dim);                                                             \
        return v;                                                                                            \
    }
#define ST_SPIRV_INDEX_(name, fn)                                                                            \
    struct name##_t {                                                                                        \
        ST_SPIRV_GET_(x, fn, 0)                                                                              \
        ST_SPIRV_GET_(y, fn, 1)                                                                              \
        ST_SPIRV_GET_(z, fn, 2)                                                                              \
        __declspec(property(get = get_x)) unsigned x;                                                        \
        __declspec(property(get = get_y)) unsigned y;                                                        \
        __declspec(property(get = get_z)) unsigned z;                                                        \
    };                                                                                                       \
    extern const __device__ __attribute__((weak)) name##_t name;
ST_SPIRV_INDEX_(threadIdx, _Z12get_local_idj)
ST_SPIRV_INDEX_(blockIdx, _Z12get_group_idj)
ST_SPIRV_INDEX_(blockDim, _Z14get_local_sizej)
ST_SPIRV_INDEX_(gridDim, _Z14get_num_groupsj)
#undef ST_SPIRV_INDEX_
#undef ST_SPIRV_GET_

// --- synchronisation, fences, sub-group exchange (devicelib/sync_and_util.hh) -----------------
// The __chip_* functions and the shuffles are defined by chipStar's device
// library; the module imports them.
extern "C" __device__ void __chip_syncthreads(void);
extern "C" __device__ void __chip_threadfence_block(void);
extern "C" __device__ void __chip_threadfence(void);
extern "C" __device__ void __chip_threadfence_system(void);
static __device__ __forceinline__ void __syncthreads(void) { __chip_syncthreads(); }
static __device__ __forceinline__ void __threadfence_block(void) { __chip_threadfence_block(); }
static __device__ __forceinline__ void __threadfence(void) { __chip_threadfence(); }
static __device__ __forceinline__ void __threadfence_system(void) { __chip_threadfence_system(); }

#define ST_SPIRV_SHFL_(T)                                                                                    \
    __device__ T __shfl(T var, int src_lane, int width = 32);                                                \
    __device__ T __shfl_xor(T var, int lane_mask, int width = 32);                                           \
    __device__ T __shfl_up(T var, unsigned delta, int width = 32);                                           \
    __device__ T __shfl_down(T var, unsigned delta, int width = 32);
ST_SPIRV_SHFL_(int)
ST_SPIRV_SHFL_(unsigned)
ST_SPIRV_SHFL_(float)
#undef ST_SPIRV_SHFL_

// --- float and integer math (devicelib/single_precision, integer) ----------------------------
// chipStar maps each CUDA name to the OpenCL built-in of the same meaning,
// declared with C++ linkage so that it mangles to the OpenCL name (_Z3expf),
// which the SPIR-V backend lowers to an OpenCL.std extended instruction.
#define ST_SPIRV_CL1_(cuda, cl)                                                                              \
    __device__ float cl(float);                                                                              \
    static __device__ __forceinline__ float cuda(float x) { return cl(x); }
#define ST_SPIRV_CL2_(cuda, cl)                                                                              \
    __device__ float cl(float, float);                                                                       \
    static __device__ __forceinline__ float cuda(float x, float y) { return cl(x, y); }
ST_SPIRV_CL1_(expf, exp)
ST_SPIRV_CL1_(exp2f, exp2)
ST_SPIRV_CL1_(logf, log)
ST_SPIRV_CL1_(log2f, log2)
ST_SPIRV_CL1_(sqrtf, sqrt)
ST_SPIRV_CL1_(rsqrtf, rsqrt)
ST_SPIRV_CL1_(fabsf, fabs)
ST_SPIRV_CL1_(floorf, floor)
ST_SPIRV_CL1_(ceilf, ceil)
ST_SPIRV_CL1_(roundf, round)
ST_SPIRV_CL1_(rintf, rint)
ST_SPIRV_CL1_(truncf, trunc)
ST_SPIRV_CL1_(sinf, sin)
ST_SPIRV_CL1_(cosf, cos)
ST_SPIRV_CL1_(tanhf, tanh)
ST_SPIRV_CL1_(erff, erf)
ST_SPIRV_CL2_(fmaxf, fmax)
ST_SPIRV_CL2_(fminf, fmin)
ST_SPIRV_CL2_(powf, pow)
#undef ST_SPIRV_CL1_
#undef ST_SPIRV_CL2_
__device__ float fma(float, float, float);
static __device__ __forceinline__ float fmaf(float x, float y, float z) { return fma(x, y, z); }

extern "C" __device__ int __chip_float_as_int(float x);
extern "C" __device__ unsigned __chip_float_as_uint(float x);
extern "C" __device__ float __chip_int_as_float(int x);
extern "C" __device__ float __chip_uint_as_float(unsigned x);
static __device__ __forceinline__ int __float_as_int(float x) { return __chip_float_as_int(x); }
static __device__ __forceinline__ unsigned __float_as_uint(float x) { return __chip_float_as_uint(x); }
static __device__ __forceinline__ float __int_as_float(int x) { return __chip_int_as_float(x); }
static __device__ __forceinline__ float __uint_as_float(unsigned x) { return __chip_uint_as_float(x); }

// OpenCL's integer built-ins, as chipStar declares them (integer/int_math.hh).
__device__ int min(int, int);
__device__ unsigned min(unsigned, unsigned);
__device__ int max(int, int);
__device__ unsigned max(unsigned, unsigned);
__device__ int abs(int);

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
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t size, hipMemcpyKind kind, hipStream_t stream);
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
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *exec, hipGraph_t graph, unsigned long long flags);
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
hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func, int block_size,
                                                        size_t dyn_shmem);
}
// The typed overloads HIP's C++ API adds.
template <class T> static inline hipError_t hipMalloc(T **ptr, size_t size) {
    return hipMalloc((void **)ptr, size);
}
template <class T> static inline hipError_t hipHostMalloc(T **ptr, size_t size, unsigned flags = 0) {
    return hipHostMalloc((void **)ptr, size, flags);
}
template <class F>
static inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, F func, int block_size,
                                                                      size_t dyn_shmem) {
    return hipOccupancyMaxActiveBlocksPerMultiprocessor(blocks, (const void *)func, block_size, dyn_shmem);
}

#pragma GCC visibility pop

#endif
