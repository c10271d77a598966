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


def _pooled_exact(exact, kept: set, num_tokens: int, position: int, vocab: int, eos):
    """Exact law of position ``position`` over tokens + ended + 'other prefix', where a row is
    'other' when its first ``position - 1`` tokens (before any EOS) are not in ``kept``."""
    out = np.zeros(vocab + 2)
    for seq, prob in exact.items():
        head = seq[:position - 1]
        if eos in head:
            cut = head.index(eos)
            tracked = cut == 0 or tuple(head[:cut]) in kept
            out[vocab if tracked else vocab + 1] += float(prob)
        else:
            out[seq[position - 1] if tuple(head) in kept else vocab + 1] += float(prob)
    return out


@pytest.mark.parametrize("name", ["bigram4_eos", "trigram3"])
def test_pooled_laws_are_the_exact_laws_of_the_pooled_categories(name, monkeypatch):
    """Issue 17: with 2 prefixes kept per level the laws are the exact target laws of
    (token | ended | other prefix), the 2 kept prefixes being the most likely first tokens, and
    ``marginal_codes`` puts every row in the category the law counts it in."""
    import verifier.runner.expected as expected

    monkeypatch.setattr(expected, "MAX_PREFIXES", 2)
    pair = standard_tabular_pairs()[name]
    target, prefix, vocab, eos = pair.target, _prefix(pair), pair.target.vocab_size, pair.target.eos_token_id
    laws = position_laws(_ref(target), prefix, T1, max_position=2, joint_tokens=2)
    exact = target_law(target, prefix, 2)
    first = {(s[0],): float(p) for s, p in marginal(exact, [0]).items() if s[0] != -1 and s[0] != eos}
    kept = set(sorted(first, key=lambda s: -first[s])[:2])
    assert laws.pooled(2) and not laws.pooled(1) and laws.top_prefixes == 2
    np.testing.assert_allclose(laws.marginals[2], _pooled_exact(exact, kept, 2, 2, vocab, eos), atol=1e-12)
    assert abs(laws.joint.sum() - 1) < 1e-12 and laws.joint_keys is not None  # sparse joint: kept outcomes + other
    rows = np.array([list(s) for s in exact], dtype=np.int64)
    codes = laws.marginal_codes(rows, 2)
    for row, code in zip(rows, codes):
        head = tuple(int(x) for x in row[:1])
        if head[0] == eos:
            assert code == vocab
        else:
            assert code == (int(row[1]) if row[1] != -1 else vocab) if head in kept else code == vocab + 1
    probs = np.array([float(p) for p in exact.values()])
    joint = np.bincount(laws.joint_codes(rows), weights=probs, minlength=len(laws.joint))
    np.testing.assert_allclose(joint, laws.joint, atol=1e-12)  # every row lands in the category its mass is in
