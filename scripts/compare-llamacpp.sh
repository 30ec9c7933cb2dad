#!/usr/bin/env bash
# compare-llamacpp.sh: Strata's speed against llama.cpp's, in one run: on the
# CPU, or with --gpu on an NVIDIA GPU.
#
# Builds llama.cpp's llama-bench once from the source vendored in the PyPI sdist
# of llama-cpp-python (downloaded with pip into the cache; CPU build with
# GGML_NATIVE) and reuses it afterwards; writes synthetic 1B-shaped models
# (Llama 3.2 1B shape) in Q4_0 and in a Q4_K/Q6_K mix with `strata synth`; then
# for each model and thread count runs `llama-bench -p P -n N -r R -t T` and
# `strata bench -p P -n N -r R -t T` one after the other, and prints one table:
# each engine's pp and tg tok/s (mean ± sd), Strata / llama.cpp, and each tg's
# fraction of its floor (weight bytes over the read ceiling that `strata bench
# --ceiling` measures with the same threads, in the same condition).
#
# Note: llama-bench's tgN starts from an empty context, Strata's follows its ppN
# prompt (attention over P..P+N positions), which tilts that ratio toward
# llama.cpp; so Strata's generation is also timed from an empty context
# (`strata bench -p 0 -n N`), in the column "strata tgN@0", and compared like
# for like.
#
#   scripts/compare-llamacpp.sh [options]
#     --threads "1 2"     thread counts (default: 1 and every core this process may use)
#     --models "real q4_0 q4_k_m"   which models (default: all three)
#     -p N, -n N, -r N    prompt tokens, generated tokens, repetitions (512, 128, 3)
#     --rounds N          run the whole alternation N times and keep, per engine and
#                         figure, the round with the best mean (default 1): on a
#                         machine shared with other work the best round is the one
#                         least disturbed
#     --bench PATH        also run another llama-bench-compatible binary (e.g. a fork
#                         of llama.cpp), as a third column
#     --busy              run everything a second time with a process spinning on
#                         the last core (a machine shared with other work)
#     --cache DIR         where the sdist and the llama.cpp build live
#                         (default: ${XDG_CACHE_HOME:-~/.cache}/strata)
#     --llama-version V   llama-cpp-python sdist version (default: the installed one, else 0.3.36)
#     --llama-src DIR     llama.cpp's source folder, already unpacked (e.g. the sdist's
#                         vendor/llama.cpp carried to a machine without network): no download
#     --gpu               the GPU instead: llama-bench built with GGML_CUDA for this GPU's
#                         architecture (nvidia-smi's compute capability) and run with -ngl 99
#                         -fa 1, Strata (STRATA default build/cuda/strata, `make GPU=cuda
#                         BUILD=build/cuda`) with --backend cuda; models 1B- and 8B-shaped in Q4_0
#                         and the Q4_K_M mix (q4_0 q4_k_m 8b-q4_0 8b-q4_k_m); --threads is
#                         ignored. The table adds each tg's fraction of its floor: weight bytes
#                         over the read bandwidth test_ops --perf measures in the same run
#     --build-only        build llama-bench (and nothing else), then stop
#
# GPU mode, both engines' tgN start from an empty context (tg@0 repeats Strata's).
#
# Environment: STRATA (default build/strata), MODEL (the real model,
# default models/SmolLM2-135M-Instruct.Q4_1.gguf), LLAMA_CC / LLAMA_CXX (the
# compilers for llama.cpp; default clang and clang++ when present, else cc and
# c++: Debian 12's gcc 12 miscompiles llama.cpp's AMX tile set-up, because its
# _tile_loadconfig declares a one-byte read and the configuration's other stores
# are dropped, and the AMX path then crashes on CPUs that have AMX).
set -euo pipefail
cd "$(dirname "$0")/.."

STRATA=${STRATA:-build/strata}
REAL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/strata
NPROC=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)
THREADS="1 $NPROC"
[ "$NPROC" = 1 ] && THREADS=1
MODELS="real q4_0 q4_k_m"
P=512 N=128 R=3
OTHER=""
BUSY=0
ROUNDS=1
VER=""
LSRC=""
GPU=0
BUILD_ONLY=0
MODELS_SET=0

while [ $# -gt 0 ]; do
    case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --models) MODELS=$2; MODELS_SET=1; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    --bench) OTHER=$2; shift 2 ;;
    --busy) BUSY=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --llama-version) VER=$2; shift 2 ;;
    --llama-src) LSRC=$2; shift 2 ;;
    --gpu) GPU=1; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "compare-llamacpp.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$VER" ]; then
    VER=$(python3 -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || echo 0.3.36)
