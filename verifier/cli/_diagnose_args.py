"""``--diagnose off|auto`` (and its alias ``--no-diagnosis``) and ``--diagnose-rows`` of ``specverify run`` and ``audit``.

After BIAS DETECTED the runner diagnoses the biased decoders (which known mechanism, where; 1-2 min in the
ci suite, :mod:`verifier.diagnose.run_dir`).  A CI gate that only needs the exit code can skip it: the
verdict and exit code do not depend on it, and the report then says it was skipped and gives the
``specverify diagnose RUN_DIR`` command that computes it later.
"""

from __future__ import annotations

import argparse
import contextlib
import functools

DIAGNOSE_CHOICES = ("auto", "off")  # = verifier.diagnose.run_dir.DIAGNOSE_MODES (tested), without importing numpy here
DEFAULT_DIAGNOSE = "auto"


def rows_arg(value: str) -> int | None:
    """``--diagnose-rows`` / ``diagnose --rows``: an integer >= 1, or ``all`` (None: every row)."""
    if value.strip().lower() == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}; allowed: an integer >= 1 (distinct rows per sample set) or 'all'")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--diagnose {auto,off}`` and ``--no-diagnosis`` (= ``--diagnose off``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--diagnose", choices=DIAGNOSE_CHOICES, default=DEFAULT_DIAGNOSE,
                       help="After BIAS DETECTED: 'auto' diagnoses each biased decoder (which known mechanism, where; "
                            "printed and in the report), 'off' skips it (same verdict and exit code; run `specverify "
                            f"diagnose RUN_DIR` later). Default: {DEFAULT_DIAGNOSE}.")
    group.add_argument("--no-diagnosis", dest="diagnose", action="store_const", const="off",
                       help="Same as --diagnose off.")
    from verifier._diagnose_mode import AUTO_DIAGNOSE_DISTINCT_ROWS

    parser.add_argument("--diagnose-rows", type=rows_arg, default=AUTO_DIAGNOSE_DISTINCT_ROWS, metavar="N|all",
                        help="Rows the automatic diagnosis reads per sample set: the first ones, in generate order, through "
                             "the row that brings the distinct rows to N; 'all' reads every row. Its cost "
                             "grows with the distinct rows; `specverify diagnose RUN_DIR` reads every row. Default: "
                             f"{AUTO_DIAGNOSE_DISTINCT_ROWS}.")


@contextlib.contextmanager
def applied(args: argparse.Namespace):
    """Run a command with the process's diagnosis mode set from the parsed arguments
    (:func:`verifier._diagnose_mode.set_mode`, read by :mod:`verifier.diagnose.run_dir`), restored afterwards (in-process
    callers of ``main``); imports nothing heavy (an ``audit --engine`` starts its engine first)."""
    from verifier._diagnose_mode import AUTO_DIAGNOSE_DISTINCT_ROWS, distinct_rows, mode, set_distinct_rows, set_mode

    before, rows_before = mode(), distinct_rows()
    set_mode(getattr(args, "diagnose", None) or DEFAULT_DIAGNOSE)
    set_distinct_rows(getattr(args, "diagnose_rows", AUTO_DIAGNOSE_DISTINCT_ROWS))
    try:
        yield
    finally:
        set_mode(before)
        set_distinct_rows(rows_before)


def with_diagnose_mode(command):
    """Decorate a command's ``run(args)`` so it runs under :func:`applied` (``--diagnose`` / ``--no-diagnosis``)."""
    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        with applied(args):
            return command(args)

    return run
