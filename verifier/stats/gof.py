"""Known-p goodness of fit per cell: Pearson chi-square with data-blind pooling.

For one cell (a fixed prompt, sampling config and position) the emitted-token counts are tested
against the float64 processed target probs.  Categories are pooled by
:func:`verifier.stats.pooling.pool_categories` (never by looking at the counts), Pearson's
statistic is referred to the chi-square law with ``pooled categories - 1`` df, or to a Monte
Carlo null distribution (multinomial draws, ``B >= 20 / alpha``) where the asymptotic tail is
unreliable.  An emitted token whose target prob is 0 is a support violation: the cell fails
whatever the p-value.

Small samples.  The chi-square tail needs every pooled expected count >= 10, so at small n
the data-blind pooling merges most categories -- and with them the evidence: a token that a
mutant never emits hides inside a merged category.  In that regime ("auto", whenever the
10-floor pooling merges categories that a floor of :data:`SMALL_SAMPLE_MIN_EXPECTED` = 1 keeps
apart) the likelihood-ratio statistic ``G = 2 sum O log(O / E)`` is also computed on the finer
pooling and referred to its exact null law by Monte Carlo (:mod:`verifier.stats.montecarlo`: ``B = 20 / alpha`` multinomial draws, a valid
p-value at any n), as long as ``B x categories`` fits the simulation budget.  G rather than
Pearson there: an outcome a bug never emits adds ``n p`` to Pearson's X2 but about ``2 n p`` to
G, while a rare outcome emitted too often weighs less in G -- and of the two failure modes the
deficit is the one that hides at small n.  Measured (``specverify bench detect``, 100 seeds,
``window`` battery, median n / Neyman-Pearson oracle n): greedy_draft on bigram4_eos 1.75x with
G, 2.25x with Cressie-Read lambda = 2/3; deterministic_acceptance on seed_fallback 1.57x vs
1.86x; shared_uniform on bigram4_eos (an excess) 1.81x vs 1.64x.  The cell's p-value
is ``min(1, 2 min(p_10, p_1))`` (Bonferroni over the two poolings: the coarse one has the better
worst-case power, the fine one sees rare outcomes a bug adds or removes), or ``p_1`` alone when
the 10-floor pooling leaves a single category (untestable).  The reported MDE is the better of
the two at ``alpha / 2``.

References
----------
Pearson, K. (1900).  Cochran, W. G. (1954). Some methods for strengthening the common chi-square tests.
Besag, J. & Clifford, P. (1991). Sequential Monte Carlo p-values. *Biometrika* 78(2).
"""

from __future__ import annotations

import math
import os

import numpy as np
from scipy import stats

from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID
from verifier.stats import montecarlo
from verifier.stats._validate import (check_alpha, check_counts, check_fraction, check_min_expected, check_positive_int,
                                      check_probs, short)
from verifier.stats.effect import DEFAULT_BOOTSTRAP, DEFAULT_CONFIDENCE, _tv_estimate, as_generator, binomial_tv_estimate
from verifier.stats.pooling import MIN_EXPECTED_COUNT, Pooling, _pool, law_key
from verifier.stats.power import DEFAULT_POWER, pooled_mde, support_check_mde
from verifier.stats.results import CellTestResult, SupportViolation

__all__ = [
    "ASYMPTOTIC_MIN_ALPHA",
    "MONTE_CARLO_MAX_DRAWS",
    "SMALL_SAMPLE_MIN_EXPECTED",
    "token_counts",
    "support_violations",
    "gof_test",
    "gof_pvalues",
    "gof_pvalues_from_codes",
    "gof_mde",
]

