"""Planned alpha allocation (issue 27): weighted Holm and the weights that equalise the TV cells' n.

Expected laws are exact (trigram3's target law: ``verifier.exact.target_law(standard_tabular_pairs()["trigram3"]
.target, (0, 1), 3)`` and its marginals); the simulations state their seed, alpha and the effect they can see.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law
from verifier.stats import adjust
from verifier.stats.allocation import equalised_levels, tv_level_at, weighted_holm
from verifier.stats.identity import identity_level_needed, identity_power

# the shape of the weights the planner gives the shipped pair at T = 1 (gof@1, gof@2, joint@1..2, surprisal, pit)
PLANNED_SHAPE = np.array([0.1, 0.16, 2.74, 1.0, 1.0])


def test_equal_weights_are_holm():
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = rng.uniform(0, 0.05, size=6) ** rng.uniform(0.5, 3)
        rej, adj = weighted_holm(p, np.ones(6), 0.01)
        ref_rej, ref_adj, _, _ = multipletests(p, alpha=0.01, method="holm")
        assert np.array_equal(rej, ref_rej) and np.allclose(adj, ref_adj)


def test_weights_move_the_levels_and_adjust_carries_them():
    # a cell with 80% of the weight is rejected at p = 0.03 (0.03 x 0.9 / 0.8 <= 0.05) where Holm keeps it
    p = [0.03, 0.001, 0.5]
    assert adjust(p, alpha=0.1, dependent=True).rejected.tolist() == [False, True, False]
    res = adjust(p, alpha=0.1, dependent=True, weights=[0.8, 0.1, 0.1])
    assert res.rejected.tolist() == [True, True, False] and res.method == "weighted-holm+cauchy"
    assert res.cell_alpha == res.combine_alpha == 0.05  # the two halves are unchanged


@pytest.mark.parametrize("weights, allowed", [([1, 0, 1], "positive"), ([1, 1], "3 positive"), ([1, np.nan, 1], "positive")])
def test_bad_weights_name_the_argument(weights, allowed):
    with pytest.raises(InvalidArgumentError, match=rf"weights=.*{allowed}"):
        adjust([0.1, 0.2, 0.3], weights=weights)
    with pytest.raises(InvalidArgumentError, match="weights"):
        adjust([0.1, 0.2, 0.3], mode="audit", weights=[1, 1, 1])


def _family_rate(p: np.ndarray, weights, alpha: float) -> tuple[int, int]:
    hits = sum(bool(weighted_holm(row, weights, alpha)[0].any()) for row in p)
    return hits, len(p)


def test_weighted_holm_controls_the_family_rate_under_dependence():
    """Seed 20261205, 20,000 families of 5 null cells whose statistics share one Gaussian factor (correlation 0.5,
    as cells of one sample set share rows), alpha 0.05, the planned weights' shape: the family's false-alarm rate is
    <= alpha (its Clopper-Pearson 99% interval reaches below 0.05).  The test can fail: testing every cell at its
    weight's level *without* the step-down's division (each cell at alpha x 5 w_i: total 5 alpha) is measured at
    the same seed and its interval lies above alpha -- the effect (a rate of 0.065 or more) the run can see."""
    rng = np.random.default_rng(20261205)
    runs, alpha = 20_000, 0.05
    z = np.sqrt(0.5) * rng.standard_normal((runs, 1)) + np.sqrt(0.5) * rng.standard_normal((runs, 5))
    p = sps.norm.sf(z)  # one-sided p-values, uniform under the null, dependent across cells
    hits, n = _family_rate(p, PLANNED_SHAPE, alpha)
    ci = sps.binomtest(hits, n).proportion_ci(0.99)
    assert ci.low <= alpha, (hits, n)
    w = PLANNED_SHAPE / PLANNED_SHAPE.sum()
    broken = int(np.count_nonzero((p <= alpha * 5 * w).any(axis=1)))
    assert sps.binomtest(broken, n).proportion_ci(0.99).low > alpha, broken


def test_a_biased_cell_is_still_rejected():
    """Seed 3, alpha 1e-3: a cell with a small weight (0.1 of the equal level) and p = 1e-7 (a bias the cell sees
    clearly) is rejected; at equal weights too."""
    rng = np.random.default_rng(3)
    p = np.append(rng.uniform(size=4), 1e-7)
    w = np.array([2.74, 1.0, 1.0, 0.16, 0.1])
    assert weighted_holm(p, w, 5e-4)[0].tolist() == [False] * 4 + [True]


@pytest.fixture(scope="module")
def trigram_laws():
    exact = target_law(standard_tabular_pairs()["trigram3"].target, (0, 1), 3)
    keys = sorted(exact)
    joint = np.array([float(exact[k]) for k in keys])
    first = np.zeros(3)
    for k, v in zip(keys, joint):
        first[k[0]] += v
    return {"gof@1": first, "joint@1..3": joint}


def test_level_needed_is_where_the_power_reaches_its_goal(trigram_laws):
    law = trigram_laws["joint@1..3"]
    level = identity_level_needed(1500, law, 0.1, power=0.99)
    assert 1e-6 < level < 0.5
    assert identity_power(1500, law, 0.1, alpha=level * 1.01) >= 0.99 > identity_power(1500, law, 0.1, alpha=level * 0.97)


@pytest.mark.parametrize("test", ["pearson", "weighted"])
def test_equalised_levels_spend_the_budget_and_need_fewer_rows(trigram_laws, test):
    """TV 0.1, power 0.99, two TV cells sharing 2 x 1e-4: the binding joint cell gets more than its equal level,
    the first-token cell (rows to spare) less but at least 0.1 of it; the equalised n is below the equal-level n."""
    from verifier.stats.power import samples_for_mde
    from verifier.stats.gof import gof_mde
    from verifier.stats.identity import identity_samples_needed

    at = {k: tv_level_at(v, test, 0.1, 0.99, 5e-4) for k, v in trigram_laws.items()}
    n, levels = equalised_levels(at, 2e-4)
    assert sum(levels.values()) == pytest.approx(2e-4)
    assert levels["joint@1..3"] > 1e-4 > levels["gof@1"] >= 1e-5 * (1 - 1e-9)
    law = trigram_laws["joint@1..3"]
    equal_n = (identity_samples_needed(law, 0.1, alpha=1e-4) if test == "weighted" else
               samples_for_mde(lambda m: gof_mde(m, law, alpha=1e-4).tv, 0.1))
    assert n < equal_n
    assert at["joint@1..3"](n) <= levels["joint@1..3"]


def test_equalised_levels_refuses_bad_input():
    with pytest.raises(InvalidArgumentError, match="budget"):
        equalised_levels({"a": lambda n: 1e-3}, 2.0)
    with pytest.raises(InvalidArgumentError, match="min_share"):
        equalised_levels({"a": lambda n: 1e-3}, 1e-2, min_share=1.5)
    with pytest.raises(InvalidArgumentError, match="tv_test"):
        tv_level_at(np.array([0.5, 0.5]), "chi2", 0.1, 0.99, 1e-3)
    assert equalised_levels({"a": lambda n: None}, 1e-3, n_max=100) == (None, {})
