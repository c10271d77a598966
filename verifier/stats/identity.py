"""A sharper identity test for TV certificates: the Valiant--Valiant weighted statistic (issue 27).

Pearson's chi-square weighs every pooled category's squared deviation by ``1 / p_i``; against the
alternatives at a given total variation that are hardest for it (a proportional shift of mass
``d`` between two halves: ``w = 2 d``) its noise grows with the square root of the number of
categories K, so a certificate at TV ``eps`` needs ``n ~ sqrt(K) / eps^2``.  When the pooled law is
far from uniform (a few heavy categories, many light ones: every law of a language model) the
minimax rate is ``||p||_{2/3} / eps^2`` instead (Valiant & Valiant 2017), reached by weighing the
deviations by ``p_i^(-2/3)``:

``T = sum_i ((x_i - n p_i)^2 - x_i) / p_i^(2/3) / n``

(the ``- x_i`` makes each term unbiased for ``n^2 (q_i - p_i)^2`` under Poisson sampling: Acharya,
Daskalakis & Kamath 2015; Diakonikolas & Kane 2016).  Among quadratic statistics ``sum a_i (Z_i^2 - 1)``
of the standardised counts, ``a_i ~ p_i^(1/3)`` maximises the mean shift per null standard deviation
against the least favourable alternative at TV ``eps`` (``delta_i ~ +-p_i^(2/3)``): the ratio of the
noise terms to Pearson's is ``||p||_{2/3} / sqrt(K)``, 0.56--0.65 on the shipped pair's pooled laws.

The test
--------
The categories are pooled data-blind exactly as :func:`verifier.stats.gof_test` pools them (expected
count >= 10 at n, :mod:`verifier.stats.pooling`), so the certificate speaks of the same categories as
Pearson's.  The p-value is Monte Carlo from the exact null law ``Multinomial(n, pooled p)``:
``(1 + #{b : T_b >= T}) / (1 + B)``, ``B = 50 / alpha``, with Besag--Clifford early stopping at 50
exceedances (exactly valid, :mod:`verifier.stats.montecarlo`), draws from a generator seeded by ``(n, K)`` and the law's
summaries to 3 digits (a law moved by float rounding keeps its draws).  A token with target prob 0 is a
support violation (p-value 0).

Power and minimum detectable effect
-----------------------------------
In the Gaussian limit ``Y = (X - n p) / sqrt(n)`` is normal with the exact mean ``sqrt(n) delta`` and
covariance ``diag(q) - q q^T`` of the law ``q`` sampled, so ``T`` is a weighted sum of noncentral
chi-squares plus a constant (the ``- x_i`` term folded in by completing the square); its tail comes
from Imhof's (1961) inversion formula.  The critical value is the null's ``1 - alpha`` quantile of
that law; the power at TV ``eps`` is the smallest over :data:`ALTERNATIVE_EXPONENTS`: ``delta_i =
+-c p_i^gamma`` with signs splitting ``sum p_i^gamma`` in halves (``gamma = 2/3`` minimises the mean
shift, ``gamma = 1`` is Pearson's least favourable alternative; 1/2 and 0.8 bracket them), scaled to
``sum |delta| = 2 eps``.  ``bench certificate`` measures both the false-alarm rate and this power by
exact multinomial simulation.

References
----------
Valiant, G. & Valiant, P. (2017). An automatic inequality prover and instance optimal identity testing. *SIAM J. Comput.* 46(1).
Acharya, J., Daskalakis, C. & Kamath, G. (2015). Optimal testing for properties of distributions. *NeurIPS*.
Diakonikolas, I. & Kane, D. (2016). A new approach for testing properties of discrete distributions. *FOCS*.
Imhof, J. P. (1961). Computing the distribution of quadratic forms in normal variables. *Biometrika* 48.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from dataclasses import dataclass

import numpy as np
from scipy import integrate, optimize

from verifier.errors import invalid_argument
from verifier.stats._blas import single_thread
from verifier.stats._validate import check_alpha, check_fraction, check_positive_int, check_probs
from verifier.stats.pooling import MIN_EXPECTED_COUNT, _pool

__all__ = ["WEIGHT_EXPONENT", "ALTERNATIVE_EXPONENTS", "IdentityResult", "identity_statistic", "identity_test",
           "identity_power", "identity_mde", "identity_samples_needed", "identity_level_needed", "least_favourable",
           "tail_probability"]

WEIGHT_EXPONENT = 2.0 / 3.0  # T weighs (x - n p)^2 - x by p^(-2/3) (Valiant & Valiant's instance-optimal weights)
ALTERNATIVE_EXPONENTS = (0.5, 2.0 / 3.0, 0.8, 1.0)  # delta ~ +-p^gamma: the planned worst cases (module docstring)
DRAWS_PER_ALPHA = 50  # Monte Carlo draws B = 50 / alpha (verifier.stats.montecarlo takes 20 / alpha)
STOP_EXCEEDANCES = 50  # Besag-Clifford early stop: the decision at alpha rests on the first 50 / alpha draws, so one
# law's seeded stream has a conditional level within ~14% of alpha (1 / sqrt(50); 22% at 20, measured 0.5-1.5 alpha
# on the shipped pair's laws: reports/benchmarks.md section 15)
_CHUNK = 4000  # null draws per chunk
_GAUSS = np.polynomial.legendre.leggauss(16)  # nodes, weights on [-1, 1] of the Imhof integral
MAX_CATEGORIES = 4000  # the Gaussian-limit power needs one K x K eigendecomposition per law


@dataclass(frozen=True)
class IdentityResult:
    """Outcome of :func:`identity_test`.

    Attributes
    ----------
    statistic : float
        ``T`` on the pooled categories (module docstring).
    pvalue : float
        Monte Carlo p-value (0 on a support violation).
    draws : int
        Null draws simulated.
    categories : int
        Pooled categories K.
    mde_tv : float
        TV (on the pooled categories) detected with probability ``power`` at ``alpha``.
    support_violation : bool
    """

    statistic: float
    pvalue: float
    draws: int
    categories: int
    mde_tv: float
    support_violation: bool


def identity_statistic(counts, probs: np.ndarray) -> np.ndarray:
    """``sum((x - n p)^2 - x) / p^(2/3)) / n`` of count vectors.

    Parameters
    ----------
    counts : array_like, shape (..., K), int
        Pooled counts; every row sums to the same n >= 1.
    probs : np.ndarray, shape (K,), float64
        Pooled null law, every entry > 0.

    Returns
    -------
    np.ndarray, shape (...,), float64
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(axis=-1, keepdims=True)
    w = probs ** -WEIGHT_EXPONENT
    return ((((counts - n * probs) ** 2 - counts) * w).sum(axis=-1)) / n[..., 0]