ASYMPTOTIC_MIN_ALPHA = 1e-4  # below this the chi-square tail is trusted only far from alpha (TAIL_MARGIN)
TAIL_MARGIN = 100.0  # "auto" at alpha < 1e-4: Monte Carlo iff alpha / 100 <= asymptotic p <= 100 alpha
MONTE_CARLO_MIN_EXPECTED = 5.0  # "auto" also switches to Monte Carlo when a pooled expected count is below this
MONTE_CARLO_MAX_DRAWS = 10_000_000  # cap on B = ceil(20 / alpha): resolves cell alphas down to 2e-6
MONTE_CARLO_STOP_EXCEEDANCES = 20  # Besag-Clifford: stop once this many draws reach the observed statistic
SMALL_SAMPLE_MIN_EXPECTED = 1.0  # pooling floor of the small-sample Monte Carlo regime (module docstring)
SMALL_SAMPLE_STATISTIC = "g"  # its statistic: likelihood ratio G (module docstring)
_PVALUE_METHODS = ("auto", "asymptotic", "monte-carlo")
SHARED_PEARSON_NULL_ENV = "SPECVERIFY_SHARED_PEARSON_NULL"  # opt-in: shared_pearson_null()


def token_counts(token_ids, vocab_size: int) -> np.ndarray:
    """Count emitted tokens, ignoring padding (``PADDING_TOKEN_ID``).

    Parameters
    ----------
    token_ids : array_like of int, any shape
        Emitted token ids, ``-1`` for padding after EOS.
    vocab_size : int

    Returns
    -------
    np.ndarray, shape (vocab_size,), int64

    Raises
    ------
    InvalidArgumentError
        Non-integer ids, or an id outside ``0..vocab_size-1`` other than the padding value.

    Examples
    --------
    >>> token_counts([[0, 2], [2, -1]], vocab_size=3).tolist()
    [1, 0, 2]
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    ids = np.asarray(token_ids)
    if ids.dtype.kind not in "iu":
        raise invalid_argument("token_ids", short(ids), "an integer array of token ids")
    ids = ids[ids != PADDING_TOKEN_ID]
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)][0]
        raise invalid_argument("token_ids", int(bad), f"ids in 0..{vocab_size - 1} or padding {PADDING_TOKEN_ID}")
    return np.bincount(ids.astype(np.int64), minlength=vocab_size)


def support_violations(counts, expected_probs) -> tuple[SupportViolation, ...]:
    """Tokens with a positive count whose expected (target) prob is exactly 0.

    Examples
    --------
    >>> [str(v) for v in support_violations([5, 0, 1], [0.5, 0.5, 0.0])]
    ['token 2 emitted 1 time at target prob 0']
    """
    counts, probs = _counts_probs_iv(counts, expected_probs, allow_zero_total=True)
    bad = np.flatnonzero((probs == 0) & (counts > 0))
    return tuple(SupportViolation(int(t), int(counts[t])) for t in bad)


def _counts_probs_iv(counts, expected_probs, *, allow_zero_total: bool = False):
    probs = check_probs(expected_probs, "expected_probs")
    counts = check_counts(counts, "counts", allow_zero_total=allow_zero_total)
    if counts.shape != probs.shape:
        raise invalid_argument("counts.shape", counts.shape, f"the shape of expected_probs {probs.shape}")
    return counts, probs


def _pearson(observed: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Pearson's X2 over the last axis: ``sum((O - n p)^2 / (n p))``; observed shape (..., K)."""
    return montecarlo.statistic("pearson", observed, probs)


def _small_sample_pooling(probs: np.ndarray, n: int, pooling, alpha: float, law: bytes | None = None):
    """The finer pooling of the small-sample Monte Carlo regime, or None when it does not apply (``law``: the law's
    :func:`verifier.stats.pooling.law_key`, computed when None)."""
    fine = _pool(probs, n, SMALL_SAMPLE_MIN_EXPECTED, law)
    draws = montecarlo.draws_for(alpha / 2 if pooling.num_categories >= 2 else alpha)  # as _gof will use
    if fine.num_categories > pooling.num_categories and draws * fine.num_categories <= montecarlo.MAX_WORK:
        return fine
    return None


