"""The reported-logprob finding: which reporting defect explains the wrong logprobs (issue 29, bug kind 4).

Engines that return logprobs with speculation on have reported ``0.0`` for every token, the right value for the
first token of a step only, or the draft's row at accepted drafts (the zoo: :mod:`verifier.decoders.logprob_mutants`).
The tokens are right, so no mechanism of :data:`verifier.diagnose.mechanisms.MECHANISMS` (laws of one row, ranked by
likelihood) explains a rejected ``logprob`` cell; the cell itself (:mod:`verifier.runner.logprob`) checked every
wrong token against each defect's rule exactly (:func:`verifier.runner.logprob.classify_defect`: all zeros;
right at every round start and the round's first value elsewhere; the draft's log q at accepted drafts) and stored
the result in ``extra["defect"]``.

:func:`logprob_finding` reads a decoder's cells: when its ``logprob`` cell rejected it returns the finding
``"reported logprobs differ from the target's"``, the defect that fits (or none) and where to look in an engine.
When no other cell rejected, the finding *is* the diagnosis and the likelihood ranking is not run
(:func:`verifier.diagnose.run_dir.diagnose_decoders`); otherwise it leads the sentence.
"""

from __future__ import annotations

from typing import Any, Iterable

from verifier.diagnose.cell_findings import cell_names, rejected_split

__all__ = ["FINDING", "LOGPROB_STATUS", "LOGPROB_TEST", "WHERE_TO_LOOK", "logprob_finding"]

FINDING = "reported logprobs differ from the target's"
LOGPROB_STATUS = "reported logprobs wrong"  # the diagnosis status when the finding is the whole diagnosis
LOGPROB_TEST = "logprob"  # the deterministic cell's test name (verifier.runner.logprob)
WHERE_TO_LOOK = {
    "zero": "look where a verification step's tokens get their logprobs: a placeholder 0.0 (probability 1) is "
            "returned instead of the target's log-softmax at each accepted position (llama-server reports prob 1.0 "
            "for drafted tokens)",
    "first_only": "look where a step's logprobs are gathered: one value per step (the first sampled position) is "
                  "copied to every token the step emitted; gather the target's logprob at each emitted position",
    "draft_row": "look where accepted drafts' logprobs come from: they are read from the draft's proposal probs; "
                 "read them from the target's verification pass (processed, at the accepted token)",
    None: "compare the logprob path with speculation off position by position (the cell's per-position figures "
          "say where the values go wrong)",
}


def _classified(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell's ``extra["defect"]`` (:func:`verifier.runner.logprob.classify_defect`), {} when a report holds none
    or something else there (an edited report.json is read, never a traceback)."""
    extra = cell.get("extra")
    got = extra.get("defect") if isinstance(extra, dict) else None
    return got if isinstance(got, dict) else {}


def logprob_finding(decoder: str, cells: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The finding for ``decoder`` from its cell results (report.json ``cells``), or None.

    Parameters
    ----------
    decoder : str
        The decoder's name (cells carry it as ``"decoder"``).
    cells : iterable of dict
        Cell results of the run (:meth:`verifier.runner.analysis.CellResult.to_dict`), each with ``decoder``,
        ``test``, ``verdict`` and, for the ``logprob`` cell, ``support_violation`` and ``extra["defect"]``.

    Returns
    -------
    dict or None
        None unless a ``logprob`` cell of ``decoder`` has verdict ``"BIAS"``.  Else ``{"finding": FINDING,
        "defect": name or None, "cells": [ids], "marginal_clean": bool, "sentence": str}``: ``defect`` is the one
        defect every rejecting cell's classifier named (None when they disagree or none fits); ``marginal_clean``
        when no other cell of the decoder rejected (the tokens have the target's law as far as the suite can see).

    Examples
    --------
    >>> cells = [{"decoder": "d", "id": "d/gof@1", "test": "gof@1", "verdict": "PASS"},
    ...          {"decoder": "d", "id": "d/logprob", "test": "logprob", "verdict": "BIAS",
    ...           "support_violation": "reported logprob wrong at 9 of 30 tokens ...",
    ...           "extra": {"defect": {"defect": "draft_row", "sentence": "reported logprobs: the draft's log q ..."}}}]
    >>> f = logprob_finding("d", cells)
    >>> f["defect"], f["marginal_clean"], f["sentence"].split(":")[0]
    ('draft_row', True, "reported logprobs differ from the target's")
    >>> logprob_finding("d", cells[:1]) is None
    True
    """
    bad, others = rejected_split(decoder, cells, lambda c: c.get("test") == LOGPROB_TEST)
    if not bad:
        return None
    named = {n if isinstance(n, str) and n in WHERE_TO_LOOK else None  # a name the classifier never gives: none
             for n in (_classified(c).get("defect") for c in bad)}
    defect = named.pop() if len(named) == 1 else None
    what = next((w for c in bad if isinstance(w := _classified(c).get("sentence"), str)), None) or ""
    figures = str(bad[0].get("support_violation") or f"{bad[0].get('statistic')} wrong tokens")
    head = f"{FINDING}: {what.replace('reported logprobs: ', '')} ({figures})"
    if others:
        names = cell_names(others)
        sentence = (f"{head} -- {WHERE_TO_LOOK[defect]}; other cells rejected as well ({names}), so the tokens "
                    "themselves are off too; the per-row diagnosis follows")
    else:
        sentence = (f"{head}; every distribution cell passed, so the tokens have the target's law as far as these "
                    f"cells see and only the reported numbers are wrong -- {WHERE_TO_LOOK[defect]}")
    return {"finding": FINDING, "defect": defect, "cells": [c.get("id") for c in bad], "marginal_clean": not others,
            "sentence": sentence}
