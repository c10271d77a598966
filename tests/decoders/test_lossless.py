"""Lossless non-canonical kernels and decoders: fresh_target_match and block verification.

Expected laws come from the exact enumerator (rules ``fresh_target_match`` and
``block_verification`` of :data:`verifier.exact.RULES`; ``python -m verifier.cli exact --rule
block_verification`` prints them).  Each chi-square runs at ALPHA = 1e-3 with a fixed seed; at
N = 100k rounds (kernels) / 20k rows (decoders) it sees a TV of about 0.01 / 0.03 -- a kernel
that used the canonical rule's round law (TV >= 0.05 from these rules' round laws on unigram3 at
k = 2) or a biased recovered token would fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from verifier.decoders import make_decoder
from verifier.decoders.lossless import LOSSLESS_KERNELS
from verifier.exact import accepted_count_law, n_token_law, round_law, standard_tabular_pairs, target_law, total_variation
from verifier.models import TabularCausalLM
from verifier.protocols import PADDING_TOKEN_ID, VerificationKernel
from verifier.sampling import SamplingConfig

from ._helpers import chisquare_vs_law

ALPHA = 1e-3
N_ROUNDS = 100_000
N_ROWS = 20_000


def _padded_round_law(pair, k, rule):
    law = round_law(pair.target, pair.draft, pair.prefix, k, rule=rule)
    return {seq + (PADDING_TOKEN_ID,) * (k + 1 - len(seq)): pr for seq, pr in law.items()}


@pytest.mark.parametrize("name", sorted(LOSSLESS_KERNELS))
@pytest.mark.parametrize("k", [1, 3])
def test_lossless_kernel_matches_its_exact_round_law(name, k):
    pair = standard_tabular_pairs()["unigram3"]  # context-free: every position sees the same p and q
    kernel = LOSSLESS_KERNELS[name]
    assert isinstance(kernel, VerificationKernel)
    p = torch.tensor([float(f) for f in pair.target.probs(())], dtype=torch.float64)
    q = torch.tensor([float(f) for f in pair.draft.probs(())], dtype=torch.float64)
    g = torch.Generator().manual_seed(31)
    drafts = torch.multinomial(q.expand(N_ROUNDS * k, -1), 1, replacement=True, generator=g).view(N_ROUNDS, k)
    emitted = kernel(p.expand(N_ROUNDS, k + 1, -1).clone(), q.expand(N_ROUNDS, k, -1).clone(), drafts, g).numpy()
    own = _padded_round_law(pair, k, name)
    assert chisquare_vs_law(emitted, own)[1] > ALPHA
    if k == 3:  # the test can fail: the canonical round law is far from this rule's
        canonical = _padded_round_law(pair, k, "canonical")
        assert total_variation(own, canonical) > 0.05
        assert chisquare_vs_law(emitted, canonical)[1] < ALPHA


@pytest.mark.parametrize("name", sorted(LOSSLESS_KERNELS))
def test_lossless_decoder_samples_the_target_and_reports_its_own_accepted_counts(name):
    """End to end on trigram3 (context-dependent, k = 2): the 3-token law is the target's, and
    ``first_round_accepted`` follows the rule's exact accepted-count law (not the canonical one)."""
    pair = standard_tabular_pairs()["trigram3"]
    k = 2
    decoder = make_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), k)
    out = decoder.generate(list(pair.prefix), N_ROWS, 3, SamplingConfig(), seed=5)
    tl = target_law(pair.target, pair.prefix, 3)
    assert n_token_law(pair.target, pair.draft, pair.prefix, k, 3, name) == tl
    assert chisquare_vs_law(out, tl)[1] > ALPHA
    own = np.array([float(x) for x in accepted_count_law(pair.target, pair.draft, pair.prefix, k, name)])
    canonical = np.array([float(x) for x in accepted_count_law(pair.target, pair.draft, pair.prefix, k)])
    observed = np.bincount(decoder.last_stats.first_round_accepted, minlength=k + 1)
    keep = own > 0
    assert observed[~keep].sum() == 0
    assert stats.chisquare(observed[keep], own[keep] * N_ROWS).pvalue > ALPHA
    assert abs(own - canonical).sum() / 2 > 0.03  # the two laws differ: the check above can tell them apart
