"""Every server response of a URL audit, persisted the moment it arrives (``<run_dir>/server/responses.jsonl``).

One JSON line per request: its key (a hash of everything that determines the request: dialect, model,
prompt ids, sampling, ``max_new_tokens``, the runner's chunk seed, the request's index, ``n``,
speculation switch), the body sent (no credentials: the token lives in a header), the seconds it
took and the parsed completions.  A ``--resume`` of the run reads the journal back and sends only
the requests it lacks, so nothing received is lost and nothing is resampled.  Lines are flushed to
the operating system one by one (a killed process keeps them); a torn last line (power loss) is
dropped with a note, any other unreadable line is a :class:`JournalError`.

Each line is sealed by ``mac``, an HMAC-SHA256 of its key, request and completions under the journal's own
key: 32 random bytes drawn when the journal is created, kept beside it in ``<journal>.key`` (:data:`KEY_SUFFIX`).
A line edited by hand (its hash recomputed or not), a line copied from another run's journal (another key) or
moved to another request (another request key) no longer matches and is refused on ``--resume``.  What it cannot
stop: whoever has the folder and reads this code can re-seal a line with the key beside it; the seal tells edits
and copies from the run's own replies, it is no signature.  A journal written before keys (lines with a plain
``digest``, or none) has no key file: it is read as before, with a note that its lines are not tied to the run,
and keeps being written that way; a key file beside lines without ``mac`` is refused (the seals were removed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterable

from verifier.errors import ConfigError, SamplingRefusedError
from verifier.server.dialects import Completion

__all__ = ["Journal", "JournalError", "request_key", "JOURNAL_NAME", "KEY_SUFFIX"]

JOURNAL_NAME = "server/responses.jsonl"
KEY_SUFFIX = ".key"  # <journal>.key: the journal's HMAC key (hex), drawn when the journal is created
_KEY_BYTES = 32


class JournalError(SamplingRefusedError, ConfigError):
    """The run folder's response journal is unreadable or was edited (exit 2): it names the line.  Exit 2
    also when found inside ``generate`` (a :class:`~verifier.errors.SamplingRefusedError`, which the runner
    lets through as a usage error instead of calling it a crash of the server)."""


def _sealed_text(entry: dict[str, Any]) -> bytes:
    """The canonical JSON of what a line's seal covers: its key, request and completions."""
    parts = {"key": entry.get("key"), "request": entry.get("request"), "completions": entry.get("completions")}
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()


def entry_digest(entry: dict[str, Any]) -> str:
    """sha256 (hex, 16 chars) of an entry's key, request and completions as canonical JSON: the ``digest`` of a
    journal written before keys (read, and continued, as such); anyone can recompute it for an edited line."""
    return hashlib.sha256(_sealed_text(entry)).hexdigest()[:16]


