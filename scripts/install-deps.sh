#!/bin/sh
# Installs what building Strata needs from Debian 12's packages, skipping what
# is already there (libjs-marked: the Markdown renderer `strata serve` gives its
# chat page); with --test, also what the tests drive (headless Chromium
# and its driver from Debian; from PyPI the openai, selenium and pydantic packages, and
# llama-cpp-python, numpy and gguf: llama.cpp as an independent oracle, built
# from source for the CPU, with cmake and g++ from Debian) and what make
# test-asan, test-tsan and fuzz-ci need: clang's sanitizer and libFuzzer
# runtimes (libclang-rt-14-dev) and llvm-symbolizer (llvm) for readable reports.
# Runs apt-get through sudo when not root.
set -eu
PKGS="gcc clang make libpcre2-dev libutf8proc-dev libmicrohttpd-dev libcjson-dev libedit-dev libjs-marked python3 python3-pip ca-certificates"
PY=""
if [ "${1:-}" = "--test" ]; then
    PKGS="$PKGS chromium chromium-driver cmake g++ libclang-rt-14-dev llvm clang-format"
    # module=package: a module that already imports costs nothing
    PY="openai=openai selenium=selenium pydantic=pydantic numpy=numpy gguf=gguf llama_cpp=llama-cpp-python==0.3.36"
elif [ -n "${1:-}" ]; then
    echo "usage: $0 [--test]" >&2
    exit 2
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "installing:$missing" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
for mp in $PY; do
    m=${mp%%=*}
    p=${mp#*=}
    python3 -c "import $m" 2>/dev/null && continue
    echo "installing python package: $p" >&2
    # llama-cpp-python builds llama.cpp from source: the CPU backend only
    export CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF"
    # Debian's own python refuses user installs without this flag (PEP 668)
    python3 -m pip install -q "$p" 2>/dev/null || python3 -m pip install -q --break-system-packages "$p"
done
