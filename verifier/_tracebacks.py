"""What a crashing plugin shows: its own traceback frames, not the harness's (``--debug``: everything).

A decoder, kernel or model factory that raises is wrapped in a :class:`verifier.errors.DecoderError`
(exit 3) ``from`` the original exception.  The CLI prints the error line, then the frames of the
original exception that lie outside the ``verifier`` package (the plugin's code and what it calls),
so the failing line of the plugin is on screen without the harness's plumbing.  ``--debug`` (or
``SPECVERIFY_DEBUG=1``) prints the full chained traceback instead.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

__all__ = ["DEBUG_ENV", "debug_enabled", "plugin_traceback", "crash_traceback", "format_error"]

DEBUG_ENV = "SPECVERIFY_DEBUG"  # "1": full tracebacks (set by --debug; inherited by the job process)
MAX_FRAMES = 12  # innermost plugin frames shown (a deep recursion is cut, the innermost frames kept)


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _package_dir() -> str:
    return str(Path(__file__).resolve().parent) + os.sep  # this module sits at the package root


def _original(exc: BaseException) -> BaseException:
    """The exception a harness wrapper was raised ``from`` (innermost explicit cause)."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


def plugin_traceback(exc: BaseException) -> str:
    """The frames of ``exc``'s original exception outside the verifier package, formatted like Python's
    traceback ('' when there are none, e.g. an error of the harness itself)."""
    orig = _original(exc)
    inside = _package_dir()
    frames = [f for f in traceback.extract_tb(orig.__traceback__)
              if not str(Path(f.filename).resolve()).startswith(inside) and not f.filename.startswith("<frozen")]
    if not frames or orig is exc:
        return ""
    frames = frames[-MAX_FRAMES:]
    lines = ["Traceback of the plugin (most recent call last; harness frames hidden, --debug shows all):\n"]
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(orig), orig)
    return "".join(lines).rstrip("\n")


def crash_traceback(exc: BaseException) -> str:
    """What a run records of a decoder crash (``stopped.json`` / report.json ``stopped[].traceback``):
    the plugin's frames, or with ``SPECVERIFY_DEBUG=1`` the full traceback."""
    from verifier.errors import printable

    if debug_enabled():
        return printable("".join(traceback.format_exception(exc)).rstrip("\n"))
    return printable(plugin_traceback(exc))


def format_error(exc: BaseException, command: str, *, debug: bool = False) -> str:
    """The CLI's error text for a :class:`VerifierError`: the message line, then the plugin's frames
    (or, with ``debug`` / ``--debug`` / ``SPECVERIFY_DEBUG=1``, the full traceback)."""
    from verifier.errors import printable

    head = printable(f"specverify {command}: error: {type(exc).__name__}: {exc}")
    if debug or debug_enabled():
        return printable("".join(traceback.format_exception(exc)).rstrip("\n")) + "\n" + head
    frames = printable(plugin_traceback(exc))
    return f"{head}\n{frames}" if frames else head
