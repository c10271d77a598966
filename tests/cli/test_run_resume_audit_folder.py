"""``specverify run --resume`` refuses an audit's run folder (exit 2), naming ``specverify audit --resume``, and leaves
the folder as it was.

An audit's folder holds its plan (audit.json: a URL audit's server options, the numeric floor, the sequential stop);
``run --resume`` reads only run.json's suite, so before the fix it resumed the audit without its plan and re-wrote
report.json / report.md / report.html (measured: their digests changed).  The URL audit's folder is tested with a
real server in tests/server/test_url_audit.py, the self-reported folder in tests/server/test_self_reported_folder.py.
"""

from __future__ import annotations

from verifier.cli import main


def _files(folder):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_run_resume_refuses_an_audit_folder_and_names_audit_resume(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["audit", "--decoder", "reference", "--target", "tabular:trigram3", "--num-draft-tokens", "2",
                 "--num-samples", "20", "--no-progress", "--no-diagnosis", "--run-dir", str(run_dir)])
    assert code in (0, 4) and (run_dir / "audit.json").is_file()
    before = _files(run_dir)
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--resume='{run_dir}' is an audit's run folder" in err
    assert f"allowed: `specverify audit --resume {run_dir}`" in err
    assert _files(run_dir) == before


def test_run_resume_refuses_a_two_sample_url_audit_folder(tmp_path, capsys):
    """The two-sample design's folder holds one response journal per arm and no run.json (a real folder's layout,
    written by ``bind_blackbox_journals``; its content is never read by the refusal)."""
    folder = tmp_path / "two"
    for arm in ("speculative", "reference"):
        (folder / arm / "server").mkdir(parents=True)
        (folder / arm / "server" / "responses.jsonl").write_text("")
    before = _files(folder)
    assert main(["run", "--resume", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is a two-sample URL audit's folder" in err and f"--run-dir {folder}" in err
    assert _files(folder) == before


def test_audit_into_a_folder_that_holds_a_run_is_refused_before_the_plan(tmp_path, capsys):
    """A second ``specverify audit --run-dir`` on an audit's folder is exit 2 naming ``audit --resume``, refused before
    the models load and the plan prints (it used to load the pair and print the plan first: 15 s for an engine
    audit), and the folder is left as it was."""
    run_dir = tmp_path / "run"
    argv = ["audit", "--decoder", "reference", "--target", "tabular:trigram3", "--num-draft-tokens", "2",
            "--num-samples", "20", "--no-progress", "--no-diagnosis", "--run-dir", str(run_dir)]
    assert main(argv) in (0, 4)
    before = _files(run_dir)
    capsys.readouterr()
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "already holds a run" in err and f"specverify audit --resume {run_dir}" in err, err
    assert "plan:" not in out and "audit run ->" not in out, out
    assert _files(run_dir) == before
