"""Mechanisms the field reports (issue 26): each mutant of ``verifier.decoders.field_mutants`` samples its exact law.

Expected laws from ``verifier.exact.n_token_law`` with the rules of ``verifier.exact.field_rules`` on the processed
tables (``verifier.models.processed_tabular``; ``target_processed_first_only`` built for the unprocessed table
through the same float64 processing).  Chi-square on the first 3 emitted tokens (k = 2) at ALPHA = 1e-3 with fixed
seeds: a decoder sampling the law fails with probability 1e-3 (deterministic for the seed).  N = 8,000 rows over
<= 64 pooled categories has power 0.99 against Cohen's w ~ 0.07 (TV ~ 0.03); each case's exact TV to the target
is >= 0.033 (asserted), and every mutant's rows must also fail the target's law; the reference decoder's rows pass
the target's law in the same cases.
"""

from __future__ import annotations

import pytest

from verifier.decoders import make_decoder
from verifier.decoders.field_mutants import FIELD_DECODER_REGISTRY, recovered_one_late_kernel
from verifier.exact import n_token_law, standard_tabular_pairs, target_law, total_variation
from verifier.exact.field_rules import target_processed_first_only
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig

from ._helpers import chisquare_vs_law, processed_tabular

ALPHA = 1e-3
N = 8_000
K, NUM_TOKENS = 2, 3
T1, T07K2, T07 = SamplingConfig(), SamplingConfig(temperature=0.7, top_k=2), SamplingConfig(temperature=0.7)
CASES = [("recovered_one_late", "trigram3", T1, 31), ("recovered_one_late", "bigram4_eos", T1, 32),
         ("draft_accept_same_uniform", "trigram3", T1, 33), ("draft_accept_same_uniform", "bigram4_eos", T07, 34),
         ("target_processed_first_only", "trigram3", T07K2, 35), ("target_processed_first_only", "bigram4_eos", T07, 36)]


def _laws(name, pair, sampling):
    target = processed_tabular(pair.target, sampling)
    draft = processed_tabular(pair.draft, sampling)
    rule = target_processed_first_only(processed_tabular(pair.target, T1)) if name == "target_processed_first_only" else name
    return n_token_law(target, draft, pair.prefix, K, NUM_TOKENS, rule), target_law(target, pair.prefix, NUM_TOKENS)


@pytest.mark.parametrize("name,case,sampling,seed", CASES)
def test_mutant_samples_its_exact_law_and_not_the_targets(name, case, sampling, seed):
    pair = standard_tabular_pairs()[case]
    law, truth = _laws(name, pair, sampling)
    assert total_variation(law, truth) > 0.03
    decoder = make_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), K)
    rows = decoder.generate(list(pair.prefix), N, NUM_TOKENS, sampling, seed)
    assert chisquare_vs_law(rows, law)[1] > ALPHA
    assert chisquare_vs_law(rows, truth)[1] < ALPHA
    reference = make_decoder("reference", TabularCausalLM(pair.target), TabularCausalLM(pair.draft), K)
    assert chisquare_vs_law(reference.generate(list(pair.prefix), N, NUM_TOKENS, sampling, seed), truth)[1] > ALPHA


def test_processed_first_only_is_the_target_law_at_t1_without_filters():
    pair = standard_tabular_pairs()["trigram3"]
    law, truth = _laws("target_processed_first_only", pair, T1)
    assert law == truth
    decoder = make_decoder("target_processed_first_only", TabularCausalLM(pair.target), TabularCausalLM(pair.draft), K)
    assert chisquare_vs_law(decoder.generate(list(pair.prefix), N, NUM_TOKENS, T1, 37), truth)[1] > ALPHA


def test_registry_and_the_last_position_reads_the_bonus_row():
    import torch

    assert set(FIELD_DECODER_REGISTRY) == {"recovered_one_late", "draft_accept_same_uniform", "target_processed_first_only"}
    assert all(spec.declared == "biased" for spec in FIELD_DECODER_REGISTRY.values())
    # k = 1, draft token 0 always rejected (p(0) = 0): the recovered token is drawn from row 1 (the bonus row), never
    # from row 0's residual (which is one-hot on token 1)
    target = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], dtype=torch.float64).expand(64, 2, 3)
    draft = torch.tensor([[[1.0, 0.0, 0.0]]], dtype=torch.float64).expand(64, 1, 3)
    ids = torch.zeros(64, 1, dtype=torch.int64)
    out = recovered_one_late_kernel(target, draft, ids, torch.Generator().manual_seed(0))
    assert (out[:, 0] == 2).all() and (out[:, 1] == -1).all()
