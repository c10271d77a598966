"""report.json keeps per-session figures in its volatile ``run`` section only.

``requests_sent_session`` (the requests the process that computed the report sent itself) differs between two
reports of the same samples -- the first run and a resume that reads every reply back from the journal -- so it
lives in ``run.requests_sent_session`` (``{decoder: n}``), never in ``decoders[].speculation``; before the fix it
sat in ``decoders[].speculation``, so such reports differed outside ``run``.  A report written before the move is
still read (the line printed beside the verdict).  The end-to-end check with a real server and a real resume is in
tests/server/test_url_audit.py (``test_url_audit_run_folder_names_audit_resume...``).
"""

from __future__ import annotations

from verifier.cli._summary import acceptance_lines
from verifier.runner import speculation
from verifier.runner.verdict import DecoderVerdict, session_figures

ENTRY = {"requests": 20, "requests_sent": 20, "required": True, "per_request_draft_tokens": 40,
         "per_request_accepted_tokens": 10, "counters": {}}


def _verdict(session: str) -> DecoderVerdict:
    v = DecoderVerdict("c4", "pass", "PASS", True, "m")
    metas = [dict(ENTRY, session="first"), dict(ENTRY, session="first")]
    speculation.apply_guard(v, speculation.summarize(metas, session=session))
    return v


def test_two_sessions_of_the_same_samples_differ_only_in_run():
    sampled, resumed = _verdict("first"), _verdict("later")
    assert sampled.to_dict() == resumed.to_dict()  # the samples' figures: the same
    assert "requests_sent_session" not in sampled.to_dict()["speculation"]
    assert session_figures([sampled]) == {"requests_sent_session": {"c4": 40}}
    assert session_figures([resumed]) == {"requests_sent_session": {"c4": 0}}


def test_the_line_beside_the_verdict_reads_run_and_old_reports():
    resumed = _verdict("later")
    decoder, run = resumed.to_dict(), session_figures([resumed])
    (line,) = acceptance_lines(decoder, run)
    assert "over 40 requests (0 sent in this session, 40 from the response journal" in line
    old = dict(decoder, speculation=dict(decoder["speculation"], requests_sent_session=0))  # before the move
    (line,) = acceptance_lines(old, {"run_id": "x"})
    assert "over 40 requests (0 sent in this session, 40 from the response journal" in line
