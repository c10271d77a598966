"""The opt-in shared Pearson null (issue 17 part 4 proposal): with SPECVERIFY_SHARED_PEARSON_NULL=1 the
10-floor Monte Carlo p-value comes from the law-keyed stream (verifier.stats.montecarlo), otherwise from
the cell's own generator, bit for bit as before."""

from __future__ import annotations

import numpy as np

from verifier.stats import gof, montecarlo
from verifier.stats.gof import SHARED_PEARSON_NULL_ENV, gof_test
from verifier.stats.pooling import pool_categories

LAW = np.array([0.5, 0.3, 0.2])
COUNTS = np.array([465, 335, 200])  # n = 1000, X2 near the chi-square(2) tail at alpha ~ 1e-2


def test_default_draws_from_the_cells_generator(monkeypatch):
    monkeypatch.delenv(SHARED_PEARSON_NULL_ENV, raising=False)
    res = gof_test(COUNTS, LAW, pvalue_method="monte-carlo", num_resamples=4000, rng=5, num_bootstrap=0)
    want = gof._monte_carlo_pvalue(float(gof._pearson(COUNTS, LAW)), 1000, LAW, 4000, np.random.default_rng(5))
    assert (res.pvalue, res.num_resamples) == want


def test_opt_in_draws_from_the_shared_stream(monkeypatch):
    monkeypatch.setenv(SHARED_PEARSON_NULL_ENV, "1")
    pooled = pool_categories(LAW, 1000).expected_probs
    want = montecarlo.sequential_pvalue(float(gof._pearson(COUNTS, LAW)), "pearson", pooled, 1000, 4000)
    for rng in (5, 6):  # the cell's generator no longer matters: every cell testing this law shares the stream
        res = gof_test(COUNTS, LAW, pvalue_method="monte-carlo", num_resamples=4000, rng=rng, num_bootstrap=0)
        assert (res.pvalue, res.num_resamples) == want
    own = gof._monte_carlo_pvalue(float(gof._pearson(COUNTS, LAW)), 1000, LAW, 4000, np.random.default_rng(5))[0]
    assert abs(want[0] - own) < 4 * np.sqrt(own * (1 - own) / 4000) + 1e-3  # the same estimator: within Monte Carlo error


def test_shared_stream_null_rejection_rate():
    """Calibration of the shared stream, seed 20261201: 2000 null data sets (n = 1000..1019, so 20 streams)
    at alpha = 0.05 with B = 400: rate within 4 binomial s.e. of alpha (it detects a rate off by >= 0.02)."""
    rng = np.random.default_rng(20261201)
    rejected = runs = 0
    for n in range(1000, 1020):
        for _ in range(100):
            stat = float(gof._pearson(rng.multinomial(n, LAW), LAW))
            p, _ = montecarlo.sequential_pvalue(stat, "pearson", LAW, n, 400)
            rejected += p <= 0.05
            runs += 1
    assert abs(rejected / runs - 0.05) <= 4 * np.sqrt(0.05 * 0.95 / runs), rejected
