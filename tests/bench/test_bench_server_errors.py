"""``specverify bench server`` on bad input: an error naming what failed (exit 2), never a traceback, never exit 0.

A dead URL (port 9, nothing listens) makes the benchmark's first audit exit 2 without a report; the benchmark used to
raise a bare ``RuntimeError`` (a traceback, exit 1).  An ``--out`` in a missing folder used to fail only after every
measurement, with a traceback.  Each case takes about 3 s (one audit child process) on 2 shared cores.
"""

from __future__ import annotations

import pytest

from verifier.cli import main

DEAD_URL = "http://127.0.0.1:9"


def test_a_dead_url_is_the_audits_usage_error_not_a_traceback(capsys):
    code = main(["bench", "server", "--url", DEAD_URL, "--target", "tabular:trigram3", "--num-draft-tokens", "2",
                 "--num-samples", "10", "--repeats", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the audit (seed 1) wrote no report (exit 2)" in err and "does not answer" in err and DEAD_URL in err


@pytest.mark.parametrize("extra, flag", [(["--out", "/nonexistent-folder-specverify/x.json"], "--out"),
                                         (["--repeats", "0"], "--repeats"), (["--repeats", "21"], "--repeats"),
                                         (["--num-samples", "9"], "--num-samples")])
def test_bad_arguments_are_refused_before_any_request(capsys, extra, flag):
    code = main(["bench", "server", "--url", DEAD_URL, "--target", "tabular:trigram3", *extra])
    err = capsys.readouterr().err
    assert code == 2 and f"{flag}=" in err and "audit" not in err, err


@pytest.mark.parametrize("bench, args", [("help-time", []), ("detect", []), ("scale-power", []), ("sampling-profile", [])])
def test_every_bench_checks_its_out_file_before_it_runs(tmp_path, capsys, bench, args):
    """An --out in a missing folder, or naming a folder, is exit 2 before any measurement (benchmarks that took
    minutes used to end in a traceback when they wrote it); the check is the bench command's, for every benchmark."""
    for out in (tmp_path / "missing" / "x.json", tmp_path):
        code = main(["bench", bench, *args, "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and "--out" in err and "Traceback" not in err, (bench, out, err)


def test_an_out_file_that_cannot_be_written_after_the_run_is_a_named_error(tmp_path):
    """The up-front check cannot see a folder removed while the benchmark runs: the write itself then raises
    ReportWriteError naming --out (exit 2, the figures already printed), not an OSError traceback -- the one writer
    every benchmark's --out goes through (detect, gpu, help-time, sampling-profile, scale-power, server)."""
    from verifier.bench._common import write_out
    from verifier.errors import EXIT_USAGE, ReportWriteError

    folder = tmp_path / "gone"
    folder.mkdir()
    write_out(str(folder / "x.json"), "{}")
    assert (folder / "x.json").read_text() == "{}"
    (folder / "x.json").unlink()
    folder.rmdir()
    with pytest.raises(ReportWriteError, match=r"--out=.*x\.json.* cannot be written") as err:
        write_out(str(folder / "x.json"), "{}")
    assert err.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("bench", ["decoders", "all"])
def test_a_json_file_that_cannot_be_written_is_refused_before_the_bench_runs(tmp_path, capsys, bench):
    """``bench decoders --json /missing/x.json`` ran the whole benchmark (20 s at its smallest), then ended in a
    FileNotFoundError traceback, exit 1 (the BIAS code); ``--json`` was never checked up front."""
    outs = [tmp_path] + ([tmp_path / "missing" / "x.json"] if bench == "decoders" else [])  # bench all makes folders
    for out in outs:
        code = main(["bench", bench, "--json", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and f"--json='{out}'" in err and "Traceback" not in err, (bench, out, err)


def test_every_bench_writes_its_out_and_json_files_through_write_out():
    """bench all, decoders, scale, stats and trees wrote --out / --json with open() or write_text, outside write_out:
    a folder removed during the run was an OSError traceback after the figures, not the named exit-2 error."""
    import re
    from pathlib import Path

    import verifier.bench

    direct = re.compile(r"open\(args\.(out|json)|Path\(args\.(out|json)\)\.write_text")
    found = [p.name for p in Path(verifier.bench.__file__).parent.glob("*.py") if direct.search(p.read_text())]
    assert found == [], found


def test_write_out_leaves_no_temporary_file_and_names_the_flag(tmp_path):
    from verifier.bench._common import write_out
    from verifier.errors import ReportWriteError

    write_out(str(tmp_path / "x.json"), "old")
    write_out(str(tmp_path / "x.json"), "new")
    assert (tmp_path / "x.json").read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["x.json"]
    with pytest.raises(ReportWriteError, match=r"--json=.* cannot be written"):
        write_out(str(tmp_path / "gone" / "y.json"), "{}", "--json")
