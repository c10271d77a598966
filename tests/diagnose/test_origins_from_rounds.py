"""DecoderStats.origins from per-round accepted counts (``verifier.engines.decoder.origins_from_rounds``).

* Our decoder, one row per generate call (so its accepted_counts are that row's rounds in order): the
  origins derived from the counts equal the decoder's own origins, for the reference and two mutants.
* A real engine run (transformers assisted generation, the HF round recorder, shipped models): with
  the target as its own assistant every draft is accepted (p = q), so no token may be "recovered";
  with the shipped draft some are.  Origins agree with first_round_accepted.
"""

import numpy as np
import pytest

from verifier.decoders.mutants import make_decoder
from verifier.engines.decoder import origins_from_rounds

from tests.diagnose._helpers import CI_K, PROMPT, T1, wrapped


def test_rules():
    tokens = np.array([[5, 6, 7, 8, 9], [5, 6, -1, -1, -1]])
    got = origins_from_rounds([[2, 0, 1], [(1, 1)]], tokens, 2)
    assert got.tolist() == [[0, 0, 2, 1, 0], [0, 2, -1, -1, -1]]
    assert origins_from_rounds([[0]], tokens[:1], 2) is None  # rounds emit 1 token, the row has 5: unknown
    assert origins_from_rounds([[3]], tokens[:1], 2) is None  # more accepted than drafted


@pytest.mark.parametrize("name", ["reference", "full_p_fallback", "bonus_wrong_position"])
def test_our_decoders_counts_give_their_own_origins(name):
    target, draft = wrapped()
    dec = make_decoder(name, target, draft, CI_K)
    for seed in range(40):
        tokens = dec.generate(PROMPT, 1, 7, T1, seed=1520 + seed)
        got = origins_from_rounds([dec.last_stats.accepted_counts], tokens, CI_K)
        np.testing.assert_array_equal(got, dec.last_stats.origins)


@pytest.mark.slow
def test_transformers_round_recorder_gives_origins():
    from verifier.engines.hf_assisted import HFAssistedDecoder
    from verifier.models import load_tokenizer
    from verifier.sampling import SamplingConfig

    prompt = load_tokenizer("shipped:target")("def ", add_special_tokens=False)["input_ids"]
    k, n, steps = 2, 12, 6
    same = HFAssistedDecoder("shipped:target", "shipped:target", k, num_workers=0)
    tokens = same.generate(prompt, n, steps, SamplingConfig(temperature=1.0), seed=1521)
    o = same.last_stats.origins
    assert o is not None and o.shape == tokens.shape
    assert ((o == -1) == (tokens == -1)).all()
    assert not (o == 1).any(), o  # p = q: every draft accepted, never a recovered token
    assert (o == 0).any() and (o == 2).any()
    other = HFAssistedDecoder("shipped:target", "shipped:draft", k, num_workers=0)
    tokens = other.generate(prompt, n, steps, SamplingConfig(temperature=1.0), seed=1521)
    o, fra = other.last_stats.origins, other.last_stats.first_round_accepted
    assert o is not None and (o == 1).any()
    for row, a in zip(o, fra):
        if a >= 0:
            assert (row[:a] == 0).all() and row[a] in (1, 2)
