"""Kernel audit: acceptance is reported beside the bias verdict, never inside it.

Regression (issue 12, part 1): ``specverify audit --kernel`` failed the lossless
``fresh_target_match`` kernel on 3 of its 4 cases through the accepted-count cell (the only
cell that fired; every emitted-token cell passed).  Draws: 50,000 per case, seed 0, alpha 1e-3:
the accepted-count test sees the fresh-match rule's law (TV >= 0.2 from the canonical law on
seed-3token and chain-k4) with power ~1, so the conformance check below can fail.
"""

from __future__ import annotations

import pytest

from verifier.audit.kernel_audit import adversarial_case, audit_kernel, standard_kernel_cases
from verifier.decoders import KERNELS, verify_chain
from verifier.decoders.lossless import block_verification_kernel, fresh_target_match_kernel

CASES = standard_kernel_cases() + [adversarial_case("full_p_fallback", seed=0)[0]]
DRAWS = 50_000
TARGET_TV = 0.15  # every cell sees TV .15 at DRAWS (chain-k4's rarely reached last position: MDE .14); the others see .02


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("kernel", [fresh_target_match_kernel, block_verification_kernel], ids=lambda k: k.__name__)
def test_lossless_kernels_pass_on_every_standard_case(kernel, case):
    result = audit_kernel(kernel, case, num_draws=DRAWS, seed=0, alpha=1e-3, target_tv=TARGET_TV)
    # fresh_target_match accepts so little that chain-k4's position 4 is reached by ~11 of 50000 draws
    # (MDE .93): never bias, but no PASS either -- that cell cannot see TV .15
    starved = kernel is fresh_target_match_kernel and case.name == "chain-k4"
    assert result.verdict == ("UNDERPOWERED" if starved else "PASS"), result.summary()
    assert all("accepted count" not in c.name for c in result.cells)  # acceptance is no bias cell
    assert result.conforms is None and result.acceptance["reported"]


def test_fresh_target_match_is_loud_far_below_canonical_and_nonconforming_when_declared():
    case = next(c for c in CASES if c.name == "seed-3token")
    result = audit_kernel(fresh_target_match_kernel, case, num_draws=DRAWS, seed=0, alpha=1e-3, acceptance="canonical")
    assert result.verdict == "PASS"  # bias verdict: the output law is the target's
    assert result.conforms is False  # ... but it is not the canonical rule
    assert result.acceptance["far_below"] and "FAR BELOW CANONICAL" in result.acceptance["note"]
    reference = audit_kernel(verify_chain, case, num_draws=DRAWS, seed=0, alpha=1e-3, acceptance="canonical")
    assert reference.verdict == "PASS" and reference.conforms is True and not reference.acceptance["far_below"]


def test_lossless_kernels_are_registered():
    assert KERNELS["fresh_target_match"] is fresh_target_match_kernel
    assert KERNELS["block_verification"] is block_verification_kernel


def test_a_port_that_ignores_block_verification_is_caught_by_the_claimed_rules_acceptance_law():
    """Issue 29 kind 6: a port configured for block verification that runs token-wise (the canonical kernel) is
    lossless -- PASS -- but its accepted-count law is not block verification's: the claimed-rule check rejects it
    (chi-square at alpha 1e-3, DRAWS draws, seed 0; the two accepted-count laws differ by TV 0.063 on chain-k4), and
    the real block kernel under the same claim does not."""
    from verifier.audit.kernel_report import kernel_audit_report, rule_accepted_count_law

    cases = [c for c in CASES if c.num_draft_tokens >= 2
             and rule_accepted_count_law("block_verification", c) != rule_accepted_count_law("canonical", c)]
    assert cases
    token_wise = [audit_kernel(verify_chain, c, num_draws=DRAWS, seed=0, alpha=1e-3, target_tv=TARGET_TV) for c in cases]
    report = kernel_audit_report(token_wise, kernel="token-wise port", acceptance_rule="block_verification", target_tv=TARGET_TV)
    assert report["verdict"] == "PASS"
    assert min(c["acceptance"]["vs_rule_pvalue"] for c in report["cases"]) < 1e-3
    block = [audit_kernel(block_verification_kernel, c, num_draws=DRAWS, seed=0, alpha=1e-3, target_tv=TARGET_TV) for c in cases]
    report = kernel_audit_report(block, kernel="block", acceptance_rule="block_verification", target_tv=TARGET_TV)
    assert all(c["acceptance"]["vs_rule_pvalue"] > 1e-3 for c in report["cases"])
