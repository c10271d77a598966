"""Rank the hypotheses of the family by likelihood ratio over the target law and say which one fits.

The hypotheses are :func:`verifier.diagnose.family.family_names` (every mechanism, pairs of defects, the prefill
layout).  For each, ``log LR_m`` is the log of its contamination-mixture likelihood ratio over the target
(:mod:`verifier.diagnose.robust`; per row :mod:`verifier.diagnose.likelihood`).  Threshold: under the null (the
decoder samples from the target) each ``LR_m`` is a non-negative martingale with mean 1, so
``P(log LR_m >= c) <= e^-c`` (Markov/Ville) and, Bonferroni over the M hypotheses, ``c = log(M / DIAGNOSIS_ALPHA)``
bounds the false-diagnosis rate by ``DIAGNOSIS_ALPHA``; the rate measured by simulation under the null is in
reports/benchmarks.md ("Diagnosis").  Against a wrong name: a hypothesis is named alone only when it beats every
other one by ``log(2 M / DIAGNOSIS_ALPHA)`` (:func:`separation_for`); else the ones it does not separate from are
named with it (:func:`contenders`).

Verdict of a diagnosis:

* ``consistent``: the best mechanism's log LR over the target is >= the threshold and its own
  predicted law of the first J tokens is not rejected by a chi-square goodness of fit at
  ``FIT_ALPHA`` (:func:`verifier.stats.gof_test`, where the J-token law is enumerable);
* ``no known mechanism``: the best mechanism's fit is rejected, or no mechanism reaches the
  threshold while the run's verdict is BIAS DETECTED;
* ``none preferred``: no mechanism reaches the threshold (and no bias was detected).

Hypotheses with the same probability on every observed row are one class (``A = B``: e.g. draft_raw_q at T = 1);
hypotheses the data do not separate are named together (``A or B``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from verifier.diagnose.likelihood import SequenceProbs, log_likelihood, target_log_likelihood, target_per_position
from verifier.diagnose.latent import GROUPED
from verifier.diagnose.family import PREFILL, family_names, hypothesis, parts_of
from verifier.diagnose.mechanisms import MECHANISMS
from verifier.diagnose.robust import mixture_log_likelihood

__all__ = ["DIAGNOSIS_ALPHA", "FIT_ALPHA", "MechanismScore", "Ranking", "rank_mechanisms", "robust_score", "weighted_total",
           "threshold_for",
           "decide", "sentence"]

DIAGNOSIS_ALPHA = 0.01  # bound on naming a mechanism when the decoder samples from the target
FIT_ALPHA = 1e-3  # level of the best mechanism's goodness of fit (rejecting a true mechanism this often)
MAX_DRAFT_AFTER_ROWS = 2_000_000  # draft forward rows a kept-suffix likelihood may need (distinct observed contexts x vocab)
# recovered_one_late reads the target and draft after every latent rejected token (verifier.diagnose.late): token
# positions of those forward rows counted as whole contexts (distinct prefixes x vocab x 2 models x context length; ~100 s
# CPU per 1e7 on the shipped pair run as whole contexts, reports/benchmarks.md section 26; a Hugging Face model now runs
# them from a KV cache, one-token steps: ~30 s CPU per 1e7 counted positions for all 14 late hypotheses, section 29, so
# the count is an upper bound of the work there) and float64 entries of its memoised columns (2 x rows x vocab per
# position); not raised with the cheaper route (the entries, 160 MB, bind as often)
MAX_LATE_POSITIONS = 20_000_000
MAX_LATE_ENTRIES = 20_000_000

CONSISTENT, NO_KNOWN, NONE_PREFERRED = "consistent", "no known mechanism", "none preferred"


@dataclass
class MechanismScore:
    """One mechanism's total log-likelihood and log LR over the target (nats); ``note`` when not computed."""

    name: str
    declared: str
    log_likelihood: float | None
    log_lr: float | None
    note: str = ""
    log_lr_pure: float | None = None  # without contamination (one impossible row: -inf)
    contamination: float | None = None  # fitted share of rows from the target (verifier.diagnose.robust)


