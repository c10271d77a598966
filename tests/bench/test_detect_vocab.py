"""``bench detect --vocab`` (``verifier.bench.detect_vocab``; issue 29, bug kind 7): a few seeds of one row.

q_permuted on trigram3 (identity map, reversed order, k = 2, 3 tokens): exact TV 0.4954 to the target; the NP oracle
needs a handful of rows at alpha 0.01, power 0.99; 3 seeds check the row's shape (rows drawn from the exact law, the
battery's fixed-n median is finite and >= 1).  q_dtype_mismatch's oracle n (TV 3e-4) is beyond MAX_SIMULATED: an
oracle-only row, never simulated.  Bad names are InvalidArgumentError naming the argument.
"""

from __future__ import annotations

import math

import pytest

from verifier.bench.detect import _measure, batteries
from verifier.bench.detect_vocab import MAX_SIMULATED, detect_vocab_rows, render_oracle_only
from verifier.errors import InvalidArgumentError


@pytest.mark.full  # ~10-25 s under load (battery streams, the dtype row's saddlepoint oracle); quick: the test below
def test_q_permuted_row_and_the_oracle_only_dtype_row():
    rows, oracle_only = detect_vocab_rows(["q_permuted", "q_dtype_mismatch"], ["trigram3"], measure=_measure,
                                          batteries=batteries, seeds=3)
    assert {r.battery for r in rows} == {"default", "window"} and all(r.rule == "q_permuted" for r in rows)
    assert all(abs(r.tv - 0.4954) < 1e-9 and r.oracle_n <= 20 and math.isfinite(r.fixed_median) for r in rows)
    (dtype,) = oracle_only
    assert dtype.rule == "q_dtype_mismatch" and dtype.oracle_n > MAX_SIMULATED and 0 < dtype.tv < 1e-3
    assert "q_dtype_mismatch" in render_oracle_only(oracle_only)


def test_bad_names_are_refused():
    with pytest.raises(InvalidArgumentError, match="rules"):
        detect_vocab_rows(["nope"], None, measure=_measure, batteries=batteries, seeds=1)
    with pytest.raises(InvalidArgumentError, match="cases"):
        detect_vocab_rows(None, ["unigram3"], measure=_measure, batteries=batteries, seeds=1)
