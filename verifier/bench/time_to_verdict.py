"""``specverify bench time-to-verdict``: wall time of ``specverify run SUITE`` by stage, and whether
every expectation was met (reference PASS, every mutant DETECTED).

Method.  The suite runs as a subprocess (``python -m verifier.cli run SUITE --run-dir TMP
--no-progress``), exactly as a user or CI would run it; the wall time is measured around the
subprocess (interpreter start and imports included), the per-stage times come from the run's
``report.json`` (``run.stage_seconds``), and the verdicts and exit code from the same file.
Goal (issue 7): <= 120 s on 2 cores, all mutants detected.  The child's CPU time (user + system,
``getrusage(RUSAGE_CHILDREN)``) and the load average are recorded beside the wall time: on a shared
machine only the CPU time is comparable between runs.

Time to verdict.  The verdict is known after the statistics stage; the diagnosis and the report
files follow it.  So the time to verdict is not the time to exit: it is measured from the spawn of
the subprocess to the moment its ``time to verdict:`` line reaches this process (unbuffered
stdout; both interpreter starts of the isolated job included), and the job process's own figures
at that moment -- wall since its start and its CPU (``run.time_to_verdict`` in report.json,
:mod:`verifier.runner.clock`) -- are recorded beside it.  The split before the verdict is start-up
(interpreter, imports: the verdict time minus the stages), exact, models, sampling, statistics.
Goal (issue 17): verdict of ``suites/ci.toml`` <= 15 s on 2 cores.

Monte Carlo null streams are cached on disk across runs (:mod:`verifier.stats.nullcache`), so the
statistics stage of a repeated run is faster than a first one.  ``--cache user`` (default) runs as
the user would, with their cache as it is; ``--cache cold-warm`` runs the suite twice with a fresh
temporary cache folder -- first cold (every stream computed), then warm (every stream read back) --
and reports both; ``--cache off`` runs with ``--no-cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.bench._common import md_table
from verifier.errors import invalid_argument

__all__ = ["HELP", "GOAL_SECONDS", "VERDICT_GOAL_SECONDS", "VERDICT_LINE", "PRE_VERDICT_STAGES", "CACHE_MODES", "VerdictTiming", "time_suite", "register", "run", "render_markdown"]

HELP = "Time to verdict and wall time of 'specverify run SUITE' by stage (subprocess), verdict per decoder."
GOAL_SECONDS = 120.0  # issue 7: time to verdict of suites/ci.toml on 2 cores (measured then to exit)
VERDICT_GOAL_SECONDS = 15.0  # issue 17 part 4: time to verdict of suites/ci.toml on 2 cores
VERDICT_LINE = "time to verdict:"  # what `specverify run` prints once the verdict is known (verifier.runner.run)
PRE_VERDICT_STAGES = ("exact", "models", "sampling", "statistics")  # run.stage_seconds before the verdict
DEFAULT_SUITE = "suites/ci.toml"
CACHE_MODES = ("user", "cold-warm", "off")  # --cache: the user's null-stream cache / a fresh one, run twice / none


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
    cpu_seconds: float | None = None  # user + system CPU of the child process
    loadavg: list[float] = field(default_factory=list)  # 1-, 5-, 15-minute load average when the run ended
    cache: str = "user"  # null-stream cache: "user", "cold", "warm" or "off"
    verdict_wall_seconds: float | None = None  # spawn -> the child's VERDICT_LINE (None: never printed)
    verdict_job: dict[str, Any] = field(default_factory=dict)  # report.json run.time_to_verdict (the job's own clock)

    @property
    def verdict_split(self) -> dict[str, float]:
        """Seconds before the verdict: start-up (interpreter, imports, suite loading: the job's verdict
        wall time minus the stages) and each stage before it."""
        if not self.verdict_job or not self.stage_seconds:
            return {}
        stages = {k: float(self.stage_seconds[k]) for k in PRE_VERDICT_STAGES if k in self.stage_seconds}
        return {"start-up and imports": max(0.0, float(self.verdict_job["wall_seconds"]) - sum(stages.values())), **stages}

    @property
    def all_expectations_met(self) -> bool:
        return bool(self.decoders) and all(d.get("expectation_met") for d in self.decoders)

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["all_expectations_met"] = self.all_expectations_met
        d["verdict_split"] = self.verdict_split
        return d


def time_suite(suite: str = DEFAULT_SUITE, profile: str | None = None, timeout: float = 1800.0,
               extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None, cache: str = "user") -> VerdictTiming:
    """Run ``specverify run SUITE`` in a subprocess and collect wall and CPU time, stage times and verdicts.

    ``env`` replaces the child's environment (default: this process's); ``cache`` only labels the
    result (:func:`run` sets the cache folder through ``env``).

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
        child_env = dict(os.environ) if env is None else dict(env)
        child_env["PYTHONUNBUFFERED"] = "1"  # the verdict line arrives when it is printed, not at exit
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc, out, err, verdict_at = _run_timed(cmd, child_env, timeout, t0)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        load = [round(x, 2) for x in os.getloadavg()]
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        report_path = run_dir / "report.json"
        if not report_path.is_file():
            return VerdictTiming(suite, proc.returncode, wall, {}, stderr_tail=(err or out)[-2000:],
                                 cpu_seconds=cpu, loadavg=load, cache=cache, verdict_wall_seconds=verdict_at)
        report = json.loads(report_path.read_text(encoding="utf-8"))
    decoders = [{k: d.get(k) for k in ("decoder", "expect", "verdict", "expectation_met", "num_cells", "failing_cells")}
                for d in report.get("decoders", [])]
    samples = sum(int(s.get("samples_on_disk") or 0) for s in report.get("sample_sets", []))
    run_info = report.get("run", {})
    return VerdictTiming(suite, proc.returncode, wall, dict(run_info.get("stage_seconds", {})), decoders,
                         report.get("verdict", ""), report.get("summary", ""), samples, (err or "")[-2000:],
                         cpu, load, cache, verdict_at, dict(run_info.get("time_to_verdict") or {}))


