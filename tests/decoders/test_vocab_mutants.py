"""Drafts in another vocabulary (issue 29 kind 7): each ``VocabMappedDecoder`` mode samples its exact law.

Expected laws from ``verifier.exact.vocab.vocab_n_token_law`` (default map (0, 0, 1, ..., V - 2), equal split, for
vocab_mapped / many_to_one_q_single, the identity for the others; reversed permutation, bfloat16, top-k 2 where the request sets it).  Chi-square on the first 3 emitted tokens at
ALPHA = 1e-3, fixed seeds: a correct decoder fails with probability 1e-3 (deterministic for the seed).  N = 8,000 rows
at <= 64 pooled categories has power 0.99 against Cohen's w ~ 0.07 (TV ~ 0.04); each biased mode's exact TV to the
target on its case is >= 0.12 (bigram4_eos / trigram3, k = 2), so it must also reject the target's law -- except
q_dtype_mismatch, whose TV (3.5e-4 on bigram4_eos) is out of reach of any affordable n: only its own law is checked.
"""

from __future__ import annotations

import pytest

from verifier.decoders import make_decoder
from verifier.decoders.vocab_mutants import MANY_TO_ONE_MODES, VOCAB_DECODER_MODES, VOCAB_DECODER_REGISTRY, VocabMappedDecoder
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law, total_variation
from verifier.exact.vocab import map_draft, vocab_n_token_law, vocab_view
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig

from ._helpers import chisquare_vs_law, processed_tabular

ALPHA = 1e-3
N = 8_000
K, NUM_TOKENS = 2, 3
CASES = [("vocab_mapped", "trigram3", None, 11), ("many_to_one_q_single", "bigram4_eos", None, 12),
         ("many_to_one_q_single", "trigram3", None, 13), ("q_permuted", "bigram4_eos", None, 14),
         ("q_permuted", "trigram3", None, 15), ("q_dtype_mismatch", "bigram4_eos", None, 16),
         ("draft_processors_differ", "bigram4_eos", 2, 17), ("vocab_mapped", "bigram4_eos", 2, 18)]


@pytest.mark.parametrize("name,case,top_k,seed", CASES)
def test_decoder_samples_its_exact_law(name, case, top_k, seed):
    pair = standard_tabular_pairs()[case]
    sampling = SamplingConfig(top_k=top_k)
    target = processed_tabular(pair.target, sampling)
    view = vocab_view(VOCAB_DECODER_MODES[name], vocab_size=pair.target.vocab_size, top_k=top_k or 2)
    m = None if name in MANY_TO_ONE_MODES else range(pair.target.vocab_size)  # the decoders' default maps
    law = vocab_n_token_law(target, map_draft(pair.draft, m), pair.prefix, K, NUM_TOKENS, view)
    truth = target_law(target, pair.prefix, NUM_TOKENS)
    decoder = make_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), K)
    rows = decoder.generate(list(pair.prefix), N, NUM_TOKENS, sampling, seed)
    assert chisquare_vs_law(rows, law)[1] > ALPHA
    if VOCAB_DECODER_REGISTRY[name].declared == "exact":
        assert law == truth
    elif name != "q_dtype_mismatch":
        assert total_variation(law, truth) > 0.1
        assert chisquare_vs_law(rows, truth)[1] < ALPHA


def test_processors_mutant_is_the_reference_without_a_filter():
    """At T = 1 without top-k/top-p the draft samples what is reported: same rows as vocab_mapped for a seed."""
    pair = standard_tabular_pairs()["bigram4_eos"]
    t, d = TabularCausalLM(pair.target), TabularCausalLM(pair.draft)
    a = make_decoder("draft_processors_differ", t, d, K, draft_to_target=[0, 0, 1, 2]).generate(
        list(pair.prefix), 500, 4, SamplingConfig(), 5)
    b = make_decoder("vocab_mapped", t, d, K).generate(list(pair.prefix), 500, 4, SamplingConfig(), 5)
    assert (a == b).all()


def test_settings_and_bad_options():
    pair = standard_tabular_pairs()["trigram3"]
    t, d = TabularCausalLM(pair.target), TabularCausalLM(pair.draft)
    dec = make_decoder("q_permuted", t, d, K, draft_to_target=[0, 1, 2, 2], permutation=[1, 2, 0])
    assert dec.settings["draft_to_target"] == [0, 1, 2, 2] and dec.settings["permutation"] == [1, 2, 0]
    assert dec.generate([0, 1], 4, 3, SamplingConfig(), 0).shape == (4, 3)
    for kw, arg in (({"draft_to_target": [0, 3]}, "draft_to_target"), ({"permutation": [0, 1]}, "permutation"),
                    ({"weights": [1, -1, 1]}, "weights")):
        with pytest.raises(InvalidArgumentError, match=arg):
            make_decoder("q_permuted", t, d, K, **kw)
    with pytest.raises(InvalidArgumentError, match="dtype"):
        make_decoder("q_dtype_mismatch", t, d, K, dtype="int8")
    with pytest.raises(InvalidArgumentError, match="mode"):
        VocabMappedDecoder(t, d, K, mode="nope")
    for kw, arg in (({"draft_to_target": [0, 1.5, 2]}, "draft_to_target"), ({"permutation": [0.5, 1, 2]}, "permutation"),
                    ({"dtype": ["bfloat16"]}, "dtype"), ({"mode": ["q_permuted"]}, "mode")):  # review 2026-12-03
        with pytest.raises(InvalidArgumentError, match=arg):
            VocabMappedDecoder(t, d, K, **{"mode": "q_dtype_mismatch" if "dtype" in kw else "q_permuted", **kw})
