"""Exact reproductions of the two llama.cpp ``llama-speculative`` defects (no engine needed).

Expected values come from the exact enumerator (``verifier.exact.step_law``) and hand-computed
fractions; see reports/audits/llama.cpp-0.3.36/FINDINGS.md."""

from fractions import Fraction as F

import pytest

from verifier.engines.llama_cpp_repro import speculative_step_law
from verifier.exact import step_law

CASES = [  # (target, draft) processed probs; the seed cases of DESIGN.md and two more
    ([F(2, 10), F(5, 10), F(3, 10)], [F(5, 10), F(3, 10), F(2, 10)]),
    ([F(4, 10), F(2, 10), F(4, 10)], [F(2, 10), F(5, 10), F(3, 10)]),
    ([F(1, 2), F(1, 3), F(1, 6)], [F(1, 6), F(1, 2), F(1, 3)]),
    ([F(1, 7), F(2, 7), F(4, 7)], [F(3, 8), F(3, 8), F(1, 4)]),
]


@pytest.mark.parametrize("target, draft", CASES)
def test_as_shipped_equals_the_bug_zoo_greedy_draft_law(target, draft):
    """Full vocabulary (no top-k/top-p): the shipped step law is exactly ``greedy_draft``, not the target."""
    shipped = speculative_step_law(target, draft)
    assert shipped == list(step_law(target, draft, "greedy_draft").output_law)
    assert shipped != target


@pytest.mark.parametrize("target, draft", CASES)
def test_sampled_draft_control_is_exact(target, draft):
    assert speculative_step_law(target, draft, draft_token="sampled") == target


def test_residual_by_array_index_is_biased_once_truncation_differs():
    """top-k = 2 kept {0, 1} for the target and {1, 2} for the draft: the residual subtracts q(2) from
    p(1) and q(1) from p(0).  Even with the sampled draft token, token 1 gets probability 1 instead of 1/2."""
    target = [F(1, 2), F(1, 2), F(0)]
    draft = [F(0), F(9, 10), F(1, 10)]
    assert speculative_step_law(target, draft, draft_token="sampled", residual="by_index") == [F(0), F(1), F(0)]
    assert speculative_step_law(target, draft, draft_token="sampled", residual="by_id") == target


def test_residual_defect_is_invisible_without_truncation():
    """Whole-vocabulary candidate arrays: index = id, both residuals agree (so T=1 without top-k/top-p sees only the draft defect)."""
    for target, draft in CASES:
        assert speculative_step_law(target, draft, residual="by_index") == speculative_step_law(target, draft, residual="by_id")


def test_token_origins_from_accept_flags():
    """Origins of the printed tokens: token 1 a target sample (2), flag 1 accepted (0), flag 0 recovered (1) or the
    bonus (2) after k accepted drafts."""
    from verifier.engines._llama_cpp_run import token_origins

    assert token_origins([0, 1, 0, 0, 1, 1, 1, 0], 3).tolist() == [2, 0, 1, 1, 0, 0, 0, 2]
    assert token_origins([0, 0, 1, 0], 1).tolist() == [2, 1, 0, 2]
