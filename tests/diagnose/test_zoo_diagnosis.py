"""Test the tester: every zoo rule and decoder-level mutant, at the ci suite's n, is diagnosed as itself.

Setting: trigram3, prompt (0, 1), k = 2, 3 tokens, n = 2500 (suites/ci.toml); T = 1, or T = 0.7 with
top_k = 2 for the two mutants only visible under processing.  Decoder mutants are the registered
decoders themselves; the zoo rules without a decoder (softmax_residual, shared_uniform) draw rows from
their exact law (``verifier.exact.n_token_law``).  Fixed seeds.  Naming a mechanism needs log LR >=
log(M / 0.01) over the target and its own law not rejected at 1e-3 (false-fail rate <= 2e-3 per
set); `specverify bench diagnose` measures 100% accuracy at this n for each (reports/benchmarks.md).
The lossless decoders must get "no mechanism preferred" (false-diagnosis rate <= 0.01 by construction,
0 of 400 measured null runs).
"""

import pytest

from verifier.decoders.field_mutants import FIELD_DECODER_REGISTRY
from verifier.decoders.mutants import DECODER_REGISTRY, make_decoder
from verifier.diagnose.mechanisms import MECHANISMS, mechanism_for_decoder
from verifier.exact import n_token_law

from tests.diagnose._helpers import CI_K, CI_N, CI_TOKENS, PROMPT, T07K2, T1, decoder_calls, decoder_rows, diagnose, law_rows, trigram3, wrapped

pytestmark = pytest.mark.slow

PROCESSING_ONLY = {"draft_raw_q", "target_unprocessed", "residual_by_index"}  # visible only with top-k (different token sets)
MODELLED_MUTANTS = [n for n, s in DECODER_REGISTRY.items()
                    if s.declared != "exact" and mechanism_for_decoder(n) not in (None, "canonical")]
RULES_WITHOUT_DECODER = [n for n, m in MECHANISMS.items() if m.kind == "rule" and m.declared != "exact"
                         and not any(n in DECODER_REGISTRY[d].name or mechanism_for_decoder(d) == n for d in DECODER_REGISTRY)
                         and n not in FIELD_DECODER_REGISTRY]  # the field mechanisms: tests/diagnose/test_field_mechanisms.py


def test_the_lists_cover_the_zoo():
    assert set(RULES_WITHOUT_DECODER) == {"softmax_residual", "shared_uniform"}
    assert len(MODELLED_MUTANTS) == 14  # every registered mutant but degenerate_residual_div0 (= canonical with float64 probs)
    assert {"kv_not_rolled_back", "batch_cross_talk"} <= set(MODELLED_MUTANTS)


@pytest.mark.parametrize("name", MODELLED_MUTANTS)
def test_decoder_mutant_is_diagnosed_as_itself(name):
    target, draft = wrapped()
    cfg = T07K2 if name in PROCESSING_ONLY else T1
    rows, calls = decoder_calls(make_decoder(name, target, draft, CI_K), cfg, seed=1501)  # 5 calls of 500, as the ci suite
    d = diagnose(rows, cfg, calls=calls)["decision"]
    assert d["status"] == "consistent", d["sentence"]
    assert mechanism_for_decoder(name) in d["best"], d["sentence"]
    assert d["sentence"].startswith(f"consistent with {d['best'][0]}")


@pytest.mark.parametrize("rule", ["softmax_residual", "shared_uniform"])
def test_zoo_rule_is_diagnosed_as_itself(rule):
    pair, _, _ = trigram3()
    rows = law_rows(n_token_law(pair.target, pair.draft, PROMPT, CI_K, CI_TOKENS, rule), CI_N, seed=1502)
    d = diagnose(rows, T1)["decision"]
    assert d["status"] == "consistent" and d["best"][0] == rule, d["sentence"]


