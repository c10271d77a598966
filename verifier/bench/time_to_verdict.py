"""``specverify bench time-to-verdict``: wall time of ``specverify run SUITE`` by stage, and whether
every expectation was met (reference PASS, every mutant DETECTED).

Method.  The suite runs as a subprocess (``python -m verifier.cli run SUITE --run-dir TMP
--no-progress``), exactly as a user or CI would run it; the wall time is measured around the
subprocess (interpreter start and imports included), the per-stage times come from the run's
``report.json`` (``run.stage_seconds``), and the verdicts and exit code from the same file.
Goal (issue 7): <= 120 s on 2 cores, all mutants detected.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.bench._common import md_table
from verifier.errors import invalid_argument

__all__ = ["HELP", "GOAL_SECONDS", "VerdictTiming", "time_suite", "register", "run", "render_markdown"]

HELP = "Wall time of 'specverify run SUITE' by stage (subprocess), verdict per decoder, goal <= 120 s."
GOAL_SECONDS = 120.0  # issue 7: time to verdict of suites/ci.toml on 2 cores
DEFAULT_SUITE = "suites/ci.toml"


@dataclass
class VerdictTiming:
    """One timed suite run."""

    suite: str
    exit_code: int
    wall_seconds: float
    stage_seconds: dict[str, float]
    decoders: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = ""
    summary: str = ""
    samples: int = 0
    stderr_tail: str = ""

    @property
    def all_expectations_met(self) -> bool:
        return bool(self.decoders) and all(d.get("expectation_met") for d in self.decoders)

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["all_expectations_met"] = self.all_expectations_met
        return d


def time_suite(suite: str = DEFAULT_SUITE, profile: str | None = None, timeout: float = 1800.0,
               extra_args: tuple[str, ...] = ()) -> VerdictTiming:
    """Run ``specverify run SUITE`` in a subprocess and collect wall time, stage times and verdicts.

    Raises
    ------
    InvalidArgumentError
        ``suite`` does not exist.
    """
    if not Path(suite).is_file():
        raise invalid_argument("suite", suite, "an existing suite file, e.g. suites/ci.toml")
    with tempfile.TemporaryDirectory(prefix="specverify-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "verifier.cli", "run", suite, "--run-dir", str(run_dir), "--no-progress", *extra_args]
        if profile:
            cmd += ["--profile", profile]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
        wall = time.perf_counter() - t0
        report_path = run_dir / "report.json"
        if not report_path.is_file():
            return VerdictTiming(suite, proc.returncode, wall, {}, stderr_tail=(proc.stderr or proc.stdout)[-2000:])
        report = json.loads(report_path.read_text(encoding="utf-8"))
    decoders = [{k: d.get(k) for k in ("decoder", "expect", "verdict", "expectation_met", "num_cells", "failing_cells")}
                for d in report.get("decoders", [])]
    samples = sum(int(s.get("samples_on_disk") or 0) for s in report.get("sample_sets", []))
    return VerdictTiming(suite, proc.returncode, wall, dict(report.get("run", {}).get("stage_seconds", {})), decoders,
                         report.get("verdict", ""), report.get("summary", ""), samples, (proc.stderr or "")[-2000:])


def render_markdown(t: VerdictTiming) -> str:
    lines = [f"`specverify run {t.suite}`: exit {t.exit_code} ({t.verdict}); wall **{t.wall_seconds:.1f} s** "
             f"(goal <= {GOAL_SECONDS:.0f} s: {'met' if t.wall_seconds <= GOAL_SECONDS else '**not met**'}); "
             f"{t.samples} samples; every expectation met: {'yes' if t.all_expectations_met else '**no**'}.", ""]
    if t.stage_seconds:
        rows = [[k, f"{v:.1f}"] for k, v in t.stage_seconds.items()]
        rows.append(["interpreter start, imports, report files, exit (wall - stages)", f"{t.wall_seconds - sum(t.stage_seconds.values()):.1f}"])
        lines += [md_table(["stage", "seconds"], rows), ""]
    if t.decoders:
        rows = [[d["decoder"], d["expect"], d["verdict"], "yes" if d["expectation_met"] else "**no**", d.get("num_cells"),
                 len(d.get("failing_cells") or [])] for d in t.decoders]
        lines += [md_table(["decoder", "expect", "verdict", "met", "cells", "cells rejected"], rows), ""]
    else:
        lines += ["no report.json was written; stderr tail:", "", "```", t.stderr_tail, "```", ""]
    return "\n".join(lines)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default=DEFAULT_SUITE, metavar="PATH", help=f"Suite file. Default: {DEFAULT_SUITE}.")
    parser.add_argument("--profile", default=None, help="Suite profile. Default: the suite's default_profile.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")


def run(args: argparse.Namespace) -> int:
    t = time_suite(args.suite, args.profile)
    print(json.dumps(t.to_json(), indent=1) if args.format == "json" else render_markdown(t))
    return 0
