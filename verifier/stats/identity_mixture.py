"""The sign-mixture identity test of TV cells: ``sum log cosh(a_i Z_i)`` (issue 27, opt-in ``tv_test = "mixture"``).

The weighted statistic of :mod:`verifier.stats.identity` is quadratic in every pooled category's standardised
deviation ``Z_i = (x_i - n p_i) / sqrt(n p_i)``.  Against a perturbation ``delta_i = +-c p_i^gamma`` with a fair,
unknown sign per category the Neyman--Pearson statistic (Gaussian limit, independent categories) is

``S = sum_i log cosh(a_i Z_i)``,  ``a_i = sqrt(n) c p_i^(gamma - 1/2)`` (the mean shift of ``Z_i``),

quadratic where ``a_i Z_i`` is small (the light categories: ``a_i^2 Z_i^2 / 2``, as the weighted statistic) and
linear, ``|a_i Z_i|``, where it is large (the heavy categories, whose shift at TV 0.03 is 2-3 standard deviations
on the shipped pair), where a square wastes power on the noise.  The test fixes ``gamma = GAMMA0 = 0.75`` (between
the planned least favourable exponents 2/3 and 0.8; chosen on the shipped pair's T = 1 joint cell, reports/benchmarks.md
section 25) and ``c = 2 tune_tv / sum p^gamma`` (``sum |delta| = 2 tune_tv``: the suite's target TV) before any data.

The test
--------
Same pooling as Pearson's and the weighted test (expected count >= 10 at n), same Monte Carlo p-value
(``B = 50 / alpha`` null draws of ``Multinomial(n, pooled p)``, Besag--Clifford at 50 exceedances), from the *same*
seeded multinomial stream as the weighted test (:func:`verifier.stats.identity._null_draws`, keyed by the statistic
and its ``a``).  A token with target prob 0 is a support violation (p-value 0).

Power, minimum detectable effect, samples needed
------------------------------------------------
``S`` is not quadratic, so Imhof's formula does not apply: the power is **measured** -- the test's own decision
threshold (the 50th largest of the first ``50 / alpha - 1`` draws of its seeded null stream: exactly when the p-value
is <= alpha), and seeded multinomial draws from every alternative of :data:`ALTERNATIVES`: the planned least favourable
laws (:func:`verifier.stats.identity.least_favourable`, one fixed sign split, gamma in 1/2, 2/3, 0.8, 1) and the same
magnitudes with random signs (a new sign vector every ``runs / 20`` draws), which a test tuned to one sign split
would miss.  The power is the smallest rejection rate.  ``mixture_samples_needed`` bisects n from the weighted test's
plan down, each step a measurement, so planning costs minutes per cell at alpha 1e-4 (``50 / alpha`` null draws per n).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from verifier.stats._validate import check_alpha, check_fraction, check_positive_int, check_probs
from verifier.stats.identity import (ALTERNATIVE_EXPONENTS, IdentityResult, _decision_threshold, _mc_pvalue,
                                     _test_inputs, identity_samples_needed, least_favourable)
from verifier.stats.pooling import MIN_EXPECTED_COUNT, _pool

__all__ = ["GAMMA0", "ALTERNATIVES", "mixture_statistic", "random_sign_law", "mixture_test", "mixture_power",
           "mixture_mde", "mixture_samples_needed"]

GAMMA0 = 0.75  # the statistic's exponent: a_i ~ p_i^(GAMMA0 - 1/2) (module docstring)
ALTERNATIVES = tuple(("fixed", g) for g in ALTERNATIVE_EXPONENTS) + tuple(("random", g) for g in ALTERNATIVE_EXPONENTS)
SIGN_GROUPS = 20  # random-sign alternatives: a new sign vector every runs / SIGN_GROUPS draws
DEFAULT_RUNS = 4000  # measured power: draws per alternative (s.e. 0.0016 near 0.99)
_CHUNK = 4000


def _scales(p: np.ndarray, n: int, tune_tv: float) -> np.ndarray:
    return math.sqrt(n) * (2.0 * tune_tv / float(np.sum(p ** GAMMA0))) * p ** (GAMMA0 - 0.5)


def mixture_statistic(counts, probs: np.ndarray, tune_tv: float) -> np.ndarray:
    """``sum_i log cosh(a_i Z_i)`` of count vectors (module docstring).

    Parameters
    ----------
    counts, probs
        As :func:`verifier.stats.identity.identity_statistic`: pooled counts of shape (..., K), rows summing to one n,
        and the pooled null law of shape (K,).
    tune_tv : float
        The TV the weights are tuned to (``sum |delta| = 2 tune_tv``).

    Returns
    -------
    np.ndarray, shape (...,), float64
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = float(counts.reshape(-1, counts.shape[-1])[0].sum())
    a = _scales(probs, n, tune_tv)
    y = np.abs(a * (counts - n * probs) / np.sqrt(n * probs))
    return (y + np.log1p(np.exp(-2.0 * y))).sum(axis=-1)  # log cosh(y) + log 2, overflow-free


