"""Neyman–Pearson oracle: the fewest samples any test can need to tell a mutant's law from the target's.

Against one known alternative, the most powerful level-``alpha`` test of ``H0: X_i ~ null`` vs
``H1: X_i ~ alt`` (iid) rejects for a large log-likelihood ratio ``L_n = sum_i log(alt(X_i) /
null(X_i))``, randomising on the boundary (Neyman–Pearson lemma).  Its power is nondecreasing in
``n`` (the test at ``n + 1`` may ignore one sample), so the oracle n -- the smallest n with power
>= ``power`` -- is found by bisection.  No harness test can beat it; the benchmark reports every
battery's sample size as a multiple of it.

Reductions (exact): outcomes with equal ratio ``alt / null`` (compared as :class:`fractions.Fraction`
when the laws are rational) are merged -- ``L_n`` depends on the counts per ratio class only.
Outcomes with ``null = 0 < alt`` (support violations) reject at first sight: power
``1 - (1 - v)^n (1 - beta')`` with ``beta'`` the power of the test of the rest.  Outcomes with
``alt = 0 < null`` make ``L_n = -inf`` (never reject), so the remaining test may spend
``alpha / (1 - z)^n``.

Methods
-------
``"exact"``
    Enumerate every count vector over the ratio classes (multinomial probabilities from
    ``gammaln``), sort by ``L_n``, take the null's upper ``alpha`` region with randomisation on the
    boundary value (ties within 1e-9).  Used while the number of count vectors is at most
    ``EXACT_MAX_OUTCOMES`` (always for <= 3 ratio classes at n up to ~2400).
``"saddlepoint"``
    Lugannani–Rice tail approximation of ``L_n`` under the null and, by exponential tilting,
    under the alternative (the alternative's cumulant generating function is ``K(t + 1)``);
    relative error O(1/n).  Used beyond the exact budget (the tabular cases have 5-40 ratio
    classes).  Cross-checked against the exact method in ``tests/bench``.

References
----------
Neyman, J. & Pearson, E. S. (1933). On the problem of the most efficient tests of statistical hypotheses.
Lugannani, R. & Rice, S. (1980). Saddle point approximation for the distribution of the sum of
independent random variables. *Adv. Appl. Prob.* 12(2).  Butler, R. W. (2007). *Saddlepoint
Approximations with Applications*, ch. 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

import numpy as np
from scipy import optimize, special, stats

from verifier.errors import invalid_argument

__all__ = ["OracleResult", "np_oracle_power", "np_oracle_samples", "EXACT_MAX_OUTCOMES"]

EXACT_MAX_OUTCOMES = 1_500_000  # count vectors enumerated by "exact" (~1 s each); beyond: saddlepoint
MAX_ORACLE_SAMPLES = 10**9  # bisection gives up (raises) beyond this
_TIE_RTOL = 1e-9  # log-likelihood ratios this close are one boundary value (randomised together)


@dataclass(frozen=True)
class OracleResult:
    """The Neyman–Pearson oracle sample size of one (null, alternative) pair.

    Attributes
    ----------
    n : int
        Smallest n whose most powerful level-``alpha`` test has power >= ``power``.
    power_at_n : float
        Its power at ``n``.
    method : {"exact", "saddlepoint", "support"}
        How the power at ``n`` was computed ("support": only support violations distinguish the laws).
    ratio_classes : int
        Distinct values of ``alt / null`` on the null's support.
    alpha, power : float
    """

    n: int
    power_at_n: float
    method: str
    ratio_classes: int
    alpha: float
    power: float


class _Pair:
    """A (null, alt) pair reduced to ratio classes: log-ratios ``s``, class masses ``p0`` and ``p1``."""

    def __init__(self, null: Mapping, alt: Mapping) -> None:
        keys = sorted(set(null) | set(alt))
        exact = all(isinstance(null.get(k, 0), (int, Fraction)) and isinstance(alt.get(k, 0), (int, Fraction)) for k in keys)
        classes: dict = {}
        self.violation = 0.0  # alt mass where null = 0
        self.dead = 0.0  # null mass where alt = 0
        for k in keys:
            a, p = alt.get(k, 0), null.get(k, 0)
            if p == 0:
                self.violation += float(a)
                continue
            if a == 0:
                self.dead += float(p)
                continue
            r = Fraction(a) / Fraction(p) if exact else round(float(a) / float(p), 12)
            c = classes.setdefault(r, [0.0, 0.0])
            c[0] += float(p)
            c[1] += float(a)
        ratios = sorted(classes)
        self.p0 = np.array([classes[r][0] for r in ratios])
        self.p1 = np.array([classes[r][1] for r in ratios])
        if self.p0.size:
            self.p0 /= self.p0.sum()
            self.p1 /= self.p1.sum()
        self.s = np.log(self.p1) - np.log(self.p0) if self.p0.size else np.zeros(0)
        self.exact_input = exact

    @property
    def classes(self) -> int:
        return int(self.p0.size)


def _compositions(n: int, r: int) -> np.ndarray:
    """Every count vector of length r summing to n, shape (C(n + r - 1, r - 1), r), built column by column."""
    rows = np.zeros((1, 0), dtype=np.int64)
    left = np.array([n], dtype=np.int64)
    for _ in range(r - 1):
        reps = left + 1  # the next class takes 0..left
        rows = np.repeat(rows, reps, axis=0)
        starts = np.cumsum(reps) - reps
        take = np.arange(int(reps.sum())) - np.repeat(starts, reps)
        rows = np.column_stack([rows, take])
        left = np.repeat(left, reps) - take
    return np.column_stack([rows, left])


def _num_compositions(n: int, r: int) -> int:
    return math.comb(n + r - 1, r - 1)


def _exact_power(pair: _Pair, n: int, level: float) -> float:
    y = _compositions(n, pair.classes)
    llr = y @ pair.s
    log_coef = special.gammaln(n + 1) - special.gammaln(y + 1).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        w0 = np.exp(log_coef + np.where(y > 0, y * np.log(pair.p0), 0.0).sum(axis=1))
        w1 = np.exp(log_coef + np.where(y > 0, y * np.log(pair.p1), 0.0).sum(axis=1))
    order = np.argsort(-llr, kind="stable")
    llr, w0, w1 = llr[order], w0[order], w1[order]
    # boundary groups: equal llr within a relative tolerance
    scale = max(1.0, float(np.max(np.abs(llr))))
    new_group = np.r_[True, np.diff(llr) < -_TIE_RTOL * scale]
    gid = np.cumsum(new_group) - 1
    g0 = np.bincount(gid, weights=w0)
    g1 = np.bincount(gid, weights=w1)
    c0 = np.cumsum(g0)
    j = int(np.searchsorted(c0, level * (1 + 1e-12), side="right"))  # groups 0..j-1 fully in the region
    above0 = c0[j - 1] if j else 0.0
    power = float(g1[:j].sum())
    if j < len(g0) and g0[j] > 0:
        power += float(g1[j]) * min(1.0, (level - above0) / g0[j])  # randomise on the boundary group
    return min(power, 1.0)


def _cgf(pair: _Pair, t: float, shift: float = 0.0) -> tuple[float, float, float]:
    """K, K', K'' at t of the per-sample log-ratio under the null tilted by ``shift`` (1: the alt)."""
    x = (t + shift) * pair.s + np.log(pair.p0)
    m = x.max()
    w = np.exp(x - m)
    z = w.sum()
    k = m + math.log(z)  # sum_j p0_j exp(s_j) = sum_j p1_j = 1, so the tilted law needs no renormalising
    mean = float(w @ pair.s / z)
    var = float(w @ (pair.s - mean) ** 2 / z)
    return k, mean, var


