"""Surprisal cell: the log-likelihood of the emitted tuples under the target's exact law.

For a cell whose outcomes (e.g. the first J emitted tokens of a fixed prompt) have the known
null law ``P``, each row's surprisal is ``s(o) = -log P(o)`` (nats) and the statistic is the
mean surprisal in excess of the entropy,

``D = (1/n) sum_r s(o_r) - H(P)``,   ``E_0[D] = 0``,   ``Var_0[D] = V(P) / n``,

with ``V(P) = sum_o P(o) s(o)^2 - H(P)^2`` the varentropy.  ``D < 0``: the decoder emits too
likely tuples (mode seeking: greedy fallbacks, deterministic or greedy acceptance, a
too-low temperature); ``D > 0``: too unlikely ones (too-high temperature, mass on the tail).

Why this cell: against the tempered family ``P_beta(o) ∝ P(o)^beta`` the log-likelihood ratio
is ``(1 - beta) sum_r s(o_r) + const``, so by the Neyman–Pearson lemma a one-sided test on the
summed surprisal is *uniformly most powerful* against every temperature error of one sign
(Lehmann & Romano 2005, §3.4, monotone likelihood ratio in an exponential family).  The cell is
two-sided because the sign is unknown.  It has one degree of freedom, so it sees a sharpening
with far fewer samples than a chi-square spread over many categories.

P-value: equal-tail two-sided Monte Carlo under ``P`` (:mod:`verifier.stats.montecarlo`,
``B = 20 / alpha`` draws, Besag–Clifford early stop for one observed cell; valid at any n) while ``B x categories``
fits :data:`verifier.stats.montecarlo.MAX_WORK`.  Beyond it (a joint law over 385^2 pairs) the
scores are coarsened data-blind: the support is cut into ``G = MAX_WORK // B`` equal-width bins
of ``s`` and each outcome scores its bin's mean surprisal under ``P``; the binned sum has an
exact Monte Carlo null over G categories (same ``E_0``; power loss ~ bin width / spread of s),
so the p-value stays valid at any n.  Only when even two bins do not fit (``B > MAX_WORK / 2``)
the normal approximation ``z = D sqrt(n / V)`` is used; it is *not* valid at small n on peaked
laws (0.99 on one outcome, n = 50: null rejection rate 0.014 at alpha = 1e-3), and neither is
:func:`surprisal_pvalues_from_totals` beyond the budget (it has no counts to bin).

References
----------
Lehmann, E. L. & Romano, J. P. (2005). *Testing Statistical Hypotheses*, 3rd ed., ch. 3.
Cover, T. M. & Thomas, J. A. (2006). *Elements of Information Theory*, §11.8 (typical sets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from verifier.errors import invalid_argument
from verifier.stats import montecarlo
from verifier.stats._validate import check_alpha, check_counts, check_fraction, check_positive_int, check_probs, short
from verifier.stats.results import SupportViolation

__all__ = ["SurprisalResult", "surprisal_test", "surprisal_pvalues", "surprisal_pvalues_from_codes", "surprisal_pvalues_from_totals",
           "surprisal_mde"]


@dataclass(frozen=True)
class SurprisalResult:
    """Outcome of :func:`surprisal_test`; unpacks as ``(statistic, pvalue)``.

    Attributes
    ----------
    statistic : float
        ``D``, mean surprisal minus entropy, nats per row (0 under the null).
    pvalue : float
        Two-sided; 0 when a support violation was observed.
    method : str
        ``"monte-carlo"``, ``"monte-carlo (binned scores)"`` (beyond MAX_WORK, module docstring),
        ``"normal"`` (not even 2 bins fit), ``"untestable"`` or ``"support violation"``.
    n : int
        Rows (observations) in the cell.
    alpha : float
    entropy, varentropy : float
        ``H(P)`` (nats) and ``V(P)`` (nats^2).
    ci_low, ci_high : float
        Normal confidence interval of the expected excess surprisal (nats) at ``confidence``.
    mde : float
        Smallest ``|E D|`` (nats) detected with probability ``power`` at level ``alpha``.
    support_violations : tuple of SupportViolation
        Categories with null prob 0 that were observed (index = category).
    num_resamples : int
        Monte Carlo draws (0 for the normal method).
    """

    statistic: float
    pvalue: float
    method: str
    n: int
    alpha: float
    entropy: float
    varentropy: float
    ci_low: float
    ci_high: float
    mde: float
    support_violations: tuple = ()
    num_resamples: int = 0

    def __iter__(self):
        return iter((self.statistic, self.pvalue))

    @property
    def rejected(self) -> bool:
        return bool(self.support_violations) or self.pvalue <= self.alpha


def _scores(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    support = probs > 0
    s = np.zeros_like(probs)
    s[support] = -np.log(probs[support])
    h = float(probs[support] @ s[support])
    v = max(float(probs[support] @ s[support] ** 2) - h * h, 0.0)
    return support, s, h, v


def _binned_scores(probs: np.ndarray, s: np.ndarray, draws: int) -> np.ndarray | None:
    """Per-outcome scores of the exact or binned Monte Carlo (module docstring) over the support
    ``probs > 0``: ``s`` itself when ``draws x support`` fits MAX_WORK, else the P-weighted mean
    of ``s`` over equal-width bins of s (``MAX_WORK // draws`` bins); None when not even 2 fit."""
    if draws * probs.size <= montecarlo.MAX_WORK:
        return s
    bins = montecarlo.MAX_WORK // draws
    if bins < 2:
        return None
    lo, hi = float(s.min()), float(s.max())
    which = np.minimum(((s - lo) / max(hi - lo, 1e-300) * bins).astype(np.int64), bins - 1)
    mass = np.bincount(which, weights=probs, minlength=bins)
    mean = np.bincount(which, weights=probs * s, minlength=bins) / np.where(mass > 0, mass, 1.0)
    return mean[which]


def _mc_law(probs: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(law, scores, category of each outcome) of the distinct scores: the null stream simulates one
    category per distinct score (the binned law when the scores were binned)."""
    values, which = np.unique(scores, return_inverse=True)
    return np.bincount(which, weights=probs, minlength=values.size), values, which


def surprisal_mde(n: int, varentropy: float, alpha: float, power: float) -> float:
    """Smallest ``|E D|`` (nats) the two-sided test detects with probability ``power`` (normal approx.)."""
    if n < 1 or varentropy <= 0:
        return math.inf
    return (stats.norm.isf(alpha / 2) + stats.norm.ppf(power)) * math.sqrt(varentropy / n)


def surprisal_pvalues(counts, expected_probs, *, alpha: float = 0.01, num_resamples: int | None = None) -> tuple[np.ndarray, str]:
    """Two-sided surprisal p-values of many count vectors with one common n (vectorised).

    Parameters
    ----------
    counts : array_like, shape (runs, categories), int
        Every row has the same n >= 1.  Counts in categories with expected prob 0 are ignored
        here (they are support violations; :func:`surprisal_test` reports them).
    expected_probs : array_like, shape (categories,), float64
    alpha : float, default 0.01
        Level the p-values must resolve (sets the Monte Carlo draws).
    num_resamples : int or None
        Monte Carlo draws B; default ``max(1000, ceil(20 / alpha))``.

    Returns
    -------
    pvalues : np.ndarray, shape (runs,)
    method : {"monte-carlo", "monte-carlo (binned scores)", "normal", "untestable"}
    """
    probs = check_probs(expected_probs, "expected_probs")
    counts = check_counts(counts, "counts", ndim=2)
    if counts.shape[1] != probs.size:
        raise invalid_argument("counts.shape", counts.shape, f"(runs, {probs.size})")
    alpha = check_alpha(alpha)
    if num_resamples is not None:
        num_resamples = check_positive_int(num_resamples, "num_resamples", minimum=10)
    support, s, h, v = _scores(probs)
    c = counts[:, support]
    n = int(c[0].sum()) if len(c) else 0
    if n == 0 or np.any(c.sum(axis=1) != n):
        raise invalid_argument("counts", "<row totals on the support differ or are 0>", "rows with one common n >= 1")
    return _pvalues_of(lambda scores: c @ scores[support], probs, n, alpha, num_resamples)


def surprisal_pvalues_from_codes(codes, expected_probs, *, alpha: float = 0.01,
                                 num_resamples: int | None = None) -> tuple[np.ndarray, str]:
    """:func:`surprisal_pvalues` from the observations themselves: ``codes[r, i]`` is the category of
    observation i of run r (all in the support; every run has the same n).  Same scores, null
    sample and p-values as :func:`surprisal_pvalues` on the corresponding counts, without forming
    a (runs, categories) table -- for simulations over huge outcome spaces.
    """
    probs = check_probs(expected_probs, "expected_probs")
    codes = np.asarray(codes)
    if (codes.ndim != 2 or codes.shape[0] == 0 or codes.shape[1] == 0 or codes.dtype.kind not in "iu"
            or codes.min() < 0 or codes.max() >= probs.size or np.any(probs[codes] == 0)):
        raise invalid_argument("codes", short(codes), f"an int array of shape (runs >= 1, n >= 1) of categories in "
                               f"0..{probs.size - 1} with expected prob > 0")
    alpha = check_alpha(alpha)
    if num_resamples is not None:
        num_resamples = check_positive_int(num_resamples, "num_resamples", minimum=10)
    return _pvalues_of(lambda scores: scores[codes].sum(axis=1), probs, codes.shape[1], alpha, num_resamples)


def _pvalues_of(totals_of, probs: np.ndarray, n: int, alpha: float, num_resamples: int | None) -> tuple[np.ndarray, str]:
    """Shared body: ``totals_of(scores over all categories)`` gives each run's summed score."""
    support, s, h, v = _scores(probs)
    draws = num_resamples or montecarlo.draws_for(alpha)
    exact = s[support]
    scores = _binned_scores(probs[support], exact, draws) if v > 1e-15 else None
    if scores is None or scores is exact:  # exact scores fit (or untestable / normal): as from the totals
        return surprisal_pvalues_from_totals(totals_of(s), n, probs, alpha=alpha, num_resamples=num_resamples)
    full = np.zeros_like(s)
    full[support] = scores
    law, values, which = _mc_law(probs[support] / probs[support].sum(), scores)
    null = montecarlo.null_sample("linear", law, n, draws, values)
    return montecarlo.two_sided_pvalues(totals_of(full), null), "monte-carlo (binned scores)"


def surprisal_pvalues_from_totals(totals, n: int, expected_probs, *, alpha: float = 0.01,
                                  num_resamples: int | None = None) -> tuple[np.ndarray, str]:
    """:func:`surprisal_pvalues` from each run's summed surprisal ``sum_r -log P(o_r)`` over n rows
    (for simulations whose outcome space is too large to hold counts per run).

    Parameters
    ----------
    totals : array_like, shape (runs,), float64 (nats)
    n : int
        Rows per run.
    expected_probs : array_like, shape (categories,), float64
    """
    probs = check_probs(expected_probs, "expected_probs")
    n = check_positive_int(n, "n")
    alpha = check_alpha(alpha)
    if num_resamples is not None:
        num_resamples = check_positive_int(num_resamples, "num_resamples", minimum=10)
    try:
        total = np.asarray(totals, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_argument("totals", totals, "a 1-d array of finite summed surprisals (nats)") from None
    if total.ndim != 1 or not np.all(np.isfinite(total)):
        raise invalid_argument("totals", short(total), "a 1-d array of finite summed surprisals (nats)")
    support, s, h, v = _scores(probs)
    if v <= 1e-15:  # a point mass (or uniform law): every row has the same surprisal
        return np.ones(total.shape), "untestable"
    draws = num_resamples or montecarlo.draws_for(alpha)
    if draws * int(support.sum()) <= montecarlo.MAX_WORK:
        null = montecarlo.null_sample("linear", probs[support] / probs[support].sum(), n, draws, s[support])
        return montecarlo.two_sided_pvalues(total, null), "monte-carlo"
    z = (total / n - h) * math.sqrt(n / v)
    return 2 * stats.norm.sf(np.abs(z)), "normal"


def surprisal_test(counts, expected_probs, *, alpha: float = 0.01, power: float = 0.99,
                   confidence: float = 0.95, num_resamples: int | None = None) -> SurprisalResult:
    """Two-sided test of the mean surprisal of the observed outcomes against the exact law.

    Parameters
    ----------
    counts : array_like, shape (categories,), int
        Observed outcomes of the cell (e.g. ``verifier.stats.joint_counts`` over the first J
        emitted tokens); n = sum >= 1.
    expected_probs : array_like, shape (categories,), float64
        Exact null law of the same categories (e.g. ``verifier.stats.law_probs``).
    alpha : float, default 0.01
        Level of the cell (Monte Carlo resolution, ``rejected`` and the MDE).
    power : float, default 0.99
        Power at which the MDE is stated.
    confidence : float, default 0.95
        Level of the interval on the expected excess surprisal.
    num_resamples : int or None
        Monte Carlo draws B; default ``max(1000, ceil(20 / alpha))``.  The null sample is a
        deterministic function of (law, n, B) (:mod:`verifier.stats.montecarlo`).

    Returns
    -------
    SurprisalResult

    Raises
    ------
    InvalidArgumentError
        Counts not non-negative integers, n = 0, probs not a distribution, mismatched shapes,
        alpha/power/confidence outside (0, 1).

    Examples
    --------
    >>> p = [0.5, 0.25, 0.125, 0.125]
    >>> surprisal_test([50, 25, 12, 13], p).pvalue > 0.5
    True
    >>> res = surprisal_test([95, 5, 0, 0], p, alpha=0.001)   # far too likely outcomes
    >>> res.statistic < 0 and res.rejected
    True
    """
    probs = check_probs(expected_probs, "expected_probs")
    counts = check_counts(counts, "counts")
    if counts.shape != probs.shape:
        raise invalid_argument("counts.shape", counts.shape, f"the shape of expected_probs {probs.shape}")
    alpha = check_alpha(alpha)
    power, confidence = check_fraction(power, "power"), check_fraction(confidence, "confidence")
    support, s, h, v = _scores(probs)
    violations = tuple(SupportViolation(int(t), int(counts[t])) for t in np.flatnonzero(~support & (counts > 0)))
    n_support = int(counts[support].sum())
    n = int(counts.sum())
    if n_support == 0:
        return SurprisalResult(0.0, 0.0 if violations else 1.0, "untestable", n, alpha, h, v, -math.inf, math.inf,
                               math.inf, violations)
    d = float(counts[support] @ s[support]) / n_support - h
    if num_resamples is not None:
        num_resamples = check_positive_int(num_resamples, "num_resamples", minimum=10)
    draws = num_resamples or montecarlo.draws_for(alpha)
    if violations:  # decided already (p = 0); no simulation at the n of the remaining rows
        method, pvalue, used = "support violation", 0.0, 0
    elif v <= 1e-15:
        method, pvalue, used = "untestable", 1.0, 0
    elif (scores := _binned_scores(probs[support], exact := s[support], draws)) is not None:
        sp = probs[support] / probs[support].sum()
        if scores is exact:
            law, values, method = sp, scores, "monte-carlo"
        else:
            law, values, _ = _mc_law(sp, scores)
            method = "monte-carlo (binned scores)"
        pvalue, used = montecarlo.sequential_pvalue(float(counts[support] @ scores), "linear", law, n_support, draws,
                                                    values, two_sided=True)
    else:
        method, used = "normal", 0
        pvalue = float(2 * stats.norm.sf(abs(d) * math.sqrt(n_support / v)))
    half = stats.norm.isf((1 - confidence) / 2) * math.sqrt(v / n_support)
    return SurprisalResult(
        statistic=d, pvalue=0.0 if violations else float(pvalue), method=method, n=n, alpha=alpha, entropy=h,
        varentropy=v, ci_low=d - half, ci_high=d + half, mde=surprisal_mde(n_support, v, alpha, power),
        support_violations=violations, num_resamples=used,
    )
