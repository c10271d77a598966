"""End to end: a suite with a biased, an unknown-mechanism and a lossless decoder on trigram3.

``specverify run`` adds report.json ``diagnosis`` (and the "Diagnosis" section of report.md/html) for
every decoder with BIAS DETECTED only; ``specverify diagnose RUN_DIR`` recomputes it from the stored
samples.  n = 2500 per set, ci seeds.
"""

import json
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.pipeline import run_suite

REPO = Path(__file__).resolve().parents[2]

SUITE = f"""
schema_version = 1
name = "diag"
seed = 20261129
python_path = [{json.dumps(str(REPO))}]
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
samples = 2500
chunk_size = 500
tests = ["gof", "joint", "surprisal", "pit"]
gof_positions = [1, 2, 3]
joint_tokens = 3
[[decoders]]
name = "reference"
decoder = "reference"
expect = "pass"
[[decoders]]
name = "full_p_fallback"
decoder = "full_p_fallback"
expect = "detect"
[[decoders]]
name = "recover_from_draft"
decoder = "tests.diagnose.unknown_plugins:recover_from_draft"
expect = "detect"
[stats]
alpha = 1e-3
target_mde = 0.1
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("diag") / "suite.toml"
    path.write_text(SUITE)
    from verifier.suite import load_suite

    out = path.parent / "run"
    outcome = run_suite(load_suite(path), out, progress=False, log=lambda _m: None)
    assert outcome.exit_code == 0
    return out


@pytest.mark.slow
def test_run_adds_a_diagnosis_for_biased_decoders_only(run_dir):
    report = json.loads((run_dir / "report.json").read_text())
    diag = {d["decoder"]: d for d in report["diagnosis"]["decoders"]}
    assert set(diag) == {"full_p_fallback", "recover_from_draft"}
    assert diag["full_p_fallback"]["sentence"].startswith("consistent with full_p_fallback (log LR ")
    assert diag["recover_from_draft"]["sentence"].startswith("matches no known mechanism")
    s = diag["full_p_fallback"]["sets"][0]
    assert s["fits"]["temperature"]["sentence"].startswith("emitted tokens look like T = ")
    assert len(s["localization"]["log_lr_per_position"]) == 3
    assert s["plot"]["mechanism"] == "full_p_fallback"
    md = (run_dir / "report.md").read_text()
    assert "## Diagnosis" in md and "consistent with full_p_fallback" in md
    html = (run_dir / "report.html").read_text()
    assert "<h2>Diagnosis" in html and "observed vs target vs best mechanism" in html


@pytest.mark.slow
def test_cli_diagnose_rereads_the_run(run_dir, capsys):
    assert main(["diagnose", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "full_p_fallback: consistent with full_p_fallback" in out
    assert "recover_from_draft: matches no known mechanism" in out
    saved = json.loads((run_dir / "diagnosis.json").read_text())
    assert [d["decoder"] for d in saved["decoders"]] == ["full_p_fallback", "recover_from_draft"]
    assert main(["diagnose", str(run_dir), "--decoder", "reference"]) == 0
    assert "reference: no mechanism preferred over the target" in capsys.readouterr().out


def test_cli_diagnose_errors_name_the_argument(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path)]) == 2
    assert "RUN_DIR" in capsys.readouterr().err
