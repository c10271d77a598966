#!/usr/bin/env bash
# The configurations session 4 left out (k = 1 while speculating; T = 0.7 with top-k 50 and top-p 0.9 at k = 1 and 3),
# each with prefix caching off (the pipeline keeps speculating) and on (the engine default), n = N per configuration
# (below what TV 0.03 needs: UNDERPOWERED with the n needed in each report).  Run folders (samples, for
# `python -m verifier.diagnose.reproduce openvino-genai RUN_DIR`) go to RUNS (default /tmp/engb_ov).  Usage: bash reports/audits/openvino-genai-2026.4.1.0/run-more.sh [NAME ...]
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=reports/audits/openvino-genai-2026.4.1.0
runs=${RUNS:-/tmp/engb_ov}
N=${N:-1000}
run() {  # name, then audit flags
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  rm -rf "$runs/$name"
  mkdir -p "$(dirname "$runs/$name")"  # the log of a nested name (prefix-caching-off/...) goes beside its run folder
  local t0=$(date +%s)
  python -m verifier.cli audit --engine openvino-genai --target-tv 0.03 --num-samples "$N" --chunk-size 250 --seed 2026 \
    --no-progress --run-dir "$runs/$name" "$@" > "$runs/$name.log" 2>&1
  local code=$?
  mkdir -p "$out/$name"
  cp "$runs/$name"/report.{md,html,json} "$out/$name/" 2>/dev/null
  echo "$name exit $code $(( $(date +%s) - t0 )) s n=$N" | tee -a "$out/times.txt"
}
T07="--temperature 0.7 --top-k 50 --top-p 0.9"
# k = 1 needs --max-new-tokens 3: with the default k + 1 = 2 the draft proposes nothing (draft steps [], main steps
# [1, 1], 0 accepted in every call), so the audit would see plain target sampling (FINDINGS.md section 5).
run prefix-caching-off/t1-k1 --engine-arg prefix_caching=false --temperature 1 --num-draft-tokens 1 --max-new-tokens 3
run prefix-caching-off/t1-k3 --engine-arg prefix_caching=false --temperature 1 --num-draft-tokens 3
run prefix-caching-off/t07-topk50-topp09-k1 --engine-arg prefix_caching=false $T07 --num-draft-tokens 1 --max-new-tokens 3
run prefix-caching-off/t07-topk50-topp09-k3 --engine-arg prefix_caching=false $T07 --num-draft-tokens 3
run t07-topk50-topp09-k1 $T07 --num-draft-tokens 1 --max-new-tokens 3
run t07-topk50-topp09-k3 $T07 --num-draft-tokens 3
# controls of the two rows above (session 27): the same flags and seed with both models at f32
# (INFERENCE_PRECISION_HINT / KV_CACHE_PRECISION), to separate the bf16 top-p set from the speculative rule
run t07-topk50-topp09-k1-f32 $T07 --num-draft-tokens 1 --max-new-tokens 3 --engine-arg precision=f32
run t07-topk50-topp09-k3-f32 $T07 --num-draft-tokens 3 --engine-arg precision=f32
