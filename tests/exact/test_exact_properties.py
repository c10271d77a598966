"""Hypothesis property tests: exact rules are exact everywhere; every mutant has a counterexample.

Reproduce a failure with the ``@seed`` / ``@reproduce_failure`` line Hypothesis prints.
"""

import itertools
from fractions import Fraction as F

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from verifier.exact import RULES, TabularLM, find_counterexample, n_token_law, step_law, target_law
from verifier.exact.counterexample import small_cases

EXACT_RULES = [n for n, r in RULES.items() if r.declared == "exact"]
MUTANTS = [n for n, r in RULES.items() if r.declared != "exact"]
ROUND_LEVEL = {"bonus_wrong_position", "draft_suffix_kept", "shared_uniform"}


@st.composite
def rational_probs(draw, size):
    """A rational distribution of the given size; zeros and one-hot vectors are common."""
    weights = draw(st.lists(st.integers(0, 12), min_size=size, max_size=size).filter(any))
    total = sum(weights)
    return tuple(F(w, total) for w in weights)


@st.composite
def prob_pairs(draw):
    size = draw(st.integers(1, 6))
    p = draw(rational_probs(size))
    kind = draw(st.sampled_from(["independent", "equal", "one_hot_draft", "disjoint"]))
    if kind == "equal":
        return p, p
    if kind == "one_hot_draft":
        hot = draw(st.integers(0, size - 1))
        return p, tuple(F(int(i == hot)) for i in range(size))
    if kind == "disjoint" and size > 1 and 0 < sum(1 for v in p if v) < size:
        zeros = [i for i, v in enumerate(p) if not v]
        w = draw(st.lists(st.integers(1, 5), min_size=len(zeros), max_size=len(zeros)))
        q = [F(0)] * size
        for i, wi in zip(zeros, w):
            q[i] = F(wi, sum(w))
        return p, tuple(q)
    return p, draw(rational_probs(size))


@pytest.mark.parametrize("rule", EXACT_RULES)
@settings(max_examples=300, deadline=None)
@given(pair=prob_pairs())
@example(pair=((F(1, 5), F(1, 2), F(3, 10)), (F(1, 5), F(1, 2), F(3, 10))))  # p == q
@example(pair=((F(0), F(1)), (F(1), F(0))))  # disjoint supports
@example(pair=((F(1),), (F(1),)))  # vocab 1
def test_exact_rules_give_p_in_one_step(rule, pair):
    p, q = pair
    law = step_law(p, q, rule)
    assert law.output_law == p
    assert sum(law.accepted_mass) + law.rejection_prob == 1
    if law.rejection_prob == 0:
        assert law.residual is None


@st.composite
def tabular_pairs(draw):
    """Random small target/draft n-gram pairs (vocab 2-4, context 0-2, optional EOS), k and N."""
    vocab = draw(st.integers(2, 4))
    context_len = draw(st.integers(0, 2 if vocab <= 3 else 1))
    eos = draw(st.one_of(st.none(), st.integers(0, vocab - 1)))
    contexts = list(itertools.product(range(vocab), repeat=context_len))
    target = TabularLM({c: draw(rational_probs(vocab)) for c in contexts}, vocab, context_len, eos)
    draft = TabularLM({c: draw(rational_probs(vocab)) for c in contexts}, vocab, context_len, eos)
    prefix = tuple(draw(st.lists(st.integers(0, vocab - 1), min_size=context_len, max_size=context_len)))
    k = draw(st.integers(1, 3))
    num_tokens = draw(st.integers(1, 3))
    return target, draft, prefix, k, num_tokens


@pytest.mark.parametrize("rule", EXACT_RULES)
@settings(max_examples=60, deadline=None)
@given(case=tabular_pairs())
def test_exact_rules_preserve_the_n_token_law_of_random_tabular_models(rule, case):
    target, draft, prefix, k, num_tokens = case
    assert n_token_law(target, draft, prefix, k, num_tokens, rule) == target_law(target, prefix, num_tokens)


@pytest.mark.parametrize("rule", MUTANTS)
def test_every_mutant_has_a_small_shrunk_counterexample(rule):
    cx = find_counterexample(rule)
    assert cx is not None
    # the counterexample is re-checked independently of the search
    law = n_token_law(cx.target, cx.draft, cx.prefix, cx.num_draft_tokens, cx.num_tokens, rule)
    assert law == cx.rule_law != target_law(cx.target, cx.prefix, cx.num_tokens) == cx.target_law
    assert cx.tv > 0
    assert cx.target.vocab_size == 2  # shrunk to the smallest vocabulary
    if rule in ROUND_LEVEL:
        assert cx.num_tokens >= 2  # needs a round of at least two emitted tokens
    else:
        assert (cx.target.context_len, cx.num_draft_tokens, cx.num_tokens) == (0, 1, 1)  # a plain (p, q) pair
        assert step_law(cx.target.probs(()), cx.draft.probs(()), rule).output_law != cx.target.probs(())
    assert "p=" in cx.describe() and "TV=" in cx.describe()


def test_search_finds_nothing_for_the_canonical_rule_and_is_deterministic():
    assert find_counterexample("canonical", max_examples=100) is None
    assert find_counterexample("full_p_fallback").describe() == find_counterexample(RULES["full_p_fallback"]).describe()


small = small_cases()  # the strategy the search uses must itself produce valid cases


@settings(max_examples=30, deadline=None)
@given(case=small)
def test_search_space_cases_are_valid(case):
    target, draft, prefix, k, num_tokens = case
    assert 1 <= num_tokens <= k + 1 and len(prefix) == target.context_len
    assert sum(target_law(target, prefix, num_tokens).values()) == 1
