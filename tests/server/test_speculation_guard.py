"""The no-speculation guard (verifier.runner.speculation) on real DecoderVerdict objects.

A URL audit's chunks carry the server's figures; a PASS needs them to show drafts: none proposed is
UNDERPOWERED "speculation never ran", none observable is UNDERPOWERED "speculation not observable" unless
the user waived it (--speculation-unverified); BIAS stands either way (bias is bias).
"""

from __future__ import annotations

import pytest

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
    assert "per call (engine): 5 of 12 draft tokens accepted" in line
    assert "drafts verified in 7 of 1,500 calls (0.5%); the other 1,493 sampled the target alone" in line
    full = _verdict()
    apply_guard(full, summarize([_engine_meta(30, 12, 10)]))
    assert "drafts verified in" not in describe(full.speculation)


def _with_tv_cell(mde: float) -> DecoderVerdict:
    from verifier.runner.analysis import CellResult

    v = _verdict()
    v.cells = [CellResult("d/p0/s/k=3/joint@1..2", "d", "s", "joint@1..2", "chi2", 1500, 1.0, 0.5, mde=mde)]
    return v


def test_a_pass_whose_drafting_calls_are_too_few_to_bound_is_underpowered():
    """Breaker finding 1: with 1 of 1,500 calls drafting, the rows are 0.07% from the speculative path; a PASS whose TV
    cells see 0.05 bounds that path's law only by 0.05 / 0.00067 > 1: UNDERPOWERED, saying why.  All calls drafting,
    or a share large enough for the target TV, keep the PASS; BIAS stands."""
    few = _with_tv_cell(0.05)
    apply_guard(few, summarize([_engine_meta(2, 1, 1, requests=1500)]), target_tv=0.1)
    assert few.verdict == "UNDERPOWERED" and not few.expectation_met
    assert few.reason.startswith("speculation ran in only 1 of 1,500 calls (0.07%)") and "(no bound)" in few.reason
    most = _with_tv_cell(0.05)
    apply_guard(most, summarize([_engine_meta(1400, 700, 1400, requests=1500)]), target_tv=0.1)
    assert most.verdict == "PASS"  # 0.05 / 0.933 = 0.054 <= 0.1
    half = _with_tv_cell(0.05)
    apply_guard(half, summarize([_engine_meta(500, 250, 500, requests=1500)]), target_tv=0.1)
    assert half.verdict == "UNDERPOWERED" and "bounds their own law only by 0.15" in half.reason
    bias = _with_tv_cell(0.05)
    bias.verdict = "BIAS DETECTED"
    apply_guard(bias, summarize([_engine_meta(2, 1, 1, requests=1500)]), target_tv=0.1)
    assert bias.verdict == "BIAS DETECTED"


@pytest.mark.parametrize("bad", [{"requests": "abc"}, {"requests": None, "calls_with_drafts": 1},
                                 {"per_request_draft_tokens": "3"}, {"per_request_draft_tokens": -1},
                                 {"per_request_draft_tokens": float("nan")}, {"per_request_draft_tokens": 0.5},
                                 {"per_request_accepted_tokens": 50}, {"calls_with_drafts": 11},
                                 {"calls_with_drafts": 5, "per_request_draft_tokens": 0, "per_request_accepted_tokens": 0},
                                 {"calls_with_drafts": -3}, {"requests": -10}, {"counters": [1]}])
def test_malformed_or_inconsistent_figures_are_left_out_and_never_verify(bad):
    """Breaker findings 5-6: a hand-edited shard's figures (strings, NaN, negatives, fractions, accepted > drafted,
    calls that drafted > calls, calls that drafted without draft tokens) crashed the report (exit 3) or read as
    'never ran' beside drafting chunks.  Such an entry is left out and counted; with no readable entry nothing is
    verified, so a PASS is not shown to have speculated (UNDERPOWERED, 'not observable')."""
    entry = {**_engine_meta(12, 5, 7), **bad}
    alone = summarize([entry])
    assert alone["unreadable_chunks"] == 1 and alone["chunks"] == 0
    v = _verdict()
    apply_guard(v, alone)
    assert v.verdict == "UNDERPOWERED" and v.speculation["verified"] is None
    mixed = summarize([entry, _engine_meta(0, 0, 0)])  # the readable chunk drafted nothing: not 'never ran' overall
    w = _verdict()
    apply_guard(w, mixed)
    assert w.speculation["verified"] is None and "malformed figures, left out" in describe(w.speculation)


def test_chunks_without_figures_make_the_totals_partial():
    """Breaker finding 2: chunks 1-5 without an entry, chunk 0 with 2 drafts: the summary says the figures cover one
    chunk only, and a chunk of 0 drafts beside chunks without figures is no 'never ran'."""
    s = summarize([_engine_meta(2, 1, 1, requests=250), None, None, None, None, None])
    assert s["chunks_without_figures"] == 5
    v = _verdict()
    apply_guard(v, s, target_tv=0.1)
    assert "figures from 1 chunk(s) only; 5 chunk(s) without figures" in describe(v.speculation)
    none = summarize([_engine_meta(0, 0, 0), None])
    u = _verdict()
    apply_guard(u, none)
    assert u.verdict == "PASS" and u.speculation["verified"] is None
