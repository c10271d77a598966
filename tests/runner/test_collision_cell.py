"""The collision cell ``collision@1..J`` (issue 25's duplicate test, issue 29's shared randomness): identical
disjoint row pairs against the exact collision probability.

Suite ``suites/collision.toml``: bigram4_eos target, T = 1, J = 3 tokens, 800 rows (400 pairs) per set,
seed 11, family-wise alpha 1e-3 (gate).  The exact sampler's false-fail rate is <= 1e-3.  The shared-stream
sampler repeats row ``2i`` as row ``2i + 1``: every pair is identical (400 of 400) where the exact law
expects about 400 * sum_x P(x)^2 (computed below from the Fraction enumeration), so its cell rejects with
p far below 1e-100 -- while every marginal and joint cell has the target's law and must not reject.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_OK
from verifier.exact import standard_tabular_pairs
from verifier.exact.laws import target_law
from verifier.stats.collisions import collision_test

SUITE = Path(__file__).parent / "suites" / "collision.toml"


@pytest.fixture(scope="module")
def collision_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("collision") / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    return code, run_dir, json.loads((run_dir / "report.json").read_text())


def test_collision_cell_passes_independent_rows_and_catches_a_shared_stream(collision_run):
    code, _run_dir, report = collision_run
    assert code == EXIT_OK, report["summary"]  # both expectations met
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"exact-sampler": "PASS", "shared-stream-sampler": "BIAS DETECTED"}
    cells = {c["id"]: c for c in report["cells"]}
    law = target_law(standard_tabular_pairs()["bigram4_eos"].target, (0,), 3)
    exact = float(sum(p * p for p in law.values()))
    for name in ("exact-sampler", "shared-stream-sampler"):
        cell = cells[f"{name}/zero/t1/k=1/collision@1..3"]
        assert abs(cell["extra"]["collision_prob"] - exact) < 1e-12 and cell["n"] == 400
    bad = cells["shared-stream-sampler/zero/t1/k=1/collision@1..3"]
    assert bad["verdict"] == "BIAS" and bad["statistic"] == 400 and bad["pvalue"] < 1e-100
    # the marginal law is the target's: gof@1 does not see the defect (duplicated rows only inflate its variance)
    assert cells["shared-stream-sampler/zero/t1/k=1/gof@1"]["verdict"] == "PASS"
    good = cells["exact-sampler/zero/t1/k=1/collision@1..3"]
    assert good["verdict"] == "PASS" and good["statistic"] < 400 * exact + 6 * (400 * exact) ** 0.5


def test_collision_test_p_value_is_exact_on_a_small_case():
    """Poisson-binomial tail against the enumeration: 3 pairs at P(x) = 1/2, 1/4, 1/8; two identical."""
    res = collision_test([0.5, 0.25, 0.125], [True, True, False], alpha=0.05)
    exact = 0.5 * 0.25 * 0.875 + 0.5 * 0.75 * 0.125 + 0.5 * 0.25 * 0.125 + 0.5 * 0.25 * 0.125  # >= 2 of 3
    exact = 0.5 * 0.25 + 0.5 * 0.125 + 0.25 * 0.125 - 2 * 0.5 * 0.25 * 0.125  # P(S >= 2) by inclusion-exclusion
    assert abs(res.pvalue - exact) < 1e-12 and res.statistic == 2


def test_collision_findings_in_the_reports_and_the_diagnosis(collision_run):
    """report.md shows a dash where a collision cell has no interval (was "[, ]"), the legend says what the cell
    tests, and the diagnosis of a decoder whose only rejected cell is a collision cell says what that finding means
    -- rows repeat more often than independent sampling allows -- instead of ranking laws of one row (or, with the
    draft unknown, advising a --draft that could not explain it either)."""
    _code, run_dir, report = collision_run
    md = (run_dir / "report.md").read_text()
    assert "[, ]" not in md
    row = next(line for line in md.splitlines() if line.startswith("| shared-stream-sampler/zero/t1/k=1/collision@1..3 |"))
    assert " collision — |" in row
    assert "`collision@1..J` = identical disjoint pairs of rows" in md
    (item,) = [d for d in report["diagnosis"]["decoders"] if d["decoder"] == "shared-stream-sampler"]
    assert item["status"] == "rows not independent" and item["sentence"].startswith("rows are not independent")
    assert "--draft" not in item["sentence"] and "shared or correlated randomness across requests" in item["sentence"]


def test_pooled_collision_cell_states_the_pooled_collision_probability(tmp_path, monkeypatch):
    """With the 3-token law pooled (top 20 outcomes + "other"; 125 dense categories) the method said "collision prob
    nan"; now it states the pooled law's collision probability as the upper bound it is (>= the exact one)."""
    from verifier.runner import expected

    monkeypatch.setattr(expected, "MAX_JOINT_CATEGORIES", 20)
    run_dir = tmp_path / "run"
    main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress", "--no-diagnosis"])
    cell = next(c for c in json.loads((run_dir / "report.json").read_text())["cells"]
                if c["id"] == "exact-sampler/zero/t1/k=1/collision@1..3")
    law = target_law(standard_tabular_pairs()["bigram4_eos"].target, (0,), 3)
    exact = float(sum(p * p for p in law.values()))
    assert "nan" not in cell["method"] and "against the pooled law (collision prob <= " in cell["method"]
    assert cell["extra"]["collision_prob_bound"] is True and cell["extra"]["collision_prob"] >= exact


