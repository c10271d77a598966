"""Round and N-token laws on the standard tabular pairs: EOS, max length, bonus, accepted counts."""

from fractions import Fraction as F

import pytest

from verifier.exact import (
    RULES,
    TabularLM,
    accepted_count_law,
    marginal,
    n_token_law,
    round_law,
    standard_tabular_pairs,
    step_law,
    target_law,
    total_variation,
)

PAIRS = standard_tabular_pairs()


def test_two_token_round_with_bonus_on_a_bigram_equals_the_target_three_token_law():
    pair = PAIRS["bigram4_eos"]
    law = n_token_law(pair.target, pair.draft, pair.prefix, 2, 3)
    assert law == target_law(pair.target, pair.prefix, 3)
    # ... and the bonus path really is in play: one round emits 3 tokens with positive probability
    assert any(len(t) == 3 for t in round_law(pair.target, pair.draft, pair.prefix, 2))


@pytest.mark.parametrize("name", list(PAIRS))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_canonical_rule_preserves_every_standard_pair(name, k):
    pair = PAIRS[name]
    assert n_token_law(pair.target, pair.draft, pair.prefix, k, 3) == target_law(pair.target, pair.prefix, 3)


def test_target_law_of_the_bigram_by_hand():
    target = PAIRS["bigram4_eos"].target
    law = target_law(target, (0,), 2)
    # p(.|0) = (1/10, 1/2, 1/5, 1/5 EOS); p(.|1) = (2/5, 1/10, 3/10, 1/5)
    assert law[(3, -1)] == F(1, 5)  # EOS first, then padding
    assert law[(1, 0)] == F(1, 2) * F(2, 5)
    assert sum(law.values()) == 1 and all(len(t) == 2 for t in law)


@pytest.mark.parametrize("rule", list(RULES))
def test_nothing_is_emitted_after_eos_and_laws_sum_to_one(rule):
    pair = PAIRS["bigram4_eos"]
    eos = pair.target.eos_token_id
    law = n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, rule)
    assert sum(law.values()) == 1
    for tokens in law:
        assert len(tokens) == 3
        if eos in tokens:
            cut = tokens.index(eos) + 1
            assert all(t == -1 for t in tokens[cut:])
        else:
            assert -1 not in tokens
    for tokens in round_law(pair.target, pair.draft, pair.prefix, 2, rule):
        assert eos not in tokens[:-1]


def test_max_new_tokens_truncates_the_round():
    pair = PAIRS["trigram3"]
    full = round_law(pair.target, pair.draft, pair.prefix, 3)
    cut = round_law(pair.target, pair.draft, pair.prefix, 3, max_new_tokens=2)
    assert max(map(len, cut)) == 2 and sum(cut.values()) == 1
    expected = {}
    for tokens, prob in full.items():
        expected[tokens[:2]] = expected.get(tokens[:2], 0) + prob
    assert cut == expected


def test_round_law_first_token_is_the_step_law():
    pair = PAIRS["unigram3"]
    p, q = pair.target.probs(()), pair.draft.probs(())
    for rule in RULES:
        # a recovered token read from the next position's rows (recovered_one_late) depends on k: its step law is k = 1
        k = 1 if RULES[rule].recover_after is not None else 2
        first = marginal({t: v for t, v in round_law(pair.target, pair.draft, (), k, rule).items()}, 0)
        assert tuple(first.get((x,), 0) for x in range(3)) == step_law(p, q, rule).output_law, rule


def test_accepted_count_law_on_a_unigram_is_geometric_in_the_overlap():
    # unigram: positions are independent, each accepted with a = sum(min(p, q)) (Leviathan et al. Thm 3.8)
    pair = PAIRS["unigram3"]
    p, q = pair.target.probs(()), pair.draft.probs(())
    a = sum(min(x, y) for x, y in zip(p, q))
    assert accepted_count_law(pair.target, pair.draft, (), 3) == (1 - a, a * (1 - a), a * a * (1 - a), a ** 3)


def test_shared_uniform_accepts_more_later_drafts_than_independent_uniforms():
    pair = PAIRS["unigram3"]
    canonical = accepted_count_law(pair.target, pair.draft, (), 2)
    shared = accepted_count_law(pair.target, pair.draft, (), 2, "shared_uniform")
    assert canonical[0] == shared[0]  # first position identical
    assert shared[2] > canonical[2]  # a U small enough once is small enough again


def test_bonus_from_the_wrong_position_is_invisible_without_context():
    # context-free target: every position has the same p, so the off-by-one cannot change the law
    pair = PAIRS["unigram3"]
    law = n_token_law(pair.target, pair.draft, (), 2, 3, "bonus_wrong_position")
    assert law == target_law(pair.target, (), 3)
    bigram = PAIRS["bigram4_eos"]
    assert n_token_law(bigram.target, bigram.draft, bigram.prefix, 2, 3, "bonus_wrong_position") != target_law(bigram.target, bigram.prefix, 3)


def test_draft_suffix_kept_emits_unverified_draft_tokens():
    # p uniform on {0, 1}, draft always proposes 1: a rejection at position 1 emits 0 then the kept draft 1
    target = TabularLM({(): [F(1, 2), F(1, 2)]}, 2, 0)
    draft = TabularLM({(): [0, 1]}, 2, 0)
    law = round_law(target, draft, (), 2, "draft_suffix_kept")
    assert law == {(0, 1): F(1, 2), (1, 0): F(1, 4), (1, 1, 0): F(1, 8), (1, 1, 1): F(1, 8)}


def test_total_variation_and_marginal():
    a = {(0, 0): F(1, 2), (1, 1): F(1, 2)}
    b = {(0, 1): F(1, 2), (1, 1): F(1, 2)}
    assert total_variation(a, b) == F(1, 2)
    assert total_variation(a, a) == 0
    assert marginal(a, 1) == {(0,): F(1, 2), (1,): F(1, 2)}
    assert marginal(b, [1]) == {(1,): F(1)}
    assert total_variation([F(1, 5), F(1, 2), F(3, 10)], [F(13, 50), F(9, 20), F(29, 100)]) == F(3, 50)


def test_pairs_are_small_stable_and_have_high_draft_tv():
    assert set(PAIRS) == {"unigram3", "bigram4_eos", "trigram3"}
    assert [PAIRS[n].target.context_len for n in PAIRS] == [0, 1, 2]
    assert PAIRS["bigram4_eos"].target.eos_token_id == 3
    for pair in PAIRS.values():
        assert 3 <= pair.target.vocab_size <= 6
        for ctx in pair.target.contexts:
            p, q = pair.target.probs(ctx), pair.draft.probs(ctx)
            if p != q:  # the unreachable after-EOS row may be shared
                assert total_variation(p, q) >= F(3, 10)
            assert max(q) < 1  # no one-hot draft: it would hide the full-p fallback
