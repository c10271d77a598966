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
from typing import Sequence

import numpy as np

from verifier.errors import invalid_argument

__all__ = ["CollisionResult", "collision_test", "collision_mde", "identical_pairs", "poisson_binomial_sf"]

MDE_TOL = 1e-4  # bisection tolerance of the minimum detectable excess (a probability)


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
    """Law of ``S`` on ``0..L-1`` by convolution, and the mass left out above it.  ``L`` caps the support at
    ``mean + 40 sd + 100`` (the upper tail beyond it is below a Bernstein bound of about 1e-25): the mass
    that would pass the cap is counted in ``lost`` and :func:`_tail` adds it back, so p-values stay upper
    bounds, and the cost is O(m L) rather than O(m^2) for many pairs of small collision probability."""
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
    reject with probability >= ``power`` (1.0 when not even identical completions everywhere would)."""
    pi = np.asarray(probs, dtype=np.float64)
    crit = _critical(_pmf(pi), alpha)
    if crit > pi.size:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > MDE_TOL:
        mid = (lo + hi) / 2
        if _pmf(np.minimum(1.0, pi + mid))[0][crit:].sum() >= power:
            hi = mid
        else:
            lo = mid
    return hi


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
    return CollisionResult(statistic=s, pvalue=pvalue, pairs=int(pi.size), expected=float(pi.sum()), collision_prob=c,
                           critical=_critical(pmf, alpha), mde=collision_mde(pi, alpha=alpha, power=power),
                           alpha=float(alpha), power=float(power))


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
