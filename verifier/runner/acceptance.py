"""Acceptance audit: how many drafts a decoder accepts, next to what the canonical rule would.

The bias verdict (:mod:`verifier.runner.verdict`) is about the output law only: lossless
decoders may verify drafts by other rules (``fresh_target_match``, block verification, ...) and
accept more or fewer drafts than the canonical ``min(1, p/q)`` rule while emitting exactly the
target's law.  So the first round's accepted-draft count is not a bias cell.  It is reported
here, per sample set, as an **efficiency figure**:

* observed acceptance per draft position ``j`` -- the share of first rounds with ``>= j`` drafts
  accepted among those with ``>= j - 1`` (conditional on reaching position j; an accepted EOS
  ends the round) -- with a Clopper-Pearson interval;
* mean accepted drafts per round and mean emitted tokens per round (accepted + 1: the recovered
  or bonus token), with a t interval;
* the same figures of the canonical rule on the same target/draft processed probs, exactly from
  the enumerated first-round accepted-count law (:func:`verifier.runner.expected.accepted_count_law`;
  position 1 alone is ``sum min(p, q)`` at the prompt);
* the ratio of target passes per emitted token, canonical tokens per round over observed.

A first-position acceptance significantly above ``sum min(p, q)`` (the coupling bound, which the
canonical rule attains and no lossless decoder drafting from the suite's draft exceeds) gets the
loud note "ACCEPTANCE ABOVE THE COUPLING BOUND" (fabricated stats or another draft), never a speed-up.
"Significantly" carries the error control of a bias verdict (issue 28: a per-set 99% interval over
30 sets accused the reference in the ci run): each set gets a one-sided exact binomial test of
``P(draft 1 accepted) <= bound`` (:func:`acceptance_audit` stores it in ``bound_test``), and
:func:`coupling_bound_check` decides over **every set checked in the run** with Holm at the run's
family alpha times :data:`ACCUSATION_ALPHA_SHARE` (1%: an accusation must essentially never hit a correct
decoder), showing the one-sided Clopper-Pearson lower bound at the level Holm used for that set.  Only position 1 is tested: the canonical rule's later conditional
acceptances are no bound for other lossless rules (block verification exceeds them).
never a speed-up.  A decoder whose acceptance is **far below canonical** gets a loud note (a performance bug, not a
bias): far means the upper end of the observed mean accepted drafts per round's interval is
below :data:`FAR_BELOW_FRACTION` of the canonical mean.  The audit never changes the bias
verdict, and a decoder that reports no ``last_stats`` just gets "not reported".

Only when a suite declares ``acceptance = "canonical"`` for a decoder does the accepted-count law
enter its expectation, as **acceptance rule conformance** (:func:`conformance`): a chi-square
goodness-of-fit of the observed counts against the canonical law at the suite's alpha, reported
in its own field, never as distribution bias.

The canonical figures use the suite's draft model processed with the suite's sampling config; a
decoder whose draft path processes its logits differently (still lossless if it samples the q it
hands over) has another canonical figure than the one shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

__all__ = ["FAR_BELOW_FRACTION", "CONFIDENCE", "NO_ROUND", "AcceptanceAudit", "acceptance_audit", "clopper_pearson", "conformance",
           "CONFORMS", "NONCONFORMING", "NOT_TESTED", "BOUND_TEST", "coupling_bound_check", "holm_reject",
           "ACCUSATION_ALPHA_SHARE"]

# how a decoder reports its statistics: named wherever the report says it reported none
HOW_TO_REPORT = ("To report them, set `last_stats = verifier.protocols.DecoderStats(rounds=..., accepted_counts=..., "
                 "num_draft_tokens=k, first_round_accepted=...)` after each generate call: first_round_accepted = "
                 "accepted drafts in each row's first round, shape (num_samples,); accepted_counts = accepted drafts "
                 "of every round; optional origins (num_samples, max_new_tokens) for the diagnosis (docs/plugins.md)")

FAR_BELOW_FRACTION = 0.5  # "far below canonical": the observed mean accepted drafts is < half the canonical's (upper CI end)
CONFIDENCE = 0.99  # confidence of every interval in the audit
ACCUSATION_ALPHA_SHARE = 0.01  # "ABOVE THE COUPLING BOUND" runs at 1% of the family alpha (coupling_bound_check)
CONFORMS, NONCONFORMING, NOT_TESTED = "CONFORMS", "NONCONFORMING", "NOT TESTED"
BOUND_TEST = "one-sided exact binomial test of P(draft 1 accepted) <= sum min(p, q), Holm over every set of the run"
NO_ROUND = -1  # first_round_accepted of a row in which no speculative round ran (no draft proposed; e.g. prompt lookup without a match)


@dataclass
class AcceptanceAudit:
    """Acceptance figures of one sample set (JSON-ready via :meth:`to_dict`)."""

    set_id: str
    label: str
    decoder: str
    num_draft_tokens: int
    reported: bool
    rounds: int = 0  # first rounds observed (= rows with a reported first_round_accepted)
    positions: list[dict[str, Any]] = field(default_factory=list)
    mean_accepted: float | None = None
    mean_accepted_ci: tuple[float, float] | None = None
    canonical_mean_accepted: float | None = None
    tokens_per_round: float | None = None
    canonical_tokens_per_round: float | None = None
    passes_ratio: float | None = None  # target passes per token, observed / canonical
    all_rounds_mean_accepted: float | None = None
    canonical_source: str | None = None
    far_below: bool = False
    above_bound: bool = False  # position-1 acceptance above sum min(p, q) (the coupling bound): coupling_bound_check
    bound_test: dict[str, Any] | None = None  # position 1 vs the bound: accepted, rounds, bound, pvalue (+ the run's Holm)
    rows_without_round: int = 0  # rows whose first_round_accepted is NO_ROUND (no speculative round ran)
    canonical_skipped: str | None = None  # why no canonical figure: the draft is unknown (verifier.runner.draft)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["mean_accepted_ci"] = list(self.mean_accepted_ci) if self.mean_accepted_ci else None
        return d


def clopper_pearson(successes, trials, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper-Pearson) two-sided intervals of binomial proportions, vectorised.

    ``low = Beta.ppf((1 - c) / 2; x, n - x + 1)`` (0 at x = 0), ``high = Beta.ppf((1 + c) / 2; x + 1, n - x)``
    (1 at x = n): the closed form of the interval ``scipy.stats.binomtest(x, n).proportion_ci(c, "exact")``
    finds by root search on the binomial CDF (the same interval to ~1e-12; tests/runner/test_acceptance_audit.py),
    without one root search per bound (issue 17: 10% of the nightly statistics stage).

    Parameters
    ----------
    successes, trials : array_like of int, same shape
        ``0 <= successes <= trials``; entries with ``trials = 0`` get NaN bounds.
    confidence : float, default 0.99

    Returns
    -------
    (low, high) : np.ndarray, float64, the shape of ``successes``
    """
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    tail = (1.0 - confidence) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, sps.beta.ppf(tail, np.maximum(x, 1), n - x + 1), 0.0)
        high = np.where(x < n, sps.beta.ppf(1 - tail, x + 1, np.maximum(n - x, 1)), 1.0)
    bad = n <= 0
    return np.where(bad, np.nan, low), np.where(bad, np.nan, high)


