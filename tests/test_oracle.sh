#!/bin/sh
# Strata against llama.cpp (PyPI llama-cpp-python) on the real test model:
# token ids, logits and perplexity (tests/test_oracle.py says what and how
# closely). Without python3, numpy, llama_cpp or the model, every part is a skip.
cd "$(dirname "$0")/.." || exit 1
BUILD=${STRATA_BUILD:-build}
if ! command -v python3 >/dev/null 2>&1; then
    echo "  skip: oracle tests: python3 is not installed"
    echo "RESULT 0 0 1"
    exit 0
fi
exec python3 tests/test_oracle.py --bin "${STRATA_BIN:-$BUILD/strata}" --tool "$BUILD/tests/tool_oracle" \
    --model "${STRATA_TEST_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
