// util.h: error reporting, half-precision conversion, small helpers shared by every module.
#ifndef STRATA_UTIL_H
#define STRATA_UTIL_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// --- errors -----------------------------------------------------------------
// Library code never exits: a failing function records a message with st_fail()
// and returns its error value; only main() prints st_last_error() and exits.
// The message is thread-local, overwritten by the next failure.

// Records a printf-style message as the current thread's last error; returns -1.
int st_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The last message recorded by st_fail() on this thread ("" if none). Never NULL.
const char *st_last_error(void);

// Always-on invariant check: a broken invariant is a bug, not bad input.
#define ST_ASSERT(cond)                                                                                      \
    do {                                                                                                     \
        if (!(cond)) st_assert_fail(#cond, __FILE__, __LINE__);                                              \
    } while (0)
__attribute__((noreturn)) void st_assert_fail(const char *expr, const char *file, int line);

// malloc/calloc that abort with a message on exhaustion of tiny bookkeeping
// allocations; large buffers sized by input use plain malloc and report errors.
void *st_xmalloc(size_t n);
void *st_xcalloc(size_t n, size_t size);

// --- half precision ----------------------------------------------------------
// IEEE binary16 and bfloat16 <-> float32, exact for every input (NaN kept NaN,
// rounding to nearest even on the way down).
float st_fp16_to_f32(uint16_t h);
uint16_t st_f32_to_fp16(float f);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);

// --- random numbers ----------------------------------------------------------------
// splitmix64: advances *state and returns the next 64 random bits. Small and
// fast; for seeding, synthetic data and test inputs, not for cryptography.
uint64_t st_splitmix64(uint64_t *state);

// --- switches --------------------------------------------------------------------
// The on/off switch in environment variable name: def when it is unset or
// empty, false for "0", true for "1"; any other value is reported on stderr
// ("strata: NAME=value is not 0 or 1; ignored") and gives def.
bool st_env_switch(const char *name, bool def);

// --- time -----------------------------------------------------------------------
// Monotonic seconds.
double st_time_s(void);

#ifdef __cplusplus
}
#endif

#endif
