"""A fixed, recorded iteration order of an assistant tokenizer's vocabulary (reproducible universal assisted generation).

transformers' universal assisted generation (``assistant_tokenizer=``) builds its id maps by iterating
``assistant_tokenizer.get_vocab()``.  For a ``tokenizers``-backed tokenizer that dict comes from a Rust hash map whose
order changes with every process, and the order reaches the samples: the q column order of
``AssistantToTargetTranslator`` (reports/audits/transformers-5.24.0/FINDINGS.md section 1) depends on it.  So two
audits with the same seed gave different samples, and each worker process sampled under another permutation (issue
27, "reproducible audits").

:func:`fix_vocab_order` makes ``get_vocab()`` of one tokenizer object iterate in a permutation drawn from a seed --
the same in every process -- and returns its digest for the run's record.  It keeps what transformers sees a
hash-like, non-id order (the order real deployments get), so the audit still exercises the code path in which the
column order matters; the law of that order can be rebuilt (:mod:`verifier.engines.reproductions.transformers`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from verifier.errors import invalid_argument

__all__ = ["NATIVE_ORDER", "seeded_vocab", "fix_vocab_order", "order_digest"]

NATIVE_ORDER = -1  # vocab_order_seed value that keeps the tokenizer's own (per-process hash) order: not reproducible


def seeded_vocab(vocab: dict[str, int], seed: int) -> dict[str, int]:
    """``vocab`` (token -> id) re-inserted in a permutation of its id order drawn from ``seed``.

    Parameters
    ----------
    vocab : dict of str -> int
        A tokenizer's ``get_vocab()``.
    seed : int
        ``>= 0``: ``numpy.random.default_rng(seed).permutation`` of the entries sorted by id.

    Returns
    -------
    dict of str -> int
        The same entries; only the iteration order differs.

    Raises
    ------
    InvalidArgumentError
        ``seed`` not an integer >= 0.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise invalid_argument("vocab_order_seed", seed, f"an integer >= 0 ({NATIVE_ORDER}: the tokenizer's own order)")
    items = sorted(vocab.items(), key=lambda kv: (kv[1], kv[0]))
    perm = np.random.default_rng(int(seed)).permutation(len(items))
    return {items[i][0]: items[i][1] for i in perm}


def order_digest(vocab: dict[str, int]) -> str:
    """sha256 (first 16 hex digits) of the ids in ``vocab``'s iteration order: equal digests, equal orders."""
    return hashlib.sha256(np.asarray(list(vocab.values()), dtype=np.int64).tobytes()).hexdigest()[:16]


def fix_vocab_order(tokenizer: Any, seed: int) -> str:
    """Make ``tokenizer.get_vocab()`` iterate in :func:`seeded_vocab` order (a fresh dict per call); return its digest.

    ``seed == NATIVE_ORDER`` leaves the tokenizer alone and returns the digest of this process's own order.
    """
    if seed == NATIVE_ORDER:
        return order_digest(tokenizer.get_vocab())
    ordered = seeded_vocab(tokenizer.get_vocab(), seed)
    tokenizer.get_vocab = lambda *args, **kwargs: dict(ordered)  # instance attribute: shadows the class's method
    return order_digest(ordered)
