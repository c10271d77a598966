#!/usr/bin/env bash
# Install SGLang's chain verification kernel for the `sglang-kernel` adapter.
# sglang==0.5.23 does not install on a CPU machine (it pins CUDA torch 2.14.1), but
# sglang/kernels/ops/speculative/reject_sampling.py imports only triton: download the sglang wheel
# without dependencies, unpack that folder, and install triton (3.9.0, no dependencies of its own) into
# a private site folder next to it; the adapter runs the kernel with TRITON_INTERPRET=1 on CPU.
# About 15 s and 1 GB on disk (triton ships its CUDA toolchain). Uses the current `python` (torch comes
# from the harness's own environment; triton's interpreter needs only numpy and torch).
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/sglang-0.5.23/{src,site}.
set -euo pipefail
export SPECVERIFY_INSTALL_START=$(date +%s.%N)
cd "$(dirname "$0")/../.."
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/sglang-0.5.23"
rm -rf "$dest" && mkdir -p "$dest"
python -m pip install -q --no-deps --only-binary=:all: --target "$dest/site" triton==3.9.0
SPECVERIFY_INSTALL_EXTRA='{"triton": "3.9.0"}' python ci/engines/_wheel.py sglang 0.5.23 "$dest" sglang/kernels/ops/speculative/ sglang-0.5.23.dist-info/
