"""Exact tree stage: lossless tree rules preserve the target, the chain is the special case, every
tree mutant is biased by an exact, stated TV, and Hypothesis finds a minimal counterexample.

Expected figures come from ``python -m verifier.cli exact --tree`` (exact Fractions).
"""

from dataclasses import replace
from fractions import Fraction as F

import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import RULES, n_token_law, round_law, standard_tabular_pairs, target_law, total_variation, unigram_case
from verifier.exact.stage import rule_verdicts
from verifier.exact.tree_counterexample import find_tree_counterexample
from verifier.exact.tree_laws import tree_accepted_count_law, tree_n_token_law, tree_round_law
from verifier.exact.tree_rules import TREE_RULES, get_tree_rule
from verifier.exact.tree_shape import chain_shape, num_draft_nodes, parent_ids, parse_tree, tree_depth, tree_label
from verifier.exact.tree_stage import run_tree_exact_stage, standard_tree_cases

LOSSLESS = [n for n, r in TREE_RULES.items() if r.declared == "exact"]
MUTANTS = [n for n, r in TREE_RULES.items() if r.declared == "biased"]
PAIRS = standard_tabular_pairs()
CASES = {c.name: c for c in standard_tree_cases()}

# exact TV of the first 3 emitted tokens vs the target, and chi-square samples to detect (alpha .01, power .99)
STATED = {
    "residual_not_updated": ("unigram3/3", F(833, 4608), 284),
    "wor_verified_as_iid": ("unigram3/3", F(5, 48), 714),
    "wor_draft_not_renormalized": ("unigram3/3", F(5, 48), 714),
    "bonus_from_parent": ("trigram3/2;2,2", F(3219, 20000), 417),
    "sorted_by_draft_prob": ("unigram3/3", F(317, 2916), 749),
    "child_of_rejected": ("trigram3/2;2,2", F(2017733, 21000000), 334),
}


def test_lossless_tree_rules_are_exact_on_every_standard_case():
    findings = run_tree_exact_stage(LOSSLESS)
    assert {f.verdict for f in findings} == {"exact"} and all(f.tv == 0 for f in findings)
    assert all(f.output_law == f.target_law for f in findings)


@pytest.mark.parametrize("tree", ["1", "3", "2;1,1", "3;2,0,1", "1;3"])
@pytest.mark.parametrize("rule", LOSSLESS)
def test_lossless_rules_exact_on_more_shapes(rule, tree):
    pair = PAIRS["bigram4_eos"]
    assert tree_n_token_law(pair.target, pair.draft, pair.prefix, tree, 3, rule) == target_law(pair.target, pair.prefix, 3)


@pytest.mark.parametrize("pair_name", list(PAIRS))
@pytest.mark.parametrize("k", [1, 3])
def test_chain_is_the_special_case_of_mss_and_rrs(pair_name, k):
    pair = PAIRS[pair_name]
    chain = round_law(pair.target, pair.draft, pair.prefix, k)
    for rule in ("iid_multi_draft", "wor_recursive_rejection"):
        assert tree_round_law(pair.target, pair.draft, pair.prefix, chain_shape(k), rule) == chain
    assert tree_n_token_law(pair.target, pair.draft, pair.prefix, chain_shape(k), 3) == n_token_law(pair.target, pair.draft, pair.prefix, k, 3)


@pytest.mark.parametrize("pair_name", list(PAIRS))
def test_chain_special_case_of_the_other_rules(pair_name):
    """On a chain: top-k target-only == greedy draft + fresh-target-match; Medusa tree == greedy-draft typical
    acceptance; bonus from the parent == the chain's bonus_wrong_position."""
    pair, k = PAIRS[pair_name], 2
    greedy = RULES["greedy_draft"].propose
    expected = {
        "topk_target_only": replace(RULES["fresh_target_match"], propose=greedy),
        "typical_acceptance_tree": replace(RULES["typical_acceptance"], propose=greedy),
        "bonus_from_parent": RULES["bonus_wrong_position"],
    }
    for tree_rule, chain_rule in expected.items():
        assert tree_round_law(pair.target, pair.draft, pair.prefix, chain_shape(k), tree_rule) == \
            round_law(pair.target, pair.draft, pair.prefix, k, chain_rule), tree_rule


@pytest.mark.parametrize("rule", MUTANTS)
def test_every_mutant_is_biased_by_its_stated_exact_tv(rule):
    case_name, tv, n = STATED[rule]
    (finding,) = run_tree_exact_stage([rule], [CASES[case_name]])
    assert (finding.verdict, finding.tv, finding.samples_needed) == ("biased", tv, n)


def test_stage_verdicts_match_declared_status():
    verdicts = rule_verdicts(run_tree_exact_stage(["iid_multi_draft", "typical_acceptance_tree", "bonus_from_parent"]))
    assert all(v.matches_declared for v in verdicts.values())
    assert verdicts["typical_acceptance_tree"].verdict == "biased"  # declared lossy


