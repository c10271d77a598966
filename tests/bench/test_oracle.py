"""The Neyman-Pearson oracle of ``specverify bench detect`` (verifier/bench/_oracle.py).

Expected values: DESIGN.md's reference oracle n (626 for p=(.4,.2,.4), q=(.2,.5,.3), full-p fallback),
the exact laws of verifier.exact, and the chi-square sample sizes of verifier.stats.power (no test can
need fewer samples than the oracle).
"""

from fractions import Fraction as F

import pytest

from verifier.bench._oracle import np_oracle_power, np_oracle_samples
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_cases, step_law
from verifier.stats import samples_needed

SEED_RESIDUAL = ((F(2, 5), F(1, 5), F(2, 5)), (F(1, 5), F(1, 2), F(3, 10)))  # DESIGN.md: oracle 626


def test_design_reference_oracle_626():
    p, q = SEED_RESIDUAL
    res = np_oracle_samples(p, step_law(p, q, "full_p_fallback").output_law)
    assert (res.n, res.method) == (626, "exact")
    assert np_oracle_power(625, p, step_law(p, q, "full_p_fallback").output_law, method="exact") < 0.99 <= res.power_at_n


@pytest.mark.parametrize("case", ["seed_residual", "seed_fallback", "seed_argmax_agree"])
def test_oracle_never_needs_more_than_the_chi_square(case):
    c = {c.name: c for c in standard_cases()}[case]
    p, q = c.target_probs, c.draft_probs
    for rule in ("greedy_acceptance", "typical_acceptance"):
        law = step_law(p, q, rule).output_law
        oracle = np_oracle_samples(p, law).n
        chi2 = samples_needed([float(v) for v in p], [float(v) for v in law], alpha=0.01, power=0.99)
        assert oracle <= chi2, (case, rule, oracle, chi2)


def test_saddlepoint_agrees_with_exact_enumeration():
    p, q = SEED_RESIDUAL
    law = step_law(p, q, "greedy_acceptance").output_law
    exact = np_oracle_samples(p, law, method="exact").n
    saddle = np_oracle_samples(p, law, method="saddlepoint").n
    assert abs(saddle - exact) <= 0.02 * exact, (exact, saddle)


def test_support_violation_and_bad_input():
    # alt puts mass where the null has none: seeing it once is proof, power 1 - (1 - v)^n
    res = np_oracle_samples([0.5, 0.5, 0.0], [0.4, 0.4, 0.2])
    assert res.n <= 21  # (0.8)^21 < 0.01
    with pytest.raises(InvalidArgumentError, match="alt_law"):
        np_oracle_samples([0.5, 0.5], [0.5, 0.5])
    with pytest.raises(InvalidArgumentError, match="null_law"):
        np_oracle_samples([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(InvalidArgumentError, match="alpha"):
        np_oracle_samples([0.5, 0.5], [0.4, 0.6], alpha=1.5)