def _lr_tail(pair: _Pair, n: int, c: float, shift: float) -> float:
    """Lugannani–Rice approximation of P(L_n >= c) under the null (shift 0) or the alternative (shift 1)."""
    x = c / n
    lo, hi = float(pair.s.min()), float(pair.s.max())
    if x >= hi:
        return 0.0
    if x <= lo:
        return 1.0
    k0, mean, var = _cgf(pair, 0.0, shift)
    if abs(x - mean) < 1e-10 * max(1.0, abs(mean)):
        third = float(np.sum(np.exp(shift * pair.s + np.log(pair.p0) - k0) * (pair.s - mean) ** 3))
        return 0.5 - third / (6 * math.sqrt(2 * math.pi * n) * var ** 1.5)
    a, b = -1.0, 1.0
    while _cgf(pair, a, shift)[1] > x:
        a *= 2
    while _cgf(pair, b, shift)[1] < x:
        b *= 2
    t = optimize.brentq(lambda u: _cgf(pair, u, shift)[1] - x, a, b, xtol=1e-13)
    k, _, k2 = _cgf(pair, t, shift)
    w = math.copysign(math.sqrt(max(2 * n * (t * x - k), 0.0)), t)
    u = t * math.sqrt(n * k2)
    if abs(w) < 1e-8 or abs(u) < 1e-8:
        return 0.5
    return float(stats.norm.sf(w) + stats.norm.pdf(w) * (1 / u - 1 / w))


