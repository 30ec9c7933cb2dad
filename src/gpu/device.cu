// device.cu: the device layer: enumerate devices, classify them (NVIDIA sm_XY,
// AMD gfxNNNN with its wave size, SPIR-V), apply the support policy, check with
// a probe launch that this binary holds code of the right wave size for the
// device, and plan device memory before anything is allocated.
//
// The policy (docs/BACKENDS.md keeps the table for readers):
//   validated    sm_90 (op harness, memcheck and model parity run on an H200)
//   unvalidated  NVIDIA sm_75 and newer; the AMD targets the compat layer
//                knows; SPIR-V through chipStar. They run with a warning.
//   unsupported  older NVIDIA, unknown AMD targets (STRATA_GPU_ALLOW_UNSUPPORTED=1
//                runs them anyway), and any device this binary has no code
//                for or whose wave size its kernels do not assume (never run).
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "host.h"

// Writes a marker and the warp size the kernels were compiled with for this device.
// PROBE_THREADS (two waves of the widest target) each write, after the
// marker and the warp size, the lane its width-ST_WARP_SIZE broadcast of lane
// 0 came from: the first lane of its own warp when the device's sub-groups
// are as wide as the kernels assume.
// Then out[2 + PROBE_THREADS] is ST_HAS_MMA of the code the device runs
// out[3 + PROBE_THREADS] its ST_HAS_PDL and out[4 + PROBE_THREADS] its ST_HAS_DP4A.
#define PROBE_THREADS 128
__global__ void probe_kernel(int *out) {
    if (threadIdx.x == 0) {
        out[0] = 0x5717A;
        out[1] = ST_WARP_SIZE;
        out[2 + PROBE_THREADS] = ST_HAS_MMA;
        out[3 + PROBE_THREADS] = ST_HAS_PDL;
        out[4 + PROBE_THREADS] = ST_HAS_DP4A;
    }
    out[2 + threadIdx.x] = st_shfl((int)threadIdx.x, 0, ST_WARP_SIZE);
}

const char *gpu_platform_name(void) { return ST_VENDOR_NAME; }

const char *gpu_policy_name(enum gpu_policy p) {
    switch (p) {
    case GPU_POLICY_VALIDATED:
        return "validated";
    case GPU_POLICY_UNVALIDATED:
        return "unvalidated";
    case GPU_POLICY_UNSUPPORTED:
        return "unsupported";
    }
    return "unknown";
}

int gpu_device_count(void) {
    int n = 0;
    const gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess) {
        (void)gpuGetLastError(); // not sticky: clear it
        st_fail("no %s device is usable: %s", ST_VENDOR_NAME, gpuGetErrorString(e));
        return 0;
    }
    if (n == 0) st_fail("no %s device found", ST_VENDOR_NAME);
    return n;
}

