"""Exact laws of speculative decoding over a recurrent (state-space) target (issue 29, bug kind 8).

Expected values come from the enumerators themselves, cross-checked against independent ones: the rolled-back
law against plain target sampling (``recurrent_target_law``) and, for a state that only remembers the last token,
against the n-gram enumerator ``verifier.exact.n_token_law``.
"""

from fractions import Fraction as F

import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import TabularLM, n_token_law, total_variation
from verifier.exact.recurrent import ROLLBACKS, RecurrentLM, parity3, recurrent_law, recurrent_target_law


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("skip", [0, F(1, 2), F(1, 5)])
def test_rolled_back_is_the_target_law(k, skip):
    target, draft = parity3()
    assert recurrent_law(target, draft, (0,), k, 4, skip_prob=skip) == recurrent_target_law(target, (0,), 4)


def test_bugs_move_the_law_and_stale_checkpoint_needs_draftless_rounds():
    target, draft = parity3()
    tl = recurrent_target_law(target, (0,), 4)
    for k in (1, 2):
        assert total_variation(recurrent_law(target, draft, (0,), k, 4, rollback="not_rolled_back"), tl) > F(1, 30)
        assert recurrent_law(target, draft, (0,), k, 4, rollback="stale_checkpoint") == tl  # always drafts: exact
        stale = recurrent_law(target, draft, (0,), k, 4, rollback="stale_checkpoint", skip_prob=F(1, 2))
        assert total_variation(stale, tl) > F(1, 50)


def test_first_token_is_never_biased():
    # the first emitted token is read off the prefilled state: no round has rejected anything yet
    target, draft = parity3()
    tl = recurrent_target_law(target, (0,), 1)
    for rollback in ROLLBACKS:
        assert recurrent_law(target, draft, (0,), 2, 1, rollback=rollback, skip_prob=F(1, 2)) == tl


def test_last_token_state_matches_the_ngram_enumerator():
    # a state = the last token is a bigram: not rolling it back changes nothing (the recovered token is fed last)
    rows = [("1/2", "1/4", "1/4"), ("1/5", "3/5", "1/5"), ("1/3", "1/6", "1/2")]
    target = RecurrentLM(rows, [[0, 1, 2]] * 3)
    bigram = TabularLM({(i,): r for i, r in enumerate(rows)}, vocab_size=3, context_len=1)
    draft = TabularLM({(i,): ("1/3", "1/3", "1/3") for i in range(3)}, vocab_size=3, context_len=1)
    expected = n_token_law(bigram, draft, (1,), 2, 3)
    for rollback in ROLLBACKS:
        assert recurrent_law(target, draft, (1,), 2, 3, rollback=rollback, skip_prob=F(1, 3)) == expected


@pytest.mark.parametrize("kwargs, name", [
    ({"rollback": "never"}, "rollback"), ({"skip_prob": 1}, "skip_prob"), ({"skip_prob": "x"}, "skip_prob"),
    ({"num_tokens": 0}, "num_tokens"), ({"prefix": ()}, "prefix"), ({"prefix": (3,)}, "prefix"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    target, draft = parity3()
    args = {"prefix": (0,), "num_draft_tokens": 2, "num_tokens": 2, **kwargs}
    with pytest.raises(InvalidArgumentError, match=name):
        recurrent_law(target, draft, args.pop("prefix"), args.pop("num_draft_tokens"), args.pop("num_tokens"), **args)


def test_bad_state_machine():
    with pytest.raises(InvalidArgumentError, match="transitions"):
        RecurrentLM([("1/2", "1/2")], [[0, 1]])
    with pytest.raises(InvalidArgumentError, match="rows"):
        RecurrentLM([("1/2", "1/3")], [[0, 0]])
