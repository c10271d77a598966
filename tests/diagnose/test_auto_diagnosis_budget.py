"""The runner's automatic diagnosis stays within a memory budget (break-it).

A suite at V = 32k with one biased plugin decoder (n = 2,000, 3 tokens) knew its verdict after 238 s and was
then killed by the kernel in the diagnosis stage: the likelihoods' teacher-forced probs of 2,000 distinct
rows held ~16 GiB (measured 86 B per rows x tokens x vocab entry), so the run ended with exit 3 ("decoder
error") and no reports.  A set above ``AUTO_DIAGNOSE_MAX_ENTRIES`` is now left to ``specverify diagnose``
with a note; here the budget is lowered so that trigram3 (V = 3) exceeds it.  full_p_fallback, n = 600,
seed 20261129: BIAS DETECTED either way (the diagnosis never changes the verdict).
"""

import json

from verifier.cli import main
from verifier.diagnose import run_dir as diag_run_dir
from verifier.pipeline import run_suite
from verifier.suite import load_suite

SUITE = """
schema_version = 1
name = "diagbudget"
seed = 20261129
[exact]
enabled = false
[models.trigram3]
target = "tabular:trigram3"
draft = "tabular:trigram3"
[prompts.ctx01]
ids = [0, 1]
[sampling.t1]
temperature = 1.0
[defaults]
num_draft_tokens = [2]
max_new_tokens = 3
samples = 600
tests = ["gof", "joint"]
gof_positions = [1, 2, 3]
joint_tokens = 3
[[decoders]]
name = "full_p_fallback"
decoder = "full_p_fallback"
expect = "detect"
[stats]
alpha = 1e-3
target_mde = 0.5
"""


def test_a_set_over_the_budget_is_left_to_specverify_diagnose(tmp_path, monkeypatch, capsys):
    path = tmp_path / "suite.toml"
    path.write_text(SUITE)
    monkeypatch.setattr(diag_run_dir, "AUTO_DIAGNOSE_MAX_ENTRIES", 10)
    out = tmp_path / "run"
    outcome = run_suite(load_suite(path), out, progress=False, log=lambda _m: None)
    assert outcome.exit_code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["decoders"][0]["verdict"] == "BIAS DETECTED"
    diag, = report["diagnosis"]["decoders"]
    assert diag["status"] == "not diagnosed"
    assert diag["sentence"].startswith("not diagnosed automatically") and "specverify diagnose" in diag["sentence"]
    # on demand the budget does not apply: the user asked for it
    assert main(["diagnose", str(out)]) == 0
    assert "full_p_fallback: consistent with full_p_fallback" in capsys.readouterr().out


def test_the_budget_shrinks_with_the_memory_available():
    """A cap in bytes against the memory available (issue 17 part 1), not only a fixed count of entries."""
    assert diag_run_dir.auto_diagnose_budget(available=None) == diag_run_dir.AUTO_DIAGNOSE_MAX_ENTRIES
    assert diag_run_dir.auto_diagnose_budget(available=64 * 2**30) == diag_run_dir.AUTO_DIAGNOSE_MAX_ENTRIES
    small = diag_run_dir.auto_diagnose_budget(available=2 * 2**30)
    assert small * diag_run_dir.BYTES_PER_ENTRY <= 2**30 < (small + 1) * diag_run_dir.BYTES_PER_ENTRY
