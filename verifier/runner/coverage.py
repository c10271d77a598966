"""What a PASS verdict covers: which emitted positions a TV-scale (chi-square) cell tested.

A PASS must never claim what no cell tested.  ``gof@t`` tests the law of token t, ``joint@1..J``
the joint law of tokens 1..J (so each of them), ``greedy`` every token of every row; ``pit`` and
``surprisal@1..J`` state no total variation (KS distance, nats).  :func:`pass_reason` names the
positions with a TV cell and the later positions covered only by PIT (with its KS MDE) or not at all;
:func:`has_tv_cell` decides whether a decoder can PASS at all (docs/ARCHITECTURE.md "Statistical defaults": no TV cell -> UNDERPOWERED).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

__all__ = ["NO_TV_CELL_REASON", "no_tv_cell_reason", "has_tv_cell", "pass_reason"]

NO_TV_CELL_REASON = ("no cell states a TV minimum detectable effect (PIT/surprisal only): add gof/joint cells")
_KIND_NAMES = {"pit": "PIT", "surprisal": "surprisal", "collision": "collision"}  # how no_tv_cell_reason names a cell kind
_TEST = re.compile(r"^(?P<kind>[a-z_]+)@(?P<first>\d+)(?:\.\.(?P<last>\d+))?$")


def no_tv_cell_reason(cells: Sequence[Any]) -> str:
    """The UNDERPOWERED reason when no cell states a TV: :data:`NO_TV_CELL_REASON` for PIT / surprisal cells,
    else the kinds that did run (``"(PIT/surprisal/collision only)"``: a collision cell states an excess
    collision probability, no TV)."""
    kinds = []
    for c in cells:
        kind = re.split(r"[@/]", c.test or "")[0]
        name = _KIND_NAMES.get(kind, kind)
        if name and name not in kinds:
            kinds.append(name)
    if set(kinds) <= {"PIT", "surprisal"}:
        return NO_TV_CELL_REASON
    return f"no cell states a TV minimum detectable effect ({'/'.join(kinds)} only): add gof/joint cells"


def has_tv_cell(cells: Sequence[Any]) -> bool:
    """True when some tested cell states its minimum detectable effect as a total variation."""
    return any(c.effect_unit == "tv" and c.n > 0 for c in cells)


def _ranges(positions: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    out, run = [], []
    for p in sorted(set(positions)):
        if run and p == run[-1] + 1:
            run.append(p)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [p]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def pass_reason(cells: Sequence[Any], method: str, target_mde: float, max_new_tokens: int | None = None) -> str:
    """The reason of a PASS verdict, naming its coverage.

    Parameters
    ----------
    cells : sequence of CellResult
        The decoder's cells (each with ``test``, ``effect_unit``, ``mde``, ``n``).
    method : str
        The multiple-comparison method (quoted).
    target_mde : float
        The suite's target TV; every TV cell of a PASS sees it.
    max_new_tokens : int, optional
        Emitted positions per row (the largest over the decoder's sample sets); positions above the
        TV cells' are then named (else "later tokens").

    Returns
    -------
    str
        E.g. ``"no cell rejected at ...; no bias >= TV 0.1 in tokens 1-2 and the joint law of tokens 1..2;
        tokens 3-6 checked only by randomized PIT (KS MDE 0.04)"``.
    """
    gof, joint, whole = set(), 0, False
    for c in cells:
        if c.effect_unit != "tv" or c.n <= 0:
            continue
        if c.test == "greedy":
            whole = True
            continue
        m = _TEST.match(c.test or "")
        if m and m["kind"] == "gof":
            gof.add(int(m["first"]))
        elif m and m["kind"] == "joint":
            joint = max(joint, int(m["last"] or m["first"]))
    covered = set(gof) | set(range(1, joint + 1))
    parts = []
    stops = [c for c in cells if (c.test or "").startswith("stop-position@") and c.effect_unit == "tv" and c.n > 0]
    if stops:  # verifier.runner.stop: the law of the stopping position, and every row's stop rule beside it
        parts.append("the law of the stopping position (first stop token or EOS, or none within max_tokens)"
                     + (", and no row broke the stop rule" if any(c.test == "stop-rule" for c in cells) else ""))
    if whole:
        parts.append("every token (exact match of every row against the target's greedy output)")
    if gof:
        parts.append(f"token{'s' if len(gof) > 1 else ''} {_ranges(sorted(gof))}")
    if joint:
        parts.append(f"the joint law of tokens 1..{joint}")
    text = f"no cell rejected at {method}; no bias >= TV {target_mde:g} in " + " and ".join(parts)
    if whole or (stops and not covered):  # stop cells only: the stopping position is what they cover
        return text
    pit = [c for c in cells if c.test == "pit" and c.n > 0 and c.mde is not None]
    later = (sorted(set(range(1, max_new_tokens + 1)) - covered) if max_new_tokens else None)
    if later == []:
        return text
    where = f"token{'s' if len(later) > 1 else ''} {_ranges(later)}" if later else "later tokens"
    if pit:
        mde = max(c.mde for c in pit)
        return text + f"; {where} checked only by randomized PIT (KS MDE {mde:.2g})"
    return text + f"; {where} not tested"
