#!/usr/bin/env bash
# compare-llamacpp.sh: Strata's CPU speed against llama.cpp's, in one run.
#
# Builds llama.cpp's llama-bench once from the source vendored in the PyPI sdist
# of llama-cpp-python (downloaded with pip into the cache; CPU build with
# GGML_NATIVE) and reuses it afterwards; writes synthetic 1B-shaped models
# (Llama 3.2 1B shape) in Q4_0 and in a Q4_K/Q6_K mix with `strata synth`; then
# for each model and thread count runs `llama-bench -p P -n N -r R -t T` and
# `strata bench -p P -n N -r R -t T` one after the other, and prints one table:
# each engine's pp and tg tok/s (mean ± sd) and Strata / llama.cpp.
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

while [ $# -gt 0 ]; do
    case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    --bench) OTHER=$2; shift 2 ;;
    --busy) BUSY=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --llama-version) VER=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "compare-llamacpp.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$VER" ]; then
    VER=$(python3 -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || echo 0.3.36)
fi
[ -x "$STRATA" ] || { echo "no $STRATA: run make first" >&2; exit 1; }
[ -z "$OTHER" ] || [ -x "$OTHER" ] || { echo "--bench $OTHER is not an executable" >&2; exit 1; }

# --- llama.cpp's llama-bench, built once ----------------------------------------------
SRC=$CACHE/llama_cpp_python-$VER
if command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1; then
    LLAMA_CC=${LLAMA_CC:-clang} LLAMA_CXX=${LLAMA_CXX:-clang++}
else
    LLAMA_CC=${LLAMA_CC:-cc} LLAMA_CXX=${LLAMA_CXX:-c++}
fi
BUILD_DIR=$SRC/build-cpu-$(basename "$LLAMA_CC")
LLAMA_BENCH=$BUILD_DIR/bin/llama-bench
build_llamacpp() {
    [ -x "$LLAMA_BENCH" ] && return
    mkdir -p "$CACHE"
    if [ ! -d "$SRC/vendor/llama.cpp" ]; then
        echo "== downloading the llama-cpp-python $VER sdist into $CACHE"
        python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$CACHE" >&2
        tar -xzf "$CACHE/llama_cpp_python-$VER.tar.gz" -C "$CACHE"
    fi
    echo "== building llama-bench (CPU, GGML_NATIVE, $LLAMA_CC) in $BUILD_DIR; once"
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DCMAKE_C_COMPILER="$LLAMA_CC" -DCMAKE_CXX_COMPILER="$LLAMA_CXX" \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DBUILD_SHARED_LIBS=OFF >"$CACHE/cmake-cpu.log" 2>&1
    cmake --build "$BUILD_DIR" --target llama-bench -j 2 >"$CACHE/build-cpu.log" 2>&1 ||
        { tail -20 "$CACHE/build-cpu.log" >&2; exit 1; }
}
build_llamacpp

# --- GPU half -------------------------------------------------------------------------
# ==== GPU: not filled in yet. When `nvcc` is present and `nvidia-smi -L` lists a GPU,
# ==== build a second llama-bench with -DGGML_CUDA=ON into $SRC/build-cuda, Strata with
# ==== `make GPU=cuda BUILD=build/cuda`, and run both with -ngl 99 / --backend cuda in
# ==== the loop below. Until then the comparison is CPU only.
if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "note: a GPU is usable here, but the GPU comparison is not written yet (CPU only)" >&2
fi

# --- models ---------------------------------------------------------------------------
SYN=build/compare
mkdir -p "$SYN"
model_path() {
    case "$1" in
    real) echo "$REAL" ;;
    q4_0) echo "$SYN/llama3.2-1b-q4_0.gguf" ;;
    q4_k_m) echo "$SYN/llama3.2-1b-q4_k_m.gguf" ;;
    *) echo "unknown model $1 (real, q4_0, q4_k_m)" >&2; exit 2 ;;
    esac
}
for m in $MODELS; do
    f=$(model_path "$m")
    case "$m" in
    q4_0) [ -f "$f" ] || "$STRATA" synth -o "$f" --shape llama3.2-1b --type Q4_0 ;;
    q4_k_m) [ -f "$f" ] || "$STRATA" synth -o "$f" --shape llama3.2-1b --type Q4_K_M ;;
    esac
    [ -f "$f" ] || { echo "no model $f" >&2; exit 1; }
