"""The runner's float64 expected laws equal the exact enumerator's rational laws (verifier.exact)."""

from __future__ import annotations

import numpy as np
import pytest

from verifier.exact import accepted_count_law as exact_accepted
from verifier.exact import marginal, standard_tabular_pairs, target_law
from verifier.runner.expected import accepted_count_law, position_laws
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

T1 = SamplingConfig()
PAIRS = ["unigram3", "bigram4_eos", "trigram3"]


def _ref(model):
    return ReferenceModel(model, model.vocab_size, model.eos_token_id)


def _prefix(pair):
    return tuple(pair.prefix) if pair.prefix else (0,)


def _dense(law, vocab, num_tokens):
    """Exact law {tuple: Fraction} (-1 after EOS) as the runner's flattened (vocab+1)^J array."""
    out = np.zeros((vocab + 1) ** num_tokens)
    for seq, prob in law.items():
        code = 0
        for tok in seq:
            code = code * (vocab + 1) + (vocab if tok == -1 else tok)
        out[code] += float(prob)
    return out


@pytest.mark.parametrize("name", PAIRS)
def test_joint_and_marginals_match_exact_target_law(name):
    pair = standard_tabular_pairs()[name]
    target, prefix, vocab = pair.target, _prefix(pair), pair.target.vocab_size
    laws = position_laws(_ref(target), prefix, T1, max_position=3, joint_tokens=3)
    exact = target_law(target, prefix, 3)
    np.testing.assert_allclose(laws.joint, _dense(exact, vocab, 3), atol=1e-12)
    for t in (1, 2, 3):
        np.testing.assert_allclose(laws.marginals[t], _dense(marginal(exact, [t - 1]), vocab, 1), atol=1e-12)


@pytest.mark.parametrize("name", PAIRS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_accepted_count_law_matches_exact(name, k):
    pair = standard_tabular_pairs()[name]
    prefix = _prefix(pair)
    got = accepted_count_law(_ref(pair.target), _ref(pair.draft), prefix, T1, k)
    want = [float(f) for f in exact_accepted(pair.target, pair.draft, prefix, k)]
    np.testing.assert_allclose(got, want, atol=1e-12)
