"""The main job end to end on a tabular target with plugin decoders (laws known exactly).

Statistical settings of these runs: family-wise alpha 1e-3 (gate), 600-1200 samples per sample
set, seeds fixed in the suites.  The exact sampler's false-fail rate is <= 1e-3 per run; the biased
sampler (``bias=0.5``: output law at TV >= 0.12 from the target at every position, computed from
the bigram4_eos tables) is far above every cell's MDE (<= 0.11 TV at n=600), so a false pass has
probability < 1e-2 by the cells' stated power.  Nothing here depends on the speculative decoders.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.cli import main
from verifier.errors import EXIT_BIAS, EXIT_DECODER, EXIT_OK, EXIT_UNDERPOWERED, EXIT_USAGE, ReportWriteError
from verifier.reports import write_reports
from verifier.pipeline import analyze_run

from .conftest import EXACT_DECODER, REPO, TINY, strip_volatile, suite_text


def _run(suite: Path, run_dir: Path, *extra: str) -> int:
    return main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress", *extra])


def _report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    code = _run(TINY, run_dir)
    return code, run_dir


def test_reference_passes_and_biased_sampler_is_detected(tiny_run):
    code, run_dir = tiny_run
    report = _report(run_dir)
    assert code == EXIT_OK and report["verdict"] == "PASS" and report["exit_code"] == 0
    verdicts = {d["decoder"]: (d["verdict"], d["expectation_met"]) for d in report["decoders"]}
    assert verdicts == {"exact-sampler": ("PASS", True), "biased-sampler": ("BIAS DETECTED", True)}
    assert report["exact"]["ran"] and report["exact"]["ok"]
    for cell in report["cells"]:
        for key in ("statistic", "pvalue", "adjusted_pvalue", "effect", "effect_ci", "mde", "verdict", "n"):
            assert cell[key] is not None, (cell["id"], key)
    assert {c["test"] for c in report["cells"]} == {"gof@1", "gof@2", "joint@1..2", "pit"}
    assert set(report["environment"]["versions"]) >= {"numpy", "scipy", "torch"}
    assert sorted(p.name for p in run_dir.iterdir()) == ["junit.xml", "report.html", "report.json", "report.md", "run.json", "samples",
                                                      "timing.jsonl"]  # the chunks' generate times (runner.cost)


def test_same_suite_and_seed_give_the_same_report(tiny_run, tmp_path):
    _, run_dir = tiny_run
    assert _run(TINY, tmp_path / "again") == EXIT_OK
    assert strip_volatile(_report(tmp_path / "again")) == strip_volatile(_report(run_dir))


def test_report_command_regenerates_without_resampling(tiny_run, tmp_path, capsys):
    _, run_dir = tiny_run
    shards = sorted((run_dir / "samples").rglob("*.npz"))
    mtimes = [p.stat().st_mtime_ns for p in shards]
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == EXIT_OK
    assert [p.stat().st_mtime_ns for p in shards] == mtimes
    assert strip_volatile(_report(tmp_path / "out")) == strip_volatile(_report(run_dir))
    assert "verdict: PASS" in capsys.readouterr().out


def test_seed_override_changes_samples(tmp_path):
    assert _run(TINY, tmp_path / "s", "--seed", "8") == EXIT_OK
    assert _report(tmp_path / "s")["suite"]["seed"] == 8


@pytest.mark.parametrize(
    "decoders, kwargs, code, message",
    [
        (EXACT_DECODER, {"models": 'target = "no/such/checkpoint"\ndraft = "tabular:bigram4_eos"'}, EXIT_USAGE,
         "ModelLoadError: models.tab.target='no/such/checkpoint': model path"),
        (EXACT_DECODER, {"models": 'target = "tabular:bigram4_eos"\ndraft = "tabular:unigram3"'}, EXIT_USAGE,
         "target vocab_size=4 but draft vocab_size=3"),
        (EXACT_DECODER, {"prompt": "ids = [0, 9]"}, EXIT_USAGE,
         "prompts.p.ids=[0, 9] is invalid: token id 9 is outside the vocabulary of model pair 'tab'; allowed: ids in 0..3"),
        (EXACT_DECODER.replace("table_sampler", "no_such_factory"), {}, EXIT_USAGE, "'no_such_factory' not found in 'tests.runner.plugins'"),
        (EXACT_DECODER.replace("tests.runner.plugins", "tests.runner.no_such_module"), {}, EXIT_USAGE, "'tests.runner.no_such_module' not found"),
        (EXACT_DECODER + "options = { colour = 'red' }\n", {}, EXIT_USAGE, "factory rejected options {'colour': 'red'}"),
    ],
    ids=["missing-model-path", "vocab-mismatch", "out-of-vocab-prompt", "no-factory", "no-module", "bad-option"],
)
def test_bad_input_is_a_clear_usage_error(write_suite, tmp_path, capsys, decoders, kwargs, code, message):
    assert _run(write_suite(suite_text(decoders, **kwargs)), tmp_path / "run") == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_decoder_raising_mid_run_keeps_samples_and_says_where(write_suite, tmp_path, capsys):
    suite = write_suite(suite_text(EXACT_DECODER + "options = { crash_after_calls = 2 }\n"))
    assert _run(suite, tmp_path / "run") == EXIT_DECODER
    report = _report(tmp_path / "run")
    assert report["verdict"] == "ERROR" and report["decoders"][0]["verdict"] == "ERROR"
    stop = report["stopped"][0]
    assert stop["chunk"] == 2 and stop["kind"] == "crash" and "injected crash in call 3" in stop["message"]
    assert stop["chunks_kept_in_set"] == 2 and len(list((tmp_path / "run" / "samples").rglob("*.npz"))) == 2
    assert "stopped at" in (tmp_path / "run" / "report.md").read_text()
    assert "Traceback" not in capsys.readouterr().err


def test_nan_derived_garbage_is_exit_3_with_first_bad_row(write_suite, tmp_path):
    suite = write_suite(suite_text(EXACT_DECODER + "options = { garbage = true }\n"))
    assert _run(suite, tmp_path / "run") == EXIT_DECODER
    stop = _report(tmp_path / "run")["stopped"][0]
    assert stop["kind"] == "invalid_output" and "row 0" in stop["message"] and "outside 0..3" in stop["message"]


def test_underpowered_pass_decoder_is_exit_4(write_suite, tmp_path):
    suite = write_suite(suite_text(EXACT_DECODER + "samples = 60\nchunk_size = 60\n", stats="target_mde = 0.05"))
    assert _run(suite, tmp_path / "run") == EXIT_UNDERPOWERED
    report = _report(tmp_path / "run")
    assert report["verdict"] == "UNDERPOWERED" and any(c["verdict"] == "UNDERPOWERED" for c in report["cells"])


def test_undetected_mutant_fails_the_run(write_suite, tmp_path):
    suite = write_suite(suite_text(EXACT_DECODER.replace('expect = "pass"', 'expect = "detect"')))
    assert _run(suite, tmp_path / "run") == EXIT_BIAS
    assert _report(tmp_path / "run")["decoders"][0]["expectation_met"] is False


def test_unwritable_report_dir_is_a_clear_error_and_keeps_samples(tiny_run, tmp_path, capsys):
    _, run_dir = tiny_run
    blocker = tmp_path / "file"
    blocker.write_text("a file where the report folder should be")
    before = sorted(p.name for p in (run_dir / "samples").rglob("*.npz"))
    assert main(["report", str(run_dir), "--out", str(blocker / "sub")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "ReportWriteError: cannot write reports to" in err and "samples are kept in" in err
    assert sorted(p.name for p in (run_dir / "samples").rglob("*.npz")) == before
    assert main(["run", str(TINY), "--report-dir", str(blocker), "--no-progress"]) == EXIT_USAGE
    assert "ReportWriteError" in capsys.readouterr().err


def test_disk_full_while_writing_reports(tiny_run, tmp_path, monkeypatch):
    import errno

    import verifier.reports as reports

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reports.os, "replace", full)
    with pytest.raises(ReportWriteError, match="No space left on device"):
        write_reports(_report(tiny_run[1]), tmp_path / "out")
    monkeypatch.undo()
    outcome = analyze_run(tiny_run[1], out_dir=tmp_path / "ok", log=lambda _m: None)
    assert outcome.exit_code == EXIT_OK


def test_sigkill_halfway_then_resume_gives_the_same_report(write_suite, tmp_path):
    """A SIGKILLed run keeps its finished shards; --resume samples only the rest and ends with the
    report.json of an uninterrupted run (timestamps aside)."""
    marker = tmp_path / "resume-now"
    decoder = EXACT_DECODER.replace("table_sampler", "suicidal_sampler") + f"options = {{ after_calls = 2, marker = {json.dumps(str(marker))} }}\n"
    suite = write_suite(suite_text(decoder + "samples = 1000\n"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "verifier.cli", "run", str(suite), "--run-dir", str(tmp_path / "killed"), "--no-progress"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    # the job (a child process) was SIGKILLed: the CLI says so and exits 3, never a verdict code
    assert proc.returncode == EXIT_DECODER and "killed by SIGKILL" in proc.stderr, proc.stderr
    kept = sorted(p.name for p in (tmp_path / "killed" / "samples").rglob("*.npz"))
    assert kept == ["chunk-000000.npz", "chunk-000001.npz"]  # 2 of 5 chunks done, nothing half-written
    marker.write_text("")
    assert main(["run", "--resume", str(tmp_path / "killed"), "--no-progress"]) == EXIT_OK
    assert _run(suite, tmp_path / "straight") == EXIT_OK
    assert strip_volatile(_report(tmp_path / "killed")) == strip_volatile(_report(tmp_path / "straight"))


def test_resume_of_a_finished_run_samples_nothing(tiny_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_run[1], copy)
    mtimes = sorted(p.stat().st_mtime_ns for p in copy.rglob("*.npz"))
    assert main(["run", "--resume", str(copy), "--no-progress"]) == EXIT_OK
    assert sorted(p.stat().st_mtime_ns for p in copy.rglob("*.npz")) == mtimes
    assert "already on disk" in capsys.readouterr().out


def test_expected_law_beyond_the_prefix_cap_is_pooled_not_refused(write_suite, tmp_path, monkeypatch, capsys):
    """Issue 17: a level of the prefix tree beyond the cap keeps the target's top prefixes by mass
    + 'other prefix' (before: exit 2, so no default test ran at a real vocabulary)."""
    import verifier.runner.expected as expected

    monkeypatch.setattr(expected, "MAX_PREFIXES", 2)  # bigram4_eos position 3 needs 3 * 3 prefixes
    suite = write_suite(suite_text(EXACT_DECODER, defaults="gof_positions = [1, 3]"))
    assert _run(suite, tmp_path / "run") == EXIT_OK
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    methods = {c["id"].rsplit("/", 1)[-1]: c["method"] for c in report["cells"]}
    assert "top 2 prefixes by mass" in methods["gof@3"] and "extra target passes" in methods["gof@3"]
    assert "top 2 prefixes" not in methods["gof@1"]


def test_surprisal_cell_catches_a_temperature_error_and_reports_nats(write_suite, tmp_path):
    """Family-wise alpha 1e-3, seed 11, 300 rows of max_new_tokens = 1 (the surprisal window is
    min(joint_tokens, max_new_tokens) = 1; no joint test: a joint window longer than the rows is a
    config error).  A sampler at T = 1/1.5 instead of 1
    (rows of bigram4_eos raised to the power 1.5) emits too likely tokens: the surprisal cell
    rejects it; the exact sampler passes.  Values in nats, the entropy of the exact law in extra."""
    decoders = EXACT_DECODER + """
[[decoders]]
name = "cold-sampler"
decoder = "tests.runner.plugins:table_sampler"
expect = "detect"
options = { sharpen = 1.5 }
"""
    text = suite_text(decoders).replace("max_new_tokens = 3", "max_new_tokens = 1").replace("samples = 600", "samples = 300")
    suite = write_suite(text.replace('tests = ["gof", "joint", "pit"]', 'tests = ["gof", "surprisal"]'))
    assert _run(suite, tmp_path / "run") == EXIT_OK
    report = _report(tmp_path / "run")
    cells = {c["id"].split("/")[0] + "/" + c["test"]: c for c in report["cells"]}
    assert set(cells) == {"exact-sampler/gof@1", "exact-sampler/surprisal@1..1", "cold-sampler/gof@1", "cold-sampler/surprisal@1..1"}
    cold, ok = cells["cold-sampler/surprisal@1..1"], cells["exact-sampler/surprisal@1..1"]
    assert cold["effect_unit"] == "nats" and cold["effect"] < 0 and cold["verdict"] == "BIAS"
    assert ok["verdict"] == "PASS" and ok["effect_ci"][0] <= 0 <= ok["effect_ci"][1] and ok["extra"]["entropy"] > 0
