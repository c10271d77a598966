"""Issue 12, part 3: unreadable shards were dropped silently.

``merge`` exited 0 on 1500 of 2500 samples and ``report`` used 250 of 500; a sample set with no
valid sample crashed ``report`` and ``merge --allow-partial`` with a traceback.  Missing samples
are now an error (exit 2) naming the chunk files unless ``--allow-partial``, and then the report
says how many are missing.  The plugin is a uniform sampler (``expect = "detect"``): only exit
codes, messages and counts are asserted, no statistic.
"""

from __future__ import annotations

import json
from pathlib import Path

from verifier.cli import main
from verifier.errors import EXIT_USAGE

from .test_plugin_exits import write_suite


def _corrupt(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:50])  # a copy cut short: not a zip any more


def _sampled(tmp_path: Path) -> tuple[Path, Path]:
    suite = write_suite(tmp_path / "s")
    run_dir = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"]) == 0
    return suite, run_dir


def test_report_with_an_unreadable_shard_needs_allow_partial(tmp_path, capsys):
    _, run_dir = _sampled(tmp_path)
    chunks = sorted((run_dir / "samples").rglob("chunk-*.npz"))
    assert len(chunks) == 2
    _corrupt(chunks[1])
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "100 of 200 samples" in err and chunks[1].name in err and "--allow-partial" in err
    assert main(["report", str(run_dir), "--allow-partial"]) == 0
    report = json.loads((run_dir / "report.json").read_text())
    assert report["sample_sets"][0]["samples_missing"] == 100 and report["samples_missing"] == 100
    assert "100 of 200 samples are missing" in (run_dir / "report.md").read_text()


def test_a_sample_set_with_no_valid_sample_is_reported_not_a_traceback(tmp_path, capsys):
    _, run_dir = _sampled(tmp_path)
    for chunk in (run_dir / "samples").rglob("chunk-*.npz"):
        _corrupt(chunk)
    code = main(["report", str(run_dir), "--allow-partial"])
    assert code in (1, 4)  # a detect decoder with no sample cannot be detected; never 0, never a traceback
    assert "Traceback" not in capsys.readouterr().err
    report = json.loads((run_dir / "report.json").read_text())
    assert report["samples_missing"] == 200 and report["sample_sets"][0]["samples_on_disk"] == 0
    assert "200 of 200 samples are missing" in (run_dir / "report.md").read_text()


def test_merge_with_an_unreadable_shard_is_refused_unless_partial(tmp_path, capsys):
    suite = write_suite(tmp_path / "s")
    dirs = [tmp_path / f"shard{i}" for i in range(2)]
    for i, d in enumerate(dirs):
        assert main(["run", str(suite), "--run-dir", str(d), "--shard", f"{i}/2", "--no-progress"]) == 0
    victim = next(dirs[1].rglob("chunk-*.npz"))
    _corrupt(victim)
    capsys.readouterr()
    assert main(["merge", *map(str, dirs), "--out", str(tmp_path / "merged")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "100 of 200 samples" in err and "--allow-partial" in err
    assert main(["merge", *map(str, dirs), "--out", str(tmp_path / "merged2"), "--allow-partial"]) == 0
    assert json.loads((tmp_path / "merged2" / "report.json").read_text())["samples_missing"] == 100


def test_merge_of_shards_sampled_with_different_plugin_files_is_refused(tmp_path, capsys):
    suite = write_suite(tmp_path / "s")
    dirs = [tmp_path / f"shard{i}" for i in range(2)]
    assert main(["run", str(suite), "--run-dir", str(dirs[0]), "--shard", "0/2", "--no-progress"]) == 0
    plug = tmp_path / "s" / "plug.py"
    plug.write_text(plug.read_text() + "\n# edited between shards\n")
    assert main(["run", str(suite), "--run-dir", str(dirs[1]), "--shard", "1/2", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["merge", *map(str, dirs), "--out", str(tmp_path / "merged")]) == EXIT_USAGE
    assert "another plugin file" in capsys.readouterr().err


def test_merge_of_shards_whose_plugin_helper_module_changed_is_refused(tmp_path, capsys):
    """The guard covers the .py files beside the entry file (a plugin imports its helpers from there)."""
    suite = write_suite(tmp_path / "s")
    helper = tmp_path / "s" / "plug_helpers.py"
    helper.write_text("SCALE = 1\n")
    dirs = [tmp_path / f"shard{i}" for i in range(2)]
    assert main(["run", str(suite), "--run-dir", str(dirs[0]), "--shard", "0/2", "--no-progress"]) == 0
    helper.write_text("SCALE = 2\n")
    assert main(["run", str(suite), "--run-dir", str(dirs[1]), "--shard", "1/2", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["merge", *map(str, dirs), "--out", str(tmp_path / "merged")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "in the plugin's folder" in err and "plug.py" in err
