#!/bin/sh
# check-portability.sh: proves that the single GPU source builds for every
# target, with Debian packages only (plus the CUDA toolkit for NVIDIA):
#   check-compat    tools/check-compat over src/gpu and tests/compat
#   amd-gfxNNNN     each GPU source, device code for gfx906 and gfx942 (wave64),
#                   gfx1030, gfx1100 and gfx1201 (wave32): clang -x hip -O3
#                   against Debian's ROCm HIP headers, linked with ROCm's device
#                   libraries into a complete code object (no undefined
#                   symbol); from its metadata, every kernel's wavefront size
#                   must match ST_WARP_SIZE's family, its static LDS fit 64 KiB,
#                   and the hot kernels (mmvq, mmq, attention) must not spill
#                   (the tensor-core forms mmh_kernel and attn_mma_kernel, which
#                   AMD targets run only as the compat layer's twins when a test
#                   forces them, may);
#                   registers and occupancy are printed as a table
#   amd-host        the host pass of each source against the same headers (the
#                   gpu* runtime names resolve to real HIP declarations)
#   spirv           device code for spirv64 with __HIP_PLATFORM_SPIRV__ against
#                   tests/compat/spirv_device_api.h (chipStar's declarations),
#                   llc to SPIR-V, spirv-val, and every import of the module
#                   must be a name chipStar's device library defines
#                   (tests/compat/chipstar_devicelib_exports.txt)
#   spirv-dot4      the same with STRATA_SPIRV_DOT4: the int8 dot product must
#                   lower to OpSDot (checked in tests/compat/compat_gpu_test.cu)
#   cuda-sm_NN      nvcc for sm_75, sm_80, sm_90 and sm_120
#   cuda-portable   nvcc for sm_90 with STRATA_PORTABLE_INTRINSICS
# Sources: src/gpu/*.cu and tests/compat/*.cu. Prints one summary line per
# target and exits non-zero when any target fails. Missing LLVM, SPIR-V and HIP
# tools are installed with apt-get (Debian 12: clang-22/llvm-22/lld-22 from
# bookworm-security, spirv-tools, libamdhip64-dev, rocm-device-libs).
#
# usage: scripts/check-portability.sh [LOGDIR]      (default: a fresh temp dir)
# env:   LLVM_VERSION (22), NVCC (nvcc, else /usr/local/cuda/bin/nvcc), JOBS (nproc),
#        ROCM_BITCODE (Debian's rocm-device-libs folder), CHIPSTAR (a chipStar
#        installation: check SPIR-V imports against its own device library),
#        TARGETS and SOURCES (subsets, to re-check one change; CI runs all)
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
    amd_link_flags="-x hip --cuda-device-only --no-gpu-bundle-output -O3 -std=c++17 -Isrc -Isrc/gpu
        -Wall -Wextra -Werror -mcode-object-version=5 --rocm-device-lib-path=$LOGDIR/amd-devlibs
        -Xclang -mlink-builtin-bitcode -Xclang $LOGDIR/amd-devlibs/hip.bc"
    spirv_flags="-x hip --offload=spirv64 --cuda-device-only -nogpulib -nogpuinc -O2 -std=c++17
        -Isrc -Isrc/gpu -Wall -Wextra -Werror -D__HIP_PLATFORM_SPIRV__
        -include tests/compat/spirv_device_api.h"
    run() { echo "+ $*" >>"$log"; "$@" >>"$log" 2>&1; }
    ok=0
    case $target in
    amd-gfx*)
        arch=${target#amd-}
        case $arch in gfx9*) wave=64 ;; *) wave=32 ;; esac
        # The real build's compile (-O3, no -fgpu-rdc), linked with ROCm's device
        # libraries into the code object a HIP runtime loads. ROCm 5.2's headers
        # expect the compiler to define the wave size, and call hip.bc, which
        # clang 22 no longer links by itself.
        # shellcheck disable=SC2086
        run clang++-"$v" $amd_link_flags --offload-arch="$arch" -D__AMDGCN_WAVEFRONT_SIZE="$wave" \
            -save-temps=obj -c "$src" -o "$obj.hsaco" &&
            llvm-readelf-"$v" --notes "$obj.hsaco" >"$obj.notes" 2>>"$log" || ok=1
        if [ $ok = 0 ]; then
            # A complete code object imports nothing.
            undef=$(llvm-nm-"$v" -u "$obj.hsaco" 2>>"$log" | awk '{print $NF}' | tr '\n' ' ')
            [ -z "$undef" ] || { echo "undefined symbols in the code object: $undef" >>"$log"; ok=1; }
            # One row per kernel: metadata from the notes, occupancy from the
            # compiler's own count in the assembly it wrote (-save-temps).
            temps="$LOGDIR/$target/$(basename "$src" .cu)-hip-amdgcn-amd-amdhsa-$arch"
            awk -v arch="$arch" -v src="$(basename "$src" .cu)" -f scripts/amdgpu-kernels.awk \
                "$obj.notes" "$temps.s" >"$obj.kernels" 2>>"$log" || ok=1
            rm -f "$temps".* "$obj.hsaco.resolution.txt"
            # Every kernel must run at the wave size ST_WARP_SIZE assumed, keep
            # its static LDS within 64 KiB, and the hot kernels must not spill
            # to scratch (SGPR spills go to VGPR lanes: counted in the table);
            # the tensor-core forms are not hot on these targets (above).
            awk -F '\t' -v wave="$wave" -v logf="$log" '
                $5 != wave { print "kernel " $3 ": wavefront size " $5 ", want " wave >>logf; bad = 1 }
                $11 > 65536 { print "kernel " $3 ": static LDS " $11 " bytes > 64 KiB" >>logf; bad = 1 }
                $3 ~ /^(mmvq|mmq|attn)_/ && $3 !~ /^attn_mma_/ && ($9 > 0 || $12 > 0) {
                    print "kernel " $3 ": " $9 " VGPRs spilled, " $12 " bytes of scratch" >>logf
                    bad = 1 }
                END { exit bad }' "$obj.kernels" || ok=1
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
        if [ $ok = 0 ]; then
            # Every import must be a name chipStar's device library defines
            # (built-in variables aside): anything else fails to link there.
            awk '/OpDecorate .* BuiltIn / { builtin[$2] = 1 }
                 /OpDecorate .* LinkageAttributes .* Import$/ { imp[$2] = $4 }
                 END { for (id in imp) if (!(id in builtin)) { gsub(/"/, "", imp[id]); print imp[id] } }' \
                "$obj.spvasm" | sort >"$obj.imports"
            unknown=$(grep -v '^#' "$SPIRV_EXPORTS" | sort | comm -23 "$obj.imports" - | tr '\n' ' ')
            echo "imports: $(wc -l <"$obj.imports")" >>"$log"
            [ -z "$unknown" ] ||
                { echo "imports that chipStar does not define: $unknown" >>"$log"; ok=1; }
        fi
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
# The names a SPIR-V module may import: chipStar's device library's own list
# where a chipStar installation is given (CHIPSTAR), else the one kept here.
SPIRV_EXPORTS=$(pwd)/tests/compat/chipstar_devicelib_exports.txt
if [ -n "${CHIPSTAR:-}" ]; then
    SPIRV_EXPORTS=$LOGDIR/chipstar_devicelib_exports.txt
    llvm-nm-"$LLVM_VERSION" --defined-only --extern-only "$CHIPSTAR/lib/hip-device-lib/hipspv-spirv64.bc" |
        awk '{print $3}' | sort >"$SPIRV_EXPORTS" || exit 2
fi
export LOGDIR LLVM_VERSION NVCC SPIRV_EXPORTS

# --- tools: install what is missing from Debian's packages
v=$LLVM_VERSION
pkgs=""
for t in clang++-"$v" llc-"$v" llvm-readelf-"$v"; do
    command -v "$t" >/dev/null 2>&1 || pkgs="clang-$v llvm-$v"
done
[ -x /usr/lib/llvm-"$v"/bin/ld.lld ] || pkgs="$pkgs lld-$v"
ROCM_BITCODE=${ROCM_BITCODE:-/usr/lib/x86_64-linux-gnu/amdgcn/bitcode}
[ -f "$ROCM_BITCODE/ocml.bc" ] || pkgs="$pkgs rocm-device-libs"
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

# --- ROCm's device libraries, as clang wants them for each AMD target.
# Debian's (ROCm 5.2) predate gfx942, gfx11 and gfx12: for those the only
# missing piece is the one constant that names the ISA (major * 1000 +
# minor * 100 + stepping), made here; the rest of the libraries is generic.
devlibs=$LOGDIR/amd-devlibs
rm -rf "$devlibs" && mkdir -p "$devlibs" || exit 2
for f in "$ROCM_BITCODE"/*.bc; do ln -s "$f" "$devlibs/"; done
for arch in gfx906 gfx942 gfx1030 gfx1100 gfx1201; do
    n=${arch#gfx}
    [ -e "$devlibs/oclc_isa_version_$n.bc" ] && continue
    maj=${n%??} rest=${n#"${n%??}"}
    isa=$((maj * 1000 + ${rest%?} * 100 + 0x${rest#?}))
    echo "const __constant int __oclc_ISA_version = $isa;" >"$devlibs/isa_$n.cl"
    clang-"$v" -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -nogpulib \
        -Xclang -mcode-object-version=none -emit-llvm -c "$devlibs/isa_$n.cl" \
        -o "$devlibs/oclc_isa_version_$n.bc" 2>>"$LOGDIR/amd-devlibs.log" ||
        echo "portability: could not make the ISA version library of $arch (amd-devlibs.log)"
done
echo "ROCm device libraries: $ROCM_BITCODE ($(dpkg-query -W -f '${Version}' rocm-device-libs 2>/dev/null || echo "version unknown"))"

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
sources=${SOURCES:-$(ls -S src/gpu/*.cu tests/compat/*.cu 2>/dev/null)}
if [ -z "$sources" ]; then
    echo "portability: no GPU sources found"
    exit 1
fi
targets=${TARGETS:-"amd-gfx906 amd-gfx942 amd-gfx1030 amd-gfx1100 amd-gfx1201 amd-host spirv
         spirv-dot4 cuda-sm_75 cuda-sm_80 cuda-sm_90 cuda-sm_120 cuda-portable"}
for t in $targets; do mkdir -p "$LOGDIR/$t"; rm -f "$LOGDIR/$t"/*.ok "$LOGDIR/$t"/*.fail; done
for s in $sources; do for t in $targets; do echo "$t $s"; done; done |
    xargs -P "$JOBS" -n 2 sh "$0" --job

nsrc=$(echo $sources | wc -w) # one a line from ls, or a space-separated SOURCES
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
# The AMD code objects, one row per kernel function (its template
# instantiations together), one column per target: the most VGPRs (AGPRs
# included) and SGPRs any instantiation uses and the fewest waves per SIMD the
# compiler counts for them; spills, scratch and static LDS over every target.
cat "$LOGDIR"/amd-gfx*/*.kernels 2>/dev/null | sort -t "$(printf "\t")" -k3,3 -s >"$LOGDIR/amd-kernels.tsv"
if [ -s "$LOGDIR/amd-kernels.tsv" ]; then
    echo "portability: AMD kernels (VGPR/SGPR, waves per SIMD; worst instantiation):"
    awk -F '\t' -v archs="gfx906 gfx942 gfx1030 gfx1100 gfx1201" '
        function max(a, b) { return a > b ? a : b }
        {
            k = $3; a = $1
            if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
            key = k SUBSEP a
            n[key]++
            v[key] = max(v[key], $6 + $7); s[key] = max(s[key], $8)
            if (!(key in o) || $13 + 0 < o[key] + 0) o[key] = $13
            spill[k] += $9 + $10; scratch[k] = max(scratch[k], $12); lds[k] = max(lds[k], $11)
            cnt[k] = max(cnt[k], n[key])
        }
        END {
            na = split(archs, A, " ")
            printf "    %-26s", "kernel (instances)"
            for (i = 1; i <= na; i++) printf " %-13s", A[i]
            printf " %6s %8s %6s\n", "spills", "scratch", "LDS"
            for (j = 1; j <= nk; j++) {
                k = order[j]
                printf "    %-26s", k " (" cnt[k] ")"
                for (i = 1; i <= na; i++) {
                    key = k SUBSEP A[i]
                    if (key in n) printf " %-13s", v[key] "/" s[key] ", " o[key]
                    else printf " %-13s", "-"
                }
                printf " %6d %8d %6d\n", spill[k], scratch[k], lds[k]
            }
        }' "$LOGDIR/amd-kernels.tsv"
fi
# The first errors of each failing source, once, from the first target it failed on.
seen=""
for f in $failing; do
    src=$(basename "${f%.fail}")
    case " $seen " in *" $src "*) continue ;; esac
    seen="$seen $src"
    echo "  $(echo "$src" | sed 's|__|/|g') ($(basename "$(dirname "$f")")):"
    grep -v '^+ ' "${f%.fail}.log" | grep -E 'error|differs|did not|undefined|kernel |imports that' |
        sort -u | head -n 3 |
        cut -c 1-200 | sed 's/^/    /'
done
echo "portability: logs in $LOGDIR, $(($(date +%s) - start)) s"
if [ $failed = 0 ]; then echo "check-portability: passed"; else echo "check-portability: FAILED"; fi
exit $failed
