"""DecoderStats.first_round_accepted against the exact accepted-count law, EOS included.

Regression: a round whose accepted drafts include EOS used to report k accepted drafts (drafts
after the EOS, never emitted, were counted).  Expected laws come from
``verifier.exact.accepted_count_law`` on the ``bigram4_eos`` pair (EOS = token 3).
"""

import numpy as np
import pytest
from scipy import stats

from verifier.decoders import SpeculativeDecoder
from verifier.exact import accepted_count_law, standard_tabular_pairs
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig

ALPHA = 1e-3  # false-fail rate of each case; at n = 20000 a TV of ~0.03 in the count law is seen with power > 0.99
NUM_SAMPLES = 20_000


@pytest.mark.parametrize("k", [2, 3])
def test_first_round_accepted_matches_exact_law_with_eos(k):
    pair = standard_tabular_pairs()["bigram4_eos"]
    expected = np.array([float(x) for x in accepted_count_law(pair.target, pair.draft, pair.prefix, k)])
    assert expected[-1] > 0.05  # the case can see the bug: k accepted is not rare
    decoder = SpeculativeDecoder(TabularCausalLM(pair.target), TabularCausalLM(pair.draft), k)
    decoder.generate(list(pair.prefix), NUM_SAMPLES, 6, SamplingConfig(), seed=11)
    observed = np.bincount(decoder.last_stats.first_round_accepted, minlength=k + 1)
    keep = expected > 0
    assert observed[~keep].sum() == 0
    _, pvalue = stats.chisquare(observed[keep], expected[keep] * NUM_SAMPLES)
    assert pvalue > ALPHA, (observed / NUM_SAMPLES, expected)
