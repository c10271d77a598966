"""Duplicate/collision test: do independent requests collide only as often as the law says?

A server that shares one random stream across requests, or ignores the request seed so that every
request starts from the same state, returns the same completion to independent requests far more
often than the law of a completion allows.  Each bias cell sees one completion at a time, so none
of them can notice; this test looks at pairs.

Test
----
``n`` completions of one prompt (each its own request: distinct hashed seeds, or no seed field) are
split into ``m = n // 2`` disjoint pairs in request order.  Pair ``i`` is *identical* when its two
completions are (the first ``J`` emitted tokens, EOS included).  Under the null -- the second
completion is an independent draw from the law ``P`` -- given the first completion ``x`` the pair is
identical with probability ``P(x)``, independently across pairs, so the number ``S`` of identical
pairs is Poisson-binomial with the probabilities ``pi_i = P(x_i)`` of the first completions: an exact
conditional law (no normal or Poisson approximation), whose mean is the expected count.  The
p-value is the upper tail ``P(S >= s)``; one-sided, because only an excess is a defect.
``P(x)`` is the product of the processed probs along ``x``: from the exact target where a local
target exists, or from the law the server reported (:mod:`verifier.server.reported_law`).  The
collision probability ``sum_x P(x)^2 = E[P(X)]`` is estimated by the mean of ``P`` over all ``n``.

Power
-----
The smallest excess the cell detects (:func:`collision_mde`) is the ``delta`` such that, with every
pair identical with probability ``pi_i + delta``, the test rejects at level ``alpha`` with probability
``power``.  A server that returns the same completion to every request has ``delta = 1 - pi``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from verifier.errors import invalid_argument

__all__ = ["CollisionResult", "collision_test", "collision_mde", "identical_pairs", "poisson_binomial_sf"]

MDE_TOL = 1e-4  # resolution of the minimum detectable excess (a probability)
MDE_GRID = 2 ** math.ceil(math.log2(1 / MDE_TOL))  # the MDE is k / MDE_GRID: where a bisection of [0, 1] to MDE_TOL stops


@dataclass(frozen=True)
class CollisionResult:
    """The collision test's outcome; unpacks as ``(statistic, pvalue)``.

    Attributes
    ----------
    statistic : int
        Identical pairs ``S``.
    pvalue : float
        ``P(S' >= S)`` under the null (Poisson-binomial, exact).
    pairs : int
        Pairs tested ``m``.
    expected : float
        Expected identical pairs under the null, ``sum pi_i``.
    collision_prob : float
        Estimated collision probability ``sum_x P(x)^2`` (mean of ``P`` over every completion).
    critical : int
        Smallest ``S`` the test rejects at ``alpha`` (``pairs + 1``: none).
    mde : float
        Smallest excess per-pair collision probability detected with probability ``power``.
    alpha, power : float
    """

    statistic: int
    pvalue: float
    pairs: int
    expected: float
    collision_prob: float
    critical: int
    mde: float
    alpha: float
    power: float

    def __iter__(self):
        return iter((self.statistic, self.pvalue))

    @property
    def excess(self) -> float:
        """Observed excess identical-pair rate, ``(S - expected) / pairs``."""
        return (self.statistic - self.expected) / self.pairs if self.pairs else 0.0


def poisson_binomial_sf(probs: Sequence[float], k: int) -> float:
    """``P(S >= k)`` for ``S`` a sum of independent Bernoulli(``probs``) (exact, by convolution).

    >>> round(poisson_binomial_sf([0.5, 0.5], 1), 6)
    0.75
    """
    pi = np.asarray(probs, dtype=np.float64)
    return _tail(_pmf(pi), int(k), pi)


def _pmf(probs: np.ndarray) -> tuple[np.ndarray, float]:
    """Law of ``S`` on ``0..L-1`` and the mass left out above it.  ``L`` caps the support at ``mean + 40 sd + 100``
    (the upper tail beyond it is below a Bernstein bound of about 1e-25): the mass that would pass the cap is
    counted in ``lost`` and :func:`_tail` adds it back, so p-values stay upper bounds, and the cost is O(m L)
    rather than O(m^2) for many pairs of small collision probability."""
    mean, var = float(probs.sum()), float((probs * (1.0 - probs)).sum())
    return _capped_law(probs, int(min(probs.size, math.ceil(mean + 40.0 * math.sqrt(var) + 100.0))) + 1)


def _capped_law(probs: np.ndarray, cap: int) -> tuple[np.ndarray, float]:
    """``(P(S = 0..L-1), P(S >= cap))`` with ``L = min(m + 1, cap)``, exact up to rounding (sums of products of
    non-negative terms: tiny tails keep their relative precision).

    A balanced tree of pairwise products of the Bernoulli laws, every product truncated at ``cap`` with the mass
    above it carried in ``lost`` (the part of a sum that reached ``cap`` stays there: every term is >= 0); one
    level multiplies all its pairs at once (:func:`_product_rows`), so the Python work is O(cap log m), the
    arithmetic O(m cap)."""
    laws = np.stack([1.0 - probs, probs], axis=1)[:, :max(1, cap)]  # (m, width): the law of one pair
    lost = probs.copy() if cap <= 1 else np.zeros(probs.size)  # (m,): mass at or above cap
    while laws.shape[0] > 1:
        if laws.shape[0] % 2:  # an odd row out: pair it with the law of 0 (S + 0 = S)
            laws = np.vstack([laws, np.eye(1, laws.shape[1])])
            lost = np.append(lost, 0.0)
        (a, b), (la, lb) = (laws[0::2], laws[1::2]), (lost[0::2], lost[1::2])
        laws, over = _product_rows(a, b, cap)
        lost = la + a.sum(axis=1) * lb + over  # P(A >= cap) + P(A < cap, B >= cap) + P(A, B < cap, A + B >= cap)
    return laws[0], float(lost[0])


def _product_rows(a: np.ndarray, b: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise convolution of the laws ``a`` (rows, wa) and ``b`` (rows, wb) kept below index ``cap``, and each
    row's mass at or above it: ``sum_{i + j >= cap} a_i b_j``."""
    if a.shape[1] > b.shape[1]:
        a, b = b, a  # loop over the narrower law
    rows, wa = a.shape
    wb = b.shape[1]
    width = min(wa + wb - 1, cap)
    out = np.zeros((rows, width))
    for i in range(min(wa, width)):
        k = min(wb, width - i)
        out[:, i:i + k] += a[:, i:i + 1] * b[:, :k]
    suffix = np.concatenate([np.cumsum(b[:, ::-1], axis=1)[:, ::-1], np.zeros((rows, 1))], axis=1)  # [:, t] = b[t:].sum()
    over = (a * suffix[:, np.clip(cap - np.arange(wa), 0, wb)]).sum(axis=1)
    return out, over


def _tail(law: tuple[np.ndarray, float], s: int, probs: np.ndarray) -> float:
    """``P(S >= s)`` from :func:`_pmf`'s law: the kept tail plus the mass left out; beyond the cap, the
    Bernstein bound ``exp(-t^2 / (2 (var + t / 3)))``, ``t = s - mean``."""
    pmf, lost = law
    if s > probs.size:
        return 0.0  # more identical pairs than pairs
    if s < pmf.size:
        return float(min(1.0, pmf[max(0, s):].sum() + lost))
    mean, var = float(probs.sum()), float((probs * (1.0 - probs)).sum())
    t = s - mean
    return float(min(1.0, lost + math.exp(-t * t / (2.0 * (var + t / 3.0))))) if t > 0 else 1.0


def _critical(law: tuple[np.ndarray, float], alpha: float) -> int:
    """Smallest ``s`` with ``P(S >= s) <= alpha``."""
    pmf, lost = law
    tail = np.cumsum(pmf[::-1])[::-1] + lost  # tail[s] >= P(S >= s)
    hits = np.flatnonzero(tail <= alpha)
    return int(hits[0]) if hits.size else pmf.size


def collision_mde(probs: Sequence[float], *, alpha: float, power: float) -> float:
    """Smallest ``delta`` such that identical-pair probabilities ``min(1, pi_i + delta)`` make the test
    reject with probability >= ``power`` (1.0 when not even identical completions everywhere would).

    ``delta`` is the smallest multiple of ``1 / MDE_GRID`` that reaches the power: the point where a bisection
    of ``[0, 1]`` to :data:`MDE_TOL` stops.

    >>> collision_mde([0.1] * 50, alpha=1e-3, power=0.99)
    0.32952880859375
    """
    pi = np.asarray(probs, dtype=np.float64)
    return _mde(pi, _critical(_pmf(pi), alpha), power)


def _mde(pi: np.ndarray, crit: int, power: float) -> float:
    """:func:`collision_mde` given the critical count.  A normal approximation of the power brackets ``delta``
    (no exact evaluation); exact Poisson-binomial powers then bisect the grid inside the bracket, widened until
    it holds the answer.  The power is monotone in ``delta``, so the result is the grid point a plain bisection
    of ``[0, 1]`` returns, with 4-8 exact evaluations instead of 14, each truncated at ``crit``."""
    if crit > pi.size:
        return 1.0

    def reaches(k: int) -> bool:  # exact: P(S >= crit) with every pi raised by k / MDE_GRID
        return _capped_law(np.minimum(1.0, pi + k / MDE_GRID), crit)[1] >= power

    guess = _normal_guess(pi, crit, power)
    lo, hi = 0, MDE_GRID  # lo fails (never evaluated: delta 0), hi reaches (every pair identical: S = m >= crit)
    step = max(1, guess // 32)
    if reaches(guess):
        hi = guess
        while hi - step > lo and reaches(hi - step):  # widen downwards until a point fails
            hi, step = hi - step, 2 * step
        lo = max(lo, hi - step)
    else:
        lo = guess
        while lo + step < hi and not reaches(lo + step):
            lo, step = lo + step, 2 * step
        hi = min(hi, lo + step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    return hi / MDE_GRID


def _normal_guess(pi: np.ndarray, crit: int, power: float) -> int:
    """The grid point (1..MDE_GRID - 1) where the normal approximation of ``S`` (continuity-corrected) reaches the
    power: vectorised, no convolution."""
    z = NormalDist().inv_cdf(power)
    lo, hi = 0, MDE_GRID
    while hi - lo > 1:
        mid = (lo + hi) // 2
        q = np.minimum(1.0, pi + mid / MDE_GRID)
        if q.sum() - (crit - 0.5) >= z * math.sqrt(float((q * (1.0 - q)).sum())):
            hi = mid
        else:
            lo = mid
    return min(hi, MDE_GRID - 1)


def identical_pairs(completions: Sequence[Sequence[int]]) -> np.ndarray:
    """Whether each disjoint pair ``(2i, 2i + 1)`` of ``completions`` is identical; shape (n // 2,), bool."""
    return np.array([tuple(completions[2 * i]) == tuple(completions[2 * i + 1]) for i in range(len(completions) // 2)],
                    dtype=bool)


def collision_test(first_probs: Sequence[float], identical: Sequence[bool], *, collision_prob: float | None = None,
                   alpha: float = 0.01, power: float = 0.99) -> CollisionResult:
    """One-sided exact test of the identical-pair count against the law (module docstring).

    Parameters
    ----------
    first_probs : sequence of float, shape (m,)
        ``P(x)`` of the first completion of each pair under the null law, in [0, 1].
    identical : sequence of bool, shape (m,)
        Whether the pair's two completions are identical (:func:`identical_pairs`).
    collision_prob : float, optional
        The law's collision probability when known (exact, or the mean of ``P`` over every
        completion); default the mean of ``first_probs``.
    alpha : float, default 0.01
        Level of the test (the cell's share of the family's alpha).
    power : float, default 0.99
        Power at which :attr:`CollisionResult.mde` is stated.

    Returns
    -------
    CollisionResult

    Raises
    ------
    InvalidArgumentError
        Lengths differ, a probability outside [0, 1], fewer than one pair, alpha or power outside (0, 1).

    Notes
    -----
    Valid when the requests are independent under the null and ``P`` is the law the server samples
    from; the first completions may be anything (the test conditions on them).

    Examples
    --------
    Every request returns the same completion (a shared random stream), 20 pairs at ``P(x) = 0.1``:

    >>> res = collision_test([0.1] * 20, [True] * 20, alpha=0.001)
    >>> res.statistic, res.pvalue < 1e-15, res.critical
    (20, True, 8)
    """
    pi, same = _collision_iv(first_probs, identical, alpha, power)
    pmf = _pmf(pi)
    s = int(same.sum())
    pvalue = _tail(pmf, s, pi)
    c = float(pi.mean()) if collision_prob is None else float(collision_prob)
    crit = _critical(pmf, alpha)
    return CollisionResult(statistic=s, pvalue=pvalue, pairs=int(pi.size), expected=float(pi.sum()), collision_prob=c,
                           critical=crit, mde=_mde(pi, crit, power), alpha=float(alpha), power=float(power))


def _collision_iv(first_probs, identical, alpha, power) -> tuple[np.ndarray, np.ndarray]:
    pi = np.asarray(first_probs, dtype=np.float64)
    same = np.asarray(identical, dtype=bool)
    if pi.ndim != 1 or pi.size < 1:
        raise invalid_argument("first_probs", f"shape {pi.shape}", "at least one pair (n >= 2 completions)")
    if same.shape != pi.shape:
        raise invalid_argument("identical", f"shape {same.shape}", f"shape {pi.shape} (one flag per pair)")
    if not np.all(np.isfinite(pi)) or pi.min() < 0 or pi.max() > 1 + 1e-9:
        raise invalid_argument("first_probs", float(pi[~((pi >= 0) & (pi <= 1))][0]) if pi.size else None,
                               "probabilities in [0, 1]")
    for name, v in (("alpha", alpha), ("power", power)):
        if not (isinstance(v, (int, float)) and 0 < v < 1 and math.isfinite(v)):
            raise invalid_argument(name, v, "a number in (0, 1)")
    return np.minimum(pi, 1.0), same
