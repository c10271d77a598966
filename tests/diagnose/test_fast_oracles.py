"""The kept-suffix likelihood's fast path (issue 27) against the context-by-context path it replaces.

``ReferenceModel.extend_probs`` runs a context's keys and values once and every continuation after them; the
kept-suffix likelihood (:func:`verifier.diagnose.likelihood._suffix_jumps`) uses it through ``ProbsAfter.extend`` and
memoises the terms for the hypotheses that share them.  On float64 copies of the shipped pair both paths do the same
float64 arithmetic up to the order of a few sums, so the likelihoods must agree to 1e-12 (relative): a tail off by one
position, a wrong parent, a skipped latent token with nonzero weight or a stale memo entry moves them by far more.  On
the float32 shipped pair (what a run uses) the two differ by the float32 rounding of the draft's logits only.
Quick tier ~40 s on the shared 2-core machine; T = 0.7 and k = 2, 4 in the full tier.
"""

import numpy as np
import pytest

from verifier.diagnose.family import hypothesis
from verifier.diagnose.inputs import ProbsAfter, sequence_probs
from verifier.diagnose.likelihood import log_likelihood
from verifier.models import load_model, shipped_checkpoint
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

PROMPT = (272, 70, 221)  # "def " in the shipped tokenizer
K, TOKENS, ROWS = 3, 6, 12
SUFFIX = ("draft_suffix_kept", "draft_suffix_kept@prefill")
PENALTIES = SamplingConfig(temperature=1.0, repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5)


def _pair(dtype):
    target, draft = (load_model(shipped_checkpoint(role)).to(dtype) for role in ("target", "draft"))
    vocab, eos = target.config.vocab_size, target.config.eos_token_id
    return ReferenceModel(target, vocab, eos, "target"), ReferenceModel(draft, vocab, eos, "draft")


@pytest.fixture(scope="module")
def pair64():
    import torch

    return _pair(torch.float64)


@pytest.fixture(scope="module")
def pair32():
    import torch

    return _pair(torch.float32)


def _rows(seed=0):
    """Rows with shared prefixes (the case the memo and the shared keys serve) and a few EOS cuts."""
    rng = np.random.default_rng(seed)
    heads = rng.integers(1, 40, size=(6, 2))
    rows = np.concatenate([heads[rng.integers(0, len(heads), ROWS)], rng.integers(1, 384, size=(ROWS, TOKENS - 2))], 1)
    rows[::5, 3] = 0  # EOS (id 0) at position 4, -1 after it
    rows[::5, 4:] = -1
    return np.unique(rows, axis=0)


def _both(pair, sampling, tokens):
    target, draft = pair
    fast = sequence_probs(target, draft, PROMPT, tokens, sampling)
    slow = sequence_probs(target, draft, PROMPT, tokens, sampling)
    slow.draft_after = lambda ctx: draft.next_probs(ctx, sampling, len(PROMPT))  # a plain oracle: no extend
    slow.target_after = lambda ctx: target.next_probs(ctx, sampling, len(PROMPT))
    assert fast.draft_after.extend is not None
    return fast, slow


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=20), PENALTIES])
def test_extend_probs_is_next_probs_of_the_whole_context(pair64, sampling):
    _, draft = pair64
    rng = np.random.default_rng(1)
    bases = rng.integers(1, 384, size=(3, 5))
    tails, parent = rng.integers(1, 384, size=(50, 2)), rng.integers(0, 3, size=50)
    base_probs, tail_probs = draft.extend_probs(bases, tails, parent, sampling, 3)
    np.testing.assert_allclose(base_probs, draft.next_probs(bases, sampling, 3), rtol=1e-12, atol=1e-15)
    for j in range(2):
        whole = np.concatenate([bases[parent], tails[:, :j + 1]], axis=1)
        np.testing.assert_allclose(tail_probs[:, j], draft.next_probs(whole, sampling, 3), rtol=1e-12, atol=1e-15)


def test_extend_is_off_for_a_table():
    from verifier.exact import standard_tabular_pairs

    table = next(iter(standard_tabular_pairs().values())).target
    ref = ReferenceModel(table, table.vocab_size, table.eos_token_id)
    assert not ref.can_extend(SamplingConfig()) and ProbsAfter(ref, SamplingConfig(), 2).extend is None


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), PENALTIES,
                                      pytest.param(SamplingConfig(temperature=0.7), marks=pytest.mark.full)])
def test_kept_suffix_likelihood_fast_equals_slow(pair64, sampling):
    fast, slow = _both(pair64, sampling, _rows())
    for name in SUFFIX:  # the second reuses the first's memoised terms at t >= 1
        got = log_likelihood(hypothesis(name), fast, K)
        want = log_likelihood(hypothesis(name), slow, K)
        assert np.isfinite(want).all()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert any(key[0] == "suffix" for key in fast.memo)


@pytest.mark.full
def test_kept_suffix_at_k2_and_k4(pair64):
    fast, slow = _both(pair64, SamplingConfig(temperature=1.0), _rows(3))
    for k in (2, 4):
        fast.memo.clear()
        np.testing.assert_allclose(log_likelihood(hypothesis("draft_suffix_kept"), fast, k),
                                   log_likelihood(hypothesis("draft_suffix_kept"), slow, k), rtol=1e-12, atol=0)


def test_kept_suffix_float32_differs_by_rounding_only(pair32):
    fast, slow = _both(pair32, SamplingConfig(temperature=1.0), _rows(5))
    got = log_likelihood(hypothesis("draft_suffix_kept"), fast, K)
    want = log_likelihood(hypothesis("draft_suffix_kept"), slow, K)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)  # float32 logits: ~1e-6 per row observed
