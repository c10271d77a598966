"""``bench detect --logprob`` (``verifier.bench.detect_logprob``; issue 29, bug kind 4).

The logprob cell is the Neyman--Pearson test (a wrong value is impossible under the null), so rows to detect are
geometric in the exact P(a row of 6 tokens holds a wrong value), ``logprob_defect_law(...).row_wrong``: for
``logprobs_first_only`` on bigram4_eos (k = 3, T = 1) pi = 0.6185 (exact Fraction), oracle median 1 row, n at power
0.99 5 rows.  40 measured gaps (seed 0) have a median and p90 within the 0.001..0.999 quantiles of those of 40
geometric draws (order statistics of the geometric law, no simulation).
"""

from __future__ import annotations

import pytest
from scipy import stats

from verifier.bench.detect_logprob import LOGPROB_MUTANTS, detect_logprob_rows, render_logprob_markdown
from verifier.cli import main
from verifier.errors import InvalidArgumentError
from verifier.exact import logprob_defect_law, standard_tabular_pairs


@pytest.mark.full  # the exact law at N = 6 and 40 gaps: ~15 s on the shared machine
def test_rows_to_detect_are_geometric_in_the_exact_row_probability():
    pair = standard_tabular_pairs()["bigram4_eos"]
    pi = float(logprob_defect_law(pair.target, pair.draft, (0,), 3, 6, "first_only").row_wrong)
    (row,) = detect_logprob_rows(["logprobs_first_only"], ["bigram4_eos"], seeds=40)
    assert (row.cell, row.oracle_median, row.oracle_n) == ("logprob", 1, 5) and abs(pi - 0.6185) < 1e-4
    for q, got in ((0.5, row.median), (0.9, row.p90)):
        k = int(40 * q)  # order statistic of 40 iid Geometric(pi) draws (method="higher")
        lo = stats.geom.ppf(stats.beta.ppf(0.001, k, 41 - k), pi)
        hi = stats.geom.ppf(stats.beta.ppf(0.999, k + 1, 40 - k), pi)
        assert lo <= got <= hi, (q, lo, got, hi)
    assert "| logprobs_first_only | bigram4_eos | rows pi = 0.6185" in render_logprob_markdown([row])


def test_bad_arguments_are_clear_errors(capsys):
    with pytest.raises(InvalidArgumentError, match="mutants"):
        detect_logprob_rows(["stop_mid_block"])
    with pytest.raises(InvalidArgumentError, match="cases"):
        detect_logprob_rows(None, ["unigram3"])
    with pytest.raises(InvalidArgumentError, match="seeds"):
        detect_logprob_rows(seeds=0)
    assert set(LOGPROB_MUTANTS) == {"logprobs_zero", "logprobs_first_only", "logprobs_draft_row"}
    assert main(["bench", "detect", "--logprob", "--stop"]) == 2
    assert "--logprob" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [("--alpha", "1.5"), ("--alpha", "1e-6"), ("--max-factor", "0")])
def test_flags_the_logprob_zoo_does_not_use_are_refused(flag, value, capsys):
    """Review 2026-12-03: `bench detect --logprob --alpha 1.5` (or --max-factor 0) printed its table and exited 0: the
    logprob cell is deterministic (no alpha) and the stream runs until the wrong values appear (no max factor), so
    the flag was silently ignored.  Now a usage error naming it."""
    from verifier.cli import main
    from verifier.errors import EXIT_USAGE

    assert main(["bench", "detect", "--logprob", flag, value]) == EXIT_USAGE
    out = capsys.readouterr()
    assert f"{flag}=" in out.err and "|" not in out.out, out.err