def _saddlepoint_power(pair: _Pair, n: int, level: float) -> float:
    lo, hi = n * float(pair.s.min()), n * float(pair.s.max())
    top0 = math.exp(n * math.log(pair.p0[np.argmax(pair.s)]))
    if top0 >= level or _lr_tail(pair, n, hi - 1e-12, 0.0) >= level:
        # n so small that the single most extreme count vector already has null prob >= level:
        # the test randomises on it alone (exact, whatever the method)
        if top0 == 0.0:  # n log p0 underflowed (the saddlepoint tail said >= level): the same ratio in logs, not 0 / 0
            top = np.argmax(pair.s)
            return min(1.0, math.exp(min(0.0, n * (math.log(pair.p1[top]) - math.log(pair.p0[top])) + math.log(level))))
        return min(1.0, math.exp(n * math.log(pair.p1[np.argmax(pair.s)])) * level / top0)
    def excess(c: float) -> float:
        return min(max(_lr_tail(pair, n, c, 0.0), 0.0), 1.0) - level

    a, b = lo + 1e-9 * abs(lo) + 1e-12, hi - 1e-12
    if excess(a) < 0 or excess(b) > 0:  # the approximation misbehaves at an edge: bracket on a grid instead
        grid = np.linspace(a, b, 401)
        vals = np.array([excess(c) for c in grid])
        cross = np.flatnonzero((vals[:-1] >= 0) & (vals[1:] < 0))
        if not cross.size:
            raise ArithmeticError(f"saddlepoint tail never crosses alpha at n={n}")
        a, b = grid[cross[-1]], grid[cross[-1] + 1]
    c = optimize.brentq(excess, a, b, xtol=1e-10)
    return min(max(_lr_tail(pair, n, c, 1.0), 0.0), 1.0)


def _power(pair: _Pair, n: int, alpha: float, method: str) -> tuple[float, str]:
    keep_null = (1.0 - pair.dead) ** n  # null prob that no alt-impossible outcome was seen
    level = min(alpha / keep_null, 1.0) if keep_null > 0 else 1.0
    no_violation = (1.0 - pair.violation) ** n
    if pair.classes < 2 or level >= 1.0:
        cond, used = (1.0 if level >= 1.0 and pair.classes else 0.0), "support"
    else:
        use_exact = method == "exact" or (method == "auto" and _num_compositions(n, pair.classes) <= EXACT_MAX_OUTCOMES)
        cond = _exact_power(pair, n, level) if use_exact else _saddlepoint_power(pair, n, level)
        used = "exact" if use_exact else "saddlepoint"
    return 1.0 - no_violation * (1.0 - cond), used


def _laws_iv(null_law, alt_law) -> tuple[dict, dict]:
    def as_law(law, name):
        if isinstance(law, Mapping):
            out = dict(law)
        else:
            try:
                out = dict(enumerate(np.asarray(law, dtype=np.float64).tolist() if not all(isinstance(v, Fraction) for v in law) else law))
            except (TypeError, ValueError):
                raise invalid_argument(name, law, "a dict outcome -> prob or a 1-D sequence of probs") from None
        vals = [float(v) for v in out.values()]
        if not vals or any(not math.isfinite(v) or v < 0 for v in vals) or abs(sum(vals) - 1) > 1e-9:
            raise invalid_argument(name, list(out.values())[:8], "non-negative probs summing to 1")
        return out

    null, alt = as_law(null_law, "null_law"), as_law(alt_law, "alt_law")
    return null, alt


def np_oracle_power(n: int, null_law, alt_law, alpha: float = 0.01, method: str = "auto") -> float:
    """Power of the most powerful level-``alpha`` test of ``null_law`` against ``alt_law`` at n samples.

    Parameters
    ----------
    n : int
        Samples (>= 1).
    null_law, alt_law : dict outcome -> prob, or sequence of probs
        The target's law and the law the mutant actually samples (e.g. exact laws from
        :func:`verifier.exact.n_token_law`).  Fractions are grouped exactly.
    alpha : float, default 0.01
    method : {"auto", "exact", "saddlepoint"}, default "auto"

    Returns
    -------
    float

    Raises
    ------
    InvalidArgumentError
        Not distributions, n < 1, alpha outside (0, 1), unknown method.

    Examples
    --------
    >>> round(np_oracle_power(1014, [0.2, 0.5, 0.3], [0.26, 0.45, 0.29]), 3)
    0.99
    """
    pair, alpha, method = _iv(null_law, alt_law, alpha, method)
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise invalid_argument("n", n, "an integer >= 1")
    return float(_power(pair, int(n), alpha, method)[0])


