"""Verdicts: multiple-comparison correction over one decoder's cells, then expectations.

Correction (docs/ARCHITECTURE.md "Statistical defaults"), applied separately to each decoder's cells:

``gate`` (CI)
    Holm at ``alpha / 2`` over the cells plus a combination test of all cells at ``alpha / 2``
    (:func:`verifier.stats.multiple.adjust`; Cauchy combination, because the cells of one sample
    set share its samples): the family-wise false alarm rate is <= alpha.  With ``[stats] cell_weights`` (the
    planned alpha allocation, :mod:`verifier.stats.allocation`) the Holm half is weighted Holm: the same alpha.  A support violation
    is bias whatever the p-values.
``audit``
    Benjamini-Yekutieli at ``q = alpha`` (false discovery rate under dependence).

Decoder verdict: ``BIAS DETECTED`` when any cell is rejected (or the combination test rejects), else
``UNDERPOWERED`` when a cell's minimum detectable effect (total variation) exceeds the suite's
``target_mde`` (the reason names the rows per sample set that would reach it), or a collision, PIT or serial
cell detects nothing (its MDE is 1, the largest effect of its unit: :data:`BLIND_AT`), or when no cell was tested at all, or when no cell states a TV minimum detectable effect (PIT / surprisal cells
only), else ``PASS`` with a reason naming the positions a TV cell covered and those only PIT checked; a support violation (a token at target prob 0, or at T = 0 a row
off the greedy output) is BIAS and the reason quotes it; ``ERROR`` when the decoder crashed or returned invalid output.
Expectation ``pass`` is met by ``PASS``; ``detect`` by ``BIAS DETECTED`` (an invalid output of a
``detect`` decoder also counts as detected: the defect was found).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from verifier.errors import EXIT_BIAS, EXIT_DECODER, EXIT_OK, EXIT_UNDERPOWERED
from verifier.runner.analysis import CellResult
from verifier.runner.coverage import has_tv_cell, no_tv_cell_reason, pass_reason

__all__ = ["PASS", "BIAS", "UNDERPOWERED", "ERROR", "DecoderVerdict", "decide", "cell_level", "exit_code",
           "underpowered_reason", "MORE_ROWS", "more_rows_advice", "SESSION_KEYS", "session_figures"]

PASS, BIAS, UNDERPOWERED, ERROR = "PASS", "BIAS DETECTED", "UNDERPOWERED", "ERROR"
CELL_PASS, CELL_BIAS, CELL_UNDERPOWERED = "PASS", "BIAS", "UNDERPOWERED"
# units whose largest possible effect is 1: a cell whose MDE reaches it detects nothing (collision: not even every
# pair identical rejects at its level; ks: the randomized PIT's KS distance, whose MDE is capped at 1 when too few
# positions are tested; autocorrelation: the serial cell's lag-1 correlation, capped likewise), so it is
# UNDERPOWERED as a TV cell above target_mde is, never PASS
BLIND_AT = {"collision": 1.0, "ks": 1.0, "autocorrelation": 1.0}
# what an UNDERPOWERED reason tells the user to raise ({n}: the rows per sample set needed); a suite's knob by default,
# a command's flag where the command sets it (:func:`more_rows_advice`: `specverify audit` -> --num-samples)
MORE_ROWS = "raise `samples` of this decoder (rows = samples x the profile's sample_scale)"
_MORE_ROWS: contextvars.ContextVar[str] = contextvars.ContextVar("more_rows", default=MORE_ROWS)


@contextlib.contextmanager
def more_rows_advice(text: str) -> Iterator[None]:
    """Within the block, UNDERPOWERED reasons (:func:`underpowered_reason`) end with ``text`` (``{n}`` = the rows
    needed) instead of :data:`MORE_ROWS`: a command names its own flag (``specverify audit``: ``--num-samples``)."""
    token = _MORE_ROWS.set(text)
    try:
        yield
    finally:
        _MORE_ROWS.reset(token)


def cell_level(alpha: float, num_cells: int, correction: str, weight: float = 1.0, total_weight: float | None = None) -> float:
    """Per-cell level at which MDEs are stated: the strictest Holm step ``alpha / (2 m)`` for the
    gate, ``alpha / m`` (the strictest BH step) for audit.  With a planned allocation (gate only,
    :mod:`verifier.stats.allocation`) the cell's strictest weighted-Holm step ``(alpha / 2) weight / total_weight``
    (``total_weight``: the sum of the m cells' weights; default m, i.e. weight 1 is the equal level)."""
    m = max(num_cells, 1)
    if correction != "gate":
        return alpha / m
    if total_weight is None and weight == 1.0:
        return alpha / (2 * m)
    return alpha / 2 * weight / (m if total_weight is None else total_weight)


@dataclass
class DecoderVerdict:
    """The verdict for one decoder and whether it met its expectation."""

    decoder: str
    expect: str
    verdict: str
    expectation_met: bool
    method: str
    combined_pvalue: float | None = None
    reason: str = ""
    error: dict[str, Any] | None = None
    cells: list[CellResult] = field(default_factory=list)
    # beside the verdict, never part of it (verifier.runner.acceptance): per-set acceptance audit
    # dicts, and the acceptance rule conformance check where the suite declares acceptance = "canonical"
    acceptance: list[dict[str, Any]] = field(default_factory=list)
    conformance: dict[str, Any] | None = None
    # what the decoder's own counters show of speculation (verifier.runner.speculation); None: not reported
    speculation: dict[str, Any] | None = None
    # per-position acceptance that ignores the sample sets' p and q (verifier.runner.fingerprint); None: no stats
    fingerprint: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "decoder": self.decoder, "expect": self.expect, "verdict": self.verdict,
            "expectation_met": self.expectation_met, "method": self.method,
            "combined_pvalue": self.combined_pvalue, "reason": self.reason, "error": self.error,
            "num_cells": len(self.cells),
            "failing_cells": [c.id for c in self.cells if c.verdict == CELL_BIAS],
            "acceptance": self.acceptance, "acceptance_conformance": self.conformance,
            "underpowered_cells": [c.id for c in self.cells if c.verdict == CELL_UNDERPOWERED],
            # the largest rows per sample set an underpowered cell needs to reach target_mde (None: none / unreachable)
            "n_needed": max((c.n_needed for c in self.cells if c.verdict == CELL_UNDERPOWERED and c.n_needed), default=None),
            # the per-session figures live in report.json's volatile `run` section (session_figures), not here
            **({"speculation": {k: v for k, v in self.speculation.items() if k not in SESSION_KEYS}}
               if self.speculation is not None else {}),
            **({"acceptance_fingerprint": self.fingerprint} if self.fingerprint is not None else {}),
        }


