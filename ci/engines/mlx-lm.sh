#!/usr/bin/env bash
# Install MLX-LM (CPU build of MLX) for the `mlx-lm` decoder adapter, in its own venv, and convert the
# shipped HF checkpoints to MLX format in float32 (never quantized) with mlx_lm's own converter.
# About 55 s and 360 MB on disk. Uses the current `python` to create the venv.
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/mlx-lm-0.32.2/{venv,models/{target,draft}}.
set -euo pipefail
export SPECVERIFY_INSTALL_START=$(date +%s.%N)
cd "$(dirname "$0")/../.."
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/mlx-lm-0.32.2"
rm -rf "$dest" && mkdir -p "$dest/models"
python -m venv "$dest/venv"
"$dest/venv/bin/python" -m pip install -q mlx==0.32.4 mlx-cpu==0.32.4 mlx-lm==0.32.2
for m in target draft; do
  HF_HUB_OFFLINE=1 "$dest/venv/bin/python" -m mlx_lm convert --hf-path "verifier/models/shipped/$m" \
    --mlx-path "$dest/models/$m" --dtype float32 >/dev/null
done
python ci/engines/_record.py "$dest" mlx-lm 0.32.2 '{"mlx": "0.32.4", "mlx-cpu": "0.32.4", "dtype": "float32"}'
