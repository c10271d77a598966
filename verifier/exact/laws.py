"""Exact laws of whole rounds and of the first N emitted tokens, on tabular target/draft models.

A *law* is a ``dict`` mapping a tuple of token ids to its :class:`~fractions.Fraction`
probability; probabilities of a law sum to exactly 1 and zero-probability outcomes are omitted.
In :func:`n_token_law` and :func:`target_law` every tuple has length ``num_tokens`` and is padded
with :data:`~verifier.protocols.PADDING_TOKEN_ID` (-1) after EOS.

Equality ``n_token_law(...) == target_law(...)`` is the proof that a rule preserves the target on
that model pair; ``total_variation`` between them is the size of a bug.

Glossary: see :mod:`verifier.protocols`.

References
----------
Leviathan et al. (2023), Algorithm 1; Chen et al. (2023), Algorithm 2.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Callable, Iterator, Mapping, Sequence

from verifier.errors import invalid_argument
from verifier.exact.rules import Rule, get_rule
from verifier.exact.tabular import TabularLM
from verifier.protocols import PADDING_TOKEN_ID

__all__ = ["round_law", "n_token_law", "target_law", "accepted_count_law", "total_variation", "marginal"]

Law = dict[tuple[int, ...], Fraction]


# -- the one enumeration algorithm ---------------------------------------------------------------


def _round_outcomes(target: TabularLM, draft: TabularLM, prefix: tuple[int, ...], k: int, rule: Rule) -> Iterator[tuple[tuple[int, ...], int, Fraction]]:
    """Yield ``(emitted tokens, number of accepted draft tokens, probability)`` for one round.

    Draft and verify are interleaved position by position (the law is the same as drafting all k
    first, because the draft token at position i depends only on the tokens before it).  Emitted
    tuples are not yet cut at EOS or at a length limit; outcomes may repeat.
    """
    if rule.round_outcomes is not None:  # a round-level rule (block verification) enumerates itself
        yield from rule.round_outcomes(target, draft, prefix, k, rule)
        return
    eos = target.eos_token_id

    def verify(accepted: tuple[int, ...], prob: Fraction, uniform_bound: Fraction):
        # `accepted` draft tokens so far; `prob` = P(this path); under a shared uniform U, all
        # acceptances so far mean U ~ Uniform[0, uniform_bound).
        if accepted and accepted[-1] == eos:  # the draft proposed EOS and it was accepted: the sequence ends
            yield accepted, len(accepted), prob
            return
        if len(accepted) == k:  # all k accepted: bonus token from the target at position k + 1 (+ offset)
            bonus_context = prefix + accepted[: len(accepted) + rule.bonus_offset]
            for y, py in enumerate(target.probs(bonus_context)):
                if py:
                    yield accepted + (y,), k, prob * py
            return
        context = prefix + accepted
        p, q = target.probs(context), draft.probs(context)
        for x, qx in enumerate(rule.propose(q)):  # draft token x proposed with probability qx
            if not qx:
                continue
            threshold = rule.acceptance_at(len(accepted) + 1, p, q, x)  # accept iff U < threshold
            if rule.shared_uniform:
                accept, next_bound = min(threshold, uniform_bound) / uniform_bound, min(threshold, uniform_bound)
            else:
                accept, next_bound = threshold, Fraction(1)
            if accept < 1:  # rejected position: emit the recovered token (and, for one mutant, the draft suffix)
                reject = prob * qx * (1 - accept)
                recovered = (rule.recover(p, q, x) if rule.recover_after is None  # recovered_one_late: the rows after x
                             else rule.recover_after(target, draft, context + (x,), len(accepted) == k - 1))
                for y, ry in enumerate(recovered):
                    if not ry:
                        continue
                    if rule.keep_suffix:
                        for suffix, ps in _draft_paths(draft, context + (x,), k - len(accepted) - 1, rule):
                            yield accepted + (y,) + suffix, len(accepted), reject * ry * ps
                    else:
                        yield accepted + (y,), len(accepted), reject * ry
            if accept > 0:
                yield from verify(accepted + (x,), prob * qx * accept, next_bound)

    yield from verify((), Fraction(1), Fraction(1))


def _draft_paths(draft: TabularLM, context: tuple[int, ...], n: int, rule: Rule) -> Iterator[tuple[tuple[int, ...], Fraction]]:
    """Law of the next ``n`` draft tokens after ``context`` (drafting stops after EOS)."""
    if n == 0 or (context and context[-1] == draft.eos_token_id):
        yield (), Fraction(1)
        return
    for x, qx in enumerate(rule.propose(draft.probs(context))):
        if qx:
            for rest, pr in _draft_paths(draft, context + (x,), n - 1, rule):
                yield (x,) + rest, qx * pr


def _cut(tokens: tuple[int, ...], eos: int | None, limit: int | None) -> tuple[int, ...]:
    """Drop everything after the first EOS and beyond ``limit`` tokens."""
    if eos is not None and eos in tokens:
        tokens = tokens[: tokens.index(eos) + 1]
    return tokens if limit is None else tokens[:limit]


def _round_law(target, draft, prefix, k, rule, max_new_tokens) -> Law:
    law: Law = defaultdict(Fraction)
    for emitted, _, prob in _round_outcomes(target, draft, prefix, k, rule):
        law[_cut(emitted, target.eos_token_id, max_new_tokens)] += prob
    return dict(law)


def _n_token_law(target, draft, prefix, k, num_tokens, rule) -> Law:
    return _rounds_law(lambda ctx, limit: _round_law(target, draft, ctx, k, rule, limit), prefix, num_tokens, target.eos_token_id)


def _rounds_law(round_law: Callable[[tuple[int, ...], int], Law], prefix, num_tokens: int, eos: int | None) -> Law:
    """N-token law of repeated rounds; ``round_law(context, max_new_tokens)`` is one round's law (chain or tree)."""
    law: Law = defaultdict(Fraction)
    frontier: Law = {(): Fraction(1)}  # emitted so far -> probability, not finished yet
    while frontier:  # one round per iteration; every round emits >= 1 token
        next_frontier: Law = defaultdict(Fraction)
        for emitted, prob in frontier.items():
            for new, pr in round_law(prefix + emitted, num_tokens - len(emitted)).items():
                seq = emitted + new
                if len(seq) == num_tokens or seq[-1] == eos:
                    law[_pad(seq, num_tokens)] += prob * pr
                else:
                    next_frontier[seq] += prob * pr
        frontier = next_frontier
    return dict(law)