static void classify(const gpuDeviceProp &p, struct gpu_device_info *o) {
#if defined(ST_TARGET_CUDA)
    o->vendor = GPU_VENDOR_NVIDIA;
    snprintf(o->arch, sizeof o->arch, "sm_%d%d", p.major, p.minor);
    const int cc = 10 * p.major + p.minor;
    if (cc == 90) {
        o->policy = GPU_POLICY_VALIDATED;
        snprintf(o->note, sizeof o->note, "run-verified by this project (H200)");
    } else if (cc >= 75) {
        o->policy = GPU_POLICY_UNVALIDATED;
        snprintf(o->note, sizeof o->note,
                 "%s is not run-verified by this project; build/tests/test_ops checks every "
                 "kernel on it",
                 o->arch);
    } else {
        o->policy = GPU_POLICY_UNSUPPORTED;
        snprintf(o->note, sizeof o->note,
                 "%s predates what CUDA 13 builds for (sm_75); build with an older toolkit "
                 "(make GPU=cuda CUDA_ARCH=%s NVCC=...) and set STRATA_GPU_ALLOW_UNSUPPORTED=1",
                 o->arch, o->arch);
    }
#else
    // gcnArchName: "gfx90a:sramecc+:xnack-" on AMD
    snprintf(o->arch, sizeof o->arch, "%s", p.gcnArchName);
    char *colon = strchr(o->arch, ':');
    if (colon) *colon = 0;
#if defined(ST_TARGET_SPIRV)
    // chipStar gives no architecture name (gcnArchName reads "unavailable" on
    // its OpenCL and Level Zero backends): the class is the binary's target.
    o->vendor = GPU_VENDOR_SPIRV;
    snprintf(o->arch, sizeof o->arch, "spirv64");
    o->policy = GPU_POLICY_UNVALIDATED;
    snprintf(o->note, sizeof o->note,
             "SPIR-V (chipStar) devices are not run-verified by this project; "
             "build/tests/test_ops checks every kernel on it");
#else
    // the AMD targets the compat layer has native paths and a wave size for
    static const char *const amd_known[] = {"gfx906",  "gfx908",  "gfx90a",  "gfx942",  "gfx950",
                                            "gfx1030", "gfx1031", "gfx1032", "gfx1100", "gfx1101",
                                            "gfx1102", "gfx1200", "gfx1201"};
    o->vendor = GPU_VENDOR_AMD;
    o->policy = GPU_POLICY_UNSUPPORTED;
    snprintf(o->note, sizeof o->note,
             "unknown AMD target %s: build for it (make GPU=hip HIP_ARCH=%s) and set "
             "STRATA_GPU_ALLOW_UNSUPPORTED=1 to try it",
             o->arch, o->arch);
    for (size_t i = 0; i < sizeof amd_known / sizeof *amd_known; i++)
        if (!strcmp(o->arch, amd_known[i])) {
            o->policy = GPU_POLICY_UNVALIDATED;
            snprintf(o->note, sizeof o->note,
                     "%s (wave %d) is not run-verified by this project; build/tests/test_ops "
                     "checks every kernel on it",
                     o->arch, p.warpSize);
        }
#endif
#endif
}

// Launches the probe on the current device: has_code false (policy
// unsupported) when the launch fails or the kernels' warp size is not the
// device's. Returns 0, or -1 with a message when the runtime itself fails.
static int probe(struct gpu_device_info *o) {
    int *d = NULL;
    if (GPU_CHECK(gpuMalloc((void **)&d, (5 + PROBE_THREADS) * sizeof(int))))
        return st_fail("GPU %d: cannot allocate the probe's %d bytes", o->index,
                       (int)((5 + PROBE_THREADS) * sizeof(int)));
    int h[5 + PROBE_THREADS] = {0};
    probe_kernel<<<1, PROBE_THREADS>>>(d);
    const gpuError_t e = gpuGetLastError();
    if (e == gpuSuccess) {
        if (GPU_CHECK(gpuMemcpy(h, d, sizeof h, gpuMemcpyDeviceToHost))) {
            (void)gpuFree(d);
            return st_fail("GPU %d: reading the probe's result failed", o->index);
        }
    }
    (void)gpuFree(d);
    o->has_code = e == gpuSuccess && h[0] == 0x5717A && h[1] == o->warp_size;
    o->has_mma = o->has_code && h[2 + PROBE_THREADS] == 1;
    o->has_pdl = o->has_code && h[3 + PROBE_THREADS] == 1;
    o->has_dp4a = o->has_code && h[4 + PROBE_THREADS] == 1;
    // the first thread whose broadcast came from another lane than its warp's first
    int bad_lane = -1;
    for (int t = 0; o->has_code && t < PROBE_THREADS && bad_lane < 0; t++)
        if (h[2 + t] != t - t % o->warp_size) bad_lane = t;
    if (e != gpuSuccess) {
        o->policy = GPU_POLICY_UNSUPPORTED;
        snprintf(o->note, sizeof o->note,
                 "this binary has no %s kernels for %s (%s): rebuild for it (make GPU=%s with "
                 "CUDA_ARCH or HIP_ARCH=%s)",
                 ST_VENDOR_NAME, o->arch, gpuGetErrorString(e), ST_VENDOR_NAME, o->arch);
    } else if (!o->has_code) {
        o->policy = GPU_POLICY_UNSUPPORTED;
        snprintf(o->note, sizeof o->note,
                 "%s runs %d-lane waves but this binary's kernels for it assume %d: rebuild "
                 "for %s in its default wave mode",
                 o->arch, o->warp_size, h[1], o->arch);
    } else if (bad_lane >= 0) {
        // Kernels built for the right width, but the device's sub-groups are
        // not that wide: every warp reduction would be wrong.
        o->policy = GPU_POLICY_UNSUPPORTED;
        snprintf(o->note, sizeof o->note,
                 "%.64s does not run %d-lane sub-groups: thread %d's width-%d shuffle of lane 0 "
                 "read thread %d; warp reductions would be wrong",
                 o->name, o->warp_size, bad_lane, o->warp_size, h[2 + bad_lane]);
    }
    return 0;
}

