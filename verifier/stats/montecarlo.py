"""Monte Carlo null distributions of count statistics under a known law, shared and reproducible.

Under the null every cell's counts are ``Multinomial(n, probs)`` with ``probs`` known exactly, so
the null law of any statistic of the counts can be simulated without a model.  A null sample
depends only on ``(statistic, probs, n, draws)``: it is drawn from a generator seeded by a hash
of exactly those, cached, and reused by every cell (and every decoder of a suite) that tests
the same law at the same n.  The p-value is the classical

``p = (1 + #{b : T_b >= T_obs}) / (1 + B)``

which is exactly valid (``P(p <= a) <= a`` for every ``a``) because the B null draws are
independent of the observed counts (Davison & Hinkley 1997, §4.2.1).

The seed is not a hash of the law's bytes: a law computed from float32 logits differs in its
last bits from one CPU to another (AVX2 vs AVX-512 summation order), and a seed from its bytes
then drew an independent null sample on each -- a clean cell's p-value moved by its whole Monte
Carlo error (0.8 vs 1.0 for a statistic equal to 3e-5 relative, issue 28).  The seed hashes
``(kind, n, categories)`` and the law's summaries (entropy, sum of squares, mean and second moment
of the scores) to :data:`SEED_DIGITS` significant digits (:func:`_seed`): a law moved by rounding
keeps its seed (unless a summary sits within ~1e-7 relative of a rounding boundary: about 1 cell
in 2,500), and ``multinomial`` driven by the same uniforms on an almost equal law gives almost
every draw equal (common random numbers), so the p-value moves by the rounding, not by Monte
Carlo error.  The draws stay independent of the observed counts, so validity is unchanged; two
genuinely different laws whose summaries agree to SEED_DIGITS digits share uniforms, which
correlates their Monte Carlo errors, not their data.  The cache (and its on-disk copy) is still
keyed by the exact bytes.  For a two-sided test
``p = min(1, 2 min(p_upper, p_lower))`` (equal tails; valid by a union bound).  A single
observed value may stop early (:func:`sequential_pvalue`, Besag & Clifford 1991): a clearly
clean cell needs a few thousand draws, not ``B``.

Cost: numpy's multinomial is O(categories) per draw, so ``draws x categories`` bounds the work
(:data:`MAX_WORK`); callers fall back to an asymptotic method beyond it.  Streams of at least
:data:`verifier.stats.nullcache.MIN_STORE_WORK` draws x categories are also kept on disk across
runs (:mod:`verifier.stats.nullcache`; bit-identical to recomputing them, ``SPECVERIFY_NO_CACHE=1``
turns it off).

References
----------
Davison, A. C. & Hinkley, D. V. (1997). *Bootstrap Methods and their Application*, ch. 4.
Besag, J. & Clifford, P. (1991). Sequential Monte Carlo p-values. *Biometrika* 78(2).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict

import numpy as np
from scipy import special

from verifier.errors import invalid_argument
from verifier.stats import nullcache
from verifier.stats._validate import check_alpha, check_positive_int, short

__all__ = ["MAX_WORK", "MIN_DRAWS", "STOP_EXCEEDANCES", "draws_for", "null_sample", "sequential_pvalue", "statistic", "upper_pvalues",
           "two_sided_pvalues"]

MAX_WORK = 40_000_000  # draws x categories simulated per null sample (~2 s on one core)
MIN_DRAWS = 1000
DRAWS_PER_ALPHA = 20  # B = 20 / alpha resolves p-values down to alpha / 20 (Monte Carlo s.e. of a p near alpha ~ 22%)
_CHUNK_ELEMENTS = 2_000_000  # counts simulated per chunk (16 MB of int64)
STOP_EXCEEDANCES = 20  # Besag-Clifford early stop (sequential_pvalue)
SEED_DIGITS = 3  # significant digits of the law's summaries in a stream's seed (_seed): float rounding keeps it
_CACHE_SIZE = 64
_CACHE_BYTES = 256_000_000  # draws (and sorted copies) held over all cached streams; LRU streams beyond it are dropped
_cache: OrderedDict[bytes, "_Stream"] = OrderedDict()
_cache_lock = threading.RLock()  # the cache and each stream's growth are thread-safe (the stream stays the seed's)


def draws_for(alpha: float) -> int:
    """Null draws for a test at level ``alpha``: ``max(MIN_DRAWS, ceil(20 / alpha))``."""
    return max(MIN_DRAWS, math.ceil(DRAWS_PER_ALPHA / check_alpha(alpha)))


def statistic(kind: str, counts, probs: np.ndarray, scores: np.ndarray | None = None) -> np.ndarray:
    """The statistic of count vectors (last axis = categories, every ``probs > 0``).

    ``"pearson"``: ``sum (c - n p)^2 / (n p)``; ``"g"``: the likelihood-ratio statistic
    ``2 sum c log(c / (n p))`` (Wilks' G; ``0 log 0 = 0``); ``"linear"``: ``counts @ scores``.
    """
    counts = np.asarray(counts)
    if kind == "linear":
        return counts @ scores
    n = counts.sum(axis=-1, keepdims=True)
    expected = n * probs
    if kind == "pearson":
        return ((counts - expected) ** 2 / expected).sum(axis=-1)
    return 2.0 * (special.xlogy(counts, counts) - special.xlogy(counts, expected)).sum(axis=-1)


class _Stream:
    """The deterministic stream of null draws of one (statistic, law, n): generated in fixed chunks."""

    def __init__(self, seed: int, kind: str, probs: np.ndarray, n: int, scores: np.ndarray | None) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.kind, self.probs, self.n, self.scores = kind, probs, n, scores
        self.max_chunk = max(1000, _CHUNK_ELEMENTS // probs.size)  # draws per chunk: 1000, doubling up to this
        self.parts: list[np.ndarray] = []
        self.total = 0
        self.sorted: dict[int, np.ndarray] = {}
        self.lock = threading.Lock()
        self.path = None  # its on-disk entry (nullcache), set by _stream
        self.stored = 0  # draws the entry is known to hold
        self.g_table: tuple[np.ndarray, np.ndarray] | None = None  # (xlogy(k, k) for k = 0..n, log(n p)), built on first use

    def _size(self, i: int) -> int:
        return min(1000 << i, self.max_chunk)  # a fixed schedule: the stream never depends on B

    def _g(self, counts: np.ndarray) -> np.ndarray:
        """:func:`statistic` ``"g"`` of draws that all sum to n, bit for bit, ~3x faster: ``xlogy(c, c)``
        looked up in a table over 0..n, and ``xlogy(c, n p) = c * log(n p)`` (scipy's own formula for
        c != 0; for c = 0 both give a zero) with ``log(n p)`` taken once per category as ``xlogy(1, n p)``."""
        if self.g_table is None:
            k = np.arange(self.n + 1, dtype=np.float64)
            self.g_table = (special.xlogy(k, k), special.xlogy(1.0, self.n * self.probs))
        c_log_c, log_expected = self.g_table
        return 2.0 * (c_log_c[counts] - counts * log_expected).sum(axis=-1)

    def restore(self, values: np.ndarray, state: dict) -> bool:
        """Take the first draws and the generator state from a cache entry; False (nothing taken)
        when the entry's length is not a whole number of chunks of this stream's schedule."""
        bounds = [0]
        while bounds[-1] < values.size:
            bounds.append(bounds[-1] + self._size(len(bounds) - 1))
        if bounds[-1] != values.size:
            return False
        self.rng.bit_generator.state = state
        self.parts = [values[a:b] for a, b in zip(bounds, bounds[1:])]
        self.total = self.stored = int(values.size)
        return True

    def save(self) -> None:
        """Write the stream to its cache entry when it grew and is worth keeping (nullcache.MIN_STORE_WORK)."""
        if self.path is None or self.total <= self.stored or self.total * self.probs.size < nullcache.MIN_STORE_WORK:
            return
        with self.lock:  # draws and generator state of one moment
            values, state, total = np.concatenate(self.parts), self.rng.bit_generator.state, self.total
        if nullcache.store(self.path, kind=self.kind, n=self.n, categories=self.probs.size, values=values, state=state):
            self.stored = total

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in list(self.parts)) + sum(a.nbytes for a in list(self.sorted.values()))

    def part(self, i: int) -> np.ndarray:
        if i < len(self.parts):
            return self.parts[i]
        with self.lock:
            return self._grow(i)

    def _grow(self, i: int) -> np.ndarray:
        while len(self.parts) <= i:
            size = self._size(len(self.parts))
            counts = self.rng.multinomial(self.n, self.probs, size=size)
            self.parts.append(self._g(counts) if self.kind == "g" else statistic(self.kind, counts, self.probs, self.scores))
            self.total += size
        return self.parts[i]

    def first(self, draws: int) -> np.ndarray:
        i = have = 0
        while have < draws:
            have += self.part(i).size
            i += 1
        return np.concatenate(self.parts[:i])[:draws]


def _check_law(kind, probs, n, scores):
    """Checked (probs, n, scores) of a null stream; InvalidArgumentError naming the argument."""
    kinds = ("pearson", "g", "linear")
    if kind not in kinds:
        raise invalid_argument("kind", kind, " | ".join(map(repr, kinds)))
    if (kind == "linear") != (scores is not None):
        raise invalid_argument("scores", "None" if scores is None else "<given>", "given with kind 'linear' only")
    try:
        probs = np.ascontiguousarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_argument("probs", probs, "a 1-d float array of positive probabilities summing to 1") from None
    if probs.ndim != 1 or probs.size == 0 or not np.all(np.isfinite(probs)) or probs.min() < 0 or abs(probs.sum() - 1) > 1e-6 \
            or (kind != "linear" and probs.min() <= 0):
        raise invalid_argument("probs", short(probs), "a 1-d array of probabilities summing to 1, every one > 0"
                               + (" (linear: >= 0)" if kind == "linear" else ""))
    n = check_positive_int(n, "n")
    if scores is not None:
        try:
            scores = np.ascontiguousarray(scores, dtype=np.float64)
        except (TypeError, ValueError):
            raise invalid_argument("scores", scores, f"a finite float array of shape {probs.shape}") from None
        if scores.shape != probs.shape or not np.all(np.isfinite(scores)):
            raise invalid_argument("scores", short(scores), f"a finite float array of shape {probs.shape}")
    return probs, n, scores


def _check_observed(observed) -> np.ndarray:
    obs = np.asarray(observed, dtype=np.float64)
    if not np.all(np.isfinite(obs)):
        raise invalid_argument("observed", short(obs), "finite statistics (no NaN or inf)")
    return obs


def _seed(kind: str, probs: np.ndarray, n: int, scores: np.ndarray | None) -> int:
    """A null stream's seed: a hash of ``(kind, n, categories)`` and of the law's summaries rounded
    to :data:`SEED_DIGITS` significant digits -- the same for a law moved by float rounding."""
    support = probs > 0
    summaries = [-float(probs[support] @ np.log(probs[support])), float(probs @ probs)]
    if scores is not None:
        summaries += [float(probs @ scores), float(probs @ scores ** 2)]
    text = f"{kind}|{n}|{probs.size}|" + "|".join(f"{x:.{SEED_DIGITS - 1}e}" for x in summaries)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _stream(kind: str, probs, n: int, scores=None) -> _Stream:
    probs, n, scores = _check_law(kind, probs, n, scores)
    h = hashlib.blake2b(digest_size=16)
    for part in (kind.encode(), probs.tobytes(), np.int64(n).tobytes(), b"" if scores is None else scores.tobytes()):
        h.update(np.int64(len(part)).tobytes() + part)
    key = h.digest()
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        stream = _cache[key] = _Stream(_seed(kind, probs, n, scores), kind, probs, n, scores)
        if nullcache.enabled():
            stream.path = nullcache.entry_path(key, _code_version())
            hit = None if stream.path is None else nullcache.load(stream.path, kind=kind, n=n, categories=probs.size)
            if hit is not None and not stream.restore(*hit):
                nullcache.discard(stream.path)  # not this stream's chunk schedule: recomputed, then rewritten
        _trim_cache()
        return stream


_version: bytes | None = None


def _code_version() -> bytes:
    """What makes the draws, for the on-disk key (nullcache.code_version of the statistic and the stream)."""
    global _version
    if _version is None:
        _version = nullcache.code_version(statistic, _Stream, _stream, _seed, SEED_DIGITS, _CHUNK_ELEMENTS)
    return _version


def _trim_cache() -> None:
    """Drop least recently used streams beyond _CACHE_SIZE streams or _CACHE_BYTES (never the most
    recent one).  A dropped stream is rebuilt from its seed on demand: the same draws."""
    with _cache_lock:
        total = sum(st.nbytes for st in _cache.values())
        while len(_cache) > 1 and (len(_cache) > _CACHE_SIZE or total > _CACHE_BYTES):
            total -= _cache.popitem(last=False)[1].nbytes


def null_sample(kind: str, probs: np.ndarray, n: int, draws: int, scores: np.ndarray | None = None) -> np.ndarray:
    """Sorted first ``draws`` null draws of a statistic of ``Multinomial(n, probs)`` counts.

    Parameters
    ----------
    kind : {"pearson", "g", "linear"}
        See :func:`statistic` (e.g. ``"linear"`` with surprisal scores: summed surprisal).
    probs : np.ndarray, shape (categories,), float64
        The null law (positive entries, summing to 1).
    n : int
        Observations per draw.
    draws : int
        B.
    scores : np.ndarray, shape (categories,), float64, optional
        Required for ``"linear"``.

    Returns
    -------
    np.ndarray, shape (draws,), float64, sorted ascending.  The draws are a prefix of one stream
    seeded by a hash of ``(kind, probs, n, scores)``: the same arguments always give the same array,
    and a larger B extends a smaller one.
    """
    draws = check_positive_int(draws, "draws")
    stream = _stream(kind, probs, n, scores)
    if draws not in stream.sorted:
        stream.sorted[draws] = np.sort(stream.first(draws))
        stream.save()
        _trim_cache()
    return stream.sorted[draws]


def sequential_pvalue(observed: float, kind: str, probs: np.ndarray, n: int, draws: int,
                      scores: np.ndarray | None = None, *, two_sided: bool = False) -> tuple[float, int]:
    """Monte Carlo p-value of one observed statistic with Besag–Clifford early stopping.

    Draws come in chunks from the same stream as :func:`null_sample`.  Besag & Clifford (1991):
    when the ``h = STOP_EXCEEDANCES``-th draw reaching the observed value is draw ``l <= draws``,
    the p-value is ``h / l`` and no more draws are simulated; otherwise it is
    ``(1 + g) / (1 + draws)`` with g the draws reaching it (:func:`upper_pvalues` on
    :func:`null_sample`).  Two-sided: each tail so, ``min(1, 2 min(p_upper, p_lower))``.  (The
    stop must be at the h-th exceedance itself: ``g / L`` at a chunk boundary with ``g >= h`` is
    not valid -- for a continuous statistic g after 1000 draws is uniform on 0..1000 under the
    null, so ``P(g / 1000 <= a) > a`` for a just above h / 1000.)

    Returns
    -------
    (pvalue, draws simulated)
    """
    draws = check_positive_int(draws, "draws")
    stream = _stream(kind, probs, n, scores)
    obs = float(_check_observed(observed))
    tol = float(_tol(np.asarray(obs)))
    h = STOP_EXCEEDANCES
    tails = [lambda v: v >= obs - tol] + ([lambda v: v <= obs + tol] if two_sided else [])
    hits, stops = [0] * len(tails), [None] * len(tails)  # exceedances so far; l of the h-th one
    used = i = 0
    while used < draws and None in stops:
        part = stream.part(i)[: draws - used]
        for j, reaches in enumerate(tails):
            if stops[j] is None:
                where = np.flatnonzero(reaches(part))
                if hits[j] + where.size >= h:
                    stops[j] = used + int(where[h - hits[j] - 1]) + 1
                hits[j] += where.size
        used += part.size
        i += 1
    stream.save()
    _trim_cache()
    ps = [h / l if l is not None else (1.0 + g) / (1.0 + draws) for l, g in zip(stops, hits)]
    return (min(1.0, 2.0 * min(ps)) if two_sided else ps[0]), used


def _tol(x: np.ndarray) -> np.ndarray:
    return 1e-9 * np.maximum(np.abs(x), 1.0)  # ties within float noise count against the data (conservative)


def upper_pvalues(observed, null_sorted: np.ndarray) -> np.ndarray:
    """``(1 + #{T_b >= T_obs}) / (1 + B)`` for each observed value (vectorised)."""
    obs = _check_observed(observed)
    if np.ndim(null_sorted) != 1 or np.size(null_sorted) == 0:
        raise invalid_argument("null_sorted", short(null_sorted), "a non-empty sorted 1-d null sample (null_sample)")
    ge = null_sorted.size - np.searchsorted(null_sorted, obs - _tol(obs), side="left")
    return (1.0 + ge) / (1.0 + null_sorted.size)


def two_sided_pvalues(observed, null_sorted: np.ndarray) -> np.ndarray:
    """Equal-tail two-sided Monte Carlo p-values, ``min(1, 2 min(p_upper, p_lower))``."""
    obs = _check_observed(observed)
    le = np.searchsorted(null_sorted, obs + _tol(obs), side="right")
    lower = (1.0 + le) / (1.0 + null_sorted.size)
    return np.minimum(1.0, 2.0 * np.minimum(upper_pvalues(obs, null_sorted), lower))