def _pad(seq: tuple[int, ...], num_tokens: int) -> tuple[int, ...]:
    return seq + (PADDING_TOKEN_ID,) * (num_tokens - len(seq))


# -- public API ----------------------------------------------------------------------------------


def round_law(
    target: TabularLM,
    draft: TabularLM,
    prefix: Sequence[int],
    num_draft_tokens: int,
    rule: str | Rule = "canonical",
    max_new_tokens: int | None = None,
) -> Law:
    """Exact law of the emitted tokens of one round.

    The draft proposes ``num_draft_tokens`` (k) tokens autoregressively (stopping after EOS); the
    target verifies them left to right; the round is cut at the first rejection, where the
    recovered token is emitted; when all proposed drafts are accepted the bonus token is drawn
    from the target at position k + 1 (no bonus after an accepted EOS).

    Parameters
    ----------
    target, draft : TabularLM
        Same ``vocab_size`` and ``eos_token_id``.
    prefix : sequence of int
        The context (prompt plus tokens emitted so far); at least the models' ``context_len`` long.
    num_draft_tokens : int
        k >= 1.
    rule : str or Rule, default "canonical"
        See :data:`~verifier.exact.rules.RULES`.
    max_new_tokens : int or None, default None
        Emitted tokens beyond this many are dropped (the round still drafts all k tokens, so the
        result is the law of the first ``max_new_tokens`` tokens of an unbounded round).

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Emitted tokens (length 1 .. k + 1, ending at the first EOS) -> probability.

    Raises
    ------
    InvalidArgumentError
        Models of different vocabularies or EOS, a prefix too short or out of the vocabulary,
        ``num_draft_tokens < 1``, ``max_new_tokens < 1``, or an unknown rule.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["unigram3"]
    >>> law = round_law(pair.target, pair.draft, (), 1)
    >>> sum(law.values()) == 1, max(len(t) for t in law)
    (True, 2)
    """
    rule_obj = get_rule(rule)
    prefix_t = _models_iv(target, draft, prefix, num_draft_tokens, "round_law", rule_obj)
    if max_new_tokens is not None:
        _positive_int_iv(max_new_tokens, "max_new_tokens", f"round_law(rule={rule_obj.name!r})")
    return _round_law(target, draft, prefix_t, num_draft_tokens, rule_obj, max_new_tokens)


