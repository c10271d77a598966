"""Block verification (Sun et al. 2024, Algorithm 2) as an exact round-level rule.

Everything here is exact (Fractions): the rule's N-token law equals the target's on every
standard case and k = 1..3, it accepts at least as many drafts in expectation as token-wise
(canonical) verification, and it reproduces the paper's worked example (Section 2: target
(1/3, 2/3), draft (2/3, 1/3), k = 2: 10/9 accepted tokens token-wise, 11/9 block-wise).
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from verifier.exact import (RULES, accepted_count_law, n_token_law, run_exact_stage, standard_cases, target_law,
                            total_variation, unigram_case)


def _mean(law):
    return sum(j * p for j, p in enumerate(law))


@pytest.mark.parametrize("case", standard_cases(), ids=lambda c: c.name)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_block_verification_is_exact_and_accepts_at_least_token_wise(case, k):
    law = n_token_law(case.target, case.draft, case.prefix, k, case.num_tokens, "block_verification")
    assert law == target_law(case.target, case.prefix, case.num_tokens)
    block = accepted_count_law(case.target, case.draft, case.prefix, k, "block_verification")
    token_wise = accepted_count_law(case.target, case.draft, case.prefix, k, "canonical")
    assert sum(block) == 1
    assert _mean(block) >= _mean(token_wise)
    if k == 1:  # one draft: block verification is token-wise verification
        assert block == token_wise


def test_block_verification_accepts_strictly_more_somewhere():
    """The comparison can fail: on trigram3 at k = 2 the expected accepted drafts differ exactly."""
    case = next(c for c in standard_cases() if c.name == "trigram3")
    block = accepted_count_law(case.target, case.draft, case.prefix, 2, "block_verification")
    token_wise = accepted_count_law(case.target, case.draft, case.prefix, 2, "canonical")
    assert _mean(block) == F(57, 50) and _mean(token_wise) == F(21, 20)


def test_paper_worked_example():
    case = unigram_case("sun2024", [F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)], num_draft_tokens=2, num_tokens=3)
    assert _mean(accepted_count_law(case.target, case.draft, case.prefix, 2, "canonical")) == F(10, 9)
    assert _mean(accepted_count_law(case.target, case.draft, case.prefix, 2, "block_verification")) == F(11, 9)
    assert n_token_law(case.target, case.draft, case.prefix, 2, 3, "block_verification") == target_law(case.target, (), 3)


def test_degenerate_zero_over_zero_stays_exact():
    """Draft == target: every weight is 1 and every residual is empty (h = 0/0, taken as 1)."""
    p = [F(1, 3), F(2, 3)]
    case = unigram_case("equal", p, p, num_draft_tokens=3, num_tokens=3)
    assert n_token_law(case.target, case.draft, (), 3, 3, "block_verification") == target_law(case.target, (), 3)
    assert accepted_count_law(case.target, case.draft, (), 3, "block_verification") == (0, 0, 0, 1)


def test_exact_stage_declares_both_lossless_rules_exact():
    assert RULES["block_verification"].declared == "exact" and RULES["fresh_target_match"].declared == "exact"
    findings = run_exact_stage(["block_verification", "fresh_target_match"])
    assert findings and all(f.verdict == "exact" and f.matches_declared and f.tv == 0 for f in findings)


def test_a_wrong_block_rule_is_caught():
    """Test the tester: the same enumeration with the residual taken without the weight w_tau
    (a plausible bug) is biased, so the exactness checks above can fail."""
    from dataclasses import replace

    from verifier.exact import block

    def wrong(target, draft, prefix, k, rule=None):
        original = block._recovered
        block._recovered = lambda w, p_row, q_row: original(F(1), p_row, q_row)
        try:
            yield from list(block.block_round_outcomes(target, draft, prefix, k))
        finally:
            block._recovered = original

    rule = replace(RULES["block_verification"], name="block_unweighted_residual", round_outcomes=wrong)
    case = next(c for c in standard_cases() if c.name == "trigram3")
    law = n_token_law(case.target, case.draft, case.prefix, 2, 3, rule)
    assert total_variation(law, target_law(case.target, case.prefix, 3)) > 0
