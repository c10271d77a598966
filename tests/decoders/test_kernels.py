"""verify_chain and the kernel mutants driven with synthetic probabilities.

Expected laws: ``verifier.exact.round_law`` on the context-free pair ``unigram3`` (p=(1/2,1/3,1/6),
q=(1/6,1/6,2/3)), where every kernel position sees the same p and q.  Chi-square at ALPHA = 1e-3,
fixed seeds; N = 100k rounds sees TV ~ 0.01.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from verifier.decoders import KERNELS, residual_or_target, sample_from_probs, verify_chain
from verifier.decoders.kernels import degenerate_residual_div0_kernel
from verifier.errors import InvalidArgumentError
from verifier.exact import round_law, standard_tabular_pairs
from verifier.protocols import PADDING_TOKEN_ID, VerificationKernel

from ._helpers import chisquare_vs_law

ALPHA = 1e-3
N_ROUNDS = 100_000


def _unigram_inputs(k: int, n: int, seed: int):
    pair = standard_tabular_pairs()["unigram3"]
    p = torch.tensor([float(f) for f in pair.target.probs(())], dtype=torch.float64)
    q = torch.tensor([float(f) for f in pair.draft.probs(())], dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q.expand(n * k, -1), 1, replacement=True, generator=g).view(n, k)
    return pair, p.expand(n, k + 1, -1).clone(), q.expand(n, k, -1).clone(), drafts, g


def _padded_law(pair, k: int, rule: str) -> dict:
    law = round_law(pair.target, pair.draft, (), k, rule=rule)
    return {seq + (PADDING_TOKEN_ID,) * (k + 1 - len(seq)): pr for seq, pr in law.items()}


def test_kernels_follow_the_protocol():
    for kernel in KERNELS.values():
        assert isinstance(kernel, VerificationKernel)


@pytest.mark.parametrize("k", [1, 3])
def test_verify_chain_matches_exact_round_law(k):
    pair, p, q, drafts, g = _unigram_inputs(k, N_ROUNDS, seed=11)
    emitted = verify_chain(p, q, drafts, g)
    assert emitted.dtype == torch.int64 and emitted.shape == (N_ROUNDS, k + 1)
    stat, pvalue = chisquare_vs_law(emitted.numpy(), _padded_law(pair, k, "canonical"))
    assert pvalue > ALPHA, f"chi2={stat:.1f} p={pvalue:.2e}"


@pytest.mark.parametrize("name", ["full_p_fallback", "greedy_acceptance", "deterministic_acceptance",
                                  "draft_suffix_kept", "typical_acceptance"])
def test_kernel_mutants_match_their_exact_law_and_not_the_target(name):
    """Test the tester: each kernel mutant follows the exact stage's law for the same rule and is
    rejected against the canonical law."""
    k = 2
    pair, p, q, drafts, g = _unigram_inputs(k, N_ROUNDS, seed=12)
    emitted = KERNELS[name](p, q, drafts, g).numpy()
    own = _padded_law(pair, k, name)
    canonical = _padded_law(pair, k, "canonical")
    assert own != canonical
    assert chisquare_vs_law(emitted, own)[1] > ALPHA
    assert chisquare_vs_law(emitted, canonical)[1] < ALPHA


def test_batch_cross_talk_kernel_biases_rows_other_than_row_0():
    k, n, batch = 2, 40_000, 2000
    pair, p, q, drafts, g = _unigram_inputs(k, n, seed=13)
    row1 = []
    for i in range(0, n, batch):  # rows 1.. of each batch take row 0's accepted length
        out = KERNELS["batch_cross_talk"](p[i:i + batch], q[i:i + batch], drafts[i:i + batch], g)
        row1.append(out[1:].numpy())
    emitted = np.concatenate(row1)
    assert chisquare_vs_law(emitted, _padded_law(pair, k, "canonical"))[1] < ALPHA


def test_sample_from_probs_skips_zero_weights_and_handles_round_up():
    weights = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]] * 3, dtype=torch.float64)
    u = torch.tensor([0.0, 0.5, 1.0 - 2 ** -53], dtype=torch.float64)
    assert sample_from_probs(weights, u).tolist() == [1, 3, 3]
    unnormalised = torch.tensor([[2.0, 0.0, 6.0]], dtype=torch.float64)
    assert sample_from_probs(unnormalised, torch.tensor([0.26], dtype=torch.float64)).tolist() == [2]


def test_residual_or_target_falls_back_on_rounding_degenerate_rows():
    """p != q, but p <= q everywhere (p sums to 1 - 2**-53): max(0, p - q) is all zero."""
    q = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    p = torch.tensor([[0.5, 0.5 - 2 ** -53, 0.0]], dtype=torch.float64)
    assert torch.clamp(p - q, min=0).sum() == 0 and not torch.equal(p, q)
    out = residual_or_target(p, q)
    assert torch.equal(out, p) and torch.isfinite(out).all()
    ok = torch.tensor([[0.2, 0.8, 0.0]], dtype=torch.float64)
    assert residual_or_target(ok, q).tolist() == [[0.0, pytest.approx(0.3), 0.0]]


def test_degenerate_residual_reference_falls_back_and_div0_mutant_is_caught():
    """Target rows that sum to < 1 make the residual all-zero at every rejection (acceptance 1/2):
    the reference draws the recovered token from p (1/2, 1/2 over tokens 0, 1); the mutant divides
    by zero and emits token 0 every time -- a binomial test at ALPHA sees it."""
    n, k = 20_000, 1
    q = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64).expand(n, k, -1).clone()
    p = torch.tensor([0.25, 0.25, 0.0], dtype=torch.float64).expand(n, k + 1, -1).clone()
    g = torch.Generator().manual_seed(5)
    drafts = torch.multinomial(q[:, 0], 1, replacement=True, generator=g)
    for kernel, expect_ok in ((verify_chain, True), (degenerate_residual_div0_kernel, False)):
        out = kernel(p, q, drafts, torch.Generator().manual_seed(6))
        rejected = out[:, 1] == PADDING_TOKEN_ID
        recovered = out[rejected, 0]
        assert 0.45 < rejected.double().mean() < 0.55
        pvalue = stats.binomtest(int((recovered == 0).sum()), int(recovered.numel()), 0.5).pvalue
        assert (pvalue > ALPHA) == expect_ok, f"{kernel.__name__}: p={pvalue:.2e}"


def test_verify_chain_is_deterministic_and_validates_input():
    _, p, q, drafts, _ = _unigram_inputs(2, 100, seed=1)
    a = verify_chain(p, q, drafts, torch.Generator().manual_seed(3))
    b = verify_chain(p, q, drafts, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    with pytest.raises(InvalidArgumentError, match="target_probs.shape"):
        verify_chain(p[:, :2], q, drafts, torch.Generator())
    with pytest.raises(InvalidArgumentError, match="draft_token_ids"):
        verify_chain(p, q, drafts + 5, torch.Generator())
    with pytest.raises(InvalidArgumentError, match="generator"):
        verify_chain(p, q, drafts, 3)


def test_greedy_rows_reproduce_target_argmax():
    """T=0: one-hot p and q; accept iff the draft is the target argmax, else emit the argmax."""
    eye = torch.eye(4, dtype=torch.float64)
    p = torch.stack([eye[1], eye[2], eye[3]])[None]  # target argmax 1, 2, then bonus 3
    for drafts, expected in (([1, 2], [1, 2, 3]), ([1, 0], [1, 2, PADDING_TOKEN_ID]), ([3, 2], [1, PADDING_TOKEN_ID, PADDING_TOKEN_ID])):
        q = torch.stack([eye[d] for d in drafts])[None]
        assert verify_chain(p, q, torch.tensor([drafts]), torch.Generator().manual_seed(0)).tolist() == [expected]
