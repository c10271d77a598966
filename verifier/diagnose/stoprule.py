"""The stop-rule finding: rows that run on past a stop token or past ``max_tokens``.

Issue 29, bug kind 5: a speculative round emits a block of tokens at once, and an engine that checks the request's
stop tokens (or stop strings) and ``max_tokens`` only when the whole block has been appended lets a row run on past
a stop token accepted mid-block, and lets its last round overshoot the limit (the zoo's ``stop_mid_block`` and
``max_tokens_overshoot``, :mod:`verifier.decoders.stop_mutants`).  Every token is drawn correctly; the rows' law is
not what is wrong, so no mechanism of :data:`verifier.diagnose.mechanisms.MECHANISMS` (laws of one row, ranked by
likelihood) explains it.  The deterministic ``stop-rule`` cell (:mod:`verifier.runner.stop`) sees it with
certainty and names the first violating row.

:func:`stop_finding` reads a decoder's cell verdicts: when its ``stop-rule`` cell rejected it returns the finding
``"stop rule violated inside an accepted block"`` with the cell's figures and where to look in an engine.  When no
other cell rejected, the finding *is* the diagnosis and the likelihood ranking is not run
(:func:`verifier.diagnose.run_dir.diagnose_decoders`); otherwise it leads the sentence and the per-row diagnosis
follows.
"""

from __future__ import annotations

from typing import Any, Iterable

from verifier.diagnose.cell_findings import cell_names, rejected_split

__all__ = ["FINDING", "STOP_STATUS", "STOP_RULE_TEST", "stop_finding"]

FINDING = "stop rule violated inside an accepted block"
STOP_STATUS = "stop rule violated"  # the diagnosis status when the finding is the whole diagnosis
STOP_RULE_TEST = "stop-rule"  # the deterministic cell's test name (verifier.runner.stop)
WHERE_TO_LOOK = ("look where a verification round's accepted tokens are appended to the request's output: the "
                 "stop-token / stop-string check and the max_tokens cap must run on every appended token and cut "
                 "the block at the first hit, not once per round on the block's last token or on the length "
                 "before the block")


def stop_finding(decoder: str, cells: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The finding for ``decoder`` from its cell results (report.json ``cells``), or None.

    Parameters
    ----------
    decoder : str
        The decoder's name (cells carry it as ``"decoder"``).
    cells : iterable of dict
        Cell results of the run (:meth:`verifier.runner.analysis.CellResult.to_dict`), each with ``decoder``,
        ``test``, ``verdict`` and, for the ``stop-rule`` cell, ``support_violation`` (the first violating row).

    Returns
    -------
    dict or None
        None unless a ``stop-rule`` cell of ``decoder`` has verdict ``"BIAS"``.  Else ``{"finding": FINDING,
        "cells": [ids], "marginal_clean": bool, "sentence": str}``: ``marginal_clean`` when no other cell of the
        decoder rejected (every emitted token up to the stop has the target's law as far as the suite can see).

    Examples
    --------
    >>> cells = [{"decoder": "d", "id": "d/stop-position@1..6", "test": "stop-position@1..6", "verdict": "PASS"},
    ...          {"decoder": "d", "id": "d/stop-rule", "test": "stop-rule", "verdict": "BIAS",
    ...           "support_violation": "stop rule violated in 3 of 800 rows; first: row 7, ..."}]
    >>> f = stop_finding("d", cells)
    >>> f["marginal_clean"], f["sentence"].split(" (")[0]
    (True, 'stop rule violated inside an accepted block')
    >>> stop_finding("d", cells[:1]) is None
    True
    """
    rule, others = rejected_split(decoder, cells, lambda c: c.get("test") == STOP_RULE_TEST)
    if not rule:
        return None
    figures = "; ".join(str(c.get("support_violation") or f"{c.get('statistic')} violating rows") for c in rule[:2])
    if others:
        names = cell_names(others)
        sentence = (f"{FINDING} ({figures}) -- {WHERE_TO_LOOK}; other cells rejected as well ({names}), so the "
                    "tokens themselves are off too; the per-row diagnosis follows")
    else:
        sentence = (f"{FINDING} ({figures}); the stopping position and every other cell passed, so the tokens up to "
                    f"each stop have the target's law as far as these cells see -- {WHERE_TO_LOOK}")
    return {"finding": FINDING, "cells": [c.get("id") for c in rule], "marginal_clean": not others,
            "sentence": sentence}