def _mde(n, probs, sub_alpha, power, min_expected, has_fine: bool, both: bool, law: bytes | None = None):
    """The cell's MDE: the 10-floor test's, or the finer one's when that is smaller (or alone)."""
    mde = pooled_mde(n, probs, sub_alpha, power, min_expected, law)
    if has_fine:
        mde_fine = pooled_mde(n, probs, sub_alpha, power, SMALL_SAMPLE_MIN_EXPECTED, law)
        mde = mde_fine if (mde_fine.tv < mde.tv or not both) else mde
    return mde


def gof_mde(n, expected_probs, *, alpha: float = 0.01, power: float = DEFAULT_POWER,
            min_expected: float = MIN_EXPECTED_COUNT, pvalue_method: str = "auto"):
    """Minimum detectable effect of :func:`gof_test` at ``n`` rows, as the test itself states it.

    The same choice as the test makes (the small-sample regime depends on n and the law, never
    on the counts), so a planner can ask "which n makes this cell see TV <= x" before sampling.

    Parameters
    ----------
    n : int
        Rows in the cell (>= 1).
    expected_probs : array_like, shape (categories,), float64
        Exact law of the cell under the null.
    alpha : float, default 0.01
        Level of the cell (e.g. its Holm step).
    power : float, default 0.99
    min_expected : float, default 10
    pvalue_method : {"auto", "asymptotic", "monte-carlo"}, default "auto"

    Returns
    -------
    MinDetectableEffect
        Unpacks as ``(tv, w)``; ``tv = inf`` when n is too small to form two pooled categories.

    Raises
    ------
    InvalidArgumentError
        Bad probs, n < 1, alpha or power outside (0, 1).

    Examples
    --------
    >>> round(gof_mde(1259, [0.2, 0.5, 0.3], alpha=0.01).tv, 3)
    0.074
    """
    probs = check_probs(expected_probs, "expected_probs")
    n = check_positive_int(n, "n")
    alpha, power = check_alpha(alpha), check_fraction(power, "power")
    if pvalue_method not in _PVALUE_METHODS:
        raise invalid_argument("pvalue_method", pvalue_method, " | ".join(repr(m) for m in _PVALUE_METHODS))
    min_expected = check_min_expected(min_expected)
    if np.count_nonzero(probs > 0) == 1:  # single-outcome law: gof_test's support check
        return support_check_mde(n, power, alpha)
    law = law_key(probs)  # one hash for the three poolings below
    pooling = _pool(probs, n, min_expected, law)
    fine = _small_sample_pooling(probs, n, pooling, alpha, law) if pvalue_method == "auto" else None
    both = fine is not None and pooling.num_categories >= 2
    return _mde(n, probs, alpha / 2 if both else alpha, power, min_expected, fine is not None, both, law)


def gof_pvalues(counts, expected_probs, *, min_expected: float = MIN_EXPECTED_COUNT, pvalue_method: str = "asymptotic",
                alpha: float = 0.01) -> np.ndarray:
    """Pearson p-values for many count vectors against one expected law (vectorised).

    For simulations and benchmarks: the same pooling and statistic as :func:`gof_test`, without
    effect sizes or support checks.

    Parameters
    ----------
    counts : array_like, shape (runs, vocab), int
        One row per run; every row must have the same n (>= 1).
    expected_probs : array_like, shape (vocab,), float64
    min_expected : float, default 10
    pvalue_method : {"asymptotic", "auto"}, default "asymptotic"
        "auto" follows :func:`gof_test`'s small-sample regime (finer pooling, Monte Carlo p-value
        from one null sample shared by all rows -- each row's p-value has the same law as a
        separate :func:`gof_test` call -- combined with the 10-floor test as there).
        :func:`gof_test`'s other Monte Carlo trigger (alpha below 1e-4 with the p-value near
        alpha) is not replicated, nor its Besag–Clifford early stop (which only moves p-values
        above ~20 / B).
    alpha : float, default 0.01
        Level the p-values must resolve ("auto" only: sets the Monte Carlo draws).

    Returns
    -------
    np.ndarray, shape (runs,), float64
    """
    probs = check_probs(expected_probs, "expected_probs")
    counts = check_counts(counts, "counts", ndim=2)
    if counts.shape[1] != probs.shape[0]:
        raise invalid_argument("counts.shape", counts.shape, f"(runs, {probs.shape[0]})")
    totals = counts.sum(axis=1)
    if np.any(totals != totals[0]) or totals[0] == 0:
        raise invalid_argument("counts", f"<row totals {np.unique(totals)[:4].tolist()}>", "rows with one common n >= 1")
    return _vector_pvalues(lambda pooling: pooling.pool(counts), probs, int(totals[0]), check_min_expected(min_expected),
                           pvalue_method, alpha)


