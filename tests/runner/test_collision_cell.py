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

from verifier.cli import main
from verifier.errors import EXIT_OK
from verifier.exact import standard_tabular_pairs
from verifier.exact.laws import target_law
from verifier.stats.collisions import collision_test

SUITE = Path(__file__).parent / "suites" / "collision.toml"


def test_collision_cell_passes_independent_rows_and_catches_a_shared_stream(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
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