def _run_timed(cmd: list[str], env: dict[str, str], timeout: float, t0: float):
    """Run ``cmd``; (process, stdout, stderr, seconds from ``t0`` to its first :data:`VERDICT_LINE` or None).

    Raises
    ------
    subprocess.TimeoutExpired
        The command ran past ``timeout`` seconds (it is killed first).
    """
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    seen: list[float] = []

    def read_stdout() -> None:
        for line in proc.stdout:
            if not seen and line.startswith(VERDICT_LINE):
                seen.append(time.perf_counter() - t0)
            lines.append(line)

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        err = proc.stderr.read()  # stderr drained here, stdout by the thread: neither pipe fills up
        proc.wait(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    reader.join()
    return proc, "".join(lines), err, (seen[0] if seen else None)


def render_markdown(t: VerdictTiming) -> str:
    cpu = f", CPU {t.cpu_seconds:.1f} s" if t.cpu_seconds is not None else ""
    load = f", load average {' / '.join(f'{x:g}' for x in t.loadavg)}" if t.loadavg else ""
    lines = [f"`specverify run {t.suite}` (null-stream cache: {t.cache}): exit {t.exit_code} ({t.verdict}); wall **{t.wall_seconds:.1f} s** "
             f"to exit (goal <= {GOAL_SECONDS:.0f} s: {'met' if t.wall_seconds <= GOAL_SECONDS else '**not met**'}){cpu}{load}; "
             f"{t.samples} samples; every expectation met: {'yes' if t.all_expectations_met else '**no**'}.", ""]
    if t.verdict_wall_seconds is not None or t.verdict_job:
        outer = f"**{t.verdict_wall_seconds:.1f} s** wall from spawn" if t.verdict_wall_seconds is not None else "not printed"
        job = (f"; the job process's own clock: {t.verdict_job['wall_seconds']:.1f} s wall since {t.verdict_job.get('wall_from', 'start')}, "
               f"**{t.verdict_job['cpu_seconds']:.1f} s CPU**" if t.verdict_job else "")
        met = ("met" if t.verdict_wall_seconds <= VERDICT_GOAL_SECONDS else "**not met**") if t.verdict_wall_seconds is not None else "?"
        lines += [f"Time to verdict (before diagnosis and reports): {outer}{job} (goal <= {VERDICT_GOAL_SECONDS:.0f} s on 2 cores: {met}).", ""]
        if t.verdict_split:
            lines += [md_table(["before the verdict", "seconds (wall)"], [[k, f"{v:.1f}"] for k, v in t.verdict_split.items()]), ""]
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
    parser.add_argument("--cache", choices=CACHE_MODES, default="user",
                        help="Null-stream cache: 'user' runs with yours as it is; 'cold-warm' runs twice with a fresh "
                        "temporary cache (cold, then warm) and reports both; 'off' passes --no-cache. Default: user.")


def run(args: argparse.Namespace) -> int:
    from verifier.stats.nullcache import CACHE_DIR_ENV, NO_CACHE_ENV

    if args.cache == "cold-warm":
        with tempfile.TemporaryDirectory(prefix="specverify-cache-") as cache_dir:
            env = {k: v for k, v in os.environ.items() if k != NO_CACHE_ENV}
            env[CACHE_DIR_ENV] = cache_dir
            timings = [time_suite(args.suite, args.profile, env=env, cache=label) for label in ("cold", "warm")]
    else:
        timings = [time_suite(args.suite, args.profile, extra_args=("--no-cache",) if args.cache == "off" else (), cache=args.cache)]
    if args.format == "json":
        print(json.dumps([t.to_json() for t in timings] if len(timings) > 1 else timings[0].to_json(), indent=1))
    else:
        print("\n".join(render_markdown(t) for t in timings))
    return 0
