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


def test_surprisal_beyond_the_exact_simulation_budget_keeps_its_level(monkeypatch):
    """Beyond MAX_WORK the surprisal test took a normal p-value; at small n on a peaked law (0.99 on
    one outcome, the rest spread thin -- a joint law over 385^2 pairs at low temperature) the sum
    of surprisals is far from normal: null rejection rate 0.0138 at alpha = 1e-3 (n = 50).  Exact
    size here: the statistic depends only on the number r ~ Bin(50, 0.01) of rare outcomes."""
    from verifier.stats.surprisal import surprisal_pvalues, surprisal_test

    monkeypatch.setattr(montecarlo, "MAX_WORK", 10_000_000)  # 20_000 draws x 1000 categories no longer fit
    k, n, alpha = 1000, 50, 1e-3
    probs = np.full(k, 0.01 / (k - 1))
    probs[0] = 0.99
    size = 0.0
    counts = []
    for r in range(n + 1):
        c = np.zeros(k, dtype=np.int64)
        c[0], c[1] = n - r, r
        counts.append(c)
        res = surprisal_test(c, probs, alpha=alpha)
        assert res.method != "normal"
        if res.pvalue <= alpha:
            size += sps.binom.pmf(r, n, 0.01)
    assert size <= alpha, size
    p_vec, method = surprisal_pvalues(np.array(counts), probs, alpha=alpha)
    assert method != "normal"
    assert sps.binom.pmf(np.arange(n + 1), n, 0.01)[p_vec <= alpha].sum() <= alpha


P3 = [0.5, 0.3, 0.2]


def _bad_surprisal_calls():
    from verifier.stats.surprisal import surprisal_pvalues, surprisal_pvalues_from_totals

    return [
        ("alpha", lambda: surprisal_pvalues([[1, 2, 3]], P3, alpha=0)),  # ZeroDivisionError
        ("alpha", lambda: surprisal_pvalues([[1, 2, 3]], P3, alpha=2)),  # accepted
        ("num_resamples", lambda: surprisal_pvalues([[1, 2, 3]], P3, num_resamples=-5)),  # silently a wrong B
        ("num_resamples", lambda: surprisal_pvalues([[1, 2, 3]], P3, num_resamples=100.5)),  # TypeError
        ("alpha", lambda: surprisal_pvalues_from_totals([5.0], 3, P3, alpha=0)),
        ("totals", lambda: surprisal_pvalues_from_totals([math.nan], 3, P3)),  # p = 2 / (B + 1): a rejection
        ("totals", lambda: surprisal_pvalues_from_totals(["x"], 3, P3)),  # ValueError
        ("totals", lambda: surprisal_pvalues_from_totals([[1.0, 2.0]], 3, P3)),  # 2-d accepted
    ]


@pytest.mark.parametrize("index", range(8))
def test_surprisal_vector_functions_check_their_arguments(index):
    name, call = _bad_surprisal_calls()[index]
    with pytest.raises(InvalidArgumentError, match=name):
        call()


