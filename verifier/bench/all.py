"""``specverify bench all --out reports/benchmarks.md``: every benchmark of issue 7 in one run, one report.

Runs, in this order and in one process (the timed subprocesses of ``throughput`` and
``time-to-verdict`` are started from it): samples to detect (rule level and decoder level),
throughput, time to verdict, calibration; then the other engineers' ``specverify bench stats`` and
``specverify bench decoders`` (when present) as subprocesses, their output appended verbatim.  The
markdown states the method, the command that reruns each part, the numbers, the machine facts and
the load average before and after (the machines are shared: figures measured under load say so).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from verifier.bench import calibration, coverage, detect, throughput, time_to_verdict
from verifier.bench._common import load_average, machine_facts

__all__ = ["HELP", "run_all", "register", "run"]

HELP = "Run every benchmark (detect, throughput, time to verdict, calibration, GPU) in one run and write the markdown report (--out reports/benchmarks.md)."
DEFAULT_OUT = "reports/benchmarks.md"
OTHER_BENCHES = (("stats", ["--samples", "100000"]), ("decoders", ["--repeats", "2"]))  # other engineers' benchmarks, run as they ship


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _other_bench(name: str, args: list[str], timeout: float) -> dict[str, Any] | None:
    if not (Path(__file__).with_name(f"{name}.py")).is_file():
        return None
    cmd = [sys.executable, "-m", "verifier.cli", "bench", name, *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, code = proc.stdout, proc.returncode
        if code != 0:
            out += "\n" + proc.stderr[-1500:]
    except subprocess.TimeoutExpired:
        out, code = f"(timed out after {timeout:.0f} s)", None
    return {"command": "specverify bench " + " ".join([name, *args]), "output": out.strip(), "exit": code,
            "seconds": time.perf_counter() - t0}


def run_all(*, seeds: int = detect.DEFAULT_SEEDS, calibration_runs: int = 10_000, suite: str = "suites/ci.toml",
            throughput_samples: int = 1024, hf_samples: int = 64, repeats: int = 3, other_timeout: float = 600.0,
            skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the benchmarks; returns every figure (``render`` turns it into the markdown)."""
    res: dict[str, Any] = {"started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           "load_before": load_average(), "machine": machine_facts(), "seconds": {}}
    t = time.perf_counter()
    if "detect" not in skip:
        _log("== samples to detect (rule level)")
        res["detect_rules"] = detect.detect_rows(seeds=seeds, progress=_log)
        _log("== samples to detect (decoder level)")
        res["detect_decoders"], res["detect_skipped"] = detect.detect_decoder_rows(suite, seeds=seeds, progress=_log)
        res["seconds"]["detect"] = time.perf_counter() - t
    if "throughput" not in skip:
        t = time.perf_counter()
        _log("== throughput")
        res["throughput"] = throughput.throughput(num_samples=throughput_samples, hf_samples=hf_samples, repeats=repeats,
                                                  progress=_log)
        res["seconds"]["throughput"] = time.perf_counter() - t
    if "verdict" not in skip:
        t = time.perf_counter()
        _log("== time to verdict")
        res["verdict"] = time_to_verdict.time_suite(suite)
        res["seconds"]["verdict"] = time.perf_counter() - t
    if "calibration" not in skip:
        t = time.perf_counter()
        _log("== calibration")
        res["calibration"] = calibration.calibrate(suite, runs=calibration_runs)
        res["seconds"]["calibration"] = time.perf_counter() - t
    if "coverage" not in skip:
        t = time.perf_counter()
        _log("== effect interval coverage")
        res["coverage"] = coverage.run_coverage()
        res["seconds"]["coverage"] = time.perf_counter() - t
    res["others"] = {}
    for name, args in OTHER_BENCHES:
        if name in skip:
            continue
        _log(f"== specverify bench {name}")
        out = _other_bench(name, args, other_timeout)
        if out is not None:
            res["others"][name] = out
    res["load_after"] = load_average()
    res["finished"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return res


def _load_note(res: dict[str, Any]) -> str:
    cores = res["machine"].get("usable_cores") or res["machine"].get("logical_cores") or 1
    before, after = res.get("load_before"), res.get("load_after")
    if not before:
        return "load average unavailable"
    text = f"1-min load average {before[0]:.1f} before, {after[0]:.1f} after, on {cores} usable cores"
    if max(before[0], after[0] if after else 0) > 0.5 * cores:
        text += (" -- **measured under load**: other work shared the CPUs, so absolute times are pessimistic; "
                 "ratios were measured in the same run (alternating) to cancel most of it")
    return text


def render(res: dict[str, Any], command: str) -> str:
    m = res["machine"]
    out = [
        "# Benchmarks (issue 7)", "",
        f"Generated by `{command}` ({res['started']} -> {res['finished']}); regenerate with the same command. "
        "Each section names the command that reruns it alone.", "",
        f"Machine: {m.get('cpu')}, {m.get('usable_cores', m.get('logical_cores'))} usable cores, "
        f"{m.get('memory_gib', '?')} GiB RAM, Python {m.get('python')}, torch {m.get('torch')} "
        f"({m.get('torch_threads')} threads), transformers {m.get('transformers')}, numpy {m.get('numpy')}, "
        f"scipy {m.get('scipy')}; git {m.get('git_commit')}; CUDA: {'yes, ' + m.get('gpu', '') if m.get('cuda') else 'no'}. "
        f"{_load_note(res)}.", "",
    ]
    out += ["## Summary", ""] + _summary(res) + [""]
    if "detect_rules" in res:
        doc = detect.__doc__.split("Method.", 1)[1].strip()
        out += ["## 1. Samples to detect vs the Neyman-Pearson oracle", "",
                "Command: `specverify bench detect` (rule level; `--rule/--case` to select).", "",
                "Method. " + doc, "",
                "### Rule level (verifier.exact.RULES on the standard cases)", "", detect.render_markdown(res["detect_rules"])]
        out += ["### Decoder level (the ci suite's `detect` decoders on its tabular sample sets, exact laws)", "",
                "Battery `suite` = the suite's own cells for that decoder (gof@1..3, joint@1..3, pit; the `accepted` "
                "cell is left out because the oracle only sees emitted tokens), family-wise alpha 0.01 per sample set.", "",
                detect.render_markdown(res["detect_decoders"])]
        if res.get("detect_skipped"):
            out += ["Not simulated (no exact law here; `specverify bench time-to-verdict` below shows whether the suite "
                    "detects them end to end):", ""]
            out += [f"- `{d}` on {s}: {why}" for d, s, why in res["detect_skipped"]] + [""]
    if "throughput" in res:
        out += ["## 2. Throughput", "", "Command: `specverify bench throughput`.", "",
                throughput.__doc__.split("\n\n", 1)[1].strip(), "", throughput.render_markdown(res["throughput"])]
    if "verdict" in res:
        out += ["## 3. Time to verdict", "", "Command: `specverify bench time-to-verdict` (wraps `specverify run suites/ci.toml`).", "",
                "Method. " + time_to_verdict.__doc__.split("Method.", 1)[1].strip(), "",
                time_to_verdict.render_markdown(res["verdict"])]
    if "calibration" in res:
        runs = res["calibration"][0].runs if res["calibration"] else 0
        out += ["## 4. Calibration (false alarms under the null)", "",
                f"Command: `specverify bench calibration --runs {runs}`.", "",
                "Method. " + calibration.__doc__.split("Method.", 1)[1].strip(), "",
                calibration.render_markdown(res["calibration"])]
    out += ["## 5. GPU", "", "No GPU was lent to this task (the device tool reported none), so there are no GPU figures. "
            "The prepared script `specverify bench gpu` (verifier/bench/gpu.py) runs the `bench scale` grid (V = 384..256k, "
            "n = 2k..100k, cheapest first, within a 420 s budget) on cuda/bf16, then times plain and speculative decoding "
            "with random-init Llama models (target ~100M, draft ~10M parameters) at batch "
            "1, 4, 16, 64, 256, 1024, 4096, with peak CUDA memory; without CUDA it exits 2 and runs nothing "
            "(`--device cpu`: a dry run of the same path, tested).", ""]
    if res.get("coverage"):
        out += coverage_section(res["coverage"])
    if res.get("others"):
        out += ["## Appendix: other engineers' benchmarks, same run", ""]
        for name, o in res["others"].items():
            out += [f"`{o['command']}` (exit {o['exit']}, {o['seconds']:.0f} s):", "", "```", o["output"][-6000:], "```", ""]
    secs = res.get("seconds", {})
    if secs:
        out += ["Wall time of this report per part: " + ", ".join(f"{k} {v:.0f} s" for k, v in secs.items()) + ".", ""]
    return "\n".join(out)


def coverage_section(rows: list) -> list[str]:
    """Section 6 of reports/benchmarks.md: coverage of the TV effect interval (``specverify bench coverage``)."""
    return ["## 6. Effect-size interval coverage", "",
            f"Command: `specverify bench coverage` ({rows[0].replicates} replicates per row).", "",
            "Method. " + coverage.__doc__.split("Method.", 1)[1].strip(), "",
            "The interval (verifier/stats/effect.py): " + coverage.INTERVAL_NOTE, "",
            coverage.render_markdown(rows), ""]


def _summary(res: dict[str, Any]) -> list[str]:
    """Key figures, one bullet per benchmark (the sections below have the detail)."""
    import statistics

    lines = []
    for key, what in (("detect_rules", "rule level"), ("detect_decoders", "decoder level (ci suite)")):
        rows = res.get(key) or []
        for battery in dict.fromkeys(r.battery for r in rows):
            summ = detect.per_mutant_summary(rows, battery)
            ok = [s["rule"] for s in summ if s["meets_goal_everywhere"]]
            ratios = [r.fixed_ratio for r in rows if r.battery == battery]
            lines.append(f"- Samples to detect, {what}, `{battery}` battery: {len(ok)} of {len(summ)} mutants at fixed-n "
                         f"median <= {detect.GOAL_RATIO}x the Neyman-Pearson oracle on every case; median ratio over "
                         f"{len(ratios)} (mutant, case) pairs {statistics.median(ratios):.2f}x; over the goal: "
                         + (", ".join(s["rule"] for s in summ if not s["meets_goal_everywhere"]) or "none") + ".")
    tp = res.get("throughput", {}).get("ratios", {})
    if tp:
        med = res["throughput"]["median"]
        lines.append("- Throughput (shipped models, CPU): " + ", ".join(f"{k} {v['samples_per_s']:.1f} samples/s"
                     for k, v in med.items()) + "; speculative / plain "
                     + (f"{tp['speculative_vs_plain']:.2f}x (goal {throughput.GOAL_VS_PLAIN}x)" if "speculative_vs_plain" in tp else "n/a")
                     + ", speculative / HF assisted "
                     + (f"{tp['speculative_vs_hf_assisted']:.1f}x (goal {throughput.GOAL_VS_HF:.0f}x)" if "speculative_vs_hf_assisted" in tp else "n/a")
                     + ".")
    v = res.get("verdict")
    if v is not None:
        lines.append(f"- Time to verdict: `specverify run {v.suite}` {v.wall_seconds:.1f} s wall (goal <= "
                     f"{time_to_verdict.GOAL_SECONDS:.0f} s), exit {v.exit_code}, every expectation met: "
                     f"{'yes' if v.all_expectations_met else 'no'} ({len(v.decoders)} decoders).")
    for c in res.get("calibration", []):
        lines.append(f"- Calibration, `{c.decoder}`: {c.false_alarms} false alarms in {c.runs} null runs = {c.rate:.1e} "
                     f"(95% CI {c.ci_low:.1e}-{c.ci_high:.1e}) vs suite alpha {c.alpha:g}.")
    lines.append("- GPU: none lent to this task; `specverify bench gpu` is prepared (exits 2 without CUDA).")
    return lines


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_json"):
        return o.to_json()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="PATH", help=f"Markdown report. Default: {DEFAULT_OUT}.")
    parser.add_argument("--json", default=None, metavar="PATH", help="Also write every figure as JSON. Default: none.")
    parser.add_argument("--seeds", type=int, default=detect.DEFAULT_SEEDS, metavar="N",
                        help=f"Seeds per (mutant, case) in the detection benchmark. Default: {detect.DEFAULT_SEEDS}.")
    parser.add_argument("--calibration-runs", type=int, default=10_000, metavar="N", help="Null runs. Default: 10000.")
    parser.add_argument("--suite", default="suites/ci.toml", metavar="PATH", help="Suite. Default: suites/ci.toml.")
    parser.add_argument("--throughput-samples", type=int, default=1024, metavar="N", help="Batched samples per call. Default: 1024.")
    parser.add_argument("--hf-samples", type=int, default=64, metavar="N", help="HF assisted samples. Default: 64.")
    parser.add_argument("--skip", action="append", default=[], metavar="PART",
                        choices=("detect", "throughput", "verdict", "calibration", "coverage", "stats", "decoders"),
                        help="Leave a part out (repeatable).")


def run(args: argparse.Namespace) -> int:
    res = run_all(seeds=args.seeds, calibration_runs=args.calibration_runs, suite=args.suite,
                  throughput_samples=args.throughput_samples, hf_samples=args.hf_samples, skip=tuple(args.skip))
    command = "specverify bench all --out " + args.out + "".join(f" --skip {s}" for s in args.skip)
    text = render(res, command)
    from verifier.bench._common import write_out

    write_out(args.out, text, make_folder=True)
    if args.json:
        write_out(args.json, json.dumps(res, default=_json_default, indent=1), "--json", make_folder=True)
    print(text)
    _log(f"wrote {args.out}")
    return 0