# speculation-summary entries that depend on the process that computed the report, not on the samples: report.json
# keeps them in `run` (run.<key> = {decoder: value}), so two reports of the same samples compare equal outside `run`
SESSION_KEYS = ("requests_sent_session",)


def session_figures(verdicts: list[DecoderVerdict]) -> dict[str, dict[str, Any]]:
    """``{key: {decoder: value}}`` of the :data:`SESSION_KEYS` in the verdicts' speculation summaries (empty when no
    decoder reports speculation): what report.json's ``run`` section holds of them."""
    out: dict[str, dict[str, Any]] = {}
    for v in verdicts:
        for key in SESSION_KEYS:
            if v.speculation is not None and key in v.speculation:
                out.setdefault(key, {})[v.decoder] = v.speculation[key]
    return out


def decide(decoder: str, expect: str, cells: list[CellResult], *, alpha: float, correction: str,
           target_mde: float, error: dict[str, Any] | None = None, max_new_tokens: int | None = None,
           cell_weights: Mapping[str, float] | None = None) -> DecoderVerdict:
    """Correct the cells' p-values, set each cell's verdict, and return the decoder verdict.

    Parameters
    ----------
    cells : list of CellResult
        Modified in place: ``adjusted_pvalue`` and ``verdict`` are set.
    alpha : float
        Family-wise level (gate) or FDR level q (audit).
    correction : {"gate", "audit"}
    target_mde : float
        Largest acceptable minimum detectable effect (total variation) of a chi-square cell.
    error : dict, optional
        Set when the decoder crashed or returned invalid output.
    max_new_tokens : int, optional
        Emitted positions per row; the PASS reason then names the positions no TV cell covers
        (:func:`verifier.runner.coverage.pass_reason`).
    cell_weights : mapping of cell test label -> weight > 0, optional
        Gate only: the planned alpha allocation (``[stats] cell_weights``, :mod:`verifier.stats.allocation`): the
        Holm half is weighted Holm, a cell's weight taken by its ``test`` label (unlisted: 1), scaled over the tested
        cells.  None or empty: Holm.  The method text lists the weights.
    """
    from verifier.stats.multiple import adjust

    tested = [c for c in cells if c.n > 0]
    pvals = np.array([0.0 if c.support_violation else c.pvalue for c in tested], dtype=np.float64)
    combined, family = None, False
    # the cells of one sample set share its samples, so they are dependent: Cauchy combination in
    # the gate, Benjamini-Yekutieli in audit mode (docs/ARCHITECTURE.md "Statistical defaults")
    level = alpha / 2 if correction == "gate" else alpha
    weighted = bool(cell_weights) and correction == "gate"
    weights = np.array([cell_weights.get(c.test, 1.0) for c in tested]) if weighted else None
    holm = (f"weighted Holm(alpha/2={alpha / 2:g}; weights {_weights_text(cell_weights)}, others 1)" if weighted
            else f"Holm(alpha/2={alpha / 2:g})")
    method = (f"{holm} + Cauchy combination(alpha/2={alpha / 2:g})" if correction == "gate"
              else f"Benjamini-Yekutieli(q={alpha:g})")
    if len(pvals):
        adj = adjust(pvals, alpha=alpha, mode=correction, dependent=True, weights=weights)
        reject, adjusted, combined, family = adj.rejected, adj.adjusted_pvalues, adj.combined_pvalue, adj.family_rejected
    else:
        reject, adjusted = np.zeros(0, bool), np.zeros(0)
    for c, rej, adj in zip(tested, reject, adjusted):
        c.adjusted_pvalue = float(adj)
        if rej or c.support_violation:
            c.verdict = CELL_BIAS
        elif c.effect_unit == "tv" and c.mde is not None and c.mde > target_mde:
            c.verdict = CELL_UNDERPOWERED
        elif _blind(c):
            c.verdict = CELL_UNDERPOWERED  # detects nothing at this n (no statistic or level changed)
        else:
            c.verdict = CELL_PASS
    for c in cells:
        if c.n == 0:
            c.verdict = CELL_UNDERPOWERED
    n_bias = sum(c.verdict == CELL_BIAS for c in cells)
    fisher_rejects = bool(family) and combined is not None and combined <= level
    if error is not None:
        verdict = ERROR
        reason = f"decoder error: {error.get('message', '')}"
        met = expect == "detect" and error.get("kind") == "invalid_output"
    elif n_bias or fisher_rejects:
        verdict = BIAS
        reason = (f"{n_bias} of {len(cells)} cells rejected" if n_bias else "no single cell rejected") + (
            f"; combined p={combined:.3g} <= {level:g}" if fisher_rejects else "")
        violated = [c for c in cells if c.support_violation]
        if violated:  # shown as its reason, never as a p-value
            reason += f"; support violation in {violated[0].id}: {violated[0].support_violation}" + (
                f" (and in {len(violated) - 1} other cell(s))" if len(violated) > 1 else "")
        met = expect == "detect"
    elif not cells:
        # nothing was tested (no sample set, or every requested test skipped): no evidence is not PASS
        verdict = UNDERPOWERED
        reason = "no cell was tested (no sample set, or every requested test was skipped for it): no evidence for PASS"
        met = False
    elif any(c.verdict == CELL_UNDERPOWERED for c in cells) and (
            has_tv_cell(cells) or not all(_blind(c) for c in cells if c.verdict == CELL_UNDERPOWERED)):
        # (no TV cell and only blind ones short of power: more rows cannot PASS it, the no-TV-cell reason leads)
        verdict = UNDERPOWERED
        reason = underpowered_reason(cells, target_mde)
        met = False
    elif not has_tv_cell(cells):  # PIT / surprisal only: no cell states a TV, so no PASS can claim one
        verdict = UNDERPOWERED
        reason = no_tv_cell_reason(cells)
        met = False
    else:
        verdict = PASS
        reason = pass_reason(cells, method, target_mde, max_new_tokens)
        met = expect == "pass"
    return DecoderVerdict(decoder, expect, verdict, met, method, combined, reason, error, cells)


