"""The test-run options the README (Tests) promises: `-p no:xdist` turns pytest-xdist off.

pyproject's addopts always pass `-n auto --dist loadfile`; without the plugin pytest refused them as unrecognized
arguments (exit 4, no test run), so the documented way to run in one plain process did not work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_p_no_xdist_runs_the_tests_in_one_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "tests/foundations/test_layering.py", "-k", "not nothing_matches_this"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "passed" in done.stdout


def test_q_still_names_the_tier(tmp_path):
    """The README runs ``pytest -q``, which hides pytest's report header, where the tier line was: a quick-tier run
    then looked like a full one.  The tier is written at session start under ``-q`` too (once, by the controller)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for extra, tier in (([], "quick tier"), (["--full"], "full tier")):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--collect-only",
                               "tests/foundations/test_layering.py", *extra],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert done.stdout.count(f"spec-verifier: {tier}") == 1, done.stdout[-2000:]
