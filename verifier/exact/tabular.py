"""Rational n-gram language models: the tabular target and draft of the exact stage.

A :class:`TabularLM` maps the last ``context_len`` tokens of a prefix to a next-token
distribution whose entries are :class:`fractions.Fraction`.  It is used by the exact enumerator
(``verifier.exact``) and, wrapped in a tiny torch module (``verifier.models.tabular``), by the
real decoders, so a decoder's output can be checked against an exactly known law.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

import numpy as np

from verifier.errors import invalid_argument

__all__ = ["TabularLM", "as_fraction_probs"]

MAX_VOCAB = 16  # exact enumeration grows as vocab**tokens; larger tables belong to sampling tests
MAX_CONTEXT_LEN = 2


def as_fraction_probs(values: Iterable, *, name: str = "probs") -> tuple[Fraction, ...]:
    """Convert a probability vector to exact fractions and check it is a distribution.

    Floats are converted through their decimal string (``0.1 -> 1/10``), so the seeds' decimal
    examples become the rationals they were written as.

    Raises
    ------
    InvalidArgumentError
        If the vector is empty, has a negative or non-numeric entry, or does not sum to exactly 1.
    """
    out = []
    for v in values:
        if isinstance(v, bool):
            raise invalid_argument(name, list(values), "numbers (Fraction, int, str or float)")
        try:
            f = Fraction(repr(v)) if isinstance(v, float) else Fraction(v)
        except (TypeError, ValueError):
            raise invalid_argument(name, v, "entries convertible to fractions.Fraction") from None
        out.append(f)
    if not out:
        raise invalid_argument(name, [], "a non-empty probability vector")
    if any(f < 0 for f in out):
        raise invalid_argument(name, [str(f) for f in out], "non-negative entries")
    total = sum(out)
    if total != 1:
        raise invalid_argument(name, [str(f) for f in out], f"entries summing to exactly 1 (sum is {total})")
    return tuple(out)


class TabularLM:
    """A rational n-gram language model over ``range(vocab_size)``.

    Parameters
    ----------
    table : mapping from tuple[int, ...] (length ``context_len``) to a probability vector
        Next-token distribution for every context; every one of the ``vocab_size ** context_len``
        contexts must be present.  With ``context_len == 0`` the only key is ``()``.
    vocab_size : int
        Number of tokens, 1..16.
    context_len : int
        0 (unigram), 1 (bigram) or 2 (trigram).
    eos_token_id : int or None, default None
        A token that ends a sequence: once it is emitted nothing more is generated.
    name : str, default ""
        Shown in reports.

    Raises
    ------
    InvalidArgumentError
        If a context is missing or malformed, a row is not a distribution, or a size is out of range.

    Notes
    -----
    A prefix shorter than ``context_len`` is an error: prompts must supply the context.
    """

    def __init__(
        self,
        table: Mapping[tuple[int, ...], Sequence],
        vocab_size: int,
        context_len: int,
        eos_token_id: int | None = None,
        name: str = "",
    ) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or not 1 <= vocab_size <= MAX_VOCAB:
            raise invalid_argument("vocab_size", vocab_size, f"an integer in 1..{MAX_VOCAB}")
        if context_len not in range(MAX_CONTEXT_LEN + 1):
            raise invalid_argument("context_len", context_len, "0, 1 or 2")
        if eos_token_id is not None and eos_token_id not in range(vocab_size):
            raise invalid_argument("eos_token_id", eos_token_id, f"None or a token id in 0..{vocab_size - 1}")
        self.vocab_size = vocab_size
        self.context_len = context_len
        self.eos_token_id = eos_token_id
        self.name = name
        rows: dict[tuple[int, ...], tuple[Fraction, ...]] = {}
        for ctx in itertools.product(range(vocab_size), repeat=context_len):
            if ctx not in table:
                raise invalid_argument("table", f"<missing context {ctx}>", f"all {vocab_size}**{context_len} contexts")
            row = as_fraction_probs(table[ctx], name=f"table[{ctx}]")
            if len(row) != vocab_size:
                raise invalid_argument(f"len(table[{ctx}])", len(row), f"vocab_size={vocab_size}")
            rows[ctx] = row
        extra = set(table) - set(rows)
        if extra:
            raise invalid_argument("table", f"<unexpected contexts {sorted(extra)[:3]}>", f"tuples of {context_len} ids < {vocab_size}")
        self._rows = rows

    def probs(self, prefix: Sequence[int]) -> tuple[Fraction, ...]:
        """Next-token distribution after ``prefix`` (only its last ``context_len`` tokens matter).

        Raises
        ------
        InvalidArgumentError
            If ``prefix`` is shorter than ``context_len`` or holds an id outside the vocabulary.
        """
        if len(prefix) < self.context_len:
            raise invalid_argument("prefix", tuple(prefix), f"at least context_len={self.context_len} tokens")
        ctx = tuple(int(t) for t in prefix[len(prefix) - self.context_len:]) if self.context_len else ()
        if ctx not in self._rows:
            raise invalid_argument("prefix", tuple(prefix), f"token ids in 0..{self.vocab_size - 1}")
        return self._rows[ctx]

    @property
    def contexts(self) -> list[tuple[int, ...]]:
        """All contexts in lexicographic order (the row order of :meth:`float_table`)."""
        return list(self._rows)

    def float_table(self) -> np.ndarray:
        """The table as float64, shape ``(vocab_size ** context_len, vocab_size)``.

        Row index of context ``(c_1, ..., c_n)`` is ``sum(c_i * vocab_size ** (n - i))``
        (lexicographic), i.e. the order of :attr:`contexts`.
        """
        return np.array([[float(f) for f in row] for row in self._rows.values()], dtype=np.float64)

    def __repr__(self) -> str:
        return f"TabularLM(name={self.name!r}, vocab_size={self.vocab_size}, context_len={self.context_len}, eos_token_id={self.eos_token_id})"
