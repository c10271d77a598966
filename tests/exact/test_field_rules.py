"""Mechanisms the field reports (issue 26): the exact laws of ``verifier.exact.field_rules``.

Each law is checked against an independent computation: ``draft_accept_same_uniform``'s step law against an exact
integral over the shared uniform (u cut at every CDF point and ratio, the draw and the decision constant in each
piece); ``recovered_one_late`` on a context-free pair against ``full_p_fallback`` (k = 1: the bonus row is p) and the
canonical rule at the first position of k = 2 (the next rows equal this position's); ``target_processed_first_only``
against the canonical law without processing and against the processed target's first token.  Every biased figure
comes from the enumerator (``specverify exact --rule recovered_one_late --rule draft_accept_same_uniform`` prints
them).
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from verifier.cli import main
from verifier.errors import EXIT_OK, InvalidArgumentError
from verifier.exact import (RULES, marginal, n_token_law, round_law, run_exact_stage, standard_cases, standard_tabular_pairs,
                            step_law, target_law, total_variation)
from verifier.exact.field_rules import FIELD_RULES, same_uniform_acceptance, target_processed_first_only
from verifier.exact.tabular import TabularLM

PAIRS = standard_tabular_pairs()
TABULAR = ("unigram3", "bigram4_eos", "trigram3")


def _processed(lm: TabularLM, power: int) -> TabularLM:
    """The table at temperature 1 / power, exactly: each row ``p ** power / sum(p ** power)``."""
    table = {}
    for ctx in lm.contexts:
        w = [v ** power for v in lm.probs(ctx)]
        table[ctx] = tuple(x / sum(w) for x in w)
    return TabularLM(table, lm.vocab_size, lm.context_len, lm.eos_token_id, name=f"{lm.name}|T=1/{power}")


def test_field_rules_are_registered_biased_and_listed_by_the_exact_cli(capsys):
    assert set(FIELD_RULES) == {"recovered_one_late", "draft_accept_same_uniform"}
    for name, rule in FIELD_RULES.items():
        assert RULES[name] is rule and rule.declared == "biased"
    assert main(["exact", "--rule", "recovered_one_late", "--rule", "draft_accept_same_uniform", "--no-search"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "trigram3" in out and "recovered_one_late=1537/5000" in out and "draft_accept_same_uniform=307/1000" in out


@pytest.mark.parametrize("name", sorted(FIELD_RULES))
def test_each_rule_is_biased_on_every_shipped_tabular_pair(name):
    """TV > 0 on unigram3, bigram4_eos and trigram3 (k = 2, N = 3), printed for the record."""
    findings = {f.case: f for f in run_exact_stage([name], [c for c in standard_cases() if c.name in TABULAR])}
    for case in TABULAR:
        print(f"{name} on {case}: TV {float(findings[case].tv):.4f}, n {findings[case].samples_needed}")
        assert findings[case].verdict == "biased" and findings[case].tv > 0, case
    assert sum(findings[TABULAR[0]].output_law.values()) == 1


def _same_uniform_by_integration(p, q):
    """Output law of one step with a shared uniform, by integrating u over [0, 1) piece by piece."""
    cuts = {F(0), F(1)}
    cdf = F(0)
    for x, qx in enumerate(q):
        cdf += qx
        cuts.add(cdf)
        if qx:
            cuts.add(min(F(1), p[x] / qx))
    cuts = sorted(cuts)
    accepted = [F(0)] * len(p)
    for lo, hi in zip(cuts, cuts[1:]):
        mid, acc, x = (lo + hi) / 2, F(0), 0
        while acc + q[x] <= mid:  # inverse CDF in token-id order: the first x with mid < F(x)
            acc += q[x]
            x += 1
        if mid < p[x] / q[x]:
            accepted[x] += hi - lo
    reject = 1 - sum(accepted)
    residual = [max(F(0), a - b) for a, b in zip(p, q)]
    return tuple(a + (reject * r / sum(residual) if reject else 0) for a, r in zip(accepted, residual))


@pytest.mark.parametrize("p,q", [
    ((F(1, 2), F(3, 10), F(1, 5)), (F(1, 5), F(3, 10), F(1, 2))),
    ((F(1, 5), F(1, 2), F(3, 10)), (F(1, 2), F(3, 10), F(1, 5))),
    ((F(1, 10), F(2, 5), F(1, 4), F(1, 4)), (F(1, 4), F(1, 4), F(2, 5), F(1, 10))),
    ((F(1, 2), F(1, 2)), (F(1, 3), F(2, 3))),
])
def test_same_uniform_step_law_is_the_integral_over_the_shared_uniform(p, q):
    law = step_law(p, q, "draft_accept_same_uniform")
    assert law.output_law == _same_uniform_by_integration(p, q)
    assert all(law.acceptance_probs[x] == same_uniform_acceptance(p, q, x) for x in range(len(p)))


def test_recovered_one_late_on_a_context_free_pair():
    """The next rows of a context-free pair are this position's: canonical before the last position, p at it."""
    pair = PAIRS["unigram3"]
    k1 = round_law(pair.target, pair.draft, (), 1, "recovered_one_late")
    assert k1 == round_law(pair.target, pair.draft, (), 1, "full_p_fallback") != round_law(pair.target, pair.draft, (), 1)
    k2 = round_law(pair.target, pair.draft, (), 2, "recovered_one_late")
    assert marginal(k2, 0) == marginal(round_law(pair.target, pair.draft, (), 2), 0)
    assert k2 != round_law(pair.target, pair.draft, (), 2)


