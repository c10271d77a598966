"""Decoder stats of the wrong shape are invalid output (exit 3), never audited as "not reported".

Regression for breakit item 7: a decoder declaring ``acceptance = "canonical"`` dodged the check by
reporting ``first_round_accepted`` of length 3 for 200-row chunks (before: NOT TESTED, PASS, exit 0).
"""

import json

import numpy as np
import pytest

from verifier.cli import main
from verifier.errors import DecoderOutputError
from verifier.validation import check_decoder_stats

from .conftest import suite_text


def test_first_round_accepted_must_have_one_entry_per_row():
    with pytest.raises(DecoderOutputError, match=r"first_round_accepted of shape \(3,\); allowed: shape \(5,\)"):
        check_decoder_stats(np.zeros(3, np.int64), None, num_draft_tokens=2, num_samples=5)
    with pytest.raises(DecoderOutputError, match=r"shape \(5, 1\)"):
        check_decoder_stats(np.zeros((5, 1), np.int64), None, num_draft_tokens=2, num_samples=5)
    fra, counts = check_decoder_stats(np.zeros(5, np.int64), [1, 2, 0], num_draft_tokens=2, num_samples=5)
    assert fra.shape == (5,) and counts.tolist() == [1, 2, 0]


def test_accepted_counts_must_be_1d_integers():
    with pytest.raises(DecoderOutputError, match=r"accepted_counts of shape \(2, 2\); allowed: a 1-D array"):
        check_decoder_stats(None, np.zeros((2, 2), np.int64), num_draft_tokens=2)
    with pytest.raises(DecoderOutputError, match="accepted_counts"):
        check_decoder_stats(None, np.array(["a", "b"]), num_draft_tokens=2)


def test_run_with_wrong_length_first_round_accepted_exits_3(write_suite, tmp_path):
    decoder = """
[[decoders]]
name = "short-stats"
decoder = "tests.runner.plugins:table_sampler"
expect = "pass"
acceptance = "canonical"
num_draft_tokens = [1]
tests = ["gof", "accepted"]
options = { report_accepted = true, num_draft_tokens = 1, stats_rows = 3 }
"""
    suite = write_suite(suite_text(decoder))
    run_dir = tmp_path / "run"
    assert main(["run", str(suite), "--run-dir", str(run_dir), "--no-progress"]) == 3
    report = json.loads((run_dir / "report.json").read_text())
    assert "shape (3,); allowed: shape (200,)" in json.dumps(report)
