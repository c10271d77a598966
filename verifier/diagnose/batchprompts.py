"""Which prompt the audited rows of a rejecting mixed-prompts level continue (issue 29, bug kind 1).

At a mixed-prompts level (``batch_composition.mixed_prompt_lengths``, :mod:`verifier.suite.batch`) every call's even
slots continue filler prompts of other lengths and its odd slots -- the audited rows -- the set's prompt ``P``.  A
padding defect makes the audited rows continue *another* context: slot 0's prompt length (``P`` cut to it, or
right-padded with the pad id read as prompt: :func:`verifier.exact.leaked_prompt`, the zoo's ``prompt_length_leak``),
or slot 0's prompt itself (a row that reads another row's KV slot).  The per-row mechanisms of the diagnosis rank
laws of the set's own prompt, so none of them explains such rows; this check asks the reference instead.

For each candidate context ``c`` the log-likelihood ratio of the audited rows (every emitted token, the processed
target law given ``c`` and the row's earlier tokens: :func:`verifier.runner.logprob.reference_logprobs`) against
``P`` is summed over the rejecting sets.  Under "the rows continue ``P``" each ratio has expectation 1, so by Markov's
inequality and a union bound over the ``K`` candidates, ``max_c LR_c >= K / alpha`` happens with probability at most
``alpha`` (:data:`CONTEXT_ALPHA`): a candidate past that bound is named.  It is a comparison of simple hypotheses,
not a fit: the named context explains the rows better than ``P`` does, by that margin.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["CONTEXT_ALPHA", "CANDIDATES", "prompt_context_finding"]

CONTEXT_ALPHA = 1e-3  # the check's false-naming rate when the rows do continue their own prompt
CANDIDATES = ("slot 0's prompt length", "slot 0's prompt")


def _candidates(prompt: tuple[int, ...], filler: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    from verifier.exact import leaked_prompt

    out = {CANDIDATES[0]: leaked_prompt(prompt, len(filler)), CANDIDATES[1]: tuple(filler)}
    return {k: v for k, v in out.items() if v != tuple(prompt)}


def _loglik(reference: Any, prompt, tokens: np.ndarray, sampling) -> float:
    from verifier.runner.logprob import reference_logprobs

    lp = reference_logprobs(reference, tuple(prompt), tokens, sampling)
    return float(np.nansum(lp)) if np.isfinite(lp[~np.isnan(lp)]).all() else -math.inf


def prompt_context_finding(plans: Iterable[Any], pairs: dict, rejected_levels: list[str],
                           tokens_of: Callable[[Any], np.ndarray], alpha: float = CONTEXT_ALPHA) -> dict[str, Any] | None:
    """The context the audited rows of the rejecting mixed-prompts sets continue, when one beats their own prompt.

    Parameters
    ----------
    plans : iterable of SampleSetPlan
        The decoder's sample sets; those at a mixed-prompts level named in ``rejected_levels`` are read.
    pairs : dict
        ``model pair name -> LoadedPair`` (its ``reference`` scores the rows).
    rejected_levels : list of str
        :func:`verifier.diagnose.batchlevel.batch_finding`'s ``rejected_levels`` (``"4 mixed prompts"``).
    tokens_of : callable
        ``tokens_of(plan) -> (rows, max_new_tokens) int64``: the set's stored audited rows.
    alpha : float, default :data:`CONTEXT_ALPHA`

    Returns
    -------
    dict or None
        None without a rejecting mixed-prompts set or rows.  Else ``{"named": candidate or None, "log_lr":
        {candidate: summed log LR against the own prompt}, "threshold": log(K / alpha), "contexts": [{"set_id",
        "prompt", candidate: ids, ...}], "rows", "sentence"}``.
    """
    sets = [p for p in plans if getattr(p, "filler_prompts", ()) and p.level_name in rejected_levels]
    log_lr = {c: 0.0 for c in CANDIDATES}
    seen = {c: False for c in CANDIDATES}
    contexts, rows = [], 0
    for plan in sets:
        tokens = tokens_of(plan)
        if not len(tokens):
            continue
        ref = pairs[plan.pair].reference
        own = _loglik(ref, plan.prompt_ids, tokens, plan.sampling)
        cands = _candidates(tuple(plan.prompt_ids), tuple(plan.filler_prompts[0]))
        for c, ids in cands.items():
            alt = _loglik(ref, ids, tokens, plan.sampling)
            # a row impossible under the own prompt settles it; one impossible under both says nothing
            log_lr[c] += (alt - own if own > -math.inf else (math.inf if alt > -math.inf else 0.0))
            seen[c] = True
        contexts.append({"set_id": plan.set_id, "prompt": list(plan.prompt_ids),
                         **{c: list(ids) for c, ids in cands.items()}})
        rows += len(tokens)
    used = [c for c in CANDIDATES if seen[c]]
    if not used:
        return None
    log_lr = {c: log_lr[c] for c in used}
    threshold = math.log(len(used) / alpha)
    best = max(used, key=lambda c: log_lr[c])
    named = best if log_lr[best] >= threshold else None
    first = contexts[0]
    if named:
        ties = [c for c in used if c != named and log_lr[c] >= log_lr[named] - 1e-9]
        same = f" (here the same law as {', '.join(ties)})" if ties else ""
        sentence = (f"the audited rows continue {named} ({first[named]} for prompt {first['prompt']}){same} rather than "
                    f"their own prompt: log LR {log_lr[named]:.1f} >= log(K / alpha) = {threshold:.1f} over {rows} rows "
                    "(a per-row mechanism that follows is ranked at the own prompt and does not apply)")
    else:
        sentence = (f"no candidate context beats the own prompt (best: {best}, log LR {log_lr[best]:.1f} < "
                    f"{threshold:.1f} over {rows} rows)")
    return {"named": named, "log_lr": log_lr, "threshold": threshold, "alpha": alpha, "contexts": contexts,
            "rows": rows, "sentence": sentence}
