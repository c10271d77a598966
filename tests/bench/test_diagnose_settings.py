"""`specverify bench diagnose-settings` (issue 26): rows from exact laws, diagnosed as a report does; one replicate
per law at n = 2,000 (seed 3) names every law as itself and the target's rows nothing."""

from __future__ import annotations

import pytest

from verifier.cli import main


def test_one_replicate_names_every_law_and_the_target_nothing(capsys):
    assert main(["bench", "diagnose-settings", "--runs", "1", "--n", "2000", "--seed", "3"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| pen") or line.startswith("| t07k2")]
    assert len(rows) == 11  # 7 laws at pen, 4 at t07k2
    for r in rows:
        truth, right, wrong, none = r[2].strip(), r[4].strip(), r[5].strip(), r[6].strip()
        assert wrong.startswith("0/1"), r
        assert (none, right) == (("1/1", "0/1") if truth == "target" else ("0/1", "1/1")), r


def test_bad_counts_are_usage_errors(capsys):
    assert main(["bench", "diagnose-settings", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err
