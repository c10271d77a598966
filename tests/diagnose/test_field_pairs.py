"""Pairs of defects with a mechanism the field reports (issue 26): family, exact laws, decoders, names.

Expected laws: ``verifier.exact.n_token_law`` (Fractions) with ``verifier.exact.composite.composite_rule(A, B)`` on the
processed tables (``target_processed_first_only`` built for the unprocessed table).  The diagnosis setting is the ci
suite's (tests/diagnose/_helpers.py: trigram3, prompt (0, 1), k = 2, 3 tokens, n = 2500 in calls of 500), seeds
fixed; naming needs log LR >= log(M / 0.01) over the target with M = 154 and the best's own fit not rejected at 1e-3.
Decoder laws: chi-square on the 3 emitted tokens at ALPHA = 1e-3 (a decoder sampling its law fails with probability
1e-3; fixed seeds make it deterministic), N = 8,000 rows: power 0.99 against TV ~ 0.03; every case asserts an exact
TV >= 0.03 to the target and to each single part's law, so a decoder with one defect only fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.decoders.field_pairs import field_pair_buildable, field_pair_decoder
from verifier.diagnose.family import NOT_WELL_DEFINED, composite_names, family_size, hypothesis, parts_of
from verifier.diagnose.inputs import all_sequences, sequence_probs
from verifier.diagnose.likelihood import log_likelihood
from verifier.errors import InvalidArgumentError
from verifier.exact import RULES, n_token_law, standard_tabular_pairs, target_law, total_variation
from verifier.exact.composite import composite_rule
from verifier.exact.field_rules import target_processed_first_only
from verifier.models import TabularCausalLM, processed_tabular
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

from tests.diagnose._helpers import CI_K, T07K2, T1, decoder_calls, diagnose, wrapped

FIELD = ("recovered_one_late", "draft_accept_same_uniform", "target_processed_first_only")
FIELD_PAIRS = [n for n in composite_names() if set(parts_of(n)[0]) & set(FIELD)]
RAW = SamplingConfig()  # T = 1, no filter: the exact tables themselves
ALPHA, N = 1e-3, 8_000


def test_field_mechanisms_enter_pairs_and_the_family_grows_to_154():
    """22 pairs with a field mechanism (57 in all); each of them and its @prefill variant is a hypothesis."""
    assert len(FIELD_PAIRS) == 22 and len(composite_names()) == 57
    assert family_size() == 154  # 24 singles nameable + 57 pairs, each also @prefill (latent ones alone)
    for pair in NOT_WELL_DEFINED:
        a, b = sorted(pair)
        assert f"{a}+{b}" not in composite_names() and f"{b}+{a}" not in composite_names()
    m = hypothesis("greedy_draft+recovered_one_late")
    assert m.late_recover and not m.later_raw
    m = hypothesis("residual_by_index+target_processed_first_only@prefill")
    assert m.later_raw and m.needs_raw and m.target == "p_raw" and m.lead == 1
    assert "q_dtype_mismatch" not in {p for n in composite_names() for p in parts_of(n)[0]}


def _tables(pair, cfg):
    if cfg == RAW:  # the tables themselves (processing through floats would break exact ties of p and q)
        return pair.target, pair.draft, pair.target
    return processed_tabular(pair.target, cfg), processed_tabular(pair.draft, cfg), processed_tabular(pair.target, RAW)


@pytest.mark.parametrize("pair_name", ["trigram3", "bigram4_eos"])
@pytest.mark.parametrize("cfg", [RAW, T07K2], ids=["t1", "t07k2"])
@pytest.mark.parametrize("k,num_tokens", [(1, 2), (2, 3)])
def test_composed_likelihood_is_the_exact_law(pair_name, cfg, k, num_tokens):
    """Every N-token outcome's likelihood under each field pair (and its @prefill variant) equals the probability the
    exact enumerator gives it (``n_token_law`` with ``composite_rule``; @prefill: the rule's law after one target
    sample)."""
    pair = standard_tabular_pairs()[pair_name]
    target, draft, raw = _tables(pair, cfg)
    vocab, eos = pair.target.vocab_size, pair.target.eos_token_id
    tr, dr = ReferenceModel(pair.target, vocab, eos), ReferenceModel(pair.draft, vocab, eos)
    seqs = all_sequences(vocab, num_tokens, eos)
    sp = sequence_probs(tr, dr, pair.prefix, seqs, cfg)
    first = {(x,): px for x, px in enumerate(target.probs(pair.prefix)) if px}
    for name in FIELD_PAIRS:
        rule = composite_rule(*parts_of(name)[0], target_raw=raw)
        law = n_token_law(target, draft, pair.prefix, k, num_tokens, rule)
        prefill = {}
        for f, pf in first.items():
            rest = {(-1,) * (num_tokens - 1): 1} if f[0] == eos else n_token_law(target, draft, pair.prefix + f, k, num_tokens - 1, rule)
            for tail, pr in rest.items():
                prefill[f + tail] = prefill.get(f + tail, 0) + pf * pr
        for hyp, exact in ((name, law), (name + "@prefill", prefill)):
            expected = np.array([float(exact.get(tuple(int(v) for v in s), 0)) for s in seqs])  # -1 after EOS in both
            got = np.exp(log_likelihood(hypothesis(hyp), sp, k))
            assert abs(expected.sum() - 1) < 1e-12
            np.testing.assert_allclose(got, expected, atol=1e-13, err_msg=f"{hyp} on {pair_name}, k={k}")


def test_a_pair_is_not_either_part():
    """The pairs measured by ``bench diagnose-field`` differ from each single part (exact TV > 0.03)."""
    pair = standard_tabular_pairs()["trigram3"]
    for name, cfg in [("greedy_draft+recovered_one_late", RAW), ("residual_by_index+target_processed_first_only", T07K2)]:
        target, draft, raw = _tables(pair, cfg)
        law = n_token_law(target, draft, pair.prefix, CI_K, 3, composite_rule(*parts_of(name)[0], target_raw=raw))
        for part in parts_of(name)[0]:
            single = target_processed_first_only(raw) if part == "target_processed_first_only" else part
            assert total_variation(law, n_token_law(target, draft, pair.prefix, CI_K, 3, single)) > 0.03, (name, part)


DECODER_CASES = [("greedy_draft+recovered_one_late", RAW, 41), ("bonus_wrong_position+recovered_one_late", RAW, 42),
                 ("recovered_one_late+draft_accept_same_uniform", RAW, 43),
                 ("full_p_fallback+draft_accept_same_uniform", RAW, 44),
                 ("residual_by_index+target_processed_first_only", T07K2, 45),
                 ("greedy_draft+target_processed_first_only", T07K2, 46),
                 ("draft_accept_same_uniform+target_processed_first_only", SamplingConfig(temperature=0.7), 47)]


@pytest.mark.parametrize("name,cfg,seed", DECODER_CASES, ids=[c[0] for c in DECODER_CASES])
def test_pair_decoder_samples_its_exact_law_and_not_a_single_parts(name, cfg, seed):
    from tests.decoders._helpers import chisquare_vs_law

    pair = standard_tabular_pairs()["trigram3"]
    target, draft, raw = _tables(pair, cfg)
    law = n_token_law(target, draft, pair.prefix, CI_K, 3, composite_rule(*parts_of(name)[0], target_raw=raw))
    decoder = field_pair_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), CI_K)
    rows = decoder.generate(list(pair.prefix), N, 3, cfg, seed)
    assert chisquare_vs_law(rows, law)[1] > ALPHA
    singles = [target_law(target, pair.prefix, 3)]
    singles += [n_token_law(target, draft, pair.prefix, CI_K, 3, target_processed_first_only(raw) if p == FIELD[2] else p)
                for p in parts_of(name)[0]]
    for single in singles:
        assert total_variation(law, single) > 0.03
        assert chisquare_vs_law(rows, single)[1] < ALPHA


def test_every_pair_decoder_is_built_or_refused_with_the_pairs_it_builds():
    unbuilt = {n for n in FIELD_PAIRS if not field_pair_buildable(n)}  # zoo-kernel parts; late recovery + an acceptance change
    assert unbuilt == {"softmax_residual+draft_accept_same_uniform", "softmax_residual+target_processed_first_only",
                       "shared_uniform+target_processed_first_only", "deterministic_acceptance+recovered_one_late",
                       "shared_uniform+recovered_one_late", "synthetic_acceptance+recovered_one_late"}, unbuilt
    target, draft = wrapped()
    with pytest.raises(InvalidArgumentError, match="name='shared_uniform\\+recovered_one_late'.*target_processed_first_only with"):
        field_pair_decoder("shared_uniform+recovered_one_late", target, draft, CI_K)
    assert RULES["recovered_one_late"].recover_after is not None


def test_the_decoder_builds_no_pair_the_family_leaves_out():
    """field_pair_decoder built target_processed_first_only with the exact kernels block_verification and
    fresh_target_match: pairs no composite law (composite_rule: "an exact rule changes nothing") nor diagnosis has."""
    from verifier.decoders import kernels as K
    from verifier.diagnose.family import MECHANISMS

    names = set(MECHANISMS) | set(K.KERNELS)
    built = {f"{a}+{b}" for a in names for b in names if field_pair_buildable(f"{a}+{b}")}
    family = set(composite_names()) | {"+".join(n.split("+")[::-1]) for n in composite_names()}
    assert built and built <= family, sorted(built - family)
    assert not field_pair_buildable("block_verification+target_processed_first_only")


@pytest.mark.parametrize("name, match", [
    ("greedy_draft+draft_accept_same_uniform", "these two mechanisms make no composite"),  # NOT_WELL_DEFINED
    ("draft_accept_same_uniform+greedy_draft", "these two mechanisms make no composite"),  # either order
    ("canonical+greedy_draft", "these two mechanisms make no composite"),  # an exact part
    ("greedy_draft+recovered_one_late+canonical", "a composite A\\+B of two"), ("greedy_draft+", "a composite A\\+B"),
    (None, "mechanism=None.*a string"), (["greedy_draft"], "a string"), (5, "a string")])
def test_a_name_outside_the_family_is_refused_saying_why(name, match):
    with pytest.raises(InvalidArgumentError, match=match):
        hypothesis(name)


def test_a_pair_in_the_other_order_is_the_same_hypothesis():
    a, b = "greedy_draft", "recovered_one_late"
    assert f"{a}+{b}" in composite_names() and hypothesis(f"{b}+{a}") == hypothesis(f"{a}+{b}")
    assert hypothesis(f"{b}+{a}@prefill").name == f"{a}+{b}@prefill"


@pytest.mark.parametrize("name,cfg,seed", [("greedy_draft+recovered_one_late", T1, 1611),
                                           ("residual_by_index+target_processed_first_only", T07K2, 1612)])
def test_a_field_pair_mutant_is_named_as_the_pair(name, cfg, seed):
    """n = 2500 rows of the pair decoder (calls of 500), alpha 0.01: named as the pair, neither part alone."""
    target, draft = wrapped()
    rows, calls = decoder_calls(field_pair_decoder(name, target, draft, CI_K), cfg, seed=seed)
    d = diagnose(rows, cfg, calls=calls)["decision"]
    assert d["status"] == "consistent" and d["best"][0] == name, d["sentence"]
    assert not set(parts_of(name)[0]) & set(d["best"]), d["sentence"]


@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_a_lossless_decoder_is_not_named(cfg):
    """The reference decoder's rows (seed 1613, n = 2500): no hypothesis of the larger family named, a pair included."""
    target, draft = wrapped()
    rows, calls = decoder_calls(make_decoder("reference", target, draft, CI_K), cfg, seed=1613)
    d = diagnose(rows, cfg, calls=calls, bias=True)["decision"]
    assert d["status"] != "consistent", d["sentence"]
