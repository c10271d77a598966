"""``bench detect`` and ``bench trees`` check ``rules`` / ``cases`` / ``seeds`` with one shared check
(:func:`verifier.bench._common.names_from`, :func:`~verifier.bench._common.check_seeds`,
:func:`~verifier.bench._common.check_detect_args`); the messages
are the ones each benchmark gave before the checks were shared."""

from __future__ import annotations

import pytest

from verifier.bench import detect, trees
from verifier.bench._common import check_seeds, names_from
from verifier.errors import InvalidArgumentError, invalid_argument
from verifier.exact import RULES, standard_cases
from verifier.exact.tree_rules import TREE_RULES
from verifier.exact.tree_stage import standard_tree_cases


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        fn(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("fn, registry, cases", [
    (detect.detect_rows, RULES, [c.name for c in standard_cases()]),
    (trees.detect_tree_rows, TREE_RULES, [c.name for c in standard_tree_cases()]),
])
def test_unknown_rule_case_or_seeds_gives_the_same_message_as_before(fn, registry, cases):
    assert _message(fn, ["no_such_rule"]) == str(invalid_argument("rules", "no_such_rule", sorted(registry)))
    assert _message(fn, None, ["no_such_case"]) == str(invalid_argument("cases", "no_such_case", sorted(cases)))
    assert _message(fn, None, None, seeds=0) == str(invalid_argument("seeds", 0, "an integer >= 1"))


def test_names_from_defaults_to_the_registry_in_its_order_and_keeps_the_given_order():
    registry = {"b": 1, "a": 2, "c": 3}
    assert names_from("rules", None, registry) == ["b", "a", "c"]
    assert names_from("rules", ("c", "b"), registry) == ["c", "b"]
    with pytest.raises(InvalidArgumentError, match="rules"):
        names_from("rules", ["z"], registry)
    assert check_seeds(3) == 3
    for bad in (0, -1, 2.5, "3"):
        with pytest.raises(InvalidArgumentError, match="seeds"):
            check_seeds(bad)


@pytest.mark.parametrize("fn", [detect.detect_rows, trees.detect_tree_rows, trees.detect_decoder_mutant_rows,
                                detect.detect_decoder_rows])
def test_every_detect_benchmark_checks_alpha_power_and_max_factor_alike(fn):
    """One check (:func:`verifier.bench._common.check_detect_args`) for every samples-to-detect benchmark."""
    assert _message(fn, alpha=1.5) == str(invalid_argument("alpha", 1.5, "a number in (0, 1)"))
    assert _message(fn, power=0) == str(invalid_argument("power", 0, "a number in (0, 1)"))
    assert _message(fn, max_factor=0.5) == str(invalid_argument("max_factor", 0.5, "a number >= 1"))
    assert _message(fn, seeds=0) == str(invalid_argument("seeds", 0, "an integer >= 1"))
