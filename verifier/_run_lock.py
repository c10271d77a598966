"""One job writes a run folder at a time: an advisory lock on ``RUN_DIR/.specverify.lock``.

``specverify run``/``audit`` (fresh or ``--resume``) hold the lock exclusively while they sample
and write reports; ``run --shard I/N`` workers hold it shared (they write one folder together).
A second job on a locked folder is refused at once with :class:`~verifier.errors.ConfigError`
(exit 2) naming the folder and the pid holding it -- before the fix a ``--resume`` raced a job
still sampling there (e.g. the job child of a dispatcher killed by SIGKILL) and both rewrote the
reports.  The lock is ``fcntl.flock`` on an open file: the kernel drops it when the process ends,
however it ends (SIGKILL included), so a stale lock file never blocks a later resume.  A job that
ends normally removes the file while it still holds the lock (a shard worker only when it is the
last holder), so a finished run folder holds no lock file.  Where
``fcntl`` does not exist (Windows) the lock is a no-op.

Under the exclusive lock a resume removes the temporary files (``.tmp-*``) a killed writer left
(:func:`remove_stale_temp_files`): no live writer can own them then.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from verifier._resume import resume_command
from verifier.errors import ConfigError, ReportWriteError

__all__ = ["LOCK_FILE", "run_dir_lock", "remove_stale_temp_files"]

LOCK_FILE = ".specverify.lock"  # in the run folder; its content is the pid of the last exclusive holder
TEMP_PREFIX = ".tmp-"  # verifier.runner.store writes shards and JSON files as .tmp-* then os.replace

_held: dict[str, list] = {}  # resolved folder -> [fd, shared, depth]: re-entrant within one process


@contextlib.contextmanager
def run_dir_lock(run_dir: str | Path, *, shared: bool = False, optional: bool = False) -> Iterator[None]:
    """Hold the run folder's lock for the ``with`` block (created with the folder when absent).

    ``optional`` (``specverify report`` / ``merge`` reading a folder): a folder that does not exist
    is not created and one whose lock file cannot be created (read-only) is read unlocked -- no job
    can be writing there -- while a folder a job holds is still refused.

    Raises
    ------
    ConfigError
        Another process holds the lock (exit 2); the message names the folder and its pid.
    ReportWriteError
        The folder or its lock file cannot be created.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    folder = Path(run_dir)
    key = str(folder.resolve())
    if key in _held:  # this process already holds it (run_audit -> run_suite)
        _held[key][2] += 1
        try:
            yield
        finally:
            _held[key][2] -= 1
        return
    path = folder / LOCK_FILE
    if optional and not folder.is_dir():
        yield
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if optional:
            yield
            return
        raise ReportWriteError(f"cannot write run folder {str(folder)!r} (lock file {LOCK_FILE}): {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError(
            f"run folder {str(folder)!r} is being written by another specverify job{holder} (it holds {LOCK_FILE}); "
            f"allowed: wait for that job to end or stop it, then resume with `{resume_command(folder)}`, or give "
            "this job another --run-dir") from None
    if not shared:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    _held[key] = [fd, shared, 1]
    try:
        yield
    finally:
        del _held[key]
        try:  # the folder keeps no lock file: removed while still held (a shard worker: if it is the last holder)
            if shared:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
        except OSError:
            pass
        finally:
            os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


def remove_stale_temp_files(run_dir: str | Path) -> list[Path]:
    """Remove the ``.tmp-*`` files a killed writer left in ``run_dir`` and its sample folders.

    Call only under the exclusive :func:`run_dir_lock` (no other writer is alive).  Returns the
    removed paths.
    """
    folder = Path(run_dir)
    found = [*folder.glob(f"{TEMP_PREFIX}*"), *folder.glob(f"samples/*/{TEMP_PREFIX}*")]
    removed = []
    for p in found:
        try:
            if p.is_file():
                p.unlink()
                removed.append(p)
        except OSError:
            pass
    return removed
