"""The sample store: one shard file per (sample set, chunk), written atomically as produced.

Layout of a run folder::

    RUN_DIR/run.json                                  the resolved suite, profile, seed, run id
    RUN_DIR/samples/<set_id>/chunk-000003.npz         emitted tokens of chunk 3 of one sample set
    RUN_DIR/stopped.json                              where a run stopped (decoder error), if it did

A shard holds ``tokens`` (int64, shape (num_samples, max_new_tokens), -1 after EOS),
``first_round_accepted`` (int64, shape (num_samples,), or empty when the decoder does not report
it), ``accepted_counts`` (int64, every round's accepted drafts) and ``meta`` (JSON: set key,
chunk index, seed, decoder identity).  A shard is written to a temporary file in the same folder
and moved into place with :func:`os.replace`, so a crash or SIGKILL leaves either the whole shard
or nothing.  Shards are the unit a later ``--shard I/N`` + ``merge`` splits across workers.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verifier._resume import resume_command
from verifier.errors import DecoderOutputError, ReportWriteError, StoredSampleError

__all__ = ["Shard", "SampleStore", "set_id_for", "STOP_RECORD_KEYS", "stop_records_problem"]

SHARD_FORMAT = 1  # bump when the arrays stored in a shard change


# every record of stopped.json / a shard marker's "stopped" has these (the reports and the CLI summary print them)
STOP_RECORD_KEYS = ("decoder", "type", "message", "set", "chunk", "seed", "chunks_kept_in_set", "samples_dir")


def stop_records_problem(stops: Any) -> str | None:
    """Why ``stops`` (stopped.json, or a shard marker's ``stopped``) is not a list of stop records as the runner writes
    them (None: it is): each an object with :data:`STOP_RECORD_KEYS`, a string ``decoder`` and ``set_id`` (when
    present), an integer ``chunk``.  An edited record crashed ``report`` / ``merge`` with a traceback (exit 3)."""
    if not isinstance(stops, list):
        return f"a JSON {type(stops).__name__}, not a list of stop records"
    for i, e in enumerate(stops):
        if not isinstance(e, dict):
            return f"record {i} is a JSON {type(e).__name__}, not an object"
        missing = [k for k in STOP_RECORD_KEYS if k not in e]
        if missing:
            return f"record {i} has no {', '.join(missing)}"
        if (not isinstance(e["decoder"], str) or not isinstance(e.get("set_id", ""), str)
                or isinstance(e["chunk"], bool) or not isinstance(e["chunk"], int)):
            return f"record {i} holds decoder={e['decoder']!r}, set_id={e.get('set_id')!r}, chunk={e['chunk']!r}"
    return None


def set_id_for(key: str, label: str) -> str:
    """Folder name of a sample set: a readable slug of ``label`` + 10 hex digits of ``key``'s hash."""
    import hashlib

    slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label)[:60].strip("_") or "set"
    return f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


@dataclass
class Shard:
    """One chunk of one sample set as stored on disk."""

    tokens: np.ndarray
    first_round_accepted: np.ndarray | None
    accepted_counts: np.ndarray
    meta: dict[str, Any]
    origins: np.ndarray | None = None  # optional per-token origin codes (DecoderStats.origins), int8
    logprobs: np.ndarray | None = None  # reported logprobs (the `logprob` test: generate(..., return_logprobs=True)), float64


