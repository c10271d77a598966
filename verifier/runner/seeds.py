"""Seed derivation: every random stream of a run is a pure function of the suite seed.

A chunk's seed depends only on ``(suite seed, sample-set key, chunk index)``, never on the order
in which chunks run, the number of chunks or the profile.  So a resumed run, a run split across
workers (``--shard I/N`` then ``merge``) and an uninterrupted run draw identical samples, and a
larger profile only *adds* chunks.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["chunk_seed", "stream_seed", "key_words"]

SEED_BITS = 63  # torch.Generator.manual_seed and numpy both accept any non-negative int64


def key_words(key: str) -> tuple[int, ...]:
    """A stable tuple of 32-bit words from a text key (SHA-256; unlike ``hash()``, not salted per process)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))


def stream_seed(suite_seed: int, key: str, index: int = 0) -> int:
    """Seed of stream ``index`` of the thing named ``key``, derived from ``suite_seed``.

    Uses :class:`numpy.random.SeedSequence` with ``spawn_key = (key words..., index)``, i.e.
    exactly the child that ``SeedSequence(suite_seed)`` spawning keyed by cell would give.

    Parameters
    ----------
    suite_seed : int
        The suite's ``seed`` (>= 0).
    key : str
        Stable identity of the stream, e.g. a sample-set key.
    index : int, default 0
        Chunk index (>= 0).

    Returns
    -------
    int
        A seed in ``[0, 2**63)``.

    Examples
    --------
    >>> stream_seed(1, "a", 0) == stream_seed(1, "a", 0) != stream_seed(1, "a", 1)
    True
    """
    ss = np.random.SeedSequence(entropy=int(suite_seed), spawn_key=key_words(key) + (int(index),))
    return int(ss.generate_state(1, dtype=np.uint64)[0]) & ((1 << SEED_BITS) - 1)


def chunk_seed(suite_seed: int, set_key: str, chunk_index: int) -> int:
    """Seed passed to ``Decoder.generate`` for chunk ``chunk_index`` of a sample set."""
    return stream_seed(suite_seed, "samples|" + set_key, chunk_index)
