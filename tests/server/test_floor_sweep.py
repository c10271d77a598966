"""The whole-row rebuild of :mod:`verifier.server.floor_sweep` on rows written the way mlx_lm writes them.

mlx_lm reports ``logits - logsumexp(logits)`` after ``logit_bias``, top ``cap`` by value (float32).  The rows here
are computed that way from a seeded random law over 384 ids (seed 7), so the rebuild must return that law to float32
precision; a plain row from another law (a request served from another context) must be refused, not averaged in.
The real server is exercised by tests/server/test_mlx_server.py (full tier).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifier.server.floor_sweep import CONSISTENCY_TOL, SWEEP_BIAS, rebuild_row, sweep_groups, sweep_request


def _top_row(logits: np.ndarray, bias: dict[int, float], cap: int) -> dict[int, float]:
    biased = logits.astype(np.float32).copy()
    for t, b in bias.items():
        biased[t] += np.float32(b)
    logp = biased - np.logaddexp.reduce(biased.astype(np.float64)).astype(np.float32)
    top = np.argpartition(-logp, cap - 1)[:cap]
    return {int(t): float(logp[t]) for t in top}


def _sweep(logits, cap=11):
    plain = _top_row(logits, {}, cap)
    anchor = max(plain, key=plain.get)
    groups = sweep_groups(logits.size, anchor, cap)
    rows = [_top_row(logits, {t: SWEEP_BIAS for t in (anchor, *g)}, cap) for g in groups]
    return plain, rows, groups, anchor


def test_rebuild_returns_the_whole_law_to_float32_precision():
    logits = np.random.default_rng(7).normal(0.0, 3.0, 384)
    plain, rows, groups, anchor = _sweep(logits)
    assert len(groups) == 39 and sum(map(len, groups)) == 383
    row, info = rebuild_row(plain, rows, groups, anchor)
    assert row is not None, info
    got = np.exp([row[t] for t in range(384)])
    want = np.exp(logits - np.logaddexp.reduce(logits))
    assert 0.5 * np.abs(got - want).sum() < 1e-5 and info["missing"] == 0 and info["unseen"] < 1e-5


def test_rebuild_refuses_a_plain_row_from_another_law():
    rng = np.random.default_rng(7)
    logits = rng.normal(0.0, 3.0, 384)
    _, rows, groups, anchor = _sweep(logits)
    other = logits.copy()
    other[anchor] += 0.5  # the plain request saw another context: its anchor prob moves by far more than the tolerance
    row, info = rebuild_row(_top_row(other, {}, 11), rows, groups, anchor)
    assert row is None and info["deviation"] > CONSISTENCY_TOL and "did not see one law" in info["why"]


def test_ids_far_below_the_bias_are_set_to_zero_and_counted():
    logits = np.zeros(30)
    logits[5] = -80.0  # e^-80 of the others: a bias of 40 cannot lift it into its group's top set
    plain, rows, groups, anchor = _sweep(logits, cap=4)
    row, info = rebuild_row(plain, rows, groups, anchor)
    assert row is not None and row[5] == -math.inf and info["missing"] == 1


def test_sweep_request_biases_the_anchor_and_its_group():
    body = sweep_request({"prompt": "def ", "max_tokens": 1, "top_logprobs": 3}, [4, 9], 2, 11)
    assert body["logit_bias"] == {"2": SWEEP_BIAS, "4": SWEEP_BIAS, "9": SWEEP_BIAS} and body["top_logprobs"] == 11
    with pytest.raises(Exception, match="cap"):
        sweep_groups(10, 0, 1)


def test_a_server_that_ignores_logit_bias_is_refused_not_read_as_a_point_mass():
    """Replies that are the plain top row every time (the bias ignored) leave most ids out of their groups' rows: the
    sweep would set them to 0 and hold only the plain row's ids, whose plain probs then say a third of the mass is
    outside the sweep -- refused (the floor falls back to the bounded plain row), not read as a law."""
    logits = np.random.default_rng(8).normal(0.0, 3.0, 384)
    plain = _top_row(logits, {}, 11)
    anchor = max(plain, key=plain.get)
    groups = sweep_groups(384, anchor, 11)
    row, info = rebuild_row(plain, [plain] * len(groups), groups, anchor)
    assert row is None and info["unseen"] > 0.1 and info["missing"] > 300 and "did not see one law" in info["why"]


@pytest.mark.parametrize("reply", ["anchor at -inf", "every id at -inf"])
def test_a_biased_reply_whose_anchor_is_minus_inf_is_refused_not_read_as_nan(reply):
    """Every swept value is relative to the anchor's: at -inf (a reply the dialect accepts: -inf is a logprob) the
    rebuilt row was NaN, passed the consistency check (NaN > tol is False) and the position was then dropped as
    "probs sum to nan" instead of falling back to the bounded plain row.  It must be refused with a reason."""
    logits = np.random.default_rng(7).normal(0.0, 3.0, 40)
    plain, rows, groups, anchor = _sweep(logits, cap=4)
    rows = [dict(r) for r in rows]
    rows[0] = {t: -math.inf for t in rows[0]} if reply == "every id at -inf" else {**rows[0], anchor: -math.inf}
    row, info = rebuild_row(plain, rows, groups, anchor)
    assert row is None and f"anchor id {anchor} has logprob -inf" in info["why"]


def test_a_sweep_too_large_for_the_budget_is_not_sent_and_says_why():
    """V = 384 at cap 11 over 8 positions is 312 requests (sent); a 150,000-id vocabulary would be 120,000 one-token
    requests -- above MAX_SWEEP_REQUESTS the floor keeps its bounded plain rows and each row names the count."""
    from verifier.server.floor_sweep import MAX_SWEEP_REQUESTS, sweep_budget_note

    assert sweep_budget_note(384, 11, 8) == ""
    note = sweep_budget_note(150_000, 11, 8)
    assert note.startswith("120,000 sweep requests (8 positions x 15,000)") and f"{MAX_SWEEP_REQUESTS:,}" in note
    assert "--floor-positions" in note
