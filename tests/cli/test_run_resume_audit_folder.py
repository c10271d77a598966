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


AUDIT = ["audit", "--decoder", "reference", "--target", "tabular:trigram3", "--num-draft-tokens", "2",
         "--num-samples", "20", "--no-progress", "--no-diagnosis"]


def test_audit_into_a_folder_of_reports_without_run_json_is_refused_and_left_as_it_was(tmp_path, capsys):
    """A committed audit folder holds the reports and the plan but no run.json and no samples (git keeps neither):
    reports/audits/mlx-lm-server-0.32.2/control-prompt-cache-fix-t1-k1.  ``audit --run-dir`` on a copy of it ran a new
    audit and overwrote its report.json, audit.json and the rest (measured: 5 of 6 digests changed)."""
    import shutil
    from pathlib import Path

    committed = Path(__file__).resolve().parents[2] / "reports/audits/mlx-lm-server-0.32.2/control-prompt-cache-fix-t1-k1"
    folder = tmp_path / "copy"
    shutil.copytree(committed, folder)
    assert not (folder / "run.json").exists() and (folder / "report.json").is_file()
    before = _files(folder)
    assert main([*AUDIT, "--run-dir", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert f"--run-dir='{folder}' already holds a run's reports (report.json)" in err, err
    assert "plan:" not in out and "audit run ->" not in out, out
    assert _files(folder) == before


def test_audit_run_dir_that_is_a_file_or_under_one_or_a_dangling_link_is_refused_before_the_plan(tmp_path, capsys):
    """It used to load the models, print the plan, then fail on its lock file: "cannot write run folder ... (lock
    file .specverify.lock): File exists" (or "Not a directory"), naming neither --run-dir nor what is allowed."""
    afile = tmp_path / "afile"
    afile.write_text("kept")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for run_dir, what in ((afile, "a file"), (afile / "sub", "a file"), (tmp_path / "dangling", "a dangling symlink")):
        assert main([*AUDIT, "--run-dir", str(run_dir)]) == 2
        out, err = capsys.readouterr()
        assert f"--run-dir='{run_dir}'" in err and f"is {what}, not a folder" in err, err
        assert "plan:" not in out, out
    assert afile.read_text() == "kept" and (tmp_path / "dangling").is_symlink() and not (tmp_path / "nowhere").exists()
