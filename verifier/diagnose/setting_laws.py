"""The request's own sampling setting ignored: laws ranked beside the mechanism family (issue 26).

A field bug as common as a wrong speculative rule is a request setting the engine never applies: a server that drops
``min_p`` from the request, a speculative path that ignores the penalties, or a sampler that keeps top-k but not the
temperature.  The emitted tokens then follow the target at the request *without* that processor -- for the whole row,
draft positions and bonus alike.  The family's ``target_unprocessed`` is the case where every processor is dropped; with
two or more processors in the request (penalties and min-p, temperature and top-k) it is another law, and naming it
would send the engineer to the wrong field (the llama-cpp-python negative control with only min-p dropped was named
``target_unprocessed``).

Hypotheses (:data:`SETTINGS`), one per processor group present in some sample set of the decoder: the target at the
set's request with that group removed (``temperature`` -> 1, ``top_k_top_p`` -> none, ``penalties`` -> none, ``min_p`` ->
none); in a set without that processor the law is the target's.  A group whose removal leaves the unprocessed target
in every set is not added (``target_unprocessed`` is that law).  Each row's likelihood is that of plain samples at the
reduced setting, teacher-forced from the unprocessed target probs (:class:`verifier.diagnose.fit._Scorer`), scored as
the family is: the contamination mixture with the target (:func:`verifier.diagnose.rank.robust_score`).

Decision, with M = the family's hypotheses plus these (the thresholds of :mod:`verifier.diagnose.rank`):

* a setting law is **named** when its log LR over the target reaches ``log(M / alpha)``, it beats the family's most
  likely hypothesis and every other setting law by ``log(2 M / alpha)`` (the wrong-name bound), and its own law fits
  (randomized PIT of every emitted token under its sequential law, Kolmogorov-Smirnov, and Pearson chi-square of the
  first token; Bonferroni over the parts and sets; p >= FIT_ALPHA).  A family name it beats is withdrawn;
* a family mechanism named by the ranking stays named only if no setting law comes within that separation of it;
  otherwise the report names the class ("X or min_p_ignored") and what separates them (a run with the setting
  removed from the request, or more rows);
* otherwise nothing changes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verifier.diagnose.glossary import SETTING_FIELDS as FIELDS  # the glossary owns the sentences
from verifier.diagnose.glossary import SETTINGS, setting_entry
from verifier.diagnose.setting_drop import candidates, without
from verifier.diagnose.rank import (DIAGNOSIS_ALPHA, FIT_ALPHA, Ranking, robust_score, separation_for, threshold_for,
                                    weighted_total)

__all__ = ["SETTINGS", "without", "candidates", "setting_law_finding", "setting_entry", "entry", "setting_law_of_set",
           "setting_law_of_decoder", "setting_law_without_draft"]

MAX_ENTRIES = 40_000_000  # rows x tokens x vocab float64 of one set's processed probs (320 MB); above: not computed


def _set_scores(s: dict, names: list[str]) -> dict[str, np.ndarray] | None:
    """Per distinct row of one set: its log-likelihood under the target (key ``"target"``) and each setting law (None:
    not computable here).  Keeps the set's scorer in ``s["scorer"]`` for the fit check."""
    from verifier.diagnose.fit import _Scorer
    from verifier.diagnose.likelihood import target_log_likelihood

    seqs = s["seqs"]
    if seqs.p_raw is None or seqs.p_raw.size > MAX_ENTRIES:
        return None
    # kept on the set's SequenceProbs: a decoder's ranking scores the same set again (a one-set decoder twice)
    memo = seqs.__dict__.setdefault("_setting_law_memo", {})
    if "scorer" not in memo:
        memo["scorer"], memo["target"] = _Scorer(seqs), target_log_likelihood(seqs)
    s["scorer"] = memo["scorer"]
    out = {"target": memo["target"]}
    for name in names:
        if name not in memo:
            reduced = without(s["sampling"], name)
            memo[name] = memo["target"] if reduced is None else memo["scorer"].rows(reduced)
        out[name] = memo[name]
    return out


