"""verifier.runner.acceptance: the efficiency figures and the "far below canonical" rule.

Canonical laws from the exact enumerator (trigram3, k = 2, T = 1: P(0, 1, 2 accepted) =
(3/10, 7/20, 7/20), mean 21/20; ``verifier.exact.accepted_count_law``).  Observed counts are
fixed arrays, so every figure is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.exact import accepted_count_law, standard_tabular_pairs
from verifier.runner.acceptance import FAR_BELOW_FRACTION, acceptance_audit, conformance, coupling_bound_check

PAIR = standard_tabular_pairs()["trigram3"]
LAW = np.array([float(x) for x in accepted_count_law(PAIR.target, PAIR.draft, PAIR.prefix, 2)])


def _rows(counts):
    return np.repeat(np.arange(len(counts)), counts)


def test_canonical_counts_give_canonical_figures_and_no_note():
    assert LAW.tolist() == pytest.approx([0.3, 0.35, 0.35])
    a = acceptance_audit("s", "set", "d", 2, _rows([300, 350, 350]), None, LAW)
    assert a.reported and not a.far_below and "consistent with the canonical" in a.note
    assert a.mean_accepted == pytest.approx(1.05) and a.canonical_mean_accepted == pytest.approx(1.05)
    assert [p["canonical"] for p in a.positions] == pytest.approx([0.7, 0.5])  # sum min(p, q); then 0.35 / 0.7
    assert [p["observed"] for p in a.positions] == pytest.approx([0.7, 0.5])
    assert all(p["ci"][0] < p["observed"] < p["ci"][1] for p in a.positions)
    assert a.passes_ratio == pytest.approx(1.0)


def test_far_below_canonical_is_loud_and_defined_by_the_upper_bound():
    low = acceptance_audit("s", "set", "d", 2, _rows([800, 150, 50]), None, LAW)  # mean 0.25 << 0.5 * 1.05
    assert low.far_below and low.note.startswith("ACCEPTANCE FAR BELOW CANONICAL")
    assert low.mean_accepted_ci[1] < FAR_BELOW_FRACTION * low.canonical_mean_accepted
    assert "about 1.6x more target passes per token" in low.note  # 2.05 / 1.25 = 1.64
    near = acceptance_audit("s", "set", "d", 2, _rows([500, 300, 200]), None, LAW)  # mean 0.7: below, not far
    assert not near.far_below and "below the canonical figure" in near.note


def test_no_stats_is_reported_as_not_reported():
    a = acceptance_audit("s", "set", "d", 2, None, None, LAW)
    assert not a.reported and "not reported" in a.note and a.mean_accepted is None
    assert a.canonical_mean_accepted == pytest.approx(1.05)  # the canonical figure is still shown


def test_conformance_without_cells_is_not_tested():
    res = conformance([], 1e-3, ["the decoder reports no first_round_accepted"])
    assert res["verdict"] == "NOT TESTED" and "no first_round_accepted" in res["reason"]


def test_acceptance_above_the_coupling_bound_is_implausible_never_a_speed_up():
    # every first round accepts both drafts: P(draft 1 accepted) = 1 > sum min(p, q) = 0.7 (exact, trigram3);
    # decided by coupling_bound_check over the run's sets (here a family of two at alpha = 1e-3)
    a = acceptance_audit("s", "set", "d", 2, _rows([0, 0, 1000]), None, LAW).to_dict()
    ok = acceptance_audit("t", "set", "d", 2, _rows([300, 350, 350]), None, LAW).to_dict()
    res = coupling_bound_check([a, ok], 1e-3)
    assert a["above_bound"] and a["note"].startswith("ACCEPTANCE ABOVE THE COUPLING BOUND")
    assert "speed-up is claimed" in a["note"] and "x the canonical tokens" not in a["note"]
    assert not ok["above_bound"] and res["rejected"] == ["s"] and res["m"] == 2
