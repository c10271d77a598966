"""Issue 28 item 5: text that leaked internals or disagreed with itself.

Each test failed before its fix: "Suite `&lt;audit ...>`, profile `None`" in an audit's report.md;
"installed (None s install)" in `specverify engines`; "under every sampling config (s)"; "--target=None is
invalid" when --target is missing; "no bias >= TV 0.1" on the CLI but "no bias larger than TV 0.09" in
the report; no progress bar on a terminal without a size, COLUMNS ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifier.cli import main

TINY = Path(__file__).resolve().parents[2] / "tests" / "runner" / "suites" / "tiny.toml"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("leaks") / "run"
    assert main(["run", str(TINY), "--run-dir", str(run), "--no-progress"]) == 0
    return run


def test_the_report_states_the_pass_claim_as_the_cli_does(tiny_run, capsys):
    assert main(["report", str(tiny_run), "--no-progress"]) == 0
    cli = re.search(r"exact-sampler .*?(no bias >= TV [0-9.]+)", capsys.readouterr().out).group(1)
    md = (tiny_run / "report.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("- **exact-sampler**"))
    assert cli == "no bias >= TV 0.2" and cli in line, line
    assert "larger than TV" not in md


def test_an_audit_report_shows_its_source_literally_and_no_profile_none(tmp_path, capsys):
    root = Path(__file__).resolve().parents[2]
    code = main(["audit", "--decoder", f"{root}/examples/plugins/speculative_correct.py:make", "--target",
                 "tabular:trigram3", "--prompt-ids", "0,1", "--num-samples", "60", "--max-new-tokens", "2",
                 "--report-dir", str(tmp_path), "--no-progress"])
    assert code in (0, 4), capsys.readouterr().out
    md = next(tmp_path.rglob("report.md")).read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("Suite `"))
    assert line.startswith("Suite `<audit ") and "&lt;" not in line and "None" not in line, line
    html = next(tmp_path.rglob("report.html")).read_text()
    assert "profile <code>None</code>" not in html


def test_the_diagnosis_names_sampling_configs_by_their_settings():
    from verifier.diagnose.run_dir import _config_sentence

    sets = [{"sampling": "s", "sampling_label": "T=1", "biased": True}]
    assert _config_sentence(sets) == "the bias appears under every sampling config (T=1)"
    sets += [{"sampling": "t07k2", "sampling_label": "T=0.7,top_k=2", "biased": False}]
    assert _config_sentence(sets) == "the bias appears only under sampling config T=1 (not under T=0.7,top_k=2)"


def test_engines_never_prints_none_seconds(capsys):
    assert main(["engines", "transformers"]) == 0
    out = capsys.readouterr().out
    assert "None s" not in out and "transformers" in out


def test_a_missing_flag_is_named_as_missing_not_as_none(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text('{"prompt_id": "a", "prompt_token_ids": [0, 1], "emitted_token_ids": [1, 2]}\n')
    assert main(["audit", "--samples", str(path), "--vocab-size", "3", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert "--target is missing; allowed: a target model" in err and "None" not in err
    assert main(["audit", "--samples", str(path), "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert "--vocab-size is missing" in err and "None" not in err


def _bar_on_a_fresh_pty(columns: str | None) -> str:
    """Stderr of a 10-step bar drawn on a new pseudo-terminal (which reports 0 rows x 0 columns)."""
    import os
    import subprocess
    import sys

    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    code = ("import time; from verifier import progress; progress.configure(True); b = progress.bar(10, 'stage', 'sets'); "
            "time.sleep(progress.DELAY_S + 0.5); b.update(5); time.sleep(0.6); b.update(5); b.close()")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if columns is not None:
        env["COLUMNS"] = columns
    child = subprocess.Popen([sys.executable, "-c", code], stderr=slave, stdout=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert child.wait(timeout=60) == 0
    os.close(master)
    return out.decode(errors="replace")


@pytest.mark.full  # 6 s; bars on a terminal stay covered by test_progress_and_errors
def test_a_progress_bar_is_drawn_on_a_terminal_without_a_size_and_follows_columns():
    drawn = [ln for ln in _bar_on_a_fresh_pty(None).split("\r") if "stage:" in ln]
    assert any("50%" in ln for ln in drawn) and all(len(ln.rstrip()) <= 80 for ln in drawn), drawn
    narrow = [ln for ln in _bar_on_a_fresh_pty("50").split("\r") if "stage:" in ln]
    assert narrow and all(len(ln.rstrip()) <= 50 for ln in narrow) and any(len(ln.rstrip()) >= 45 for ln in narrow), narrow
