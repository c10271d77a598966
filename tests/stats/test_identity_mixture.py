"""The sign-mixture identity test of TV cells (verifier.stats.identity_mixture, issue 27).

Expected laws come from the exact enumerator: the trigram3 target's law of its first 4 tokens (81 outcomes,
probabilities from 0.0001 to 0.12), ``verifier.exact.target_law`` in rational arithmetic.  Every statistical test
states its seed, alpha and the effect it detects, and fails when the null is wrong or the planned n is too small.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law
from verifier.runner.identity_cell import MIXTURE_METHOD, identity_cell
from verifier.stats.identity import identity_statistic
from verifier.stats.identity_mixture import mixture_power, mixture_statistic, mixture_test, random_sign_law
from verifier.stats.pooling import pool_categories


@pytest.fixture(scope="module")
def trigram_law() -> np.ndarray:
    law = target_law(standard_tabular_pairs()["trigram3"].target, (0, 1), 4)
    return np.array([float(law[k]) for k in sorted(law)])


def test_statistic_is_quadratic_for_small_and_linear_for_large_deviations():
    p = np.array([0.5, 0.3, 0.2])
    n = 1000
    a = math.sqrt(n) * (2 * 0.03 / np.sum(p ** 0.75)) * p ** 0.25
    z = np.array([1e-3, -2e-3, 1e-3])
    x = n * p + z * np.sqrt(n * p)  # float counts: the statistic is a smooth function of them
    want = np.sum((a * z) ** 2 / 2 + math.log(2))  # log cosh y + log 2 ~ y^2 / 2 + log 2
    assert mixture_statistic(x, p, 0.03) == pytest.approx(want, rel=1e-6)
    far = n * p + np.array([300.0, -150.0, -150.0])
    y = np.abs(a * (far - n * p) / np.sqrt(n * p))
    assert mixture_statistic(far, p, 0.03) == pytest.approx(np.sum(y), rel=1e-6)  # |y| + log(1 + e^-2y) -> |y|


def test_random_sign_law_has_the_stated_tv(trigram_law):
    p = pool_categories(trigram_law, 3000).expected_probs
    rng = np.random.default_rng(0)
    for gamma in (0.0, 0.75, 1.0):
        q = random_sign_law(p, 0.05, gamma, rng)
        assert q.sum() == pytest.approx(1.0) and (q >= 0).all()
        assert 0.5 * np.abs(q - p).sum() == pytest.approx(0.05, rel=1e-9)


def test_test_passes_the_exact_law_and_rejects_a_random_sign_shift(trigram_law):
    """Seed 6, alpha 0.01, n = 4000: ``mixture_test`` on 40 samples of the exact law rejects at most 4 (binomial
    P(> 4) = 0.0005 at the level 0.01); on 40 samples of random-sign laws at TV 0.08 (gamma 0.75, a new sign vector
    each) it rejects at least 36 (its measured power there is > 0.99)."""
    rng = np.random.default_rng(6)
    n, alpha = 4000, 0.01
    p = pool_categories(trigram_law, n).expected_probs
    groups = pool_categories(trigram_law, n).groups
    null_hits = sum(mixture_test(rng.multinomial(n, trigram_law), trigram_law, tune_tv=0.08, alpha=alpha, mde=False).pvalue
                    <= alpha for _ in range(40))
    assert null_hits <= 4
    alt_hits = 0
    for _ in range(40):
        q = random_sign_law(p, 0.08, 0.75, rng)[groups] * trigram_law / p[groups]  # spread within each pooled category
        alt_hits += mixture_test(rng.multinomial(n, q / q.sum()), trigram_law, tune_tv=0.08, alpha=alpha, mde=False).pvalue <= alpha
    assert alt_hits >= 36, alt_hits


def test_mixture_and_weighted_statistics_share_the_null_stream(trigram_law):
    from verifier.stats.identity import _null_draws

    p = np.ascontiguousarray(pool_categories(trigram_law, 2000).expected_probs)
    rng = np.random.default_rng(__import__("verifier.stats.identity", fromlist=["_seed"])._seed(p, 2000))
    x = rng.multinomial(2000, p, size=4000)
    assert np.array_equal(_null_draws(p, 2000, 100), identity_statistic(x, p)[:100])
    from verifier.stats.identity_mixture import _key

    stat = lambda c, q: mixture_statistic(c, q, 0.05)  # noqa: E731
    assert np.allclose(_null_draws(p, 2000, 100, stat, _key(0.05)), mixture_statistic(x, p, 0.05)[:100])


def test_bad_arguments_name_the_argument(trigram_law):
    counts = np.random.default_rng(0).multinomial(100, trigram_law)
    with pytest.raises(InvalidArgumentError, match="tune_tv"):
        mixture_test(counts, trigram_law, tune_tv=0.0)
    with pytest.raises(InvalidArgumentError, match="counts"):
        mixture_test(counts[:-1], trigram_law, tune_tv=0.05)
    with pytest.raises(InvalidArgumentError, match="runs"):
        mixture_power(1000, trigram_law, 0.05, runs=0)
    with pytest.raises(InvalidArgumentError, match="tv_test"):
        identity_cell("c", counts, trigram_law, cell_alpha=0.01, power=0.9, tv_test="chi2", decoder="d", set_id="x")


def test_cell_takes_the_mixture_test(trigram_law):
    """Seed 3, level 1e-2, n = 3000, target TV 0.1: exact counts pass with the mixture method named."""
    rng = np.random.default_rng(3)
    ok = identity_cell("c", rng.multinomial(3000, trigram_law), trigram_law, cell_alpha=1e-2, power=0.9, target_mde=0.1,
                       tv_test="mixture", decoder="d", set_id="x")
    assert ok.pvalue > 1e-2 and ok.method == MIXTURE_METHOD and ok.extra["tv_test"] == "mixture"
    assert ok.mde < 0.1 and ok.n_needed is None
