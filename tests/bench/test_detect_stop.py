"""``bench detect --stop`` (``verifier.bench.detect_stop``; issue 29, bug kind 5): a few seeds of each kind of row.

The stop-rule rows are geometric in the exact violation probability (``stop_violation_prob``): for
``max_tokens_overshoot`` on trigram3, pi = 12499/200000 (0.0625, exact), so the oracle's median is 11 rows and its n at power
0.99 is 72; 20 measured gaps (seed 0) have a median within the 0.001..0.999 quantiles of the median of 20 geometric
draws.  The law row for ``deterministic_acceptance`` on trigram3 (stopping-law TV 0.280, NP oracle 16 rows at
power 0.99) is run with 5 seeds only to check its shape and that the chi-square cell needs more rows than the oracle.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from scipy import stats

from verifier.bench.detect_stop import STOP_MUTANTS, detect_stop_rows, render_stop_markdown
from verifier.cli import main
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, stop_violation_prob


def test_violation_row_is_geometric_in_the_exact_probability():
    pair = standard_tabular_pairs()["trigram3"]
    assert stop_violation_prob(pair.target, pair.draft, (0, 1), 3, 6, 8, [2], check="round_limit") == Fraction(12499, 200000)
    (row,) = detect_stop_rows(["max_tokens_overshoot"], ["trigram3"], seeds=20)
    assert (row.cell, row.oracle_median, row.oracle_n) == ("stop-rule", 11, 72)
    # median of 20 iid Geometric(1/16) draws: its 0.001 and 0.999 quantiles by simulation-free order statistics
    pi = 12499 / 200000
    lo = stats.geom.ppf(stats.beta.ppf(0.001, 10, 11), pi)
    hi = stats.geom.ppf(stats.beta.ppf(0.999, 11, 10), pi)
    assert lo <= row.median <= hi, (lo, row.median, hi)


@pytest.mark.full  # ~15 s of chi-squares on a grid; the module is exercised in the quick tier by the test above
def test_law_row_and_markdown():
    (row,) = detect_stop_rows(["deterministic_acceptance"], ["trigram3"], seeds=5)
    assert row.cell == "stop-position@1..6" and row.effect == "stopping-law TV 0.280" and row.oracle_n == 16
    assert row.median >= row.oracle_median
    text = render_stop_markdown([row])
    assert "| deterministic_acceptance | trigram3 | stop-position@1..6 |" in text


def test_bad_arguments_are_clear_errors(capsys):
    with pytest.raises(InvalidArgumentError, match="mutants"):
        detect_stop_rows(["shared_stream"])
    with pytest.raises(InvalidArgumentError, match="cases"):
        detect_stop_rows(None, ["unigram3"])
    with pytest.raises(InvalidArgumentError, match="seeds"):
        detect_stop_rows(seeds=0)
    assert set(STOP_MUTANTS) == {"stop_mid_block", "max_tokens_overshoot", "deterministic_acceptance"}
    assert main(["bench", "detect", "--stop", "--streams"]) == 2
    assert "--stop" in capsys.readouterr().err
