#!/bin/sh
# The OpenAI features of `strata serve` (logprobs, structured output, n,
# penalties, logit_bias, tools, embeddings) and cancellation at any point:
# tests/test_server_api.py. Parts whose tools are missing are skipped.
cd "$(dirname "$0")/.." || exit 1
if ! command -v python3 >/dev/null 2>&1; then
    echo "  skip server api tests: python3 is not installed"
    echo "RESULT 0 0 1"
    exit 0
fi
exec python3 tests/test_server_api.py --bin "${STRATA_BIN:-build/strata}" \
    --model "${STRATA_TEST_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
