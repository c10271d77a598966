"""Issue 28 "also expected": ``specverify run SUITE --dry-run`` and ``--decoder NAME``.

Before: neither option existed (argparse exit 2 "unrecognized arguments").
"""

import json
from pathlib import Path

import pytest

from verifier.cli import main

REPO = Path(__file__).resolve().parents[2]
CI = str(REPO / "suites" / "ci.toml")


def test_dry_run_prints_the_plan_writes_nothing_and_exits_0(tmp_path, capfd):
    assert main(["run", CI, "--dry-run", "--decoder", "reference,full_p_fallback", "--report-dir", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert "2 decoder(s), 4 sample set(s), 10,000 samples, 24 bias cells" in out  # 2 configs x 2,500 rows x 6 cells
    assert "reference | ctx01 | T=0.7,top_k=2 | k=2" in out and "estimated time: models" in out
    assert out.rstrip().endswith("this is a plan (--dry-run): nothing was sampled or written and no verdict is claimed")
    assert "verdict:" not in out and list(tmp_path.iterdir()) == []


def test_unknown_decoder_is_a_usage_error_listing_the_names(tmp_path, capfd):
    assert main(["run", CI, "--decoder", "refrence", "--report-dir", str(tmp_path)]) == 2
    err = capfd.readouterr().err
    assert "--decoder='refrence' is not a decoder of" in err and "allowed: reference, fresh_target_match," in err
    assert list(tmp_path.iterdir()) == []


def test_decoder_and_dry_run_are_refused_with_resume(tmp_path, capfd):
    assert main(["run", "--resume", str(tmp_path), "--decoder", "reference"]) == 2
    assert "--decoder=['reference'] and --dry-run=False are invalid with it" in capfd.readouterr().err


@pytest.mark.slow
def test_decoder_runs_only_the_named_decoder_with_the_full_runs_samples(tmp_path, capfd):
    run = tmp_path / "run"
    assert main(["run", CI, "--decoder", "reference", "--run-dir", str(run), "--no-progress"]) == 0
    report = json.loads((run / "report.json").read_text())
    assert [d["decoder"] for d in report["decoders"]] == ["reference"] and report["verdict"] == "PASS"
    # the same sample sets (ids hash the set's key and seed) as the full ci run, seed 20261129 (report.json of
    # `specverify run suites/ci.toml`, 2026-12-02): --decoder selects, it does not re-plan
    assert sorted(p.name for p in (run / "samples").iterdir()) == ["reference_ctx01_t07k2_k2-2c2229c5b1",
                                                                  "reference_ctx01_t1_k2-e4fec95d25"]
