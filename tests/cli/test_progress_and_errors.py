"""Progress bars only on a terminal; a crashing plugin shows its own frames; --debug shows all (issue 16)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifier import progress
from verifier.cli import main

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "runner" / "suites" / "tiny.toml"

CRASHY = textwrap.dedent('''
    def helper(x):
        return 1 / x

    def make(target, draft, num_draft_tokens):
        return helper(0)
''')


@pytest.fixture(autouse=True)
def _auto_progress():
    progress.configure(None)
    yield
    progress.configure(None)


def test_bars_are_off_without_a_terminal_and_forced_on_by_the_flag():
    assert not sys.stdout.isatty()  # pytest captures stdout
    assert not progress.enabled()
    assert type(progress.bar(10, "x")).__name__ == "_NoBar"
    progress.configure(True)
    bar = progress.bar(10, "x")
    assert type(bar).__name__ == "tqdm" and bar.delay == progress.DELAY_S
    bar.close()
    progress.configure(False)
    assert type(progress.bar(10, "x", show=True)).__name__ == "_NoBar"  # --no-progress wins over the API default


def test_run_prints_no_bars_into_a_log(tmp_path):
    """stdout and stderr are pipes here (a CI log): no tqdm bar, no carriage returns, without --no-progress.
    Before the fix every decoder's sampling bar was printed into the log."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "verifier.cli", "run", str(TINY), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "samples/s" not in proc.stderr and "\r" not in proc.stderr and "it/s" not in proc.stderr


def _audit(tmp_path, *extra):
    plugin = tmp_path / "crashy.py"
    plugin.write_text(CRASHY)
    return main(["audit", "--decoder", f"{plugin}:make", "--target", "tabular:trigram3", "--num-samples", "100",
                 "--report-dir", str(tmp_path / "rep"), *extra])


def test_a_crashing_plugin_shows_its_own_frames(tmp_path, capsys):
    assert _audit(tmp_path) == 3
    out = capsys.readouterr().out
    assert "Traceback of the plugin" in out
    assert 'crashy.py", line 6, in make' in out and 'crashy.py", line 3, in helper' in out
    assert "ZeroDivisionError: division by zero" in out
    tb = out[out.index("Traceback of the plugin"):]
    assert "verifier/" not in tb.split("ZeroDivisionError")[0]  # no harness frame


def test_debug_shows_the_full_trace(tmp_path, capsys):
    assert _audit(tmp_path, "--debug") == 3
    out = capsys.readouterr().out
    tb = out[out.index("Traceback (most recent call last)"):]
    assert 'crashy.py", line 3, in helper' in tb and "verifier" in tb and "direct cause" in tb
