"""The independence finding: rows that are each right but not independent of each other.

The mechanisms of :data:`verifier.diagnose.mechanisms.MECHANISMS` are laws of one row (one emitted sequence
given the target's and the draft's processed probs), ranked by likelihood; a decoder whose rows each have the
target's law but share or correlate their randomness (issue 29, bug kind 2: one random stream for several
requests, ignored per-request seeds, ranks drawing the same uniforms; the zoo's ``shared_stream`` and
``serial_stream``, :mod:`verifier.decoders.stream_mutants`) is none of them, and its rows' likelihood cannot
tell.  Only the cells that look across rows see it: ``collision@1..J`` (identical pairs of requests) and
``serial@1`` (correlated consecutive requests).

:func:`independence_finding` reads a decoder's cell verdicts: when one of those cells rejected it returns the
finding ``"rows are not independent: shared or correlated randomness across requests"`` with the cells' figures.
When no row-at-a-time cell (``gof``, ``joint``, ``surprisal``, ``pit``) rejected as well -- each row alone
looks like the target -- the finding *is* the diagnosis and the likelihood ranking is not run
(:func:`verifier.diagnose.run_dir.diagnose_decoders`); otherwise it is added beside the mechanism found.
"""

from __future__ import annotations

from typing import Any, Iterable

from verifier.diagnose.cell_findings import cell_names, rejected_split

__all__ = ["FINDING", "INDEPENDENCE_STATUS", "ACROSS_ROW_TESTS", "independence_finding"]

FINDING = "rows are not independent: shared or correlated randomness across requests"
INDEPENDENCE_STATUS = "rows not independent"  # the diagnosis status when the finding is the whole diagnosis
ACROSS_ROW_TESTS = ("collision", "serial")  # cell tests (before "@") that look at several rows
WHERE_TO_LOOK = ("look for randomness shared between requests: one generator or default seed for every unseeded "
                 "request, one uniform drawn per batch step instead of per row, per-request seeds ignored, or "
                 "per-request streams that overlap")


def _kind(cell: dict[str, Any]) -> str:
    return str(cell.get("test") or "").split("@", 1)[0]


def _figure(cell: dict[str, Any]) -> str:
    """What one rejected across-row cell saw, in words."""
    extra = cell.get("extra") or {}
    test = cell.get("test") or cell.get("id", "")
    if _kind(cell) == "collision":
        return (f"{test}: {extra.get('identical_pairs', cell.get('statistic'))} identical of {cell.get('n')} pairs, "
                f"{float(extra.get('expected', float('nan'))):.3g} expected")
    effect = cell.get("effect")
    lag1 = f"lag-1 autocorrelation {effect:+.2f}" if isinstance(effect, (int, float)) else "serial correlation"
    return f"{test}: {lag1} of consecutive rows over {cell.get('n')} rows"


def independence_finding(decoder: str, cells: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The finding for ``decoder`` from its cell results (report.json ``cells``), or None.

    Parameters
    ----------
    decoder : str
        The decoder's name (cells carry it as ``"decoder"``).
    cells : iterable of dict
        Cell results of the run (:meth:`verifier.runner.analysis.CellResult.to_dict`), each with ``decoder``,
        ``test`` and ``verdict`` (``"BIAS"`` when it rejected after the multiplicity correction).

    Returns
    -------
    dict or None
        None unless a ``collision@...`` or ``serial@...`` cell of ``decoder`` has verdict ``"BIAS"``.  Else
        ``{"finding": FINDING, "cells": [ids], "marginal_clean": bool, "sentence": str}``: ``marginal_clean``
        when no other cell of the decoder rejected (each row alone has the target's law as far as the suite
        can see); ``sentence`` the plain sentence for the report.

    Examples
    --------
    >>> cells = [{"decoder": "d", "id": "d/gof@1", "test": "gof@1", "verdict": "PASS"},
    ...          {"decoder": "d", "id": "d/serial@1", "test": "serial@1", "verdict": "BIAS", "effect": -0.34, "n": 800}]
    >>> f = independence_finding("d", cells)
    >>> f["marginal_clean"], f["sentence"].split(" (")[0]
    (True, 'rows are not independent: shared or correlated randomness across requests')
    >>> independence_finding("d", cells[:1]) is None
    True
    """
    across, marginal = rejected_split(decoder, cells, lambda c: _kind(c) in ACROSS_ROW_TESTS)
    if not across:
        return None
    figures = "; ".join(_figure(c) for c in across)
    if marginal:  # the single-row cells' nulls assume independent rows: dependence alone inflates them
        names = cell_names(marginal)
        sentence = (f"{FINDING} ({figures}); single-row cells rejected as well ({names}), but their null assumes "
                    f"independent rows, so the dependence alone can make them reject -- {WHERE_TO_LOOK}; the "
                    f"per-row diagnosis follows")
    else:
        sentence = (f"{FINDING} ({figures}); every cell that looks at one row at a time passed, so each row alone "
                    f"has the target's law as far as these cells see -- {WHERE_TO_LOOK}")
    return {"finding": FINDING, "cells": [c.get("id") for c in across], "marginal_clean": not marginal,
            "sentence": sentence}