@dataclass
class Ranking:
    """Scores of every mechanism for one set of rows (or a sum over sample sets), best first."""

    n: int
    target_log_likelihood: float
    scores: list[MechanismScore]
    per_position: dict[str, list[float]] = field(default_factory=dict)  # mechanism -> log LR per position
    row_ll: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # per distinct row (not serialised)

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
    names = list(mechanisms) if mechanisms is not None else list(family_names())
    w = seqs.row_weights
    ll_t = target_log_likelihood(seqs)
    total_t = float(weighted_total(ll_t, w))
    cond_t = target_per_position(seqs) if per_position else None
    mc = _mc_beside(seqs, num_draft_tokens, names)  # the stale-KV Monte Carlo, beside the other hypotheses
    try:
        return _ranked(seqs, num_draft_tokens, names, per_position, mc, w, ll_t, total_t, cond_t)
    except BaseException:  # failed or interrupted: the child is killed (a thread leaves torch) before this may exit
        if mc is not None:
            mc.cancel()
        raise


def _ranked(seqs, num_draft_tokens, names, per_position, mc, w, ll_t, total_t, cond_t) -> Ranking:
    """The loop of :func:`rank_mechanisms` over the hypotheses (``mc``: the Monte Carlo started beside, or None)."""
    scores, per_pos, row_ll = [], {}, {}
    raw_is_processed = seqs.p_raw is not None and seqs.p_raw is seqs.p and seqs.q_raw is seqs.q
    computed: dict[str, tuple] = {}
    deferred = None  # (index in scores, name, mechanism) of the Monte Carlo's score

    def scored(name: str, m, ll: np.ndarray | None = None, total: float | None = None) -> MechanismScore:
        if ll is None:  # a likelihood per generate call (batch cross-talk): no per-row mixture
            with np.errstate(invalid="ignore"):
                lr = total - total_t
            lr = float(lr) if not math.isnan(lr) else 0.0
            return MechanismScore(name, m.declared, total, lr, log_lr_pure=lr, contamination=0.0)
        row_ll[name] = ll
        return robust_score(name, m.declared, ll, ll_t, w, total_t)
    for name in names:
        m = hypothesis(name)
        if m.latent:
            from verifier.diagnose.latent import feasible

            why = feasible(seqs, num_draft_tokens, name, grouped=True)
            if why is not None and name == "kv_not_rolled_back":  # exact law too large: the Monte Carlo estimate
                from verifier.diagnose.latent_mc import mc_feasible

                why = mc_feasible(seqs, num_draft_tokens)
                if why is None:  # whole rows only: a per-position split would rerun the estimate at every prefix length (~3x)
                    deferred = (len(scores), name, m)  # started by _mc_beside on these same checks: read after the loop
                    scores.append(None)
                    continue
            if why is not None:
                scores.append(MechanismScore(name, m.declared, None, None, why))
                continue
            if name in GROUPED:  # rows of one generate call are dependent: a likelihood per call, no per-position split
                from verifier.diagnose.latent import call_log_likelihood

                scores.append(scored(name, m, total=call_log_likelihood(seqs, num_draft_tokens)))
                continue
        if m.late_recover and (why := _late_note(seqs)):
            scores.append(MechanismScore(name, m.declared, None, None, why))
            continue
        if m.needs_raw and seqs.p_raw is None:
            scores.append(MechanismScore(name, m.declared, None, None, "needs unprocessed probs"))
            continue
        if m.keep_suffix and num_draft_tokens > 1 and (seqs.draft_after is None or (suffix := _suffix_rows(seqs, num_draft_tokens)) > MAX_DRAFT_AFTER_ROWS):
            rows = "no draft oracle" if seqs.draft_after is None else f"{suffix} forward rows > {MAX_DRAFT_AFTER_ROWS}"
            scores.append(MechanismScore(name, m.declared, None, None,
                                         f"not computed: a kept draft suffix needs the draft after every latent rejected token ({rows})"))
            continue
        if name in MECHANISMS and m.needs_raw and raw_is_processed and "canonical" in computed:
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
        scores.append(scored(name, m, ll))
    if deferred is not None:  # the Monte Carlo's result, read last: the other hypotheses ran while it computed
        at, name, m = deferred
        scores[at] = scored(name, m, _mc_result(mc, seqs, num_draft_tokens))
    return Ranking(int(w.sum()), total_t, scores, per_pos, row_ll)


