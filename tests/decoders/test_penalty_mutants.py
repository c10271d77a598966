"""Penalties and min-p in the reference decoders, and the penalty zoo (``verifier.decoders.penalty_mutants``; issue 29,
bug kind 3).

Setting: trigram3, prompt (0, 1, 0, 1) (repeated tokens), ``PENALTY_SAMPLING`` (repetition 1.5, presence 0.5,
frequency 0.5, min-p 0.3), k = 2, the first N = 4 = k + 2 emitted tokens as one joint category (13 outcomes with
positive target probability: min-p cuts the rest).
Expected laws are exact (``verifier.exact.penalties``): ``penalty_target_law`` for the reference and ancestral
sampling, ``penalty_n_token_law(rule=NAME)`` for each mutant.  Each check is a data-blind pooled Pearson chi-square
(``tests/decoders/_helpers.chisquare_vs_law``) of 4,000 rows at alpha 1e-3 (a false-fail rate of 1e-3 per check);
the mutants' exact TVs from the target law are 0.26 (once per round), 0.41 (penalties ignored), 0.27 (min-p skipped),
each far above the MDE of 4,000 rows (TV 0.057 at alpha 1e-3, power 0.99: ``verifier.stats.min_detectable_effect``
on the target law, df 12), so "the mutant's rows are rejected against the target law" fails only if the mutant did
not apply its bug (a false-pass rate below 0.01).

The laws: ``penalty_target_law(trigram3.target, (0, 1, 0, 1), PENALTY_SAMPLING, 4)`` and
``penalty_n_token_law(trigram3.target, trigram3.draft, (0, 1, 0, 1), PENALTY_SAMPLING, 2, 4, rule=NAME)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.decoders import AncestralDecoder, SpeculativeDecoder, make_decoder
from verifier.decoders.penalty_mutants import PENALTY_DECODER_REGISTRY
from verifier.exact import standard_tabular_pairs, total_variation
from verifier.exact.penalties import PENALTY_PROMPTS, PENALTY_SAMPLING, penalty_n_token_law, penalty_target_law
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig

from ._helpers import chisquare_vs_law

PAIR = "trigram3"
PROMPT = PENALTY_PROMPTS[PAIR]
K, N, ROWS, ALPHA = 2, 4, 4000, 1e-3


@pytest.fixture(scope="module")
def models():
    pair = standard_tabular_pairs()[PAIR]
    return pair, TabularCausalLM(pair.target), TabularCausalLM(pair.draft)


@pytest.fixture(scope="module")
def target_law(models):
    return penalty_target_law(models[0].target, PROMPT, PENALTY_SAMPLING, N)


@pytest.mark.parametrize("which, seed", [("speculative", 11), ("ancestral", 12)])
def test_reference_decoders_sample_the_penalised_target(models, target_law, which, seed):
    _, target, draft = models
    dec = SpeculativeDecoder(target, draft, K) if which == "speculative" else AncestralDecoder(target)
    rows = dec.generate(list(PROMPT), ROWS, N, PENALTY_SAMPLING, seed)
    stat, p = chisquare_vs_law(rows, target_law)
    assert p > ALPHA, (which, stat, p)


@pytest.mark.parametrize("name", sorted(PENALTY_DECODER_REGISTRY))
def test_mutant_samples_its_exact_law_and_not_the_target(models, target_law, name):
    pair, target, draft = models
    law = penalty_n_token_law(pair.target, pair.draft, PROMPT, PENALTY_SAMPLING, K, N, rule=name)
    assert total_variation(law, target_law) > 0.2
    rows = make_decoder(name, target, draft, K).generate(list(PROMPT), ROWS, N, PENALTY_SAMPLING, 21)
    stat, p = chisquare_vs_law(rows, law)
    assert p > ALPHA, ("own law", name, stat, p)
    stat, p = chisquare_vs_law(rows, target_law)
    assert p < ALPHA, ("target law", name, stat, p)


@pytest.mark.parametrize("name", sorted(PENALTY_DECODER_REGISTRY))
def test_mutant_without_its_processor_is_the_reference(models, name):
    _, target, draft = models
    plain = SamplingConfig(temperature=0.8, top_k=2)
    ref = SpeculativeDecoder(target, draft, K).generate(list(PROMPT), 300, 6, plain, 5)
    assert np.array_equal(make_decoder(name, target, draft, K).generate(list(PROMPT), 300, 6, plain, 5), ref)


@pytest.mark.parametrize("tree, seed", [("2;2,2", 31), ("1;1", 32)])
def test_tree_decoder_samples_the_penalised_target(models, target_law, tree, seed):
    # each node's context codes follow its own path (siblings must not see each other's tokens)
    from verifier.decoders.tree_decoder import TreeDecoder

    _, target, draft = models
    rows = TreeDecoder(target, draft, tree=tree).generate(list(PROMPT), ROWS, N, PENALTY_SAMPLING, seed)
    stat, p = chisquare_vs_law(rows, target_law)
    assert p > ALPHA, (tree, stat, p)


def test_float32_precision_takes_the_float64_path_with_the_new_processors(models):
    _, target, draft = models
    f32 = AncestralDecoder(target, precision="float32").generate(list(PROMPT), 200, N, PENALTY_SAMPLING, 3)
    assert np.array_equal(f32, AncestralDecoder(target, precision="float64").generate(list(PROMPT), 200, N,
                                                                                       PENALTY_SAMPLING, 3))
