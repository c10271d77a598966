"""Power of the Pearson goodness-of-fit test: samples needed and minimum detectable effect.

The test whose power is computed is exactly the one :func:`verifier.stats.gof_test` runs:
categories pooled data-blind (:func:`verifier.stats.pooling.pool_categories`) at the given n,
Pearson's statistic ``X2 = sum((x - n p0)^2 / (n p0))`` and its asymptotic critical value
``chi2.isf(alpha, df)``.  Emitting a token outside the support of the null is a support violation
and always detected.

Methods
-------
``"exact"``
    Exact multinomial power ``P_alt(X2 >= c)`` of Multinomial(n, alt) after pooling (vocab <= 4):
    all but the two largest-alt categories are enumerated on a window
    ``binom.ppf(1e-12)..binom.isf(1e-12)`` per coordinate (omitted mass < 1e-11); the last two
    are summed in closed form (the acceptance region is an interval; binomial CDFs).
``"noncentral"``
    Noncentral chi-square approximation: power ``= ncx2.sf(c, df, n w^2)`` with Cohen's
    ``w^2 = sum((alt - p0)^2 / p0)`` over pooled categories (``scipy.stats.ncx2``).
``"auto"``
    ``"exact"`` when the pooled vocab is <= 4 and the enumeration window holds at most
    ``EXACT_MAX_OUTCOMES`` outcomes, else ``"noncentral"``.

References
----------
Cohen, J. (1988). *Statistical Power Analysis for the Behavioral Sciences*, ch. 7 (w, noncentral chi-square).
Guenther, W. C. (1977). Power and sample size for approximate chi-square tests. *Am. Stat.* 31(2).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

from verifier.errors import invalid_argument
from verifier.stats._validate import check_alpha, check_fraction, check_positive_int, check_probs
from verifier.stats.pooling import MIN_EXPECTED_COUNT, _pool

__all__ = [
    "DEFAULT_POWER",
    "EXACT_MAX_VOCAB",
    "MinDetectableEffect",
    "pooled_mde",
    "gof_power",
    "samples_needed",
    "min_detectable_effect",
    "samples_for_mde",
    "samples_for_every_mde",
    "support_check_mde",
    "tv_per_w",
]

DEFAULT_POWER = 0.99  # docs/ARCHITECTURE.md "Statistical defaults": every cell reports its MDE at power 0.99
EXACT_MAX_VOCAB = 4  # exact enumeration is O(n^(vocab-1)); above 4 use the noncentral chi-square
EXACT_MAX_OUTCOMES = 50_000  # grid points per exact evaluation (~40 ms at vocab 4, n ~ 2000); beyond: noncentral
_WINDOW_TAIL = 1e-12  # binomial tail left out per coordinate of the exact enumeration
MAX_SAMPLES = 10**12  # samples_needed gives up (raises) beyond this
_METHODS = ("auto", "exact", "noncentral")


@dataclass(frozen=True)
class MinDetectableEffect:
    """Smallest effect a Pearson test at ``n``, ``alpha`` detects with probability ``power``.

    Attributes
    ----------
    w : float
        Cohen's w (``sqrt(sum((alt - p0)^2 / p0))`` over pooled categories); ``inf`` if untestable.
    tv : float
        Total variation: every alternative at TV distance >= ``tv`` from the null (on the pooled
        categories) has Cohen's w >= ``w``, hence is detected with at least ``power``.
    n, alpha, power : as given.  df : int, pooled categories - 1.
    """

    w: float
    tv: float
    n: int
    alpha: float
    power: float
    df: int

    def __iter__(self):
        return iter((self.tv, self.w))


def _method_iv(method: str) -> str:
    if method not in _METHODS:
        raise invalid_argument("method", method, " | ".join(repr(m) for m in _METHODS))
    return method


def _pooled_pair(null: np.ndarray, alt: np.ndarray, n: int):
    """Pool null and alt with the null's data-blind pooling at n; split off the violation mass."""
    pooling = _pool(null, n, MIN_EXPECTED_COUNT)
    keep = pooling.groups >= 0
    violation_mass = float(alt[~keep].sum())
    alt_pooled = np.bincount(pooling.groups[keep], weights=alt[keep], minlength=pooling.num_categories)
    return pooling.expected_probs, alt_pooled, violation_mass


