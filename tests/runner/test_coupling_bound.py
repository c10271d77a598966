"""Issue 28 item 2: "ACCEPTANCE ABOVE THE COUPLING BOUND" carries a bias verdict's error control.

Before: each sample set was called implausible when its own two-sided 99% Clopper-Pearson lower bound
of P(draft 1 accepted) exceeded ``sum min(p, q)``, over the 30 sets of a ci run with no multiplicity
control, and the default ci run accused the project's reference decoder (``reference | ctx01 |
T=0.7,top_k=2``: 881 of 2,500, 0.352, bound 0.325; the canonical rule attains the bound exactly, so
a lossless decoder sits *at* it and each set fires ~0.5% of the time).  Now: one-sided exact binomial
test per set, Holm over every set of the run at the suite's alpha times ``ACCUSATION_ALPHA_SHARE`` (1%: an
accusation must essentially never hit a correct decoder; :func:`verifier.runner.acceptance.coupling_bound_check`).

Data: the position-1 counts of every set of ``specverify run suites/ci.toml`` (seed 20261129, session of
2026-12-02, report.json ``decoders[].acceptance[].positions[0]``); the bounds are the exact enumerator's
(``verifier.runner.expected.accepted_count_law``: 0.7 at T = 1, 0.32525 at T = 0.7/top_k = 2 on trigram3,
0.50659 on the shipped pair).  Everything here is deterministic (no sampling).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from verifier.runner.acceptance import ACCUSATION_ALPHA_SHARE, acceptance_audit, coupling_bound_check, holm_reject

ALPHA = 1e-3  # suites/ci.toml [stats] alpha
B1, B07, BSH = 0.7, 0.3252493950326001, 0.506592698952856
CI_RUN = [  # (set id, accepted at position 1, first rounds, bound)
    ("reference_t1", 1720, 2500, B1), ("reference_t07k2", 881, 2500, B07),
    ("fresh_target_match_t1", 763, 2500, B1), ("fresh_target_match_t07k2", 551, 2500, B07),
    ("block_verification_t1", 1742, 2500, B1), ("block_verification_t07k2", 799, 2500, B07),
    ("full_p_fallback_t1", 1767, 2500, B1), ("full_p_fallback_t07k2", 816, 2500, B07),
    ("greedy_draft_softmax_q_t1", 990, 2500, B1), ("greedy_draft_softmax_q_t07k2", 0, 2500, B07),
    ("draft_raw_q_t1", 1809, 2500, B1), ("draft_raw_q_t07k2", 866, 2500, B07),
    ("target_unprocessed_t1", 1786, 2500, B1), ("target_unprocessed_t07k2", 1296, 2500, B07),
    ("bonus_wrong_position_t1", 1767, 2500, B1), ("bonus_wrong_position_t07k2", 839, 2500, B07),
    ("draft_suffix_kept_t1", 1748, 2500, B1), ("draft_suffix_kept_t07k2", 808, 2500, B07),
    ("kv_not_rolled_back_t1", 1732, 2500, B1), ("kv_not_rolled_back_t07k2", 833, 2500, B07),
    ("greedy_acceptance_t1", 750, 2500, B1), ("greedy_acceptance_t07k2", 823, 2500, B07),
    ("deterministic_acceptance_t1", 1317, 2500, B1), ("deterministic_acceptance_t07k2", 849, 2500, B07),
    ("batch_cross_talk_t1", 1500, 2500, B1), ("batch_cross_talk_t07k2", 1500, 2500, B07),
    ("typical_acceptance_t1", 2500, 2500, B1), ("typical_acceptance_t07k2", 775, 2500, B07),
    ("reference_shipped", 1509, 3000, BSH), ("kv_not_rolled_back_shipped", 1517, 3000, BSH),
]
FABRICATED = {"target_unprocessed_t07k2", "batch_cross_talk_t07k2", "typical_acceptance_t1"}  # 0.52, 0.60, 1.0 vs bound


def _audit(set_id, x, n, bound):
    law = np.array([1 - bound, bound / 2, bound / 2])  # position-1 canonical acceptance = bound
    rows = np.repeat([0, 1], [n - x, x])
    return acceptance_audit(set_id, set_id, set_id.rsplit("_", 1)[0], 2, rows, None, law).to_dict()


def test_the_ci_run_no_longer_accuses_the_reference_but_still_flags_fabricated_acceptance():
    audits = [_audit(*row) for row in CI_RUN]
    ref = next(a for a in audits if a["set_id"] == "reference_t07k2")
    assert ref["positions"][0]["ci"][0] > B07  # the old per-set rule fired here: 99% lower bound 0.328 > 0.325
    res = coupling_bound_check(audits, ALPHA)
    assert res["m"] == 30
    assert not ref["above_bound"] and "COUPLING BOUND" not in ref["note"]
    assert ref["bound_test"]["pvalue"] == pytest.approx(sps.binom.sf(880, 2500, B07))  # 0.0021 > alpha / 27
    assert set(res["rejected"]) == FABRICATED  # a decoder clearly above the bound is still called implausible
    for a in audits:
        assert a["above_bound"] == (a["set_id"] in FABRICATED)
    worst = next(a for a in audits if a["set_id"] == "target_unprocessed_t07k2")
    assert worst["note"].startswith("ACCEPTANCE ABOVE THE COUPLING BOUND") and "Holm over 30 set(s)" in worst["note"]
    low = float(worst["note"].split("lower bound ")[1].split(")")[0])
    assert low > B07  # the interval shown is at Holm's level for that set, and it excludes the bound


def test_a_fabricated_decoder_is_flagged_and_a_lossless_one_at_the_bound_is_not():
    fab = _audit("fab", 1000, 2500, B07)  # 0.40 vs 0.325: z = 8 (p ~ 1e-15)
    fair = _audit("fair", 813, 2500, B07)  # at the bound
    res = coupling_bound_check([fab, fair], ALPHA)
    assert fab["above_bound"] and not fair["above_bound"] and res["rejected"] == ["fab"]
    level = ALPHA * ACCUSATION_ALPHA_SHARE  # the accusation's own, stricter level
    assert fab["bound_test"]["level"] == pytest.approx(level / 2) and fair["bound_test"]["level"] == pytest.approx(level)


def test_holm_reject_matches_the_step_down_definition():
    p = np.array([[0.01, 0.0001, 0.04, np.nan, 0.0002], [0.5, 0.5, 0.5, 0.5, 0.5]])
    rejected, level = holm_reject(p, 0.001)
    # m = 4 tested: sorted 1e-4 <= 0.001/4, 2e-4 <= 0.001/3, 0.01 > 0.001/2 -> stop
    assert rejected[0].tolist() == [False, True, False, False, True]
    assert level[0][1] == pytest.approx(0.001 / 4) and level[0][4] == pytest.approx(0.001 / 3) and np.isnan(level[0][3])
    assert not rejected[1].any()
