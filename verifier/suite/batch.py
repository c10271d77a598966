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

``mixed_prompt_lengths`` adds, for every level ``b >= 2``, a mixed-prompts level ``b`` (cells ``.../gof@1[batch=4,
mixed prompts]``): calls of ``b`` rows whose even slots are filler rows continuing *other prompts of other lengths*
and whose odd slots are the audited rows continuing the set's prompt, all at the set's sampling config -- the padded
batch every engine runs when requests of different lengths share a step (left or right padding, per-row position ids,
the KV slot of a padded row).  The fillers' samples are discarded; the audited rows are tested against the set's own
law.  Its value:

* ``true``: the fillers are every prompt of the suite's ``[prompts]`` whose length (in the pair's token ids) differs
  from the set's prompt, in the table's order;
* a list of prompt names (``["short", "long"]``): those prompts, in that order; for each sample set the ones of the
  set's own length are skipped (a prompt of the same length mixes no lengths);
* ``false``: no such level.

Filler ``i`` of the remaining ``n`` goes to every even slot ``2 j`` with ``j mod n = i`` (slot 0 holds the first).  A
sample set left without a filler of another length is a :class:`~verifier.errors.ConfigError` when the suite is
planned.  It needs ``generate(..., row_prompts=[...])`` (a prompt per row; the reference decoders take it,
:mod:`verifier.decoders._row_prompts`); a decoder without the keyword is refused when its first mixed call is due
(exit 2).  With both ``mixed_temperature`` and ``mixed_prompt_lengths`` each makes its own levels (one factor per
level, so a finding names the factor that moves the rows): ``[batch=4,mixed T=0.5]`` and ``[batch=4,mixed prompts]``.

Strict: an unknown key is a :class:`~verifier.errors.ConfigError` naming it (:data:`NOT_YET` names the keys that are
known but refused, with the reason; none at present).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["BATCH_KEYS", "MAX_BATCH_ROWS", "NOT_YET", "ALL_PROMPTS", "parse_batch_composition", "batch_levels",
           "level_chunk_size", "level_tag", "level_name", "audited_rows", "filler_prompt_names", "resolve_fillers"]

BATCH_KEYS = ("rows", "mixed_temperature", "mixed_prompt_lengths")
MAX_BATCH_ROWS = 4096  # rows of one generate call; beyond it a level is a memory question, not a batch-shape one
NOT_YET: dict[str, str] = {}  # known keys refused with a reason (none at present)
ALL_PROMPTS = True  # mixed_prompt_lengths = true: every suite prompt of another length the pair can take is a filler


def parse_batch_composition(r: Any, base: Mapping[str, Any]
                            ) -> tuple[tuple[int, ...], float | None, tuple[str, ...] | bool | None]:
    """The ``batch_composition`` of one decoder entry: (rows levels, mixed temperature or None, mixed prompts or
    None); ``((), None, None)``: none, chunks of ``chunk_size`` as before.

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
    mixed_prompts : tuple of str, True or None
        ``mixed_prompt_lengths``: the filler prompts' names, :data:`ALL_PROMPTS` (``true``), or None (absent or
        ``false``).  Names are checked against ``[prompts]`` by the suite parser.

    Raises
    ------
    ConfigError
        Not a table, an unknown key (one of :data:`NOT_YET` with its reason), ``rows`` missing, empty, repeated or
        outside 1..:data:`MAX_BATCH_ROWS`, ``mixed_temperature`` not a finite number > 0 or without a ``rows``
        level >= 2 (no mixed level would be made); ``mixed_prompt_lengths`` not a boolean or a non-empty list of
        distinct prompt names, or without a ``rows`` level >= 2.
    """
    table = r.get("batch_composition", dict, None, "a table such as { rows = [1, 2, 4, 16] }")
    if table is None:
        return (tuple(base.get("batch_composition", ())), base.get("batch_mixed_temperature"),
                base.get("batch_mixed_prompts"))
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
    prompts = table.get("mixed_prompt_lengths")
    if prompts is not None and not isinstance(prompts, bool) and (
            not isinstance(prompts, list) or not prompts or not all(isinstance(v, str) and v for v in prompts)
            or len(set(prompts)) != len(prompts)):
        r._fail(f"{where}.mixed_prompt_lengths", prompts, "true (every suite prompt of another length), false, or a "
                "non-empty list of distinct prompt names from [prompts] (the filler rows' prompts)")
    if prompts not in (None, False) and max(rows) < 2:
        r._fail(f"{where}.mixed_prompt_lengths", prompts,
                f"only with a rows level >= 2 (a mixed call holds a filler row beside each audited row; rows={rows} "
                "makes no mixed level, so the option would be silently ignored)")
    mixed_prompts = None if prompts in (None, False) else (ALL_PROMPTS if prompts is True else tuple(prompts))
    return tuple(rows), (float(mixed) if mixed is not None else None), mixed_prompts


