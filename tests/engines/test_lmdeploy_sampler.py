"""LMDeploy 0.18.0 ``DefaultRejectionSamplingImpl.forward``, the real file from the wheel, as a kernel.

Known verdicts (expected laws from ``verifier.exact``): with draft probs it is the canonical rule
(emitted law == target, accepted-count law canonical); without draft probs (the n-gram path) the
emitted law is still the target but it accepts with prob ``sum_x q(x) p(x)`` ("target_only")."""

import numpy as np
import pytest
import torch

from verifier.audit.kernel_audit import audit_kernel, standard_kernel_cases
from verifier.audit.kernel_report import kernel_audit_report
from verifier.plugins import load_kernel
from verifier.cli import main
from verifier.engines import make_engine
from verifier.errors import InvalidArgumentError
from verifier.exact import step_law
from verifier.stats import samples_needed

ALPHA = 1e-3
CASES = {c.name: c for c in standard_kernel_cases()}
N = 200_000  # about 1.5 s a case at ~1.5e5 draws/s


@pytest.fixture
def engine(require_engine):
    return require_engine("lmdeploy-sampler")


@pytest.mark.parametrize("case_name", ["seed-3token", "chain-k4"])
def test_canonical_path_passes_and_could_see_full_p_fallback(engine, case_name):
    """n = 200000 (seed 1): more than ``samples_needed`` to see the full-p-fallback law at position 0
    (alpha 1e-3 split over the case's cells, power .99); a correct kernel fails with prob <= 1e-3."""
    case = CASES[case_name]
    p0, q0 = case.target_probs[0], case.draft_probs[0]
    fallback = [float(v) for v in step_law(p0, q0, "full_p_fallback").output_law]
    assert N >= samples_needed([float(v) for v in p0], fallback, alpha=ALPHA / (case.num_draft_tokens + 2))
    result = audit_kernel(make_engine("lmdeploy-sampler"), case, num_draws=N, seed=1, alpha=ALPHA,
                          target_tv=0.1)  # every cell sees TV .1 at N (chain-k4's rarely reached last position: MDE ~.07)
    assert result.verdict == "PASS", result.summary()


def test_ngram_path_is_lossless_but_accepts_less(engine):
    """draft_probs=None: accept iff u <= p(x).  Emitted law == target; acceptance 0.31 (target_only)
    instead of the canonical 0.7 on seed-3token -- detected at n = 40000, seed 2 (position 1, reached
    by ~12400 draws, still sees TV 0.03)."""
    case = CASES["seed-3token"]
    result = audit_kernel(make_engine("lmdeploy-sampler", draft_probs="none"), case, num_draws=40_000, seed=2, alpha=ALPHA)
    report = kernel_audit_report([result], kernel="lmdeploy-sampler", acceptance_rule="target_only")
    (c,) = report["cases"]
    assert c["verdict"] == "PASS"
    assert c["acceptance"]["vs_canonical_pvalue"] < ALPHA < c["acceptance"]["vs_rule_pvalue"]
    assert c["acceptance"]["rule_law"] == pytest.approx([0.69, 0.31])


def test_same_generator_same_output_and_global_rng_untouched(engine):
    kernel = make_engine("lmdeploy-sampler")
    t, d = CASES["chain-k4"].tensors()
    target, draft = t.expand(64, 5, 4).contiguous(), d.expand(64, 4, 4).contiguous()
    ids = torch.multinomial(d, 64, replacement=True, generator=torch.Generator().manual_seed(0)).T.contiguous()
    before = torch.random.get_rng_state()
    a = kernel(target, draft, ids, torch.Generator().manual_seed(5))
    b = kernel(target, draft, ids, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and torch.equal(torch.random.get_rng_state(), before)
    assert a.dtype == torch.int64 and a.shape == (64, 5)


def test_bad_option_is_a_usage_error(engine, capsys):
    with pytest.raises(InvalidArgumentError, match="logits_dtype"):
        make_engine("lmdeploy-sampler", logits_dtype="int8")
    with pytest.raises(InvalidArgumentError, match="draft_probs"):
        load_kernel("verifier.engines.lmdeploy_sampler:kernel", draft_probs="sometimes")
    assert main(["audit", "--engine", "lmdeploy-sampler", "--engine-arg", "logits_dtype=int8"]) == 2
    assert "allowed: 'float32' or 'float16'" in capsys.readouterr().err


def test_cli_writes_a_report_with_the_engine_and_source_hashes(engine, tmp_path, capsys):
    """20000 draws of seed-3token: every emitted-token cell reaches MDE <= 0.03 (position 1 has ~14000)."""
    out = tmp_path / "report"
    code = main(["audit", "--engine", "lmdeploy-sampler", "--case", "seed-3token", "--num-draws", "20000", "--report-dir", str(out)])
    assert code == 0, capsys.readouterr().out
    import json

    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "PASS" and report["engine"]["version"] == "0.18.0"
    assert set(report["engine"]["source_sha256"]) == {"lmdeploy/pytorch/backends/rejection_sampling.py",
                                                      "lmdeploy/pytorch/backends/default/rejection_sampling.py"}
    assert all(c["mde_tv"] <= 0.03 for c in report["cases"][0]["cells"])
    assert "**Verdict: PASS**" in (out / "report.md").read_text()
    assert np.isclose(sum(report["cases"][0]["acceptance"]["observed"]), 1.0)
