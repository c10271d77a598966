"""Planned alpha allocation over a family of cells: weighted Holm and the weights that equalise the TV cells' n.

The gate spends ``alpha / 2`` on Holm over the m cells (:func:`verifier.stats.multiple.adjust`); with equal weights
every cell is planned at the strictest step ``alpha / (2 m)``.  Weighted Holm (Holm 1979, section 4) gives cell i a
fixed weight ``w_i > 0`` (``sum w = 1``) and steps down on ``p_i / w_i``: at each step the cell with the smallest
``p_i / w_i`` among those left is rejected when ``p_i <= (alpha / 2) w_i / W``, W the weight still left, and the
procedure stops at the first cell it keeps.  For *any* weights fixed before the data it controls the family-wise
error rate at ``alpha / 2`` under arbitrary dependence (closed testing of weighted Bonferroni tests), so the family
alpha of the gate is unchanged; cell i's strictest step is ``(alpha / 2) w_i``, the level its power is planned at.

**Planned weights** (:func:`equalised_levels`), chosen from the exact laws only, never from the data: each TV cell has
a level it needs at n (the smallest alpha at which its test detects the target TV with the planned power,
:func:`level_needed`); the certificate's n is the smallest n at which the TV cells' needed levels fit in their
share of the Holm half (the share equal weights give them); each TV cell then gets its needed level scaled up so
the share is spent exactly.  The binding cell gets more alpha, the cells with rows to spare less; every other cell
(surprisal, PIT, ...) keeps the equal level ``alpha / (2 m)``.

References
----------
Holm, S. (1979). A simple sequentially rejective multiple test procedure. *Scand. J. Stat.* 6, 65-70 (section 4:
weighted version).
Genovese, C. R., Roeder, K. & Wasserman, L. (2006). False discovery control with p-value weighting.
*Biometrika* 93(3), 509-524.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from verifier.errors import invalid_argument
from verifier.stats._validate import check_alpha, short

__all__ = ["ALLOCATIONS", "MIN_SHARE", "weighted_holm", "level_needed", "equalised_levels", "tv_level_at"]

ALLOCATIONS = ("equal", "planned")  # `audit --alpha-allocation` (AuditSpec.alpha_allocation; "planned" writes [stats] cell_weights)
_LEVEL_FLOOR = 1e-12  # smallest level searched: a cell that needs less is covered at any level the family can give
_LEVEL_REL_TOL = 0.005  # levels to 0.5%: the critical value moves with log(1 / alpha), n by ~0.1% per 0.5% of alpha
# the least a TV cell gets, as a share of its equal level: a Monte Carlo p-value at level a needs 50 / a null draws
# to reject (verifier.stats.identity), so a cell with rows to spare is not sent to levels it cannot afford to resolve
MIN_SHARE = 0.1
_N_REL_TOL = 0.001  # n to 0.1% (the pooling makes the power saw-tooth in n at about that scale)


def _weights_iv(weights, size: int) -> np.ndarray:
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_argument("weights", short(weights), "positive finite numbers, one per cell") from None
    if w.shape != (size,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise invalid_argument("weights", short(w), f"{size} positive finite numbers (one per cell; scaled to sum 1)")
    return w / w.sum()


def weighted_holm(pvalues, weights, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Weighted Holm step-down at family level ``alpha`` (Holm 1979, section 4).

    Parameters
    ----------
    pvalues : array_like, shape (cells,), float64 in [0, 1]
    weights : array_like, shape (cells,), positive
        Fixed before the data; scaled to sum 1.  Equal weights give Holm's procedure exactly.
    alpha : float
        Family-wise error rate, in (0, 1).

    Returns
    -------
    rejected : np.ndarray, shape (cells,), bool
    adjusted : np.ndarray, shape (cells,), float64
        Weighted-Holm adjusted p-values: cell i is rejected iff ``adjusted[i] <= alpha``.

    Raises
    ------
    InvalidArgumentError
        Weights not positive, not one per p-value; alpha outside (0, 1).

    Examples
    --------
    The first cell carries most of the weight: rejected here, where equal weights (Holm) would keep it
    (``2 x 0.03 = 0.06 > 0.05`` at its step).

    >>> rej, adj = weighted_holm([0.03, 0.001, 0.5], [0.8, 0.1, 0.1], alpha=0.05)
    >>> rej.tolist(), [round(float(a), 5) for a in adj]
    ([True, True, False], [0.03375, 0.01, 0.5])
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise invalid_argument("pvalues", short(p), "a 1-D array of p-values in [0, 1]")
    w = _weights_iv(weights, p.size)
    alpha = check_alpha(alpha)
    order = np.argsort(p / w, kind="stable")
    left = np.cumsum(w[order][::-1])[::-1]  # weight still left at each step
    steps = np.minimum(1.0, p[order] * left / w[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.maximum.accumulate(steps)
    return adjusted <= alpha, adjusted


def level_needed(detects: Callable[[float], bool], upper: float) -> float | None:
    """Smallest level in ``[1e-12, upper]`` at which ``detects(level)`` holds (bisection on log level, to 0.5%).

    Parameters
    ----------
    detects : callable(float) -> bool
        True when the cell's test detects the target effect with the planned power at that level (monotone: a
        larger level never detects less).
    upper : float
        Largest level searched (the family's whole Holm half), in (0, 1).

    Returns
    -------
    float or None
        The level; ``1e-12`` when even that suffices; None when ``upper`` does not.

    Raises
    ------
    InvalidArgumentError
        ``upper`` outside (0, 1).
    """
    upper = check_alpha(upper, "upper")
    if not detects(upper):
        return None
    lo, hi = math.log(_LEVEL_FLOOR), math.log(upper)
    if detects(_LEVEL_FLOOR):
        return _LEVEL_FLOOR
    while hi - lo > _LEVEL_REL_TOL:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if detects(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def equalised_levels(level_at: Mapping[str, Callable[[int], float | None]], budget: float, *,
                     min_share: float = MIN_SHARE, n_min: int = 2, n_max: int = 10**8) -> tuple[int | None, dict[str, float]]:
    """The smallest n at which the TV cells' needed levels fit in ``budget``, and the levels that spend it.

    Parameters
    ----------
    level_at : mapping of cell name -> callable(n) -> float or None
        The level the cell needs at n rows (:func:`level_needed` of its test's power at n; None: no level up to
        ``budget`` suffices).  Non-increasing in n up to the pooling's saw-tooth.
    budget : float
        The TV cells' share of the Holm half (equal weights: ``alpha / (2 m)`` per TV cell), in (0, 1).
    min_share : float, default :data:`MIN_SHARE` (0.1)
        Every cell gets at least ``min_share`` of its equal share ``budget / cells``, in [0, 1).
    n_min, n_max : int
        Range of n searched (doubling from ``n_min``, then bisection to 0.1%).

    Returns
    -------
    (int or None, dict)
        n, and per cell its level: the needed level at n (at least the floor ``min_share x budget / cells``) scaled
        so the levels sum to ``budget``.  ``(None, {})`` when ``n_max`` does not suffice.

    Raises
    ------
    InvalidArgumentError
        ``budget`` outside (0, 1), no cells.

    Examples
    --------
    >>> n, lv = equalised_levels({"a": lambda n: 1e3 / n ** 2, "b": lambda n: 4e3 / n ** 2}, budget=1e-3)
    >>> n, {k: round(v / 1e-3, 2) for k, v in lv.items()}
    (2238, {'a': 0.2, 'b': 0.8})
    """
    budget = check_alpha(budget, "budget")
    if not level_at:
        raise invalid_argument("level_at", {}, "at least one TV cell")
    if not 0 <= min_share < 1:
        raise invalid_argument("min_share", min_share, "a share in [0, 1)")
    floor = min_share * budget / len(level_at)

    def levels(n: int) -> dict[str, float] | None:
        out = {}
        for name, at in level_at.items():
            lv = at(n)
            if lv is None:
                return None
            out[name] = max(lv, floor)
        return out if sum(out.values()) <= budget else None

    lo, hi = n_min, n_min
    while levels(hi) is None:
        lo, hi = hi, hi * 2
        if hi > n_max:
            return None, {}
    while hi - lo > max(1, int(_N_REL_TOL * hi)):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if levels(mid) is not None else (mid, hi)
    got = levels(hi)
    scale = budget / sum(got.values())
    return hi, {name: lv * scale for name, lv in got.items()}


def tv_level_at(law: np.ndarray, tv_test: str, target_tv: float, power: float, upper: float) -> Callable[[int], float | None]:
    """The level a TV cell of exact law ``law`` needs at n rows to see ``target_tv`` with probability ``power``.

    Parameters
    ----------
    law : np.ndarray, shape (categories,), float64
        The cell's exact expected law (pooled at n as its test pools it).
    tv_test : {"pearson", "weighted", "mixture"}
        The cell's test.  Pearson: the noncentral chi-square MDE (:func:`verifier.stats.gof.gof_mde`); weighted: the
        computed power (:func:`verifier.stats.identity.identity_power`); mixture: the weighted test's level too --
        the mixture test's power is a measurement (minutes per n and level), so its *weights* are planned with its
        computed-power neighbour (0.96-0.98x its n on the shipped pair), and its n at those levels is then measured.
    target_tv, power : float
    upper : float
        Largest level searched (the Holm half).

    Returns
    -------
    callable(int) -> float or None
        :func:`level_needed` at n.

    Raises
    ------
    InvalidArgumentError
        ``tv_test`` unknown.
    """
    if tv_test == "pearson":
        from verifier.stats.gof import gof_mde

        def detects_at(n: int) -> Callable[[float], bool]:
            return lambda a: gof_mde(n, law, alpha=a, power=power).tv <= target_tv
    elif tv_test in ("weighted", "mixture"):  # the level is computed, not searched (identity_level_needed)
        from verifier.stats.identity import identity_level_needed

        def at(n: int) -> float | None:
            level = identity_level_needed(int(n), law, target_tv, power=power)
            return None if level > upper else max(level, _LEVEL_FLOOR)
        return at
    else:
        raise invalid_argument("tv_test", tv_test, "'pearson' | 'weighted' | 'mixture'")
    return lambda n: level_needed(detects_at(int(n)), upper)
