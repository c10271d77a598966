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
