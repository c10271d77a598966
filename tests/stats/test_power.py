"""Power, samples needed and minimum detectable effect (verifier.stats.power).

Reference figures are DESIGN.md's "Statistical defaults"; the alternatives are the exact output
laws of the full-p-fallback rule (``verifier.exact``), and exact power is cross-checked against a
brute-force enumeration of every multinomial outcome written independently here.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from verifier.errors import InvalidArgumentError
from verifier.stats.power import gof_power, min_detectable_effect, samples_for_mde, samples_needed, tv_per_w

from .laws import full_p_fallback_law


def brute_force_power(n, null, alt, alpha):
    """P(X2 >= chi2.isf(alpha, 2)) for vocab 3, every outcome enumerated (no window, no pooling)."""
    null, alt = np.asarray(null), np.asarray(alt)
    crit = stats.chi2.isf(alpha, len(null) - 1)
    x1, x2 = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    x3 = n - x1 - x2
    ok = x3 >= 0
    x = np.stack([x1, x2, np.where(ok, x3, 0)])
    chi = sum((x[i] - n * null[i]) ** 2 / (n * null[i]) for i in range(3))
    logpmf = special.gammaln(n + 1) - special.gammaln(x + 1).sum(0) + (x * np.log(alt)[:, None, None]).sum(0)
    return float(np.exp(logpmf)[ok & (chi >= crit)].sum())


@pytest.mark.parametrize(
    "target, draft, expected_n",
    [((0.2, 0.5, 0.3), (0.5, 0.3, 0.2), 1259), ((0.4, 0.2, 0.4), (0.2, 0.5, 0.3), 789), ((0.5, 0.3, 0.2), (1, 0, 0), 101)],
)
def test_samples_needed_reproduces_design_figures(target, draft, expected_n):
    alt = full_p_fallback_law(target, draft)
    assert samples_needed(target, alt, alpha=0.01, power=0.99, method="exact") == expected_n
    assert samples_needed(target, alt, alpha=0.01, power=0.99) == expected_n  # auto == exact at vocab 3


def test_samples_needed_is_the_first_powered_n():
    alt = full_p_fallback_law((0.2, 0.5, 0.3), (0.5, 0.3, 0.2))
    assert [float(a) for a in alt] == pytest.approx([0.26, 0.45, 0.29])
    assert brute_force_power(1259, (0.2, 0.5, 0.3), alt, 0.01) >= 0.99
    assert brute_force_power(1258, (0.2, 0.5, 0.3), alt, 0.01) < 0.99


@pytest.mark.parametrize("n", [50, 200, 1259])  # n >= 50: no pooling at p_min = 0.2
def test_exact_power_matches_brute_force(n):
    null, alt = (0.2, 0.5, 0.3), (0.26, 0.45, 0.29)
    assert gof_power(n, null, alt, alpha=0.01, method="exact") == pytest.approx(brute_force_power(n, null, alt, 0.01), abs=1e-9)


def test_exact_power_under_null_is_near_alpha():
    # no effect: the rejection rate is the size of the asymptotic test, close to alpha
    assert gof_power(2000, (0.2, 0.5, 0.3), (0.2, 0.5, 0.3), alpha=0.01, method="exact") == pytest.approx(0.01, abs=0.002)


def test_noncentral_close_to_exact_and_vocab4_is_fast_enough():
    null = (0.4, 0.3, 0.2, 0.1)
    alt = (0.3, 0.3, 0.3, 0.1)
    exact, nc = samples_needed(null, alt, method="exact"), samples_needed(null, alt, method="noncentral")
    assert abs(exact - nc) / exact < 0.15
    # vocab 4 at large n falls back to the noncentral chi-square (documented) and still answers
    assert samples_needed(null, (0.38, 0.3, 0.2, 0.12)) == samples_needed(null, (0.38, 0.3, 0.2, 0.12), method="noncentral")


def test_support_violation_alternative_needs_few_samples():
    # alt puts 5% on a token the target never emits: one sighting is a hard failure
    n = samples_needed((0.5, 0.5, 0.0), (0.475, 0.475, 0.05))
    assert (1 - 0.05) ** n <= 0.01 < (1 - 0.05) ** (n - 1)


def test_min_detectable_effect_consistent_with_samples_needed():
    null = np.array([0.2, 0.5, 0.3])
    mde = min_detectable_effect(1259, null, alpha=0.01, power=0.99)
    tv, w = mde
    assert mde.df == 2 and w > 0 and 0 < tv <= w / 2
    # the least detectable alternative at TV distance mde.tv (proportional shift from {0.5} onto {0.2, 0.3})
    # has w == mde.w, so it is detected with power 0.99 under the noncentral chi-square
    in_s = np.array([True, False, True])
    delta = np.where(in_s, tv * null / null[in_s].sum(), -tv * null / null[~in_s].sum())
    alt = null + delta
    assert 0.5 * np.abs(alt - null).sum() == pytest.approx(tv)
    assert gof_power(1259, null, alt, alpha=0.01, method="noncentral") == pytest.approx(0.99, abs=1e-6)


def test_tv_per_w_bounds():
    assert tv_per_w([0.5, 0.5]) == pytest.approx(0.5)
    assert tv_per_w([0.9, 0.1]) == pytest.approx(0.3)
    assert tv_per_w([0.2, 0.5, 0.3]) == pytest.approx(0.5)  # {0.2, 0.3} vs {0.5}


def test_mde_untestable_when_n_too_small():
    mde = min_detectable_effect(5, [0.5, 0.5])
    assert mde.tv == float("inf") and mde.df == 0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(null_probs=[0.5, 0.6], alt_probs=[0.5, 0.5]), "null_probs"),
        (dict(null_probs=[0.5, 0.5], alt_probs=[0.5, np.nan]), "alt_probs"),
        (dict(null_probs=[0.5, 0.5], alt_probs=[0.2, 0.3, 0.5]), "alt_probs.shape"),
        (dict(null_probs=[0.5, 0.5], alt_probs=[0.4, 0.6], alpha=1.5), "alpha"),
        (dict(null_probs=[0.5, 0.5], alt_probs=[0.4, 0.6], power=0), "power"),
        (dict(null_probs=[0.5, 0.5], alt_probs=[0.4, 0.6], method="magic"), "method"),
        (dict(null_probs=[0.5, 0.5], alt_probs=[0.5, 0.5]), "alt_probs"),
        (dict(null_probs=[-0.5, 1.5], alt_probs=[0.4, 0.6]), "null_probs"),
    ],
)
def test_samples_needed_invalid_arguments_name_the_argument(kwargs, name):
    with pytest.raises(InvalidArgumentError, match=rf"^{name.replace('.', '[.]')}="):
        samples_needed(**kwargs)


def test_exact_refused_above_vocab_4():
    with pytest.raises(InvalidArgumentError, match="method"):
        gof_power(10_000, [0.2] * 5, [0.3, 0.1, 0.2, 0.2, 0.2], method="exact")


def test_the_common_n_serves_every_cell_at_that_n():
    """Pooled chi-square MDEs are not monotone in n: a long-tailed law (Dirichlet(0.05) on 3,000 tokens, seed 1) sees
    TV 0.045 at ~500 rows (small-sample regime) but not at ~16,000; a second cell (Dirichlet(0.05) on 1,000 tokens,
    seed 1) needs ~16,000.  Taking the larger single-cell n leaves the first cell underpowered there; the common n
    found by ``samples_for_every_mde`` serves both (alpha 8.3e-5, power 0.99)."""
    from verifier.stats.gof import gof_mde
    from verifier.stats.power import samples_for_every_mde

    rng = np.random.default_rng(1)
    laws = {"dip": rng.dirichlet(np.full(3000, 0.05)), "tail": rng.dirichlet(np.full(1000, 0.05))}
    mde_at = {k: (lambda n, law=law: gof_mde(n, law, alpha=8.333e-5, power=0.99).tv) for k, law in laws.items()}
    needed = {k: samples_for_mde(fn, 0.045) for k, fn in mde_at.items()}
    naive = max(needed.values())
    assert needed["dip"] < 1000 < naive and mde_at["dip"](naive) > 0.045  # the defect: underpowered at the max
    n = samples_for_every_mde(mde_at, 0.045, needed)
    assert n > naive and all(fn(n) <= 0.045 for fn in mde_at.values())
    assert needed["dip"] == n  # the cell searched again from the naive n sets the common n