def _seed(probs: np.ndarray, n: int) -> int:
    summaries = [-float(probs @ np.log(probs)), float(probs @ probs)]
    text = "vv|" + f"{n}|{probs.size}|" + "|".join(f"{x:.2e}" for x in summaries)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@functools.lru_cache(maxsize=16)
def _null_stream(probs_bytes: bytes, n: int, key: tuple = ()):
    probs = np.frombuffer(probs_bytes, dtype=np.float64)
    return {"rng": np.random.default_rng(_seed(probs, n)), "values": np.empty(0), "probs": probs,
            "lock": threading.Lock()}


def _null_draws(probs: np.ndarray, n: int, draws: int, statistic=None, key: tuple = ()) -> np.ndarray:
    """The first ``draws`` null values of T (a fixed seeded stream per law and n, grown in fixed chunks under a
    lock, so cells computed in threads see the same draws).  ``statistic(counts, probs)`` (default
    :func:`identity_statistic`) with its ``key`` (hashable, naming it and its parameters): another statistic of
    the *same* seeded multinomial draws (:mod:`verifier.stats.identity_mixture`)."""
    statistic = identity_statistic if statistic is None else statistic
    stream = _null_stream(np.ascontiguousarray(probs, dtype=np.float64).tobytes(), int(n), key)
    with stream["lock"]:
        while stream["values"].size < draws:
            x = stream["rng"].multinomial(n, stream["probs"], size=_CHUNK)
            stream["values"] = np.concatenate([stream["values"], statistic(x, stream["probs"])])
        return stream["values"][:draws]


