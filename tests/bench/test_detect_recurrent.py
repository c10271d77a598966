"""``bench detect --recurrent`` (``verifier.bench.detect_recurrent``; issue 29, bug kind 8).

The oracle's numbers come from the exact laws (``recurrent_law`` vs ``recurrent_target_law`` on parity3, 4 tokens,
k = 2): state_not_rolled_back (every round drafts) is TV 0.0944 from the target, NP oracle median 62 rows, 269 at
power 0.99 (``np_oracle_samples``, alpha 0.01).  The measured row (5 seeds, full tier) must need more rows than the
oracle -- a chi-square battery cannot beat the Neyman-Pearson test.
"""

from __future__ import annotations

import pytest

from verifier.bench.detect_recurrent import RECURRENT_SCENARIOS, detect_recurrent_rows, render_recurrent_markdown
from verifier.cli import main
from verifier.errors import InvalidArgumentError


@pytest.mark.full  # ~1-3 min of chi-squares on a grid under load
def test_row_oracle_and_markdown():
    (row,) = detect_recurrent_rows(["state_not_rolled_back"], seeds=5)
    assert round(row.tv, 4) == 0.0944 and (row.oracle_median, row.oracle_n) == (62, 269)
    assert row.median >= row.oracle_median
    assert "| state_not_rolled_back | 0 | 0.0944 | 62 |" in render_recurrent_markdown([row])


def test_bad_arguments_are_clear_errors(capsys):
    with pytest.raises(InvalidArgumentError, match="scenarios"):
        detect_recurrent_rows(["kv_not_rolled_back"])
    with pytest.raises(InvalidArgumentError, match="seeds"):
        detect_recurrent_rows(seeds=0)
    assert {m for m, _, _ in RECURRENT_SCENARIOS.values()} == {"state_not_rolled_back", "state_checkpoint_stale"}
    assert main(["bench", "detect", "--recurrent", "--stop"]) == 2
    assert "--recurrent" in capsys.readouterr().err
