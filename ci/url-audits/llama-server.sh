#!/usr/bin/env bash
# URL audits of llama.cpp's llama-server (the build ci/engines/llama-cpp.sh makes) on the shipped pair, published
# under reports/audits/llama-server-<build>/: T=1 and T=0.7 with top-k 8, k in {1, 3}, each planned for a
# conclusive certificate at TV 0.03 (n from the audit's own power plan). One server per k (the draft length is
# server-wide); each is stopped when its audits end, also on Ctrl-C or an error (trap).
# The numeric floor asks for all 384 ids of the shipped vocabulary (--floor-logprobs 384): top-20 rows leave up to a
# third of the T = 1 mass unseen and the floor is then only a loose upper bound (0.15 measured) above TV 0.03.
# Usage: bash ci/url-audits/llama-server.sh [TARGET_TV]     (not run by .ci/run: about 20-30 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
tv="${1:-0.03}"
E="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/llama-cpp-python-0.3.36"
[ -x "$E/build/bin/llama-server" ] || { echo "llama-server is not built: bash ci/engines/llama-cpp.sh" >&2; exit 2; }
build=$("$E/build/bin/llama-server" --version 2>&1 | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p' | head -1)
out="reports/audits/llama-server-${build:-unknown}"
mkdir -p "$out"
pid=""
stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""; }
trap stop EXIT INT TERM
for k in ${ONLY_K:-3 1}; do
  port=$((18200 + k))
  "$E/build/bin/llama-server" -m "$E/models/target.gguf" -md "$E/models/draft.gguf" --spec-type draft-simple \
    --spec-draft-n-max "$k" --host 127.0.0.1 --port "$port" --metrics -np 4 -t 1 -td 1 --no-webui \
    > "$out/server-k$k.log" 2>&1 &
  pid=$!
  until curl -sf "127.0.0.1:$port/health" >/dev/null; do sleep 0.5; done
  for cfg in "t1:--temperature 1.0" "t07-topk8:--temperature 0.7 --top-k 8"; do
    name="${cfg%%:*}-k$k"; flags="${cfg#*:}"
    run="$(mktemp -d)/run"
    start=$(date +%s)
    # shellcheck disable=SC2086  # flags are two words each
    python -m verifier.cli audit --url "http://127.0.0.1:$port" --api llama-server --target shipped:target --num-draft-tokens "$k" \
      $flags --floor-logprobs 384 --target-tv "$tv" --run-dir "$run" --no-progress | tee "$run.log" || true
    mkdir -p "$out/$name"
    cp "$run"/report.json "$run"/report.md "$run"/report.html "$run"/junit.xml "$run"/audit.json "$out/$name/"
    echo "$(( $(date +%s) - start )) s wall, load $(cut -d' ' -f1 /proc/loadavg)" > "$out/$name/times.txt"
    rm -rf "$(dirname "$run")"
  done
  stop
done
echo "reports in $out"
