"""Black-box mode: speculative vs plain sampling of the same target, two-sample tests only."""

import numpy as np
import pytest

from verifier.audit.blackbox import TWO_SAMPLE_FACTOR, blackbox_audit, blackbox_cells, blackbox_samples_needed
from verifier.decoders.kernels import full_p_fallback_kernel
from verifier.decoders.speculative import AncestralDecoder, SpeculativeDecoder
from verifier.exact import standard_tabular_pairs, step_law
from verifier.models.tabular import TabularCausalLM
from verifier.sampling import SamplingConfig
from verifier.stats import samples_needed

PAIR = standard_tabular_pairs()["bigram4_eos"]
ALPHA = 1e-3
MAX_NEW_TOKENS = 3
NUM_CELLS = MAX_NEW_TOKENS + 1  # one marginal per position + the joint of positions 0 and 1


def test_per_arm_samples_are_twice_the_one_sample_n():
    p, alt = [0.2, 0.5, 0.3], [0.26, 0.45, 0.29]
    assert blackbox_samples_needed(p, alt, alpha=0.01) == TWO_SAMPLE_FACTOR * samples_needed(p, alt, alpha=0.01) == 2 * 1259


@pytest.mark.slow
@pytest.mark.parametrize("kernel, expected", [(None, "PASS"), (full_p_fallback_kernel, "BIAS DETECTED")])
def test_speculative_vs_plain_sampling(kernel, expected):
    """bigram4_eos, prompt [0], k=1, seed 8.  Per-arm n is the black-box requirement
    ``blackbox_samples_needed`` for the mutant's exact first-token law at the Holm level
    alpha / (2 * cells) and power .99, so the mutant is missed with prob < .01; the correct decoder
    fails with prob <= alpha = 1e-3 (exact permutation p-values)."""
    p, q = PAIR.target.probs((0,)), PAIR.draft.probs((0,))
    mutant_law = [float(v) for v in step_law(p, q, "full_p_fallback").output_law]
    n = blackbox_samples_needed([float(v) for v in p], mutant_law, alpha=ALPHA / (2 * NUM_CELLS))
    target, draft = TabularCausalLM(PAIR.target), TabularCausalLM(PAIR.draft)
    options = {} if kernel is None else {"kernel": kernel, "name": "full-p-fallback"}
    result = blackbox_audit(SpeculativeDecoder(target, draft, 1, **options), AncestralDecoder(target), [[0]], SamplingConfig(),
                            num_samples=n, max_new_tokens=MAX_NEW_TOKENS, vocab_size=4, alpha=ALPHA, seed=8, eos_token_id=3)
    assert result.verdict == expected, result.summary()
    assert len(result.cells) == NUM_CELLS and result.num_samples_per_arm == n


def test_cells_treat_end_of_row_as_a_category():
    a = np.array([[0, 3, -1], [1, 1, 1]] * 30, dtype=np.int64)
    b = np.array([[0, 3, -1], [1, 1, 3]] * 30, dtype=np.int64)
    cells = blackbox_cells(a, b, 4, cell_alpha=0.01, rng=np.random.default_rng(0))
    assert [c.name for c in cells] == ["position 0", "position 1", "position 2", "positions 0,1 joint"]
    assert cells[0].result.pvalue == 1.0 and cells[2].result.pvalue < 0.01  # position 2: 1 vs EOS
