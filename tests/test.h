// test.h: the unit-test harness shared by tests/test_*.c.
//
// A test file defines `static void test_x(void)` functions using CHECK and runs
// them from main with RUN; TEST_END prints "RESULT <passed> <failed> <skipped>",
// which tests/run.sh adds up. A test passes when none of its CHECKs failed and
// it did not SKIP; a test that cannot run (no model, no GPU, no fixture data)
// calls SKIP("why"), which prints "skip: why", returns from the calling
// function, and counts the test as skipped — never as passed — unless a CHECK
// had already failed, which keeps it a failure. When nothing after a point can
// run (no model for any test), main calls TEST_SKIP_REST("why"): every later RUN
// counts its test as skipped without calling it.
#ifndef STRATA_TEST_H
#define STRATA_TEST_H

#include <stdio.h>
#include <stdlib.h>

static int test_checks_failed;
// (unused in files that count their cases without RUN, such as test_ops.c)
__attribute__((unused)) static int test_skipped;           // set by SKIP in the test RUN is running
__attribute__((unused)) static const char *test_skip_rest; // why no later test can run (TEST_SKIP_REST)
static int test_n_pass, test_n_fail, test_n_skip;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            test_checks_failed++;                                                                            \
            printf("    check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);                            \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

// Marks the running test skipped and returns from the function it is in (a
// helper's SKIP skips the whole test, as the helper's work did not happen).
#define SKIP(...)                                                                                            \
    do {                                                                                                     \
        printf("    skip: ");                                                                                \
        printf(__VA_ARGS__);                                                                                 \
        printf("\n");                                                                                        \
        test_skipped = 1;                                                                                    \
        return;                                                                                              \
    } while (0)

#define RUN(fn)                                                                                              \
    do {                                                                                                     \
        int before_ = test_checks_failed;                                                                    \
        test_skipped = 0;                                                                                    \
        if (test_skip_rest)                                                                                  \
            test_skipped = 1;                                                                                \
        else                                                                                                 \
            fn();                                                                                            \
        fflush(stdout);                                                                                      \
        if (test_checks_failed != before_) {                                                                 \
            test_n_fail++;                                                                                   \
            printf("  FAIL %s\n", #fn);                                                                      \
        } else if (test_skipped) {                                                                           \
            test_n_skip++;                                                                                   \
            printf("  skip %s\n", #fn);                                                                      \
        } else {                                                                                             \
            test_n_pass++;                                                                                   \
            printf("  ok   %s\n", #fn);                                                                      \
        }                                                                                                    \
        test_skipped = 0;                                                                                    \
    } while (0)

#define TEST_END()                                                                                           \
    do {                                                                                                     \
        printf("RESULT %d %d %d\n", test_n_pass, test_n_fail, test_n_skip);                                  \
        return test_n_fail ? 1 : 0;                                                                          \
    } while (0)

// From main: every RUN after this counts as skipped, for the reason given.
#define TEST_SKIP_REST(why) (test_skip_rest = (why), printf("  skip: %s\n", test_skip_rest))

// Path of the real test model (set by tests/run.sh), or NULL when absent.
static inline const char *test_model_path(void) {
    const char *p = getenv("STRATA_TEST_MODEL");
    return (p && *p) ? p : NULL;
}

#endif
