"""``specverify bench scale-power`` (issue 17 part 2): detection rate per default cell, on a tiny vocabulary.

The 32k figures are in reports/benchmarks.md; here the code path runs on V = 64 (exact laws) with one
sample set per decoder: the runner's cells and verdict, counted per cell.  The temperature mismatch
(``target_unprocessed`` at T = 0.8) moves the first-token law by TV ~0.1 on this peaked pair, which
n = 300 sees at the gate's alpha 1e-3; the reference must not be flagged (seeded: deterministic).
"""

from __future__ import annotations

import pytest

from verifier.bench.scale_power import CELLS, power_rows, render_markdown
from verifier.errors import InvalidArgumentError


def test_power_rows_count_each_cell_and_the_verdict(tmp_path):
    res = power_rows(64, [300], seeds=1, decoders=("reference", "target_unprocessed"), work_dir=tmp_path)
    ref, mut = res["rows"]
    assert (ref["decoder"], mut["decoder"]) == ("reference", "target_unprocessed")
    assert set(ref["detected"]) == set(CELLS) and ref["seeds"] == mut["seeds"] == 1
    assert ref["verdict_bias"] == 0 and sum(ref["detected"].values()) == 0
    assert mut["verdict_bias"] == 1
    assert res["target"]["pooling"] == "exact" and 0 < res["target"]["entropy_1_nats"] < 4.2  # log 64 = 4.16
    assert "| target_unprocessed | 300 |" in render_markdown(res)


def test_unknown_decoder_is_refused():
    with pytest.raises(InvalidArgumentError, match="decoders"):
        power_rows(64, [10], decoders=("no_such_decoder",))
