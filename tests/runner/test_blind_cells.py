"""A PIT or serial cell with no power at all (its MDE capped at 1, the largest effect of its unit) is UNDERPOWERED,
never PASS -- as a collision cell that detects nothing already was (tests/runner/test_collision_cell.py).

``pit_cell`` states ``min((K_{1-alpha} + z_power / 2) / sqrt(n), 1)``; at the per-cell alpha of a small family
(1e-4) and power 0.99 that is 1 for n <= 11 positions, i.e. no KS distance, not even the largest, is detected with
the stated power.  ``serial_mde`` is ``min(1, sqrt(lambda / n))``: 1 for n <= about 50 rows at alpha 1e-4.  Before the
fix both were labelled PASS beside a powered TV cell, so the decoder's PASS claimed PIT/serial coverage it did not
have.  Every cell here comes from the real cell functions on real values; no statistic, level or MDE is changed.
"""

from __future__ import annotations

import numpy as np

from verifier.runner import analysis
from verifier.runner.verdict import decide

ALPHA, POWER = 1e-4, 0.99


def _gof(n: int = 4000):
    """A powered first-token chi-square cell: samples of the law itself (MDE well under 0.1)."""
    law = np.array([0.5, 0.3, 0.2])
    counts = np.round(law * n).astype(np.int64)
    return analysis.gof_cell("d/s/gof@1", counts, law, cell_alpha=ALPHA, power=POWER, rng=np.random.default_rng(0),
                             target_mde=0.1, test="gof@1", decoder="d", set_id="s")


def test_a_pit_cell_with_mde_1_is_underpowered_never_pass():
    u = np.random.default_rng(1).uniform(size=6)  # six positions: uniform, as under the null
    pit = analysis.pit_cell("d/s/pit", u, cell_alpha=ALPHA, power=POWER, decoder="d", set_id="s")
    gof = _gof()
    assert pit.mde == 1.0 and gof.mde < 0.1
    v = decide("d", "pass", [gof, pit], alpha=1e-3, correction="gate", target_mde=0.1)
    assert gof.verdict == "PASS"
    assert pit.verdict == "UNDERPOWERED" and v.verdict == "UNDERPOWERED" and not v.expectation_met
    assert v.reason == ("1 of 2 cells underpowered; cell d/s/pit detects nothing at n = 6: its MDE is KS distance 1, "
                        "the largest there is (more rows lower it)")
    from verifier.reports.summary import decoder_line

    line = decoder_line({"verdict": "UNDERPOWERED", "reason": v.reason}, [c.to_dict() for c in v.cells], {}, 1e-3, 0.1)
    assert line.startswith("underpowered: ") and "detects nothing with n = 6 (its MDE is 1)" in line


def test_a_pit_cell_with_power_still_passes():
    u = np.random.default_rng(2).uniform(size=5000)
    pit = analysis.pit_cell("d/s/pit", u, cell_alpha=ALPHA, power=POWER, decoder="d", set_id="s")
    v = decide("d", "pass", [_gof(), pit], alpha=1e-3, correction="gate", target_mde=0.1)
    assert pit.mde < 0.1 and pit.verdict == "PASS" and v.verdict == "PASS"


def test_a_serial_cell_with_mde_1_is_underpowered_never_pass():
    law = np.array([0.5, 0.3, 0.2, 0.0])  # vocab 3 + the EOS-free padding entry
    first = np.random.default_rng(3).choice(3, size=24, p=law[:3])
    serial = analysis.serial_cell("d/s/serial@1", first, law, rng=np.random.default_rng(4), cell_alpha=ALPHA,
                                  power=POWER, decoder="d", set_id="s", test="serial@1")
    assert serial.n == 24 and serial.mde == 1.0
    v = decide("d", "pass", [_gof(), serial], alpha=1e-3, correction="gate", target_mde=0.1)
    assert serial.verdict == "UNDERPOWERED" and v.verdict == "UNDERPOWERED"
    assert "cell d/s/serial@1 detects nothing at n = 24: its MDE is lag-1 autocorrelation 1" in v.reason
