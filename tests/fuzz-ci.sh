#!/bin/sh
# Runs each libFuzzer target for a fixed time over its seed corpus, as CI does
# (`make fuzz-ci` builds the targets first):
#
#   tests/fuzz-ci.sh BUILD SECONDS TARGET...     e.g. tests/fuzz-ci.sh build/fuzz 60 gguf tokenizer
#
# Target T is BUILD/fuzz_T; its seeds are tests/fuzz/T/ (read only), and what
# it finds worth keeping goes to BUILD/corpus/T/, so later runs start from
# there. A crash, leak, sanitizer report (UBSan made fatal here), an input that
# runs over 10 s, or a target that does not finish in SECONDS + 120 s fails
# the run; the input that did it is saved as BUILD/artifacts/T-crash-<sha1>
# (replay: BUILD/fuzz_T FILE). Prints "N targets fuzzed, N failed" last.
BUILD=${1:?usage: $0 BUILD SECONDS TARGET...}
SECS=${2:?usage: $0 BUILD SECONDS TARGET...}
shift 2
cd "$(dirname "$0")/.." || exit 1
export STRATA_TEST_MODEL="${STRATA_TEST_MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1"
mkdir -p "$BUILD/artifacts"
n=0
failed=0
for t in "$@"; do
    n=$((n + 1))
    bin="$BUILD/fuzz_$t"
    mkdir -p "$BUILD/corpus/$t"
    echo "== fuzz_$t: ${SECS} s over tests/fuzz/$t/ and $BUILD/corpus/$t/"
    if [ ! -x "$bin" ] || [ ! -d "tests/fuzz/$t" ]; then
        echo "  FAIL fuzz_$t: $bin or tests/fuzz/$t/ is missing"
        failed=$((failed + 1))
        continue
    fi
    start=$(date +%s)
    timeout -k 10 $((SECS + 120)) "$bin" -max_total_time="$SECS" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$BUILD/artifacts/$t-" "$BUILD/corpus/$t" "tests/fuzz/$t" >"$BUILD/fuzz_$t.log" 2>&1
    rc=$?
    # the seeds' first pass and the final figures; the whole log stays beside the binary
    grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$BUILD/fuzz_$t.log" |
        sed 's/^/  /'
    if [ "$rc" -ne 0 ]; then
        echo "  FAIL fuzz_$t exited $rc after $(($(date +%s) - start)) s; the end of $BUILD/fuzz_$t.log:"
        tail -n 60 "$BUILD/fuzz_$t.log" | sed 's/^/    | /'
        failed=$((failed + 1))
    else
        echo "  ok   fuzz_$t ($(($(date +%s) - start)) s)"
    fi
done
echo "$n targets fuzzed, $failed failed"
[ "$failed" -eq 0 ]
