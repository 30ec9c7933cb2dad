#!/bin/sh
# test_format.sh: every C, header and CUDA source follows .clang-format
# (make check-format; make format rewrites them).
cd "$(dirname "$0")/.." || exit 1
if ! command -v clang-format-14 >/dev/null 2>&1; then
    echo "  skip format: clang-format-14 is not installed (scripts/install-deps.sh --test installs it)"
    echo "RESULT 0 0 1"
    exit 0
fi
if out=$(make -s check-format 2>&1); then
    echo "  ok   format: every source as .clang-format says"
    echo "RESULT 1 0 0"
else
    echo "$out" | grep -E "(error|warning):" | head -n 20 | sed 's/^/    /'
    echo "  FAIL format: sources differ from .clang-format's style (make format rewrites them)"
    echo "RESULT 0 1 0"
fi
