"""``specverify bench acceptance-bound`` (issue 28 item 2): the false "ABOVE THE COUPLING BOUND" rate.

Stochastic check, seed 7: 30 sets at their bound (n = 2,500, b = 0.325 / 0.7, as the ci suite's trigram3
sets) with alpha = 0.05 so that false accusations happen often enough to count; 4,000 runs.  The procedure's
rate is <= alpha by Holm (exact tests are conservative); the test fails when the rate's 95% Clopper-Pearson
interval lies wholly above alpha (false-fail probability <= 2.5%; detectable excess: a rate >= ~0.058 is seen
with probability >= 0.5).  The exact union bound must hold too.
"""

from __future__ import annotations

import pytest

from verifier.bench.acceptance_bound import BoundSet, simulate
from verifier.errors import InvalidArgumentError


def _sets():
    return [BoundSet(f"s{i}", "reference" if i < 4 else f"mutant{i}", "pass" if i < 4 else "detect", 2500,
                     0.3252493950326001 if i % 2 else 0.7) for i in range(30)]


def test_false_accusations_of_lossless_sets_stay_within_alpha():
    every, as_is = simulate(_sets(), 0.05, runs=4000, seed=7)
    assert every.scenario == "every set at the bound" and every.null_sets == 30 and as_is.null_sets == 4
    for r in (every, as_is):
        assert r.rate_ci[0] <= 0.05 and r.union_bound <= 0.05
        assert r.runs_with_false_accusation <= r.false_accusations
    assert every.runs_with_false_accusation > 0  # the simulation can see accusations at all


def test_runs_must_be_a_positive_int():
    with pytest.raises(InvalidArgumentError, match="runs"):
        simulate(_sets(), 0.05, runs=0)