def _mean_ci(values: np.ndarray, confidence: float) -> tuple[float, float]:
    n = values.size
    mean = float(values.mean())
    if n < 2:
        return (mean, mean)
    sd = float(values.std(ddof=1))
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return (mean - half, mean + half)


def acceptance_audit(set_id: str, label: str, decoder: str, num_draft_tokens: int, first_round_accepted: np.ndarray | None,
                     all_accepted: np.ndarray | None, canonical_law: np.ndarray | None, *,
                     confidence: float = CONFIDENCE, canonical_skipped: str = "") -> AcceptanceAudit:
    """Observed vs canonical acceptance of one sample set.

    Parameters
    ----------
    set_id, label, decoder : str
        Identify the sample set in the report.
    num_draft_tokens : int
        k.
    first_round_accepted : np.ndarray of int, shape (rows,), or None
        Drafts accepted in each row's first round (``DecoderStats.first_round_accepted``); None
        when the decoder does not report it.  Values outside 0..k are clipped into range (their
        validity is the sampling stage's business).
    all_accepted : np.ndarray of int, shape (rounds,), or None
        Accepted drafts of every round (``DecoderStats.accepted_counts``), shown for information.
    canonical_law : np.ndarray, shape (k + 1,), or None
        The canonical rule's first-round accepted-count law on the same target/draft processed
        probs; None when it could not be enumerated.
    confidence : float, default 0.99
    canonical_skipped : str, default ""
        Why the canonical figure is not computed (the draft is unknown,
        :mod:`verifier.runner.draft`); stated in the note.

    Returns
    -------
    AcceptanceAudit
    """
    k = int(num_draft_tokens)
    fra_all = None if first_round_accepted is None else np.asarray(first_round_accepted, dtype=np.int64)
    no_round = 0 if fra_all is None else int((fra_all == NO_ROUND).sum())
    reported = fra_all is not None and len(fra_all) > no_round
    audit = AcceptanceAudit(set_id, label, decoder, k, reported=reported)
    audit.rows_without_round = no_round
    audit.canonical_skipped = canonical_skipped or None
    if all_accepted is not None and len(all_accepted):
        audit.all_rounds_mean_accepted = float(np.mean(all_accepted))
    canon = None
    if canonical_law is not None:
        canon = np.clip(np.asarray(canonical_law, dtype=np.float64), 0, None)
        canon = canon / canon.sum()
        audit.canonical_source = ("exact first-round accepted-count law of the canonical rule "
                                  "(enumerated target/draft processed probs)")
        audit.canonical_mean_accepted = float(np.dot(np.arange(k + 1), canon))
        audit.canonical_tokens_per_round = audit.canonical_mean_accepted + 1
    if not audit.reported:
        if fra_all is not None and len(fra_all):
            why = (f"the decoder reported no speculative round in any of its {len(fra_all)} rows (first_round_accepted "
                   f"= {NO_ROUND} everywhere)")
        elif all_accepted is not None and len(all_accepted):
            why = (f"the decoder reports {len(all_accepted)} rounds' accepted counts but no per-row "
                   "first_round_accepted")
        else:
            why = "no last_stats.first_round_accepted"
        audit.note = (f"ENGINE REPORTS NO STATISTICS: {why}, so its acceptance is not reported or audited (no zeros are "
                      f"assumed; the bias verdict never needs it). {HOW_TO_REPORT}")
        return audit
    fra = np.clip(fra_all[fra_all != NO_ROUND], 0, k)
    n = fra.size
    audit.rounds = n
    counts = np.bincount(fra, minlength=k + 1)
    at_least = counts[::-1].cumsum()[::-1]  # at_least[j] = rounds with >= j drafts accepted
    canon_at_least = canon[::-1].cumsum()[::-1] if canon is not None else None
    ci_low, ci_high = clopper_pearson(at_least[1:], at_least[:-1], confidence)  # one vectorised call for all k positions
    for j in range(1, k + 1):
        reached, accepted = int(at_least[j - 1]), int(at_least[j])
        row: dict[str, Any] = {"position": j, "reached": reached, "accepted": accepted, "observed": None, "ci": None,
                               "canonical": None}
        if reached:
            row["observed"], row["ci"] = accepted / reached, [float(ci_low[j - 1]), float(ci_high[j - 1])]
        if canon_at_least is not None and canon_at_least[j - 1] > 0:
            row["canonical"] = float(canon_at_least[j] / canon_at_least[j - 1])
        audit.positions.append(row)
    first = audit.positions[0] if audit.positions else {}
    if first.get("reached") and first.get("canonical") is not None:  # decided run-wide by coupling_bound_check
        x, n_1, bound = first["accepted"], first["reached"], first["canonical"]
        audit.bound_test = {"accepted": x, "rounds": n_1, "bound": bound,
                            "pvalue": float(sps.binom.sf(x - 1, n_1, bound)) if x > 0 else 1.0}
    audit.mean_accepted = float(fra.mean())
    audit.mean_accepted_ci = _mean_ci(fra.astype(np.float64), confidence)
    audit.tokens_per_round = audit.mean_accepted + 1
    audit.note = _efficiency_note(audit, confidence)
    if canonical_skipped:
        audit.note = f"{audit.note}; {canonical_skipped}"
    audit.note += _no_round_clause(audit.__dict__)
    return audit