fi
if [ "$GPU" = 1 ]; then
    STRATA=${STRATA_GPU:-build/cuda/strata}
    [ "$MODELS_SET" = 1 ] || MODELS="q4_0 q4_k_m 8b-q4_0 8b-q4_k_m"
    THREADS=gpu
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 ||
        { echo "--gpu: nvidia-smi lists no GPU here" >&2; exit 1; }
    CUDA_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
fi
if [ "$BUILD_ONLY" = 0 ] && [ ! -x "$STRATA" ]; then
    hint="make"
    [ "$GPU" = 1 ] && hint="make GPU=cuda BUILD=build/cuda build/cuda/strata build/cuda/tests/test_ops"
    echo "no $STRATA: run $hint first" >&2
    exit 1
fi
[ -z "$OTHER" ] || [ -x "$OTHER" ] || { echo "--bench $OTHER is not an executable" >&2; exit 1; }

# --- llama.cpp's llama-bench, built once ----------------------------------------------
SRC=$CACHE/llama_cpp_python-$VER
LLAMA_DIR=${LSRC:-$SRC/vendor/llama.cpp}
if command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1; then
    LLAMA_CC=${LLAMA_CC:-clang} LLAMA_CXX=${LLAMA_CXX:-clang++}
else
    LLAMA_CC=${LLAMA_CC:-cc} LLAMA_CXX=${LLAMA_CXX:-c++}
fi
KIND=cpu
BACKEND_FLAGS=(-DGGML_NATIVE=ON)
if [ "$GPU" = 1 ]; then
    KIND=cuda-sm$CUDA_ARCH
    BACKEND_FLAGS=(-DGGML_NATIVE=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH")
fi
BUILD_DIR=$CACHE/build-$KIND-$(basename "$LLAMA_CC")
LLAMA_BENCH=$BUILD_DIR/bin/llama-bench
build_llamacpp() {
    [ -x "$LLAMA_BENCH" ] && return
    mkdir -p "$CACHE"
    if [ ! -d "$LLAMA_DIR" ]; then
        [ -z "$LSRC" ] || { echo "--llama-src $LSRC is not a folder" >&2; exit 1; }
        echo "== downloading the llama-cpp-python $VER sdist into $CACHE"
        python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$CACHE" >&2
        tar -xzf "$CACHE/llama_cpp_python-$VER.tar.gz" -C "$CACHE"
    fi
    local jobs
    jobs=$(nproc)
    echo "== building llama-bench ($KIND, $LLAMA_CC) in $BUILD_DIR; once" >&2
    cmake -S "$LLAMA_DIR" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${BACKEND_FLAGS[@]}" \
        -DCMAKE_C_COMPILER="$LLAMA_CC" -DCMAKE_CXX_COMPILER="$LLAMA_CXX" \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF >"$CACHE/cmake-$KIND.log" 2>&1 ||
        { tail -20 "$CACHE/cmake-$KIND.log" >&2; exit 1; }
    cmake --build "$BUILD_DIR" --target llama-bench -j "$jobs" >"$CACHE/build-$KIND.log" 2>&1 ||
        { tail -20 "$CACHE/build-$KIND.log" >&2; exit 1; }
}
build_llamacpp
[ "$BUILD_ONLY" = 1 ] && exit 0

# The GPU's read-bandwidth ceiling, measured now (GB/s), for the tg floors.
CEIL=0
if [ "$GPU" = 1 ]; then
    CEIL=$("$(dirname "$STRATA")/tests/test_ops" --perf-only Q4_0:14336x4096 --gpu-only 2>/dev/null |
        sed -n 's/^read-bandwidth ceiling: \([0-9.]*\) GB\/s.*/\1/p')
    [ -n "$CEIL" ] || { echo "no read-bandwidth ceiling from $(dirname "$STRATA")/tests/test_ops" >&2; exit 1; }
fi

# --- models ---------------------------------------------------------------------------
SYN=build/compare
mkdir -p "$SYN"
model_path() {
    case "$1" in
    real) echo "$REAL" ;;
    q4_0) echo "$SYN/llama3.2-1b-q4_0.gguf" ;;
    q4_k_m) echo "$SYN/llama3.2-1b-q4_k_m.gguf" ;;
    8b-q4_0) echo "$SYN/llama3-8b-q4_0.gguf" ;;
    8b-q4_k_m) echo "$SYN/llama3-8b-q4_k_m.gguf" ;;
    *) echo "unknown model $1 (real, q4_0, q4_k_m, 8b-q4_0, 8b-q4_k_m)" >&2; exit 2 ;;
    esac
}
for m in $MODELS; do
    f=$(model_path "$m")
    case "$m" in
    q4_0) [ -f "$f" ] || "$STRATA" synth -o "$f" --shape llama3.2-1b --type Q4_0 ;;
    q4_k_m) [ -f "$f" ] || "$STRATA" synth -o "$f" --shape llama3.2-1b --type Q4_K_M ;;
    8b-q4_0) [ -f "$f" ] || "$STRATA" synth -o "$f" --shape llama3-8b --type Q4_0 ;;
    8b-q4_k_m) [ -f "$f" ] || "$STRATA" synth -o "$f" --shape llama3-8b --type Q4_K_M ;;
    esac
    [ -f "$f" ] || { echo "no model $f" >&2; exit 1; }
