"""Self-reported URL audits (design 2: no local model) of llama.cpp's llama-server on the shipped GGUF pair.

Each configuration starts its own server through verifier.server.launch (as ci/url-audits/llama-server.sh does:
`-md draft.gguf --spec-type draft-simple --spec-draft-n-max K -np 4 -t 1 -td 1 --metrics`; CONTROL configurations
start it without a draft, so no verification step runs), audits it with

    python -m verifier.cli audit --url URL --api llama-server --design self-reported --vocab-size 384 \
        --eos-token-id 0 --prompt-ids 68,69,70,221 --num-draft-tokens K --logprobs L --temperature T --top-k TK ...

(n planned by the audit for gof@1 at --target-tv, default 0.05), copies the reports and the per-position count of
rows without probabilities to reports/audits/llama-server-<build>-self-reported/<config>/ and stops the server
(also on Ctrl-C or an error).  T = 1 needs --top-k <= --logprobs <= 20 in this design (the vocabulary has 384 ids),
so "t1" is T = 1 with top-k 20 and the top-20 rows.

    python ci/url-audits/llama_server_self_reported.py [--target-tv TV] [--only CONFIG,...]   # not run by .ci/run
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

COMMON = ["--api", "llama-server", "--design", "self-reported", "--vocab-size", "384", "--eos-token-id", "0",
          "--prompt-ids", "68,69,70,221", "--no-progress"]
T1 = ["--temperature", "1.0", "--top-k", "20", "--logprobs", "20"]
T07 = ["--temperature", "0.7", "--top-k", "8", "--logprobs", "8"]
CONFIGS = [  # (folder, k: draft tokens per round or None = no draft (control), audit flags)
    ("t1-topk20-k1", 1, T1),
    ("t1-topk20-k3", 3, T1),
    ("t07-topk8-k1", 1, T07),
    ("t07-topk8-k3", 3, T07),
    # controls: no draft, 5 tokens per completion as the k = 3 audits; the server's counters stay at 0, so the
    # speculation guard says "speculation never ran" -- the cells are the control
    ("control-t1-topk20", None, T1 + ["--max-new-tokens", "5"]),
    ("control-t07-topk8", None, T07 + ["--max-new-tokens", "5"]),
]


def rows_by_position(journal: Path) -> list[dict]:
    """Per emitted position of the multi-token requests (the audited sample and the collision requests): how many
    tokens were emitted there and how many came back with no top entries and prob 1.0."""
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for line in journal.read_text().splitlines():
        entry = json.loads(line)
        if entry["request"]["n_predict"] < 2:
            continue
        for c in entry["completions"]:
            tops, logps = c.get("top_logprobs") or [], c.get("logprobs") or []
            for j in range(len(c["token_ids"])):
                counts[j + 1][0] += 1
                counts[j + 1][1] += int(j < len(tops) and not tops[j] and j < len(logps) and logps[j] == 0.0)
    return [{"position": j, "emitted": n, "prob_1_no_top": e} for j, (n, e) in sorted(counts.items())]


def main() -> int:
    from verifier.server.launch import launch_llama_server, llama_server_install

    parser = argparse.ArgumentParser()
    parser.add_argument("--target-tv", default="0.05")
    parser.add_argument("--only", default=None, help="comma-separated config folders")
    args = parser.parse_args()
    install = llama_server_install()
    version = subprocess.run([str(install.binary), "--version"], capture_output=True, text=True)
    build = next((w for w in (version.stdout + version.stderr).replace(")", " ").split() if len(w) == 7
                  and all(ch in "0123456789abcdef" for ch in w)), "unknown")
    out_root = REPO / "reports" / "audits" / f"llama-server-{build}-self-reported"
    for name, k, flags in CONFIGS:
        if args.only and name not in args.only.split(","):
            continue
        dest = out_root / name
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            draft = install.draft_gguf if k else None
            with launch_llama_server(install.target_gguf, draft, draft_max=k or 1, parallel=4, threads=1,
                                     log_path=Path(tmp) / "server.log") as server:
                run = Path(tmp) / "run"
                audit = ["audit", "--url", server.base_url, *COMMON, "--num-draft-tokens", str(k or 1), *flags,
                         "--target-tv", args.target_tv, "--run-dir", str(run)]
                start = time.time()
                done = subprocess.run([sys.executable, "-m", "verifier.cli", *audit], capture_output=True, text=True,
                                      cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
                wall = time.time() - start
            print(f"== {name}\n{done.stdout[-2500:]}{done.stderr[-2000:]}", flush=True)
            for f in ("report.json", "report.md", "report.html", "junit.xml"):
                if (run / f).is_file():
                    shutil.copy(run / f, dest / f)
            journal = run / "server" / "responses.jsonl"
            positions = rows_by_position(journal) if journal.is_file() else []
            (dest / "positions.json").write_text(json.dumps(positions, indent=1) + "\n")
            server_cmd = (f"llama-server -m target.gguf " + (f"-md draft.gguf --spec-type draft-simple "
                                                              f"--spec-draft-n-max {k} " if k else "")
                          + "-np 4 -t 1 -td 1 --metrics --no-webui")
            (dest / "command.txt").write_text(
                f"{server_cmd}\nspecverify {shlex.join(audit).replace(server.base_url, 'URL').replace(str(run), 'RUN_DIR')}\n"
                f"exit {done.returncode}; audit {wall:.0f} s wall; load average {os.getloadavg()[0]:.2f} at the end; "
                f"{os.cpu_count()} cores\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