def _iv(null_law, alt_law, alpha, method):
    null, alt = _laws_iv(null_law, alt_law)
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise invalid_argument("alpha", alpha, "a number in (0, 1)")
    if method not in ("auto", "exact", "saddlepoint"):
        raise invalid_argument("method", method, "'auto' | 'exact' | 'saddlepoint'")
    return _Pair(null, alt), float(alpha), method


def np_oracle_samples(null_law, alt_law, alpha: float = 0.01, power: float = 0.99, method: str = "auto") -> OracleResult:
    """Neyman–Pearson oracle sample size: smallest n at which the likelihood-ratio test has ``power``.

    Parameters
    ----------
    null_law, alt_law : dict outcome -> prob, or sequence of probs
        Target law and mutant law of the emitted tokens (Fractions are grouped exactly).
    alpha : float, default 0.01
    power : float, default 0.99
    method : {"auto", "exact", "saddlepoint"}, default "auto"
        See the module docstring; "auto" is exact within ``EXACT_MAX_OUTCOMES`` count vectors.

    Returns
    -------
    OracleResult

    Raises
    ------
    InvalidArgumentError
        Equal laws (no n detects), bad laws, alpha or power outside (0, 1), more than 1e9 samples.

    Examples
    --------
    >>> np_oracle_samples([0.2, 0.5, 0.3], [0.26, 0.45, 0.29]).n
    1014
    """
    pair, alpha, method = _iv(null_law, alt_law, alpha, method)
    if not (isinstance(power, (int, float)) and 0 < power < 1):
        raise invalid_argument("power", power, "a number in (0, 1)")
    if pair.violation == 0 and pair.dead == 0 and (pair.classes < 2 or np.allclose(pair.p0, pair.p1, rtol=0, atol=1e-15)):
        raise invalid_argument("alt_law", "equal to null_law", "a law different from null_law")
    return _samples_cached(pair, alpha, float(power), method)


def _samples_cached(pair: _Pair, alpha: float, power: float, method: str) -> OracleResult:
    key = (tuple(pair.p0.round(15)), tuple(pair.p1.round(15)), pair.violation, pair.dead, alpha, power, method)
    return _search(key, pair)


_CACHE: dict = {}  # oracle results by reduced pair (the pair object itself is not hashable)


def _search(key, pair: _Pair) -> OracleResult:
    if key in _CACHE:
        return _CACHE[key]
    alpha, power, method = key[-3], key[-2], key[-1]

    def ok(n: int) -> bool:
        return _power(pair, n, alpha, method)[0] >= power

    # start from the normal approximation n ~ ((z_a sd0 + z_b sd1) / KL-gap)^2, then bracket
    if pair.classes >= 2:
        m0, m1 = float(pair.p0 @ pair.s), float(pair.p1 @ pair.s)
        sd0 = math.sqrt(max(float(pair.p0 @ (pair.s - m0) ** 2), 1e-300))
        sd1 = math.sqrt(max(float(pair.p1 @ (pair.s - m1) ** 2), 1e-300))
        guess = max(int(((stats.norm.isf(alpha) * sd0 + stats.norm.isf(1 - power) * sd1) / (m1 - m0)) ** 2), 1)
    else:
        guess = 1
    if method == "auto" and pair.classes >= 2:  # start from the (fast) saddlepoint answer, then refine exactly
        guess = _search(key[:-1] + ("saddlepoint",), pair).n
    lo, hi = 0, guess
    while not ok(hi):
        lo, hi = hi, int(hi * (1.02 if method == "auto" else 1.25)) + 1
        if hi > MAX_ORACLE_SAMPLES:
            raise invalid_argument("alt_law", "too close to null_law", f"detectable with <= {MAX_ORACLE_SAMPLES} samples")
    if lo == 0:
        step = 0.98 if method == "auto" else 0.8  # a saddlepoint start is within ~2%
        lo = max(int(hi * step), 0)
        while lo >= 1 and ok(lo):
            lo, hi = int(lo * step), lo
    while hi - lo > 1:  # invariant: not ok(lo) (or lo = 0), ok(hi); power is nondecreasing in n
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    value, used = _power(pair, hi, alpha, method)
    out = OracleResult(hi, float(value), used, pair.classes, alpha, power)
    _CACHE[key] = out
    return out
