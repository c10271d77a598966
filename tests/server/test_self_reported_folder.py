"""``specverify report``, ``diagnose`` and ``merge`` on a self-reported URL audit's run folder.

The folder is a copy of a published real audit (llama-server 0c1e570, T = 1, top-k 20, k = 1,
``reports/audits/llama-server-0c1e570-self-reported/t1-topk20-k1``: UNDERPOWERED, exit 4).  Such a folder has
report.json and the reply journal, no run.json.  Before this, all three commands said "run.json is missing".
No statistic is computed here, so there is no seed or alpha: the re-render keeps the stored verdict and exit code, and
a forged verdict (report.json edited, seal no longer matching) is refused rather than re-rendered.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PUBLISHED = Path(__file__).resolve().parents[2] / "reports/audits/llama-server-0c1e570-self-reported/t1-topk20-k1"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verifier.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture()
def folder(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(PUBLISHED, run_dir)
    return run_dir


def test_report_rerenders_a_self_reported_folder_with_its_stored_verdict(folder):
    stored = json.loads((folder / "report.json").read_text())
    (folder / "report.md").unlink()
    (folder / "junit.xml").unlink()
    done = _cli("report", str(folder), "--no-progress")
    assert done.returncode == stored["exit_code"] == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "UNDERPOWERED" in done.stdout and "run.json is missing" not in done.stderr
    again = json.loads((folder / "report.json").read_text())
    assert again["cells"] == stored["cells"] and again["decoders"] == stored["decoders"]
    assert "statistics not recomputed" in again["run"]["regenerated_from"]
    assert "UNDERPOWERED" in (folder / "report.md").read_text() and (folder / "junit.xml").is_file()


def test_report_refuses_a_forged_verdict(folder):
    """A PASS written over the stored UNDERPOWERED (exit code 0, no new seal) is exit 2 and nothing is re-rendered."""
    report = json.loads((folder / "report.json").read_text())
    report["decoders"][0]["verdict"], report["exit_code"] = "PASS", 0
    (folder / "report.json").write_text(json.dumps(report))
    before = (folder / "report.md").read_text()
    done = _cli("report", str(folder), "--no-progress")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "run.report_sha256" in done.stderr and "--run-dir" in done.stderr
    assert (folder / "report.md").read_text() == before


@pytest.mark.parametrize("args, says", [
    (("diagnose",), "no local target or draft model"),
    (("merge",), "not sharded"),
    (("report", "--recompute"), "journaled replies"),
])
def test_diagnose_merge_and_recompute_say_why_they_do_not_apply(folder, args, says):
    done = _cli(args[0], str(folder), *args[1:])
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "self-reported URL audit" in done.stderr and says in done.stderr and "Traceback" not in done.stderr


def test_run_resume_refuses_a_self_reported_folder_without_touching_it(folder):
    files = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    done = _cli("run", "--resume", str(folder), "--no-progress")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "self-reported URL audit" in done.stderr and "`specverify run --resume` does not apply" in done.stderr
    assert f"--run-dir {folder}" in done.stderr and "run.json is missing" not in done.stderr
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == files
