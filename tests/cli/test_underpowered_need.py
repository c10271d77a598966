"""The UNDERPOWERED line of `specverify audit` names the n that every TV cell needs, also a cell the plan sized too small.

The figures are those of the transformers 5.25.0 Gemma4-assistant control as session 23 ran it (its folder now holds
the 83,405-row rerun, PASS): the plan put joint@1..3 at 866 rows and the audit at 28,099 (the gof cells), but the joint
cell as run saw only TV >= 0.037 there and needed 83,405.  The line used to say "n needed: 28099 ... rerun with
--num-samples 28099", a rerun that would be UNDERPOWERED again.  (The plan itself now sizes that cell at the n it needs
at the common n: tests/stats/test_power.py; a cell can still fall short as run, e.g. with fewer rows per prompt.)
"""

from __future__ import annotations

import types

PLAN = {"n_needed": 28099, "num_samples": 28099, "target_tv": 0.03, "joint_tokens": 3,
        "needed": {"p0/gof@1": 27947, "p0/gof@2": 28099, "p0/gof@3": 28099, "p0/joint@1..3": 866}}
REPORT = {"verdict": "UNDERPOWERED", "suite": {"stats": {"alpha": 0.001}}, "decoders": [{"verdict": "UNDERPOWERED"}],
          "cells": [{"id": f"decoder/p0/s/k=3/gof@{t}", "verdict": "PASS", "effect_unit": "tv"} for t in (1, 2, 3)]
          + [{"id": "decoder/p0/s/k=3/joint@1..3", "verdict": "UNDERPOWERED", "effect_unit": "tv", "n_needed": 83405}]}


def test_the_line_takes_the_cells_own_n_needed(monkeypatch, capsys):
    import verifier.cli._summary as summary
    from verifier.cli._audit_known_p import _print_summary

    monkeypatch.setattr(summary, "print_outcome", lambda *a, **k: None)
    _print_summary(types.SimpleNamespace(report=REPORT, outcome=None, sequential=None), PLAN)
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("UNDERPOWERED:")][0]
    assert "n needed: 83405 (p0/joint@1..3 83405" in line and line.endswith("--num-samples 83405"), line
