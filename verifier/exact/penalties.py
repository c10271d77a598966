"""Exact laws with penalties and min-p: processed probs that change with every emitted token (issue 29, bug kind 3).

A repetition, presence or frequency penalty makes the processed law at a position depend on the whole context
(prompt + the tokens emitted so far), not only on the table's n-gram row; min-p is row-wise but a speculative
decoder can skip it on some positions.  This module enumerates, as :class:`fractions.Fraction` laws:

* :func:`penalty_target_law` -- plain sampling of the first N emitted tokens from the processed target;
* :func:`penalty_n_token_law` -- the same N tokens from rounds of k drafts under a verification rule of
  :data:`PENALTY_RULES`: ``canonical`` (the reference: both models' processed probs recomputed after every
  emitted *and drafted* token; equal to :func:`penalty_target_law` -- speculative sampling stays lossless when
  the target law moves with the context, because each position is verified against the law of its own context)
  and the three mutants of :mod:`verifier.decoders.penalty_mutants`.

Exactness.  Processing follows :func:`verifier.sampling.processed_probs` on ``log(row)`` in float64, then each
entry is converted exactly to a Fraction and the row renormalised (as :func:`verifier.models.tabular.processed_tabular`
does for temperature / top-k / top-p): ``exp`` of a penalised logit is irrational, so the law is exact arithmetic on
the float64 processed rows, within float64 rounding of the decoders' rows.  Rows are memoised per (n-gram context,
context codes).

The mutants (target probs the verification uses, per position j = 0..k of a round; the draft always proposes from
its own fully processed probs of its context, recomputed per drafted token):

``penalty_once_per_round``
    The penalty state is updated once per round: every target position of the round is processed with the
    counts of the tokens emitted *before* the round (a draft position verifies with stale counts; the bonus too).
``penalty_ignored_in_verification``
    Target probs at the k draft positions (acceptance test and residual) without the repetition, presence and
    frequency penalties; the bonus position penalised.  vLLM v1 before PR #19482 (issue #18902: "The frequency
    penalty does not work when spec decoding is enabled in V1"; penalties silently ignored by the rejection
    sampler, applied by the regular sampler to the bonus token).
``min_p_skipped_on_verified``
    Target probs at the k draft positions without min-p, the bonus position with it: vLLM issue #42744 / PR
    #42802 (``RejectionSampler.apply_logits_processors`` runs only the non-argmax-invariant processors, so
    min-p "only land[s] on bonus tokens via the regular Sampler path").  A recovered token can then be one that
    min-p removes: a support violation.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from fractions import Fraction
from typing import Callable, Sequence

from verifier.errors import invalid_argument
from verifier.exact.laws import Law, _cut, _positive_int_iv, _rounds_law, _sampled_law
from verifier.exact.tabular import TabularLM
from verifier.sampling import SamplingConfig, add_generated, context_codes, processed_probs

__all__ = ["PENALTY_RULES", "PENALTY_SAMPLING", "PENALTY_PROMPTS", "HistoryProcessedLM", "penalty_target_law",
           "penalty_n_token_law", "without_penalties"]

PENALTY_RULES = ("canonical", "penalty_once_per_round", "penalty_ignored_in_verification", "min_p_skipped_on_verified")
# the setting of the penalty cells and `bench detect --penalties`: every processor on at once, each strong enough to
# move a tabular row (min-p 0.3 drops a token of most bigram4_eos rows)
PENALTY_SAMPLING = SamplingConfig(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5, min_p=0.3)
# prompts with repeated tokens (the repetition penalty reads them; presence / frequency must not), per standard pair
PENALTY_PROMPTS = {"unigram3": (0, 0, 1), "bigram4_eos": (0, 1, 0), "trigram3": (0, 1, 0, 1)}


def without_penalties(sampling: SamplingConfig) -> SamplingConfig:
    """``sampling`` with the repetition, presence and frequency penalties off (what a verification path that
    ignores them processes with)."""
    return dataclasses.replace(sampling, repetition_penalty=None, presence_penalty=None, frequency_penalty=None)


class HistoryProcessedLM:
    """The processed next-token law of a tabular model when processing reads the whole context.

    Parameters
    ----------
    lm : TabularLM
        The unprocessed table.
    sampling : SamplingConfig
        Any config (greedy included); penalties read the context's tokens.
    prompt_len : int
        The first ``prompt_len`` tokens of every prefix are the prompt (repetition penalty: prompt + generated;
        presence / frequency: generated tokens only, :mod:`verifier.sampling`).

    Notes
    -----
    Duck-types the part of :class:`~verifier.exact.TabularLM` the enumerators read (``probs``, ``vocab_size``,
    ``context_len``, ``eos_token_id``, ``name``).
    """

    def __init__(self, lm: TabularLM, sampling: SamplingConfig, prompt_len: int) -> None:
        self.lm, self.sampling, self.prompt_len = lm, sampling, int(prompt_len)
        self.vocab_size, self.context_len, self.eos_token_id = lm.vocab_size, lm.context_len, lm.eos_token_id
        self.name = f"{lm.name}|{sampling.label()}"
        self._memo: dict[tuple, tuple[Fraction, ...]] = {}

    def probs(self, prefix: Sequence[int]) -> tuple[Fraction, ...]:
        """Processed law after ``prefix`` (prompt + generated), penalties counted over ``prefix``."""
        return self.probs_counted(prefix, prefix)

    def probs_counted(self, prefix: Sequence[int], counted: Sequence[int]) -> tuple[Fraction, ...]:
        """The table's row after ``prefix``, processed with the penalty state of ``counted`` (a prefix of it:
        the context as a stale penalty state saw it).

        Raises
        ------
        InvalidArgumentError
            ``counted`` shorter than the prompt, or a prefix the table refuses.
        """
        if len(counted) < self.prompt_len:
            raise invalid_argument("counted", tuple(counted), f"at least the prompt's {self.prompt_len} tokens")
        row = self.lm.probs(prefix)
        codes = self._codes(counted)
        key = (tuple(prefix[len(prefix) - self.context_len:]) if self.context_len else (), codes)
        if key not in self._memo:
            self._memo[key] = self._process(row, codes)
        return self._memo[key]

    def _codes(self, counted: Sequence[int]) -> tuple | None:
        import torch  # here, not at import: `verifier.exact` loads without torch (report re-rendering needs none)

        ctx = context_codes(counted[:self.prompt_len], 1, self.vocab_size, sampling=self.sampling)
        if ctx is None:
            return None
        gen = [int(t) for t in counted[self.prompt_len:]]
        if gen:
            add_generated(ctx, torch.zeros(len(gen), dtype=torch.int64), torch.tensor(gen, dtype=torch.int64))
        return tuple(ctx[0].tolist())

    def _process(self, row: tuple[Fraction, ...], codes: tuple | None) -> tuple[Fraction, ...]:
        import torch

        p = torch.tensor([float(f) for f in row], dtype=torch.float64)
        logits = torch.where(p > 0, p.log(), torch.full_like(p, -float("inf")))
        mask = None if codes is None else torch.tensor(codes, dtype=torch.bool if not self.sampling.counts_generated else torch.int32)
        probs = [Fraction(float(v)) for v in processed_probs(logits, self.sampling, mask).tolist()]
        total = sum(probs)
        return tuple(v / total for v in probs)


# -- one round, the target's law chosen per position -----------------------------------------------

PositionLaw = Callable[[tuple[int, ...], tuple[int, ...], int], tuple[Fraction, ...]]


def _position_laws(rule: str, target: TabularLM, sampling: SamplingConfig, prompt_len: int, k: int) -> PositionLaw:
    """``p_at(round_prefix, context, j)``: the target law the rule verifies position j (0..k; k = bonus) with."""
    full = HistoryProcessedLM(target, sampling, prompt_len)
    if rule == "canonical":
        return lambda start, ctx, j: full.probs(ctx)
    if rule == "penalty_once_per_round":
        return lambda start, ctx, j: full.probs_counted(ctx, start)
    other = HistoryProcessedLM(target, without_penalties(sampling) if rule == "penalty_ignored_in_verification"
                               else dataclasses.replace(sampling, min_p=None), prompt_len)
    return lambda start, ctx, j: full.probs(ctx) if j == k else other.probs(ctx)


def _residual(p: tuple[Fraction, ...], q: tuple[Fraction, ...]) -> tuple[Fraction, ...]:
    """``max(0, p - q)`` normalised; ``p`` when it is all zero (``verify_chain``'s ``residual_or_target``)."""
    r = [max(Fraction(0), a - b) for a, b in zip(p, q)]
    total = sum(r)
    return tuple(v / total for v in r) if total else p


def _round_law(p_at: PositionLaw, draft: HistoryProcessedLM, start: tuple[int, ...], k: int,
               limit: int | None) -> Law:
    """Law of one round's emitted tokens (cut at EOS and at ``limit``), Leviathan et al. 2023 Algorithm 1 with the
    target law of position j from ``p_at`` and the draft's processed law of each drafted context."""
    eos = draft.eos_token_id
    law: Law = defaultdict(Fraction)

    def verify(accepted: tuple[int, ...], prob: Fraction) -> None:
        if accepted and accepted[-1] == eos:  # an accepted EOS ends the sequence
            law[_cut(accepted, eos, limit)] += prob
            return
        ctx, j = start + accepted, len(accepted)
        p = p_at(start, ctx, j)
        if j == k:  # every draft accepted: the bonus token
            for y, py in enumerate(p):
                if py:
                    law[_cut(accepted + (y,), eos, limit)] += prob * py
            return
        q = draft.probs(ctx)
        res = None
        for x, qx in enumerate(q):
            if not qx:
                continue
            accept = min(Fraction(1), p[x] / qx)
            if accept < 1:  # rejected: the recovered token from the residual of this position
                res = res or _residual(p, q)
                for y, ry in enumerate(res):
                    if ry:
                        law[_cut(accepted + (y,), eos, limit)] += prob * qx * (1 - accept) * ry
            if accept > 0:
                verify(accepted + (x,), prob * qx * accept)

    verify((), Fraction(1))
    return dict(law)


# -- public API --------------------------------------------------------------------------------------


def _iv(target, draft, prompt, sampling, where: str) -> tuple[int, ...]:
    for name, model in (("target", target), ("draft", draft)):
        if model is not None and not isinstance(model, TabularLM):
            raise invalid_argument(name, type(model).__name__, "a verifier.exact.TabularLM", where=where)
    if not isinstance(sampling, SamplingConfig):
        raise invalid_argument("sampling", sampling, "a verifier.SamplingConfig", where=where)
    try:
        prompt_t = tuple(int(t) for t in prompt)
    except (TypeError, ValueError):
        raise invalid_argument("prompt", prompt, "a sequence of token ids", where=where) from None
    need = max(target.context_len, 0 if draft is None else draft.context_len)
    if len(prompt_t) < need or any(not 0 <= t < target.vocab_size for t in prompt_t):
        raise invalid_argument("prompt", prompt_t, f"at least {need} token ids in 0..{target.vocab_size - 1}", where=where)
    if draft is not None and (draft.vocab_size, draft.eos_token_id) != (target.vocab_size, target.eos_token_id):
        raise invalid_argument("draft", draft.name, "the target's vocabulary size and EOS id", where=where)
    return prompt_t


def penalty_target_law(target: TabularLM, prompt: Sequence[int], sampling: SamplingConfig, num_tokens: int) -> Law:
    """Exact law of the first ``num_tokens`` tokens of plain sampling from the processed, context-dependent target.

    Parameters
    ----------
    target : TabularLM
    prompt : sequence of int
        At least ``context_len`` ids; the repetition penalty counts it, presence / frequency do not.
    sampling : SamplingConfig
    num_tokens : int
        N >= 1.

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Tuples of length N, -1 after EOS (the format of :func:`verifier.exact.target_law`).

    Raises
    ------
    InvalidArgumentError
        A model that is not a TabularLM, a bad prompt, ``sampling`` not a SamplingConfig, or ``num_tokens < 1``.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["unigram3"]
    >>> law = penalty_target_law(pair.target, (), SamplingConfig(frequency_penalty=0.5), 2)
    >>> sum(law.values())
    Fraction(1, 1)
    """
    prompt_t = _iv(target, None, prompt, sampling, "penalty_target_law")
    _positive_int_iv(num_tokens, "num_tokens", "penalty_target_law")
    model = HistoryProcessedLM(target, sampling, len(prompt_t))
    return _sampled_law(model.probs, target.eos_token_id, prompt_t, num_tokens)


def penalty_n_token_law(target: TabularLM, draft: TabularLM, prompt: Sequence[int], sampling: SamplingConfig,
                        num_draft_tokens: int, num_tokens: int, rule: str = "canonical") -> Law:
    """Exact law of the first ``num_tokens`` emitted tokens of speculative decoding with context-dependent processing.

    Parameters
    ----------
    target, draft : TabularLM
        Same vocabulary and EOS.
    prompt : sequence of int
    sampling : SamplingConfig
        Applied to both models (the draft proposes from its processed probs of each drafted context).
    num_draft_tokens : int
        k >= 1, drafts per round.
    num_tokens : int
        N >= 1; rounds run until N tokens or EOS.  Use N >= k + 2 to see a mutant that differs after a round.
    rule : str, default "canonical"
        One of :data:`PENALTY_RULES`.

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Tuples of length N, -1 after EOS.  ``canonical`` equals :func:`penalty_target_law` (tested).

    Raises
    ------
    InvalidArgumentError
        As :func:`penalty_target_law`, draft and target that differ in vocabulary or EOS, ``k < 1`` or an unknown
        ``rule``.

    Notes
    -----
    Cost grows like ``vocab ** (N + k)``; keep vocab <= 4 and N <= 5.
    """
    where = f"penalty_n_token_law(rule={rule!r})"
    if rule not in PENALTY_RULES:
        raise invalid_argument("rule", rule, f"one of {list(PENALTY_RULES)}", where=where)
    prompt_t = _iv(target, draft, prompt, sampling, where)
    _positive_int_iv(num_draft_tokens, "num_draft_tokens", where)
    _positive_int_iv(num_tokens, "num_tokens", where)
    p_at = _position_laws(rule, target, sampling, len(prompt_t), num_draft_tokens)
    q = HistoryProcessedLM(draft, sampling, len(prompt_t))
    return _rounds_law(lambda ctx, limit: _round_law(p_at, q, ctx, num_draft_tokens, limit), prompt_t, num_tokens,
                       target.eos_token_id)
