"""Exact share of wrongly reported logprobs on tabular models (issue 29, bug kind 4: reported logprobs).

A decoder that reports a logprob with each emitted token should report ``log p(x_t | prefix)``, the processed
target prob of the token given its prefix.  The logprob zoo (:mod:`verifier.decoders.logprob_mutants`) samples
exactly as the reference and reports a wrong value at some tokens; which tokens depends on the round structure
(where rounds start, which tokens are accepted drafts), so the share of wrong tokens is a law of speculative
sampling, not of the target alone.  This module enumerates it with Fractions:

``"zero"``
    ``0.0`` reported: token t is wrong iff ``p(x_t) != 1``.
``"first_only"``
    the round's first value repeated: token t, at column ``j >= 1`` of its round, is wrong iff
    ``p(x_t) != p(x_first)`` (the round's first emitted token's prob).
``"draft_row"``
    ``log q(x_t)`` at accepted drafts: token t is wrong iff it is an accepted draft and ``q(x_t) != p(x_t)``.

:func:`logprob_defect_law` returns, for positions ``t = 1..N``, P(token t is emitted) and P(token t is emitted and
its reported logprob is wrong), and the probability that a row's first N tokens hold at least one wrong value: the
deterministic ``logprob`` cell (:mod:`verifier.runner.logprob`) rejects at the first wrong token, so its rows to
detect are geometric in that probability (``bench detect --logprob``).  Rounds come from the rule's round
enumerator (:func:`verifier.exact.laws._round_outcomes`), cut at EOS and at N tokens, as the decoders cut them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from verifier.errors import invalid_argument
from verifier.exact.laws import _cut, _models_iv, _positive_int_iv, _round_outcomes
from verifier.exact.rules import get_rule
from verifier.exact.tabular import TabularLM

__all__ = ["LogprobDefectLaw", "logprob_defect_law", "LOGPROB_DEFECTS"]

LOGPROB_DEFECTS = ("zero", "first_only", "draft_row")  # the zoo's reporting defects (verifier.decoders.logprob_mutants)


@dataclass(frozen=True)
class LogprobDefectLaw:
    """Exact figures of one reporting defect over the first N tokens of a row.

    Attributes
    ----------
    defect : str
        One of :data:`LOGPROB_DEFECTS`.
    emitted : tuple of Fraction, length N
        ``emitted[t - 1]`` = P(token t is emitted: the row has not ended at EOS before it).
    wrong : tuple of Fraction, length N
        ``wrong[t - 1]`` = P(token t is emitted and its reported logprob is wrong).
    row_wrong : Fraction
        P(at least one of the row's first N tokens has a wrong logprob).
    """

    defect: str
    emitted: tuple[Fraction, ...]
    wrong: tuple[Fraction, ...]
    row_wrong: Fraction

    def share(self, position: int) -> Fraction:
        """P(wrong logprob | token ``position`` emitted), 1-based; 0 when the position is never reached."""
        e = self.emitted[position - 1]
        return self.wrong[position - 1] / e if e else Fraction(0)

    @property
    def token_share(self) -> Fraction:
        """Expected wrong tokens / expected emitted tokens over positions 1..N."""
        total = sum(self.emitted, Fraction(0))
        return sum(self.wrong, Fraction(0)) / total if total else Fraction(0)


def _wrong_columns(target: TabularLM, draft: TabularLM, context: tuple[int, ...], new: tuple[int, ...],
                   accepted: int, defect: str) -> list[bool]:
    """Per column of one round's (cut) emitted tokens: is the reported logprob wrong?"""
    p = [target.probs(context + new[:j])[x] for j, x in enumerate(new)]
    if defect == "zero":
        return [pj != 1 for pj in p]
    if defect == "first_only":
        return [j > 0 and pj != p[0] for j, pj in enumerate(p)]
    return [j < accepted and draft.probs(context + new[:j])[x] != p[j] for j, x in enumerate(new)]


def logprob_defect_law(target: TabularLM, draft: TabularLM, prefix: Sequence[int], num_draft_tokens: int,
                       num_tokens: int, defect: str, rule="canonical") -> LogprobDefectLaw:
    """Exact share of tokens whose reported logprob is wrong under a reporting defect.

    Parameters
    ----------
    target, draft : TabularLM
        The pair (same vocabulary and EOS).
    prefix : sequence of int
        The prompt (at least both models' ``context_len`` tokens).
    num_draft_tokens : int
        k, draft tokens per round (>= 1).
    num_tokens : int
        N, positions enumerated (>= 1); rows are cut at N tokens and after EOS, as a decoder cuts them.
    defect : {"zero", "first_only", "draft_row"}
        The reporting defect (module docstring).
    rule : str or Rule, default "canonical"
        The verification rule whose rounds are enumerated (the zoo's decoders sample with the canonical rule).

    Returns
    -------
    LogprobDefectLaw

    Raises
    ------
    InvalidArgumentError
        Models, prefix, k or N invalid (as for :func:`verifier.exact.n_token_law`), or ``defect`` not one of
        :data:`LOGPROB_DEFECTS`.

    Notes
    -----
    A forward pass over rounds: the state is the row's emitted tokens so far and whether a wrong value occurred;
    each round's outcomes (emitted tokens, accepted drafts, probability) are cut at EOS and at N.  Cost: the number
    of distinct emitted prefixes times the round outcomes, as :func:`~verifier.exact.n_token_law`.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["unigram3"]
    >>> law = logprob_defect_law(pair.target, pair.draft, pair.prefix, 1, 2, "draft_row")
    >>> law.emitted, law.share(1) == law.wrong[0]
    ((Fraction(1, 1), Fraction(1, 1)), True)
    """
    rule = get_rule(rule)
    prefix_t = _models_iv(target, draft, prefix, num_draft_tokens, "logprob_defect_law", rule)
    _positive_int_iv(num_tokens, "num_tokens", "logprob_defect_law")
    if defect not in LOGPROB_DEFECTS:
        raise invalid_argument("defect", defect, " | ".join(map(repr, LOGPROB_DEFECTS)), where="logprob_defect_law")
    eos = target.eos_token_id
    emitted = [Fraction(0)] * num_tokens
    wrong = [Fraction(0)] * num_tokens
    row_wrong = Fraction(0)
    frontier: dict[tuple[tuple[int, ...], bool], Fraction] = {((), False): Fraction(1)}
    while frontier:  # one round per iteration; every round emits >= 1 token
        nxt: dict[tuple[tuple[int, ...], bool], Fraction] = defaultdict(Fraction)
        for (done, bad), prob in frontier.items():
            context = prefix_t + done
            for new, accepted, pr in _round_outcomes(target, draft, context, num_draft_tokens, rule):
                new = _cut(new, eos, num_tokens - len(done))
                mass = prob * pr
                flags = _wrong_columns(target, draft, context, new, accepted, defect)
                for j, flag in enumerate(flags):
                    emitted[len(done) + j] += mass
                    if flag:
                        wrong[len(done) + j] += mass
                seq, now_bad = done + new, bad or any(flags)
                if len(seq) == num_tokens or seq[-1] == eos:
                    row_wrong += mass if now_bad else 0
                else:
                    nxt[(seq, now_bad)] += mass
        frontier = nxt
    return LogprobDefectLaw(defect, tuple(emitted), tuple(wrong), row_wrong)