int gpu_device_query(int index, struct gpu_device_info *o) {
    memset(o, 0, sizeof *o);
    o->index = index;
    const int n = gpu_device_count();
    if (n == 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", st_last_error());
        return st_fail("GPU %d: %s", index, why);
    }
    if (index < 0 || index >= n)
        return st_fail("GPU %d does not exist: %d %s device(s) found", index, n, ST_VENDOR_NAME);
    gpuDeviceProp p;
    if (GPU_CHECK(gpuGetDeviceProperties(&p, index)) || GPU_CHECK(gpuSetDevice(index)))
        return st_fail("GPU %d: cannot read its properties", index);
    snprintf(o->name, sizeof o->name, "%s", p.name);
    o->warp_size = p.warpSize;
    o->n_sm = p.multiProcessorCount;
    o->l2_bytes = (size_t)p.l2CacheSize;
    size_t fr = 0, tot = 0;
    if (GPU_CHECK(gpuMemGetInfo(&fr, &tot))) return st_fail("GPU %d: cannot read free memory", index);
    o->free_bytes = fr;
    o->total_bytes = tot;
    classify(p, o);
    if (probe(o)) return -1;
    if (o->policy == GPU_POLICY_UNSUPPORTED && o->has_code &&
        st_env_switch("STRATA_GPU_ALLOW_UNSUPPORTED", false)) {
        o->policy = GPU_POLICY_UNVALIDATED;
        size_t len = strlen(o->note);
        snprintf(o->note + len, sizeof o->note - len, " (run anyway: STRATA_GPU_ALLOW_UNSUPPORTED=1)");
    }
    return 0;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int gpu_device_avail(int device, uint64_t *avail, uint64_t *reserve) {
    size_t fr = 0, tot = 0;
    if (GPU_CHECK(gpuSetDevice(device)) || GPU_CHECK(gpuMemGetInfo(&fr, &tot)))
        return st_fail("GPU %d: cannot read free memory", device);
    // kept back for the runtime, the backend's own scratch and other users
    *reserve = (uint64_t)tot / 64;
    if (*reserve < (256u << 20)) *reserve = 256u << 20;
    *avail = fr > *reserve ? fr - *reserve : 0;
    return 0;
}

int gpu_memory_plan(int device, uint64_t weight_bytes, uint64_t kv_bytes, int n_ctx, uint64_t scratch_bytes) {
    uint64_t avail = 0, reserve = 0;
    if (gpu_device_avail(device, &avail, &reserve)) return -1;
    const uint64_t fixed = weight_bytes + scratch_bytes;
    const uint64_t need = fixed + kv_bytes;
    if (need <= avail) return 0;
    char what[256];
    snprintf(what, sizeof what,
             "GPU %d needs %.2f GiB (weights %.2f GiB, KV cache for %d positions %.2f GiB, "
             "scratch %.2f GiB) but has %.2f GiB free beyond a %.2f GiB reserve",
             device, gib(need), gib(weight_bytes), n_ctx, gib(kv_bytes), gib(scratch_bytes), gib(avail),
             gib(reserve));
    if (fixed >= avail || n_ctx < 1)
        return st_fail("%s: the weights alone do not fit; use a smaller quantization of the model, "
                       "or the CPU (--backend cpu)",
                       what);
    const uint64_t per_pos = kv_bytes / (uint64_t)n_ctx;
    const uint64_t fit = per_pos ? (avail - fixed) / per_pos : (uint64_t)n_ctx;
    if (fit < 1)
        return st_fail("%s: not even one position of KV cache fits; use the CPU (--backend cpu)", what);
    return st_fail("%s: a context of %llu positions fits (-c %llu), or use the CPU (--backend cpu)", what,
                   (unsigned long long)fit, (unsigned long long)fit);
}
