"""Joint and conditional cells: tests on more than one position, or on a prefix-conditional law.

* :func:`joint_test`: tokens at several positions (e.g. token 1 x token 2) as one categorical
  variable, against the exact joint law, pooled data-blind like any GOF cell.
* :func:`conditional_test`: the law at one position among the samples whose earlier emitted
  tokens equal a given prefix (n is the number of matching rows, known only after sampling, so
  the pooling uses that n but never the counts).
* :func:`accepted_count_test`: the number of accepted drafts in a round against its exact law
  (``verifier.exact.accepted_count_law``) when the decoder reports it (``DecoderStats``).

Outcome encoding: a position's symbol is its token id, or ``PADDING_TOKEN_ID`` (-1) after EOS;
symbol ``s`` maps to digit ``s + 1`` in ``0..vocab``, and a tuple of m positions to the
mixed-radix index ``sum(digit_j * (vocab + 1) ** (m - 1 - j))`` over ``(vocab + 1) ** m`` categories.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Mapping, Sequence

import numpy as np

from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID
from verifier.stats._validate import check_counts, check_positive_int, check_probs, short
from verifier.stats.gof import gof_test
from verifier.stats.results import CellTestResult

__all__ = ["MAX_JOINT_CATEGORIES", "outcome_index", "law_probs", "joint_counts", "joint_test", "conditional_counts", "conditional_test", "accepted_count_test"]

MAX_JOINT_CATEGORIES = 2_000_000  # (vocab + 1) ** positions; above this the joint table does not fit a cell


def _tokens_iv(token_ids, vocab_size: int) -> np.ndarray:
    ids = np.asarray(token_ids)
    if ids.dtype.kind not in "iu" or ids.ndim != 2:
        raise invalid_argument("token_ids", short(ids), "an int64 array of shape (num_samples, max_new_tokens)")
    if ids.size and (ids.min() < PADDING_TOKEN_ID or ids.max() >= vocab_size):
        raise invalid_argument("token_ids", short(ids[(ids < PADDING_TOKEN_ID) | (ids >= vocab_size)]), f"ids in 0..{vocab_size - 1} or padding {PADDING_TOKEN_ID}")
    return ids.astype(np.int64)


def _positions_iv(positions, width: int) -> tuple[int, ...]:
    pos = (positions,) if isinstance(positions, (int, np.integer)) else tuple(positions)
    if not pos or any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < width for p in pos):
        raise invalid_argument("positions", positions, f"one or more indices in 0..{width - 1}")
    return tuple(int(p) for p in pos)


def outcome_index(outcomes, vocab_size: int) -> np.ndarray:
    """Mixed-radix category index of outcome tuples (array of shape (rows, m); -1 = padding)."""
    arr = np.asarray(outcomes, dtype=np.int64) + 1
    radix = (vocab_size + 1) ** np.arange(arr.shape[-1] - 1, -1, -1, dtype=np.int64)
    return arr @ radix


def law_probs(law: Mapping[tuple[int, ...], Fraction], vocab_size: int, positions: Sequence[int] | None = None) -> np.ndarray:
    """Float64 probability vector over ``(vocab + 1) ** m`` categories from an exact tuple law.

    Parameters
    ----------
    law : dict tuple -> Fraction
        E.g. ``verifier.exact.target_law(target, prefix, num_tokens)``.
    vocab_size : int
    positions : sequence of int or None
        Positions to keep (marginalising the rest); None keeps all.

    Returns
    -------
    np.ndarray, shape ((vocab_size + 1) ** m,), float64, summing to 1.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    if not law:
        raise invalid_argument("law", {}, "a non-empty dict of outcome tuples to probabilities")
    width = len(next(iter(law)))
    pos = tuple(range(width)) if positions is None else _positions_iv(positions, width)
    _size_iv(vocab_size, len(pos))
    keys = np.array([[o[i] for i in pos] for o in law], dtype=np.int64)
    total = sum(law.values(), Fraction(0))
    if total != 1:
        raise invalid_argument("law", f"<sums to {total}>", "an exact law summing to 1")
    probs = np.zeros((vocab_size + 1) ** len(pos))
    np.add.at(probs, outcome_index(keys, vocab_size), np.array([float(v) for v in law.values()]))
    return probs


def _size_iv(vocab_size: int, m: int) -> None:
    if (vocab_size + 1) ** m > MAX_JOINT_CATEGORIES:
        raise invalid_argument("positions", f"<{m} positions over vocab {vocab_size}>", f"(vocab + 1) ** positions <= {MAX_JOINT_CATEGORIES}")


