"""Rank known mechanisms by log likelihood ratio over the target law and say which one fits.

For each mechanism m, ``log LR_m = sum_i log P_m(x_i) - sum_i log P_target(x_i)`` over the emitted
rows (:mod:`verifier.diagnose.likelihood`).  Threshold: under the null (the decoder samples from the
target) each ``LR_m`` is a non-negative martingale with mean 1, so ``P(log LR_m >= c) <= e^-c``
(Markov/Ville) and, Bonferroni over the M mechanisms ranked, ``c = log(M / DIAGNOSIS_ALPHA)`` bounds
the false-diagnosis rate by ``DIAGNOSIS_ALPHA``; the rate measured by simulation under the null is in
reports/benchmarks.md ("Diagnosis").

Verdict of a diagnosis:

* ``consistent``: the best mechanism's log LR over the target is >= the threshold and its own
  predicted law of the first J tokens is not rejected by a chi-square goodness of fit at
  ``FIT_ALPHA`` (:func:`verifier.stats.gof_test`, where the J-token law is enumerable);
* ``no known mechanism``: the best mechanism's fit is rejected, or no mechanism reaches the
  threshold while the run's verdict is BIAS DETECTED;
* ``none preferred``: no mechanism reaches the threshold (and no bias was detected).

Mechanisms whose log-likelihoods agree within ``TIE_TOLERANCE`` on the data are one group: their laws
coincide here (e.g. draft_raw_q at T = 1) and the sentence names them together.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from verifier.diagnose.likelihood import SequenceProbs, log_likelihood, target_log_likelihood
from verifier.diagnose.latent import GROUPED
from verifier.diagnose.mechanisms import MECHANISMS

__all__ = ["DIAGNOSIS_ALPHA", "FIT_ALPHA", "MechanismScore", "Ranking", "rank_mechanisms", "threshold_for",
           "decide", "sentence"]

DIAGNOSIS_ALPHA = 0.01  # bound on naming a mechanism when the decoder samples from the target
FIT_ALPHA = 1e-3  # level of the best mechanism's goodness of fit (rejecting a true mechanism this often)
TIE_TOLERANCE = 1e-6  # log-likelihoods closer than this (nats, total) are the same law on these data
MAX_DRAFT_AFTER_ROWS = 2_000_000  # draft forward rows a kept-suffix likelihood may need (distinct observed contexts x vocab)

CONSISTENT, NO_KNOWN, NONE_PREFERRED = "consistent", "no known mechanism", "none preferred"


@dataclass
class MechanismScore:
    """One mechanism's total log-likelihood and log LR over the target (nats); ``note`` when not computed."""

    name: str
    declared: str
    log_likelihood: float | None
    log_lr: float | None
    note: str = ""


@dataclass
class Ranking:
    """Scores of every mechanism for one set of rows (or a sum over sample sets), best first."""

    n: int
    target_log_likelihood: float
    scores: list[MechanismScore]
    per_position: dict[str, list[float]] = field(default_factory=dict)  # mechanism -> log LR per position

    def ranked(self) -> list[MechanismScore]:
        """Computed biased/lossy mechanisms, best log LR first (exact ones are the null, never named)."""
        got = [s for s in self.scores if s.log_lr is not None and s.declared != "exact"]
        return sorted(got, key=lambda s: -_key(s.log_likelihood))  # = by log LR (same target), also when that is inf

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "target_log_likelihood": _f(self.target_log_likelihood),
                "scores": [{k: _f(v) for k, v in asdict(s).items()} for s in self.scores]}