def _bad_calls():
    from verifier.stats.gof import gof_pvalues, gof_pvalues_from_codes, gof_test

    p = np.array(P3)
    return [
        ("codes", lambda: gof_pvalues_from_codes(np.zeros((0, 5), dtype=np.int64), P3)),  # ValueError (min of empty)
        ("min_expected", lambda: gof_test([1, 2, 3], P3, min_expected="x")),  # ValueError
        ("min_expected", lambda: gof_test([1, 2, 3], P3, min_expected=math.nan)),  # silently untestable pooling
        ("min_expected", lambda: gof_test([1, 2, 3], P3, min_expected=-1)),
        ("min_expected", lambda: gof_pvalues([[1, 2, 3]], P3, min_expected=math.nan)),
        ("min_expected", lambda: pool_categories(P3, 10, min_expected=math.inf)),
        ("alpha", lambda: montecarlo.draws_for(0)),  # ZeroDivisionError
        ("kind", lambda: montecarlo.null_sample("x", p, 3, 100)),  # ValueError
        ("draws", lambda: montecarlo.null_sample("pearson", p, 3, 0)),  # ValueError (concatenate)
        ("draws", lambda: montecarlo.null_sample("pearson", p, 3, -1)),
        ("n", lambda: montecarlo.null_sample("pearson", p, 0, 100)),  # an all-NaN null sample
        ("probs", lambda: montecarlo.null_sample("pearson", np.array([0.0, 1.0]), 3, 100)),  # all-NaN null sample
        ("probs", lambda: montecarlo.null_sample("pearson", np.array([math.nan, 1.0]), 3, 100)),  # ValueError
        ("scores", lambda: montecarlo.null_sample("linear", p, 3, 100, np.array([1.0]))),  # ValueError (matmul)
        ("scores", lambda: montecarlo.null_sample("linear", p, 3, 100)),  # ValueError
        ("observed", lambda: montecarlo.sequential_pvalue(math.nan, "pearson", p, 3, 100)),  # p = 1 / 101
        ("draws", lambda: montecarlo.sequential_pvalue(1.0, "pearson", p, 3, 0)),
        ("observed", lambda: montecarlo.upper_pvalues([math.nan], np.arange(10.0))),  # p = 1 / 11
        ("observed", lambda: montecarlo.two_sided_pvalues([math.nan], np.arange(10.0))),
        ("null_sorted", lambda: montecarlo.upper_pvalues([1.0], np.array([]))),
    ]


@pytest.mark.parametrize("index", range(20))
def test_public_functions_raise_invalid_argument_naming_the_argument(index):
    name, call = _bad_calls()[index]
    with pytest.raises(InvalidArgumentError, match=name):
        call()


def test_null_stream_cache_is_bounded_in_bytes(monkeypatch):
    """The cache held up to 64 streams of any length: a detected bias at a tiny cell alpha simulates
    all B = 20 / alpha draws (2e7 at alpha 1e-6, 160 MB per stream, 10 GB for 64 laws)."""
    monkeypatch.setattr(montecarlo, "_CACHE_BYTES", 2_000_000)
    monkeypatch.setattr(montecarlo, "_cache", type(montecarlo._cache)())
    first = montecarlo.null_sample("pearson", np.array([0.5, 0.3, 0.2]), 30, 50_000).copy()
    for i in range(1, 8):
        probs = np.array([0.5 + 1e-3 * i, 0.3 - 1e-3 * i, 0.2])
        p, used = montecarlo.sequential_pvalue(1e9, "pearson", probs, 30, 100_000)  # never reached: all draws
        assert used == 100_000 and p == pytest.approx(1 / 100_001)
        held = sum(sum(a.nbytes for a in st.parts) + sum(a.nbytes for a in st.sorted.values())
                   for st in montecarlo._cache.values())
        assert held <= 2_000_000 + 2 * 8 * 130_000, held  # the budget + the stream in use
    assert len(montecarlo._cache) < 8
    again = montecarlo.null_sample("pearson", np.array([0.5, 0.3, 0.2]), 30, 50_000)  # evicted: rebuilt, same draws
    assert np.array_equal(again, first)


def test_null_streams_are_reproducible_under_threads():
    """Two threads growing one fresh stream both appended a 1000-draw chunk (the schedule is 1000,
    2000, ...): the stream then differed from its seed's, so 'same args -> same p-value' failed."""
    import threading

    for trial in range(30):
        probs = np.array([0.5, 0.3, 0.2 - 1e-4 * (trial + 1)])
        probs /= probs.sum()
        out = [None] * 8

        def go(j, probs=probs, out=out):
            out[j] = montecarlo.null_sample("pearson", probs, 30, 100_000).copy()

        threads = [threading.Thread(target=go, args=(j,)) for j in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seed = next(st.seed for st in montecarlo._cache.values() if st.probs.tobytes() == probs.tobytes())
        ref = np.sort(montecarlo._Stream(seed, "pearson", probs, 30, None).first(100_000))
        assert all(np.array_equal(o, ref) for o in out), trial
