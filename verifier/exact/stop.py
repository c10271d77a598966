"""Exact law of the stopping position on tabular models (issue 29, bug kind 5: stop rules inside accepted blocks).

A row stops at its first stop token or EOS (that token is its last), or at the request's limit ``max_tokens``.  Its
stopping position ``S`` takes values ``1..L`` ("first stop token or EOS at t") or "no stop within L" (the row ran to
the limit).  Under the target, ``S`` is a function of the target's law alone, however the tokens are produced, so a
lossless speculative decoder has this law whatever k; the runner's ``stop-position@1..L`` cell
(:mod:`verifier.runner.stop`) tests sampled rows against the float64 version of it.

* :func:`stop_position_law` -- the law from the target's table, by a forward pass over contexts (the n-gram state
  is the last ``context_len`` tokens, so the cost is ``L * vocab ** (context_len + 1)`` fractions, not
  ``vocab ** L``);
* :func:`stop_position_of` -- the same law read off any N-token law (:func:`~verifier.exact.target_law`,
  :func:`~verifier.exact.n_token_law` of a rule): brute force, and the bridge to the rule zoo;
* :func:`stop_violation_prob` -- the exact probability that a row of a speculative decoder breaks the stop rule
  when the rule is checked per token (0), per round for the stop tokens (the zoo's ``stop_mid_block``) or per round
  for the limit (``max_tokens_overshoot``): the exact statistic of the deterministic ``stop-rule`` cell, whose
  rows to detect are geometric in it.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Mapping, Sequence

from verifier.errors import invalid_argument
from verifier.exact.laws import _models_iv, _positive_int_iv, _prefix_iv, _round_outcomes
from verifier.exact.rules import get_rule
from verifier.exact.tabular import TabularLM
from verifier.protocols import PADDING_TOKEN_ID

__all__ = ["stop_position_law", "stop_position_of", "stop_violation_prob", "STOP_CHECKS"]

# when a decoder checks the request's stop rule: per token (the reference), or once per round for the stop tokens
# (verifier.decoders.stop_mutants.StopMidBlockDecoder) or for max_tokens (MaxTokensOvershootDecoder)
STOP_CHECKS = ("token", "round_stops", "round_limit")


def _ends_iv(stop_token_ids, vocab_size: int, eos_token_id: int | None, where: str) -> frozenset[int]:
    try:
        ids = [int(t) for t in stop_token_ids]
    except (TypeError, ValueError):
        raise invalid_argument("stop_token_ids", stop_token_ids, "a sequence of token ids", where=where) from None
    if any(isinstance(t, bool) for t in stop_token_ids) or any(not 0 <= t < vocab_size for t in ids):
        raise invalid_argument("stop_token_ids", stop_token_ids, f"token ids in 0..{vocab_size - 1}", where=where)
    if len(set(ids)) != len(ids):
        raise invalid_argument("stop_token_ids", stop_token_ids, "each id at most once", where=where)
    return frozenset(ids) | ({eos_token_id} if eos_token_id is not None else frozenset())


def stop_position_law(target: TabularLM, prefix: Sequence[int], max_tokens: int,
                      stop_token_ids: Sequence[int] = ()) -> tuple[Fraction, ...]:
    """Exact law of the stopping position of plain sampling from ``target``.

    Parameters
    ----------
    target : TabularLM
    prefix : sequence of int
        The prompt: at least ``context_len`` ids.
    max_tokens : int
        The request's length limit L >= 1.
    stop_token_ids : sequence of int, default ()
        Stop tokens beside ``target.eos_token_id``.

    Returns
    -------
    tuple of Fraction, length L + 1
        Entry ``t - 1``: P(first stop token or EOS at position t), ``t = 1..L``; entry ``L``: P(none within L).
        Sums to exactly 1.

    Raises
    ------
    InvalidArgumentError
        ``target`` not a TabularLM, a bad prefix, ``max_tokens < 1``, or a stop id outside the vocabulary or repeated.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["bigram4_eos"]
    >>> stop_position_law(pair.target, (0,), 2, stop_token_ids=[2])  # p(. | 0) = (1/10, 1/2, 1/5, 1/5), EOS 3
    (Fraction(2, 5), Fraction(29, 100), Fraction(31, 100))
    """
    where = "stop_position_law"
    prefix_t = _prefix_iv(target, prefix, where)
    _positive_int_iv(max_tokens, "max_tokens", where)
    ends = _ends_iv(stop_token_ids, target.vocab_size, target.eos_token_id, where)
    c = target.context_len
    live: dict[tuple[int, ...], Fraction] = {prefix_t[len(prefix_t) - c:] if c else (): Fraction(1)}
    law = []
    for _ in range(max_tokens):
        stopped, grown = Fraction(0), defaultdict(Fraction)
        for ctx, mass in live.items():
            for y, py in enumerate(target.probs(ctx)):
                if not py:
                    continue
                if y in ends:
                    stopped += mass * py
                else:
                    grown[(ctx + (y,))[len(ctx) + 1 - c:] if c else ()] += mass * py
        law.append(stopped)
        live = dict(grown)
    law.append(sum(live.values(), Fraction(0)))
    return tuple(law)


def stop_position_of(law: Mapping[tuple[int, ...], Fraction], max_tokens: int, stop_token_ids: Sequence[int] = (),
                     eos_token_id: int | None = None) -> tuple[Fraction, ...]:
    """The stopping-position law read off an N-token law (brute force over its outcomes).

    Parameters
    ----------
    law : mapping from tuple of int (length N >= max_tokens, -1 after EOS) to Fraction
        E.g. :func:`~verifier.exact.target_law` or :func:`~verifier.exact.n_token_law`.
    max_tokens : int
        L, at most N.
    stop_token_ids : sequence of int, default ()
    eos_token_id : int or None, default None

    Returns
    -------
    tuple of Fraction, length L + 1
        As :func:`stop_position_law`.

    Raises
    ------
    InvalidArgumentError
        ``max_tokens`` not an integer in ``1..N``, or a negative stop id.
    """
    where = "stop_position_of"
    _positive_int_iv(max_tokens, "max_tokens", where)
    width = min((len(seq) for seq in law), default=0)
    if max_tokens > width:
        raise invalid_argument("max_tokens", max_tokens, f"an integer in 1..{width} (the law's tuple length)", where=where)
    ends = _ends_iv(stop_token_ids, 1 << 62, eos_token_id, where)
    out = [Fraction(0)] * (max_tokens + 1)
    for seq, prob in law.items():
        first = next((i for i, y in enumerate(seq[:max_tokens]) if y in ends and y != PADDING_TOKEN_ID), max_tokens)
        out[first] += prob
    return tuple(out)


def _violates(seq: tuple[int, ...], ends: frozenset[int], limit: int) -> bool:
    """A token after the first stop token or EOS, or more than ``limit`` tokens."""
    first = next((i for i, y in enumerate(seq) if y in ends), None)
    return len(seq) > limit or (first is not None and first < len(seq) - 1)


def stop_violation_prob(target: TabularLM, draft: TabularLM, prefix: Sequence[int], num_draft_tokens: int,
                        max_tokens: int, max_new_tokens: int, stop_token_ids: Sequence[int] = (), *,
                        check: str = "token", rule: str = "canonical") -> Fraction:
    """Exact probability that one row of a speculative decoder breaks the request's stop rule.

    Rounds of ``rule`` (the verification rule's block outcomes, as :func:`~verifier.exact.n_token_law` enumerates
    them) are appended to the row as the decoder's output array does: with ``check = "token"`` every block is cut at
    its first stop token or EOS and at ``max_tokens`` (never a violation); with ``"round_stops"`` only EOS cuts the
    block and a stop token ends the row after its round; with ``"round_limit"`` the block is cut at ``max_new_tokens``
    (the array's width) instead of ``max_tokens``.

    Parameters
    ----------
    target, draft : TabularLM
    prefix : sequence of int
    num_draft_tokens : int
        k >= 1.
    max_tokens, max_new_tokens : int
        The request's limit L and the array's width W, ``1 <= L <= W``.
    stop_token_ids : sequence of int, default ()
    check : {"token", "round_stops", "round_limit"}, default "token"
    rule : str, default "canonical"
        A rule of :data:`verifier.exact.RULES`.

    Returns
    -------
    Fraction
        P(the row holds a token after its first stop token or EOS, or more than L tokens).

    Raises
    ------
    InvalidArgumentError
        Bad models, prefix, k, limits (``max_tokens`` above ``max_new_tokens``), stop ids or ``check``.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["bigram4_eos"]
    >>> stop_violation_prob(pair.target, pair.draft, (0,), 1, 2, 3, [2], check="round_stops")
    Fraction(1, 10)
    """
    rule_obj = get_rule(rule)
    where = f"stop_violation_prob(rule={rule_obj.name!r})"
    prefix_t = _models_iv(target, draft, prefix, num_draft_tokens, "stop_violation_prob", rule_obj)
    for name, value in (("max_tokens", max_tokens), ("max_new_tokens", max_new_tokens)):
        _positive_int_iv(value, name, where)
    if max_tokens > max_new_tokens:
        raise invalid_argument("max_tokens", max_tokens, f"an integer in 1..max_new_tokens={max_new_tokens}", where=where)
    if check not in STOP_CHECKS:
        raise invalid_argument("check", check, " | ".join(map(repr, STOP_CHECKS)), where=where)
    ends = _ends_iv(stop_token_ids, target.vocab_size, target.eos_token_id, where)
    cut_at = ends if check != "round_stops" else frozenset({target.eos_token_id} - {None})
    room = max_new_tokens if check == "round_limit" else max_tokens
    frontier: dict[tuple[int, ...], Fraction] = {(): Fraction(1)}
    bad = Fraction(0)
    while frontier:  # one round per pass; every round writes >= 1 token
        grown: dict[tuple[int, ...], Fraction] = defaultdict(Fraction)
        for emitted, prob in frontier.items():
            for block, _, pr in _round_outcomes(target, draft, prefix_t + emitted, num_draft_tokens, rule_obj):
                cut = next((i + 1 for i, y in enumerate(block) if y in cut_at), len(block))
                seq = emitted + block[:min(cut, room - len(emitted))]
                if any(y in ends for y in seq[len(emitted):]) or len(seq) >= max_tokens:
                    bad += prob * pr if _violates(seq, ends, max_tokens) else 0
                else:
                    grown[seq] += prob * pr
        frontier = dict(grown)
    return bad
