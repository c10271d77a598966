"""`specverify report RUN_DIR`: cheaper than the run, keeps the run's stage times (issue 16).

Before: every `report` reloaded the models and recomputed every cell (36-41 s for the 25 s ci run)
and replaced the run's stage times with its own.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from verifier.cli import main

TINY = Path(__file__).resolve().parents[2] / "tests" / "runner" / "suites" / "tiny.toml"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("cache") / "run"
    assert main(["run", str(TINY), "--run-dir", str(run), "--no-progress"]) == 0
    return run


def _report(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


def test_report_keeps_the_runs_stage_times_and_reuses_same_inputs(run_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    before = _report(run)
    assert main(["report", str(run), "--no-progress"]) == 0
    after = _report(run)
    assert after["run"]["stage_seconds"] == before["run"]["stage_seconds"]  # the run's figures
    assert after["run"]["report_stage_seconds"] == {"statistics": 0.0}  # nothing recomputed
    assert after["cells"] == before["cells"] and after["decoders"] == before["decoders"]


def test_changed_samples_or_recompute_compute_again(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    before = _report(run)
    chunk = next((run / "samples").rglob("chunk-*.npz"))
    st = chunk.stat()
    os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same bytes, new file: recompute
    assert main(["report", str(run), "--no-progress"]) == 0
    after = _report(run)
    assert after["run"]["report_stage_seconds"].get("statistics", 0) > 0
    assert after["run"]["stage_seconds"] == before["run"]["stage_seconds"]
    assert [c["pvalue"] for c in after["cells"]] == [c["pvalue"] for c in before["cells"]]  # deterministic
    assert main(["report", str(run), "--no-progress", "--recompute"]) == 0
    assert _report(run)["run"]["report_stage_seconds"].get("statistics", 0) > 0


def test_models_outside_the_package_code_are_keyed_or_never_reused(tmp_path):
    from verifier.runner.inputs_key import inputs_key

    def suite(target):
        return {"raw": {"models": {"m": {"target": target, "draft": target}}}, "base_dir": str(tmp_path)}

    assert inputs_key(tmp_path, suite("module.sub:make_model"), False) is None
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"1")
    first = inputs_key(tmp_path, suite("ckpt"), False)
    (ckpt / "model.safetensors").write_bytes(b"22")  # a replaced checkpoint changes the expected laws
    assert inputs_key(tmp_path, suite("ckpt"), False) != first
    assert inputs_key(tmp_path, suite("shipped:target"), False) is not None


def test_same_inputs_rerender_imports_no_torch(run_dir, tmp_path):
    """The fast path of `specverify report` needs neither torch nor the runner."""
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    code = ("import sys\nfrom verifier.cli import main\nrc = main(['report', %r, '--no-progress'])\n"
            "print('RC', rc, 'torch' in sys.modules)" % str(run))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "RC 0 False" in out.stdout, out.stdout[-1500:] + out.stderr[-1500:]


def test_far_below_copy_matches_the_runner():
    from verifier.reports import FAR_BELOW_FRACTION
    from verifier.runner.acceptance import FAR_BELOW_FRACTION as source

    assert FAR_BELOW_FRACTION == source


def test_a_hand_edited_report_json_is_not_believed(tmp_path, capsys):
    """Issue 28 item 7: a forged PASS in report.json printed PASS and exited 0.

    The cached report.json is bound to a digest of itself and the run's inputs (run.report_sha256):
    an edited one is recomputed from the stored samples, so the verdict is the samples' verdict."""
    suite = tmp_path / "tiny.toml"
    text = TINY.read_text().replace('python_path = ["../../.."]', f'python_path = [{str(TINY.parents[3])!r}]')
    suite.write_text(text.replace('expect = "detect"', 'expect = "pass"'))  # the biased decoder now fails the run
    run = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run), "--no-progress"]) == 1
    forged = _report(run)
    forged["verdict"], forged["exit_code"] = "PASS", 0
    for d in forged["decoders"]:
        d.update(verdict="PASS", expectation_met=True, failing_cells=[])
    for c in forged["cells"]:
        c["verdict"] = "PASS"
    (run / "report.json").write_text(json.dumps(forged))
    capsys.readouterr()
    assert main(["report", str(run), "--no-progress"]) == 1
    out = capsys.readouterr()
    assert "BIAS DETECTED" in out.out
    assert "report.json" in out.err and "does not match" in out.err
    again = _report(run)
    assert again["exit_code"] == 1 and again["run"]["report_stage_seconds"].get("statistics", 0) > 0
    # the recomputed report is trusted again: the next `report` re-renders it without recomputing
    assert main(["report", str(run), "--no-progress"]) == 1
    assert _report(run)["run"]["report_stage_seconds"] == {"statistics": 0.0}


def test_a_resealed_forgery_is_caught_by_the_verdicts_rederived_from_the_cells(tmp_path, capsys):
    """The seal is a hash anyone can recompute: a forged PASS sealed again must still not be believed
    while its cells say BIAS (the verdicts and exit code are re-derived from the stored cells)."""
    from verifier.reports.digest import DIGEST_FIELD, report_digest

    suite = tmp_path / "tiny.toml"
    text = TINY.read_text().replace('python_path = ["../../.."]', f'python_path = [{str(TINY.parents[3])!r}]')
    suite.write_text(text.replace('expect = "detect"', 'expect = "pass"'))
    run = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run), "--no-progress"]) == 1
    forged = _report(run)
    forged["verdict"], forged["exit_code"] = "PASS", 0
    for d in forged["decoders"]:
        d.update(verdict="PASS", expectation_met=True)
    forged["run"][DIGEST_FIELD] = report_digest(forged)
    (run / "report.json").write_text(json.dumps(forged))
    capsys.readouterr()
    assert main(["report", str(run), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "whose cells include BIAS" in err and "recomputing" in err