def _mc_beside(seqs: SequenceProbs, k: int, names: list[str]):
    """``kv_not_rolled_back``'s Monte Carlo likelihood (:mod:`verifier.diagnose.latent_mc`; ~40% of a T = 1 diagnosis's
    CPU on the shipped pair) started beside the other hypotheses when the ranking will need it, else None: in a child
    process forked from this one (:func:`verifier._beside.beside_process`; a thread where the platform does not fork),
    since its per-round Python loop holds the GIL too much to run beside the ranking's own in a thread
    (reports/benchmarks.md section 44).  The same call with the same inputs and its own seeded generator: the same
    values as computed in turn (tests/diagnose/test_mc_beside.py).  Started on the checks the ranking's loop makes
    before it reads the result."""
    if "kv_not_rolled_back" not in names:
        return None
    from verifier._beside import beside_process
    from verifier.diagnose.latent import feasible
    from verifier.diagnose.latent_mc import mc_feasible

    if feasible(seqs, k, "kv_not_rolled_back", grouped=True) is None or mc_feasible(seqs, k) is not None:
        return None  # the exact law, or not computed at all
    import threading
    from functools import partial

    from verifier.diagnose.latent_mc import kv_stale_mc_log_likelihood

    stop = threading.Event()  # a thread's (no fork here): set by the ranking when it fails or is interrupted (cancel)
    return beside_process(partial(kv_stale_mc_log_likelihood, stop=stop), seqs, k, name="kv-stale-mc", stop=stop)


def _mc_result(mc, seqs: SequenceProbs, k: int) -> np.ndarray:
    """The Monte Carlo started by :func:`_mc_beside`; computed here, in turn, where its child was lost (killed: out of
    memory, ``kill -9``) -- the same call and seed, so the same values, and no work of the diagnosis lost."""
    from verifier._beside import ChildLost

    try:
        return mc.result()
    except ChildLost:
        from verifier.diagnose.latent_mc import kv_stale_mc_log_likelihood

        return kv_stale_mc_log_likelihood(seqs, k)


def _late_note(seqs: SequenceProbs) -> str:
    """Why a ``recovered_one_late`` likelihood is not computed for ``seqs`` ("" when it is)."""
    if seqs.target_after is None or seqs.draft_after is None:
        return "not computed: a recovered token read one position late needs the models after every latent rejected token (no oracle)"
    from verifier.diagnose.late import late_recover_cost

    cost = late_recover_cost(seqs)
    if cost.positions > MAX_LATE_POSITIONS or cost.entries > MAX_LATE_ENTRIES:
        return (f"not computed: a recovered token read one position late needs the models after every latent rejected "
                f"token ({cost.rows} forward rows of {cost.positions} token positions, {cost.entries} entries > "
                f"{MAX_LATE_POSITIONS}, {MAX_LATE_ENTRIES})")
    return ""


def weighted_total(ll: np.ndarray, w: np.ndarray) -> float:
    """``sum_i w_i ll_i`` over distinct rows; ``-inf`` when a row is impossible (nan rows summed as they are)."""
    return float((ll * w).sum()) if np.isfinite(ll).all() else float(ll.min() if np.isneginf(ll).any() else ll.sum())


def robust_score(name: str, declared: str, ll: np.ndarray, ll_t: np.ndarray, w: np.ndarray,
                 total_t: float) -> MechanismScore:
    """A hypothesis's score from its per-row log-likelihoods ``ll`` (distinct rows, weights ``w``): the contamination
    mixture with the target (:mod:`verifier.diagnose.robust`) and the pure log LR over the target's ``total_t``."""
    with np.errstate(invalid="ignore"):
        pure = float(weighted_total(ll, w)) - total_t
    total, share = mixture_log_likelihood(ll, ll_t, w)
    with np.errstate(invalid="ignore"):
        robust = total - total_t
    return MechanismScore(name, declared, total, 0.0 if math.isnan(robust) else float(robust),
                          log_lr_pure=0.0 if math.isnan(pure) else pure, contamination=share)


