"""Default chunk size (rows per ``generate`` call) when a suite does not set ``chunk_size``.

The sampler's memory grows as rows x vocabulary: the reference decoders hold per row the float32
logits of the target's k + 1 (+ pending) positions and of the k draft positions, plus the model's
own transients -- about ``(2k + 4) x V x 4`` bytes (:func:`sampler_bytes_per_row`).  The default is
the number of rows whose logits fit :data:`SAMPLER_BYTES` (1 GiB), at most :data:`DEFAULT_CHUNK_SIZE`
(500, the historic default) and at least :data:`MIN_CHUNK_SIZE`:

* V <= 30k (every shipped and ci-suite vocabulary): 500, exactly as before, so the chunk seeds,
  set ids and samples of those suites do not change;
* V = 128,256, k = 2: 261 rows; V = 256,000, k = 2: 131 rows.

It depends on the vocabulary and k only -- the same suite gives the same chunks (hence the same
samples) on every machine -- unless :data:`MEMORY_SHARE` of the memory available now is below
:data:`SAMPLER_BYTES`; then the budget shrinks to that share and the run records the smaller
chunk size in its plan (``run.json``).  A suite's explicit ``chunk_size`` always wins.
"""

from __future__ import annotations

from verifier.runner.guards import available_memory

__all__ = ["DEFAULT_CHUNK_SIZE", "MIN_CHUNK_SIZE", "SAMPLER_BYTES", "MEMORY_SHARE", "sampler_bytes_per_row",
           "default_chunk_size"]

DEFAULT_CHUNK_SIZE = 500  # the suite schema's historic default; the most rows a default chunk has
MIN_CHUNK_SIZE = 16  # fewer rows per call no longer amortise the per-call cost (prefill, Python per step)
SAMPLER_BYTES = 2**30  # sampler logits per chunk: 1 GiB
MEMORY_SHARE = 0.25  # at most this share of the available memory, when that is less than SAMPLER_BYTES


def sampler_bytes_per_row(vocab_size: int, num_draft_tokens: int) -> int:
    """Bytes the sampler holds per row over the vocabulary: ``(2k + 4) x V x 4`` (float32 logits)."""
    return (2 * int(num_draft_tokens) + 4) * int(vocab_size) * 4


def default_chunk_size(vocab_size: int, num_draft_tokens: int, available: int | None = -1) -> int:
    """Rows per ``generate`` call for a suite that does not set ``chunk_size``.

    Parameters
    ----------
    vocab_size : int
        V, the models' vocabulary (logits width).
    num_draft_tokens : int
        The largest k of the decoder entry (ancestral decoders: pass 0).
    available : int or None, optional
        Bytes of memory available; default: measured now (``None``: unknown, the fixed budget is used).

    Returns
    -------
    int
        ``clip(budget // sampler_bytes_per_row, MIN_CHUNK_SIZE, DEFAULT_CHUNK_SIZE)`` with
        ``budget = min(SAMPLER_BYTES, MEMORY_SHARE x available)``.
    """
    available = available_memory() if available == -1 else available
    budget = SAMPLER_BYTES if available is None else min(SAMPLER_BYTES, int(MEMORY_SHARE * available))
    rows = budget // sampler_bytes_per_row(vocab_size, num_draft_tokens)
    return int(min(DEFAULT_CHUNK_SIZE, max(MIN_CHUNK_SIZE, rows)))
