#!/usr/bin/env bash
# GPU audits of the engines' CUDA builds, at bf16, in under 10 minutes on one GPU (prepared; see README "Audit matrix").
#   vLLM (CUDA wheel): the vllm engine adapter with device=cuda, dtype=bfloat16 (known-p audit on the shipped models)
#   SGLang (CUDA): chain_speculative_sampling_triton compiled by Triton (kernel audit, both block_verification settings)
#                  and its CUDA tree sampler (see TODO below)
#   FlashInfer: chain_speculative_sampling (kernel audit through ci/engines/gpu/flashinfer_chain.py)
# It refuses cleanly (exit 2, nothing installed) where no CUDA device is visible. No GPU was lent while this was
# written, so it has never run: treat its first run as the test of the script itself.
# Offline GPU machines: WHEELHOUSE=DIR installs from pre-downloaded wheels (pip download on a connected machine).
# Output: reports/audits/gpu-<date>/ ; per-step time limits keep the total under 10 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-audit.sh: no CUDA device visible (nvidia-smi missing or lists no GPU); nothing installed, nothing run." >&2
  echo "Run it on a machine with an NVIDIA GPU (e.g. when the device tool lends one)." >&2
  exit 2
fi
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu-audit.sh: a GPU is visible but this python's torch has no CUDA (install a CUDA torch build first)." >&2
  exit 2
fi
export SPECVERIFY_ENGINES_DIR=${SPECVERIFY_ENGINES_DIR:-$PWD/.engines-gpu}
out=${OUT:-reports/audits/gpu-$(date -u +%Y%m%d)}
mkdir -p "$out" "$SPECVERIFY_ENGINES_DIR"
pipi() { if [ -n "${WHEELHOUSE:-}" ]; then pip install -q --no-index --find-links "$WHEELHOUSE" "$@"; else pip install -q "$@"; fi; }
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s" | tee -a "$out/SUMMARY.txt"
}
nvidia-smi -L | tee "$out/SUMMARY.txt"
# 1. installs (each engine pins its own torch: separate venvs, as ci/engines/*.sh do on CPU)
step install-flashinfer 180 pipi flashinfer-python
step install-sglang 240 bash -c "python -m venv $SPECVERIFY_ENGINES_DIR/sglang-gpu && $SPECVERIFY_ENGINES_DIR/sglang-gpu/bin/pip install -q sglang"
step install-vllm 240 bash -c "python -m venv $SPECVERIFY_ENGINES_DIR/vllm-gpu && $SPECVERIFY_ENGINES_DIR/vllm-gpu/bin/pip install -q vllm"
# 2. kernel audits (bf16-derived probs are float32 inputs to the kernels: the kernels' own arithmetic is audited)
step flashinfer-chain 120 python -m verifier.cli audit --kernel ci/engines/gpu/flashinfer_chain.py:kernel \
  --num-draws 2000000 --target-tv 0.03 --json "$out/flashinfer-chain.json"
for bv in false true; do
  step sglang-chain-bv-$bv 90 env TRITON_INTERPRET=0 python -m verifier.cli audit --engine sglang-kernel \
    --engine-arg block_verification=$bv --num-draws 2000000 --report-dir "$out/sglang-kernel-bv-$bv"
done
# TODO (not written: needs the GPU to develop against): SGLang's CUDA tree sampler
# (sgl_kernel.tree_speculative_sampling_target_only) as a `specverify audit-tree --kernel FILE.py:factory` plugin.
# 3. whole-engine audit at bf16 (the vllm adapter's own options; skipped when it has no device option)
if python -m verifier.cli engines vllm --format json 2>/dev/null | grep -q '"device"'; then
  step vllm-bf16 240 python -m verifier.cli audit --engine vllm --engine-arg device=cuda --engine-arg dtype=bfloat16 \
    --num-draft-tokens 3 --target-tv 0.03 --no-progress --run-dir "$out/vllm-bf16"
else
  echo "vllm-bf16: skipped (the vllm adapter has no device option in this checkout)" | tee -a "$out/SUMMARY.txt"
fi
cat "$out/SUMMARY.txt"
