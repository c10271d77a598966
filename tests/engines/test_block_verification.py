"""The exact block-verification enumerator (Sun et al. 2024, Algorithm 2; SGLang's block mode).

Lossless: on independent positions the token emitted at every position, among rounds that reach it,
follows that position's target row -- so the kernel audit's emitted-token cells are valid for it.
Not canonical: for k >= 2 it accepts more than the token-wise rule; for k = 1 the two coincide."""

from fractions import Fraction as F

from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.audit.kernel_audit import standard_kernel_cases
from verifier.audit.kernel_report import rule_accepted_count_law
from verifier.engines.block_verification import block_accepted_count_law, block_verification_law

CASES = {c.name: c for c in standard_kernel_cases()}


def _row(weights):
    return tuple(F(w, sum(weights)) for w in weights)


rows = st.lists(st.integers(0, 4), min_size=3, max_size=3).filter(any).map(_row)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 3).flatmap(lambda k: st.tuples(st.lists(rows, min_size=k + 1, max_size=k + 1), st.lists(rows, min_size=k, max_size=k))))
def test_every_position_emits_its_target_row(pair):
    target, draft = pair
    law = block_verification_law(target, draft)
    assert sum(law.values()) == 1
    for j, p in enumerate(target):
        reach = sum(v for t, v in law.items() if len(t) > j)
        if reach:
            assert tuple(sum((v for t, v in law.items() if len(t) > j and t[j] == y), F(0)) / reach for y in range(3)) == p


def test_accepts_more_than_canonical_for_k_at_least_2_only():
    chain, seed = CASES["chain-k4"], CASES["seed-3token"]
    block = block_accepted_count_law(chain.target_probs, chain.draft_probs)
    assert block == (F(7, 10), F(3, 25), F(18, 125), F(7, 625), F(31, 1250))
    assert block != chain.accepted_count_law()
    mean = lambda law: sum(m * v for m, v in enumerate(law))  # noqa: E731
    assert mean(block) > mean(chain.accepted_count_law())
    assert block_accepted_count_law(seed.target_probs, seed.draft_probs) == seed.accepted_count_law()
    assert rule_accepted_count_law("block_verification", chain) == block


def test_target_only_rule_accepts_with_prob_sum_p_q():
    seed = CASES["seed-3token"]
    assert rule_accepted_count_law("target_only", seed) == (F(69, 100), F(31, 100))
