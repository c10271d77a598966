"""Exact laws of one tree-verification round and of the first N emitted tokens, on tabular models.

Same law format as :mod:`verifier.exact.laws` (tuple of token ids -> :class:`~fractions.Fraction`,
N-token tuples padded with -1 after EOS), so ``tree_n_token_law(...) == target_law(...)`` is the
proof that a tree rule preserves the target on that model pair and shape, and
:func:`~verifier.exact.laws.total_variation` the size of a bug.

The enumeration, at the current node: the candidates (its children -- or, for the
``child_of_rejected`` mutant, every node one level deeper) are verified in order as a dynamic
programme over *verification states* ``(working target, working draft law, law of the last token,
what is left to draw)``.  Each candidate's token is drawn lazily from its parent's draft law given
the state (i.i.d.; without replacement; top-k), and rejection branches that reach the same state
are merged -- for i.i.d. MSS the state after a rejection does not depend on the rejected token, so
the cost grows linearly, not exponentially, with the width.  A rule whose order or next level
needs every sibling's token first (``sorted_by_draft_prob``; ``child_of_rejected`` above a level
with children) draws the siblings jointly before verifying.  An accepted EOS ends the round.

Glossary: see :mod:`verifier.protocols`; the rules in :mod:`verifier.exact.tree_rules`.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from fractions import Fraction
from types import SimpleNamespace
from typing import Iterator, Sequence

from verifier.exact.laws import Law, _cut, _models_iv, _positive_int_iv, _rounds_law
from verifier.exact.rules import TYPICAL_DELTA, TYPICAL_EPSILON, _exceeds_typical_threshold
from verifier.exact.tabular import TabularLM
from verifier.exact.tree_rules import TreeRule, get_tree_rule, top_k_order
from verifier.exact.tree_shape import TreeShape, parse_tree

__all__ = ["tree_round_law", "tree_n_token_law", "tree_accepted_count_law"]

_ABSENT = -1  # a without-replacement or top-k slot that cannot be filled (the draft law is exhausted)


def _child_law(rule: TreeRule, q: tuple, remaining: tuple | None, slot: int) -> list[tuple[int, Fraction]]:
    """Law of the token of child ``slot`` of a node with draft law q (``remaining``: q minus drawn siblings)."""
    if rule.proposal == "iid":
        return [(x, v) for x, v in enumerate(q) if v]
    if rule.proposal == "top_k":
        order = top_k_order(q)
        return [(order[slot], Fraction(1))] if slot < len(order) else [(_ABSENT, Fraction(1))]
    if not any(remaining):
        return [(_ABSENT, Fraction(1))]
    return [(x, v) for x, v in enumerate(remaining) if v]


def _without(law: tuple, x: int) -> tuple:
    removed = tuple(Fraction(0) if y == x else v for y, v in enumerate(law))
    total = sum(removed)
    return tuple(v / total for v in removed) if total else removed


def _round_outcomes(target: TabularLM, draft: TabularLM, prefix: tuple[int, ...], shape: TreeShape,
                    rule: TreeRule) -> Iterator[tuple[tuple[int, ...], int, Fraction]]:
    """Yield ``(emitted tokens, accepted draft tokens, probability)`` of one round (outcomes may repeat)."""
    if rule.verification == "typical":
        yield from _typical_outcomes(target, draft, prefix, shape)
        return
    eos = target.eos_token_id
    memo: dict = {}

    def node_law(path, node_shape, level) -> dict:
        """Law of ``(tokens emitted after this accepted node, draft tokens among them)`` (memoized)."""
        key = (path, node_shape, level)
        if key not in memo:
            memo[key] = _node_law(path, node_shape, level)
        return memo[key]

    def _node_law(path, node_shape, level) -> dict:
        # path: the node's own token path below the root; level: (path, shape) of every node at
        # this depth, or None (used by the next-level mutant only)
        out: dict = defaultdict(Fraction)
        if path and path[-1] == eos:  # an accepted EOS ends the sequence
            out[((), 0)] += 1
            return out
        p, q = target.probs(prefix + path), draft.probs(prefix + path)
        parents = [(path, node_shape)] if rule.candidates == "children" or not path or level is None else list(level)
        slots = [(g, ppath, j, cshape) for g, (ppath, pshape) in enumerate(parents) for j, cshape in enumerate(pshape)]
        if not slots:  # an accepted leaf: bonus token (from the parent's target for one mutant)
            bonus = target.probs(prefix + path[:-1]) if rule.bonus_from_parent and path else p
            for y, py in enumerate(bonus):
                if py:
                    out[((y,), 0)] += py
            return out
        drafts = [draft.probs(prefix + ppath) for ppath, _ in parents]
        joint = rule.verify_order == "draft_prob" or (rule.candidates == "next_level" and any(c for *_, c in slots))
        if not joint:
            verify(out, p, q, [(s, None) for s in slots], drafts, None, Fraction(1))
            return out
        for tokens, pr in _joint_draws(rule, slots, drafts):
            order = list(range(len(slots)))
            if rule.verify_order == "draft_prob":  # stable sort of each sibling group by draft prob, descending
                order.sort(key=lambda i: (slots[i][0], -drafts[slots[i][0]][tokens[i]] if tokens[i] != _ABSENT else 1))
            next_level = (tuple((ppath + (t,), cshape) for (g, ppath, j, cshape), t in zip(slots, tokens) if t != _ABSENT)
                          if rule.candidates == "next_level" else None)  # None keeps the memo keys few
            verify(out, p, q, [(slots[i], tokens[i]) for i in order], drafts, next_level, pr)
        return out

    def verify(out, p, q, slots, drafts, next_level, prob) -> None:
        # slots: ((group, parent path, slot, shape), token) -- token None: drawn lazily from the proposal
        states: dict = {(p, q, p, tuple(drafts)): prob}  # (working target, working draft, last-token law, left to draw)
        for (g, ppath, j, cshape), fixed_token in slots:
            nxt: dict = defaultdict(Fraction)
            for (pc, qc, last, left), sp in states.items():
                law = [(fixed_token, Fraction(1))] if fixed_token is not None else _child_law(rule, drafts[g], left[g], j)
                for x, lx in law:
                    if x == _ABSENT:
                        nxt[(pc, qc, last, left)] += sp * lx
                        continue
                    a = rule.acceptance(pc, qc, x)
                    if a:
                        for (suffix, n), pr in node_law(ppath + (x,), cshape, next_level).items():
                            out[((x,) + suffix, n + 1)] += sp * lx * a * pr
                    if a != 1:
                        np_, nq, nlast = rule.after_rejection(pc, qc, x)
                        nleft = left[:g] + (_without(left[g], x),) + left[g + 1:] if rule.proposal == "without_replacement" else left
                        nxt[(np_, nq, nlast, nleft)] += sp * lx * (1 - a)
            states = nxt
        for (_, _, last, _), sp in states.items():  # every candidate rejected: the recovered token
            for y, py in enumerate(last):
                if py:
                    out[((y,), 0)] += sp * py

    for (emitted, accepted), prob in node_law((), shape, (((), shape),)).items():
        yield emitted, accepted, prob


def _joint_draws(rule: TreeRule, slots, drafts) -> Iterator[tuple[tuple[int, ...], Fraction]]:
    """Joint law of every slot's token (siblings of one group follow the proposal; groups independent)."""
    groups = sorted({g for g, *_ in slots})
    per_group = []
    for g in groups:
        js = [j for gg, _, j, _ in slots if gg == g]
        outcomes: list[tuple[tuple[int, ...], Fraction]] = [((), Fraction(1))]
        for j in js:
            grown = []
            for toks, pr in outcomes:
                left = drafts[g]
                for t in toks:
                    left = _without(left, t) if t != _ABSENT else left
                for x, lx in _child_law(rule, drafts[g], left, j):
                    grown.append((toks + (x,), pr * lx))
            outcomes = grown
        per_group.append(outcomes)
    for combo in itertools.product(*per_group):
        tokens = tuple(t for toks, _ in combo for t in toks)
        prob = Fraction(1)
        for _, pr in combo:
            prob *= pr
        yield tokens, prob


