"""Real decoders on tabular models vs the exact law of the first 3 emitted tokens.

Expected laws come from the exact enumerator: ``verifier.exact.n_token_law`` /
``target_law`` on the processed tables (see ``_helpers.processed_tabular``).  Each cell is a
Pearson chi-square with data-blind pooling at ``ALPHA = 1e-3`` and a fixed seed, so a correct
decoder fails a cell with probability 1e-3 (deterministically pass/fail for the fixed seed).
Test the tester: every mutant, in a cell where its defect is visible, must be rejected at the same
alpha and n; mutants in cells where their defect is invisible must pass.

Smallest effect seen: with N_SAMPLES = 20000 and <= 64 pooled categories, the chi-square at alpha
1e-3 has power 0.99 against Cohen's w ~ 0.05 (TV ~ 0.03 on these tables).
"""

from __future__ import annotations

import pytest
import torch

from verifier.decoders import AncestralDecoder, SpeculativeDecoder, make_decoder
from verifier.exact import n_token_law, standard_tabular_pairs, target_law
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig
from verifier.validation import check_emitted_tokens

from ._helpers import chisquare_vs_law, processed_tabular

ALPHA = 1e-3
N_SAMPLES = 20_000
NUM_TOKENS = 3
SEED = 1234
CONFIGS = {
    "T1": SamplingConfig(temperature=1.0),
    "T0.7_topk2": SamplingConfig(temperature=0.7, top_k=2),
    "T0.7_topp0.8": SamplingConfig(temperature=0.7, top_p=0.8),
}


def _run(decoder, pair, sampling, seed=SEED, n=N_SAMPLES):
    out = decoder.generate(list(pair.prefix), n, NUM_TOKENS, sampling, seed)
    return check_emitted_tokens(out, num_samples=n, max_new_tokens=NUM_TOKENS, vocab_size=pair.target.vocab_size,
                                eos_token_id=pair.target.eos_token_id)


def _models(pair):
    return TabularCausalLM(pair.target), TabularCausalLM(pair.draft)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("pair_name", ["bigram4_eos", "trigram3"])
def test_reference_matches_exact_law(pair_name, config, k):
    pair = standard_tabular_pairs()[pair_name]
    sampling = CONFIGS[config]
    target_p, draft_p = processed_tabular(pair.target, sampling), processed_tabular(pair.draft, sampling)
    law = n_token_law(target_p, draft_p, pair.prefix, k, NUM_TOKENS)
    assert law == target_law(target_p, pair.prefix, NUM_TOKENS)  # the exact stage's own check
    decoder = SpeculativeDecoder(*_models(pair), num_draft_tokens=k)
    samples = _run(decoder, pair, sampling)
    stat, pvalue = chisquare_vs_law(samples, law)
    assert pvalue > ALPHA, f"{pair_name} {config} k={k}: chi2={stat:.1f} p={pvalue:.2e} (seed {SEED})"
    assert 0 < decoder.last_stats.acceptance_rate < 1


@pytest.mark.slow
def test_ancestral_matches_exact_law():
    pair = standard_tabular_pairs()["bigram4_eos"]
    sampling = CONFIGS["T0.7_topp0.8"]
    law = target_law(processed_tabular(pair.target, sampling), pair.prefix, NUM_TOKENS)
    samples = _run(AncestralDecoder(TabularCausalLM(pair.target)), pair, sampling)
    stat, pvalue = chisquare_vs_law(samples, law)
    assert pvalue > ALPHA, f"chi2={stat:.1f} p={pvalue:.2e}"


# (mutant, pair, config, k): a cell where the defect is visible (see DECODER_REGISTRY.visible_when)
VISIBLE_CELLS = [
    ("full_p_fallback", "bigram4_eos", "T1", 2),
    ("greedy_draft_softmax_q", "bigram4_eos", "T1", 2),
    ("draft_raw_q", "bigram4_eos", "T0.7_topk2", 2),
    ("target_unprocessed", "bigram4_eos", "T0.7_topk2", 2),
    ("bonus_wrong_position", "bigram4_eos", "T1", 1),
    ("draft_suffix_kept", "bigram4_eos", "T1", 2),
    ("kv_not_rolled_back", "trigram3", "T1", 2),
    ("greedy_acceptance", "bigram4_eos", "T1", 2),
    ("deterministic_acceptance", "bigram4_eos", "T1", 2),
    ("batch_cross_talk", "bigram4_eos", "T1", 2),
    ("typical_acceptance", "bigram4_eos", "T1", 2),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,pair_name,config,k", VISIBLE_CELLS)
def test_mutant_detected_where_visible(name, pair_name, config, k):
    pair = standard_tabular_pairs()[pair_name]
    sampling = CONFIGS[config]
    law = target_law(processed_tabular(pair.target, sampling), pair.prefix, NUM_TOKENS)
    samples = _run(make_decoder(name, *_models(pair), num_draft_tokens=k), pair, sampling)
    stat, pvalue = chisquare_vs_law(samples, law)
    assert pvalue < ALPHA, f"mutant {name} not detected: chi2={stat:.1f} p={pvalue:.2e}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["draft_raw_q", "target_unprocessed"])
def test_processing_mutants_invisible_without_processing(name):
    """At T=1 without top-k/top-p the processed probs are the raw softmax: these mutants are exact there."""
    pair = standard_tabular_pairs()["bigram4_eos"]
    sampling = CONFIGS["T1"]
    law = target_law(processed_tabular(pair.target, sampling), pair.prefix, NUM_TOKENS)
    samples = _run(make_decoder(name, *_models(pair), num_draft_tokens=2), pair, sampling)
    stat, pvalue = chisquare_vs_law(samples, law)
    assert pvalue > ALPHA, f"chi2={stat:.1f} p={pvalue:.2e}"


def test_kv_not_rolled_back_is_invisible_on_a_bigram():
    """A bigram target reads only the last token, which is always fed: same seed, same array."""
    pair = standard_tabular_pairs()["bigram4_eos"]
    sampling = CONFIGS["T1"]
    ref = SpeculativeDecoder(*_models(pair), num_draft_tokens=2).generate(list(pair.prefix), 2000, 6, sampling, 7)
    mut = make_decoder("kv_not_rolled_back", *_models(pair), num_draft_tokens=2).generate(list(pair.prefix), 2000, 6, sampling, 7)
    assert (ref == mut).all()


@pytest.mark.slow
def test_kv_not_rolled_back_changes_token2_given_token1_on_a_trigram():
    """Token 2 given token 1: after a first-round rejection (k=1) the stale draft token sits in the
    target's context, so the conditional law of token 2 differs from p(. | prompt[-1], token 1)."""
    pair = standard_tabular_pairs()["trigram3"]
    sampling = CONFIGS["T1"]
    prompt = list(pair.prefix)
    n = 30_000
    for name, expect_detect in (("reference", False), ("kv_not_rolled_back", True)):
        samples = make_decoder(name, *_models(pair), num_draft_tokens=1).generate(prompt, n, 2, sampling, SEED)
        pvalues = []
        for first in range(pair.target.vocab_size):
            rows = samples[samples[:, 0] == first]
            cond = {(y,): pr for y, pr in enumerate(pair.target.probs(prompt + [first]))}
            pvalues.append(chisquare_vs_law(rows[:, 1:], cond)[1])
        # Bonferroni over the 3 conditional cells
        assert (min(pvalues) < ALPHA / 3) == expect_detect, f"{name}: p-values {pvalues}"
