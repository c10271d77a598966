"""`specverify bench diagnose` / `bench diagnose-vocab` / `bench diagnose-field` arguments (review 2026-12-03): `--n -1` was a numpy ValueError
traceback (exit 1, the bias code) after the first rows had run; `--runs 0` printed a table of 0/0 cells and exited 0.
Both are usage errors (exit 2) naming the flag, before any row is sampled."""

from __future__ import annotations

import pytest

from verifier.cli import main
from verifier.errors import EXIT_USAGE


@pytest.mark.parametrize("command", ["diagnose", "diagnose-vocab", "diagnose-field"])
@pytest.mark.parametrize("args, name", [(["--runs", "0"], "--runs"), (["--n", "400", "-1"], "--n"),
                                        (["--n", "0"], "--n")])
def test_bad_counts_are_usage_errors(command, args, name, capsys):
    assert main(["bench", command, *args]) == EXIT_USAGE
    out = capsys.readouterr()
    assert f"{name}=" in out.err and "Traceback" not in out.err and "|" not in out.out, out.err


def test_diagnose_field_null_runs_is_checked_too(capsys):
    assert main(["bench", "diagnose-field", "--null-runs", "0"]) == EXIT_USAGE
    assert "--null-runs=" in capsys.readouterr().err


@pytest.mark.parametrize("command, args, name", [
    ("diagnose-boundary", ["--seed", "-1"], "--seed"), ("diagnose-field", ["--seed", "-1"], "--seed"),
    ("diagnose", ["--seed", "-1"], "--seed"), ("diagnose-field", ["--shipped-rows", "-5"], "--shipped-rows")])
def test_a_negative_seed_or_shipped_rows_is_a_usage_error_before_any_row(command, args, name, capsys):
    """--seed -1 was numpy's ValueError traceback (exit 1); --shipped-rows -5 ran every table for minutes first."""
    assert main(["bench", command, *args]) == EXIT_USAGE
    out = capsys.readouterr()
    assert f"{name}=-" in out.err and "Traceback" not in out.err and "|" not in out.out, out.err


def test_diagnose_field_prints_each_mechanism_the_null_and_the_cost(capsys):
    """One replicate per cell at n = 100 (trigram3, rows from each law): the table's rows and the tabular cost line."""
    assert main(["bench", "diagnose-field", "--runs", "1", "--null-runs", "1", "--n", "100", "--no-old",
                 "--shipped-rows", "0"]) == 0
    out = capsys.readouterr().out
    for row in ("| recovered_one_late | t1 |", "| draft_accept_same_uniform | t1 |", "| target_processed_first_only | t07k2 |",
                "| target_processed_first_only | t1 |", "| t1 | 1 | 0 | 0 |", "| t07k2 | 1 | 0 | 0 |",
                "| trigram3, all 27 outcomes, T = 1 | 27 | 78 | 360 | 486 | yes |"):
        assert row in out, row