def _observed(a: dict[str, Any], confidence: float = CONFIDENCE) -> str:
    k, mean, (lo, hi) = a["num_draft_tokens"], a["mean_accepted"], a["mean_accepted_ci"]
    return f"accepts {mean / k:.0%} of drafts ({mean:.2f} of k={k} per first round, {confidence:.0%} CI [{lo:.2f}, {hi:.2f}])"


def _no_round_clause(a: dict[str, Any]) -> str:
    n = a["rows_without_round"]
    if not n:
        return ""
    return (f"; {n} of {a['rounds'] + n} rows ran no speculative round (first_round_accepted = {NO_ROUND}: "
            "left out of these figures)")


def _efficiency_note(a: AcceptanceAudit, confidence: float) -> str:
    observed = _observed(a.__dict__, confidence)
    if a.canonical_mean_accepted is None:
        if a.canonical_skipped:
            return observed
        return f"{observed}; the canonical figure is not known here (its law could not be enumerated)"
    a.passes_ratio = a.canonical_tokens_per_round / a.tokens_per_round  # noqa: E501
    k = a.num_draft_tokens
    canon = f"where the canonical rule accepts {a.canonical_mean_accepted / k:.0%} ({a.canonical_mean_accepted:.2f})"
    lo, hi = a.mean_accepted_ci
    if hi < FAR_BELOW_FRACTION * a.canonical_mean_accepted:
        a.far_below = True
        return (f"ACCEPTANCE FAR BELOW CANONICAL (a performance bug, not a bias): {observed} {canon}: about "
                f"{a.passes_ratio:.1f}x more target passes per token (far = the {confidence:.0%} upper bound of mean "
                f"accepted drafts is below {FAR_BELOW_FRACTION:.0%} of the canonical rule's)")
    if hi < a.canonical_mean_accepted:
        return f"{observed} {canon}: about {a.passes_ratio:.2f}x the target passes per token (below the canonical figure)"
    if lo > a.canonical_mean_accepted:
        return (f"{observed} {canon}: about {1 / a.passes_ratio:.2f}x the canonical tokens per target pass "
                "(above the canonical figure)")
    return f"{observed} {canon}: consistent with the canonical rule's efficiency"


