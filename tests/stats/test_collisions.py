"""``collision_mde`` and the Poisson-binomial law behind the collision test: fast, and the values they had.

Before session 12 the law was convolved one Bernoulli at a time and the MDE bisected [0, 1] with 14 exact laws
of up to ``mean + 40 sd + 100`` entries: about 6 s at 16,000 pairs and 16 s at 25,000 (70 s measured under
load).  Now a balanced tree of products builds the law, a normal approximation brackets the MDE and each
exact power is truncated at the critical count (3-10 exact laws, 0.2-0.4 s on those cases).  The answer
is the same grid point: the old implementation is kept below as the reference, and the two large cases
compare with the values it returned (computed by it before the change: ``collision_mde(pi, alpha=...,
power=0.99)`` on the arrays built in :func:`_large`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifier.stats import collisions
from verifier.stats.collisions import MDE_TOL, collision_mde, collision_test


# --- the implementation before the change (reference) ------------------------------------------------------------
def _old_pmf(probs: np.ndarray) -> tuple[np.ndarray, float]:
    mean, var = float(probs.sum()), float((probs * (1.0 - probs)).sum())
    cap = int(min(probs.size, math.ceil(mean + 40.0 * math.sqrt(var) + 100.0))) + 1
    pmf, lost = np.ones(1), 0.0
    for p in probs:
        if pmf.size == cap:
            lost += float(pmf[-1] * p)
        nxt = np.zeros(min(pmf.size + 1, cap))
        nxt[:pmf.size] += pmf[:nxt.size] * (1.0 - p)
        nxt[1:] += pmf[:nxt.size - 1] * p
        pmf = nxt
    return pmf, lost


def _old_mde(probs, *, alpha: float, power: float) -> float:
    pi = np.asarray(probs, dtype=np.float64)
    crit = collisions._critical(_old_pmf(pi), alpha)
    if crit > pi.size:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > MDE_TOL:
        mid = (lo + hi) / 2
        if _old_pmf(np.minimum(1.0, pi + mid))[0][crit:].sum() >= power:
            hi = mid
        else:
            lo = mid
    return hi


# --- cases ---------------------------------------------------------------------------------------------------------
def _small():
    r = np.random.default_rng(2)
    yield "mix800", np.where(r.random(800) < 0.2, r.uniform(0.2, 0.6, 800), r.uniform(0, 0.01, 800)), 1e-3, 0.99
    yield "flat50", np.full(50, 0.1), 1e-3, 0.99
    yield "tiny3k", np.random.default_rng(3).uniform(0, 1e-4, 3000), 1e-3, 0.9
    yield "half500", np.random.default_rng(4).uniform(0.4, 0.6, 500), 1e-6, 0.99
    yield "sure100", np.full(100, 0.99), 1e-3, 0.99
    yield "zeros1k", np.zeros(1000), 1e-3, 0.99
    yield "one", np.array([0.3]), 0.05, 0.5


def _large():
    yield "u16k", np.random.default_rng(0).uniform(0, 0.02, 16000), 1e-4, 0.00531005859375
    yield "u25k", np.random.default_rng(1).uniform(0, 0.02, 25000), 1e-5, 0.00457763671875


SMALL, LARGE = list(_small()), list(_large())


@pytest.mark.parametrize("name, pi, alpha, power", SMALL, ids=[c[0] for c in SMALL])
def test_mde_is_the_old_bisections_value(name, pi, alpha, power):
    new, old = collision_mde(pi, alpha=alpha, power=power), _old_mde(pi, alpha=alpha, power=power)
    assert new == pytest.approx(old, rel=1e-3) and new == old  # the same grid point, in fact


@pytest.mark.parametrize("name, pi, alpha, old", LARGE, ids=[c[0] for c in LARGE])
def test_large_mde_is_the_stored_old_value_with_few_exact_laws(name, pi, alpha, old, monkeypatch):
    laws = []
    real = collisions._capped_law
    monkeypatch.setattr(collisions, "_capped_law", lambda p, cap: laws.append(cap) or real(p, cap))
    assert collision_mde(pi, alpha=alpha, power=0.99) == pytest.approx(old, rel=1e-3)
    assert len(laws) - 1 <= 8  # the null law, then the exact powers (the old bisection: 14 full laws)
    assert max(laws[1:]) < 400  # each truncated at the critical count, not at mean + 40 sd + 100


@pytest.mark.parametrize("name, pi, alpha, power", SMALL, ids=[c[0] for c in SMALL])
def test_law_and_p_values_match_the_sequential_convolution(name, pi, alpha, power):
    pmf, lost = collisions._pmf(pi)
    ref, ref_lost = _old_pmf(pi)
    assert pmf.shape == ref.shape and lost == pytest.approx(ref_lost, rel=1e-9, abs=1e-300)
    big = ref > 1e-290
    np.testing.assert_allclose(pmf[big], ref[big], rtol=1e-9)
    for s in {min(pi.size, s) for s in (0, 1, int(pi.sum()) + 1, int(pi.sum() + 5 * math.sqrt(pi.sum() + 1)), pi.size)}:
        same = np.arange(pi.size) < s
        got, want = collision_test(pi, same, alpha=alpha).pvalue, collisions._tail((ref, ref_lost), s, pi)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300)


def test_tiny_p_values_keep_their_precision():
    """400 of 400 pairs identical at P(x) = 0.05 (a shared stream): p = 0.05^400 is far below 1e-300 in the tail of
    the law, so the left-out mass must be carried exactly (a 1 - sum would leave ~1e-16)."""
    res = collision_test([0.05] * 400, [True] * 400, alpha=1e-3)
    assert res.pvalue < 1e-50
    res = collision_test([0.05] * 400, [True] * 40 + [False] * 360, alpha=1e-3)
    exact = float(sum(math.comb(400, k) * 0.05 ** k * 0.95 ** (400 - k) for k in range(40, 401)))
    assert res.pvalue == pytest.approx(exact, rel=1e-9)
