"""``bench detect --batch`` (``verifier.bench.detect_batch``; issue 29, bug kind 1): rows to detect per batch level.

At batch 1 and 2 ``corrupt_batch_gt2``'s rows have the target's law exactly (``verifier.exact.batch_level_law``), so
no test detects it ("never"); at batch 16 on bigram4_eos its first token is TV 21/160 = 0.1313 and its first two
tokens TV 0.1487 from the target's, and the Neyman-Pearson oracle needs 41 rows (median) / 159 rows (power 0.99) at
alpha 0.01 (saddlepoint); the battery (gof@1 + joint@1..2 at alpha / 16) cannot need fewer rows than the oracle.

``prompt_length_leak`` is the reference at the plain levels ("never"); at the mixed-prompts level on bigram4_eos
(audited prompt (1,), slot 0's filler (2, 0): its rows continue (1, 0)) its first token is TV 2/5 from the target's
(exact, ``verifier.exact.mixed_prompts_level_law``), every audited row corrupted, and the battery detects it within
the oracle's grid.
"""

from __future__ import annotations

import math

import pytest

from verifier.bench.detect_batch import BATCH_MUTANTS, detect_batch_rows, render_batch_markdown
from verifier.cli import main
from verifier.errors import InvalidArgumentError


def test_clean_levels_are_never_detectable():
    rows = detect_batch_rows(["corrupt_batch_gt2"], cases=["bigram4_eos"], levels=[1, 2], seeds=3)
    assert [(r.batch_rows, r.corrupted_share, r.tv_joint) for r in rows] == [(1, "0", 0.0), (2, "0", 0.0)]
    assert all(math.isinf(r.oracle_n) and math.isinf(r.median) for r in rows)
    assert "| corrupt_batch_gt2 | bigram4_eos | 2 | 0 | 0.0000 | 0.0000 | never |" in render_batch_markdown(rows)


@pytest.mark.full  # ~35-60 s of chi-squares on a grid; test_clean_levels_are_never_detectable runs the module
def test_batch_16_row_against_the_oracle():
    (row,) = detect_batch_rows(["corrupt_batch_gt2"], cases=["bigram4_eos"], levels=[16], seeds=5)
    assert (row.corrupted_share, round(row.tv_first, 4), round(row.tv_joint, 4)) == ("7/8", 0.1313, 0.1487)
    assert (row.oracle_median, row.oracle_n) == (41, 159)
    assert row.oracle_median <= row.median <= row.max_n


def test_prompt_length_leak_is_clean_plain_and_detected_at_the_mixed_prompts_level():
    rows = detect_batch_rows(["prompt_length_leak"], cases=["bigram4_eos"], levels=[1, 4], seeds=5)
    assert [(r.level or r.batch_rows, r.corrupted_share) for r in rows] == [(1, "0"), (4, "0"), ("4 mixed prompts", "1")]
    assert all(math.isinf(r.median) for r in rows[:2])
    mixed = rows[2]
    assert round(mixed.tv_first, 4) == 0.4 and mixed.oracle_median <= mixed.median <= mixed.max_n
    assert "| prompt_length_leak | bigram4_eos | 4 mixed prompts | 1 | 0.4000 |" in render_batch_markdown(rows)


def test_bad_arguments_are_clear_errors(capsys):
    with pytest.raises(InvalidArgumentError, match="mutants"):
        detect_batch_rows(["shared_stream"])
    with pytest.raises(InvalidArgumentError, match="cases"):
        detect_batch_rows(None, ["unigram3"])
    with pytest.raises(InvalidArgumentError, match="levels"):
        detect_batch_rows(levels=[0])
    assert BATCH_MUTANTS == ("corrupt_batch_gt2", "prompt_length_leak")
    assert main(["bench", "detect", "--batch", "--stop"]) == 2
    assert "--batch" in capsys.readouterr().err