def _cell(test, unit, mde, n=400, pvalue=0.5):
    from verifier.runner.analysis import CellResult

    return CellResult(f"d/s/{test}", decoder="d", set_id="s", test=test, method="m", n=n, statistic=1.0, pvalue=pvalue,
                      effect=0.0, effect_unit=unit, mde=mde)


def test_a_collision_cell_that_detects_nothing_is_underpowered_never_pass():
    """``collision_mde`` is 1 when not even every pair identical would reject at the cell's level (too few pairs for
    the law's collision probability): that cell cannot detect anything, so it is UNDERPOWERED, as a TV cell above
    target_mde is -- no statistic, level or MDE changed.  Before the fix it was labelled PASS."""
    from verifier.reports.summary import decoder_line
    from verifier.runner.verdict import decide

    blind = _cell("collision@1..3", "collision", 1.0, n=3)
    v = decide("d", "pass", [_cell("gof@1", "tv", 0.05, 3000), blind], alpha=1e-3, correction="gate", target_mde=0.1)
    assert blind.verdict == "UNDERPOWERED" and v.verdict == "UNDERPOWERED"
    assert v.reason == ("1 of 2 cells underpowered; cell d/s/collision@1..3 detects nothing at n = 3 pairs: not even "
                        "every pair identical would reject at its level (more rows lower its critical count)")
    line = decoder_line({"verdict": "UNDERPOWERED", "reason": v.reason}, [c.to_dict() for c in v.cells], {}, 1e-3, 0.1)
    assert line == ("underpowered: collision cell (identical pairs of the first 3 tokens) detects nothing with n = 3 "
                    "pairs (not even every pair identical would reject)")
    seeing = _cell("collision@1..3", "collision", 0.3)
    v = decide("d", "pass", [_cell("gof@1", "tv", 0.05, 3000), seeing], alpha=1e-3, correction="gate", target_mde=0.1)
    assert seeing.verdict == "PASS" and v.verdict == "PASS"


def test_no_tv_cell_reason_names_the_cells_that_ran():
    """Without a TV cell the UNDERPOWERED reason said "(PIT/surprisal only)" also when a collision cell ran."""
    from verifier.runner.coverage import NO_TV_CELL_REASON
    from verifier.runner.verdict import decide

    v = decide("d", "pass", [_cell("pit", "ks", 0.02, 18000), _cell("collision@1..3", "collision", 0.2)], alpha=1e-3,
               correction="gate", target_mde=0.1)
    assert v.verdict == "UNDERPOWERED" and v.reason == ("no cell states a TV minimum detectable effect (PIT/collision "
                                                        "only): add gof/joint cells")
    v = decide("d", "pass", [_cell("pit", "ks", 0.02, 18000)], alpha=1e-3, correction="gate", target_mde=0.1)
    assert v.reason == NO_TV_CELL_REASON


def test_audit_plan_lists_the_collision_cell():
    """The console's "cells per prompt" line of a URL audit (tests = URL_TESTS) omitted collision@1..J."""
    from verifier.audit.suite_builder import AuditSpec, plan_audit
    from verifier.cli._audit_url import URL_TESTS

    spec = AuditSpec(decoder="reference", target="tabular:trigram3", num_draft_tokens=2, num_samples=100)
    assert plan_audit(spec).describe().startswith("cells per prompt: gof@1, gof@2, gof@3, joint@1..3, surprisal@1..3, "
                                                  "pit (and the acceptance audit beside the verdict); ")
    line = plan_audit(AuditSpec(**{**spec.__dict__, "tests": URL_TESTS})).describe()
    assert line.startswith("cells per prompt: gof@1, gof@2, gof@3, joint@1..3, surprisal@1..3, collision@1..3, pit (and ")