def combine(rankings: list[Ranking]) -> Ranking:
    """Sum of rankings over independent sample sets (log-likelihoods add; a product of e-values is an e-value)."""
    by: dict[str, MechanismScore] = {}
    rows: dict[str, list[np.ndarray]] = {}
    for r in rankings:
        for s in r.scores:
            cur = by.get(s.name)
            if s.name in r.row_ll:
                rows.setdefault(s.name, []).append(r.row_ll[s.name])
            if cur is None:
                by[s.name] = MechanismScore(s.name, s.declared, s.log_likelihood, s.log_lr, s.note, s.log_lr_pure,
                                            s.contamination)
            elif cur.log_lr is None or s.log_lr is None:
                cur.log_lr = cur.log_likelihood = cur.log_lr_pure = None
                cur.note = cur.note or s.note
            else:
                cur.log_lr += s.log_lr
                cur.log_likelihood += s.log_likelihood
                cur.log_lr_pure = None if cur.log_lr_pure is None or s.log_lr_pure is None else cur.log_lr_pure + s.log_lr_pure
                cur.contamination = max(cur.contamination or 0.0, s.contamination or 0.0)
    row_ll = {n: np.concatenate(v) for n, v in rows.items() if len(v) == len(rankings)}
    return Ranking(sum(r.n for r in rankings), sum(r.target_log_likelihood for r in rankings), list(by.values()),
                   row_ll=row_ll)


def threshold_for(num_mechanisms: int, alpha: float = DIAGNOSIS_ALPHA) -> float:
    """``log(M / alpha)``: the log LR a mechanism needs before it is named (false-diagnosis rate <= alpha)."""
    return math.log(max(1, num_mechanisms) / alpha)


def separation_for(num_mechanisms: int, alpha: float = DIAGNOSIS_ALPHA) -> float:
    """``log(2 M / alpha)``: how far the named hypothesis must beat every other one (wrong-name rate <= alpha).

    Under a pure hypothesis b, the ratio of two contamination mixtures has mean <= 1 / PRIOR[0] = 2
    (:mod:`verifier.diagnose.robust`), so Markov and Bonferroni over the M hypotheses give the bound.
    """
    return math.log(2 * max(1, num_mechanisms) / alpha)


def _complexity(name: str) -> int:
    """Parts of a hypothesis (simpler ones are considered first by :func:`contenders`)."""
    return len(parts_of(name)[0])


def _contained(name: str) -> set[str]:
    """The simpler hypotheses a pair of defects contains: its parts at its round layout (none for a single one).

    Batch cross-talk is a latent-class model whose classes include other mechanisms' laws ("row 0 accepted
    everything" is accept_all's on the other rows); it contains nothing, so it is never pruned, but it is never named
    alone unless it beats every other hypothesis by the separation: data it explains no better than a simpler law name
    both.
    """
    parts, prefill = parts_of(name)
    return {p + (PREFILL if prefill else "") for p in parts} if len(parts) > 1 else set()


def _same_law_on_rows(ranking: Ranking, a: str, b: str) -> bool:
    """Both hypotheses give every observed (distinct) row the same probability (within 1e-9 nats)."""
    ra, rb = ranking.row_ll.get(a), ranking.row_ll.get(b)
    if ra is None or rb is None or ra.shape != rb.shape:
        return False
    fa, fb = np.isfinite(ra), np.isfinite(rb)
    return bool((fa == fb).all() and np.allclose(ra[fa], rb[fb], rtol=0.0, atol=1e-9))


def contenders(ranking: Ranking, alpha: float = DIAGNOSIS_ALPHA) -> tuple[list[MechanismScore], list[MechanismScore],
                                                                         list[tuple[str, float]]]:
    """The hypotheses the data do not separate from the best, the best one outside them, and the pairs not excluded.

    A hypothesis is a contender when its log LR is within :func:`separation_for` of the best one's, unless it
    contains a simpler contender (:func:`_contained`) that it beats by less than ``log(1 / alpha)`` (a pair of defects
    must earn what it adds; beating it by more, but by less than the separation, names both).  Such a pair that is
    still more likely than every part it contains is returned as "not excluded" with its smallest gain (nats).
    """
    ranked = ranking.ranked()
    if not ranked or not math.isfinite(_key(ranked[0].log_likelihood)):
        return [], [], []
    sep = separation_for(len([s for s in ranking.scores if s.declared != "exact"]), alpha)
    top = ranked[0].log_likelihood  # the same target for all: log-likelihoods order as log LRs (also when the target is refuted)
    near = [s for s in ranked if s.log_likelihood is not None and s.log_likelihood >= top - sep]
    prune = math.log(1 / alpha)  # a pair with less evidence over a part it contains is left out (under the part
    # alone that much happens with probability <= alpha); with more but below the separation both are named
    kept, not_excluded = [], []
    for s in sorted(near, key=lambda s: _complexity(s.name)):  # simpler first
        gains = [s.log_likelihood - o.log_likelihood for o in kept if o.name in _contained(s.name)]
        if any(g < prune for g in gains):
            if all(g > 0 for g in gains):  # more likely, not enough: said, not named
                not_excluded.append((s.name, min(gains)))
            continue
        kept.append(s)
    kept.sort(key=lambda s: -_key(s.log_likelihood))
    names = {s.name for s in near}
    rest = [s for s in ranked if s.name not in names]
    return kept, rest[:1], not_excluded