class SampleStore:
    """Reads and writes the shards of one run folder.

    Parameters
    ----------
    run_dir : str or Path
        The run folder; created on first write.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.samples_dir = self.run_dir / "samples"

    def chunk_path(self, set_id: str, chunk_index: int) -> Path:
        return self.samples_dir / set_id / f"chunk-{chunk_index:06d}.npz"

    def write_chunk(self, set_id: str, chunk_index: int, shard: Shard) -> Path:
        """Write one shard atomically (temporary file + ``os.replace``).

        Raises
        ------
        ReportWriteError
            If the run folder cannot be written (read-only, disk full).
        """
        path = self.chunk_path(set_id, chunk_index)
        fra = shard.first_round_accepted
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    np.savez(
                        fh,
                        tokens=np.asarray(shard.tokens, dtype=np.int64),
                        first_round_accepted=np.asarray(fra if fra is not None else [], dtype=np.int64),
                        has_first_round_accepted=np.array(fra is not None),
                        accepted_counts=np.asarray(shard.accepted_counts, dtype=np.int64),
                        **({"origins": np.asarray(shard.origins, dtype=np.int8)} if shard.origins is not None else {}),
                        **({"logprobs": np.asarray(shard.logprobs, dtype=np.float64)} if shard.logprobs is not None else {}),
                        meta=np.array(json.dumps({"shard_format": SHARD_FORMAT, **shard.meta}, sort_keys=True)),
                    )
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise ReportWriteError(f"cannot write sample shard {str(path)!r}: {exc.strerror or exc}") from None
        return path

    def read_chunk(self, set_id: str, chunk_index: int) -> Shard | None:
        """The shard, or ``None`` when it is absent or unreadable (then it is sampled again)."""
        path = self.chunk_path(set_id, chunk_index)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                fra = z["first_round_accepted"] if bool(z["has_first_round_accepted"]) else None
                return Shard(z["tokens"], fra, z["accepted_counts"], meta, z["origins"] if "origins" in z.files else None,
                             z["logprobs"] if "logprobs" in z.files else None)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # truncated or corrupt shard
            return None

    def check_tokens(self, set_id: str, chunk_index: int, shard: Shard, *, max_new_tokens: int, vocab_size: int,
                     eos_token_id: int | None, stop_token_ids: tuple[int, ...] = (),
                     max_tokens: int | None = None) -> np.ndarray:
        """The shard's tokens as int64 when they are what a decoder run writes (the checks of
        :func:`verifier.validation.check_emitted_tokens`, which every chunk passed before it was
        stored), else :class:`~verifier.errors.StoredSampleError` naming the chunk file.

        A stored chunk is an input read back, not a decoder's output: -1 rows or an id outside the
        vocabulary mean the file changed after the run, so they must not become a verdict.  ``stop_token_ids`` /
        ``max_tokens``: the sample set's stop rule (padding may follow a stop token or the limit)."""
        from verifier.validation import check_emitted_tokens

        path = self.chunk_path(set_id, chunk_index)
        tokens = np.asarray(shard.tokens)
        try:
            if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
                raise DecoderOutputError(f"tokens of shape={tokens.shape}, dtype={tokens.dtype}; allowed: a 2-D "
                                         f"integer array (rows, max_new_tokens={max_new_tokens})")
            return check_emitted_tokens(tokens.astype(np.int64, copy=False), num_samples=len(tokens),
                                        max_new_tokens=max_new_tokens, vocab_size=vocab_size,
                                        eos_token_id=eos_token_id, decoder_name="it",
                                        stop_token_ids=stop_token_ids, max_tokens=max_tokens)
        except DecoderOutputError as exc:
            what = str(exc).replace("it returned invalid output in ", "", 1).replace("it returned ", "", 1)
            raise StoredSampleError(
                f"stored sample chunk {str(path)!r} is corrupt: {what} (vocab_size={vocab_size}, eos_token_id="
                f"{eos_token_id}); it was edited or damaged after the run -- delete it and run "
                f"`{resume_command(self.run_dir)}` to sample it again") from None

    def check_stats(self, set_id: str, chunk_index: int, shard: Shard, *, num_draft_tokens: int):
        """The shard's ``(first_round_accepted, accepted_counts)`` when they are what a run writes
        (:func:`verifier.validation.check_decoder_stats`: one entry per row, values in ``0..k``, -1 where
        no round ran), else :class:`~verifier.errors.StoredSampleError` naming the chunk file."""
        from verifier.validation import check_decoder_stats

        try:
            return check_decoder_stats(shard.first_round_accepted, shard.accepted_counts, num_draft_tokens=num_draft_tokens,
                                       decoder_name="it", num_samples=len(shard.tokens))
        except DecoderOutputError as exc:
            raise StoredSampleError(
                f"stored sample chunk {str(self.chunk_path(set_id, chunk_index))!r} is corrupt: "
                f"{str(exc).replace('it reported ', '', 1)}; it was edited or damaged after the run -- delete it and "
                f"run `{resume_command(self.run_dir)}` to sample it again") from None

    def check_reported(self, shard: Shard, set_id: str, chunk_index: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The shard's ``(logprobs, origins)`` when they are what a run writes, else
        :class:`~verifier.errors.StoredSampleError` naming the chunk file.

        Logprobs (the ``logprob`` test) passed :func:`verifier.validation.check_reported_logprobs` before they were
        stored (the tokens' shape; no NaN, +inf or value above ``MAX_LOGPROB`` at an emitted token); origins were
        stored only with the tokens' shape.  Either may be absent (None)."""
        from verifier.validation import check_reported_logprobs

        tokens = np.asarray(shard.tokens)
        what = None
        lps, origins = shard.logprobs, shard.origins
        if origins is not None and np.shape(origins) != tokens.shape:
            what = f"origins of shape={np.shape(origins)}; allowed: the tokens' shape {tokens.shape}"
        elif lps is not None:
            try:
                lps = check_reported_logprobs(lps, tokens, decoder_name="it")
            except DecoderOutputError as exc:
                what = str(exc).replace("it returned ", "", 1)
        if what is not None:
            raise StoredSampleError(
                f"stored sample chunk {str(self.chunk_path(set_id, chunk_index))!r} is corrupt: {what}; it was edited "
                f"or damaged after the run -- delete it and run `{resume_command(self.run_dir)}` to sample it again")
        return lps, origins

    def write_json(self, name: str, data: Any) -> Path:
        """Atomically write ``RUN_DIR/name`` as JSON."""
        path = self.run_dir / name
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".tmp-{name}")
            # insertion order, not sorted: run.json's suite must keep the TOML table order, which
            # fixes the order of sample sets and cells in resumed, regenerated and merged reports
            tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            raise ReportWriteError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        return path

    def read_json(self, name: str) -> Any:
        return json.loads((self.run_dir / name).read_text(encoding="utf-8"))
