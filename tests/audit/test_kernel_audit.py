"""Kernel-level audit: the reference kernel passes, the full-p-fallback mutant and transformers'
lossy ``assistant_ensemble_weight`` are detected, transformers' lossless kernel passes, and blind
cells are flagged.  Expected laws come from ``verifier.exact.step_law``."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.engines.hf_kernel import ensemble_step_law, make_hf_kernel
from verifier.audit.kernel_audit import KernelCase, adversarial_case, audit_kernel, blind_cell_reasons, standard_kernel_cases
from verifier.decoders.kernels import full_p_fallback_kernel, verify_chain
from verifier.exact import step_law
from verifier.stats import gof_test, samples_needed

ALPHA = 1e-3
CASES = {c.name: c for c in standard_kernel_cases()}
# The TV each test's n lets every cell see (power .99, alpha 1e-3): a case whose cells cannot see its
# target_tv is UNDERPOWERED, never PASS.  chain-k4's last positions are reached by few draws (MDE .23 at 20000).
TARGET_TV = {"seed-3token": 0.03, "chain-k4": 0.25, "one-hot-blind": 0.05}


def _float(law):
    return np.array([float(v) for v in law])


def _cells(case):
    return case.num_draft_tokens + 2  # one token cell per position + the accepted-count cell


@pytest.mark.parametrize("case_name", ["seed-3token", "chain-k4"])
def test_reference_passes_and_full_p_fallback_is_detected(case_name):
    """n = 20000 draws (seed 3).  Position 0 of the mutant follows
    ``step_law(p0, q0, "full_p_fallback").output_law``; n exceeds ``samples_needed`` for it at the
    Holm level alpha / (2 * cells), power .99.  The reference fails with prob <= alpha = 1e-3."""
    case = CASES[case_name]
    p0, q0 = case.target_probs[0], case.draft_probs[0]
    assert 20_000 >= samples_needed(_float(p0), _float(step_law(p0, q0, "full_p_fallback").output_law),
                                    alpha=ALPHA / (2 * _cells(case)))
    assert audit_kernel(verify_chain, case, num_draws=20_000, seed=3, alpha=ALPHA, target_tv=TARGET_TV[case_name]).verdict == "PASS"
    assert audit_kernel(full_p_fallback_kernel, case, num_draws=20_000, seed=3, alpha=ALPHA).verdict == "BIAS DETECTED"


def test_blind_cell_is_flagged_and_really_blind():
    """A draft one-hot on a token with target prob 0 makes the residual equal the target: the
    exact full-p-fallback law equals p, the check says so, and the mutant indeed passes there."""
    case = CASES["one-hot-blind"]
    p, q = case.target_probs[0], case.draft_probs[0]
    assert step_law(p, q, "full_p_fallback").output_law == p
    reasons = blind_cell_reasons(p, q)
    assert any(r.startswith("full_p_fallback is invisible") and "residual equals the target" in r for r in reasons)
    result = audit_kernel(full_p_fallback_kernel, case, num_draws=5_000, seed=3, alpha=ALPHA, target_tv=TARGET_TV["one-hot-blind"])
    assert result.verdict == "PASS" and result.blind  # blind, not evidence of correctness
    # every prob positive: only llama.cpp's by-index residual (= the residual when index = id) is invisible there
    assert [r.split(" ")[0] for r in blind_cell_reasons(CASES["seed-3token"].target_probs[0],
                                                        CASES["seed-3token"].draft_probs[0])] == ["residual_by_index"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=2, max_size=5), st.data())
def test_one_hot_draft_on_a_zero_target_token_is_always_flagged(weights, data):
    zero = data.draw(st.integers(0, len(weights)))
    w = weights[:zero] + [0] + weights[zero:]
    p = [Fraction(v, sum(w)) for v in w]
    q = [Fraction(int(i == zero)) for i in range(len(w))]
    assert any(r.startswith("full_p_fallback is invisible") for r in blind_cell_reasons(p, q))


def test_adversarial_case_beats_the_seed_example_and_is_not_blind():
    case, tv = adversarial_case("full_p_fallback", num_candidates=2000, seed=0)
    seed_case = CASES["seed-3token"]
    seed_tv = sum(abs(a - b) for a, b in zip(step_law(seed_case.target_probs[0], seed_case.draft_probs[0], "full_p_fallback").output_law,
                                            seed_case.target_probs[0])) / 2
    assert tv > seed_tv and not blind_cell_reasons(case.target_probs[0], case.draft_probs[0], rules=["full_p_fallback"])


def test_ensemble_law_reduces_to_the_canonical_rule_at_weight_one():
    for case in standard_kernel_cases():
        for p, q in zip(case.target_probs, case.draft_probs):
            assert ensemble_step_law(p, q, 1) == step_law(p, q).output_law == p


@pytest.mark.slow
def test_hf_speculative_sampling_kernel_passes_and_its_lossy_option_is_detected():
    """transformers' ``_speculative_sampling`` (one call per draw, ~0.3 ms): 3000 draws on the seeds'
    case (seed 4).  Lossless: PASS (false-fail <= 1e-3).  ``assistant_ensemble_weight=0.5``: its exact
    law ``ensemble_step_law`` = (.35, .40, .25) is TV .15 from p; n = 3000 > samples_needed, so it is
    DETECTED, and its counts fit the documented lossy law (the option does what transformers says)."""
    case = CASES["seed-3token"]
    p, q = case.target_probs[0], case.draft_probs[0]
    lossy = ensemble_step_law(p, q, Fraction(1, 2))
    assert 3000 >= samples_needed(_float(p), _float(lossy), alpha=ALPHA / (2 * _cells(case)))
    assert audit_kernel(make_hf_kernel(), case, num_draws=3000, seed=4, alpha=ALPHA, target_tv=0.1).verdict == "PASS"  # cells see TV .1 at 3000
    lossy_result = audit_kernel(make_hf_kernel(0.5), case, num_draws=3000, seed=4, alpha=ALPHA)
    assert lossy_result.verdict == "BIAS DETECTED"
    position0 = lossy_result.cells[0]
    assert position0.name.startswith("position 0") and gof_test(position0.counts, _float(lossy), alpha=ALPHA).pvalue > ALPHA


def test_kernel_case_validation():
    with pytest.raises(ValueError, match="len"):
        KernelCase.from_rows("bad", [["1/2", "1/2"]], [["1/2", "1/2"]])


def test_large_vocabulary_blind_check_flags_the_classic_causes():
    """Above 16 tokens the check runs in float64: a draft one-hot on a zero-target token and a draft
    equal to the target are flagged; a generic far-apart pair is not."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(64, 0.3))
    q = rng.dirichlet(np.full(64, 0.3))
    hot = np.zeros(64)
    hot[7] = 1.0
    p_zero = p.copy()
    p_zero[7] = 0.0
    p_zero /= p_zero.sum()
    assert blind_cell_reasons(list(p), list(q), tolerance=1e-6) == []
    assert blind_cell_reasons(list(p_zero), list(hot), tolerance=1e-6)[0].startswith("full_p_fallback is invisible")
    assert "draft == target" in blind_cell_reasons(list(p), list(p), tolerance=1e-6)[0]


def test_hf_kernel_worker_processes_are_reproducible():
    """Rows split over 2 forked workers (one torch thread each): same seed, same emitted tokens."""
    import torch

    case = CASES["seed-3token"]
    target, draft = case.tensors()
    n = 4000  # 2 workers x MIN_ROWS_PER_WORKER
    ids = torch.multinomial(draft, n, replacement=True, generator=torch.Generator().manual_seed(0)).T.contiguous()
    args = (target.expand(n, 2, 3).contiguous(), draft.expand(n, 1, 3).contiguous(), ids)
    kernel = make_hf_kernel(num_workers=2)
    a = kernel(*args, torch.Generator().manual_seed(5))
    b = kernel(*args, torch.Generator().manual_seed(5))
    assert a.shape == (n, 2) and torch.equal(a, b)
    assert torch.equal(a[:, 0][a[:, 1] >= 0], ids[:, 0][a[:, 1] >= 0])  # a two-token row starts with its accepted draft
