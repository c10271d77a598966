"""run_exact_stage, the `specverify exact` command and input errors.

Reference sample sizes are DESIGN.md's (chi-square, alpha 0.01, power 0.99, exact multinomial):
full-p fallback on p=(.2,.5,.3), q=(.5,.3,.2) needs 1259; on p=(.4,.2,.4), q=(.2,.5,.3) 789;
one-hot draft on p=(.5,.3,.2) 101.  Regenerate with ``specverify exact --rule full_p_fallback``.
"""

import dataclasses
import json
from fractions import Fraction as F

import pytest

from verifier.cli import main
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_USAGE, InvalidArgumentError
from verifier.exact import (
    RULES,
    TabularLM,
    accepted_count_law,
    n_token_law,
    round_law,
    rule_verdicts,
    run_exact_stage,
    standard_cases,
    standard_tabular_pairs,
    step_law,
    target_law,
    unigram_case,
)

pytest.importorskip("verifier.stats.power")  # the sample sizes come from the statistics module


@pytest.fixture(scope="module")
def findings():
    return run_exact_stage()


def test_every_rule_matches_its_declared_status_on_the_standard_cases(findings):
    cases = standard_cases()
    assert len(findings) == len(RULES) * len(cases)
    verdicts = rule_verdicts(findings)
    assert list(verdicts) == list(RULES)
    for name, v in verdicts.items():
        assert v.matches_declared, name
        assert v.verdict == ("exact" if RULES[name].declared == "exact" else "biased"), name
    for f in findings:
        assert (f.verdict == "exact") == (f.tv == 0) == (f.output_law == f.target_law)
        assert (f.samples_needed is None) == (f.verdict == "exact")


def test_design_reference_sample_sizes(findings):
    by = {(f.rule, f.case): f for f in findings}
    assert by["full_p_fallback", "seed_fallback"].tv == F(3, 50)
    assert by["full_p_fallback", "seed_fallback"].samples_needed == 1259
    assert by["full_p_fallback", "seed_residual"].samples_needed == 789
    assert by["full_p_fallback", "seed_one_hot_draft"].samples_needed == 101


def test_a_rule_that_lies_about_being_exact_is_caught():
    liar = dataclasses.replace(RULES["full_p_fallback"], name="liar", declared="exact")
    honest_but_useless = dataclasses.replace(RULES["canonical"], name="fake_mutant", declared="biased")
    verdicts = rule_verdicts(run_exact_stage([liar, honest_but_useless], standard_cases()[:2]))
    assert not verdicts["liar"].matches_declared and verdicts["liar"].verdict == "biased"
    assert not verdicts["fake_mutant"].matches_declared and verdicts["fake_mutant"].verdict == "exact"


def test_json_of_a_finding_round_trips(findings):
    data = json.loads(json.dumps(next(f for f in findings if f.rule == "full_p_fallback").to_json()))
    assert data["rule"] == "full_p_fallback" and F(data["tv"]) > 0
    assert sum(F(o["prob"]) for o in data["output_law"]) == 1


def test_cli_lists_every_rule_with_the_right_verdict(capsys):
    assert main(["exact"]) == EXIT_OK
    out = capsys.readouterr().out
    for name, rule in RULES.items():
        line = next(l for l in out.splitlines() if l.startswith(name + " "))
        assert ("exact" if rule.declared == "exact" else "biased") in line.split()[2]
        assert " yes " in line
    assert "full_p_fallback: p=(" in out and "TV=" in out
    assert f"OK: {len(RULES)}/{len(RULES)}" in out


def test_cli_json_and_rule_selection(capsys):
    assert main(["exact", "--rule", "full-p-fallback", "--rule", "canonical", "--format", "json", "--max-examples", "50"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert [r["rule"] for r in data["rules"]] == ["full_p_fallback", "canonical"]
    assert data["rules"][0]["counterexample"]["text"].startswith("p=(")
    assert data["rules"][1]["counterexample"] is None


def test_cli_exit_1_when_a_verdict_contradicts_the_declared_status(monkeypatch, capsys):
    monkeypatch.setitem(RULES, "liar", dataclasses.replace(RULES["full_p_fallback"], name="liar", declared="exact"))
    assert main(["exact", "--rule", "liar", "--no-search"]) == EXIT_BIAS
    assert "FAIL" in capsys.readouterr().out


def test_cli_unknown_rule_is_a_usage_error_listing_the_names(capsys):
    assert main(["exact", "--rule", "nope"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "rule='nope'" in err and "canonical" in err and "typical_acceptance" in err


# -- input errors (issue item 8): the message names the argument, the value and the rule ---------

PAIR = standard_tabular_pairs()["bigram4_eos"]


@pytest.mark.parametrize(
    "p, q, needle",
    [
        ([0.5, 0.5], [0.2, 0.3, 0.5], "len(draft_probs)=3"),
        ([0.5, 0.5], [1.5, -0.5], "draft_probs=['3/2', '-1/2']"),
        ([0.5, 0.6], [0.5, 0.5], "target_probs=['1/2', '3/5']"),
        ([], [], "target_probs=[]"),
        ("ab", [1], "target_probs='ab'"),
    ],
)
def test_step_law_input_errors(p, q, needle):
    with pytest.raises(InvalidArgumentError) as info:
        step_law(p, q, "full_p_fallback")
    msg = str(info.value)
    assert needle in msg and "rule='full_p_fallback'" in msg and "allowed" in msg


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: round_law(PAIR.target, PAIR.draft, PAIR.prefix, 0, "shared_uniform"), "num_draft_tokens=0"),
        (lambda: n_token_law(PAIR.target, PAIR.draft, PAIR.prefix, 2, 0, "shared_uniform"), "num_tokens=0"),
        (lambda: accepted_count_law(PAIR.target, PAIR.draft, (), 2, "shared_uniform"), "prefix=()"),
        (lambda: round_law(PAIR.target, PAIR.draft, (9,), 1, "shared_uniform"), "prefix=(9,)"),
        (lambda: round_law(PAIR.target, standard_tabular_pairs()["trigram3"].draft, (0, 1), 1, "shared_uniform"), "draft.vocab_size=3"),
        (lambda: round_law(PAIR.target, PAIR.draft, PAIR.prefix, 1, "shared_uniform", max_new_tokens=0), "max_new_tokens=0"),
    ],
)
def test_enumerator_input_errors(call, needle):
    with pytest.raises(InvalidArgumentError) as info:
        call()
    assert needle in str(info.value) and "rule='shared_uniform'" in str(info.value)


def test_model_and_case_input_errors():
    with pytest.raises(InvalidArgumentError, match="vocab_size=0"):
        TabularLM({(): []}, 0, 0)
    with pytest.raises(InvalidArgumentError, match="num_tokens=0"):
        target_law(PAIR.target, PAIR.prefix, 0)
    with pytest.raises(InvalidArgumentError, match="table"):
        unigram_case("bad", [0.5, 0.6], [0.5, 0.5])
    with pytest.raises(InvalidArgumentError, match="rules=\\[\\]"):
        run_exact_stage([])
