"""Recurrent (state-space) targets and the exact law of speculative decoding over them (issue 29, bug kind 8).

Hybrid and state-space targets (Mamba, Mamba2, gated delta nets) carry a fixed-size *state* that every consumed
token updates in place.  A verify pass feeds the pending token and the ``k`` draft tokens, so after a rejection the
state has consumed the rejected drafts too; an engine must roll it back (keep the per-position states of the pass,
or restore a checkpoint and re-run the accepted tokens).  Rolling back the KV cache / token position alone is not
enough.

Glossary (as in :mod:`verifier.exact.laws`): a *round* is one verify pass; the target consumes the *pending* token
``x`` (the last emitted token) and the drafts ``d_1..d_k``; ``m`` drafts are *accepted*, then the *recovered* token
(residual, at the *rejected position* ``m + 1``) or the *bonus* token (``m = k``) is emitted and becomes pending.
A *draftless round* (the drafter proposed nothing; an n-gram or prompt-lookup drafter often does) feeds ``x`` and
emits one target token.

Three state policies (:data:`ROLLBACKS`), each enumerated exactly by :func:`recurrent_law`:

``"rolled_back"``
    The reference: after the round the state has consumed ``x, d_1..d_m`` (the accepted prefix).  Its law is the
    target's (:func:`recurrent_target_law`) for every k and every draftless-round probability.
``"not_rolled_back"``
    Bug ``state_not_rolled_back``: the token position / KV cache is rolled back but the state is not -- it has
    consumed ``x, d_1..d_k``, the rejected drafts ``d_{m+1}..d_k`` included; the recovered token is fed on top of
    it next round.  Identical to the reference after a round with every draft accepted.
``"stale_checkpoint"``
    Bug ``state_checkpoint_stale``: the engine commits a checkpoint of the state only at the end of rounds that had
    drafts; on a rejection it restores the checkpoint and re-runs ``x, d_1..d_m`` from it.  A draftless round
    advances the working state but commits nothing, so a rejection in a round with drafts that follows one or more
    draftless rounds restores a checkpoint that lacks the tokens those rounds consumed.  With a drafter that always
    proposes (``skip_prob = 0``) it is the reference.

A :class:`RecurrentLM` is a finite-state machine: ``p(. | s)`` and ``s' = f(s, token)``; :func:`parity3` is the
standard case (a one-bit state a bigram draft cannot see).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterator, Mapping, Sequence

from verifier.errors import invalid_argument
from verifier.exact.rules import residual
from verifier.exact.tabular import MAX_VOCAB, TabularLM, as_fraction_probs

__all__ = ["ROLLBACKS", "MAX_STATES", "RecurrentLM", "parity3", "recurrent_law", "recurrent_target_law"]

ROLLBACKS = ("rolled_back", "not_rolled_back", "stale_checkpoint")  # the state policies of the module docstring
MAX_STATES = 64  # a tabular state machine, not a model: laws are enumerated over vocab ** tokens paths

Law = dict[tuple[int, ...], Fraction]


class RecurrentLM:
    """A rational finite-state language model: next-token law ``rows[s]``, state update ``transitions[s][token]``.

    Parameters
    ----------
    rows : sequence of probability vectors, shape (num_states, vocab_size)
        Next-token law in each state (Fractions, or values :func:`~verifier.exact.as_fraction_probs` takes).
    transitions : sequence of sequences of int, shape (num_states, vocab_size)
        ``transitions[s][t]``: the state after consuming token ``t`` in state ``s``.
    start_state : int, default 0
        The state before the first prompt token.
    name : str, default ""

    Raises
    ------
    InvalidArgumentError
        A row that is not a distribution, ragged or out-of-range sizes, a transition to no state.

    Notes
    -----
    ``probs(prefix)`` is the law after consuming the whole prefix from ``start_state``, so the model also answers
    where a :class:`~verifier.exact.TabularLM`'s ``probs`` is expected.  No EOS (``eos_token_id`` is None).

    Examples
    --------
    >>> lm = RecurrentLM([["1/2", "1/2"], ["1/4", "3/4"]], [[0, 1], [1, 0]])  # state: parity of the 1s
    >>> lm.state_after([1, 1, 1]), [str(p) for p in lm.probs([1, 1, 1])]
    (1, ['1/4', '3/4'])
    """

    eos_token_id = None
    context_len = 0

    def __init__(self, rows: Sequence[Sequence], transitions: Sequence[Sequence[int]], start_state: int = 0,
                 name: str = "") -> None:
        rows, transitions = list(rows), [list(t) for t in transitions]
        if not 1 <= len(rows) <= MAX_STATES:
            raise invalid_argument("rows", f"<{len(rows)} states>", f"1..{MAX_STATES} states")
        self.rows = tuple(as_fraction_probs(r, name=f"rows[{s}]") for s, r in enumerate(rows))
        self.vocab_size = len(self.rows[0])
        if not 1 <= self.vocab_size <= MAX_VOCAB or any(len(r) != self.vocab_size for r in self.rows):
            raise invalid_argument("rows", [len(r) for r in self.rows], f"equal lengths (the vocabulary) in 1..{MAX_VOCAB}")
        states = range(len(self.rows))
        if len(transitions) != len(self.rows) or any(len(t) != self.vocab_size for t in transitions):
            raise invalid_argument("transitions", [len(t) for t in transitions],
                                   f"{len(self.rows)} rows of {self.vocab_size} next states")
        if any(isinstance(s, bool) or not isinstance(s, int) or s not in states for t in transitions for s in t):
            raise invalid_argument("transitions", transitions, f"state ids in 0..{len(self.rows) - 1}")
        if isinstance(start_state, bool) or start_state not in states:
            raise invalid_argument("start_state", start_state, f"a state id in 0..{len(self.rows) - 1}")
        self.transitions = tuple(tuple(t) for t in transitions)
        self.start_state = start_state
        self.num_states = len(self.rows)
        self.name = name

    def state_after(self, tokens: Sequence[int], state: int | None = None) -> int:
        """The state after consuming ``tokens`` from ``state`` (default ``start_state``).

        Raises
        ------
        InvalidArgumentError
            A token id outside the vocabulary.
        """
        s = self.start_state if state is None else state
        for t in tokens:
            if isinstance(t, bool) or not 0 <= int(t) < self.vocab_size:
                raise invalid_argument("tokens", tuple(tokens), f"token ids in 0..{self.vocab_size - 1}")
            s = self.transitions[s][int(t)]
        return s

    def probs(self, prefix: Sequence[int]) -> tuple[Fraction, ...]:
        """Next-token law after consuming ``prefix`` from ``start_state``."""
        return self.rows[self.state_after(prefix)]

    def __repr__(self) -> str:
        return f"RecurrentLM(name={self.name!r}, num_states={self.num_states}, vocab_size={self.vocab_size})"


def parity3() -> tuple[RecurrentLM, TabularLM]:
    """The standard recurrent pair: a 3-token target whose state is (last token, parity of the 0s so far).

    The draft is a bigram on the last token, so it cannot see the parity bit: its drafts are rejected often, and a
    rejected draft 0 flips the bit of a state that is not rolled back.  State id ``2 * last + parity``; start state
    (0, even).

    Returns
    -------
    (RecurrentLM, TabularLM)
        Target and draft, vocabulary 3.
    """
    by_state = {(0, 0): ("1/5", "2/5", "2/5"), (0, 1): ("3/5", "1/5", "1/5"),
                (1, 0): ("1/2", "1/4", "1/4"), (1, 1): ("1/10", "3/5", "3/10"),
                (2, 0): ("1/3", "1/3", "1/3"), (2, 1): ("1/6", "1/6", "2/3")}
    rows = [by_state[(s // 2, s % 2)] for s in range(6)]
    transitions = [[2 * u + ((s % 2) ^ (u == 0)) for u in range(3)] for s in range(6)]
    target = RecurrentLM(rows, transitions, start_state=0, name="parity3")
    draft = TabularLM({(0,): ("2/5", "3/10", "3/10"), (1,): ("3/10", "2/5", "3/10"), (2,): ("1/4", "1/4", "1/2")},
                      vocab_size=3, context_len=1, name="parity3_draft")
    return target, draft


def _law_iv(target, draft, prefix, num_draft_tokens, num_tokens, rollback, skip_prob) -> tuple[tuple[int, ...], Fraction]:
    if not isinstance(target, RecurrentLM):
        raise invalid_argument("target", type(target).__name__, "a verifier.exact.recurrent.RecurrentLM")
    if draft is not None and (getattr(draft, "vocab_size", None) != target.vocab_size or not hasattr(draft, "probs")):
        raise invalid_argument("draft", draft, f"a TabularLM or RecurrentLM with vocab_size={target.vocab_size}")
    prefix = tuple(prefix)
    if not prefix or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < target.vocab_size for t in prefix):
        raise invalid_argument("prefix", prefix, f"at least one token id in 0..{target.vocab_size - 1}")
    if draft is not None and len(prefix) < getattr(draft, "context_len", 0):
        raise invalid_argument("prefix", prefix, f"at least the draft's context_len={draft.context_len} tokens")
    for name, value in (("num_draft_tokens", num_draft_tokens), ("num_tokens", num_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid_argument(name, value, "an integer >= 1")
    if rollback not in ROLLBACKS:
        raise invalid_argument("rollback", rollback, f"one of {ROLLBACKS}")
    try:
        skip = Fraction(skip_prob)
    except (TypeError, ValueError):
        raise invalid_argument("skip_prob", skip_prob, "a probability in [0, 1)") from None
    if not 0 <= skip < 1:
        raise invalid_argument("skip_prob", skip_prob, "a probability in [0, 1) (1: speculative decoding never drafts)")
    return prefix, skip


def recurrent_target_law(target: RecurrentLM, prefix: Sequence[int], num_tokens: int) -> Law:
    """Exact law of the first ``num_tokens`` tokens sampled from a recurrent target after ``prefix``.

    Returns
    -------
    dict tuple[int, ...] -> Fraction
        Over the ``vocab_size ** num_tokens`` sequences (zero-probability ones left out); sums to 1.

    Raises
    ------
    InvalidArgumentError
        As for :func:`recurrent_law`.
    """
    prefix, _ = _law_iv(target, None, prefix, 1, num_tokens, "rolled_back", 0)
    law: Law = {(): Fraction(1)}
    states = {(): target.state_after(prefix)}
    for _ in range(num_tokens):
        nxt: Law = {}
        for seq, prob in law.items():
            s = states[seq]
            for t, p in enumerate(target.rows[s]):
                if p:
                    nxt[seq + (t,)] = prob * p
                    states[seq + (t,)] = target.transitions[s][t]
        law = nxt
    return law


def _draft_paths(draft, context: tuple[int, ...], k: int) -> Iterator[tuple[tuple[int, ...], list, Fraction]]:
    """(d_1..d_k, [q_1..q_k], prob) for every draft block the draft can propose after ``context``."""
    stack = [((), [], Fraction(1))]
    while stack:
        drafts, qs, prob = stack.pop()
        if len(drafts) == k:
            yield drafts, qs, prob
            continue
        q = draft.probs(context + drafts)
        for t, qt in enumerate(q):
            if qt:
                stack.append((drafts + (t,), qs + [q], prob * qt))


def _round(target: RecurrentLM, draft, path, k: int, rollback: str) -> Iterator[tuple[tuple, Fraction]]:
    """Outcomes (next path, prob) of one round with drafts from ``path = (emitted, W, C, x, context)``."""
    emitted, work, ckpt, x, context = path
    for drafts, qs, q_prob in _draft_paths(draft, context, k):
        consumed = [target.transitions[work][x]]  # consumed[j]: the state after x, d_1..d_j
        for d in drafts:
            consumed.append(target.transitions[consumed[-1]][d])
        reach = q_prob  # P(these drafts, d_1..d_j accepted)
        for j in range(k + 1):
            p = target.rows[consumed[j]]  # target law at the position of d_{j+1} (j = k: the bonus position)
            if j == k:
                outcomes = [(y, pj) for y, pj in enumerate(p)]
            else:
                d, qd = drafts[j], qs[j][drafts[j]]
                accept = min(Fraction(1), p[d] / qd)
                res = residual(p, qs[j])
                outcomes = [] if res is None else [(y, (1 - accept) * r) for y, r in enumerate(res)]
            for y, prob in outcomes:
                if not prob:
                    continue
                if rollback == "rolled_back" or j == k:
                    new_work = consumed[j]
                elif rollback == "not_rolled_back":
                    new_work = consumed[k]  # BUG modelled: the rejected drafts d_{j+1}..d_k stay in the state
                else:  # stale_checkpoint: restore the committed state, re-run x, d_1..d_j from it
                    new_work = target.state_after((x,) + drafts[:j], ckpt)
                tokens = drafts[:j] + (y,)
                yield (emitted + tokens, new_work, new_work, y, context + tokens), reach * prob
            if j < k:
                reach *= min(Fraction(1), p[drafts[j]] / qs[j][drafts[j]])
                if not reach:
                    break


def recurrent_law(target: RecurrentLM, draft: TabularLM, prefix: Sequence[int], num_draft_tokens: int,
                  num_tokens: int, *, rollback: str = "rolled_back", skip_prob=0) -> Law:
    """Exact law of the first ``num_tokens`` emitted tokens of speculative decoding over a recurrent target.

    Canonical speculative sampling (Leviathan et al. 2023 Alg. 1): accept ``d_j`` with ``min(1, p/q)``, recovered
    token ~ ``max(p - q, 0)`` normalised, bonus token ~ target row ``k + 1``; the target's law at each position is
    read off the state the decoder actually holds, which depends on ``rollback`` (module docstring).

    Parameters
    ----------
    target : RecurrentLM
    draft : TabularLM (or RecurrentLM)
        Stateless drafter read on the true emitted context (its KV cache rolled back correctly).
    prefix : sequence of int
        The prompt, at least one token (and the draft's ``context_len``).  The target consumes ``prefix[:-1]`` at
        prefill; ``prefix[-1]`` is the first pending token.
    num_draft_tokens : int
        k, drafts proposed in a round that drafts, >= 1.
    num_tokens : int
        Emitted tokens the law covers (a round's block past it is cut), >= 1.
    rollback : {"rolled_back", "not_rolled_back", "stale_checkpoint"}, default "rolled_back"
    skip_prob : Fraction-like, default 0
        Probability that a round proposes no draft tokens (independently per round, also the first): the
        intermittent drafter.  In [0, 1).

    Returns
    -------
    dict tuple[int, ...] -> Fraction
        Law of the emitted tokens 1..``num_tokens``; sums to 1.

    Raises
    ------
    InvalidArgumentError
        ``target`` not a RecurrentLM, a draft of another vocabulary, a bad prefix, counts < 1, an unknown
        ``rollback`` or ``skip_prob`` outside [0, 1).

    Notes
    -----
    Paths are kept as (emitted, working state, committed checkpoint, pending token, draft context), merged when
    equal; the work grows as ``vocab ** (num_tokens + k)``.

    Examples
    --------
    >>> target, draft = parity3()
    >>> recurrent_law(target, draft, (0,), 2, 3) == recurrent_target_law(target, (0,), 3)
    True
    >>> recurrent_law(target, draft, (0,), 2, 3, rollback="not_rolled_back") == recurrent_target_law(target, (0,), 3)
    False
    """
    prefix, skip = _law_iv(target, draft, prefix, num_draft_tokens, num_tokens, rollback, skip_prob)
    start = target.state_after(prefix[:-1])
    frontier: dict[tuple, Fraction] = {((), start, start, prefix[-1], prefix): Fraction(1)}
    law: Law = {}
    while frontier:
        nxt: dict[tuple, Fraction] = {}

        def add(path, prob):
            if len(path[0]) >= num_tokens:
                law[path[0][:num_tokens]] = law.get(path[0][:num_tokens], Fraction(0)) + prob
            else:
                nxt[path] = nxt.get(path, Fraction(0)) + prob

        for path, prob in frontier.items():
            emitted, work, ckpt, x, context = path
            if skip:  # draftless round: feed x, emit one target token; the checkpoint is not committed
                s0 = target.transitions[work][x]
                for y, py in enumerate(target.rows[s0]):
                    if py:
                        add((emitted + (y,), s0, ckpt, y, context + (y,)), prob * skip * py)
            for new_path, p in _round(target, draft, path, num_draft_tokens, rollback):
                add(new_path, prob * (1 - skip) * p)
        frontier = nxt
    return law