def random_sign_law(p: np.ndarray, eps: float, gamma: float, rng: np.random.Generator) -> np.ndarray:
    """``q = p + delta``, ``delta_i = s_i c p_i^gamma`` with fair random signs ``s_i``, recentred (``- sum(delta)
    p^gamma / sum p^gamma``) and scaled to ``sum |delta| = 2 eps``.

    Parameters
    ----------
    p : np.ndarray, shape (K,), float64, K >= 2
    eps : float
        TV of the alternative.
    gamma : float
    rng : np.random.Generator

    Returns
    -------
    np.ndarray, shape (K,): a law (clipped at 0 and renormalised where ``eps`` is too large for the shape).
    """
    v = p ** gamma
    d = np.zeros_like(v)
    while not np.abs(d).sum() > 1e-12 * v.sum():  # all signs equal recentre to zero (probability 2^(1 - K)): draw again
        d = v * rng.choice(np.array([-1.0, 1.0]), size=p.size)
        d -= d.sum() * v / v.sum()
    d *= 2 * eps / np.abs(d).sum()
    q = np.clip(p + d, 0.0, None)
    return q / q.sum()


def _key(tune_tv: float) -> tuple:
    return ("mixture", GAMMA0, float(tune_tv))


def mixture_test(counts, expected_probs, *, tune_tv: float, alpha: float = 0.01, power: float = 0.99,
                 min_expected: float = MIN_EXPECTED_COUNT, draws: int | None = None, mde: bool = True) -> IdentityResult:
    """Sign-mixture identity test of ``counts`` against ``expected_probs`` (module docstring).

    Parameters
    ----------
    counts, expected_probs, alpha, power, min_expected, draws
        As :func:`verifier.stats.identity.identity_test` (counts and law of shape (vocab,); alpha sets the ``50 /
        alpha`` null draws and the MDE's level).
    tune_tv : float
        TV in (0, 1) the statistic is tuned to (the suite's target TV), fixed before the data.
    mde : bool, default True
        False: skip the (measured) minimum detectable effect (``mde_tv`` nan).

    Returns
    -------
    IdentityResult
        ``statistic`` is S.

    Raises
    ------
    InvalidArgumentError
        Bad probs or counts, shapes that differ, alpha / power / tune_tv outside (0, 1), n < 1.
    """
    tune_tv = check_fraction(tune_tv, "tune_tv")
    probs, n, x, p, violation, draws = _test_inputs(counts, expected_probs, alpha, power, min_expected, draws)
    if p.size < 2:
        return IdentityResult(math.nan, 0.0 if violation else 1.0, 0, int(p.size), math.inf, violation)
    s = float(mixture_statistic(x, p, tune_tv))
    stat = functools.partial(mixture_statistic, tune_tv=tune_tv)
    pvalue, used = (0.0, 0) if violation else _mc_pvalue(s, p, n, draws, stat, _key(tune_tv))
    tv = mixture_mde(n, probs, tune_tv=tune_tv, alpha=alpha, power=power, min_expected=min_expected) if mde else math.nan
    return IdentityResult(s, pvalue, used, int(p.size), tv, violation)


