#!/bin/sh
# The HTTP server (`strata serve`) tested with the official openai client, raw
# HTTP, a load test and headless Chromium: tests/test_server.py. Parts whose
# tools are missing (the model, python3, the openai or selenium package,
# chromium) are skipped, not failed.
cd "$(dirname "$0")/.." || exit 1
if ! command -v python3 >/dev/null 2>&1; then
    echo "  skip server tests: python3 is not installed"
    echo "RESULT 0 0 1"
    exit 0
fi
exec python3 tests/test_server.py --bin "${STRATA_BIN:-build/strata}" \
    --model "${STRATA_TEST_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
