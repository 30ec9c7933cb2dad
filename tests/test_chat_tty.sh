#!/bin/sh
# `strata chat` driven through a pseudo-terminal: tests/test_chat_tty.py.
cd "$(dirname "$0")/.." || exit 1
if ! command -v python3 >/dev/null 2>&1; then
    echo "  skip chat tty tests: python3 is not installed"
    echo "RESULT 0 0 1"
    exit 0
fi
exec python3 tests/test_chat_tty.py
