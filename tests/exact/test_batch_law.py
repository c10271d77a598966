"""Exact laws of the batch-shape defect per slot and per batch level (``verifier.exact.batch``; issue 29, kind 1).

Expected values are the exact enumerator's: the level law is the mixture of ``target_law`` and the ``full_p_fallback``
rule's ``n_token_law`` with weight ``(b - 2) / b``.  On bigram4_eos (prompt (0,), k = 2, N = 2) the first token's law
moves by TV 3/40 at b = 4 and 21/160 at b = 16 (``python -c "from verifier.exact.batch import batch_level_law"``, the
doctest of ``batch_level_law``), 0 at b = 1 and 2.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import (accepted_count_law, batch_level_law, corrupted_share, marginal, n_token_law, slot_law,
                            standard_tabular_pairs, target_law, total_variation)


@pytest.fixture(scope="module")
def pair():
    return standard_tabular_pairs()["bigram4_eos"]


def test_clean_levels_are_the_target_law(pair):
    t = target_law(pair.target, pair.prefix, 2)
    for b in (1, 2):
        assert batch_level_law(pair.target, pair.draft, pair.prefix, 2, 2, b) == t
        assert all(slot_law(pair.target, pair.draft, pair.prefix, 2, 2, s, b) == t for s in range(b))


def test_late_slots_follow_full_p_fallback_and_the_level_law_is_the_mixture(pair):
    t = target_law(pair.target, pair.prefix, 2)
    bad = n_token_law(pair.target, pair.draft, pair.prefix, 2, 2, "full_p_fallback")
    assert bad != t
    assert slot_law(pair.target, pair.draft, pair.prefix, 2, 2, 1, 4) == t
    assert slot_law(pair.target, pair.draft, pair.prefix, 2, 2, 3, 4) == bad
    for b, share in ((4, Fraction(1, 2)), (16, Fraction(7, 8))):
        law = batch_level_law(pair.target, pair.draft, pair.prefix, 2, 2, b)
        assert corrupted_share(b) == share and sum(law.values()) == 1
        assert total_variation(law, t) == share * total_variation(bad, t)
    first = marginal(t, (0,))
    assert total_variation(marginal(batch_level_law(pair.target, pair.draft, pair.prefix, 2, 2, 4), (0,)), first) == Fraction(3, 40)


def test_acceptance_of_the_corrupted_rule_is_the_canonical_one(pair):
    """The defect moves only the recovered token: the first round's accepted-count law is unchanged."""
    assert (accepted_count_law(pair.target, pair.draft, pair.prefix, 2, "full_p_fallback")
            == accepted_count_law(pair.target, pair.draft, pair.prefix, 2))


@pytest.mark.parametrize("kwargs, name", [({"batch_rows": 0}, "batch_rows"), ({"batch_rows": 4, "slot": 4}, "slot"),
                                          ({"batch_rows": 4, "defect": "nope"}, "defect")])
def test_bad_arguments_name_the_argument(pair, kwargs, name):
    args = {"slot": 0, "batch_rows": 4, "defect": "corrupt_batch_gt2", **kwargs}
    with pytest.raises(InvalidArgumentError, match=name):
        slot_law(pair.target, pair.draft, pair.prefix, 2, 2, **args)