def gof_pvalues_from_codes(codes, expected_probs, *, pvalue_method: str = "auto", alpha: float = 0.01) -> np.ndarray:
    """:func:`gof_pvalues` from the observations themselves: ``codes[r, i]`` is the category of
    observation i of run r (every run has the same n).  Counts are formed per *pooled* category
    only, so a cell with a huge category space (a joint law over 385^2 token pairs) stays cheap.

    Parameters
    ----------
    codes : array_like, shape (runs, n), int, values in ``0..categories-1``
    expected_probs : array_like, shape (categories,), float64
    pvalue_method, alpha
        As :func:`gof_pvalues`.
    """
    probs = check_probs(expected_probs, "expected_probs")
    codes = np.asarray(codes)
    if (codes.ndim != 2 or codes.size == 0 or codes.dtype.kind not in "iu" or codes.min() < 0
            or codes.max() >= probs.size):
        raise invalid_argument("codes", short(codes), f"an int array of shape (runs >= 1, n >= 1), values in 0..{probs.size - 1}")
    runs = codes.shape[0]

    def pooled(pooling: Pooling) -> np.ndarray:
        g = pooling.num_categories
        groups = pooling.groups[codes] + 1  # 0 = outside the support (dropped, as Pooling.pool does)
        flat = np.bincount((groups + (np.arange(runs) * (g + 1))[:, None]).ravel(), minlength=runs * (g + 1))
        return flat.reshape(runs, g + 1)[:, 1:]

    return _vector_pvalues(pooled, probs, codes.shape[1], MIN_EXPECTED_COUNT, pvalue_method, alpha)


def _vector_pvalues(pooled_counts, probs: np.ndarray, n: int, min_expected: float, pvalue_method: str, alpha: float) -> np.ndarray:
    """Shared body of the vectorised p-values; ``pooled_counts(pooling)`` gives (runs, pooled categories)."""
    if pvalue_method not in ("asymptotic", "auto"):
        raise invalid_argument("pvalue_method", pvalue_method, "'asymptotic' | 'auto'")
    pooling = _pool(probs, n, min_expected)
    fine = _small_sample_pooling(probs, n, pooling, check_alpha(alpha)) if pvalue_method == "auto" else None
    both = fine is not None and pooling.num_categories >= 2
    if fine is not None:
        null = montecarlo.null_sample(SMALL_SAMPLE_STATISTIC, fine.expected_probs, n, montecarlo.draws_for(alpha / 2 if both else alpha))
        p_fine = montecarlo.upper_pvalues(montecarlo.statistic(SMALL_SAMPLE_STATISTIC, pooled_counts(fine), fine.expected_probs), null)
        if not both:
            return p_fine
    if pooling.num_categories < 2:
        observed = pooled_counts(pooling)
        return np.ones(observed.shape[0])
    p = stats.chi2.sf(_pearson(pooled_counts(pooling), pooling.expected_probs), pooling.num_categories - 1)
    return np.minimum(1.0, 2 * np.minimum(p, p_fine)) if both else p