def holm_reject(pvalues, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down procedure along the last axis (vectorised over leading axes, e.g. simulated runs).

    Parameters
    ----------
    pvalues : array_like, shape (..., m)
        NaN entries are hypotheses not tested (never rejected, not counted in m).
    alpha : float
        Family-wise error rate.

    Returns
    -------
    (rejected, level) : np.ndarray bool and float64, shape (..., m)
        ``level`` is the level Holm compares each p-value with, ``alpha / (m - rank)`` (rank 0 = the
        smallest p-value); NaN where not tested.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    tested = ~np.isnan(p)
    m = tested.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(tested, p, np.inf), axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(p.shape[-1]), p.shape), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(tested, alpha / (m - ranks), np.nan)
    ok_sorted = np.take_along_axis(np.where(tested, p <= level, False), order, axis=-1)
    passed_sorted = np.cumprod(ok_sorted, axis=-1).astype(bool)  # step-down: stop at the first acceptance
    rejected = np.empty_like(passed_sorted)
    np.put_along_axis(rejected, order, passed_sorted, axis=-1)
    return rejected, level


def coupling_bound_check(audits: list[dict[str, Any]], alpha: float) -> dict[str, Any]:
    """Decide "ACCEPTANCE ABOVE THE COUPLING BOUND" over every sample set checked in a run.

    Each audit dict (:meth:`AcceptanceAudit.to_dict`) with a ``bound_test`` is one hypothesis
    ``P(draft 1 accepted) <= sum min(p, q)``; Holm at ``alpha * ACCUSATION_ALPHA_SHARE`` over all of them
    bounds the probability that a run calls any lossless decoder's set implausible by that level (the
    exact binomial test is conservative, so the rate is lower; ``specverify bench acceptance-bound``
    measures it).  The share (1%) is a policy, not a statistic: "fabricated stats" is an accusation
    against whoever ran the decoder, so it must essentially never hit a correct one -- at the default
    family alpha 1e-3 it is 1e-5 per run, about 0.1 expected in 10,000 least-favourable runs (issue 28),
    while the bias verdict keeps the full alpha.  Rejected sets get ``above_bound = True`` and the loud note with the one-sided
    Clopper-Pearson lower bound at Holm's level for that set (it exceeds the bound exactly when the
    set's p-value is below that level); every tested set gets ``bound_test`` completed with
    ``alpha``, ``m``, ``level`` and ``rejected``.

    Parameters
    ----------
    audits : list of dict
        Every acceptance audit of the run (all decoders), modified in place.
    alpha : float
        The run's family alpha (the suite's ``stats.alpha``); the check runs at ``ACCUSATION_ALPHA_SHARE``
        of it.

    Returns
    -------
    dict
        ``method``, ``alpha`` (the level used), ``m`` (sets tested), ``rejected`` (set ids).

    Examples
    --------
    >>> a = acceptance_audit("s", "set", "d", 1, np.array([1] * 90 + [0] * 10), None, np.array([0.3, 0.7]))
    >>> coupling_bound_check([a.to_dict()], 1e-3)["rejected"]
    ['s']
    """
    tested = [a for a in audits if a.get("bound_test")]
    alpha = float(alpha) * ACCUSATION_ALPHA_SHARE
    out: dict[str, Any] = {"method": BOUND_TEST, "alpha": alpha, "m": len(tested), "rejected": []}
    if not tested:
        return out
    rejected, level = holm_reject([a["bound_test"]["pvalue"] for a in tested], alpha)
    for a, rej, lev in zip(tested, rejected, level):
        t = a["bound_test"]
        t.update({"alpha": alpha, "m": len(tested), "level": float(lev), "rejected": bool(rej)})
        a["above_bound"] = bool(rej)
        if not rej:
            continue
        out["rejected"].append(a["set_id"])
        x, n = t["accepted"], t["rounds"]
        low = float(sps.beta.ppf(lev, x, n - x + 1)) if x > 0 else 0.0  # one-sided Clopper-Pearson at 1 - level
        a["note"] = (f"ACCEPTANCE ABOVE THE COUPLING BOUND: implausible for a lossless decoder drafting from this draft "
                     f"model (fabricated stats, or another draft/processing): draft 1 accepted in {x} of {n} first "
                     f"rounds ({x / n:.3f}; one-sided {1 - lev:.4%} lower bound {low:.3f}) but no lossless decoder "
                     f"drafting from this draft can exceed sum min(p, q) = {t['bound']:.3f} (exact binomial p = "
                     f"{t['pvalue']:.2g} <= {lev:.2g}, Holm over {len(tested)} set(s) of the run at alpha = {alpha:g}; "
                     f"not a bias verdict; no speed-up is claimed): {_observed(a)}{_no_round_clause(a)}")
    return out


