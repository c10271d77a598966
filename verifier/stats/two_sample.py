"""Black-box two-sample tests: speculative samples vs plain target sampling.

When target probs are not available (black-box audit), the decoder's emitted tokens are
compared with tokens from plain ancestral sampling of the target.

* :func:`two_sample_chi2_test`: a 2 x K chi-square of the two count vectors with a permutation
  p-value.  Under the null the arm labels are exchangeable, so conditional on the pooled table
  the first arm's counts are multivariate hypergeometric; drawing them directly
  (``Generator.multivariate_hypergeometric``) is an exact, fully vectorised permutation test.
  Categories are pooled by the *combined* counts (invariant under permutation, so pooling does
  not break validity): descending combined frequency, tail merged until every expected cell
  count is >= 5.
* :func:`two_sample_ks_test`: ``scipy.stats.ks_2samp`` on continuous derived statistics only
  (randomized-PIT values, sequence log-probs with randomized tie-breaking); token ids are refused.

References
----------
Agresti, A. (2013). *Categorical Data Analysis*, 3rd ed., §3.5 (exact conditional tests).
Besag, J. & Clifford, P. (1991). Sequential Monte Carlo p-values. *Biometrika* 78(2).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from verifier.errors import invalid_argument
from verifier.stats._validate import check_alpha, check_counts, check_positive_int
from verifier.stats.effect import DEFAULT_CONFIDENCE, _two_sample_tv as _two_sample_tv_interval, as_generator
from verifier.stats.pit import check_continuous
from verifier.stats.pooling import _pool
from verifier.stats.results import CellTestResult, TVEstimate

__all__ = ["TWO_SAMPLE_MIN_EXPECTED", "DEFAULT_PERMUTATIONS", "two_sample_chi2_test", "two_sample_ks_test"]

TWO_SAMPLE_MIN_EXPECTED = 5.0  # per cell of the 2 x K table (both arms), after pooling
PERMUTATION_STOP_EXCEEDANCES = 20  # Besag & Clifford (1991) sequential p-value h / L; decisions at alpha < 20 / B unchanged
DEFAULT_PERMUTATIONS = 1999  # p-value resolution 1/2000 = 5e-4; pass more for smaller alpha (>= 20 / alpha)


def _pearson_2xk(table_a: np.ndarray, col_totals: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
    """Pearson X2 of 2 x K tables given arm-A counts (..., K) and fixed column totals."""
    n = n_a + n_b
    e_a = col_totals * (n_a / n)
    e_b = col_totals * (n_b / n)
    table_b = col_totals - table_a
    return ((table_a - e_a) ** 2 / e_a).sum(-1) + ((table_b - e_b) ** 2 / e_b).sum(-1)


def two_sample_chi2_test(counts_a, counts_b, *, alpha: float = 0.01, num_permutations: int | None = None, rng=None, min_expected: float = TWO_SAMPLE_MIN_EXPECTED, num_bootstrap: int = 1000) -> CellTestResult:
    """2 x K chi-square test that two count vectors come from the same law, permutation p-value.

    Parameters
    ----------
    counts_a, counts_b : array_like, shape (vocab,), int
        Emitted-token counts of the decoder under test and of plain target sampling (same cell).
        docs/ARCHITECTURE.md "Statistical defaults": about 2x the one-sample n per arm gives comparable power.
    alpha : float, default 0.01
        The level this cell is judged at *after* multiple-comparison correction (e.g. Holm's
        smallest threshold): the p-value cannot go below ``1 / (B + 1)``, so B must exceed 1 / alpha.
    num_permutations : int or None
        Default ``max(DEFAULT_PERMUTATIONS, ceil(20 / alpha) - 1)``.
    rng : None, int or numpy.random.Generator
    min_expected : float, default 5
    num_bootstrap : int, default 1000
        0 skips the effect estimate (``effect=None``); any other value computes it
        (:func:`verifier.stats.effect.two_sample_tv_estimate`, analytic: no resampling).

    Returns
    -------
    CellTestResult
        ``test="two-sample-chi2"``, ``method="permutation"``, ``pvalue = (1 + #{X2_b >= X2}) / (1 + B)``
        (exactly valid), or ``h / L`` when sampling stopped early after ``h = 20`` exceedances in
        ``L`` permutations (Besag & Clifford 1991, valid; only possible when p > 20 / B), ``effect`` = TV between the two empirical laws on pooled categories
        (CI by bootstrapping each arm).

    Raises
    ------
    InvalidArgumentError
        Negative/non-integer counts, an empty arm, mismatched shapes.

    Examples
    --------
    >>> stat, p = two_sample_chi2_test([260, 450, 290], [200, 500, 300], rng=0)
    >>> p < 0.01
    True
    """
    a = check_counts(counts_a, "counts_a")
    b = check_counts(counts_b, "counts_b")
    if a.shape != b.shape:
        raise invalid_argument("counts_b.shape", b.shape, f"the shape of counts_a {a.shape}")
    alpha = check_alpha(alpha)
    gen = as_generator(rng)
    draws = check_positive_int(num_permutations, "num_permutations", minimum=10) if num_permutations is not None else max(DEFAULT_PERMUTATIONS, math.ceil(20 / alpha) - 1)
    n_a, n_b = int(a.sum()), int(b.sum())
    total = a + b
    # pool on combined counts: smallest arm share must see min_expected per cell
    pooling = _pool(total / total.sum(), n=min(n_a, n_b), min_expected=float(min_expected))
    pa, pt = pooling.pool(a), pooling.pool(total)
    effect = _two_sample_tv(pa, pooling.pool(b), gen, num_bootstrap) if num_bootstrap else None
    common = dict(test="two-sample-chi2", n=n_a + n_b, alpha=alpha, pooled_categories=pooling.describe(), num_categories=pooling.num_categories, effect=effect)
    if pooling.num_categories < 2:
        return CellTestResult(statistic=0.0, pvalue=1.0, method="untestable", df=0, **common)
    observed = float(_pearson_2xk(pa, pt, n_a, n_b))
    exceed = done = 0
    size, max_chunk = 50, max(100, 2_000_000 // pooling.num_categories)
    while done < draws:  # chunks double from 100; Besag-Clifford stop after 20 exceedances (cheap under the null)
        size = min(size * 2, max_chunk, draws - done)
        sim = gen.multivariate_hypergeometric(pt, n_a, size=size, method="marginals")
        exceed += int(np.count_nonzero(_pearson_2xk(sim, pt, n_a, n_b) >= observed * (1 - 1e-12)))
        done += size
        if exceed >= PERMUTATION_STOP_EXCEEDANCES and done < draws:
            return CellTestResult(statistic=observed, pvalue=exceed / done, method="permutation", df=pooling.num_categories - 1, num_resamples=done, **common)
    return CellTestResult(statistic=observed, pvalue=(1 + exceed) / (1 + done), method="permutation", df=pooling.num_categories - 1, num_resamples=done, **common)


def _two_sample_tv(pa: np.ndarray, pb: np.ndarray, gen: np.random.Generator, num_resamples: int = 1000, confidence: float = DEFAULT_CONFIDENCE) -> TVEstimate:
    """TV between the two arms on the pooled categories (:func:`verifier.stats.effect.two_sample_tv_estimate`).
    The pooling comes from the combined counts; the interval treats it as fixed (``gen`` and
    ``num_resamples`` are unused: kept for callers)."""
    return _two_sample_tv_interval(pa, pb, confidence)


def two_sample_ks_test(values_a, values_b, *, alpha: float = 0.01) -> CellTestResult:
    """Two-sample KS test (``scipy.stats.ks_2samp``) on continuous derived statistics.

    Parameters
    ----------
    values_a, values_b : array_like, shape (n_a,), (n_b,), float64
        Continuous statistics of the two arms, e.g. randomized-PIT values or sequence log-probs
        with randomized tie-breaking.  Integer or tied values (raw token ids) are refused.
    alpha : float, default 0.01

    Raises
    ------
    InvalidArgumentError
        Discrete (integer, integral or tied) input, NaN, empty arms.
    """
    a = check_continuous(values_a, "values_a")
    b = check_continuous(values_b, "values_b")
    res = stats.ks_2samp(a, b)
    return CellTestResult(statistic=float(res.statistic), pvalue=float(res.pvalue), test="two-sample-ks", method="scipy-auto", n=int(a.size + b.size), alpha=check_alpha(alpha))
