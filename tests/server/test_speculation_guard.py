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
