"""ci/engines/gpu-audit.sh refuses cleanly (exit 2, nothing installed) where no CUDA device is visible."""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "engines" / "gpu-audit.sh"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: the script would really run")
def test_refuses_without_cuda(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")}, timeout=60)
    assert proc.returncode == 2 and "no CUDA device visible" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_ci_run_skips_it():
    text = (SCRIPT.parents[2] / ".ci" / "run").read_text()
    assert "gpu-audit|llama-cpp) continue" in text  # llama-cpp is built in the background, gpu-audit never


def test_engines_lists_where_each_engine_runs(capsys):
    from verifier.cli import main

    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    assert "transformers  [decoder]" in out and "runs: in the harness's process" in out
    assert "--run-dir reports/audits/transformers-" in out  # a decoder engine's audit is a known-p run folder
