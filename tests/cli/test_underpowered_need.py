"""The UNDERPOWERED line of `specverify audit` names the n that every TV cell needs, also a cell the plan sized too small.

The committed Gemma4-assistant control (reports/audits/transformers-5.25.0/certificate-gemma4-assistant-T1-k3-control-
greedy-q, transformers 5.25.0): the plan put joint@1..3 at 866 rows and the audit at 28,099 (the gof cells), but the
joint cell as run sees only TV >= 0.037 there and needs 83,405 rows (the plan's estimate is wrong for this cell).  The line used to say "n needed:
28099 ... rerun with --num-samples 28099", a rerun that would be UNDERPOWERED again.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "reports/audits/transformers-5.25.0/certificate-gemma4-assistant-T1-k3-control-greedy-q"


def test_the_line_takes_the_cells_own_n_needed(monkeypatch, capsys):
    import verifier.cli._summary as summary
    from verifier.cli._audit_known_p import _print_summary

    monkeypatch.setattr(summary, "print_outcome", lambda *a, **k: None)
    report = json.loads((FOLDER / "report.json").read_text())
    plan = json.loads((FOLDER / "audit.json").read_text())
    assert plan["n_needed"] == plan["num_samples"] == 28099 and report["decoders"][0]["verdict"] == "UNDERPOWERED"
    _print_summary(types.SimpleNamespace(report=report, outcome=None, sequential=None), plan)
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("UNDERPOWERED:")][0]
    assert "n needed: 83405 (p0/joint@1..3 83405" in line and line.endswith("--num-samples 83405"), line