def joint_counts(token_ids, positions: Sequence[int], vocab_size: int) -> np.ndarray:
    """Counts of the outcome tuples at ``positions`` over ``(vocab + 1) ** m`` categories.

    Parameters
    ----------
    token_ids : array_like, shape (num_samples, max_new_tokens), int64, -1 after EOS
    positions : sequence of int
    vocab_size : int

    Returns
    -------
    np.ndarray, shape ((vocab_size + 1) ** len(positions),), int64
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    ids = _tokens_iv(token_ids, vocab_size)
    pos = _positions_iv(positions, ids.shape[1])
    _size_iv(vocab_size, len(pos))
    return np.bincount(outcome_index(ids[:, pos], vocab_size), minlength=(vocab_size + 1) ** len(pos))


def joint_test(token_ids, law, positions: Sequence[int], vocab_size: int, **gof_kwargs) -> CellTestResult:
    """GOF test of the joint law of the tokens at ``positions`` (e.g. ``(0, 1)``).

    Parameters
    ----------
    token_ids : array_like, shape (num_samples, max_new_tokens), int64
    law : dict tuple -> Fraction, or array_like of float64 probs over ``(vocab + 1) ** m`` categories
        The exact law (``verifier.exact.target_law``) of at least ``max(positions) + 1`` tokens,
        marginalised to ``positions``; or the probability vector already in the encoding above.
    positions : sequence of int
    vocab_size : int
    **gof_kwargs
        Passed to :func:`verifier.stats.gof_test` (alpha, pvalue_method, rng, ...).

    Returns
    -------
    CellTestResult with ``test="joint"``; pooled categories are outcome indices (module docstring).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> law = {(0, 0): F(1, 4), (0, 1): F(1, 4), (1, 0): F(1, 4), (1, 1): F(1, 4)}
    >>> ids = np.array([[0, 0], [0, 1], [1, 0], [1, 1]] * 25)
    >>> joint_test(ids, law, (0, 1), vocab_size=2).pvalue
    1.0
    """
    counts = joint_counts(token_ids, positions, vocab_size)
    probs = law_probs(law, vocab_size, positions) if isinstance(law, Mapping) else check_probs(law, "law")
    if probs.shape != counts.shape:
        raise invalid_argument("law", f"<{probs.size} categories>", f"{counts.size} categories ((vocab + 1) ** positions)")
    return gof_test(counts, probs, test="joint", **gof_kwargs)


def conditional_counts(token_ids, prefix: Sequence[int], vocab_size: int) -> np.ndarray:
    """Counts at position ``len(prefix)`` among rows whose first emitted tokens equal ``prefix``.

    Returns
    -------
    np.ndarray, shape (vocab_size + 1,), int64 — index 0 is padding (-1, after EOS), index t + 1 token t.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    ids = _tokens_iv(token_ids, vocab_size)
    pre = np.asarray(tuple(prefix), dtype=np.int64)
    if pre.size >= ids.shape[1]:
        raise invalid_argument("prefix", tuple(prefix), f"at most {ids.shape[1] - 1} tokens (max_new_tokens - 1)")
    rows = np.all(ids[:, : pre.size] == pre, axis=1)
    return np.bincount(ids[rows, pre.size] + 1, minlength=vocab_size + 1)


def conditional_test(token_ids, prefix: Sequence[int], expected, vocab_size: int, **gof_kwargs) -> CellTestResult:
    """GOF test of the law at the position after ``prefix`` among the samples that emitted ``prefix``.

    Parameters
    ----------
    token_ids : array_like, shape (num_samples, max_new_tokens), int64
    prefix : sequence of int
        Emitted tokens at positions ``0..len(prefix)-1`` (not including the prompt).
    expected : dict tuple -> Fraction, or array_like of float64, shape (vocab,) or (vocab + 1,)
        The exact law of at least ``len(prefix) + 1`` tokens (it is conditioned on ``prefix``
        here), or the target's next-token probs after prompt + prefix (``TabularLM.probs``).
    vocab_size : int

    Raises
    ------
    InvalidArgumentError
        No sample emitted ``prefix`` (n = 0), or the prefix has probability 0 under ``expected``.
    """
    counts = conditional_counts(token_ids, prefix, vocab_size)
    if isinstance(expected, Mapping):
        pre = tuple(prefix)
        sub = {o[len(pre):len(pre) + 1]: p for o, p in expected.items() if tuple(o[: len(pre)]) == pre}
        mass = sum(sub.values(), Fraction(0))
        if mass == 0:
            raise invalid_argument("prefix", pre, "a prefix with positive probability under the expected law")
        probs = law_probs({o: p / mass for o, p in sub.items()}, vocab_size)
    else:
        probs = check_probs(expected, "expected")
        if probs.size == vocab_size:
            probs = np.append(0.0, probs)  # no EOS padding possible at this position
        if probs.size != vocab_size + 1:
            raise invalid_argument("expected.shape", probs.shape, f"({vocab_size},) or ({vocab_size + 1},)")
    if counts.sum() == 0:
        raise invalid_argument("token_ids", f"<no row starts with prefix {tuple(prefix)}>", "at least one sample emitting the prefix (n >= 1)")
    return gof_test(counts, probs, test="conditional", **gof_kwargs)


def accepted_count_test(accepted_counts, expected_law, **gof_kwargs) -> CellTestResult:
    """GOF test of the number of accepted drafts per round against its exact law.

    Parameters
    ----------
    accepted_counts : array_like of int, shape (rounds,)
        Accepted draft tokens of each round (``DecoderStats.first_round_accepted`` for the first
        round of each row, so the rounds are iid), values in ``0..num_draft_tokens``.
    expected_law : sequence of Fraction or float, shape (num_draft_tokens + 1,)
        ``verifier.exact.accepted_count_law(...)``.

    Returns
    -------
    CellTestResult with ``test="accepted-count"``.

    Examples
    --------
    >>> accepted_count_test([0, 1, 1, 2] * 50, [0.25, 0.5, 0.25]).pvalue
    1.0
    """
    probs = check_probs([float(v) for v in expected_law], "expected_law")
    acc = np.asarray(accepted_counts)
    if acc.dtype.kind not in "iu" or acc.ndim != 1:
        raise invalid_argument("accepted_counts", short(acc), "a 1-D integer array")
    if acc.size and (acc.min() < 0 or acc.max() >= probs.size):
        raise invalid_argument("accepted_counts", short(acc), f"values in 0..{probs.size - 1} (num_draft_tokens)")
    counts = check_counts(np.bincount(acc.astype(np.int64), minlength=probs.size), "accepted_counts (n)")
    return gof_test(counts, probs, test="accepted-count", **gof_kwargs)