done

# --- runs -----------------------------------------------------------------------------
# Each prints "pp_mean pp_sd tg_mean tg_sd".
# On the GPU: every layer offloaded, flash attention, llama-bench's own threads;
# Strata on the cuda backend. Elsewhere: THREADS threads each.
llama_flags() { if [ "$1" = gpu ]; then echo "-ngl 99 -fa 1"; else echo "-t $1"; fi; }
strata_flags() { if [ "$1" = gpu ]; then echo "--backend cuda"; else echo "-t $1"; fi; }
run_llama() { # BINARY MODEL THREADS
    # shellcheck disable=SC2046
    "$1" -m "$2" -p "$P" -n "$N" -r "$R" $(llama_flags "$3") -o json 2>/dev/null | python3 -c '
import json, sys
rows = json.load(sys.stdin)
pp = [r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
tg = [r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
print(pp[0]["avg_ts"], pp[0]["stddev_ts"], tg[0]["avg_ts"], tg[0]["stddev_ts"])'
}
run_strata() { # MODEL THREADS: "pp_mean pp_sd tg_mean tg_sd weight_MB"
    # shellcheck disable=SC2046
    "$STRATA" bench -m "$1" -p "$P" -n "$N" -r "$R" $(strata_flags "$2") 2>/dev/null | python3 -c '
import re, sys
v = {}
for line in sys.stdin:
    m = re.match(r"(pp|tg)\d+\s+([\d.]+) ± ([\d.]+) tok/s", line)
    if m: v[m.group(1)] = (m.group(2), m.group(3))
    m = re.search(r"weights ([\d.]+) MB", line)
    if m: v["mb"] = m.group(1)
print(v["pp"][0], v["pp"][1], v["tg"][0], v["tg"][1], v["mb"])'
}

run_strata_tg0() { # MODEL THREADS: "tg_mean tg_sd ceiling_GB/s" from an empty context;
    # on the CPU the read ceiling is measured by `strata bench --ceiling` with the same threads
    # right after, on the GPU it is test_ops's (CEIL)
    local ceil_flag="--ceiling"
    [ "$GPU" = 1 ] && ceil_flag=""
    # shellcheck disable=SC2046
    "$STRATA" bench -m "$1" -p 0 -n "$N" -r "$R" $(strata_flags "$2") $ceil_flag 2>/dev/null | python3 -c '
import re, sys
tg, ceil = None, sys.argv[1]
for line in sys.stdin:
    m = re.match(r"tg\d+\s+([\d.]+) ± ([\d.]+) tok/s", line)
    if m: tg = m.group(1) + " " + m.group(2)
    m = re.match(r"ceiling\s+([\d.]+) GB/s", line)
    if m: ceil = m.group(1)
print(tg, ceil)' "$CEIL"
}

busy_pid=""
BUSY_CPU=""
busy_start() {
    local cpu
    cpu=$(python3 -c 'import os; print(max(os.sched_getaffinity(0)))')
    taskset -c "$cpu" sh -c 'while :; do :; done' &
    busy_pid=$!
    BUSY_CPU=$cpu
}
busy_stop() { # the killed loop's status (143) is no failure: set -e must not end the run here
    if [ -n "$busy_pid" ]; then
        kill "$busy_pid" 2>/dev/null || true
        wait "$busy_pid" 2>/dev/null || true
    fi
    busy_pid=""
}
trap busy_stop EXIT

RESULTS=$(mktemp)
conditions="idle"
[ "$BUSY" = 1 ] && conditions="idle busy"
for round in $(seq "$ROUNDS"); do
    for cond in $conditions; do
        [ "$cond" = busy ] && busy_start
        for m in $MODELS; do
            f=$(model_path "$m")
            for t in $THREADS; do
                echo "== round $round: $cond $m -t $t" >&2
                l=$(run_llama "$LLAMA_BENCH" "$f" "$t")
                s=$(run_strata "$f" "$t")
                z=$(run_strata_tg0 "$f" "$t")
                o="0 0 0 0"
                [ -n "$OTHER" ] && o=$(run_llama "$OTHER" "$f" "$t")
                echo "$cond $m $t $l ${s% *} $o ${z% *} ${s##* } ${z##* }" | tee -a "$RESULTS" >&2
            done
        done
        [ "$cond" = busy ] && busy_stop
    done
done

# --- the table ------------------------------------------------------------------------
echo
DEVICE=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
[ "$GPU" = 1 ] && DEVICE="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), read ceiling $CEIL GB/s"
echo "strata $(git describe --always --dirty --abbrev=7 2>/dev/null || echo '?') | llama.cpp from llama-cpp-python $VER" \
    "${OTHER:+| other: $OTHER} | $(date -u +%Y-%m-%d) | $DEVICE"
echo "pp$P / tg$N tok/s, mean ± sd of $R (best of $ROUNDS rounds); ratio = Strata / llama.cpp${OTHER:+ (and Strata / other)}"
echo "floor: tg of (weight bytes / read ceiling), the fraction of it each engine's tg reaches; the ceiling" \
    "is $([ "$GPU" = 1 ] && echo "test_ops --perf's" || echo "strata bench --ceiling's, with the row's threads and condition")"
if [ "$BUSY" = 1 ]; then echo "busy rows: a shell loop spins on CPU $BUSY_CPU meanwhile"; fi
python3 - "$RESULTS" "$P" "$N" "${OTHER:+1}" <<'EOF'
import sys
P, N = sys.argv[2], sys.argv[3]
other = len(sys.argv) > 4 and sys.argv[4] == "1"
best = {}  # (cond, model, t) -> per engine and figure the (mean, sd) of the best round
mbs = {}  # (cond, model, t) -> the model's weight MB
ceils = {}  # (cond, model, t) -> the best read ceiling, GB/s
order = []
for line in open(sys.argv[1]):
    r = line.split()
    key = tuple(r[:3])
    if key not in best:
        best[key] = [None] * 7
        order.append(key)
    v = [float(x) for x in r[3:17]]
    mbs[key] = float(r[17])
    ceils[key] = max(ceils.get(key, 0.0), float(r[18]))
    for k in range(7):  # llama pp, tg; strata pp, tg; other pp, tg; strata tg from empty context
        m, sd = v[2 * k], v[2 * k + 1]
        if best[key][k] is None or m > best[key][k][0]:
            best[key][k] = (m, sd)
hdr = ["cond", "model", "t", f"llama.cpp pp{P}", f"strata pp{P}", "ratio", f"llama.cpp tg{N}", f"strata tg{N}", "ratio",
       f"strata tg{N}@0", "ratio@0"]
if other:
    hdr += [f"other pp{P}", "S/o", f"other tg{N}", "S/o", "S@0/o"]
hdr += ["ceiling GB/s", "tg floor", "llama.cpp of floor", "strata of floor"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
f = lambda x: f"{x[0]:.1f} ± {x[1]:.1f}"
for key in order:
    lp, lt, sp, st, op, ot, sz = best[key]
    cells = list(key) + [f(lp), f(sp), f"{sp[0]/lp[0]:.2f}", f(lt), f(st), f"{st[0]/lt[0]:.2f}", f(sz), f"{sz[0]/lt[0]:.2f}"]
    if other:
        cells += [f(op), f"{sp[0]/op[0]:.2f}", f(ot), f"{st[0]/ot[0]:.2f}", f"{sz[0]/ot[0]:.2f}"]
    floor = ceils[key] * 1e3 / mbs[key]  # tok/s when every weight byte streams at the ceiling
    cells += [f"{ceils[key]:.1f}", f"{floor:.0f}", f"{lt[0]/floor:.0%}", f"{sz[0]/floor:.0%}"]
    print("| " + " | ".join(cells) + " |")
EOF
rm -f "$RESULTS"
