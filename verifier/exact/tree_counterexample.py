"""Minimal tree counterexamples: Hypothesis searches small model pairs and trees on which a tree rule is biased.

Search space (as :mod:`verifier.exact.counterexample`, plus the tree): vocab 2-3, context length
0 or 1, a tree of depth <= 2 and width <= 3 (root 1-3 children, each with 0-3 children), N in
1..depth+1 compared tokens, probability rows of small integer weights 0..4.  Hypothesis shrinks
towards vocab 2, a context-free pair, one child, no grandchildren, N = 1 and small weights, so a
sibling-level bug comes back as a (p, q) pair and a width-2 root, and a depth-level bug as the
smallest two-level tree that shows it.  Derandomized and cached per rule.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from fractions import Fraction

from verifier.errors import invalid_argument
from verifier.exact.counterexample import MAX_WEIGHT, SEARCH_MAX_EXAMPLES, Counterexample
from verifier.exact.laws import target_law, total_variation
from verifier.exact.tabular import TabularLM
from verifier.exact.tree_laws import _tree_n_token_law
from verifier.exact.tree_rules import TreeRule, get_tree_rule
from verifier.exact.tree_shape import TreeShape, tree_depth, tree_label

__all__ = ["TreeCounterexample", "find_tree_counterexample", "small_tree_cases", "MAX_TREE_WIDTH", "MAX_TREE_DEPTH"]

MAX_TREE_WIDTH = 3  # children per node in the search
MAX_TREE_DEPTH = 2  # draft tokens on the longest path in the search


@dataclass(frozen=True)
class TreeCounterexample(Counterexample):
    """A :class:`~verifier.exact.counterexample.Counterexample` with the tree (``num_draft_tokens`` is its depth)."""

    tree: TreeShape = ()

    def describe(self) -> str:
        return f"tree={tree_label(self.tree)} " + super().describe()

    def to_json(self) -> dict:
        out = super().to_json()
        out["tree"] = tree_label(self.tree)
        out["text"] = self.describe()
        return out


def small_tree_cases():
    """Hypothesis strategy of ``(target, draft, prefix, tree, N)`` small tree cases (see module doc)."""
    from hypothesis import strategies as st

    @st.composite
    def cases(draw):
        context_len = draw(st.integers(0, 1))
        vocab = draw(st.integers(2, 3))
        width = draw(st.integers(1, MAX_TREE_WIDTH))
        tree = tuple(tuple(() for _ in range(draw(st.integers(0, MAX_TREE_WIDTH)))) for _ in range(width))
        num_tokens = draw(st.integers(1, tree_depth(tree) + 1))
        contexts = list(itertools.product(range(vocab), repeat=context_len))

        def row():
            weights = draw(st.lists(st.integers(0, MAX_WEIGHT), min_size=vocab, max_size=vocab))
            total = sum(weights)
            return [Fraction(w, total) if total else Fraction(1, vocab) for w in weights]

        target = TabularLM({c: row() for c in contexts}, vocab, context_len, name="counterexample/target")
        draft = TabularLM({c: row() for c in contexts}, vocab, context_len, name="counterexample/draft")
        return target, draft, (0,) * context_len, tree, num_tokens

    return cases()


def find_tree_counterexample(rule: str | TreeRule, max_examples: int = SEARCH_MAX_EXAMPLES) -> TreeCounterexample | None:
    """Search for, and shrink, a small model pair and tree on which a tree rule is not exact.

    Parameters
    ----------
    rule : str or TreeRule
        A name in :data:`~verifier.exact.tree_rules.TREE_RULES` or a TreeRule.
    max_examples : int, default 300
        Hypothesis' example budget before shrinking; derandomized (same answer every run).

    Returns
    -------
    TreeCounterexample or None
        None when none was found in the budget (expected for the lossless rules).

    Raises
    ------
    InvalidArgumentError
        Unknown rule or ``max_examples < 1``.

    Examples
    --------
    >>> find_tree_counterexample("residual_not_updated").describe()  # doctest: +ELLIPSIS
    'tree=2 p=(...) q=(...) k=1 N=1: law=... TV=...'
    """
    rule_obj = get_tree_rule(rule)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise invalid_argument("max_examples", max_examples, "an integer >= 1", where="find_tree_counterexample")
    if isinstance(rule, str):
        return _cached_search(rule_obj.name, max_examples)
    return _search(rule_obj, max_examples)


@functools.lru_cache(maxsize=None)
def _cached_search(name: str, max_examples: int) -> TreeCounterexample | None:
    return _search(get_tree_rule(name), max_examples)


def _search(rule: TreeRule, max_examples: int) -> TreeCounterexample | None:
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    def biased(case) -> bool:
        target, draft, prefix, tree, n = case
        return _tree_n_token_law(target, draft, prefix, tree, n, rule) != target_law(target, prefix, n)

    # generate + shrink only: the explain phase traces every line (2x slower under pytest) and adds nothing here
    config = settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    try:
        target, draft, prefix, tree, n = find(small_tree_cases(), biased, settings=config)
    except NoSuchExample:
        return None
    law = _tree_n_token_law(target, draft, prefix, tree, n, rule)
    tl = target_law(target, prefix, n)
    return TreeCounterexample(rule.name, target, draft, prefix, tree_depth(tree), n, law, tl, total_variation(law, tl), tree=tree)
