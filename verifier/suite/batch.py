"""The suite axis ``batch_composition``: rows per ``generate`` call as a design factor (issue 29, bug kind 1).

A decoder entry (or ``[defaults]``) may say::

    batch_composition = { rows = [1, 2, 4, 16], mixed_temperature = 0.5 }

Each level ``b`` of ``rows`` is a sample set of its own (its own seeds, cells and figures): the runner draws its
``samples`` rows in ``generate`` calls of exactly ``b`` rows (:mod:`verifier.runner.batch`), so a defect that
appears only when more than two requests share a step, or only at some padded or captured batch sizes, shows at
the levels where it lives and not at the others; every cell of the set carries the level in its name
(``.../gof@1[batch=4]``) and the decoder's Holm correction runs over the cells of every level.  Without the key a
decoder is sampled in chunks of ``chunk_size`` rows, as before.

``mixed_temperature = T2`` adds, for every level ``b >= 2``, a mixed level ``b`` (cells ``.../gof@1[batch=4,mixed
T=0.5]``): calls of ``b`` rows whose even slots (0, 2, ...) are filler rows at ``T2`` and whose odd slots are the
audited rows at the set's temperature; the fillers' samples are discarded, the ``b // 2`` audited rows of each call
are stored and tested against the set's law as any other.  It needs ``generate(..., row_temperatures=[...])`` (the
reference decoders take it, :func:`verifier.decoders.speculative.row_logit_scale`); a decoder without the keyword is
refused when its first mixed call is due (exit 2), and so is a greedy sampling config.

Strict: an unknown key is a :class:`~verifier.errors.ConfigError` naming it.  ``mixed_prompt_lengths`` (filler rows
with other prompts, padded) is named and refused with the reason (:data:`NOT_YET`): it needs a ``generate`` call that
takes a prompt per row, which :class:`verifier.protocols.Decoder` does not have (one prompt per call).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["BATCH_KEYS", "MAX_BATCH_ROWS", "NOT_YET", "parse_batch_composition", "batch_levels", "level_chunk_size",
           "level_tag", "level_name", "audited_rows"]

BATCH_KEYS = ("rows", "mixed_temperature")
MAX_BATCH_ROWS = 4096  # rows of one generate call; beyond it a level is a memory question, not a batch-shape one
NOT_YET = {
    "mixed_prompt_lengths": "filler rows with other prompts (padded) need a generate call that takes a prompt per "
                            "row; verifier.protocols.Decoder takes one prompt per call",
}


def parse_batch_composition(r: Any, base: Mapping[str, Any]) -> tuple[tuple[int, ...], float | None]:
    """The ``batch_composition`` of one decoder entry: (rows levels, mixed temperature or None); ``((), None)``: none,
    chunks of ``chunk_size`` as before.

    Parameters
    ----------
    r : verifier.suite.schema._Reader
        The strict reader of the ``[[decoders]]`` entry or ``[defaults]``.
    base : mapping
        The parsed ``[defaults]`` grid (its ``batch_composition`` is the default).

    Returns
    -------
    rows : tuple of int
        Distinct rows-per-call levels in 1..:data:`MAX_BATCH_ROWS`, in the suite's order.
    mixed_temperature : float or None
        The filler rows' temperature (> 0), or None.

    Raises
    ------
    ConfigError
        Not a table, an unknown key (one of :data:`NOT_YET` with its reason), ``rows`` missing, empty, repeated or
        outside 1..:data:`MAX_BATCH_ROWS`, ``mixed_temperature`` not a finite number > 0 or without a ``rows``
        level >= 2 (no mixed level would be made).
    """
    table = r.get("batch_composition", dict, None, "a table such as { rows = [1, 2, 4, 16] }")
    if table is None:
        return tuple(base.get("batch_composition", ())), base.get("batch_mixed_temperature")
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
    mixed = table.get("mixed_temperature")
    if mixed is not None and (isinstance(mixed, bool) or not isinstance(mixed, (int, float))
                              or not math.isfinite(mixed) or mixed <= 0):
        r._fail(f"{where}.mixed_temperature", mixed, "a finite number > 0 (the filler rows' temperature)")
    if mixed is not None and max(rows) < 2:  # batch_levels makes mixed levels of b >= 2 only: it would be ignored
        r._fail(f"{where}.mixed_temperature", mixed,
                f"only with a rows level >= 2 (a mixed call holds a filler row beside each audited row; rows={rows} "
                "makes no mixed level, so the option would be silently ignored)")
    return tuple(rows), (float(mixed) if mixed is not None else None)


def batch_levels(rows: tuple[int, ...], mixed_temperature: float | None) -> list[tuple[int, float | None]]:
    """The sample-set levels of a decoder entry: ``(b, None)`` per rows level, then ``(b, T2)`` per level b >= 2.

    Examples
    --------
    >>> batch_levels((1, 2, 4), 0.5)
    [(1, None), (2, None), (4, None), (2, 0.5), (4, 0.5)]
    """
    out: list[tuple[int, float | None]] = [(b, None) for b in rows]
    return out + ([(b, mixed_temperature) for b in rows if b >= 2] if mixed_temperature is not None else [])


def audited_rows(batch_rows: int, filler_temperature: float | None) -> int:
    """Rows of one call that are stored and tested: all of them, or the odd slots of a mixed call (``b // 2``)."""
    return batch_rows if filler_temperature is None else batch_rows // 2


def level_chunk_size(batch_rows: int, chunk_size: int) -> int:
    """Rows per stored chunk at a batch level: the largest multiple of ``batch_rows`` <= ``chunk_size`` (at least one
    call), so every chunk is whole calls of ``batch_rows`` rows.

    Examples
    --------
    >>> [level_chunk_size(b, 500) for b in (1, 2, 16, 600)]
    [500, 500, 496, 600]
    """
    return max(batch_rows, chunk_size // batch_rows * batch_rows)


def level_name(batch_rows: int, filler_temperature: float | None = None) -> str:
    """A level as findings name it: ``"4"``, or ``"4 mixed T=0.5"``."""
    return f"{int(batch_rows)}" + (f" mixed T={filler_temperature:g}" if filler_temperature is not None else "")


def level_tag(batch_rows: int, filler_temperature: float | None = None) -> str:
    """The level as cell names carry it: ``[batch=4]`` or ``[batch=4,mixed T=0.5]``."""
    mixed = f",mixed T={filler_temperature:g}" if filler_temperature is not None else ""
    return f"[batch={int(batch_rows)}{mixed}]"
