"""A run folder this invocation created is removed again when the run fails before its first sample.

A plugin that does not load (a missing argument, a module not found), a model that does not load or
a suite value refused by the runner is a usage error (exit 2) found after ``run.json`` / ``audit.json``
were written: without this, each such error left a half-made run folder behind (issue 28).  Only
folders that did not exist when the command started are removed, only on a usage error, and only
when no sample chunk was written (a run stopped later keeps its samples for ``--resume``).
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["removed_on_usage_error"]


def _first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its ancestors that does not exist yet (None: ``path`` exists)."""
    if path.exists():
        return None
    top = path
    for parent in path.absolute().parents:
        if parent.exists():
            break
        top = parent
    return top


@contextmanager
def removed_on_usage_error(run_dir: str | Path, resume: bool = False) -> Iterator[None]:
    """Remove ``run_dir`` (and the empty parents this command made for it) when the body raises an
    exit-2 :class:`~verifier.errors.VerifierError` and the folder holds no sample chunk."""
    from verifier.errors import EXIT_USAGE, VerifierError

    run_dir = Path(run_dir).absolute()
    created = None if resume else _first_missing(run_dir)
    try:
        yield
    except VerifierError as exc:
        if created is not None and exc.exit_code == EXIT_USAGE and run_dir.is_dir() and not any(
                (run_dir / "samples").rglob("chunk-*.npz")):
            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in run_dir.parents:  # the report root / suite folders made for it, if empty
                if not str(parent).startswith(str(created)):
                    break
                try:
                    parent.rmdir()
                except OSError:
                    break
        raise