def _weights_text(cell_weights: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in sorted(cell_weights.items()))


def underpowered_reason(cells: list[CellResult], target_mde: float) -> str:
    """What an UNDERPOWERED verdict tells the user to do: the worst cell's MDE and the rows per
    sample set that would bring every underpowered cell to ``target_mde`` (``CellResult.n_needed``)."""
    weak = [c for c in cells if c.verdict == CELL_UNDERPOWERED]
    blind = [c for c in weak if c.effect_unit in BLIND_AT and c.n > 0]  # they detect nothing: no n_needed to name
    if blind and len(blind) == len(weak):
        return f"{len(weak)} of {len(cells)} cells underpowered; {_blind_text(blind[0])}"
    weak = [c for c in weak if c not in blind]
    worst = max(weak, key=lambda c: c.mde or 0)
    if worst.n == 0:
        return f"cell {worst.id} has no samples: no evidence for PASS"
    reason = (f"{len(weak) + len(blind)} of {len(cells)} cells underpowered; cell {worst.id} can only see TV >= "
              f"{worst.mde:.3g} > target_mde {target_mde:g} at n = {worst.n}" + (f"; {_blind_text(blind[0])}" if blind else ""))
    needed = [c.n_needed for c in weak if c.n_needed is not None]
    if len(needed) == len(weak) and needed:
        most = max(weak, key=lambda c: c.n_needed)
        reason += (f"; the largest n needed is n >= {most.n_needed} rows per sample set (cell {most.id}, now "
                   f"{most.n}): " + _MORE_ROWS.get().replace("{n}", str(most.n_needed)))
    elif needed:
        reason += f"; {len(needed)} cell(s) reach it with more rows (see n_needed per cell), {len(weak) - len(needed)} cannot"
    else:
        reason += "; no n up to 1e9 rows reaches it"
    return reason


