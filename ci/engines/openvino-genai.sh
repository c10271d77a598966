#!/usr/bin/env bash
# Install OpenVINO GenAI for the `openvino-genai` decoder adapter, in its own venv, and export the shipped
# HF checkpoints to OpenVINO IR in fp32 (never quantized) with optimum-intel's exporter.
# torch is the CPU wheel 2.13.0; PyPI's torchvision (CUDA-linked) breaks imports next to it and is removed.
# About 280 s to install plus about 75 s per model export on 2 cores; 1.6 GB on disk.
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/openvino-genai-2026.4.1.0/{venv,models/{target,draft}}.
set -euo pipefail
export SPECVERIFY_INSTALL_START=$(date +%s.%N)
cd "$(dirname "$0")/../.."
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/openvino-genai-2026.4.1.0"
rm -rf "$dest" && mkdir -p "$dest/models"
python -m venv "$dest/venv"
py="$dest/venv/bin/python"
"$py" -m pip install -q torch==2.13.0
"$py" -m pip install -q "torch==2.13.0" openvino-genai==2026.4.1.0 "optimum-intel[openvino]==2.2.0"
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
for m in target draft; do
  HF_HUB_OFFLINE=1 "$dest/venv/bin/optimum-cli" export openvino --model "verifier/models/shipped/$m" \
    --task text-generation-with-past --weight-format fp32 "$dest/models/$m" >/dev/null
done
python ci/engines/_record.py "$dest" openvino-genai 2026.4.1.0 '{"optimum-intel": "2.2.0", "torch": "2.13.0", "weight_format": "fp32"}'
