"""Checkpointed kernel draws: a kernel audit that survives an interruption and continues its exact stream.

With ``--report-dir DIR`` a kernel audit (:func:`verifier.audit.kernel_audit.draw_kernel_samples`) writes
its emitted tokens into ``DIR/draws/`` as it draws:

* ``DIR/draws/identity.json``: what the draws are of -- kernel or engine spec, engine options, cases
  (name and a SHA-256 of their exact probs), seed, alpha, target TV, acceptance, batch size, and the
  planned ``num_draws``.  ``specverify audit --resume DIR`` rebuilds the audit from it.
* ``DIR/draws/<case>/chunk-NNNNNN.npz``: consecutive rows of emitted tokens, shape
  (rows, num_draft_tokens + 1), plus the states of the draft and kernel ``torch.Generator`` *after*
  those rows (``torch.Generator.get_state()``).  Written atomically (temp file + ``os.replace``) every
  :data:`FLUSH_SECONDS` of drawing and at the end; the rows of batches not yet flushed are written on
  an interruption too (their generator states are consistent: only whole batches are kept).

The stream is the one :func:`~verifier.audit.kernel_audit.draw_kernel_samples` draws without a
checkpoint (the same seed gives the same draws, committed reports included): a resumed audit sets
the stored generator states and draws the next batch, so its draws are bit for bit those of an
uninterrupted run.  A last *partial* batch (``num_draws`` not a multiple of the batch size) is kept in
a chunk of its own; when a resume asks for more draws it is dropped and drawn again as a full batch
(a partial batch is not a prefix of a full one).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from verifier.errors import ConfigError, invalid_argument

__all__ = ["FLUSH_SECONDS", "IDENTITY_FILE", "KernelCheckpoint", "case_digest", "is_kernel_checkpoint", "read_identity", "stored_draws"]

FLUSH_SECONDS = 5.0  # drawn rows reach disk at least this often (seconds of drawing); each flush is one small file
IDENTITY_FILE = "identity.json"
DRAWS_DIR = "draws"


def case_digest(case) -> str:
    """SHA-256 (hex) of a :class:`~verifier.audit.kernel_audit.KernelCase`'s exact target and draft probs."""
    text = json.dumps([[[str(v) for v in r] for r in case.target_probs], [[str(v) for v in r] for r in case.draft_probs]])
    return hashlib.sha256(text.encode()).hexdigest()


