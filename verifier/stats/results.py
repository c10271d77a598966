"""Result objects of the statistics engine.

Every per-cell test returns a :class:`CellTestResult`, which unpacks like scipy's results as
``statistic, pvalue = result`` and carries everything a report needs: n, df, alpha, method,
pooled categories, the effect estimate (TV with a confidence interval), the minimum detectable
effect (TV and Cohen's w at power 0.99) and the support violations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from verifier.stats.power import MinDetectableEffect

__all__ = ["PASS", "BIAS_DETECTED", "UNDERPOWERED", "SupportViolation", "TVEstimate", "CellTestResult"]

PASS = "PASS"
BIAS_DETECTED = "BIAS DETECTED"
UNDERPOWERED = "UNDERPOWERED"


@dataclass(frozen=True)
class SupportViolation:
    """An emitted token whose target prob is exactly 0: a hard failure whatever the p-value."""

    token_id: int
    count: int

    def __str__(self) -> str:
        return f"token {self.token_id} emitted {self.count} time{'s' if self.count != 1 else ''} at target prob 0"


@dataclass(frozen=True)
class TVEstimate:
    """Total-variation distance between the empirical and expected law, with a confidence interval.

    Unpacks as ``(estimate, (ci_low, ci_high))``.  Computed on the pooled categories of the test
    (differences inside a pooled category are invisible to it, so ``ci_low`` is also a lower
    bound for the TV over all tokens).  ``method`` says how the interval was obtained
    (``"mcdiarmid test inversion"``: finite-sample valid, coverage measured by
    ``specverify bench coverage``; ``"clopper-pearson"`` for a single-outcome law; see
    :mod:`verifier.stats.effect`).  ``estimate`` is bias-corrected; ``plug_in`` is the raw
    ``TV(observed frequencies, expected)``, which is biased upwards.
    """

    estimate: float
    ci_low: float
    ci_high: float
    confidence: float
    method: str
    plug_in: float | None = None

    def __iter__(self):
        return iter((self.estimate, (self.ci_low, self.ci_high)))

    def __str__(self) -> str:
        return f"TV {self.estimate:.4f} ({self.confidence:.0%} CI {self.ci_low:.4f}..{self.ci_high:.4f})"


@dataclass(frozen=True)
class CellTestResult:
    """Outcome of one hypothesis test on one cell.

    Attributes
    ----------
    statistic, pvalue : float
        The test statistic and its p-value (``result`` unpacks as ``(statistic, pvalue)``).
    test : str
        Which test: ``"gof"``, ``"joint"``, ``"conditional"``, ``"accepted-count"``, ``"pit-ks"``,
        ``"pit-chi2"``, ``"two-sample-chi2"``, ``"two-sample-ks"``, ``"e-process"``.
    method : str
        How the p-value was obtained (``"asymptotic"``, ``"monte-carlo"``, ``"small-sample
        monte-carlo"``, ``"permutation"``, ``"exact"``, ``"anytime-valid"``).
    n : int
        Observations used (after dropping padding).
    df : int or None
        Degrees of freedom of chi-square tests (pooled categories - 1).
    alpha : float
        Level the cell is judged at; :attr:`rejected` is ``pvalue <= alpha`` or a support violation.
    pooled_categories : list of list of int
        Token ids (or category ids) of each pooled category, largest expected prob first (may be
        truncated to the first 12 categories; ``num_categories`` has the true count).
    num_categories : int
    effect : TVEstimate or None
        How big the discrepancy is (None for tests without a natural TV, e.g. KS on PIT values).
    mde : MinDetectableEffect or None
        Minimum detectable effect (TV and w) at this n, alpha and power 0.99.
    support_violations : tuple of SupportViolation
    num_resamples : int
        Monte Carlo or permutation draws used (0 for asymptotic p-values).
    min_expected : float
        Pooling floor the test used (10; 1 in :func:`verifier.stats.gof_test`'s small-sample regime).
    """

    statistic: float
    pvalue: float
    test: str
    method: str
    n: int
    alpha: float
    df: int | None = None
    pooled_categories: list = field(default_factory=list)
    num_categories: int = 0
    effect: TVEstimate | None = None
    mde: MinDetectableEffect | None = None
    support_violations: tuple = ()
    num_resamples: int = 0
    min_expected: float = 10.0

    def __iter__(self):
        return iter((self.statistic, self.pvalue))

    @property
    def rejected(self) -> bool:
        """True when the cell alone rejects at its ``alpha`` or emitted a token outside the support."""
        return bool(self.support_violations) or self.pvalue <= self.alpha

    def underpowered(self, target_tv: float) -> bool:
        """True when this cell cannot see a bias of ``target_tv`` (its MDE in TV is larger)."""
        return self.mde is not None and (math.isinf(self.mde.tv) or self.mde.tv > target_tv)

    def verdict(self, target_tv: float | None = None, rejected: bool | None = None) -> str:
        """``BIAS DETECTED``, ``UNDERPOWERED`` or ``PASS`` for this cell.

        Parameters
        ----------
        target_tv : float or None
            The suite's stated smallest bias to detect; None skips the power check.
        rejected : bool or None
            The decision after multiple-comparison correction (:func:`verifier.stats.adjust`);
            None uses :attr:`rejected`.  A support violation is always ``BIAS DETECTED``.
        """
        if self.support_violations or (self.rejected if rejected is None else rejected):
            return BIAS_DETECTED
        if target_tv is not None and self.underpowered(target_tv):
            return UNDERPOWERED
        return PASS

    def summary(self) -> str:
        """One line for logs and reports; a support violation is shown as its reason, not as a p-value."""
        parts = [f"{self.test} [{self.method}] n={self.n}"]
        if self.support_violations:
            more = len(self.support_violations) - 3
            parts.append("SUPPORT VIOLATION: " + "; ".join(str(v) for v in self.support_violations[:3])
                         + (f"; {more} more token(s)" if more > 0 else ""))
        else:
            parts += [f"stat={self.statistic:.4g}", f"p={self.pvalue:.3g}"]
            if self.df is not None:
                parts.append(f"df={self.df}")
        if self.effect is not None:
            parts.append(str(self.effect))
        if self.mde is not None:
            parts.append(f"MDE TV {self.mde.tv:.4f}" + (f" / w {self.mde.w:.4f}" if math.isfinite(self.mde.w) else ""))
        return " ".join(parts)
