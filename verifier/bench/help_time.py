"""``specverify bench help-time``: wall and CPU time of ``specverify --help`` (and of sub-command help).

Each command line runs ``--repeats`` times as a fresh ``python -m verifier.cli ... --help`` process
(what a user's shell does); the figure is the median wall time and the median CPU time (user +
system of the child).  On a loaded machine the wall time includes waiting for a core; the CPU
time does not.  Goal: ``specverify --help`` under 0.5 s (no torch/scipy import while building
parsers; :mod:`verifier.cli`).  The ``python -c pass`` row is the interpreter's own start-up floor.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from verifier.bench._common import write_out

HELP = "Wall and CPU time of 'specverify --help' and each sub-command's --help (fresh processes, median of N)."

GOAL_S = 0.5  # issue 16: `specverify --help` under half a second
DEFAULT_COMMANDS = ("", "run", "audit", "report", "exact", "bench")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=7, metavar="N", help="Runs per command line. Default: 7.")
    parser.add_argument("--command", action="append", default=None, metavar="WORDS",
                        help="Sub-command words before --help (repeatable; '' = top level). Default: top level, run, audit, "
                             "report, exact, bench.")
    parser.add_argument("--out", default=None, metavar="PATH", help="Also write the figures as JSON. Default: none.")


def time_help(words: list[str], repeats: int, *, env: dict[str, str] | None = None) -> dict[str, float]:
    """Median wall and CPU seconds of ``python -m verifier.cli *words --help`` over ``repeats`` fresh processes.

    Parameters
    ----------
    words : list of str
        Sub-command words (``[]`` for the top level; ``["bench", "stats"]``).
    repeats : int
        Processes to time (>= 1).
    env : dict, optional
        Environment of the child. Default: this process's, with this package first on ``PYTHONPATH``.

    Returns
    -------
    dict
        ``wall_s`` and ``cpu_s`` (medians, seconds), ``max_wall_s``.
    """
    if env is None:
        import verifier

        root = str(Path(verifier.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "verifier.cli", *words, "--help"] if words != ["<python>"] else [sys.executable, "-c", "pass"]
    walls, cpus = [], []
    for _ in range(max(1, repeats)):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus), "max_wall_s": max(walls)}


def run(args: argparse.Namespace) -> int:
    commands = DEFAULT_COMMANDS if args.command is None else tuple(args.command)
    rows = {"<python>": time_help(["<python>"], args.repeats)}
    for words in commands:
        rows[words] = time_help(words.split(), args.repeats)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"specverify --help timing: median of {args.repeats} fresh processes; load average {load}")
    print("| command | wall s (median) | CPU s (median) | wall s (max) |")
    print("|---|---:|---:|---:|")
    for words, r in rows.items():
        label = "python -c pass" if words == "<python>" else f"specverify {words} --help".replace("  ", " ")
        print(f"| `{label}` | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['max_wall_s']:.2f} |")
    top = rows.get("")
    if top is not None:
        print(f"specverify --help: {top['wall_s']:.2f} s wall, {top['cpu_s']:.2f} s CPU "
              f"({'under' if top['wall_s'] < GOAL_S else 'OVER'} the {GOAL_S} s goal)")
    if args.out:
        write_out(args.out, json.dumps({"repeats": args.repeats, "load_average": load, "rows": rows}, indent=2))
    return 0