def _blind(cell: CellResult) -> bool:
    """A tested cell whose MDE is the largest effect its unit allows (:data:`BLIND_AT`): it detects nothing."""
    return cell.n > 0 and cell.effect_unit in BLIND_AT and cell.mde is not None and cell.mde >= BLIND_AT[cell.effect_unit]


def _blind_text(cell: CellResult) -> str:
    """Why a cell whose MDE is the largest effect its unit allows (:data:`BLIND_AT`) is underpowered."""
    if cell.effect_unit == "collision":
        return (f"cell {cell.id} detects nothing at n = {cell.n} pairs: not even every pair identical would reject at "
                "its level (more rows lower its critical count)")
    what = {"ks": "KS distance", "autocorrelation": "lag-1 autocorrelation"}.get(cell.effect_unit, cell.effect_unit)
    return (f"cell {cell.id} detects nothing at n = {cell.n}: its MDE is {what} 1, the largest there is (more rows "
            "lower it)")


def exit_code(verdicts: list[DecoderVerdict], exact_ok: bool = True) -> int:
    """Exit code of a run: 3 a decoder crashed/invalid (and that was not the expected finding),
    1 an expectation failed (bias where `pass`, mutant undetected, exact stage wrong),
    4 a `pass` decoder underpowered, 0 otherwise."""
    if any(v.verdict == ERROR and not v.expectation_met for v in verdicts):
        return EXIT_DECODER
    if not exact_ok or any(not v.expectation_met and v.verdict != UNDERPOWERED for v in verdicts):
        return EXIT_BIAS
    if any(v.verdict == UNDERPOWERED for v in verdicts):
        return EXIT_UNDERPOWERED if all(v.expect == "pass" for v in verdicts if v.verdict == UNDERPOWERED) else EXIT_BIAS
    return EXIT_OK
