"""Adversarial review of the small-sample GOF regime, the Monte Carlo null streams and the
surprisal cell: memory on huge category spaces, Besag-Clifford validity, the normal fallback of
the surprisal test, and argument checks (InvalidArgumentError, never a bare traceback)."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from scipy import stats as sps

from verifier.errors import InvalidArgumentError
from verifier.stats import montecarlo
from verifier.stats.pooling import pool_categories


def test_pooling_a_joint_law_over_385_squared_categories_stays_small_in_memory():
    """2000 categories at n p = 1.25 (the floor-1 pooling keeps them apart) in a 385^2 joint law:
    pooling the counts used a dense (categories x groups) indicator, 2.4 GB."""
    k = 385 ** 2
    probs = np.full(k, 1e-9)
    probs[:2000] = 1 / 2000
    probs /= probs.sum()
    counts = np.random.default_rng(0).multinomial(2500, probs)
    pooling = pool_categories(probs, 2500, min_expected=1.0)
    assert pooling.num_categories == 2000
    tracemalloc.start()
    try:
        pooled = pooling.pool(counts)
        batched = pooling.pool(np.stack([counts, counts]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50e6, peak
    expected = np.bincount(pooling.groups[pooling.groups >= 0], weights=counts[pooling.groups >= 0], minlength=2000)
    assert pooled.dtype == counts.dtype and np.array_equal(pooled, expected)
    assert np.array_equal(batched, np.stack([pooled, pooled]))
    assert np.allclose(pooling.pool(counts.astype(float) / 3), expected / 3)


def _reference_bc(stream_values: np.ndarray, observed: float, draws: int, two_sided: bool) -> float:
    """Besag & Clifford (1991): stop at the h-th draw reaching the observed value (l <= draws):
    p = h / l; else p = (1 + g) / (1 + draws).  Two-sided: each tail so, p = min(1, 2 min)."""
    h = montecarlo.STOP_EXCEEDANCES
    tol = 1e-9 * max(abs(observed), 1.0)
    values = stream_values[:draws]
    tails = [values >= observed - tol] + ([values <= observed + tol] if two_sided else [])
    ps = []
    for hit in tails:
        where = np.flatnonzero(hit)
        ps.append(h / (where[h - 1] + 1) if where.size >= h else (1 + where.size) / (1 + draws))
    return min(1.0, 2 * min(ps)) if two_sided else ps[0]


@pytest.mark.parametrize("two_sided", [False, True])
@pytest.mark.parametrize("quantile", [0.5, 0.99, 0.994, 0.999])
def test_sequential_pvalue_stops_at_the_h_th_exceedance(two_sided, quantile):
    """The early stop reported g / L at a chunk boundary (g >= h): not the Besag-Clifford p-value,
    and not valid -- for a continuous statistic g at the first boundary (1000 draws) is uniform
    on 0..1000, so with B = 2000 P(p <= 0.0345) = 35/1001 > 0.0345."""
    probs = np.array([0.05, 0.15, 0.3, 0.5])
    scores = -np.log(probs) + np.array([0.0, 1e-3, 2e-3, 3e-3])  # few ties
    draws = 6000
    values = montecarlo._stream("linear", probs, 40, scores).first(draws)
    observed = float(np.quantile(values, quantile))
    p, used = montecarlo.sequential_pvalue(observed, "linear", probs, 40, draws, scores, two_sided=two_sided)
    assert p == pytest.approx(_reference_bc(values, observed, draws, two_sided), rel=1e-12)
    assert used <= draws


def test_gof_monte_carlo_pvalue_stops_at_the_h_th_exceedance():
    from verifier.stats.gof import _monte_carlo_pvalue, _pearson

    probs = np.array([0.1, 0.2, 0.3, 0.4])
    draws = 100_000
    for statistic in (1.0, 3.0, 5.0, 8.0):
        p, _ = _monte_carlo_pvalue(statistic, 50, probs, draws, np.random.default_rng(1))
        rng, sims, size = np.random.default_rng(1), [], 100  # the same draws: chunks of 100, 200, 400, ...
        while sum(map(len, sims)) < draws:
            sims.append(_pearson(rng.multinomial(50, probs, size=min(size, draws - sum(map(len, sims)))), probs))
            size *= 2
        assert p == pytest.approx(_reference_bc(np.concatenate(sims), statistic, draws, False), rel=1e-12)
