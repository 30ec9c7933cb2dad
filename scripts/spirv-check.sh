#!/bin/sh
# spirv-check.sh LOGDIR: the SPIR-V path run for real, in one go, on an OpenCL
# device that takes SPIR-V (a CPU through PoCL will do; docs/BACKENDS.md says
# how chipStar and PoCL were built for it):
#   1. builds Strata with chipStar's hipcc (BUILD_SPIRV, default build/spirv),
#      and with STRATA_SPIRV_DOT4=1 (BUILD_DOT4, default build/spirv-dot4) when
#      the device reports cl_khr_integer_dot_product;
#   2. strata info --devices: the spirv64 device and its class must be listed;
#   3. the op harness (tests/test_ops --require-gpu) on the device, each build;
#   4. model parity: a synthetic model's logits and greedy tokens on the device
#      against the CPU backend (tool_parity -a cpu -b spirv);
#   5. with PERF=1, the op harness's kernel timings (--perf --gpu-only), for
#      relative comparisons on the same device only.
# Full logs go to LOGDIR; a short table is printed last. Exit status 0 when
# every step passed; a step that could not run is FAIL, never a pass.
#
# Environment: CHIPSTAR (the chipStar installation, default /opt/chipStar),
# CHIP_BE (default opencl), CHIP_DEVICE_TYPE (default cpu), OCL_ICD_VENDORS
# (to pick the OpenCL implementation, e.g. a PoCL built with SPIR-V),
# SKIP_BUILD=1 to use the binaries already built, JOBS (default 2).
set -u
LOG=${1:?usage: scripts/spirv-check.sh LOGDIR}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
cd "$(dirname "$0")/.." || exit 1
CHIPSTAR=${CHIPSTAR:-/opt/chipStar}
BUILD_SPIRV=${BUILD_SPIRV:-build/spirv}
BUILD_DOT4=${BUILD_DOT4:-build/spirv-dot4}
JOBS=${JOBS:-2}
export CHIP_BE=${CHIP_BE:-opencl} CHIP_DEVICE_TYPE=${CHIP_DEVICE_TYPE:-cpu}
SUMMARY="$LOG/summary.txt"
: >"$SUMMARY"
failed=0

row() { # step, result, detail
    printf '%s|%s|%s\n' "$1" "$2" "$3" >>"$SUMMARY"
    [ "$2" = FAIL ] && failed=1
    return 0
}
result_of() { grep '^RESULT ' "$1" | tail -n 1 | awk '{print "passed " $2 ", failed " $3}'; }

if [ ! -x "$CHIPSTAR/bin/hipcc" ]; then
    row chipStar FAIL "no $CHIPSTAR/bin/hipcc (set CHIPSTAR)"
    column -t -s '|' "$SUMMARY"
    exit 1
fi
{
    date
    "$CHIPSTAR/bin/hipcc" --version 2>&1 | head -n 3
    clinfo 2>&1 | grep -E 'Platform Name|Platform Version|Device Name|IL version|Sub-group sizes|integer_dot' |
        sed 's/  */ /g'
} >"$LOG/machine.txt" 2>&1
row machine info "$(grep -m1 'Device Name' "$LOG/machine.txt" | cut -c1-70)"
dot4=0
grep -q cl_khr_integer_dot_product "$LOG/machine.txt" && dot4=1
clinfo 2>/dev/null | grep -q cl_khr_integer_dot_product && dot4=1

# --- 1. build ------------------------------------------------------------------------
build() { # name, dir, extra make arguments
    name=$1 dir=$2
    shift 2
    if [ "${SKIP_BUILD:-0}" = 1 ] && [ -x "$dir/tests/test_ops" ]; then
        row "build $name" ok "prebuilt $dir"
        return 0
    fi
    t0=$(date +%s)
    if make GPU=spirv HIPCC="$CHIPSTAR/bin/hipcc" BUILD="$dir" "$@" -j"$JOBS" "$dir/strata" \
        "$dir/tests/test_ops" "$dir/tests/tool_parity" >"$LOG/build-$name.log" 2>&1; then
        row "build $name" ok "$(($(date +%s) - t0)) s"
    else
        row "build $name" FAIL "see build-$name.log"
        return 1
    fi
}
builds=spirv
build spirv "$BUILD_SPIRV" || builds=""
if [ $dot4 = 1 ]; then
    build dot4 "$BUILD_DOT4" STRATA_SPIRV_DOT4=1 && builds="$builds dot4"
else
    row "build dot4" skip "the device does not report cl_khr_integer_dot_product"
fi
dir_of() { if [ "$1" = dot4 ]; then echo "$BUILD_DOT4"; else echo "$BUILD_SPIRV"; fi; }

# --- 2. the device ------------------------------------------------------------------------
if [ -x "$BUILD_SPIRV/strata" ]; then
    "$BUILD_SPIRV/strata" info --devices >"$LOG/devices.txt" 2>&1
    if grep -q spirv64 "$LOG/devices.txt"; then
        row devices ok "$(grep -m1 spirv64 "$LOG/devices.txt" | sed 's/  */ /g' | cut -c1-90)"
    else
        row devices FAIL "no spirv64 device: $(head -n 3 "$LOG/devices.txt" | tr '\n' ' ' | cut -c1-90)"
    fi
fi

# --- 3. op harness --------------------------------------------------------------------------
for v in $builds; do
    dir=$(dir_of "$v")
    t0=$(date +%s)
    if "$dir/tests/test_ops" --require-gpu >"$LOG/ops-$v.log" 2>&1; then
        row "op harness $v" ok "$(result_of "$LOG/ops-$v.log"), $(($(date +%s) - t0)) s"
    else
        row "op harness $v" FAIL "$(result_of "$LOG/ops-$v.log"), see ops-$v.log"
    fi
done

# --- 4. model parity ----------------------------------------------------------------------------
if [ -x "$BUILD_SPIRV/strata" ]; then
    for t in Q8_0 Q4_0; do
        m="$LOG/synth-$t.gguf"
        if "$BUILD_SPIRV/strata" synth --arch llama --type "$t" --dim 256 --ff 512 --layers 4 \
            -o "$m" >>"$LOG/synth.log" 2>&1; then
            if "$BUILD_SPIRV/tests/tool_parity" "$m" -n 16 -a cpu -b spirv >"$LOG/parity-$t.log" 2>&1; then
                row "parity $t" ok "$(grep -m1 -E 'NMSE' "$LOG/parity-$t.log" | cut -c1-90)"
            else
                row "parity $t" FAIL "$(grep -m1 -E 'NMSE|tool_parity|error' "$LOG/parity-$t.log" | cut -c1-90)"
            fi
            rm -f "$m"
        else
            row "parity $t" FAIL "strata synth failed, see synth.log"
        fi
    done
fi

# --- 5. timings ---------------------------------------------------------------------------------
if [ "${PERF:-0}" = 1 ]; then
    for v in $builds; do
        dir=$(dir_of "$v")
        if "$dir/tests/test_ops" --perf --gpu-only --require-gpu >"$LOG/perf-$v.md" 2>&1; then
            row "perf $v" ok "see perf-$v.md"
        else
            row "perf $v" FAIL "see perf-$v.md"
        fi
    done
fi

echo
echo "SPIR-V check, logs in $LOG"
column -t -s '|' "$SUMMARY" 2>/dev/null || tr '|' '\t' <"$SUMMARY"
exit $failed
