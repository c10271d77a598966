"""The independence finding (``verifier.diagnose.independence``): when only the cells that look across rows reject,
the diagnosis says the rows are not independent instead of ranking per-row mechanisms (end to end on the randomness
zoo: tests/runner/test_serial_cell.py)."""

from __future__ import annotations

from verifier.diagnose.independence import FINDING, independence_finding


def _cell(decoder, test, verdict, **extra):
    return {"decoder": decoder, "id": f"{decoder}/{test}", "test": test, "verdict": verdict, **extra}


def test_finding_when_only_across_row_cells_reject():
    cells = [_cell("d", "gof@1", "PASS"), _cell("d", "pit", "PASS"),
             _cell("d", "collision@1..3", "BIAS", n=400, statistic=400.0, extra={"identical_pairs": 400, "expected": 31.3}),
             _cell("other", "gof@1", "BIAS")]
    f = independence_finding("d", cells)
    assert f["finding"] == FINDING and f["marginal_clean"] and f["cells"] == ["d/collision@1..3"]
    assert "400 identical of 400 pairs, 31.3 expected" in f["sentence"] and "each row alone" in f["sentence"]


def test_finding_beside_a_per_row_bias_and_none_without_an_across_row_rejection():
    cells = [_cell("d", "gof@1", "BIAS"), _cell("d", "serial@1", "BIAS", effect=-0.3, n=800)]
    f = independence_finding("d", cells)
    assert not f["marginal_clean"] and f["sentence"].startswith(FINDING)
    assert "single-row cells rejected as well (gof@1)" in f["sentence"] and "null assumes independent rows" in f["sentence"]
    assert "lag-1 autocorrelation -0.30" in f["sentence"]
    assert independence_finding("d", [_cell("d", "gof@1", "BIAS"), _cell("d", "serial@1", "PASS")]) is None
