"""Surprisal cell: moments, calibration and power ("test the tester").

Expected laws come from the exact enumerator (:func:`verifier.exact.n_token_law` on the standard
case ``unigram3``: k = 2 drafts, the first 3 emitted tokens), not from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from verifier.errors import InvalidArgumentError
from verifier.exact import n_token_law, standard_cases, target_law
from verifier.stats import montecarlo
from verifier.stats.surprisal import surprisal_pvalues, surprisal_pvalues_from_codes, surprisal_test

ALPHA = 0.01
RUNS = 2000
HI = int(stats.binom.interval(0.99, RUNS, ALPHA)[1])


def _case_laws(rule: str):
    case = next(c for c in standard_cases() if c.name == "unigram3")
    null = target_law(case.target, case.prefix, case.num_tokens)
    alt = n_token_law(case.target, case.draft, case.prefix, case.num_draft_tokens, case.num_tokens, rule)
    outcomes = sorted(set(null) | set(alt))
    return (np.array([float(null.get(o, 0)) for o in outcomes]), np.array([float(alt.get(o, 0)) for o in outcomes]))


def test_statistic_entropy_and_varentropy_by_hand():
    p = np.array([0.5, 0.25, 0.25])
    res = surprisal_test([6, 2, 2], p)
    h = 0.5 * math.log(2) + 0.5 * math.log(4)
    assert res.entropy == pytest.approx(h)
    assert res.varentropy == pytest.approx(0.5 * math.log(2) ** 2 + 0.5 * math.log(4) ** 2 - h * h)
    assert res.statistic == pytest.approx((6 * math.log(2) + 4 * math.log(4)) / 10 - h)
    assert res.method == "monte-carlo" and 1000 <= res.num_resamples <= 2000  # Besag-Clifford early stop


def test_uniform_law_is_untestable_and_support_violation_rejects():
    assert surprisal_test([3, 3, 4], [1 / 3] * 3).pvalue == 1.0  # every outcome equally surprising
    bad = surprisal_test([5, 5, 1], [0.5, 0.5, 0.0])
    assert bad.support_violations[0].token_id == 2 and bad.rejected and bad.pvalue == 0.0


def test_bad_input_names_the_argument():
    with pytest.raises(InvalidArgumentError, match="counts.shape"):
        surprisal_test([1, 2], [0.5, 0.25, 0.25])
    with pytest.raises(InvalidArgumentError, match="expected_probs"):
        surprisal_test([1, 2, 3], [0.5, 0.5, 0.5])
    with pytest.raises(InvalidArgumentError, match="counts"):
        surprisal_test([1, -2, 3], [0.5, 0.25, 0.25])


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 200])
def test_size_under_the_exact_null(n):
    """Seed 300+n, alpha 0.01, 2000 runs drawn from the exact target law of unigram3 (27 outcomes);
    run i uses its own null sample (B = 1999 + i).  False alarms must not exceed the 99% binomial
    upper bound of Bin(2000, 0.01) (31): a test with size above ~1.6% fails with prob. > 0.99."""
    null, _ = _case_laws("deterministic_acceptance")
    counts = np.random.default_rng(300 + n).multinomial(n, null, size=RUNS)
    alarms = sum(surprisal_test(c, null, alpha=ALPHA, num_resamples=1999 + i).pvalue <= ALPHA for i, c in enumerate(counts))
    assert alarms <= HI


def test_detects_deterministic_acceptance_at_small_n():
    """Seed 11, cell alpha 0.001, n = 40 rows of 3 tokens.  deterministic_acceptance (exact law,
    TV 0.40 to the target; its mean surprisal is 0.46 nats below the entropy 3.03, whose null
    standard deviation per row is 0.68) is rejected on at least 90 of 100 seeds (normal-theory
    power 0.99); rows from the target law itself are rejected on at most 2 (size 0.001).  The
    10-floor chi-square pools all 27 outcomes into one category at n = 40 (untestable)."""
    null, alt = _case_laws("deterministic_acceptance")
    s = -np.log(np.where(null > 0, null, 1.0))
    h = null @ s
    assert alt @ s - h == pytest.approx(-0.4639, abs=1e-4) and h == pytest.approx(3.0342, abs=1e-4)
    rng = np.random.default_rng(11)
    p_alt, _ = surprisal_pvalues(rng.multinomial(40, alt, size=100), null, alpha=0.001)
    p_null, method = surprisal_pvalues(rng.multinomial(40, null, size=100), null, alpha=0.001)
    assert method == "monte-carlo"
    assert np.count_nonzero(p_alt <= 0.001) >= 90
    assert np.count_nonzero(p_null <= 0.001) <= 2


def test_normal_path_beyond_the_simulation_budget(monkeypatch):
    """Above MAX_WORK the p-value is the CLT one; at n = 500 it agrees with Monte Carlo (B = 1e5) to 0.02."""
    null, alt = _case_laws("shared_uniform")
    counts = np.random.default_rng(4).multinomial(500, 0.5 * (null + alt), size=20)
    mc, m1 = surprisal_pvalues(counts, null, alpha=0.01, num_resamples=100_000)  # MC s.e. <= 0.0016
    monkeypatch.setattr(montecarlo, "MAX_WORK", 10)
    z, m2 = surprisal_pvalues(counts, null, alpha=0.01)
    assert (m1, m2) == ("monte-carlo", "normal")
    assert np.max(np.abs(mc - z)) < 0.02


def test_monte_carlo_null_sample_is_reproducible_and_cached():
    p = np.array([0.5, 0.3, 0.2])
    a = montecarlo.null_sample("pearson", p, 50, 1000)
    assert a is montecarlo.null_sample("pearson", p, 50, 1000)
    assert np.all(np.diff(a) >= 0) and a.shape == (1000,)
    assert not np.array_equal(a, montecarlo.null_sample("pearson", p, 51, 1000))


@pytest.mark.parametrize("alpha", [0.01, 1e-5])  # exact scores, then binned scores (B x 3000 > MAX_WORK)
def test_from_codes_equals_counts_version(alpha):
    """Seed 0: a Dirichlet(0.3) law over 3000 outcomes, 5 runs of 200 rows; the codes form (used by
    the calibration benchmark) gives the same method and p-values as the counts form."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(3000, 0.3))
    codes = rng.choice(3000, size=(5, 200), p=p)
    counts = np.stack([np.bincount(c, minlength=3000) for c in codes])
    (a, ma), (b, mb) = surprisal_pvalues(counts, p, alpha=alpha), surprisal_pvalues_from_codes(codes, p, alpha=alpha)
    assert ma == mb and np.allclose(a, b)
    assert ma == ("monte-carlo" if alpha == 0.01 else "monte-carlo (binned scores)")
