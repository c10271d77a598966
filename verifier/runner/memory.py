"""Byte budgets for the statistics stage's working arrays, sized from the memory available now.

Every array that grows with the vocabulary (next-token probs of a batch of prefixes, teacher-forced
probs of a batch of rows) is processed in batches of rows whose bytes fit :func:`work_bytes`; nothing
is held as ``[rows, positions, vocab]`` for all rows at once, so the stage needs O(n x T + V) memory
beside one batch.
"""

from __future__ import annotations

from verifier.runner.guards import available_memory

__all__ = ["MAX_WORK_BYTES", "WORK_SHARE", "work_bytes", "rows_per_batch"]

MAX_WORK_BYTES = 512 * 2**20  # one batch's working arrays never exceed this: larger batches are no faster on CPU
MIN_WORK_BYTES = 16 * 2**20  # below this a batch is too small to amortise a forward pass; used when memory is unknown
WORK_SHARE = 0.10  # share of MemAvailable one batch may take (the sampler, the models and other jobs keep the rest)


def work_bytes(available: int | None = None) -> int:
    """Bytes one batch of working arrays may take: ``WORK_SHARE`` of the available memory, clipped
    to ``[MIN_WORK_BYTES, MAX_WORK_BYTES]`` (``MIN_WORK_BYTES`` when the available memory is unknown)."""
    available = available_memory() if available is None else available
    if available is None:
        return MIN_WORK_BYTES
    return int(min(MAX_WORK_BYTES, max(MIN_WORK_BYTES, WORK_SHARE * available)))


def rows_per_batch(bytes_per_row: int, *, cap: int | None = None, available: int | None = None) -> int:
    """Rows whose working arrays (``bytes_per_row`` each) fit :func:`work_bytes`; at least 1, at most ``cap``."""
    rows = max(1, work_bytes(available) // max(1, int(bytes_per_row)))
    return int(min(rows, cap)) if cap is not None else int(rows)
