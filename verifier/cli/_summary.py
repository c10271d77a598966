"""The verdict summary that ``specverify run``, ``report`` and ``merge`` print at the end."""

from __future__ import annotations

from typing import Any


def print_outcome(outcome: Any) -> None:
    """Print one line per decoder, the exact stage, where decoders stopped, the verdict and the report paths.

    ``outcome`` is a runner outcome: ``.report`` (the report.json dict), ``.exit_code``, ``.run_dir``.
    """
    report = outcome.report
    for d in report["decoders"]:
        mark = "ok" if d["expectation_met"] else f"EXPECTED {d['expect'].upper()}"
        print(f"  {d['decoder']:<28} expect {d['expect']:<6} -> {d['verdict']:<14} [{mark}] {d['reason']}")
    exact = report.get("exact", {})
    if exact.get("ran"):
        verdict = "every rule as declared" if exact["ok"] else f"WRONG: {', '.join(exact['wrong_rules'])}"
        print(f"  exact stage: {len(exact['findings'])} findings, {verdict}")
    for e in report.get("stopped", []):
        print(f"  {e['decoder']} stopped at {e['set']}, chunk {e['chunk']}: {e['message']}")
    print(f"verdict: {report['verdict']} (exit {outcome.exit_code})")
    print(f"reports: {outcome.run_dir}/report.html, report.md, report.json, junit.xml")
