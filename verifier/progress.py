"""Progress bars of every long stage (sampling, statistics, exact search, kernel audits, reports).

One switch for the whole process: :func:`configure` (the CLI calls it from ``--progress`` /
``--no-progress``); by default bars are shown only when stdout and stderr are both terminals, so
CI logs and pipes get none.  A bar appears only after :data:`DELAY_S` seconds, so stages that end
sooner print nothing.  Bars go to stderr, with rate and ETA (tqdm).

    from verifier import progress
    with progress.bar(total=len(items), desc="statistics", unit="sets") as bar:
        for item in items:
            ...
            bar.update(1)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["configure", "enabled", "bar", "add_arguments", "from_args", "DELAY_S"]

DELAY_S = 2.0  # a stage shorter than this shows no bar (issue 16: "every stage over ~2 s")
FALLBACK_SCREEN = (80, 24)  # columns, rows of the bars where neither COLUMNS / LINES nor the terminal gives them
_MODE: bool | None = None  # None: automatic (terminal), True / False: forced by the command line


def configure(mode: bool | None) -> None:
    """Force bars on (True) or off (False) for this process; None restores the terminal check."""
    global _MODE
    _MODE = mode


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def enabled() -> bool:
    """Whether bars are shown: the forced mode, else stdout and stderr are both terminals."""
    if _MODE is not None:
        return _MODE
    return _isatty(sys.stdout) and _isatty(sys.stderr)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def bar(total: int | None, desc: str, unit: str = "it", *, initial: int = 0, leave: bool = False, show: bool | None = None):
    """A tqdm bar on stderr with rate and ETA (shown after :data:`DELAY_S` s), or a no-op when bars are off.

    Parameters
    ----------
    total : int or None
        Units of work (None: a counter without ETA).
    desc : str
        Stage name shown on the left.
    unit : str, default "it"
    initial : int, default 0
        Units already done (a resumed run).
    leave : bool, default False
        Keep the finished bar on screen.
    show : bool or None, default None
        Override :func:`enabled` for this bar (the ``progress`` argument of ``run_suite``).
    """
    on = enabled() if show is None else (show and (_MODE is not False))
    if not on:
        return _NoBar()
    from tqdm import tqdm

    ncols, nrows = _screen()
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave, file=sys.stderr,
                dynamic_ncols=ncols is None, ncols=ncols, nrows=nrows, delay=DELAY_S, mininterval=0.5)


def _screen() -> tuple[int | None, int | None]:
    """The bars' ``(ncols, nrows)``: ``COLUMNS`` / ``LINES`` when set (positive integers); None (tqdm
    follows the terminal, resized or not) when stderr is a terminal that reports that size; else
    :data:`FALLBACK_SCREEN`.  tqdm alone drew nothing on a terminal reporting 0 x 0 (a fresh pty, some
    CI consoles: a bar at row 0 of 0 rows is hidden, 0 columns wide) and ignored ``COLUMNS``."""
    import os

    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):  # no terminal, or a replaced stream
        size = os.terminal_size((0, 0))
    out = []
    for env, measured, fallback in (("COLUMNS", size.columns, FALLBACK_SCREEN[0]), ("LINES", size.lines, FALLBACK_SCREEN[1])):
        try:
            given = int(os.environ.get(env, ""))
        except ValueError:
            given = 0
        out.append(given if given > 0 else None if measured > 0 else fallback)
    return out[0], out[1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: bars only on a terminal)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--progress", dest="progress", action="store_true", default=None,
                       help="Show progress bars (rate, ETA) on stderr even when output is not a terminal.")
    group.add_argument("--no-progress", dest="progress", action="store_false",
                       help="Do not show progress bars. Default: shown only when stdout and stderr are terminals.")


def from_args(args: argparse.Namespace) -> bool:
    """Apply the command line's choice (:func:`configure`) and return whether bars are on."""
    configure(getattr(args, "progress", None))
    return enabled()
