"""The exact law of the stopping position (``verifier.exact.stop_position_law``; issue 29, bug kind 5).

Checked three ways as Fractions: against brute force over every outcome of the target's N-token law
(``stop_position_of(target_law(...))``), against the canonical and the other lossless rules' N-token laws (a lossless
rule keeps the stopping law for every k), and against the runner's float64 prefix-tree law
(``verifier.runner.stop.stop_position_law`` through the tabular torch model), to 1e-12.  A biased rule moves it:
deterministic acceptance on bigram4_eos by TV 0.192 at k = 3 (the law cell's mutant in tests/runner/suites/stop.toml).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import (n_token_law, standard_tabular_pairs, stop_position_law, stop_position_of, stop_violation_prob,
                            target_law)
from verifier.runner.models import load_pair
from verifier.runner.stop import stop_ends
from verifier.runner.stop import stop_position_law as runner_stop_law
from verifier.sampling import SamplingConfig
from verifier.suite.schema import ModelPair

CASES = [("bigram4_eos", [2], 5), ("bigram4_eos", [], 4), ("trigram3", [1], 5), ("unigram3", [0, 2], 3)]


@pytest.mark.parametrize("name, stops, limit", CASES)
def test_law_equals_brute_force_over_the_target_law(name, stops, limit):
    pair = standard_tabular_pairs()[name]
    law = stop_position_law(pair.target, pair.prefix, limit, stops)
    assert sum(law) == 1 and len(law) == limit + 1
    assert law == stop_position_of(target_law(pair.target, pair.prefix, limit), limit, stops, pair.target.eos_token_id)


@pytest.mark.parametrize("rule", ["canonical", "fresh_target_match", "block_verification"])
@pytest.mark.parametrize("k", [1, 2])
def test_lossless_rules_keep_the_stopping_law(rule, k):
    pair = standard_tabular_pairs()["bigram4_eos"]
    law = n_token_law(pair.target, pair.draft, pair.prefix, k, 4, rule)
    assert stop_position_of(law, 4, [2], 3) == stop_position_law(pair.target, pair.prefix, 4, [2])


def test_a_biased_rule_moves_the_stopping_law():
    pair = standard_tabular_pairs()["bigram4_eos"]
    ref = stop_position_law(pair.target, pair.prefix, 6, [2])
    bad = stop_position_of(n_token_law(pair.target, pair.draft, pair.prefix, 3, 6, "deterministic_acceptance"), 6, [2], 3)
    tv = sum(abs(a - b) for a, b in zip(ref, bad)) / 2
    assert abs(float(tv) - 0.192) < 5e-4, float(tv)


@pytest.mark.parametrize("name, stops, limit", CASES)
def test_runner_float_law_equals_the_exact_law(name, stops, limit):
    pair = standard_tabular_pairs()[name]
    prompt = pair.prefix or (0,)  # the runner needs one prompt token; a unigram ignores it
    loaded = load_pair(ModelPair("p", f"tabular:{name}", f"tabular:{name}"))
    got = runner_stop_law(loaded.reference, prompt, SamplingConfig(temperature=1.0),
                          stop_ends(stops, pair.target.eos_token_id), limit)
    assert got.pooled_from is None
    np.testing.assert_allclose(got.probs, [float(f) for f in stop_position_law(pair.target, prompt, limit, stops)],
                               atol=1e-12)


def test_doctest_value():
    pair = standard_tabular_pairs()["bigram4_eos"]
    assert stop_position_law(pair.target, (0,), 2, [2]) == (Fraction(2, 5), Fraction(29, 100), Fraction(31, 100))


@pytest.mark.parametrize("call, fragment", [
    (lambda t: stop_position_law(t, (0,), 0), "max_tokens"),
    (lambda t: stop_position_law(t, (0,), 3, [4]), "stop_token_ids"),
    (lambda t: stop_position_law(t, (0,), 3, [1, 1]), "at most once"),
    (lambda t: stop_position_law(t, (), 3), "prefix"),
    (lambda t: stop_position_law("bigram", (0,), 3), "TabularLM"),
    (lambda t: stop_position_of(target_law(t, (0,), 2), 3), "max_tokens"),
])
def test_bad_input_is_a_clear_error(call, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        call(standard_tabular_pairs()["bigram4_eos"].target)


def test_violation_probability_of_a_per_token_check_is_zero_and_a_per_round_one_is_not():
    """k = 1, L = 2, W = 3, stop token 2 on bigram4_eos (p(.|0) = (.1,.5,.2,.2), q(.|0) = (.5,.1,.1,.3), p(.|1) =
    (.4,.1,.3,.2), q(.|1) = (.1,.5,.2,.2)).  A round-end stop check breaks the rule exactly when the draft 2 is accepted
    in the first round (min(p, q)(2) = 1/10): the bonus token follows it.  A round-end limit check breaks it when the
    first round rejects and recovers token 1 (residual (0,.4,.1,0): 2/5) and the second round, from 1, accepts a draft
    that is no stop (min(p, q) over {0, 1} = 1/5): its two tokens run one past L (2/5 * 1/5 = 2/25)."""
    pair = standard_tabular_pairs()["bigram4_eos"]
    args = (pair.target, pair.draft, (0,), 1, 2, 3, [2])
    assert stop_violation_prob(*args, check="token") == 0
    assert stop_violation_prob(*args, check="round_stops") == Fraction(1, 10)
    assert stop_violation_prob(*args, check="round_limit") == Fraction(2, 25)
    for bad, fragment in (({"check": "round"}, "check"), ({"rule": "nope"}, "rule")):
        with pytest.raises(InvalidArgumentError, match=fragment):
            stop_violation_prob(*args, **bad)
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        stop_violation_prob(pair.target, pair.draft, (0,), 1, 4, 3, [2])