def _mc_pvalue(observed: float, probs: np.ndarray, n: int, draws: int, statistic=None, key: tuple = ()) -> tuple[float, int]:
    """Besag-Clifford: p = h / l at the h-th exceedance (draw l, h = STOP_EXCEEDANCES), else (1 + g) / (1 + draws)."""
    tol = 1e-9 * max(abs(observed), 1.0)  # float rounding of an equal statistic counts as reaching it
    done = 0
    while done < draws:
        upto = min(draws, done + _CHUNK)
        hits = np.flatnonzero(_null_draws(probs, n, upto, statistic, key) >= observed - tol)
        if hits.size >= STOP_EXCEEDANCES:
            return STOP_EXCEEDANCES / float(hits[STOP_EXCEEDANCES - 1] + 1), int(hits[STOP_EXCEEDANCES - 1] + 1)
        done = upto
    g = int(np.count_nonzero(_null_draws(probs, n, draws, statistic, key) >= observed - tol))
    return (1 + g) / (1 + draws), draws


def _decision_threshold(probs: np.ndarray, n: int, alpha: float, statistic=None, key: tuple = ()) -> float:
    """The value the statistic must exceed for the Besag-Clifford p-value to be <= ``alpha``: the h-th largest of
    the first ``ceil(h / alpha) - 1`` draws of the stream (h = STOP_EXCEEDANCES; draws B >= that)."""
    first = min(max(1000, math.ceil(DRAWS_PER_ALPHA / alpha)), math.ceil(STOP_EXCEEDANCES / alpha) - 1)
    return float(np.sort(_null_draws(probs, n, first, statistic, key))[first - STOP_EXCEEDANCES])


def identity_test(counts, expected_probs, *, alpha: float = 0.01, power: float = 0.99,
                  min_expected: float = MIN_EXPECTED_COUNT, draws: int | None = None, mde: bool = True) -> IdentityResult:
    """Weighted identity test of ``counts`` against ``expected_probs`` (module docstring).

    Parameters
    ----------
    counts : array_like, shape (vocab,), int
        Observed counts (n >= 1).
    expected_probs : array_like, shape (vocab,), float64
        Exact null law.
    alpha : float, default 0.01
        Level: sets the Monte Carlo draws (``50 / alpha``) and the level of the MDE.
    power : float, default 0.99
    min_expected : float, default 10
        Pooling floor (as :func:`verifier.stats.gof_test`).
    draws : int, optional
        Null draws B (default ``max(1000, ceil(50 / alpha))``).
    mde : bool, default True
        False: skip the minimum detectable effect (``mde_tv`` nan; simulations).

    Returns
    -------
    IdentityResult

    Raises
    ------
    InvalidArgumentError
        Bad probs or counts, shapes that differ, alpha/power outside (0, 1), n < 1.
    """
    probs, n, x, p, violation, draws = _test_inputs(counts, expected_probs, alpha, power, min_expected, draws)
    if p.size < 2:
        return IdentityResult(math.nan, 0.0 if violation else 1.0, 0, int(p.size), math.inf, violation)
    t = float(identity_statistic(x, p))
    pvalue, used = (0.0, 0) if violation else _mc_pvalue(t, p, n, draws)
    tv = identity_mde(n, probs, alpha=alpha, power=power, min_expected=min_expected) if mde else math.nan
    return IdentityResult(t, pvalue, used, int(p.size), tv, violation)


def _test_inputs(counts, expected_probs, alpha, power, min_expected, draws):
    """Checked inputs of an identity test: ``(probs, n, pooled counts, pooled probs, support violation, null draws B)``."""
    probs = check_probs(expected_probs, "expected_probs")
    counts = np.asarray(counts)
    if counts.shape != probs.shape or counts.dtype.kind not in "iu" or (counts < 0).any():
        raise invalid_argument("counts", counts.shape, f"non-negative integer counts of shape {probs.shape}")
    n = check_positive_int(int(counts.sum()), "counts.sum()")
    alpha = check_alpha(alpha)
    check_fraction(power, "power")
    pooling = _pool(probs, n, float(min_expected))
    violation = bool(counts[pooling.groups < 0].sum() > 0)
    b = int(draws) if draws is not None else max(1000, math.ceil(DRAWS_PER_ALPHA / alpha))
    return probs, n, pooling.pool(counts), np.ascontiguousarray(pooling.expected_probs), violation, b


# --------------------------------------------------------------------------- Gaussian-limit law of T


