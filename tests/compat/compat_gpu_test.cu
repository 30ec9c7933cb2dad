// compat_gpu_test.cu: the compat layer on a real GPU. Every intrinsic runs on
// the device in its dispatching form (st_dp4a: the target's native instruction
// unless STRATA_PORTABLE_INTRINSICS) and in its portable form, and both must
// equal the portable form run on the host, which tests/test_compat.c checks
// against independent models of the CUDA semantics. Shuffles and warp
// reductions are checked against a host simulation of the same butterfly, the
// bounded spin against a flag that is set and one that never is.
//
// Build and run (prints "RESULT passed failed", exits non-zero on failure):
//   nvcc -Isrc -arch=sm_90 tests/compat/compat_gpu_test.cu -o compat_gpu_test
//   hipcc -Isrc --offload-arch=gfx1100 tests/compat/compat_gpu_test.cu -o ...
// (add -DSTRATA_PORTABLE_INTRINSICS for the portable build). scripts/
// check-portability.sh compiles it for every target, so the whole layer
// builds everywhere even before a kernel uses all of it.
#include "gpu/compat/compat.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" void gpu_record_error(const char *msg) { fprintf(stderr, "gpu error: %s\n", msg); }

static int n_pass, n_fail;
static void report(const char *name, long bad, long total) {
    printf("  %s %s (%ld of %ld wrong)\n", bad ? "FAIL" : "ok  ", name, bad, total);
    if (bad)
        n_fail++;
    else
        n_pass++;
}

// --- integer intrinsics: out[2i] dispatching form, out[2i+1] portable form ----------
__global__ void k_int_ops(int op, const unsigned *a, const unsigned *b, const unsigned *c, unsigned *out,
                          int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned fast = 0, port = 0;
    if (op == 0) {
        fast = (unsigned)st_dp4a((int)a[i], (int)b[i], (int)c[i]);
        port = (unsigned)st_dp4a_portable((int)a[i], (int)b[i], (int)c[i]);
    } else if (op == 1) {
        fast = st_byte_perm(a[i], b[i], c[i]);
        port = st_byte_perm_portable(a[i], b[i], c[i]);
    } else if (op == 2) {
        fast = st_vsub4(a[i], b[i]);
        port = st_vsub4_portable(a[i], b[i]);
    } else {
        fast = st_vsubss4(a[i], b[i]);
        port = st_vsubss4_portable(a[i], b[i]);
    }
    out[2 * i] = fast;
    out[2 * i + 1] = port;
}

static unsigned host_op(int op, unsigned a, unsigned b, unsigned c) {
    switch (op) {
    case 0:
        return (unsigned)st_dp4a_portable((int)a, (int)b, (int)c);
    case 1:
        return st_byte_perm_portable(a, b, c);
    case 2:
        return st_vsub4_portable(a, b);
    default:
        return st_vsubss4_portable(a, b);
    }
}

// Runs op on n inputs; returns the number of wrong outputs (either form), or -1.
static long run_int_op(int op, const unsigned *a, const unsigned *b, const unsigned *c, int n) {
    unsigned *d = NULL, *out = (unsigned *)malloc(2 * (size_t)n * sizeof(unsigned));
    long bad = -1;
    if (!out || GPU_CHECK(gpuMalloc(&d, 5 * (size_t)n * sizeof(unsigned)))) goto done;
    if (GPU_CHECK(gpuMemcpy(d, a, n * sizeof(unsigned), gpuMemcpyHostToDevice)) ||
        GPU_CHECK(gpuMemcpy(d + n, b, n * sizeof(unsigned), gpuMemcpyHostToDevice)) ||
        GPU_CHECK(gpuMemcpy(d + 2 * n, c, n * sizeof(unsigned), gpuMemcpyHostToDevice)))
        goto done;
    k_int_ops<<<(n + 255) / 256, 256>>>(op, d, d + n, d + 2 * n, d + 3 * n, n);
    if (GPU_CHECK(gpuGetLastError()) ||
        GPU_CHECK(gpuMemcpy(out, d + 3 * n, 2 * (size_t)n * sizeof(unsigned), gpuMemcpyDeviceToHost)))
        goto done;
    bad = 0;
    for (int i = 0; i < n; i++) {
        unsigned want = host_op(op, a[i], b[i], c[i]);
        if (out[2 * i] != want || out[2 * i + 1] != want) {
            if (bad++ < 3)
                printf("    op %d (0x%08x, 0x%08x, 0x%08x): device 0x%08x / portable 0x%08x, "
                       "host 0x%08x\n",
                       op, a[i], b[i], c[i], out[2 * i], out[2 * i + 1], want);
        }
    }
done:
    if (d) GPU_CHECK(gpuFree(d));
    free(out);
    return bad;
}

