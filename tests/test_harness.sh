#!/bin/sh
# The test harness tested: tests/test.h and tests/run.sh run on fake tests whose
# outcomes are known — a skip, a failure before a skip, a whole program skipped,
# the old two-number RESULT line, a non-zero exit without a failure, death by a
# signal, a hang past the time limit, a sanitizer report and a missing RESULT
# line — and the totals must be exactly what each deserves.
cd "$(dirname "$0")/.." || exit 1
pass=0
fail=0
skip=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/tests"

# check NAME COMMAND...: one test, passed when COMMAND succeeds.
check() {
    name=$1
    shift
    if "$@"; then
        pass=$((pass + 1))
        echo "  ok   $name"
    else
        fail=$((fail + 1))
        echo "  FAIL $name"
    fi
}

# A C test on test.h: one pass, one SKIP, one CHECK failure before a SKIP (a
# failure), then TEST_SKIP_REST before one more RUN (a skip).
cat >"$tmp/skips.c" <<'EOF'
#include "test.h"
static void t_pass(void) { CHECK(1 + 1 == 2, "arithmetic"); }
static void t_skip(void) {
    SKIP("nothing to test here");
    CHECK(0, "not reached");
}
static void t_fail_then_skip(void) {
    CHECK(0, "a planted failure");
    SKIP("too late to skip");
}
int main(void) {
    RUN(t_pass);
    RUN(t_skip);
    RUN(t_fail_then_skip);
    TEST_SKIP_REST("no model");
    RUN(t_pass);
    TEST_END();
}
EOF
if cc -std=c11 -Wall -Wextra -Werror -Itests "$tmp/skips.c" -o "$tmp/build/tests/test_fake_skips" 2>"$tmp/cc.log"; then
    "$tmp/build/tests/test_fake_skips" >"$tmp/skips.out"
    rc=$?
    check test_h_result_line grep -qx "RESULT 1 1 2" "$tmp/skips.out"
    check test_h_exit_status [ "$rc" -eq 1 ]
    check test_h_skip_line grep -q "^  skip t_skip" "$tmp/skips.out"
    check test_h_skip_not_run sh -c "! grep -q 'not reached' '$tmp/skips.out'"
else
    cat "$tmp/cc.log"
    fail=$((fail + 1))
    echo "  FAIL test_h: the fake C test does not compile"
fi

fake() { # fake NAME BODY: a shell-script test program
    printf '#!/bin/sh\n%s\n' "$2" >"$tmp/build/tests/$1"
    chmod +x "$tmp/build/tests/$1"
}
fake test_fake_old_format 'echo "RESULT 2 0"'
fake test_fake_nonzero 'echo "RESULT 1 0 0"; exit 3'
fake test_fake_signal 'echo "RESULT 1 0 0"; kill -USR1 $$'
fake test_fake_hang 'echo "RESULT 1 0 0"; sleep 60'
fake test_fake_sanitizer 'echo "==1==ERROR: AddressSanitizer: planted" >"$STRATA_SANITIZER_LOGS/report.1"; echo "RESULT 1 0 0"'
fake test_fake_no_result 'echo "nothing to say"'

STRATA_TEST_TIMEOUT=2 tests/run.sh "$tmp/build" test_fake_skips test_fake_old_format test_fake_nonzero \
    test_fake_signal test_fake_hang test_fake_sanitizer test_fake_no_result >"$tmp/run.out" 2>&1
rc=$?
failed_before=$fail
# passes: skips 1, old format 2, nonzero 1, signal 1, hang 1, sanitizer 1 = 7;
# failures: skips 1, nonzero 1, signal 1, hang 1, sanitizer 1, no result 1 = 6.
check run_sh_totals [ "$(tail -n 1 "$tmp/run.out")" = "7 passed, 6 failed, 2 skipped" ]
check run_sh_exit_status [ "$rc" -eq 1 ]
check run_sh_nonzero grep -q "FAIL .*test_fake_nonzero exited 3" "$tmp/run.out"
check run_sh_signal grep -q "FAIL .*test_fake_signal died by signal 10" "$tmp/run.out"
check run_sh_timeout grep -q "FAIL .*test_fake_hang timed out after 2 s" "$tmp/run.out"
check run_sh_sanitizer grep -q "planted" "$tmp/run.out"
check run_sh_no_result grep -q "FAIL .*test_fake_no_result exited 0 without a RESULT line" "$tmp/run.out"
# the fake run's own output (full of planted failures) only when it surprised us
[ "$fail" -eq "$failed_before" ] || sed 's/^/    | /' "$tmp/run.out"

# A clean run: exit 0 and the old "N passed, N failed" at the start of the line.
STRATA_TEST_TIMEOUT=5 tests/run.sh "$tmp/build" test_fake_old_format >"$tmp/ok.out" 2>&1
rc=$?
check run_sh_clean_exit_status [ "$rc" -eq 0 ]
check run_sh_clean_totals [ "$(tail -n 1 "$tmp/ok.out")" = "2 passed, 0 failed, 0 skipped" ]
echo "RESULT $pass $fail $skip"
