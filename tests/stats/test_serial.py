"""The serial-correlation test (``verifier.stats.serial``): Ljung--Box with a Monte Carlo p-value under the exact
iid-uniform null.

Calibration (the false-fail rate): 200 seeded sequences of iid Uniform(0, 1) per length, at alpha = 0.05 -- the
rejection count must stay within the 99.9% quantile of Binomial(200, 0.05) (= 21; the Monte Carlo
p-value is exactly valid, so a count above it says the p-value is not).  Power (the false-pass rate): a lag-1
autocorrelation of 0.5 (an AR(1) sequence, PIT'd to uniforms) at n = 200 is above the test's MDE (0.45 at
alpha 1e-3, power 0.99; :func:`serial_mde`) and must be detected at alpha 1e-3 on every one of 20 seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verifier.errors import InvalidArgumentError
from verifier.stats.serial import ljung_box_rows, serial_mde, serial_null_sample, serial_test


def test_vectorised_statistic_is_statsmodels_ljung_box():
    from statsmodels.stats.diagnostic import acorr_ljungbox

    rng = np.random.default_rng(3)
    u = rng.random((4, 57))
    mine = ljung_box_rows(u, 5)
    theirs = [float(acorr_ljungbox(row, lags=[5], return_df=True)["lb_stat"].iloc[0]) for row in u]
    np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_serial_test_reports_statsmodels_statistic_and_autocorrelations():
    """The cell's Q and r_1..r_5 are acorr_ljungbox's and acf's (computed over the 5 lags only, not every lag),
    on a sequence long enough for the FFT route of acf to differ in rounding only."""
    from statsmodels.stats.diagnostic import acorr_ljungbox
    from statsmodels.tsa.stattools import acf

    u = np.random.default_rng(11).random(3_001)
    res = serial_test(u, alpha=0.05)
    assert res.statistic == pytest.approx(float(acorr_ljungbox(u, lags=[5], return_df=True)["lb_stat"].iloc[0]),
                                          rel=1e-10)
    np.testing.assert_allclose(res.acf, acf(u, nlags=5, fft=False)[1:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [40, 200, 800])
def test_false_positive_rate_is_at_most_alpha_over_200_seeded_repetitions(n):
    """Seeds 0..199 (``default_rng([29, n, s])``, null stream ``s``), alpha 0.05: the count of rejections is <= 21,
    the 0.999 quantile of Binomial(200, 0.05).  Numpy only, about 1 s per n."""
    alpha, reps = 0.05, 200
    rejected = sum(serial_test(np.random.default_rng([29, n, s]).random(n), alpha=alpha, null_seed=s).pvalue <= alpha
                   for s in range(reps))
    assert rejected <= stats.binom.ppf(0.999, reps, alpha), rejected


def test_monte_carlo_null_matches_the_chi_square_limit_in_the_bulk():
    """At n = 800 the null's median and 90% point sit within 3% of chi-square(5)'s (the chi-square's trouble is
    the far tail, measured in the module docstring, not the bulk)."""
    null = serial_null_sample(800, 5, 20_000)
    for q in (0.5, 0.9):
        assert abs(np.quantile(null, q) / stats.chi2.ppf(q, 5) - 1) < 0.03


def test_correlated_sequences_are_detected():
    """AR(1) with rho = 0.5 (through the normal CDF: uniforms with lag-1 correlation ~0.48), n = 200, alpha 1e-3,
    seeds 0..19: MDE 0.45 at this n, so each seed must reject."""
    assert serial_mde(200, alpha=1e-3, power=0.99) < 0.48
    for s in range(20):
        rng = np.random.default_rng([7, s])
        z = np.empty(200)
        z[0] = rng.standard_normal()
        for i in range(1, 200):
            z[i] = 0.5 * z[i - 1] + np.sqrt(1 - 0.25) * rng.standard_normal()
        res = serial_test(stats.norm.cdf(z), alpha=1e-3)
        assert res.pvalue <= 1e-3 and res.effect > 0.25, (s, res)


def test_mde_formula():
    """sqrt(lambda / n) with lambda the noncentrality at which chi-square(5)'s level-alpha test has the power."""
    rho = serial_mde(1000, alpha=1e-3, power=0.8)
    crit = stats.chi2.isf(1e-3, 5)
    assert abs(stats.ncx2.sf(crit, 5, 1000 * rho ** 2) - 0.8) < 1e-9
    assert round(rho, 3) == 0.156


def test_result_unpacks_and_states_its_method():
    u = np.random.default_rng(1).random(100)
    q, p = serial_test(u, alpha=0.01)
    res = serial_test(u, alpha=0.01)
    assert (q, p) == (res.statistic, res.pvalue) and res.method.startswith("monte carlo") and len(res.acf) == 5


@pytest.mark.parametrize("bad, match", [
    (np.full(30, 0.5), "non-constant"),
    (np.linspace(0, 1, 10), "at least 20"),
    (np.linspace(-1, 1, 30), r"\[0, 1\]"),
    (np.zeros((5, 5)), "u.ndim"),
])
def test_invalid_input_is_refused(bad, match):
    with pytest.raises(InvalidArgumentError, match=match):
        serial_test(bad)