// --- shuffles and reductions over groups of width lanes -------------------------------
// out[8 * t + k]: xor(1), xor(width-1), down(1), shfl(3), sum_f32, max_f32, sum_i32 (bits),
// lane from ST_WARP_SIZE. A lane mask must stay below width, hence xor(0) at width 1.
__global__ void k_shuffles(const float *v, float *out, int width) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const float x = v[t];
    const int xi = __float_as_int(x);
    out[8 * t + 0] = st_shfl_xor(x, width > 1 ? 1 : 0, width);
    out[8 * t + 1] = __int_as_float(st_shfl_xor(xi, width - 1, width));
    out[8 * t + 2] = st_shfl_down(x, 1, width);
    out[8 * t + 3] = __uint_as_float(st_shfl((unsigned)xi, 3, width));
    out[8 * t + 4] = st_warp_sum_f32(x, width);
    out[8 * t + 5] = st_warp_max_f32(x, width);
    out[8 * t + 6] = __int_as_float(st_warp_sum_i32(xi, width));
    out[8 * t + 7] = (float)(threadIdx.x % ST_WARP_SIZE);
}

static float as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t as_u32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// The expected out[] of k_shuffles for lanes [g, g + width) of a group.
static void host_shuffles(const float *v, int g, int width, float *want) {
    float sum[64], mx[64];
    uint32_t isum[64];
    for (int l = 0; l < width; l++) {
        sum[l] = mx[l] = v[g + l];
        isum[l] = as_u32(v[g + l]);
    }
    for (int m = width >> 1; m > 0; m >>= 1) {
        float s2[64], m2[64];
        uint32_t i2[64];
        for (int l = 0; l < width; l++) {
            s2[l] = sum[l] + sum[l ^ m];
            m2[l] = fmaxf(mx[l], mx[l ^ m]);
            i2[l] = isum[l] + isum[l ^ m];
        }
        memcpy(sum, s2, sizeof sum), memcpy(mx, m2, sizeof mx), memcpy(isum, i2, sizeof isum);
    }
    for (int l = 0; l < width; l++) {
        float *w = want + 8 * (g + l);
        w[0] = v[g + (l ^ (width > 1 ? 1 : 0))];
        w[1] = v[g + (l ^ (width - 1))];
        w[2] = l + 1 < width ? v[g + l + 1] : v[g + l];
        w[3] = v[g + 3 % width];
        w[4] = sum[l], w[5] = mx[l], w[6] = as_float(isum[l]);
    }
}

static long run_shuffles(int width, int warp, long *total) {
    const int n = 256;
    float v[256], out[8 * 256], want[8 * 256], *d = NULL;
    long bad = -1;
    for (int i = 0; i < n; i++)
        v[i] = (float)(rand() % 2001 - 1000) / 8.0f + (float)(rand() % 1000) / 1024.0f;
    if (GPU_CHECK(gpuMalloc(&d, 9 * n * sizeof(float))) ||
        GPU_CHECK(gpuMemcpy(d, v, sizeof v, gpuMemcpyHostToDevice)))
        goto done;
    k_shuffles<<<1, n>>>(d, d + n, width);
    if (GPU_CHECK(gpuGetLastError()) || GPU_CHECK(gpuMemcpy(out, d + n, sizeof out, gpuMemcpyDeviceToHost)))
        goto done;
    for (int g = 0; g < n; g += width) host_shuffles(v, g, width, want);
    bad = 0;
    for (int t = 0; t < n; t++) {
        for (int k = 0; k < 7; k++)
            if (as_u32(out[8 * t + k]) != as_u32(want[8 * t + k]) && bad++ < 3)
                printf("    width %d lane %d result %d: %a, want %a\n", width, t, k, out[8 * t + k],
                       want[8 * t + k]);
        if ((int)out[8 * t + 7] != t % warp && bad++ < 3)
            printf("    lane %d: ST_WARP_SIZE gives lane %d, want %d\n", t, (int)out[8 * t + 7], t % warp);
    }
    *total += 8 * n;
done:
    if (d) GPU_CHECK(gpuFree(d));
    return bad;
}