def _typical_outcomes(target, draft, prefix, shape) -> Iterator[tuple[tuple[int, ...], int, Fraction]]:
    """Medusa on a tree: deterministic top-k tree, deepest fully-accepted node (first in DFS order)."""
    eos = target.eos_token_id
    best: list[tuple[int, ...]] = [()]

    def walk(path, node_shape):
        if path and path[-1] == eos:
            return
        p, order = target.probs(prefix + path), top_k_order(draft.probs(prefix + path))
        for j, child in enumerate(node_shape[: len(order)]):
            x = order[j]
            if _exceeds_typical_threshold(p, x, TYPICAL_EPSILON, TYPICAL_DELTA):
                if len(path) + 1 > len(best[0]):
                    best[0] = path + (x,)
                walk(path + (x,), child)

    walk((), shape)
    path = best[0]
    if path and path[-1] == eos:
        yield path, len(path), Fraction(1)
        return
    for y, py in enumerate(target.probs(prefix + path)):
        if py:
            yield path + (y,), len(path), py


def _tree_round_law(target, draft, prefix, shape, rule, max_new_tokens) -> Law:
    law: Law = defaultdict(Fraction)
    for emitted, _, prob in _round_outcomes(target, draft, prefix, shape, rule):
        law[_cut(emitted, target.eos_token_id, max_new_tokens)] += prob
    return dict(law)


def _tree_n_token_law(target, draft, prefix, shape, num_tokens, rule) -> Law:
    # a round's law depends on the context only through its last context_len tokens: cache by that tail
    tail = max(target.context_len, draft.context_len)
    cache: dict = {}

    def one_round(ctx, limit):
        key = (ctx[len(ctx) - tail:] if tail else (), limit)
        if key not in cache:
            cache[key] = _tree_round_law(target, draft, ctx, shape, rule, limit)
        return cache[key]

    return _rounds_law(one_round, prefix, num_tokens, target.eos_token_id)