def tail_probability(x: float, lam: np.ndarray, b: np.ndarray) -> float:
    """``P(sum_j lam_j (xi_j + b_j)^2 > x)``, xi iid N(0, 1), by Imhof's formula.

    Parameters
    ----------
    x : float
    lam : np.ndarray, shape (r,), float64, every entry > 0
    b : np.ndarray, shape (r,), float64

    Returns
    -------
    float in [0, 1].
    """
    if lam.size == 0:  # a constant: T = 0 + c0 (every weight zero)
        return float(x < 0)
    lam2 = lam * lam
    nc = b * b

    def parts(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (phi(u), 1 / (u rho(u))); theta = phi - x u / 2
        l2u2 = lam2 * (u * u)[:, None]
        phi = 0.5 * (np.arctan(lam * u[:, None]) + nc * lam * u[:, None] / (1.0 + l2u2)).sum(axis=1)
        log_rho = 0.25 * np.log1p(l2u2).sum(axis=1) + 0.5 * (nc * l2u2 / (1.0 + l2u2)).sum(axis=1)
        return phi, np.exp(-log_rho) / u

    # [0, U]: composite Gauss-Legendre, vectorised (the integrand is smooth, finite at 0, and oscillates
    # ~ x / (4 pi) times per unit u); U: where u / (u rho) has fallen below 1e-15, at most 256 / sd
    sd = float(np.sqrt(np.sum(lam2)))
    grid = np.geomspace(1.0, 256.0, 33) / sd
    env = parts(grid)[1] * grid  # u times the envelope: what is left beyond u is below ~ this
    upper = float(grid[np.argmax(env < 1e-15)]) if (env < 1e-15).any() else float(grid[-1])
    panels = int(min(max(64, 4 * abs(x) * upper / (2 * math.pi)), 20_000))
    nodes, weights = _GAUSS
    edges = np.linspace(0.0, upper, panels + 1)
    half = 0.5 * np.diff(edges)
    total = 0.0
    for lo_panel in range(0, panels, 512):  # bounded memory: 512 panels x 16 nodes x r at a time
        h = half[lo_panel:lo_panel + 512]
        mid = edges[lo_panel:lo_panel + len(h)] + h
        u = (mid[:, None] + h[:, None] * nodes).ravel()
        phi, env = parts(u)
        total += float(((np.sin(phi - 0.5 * x * u) * env).reshape(len(h), -1) * weights).sum(axis=1) @ h)
    # beyond U: only a law with few categories still has mass there (envelope ~ u^-(1 + r/2));
    # Fourier integrals (QUADPACK QAWF) of sin(phi - x u / 2) = sin(phi) cos(x u / 2) - cos(phi) sin(x u / 2)
    if float(parts(np.array([upper]))[1][0]) * upper > 1e-13:
        f_cos = lambda u: float(np.sin(parts(np.array([u]))[0][0]) * parts(np.array([u]))[1][0])  # noqa: E731
        f_sin = lambda u: float(np.cos(parts(np.array([u]))[0][0]) * parts(np.array([u]))[1][0])  # noqa: E731
        if abs(x) * upper > 1e-6:
            k, sgn = abs(x) / 2, (1.0 if x > 0 else -1.0)
            total += integrate.quad(f_cos, upper, np.inf, weight="cos", wvar=k, limlst=200)[0]
            total -= sgn * integrate.quad(f_sin, upper, np.inf, weight="sin", wvar=k, limlst=200)[0]
        else:
            total += integrate.quad(lambda u: f_cos(u), upper, np.inf, limit=400)[0]
    return float(min(max(0.5 + total / math.pi, 0.0), 1.0))


def _law_of_t(p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(lam, b, c0): ``T ~ sum lam_j (xi_j + b_j)^2 + c0`` in the Gaussian limit when the counts are
    Multinomial(n, q) and the weights come from p (module docstring)."""
    w = p ** -WEIGHT_EXPONENT
    sw = np.sqrt(w)
    u = sw * q
    m = np.diag(w * q) - np.outer(u, u)  # W^1/2 (diag(q) - q q^T) W^1/2
    with single_thread():
        lam, vec = np.linalg.eigh(m)
    keep = lam > 1e-12 * lam.max()
    lam, vec = lam[keep], vec[:, keep]
    v = sw / math.sqrt(n)  # T = ||Z - v/2||^2 - ||v||^2/4 - sum w p, Z = W^1/2 Y
    d = sw * math.sqrt(n) * (q - p) - v / 2
    a = vec.T @ d
    d_perp2 = max(float(d @ d - a @ a), 0.0)
    return lam, a / np.sqrt(lam), d_perp2 - float(v @ v) / 4 - float(w @ p)


@functools.lru_cache(maxsize=2048)
def _critical(p_bytes: bytes, n: int, alpha: float) -> float:
    p = np.frombuffer(p_bytes, dtype=np.float64)
    lam, b, c0 = _law_of_t(p, p, n)
    sd = math.sqrt(2 * float(lam @ lam))
    mean = float(lam.sum() + b @ b)
    f = lambda x: tail_probability(x, lam, b) - alpha  # noqa: E731
    lo, hi = mean, mean + 4 * sd
    while f(hi) > 0:
        lo, hi = hi, hi + 4 * sd
    return float(optimize.brentq(f, lo, hi, xtol=1e-9 * sd)) + c0


def least_favourable(p: np.ndarray, eps: float, gamma: float) -> np.ndarray:
    """The alternative ``q = p + delta``, ``delta_i = +-c p_i^gamma``, signs splitting ``sum p^gamma`` in
    halves (largest first, each to the lighter side), ``sum delta = 0``, ``sum |delta| = 2 eps``.

    Parameters
    ----------
    p : np.ndarray, shape (K,), float64, K >= 2
    eps : float
        Total variation of the alternative, in (0, 1).
    gamma : float
        Exponent (2/3: the alternative least favourable to the weighted test; 1: to Pearson's).

    Returns
    -------
    np.ndarray, shape (K,): a law (clipped at 0 and renormalised where ``eps`` is too large for the shape).
    """
    v = p ** gamma
    signs = np.zeros_like(v)
    sides = [0.0, 0.0]
    for i in np.argsort(-v, kind="stable"):
        side = 0 if sides[0] <= sides[1] else 1
        signs[i] = 1.0 if side == 0 else -1.0
        sides[side] += v[i]
    d = signs * v
    d -= d.sum() * v / v.sum()
    d *= 2 * eps / np.abs(d).sum()
    q = np.clip(p + d, 0.0, None)
    return q / q.sum()


def _power_pooled(p: np.ndarray, n: int, alpha: float, eps: float) -> float:
    crit = _critical(p.tobytes(), int(n), float(alpha))
    out = 1.0
    for gamma in ALTERNATIVE_EXPONENTS:
        lam, b, c0 = _law_of_t(p, least_favourable(p, eps, gamma), n)
        out = min(out, tail_probability(crit - c0, lam, b))
    return out


def _pooled(expected_probs, n: int, min_expected: float) -> np.ndarray:
    probs = check_probs(expected_probs, "expected_probs")
    p = _pool(probs, check_positive_int(n, "n"), float(min_expected)).expected_probs
    if p.size > MAX_CATEGORIES:
        raise invalid_argument("expected_probs", f"{p.size} pooled categories", f"at most {MAX_CATEGORIES} (the power needs a K x K eigendecomposition)")
    return np.ascontiguousarray(p)


def identity_power(n, expected_probs, eps: float, *, alpha: float = 0.01, min_expected: float = MIN_EXPECTED_COUNT) -> float:
    """Gaussian-limit power of :func:`identity_test` at ``n`` against the planned least favourable
    alternatives at TV ``eps`` on the pooled categories (the smallest over :data:`ALTERNATIVE_EXPONENTS`).

    Parameters
    ----------
    n : int
    expected_probs : array_like, shape (vocab,), float64
    eps : float
        TV in (0, 1).
    alpha : float, default 0.01
    min_expected : float, default 10

    Returns
    -------
    float; 0 when n pools everything into one category.

    Raises
    ------
    InvalidArgumentError
        Bad probs, n < 1, alpha or eps outside (0, 1), more than :data:`MAX_CATEGORIES` pooled categories.
    """
    p = _pooled(expected_probs, n, min_expected)
    eps = check_fraction(eps, "eps")
    return 0.0 if p.size < 2 else _power_pooled(p, int(n), check_alpha(alpha), eps)


def identity_mde(n, expected_probs, *, alpha: float = 0.01, power: float = 0.99,
                 min_expected: float = MIN_EXPECTED_COUNT) -> float:
    """Smallest TV (pooled categories) that :func:`identity_test` detects with probability ``power``
    at ``n``, ``alpha`` (bisection on :func:`identity_power`, to 1e-4 relative; ``inf`` at one category).

    Parameters
    ----------
    n : int
    expected_probs : array_like, shape (vocab,), float64
    alpha : float, default 0.01
    power : float, default 0.99
    min_expected : float, default 10

    Returns
    -------
    float

    Raises
    ------
    InvalidArgumentError
        As :func:`identity_power`.
    """
    p = _pooled(expected_probs, n, min_expected)
    alpha, power = check_alpha(alpha), check_fraction(power, "power")
    if p.size < 2:
        return math.inf
    return _mde(p.tobytes(), int(n), alpha, power)


@functools.lru_cache(maxsize=4096)
def _mde(p_bytes: bytes, n: int, alpha: float, power: float) -> float:
    p = np.frombuffer(p_bytes, dtype=np.float64)
    hi = 0.5
    if _power_pooled(p, n, alpha, hi) < power:
        return math.inf
    lo = 0.0
    while hi - lo > 1e-4 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _power_pooled(p, n, alpha, mid) >= power else (mid, hi)
    return hi


def identity_level_needed(n, expected_probs, eps: float, *, power: float = 0.99,
                          min_expected: float = MIN_EXPECTED_COUNT) -> float:
    """Smallest level at which :func:`identity_power` at ``n`` against TV ``eps`` is >= ``power``.

    No search over the level: the power at level a is ``min_gamma P_gamma(T > crit(a))``, so it is >= ``power``
    exactly when ``crit(a)`` is at most ``x = min_gamma`` (the ``1 - power`` quantile of T under alternative gamma),
    i.e. when ``a >= P_0(T > x)`` (Gaussian limit, Imhof's formula as in the power).

    Parameters
    ----------
    n, expected_probs, eps, min_expected
        As :func:`identity_power` (n rows, the exact law of shape (vocab,), the TV in (0, 1), the pooling count).
    power : float, default 0.99

    Returns
    -------
    float
        The level in [0, 1] (1 when n pools everything into one category: no level detects anything).

    Raises
    ------
    InvalidArgumentError
        As :func:`identity_power`.
    """
    p = _pooled(expected_probs, n, min_expected)
    eps, power = check_fraction(eps, "eps"), check_fraction(power, "power")
    if p.size < 2:
        return 1.0
    n = int(n)
    x = math.inf
    for gamma in ALTERNATIVE_EXPONENTS:
        lam, b, c0 = _law_of_t(p, least_favourable(p, eps, gamma), n)
        sd = math.sqrt(2 * float(lam @ lam) + 4 * float(lam * lam @ (b * b)))
        mean = float(lam.sum() + lam @ (b * b))
        f = lambda y, lam=lam, b=b: tail_probability(y, lam, b) - power  # noqa: E731
        lo, hi = mean, mean
        while f(lo) < 0:
            lo -= 4 * sd
        while f(hi) > 0:
            hi += 4 * sd
        x = min(x, float(optimize.brentq(f, lo, hi, xtol=1e-9 * sd)) + c0)
    lam, b, c0 = _law_of_t(p, p, n)
    return tail_probability(x - c0, lam, b)


def identity_samples_needed(expected_probs, eps: float, *, alpha: float = 0.01, power: float = 0.99,
                            min_expected: float = MIN_EXPECTED_COUNT, n_min: int = 2, n_max: int = 10**8) -> int | None:
    """Smallest n at which :func:`identity_power` at TV ``eps`` is >= ``power`` (the certificate's n).

    Doubling then bisection on n (pooling, hence the categories, follow n as in the test).

    Returns
    -------
    int or None
        None when ``n_max`` does not suffice.

    Raises
    ------
    InvalidArgumentError
        As :func:`identity_power`.
    """
    check_probs(expected_probs, "expected_probs")
    eps, alpha, power = check_fraction(eps, "eps"), check_alpha(alpha), check_fraction(power, "power")

    def ok(n: int) -> bool:
        return identity_power(n, expected_probs, eps, alpha=alpha, min_expected=min_expected) >= power

    lo, hi = n_min, n_min
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > n_max:
            return None
    while hi - lo > max(1, hi // 2000):  # to 0.05%: the power curve saw-tooths with the pooling
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
