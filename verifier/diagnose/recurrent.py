"""The recurrent-state diagnosis: which state policy explains a recurrent target's biased rows (issue 29, kind 8).

A state-space or hybrid target (Mamba, Mamba2, gated delta nets) carries a state that the verify pass advances over
every draft token.  Two engine defects leave it wrong after a rejection (:mod:`verifier.decoders.recurrent_mutants`):
the state is not rolled back at all (it keeps the rejected drafts), or it is restored from a checkpoint that only
rounds with drafts commit (stale after a draftless round).  Like ``kv_not_rolled_back``
(:mod:`verifier.diagnose.latent`) both are *latent* mechanisms: the rejected drafts are not in the output, so the law
of a row sums over them -- :func:`verifier.exact.recurrent.recurrent_law` enumerates it exactly on a tabular
:class:`~verifier.exact.recurrent.RecurrentLM`.

:func:`recurrent_state_finding` scores the rows' log-likelihood under the target's law and under each policy's law
and names the policy that leads, when it beats the target by ``log(1 / alpha)`` (a likelihood-ratio e-value
threshold: under the target the ratio exceeds ``1 / alpha`` with probability at most alpha) *and* fits the rows (the
joint cell at alpha does not reject it).  A bias that no policy fits is reported as not a recurrent-state bias --
never a wrong name.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from verifier.errors import invalid_argument
from verifier.exact.recurrent import RecurrentLM, recurrent_law, recurrent_target_law
from verifier.stats.cells import joint_test

__all__ = ["RECURRENT_MECHANISMS", "RECURRENT_STATUS", "is_recurrent_target", "recurrent_run_finding",
           "recurrent_state_finding"]

RECURRENT_MECHANISMS = {  # decoder name -> (recurrent_law policy, finding, where to look)
    "state_not_rolled_back": ("not_rolled_back", "recurrent state not rolled back after a rejection",
                              "look where the engine rolls back after verification: the KV cache / token position is "
                              "restored, but the SSM (conv and recurrent) state must be restored too -- keep the "
                              "per-position states of the verify pass or re-run the accepted tokens from a checkpoint "
                              "(transformers' DynamicCache.crop does not restore a recurrent state)"),
    "state_checkpoint_stale": ("stale_checkpoint", "stale recurrent-state checkpoint after a draftless round",
                               "look at the state checkpoint used by the rollback: a step without draft tokens must "
                               "commit (or refresh) it as well; the bias shows only when a step with drafts follows "
                               "one with none"),
}


def _loglik(rows: np.ndarray, law: dict) -> float:
    total = 0.0
    for row in map(tuple, rows.tolist()):
        p = law.get(row, 0)
        if not p:
            return -math.inf
        total += math.log(p)
    return total


def recurrent_state_finding(target: RecurrentLM, draft, prefix: Sequence[int], num_draft_tokens: int, rows,
                            *, skip_prob=0, alpha: float = 0.01) -> dict[str, Any] | None:
    """Name the recurrent-state mechanism behind ``rows``, or None when the target's law explains them.

    Parameters
    ----------
    target : RecurrentLM
    draft : TabularLM
        The stateless drafter the rows were decoded with.
    prefix : sequence of int
        The prompt.
    num_draft_tokens : int
        k of the decoder.
    rows : array_like, shape (num_samples, num_tokens), int64
        Emitted tokens (no padding: recurrent targets have no EOS here); ``num_tokens`` small (the laws are
        enumerated over ``vocab ** (num_tokens + k)`` paths).
    skip_prob : Fraction-like, default 0
        The drafter's draftless-round probability (the run's ``skip_prob``).
    alpha : float, default 0.01
        Level of the target-vs-mechanism likelihood ratio (threshold ``log(1 / alpha)``) and of the fit check.

    Returns
    -------
    dict or None
        None when no policy beats the target's law by ``log(1 / alpha)``.  Else ``{"finding", "mechanism",
        "log_lr", "fits", "ranking", "sentence"}``: ``mechanism`` the decoder-zoo name or None when the leading
        policy does not fit (then ``finding`` says the bias is not a recurrent-state one), ``log_lr`` its
        log-likelihood ratio over the target, ``ranking`` [(name, log-likelihood)] best first.

    Raises
    ------
    InvalidArgumentError
        ``rows`` not a 2-D integer array without padding, ``alpha`` outside (0, 1), and as for
        :func:`~verifier.exact.recurrent.recurrent_law`.

    Examples
    --------
    >>> from verifier.exact.recurrent import parity3
    >>> target, draft = parity3()
    >>> recurrent_state_finding(target, draft, (0,), 2, [[1, 1, 2], [2, 0, 1]]) is None  # 2 rows: no evidence
    True
    """
    arr = np.asarray(rows)
    if arr.ndim != 2 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or (arr < 0).any():
        raise invalid_argument("rows", f"<array shape {arr.shape}>", "a non-empty 2-D integer array of token ids")
    if not 0 < alpha < 1:
        raise invalid_argument("alpha", alpha, "a level in (0, 1)")
    width, skip = arr.shape[1], Fraction(skip_prob)
    null = _loglik(arr, recurrent_target_law(target, tuple(prefix), width))
    laws = {name: recurrent_law(target, draft, prefix, num_draft_tokens, width, rollback=policy, skip_prob=skip)
            for name, (policy, _, _) in RECURRENT_MECHANISMS.items()}
    ranking = sorted(((name, _loglik(arr, law)) for name, law in laws.items()), key=lambda t: -t[1])
    best, score = ranking[0]
    log_lr = score - null
    if not log_lr > math.log(1 / alpha):
        return None
    fits = joint_test(arr, laws[best], tuple(range(width)), target.vocab_size, alpha=alpha,
                      rng=np.random.default_rng(0)).pvalue > alpha
    _, finding, where = RECURRENT_MECHANISMS[best]
    if fits:
        sentence = (f"{finding} (log likelihood ratio {log_lr:.1f} over the target's law on {arr.shape[0]} rows; its "
                    f"exact law fits the rows) -- {where}")
        return {"finding": finding, "mechanism": best, "log_lr": log_lr, "fits": True, "ranking": ranking,
                "sentence": sentence}
    finding = "biased, but not by a recurrent-state policy"
    return {"finding": finding, "mechanism": None, "log_lr": log_lr, "fits": False, "ranking": ranking,
            "sentence": f"{finding}: the closest, {best}, is rejected by the joint cell at alpha {alpha:g}"}


RECURRENT_STATUS = "recurrent state"  # the diagnosis status of a decoder whose target is a state-space model
_GENERIC = ("the target carries a recurrent (state-space) state, which the per-row mechanisms (KV-cache decoders) do "
            "not model; look first at how the state is rolled back after a rejection: "
            + RECURRENT_MECHANISMS["state_not_rolled_back"][2] + "; and whether a step without draft tokens commits "
            "the state checkpoint")


def is_recurrent_target(model) -> bool:
    """True for a target the harness steps as a recurrent state: a :class:`~verifier.models.recurrent.RecurrentStateLM`
    or a transformers model whose config names a state-space family (``state_size`` or ``ssm_state_size``)."""
    from verifier.models.recurrent import RecurrentStateLM

    cfg = getattr(model, "config", None)
    return isinstance(model, RecurrentStateLM) or any(hasattr(cfg, a) for a in ("state_size", "ssm_state_size"))


def recurrent_run_finding(name: str, plans: list, pairs: dict, tokens_of) -> dict[str, Any] | None:
    """The whole diagnosis of biased decoder ``name`` when its target is recurrent, else None.

    Parameters
    ----------
    name : str
        The decoder's suite name.
    plans : list of SampleSetPlan
        The run's sample sets (those of ``name`` are used).
    pairs : dict str -> LoadedPair
    tokens_of : callable plan -> np.ndarray (rows, max_new_tokens)

    Returns
    -------
    dict or None
        None when no sample set of ``name`` has a recurrent target.  Else ``{"finding", "mechanism", "sentence",
        "sets"}``: on a tabular :class:`~verifier.exact.recurrent.RecurrentLM` target (with a tabular draft) the
        :func:`recurrent_state_finding` of each sample set, the decoder's mechanism the one they agree on; on another
        state-space target (a transformers Mamba) no name, a sentence on where to look.
    """
    from verifier.exact.tabular import TabularLM
    from verifier.models.recurrent import RecurrentStateLM

    own = [p for p in plans if p.decoder.name == name and is_recurrent_target(pairs[p.pair].target_model)]
    if not own:
        return None
    sets, names = [], set()
    for plan in own:
        pair = pairs[plan.pair]
        target, draft = pair.target_model, pair.draft_model
        if not (isinstance(target, RecurrentStateLM) and isinstance(draft, TabularLM)) or plan.sampling.label() != "T=1":
            sets.append({"set_id": plan.set_id, "mechanism": None, "sentence": _GENERIC})
            names.add(None)
            continue
        found = recurrent_state_finding(target.machine, draft, plan.prompt_ids, plan.num_draft_tokens, tokens_of(plan),
                                        skip_prob=Fraction(str(plan.decoder.options.get("skip_prob", 0))))
        sets.append({"set_id": plan.set_id, "mechanism": found and found["mechanism"],
                     "sentence": found["sentence"] if found else "the target's law explains the rows best"})
        names.add(found and found["mechanism"])
    named = names - {None}
    if len(named) == 1 and None not in names:
        mechanism = named.pop()
        finding = RECURRENT_MECHANISMS[mechanism][1]
        sentence = next(s["sentence"] for s in sets if s["mechanism"] == mechanism)
    else:
        mechanism, finding, sentence = None, "recurrent target: no single state-policy name", _GENERIC
    return {"finding": finding, "mechanism": mechanism, "sentence": sentence, "sets": sets}
