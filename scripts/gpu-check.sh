#!/bin/sh
# gpu-check.sh LOGDIR: the whole GPU check on an NVIDIA machine, in one go:
#   1. builds for CUDA_ARCH (default sm_90), native and with
#      STRATA_PORTABLE_INTRINSICS=1 (the SPIR-V arithmetic path), and checks
#      that the native build's machine code has dp4a and that the portable
#      build's own code calls no vendor intrinsic (NVVM may still turn its
#      byte dot products into dp4a);
#   2. the op harness (every op x type x shape against the CPU reference) on
#      the GPU in both builds;
#   3. compute-sanitizer memcheck over the op harness's GPU cases;
#   4. model parity: GPU logits and greedy tokens against the CPU backends, on
#      the test model when present and on a synthetic model of its shape (and
#      on the latter, 200 greedy steps with overlapped launches and graphs on
#      against both off, to the bit);
#      every architecture's F32 test model against llama.cpp's logits (files
#      written by tests/reference/oracle_files.py into ORACLE_DIR), and each
#      architecture in Q8_0 from strata synth against the CPU backends;
#   5. benchmarks: the read-bandwidth ceiling and matrix x vector GB/s as a
#      fraction of it, both builds (and, with NCU=1, kernel profiles).
# Full logs go to LOGDIR; a short table is printed last. Exit status 0 when
# every step passed.
#
# Environment: CUDA_ARCH, MAKEFILE (default Makefile, which must include
# mk/gpu.mk), NATIVE_BUILD / PORTABLE_BUILD (build folders, default
# build/gpu-native and build/gpu-portable), SKIP_BUILD=1 to use binaries already
# there when they run, STRATA_TEST_MODEL (default the test model path),
# SKIP_PERF=1, SKIP_MEMCHECK=1, MEMCHECK_TIMEOUT (seconds, default 300), NCU=1
# to profile one product of each target type with Nsight Compute, ORACLE_DIR
# (default build/oracle).
set -u
LOG=${1:?usage: scripts/gpu-check.sh LOGDIR}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
cd "$(dirname "$0")/.." || exit 1
CUDA_ARCH=${CUDA_ARCH:-sm_90}
MAKEFILE=${MAKEFILE:-Makefile}
NATIVE=${NATIVE_BUILD:-build/gpu-native}
PORTABLE=${PORTABLE_BUILD:-build/gpu-portable}
MODEL=${STRATA_TEST_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
JOBS=$(nproc 2>/dev/null || echo 4)
SUMMARY="$LOG/summary.txt"
: >"$SUMMARY"
failed=0

row() { # step, result, detail
    printf '%s|%s|%s\n' "$1" "$2" "$3" >>"$SUMMARY"
    [ "$2" = FAIL ] && failed=1
    return 0
}

# The RESULT line of a harness log as "passed N failed M".
result_of() { grep '^RESULT ' "$1" | tail -n 1 | awk '{print "passed " $2 ", failed " $3}'; }

{
    date
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    nvcc --version | tail -n 2
} >"$LOG/machine.txt" 2>&1
row machine info "$(grep -m1 GPU "$LOG/machine.txt" | cut -c1-60)"

# --- 1. build -------------------------------------------------------------------
build() { # name, build dir, extra make arguments
    name=$1 dir=$2
    shift 2
    if [ "${SKIP_BUILD:-0}" = 1 ] && [ -x "$dir/tests/test_ops" ]; then
        "$dir/tests/test_ops" --probe >/dev/null 2>&1
        if [ $? -eq 2 ]; then
            row "build $name" ok "prebuilt $dir"
            return 0
        fi
    fi
    t0=$(date +%s)
    if make -f "$MAKEFILE" GPU=cuda CUDA_ARCH="$CUDA_ARCH" BUILD="$dir" "$@" -j"$JOBS" \
        "$dir/strata" "$dir/tests/test_ops" "$dir/tests/tool_parity" "$dir/tests/tool_logits" \
        >"$LOG/build-$name.log" 2>&1; then
        row "build $name" ok "$CUDA_ARCH, $(($(date +%s) - t0)) s"
    else
        row "build $name" FAIL "see build-$name.log"
        return 1
    fi
}
build native "$NATIVE"
build portable "$PORTABLE" STRATA_PORTABLE_INTRINSICS=1

# dp4a in the products: the native build's machine code has it. The portable
# build's own code must call no vendor intrinsic (counted in the preprocessed
# device source, lines from src/); its PTX and machine code may still hold
# dp4a, because NVVM recognises the portable byte dot product and emits it.
n=$(cuobjdump --dump-sass "$NATIVE/src/gpu/mmvq.o" 2>"$LOG/sass-native.err" | grep -cE 'IDP\.?4A')
row "sass native" "$([ "$n" -gt 0 ] && echo ok || echo FAIL)" "IDP4A in mmvq.o: $n (want > 0)"
arch=${CUDA_ARCH%% *}
own_calls() { # extra nvcc flags: vendor intrinsic calls in Strata's own preprocessed lines
    nvcc -E -arch=compute_${arch#sm_} -std=c++17 -Isrc -Isrc/gpu -DSTRATA_GPU "$@" src/gpu/mmvq.cu \
        2>>"$LOG/intrinsics.err" | awk '/^# [0-9]+ "/ { own = ($3 ~ /^"src\//) } own' |
        grep -cE '__(dp4a|byte_perm|vsub4|vsubss4) *\('
}
nn=$(own_calls)
np=$(own_calls -DSTRATA_PORTABLE_INTRINSICS)
ns=$(cuobjdump --dump-sass "$PORTABLE/src/gpu/mmvq.o" 2>/dev/null | grep -cE 'IDP\.?4A')
row "intrinsics portable" "$([ "$np" -eq 0 ] && [ "$nn" -gt 0 ] && echo ok || echo FAIL)" \
    "vendor intrinsic calls in mmvq.cu's own code: portable $np (want 0), native $nn; IDP4A NVVM made in portable: $ns"

# --- 2. op harness ------------------------------------------------------------------
for v in native portable; do
    dir=$NATIVE
    [ $v = portable ] && dir=$PORTABLE
    if "$dir/tests/test_ops" --require-gpu >"$LOG/ops-$v.log" 2>&1; then
        row "op harness $v" ok "$(result_of "$LOG/ops-$v.log"), $(head -n 1 "$LOG/ops-$v.log")"
    else
        row "op harness $v" FAIL "$(result_of "$LOG/ops-$v.log"), see ops-$v.log"
    fi
done

# --- 3. memcheck ----------------------------------------------------------------------
if [ "${SKIP_MEMCHECK:-0}" != 1 ]; then
    timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 3 \
        "$NATIVE/tests/test_ops" --require-gpu --gpu-only >"$LOG/memcheck.log" 2>&1
    rc=$?
    summary=$(grep -m1 'ERROR SUMMARY' "$LOG/memcheck.log")
    if [ $rc -eq 0 ]; then row memcheck ok "$summary; $(result_of "$LOG/memcheck.log")"
    else row memcheck FAIL "exit $rc; $summary"; fi
fi

# --- 4. model parity --------------------------------------------------------------------
parity() { # name, model, tokens, tool_parity options
    name=$1 model=$2 n=$3
    shift 3
    if "$NATIVE/tests/tool_parity" "$model" -n "$n" "$@" >"$LOG/parity-$name.log" 2>&1; then
        row "parity $name" ok "$(grep -m1 -E 'from cpu-ref|NMSE from A' "$LOG/parity-$name.log" | cut -c1-90)"
    else
        row "parity $name" FAIL "$(grep -m1 -E 'from cpu-ref|NMSE from A|tool_parity' "$LOG/parity-$name.log" | cut -c1-90)"
    fi
    row "greedy $name" info "$(grep -m1 'greedy' "$LOG/parity-$name.log" | cut -c1-90)"
}
if [ -s "$MODEL" ]; then
    # the GPU held to the fast CPU path: greedy tokens against it, logits no
    # further from the float reference than its own
    parity model "$MODEL" 64 -a cpu -b cuda -r cpu-ref
    parity model-f16 "$MODEL" 64 -a cpu -b cuda -r cpu-ref --cache-type f16
    row "speed model" info "$(grep -h 'tok/s' "$LOG/parity-model.log" | cut -d: -f1-2 | cut -c1-40 | tr '\n' ' ')"
else
    row "parity model" skip "no $MODEL"
fi
SYNTH="$LOG/synth.gguf"
if "$NATIVE/strata" synth -o "$SYNTH" --shape smollm2-135m --type Q4_0 --embd-type Q8_0 \
    >"$LOG/synth.log" 2>&1; then
    parity synth-q4_0 "$SYNTH" 32 -a cpu -b cuda
    # overlapped launches and graphs change no arithmetic: 200 greedy steps
    # with both on and with both off give the same logits, tokens and margins
    toks=$(seq -s, 1 40)
    for mode in on off; do
        [ $mode = on ] && ov=1 || ov=0
        STRATA_GPU_OVERLAP=$ov STRATA_GPU_GRAPHS=$ov "$NATIVE/tests/tool_logits" "$SYNTH" --tokens "$toks" \
            --backend cuda --greedy 200 --out "$LOG/overlap-$mode.bin" >"$LOG/overlap-$mode.log" 2>&1
    done
    on=$(grep -E '^(greedy|margins)' "$LOG/overlap-on.log")
    off=$(grep -E '^(greedy|margins)' "$LOG/overlap-off.log")
    if cmp -s "$LOG/overlap-on.bin" "$LOG/overlap-off.bin" && [ -n "$on" ] && [ "$on" = "$off" ]; then
        row "overlap, graphs" ok "on and off: prompt logits equal to the bit, 200 greedy tokens and margins equal"
    else
        row "overlap, graphs" FAIL "on and off differ, see overlap-on.log, overlap-off.log"
    fi
    rm -f "$SYNTH" "$LOG"/overlap-*.bin
else
    row "parity synth" FAIL "strata synth failed, see synth.log"
fi

# every architecture: the F32 test models against llama.cpp's own logits, then
# each architecture in Q8_0 held to the fast CPU path (no further from the
# float reference than it, greedy tokens equal up to a near-tie)
ORACLE=${ORACLE_DIR:-build/oracle}
if [ -f "$ORACLE/manifest.txt" ]; then
    while read -r name toks bound; do
        if "$NATIVE/tests/tool_logits" "$ORACLE/$name.gguf" --tokens "$toks" --backend cuda \
            --compare "$ORACLE/$name.logits" --max-nmse "$bound" >"$LOG/arch-$name.log" 2>&1; then
            row "arch $name" ok "$(grep -o 'worst NMSE [^ ]* (max [^)]*)' "$LOG/arch-$name.log")"
        else
            row "arch $name" FAIL "$(tail -n 1 "$LOG/arch-$name.log" | cut -c1-90)"
        fi
    done <"$ORACLE/manifest.txt"
else
    row "arch oracle" FAIL "no $ORACLE/manifest.txt (tests/reference/oracle_files.py writes it)"
fi
for a in llama qwen2 qwen2moe qwen3 qwen3moe gemma2 gemma3 phi3; do
    if "$NATIVE/strata" synth --arch "$a" --type Q8_0 --dim 256 --ff 512 --layers 4 \
        -o "$LOG/synth-$a.gguf" >>"$LOG/synth.log" 2>&1; then
        parity "q8_0-$a" "$LOG/synth-$a.gguf" 16 -a cpu -b cuda -r cpu-ref
        rm -f "$LOG/synth-$a.gguf"
    else
        row "parity q8_0-$a" FAIL "strata synth --arch $a failed, see synth.log"
    fi
done

# --- 5. benchmarks ------------------------------------------------------------------------
if [ "${SKIP_PERF:-0}" != 1 ]; then
    for v in native portable; do
        dir=$NATIVE
        [ $v = portable ] && dir=$PORTABLE
        if "$dir/tests/test_ops" --perf --gpu-only --require-gpu >"$LOG/perf-$v.md" 2>&1; then
            row "perf $v" ok "$(grep -m1 ceiling "$LOG/perf-$v.md" | cut -c1-40)"
        else
            row "perf $v" FAIL "see perf-$v.md"
        fi
    done
    # the target: 14336x4096 at the backend's own choice of threads per row
    for t in Q4_0 Q8_0 Q4_K IQ4_NL Q6_K; do
        n=$(grep "^| $t | 14336x4096 .* | auto |" "$LOG/perf-native.md" | awk -F'|' '{print $8 "/" $11}')
        p=$(grep "^| $t | 14336x4096 .* | auto |" "$LOG/perf-portable.md" | awk -F'|' '{print $8 "/" $11}')
        row "mmvq $t 14336x4096" info "stream/graph: native$n, portable$p of read bandwidth"
    done
fi

# --- 6. profiles (NCU=1): one product each, its own duration and DRAM throughput -----------
if [ "${NCU:-0}" = 1 ]; then
    for t in Q4_0 Q8_0 Q4_K IQ4_NL; do
        timeout 150 ncu --clock-control none --kernel-name regex:mmvq_kernel --launch-skip 8 \
            --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats "$NATIVE/tests/test_ops" --perf-only "$t:14336x4096" --gpu-only \
            >"$LOG/ncu-$t.txt" 2>&1
        d=$(grep -m1 -E '^ +Duration' "$LOG/ncu-$t.txt" | awk '{print $(NF-1), $NF}')
        m=$(grep -m1 -E '^ +DRAM Throughput' "$LOG/ncu-$t.txt" | awk '{print $NF}')
        o=$(grep -m1 -E '^ +Achieved Occupancy' "$LOG/ncu-$t.txt" | awk '{print $NF}')
        row "ncu $t 14336x4096" info "duration $d, DRAM throughput $m%, occupancy $o%"
    done
fi

echo
echo "GPU check, logs in $LOG"
column -t -s '|' "$SUMMARY" 2>/dev/null || tr '|' '\t' <"$SUMMARY"
exit $failed
