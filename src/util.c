// util.c: see util.h.
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error[1024];

int st_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

const char *st_last_error(void) { return last_error; }

void st_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "strata: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

void *st_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "strata: out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

void *st_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "strata: out of memory allocating %zu x %zu bytes\n", n, size);
        abort();
    }
    return p;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float st_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); // inf / nan
    if (exp == 0) {
        // zero or subnormal: man * 2^-24, exact in float32
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t st_f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) // inf or nan (keep nan quiet and non-zero)
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); // rounds to >= 65520: inf
    if (ax < 0x38800000u) {
        // result is subnormal or zero: round ax * 2^24 to an integer, ties to even
        float a = bits_f32(ax);
        float m = a * 16777216.0f; // exact: scaling by a power of two
        float r = nearbyintf(m);   // default rounding mode: to nearest even
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t man = ax & 0x7fffff;
    uint32_t exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; // carry into exponent is correct
    return (uint16_t)(sign | h);
}

float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t st_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); // quiet nan
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

uint64_t st_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool st_env_switch(const char *name, bool def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    if (!strcmp(v, "0")) return false;
    if (!strcmp(v, "1")) return true;
    fprintf(stderr, "strata: %s=%s is not 0 or 1; ignored\n", name, v);
    return def;
}

double st_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
