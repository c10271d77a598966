"""The shipped CI gate end to end: ``specverify run suites/ci.toml``.

Expectation per decoder (suites/ci.toml): the reference decoder PASSes and every mutant of the
decoder bug zoo that is visible end to end is DETECTED, at family-wise alpha 1e-3 per decoder
with the suite's fixed seed.  The smallest mutant effect in the suite is TV 0.07 over the first
three tokens (exact, `specverify exact`), against cell MDEs of about 0.05-0.06 TV at n = 2000, so
with this seed the outcome is a regression check, not a coin flip.  The suite also runs the
reference and the cache-rollback mutant on the shipped transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifier.cli import main

CI_SUITE = Path(__file__).resolve().parents[2] / "suites" / "ci.toml"


@pytest.mark.slow
def test_ci_suite_reference_passes_and_every_mutant_is_detected(tmp_path, capsys):
    code = main(["run", str(CI_SUITE), "--run-dir", str(tmp_path / "ci"), "--no-progress"])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "ci" / "report.json").read_text())
    assert code == 0, out
    assert report["verdict"] == "PASS" and report["exact"]["ok"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts.pop("reference") == "PASS" and verdicts.pop("reference@shipped") == "PASS"
    assert len(verdicts) >= 12 and set(verdicts.values()) == {"BIAS DETECTED"}
    assert "wall time per stage: exact" in out
