"""Stated-map / stated-permutation hypotheses of drafts in another vocabulary (``verifier.diagnose.vocab``).

Expected laws: ``verifier.exact.vocab_n_token_law`` (Fractions) on the same map / permutation, k = 2, 3 tokens, T = 1,
every outcome of bigram4_eos and trigram3: the float64 likelihood equals it to 1e-12.  On rows of the zoo decoder
``q_permuted`` (trigram3, reversed order, 1,000 rows, seed 5) the stated hypothesis' log LR over the target is far above
log(1 / 0.01) = 4.6; on rows of the lossless ``vocab_mapped`` decoder (seed 6) it is negative.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifier.diagnose.inputs import all_sequences, sequence_probs
from verifier.diagnose.likelihood import log_likelihood
from verifier.diagnose.vocab import KNOWN_MODES, known_log_lr, known_vocab_mechanism
from verifier.errors import InvalidArgumentError
from verifier.exact import map_draft, standard_tabular_pairs, vocab_n_token_law, vocab_view
from verifier.exact.vocab import default_map_for
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

PAIRS = standard_tabular_pairs()


def _refs(pair):
    t, d = pair.target, pair.draft
    return ReferenceModel(t, t.vocab_size, t.eos_token_id), ReferenceModel(d, d.vocab_size, d.eos_token_id)


CASES = [(name, mode, {}) for name in ("bigram4_eos", "trigram3") for mode in KNOWN_MODES] + [
    ("trigram3", "many_to_one_q_single", {"draft_to_target": [0, 1, 1, 2], "weights": [1, 0.25, 0.75, 1]}),
    ("trigram3", "q_permuted", {"permutation": [1, 2, 0]})]


@pytest.mark.parametrize("name,mode,kw", CASES)
def test_known_hypothesis_equals_the_exact_law(name, mode, kw):
    pair = PAIRS[name]
    vocab = pair.target.vocab_size
    m = kw.get("draft_to_target", default_map_for(mode, vocab))
    law = vocab_n_token_law(pair.target, map_draft(pair.draft, m, kw.get("weights")), pair.prefix, 2, 3,
                            vocab_view(mode, vocab_size=vocab, permutation=kw.get("permutation")))
    seqs = all_sequences(vocab, 3, pair.target.eos_token_id)
    expected = np.array([float(law.get(tuple(int(v) for v in s), 0)) for s in seqs])
    sp = sequence_probs(*_refs(pair), pair.prefix, seqs, SamplingConfig())
    got = np.exp(log_likelihood(known_vocab_mechanism(mode, vocab, **kw), sp, 2))
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_stated_permutation_is_named_by_its_log_lr_and_not_on_lossless_rows():
    from verifier.decoders import make_decoder
    from verifier.models import TabularCausalLM

    pair = PAIRS["trigram3"]
    t, d = TabularCausalLM(pair.target), TabularCausalLM(pair.draft)
    mech = known_vocab_mechanism("q_permuted", 3)
    bad = make_decoder("q_permuted", t, d, 2).generate(list(pair.prefix), 1000, 3, SamplingConfig(), 5)
    good = make_decoder("vocab_mapped", t, d, 2, draft_to_target=[0, 1, 2]).generate(list(pair.prefix), 1000, 3,
                                                                                       SamplingConfig(), 6)
    lr_bad = known_log_lr(mech, sequence_probs(*_refs(pair), pair.prefix, bad, SamplingConfig()), 2)
    lr_good = known_log_lr(mech, sequence_probs(*_refs(pair), pair.prefix, good, SamplingConfig()), 2)
    assert lr_bad > 10 * math.log(100) and lr_good < 0


def test_bad_arguments():
    assert set(KNOWN_MODES) == {"mapped", "many_to_one_q_single", "q_permuted"}
    with pytest.raises(InvalidArgumentError, match="mode"):
        known_vocab_mechanism("q_dtype_mismatch", 3)
    with pytest.raises(InvalidArgumentError, match="permutation"):
        known_vocab_mechanism("q_permuted", 3, permutation=[0, 0, 1])
