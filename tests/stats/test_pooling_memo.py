"""_pool's memo (issue 17 part 4): the same pooling as computing it afresh, read-only, bounded in bytes."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.stats import pooling


def test_memoised_pooling_equals_a_fresh_one():
    rng = np.random.default_rng(3)
    for vocab, n, floor in [(3, 1000, 10.0), (50, 400, 10.0), (50, 400, 1.0), (385, 2500, 10.0), (7, 5, 10.0)]:
        probs = rng.dirichlet(np.full(vocab, 0.3))
        probs[rng.integers(0, vocab)] = 0.0
        probs /= probs.sum()
        fresh = pooling._pool_uncached(probs, n, floor)
        for _ in range(2):  # a miss, then a hit
            got = pooling._pool(probs, n, floor)
            assert got.num_categories == fresh.num_categories
            assert np.array_equal(got.groups, fresh.groups)
            assert got.expected_probs.tobytes() == fresh.expected_probs.tobytes()
        assert pooling._pool(probs, n, floor) is got
        assert pooling._pool(probs, n + 1, floor) is not got  # n is part of the key
        with pytest.raises(ValueError):
            got.groups[0] = 5  # shared between callers: read-only


def test_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(pooling, "_MEMO_BYTES", 40_000)
    monkeypatch.setattr(pooling, "_memo", type(pooling._memo)())
    monkeypatch.setattr(pooling, "_memo_bytes", 0)
    for i in range(20):
        pooling._pool(np.full(1000, 1e-3), 100 + i, 10.0)  # ~8 KB of groups each
    assert pooling._memo_bytes <= 40_000 and 1 <= len(pooling._memo) <= 5
