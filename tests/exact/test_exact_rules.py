"""The rule registry and the two rules that need exp(): typical acceptance and softmax residual."""

import math
from fractions import Fraction as F

import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import RULES, Rule, get_rule, step_law
from verifier.exact.rules import DECLARED_STATUSES, SOFTMAX_DIGITS, TYPICAL_DELTA, TYPICAL_EPSILON, _exceeds_typical_threshold

EXPECTED_RULES = {
    "canonical": "exact",
    "fresh_target_match": "exact",
    "block_verification": "exact",
    "full_p_fallback": "biased",
    "greedy_draft": "biased",
    "softmax_residual": "biased",
    "deterministic_acceptance": "biased",
    "greedy_acceptance": "biased",
    "bonus_wrong_position": "biased",
    "draft_suffix_kept": "biased",
    "shared_uniform": "biased",
    "typical_acceptance": "lossy",
    "accept_all": "biased",  # issue 26: "every draft accepted" is a mechanism of its own
    "residual_by_index": "biased",  # issue 26: llama.cpp's second defect
    "synthetic_acceptance": "lossy",  # issue 29 kind 6: a benchmarking mode (fixed acceptance) left on
    "recovered_one_late": "biased",  # issue 26, mechanisms the field reports (verifier.exact.field_rules)
    "draft_accept_same_uniform": "biased",
}


def test_residual_by_index_is_llama_cpps_minimal_reproduction_and_the_residual_without_truncation():
    """FINDINGS (llama.cpp 0c1e570, Finding 2): target keeps {0, 1}, draft keeps {1, 2}: token 1 always."""
    from verifier.engines.llama_cpp_repro import speculative_step_law

    p, q = [F(1, 2), F(1, 2), F(0)], [F(0), F(9, 10), F(1, 10)]
    assert step_law(p, q, "residual_by_index").output_law == (0, 1, 0)
    assert list(step_law(p, q, "residual_by_index").output_law) == speculative_step_law(p, q, draft_token="sampled")
    full_p, full_q = [F(2, 10), F(5, 10), F(3, 10)], [F(5, 10), F(3, 10), F(2, 10)]
    assert step_law(full_p, full_q, "residual_by_index").output_law == tuple(full_p)  # index = id: lossless here
    assert step_law(full_p, full_q, "accept_all").output_law == tuple(full_q)


def test_registry_holds_every_rule_of_the_issue_with_its_declared_status():
    assert {name: r.declared for name, r in RULES.items()} == EXPECTED_RULES
    for name, r in RULES.items():
        assert r.name == name and isinstance(r, Rule)
        assert r.declared in DECLARED_STATUSES
        assert r.description and "\n" not in r.description


def test_get_rule_lists_allowed_names():
    assert get_rule("canonical") is RULES["canonical"]
    assert get_rule(RULES["shared_uniform"]) is RULES["shared_uniform"]
    with pytest.raises(InvalidArgumentError, match="rule='nope'.*canonical.*typical_acceptance"):
        get_rule("nope")


def _float_typical(p, x, eps, delta):
    entropy = -sum(v * math.log(v) for v in map(float, p) if v > 0)
    return float(p[x]) > min(float(eps), float(delta) * math.exp(-entropy))


@pytest.mark.parametrize(
    "p",
    [
        (F(1, 2), F(1, 3), F(1, 6)),
        (F(9, 10), F(1, 20), F(1, 20)),
        (F(1, 10), F(1, 10), F(1, 10), F(7, 10)),
        (F(2, 5), F(1, 5), F(2, 5)),
        (F(0), F(1, 4), F(3, 4)),
    ],
)
@pytest.mark.parametrize("eps, delta", [(TYPICAL_EPSILON, TYPICAL_DELTA), (F(1), F(1, 2)), (F(1), F(3, 10))])
def test_typical_threshold_agrees_with_float_math_away_from_ties(p, eps, delta):
    for x in range(len(p)):
        entropy = -sum(v * math.log(v) for v in map(float, p) if v > 0)
        threshold = min(float(eps), float(delta) * math.exp(-entropy))
        if abs(float(p[x]) - threshold) > 1e-9:  # float decides correctly away from a tie
            assert _exceeds_typical_threshold(p, x, eps, delta) == _float_typical(p, x, eps, delta)


def test_typical_threshold_is_exact_at_a_tie():
    # p uniform on 2 tokens: exp(-H) = 1/2, so with delta = 1 the threshold is exactly p(x) = 1/2:
    # "p(x) > threshold" is false; float math may land on either side.
    p = (F(1, 2), F(1, 2))
    assert not _exceeds_typical_threshold(p, 0, F(1), F(1))
    # p = (1/4, 3/4): exp(-H) = (1/4)^(1/4) (3/4)^(3/4); delta chosen so the threshold is just above / below 1/4
    p = (F(1, 4), F(3, 4))
    exp_neg_h = 0.25 ** 0.25 * 0.75 ** 0.75
    delta_tie = F(1, 4) / F(exp_neg_h)  # rational within 1e-16 of the tie
    below, above = delta_tie * (1 - F(1, 10**12)), delta_tie * (1 + F(1, 10**12))
    assert _exceeds_typical_threshold(p, 0, F(1), below)
    assert not _exceeds_typical_threshold(p, 0, F(1), above)


def test_typical_acceptance_always_accepts_a_likely_draft_token():
    # every p(x) > 0.09: every draft token is accepted, so the output is the draft law q, not p
    law = step_law([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], "typical_acceptance")
    assert law.output_law == (F(1, 5), F(3, 10), F(1, 2))


def test_softmax_residual_matches_float_softmax_to_its_stated_precision():
    p, q = [0.2, 0.5, 0.3], [0.5, 0.3, 0.2]
    law = step_law(p, q, "softmax_residual")
    deficit = [max(0.0, a - b) for a, b in zip(p, q)]
    weights = [math.exp(d) for d in deficit]
    expected = [w / sum(weights) for w in weights]
    assert sum(law.residual) == 1  # renormalised exactly
    for got, want in zip(law.residual, expected):
        assert abs(float(got) - want) < 1e-15
    assert SOFTMAX_DIGITS >= 40
    assert law.residual[0] > 0  # the bug: mass on a token whose residual is 0
    assert not law.is_exact


def test_fresh_target_match_recovers_the_fresh_sample():
    law = step_law([0.2, 0.5, 0.3], [0.5, 0.3, 0.2], "fresh_target_match")
    # accepted iff the fresh target sample equals the draft token: mass q(x) p(x)
    assert law.accepted_mass == (F(1, 10), F(3, 20), F(3, 50))
    assert law.is_exact


def test_greedy_draft_proposes_only_the_draft_argmax():
    law = step_law([0.2, 0.5, 0.3], [0.5, 0.3, 0.2], "greedy_draft")
    # x = 0 always, accepted with p/q = 2/5; rejected (3/5) -> residual (0, 2/3, 1/3)
    assert law.accepted_mass == (F(2, 5), 0, 0)
    assert law.output_law == (F(2, 5), F(2, 5), F(1, 5))


@pytest.mark.parametrize("module", ["rules", "step", "laws", "cases", "stage", "counterexample"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"verifier.exact.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_typical_threshold_with_huge_denominators_uses_logarithms_and_agrees():
    # denominators 10**9: the integer-power route would need (p/delta)**(10**9); logarithms decide
    p = (F(123456789, 10**9), F(476543211, 10**9), F(4, 10))
    for delta in (F(3, 10), F(1, 2), F(9, 10)):
        for x in range(3):
            assert _exceeds_typical_threshold(p, x, F(1), delta) == _float_typical(p, x, F(1), delta)
