#!/bin/sh
# Runs the test programs (BUILD/tests/test_*) and scripts (tests/test_*.sh), or
# only the TESTs named, adds up their "RESULT passed failed [skipped]" lines
# (skipped defaults to 0) and prints "N passed, N failed, N skipped" last.
#
#   tests/run.sh [BUILD [TEST...]]      e.g. tests/run.sh build/asan test_gguf test_cli.sh
#
# A test counts one failure more when it:
# - prints no RESULT line, or exits non-zero without reporting a failure, or
#   dies by a signal;
# - runs longer than STRATA_TEST_TIMEOUT seconds (default 600; 0 for no limit):
#   it gets SIGTERM, then SIGKILL 30 s later, with everything it started;
# - leaves a sanitizer report. ASan, UBSan, LSan and TSan write their reports
#   under a directory of run.sh's own (exported as STRATA_SANITIZER_LOGS), so a
#   report from a process the test started (strata serve under test_server.sh)
#   counts as well as one from the test itself.
BUILD=${1:-build}
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.." || exit 1
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
export STRATA_BIN="$BUILD/strata"
export STRATA_BUILD="$BUILD"
export STRATA_TEST_MODEL="${STRATA_TEST_MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
limit=${STRATA_TEST_TIMEOUT:-600}
case "$limit" in '' | *[!0-9]*)
    echo "STRATA_TEST_TIMEOUT='$limit' is not a whole number of seconds" >&2
    exit 2 ;;
esac

san=$(mktemp -d)
trap 'rm -rf "$san"' EXIT
export STRATA_SANITIZER_LOGS="$san"
# Ours come last so that they win over a log_path already in the environment.
# halt_on_error and exitcode keep a report fatal even where recovery is built in.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$san/report:halt_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$san/report:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}log_path=$san/report"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}log_path=$san/report:exitcode=66"

if [ $# -gt 0 ]; then
    list=""
    for name in "$@"; do
        if [ -f "$BUILD/tests/$name" ]; then list="$list $BUILD/tests/$name"
        elif [ -f "tests/$name" ]; then list="$list tests/$name"
        else list="$list missing:$name"
        fi
    done
else
    list=$(for f in "$BUILD"/tests/test_* tests/test_*.sh; do [ -f "$f" ] && echo "$f"; done)
fi

pass=0
fail=0
skip=0
for t in $list; do
    case "$t" in *.o | *.d) continue ;; esac
    echo "== $t"
    if [ "${t#missing:}" != "$t" ]; then
        echo "  FAIL ${t#missing:}: no such test in $BUILD/tests or tests/"
        fail=$((fail + 1))
        continue
    fi
    [ -f "$t" ] || continue
    out=$(mktemp)
    start=$(date +%s)
    if [ "${t%.sh}" != "$t" ]; then
        timeout -k 30 "$limit" sh "$t" >"$out" 2>&1
    else
        timeout -k 30 "$limit" "$t" >"$out" 2>&1
    fi
    rc=$?
    secs=$(($(date +%s) - start))
    cat "$out"
    line=$(grep '^RESULT ' "$out" | tail -n 1)
    reported=$(grep -c 'SUMMARY: [A-Za-z]*Sanitizer' "$out")
    rm -f "$out"
    echo "  ($t: ${secs} s)"
    extra=0
    # timeout exits 124 after its SIGTERM, 137 when SIGKILL was needed
    if [ "$limit" -gt 0 ] && [ "$secs" -ge "$limit" ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
        echo "  FAIL $t timed out after ${limit} s (STRATA_TEST_TIMEOUT=$limit)"
        extra=1
    fi
    for log in "$san"/*; do
        [ -f "$log" ] || continue
        echo "  FAIL $t: sanitizer report $(basename "$log"):"
        sed 's/^/    | /' "$log"
        rm -f "$log"
        extra=1
    done
    if [ "$reported" -gt 0 ]; then
        echo "  FAIL $t: its output holds a sanitizer report"
        extra=1
    fi
    set -- $line
    if [ $# -lt 3 ] || [ $# -gt 4 ]; then
        [ "$extra" -eq 0 ] && echo "  FAIL $t exited $rc without a RESULT line"
        fail=$((fail + 1))
        continue
    fi
    case "$2$3${4:-0}" in *[!0-9]*)
        echo "  FAIL $t: malformed result line '$line'"
        fail=$((fail + 1))
        continue ;;
    esac
    pass=$((pass + $2))
    fail=$((fail + $3))
    skip=$((skip + ${4:-0}))
    if [ "$extra" -eq 0 ] && [ "$rc" -ne 0 ] && [ "$3" -eq 0 ]; then
        if [ "$rc" -gt 128 ]; then echo "  FAIL $t died by signal $((rc - 128))"
        else echo "  FAIL $t exited $rc"
        fi
        extra=1
    fi
    fail=$((fail + extra))
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
