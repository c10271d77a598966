"""An edited or foreign response journal before a resume: a JournalError (exit 2) naming the line, never
samples; replies journaled from another URL are said."""

from __future__ import annotations

import json

import pytest

from verifier.errors import EXIT_USAGE, SamplingRefusedError
from verifier.server.journal import JournalError

from tests.server.hostile import decoder, generate, hostile, ok  # noqa: F401  (hostile: a fixture)


def _journaled(hostile, tmp_path):
    s = hostile(ok)
    dec = decoder(s.url, num_concurrent=1)
    dec.bind_run_dir(tmp_path)
    generate(dec)
    dec.close()
    return s, tmp_path / "server" / "responses.jsonl"


def _edit(path, index, change):
    lines = path.read_text().splitlines(True)
    entry = json.loads(lines[index])
    change(entry)
    lines[index] = json.dumps(entry) + "\n"
    path.write_text("".join(lines))


def _resume(s, tmp_path):
    dec = decoder(s.url, num_concurrent=1)
    dec.bind_run_dir(tmp_path)
    return generate(dec)


@pytest.mark.parametrize("change, match", [
    (lambda e: e["completions"][0].update(token_ids=[4, 4, 4]), "digest"),  # another in-vocabulary row
    (lambda e: e["completions"][0].update(token_ids=[1.7, 2.2, 3.9]), "not a list of integers"),  # was int()-ed
    (lambda e: e["completions"][0].update(token_ids=["1", "2", "3"]), "not a list of integers"),
    (lambda e: e["completions"][0].update(drafted="x", accepted="y"), "draft count 'x'"),
])
def test_an_edited_journal_line_is_refused_naming_it(hostile, tmp_path, change, match):
    s, path = _journaled(hostile, tmp_path)
    _edit(path, 0, change)
    with pytest.raises(JournalError, match=rf"line 1 is not a journal entry .*{match}") as info:
        _resume(s, tmp_path)
    assert info.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("change, match", [
    (lambda e: e["completions"][0].update(token_ids=[1, 1, 1, 1, 1]), "5 tokens for max_new_tokens=3"),
    (lambda e: e.update(completions=[]), "0 completions for a request of n=1"),
    (lambda e: e["completions"][0].update(token_ids=[9, 9, 9]), r"token ids \[9, 9, 9\] outside the vocabulary"),
    (lambda e: e["completions"][0].update(token_ids=[1]), "1 of 3 tokens without ending at EOS"),
])
def test_a_journal_entry_no_reply_could_be_is_refused_without_a_digest(hostile, tmp_path, change, match):
    """Lines without a digest (a journal written before digests) are still checked against the request."""
    s, path = _journaled(hostile, tmp_path)
    for i in range(len(path.read_text().splitlines())):  # no line has a digest: an old journal
        _edit(path, i, lambda e: e.pop("digest"))
    _edit(path, 0, change)
    with pytest.raises(JournalError, match=rf"responses.jsonl:1: the journaled reply holds {match}") as info:
        _resume(s, tmp_path)
    assert info.value.exit_code == EXIT_USAGE and s.count == 4 + 2  # nothing resent before the refusal


def test_a_line_whose_digest_was_removed_beside_signed_lines_is_refused(hostile, tmp_path):
    """An in-vocabulary edit passes every content check; with its digest deleted it was read as an old journal's
    line.  Every line this version writes carries one, so a line without it beside signed lines was edited."""
    s, path = _journaled(hostile, tmp_path)
    _edit(path, 1, lambda e: (e["completions"][0].update(token_ids=[4, 4, 4]), e.pop("digest")))
    with pytest.raises(JournalError, match="line 2 has no digest while line") as info:
        _resume(s, tmp_path)
    assert info.value.exit_code == EXIT_USAGE and s.count == 4 + 2  # nothing resent before the refusal


def test_journaled_replies_from_another_url_are_said(hostile, tmp_path, capsys):
    _s, path = _journaled(hostile, tmp_path)
    other = hostile(ok)
    _resume(other, tmp_path)
    assert "4 journaled replies came from" in capsys.readouterr().out


def test_an_edited_journal_found_inside_generate_is_a_usage_error():
    """The runner passes a SamplingRefusedError raised in ``generate`` through as exit 2 (no crash verdict)."""
    assert issubclass(JournalError, SamplingRefusedError) and JournalError("x").exit_code == EXIT_USAGE
