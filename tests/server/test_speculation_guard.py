"""The no-speculation guard (verifier.runner.speculation) on real DecoderVerdict objects.

A URL audit's chunks carry the server's figures; a PASS needs them to show drafts: none proposed is
UNDERPOWERED "speculation never ran", none observable is UNDERPOWERED "speculation not observable" unless
the user waived it (--speculation-unverified); BIAS stands either way (bias is bias).
"""

from __future__ import annotations

from verifier.runner.speculation import apply_guard, describe, summarize
from verifier.runner.verdict import DecoderVerdict


def _verdict(v: str = "PASS") -> DecoderVerdict:
    return DecoderVerdict("srv", "pass", v, v == "PASS", "Holm", reason="no cell rejected")


def _meta(counters=None, per_request=None, required=True):
    return {"requests": 10, "requests_sent": 10, "required": required,
            "counters": counters or {"drafts": None, "draft_tokens": None, "accepted_tokens": None, "source": "none"},
            "per_request_draft_tokens": per_request, "per_request_accepted_tokens": 0 if per_request is not None else None}


def test_drafts_seen_keep_the_pass():
    v = _verdict()
    apply_guard(v, summarize([_meta({"drafts": 5, "draft_tokens": 10, "accepted_tokens": 4, "source": "/metrics"})]))
    assert v.verdict == "PASS" and v.speculation["verified"] is True


def test_no_draft_proposed_is_underpowered():
    v = _verdict()
    apply_guard(v, summarize([_meta({"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "source": "/metrics"})]))
    assert v.verdict == "UNDERPOWERED" and v.reason.startswith("speculation never ran") and not v.expectation_met


def test_nothing_observable_is_underpowered_unless_waived():
    v = _verdict()
    apply_guard(v, summarize([_meta()]))
    assert v.verdict == "UNDERPOWERED" and v.reason.startswith("speculation not observable")
    waived = _verdict()
    apply_guard(waived, summarize([_meta(required=False)]))
    assert waived.verdict == "PASS" and waived.speculation["verified"] is None
    assert "not observable" in describe(waived.speculation)


def test_bias_stands_without_speculation():
    v = _verdict("BIAS DETECTED")
    apply_guard(v, summarize([_meta({"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "source": "/metrics"})]))
    assert v.verdict == "BIAS DETECTED"


def _engine_meta(draft_tokens: int, accepted: int, calls_with_drafts: int, requests: int = 10):
    """An engine's per-call figures, as the OpenVINO GenAI worker records them (no server counters)."""
    return {"requests": requests, "requests_sent": requests, "calls_with_drafts": calls_with_drafts,
            "per_request_draft_tokens": draft_tokens, "per_request_accepted_tokens": accepted,
            "per_request_source": "the pipeline's main-model step sizes per call"}


def test_an_engine_that_verified_no_draft_is_underpowered_naming_its_source():
    """OpenVINO GenAI with prefix caching on whose first call failed (or k = 1 with two new tokens): 0 draft tokens
    over every call; the reason names the engine's figure, not a server's timings."""
    v = _verdict()
    apply_guard(v, summarize([_engine_meta(0, 0, 0), _engine_meta(0, 0, 0)]))
    assert v.verdict == "UNDERPOWERED" and not v.expectation_met
    assert v.reason.startswith("speculation never ran: 0 draft tokens verified over 20 generate calls (the pipeline's")
    assert "SPECULATION NEVER RAN" in describe(v.speculation)


def test_calls_that_drafted_are_counted_beside_the_total():
    """7 of 1,500 calls verified drafts (the pipeline stopped at its first failure): the PASS stands (the output law is
    what it certifies) and the description says how few calls speculated; all calls drafting adds no such clause."""
    v = _verdict()
    apply_guard(v, summarize([_engine_meta(12, 5, 7, requests=750), _engine_meta(0, 0, 0, requests=750)]))
    assert v.verdict == "PASS" and v.speculation["verified"] is True and v.speculation["calls_with_drafts"] == 7
    line = describe(v.speculation)
    assert "per request: 5 of 12 draft tokens accepted" in line
    assert "drafts verified in 7 of 1,500 calls (0.5%); the other 1,493 sampled the target alone" in line
    full = _verdict()
    apply_guard(full, summarize([_engine_meta(30, 12, 10)]))
    assert "drafts verified in" not in describe(full.speculation)