def _fit_pvalue(name: str, sets: list[dict], seed: int = 0) -> tuple[float | None, list[str]]:
    """Setting law ``name``'s own fit over the sets (each scored by :func:`_set_scores`): PIT-KS of every emitted token and
    chi-square of token 1."""
    from verifier.diagnose.rows import sequence_ends
    from verifier.errors import InvalidArgumentError
    from verifier.stats.gof import gof_pvalues
    from verifier.stats.pit import pit_ks_test, randomized_pit

    rng = np.random.default_rng(seed)
    ps, parts = [], []
    for s in sets:
        reduced = without(s["sampling"], name) or s["sampling"]
        seqs, inverse, tokens = s["seqs"], s["inverse"], s["tokens"]
        probs = s["scorer"].probs(reduced)[inverse]  # every observed row
        live = np.arange(tokens.shape[1])[None] < sequence_ends(tokens, seqs.eos_token_id)[:, None]
        u, bad = randomized_pit(tokens[live], probs[live], rng)
        try:
            p_pit = 0.0 if bad else float(pit_ks_test(u, alpha=FIT_ALPHA).pvalue)
        except InvalidArgumentError:
            p_pit = None
        first = tokens[:, 0]
        law = probs[0, 0]
        counts = np.bincount(first[first >= 0], minlength=len(law))
        p_law = 0.0 if (counts[law <= 0] > 0).any() else float(
            gof_pvalues(counts[None], law / law.sum(), pvalue_method="asymptotic", alpha=FIT_ALPHA)[0])
        for label, p in (("PIT", p_pit), ("token 1", p_law)):
            if p is not None:
                ps.append(p)
                parts.append(f"{s['label']} {label} p = {p:.2g}")
    return (min(1.0, min(ps) * len(ps)) if ps else None), parts


def entry(name: str) -> dict[str, str]:
    """The report.json ``mechanism`` entry of any name a setting-law class can hold: a setting law, a penalty
    mechanism (:data:`verifier.diagnose.penalty.PENALTY_GLOSSARY`) or a family hypothesis."""
    from verifier.diagnose.glossary import mechanism_entries
    from verifier.diagnose.penalty import PENALTY_GLOSSARY, WHERE_TO_LOOK

    if name in SETTINGS:
        return setting_entry(name)
    if name in PENALTY_GLOSSARY:
        return {"name": name, "plain": PENALTY_GLOSSARY[name], "reproduce": f'decoder = "{name}" in a suite',
                "pointer": WHERE_TO_LOOK}
    return mechanism_entries([name])[0]


def _rival_check(best: str, rivals) -> list[str]:
    """The hypotheses an exact penalty finding (:func:`verifier.diagnose.penalty.penalty_set_finding`, which ranks the
    penalty mechanisms the family lacks beside these laws) does not separate from ``best``: empty when every finding
    puts ``best`` first by its threshold."""
    out = []
    for f in rivals or ():
        if not f or "best" not in f:
            continue
        if f["best"] != best:
            out.append(f["best"])
        elif f["margin"] < f["threshold"]:
            out.append(f["runner_up"])
    return list(dict.fromkeys(out))