def conformance(cells: list[Any], alpha: float, audit_notes: list[str]) -> dict[str, Any]:
    """Verdict of the declared ``acceptance = "canonical"`` check from its accepted-count cells.

    Parameters
    ----------
    cells : list of CellResult
        One per testable sample set: the chi-square of the first-round accepted counts against
        the canonical law (:func:`verifier.runner.analysis.gof_cell`, test ``acceptance
        conformance``); empty when no set could be tested (no stats reported, or
        max_new_tokens < k + 1).  Their ``adjusted_pvalue`` (Bonferroni) and ``verdict`` are set.
    alpha : float
        The suite's alpha: the level of this single test (Bonferroni over several sets).
    audit_notes : list of str
        Why sets were not tested, shown when nothing was.

    Returns
    -------
    dict
        ``verdict`` (CONFORMS / NONCONFORMING / NOT TESTED), ``reason``, ``cells`` (the cell ids).
    """
    tested = [c for c in cells if c.n > 0]
    if not tested:
        why = "; ".join(sorted(set(audit_notes))) or "no sample set reported first-round accepted counts"
        return {"verdict": NOT_TESTED, "reason": f"acceptance = \"canonical\" declared but not testable: {why}", "cells": []}
    level = alpha / len(tested)
    bad = [c for c in tested if c.support_violation or c.pvalue <= level]
    for c in tested:
        c.adjusted_pvalue = min(1.0, c.pvalue * len(tested))
        c.verdict = "NONCONFORMING" if c in bad else "CONFORMS"
    if bad:
        worst = min(bad, key=lambda c: 0.0 if c.support_violation else c.pvalue)
        why = worst.support_violation or f"p={worst.pvalue:.3g} <= {level:.3g}"
        return {"verdict": NONCONFORMING, "cells": [c.id for c in tested],
                "reason": (f"acceptance rule conformance FAILED (declared acceptance = \"canonical\"): the first-round "
                           f"accepted-count law differs from the canonical min(1, p/q) rule's in {len(bad)} of {len(tested)} "
                           f"set(s); worst {worst.id}: {why}.  This is not distribution bias")}
    return {"verdict": CONFORMS, "cells": [c.id for c in tested],
            "reason": f"the first-round accepted-count law matches the canonical rule's in {len(tested)} set(s) "
                      f"(Bonferroni at alpha={alpha:g})"}
