"""The acceptance audit's vectorised Clopper-Pearson intervals equal scipy's root-searched exact ones."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verifier.runner.acceptance import acceptance_audit, clopper_pearson


@pytest.mark.parametrize("confidence", [0.95, 0.99])
def test_clopper_pearson_equals_binomtest_exact(confidence):
    rng = np.random.default_rng(20261201)
    cases = [(x, n) for n in range(1, 25) for x in range(n + 1)]
    cases += [(int(rng.integers(0, n + 1)), n) for n in (100, 999, 2500, 8000, 30_000) for _ in range(8)]
    cases += [(0, 5000), (5000, 5000)]
    xs, ns = np.array(cases).T
    low, high = clopper_pearson(xs, ns, confidence)
    for x, n, lo, hi in zip(xs, ns, low, high):
        ci = stats.binomtest(int(x), int(n)).proportion_ci(confidence_level=confidence, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-11) and hi == pytest.approx(ci.high, abs=1e-11), (x, n)
    assert low[xs == 0].max() == 0.0 and high[xs == ns].min() == 1.0


def test_clopper_pearson_no_trials_is_nan():
    low, high = clopper_pearson([0, 3], [0, 5])
    assert np.isnan(low[0]) and np.isnan(high[0]) and 0 < low[1] < 0.6 < high[1] < 1


def test_audit_positions_carry_the_exact_intervals():
    fra = np.array([0] * 40 + [1] * 35 + [2] * 25)  # k = 2: position 1 reached 100, accepted 60; position 2: 60, 25
    audit = acceptance_audit("s", "label", "d", 2, fra, None, None)
    for row, (x, n) in zip(audit.positions, [(60, 100), (25, 60)]):
        ci = stats.binomtest(x, n).proportion_ci(confidence_level=0.99, method="exact")
        assert (row["reached"], row["accepted"]) == (n, x)
        assert row["ci"] == pytest.approx([ci.low, ci.high], abs=1e-11)
