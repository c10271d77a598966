"""The family hypotheses of drafts whose sampled and reported q differ (issue 26, issue 29 kind 7).

Expected laws: ``verifier.exact.vocab_n_token_law`` with the identity map (Fractions), on tables processed as the
decoder processes them (``processed_tabular``): ``draft_processors_differ`` = the draft samples its top-k 2 rows, the
ratio and residual use its temperature-only rows; ``q_dtype_mismatch`` = the draft samples its rows rounded to
bfloat16.  At T = 1 with top_k = 2, draft_processors_differ and draft_raw_q give every row the same probability: the
diagnosis must report them as one class ("A = B"), never one member (issue 26).  The zoo decoders' rows
(seed 3, 3,000 rows) are diagnosed as that class / as their own mechanism.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.diagnose.inputs import all_sequences, mechanism_law, sequence_probs
from verifier.diagnose.likelihood import log_likelihood
from verifier.diagnose.mechanisms import MECHANISMS, mechanism_for_decoder
from verifier.diagnose.rank import _same_law_on_rows, decide, rank_mechanisms
from verifier.exact import map_draft, standard_tabular_pairs, vocab_n_token_law, vocab_view
from verifier.models.tabular import processed_tabular
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

PAIR = standard_tabular_pairs()["trigram3"]


def _refs():
    t, d = PAIR.target, PAIR.draft
    return ReferenceModel(t, 3, None), ReferenceModel(d, 3, None)


def _exact(mode, sampling, **kw):
    temp_only = SamplingConfig(temperature=sampling.temperature)
    target = processed_tabular(PAIR.target, sampling)
    draft = map_draft(processed_tabular(PAIR.draft, temp_only), range(3))
    law = vocab_n_token_law(target, draft, PAIR.prefix, 2, 3, vocab_view(mode, vocab_size=3, **kw))
    seqs = all_sequences(3, 3, None)
    return seqs, np.array([float(law.get(tuple(int(v) for v in s), 0)) for s in seqs])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_draft_processors_differ_is_its_exact_law(temperature):
    sampling = SamplingConfig(temperature=temperature, top_k=2)
    seqs, expected = _exact("draft_processors_differ", sampling, top_k=2)
    tr, dr = _refs()
    sp = sequence_probs(tr, dr, PAIR.prefix, seqs, sampling)
    got = np.exp(log_likelihood(MECHANISMS["draft_processors_differ"], sp, 2))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    raw_q = np.exp(log_likelihood(MECHANISMS["draft_raw_q"], sp, 2))
    assert np.allclose(raw_q, got, atol=1e-12) == (temperature == 1.0)  # one law at T = 1 only


def test_q_dtype_mismatch_is_its_exact_law_under_processing():
    sampling = SamplingConfig(temperature=0.7)
    seqs, expected = _exact("q_dtype_mismatch", sampling)
    law = mechanism_law(MECHANISMS["q_dtype_mismatch"], *_refs(), PAIR.prefix, sampling, 2, 3)
    from verifier.diagnose.inputs import joint_codes

    np.testing.assert_allclose(law[joint_codes(seqs, 3)], expected, atol=1e-12)


def test_decoders_map_to_their_mechanisms():
    assert mechanism_for_decoder("draft_processors_differ") == "draft_processors_differ"
    assert mechanism_for_decoder("q_dtype_mismatch") == "q_dtype_mismatch"
    assert mechanism_for_decoder("q_permuted") is None and mechanism_for_decoder("many_to_one_q_single") is None


@pytest.mark.full  # ~10 s under load (decoder rows + ranking); the exact-law tests above drive the same hooks
def test_decoder_rows_are_diagnosed_as_the_equivalence_class_at_t1():
    """draft_processors_differ's rows (T = 1, top_k = 2, k = 2, 3 tokens, 3,000 rows, seed 3): the best class holds
    draft_processors_differ and draft_raw_q, the same law on every row."""
    from verifier.decoders import make_decoder
    from verifier.models import TabularCausalLM

    sampling = SamplingConfig(top_k=2)
    dec = make_decoder("draft_processors_differ", TabularCausalLM(PAIR.target), TabularCausalLM(PAIR.draft), 2)
    rows = dec.generate(list(PAIR.prefix), 3000, 3, sampling, 3)
    sp = sequence_probs(*_refs(), PAIR.prefix, rows, sampling)
    names = ["canonical", "draft_raw_q", "draft_processors_differ", "full_p_fallback", "target_unprocessed", "greedy_draft"]
    ranking = rank_mechanisms(sp, 2, mechanisms=names)
    assert _same_law_on_rows(ranking, "draft_raw_q", "draft_processors_differ")
    d = decide(ranking, bias_detected=True)
    assert d["status"] == "consistent"
    assert set(d["best"]) == {"draft_raw_q", "draft_processors_differ"}, d["best"]
    assert set(d["equivalent"]) | {d["best"][0]} == {"draft_raw_q", "draft_processors_differ"}
