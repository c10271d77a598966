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
    (lambda e: e["completions"][0].update(token_ids=[4, 4, 4]), r"seal \(mac\)"),  # another in-vocabulary row
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
    """Lines without a digest (a journal written before digests, so without a key file) are still checked against
    the request."""
    s, path = _journaled(hostile, tmp_path)
    for i in range(len(path.read_text().splitlines())):  # no line has a seal: an old journal
        _edit(path, i, lambda e: e.pop("mac"))
    path.with_name(path.name + ".key").unlink()
    _edit(path, 0, change)
    with pytest.raises(JournalError, match=rf"responses.jsonl:1: the journaled reply holds {match}") as info:
        _resume(s, tmp_path)
    assert info.value.exit_code == EXIT_USAGE and s.count == 4 + 2  # nothing resent before the refusal


def test_a_line_whose_digest_was_removed_beside_signed_lines_is_refused(hostile, tmp_path):
    """An in-vocabulary edit passes every content check; with its seal deleted it was read as an old journal's
    line.  Every line this version writes carries one, so a line without it beside sealed lines was edited."""
    s, path = _journaled(hostile, tmp_path)
    _edit(path, 1, lambda e: (e["completions"][0].update(token_ids=[4, 4, 4]), e.pop("mac")))
    with pytest.raises(JournalError, match="line 2 has no digest while line 1 has a keyed seal") as info:
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


# --------------------------------------------------------------------------- forged lines (keyed seals)


def _plain_reseal(entry):
    """What anyone can do to a line without the journal's key: recompute an unkeyed sha256 of what the seal covers
    (the recipe of the journal's plain ``digest``, written before keys) into the field the line carries."""
    import hashlib

    parts = {"key": entry.get("key"), "request": entry.get("request"), "completions": entry.get("completions")}
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()
    field = "mac" if "mac" in entry else "digest"
    entry[field] = hashlib.sha256(text).hexdigest()[:32 if field == "mac" else 16]


def test_a_forged_line_with_its_hash_recomputed_is_refused(hostile, tmp_path):
    """Before the fix each line carried a plain sha256 of its content, so a line edited by hand with the hash
    recomputed (another in-vocabulary row) was believed on resume and returned as the server's sample."""
    s, path = _journaled(hostile, tmp_path)
    _edit(path, 0, lambda e: (e["completions"][0].update(token_ids=[4, 4, 4]), _plain_reseal(e)))
    with pytest.raises(JournalError, match=r"line 1 is not a journal entry .*seal \(mac\) does not match") as info:
        _resume(s, tmp_path)
    assert info.value.exit_code == EXIT_USAGE and s.count == 4 + 2  # nothing resent, nothing returned


def test_a_line_copied_from_another_runs_journal_is_refused(hostile, tmp_path):
    """Another run of the same request (same request key) against a server that answered otherwise: its line,
    valid in its own journal and with this server's URL written in, replaces this run's line.  Before the fix its
    digest matched (it covers the line, not the run) and the other run's reply was taken as this run's sample."""
    import hashlib

    s, path = _journaled(hostile, tmp_path / "a")

    def shifted(count, body):  # another server's answers to the same requests
        rows = [[t % 4 + 1 for t in hashlib.sha256(str(body["seed"]).encode()).digest()[:body["max_tokens"]]]]
        return 200, json.dumps({"choices": [{"index": 0, "token_ids": rows[0], "finish_reason": "length"}]})

    _other, other_path = _journaled(lambda post: hostile(shifted), tmp_path / "b")
    mine, theirs = path.read_text().splitlines(True), other_path.read_text().splitlines(True)
    copied = json.loads(theirs[0])
    assert copied["key"] == json.loads(mine[0])["key"] and copied["completions"] != json.loads(mine[0])["completions"]
    copied["server"] = s.url
    mine[0] = json.dumps(copied) + "\n"
    path.write_text("".join(mine))
    with pytest.raises(JournalError, match="copied from another run's journal") as info:
        _resume(s, tmp_path / "a")
    assert info.value.exit_code == EXIT_USAGE


def test_a_keyed_journal_without_its_key_is_refused(hostile, tmp_path):
    s, path = _journaled(hostile, tmp_path)
    path.with_name(path.name + ".key").unlink()
    with pytest.raises(JournalError, match=r"line 1 is sealed with the journal's key, but .*responses.jsonl.key is "
                                           "missing") as info:
        _resume(s, tmp_path)
    assert info.value.exit_code == EXIT_USAGE


def test_an_old_unkeyed_journal_is_continued_as_written_and_said(hostile, tmp_path, capsys):
    """A journal written before keys (plain digests, no key file) still resumes: nothing resent, a note says its lines
    are not tied to the run, and the line the resume appends is written the same way (no key file appears)."""
    s, path = _journaled(hostile, tmp_path)
    from verifier.server.journal import entry_digest

    for i in range(len(path.read_text().splitlines())):  # as the version before keys wrote it
        _edit(path, i, lambda e: (e.pop("mac"), e.update(digest=entry_digest(e))))
    key = path.with_name(path.name + ".key")
    key.unlink()
    dec = decoder(s.url, num_concurrent=1)
    dec.bind_run_dir(tmp_path)
    generate(dec)  # the 4 journaled requests
    generate(dec, seed=2)  # 4 more: appended
    dec.close()
    assert "written before journals were keyed (4 replies)" in capsys.readouterr().out
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 8 and all("digest" in e and "mac" not in e for e in lines) and not key.exists()