def gof_test(
    counts,
    expected_probs,
    *,
    alpha: float = 0.01,
    pvalue_method: str = "auto",
    num_resamples: int | None = None,
    rng=None,
    min_expected: float = MIN_EXPECTED_COUNT,
    power: float = DEFAULT_POWER,
    confidence: float = DEFAULT_CONFIDENCE,
    num_bootstrap: int = DEFAULT_BOOTSTRAP,
    test: str = "gof",
) -> CellTestResult:
    """Pearson chi-square goodness of fit of emitted-token counts to the target probs of one cell.

    Parameters
    ----------
    counts : array_like, shape (vocab,), int
        Emitted-token counts of the cell (:func:`token_counts`); n = sum >= 1.
    expected_probs : array_like, shape (vocab,), float64
        Processed target probs (sum to 1 within ``PROBS_SUM_ATOL``).
    alpha : float, default 0.01
        Level of the cell (used for ``rejected``, Monte Carlo size and the MDE).
    pvalue_method : {"auto", "asymptotic", "monte-carlo"}, default "auto"
        "auto" uses Monte Carlo when a pooled expected count is below ``MONTE_CARLO_MIN_EXPECTED``
        (only possible with a lowered ``min_expected``), or when ``alpha < ASYMPTOTIC_MIN_ALPHA``
        and the asymptotic p-value lies within a factor ``TAIL_MARGIN`` (100) of alpha, where a
        tail-approximation error could flip the decision.  Farther out the asymptotic p decides
        (a factor-100 tail error is implausible with every pooled expected count >= 10), which
        keeps clearly biased and clearly clean cells cheap at the tiny per-cell alphas of a gate.
    num_resamples : int or None
        Monte Carlo draws; default ``min(ceil(20 / alpha), MONTE_CARLO_MAX_DRAWS)`` (at least 1000).
        Sampling stops early once ``MONTE_CARLO_STOP_EXCEEDANCES`` draws reach the observed value.
    rng : None, int or numpy.random.Generator
        Randomness for Monte Carlo and the TV bootstrap (None: a fixed default seed).
    min_expected : float, default 10
        Pooling threshold (docs/ARCHITECTURE.md "Statistical defaults": every pooled expected count >= 10).
    power : float, default 0.99
        Power at which the minimum detectable effect is reported.
    confidence : float, default 0.99
        Level of the TV confidence interval.
    num_bootstrap : int, default 1000
        0 skips the effect estimate (``effect=None``), e.g. in calibration simulations; any
        other value computes it (the interval is analytic, :mod:`verifier.stats.effect`: the
        value is no longer a resample count).
    test : str, default "gof"
        Label stored in the result (the joint/conditional helpers pass their own).

    Returns
    -------
    CellTestResult
        Unpacks as ``(statistic, pvalue)``; ``effect`` is the TV on pooled categories (tokens
        outside the support count as one extra category with expected 0) and ``mde`` the
        minimum detectable effect.  With fewer than two pooled categories (n too small) the cell
        is untestable: ``pvalue = 1``, ``method = "untestable"``, ``mde.tv = inf`` (UNDERPOWERED).
        A single-outcome law (greedy decoding, top-k = 1) is a support check instead: ``pvalue``
        0 when a row left the one outcome (a support violation) else 1, ``statistic`` = rows off
        it, ``mde.tv = 1 - (1 - power)^(1/n)`` (:func:`verifier.stats.power.support_check_mde`).

    Raises
    ------
    InvalidArgumentError
        Negative/NaN/non-integer counts, n = 0, probs not a distribution, mismatched shapes,
        alpha outside (0, 1), unknown ``pvalue_method``.

    Notes
    -----
    Valid for a fixed prefix (a fixed prompt's next-token law, or a position's marginal from the
    exact enumerator).  For positions whose target probs depend on the emitted prefix use the
    randomized PIT (:mod:`verifier.stats.pit`).

    Examples
    --------
    >>> stat, p = gof_test([260, 450, 290], [0.2, 0.5, 0.3])
    >>> round(stat, 2), p < 1e-4
    (23.33, True)
    """
    counts, probs = _counts_probs_iv(counts, expected_probs)
    alpha = check_alpha(alpha)
    if pvalue_method not in _PVALUE_METHODS:
        raise invalid_argument("pvalue_method", pvalue_method, " | ".join(repr(m) for m in _PVALUE_METHODS))
    if num_resamples is not None:
        num_resamples = check_positive_int(num_resamples, "num_resamples", minimum=10)
    if num_bootstrap != 0:
        num_bootstrap = check_positive_int(num_bootstrap, "num_bootstrap", minimum=10)
    power = check_fraction(power, "power")
    return _gof(counts, probs, alpha, pvalue_method, num_resamples, as_generator(rng), check_min_expected(min_expected), power, confidence, num_bootstrap, test)


