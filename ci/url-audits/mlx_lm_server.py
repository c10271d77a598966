"""URL audits of MLX-LM's server (mlx-lm 0.32.2, CPU build of MLX; the install of ci/engines/mlx-lm.sh) on the shipped pair.

Each configuration starts its own `mlx_lm server` through verifier.server.launch_mlx (draft model, k draft tokens):
as shipped, with the prompt-cache fix of reports/audits/mlx-lm-server-0.32.2/FINDINGS.md (patches=("prompt_cache",),
nothing else changed: CONTROL), or with the prompt cache off (--prompt-cache-size 0, the workaround).  It audits the
server with `python -m verifier.cli audit --url ... --api mlx-lm --target shipped:target`, copies the reports to
reports/audits/mlx-lm-server-0.32.2/<config>/ and stops the server (also on Ctrl-C or an error).

    python ci/url-audits/mlx_lm_server.py [--target-tv TV] [--only CONFIG,...] [--work-dir DIR]   # ~1 min per config
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

T1 = ["--temperature", "1.0"]
T07 = ["--temperature", "0.7", "--top-k", "8"]
CONFIGS = [  # (folder, k, sampling flags, launch keywords)
    ("t1-k1", 1, T1, {}),
    ("t1-k3", 3, T1, {}),
    ("t07-topk8-k1", 1, T07, {}),
    ("t07-topk8-k3", 3, T07, {}),
    ("control-prompt-cache-fix-t1-k1", 1, T1, {"patches": ("prompt_cache",)}),
    ("control-prompt-cache-fix-t1-k3", 3, T1, {"patches": ("prompt_cache",)}),
    ("control-prompt-cache-fix-t07-topk8-k1", 1, T07, {"patches": ("prompt_cache",)}),
    ("control-prompt-cache-fix-t07-topk8-k3", 3, T07, {"patches": ("prompt_cache",)}),
    ("cache-off-t07-topk8-k1", 1, T07, {"prompt_cache_size": 0}),
    # a TV 0.03 certificate of the fixed server (n ~ 10^4 at ~60 samples/s: about 10 min on 2 cores)
    ("certificate-control-prompt-cache-fix-t07-topk8-k1", 1, T07 + ["--target-tv", "0.03"], {"patches": ("prompt_cache",)}),
    # at T = 1 (n = 53,474: about 25 min on 2 cores); the exact floor needs the logit_bias sweeps (FLOOR)
    ("certificate-control-prompt-cache-fix-t1-k1", 1, T1 + ["--target-tv", "0.03"], {"patches": ("prompt_cache",)}),
    ("certificate-control-prompt-cache-fix-t1-k3", 3, T1 + ["--target-tv", "0.03"], {"patches": ("prompt_cache",)}),
    ("certificate-control-prompt-cache-fix-t07-topk8-k3", 3, T07 + ["--target-tv", "0.03"], {"patches": ("prompt_cache",)}),
]
# the numeric floor over the whole vocabulary: the server caps top_logprobs at 11, so at T = 1 the rows above it are
# rebuilt by logit_bias sweeps (verifier/server/floor_sweep.py; 39 one-token requests per position) -- exact
FLOOR = ["--floor-logprobs", "384"]


def main() -> int:
    from verifier.server.launch_mlx import launch_mlx_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--target-tv", default="0.2", help="the audits' --target-tv (n is planned from it). Default: 0.2")
    parser.add_argument("--only", default=None, help="comma-separated config folders")
    parser.add_argument("--work-dir", default=None,
                        help="keep each audit's run folder here (<work-dir>/<config>); default: a temporary folder, removed")
    args = parser.parse_args()
    out_root = REPO / "reports" / "audits" / "mlx-lm-server-0.32.2"
    for name, k, flags, launch in CONFIGS:
        if args.only and name not in args.only.split(","):
            continue
        start = time.time()
        with launch_mlx_server(num_draft_tokens=k, **launch) as server:
            up = time.time() - start
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(args.work_dir) / name if args.work_dir else Path(tmp) / "run"
                # no /metrics on this server: --speculation-unverified (the report says speculation was not observable)
                cmd = [sys.executable, "-m", "verifier.cli", "audit", "--url", server.base_url, "--api", "mlx-lm",
                       "--target", "shipped:target", "--num-draft-tokens", str(k), "--target-tv", args.target_tv, *flags, *FLOOR,
                       "--speculation-unverified", "--run-dir", str(run), "--no-progress"]
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
                print(done.stdout[-3000:], done.stderr[-2000:], sep="\n", flush=True)
                if done.returncode not in (0, 1, 4):  # no verdict written (usage error, crash): keep the published one
                    print(f"{name}: exit {done.returncode}, reports/audits left as they were", flush=True)
                    continue
                dest = out_root / name
                dest.mkdir(parents=True, exist_ok=True)
                for f in ("report.json", "report.md", "report.html", "junit.xml", "audit.json"):
                    if (run / f).is_file():
                        shutil.copy(run / f, dest / f)
                (dest / "times.txt").write_text(f"server start {up:.0f} s; audit {time.time() - start - up:.0f} s wall; "
                                                f"exit {done.returncode}; launch {launch}\n"
                                                + (f"stderr: {done.stderr.strip().splitlines()[-1]}\n" if done.stderr.strip() else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
