"""``specverify bench engine-alone -- AUDIT ARGS``: an engine audit's time to verdict beside the engine alone doing the
same work, on the same machine in the same minute.

Method.  (1) ``python -m verifier.cli audit ARGS --run-dir TMP --no-progress`` runs as a user would (diagnosis off:
it follows the verdict); its time to verdict is measured from the spawn of the subprocess to its ``time to verdict:``
line (:func:`verifier.bench.time_to_verdict._run_timed`: interpreter start and imports included).  (2) The engine
alone: the engine venv's Python imports the adapter's worker handler file (``verifier/engines/workers/<engine>.py``:
the engine's own API, no harness), builds ``Handler(**init)`` with the audit's own engine arguments (the models
loaded once) and makes every ``generate`` call of the audit's chunks with the same prompts, sampling fields and
per-row seeds (:func:`verifier.engines.bridge.hashed_seeds` of each stored chunk's seed); its wall time is measured
around that subprocess, spawn to exit.  That is the engine's own best rate for the same work through the same
engine path: its start-up, model load and sampling, and nothing the harness adds (imports, the plan, the pipe
protocol, shards, the numeric floor, statistics).  Printed: both times, the engine's own split (start-up vs generate
calls), and the ratio engine alone / audit -- issue 27's "end to end >= 0.9 of the engine's own best rate".

Engines: the adapters whose decoders are engine workers (``Engine.worker_decoder``: openvino-genai, vllm,
llama-cpp-python, mlx-lm).
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

from verifier.bench._common import md_table
from verifier.errors import invalid_argument

__all__ = ["HELP", "engine_alone", "register", "repeat_summary", "run"]

HELP = ("An engine audit's time to verdict beside the engine alone doing the same generate calls (its worker handler "
        "in its own venv, models loaded once): the ratio of issue 27.")

_DRIVER = r"""
import json, runpy, sys, time
from pathlib import Path
t0 = time.perf_counter()
spec = json.load(open(sys.argv[1]))
import numpy as np
here = Path(spec["engines_dir"])
sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]
import_file = runpy.run_path(str(here.parent / "_import_file.py"))["import_file"]
Handler = import_file("specverify_alone_handler", spec["handler"]).Handler
handler = Handler(**spec["init"])
t1 = time.perf_counter()
rows = 0
for call in spec["calls"]:
    kw = dict(call)
    kw["prompt_ids"] = np.asarray(kw["prompt_ids"], dtype=np.int64)
    kw["seeds"] = np.asarray(kw["seeds"], dtype=np.int64)
    out = handler.generate(**kw)
    rows += len(out["tokens"])
t2 = time.perf_counter()
json.dump({"startup_s": t1 - t0, "generate_s": t2 - t1, "rows": rows}, open(spec["out"], "w"))
"""


class AuditStopped(Exception):
    """The audit ended without a report (usage error, decoder crash, interrupt): its exit code and message."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _check_engine(audit_args: list[str]) -> None:
    """Refuse, before anything runs, audit arguments without ``--engine NAME`` of an engine whose decoders are workers
    (``Engine.worker_decoder``)."""
    from verifier.engines import engine_names, get_engine

    workers = sorted(name for name in engine_names() if getattr(get_engine(name), "worker_decoder", False))
    allowed = f"`--engine NAME` with NAME one of {', '.join(workers)} (engines whose decoders are worker processes)"
    name = next((audit_args[i + 1] for i, a in enumerate(audit_args[:-1]) if a == "--engine"),
                next((a.split("=", 1)[1] for a in audit_args if a.startswith("--engine=")), None))
    if not audit_args:
        raise invalid_argument("AUDIT ARGS", [], f"the arguments of `specverify audit` after --: {allowed}")
    if name not in workers or any(a == "--url" or a.startswith("--url=") for a in audit_args):
        raise invalid_argument("--engine", name, allowed + ", no --url")


def _calls(run_dir: Path) -> tuple[Any, list[dict[str, Any]]]:
    """The audit's engine decoder (built as the runner builds it) and the generate calls of its stored chunks."""
    import numpy as np

    from verifier.runner.context import SuiteContext
    from verifier.runner.run import load_run_suite
    from verifier.runner.store import SampleStore

    suite, _ = load_run_suite(run_dir)
    ctx = SuiteContext(suite)
    store = SampleStore(run_dir)
    calls, decoder = [], None
    for plan in ctx.plans:
        spec = next(d for d in suite.decoders if d.name == plan.decoder.name)
        decoder = ctx.decoder(spec, plan.num_draft_tokens)
        if not hasattr(decoder, "request"):
            raise invalid_argument("audit", spec.decoder, "an engine audit whose decoder is an engine worker "
                                   "(openvino-genai, vllm, llama-cpp-python, mlx-lm)")
        for i in range(plan.num_chunks):
            shard = store.read_chunk(plan.set_id, i)
            if shard is None:
                continue
            kw = decoder.request(plan.prompt_ids, int(shard.meta["num_samples"]), plan.max_new_tokens, plan.sampling,
                                 int(shard.meta["seed"]), stop_token_ids=spec.stop_token_ids, max_tokens=spec.max_tokens)
            calls.append({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in kw.items()})
    return decoder, calls


