"""Minimal counterexamples: Hypothesis searches small rational model pairs on which a rule is biased.

The search space is tabular pairs with vocab 2-3, context length 0 (a single (p, q) pair) or 1
(a bigram), k in {1, 2} and N in 1..k+1 compared tokens; every probability row is a vector of
small integer weights (0..4) divided by their sum (all-zero weights mean uniform).  Hypothesis
shrinks towards fewer tokens, context length 0, k = 1, N = 1 and small weights, so a rule that is
wrong in a single step comes back as a plain (p, q) pair, and a round-level mutant as the smallest
round that shows it.  The search is derandomized (same result on every run) and cached per rule.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from fractions import Fraction

from verifier.exact.laws import _n_token_law, target_law, total_variation
from verifier.exact.rules import Rule, get_rule
from verifier.exact.tabular import TabularLM

__all__ = ["Counterexample", "find_counterexample", "small_cases", "SEARCH_MAX_EXAMPLES"]

SEARCH_MAX_EXAMPLES = 300  # examples Hypothesis generates before shrinking (fixed seed); enough for every mutant
MAX_WEIGHT = 4  # probability rows are integer weights 0..MAX_WEIGHT over their sum


@dataclass(frozen=True)
class Counterexample:
    """A smallest case found on which a rule's law differs from the target's.

    Attributes
    ----------
    rule : str
    target, draft : TabularLM
    prefix : tuple of int
    num_draft_tokens, num_tokens : int
    rule_law, target_law : dict[tuple[int, ...], Fraction]
        Laws of the first ``num_tokens`` emitted tokens.
    tv : Fraction
    """

    rule: str
    target: TabularLM
    draft: TabularLM
    prefix: tuple[int, ...]
    num_draft_tokens: int
    num_tokens: int
    rule_law: dict
    target_law: dict
    tv: Fraction

    def describe(self) -> str:
        """One paste-able line: the (p, q) pair or the tables, k, N, both laws and the TV."""
        if self.target.context_len == 0:
            models = f"p={_vec(self.target.probs(()))} q={_vec(self.draft.probs(()))}"
        else:
            models = "p=" + _table(self.target) + " q=" + _table(self.draft) + f" prefix={self.prefix}"
        return (f"{models} k={self.num_draft_tokens} N={self.num_tokens}: law={_law(self.rule_law)} "
                f"target={_law(self.target_law)} TV={_short(self.tv)}")

    def to_json(self) -> dict:
        def rows(m):
            return {",".join(map(str, c)) or "()": [str(v) for v in m.probs(c)] for c in m.contexts}

        return {
            "rule": self.rule, "context_len": self.target.context_len, "target": rows(self.target),
            "draft": rows(self.draft), "prefix": list(self.prefix), "num_draft_tokens": self.num_draft_tokens,
            "num_tokens": self.num_tokens, "tv": str(self.tv), "text": self.describe(),
        }


def find_counterexample(rule: str | Rule, max_examples: int = SEARCH_MAX_EXAMPLES) -> Counterexample | None:
    """Search for, and shrink, a small model pair on which ``rule`` is not exact.

    Parameters
    ----------
    rule : str or Rule
        A name in :data:`~verifier.exact.rules.RULES` or a Rule.
    max_examples : int, default 300
        Hypothesis' example budget before shrinking; the search is derandomized.

    Returns
    -------
    Counterexample or None
        None when no counterexample was found within the budget (expected for exact rules; it is
        evidence, the proofs are the property tests and :func:`verifier.exact.step_law`).

    Raises
    ------
    InvalidArgumentError
        Unknown rule name (the message lists the allowed names) or ``max_examples < 1``.

    Examples
    --------
    >>> find_counterexample("full_p_fallback").describe()  # doctest: +ELLIPSIS
    'p=(...) q=(...) k=1 N=1: law=... TV=...'
    """
    rule_obj = get_rule(rule)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        from verifier.errors import invalid_argument

        raise invalid_argument("max_examples", max_examples, "an integer >= 1", where="find_counterexample")
    if isinstance(rule, str):
        return _cached_search(rule_obj.name, max_examples)
    return _search(rule_obj, max_examples)


@functools.lru_cache(maxsize=None)
def _cached_search(name: str, max_examples: int) -> Counterexample | None:
    return _search(get_rule(name), max_examples)


def small_cases():
    """Hypothesis strategy of ``(target, draft, prefix, k, N)`` small tabular cases (see module doc)."""
    from hypothesis import strategies as st

    @st.composite
    def cases(draw):
        context_len = draw(st.integers(0, 1))
        vocab = draw(st.integers(2, 3))
        k = draw(st.integers(1, 2))
        num_tokens = draw(st.integers(1, k + 1))
        contexts = list(itertools.product(range(vocab), repeat=context_len))

        def row():
            weights = draw(st.lists(st.integers(0, MAX_WEIGHT), min_size=vocab, max_size=vocab))
            total = sum(weights)
            return [Fraction(w, total) if total else Fraction(1, vocab) for w in weights]

        target = TabularLM({c: row() for c in contexts}, vocab, context_len, name="counterexample/target")
        draft = TabularLM({c: row() for c in contexts}, vocab, context_len, name="counterexample/draft")
        return target, draft, (0,) * context_len, k, num_tokens

    return cases()


def _search(rule: Rule, max_examples: int) -> Counterexample | None:
    from hypothesis import HealthCheck, find, settings
    from hypothesis.errors import NoSuchExample

    def biased(case) -> bool:
        target, draft, prefix, k, n = case
        return _n_token_law(target, draft, prefix, k, n, rule) != target_law(target, prefix, n)

    config = settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))
    try:
        target, draft, prefix, k, n = find(small_cases(), biased, settings=config)
    except NoSuchExample:
        return None
    law = _n_token_law(target, draft, prefix, k, n, rule)
    tl = target_law(target, prefix, n)
    return Counterexample(rule.name, target, draft, prefix, k, n, law, tl, total_variation(law, tl))


def _vec(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + ")"


def _table(model: TabularLM) -> str:
    return "{" + ", ".join(f"{c[0] if len(c) == 1 else c}: {_vec(model.probs(c))}" for c in model.contexts) + "}"


def _law(law: dict) -> str:
    items = sorted(law.items())
    if all(len(k) == 1 for k, _ in items):  # a single-token law: show it as a vector over its tokens
        return "{" + ", ".join(f"{k[0]}: {_short(v)}" for k, v in items) + "}"
    return "{" + ", ".join(f"{''.join(map(str, k))}: {_short(v)}" for k, v in items) + "}"


def _short(v: Fraction) -> str:
    """Exact when short, else a float with the note that it is rounded (softmax-residual laws)."""
    s = str(v)
    return s if len(s) <= 15 else f"~{float(v):.6g}"
