"""Logprob consistency: are the logprobs reported with speculation on those of speculation off?

The self-reported design (:mod:`verifier.server.self_reported`) trusts the law a server reports with
each token, and speculation can corrupt it: llama-server reports ``prob 1.0`` and no top entries for
tokens of a verification step (docs/servers.md); a server may report the draft's law, or the row
of another position.  This cell re-scores a sample of emitted positions with speculation off and
compares the two reported laws.

Positions
    ``count`` emitted positions drawn uniformly without replacement from those whose row defines a
    law (:func:`choose_positions`; ``numpy.random.default_rng([seed, STREAM])``, so the same audit
    seed picks the same positions).
Requests
    For each, the prefix (prompt + the tokens emitted before it) with ``max_tokens = 1`` and the same
    top-K logprobs and sampling, with speculation off: to ``--reference-url`` (a server without a
    draft), else to the same server (llama-server): a one-token request is never drafted (a server
    drafts no request's last token), and the dialect's per-request switch ``speculative.n_max = 0`` is
    sent as well (llama-server 0c1e570 ignores it: docs/servers.md).
Comparison
    Total variation between the two rebuilt processed laws (:func:`verifier.server.reported_law.law_tv`);
    the cell reports the largest (and where), the mean, and positions the reference could not define.
    Above the target TV the self-reported design cannot certify: :func:`consistency_guard` turns the
    verdict into UNDERPOWERED with the finding "reported logprobs differ with speculation on"
    (a bias found by a cell that does not use the speculative rows -- ``gof@1`` -- stands).  Below
    it, the largest TV is the design's floor.
Defect (issue 29, bug kind 4; :func:`server_defect`)
    Above the target TV the positions that differ are checked against the reporting defects of the offline
    ``logprob`` cell (:data:`verifier.runner.logprob.DEFECTS`), position by position: ``zero`` when every one reports
    the sampled token with probability 1 (logprob 0.0) where speculation off gives it less; ``first_only`` when every
    one repeats the law the server reported at an earlier position of the same completion (a step's first row
    copied to its later tokens; a server shows no round boundaries, so "an earlier position" stands in for "the
    round's first").  ``draft_row`` needs the draft's law, which a URL audit does not have: not checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from verifier.server.reported_law import ReportedLaw, Undefined, law_tv, rebuild_law

__all__ = ["choose_positions", "compare", "ConsistencyResult", "consistency_cell", "consistency_guard", "reference_guard",
           "server_defect", "SAME_TV", "REFERENCE_MISMATCH",
           "FINDING", "STREAM"]

STREAM = 0xC0DE  # the consistency sample's generator stream (beside the audit seed)
SAME_TV = 1e-6  # two reported laws this close are the same row (JSON round trip of float32 logprobs)
FINDING = "reported logprobs differ with speculation on"
REFERENCE_MISMATCH = "the --reference-url server reports another law than the audited server"


def choose_positions(laws, count: int, seed: int) -> list[tuple[int, int]]:
    """``count`` (completion index, 0-based position) pairs, uniformly without replacement among positions
    with a defined law (all of them when fewer), sorted."""
    defined = [(i, j) for i, row in enumerate(laws.laws) for j, law in enumerate(row) if isinstance(law, ReportedLaw)]
    if count >= len(defined):
        return defined
    rng = np.random.default_rng([int(seed), STREAM])
    picked = rng.choice(len(defined), size=int(count), replace=False)
    return sorted(defined[k] for k in picked)


@dataclass
class ConsistencyResult:
    """The comparison of reported laws with speculation on and off at the chosen positions.

    Attributes
    ----------
    compared : int
        Positions both laws defined.
    max_tv : float or None
        Largest total variation (None: nothing compared).
    where : str
        The position of the largest (completion, position, prefix).
    mean_tv : float or None
    reference_undefined : dict
        Reason -> positions the speculation-off row could not define.
    rows : list of dict
        Per position: completion, position, tv.
    reference : str
        Where the speculation-off laws came from.
    """

    compared: int = 0
    max_tv: float | None = None
    where: str = ""
    mean_tv: float | None = None
    reference_undefined: dict[str, int] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    reference: str = ""


def compare(picks: Sequence[tuple[int, int]], laws, completions: Sequence[Any], reference_completions: Sequence[Any],
            prompt: Sequence[int], sampling, convention: str, *, vocab_size: int | None = None,
            reference: str = "") -> ConsistencyResult:
    """Compare the speculative law at each pick with the first position of its speculation-off reply.

    Parameters
    ----------
    picks : sequence of (int, int)
        :func:`choose_positions`.
    laws : PositionLaws
        The speculative rows' laws (:func:`verifier.server.self_reported.position_laws`).
    completions : sequence of Completion
        The audited completions (for the prefixes named in the result).
    reference_completions : sequence of Completion
        One speculation-off one-token reply per pick, in the same order.
    prompt : sequence of int
    sampling, convention, vocab_size
        As for :func:`verifier.server.reported_law.rebuild_law`.
    reference : str
        Named in the result (``--reference-url`` or "same server, one-token requests").
    """
    out = ConsistencyResult(reference=reference)
    tvs = []
    for (i, j), ref in zip(picks, reference_completions):
        rows = ref.top_logprobs or ()
        ref_law = rebuild_law(rows[0] if rows else None, sampling, convention, vocab_size=vocab_size)
        if isinstance(ref_law, Undefined):
            out.reference_undefined[ref_law.reason] = out.reference_undefined.get(ref_law.reason, 0) + 1
            continue
        on = laws.laws[i][j]
        tv = law_tv(on, ref_law)
        tvs.append(tv)
        token = int(completions[i].token_ids[j])
        earlier = [law for law in laws.laws[i][:j] if isinstance(law, ReportedLaw)]
        out.rows.append({"completion": i, "position": j + 1, "tv": tv,
                         "zero": on.prob(token) >= 1 - SAME_TV and ref_law.prob(token) < 1 - SAME_TV,
                         "stale": any(law_tv(on, law) <= SAME_TV for law in earlier)})
        if out.max_tv is None or tv > out.max_tv:
            prefix = list(prompt) + list(completions[i].token_ids[:j])
            out.max_tv, out.where = tv, (f"completion {i}, position {j + 1} (prefix {prefix[:12]}"
                                         f"{'...' if len(prefix) > 12 else ''})")
    out.compared = len(tvs)
    out.mean_tv = float(np.mean(tvs)) if tvs else None
    return out


def server_defect(rows: Sequence[dict[str, Any]], target_tv: float) -> dict[str, Any]:
    """Which reporting defect explains every compared position above ``target_tv`` (module docstring).

    Parameters
    ----------
    rows : sequence of dict
        :attr:`ConsistencyResult.rows` (``tv``, ``zero``, ``stale`` per position).
    target_tv : float

    Returns
    -------
    dict
        ``wrong`` (positions above ``target_tv``), ``fits``, ``defect`` (the one that fits, else None), ``checked``
        (``["zero", "first_only"]``), ``sentence`` -- the fields of :func:`verifier.runner.logprob.classify_defect`.

    Examples
    --------
    >>> server_defect([{"tv": 0.4, "zero": True, "stale": False}, {"tv": 0.0, "zero": False, "stale": False}], 0.05)["defect"]
    'zero'
    """
    from verifier.runner.logprob import DEFECTS

    bad = [r for r in rows if r.get("tv") is not None and r["tv"] > target_tv]
    checks = {"zero": "zero", "first_only": "stale"}
    fits = [d for d, key in checks.items() if bad and all(r.get(key) for r in bad)]
    defect = fits[0] if len(fits) == 1 else None
    if not bad:
        sentence = "no compared position differs above the target TV"
    elif defect:
        sentence = f"reported logprobs: {DEFECTS[defect]} ({len(bad)} positions, all of this pattern)"
    else:
        sentence = (f"reported logprobs: {len(bad)} positions fit {' and '.join(fits) if fits else 'no known defect'} "
                    "(checked zero, first_only; draft_row needs the draft's law)")
    return {"wrong": len(bad), "fits": fits, "defect": defect, "checked": list(checks), "sentence": sentence}


def consistency_cell(cell_id: str, result: ConsistencyResult, target_tv: float, **meta: Any):
    """The result as a report cell (:class:`~verifier.runner.analysis.CellResult`, test ``consistency``): effect =
    the largest TV; verdict PASS when it is at most ``target_tv``, UNDERPOWERED above it or when nothing was
    compared.  Not a hypothesis test (no p-value): it measures how far the two reports are apart."""
    from verifier.runner.analysis import CellResult

    effect = result.max_tv
    ok = effect is not None and effect <= target_tv
    method = (f"TV between the processed laws reported with speculation on and off ({result.reference}) at "
              f"{result.compared} emitted positions; largest at {result.where or '-'}")
    if result.reference_undefined:
        method += "; speculation-off rows without a law: " + ", ".join(
            f"{n} x {r}" for r, n in result.reference_undefined.items())
    cell = CellResult(cell_id, test="consistency", method=method, n=result.compared,
                      statistic=math.nan if effect is None else effect, pvalue=math.nan, effect=effect, effect_unit="tv",
                      verdict="PASS" if ok else "UNDERPOWERED",
                      extra={"max_tv": effect, "where": result.where, "mean_tv": result.mean_tv, "target_tv": target_tv,
                             "positions": result.rows, "reference": result.reference,
                             "reference_undefined": result.reference_undefined}, **meta)
    if effect is not None and effect > target_tv:
        cell.extra["finding"] = FINDING
        cell.extra["defect"] = server_defect(result.rows, target_tv)
    return cell


def consistency_guard(verdict, cell, target_tv: float, independent_tests: Sequence[str] = ("gof@1",)) -> None:
    """The self-reported design cannot certify when the consistency cell is above ``target_tv`` (or compared
    nothing): PASS -> UNDERPOWERED, and BIAS -> UNDERPOWERED unless a cell whose test is in ``independent_tests``
    (it uses no speculative row) found it; the reason names the finding and where.  An UNDERPOWERED verdict whose
    consistency cell compared nothing leads with the missing check (more samples alone can never PASS it)."""
    from verifier.runner.verdict import BIAS, CELL_BIAS, PASS, UNDERPOWERED

    if cell.verdict == "PASS":
        return
    unchecked = (f"reported logprobs were not checked against speculation off ({cell.method}); the self-reported design "
                 "needs that check: give --reference-url (a server without speculation) or use --api llama-server")
    if verdict.verdict == UNDERPOWERED and cell.effect is None and not verdict.reason.startswith(unchecked):
        # more samples alone can never make this run PASS: lead with the missing check, not the n advice
        verdict.reason = f"{unchecked}; more samples alone cannot PASS (the cells alone: {verdict.reason})"
        return
    if verdict.verdict not in (PASS, BIAS):
        return
    if verdict.verdict == BIAS and any(c.verdict == CELL_BIAS and c.test in independent_tests for c in verdict.cells):
        return
    if cell.effect is None:
        why = unchecked
    else:
        named = (cell.extra.get("defect") or {}).get("defect")
        why = (f"{FINDING}: TV {cell.effect:.3g} > target TV {target_tv:g} at {cell.extra.get('where')}"
               + (f" ({cell.extra['defect']['sentence']})" if named else "") + "; the law the "
               "server reports with speculation on is not the one it reports without, so the self-reported cells "
               "cannot certify (or accuse) the sampler")
    verdict.verdict = UNDERPOWERED
    verdict.expectation_met = False
    verdict.reason = f"{why} (the cells alone: {verdict.reason})"


def reference_guard(verdict, checks: Sequence[dict], target_tv: float) -> None:
    """With ``--reference-url`` the prompt law of ``gof@1`` comes from the reference server; the audited server's own
    one-token row at each prompt (a one-token request drafts nothing) is compared with it (``checks``: one dict per
    prompt, ``tv`` = TV of the two rebuilt laws or None when the audited server's row defines no law, ``where``).
    Above ``target_tv`` the two servers do not serve the same law, so a ``gof@1`` BIAS would accuse the audited
    server's sampler of the reference's difference: PASS or BIAS -> UNDERPOWERED, unless a cell that uses only the
    audited server's own rows (``pit``, the collision cells) found the bias, which stands."""
    from verifier.runner.verdict import BIAS, CELL_BIAS, PASS, UNDERPOWERED

    bad = [c for c in checks if c.get("tv") is None or c["tv"] > target_tv]
    if not bad or verdict.verdict not in (PASS, BIAS):
        return
    if verdict.verdict == BIAS and any(c.verdict == CELL_BIAS and c.test != "gof@1" for c in verdict.cells):
        return
    first = bad[0]
    how = ("defines no law" if first.get("tv") is None else f"TV {first['tv']:.3g} > target TV {target_tv:g}")
    verdict.verdict = UNDERPOWERED
    verdict.expectation_met = False
    verdict.reason = (f"{REFERENCE_MISMATCH} at {first['where']} (the audited server's own one-token row: {how}): the "
                      "two do not serve the same target and sampling, so gof@1 cannot certify (or accuse) the audited "
                      f"sampler; check --reference-url (the cells alone: {verdict.reason})")
