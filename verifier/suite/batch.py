"""The suite axis ``batch_composition``: rows per ``generate`` call as a design factor (issue 29, bug kind 1).

A decoder entry (or ``[defaults]``) may say::

    batch_composition = { rows = [1, 2, 4, 16] }

Each level ``b`` of ``rows`` is a sample set of its own (its own seeds, cells and figures): the runner draws its
``samples`` rows in ``generate`` calls of exactly ``b`` rows (:mod:`verifier.runner.batch`), so a defect that
appears only when more than two requests share a step, or only at some padded or captured batch sizes, shows at
the levels where it lives and not at the others; every cell of the set carries the level in its name
(``.../gof@1[batch=4]``) and the decoder's Holm correction runs over the cells of every level.  Without the key a
decoder is sampled in chunks of ``chunk_size`` rows, as before.

Strict: an unknown key is a :class:`~verifier.errors.ConfigError` naming it.  Two keys of the issue's design are
named and refused with the reason (:data:`NOT_YET`): ``mixed_temperature`` (filler rows at another temperature in
the same call) and ``mixed_prompt_lengths`` (filler rows with other prompts, padded) need a ``generate`` call that
takes a sampling config or a prompt per row, which :class:`verifier.protocols.Decoder` does not have (one prompt,
one :class:`~verifier.sampling.SamplingConfig` per call).
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["BATCH_KEYS", "MAX_BATCH_ROWS", "NOT_YET", "parse_batch_composition", "level_chunk_size", "level_tag"]

BATCH_KEYS = ("rows",)
MAX_BATCH_ROWS = 4096  # rows of one generate call; beyond it a level is a memory question, not a batch-shape one
NOT_YET = {
    "mixed_temperature": "filler rows at another temperature in the same call need a generate call that takes a "
                         "sampling config per row; verifier.protocols.Decoder takes one SamplingConfig per call",
    "mixed_prompt_lengths": "filler rows with other prompts (padded) need a generate call that takes a prompt per "
                            "row; verifier.protocols.Decoder takes one prompt per call",
}


def parse_batch_composition(r: Any, base: Mapping[str, Any]) -> tuple[int, ...]:
    """The ``batch_composition`` levels of one decoder entry (``()``: none, chunks of ``chunk_size`` as before).

    Parameters
    ----------
    r : verifier.suite.schema._Reader
        The strict reader of the ``[[decoders]]`` entry or ``[defaults]``.
    base : mapping
        The parsed ``[defaults]`` grid (its ``batch_composition`` is the default).

    Returns
    -------
    tuple of int
        Distinct rows-per-call levels in 1..:data:`MAX_BATCH_ROWS`, in the suite's order.

    Raises
    ------
    ConfigError
        Not a table, an unknown key (one of :data:`NOT_YET` with its reason), ``rows`` missing, empty, repeated or
        outside 1..:data:`MAX_BATCH_ROWS`.
    """
    table = r.get("batch_composition", dict, None, "a table such as { rows = [1, 2, 4, 16] }")
    if table is None:
        return tuple(base.get("batch_composition", ()))
    where = r.path("batch_composition")
    for key in table:
        if key in NOT_YET:
            r._fail(f"{where}.{key}", table[key], f"not supported yet: {NOT_YET[key]}; allowed keys: {list(BATCH_KEYS)}")
        if key not in BATCH_KEYS:
            r._fail(f"{where}.{key}", table[key], f"a key of {list(BATCH_KEYS)} (unknown key {key!r})")
    rows = table.get("rows")
    allowed = f"a non-empty list of distinct integers in 1..{MAX_BATCH_ROWS} (rows per generate call), e.g. [1, 2, 4, 16]"
    if (not isinstance(rows, list) or not rows
            or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_BATCH_ROWS for v in rows)
            or len(set(rows)) != len(rows)):
        r._fail(f"{where}.rows", rows, allowed)
    return tuple(rows)


def level_chunk_size(batch_rows: int, chunk_size: int) -> int:
    """Rows per stored chunk at a batch level: the largest multiple of ``batch_rows`` <= ``chunk_size`` (at least one
    call), so every chunk is whole calls of ``batch_rows`` rows.

    Examples
    --------
    >>> [level_chunk_size(b, 500) for b in (1, 2, 16, 600)]
    [500, 500, 496, 600]
    """
    return max(batch_rows, chunk_size // batch_rows * batch_rows)


def level_tag(batch_rows: int) -> str:
    """The level as cell names carry it: ``[batch=4]``."""
    return f"[batch={int(batch_rows)}]"
