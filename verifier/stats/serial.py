"""Serial-correlation test of a sequence that is iid Uniform(0, 1) under the null (the ``serial@1`` cell).

Rows of a sample set are independent draws from the target under the null, so any function of one row
taken in request order is an iid sequence.  The runner takes the randomized PIT of each row's first
emitted token in *token-id order* -- ``u_i = F(x_i^-) + V_i p(x_i)``, ``F`` the target mass of the ids
below ``x_i``, ``V_i`` from a generator the decoder never saw -- which is exactly Uniform(0, 1) under the
null.  Id order (not the prob-descending order of the ``pit`` cell) makes ``u_i`` the uniform an
inverse-CDF sampler consumed for that token, up to the width ``p(x_i)`` of its interval: a stream shared
or shifted across requests then shows as correlation of consecutive ``u``'s whatever the vocabulary
(measured: a Weyl-shifted stream at V = 384 is seen at n = 50 in id order and not at n = 400 in
prob order).

Test
----
Ljung--Box ``Q = n (n + 2) sum_{k=1}^{L} r_k^2 / (n - k)`` over lags ``1..L`` (:data:`SERIAL_LAGS` = 5) of
the sequence in request order (``statsmodels.stats.diagnostic.acorr_ljungbox``'s statistic, computed over the L
lags only: :func:`ljung_box_rows`).  Its chi-square(L)
approximation is anticonservative in the far tail where a family correction puts the per-cell level
(measured on iid uniforms, 200,000-400,000 sequences: at level 1e-4 the rejection rate is 4.7x the level
at n = 100, 2.1x at n = 400, 1.2x at n = 1,000; at 1e-5, 10x at n = 100), so the p-value is a Monte Carlo
p-value under the exact null -- iid Uniform(0, 1) sequences of the same length, ``(1 + #{Q_b >= Q}) /
(1 + B)``, exactly valid -- with Besag--Clifford early stopping: a clean cell stops after about
:data:`~verifier.stats.montecarlo.STOP_EXCEEDANCES` / p draws, so only a rejecting cell simulates all
``B = 20 / alpha`` (:func:`verifier.stats.montecarlo.draws_for`).  The null sequences come from a stream seeded
by the caller (``null_seed``; the runner derives it from the suite seed and the sample set, as the PIT's V's),
cached by ``(n, L, seed)``: one fixed stream shared by many sequences of one length would make their rejections
share its Monte Carlo error (measured: a fixed n = 800 stream whose first 400 draws ran light rejected 24 of 200
iid sequences at alpha 0.05, 10 expected), so each cell draws its own, exactly valid over the seeds.  Work is capped at :data:`SERIAL_MAX_WORK`
simulated values (``B n``): beyond it (n > 1,250 at alpha = 1e-4) the simulation runs to the cap and, when
the observed ``Q`` lies in the tail it cannot resolve (fewer than the stopping number of exceedances: p below
about ``20 n / SERIAL_MAX_WORK``), the chi-square(L) p-value is used and the method says so -- at such n its
measured rejection rate is 1.2x the level at 1e-4 (n = 1,000, 200,000 sequences) and 1.1-1.5x (n = 2,500,
80,000 sequences: within the simulation's error).

Power
-----
Against a lag-1 autocorrelation ``rho`` (other lags 0), ``Q`` is approximately noncentral chi-square(L)
with noncentrality ``lambda = n rho^2``, so the smallest detectable ``rho`` at level ``alpha`` and power
``beta`` is

    rho_min = sqrt(lambda*(L, alpha, beta) / n),   ncx2.sf(chi2.isf(alpha, L), L, lambda*) = beta

(:func:`serial_mde`).  With L = 5: lambda* = 24.5 at alpha = 1e-3, power 0.8, so rho = 0.16 at n = 1,000
and 0.10 at n = 2,500; at the runner's power 0.99 and a per-cell level 1e-4, lambda* = 49.9 and
rho = 0.22 at n = 1,000.  A lag-k correlation alone costs the same.

What it does not see: rows of one call that are all identical (a level shift: the mean-corrected
autocorrelations of a constant-interval run are those of its V's) -- the collision cell
(:mod:`verifier.stats.collisions`) sees that at once; and dependence that leaves the first token's
uniforms uncorrelated (a stream offset by one draw per request).

References
----------
Ljung, G. M. & Box, G. E. P. (1978). On a measure of lack of fit in time series models. *Biometrika* 65(2).
Besag, J. & Clifford, P. (1991). Sequential Monte Carlo p-values. *Biometrika* 78(2).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from verifier.errors import invalid_argument
from verifier.stats._validate import check_alpha, check_positive_int, short
from verifier.stats.montecarlo import STOP_EXCEEDANCES, draws_for

__all__ = ["SERIAL_LAGS", "SERIAL_MIN_ROWS", "SerialResult", "serial_test", "serial_mde", "serial_null_sample",
           "ljung_box_rows"]

SERIAL_LAGS = 5  # lags 1..5: adjacent requests and a few behind (a stream shared by 2..6 requests in turn)
SERIAL_MIN_ROWS = 4 * SERIAL_LAGS  # fewer rows: autocorrelations at lag L rest on < 3 L pairs; not tested
SERIAL_MAX_WORK = 250_000_000  # null values simulated per (n, lags) at most: B x n (about 5 s on one core)
SERIAL_MIN_DRAWS = 1000  # null draws even at the largest n (a p-value down to 1e-3 is always Monte Carlo)
_CHUNK_ELEMENTS = 2_000_000  # uniforms per simulated part at most (16 MB float64)
_FIRST_PART = 64  # null draws in part 0, doubling per part: a clean cell (p ~ 0.5) stops after ~40 draws
_CACHE_BYTES = 64_000_000  # null statistics kept over all (n, lags) streams (8 bytes each)
_cache: OrderedDict[tuple[int, int, int], "_NullStream"] = OrderedDict()
_cache_lock = threading.RLock()


@dataclass(frozen=True)
class SerialResult:
    """The serial test's outcome; unpacks as ``(statistic, pvalue)``.

    Attributes
    ----------
    statistic : float
        Ljung--Box ``Q`` over lags ``1..lags``.
    pvalue : float
        Monte Carlo p-value (chi-square(L) in a tail beyond :data:`SERIAL_MAX_WORK`; module docstring).
    n, lags : int
    acf : tuple of float
        Sample autocorrelations ``r_1..r_lags``.
    effect : float
        ``r_1``, the lag-1 autocorrelation (negative: consecutive rows pushed apart).
    ci : tuple of float
        ``r_1 +- z / sqrt(n)`` at 95% (the null standard error; clipped to [-1, 1]).
    mde : float
        Smallest lag-1 autocorrelation detected with probability ``power`` at ``alpha`` (:func:`serial_mde`).
    method : str
        ``"monte carlo (l of B null draws)"`` or ``"asymptotic chi-square(L) (...)"``.
    draws : int
        Null draws simulated.
    alpha, power : float
    """

    statistic: float
    pvalue: float
    n: int
    lags: int
    acf: tuple[float, ...]
    effect: float
    ci: tuple[float, float]
    mde: float
    method: str
    draws: int
    alpha: float
    power: float

    def __iter__(self):
        return iter((self.statistic, self.pvalue))


def ljung_box_rows(u: np.ndarray, lags: int) -> np.ndarray:
    """Ljung--Box ``Q`` of each row of ``u`` (shape (sequences, n)): the statistic of
    ``statsmodels.stats.diagnostic.acorr_ljungbox`` (mean-corrected autocorrelations, ``adjusted=False``),
    vectorised for the null simulation (tests check the two agree)."""
    n = u.shape[1]
    x = u - u.mean(axis=1, keepdims=True)
    denom = np.einsum("ij,ij->i", x, x)
    q = np.zeros(u.shape[0])
    for k in range(1, lags + 1):
        r = np.einsum("ij,ij->i", x[:, k:], x[:, :-k]) / denom
        q += r * r / (n - k)
    return n * (n + 2) * q


class _NullStream:
    """Ljung--Box statistics of iid Uniform(0, 1) sequences of length ``n``, drawn in reproducible parts
    (part ``i`` from ``default_rng([seed, i])``, the seed a hash of ``(n, lags, null_seed)``: independent of any data)."""

    def __init__(self, n: int, lags: int, null_seed: int) -> None:
        self.n, self.lags = n, lags
        text = f"serial-ljung-box|{n}|{lags}|{null_seed}"
        self.seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        self.max_part = max(1, _CHUNK_ELEMENTS // n)
        self.parts: list[np.ndarray] = []
        self.sorted: dict[int, np.ndarray] = {}

    @property
    def nbytes(self) -> int:
        return 8 * (sum(p.size for p in self.parts) + sum(s.size for s in self.sorted.values()))

    def part(self, i: int) -> np.ndarray:
        """Part ``i``: ``min(max_part, FIRST_PART * 2**i)`` draws (a clean cell stops within the first parts)."""
        while len(self.parts) <= i:
            j = len(self.parts)
            size = min(self.max_part, _FIRST_PART << min(j, 30))
            rng = np.random.default_rng([self.seed, j])
            self.parts.append(ljung_box_rows(rng.random((size, self.n)), self.lags))
        return self.parts[i]

    def first(self, draws: int) -> np.ndarray:
        out, total, i = [], 0, 0
        while total < draws:
            out.append(self.part(i))
            total += out[-1].size
            i += 1
        return np.concatenate(out)[:draws]


def _stream(n: int, lags: int, null_seed: int) -> _NullStream:
    with _cache_lock:
        key = (n, lags, null_seed)
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        stream = _cache[key] = _NullStream(n, lags, null_seed)
        return stream


def _trim() -> None:
    with _cache_lock:
        total = sum(s.nbytes for s in _cache.values())
        while len(_cache) > 1 and total > _CACHE_BYTES:
            total -= _cache.popitem(last=False)[1].nbytes


def serial_null_sample(n: int, lags: int, draws: int, null_seed: int = 0) -> np.ndarray:
    """Sorted first ``draws`` null values of the Ljung--Box ``Q`` at length ``n`` from stream ``null_seed`` (cached;
    a larger ``draws`` extends a smaller one): for vectorised Monte Carlo p-values of many sequences of one length
    (benchmarks: they share its Monte Carlo error, module docstring).

    Raises
    ------
    InvalidArgumentError
        ``n < lags + 2``, ``lags`` or ``draws`` not a positive integer.
    """
    n, lags = _length_iv(n, lags)
    draws = check_positive_int(draws, "draws")
    with _cache_lock:
        stream = _stream(n, lags, int(null_seed))
        if draws not in stream.sorted:
            stream.sorted[draws] = np.sort(stream.first(draws))
        out = stream.sorted[draws]
        _trim()
        return out


def _sequential_pvalue(q: float, n: int, lags: int, draws: int, null_seed: int) -> tuple[float, int, bool]:
    """Besag--Clifford: ``h / l`` when the ``h``-th null draw reaching ``q`` is draw ``l <= draws``, else
    ``(1 + g) / (1 + draws)`` (as :func:`verifier.stats.montecarlo.sequential_pvalue`).  Returns (p-value,
    draws used, whether it stopped at the ``h``-th exceedance)."""
    tol = 1e-9 * max(abs(q), 1.0)  # ties within float noise count against the data (conservative)
    h, hits, used, i = STOP_EXCEEDANCES, 0, 0, 0
    with _cache_lock:
        stream = _stream(n, lags, null_seed)
        try:
            while used < draws:
                part = stream.part(i)[: draws - used]
                where = np.flatnonzero(part >= q - tol)
                if hits + where.size >= h:
                    stop = used + int(where[h - hits - 1]) + 1
                    return h / stop, stop, True
                hits += where.size
                used += part.size
                i += 1
        finally:
            _trim()
    return (1.0 + hits) / (1.0 + draws), draws, False


def serial_mde(n: int, *, lags: int = SERIAL_LAGS, alpha: float, power: float) -> float:
    """Smallest lag-1 autocorrelation ``rho`` the test detects with probability ``power`` at level ``alpha``:
    ``sqrt(lambda / n)`` with ``ncx2.sf(chi2.isf(alpha, lags), lags, lambda) = power`` (module docstring).

    >>> round(serial_mde(1000, alpha=1e-3, power=0.8), 3)
    0.156
    """
    crit = float(stats.chi2.isf(check_alpha(alpha), lags))
    lam = optimize.brentq(lambda x: float(stats.ncx2.sf(crit, lags, x)) - power, 1e-9, 1e5)
    return min(1.0, math.sqrt(lam / n))


def serial_test(u, *, alpha: float = 0.01, power: float = 0.99, lags: int = SERIAL_LAGS, null_seed: int = 0) -> SerialResult:
    """Ljung--Box test of serial independence of a sequence that is iid Uniform(0, 1) under the null.

    Parameters
    ----------
    u : array_like of float, shape (n,)
        Values in [0, 1] in request order (e.g. randomized PITs of each row's first token), ``n >=``
        :data:`SERIAL_MIN_ROWS`.
    alpha : float, default 0.01
        Level of the test (the cell's share of the family's alpha): sets the Monte Carlo draws
        ``B = 20 / alpha`` and the level at which ``mde`` is stated.
    power : float, default 0.99
        Power at which ``mde`` is stated.
    lags : int, default :data:`SERIAL_LAGS`
        Autocorrelations ``r_1..r_lags`` enter ``Q``.
    null_seed : int, default 0
        Seeds the Monte Carlo null sequences (with ``n`` and ``lags``); give each tested sequence its own (e.g.
        from the run's seed) so that sequences do not share one stream's Monte Carlo error.

    Returns
    -------
    SerialResult

    Raises
    ------
    InvalidArgumentError
        ``u`` not 1-D, fewer than ``max(SERIAL_MIN_ROWS, lags + 2)`` values, values outside [0, 1] or not
        finite, a constant sequence; ``alpha`` / ``power`` outside (0, 1).

    Notes
    -----
    Valid when the values are iid Uniform(0, 1) under the null (any continuous iid law gives the same
    Monte Carlo null up to the chi-square regime); the values must come in request order.

    Examples
    --------
    Consecutive values pushed apart by a Weyl step (a stream shifted by the golden ratio per request):

    >>> rng = np.random.default_rng(0)
    >>> u = (rng.random() + 0.618034 * np.arange(200)) % 1 * 0.9 + 0.1 * rng.random(200)
    >>> res = serial_test(u, alpha=1e-3)
    >>> res.pvalue < 1e-3, res.effect < -0.3
    (True, True)
    """
    x, lags, alpha, power = _serial_iv(u, lags, alpha, power)
    from statsmodels.tsa.stattools import acf

    n = int(x.size)
    # acorr_ljungbox's Q, computed as the null stream's is (ljung_box_rows: O(n L)); acorr_ljungbox itself and
    # acf(fft=False) correlate over every lag, O(n^2): 73% of a 54,377-row audit's statistics (benchmarks section 30)
    q = float(ljung_box_rows(x[None, :], lags)[0])
    r = tuple(float(v) for v in acf(x, nlags=lags, fft=True)[1:])
    draws = draws_for(alpha)
    cap = max(SERIAL_MIN_DRAWS, SERIAL_MAX_WORK // n)
    pvalue, used, stopped = _sequential_pvalue(q, n, lags, min(draws, cap), int(null_seed))
    method = f"monte carlo ({used} of {min(draws, cap)} null draws)"
    if draws > cap and not stopped:  # a tail the capped simulation cannot resolve, at large n: chi-square(L)
        pvalue = float(stats.chi2.sf(q, lags))
        method = f"asymptotic chi-square({lags}) (beyond {used} null draws at n = {n})"
    half = float(stats.norm.isf(0.025)) / math.sqrt(n)
    return SerialResult(statistic=q, pvalue=float(min(1.0, pvalue)), n=n, lags=lags, acf=r, effect=r[0],
                        ci=(max(-1.0, r[0] - half), min(1.0, r[0] + half)),
                        mde=serial_mde(n, lags=lags, alpha=alpha, power=power), method=method, draws=used,
                        alpha=alpha, power=power)


def _length_iv(n, lags) -> tuple[int, int]:
    lags = check_positive_int(lags, "lags")
    n = check_positive_int(n, "n")
    if n < lags + 2:
        raise invalid_argument("n", n, f"at least lags + 2 = {lags + 2} values")
    return n, lags


def _serial_iv(u, lags, alpha, power) -> tuple[np.ndarray, int, float, float]:
    lags = check_positive_int(lags, "lags")
    x = np.asarray(u, dtype=np.float64)
    if x.ndim != 1:
        raise invalid_argument("u.ndim", x.ndim, "1 (one value per row, in request order)")
    if x.size < max(SERIAL_MIN_ROWS, lags + 2):
        raise invalid_argument("u.size", x.size, f"at least {max(SERIAL_MIN_ROWS, lags + 2)} values")
    if not np.all(np.isfinite(x)) or x.min() < 0 or x.max() > 1:
        raise invalid_argument("u", short(x), "finite values in [0, 1] (randomized PITs)")
    if np.ptp(x) == 0:
        raise invalid_argument("u", short(x), "a non-constant sequence (randomized PITs are continuous)")
    for name, v in (("alpha", alpha), ("power", power)):
        if not (isinstance(v, (int, float)) and 0 < v < 1 and math.isfinite(v)):
            raise invalid_argument(name, v, "a number in (0, 1)")
    return x, lags, float(alpha), float(power)
