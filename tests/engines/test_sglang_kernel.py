"""SGLang 0.5.23 ``chain_speculative_sampling_triton``, the real Triton kernel from the wheel, run by
Triton's interpreter (TRITON_INTERPRET=1; about 50 verify steps a second on one core).

Known verdicts (expected laws exact: ``verifier.exact`` and
:func:`verifier.engines.block_verification.block_accepted_count_law`): both settings emit the target
law; token-wise verification accepts by the canonical law, block verification by Algorithm 2 of Sun
et al. 2024 -- on chain-k4 the two accepted-count laws are 0.063 apart in TV, which n = 1200 tells
apart in either direction (``samples_needed`` 983 at alpha 1e-3, power .999)."""

import pytest
import torch

from verifier.audit.kernel_audit import KernelCase, audit_kernel, standard_kernel_cases
from verifier.audit.kernel_report import kernel_audit_report
from verifier.plugins import PluginLoadError, load_kernel
from verifier.engines import make_engine
from verifier.engines.block_verification import block_accepted_count_law
from verifier.errors import InvalidArgumentError
from verifier.stats import samples_needed

ALPHA = 1e-3
CHAIN = {c.name: c for c in standard_kernel_cases()}["chain-k4"]
N = 1200


@pytest.fixture
def engine(require_engine):
    return require_engine("sglang-kernel")


def test_chain_k4_at_n_tells_the_two_acceptance_laws_apart():
    canonical = [float(v) for v in CHAIN.accepted_count_law()]
    block = [float(v) for v in block_accepted_count_law(CHAIN.target_probs, CHAIN.draft_probs)]
    assert N >= samples_needed(canonical, block, alpha=ALPHA, power=0.999)
    assert N >= samples_needed(block, canonical, alpha=ALPHA, power=0.999)


@pytest.mark.full  # 10-12 s each; quick smoke: test_draft_token_with_target_prob_zero_is_always_rejected
@pytest.mark.parametrize("block_verification, rule", [(False, "canonical"), (True, "block_verification")])
def test_emits_the_target_law_and_accepts_by_its_own_rule(engine, block_verification, rule):
    """n = 1200 draws of chain-k4 (seed 4): no emitted-token cell rejects (a correct kernel fails with
    prob <= 1e-3); the accepted-count law matches the claimed rule and, for block verification, is
    rejected against the canonical one (and the token-wise kernel's against block's)."""
    kernel = make_engine("sglang-kernel", block_verification=block_verification)
    result = audit_kernel(kernel, CHAIN, num_draws=N, seed=4, alpha=ALPHA, batch_size=N)
    (case,) = kernel_audit_report([result], kernel="sglang-kernel", acceptance_rule="block_verification")["cases"]
    assert case["verdict"] != "BIAS DETECTED", case["cells"]
    acceptance = case["acceptance"]
    if block_verification:
        assert acceptance["vs_canonical_pvalue"] < ALPHA < acceptance["vs_rule_pvalue"]
    else:
        assert acceptance["vs_rule_pvalue"] < ALPHA < acceptance["vs_canonical_pvalue"]


@pytest.mark.parametrize("block_verification", [False, True])
def test_draft_token_with_target_prob_zero_is_always_rejected(engine, block_verification):
    """Exact: p = (0, 1/2, 1/2), q one-hot on token 0 -> every round rejects at position 0 and
    emits a recovered token from max(p - q, 0) = p, never token 0 (k = 1, 40 draws)."""
    case = KernelCase.from_rows("reject-all", [["0", "1/2", "1/2"], ["1/3", "1/3", "1/3"]], [["1", "0", "0"]])
    target, draft = case.tensors()
    ids = torch.zeros(40, 1, dtype=torch.int64)
    out = make_engine("sglang-kernel", block_verification=block_verification)(
        target.expand(40, 2, 3).contiguous(), draft.expand(40, 1, 3).contiguous(), ids, torch.Generator().manual_seed(0))
    assert out.dtype == torch.int64 and (out[:, 1] == -1).all()
    assert set(out[:, 0].tolist()) <= {1, 2} and len(set(out[:, 0].tolist())) == 2


def test_bad_option_is_a_usage_error(engine):
    with pytest.raises(InvalidArgumentError, match="block_verification"):
        make_engine("sglang-kernel", block_verification="yes")
    with pytest.raises(PluginLoadError, match="allowed options: \\['block_verification'\\]") as info:
        load_kernel("verifier.engines.sglang_kernel:kernel", tree=True)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("block_verification", [False, True])
def test_float32_inverse_cdf_can_emit_the_last_id_with_target_prob_zero(engine, block_verification):
    """Engine defect, exact reproduction (sglang 0.5.23; see reports/audits/sglang-kernel-0.5.23/FINDINGS.md).

    The final sampling normalises with ``norm_sum`` summed by ``tl.sum`` (pass 1) but searches the
    float32 ``tl.cumsum`` (pass 2) for ``cumsum > coin * norm_sum``; when the scan ends below the
    product no token matches and ``final_token`` keeps its initial value ``VOCAB_SIZE - 1``.  Here
    the bonus row sums to 0.99999994 (pairwise) but scans to 0.9999999, and the largest float32 uniform
    below 1 (prob 2**-24 per draw) emits id 4, whose target prob is 0 (e.g. a padded vocabulary id).
    Not visible to sampling at any feasible n (order 1e-7 per token); this pins the mechanism."""
    row = [0.42543891072273254, 0.1673983782529831, 0.06283946335315704, 0.34432318806648254, 0.0]
    p = torch.tensor([[row, row]], dtype=torch.float32)
    kernel = make_engine("sglang-kernel", block_verification=block_verification)
    draft = torch.tensor([[0]])  # accepted: u * q < p with q == p
    assert _call_with_uniforms(kernel, p, p[:, :1], draft, uniform=0.0, uniform_final=1 - 2**-24).tolist() == [[0, 4]]
    assert _call_with_uniforms(kernel, p, p[:, :1], draft, uniform=0.0, uniform_final=1 - 2**-22).tolist() == [[0, 3]]


def _call_with_uniforms(kernel, target, draft_probs, draft_ids, *, uniform, uniform_final):
    """Run the SGLang function the adapter wraps with chosen uniforms (the adapter draws them from a generator)."""
    batch, k = draft_ids.shape
    predicts = torch.full((batch * (k + 1),), -1, dtype=torch.int32)
    accept_num = torch.zeros(batch, dtype=torch.int32)
    kernel.function(predicts, torch.full((batch, k + 1), -1, dtype=torch.int32), accept_num,
                    torch.cat([torch.zeros(batch, 1, dtype=torch.int64), draft_ids], 1), torch.arange(batch * (k + 1)).view(batch, k + 1),
                    None, None, torch.full((batch, k), uniform), torch.full((batch,), uniform_final), target.contiguous(),
                    draft_probs.contiguous(), 1.0, 1.0, True, block_verification=kernel.block_verification)
    return predicts.view(batch, k + 1).to(torch.int64)