def is_kernel_checkpoint(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds a kernel audit's checkpointed draws (``folder/draws/identity.json``)."""
    return (Path(folder) / DRAWS_DIR / IDENTITY_FILE).is_file()


def read_identity(folder: str | os.PathLike) -> dict:
    """The stored identity of a kernel report folder's draws (``folder/draws/identity.json``).

    Raises
    ------
    ConfigError
        No kernel draws are stored there.
    """
    path = Path(folder) / DRAWS_DIR / IDENTITY_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: no kernel draws there ({path} is missing)")
    return json.loads(path.read_text())


def stored_draws(folder: str | os.PathLike, case_name: str) -> np.ndarray:
    """Every stored row of one case, in order: shape (rows, num_draft_tokens + 1), int64 (empty when none)."""
    parts = [np.load(p)["emitted"].astype(np.int64) for p in sorted((Path(folder) / DRAWS_DIR / _slug(case_name)).glob("chunk-*.npz"))]
    return np.concatenate(parts) if parts else np.empty((0, 0), dtype=np.int64)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass
class _Resumed:
    rows: list[np.ndarray]  # stored rows to keep, in order
    draft_state: torch.Tensor | None  # generator states after them (None: start from the seed)
    kernel_state: torch.Tensor | None
    next_chunk: int  # index of the next chunk file


class KernelCheckpoint:
    """The ``draws/`` folder of a kernel report folder: its identity and the chunks of every case.

    Parameters
    ----------
    report_dir : str or path
        The kernel report folder (``--report-dir``); the draws go to ``report_dir/draws``.
    identity : dict
        What the draws are of (JSON-serialisable).  ``num_draws`` is the plan and may grow on a resume;
        every other field must equal the stored one.
    resume : bool, default False
        False: the folder must hold no draws yet (a second audit into it would mix streams).  True: the
        stored identity must match.

    Raises
    ------
    ConfigError
        ``resume=False`` and draws are already stored (exit 2; continue with ``--resume``), or
        ``resume=True`` and nothing is stored.
    InvalidArgumentError
        A stored identity field differs (exit 2, naming the field, both values).
    """

    def __init__(self, report_dir: str | os.PathLike, identity: dict, *, resume: bool = False):
        self.folder = Path(report_dir) / DRAWS_DIR
        self.identity = identity
        self.resumed_rows = 0
        stored = self.folder / IDENTITY_FILE
        if stored.is_file() and not resume:
            raise ConfigError(f"--report-dir {report_dir} already holds kernel draws ({stored}); continue them with "
                              f"`specverify audit --resume {report_dir}`, or choose another --report-dir")
        if resume:
            if not stored.is_file():
                raise ConfigError(f"--resume {report_dir}: no kernel draws there ({stored} is missing)")
            old = json.loads(stored.read_text())
            check_identity(old, identity)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            _atomic_write(stored, lambda fh: fh.write((json.dumps(identity, indent=2) + "\n").encode()))
        except OSError as exc:
            raise ConfigError(f"--report-dir {report_dir}: cannot write kernel draws: {exc.strerror or exc}") from None

    def _case_dir(self, case) -> Path:
        return self.folder / _slug(case.name)

    def resume(self, case, num_draws: int, batch_size: int) -> _Resumed:
        """The stored rows of ``case`` to keep and the generator states to continue from.

        Raises
        ------
        InvalidArgumentError
            More draws are stored than ``num_draws`` asks (``--num-draws``).
        """
        chunks = sorted(self._case_dir(case).glob("chunk-*.npz"))
        rows, states, total = [], [], 0
        for path in chunks:
            with np.load(path) as z:
                rows.append(z["emitted"])
                states.append((torch.from_numpy(z["draft_state"].copy()), torch.from_numpy(z["kernel_state"].copy())))
                total += len(rows[-1])
        if total > num_draws:
            raise invalid_argument("--num-draws", num_draws, f"at least the {total} draws already stored for case {case.name}")
        if rows and total < num_draws and len(rows[-1]) % batch_size:  # a last partial batch: drawn again in full
            rows.pop(), states.pop()
            (chunks.pop()).unlink()
        draft_state, kernel_state = states[-1] if states else (None, None)
        self.resumed_rows = sum(len(r) for r in rows)  # read by audit_kernel: the rows not drawn in this session
        return _Resumed(rows, draft_state, kernel_state, len(chunks))

    def write(self, case, index: int, emitted: np.ndarray, draft_state: torch.Tensor, kernel_state: torch.Tensor) -> None:
        """Write chunk ``index`` of ``case``: rows ``emitted`` (rows, k + 1) and the generator states after them."""
        folder = self._case_dir(case)
        folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(folder / f"chunk-{index:06d}.npz",
                      lambda fh: np.savez(fh, emitted=emitted.astype(_token_dtype(case.vocab_size)), draft_state=draft_state.numpy(),
                                          kernel_state=kernel_state.numpy()))


def _token_dtype(vocab_size: int) -> type:
    """The smallest signed integer type holding token ids < ``vocab_size`` and the padding -1 (read back as int64)."""
    return next(t for t in (np.int8, np.int16, np.int32, np.int64) if vocab_size <= np.iinfo(t).max)


def check_identity(stored: dict, wanted: dict) -> None:
    """Refuse (exit 2) a resume whose identity differs from the stored one in any field but ``num_draws``.

    Raises
    ------
    InvalidArgumentError
        Naming the first differing field, the stored value as the allowed one.
    """
    for key in sorted(set(stored) | set(wanted)):
        if key != "num_draws" and stored.get(key) != wanted.get(key):
            raise invalid_argument(f"{key} (kernel draws stored)", wanted.get(key), f"the stored {stored.get(key)!r}")
