#!/usr/bin/env bash
# Known-p audits of a decoder-kind engine on the shipped models, one report folder per configuration:
#   bash suites/engines/audit-decoder-engine.sh ENGINE OUT_DIR [N]
# Configurations (CONFIGS env var to choose; default the first six): T=1 and T=0.7 with top-k 8, and T=1 with top-p 0.9,
# each at k = 1 and k = 3 (also: T=0.7 alone and T=0.7 with top-p 0.9, for engines that express it), --target-tv 0.03 (n = N per configuration; fewer than the planned n -> UNDERPOWERED,
# with the n needed in the report).  Reports (report.md/html/json) are copied into OUT_DIR/<config>/; the run
# folders (samples) stay in $TMPDIR.  Extra `specverify audit` flags: EXTRA env var.
set -euo pipefail
engine=$1; out=$2; n=${3:-2000}
cd "$(dirname "$0")/../.."
declare -A flags=(
  [t1-k1]="--temperature 1 --num-draft-tokens 1"
  [t1-k3]="--temperature 1 --num-draft-tokens 3"
  [t07-topk8-k1]="--temperature 0.7 --top-k 8 --num-draft-tokens 1"
  [t07-topk8-k3]="--temperature 0.7 --top-k 8 --num-draft-tokens 3"
  [t1-topp09-k1]="--temperature 1 --top-p 0.9 --num-draft-tokens 1"
  [t1-topp09-k3]="--temperature 1 --top-p 0.9 --num-draft-tokens 3"
  [t07-k1]="--temperature 0.7 --num-draft-tokens 1"
  [t07-k3]="--temperature 0.7 --num-draft-tokens 3"
  [t07-topp09-k1]="--temperature 0.7 --top-p 0.9 --num-draft-tokens 1"
  [t07-topp09-k3]="--temperature 0.7 --top-p 0.9 --num-draft-tokens 3"
)
configs=${CONFIGS:-"t1-k1 t1-k3 t07-topk8-k1 t07-topk8-k3 t1-topp09-k1 t1-topp09-k3"}
tmp=${RUNS:-$(mktemp -d)}; mkdir -p "$tmp"  # RUNS: keep the run folders there
for c in $configs; do
  start=$(date +%s)
  set +e
  python -m verifier.cli audit --engine "$engine" ${flags[$c]} --target-tv 0.03 --num-samples "$n" --chunk-size 250 \
    --seed 2026 --no-progress --run-dir "$tmp/$c" ${EXTRA:-} > "$tmp/$c.log" 2>&1
  code=$?
  set -e
  mkdir -p "$out/$c"
  cp "$tmp/$c"/report.{md,html,json} "$out/$c/" 2>/dev/null || true
  echo "$c: exit $code in $(( $(date +%s) - start )) s: $(grep -m1 '^verdict' "$tmp/$c.log")"
  tail -3 "$tmp/$c.log" | sed 's/^/    /'
done
