#!/usr/bin/env bash
# Issue 29's field bug kinds 3 (penalties, min-p) and 5 (stop rules) through `specverify audit --url` on llama.cpp's
# llama-server (the build ci/engines/llama-cpp.sh makes), shipped pair, k = 3, 4 requests in flight, the server
# started as ci/url-audits/llama-server.sh starts it; published under
# reports/audits/llama-server-<build>/field-kinds/<name>/ (report.json/md/html, junit.xml, audit.json, times.txt).
#   min-p-tv01   T = 1, --min-p 0.1, --max-new-tokens 5 (k + 2), n planned for a TV 0.1 certificate
#   min-p-tv003  (opt-in: name it) the same at TV 0.03
#   stop         T = 1, the stop set of suites/engines/llama-cpp-python-field-stop.toml (11 ids = stop string "s"),
#                --max-tokens 6, --max-new-tokens 8, n 1,500 (tests = stop: stop-rule + stop-position@1..6)
#   min-p-two-sample  (opt-in: name it) T = 1, --min-p 0.1 against a second llama-server of the same build and GGUF
#                without a draft (--reference-url), n 20,000 per arm: the speculative server against its own
#                non-speculative law, free of the numeric floor between the GGUF and --target (the known-target
#                min-p runs meet it at min-p's boundary: field-kinds/README.md); writes blackbox.json and audit.log
# Presence / frequency penalties are refused on this server (exit 2; its penalties sampler counts the prompt too:
# docs/servers.md), so kind 3 runs as min-p here.  The numeric floor asks for all 384 ids (--floor-logprobs 384:
# exact rows).  times.txt: the audit's wall and CPU (user + system, /usr/bin/time), the server's CPU over the same
# window (/proc/PID/stat) and the load average.
# Usage: bash ci/url-audits/llama-server-field.sh [NAME ...]   (default: min-p-tv01 stop; 1-3 min on 2 loaded cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
E="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/llama-cpp-python-0.3.36"
[ -x "$E/build/bin/llama-server" ] || { echo "llama-server is not built: bash ci/engines/llama-cpp.sh" >&2; exit 2; }
build=$("$E/build/bin/llama-server" --version 2>&1 | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p' | head -1)
out="reports/audits/llama-server-${build:-unknown}/field-kinds"
mkdir -p "$out"
k=3
port=18213
stop_ids="83,262,274,287,304,307,321,323,350,359,369"
declare -A flags=(
  [min-p-tv01]="--temperature 1.0 --min-p 0.1 --max-new-tokens 5 --target-tv 0.1"
  [min-p-tv003]="--temperature 1.0 --min-p 0.1 --max-new-tokens 5 --target-tv 0.03"
  [stop]="--temperature 1.0 --stop-token-ids $stop_ids --max-tokens 6 --max-new-tokens 8 --num-samples 1500 --target-tv 0.1"
  [min-p-two-sample]="--temperature 1.0 --min-p 0.1 --max-new-tokens 5 --num-samples 20000"
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(min-p-tv01 stop)  # min-p-tv003 and min-p-two-sample: name them
for name in "${names[@]}"; do
  [ -n "${flags[$name]+x}" ] || { echo "unknown run $name; allowed: ${!flags[*]}" >&2; exit 2; }
done
pid=""
ref=""
stop() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""
  [ -n "$ref" ] && kill "$ref" 2>/dev/null && wait "$ref" 2>/dev/null; ref=""
}
trap stop EXIT INT TERM
"$E/build/bin/llama-server" -m "$E/models/target.gguf" -md "$E/models/draft.gguf" --spec-type draft-simple \
  --spec-draft-n-max "$k" --host 127.0.0.1 --port "$port" --metrics -np 4 -t 1 -td 1 --no-webui \
  > "$out/server-k$k.log" 2>&1 &
pid=$!
until curl -sf "127.0.0.1:$port/health" >/dev/null; do sleep 0.5; done
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }  # the server's user + system CPU, in clock ticks
hz=$(getconf CLK_TCK)
for name in "${names[@]}"; do
  run="$(mktemp -d)/run"
  server_before=$(ticks)
  more=(--floor-logprobs 384)
  if [ "$name" = min-p-two-sample ]; then  # the reference: the same server without a draft
    "$E/build/bin/llama-server" -m "$E/models/target.gguf" --host 127.0.0.1 --port $((port + 1)) --metrics -np 4 -t 1 \
      --no-webui > "$out/server-reference.log" 2>&1 &
    ref=$!
    until curl -sf "127.0.0.1:$((port + 1))/health" >/dev/null; do sleep 0.5; done
    more=(--reference-url "http://127.0.0.1:$((port + 1))" --json "$run.json")
  fi
  # shellcheck disable=SC2086  # the flags are words
  /usr/bin/time -f "%e s wall, %U s user + %S s system CPU (the audit process)" -o "$run.time" \
    python -m verifier.cli audit --url "http://127.0.0.1:$port" --api llama-server --target shipped:target \
      --num-draft-tokens "$k" ${flags[$name]} "${more[@]}" --run-dir "$run" --no-progress | tee "$run.log" || true
  server_cpu=$(awk -v a="$server_before" -v b="$(ticks)" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
  mkdir -p "$out/$name"
  if [ "$name" = min-p-two-sample ]; then
    cp "$run.json" "$out/$name/blackbox.json"; cp "$run.log" "$out/$name/audit.log"
    kill "$ref" 2>/dev/null && wait "$ref" 2>/dev/null; ref=""; rm -f "$out/server-reference.log"
  else
    cp "$run"/report.json "$run"/report.md "$run"/report.html "$run"/junit.xml "$run"/audit.json "$out/$name/"
  fi
  { cat "$run.time"; echo "$server_cpu s CPU (the speculative llama-server over the same window)";
    echo "load $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, at the end)"; echo "flags: ${flags[$name]}"; } > "$out/$name/times.txt"
  rm -rf "$(dirname "$run")"
done
stop
rm -f "$out/server-k$k.log"
echo "reports in $out"