def n_token_law(
    target: TabularLM,
    draft: TabularLM,
    prefix: Sequence[int],
    num_draft_tokens: int,
    num_tokens: int,
    rule: str | Rule = "canonical",
) -> Law:
    """Exact law of the first ``num_tokens`` emitted tokens over as many rounds as needed.

    Parameters
    ----------
    target, draft, prefix, num_draft_tokens, rule
        As in :func:`round_law`.
    num_tokens : int
        N >= 1, the length of every returned tuple.

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Tuples of length N, -1 after EOS.  Equals :func:`target_law` iff the rule preserves the
        target's N-token law on this pair.

    Raises
    ------
    InvalidArgumentError
        As :func:`round_law`, and ``num_tokens < 1``.

    Notes
    -----
    Cost grows like ``vocab ** (num_tokens + num_draft_tokens)``; keep vocab <= 6 and N <= 4.
    """
    rule_obj = get_rule(rule)
    prefix_t = _models_iv(target, draft, prefix, num_draft_tokens, "n_token_law", rule_obj)
    _positive_int_iv(num_tokens, "num_tokens", f"n_token_law(rule={rule_obj.name!r})")
    return _n_token_law(target, draft, prefix_t, num_draft_tokens, num_tokens, rule_obj)


def target_law(target: TabularLM, prefix: Sequence[int], num_tokens: int) -> Law:
    """Exact law of the first ``num_tokens`` tokens of plain (ancestral) sampling from the target.

    Same format as :func:`n_token_law` (length-N tuples, -1 after EOS).

    Raises
    ------
    InvalidArgumentError
        A prefix too short or out of the vocabulary, or ``num_tokens < 1``.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> law = target_law(standard_tabular_pairs()["bigram4_eos"].target, (0,), 2)
    >>> sum(law.values())
    Fraction(1, 1)
    """
    prefix_t = _prefix_iv(target, prefix, "target_law")
    _positive_int_iv(num_tokens, "num_tokens", "target_law")
    return _sampled_law(target.probs, target.eos_token_id, prefix_t, num_tokens)


def _sampled_law(next_probs: Callable[[tuple[int, ...]], Sequence[Fraction]], eos_token_id: int | None,
                 prefix: tuple[int, ...], num_tokens: int) -> Law:
    """Law of ``num_tokens`` tokens sampled one by one from ``next_probs(prefix + emitted)`` (padding after EOS)."""
    law: Law = {(): Fraction(1)}
    for _ in range(num_tokens):
        grown: Law = defaultdict(Fraction)
        for seq, prob in law.items():
            if seq and seq[-1] in (eos_token_id, PADDING_TOKEN_ID):
                grown[seq + (PADDING_TOKEN_ID,)] += prob
                continue
            for y, py in enumerate(next_probs(prefix + seq)):
                if py:
                    grown[seq + (y,)] += prob * py
        law = grown
    return dict(law)


def accepted_count_law(
    target: TabularLM,
    draft: TabularLM,
    prefix: Sequence[int],
    num_draft_tokens: int,
    rule: str | Rule = "canonical",
) -> tuple[Fraction, ...]:
    """Exact law of the number of accepted draft tokens in the first round.

    Returns
    -------
    tuple of Fraction, shape (num_draft_tokens + 1,)
        Entry j is P(j drafts accepted); entry k means the bonus token was emitted (or the draft
        stopped at an accepted EOS after k tokens).  Compare with
        :attr:`verifier.protocols.DecoderStats.first_round_accepted`.

    Raises
    ------
    InvalidArgumentError
        As :func:`round_law`.
    """
    rule_obj = get_rule(rule)
    prefix_t = _models_iv(target, draft, prefix, num_draft_tokens, "accepted_count_law", rule_obj)
    counts = [Fraction(0)] * (num_draft_tokens + 1)
    for _, accepted, prob in _round_outcomes(target, draft, prefix_t, num_draft_tokens, rule_obj):
        counts[accepted] += prob
    return tuple(counts)