def test_recovered_one_late_reads_the_rows_after_the_rejected_token():
    """bigram4_eos, k = 2, first round: a rejection at position 1 draws from residual(p(.|x), q(.|x)) of the rejected x."""
    pair = PAIRS["bigram4_eos"]
    t, d, prefix = pair.target, pair.draft, pair.prefix
    p, q = t.probs(prefix), d.probs(prefix)
    want = [F(0)] * 4
    for x in range(4):
        a = min(F(1), p[x] / q[x]) if q[x] else F(0)
        nxt = [max(F(0), u - v) for u, v in zip(t.probs(prefix + (x,)), d.probs(prefix + (x,)))]
        for y in range(4):
            want[y] += q[x] * (1 - a) * (nxt[y] / sum(nxt) if sum(nxt) else t.probs(prefix + (x,))[y])
    law = round_law(t, d, prefix, 2, "recovered_one_late")
    # one-token rounds: a rejection at position 1, or an accepted EOS draft (the sequence ends): take that one out
    got = [law.get((y,), F(0)) for y in range(4)]
    eos = t.eos_token_id
    got[eos] -= q[eos] * min(F(1), p[eos] / q[eos])
    assert got == want


def test_target_processed_first_only_is_canonical_without_processing():
    for name in ("bigram4_eos", "trigram3"):
        pair = PAIRS[name]
        rule = target_processed_first_only(pair.target)
        for k in (1, 2):
            assert round_law(pair.target, pair.draft, pair.prefix, k, rule) == round_law(pair.target, pair.draft, pair.prefix, k)
        assert n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, rule) == target_law(pair.target, pair.prefix, 3)


@pytest.mark.parametrize("name", ["bigram4_eos", "trigram3"])
def test_target_processed_first_only_is_biased_under_processing_from_the_second_token(name):
    """At T = 1/2 (rows squared, exactly): the first token is the processed target's, the 3-token law is not."""
    pair = PAIRS[name]
    processed = _processed(pair.target, 2)
    rule = target_processed_first_only(pair.target)
    law = n_token_law(processed, pair.draft, pair.prefix, 2, 3, rule)
    truth = target_law(processed, pair.prefix, 3)
    assert marginal(law, 0) == marginal(truth, 0)
    tv = total_variation(law, truth)
    print(f"target_processed_first_only on {name} at T = 1/2: TV {float(tv):.4f}")
    assert tv > F(1, 100)


def test_target_processed_first_only_bad_input_names_the_argument():
    with pytest.raises(InvalidArgumentError, match="target_raw"):
        target_processed_first_only("trigram3")
    pair = PAIRS["trigram3"]
    rule = target_processed_first_only(PAIRS["bigram4_eos"].target)
    with pytest.raises(InvalidArgumentError, match="target_raw.vocab_size"):
        round_law(pair.target, pair.draft, pair.prefix, 2, rule)