def _gof(counts, probs, alpha, pvalue_method, num_resamples, rng, min_expected, power, confidence, num_bootstrap, test) -> CellTestResult:
    n = int(counts.sum())
    violations = tuple(SupportViolation(int(t), int(counts[t])) for t in np.flatnonzero((probs == 0) & (counts > 0)))
    if np.count_nonzero(probs > 0) == 1:
        return _support_check(counts, probs, n, violations, alpha, power, confidence, num_bootstrap, test)
    n_support = n - sum(v.count for v in violations)
    pooling = _pool(probs, max(n_support, 1), min_expected)
    # small-sample regime (module docstring); a support violation already decides the cell
    fine = _small_sample_pooling(probs, n_support, pooling, alpha) if pvalue_method == "auto" and n_support and not violations else None
    both = fine is not None and pooling.num_categories >= 2
    sub_alpha = alpha / 2 if both else alpha  # two sub-tests: Bonferroni within the cell
    observed = pooling.pool(counts)
    # effect: pooled categories + one "outside the support" category
    effect = _tv_estimate(
        np.append(observed, n - n_support), np.append(pooling.expected_probs, 0.0), confidence
    ) if num_bootstrap else None
    mde = _mde(n, probs, sub_alpha, power, min_expected, fine is not None, both)
    common = dict(test=test, n=n, alpha=alpha, effect=effect, mde=mde, support_violations=violations)
    if fine is not None:
        draws = num_resamples or montecarlo.draws_for(sub_alpha)
        statistic = float(montecarlo.statistic(SMALL_SAMPLE_STATISTIC, fine.pool(counts), fine.expected_probs))
        p_fine, used = montecarlo.sequential_pvalue(statistic, SMALL_SAMPLE_STATISTIC, fine.expected_probs, n_support, draws)
        small = dict(statistic=statistic, pvalue=p_fine, df=fine.num_categories - 1, num_resamples=used,
                     pooled_categories=fine.describe(), num_categories=fine.num_categories,
                     min_expected=SMALL_SAMPLE_MIN_EXPECTED)
        if not both:
            return CellTestResult(method="small-sample monte-carlo", **small, **common)
    common.update(pooled_categories=pooling.describe(), num_categories=pooling.num_categories, min_expected=min_expected)
    df = pooling.num_categories - 1
    if df < 1 or n_support == 0:
        return CellTestResult(statistic=0.0, pvalue=1.0, method="untestable", df=max(df, 0), **common)
    statistic = float(_pearson(observed, pooling.expected_probs))
    p_asymptotic = float(stats.chi2.sf(statistic, df))
    use_mc = pvalue_method == "monte-carlo" or (
        pvalue_method == "auto"
        and (
            n_support * pooling.expected_probs.min() < MONTE_CARLO_MIN_EXPECTED
            or (sub_alpha < ASYMPTOTIC_MIN_ALPHA and sub_alpha / TAIL_MARGIN <= p_asymptotic <= sub_alpha * TAIL_MARGIN)
        )
    )
    method, pvalue, used = "asymptotic", p_asymptotic, 0
    if use_mc:
        draws = num_resamples or min(max(math.ceil(20 / sub_alpha), 1000), MONTE_CARLO_MAX_DRAWS)
        if shared_pearson_null():  # opt-in (SHARED_PEARSON_NULL_ENV): the law-keyed, disk-cached stream
            (pvalue, used), method = montecarlo.sequential_pvalue(statistic, "pearson", pooling.expected_probs, n_support,
                                                                  draws), "monte-carlo"
        else:
            (pvalue, used), method = _monte_carlo_pvalue(statistic, n_support, pooling.expected_probs, draws, rng), "monte-carlo"
    if both:
        combined = min(1.0, 2 * min(pvalue, small["pvalue"]))
        if small["pvalue"] < pvalue:
            common.update({k: small[k] for k in ("pooled_categories", "num_categories", "min_expected")})
            return CellTestResult(statistic=small["statistic"], pvalue=combined, df=small["df"], num_resamples=small["num_resamples"],
                                  method=f"small-sample monte-carlo (min of 2 poolings x 2; 10-floor {method} p {pvalue:.3g})", **common)
        return CellTestResult(statistic=statistic, pvalue=combined, df=df, num_resamples=used,
                              method=f"{method} (min of 2 poolings x 2; small-sample monte-carlo p {small['pvalue']:.3g})", **common)
    return CellTestResult(statistic=statistic, pvalue=pvalue, method=method, df=df, num_resamples=used, **common)