def test_residual_not_updated_by_hand():
    """p = (1/2, 1/2), q = (0, 1), two i.i.d. children (both token 1).  MSS: child 1 accepted w.p. 1/2, else
    p_2 = residual = (1, 0) rejects child 2 and the recovered token is 0: law (1/2, 1/2).  The mutant re-tests
    child 2 against p (accepted w.p. 1/2): law (1/4, 3/4), TV 1/4."""
    case = unigram_case("hand", ["1/2", "1/2"], ["0", "1"])
    law = tree_round_law(case.target, case.draft, (), "2", "residual_not_updated", max_new_tokens=1)
    assert law == {(0,): F(1, 4), (1,): F(3, 4)}
    assert tree_round_law(case.target, case.draft, (), "2", max_new_tokens=1) == {(0,): F(1, 2), (1,): F(1, 2)}


def test_unnormalized_draft_law_equals_draft_law_not_updated():
    """Finding: not renormalizing q after removing a rejected child is *the same law* as not updating q at all --
    a rejected child x had p_i(x) < q_i(x), so p_{i+1}(x) = 0 and x never enters a later ratio or residual."""
    for case in standard_tree_cases():
        laws = [tree_n_token_law(case.target, case.draft, case.prefix, case.tree, 3, r)
                for r in ("wor_draft_not_renormalized", "wor_verified_as_iid")]
        assert laws[0] == laws[1]


def test_accepted_count_law_and_round_law_are_distributions():
    pair = PAIRS["trigram3"]
    for rule in TREE_RULES:
        law = tree_round_law(pair.target, pair.draft, pair.prefix, "2;2,2", rule)
        assert sum(law.values()) == 1
        assert sum(tree_accepted_count_law(pair.target, pair.draft, pair.prefix, "2;2,2", rule)) == 1
    # a wider tree accepts more: mean accepted drafts, MSS width 2 vs the chain, same depth
    mean = lambda law: sum(j * p for j, p in enumerate(law))  # noqa: E731
    wide = tree_accepted_count_law(pair.target, pair.draft, pair.prefix, "2;2,2")
    chain = tree_accepted_count_law(pair.target, pair.draft, pair.prefix, "1;1")
    assert mean(wide) > mean(chain)


@pytest.mark.parametrize("rule", MUTANTS + ["typical_acceptance_tree"])
def test_hypothesis_finds_a_small_counterexample(rule):
    cx = find_tree_counterexample(rule, max_examples=100)  # derandomized; stops at the first biased case, then shrinks
    assert cx is not None and cx.tv > 0
    assert tree_depth(cx.tree) <= 2 and max(len(n) for n in (cx.tree,) + cx.tree) <= 3 and cx.target.vocab_size <= 3
    assert total_variation(cx.rule_law, cx.target_law) == cx.tv
    assert cx.describe().startswith("tree=")


def test_tree_shapes_round_trip_and_errors():
    for text in ["1", "3", "1;1", "2;1,1", "3;2,0,1", "2;0,3"]:
        assert tree_label(parse_tree(text)) == text
    assert parent_ids(parse_tree("2;1,1")) == [-1, 0, 0, 1, 2]
    assert num_draft_nodes(parse_tree("3;3,3,3")) == 12 and tree_depth(chain_shape(4)) == 4
    for bad in ["", "0", "2;1,1,1", "a;b", "-1"]:
        with pytest.raises(InvalidArgumentError, match="tree"):
            parse_tree(bad)
    with pytest.raises(InvalidArgumentError, match="iid_multi_draft"):
        get_tree_rule("no_such_rule")
    with pytest.raises(InvalidArgumentError, match="num_tokens"):
        tree_n_token_law(PAIRS["unigram3"].target, PAIRS["unigram3"].draft, (), "2", 0)


def test_docstring_examples_of_the_tree_modules():
    import doctest

    import verifier.decoders.tree_kernels
    import verifier.exact.tree_counterexample
    import verifier.exact.tree_laws
    import verifier.exact.tree_shape
    import verifier.exact.tree_stage

    for module in (verifier.exact.tree_shape, verifier.exact.tree_laws, verifier.exact.tree_stage,
                   verifier.exact.tree_counterexample, verifier.decoders.tree_kernels):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_suite_opt_in_key_runs_the_tree_stage():
    from verifier.runner.run import exact_stage
    from verifier.suite.schema import parse_suite

    base = {"schema_version": 1, "name": "t", "exact": {"rules": ["canonical"], "cases": ["seed_fallback"]}}
    assert {r["rule"] for r in exact_stage(parse_suite(base))["findings"]} == {"canonical"}
    out = exact_stage(parse_suite({**base, "exact": {**base["exact"], "trees": True}}))
    assert out["ok"] and {r["rule"] for r in out["findings"]} >= set(TREE_RULES)