def entry_mac(entry: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex, 32 chars) of an entry's key, request and completions under the journal's ``key``: the
    ``mac`` written with each line (module docstring)."""
    return hmac.new(key, _sealed_text(entry), hashlib.sha256).hexdigest()[:32]


def _kind(entry: dict[str, Any]) -> str:
    """How a line is sealed: "mac" (keyed), "digest" (plain hash, before keys) or "none" (before digests)."""
    return "mac" if "mac" in entry else "digest" if "digest" in entry else "none"


def request_key(parts: dict[str, Any]) -> str:
    """A stable key of one request: sha256 of its determining ``parts`` as canonical JSON (hex, 32 chars)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Journal:
    """The append-only response journal of one run folder (or an in-memory one when ``path`` is None).

    Parameters
    ----------
    path : path or None
        The JSONL file; created with its folder on the first append.
    server : str or None
        The base URL whose replies this journal holds: recorded in each entry, and an entry recorded
        from another server is a :class:`JournalError` (its replies are not this server's samples).
    """

    def __init__(self, path: str | Path | None, server: str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.server = server
        self._entries: dict[str, list[Completion]] = {}
        self._lines: dict[str, int] = {}  # key -> line number, for entries read from the file
        self.notes: list[str] = []
        self._fh = None
        self._key: bytes | None = None  # the HMAC key; None: an in-memory journal, or one written before keys
        self._kind: str | None = None  # how this journal's lines are sealed (None: no line yet -> "mac")
        if self.path is not None:
            self._key = self._read_key()
            if self.path.is_file():
                self._load()

    @property
    def key(self) -> bytes | None:
        """The journal's HMAC key (None: in memory, or a journal written before keys); other run-folder records
        sealed with it (:mod:`verifier.server.spec_ledger`) share its threat model."""
        return self._key

    @property
    def key_path(self) -> Path | None:
        """``<journal>.key``: the journal's HMAC key (None for an in-memory journal)."""
        return None if self.path is None else self.path.with_name(self.path.name + KEY_SUFFIX)

    def _read_key(self) -> bytes | None:
        path = self.key_path
        assert path is not None
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise JournalError(f"{path}: the response journal's key is unreadable ({exc}); restore it or start a new "
                               "run") from None
        try:
            key = bytes.fromhex(text)
        except ValueError:
            key = b""
        if len(key) != _KEY_BYTES:
            raise JournalError(f"{path}: not a journal key ({_KEY_BYTES} bytes as hex); restore it or start a new run")
        return key

    def _new_key(self) -> bytes:
        """Draw the key of a new journal and write it beside the journal (readable by its owner only)."""
        path = self.key_path
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(_KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another writer of this journal drew it first: use that one
            found = self._read_key()
            assert found is not None
            return found
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(key.hex() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return key

    def _check_seal(self, entry: dict[str, Any], number: int, first: tuple[str, int] | None) -> None:
        """ValueError / JournalError when line ``number``'s seal does not hold (``first``: the first line's kind and
        number; every line of a journal is sealed the same way)."""
        kind = _kind(entry)
        if first is not None and kind != first[0]:
            said = {"mac": "a keyed seal (mac)", "digest": "a plain digest", "none": "no digest"}
            raise JournalError(f"{self.path}: line {number} has {said[kind]} while line {first[1]} has "
                               f"{said[first[0]]} (every line of a journal is written the same way): the line was "
                               "edited or its seal removed -- restore the journal or start a new run")
        if kind == "mac":
            if self._key is None:
                raise JournalError(f"{self.path}: line {number} is sealed with the journal's key, but "
                                   f"{self.key_path} is missing: restore it (a journal cannot be checked, or continued, "
                                   "without it) or start a new run")
            if not hmac.compare_digest(str(entry["mac"]), entry_mac(entry, self._key)):
                raise ValueError("its seal (mac) does not match its content under this journal's key: the line was "
                                 "edited, or copied from another run's journal")
        elif kind == "digest" and entry["digest"] != entry_digest(entry):
            raise ValueError(f"its digest {entry['digest']!r} does not match its content "
                             f"({entry_digest(entry)!r}): the line was edited after it was written")
        elif self._key is not None:  # a key beside lines that carry no keyed seal: the seals were taken off
            raise JournalError(f"{self.path}: line {number} has no keyed seal (mac) while {self.key_path} holds this "
                               "journal's key (every line of a keyed journal has one): the line was edited or its "
                               "seal removed -- restore the journal or start a new run")

    def _load(self) -> None:
        assert self.path is not None
        with open(self.path, "rb") as fh:
            raw = fh.read()
        lines = raw.split(b"\n")
        others: dict[str, int] = {}  # replies recorded from another base URL (a server restarted elsewhere, or a copy)
        first: tuple[str, int] | None = None  # the first line's seal kind and number
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                completions = [Completion.from_json(c) for c in entry["completions"]]
                key = entry["key"]
                if not isinstance(key, str):
                    raise TypeError(f"key={key!r} is not a string")
                self._check_seal(entry, number, first)
            except JournalError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                last = number == len(lines) or (number == len(lines) - 1 and not lines[-1].strip())
                if last and not raw.endswith(b"\n"):  # torn final write: the request is simply sent again
                    self.notes.append(f"{self.path}: dropped a torn last line {number} (an interrupted write); "
                                      "that request is sent again")
                    with open(self.path, "r+b") as fh:
                        fh.truncate(len(raw) - len(line))
                    break
                raise JournalError(f"{self.path}: line {number} is not a journal entry ({type(exc).__name__}: {exc}); "
                                   "the response journal was edited or corrupted -- restore it or start a new run") from None
            if first is None:
                first = (_kind(entry), number)
            recorded = entry.get("server")
            if recorded is not None and self.server is not None and recorded != self.server:
                others[recorded] = others.get(recorded, 0) + 1
            self._entries[key] = completions
            self._lines[key] = number
        self._kind = first[0] if first is not None else None
        if self._kind in ("digest", "none"):
            self.notes.append(f"{self.path}: written before journals were keyed ({len(self._entries)} replies): its lines "
                              "are not tied to this run (a line edited with its digest recomputed, or copied from "
                              "another run, would not be noticed); it is continued the same way")
        for url, count in others.items():  # reused, as the same server's (restarted on another port), but said
            self.notes.append(f"{self.path}: {count} journaled replies came from {url}, not {self.server}; they are "
                              "reused as this server's samples -- if it is another server, audit it in a new run folder")

    def where(self, key: str) -> str:
        """Where ``key``'s entry came from (``path:line``, or "this session")."""
        return f"{self.path}:{self._lines[key]}" if key in self._lines else "this session"

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> list[Completion] | None:
        return self._entries.get(key)

    def append(self, key: str, request: dict[str, Any], completions: Iterable[Completion], seconds: float,
               extra: dict[str, Any] | None = None) -> None:
        """Record one reply; written and flushed before this returns."""
        completions = list(completions)
        self._entries[key] = completions
        if self.path is None:
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        entry = {"key": key, **({"server": self.server} if self.server else {}), "request": request,
                 "seconds": round(seconds, 6),
                 "completions": [c.to_json() for c in completions], **(extra or {})}
        if self._kind is None:  # a new journal: keyed
            self._kind = "mac"
            if self._key is None:
                self._key = self._new_key()
        if self._kind == "mac":
            assert self._key is not None
            entry["mac"] = entry_mac(entry, self._key)
        elif self._kind == "digest":  # a journal written before keys is continued as it was written
            entry["digest"] = entry_digest(entry)
        self._fh.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._fh.flush()

    def sync(self) -> None:
        """fsync the journal (called at the end of each ``generate`` call)."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None
