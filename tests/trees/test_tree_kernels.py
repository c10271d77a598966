"""Tree verification kernels: reference kernels pass the tree kernel audit, every tree mutant kernel is
detected, and every kernel's output law is its rule's exact law (kernel == enumerator).

Statistics: each audit is a pooled Pearson GOF of the first 3 emitted tokens (27 outcomes) against the exact
law (alpha = 1e-3, seeds fixed); when a rule is claimed, its first-round accepted-count law is checked apart
(acceptance rule conformance).  A PASS is a false alarm with probability <= 1e-3 per audit.  The weakest mutant on its stated
case needs 714 samples at alpha .01 / power .99 (``specverify exact --tree``); 10000 draws detect it with
power ~1 at alpha 1e-3.
"""

import pytest
import torch

from verifier.audit.tree_kernel_audit import audit_tree_kernel, draw_tree_rounds, standard_tree_kernel_cases
from verifier.cli import main
from verifier.decoders.tree_kernels import TREE_KERNELS, verify_tree_iid
from verifier.errors import InvalidArgumentError
from verifier.exact.tree_rules import TREE_RULES

CASES = {c.name: c for c in standard_tree_kernel_cases()}
REFERENCES = ["iid_multi_draft", "wor_recursive_rejection", "topk_target_only"]
MUTANT_CASE = {  # mutant -> case where its exact TV is largest among the kernel cases (TV of the first 3 tokens)
    "residual_not_updated": "unigram3/3",  # TV .181
    "wor_verified_as_iid": "unigram3/3",  # TV .104
    "wor_draft_not_renormalized": "unigram3/3",  # TV .104
    "bonus_from_parent": "trigram3/2;2,2",  # TV .161 (context-free targets hide it)
    "sorted_by_draft_prob": "unigram3/3",  # TV .109
    "child_of_rejected": "trigram3/2;2,2",  # TV .096 (context-free pairs hide it)
}
DRAWS, ALPHA = 10_000, 1e-3
TARGET_TV = 0.06  # the first-3-token cell sees TV .04 at 10000 draws, .06 at 5000 (power .99, alpha 1e-3)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", REFERENCES)
def test_reference_tree_kernels_pass(name, case):
    result = audit_tree_kernel(TREE_KERNELS[name], CASES[case], rule=name, num_draws=DRAWS, seed=11, alpha=ALPHA, target_tv=TARGET_TV)
    assert result.verdict == "PASS", result.summary()
    assert len(result.cells) == 1 and result.conforms is True  # bias: 3-token target law; conformance: accepted count


@pytest.mark.parametrize("name", list(MUTANT_CASE))
def test_every_tree_mutant_kernel_is_detected(name):
    result = audit_tree_kernel(TREE_KERNELS[name], CASES[MUTANT_CASE[name]], proposal=TREE_RULES[name].proposal,
                               num_draws=DRAWS, seed=12, alpha=ALPHA, target_tv=TARGET_TV)
    assert result.verdict == "BIAS DETECTED", result.summary()


@pytest.mark.parametrize("name", list(MUTANT_CASE))  # reference kernels: their rule's law is the target law (tested above)
def test_kernel_law_is_its_rules_exact_law(name):
    case = CASES["trigram3/2;2,2"]
    result = audit_tree_kernel(TREE_KERNELS[name], case, rule=name, expected="rule", num_draws=5_000, seed=13, alpha=ALPHA, target_tv=TARGET_TV)
    assert result.verdict == "PASS" and result.conforms is True, result.summary()


def test_nonconforming_acceptance_is_reported_apart_from_bias():
    """The top-k target-only kernel is lossless but does not accept as i.i.d. MSS does: PASS, NONCONFORMING."""
    result = audit_tree_kernel(TREE_KERNELS["topk_target_only"], CASES["trigram3/2;2,2"], proposal="top_k", rule="iid_multi_draft",
                               num_draws=DRAWS, seed=14, alpha=ALPHA, target_tv=TARGET_TV)
    assert (result.verdict, result.conforms) == ("PASS", False), result.summary()


def test_draws_are_reproducible_and_shaped():
    case = CASES["trigram3/2;2,2"]
    a, acc = draw_tree_rounds(verify_tree_iid, case, 300, seed=5)
    b, _ = draw_tree_rounds(verify_tree_iid, case, 300, seed=5)
    assert a.shape == (300, 3) and (a == b).all() and (a >= 0).all() and set(acc.tolist()) <= {0, 1, 2}


def test_kernel_input_checks():
    g = torch.Generator().manual_seed(0)
    p = torch.full((1, 3, 2), 0.5, dtype=torch.float64)
    with pytest.raises(InvalidArgumentError, match="parent_ids"):
        verify_tree_iid(p, p, torch.tensor([-1, 2, 0]), torch.tensor([[0, 1, 1]]), g)
    with pytest.raises(InvalidArgumentError, match="draft_token_ids"):
        verify_tree_iid(p, p, torch.tensor([-1, 0, 0]), torch.tensor([[0, 1, 5]]), g)
    with pytest.raises(InvalidArgumentError, match="expected"):
        audit_tree_kernel(verify_tree_iid, CASES["unigram3/3"], expected="rule")


def test_cli_audit_tree_exit_codes(capsys):
    common = ["--num-draws", "3000", "--case", "unigram3/3"]
    assert main(["audit-tree", "--kernel", "iid_multi_draft", *common]) == 4  # 3000 draws cannot see TV .03 (MDE ~.07)
    assert main(["audit-tree", "--kernel", "iid_multi_draft", *common, "--target-tv", "0.1"]) == 0
    assert main(["audit-tree", "--kernel", "residual_not_updated", *common]) == 1
    assert main(["audit-tree", "--kernel", "no_such_kernel"]) == 2
    assert "BIAS DETECTED" in capsys.readouterr().out


def test_cli_exact_tree(capsys):
    assert main(["exact", "--tree", "--rule", "iid-multi-draft", "--rule", "bonus_from_parent", "--no-search"]) == 0
    out = capsys.readouterr().out
    assert "tree=2;2,2" in out and "OK: 2/2 rules match" in out
