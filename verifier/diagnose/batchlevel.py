"""The batch-composition finding: a bias that shows only at some rows-per-call levels (issue 29, bug kind 1).

A suite with the ``batch_composition`` axis (:mod:`verifier.suite.batch`) draws each sample set at several levels of
rows per ``generate`` call and names every cell with its level (``.../gof@1[batch=4]``, ``extra["batch_rows"]``).
Rows of a correct decoder have the target's law at every level, so cells that reject at some levels and pass at
others localize the defect to the batch shape: corruption that appears only when more than two requests share a step,
only at some padded or captured batch sizes (the zoo's ``corrupt_batch_gt2``, :mod:`verifier.decoders.batch_mutants`),
or only in mixed calls: rows at another temperature (``mixed_temperature_leak``) or with prompts of other lengths in
the same padded call (``prompt_length_leak``; the ``[batch=4,mixed prompts]`` levels).

:func:`batch_finding` reads a decoder's cell verdicts and returns the finding "bias only at batch composition ..."
with the rejecting and the clean levels.  It is a localization, not a mechanism: the per-row diagnosis still names
what the rows at the rejecting levels look like, ranked over the sample sets of those levels only
(:func:`verifier.diagnose.run_dir.diagnose_decoders`; the clean levels have the target's law, which no per-row
mechanism of the corrupted rows explains), and the finding leads its sentence.
"""

from __future__ import annotations

from typing import Any, Iterable

from verifier.diagnose.cell_findings import cell_names
from verifier.runner.verdict import CELL_BIAS
from verifier.suite.batch import level_name

__all__ = ["FINDING", "batch_level_of", "batch_finding"]

FINDING = "bias only at batch composition"
WHERE_TO_LOOK = ("look at what depends on how many requests share a step: kernels or graphs captured for some batch "
                 "sizes and the padding up to them, scratch buffers (residual, probs, uniforms) sized for a smaller "
                 "batch, indexing by a row's slot in the batch, and sampling parameters read once per batch")
PROMPTS_LOOK = ("look at how a step pads prompts of different lengths: the attention mask of the padding, each row's "
                "position ids, the KV slot (and sequence length) of a padded row, and the index of each row's last "
                "prompt token")


def batch_level_of(cell: dict[str, Any]) -> tuple[int, float, int] | None:
    """The level of a cell result (report.json ``cells[]``) as (rows per call, filler temperature or 0, 1 at a
    mixed-prompts level else 0), or None."""
    extra = cell.get("extra") or {}
    rows, filler = extra.get("batch_rows"), extra.get("filler_temperature")
    if not isinstance(rows, int) or isinstance(rows, bool):
        return None
    return (rows, (float(filler) if isinstance(filler, (int, float)) and not isinstance(filler, bool) else 0.0),
            int(bool(extra.get("filler_prompts"))))


def _name(level: tuple[int, float, int]) -> str:
    return level_name(level[0], level[1] or None, bool(level[2]))


def batch_finding(decoder: str, cells: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The finding for ``decoder`` from its cell results, or None.

    Parameters
    ----------
    decoder : str
        The decoder's name (cells carry it as ``"decoder"``).
    cells : iterable of dict
        Cell results of the run (:meth:`verifier.runner.analysis.CellResult.to_dict`), each with ``decoder``, ``id``,
        ``verdict`` and, at a batch level, ``extra["batch_rows"]``.

    Returns
    -------
    dict or None
        None unless the decoder's cells span at least two levels and some, not all, levels have a cell with verdict
        ``"BIAS"``.  Else ``{"finding": FINDING, "levels", "rejected_levels", "clean_levels": [level names, "4" or
        "4 mixed T=0.5", "4 mixed prompts" (:func:`verifier.suite.batch.level_name`)], "cells": [ids of the rejecting cells],
        "sentence": str}``.

    Examples
    --------
    >>> cells = [{"decoder": "d", "id": f"d/gof@1[batch={b}]", "verdict": "BIAS" if b > 2 else "PASS",
    ...           "extra": {"batch_rows": b}} for b in (1, 2, 4, 16)]
    >>> f = batch_finding("d", cells)
    >>> f["rejected_levels"], f["clean_levels"], f["sentence"].split(" (")[0]
    (['4', '16'], ['1', '2'], 'bias only at batch composition 4, 16 rows per generate call')
    >>> batch_finding("d", [dict(c, verdict="BIAS") for c in cells]) is None  # every level: not batch-shaped
    True
    """
    own = [c for c in cells if c.get("decoder") == decoder and batch_level_of(c) is not None]
    levels = sorted({batch_level_of(c) for c in own})
    rejecting = [c for c in own if c.get("verdict") == CELL_BIAS]
    rejected = sorted({batch_level_of(c) for c in rejecting})
    if len(levels) < 2 or not rejected or rejected == levels:
        return None
    clean = [b for b in levels if b not in rejected]
    names = cell_names(rejecting, key=lambda c: c.get("id"))
    plain_clean = [b[0] for b in clean if not b[1] and not b[2]]
    plain_bad = [b[0] for b in rejected if not b[1] and not b[2]]
    above = (f"; every level above {max(plain_clean)} rejects: more than {max(plain_clean)} rows per step"
             if plain_clean and plain_bad and max(plain_clean) < min(plain_bad) else "")
    mixed = ("; only mixed calls reject: rows at another temperature in the same call change these rows"
             if all(b[1] for b in rejected) else
             "; only mixed calls reject: rows with prompts of other lengths in the same padded call change these "
             "rows" if all(b[2] for b in rejected) else
             "; only mixed calls reject: filler rows in the same call change these rows"
             if all(b[1] or b[2] for b in rejected) else "")
    look = PROMPTS_LOOK if all(b[2] for b in rejected) else WHERE_TO_LOOK
    sentence = (f"{FINDING} {', '.join(map(_name, rejected))} rows per generate call (clean at "
                f"{', '.join(map(_name, clean))}; rejecting cells: {names}){above}{mixed} -- {look}")
    return {"finding": FINDING, "levels": [_name(b) for b in levels], "rejected_levels": [_name(b) for b in rejected],
            "clean_levels": [_name(b) for b in clean], "cells": [c.get("id") for c in rejecting], "sentence": sentence}