def _window(n: int, probs: np.ndarray) -> list[np.ndarray]:
    lo = stats.binom.ppf(_WINDOW_TAIL, n, probs).astype(np.int64)
    hi = stats.binom.isf(_WINDOW_TAIL, n, probs).astype(np.int64)
    return [np.arange(max(a, 0), min(b, n) + 1) for a, b in zip(lo, hi)]


def _split(alt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the categories enumerated on a grid (smallest alt mass) and the two summed analytically."""
    order = np.argsort(alt, kind="stable")
    return order[:-2], order[-2:]


def _exact_outcomes(n: int, alt: np.ndarray) -> int:
    grid, _ = _split(alt)
    return int(np.prod([len(w) for w in _window(n, alt[grid])])) if len(grid) else 1


def _exact_power_pooled(n: int, null: np.ndarray, alt: np.ndarray, crit: float) -> float:
    """Exact P_alt(X2 >= crit) for Multinomial(n, alt), X2 Pearson's statistic against ``null``.

    The vocab-2 smallest-alt coordinates are enumerated on a window grid; given them, with
    ``m`` draws left for the last two categories (a, b), X2 is a convex quadratic in ``x_a``, so
    the non-rejection set is an integer interval and its probability is a difference of binomial
    CDFs of ``Bin(m, alt_a / (alt_a + alt_b))``.  Cost: one pass over a grid of size
    ~ (14 sd)^(vocab-2), i.e. a few hundred points for vocab 3.
    """
    grid_idx, (ia, ib) = _split(alt)
    e = n * null
    axes = np.ix_(*_window(n, alt[grid_idx])) if len(grid_idx) else ()
    fixed_sum = sum(axes) if len(grid_idx) else np.zeros((), dtype=np.int64)
    m = n - fixed_sum
    valid = m >= 0
    m = np.where(valid, m, 0)
    s_fixed = sum((x - e[i]) ** 2 / e[i] for x, i in zip(axes, grid_idx)) if len(grid_idx) else np.zeros(())
    # log P(fixed coords, m in {a, b}) — multinomial over (grid coords, merged a+b)
    log_fact = special.gammaln(np.arange(n + 2, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_alt = np.log(alt)
        log_ab = np.log(alt[ia] + alt[ib])
        logp = log_fact[n + 1] - log_fact[m + 1] + np.where(m > 0, m * log_ab, 0.0)
        for x, i in zip(axes, grid_idx):
            logp = logp - log_fact[x + 1] + np.where(x > 0, x * log_alt[i], 0.0)
    weight = np.where(valid, np.exp(logp), 0.0)
    # Non-rejection: s_fixed + f(t) < crit, f(t) = A t^2 + B t + C with t = x_a, x_b = m - t.
    ea, eb = e[ia], e[ib]
    qa = 1.0 / ea + 1.0 / eb
    qb = -2.0 - 2.0 * (m - eb) / eb
    qc = ea + (m - eb) ** 2 / eb + s_fixed - crit * (1 - 1e-12)
    disc = qb * qb - 4 * qa * qc
    root = np.sqrt(np.maximum(disc, 0.0))
    t_lo = np.maximum(np.floor((-qb - root) / (2 * qa)) + 1, 0)
    t_hi = np.minimum(np.ceil((-qb + root) / (2 * qa)) - 1, m)
    ratio = alt[ia] / (alt[ia] + alt[ib]) if alt[ia] + alt[ib] > 0 else 0.0
    inside = (disc > 0) & (t_hi >= t_lo)
    accept = np.where(inside, stats.binom.cdf(t_hi, m, ratio) - stats.binom.cdf(t_lo - 1, m, ratio), 0.0)
    return float(np.clip(1.0 - np.sum(weight * accept), 0.0, 1.0))


def _noncentral_power(n: int, w2: float, df: int, crit: float) -> float:
    return float(stats.ncx2.sf(crit, df, n * w2)) if w2 > 0 else float(stats.chi2.sf(crit, df))


def _power_at(n: int, null: np.ndarray, alt: np.ndarray, alpha: float, method: str) -> tuple[float, str]:
    p0, a, violation = _pooled_pair(null, alt, n)
    df = len(p0) - 1
    no_violation = (1.0 - violation) ** n
    if df == 0:
        return 1.0 - no_violation, "support"
    if violation > 0:
        a = a / a.sum() if a.sum() > 0 else a
    crit = float(stats.chi2.isf(alpha, df))
    use_exact = method == "exact" or (
        method == "auto" and len(p0) <= EXACT_MAX_VOCAB and _exact_outcomes(n, a) <= EXACT_MAX_OUTCOMES
    )
    if use_exact:
        if len(p0) > EXACT_MAX_VOCAB:
            raise invalid_argument("method", "exact", f"'exact' only for a pooled vocab <= {EXACT_MAX_VOCAB} (got {len(p0)})")
        cond = _exact_power_pooled(n, p0, a, crit) if a.sum() > 0 else 1.0
        used = "exact"
    else:
        cond = _noncentral_power(n, float(np.sum((a - p0) ** 2 / p0)), df, crit)
        used = "noncentral"
    return 1.0 - no_violation * (1.0 - cond), used


def gof_power(n, null_probs, alt_probs, alpha: float = 0.01, method: str = "auto") -> float:
    """Power of the pooled Pearson GOF test at ``n`` against one alternative.

    Parameters
    ----------
    n : int
        Number of observations (>= 1).
    null_probs, alt_probs : array_like, shape (vocab,), float64
        Expected (target) probs and the law the samples actually follow (e.g. a mutant's exact
        output law from ``verifier.exact``).
    alpha : float, default 0.01
        Level of the test.
    method : {"auto", "exact", "noncentral"}, default "auto"
        See the module docstring.

    Returns
    -------
    float
        Probability that the test rejects (including support violations).

    Raises
    ------
    InvalidArgumentError
        Bad probs, mismatched shapes, alpha outside (0, 1), n < 1, unknown method, or "exact" above vocab 4.

    Examples
    --------
    >>> round(gof_power(1259, [0.2, 0.5, 0.3], [0.26, 0.45, 0.29], alpha=0.01), 4)
    0.9901
    """
    null, alt, alpha, method = _pair_iv(null_probs, alt_probs, alpha, method)
    return _power_at(check_positive_int(n, "n"), null, alt, alpha, method)[0]


def _pair_iv(null_probs, alt_probs, alpha, method):
    null = check_probs(null_probs, "null_probs")
    alt = check_probs(alt_probs, "alt_probs")
    if null.shape != alt.shape:
        raise invalid_argument("alt_probs.shape", alt.shape, f"the shape of null_probs {null.shape}")
    return null, alt, check_alpha(alpha), _method_iv(method)


def samples_needed(null_probs, alt_probs, alpha: float = 0.01, power: float = DEFAULT_POWER, method: str = "auto") -> int:
    """Smallest n at which the pooled Pearson GOF test detects ``alt_probs`` with ``power``.

    Parameters
    ----------
    null_probs : array_like, shape (vocab,), float64
        Target probs the test assumes.
    alt_probs : array_like, shape (vocab,), float64
        The law the decoder actually samples (e.g. the exact output law of a mutant rule).
    alpha : float, default 0.01
    power : float, default 0.99
    method : {"auto", "exact", "noncentral"}, default "auto"
        "auto" is exact for a pooled vocab <= 4 when the enumeration is feasible; see the module docstring.

    Returns
    -------
    int
        The smallest n with power >= ``power`` found by bisection on the power curve started from
        the noncentral estimate, then walked down while the power stays >= ``power`` (the exact
        power curve is a slightly saw-toothed increasing function).  Cached: repeated calls are free.

    Raises
    ------
    InvalidArgumentError
        Bad probs or shapes, alpha/power outside (0, 1), unknown method, ``null == alt`` (no
        effect: no n suffices), or more than ``MAX_SAMPLES`` needed.

    Examples
    --------
    >>> samples_needed([0.2, 0.5, 0.3], [0.26, 0.45, 0.29], alpha=0.01, power=0.99)
    1259
    """
    null, alt, alpha, method = _pair_iv(null_probs, alt_probs, alpha, method)
    power = check_fraction(power, "power")
    return _samples_needed_cached(tuple(null.tolist()), tuple(alt.tolist()), alpha, power, method)


@functools.lru_cache(maxsize=4096)
def _samples_needed_cached(null_t, alt_t, alpha, power, method) -> int:
    null, alt = np.array(null_t), np.array(alt_t)
    if np.array_equal(null, alt) or np.max(np.abs(null - alt)) < 1e-15:
        raise invalid_argument("alt_probs", list(alt_t)[:8], "a law different from null_probs (they are equal: no n detects it)")

    def ok(n: int) -> bool:
        return _power_at(n, null, alt, alpha, method)[0] >= power

    # Noncentral guess from the unpooled w (pooling only matters at small n).
    with np.errstate(divide="ignore", invalid="ignore"):
        support = null > 0
        w2 = float(np.sum((alt[support] - null[support]) ** 2 / null[support]))
    df = max(int(np.count_nonzero(support)) - 1, 1)
    guess = 2
    if w2 > 0:
        crit = stats.chi2.isf(alpha, df)
        nc = optimize.brentq(lambda lam: stats.ncx2.sf(crit, df, lam) - power, 1e-9, 1e7)
        guess = max(int(math.ceil(nc / w2)), 2)
    hi = guess
    lo = 0
    while not ok(hi):  # grow by 10% steps: the noncentral guess is usually within 10%
        lo, hi = hi, int(math.ceil(hi * 1.1)) + 1
        if hi > MAX_SAMPLES:
            raise invalid_argument("alt_probs", list(alt_t)[:8], f"an alternative detectable with <= {MAX_SAMPLES} samples")
    if lo == 0:
        lo = int(hi * 0.9)
        while lo >= 1 and ok(lo):
            lo, hi = int(lo * 0.9), lo
        if lo < 1:
            return 1 if ok(1) else hi
    while hi - lo > 1:  # invariant: not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    while hi > 1 and ok(hi - 1):  # saw-tooth: step down while still powered
        hi -= 1
    return hi


def tv_per_w(expected_probs) -> float:
    """Largest TV an alternative with Cohen's w = 1 can have against ``expected_probs``.

    An alternative at TV distance d moves mass d onto a set S and off its complement; its
    ``w^2 = sum(delta^2 / p0) >= d^2 / (P(S)(1 - P(S)))`` (Cauchy–Schwarz), with equality for a
    proportional shift.  Hence ``TV <= w * max_S sqrt(P(S)(1 - P(S)))``; the max over subsets is
    found exactly for <= 16 categories and bounded by 1/2 above.
    """
    probs = check_probs(expected_probs, "expected_probs")
    return _tv_per_w(tuple(probs[probs > 0].tolist()))


@functools.lru_cache(maxsize=4096)
def _tv_per_w(support_probs: tuple) -> float:
    probs = np.array(support_probs)
    if len(probs) < 2:
        return 0.0
    if len(probs) > 16:
        return 0.5
    masks = np.arange(1, 2 ** (len(probs) - 1))  # subsets without the last element (complements cover the rest)
    bits = (masks[:, None] >> np.arange(len(probs))) & 1
    ps = bits @ probs
    return float(np.sqrt(np.max(ps * (1 - ps))))


def min_detectable_effect(n, expected_probs, alpha: float = 0.01, power: float = DEFAULT_POWER, *,
                          min_expected: float = MIN_EXPECTED_COUNT) -> MinDetectableEffect:
    """Minimum detectable effect of the pooled Pearson GOF test at ``n`` (noncentral chi-square).

    Parameters
    ----------
    n : int
        Observations in the cell (>= 1).
    expected_probs : array_like, shape (vocab,), float64
        Target probs of the cell; pooled data-blind at ``n`` as the test does.
    alpha : float, default 0.01
    power : float, default 0.99
    min_expected : float, default 10
        Pooling floor of the test (:func:`verifier.stats.gof_test` uses 1 in its small-sample
        Monte Carlo regime; the noncentral chi-square is then an approximation of its power).

    Returns
    -------
    MinDetectableEffect
        Unpacks as ``(tv, w)``.  ``w = sqrt(lambda / n)`` where ``ncx2.sf(chi2.isf(alpha, df), df, lambda) = power``;
        ``tv = w * tv_per_w(pooled probs)``.  Both are ``inf`` when n is too small to form two
        pooled categories.  Effects within a pooled category are invisible to the test and not counted.

    Raises
    ------
    InvalidArgumentError
        Bad probs, n < 1, alpha or power outside (0, 1).

    Examples
    --------
    >>> mde = min_detectable_effect(1259, [0.2, 0.5, 0.3], alpha=0.01)
    >>> round(mde.w, 3), round(mde.tv, 3)
    (0.148, 0.074)
    """
    probs = check_probs(expected_probs, "expected_probs")
    n = check_positive_int(n, "n")
    alpha, power = check_alpha(alpha), check_fraction(power, "power")
    return pooled_mde(n, probs, alpha, power, float(min_expected))


def pooled_mde(n: int, probs: np.ndarray, alpha: float, power: float, min_expected: float,
               law: bytes | None = None) -> MinDetectableEffect:
    """:func:`min_detectable_effect` on arguments the caller has checked (no validation here).

    Parameters
    ----------
    n : int
        Observations in the cell (>= 1).
    probs : np.ndarray, shape (categories,), float64
        The cell's law as the test pools it (already checked by :func:`verifier.stats._validate.check_probs`).
    alpha, power : float
        In (0, 1).
    min_expected : float
        Pooling floor (expected count per pooled category).
    law : bytes or None, default None
        :func:`verifier.stats.pooling.law_key` of ``probs``; computed when None.  A caller asking at many n (an
        n-needed search) hashes the law once.

    Returns
    -------
    MinDetectableEffect
        As :func:`min_detectable_effect` (noncentral chi-square at the pooled df; Cohen's w to TV by ``tv_per_w``).
    """
    pooling = _pool(probs, n, float(min_expected), law)
    df = pooling.num_categories - 1
    if df < 1:
        return MinDetectableEffect(w=math.inf, tv=math.inf, n=n, alpha=alpha, power=power, df=max(df, 0))
    w = math.sqrt(_noncentrality(alpha, power, df) / n)
    per_w = 0.5 if df >= 16 else _tv_per_w(tuple(pooling.expected_probs.tolist()))  # _tv_per_w's bound above 16
    return MinDetectableEffect(w=w, tv=min(w * per_w, 1.0), n=n, alpha=alpha, power=power, df=df)


@functools.lru_cache(maxsize=1024)
def _noncentrality(alpha: float, power: float, df: int) -> float:
    crit = stats.chi2.isf(alpha, df)
    if stats.chi2.sf(crit, df) >= power:
        return 0.0
    hi = 1.0
    while stats.ncx2.sf(crit, df, hi) < power:
        hi *= 2
    return float(optimize.brentq(lambda lam: stats.ncx2.sf(crit, df, lam) - power, 0.0, hi, xtol=1e-10))


def support_check_mde(n, power: float = DEFAULT_POWER, alpha: float = 0.01) -> MinDetectableEffect:
    """Minimum detectable effect against a single-outcome law (greedy decoding, top-k = 1).

    Under such a law every deviation is a support violation, which the cell sees with
    probability ``1 - (1 - TV)^n`` and never under the null (false-alarm rate 0, whatever alpha).
    So the MDE at ``power`` is ``TV = 1 - (1 - power)^(1 / n)``.

    Parameters
    ----------
    n : int
        Rows (>= 1).
    power : float, default 0.99
    alpha : float, default 0.01
        Recorded only (the check has no false alarms).

    Returns
    -------
    MinDetectableEffect
        ``tv`` as above, ``w = nan`` (Cohen's w is undefined on a one-point law), ``df = 0``.

    Examples
    --------
    >>> round(support_check_mde(459).tv, 4)
    0.01
    """
    n = check_positive_int(n, "n")
    power = check_fraction(power, "power")
    tv = -math.expm1(math.log1p(-power) / n)
    return MinDetectableEffect(w=math.nan, tv=tv, n=n, alpha=check_alpha(alpha), power=power, df=0)


MAX_PLANNED_SAMPLES = 10**9  # samples_for_mde gives up above this (no cell of a real suite needs more)


def samples_for_mde(mde_at, target: float, *, n_min: int = 1, n_max: int = MAX_PLANNED_SAMPLES) -> int | None:
    """Smallest n (found by doubling then bisection) whose minimum detectable effect is <= ``target``.

    Parameters
    ----------
    mde_at : callable (n: int) -> float
        The cell's MDE at n rows, in the unit of ``target`` (e.g.
        ``lambda n: gof_mde(n, probs, alpha=a, power=pw).tv`` in total variation, or
        :func:`verifier.stats.surprisal.surprisal_mde` in nats).  Assumed non-increasing in n up
        to pooling steps; the n returned always satisfies ``mde_at(n) <= target``.
    target : float
        Largest acceptable MDE (> 0).
    n_min : int, default 1
        Start of the search (e.g. the budget already planned).
    n_max : int, default 10**9
        Give up above this.

    Returns
    -------
    int or None
        None when even ``n_max`` rows cannot reach ``target``.

    Raises
    ------
    InvalidArgumentError
        ``target`` not a finite number > 0, or ``n_min`` < 1.

    Examples
    --------
    >>> samples_for_mde(lambda n: 1 / math.sqrt(n), 0.1)
    100
    """
    if not isinstance(target, (int, float)) or not math.isfinite(target) or target <= 0:
        raise invalid_argument("target", target, "a finite MDE > 0")
    n_min = check_positive_int(n_min, "n_min")
    if mde_at(n_min) <= target:
        return n_min
    lo, hi = n_min, n_min
    while mde_at(hi) > target:  # invariant: mde_at(lo) > target
        lo, hi = hi, hi * 2
        if hi > n_max:
            if mde_at(n_max) > target:
                return None
            hi = n_max
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mde_at(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def samples_for_every_mde(mde_at: dict, target: float, needed: dict, *, n_max: int = MAX_PLANNED_SAMPLES,
                          max_rounds: int = 16) -> int | None:
    """Smallest common n (searched upward from the largest single-cell n) at which EVERY cell's MDE is <= ``target``.

    A pooled chi-square's MDE is not monotone in n: in the small-sample regime a few hundred rows can
    pool a long-tailed law into categories that see a TV the coarser regime at 30,000 rows cannot (a
    Gemma4 joint@1..3 law: MDE <= 0.03 at 866 rows, 0.037 at 28,099).  Planning each cell alone and
    taking the largest n can so leave a cell underpowered *at the planned n*; this searches again,
    from that n, every cell whose MDE there misses the target, until one n serves all.

    Parameters
    ----------
    mde_at : dict of label -> callable (n: int) -> float
        Each cell's MDE at n rows (as :func:`samples_for_mde`).
    target : float
        Largest acceptable MDE (> 0).
    needed : dict of label -> int or None
        Each cell's own n (:func:`samples_for_mde` from 1); updated in place with the n found for a
        cell searched again (None where ``n_max`` cannot reach ``target``).
    n_max : int, default 10**9
    max_rounds : int, default 16
        Rounds of searching again; after the last one its n is returned (every cell searched reached
        ``target`` at its own n, the common n is their largest).

    Returns
    -------
    int or None
        The common n; None when some cell cannot reach ``target`` by ``n_max``.
    """
    if any(needed.get(label) is None for label in mde_at):
        return None
    n = max((needed[label] for label in mde_at), default=1)
    for _ in range(max_rounds):
        short = [label for label, fn in mde_at.items() if fn(n) > target]
        if not short:
            return n
        for label in short:
            needed[label] = samples_for_mde(mde_at[label], target, n_min=n, n_max=n_max)
            if needed[label] is None:
                return None
        n = max(needed[label] for label in short)
    return n
