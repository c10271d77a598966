"""``specverify bench server``: a URL audit's samples/s against the server's own throughput for the same requests.

Method.  For one configuration (``--url``, ``--api``, target, sampling, k, concurrency):

1. **server throughput** -- the exact request bodies the audit sends (the same dialect, prompt, sampling,
   derived seeds; :class:`verifier.server.decoder.ServerDecoder` builds them) posted with a bare httpx
   client at the same concurrency, replies read and dropped: the most samples/s any client gets from
   this server for this request mix;
2. **URL audit** -- ``specverify audit --url ...`` as a user runs it (a subprocess, job child included),
   with the same n, concurrency and seed offset: its sampling stage (``report.json``
   ``run.stage_seconds.sampling``: HTTP, parsing, the response journal, shards) and its whole wall time;
3. the ratios audit / server (goal >= 0.9 for the sampling stage) and the **time to a conclusive
   verdict**: the audit's planned n for ``--conclusive-tv`` (its plan line) at the audit's measured rate,
   plus its fixed cost (start-up, models, statistics, reports) measured in step 2.

The two measurements use different seeds (the server would otherwise answer from its prompt cache
in the same order) and alternate on the same server ``--repeats`` times (audit, bare, bare, audit, audit, ...: neither
always meets a colder or a warmer server); the figures are the medians of the repeats, each pair is printed, and the
load average is printed beside them: on a shared machine compare CPU-quiet runs only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verifier.bench._common import write_out
from verifier.errors import EXIT_DECODER, DecoderError, VerifierError, invalid_argument

__all__ = ["HELP", "register", "run", "server_throughput"]

HELP = "URL audit samples/s vs the server's own throughput for the same request mix; time to a conclusive verdict."
PLAN_LINE = re.compile(r"needs n = (\d+) per prompt")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the running server's base URL")
    parser.add_argument("--api", default="openai-completions", help="Default: openai-completions")
    parser.add_argument("--target", default="shipped:target", help="Default: shipped:target")
    parser.add_argument("--num-draft-tokens", type=int, default=3, help="Default: 3")
    parser.add_argument("--num-samples", type=int, default=2000, help="samples per measurement. Default: 2000")
    parser.add_argument("--num-concurrent", type=int, default=4, help="Default: 4")
    parser.add_argument("--temperature", type=float, default=1.0, help="Default: 1.0")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--conclusive-tv", type=float, default=0.03, help="TV of a conclusive certificate. Default: 0.03")
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternating bare/audit measurements; the figures are their medians. Default: 3")
    parser.add_argument("--out", default=None, help="also write the figures as JSON")


def server_throughput(url: str, api: str, prompt: list[int], sampling, max_new_tokens: int, n: int,
                      num_concurrent: int, seed: int) -> dict[str, Any]:
    """Post the audit's ``n`` request bodies with a bare client; samples/s of the server for this mix."""
    from verifier.server.client import ServerSettings, post_all
    from verifier.server.decoder import request_seed
    from verifier.server.dialects import get_dialect

    dialect = get_dialect(api)
    settings = ServerSettings(url, num_concurrent=num_concurrent)
    bodies = [dialect.request(prompt, sampling, max_new_tokens, request_seed(seed, prompt, sampling.label(), i))
              for i in range(n)]
    start = time.perf_counter()
    post_all(settings, dialect.path, [(f"request {i}", b) for i, b in enumerate(bodies)], lambda *_: None)
    seconds = time.perf_counter() - start
    return {"samples": n, "seconds": seconds, "samples_per_s": n / seconds}


def _audit(args, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "verifier.cli", "audit", "--url", args.url, "--api", args.api, "--target", args.target,
               "--num-draft-tokens", str(args.num_draft_tokens), "--num-samples", str(args.num_samples),
               "--num-concurrent", str(args.num_concurrent), "--temperature", str(args.temperature),
               "--target-tv", str(args.conclusive_tv), "--seed", str(seed), "--run-dir", str(run_dir), "--no-progress"]
        if args.top_k is not None:
            cmd += ["--top-k", str(args.top_k)]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        try:
            report = json.loads((run_dir / "report.json").read_text())
            if not report.get("sample_sets"):
                raise ValueError("no sample set")
        except (OSError, ValueError):
            # the audit's own error (exit 2: usage, a dead URL; 3: a misbehaving server) with its message, no traceback
            error = DecoderError if done.returncode == EXIT_DECODER else VerifierError
            raise error(f"bench server: the audit (seed {seed}) wrote no report (exit {done.returncode}): "
                        f"{(done.stderr or done.stdout)[-2000:].strip()}") from None
        m = PLAN_LINE.search(done.stdout)
        stages = report["run"]["stage_seconds"]
        return {"exit_code": done.returncode, "verdict": report["verdict"], "wall_seconds": wall, "stage_seconds": stages,
                "max_new_tokens": report["sample_sets"][0]["max_new_tokens"],
                "prompt_ids": report["sample_sets"][0]["prompt_ids"],
                "n_conclusive": int(m.group(1)) if m else None}


