"""The penalty finding: which penalty / min-p mechanism explains a biased decoder's rows (issue 29, bug kind 3).

With a repetition, presence or frequency penalty the target's processed law moves with every emitted token, and with
min-p a row loses its small tokens; the zoo's three defects (:mod:`verifier.decoders.penalty_mutants`) verify draft
positions with stale counts, without the penalties, or without min-p.  Their laws depend on a token's position inside
its round (stale counts) or on a processed view the per-row mechanisms of :data:`verifier.diagnose.mechanisms.MECHANISMS`
do not carry (the target without penalties / without min-p), so the likelihood ranking cannot name them; the exact
enumerator can, on tabular pairs (:func:`verifier.exact.penalties.penalty_n_token_law`).

:func:`penalty_set_finding` scores a sample set's rows (their first ``N = min(width, k + 2)`` tokens) under the exact
laws of the canonical rule and of each mechanism of :data:`PENALTY_GLOSSARY`; a mechanism is named when its
log-likelihood ratio over every other hypothesis (the canonical rule included) reaches ``log(3 / DIAGNOSIS_ALPHA)`` (the
ranking's threshold: with the rows drawn from the target a wrong name has probability <= DIAGNOSIS_ALPHA) and its own
law fits the rows (Pearson chi-square, p >= FIT_ALPHA).  :func:`penalty_finding` runs it over a decoder's sample sets; a named mechanism is the
decoder's diagnosis (:func:`verifier.diagnose.run_dir.diagnose_decoders`).  Not a full family hypothesis: pairs of
defects and the prefill variant are not ranked, and models other than tabular tables get a note naming what to check.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Iterable

import numpy as np

from verifier.diagnose.rank import DIAGNOSIS_ALPHA, FIT_ALPHA
from verifier.diagnose.glossary import SETTINGS
from verifier.diagnose.setting_drop import candidates, without

__all__ = ["PENALTY_GLOSSARY", "PENALTY_STATUS", "penalty_set_finding", "penalty_finding"]

PENALTY_STATUS = "penalty mechanism"  # the diagnosis status when a penalty mechanism is named
PENALTY_GLOSSARY: dict[str, str] = {
    "penalty_once_per_round": "the penalty counts are updated once per round: every target position of a round is "
                              "processed with the tokens emitted before the round, so a draft token is verified as if "
                              "the round's earlier drafts had not been generated.",
    "penalty_ignored_in_verification": "the target probabilities of the draft positions (acceptance test and residual) "
                                       "are computed without the repetition, presence and frequency penalties; only "
                                       "the bonus token is penalised (vLLM issue #18902).",
    "min_p_skipped_on_verified": "min-p is applied when the bonus token is sampled but not to the target probabilities "
                                 "the acceptance test and residual use, so tokens min-p removes are emitted (vLLM issue "
                                 "#42744).",
}
WHERE_TO_LOOK = ("look where the rejection sampler builds the target probabilities of the draft positions: the same "
                 "penalties (with counts that include the round's earlier drafts) and min-p the regular sampler applies")
MAX_ENUMERATION = 300_000  # vocab ** (N + k) paths: about 10 s of Fraction arithmetic


def _applies(sampling) -> bool:
    return bool(sampling.uses_context or sampling.min_p)


def penalty_set_finding(target, draft, prompt: tuple[int, ...], sampling, num_draft_tokens: int,
                        tokens: np.ndarray, *, alpha: float = DIAGNOSIS_ALPHA) -> dict[str, Any] | None:
    """Which penalty mechanism explains one sample set's rows, from exact laws; None when no processor is on.

    Parameters
    ----------
    target, draft : TabularLM or any model
        The pair's raw models (``LoadedPair.target_model`` / ``draft_model``); other than tabular: a note only.
    prompt : tuple of int
    sampling : SamplingConfig
    num_draft_tokens : int
        k.
    tokens : np.ndarray, shape (rows, width), int64, -1 after EOS
    alpha : float, default DIAGNOSIS_ALPHA

    Returns
    -------
    dict or None
        ``{"named": name or None, "log_lr": {name: nats over canonical}, "margin": nats over the runner-up,
        "runner_up", "fit_pvalue", "num_tokens", "sentence"}``.
    """
    from verifier.exact.penalties import PENALTY_RULES, penalty_n_token_law
    from verifier.exact.tabular import TabularLM
    from verifier.stats import gof_test

    if not _applies(sampling):
        return None
    rows, width = tokens.shape
    if not (isinstance(target, TabularLM) and isinstance(draft, TabularLM)) or not rows:
        return {"named": None, "log_lr": {}, "fit_pvalue": None, "num_tokens": 0,
                "sentence": f"penalties / min-p are on ({sampling.label()}) and the exact penalty laws need tabular "
                            f"models; mechanisms to check: {', '.join(PENALTY_GLOSSARY)} -- {WHERE_TO_LOOK}"}
    k = num_draft_tokens
    n_tok = min(width, k + 2)
    while n_tok > 1 and target.vocab_size ** (n_tok + k) > MAX_ENUMERATION:
        n_tok -= 1
    counts = Counter(map(tuple, tokens[:, :n_tok].tolist()))
    laws = {r: penalty_n_token_law(target, draft, prompt, sampling, k, n_tok, rule=r) for r in PENALTY_RULES}
    for name in candidates([sampling]):  # the request's own setting ignored on the whole row: plain target samples there
        laws[name] = penalty_n_token_law(target, draft, prompt, without(sampling, name), k, n_tok, rule="canonical")
    ll = {r: sum(c * (math.log(law[key]) if law.get(key, 0) > 0 else -math.inf) for key, c in counts.items())
          for r, law in laws.items()}
    base = ll["canonical"]
    lr = {r: (v - base if math.isfinite(base) else (math.inf if math.isfinite(v) else 0.0)) for r, v in ll.items() if r != "canonical"}
    best = max(ll, key=lambda r: (ll[r], r != "canonical"))  # a tie goes to a mechanism, which the margin then refuses
    runner_up = max((r for r in ll if r != best), key=lambda r: ll[r])
    margin = ll[best] - ll[runner_up] if math.isfinite(ll[runner_up]) else (math.inf if math.isfinite(ll[best]) else 0.0)
    threshold = math.log(len(lr) / alpha)
    fit_p = None
    if math.isfinite(ll[best]):
        keys = sorted(laws[best], key=lambda key: -laws[best][key])
        fit_p = float(gof_test(np.array([counts.get(key, 0) for key in keys]),
                               np.array([float(laws[best][key]) for key in keys]), alpha=FIT_ALPHA).pvalue)
    named = (best if best != "canonical" and best not in SETTINGS and margin >= threshold and fit_p is not None
             and fit_p >= FIT_ALPHA else None)
    if best in SETTINGS:  # not a defect of the speculative path: the request-setting ranking names it (setting_laws)
        sentence = (f"no penalty / min-p mechanism of the speculative path explains the rows: they follow {best} best "
                    f"(log LR {margin:.1f} over the next hypothesis, {runner_up}, on the first {n_tok} tokens)")
    elif named:
        sentence = (f"consistent with {named}: {PENALTY_GLOSSARY[named].rstrip('.')} (log LR {margin:.1f} over the "
                    f"next hypothesis, {runner_up}, on the first {n_tok} tokens, threshold {threshold:.1f}; its exact law "
                    f"fits, p = {fit_p:.2g}) -- {WHERE_TO_LOOK}")
    else:
        if best == "canonical":
            why = f"the canonical rule explains them best, by log LR {margin:.1f} over {runner_up}"
        elif margin < threshold:
            why = f"best {best}, log LR {margin:.1f} over {runner_up} < {threshold:.1f}"
        else:
            why = f"best {best}, its exact law rejected (p = {fit_p:.2g} < {FIT_ALPHA:g})"
        sentence = f"no penalty / min-p mechanism explains the rows ({why})"
    return {"named": named, "best": best, "threshold": threshold, "log_lr": lr, "margin": margin, "runner_up": runner_up,
            "fit_pvalue": fit_p, "num_tokens": n_tok, "sentence": sentence}


def penalty_finding(name: str, plans: Iterable, pairs: dict, tokens_of: Callable[[Any], np.ndarray]) -> dict[str, Any] | None:
    """The penalty finding of decoder ``name`` over its sample sets with a penalty or min-p on; None when none has one.

    ``tokens_of(plan)`` returns the set's rows.  A mechanism is named for the decoder when every set with an
    applicable finding names the same one.  Returns ``{"named", "sets": [set findings], "sentence"}``.
    """
    found = []
    for plan in plans:
        if plan.decoder.name != name or plan.sampling.greedy or not _applies(plan.sampling):
            continue
        pair = pairs[plan.pair]
        f = penalty_set_finding(pair.target_model, pair.draft_model, tuple(plan.prompt_ids), plan.sampling,
                                plan.num_draft_tokens, tokens_of(plan))
        if f is not None:
            found.append({"set_id": plan.set_id, **f})
    if not found:
        return None
    names = {f["named"] for f in found}
    named = names.pop() if len(names) == 1 else None
    sentence = next(f["sentence"] for f in found) if named or len(found) == 1 else \
        "penalty / min-p sets disagree: " + " | ".join(f["sentence"] for f in found[:3])
    return {"named": named, "sets": found, "sentence": sentence}