def total_variation(law_a: Mapping, law_b: Mapping) -> Fraction:
    """Total-variation distance ``sum |a - b| / 2`` between two exact laws.

    Accepts dict laws (outcome -> probability) or probability vectors (sequences) of equal length.

    Raises
    ------
    InvalidArgumentError
        If one argument is a dict and the other a sequence, or vectors differ in length.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> total_variation([F(1, 5), F(1, 2), F(3, 10)], [F(13, 50), F(9, 20), F(29, 100)])
    Fraction(3, 50)
    """
    if isinstance(law_a, Mapping) != isinstance(law_b, Mapping):
        raise invalid_argument("law_b", type(law_b).__name__, f"the same kind as law_a ({type(law_a).__name__})", where="total_variation")
    if not isinstance(law_a, Mapping):
        if len(law_a) != len(law_b):
            raise invalid_argument("len(law_b)", len(law_b), f"len(law_a)={len(law_a)}", where="total_variation")
        law_a, law_b = dict(enumerate(law_a)), dict(enumerate(law_b))
    keys = set(law_a) | set(law_b)
    return sum((abs(Fraction(law_a.get(o, 0)) - Fraction(law_b.get(o, 0))) for o in keys), Fraction(0)) / 2


def marginal(law: Mapping[tuple[int, ...], Fraction], positions: Sequence[int] | int) -> Law:
    """Marginal law of the tokens at ``positions`` (0-based) of a tuple law.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> marginal({(0, 1): F(1, 4), (1, 1): F(3, 4)}, 1)
    {(1,): Fraction(1, 1)}

    Raises
    ------
    InvalidArgumentError
        If a position is outside the tuples.
    """
    pos = (positions,) if isinstance(positions, int) else tuple(positions)
    out: Law = defaultdict(Fraction)
    for outcome, prob in law.items():
        for i in pos:
            if not isinstance(i, int) or not -len(outcome) <= i < len(outcome):
                raise invalid_argument("positions", positions, f"indices into outcomes of length {len(outcome)}", where="marginal")
        out[tuple(outcome[i] for i in pos)] += prob
    return dict(out)


# -- argument checks -----------------------------------------------------------------------------


def _positive_int_iv(value, name: str, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_argument(name, value, "an integer >= 1", where=where)


def _prefix_iv(model: TabularLM, prefix, where: str) -> tuple[int, ...]:
    if not isinstance(model, TabularLM):
        raise invalid_argument("target", type(model).__name__, "a verifier.exact.TabularLM", where=where)
    try:
        prefix_t = tuple(int(t) for t in prefix)
    except (TypeError, ValueError):
        raise invalid_argument("prefix", prefix, "a sequence of token ids", where=where) from None
    if len(prefix_t) < model.context_len or any(not 0 <= t < model.vocab_size for t in prefix_t):
        raise invalid_argument("prefix", prefix_t, f"at least context_len={model.context_len} token ids in 0..{model.vocab_size - 1}", where=where)
    return prefix_t


def _models_iv(target, draft, prefix, num_draft_tokens, fn: str, rule: Rule) -> tuple[int, ...]:
    where = f"{fn}(rule={rule.name!r})"
    if not isinstance(draft, TabularLM):
        raise invalid_argument("draft", type(draft).__name__, "a verifier.exact.TabularLM", where=where)
    prefix_t = _prefix_iv(target, prefix, where)
    if draft.vocab_size != target.vocab_size:
        raise invalid_argument("draft.vocab_size", draft.vocab_size, f"target.vocab_size={target.vocab_size}", where=where)
    if draft.eos_token_id != target.eos_token_id:
        raise invalid_argument("draft.eos_token_id", draft.eos_token_id, f"target.eos_token_id={target.eos_token_id}", where=where)
    if len(prefix_t) < draft.context_len:
        raise invalid_argument("prefix", prefix_t, f"at least draft.context_len={draft.context_len} tokens", where=where)
    _positive_int_iv(num_draft_tokens, "num_draft_tokens", where)
    return prefix_t
