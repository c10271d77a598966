"""`specverify bench diagnose` / `bench diagnose-vocab` arguments (review 2026-12-03): `--n -1` was a numpy ValueError
traceback (exit 1, the bias code) after the first rows had run; `--runs 0` printed a table of 0/0 cells and exited 0.
Both are usage errors (exit 2) naming the flag, before any row is sampled."""

from __future__ import annotations

import pytest

from verifier.cli import main
from verifier.errors import EXIT_USAGE


@pytest.mark.parametrize("command", ["diagnose", "diagnose-vocab"])
@pytest.mark.parametrize("args, name", [(["--runs", "0"], "--runs"), (["--n", "400", "-1"], "--n"),
                                        (["--n", "0"], "--n")])
def test_bad_counts_are_usage_errors(command, args, name, capsys):
    assert main(["bench", command, *args]) == EXIT_USAGE
    out = capsys.readouterr()
    assert f"{name}=" in out.err and "Traceback" not in out.err and "|" not in out.out, out.err
