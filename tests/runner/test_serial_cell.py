"""The serial cell ``serial@1`` and the independence cells on the randomness zoo (issue 29, bug kind 2).

Suite ``suites/independence.toml``: bigram4_eos target, T = 1, 800 rows per set in calls of 200, seed 11, tests gof@1,
collision@1..3, serial@1, family-wise alpha 1e-3 (gate: per-cell level 1.7e-4).  Its false-fail rate for the exact
reference decoder is <= 1e-3.  What each mutant does to the cells (``verifier.decoders.stream_mutants``):

* ``shared_stream`` (rows 2i, 2i + 1 identical): 400 of 400 pairs identical where ~31 are expected -> collision
  p < 1e-100; the first-token PITs of a pair share their interval -> lag-1 autocorrelation ~ +0.4, far above the
  serial cell's MDE (0.25 at n = 800).  gof@1's statistic doubles in law (rejects with probability 0.019 at this
  level: for seed 11 it does not).
* ``serial_stream`` (row r + 1 = row r shifted by the golden step): lag-1 autocorrelation ~ -0.35 of the first-token
  PITs -> serial rejects; pairs repeat less often than chance, so collision cannot see it; gof@1's counts are
  closer to expected than multinomial ones (p ~ 1).

Calibration of the cell itself (numpy only, no decoder): 200 seeded sets of 300 iid first tokens from the bigram
row (0.1, 0.5, 0.2, 0.2) through ``analysis.serial_cell`` at cell alpha 0.05 reject at most 21 times (the 0.999
quantile of Binomial(200, 0.05)).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy import stats

from verifier.cli import main
from verifier.errors import EXIT_OK
from verifier.runner import analysis
from verifier.suite.schema import DEFAULT_TESTS, TEST_NAMES

SUITE = Path(__file__).parent / "suites" / "independence.toml"


def test_independence_cells_pass_the_reference_and_catch_both_stream_mutants(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", str(SUITE), "--run-dir", str(run_dir), "--no-progress"])
    report = json.loads((run_dir / "report.json").read_text())
    assert code == EXIT_OK, report["summary"]
    verdicts = {d["decoder"]: d["verdict"] for d in report["decoders"]}
    assert verdicts == {"reference": "PASS", "shared_stream": "BIAS DETECTED", "serial_stream": "BIAS DETECTED"}
    cells = {(c["decoder"], c["test"]): c for c in report["cells"]}
    assert {t for (d, t) in cells if d == "reference"} == {"gof@1", "collision@1..3", "serial@1"}
    assert cells[("reference", "serial@1")]["verdict"] == "PASS"
    shared, serial = cells[("shared_stream", "collision@1..3")], cells[("serial_stream", "serial@1")]
    assert shared["verdict"] == "BIAS" and shared["statistic"] == 400
    assert cells[("shared_stream", "serial@1")]["verdict"] == "BIAS" and cells[("shared_stream", "serial@1")]["effect"] > 0.3
    assert serial["verdict"] == "BIAS" and serial["effect"] < -0.25 and serial["effect_unit"] == "autocorrelation"
    assert "Ljung-Box" in serial["method"] and serial["mde"] < 0.26
    assert cells[("serial_stream", "collision@1..3")]["verdict"] == "PASS"
    for name in ("shared_stream", "serial_stream"):  # gof@1 alone does not see either
        assert cells[(name, "gof@1")]["verdict"] == "PASS"
    diagnosis = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}
    for name in ("shared_stream", "serial_stream"):
        assert diagnosis[name]["status"] == "rows not independent"
        assert diagnosis[name]["sentence"].startswith("rows are not independent: shared or correlated randomness")
    assert "rows are not independent" in (run_dir / "report.md").read_text()


def test_serial_cell_false_positive_rate_is_at_most_alpha():
    """Seeds 0..199 (``default_rng([301, s])``), 300 iid rows each, cell alpha 0.05: <= 21 rejections."""
    law = np.array([0.1, 0.5, 0.2, 0.2, 0.0])  # the bigram row of token 0, + "ended" (never at position 1)
    rejected = 0
    for s in range(200):
        rng = np.random.default_rng([301, s])
        first = rng.choice(5, size=300, p=law)
        cell = analysis.serial_cell("c", first, law, rng=rng, cell_alpha=0.05, power=0.99, decoder="d", set_id="s")
        rejected += cell.pvalue <= 0.05
    assert rejected <= stats.binom.ppf(0.999, 200, 0.05), rejected


def test_serial_cell_states_a_support_violation_and_too_few_rows():
    law = np.array([0.5, 0.5, 0.0])
    rng = np.random.default_rng(0)
    bad = analysis.serial_cell("c", np.array([0, 1] * 20 + [2]), law, rng=rng, cell_alpha=0.01, power=0.99,
                               decoder="d", set_id="s")
    assert bad.pvalue == 0.0 and "target prob 0" in bad.support_violation
    few = analysis.serial_cell("c", np.array([0, 1, 1]), law, rng=rng, cell_alpha=0.01, power=0.99, decoder="d", set_id="s")
    assert few.pvalue == 1.0 and "not tested" in few.method


def test_collision_and_serial_are_opt_in():
    assert {"collision", "serial"} <= set(TEST_NAMES) and not {"collision", "serial"} & set(DEFAULT_TESTS)
