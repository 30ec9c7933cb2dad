#!/bin/sh
# check-portability.sh: proves that the single GPU source builds for every
# target, with Debian packages only (plus the CUDA toolkit for NVIDIA):
#   check-compat    tools/check-compat over src/gpu and tests/compat
#   amd-gfxNNNN     each GPU source, device code for gfx906 and gfx942 (wave64),
#                   gfx1030, gfx1100 and gfx1201 (wave32): clang -x hip against
#                   Debian's ROCm HIP headers, then llc to a code object, whose
#                   wavefront size must match ST_WARP_SIZE's family
#   amd-host        the host pass of each source against the same headers (the
#                   gpu* runtime names resolve to real HIP declarations)
#   spirv           device code for spirv64 with __HIP_PLATFORM_SPIRV__ against
#                   tests/compat/spirv_device_api.h, llc to SPIR-V, spirv-val
#   spirv-dot4      the same with STRATA_SPIRV_DOT4: the int8 dot product must
#                   lower to OpSDot (checked in tests/compat/compat_gpu_test.cu)
#   cuda-sm_NN      nvcc for sm_75, sm_80, sm_90 and sm_120
#   cuda-portable   nvcc for sm_90 with STRATA_PORTABLE_INTRINSICS
# Sources: src/gpu/*.cu and tests/compat/*.cu. Prints one summary line per
# target and exits non-zero when any target fails. Missing LLVM, SPIR-V and HIP
# tools are installed with apt-get (Debian 12: clang-22/llvm-22 from
# bookworm-security, spirv-tools, libamdhip64-dev).
#
# usage: scripts/check-portability.sh [LOGDIR]      (default: a fresh temp dir)
# env:   LLVM_VERSION (22), NVCC (nvcc, else /usr/local/cuda/bin/nvcc), JOBS (nproc)
set -u

