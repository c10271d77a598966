"""Exact reproduction of OpenVINO GenAI's validate_candidate (verifier/engines/openvino_repro.py); no engine needed.

Expected values are exact fractions worked by hand in the module docstring and below; < 1 s."""

from fractions import Fraction as F

import numpy as np
import pytest

from verifier.engines.openvino_repro import (accept_probability, cdf_interval, inverse_cdf_law, validation_step_law,
                                             validation_step_law_np, walk_order)


def test_threshold_has_an_atom_at_zero():
    # r = j / 100, j uniform on 0..100, accept iff r <= ratio: even ratio 0 accepts with prob 1/101
    assert accept_probability(F(0)) == F(1, 101)
    assert accept_probability(F(1, 100)) == F(2, 101)
    assert accept_probability(F(99, 100)) == F(100, 101)
    assert accept_probability(F(1)) == accept_probability(F(7)) == 1


def test_as_shipped_emits_a_token_with_target_prob_zero_and_canonical_does_not():
    p, q = [F(1, 2), F(1, 2), F(0)], [F(1, 4), F(1, 4), F(1, 2)]
    nxt = [[F(1, 3)] * 3] * 3
    law, acc = validation_step_law(p, q, nxt)
    # candidate 2: q(2) / p(y) = 1 for both y -> always accepted, so law[2] >= q(2) = 1/2
    assert law[2] >= F(1, 2) and sum(law) == 1
    assert validation_step_law(p, q, nxt, rule="canonical") == (p, F(1, 2))
    with pytest.raises(ValueError, match="rule="):
        validation_step_law(p, q, nxt, rule="exact")


def test_float_form_matches_fractions():
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    nxt = rng.dirichlet(np.ones(6), size=6)
    law, acc = validation_step_law_np(p, q, nxt)
    exact, exact_acc = validation_step_law(p, q, nxt)
    assert np.allclose(law, [float(v) for v in exact], atol=1e-12) and acc == pytest.approx(float(exact_acc))


def test_inverse_cdf_law_on_an_interval():
    q = np.array([0.5, 0.25, 0.25])
    order = walk_order(q, sorted_by_prob=False)
    assert np.allclose(inverse_cdf_law(q, order), q)  # the whole of [0, 1): q itself
    assert np.allclose(inverse_cdf_law(q, order, 0.4, 0.6), [0.5, 0.5, 0.0])
    assert cdf_interval(q, order, 1) == (0.5, 0.75)
    p = np.array([0.1, 0.6, 0.3])
    assert walk_order(p, sorted_by_prob=True).tolist() == [1, 2, 0]


def test_shared_seed_proposal_is_not_q():
    # token 1 drawn by u in [0, 0.2): with the shared seed the draft's candidate is then always token 0
    q = np.array([0.3, 0.3, 0.4])
    prop = inverse_cdf_law(q, walk_order(q, False), 0.0, 0.2)
    assert prop.tolist() == [1.0, 0.0, 0.0]