def setting_law_finding(sets: list[dict], total: Ranking, decision: dict[str, Any], *,
                        alpha: float = DIAGNOSIS_ALPHA, rivals=None) -> dict[str, Any] | None:
    """Rank the request-setting-ignored laws beside the family's decision of one decoder.

    Parameters
    ----------
    sets : list of dict
        One per diagnosed sample set of the decoder, in the order its ranking was combined into ``total``:
        ``seqs`` (distinct-row SequenceProbs with ``p_raw``), ``inverse`` (observed row -> distinct row), ``tokens``
        (num_samples, max_new_tokens), ``sampling``, ``label``.
    total : Ranking
        The family's combined ranking (:func:`verifier.diagnose.rank.combine`).
    decision : dict
        The family's decision on ``total`` (:func:`verifier.diagnose.rank.decide`).
    alpha : float, default DIAGNOSIS_ALPHA
    rivals : list of dict, optional
        The exact penalty findings of these sets (tabular pairs with a penalty or min-p on): a setting law they do not
        put first by their threshold is reported in a class with the one they prefer, never named alone.

    Returns
    -------
    dict or None
        None when no setting law applies (no set with two processor groups) or none could be scored; else
        ``{"named": name or None, "class": [names the data do not separate], "withdrawn": family name or None,
        "scores": {name: log LR over the target}, "threshold", "separation", "fit_pvalue", "fit_parts", "sentence"}``.
    """
    names = candidates([s["sampling"] for s in sets])
    if not names or not sets:
        return None
    per_set = [_set_scores(s, names) for s in sets]
    if any(p is None for p in per_set):
        return {"named": None, "class": [], "withdrawn": None, "scores": {}, "sentence":
                f"not ranked: the request-setting laws ({', '.join(names)}) need the unprocessed target probs of every "
                "set within the memory budget"}
    w = np.concatenate([s["seqs"].row_weights for s in sets])
    ll_t = np.concatenate([p["target"] for p in per_set])
    total_t = weighted_total(ll_t, w)
    scores = {n: robust_score(n, "biased", np.concatenate([p[n] for p in per_set]), ll_t, w, total_t) for n in names}
    family = [s for s in total.scores if s.declared != "exact"]
    m = len(family) + len(names)
    thr, sep = threshold_for(m, alpha), separation_for(m, alpha)
    ranked_family = total.ranked()
    top_family = ranked_family[0] if ranked_family else None
    fam_ll = top_family.log_likelihood if top_family is not None and top_family.log_likelihood is not None else -math.inf
    best = max(names, key=lambda n: scores[n].log_likelihood)
    b = scores[best]
    others = [scores[n].log_likelihood for n in names if n != best] + [fam_ll]
    out: dict[str, Any] = {"named": None, "class": [], "withdrawn": None, "threshold": thr, "separation": sep,
                           "scores": {n: scores[n].log_lr for n in names}, "fit_pvalue": None, "fit_parts": []}
    family_named = decision.get("status") == "consistent" and decision.get("best")
    lead = b.log_likelihood - max(others) if math.isfinite(b.log_likelihood) else -math.inf
    if b.log_lr is not None and b.log_lr >= thr and lead >= sep:
        p, parts = _fit_pvalue(best, sets)
        out["fit_pvalue"], out["fit_parts"] = p, parts
        margin = f"log LR {b.log_lr:.1f} over the target, {lead:.1f} over the next hypothesis"
        near = _rival_check(best, rivals)
        if (p is None or p >= FIT_ALPHA) and near:  # a penalty mechanism the family lacks explains the rows as well
            out["class"], out["lead"] = [best] + near, True
            out["withdrawn"] = decision["best"][0] if family_named else None
            out["sentence"] = (f"consistent with {best} or {' or '.join(near)} ({margin}; the exact penalty laws do not "
                               f"separate them: more rows, or a run with {FIELDS[best]} removed from the request, do)")
        elif p is None or p >= FIT_ALPHA:
            out["named"] = best
            out["withdrawn"] = decision["best"][0] if family_named else None
            fit = f"its own law fits, p = {p:.2g}" if p is not None else "its own fit not testable"
            out["sentence"] = f"consistent with {best}: {SETTINGS[best]} ({margin}; {fit})"
            if out["withdrawn"]:
                out["sentence"] += f"; the mechanism family's {out['withdrawn']} explains the rows {lead:.1f} nats worse"
        else:
            out["sentence"] = (f"the best request-setting law, {best} ({margin}), has its own law rejected "
                               f"(p = {p:.2g} < {FIT_ALPHA:g})")
            if family_named and lead >= sep:  # the family's name is beaten by a law that does not fit either
                out["withdrawn"] = decision["best"][0]
                out["sentence"] += f"; the family's {out['withdrawn']} explains the rows {lead:.1f} nats worse, so it is not named"
        return out
    if family_named:
        near = [n for n in names if math.isfinite(scores[n].log_likelihood) and scores[n].log_likelihood >= fam_ll - sep]
        if near:
            out["class"] = list(decision["best"]) + near
            gap = ", ".join(f"{n} {scores[n].log_likelihood - fam_ll:+.1f} nats" for n in near)
            out["sentence"] = (f"not separated from the request-setting law(s) {gap} (separation {sep:.1f} nats): "
                               f"a run with {' and '.join(FIELDS[n] for n in near)} removed from the request, or more "
                               "rows, separates them")
            return out
    out["sentence"] = (f"no request-setting law explains the rows better (best {best}, log LR "
                       f"{(b.log_lr if b.log_lr is not None else -math.inf):.1f} over the target, {lead:.1f} over the next)")
    return out


