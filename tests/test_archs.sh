#!/bin/sh
# Every supported architecture against llama.cpp through its Python binding:
# tests/test_archs.py (skipped, and counted as skipped, without python3 or the
# llama-cpp-python and gguf packages).
cd "$(dirname "$0")/.." || exit 1
if ! command -v python3 >/dev/null 2>&1; then
    echo "  skip: python3 is not installed"
    echo "RESULT 0 0 1"
    exit 0
fi
exec python3 tests/test_archs.py
