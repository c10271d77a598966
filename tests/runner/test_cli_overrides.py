"""`specverify run --device/--dtype/--threads` override the suite's [models.*] tables."""

import json
from pathlib import Path

from verifier.cli import main
from verifier.errors import EXIT_OK, EXIT_USAGE

TINY = str(Path(__file__).parent / "suites" / "tiny.toml")


def test_dtype_override_reaches_the_models(tmp_path):
    code = main(["run", TINY, "--dtype", "float64", "--threads", "1", "--no-progress", "--run-dir", str(tmp_path / "run")])
    assert code == EXIT_OK
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["environment"]["dtypes"] == ["float64"]


def test_bad_threads_is_a_usage_error(tmp_path, capsys):
    code = main(["run", TINY, "--threads", "0", "--run-dir", str(tmp_path / "run")])
    assert code == EXIT_USAGE
    assert "--threads=0" in capsys.readouterr().err


def test_resume_refuses_overrides(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", TINY, "--no-progress", "--run-dir", str(run_dir)]) == EXIT_OK
    code = main(["run", "--resume", str(run_dir), "--device", "cpu"])
    assert code == EXIT_USAGE
    assert "--device" in capsys.readouterr().err
