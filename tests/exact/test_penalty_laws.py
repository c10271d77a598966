"""Exact laws with penalties and min-p (issue 29, bug kind 3): verifier.exact.penalties.

The canonical rule stays lossless when the target law moves with every emitted token (exact Fraction equality with
the target's N-token law, N = k + 2); each mutant is biased exactly when its processor is on, and exact when it is off.
"""

import dataclasses
from fractions import Fraction

import pytest

from verifier import InvalidArgumentError, SamplingConfig
from verifier.exact import standard_tabular_pairs, total_variation
from verifier.exact.laws import _n_token_law
from verifier.exact.penalties import (PENALTY_PROMPTS, PENALTY_RULES, PENALTY_SAMPLING, HistoryProcessedLM,
                                      penalty_n_token_law, penalty_target_law)
from verifier.exact.rules import get_rule

K, N = 2, 4  # N = k + 2: the second round's first token is in the law


@pytest.mark.parametrize("pair_name", sorted(PENALTY_PROMPTS))
def test_canonical_rule_is_lossless_with_history_dependent_processing(pair_name):
    pair, prompt = standard_tabular_pairs()[pair_name], PENALTY_PROMPTS[pair_name]
    target = penalty_target_law(pair.target, prompt, PENALTY_SAMPLING, N)
    law = penalty_n_token_law(pair.target, pair.draft, prompt, PENALTY_SAMPLING, K, N)
    assert law == target and sum(law.values()) == 1
    # the same law from the chain enumerator of verifier.exact.laws on the processed views (two implementations)
    views = [HistoryProcessedLM(m, PENALTY_SAMPLING, len(prompt)) for m in (pair.target, pair.draft)]
    assert _n_token_law(*views, prompt, K, N, get_rule("canonical")) == target


@pytest.mark.parametrize("rule", PENALTY_RULES[1:])
def test_each_mutant_is_biased_with_its_processor_and_exact_without(rule):
    pair, prompt = standard_tabular_pairs()["bigram4_eos"], PENALTY_PROMPTS["bigram4_eos"]
    target = penalty_target_law(pair.target, prompt, PENALTY_SAMPLING, N)
    assert total_variation(penalty_n_token_law(pair.target, pair.draft, prompt, PENALTY_SAMPLING, K, N, rule), target) > Fraction(1, 50)
    off = (dataclasses.replace(PENALTY_SAMPLING, min_p=None) if rule == "min_p_skipped_on_verified"
           else dataclasses.replace(PENALTY_SAMPLING, repetition_penalty=None, presence_penalty=None, frequency_penalty=None))
    assert penalty_n_token_law(pair.target, pair.draft, prompt, off, K, N, rule) == penalty_target_law(pair.target, prompt, off, N)


def test_presence_counts_generated_tokens_not_the_prompt():
    pair = standard_tabular_pairs()["unigram3"]
    plain = HistoryProcessedLM(pair.target, SamplingConfig(), prompt_len=2).probs((0, 0))  # log/softmax round trip
    view = HistoryProcessedLM(pair.target, SamplingConfig(presence_penalty=1.0), prompt_len=2)
    assert view.probs((0, 0)) == plain  # nothing generated: the prompt's zeros are not penalised
    assert view.probs((0, 0, 0))[0] < plain[0] and view.probs((0, 0, 0, 0)) == view.probs((0, 0, 0))  # presence: once
    rep = HistoryProcessedLM(pair.target, SamplingConfig(repetition_penalty=2.0), prompt_len=2)
    assert rep.probs((0, 0))[0] < plain[0]  # the repetition penalty reads the prompt


def test_bad_arguments_name_themselves():
    pair = standard_tabular_pairs()["unigram3"]
    with pytest.raises(InvalidArgumentError, match="rule='nope'"):
        penalty_n_token_law(pair.target, pair.draft, (), PENALTY_SAMPLING, K, N, "nope")
    with pytest.raises(InvalidArgumentError, match="sampling="):
        penalty_target_law(pair.target, (), {"min_p": 0.1}, N)
    with pytest.raises(InvalidArgumentError, match="num_draft_tokens=0"):
        penalty_n_token_law(pair.target, pair.draft, (), PENALTY_SAMPLING, 0, N)


def test_processed_tabular_refuses_history_dependent_penalties():
    from verifier.models import processed_tabular

    pair = standard_tabular_pairs()["unigram3"]
    for key in ("presence_penalty", "frequency_penalty"):
        with pytest.raises(InvalidArgumentError, match=f"sampling.{key}=0.5"):
            processed_tabular(pair.target, SamplingConfig(**{key: 0.5}))
    row = processed_tabular(pair.target, SamplingConfig(min_p=0.5)).probs(())  # min-p is row-wise: 1/6 < 1/4 dropped
    assert row[2] == 0 and sum(row) == 1