def _key(x: float) -> float:
    return -1e300 if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _f(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _suffix_rows(seqs: SequenceProbs, k: int) -> int:
    from verifier.diagnose.likelihood import suffix_draft_rows

    return suffix_draft_rows(seqs.tokens, seqs.eos_token_id, k, seqs.p.shape[2])


def rank_mechanisms(seqs: SequenceProbs, num_draft_tokens: int, *, mechanisms=None,
                    per_position: bool = True) -> Ranking:
    """Total log-likelihood of ``seqs`` under every mechanism and its log LR over the target.

    Parameters
    ----------
    seqs : SequenceProbs
    num_draft_tokens : int
    mechanisms : iterable of str, optional
        Names in :data:`~verifier.diagnose.mechanisms.MECHANISMS` (default: all).
    per_position : bool, default True
        Also keep each mechanism's log LR per emitted position (localization).

    Returns
    -------
    Ranking
        A mechanism that needs what ``seqs`` lacks (unprocessed probs, or a kept-suffix likelihood beyond
        :data:`MAX_DRAFT_AFTER_ROWS` draft rows) gets ``log_lr = None`` and a note.
    """
    names = list(mechanisms) if mechanisms is not None else list(MECHANISMS)
    w = seqs.row_weights
    ll_t = target_log_likelihood(seqs)
    total_t = float(_wsum(ll_t, w))
    scores, per_pos = [], {}
    cond_t = _target_per_position(seqs) if per_position else None
    raw_is_processed = seqs.p_raw is not None and seqs.p_raw is seqs.p and seqs.q_raw is seqs.q
    computed: dict[str, tuple] = {}

    def scored(name: str, m, total: float) -> MechanismScore:
        with np.errstate(invalid="ignore"):
            lr = total - total_t
        return MechanismScore(name, m.declared, total, float(lr) if not math.isnan(lr) else 0.0)
    for name in names:
        m = MECHANISMS[name]
        if m.latent:
            from verifier.diagnose.latent import feasible

            why = feasible(seqs, num_draft_tokens, name, grouped=True)
            if why is not None and name == "kv_not_rolled_back":  # exact law too large: the Monte Carlo estimate
                from verifier.diagnose.latent_mc import mc_feasible

                why = mc_feasible(seqs, num_draft_tokens)
                if why is None:  # whole rows only: a per-position split would rerun the estimate at every prefix length (~3x)
                    scores.append(scored(name, m, float(_wsum(log_likelihood(m, seqs, num_draft_tokens), w))))
                    continue
            if why is not None:
                scores.append(MechanismScore(name, m.declared, None, None, why))
                continue
            if name in GROUPED:  # rows of one generate call are dependent: a likelihood per call, no per-position split
                from verifier.diagnose.latent import call_log_likelihood

                scores.append(scored(name, m, call_log_likelihood(seqs, num_draft_tokens)))
                continue
        if m.needs_raw and seqs.p_raw is None:
            scores.append(MechanismScore(name, m.declared, None, None, "needs unprocessed probs"))
            continue
        if m.keep_suffix and num_draft_tokens > 1 and (seqs.draft_after is None or (suffix := _suffix_rows(seqs, num_draft_tokens)) > MAX_DRAFT_AFTER_ROWS):
            rows = "no draft oracle" if seqs.draft_after is None else f"{suffix} forward rows > {MAX_DRAFT_AFTER_ROWS}"
            scores.append(MechanismScore(name, m.declared, None, None,
                                         f"not computed: a kept draft suffix needs the draft after every latent rejected token ({rows})"))
            continue
        if m.needs_raw and raw_is_processed and "canonical" in computed:
            ll, cond = computed["canonical"]  # unprocessed = processed here (T = 1, no filter): the canonical law
            if per_position:
                per_pos[name] = per_pos["canonical"]
        elif per_position:
            ll, cond = log_likelihood(m, seqs, num_draft_tokens, per_position=True)
            computed[name] = (ll, cond)
            with np.errstate(invalid="ignore"):
                per_pos[name] = [_f(float(v)) for v in ((cond - cond_t) * w[:, None]).sum(axis=0)]
        else:
            ll = log_likelihood(m, seqs, num_draft_tokens)
            computed[name] = (ll, None)
        scores.append(scored(name, m, float(_wsum(ll, w))))
    return Ranking(int(w.sum()), total_t, scores, per_pos)


def _target_per_position(seqs: SequenceProbs) -> np.ndarray:
    """``log p_t(x_t)`` per row and position (0 after a row's end): the canonical rule's conditional log-probs."""
    from verifier.diagnose.rows import sequence_ends

    x = np.where(seqs.tokens < 0, 0, seqs.tokens)
    with np.errstate(divide="ignore"):
        lp = np.log(np.take_along_axis(seqs.p, x[..., None], axis=2)[..., 0])
    live = np.arange(seqs.tokens.shape[1])[None] < sequence_ends(seqs.tokens, seqs.eos_token_id)[:, None]
    return np.where(live, lp, 0.0)


def _wsum(ll: np.ndarray, w: np.ndarray) -> float:
    return float((ll * w).sum()) if np.isfinite(ll).all() else float(ll.min() if np.isneginf(ll).any() else ll.sum())


def combine(rankings: list[Ranking]) -> Ranking:
    """Sum of rankings over independent sample sets (log-likelihoods add)."""
    by = {}
    for r in rankings:
        for s in r.scores:
            cur = by.get(s.name)
            if cur is None:
                by[s.name] = MechanismScore(s.name, s.declared, s.log_likelihood, s.log_lr, s.note)
            elif cur.log_lr is None or s.log_lr is None:
                cur.log_lr = cur.log_likelihood = None
                cur.note = cur.note or s.note
            else:
                cur.log_lr += s.log_lr
                cur.log_likelihood += s.log_likelihood
    return Ranking(sum(r.n for r in rankings), sum(r.target_log_likelihood for r in rankings), list(by.values()))


def threshold_for(num_mechanisms: int, alpha: float = DIAGNOSIS_ALPHA) -> float:
    """``log(M / alpha)``: the log LR a mechanism needs before it is named (false-diagnosis rate <= alpha)."""
    return math.log(max(1, num_mechanisms) / alpha)


def _groups(ranked: list[MechanismScore]) -> list[list[MechanismScore]]:
    groups: list[list[MechanismScore]] = []
    for s in ranked:
        if groups and math.isfinite(_key(s.log_likelihood)) and abs(groups[-1][0].log_likelihood - s.log_likelihood) <= TIE_TOLERANCE:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def decide(ranking: Ranking, *, bias_detected: bool, fit_pvalue: float | None = None,
           alpha: float = DIAGNOSIS_ALPHA) -> dict[str, Any]:
    """The diagnosis of one ranking: status, best group, margins and the sentence.

    Parameters
    ----------
    ranking : Ranking
    bias_detected : bool
        The run's verdict for the decoder was BIAS DETECTED.
    fit_pvalue : float or None
        Goodness-of-fit p-value of the best mechanism's predicted J-token law (None: not tested).
    alpha : float, default DIAGNOSIS_ALPHA

    Returns
    -------
    dict
        ``status`` (consistent / no known mechanism / none preferred), ``best`` (names), ``log_lr``,
        ``margin`` (over the next group), ``next`` (names), ``threshold``, ``fit_pvalue``, ``sentence``.
    """
    ranked = ranking.ranked()
    thr = threshold_for(len(ranked), alpha)
    groups = _groups(ranked)
    out: dict[str, Any] = {"threshold": thr, "fit_pvalue": fit_pvalue, "fit_alpha": FIT_ALPHA, "best": [], "next": [],
                           "log_lr": None, "margin": None}
    if groups:
        out["best"] = [s.name for s in groups[0]]
        out["log_lr"] = groups[0][0].log_lr
        if len(groups) > 1:
            out["next"] = [s.name for s in groups[1]]
            with np.errstate(invalid="ignore"):
                out["margin"] = float(np.float64(groups[0][0].log_likelihood) - groups[1][0].log_likelihood)
    lr = out["log_lr"]
    if lr is None or lr < thr:
        out["status"] = NO_KNOWN if bias_detected else NONE_PREFERRED
    elif fit_pvalue is not None and fit_pvalue < FIT_ALPHA:
        out["status"] = NO_KNOWN
    else:
        out["status"] = CONSISTENT
    out["sentence"] = sentence(out)
    return {k: _f(v) for k, v in out.items()}


def _num(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "inf" if x == math.inf else ("-inf" if x == -math.inf else f"{x:.1f}")


def sentence(d: dict[str, Any]) -> str:
    """One line: "consistent with X (log LR 41.3 over the target, 30.2 over the next mechanism Y)"."""
    best = " = ".join(d["best"]) or "none"
    lr = d["log_lr"] if not isinstance(d["log_lr"], str) else float(d["log_lr"])
    if d["status"] == "consistent":
        nxt = f", {_num(d['margin'])} over the next mechanism {' = '.join(d['next'])}" if d["next"] else ""
        return f"consistent with {best} (log LR {_num(lr)} over the target{nxt})"
    if d["status"] == "no known mechanism":
        if d["fit_pvalue"] is not None and lr is not None and lr >= d["threshold"]:
            why = (f"the best, {best} (log LR {_num(lr)} over the target), has its own predicted law rejected "
                   f"(goodness of fit p = {d['fit_pvalue']:.2g} < {FIT_ALPHA:g})")
        else:
            why = f"the best, {best}, has log LR {_num(lr)} over the target, below the threshold {d['threshold']:.1f}"
        return f"matches no known mechanism ({why})"
    return (f"no mechanism preferred over the target (best: {best}, log LR {_num(lr)} < threshold "
            f"{d['threshold']:.1f})")