def decide(ranking: Ranking, *, bias_detected: bool, fit_pvalue: float | None = None,
           alpha: float = DIAGNOSIS_ALPHA) -> dict[str, Any]:
    """The diagnosis of one ranking: status, best class, margins and the sentence.

    Parameters
    ----------
    ranking : Ranking
    bias_detected : bool
        The run's verdict for the decoder was BIAS DETECTED.
    fit_pvalue : float or None
        Goodness-of-fit p-value of the best mechanism's own predictions (None: not tested).
    alpha : float, default DIAGNOSIS_ALPHA

    Returns
    -------
    dict
        ``status`` (consistent / no known mechanism / none preferred), ``best`` (the hypotheses the data do not
        separate, best first: one name when the diagnosis is sharp), ``equivalent`` (those of ``best`` with the
        best one's probability on every observed row: the same law on these data), ``log_lr``, ``contamination``
        (the best one's fitted share of target rows), ``margin`` / ``next`` (the best hypothesis outside ``best``),
        ``separation``, ``threshold``, ``fit_pvalue``, ``sentence``.
    """
    ranked = ranking.ranked()
    named = [s for s in ranking.scores if s.declared != "exact"]
    thr = threshold_for(len(named) or len(ranked), alpha)
    group, rest, not_excluded = contenders(ranking, alpha)
    out: dict[str, Any] = {"threshold": thr, "separation": separation_for(len(named) or len(ranked), alpha),
                           "fit_pvalue": fit_pvalue, "fit_alpha": FIT_ALPHA, "best": [], "equivalent": [], "next": [],
                           "log_lr": None, "margin": None, "contamination": None, "hypotheses": len(named),
                           "not_excluded": [],
                           # hypotheses whose likelihood was too costly here (recovered_one_late on a large vocabulary)
                           "not_computed": [x.name for x in ranking.scores if x.log_likelihood is None
                                            and x.note.startswith("not computed")]}
    if group:
        out["best"] = [s.name for s in group]
        out["equivalent"] = [s.name for s in group[1:] if _same_law_on_rows(ranking, group[0].name, s.name)]
        out["log_lr"] = group[0].log_lr
        out["contamination"] = group[0].contamination
        out["not_excluded"] = [{"name": n, "nats": v} for n, v in not_excluded]
        if rest:
            out["next"] = [rest[0].name]
            with np.errstate(invalid="ignore"):
                out["margin"] = float(np.float64(group[0].log_likelihood) - rest[0].log_likelihood)
    elif ranked:
        out["best"], out["log_lr"] = [ranked[0].name], ranked[0].log_lr
    lr = out["log_lr"]
    if ranking.n == 0:  # no rows: nothing to rank, not evidence of anything
        out.update(best=[], equivalent=[], not_excluded=[], log_lr=None, status=NO_KNOWN if bias_detected else NONE_PREFERRED)
        out["sentence"] = "no rows to diagnose"
        return {k: _f(v) for k, v in out.items()}
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
    if isinstance(x, str):
        x = float(x)
    return "inf" if x == math.inf else ("-inf" if x == -math.inf else f"{x:.1f}")


def class_label(d: dict[str, Any]) -> str:
    """"A", "A = B" (the same law on these data) or "A or B" (the data do not separate them)."""
    best = d.get("best") or []
    if not best:
        return "none"
    same = [best[0]] + [n for n in best[1:] if n in (d.get("equivalent") or [])]
    other = [n for n in best[1:] if n not in same]
    return " or ".join([" = ".join(same)] + other)


