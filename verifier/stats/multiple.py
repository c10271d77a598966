"""Multiple comparisons across all cells of a suite.

``mode="gate"`` (CI): family-wise error rate ``alpha`` (default 1e-3) split in two halves:
  * Holm step-down at ``alpha / 2`` over the cells (localises which cells are biased; valid
    under any dependence), and
  * a combination test at ``alpha / 2`` that catches many small biases no single cell sees:
    Fisher's method for independent cells; for cells that share randomness (``dependent=True``)
    the Cauchy combination (Liu & Xie 2020, valid under arbitrary dependence in the tail) or
    Bonferroni (``combine="bonferroni"``).
  The family rejects if either rejects (union bound: FWER <= alpha).  ``weights`` (the planned alpha allocation,
  :mod:`verifier.stats.allocation`) make the Holm half weighted Holm: still FWER <= alpha / 2 for weights fixed
  before the data.
``mode="audit"``: false discovery rate ``alpha`` (default 0.05) with Benjamini–Hochberg, or
Benjamini–Yekutieli when cells are dependent.

statsmodels ``multipletests`` and scipy ``combine_pvalues`` do the work; nothing is reimplemented
except the one-line Cauchy combination statistic, whose tail comes from ``scipy.stats.cauchy``.

References
----------
Holm, S. (1979). A simple sequentially rejective multiple test procedure. *Scand. J. Stat.* 6.
Benjamini, Y. & Hochberg, Y. (1995); Benjamini, Y. & Yekutieli, D. (2001). *Ann. Stat.* 29.
Liu, Y. & Xie, J. (2020). Cauchy combination test. *JASA* 115(529).
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests

from verifier.errors import invalid_argument
from verifier.stats._validate import check_alpha, short

__all__ = ["GATE_ALPHA", "AUDIT_Q", "Adjustment", "adjust"]

GATE_ALPHA = 1e-3  # docs/ARCHITECTURE.md "Statistical defaults": family-wise alpha of the CI gate
AUDIT_Q = 0.05  # docs/ARCHITECTURE.md "Statistical defaults": Benjamini–Hochberg q of the audit mode
_MODES = ("gate", "audit")
_COMBINE = ("auto", "fisher", "cauchy", "bonferroni")
_CAUCHY_P_FLOOR = 1e-300  # p = 0 (support violation) -> log(0) in Fisher, tan overflow in Cauchy


@dataclass(frozen=True)
class Adjustment:
    """Outcome of :func:`adjust`.

    Attributes
    ----------
    rejected : np.ndarray, shape (cells,), bool
        Cells declared biased (Holm in gate mode, BH/BY in audit mode).
    adjusted_pvalues : np.ndarray, shape (cells,)
        Holm- (gate) or BH/BY- (audit) adjusted p-values, comparable with ``cell_alpha``.
    family_rejected : bool
        Gate: some cell rejected or the combination test rejected.  Audit: some cell rejected.
    combined_pvalue : float or None
        p-value of the combination test (gate mode), else None.
    alpha, cell_alpha, combine_alpha : float
        Family level, level of the per-cell procedure, level of the combination test.
    method : str
        e.g. ``"holm+fisher"``, ``"holm+cauchy"``, ``"fdr_bh"``.
    mode : str
    """

    rejected: np.ndarray
    adjusted_pvalues: np.ndarray
    family_rejected: bool
    combined_pvalue: float | None
    alpha: float
    cell_alpha: float
    combine_alpha: float
    method: str
    mode: str

    def __iter__(self):
        return iter((self.rejected, self.adjusted_pvalues))


@contextlib.contextmanager
def _frozen_gc():
    """statsmodels' Holm branch calls ``gc.collect()`` on every call (0.6 s with torch loaded);
    freezing the existing objects first makes that collection nearly free and changes nothing else."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _pvalues_iv(pvalues) -> np.ndarray:
    """Accept p-values or CellTestResult-like objects; a support violation counts as p = 0."""
    items = list(pvalues) if not isinstance(pvalues, np.ndarray) else pvalues
    if len(items) == 0:
        raise invalid_argument("pvalues", [], "at least one cell")
    if not isinstance(items, np.ndarray) and hasattr(items[0], "pvalue"):
        items = [0.0 if getattr(r, "support_violations", ()) else r.pvalue for r in items]
    try:
        p = np.asarray(items, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_argument("pvalues", short(items), "numbers in [0, 1] or CellTestResult objects") from None
    if p.ndim != 1 or not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise invalid_argument("pvalues", short(p), "a 1-D array of p-values in [0, 1] (no NaN)")
    return p


def adjust(pvalues, alpha: float | None = None, mode: str = "gate", dependent: bool = False, combine: str = "auto",
           weights=None) -> Adjustment:
    """Correct per-cell p-values for multiple comparisons across a suite.

    Parameters
    ----------
    pvalues : array_like, shape (cells,), or sequence of CellTestResult
        One p-value per cell.  Results with a support violation count as p = 0.
    alpha : float or None
        Family level; default ``GATE_ALPHA`` (1e-3) for the gate, ``AUDIT_Q`` (0.05) for audit.
    mode : {"gate", "audit"}, default "gate"
    dependent : bool, default False
        True when cells share randomness (same samples at several positions, overlapping prompts):
        the gate combines with Cauchy instead of Fisher; audit uses BY instead of BH.
    combine : {"auto", "fisher", "cauchy", "bonferroni"}, default "auto"
        Gate-mode combination test; "auto" is Fisher, or Cauchy when ``dependent``.  Fisher with
        ``dependent=True`` is refused (it assumes independent cells).
    weights : array_like, shape (cells,), positive, optional
        Gate mode only: the Holm half is weighted Holm with these weights (scaled to sum 1; fixed before the data:
        :mod:`verifier.stats.allocation`), cell i's strictest step ``(alpha / 2) w_i``; the combination half is
        unchanged.  None: Holm (equal weights).

    Returns
    -------
    Adjustment
        Unpacks as ``(rejected, adjusted_pvalues)``.

    Raises
    ------
    InvalidArgumentError
        Empty input, NaN or out-of-range p-values, alpha outside (0, 1), unknown mode/combine, weights not positive
        or not one per cell, weights in audit mode.

    Examples
    --------
    >>> res = adjust([0.5, 1e-6, 0.2], alpha=1e-3)
    >>> res.rejected.tolist(), res.family_rejected, res.method
    ([False, True, False], True, 'holm+fisher')
    """
    p = _pvalues_iv(pvalues)
    if mode not in _MODES:
        raise invalid_argument("mode", mode, "'gate' | 'audit'")
    if combine not in _COMBINE:
        raise invalid_argument("combine", combine, " | ".join(repr(c) for c in _COMBINE))
    alpha = check_alpha(GATE_ALPHA if alpha is None and mode == "gate" else AUDIT_Q if alpha is None else alpha)
    if weights is not None and mode != "gate":
        raise invalid_argument("weights", short(weights), "None in audit mode (weighted Holm is the gate's)")
    if mode == "audit":
        method = "fdr_by" if dependent else "fdr_bh"
        rejected, adjusted, _, _ = multipletests(p, alpha=alpha, method=method)
        return Adjustment(rejected, adjusted, bool(rejected.any()), None, alpha, alpha, 0.0, method, mode)
    combine = ("cauchy" if dependent else "fisher") if combine == "auto" else combine
    if combine == "fisher" and dependent:
        raise invalid_argument("combine", "fisher", "'cauchy' or 'bonferroni' when dependent=True (Fisher assumes independent cells)")
    half = alpha / 2
    if weights is not None:
        from verifier.stats.allocation import weighted_holm

        rejected, adjusted = weighted_holm(p, weights, half)
    else:
        with _frozen_gc():
            rejected, adjusted, _, _ = multipletests(p, alpha=half, method="holm")
    combined = _combine(p, combine)
    holm = "weighted-holm" if weights is not None else "holm"
    return Adjustment(rejected, adjusted, bool(rejected.any() or combined <= half), combined, alpha, half, half,
                      f"{holm}+{combine}", mode)


def _combine(p: np.ndarray, combine: str) -> float:
    if combine == "fisher":
        return float(stats.combine_pvalues(np.maximum(p, _CAUCHY_P_FLOOR), method="fisher").pvalue)
    if combine == "bonferroni":
        return float(min(1.0, p.min() * p.size))
    # Cauchy combination: T = mean(tan((0.5 - p) pi)) is standard Cauchy under the null
    t = np.mean(np.tan((0.5 - np.maximum(p, _CAUCHY_P_FLOOR)) * np.pi))
    return float(stats.cauchy.sf(t))
