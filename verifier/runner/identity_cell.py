"""A TV cell (``gof@t``, ``joint@1..J``) decided by an identity test (``stats.tv_test = "weighted"`` or ``"mixture"``).

Opt-in (issue 27): the default stays Pearson's chi-square (:func:`verifier.runner.analysis.gof_cell`), so no
committed verdict moves.  The cell is the same in every other respect -- the same data-blind pooling at n,
support violations as hard failures, the TV estimate with its interval (:mod:`verifier.stats.effect`) --
but its p-value comes from :func:`verifier.stats.identity.identity_test` (Valiant--Valiant weights
``p^-2/3``, Monte Carlo null from the exact law) and its MDE and ``n_needed`` from that test's power
(:func:`verifier.stats.identity.identity_mde`), which needs 0.57--0.75x Pearson's n for the same TV on the
shipped pair (reports/benchmarks.md §15).  ``"mixture"`` takes the sign-mixture statistic ``sum log cosh(a_i Z_i)``
tuned to the suite's target TV instead (:mod:`verifier.stats.identity_mixture`: the same null stream, a measured
power; reports/benchmarks.md §25).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verifier.errors import invalid_argument
from verifier.runner.analysis import CI_LEVEL, CellResult, _count_cell_inputs, violation_text
from verifier.stats.pooling import MIN_EXPECTED_COUNT, pool_categories

__all__ = ["METHOD", "MIXTURE_METHOD", "DEFAULT_TUNE_TV", "identity_cell", "identity_n_needed"]

METHOD = "weighted identity statistic sum(((x - n p)^2 - x) / p^(2/3)) (Valiant-Valiant), data-blind pooling, monte-carlo p-value"
MIXTURE_METHOD = "sign-mixture identity statistic sum log cosh(a_i Z_i), a_i ~ p_i^(1/4), data-blind pooling, monte-carlo p-value"
DEFAULT_TUNE_TV = 0.03  # the TV the mixture statistic is tuned to when the suite names no target TV


def identity_n_needed(expected_probs: np.ndarray, n: int, *, cell_alpha: float, power: float, target_mde: float,
                      tv_test: str = "weighted") -> int | None:
    """Rows at which the cell's test detects ``target_mde`` with probability ``power`` (from n up)."""
    if tv_test == "mixture":
        from verifier.stats.identity_mixture import mixture_samples_needed

        return mixture_samples_needed(expected_probs, target_mde, alpha=cell_alpha, power=power, n_min=max(int(n), 2))
    from verifier.stats.identity import identity_samples_needed

    return identity_samples_needed(expected_probs, target_mde, alpha=cell_alpha, power=power, n_min=max(int(n), 2))


def identity_cell(cell_id: str, counts: np.ndarray, expected_probs: np.ndarray, *, cell_alpha: float, power: float,
                  rng: np.random.Generator | None = None, label_fn=None, target_mde: float | None = None,
                  tv_test: str = "weighted", **meta: Any) -> CellResult:
    """The weighted (or sign-mixture) identity test of ``counts`` against ``expected_probs`` as a :class:`CellResult`.

    Parameters
    ----------
    counts : np.ndarray, shape (categories,), int64
    expected_probs : np.ndarray, shape (categories,), float64
        Exact law under the null.
    cell_alpha : float
        Per-cell level (Monte Carlo draws ``50 / cell_alpha`` and the level of the MDE).
    power : float
        Power at which the MDE is stated.
    rng : np.random.Generator, optional
        Unused (the null draws come from a stream seeded by the law and n); accepted so the cell is a
        drop-in for :func:`verifier.runner.analysis.gof_cell`.
    label_fn : callable (category index) -> str, optional
    target_mde : float, optional
        The suite's target TV; when the MDE exceeds it, ``n_needed`` is set.  The mixture statistic is tuned to it
        (:data:`DEFAULT_TUNE_TV` when None).
    tv_test : {"weighted", "mixture"}, default "weighted"

    Returns
    -------
    CellResult
        ``method`` :data:`METHOD` (:data:`MIXTURE_METHOD`); ``pvalue = 0`` and ``support_violation`` on a token at
        target prob 0.

    Raises
    ------
    InvalidArgumentError
        ``tv_test`` not "weighted" or "mixture".
    """
    from verifier.stats.effect import _tv_estimate
    from verifier.stats.identity import identity_test

    if tv_test not in ("weighted", "mixture"):
        raise invalid_argument("tv_test", tv_test, "'weighted' | 'mixture'")
    test = meta.pop("test", "gof")
    counts, expected_probs = _count_cell_inputs(counts, expected_probs)
    n = int(counts.sum())
    if n == 0:
        return CellResult(cell_id, test=test, method="no samples", n=0, statistic=math.nan, pvalue=1.0, **meta)
    if tv_test == "mixture":
        from verifier.stats.identity_mixture import mixture_test

        res = mixture_test(counts, expected_probs, tune_tv=target_mde or DEFAULT_TUNE_TV, alpha=cell_alpha, power=power)
    else:
        res = identity_test(counts, expected_probs, alpha=cell_alpha, power=power)
    outside = expected_probs <= 0
    violations = ()
    if res.support_violation:
        from verifier.stats.results import SupportViolation

        violations = tuple(SupportViolation(int(i), int(counts[i])) for i in np.flatnonzero(outside & (counts > 0)))
    violation = violation_text(violations, label_fn)
    pooling = pool_categories(expected_probs, n, min_expected=MIN_EXPECTED_COUNT)
    observed = pooling.pool(counts).astype(np.float64)
    n_out = int(counts[outside].sum())
    eff = _tv_estimate(np.append(pooling.pool(counts), n_out), np.append(pooling.expected_probs, 0.0), CI_LEVEL)
    mde = res.mde_tv if math.isfinite(res.mde_tv) else None
    n_needed = None
    if target_mde is not None and (mde is None or mde > target_mde) and not violation and pooling.num_categories >= 2:
        n_needed = identity_n_needed(expected_probs, n, cell_alpha=cell_alpha, power=power, target_mde=target_mde,
                                     tv_test=tv_test)
    labels = []
    by_group = np.argsort(pooling.groups, kind="stable")
    bounds = np.searchsorted(pooling.groups[by_group], np.arange(pooling.num_categories + 1))
    for g in range(pooling.num_categories):
        members = by_group[bounds[g]:bounds[g + 1]]
        names = [label_fn(int(m)) if label_fn else str(int(m)) for m in members[:3]]
        labels.append(", ".join(names) + (f" +{len(members) - 3}" if len(members) > 3 else ""))
    return CellResult(
        cell_id, test=test, method=("support violation; " if violation else "") + (MIXTURE_METHOD if tv_test == "mixture" else METHOD), n=n,
        statistic=float(res.statistic), pvalue=0.0 if violation else float(res.pvalue), df=res.categories - 1,
        effect=eff.estimate, effect_ci=(eff.ci_low, eff.ci_high), mde=mde if mde is not None else math.inf, mde_w=None,
        cell_alpha=cell_alpha, n_needed=n_needed, support_violation=violation,
        observed=observed.tolist(), expected=(pooling.expected_probs * n).tolist(), labels=labels,
        extra={"num_resamples": res.draws, "effect_method": eff.method, "effect_plug_in": eff.plug_in,
               "tv_test": tv_test}, **meta,
    )