def _apply(target: dict, found: dict, *, mechanism: bool, note: str = "") -> None:
    """Write a finding onto a decision or a decoder item (``target``): a setting law named (or leading a class) replaces
    status and sentence; a class beside the family's name is appended; a withdrawn family name leaves no mechanism.
    ``mechanism``: also set / drop the item's ``mechanism`` entries and ``engine_source`` (a decoder item)."""
    lead = [found["named"]] if found["named"] else (found["class"] if found.get("lead") else [])
    if lead:
        target["status"], target["sentence"] = "consistent", found["sentence"] + note
    elif found["class"]:
        target["sentence"] += f"; {found['sentence']}"
    elif found["withdrawn"]:
        target["status"], target["sentence"] = "no known mechanism", f"matches no known mechanism ({found['sentence']})"
    if not mechanism:
        return
    if lead or found["class"]:
        target["mechanism"] = [entry(n) for n in (lead or found["class"])]
    elif found["withdrawn"]:
        target.pop("mechanism", None)
    if lead or found["withdrawn"]:
        target.pop("engine_source", None)


def _sets(plans, entries: dict) -> list[dict]:
    """The finding's sets from ``entries`` (set id -> ``((seqs, inverse), tokens, ...)``: run_dir's cache, or the
    boundary finding's target-only sets)."""
    return [{"seqs": entries[p.set_id][0][0], "inverse": entries[p.set_id][0][1], "tokens": entries[p.set_id][1],
             "sampling": p.sampling, "label": p.label} for p in plans]


def setting_law_of_set(res: dict, ranking: Ranking, seqs_set, tokens, plan, alpha: float, pen: dict | None = None) -> None:
    """The request-setting laws on one sample set's rows: its decision line is corrected as the decoder's is
    (``pen``: the decoder's penalty finding, whose entry for this set is the exact rival)."""
    if "decision" not in res:
        return
    rivals = [f for f in (pen or {}).get("sets", []) if f.get("set_id") == plan.set_id]
    found = setting_law_finding(_sets([plan], {plan.set_id: (seqs_set, tokens)}), ranking, res["decision"], alpha=alpha,
                                rivals=rivals)
    if found is not None:
        res["setting_law"] = found
        _apply(res["decision"], found, mechanism=False)


def setting_law_of_decoder(item: dict, plans, cache, total: Ranking, alpha: float, pen: dict | None = None) -> None:
    """Rank the request-setting-ignored laws beside the family's decision (:mod:`verifier.diagnose.setting_laws`):
    a setting law named there replaces a family name it beats; one the data do not separate from the family's name
    makes the name a class."""
    found = setting_law_finding(_sets(plans, cache), total, item["decision"], alpha=alpha, rivals=(pen or {}).get("sets"))
    if found is not None:
        item["setting_law"] = found
        _apply(item, found, mechanism=True)


def setting_law_without_draft(item: dict, plans, target_only: dict, alpha: float) -> None:
    """The setting laws on sample sets whose draft is unknown (a URL audit: the server drafts with its own model): they
    need the target alone, so a setting the server ignores is still named, against the target and each other (no
    family to rank).  ``target_only``: set id -> ``((seqs, inverse), tokens, None)`` of
    :func:`verifier.diagnose.boundary.target_only_entry` (sets with a top-k / top-p / min-p filter)."""
    from verifier.diagnose.likelihood import target_log_likelihood

    sets = _sets(plans, target_only)
    if not sets:
        return
    ll = sum(weighted_total(target_log_likelihood(s["seqs"]), s["seqs"].row_weights) for s in sets)
    total = Ranking(int(sum(s["seqs"].row_weights.sum() for s in sets)), ll, [])
    found = setting_law_finding(sets, total, {"status": item.get("status"), "best": []}, alpha=alpha)
    if found is None:
        return
    item["setting_law"] = found
    if found["named"]:  # no family and no rival: a name or nothing
        _apply(item, found, mechanism=True, note=" (the draft is unknown: only laws that need no draft were ranked)")