def _support_check(counts, probs, n, violations, alpha, power, confidence, num_bootstrap, test) -> CellTestResult:
    """A single-outcome law (greedy, top-k = 1): any emitted token off the one outcome is a support
    violation; p = 0 with one, else 1 (no false alarms); MDE ``1 - (1 - power)^(1/n)``."""
    (only,) = np.flatnonzero(probs > 0)
    outside = n - int(counts[only])
    return CellTestResult(
        statistic=float(outside), pvalue=0.0 if outside else 1.0, test=test,
        method="support check (single-outcome law: statistic = rows off it)", n=n, alpha=alpha, df=0,
        pooled_categories=[[int(only)]], num_categories=1, min_expected=SMALL_SAMPLE_MIN_EXPECTED,
        effect=binomial_tv_estimate(outside, n, confidence) if num_bootstrap else None,
        mde=support_check_mde(n, power, alpha), support_violations=violations)


def shared_pearson_null() -> bool:
    """Whether the 10-floor Pearson Monte Carlo draws from the shared stream of its law
    (:func:`verifier.stats.montecarlo.sequential_pvalue`: keyed by law and n, reused by every cell and
    decoder testing that law, kept on disk across runs) instead of the cell's own generator.

    Off by default: on, the p-values are other draws of the same Monte Carlo estimator (same law given
    the data, so the same calibration; other numbers within Monte Carlo error).  A proposal of issue 17
    part 4, measured in reports/benchmarks.md "Statistics stage (session 6)"; turned on with
    ``SPECVERIFY_SHARED_PEARSON_NULL=1``."""
    return os.environ.get(SHARED_PEARSON_NULL_ENV, "") not in ("", "0")


def _monte_carlo_pvalue(statistic: float, n: int, probs: np.ndarray, draws: int, rng: np.random.Generator) -> tuple[float, int]:
    """(1 + #{X2_b >= X2_obs}) / (1 + B), or Besag–Clifford h / l when the h-th exceedance is draw
    l <= B (h / l at the exceedance itself, not g / L at a chunk boundary: that one is not valid,
    :func:`verifier.stats.montecarlo.sequential_pvalue`)."""
    max_chunk = max(100, 2_000_000 // len(probs))  # bounds temporary memory to ~16 MB
    size = 100  # chunks double from 100: under the null the early stop comes after ~40 draws
    done = exceed = 0
    tol = 1e-9 * max(statistic, 1.0)  # ties within float noise count as exceedances (conservative)
    h = MONTE_CARLO_STOP_EXCEEDANCES
    while done < draws:
        size = min(size * 2 if done else size, max_chunk, draws - done)
        sim = _pearson(rng.multinomial(n, probs, size=size), probs)
        where = np.flatnonzero(sim >= statistic - tol)
        if exceed + where.size >= h:
            return h / (done + int(where[h - exceed - 1]) + 1), done + size
        exceed += where.size
        done += size
    return (1 + exceed) / (1 + done), done