done

# --- runs -----------------------------------------------------------------------------
# Each prints "pp_mean pp_sd tg_mean tg_sd".
run_llama() { # BINARY MODEL THREADS
    "$1" -m "$2" -p "$P" -n "$N" -r "$R" -t "$3" -o json 2>/dev/null | python3 -c '
import json, sys
rows = json.load(sys.stdin)
pp = [r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
tg = [r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
print(pp[0]["avg_ts"], pp[0]["stddev_ts"], tg[0]["avg_ts"], tg[0]["stddev_ts"])'
}
run_strata() { # MODEL THREADS
    "$STRATA" bench -m "$1" -p "$P" -n "$N" -r "$R" -t "$2" 2>/dev/null | python3 -c '
import re, sys
v = {}
for line in sys.stdin:
    m = re.match(r"(pp|tg)\d+\s+([\d.]+) ± ([\d.]+) tok/s", line)
    if m: v[m.group(1)] = (m.group(2), m.group(3))
print(v["pp"][0], v["pp"][1], v["tg"][0], v["tg"][1])'
}

run_strata_tg0() { # MODEL THREADS: "tg_mean tg_sd" from an empty context
    "$STRATA" bench -m "$1" -p 0 -n "$N" -r "$R" -t "$2" 2>/dev/null | python3 -c '
import re, sys
for line in sys.stdin:
    m = re.match(r"tg\d+\s+([\d.]+) ± ([\d.]+) tok/s", line)
    if m: print(m.group(1), m.group(2))'
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
busy_stop() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null && wait "$busy_pid" 2>/dev/null; busy_pid=""; }
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
                echo "$cond $m $t $l $s $o $z" | tee -a "$RESULTS" >&2
            done
        done
        [ "$cond" = busy ] && busy_stop
    done
done

# --- the table ------------------------------------------------------------------------
echo
echo "strata $(git rev-parse --short HEAD 2>/dev/null || echo '?') | llama.cpp from llama-cpp-python $VER" \
    "${OTHER:+| other: $OTHER} | $(date -u +%Y-%m-%d) | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "pp$P / tg$N tok/s, mean ± sd of $R (best of $ROUNDS rounds); ratio = Strata / llama.cpp${OTHER:+ (and Strata / other)}"
if [ "$BUSY" = 1 ]; then echo "busy rows: a shell loop spins on CPU $BUSY_CPU meanwhile"; fi
python3 - "$RESULTS" "$P" "$N" "${OTHER:+1}" <<'EOF'
import sys
P, N = sys.argv[2], sys.argv[3]
other = len(sys.argv) > 4 and sys.argv[4] == "1"
best = {}  # (cond, model, t) -> per engine and figure the (mean, sd) of the best round
order = []
for line in open(sys.argv[1]):
    r = line.split()
    key = tuple(r[:3])
    if key not in best:
        best[key] = [None] * 7
        order.append(key)
    v = [float(x) for x in r[3:17]]
    for k in range(7):  # llama pp, tg; strata pp, tg; other pp, tg; strata tg from empty context
        m, sd = v[2 * k], v[2 * k + 1]
        if best[key][k] is None or m > best[key][k][0]:
            best[key][k] = (m, sd)
hdr = ["cond", "model", "t", f"llama.cpp pp{P}", f"strata pp{P}", "ratio", f"llama.cpp tg{N}", f"strata tg{N}", "ratio",
       f"strata tg{N}@0", "ratio@0"]
if other:
    hdr += [f"other pp{P}", "S/o", f"other tg{N}", "S/o", "S@0/o"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
f = lambda x: f"{x[0]:.1f} ± {x[1]:.1f}"
for key in order:
    lp, lt, sp, st, op, ot, sz = best[key]
    cells = list(key) + [f(lp), f(sp), f"{sp[0]/lp[0]:.2f}", f(lt), f(st), f"{st[0]/lt[0]:.2f}", f(sz), f"{sz[0]/lt[0]:.2f}"]
    if other:
        cells += [f(op), f"{sp[0]/op[0]:.2f}", f(ot), f"{st[0]/ot[0]:.2f}", f"{sz[0]/ot[0]:.2f}"]
    print("| " + " | ".join(cells) + " |")
EOF
rm -f "$RESULTS"