@functools.lru_cache(maxsize=256)
def _power_pooled(p_bytes: bytes, n: int, alpha: float, eps: float, tune_tv: float, runs: int) -> tuple[float, str]:
    p = np.frombuffer(p_bytes, dtype=np.float64)
    stat = functools.partial(mixture_statistic, tune_tv=tune_tv)
    crit = _decision_threshold(p, n, alpha, stat, _key(tune_tv))
    tol = 1e-9 * max(abs(crit), 1.0)
    rng = np.random.default_rng([20261204, n, p.size])
    worst, label = 1.0, ""
    for kind, gamma in ALTERNATIVES:
        hits = 0
        for g in range(SIGN_GROUPS if kind == "random" else 1):
            size = runs // SIGN_GROUPS if kind == "random" else runs
            q = random_sign_law(p, eps, gamma, rng) if kind == "random" else least_favourable(p, eps, gamma)
            for start in range(0, size, _CHUNK):
                x = rng.multinomial(n, q, size=min(_CHUNK, size - start))
                hits += int(np.count_nonzero(mixture_statistic(x, p, tune_tv) > crit + tol))
        rate = hits / (runs if kind == "fixed" else SIGN_GROUPS * (runs // SIGN_GROUPS))
        if rate < worst:
            worst, label = rate, f"{kind} gamma {gamma:.3g}"
    return worst, label


def _pooled(expected_probs, n: int, min_expected: float) -> np.ndarray:
    probs = check_probs(expected_probs, "expected_probs")
    return np.ascontiguousarray(_pool(probs, check_positive_int(n, "n"), float(min_expected)).expected_probs)


def mixture_power(n, expected_probs, eps: float, *, tune_tv: float | None = None, alpha: float = 0.01,
                  min_expected: float = MIN_EXPECTED_COUNT, runs: int = DEFAULT_RUNS) -> tuple[float, str]:
    """Measured power of :func:`mixture_test` at ``n`` against every alternative of :data:`ALTERNATIVES` at TV ``eps``.

    Parameters
    ----------
    n : int
    expected_probs : array_like, shape (vocab,), float64
    eps : float
        TV of the alternatives, in (0, 1).
    tune_tv : float, optional
        TV the statistic is tuned to (default ``eps``).
    alpha : float, default 0.01
    min_expected : float, default 10
    runs : int, default 4000
        Seeded multinomial draws per alternative (deterministic: the seed is fixed by n and K).

    Returns
    -------
    (float, str)
        The smallest rejection rate and the alternative it was measured at; ``(0.0, "")`` at one pooled category.

    Raises
    ------
    InvalidArgumentError
        Bad probs, n or runs < 1, alpha / eps / tune_tv outside (0, 1).
    """
    p = _pooled(expected_probs, n, min_expected)
    eps = check_fraction(eps, "eps")
    tune = eps if tune_tv is None else check_fraction(tune_tv, "tune_tv")
    runs = check_positive_int(runs, "runs", SIGN_GROUPS)
    if p.size < 2:
        return 0.0, ""
    return _power_pooled(p.tobytes(), int(n), check_alpha(alpha), eps, tune, runs)


def mixture_mde(n, expected_probs, *, tune_tv: float, alpha: float = 0.01, power: float = 0.99,
                min_expected: float = MIN_EXPECTED_COUNT, runs: int = 1000) -> float:
    """Smallest TV detected with measured probability ``power`` (bisection on :func:`mixture_power`, to 1%
    relative; ``inf`` at one category or when TV 0.5 is not detected).

    Parameters
    ----------
    n, expected_probs, tune_tv, alpha, min_expected
        As :func:`mixture_power`.
    power : float, default 0.99
    runs : int, default 1000
        Draws per alternative and step (an MDE for the report; planning uses :data:`DEFAULT_RUNS`).

    Returns
    -------
    float
        The TV; ``InvalidArgumentError`` as :func:`mixture_power`.
    """
    p = _pooled(expected_probs, n, min_expected)
    power = check_fraction(power, "power")
    if p.size < 2:
        return math.inf

    def ok(eps: float) -> bool:
        return mixture_power(n, expected_probs, eps, tune_tv=tune_tv, alpha=alpha, min_expected=min_expected,
                             runs=runs)[0] >= power

    lo, hi = 0.0, 0.5
    if not ok(hi):
        return math.inf
    while hi - lo > 0.01 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def mixture_samples_needed(expected_probs, eps: float, *, alpha: float = 0.01, power: float = 0.99,
                           min_expected: float = MIN_EXPECTED_COUNT, runs: int = DEFAULT_RUNS, n_min: int = 2,
                           n_max: int = 10**8, rel_tol: float = 0.02) -> int | None:
    """Smallest n (to ``rel_tol``) at which the measured :func:`mixture_power` at TV ``eps`` is >= ``power``: the
    certificate's n, or None when ``n_max`` does not suffice (``InvalidArgumentError`` as :func:`mixture_power`).

    Starts from the weighted test's plan (:func:`verifier.stats.identity.identity_samples_needed`), brackets by
    factors of 0.85 down (or 1.1 up) and bisects; every step is a measurement with its own null stream.
    """
    check_probs(expected_probs, "expected_probs")
    eps, alpha, power = check_fraction(eps, "eps"), check_alpha(alpha), check_fraction(power, "power")
    start = identity_samples_needed(expected_probs, eps, alpha=alpha, power=power, min_expected=min_expected, n_min=n_min)
    if start is None:
        return None

    def ok(n: int) -> bool:
        return mixture_power(n, expected_probs, eps, alpha=alpha, min_expected=min_expected, runs=runs)[0] >= power

    hi = min(start, n_max)
    while not ok(hi):
        hi = int(math.ceil(hi * 1.1))
        if hi > n_max:
            return None
    lo = max(n_min, int(hi * 0.85))
    while lo > n_min and ok(lo):
        hi, lo = lo, max(n_min, int(lo * 0.85))
    while hi - lo > max(1, int(rel_tol * hi)):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
