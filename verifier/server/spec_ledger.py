"""The self-reported design's speculation evidence, kept across sessions of one run folder.

A URL audit reads the server's speculation counters (``/metrics``) before and after it sends a phase's requests
(:mod:`verifier.server.metrics`).  The known-target design keeps each chunk's counter delta in the chunk's meta, so a
``--resume`` still sums what earlier processes measured.  The self-reported design has no chunks: a rerun in the same
folder reads every reply back from the journal, sends nothing, and its own before/after delta is 0 -- so the report of
the rerun lost the evidence that speculation ran (its guard then said "not observable").

:class:`SpecLedger` (``RUN_DIR/server/speculation.json``) stores the entry of every phase that sent requests, stamped
with its session; :meth:`SpecLedger.entries` returns those of earlier sessions plus this session's, in the form
:func:`verifier.runner.speculation.summarize` sums (``requests_sent`` > 0 entries carry counters; per-request figures
are counted once, on the current entry, which covers every completion).  Requests an earlier process sent without
recording its delta (it stopped mid-phase) count as replayed: no counter evidence for them, never invented.  Each stored entry is sealed with an HMAC under the response
journal's own key (:mod:`verifier.server.journal`: the same threat model -- it tells a hand-edited or copied entry
from the run's own, it is no signature) together with the sample set it is stored under; an entry whose seal does
not match (edited, copied from another run or into another set) is dropped with a note, and a repeated entry counts
once, so a forged ledger cannot make a rerun say that drafts were verified, nor inflate the figures.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["LEDGER_NAME", "SpecLedger"]

LEDGER_NAME = "server/speculation.json"


class SpecLedger:
    """Per-set speculation entries of earlier sessions (``RUN_DIR/server/speculation.json``), updated atomically.

    Parameters
    ----------
    run_dir : pathlib.Path
        The audit's run folder.  A missing or unreadable ledger starts empty (an unreadable one is named in
        :attr:`notes`, never trusted).
    journal : verifier.server.journal.Journal
        The response journal whose HMAC key seals the entries (read when an entry is sealed or checked: a new
        journal draws its key with its first line); a journal without a key (written before keys): entries are
        neither sealed nor trusted from disk.
    """

    def __init__(self, run_dir: Path, journal) -> None:
        self.path = Path(run_dir) / LEDGER_NAME
        self.notes: list[str] = []
        self._journal = journal
        self._sets: dict[str, list[dict[str, Any]]] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
                    raise ValueError("not a mapping of set ids to lists")
                self._sets = {str(k): [e for e in v if isinstance(e, dict)] for k, v in data.items()}
            except (OSError, ValueError, RecursionError) as exc:
                self.notes.append(f"{self.path}: unreadable ({exc}); the counter evidence of earlier sessions is not used")
            kept = {k: [e for e in v if self._sealed(e, k)] for k, v in self._sets.items()}
            dropped = sum(len(v) for v in self._sets.values()) - sum(len(v) for v in kept.values())
            if dropped:
                self.notes.append(f"{self.path}: {dropped} entr{'y' if dropped == 1 else 'ies'} not sealed by this run's "
                                  "journal key for its sample set (edited, copied from another set or run, or written "
                                  "without a key): not used")
            unique = {k: list({e["mac"]: e for e in reversed(v)}.values())[::-1] for k, v in kept.items()}
            repeated = sum(len(v) for v in kept.values()) - sum(len(v) for v in unique.values())
            if repeated:  # one entry per session and set is written: a copy would count its requests and drafts twice
                self.notes.append(f"{self.path}: {repeated} repeated entr{'y' if repeated == 1 else 'ies'} (the same "
                                  "session's entry more than once in its set): counted once")
            self._sets = unique

    def _mac(self, entry: dict[str, Any], set_id: str) -> str | None:
        """The entry's seal: HMAC over the entry and the sample set it is stored under (a copy into another set
        of the same run fails it)."""
        key = self._journal.key
        if not key:
            return None
        text = json.dumps({"set_id": set_id, "entry": {k: v for k, v in entry.items() if k != "mac"}}, sort_keys=True,
                          separators=(",", ":"), default=str).encode()
        return hmac.new(key, text, hashlib.sha256).hexdigest()[:32]

    def _sealed(self, entry: dict[str, Any], set_id: str) -> bool:
        mac = self._mac(entry, set_id)
        return mac is not None and hmac.compare_digest(str(entry.get("mac", "")), mac)

    def entries(self, set_id: str, current: dict[str, Any], requests: int, session: str,
                phase: str = "") -> list[dict[str, Any]]:
        """The set's entries for :func:`~verifier.runner.speculation.summarize`: earlier sessions' and this one's.

        Parameters
        ----------
        set_id : str
        phase : str, default ""
            A digest of the phase's requests (:meth:`phase_digest`): entries are kept per ``set_id`` and ``phase``, so
            a session that sent other requests under the same set id (another sampling, seed, prompt or n in the same
            run folder) is not this phase's evidence -- its counters measured other requests, perhaps another server
            configuration.
        current : dict
            This session's entry (``requests_sent`` = requests it sent; counters of its before/after; per-request
            figures over every completion of the phase).
        requests : int
            Requests of the phase (sent now, earlier, or read back).
        session : str
            :func:`verifier.runner.clock.session_id`.

        Returns
        -------
        list of dict
            Earlier entries (per-request figures zeroed: the current entry counts every completion once), a
            replay remainder (``requests_sent`` 0) for requests no entry accounts for, and the current entry with
            ``requests`` = the requests it sent.  When this session sent requests, its entry is saved.
        """
        set_id = f"{set_id}@{phase}" if phase else set_id
        earlier = [dict({k: v for k, v in e.items() if k != "mac"}, per_request_draft_tokens=0 if current.get("per_request_draft_tokens") is not None else None,
                        per_request_accepted_tokens=0 if current.get("per_request_accepted_tokens") is not None else None)
                   for e in self._sets.get(set_id, [])]
        sent_now = int(current.get("requests_sent", 0))
        now = dict(current, requests=sent_now, session=session)
        accounted = sum(int(e.get("requests", 0)) for e in earlier) + sent_now
        rest = max(0, int(requests) - accounted)
        replay = ([dict(current, requests=rest, requests_sent=0, counters=None, per_request_draft_tokens=0 if
                        current.get("per_request_draft_tokens") is not None else None, per_request_accepted_tokens=0
                        if current.get("per_request_accepted_tokens") is not None else None, session=None)]
                  if rest else [])
        if sent_now:
            stored = {k: v for k, v in now.items() if not k.startswith("per_request_")}
            stored["mac"] = self._mac(stored, set_id)
            self._sets.setdefault(set_id, []).append(stored)
            self._save()
        return earlier + replay + [now]

    @staticmethod
    def phase_digest(bodies) -> str:
        """sha256 (16 hex digits) of a phase's request bodies, in order (what its journal keys are made of)."""
        return hashlib.sha256(json.dumps(list(bodies), sort_keys=True, separators=(",", ":"),
                                         default=str).encode()).hexdigest()[:16]

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self._sets, indent=1))
        os.replace(tmp, self.path)