// --- bounded spin ---------------------------------------------------------------------
__global__ void k_spin(const volatile int *flag, int *res, unsigned iters) {
    res[threadIdx.x] = ST_SPIN_UNTIL(*flag != 0, iters) ? 1 : 0;
}

static long run_spin(int flag_value, int want) {
    int *d = NULL, res[64];
    long bad = -1;
    if (GPU_CHECK(gpuMalloc(&d, 65 * sizeof(int))) ||
        GPU_CHECK(gpuMemcpy(d, &flag_value, sizeof(int), gpuMemcpyHostToDevice)))
        goto done;
    k_spin<<<1, 64>>>(d, d + 1, 1000);
    if (GPU_CHECK(gpuGetLastError()) || GPU_CHECK(gpuMemcpy(res, d + 1, sizeof res, gpuMemcpyDeviceToHost)))
        goto done;
    bad = 0;
    for (int i = 0; i < 64; i++) bad += res[i] != want;
done:
    if (d) GPU_CHECK(gpuFree(d));
    return bad;
}

static uint64_t rng = 1;
static unsigned rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 16);
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    rng = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    rng |= 1;
    srand((unsigned)rng);
    gpuDeviceProp prop;
    if (GPU_CHECK(gpuGetDeviceProperties(&prop, 0))) return 1;
    printf("device %s, warp %d, %s%s build, seed %llu\n", prop.name, prop.warpSize, ST_VENDOR_NAME,
#if defined(STRATA_PORTABLE_INTRINSICS)
           " portable-intrinsics",
#else
           " native",
#endif
           (unsigned long long)rng);

    const int n = 1 << 20;
    unsigned *a = (unsigned *)malloc(3 * (size_t)n * sizeof(unsigned)), *b = a + n, *c = b + n;
    if (!a) return 1;
    // dp4a: every pair of words made of the edge bytes -128, -1, 0, 1, 127
    // (5^8 pairs), accumulators at the wrap edges, then random words.
    static const unsigned char edge[5] = {0x80, 0xff, 0x00, 0x01, 0x7f};
    static const unsigned accs[4] = {0x7fffffffu, 0x80000000u, 0u, 0xffffffffu};
    int m = 0;
    for (int i = 0; i < 625; i++)
        for (int j = 0; j < 625; j++, m++) {
            a[m] =
                edge[i % 5] | edge[i / 5 % 5] << 8 | edge[i / 25 % 5] << 16 | (unsigned)edge[i / 125] << 24;
            b[m] =
                edge[j % 5] | edge[j / 5 % 5] << 8 | edge[j / 25 % 5] << 16 | (unsigned)edge[j / 125] << 24;
            c[m] = (m & 1) ? accs[m / 2 % 4] : rnd();
        }
    for (; m < n; m++) a[m] = rnd(), b[m] = rnd(), c[m] = rnd();
    report("st_dp4a", run_int_op(0, a, b, c, n), n);
    // byte_perm: every 16-bit selector on four (x, y) pairs, junk in bits 16-31.
    for (m = 0; m < n; m++) {
        a[m] = m < 4 * 65536 ? 0x83f27a01u ^ (unsigned)(m >> 16) * 0x11111111u : rnd();
        b[m] = m < 4 * 65536 ? 0x0c5db4e9u ^ (unsigned)(m >> 16) * 0x99999999u : rnd();
        c[m] = (unsigned)(m & 0xffff) | (rnd() & 0xffff0000u);
    }
    report("st_byte_perm", run_int_op(1, a, b, c, n), n);
    // SWAR: every byte pair in every lane, then random words.
    for (m = 0; m < n; m++) {
        unsigned p = (unsigned)m & 0xff, q = (unsigned)(m >> 8) & 0xff;
        a[m] = m < 65536 ? p * 0x01010101u : rnd();
        b[m] = m < 65536 ? q * 0x01010101u : rnd();
    }
    report("st_vsub4", run_int_op(2, a, b, c, n), n);
    report("st_vsubss4", run_int_op(3, a, b, c, n), n);
    free(a);

    const int warp = prop.warpSize;
    long total = 0, bad = 0;
    for (int width = 1; width <= warp; width *= 2) {
        long r = run_shuffles(width, warp, &total);
        bad += r < 0 ? 1 : r;
    }
    report("shuffles and warp reductions, widths 1..warp", bad, total);
    report("ST_SPIN_UNTIL on a set flag returns true", run_spin(1, 1), 64);
    report("ST_SPIN_UNTIL on a clear flag gives up", run_spin(0, 0), 64);
    printf("RESULT %d %d\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
