#!/usr/bin/env bash
# Install LMDeploy's portable rejection sampler for the `lmdeploy-sampler` adapter.
# The engine needs CUDA/Ascend, but backends/default/rejection_sampling.py is pure torch: download the
# wheel from PyPI without dependencies and unpack lmdeploy/pytorch/backends/ (about 3 s, 1 MB on disk).
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/lmdeploy-0.18.0/. Uses the current `python`.
set -euo pipefail
export SPECVERIFY_INSTALL_START=$(date +%s.%N)
cd "$(dirname "$0")/../.."
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/lmdeploy-0.18.0"
rm -rf "$dest" && mkdir -p "$dest"
python ci/engines/_wheel.py lmdeploy 0.18.0 "$dest" lmdeploy/pytorch/backends/ lmdeploy-0.18.0.dist-info/
