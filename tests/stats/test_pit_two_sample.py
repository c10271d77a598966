"""Randomized PIT, KS refusal of discrete data, and black-box two-sample tests (fast unit tests)."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.errors import InvalidArgumentError
from verifier.stats import pit_chi2_test, pit_ks_test, randomized_pit, randomized_pit_from_cdf, two_sample_chi2_test, two_sample_ks_test


def test_pit_intervals_follow_descending_target_order():
    # order by prob: token 1 (0.5), token 2 (0.3), token 0 (0.2) -> intervals [0,.5), [.5,.8), [.8,1)
    probs = [0.2, 0.5, 0.3]
    u, _ = randomized_pit(np.array([1, 2, 0] * 200), probs, rng=0)
    u = u.reshape(200, 3)
    assert u[:, 0].max() < 0.5 and 0.5 <= u[:, 1].min() and u[:, 1].max() < 0.8 and u[:, 2].min() >= 0.8


def test_pit_per_row_probs_equal_broadcast_and_ties_break_by_token_id():
    probs = np.array([0.25, 0.25, 0.5])
    ids = np.array([0, 1, 2, 1, 0])
    u1, _ = randomized_pit(ids, probs, rng=5)
    u2, _ = randomized_pit(ids, np.tile(probs, (5, 1)), rng=5)
    assert np.allclose(u1, u2)
    assert np.all((u1[[0, 4]] >= 0.5) & (u1[[0, 4]] < 0.75)) and np.all(u1[[1, 3]] >= 0.75)


def test_pit_skips_padding_and_reports_support_violations():
    u, bad = randomized_pit(np.array([0, -1, 2, 2]), [0.5, 0.5, 0.0], rng=1)
    assert u.shape == (1,) and [(v.token_id, v.count) for v in bad] == [(2, 2)]


def test_pit_is_uniform_for_a_correct_sampler_and_not_for_a_biased_one():
    # seed 11, n 20000, alpha 0.01; TV 0.06 is seen by KS with power ~1 at this n
    rng = np.random.default_rng(11)
    target = np.array([0.2, 0.5, 0.3])
    good, _ = randomized_pit(rng.choice(3, size=20_000, p=target), target, rng=rng)
    bad, _ = randomized_pit(rng.choice(3, size=20_000, p=[0.26, 0.45, 0.29]), target, rng=rng)
    assert pit_ks_test(good).pvalue > 0.01 and pit_chi2_test(good).pvalue > 0.01
    assert pit_ks_test(bad).pvalue < 1e-6 and pit_chi2_test(bad).pvalue < 1e-6


@pytest.mark.parametrize("values", [np.array([0, 1, 2, 1]), np.array([0.0, 1.0, 2.0, 1.0]), np.repeat([0.1, 0.2], 50)])
def test_ks_refuses_token_ids_and_tied_values(values):
    with pytest.raises(InvalidArgumentError, match="never raw token ids"):
        pit_ks_test(values)
    with pytest.raises(InvalidArgumentError, match="never raw token ids"):
        two_sample_ks_test(values, np.linspace(0.01, 0.99, 50))


def test_pit_input_errors():
    with pytest.raises(InvalidArgumentError, match="^rng="):
        randomized_pit(np.array([0]), [0.5, 0.5], rng=None)
    with pytest.raises(InvalidArgumentError, match="^target_probs.shape"):
        randomized_pit(np.array([0, 1]), np.full((3, 2), 0.5), rng=0)
    with pytest.raises(InvalidArgumentError, match="^token_ids="):
        randomized_pit(np.array([0, 2]), [0.5, 0.5], rng=0)
    with pytest.raises(InvalidArgumentError, match="^u="):
        pit_ks_test(np.array([0.5, 1.5, 0.2]))
    with pytest.raises(InvalidArgumentError, match="^cdf_below/prob_emitted"):
        randomized_pit_from_cdf([0.5], [0.0], rng=0)


def test_two_sample_chi2_permutation_pvalue_is_exact_and_sees_a_difference():
    rng = np.random.default_rng(2)
    same = two_sample_chi2_test(rng.multinomial(3000, [0.2, 0.5, 0.3]), rng.multinomial(3000, [0.2, 0.5, 0.3]), rng=rng)
    diff = two_sample_chi2_test(rng.multinomial(3000, [0.26, 0.45, 0.29]), rng.multinomial(3000, [0.2, 0.5, 0.3]), rng=rng)
    # null: Besag-Clifford early stop after 20 exceedances; biased: all 1999 permutations, none exceed
    assert same.method == "permutation" and same.num_resamples < 1999 and same.pvalue > 0.01
    assert diff.num_resamples == 1999 and diff.pvalue == pytest.approx(1 / 2000)
    assert diff.effect.ci_low <= 0.06 <= diff.effect.ci_high


def test_two_sample_errors():
    with pytest.raises(InvalidArgumentError, match="^counts_b.shape"):
        two_sample_chi2_test([1, 2, 3], [1, 2])
    with pytest.raises(InvalidArgumentError, match="^counts_a total"):
        two_sample_chi2_test([0, 0], [1, 2])