def batch_levels(rows: tuple[int, ...], mixed_temperature: float | None,
                 mixed_prompts: Any = None) -> list[tuple[int, float | None, bool]]:
    """The sample-set levels of a decoder entry: ``(b, None, False)`` per rows level, then ``(b, T2, False)`` per
    level b >= 2 with a mixed temperature, then ``(b, None, True)`` per level b >= 2 with mixed prompt lengths.

    Examples
    --------
    >>> batch_levels((1, 2), 0.5, True)
    [(1, None, False), (2, None, False), (2, 0.5, False), (2, None, True)]
    """
    out: list[tuple[int, float | None, bool]] = [(b, None, False) for b in rows]
    out += [(b, mixed_temperature, False) for b in rows if b >= 2] if mixed_temperature is not None else []
    return out + ([(b, None, True) for b in rows if b >= 2] if mixed_prompts else [])


def audited_rows(batch_rows: int, mixed: Any) -> int:
    """Rows of one call that are stored and tested: all of them, or the odd slots of a mixed call (``b // 2``).
    ``mixed``: truthy at a mixed level (its filler temperature, or True for mixed prompts), None / False otherwise."""
    return batch_rows // 2 if mixed else batch_rows


def filler_prompt_names(mixed_prompts: Any, suite_prompts: Sequence[str]) -> tuple[str, ...]:
    """The prompt names a decoder entry's mixed-prompts levels may use as fillers: the listed ones, every suite prompt
    for :data:`ALL_PROMPTS`, none without the option (the runner encodes these for the entry's model pair)."""
    if not mixed_prompts:
        return ()
    return tuple(suite_prompts) if mixed_prompts is ALL_PROMPTS else tuple(mixed_prompts)


def resolve_fillers(mixed_prompts: Any, own: Sequence[int], encoded: Mapping[str, Sequence[int]],
                    where: str) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """The filler prompts of one sample set: (names, token ids), those of another length than ``own``, in order.

    Parameters
    ----------
    mixed_prompts : tuple of str or True
        The entry's ``mixed_prompt_lengths`` (:func:`parse_batch_composition`).
    own : sequence of int
        The set's prompt ids.
    encoded : mapping of str to sequence of int
        Every name of :func:`filler_prompt_names`, encoded for the set's model pair.
    where : str
        The set's name for the error message.

    Raises
    ------
    ConfigError
        No filler of another length than ``own`` remains.
    """
    from verifier.errors import ConfigError

    names = tuple(encoded) if mixed_prompts is ALL_PROMPTS else tuple(mixed_prompts)
    kept = tuple(n for n in names if len(encoded[n]) != len(own))
    if not kept:
        given = "true" if mixed_prompts is ALL_PROMPTS else list(mixed_prompts)
        lengths = {n: len(encoded[n]) for n in names}
        raise ConfigError(f"{where}: batch_composition.mixed_prompt_lengths={given!r} leaves no filler prompt of another "
                          f"length than the set's prompt ({len(own)} tokens; candidates' lengths: {lengths}); allowed: "
                          "a prompt of another length under [prompts] (listed, or any with true)")
    return kept, tuple(tuple(int(t) for t in encoded[n]) for n in kept)


def level_chunk_size(batch_rows: int, chunk_size: int) -> int:
    """Rows per stored chunk at a batch level: the largest multiple of ``batch_rows`` <= ``chunk_size`` (at least one
    call), so every chunk is whole calls of ``batch_rows`` rows.

    Examples
    --------
    >>> [level_chunk_size(b, 500) for b in (1, 2, 16, 600)]
    [500, 500, 496, 600]
    """
    return max(batch_rows, chunk_size // batch_rows * batch_rows)


def _mixed_words(filler_temperature: float | None, mixed_prompts: bool) -> str:
    return ("mixed T=" + f"{filler_temperature:g}" if filler_temperature is not None
            else "mixed prompts" if mixed_prompts else "")


def level_name(batch_rows: int, filler_temperature: float | None = None, mixed_prompts: bool = False) -> str:
    """A level as findings name it: ``"4"``, ``"4 mixed T=0.5"`` or ``"4 mixed prompts"``."""
    words = _mixed_words(filler_temperature, mixed_prompts)
    return f"{int(batch_rows)}" + (f" {words}" if words else "")


def level_tag(batch_rows: int, filler_temperature: float | None = None, mixed_prompts: bool = False) -> str:
    """The level as cell names carry it: ``[batch=4]``, ``[batch=4,mixed T=0.5]`` or ``[batch=4,mixed prompts]``."""
    words = _mixed_words(filler_temperature, mixed_prompts)
    return f"[batch={int(batch_rows)}" + (f",{words}" if words else "") + "]"
