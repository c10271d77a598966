"""Known-p GOF cells: pooling, Pearson statistic, Monte Carlo p-values, support violations, input errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from verifier.errors import InvalidArgumentError
from verifier.stats.gof import MONTE_CARLO_MAX_DRAWS
from verifier.stats import (
    BIAS_DETECTED,
    PASS,
    UNDERPOWERED,
    gof_pvalues,
    gof_test,
    pool_categories,
    support_violations,
    token_counts,
    tv_estimate,
)


@st.composite
def laws(draw, max_vocab=40):
    weights = draw(st.lists(st.integers(0, 1000), min_size=2, max_size=max_vocab).filter(lambda w: sum(w) > 0))
    return np.array(weights, dtype=np.float64) / sum(weights)


@given(probs=laws(), n=st.integers(1, 5000))
@settings(max_examples=150, deadline=None)
def test_pooling_is_data_blind_and_keeps_every_supported_token(probs, n):
    pooling = pool_categories(probs, n)
    # every supported token is in exactly one category, zero-prob tokens in none
    assert np.array_equal(pooling.groups >= 0, probs > 0)
    assert pooling.expected_probs.sum() == pytest.approx(1.0)
    if pooling.num_categories >= 2:
        assert (n * pooling.expected_probs).min() >= 10 - 1e-9
    # head categories are single tokens in descending prob order; only the last one may be merged
    sizes = np.bincount(pooling.groups[pooling.groups >= 0])
    assert np.all(sizes[:-1] == 1)
    assert np.all(np.diff(pooling.expected_probs[:-1]) <= 1e-15)


def test_statistic_equals_scipy_chisquare_on_pooled_counts():
    probs = np.array([0.4, 0.3, 0.2, 0.05, 0.03, 0.02])
    counts = np.array([41, 28, 22, 6, 2, 1])
    res = gof_test(counts, probs, pvalue_method="asymptotic")
    # pooled at n=100: {0}, {1}, {2}, {3,4,5}
    assert res.pooled_categories == [[0], [1], [2], [3, 4, 5]] and res.df == 3
    ref = stats.chisquare([41, 28, 22, 9], 100 * np.array([0.4, 0.3, 0.2, 0.1]))
    statistic, pvalue = res
    assert statistic == pytest.approx(ref.statistic) and pvalue == pytest.approx(ref.pvalue)
    assert res.method == "asymptotic" and res.n == 100


def test_unobserved_categories_are_not_dropped():
    # token 2 never observed: still a category, and its absence is evidence
    res = gof_test([600, 400, 0], [0.5, 0.3, 0.2])
    assert res.num_categories == 3 and res.pvalue < 1e-20


def test_monte_carlo_pvalue_agrees_with_asymptotic_in_the_bulk():
    counts, probs = [230, 470, 300], [0.2, 0.5, 0.3]
    asym = gof_test(counts, probs, pvalue_method="asymptotic")
    mc = gof_test(counts, probs, pvalue_method="monte-carlo", num_resamples=20_000, rng=1)
    # asymptotic p ~ 0.08; MC standard error ~ 0.002, early stop after 20 exceedances widens it
    assert mc.method == "monte-carlo" and abs(mc.pvalue - asym.pvalue) < 0.05


def test_auto_uses_monte_carlo_near_a_tiny_alpha_and_resolves_it():
    # asymptotic p = 8.6e-6 is within a factor 100 of alpha = 5e-5: Monte Carlo with B = 20 / alpha
    res = gof_test([260, 450, 290], [0.2, 0.5, 0.3], alpha=5e-5, rng=0)
    assert res.method == "monte-carlo" and res.num_resamples == 400_000
    assert res.pvalue <= 5e-5  # resolved below the cell's alpha (a cap at 1 / alpha could never reject)
    assert MONTE_CARLO_MAX_DRAWS >= 20 / 2e-6


def test_auto_keeps_asymptotic_far_from_a_tiny_alpha():
    far_biased = gof_test([300, 400, 300], [0.2, 0.5, 0.3], alpha=1e-6)  # p ~ 1e-14
    clean = gof_test([200, 500, 300], [0.2, 0.5, 0.3], alpha=1e-6)  # p = 1
    assert far_biased.method == clean.method == "asymptotic"
    assert far_biased.rejected and not clean.rejected


def test_support_violation_is_a_hard_failure_whatever_the_pvalue():
    res = gof_test([500, 300, 199, 1], [0.5, 0.3, 0.2, 0.0])
    assert res.pvalue > 0.5  # the chi-square on the support sees nothing
    assert [(v.token_id, v.count) for v in res.support_violations] == [(3, 1)]
    assert res.rejected and res.verdict() == BIAS_DETECTED
    assert "SUPPORT VIOLATION: token 3 emitted 1 time at target prob 0" in res.summary() and "p=" not in res.summary()
    assert support_violations([5, 0, 1], [0.5, 0.5, 0.0])[0].token_id == 2


def test_verdicts_pass_and_underpowered():
    ok = gof_test([200, 500, 300], [0.2, 0.5, 0.3])
    assert ok.verdict(target_tv=0.2) == PASS
    assert ok.verdict(target_tv=0.01) == UNDERPOWERED  # MDE at n=1000 is ~0.08 TV
    tiny = gof_test([0, 1, 0], [0.2, 0.5, 0.3])
    assert tiny.method == "untestable" and tiny.verdict(target_tv=0.5) == UNDERPOWERED
    small = gof_test([1, 0, 1], [0.2, 0.5, 0.3])  # n = 2: testable by Monte Carlo, but blind to TV 0.5
    assert small.method == "small-sample monte-carlo" and small.verdict(target_tv=0.5) == UNDERPOWERED


def test_effect_estimate_covers_the_true_tv():
    # alternative (0.26, 0.45, 0.29) has TV 0.06 to the target; expected value of the CI check
    rng = np.random.default_rng(7)
    counts = rng.multinomial(5000, [0.26, 0.45, 0.29])
    est = gof_test(counts, [0.2, 0.5, 0.3], rng=rng).effect
    # the interval is finite-sample valid (verifier.stats.effect), hence wider than the old bootstrap one
    assert 0 < est.ci_low <= 0.06 <= est.ci_high and est.ci_high - est.ci_low < 0.07
    assert tv_estimate([260, 450, 290], [0.2, 0.5, 0.3]).plug_in == pytest.approx(0.06)


def test_gof_pvalues_matches_gof_test():
    rng = np.random.default_rng(3)
    probs = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
    counts = rng.multinomial(300, probs, size=5)
    vec = gof_pvalues(counts, probs)
    assert vec == pytest.approx([gof_test(c, probs, num_bootstrap=0, pvalue_method="asymptotic").pvalue for c in counts])


def test_token_counts_skips_padding_and_checks_range():
    assert token_counts(np.array([[0, 2, -1], [2, -1, -1]]), 3).tolist() == [1, 0, 2]
    with pytest.raises(InvalidArgumentError, match="token_ids=3"):
        token_counts([0, 3], 3)


@pytest.mark.parametrize(
    "counts, probs, name",
    [
        ([-1, 5, 5], [0.2, 0.5, 0.3], "counts"),
        ([1, 5, 5], [0.2, 0.5, 0.4], "expected_probs"),
        ([1, 5, np.nan], [0.2, 0.5, 0.3], "counts"),
        ([1, 5, 5], [0.2, np.nan, 0.3], "expected_probs"),
        ([1, 5], [0.2, 0.5, 0.3], "counts.shape"),
        ([0, 0, 0], [0.2, 0.5, 0.3], "counts total"),
        ([1.5, 5, 5], [0.2, 0.5, 0.3], "counts"),
    ],
)
def test_invalid_input_names_the_argument(counts, probs, name):
    with pytest.raises(InvalidArgumentError, match=rf"^{name.replace('.', '[.]')}"):
        gof_test(counts, probs)


def test_invalid_options():
    with pytest.raises(InvalidArgumentError, match="^alpha="):
        gof_test([1, 2], [0.5, 0.5], alpha=0)
    with pytest.raises(InvalidArgumentError, match="^pvalue_method="):
        gof_test([1, 2], [0.5, 0.5], pvalue_method="exact")
    with pytest.raises(InvalidArgumentError, match="^rng="):
        gof_test([1, 2], [0.5, 0.5], rng="seed")


def test_small_sample_regime_keeps_categories_the_10_floor_would_merge():
    # n = 30: the 10-floor pools {0}, {1, 2, 3}; the small-sample regime keeps every token with
    # expected count >= 1 apart and refers Pearson's statistic to its Monte Carlo null law
    # (the 10-floor test keeps 2 categories here, so the cell is the min of both p-values, x 2)
    probs = [0.5, 0.2, 0.2, 0.1]
    res = gof_test([15, 6, 6, 3], probs, alpha=0.01)
    assert "min of 2 poolings" in res.method and res.pvalue > 0.5
    fine = gof_test([15, 6, 6, 3], probs, alpha=0.01, min_expected=30)  # 10-floor replaced by 30: one category
    assert fine.method == "small-sample monte-carlo" and fine.num_categories == 4 and fine.min_expected == 1.0
    assert fine.num_resamples <= 2000  # B = 20 / alpha, Besag-Clifford stop once 20 draws reach the statistic
    assert gof_test([15, 6, 6, 3], probs, pvalue_method="asymptotic").num_categories == 2
    # same arguments, same p-value (the null sample is seeded by the law, n and B)
    assert gof_test([15, 6, 6, 3], probs, alpha=0.01).pvalue == res.pvalue


def test_small_sample_regime_sees_tokens_never_emitted():
    """Test the tester at n = 40, alpha 0.001: a mutant that emits token 2 three times too often and
    never tokens 3 and 4 (TV 0.2).  The 10-floor pooling merges {2, 3, 4} into one tail category
    whose count matches its expectation exactly (p = 1); the small-sample regime keeps them apart
    and rejects.  A sample from the target itself (seed 3) passes."""
    probs = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    biased = [16, 12, 12, 0, 0]
    fine = gof_test(biased, probs, alpha=0.001)
    coarse = gof_test(biased, probs, alpha=0.001, pvalue_method="asymptotic")
    assert fine.method.startswith("small-sample monte-carlo") and fine.pvalue <= 0.001
    assert coarse.num_categories == 3 and coarse.pvalue > 0.5
    ok = np.random.default_rng(3).multinomial(40, probs)
    assert gof_test(ok, probs, alpha=0.001).pvalue > 0.001


def test_vectorised_auto_matches_gof_test_in_the_small_sample_regime():
    probs = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    counts = np.random.default_rng(5).multinomial(40, probs, size=50)
    vec = gof_pvalues(counts, probs, pvalue_method="auto", alpha=0.001)
    one = np.array([gof_test(c, probs, alpha=0.001, num_bootstrap=0).pvalue for c in counts])
    # gof_test stops its Monte Carlo early (Besag-Clifford) once 20 draws reached the observed value;
    # both read the same stream, so the p-values differ by Monte Carlo noise only (relative standard
    # error of a stopped estimate 1 / sqrt(20) = 22%) and the decisions at the cell's alpha agree
    assert np.array_equal(vec <= 0.001, one <= 0.001)
    assert np.all(np.abs(vec - one) <= 0.5 * np.maximum(vec, one) + 1e-3)
