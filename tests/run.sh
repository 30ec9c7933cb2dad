#!/bin/sh
# Runs every test program (build/tests/test_*) and script (tests/test_*.sh),
# adds up their "RESULT passed failed" lines, and prints "N passed, N failed".
# A program that dies without its RESULT line counts as one failure.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
export STRATA_BIN="$BUILD/strata"
export STRATA_BUILD="$BUILD"
export STRATA_TEST_MODEL="${STRATA_TEST_MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
pass=0
fail=0
for t in "$BUILD"/tests/test_* tests/test_*.sh; do
    [ -f "$t" ] || continue
    case "$t" in *.o|*.d) continue ;; esac
    echo "== $t"
    out=$(mktemp)
    if [ "${t%.sh}" != "$t" ]; then sh "$t" >"$out" 2>&1; else "$t" >"$out" 2>&1; fi
    rc=$?
    cat "$out"
    line=$(grep '^RESULT ' "$out" | tail -n 1)
    rm -f "$out"
    if [ -z "$line" ]; then
        echo "  FAIL $t exited $rc without a RESULT line"
        fail=$((fail + 1))
        continue
    fi
    set -- $line
    pass=$((pass + $2))
    fail=$((fail + $3))
    if [ "$rc" -ne 0 ] && [ "$3" -eq 0 ]; then
        echo "  FAIL $t exited $rc"
        fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
