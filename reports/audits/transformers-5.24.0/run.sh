#!/usr/bin/env bash
# Regenerates the transformers engine audits in this folder (one run folder per mode/config; samples removed after;
# FINDINGS.md and other files written by hand beside the reports are kept).
# n is fixed below what TV 0.03 needs on 2 shared CPU cores: every report says UNDERPOWERED with the n needed
# unless its cells are powered.  Usage: bash reports/audits/transformers-5.24.0/run.sh [NAME ...]
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=reports/audits/transformers-5.24.0
N=${N:-2000}
logs=${LOG_DIR:-${TMPDIR:-/tmp}/specverify-transformers-logs}  # the audits' console output, kept out of the report folder
mkdir -p "$logs"
LOOKUP_PROMPT=$'def foo(x):\n    return foo(x)\ndef '
run() {  # name, then audit flags
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  # files written by hand beside the reports (FINDINGS.md) are set aside and put back: the rerun never deletes them
  local keep; keep=$(mktemp -d)
  [ -d "$out/$name" ] && find "$out/$name" -maxdepth 1 -type f ! -name 'report.*' ! -name junit.xml ! -name run.json \
    ! -name audit.json -exec cp {} "$keep/" \;
  rm -rf "$out/$name"
  local t0=$(date +%s)
  python -m verifier.cli audit --engine transformers --target-tv 0.03 --no-progress --run-dir "$out/$name" "$@" > "$logs/$name.log" 2>&1
  local code=$?
  echo "$name exit $code $(( $(date +%s) - t0 )) s" >> "$out/times.txt"
  echo "$name exit $code (log: $logs/$name.log)"
  cp "$keep"/* "$out/$name/" 2>/dev/null; rm -rf "$keep" "$out/$name/samples"
}
run gemma4-assistant-T1-k3 --engine-arg mode=gemma4_assistant --num-draft-tokens 3 --prompt-ids 2,5,7 --num-samples $N
run gemma4-assistant-T0.7-topk50-topp0.9-k1 --engine-arg mode=gemma4_assistant --num-draft-tokens 1 --prompt-ids 2,5,7 --temperature 0.7 --top-k 50 --top-p 0.9 --num-samples $N
run assisted-T1-k1 --engine-arg mode=assisted --num-draft-tokens 1 --num-samples $N --acceptance canonical
# T=1, k=3: the canonical accepted-count law needs 146,689 target prefixes (> 50,000): acceptance reported, conformance not declared
run assisted-T1-k3 --engine-arg mode=assisted --num-draft-tokens 3 --num-samples $N
run assisted-T0.7-topk50-topp0.9-k1 --engine-arg mode=assisted --num-draft-tokens 1 --temperature 0.7 --top-k 50 --top-p 0.9 --num-samples $N --acceptance canonical
run assisted-T0.7-topk50-topp0.9-k3 --engine-arg mode=assisted --num-draft-tokens 3 --temperature 0.7 --top-k 50 --top-p 0.9 --num-samples $N --acceptance canonical
run prompt-lookup-T1-k3 --engine-arg mode=prompt_lookup --num-draft-tokens 3 --prompt "$LOOKUP_PROMPT" --num-samples $N
run assistant-tokenizer-T1-k3 --engine-arg mode=assistant_tokenizer --num-draft-tokens 3 --num-samples $N
# control of the finding (FINDINGS.md): the same audit with only the q column order of get_target_logits fixed
run assistant-tokenizer-T1-k3-control-usd-logit-order --engine-arg mode=assistant_tokenizer --engine-arg control_patch=usd_logit_order --num-draft-tokens 3 --num-samples $N
# control of finding 2: the Gemma4 audit with only the q handed over changed (a point mass on each greedy draft)
run gemma4-assistant-T1-k3-control-greedy-q --engine-arg mode=gemma4_assistant --engine-arg control_patch=gemma4_greedy_q --num-draft-tokens 3 --prompt-ids 2,5,7 --num-samples $N
# T = 0.7 with top-k 50 and top-p 0.9 for the non-assisted modes, k in {1, 3} (session 5; n = N, UNDERPOWERED stated)
T07="--temperature 0.7 --top-k 50 --top-p 0.9"
run prompt-lookup-T0.7-topk50-topp0.9-k1 --engine-arg mode=prompt_lookup --num-draft-tokens 1 --prompt "$LOOKUP_PROMPT" $T07 --num-samples $N
run prompt-lookup-T0.7-topk50-topp0.9-k3 --engine-arg mode=prompt_lookup --num-draft-tokens 3 --prompt "$LOOKUP_PROMPT" $T07 --num-samples $N
run assistant-tokenizer-T0.7-topk50-topp0.9-k1 --engine-arg mode=assistant_tokenizer --num-draft-tokens 1 $T07 --num-samples $N
run assistant-tokenizer-T0.7-topk50-topp0.9-k3 --engine-arg mode=assistant_tokenizer --num-draft-tokens 3 $T07 --num-samples $N
run gemma4-assistant-T0.7-topk50-topp0.9-k3 --engine-arg mode=gemma4_assistant --num-draft-tokens 3 --prompt-ids 2,5,7 $T07 --num-samples $N
run assistant-tokenizer-T0.7-topk50-topp0.9-k1-control-usd-logit-order --engine-arg mode=assistant_tokenizer --engine-arg control_patch=usd_logit_order --num-draft-tokens 1 $T07 --num-samples $N
