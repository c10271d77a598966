"""``specverify bench detect --streams`` (``verifier.bench.detect_streams``): the randomness zoo against its oracle.

Oracle checks.  ``shared_stream`` on bigram4_eos: two identical pairs have null probability (sum_x P(x)^2)^2 =
0.0786^2 = 0.006 <= alpha = 0.05 (one pair: 0.079 > alpha) and probability 1 under the mutant, so the
Neyman--Pearson n is 2 pairs = 4 rows (exact).  ``serial_stream``'s likelihood ratio is a ratio of likelihoods: under independent rows its expectation is
<= 1, so ``LR >= 1 / alpha`` holds on at most an alpha share of null streams (Markov) -- 300 null streams of 40 rows
(seeds 0..299) cross 1/0.01 at most binom.ppf(0.999, 300, 0.01) = 9 times.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from verifier.bench import detect_streams as ds
from verifier.cli import main
from verifier.errors import InvalidArgumentError


def test_serial_oracle_is_a_level_alpha_test_under_independent_rows():
    target = ds._Target("bigram4_eos")
    law = {o: float(p) for o, p in target.law.items()}
    crossed = 0
    for s in range(300):
        rows, lo, hi = target.rows(ds._uniforms("independent", 40, np.random.default_rng([5, s])))
        log_lr = ds._serial_log_lr(lo, hi, np.log([law[r] for r in rows]))
        crossed += bool(log_lr[-1] >= math.log(100))  # one fixed-n test at n = 40 per stream
    assert crossed <= stats.binom.ppf(0.999, 300, 0.01), crossed


def test_stream_rows_and_command(capsys):
    rows = ds.detect_stream_rows(["shared_stream"], ["bigram4_eos"], seeds=4, rows=400, alpha=0.05)  # 0.05: fewer null draws
    (row,) = rows
    assert row.oracle_n == 4 and row.oracle_method.startswith("support") and row.fixed_median <= 10
    assert row.cell_medians["collision@1..3"] <= 10 and set(row.cell_medians) == set(ds.CELLS)
    code = main(["bench", "detect", "--streams", "--rule", "serial_stream", "--case", "trigram3", "--seeds", "3",
                 "--alpha", "0.05"])
    out = capsys.readouterr().out
    assert code == 0 and "| serial_stream | trigram3 |" in out and "LR >= 1/alpha" in out


def test_constants_match_the_zoo():
    from verifier.decoders.stream_mutants import STREAM_DECODER_REGISTRY, WEYL_STEP

    assert ds.STREAM_MUTANTS == tuple(STREAM_DECODER_REGISTRY) and ds.WEYL_STEP == WEYL_STEP


def test_stream_names_and_rows_are_checked():
    with pytest.raises(InvalidArgumentError, match="mutants"):
        ds.detect_stream_rows(["reference"])
    with pytest.raises(InvalidArgumentError, match="rows"):
        ds.detect_stream_rows(rows=100)
