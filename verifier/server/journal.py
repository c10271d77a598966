"""Every server response of a URL audit, persisted the moment it arrives (``<run_dir>/server/responses.jsonl``).

One JSON line per request: its key (a hash of everything that determines the request: dialect, model,
prompt ids, sampling, ``max_new_tokens``, the runner's chunk seed, the request's index, ``n``,
speculation switch), the body sent (no credentials: the token lives in a header), the seconds it
took and the parsed completions.  A ``--resume`` of the run reads the journal back and sends only
the requests it lacks, so nothing received is lost and nothing is resampled.  Lines are flushed to
the operating system one by one (a killed process keeps them); a torn last line (power loss) is
dropped with a note, any other unreadable line is a :class:`JournalError`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from verifier.errors import ConfigError, SamplingRefusedError
from verifier.server.dialects import Completion

__all__ = ["Journal", "JournalError", "request_key", "JOURNAL_NAME"]

JOURNAL_NAME = "server/responses.jsonl"


class JournalError(SamplingRefusedError, ConfigError):
    """The run folder's response journal is unreadable or was edited (exit 2): it names the line.  Exit 2
    also when found inside ``generate`` (a :class:`~verifier.errors.SamplingRefusedError`, which the runner
    lets through as a usage error instead of calling it a crash of the server)."""


def entry_digest(entry: dict[str, Any]) -> str:
    """sha256 (hex, 16 chars) of an entry's key, request and completions as canonical JSON: written with each
    line, so a line edited by hand (another token, a dropped completion) no longer matches it."""
    parts = {"key": entry.get("key"), "request": entry.get("request"), "completions": entry.get("completions")}
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
        if self.path is not None and self.path.is_file():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        with open(self.path, "rb") as fh:
            raw = fh.read()
        lines = raw.split(b"\n")
        others: dict[str, int] = {}  # replies recorded from another base URL (a server restarted elsewhere, or a copy)
        signed, unsigned = 0, None  # lines with a digest; the first line without one
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                completions = [Completion.from_json(c) for c in entry["completions"]]
                key = entry["key"]
                if not isinstance(key, str):
                    raise TypeError(f"key={key!r} is not a string")
                if "digest" in entry and entry["digest"] != entry_digest(entry):
                    raise ValueError(f"its digest {entry['digest']!r} does not match its content "
                                     f"({entry_digest(entry)!r}): the line was edited after it was written")
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
            if "digest" in entry:
                signed += 1
            elif unsigned is None:
                unsigned = number
            if signed and unsigned is not None:  # every line this version writes has one: its digest was removed
                raise JournalError(f"{self.path}: line {unsigned} has no digest while line(s) beside it have one (every "
                                   "line is written with its digest): the line was edited and its digest removed -- "
                                   "restore the journal or start a new run")
            recorded = entry.get("server")
            if recorded is not None and self.server is not None and recorded != self.server:
                others[recorded] = others.get(recorded, 0) + 1
            self._entries[key] = completions
            self._lines[key] = number
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