def engine_alone(audit_args: list[str], timeout: float = 3600.0) -> dict[str, Any]:
    """Run the audit, then the engine alone on the same calls; the figures of the module docstring.

    Raises
    ------
    InvalidArgumentError
        No audit arguments, no ``--engine NAME`` of an engine whose decoders are workers, or ``--url`` (before anything
        runs).
    AuditStopped
        The audit ended without a report (its exit code and the tail of its output).
    """
    from verifier.bench.time_to_verdict import _run_timed
    from verifier.engines.bridge import WORKER_MAIN

    _check_engine(audit_args)
    with tempfile.TemporaryDirectory(prefix="specverify-alone-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "verifier.cli", "audit", *audit_args, "--run-dir", str(run_dir), "--no-progress",
               "--no-diagnosis"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        t0 = time.perf_counter()
        proc, out, err, verdict_at = _run_timed(cmd, env, timeout, t0)
        audit_wall = time.perf_counter() - t0
        report = run_dir / "report.json"
        if not report.is_file():  # the audit stopped before its verdict: its own exit code and message
            raise AuditStopped(proc.returncode, (err or out).strip()[-1500:])
        rep = json.loads(report.read_text(encoding="utf-8"))
        decoder, calls = _calls(run_dir)
        python, handler, init, worker_env = decoder.launch
        decoder.close()
        spec = {"engines_dir": str(WORKER_MAIN.parent), "handler": str(handler), "init": init, "calls": calls,
                "out": str(Path(tmp) / "alone.json")}
        Path(tmp, "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        child_env = {**os.environ, **(worker_env or {})}
        child_env.pop("PYTHONPATH", None)  # the engine venv sees no harness package, as its worker
        t1 = time.perf_counter()
        done = subprocess.run([str(python), "-c", _DRIVER, str(Path(tmp, "spec.json"))], env=child_env,
                              capture_output=True, text=True, timeout=timeout)
        alone_wall = time.perf_counter() - t1
        if done.returncode != 0:
            raise invalid_argument("engine", str(python), f"an engine that runs alone: {done.stderr[-1500:]}")
        inner = json.loads(Path(tmp, "alone.json").read_text(encoding="utf-8"))
    run_info = rep.get("run", {})
    cost = next(iter((run_info.get("cost") or {}).values()), {})
    return {"audit_args": audit_args, "verdict": rep.get("verdict"), "exit_code": proc.returncode,
            "rows": inner["rows"], "audit_time_to_verdict_s": verdict_at, "audit_wall_to_exit_s": audit_wall,
            "audit_stages_s": run_info.get("stage_seconds"), "audit_generate_s": cost.get("timed_seconds"),
            "alone_wall_s": alone_wall, "alone_startup_s": inner["startup_s"], "alone_generate_s": inner["generate_s"],
            "ratio": (alone_wall / verdict_at) if verdict_at else None, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def render_markdown(r: dict[str, Any]) -> str:
    ttv = r["audit_time_to_verdict_s"]
    rows = [["audit, spawn to its verdict", f"{ttv:.1f}" if ttv else "not printed",
             f"generate calls {r['audit_generate_s']:.1f} s" if r.get("audit_generate_s") else ""],
            ["engine alone, spawn to exit", f"{r['alone_wall_s']:.1f}",
             f"start-up and model load {r['alone_startup_s']:.1f} s, generate calls {r['alone_generate_s']:.1f} s"]]
    ratio = f"**{r['ratio']:.2f}**" if r["ratio"] is not None else "?"
    return "\n".join([f"`specverify audit {' '.join(r['audit_args'])}`: {r['verdict']} (exit {r['exit_code']}), "
                      f"{r['rows']:,} rows; load average {' / '.join(map(str, r['loadavg']))}.", "",
                      md_table(["run", "seconds (wall)", "split"], rows), "",
                      f"End to end, engine alone / audit to its verdict: {ratio} (issue 27's goal: >= 0.9).", ""])


def render_repeats(results: list[dict[str, Any]]) -> str:
    """The pairs of a ``--repeat`` run, one row each in the order they ran, and the median ratio with its range."""
    summary = repeat_summary(results)
    rows = [[str(i + 1), f"{r['audit_time_to_verdict_s']:.1f}" if r["audit_time_to_verdict_s"] else "not printed",
             f"{r['audit_generate_s']:.1f}" if r.get("audit_generate_s") else "",
             f"{r['alone_wall_s']:.1f}", f"{r['alone_generate_s']:.1f}",
             f"{r['ratio']:.2f}" if r["ratio"] is not None else "?", " / ".join(map(str, r["loadavg"]))]
            for i, r in enumerate(results)]
    first = results[0]
    head = (f"`specverify audit {' '.join(first['audit_args'])}`: {first['verdict']} (exit {first['exit_code']}), "
            f"{first['rows']:,} rows; {len(results)} pairs, each the audit then the engine alone.")
    median = f"**{summary['median_ratio']:.2f}**" if summary["median_ratio"] is not None else "?"
    spread = (f" (min {summary['min_ratio']:.2f}, max {summary['max_ratio']:.2f})"
              if summary["median_ratio"] is not None else "")
    return "\n".join([head, "", md_table(["pair", "audit to its verdict (s)", "audit: generate calls (s)",
                                          "engine alone (s)", "engine alone: generate calls (s)", "ratio",
                                          "load average"], rows), "",
                      f"End to end, engine alone / audit to its verdict: median {median}{spread} over "
                      f"{summary['pairs']} pairs (issue 27's goal: >= 0.9).", ""])


def repeat_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of the pairs' ratios (None where no pair printed a verdict time)."""
    import statistics

    ratios = [r["ratio"] for r in results if r["ratio"] is not None]
    return {"pairs": len(results), "median_ratio": statistics.median(ratios) if ratios else None,
            "min_ratio": min(ratios) if ratios else None, "max_ratio": max(ratios) if ratios else None}


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("audit_args", nargs=argparse.REMAINDER, metavar="-- AUDIT ARGS",
                        help="The arguments of `specverify audit` (--engine NAME ...), after `--`; --run-dir, "
                        "--no-progress and --no-diagnosis are added.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown",
                        help="Output format (json: one object; with --repeat N > 1, {runs: [...], pairs, median_ratio, "
                        "min_ratio, max_ratio}). Default: markdown.")
    parser.add_argument("--repeat", default="1", metavar="N",
                        help="Run N pairs (the audit, then the engine alone), one after the other, and print each "
                        "pair's ratio and their median, min and max (a machine's speed drifts between runs). Default: 1.")


MAX_REPEATS = 100


def _repeats(value: Any) -> int:
    """``--repeat``: an integer 1..MAX_REPEATS, else :class:`InvalidArgumentError` naming the value (exit 2)."""
    text = str(value).strip()
    n = int(text) if re.fullmatch(r"[0-9]{1,3}", text) else 0  # ASCII digits only (int() also reads "２")
    if not 1 <= n <= MAX_REPEATS:
        raise invalid_argument("--repeat", value, f"an integer from 1 to {MAX_REPEATS}")
    return n


def run(args: argparse.Namespace) -> int:
    audit_args = list(args.audit_args)[1:] if args.audit_args and args.audit_args[0] == "--" else list(args.audit_args)
    repeat = _repeats(getattr(args, "repeat", 1))
    if "--repeat" in audit_args or any(a.startswith("--repeat=") for a in audit_args):
        raise invalid_argument("--repeat", "after --", "--repeat N before `--` (what follows `--` is the audit's own "
                               "arguments)")
    results = []
    try:
        for i in range(repeat):
            results.append(engine_alone(audit_args))
            if repeat > 1:
                print(f"pair {i + 1} of {repeat}: ratio {results[-1]['ratio']:.2f}" if results[-1]["ratio"] is not None
                      else f"pair {i + 1} of {repeat}: no verdict time", file=sys.stderr, flush=True)
    except (AuditStopped, KeyboardInterrupt) as stop:  # the audit's own message and exit code (2, 3, 130, ...)
        code = 130 if isinstance(stop, KeyboardInterrupt) else (stop.exit_code or 3)
        if results:  # the pairs that finished are figures too
            print(f"bench engine-alone: {len(results)} of {repeat} pairs finished before pair {len(results) + 1} "
                  f"stopped; their figures:", file=sys.stderr)
            print(_repeats_text(results, args.format))
        if isinstance(stop, KeyboardInterrupt):
            print("bench engine-alone: interrupted", file=sys.stderr)
        else:
            print(f"bench engine-alone: the audit ended without a verdict (exit {stop.exit_code}); its output ends "
                  f"with:\n{stop}", file=sys.stderr)
        return code
    if repeat == 1:
        print(json.dumps(results[0], indent=1) if args.format == "json" else render_markdown(results[0]))
    else:
        print(_repeats_text(results, args.format))
    return 0


def _repeats_text(results: list[dict[str, Any]], fmt: str) -> str:
    """Several pairs' figures: ``{runs, pairs, median_ratio, min_ratio, max_ratio}`` as JSON, or the markdown table."""
    return json.dumps({"runs": results, **repeat_summary(results)}, indent=1) if fmt == "json" else render_repeats(results)
