#!/usr/bin/env python3
"""Writes llama.cpp's logits for every architecture test model into a folder,
for machines that cannot run llama.cpp themselves (the GPU check runs
Strata's GPU backend against these files with tests/tool_logits --compare).

    python3 tests/reference/oracle_files.py DIR

DIR gets, per case of arch_models.CONFIGS, NAME.gguf (F32 weights), the
40 prompt token ids test_archs.py uses for that name, and NAME.logits
(float32, (40, n_vocab), llama.cpp with an F32 KV cache); and a manifest,
one line per case: "NAME TOKENS MAX_NMSE" with the bound test_archs.py
derives (1e-10, Gemma's FP16 GELU 1e-6).
"""
import os
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import arch_models  # noqa: E402
import llama_oracle as oracle  # noqa: E402

N_PROMPT = 40


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: oracle_files.py DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lines = []
    for name, cfg in arch_models.CONFIGS.items():
        path = os.path.join(out, name + ".gguf")
        arch_models.write(cfg, path)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        tokens = [int(t) for t in rng.integers(0, 400, size=N_PROMPT)]
        llm = oracle.load(path, n_ctx=256)
        oracle.logits(llm, tokens).astype(np.float32).tofile(os.path.join(out, name + ".logits"))
        del llm
        bound = "1e-6" if cfg["arch"] in arch_models.GELU_ARCHS else "1e-10"
        lines.append("%s %s %s" % (name, ",".join(map(str, tokens)), bound))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d cases to %s" % (len(lines), out))


if __name__ == "__main__":
    main()
