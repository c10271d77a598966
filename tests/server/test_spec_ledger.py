"""The self-reported design's speculation ledger (``verifier.server.spec_ledger``) against hand edits.

No server: a real response journal (its first reply draws the HMAC key) and the ledger as a URL audit uses it, one
``entries(set_id, current, requests, session)`` call per sample set and session; the figures are what
``verifier.runner.speculation.summarize`` sums for the report.  Review 2026-12-03: an entry repeated three times in its
set counted three times (12 requests in a 4-request phase, 3x the drafts), and an entry copied into another set of the
same run passed the seal there (the seal covered the entry, not the set): both now dropped with a note.
"""

from __future__ import annotations

import json

import pytest

from verifier.runner.speculation import summarize
from verifier.server.dialects import Completion
from verifier.server.journal import Journal
from verifier.server.spec_ledger import LEDGER_NAME, SpecLedger


def _entry(sent: int, drafts: int) -> dict:
    return {"requests": 4, "requests_sent": sent, "required": False, "seed_honoured": None,
            "counters": {"draft_tokens": drafts, "accepted_tokens": drafts // 2, "drafts": None, "source": "metrics"},
            "per_request_draft_tokens": None, "per_request_accepted_tokens": None}


@pytest.fixture
def run(tmp_path):
    """A run folder whose first session sent set A (40 draft tokens) and set B (0: no draft verified)."""
    journal = Journal(tmp_path / "server" / "journal.jsonl", "http://127.0.0.1:1")
    journal.append("k", {"prompt": [0]}, [Completion(token_ids=(1,), finish="length")], 0.1)
    ledger = SpecLedger(tmp_path, journal)
    ledger.entries("A", _entry(4, 40), 4, "s1")
    ledger.entries("B", _entry(4, 0), 4, "s1")
    return tmp_path, journal


def _rerun(run_dir, journal, set_id):
    """A rerun's view of one set: nothing sent now (every reply read back from the journal)."""
    ledger = SpecLedger(run_dir, journal)
    summary = summarize(ledger.entries(set_id, _entry(0, 0), 4, "s2"), "s2")
    return ledger.notes, summary


def test_a_rerun_keeps_each_sets_own_evidence(run):
    notes, a = _rerun(*run, "A")
    assert notes == [] and a["requests"] == 4 and a["counters"]["draft_tokens"] == 40
    assert _rerun(*run, "B")[1]["counters"]["draft_tokens"] == 0


def test_a_repeated_entry_counts_once(run):
    run_dir, journal = run
    path = run_dir / LEDGER_NAME
    data = json.loads(path.read_text())
    data["A"] = data["A"] * 3
    path.write_text(json.dumps(data))
    notes, a = _rerun(run_dir, journal, "A")
    assert a["requests"] == 4 and a["counters"]["draft_tokens"] == 40, a
    assert any("repeated" in n for n in notes), notes


def test_an_entry_copied_into_another_set_is_not_used_there(run):
    run_dir, journal = run
    path = run_dir / LEDGER_NAME
    data = json.loads(path.read_text())
    data["B"] = data["A"]  # set B (speculation off in its phase) given set A's sealed entry
    path.write_text(json.dumps(data))
    notes, b = _rerun(run_dir, journal, "B")
    assert any("not sealed" in n for n in notes), notes
    assert not b["counters"]["draft_tokens"], b  # no counter evidence for B (the copy is dropped)
    assert _rerun(run_dir, journal, "A")[1]["counters"]["draft_tokens"] == 40


@pytest.mark.parametrize("text", ["{", "[]", '{"A": 3}', "null", '{"A": [{"mac": 5}]}'])
def test_an_unreadable_ledger_is_a_note_and_no_evidence(run, text):
    run_dir, journal = run
    (run_dir / LEDGER_NAME).write_text(text)
    notes, a = _rerun(run_dir, journal, "A")
    assert len(notes) == 1 and str(run_dir / LEDGER_NAME) in notes[0]
    assert a["counters"]["draft_tokens"] is None  # a replay only: nothing says drafts were verified


def test_a_deleted_journal_key_stops_the_audit_and_a_new_journal_trusts_no_entry(run):
    from verifier.server.journal import JournalError

    run_dir, journal = run
    journal.close()
    journal.key_path.unlink()
    with pytest.raises(JournalError, match="key"):  # the journal itself cannot be checked: no rerun, no verdict
        Journal(run_dir / "server" / "journal.jsonl", "http://127.0.0.1:1")
    journal.path.unlink()  # a fresh journal in the same folder draws a new key: the old entries are not its run's
    fresh = Journal(run_dir / "server" / "journal.jsonl", "http://127.0.0.1:1")
    fresh.append("k", {"prompt": [0]}, [Completion(token_ids=(1,), finish="length")], 0.1)
    notes, a = _rerun(run_dir, fresh, "A")
    assert any("not sealed" in n for n in notes) and a["counters"]["draft_tokens"] is None


def test_an_earlier_session_of_other_requests_is_not_this_phases_evidence(tmp_path):
    """Review 2026-12-03: entries were kept per set id (``<api>_prompt<i>``) only, so a second audit in the same folder
    with other requests (another seed, sampling or n; here against a server whose speculation is now off: its own
    delta is 0) summed the first audit's drafts and said speculation was verified for a sample none of whose requests
    speculated.  Entries are now kept per set and phase (a digest of the phase's request bodies)."""
    journal = Journal(tmp_path / "server" / "journal.jsonl", "http://127.0.0.1:1")
    journal.append("k", {"prompt": [0]}, [Completion(token_ids=(1,), finish="length")], 0.1)
    first = SpecLedger.phase_digest([{"seed": 1, "n": 4}])
    assert first == SpecLedger.phase_digest([{"n": 4, "seed": 1}]) != SpecLedger.phase_digest([{"seed": 2, "n": 4}])
    SpecLedger(tmp_path, journal).entries("A", _entry(4, 40), 4, "s1", phase=first)
    other = SpecLedger.phase_digest([{"seed": 2, "n": 4}])
    s = summarize(SpecLedger(tmp_path, journal).entries("A", _entry(4, 0), 4, "s2", phase=other), "s2")
    assert s["requests"] == 4 and s["counters"]["draft_tokens"] == 0, s  # this phase's own delta only
    again = summarize(SpecLedger(tmp_path, journal).entries("A", _entry(0, 0), 4, "s3", phase=first), "s3")
    assert again["counters"]["draft_tokens"] == 40  # a rerun of the first phase keeps its evidence


def test_a_ledger_copied_from_another_run_folder_is_not_used(run, tmp_path_factory):
    run_dir, _journal = run
    other = tmp_path_factory.mktemp("other")
    journal = Journal(other / "server" / "journal.jsonl", "http://127.0.0.1:1")  # its own key
    journal.append("k", {"prompt": [0]}, [Completion(token_ids=(1,), finish="length")], 0.1)
    (other / LEDGER_NAME).write_text((run_dir / LEDGER_NAME).read_text())
    notes, a = _rerun(other, journal, "A")
    assert any("2 entries not sealed" in n for n in notes), notes
    assert a["counters"]["draft_tokens"] is None
