"""PASS never claims what no cell tested (breakit items 4 and 5).

* A decoder whose cells are PIT / surprisal only (no TV-scale cell) is UNDERPOWERED, however many
  rows: no cell states a total variation it can see.
* A PASS reason names its coverage: the positions with a gof cell, the joint law's J, and the later
  positions covered only by randomized PIT (with its KS MDE).
"""

import json

from verifier.cli import main
from verifier.runner.analysis import CellResult
from verifier.runner.coverage import NO_TV_CELL_REASON
from verifier.runner.verdict import decide

from .conftest import EXACT_DECODER, suite_text


def _cell(test, unit="tv", mde=0.05, n=3000):
    return CellResult(f"d/s/{test}", decoder="d", set_id="s", test=test, method="m", n=n, statistic=1.0, pvalue=0.5,
                      effect=0.0, effect_unit=unit, mde=mde)


def test_pit_and_surprisal_only_is_underpowered_never_pass():
    v = decide("d", "pass", [_cell("pit", "ks", 0.02, 18000), _cell("surprisal@1..2", "nats", 0.05)], alpha=1e-3,
               correction="gate", target_mde=0.1, max_new_tokens=6)
    assert (v.verdict, v.reason, v.expectation_met) == ("UNDERPOWERED", NO_TV_CELL_REASON, False)


def test_pass_reason_names_the_positions_each_kind_of_cell_covered():
    cells = [_cell("gof@1"), _cell("gof@2"), _cell("joint@1..2"), _cell("pit", "ks", 0.04, 18000)]
    v = decide("d", "pass", cells, alpha=1e-3, correction="gate", target_mde=0.1, max_new_tokens=6)
    assert v.verdict == "PASS"
    assert ("no bias >= TV 0.1 in tokens 1-2 and the joint law of tokens 1..2; tokens 3-6 checked only by randomized "
            "PIT (KS MDE 0.04)") in v.reason
    v = decide("d", "pass", cells[:3], alpha=1e-3, correction="gate", target_mde=0.1, max_new_tokens=6)
    assert v.reason.endswith("tokens 3-6 not tested")
    v = decide("d", "pass", [_cell("gof@1"), _cell("gof@2"), _cell("gof@3")], alpha=1e-3, correction="gate", target_mde=0.1,
               max_new_tokens=3)
    assert v.reason.endswith("no bias >= TV 0.1 in tokens 1-3")


def test_run_with_pit_only_cells_exits_4(write_suite, tmp_path):
    """An exact sampler, 5 samples, tests = ["pit"]: before the fix PASS, exit 0 (PIT at n = 15, KS MDE 1)."""
    text = suite_text(EXACT_DECODER, defaults="").replace('samples = 600', 'samples = 5').replace(
        'tests = ["gof", "joint", "pit"]', 'tests = ["pit"]')
    run_dir = tmp_path / "run"
    assert main(["run", str(write_suite(text)), "--run-dir", str(run_dir), "--no-progress"]) == 4
    (d,) = json.loads((run_dir / "report.json").read_text())["decoders"]
    assert d["verdict"] == "UNDERPOWERED" and d["reason"] == NO_TV_CELL_REASON


def test_underpowered_advice_names_the_commands_flag():
    """The rows needed are named; how to get them depends on the command: a suite's `samples` by default,
    ``--num-samples`` inside :func:`more_rows_advice` (set by `specverify audit` and the URL audits)."""
    from verifier.runner.verdict import MORE_ROWS, more_rows_advice

    weak = _cell("gof@1", mde=0.2, n=300)
    weak.n_needed = 5278
    v = decide("d", "pass", [weak], alpha=1e-3, correction="gate", target_mde=0.05)
    assert v.verdict == "UNDERPOWERED" and v.reason.endswith("(cell d/s/gof@1, now 300): " + MORE_ROWS)
    with more_rows_advice("rerun with --num-samples {n}"):
        v = decide("d", "pass", [weak], alpha=1e-3, correction="gate", target_mde=0.05)
    assert v.reason.endswith("now 300): rerun with --num-samples 5278") and "`samples`" not in v.reason
    assert decide("d", "pass", [weak], alpha=1e-3, correction="gate", target_mde=0.05).reason.endswith(MORE_ROWS)