def run(args: argparse.Namespace) -> int:
    import statistics

    from verifier.sampling import SamplingConfig

    if args.num_samples < 10:
        raise invalid_argument("--num-samples", args.num_samples, "an integer >= 10")
    if isinstance(args.repeats, bool) or not isinstance(args.repeats, int) or not 1 <= args.repeats <= 20:
        raise invalid_argument("--repeats", args.repeats, "an integer in 1..20")
    sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k)
    load = os.getloadavg()[0]
    pairs, prompt, max_new = [], None, None
    for r in range(args.repeats):
        audit_first = r % 2 == 0  # audit, bare | bare, audit | audit, bare ... (the first audit gives the prompt)
        seeds = (2 * r + 1, 2 * r + 2)  # audit seed, bare seed: every measurement its own requests
        audit = raw = None
        for which in (("audit", "bare") if audit_first else ("bare", "audit")):
            if which == "audit":
                audit = _audit(args, seed=seeds[0])
                prompt, max_new = audit["prompt_ids"], audit["max_new_tokens"]  # the bare client sends the same requests
            else:
                raw = server_throughput(args.url, args.api, prompt, sampling, max_new, args.num_samples,
                                        args.num_concurrent, seed=seeds[1])
        sampling_s = audit["stage_seconds"].get("sampling") or float("nan")
        pairs.append({"order": "audit first" if audit_first else "bare first", "server": raw, "audit": audit,
                      "audit_sampling_samples_per_s": args.num_samples / sampling_s,
                      "ratio_sampling": args.num_samples / sampling_s / raw["samples_per_s"],
                      "fixed_seconds": audit["wall_seconds"] - sampling_s})
    raw_rate = statistics.median(p["server"]["samples_per_s"] for p in pairs)
    audit_rate = statistics.median(p["audit_sampling_samples_per_s"] for p in pairs)
    ratio = statistics.median(p["ratio_sampling"] for p in pairs)
    wall = statistics.median(p["audit"]["wall_seconds"] for p in pairs)
    fixed = statistics.median(p["fixed_seconds"] for p in pairs)
    last = pairs[-1]["audit"]
    n_conc = last["n_conclusive"]
    out = {"url": args.url, "api": args.api, "target": args.target, "sampling": sampling.label(),
           "num_draft_tokens": args.num_draft_tokens, "num_concurrent": args.num_concurrent, "samples": args.num_samples,
           "max_new_tokens": max_new, "load_average": load, "load_average_after": os.getloadavg()[0],
           "repeats": pairs, "server_samples_per_s": raw_rate,
           "audit_sampling_samples_per_s": audit_rate, "ratio_sampling": ratio,
           "ratio_end_to_end": (args.num_samples / wall) / raw_rate,
           "conclusive_tv": args.conclusive_tv, "n_conclusive": n_conc,
           "seconds_to_conclusive": (n_conc / audit_rate + fixed) if n_conc else None}
    print(f"server {args.url} ({args.api}), {sampling.label()}, k={args.num_draft_tokens}, {args.num_concurrent} in flight, "
          f"n = {args.num_samples}, {max_new} tokens per sample, {args.repeats} alternating repeats (load average "
          f"{load:.1f} -> {out['load_average_after']:.1f})")
    for i, p in enumerate(pairs):
        print(f"  repeat {i + 1} ({p['order']}): server {p['server']['samples_per_s']:,.1f} samples/s, audit sampling "
              f"{p['audit_sampling_samples_per_s']:,.1f} samples/s = {p['ratio_sampling']:.2f}")
    print(f"  server throughput (bare client, same requests; median): {raw_rate:,.1f} samples/s")
    print(f"  URL audit sampling stage (median): {audit_rate:,.1f} samples/s; median ratio {ratio:.2f} of the server's "
          f"(goal >= 0.9); end to end {out['ratio_end_to_end']:.2f} ({wall:.1f} s wall, {fixed:.1f} s outside "
          f"sampling); verdict {last['verdict']}")
    if n_conc:
        print(f"  conclusive at TV {args.conclusive_tv:g}: n = {n_conc:,} per prompt -> about "
              f"{out['seconds_to_conclusive'] / 60:.1f} min at this rate")
    if args.out:
        write_out(args.out, json.dumps(out, indent=2) + "\n")  # the figures are printed above: nothing is lost
    return 0