@pytest.mark.parametrize("name", ["reference", "fresh_target_match", "block_verification", "ancestral"])
@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_lossless_decoders_get_no_mechanism(name, cfg):
    target, draft = wrapped()
    rows = decoder_rows(make_decoder(name, target, draft, CI_K), cfg, seed=1503)
    d = diagnose(rows, cfg, bias=False)["decision"]
    assert d["status"] == "none preferred", d["sentence"]
    assert d["sentence"].startswith("no mechanism preferred over the target")
    assert diagnose(rows, cfg, bias=True)["decision"]["status"] != "consistent"


@pytest.mark.parametrize("plugin", ["recover_from_draft", "hot_target"])
@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_unknown_mechanisms_match_no_known_mechanism(plugin, cfg):
    from tests.diagnose import unknown_plugins

    target, draft = wrapped()
    factory = getattr(unknown_plugins, plugin)
    dec = factory(target, draft, CI_K) if plugin == "recover_from_draft" else factory(target)
    d = diagnose(decoder_rows(dec, cfg, seed=1504), cfg)["decision"]
    assert d["status"] == "no known mechanism", d["sentence"]
    assert d["sentence"].startswith("matches no known mechanism")


@pytest.mark.parametrize("name,sentence", [("full_p_fallback", "the bias appears on recovered tokens, not on accepted, bonus tokens"),
                                           ("draft_suffix_kept", "unverified draft tokens were emitted after rejections")])
def test_origins_localize_the_bias(name, sentence):
    """The reference decoder's DecoderStats.origins: per-origin PIT tests against the canonical law given the
    origin (alpha 1e-3 over the groups); the reference has no flagged group."""
    target, draft = wrapped()
    dec = make_decoder(name, target, draft, CI_K)
    rows = decoder_rows(dec, T1, seed=1505)
    assert dec.last_stats.origins.shape == rows.shape
    loc = diagnose(rows, T1, origins=dec.last_stats.origins)["localization"]
    assert sentence in loc["sentence"]
    ref = make_decoder("reference", target, draft, CI_K)
    rows = decoder_rows(ref, T1, seed=1505)
    loc = diagnose(rows, T1, bias=False, origins=ref.last_stats.origins)["localization"]
    assert not any(g.get("biased") for g in loc["by_origin"] + loc["by_round_position"]), loc


def test_a_decoder_with_two_defects_is_named_as_the_pair():
    """Issue 26: the greedy draft (argmax proposed, softmax q in the ratio) and the by-index residual in one decoder,
    T = 0.7, top-k 2 (different token sets), seed 1509: named as the pair, neither part alone."""
    from verifier.decoders import kernels as K
    from verifier.decoders.mutants import GreedyDraftSoftmaxQDecoder

    target, draft = wrapped()
    dec = GreedyDraftSoftmaxQDecoder(target, draft, CI_K, kernel=K.residual_by_index_kernel)
    rows, calls = decoder_calls(dec, T07K2, seed=1509)
    d = diagnose(rows, T07K2, calls=calls)["decision"]
    assert d["status"] == "consistent" and d["best"][0] == "greedy_draft+residual_by_index", d["sentence"]
    assert "greedy_draft" not in d["best"] and "residual_by_index" not in d["best"], d["sentence"]


@pytest.mark.full
def test_every_draft_accepted_is_its_own_mechanism_and_named_with_the_law_it_equals():
    """Issue 26: on trigram3 every target prob is above the typical-acceptance threshold, so accept_all and
    typical_acceptance have the same law: the class is named, with both, never typical_acceptance alone."""
    target, draft = wrapped()
    rows, calls = decoder_calls(make_decoder("accept_all", target, draft, CI_K), T1, seed=1510)
    d = diagnose(rows, T1, calls=calls)["decision"]
    assert d["status"] == "consistent" and set(d["best"][:2]) == {"accept_all", "typical_acceptance"}, d["sentence"]
    assert d["equivalent"] == [d["best"][1]] and "typical_acceptance = accept_all" in d["sentence"], d["sentence"]
    assert set(d["best"][2:]) <= {"batch_cross_talk"}  # 5 calls: cross-talk's "all accepted" class is the same law
    # on every row but each call's row 0: not separated by the margin a name needs, so named beside, never alone