if [ "${1:-}" = "--job" ]; then
    # One compile: --job TARGET SOURCE, run from the repository root by xargs.
    target=$2 src=$3
    name=$(echo "$src" | sed 's|/|__|g')
    log="$LOGDIR/$target/$name.log"
    obj="$LOGDIR/$target/$name"
    v=$LLVM_VERSION
    # The warning flags are the real build's (mk/gpu.mk): a warning there fails it.
    amd_flags="-x hip -fgpu-rdc -nogpulib -O2 -std=c++17 -Isrc -Isrc/gpu -Wall -Wextra -Werror"
    spirv_flags="-x hip --offload=spirv64 --cuda-device-only -nogpulib -nogpuinc -O2 -std=c++17
        -Isrc -Isrc/gpu -Wall -Wextra -Werror -D__HIP_PLATFORM_SPIRV__
        -include tests/compat/spirv_device_api.h"
    run() { echo "+ $*" >>"$log"; "$@" >>"$log" 2>&1; }
    ok=0
    case $target in
    amd-gfx*)
        arch=${target#amd-}
        case $arch in gfx9*) wave=64 ;; *) wave=32 ;; esac
        # ROCm 5.2's headers expect the compiler to define the wave size.
        # shellcheck disable=SC2086
        run clang++-"$v" $amd_flags --cuda-device-only --offload-arch="$arch" \
            -D__AMDGCN_WAVEFRONT_SIZE="$wave" -emit-llvm -c "$src" -o "$obj.bc" &&
            run llc-"$v" -mtriple=amdgcn-amd-amdhsa -mcpu="$arch" -filetype=obj "$obj.bc" -o "$obj.o" &&
            llvm-readelf-"$v" --notes "$obj.o" >"$obj.notes" 2>>"$log" || ok=1
        if [ $ok = 0 ]; then
            # Every kernel's code object must run at the wave size ST_WARP_SIZE assumed.
            sizes=$(grep -oE 'wavefront_size: *[0-9]+' "$obj.notes" | awk '{print $2}' | sort -u)
            echo "wavefront sizes: ${sizes:-none}" >>"$log"
            [ -z "$sizes" ] || [ "$sizes" = "$wave" ] ||
                { echo "code object wavefront size differs from $wave" >>"$log"; ok=1; }
        fi
        ;;
    amd-host)
        # shellcheck disable=SC2086
        run clang++-"$v" $amd_flags --cuda-host-only --offload-arch=gfx906 \
            -D__AMDGCN_WAVEFRONT_SIZE=64 -fsyntax-only "$src" || ok=1
        ;;
    spirv | spirv-dot4)
        extra="" ext=""
        if [ "$target" = spirv-dot4 ]; then
            extra="-DSTRATA_SPIRV_DOT4" ext="--spirv-ext=+SPV_KHR_integer_dot_product"
        fi
        # shellcheck disable=SC2086
        run clang++-"$v" $spirv_flags $extra -emit-llvm -c "$src" -o "$obj.bc" &&
            run llc-"$v" -mtriple=spirv64-unknown-unknown $ext -filetype=obj "$obj.bc" -o "$obj.spv" &&
            run spirv-val "$obj.spv" &&
            spirv-dis "$obj.spv" -o "$obj.spvasm" 2>>"$log" || ok=1
        if [ $ok = 0 ] && [ "$target" = spirv-dot4 ]; then
            n=$(grep -c 'OpSDot' "$obj.spvasm")
            echo "OpSDot: $n" >>"$log"
            case $src in
            tests/compat/*) [ "$n" -gt 0 ] || { echo "st_dp4a did not lower to OpSDot" >>"$log"; ok=1; } ;;
            esac
        fi
        ;;
    cuda-sm_* | cuda-portable)
        if [ "$target" = cuda-portable ]; then sm=90 extra="-DSTRATA_PORTABLE_INTRINSICS"
        else sm=${target#cuda-sm_} extra=""; fi
        # Host code does not depend on the architecture: sm_90 compiles it (-c),
        # the others only the device code (-cubin).
        out="-c -o $obj.o"
        [ "$target" = cuda-sm_90 ] || out="-cubin -o $obj.cubin"
        # shellcheck disable=SC2086
        run "$NVCC" -std=c++17 -O2 -Isrc -Isrc/gpu -arch=sm_"$sm" -Werror all-warnings \
            -Xcompiler -Wall,-Wextra $extra $out "$src" || ok=1
        ;;
    *) echo "unknown target $target" >>"$log"; ok=1 ;;
    esac
    if [ $ok = 0 ]; then touch "$obj.ok"; else touch "$obj.fail"; fi
    exit 0
fi

cd "$(dirname "$0")/.." || exit 2
start=$(date +%s)
LLVM_VERSION=${LLVM_VERSION:-22}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
LOGDIR=${1:-$(mktemp -d "${TMPDIR:-/tmp}/strata-portability.XXXXXX")}
mkdir -p "$LOGDIR" || exit 2
LOGDIR=$(cd "$LOGDIR" && pwd)
if [ -z "${NVCC:-}" ]; then
    NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
fi
export LOGDIR LLVM_VERSION NVCC

# --- tools: install what is missing from Debian's packages
v=$LLVM_VERSION
pkgs=""
for t in clang++-"$v" llc-"$v" llvm-readelf-"$v"; do
    command -v "$t" >/dev/null 2>&1 || pkgs="clang-$v llvm-$v"
done
command -v spirv-val >/dev/null 2>&1 || pkgs="$pkgs spirv-tools"
[ -f /usr/include/hip/hip_runtime.h ] || pkgs="$pkgs libamdhip64-dev"
if [ -n "$pkgs" ]; then
    echo "installing:$pkgs"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    # shellcheck disable=SC2086
    { $sudo apt-get update && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y $pkgs; } \
        >"$LOGDIR/apt.log" 2>&1 || echo "apt-get failed: see $LOGDIR/apt.log"
fi
echo "tools: $(clang++-"$v" --version 2>/dev/null | head -n 1 || echo "clang++-$v missing");" \
    "$(spirv-val --version 2>/dev/null | head -n 1 || echo "spirv-val missing");" \
    "$("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo "nvcc missing")"

# --- the checker
failed=0
if sh tools/check-compat >"$LOGDIR/check-compat.log" 2>&1; then
    echo "portability: check-compat      PASS"
else
    echo "portability: check-compat      FAIL"
    sed 's/^/    /' "$LOGDIR/check-compat.log" | head -n 40
    failed=1
fi

# --- every source for every target
# Largest first, so that the long compiles start early.
sources=$(ls -S src/gpu/*.cu tests/compat/*.cu 2>/dev/null)
if [ -z "$sources" ]; then
    echo "portability: no GPU sources found"
    exit 1
fi
targets="amd-gfx906 amd-gfx942 amd-gfx1030 amd-gfx1100 amd-gfx1201 amd-host spirv spirv-dot4
         cuda-sm_75 cuda-sm_80 cuda-sm_90 cuda-sm_120 cuda-portable"
for t in $targets; do mkdir -p "$LOGDIR/$t"; rm -f "$LOGDIR/$t"/*.ok "$LOGDIR/$t"/*.fail; done
for s in $sources; do for t in $targets; do echo "$t $s"; done; done |
    xargs -P "$JOBS" -n 2 sh "$0" --job

nsrc=$(echo "$sources" | wc -l)
failing=""
for t in $targets; do
    nok=$(find "$LOGDIR/$t" -name '*.ok' | wc -l)
    if [ "$nok" -eq "$nsrc" ]; then
        extra=""
        if [ "$t" = spirv-dot4 ]; then
            extra=" ($(grep -h '^OpSDot' "$LOGDIR/$t"/*.log | awk '{n += $2} END {print n + 0}') OpSDot)"
        fi
        printf 'portability: %-16s PASS %s/%s sources%s\n' "$t" "$nok" "$nsrc" "$extra"
    else
        names=$(for f in "$LOGDIR/$t"/*.fail; do basename "${f%.fail}" | sed 's|.*__||'; done |
            tr '\n' ' ')
        printf 'portability: %-16s FAIL %s/%s sources; failing: %s\n' "$t" "$nok" "$nsrc" "$names"
        failing="$failing $(echo "$LOGDIR/$t"/*.fail)"
        failed=1
    fi
done
# The first errors of each failing source, once, from the first target it failed on.
seen=""
for f in $failing; do
    src=$(basename "${f%.fail}")
    case " $seen " in *" $src "*) continue ;; esac
    seen="$seen $src"
    echo "  $(echo "$src" | sed 's|__|/|g') ($(basename "$(dirname "$f")")):"
    grep -v '^+ ' "${f%.fail}.log" | grep -E 'error|differs|did not' | sort -u | head -n 3 |
        cut -c 1-200 | sed 's/^/    /'
done
echo "portability: logs in $LOGDIR, $(($(date +%s) - start)) s"
if [ $failed = 0 ]; then echo "check-portability: passed"; else echo "check-portability: FAILED"; fi
exit $failed