def sentence(d: dict[str, Any]) -> str:
    """One line: "consistent with X (log LR 41.3 over the target, 30.2 over the next mechanism Y)"."""
    best = class_label(d)
    lr = d["log_lr"] if not isinstance(d["log_lr"], str) else float(d["log_lr"])
    share = d.get("contamination")
    mixed = f"; {share:.1%} of rows fitted as plain target samples" if isinstance(share, float) and share > 0 else ""
    if d["status"] == "consistent":
        nxt = f", {_num(d['margin'])} over the next hypothesis {' = '.join(d['next'])}" if d["next"] else ""
        text = f"consistent with {best} (log LR {_num(lr)} over the target{nxt}{mixed})"
        if d.get("not_excluded"):
            text += ("; not excluded: " + ", ".join(f"{x['name']} ({_num(x['nats'])} nats more likely)" for x in d["not_excluded"])
                     + f", below the log(1/alpha) = {_num(math.log(1 / DIAGNOSIS_ALPHA))} nats a second defect needs")
        if len(d["best"]) > 1:
            if len(d.get("equivalent") or []) == len(d["best"]) - 1:
                text += ("; these predict the same probability for every observed row, so no amount of these data "
                         "separates them: " + separating_advice(d["best"]))
            else:
                text += (f"; the data do not separate them by the margin a name needs ({_num(d.get('separation'))} "
                         "nats): " + separating_advice(d["best"]))
        return text
    if len(d.get("best") or []) > 1:  # not named: the first of the class stands for it
        best = f"{d['best'][0]} (and {len(d['best']) - 1} hypotheses the data do not separate from it)"
    if d["status"] == "no known mechanism":
        if d["fit_pvalue"] is not None and lr is not None and lr >= d["threshold"]:
            why = (f"the best, {best} (log LR {_num(lr)} over the target), has its own predicted law rejected "
                   f"(goodness of fit p = {d['fit_pvalue']:.2g} < {FIT_ALPHA:g})")
        else:
            why = f"the best, {best}, has log LR {_num(lr)} over the target, below the threshold {d['threshold']:.1f}"
        return f"matches no known mechanism ({why}){_not_computed(d)}"
    return (f"no mechanism preferred over the target (best: {best}, log LR {_num(lr)} < threshold "
            f"{d['threshold']:.1f}){_not_computed(d)}")


def _not_computed(d: dict[str, Any]) -> str:
    """"; not computed on these rows: X (its note in the ranking says why)" -- a hypothesis left out is not excluded."""
    names = d.get("not_computed") or []
    return (f"; not computed on these rows, so not excluded: {', '.join(names)} (the ranking's note says why)"
            if names else "")


def separating_advice(names: list[str]) -> str:
    """What would tell the hypotheses apart: where each one's defect is visible (the zoo's ``visible_when``)."""
    from verifier.decoders.field_mutants import FIELD_DECODER_REGISTRY
    from verifier.decoders.mutants import DECODER_REGISTRY

    registry = {**DECODER_REGISTRY, **FIELD_DECODER_REGISTRY}
    parts = {n: parts_of(n) for n in names}
    layouts = {prefill for _, prefill in parts.values()}
    hints = []
    if "batch_cross_talk" in names:
        hints.append("batch_cross_talk leaves row 0 of every generate call unbiased, so more and smaller generate calls "
                     "(a smaller chunk_size) separate it")
    if len(layouts) > 1:
        hints.append(f"the first emitted token separates the {PREFILL} layout (a plain target sample there)")
    seen = set()
    for n in names:
        for part in parts[n][0]:
            if part in seen or part == "batch_cross_talk":
                continue
            seen.add(part)
            if part not in MECHANISMS:  # an engine's own law (verifier.diagnose.engine_laws)
                hints.append(f"{part} is a law of the first tokens only: a control run with the engine's defect patched "
                             "separates it")
                continue
            spec = next((registry[a] for a in MECHANISMS[part].aliases if a in registry), None)
            if spec is not None:
                hints.append(f"{part} shows {spec.visible_when}")
    return "; ".join(hints) + "." if hints else "run other prompts or sampling settings."
