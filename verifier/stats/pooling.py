"""Data-blind pooling of categories for chi-square tests.

Categories are pooled using only the *expected* probabilities and the sample size, never the
observed counts, so pooling cannot bias the test: sort tokens by target prob descending (ties by
token id), keep the head tokens as their own category while each has expected count
``>= min_expected``, and merge the tail into one category whose expected count is also
``>= min_expected`` (folding it into the last head category if it is not).  Unobserved
categories are never dropped.  Tokens whose expected prob is exactly 0 belong to no category
(group ``-1``): emitting one is a support violation, reported separately.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from verifier.stats._validate import check_min_expected, check_positive_int, check_probs

__all__ = ["MIN_EXPECTED_COUNT", "Pooling", "law_key", "pool_categories"]

MIN_EXPECTED_COUNT = 10.0  # Cochran-style rule; docs/ARCHITECTURE.md "Statistical defaults" (every expected count >= 10)
UNPOOLED = -1  # group label of a token with expected prob 0 (outside the support)


@dataclass(frozen=True)
class Pooling:
    """Result of :func:`pool_categories`.

    Attributes
    ----------
    groups : np.ndarray, shape (vocab,), int64
        Category index of each token, ``-1`` for tokens with expected prob 0.
    num_categories : int
        Number of pooled categories (the chi-square df is ``num_categories - 1``).
    expected_probs : np.ndarray, shape (num_categories,), float64
        Expected prob of each pooled category.
    """

    groups: np.ndarray
    num_categories: int
    expected_probs: np.ndarray

    def pool(self, counts: np.ndarray) -> np.ndarray:
        """Sum ``counts[..., vocab]`` into ``[..., num_categories]`` (tokens in group -1 are dropped)."""
        counts = np.asarray(counts)
        # O(vocab) segment sums (a dense vocab x categories indicator was 2.4 GB on a 385^2 joint law)
        keep = np.flatnonzero(self.groups >= 0)
        keep = keep[np.argsort(self.groups[keep], kind="stable")]
        starts = np.searchsorted(self.groups[keep], np.arange(self.num_categories))
        dtype = counts.dtype if counts.dtype.kind in "iu" else np.result_type(counts.dtype, np.float64)
        out = np.zeros(counts.shape[:-1] + (self.num_categories,), dtype=dtype)
        filled = starts < keep.size
        if filled.any():
            sums = np.add.reduceat(counts[..., keep].astype(dtype, copy=False), starts[filled], axis=-1)
            empty = np.append(starts[filled][1:] == starts[filled][:-1], False)  # a group with no token
            out[..., np.flatnonzero(filled)] = np.where(empty, 0, sums)
        return out

    def describe(self, max_groups: int = 12) -> list[list[int]]:
        """Token ids of each pooled category (at most ``max_groups`` categories listed)."""
        return [np.flatnonzero(self.groups == g).tolist() for g in range(min(self.num_categories, max_groups))]


def pool_categories(expected_probs, n: int, min_expected: float = MIN_EXPECTED_COUNT) -> Pooling:
    """Pool categories by expected prob only, so every pooled expected count is >= ``min_expected``.

    Parameters
    ----------
    expected_probs : array_like, shape (vocab,), float64
        Processed target probs of the cell (sum to 1 within ``PROBS_SUM_ATOL``).
    n : int
        Number of observations the test will see (>= 1).
    min_expected : float, default 10
        Smallest allowed expected count per pooled category.

    Returns
    -------
    Pooling
        With a single category when ``n`` is too small to test at all (df = 0).

    Raises
    ------
    InvalidArgumentError
        If ``expected_probs`` is not a distribution, ``n < 1`` or ``min_expected`` not finite > 0.

    Examples
    --------
    >>> pool_categories([0.5, 0.3, 0.15, 0.05], n=100).groups.tolist()
    [0, 1, 2, 2]
    """
    probs = check_probs(expected_probs, "expected_probs")
    n = check_positive_int(n, "n")
    return _pool(probs, n, check_min_expected(min_expected))


_MEMO_BYTES = 64 * 2**20  # poolings kept by _pool's memo (their arrays, read-only), least recently used dropped
_memo: OrderedDict[bytes, Pooling] = OrderedDict()
_memo_bytes = 0
_orders: OrderedDict[bytes, np.ndarray] = OrderedDict()  # law -> its support sorted by prob (the argsort), same bound
_orders_bytes = 0
_memo_lock = threading.Lock()


def law_key(probs: np.ndarray) -> bytes:
    """The memo key of a law: a SHA-256 of its float64 bytes (16 bytes kept) and its size.

    Parameters
    ----------
    probs : array_like, shape (categories,)
        The law (converted to contiguous float64 as the pooling reads it).

    Returns
    -------
    bytes
        24 bytes.  One key serves every n of an n-needed search (:func:`_pool`'s ``law``): hashing a 147,456-outcome
        joint law costs ~0.8 ms (SHA-256 runs on the CPU's SHA extensions where it has them; BLAKE2b took 1.7-3 ms).
    """
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    return hashlib.sha256(memoryview(probs).cast("B")).digest()[:16] + np.int64(probs.size).tobytes()


def _pool(probs: np.ndarray, n: int, min_expected: float, law: bytes | None = None) -> Pooling:
    """:func:`pool_categories` without argument checks, memoised: a pure function of (probs, n,
    min_expected), asked for again and again for one cell (the test, its MDE at the cell's n and at
    every n of the n-needed search, the report's labels) and for every decoder testing the same law.
    The memo keys on a hash of the probs' bytes (``law``: :func:`law_key` of ``probs``, computed here when None)
    and returns the same read-only :class:`Pooling`."""
    global _memo_bytes
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    law = law_key(probs) if law is None else law
    key = law + np.array([n], dtype=np.int64).tobytes() + np.array([min_expected], dtype=np.float64).tobytes()
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
            return hit
        order = _orders.get(law)
        if order is not None:
            _orders.move_to_end(law)
    if order is None:  # the sort does not depend on n: one argsort per law, not one per n of an n-needed search
        order = _SupportOrder(probs)
        with _memo_lock:
            global _orders_bytes
            if law not in _orders and order.nbytes <= _MEMO_BYTES:
                _orders[law] = order
                _orders_bytes += order.nbytes
                while _orders_bytes > _MEMO_BYTES:
                    _orders_bytes -= _orders.popitem(last=False)[1].nbytes
    pooling = _pool_sorted(probs, n, min_expected, order)
    pooling.groups.flags.writeable = False
    pooling.expected_probs.flags.writeable = False
    size = pooling.groups.nbytes + pooling.expected_probs.nbytes
    with _memo_lock:
        if key not in _memo and size <= _MEMO_BYTES:
            _memo[key] = pooling
            _memo_bytes += size
            while _memo_bytes > _MEMO_BYTES:
                _, old = _memo.popitem(last=False)
                _memo_bytes -= old.groups.nbytes + old.expected_probs.nbytes
    return pooling


def _support_order(probs: np.ndarray) -> np.ndarray:
    """Tokens with prob > 0, by prob descending (ties by token id)."""
    order = np.argsort(-probs, kind="stable")
    return order[probs[order] > 0]


class _SupportOrder:
    """What pooling a law needs at every n, computed once per law: its support by prob descending (ties by token id)
    and those probs in reverse order, contiguous (the tail sums are a cumulative sum over them)."""

    def __init__(self, probs: np.ndarray) -> None:
        self.support = _support_order(probs)
        self.reversed_probs = np.ascontiguousarray(probs[self.support][::-1])
        for a in (self.support, self.reversed_probs):
            a.flags.writeable = False
        self.nbytes = self.support.nbytes + self.reversed_probs.nbytes


def _pool_uncached(probs: np.ndarray, n: int, min_expected: float) -> Pooling:
    """The pooling computed afresh (no memo)."""
    return _pool_sorted(np.ascontiguousarray(probs, dtype=np.float64), n, min_expected, _SupportOrder(probs))


def _pool_sorted(probs: np.ndarray, n: int, min_expected: float, order: _SupportOrder) -> Pooling:
    """The pooling of ``probs`` at n from its :class:`_SupportOrder`.

    The expected counts are ``n * p`` of the sorted support and the tail sums their cumulative sums from the
    smallest up, each the same float64 operations in the same order at every n; the tail category's prob is the
    sequential sum of its tokens' probs in token-id order (as ``np.bincount`` with weights adds them).  So the
    categories and their probs do not depend on how the law's support order was obtained."""
    support = order.support
    size = len(support)
    expected_rev = n * order.reversed_probs  # expected counts, smallest first
    tail_rev = np.cumsum(expected_rev)  # tail_rev[j] = expected count of the j + 1 smallest tokens
    # head size m: tokens 0..m-1 individually, tail support[m:] merged; need expected[m-1] >= min
    # and (tail empty or tail[m] >= min), tail[c] = tail_rev[size - 1 - c]
    m1 = int(np.count_nonzero(expected_rev >= min_expected))  # sorted descending: head candidates
    cands = np.arange(m1 + 1)
    tail_at = np.where(cands < size, tail_rev[np.clip(size - 1 - cands, 0, None)] if size else 0.0, 0.0)
    ok = (cands == size) | (tail_at >= min_expected)
    ok[0] = size > 0 and tail_at[0] >= min_expected
    m = int(cands[ok].max()) if ok.any() else 0  # 0: nothing individually large enough, the support one category
    groups = np.full(probs.shape[0], UNPOOLED, dtype=np.int64)
    groups[support[:m]] = np.arange(m)
    head = probs[support[:m]]
    if m == size:
        return Pooling(groups=groups, num_categories=m, expected_probs=head.copy())
    groups[support[m:]] = m
    tail = np.cumsum(probs[groups == m])[-1:]  # sequential, token-id order
    return Pooling(groups=groups, num_categories=m + 1, expected_probs=np.concatenate([head, tail]))