def _tree_iv(target, draft, prefix, tree, rule, fn) -> tuple[TreeRule, tuple[int, ...], TreeShape]:
    rule_obj = get_tree_rule(rule)
    shape = parse_tree(tree)
    prefix_t = _models_iv(target, draft, prefix, 1, fn, SimpleNamespace(name=rule_obj.name))  # reads only .name
    return rule_obj, prefix_t, shape


def tree_round_law(target: TabularLM, draft: TabularLM, prefix: Sequence[int], tree: str | TreeShape,
                   rule: str | TreeRule = "iid_multi_draft", max_new_tokens: int | None = None) -> Law:
    """Exact law of the emitted tokens of one tree-verification round.

    Parameters
    ----------
    target, draft : TabularLM
        Same ``vocab_size`` and ``eos_token_id``.
    prefix : sequence of int
        The context (prompt plus tokens emitted so far).
    tree : str or nested tuple
        Static tree shape, e.g. ``"2;1,1"`` (:func:`~verifier.exact.tree_shape.parse_tree`).
    rule : str or TreeRule, default "iid_multi_draft"
        A name in :data:`~verifier.exact.tree_rules.TREE_RULES`.
    max_new_tokens : int or None, default None
        Emitted tokens beyond this many are dropped.

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Emitted tokens (length 1 .. depth + 1, ending at the first EOS) -> probability.

    Raises
    ------
    InvalidArgumentError
        Mismatched models, a bad prefix, an unknown rule, a malformed tree or ``max_new_tokens < 1``.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs, round_law
    >>> pair = standard_tabular_pairs()["bigram4_eos"]
    >>> tree_round_law(pair.target, pair.draft, pair.prefix, "1;1") == round_law(pair.target, pair.draft, pair.prefix, 2)
    True
    """
    rule_obj, prefix_t, shape = _tree_iv(target, draft, prefix, tree, rule, "tree_round_law")
    if max_new_tokens is not None:
        _positive_int_iv(max_new_tokens, "max_new_tokens", f"tree_round_law(rule={rule_obj.name!r})")
    return _tree_round_law(target, draft, prefix_t, shape, rule_obj, max_new_tokens)


def tree_n_token_law(target: TabularLM, draft: TabularLM, prefix: Sequence[int], tree: str | TreeShape, num_tokens: int,
                     rule: str | TreeRule = "iid_multi_draft") -> Law:
    """Exact law of the first ``num_tokens`` emitted tokens over as many tree rounds as needed.

    Parameters
    ----------
    target, draft, prefix, tree, rule
        As in :func:`tree_round_law`; every round drafts the same static tree.
    num_tokens : int
        N >= 1, the length of every returned tuple.

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Tuples of length N, -1 after EOS.  Equals :func:`~verifier.exact.target_law` iff the rule
        preserves the target's N-token law on this pair and tree.

    Raises
    ------
    InvalidArgumentError
        As :func:`tree_round_law`, and ``num_tokens < 1``.

    Notes
    -----
    Keep vocab <= 4, N <= 3 and trees of depth <= 2, width <= 3: the cost grows with
    ``vocab ** N`` rounds times the tree's verification states.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs, target_law
    >>> pair = standard_tabular_pairs()["trigram3"]
    >>> tree_n_token_law(pair.target, pair.draft, pair.prefix, "2;1,1", 3) == target_law(pair.target, pair.prefix, 3)
    True
    """
    rule_obj, prefix_t, shape = _tree_iv(target, draft, prefix, tree, rule, "tree_n_token_law")
    _positive_int_iv(num_tokens, "num_tokens", f"tree_n_token_law(rule={rule_obj.name!r})")
    return _tree_n_token_law(target, draft, prefix_t, shape, num_tokens, rule_obj)


def tree_accepted_count_law(target: TabularLM, draft: TabularLM, prefix: Sequence[int], tree: str | TreeShape,
                            rule: str | TreeRule = "iid_multi_draft") -> tuple[Fraction, ...]:
    """Exact law of the number of accepted draft tokens in one tree round.

    Returns
    -------
    tuple of Fraction, shape (depth + 1,)
        Entry j is P(j draft tokens accepted); ``sum(j * law[j]) + 1`` is the mean number of emitted
        tokens per round (without EOS) -- the efficiency figure of a tree.

    Raises
    ------
    InvalidArgumentError
        As :func:`tree_round_law`.
    """
    from verifier.exact.tree_shape import tree_depth

    rule_obj, prefix_t, shape = _tree_iv(target, draft, prefix, tree, rule, "tree_accepted_count_law")
    counts = [Fraction(0)] * (tree_depth(shape) + 1)
    for _, accepted, prob in _round_outcomes(target, draft, prefix_t, shape, rule_obj):
        counts[accepted] += prob
    return tuple(counts)
