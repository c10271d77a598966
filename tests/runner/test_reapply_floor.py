"""A recomputed report keeps the run's measured numeric floor (verifier.engines.floor.reapply_floor): found by an
adversarial review -- a malformed stored floor crashed `report --recompute` with a traceback, or (NaN, infinite,
boolean target TV) silently kept a PASS; a floor that was not measured lost its statement."""

import math

import pytest

from verifier.engines.floor import FLOOR_KEY, reapply_floor


def _report():
    return {"verdict": "PASS", "exit_code": 0, "summary": "",
            "decoders": [{"decoder": "d", "verdict": "PASS", "reason": "no cell rejected", "expectation_met": True}]}


def test_a_floor_above_the_target_tv_keeps_a_recomputed_pass_underpowered():
    report = _report()
    code = reapply_floor(report, {FLOOR_KEY: {"max_tv": 0.08, "target_tv": 0.05, "source": "server", "rows": []}})
    assert code == 4 and report["decoders"][0]["verdict"] == "UNDERPOWERED" and report[FLOOR_KEY]["above_target"]


def test_a_floor_below_the_target_tv_leaves_the_pass():
    report = _report()
    assert reapply_floor(report, {FLOOR_KEY: {"max_tv": 1e-6, "target_tv": 0.03, "source": "engine"}}) == 0
    assert report["decoders"][0]["verdict"] == "PASS" and report[FLOOR_KEY]["max_tv"] == 1e-6


@pytest.mark.parametrize("floor", [
    {"max_tv": 0.05, "target_tv": 0.03},  # no source
    {"max_tv": 0.05, "target_tv": "abc", "source": "e"},
    {"max_tv": 0.05, "target_tv": [1], "source": "e"},
    {"max_tv": "0.05", "target_tv": 0.03, "source": "e"},
    {"max_tv": 0.05, "target_tv": math.nan, "source": "e"},
    {"max_tv": 0.05, "target_tv": math.inf, "source": "e"},
    {"max_tv": 0.05, "target_tv": True, "source": "e"},
    {"max_tv": math.nan, "target_tv": 0.03, "source": "e"},
    {"max_tv": -1.0, "target_tv": 0.03, "source": "e"},
])
def test_a_malformed_stored_floor_is_never_believed_and_never_a_traceback(floor):
    report = _report()
    assert reapply_floor(report, {FLOOR_KEY: floor}) == 4
    assert report["decoders"][0]["verdict"] == "UNDERPOWERED" and "malformed" in report[FLOOR_KEY]["source"]


def test_a_floor_not_measured_keeps_its_statement_and_no_stored_floor_changes_nothing():
    report = _report()
    note = {"max_tv": None, "rows": [], "source": "not measured: the server did not answer"}
    assert reapply_floor(report, {FLOOR_KEY: note}) == 0 and report[FLOOR_KEY] == note
    for previous in (None, {}, {FLOOR_KEY: "x"}, {FLOOR_KEY: [1]}, []):
        report = _report()
        assert reapply_floor(report, previous) == 0 and FLOOR_KEY not in report
