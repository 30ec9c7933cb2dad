// test.h: the unit-test harness shared by tests/test_*.c.
//
// A test file defines `static void test_x(void)` functions using CHECK and runs
// them from main with RUN; TEST_END prints "RESULT <passed> <failed>", which
// tests/run.sh adds up. A test passes when none of its CHECKs failed.
#ifndef STRATA_TEST_H
#define STRATA_TEST_H

#include <stdio.h>
#include <stdlib.h>

static int test_checks_failed;
static int test_n_pass, test_n_fail;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            test_checks_failed++;                                              \
            printf("    check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
        }                                                                      \
    } while (0)

#define RUN(fn)                                                                \
    do {                                                                       \
        int before_ = test_checks_failed;                                      \
        fn();                                                                  \
        fflush(stdout);                                                        \
        if (test_checks_failed == before_) {                                   \
            test_n_pass++;                                                     \
            printf("  ok   %s\n", #fn);                                        \
        } else {                                                               \
            test_n_fail++;                                                     \
            printf("  FAIL %s\n", #fn);                                        \
        }                                                                      \
    } while (0)

#define TEST_END()                                                             \
    do {                                                                       \
        printf("RESULT %d %d\n", test_n_pass, test_n_fail);                    \
        return test_n_fail ? 1 : 0;                                            \
    } while (0)

// Path of the real test model (set by tests/run.sh), or NULL when absent.
static inline const char *test_model_path(void) {
    const char *p = getenv("STRATA_TEST_MODEL");
    return (p && *p) ? p : NULL;
}

#endif
