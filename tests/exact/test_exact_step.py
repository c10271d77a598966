"""Must-show single-step values from the seeds, asserted exactly.

The expected values are the seeds' hand-derived numbers (Leviathan et al. 2023, Appendix A.1,
worked through in ../shared/seeds/); reproduce any of them with e.g.
``python -c "from verifier.exact import step_law; print(step_law([.2,.5,.3],[.5,.3,.2]))"``.
"""

from fractions import Fraction as F

import pytest

from verifier.exact import RULES, residual, step_law


def fr(*vals):
    return tuple(F(v) for v in vals)


def test_seed_residual_example():
    law = step_law([0.4, 0.2, 0.4], [0.2, 0.5, 0.3])
    assert law.acceptance_probs[1] == F(2, 5)  # proposal B accepted with 0.2/0.5
    assert law.residual == fr("2/3", "0", "1/3")
    assert law.output_law == fr("2/5", "1/5", "2/5")
    assert law.is_exact


def test_seed_fallback_example_and_full_p_mutant():
    p, q = fr("1/5", "1/2", "3/10"), fr("1/2", "3/10", "1/5")
    law = step_law(p, q)
    assert law.accepted_mass == fr("1/5", "3/10", "1/5")
    assert law.rejection_prob == F(3, 10)
    assert law.residual == fr("0", "2/3", "1/3")
    assert law.output_law == p
    wrong = step_law(p, q, "full_p_fallback")
    assert wrong.output_law == fr("13/50", "9/20", "29/100")
    assert wrong.output_law != p
    assert wrong.residual == p  # the recovered token is drawn from p itself


def test_argmaxes_agree_but_acceptance_is_three_fifths():
    law = step_law([0.5, 0.3, 0.2], [0.9, 0.05, 0.05])
    assert law.acceptance_prob == F(3, 5)
    assert law.output_law == fr("1/2", "3/10", "1/5")


def test_equal_distributions_have_no_residual():
    p = fr("1/2", "3/10", "1/5")
    law = step_law(p, p)
    assert law.rejection_prob == 0
    assert law.residual is None
    assert residual(p, p) is None
    assert law.output_law == p


@pytest.mark.parametrize(
    "p, q",
    [
        (fr("0", "1"), fr("1", "0")),  # disjoint supports: always rejected, residual is p
        (fr("0", "1/2", "1/2"), fr("1", "0", "0")),
        (fr("1/2", "3/10", "1/5"), fr("1", "0", "0")),  # q(x) = 0 where p(x) > 0
        (fr("1/5", "0", "4/5"), fr("1/2", "1/2", "0")),
    ],
)
def test_zero_draft_mass_and_disjoint_supports_still_give_p(p, q):
    law = step_law(p, q)
    assert law.output_law == p
    if not any(a and b for a, b in zip(p, q)):
        assert law.rejection_prob == 1 and law.residual == p


@pytest.mark.parametrize("name", [n for n, r in RULES.items() if r.declared == "exact"])
def test_exact_rules_reproduce_every_seed_example(name):
    for p, q in [((0.4, 0.2, 0.4), (0.2, 0.5, 0.3)), ((0.2, 0.5, 0.3), (0.5, 0.3, 0.2)), ((0.5, 0.3, 0.2), (0.9, 0.05, 0.05))]:
        assert step_law(p, q, name).is_exact


def test_mixed_input_types_are_read_as_the_rationals_written():
    law = step_law(["1/5", 0.5, F(3, 10)], [0.5, "3/10", 0.2])
    assert law.target_probs == fr("1/5", "1/2", "3/10")
