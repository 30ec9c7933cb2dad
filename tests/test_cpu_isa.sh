#!/bin/sh
# The fast CPU backend on each kernel set below the best one this CPU has: the
# run-time dispatch, capped with STRATA_CPU_ISA, must give correct results with
# the AVX-512 (without AMX), AVX-VNNI, AVX2 and scalar matrix kernels (and the
# plain attention loop) as
# it does with the best. Runs the op harness and the attention test per set; a
# set the CPU lacks is skipped by the dispatch itself (it never goes above the CPU).
BUILD=${STRATA_BUILD:-build}
pass=0
fail=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for isa in avx512 avxvnni avx2 scalar; do
    for t in test_ops test_attention; do
        STRATA_CPU_ISA=$isa "$BUILD/tests/$t" >"$tmp" 2>&1
        rc=$?
        line=$(grep '^RESULT ' "$tmp" | tail -n 1)
        set -- $line
        if [ "$rc" -eq 0 ] && [ -n "$line" ] && [ "$2" -gt 0 ] && [ "$3" -eq 0 ]; then
            pass=$((pass + 1))
            echo "  ok   $t with STRATA_CPU_ISA=$isa ($2 cases)"
        else
            fail=$((fail + 1))
            echo "  FAIL $t with STRATA_CPU_ISA=$isa (exit $rc):"
            grep -E 'FAIL|seed' "$tmp" | head -10 | sed 's/^/    | /'
        fi
    done
done
# the kernel benchmark refuses what it cannot time, with a message naming it
for spec in Q5_0:16x32 Q4_K:16x100 Q4_0:0x32 Q4_0:16x32x65 Q4_0 junk; do
    "$BUILD/tests/test_gemm" --perf "$spec" >"$tmp" 2>&1
    rc=$?
    if [ "$rc" -eq 2 ] && grep -q -- '--perf: ' "$tmp"; then
        pass=$((pass + 1))
        echo "  ok   test_gemm --perf $spec refused: $(head -n 1 "$tmp" | cut -c1-80)"
    else
        fail=$((fail + 1))
        echo "  FAIL test_gemm --perf $spec (exit $rc, want 2 and a message):"
        head -5 "$tmp" | sed 's/^/    | /'
    fi
done
# so does the op harness's benchmark (parsed before any backend opens)
for spec in X:16x32 Q4_0:16x33 Q4_0:0x32 Q4_0:16x32x8 Q4_0:16x32/1 Q4_0:1048576x65536 F16:64x64x512 Q4_0:16x32x; do
    "$BUILD/tests/test_ops" --perf-only "$spec" >"$tmp" 2>&1
    rc=$?
    if [ "$rc" -eq 2 ] && grep -q -- '--perf-only ' "$tmp"; then
        pass=$((pass + 1))
        echo "  ok   test_ops --perf-only $spec refused: $(head -n 1 "$tmp" | cut -c1-80)"
    else
        fail=$((fail + 1))
        echo "  FAIL test_ops --perf-only $spec (exit $rc, want 2 and a message):"
        head -5 "$tmp" | sed 's/^/    | /'
    fi
done
echo "RESULT $pass $fail"
