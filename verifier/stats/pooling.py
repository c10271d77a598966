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
from dataclasses import dataclass

import numpy as np

from verifier.stats._validate import check_min_expected, check_positive_int, check_probs

__all__ = ["MIN_EXPECTED_COUNT", "Pooling", "pool_categories"]

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


_ORDER_CACHE: dict[bytes, np.ndarray] = {}  # law digest -> descending stable order (issue 17: power searches re-pool one law ~45 times)


def _descending_order(probs: np.ndarray) -> np.ndarray:
    """``np.argsort(-probs, kind="stable")``, remembered for the last few laws (a pure function of the bytes)."""
    if probs.size < 4096:
        return np.argsort(-probs, kind="stable")
    key = hashlib.blake2b(np.ascontiguousarray(probs, dtype=np.float64).tobytes(), digest_size=16).digest()
    order = _ORDER_CACHE.get(key)
    if order is None:
        if len(_ORDER_CACHE) >= 8:
            _ORDER_CACHE.pop(next(iter(_ORDER_CACHE)))
        order = _ORDER_CACHE[key] = np.argsort(-probs, kind="stable")
        order.flags.writeable = False
    return order


def _pool(probs: np.ndarray, n: int, min_expected: float) -> Pooling:
    order = _descending_order(probs)
    support = order[probs[order] > 0]
    expected = n * probs[support]
    tail = np.cumsum(expected[::-1])[::-1]  # tail[i] = expected count of support[i:]
    # head size m: tokens 0..m-1 individually, tail support[m:] merged; need expected[m-1] >= min
    # and (tail empty or tail[m] >= min).
    size = len(support)
    m1 = int(np.count_nonzero(expected >= min_expected))  # sorted descending: head candidates
    tail_ext = np.append(tail, 0.0)
    cands = np.arange(m1 + 1)
    ok = (cands == size) | (tail_ext[cands] >= min_expected)
    ok[0] = ok[0] and size > 0 and tail_ext[0] >= min_expected
    m = int(cands[ok].max()) if ok.any() else 0
    groups = np.full(probs.shape[0], UNPOOLED, dtype=np.int64)
    groups[support[:m]] = np.arange(m)
    if m < size:
        groups[support[m:]] = m
    num = int(groups.max()) + 1 if size else 0
    if m == 0 and size:  # nothing individually large enough: everything is one category
        groups[support] = 0
        num = 1
    pooled = np.bincount(groups[groups >= 0], weights=probs[groups >= 0], minlength=num)
    return Pooling(groups=groups, num_categories=num, expected_probs=pooled)
