"""``specverify report RUN_DIR``: statistics, verdict and reports again from stored samples."""

from __future__ import annotations

import argparse

HELP = "Regenerate report.json/.md/.html and junit.xml of a run folder from its stored samples (no resampling)."


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="A run folder written by `specverify run`.")
    parser.add_argument("--out", metavar="DIR", default=None, help="Write the reports here instead of RUN_DIR. Default: RUN_DIR.")


def run(args: argparse.Namespace) -> int:
    from verifier.runner import analyze_run

    outcome = analyze_run(args.run_dir, out_dir=args.out)
    report = outcome.report
    for d in report["decoders"]:
        mark = "ok" if d["expectation_met"] else f"EXPECTED {d['expect'].upper()}"
        print(f"  {d['decoder']:<28} expect {d['expect']:<6} -> {d['verdict']:<14} [{mark}]")
    print(f"verdict: {report['verdict']} (exit {outcome.exit_code})")
    print(f"reports: {outcome.run_dir}/report.html, report.md, report.json, junit.xml")
    return outcome.exit_code
