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


def _reference_pooling(probs: np.ndarray, n: int, min_expected: float):
    """The pooling rule written out plainly (the code before the per-law sort was kept): sort the support by prob
    descending, expected counts n p, tail sums from the smallest up, the largest admissible head, ``np.bincount``."""
    order = np.argsort(-probs, kind="stable")
    support = order[probs[order] > 0]
    expected = n * probs[support]
    tail = np.append(np.cumsum(expected[::-1])[::-1], 0.0)
    size = len(support)
    cands = np.arange(int(np.count_nonzero(expected >= min_expected)) + 1)
    ok = (cands == size) | (tail[cands] >= min_expected)
    ok[0] = ok[0] and size > 0 and tail[0] >= min_expected
    m = int(cands[ok].max()) if ok.any() else 0
    groups = np.full(probs.shape[0], -1, dtype=np.int64)
    groups[support[:m]] = np.arange(m)
    groups[support[m:]] = m
    if m == 0 and size:
        groups[support] = 0
    num = int(groups.max()) + 1 if size else 0
    return groups, num, np.bincount(groups[groups >= 0], weights=probs[groups >= 0], minlength=num)


@pytest.mark.parametrize("seed", range(4))
def test_pooling_equals_the_plain_rule_bit_for_bit(seed):
    """The per-law sort and reversed cumulative sums give the plain rule's categories and the same float64 probs
    (ties, zeros, one-outcome and all-head laws, both floors, n from 1 to 200,000)."""
    rng = np.random.default_rng(seed)
    for trial in range(150):
        vocab = int(rng.choice([1, 2, 3, 8, 17, 50, 384, 3000]))
        probs = rng.dirichlet(np.full(vocab, rng.choice([0.05, 0.3, 1.0, 5.0])))
        if rng.random() < 0.3:
            probs[rng.integers(0, vocab, size=max(1, vocab // 4))] = 0.0
        if rng.random() < 0.3:
            probs = np.round(probs, 3)  # ties
        if probs.sum() == 0:
            continue
        probs /= probs.sum()
        for n in [1, 10, *rng.integers(1, 200_000, size=3).tolist()]:
            for floor in (10.0, 1.0):
                groups, num, expected = _reference_pooling(probs, n, floor)
                got = pooling._pool_uncached(probs, n, floor)
                assert got.num_categories == num and np.array_equal(got.groups, groups)
                assert got.expected_probs.tobytes() == expected.tobytes()


def test_law_key_is_per_law_and_one_key_serves_every_n():
    probs = np.array([0.5, 0.3, 0.2])
    key = pooling.law_key(probs)
    assert key == pooling.law_key(probs.copy()) and key != pooling.law_key(np.array([0.5, 0.2, 0.3]))
    for n in (10, 100, 1000):
        assert pooling._pool(probs, n, 10.0, key) is pooling._pool(probs, n, 10.0)


@pytest.mark.parametrize("power", [0.0, -0.1, 1.0, True, 1.5, float("nan")])
def test_gof_mde_and_gof_test_refuse_a_power_outside_0_1(power):
    """The MDE's power is checked where the caller gives it (the breaker found it unchecked once the MDE stopped
    going through min_detectable_effect: power 0 claimed TV 0 detectable)."""
    from verifier.errors import InvalidArgumentError
    from verifier.stats.gof import gof_mde, gof_test

    with pytest.raises(InvalidArgumentError, match="power"):
        gof_mde(1000, [0.2, 0.5, 0.3], power=power)
    with pytest.raises(InvalidArgumentError, match="power"):
        gof_test([200, 500, 300], [0.2, 0.5, 0.3], power=power)


def test_the_stated_mde_pools_as_the_test_does():
    """A uniform law whose expected counts sit exactly at the floor (n p = 10): the test keeps 100 categories, and so
    does the MDE it states (it used to pool the law normalised twice, which fell below the floor: df 0, MDE inf)."""
    from verifier.stats.gof import gof_mde, gof_test

    probs = np.full(100, 0.01)
    assert pooling.pool_categories(probs, 1000).num_categories == 100
    mde = gof_mde(1000, probs, alpha=0.01)
    result = gof_test(np.full(100, 10), probs, alpha=0.01)
    assert mde.df == result.df == 99 and mde.tv == result.mde.tv < 0.2
